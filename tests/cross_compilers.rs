//! `explain --config` against the compiler's real command lines beyond x86_64 and gcc (issue 21):
//! arm64 with Debian's `gcc-aarch64-linux-gnu` (KASAN generic, and software tags), and x86_64
//! with Debian's clang (`LLVM=1`; KASAN, and KMSAN, which only clang has). Each configuration is
//! `defconfig` plus the mechanisms' symbols, prepared once in a fixed build directory under the
//! target directory (`target/tmp/kbuild/<name>`, rebuilt incrementally by Kbuild on a rerun),
//! and a few directories are built with *directory* targets (`make O=… arch/arm64/mm/`), never
//! single objects: a single target builds a `lib-y` object as if it belonged to the parent
//! directory (`-DKBUILD_MODFILE='"arch/arm64/insn"'`) and without its instrumentation. Every C
//! object of those directories that Kbuild compiled is compared, per mechanism, with the
//! command in its `.o.cmd`, and its `KBUILD_MODFILE` must name its own directory.
//!
//! The arm64 generic KASAN case runs in CI; the others are `#[ignore]`d (each prepares its own
//! kernel configuration, minutes on two cores) and run with `cargo xtask judge NAME` (or
//! `cargo xtask judge all`), as the book's table says (docs/src/explanation/proofs.md).

mod kbuild_build;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use kbuild_build::{make, on_in_command, run, saved_command};

/// One configuration to judge.
struct Judge {
    name: &'static str,
    /// `make` variables choosing the arch and compiler (`ARCH=arm64 CROSS_COMPILE=…`, `LLVM=1`).
    vars: &'static [&'static str],
    /// `scripts/config` arguments on top of `defconfig` (and [`COMMON`]).
    config: &'static str,
    /// `.config` lines that must have survived `olddefconfig`.
    required: &'static [&'static str],
    /// Directory targets built and compared.
    dirs: &'static [&'static str],
    /// Mechanisms compared.
    mechanisms: &'static [&'static str],
}

const ARM64: &[&str] = &["ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-"];
const CLANG: &[&str] = &["ARCH=x86_64", "LLVM=1"];

/// The mechanisms besides KASAN/KMSAN every configuration turns on (`scripts/config` arguments).
const COMMON: &str = "-e DEBUG_KERNEL -e KCOV -e KCOV_INSTRUMENT_ALL -e UBSAN -e UBSAN_BOUNDS -e UBSAN_SHIFT \
                      -e FTRACE -e FUNCTION_TRACER -e PROVE_LOCKING -e DEBUG_LOCK_ALLOC -e STACKDEPOT";

const ARM64_DIRS: &[&str] =
    &["arch/arm64/mm/", "arch/arm64/lib/", "arch/arm64/kernel/vdso/", "mm/kasan/", "kernel/locking/"];
const ARM64_MECHANISMS: &[&str] = &["kasan", "kcov", "ubsan", "ftrace", "kmsan"];
const X86_MECHANISMS: &[&str] = &["kasan", "kcov", "ubsan", "ftrace", "objtool", "kmsan"];

const ARM64_KASAN: Judge = Judge {
    name: "arm64-gcc-kasan-generic",
    vars: ARM64,
    config: "-e KASAN -e KASAN_GENERIC -d KASAN_SW_TAGS -d KASAN_HW_TAGS -e KASAN_OUTLINE -d KASAN_INLINE",
    required: &["CONFIG_ARM64=y", "CONFIG_CC_IS_GCC=y", "CONFIG_KASAN=y", "CONFIG_KASAN_GENERIC=y"],
    dirs: ARM64_DIRS,
    mechanisms: ARM64_MECHANISMS,
};

/// Software tags, with `arch/arm64/kernel/` (the most exemptions of arm64) besides.
const ARM64_SW_TAGS: Judge = Judge {
    name: "arm64-gcc-kasan-sw-tags",
    vars: ARM64,
    config: "-e KASAN -d KASAN_GENERIC -e KASAN_SW_TAGS -d KASAN_HW_TAGS -e KASAN_OUTLINE -d KASAN_INLINE",
    required: &["CONFIG_ARM64=y", "CONFIG_CC_IS_GCC=y", "CONFIG_KASAN=y", "CONFIG_KASAN_SW_TAGS=y"],
    dirs: &["arch/arm64/kernel/", "arch/arm64/mm/", "arch/arm64/lib/", "mm/kasan/", "kernel/locking/"],
    mechanisms: ARM64_MECHANISMS,
};

