//! The pre-commit check: drift both ways on what is staged. The policy changed but the blocks
//! were not regenerated; a block edited by hand; a directive added to or removed from a kbuild
//! file by hand. It reads only what it must, from the git index: the staged kbuild files, the
//! policy, and the kbuild files of the policy's directories when the policy changed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::kbuild::Rules;
use crate::output::Change;
use crate::policy::{self, Policy};

/// What the hook found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Staged kbuild files that differ from what the policy generates.
    pub stale: Vec<Change>,
    pub diags: Diagnostics,
    /// The staged text of every file the diagnostics point into (the policy, kbuild files):
    /// positions are in these, not in the working tree, so they must be rendered from them.
    pub sources: Vec<(PathBuf, String)>,
}

fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
    let out =
        Command::new("git").arg("-C").arg(repo).args(args).output().map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// One long-lived `git cat-file --batch` process answering blob requests (git flushes after
/// each object), so the index is read once for the whole hook run. Requests go in batches: a
/// round trip costs git a walk from HEAD's tree, and waiting for each answer before asking the
/// next made the commit wait for every one in turn.
///
/// Requests are lines, and git ends a line at `\n` and drops a `\r` before it. `-Z` (NUL-ended
/// requests) would fix that, but needs git 2.43 (Debian bookworm has 2.39); instead a request
/// naming a path with a control character in it is first resolved to its object id by
/// `git rev-parse`, which takes it as one argument, and the id (hex digits) is what is asked
/// for. So every git answers the same, and a path holding a newline is one request, never two
/// that would shift every later answer onto the wrong file.
struct Blobs {
    repo: PathBuf,
    /// Once `git diff --cached --raw` has answered: what each staged path is in the index
    /// (`None`: deleted there). Every other path is in the index as in HEAD, so `:0:path` is
    /// asked as that id or as `HEAD:path`, and git never reads the index a second time (on 6.12
    /// that costs as much as the whole listing).
    staged: Option<HashMap<String, Option<Indexed>>>,
    /// Answers asked for ahead of need (while git lists what is staged), by the request that
    /// named them: `HEAD:path` and object ids name the same blob for the whole run.
    fetched: HashMap<String, Option<Blob>>,
    /// Set by the first failed exchange: answers may be left unread in the pipe, and would be
    /// taken for the answers of later requests.
    broken: bool,
    /// `None` once dropped.
    child: Option<std::process::Child>,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

/// A staged path as `git diff --cached --raw` lists it.
struct Indexed {
    id: String,
    /// What it is when it is no regular file (mode 120000, 160000).
    irregular: Option<&'static str>,
}

/// What git holds at a path.
#[derive(Clone)]
enum Blob {
    /// A file's bytes; cut after [`BLOB_LIMIT`] + 1 bytes, so that a huge blob is held only
    /// far enough to be refused as too large.
    File(Vec<u8>),
    /// Something that is not a regular file: a symlink, a submodule, a directory.
    Irregular(&'static str),
}

impl Blob {
    fn file(self) -> Option<Vec<u8>> {
        match self {
            Blob::File(bytes) => Some(bytes),
            Blob::Irregular(_) => None,
        }
    }
}

/// The most of one blob the hook holds: the largest file sanpolicy reads.
const BLOB_LIMIT: u64 = crate::input::SOURCE_LIMIT;

/// Batches up to this size are written before their answers are read: an empty pipe takes a
/// page whatever its size limit. A larger batch is written from a thread of its own while its
/// answers are read, since git stops reading requests while its answers wait unread.
const DIRECT_BYTES: usize = 4 << 10;

/// What to ask git for one spec.
enum Request {
    /// The answer is known without asking (deleted in the index, named nothing, fetched ahead).
    Known(Option<Blob>),
    Ask(String),
}

impl Blobs {
    fn start(repo: &Path) -> Result<Blobs, String> {
        reap_finished();
        let mut child = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run git: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let repo = repo.to_path_buf();
        Ok(Blobs { repo, staged: None, fetched: HashMap::new(), broken: false, child: Some(child), stdin, stdout })
    }

    /// The object id `spec` names, asked of `git rev-parse` (for specs a request line cannot
    /// carry); `None` when it names nothing.
    fn resolve(&self, spec: &str) -> std::io::Result<Option<String>> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(["rev-parse", "--verify", "--quiet", "--end-of-options", spec])
            .stderr(Stdio::null())
            .output()?;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Ok((out.status.success() && !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id))
    }

