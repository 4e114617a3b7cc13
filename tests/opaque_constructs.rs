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

#[test]
fn check_refuses_a_requirement_make_may_undo() {
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
    fs::write(dir.path().join("sanitizer-policy.toml"), POLICY).unwrap();
    let gen = run_in(dir.path(), &["gen-makefiles"]);
    assert_eq!(gen.code, 0, "{}", gen.both());
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
}
