//! The command line: exit codes (0 clean, 1 findings or drift, 2 bad input or usage), and for
//! every error a byte-exact fingerprint of the tree before and after proving nothing changed.

mod fixture_tree;

use std::fs;
use std::path::Path;

use fixture_tree::{assert_unchanged, literal, run_in, Fingerprint, Run, Tree, V6_12};
use sanpolicy::cli::{self, Defaults};
use sanpolicy::emit::checksum;
use sanpolicy::kbuild::Rules;
use sanpolicy::makefile;
use sanpolicy::policy;

/// Every command that reads the policy and the tree: the three writers and `check`.
const ALL: &[&[&str]] = &[&["gen-makefiles"], &["gen-makefiles", "--force"], &["gen-makefiles", "--check"], &["check"]];

/// Run each command in `tree`; each must exit 2 and leave every byte and mode as it was.
#[track_caller]
fn refused(tree: &Tree, commands: &[&[&str]]) -> Vec<Run> {
    let before = tree.fingerprint();
    commands
        .iter()
        .map(|args| {
            let run = tree.run(args);
            assert_eq!(run.code, 2, "{args:?}: {}", run.both());
            assert_unchanged(&before, &tree.fingerprint(), &format!("{} {args:?}", tree.name));
            run
        })
        .collect()
}

#[test]
fn usage_errors_exit_2_and_touch_nothing() {
    let tree = Tree::new("mechanisms", V6_12);
    let before = tree.fingerprint();
    for args in [
        &[][..],
        &["frobnicate"],
        &["gen-makefiles", "--bogus"],
        &["check", "stray"],
        &["gen-makefiles", "--tree"],
        &["gen-makefiles", "--tree", ".", "--out", "out"],
        &["check", "--check"],
    ] {
        let run = tree.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.both());
        assert!(
            run.stderr.contains("Usage: sanpolicy")
                || run.stderr.starts_with("error: a value is required for '--tree <DIR>'"),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(run.stdout, "", "{args:?}");
        assert_unchanged(&before, &tree.fingerprint(), &format!("{args:?}"));
    }
}

#[test]
fn help_and_version_exit_0() {
    let tree = Tree::new("mechanisms", V6_12);
    let before = tree.fingerprint();
    let help = tree.run(&["--help"]);
    assert_eq!(help.code, 0, "{}", help.both());
    for command in ["gen-makefiles", "check", "rules"] {
        assert!(help.stdout.contains(command), "{}", help.stdout);
    }
    let help = tree.run(&["gen-makefiles", "--help"]);
    assert_eq!(help.code, 0, "{}", help.both());
    assert!(
        help.stdout.contains("--check") && help.stdout.contains("--force") && help.stdout.contains("Examples:"),
        "{}",
        help.stdout
    );
    let version = tree.run(&["--version"]);
    assert_eq!((version.code, version.stdout.trim()), (0, format!("sanpolicy {}", env!("CARGO_PKG_VERSION")).as_str()));
    assert_unchanged(&before, &tree.fingerprint(), "--help/--version");
}

#[test]
fn tree_that_does_not_exist_or_is_a_file() {
    let scratch = tempfile::tempdir().unwrap();
    let missing = scratch.path().join("linux");
    let file = scratch.path().join("Makefile");
    fs::write(&file, "obj-y += a.o\n").unwrap();
    let before = Fingerprint::of(scratch.path());
    for command in [&["gen-makefiles"][..], &["gen-makefiles", "--check"], &["check"], &["rules"]] {
        for (tree, what) in [(&missing, "does not exist"), (&file, "is not a directory")] {
            let mut args = command.to_vec();
            args.extend(["--tree", tree.to_str().unwrap()]);
            let run = run_in(scratch.path(), &args);
            assert_eq!(run.code, 2, "{args:?}: {}", run.both());
            assert!(
                run.stderr.contains(&format!("error[io]: tree `{}` {what}", tree.display())),
                "{args:?}: {}",
                run.stderr
            );
            assert_unchanged(&before, &Fingerprint::of(scratch.path()), &format!("{args:?}"));
        }
    }
    let run = run_in(scratch.path(), &["check", "--tree", missing.to_str().unwrap()]);
    insta::with_settings!({ filters => vec![(literal(scratch.path()).as_str(), "[SCRATCH]")] }, {
        insta::assert_snapshot!("tree_does_not_exist", run.both());
    });
}

