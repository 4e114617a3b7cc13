//! The Cargo side: the same policy governs Rust crates built by Cargo. `[[profile]]` entries
//! name custom profiles that turn rustc mechanisms on, `[[crate]]` entries exempt (or force)
//! packages of the resolved graph, and `gen-cargo` writes the profile tables into the
//! workspace's root `Cargo.toml`.
//!
//! Stages, one module each:
//! - [`workspace`]: the resolved graph, from `cargo metadata`;
//! - [`plan`]: matching `[[crate]]` entries to packages, the tables of each profile;
//! - [`manifest`]: splicing the tables into the root manifest with toml_edit;
//! - [`scan`]: runtime hooks and `#[sanitize]` attributes in the members' sources, with syn.

pub mod manifest;
pub mod plan;
pub mod scan;
pub mod workspace;

use std::path::Path;

use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::output::Change;
use crate::policy::{CargoProfile, Policy, Setting};
use plan::{ProfileTables, Resolved};
use scan::Scan;
use workspace::Workspace;

/// Options of `gen-cargo`.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only this profile of the policy (others in the manifest are left alone).
    pub profile: Option<String>,
    pub force: bool,
}

/// Everything `gen-cargo` computed before writing.
#[derive(Debug)]
pub struct CargoPlan {
    pub workspace: Workspace,
    pub profiles: Vec<ProfileTables>,
    /// The root manifest's new text (a no-op change when up to date). `None` on bad input.
    pub change: Option<Change>,
    pub scan: Scan,
    /// Exempt packages whose public API is compiled in the crates calling it.
    pub generic: Vec<GenericExempt>,
    /// Bad input (exit 2), hand-edited or foreign tables, and findings of the source scan.
    pub diags: Diagnostics,
}

/// A package exempt from a rustflags mechanism whose public generic or `#[inline]` functions
/// are compiled, and instrumented, in the crates calling them: the limit of a crate exemption.
#[derive(Debug, Clone)]
pub struct GenericExempt {
    /// The `[[crate]]`'s package key (`smallvec`, `itoa@0.4.8`) and version.
    pub key: String,
    pub version: String,
    pub skipped: Vec<crate::mechanism::RustMechId>,
    pub api: scan::GenericApi,
}

/// The profiles of the policy that `options` selects.
fn selected<'a>(
    policy: &'a Policy,
    options: &Options,
    diags: &mut Diagnostics,
    policy_path: &Path,
) -> Vec<&'a CargoProfile> {
    let mut seen: Vec<&CargoProfile> = Vec::new();
    for p in &policy.profiles {
        if let Some(first) = seen.iter().find(|s| s.name == p.name) {
            diags.push(
                Diagnostic::error(Code::DuplicateProfile, format!("profile `{}` is declared twice", p.name))
                    .at(p.location.clone())
                    .hint(format!("merge it with the entry at {}", first.location)),
            );
        } else {
            seen.push(p);
        }
    }
    match &options.profile {
        None => seen,
        Some(name) => match seen.iter().find(|p| &p.name == name) {
            Some(p) => vec![*p],
            None => {
                let names: Vec<&str> = seen.iter().map(|p| p.name.as_str()).collect();
                diags.push(
                    Diagnostic::error(Code::MissingKey, format!("the policy declares no profile `{name}`"))
                        .at(crate::diagnostic::Location::file(policy_path))
                        .hint(format!("declared profiles: {}", names.join(", "))),
                );
                Vec::new()
            }
        },
    }
}

/// The policy as named in markers: relative to the workspace root when inside it.
fn policy_name(policy_path: &Path, root: &Path) -> String {
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (policy, root) = (abs(policy_path), abs(root));
    policy.strip_prefix(&root).unwrap_or(&policy).display().to_string()
}

