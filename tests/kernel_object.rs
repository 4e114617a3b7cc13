//! A target-specific `is-kernel-object` (6.12's `rust/Makefile:450`,
//! `$(obj)/build_error.o: private is-kernel-object := y`) decides whether Kbuild treats an object
//! as a kernel object, whatever `obj-y`/`always-y` say (issue 11). GNU make is the judge: a
//! driver includes the directory's Makefile and then the tree's own `scripts/Makefile.lib`, as
//! `scripts/Makefile.build` does, and a rule for the object prints `$(is-kernel-object)` and the
//! flags Makefile.lib computed for it; `sanpolicy explain --config` must say the same. Forms the
//! model does not evaluate must be flagged by `explain` and `check`, never ignored.

mod fixture_tree;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fixture_tree::{run_in, Run};

/// What make computed for one object.
#[derive(Debug, PartialEq, Eq)]
struct MakeSays {
    /// `$(is-kernel-object)` in the object's rule.
    kernel_object: String,
    /// Makefile.lib added KASAN's flags (C or Rust).
    kasan: bool,
    /// Makefile.lib added KCOV's flags.
    kcov: bool,
}

/// Run make on `dir`'s Makefile and `tree`'s `scripts/Makefile.lib` for `dir/object` with the
/// `CONFIG_` values of `config` (empty: unset). `old` files are not remade (`make -o`), so that
/// the real rust/Makefile's prerequisites need not exist.
fn make_says(tree: &Path, dir: &str, object: &str, config: &[(&str, &str)], old: &[&str]) -> MakeSays {
    let scratch = tempfile::Builder::new().prefix("sanpolicy-kobj-make-").tempdir().unwrap();
    let target = format!("{dir}/{object}");
    let mut d = format!(".DEFAULT_GOAL := {target}\nSHELL := /bin/false\nsrctree := .\nobj := {dir}\nsrc := {dir}\n");
    for (k, v) in config.iter().filter(|(_, v)| !v.is_empty()) {
        d.push_str(&format!("{k} := {v}\n"));
    }
    d.push_str("CFLAGS_KASAN := SP-C-KASAN\nRUSTFLAGS_KASAN := SP-RUST-KASAN\nCFLAGS_KCOV := SP-KCOV\n");
    d.push_str(&format!("include {dir}/Makefile\ninclude scripts/Makefile.lib\nFORCE:\n"));
    d.push_str(&format!("{target}:\n\t@$(info SP [$(is-kernel-object)] [$(_c_flags)] [$(_rust_flags)])\n"));
    let driver = scratch.path().join("driver.mk");
    fs::write(&driver, d).unwrap();
    let mut cmd = Command::new("make");
    cmd.arg("-s").arg("-C").arg(tree).arg("-f").arg(&driver).env_clear().env("PATH", std::env::var("PATH").unwrap());
    for o in old {
        cmd.arg("-o").arg(o);
    }
    let out = cmd.output().expect("running GNU make");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "make failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find_map(|l| l.strip_prefix("SP ")).unwrap_or_else(|| panic!("no answer: {stdout}"));
    // `[is-kernel-object] [_c_flags] [_rust_flags]`
    let (kernel_object, flags) =
        line.strip_prefix('[').and_then(|l| l.split_once(']')).unwrap_or_else(|| panic!("{line}"));
    let kernel_object = kernel_object.to_string();
    MakeSays {
        kernel_object,
        kasan: flags.contains("SP-C-KASAN") || flags.contains("SP-RUST-KASAN"),
        kcov: flags.contains("SP-KCOV"),
    }
}

/// `sanpolicy explain --config` of `path` in `tree` for the build of `config`.
fn explain(tree: &Path, path: &str, config: &[(&str, &str)]) -> Run {
    let text: String = config.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={v}\n")).collect();
    let file = tree.join("test.config");
    fs::write(&file, text).unwrap();
    let run = run_in(tree, &["explain", "--config", file.to_str().unwrap(), path]);
    assert_eq!(run.code, 0, "{}", run.both());
    run
}

