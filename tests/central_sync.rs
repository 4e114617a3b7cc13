//! `sync` reads the tree as Kbuild does in the central and block layouts (issue 9 point 3): in
//! the central layout a directory's section of `scripts/Makefile.sanpolicy` is read after the
//! directory's own lines, so its lines are what the tree says for the variables they set (a
//! policy override is no drift, a hand edit there is taken back like a hand-edited block), and
//! a line a merge adds to a directory's Makefile is taken in as in the in-place layout. A
//! hand-edited block (block layout) is taken back too, not dropped. Small trees with 6.12's rule
//! files; every step runs the real binary.

mod fixture_tree;

use std::fs;

use fixture_tree::{all_green, edit, git, ok, read, run_in};

const CENTRAL: &str = "scripts/Makefile.sanpolicy";

/// A tree with 6.12's rule files, `lib/a.c`, `lib/b.c` and `lib/Makefile` as given.
fn tree(makefile: &str) -> tempfile::TempDir {
    fixture_tree::rules_tree("sanpolicy-central-sync-", makefile)
}

const MAKEFILE: &str = "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\n";

fn adopt_central(makefile: &str) -> tempfile::TempDir {
    let t = tree(makefile);
    ok(t.path(), &["import", "--adopt", "--layout", "central"]);
    let central = read(t.path(), CENTRAL);
    assert!(
        makefile != MAKEFILE || central.contains("ifeq ($(obj),lib)\n# A reason.\nKASAN_SANITIZE_a.o := n\nendif\n")
    );
    assert!(central.contains("ifeq ($(obj),lib)\n"), "{central}");
    assert_eq!(read(t.path(), "lib/Makefile"), makefile, "central adoption touches no subsystem Makefile");
    all_green(t.path(), "adopted");
    t
}

/// The policy overrides a directory's own line through the central file (force where the
/// Makefile skips): the central file's value is what Kbuild uses, so the tree agrees with the
/// policy and sync has nothing to take back.
#[test]
fn a_central_override_of_a_directory_line_is_in_sync() {
    let t = adopt_central(MAKEFILE);
    let p = t.path();
    edit(p, "sanitizer-policy.toml", "skip = [\"kasan\"]", "force = [\"kasan\"]");
    ok(p, &["gen-makefiles"]);
    assert!(read(p, CENTRAL).contains("KASAN_SANITIZE_a.o := y\n"), "{}", read(p, CENTRAL));
    assert_eq!(read(p, "lib/Makefile"), MAKEFILE);
    all_green(p, "override");
    let before = read(p, "sanitizer-policy.toml");
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("nothing to take back"), "{}", sync.both());
    assert_eq!(read(p, "sanitizer-policy.toml"), before);
}

/// A merge adds a commented directive to a directory's Makefile: `check` flags it and names
/// sync, sync takes it in with its comment as the reason and changes no kbuild byte, and after
/// `gen-makefiles` (the central file gains the line) everything is green.
#[test]
fn a_directory_line_a_merge_adds_is_taken_into_a_central_policy() {
    let t = adopt_central(MAKEFILE);
    let p = t.path();
    let merged = format!("{MAKEFILE}\n# Upstream's reason for b.\nKCOV_INSTRUMENT_b.o := n\n");
    fs::write(p.join("lib/Makefile"), &merged).unwrap();
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("sanpolicy sync"), "{}", check.both());
    let central = read(p, CENTRAL);
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("added: lib/b.o kcov"), "{}", sync.both());
    assert_eq!((read(p, "lib/Makefile"), read(p, CENTRAL)), (merged.clone(), central), "sync changed a kbuild file");
    let policy = read(p, "sanitizer-policy.toml");
    assert!(policy.contains("path = \"lib/b.o\"") && policy.contains("Upstream's reason for b."), "{policy}");
    ok(p, &["gen-makefiles"]);
    assert!(read(p, CENTRAL).contains("KCOV_INSTRUMENT_b.o := n\n"), "{}", read(p, CENTRAL));
    assert_eq!(read(p, "lib/Makefile"), merged);
    all_green(p, "merged");
}

