//! An instrumentation line added to a rules file (`KASAN_SANITIZE_plain.o := n` in
//! `scripts/Makefile.lib`, `KASAN_SANITIZE := n` in `scripts/Makefile.build`) is read by Kbuild
//! for every directory. GNU make, reading 6.12's real `scripts/Makefile.lib` after a directory's
//! kbuild file as `scripts/Makefile.build` does, is the judge that such a line changes what an
//! object gets; `check` must then report it at its line, never say the policy holds, and
//! `explain` must say its answer is not certain, naming the line.

mod fixture_tree;
mod make_judge;

use std::fs;
use std::path::Path;
use std::process::Command;

use fixture_tree::{Tree, V6_12};

const POLICY: &str = "sanitizer-policy.toml";

/// Whether make gives `lib/plain.o` KASAN's flags, with the tree's `scripts/Makefile.lib`
/// read after `lib/Makefile` under `CONFIG_KASAN=y`.
fn make_instruments(tree: &Path) -> bool {
    let driver = "srctree := .\nobj := lib\nsrc := lib\nCONFIG_KASAN := y\n\
        CFLAGS_KASAN := -fsanitize=kernel-address\n\
        include lib/Makefile\ninclude scripts/Makefile.lib\n\
        $(foreach @,lib/plain.o,$(info [$(strip $(_c_flags))]))\nsanpolicy-judge: ;\n";
    fs::write(tree.join("judge.mk"), driver).unwrap();
    let stdout = make_judge::make(tree, &["-f", "judge.mk", "sanpolicy-judge"]);
    fs::remove_file(tree.join("judge.mk")).unwrap();
    stdout.lines().find(|l| l.starts_with('[')).expect("make's answer").contains("-fsanitize=kernel-address")
}

fn check(tree: &Tree) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .arg("check")
        .current_dir(tree.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (out.status.code().unwrap(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A fixture tree whose policy requires `lib/plain.o` exempt from KASAN only where the tree
/// would say so: no unit or requirement touches `plain.o`, so the verdict rests on the rules.
fn tree() -> Tree {
    let tree = Tree::new("mechanisms", V6_12);
    let policy = "layout = \"block\"\nbuiltin-requirements = false\n\n[[unit]]\npath = \"lib/skipall.o\"\n\
        skip = [\"kasan\"]\nwhy = \"Fixture.\"\n";
    fs::write(tree.join(POLICY), policy).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_sanpolicy")).arg("gen-makefiles").current_dir(tree.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    tree
}

#[test]
fn a_mechanism_line_in_a_rules_file_is_reported_where_make_reads_it() {
    let tree = tree();
    assert!(make_instruments(tree.path()), "pristine 6.12 rules: make instruments plain.o");
    let (code, err) = check(&tree);
    assert_eq!(code, 0, "{err}");

    for (file, line) in
        [("scripts/Makefile.lib", "KASAN_SANITIZE_plain.o := n"), ("scripts/Makefile.build", "KASAN_SANITIZE := n")]
    {
        let tree = self::tree();
        let path = tree.join(file);
        let mut text = fs::read_to_string(&path).unwrap();
        if file.ends_with(".lib") {
            // Read after every directory's kbuild file: make no longer instruments.
            text.push_str(&format!("{line}\n"));
            fs::write(&path, &text).unwrap();
            assert!(!make_instruments(tree.path()), "make reads `{line}` in {file} for lib/");
        } else {
            text.push_str(&format!("{line}\n"));
            fs::write(&path, &text).unwrap();
        }
        let at = format!("./{file}:{}:1", text.lines().count());
        let (code, err) = check(&tree);
        assert_eq!(code, 1, "{file}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error[")).collect();
        assert_eq!(errors.len(), 1, "{file}: only the rules file's line: {err}");
        assert!(errors[0].starts_with("error[rules-directive]"), "{file}: {err}");
        assert!(err.contains(&format!("┌─ {at}")), "{file}: expected the finding at {at}:\n{err}");
        // `explain` does not answer as if the line were not there.
        let out = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
            .args(["explain", "lib/plain.o"])
            .current_dir(tree.path())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        let kasan = format!("kasan              not certain: `{line}` at {at} is read for every directory");
        assert!(said.contains(&kasan), "{file}: explain:\n{said}");
    }
}
