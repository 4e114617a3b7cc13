//! The effective state is exact in every configuration: requirements are judged per object over
//! the Kconfig symbols that can decide it (no silent limit), `ifdef X`/`ifndef X` are one
//! symbol, `*_ALL` switches are symbols rather than assumed on, `$(BITS)` names are expanded as
//! Kbuild does, and `explain` says what its answer rests on. Issue 11, points 1 to 4.

mod fixture_tree;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fixture_tree::{run_in, Run};

/// A tree with Linux 6.12's rule files and `files` (path, text).
fn tree_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("sanpolicy-exact-").tempdir().unwrap();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules/linux-6.12/scripts");
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), dir.path().join("scripts").join(f)).unwrap();
    }
    for (path, text) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, own_requirements(path, text)).unwrap();
    }
    dir
}

/// These tests judge their own requirements only: a policy they write opts out of the
/// built-in ones (which would add findings about `mm/kasan/` and others). They also judge the
/// lines the tree has by hand beside the policy's, which the block layout keeps in place (in
/// the in-place layout a line the policy lacks is drift, planned away).
fn own_requirements(path: &str, text: &str) -> String {
    if path == "sanitizer-policy.toml" {
        format!("layout = \"block\"\nbuiltin-requirements = false\n{text}")
    } else {
        text.to_string()
    }
}

fn unit(path: &str, key: &str, when: Option<&str>) -> String {
    let when = when.map(|w| format!("when = \"{w}\"\n")).unwrap_or_default();
    format!("[[unit]]\npath = \"{path}\"\n{key} = [\"kasan\"]\n{when}why = \"test\"\n\n")
}

const REQUIRE_KASAN_DIR: &str =
    "[[require]]\npath = \"mm/kasan/\"\nexempt = [\"kasan\"]\nwhy = \"the KASAN runtime checks itself\"\n";

/// The reproducer: a directory requirement, a directory skip, ten conditional skips
/// and `z.o` forced on under `ifdef CONFIG_ZZ`. The old walk took the union of eleven guards,
/// kept the first ten after sorting and passed.
#[test]
fn a_forced_object_is_found_among_many_conditional_skips() {
    let mut policy = unit("mm/kasan/", "skip", None);
    let mut sources = vec![("mm/kasan/z.c".to_string(), String::new())];
    for i in 0..10 {
        policy.push_str(&unit(&format!("mm/kasan/d{i}.o"), "skip", Some(&format!("ifdef CONFIG_D{i}"))));
        sources.push((format!("mm/kasan/d{i}.c"), String::new()));
    }
    policy.push_str(&unit("mm/kasan/z.o", "force", Some("ifdef CONFIG_ZZ")));
    policy.push_str(REQUIRE_KASAN_DIR);
    let mut files: Vec<(&str, &str)> = sources.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    files.push(("mm/kasan/Makefile", "obj-y := z.o\n"));
    files.push(("sanitizer-policy.toml", &policy));
    let tree = tree_with(&files);
    let run = run_in(tree.path(), &["check"]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stderr.contains("`mm/kasan/z.o` is instrumented when `CONFIG_ZZ=y`"),
        "the forced object is reported with its symbol:\n{}",
        run.both()
    );
}

/// `ifdef CONFIG_X` and `ifndef CONFIG_X` test one symbol: an object skipped under both is
/// skipped in every configuration. As two independent guards, "neither holds" was a case.
#[test]
fn ifdef_and_ifndef_of_one_symbol_are_one_symbol() {
    let policy = format!(
        "{}{}[[require]]\npath = \"mm/kasan/a.o\"\nexempt = [\"kasan\"]\nwhy = \"runtime\"\n",
        unit("mm/kasan/a.o", "skip", Some("ifdef CONFIG_X")),
        unit("mm/kasan/a.o", "skip", Some("ifndef CONFIG_X"))
    );
    let tree =
        tree_with(&[("mm/kasan/a.c", ""), ("mm/kasan/Makefile", "obj-y := a.o\n"), ("sanitizer-policy.toml", &policy)]);
    let run = run_in(tree.path(), &["check"]);
    assert!(!run.stderr.contains("recursion-prone"), "{}", run.both());
    // explain answers for the tree on disk: the policy's lines are written first.
    let gen = run_in(tree.path(), &["gen-makefiles"]);
    assert_eq!(gen.code, 0, "{}", gen.both());
    let run = run_in(tree.path(), &["explain", "mm/kasan/a.o"]);
    assert!(run.stdout.lines().any(|l| l.trim_start().starts_with("kasan") && l.contains(" off ")), "{}", run.both());
}

