//! The central layout drops a line the directory's own Makefile keeps (issue 9): the section
//! resets the line's variable to empty, after the directory's lines. GNU make, running the
//! real `scripts/Makefile.build` and `scripts/Makefile.lib` of 6.1 and 6.12 (fixtures), must
//! give every object exactly the flags of a tree whose Makefile never had the dropped lines,
//! for every mechanism, per object and per directory; sync and drift must read the reset as
//! "the policy has no unit for it", and still report a line a merge adds. Every step runs the
//! real binary on a small tree.

mod fixture_tree;

use std::fs;
use std::path::Path;
use std::process::Command;

use fixture_tree::{all_green, ok, run_in, Fingerprint};

const CENTRAL: &str = "scripts/Makefile.sanpolicy";

/// A line for every mechanism, per object (`a.o`, with `b.o` forced) and per directory.
const OBJECT_LINES: &str = "\
# Object reason.
KASAN_SANITIZE_a.o := n
KCSAN_SANITIZE_a.o := n
KCSAN_INSTRUMENT_BARRIERS_a.o := y
KCOV_INSTRUMENT_a.o := n
UBSAN_SANITIZE_a.o := n
UBSAN_SIGNED_WRAP_a.o := n
KMSAN_SANITIZE_a.o := n
KMSAN_ENABLE_CHECKS_a.o := n
GCOV_PROFILE_a.o := y
OBJECT_FILES_NON_STANDARD_a.o := y
CFLAGS_REMOVE_a.o = $(CC_FLAGS_FTRACE)

# Forced reason.
KASAN_SANITIZE_b.o := y
CFLAGS_b.o = $(CC_FLAGS_FTRACE)
";

const DIR_LINES: &str = "\
# Directory reason.
KASAN_SANITIZE := n
KCSAN_SANITIZE := n
KCOV_INSTRUMENT := n
UBSAN_SANITIZE := n
KMSAN_SANITIZE := n
GCOV_PROFILE := y
OBJECT_FILES_NON_STANDARD := y
ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)
";

const OBJ_Y: &str = "obj-y := a.o b.o c.o\n";

/// Every mechanism configured (`GCOV_PROFILE_ALL` off, so that forcing it shows), and each
/// mechanism's flags, as the top-level Makefile would set them.
const AUTO_CONF: &str = "\
CONFIG_KASAN=y
CONFIG_KCSAN=y
CONFIG_KCOV=y
CONFIG_KCOV_INSTRUMENT_ALL=y
CONFIG_UBSAN=y
CONFIG_UBSAN_SANITIZE_ALL=y
CONFIG_KMSAN=y
CONFIG_GCOV_KERNEL=y
CONFIG_FUNCTION_TRACER=y
CONFIG_OBJTOOL=y
CFLAGS_KASAN := -fsanitize=kernel-address
CFLAGS_KASAN_NOSANITIZE := -fno-builtin
CFLAGS_KCSAN := -fsanitize=thread
CFLAGS_KCOV := -fsanitize-coverage=trace-pc
CFLAGS_UBSAN := -fsanitize=undefined
CFLAGS_UBSAN_SIGNED_WRAP := -fsanitize=signed-integer-overflow
CFLAGS_KMSAN := -fsanitize=kernel-memory
CFLAGS_GCOV := -fprofile-arcs
CC_FLAGS_FTRACE := -pg -mfentry
KBUILD_CFLAGS := -O2 -pg -mfentry
";

/// A tree with one kernel version's rule files, `lib/{a,b,c}.c` and `lib/Makefile` as given.
fn tree(version: &str, makefile: &str) -> tempfile::TempDir {
    let t = tempfile::Builder::new().prefix("sanpolicy-central-reset-").tempdir().unwrap();
    let rules =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/kernel-rules/linux-{version}/scripts"));
    for d in ["scripts", "lib", "include/config"] {
        fs::create_dir_all(t.path().join(d)).unwrap();
    }
    for f in ["Makefile.lib", "Makefile.build", "Kbuild.include"] {
        fs::copy(rules.join(f), t.path().join("scripts").join(f)).unwrap();
    }
    // The real one only defines compiler probes (`cc-option` …), which nothing here expands.
    fs::write(t.path().join("scripts/Makefile.compiler"), "").unwrap();
    fs::write(t.path().join("include/config/auto.conf"), AUTO_CONF).unwrap();
    for f in ["a.c", "b.c", "c.c"] {
        fs::write(t.path().join("lib").join(f), "").unwrap();
    }
    fs::write(t.path().join("lib/Makefile"), makefile).unwrap();
    t
}

