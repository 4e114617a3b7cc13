//! From the policy and the resolved graph to the tables of each Cargo profile: which package
//! each `[[crate]]` names, and per profile which flags and keys every package gets.

use std::collections::{BTreeMap, BTreeSet};

use super::workspace::{Package, Workspace};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::mechanism::{RustForm, RustMechId};
use crate::policy::{CargoProfile, CrateEntry, Policy, Setting};

/// Lets crates that disagree on a target-modifier sanitizer be linked together.
pub const ABI_MISMATCH_FLAG: &str = "-Cunsafe-allow-abi-mismatch=sanitizer";

/// What an exemption cannot reach, in the comment above every exempt package's table: generic
/// and `#[inline]` code is compiled (monomorphised) in the crate that calls it, with that
/// crate's flags.
pub const GENERIC_LIMIT: &str =
    "Its generic and #[inline] code is compiled into the crates calling it, and instrumented there.";

/// A `[[crate]]` entry with the package it names.
#[derive(Debug, Clone)]
pub struct Resolved<'a> {
    pub entry: &'a CrateEntry,
    pub package: &'a Package,
    /// The key of its `[profile.*.package.<key>]` table: the name, or `name@version` where the
    /// graph holds two versions.
    pub key: String,
}

/// Match every `[[crate]]` to exactly one package of the graph.
pub fn resolve<'a>(policy: &'a Policy, workspace: &'a Workspace) -> (Vec<Resolved<'a>>, Diagnostics) {
    let mut out: Vec<Resolved<'a>> = Vec::new();
    let mut diags = Diagnostics::default();
    for entry in &policy.crates {
        let spec = &entry.spec;
        let same_name: Vec<&Package> = workspace.packages.iter().filter(|p| p.name == spec.name).collect();
        let matching: Vec<&Package> = same_name.iter().copied().filter(|p| spec.matches(&p.name, &p.version)).collect();
        let versions = |ps: &[&Package]| ps.iter().map(|p| format!("`{}@{}`", p.name, p.version)).collect::<Vec<_>>();
        match matching.as_slice() {
            [package] => {
                let key = if same_name.len() == 1 {
                    package.name.clone()
                } else {
                    format!("{}@{}", package.name, package.version)
                };
                if let Some(first) = out.iter().find(|r| std::ptr::eq(r.package, *package)) {
                    diags.push(
                        Diagnostic::error(Code::DuplicateCrate, format!("`{key}` is named twice"))
                            .at(entry.location.clone())
                            .hint(format!("merge it with the entry at {}", first.entry.location)),
                    );
                    continue;
                }
                out.push(Resolved { entry, package, key });
            }
            [] if !same_name.is_empty() => diags.push(
                Diagnostic::error(Code::UnknownCrate, format!("no version of `{}` matches `{spec}`", spec.name))
                    .at(entry.location.clone())
                    .hint(format!("the graph has {}", versions(&same_name).join(", "))),
            ),
            [] => {
                let names: BTreeSet<&str> = workspace.packages.iter().map(|p| p.name.as_str()).collect();
                let close = closest_names(&spec.name, &names);
                let hint = if close.is_empty() {
                    format!(
                        "`{}` is not in the resolved graph of {} ({} packages); name a member or a dependency",
                        spec.name,
                        workspace.manifest.display(),
                        workspace.packages.len()
                    )
                } else {
                    format!("did you mean {}?", close.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(" or "))
                };
                diags.push(
                    Diagnostic::error(
                        Code::UnknownCrate,
                        format!("no package `{}` in the workspace's graph", spec.name),
                    )
                    .at(entry.location.clone())
                    .hint(hint),
                );
            }
            several => diags.push(
                Diagnostic::error(
                    Code::AmbiguousCrate,
                    format!("`{spec}` matches {} packages of the graph", several.len()),
                )
                .at(entry.location.clone())
                .hint(format!("name one version: {}", versions(several).join(" or "))),
            ),
        }
    }
    (out, diags)
}

