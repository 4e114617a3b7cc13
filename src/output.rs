//! The one place that writes generated files or compares them for drift. Every write goes
//! through a temporary file in the same directory, is synced, then renamed over the target, and
//! keeps the target's permissions; so a file is always either wholly old or wholly new. A run
//! stages every file before it renames any, so a failure before the renames changes nothing.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use similar::TextDiff;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};

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
    let mut created = Vec::new();
    let staged = stage(path, contents, &mut created)?;
    commit(staged, path)
}

/// A temporary file holding a target's new text, synced, with the target's mode, in the
/// target's directory (so the rename that publishes it is atomic).
fn stage(path: &Path, contents: &str, created: &mut Vec<PathBuf>) -> io::Result<tempfile::NamedTempFile> {
    let dir = dir_of(path);
    created.extend(dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).map(Path::to_path_buf));
    fs::create_dir_all(dir)?;
    let permissions = fs::metadata(path).ok().map(|m| m.permissions());
    let prefix = format!("{TEMP_PREFIX}{}-", std::process::id());
    let mut tmp = tempfile::Builder::new().prefix(&prefix).suffix(TEMP_SUFFIX).tempfile_in(dir)?;
    tmp.write_all(contents.as_bytes())?;
    if let Some(p) = permissions {
        fs::set_permissions(tmp.path(), p)?;
    }
    tmp.as_file().sync_all()?;
    Ok(tmp)
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

/// Rename a staged file over its target, then sync the directory so the rename is durable.
fn commit(staged: tempfile::NamedTempFile, path: &Path) -> io::Result<()> {
    staged.persist(path).map_err(|e| e.error)?;
    let dir = dir_of(path);
    // Best effort: the new text is in place whether or not the directory entry is synced yet.
    let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    Ok(())
}

/// Why a change cannot be written, found from metadata before anything is written: the target
/// is a directory, a symlink (a rename would replace the link, and writing through it could
/// leave the tree) or read-only (no write bit at all: checked from the mode because root
/// ignores permissions), or a directory on the way is a file.
pub fn preflight<'a>(changes: impl IntoIterator<Item = &'a Change>) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for c in changes.into_iter().filter(|c| !c.is_noop()) {
        let problem = match fs::symlink_metadata(&c.path) {
            Ok(m) if m.file_type().is_symlink() => Some((
                "is a symlink",
                "sanpolicy replaces files by renaming a new one over them; replace the link by a copy",
            )),
            Ok(m) if m.is_dir() => Some(("is a directory", "remove or rename the directory")),
            Ok(m) if m.permissions().readonly() => Some((
                "is read-only",
                "make it writable (`chmod u+w`) if sanpolicy should change it, or drop its units from the policy",
            )),
            _ => None,
        };
        let blocked = c.path.ancestors().skip(1).find(|a| fs::metadata(a).is_ok_and(|m| !m.is_dir()));
        let message = match (problem, blocked) {
            (Some((what, hint)), _) => Some((format!("`{}` {what}", c.display), hint.to_string())),
            (None, Some(file)) if c.new.is_some() => Some((
                format!("cannot write `{}`: `{}` is not a directory", c.display, file.display()),
                "remove the file that stands where a directory belongs".to_string(),
            )),
            _ => None,
        };
        if let Some((message, hint)) = message {
            diags.push(Diagnostic::error(Code::Io, message).at(Location::file(&c.path)).hint(hint));
        }
    }
    diags
}

/// A step of [`apply_with`], reported to its hook just before it is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// The new text of this file is about to be written to a temporary file beside it.
    Stage(&'a Path),
    /// This file is about to be replaced (renamed over) or removed.
    Commit(&'a Path),
}

/// Apply every change that is not a no-op; returns the paths written or removed.
pub fn apply(changes: &[Change]) -> io::Result<Vec<PathBuf>> {
    apply_with(changes, &mut |_| Ok(()))
}

/// [`apply`], calling `hook` before every step; an error from the hook fails that step, as a
/// full disk or a vanished directory would (tests inject faults with it).
///
/// Three phases, so that a failure changes nothing or leaves every file whole:
/// 1. [`preflight`]: any problem fails the whole run before a byte is written;
/// 2. every new text is staged in a synced temporary file beside its target; any failure
///    removes the temporary files (and directories created for them) and changes nothing;
/// 3. the staged files are renamed over their targets and removals done. A failure here (or a
///    kill) leaves each file either old or new, never mixed; the error names what was written;
/// 4. temporary files that an earlier, killed run left beside the files written are removed.
pub fn apply_with(changes: &[Change], hook: &mut dyn FnMut(Step<'_>) -> io::Result<()>) -> io::Result<Vec<PathBuf>> {
    let changes: Vec<&Change> = changes.iter().filter(|c| !c.is_noop()).collect();
    if let Some(d) = preflight(changes.iter().copied()).iter().next() {
        return Err(io::Error::other(format!("{}; nothing was written", d.message)));
    }
    let mut created = Vec::new();
    let mut staged = Vec::new();
    for c in &changes {
        let result = hook(Step::Stage(&c.path)).and_then(|()| match &c.new {
            Some(text) => stage(&c.path, text, &mut created).map(Some),
            None => Ok(None),
        });
        match result {
            Ok(tmp) => staged.push((c, tmp)),
            Err(e) => {
                drop(staged);
                remove_created(created);
                return Err(io::Error::new(e.kind(), format!("writing `{}`: {e}; nothing was written", c.display)));
            }
        }
    }
    let mut done = Vec::new();
    let mut staged = staged.into_iter();
    while let Some((c, tmp)) = staged.next() {
        let result = hook(Step::Commit(&c.path)).and_then(|()| match tmp {
            Some(tmp) => commit(tmp, &c.path),
            None => {
                fs::remove_file(&c.path).or_else(|e| if e.kind() == io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
            }
        });
        if let Err(e) = result {
            drop(staged);
            let written: Vec<&str> =
                changes.iter().filter(|w| done.contains(&w.path)).map(|w| w.display.as_str()).collect();
            let message = if written.is_empty() {
                format!("writing `{}`: {e}; nothing was written", c.display)
            } else {
                format!(
                    "writing `{}`: {e}; already written (each file is whole, old or new): {}",
                    c.display,
                    written.join(", ")
                )
            };
            return Err(io::Error::new(e.kind(), message));
        }
        done.push(c.path.clone());
    }
    sweep_leftovers(&done);
    Ok(done)
}

/// Remove the directories staging created, deepest first, if they are still empty.
fn remove_created(mut created: Vec<PathBuf>) {
    created.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    created.dedup();
    for dir in created {
        let _ = fs::remove_dir(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