/// Read the workspace, resolve the policy's crates, compute the tables and the manifest's new
/// text, and scan the members' sources.
pub fn plan(policy: &Policy, policy_path: &Path, dir: &Path, options: &Options) -> Result<CargoPlan, Diagnostics> {
    let workspace = workspace::load(dir).map_err(|d| Diagnostics(vec![*d]))?;
    let mut diags = Diagnostics::default();
    let profiles = selected(policy, options, &mut diags, policy_path);
    let (resolved, resolve_diags) = plan::resolve(policy, &workspace);
    diags.extend(resolve_diags);
    diags.extend(plan::proc_macro_forces(&resolved));
    for p in &profiles {
        diags.extend(plan::unlinked_runtimes(p, &resolved, &workspace));
    }
    let tables: Vec<ProfileTables> = profiles.iter().map(|p| plan::tables(p, &resolved)).collect();
    let generic = generic_exempt(&resolved);
    let mut scan = scan::scan(&workspace);
    diags.extend(std::mem::take(&mut scan.diags));
    if diags.has_bad_input() {
        return Ok(CargoPlan { workspace, profiles: tables, change: None, scan, generic, diags });
    }
    findings(&profiles, &resolved, &scan, &mut diags);
    let old = match crate::input::read_to_string(&workspace.manifest, crate::input::SOURCE_LIMIT) {
        Ok(t) => t,
        Err(e) => {
            diags.push(
                Diagnostic::error(Code::Io, format!("cannot read `{}`: {e}", workspace.manifest.display()))
                    .hint("the workspace's root manifest must be readable"),
            );
            return Ok(CargoPlan { workspace, profiles: tables, change: None, scan, generic, diags });
        }
    };
    let edit = manifest::Edit {
        profiles: &tables,
        policy: &policy_name(policy_path, &workspace.root),
        remove_stale: options.profile.is_none(),
        force: options.force,
    };
    let change = match manifest::update(&workspace.manifest, &old, &edit) {
        Ok(new) => Some(Change {
            path: workspace.manifest.clone(),
            display: "Cargo.toml".into(),
            old: Some(old),
            new: Some(new),
        }),
        Err(d) => {
            diags.extend(d);
            None
        }
    };
    Ok(CargoPlan { workspace, profiles: tables, change, scan, generic, diags })
}

/// The `[[crate]]` entries skipping a rustflags mechanism whose package has a public generic
/// or `#[inline]` API.
fn generic_exempt(resolved: &[Resolved]) -> Vec<GenericExempt> {
    resolved
        .iter()
        .filter_map(|r| {
            let skipped: Vec<_> = r
                .entry
                .settings
                .iter()
                .filter(|(id, s)| **s == Setting::Skip && id.uses_rustflags())
                .map(|(id, _)| *id)
                .collect();
            if skipped.is_empty() {
                return None;
            }
            let api = scan::generic_api(r.package)?;
            Some(GenericExempt { key: r.key.clone(), version: r.package.version.clone(), skipped, api })
        })
        .collect()
}

/// Recursion-prone crates left instrumented, and item-level exemptions the policy does not
/// document.
fn findings(profiles: &[&CargoProfile], resolved: &[Resolved], scan: &Scan, diags: &mut Diagnostics) {
    let entries = plan::entries_by_package(resolved);
    let mut reported = std::collections::BTreeSet::new();
    for hook in &scan.hooks {
        let entry = entries.get(&hook.package).copied();
        for profile in profiles {
            let on = plan::effective(profile, entry);
            for id in hook.mechanisms.iter().filter(|id| on.contains(id)) {
                if !reported.insert((hook.package.clone(), profile.name.clone(), *id)) {
                    continue;
                }
                let name = &hook.package.0;
                let hint = match entry {
                    Some(e) => format!("add `\"{id}\"` to `skip` of the `[[crate]]` entry at {}", e.location),
                    None => format!(
                        "exempt the crate: `[[crate]]` with `name = \"{name}\"`, `skip = [\"{id}\"]` and a `why`"
                    ),
                };
                diags.push(
                    Diagnostic::error(
                        Code::RecursionProne,
                        format!(
                            "`{name}` defines the {} hook `{}`, and profile `{}` instruments it: the instrumentation inside the hook calls the hook again",
                            id.get().title,
                            hook.symbol,
                            profile.name
                        ),
                    )
                    .at(hook.location.clone())
                    .hint(hint),
                );
            }
        }
    }
    for attr in scan.attributes.iter().filter(|a| !a.mechanisms.is_empty()) {
        let entry = entries.get(&attr.package).copied();
        let documented = entry.is_some_and(|e| {
            attr.mechanisms.iter().any(|id| e.item_skip.contains(id) || e.settings.get(id) == Some(&Setting::Skip))
        });
        if documented {
            continue;
        }
        let names: Vec<&str> = attr.mechanisms.iter().map(|id| id.get().name).collect();
        diags.push(
            Diagnostic::error(
                Code::UndocumentedAttribute,
                format!(
                    "`{}` turns off `{}` for `{}`, and the policy does not say why",
                    attr.package.0,
                    attr.names.join("`, `"),
                    attr.item
                ),
            )
            .at(attr.location.clone())
            .hint(format!(
                "document it: `[[crate]]` with `name = \"{}\"`, `item-skip = [\"{}\"]` and a `why`",
                attr.package.0, names[0]
            )),
        );
    }
}