#[test]
fn missing_policy() {
    let tree = Tree::new("mechanisms", V6_12);
    for args in ALL {
        let runs = refused(&tree, &[&[args, &["--policy", "nope.toml"][..]].concat()]);
        assert!(runs[0].stderr.contains("error[io]: cannot read policy `nope.toml`"), "{}", runs[0].stderr);
    }
    for args in ALL {
        let runs = refused(&tree, &[&[args, &["--policy", "lib"][..]].concat()]);
        assert!(runs[0].stderr.contains("error[io]: policy `lib` is a directory"), "{}", runs[0].stderr);
    }
    // The default policy is `sanitizer-policy.toml` at the top of the tree.
    fs::remove_file(tree.join("sanitizer-policy.toml")).unwrap();
    let runs = refused(&tree, ALL);
    insta::assert_snapshot!("default_policy_missing", runs[0].both());
    for run in &runs[1..] {
        assert_eq!(run.stderr, runs[0].stderr);
    }
}

#[test]
fn explicit_policy_is_relative_to_the_working_directory() {
    let tree = Tree::new("mechanisms", V6_12);
    let elsewhere = tempfile::tempdir().unwrap();
    fs::rename(tree.join("sanitizer-policy.toml"), elsewhere.path().join("mine.toml")).unwrap();
    let run =
        run_in(elsewhere.path(), &["gen-makefiles", "--tree", tree.path().to_str().unwrap(), "--policy", "mine.toml"]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(run.stdout.starts_with("mine.toml: 4 units in 3 directories"), "{}", run.stdout);
    assert!(tree.read("lib/Makefile").contains("KASAN_SANITIZE_skipall.o := n\n"));
}

#[test]
fn tree_without_kernel_rules() {
    let tree = Tree::new("mechanisms", V6_12);
    fs::remove_file(tree.join("scripts/Makefile.lib")).unwrap();
    let runs = refused(&tree, &[ALL, &[&["rules"][..]]].concat());
    insta::assert_snapshot!("tree_without_rules", runs[0].both());
}

#[test]
fn bad_policy_is_reported_whole_and_nothing_is_written() {
    let tree = Tree::new("bad-policy", V6_12);
    let runs = refused(&tree, ALL);
    let rules = tree.run(&["rules"]);
    assert_eq!(rules.code, 0, "`rules` describes the tree and does not read the policy: {}", rules.both());
    let stderr = &runs[3].stderr;
    insta::assert_snapshot!("bad_policy", runs[3].both());
    for (code, count) in [
        ("toml-syntax", 1),
        ("unknown-key", 3),
        ("unknown-mechanism", 1),
        ("empty-reason", 1),
        ("duplicate-unit", 1),
        ("skip-and-force", 1),
        ("bad-path", 3),
        ("bad-condition", 2),
        ("unsupported", 1),
        ("unknown-variable", 1),
        ("missing-key", 2),
        ("wrong-type", 1),
    ] {
        assert_eq!(stderr.matches(&format!("error[{code}]")).count(), count, "{code}:\n{stderr}");
    }
    assert!(stderr.contains("did you mean `kasan`?") && stderr.contains("did you mean `skip`?"), "{stderr}");
    // Every problem points at file:line:col.
    assert_eq!(stderr.matches("error[").count(), stderr.matches("┌─ ./").count(), "{stderr}");
    // Every command reports the same problems: nothing stops at the first.
    for run in &runs[..3] {
        assert_eq!(run.stderr, runs[0].stderr);
        assert_eq!(run.stderr.matches("error[").count(), stderr.matches("error[").count());
    }
}

const RUNTIME: &str = "mm/runtime/Makefile";
const BEGIN: &str = "# BEGIN sanpolicy generated block: do not edit by hand\n";
const END: &str = "# END sanpolicy generated block (checksum 0000000000000000)\n";
type Breakage = fn(&Tree);

/// Each case breaks one directory of a tree that would otherwise get three new blocks: every
/// writer refuses, `--force` included, and the two healthy directories are not written either.
#[test]
fn unusable_kbuild_files_stop_every_write() {
    let cases: [(&str, Breakage); 7] = [
        ("crlf", |t| t.write(RUNTIME, b"# SPDX-License-Identifier: GPL-2.0\r\nobj-y := core.o report.o\r\n")),
        ("not-utf8", |t| t.write(RUNTIME, b"# \xff\nobj-y := core.o report.o\n")),
        ("two-begin-markers", |t| {
            t.write(RUNTIME, format!("obj-y := core.o\n{BEGIN}{BEGIN}KASAN_SANITIZE := n\n{END}").as_bytes())
        }),
        ("no-end-marker", |t| t.write(RUNTIME, format!("obj-y := core.o\n{BEGIN}KASAN_SANITIZE := n\n").as_bytes())),
        ("no-begin-marker", |t| t.write(RUNTIME, format!("obj-y := core.o\nKASAN_SANITIZE := n\n{END}").as_bytes())),
        ("missing-directory", |t| fs::remove_dir_all(t.join("mm/runtime")).unwrap()),
        ("no-kbuild-file", |t| fs::remove_file(t.join(RUNTIME)).unwrap()),
    ];
    let mut rendered = String::new();
    for (name, breakage) in cases {
        let tree = Tree::new("mechanisms", V6_12);
        breakage(&tree);
        let runs = refused(&tree, ALL);
        assert!(runs[0].stderr.ends_with("error: nothing was written\n"), "{name}: {}", runs[0].stderr);
        assert_eq!(runs[1].stderr, runs[0].stderr, "{name}: --force");
        rendered.push_str(&format!("=== {name}\n{}", runs[0].stderr));
    }
    insta::assert_snapshot!("unusable_kbuild_files", rendered);
}

#[test]
fn hand_edited_block_refuses_every_write_but_force() {
    let tree = Tree::new("hand-edited", V6_12);
    let runs = refused(&tree, &[&["gen-makefiles"]]);
    // --check reports the hand edit as drift (exit 1), like any stale block, and writes nothing.
    let before = tree.fingerprint();
    let check = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("error[hand-edited-block]"), "{}", check.stderr);
    assert_unchanged(&before, &tree.fingerprint(), "gen-makefiles --check");
    assert!(
        runs[0].stderr.contains(
            "error[hand-edited-block]: generated block was edited by hand\n  ┌─ ./kernel/locking/Makefile:6:1\n"
        ),
        "{}",
        runs[0].stderr
    );
    let forced = tree.run(&["gen-makefiles", "--force"]);
    assert_eq!(forced.code, 0, "{}", forced.both());
}

