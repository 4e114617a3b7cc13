//! The scratch copy: the user's tree copied to a fixed path per tree under the user's cache
//! directory, with each file's mtime kept, so that the policy is applied there (never in the
//! user's tree) and Kbuild's incremental rebuild sees only what really changed. A later run
//! copies only files whose size or mtime differ and removes what the tree no longer has.
//!
//! The cache root and every directory below it are created 0700 and checked to be real
//! directories owned by this user (not symlinks), so nobody can plant a link that sends the copy
//! or the build elsewhere.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// `$XDG_CACHE_HOME/sanpolicy/boot/<tree name>-<hash>`, or `~/.cache/…`.
pub fn root_for(tree: &Path) -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or("neither XDG_CACHE_HOME nor HOME is set")?;
    let canonical = fs::canonicalize(tree).map_err(|e| format!("cannot resolve `{}`: {e}", tree.display()))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    canonical.hash(&mut h);
    let name = canonical.file_name().map_or("tree".into(), |n| n.to_string_lossy().into_owned());
    Ok(cache.join("sanpolicy").join("boot").join(format!("{name}-{:016x}", h.finish())))
}

/// Create `dir` (and the directories from `base` down to it) 0700, and check that each is a
/// real directory of this user that nobody else can write.
pub fn private_dir(base: &Path, dir: &Path) -> Result<(), String> {
    let rel = dir.strip_prefix(base).map_err(|_| format!("`{}` is not under `{}`", dir.display(), base.display()))?;
    fs::create_dir_all(base).map_err(|e| format!("cannot create `{}`: {e}", base.display()))?;
    let mut at = base.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match fs::DirBuilder::new().mode(0o700).create(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create `{}`: {e}", at.display())),
        }
        let meta = fs::symlink_metadata(&at).map_err(|e| format!("cannot read `{}`: {e}", at.display()))?;
        if !meta.is_dir() {
            return Err(format!("`{}` is not a directory (a symlink or a file is in the way)", at.display()));
        }
        if meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
            return Err(format!("`{}` belongs to someone else or others can write it", at.display()));
        }
    }
    Ok(())
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Synced {
    pub files: usize,
    pub copied: usize,
    pub removed: usize,
}

/// Make `copy` hold what `tree` holds (`.git` left out), copying only files whose size or
/// mtime differ, keeping mtimes and modes, and removing what `tree` does not have.
pub fn sync(tree: &Path, copy: &Path) -> io::Result<Synced> {
    let mut s = Synced::default();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    fs::create_dir_all(copy)?;
    let walk = walkdir::WalkDir::new(tree).follow_links(false).min_depth(1).into_iter();
    for entry in walk.filter_entry(|e| !(e.depth() == 1 && e.file_name() == ".git")) {
        let entry = entry.map_err(io::Error::other)?;
        let rel = entry.path().strip_prefix(tree).map_err(io::Error::other)?.to_path_buf();
        let dest = copy.join(&rel);
        let kind = entry.file_type();
        let have = fs::symlink_metadata(&dest).ok();
        if kind.is_dir() {
            if have.as_ref().is_some_and(|m| !m.is_dir()) {
                fs::remove_file(&dest)?;
            }
            if !have.is_some_and(|m| m.is_dir()) {
                fs::create_dir(&dest)?;
            }
        } else if kind.is_symlink() {
            let target = fs::read_link(entry.path())?;
            if !have.as_ref().is_some_and(|m| m.is_symlink()) || fs::read_link(&dest)? != target {
                remove_any(&dest, have.as_ref())?;
                std::os::unix::fs::symlink(&target, &dest)?;
                s.copied += 1;
            }
        } else if kind.is_file() {
            s.files += 1;
            let meta = entry.metadata().map_err(io::Error::other)?;
            let same = have.as_ref().is_some_and(|m| {
                m.is_file() && m.len() == meta.len() && m.mtime() == meta.mtime() && m.mtime_nsec() == meta.mtime_nsec()
            });
            if !same {
                remove_any(&dest, have.as_ref())?;
                // The copy is a new file (never a write through something planted at `dest`).
                fs::copy(entry.path(), &dest)?;
                fs::File::options().write(true).open(&dest)?.set_modified(meta.modified()?)?;
                s.copied += 1;
            }
        }
        seen.insert(rel);
    }
    // What the tree no longer has (deepest first, so a directory is empty when it goes).
    let mut gone: Vec<PathBuf> = Vec::new();
    for entry in walkdir::WalkDir::new(copy).follow_links(false).min_depth(1).contents_first(true) {
        let entry = entry.map_err(io::Error::other)?;
        let rel = entry.path().strip_prefix(copy).map_err(io::Error::other)?;
        if !seen.contains(rel) {
            gone.push(entry.path().to_path_buf());
        }
    }
    for path in gone {
        let meta = fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            fs::remove_dir(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
        s.removed += 1;
    }
    Ok(s)
}

fn remove_any(path: &Path, meta: Option<&fs::Metadata>) -> io::Result<()> {
    match meta {
        None => Ok(()),
        Some(m) if m.is_dir() => fs::remove_dir_all(path),
        Some(_) => fs::remove_file(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_copies_changes_only_keeps_mtimes_and_removes_what_went() {
        let dir = tempfile::tempdir().unwrap();
        let (tree, copy) = (dir.path().join("tree"), dir.path().join("copy"));
        fs::create_dir_all(tree.join("kernel/locking")).unwrap();
        fs::create_dir_all(tree.join(".git")).unwrap();
        fs::write(tree.join(".git/HEAD"), "ref").unwrap();
        fs::write(tree.join("kernel/locking/Makefile"), "obj-y += lockdep.o\n").unwrap();
        fs::write(tree.join("kernel/old.c"), "int x;\n").unwrap();
        std::os::unix::fs::symlink("locking/Makefile", tree.join("kernel/link")).unwrap();
        let s = sync(&tree, &copy).unwrap();
        assert_eq!((s.files, s.copied, s.removed), (2, 3, 0));
        assert!(!copy.join(".git").exists());
        let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
        assert_eq!(mtime(&copy.join("kernel/old.c")), mtime(&tree.join("kernel/old.c")));
        assert_eq!(fs::read_link(copy.join("kernel/link")).unwrap(), Path::new("locking/Makefile"));
        // Nothing changed: nothing is copied.
        assert_eq!(sync(&tree, &copy).unwrap().copied, 0);
        // A file written in the copy (the policy's Makefile) is put back; a removed file goes.
        fs::write(copy.join("kernel/locking/Makefile"), "changed\n").unwrap();
        fs::remove_file(tree.join("kernel/old.c")).unwrap();
        let s = sync(&tree, &copy).unwrap();
        assert_eq!((s.copied, s.removed), (1, 1));
        assert_eq!(fs::read_to_string(copy.join("kernel/locking/Makefile")).unwrap(), "obj-y += lockdep.o\n");
        assert!(!copy.join("kernel/old.c").exists());
    }

    #[test]
    fn a_planted_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("cache");
        fs::create_dir_all(&base).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base.join("sanpolicy")).unwrap();
        let e = private_dir(&base, &base.join("sanpolicy/boot")).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        assert!(!elsewhere.join("boot").exists());
        private_dir(&base, &base.join("own/boot")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(base.join("own/boot")).unwrap().permissions().mode() & 0o777, 0o700);
    }
}
