//! Finding and reading a tree's kbuild files: one parallel walk shared by import and by the
//! sweep for generated blocks.

use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStrExt;

use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::input::{self, KBUILD_LIMIT};

/// Top-level directories that hold no Kbuild rules for the kernel proper.
const SKIPPED_TOP: &[&str] = &[".git", "Documentation", "tools"];

/// `Makefile`, `Kbuild`, `Makefile.*`, `Kbuild.*` and `*.mk`.
pub fn is_kbuild_name(name: &str) -> bool {
    name == "Makefile"
        || name == "Kbuild"
        || name.starts_with("Makefile.")
        || name.starts_with("Kbuild.")
        || name.ends_with(".mk")
}

/// Kbuild files under `tree` with their bytes, sorted by path, keeping only files that contain
/// one of `needles` (all files when there are none); also the number of kbuild files read.
/// Files that cannot be read safely are left out (see [`walk_kbuild_files`] for why).
pub fn read_kbuild_files(tree: &Path, needles: &[&str]) -> (Vec<(PathBuf, Vec<u8>)>, usize) {
    let walk = walk_kbuild_files(tree, needles);
    (walk.files, walk.read)
}

/// What a walk over a tree's kbuild files found.
#[derive(Debug)]
pub struct Walk<T = Vec<u8>> {
    /// Kbuild files holding one of the needles, with what the walk made of their bytes, sorted
    /// by path.
    pub files: Vec<(PathBuf, T)>,
    /// How many kbuild files were read.
    pub read: usize,
    /// One warning per file skipped: larger than [`KBUILD_LIMIT`], or no longer a regular file
    /// when opened; and one per directory the walk cannot open or list (a path longer than
    /// `PATH_MAX`, a directory swapped for a symlink, no permission). Nobody named these, so
    /// they are skipped rather than refused, but never in silence.
    pub skipped: Diagnostics,
}

/// [`read_kbuild_files`] with the files it skipped.
pub fn walk_kbuild_files(tree: &Path, needles: &[&str]) -> Walk {
    walk_kbuild_files_with(tree, needles, |_, bytes| bytes)
}

/// A directory waiting in the walk's queue.
enum Job {
    /// Listed by itself: its subdirectories become [`Job::Whole`] jobs of their own.
    Split(PathBuf),
    /// Walked to the bottom by one worker.
    Whole(PathBuf),
    /// The tree's own kbuild files, read by path.
    Files(Vec<PathBuf>),
}