fn read(t: &Path, rel: &str) -> String {
    fs::read_to_string(t.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// What Kbuild compiles each object of `lib/` with: GNU make runs the tree's own
/// `scripts/Makefile.build` for `obj=lib` (so the central file is read exactly where the
/// include line puts it) and prints, per object, the mechanism part of its C flags
/// (`$(_c_flags)`, from `scripts/Makefile.lib`) and whether objtool checks it.
fn kbuild_flags(tree: &Path) -> Vec<String> {
    let objects = ["a.o", "b.o", "c.o"];
    let echoes: Vec<String> = objects
        .iter()
        .map(|o| format!("echo '{o}: [$(foreach @,lib/{o},$(strip $(_c_flags)))] objtool [$(foreach @,lib/{o},$(is-standard-object))]'"))
        .collect();
    let out = Command::new("make")
        .args(["-s", "-f", "scripts/Makefile.build", "obj=lib", "src=lib", "srctree=."])
        .arg(format!("--eval=sanpolicy-print: ; @{}", echoes.join("; ")))
        .arg("sanpolicy-print")
        .current_dir(tree)
        .env_remove("MAKEFLAGS")
        .output()
        .expect("running GNU make");
    assert!(out.status.success(), "make failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(last_of_each).collect()
}

/// A line with each flag kept at its last occurrence only: the central file repeats a kept
/// flag line with `+=` (`CFLAGS_b.o = $(CC_FLAGS_FTRACE)` in the Makefile, `+= $(CC_FLAGS_FTRACE)`
/// in the section), and gcc reads a repeated option as one, the last one winning.
fn last_of_each(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let kept: Vec<&str> =
        words.iter().enumerate().filter(|(i, w)| !words[i + 1..].contains(w)).map(|(_, w)| *w).collect();
    kept.join(" ")
}

/// Adopt a tree in the central layout, replace the policy's units by `keep` (a filter on each
/// `[[unit]]` table's text), regenerate, and return the tree.
fn adopt_then_keep(version: &str, makefile: &str, keep: impl Fn(&str) -> bool) -> tempfile::TempDir {
    let t = tree(version, makefile);
    let p = t.path();
    ok(p, &["import", "--adopt", "--layout", "central"]);
    assert_eq!(read(p, "lib/Makefile"), makefile);
    all_green(p, "adopted");
    let policy = read(p, "sanitizer-policy.toml");
    let mut parts = policy.split("[[unit]]");
    let mut kept = parts.next().unwrap().to_string();
    for unit in parts.filter(|u| keep(u)) {
        kept.push_str("[[unit]]");
        kept.push_str(unit);
    }
    // The built-in requirements name `lib/` objects this tree does not have; dropping the
    // directory's exemptions would "newly break" them.
    let kept = kept.replacen("layout = \"central\"\n", "layout = \"central\"\nbuiltin-requirements = false\n", 1);
    fs::write(p.join("sanitizer-policy.toml"), kept).unwrap();
    t
}

/// Which `[[unit]]` tables of the adopted policy a case keeps.
type Keep = dyn Fn(&str) -> bool;

/// For 6.1 and 6.12: drop every unit, then only the directory-wide ones. Each time only the
/// central file changes, by reset lines; make gives each object the flags of a tree whose
/// Makefile never had the dropped lines (and not those of the adopted tree, so the comparison
/// can fail); drift and sync are green, sync takes nothing back, and restoring the policy
/// writes the adopted central file back byte for byte.
#[test]
fn a_dropped_directory_line_reads_as_never_set_in_both_trees() {
    for version in ["6.1", "6.12"] {
        // 6.1 has no signed-wrap sanitizer: its rules never read the variable.
        let object_lines: String = OBJECT_LINES
            .lines()
            .filter(|l| version != "6.1" || !l.starts_with("UBSAN_SIGNED_WRAP"))
            .map(|l| format!("{l}\n"))
            .collect();
        let makefile = format!("{OBJ_Y}\n{object_lines}\n{DIR_LINES}");
        let adopted = {
            let t = adopt_then_keep(version, &makefile, |_| true);
            kbuild_flags(t.path())
        };
        let cases: [(&str, &Keep, String); 2] = [
            ("every unit dropped", &|_| false, OBJ_Y.to_string()),
            ("directory units dropped", &|u| !u.contains("\"lib/\""), format!("{OBJ_Y}\n{object_lines}")),
        ];
        for (what, keep, never) in cases {
            let label = format!("{version}: {what}");
            let t = adopt_then_keep(version, &makefile, keep);
            let p = t.path();
            let central_before = read(p, CENTRAL);
            let build_before = read(p, "scripts/Makefile.build");
            ok(p, &["gen-makefiles"]);
            assert_eq!(read(p, "lib/Makefile"), makefile, "{label}: a subsystem Makefile was written");
            assert_eq!(read(p, "scripts/Makefile.build"), build_before, "{label}");
            let central = read(p, CENTRAL);
            assert_ne!(central, central_before, "{label}");
            // Every line the oracle lacks is reset, and no other.
            let dropped: Vec<&str> = makefile
                .lines()
                .filter(|l| l.contains(" = ") || l.contains(" := ") || l.contains(" += "))
                .filter(|l| !never.lines().any(|n| n == *l))
                .collect();
            for line in &dropped {
                let name = line.split_whitespace().next().unwrap();
                let op = if name.starts_with("CFLAGS_") || name.starts_with("ccflags-") { "=" } else { ":=" };
                assert!(central.contains(&format!("\n{name} {op}\n")), "{label}: no reset for `{line}`:\n{central}");
            }
            let resets = central.lines().filter(|l| l.ends_with(" :=") || l.ends_with(" =")).count();
            assert_eq!(resets, dropped.len(), "{label}:\n{central}");
            let oracle = tree(version, &never);
            let want = kbuild_flags(oracle.path());
            assert_ne!(want, adopted, "{label}: the dropped lines change nothing, the comparison could not fail");
            assert_eq!(kbuild_flags(p), want, "{label}: make reads the reset lines otherwise than never-set variables");
            all_green(p, &label);
            let sync = ok(p, &["sync"]);
            assert!(sync.stderr.contains("nothing to take back"), "{label}: {}", sync.both());
            // Restoring the adopted policy writes the adopted central file back.
            let restored = adopt_then_keep(version, &makefile, |_| true);
            fs::copy(restored.path().join("sanitizer-policy.toml"), p.join("sanitizer-policy.toml")).unwrap();
            ok(p, &["gen-makefiles"]);
            assert_eq!(read(p, CENTRAL), central_before, "{label}: restoring the units");
            assert_eq!(kbuild_flags(p), adopted, "{label}");
            all_green(p, &format!("{label}, restored"));
        }
    }
}

/// After a drop is written, a line a merge adds to the directory's Makefile is still the
/// tree's: `check` names sync, `gen-makefiles` refuses to reset it (exit 2, nothing written),
/// sync takes it in and leaves the dropped unit dropped.
#[test]
fn a_merged_line_is_not_taken_for_a_dropped_one() {
    let makefile =
        "obj-y := a.o b.o c.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\n\n# B reason.\nKCOV_INSTRUMENT_b.o := n\n";
    let t = adopt_then_keep("6.12", makefile, |u| !u.contains("\"lib/a.o\""));
    let p = t.path();
    ok(p, &["gen-makefiles"]);
    assert!(read(p, CENTRAL).contains("\nKASAN_SANITIZE_a.o :=\n"), "{}", read(p, CENTRAL));
    all_green(p, "dropped");
    let merged = format!("{makefile}\n# Upstream's reason.\nKASAN_SANITIZE_c.o := n\n");
    fs::write(p.join("lib/Makefile"), &merged).unwrap();
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(
        check.stderr.contains("`KASAN_SANITIZE_c.o := n` is in the tree but not in the policy")
            && check.stderr.contains("run `sanpolicy sync` to take it into the policy"),
        "{}",
        check.both()
    );
    assert!(!check.stderr.contains("KASAN_SANITIZE_a.o"), "the written drop is in sync: {}", check.both());
    let before = Fingerprint::of(p);
    let write = run_in(p, &["gen-makefiles"]);
    assert_eq!(write.code, 2, "writing would reset the merged line: {}", write.both());
    assert_eq!(Fingerprint::of(p), before, "a refused write changed the tree");
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("added: lib/c.o kasan"), "{}", sync.both());
    assert!(!sync.stderr.contains("lib/a.o"), "{}", sync.both());
    ok(p, &["gen-makefiles"]);
    let central = read(p, CENTRAL);
    assert!(
        central.contains("\nKASAN_SANITIZE_a.o :=\n") && central.contains("\nKASAN_SANITIZE_c.o := n\n"),
        "{central}"
    );
    assert_eq!(read(p, "lib/Makefile"), merged);
    all_green(p, "merged");
}

/// A dropped ftrace removal whose variable another line of the directory also sets for another
/// reason cannot be reset without dropping that line too: `gen-makefiles` refuses (exit 2,
/// `central-reset`, with `--force` too, nothing written), `check` fails on it, and the hint's
/// first way out (the unit back) is green again.
#[test]
fn a_drop_the_central_file_cannot_express_is_refused() {
    let makefile =
        "obj-y := a.o b.o\n\n# B reason.\nCFLAGS_REMOVE_b.o = $(CC_FLAGS_FTRACE)\nCFLAGS_REMOVE_b.o += -fno-stack-protector\n";
    let t = tree("6.12", makefile);
    let p = t.path();
    ok(p, &["import", "--adopt", "--layout", "central"]);
    let adopted = read(p, "sanitizer-policy.toml");
    assert!(adopted.contains("path = \"lib/b.o\"\nskip = [\"ftrace\"]"), "{adopted}");
    fs::write(p.join("sanitizer-policy.toml"), adopted.split("[[unit]]").next().unwrap()).unwrap();
    let before = Fingerprint::of(p);
    for args in [&["gen-makefiles"][..], &["gen-makefiles", "--force"][..]] {
        let run = run_in(p, args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.both());
        assert!(
            run.stderr.contains("error[central-reset]")
                && run.stderr.contains("line 5 also assigns `CFLAGS_REMOVE_b.o`"),
            "{args:?}: {}",
            run.both()
        );
        assert!(run.stderr.contains("lib/Makefile:4:1"), "{}", run.both());
        assert_eq!(Fingerprint::of(p), before, "{args:?} changed the tree");
    }
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("error[central-reset]"), "{}", check.both());
    fs::write(p.join("sanitizer-policy.toml"), &adopted).unwrap();
    all_green(p, "unit back");
}
