//! `explain --config` against the flags real Kbuild passes to gcc (issue 11).
//!
//! Debian's 6.12 source package, configured in a temporary build directory for x86_64
//! from `tinyconfig` with KASAN (generic, outline), KCOV (all), UBSAN (bounds, shift), GCOV
//! (all), the function tracer, lockdep and stack depot, prepared (`make prepare`), and a few
//! dozen single objects are compiled. For each object, the command Kbuild ran (the `savedcmd_`
//! line of `B/<dir>/.<obj>.o.cmd`) says per mechanism whether it was on: its compiler flag, or
//! the objtool run appended to the command. `sanpolicy explain --config B/.config` must say
//! the same for every object and mechanism. gcc and make are the judges.
//!
//! The tree is the extraction `tests/kbuild_build` shares under the target directory (the
//! build never writes into the source).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

mod kbuild_build;
use kbuild_build::{on_in_command, run};

/// The objects compiled and compared: the runtimes and their neighbours, objects exempt by
/// directory, by file, by `$(BITS)` name, a vdso object (not a kernel object), lib-y objects.
const OBJECTS: &[&str] = &[
    "kernel/locking/lockdep.o",
    "kernel/locking/spinlock.o",
    "kernel/locking/mutex.o",
    "lib/stackdepot.o",
    "lib/string.o",
    "lib/sort.o",
    "lib/ubsan.o",
    "lib/bitmap.o",
    "mm/kasan/common.o",
    "mm/kasan/generic.o",
    "mm/kasan/report.o",
    "mm/kasan/shadow.o",
    "mm/kasan/init.o",
    "mm/kasan/quarantine.o",
    "kernel/kcov.o",
    "mm/slub.o",
    "kernel/trace/trace.o",
    "kernel/trace/ftrace.o",
    "kernel/trace/ring_buffer.o",
    "kernel/trace/trace_output.o",
    "arch/x86/kernel/head64.o",
    "arch/x86/kernel/dumpstack_64.o",
    "arch/x86/kernel/traps.o",
    "arch/x86/kernel/irq_64.o",
    "arch/x86/entry/vdso/vclock_gettime.o",
    "arch/x86/entry/vdso/vgetcpu.o",
    "kernel/fork.o",
    "kernel/panic.o",
    "kernel/stacktrace.o",
    "arch/x86/mm/physaddr.o",
];

/// Kconfig changes on top of `tinyconfig` (`scripts/config` arguments). IBT is off so that
/// objtool runs per object (with IBT it runs on vmlinux.o only).
const CONFIG: &[&str] = &[
    "-e",
    "64BIT",
    "-e",
    "PRINTK",
    "-d",
    "SLUB_TINY",
    "-e",
    "SYSFS",
    "-e",
    "EXPERT",
    "-e",
    "SMP",
    "-e",
    "DEBUG_KERNEL",
    "-e",
    "KASAN",
    "-e",
    "KASAN_GENERIC",
    "-e",
    "KASAN_OUTLINE",
    "-d",
    "KASAN_INLINE",
    "-e",
    "PROVE_LOCKING",
    "-e",
    "DEBUG_LOCK_ALLOC",
    "-e",
    "STACKDEPOT",
    "-e",
    "STACKTRACE",
    "-e",
    "SLUB_DEBUG",
    "-e",
    "KCOV",
    "-e",
    "KCOV_INSTRUMENT_ALL",
    "-e",
    "UBSAN",
    "-e",
    "UBSAN_BOUNDS",
    "-e",
    "UBSAN_SHIFT",
    "-e",
    "DEBUG_FS",
    "-e",
    "GCOV_KERNEL",
    "-e",
    "GCOV_PROFILE_ALL",
    "-e",
    "FTRACE",
    "-e",
    "FUNCTION_TRACER",
    "-d",
    "X86_KERNEL_IBT",
];

/// Options that must have survived `olddefconfig` (else the comparison would prove little).
const REQUIRED: &[&str] = &[
    "CONFIG_KASAN=y",
    "CONFIG_KASAN_GENERIC=y",
    "CONFIG_KCOV=y",
    "CONFIG_KCOV_INSTRUMENT_ALL=y",
    "CONFIG_UBSAN=y",
    "CONFIG_GCOV_KERNEL=y",
    "CONFIG_GCOV_PROFILE_ALL=y",
    "CONFIG_FUNCTION_TRACER=y",
    "CONFIG_OBJTOOL=y",
    "CONFIG_PROVE_LOCKING=y",
    "CONFIG_STACKDEPOT=y",
];