/// More symbols than the walk enumerates for one object is an error, never a pass.
#[test]
fn too_many_symbols_for_one_object_is_an_error() {
    let mut makefile = String::from("obj-y := a.o\n");
    for i in 0..20 {
        makefile.push_str(&format!("ifdef CONFIG_S{i}\nKASAN_SANITIZE_a.o := n\nendif\n"));
    }
    let policy = "[[require]]\npath = \"mm/kasan/a.o\"\nexempt = [\"kasan\"]\nwhy = \"runtime\"\n";
    let tree = tree_with(&[("mm/kasan/a.c", ""), ("mm/kasan/Makefile", &makefile), ("sanitizer-policy.toml", policy)]);
    let run = run_in(tree.path(), &["check"]);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(run.stderr.contains("cannot prove `mm/kasan/a.o` exempt from `kasan`"), "{}", run.both());
    // For one build it is decided: under CONFIG_S3 the object is exempt.
    fs::write(tree.path().join("build.config"), "CONFIG_KASAN=y\nCONFIG_S3=y\n").unwrap();
    let run = run_in(tree.path(), &["check", "--config", "build.config"]);
    assert!(!run.stderr.contains("recursion-prone"), "{}", run.both());
    fs::write(tree.path().join("build.config"), "CONFIG_KASAN=y\n").unwrap();
    let run = run_in(tree.path(), &["check", "--config", "build.config"]);
    assert!(run.stderr.contains("is instrumented in this configuration"), "{}", run.both());
}

#[test]
fn a_bad_config_is_refused_at_its_line() {
    let tree = tree_with(&[("sanitizer-policy.toml", REQUIRE_KASAN_DIR), ("bad.config", "CONFIG_A=y\nnonsense\n")]);
    let run = run_in(tree.path(), &["explain", "--config", "bad.config", "mm/kasan/a.o"]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stderr.contains("bad-config") && run.stderr.contains("bad.config:2"), "{}", run.both());
}

/// Files of Debian's 6.12 source package, extracted once per run (only these members).
fn real_6_12() -> &'static Path {
    static TREE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &TREE
        .get_or_init(|| {
            let members = [
                "scripts/Makefile.lib",
                "scripts/Makefile.build",
                "arch/x86/Makefile",
                "arch/x86/kernel/Makefile",
                "arch/x86/kernel/head64.c",
                "arch/x86/kernel/dumpstack_64.c",
                "kernel/trace/Makefile",
                "kernel/trace/trace.c",
                "arch/powerpc/Makefile",
                "arch/powerpc/kexec/Makefile",
                "arch/powerpc/kexec/core_64.c",
            ];
            fixture_tree::extract_6_12("sanpolicy-exact-6.12-", &members)
        })
        .1
}

/// A hard-linked copy of the extracted files with `policy` as the tree's policy.
fn real_with_policy(policy: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("sanpolicy-exact-copy-").tempdir().unwrap();
    let status =
        Command::new("cp").arg("-al").arg(format!("{}/.", real_6_12().display())).arg(dir.path()).status().unwrap();
    assert!(status.success());
    fs::write(dir.path().join("sanitizer-policy.toml"), own_requirements("sanitizer-policy.toml", policy)).unwrap();
    dir
}

/// The state column of `mechanism` in `explain`'s text.
fn state_of(run: &Run, mechanism: &str) -> String {
    let line = run
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(mechanism))
        .unwrap_or_else(|| panic!("no {mechanism} line:\n{}", run.both()));
    line.split_whitespace().nth(1).unwrap().to_string()
}

