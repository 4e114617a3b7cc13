//! `explain`, `check` and `report` with `--config` on a miniature tree (issue 21): an object of
//! a directory the build does not descend into is "not built", with the parent's line that
//! decides it, and a requirement on it does not apply; the same requirement applies (and
//! breaks) once the `.config` turns the directory on. The descent itself is proven against real
//! Kbuild in `tests/descent.rs`; this is the command-line surface, fast.

mod fixture_tree;
mod kbuild_build;

use std::fs;

use fixture_tree::run_in;

const POLICY: &str = "layout = \"block\"\nbuiltin-requirements = false\n\
    [[require]]\npath = \"mm/kmsan/\"\nexempt = [\"kmsan\"]\nwhy = \"the runtime\"\n\
    [[require]]\npath = \"mm/slub.o\"\nexempt = [\"kasan\"]\nwhy = \"a test\"\n";

fn tree() -> tempfile::TempDir {
    let t = fixture_tree::rules_tree("sanpolicy-built-", "lib-y += a.o\n");
    let files = [
        ("Makefile", "core-y :=\nlibs-y := lib/\ninclude $(srctree)/arch/$(SRCARCH)/Makefile\nexport ARCH_LIB := $(filter %/, $(libs-y))\n"),
        ("Kbuild", "obj-y += arch/$(SRCARCH)/\nobj-y += mm/\nobj-y += $(ARCH_LIB)\n"),
        ("arch/x86/Makefile", "export BITS := 64\n"),
        ("arch/x86/Kconfig", ""),
        ("arch/arm64/Makefile", ""),
        ("arch/arm64/kernel/Makefile", "obj-y += head.o\n"),
        ("arch/arm64/kernel/head.c", ""),
        ("arch/x86/Kbuild", ""),
        ("mm/Makefile", "obj-y += slub.o\nobj-$(CONFIG_KMSAN) += kmsan/\n"),
        ("mm/slub.c", ""),
        ("mm/kmsan/Makefile", "KMSAN_SANITIZE := n\nobj-y := core.o\n"),
        ("mm/kmsan/core.c", ""),
        ("sanitizer-policy.toml", POLICY),
        ("kasan.config", "CONFIG_X86=y\nCONFIG_X86_64=y\nCONFIG_KASAN=y\nCONFIG_KASAN_GENERIC=y\n"),
        ("kmsan.config", "CONFIG_X86=y\nCONFIG_X86_64=y\nCONFIG_KMSAN=y\n"),
    ];
    for (path, text) in files {
        let p = t.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    t
}

#[test]
fn unbuilt_objects_are_named_with_the_line_that_decides() {
    let t = tree();
    let run = run_in(
        t.path(),
        &[
            "explain",
            "--format",
            "json",
            "--config",
            "kasan.config",
            "mm/kmsan/core.o",
            "arch/arm64/kernel/head.o",
            "mm/slub.o",
            "lib/a.o",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.both());
    let built = kbuild_build::built_answers(run.stdout.as_bytes());
    let built: Vec<(&str, &str)> = built.iter().map(|(b, l)| (b.as_str(), l.as_str())).collect();
    assert_eq!(built, [("n", "mm/Makefile:2"), ("n", "Kbuild:1"), ("y", ""), ("y", "")]);
    let text = run_in(t.path(), &["explain", "--config", "kasan.config", "mm/kmsan/core.o"]);
    assert!(
        text.stdout.contains("not built in this configuration")
            && text.stdout.contains("`obj-$(CONFIG_KMSAN) += kmsan/`"),
        "{}",
        text.both()
    );
    // Without a .config, nothing is said about being built.
    let all = run_in(t.path(), &["explain", "--format", "json", "mm/kmsan/core.o"]);
    let all: serde_json::Value = serde_json::from_str(&all.stdout).unwrap();
    assert!(all[0]["built"].is_null(), "{all}");
}

#[test]
fn requirements_on_unbuilt_objects_do_not_apply() {
    let t = tree();
    let check = run_in(t.path(), &["check", "--config", "kasan.config"]);
    assert!(
        check.stderr.contains("requirement for `mm/kmsan/` does not apply in this configuration: not built")
            && check.stderr.contains("mm/Makefile:2"),
        "{}",
        check.both()
    );
    assert!(check.stderr.contains("`mm/slub.o` must be exempt from `kasan`"), "{}", check.both());
    // KMSAN on: mm/kmsan/ is built and exempt (the directory's KMSAN_SANITIZE := n).
    let check = run_in(t.path(), &["check", "--config", "kmsan.config"]);
    assert!(!check.stderr.contains("`mm/kmsan/` does not apply"), "{}", check.both());
    assert!(!check.stderr.contains("`mm/kmsan/` must be exempt"), "{}", check.both());
    let report = run_in(t.path(), &["report", "--format", "json", "--config", "kasan.config"]);
    assert_eq!(report.code, 0, "{}", report.both());
    let json: serde_json::Value = serde_json::from_str(&report.stdout).unwrap();
    let reqs = json["requirements"].as_array().unwrap();
    let kmsan = reqs.iter().find(|r| r["path"] == "mm/kmsan/").unwrap();
    assert!(kmsan["not_built"].as_str().unwrap().contains("mm/Makefile:2"), "{kmsan}");
    let slub = reqs.iter().find(|r| r["path"] == "mm/slub.o").unwrap();
    assert_eq!((slub["holds"].as_bool(), slub["not_built"].is_null()), (Some(false), true), "{slub}");
}
