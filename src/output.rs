//! The one place that writes generated files or compares them for drift.
//!
//! What a write guarantees (each proved by a test in `tests/faults.rs` or `tests/io.rs`):
//! - every file is replaced by renaming a synced temporary file from the same directory over
//!   it, so it is always wholly old or wholly new, and it keeps its owner, group and mode; a new
//!   file gets `0666 & !umask`;
//! - every directory is opened once, through handles: under a locked tree each component is
//!   opened with `O_NOFOLLOW` from the tree's own handle, and re-checked before each rename, so
//!   a directory swapped for a symlink between planning and writing fails the run instead of
//!   sending the file elsewhere;
//! - every existing target is opened for writing (never truncated) and read back before the
//!   first rename: an immutable, append-only or read-only-mounted file, or one changed since it
//!   was planned, fails the run with nothing changed;
//! - a rename that still fails puts back the files already renamed (each was exchanged with
//!   its temporary file, so the old file itself is kept until the run succeeds): on any error,
//!   nothing on disk changes;
//! - [`TreeLock`] serialises runs on one tree with `flock` on the tree's directory handle (no
//!   file is left in the tree; a killed run's lock dies with it).

use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use similar::TextDiff;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};

/// Create the directory `base/rel` for this user alone, or check that it already is: each
/// component of `rel` missing is created with mode 0700; each one there must be a directory
/// (not a symlink to one), owned by this user, that no one else may enter or write. `base`
/// (the user's cache directory) is created if missing. What another user could have planted
/// there (a symlink, a directory they own or can write) is refused, never used.
pub fn private_dir(base: &Path, rel: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if !base.is_dir() {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(base)?;
    }
    let me = rustix::process::geteuid().as_raw();
    let mut path = base.to_path_buf();
    for part in rel.components() {
        path.push(part);
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::DirBuilder::new().mode(0o700).create(&path) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                _ => {}
            },
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let meta = fs::symlink_metadata(&path)?;
        let refuse =
            |why: String| io::Error::new(io::ErrorKind::PermissionDenied, format!("`{}` {why}", path.display()));
        if !meta.file_type().is_dir() {
            return Err(refuse(format!(
                "is {}, not a directory of this user's",
                crate::input::describe(meta.file_type())
            )));
        }
        if meta.uid() != me {
            return Err(refuse(format!("belongs to another user (uid {})", meta.uid())));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(refuse(format!("is open to other users (mode {:o})", meta.permissions().mode() & 0o777)));
        }
    }
    Ok(path)
}

/// `path` as the user would type it here: relative to the current directory when it lies
/// below it, else as given.
pub fn shown(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&cwd).unwrap_or(path).display().to_string()
}

/// A file's planned new state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: PathBuf,
    /// Path shown in diffs (relative to the tree or output directory).
    pub display: String,
    pub old: Option<String>,
    /// `None` deletes the file.
    pub new: Option<String>,
}

impl Change {
    pub fn is_noop(&self) -> bool {
        self.old == self.new
    }

    /// Unified diff, `a/` and `b/` prefixed like git.
    pub fn diff(&self) -> String {
        let old = self.old.as_deref().unwrap_or("");
        let new = self.new.as_deref().unwrap_or("");
        let a = if self.old.is_some() { format!("a/{}", self.display) } else { "/dev/null".into() };
        let b = if self.new.is_some() { format!("b/{}", self.display) } else { "/dev/null".into() };
        TextDiff::from_lines(old, new).unified_diff().context_radius(3).header(&a, &b).to_string()
    }
}

/// A write that failed: one diagnostic with a code and the file's path, whose message says
/// what happened to the other files (with rollback, normally "nothing was written").
#[derive(Debug, Clone)]
pub struct WriteError(pub Box<Diagnostic>);

impl WriteError {
    fn new(code: Code, path: &Path, message: String, hint: impl Into<String>) -> WriteError {
        WriteError(Box::new(Diagnostic::error(code, message).at(Location::file(path)).hint(Into::<String>::into(hint))))
    }

    /// An I/O error on `c`'s file, with the code `io`.
    fn io(c: &Change, e: impl std::fmt::Display) -> WriteError {
        WriteError::new(
            Code::Io,
            &c.path,
            format!("writing `{}`: {e}", c.display),
            "fix the file or directory named, then rerun",
        )
    }

    pub fn diagnostic(&self) -> &Diagnostic {
        &self.0
    }

    pub fn code(&self) -> Code {
        self.0.code
    }

    fn then(mut self, what: &str) -> WriteError {
        self.0.message = format!("{}; {what}", self.0.message);
        self
    }
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}]", self.0.message, self.0.code.as_str())
    }
}

