//! How sanpolicy reads and writes files under hostile conditions, one table-driven test per
//! class: what is not a regular file or is too large where a file is read, a directory swapped
//! for a symlink while writing, two runs on one tree, targets the kernel refuses to write
//! (immutable, append-only, read-only mount), owners and modes, the umask. Every case checks
//! the exit code, the diagnostic's code and place, and a byte-exact fingerprint of the tree
//! (special files, owners and modes included) before and after.

mod fixture_tree;

use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fixture_tree::{copy_dir, kbuild_files, Run, Tree, V6_12};
use sanpolicy::diagnostic::Code;
use sanpolicy::generate;
use sanpolicy::kbuild::Rules;
use sanpolicy::output::{self, Change, Step, TreeLock};
use sanpolicy::policy;

const POLICY: &str = "sanitizer-policy.toml";
const RUNTIME: &str = "mm/runtime/Makefile";
/// A unit the `mechanisms` fixture can build: with it a run that did not stop would write.
const HEALTHY: &str =
    "[[unit]]\npath = \"lib/skipall.o\"\nskip = [\"kasan\"]\nwhy = \"Healthy: would be written.\"\n\n";

/// Every entry under `root`: its kind, permission bits, owner, group and (for a regular file) a
/// hash of its bytes. Special files are never opened, so a FIFO cannot hang the test itself.
fn fingerprint(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let m = fs::symlink_metadata(&path).unwrap();
            let t = m.file_type();
            let content = if t.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                fs::read(&path).unwrap().hash(&mut h);
                format!("file {} bytes {:x}", m.len(), h.finish())
            } else if t.is_symlink() {
                format!("link -> {}", fs::read_link(&path).unwrap().display())
            } else if t.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else {
                format!("special {:o}", m.mode() & 0o170000)
            };
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            out.insert(rel, format!("{content} mode {:o} owner {}:{}", m.mode() & 0o7777, m.uid(), m.gid()));
        }
    }
    out
}

#[track_caller]
fn assert_same(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>, what: &str) {
    let diff: Vec<_> = before.keys().chain(after.keys()).filter(|k| before.get(*k) != after.get(*k)).collect();
    assert!(diff.is_empty(), "{what}: changed: {diff:?}\nbefore: {before:#?}\nafter: {after:#?}");
}

/// Run `sanpolicy ARGS` in `cwd`; a run still going after two minutes hung (it is killed and
/// the test fails: the point of these cases is that nothing blocks). The output is collected
/// while the run goes, so a long diff cannot block it on a full pipe.
fn run(cwd: &Path, args: &[&str]) -> Run {
    let child = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let Ok(out) = finished.recv_timeout(Duration::from_secs(120)) else {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("`sanpolicy {}` hung", args.join(" "));
    };
    let out = out.unwrap();
    Run {
        code: out.status.code().expect("sanpolicy was killed by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The `[code]` and the location (`= in LOC` or `┌─ LOC`) of every error in rendered output.
fn errors(stderr: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut lines = stderr.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix("error[") else { continue };
        let (code, message) = rest.split_once("]: ").unwrap_or((rest, ""));
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
        out.push((code.to_string(), at, message.to_string()));
    }
    out
}

/// What stands where a file is read.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Fifo,
    Directory,
    Socket,
    /// A character device: `/dev/zero`'s own numbers (1, 5).
    Zero,
}

impl Kind {
    /// How the error names it.
    fn what(self) -> &'static str {
        match self {
            Kind::Fifo => "is a FIFO, not a regular file",
            Kind::Directory => "is a directory",
            Kind::Socket => "is a socket, not a regular file",
            Kind::Zero => "is a character device, not a regular file",
        }
    }

    /// Replace whatever is at `path` by this kind of thing.
    fn make(self, path: &Path) {
        let _ = fs::remove_file(path);
        match self {
            Kind::Fifo => rustix::fs::mkfifoat(rustix::fs::CWD, path, rustix::fs::Mode::from_raw_mode(0o644)).unwrap(),
            Kind::Directory => {
                fs::create_dir(path).unwrap();
                fs::write(path.join("inside"), "x\n").unwrap();
            }
            Kind::Socket => {
                // The socket file stays after the listener is closed.
                std::os::unix::net::UnixListener::bind(path).unwrap();
            }
            Kind::Zero => rustix::fs::mknodat(
                rustix::fs::CWD,
                path,
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0o666),
                rustix::fs::makedev(1, 5),
            )
            .unwrap_or_else(|e| panic!("mknod {} (c 1 5) needs root, as CI runs: {e}", path.display())),
        }
    }
}