#[test]
fn check_exit_codes() {
    for (fixture, generate_first, expected) in [
        ("mechanisms", true, 0),
        ("dir-off-file-on", true, 0),
        // Drift is a finding: blocks not written yet.
        ("mechanisms", false, 1),
        // Writing refuses a line for an object with no source, so check sees it unwritten too.
        ("missing-source", false, 1),
        // Writing would newly break the requirement (a `force` the tree lacks): refused, so
        // check sees the policy unwritten and the broken requirement.
        ("broken-requirement", false, 1),
        ("outside-directives", true, 1),
        ("hand-edited", false, 1),
        ("stale-block", false, 1),
        ("bad-policy", false, 2),
    ] {
        let tree = Tree::new(fixture, V6_12);
        if generate_first {
            assert_eq!(tree.run(&["gen-makefiles"]).code, 0, "{fixture}");
        }
        let before = tree.fingerprint();
        let run = tree.run(&["check"]);
        assert_eq!(run.code, expected, "{fixture}: {}", run.both());
        assert_eq!(run.stdout, "", "{fixture}: check prints only to stderr");
        assert_unchanged(&before, &tree.fingerprint(), &format!("check on {fixture}"));
    }
}

#[test]
fn gen_check_exit_codes() {
    let tree = Tree::new("mechanisms", V6_12);
    let before = tree.fingerprint();
    let stale = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(stale.code, 1, "{}", stale.both());
    assert_eq!(stale.stdout.matches("\n+# BEGIN sanpolicy generated block").count(), 3, "{}", stale.stdout);
    // The three kbuild files, and the effective-policy snapshot beside the policy.
    assert!(
        stale.stderr.contains("error: 4 drift finding(s), 4 file(s) out of date; fix: `sanpolicy gen-makefiles`"),
        "{}",
        stale.stderr
    );
    assert_unchanged(&before, &tree.fingerprint(), "gen-makefiles --check");
    assert_eq!(tree.run(&["gen-makefiles"]).code, 0);
    let clean = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!((clean.code, clean.stdout.as_str(), clean.stderr.as_str()), (0, "", "4 generated file(s) up to date\n"));
}

