//! Finding and reading a tree's kbuild files: one parallel walk shared by import and by the
//! sweep for generated blocks.

use std::path::{Path, PathBuf};

use walkdir::WalkDir;

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
#[derive(Debug, Default)]
pub struct Walk {
    /// Kbuild files holding one of the needles, with their bytes, sorted by path.
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// How many kbuild files were read.
    pub read: usize,
    /// One warning per file skipped: larger than [`KBUILD_LIMIT`], or no longer a regular file
    /// when opened. Nobody named these files, so they are skipped rather than refused.
    pub skipped: Diagnostics,
}

/// [`read_kbuild_files`] with the files it skipped. The tree is split at its second level and
/// walked by one walkdir per piece on every core, since a kernel tree has ~90k entries.
pub fn walk_kbuild_files(tree: &Path, needles: &[&str]) -> Walk {
    let skipped = std::sync::Mutex::new(Diagnostics::default());
    let finders: Vec<memchr::memmem::Finder> =
        needles.iter().map(|n| memchr::memmem::Finder::new(n.as_bytes())).collect();
    let read = std::sync::atomic::AtomicUsize::new(0);
    let wanted = |bytes: &[u8]| {
        read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        finders.is_empty() || finders.iter().any(|f| f.find(bytes).is_some())
    };
    let mut shallow = Vec::new();
    let mut pieces = Vec::new();
    let top = WalkDir::new(tree)
        .max_depth(2)
        .into_iter()
        .filter_entry(|e| e.depth() != 1 || !SKIPPED_TOP.contains(&e.file_name().to_str().unwrap_or("")));
    for entry in top.filter_map(Result::ok) {
        if entry.depth() == 2 && entry.file_type().is_dir() {
            pieces.push(entry.into_path());
        } else if entry.file_type().is_file() && entry.file_name().to_str().is_some_and(is_kbuild_name) {
            shallow.push(entry.into_path());
        }
    }
    let queue = std::sync::Mutex::new(pieces);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut found: Vec<(PathBuf, Vec<u8>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while let Some(dir) = queue.lock().ok().and_then(|mut q| q.pop()) {
                        for entry in WalkDir::new(dir).into_iter().filter_map(Result::ok) {
                            if entry.file_type().is_file() && entry.file_name().to_str().is_some_and(is_kbuild_name) {
                                if let Ok(bytes) = read_bounded(entry.path(), &skipped) {
                                    if wanted(&bytes) {
                                        out.push((entry.into_path(), bytes));
                                    }
                                }
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    for path in shallow {
        if let Ok(bytes) = read_bounded(&path, &skipped) {
            if wanted(&bytes) {
                found.push((path, bytes));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let mut skipped = skipped.into_inner().unwrap_or_default();
    skipped.0.sort_by(|a, b| a.location.as_ref().map(|l| &l.path).cmp(&b.location.as_ref().map(|l| &l.path)));
    Walk { files: found, read: read.into_inner(), skipped }
}

/// A walked file's bytes through [`crate::input`]; a file that cannot be read that way is noted
/// in `skipped` (a file that vanished since the directory was listed is not worth a warning).
fn read_bounded(path: &Path, skipped: &std::sync::Mutex<Diagnostics>) -> Result<Vec<u8>, ()> {
    // Only paths the walk listed as regular files come here.
    input::read_listed(path, KBUILD_LIMIT).map_err(|e| {
        if !e.is_missing() {
            let warning = Diagnostic::warning(Code::Io, format!("skipped `{}`: it {e}", path.display()))
                .at(Location::file(path))
                .hint(
                    "no kbuild file is that large or of that kind: replace it by a regular Makefile if Kbuild reads it",
                );
            if let Ok(mut s) = skipped.lock() {
                s.push(warning);
            }
        }
    })
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
}