/// A hand edit inside the central file (a line added to a section, a value changed): `check`
/// flags it, `gen-makefiles` refuses to overwrite it, and its fix, followed as printed, works:
/// sync takes the section's lines back into the policy (no kbuild byte changed), then plain
/// `gen-makefiles` rewrites the file from the policy, which now says the same (nothing is lost,
/// so no `--force`), and all is green.
#[test]
fn a_hand_edited_central_section_is_taken_back_by_sync() {
    let t = adopt_central(MAKEFILE);
    let p = t.path();
    edit(
        p,
        CENTRAL,
        "KASAN_SANITIZE_a.o := n\nendif\n",
        "KASAN_SANITIZE_a.o := y\n\n# Hand-written reason for b.\nKCOV_INSTRUMENT_b.o := n\nendif\n",
    );
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("edited by hand"), "{}", check.both());
    let write = run_in(p, &["gen-makefiles"]);
    assert_eq!(write.code, 2, "the hand edit must not be overwritten unasked: {}", write.both());
    assert!(write.stderr.ends_with("error: nothing was written; fix: `sanpolicy sync`\n"), "{}", write.both());
    let edited = read(p, CENTRAL);
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("added: lib/b.o kcov"), "{}", sync.both());
    assert!(sync.stderr.contains("changed: lib/a.o kasan"), "{}", sync.both());
    assert_eq!(
        (read(p, CENTRAL), read(p, "lib/Makefile")),
        (edited, MAKEFILE.to_string()),
        "sync changed a kbuild file"
    );
    let policy = read(p, "sanitizer-policy.toml");
    assert!(policy.contains("force = [\"kasan\"]"), "{policy}");
    assert!(policy.contains("path = \"lib/b.o\"") && policy.contains("Hand-written reason for b."), "{policy}");
    ok(p, &["gen-makefiles"]);
    let central = read(p, CENTRAL);
    assert!(
        central.contains("KASAN_SANITIZE_a.o := y\n") && central.contains("KCOV_INSTRUMENT_b.o := n\n"),
        "{central}"
    );
    all_green(p, "taken back");
}

/// Block layout: a line added by hand inside the generated block is taken back by sync, and the
/// block's other lines stay in the policy (the block is read, not skipped as unreadable).
#[test]
fn a_hand_edited_block_is_taken_back_by_sync() {
    let t = tree(MAKEFILE);
    let p = t.path();
    ok(p, &["import", "--adopt", "--layout", "block"]);
    edit(
        p,
        "lib/Makefile",
        "KASAN_SANITIZE_a.o := n\n",
        "KASAN_SANITIZE_a.o := n\n# Hand-written.\nKCOV_INSTRUMENT_b.o := n\n",
    );
    let edited = read(p, "lib/Makefile");
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("added: lib/b.o kcov"), "{}", sync.both());
    assert!(!sync.stderr.contains("removed:"), "{}", sync.both());
    assert_eq!(read(p, "lib/Makefile"), edited, "sync changed a kbuild file");
    let policy = read(p, "sanitizer-policy.toml");
    assert!(policy.contains("path = \"lib/a.o\"") && policy.contains("path = \"lib/b.o\""), "{policy}");
    ok(p, &["gen-makefiles", "--force"]);
    let block = read(p, "lib/Makefile");
    assert!(block.contains("KASAN_SANITIZE_a.o := n\n") && block.contains("KCOV_INSTRUMENT_b.o := n\n"), "{block}");
    all_green(p, "block taken back");
}

/// The hook judges a central-layout tree as CI does: the staged central file and Makefile.build
/// are read with every unit. Before, it planned only the staged directory's units in a scratch
/// copy without `scripts/`, so it blocked the adoption commit and every later kbuild edit.
#[test]
fn the_hook_judges_the_central_layout_as_ci_does() {
    let t = adopt_central(MAKEFILE);
    let p = t.path();
    let hook = |what: &str, want: i32| {
        let run = run_in(p, &["pre-commit"]);
        assert_eq!(run.code, want, "{what}: {}", run.both());
        run
    };
    git(p, &["init", "-q"]);
    git(p, &["add", "-A"]);
    hook("the adoption", 0);
    git(p, &["commit", "-q", "--no-verify", "-m", "adopt"]);
    // An ordinary kbuild edit.
    fs::write(p.join("lib/c.c"), "").unwrap();
    edit(p, "lib/Makefile", "obj-y := a.o b.o\n", "obj-y := a.o b.o c.o\n");
    git(p, &["add", "-A"]);
    hook("a kbuild edit without directives", 0);
    git(p, &["commit", "-q", "--no-verify", "-m", "c"]);
    // A hand-added directive, as CI would see it.
    edit(p, "lib/Makefile", "KASAN_SANITIZE_a.o := n\n", "KASAN_SANITIZE_a.o := n\nKCOV_INSTRUMENT_b.o := n\n");
    git(p, &["add", "-A"]);
    let blocked = hook("a hand-added directive", 1);
    assert!(blocked.stderr.contains("KCOV_INSTRUMENT_b.o"), "{}", blocked.both());
    assert_eq!(run_in(p, &["gen-makefiles", "--check"]).code, 1, "CI gives the same verdict");
    git(p, &["checkout", "-q", "HEAD", "--", "lib/Makefile"]);
    // A policy edit staged without the central file it changes, then with it.
    edit(p, "sanitizer-policy.toml", "skip = [\"kasan\"]", "skip = [\"kasan\", \"kcov\"]");
    git(p, &["add", "-A"]);
    hook("a policy edit without its generated lines", 1);
    ok(p, &["gen-makefiles"]);
    git(p, &["add", "-A"]);
    hook("a policy edit with its generated lines", 0);
    // A hand edit of the central file itself.
    git(p, &["commit", "-q", "--no-verify", "-m", "kcov"]);
    edit(p, CENTRAL, "KCOV_INSTRUMENT_a.o := n\n", "");
    git(p, &["add", "-A"]);
    hook("a hand-edited central file", 1);
}

