//! Shared by `tests/descent.rs`, `tests/cross_compilers.rs` and `cargo xtask judge`: Debian's 6.12
//! source package extracted once into a fixed directory under the target directory, and build
//! directories beside it that Kbuild rebuilds incrementally across runs (a fixed path, so a
//! second run recompiles only what changed). The judges here are the real build's own files:
//! archive members (`ar t`), `modules.order` and `.mod` files, and each object's `.o.cmd`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the extracted tree and the build directories live: `KBUILD_JUDGE_DIR`, else
/// `target/tmp/kbuild` (the tests' `CARGO_TARGET_TMPDIR`).
pub fn base() -> PathBuf {
    match std::env::var_os("KBUILD_JUDGE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_TARGET_TMPDIR")).join("kbuild"),
    }
}

/// The pristine 6.12 tree, extracted from `/usr/src/linux-source-6.12.tar.xz` on first use.
/// A marker file says the extraction finished; an unfinished one is removed and redone.
pub fn tree() -> PathBuf {
    let base = base();
    let tree = base.join("linux-6.12");
    let marker = base.join("linux-6.12.extracted");
    if marker.is_file() && tree.join("Makefile").is_file() {
        return tree;
    }
    let tarball = Path::new("/usr/src/linux-source-6.12.tar.xz");
    assert!(
        tarball.is_file(),
        "{} is missing: install it with `apt-get install linux-source-6.12` (.ci/run does)",
        tarball.display()
    );
    fs::create_dir_all(&base).unwrap();
    let _ = fs::remove_dir_all(&tree);
    let _ = fs::remove_dir_all(base.join("linux-source-6.12"));
    run(Command::new("tar").arg("-xf").arg(tarball).arg("-C").arg(&base), "tar");
    fs::rename(base.join("linux-source-6.12"), &tree).unwrap();
    fs::write(&marker, "").unwrap();
    tree
}

/// Run a command to success; its stdout.
pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `make -C tree O=build ARGS` at low priority, with the caller's make/compiler variables cleared.
pub fn make(tree: &Path, build: &Path, vars: &[&str]) -> Command {
    let mut c = Command::new("nice");
    c.args(["-n", "10", "make", "-s"]).arg("-C").arg(tree).arg(format!("O={}", build.display()));
    c.arg(format!("-j{}", std::thread::available_parallelism().map_or(2, |n| n.get())));
    c.args(vars);
    for var in ["KCFLAGS", "KBUILD_OUTPUT", "ARCH", "CROSS_COMPILE", "LLVM", "CC", "MAKEFLAGS", "MFLAGS"] {
        c.env_remove(var);
    }
    c
}

/// What Kbuild built, read from the build directory: objects that are members of a `built-in.a`
/// or `lib.a` archive (`y`), and those of a module in `modules.order` (`m`: the module object,
/// or the parts its `.mod` file lists).
pub fn built_objects(build: &Path) -> BTreeMap<String, char> {
    let mut out = BTreeMap::new();
    let mut archives: Vec<PathBuf> = vec![build.join("built-in.a")];
    for entry in walkdir::WalkDir::new(build).into_iter().filter_map(Result::ok) {
        if entry.file_name() == "lib.a" {
            archives.push(entry.into_path());
        }
    }
    for archive in archives.iter().filter(|a| a.is_file()) {
        // `ar t` names a thin archive's members as the archive is named: run in the build
        // directory on the archive's path from there, it gives paths from the build directory.
        let rel = archive.strip_prefix(build).unwrap();
        let members = run(Command::new("ar").arg("t").arg(rel).current_dir(build), "ar t");
        for m in members.lines() {
            out.insert(normalize(Path::new(m.trim())), 'y');
        }
    }
    let order = fs::read_to_string(build.join("modules.order")).unwrap_or_default();
    for module in order.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mod_file = build.join(module).with_extension("mod");
        let parts = fs::read_to_string(&mod_file).unwrap_or_else(|_| module.to_string());
        for part in parts.split_whitespace() {
            out.entry(normalize(Path::new(part))).or_insert('m');
        }
    }
    out
}

fn normalize(p: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}

