//! The workspace as Cargo resolves it: every package of the graph (dependencies included),
//! which of them are members, and where the members' sources are. Read with `cargo metadata`.

use std::path::{Path, PathBuf};

use cargo_metadata::{MetadataCommand, TargetKind};

use crate::diagnostic::{Code, Diagnostic};

/// One package of the resolved graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// A workspace member (its sources are scanned).
    pub member: bool,
    /// Directories holding the sources of the member's library and binary targets.
    pub source_dirs: Vec<PathBuf>,
}

/// A Cargo workspace: its root manifest and every package of the resolved graph.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub root: PathBuf,
    /// The root `Cargo.toml`: the only manifest whose profiles Cargo reads.
    pub manifest: PathBuf,
    /// Sorted by name, then version.
    pub packages: Vec<Package>,
}

/// Target kinds whose code is linked into what the profile builds (not tests, benches,
/// examples or build scripts).
fn linked(kind: &TargetKind) -> bool {
    matches!(
        kind,
        TargetKind::Lib
            | TargetKind::RLib
            | TargetKind::DyLib
            | TargetKind::CDyLib
            | TargetKind::StaticLib
            | TargetKind::Bin
            | TargetKind::ProcMacro
    )
}

/// Run `cargo metadata` on the workspace containing `dir`.
pub fn load(dir: &Path) -> Result<Workspace, Box<Diagnostic>> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        let what = if dir.is_dir() { "has no `Cargo.toml`" } else { "is not a directory" };
        return Err(Box::new(
            Diagnostic::error(Code::Workspace, format!("workspace `{}` {what}", dir.display()))
                .hint("pass the directory of a Cargo workspace with `--workspace DIR`"),
        ));
    }
    let metadata = MetadataCommand::new()
        .manifest_path(&manifest)
        // Once a profile needs rustflags the manifest carries `cargo-features`, which stable
        // Cargo reads only when told to accept unstable features.
        .env("RUSTC_BOOTSTRAP", "1")
        .exec()
        .map_err(|e| {
            let detail = match e {
                cargo_metadata::Error::CargoMetadata { stderr } => stderr.trim().to_string(),
                other => other.to_string(),
            };
            Box::new(
                Diagnostic::error(Code::Workspace, format!("`cargo metadata` failed for `{}`: {detail}", dir.display()))
                    .hint("fix the workspace so that `cargo metadata` succeeds (a crates.io dependency needs the network or a filled cache)"),
            )
        })?;
    let members = &metadata.workspace_members;
    let mut sorted: Vec<&cargo_metadata::Package> = metadata.packages.iter().collect();
    sorted.sort_by(|a, b| (a.name.as_str(), &a.version).cmp(&(b.name.as_str(), &b.version)));
    let packages = sorted
        .into_iter()
        .map(|p| {
            let member = members.contains(&p.id);
            let mut source_dirs: Vec<PathBuf> = if member {
                p.targets
                    .iter()
                    .filter(|t| t.kind.iter().any(linked))
                    .filter_map(|t| t.src_path.parent().map(|d| d.as_std_path().to_path_buf()))
                    .collect()
            } else {
                Vec::new()
            };
            source_dirs.sort();
            source_dirs.dedup();
            // A directory inside another one is walked with it.
            let dirs = source_dirs.clone();
            source_dirs.retain(|d| !dirs.iter().any(|o| o != d && d.starts_with(o)));
            Package { name: p.name.to_string(), version: p.version.to_string(), member, source_dirs }
        })
        .collect();
    let root = metadata.workspace_root.as_std_path().to_path_buf();
    Ok(Workspace { manifest: root.join("Cargo.toml"), root, packages })
}