/// [`walk_kbuild_files`], with each wanted file's bytes turned into a `T` by `map` on the
/// worker that read it, so that parsing runs on every core beside the reading.
///
/// A kernel tree has ~90k entries and its walk is bound by system calls, so every core walks:
/// the top-level directories are listed by the workers (each subdirectory becoming a job of its
/// own), then the subdirectories are walked whole. Splitting goes first in the queue, so no
/// worker runs dry while another still lists `drivers/`. Below a job's directory, names are
/// opened from their directory's handle (never through a symlink), not looked up from the root.
pub fn walk_kbuild_files_with<T: Send>(
    tree: &Path,
    needles: &[&str],
    map: impl Fn(&Path, Vec<u8>) -> T + Sync,
) -> Walk<T> {
    let skipped = std::sync::Mutex::new(Diagnostics::default());
    let finders: Vec<memchr::memmem::Finder> =
        needles.iter().map(|n| memchr::memmem::Finder::new(n.as_bytes())).collect();
    let read = std::sync::atomic::AtomicUsize::new(0);
    let take = |path: PathBuf, bytes: Result<Vec<u8>, input::ReadError>, out: &mut Vec<(PathBuf, T)>| {
        let Ok(bytes) = read_noted(&path, bytes, &skipped) else { return };
        read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if finders.is_empty() || finders.iter().any(|f| f.find(&bytes).is_some()) {
            let value = map(&path, bytes);
            out.push((path, value));
        }
    };
    let queue = std::sync::Mutex::new(std::collections::VecDeque::new());
    let push = |job: Job| {
        if let Ok(mut q) = queue.lock() {
            q.push_back(job);
        }
    };
    // The tree itself is only listed here: its files are read by a worker, like the rest.
    let mut top_files = Vec::new();
    let unopened = |path: &Path, e: rustix::io::Errno| {
        if let Ok(mut s) = skipped.lock() {
            s.push(skipped_dir(path, e));
        }
    };
    let mut top = |entry: Entry| match entry {
        Entry::Dir(_, path) if !path.file_name().is_some_and(|n| SKIPPED_TOP.iter().any(|s| n == *s)) => {
            push(Job::Split(path))
        }
        Entry::Dir(..) => {}
        Entry::File(path, _) => top_files.push(path),
        Entry::Unopened(path, e) => unopened(&path, e),
    };
    match open_dir_path(tree, true) {
        Ok(fd) => list(fd, tree, 0, &mut top),
        Err(e) => unopened(tree, e),
    }
    push(Job::Files(top_files));
    let next = || queue.lock().ok().and_then(|mut q| q.pop_front());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut found = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while let Some(job) = next() {
                        let dir = match &job {
                            Job::Split(dir) | Job::Whole(dir) => dir,
                            Job::Files(paths) => {
                                for path in paths {
                                    take(path.clone(), input::read_listed(path, KBUILD_LIMIT), &mut out);
                                }
                                continue;
                            }
                        };
                        let fd = match open_dir_path(dir, false) {
                            Ok(fd) => fd,
                            Err(e) => {
                                unopened(dir, e);
                                continue;
                            }
                        };
                        let whole = matches!(job, Job::Whole(_));
                        let mut visit = |entry: Entry| match entry {
                            Entry::Dir(..) if whole => unreachable!("list() descends itself"),
                            Entry::Dir(_, path) => push(Job::Whole(path)),
                            Entry::File(path, read) => take(path, read(), &mut out),
                            Entry::Unopened(path, e) => unopened(&path, e),
                        };
                        if whole {
                            walk(fd, dir, 0, &mut visit);
                        } else {
                            list(fd, dir, 0, &mut visit);
                        }
                    }
                    out
                })
            })
            .collect();
        // A worker that panicked (a bug) must not pass for one that found nothing.
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect::<Vec<_>>()
    });
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let mut skipped = skipped.into_inner().unwrap_or_default();
    skipped.0.sort_by(|a, b| a.location.as_ref().map(|l| &l.path).cmp(&b.location.as_ref().map(|l| &l.path)));
    Walk { files: found, read: read.into_inner(), skipped }
}

/// What listing a directory gives the walk: a subdirectory (open, never through a symlink), or
/// a kbuild file read through its directory's handle.
enum Entry<'a> {
    Dir(OwnedFd, PathBuf),
    /// The file's path and how to read it (through the handle of the directory being listed).
    File(PathBuf, &'a dyn Fn() -> Result<Vec<u8>, input::ReadError>),
    /// A directory that could not be opened or listed, with why: its kbuild files are not read.
    Unopened(PathBuf, rustix::io::Errno),
}

/// Directories deeper than this below a job are opened by path, their parents' handles closed:
/// the walk never holds more than this many handles per worker, however deep a tree goes (a
/// kernel tree is at most 7 levels deep below its second level).
const HANDLE_DEPTH: usize = 8;

/// The directory at `path`, opened by path, or why it cannot be (the walk warns and passes
/// over it). Only the tree itself may be a symlink (`follow`): every other directory was listed
/// as one, and a symlink swapped in since is not followed.
fn open_dir_path(path: &Path, follow: bool) -> Result<OwnedFd, rustix::io::Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let flags = if follow { flags } else { flags | OFlags::NOFOLLOW };
    rustix::fs::open(path, flags, Mode::empty())
}