    /// The request line for `spec` (`:0:path`, the index, or `REV:path`).
    fn request(&self, spec: &str) -> std::io::Result<Request> {
        let spec = match (spec.strip_prefix(":0:"), &self.staged) {
            (Some(path), Some(staged)) => match staged.get(path) {
                Some(Some(Indexed { irregular: Some(what), .. })) => {
                    return Ok(Request::Known(Some(Blob::Irregular(what))))
                }
                Some(Some(Indexed { id, .. })) => id.clone(),
                Some(None) => return Ok(Request::Known(None)),
                None => format!("HEAD:{path}"),
            },
            _ => spec.to_string(),
        };
        if let Some(known) = self.fetched.get(&spec) {
            return Ok(Request::Known(known.clone()));
        }
        if spec.bytes().any(|b| b.is_ascii_control()) {
            return Ok(match self.resolve(&spec)? {
                Some(id) => Request::Ask(id),
                None => Request::Known(None),
            });
        }
        Ok(Request::Ask(spec))
    }

    /// What each spec names, `None` where nothing is there; asked in one batch.
    fn get_many(&mut self, specs: &[String]) -> std::io::Result<Vec<Option<Blob>>> {
        if self.broken {
            return Err(std::io::Error::other("git cat-file failed earlier in this run"));
        }
        let mut answers = Vec::with_capacity(specs.len());
        let mut asked = Vec::new();
        for spec in specs {
            match self.request(spec)? {
                Request::Known(known) => answers.push(Some(known)),
                Request::Ask(line) => {
                    asked.push(line);
                    answers.push(None);
                }
            }
        }
        let got = self.ask(&asked);
        self.broken = got.is_err();
        let mut got = got?.into_iter();
        Ok(answers.into_iter().map(|a| a.unwrap_or_else(|| got.next().flatten())).collect())
    }

    /// Write `lines` and read their answers, in order.
    fn ask(&mut self, lines: &[String]) -> std::io::Result<Vec<Option<Blob>>> {
        let mut batch = Vec::new();
        for line in lines {
            batch.extend_from_slice(line.as_bytes());
            batch.push(b'\n');
        }
        let read_all = |stdout: &mut std::io::BufReader<std::process::ChildStdout>| {
            lines.iter().map(|_| answer(stdout)).collect::<std::io::Result<Vec<_>>>()
        };
        if batch.len() <= DIRECT_BYTES {
            self.stdin.write_all(&batch)?;
            self.stdin.flush()?;
            return read_all(&mut self.stdout);
        }
        let (stdin, stdout) = (&mut self.stdin, &mut self.stdout);
        std::thread::scope(|scope| {
            let writer = scope.spawn(move || stdin.write_all(&batch).and_then(|()| stdin.flush()));
            let answers = read_all(stdout);
            writer.join().map_err(|_| std::io::Error::other("the request writer panicked"))??;
            answers
        })
    }

    /// `spec` is `:0:path` (the index) or `REV:path`; `None` when no file is there.
    fn get(&mut self, spec: &str) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.get_many(&[spec.to_string()])?.pop().flatten().and_then(Blob::file))
    }

    /// Fetch `specs` (`REV:path` or object ids: never `:0:`, which means something else once
    /// the staged ids are known) now, for [`Blobs::get`] to answer from later.
    fn prefetch(&mut self, specs: Vec<String>) -> std::io::Result<()> {
        let specs: Vec<String> = specs.into_iter().filter(|s| !s.starts_with(':')).collect();
        let answers = self.get_many(&specs)?;
        self.fetched.extend(specs.into_iter().zip(answers));
        Ok(())
    }
}

/// One answer of `git cat-file --batch`: a header line, then the object.
fn answer(stdout: &mut std::io::BufReader<std::process::ChildStdout>) -> std::io::Result<Option<Blob>> {
    use std::io::{BufRead, Read};
    let mut header = Vec::new();
    stdout.read_until(b'\n', &mut header)?;
    header.pop();
    let header = String::from_utf8_lossy(&header);
    // git names the request back; a submodule's commit, not in this repository, is missing
    // too (its mode, which `diff --raw` gives for a staged path, is not asked here).
    if header.ends_with(" missing") || header.ends_with(" ambiguous") {
        return Ok(None);
    }
    let mut fields = header.rsplit(' ');
    let size: Option<u64> = fields.next().and_then(|s| s.parse().ok());
    let (Some(size), Some(kind)) = (size, fields.next()) else {
        return Err(std::io::Error::other(format!("unexpected git output `{header}`")));
    };
    // The object and its closing newline; beyond the bound, read past and not kept.
    let kept = (size + 1).min(BLOB_LIMIT + 1);
    let mut body = Vec::with_capacity(kept as usize);
    stdout.by_ref().take(kept).read_to_end(&mut body)?;
    std::io::copy(&mut stdout.by_ref().take(size + 1 - kept), &mut std::io::sink())?;
    if body.len() as u64 != kept {
        return Err(std::io::Error::other("git cat-file ended in the middle of an object"));
    }
    if size + 1 == kept {
        body.pop();
    }
    Ok(Some(match kind {
        "blob" => Blob::File(body),
        "tree" => Blob::Irregular("a directory"),
        "commit" => Blob::Irregular("a submodule"),
        _ => Blob::Irregular("not a file"),
    }))
}

