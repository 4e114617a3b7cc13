//! `sync` after a real upstream merge writes a policy diff a reviewer can read: on 6.12's
//! `mm/` and `kernel/locking/` (extracted from Debian's source package), adopted in place, then
//! merged with upstream's later hunks:
//!
//! - `mm/Makefile`: the dead `KCOV_INSTRUMENT_debug-pagealloc.o` renamed to
//!   `KCOV_INSTRUMENT_debug_page_alloc.o` (the source has been `debug_page_alloc.c` all along);
//! - `kernel/locking/Makefile`: upstream's lockdep KASAN fix ("locking/lockdep: Disable KASAN
//!   instrumentation of lockdep.c", 2025), a new line under a reworded comment;
//! - `mm/Makefile`: `KCSAN_SANITIZE_page_alloc.o` turned from `n` to `y` (a value flip, made by
//!   hand here: the case where the unit's reason now says the opposite).
//!
//! The rename edits the unit's `path` in place (one line of the diff, the unit stays where it
//! was); the new unit goes where its line stands among its directory's units; the flip is listed with the
//! unit's `file:line` in the written policy and its old reason. No kbuild file changes.

mod fixture_tree;

use std::fs;

use fixture_tree::{extract_6_12, run_in};

/// The policy's lines the diff removed and added.
fn line_diff(before: &str, after: &str) -> (Vec<String>, Vec<String>) {
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    for change in similar::TextDiff::from_lines(before, after).iter_all_changes() {
        let line = change.value().trim_end().to_string();
        match change.tag() {
            similar::ChangeTag::Delete => removed.push(line),
            similar::ChangeTag::Insert => added.push(line),
            similar::ChangeTag::Equal => {}
        }
    }
    (removed, added)
}

/// The `path` of every unit, in the policy's order.
fn unit_paths(policy: &str) -> Vec<String> {
    policy
        .lines()
        .filter_map(|l| l.strip_prefix("path = \"").and_then(|p| p.strip_suffix('"')))
        .map(str::to_string)
        .collect()
}