impl std::error::Error for WriteError {}

impl From<WriteError> for io::Error {
    fn from(e: WriteError) -> io::Error {
        io::Error::other(e.to_string())
    }
}

/// Write `contents` to `path` atomically, keeping the existing file's owner and mode, whatever
/// the file held before.
pub fn write_atomic(path: &Path, contents: &str) -> io::Result<()> {
    let change =
        Change { path: path.to_path_buf(), display: path.display().to_string(), old: None, new: Some(contents.into()) };
    apply_in(None, &[change], false, &mut |_| Ok(()))?;
    Ok(())
}

/// Write `bytes` to `path` by renaming a synced temporary file from the same directory over it
/// (a binary artifact: the boot stage's initramfs and kernel copies). The directory must exist;
/// the file gets `mode`.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = dir_of(path);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let temp = dir.join(format!("{TEMP_PREFIX}{}-{nanos:08x}{TEMP_SUFFIX}", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// The directory holding `path` (`.` for a bare file name).
fn dir_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Temporary files are `.sanpolicy-<pid>-<random>.tmp`: the pid tells a later run whether
/// the run that staged one is still going.
const TEMP_PREFIX: &str = ".sanpolicy-";
const TEMP_SUFFIX: &str = ".tmp";

/// Temporary files in `dir` left by a run that was killed between staging and renaming (its
/// process is gone). A kernel tree's `.gitignore` hides dotfiles, so nobody would notice them.
/// Files of a live process (a run going on beside this one) are never listed; without `/proc`
/// nothing is.
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    if !Path::new("/proc/self").exists() {
        return Vec::new();
    }
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else { return false };
            let Some((pid, tail)) = rest.split_once('-') else { return false };
            let ours = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) && tail.ends_with(TEMP_SUFFIX);
            ours && !Path::new("/proc").join(pid).exists() && e.file_type().is_ok_and(|t| t.is_file())
        })
        .map(|e| e.path())
        .collect()
}

/// Remove [`leftovers`] from the directories of `written`, best effort, after a run succeeded.
fn sweep_leftovers(written: &[PathBuf]) {
    let dirs: std::collections::BTreeSet<&Path> = written.iter().map(|p| dir_of(p)).collect();
    for leftover in dirs.into_iter().flat_map(leftovers) {
        let _ = fs::remove_file(leftover);
    }
}

/// Why a change cannot be written, found before anything is written: the target is a directory
/// or not a regular file, a symlink (a rename would replace the link, and writing through it
/// could leave the tree), read-only (no write bit at all: checked from the mode because root
/// ignores permissions), cannot be opened for writing (immutable, append-only, on a read-only
/// mount: the open does not truncate), or a directory on the way is a file.
pub fn preflight<'a>(changes: impl IntoIterator<Item = &'a Change>) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for c in changes.into_iter().filter(|c| !c.is_noop()) {
        let problem = match fs::symlink_metadata(&c.path) {
            Ok(m) if m.file_type().is_symlink() => Some((
                Code::Io,
                "is a symlink".to_string(),
                "sanpolicy replaces files by renaming a new one over them; replace the link by a copy".to_string(),
            )),
            Ok(m) if m.is_dir() => {
                Some((Code::Io, "is a directory".to_string(), "remove or rename the directory".to_string()))
            }
            Ok(m) if !m.is_file() => Some((
                Code::Io,
                format!("is {}, not a regular file", crate::input::describe(m.file_type())),
                "remove it; sanpolicy writes regular files only".to_string(),
            )),
            Ok(m) if m.permissions().readonly() => Some((
                Code::Io,
                "is read-only".to_string(),
                "make it writable (`chmod u+w`) if sanpolicy should change it, or drop its units from the policy"
                    .to_string(),
            )),
            Ok(_) => open_for_writing(&c.path).err().map(|e| refusal(c, e)),
            Err(_) => None,
        };
        let blocked = c.path.ancestors().skip(1).find(|a| fs::metadata(a).is_ok_and(|m| !m.is_dir()));
        let message = match (problem, blocked) {
            (Some((code, what, hint)), _) => Some((code, format!("`{}` {what}", c.display), hint)),
            (None, Some(file)) if c.new.is_some() => Some((
                Code::Io,
                format!("cannot write `{}`: `{}` is not a directory", c.display, file.display()),
                "remove the file that stands where a directory belongs".to_string(),
            )),
            _ => None,
        };
        if let Some((code, message, hint)) = message {
            diags.push(Diagnostic::error(code, message).at(Location::file(&c.path)).hint(hint));
        }
    }
    diags
}