#[test]
fn bits_names_are_expanded_as_kbuild_does() {
    let policy = "[[require]]\npath = \"arch/x86/kernel/head64.o\"\nexempt = [\"kasan\", \"kcov\", \"kmsan\"]\nwhy = \"early boot\"\n\n\
                  [[require]]\npath = \"arch/powerpc/kexec/core_64.o\"\nexempt = [\"kasan\", \"kcov\", \"ubsan\", \"gcov\"]\nwhy = \"kexec\"\n";
    let tree = real_with_policy(policy);
    let run = run_in(tree.path(), &["explain", "arch/x86/kernel/head64.o"]);
    for m in ["kasan", "kcov", "kmsan"] {
        assert_eq!(state_of(&run, m), "off", "{m}:\n{}", run.both());
    }
    assert!(run.stdout.contains("names expanded with BITS=64"), "{}", run.both());
    let run = run_in(tree.path(), &["explain", "arch/x86/kernel/dumpstack_64.o"]);
    for m in ["kasan", "kcov"] {
        assert_eq!(state_of(&run, m), "off", "{m}:\n{}", run.both());
    }
    let run = run_in(tree.path(), &["explain", "arch/powerpc/kexec/core_64.o"]);
    for m in ["kasan", "kcov", "ubsan", "gcov"] {
        assert_eq!(state_of(&run, m), "off", "{m}:\n{}", run.both());
    }
    let run = run_in(tree.path(), &["check"]);
    assert!(!run.stderr.contains("recursion-prone"), "the requirements hold:\n{}", run.both());
    // With a 32-bit configuration, BITS is 32 and head64.o is not what the lines name.
    fs::write(tree.path().join("x86_32.config"), "CONFIG_X86_32=y\nCONFIG_KASAN=y\n").unwrap();
    let run = run_in(tree.path(), &["explain", "--config", "x86_32.config", "arch/x86/kernel/head64.o"]);
    assert!(run.stdout.contains("names expanded with BITS=32"), "{}", run.both());
}

#[test]
fn all_switches_are_not_assumed_on() {
    let tree = real_with_policy("");
    let run = run_in(tree.path(), &["explain", "kernel/trace/trace.o"]);
    assert_eq!(state_of(&run, "gcov"), "cond", "{}", run.both());
    assert!(run.stdout.contains("on iff CONFIG_GCOV_PROFILE_FTRACE or CONFIG_GCOV_PROFILE_ALL"), "{}", run.both());
    assert!(run.stdout.contains("on iff CONFIG_KCOV_INSTRUMENT_ALL"), "{}", run.both());
    // Defaults print with what they mean for the object.
    let objtool = run.stdout.lines().find(|l| l.trim_start().starts_with("objtool")).unwrap();
    assert!(objtool.contains("meaning on"), "{objtool}");
    let barriers = run.stdout.lines().find(|l| l.trim_start().starts_with("kcsan-barriers")).unwrap();
    assert!(barriers.contains("meaning off"), "{barriers}");
}

#[test]
fn explain_says_what_its_answer_rests_on() {
    let policy = "[[unit]]\npath = \"kernel/trace/trace.o\"\nskip = [\"kasan\"]\nwhen = \"ifdef CONFIG_SOMETHING\"\nwhy = \"a reason to cite\"\n";
    let tree = real_with_policy(policy);
    // explain answers for the tree on disk: the policy's line is written first.
    let gen = run_in(tree.path(), &["gen-makefiles"]);
    assert_eq!(gen.code, 0, "{}", gen.both());
    let run = run_in(tree.path(), &["explain", "kernel/trace/trace.o"]);
    let at = run.stdout.find("\n  kasan").unwrap_or_else(|| panic!("{}", run.both()));
    let kasan: Vec<&str> = run.stdout[at + 1..].lines().take(4).collect();
    assert!(kasan[0].contains("policy") && kasan[0].contains("under `ifdef CONFIG_SOMETHING`"), "{kasan:?}");
    assert!(kasan.iter().any(|l| l.contains("a reason to cite")), "{kasan:?}");
    assert!(kasan.iter().any(|l| l.contains("on iff not CONFIG_SOMETHING")), "{kasan:?}");

    let run = run_in(tree.path(), &["explain", "--format", "json", "kernel/trace/trace.o"]);
    let json: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let kasan = json[0]["mechanisms"].as_array().unwrap().iter().find(|m| m["mechanism"] == "kasan").unwrap();
    assert_eq!(kasan["reason"], serde_json::json!(["a reason to cite"]), "{kasan}");
    assert!(kasan["generated_line"].as_str().unwrap().contains("kernel/trace/Makefile:"), "{kasan}");

    // A name nothing in the tree or the policy has is a mistake: exit 2, the nearest name.
    let run = run_in(tree.path(), &["explain", "kernel/trace/no_such_file.o"]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stderr.contains("no source for `kernel/trace/no_such_file.o`"), "{}", run.both());
    let run = run_in(tree.path(), &["explain", "kernel/trace/trce.o"]);
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stderr.contains("did you mean `kernel/trace/trace.o`?"), "{}", run.both());
    assert!(run.stdout.is_empty(), "no states for a mistyped name: {}", run.both());
    // From a subdirectory, `./x` names the tree's `x` when the subdirectory has no such path.
    let run = run_in(&tree.path().join("kernel/trace"), &["explain", "./arch/x86/kernel/head64.o"]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(run.stdout.starts_with("arch/x86/kernel/head64.o "), "{}", run.both());
    // Where the subdirectory has the path, it is the subdirectory's.
    let run = run_in(&tree.path().join("kernel"), &["explain", "./trace/trace.o"]);
    assert!(run.stdout.starts_with("kernel/trace/trace.o "), "{}", run.both());
    let run = run_in(tree.path(), &["explain", "kernel/trace/trace.o"]);
    assert!(!run.stdout.contains("no source"), "{}", run.both());
}