const CLANG_KASAN: Judge = Judge {
    name: "x86-clang-kasan",
    vars: CLANG,
    config: "-e KASAN -e KASAN_GENERIC -e KASAN_OUTLINE -d KASAN_INLINE -d X86_KERNEL_IBT",
    required: &["CONFIG_X86_64=y", "CONFIG_CC_IS_CLANG=y", "CONFIG_KASAN=y", "CONFIG_KASAN_GENERIC=y"],
    dirs: &["arch/x86/mm/", "arch/x86/entry/", "mm/kasan/", "kernel/locking/"],
    mechanisms: X86_MECHANISMS,
};

const CLANG_KMSAN: Judge = Judge {
    name: "x86-clang-kmsan",
    vars: CLANG,
    config: "-d KASAN -d KCSAN -e KMSAN -d X86_KERNEL_IBT",
    required: &["CONFIG_X86_64=y", "CONFIG_CC_IS_CLANG=y", "CONFIG_KMSAN=y"],
    dirs: &["arch/x86/mm/", "arch/x86/entry/", "mm/kmsan/", "kernel/locking/"],
    mechanisms: X86_MECHANISMS,
};

/// Configure (when the `.config` lacks what is required), prepare and build the directories.
fn build(judge: &Judge, tree: &Path, build: &Path) {
    let config = build.join(".config");
    let configured = |text: &str| judge.required.iter().all(|r| text.lines().any(|l| l == *r));
    if !configured(&fs::read_to_string(&config).unwrap_or_default()) {
        run(make(tree, build, judge.vars).arg("defconfig"), "make defconfig");
        let args: Vec<&str> = COMMON.split_whitespace().chain(judge.config.split_whitespace()).collect();
        run(Command::new(tree.join("scripts/config")).arg("--file").arg(&config).args(&args), "scripts/config");
        run(make(tree, build, judge.vars).arg("olddefconfig"), "make olddefconfig");
        let text = fs::read_to_string(&config).unwrap();
        for r in judge.required {
            assert!(text.lines().any(|l| l == *r), "{}: {r} did not survive olddefconfig", judge.name);
        }
    }
    run(make(tree, build, judge.vars).arg("prepare"), "make prepare");
    run(make(tree, build, judge.vars).args(judge.dirs), "make DIRS");
}

