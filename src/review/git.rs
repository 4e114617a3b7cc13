//! One git module for the hook and `diff`: repository discovery (a kernel tree may be a
//! subdirectory of its repository), the batched blob reader over one `git cat-file --batch`,
//! and revisions resolved safely.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(super) fn git(repo: &Path, args: &[&str]) -> Result<Vec<u8>, String> {
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
pub(super) struct Blobs {
    repo: PathBuf,
    /// Once `git diff --cached --raw` has answered: what each staged path is in the index
    /// (`None`: deleted there). Every other path is in the index as in HEAD, so `:0:path` is
    /// asked as that id or as `HEAD:path`, and git never reads the index a second time (on 6.12
    /// that costs as much as the whole listing).
    pub(super) staged: Option<HashMap<String, Option<Indexed>>>,
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
pub(super) struct Indexed {
    pub(super) id: String,
    /// What it is when it is no regular file (mode 120000, 160000).
    pub(super) irregular: Option<&'static str>,
}

/// What git holds at a path.
#[derive(Clone)]
pub(super) enum Blob {
    /// A file's bytes; cut after [`BLOB_LIMIT`] + 1 bytes, so that a huge blob is held only
    /// far enough to be refused as too large.
    File(Vec<u8>),
    /// Something that is not a regular file: a symlink, a submodule, a directory.
    Irregular(&'static str),
}

impl Blob {
    pub(super) fn file(self) -> Option<Vec<u8>> {
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
    pub(super) fn start(repo: &Path) -> Result<Blobs, String> {
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
    pub(super) fn get_many(&mut self, specs: &[String]) -> std::io::Result<Vec<Option<Blob>>> {
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
    pub(super) fn get(&mut self, spec: &str) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.get_many(&[spec.to_string()])?.pop().flatten().and_then(Blob::file))
    }

    /// Fetch `specs` (`REV:path` or object ids: never `:0:`, which means something else once
    /// the staged ids are known) now, for [`Blobs::get`] to answer from later.
    pub(super) fn prefetch(&mut self, specs: Vec<String>) -> std::io::Result<()> {
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
pub(super) fn repo_root(tree: &Path) -> Result<PathBuf, String> {
    let start = tree.canonicalize().map_err(|e| format!("{}: {e}", tree.display()))?;
    start
        .ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("`{}` is not inside a git checkout", tree.display()))
}

/// Why a revision names no commit.
pub(super) enum RevError {
    /// git could not be run.
    Git(String),
    NotACommit,
}

/// The commit `rev` names in the repository at `root`, as a full object id. The revision is
/// resolved with `rev-parse --verify --end-of-options REV^{commit}`, so a revision spelled like
/// an option (`--output=/tmp/x`) is refused, never passed to git as one.
pub(super) fn commit_of(root: &Path, rev: &str) -> Result<String, RevError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"))
        .output()
        .map_err(|e| RevError::Git(format!("cannot run git: {e}")))?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || id.len() < 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(RevError::NotACommit);
    }
    Ok(id)
}

/// Revisions this repository has, to suggest: `HEAD~1` when HEAD has a parent, then up to three
/// branches (local, then remote) and tags. Never one it does not have (no `origin/master`
/// without a remote).
pub(super) fn known_revisions(root: &Path) -> Vec<String> {
    let git =
        |args: &[&str]| Command::new("git").arg("-C").arg(root).args(args).output().ok().filter(|o| o.status.success());
    let mut out = Vec::new();
    if git(&["rev-parse", "--verify", "--quiet", "HEAD~1^{commit}"]).is_some() {
        out.push("HEAD~1".to_string());
    }
    if let Some(refs) =
        git(&["for-each-ref", "--count=3", "--format=%(refname:short)", "refs/heads", "refs/remotes", "refs/tags"])
    {
        out.extend(
            String::from_utf8_lossy(&refs.stdout)
                .lines()
                .filter(|r| !r.is_empty() && !r.contains(char::is_whitespace) && !r.starts_with('-'))
                .map(str::to_string),
        );
    }
    out
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