/// Every `.c` file of the tree as an object path (`x.c` gives `x.o`), sorted.
pub fn c_objects(tree: &Path) -> BTreeSet<String> {
    walkdir::WalkDir::new(tree)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "c"))
        .filter_map(|e| Some(e.path().strip_prefix(tree).ok()?.with_extension("o").to_str()?.to_string()))
        .collect()
}

/// The compile command Kbuild recorded for `object` (`savedcmd_` of `<dir>/.<obj>.o.cmd`).
pub fn saved_command(build: &Path, object: &str) -> Option<String> {
    let (dir, file) = object.rsplit_once('/').unwrap_or((".", object));
    let text = fs::read_to_string(build.join(dir).join(format!(".{file}.cmd"))).ok()?;
    let line = text.lines().find(|l| l.starts_with("savedcmd_"))?;
    Some(line.split_once(":=")?.1.trim().to_string())
}

/// Whether `mechanism` was on in the command Kbuild ran for an object (gcc or clang, x86_64 or
/// arm64): its compiler flag, or the objtool run appended to the command.
pub fn on_in_command(mechanism: &str, command: &str) -> Option<bool> {
    let (compile, after) = command.split_once(" -c -o ").unwrap_or((command, ""));
    let words: Vec<&str> = compile.split_whitespace().collect();
    let has = |flag: &str| words.contains(&flag);
    let others = ["kernel-address", "kernel-hwaddress", "kernel-memory", "thread", "signed-integer-overflow", "kcfi"];
    let ubsan = |w: &&str| w.strip_prefix("-fsanitize=").is_some_and(|s| !others.contains(&s));
    Some(match mechanism {
        "kasan" => has("-fsanitize=kernel-address") || has("-fsanitize=kernel-hwaddress"),
        "kcov" => has("-fsanitize-coverage=trace-pc"),
        "ubsan" => words.iter().any(ubsan),
        "ubsan-signed-wrap" => has("-fsanitize=signed-integer-overflow"),
        "kmsan" => has("-fsanitize=kernel-memory"),
        "gcov" => has("-fprofile-arcs"),
        // x86 and gcc: `-pg`; arm64: a patchable entry (`-fpatchable-function-entry=4,2`).
        "ftrace" => has("-pg") || words.iter().any(|w| w.starts_with("-fpatchable-function-entry=")),
        // The objtool run follows the compile in the same command (`; ./tools/objtool/objtool …`).
        "objtool" => after.contains("tools/objtool/objtool "),
        "kcsan" => has("-fsanitize=thread"),
        _ => return None,
    })
}

/// `explain --format json`'s `built` and `built_line` of each object, in order.
pub fn built_answers(json: &[u8]) -> Vec<(String, String)> {
    let json: serde_json::Value = serde_json::from_slice(json).expect("explain --format json prints JSON");
    let answers = json.as_array().expect("one entry per object").iter();
    answers
        .map(|e| (e["built"].as_str().unwrap().to_string(), e["built_line"].as_str().unwrap_or("").to_string()))
        .collect()
}

/// The differences between sanpolicy's descent (`kbuild::descent`, for the build's `.config`)
/// and what the build made (`built_objects`), over every `.c` of the tree as an object, as
/// `object: sanpolicy X, kbuild Y` lines; and how many objects sanpolicy calls `y`, `m`, `n`.
pub fn descent_differences(tree: &Path, build: &Path) -> (Vec<String>, [usize; 3]) {
    use sanpolicy::kbuild::descent::{Built, Descent};
    let text = fs::read_to_string(build.join(".config")).unwrap();
    let config = sanpolicy::kbuild::dotconfig::DotConfig::parse(&text).unwrap();
    let descent = Descent::walk(tree, &config).unwrap();
    let kbuild = built_objects(build);
    let mut differences = Vec::new();
    let mut counts = [0; 3];
    for object in c_objects(tree) {
        let answer = descent.built(&object);
        let ours = answer.built.as_str().chars().next().unwrap();
        let theirs = kbuild.get(&object).copied().unwrap_or('n');
        counts[match answer.built {
            Built::Y => 0,
            Built::M => 1,
            Built::N => 2,
        }] += 1;
        if ours != theirs {
            differences.push(format!("{object}: sanpolicy {ours}, kbuild {theirs} ({})", answer.why));
        }
    }
    (differences, counts)
}