/// Where the thing stands: the policy, a file it includes, a kbuild file of a directory the
/// policy names, the tree's `scripts/Makefile.lib`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Policy,
    Include,
    Makefile,
    RulesFile,
}

impl Place {
    fn rel(self) -> &'static str {
        match self {
            Place::Policy => POLICY,
            Place::Include => "included.toml",
            Place::Makefile => RUNTIME,
            Place::RulesFile => "scripts/Makefile.lib",
        }
    }

    /// The diagnostic expected: code and rendered location ("" for none).
    fn expected(self) -> (&'static str, String) {
        match self {
            Place::RulesFile => ("rules", String::new()),
            // The include is refused where the policy names it, before anything reads it.
            Place::Include => ("bad-include", "./sanitizer-policy.toml:1:12".into()),
            p => ("io", format!("./{}", p.rel())),
        }
    }

    /// Commands that read this place: each must exit 2.
    fn commands(self) -> Vec<Vec<&'static str>> {
        let mut all = vec![vec!["gen-makefiles"], vec!["gen-makefiles", "--check"], vec!["check"]];
        if let Place::RulesFile = self {
            all.push(vec!["import", "--out", "-"]);
        }
        all
    }
}

/// A fixture tree whose policy (naming all its directories) includes `included.toml` (a
/// healthy file, until replaced).
fn tree_with_include() -> Tree {
    let tree = Tree::new("mechanisms", V6_12);
    let own = tree.read(POLICY);
    tree.write(POLICY, format!("include = [\"included.toml\"]\n\n{own}").as_bytes());
    tree.write("included.toml", b"[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kcov\"]\nwhy = \"Included.\"\n");
    tree
}

