//! Shared by `tests/generate.rs` and `tests/cli.rs`: fixture trees copied into temporary
//! directories with a kernel version's `scripts/`, the `sanpolicy` binary run inside them, and
//! byte-exact fingerprints of a tree to prove what a run did or did not change.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const V6_12: &str = "linux-6.12";
pub const V6_1: &str = "linux-6.1";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A fixture tree in a temporary directory, with `scripts/Makefile.{lib,build}` of one kernel.
pub struct Tree {
    pub dir: tempfile::TempDir,
    pub name: String,
}

impl Tree {
    pub fn new(name: &str, version: &str) -> Tree {
        let dir = tempfile::Builder::new().prefix("sanpolicy-tree-").tempdir().unwrap();
        copy_dir(&fixtures().join("trees").join(name), dir.path());
        let scripts = dir.path().join("scripts");
        fs::create_dir_all(&scripts).unwrap();
        for f in ["Makefile.lib", "Makefile.build"] {
            fs::copy(fixtures().join("kernel-rules").join(version).join("scripts").join(f), scripts.join(f)).unwrap();
        }
        Tree { dir, name: name.to_string() }
    }

    /// The fixture as checked in (without `scripts/`).
    pub fn original(&self) -> PathBuf {
        fixtures().join("trees").join(&self.name)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, rel: &str) -> PathBuf {
        self.path().join(rel)
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    pub fn write(&self, rel: &str, text: &[u8]) {
        fs::write(self.join(rel), text).unwrap();
    }

    /// Run `sanpolicy ARGS` with the tree as the current directory (the binary's default tree).
    pub fn run(&self, args: &[&str]) -> Run {
        run_in(self.path(), args)
    }

    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.path())
    }

    /// Kbuild files (outside `scripts/`) whose bytes differ from the checked-in fixture, with
    /// their full new text, for snapshots.
    pub fn changed_kbuild_files(&self) -> String {
        let mut out = String::new();
        for rel in kbuild_files(self.path()) {
            let now = fs::read(self.path().join(&rel)).unwrap();
            let before = fs::read(self.original().join(&rel)).ok();
            if before.as_deref() != Some(now.as_slice()) {
                out.push_str(&format!("=== {rel}\n{}", String::from_utf8(now).unwrap()));
                if !out.ends_with('\n') {
                    out.push_str("\n[no newline at end of file]\n");
                }
            }
        }
        out
    }
}

/// Every `Makefile`/`Kbuild` under `root` outside `scripts/`, relative, sorted.
pub fn kbuild_files(root: &Path) -> Vec<String> {
    Fingerprint::of(root)
        .files
        .keys()
        .filter(|p| {
            !p.starts_with("scripts/")
                && matches!(Path::new(p).file_name().and_then(|n| n.to_str()), Some("Makefile" | "Kbuild"))
        })
        .cloned()
        .collect()
}

/// What a run of the binary produced.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Both streams, labelled, for snapshots.
    pub fn both(&self) -> String {
        format!("exit: {}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

pub fn run_in(cwd: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("PATH", path_with_sanpolicy())
        .output()
        .unwrap();
    Run {
        code: out.status.code().expect("sanpolicy was killed by a signal"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `PATH` with the binary under test first, as a user who installed it has: its printed fixes
/// name it `sanpolicy`, and a fix run by a shell finds it.
pub fn path_with_sanpolicy() -> std::ffi::OsString {
    let bin = Path::new(env!("CARGO_BIN_EXE_sanpolicy")).parent().expect("the binary's directory").to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&rest))).expect("a PATH")
}

/// Run a printed fix literally, as a shell in `cwd` runs the line copied from the output, with
/// the binary under test on `PATH`.
pub fn follow_line(cwd: &Path, line: &str) -> Run {
    let out = Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("PATH", path_with_sanpolicy())
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every file under a directory (relative path → permission bits and bytes) and every
/// directory: equal fingerprints mean nothing was written, created, removed or re-moded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    pub files: BTreeMap<String, (u32, Vec<u8>)>,
    pub dirs: Vec<String>,
}

impl Fingerprint {
    pub fn of(root: &Path) -> Fingerprint {
        let mut fp = Fingerprint { files: BTreeMap::new(), dirs: Vec::new() };
        fp.walk(root, root);
        fp
    }

    fn walk(&mut self, root: &Path, dir: &Path) {
        let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap()).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                self.dirs.push(rel);
                self.walk(root, &path);
            } else if meta.file_type().is_symlink() {
                // A link is its target's name: what it points at is fingerprinted on its own.
                let target = fs::read_link(&path).unwrap();
                self.files.insert(rel, (0o120000, format!("-> {}", target.display()).into_bytes()));
            } else if !meta.is_file() {
                // A FIFO or device: reading it would block or never end; its type is what counts.
                self.files.insert(rel, (meta.permissions().mode() & 0o7777, b"<not a regular file>".to_vec()));
            } else {
                self.files.insert(rel, (meta.permissions().mode() & 0o7777, fs::read(&path).unwrap()));
            }
        }
    }

    /// The paths whose presence, mode or bytes differ, for assertion messages.
    pub fn differences(&self, other: &Fingerprint) -> Vec<String> {
        let mut out: Vec<String> = self
            .files
            .keys()
            .chain(other.files.keys())
            .filter(|k| self.files.get(*k) != other.files.get(*k))
            .cloned()
            .collect();
        out.extend(self.dirs.iter().filter(|d| !other.dirs.contains(d)).map(|d| format!("{d}/ removed")));
        out.extend(other.dirs.iter().filter(|d| !self.dirs.contains(d)).map(|d| format!("{d}/ created")));
        out.sort();
        out.dedup();
        out
    }
}

