//! The one place that writes generated files or compares them for drift. Every write goes
//! through a temporary file in the same directory, is synced, then renamed over the target, and
//! keeps the target's permissions; so a file is always either wholly old or wholly new.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use similar::TextDiff;

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

/// Write `contents` to `path` atomically, keeping the existing file's mode.
pub fn write_atomic(path: &Path, contents: &str) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let permissions = fs::metadata(path).ok().map(|m| m.permissions());
    let mut tmp = tempfile::Builder::new().prefix(".sanpolicy-").suffix(".tmp").tempfile_in(dir)?;
    tmp.write_all(contents.as_bytes())?;
    tmp.as_file().sync_all()?;
    if let Some(p) = permissions {
        fs::set_permissions(tmp.path(), p)?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Apply every change that is not a no-op; returns the paths written or removed.
pub fn apply(changes: &[Change]) -> io::Result<Vec<PathBuf>> {
    let mut done = Vec::new();
    for c in changes.iter().filter(|c| !c.is_noop()) {
        match &c.new {
            Some(text) => write_atomic(&c.path, text)?,
            None => fs::remove_file(&c.path)?,
        }
        done.push(c.path.clone());
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

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
