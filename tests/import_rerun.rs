//! Importing again after a killed `sanpolicy import --adopt` (block layout) converges to exactly
//! what an uninterrupted run produces, and a tree whose generated blocks cannot be read back is
//! refused before anything is written.
//!
//! The writer (`src/output.rs`) renames one file at a time, so a kill leaves some of the files
//! an import writes new and the rest old (each whole; `tests/faults.rs` proves that). A rerun
//! then finds some directives still hand-written and the others already inside generated
//! blocks; it must read both back into the same units, with the same reasons, and write the same
//! bytes. `linux_6_12_rerun_after_a_kill_converges` checks this on a hard-linked copy of the
//! real 6.12 tree (extracted once per run, see `kernel_source`): for every number of files
//! written before the kill, in the order the import writes them and in the reverse order, and
//! for real `SIGKILL`s of the binary at increasing delays. After each kill the natural rerun is
//! taken (`import --adopt` while no policy exists; with a policy, that refuses and changes
//! nothing, so `import --adopt --force`), and the whole tree must then equal the uninterrupted
//! run's, byte for byte: the policy, its effective snapshot, every kbuild file, and every other
//! file still the original's inode.

mod fixture_tree;
mod kernel_source;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use fixture_tree::{Fingerprint, V6_12};
use kernel_source::{copy_tree, say, scratch_dir, Lease};

const POLICY: &str = "sanitizer-policy.toml";
const SNAPSHOT: &str = "sanitizer-policy.effective.txt";

/// Every invocation of `sanpolicy import` in these tests: `--adopt` into generated blocks
/// (the block layout), in `tree`, with `--force` to overwrite an existing policy.
fn import_command(tree: &Path, force: bool) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sanpolicy"));
    command.args(["import", "--adopt", "--layout", "block"]).current_dir(tree).env("NO_COLOR", "1");
    if force {
        command.arg("--force");
    }
    command
}

fn adopt(tree: &Path, force: bool) -> Output {
    import_command(tree, force).output().expect("running sanpolicy")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The rerun a user takes after a kill: `import --adopt`, which refuses (exit 2, nothing
/// written) once the killed run wrote the policy, then `import --adopt --force`.
fn natural_rerun(tree: &Path, what: &str) {
    let plain = adopt(tree, false);
    if plain.status.code() == Some(0) {
        return;
    }
    assert!(tree.join(POLICY).exists(), "{what}: `import --adopt` failed without a policy:\n{}", stderr(&plain));
    assert_eq!(plain.status.code(), Some(2), "{what}: {}", stderr(&plain));
    let forced = adopt(tree, true);
    assert_eq!(forced.status.code(), Some(0), "{what}: `import --adopt --force` failed:\n{}", stderr(&forced));
}

// ---- a small tree ------------------------------------------------------------------------------

/// A tree with the 6.12 rules, `lib/Makefile` holding `makefile` and sources `a.c` … `e.c`.
fn small_tree(makefile: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("sanpolicy-rerun-").tempdir().unwrap();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules").join(V6_12).join("scripts");
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), dir.path().join("scripts").join(f)).unwrap();
    }
    fs::create_dir_all(dir.path().join("lib")).unwrap();
    fs::write(dir.path().join("lib/Makefile"), makefile).unwrap();
    for s in ["a", "b", "c", "d", "e"] {
        fs::write(dir.path().join(format!("lib/{s}.c")), "int x;\n").unwrap();
    }
    dir
}

const SMALL: &str = "\
# SPDX-License-Identifier: GPL-2.0
obj-y += a.o b.o c.o d.o e.o

# Early boot: no shadow yet.   
# Second line of the reason.
KASAN_SANITIZE_a.o := n
KCSAN_SANITIZE_a.o := n

ifdef CONFIG_FUNCTION_TRACER
# The tracer's own lock.
CFLAGS_REMOVE_b.o = $(CC_FLAGS_FTRACE)
endif