#[test]
fn sync_after_an_upstream_merge_renames_in_place_groups_new_units_and_lists_flips() {
    let members = ["scripts/Makefile.lib", "scripts/Makefile.build", "mm", "kernel/locking"];
    let (_dir, tree) = extract_6_12("sanpolicy-sync-review-", &members);
    let adopt = run_in(&tree, &["import", "--adopt"]);
    assert_eq!(adopt.code, 0, "{}", adopt.both());
    let policy_path = tree.join("sanitizer-policy.toml");
    let before = fs::read_to_string(&policy_path).unwrap();

    // The merge.
    let mm = tree.join("mm/Makefile");
    let mm_text = fs::read_to_string(&mm).unwrap();
    for old in ["KCOV_INSTRUMENT_debug-pagealloc.o := n\n", "KCSAN_SANITIZE_page_alloc.o := n\n"] {
        assert!(mm_text.contains(old), "6.12's mm/Makefile has no `{old}`");
    }
    let mm_merged = mm_text
        .replace("KCOV_INSTRUMENT_debug-pagealloc.o := n\n", "KCOV_INSTRUMENT_debug_page_alloc.o := n\n")
        .replace("KCSAN_SANITIZE_page_alloc.o := n\n", "KCSAN_SANITIZE_page_alloc.o := y\n");
    fs::write(&mm, &mm_merged).unwrap();
    let locking = tree.join("kernel/locking/Makefile");
    let locking_text = fs::read_to_string(&locking).unwrap();
    let old_hunk = "# Avoid recursion lockdep -> sanitizer -> ... -> lockdep.\nKCSAN_SANITIZE_lockdep.o := n\n";
    assert!(locking_text.contains(old_hunk), "6.12's kernel/locking/Makefile changed");
    let locking_merged = locking_text.replace(
        old_hunk,
        "# Avoid recursion lockdep -> sanitizer -> ... -> lockdep & improve performance.\nKASAN_SANITIZE_lockdep.o := n\nKCSAN_SANITIZE_lockdep.o := n\n",
    );
    fs::write(&locking, &locking_merged).unwrap();

    let sync = run_in(&tree, &["sync"]);
    assert_eq!(sync.code, 0, "{}", sync.both());
    let after = fs::read_to_string(&policy_path).unwrap();
    assert_eq!(fs::read_to_string(&mm).unwrap(), mm_merged, "sync changed mm/Makefile");
    assert_eq!(fs::read_to_string(&locking).unwrap(), locking_merged, "sync changed kernel/locking/Makefile");

    // The rename: one path line edited in place, the unit where it was.
    let (removed, added) = line_diff(&before, &after);
    assert!(removed.contains(&"path = \"mm/debug-pagealloc.o\"".to_string()), "{removed:?}");
    assert!(added.contains(&"path = \"mm/debug_page_alloc.o\"".to_string()), "{added:?}");
    let (old_paths, new_paths) = (unit_paths(&before), unit_paths(&after));
    let was = old_paths.iter().position(|p| p == "mm/debug-pagealloc.o").unwrap();
    let now = new_paths.iter().position(|p| p == "mm/debug_page_alloc.o").unwrap();
    let locking_units_before = old_paths.iter().filter(|p| p.starts_with("kernel/locking/")).count();
    // The one new unit (lockdep's KASAN) sits in kernel/locking, above mm in tree order.
    assert_eq!(now, was + usize::from(new_paths.len() > old_paths.len()), "the renamed unit moved");
    // Nothing removed but the renamed path, the flipped value's `skip` line and the flipped
    // unit's reason (kept inside the placeholder that asks for a new one).
    let flipped_unit: Vec<&str> =
        before.lines().skip_while(|l| *l != "path = \"mm/page_alloc.o\"").take_while(|l| !l.is_empty()).collect();
    let allowed_removed = ["path = \"mm/debug-pagealloc.o\"", "skip = [\"kcsan\"]"];
    assert!(
        removed.iter().all(|l| allowed_removed.contains(&l.as_str()) || flipped_unit.contains(&l.as_str())),
        "removed {removed:?}"
    );
    assert!(
        added.iter().any(|l| l.starts_with("TODO(sanpolicy sync): the tree (mm) turned `kcsan` from skip to force")),
        "the flipped unit's reason is marked: {added:?}"
    );
    assert!(after.contains("These produce frequent data race reports"), "the old reason is kept in it");
    assert!(sync.stderr.contains("renamed: mm/debug-pagealloc.o -> mm/debug_page_alloc.o"), "{}", sync.both());

    // The new unit: among kernel/locking's units, beside lockdep.o's others (where its line
    // stands in the Makefile), the directory's units still together.
    assert_eq!(new_paths.len(), old_paths.len() + 1, "one new unit: {new_paths:?}");
    let first_locking = new_paths.iter().position(|p| p.starts_with("kernel/locking/")).unwrap();
    let run: Vec<&String> =
        new_paths[first_locking..].iter().take_while(|p| p.starts_with("kernel/locking/")).collect();
    assert_eq!(run.len(), locking_units_before + 1, "kernel/locking's units are not together: {new_paths:?}");
    let lockdep = |paths: &[&String]| paths.iter().filter(|p| p.as_str() == "kernel/locking/lockdep.o").count();
    let old_run: Vec<&String> = old_paths.iter().filter(|p| p.starts_with("kernel/locking/")).collect();
    assert_eq!(lockdep(&run), lockdep(&old_run) + 1, "{run:?}");
    let first = run.iter().position(|p| p.as_str() == "kernel/locking/lockdep.o").unwrap();
    assert_eq!(lockdep(&run[first..first + lockdep(&run)]), lockdep(&run), "lockdep.o's units together: {run:?}");
    assert!(
        after.contains("Avoid recursion lockdep -> sanitizer -> ... -> lockdep & improve performance."),
        "the new unit's reason is its own line's comment"
    );

    // The flip: listed with where the unit is now and the reason it kept.
    let flipped = sync.stderr.lines().find(|l| l.starts_with("flipped: mm/page_alloc.o kcsan skip -> force at "));
    let flipped = flipped.unwrap_or_else(|| panic!("no flip listed:\n{}", sync.both()));
    assert!(flipped.contains("marked `TODO(sanpolicy sync)`"), "{flipped}");
    let at = flipped.split(" at ").nth(1).and_then(|r| r.split(": ").next()).unwrap();
    let line: usize = at.rsplit(':').nth(1).and_then(|l| l.parse().ok()).unwrap_or_else(|| panic!("{at}"));
    // The unit the location falls in: from its `[[unit]]` header to the blank line after it.
    let lines: Vec<&str> = after.lines().collect();
    let start = lines[..line].iter().rposition(|l| *l == "[[unit]]").map_or(0, |i| i + 1);
    let unit: Vec<&str> = lines[start..].iter().take_while(|l| !l.is_empty()).copied().collect();
    assert_eq!(unit.first(), Some(&"path = \"mm/page_alloc.o\""), "{at} is not the flipped unit's path: {unit:?}");
    assert!(unit.contains(&"force = [\"kcsan\"]"), "{unit:?}");

    // The tree and the policy agree now.
    for args in [&["gen-makefiles", "--check"][..], &["sync", "--check"][..]] {
        let run = run_in(&tree, args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.both());
    }
}

/// A new line between two of its directory's lines: its unit goes between theirs, in the tree's
/// order, not after the directory's last unit; a line before them all goes first.
#[test]
fn a_new_unit_goes_where_its_line_stands_among_its_directorys_units() {
    let makefile =
        "obj-y := a.o b.o c.o d.o\n\n# Reason a.\nKASAN_SANITIZE_a.o := n\n\n# Reason d.\nKASAN_SANITIZE_d.o := n\n";
    let t = fixture_tree::rules_tree("sanpolicy-sync-order-", makefile);
    let p = t.path();
    for f in ["c.c", "d.c"] {
        fs::write(p.join("lib").join(f), "").unwrap();
    }
    let adopt = run_in(p, &["import", "--adopt"]);
    assert_eq!(adopt.code, 0, "{}", adopt.both());
    let merged = makefile
        .replace("\n# Reason d.", "\n# Reason c.\nKCOV_INSTRUMENT_c.o := n\n\n# Reason d.")
        .replace("\n# Reason a.", "\n# Reason b.\nUBSAN_SANITIZE_b.o := n\n\n# Reason a.");
    fs::write(p.join("lib/Makefile"), merged).unwrap();
    let sync = run_in(p, &["sync"]);
    assert_eq!(sync.code, 0, "{}", sync.both());
    let policy = fs::read_to_string(p.join("sanitizer-policy.toml")).unwrap();
    assert_eq!(unit_paths(&policy), ["lib/b.o", "lib/a.o", "lib/c.o", "lib/d.o"], "{policy}");
}