/// A directory requirement sees `head$(BITS).o` forced back on under each name the arch
/// Makefile can spell; it was left out, and the directory passed.
#[test]
fn a_directory_requirement_sees_bits_names() {
    let policy = "[[require]]\npath = \"arch/x86/kernel/\"\nexempt = [\"kasan\"]\nwhy = \"test\"\n";
    let tree = tree_with(&[
        ("arch/x86/Makefile", "ifeq ($(CONFIG_X86_32),y)\nBITS := 32\nelse\nBITS := 64\nendif\n"),
        (
            "arch/x86/kernel/Makefile",
            "obj-y := head$(BITS).o\nKASAN_SANITIZE := n\nKASAN_SANITIZE_head$(BITS).o := y\n",
        ),
        ("arch/x86/kernel/head64.c", ""),
        ("arch/x86/kernel/head32.c", ""),
        ("sanitizer-policy.toml", policy),
    ]);
    let run = run_in(tree.path(), &["check"]);
    assert!(run.stderr.contains("`arch/x86/kernel/head"), "{}", run.both());
    assert_eq!(run.code, 1, "{}", run.both());
}

/// With `--config`, a directory requirement covers every object the directory links in that
/// build (the stand-in "any object" alone would be a kernel object exempt by the directory).
#[test]
fn a_directory_requirement_for_one_build_covers_its_objects() {
    let makefile =
        "obj-y := a.o\nobj-$(CONFIG_B) += b.o\nKASAN_SANITIZE := n\nifdef CONFIG_C\nKASAN_SANITIZE_b.o := y\nendif\n";
    let tree = tree_with(&[
        ("mm/kasan/a.c", ""),
        ("mm/kasan/b.c", ""),
        ("mm/kasan/Makefile", makefile),
        ("sanitizer-policy.toml", REQUIRE_KASAN_DIR),
        ("on.config", "CONFIG_KASAN=y\nCONFIG_B=y\nCONFIG_C=y\n"),
        ("off.config", "CONFIG_KASAN=y\nCONFIG_B=y\n"),
    ]);
    let run = run_in(tree.path(), &["check", "--config", "on.config"]);
    assert!(run.stderr.contains("`mm/kasan/b.o` is instrumented in this configuration"), "{}", run.both());
    let run = run_in(tree.path(), &["check", "--config", "off.config"]);
    assert!(!run.stderr.contains("recursion-prone"), "{}", run.both());
    let run = run_in(tree.path(), &["explain", "--config", "on.config", "mm/kasan/b.o"]);
    assert_eq!(state_of(&run, "kasan"), "on", "{}", run.both());
    assert!(run.stdout.contains("a kernel object (obj-y/obj-m/lib-y) in this build"), "{}", run.both());
}