/// Open an existing file for writing without truncating or following a final symlink, and
/// without blocking: the kernel's answer to "may this file change?" (attributes, mounts, ACLs)
/// rather than a guess from the mode.
fn open_for_writing(path: &Path) -> Result<OwnedFd, Errno> {
    rustix::fs::open(path, OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
}

/// Why the kernel refuses to open `c`'s existing file for writing: code, what, and the fix.
fn refusal(c: &Change, e: Errno) -> (Code, String, String) {
    let path = c.path.display();
    match e {
        Errno::PERM => (
            Code::Unwritable,
            "cannot be opened for writing: the file is immutable or append-only (EPERM)".to_string(),
            format!("`lsattr {path}` shows the attribute; `chattr -i -a {path}` clears it if sanpolicy should change the file"),
        ),
        Errno::ROFS => (
            Code::Unwritable,
            "is on a read-only file system (EROFS)".to_string(),
            format!("remount it read-write (`findmnt -T {path}` shows the mount), or drop its units from the policy"),
        ),
        Errno::ACCESS => (
            Code::Unwritable,
            "cannot be opened for writing: permission denied (EACCES)".to_string(),
            format!("make it writable (`chmod u+w {path}`), or run as its owner"),
        ),
        Errno::LOOP => (
            Code::Symlink,
            "is a symlink".to_string(),
            "sanpolicy replaces files by renaming a new one over them; replace the link by a copy".to_string(),
        ),
        e => (
            Code::Unwritable,
            format!("cannot be opened for writing: {}", io::Error::from(e)),
            "fix the file, then rerun".to_string(),
        ),
    }
}

/// A step of [`apply_with`], reported to its hook just before it is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// The new text of this file is about to be written to a temporary file beside it.
    Stage(&'a Path),
    /// This file is about to be replaced (renamed over) or removed.
    Commit(&'a Path),
}

/// Apply every change that is not a no-op; returns the paths written or removed. Each file's
/// directory is opened by its path (see [`TreeLock::apply`] for writes into a tree).
pub fn apply(changes: &[Change]) -> Result<Vec<PathBuf>, WriteError> {
    apply_with(changes, &mut |_| Ok(()))
}

/// [`apply`], calling `hook` before every step; an error from the hook fails that step, as a
/// full disk or a vanished directory would (tests inject faults with it).
pub fn apply_with(
    changes: &[Change],
    hook: &mut dyn FnMut(Step<'_>) -> io::Result<()>,
) -> Result<Vec<PathBuf>, WriteError> {
    apply_in(None, changes, true, hook)
}

/// A directory opened once: the tree's root, whose subdirectories are opened from this handle.
struct Root {
    fd: OwnedFd,
    /// As given, made absolute; and resolved.
    given: PathBuf,
    real: PathBuf,
}

/// `path` made absolute without resolving links, `.` components dropped.
fn absolute(path: &Path) -> PathBuf {
    let full =
        if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir().unwrap_or_default().join(path) };
    full.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
}

impl Root {
    fn open(tree: &Path) -> io::Result<Root> {
        let real = tree.canonicalize()?;
        let fd = rustix::fs::open(
            &real,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root { fd, given: absolute(tree), real })
    }

    /// Whether `dir` names a directory of this tree (by its name, before any link is followed).
    fn holds(&self, dir: &Path) -> bool {
        let dir = absolute(dir);
        dir.starts_with(&self.given) || dir.starts_with(&self.real)
    }
}

/// Open `rel` (no symlink in it) below `root`, one component at a time, never following a link.
fn beneath(root: &OwnedFd, rel: &Path) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir = rustix::fs::openat(root, ".", flags, Mode::empty())?;
    for part in rel.components() {
        dir = rustix::fs::openat(&dir, part.as_os_str(), flags, Mode::empty())?;
    }
    Ok(dir)
}

/// Device and inode: what a directory or file is, whatever its name.
fn identity(fd: impl AsFd) -> Result<(u64, u64), Errno> {
    rustix::fs::fstat(fd).map(|s| (s.st_dev, s.st_ino))
}

/// How to find a target's directory again, to prove before renaming that it is the one opened.
enum Again {
    /// Below the tree's root handle, by this resolved relative path.
    Beneath(PathBuf),
    /// By its path (outside any tree: where the user asked for it).
    Path(PathBuf),
}

/// A target's existing file as it was when probed.
struct Old {
    bytes: Vec<u8>,
    uid: u32,
    gid: u32,
    mode: u32,
    id: FileId,
}

/// What a file is, whatever its name: device, inode, type and mode, and the time of its last
/// change (an inode number freed and reused by another file has a later change time).
type FileId = (u64, u64, u32, i64, u64);

fn file_id(s: &rustix::fs::Stat) -> FileId {
    (s.st_dev, s.st_ino, s.st_mode, s.st_ctime, s.st_ctime_nsec)
}

/// One change, its directory open, its existing file probed, its new text staged.
struct Target<'c> {
    change: &'c Change,
    dir: OwnedFd,
    dir_id: (u64, u64),
    again: Again,
    name: std::ffi::OsString,
    old: Option<Old>,
    /// The staged new text (for a write), or where a removed file is kept until the run ends.
    temp: Option<std::ffi::OsString>,
    /// Already in its new state (a rerun after a kill): nothing to do.
    done: bool,
}