/// Whether a failure to open `path` is worth a warning: a directory that vanished since its
/// parent was listed is not (as for files).
fn noted(e: rustix::io::Errno) -> bool {
    e != rustix::io::Errno::NOENT
}

/// The warning for a directory the walk cannot open or list: the kbuild files below it are not
/// read, so whatever they set is not judged.
pub fn skipped_dir(path: &Path, e: rustix::io::Errno) -> Diagnostic {
    let why = match e {
        rustix::io::Errno::NAMETOOLONG => {
            "its path is longer than the system allows (PATH_MAX), so it cannot be opened".to_string()
        }
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            "it is a symlink now (or a loop of them), which the walk does not follow".to_string()
        }
        e => format!("it cannot be opened: {e}"),
    };
    let mut shown = path.display().to_string();
    if shown.len() > 300 {
        // Named by its start and end: the whole would fill screens.
        let (head, tail) = (floor(&shown, 120), ceil(&shown, shown.len() - 120));
        shown = format!("{}…{} ({} bytes)", &shown[..head], &shown[tail..], shown.len());
    }
    Diagnostic::warning(Code::Io, format!("skipped directory `{shown}`: {why}; its kbuild files are not read"))
        .hint("move the directory (or its kbuild files) where the walk can open it: a shorter path, a real directory, readable by this user")
}

fn floor(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Every entry of the directory open as `fd` (at `path`, `depth` below its job) that the walk
/// wants, in listing order: subdirectories and kbuild files. Symlinks are not followed: a
/// listed directory is opened with `O_NOFOLLOW`, and an entry the listing calls a symlink is
/// neither a directory nor a file here. An unreadable entry is passed over, as walkdir did.
fn list(fd: OwnedFd, path: &Path, depth: usize, visit: &mut dyn FnMut(Entry)) {
    let mut dir = match Dir::new(fd) {
        Ok(d) => d,
        Err(e) => return visit(Entry::Unopened(path.to_path_buf(), e)),
    };
    let mut deep = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                visit(Entry::Unopened(path.to_path_buf(), e));
                break;
            }
        };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let Ok(handle) = dir.fd() else { return };
        let child = path.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
        let kind = match entry.file_type() {
            FileType::Unknown => match rustix::fs::statat(handle, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(e) if noted(e) => {
                    visit(Entry::Unopened(child, e));
                    continue;
                }
                Err(_) => continue,
            },
            kind => kind,
        };
        match kind {
            FileType::Directory if depth >= HANDLE_DEPTH => deep.push(child),
            FileType::Directory => {
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                match rustix::fs::openat(handle, name, flags, Mode::empty()) {
                    Ok(sub) => visit(Entry::Dir(sub, child)),
                    // Out of handles (a low `ulimit -n`): opened by path once this one is closed,
                    // rather than silently left out.
                    Err(rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) => deep.push(child),
                    Err(e) if noted(e) => visit(Entry::Unopened(child, e)),
                    Err(_) => {}
                }
            }
            FileType::RegularFile if std::str::from_utf8(name.to_bytes()).is_ok_and(is_kbuild_name) => {
                visit(Entry::File(child, &|| input::read_listed_at(handle, name, KBUILD_LIMIT)))
            }
            _ => {}
        }
    }
    drop(dir);
    for child in deep {
        match open_dir_path(&child, false) {
            Ok(sub) => visit(Entry::Dir(sub, child)),
            Err(e) if noted(e) => visit(Entry::Unopened(child, e)),
            Err(_) => {}
        }
    }
}

/// [`list`] down to the bottom: each subdirectory is walked where it is listed.
fn walk(fd: OwnedFd, path: &Path, depth: usize, visit: &mut dyn FnMut(Entry)) {
    list(fd, path, depth, &mut |entry| match entry {
        Entry::Dir(sub, child) => walk(sub, &child, depth + 1, visit),
        file => visit(file),
    });
}

