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
    /// A proc-macro crate: rustc loads it into itself, so it is never built with a sanitizer.
    pub proc_macro: bool,
    /// The root file of its library target (every package, dependencies included), for the
    /// scan of its public generic API.
    pub lib_root: Option<PathBuf>,
}

/// A binary target of a member, with every package it links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    /// The member defining it (name, version).
    pub package: (String, String),
    pub name: String,
    /// The packages it links (normal dependencies, transitively), itself excluded.
    pub links: std::collections::BTreeSet<(String, String)>,
}

/// A Cargo workspace: its root manifest and every package of the resolved graph.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub root: PathBuf,
    /// The root `Cargo.toml`: the only manifest whose profiles Cargo reads.
    pub manifest: PathBuf,
    /// Sorted by name, then version.
    pub packages: Vec<Package>,
    /// The members' binary targets, sorted.
    pub binaries: Vec<Binary>,
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

/// The root of the workspace containing `dir` (a member directory or anything below it), as
/// Cargo finds it: `cargo locate-project --workspace`, which reads manifests but resolves nothing.
pub fn root(dir: &Path) -> Result<PathBuf, Box<Diagnostic>> {
    if !dir.is_dir() {
        return Err(Box::new(
            Diagnostic::error(Code::Workspace, format!("workspace `{}` is not a directory", dir.display()))
                .hint("pass the directory of a Cargo workspace with `--workspace DIR`"),
        ));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["locate-project", "--workspace", "--message-format", "plain"])
        .current_dir(dir)
        .env("RUSTC_BOOTSTRAP", "1")
        .output();
    let failed = |detail: String| {
        Box::new(
            Diagnostic::error(Code::Workspace, format!("no Cargo workspace at `{}`: {detail}", dir.display()))
                .hint("pass the directory of a Cargo workspace (or of one of its members) with `--workspace DIR`"),
        )
    };
    match out {
        Ok(o) if o.status.success() => {
            let manifest = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
            manifest
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| failed("`cargo locate-project` printed no path".into()))
        }
        Ok(o) => Err(failed(String::from_utf8_lossy(&o.stderr).trim().to_string())),
        Err(e) => Err(failed(format!("cannot run cargo: {e}"))),
    }
}

/// Run `cargo metadata` on the workspace containing `dir`.
pub fn load(dir: &Path) -> Result<Workspace, Box<Diagnostic>> {
    let manifest = root(dir)?.join("Cargo.toml");
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
            let proc_macro = p.targets.iter().any(|t| t.kind.contains(&TargetKind::ProcMacro));
            let lib_root = p
                .targets
                .iter()
                .find(|t| {
                    t.kind.iter().any(|k| matches!(k, TargetKind::Lib | TargetKind::RLib | TargetKind::ProcMacro))
                })
                .map(|t| t.src_path.as_std_path().to_path_buf());
            Package {
                name: p.name.to_string(),
                version: p.version.to_string(),
                member,
                source_dirs,
                proc_macro,
                lib_root,
            }
        })
        .collect();
    let binaries = binaries(&metadata);
    let root = metadata.workspace_root.as_std_path().to_path_buf();
    Ok(Workspace { manifest: root.join("Cargo.toml"), root, packages, binaries })
}

/// Every member's binary targets with the packages linked into them: the closure of normal
/// dependencies in Cargo's resolve (build and dev dependencies are not linked into the binary).
fn binaries(metadata: &cargo_metadata::Metadata) -> Vec<Binary> {
    use cargo_metadata::{DependencyKind, PackageId};
    use std::collections::{BTreeMap, BTreeSet};
    let Some(resolve) = &metadata.resolve else { return Vec::new() };
    let by_id: BTreeMap<&PackageId, &cargo_metadata::Package> = metadata.packages.iter().map(|p| (&p.id, p)).collect();
    let deps: BTreeMap<&PackageId, Vec<&PackageId>> = resolve
        .nodes
        .iter()
        .map(|n| {
            let normal = n
                .deps
                .iter()
                .filter(|d| d.dep_kinds.iter().any(|k| k.kind == DependencyKind::Normal))
                .map(|d| &d.pkg)
                .collect();
            (&n.id, normal)
        })
        .collect();
    let mut out = Vec::new();
    for id in &metadata.workspace_members {
        let Some(p) = by_id.get(id) else { continue };
        let mut links = BTreeSet::new();
        let mut todo: Vec<&PackageId> = deps.get(id).cloned().unwrap_or_default();
        while let Some(next) = todo.pop() {
            // A proc macro runs inside rustc; it and its dependencies are not linked.
            if let Some(dep) =
                by_id.get(next).filter(|d| !d.targets.iter().any(|t| t.kind.contains(&TargetKind::ProcMacro)))
            {
                if links.insert((dep.name.to_string(), dep.version.to_string())) {
                    todo.extend(deps.get(next).into_iter().flatten());
                }
            }
        }
        for t in p.targets.iter().filter(|t| t.kind.contains(&TargetKind::Bin)) {
            out.push(Binary {
                package: (p.name.to_string(), p.version.to_string()),
                name: t.name.clone(),
                links: links.clone(),
            });
        }
    }
    out.sort_by(|a, b| (&a.package, &a.name).cmp(&(&b.package, &b.name)));
    out
}
