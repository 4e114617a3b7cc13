//! `gen-cargo` on fixture workspaces: the generated profile tables (snapshots), byte-exact
//! preservation of everything else in the manifest, drift, ownership, bad input (exit 2,
//! nothing written) and the source scan's findings.

mod cargo_fixture;
mod fixture_tree;

use cargo_fixture::Ws;
use fixture_tree::assert_unchanged;
use similar::{ChangeTag, TextDiff};

#[track_caller]
fn ok(ws: &Ws, args: &[&str]) -> String {
    let run = ws.gen(args);
    assert_eq!(run.code, 0, "{}", run.both());
    run.stdout
}

/// Nothing but insertions between `old` and `new`: every original byte is still there.
#[track_caller]
fn only_insertions(old: &str, new: &str) {
    for change in TextDiff::from_lines(old, new).iter_all_changes() {
        // A last line without a newline gets one when a table is appended after it.
        if change.tag() == ChangeTag::Delete {
            let line = change.value();
            assert!(
                !line.ends_with('\n') && new.contains(&format!("{line}\n")),
                "removed or changed: {line:?}\n--- new\n{new}"
            );
        }
    }
}

/// The manifest without what sanpolicy owns: the `cargo-features` line it added and every
/// owned profile table (from its marker to the next table that is not one of its own).
fn outside_owned(text: &str) -> String {
    let mut out = String::new();
    let mut owned: Option<String> = None;
    for line in text.split_inclusive('\n') {
        if line.starts_with("cargo-features = [\"profile-rustflags\"]") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# sanpolicy generated profile `") {
            owned = rest.split('`').next().map(|p| format!("[profile.{p}"));
        } else if line.starts_with('[') && owned.as_ref().is_some_and(|o| !line.starts_with(o.as_str())) {
            owned = None;
        }
        if owned.is_none() {
            out.push_str(line);
        }
    }
    out
}

#[test]
fn sanitized_workspace_tables() {
    let ws = Ws::new("sanitized");
    let original = ws.read("Cargo.toml");
    let stdout = ok(&ws, &[]);
    assert!(
        stdout.contains(
            "profile `tsan` (inherits dev): rustflags -Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer"
        ),
        "{stdout}"
    );
    let manifest = ws.read("Cargo.toml");
    only_insertions(&original, &manifest);
    insta::assert_snapshot!("sanitized", manifest);
    // Up to date now: --check is clean, and a second run writes the same bytes.
    let before = ws.fingerprint();
    let check = ws.gen(&["--check"]);
    assert_eq!((check.code, check.stdout.as_str()), (0, ""), "{}", check.both());
    assert!(ok(&ws, &[]).contains("Cargo.toml was up to date"));
    assert_unchanged(&before, &ws.fingerprint(), "regenerating");
}