fn make(src: &Path, build: &Path) -> Command {
    let mut c = Command::new("make");
    c.arg("-C").arg(src).arg(format!("O={}", build.display())).arg("-s").arg("-j2").arg("ARCH=x86_64");
    for var in ["KCFLAGS", "KBUILD_OUTPUT", "ARCH", "CROSS_COMPILE", "MAKEFLAGS", "MFLAGS"] {
        c.env_remove(var);
    }
    c
}

#[test]
fn explain_with_a_config_agrees_with_the_flags_gcc_gets() {
    let started = Instant::now();
    let scratch = tempfile::Builder::new().prefix("sanpolicy-gcc-").tempdir().unwrap();
    // The shared extraction under the target directory (read only: the build is in `B`).
    let src = kbuild_build::tree();
    let build = scratch.path().join("B");
    run(make(&src, &build).arg("tinyconfig"), "make tinyconfig");
    let config = build.join(".config");
    run(Command::new(src.join("scripts/config")).arg("--file").arg(&config).args(CONFIG), "scripts/config");
    run(make(&src, &build).arg("olddefconfig"), "make olddefconfig");
    let text = std::fs::read_to_string(&config).unwrap();
    for option in REQUIRED {
        assert!(text.lines().any(|l| l == *option), "{option} did not survive olddefconfig");
    }
    let configured = started.elapsed();
    run(make(&src, &build).arg("prepare"), "make prepare");
    let prepared = started.elapsed();
    run(make(&src, &build).args(OBJECTS), "make OBJECTS");
    let compiled = started.elapsed();

    // What Kbuild did, per object and mechanism.
    let mut kbuild: BTreeMap<(&str, &str), bool> = BTreeMap::new();
    for object in OBJECTS {
        let (dir, file) = object.rsplit_once('/').unwrap();
        let cmd_file = build.join(dir).join(format!(".{file}.cmd"));
        let text = std::fs::read_to_string(&cmd_file).unwrap_or_else(|e| panic!("{}: {e}", cmd_file.display()));
        let line = text
            .lines()
            .find(|l| l.starts_with("savedcmd_"))
            .unwrap_or_else(|| panic!("no savedcmd_ in {}", cmd_file.display()));
        let command = line.split_once(":=").unwrap().1;
        assert!(command.contains(" -c -o "), "{object}: not a compile command: {command}");
        for m in ["kasan", "kcov", "ubsan", "ubsan-signed-wrap", "gcov", "ftrace", "objtool", "kcsan"] {
            kbuild.insert((object, m), on_in_command(m, command).unwrap());
        }
    }

    // What sanpolicy says, for the same .config, with no policy of its own.
    let policy = scratch.path().join("empty-policy.toml");
    std::fs::write(&policy, "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .arg("explain")
        .arg("--tree")
        .arg(&src)
        .arg("--policy")
        .arg(&policy)
        .arg("--config")
        .arg(&config)
        .args(["--format", "json"])
        .args(OBJECTS)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "explain failed: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut disagreements = Vec::new();
    let mut on = 0;
    for (object, e) in OBJECTS.iter().zip(json.as_array().unwrap()) {
        assert_eq!(e["object"], *object);
        for m in e["mechanisms"].as_array().unwrap() {
            let name = m["mechanism"].as_str().unwrap();
            let Some(&gcc) = kbuild.get(&(object, name)) else { continue };
            let state = m["state"].as_str().unwrap();
            assert!(state == "on" || state == "off", "{object} {name}: `{state}` is not definite with --config");
            on += usize::from(gcc);
            if (state == "on") != gcc {
                disagreements.push(format!("{object} {name}: kbuild {gcc}, explain {state} ({})", m["decided_by"]));
            }
        }
    }
    println!(
        "compared {} decisions ({on} on) for {} objects; configured {configured:.0?}, prepared {prepared:.0?}, compiled {compiled:.0?}, total {:.0?}",
        kbuild.len(),
        OBJECTS.len(),
        started.elapsed()
    );
    assert!(disagreements.is_empty(), "explain --config disagrees with Kbuild:\n{}", disagreements.join("\n"));
    // Both outcomes occur for the mechanisms the configuration enables.
    for m in ["kasan", "kcov", "ubsan", "gcov", "ftrace", "objtool"] {
        let states: Vec<bool> = OBJECTS.iter().map(|o| kbuild[&(*o, m)]).collect();
        assert!(states.contains(&true) && states.contains(&false), "{m}: {states:?}");
    }
}
