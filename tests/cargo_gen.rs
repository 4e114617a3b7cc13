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

/// The real-world workspace of issue 11 (serde with serde_derive, smallvec, parking_lot, itoa 0.4
/// and 1) with `hooks`, a member exporting sanitizer callbacks through `cfg_attr`.
fn registry() -> Ws {
    Ws::new("registry")
}

#[test]
fn hooks_exported_through_cfg_attr_are_found_and_a_run_with_findings_writes_nothing() {
    let ws = registry();
    // Without its `[[crate]]` entry the hooks crate is instrumented with the ASan it implements.
    let policy = ws.read("sanitizer-policy.toml");
    let cut = policy.find("[[crate]]\nname = \"hooks\"").unwrap();
    let rest = &policy[cut..];
    let next = rest[1..].find("[[crate]]").map_or(rest.len(), |i| i + 1);
    ws.write("sanitizer-policy.toml", &format!("{}{}", &policy[..cut], &rest[next..]));
    let before = ws.fingerprint();
    let run = ws.gen(&[]);
    assert_eq!(run.code, 1, "{}", run.both());
    // One error per crate and mechanism, at its first hook.
    assert!(
        run.stderr.contains(
            "error[recursion-prone]: `hooks` defines the AddressSanitizer hook `__asan_on_error`, and profile `asan` instruments it"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hooks/src/lib.rs:5:19"), "{}", run.stderr);
    assert!(run.stderr.contains("error: nothing was written"), "{}", run.stderr);
    assert!(!run.stdout.contains("written"), "{}", run.stdout);
    assert_unchanged(&before, &ws.fingerprint(), "a run with findings");
    // With the entry, the summary lists all three (the SanitizerCoverage one through a nested
    // cfg_attr) and the manifest is written.
    ws.write("sanitizer-policy.toml", &policy);
    let stdout = ok(&ws, &[]);
    for symbol in ["__asan_on_error", "__asan_default_options", "__sanitizer_cov_trace_pc"] {
        assert!(stdout.contains(&format!("hook: hooks 0.1.0 defines `{symbol}`")), "{symbol}: {stdout}");
    }
}

#[test]
fn plain_no_mangle_hooks_left_instrumented_write_nothing() {
    let ws = Ws::new("hooks");
    let before = ws.fingerprint();
    let run = ws.gen(&[]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(run.stderr.contains("error[recursion-prone]: `rt` defines the AddressSanitizer hook `__asan_load1`"));
    assert!(run.stderr.contains("error: nothing was written"), "{}", run.stderr);
    assert_unchanged(&before, &ws.fingerprint(), "recursion-prone crate");
}

#[test]
fn forcing_a_sanitizer_on_a_proc_macro_crate_is_refused() {
    let ws = registry();
    let policy = ws.read("sanitizer-policy.toml")
        + "\n[[crate]]\nname = \"serde_derive\"\nforce = [\"asan\"]\nwhy = \"instrument the derive too\"\n";
    ws.write("sanitizer-policy.toml", &policy);
    let before = ws.fingerprint();
    let run = ws.gen(&[]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(
        run.stderr
            .contains("error[proc-macro-crate]: `serde_derive` is a proc-macro crate: rustc loads it into itself"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("undefined symbol: __asan_option_detect_stack_use_after_return"), "{}", run.stderr);
    let line = policy.lines().position(|l| l == "force = [\"asan\"]").unwrap() + 1;
    assert!(run.stderr.contains(&format!("sanitizer-policy.toml:{line}:10")), "{}", run.stderr);
    assert!(run.stderr.contains("help: remove `\"asan\"` from `force`"), "{}", run.stderr);
    assert_unchanged(&before, &ws.fingerprint(), "forcing a proc macro");
    // sancov too; coverage's runtime is linked into the proc macro, so it loads.
    ws.write(
        "sanitizer-policy.toml",
        &policy.replace("force = [\"asan\"]\nwhy", "force = [\"sancov\", \"coverage\"]\nwhy"),
    );
    let before = ws.fingerprint();
    let run = ws.gen(&[]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert_eq!(run.stderr.matches("error[proc-macro-crate]").count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("forcing `sancov` on it"), "{}", run.stderr);
    assert_unchanged(&before, &ws.fingerprint(), "forcing sancov on a proc macro");
    // Skipping a proc macro is harmless (it is never instrumented anyway).
    ws.write("sanitizer-policy.toml", &policy.replace("force = [\"asan\"]\nwhy", "skip = [\"asan\"]\nwhy"));
    ok(&ws, &[]);
}

#[test]
fn a_sanitizer_forced_on_a_library_alone_warns_naming_the_binary() {
    let ws = Ws::new("sanitized");
    let policy = "[[profile]]\nname = \"plain\"\nenable = []\n\n[[crate]]\nname = \"base\"\nforce = [\"asan\"]\nwhy = \"only base\"\n";
    ws.write("sanitizer-policy.toml", policy);
    let run = ws.gen(&[]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(
        run.stderr.contains(
            "warning[unlinked-runtime]: profile `plain` does not enable `asan`, so forcing it on `base` leaves binary `app` (package app) without the AddressSanitizer runtime"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("sanitizer-policy.toml:7:10"), "{}", run.stderr);
    // Forced on the crate that links the binary too, or enabled by the profile: no warning.
    for fixed in [
        format!("{policy}\n[[crate]]\nname = \"app\"\nforce = [\"asan\"]\nwhy = \"links the runtime\"\n"),
        policy.replace("enable = []", "enable = [\"asan\"]"),
    ] {
        ws.write("sanitizer-policy.toml", &fixed);
        let run = ws.gen(&[]);
        assert_eq!(run.code, 0, "{}", run.both());
        assert!(!run.stderr.contains("unlinked-runtime"), "{fixed}\n{}", run.stderr);
    }
}

#[test]
fn exempt_crates_with_a_generic_api_are_listed_and_the_limit_is_in_the_comment() {
    let ws = registry();
    let stdout = ok(&ws, &[]);
    let limit = stdout.lines().find(|l| l.starts_with("limit: ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(limit.starts_with("limit: smallvec 1.16.6 skips asan, but "), "{limit}");
    assert!(limit.ends_with("are compiled into the crates calling them and instrumented there"), "{limit}");
    let count: usize = limit["limit: smallvec 1.16.6 skips asan, but ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{limit}"));
    // SmallVec<A> is generic over its array: push, insert, extend, … are all monomorphised.
    assert!(count > 50, "{limit}");
    // `hooks` is exempt too, but its API is not generic.
    assert_eq!(stdout.matches("limit: ").count(), 1, "{stdout}");
    let manifest = ws.read("Cargo.toml");
    let note = "# smallvec 1.16.6: skip asan\n# Its generic and #[inline] code is compiled into the crates calling it, and instrumented there.\n";
    assert!(manifest.contains(note), "{manifest}");
}

#[test]
fn reserved_profile_names_have_their_own_code() {
    let ws = Ws::new("sanitized");
    for name in ["dev", "release", "test", "bench"] {
        ws.write("sanitizer-policy.toml", &format!("[[profile]]\nname = \"{name}\"\nenable = [\"asan\"]\n"));
        let before = ws.fingerprint();
        let run = ws.gen(&[]);
        assert_eq!(run.code, 2, "{}", run.both());
        assert!(
            run.stderr.contains(&format!(
                "error[reserved-profile]: `{name}` is a profile Cargo defines; sanpolicy only writes custom profiles"
            )),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("bad-path"), "{}", run.stderr);
        assert_unchanged(&before, &ws.fingerprint(), name);
    }
}

/// One meaning per code (issue 11, point 6): a malformed profile or crate name is not a bad
/// path, and a profile or crate named twice is not a duplicate unit.
#[test]
fn profile_and_crate_names_have_codes_of_their_own() {
    let ws = Ws::new("sanitized");
    let twice = |entry: &str| format!("{entry}\n{entry}");
    let profile = "[[profile]]\nname = \"asan\"\nenable = [\"asan\"]\n";
    let krate = "[[crate]]\nname = \"base\"\nskip = [\"asan\"]\nwhy = \"x\"\n";
    for (policy, code, message) in [
        (twice(profile), "duplicate-profile", "profile `asan` is declared twice"),
        (format!("{profile}\n{}", twice(krate)), "duplicate-crate", "`base` is named twice"),
        (
            profile.replace("\"asan\"\nenable", "\"no such\"\nenable"),
            "bad-profile-name",
            "`no such` is not a Cargo profile name",
        ),
        (
            format!("{profile}\n{}", krate.replace("\"base\"", "\"bad name!\"")),
            "bad-crate-name",
            "`bad name!` is not a package name",
        ),
    ] {
        ws.write("sanitizer-policy.toml", &policy);
        let before = ws.fingerprint();
        let run = ws.gen(&[]);
        assert_eq!(run.code, 2, "{policy}\n{}", run.both());
        assert!(run.stderr.contains(&format!("error[{code}]: {message}")), "{policy}\n{}", run.stderr);
        assert!(!run.stderr.contains("duplicate-unit") && !run.stderr.contains("bad-path"), "{}", run.stderr);
        assert_unchanged(&before, &ws.fingerprint(), code);
    }
}

#[test]
fn removing_the_last_profile_removes_the_generated_tables() {
    let ws = Ws::new("sanitized");
    // A trailing comment belongs to the table above it, not under the generated tables.
    let original = ws.read("Cargo.toml") + "\n# about the workspace above\n";
    ws.write("Cargo.toml", &original);
    ok(&ws, &[]);
    let generated = ws.read("Cargo.toml");
    let comment = generated.find("# about the workspace above").unwrap();
    let marker = generated.find("# sanpolicy generated profile").unwrap();
    assert!(comment < marker, "the comment moved under the generated tables:\n{generated}");
    only_insertions(&original, &generated);
    // The policy keeps its crate entries but no profile: every owned table goes, and with it
    // nothing of the user's; `cargo-features` stays (gen-cargo never removes a feature).
    let policy = ws.read("sanitizer-policy.toml");
    let crates = &policy[policy.find("[[crate]]").unwrap()..];
    ws.write("sanitizer-policy.toml", crates);
    let stdout = ok(&ws, &[]);
    assert!(stdout.contains("Cargo.toml written"), "{stdout}");
    // Below the file's leading comment, with a blank line before the first table.
    let header = "# A workspace with one deliberate heap out-of-bounds read and one data race per crate.\n";
    let kept = original.replacen(header, &format!("{header}cargo-features = [\"profile-rustflags\"]\n\n"), 1);
    assert_eq!(ws.read("Cargo.toml"), kept);
    assert_eq!(ws.gen(&["--check"]).code, 0);
}

#[test]
fn from_a_member_directory_the_policy_and_manifest_are_the_workspace_roots() {
    let ws = registry();
    let member = ws.read("app/Cargo.toml");
    let run = fixture_tree::run_in(&ws.path().join("app/src"), &["gen-cargo"]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(ws.read("Cargo.toml").contains("[profile.asan.package.smallvec]"), "{}", run.both());
    assert_eq!(ws.read("app/Cargo.toml"), member);
    assert!(!ws.path().join("app/sanitizer-policy.toml").exists());
    let check = fixture_tree::run_in(&ws.path().join("hooks"), &["gen-cargo", "--check"]);
    assert_eq!(check.code, 0, "{}", check.both());
    // `check --workspace MEMBER` reads the same policy.
    let check = fixture_tree::run_in(ws.path(), &["check", "--workspace", "app"]);
    assert_eq!(check.code, 0, "{}", check.both());
    assert!(check.stderr.contains("sanitizer-policy.toml: 0 unit(s)"), "{}", check.stderr);
}

#[test]
fn crlf_line_endings_and_a_byte_order_mark_are_kept() {
    let ws = Ws::new("sanitized");
    let lf = ws.read("Cargo.toml");
    // CRLF throughout, one LF line kept as it is, a BOM, and no final newline.
    let crlf = format!("\u{feff}{}", lf.replace('\n', "\r\n").replacen("\r\n", "\n", 1).trim_end());
    ws.write("Cargo.toml", &crlf);
    let before = ws.fingerprint();
    ok(&ws, &[]);
    let after = ws.fingerprint();
    assert_eq!(before.differences(&after), ["Cargo.toml"]);
    let new = String::from_utf8(after.files["Cargo.toml"].1.clone()).unwrap();
    // The byte order mark stays on the user's first line; the feature goes below that comment.
    assert!(
        new.starts_with("\u{feff}# A workspace with one deliberate heap out-of-bounds read and one data race per crate.\ncargo-features = [\"profile-rustflags\"]\r\n\r\n[workspace]"),
        "{new:?}"
    );
    // Every original line is there with its own ending (the last one gains a CRLF), and every
    // written line ends in CRLF.
    let body = crlf.trim_start_matches('\u{feff}');
    let without_feature = new.replacen("cargo-features = [\"profile-rustflags\"]\r\n\r\n", "", 1);
    assert!(without_feature.contains(&format!("{body}\r\n")), "{new:?}");
    let lone_lf = new.match_indices('\n').filter(|(i, _)| !new[..*i].ends_with('\r')).count();
    assert_eq!(lone_lf, 1, "{new:?}");
    assert!(new.contains("[profile.asan]\r\ninherits = \"dev\"\r\n"), "{new:?}");
    // Up to date on the next run, byte for byte.
    let check = ws.gen(&["--check"]);
    assert_eq!(check.code, 0, "{}", check.both());
    ok(&ws, &[]);
    assert_unchanged(&after, &ws.fingerprint(), "regenerating a CRLF manifest");
}
