//! The central layout's precedence, proved with real Kbuild and gcc (x86_64, Linux 6.12).
//!
//! `/usr/src/linux-source-6.12.tar.xz` is extracted (once per run, `support/kernel_source.rs`),
//! a hard-linked copy gets the central file and the include line, both written by
//! `emit::central` from a small policy, and objects are built out of tree (`make O=B`) as the
//! tree's own `make` builds them. The real compile command of each object is read from
//! `B/<dir>/.<obj>.o.cmd` (`savedcmd_…`), once before the include line exists (baseline) and once
//! after. What `emit::central`'s documentation states must hold:
//!
//! - the central file's value wins over the directory's own line for the same variable
//!   (`kernel/Makefile` says `KASAN_SANITIZE_kcov.o := n`, the central file `:= y`: KASAN on);
//! - a per-object line in the central file beats the directory's own directory-wide value
//!   (`kernel/locking/Makefile` says `KCOV_INSTRUMENT := n`, the central file
//!   `KCOV_INSTRUMENT_mutex.o := y`: KCOV on for mutex.o only);
//! - a unit the tree lacks takes effect (`KASAN_SANITIZE_lockdep.o := n`: KASAN off);
//! - a flag removal adds to what the directory removes (`CFLAGS_REMOVE_softirq.o +=
//!   $(CC_FLAGS_FTRACE)`: no `-pg`/`-mfentry`), and a flag re-added per object beats the
//!   directory's removal (`kernel/trace` removes ftrace; `CFLAGS_trace_clock.o +=
//!   $(CC_FLAGS_FTRACE)`: traced);
//! - a directory line the central file does not mention still applies (lockdep.o keeps the
//!   directory's `KCOV_INSTRUMENT := n` and its `CFLAGS_REMOVE_lockdep.o`);
//! - an object the central file does not name, in a named directory (`kernel/locking/semaphore.o`)
//!   or another one (`lib/string.o`), compiles with exactly the command of the baseline.
//!
//! Every changed flag is also asserted in its opposite state in the baseline, so the test fails
//! if the include line is not read. Nothing passes without the tarball, make or gcc: each
//! missing prerequisite fails the test with what to install.

mod kernel_source;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use kernel_source::Lease;
use sanpolicy::emit::central::{include_line, render_central, CENTRAL_FILE};
use sanpolicy::kbuild::Rules;
use sanpolicy::policy::parse_str;

const POLICY: &str = r#"
[[unit]]
path = "kernel/locking/lockdep.o"
skip = ["kasan"]
why = "Avoid recursion lockdep -> sanitizer -> ... -> lockdep."

[[unit]]
path = "kernel/locking/mutex.o"
force = ["kcov"]
why = "Test: per-object force beats the directory's KCOV_INSTRUMENT := n."

[[unit]]
path = "kernel/kcov.o"
force = ["kasan"]
why = "Test: overrides kernel/Makefile's KASAN_SANITIZE_kcov.o := n."

[[unit]]
path = "kernel/softirq.o"
skip = ["ftrace"]
why = "Test: an ftrace removal for an object that has none."

[[unit]]
path = "kernel/trace/trace_clock.o"
force = ["ftrace"]
why = "Test: traced despite kernel/trace's ccflags-remove of ftrace."
"#;

/// Kconfig symbols enabled on top of `defconfig`, and those that must be `=y` afterwards.
const ENABLE: &[&str] = &[
    "DEBUG_KERNEL",
    "KASAN",
    "KASAN_GENERIC",
    "KASAN_OUTLINE",
    "KCOV",
    "KCOV_INSTRUMENT_ALL",
    "FTRACE",
    "FUNCTION_TRACER",
    "PROVE_LOCKING",
    "DEBUG_LOCK_ALLOC",
    "LOCKDEP",
];
const DISABLE: &[&str] = &["KASAN_INLINE"];
const REQUIRED: &[&str] = &[
    "KASAN",
    "KASAN_GENERIC",
    "KASAN_OUTLINE",
    "KCOV",
    "KCOV_INSTRUMENT_ALL",
    "FUNCTION_TRACER",
    "LOCKDEP",
    "TRACE_CLOCK",
];

const KASAN: &str = "-fsanitize=kernel-address";
const KCOV: &str = "-fsanitize-coverage=trace-pc";
/// `CC_FLAGS_FTRACE` on x86_64 has both (`-mfentry` because of `CONFIG_HAVE_FENTRY`).
const FTRACE: [&str; 2] = ["-pg", "-mfentry"];