/// Up to three package names close to `name` (`-` and `_` count as the same).
fn closest_names<'a>(name: &str, names: &BTreeSet<&'a str>) -> Vec<&'a str> {
    let norm = |s: &str| s.to_lowercase().replace('-', "_");
    let wanted = norm(name);
    let mut scored: Vec<(usize, &str)> = names
        .iter()
        .map(|n| (strsim::damerau_levenshtein(&wanted, &norm(n)), *n))
        .filter(|(d, n)| *d <= 2.max(n.len() / 3))
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

/// The tables of one package inside a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageTable {
    pub key: String,
    /// Replaces the profile's `rustflags` for this package.
    pub rustflags: Option<Vec<String>>,
    pub keys: Vec<(&'static str, bool)>,
    /// Comment lines above the table: what it does and why.
    pub comment: Vec<String>,
}

/// Everything one generated profile holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileTables {
    pub name: String,
    pub inherits: String,
    pub rustflags: Option<Vec<String>>,
    pub keys: Vec<(&'static str, bool)>,
    /// Target-modifier sanitizers in play: every `rustflags` carries [`ABI_MISMATCH_FLAG`].
    pub target_modifiers: Vec<RustMechId>,
    pub packages: Vec<PackageTable>,
    /// Comment lines under the marker (the profile's reason, what it needs).
    pub comment: Vec<String>,
}

impl ProfileTables {
    pub fn uses_rustflags(&self) -> bool {
        self.rustflags.is_some() || self.packages.iter().any(|p| p.rustflags.is_some())
    }

    /// `[profile.<name>.build-override] rustflags = []`, whenever the profile sets flags: build
    /// scripts and proc-macros run on the host during the build and are never instrumented.
    pub fn build_override(&self) -> bool {
        self.rustflags.is_some()
    }
}

/// The mechanisms on for `package` in `profile`: the profile's, minus what the crate skips,
/// plus what it forces.
pub fn effective(profile: &CargoProfile, entry: Option<&CrateEntry>) -> BTreeSet<RustMechId> {
    let mut on: BTreeSet<RustMechId> = profile.enable.iter().copied().collect();
    if let Some(entry) = entry {
        for (id, setting) in &entry.settings {
            match setting {
                Setting::Skip => on.remove(id),
                Setting::Force => on.insert(*id),
            };
        }
    }
    on
}

fn flags(on: &BTreeSet<RustMechId>, abi: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for id in on {
        match id.get().form {
            RustForm::Sanitizer { value, .. } => out.push(format!("-Zsanitizer={value}")),
            RustForm::Flags { flags } => out.extend(flags.iter().map(|f| f.to_string())),
            RustForm::ProfileKey { .. } => {}
        }
    }
    if abi {
        out.push(ABI_MISMATCH_FLAG.to_string());
    }
    out
}

fn rustflag_mechanisms(on: &BTreeSet<RustMechId>) -> BTreeSet<RustMechId> {
    on.iter().copied().filter(|id| id.uses_rustflags()).collect()
}

fn comment_text(text: &str) -> Vec<String> {
    text.lines().map(|l| l.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>()).collect()
}

fn names(ids: &[RustMechId]) -> String {
    ids.iter().map(|id| id.get().name).collect::<Vec<_>>().join(", ")
}

