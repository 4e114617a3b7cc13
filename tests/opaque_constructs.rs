//! `check` never says a requirement holds where make may change the variable in ways sanpolicy
//! cannot read: an `$(eval …)` after the generated block turns KASAN back on for `lib/a.o` (GNU
//! make's verdict on such lines is `tests/make_agreement.rs`, `make_constructs_are_modelled_or_reported`).

mod fixture_tree;

use std::fs;

use fixture_tree::{run_in, V6_12};

const POLICY: &str = "\
[[unit]]
path = \"lib/a.o\"
skip = [\"kasan\"]
why = \"runtime\"

[[require]]
path = \"lib/a.o\"
exempt = [\"kasan\"]
why = \"recursion\"
";

/// A tree with 6.12's rule files, `lib/a.o`, and `policy` generated into `lib/Makefile`.
fn generated(policy: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kernel-rules")
        .join(V6_12)
        .join("scripts");
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), dir.path().join("scripts").join(f)).unwrap();
    }
    fs::create_dir_all(dir.path().join("lib")).unwrap();
    fs::write(dir.path().join("lib/a.c"), "int a;\n").unwrap();
    fs::write(dir.path().join("lib/Makefile"), "obj-y += a.o\n").unwrap();
    fs::write(dir.path().join("sanitizer-policy.toml"), policy).unwrap();
    let gen = run_in(dir.path(), &["gen-makefiles"]);
    assert_eq!(gen.code, 0, "{}", gen.both());
    dir
}

#[test]
fn check_refuses_a_requirement_make_may_undo() {
    let dir = generated(POLICY);
    let check = run_in(dir.path(), &["check"]);
    assert_eq!(check.code, 0, "the requirement holds with the block alone: {}", check.both());

    let makefile = fs::read_to_string(dir.path().join("lib/Makefile")).unwrap();
    let line = makefile.lines().count() + 1;
    fs::write(dir.path().join("lib/Makefile"), format!("{makefile}$(eval KASAN_SANITIZE_a.o := y)\n")).unwrap();
    let check = run_in(dir.path(), &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("error[opaque-construct]"), "{}", check.both());
    assert!(check.stderr.contains(&format!("make may change it at lib/Makefile:{line}")), "{}", check.both());
    assert!(check.stderr.contains(&format!("lib/Makefile:{line} has `$(eval …)`")), "{}", check.both());
    assert_eq!(check.stderr.matches("error[opaque-construct]").count(), 1, "one cause, one finding: {}", check.stderr);
}

/// What GNU make holds `name` to after reading `lib/Makefile` of `dir`.
fn make_value(dir: &std::path::Path, name: &str) -> String {
    let probe = dir.join("probe.mk");
    fs::write(&probe, format!("probe:\n\t@echo '$({name})'\n")).unwrap();
    let out = std::process::Command::new("make")
        .args(["-s", "--no-print-directory", "-f", "lib/Makefile", "-f", "probe.mk", "probe"])
        .current_dir(dir)
        .output()
        .expect("GNU make");
    fs::remove_file(&probe).unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn check_flags_a_unit_a_later_eval_undoes_and_an_acknowledgement_keeps_it() {
    let unit_only = &POLICY[..POLICY.find("[[require]]").unwrap()];
    let dir = generated(unit_only);
    let p = dir.path();
    assert_eq!(make_value(p, "KASAN_SANITIZE_a.o"), "n");
    let makefile = fs::read_to_string(p.join("lib/Makefile")).unwrap();
    let line = makefile.lines().count() + 1;
    fs::write(p.join("lib/Makefile"), format!("{makefile}$(eval KASAN_SANITIZE_a.o := y)\n")).unwrap();
    assert_eq!(make_value(p, "KASAN_SANITIZE_a.o"), "y", "make reads the eval, not the block");
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("error[opaque-construct]"), "{}", check.both());
    assert!(check.stderr.contains(&format!("lib/Makefile:{line}:1")), "at the construct: {}", check.both());
    // The help, followed: an acknowledgement of exactly that subject and mechanism.
    let ack =
        "\n[[acknowledge]]\ncode = \"opaque-construct\"\npath = \"lib/a.o\"\nmechanism = \"kasan\"\nwhy = \"meant\"\n";
    fs::write(p.join("sanitizer-policy.toml"), format!("{unit_only}{ack}")).unwrap();
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 0, "{}", check.both());
    // An eval of another object's variable does not touch this unit.
    fs::write(p.join("sanitizer-policy.toml"), unit_only).unwrap();
    fs::write(p.join("lib/Makefile"), format!("{makefile}$(eval KASAN_SANITIZE_b.o := y)\n")).unwrap();
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 0, "{}", check.both());
}
