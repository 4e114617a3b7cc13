//! Finding and reading a tree's kbuild files: one parallel walk shared by import and by the
//! sweep for generated blocks.

use std::path::{Path, PathBuf};

use walkdir::WalkDir;

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
/// The tree is split at its second level and walked by one walkdir per piece on every core,
/// since a kernel tree has ~90k entries.
pub fn read_kbuild_files(tree: &Path, needles: &[&str]) -> (Vec<(PathBuf, Vec<u8>)>, usize) {
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
                                if let Ok(bytes) = std::fs::read(entry.path()) {
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
        if let Ok(bytes) = std::fs::read(&path) {
            if wanted(&bytes) {
                found.push((path, bytes));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    (found, read.into_inner())
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
