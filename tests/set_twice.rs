//! `set-twice`: a variable a kbuild file sets again below a line, so make reads only the later
//! one. `check` warns at the later line naming the earlier one and what make reads; import,
//! sync and gen-makefiles leave the earlier line where it stands, and make (the judge) reads
//! the same values before and after every command.

mod fixture_tree;

use std::fs;
use std::path::Path;
use std::process::Command;

use fixture_tree::{all_green, ok, read, rules_tree, run_in};

/// What GNU make reads for `vars` after reading `lib/Makefile` of `tree`.
fn make_reads(tree: &Path, vars: &[&str]) -> Vec<String> {
    let probe = tempfile::NamedTempFile::new().unwrap();
    let mut text = format!("include {}\n", tree.join("lib/Makefile").display());
    for v in vars {
        text.push_str(&format!("$(info {v}=[$({v})])\n"));
    }
    text.push_str("all: ;\n");
    fs::write(probe.path(), text).unwrap();
    let out = Command::new("make").arg("-s").arg("-f").arg(probe.path()).output().expect("GNU make is needed");
    assert!(out.status.success(), "make: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

const VARS: &[&str] = &["KASAN_SANITIZE_a.o", "KASAN_SANITIZE_b.o", "KCSAN_SANITIZE_a.o"];

/// `KASAN_SANITIZE_b.o` set at line 3 and again at line 5, with taken lines around the first.
const TWICE: &str = "obj-y += a.o b.o\nKASAN_SANITIZE_a.o := n\nKASAN_SANITIZE_b.o := y\nKCSAN_SANITIZE_a.o := n\nKASAN_SANITIZE_b.o := n\n";

#[test]
fn check_warns_at_the_later_line_naming_the_earlier_and_what_make_reads() {
    let t = rules_tree("sanpolicy-twice-", TWICE);
    let p = t.path();
    ok(p, &["import"]);
    let check = ok(p, &["check"]);
    assert!(check.stderr.contains("warning[set-twice]"), "{}", check.stderr);
    assert!(
        check
            .stderr
            .contains("`KASAN_SANITIZE_b.o` is set twice: line 3 (`:= y`) is never read, make reads this line's `n`"),
        "{}",
        check.stderr
    );
    assert!(check.stderr.contains("lib/Makefile:5:1"), "at the later line: {}", check.stderr);
    assert!(check.stderr.contains("lib/Makefile:3:1 sets it first"), "{}", check.stderr);
    // Acknowledged: a note with the reason, no warning left.
    let policy = read(p, "sanitizer-policy.toml");
    let ack = "\n[[acknowledge]]\ncode = \"set-twice\"\npath = \"lib/b.o\"\nmechanism = \"kasan\"\nwhy = \"Upstream's merge; fixed there.\"\n";
    fs::write(p.join("sanitizer-policy.toml"), format!("{policy}{ack}")).unwrap();
    let check = ok(p, &["check"]);
    assert!(!check.stderr.contains("warning[set-twice]"), "{}", check.stderr);
    assert!(check.stderr.contains("acknowledged [set-twice]"), "{}", check.stderr);
}

#[test]
fn import_adopt_leaves_the_earlier_line_and_make_reads_the_same() {
    let t = rules_tree("sanpolicy-twice-", TWICE);
    let p = t.path();
    let before = make_reads(p, VARS);
    assert_eq!(before[1], "KASAN_SANITIZE_b.o=[n]", "{before:?}");
    let import = ok(p, &["import", "--adopt", "--layout", "block"]);
    assert!(import.stderr.contains("warning[set-twice]"), "named, not dropped in silence: {}", import.stderr);
    assert!(import.stderr.contains("lib/Makefile:3:1"), "{}", import.stderr);
    let makefile = read(p, "lib/Makefile");
    assert!(makefile.contains("KASAN_SANITIZE_b.o := y\n"), "the earlier line is the tree's: {makefile}");
    assert!(
        makefile.find("KASAN_SANITIZE_b.o := y").unwrap() < makefile.find("# BEGIN sanpolicy").unwrap(),
        "the block follows the line it makes dead: {makefile}"
    );
    assert_eq!(make_reads(p, VARS), before, "{makefile}");
    let policy = read(p, "sanitizer-policy.toml");
    assert!(!policy.contains("force"), "the policy holds what make reads (`n`): {policy}");
    all_green(p, "adopted");
    assert_eq!(make_reads(p, VARS), before);
}

#[test]
fn in_place_sync_and_gen_makefiles_leave_the_earlier_line_where_it_is() {
    let t = rules_tree("sanpolicy-twice-", TWICE);
    let p = t.path();
    let before = make_reads(p, VARS);
    ok(p, &["import"]);
    let policy = read(p, "sanitizer-policy.toml");
    assert!(policy.contains("path = \"lib/b.o\"\nskip = [\"kasan\"]"), "{policy}");
    all_green(p, "imported");
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("warning[set-twice]"), "sync names the line it leaves: {}", sync.both());
    ok(p, &["gen-makefiles"]);
    assert_eq!(read(p, "lib/Makefile"), TWICE, "nothing of the tree's is rewritten");
    // The policy changes b.o: gen-makefiles edits the line make reads, not the dead one.
    let policy = read(p, "sanitizer-policy.toml");
    fs::write(
        p.join("sanitizer-policy.toml"),
        policy.replace("path = \"lib/b.o\"\nskip = [\"kasan\"]", "path = \"lib/b.o\"\nforce = [\"kasan\"]"),
    )
    .unwrap();
    ok(p, &["gen-makefiles"]);
    let makefile = read(p, "lib/Makefile");
    assert!(
        makefile.contains("KASAN_SANITIZE_b.o := y\nKCSAN_SANITIZE_a.o := n\nKASAN_SANITIZE_b.o := y\n"),
        "{makefile}"
    );
    assert_eq!(make_reads(p, VARS)[1], "KASAN_SANITIZE_b.o=[y]", "{before:?}");
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 0, "{}", check.both());
}
