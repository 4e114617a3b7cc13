//! Every `help:` line, followed literally, fixes the problem or moves it forward: the cases of
//! issue 9 point 7 that the real-tree tests (tests/round_trip.rs: hand-added line, unsynced
//! merge, stale directive, hand-edited block) do not already follow, on a small in-place tree.

mod fixture_tree;

use std::fs;
use std::path::Path;

use fixture_tree::{run_in, Run};

/// A tree with 6.12's rule files, `lib/a.c`, `lib/b.c` and `lib/Makefile` as given.
fn tree(makefile: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("sanpolicy-help-").tempdir().unwrap();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules/linux-6.12/scripts");
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    fs::create_dir_all(dir.path().join("lib")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), dir.path().join("scripts").join(f)).unwrap();
    }
    for f in ["a.c", "b.c"] {
        fs::write(dir.path().join("lib").join(f), "").unwrap();
    }
    fs::write(dir.path().join("lib/Makefile"), makefile).unwrap();
    dir
}

fn help(run: &Run) -> Vec<String> {
    run.stderr.lines().filter_map(|l| l.trim_start().strip_prefix("= help: ")).map(str::to_string).collect()
}

const MAKEFILE: &str = "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\n";

/// A line the tree lost: check says the tree moved and to run sync; sync drops the unit; then
/// check and `gen-makefiles --check` pass, and sync changed no kbuild byte.
#[test]
fn a_hand_removed_line_is_taken_back_by_sync() {
    let t = tree(MAKEFILE);
    assert_eq!(run_in(t.path(), &["import", "--adopt"]).code, 0);
    fs::write(t.path().join("lib/Makefile"), "obj-y := a.o b.o\n").unwrap();
    let check = run_in(t.path(), &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("is gone from `lib/Makefile`"), "{}", check.both());
    let hints = help(&check);
    assert!(hints.iter().any(|h| h.contains("run `sanpolicy sync` to drop the unit")), "{hints:?}");
    let write = run_in(t.path(), &["gen-makefiles"]);
    assert_eq!(write.code, 2, "writing would put the removed line back unasked: {}", write.both());
    let sync = run_in(t.path(), &["sync"]);
    assert_eq!(sync.code, 0, "{}", sync.both());
    assert!(sync.stderr.contains("removed: lib/a.o kasan"), "{}", sync.both());
    assert_eq!(fs::read_to_string(t.path().join("lib/Makefile")).unwrap(), "obj-y := a.o b.o\n");
    assert!(!fs::read_to_string(t.path().join("sanitizer-policy.toml")).unwrap().contains("lib/a.o"));
    for args in [&["check"][..], &["gen-makefiles", "--check"][..]] {
        let run = run_in(t.path(), args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.both());
    }
}

/// A flag-removal line sanpolicy cannot stand for (an inline comment keeps a blank in the value):
/// check's help offers two ways, and each works when followed.
#[test]
fn an_unmanaged_cflags_remove_line_is_rewritten_or_acknowledged() {
    let odd = format!("{MAKEFILE}CFLAGS_REMOVE_b.o = -pg # keep b untraced\n");
    for way in ["rewrite", "acknowledge"] {
        let t = tree(&odd);
        assert_eq!(run_in(t.path(), &["import", "--adopt"]).code, 0);
        let check = run_in(t.path(), &["check"]);
        assert_eq!(check.code, 1, "{}", check.both());
        assert!(check.stderr.contains("error[unrepresentable]: `CFLAGS_REMOVE_b.o` is decided outside the policy"));
        let hints = help(&check);
        assert!(
            hints.iter().any(|h| h.contains("rewrite it as a plain line") && h.contains("run `sanpolicy sync`")),
            "{hints:?}"
        );
        if way == "rewrite" {
            // As the help says: a plain line (the reason goes in a comment above), then sync.
            let plain = format!("{MAKEFILE}# keep b untraced\nCFLAGS_REMOVE_b.o = -pg\n");
            fs::write(t.path().join("lib/Makefile"), plain).unwrap();
            let sync = run_in(t.path(), &["sync"]);
            assert_eq!(sync.code, 0, "{}", sync.both());
            let policy = fs::read_to_string(t.path().join("sanitizer-policy.toml")).unwrap();
            assert!(policy.contains("path = \"lib/b.o\"") && policy.contains("ftrace = \"-pg\""), "{policy}");
            assert!(policy.contains("keep b untraced"), "the comment is the reason:\n{policy}");
        } else {
            let policy = t.path().join("sanitizer-policy.toml");
            let mut text = fs::read_to_string(&policy).unwrap();
            text.push_str("\n[[acknowledge]]\ncode = \"unrepresentable\"\npath = \"lib/b.o\"\nmechanism = \"ftrace\"\nwhy = \"upstream's line\"\n");
            fs::write(&policy, text).unwrap();
        }
        let check = run_in(t.path(), &["check"]);
        assert_eq!(check.code, 0, "{way}: {}", check.both());
        assert!(check.stderr.contains("check ok:"), "{way}: {}", check.both());
        let ci = run_in(t.path(), &["gen-makefiles", "--check"]);
        assert_eq!(ci.code, 0, "{way}: {}", ci.both());
    }
}