/// The objects built, each with the flags it must have (`true`) or lack (`false`) before and
/// after the include line. `None`: the whole command must be the same before and after.
struct Object {
    path: &'static str,
    expect: Option<&'static [(&'static str, bool, bool)]>,
}

const OBJECTS: &[Object] = &[
    // New unit; the directory's KCOV_INSTRUMENT := n and its ftrace removal still apply.
    Object {
        path: "kernel/locking/lockdep.o",
        expect: Some(&[
            (KASAN, true, false),
            (KCOV, false, false),
            (FTRACE[0], false, false),
            (FTRACE[1], false, false),
        ]),
    },
    // Per-object force beats the directory's own `KCOV_INSTRUMENT := n`.
    Object {
        path: "kernel/locking/mutex.o",
        expect: Some(&[(KCOV, false, true), (KASAN, true, true), (FTRACE[0], true, true)]),
    },
    // Same variable in both files: the central file's `:=` comes last and wins.
    Object { path: "kernel/kcov.o", expect: Some(&[(KASAN, false, true), (KCOV, false, false)]) },
    // A removal the object did not have.
    Object {
        path: "kernel/softirq.o",
        expect: Some(&[(FTRACE[0], true, false), (FTRACE[1], true, false), (KASAN, true, true)]),
    },
    // Re-added per object after the directory's removal.
    Object {
        path: "kernel/trace/trace_clock.o",
        expect: Some(&[(FTRACE[0], false, true), (FTRACE[1], false, true), (KCOV, true, true)]),
    },
    // Not named by the central file, in a directory it names and in one it does not.
    Object { path: "kernel/locking/semaphore.o", expect: None },
    Object { path: "lib/string.o", expect: None },
];

#[test]
fn central_layout_precedence_with_real_kbuild_6_12() {
    let total = Instant::now();
    let lease = Lease::extracted("6.12");
    let scratch = tempfile::Builder::new().prefix("sanpolicy-central-kbuild-").tempdir().expect("temporary directory");
    let src = scratch.path().join("src");
    let build = scratch.path().join("B");
    link_copy(lease.tree(), &src);
    let original_build_file = fs::read(lease.tree().join("scripts/Makefile.build")).unwrap();

    configure(&src, &build);
    let start = Instant::now();
    make(&src, &build, &["prepare"]);
    say(&format!("central-kbuild: `make prepare` in {:.1?}", start.elapsed()));

    let before = build_objects(&src, &build);

    // The central file and the include line, both from `emit::central`, written by rename so
    // that the hard-linked original is never written.
    let (policy, diags) = parse_str(Path::new("sanitizer-policy.toml"), POLICY);
    assert!(!diags.has_errors(), "{:?}", diags.iter().map(|d| d.one_line()).collect::<Vec<_>>());
    let central = render_central(&policy.units_by_dir(), &Rules::builtin());
    assert!(!src.join(CENTRAL_FILE).exists(), "the pristine tree already has {CENTRAL_FILE}");
    write_by_rename(&src.join(CENTRAL_FILE), &central);
    let makefile_build = fs::read_to_string(src.join("scripts/Makefile.build")).unwrap();
    write_by_rename(&src.join("scripts/Makefile.build"), &include_line(&makefile_build).expect("include line"));
    let after = build_objects(&src, &build);
    assert_eq!(
        fs::read(lease.tree().join("scripts/Makefile.build")).unwrap(),
        original_build_file,
        "the extracted original was written"
    );

    let mut problems = Vec::new();
    for object in OBJECTS {
        let (b, a) = (&before[object.path], &after[object.path]);
        match object.expect {
            None if a != b => problems.push(format!(
                "{}: the command changed without the central file naming it:\n  before: {b}\n  after:  {a}",
                object.path
            )),
            None => {}
            Some(flags) => {
                for &(flag, want_before, want_after) in flags {
                    for (when, cmd, want) in [("before", b, want_before), ("after", a, want_after)] {
                        let has = cmd.split_whitespace().any(|w| w == flag);
                        if has != want {
                            problems.push(format!(
                                "{} {when} the include line: `{flag}` {}",
                                object.path,
                                if want { "missing" } else { "present" }
                            ));
                        }
                    }
                }
            }
        }
    }
    say(&format!("central-kbuild: {} objects built twice, {:.1?} in all", OBJECTS.len(), total.elapsed()));
    assert!(problems.is_empty(), "central layout precedence:\n- {}", problems.join("\n- "));
}

