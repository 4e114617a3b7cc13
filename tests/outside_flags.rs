//! Lines that change instrumentation without the policy's variables (issue 11, first point of
//! "What to build"): a per-object `CFLAGS_x.o`/`RUSTFLAGS_x.o` or a directory-wide flag line
//! that passes a mechanism's flags is named by `explain` and makes `check` refuse to take a
//! requirement as holding, never silently ignored. GNU make shows the flag is really there.

mod fixture_tree;
mod kernel_source;

use std::fs;
use std::path::Path;
use std::process::Command;

use fixture_tree::{run_in, Run};
use kernel_source::Lease;

/// A tree with Linux 6.12's rule files and `files` (path, text).
fn tree_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("sanpolicy-outside-").tempdir().unwrap();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules/linux-6.12/scripts");
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), dir.path().join("scripts").join(f)).unwrap();
    }
    for (path, text) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    dir
}

/// `_c_flags` of each object of `d/` as GNU make computes them with 6.12's real
/// `scripts/Makefile.lib`, for a KASAN build (`CFLAGS_KASAN` as the arch Makefile sets it).
fn make_c_flags(tree: &Path, objects: &[&str]) -> Vec<String> {
    let targets: Vec<String> = objects.iter().map(|o| format!("d/{o}")).collect();
    let driver = format!(
        "obj := d\nsrc := d\nCONFIG_KASAN := y\nCFLAGS_KASAN := -fsanitize=kernel-address\nKBUILD_CFLAGS := -O2\n\
         include d/Makefile\ninclude scripts/Makefile.lib\n\
         {t}: part-of-builtin := y\n{t}: ; @echo '$@:' $(_c_flags)\n.PHONY: {t}\n",
        t = targets.join(" ")
    );
    fs::write(tree.join("driver.mk"), driver).unwrap();
    let out = Command::new("make")
        .args(["-s", "-r", "-R", "--no-print-directory", "-f", "driver.mk"])
        .args(&targets)
        .current_dir(tree)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .expect("GNU make is needed (apt-get install make)");
    assert!(out.status.success(), "make failed: {}", String::from_utf8_lossy(&out.stderr));
    fs::remove_file(tree.join("driver.mk")).unwrap();
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

/// The policy owns the exemption line (the default in-place layout); the requirement is its own.
/// Write the effective snapshot (the policy already says what the tree's lines say, so no
/// kbuild file changes): `check` then has nothing to report but the tree's findings.
fn adopt(tree: &Path) {
    let before = fs::read(tree.join("d/Makefile")).unwrap();
    let run = run_in(tree, &["gen-makefiles"]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert_eq!(fs::read(tree.join("d/Makefile")).unwrap(), before, "{}", run.both());
}

const POLICY: &str = "builtin-requirements = false\n\n\
    [[unit]]\npath = \"d/x.o\"\nskip = [\"kasan\"]\nwhy = \"a KASAN runtime file\"\n\n\
    [[require]]\npath = \"d/x.o\"\nexempt = [\"kasan\"]\nwhy = \"a KASAN runtime file\"\n";

fn makefile(add_back: bool) -> String {
    let line = if add_back { "CFLAGS_x.o := $(CFLAGS_KASAN) -fno-builtin\n" } else { "" };
    format!("KASAN_SANITIZE_x.o := n\n{line}obj-y := x.o y.o\n")
}

/// The requirement's object is exempted by `KASAN_SANITIZE_x.o := n`, and a per-object line
/// adds `$(CFLAGS_KASAN)` back: make passes `-fsanitize=kernel-address` to x.o, and `check`
/// says so instead of taking the requirement as holding. Without the line make passes no
/// sanitizer flag and the requirement holds. An `[[acknowledge]]` keeps it on purpose.
#[test]
fn a_per_object_line_that_adds_the_flags_back_fails_the_requirement() {
    let tree =
        tree_with(&[("d/Makefile", &makefile(true)), ("d/x.c", ""), ("d/y.c", ""), ("sanitizer-policy.toml", POLICY)]);
    adopt(tree.path());
    let flags = make_c_flags(tree.path(), &["x.o", "y.o"]);
    assert_eq!(flags, ["d/x.o: -O2 -fsanitize=kernel-address -fno-builtin", "d/y.o: -O2 -fsanitize=kernel-address"]);
    let run = run_in(tree.path(), &["check"]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert_eq!(run.stderr.matches("error[").count(), 1, "{}", run.both());
    assert!(
        run.stderr.contains(
            "error[flags-outside-policy]: `d/x.o` cannot be proven exempt from `kasan`: d/Makefile:2 decides it outside the policy"
        ),
        "{}",
        run.both()
    );
    assert!(run.stderr.contains("`CFLAGS_x.o` passes `$(CFLAGS_KASAN)` (kasan's flags) to `x.o`"), "{}", run.both());
    let explain = run_in(tree.path(), &["explain", "d/x.o"]);
    assert_eq!(explain.code, 0, "{}", explain.both());
    assert!(
        explain.stdout.contains(
            "kasan              also decided outside the policy: d/Makefile:2: `CFLAGS_x.o` passes `$(CFLAGS_KASAN)`"
        ),
        "{}",
        explain.both()
    );
    assert!(!run_in(tree.path(), &["explain", "d/y.o"]).stdout.contains("outside the policy"));

    // Kept on purpose: a note, exit 0.
    let acknowledged = format!(
        "{POLICY}\n[[acknowledge]]\ncode = \"flags-outside-policy\"\npath = \"d/x.o\"\nmechanism = \"kasan\"\nwhy = \"a test object\"\n"
    );
    fs::write(tree.path().join("sanitizer-policy.toml"), acknowledged).unwrap();
    let run = run_in(tree.path(), &["check"]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(run.both().contains("acknowledged [flags-outside-policy]"), "{}", run.both());

    // Without the line: make passes no KASAN flag to x.o, and the requirement holds.
    fs::write(tree.path().join("d/Makefile"), makefile(false)).unwrap();
    fs::write(tree.path().join("sanitizer-policy.toml"), POLICY).unwrap();
    let flags = make_c_flags(tree.path(), &["x.o"]);
    assert_eq!(flags, ["d/x.o: -O2"]);
    let run = run_in(tree.path(), &["check"]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(!run.both().contains("flags-outside-policy"), "{}", run.both());
}

/// A directory-wide line (`ccflags-y += $(CFLAGS_KASAN)`) reaches every object of the directory,
/// past a directory requirement's `KASAN_SANITIZE := n`.
#[test]
fn a_directory_wide_line_fails_a_directory_requirement() {
    let policy = "builtin-requirements = false\n\n\
        [[unit]]\npath = \"d/\"\nskip = [\"kasan\"]\nwhy = \"a KASAN runtime directory\"\n\n\
        [[require]]\npath = \"d/\"\nexempt = [\"kasan\"]\nwhy = \"a KASAN runtime directory\"\n";
    let tree = tree_with(&[
        ("d/Makefile", "KASAN_SANITIZE := n\nccflags-y += $(CFLAGS_KASAN)\nobj-y := x.o\n"),
        ("d/x.c", ""),
        ("sanitizer-policy.toml", policy),
    ]);
    adopt(tree.path());
    assert_eq!(make_c_flags(tree.path(), &["x.o"]), ["d/x.o: -O2 -fsanitize=kernel-address"]);
    let run = run_in(tree.path(), &["check"]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stderr.contains("error[flags-outside-policy]: `d/` cannot be proven exempt from `kasan`"),
        "{}",
        run.both()
    );
    assert!(
        run.stderr.contains("`ccflags-y` passes `$(CFLAGS_KASAN)` (kasan's flags) to every object"),
        "{}",
        run.both()
    );
    assert_eq!(run.stderr.matches("error[").count(), 1, "{}", run.both());
}

fn explain(tree: &Path, objects: &[&str]) -> Run {
    let policy = tempfile::NamedTempFile::new().unwrap();
    fs::write(policy.path(), "builtin-requirements = true\n").unwrap();
    let mut args = vec!["explain", "--tree", tree.to_str().unwrap(), "--policy", policy.path().to_str().unwrap()];
    args.extend(objects);
    run_in(tree, &args)
}

/// Real 6.12: the objects of `mm/kasan/` and `kernel/kcsan/` that add their mechanism's flags
/// back are exactly the tests, and `explain` names each line; the runtime objects have none.
/// The built-in requirements list those tests in `except`, so `check` holds on the runtimes.
#[test]
fn linux_6_12_kasan_and_kcsan_tests_add_their_flags_back() {
    let lease = Lease::extracted("6.12");
    let tree = lease.tree();
    let mut found = Vec::new();
    for dir in ["mm/kasan", "kernel/kcsan"] {
        let text = fs::read_to_string(tree.join(dir).join("Makefile")).unwrap();
        for l in sanpolicy::kbuild::outside_lines(&sanpolicy::makefile::parse(&text)) {
            found.push(format!("{dir}/{} {} {} line {}", l.object.unwrap_or_default(), l.mech, l.carrier, l.line));
        }
    }
    assert_eq!(
        found,
        [
            "mm/kasan/kasan_test_c.o kasan CFLAGS_KASAN line 47",
            "mm/kasan/kasan_test_rust.o kasan RUSTFLAGS_KASAN line 48",
            "mm/kasan/kasan_test_module.o kasan CFLAGS_KASAN line 49",
            "kernel/kcsan/kcsan_test.o kcsan CFLAGS_KCSAN line 19",
        ]
    );
    let run = explain(
        tree,
        &["mm/kasan/kasan_test_c.o", "mm/kasan/kasan_test_rust.o", "kernel/kcsan/kcsan_test.o", "mm/kasan/common.o"],
    );
    assert_eq!(run.code, 0, "{}", run.both());
    for line in [
        "kasan              also decided outside the policy: mm/kasan/Makefile:47: `CFLAGS_kasan_test_c.o` passes `$(CFLAGS_KASAN)`",
        "kasan              also decided outside the policy: mm/kasan/Makefile:48: `RUSTFLAGS_kasan_test_rust.o` passes `$(RUSTFLAGS_KASAN)`",
        "kcsan              also decided outside the policy: kernel/kcsan/Makefile:19: `CFLAGS_kcsan_test.o` passes `$(CFLAGS_KCSAN)`",
    ] {
        assert!(run.stdout.contains(line), "{line}\n{}", run.stdout);
    }
    assert_eq!(run.stdout.matches("outside the policy").count(), 3, "common.o has none:\n{}", run.stdout);
}