const PAIR: &str = "obj-y := a.o b.o\n\n# A pair.\nifdef CONFIG_SP_PAIR\nKASAN_SANITIZE_a.o := n\nelse\nKASAN_SANITIZE_a.o := y\nendif\n";

/// A unit that changed no state (the `else` branch's `:= y`, Kbuild's default) is renamed away
/// in the policy: the memory records the line, and resetting it changes no state, so it is the
/// policy's drop, not a merge's line: `gen-makefiles` writes the reset, all is green, and
/// `sync` has nothing to take back. A line a merge brings under the opposite condition that
/// changes the state (`ifndef … := n`) is the tree's: `gen-makefiles` refuses to reset it.
#[test]
fn dropping_a_unit_that_changed_no_state_is_the_policys_move() {
    fn policy_with_the_else_unit_renamed(p: &std::path::Path) {
        let policy = read(p, "sanitizer-policy.toml");
        let at = policy.rfind("path = \"lib/a.o\"").expect("the else branch's unit");
        let renamed = format!("{}path = \"lib/b.o\"{}", &policy[..at], &policy[at + "path = \"lib/a.o\"".len()..]);
        fs::write(p.join("sanitizer-policy.toml"), renamed).unwrap();
    }
    let t = adopt_central(PAIR);
    let p = t.path();
    assert_eq!(read(p, "sanitizer-policy.toml").matches("path = \"lib/a.o\"").count(), 2, "one unit per branch");
    policy_with_the_else_unit_renamed(p);
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(!check.stderr.contains("unmanaged-directive"), "{}", check.both());
    ok(p, &["gen-makefiles"]);
    assert!(read(p, CENTRAL).contains("ifndef CONFIG_SP_PAIR\nKASAN_SANITIZE_a.o :=\nendif\n"), "{}", read(p, CENTRAL));
    all_green(p, "renamed");
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("nothing to take back"), "{}", sync.both());

    // A merge brings the opposite branch with a value that changes the state: the tree's line.
    let one = "obj-y := a.o b.o\n\n# One.\nifdef CONFIG_SP_PAIR\nKASAN_SANITIZE_a.o := n\nendif\n";
    let t = adopt_central(one);
    let p = t.path();
    fs::write(
        p.join("lib/Makefile"),
        format!("{one}\n# Merged.\nifndef CONFIG_SP_PAIR\nKASAN_SANITIZE_a.o := n\nendif\n"),
    )
    .unwrap();
    let gen = run_in(p, &["gen-makefiles"]);
    assert_eq!(gen.code, 2, "{}", gen.both());
    assert!(gen.stderr.contains("unmanaged-directive") && gen.stderr.contains("sanpolicy sync"), "{}", gen.both());
}

/// A directory line a later line of the same file overrides is dead: make never reads it, so
/// it is neither the policy's to hold nor `sync`'s to take (sync names it `set-twice` and leaves
/// it). `sync --check` and `check` agree with sync: no `unmanaged-directive`, no `sync` to run.
#[test]
fn a_dead_directory_line_is_not_unmanaged_in_the_central_layout() {
    let t = adopt_central(MAKEFILE);
    let p = t.path();
    let merged = MAKEFILE.replace(
        "KASAN_SANITIZE_a.o := n\n",
        "ifdef CONFIG_SP_MERGED\nKASAN_SANITIZE_a.o := y\nendif\n\n# Again.\nKASAN_SANITIZE_a.o := n\n",
    );
    fs::write(p.join("lib/Makefile"), &merged).unwrap();
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("set-twice") && sync.stderr.contains("nothing to take back"), "{}", sync.both());
    for args in [&["sync", "--check"][..], &["check"][..]] {
        let run = run_in(p, args);
        assert!(
            !run.stderr.contains("unmanaged-directive") && !run.stderr.contains("sanpolicy sync"),
            "{args:?}: {}",
            run.both()
        );
    }
}