/// `cp -al` (hard links), or a full copy on another file system.
fn link_copy(original: &Path, copy: &Path) {
    let start = Instant::now();
    let linked =
        Command::new("cp").arg("-al").arg(original).arg(copy).stderr(Stdio::null()).status().expect("running cp");
    if !linked.success() {
        let _ = fs::remove_dir_all(copy);
        let status = Command::new("cp").arg("-a").arg(original).arg(copy).status().expect("running cp");
        assert!(status.success(), "cp -a {} {} failed", original.display(), copy.display());
    }
    say(&format!("central-kbuild: copied the tree in {:.1?}", start.elapsed()));
}

/// `defconfig` plus generic outline KASAN, KCOV, the function tracer and lockdep; fails unless
/// every symbol the assertions rely on ended up `=y`.
fn configure(src: &Path, build: &Path) {
    make(src, build, &["defconfig"]);
    let mut config = Command::new(src.join("scripts/config"));
    config.arg("--file").arg(build.join(".config"));
    for s in ENABLE {
        config.args(["-e", s]);
    }
    for s in DISABLE {
        config.args(["-d", s]);
    }
    let status = config.status().expect("running scripts/config");
    assert!(status.success(), "scripts/config failed: {status}");
    make(src, build, &["olddefconfig"]);
    let text = fs::read_to_string(build.join(".config")).unwrap();
    let missing: Vec<&&str> = REQUIRED.iter().filter(|s| !text.lines().any(|l| l == format!("CONFIG_{s}=y"))).collect();
    assert!(missing.is_empty(), "olddefconfig left these unset (check the compiler): {missing:?}");
}

/// Build every object of [`OBJECTS`] from scratch (its `.o` and `.cmd` removed first, so the
/// command is the one Kbuild computes now) and return each one's compile command.
fn build_objects(src: &Path, build: &Path) -> BTreeMap<&'static str, String> {
    let start = Instant::now();
    for o in OBJECTS {
        let _ = fs::remove_file(build.join(o.path));
        let _ = fs::remove_file(cmd_file(build, o.path));
    }
    let targets: Vec<&str> = OBJECTS.iter().map(|o| o.path).collect();
    make(src, build, &targets);
    say(&format!("central-kbuild: built {} objects in {:.1?}", targets.len(), start.elapsed()));
    OBJECTS.iter().map(|o| (o.path, saved_command(build, o.path))).collect()
}

fn cmd_file(build: &Path, object: &str) -> PathBuf {
    let (dir, name) = object.rsplit_once('/').unwrap();
    build.join(dir).join(format!(".{name}.cmd"))
}

/// The compile command Kbuild recorded for `object` (`savedcmd_<object> := …`).
fn saved_command(build: &Path, object: &str) -> String {
    let path = cmd_file(build, object);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let prefix = format!("savedcmd_{object} := ");
    let line = text.lines().find_map(|l| l.strip_prefix(&prefix));
    let command = line.unwrap_or_else(|| panic!("{}: no `{prefix}` line", path.display()));
    assert!(
        command.split_whitespace().next().is_some_and(|w| w.ends_with("gcc")),
        "{object}: not a gcc command: {command}"
    );
    command.to_string()
}

/// `make -C src O=build ARCH=x86_64 -j2 args…`, with make variables from the environment that
/// Kbuild would read (§5 of the Kbuild notes: the environment leaks into directives) removed.
/// Fails with the end of make's output.
fn make(src: &Path, build: &Path, args: &[&str]) {
    let mut cmd = Command::new("make");
    cmd.arg("-C").arg(src).arg(format!("O={}", build.display())).args(["ARCH=x86_64", "-j2"]).args(args);
    for (name, _) in std::env::vars() {
        let leaks = ["KASAN_", "KCSAN_", "KCOV_", "UBSAN_", "KMSAN_", "GCOV_", "OBJECT_FILES_", "CFLAGS_", "KBUILD_"];
        if leaks.iter().any(|p| name.starts_with(p))
            || ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CROSS_COMPILE", "CC", "LLVM"].contains(&name.as_str())
        {
            cmd.env_remove(name);
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("running make (install GNU make): {e}"));
    if !out.status.success() {
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
        panic!(
            "make {} failed ({}); a kernel build needs gcc, flex, bison, bc, libelf-dev and libssl-dev:\n{}",
            args.join(" "),
            out.status,
            tail.join("\n")
        );
    }
}

/// Write through a temporary file and a rename, so a hard-linked original keeps its content.
fn write_by_rename(path: &Path, text: &str) {
    let tmp = path.with_extension("sanpolicy-tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}
