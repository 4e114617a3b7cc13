//! Reviewing instrumentation decisions: why an object is (not) instrumented, a summary for a PR, and what a policy change does.

pub mod diff;
pub mod explain;
mod git;
pub mod hook;
pub mod report;
pub mod sarif;

use std::path::{Path, PathBuf};

/// `path` made absolute with its directory's symlinks resolved (the file itself may not exist
/// yet, or be a symlink of its own), so it can be placed relative to a canonical repository root.
fn resolved(path: &Path) -> std::io::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let parent = absolute.parent().and_then(|p| p.canonicalize().ok());
    Ok(parent.map(|p| p.join(absolute.file_name().unwrap_or_default())).unwrap_or(absolute))
}
