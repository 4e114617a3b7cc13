//! Call edges read from machine code (`derive::objcalls`, derive's call graph for clang builds),
//! judged on objects that clang and gcc compile here: against the calls the fixture's source
//! makes (written below by hand, from the C), and against gcc's own `-fcallgraph-info` for the
//! same source. The whole-kernel comparison with gcc's call graph is in `tests/derive.rs`.

use std::collections::BTreeSet;
use std::fs;
use std::process::Command;

use sanpolicy::derive::{callgraph, objcalls};

/// Every shape of call a kernel object has: a `static` callee in the same section (no
/// relocation: the assembler resolves it), one in another section (a relocation to the section),
/// a global and an external callee, a tail call (a jump), a call through a pointer, and loops
/// whose jumps stay inside their function.
const FIXTURE: &str = r#"
extern void ext(long);
extern long ext2(long);
static __attribute__((noinline)) long helper(long x) { ext(x); return x * 3; }
static __attribute__((noinline, section(".text.unlikely"))) long far_helper(long x) { ext(x + 1); return x; }
__attribute__((noinline)) long loop(long n) { long s = 0; for (long i = 0; i < n; i++) s += helper(i); return s; }
long tail(long x) { return ext2(x + 1); }
long viaptr(long (*fp)(long), long x) { return fp(x) + 1; }
long other(long x) { return far_helper(x) + helper(x) + loop(x); }
long leaf(long x) { while (x > 7) x = x / 2 + 1; return x; }
"#;

/// The calls the fixture's source makes, by function name (`*` for a call through a pointer).
const SOURCE_CALLS: &[(&str, &str)] = &[
    ("helper", "ext"),
    ("far_helper", "ext"),
    ("loop", "helper"),
    ("tail", "ext2"),
    ("viaptr", "*"),
    ("other", "far_helper"),
    ("other", "helper"),
    ("other", "loop"),
];

/// Compile the fixture with `compiler` and kernel-like flags; the directory holds `t.o` (and,
/// for gcc, `t.ci`).
fn compile(compiler: &str, flags: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("t.c"), FIXTURE).unwrap();
    let out = Command::new(compiler)
        .current_dir(dir.path())
        .args(["-c", "-O2"])
        .args(flags)
        .arg("t.c")
        .output()
        .unwrap_or_else(|e| panic!("{compiler} is needed for this test (apt-get install gcc clang): {e}"));
    assert!(out.status.success(), "{compiler} failed: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

/// (caller, callee) by name, `*` for a call through a pointer, without `static` title prefixes.
fn edges(unit: &callgraph::Unit) -> BTreeSet<(String, String)> {
    let name = |title: &str| -> String {
        match unit.defined.iter().find(|d| d.title == title) {
            Some(d) => d.name.clone(),
            None if title == callgraph::INDIRECT => "*".into(),
            None => title.to_string(),
        }
    };
    unit.calls.iter().map(|c| (name(&c.from), name(&c.to))).collect()
}

fn expected() -> BTreeSet<(String, String)> {
    SOURCE_CALLS.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// The edges by source name: gcc's clones (`helper.constprop.0`) named as in the C.
fn by_source_name(edges: BTreeSet<(String, String)>) -> BTreeSet<(String, String)> {
    let base = |n: &str| n.split('.').next().unwrap_or(n).to_string();
    edges.into_iter().map(|(a, b)| (base(&a), base(&b))).collect()
}

fn read(dir: &tempfile::TempDir) -> callgraph::Unit {
    let bytes = fs::read(dir.path().join("t.o")).unwrap();
    objcalls::unit(&bytes, "t.o").unwrap()
}

#[test]
fn clang_objects_give_the_calls_the_source_makes() {
    // Plain, then as the kernel builds with clang: retpolines through external thunks and
    // returns through `__x86_return_thunk` (clang 14 has no `-mfunction-return`; the gcc case
    // below has it).
    for flags in [&[][..], &["-mretpoline-external-thunk", "-fno-jump-tables"][..]] {
        let unit = read(&compile("clang", flags));
        assert_eq!(edges(&unit), expected(), "clang {flags:?}");
        let helper = unit.defined.iter().find(|d| d.name == "helper").unwrap();
        assert!(helper.is_static && helper.title == "t.o:helper", "{helper:?}");
        assert!(unit.defined.iter().any(|d| d.name == "loop" && !d.is_static && d.title == "loop"));
        assert_eq!(unit.indirect_calls(), 1, "clang {flags:?}");
    }
}

#[test]
fn gcc_objects_give_what_gccs_own_call_graph_says() {
    let kernel_like = ["-mindirect-branch=thunk-extern", "-mfunction-return=thunk-extern", "-fno-jump-tables"];
    for flags in [&["-fcallgraph-info"][..], &[&["-fcallgraph-info"][..], &kernel_like[..]].concat()[..]] {
        let dir = compile("gcc", flags);
        let from_code = read(&dir);
        let ci = callgraph::parse(&fs::read_to_string(dir.path().join("t.ci")).unwrap()).unwrap();
        assert_eq!(edges(&from_code), edges(&ci), "gcc {flags:?}: machine code against gcc's call graph");
        assert_eq!(by_source_name(edges(&from_code)), expected(), "gcc {flags:?}");
        // gcc's clone names (`helper.constprop.0`) and `static` titles match the object's.
        let mut defined: Vec<(String, bool)> =
            from_code.defined.iter().map(|d| (d.name.clone(), d.is_static)).collect();
        let mut gcc: Vec<(String, bool)> = ci.defined.iter().map(|d| (d.name.clone(), d.is_static)).collect();
        defined.sort();
        gcc.sort();
        assert_eq!(defined, gcc, "gcc {flags:?}");
    }
}

#[test]
fn objects_of_other_architectures_and_garbage_are_refused_with_a_reason() {
    let e = objcalls::unit(b"not an object", "x.o").unwrap_err();
    assert!(!e.is_empty());
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("t.c"), FIXTURE).unwrap();
    let arm = Command::new("clang")
        .current_dir(dir.path())
        .args(["--target=aarch64-linux-gnu", "-c", "-O2", "t.c"])
        .status()
        .expect("clang is needed for this test");
    assert!(arm.success());
    let e = objcalls::unit(&fs::read(dir.path().join("t.o")).unwrap(), "t.o").unwrap_err();
    assert!(e.contains("Aarch64") && e.contains("x86_64 machine code only"), "{e}");
}
