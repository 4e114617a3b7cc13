//! A directory the walk cannot open (a path past `PATH_MAX`) is a warning naming it, in every
//! command that walks the tree, never a kbuild file skipped in silence.

mod fixture_tree;

use std::path::Path;

use fixture_tree::{ok, rules_tree, run_in};
use rustix::fs::{Mode, OFlags};

/// `lib/deep/` with 25 nested directories of 200-byte names (5 KB below `lib/`, past Linux's
/// 4096-byte `PATH_MAX`), created through directory handles, and a Makefile with a directive
/// at the bottom.
fn deep_makefile(tree: &Path) -> usize {
    let name = "d".repeat(200);
    std::fs::create_dir(tree.join("lib/deep")).unwrap();
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(tree.join("lib/deep"), flags, Mode::empty()).unwrap();
    let mut len = tree.join("lib/deep").as_os_str().len();
    for _ in 0..25 {
        rustix::fs::mkdirat(&fd, name.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(&fd, name.as_str(), flags, Mode::empty()).unwrap();
        len += 1 + name.len();
    }
    let file = rustix::fs::openat(
        &fd,
        "Makefile",
        OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&file, b"KASAN_SANITIZE := n\n").unwrap();
    len
}

#[test]
fn a_directory_past_path_max_is_named_by_import_and_check() {
    let t = rules_tree("sanpolicy-deep-", "obj-y += a.o b.o\nKASAN_SANITIZE_a.o := n\n");
    let p = t.path();
    let len = deep_makefile(p);
    assert!(len > 4096, "the test tree must go past PATH_MAX: {len}");
    let import = ok(p, &["import"]);
    let named = |stderr: &str| {
        stderr.contains("warning[io]: skipped directory `")
            && stderr.contains("/lib/deep/dddd")
            && stderr.contains("longer than the system allows (PATH_MAX)")
    };
    assert!(named(&import.stderr), "{}", import.stderr);
    let check = run_in(p, &["check"]);
    assert!(named(&check.stderr), "{}", check.both());
    let gen = run_in(p, &["gen-makefiles", "--check"]);
    assert!(named(&gen.stderr), "{}", gen.both());
}