#[test]
fn rules_command_lists_the_tree_rules() {
    let tree = Tree::new("mechanisms", fixture_tree::V6_1);
    let run = tree.run(&["rules"]);
    assert_eq!(run.code, 0, "{}", run.both());
    insta::assert_snapshot!("rules_6_1", run.both());
}

/// `cargo xtask` is this library with other defaults: no tree, the bundled policy, fragments.
#[test]
fn xtask_defaults_write_fragments_into_out() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let stale = out.path().join("drivers/gone/sanpolicy.mk");
    fs::create_dir_all(stale.parent().unwrap()).unwrap();
    fs::write(&stale, "# a directory the policy no longer names\n").unwrap();
    let args = ["cargo xtask", "gen-makefiles", "--out", out.path().to_str().unwrap()].map(String::from);
    assert_eq!(cli::main(args.clone(), &Defaults::xtask(repo)), cli::EXIT_OK);
    assert!(!stale.exists(), "fragments of directories the policy no longer names are removed");

    let (policy, diags) = policy::load(&repo.join("policy/linux.toml"));
    assert!(!diags.has_errors(), "{diags:?}");
    let rules = Rules::builtin();
    let written = Fingerprint::of(out.path());
    let by_dir = policy.units_by_dir();
    let mut expected: Vec<_> = by_dir.keys().map(|d| format!("{d}/sanpolicy.mk")).collect();
    expected.push("linux.effective.txt".to_string());
    expected.sort();
    assert_eq!(written.files.keys().cloned().collect::<Vec<_>>(), expected);
    for (dir, units) in by_dir {
        let text = fs::read_to_string(out.path().join(dir).join("sanpolicy.mk")).unwrap();
        assert!(text.starts_with("# Generated by `cargo xtask gen-makefiles` from "), "{dir}: {text}");
        let block = makefile::parse(&text).block.unwrap_or_else(|| panic!("{dir}: no block"));
        assert_eq!(block.recorded_checksum.as_deref(), Some(checksum(&block.body).as_str()), "{dir}");
        for unit in units {
            for id in unit.settings.keys() {
                let l = sanpolicy::emit::unit_line(unit, *id, rules.naming(*id)).unwrap();
                let line = format!("{} {} {}", l.name, l.op, l.value);
                assert!(block.body.lines().any(|b| b == line), "{dir}: `{line}` missing");
            }
        }
    }
    // A second run changes nothing, and the drift check agrees.
    assert_eq!(cli::main(args, &Defaults::xtask(repo)), cli::EXIT_OK);
    assert_eq!(Fingerprint::of(out.path()), written);
    let check = ["cargo xtask", "gen-makefiles", "--check", "--out", out.path().to_str().unwrap()].map(String::from);
    assert_eq!(cli::main(check, &Defaults::xtask(repo)), cli::EXIT_OK);
}

/// The committed snapshot of the bundled policy is what the code generates now (rust-analyzer's
/// `ensure_file_contents`): a change to the policy or to the engine that alters an effective
/// state fails here until the snapshot is regenerated and reviewed in the same commit.
#[test]
fn committed_effective_snapshot_is_current() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let policy_path = repo.join("policy/linux.toml");
    let (policy, diags) = policy::load(&policy_path);
    assert!(!diags.has_errors(), "{diags:?}");
    // The snapshot as planning computes it (nothing outside `generate` computes one): for
    // fragments, bound to no tree, as the committed one is.
    let out = tempfile::tempdir().unwrap();
    let target = sanpolicy::generate::Target::Fragments { out: out.path(), command: "cargo xtask gen-makefiles" };
    let plan = sanpolicy::generate::plan(&policy, &Rules::builtin(), &policy_path, target);
    let want = plan.snapshot.expect("a plan carries its snapshot").render(&policy_path);
    let have = fs::read_to_string(repo.join("policy/linux.effective.txt")).unwrap();
    assert!(
        have == want,
        "policy/linux.effective.txt is stale: run `cargo xtask gen-makefiles` and commit it\n{}",
        similar::TextDiff::from_lines(&have, &want).unified_diff().header("committed", "generated")
    );
    // The header names the policy and the command the same way whoever writes it.
    assert!(have.starts_with("# Effective instrumentation of linux.toml; generated by `sanpolicy gen-makefiles`"));
}