/// What a committed target did, so that it can be undone.
enum Committed {
    /// The temporary name now holds the old file (exchanged): rename it back.
    Exchanged,
    /// Renamed over without an exchange (the file system has none): rewrite the old bytes.
    Replaced,
    /// A new file: remove it.
    Created,
    /// Removed: the temporary name holds it.
    Removed,
}

/// The three phases behind [`apply`]:
/// 1. [`preflight`], then for each change (after `Step::Stage`): open its directory (under a
///    root, from the root's handle with `O_NOFOLLOW`), open its existing file for writing and read
///    it back (it must still hold the planned old text, or already the new), and stage the new
///    text in a synced temporary file there with the old file's owner, group and mode. Any failure
///    removes the temporary files and created directories: nothing changed.
/// 2. Every directory is checked to still be the one opened; then each file (after
///    `Step::Commit`, and the same check again) is exchanged with its temporary file. A failure
///    puts back every file already committed: nothing changed.
/// 3. The old files kept under temporary names are removed, directories synced, and temporary
///    files an earlier killed run left beside the files written removed.
fn apply_in(
    root: Option<&Root>,
    changes: &[Change],
    check_old: bool,
    hook: &mut dyn FnMut(Step<'_>) -> io::Result<()>,
) -> Result<Vec<PathBuf>, WriteError> {
    // Every directory of the run, including those of files a killed run had already written
    // (a no-op now, with the old text still beside it under a temporary name).
    let planned: Vec<PathBuf> = changes.iter().map(|c| c.path.clone()).collect();
    let changes: Vec<&Change> = changes.iter().filter(|c| !c.is_noop()).collect();
    if let Some(d) = preflight(changes.iter().copied()).iter().next() {
        return Err(WriteError(Box::new(d.clone())).then("nothing was written"));
    }
    // One open directory per file until the renames: allow as many descriptors as may be.
    raise_descriptor_limit();
    let mut created = Vec::new();
    let mut targets: Vec<Target> = Vec::new();
    for c in &changes {
        let result = hook(Step::Stage(&c.path))
            .map_err(|e| WriteError::io(c, e))
            .and_then(|()| prepare(root, c, check_old, &mut created));
        match result {
            Ok(Some(t)) => targets.push(t),
            Ok(None) => {}
            Err(e) => {
                discard(&targets);
                remove_created(created);
                return Err(e.then("nothing was written"));
            }
        }
    }
    if let Some(e) = targets.iter().find_map(|t| still_there(root, t).err()) {
        discard(&targets);
        remove_created(created);
        return Err(e.then("nothing was written"));
    }
    let mut committed: Vec<(usize, Committed)> = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let result = hook(Step::Commit(&t.change.path))
            .map_err(|e| WriteError::io(t.change, e))
            .and_then(|()| still_there(root, t))
            .and_then(|()| commit(t));
        match result {
            Ok(Some(how)) => committed.push((i, how)),
            Ok(None) => {}
            Err(e) => {
                let kept = rollback(&targets, committed);
                discard(&targets[i..]);
                if kept.is_empty() {
                    remove_created(created);
                    return Err(e.then("rolled back: nothing was written"));
                }
                return Err(e.then(&format!(
                    "rolling back failed, these files hold their new text (each file is whole): {}",
                    kept.join(", ")
                )));
            }
        }
    }
    let mut dirs = std::collections::HashSet::new();
    for (i, how) in &committed {
        let t = &targets[*i];
        if let (Committed::Exchanged | Committed::Removed, Some(temp)) = (how, &t.temp) {
            let _ = rustix::fs::unlinkat(&t.dir, temp, AtFlags::empty());
        }
        // Best effort: the new text is in place whether or not the directory entry is synced yet.
        if dirs.insert(t.dir_id) {
            let _ = rustix::fs::fsync(&t.dir);
        }
    }
    sweep_leftovers(&planned);
    Ok(committed.iter().map(|(i, _)| targets[*i].change.path.clone()).collect())
}