KCOV_INSTRUMENT_c.o := n
UBSAN_SANITIZE_d.o := y
KASAN_SANITIZE_e.o := n # inline comments are not imported
obj-y += late.o
";

/// After a complete `import --adopt`, importing again (with `--force`, or after deleting the
/// policy) reads the generated block back: same policy, same snapshot, same Makefile.
#[test]
fn a_rerun_reads_the_generated_block_back() {
    let tree = small_tree(SMALL);
    let first = adopt(tree.path(), false);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let adopted = Fingerprint::of(tree.path());
    let makefile = fs::read_to_string(tree.path().join("lib/Makefile")).unwrap();
    assert!(makefile.contains("# BEGIN sanpolicy generated block"), "{makefile}");
    let policy = fs::read_to_string(tree.path().join(POLICY)).unwrap();
    assert_eq!(policy.matches("[[unit]]").count(), 4, "{policy}");

    let again = adopt(tree.path(), true);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(adopted.differences(&Fingerprint::of(tree.path())), Vec::<String>::new(), "rerun with --force");
    assert!(stderr(&again).contains("4 units (2 without a reason)"), "{}", stderr(&again));

    fs::remove_file(tree.path().join(POLICY)).unwrap();
    let fresh = adopt(tree.path(), false);
    assert_eq!(fresh.status.code(), Some(0), "{}", stderr(&fresh));
    assert_eq!(adopted.differences(&Fingerprint::of(tree.path())), Vec::<String>::new(), "rerun without a policy");
}

/// A kbuild file whose generated block cannot be read back is refused with its code and line,
/// before anything is written (no policy, no snapshot, no Makefile changed).
#[test]
fn blocks_that_cannot_be_read_back_are_refused_before_writing() {
    let begin =
        "# BEGIN sanpolicy generated block: do not edit by hand; change the policy and run `sanpolicy gen-makefiles`";
    let end = "# END sanpolicy generated block";
    // A block as sanpolicy writes it, for the cases that need a valid one.
    let generated = {
        let tree = small_tree("obj-y += a.o\nKASAN_SANITIZE_a.o := n\n");
        assert_eq!(adopt(tree.path(), false).status.code(), Some(0));
        fs::read_to_string(tree.path().join("lib/Makefile")).unwrap().replace("obj-y += a.o\n\n", "")
    };
    let cases: Vec<(&str, String, &str, usize)> = vec![
        ("stray end marker", format!("KASAN_SANITIZE_a.o := n\n{end} (checksum 0123456789abcdef)\n"), "bad-marker", 2),
        ("begin without end", format!("KASAN_SANITIZE_a.o := n\n{begin}\nKCOV_INSTRUMENT_b.o := n\n"), "bad-marker", 2),
        ("two begin markers", format!("{begin}\n{begin}\nKASAN_SANITIZE_a.o := n\n{end}\n"), "bad-marker", 2),
        ("marker continued", format!("KASAN_SANITIZE_a.o := n\n{begin} \\\nX := 1\n{end}\n"), "bad-marker", 2),
        ("hand-edited block", generated.replace(":= n", ":= y"), "hand-edited-block", 1),
        ("block inside a conditional", format!("ifdef CONFIG_X\n{generated}endif\n"), "bad-marker", 1),
        (
            "generated line set again outside, under a condition",
            format!("{generated}ifdef CONFIG_X\nKASAN_SANITIZE_a.o := y\nendif\n"),
            "conflicting-directive",
            3,
        ),
    ];
    for (what, text, code, line) in cases {
        let tree = small_tree(&text);
        let before = Fingerprint::of(tree.path());
        let out = adopt(tree.path(), false);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(err.contains(&format!("error[{code}]")), "{what}: {err}");
        assert!(err.contains(&format!("lib/Makefile:{line}:")), "{what}: expected line {line}: {err}");
        assert!(err.contains("nothing was written"), "{what}: {err}");
        assert_eq!(before.differences(&Fingerprint::of(tree.path())), Vec::<String>::new(), "{what}");
    }
    // Set again outside by a plain line: make reads the last line, and so does the import, which
    // moves that value into the block (the block layout owns the variable).
    let tree = small_tree(&format!("{generated}KASAN_SANITIZE_a.o := y\n"));
    let out = adopt(tree.path(), false);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let makefile = fs::read_to_string(tree.path().join("lib/Makefile")).unwrap();
    assert_eq!(makefile.matches("KASAN_SANITIZE_a.o").count(), 1, "{makefile}");
    assert!(makefile.contains("KASAN_SANITIZE_a.o := y\n# END sanpolicy"), "{makefile}");
}