/// git processes stopped but not yet reaped: a hook run does not wait for git to tear down its
/// mapped packs and index (about a millisecond of every commit). The next [`Blobs::start`]
/// reaps those that have exited; a process that exits first leaves them to init.
static UNREAPED: std::sync::Mutex<Vec<std::process::Child>> = std::sync::Mutex::new(Vec::new());

fn reap_finished() {
    if let Ok(mut children) = UNREAPED.lock() {
        children.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_)) | Err(_)));
    }
}

impl Drop for Blobs {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            if let Ok(mut children) = UNREAPED.lock() {
                children.push(child);
            }
        }
    }
}

/// The work tree root containing `tree`: the nearest ancestor with a `.git`.
fn repo_root(tree: &Path) -> Result<PathBuf, String> {
    let start = tree.canonicalize().map_err(|e| format!("{}: {e}", tree.display()))?;
    start
        .ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("`{}` is not inside a git checkout", tree.display()))
}

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// What the central layout writes besides the policy: its file, and the Makefile.build line
/// that includes it.
const CENTRAL_INPUTS: [&str; 2] = [crate::emit::central::CENTRAL_FILE, "scripts/Makefile.build"];

fn is_kbuild(path: &str) -> bool {
    matches!(path.rsplit('/').next(), Some("Makefile" | "Kbuild"))
}

/// Load a policy from git (`:0:` for the index, `HEAD:` for the last commit).
fn policy_from(
    blobs: &std::cell::RefCell<Blobs>,
    repo: &Path,
    prefix: &str,
    policy_rel: &Path,
) -> Option<(Policy, Diagnostics)> {
    let abs = repo.join(policy_rel);
    let reader = |p: &Path| -> std::io::Result<Vec<u8>> {
        let rel = p.strip_prefix(repo).unwrap_or(p);
        let bytes = blobs.borrow_mut().get(&format!("{prefix}{}", rel.display()))?.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, format!("{prefix}{} not in git", rel.display()))
        })?;
        if bytes.len() as u64 > crate::input::SOURCE_LIMIT {
            return Err(crate::input::ReadError::TooLarge { limit: crate::input::SOURCE_LIMIT }.into());
        }
        Ok(bytes)
    };
    reader(&abs).ok()?;
    Some(policy::load_with(&abs, &reader))
}

/// `path` relative to the repository's top, as git names it.
fn in_repo(path: &Path, repo: &Path) -> Option<String> {
    let abs = super::resolved(path).ok()?;
    abs.strip_prefix(repo).ok().map(|p| p.display().to_string())
}

/// Whether the index holds every file of `policy` (the policy and its includes) byte for byte.
fn same_as_staged(policy: &Policy, repo: &Path, blobs: &std::cell::RefCell<Blobs>) -> bool {
    !policy.files.is_empty()
        && policy.files.iter().all(|(path, text)| {
            let Some(rel) = in_repo(path, repo) else { return false };
            matches!(blobs.borrow_mut().get(&format!(":0:{rel}")), Ok(Some(b)) if b == text.as_bytes())
        })
}

/// The git processes a hook run reads the index with, started before anything else: listing
/// what is staged costs about what `git diff --cached` does, so the policy and the tree's rules
/// are read while it runs rather than after.
pub struct Started {
    repo: PathBuf,
    staged: std::process::Child,
    blobs: Blobs,
}