#[test]
fn comments_and_odd_formatting_survive_byte_for_byte() {
    let ws = Ws::new("formatting");
    let original = ws.read("Cargo.toml");
    ok(&ws, &[]);
    let first = ws.read("Cargo.toml");
    only_insertions(&original, &first);
    insta::assert_snapshot!("formatting", first);
    // The user adds a comment above the generated profile and a table after it; a policy change
    // then rewrites only the owned tables, in place.
    let edited = first.replace(
        "\n# sanpolicy generated profile",
        "\n# my note about the sanitize profile\n# sanpolicy generated profile",
    ) + "\n[workspace.metadata.after]   # added by hand after generating\nkept = 'yes'\n";
    ws.write("Cargo.toml", &edited);
    let policy = ws.read("sanitizer-policy.toml").replace("force = [\"debug-assertions\"]\n", "");
    ws.write("sanitizer-policy.toml", &policy);
    let check = ws.gen(&["--check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    insta::assert_snapshot!("formatting_drift", check.stdout);
    ok(&ws, &[]);
    let second = ws.read("Cargo.toml");
    assert_eq!(outside_owned(&second), outside_owned(&edited));
    assert!(
        second.contains("# my note about the sanitize profile\n# sanpolicy generated profile `sanitize`"),
        "{second}"
    );
    assert!(!second.contains("debug-assertions"), "{second}");
    assert!(second.ends_with("kept = 'yes'\n"), "{second}");
}

#[test]
fn version_qualified_spec_picks_one_of_two_versions() {
    let ws = Ws::new("versions");
    ok(&ws, &[]);
    let manifest = ws.read("Cargo.toml");
    assert!(manifest.contains("[profile.asan.package.\"shim@0.1.0\"]\nrustflags = []\n"), "{manifest}");
    insta::assert_snapshot!("versions", manifest);
}

#[test]
fn ambiguous_and_unknown_crates_are_bad_input() {
    let ws = Ws::new("versions");
    let policy = ws.read("sanitizer-policy.toml").replace("name = \"shim@0.1\"", "name = \"shim\"")
        + "\n[[crate]]\nname = \"shin\"\nskip = [\"asan\"]\nwhy = \"typo\"\n\n[[crate]]\nname = \"shim@0.3\"\nskip = [\"asan\"]\nwhy = \"no such version\"\n";
    ws.write("sanitizer-policy.toml", &policy);
    let before = ws.fingerprint();
    for args in [&[][..], &["--check"]] {
        let run = ws.gen(args);
        assert_eq!(run.code, 2, "{}", run.both());
        assert_unchanged(&before, &ws.fingerprint(), &format!("{args:?}"));
        if args.is_empty() {
            insta::assert_snapshot!("unknown_crates", run.both());
        }
    }
}

#[test]
fn bad_policy_entries_are_reported_with_positions() {
    let ws = Ws::new("sanitized");
    ws.write(
        "sanitizer-policy.toml",
        r#"[[profile]]
name = "release"
enable = ["asan", "kcov", "kasn"]

[[profile]]
name = "ok"
inherits = "no such"

[[crate]]
name = "exempt"
skip = ["asan"]
force = ["asan"]
item-skip = ["overflow-checks"]
why = " "

[[crate]]
name = "bad name!"
skip = ["tsan"]
why = "x"

[[crate]]
nam = "exempt"
"#,
    );
    let before = ws.fingerprint();
    let run = ws.gen(&[]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert_unchanged(&before, &ws.fingerprint(), "bad policy");
    insta::assert_snapshot!("bad_policy", run.both());
}

#[test]
fn foreign_and_hand_edited_profiles_are_not_overwritten_without_force() {
    let ws = Ws::new("sanitized");
    let mine = format!("{}\n[profile.asan]\ninherits = \"dev\"\nopt-level = 1\n", ws.read("Cargo.toml"));
    ws.write("Cargo.toml", &mine);
    let before = ws.fingerprint();
    let run = ws.gen(&[]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(
        run.stderr.contains("error[unowned-table]: `[profile.asan]` exists and was not written by sanpolicy"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("Cargo.toml:6:1"), "{}", run.stderr);
    assert_unchanged(&before, &ws.fingerprint(), "foreign profile");
    // --force takes it over.
    ok(&ws, &["--force"]);
    let owned = ws.read("Cargo.toml");
    assert!(!owned.contains("opt-level = 1") && owned.contains("# sanpolicy generated profile `asan`"), "{owned}");
    // A hand edit inside an owned table is refused (exit 1), then overwritten with --force.
    ws.write(
        "Cargo.toml",
        &owned.replace("[profile.asan]\ninherits = \"dev\"", "[profile.asan]\ninherits = \"release\""),
    );
    let before = ws.fingerprint();
    let run = ws.gen(&[]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(run.stderr.contains("error[hand-edited-block]: `[profile.asan]` was edited by hand"), "{}", run.stderr);
    assert_unchanged(&before, &ws.fingerprint(), "hand-edited profile");
    ok(&ws, &["--force"]);
    assert_eq!(ws.read("Cargo.toml"), owned);
}

#[test]
fn profiles_removed_from_the_policy_are_removed_and_profile_selects_one() {
    let ws = Ws::new("sanitized");
    ok(&ws, &[]);
    let both = ws.read("Cargo.toml");
    let policy = ws.read("sanitizer-policy.toml");
    let without_tsan =
        policy.replace("[[profile]]\nname = \"tsan\"\nenable = [\"tsan\"]\nwhy = \"find data races\"\n\n", "");
    assert_ne!(policy, without_tsan);
    ws.write("sanitizer-policy.toml", &without_tsan);
    // --profile asan leaves the other owned profile alone ...
    let run = ws.gen(&["--profile", "asan", "--check"]);
    assert_eq!(run.code, 0, "{}", run.both());
    // ... a full run removes it.
    ok(&ws, &[]);
    let only_asan = ws.read("Cargo.toml");
    assert!(!only_asan.contains("[profile.tsan") && only_asan.contains("[profile.asan]"), "{only_asan}");
    assert!(both.starts_with(&only_asan.trim_end().to_string()), "{only_asan}");
    let run = ws.gen(&["--profile", "tsan"]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stderr.contains("the policy declares no profile `tsan`"), "{}", run.stderr);
}

#[test]
fn hooks_and_sanitize_attributes_are_checked() {
    let ws = Ws::new("hooks");
    let run = ws.gen(&["--check"]);
    assert_eq!(run.code, 1, "{}", run.both());
    let filter = ws.filter();
    insta::with_settings!({ filters => vec![(filter.0.as_str(), filter.1)] }, {
        insta::assert_snapshot!("hooks_findings", run.both());
    });
    // Exempting the runtime from both mechanisms whose hooks it defines and documenting the
    // attribute makes the check pass; the UBSan handler needs nothing (rustc never calls it).
    let fixed = ws.read("sanitizer-policy.toml")
        + r#"
[[crate]]
name = "rt"
skip = ["asan", "sancov"]
why = "defines the hooks the instrumentation calls: instrumenting them recurses"

[[crate]]
name = "app"
item-skip = ["asan"]
why = "Arena::walk reads the free list inside poisoned redzones"
"#;
    ws.write("sanitizer-policy.toml", &fixed);
    let stdout = ok(&ws, &[]);
    insta::with_settings!({ filters => vec![(filter.0.as_str(), filter.1)] }, {
        insta::assert_snapshot!("hooks_fixed", format!("{stdout}--- Cargo.toml\n{}", ws.read("Cargo.toml")));
    });
    // Exempting only one of the two is still a finding.
    ws.write("sanitizer-policy.toml", &fixed.replace("skip = [\"asan\", \"sancov\"]", "skip = [\"asan\"]"));
    let run = ws.gen(&["--check"]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stderr.contains("`rt` defines the SanitizerCoverage hook `__sanitizer_cov_trace_pc`"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("__asan_load1"), "{}", run.stderr);
}

#[test]
fn xtask_needs_a_workspace_and_missing_workspaces_are_bad_input() {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let defaults = sanpolicy::cli::Defaults::xtask(scratch.path());
    let code = sanpolicy::cli::main(["cargo xtask".to_string(), "gen-cargo".to_string()], &defaults);
    assert_eq!(code, 2);
    let missing = scratch.path().join("nope");
    // An empty policy (not `/dev/null`: a device is refused as a policy, being no regular file).
    let empty = scratch.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let run = fixture_tree::run_in(
        scratch.path(),
        &["gen-cargo", "--workspace", missing.to_str().unwrap(), "--policy", empty.to_str().unwrap()],
    );
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stderr.contains("error[workspace]"), "{}", run.stderr);
    assert!(run.stderr.contains("is not a directory"), "{}", run.stderr);
}

#[test]
fn check_with_a_workspace_reports_the_same_findings() {
    let ws = Ws::new("hooks");
    let before = ws.fingerprint();
    let run = fixture_tree::run_in(ws.path(), &["check", "--workspace", "."]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stderr.contains("error[recursion-prone]: `rt` defines the AddressSanitizer hook `__asan_load1`"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("error[undocumented-attribute]"), "{}", run.stderr);
    assert!(run.stderr.contains("error[stale-file]"), "profiles not generated yet: {}", run.stderr);
    assert_unchanged(&before, &ws.fingerprint(), "check --workspace");
}