/// Phase 1 for one change; `None` when there is nothing to do (a file to remove is gone).
fn prepare<'c>(
    root: Option<&Root>,
    c: &'c Change,
    check_old: bool,
    created: &mut Vec<PathBuf>,
) -> Result<Option<Target<'c>>, WriteError> {
    let dir_path = dir_of(&c.path);
    let Some(name) = c.path.file_name().map(|n| n.to_os_string()) else {
        return Err(WriteError::io(c, "not a file name"));
    };
    if c.new.is_some() {
        created.extend(
            dir_path.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).map(Path::to_path_buf),
        );
        fs::create_dir_all(dir_path).map_err(|e| WriteError::io(c, e))?;
    } else if !dir_path.exists() {
        return Ok(None);
    }
    let (dir, again) = open_dir(root, c, dir_path)?;
    let dir_id = identity(&dir).map_err(|e| WriteError::io(c, io::Error::from(e)))?;
    let old = probe(&dir, &name, c)?;
    if check_old && !as_planned(c, old.as_ref()) {
        return Err(WriteError::new(
            Code::ChangedDuringRun,
            &c.path,
            format!("`{}` changed since sanpolicy read it", c.display),
            "another program wrote it while sanpolicy ran; rerun the command",
        ));
    }
    let done = match (&c.new, &old) {
        (Some(new), Some(o)) => o.bytes == new.as_bytes(),
        (None, None) => true,
        _ => false,
    };
    let mut target = Target { change: c, dir, dir_id, again, name, old, temp: None, done };
    if !done {
        // The new text staged, or for a removal a placeholder name the removed file moves to.
        let temp = match &c.new {
            Some(new) => stage(&target.dir, new.as_bytes(), target.old.as_ref()),
            None => create_temp(&target.dir, 0o600).map(|(name, _)| name),
        };
        target.temp = Some(temp.map_err(|e| WriteError::io(c, e))?);
    }
    Ok(Some(target))
}

/// The directory of `c`, opened: under `root`, from the root's handle along its resolved path
/// with no link followed (a link leading out of the tree is refused); elsewhere by its path.
fn open_dir(root: Option<&Root>, c: &Change, dir: &Path) -> Result<(OwnedFd, Again), WriteError> {
    if let Some(root) = root.filter(|r| r.holds(dir)) {
        let real = dir.canonicalize().map_err(|e| WriteError::io(c, e))?;
        let Ok(rel) = real.strip_prefix(&root.real) else {
            return Err(WriteError::new(
                Code::Symlink,
                &c.path,
                format!("`{}` leads outside the tree, to `{}`", c.display, real.join(c.path.file_name().unwrap_or_default()).display()),
                "a directory on its way is a symlink out of the tree (swapped in while sanpolicy ran?): replace it by the real directory, then rerun",
            ));
        };
        let fd = beneath(&root.fd, rel).map_err(|e| swapped(c, e))?;
        return Ok((fd, Again::Beneath(rel.to_path_buf())));
    }
    let fd = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| WriteError::io(c, io::Error::from(e)))?;
    Ok((fd, Again::Path(dir.to_path_buf())))
}

/// A directory of `c`'s path no longer the one sanpolicy opened (or resolved a moment ago).
fn swapped(c: &Change, e: Errno) -> WriteError {
    let why = match e {
        Errno::LOOP | Errno::NOTDIR => "a symlink or a file now stands where one of its directories was".to_string(),
        Errno::NOENT => "one of its directories was removed or renamed".to_string(),
        e => format!("one of its directories cannot be opened: {}", io::Error::from(e)),
    };
    WriteError::new(
        Code::ChangedDuringRun,
        &c.path,
        format!("the way to `{}` changed while sanpolicy ran: {why}", c.display),
        "restore the directory (or let the program that changes it finish), then rerun",
    )
}

/// Phase 2's check that `t`'s directory is still the one opened, found the same way again.
fn still_there(root: Option<&Root>, t: &Target) -> Result<(), WriteError> {
    let now = match (&t.again, root) {
        (Again::Beneath(rel), Some(root)) => beneath(&root.fd, rel).and_then(identity),
        (Again::Path(p), _) => rustix::fs::stat(p).map(|s| (s.st_dev, s.st_ino)),
        (Again::Beneath(_), None) => return Ok(()),
    };
    match now {
        Ok(id) if id == t.dir_id => Ok(()),
        Ok(_) => Err(swapped(t.change, Errno::NOENT)),
        Err(e) => Err(swapped(t.change, e)),
    }
}