// ---- the real 6.12 tree ------------------------------------------------------------------------

/// Real kills per series (one series over the whole run, one over its last tenth, where the
/// files are staged and renamed).
const REAL_KILLS: u32 = 6;

/// Kill points per order (spread over the renames; the first and last few always included).
const POINTS: usize = 20;

/// Files of a hard-linked copy that are no longer the original's inode (written or new), with
/// their bytes; and files of the original gone from the copy. Everything else is the original.
#[derive(Debug, PartialEq, Eq)]
struct Written {
    files: BTreeMap<PathBuf, Vec<u8>>,
    removed: Vec<PathBuf>,
}

impl Written {
    /// The whole tree walked (used twice: for the uninterrupted run and at the very end).
    fn of(original: &Path, copy: &Path) -> Written {
        let mut files = BTreeMap::new();
        for entry in walkdir::WalkDir::new(copy).into_iter().map(Result::unwrap) {
            if entry.file_type().is_dir() {
                continue;
            }
            let rel = entry.path().strip_prefix(copy).unwrap().to_path_buf();
            if !same_inode(original, copy, &rel) {
                files.insert(rel, fs::read(entry.path()).unwrap());
            }
        }
        let removed = walkdir::WalkDir::new(original)
            .into_iter()
            .map(Result::unwrap)
            .filter(|e| !e.file_type().is_dir())
            .map(|e| e.path().strip_prefix(original).unwrap().to_path_buf())
            .filter(|rel| fs::symlink_metadata(copy.join(rel)).is_err())
            .collect();
        Written { files, removed }
    }

    /// Only the files `expected` names and whatever else lies in their directories: what an
    /// import can have written there.
    fn near(original: &Path, copy: &Path, expected: &Written) -> Written {
        let mut files = BTreeMap::new();
        let dirs: std::collections::BTreeSet<&Path> =
            expected.files.keys().map(|p| p.parent().unwrap_or(Path::new(""))).collect();
        for dir in dirs {
            for entry in fs::read_dir(copy.join(dir)).unwrap().map(Result::unwrap) {
                let rel = dir.join(entry.file_name());
                if !entry.file_type().unwrap().is_dir() && !same_inode(original, copy, &rel) {
                    files.insert(rel, fs::read(entry.path()).unwrap());
                }
            }
        }
        let removed = expected.files.keys().filter(|rel| fs::symlink_metadata(copy.join(rel)).is_err()).cloned();
        let removed = removed.filter(|rel| original.join(rel).exists()).collect();
        Written { files, removed }
    }

    /// Differences from `expected`, for the assertion message.
    fn differences(&self, expected: &Written) -> Vec<String> {
        let mut out: Vec<String> = self
            .files
            .keys()
            .chain(expected.files.keys())
            .filter(|k| self.files.get(*k) != expected.files.get(*k))
            .map(|k| k.display().to_string())
            .collect();
        if self.removed != expected.removed {
            out.push(format!("removed {:?}, expected {:?}", self.removed, expected.removed));
        }
        out.sort();
        out.dedup();
        out
    }
}