/// Assert that nothing under the fingerprinted root changed.
#[track_caller]
pub fn assert_unchanged(before: &Fingerprint, after: &Fingerprint, what: &str) {
    let diff = before.differences(after);
    assert!(diff.is_empty(), "{what}: the tree changed: {diff:?}");
}

/// A regex matching `path` literally, for insta filters.
pub fn literal(path: &Path) -> String {
    let mut out = String::new();
    for c in path.display().to_string().chars() {
        if ".+*?()|[]{}^$\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Every error in rendered diagnostics: its code and its location as rendered (`┌─ LOC` under
/// a snippet, `= in LOC` for a whole file), or "" when it has none.
pub fn errors(stderr: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = stderr.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("error[") else { continue };
        let code = rest.split(']').next().unwrap_or_default().to_string();
        let mut at = String::new();
        while let Some(next) = lines.peek().filter(|l| !l.starts_with("error") && !l.starts_with("warning")) {
            let t = next.trim_start();
            for prefix in ["┌─ ", "= in ", "= at "] {
                if let Some(loc) = t.strip_prefix(prefix).filter(|_| at.is_empty()) {
                    at = loc.to_string();
                }
            }
            lines.next();
        }
        out.push((code, at));
    }
    out
}

/// A tree with 6.12's rule files, `lib/a.c`, `lib/b.c` and `lib/Makefile` as given.
pub fn rules_tree(prefix: &str, makefile: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules/linux-6.12/scripts");
    fs::create_dir_all(dir.path().join("scripts")).unwrap();
    fs::create_dir_all(dir.path().join("lib")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), dir.path().join("scripts").join(f)).unwrap();
    }
    for f in ["a.c", "b.c"] {
        fs::write(dir.path().join("lib").join(f), "").unwrap();
    }
    fs::write(dir.path().join("lib/Makefile"), makefile).unwrap();
    dir
}

/// The file `rel` of the tree at `t`; fails the test when it cannot be read.
pub fn read(t: &Path, rel: &str) -> String {
    fs::read_to_string(t.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Replace `from` by `to` in the file `rel` of the tree at `t` (once; it must be there).
pub fn edit(t: &Path, rel: &str, from: &str, to: &str) {
    let text = read(t, rel);
    assert!(text.contains(from), "{rel} has no {from:?}:\n{text}");
    fs::write(t.join(rel), text.replacen(from, to, 1)).unwrap();
}

/// `git` in `dir` with a fixed identity and branch name; fails the test when git does.
pub fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `members` of Debian's 6.12 source package (paths inside the tree), extracted into a new
/// directory named with `prefix`: the directory, and the tree inside it. Fails loudly when the
/// package is not installed.
pub fn extract_6_12(prefix: &str, members: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tarball = Path::new("/usr/src/linux-source-6.12.tar.xz");
    assert!(
        tarball.is_file(),
        "{} is missing: install it with `apt-get install linux-source-6.12` (.ci/run does)",
        tarball.display()
    );
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let status = Command::new("tar")
        .arg("-xJf")
        .arg(tarball)
        .arg("-C")
        .arg(dir.path())
        .args(members.iter().map(|m| format!("linux-source-6.12/{m}")))
        .status()
        .unwrap();
    assert!(status.success(), "tar failed: {status}");
    let tree = dir.path().join("linux-source-6.12");
    (dir, tree)
}

/// `args` run in `t`, which must exit 0.
pub fn ok(t: &Path, args: &[&str]) -> Run {
    let run = run_in(t, args);
    assert_eq!(run.code, 0, "{args:?}: {}", run.both());
    run
}

/// `check`, `gen-makefiles --check` and `sync --check` all pass.
pub fn all_green(t: &Path, what: &str) {
    for args in [&["check"][..], &["gen-makefiles", "--check"][..], &["sync", "--check"][..]] {
        let run = run_in(t, args);
        assert_eq!(run.code, 0, "{what}: {args:?}: {}", run.both());
    }
}