/// The existing file `name` in `dir`, opened for writing (proving it may change) and read back.
fn probe(dir: &OwnedFd, name: &std::ffi::OsStr, c: &Change) -> Result<Option<Old>, WriteError> {
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::ISDIR) => return Err(WriteError::io(c, "is a directory")),
        Err(e) => {
            let (code, what, hint) = refusal(c, e);
            return Err(WriteError::new(code, &c.path, format!("`{}` {what}", c.display), hint));
        }
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| WriteError::io(c, io::Error::from(e)))?;
    let bytes = crate::input::read_open(fs::File::from(fd), crate::input::POLICY_LIMIT)
        .map_err(|e| WriteError::io(c, format!("the file {e}")))?;
    Ok(Some(Old { bytes, uid: stat.st_uid, gid: stat.st_gid, mode: stat.st_mode, id: file_id(&stat) }))
}

/// Whether the file now holds what the plan was made from (or already the planned result).
fn as_planned(c: &Change, now: Option<&Old>) -> bool {
    let now = now.map(|o| o.bytes.as_slice());
    now == c.old.as_deref().map(str::as_bytes) || now == c.new.as_deref().map(str::as_bytes)
}

/// A fresh temporary file in `dir` holding `bytes`, synced, with `like`'s owner, group and
/// mode, or (a new file) `0666` less the umask, as any program creating a file gives it.
fn stage(dir: &OwnedFd, bytes: &[u8], like: Option<&Old>) -> io::Result<std::ffi::OsString> {
    let (name, fd) = create_temp(dir, if like.is_some() { 0o600 } else { 0o666 })?;
    let written = (|| -> io::Result<()> {
        let mut file = fs::File::from(fd);
        file.write_all(bytes)?;
        if let Some(old) = like {
            keep_owner(&file, old)?;
            // After the chown, which clears set-id bits.
            rustix::fs::fchmod(&file, Mode::from_raw_mode(old.mode & 0o7777))?;
        }
        file.sync_all()
    })();
    match written {
        Ok(()) => Ok(name),
        Err(e) => {
            let _ = rustix::fs::unlinkat(dir, &name, AtFlags::empty());
            Err(e)
        }
    }
}

/// Give the staged file the replaced file's owner and group. Root can; another user can only
/// keep files of their own (and groups they are in), so for them a refusal is not an error:
/// the file then belongs to whoever rewrote it, as with any editor.
fn keep_owner(file: &fs::File, old: &Old) -> io::Result<()> {
    let now = rustix::fs::fstat(file)?;
    if (now.st_uid, now.st_gid) == (old.uid, old.gid) {
        return Ok(());
    }
    let owner = (rustix::fs::Uid::from_raw(old.uid), rustix::fs::Gid::from_raw(old.gid));
    match rustix::fs::fchown(file, Some(owner.0), Some(owner.1)) {
        Err(Errno::PERM) if !rustix::process::geteuid().is_root() => Ok(()),
        other => Ok(other?),
    }
}

/// Create `.sanpolicy-<pid>-<n>.tmp` in `dir`, exclusively, with `mode` (less the umask).
fn create_temp(dir: &OwnedFd, mode: u32) -> io::Result<(std::ffi::OsString, OwnedFd)> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    loop {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{TEMP_PREFIX}{}-{seed:x}{n:x}{TEMP_SUFFIX}", std::process::id());
        match rustix::fs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => return Ok((name.into(), fd)),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Phase 2 for one target: the new file takes the target's name; the old one is kept under the
/// temporary name (an atomic exchange) until the run succeeds.
fn commit(t: &Target) -> Result<Option<Committed>, WriteError> {
    if t.done {
        return Ok(None);
    }
    let c = t.change;
    let io_err = |e: Errno| WriteError::io(c, io::Error::from(e));
    // The file is still the one probed (not replaced by a directory or another file since).
    let now = rustix::fs::statat(&t.dir, &t.name, AtFlags::SYMLINK_NOFOLLOW).ok().map(|s| file_id(&s));
    if now != t.old.as_ref().map(|o| o.id) {
        return Err(WriteError::new(
            Code::ChangedDuringRun,
            &c.path,
            format!("`{}` was replaced while sanpolicy ran", c.display),
            "another program replaced it; rerun the command",
        ));
    }
    let Some(temp) = &t.temp else { return Ok(None) };
    match (c.new.is_some(), &t.old) {
        (true, Some(_)) => {
            match rustix::fs::renameat_with(&t.dir, temp, &t.dir, &t.name, RenameFlags::EXCHANGE) {
                Ok(()) => Ok(Some(Committed::Exchanged)),
                // No exchange on this file system: a plain rename; the old bytes are in memory.
                Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                    rustix::fs::renameat(&t.dir, temp, &t.dir, &t.name).map_err(io_err)?;
                    Ok(Some(Committed::Replaced))
                }
                Err(e) => Err(io_err(e)),
            }
        }
        (true, None) => {
            rustix::fs::renameat_with(&t.dir, temp, &t.dir, &t.name, RenameFlags::NOREPLACE)
                .or_else(|e| match e {
                    Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP => {
                        rustix::fs::renameat(&t.dir, temp, &t.dir, &t.name)
                    }
                    e => Err(e),
                })
                .map_err(io_err)?;
            Ok(Some(Committed::Created))
        }
        // A removal: the file moves to its placeholder's name, kept until the run succeeds.
        (false, Some(_)) => {
            rustix::fs::renameat(&t.dir, &t.name, &t.dir, temp).map_err(io_err)?;
            Ok(Some(Committed::Removed))
        }
        (false, None) => Ok(None),
    }
}