fn same_inode(original: &Path, copy: &Path, rel: &Path) -> bool {
    let (Ok(o), Ok(c)) = (fs::symlink_metadata(original.join(rel)), fs::symlink_metadata(copy.join(rel))) else {
        return false;
    };
    (o.dev(), o.ino()) == (c.dev(), c.ino())
}

/// Put every file an import can have written back to the original's inode (or remove it when
/// the original has none), so the next kill starts from the original tree.
fn reset(original: &Path, copy: &Path, expected: &Written) {
    let now = Written::near(original, copy, expected);
    for rel in now.files.keys().chain(&now.removed) {
        let _ = fs::remove_file(copy.join(rel));
        if original.join(rel).exists() {
            fs::hard_link(original.join(rel), copy.join(rel)).unwrap();
        }
    }
    let left = Written::near(original, copy, expected);
    assert!(left.files.is_empty() && left.removed.is_empty(), "reset left {:?}", left.files.keys());
}

/// The state after a kill once the first files of `order` were renamed into place.
fn killed_after(copy: &Path, expected: &Written, order: &[PathBuf]) {
    for rel in order {
        let path = copy.join(rel);
        let _ = fs::remove_file(&path);
        fs::write(&path, &expected.files[rel]).unwrap();
    }
}

/// After a real kill each file the import writes is wholly old or wholly new, and anything else
/// it left is a temporary file. Returns how many were new.
fn whole_files(original: &Path, copy: &Path, expected: &Written, what: &str) -> usize {
    let now = Written::near(original, copy, expected);
    assert!(now.removed.is_empty(), "{what}: removed {:?}", now.removed);
    let mut new = 0;
    for (rel, bytes) in &now.files {
        let temporary = rel.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(".sanpolicy-"));
        if expected.files.get(rel) == Some(bytes) {
            new += 1;
        } else if !temporary {
            // A written file must be whole and new; an unwritten one is still the original's inode.
            panic!("{what}: {} is neither the original nor the uninterrupted run's", rel.display());
        }
    }
    new
}

/// `0..=n` thinned to about [`POINTS`] values, keeping the first and last three.
fn kill_points(n: usize) -> Vec<usize> {
    let step = (n / POINTS).max(1);
    let mut points: Vec<usize> = (0..=n).filter(|k| *k < 3 || *k + 3 > n || k % step == 0).collect();
    points.dedup();
    points
}