/// The comparison: (object, mechanism) pairs compared and the disagreements.
fn compare(judge: &Judge, tree: &Path, build: &Path) -> (usize, usize, Vec<String>) {
    // Every C object below the directory targets (a directory target builds its subdirectories).
    let all = kbuild_build::c_objects(tree);
    let objects: Vec<String> = all
        .into_iter()
        .filter(|o| judge.dirs.iter().any(|d| o.starts_with(d)))
        .filter(|o| saved_command(build, o).is_some())
        .collect();
    let mut problems = Vec::new();
    let mut kbuild: BTreeMap<(String, &str), bool> = BTreeMap::new();
    for object in &objects {
        let command = saved_command(build, object).unwrap();
        assert!(command.contains(" -c -o "), "{object}: not a compile command: {command}");
        // `-DKBUILD_MODFILE='"arch/arm64/lib/insn"'`: built by its own directory's kbuild file
        // (the nearest directory up that has one: `arch/x86/entry/vdso/` builds `vdso32/*.o`).
        if let Some(modfile) = command.split_whitespace().find_map(|w| w.strip_prefix("-DKBUILD_MODFILE=")) {
            let modfile = modfile.trim_matches(|c| c == '\'' || c == '"');
            let mut home = Path::new(object.as_str()).parent().unwrap();
            while !tree.join(home).join("Makefile").is_file() && !tree.join(home).join("Kbuild").is_file() {
                home = home.parent().unwrap();
            }
            if Path::new(modfile).parent() != Some(home) {
                problems.push(format!("{object}: built as `{modfile}`, not by {}/", home.display()));
            }
        }
        for m in judge.mechanisms {
            kbuild.insert((object.clone(), m), on_in_command(m, &command).unwrap());
        }
    }
    let empty = build.join("sanpolicy-empty-policy.toml");
    fs::write(&empty, "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .args(["explain", "--format", "json", "--tree"])
        .arg(tree)
        .arg("--policy")
        .arg(&empty)
        .arg("--config")
        .arg(build.join(".config"))
        .args(&objects)
        .output()
        .unwrap();
    assert!(out.status.success(), "explain failed: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut pairs = 0;
    for (object, e) in objects.iter().zip(json.as_array().unwrap()) {
        assert_eq!(e["object"], object.as_str());
        for m in e["mechanisms"].as_array().unwrap() {
            let name = m["mechanism"].as_str().unwrap();
            let Some(&compiler) = kbuild.get(&(object.clone(), name)) else { continue };
            let state = m["state"].as_str().unwrap();
            pairs += 1;
            if (state == "on") != compiler {
                problems.push(format!("{object} {name}: compiler {compiler}, explain {state} ({})", m["decided_by"]));
            }
        }
    }
    (objects.len(), pairs, problems)
}

fn judge(judge: &Judge) {
    let tree = kbuild_build::tree();
    let dir = kbuild_build::base().join(judge.name);
    build(judge, &tree, &dir);
    let (objects, pairs, problems) = compare(judge, &tree, &dir);
    eprintln!("{}: {objects} objects, {pairs} (object, mechanism) pairs, {} disagreements", judge.name, problems.len());
    assert!(problems.is_empty(), "{}:\n{}", judge.name, problems.join("\n"));
    assert!(objects >= 40, "{}: only {objects} objects compiled", judge.name);
    // Each mechanism is on somewhere and off somewhere: the comparison can tell.
    let text = fs::read_to_string(dir.join(".config")).unwrap();
    assert!(judge.required.iter().all(|r| text.contains(r)));
}

/// `check --config` with the bundled requirements and a policy imported from the pristine tree
/// (so the tree's own lines decide): the requirements this build does not compile are named as
/// not applicable with the line that decides it, and lockdep is reported instrumented by KASAN.
fn check_requirements(judge: &Judge) -> String {
    let tree = kbuild_build::tree();
    let dir = kbuild_build::base().join(judge.name);
    let policy = dir.join("sanpolicy-imported-policy.toml");
    let sanpolicy =
        |args: &[&std::ffi::OsStr]| Command::new(env!("CARGO_BIN_EXE_sanpolicy")).args(args).output().unwrap();
    let out = sanpolicy(&[
        "import".as_ref(),
        "--force".as_ref(),
        "--tree".as_ref(),
        tree.as_os_str(),
        "--out".as_ref(),
        policy.as_os_str(),
    ]);
    assert!(out.status.success(), "import: {}", String::from_utf8_lossy(&out.stderr));
    let config = dir.join(".config");
    let out = sanpolicy(&[
        "check".as_ref(),
        "--tree".as_ref(),
        tree.as_os_str(),
        "--policy".as_ref(),
        policy.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
    ]);
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn arm64_gcc_kasan_generic_agrees_with_the_compiler() {
    judge(&ARM64_KASAN);
    let stderr = check_requirements(&ARM64_KASAN);
    assert!(
        stderr.contains(
            "`kernel/locking/lockdep.o` must be exempt from `kasan` but it is instrumented in this configuration"
        ),
        "{stderr}"
    );
    for unbuilt in ["kernel/kcsan/", "mm/kmsan/"] {
        let note = format!("requirement for `{unbuilt}` does not apply in this configuration: not built");
        assert!(stderr.contains(&note), "{unbuilt}:\n{stderr}");
    }
}

#[test]
#[ignore = "reason: prepares an arm64 kernel and builds six directories (minutes on 2 cores); cargo xtask judge arm64-gcc-kasan-sw-tags"]
fn arm64_gcc_kasan_sw_tags_agrees_with_the_compiler() {
    judge(&ARM64_SW_TAGS);
}

#[test]
#[ignore = "reason: prepares an x86_64 clang kernel and builds five directories (minutes on 2 cores); cargo xtask judge x86-clang-kasan"]
fn x86_clang_kasan_agrees_with_the_compiler() {
    judge(&CLANG_KASAN);
}

#[test]
#[ignore = "reason: prepares an x86_64 clang kernel and builds five directories (minutes on 2 cores); cargo xtask judge x86-clang-kmsan"]
fn x86_clang_kmsan_agrees_with_the_compiler() {
    judge(&CLANG_KMSAN);
}