/// Raise the soft limit on open descriptors to the hard one (commonly 1024 against 500k), as
/// the targets' directories stay open from staging to renaming.
fn raise_descriptor_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = setrlimit(Resource::Nofile, rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum });
    }
}

/// Put back every committed target, last first; the files that could not be put back.
fn rollback(targets: &[Target], committed: Vec<(usize, Committed)>) -> Vec<String> {
    let mut kept = Vec::new();
    for (i, how) in committed.into_iter().rev() {
        let t = &targets[i];
        let Some(temp) = &t.temp else { continue };
        let undone = match how {
            Committed::Exchanged | Committed::Removed => {
                rustix::fs::renameat(&t.dir, temp, &t.dir, &t.name).map_err(io::Error::from)
            }
            Committed::Created => rustix::fs::unlinkat(&t.dir, &t.name, AtFlags::empty()).map_err(io::Error::from),
            Committed::Replaced => match &t.old {
                Some(old) => stage(&t.dir, &old.bytes, Some(old))
                    .and_then(|again| rustix::fs::renameat(&t.dir, &again, &t.dir, &t.name).map_err(io::Error::from)),
                None => Ok(()),
            },
        };
        if undone.is_err() {
            kept.push(t.change.display.clone());
        }
    }
    kept
}

/// Remove the temporary files of targets not committed.
fn discard(targets: &[Target]) {
    for t in targets {
        if let Some(temp) = &t.temp {
            let _ = rustix::fs::unlinkat(&t.dir, temp, AtFlags::empty());
        }
    }
}

/// Remove the directories staging created, deepest first, if they are still empty.
fn remove_created(mut created: Vec<PathBuf>) {
    created.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    created.dedup();
    for dir in created {
        let _ = fs::remove_dir(dir);
    }
}

/// How long [`TreeLock::exclusive`] waits for another run by default: a whole-tree
/// `gen-makefiles` or `import --adopt` takes seconds, so a lock held this long belongs to a run
/// that is stuck, and failing tells the user more than waiting forever.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);

/// An exclusive lock on a tree, held by a run that writes into it from before it reads the
/// tree until it has written: `flock` on the tree's directory handle, so no file is left in the
/// tree, and the lock dies with the process (a killed run never blocks the next). Commands that
/// only read take none. The same handle is the root every write into the tree is resolved from.
pub struct TreeLock {
    root: Root,
}

impl TreeLock {
    /// The lock, or `None` when another run holds it.
    pub fn try_exclusive(tree: &Path) -> Result<Option<TreeLock>, Box<Diagnostic>> {
        let root = Root::open(tree).map_err(|e| {
            Box::new(
                Diagnostic::error(Code::Io, format!("cannot open tree `{}`: {e}", tree.display()))
                    .at(Location::file(tree))
                    .hint("pass the top of a kernel source tree with `--tree DIR`"),
            )
        })?;
        match rustix::fs::flock(&root.fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(TreeLock { root })),
            Err(Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(Box::new(
                Diagnostic::error(
                    Code::Locked,
                    format!("cannot lock tree `{}`: {}", tree.display(), io::Error::from(e)),
                )
                .at(Location::file(tree))
                .hint("the file system does not support `flock`; run sanpolicy on a local copy of the tree"),
            )),
        }
    }