/// Start listing what is staged in the repository containing `tree`, and the blob reader.
pub fn start(tree: &Path) -> Result<Started, String> {
    let repo = repo_root(tree)?;
    let staged = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["diff", "--cached", "--raw", "--no-abbrev", "-z", "--no-renames"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git: {e}"))?;
    let blobs = Blobs::start(&repo)?;
    Ok(Started { repo, staged, blobs })
}

/// Run the check in the repository containing `tree`, with the policy at `policy_path`.
pub fn pre_commit(tree: &Path, policy_path: &Path, rules: &Rules) -> Result<Outcome, String> {
    pre_commit_started(start(tree)?, tree, policy_path, None, rules)
}

/// [`pre_commit`] with git already started by [`start`]. `on_disk` is the policy as read from
/// the working tree, if it was: used as the staged one when the index holds its files byte for
/// byte (parsing it again from the index would give the same, and would cost as much as what
/// git does).
pub fn pre_commit_started(
    started: Started,
    tree: &Path,
    policy_path: &Path,
    on_disk: Option<Policy>,
    rules: &Rules,
) -> Result<Outcome, String> {
    let repo = repo_root(tree)?;
    // Started elsewhere (the policy's tree is in another repository than the directory the
    // hook runs in): start again where the tree is.
    let started = if started.repo == repo { started } else { start(tree)? };
    let Started { staged: staged_run, blobs, .. } = started;
    let policy_abs = super::resolved(policy_path).map_err(|e| e.to_string())?;
    let policy_rel = policy_abs
        .strip_prefix(&repo)
        .map(Path::to_path_buf)
        .map_err(|_| format!("policy `{}` is not inside the repository", policy_path.display()))?;
    let mut blobs = blobs;
    let mut outcome = Outcome::default();
    // Read while git lists what is staged: what was last generated (drift needs it whenever a
    // kbuild file is staged, the usual commit in a kernel tree), and the committed policy (the
    // staged one, unless the commit changes it).
    use crate::generate::snapshot::{self, Binding, Snapshot};
    let snapshot_rel = snapshot::snapshot_path(&policy_rel).display().to_string();
    let binding = Binding::of(policy_path, Some(tree));
    let snapshot_spec = format!("HEAD:{snapshot_rel}");
    let mut ahead = vec![snapshot_spec.clone()];
    let policy_files = on_disk.iter().flat_map(|p| &p.files).filter_map(|(p, _)| in_repo(p, &repo));
    ahead.extend(policy_files.map(|rel| format!("HEAD:{rel}")));
    blobs.prefetch(ahead).map_err(|e| e.to_string())?;
    let base_bytes = blobs.get(&snapshot_spec).map_err(|e| e.to_string())?;
    let blobs = std::cell::RefCell::new(blobs);
    // The committed snapshot is the base of every "which side moved": validated like on disk.
    let base = match base_bytes {
        None => Ok(snapshot::Base::default()),
        Some(bytes) => snapshot::base_from_bytes(&shown(&repo.join(&snapshot_rel)), bytes, &binding, "sanpolicy"),
    };
    let base = base.unwrap_or_else(|d| {
        outcome.diags.push(*d);
        snapshot::Base::default()
    });
    let staged_out = staged_run.wait_with_output().map_err(|e| e.to_string())?;
    if !staged_out.status.success() {
        return Err(format!("git diff --cached: {}", String::from_utf8_lossy(&staged_out.stderr).trim()));
    }
    let mut entries = staged_entries(&staged_out.stdout);
    // A path that is not UTF-8 is not asked of git as its bytes (two of them could read the same
    // here, and one would be judged as the other): a staged kbuild file's is refused instead.
    for e in entries.iter().filter(|e| !e.utf8 && is_kbuild(&e.path)) {
        outcome.diags.push(
            Diagnostic::error(Code::BadPath, format!("the staged `{}` has a path that is not UTF-8", e.path))
                .at(Location::file(&shown(&repo.join(&e.path))))
                .hint("rename it: the hook judges kbuild files by UTF-8 paths, as every kernel tree names them"),
        );
    }
    entries.retain(|e| e.utf8);
    let staged: Vec<String> = entries.iter().map(|e| e.path.clone()).collect();
    // The kernel tree may be a subdirectory of the repository (`linux/`): kbuild paths are
    // judged relative to the tree's top, as the policy names them; git is asked with the prefix.
    let prefix = tree_prefix(tree, &repo)?;
    let in_tree = |path: &String| path.strip_prefix(&prefix).map(str::to_string);
    let kbuild_staged: Vec<String> = staged.iter().filter_map(in_tree).collect();
    let deleted: BTreeSet<String> =
        entries.iter().filter(|e| e.id.is_none()).filter_map(|e| in_tree(&e.path)).collect();
    blobs.borrow_mut().staged = Some(entries.into_iter().map(|e| (e.path, e.id)).collect());
    let loaded = match on_disk.filter(|p| same_as_staged(p, &repo, &blobs)) {
        Some(p) => Some((p, Diagnostics::default())),
        None => policy_from(&blobs, &repo, ":0:", &policy_rel),
    };
    let Some((policy, policy_diags)) = loaded else {
        // A policy in HEAD but not in the index is being removed: the blocks it generated stay.
        if let Some((head, _)) = policy_from(&blobs, &repo, "HEAD:", &policy_rel) {
            let shown = policy_rel.display();
            outcome.diags.push(
                Diagnostic::error(Code::PolicyRemoved, format!("the policy `{shown}` is deleted from the index"))
                    .at(Location::file(&policy_abs))
                    .hint(format!(
                        "restore it with `git restore --staged --worktree -- {shown}`; to stop using sanpolicy, \
                         also remove the {} generated block(s) and the hook",
                        head.directories().len()
                    )),
            );
        }
        return Ok(outcome); // no policy staged or committed: nothing to keep in sync
    };
    outcome.sources.extend(policy.files.iter().cloned());
    if policy_diags.has_errors() {
        outcome.diags.extend(policy_diags);
        return Ok(outcome);
    }
    let policy_files: BTreeSet<String> = policy.files.iter().filter_map(|(p, _)| in_repo(p, &repo)).collect();
    let policy_changed = staged.iter().any(|s| policy_files.contains(s));
    let mut dirs: BTreeSet<String> =
        kbuild_staged.iter().filter(|s| is_kbuild(s)).map(|s| dir_of(s).to_string()).collect();
    if policy_changed {
        // Only directories whose units the change alters can have drifted because of it; the
        // committed policy is parsed only then (it costs as much as the staged one).
        let head_policy = policy_from(&blobs, &repo, "HEAD:", &policy_rel).map(|(old, _)| old);
        let old = head_policy.as_ref().map(units_by_dir).unwrap_or_default();
        let new = units_by_dir(&policy);
        // Another layout writes every directory anew.
        let relaid = head_policy.as_ref().is_some_and(|old| old.layout != policy.layout);
        for dir in new.keys().chain(old.keys()) {
            if relaid || new.get(dir) != old.get(dir) {
                dirs.insert(dir.clone());
            }
        }
    }
    // The central layout's one file holds every directory's lines: a staged kbuild file (or the
    // central file, or the Makefile.build that includes it) is judged with all of them.
    let central = policy.layout == crate::policy::Layout::Central;
    if central && (!dirs.is_empty() || kbuild_staged.iter().any(|s| CENTRAL_INPUTS.contains(&s.as_str()))) {
        dirs.extend(policy.units_by_dir().keys().map(|d| d.to_string()));
    }
    let mut blobs = blobs.into_inner();
    let mut fetch = |spec: String| blobs.get(&spec).map_err(|e| e.to_string());
    // The policy and its snapshot travel together: a staged policy needs its staged snapshot.
    if policy_changed || staged.contains(&snapshot_rel) {
        // The whole text, as `gen-makefiles --check` compares it: its header is the same
        // whoever writes it, and its binding and checksum are part of what is committed.
        let want = Snapshot::compute(&policy, rules, binding.clone()).render(&policy_rel);
        let have = fetch(format!(":0:{snapshot_rel}"))?.map(|b| String::from_utf8_lossy(&b).into_owned());
        if have.as_deref() != Some(want.as_str()) {
            outcome.diags.push(
                Diagnostic::error(
                    Code::StaleFile,
                    format!("the staged `{snapshot_rel}` does not match the staged policy"),
                )
                .at(Location::file(&repo.join(&snapshot_rel)))
                .hint(format!("run `sanpolicy gen-makefiles` and `git add {snapshot_rel}`"))
                .fixed_by(crate::diagnostic::Fix::GenMakefiles),
            );
        }
    }
    if dirs.is_empty() {
        return Ok(outcome);
    }
    let written = [policy_rel.display().to_string(), snapshot_rel];
    let at = Top { dir: repo.join(&prefix), prefix };
    staged_drift(&at, &policy, rules, &dirs, &deleted, &base, &written, &mut blobs, &mut outcome)?;
    Ok(outcome)
}

/// The tree's top inside the repository: its directory, and its path there as a git path
/// prefix (`linux/`, or empty when the tree is the repository).
struct Top {
    dir: PathBuf,
    prefix: String,
}

/// `tree`'s path inside the repository at `repo`, as a prefix of git paths.
fn tree_prefix(tree: &Path, repo: &Path) -> Result<String, String> {
    let top = tree.canonicalize().map_err(|e| format!("{}: {e}", tree.display()))?;
    let rel = top.strip_prefix(repo).map_err(|_| format!("`{}` is not inside `{}`", tree.display(), repo.display()))?;
    let rel = rel.to_str().ok_or_else(|| format!("`{}` is not a UTF-8 path", tree.display()))?;
    Ok(if rel.is_empty() { String::new() } else { format!("{rel}/") })
}

/// One staged path: its object id in the index, `None` when the commit deletes it there.
struct Entry {
    path: String,
    id: Option<Indexed>,
    /// The path's bytes are UTF-8 (`path` is then exactly them).
    utf8: bool,
}

/// `git diff --cached --raw --no-abbrev -z` output (`:MODE MODE OLD NEW STATUS\0PATH\0` per
/// path): every staged path with its object id and kind in the index.
fn staged_entries(out: &[u8]) -> Vec<Entry> {
    let mut fields = out.split(|b| *b == 0).filter(|s| !s.is_empty());
    let mut entries = Vec::new();
    while let (Some(raw), Some(path)) = (fields.next(), fields.next()) {
        let raw = String::from_utf8_lossy(raw);
        let new = raw.split(' ').nth(3).filter(|id| id.bytes().any(|b| b != b'0'));
        let irregular = match raw.split(' ').nth(1) {
            Some("120000") => Some("a symlink in the index"),
            Some("160000") => Some("a submodule in the index"),
            _ => None,
        };
        // Deleted, or unmerged: nothing a commit can take at stage 0.
        let id = new.filter(|_| !raw.ends_with(" D") && !raw.ends_with(" U"));
        let id = id.map(|id| Indexed { id: id.to_string(), irregular });
        let utf8 = std::str::from_utf8(path).is_ok();
        entries.push(Entry { path: String::from_utf8_lossy(path).into_owned(), id, utf8 });
    }
    entries
}

/// A staged deletion of a kbuild file that holds the policy's block or directives: the commit
/// drops exemptions without the policy saying so.
fn deleted_kbuild_file(path: &Path, rel: &str, head: &str, units: usize, outcome: &mut Outcome) {
    let parsed = crate::makefile::parse(head);
    let directives = parsed.directives().count();
    if units == 0 && directives == 0 && parsed.block.is_none() {
        return;
    }
    outcome.diags.push(
        Diagnostic::error(
            Code::DeletedKbuildFile,
            format!(
                "`{rel}` is deleted, but holds {directives} directive line(s) and the policy names {units} unit(s) there"
            ),
        )
        .at(Location::file(path))
        .hint(format!(
            "restore it with `git restore --staged --worktree -- {rel}`, or drop the directory's units from the policy and run `sanpolicy gen-makefiles`"
        )),
    );
}

/// A repository path as diagnostics show it: relative to where the hook runs (the repository's
/// root, when git runs it), so that positions and staged snippets match.
fn shown(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&cwd).map(Path::to_path_buf).unwrap_or_else(|_| path.to_path_buf())
}