/// A walked file's bytes as [`crate::input`] read them; a file that could not be read that way
/// is noted in `skipped` (a file that vanished since the directory was listed is not worth a
/// warning).
fn read_noted(
    path: &Path,
    bytes: Result<Vec<u8>, input::ReadError>,
    skipped: &std::sync::Mutex<Diagnostics>,
) -> Result<Vec<u8>, ()> {
    bytes.map_err(|e| {
        if !e.is_missing() {
            if let Ok(mut s) = skipped.lock() {
                s.push(skipped_file(path, &e));
            }
        }
    })
}

/// The warning for a kbuild file a sweep skips: nobody named it, so it is not refused.
pub fn skipped_file(path: &Path, e: &input::ReadError) -> Diagnostic {
    Diagnostic::warning(Code::Io, format!("skipped `{}`: it {e}", path.display()))
        .at(Location::file(path))
        .hint("no kbuild file is that large or of that kind: replace it by a regular Makefile if Kbuild reads it")
}

/// Whether a sweep reaches `rel` (a path relative to the tree): not under a top-level
/// directory that holds no Kbuild rules for the kernel proper.
pub fn is_swept(rel: &str) -> bool {
    !rel.split_once('/').is_some_and(|(top, _)| SKIPPED_TOP.contains(&top))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kbuild_names() {
        for n in ["Makefile", "Kbuild", "Makefile.modfinal", "Kbuild.include", "x.mk"] {
            assert!(is_kbuild_name(n), "{n}");
        }
        for n in ["Makefile~", "foo.c", "Kconfig"] {
            assert!(!is_kbuild_name(n), "{n}");
        }
    }

    /// The walk finds every kbuild file however deep (past the depth where handles are given
    /// up for paths), skips the top-level directories that hold no kernel Kbuild rules, follows
    /// no symlink (to a directory or to a file), and gives each kept file to `map`.
    #[test]
    fn a_walk_reaches_every_depth_and_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("Makefile", "KASAN_SANITIZE_top.o := n\n");
        write("a/Makefile", "KASAN_SANITIZE_a.o := n\n");
        write("a/b/Kbuild", "obj-y += b.o\n");
        let deep: String = (0..HANDLE_DEPTH + 8).map(|i| format!("d{i}/")).collect();
        write(&format!("a/{deep}Makefile"), "KASAN_SANITIZE_deep.o := n\n");
        write("tools/Makefile", "KASAN_SANITIZE_tools.o := n\n");
        write("Documentation/Makefile", "KASAN_SANITIZE_doc.o := n\n");
        std::os::unix::fs::symlink(root.join("a"), root.join("linked")).unwrap();
        std::fs::create_dir(root.join("c")).unwrap();
        std::os::unix::fs::symlink(root.join("a/Makefile"), root.join("c/Makefile")).unwrap();
        let walk = walk_kbuild_files_with(root, &["KASAN_SANITIZE"], |path, bytes| (path.to_path_buf(), bytes.len()));
        let found: Vec<String> =
            walk.files.iter().map(|(p, _)| p.strip_prefix(root).unwrap().display().to_string()).collect();
        assert_eq!(found, ["Makefile", "a/Makefile", &format!("a/{deep}Makefile")]);
        assert!(walk.files.iter().all(|(p, (mapped, len))| p == mapped && *len > 0));
        // Read: the three above and a/b/Kbuild (no needle); not tools/, Documentation/ or links.
        assert_eq!(walk.read, 4);
        assert!(walk.skipped.is_empty());
    }

    /// A FIFO named like a kbuild file is passed over by its listed type: never opened, so the
    /// walk cannot block on it.
    #[test]
    fn a_walk_skips_a_fifo_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("k")).unwrap();
        let fifo = dir.path().join("k/Makefile");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        let walk = walk_kbuild_files(dir.path(), &[]);
        assert!(walk.files.is_empty());
        assert_eq!(walk.read, 0);
        assert!(walk.skipped.is_empty(), "a FIFO is not listed as a regular file, so it is not even opened");
    }
}