/// The state column of `mechanism` in `explain`'s text.
fn state_of(run: &Run, mechanism: &str) -> bool {
    let line = run
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(mechanism))
        .unwrap_or_else(|| panic!("no {mechanism} line:\n{}", run.both()));
    match line.split_whitespace().nth(1) {
        Some("on") => true,
        Some("off") => false,
        other => panic!("not a definite state for {mechanism}: {other:?}\n{}", run.both()),
    }
}

/// The explanation lines of `mechanism` (its state line and the ones indented below it).
fn lines_of<'a>(run: &'a Run, mechanism: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = run.stdout.lines().collect();
    let at = lines.iter().position(|l| l.split_whitespace().next() == Some(mechanism)).unwrap();
    let mut out = vec![lines[at]];
    out.extend(lines[at + 1..].iter().take_while(|l| l.starts_with(&format!("  {:<18}", ""))).copied());
    out
}

const POLICY: &str = "layout = \"block\"\nbuiltin-requirements = false\n";

/// The members of Debian's 6.12 source package these tests read, extracted once per run.
fn real_6_12() -> &'static Path {
    static TREE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &TREE
        .get_or_init(|| {
            let members = ["scripts/Makefile.lib", "scripts/Makefile.build", "rust/Makefile", "rust/build_error.rs"];
            let (dir, tree) = fixture_tree::extract_6_12("sanpolicy-kobj-6.12-", &members);
            fs::write(tree.join("sanitizer-policy.toml"), POLICY).unwrap();
            (dir, tree)
        })
        .1
}

/// rust/build_error.o is in `obj-y` only with CONFIG_RUST_BUILD_ASSERT_ALLOW, else in
/// `always-y`; line 450 makes it a kernel object either way. Before the model, sanpolicy said
/// "not a kernel object" and KASAN/KCOV off without CONFIG_RUST_BUILD_ASSERT_ALLOW.
#[test]
fn rust_build_error_is_what_make_says() {
    let tree = real_6_12();
    let makefile = fs::read_to_string(tree.join("rust/Makefile")).unwrap();
    assert_eq!(
        makefile.lines().nth(449),
        Some("$(obj)/build_error.o: private is-kernel-object := y"),
        "the line this test is about"
    );
    for allow in ["", "y"] {
        let config = [
            ("CONFIG_RUST", "y"),
            ("CONFIG_RUST_BUILD_ASSERT_ALLOW", allow),
            ("CONFIG_KASAN", "y"),
            ("CONFIG_KASAN_GENERIC", "y"),
            ("CONFIG_KCOV", "y"),
            ("CONFIG_KCOV_INSTRUMENT_ALL", "y"),
        ];
        let make = make_says(tree, "rust", "build_error.o", &config, &["rust/compiler_builtins.o"]);
        let run = explain(tree, "rust/build_error.o", &config);
        let what = format!("CONFIG_RUST_BUILD_ASSERT_ALLOW={allow:?}: make {make:?}\n{}", run.both());
        assert_eq!(state_of(&run, "kasan"), make.kasan, "{what}");
        assert_eq!(state_of(&run, "kcov"), make.kcov, "{what}");
        let note = run.stdout.lines().find(|l| l.contains("note: for the given .config")).unwrap_or("");
        let kernel = if make.kernel_object.is_empty() { "not a kernel object" } else { "a kernel object" };
        assert!(note.contains(&format!(": {kernel} in this build")), "{what}");
        assert!(note.contains("rust/Makefile:450"), "the line deciding it is named: {what}");
    }
}