    /// The lock, waiting up to `wait` for another run to finish (code `locked` after that).
    pub fn exclusive(tree: &Path, wait: Duration) -> Result<TreeLock, Box<Diagnostic>> {
        let start = Instant::now();
        loop {
            if let Some(lock) = TreeLock::try_exclusive(tree)? {
                return Ok(lock);
            }
            if start.elapsed() >= wait {
                return Err(Box::new(
                    Diagnostic::error(
                        Code::Locked,
                        format!(
                            "another sanpolicy run has held the lock on tree `{}` for {} s",
                            tree.display(),
                            wait.as_secs()
                        ),
                    )
                    .at(Location::file(tree))
                    .hint(format!("`fuser -v {}` lists the processes using the tree: let the other run finish or stop it, then rerun", tree.display())),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The tree as resolved when it was locked.
    pub fn tree(&self) -> &Path {
        &self.root.real
    }

    /// [`apply`] for changes in the locked tree: their directories are opened from the tree's
    /// handle, component by component, never following a link; changes outside the tree (a
    /// policy written elsewhere) are written as [`apply`] writes them.
    pub fn apply(&self, changes: &[Change]) -> Result<Vec<PathBuf>, WriteError> {
        self.apply_with(changes, &mut |_| Ok(()))
    }

    /// [`TreeLock::apply`] with a hook, as [`apply_with`].
    pub fn apply_with(
        &self,
        changes: &[Change],
        hook: &mut dyn FnMut(Step<'_>) -> io::Result<()>,
    ) -> Result<Vec<PathBuf>, WriteError> {
        apply_in(Some(&self.root), changes, true, hook)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A killed run may have committed a file but not yet removed the old text it exchanged
    /// out: the rerun finds the file up to date and must still clear that directory.
    #[test]
    fn a_no_op_run_clears_leftovers_beside_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(format!(".sanpolicy-{}-ffff.tmp", 1u64 << 40));
        fs::write(&dead, "old text").unwrap();
        fs::write(dir.path().join("Makefile"), "new").unwrap();
        let same = Change {
            path: dir.path().join("Makefile"),
            display: "Makefile".into(),
            old: Some("new".into()),
            new: Some("new".into()),
        };
        assert!(same.is_noop());
        assert!(apply(&[same]).unwrap().is_empty());
        assert!(!dead.exists(), "the killed run's temporary file is still there");
        assert_eq!(fs::read_to_string(dir.path().join("Makefile")).unwrap(), "new");
    }

    #[test]
    fn only_temporaries_of_dead_processes_are_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22 on Linux: this pid cannot be running.
        let dead = format!(".sanpolicy-{}-a1b2c3.tmp", 1u64 << 40);
        let live = format!(".sanpolicy-{}-a1b2c3.tmp", std::process::id());
        let keep = [live.as_str(), ".sanpolicy-x-1.tmp", ".sanpolicy-123-1.txt", "Makefile", ".sanpolicy-.tmp"];
        for name in keep.iter().chain([&dead.as_str()]) {
            fs::write(dir.path().join(name), "x").unwrap();
        }
        assert_eq!(leftovers(dir.path()), [dir.path().join(&dead)]);
        apply(&[Change {
            path: dir.path().join("Makefile"),
            display: "Makefile".into(),
            old: Some("x".into()),
            new: Some("y".into()),
        }])
        .unwrap();
        assert!(!dir.path().join(&dead).exists());
        for name in keep {
            assert!(dir.path().join(name).exists(), "{name} was removed");
        }
    }

    #[test]
    fn atomic_write_keeps_mode_and_leaves_no_temp_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("Makefile");
        fs::write(&path, "old\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&path, "new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// Writes outside a tree (a Cargo manifest, a policy `--out` elsewhere) keep the owner too.
    #[test]
    fn a_write_outside_a_tree_keeps_owner_and_group() {
        use std::os::unix::fs::MetadataExt;
        assert!(rustix::process::geteuid().is_root(), "giving a file to uid 1234 needs root, as CI runs");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("Cargo.toml");
        fs::write(&path, "old\n").unwrap();
        std::os::unix::fs::chown(&path, Some(1234), Some(2345)).unwrap();
        let change = Change {
            path: path.clone(),
            display: "Cargo.toml".into(),
            old: Some("old\n".into()),
            new: Some("new\n".into()),
        };
        apply(&[change]).unwrap();
        let m = fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.gid(), fs::read_to_string(&path).unwrap().as_str()), (1234, 2345, "new\n"));
    }

    #[test]
    fn a_tree_lock_excludes_a_second_holder_until_dropped_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let held = TreeLock::try_exclusive(dir.path()).unwrap().expect("a fresh tree is free");
        assert!(TreeLock::try_exclusive(dir.path()).unwrap().is_none());
        let refused = TreeLock::exclusive(dir.path(), Duration::ZERO).err().expect("held");
        assert_eq!(refused.code, Code::Locked);
        drop(held);
        assert!(TreeLock::try_exclusive(dir.path()).unwrap().is_some());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn diff_names_both_sides() {
        let c = Change {
            path: "x".into(),
            display: "lib/Makefile".into(),
            old: Some("a\n".into()),
            new: Some("b\n".into()),
        };
        let d = c.diff();
        assert!(d.starts_with("--- a/lib/Makefile\n+++ b/lib/Makefile\n"), "{d}");
        assert!(d.contains("-a\n+b\n"));
    }
}