#[test]
fn linux_6_12_rerun_after_a_kill_converges() {
    let lease = Lease::extracted("6.12");
    let original = lease.tree();
    let scratch = scratch_dir("6.12-kill");
    let total = Instant::now();

    let done = scratch.path().join("uninterrupted");
    assert!(copy_tree(original, &done), "the copy must be hard-linked to tell written files by inode");
    let start = Instant::now();
    let first = adopt(&done, false);
    let duration = start.elapsed();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let expected = Written::of(original, &done);
    let kbuild: Vec<PathBuf> =
        expected.files.keys().filter(|p| *p != Path::new(POLICY) && *p != Path::new(SNAPSHOT)).cloned().collect();
    assert!(expected.files.contains_key(Path::new(POLICY)) && expected.files.contains_key(Path::new(SNAPSHOT)));
    assert!(kbuild.len() >= 50, "only {} kbuild files adopted", kbuild.len());
    assert!(expected.removed.is_empty());
    let units = String::from_utf8_lossy(&expected.files[Path::new(POLICY)]).matches("[[unit]]").count();
    let gen = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .args(["gen-makefiles", "--check"])
        .current_dir(&done)
        .output()
        .unwrap();
    assert_eq!(gen.status.code(), Some(0), "the uninterrupted run is not in sync: {}", stderr(&gen));

    // The import renames the policy, its snapshot, then the kbuild files in path order.
    let mut order: Vec<PathBuf> = vec![POLICY.into(), SNAPSHOT.into()];
    order.extend(kbuild.iter().cloned());
    let copy = scratch.path().join("killed");
    assert!(copy_tree(original, &copy));
    let mut points = 0;
    let reversed: Vec<PathBuf> = order.iter().rev().cloned().collect();
    let series: [(&str, &[PathBuf], usize); 2] = [("in write order", &order, 1), ("in reverse order", &reversed, 3)];
    for (name, order, step) in series {
        for k in kill_points(order.len()).into_iter().step_by(step) {
            let what = format!("killed after {k} of {} renames {name}", order.len());
            reset(original, &copy, &expected);
            killed_after(&copy, &expected, &order[..k]);
            natural_rerun(&copy, &what);
            let diff = Written::near(original, &copy, &expected).differences(&expected);
            assert!(diff.is_empty(), "{what}: the rerun differs from the uninterrupted run in {diff:?}");
            points += 1;
        }
    }

    // Real kills at increasing delays: whatever step each lands on, the rerun converges.
    let mut landed = Vec::new();
    for (from, span) in [(0.0, 1.0), (0.9, 0.2)] {
        for i in 0..REAL_KILLS {
            reset(original, &copy, &expected);
            let delay = duration.mul_f64(from + span * f64::from(i) / f64::from(REAL_KILLS));
            let what = format!("SIGKILL after {delay:.0?}");
            let mut child = import_command(&copy, false)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(delay);
            let _ = child.kill();
            let _ = child.wait();
            landed.push(whole_files(original, &copy, &expected, &what));
            natural_rerun(&copy, &what);
            let diff = Written::near(original, &copy, &expected).differences(&expected);
            assert!(diff.is_empty(), "{what}: the rerun differs from the uninterrupted run in {diff:?}");
        }
    }
    // Every rerun wrote nothing outside the directories of the files the import writes.
    let diff = Written::of(original, &copy).differences(&expected);
    assert!(diff.is_empty(), "after all reruns the tree differs from the uninterrupted run in {diff:?}");
    say(&format!(
        "import-rerun 6.12: {units} units, {} files written; {points} kill points and {} real kills (files new when killed: {landed:?}) all converged in {:.1?}",
        order.len(),
        landed.len(),
        total.elapsed()
    ));
}

/// Lines inside a `define` are the variable's text, not directives: import leaves them (and
/// puts no block inside the `define`); a directive next to `$(eval …)` that may change it, or
/// in a file that sets `.RECIPEPREFIX`, stays hand-written with a warning.
#[test]
fn import_leaves_what_make_reads_differently() {
    let tree = small_tree(
        "export define X\nKASAN_SANITIZE_a.o := n\nendef\nKCOV_INSTRUMENT_b.o := n\n\
         $(eval KCSAN_SANITIZE_c.o := y)\nKCSAN_SANITIZE_c.o := n\n",
    );
    let out = adopt(tree.path(), false);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let policy = fs::read_to_string(tree.path().join(POLICY)).unwrap();
    assert_eq!(policy.matches("[[unit]]").count(), 1, "{policy}");
    assert!(policy.contains("path = \"lib/b.o\""), "{policy}");
    // Import summarises what it leaves outside the policy, with the place.
    assert!(err.contains("(`$(eval …)` at line 5 may change it): ./lib/Makefile:6:1"), "{err}");
    let makefile = fs::read_to_string(tree.path().join("lib/Makefile")).unwrap();
    let define = makefile.find("export define X\nKASAN_SANITIZE_a.o := n\nendef\n").expect(&makefile);
    assert!(makefile.find("# BEGIN").unwrap() > define, "the block landed inside the define:\n{makefile}");

    let tree = small_tree(".RECIPEPREFIX := >\nKASAN_SANITIZE_a.o := n\n");
    let out = adopt(tree.path(), false);
    assert!(stderr(&out).contains("sets `.RECIPEPREFIX` (line 1)"), "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(tree.path().join("lib/Makefile")).unwrap(),
        ".RECIPEPREFIX := >\nKASAN_SANITIZE_a.o := n\n"
    );
}