#[test]
fn what_is_not_a_regular_file_is_named_never_read() {
    let places = [Place::Policy, Place::Include, Place::Makefile, Place::RulesFile];
    let kinds = [Kind::Fifo, Kind::Directory, Kind::Socket, Kind::Zero];
    for place in places {
        for kind in kinds {
            let case = format!("{kind:?} as {place:?}");
            let tree = tree_with_include();
            // Healthy as set up: the run would write.
            assert_eq!(run(tree.path(), &["gen-makefiles", "--check"]).code, 1, "{case}: fixture");
            kind.make(&tree.join(place.rel()));
            let before = fingerprint(tree.path());
            for command in place.commands() {
                let r = run(tree.path(), &command);
                assert_eq!(r.code, 2, "{case}, {command:?}: {}", r.stderr);
                let (code, at) = place.expected();
                let found = errors(&r.stderr);
                assert!(
                    found.iter().any(|(c, l, m)| {
                        // An include is refused by the include check, which names it less finely.
                        let said = if place == Place::Include { "not a regular file" } else { kind.what() };
                        c == code && *l == at && m.contains(said)
                    }),
                    "{case}, {command:?}: expected {code} at `{at}` saying `{}`: {found:?}\n{}",
                    kind.what(),
                    r.stderr
                );
                assert!(
                    !r.stderr.contains("does not exist") && !r.stderr.contains("has no `Kbuild`"),
                    "{case}: {}",
                    r.stderr
                );
                assert_same(&before, &fingerprint(tree.path()), &format!("{case}, {command:?}"));
            }
        }
    }
    // `/dev/zero` itself as the policy.
    let tree = Tree::new("mechanisms", V6_12);
    let before = fingerprint(tree.path());
    let r = run(tree.path(), &["gen-makefiles", "--policy", "/dev/zero"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error[io]: cannot read policy `/dev/zero`: is a character device"), "{}", r.stderr);
    assert_same(&before, &fingerprint(tree.path()), "--policy /dev/zero");
}

/// Make `rel` in the tree a sparse file of `size` bytes starting with `head`.
fn sparse(tree: &Tree, rel: &str, head: &str, size: u64) {
    let path = tree.join(rel);
    fs::write(&path, head).unwrap();
    fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(size).unwrap();
}

const MIB: u64 = 1 << 20;

#[test]
fn reads_are_bounded() {
    // (case, file, size, the error expected at it)
    let refused: [(&str, &str, u64, &str); 3] = [
        ("policy over 64 MiB", POLICY, 64 * MIB + 1, "is larger than 64 MiB"),
        ("include over 64 MiB", "included.toml", 64 * MIB + 1, "is larger than 64 MiB"),
        ("Makefile of a named directory over 16 MiB", RUNTIME, 16 * MIB + 1, "is larger than 16 MiB"),
    ];
    for (case, rel, size, says) in refused {
        let tree = tree_with_include();
        let head = if rel == RUNTIME { "obj-y += core.o\n" } else { HEALTHY };
        sparse(&tree, rel, head, size);
        let before = fingerprint(tree.path());
        for command in [&["gen-makefiles"][..], &["gen-makefiles", "--check"], &["check"]] {
            let r = run(tree.path(), command);
            assert_eq!(r.code, 2, "{case}, {command:?}: {}", r.stderr);
            let found = errors(&r.stderr);
            assert!(
                found.iter().any(|(c, l, m)| c == "io" && *l == format!("./{rel}") && m.contains(says)),
                "{case}, {command:?}: {found:?}\n{}",
                r.stderr
            );
            assert!(!r.stderr.contains("skipped `"), "{case}, {command:?}: refused and skipped:\n{}", r.stderr);
            assert_same(&before, &fingerprint(tree.path()), &format!("{case}, {command:?}"));
        }
    }
    // Exactly at the bound is read.
    let tree = Tree::new("mechanisms", V6_12);
    let text = tree.read(RUNTIME);
    sparse(&tree, RUNTIME, &text, 16 * MIB);
    let r = run(tree.path(), &["check"]);
    assert!(
        !r.stderr.contains("larger than") && r.stderr.contains("mm/runtime/Makefile` is not in sync"),
        "{}",
        r.stderr
    );
}

/// A kbuild file over 16 MiB in a directory the policy does not name is skipped by every walk
/// over the tree with a warning naming it (a line there is not seen, so drift in it is not
/// either), and the verdict is the one without it: import's walk and the sweep of
/// `gen-makefiles`, `--check` and `check` alike. A named directory's is refused (above), with
/// no warning besides.
#[test]
fn huge_kbuild_files_nobody_named_are_skipped_with_a_warning() {
    // (layout, command): every command that walks the tree. In place `--check` always sweeps.
    let rows: [(&str, &[&str]); 7] = [
        ("block", &["import", "--out", "-"]),
        ("block", &["gen-makefiles"]),
        ("block", &["gen-makefiles", "--check", "--sweep"]),
        ("block", &["check"]),
        ("in-place", &["gen-makefiles"]),
        ("in-place", &["gen-makefiles", "--check"]),
        ("in-place", &["check"]),
    ];
    for (layout, command) in rows {
        let fixture = || {
            let t = Tree::new("mechanisms", V6_12);
            let policy = t.read(POLICY).replacen("layout = \"block\"", &format!("layout = \"{layout}\""), 1);
            assert!(policy.contains(&format!("layout = \"{layout}\"")), "the fixture names no layout");
            t.write(POLICY, policy.as_bytes());
            t
        };
        let without = run(fixture().path(), command);
        let tree = fixture();
        let command = (layout, command);
        fs::create_dir(tree.join("drivers/huge")).unwrap();
        sparse(&tree, "drivers/huge/Makefile", "KASAN_SANITIZE_huge.o := n\n", 16 * MIB + 1);
        let huge = |t: &Tree| fingerprint(t.path()).remove("drivers/huge/Makefile");
        let before = huge(&tree);
        let r = run(tree.path(), command.1);
        assert_eq!(
            r.code, without.code,
            "{command:?}: the verdict changed:\n{}\nwithout:\n{}",
            r.stderr, without.stderr
        );
        let warning = r.stderr.lines().position(|l| {
            l.starts_with("warning[io]: skipped `") && l.contains("drivers/huge/Makefile`: it is larger than 16 MiB")
        });
        let Some(at) = warning else { panic!("{command:?}: no warning naming the huge file:\n{}", r.stderr) };
        let rest: Vec<&str> = r.stderr.lines().skip(at + 1).take_while(|l| !l.starts_with("warning")).collect();
        assert!(
            rest.iter().any(|l| l.contains("drivers/huge/Makefile"))
                && rest.iter().any(|l| l.contains("help: no kbuild file is that large")),
            "{command:?}: the warning has no location or hint:\n{}",
            r.stderr
        );
        assert_eq!(r.stderr.matches("skipped `").count(), 1, "{command:?}: one warning:\n{}", r.stderr);
        assert!(!r.stdout.contains("drivers/huge"), "{command:?}: the huge file was read: {}", r.stdout);
        assert_eq!(huge(&tree), before, "{command:?}: the huge file changed");
    }
}

/// Where `gen-makefiles --out DIR` reads an old fragment (one it rewrites, or a stale one it
/// removes), something that is not a regular file is an error naming it: never a hang on a
/// FIFO, never taken for a missing fragment and overwritten. Nothing changes.
#[test]
fn an_old_fragment_that_is_not_a_regular_file_is_named_never_read() {
    const OUT: &str = "fragments";
    // A fragment the policy writes (`lib/`), and one of a directory it no longer names.
    for rel in ["lib/sanpolicy.mk", "gone/sanpolicy.mk"] {
        for kind in [Kind::Fifo, Kind::Directory, Kind::Socket] {
            let case = format!("{kind:?} at {rel}");
            let tree = Tree::new("mechanisms", V6_12);
            let r = run(tree.path(), &["gen-makefiles", "--out", OUT]);
            assert_eq!(r.code, 0, "{case}: fixture: {}", r.stderr);
            let path = tree.join(OUT).join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            kind.make(&path);
            let before = fingerprint(tree.path());
            for command in [&["gen-makefiles", "--out", OUT][..], &["gen-makefiles", "--out", OUT, "--check"]] {
                let r = run(tree.path(), command);
                assert_eq!(r.code, 2, "{case}, {command:?}: {}", r.stderr);
                let found = errors(&r.stderr);
                assert!(
                    found.iter().any(|(c, l, m)| c == "io"
                        && l.ends_with(&format!("{OUT}/{rel}"))
                        && m.contains("cannot read the fragment")
                        && m.contains(kind.what())),
                    "{case}, {command:?}: {found:?}\n{}",
                    r.stderr
                );
                assert_same(&before, &fingerprint(tree.path()), &format!("{case}, {command:?}"));
            }
        }
    }
}

/// The changes `gen-makefiles` plans for a fresh `mechanisms` tree (three kbuild files, in
/// order drivers/selftest, lib, mm/runtime).
fn planned(tree: &Path) -> Vec<Change> {
    let (policy, diags) = policy::load(&tree.join(POLICY));
    assert!(!diags.has_errors(), "{diags:?}");
    let (rules, diags) = Rules::from_tree(tree);
    assert!(!diags.has_errors(), "{diags:?}");
    let plan = generate::plan_tree(&policy, tree, &rules, false, true);
    assert!(!plan.diags.has_errors(), "{:?}", plan.diags);
    let changes: Vec<Change> = plan.changes.into_iter().filter(|c| !c.is_noop()).collect();
    assert_eq!(
        changes.iter().map(|c| c.display.as_str()).collect::<Vec<_>>(),
        ["drivers/selftest/Makefile", "lib/Makefile", RUNTIME]
    );
    changes
}

/// A directory of the tree swapped for a symlink to a copy of it outside the tree.
struct Swap {
    dir: PathBuf,
    moved: PathBuf,
}

impl Swap {
    /// `outside` gets a copy of the directory: the worst case, where a write through the link
    /// would find the file it expects.
    fn new(tree: &Path, rel: &str, outside: &Path) -> Swap {
        let dir = tree.join(rel);
        copy_dir(&dir, outside);
        Swap { moved: dir.with_extension("moved"), dir }
    }

    fn swap(&self, outside: &Path) -> std::io::Result<()> {
        fs::rename(&self.dir, &self.moved)?;
        std::os::unix::fs::symlink(outside, &self.dir)
    }

    fn undo(&self) {
        fs::remove_file(&self.dir).unwrap();
        fs::rename(&self.moved, &self.dir).unwrap();
    }
}

/// When a swap happens: before writing (`None`), or at the `n`-th "stage" or "commit" step.
type When = Option<(&'static str, usize)>;

#[test]
fn a_directory_swapped_for_a_symlink_fails_the_run_and_nothing_is_written() {
    // (case, the directory swapped, when: None before writing, else the hook's step and index,
    // the code expected)
    let cases: [(&str, &str, When, Code); 4] = [
        ("between planning and writing", "mm/runtime", None, Code::Symlink),
        (
            "after its handle was opened, while staging a later file",
            "drivers/selftest",
            Some(("stage", 2)),
            Code::ChangedDuringRun,
        ),
        ("just before its rename", "mm/runtime", Some(("commit", 2)), Code::ChangedDuringRun),
        ("after an earlier file was renamed", "lib", Some(("commit", 1)), Code::ChangedDuringRun),
    ];
    for (case, rel, when, code) in cases {
        let tree = Tree::new("mechanisms", V6_12);
        let outside = tempfile::tempdir().unwrap();
        let swap = Swap::new(tree.path(), rel, outside.path());
        let before = fingerprint(tree.path());
        let outside_before = fingerprint(outside.path());
        let lock = TreeLock::exclusive(tree.path(), Duration::ZERO).unwrap();
        let changes = planned(tree.path());
        if when.is_none() {
            swap.swap(outside.path()).unwrap();
        }
        let mut seen = (0, 0);
        let error = lock
            .apply_with(&changes, &mut |step| {
                let (kind, count) = match step {
                    Step::Stage(_) => ("stage", &mut seen.0),
                    Step::Commit(_) => ("commit", &mut seen.1),
                };
                if when == Some((kind, *count)) {
                    swap.swap(outside.path())?;
                }
                *count += 1;
                Ok(())
            })
            .expect_err(case);
        assert_eq!(error.code(), code, "{case}: {error}");
        let at = error.diagnostic().location.as_ref().unwrap().path.clone();
        assert!(at.ends_with(format!("{rel}/Makefile")), "{case}: located at {}", at.display());
        assert!(error.to_string().contains("nothing was written"), "{case}: {error}");
        assert_same(&outside_before, &fingerprint(outside.path()), &format!("{case}: outside the tree"));
        swap.undo();
        assert_same(&before, &fingerprint(tree.path()), &format!("{case}: the tree"));
    }
}

/// The kbuild files of `tree`, relative path to bytes.
fn kbuild_texts(tree: &Path) -> BTreeMap<String, Vec<u8>> {
    kbuild_files(tree).into_iter().map(|rel| (rel.clone(), fs::read(tree.join(&rel)).unwrap())).collect()
}

#[test]
fn two_runs_on_one_tree_are_serialised() {
    let policies = tempfile::tempdir().unwrap();
    let a = policies.path().join("a.toml");
    let b = policies.path().join("b.toml");
    fs::copy(Tree::new("mechanisms", V6_12).join(POLICY), &a).unwrap();
    fs::write(
        &b,
        format!(
            "layout = \"block\"\n{HEALTHY}[[unit]]\npath = \"mm/runtime/\"\nskip = [\"kcov\"]\nwhy = \"Policy B.\"\n"
        ),
    )
    .unwrap();
    // What each policy alone makes of the tree.
    let alone = |policy: &Path| {
        let tree = Tree::new("mechanisms", V6_12);
        let r = run(tree.path(), &["gen-makefiles", "--policy", policy.to_str().unwrap()]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        kbuild_texts(tree.path())
    };
    let (only_a, only_b) = (alone(&a), alone(&b));
    assert_ne!(only_a, only_b);
    for round in 0..3 {
        let tree = Tree::new("mechanisms", V6_12);
        // Hold the lock, start both runs, and see each wait before reading anything.
        let held = TreeLock::exclusive(tree.path(), Duration::ZERO).unwrap();
        let children: Vec<_> = [&a, &b]
            .iter()
            .map(|policy| {
                let mut child = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
                    .args(["gen-makefiles", "--policy", policy.to_str().unwrap()])
                    .current_dir(tree.path())
                    .env("NO_COLOR", "1")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut stderr = BufReader::new(child.stderr.take().unwrap());
                let mut first = String::new();
                stderr.read_line(&mut first).unwrap();
                assert!(first.starts_with("waiting for another sanpolicy run on `"), "round {round}: {first}");
                (child, stderr)
            })
            .collect();
        assert_eq!(kbuild_texts(tree.path()), kbuild_texts(&tree.original()), "round {round}: written while locked");
        drop(held);
        for (mut child, mut stderr) in children {
            let mut rest = String::new();
            std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
            assert!(child.wait().unwrap().success(), "round {round}: {rest}");
        }
        let now = kbuild_texts(tree.path());
        assert!(now == only_a || now == only_b, "round {round}: the tree mixes both policies: {:?}", now.keys());
    }
}

/// An attribute or mount that makes the kernel refuse writes to one file, undone on drop.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Refusal {
    Immutable,
    AppendOnly,
    ReadOnlyBindMount,
}

struct Applied {
    refusal: Refusal,
    path: PathBuf,
}

fn sh(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

impl Refusal {
    fn apply(self, path: &Path) -> Result<Applied, String> {
        let p = path.to_str().unwrap();
        match self {
            Refusal::Immutable => sh("chattr", &["+i", p])?,
            Refusal::AppendOnly => sh("chattr", &["+a", p])?,
            Refusal::ReadOnlyBindMount => {
                sh("mount", &["--bind", p, p])?;
                if let Err(e) = sh("mount", &["-o", "remount,ro,bind", p]) {
                    let _ = sh("umount", &[p]);
                    return Err(e);
                }
            }
        }
        Ok(Applied { refusal: self, path: path.to_path_buf() })
    }

    fn code_says(self) -> &'static str {
        match self {
            Refusal::Immutable | Refusal::AppendOnly => "immutable or append-only (EPERM)",
            Refusal::ReadOnlyBindMount => "read-only file system (EROFS)",
        }
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        let p = self.path.to_str().unwrap();
        let _ = match self.refusal {
            Refusal::Immutable | Refusal::AppendOnly => sh("chattr", &["-i", "-a", p]),
            Refusal::ReadOnlyBindMount => sh("umount", &[p]),
        };
    }
}

/// A fresh fixture tree on a file system where `refusal` works: the temporary directory, else
/// Cargo's target directory; fails the test, saying why, where neither supports it.
fn tree_refusing(refusal: Refusal) -> (Tree, Applied) {
    let first = Tree::new("mechanisms", V6_12);
    match refusal.apply(&first.join(RUNTIME)) {
        Ok(applied) => return (first, applied),
        Err(e) => {
            eprintln!("{refusal:?} unsupported under {}: {e}; trying the target directory", first.path().display())
        }
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    copy_dir(first.path(), dir.path());
    let tree = Tree { dir, name: first.name.clone() };
    let applied = refusal.apply(&tree.join(RUNTIME)).unwrap_or_else(|e| {
        panic!("{refusal:?} works neither in the temporary nor in the target directory (CI runs as root on ext4): {e}")
    });
    (tree, applied)
}

#[test]
fn targets_the_kernel_refuses_to_write_change_nothing() {
    for refusal in [Refusal::Immutable, Refusal::AppendOnly, Refusal::ReadOnlyBindMount] {
        let (tree, applied) = tree_refusing(refusal);
        let before = fingerprint(tree.path());
        // The CLI: refused before the first rename, though the mode bits allow writing and
        // mm/runtime/Makefile comes last.
        let r = run(tree.path(), &["gen-makefiles"]);
        assert_eq!(r.code, 2, "{refusal:?}: {}", r.stderr);
        let found = errors(&r.stderr);
        assert!(
            found
                .iter()
                .any(|(c, l, m)| c == "unwritable" && l == &format!("./{RUNTIME}") && m.contains(refusal.code_says())),
            "{refusal:?}: {found:?}\n{}",
            r.stderr
        );
        assert_same(&before, &fingerprint(tree.path()), &format!("{refusal:?} via gen-makefiles"));
        // The writer itself, with the preflight passed (the refusal set up after it): the
        // probe before the renames catches it.
        drop(applied);
        let changes = planned(tree.path());
        let before = fingerprint(tree.path());
        let mut applied = None;
        let error = output::apply_with(&changes, &mut |step| {
            if step == Step::Stage(&changes[0].path) {
                applied = Some(refusal.apply(&tree.join(RUNTIME)).map_err(std::io::Error::other)?);
            }
            Ok(())
        })
        .expect_err("written despite the refusal");
        assert_eq!(error.code(), Code::Unwritable, "{refusal:?}: {error}");
        assert!(error.to_string().contains("nothing was written"), "{error}");
        assert_same(&before, &fingerprint(tree.path()), &format!("{refusal:?} via output::apply"));
        drop(applied);
    }
}

#[test]
fn a_replaced_file_keeps_its_owner_group_and_mode() {
    assert!(rustix::process::geteuid().is_root(), "giving a file to uid 1234 needs root, as CI runs");
    let tree = Tree::new("mechanisms", V6_12);
    let owners =
        [(RUNTIME, 1234, 2345, 0o640), ("lib/Makefile", 0, 2345, 0o664), ("drivers/selftest/Makefile", 1234, 0, 0o600)];
    for (rel, uid, gid, mode) in owners {
        std::os::unix::fs::chown(tree.join(rel), Some(uid), Some(gid)).unwrap();
        fs::set_permissions(tree.join(rel), fs::Permissions::from_mode(mode)).unwrap();
    }
    let old = tree.read(RUNTIME);
    let r = run(tree.path(), &["gen-makefiles"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_ne!(tree.read(RUNTIME), old, "not rewritten");
    for (rel, uid, gid, mode) in owners {
        let m = fs::metadata(tree.join(rel)).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (uid, gid, mode), "{rel}");
    }
}

#[test]
fn new_files_honour_the_umask() {
    for (umask, mode) in [("027", 0o640), ("022", 0o644), ("077", 0o600)] {
        let tree = Tree::new("mechanisms", V6_12);
        let out = tempfile::tempdir().unwrap();
        let frag = out.path().join("fragments");
        let script = format!("umask {umask} && exec \"$0\" gen-makefiles --out \"$1\"");
        let status = Command::new("sh")
            .args(["-c", &script, env!("CARGO_BIN_EXE_sanpolicy"), frag.to_str().unwrap()])
            .current_dir(tree.path())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let written = fingerprint(&frag);
        let files: Vec<_> = written.iter().filter(|(_, v)| v.starts_with("file")).collect();
        assert!(files.len() >= 4, "{written:#?}");
        for (rel, what) in files {
            assert!(what.contains(&format!("mode {mode:o} ")), "umask {umask}: {rel}: {what}");
        }
    }
}

/// The effective snapshot, a `--config FILE` and the arch Makefile that names a directory's
/// objects (`$(BITS)`), as a FIFO or `/dev/zero`: every command reading one stops at that file
/// (`bad-snapshot` for the snapshot, `io` for the others), saying what it is (exit 2, within
/// the watchdog of [`run`]), and changes nothing.
#[test]
fn a_snapshot_config_or_arch_makefile_that_is_not_a_regular_file_is_named_never_read() {
    let snapshot = "sanitizer-policy.effective.txt";
    for kind in [Kind::Fifo, Kind::Zero] {
        // The snapshot beside the policy.
        let tree = Tree::new("mechanisms", V6_12);
        kind.make(&tree.join(snapshot));
        // (`explain` does not read the snapshot.)
        let commands: [&[&str]; 4] =
            [&["gen-makefiles"], &["gen-makefiles", "--check"], &["check"], &["sync", "--tree", "."]];
        expect_error(&tree, &commands, ("bad-snapshot", &format!("./{snapshot}")), kind, "snapshot");
        // `--config FILE`.
        let tree = Tree::new("mechanisms", V6_12);
        kind.make(&tree.join("build.config"));
        let commands: [&[&str]; 2] =
            [&["check", "--config", "build.config"], &["explain", "lib/plain.o", "--config", "build.config"]];
        expect_error(&tree, &commands, ("io", "build.config"), kind, "--config");
        // `arch/x86/Makefile`, read for `head$(BITS).o` under `arch/x86/`.
        let tree = Tree::new("bits", V6_12);
        kind.make(&tree.join("arch/x86/Makefile"));
        let commands: [&[&str]; 4] =
            [&["gen-makefiles"], &["gen-makefiles", "--check"], &["check"], &["explain", "arch/x86/kernel/head64.o"]];
        expect_error(&tree, &commands, ("io", "arch/x86/Makefile"), kind, "arch Makefile");
    }
}

/// Each of `commands` exits 2 with an error of `code` at `at` naming `kind`, changing nothing.
#[track_caller]
fn expect_error(tree: &Tree, commands: &[&[&str]], (code, at): (&str, &str), kind: Kind, what: &str) {
    let before = fingerprint(tree.path());
    for command in commands {
        let case = format!("{kind:?} as the {what}, {command:?}");
        let r = run(tree.path(), command);
        assert_eq!(r.code, 2, "{case}: {}", r.stderr);
        let found = errors(&r.stderr);
        assert!(
            found.iter().any(|(c, l, m)| c == code && l.ends_with(at) && m.contains(kind.what())),
            "{case}: expected {code} at `{at}` saying `{}`: {found:?}\n{}",
            kind.what(),
            r.stderr
        );
        assert_same(&before, &fingerprint(tree.path()), &case);
    }
}