/// What each directory's units are, for telling which directories a policy change touches. The
/// block and central layouts write each unit's reason into the generated text, so there a
/// changed `why` changes the directory too.
fn units_by_dir(policy: &Policy) -> BTreeMap<String, Vec<String>> {
    let reasons = policy.layout != crate::policy::Layout::InPlace;
    policy
        .units_by_dir()
        .into_iter()
        .map(|(dir, units)| {
            let said = units
                .iter()
                .map(|u| {
                    let why = if reasons { u.why.as_str() } else { "" };
                    format!("{} {:?} {:?} {:?} {why:?}", u.path.text, u.settings, u.when, u.flags)
                })
                .collect();
            (dir.to_string(), said)
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
/// `hint` of a drift finding about `file` (relative to the repository), for the hook: the hook
/// judges the index, so the command the hint names fixes nothing until what it wrote is staged.
/// `sync` writes the policy and its snapshot (`written`), `gen-makefiles` the kbuild file.
/// `file` is `None` when the finding is located in the policy, not in a kbuild file: then every
/// tracked file it changed is staged (`git add -u`).
fn staged_hint(hint: &str, file: Option<&str>, written: &[String; 2]) -> String {
    let mut steps = Vec::new();
    if hint.contains("sanpolicy sync") {
        steps.push(format!("after `sanpolicy sync`, `git add {} {}`", written[0], written[1]));
    }
    if hint.contains("sanpolicy gen-makefiles") {
        steps.push(match file {
            Some(file) => format!("after `sanpolicy gen-makefiles`, `git add {file} {}`", written[1]),
            None => "after `sanpolicy gen-makefiles`, `git add -u`".to_string(),
        });
    }
    if steps.is_empty() {
        return hint.to_string();
    }
    format!("{hint}; the hook judges what is staged, so stage what that wrote: {}", steps.join("; "))
}

/// Drift on the staged files: the staged kbuild files of `dirs` are planned from their blobs
/// (nothing is laid out on disk) and judged by the same planning and drift rules as `check` and
/// `gen-makefiles --check`, with every position and text taken from the staged blobs.
#[allow(clippy::too_many_arguments)]
fn staged_drift(
    top: &Top,
    policy: &Policy,
    rules: &Rules,
    dirs: &BTreeSet<String>,
    deleted: &BTreeSet<String>,
    base: &crate::generate::snapshot::Base,
    written: &[String; 2],
    blobs: &mut Blobs,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let join = |d: &str, n: &str| if d.is_empty() { n.to_string() } else { format!("{d}/{n}") };
    let by_dir = policy.units_by_dir();
    let mut staged = crate::generate::Staged::default();
    let mut present = BTreeSet::new();
    // Both names of every directory in one batch; Kbuild reads `Kbuild` when there is one.
    let central = policy.layout == crate::policy::Layout::Central;
    let mut rels: Vec<String> = dirs.iter().flat_map(|d| [join(d, "Kbuild"), join(d, "Makefile")]).collect();
    if central {
        rels.extend(CENTRAL_INPUTS.map(str::to_string));
    }
    let repo = top.dir.as_path();
    let specs: Vec<String> = rels.iter().map(|rel| format!(":0:{}{rel}", top.prefix)).collect();
    let mut found = rels.into_iter().zip(blobs.get_many(&specs).map_err(|e| e.to_string())?);
    let mut fetch = |spec: String| blobs.get(&spec).map_err(|e| e.to_string());
    for d in dirs {
        let (kbuild, makefile) = (found.next(), found.next());
        if let Some((rel, bytes)) = [kbuild, makefile].into_iter().flatten().find(|(_, b)| b.is_some()) {
            staged_into(&mut staged, repo, rel, bytes, outcome);
            present.insert(d.clone());
            continue;
        }
        // Deleted in this commit: judged on what HEAD had there, not planned.
        for name in ["Kbuild", "Makefile"] {
            let rel = join(d, name);
            if let Some(bytes) = fetch(format!("HEAD:{}{rel}", top.prefix))?.filter(|_| deleted.contains(&rel)) {
                let head = String::from_utf8_lossy(&bytes);
                let units = by_dir.get(d.as_str()).map_or(0, Vec::len);
                deleted_kbuild_file(&repo.join(&rel), &rel, &head, units, outcome);
                break;
            }
        }
    }
    let sub = if central {
        // Planned as the tree is: with the staged central file and the Makefile.build reading
        // it, and every unit (the central file is rendered from all of them).
        for (rel, bytes) in found.by_ref() {
            staged_into(&mut staged, repo, rel, bytes, outcome);
        }
        None
    } else {
        Some(policy.with_units_where(|u| present.contains(&u.path.kbuild_dir)))
    };
    let sub = sub.as_ref().unwrap_or(policy);
    // Swept: a staged kbuild file of a directory the policy does not name is judged too.
    let plan = crate::generate::plan_staged(sub, repo, rules, &staged);
    let relocate = |mut d: Diagnostic| {
        if let Some(l) = d.location.as_mut() {
            // A kbuild file the commit stages, or `None`: a finding located in the policy.
            let file = l.path.strip_prefix(repo).ok().map(|p| p.display().to_string());
            let file = file.filter(|f| staged.files.contains_key(f));
            if d.code == Code::Drift {
                d.hint = d.hint.as_deref().map(|h| staged_hint(h, file.as_deref(), written));
            }
            l.path = shown(&l.path);
        }
        d
    };
    let mut found = plan.diags.clone();
    found.extend(crate::check::drift::findings(sub, &plan, rules, base, "sanpolicy"));
    outcome.diags.extend(Diagnostics(found.0.into_iter().map(relocate).collect()));
    for c in plan.changes.into_iter().filter(|c| !c.is_noop()) {
        outcome.stale.push(Change { path: shown(&c.path), ..c });
    }
    Ok(())
}

/// The staged text of `rel` (relative to the repository), if the index has it: taken into
/// `staged` and kept as a source for diagnostics.
fn staged_into(
    staged: &mut crate::generate::Staged,
    repo: &Path,
    rel: String,
    blob: Option<Blob>,
    outcome: &mut Outcome,
) {
    match blob {
        None => {}
        Some(Blob::Irregular(what)) => {
            staged.irregular.insert(rel, what);
        }
        Some(Blob::File(bytes)) => {
            outcome.sources.push((shown(&repo.join(&rel)), String::from_utf8_lossy(&bytes).into_owned()));
            staged.files.insert(rel, bytes);
        }
    }
}

/// The hook script `install-hook` writes; the marker line identifies it as ours.
pub const HOOK_MARKER: &str = "# installed by `sanpolicy install-hook`";

/// The hook script. `program` is the sanpolicy binary that installed it, by absolute path: git
/// GUIs and `env -i` run hooks without the user's PATH. Should it be gone, the hook falls back
/// to `sanpolicy` on PATH.
/// `tree` is the kernel tree's path relative to the repository's top (git runs hooks there),
/// when it is not the top itself.
pub fn hook_script(policy: Option<&Path>, program: Option<&Path>, tree: Option<&Path>) -> String {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let mut policy = policy.map(|p| format!(" --policy {}", quote(p))).unwrap_or_default();
    if let Some(tree) = tree.filter(|t| !t.as_os_str().is_empty()) {
        policy = format!(" --tree {}{policy}", quote(tree));
    }
    let program = program.map(quote).unwrap_or_else(|| "sanpolicy".into());
    format!(
        "#!/bin/sh\n{HOOK_MARKER}: keeps the tree's directives in sync with the sanitizer policy.\n\
         # Skip once with `git commit --no-verify`; CI runs `sanpolicy gen-makefiles --check`, which fails on the same drift.\n\
         sanpolicy={program}\n\
         [ -x \"$sanpolicy\" ] || sanpolicy=sanpolicy\n\
         exec \"$sanpolicy\" pre-commit{policy}\n"
    )
}

/// `tree`'s path relative to the top of the repository that holds it (empty at the top).
pub fn tree_in_repo(tree: &Path) -> Result<PathBuf, String> {
    let repo = repo_root(tree)?;
    tree_prefix(tree, &repo).map(|p| PathBuf::from(p.trim_end_matches('/')))
}

/// Whether git knows the policy at `policy_path` in the repository holding `tree`: committed
/// (`HEAD`) or staged. A branch without one (an upstream branch) has nothing to keep in sync.
pub fn policy_in_git(tree: &Path, policy_path: &Path) -> Result<bool, String> {
    let repo = repo_root(tree)?;
    let Some(rel) = in_repo(policy_path, &repo) else { return Ok(false) };
    let known = |spec: String| git(&repo, &["cat-file", "-e", &spec]).is_ok();
    Ok(known(format!(":0:{rel}")) || known(format!("HEAD:{rel}")))
}

/// Where git looks for hooks in the repository containing `tree` (honours `core.hooksPath`).
pub fn hooks_dir(tree: &Path) -> Result<PathBuf, String> {
    let out = git(tree, &["rev-parse", "--git-path", "hooks"])?;
    let p = PathBuf::from(String::from_utf8_lossy(&out).trim());
    Ok(if p.is_absolute() { p } else { tree.join(p) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_in(dir: &Path, args: &[&str], stdin: &[u8]) -> String {
        let mut child = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("this test needs git: {e}"));
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// More requests than a pipe holds, each answered by more than a pipe holds: written before
    /// the answers are read, git would stop reading while its first answer waits, and both
    /// sides would wait forever. Every answer comes back, in order; a path that is not there
    /// is `None`, and so is a submodule's commit; a directory is told apart from files.
    #[test]
    fn a_batch_larger_than_the_pipes_is_answered_in_order() {
        let repo = tempfile::tempdir().unwrap();
        let dir = repo.path();
        git_in(dir, &["init", "-q"], b"");
        git_in(dir, &["config", "user.email", "t@example.org"], b"");
        git_in(dir, &["config", "user.name", "t"], b"");
        let bodies: Vec<Vec<u8>> = (0..2u8).map(|i| vec![b'a' + i; 70 << 10]).collect();
        let ids: Vec<String> = bodies.iter().map(|b| git_in(dir, &["hash-object", "-w", "--stdin"], b)).collect();
        // A submodule's commit is not in the superproject's object store.
        let mut index = format!("160000 {}\tsub/Makefile\n", "1234567890".repeat(4));
        index.push_str(&format!("100644 {}\tsub/Kbuild/Makefile\n", ids[0]));
        // Larger than anything sanpolicy reads: held only far enough to be refused.
        let huge = git_in(dir, &["hash-object", "-w", "--stdin"], &vec![0; (BLOB_LIMIT + 4096) as usize]);
        index.push_str(&format!("100644 {huge}\thuge/Makefile\n"));
        let path = |i: usize| format!("a-directory-with-a-long-name-{}/Makefile-{i:05}", "x".repeat(40));
        for i in 0..1200 {
            index.push_str(&format!("100644 {}\t{}\n", ids[i % 2], path(i)));
        }
        git_in(dir, &["update-index", "--add", "--index-info"], index.as_bytes());
        git_in(dir, &["commit", "-q", "-m", "x"], b"");
        let mut specs: Vec<String> = (0..1200).map(|i| format!("HEAD:{}", path(i))).collect();
        specs.extend(["HEAD:nothing/here".to_string(), format!("HEAD:{}", path(0).split('/').next().unwrap())]);
        specs.extend(["HEAD:sub/Makefile".into(), "HEAD:sub/Kbuild".into(), "HEAD:huge/Makefile".into()]);
        specs.push(format!("HEAD:{}", path(7)));
        let (done, wait) = std::sync::mpsc::channel();
        let repo_path = dir.to_path_buf();
        std::thread::spawn(move || {
            let mut blobs = Blobs::start(&repo_path).unwrap();
            let _ = done.send(blobs.get_many(&specs).map_err(|e| e.to_string()));
        });
        let answers =
            wait.recv_timeout(std::time::Duration::from_secs(120)).expect("git and the hook wait on each other");
        let answers = answers.unwrap();
        assert_eq!(answers.len(), 1206);
        for (i, answer) in answers.iter().take(1200).enumerate() {
            assert!(matches!(answer, Some(Blob::File(b)) if *b == bodies[i % 2]), "answer {i}");
        }
        assert!(answers[1200].is_none(), "a missing path");
        assert!(matches!(answers[1201], Some(Blob::Irregular("a directory"))), "a directory");
        assert!(answers[1202].is_none(), "a submodule in HEAD");
        assert!(matches!(answers[1203], Some(Blob::Irregular("a directory"))), "a directory named Kbuild");
        assert!(matches!(&answers[1204], Some(Blob::File(b)) if b.len() as u64 == BLOB_LIMIT + 1), "a huge blob");
        assert!(matches!(&answers[1205], Some(Blob::File(b)) if *b == bodies[1]), "the answer after a huge blob");
    }
}