/// Conditional, empty, `n` and `$(CONFIG_)` values, with each modifier: every object agrees
/// with make in every combination of the symbols.
#[test]
fn conditional_values_agree_with_make() {
    let makefile = "obj-y += a.o c.o e.o\n\
                    always-y += b.o\n\
                    $(obj)/a.o: private is-kernel-object :=\n\
                    ifdef CONFIG_B\n\
                    $(obj)/b.o: override is-kernel-object = y\n\
                    endif\n\
                    ifndef CONFIG_C\n\
                    ${obj}/c.o $(obj)/c.rlib: export is-kernel-object := $(CONFIG_CVAL)\n\
                    endif\n\
                    $(obj)/e.o: is-kernel-object := n\n";
    let tree = fixture_tree::rules_tree("sanpolicy-kobj-", "");
    fs::create_dir_all(tree.path().join("d")).unwrap();
    fs::write(tree.path().join("d/Makefile"), makefile).unwrap();
    fs::write(tree.path().join("sanitizer-policy.toml"), POLICY).unwrap();
    let mut compared = 0;
    for b in ["y", ""] {
        for c in ["y", ""] {
            for cval in ["m", ""] {
                let config = [
                    ("CONFIG_B", b),
                    ("CONFIG_C", c),
                    ("CONFIG_CVAL", cval),
                    ("CONFIG_KASAN", "y"),
                    ("CONFIG_KASAN_GENERIC", "y"),
                    ("CONFIG_KCOV", "y"),
                    ("CONFIG_KCOV_INSTRUMENT_ALL", "y"),
                ];
                for object in ["a.o", "b.o", "c.o", "e.o"] {
                    let make = make_says(tree.path(), "d", object, &config, &[]);
                    let run = explain(tree.path(), &format!("d/{object}"), &config);
                    let what = format!("{object} under {config:?}: make {make:?}\n{}", run.both());
                    assert_eq!(state_of(&run, "kasan"), make.kasan, "{what}");
                    assert_eq!(state_of(&run, "kcov"), make.kcov, "{what}");
                    let json = run_in(
                        tree.path(),
                        &["explain", "--format", "json", "--config", "test.config", &format!("d/{object}")],
                    );
                    let json: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
                    assert_eq!(json[0]["kernel_object"], !make.kernel_object.is_empty(), "{what}");
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 32);
    // Over all configurations (every object taken as listed in obj-y): c.o is not a kernel
    // object exactly where its line applies with an empty value.
    let run = run_in(tree.path(), &["explain", "d/c.o"]);
    let kasan = lines_of(&run, "kasan").join("\n");
    assert!(kasan.contains("on iff CONFIG_CVAL or CONFIG_C"), "{}", run.both());
    assert!(run.stdout.contains("d/Makefile:8 sets its `is-kernel-object`"), "{}", run.both());
}

/// Forms the model does not evaluate are named by `explain` for every mechanism that reads
/// `$(is-kernel-object)` (not for ftrace, whose flags do not), and fail `check`'s proof.
#[test]
fn unevaluated_forms_are_flagged() {
    for line in [
        "$(obj)/p$(X).o: private is-kernel-object := y",
        "$(obj)/%.o: is-kernel-object := y",
        "%.o: is-kernel-object := y",
        "p.o: is-kernel-object := y",
        "$(obj)/p.o: is-kernel-object += y",
        "$(obj)/p.o: is-kernel-object := $(part-of-module)",
    ] {
        let makefile = format!("obj-y += p.o\n{line}\nKASAN_SANITIZE := n\n");
        let tree = fixture_tree::rules_tree("sanpolicy-kobj-", "");
        fs::create_dir_all(tree.path().join("o")).unwrap();
        fs::write(tree.path().join("o/Makefile"), &makefile).unwrap();
        let policy = format!("{POLICY}[[require]]\npath = \"o/\"\nexempt = [\"kasan\"]\nwhy = \"test\"\n");
        fs::write(tree.path().join("sanitizer-policy.toml"), policy).unwrap();
        let config = [("CONFIG_KASAN", "y"), ("CONFIG_KCOV", "y"), ("CONFIG_FUNCTION_TRACER", "y")];
        let run = explain(tree.path(), "o/p.o", &config);
        let flag = "not certain: o/Makefile:2 has a target-specific `is-kernel-object`";
        for m in ["kasan", "kcov"] {
            assert!(lines_of(&run, m).iter().any(|l| l.contains(flag)), "{line}: {m}\n{}", run.both());
        }
        assert!(!lines_of(&run, "ftrace").iter().any(|l| l.contains(flag)), "{line}: ftrace\n{}", run.both());
        let run = run_in(tree.path(), &["check"]);
        assert_ne!(run.code, 0, "{line}\n{}", run.both());
        assert!(
            run.stderr.contains("opaque-construct") && run.stderr.contains("o/Makefile:2"),
            "{line}\n{}",
            run.both()
        );
    }
}