/// The tables of `profile`, for the crates of `resolved`.
pub fn tables(profile: &CargoProfile, resolved: &[Resolved]) -> ProfileTables {
    let base = effective(profile, None);
    let ons: Vec<(&Resolved, BTreeSet<RustMechId>)> =
        resolved.iter().map(|r| (r, effective(profile, Some(r.entry)))).collect();
    let target_modifiers: Vec<RustMechId> = std::iter::once(&base)
        .chain(ons.iter().map(|(_, on)| on))
        .flatten()
        .filter(|id| matches!(id.get().form, RustForm::Sanitizer { target_modifier: true, .. }))
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let abi = !target_modifiers.is_empty();
    let base_flags = rustflag_mechanisms(&base);
    let rustflags = (!base_flags.is_empty() || abi).then(|| flags(&base_flags, abi));
    let keys = base
        .iter()
        .filter_map(|id| match id.get().form {
            RustForm::ProfileKey { key } => Some((key, true)),
            _ => None,
        })
        .collect();
    let packages = ons.iter().filter_map(|(r, on)| package_table(r, on, &base_flags, abi)).collect();
    let mut tables = ProfileTables {
        name: profile.name.clone(),
        inherits: profile.inherits.clone(),
        rustflags,
        keys,
        target_modifiers,
        packages,
        comment: Vec::new(),
    };
    if let Some(why) = &profile.why {
        tables.comment.extend(comment_text(why));
    }
    tables.comment.extend(profile.links.iter().map(|l| format!("see {l}")));
    if tables.uses_rustflags() {
        tables.comment.push(
            "`rustflags` in a profile and `-Z` flags are unstable: build with `RUSTC_BOOTSTRAP=1` or nightly.".into(),
        );
    }
    if abi {
        let titles: Vec<&str> = tables.target_modifiers.iter().map(|id| id.get().title).collect();
        tables
            .comment
            .push(format!("{} changes the ABI (a target modifier), so every crate here passes", titles.join(" and ")));
        tables.comment.push(format!("`{ABI_MISMATCH_FLAG}`: rustc would otherwise refuse to link instrumented"));
        tables.comment.push("crates with exempt ones and with the prebuilt, uninstrumented standard library.".into());
    }
    tables
}

/// The package table of one crate entry, when it differs from the profile (`on`: what is on
/// for the crate).
fn package_table(
    r: &Resolved,
    on: &BTreeSet<RustMechId>,
    base_flags: &BTreeSet<RustMechId>,
    abi: bool,
) -> Option<PackageTable> {
    let own_flags = rustflag_mechanisms(on);
    let rustflags = (&own_flags != base_flags).then(|| flags(&own_flags, abi));
    let keys: Vec<(&'static str, bool)> = r
        .entry
        .settings
        .iter()
        .filter_map(|(id, setting)| match id.get().form {
            RustForm::ProfileKey { key } => Some((key, *setting == Setting::Force)),
            _ => None,
        })
        .collect();
    if rustflags.is_none() && keys.is_empty() {
        return None;
    }
    let by = |s: Setting| r.entry.settings.iter().filter(|(_, v)| **v == s).map(|(k, _)| *k).collect::<Vec<_>>();
    let (skip, force) = (by(Setting::Skip), by(Setting::Force));
    let mut what = Vec::new();
    if !skip.is_empty() {
        what.push(format!("skip {}", names(&skip)));
    }
    if !force.is_empty() {
        what.push(format!("force {}", names(&force)));
    }
    let mut comment = vec![format!("{} {}: {}", r.package.name, r.package.version, what.join("; "))];
    if skip.iter().any(|id| id.uses_rustflags() && base_flags.contains(id)) {
        comment.push(GENERIC_LIMIT.into());
    }
    comment.extend(comment_text(&r.entry.why));
    comment.extend(r.entry.links.iter().map(|l| format!("see {l}")));
    Some(PackageTable { key: r.key.clone(), rustflags, keys, comment })
}

/// The crate entry (if any) of each package, by (name, version).
pub fn entries_by_package<'a>(resolved: &[Resolved<'a>]) -> BTreeMap<(String, String), &'a CrateEntry> {
    resolved.iter().map(|r| ((r.package.name.clone(), r.package.version.clone()), r.entry)).collect()
}

/// The mechanisms a `[[crate]]` entry sets to `setting` that go through `rustflags`, with where
/// each is written.
fn rustflag_settings<'a>(
    entry: &'a CrateEntry,
    setting: Setting,
) -> impl Iterator<Item = (RustMechId, Option<&'a crate::diagnostic::Location>)> + 'a {
    entry
        .settings
        .iter()
        .filter(move |(id, s)| **s == setting && id.uses_rustflags())
        .map(|(id, _)| (*id, entry.setting_locations.get(id)))
}

/// Mechanisms whose runtime rustc links into the proc macro itself, so that an instrumented
/// proc macro still loads (measured on serde_derive: `-Cinstrument-coverage` builds, while
/// `-Zsanitizer=address` and the sancov flags fail with `undefined symbol`).
const RUNTIME_LINKED_INTO_DYLIBS: &[&str] = &["coverage"];

/// Forcing an instrumentation on a proc-macro crate: rustc loads the proc macro into itself,
/// where no sanitizer or coverage runtime exists, so loading it fails (measured with
/// `force = ["asan"]` on serde_derive: `undefined symbol:
/// __asan_option_detect_stack_use_after_return`) and every crate using it fails to build.
pub fn proc_macro_forces(resolved: &[Resolved]) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for r in resolved.iter().filter(|r| r.package.proc_macro) {
        for (id, at) in rustflag_settings(r.entry, Setting::Force) {
            if RUNTIME_LINKED_INTO_DYLIBS.contains(&id.get().name) {
                continue;
            }
            diags.push(
                Diagnostic::error(
                    Code::ProcMacroCrate,
                    format!(
                        "`{}` is a proc-macro crate: rustc loads it into itself, where the {} runtime is absent, so forcing `{id}` on it makes every crate using it fail to build (`undefined symbol: __asan_option_detect_stack_use_after_return` for ASan)",
                        r.key,
                        id.get().title
                    ),
                )
                .at(at.cloned().unwrap_or_else(|| r.entry.location.clone()))
                .hint(format!(
                    "remove `\"{id}\"` from `force` of this `[[crate]]` entry: a proc macro runs inside the compiler and is never linked into the program"
                )),
            );
        }
    }
    diags
}

/// A sanitizer forced on a library in a profile that does not enable it: the sanitizer's
/// runtime is linked only into a binary whose own crate is built with the sanitizer, so every
/// binary linking the library without it fails to link (undefined `__asan_*` references).
pub fn unlinked_runtimes(profile: &CargoProfile, resolved: &[Resolved], workspace: &Workspace) -> Diagnostics {
    let entries = entries_by_package(resolved);
    let mut diags = Diagnostics::default();
    for r in resolved.iter().filter(|r| !r.package.proc_macro) {
        let id_of = (r.package.name.clone(), r.package.version.clone());
        for (id, at) in rustflag_settings(r.entry, Setting::Force) {
            if profile.enable.contains(&id) || !matches!(id.get().form, RustForm::Sanitizer { .. }) {
                continue;
            }
            let broken: Vec<String> = workspace
                .binaries
                .iter()
                .filter(|b| b.links.contains(&id_of))
                .filter(|b| !effective(profile, entries.get(&b.package).copied()).contains(&id))
                .map(|b| format!("`{}` (package {})", b.name, b.package.0))
                .collect();
            if broken.is_empty() {
                continue;
            }
            diags.push(
                Diagnostic::warning(
                    Code::UnlinkedRuntime,
                    format!(
                        "profile `{}` does not enable `{id}`, so forcing it on `{}` leaves binary {} without the {} runtime: it fails to link (undefined `__asan_*`-style symbols) once it calls code compiled in that crate",
                        profile.name,
                        r.key,
                        broken.join(", "),
                        id.get().title
                    ),
                )
                .at(at.cloned().unwrap_or_else(|| r.entry.location.clone()))
                .hint(format!(
                    "add `\"{id}\"` to `enable` of profile `{}` (at {}), or also force it on the crate that links the binary",
                    profile.name, profile.location
                )),
            );
        }
    }
    diags
}
