//! `sync`: take the tree's directives back into the policy after a merge or a hand edit.
//!
//! The tree's lines and the policy's units are compared three ways with the last generated
//! state (the effective snapshot): a line the tree gained (a merge, a hand edit) becomes a unit
//! with its comment paragraph as the reason; a line the tree lost drops its unit's setting; a
//! value the tree changed updates the unit. Where the *policy* moved instead (a unit added or
//! dropped but not generated yet), sync leaves that key alone and lists it as pending:
//! `gen-makefiles` is what moves the tree there, and the snapshot sync writes keeps the last
//! generation's state for it, so the next `gen-makefiles` still sees the policy as ahead. The
//! tree's independent lines are taken all the same: no help line sends `sync` and
//! `gen-makefiles` to each other. Without a snapshot of this tree (a first application) the
//! tree's lines the policy lacks are taken and the policy's own lines are pending.
//! The policy file is edited with toml_edit, so reasons, links, comments and the order of
//! untouched units stay as they are. No kbuild file is changed.

use std::collections::{BTreeMap, HashMap};

use toml_edit::{Array, ArrayOfTables, DocumentMut, Item, Table, Value};

use super::scan::Scan;
use super::ImportedUnit;
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::generate::snapshot::Base;
use crate::kbuild::configs::State;
use crate::makefile::{when_keys, CondKey};
use crate::mechanism::{Form, MechId};
use crate::policy::{expand_variants, Policy, Setting};

/// What one line or unit setting says: skip/force and the exact value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Said {
    setting: Setting,
    flags: Option<String>,
}

/// `(directory, object, conditions, mechanism)`: what a line and a unit setting are matched by
/// (conditions by key: one condition spelled two ways is one condition).
pub type Key = (String, Option<String>, Vec<CondKey>, MechId);

/// The outcome: the policy's new text and what changed, for the summary.
#[derive(Debug, Default)]
pub struct Synced {
    pub text: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    /// Where the policy is ahead of the tree (notes, each at its unit): `gen-makefiles` writes them.
    pub pending: Diagnostics,
    /// The `(path, mechanism)` pairs of those keys, every spelling: the snapshot sync writes
    /// keeps the last generation's state for them.
    pub pending_keys: Vec<(String, MechId)>,
    /// Units whose object the tree renamed (`old -> new`): their `path` is edited in place.
    pub renamed: Vec<String>,
    /// Every skip↔force flip taken from the tree: the unit, where it is, and the reason it
    /// kept, which was written for the other value.
    pub flipped: Vec<Flip>,
}

/// A value sync turned around: the reviewer must rewrite a reason that now says the opposite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flip {
    pub unit: String,
    pub mechanism: MechId,
    pub from: Setting,
    pub to: Setting,
    /// `file:line:col` of the unit in the policy.
    pub at: String,
    pub old_reason: String,
}

impl Synced {
    pub fn is_noop(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty() && self.renamed.is_empty()
    }
}

fn unit_path(dir: &str, object: Option<&str>) -> String {
    match object {
        Some(o) => format!("{dir}/{o}"),
        None => format!("{dir}/"),
    }
}

fn said_of(id: MechId, setting: Setting, flags: Option<&String>) -> Said {
    let own = match id.get().form {
        Form::FlagRemoval { flags, .. } => Some(flags),
        Form::Variable { .. } => None,
    };
    Said { setting, flags: flags.filter(|f| Some(f.as_str()) != own).cloned() }
}

/// The tree's side: every modelled line, by key, with the imported unit it belongs to. Later
/// units win over earlier ones for the same key, as the central file's lines (read after the
/// directory's own, see [`sync`]) win in Kbuild. The first `own` units are the directories'
/// own lines; those the central file resets (`reset`) are not what Kbuild reads.
fn tree_side(units: &[ImportedUnit], own: usize, reset: &[Key]) -> BTreeMap<Key, (Said, usize)> {
    let mut out = BTreeMap::new();
    for (i, u) in units.iter().enumerate() {
        for (id, setting) in &u.settings {
            let key = (u.dir.clone(), u.object.clone(), when_keys(&u.when), *id);
            if i < own && reset.contains(&key) {
                continue;
            }
            out.insert(key, (said_of(*id, *setting, u.flags.get(id)), i));
        }
    }
    out
}

/// The policy's side, by key, with the unit's index.
fn policy_side(policy: &Policy) -> BTreeMap<Key, (Said, usize)> {
    let mut out = BTreeMap::new();
    for (i, u) in policy.units.iter().enumerate() {
        for (id, setting) in &u.settings {
            let key = (u.path.kbuild_dir.clone(), u.path.object.clone(), u.conditions.clone(), *id);
            out.insert(key, (said_of(*id, *setting, u.flags.get(id)), i));
        }
    }
    out
}

/// Whether the last generation had this key (any spelling of `$(VAR)` names).
fn in_base(base: &Base, key: &Key, vars: &BTreeMap<String, Vec<String>>, decides: Option<State>) -> bool {
    let path = unit_path(&key.0, key.1.as_deref());
    // By the line's whole identity: a line a merge wrapped in a condition the memory's state
    // never names is the tree's, not the last generation's.
    let symbols: Vec<String> = key.2.iter().flat_map(CondKey::symbols).collect();
    expand_variants(&path, vars).iter().any(|p| base.had(p, key.3, &symbols, decides.clone()))
        || base.had(&path, key.3, &symbols, decides)
}

/// The state an unconditional tree line gives on its own when it is its object's only line
/// make reads for the mechanism (earlier lines it overrides are not in `tree`): what the memory
/// records if the last generation wrote it ([`Base::had`]).
fn decides<V>(key: &Key, said: &Said, tree: &BTreeMap<Key, V>) -> Option<State> {
    let alone = !tree.keys().any(|k| k != key && (&k.0, &k.1, k.3) == (&key.0, &key.1, key.3));
    (key.2.is_empty() && said.flags.is_none() && alone).then_some(match said.setting {
        Setting::Skip => State::Off,
        Setting::Force => State::On,
    })
}

/// Whether the policy's state for the key's object and mechanism differs from the last
/// generation's (a line for an object and mechanism the policy still sets just as before,
/// under other conditions, is the tree's).
fn policy_moved(base: &Base, now: &Base, key: &Key, vars: &BTreeMap<String, Vec<String>>) -> bool {
    let path = unit_path(&key.0, key.1.as_deref());
    let mut variants = expand_variants(&path, vars);
    variants.push(path);
    variants.iter().any(|p| base.has(p, key.3) != now.has(p, key.3) || base.state(p, key.3) != now.state(p, key.3))
}

/// Plan the policy edit. `text` is the main policy file's text; units in included files are
/// never edited (an update they need is refused, naming them).
/// `central` holds the units of the central layout's file as it stands in the tree
/// ([`super::central_units`]; empty in the other layouts): Kbuild reads a directory's section
/// after the directory's own lines, so for the same variable the section's line is what the
/// tree says (a hand edit there is taken back like one in a block), and a directory's line the
/// section does not set (a merge brought it) is taken as in the in-place layout.
/// `reset` holds the directory lines the central file resets ([`super::central_resets`]):
/// Kbuild reads them as never set, so the tree does not have them (the policy dropped them).
/// `base` is the last generated state, `now` the policy's state as it stands (its snapshot
/// computed afresh): a value both sides changed cannot be taken from the tree. `history` says
/// whether the tree's history ever had a key's line (true where there is no history to ask).
#[allow(clippy::too_many_arguments)]
pub fn sync(
    policy: &Policy,
    text: &str,
    scan: &Scan,
    central: &[ImportedUnit],
    reset: &[Key],
    base: &Base,
    now: &Base,
    history: &dyn Fn(&Key) -> bool,
) -> Result<Synced, Diagnostics> {
    let units: Vec<ImportedUnit> = scan.units.iter().chain(central).cloned().collect();
    let units = units.as_slice();
    let tree = tree_side(units, scan.units.len(), reset);
    let ours = policy_side(policy);
    let main = policy.files.first().map(|(p, _)| p.clone()).unwrap_or_default();
    let mut ahead = Diagnostics::default();
    let mut pending = Diagnostics::default();
    let mut pending_keys = Vec::new();
    let mut add: Vec<(Key, Said, usize)> = Vec::new();
    let mut drop: Vec<(Key, usize)> = Vec::new();
    let mut change: Vec<(Key, Said, usize, Setting)> = Vec::new();
    let mut refuse = |key: &Key, unit: Option<usize>, message: String| {
        let mut d = Diagnostic::note(Code::Drift, message).hint(crate::hint![
            "the policy is ahead of the tree here: ",
            crate::diagnostic::Fix::GenMakefiles,
            " writes it"
        ]);
        let vars = unit.map(|u| policy.units[u].vars.clone()).unwrap_or_default();
        if let Some(u) = unit {
            d = d.at(policy.units[u].location.clone());
        }
        let path = unit_path(&key.0, key.1.as_deref());
        pending_keys.extend(expand_variants(&path, &vars).into_iter().map(|p| (p, key.3)));
        pending_keys.push((path, key.3));
        pending.push(d.fixed_by(crate::diagnostic::Fix::GenMakefiles));
    };
    for (key, (said, t)) in &tree {
        match ours.get(key) {
            // The tree has a line the policy lacks: new to the tree, unless the policy dropped it
            // since the last generation (then `gen-makefiles` is what moves the tree).
            None if !base.known
                || !in_base(base, key, &units[*t].vars, decides(key, said, &tree))
                || !policy_moved(base, now, key, &units[*t].vars) =>
            {
                add.push((key.clone(), said.clone(), *t))
            }
            None => refuse(
                key,
                None,
                format!(
                    "the policy dropped `{}` `{}`, which the tree still has",
                    unit_path(&key.0, key.1.as_deref()),
                    key.3
                ),
            ),
            Some((mine, u)) if mine != said => {
                let path = unit_path(&key.0, key.1.as_deref());
                let variants = expand_variants(&path, &policy.units[*u].vars);
                let policy_moved = variants.iter().any(|p| base.state(p, key.3) != now.state(p, key.3));
                if base.known && !policy_moved {
                    change.push((key.clone(), said.clone(), *u, mine.setting));
                } else {
                    refuse(key, Some(*u), format!("the policy changed `{path}` `{}` since the last generation", key.3));
                }
            }
            Some(_) => {}
        }
    }
    for (key, (_, u)) in &ours {
        if tree.contains_key(key) {
            continue;
        }
        // The last generation wrote it and the tree lost it, if the tree's history ever had it:
        // a snapshot copied with its policy from another tree claims lines this one never had.
        // The memory may record the unit's state without its condition (a forced `ifndef` line reads
        // `on` whatever the symbol): a policy that kept the state since then had the line written.
        let written = in_base(base, key, &policy.units[*u].vars, None)
            || !policy_moved(base, now, key, &policy.units[*u].vars)
                && base.has(&unit_path(&key.0, key.1.as_deref()), key.3);
        if written && base.known && history(key) {
            drop.push((key.clone(), *u));
        } else {
            refuse(
                key,
                Some(*u),
                format!(
                    "`{}` `{}` is in the policy but not written to the tree yet",
                    policy.units[*u].path.text, key.3
                ),
            );
        }
    }
    for u in drop.iter().map(|(_, u)| *u).chain(change.iter().map(|(_, _, u, _)| *u)) {
        if policy.units[u].location.path != main {
            ahead.push(
                Diagnostic::error(
                    Code::Unsupported,
                    format!("`{}` lives in an included file", policy.units[u].path.text),
                )
                .at(policy.units[u].location.clone())
                .hint("sync edits the main policy file only: move the unit into it, or edit the include by hand"),
            );
        }
    }
    if ahead.has_errors() {
        return Err(ahead);
    }
    let mut synced = edit(policy, text, units, &add, &drop, &change)?;
    synced.pending = pending;
    synced.pending_keys = pending_keys;
    Ok(synced)
}

/// For each policy unit, the first imported unit (tree order: file, then line) that holds one
/// of its lines; `None` for a unit the tree has no line of.
fn tree_order(policy: &Policy, units: &[ImportedUnit]) -> Vec<Option<usize>> {
    // Indexed by directory and object, in tree order: one lookup per policy unit, not a walk
    // over every imported unit (a directory of 100,000 units).
    let mut by_object: HashMap<(&str, Option<&str>), Vec<usize>> = HashMap::new();
    for (i, t) in units.iter().enumerate() {
        by_object.entry((t.dir.as_str(), t.object.as_deref())).or_default().push(i);
    }
    policy
        .units
        .iter()
        .map(|u| {
            let candidates = by_object.get(&(u.path.kbuild_dir.as_str(), u.path.object.as_deref()))?;
            candidates.iter().copied().find(|&i| {
                let t = &units[i];
                when_keys(&t.when) == u.conditions && t.settings.keys().any(|id| u.settings.contains_key(id))
            })
        })
        .collect()
}

/// Where a new unit for the tree's unit `t` of `dir` goes among the directory's policy units
/// (`Some(after)`; `after` is `None` before every unit): after the last one whose line the
/// tree has before `t`'s (or in `t`'s own paragraph), else before the first one whose line comes after it, else after the
/// directory's last unit. `None` when the policy has no unit of `dir`.
fn place_in_dir(policy: &Policy, order: &[Option<usize>], dir: &str, t: usize) -> Option<Option<usize>> {
    let of_dir: Vec<usize> = (0..policy.units.len()).filter(|&u| policy.units[u].path.kbuild_dir == dir).collect();
    let last = *of_dir.last()?;
    // `p == t`: a unit of the same object whose line the new one's paragraph shares.
    let before = of_dir.iter().filter(|&&u| order[u].is_some_and(|p| p <= t)).max_by_key(|&&u| (order[u], u));
    if let Some(&u) = before {
        return Some(Some(u));
    }
    let first_after = of_dir.iter().find(|&&u| order[u].is_some_and(|p| p > t));
    Some(match first_after {
        Some(&u) => u.checked_sub(1),
        None => Some(last),
    })
}

/// Renames: a policy unit all of whose lines the tree lost, and a new line of the same
/// directory, conditions and reason that says the same for the same mechanisms under another
/// object name (upstream renamed the file). Each is `(unit, imported unit)`.
fn renames(
    policy: &Policy,
    units: &[ImportedUnit],
    add: &[(Key, Said, usize)],
    drop: &[(Key, usize)],
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let dropped_units: std::collections::BTreeSet<usize> = drop.iter().map(|(_, u)| *u).collect();
    for u in dropped_units {
        let unit = &policy.units[u];
        let lost: Vec<&Key> = drop.iter().filter(|(_, d)| *d == u).map(|(k, _)| k).collect();
        if unit.path.object.is_none() || unit.path.text.contains('$') || lost.len() != unit.settings.len() {
            continue;
        }
        let candidates: std::collections::BTreeSet<usize> = add
            .iter()
            .filter(|(k, _, t)| {
                k.0 == unit.path.kbuild_dir
                    && k.1.is_some()
                    && k.1 != unit.path.object
                    && k.2 == unit.conditions
                    && units[*t].why() == unit.why
                    && !out.iter().any(|(_, taken)| taken == t)
            })
            .map(|(_, _, t)| *t)
            .collect();
        let fits = |t: usize| {
            let theirs: Vec<(&MechId, &Setting)> = units[t].settings.iter().collect();
            theirs.len() == lost.len()
                && theirs.iter().all(|(id, setting)| {
                    unit.settings.get(id) == Some(setting) && unit.flags.get(id) == units[t].flags.get(id)
                })
        };
        if let [t] = candidates.into_iter().filter(|t| fits(*t)).collect::<Vec<_>>()[..] {
            out.push((u, t));
        }
    }
    out
}

/// Rewraps: a policy unit all of whose lines the tree lost, and a new line for the same object
/// and mechanisms, saying the same, under other conditions (a merge wrapped the line in an
/// `ifdef`, or unwrapped it). The unit keeps its reason, links and category; its `when`
/// becomes the line's. Each is `(unit, imported unit)`.
fn rewraps(
    policy: &Policy,
    units: &[ImportedUnit],
    add: &[(Key, Said, usize)],
    drop: &[(Key, usize)],
    taken: &[(usize, usize)],
) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let dropped_units: std::collections::BTreeSet<usize> = drop.iter().map(|(_, u)| *u).collect();
    for u in dropped_units.into_iter().filter(|u| !taken.iter().any(|(r, _)| r == u)) {
        let unit = &policy.units[u];
        let lost = drop.iter().filter(|(_, d)| *d == u).count();
        if unit.path.text.contains('$') || lost != unit.settings.len() {
            continue;
        }
        let fits = |t: usize| {
            let theirs = &units[t];
            theirs.settings.len() == lost
                && theirs.settings.iter().all(|(id, setting)| {
                    unit.settings.get(id) == Some(setting) && unit.flags.get(id) == theirs.flags.get(id)
                })
        };
        let candidates: std::collections::BTreeSet<usize> = add
            .iter()
            .filter(|(k, _, t)| {
                k.0 == unit.path.kbuild_dir
                    && k.1 == unit.path.object
                    && k.2 != unit.conditions
                    && !out.iter().chain(taken).any(|(_, other)| other == t)
            })
            .map(|(_, _, t)| *t)
            .collect();
        if let [t] = candidates.into_iter().filter(|t| fits(*t)).collect::<Vec<_>>()[..] {
            out.push((u, t));
        }
    }
    out
}

/// Give the unit table `table` the conditions of the imported unit `from` (as import writes
/// them), keeping everything else it holds.
fn set_when(table: &mut Table, from: &ImportedUnit) {
    let written = new_unit(from);
    match written.get("when") {
        Some(when) => {
            table.insert("when", when.clone());
        }
        None => {
            table.remove("when");
        }
    }
}

fn edit(
    policy: &Policy,
    text: &str,
    units: &[ImportedUnit],
    add: &[(Key, Said, usize)],
    drop: &[(Key, usize)],
    change: &[(Key, Said, usize, Setting)],
) -> Result<Synced, Diagnostics> {
    let renamed = renames(policy, units, add, drop);
    let rewrapped = rewraps(policy, units, add, drop, &renamed);
    let moved = |u: &usize| renamed.iter().chain(&rewrapped).any(|(r, _)| r == u);
    let drop: Vec<(Key, usize)> = drop.iter().filter(|(_, u)| !moved(u)).cloned().collect();
    let add: Vec<(Key, Said, usize)> =
        add.iter().filter(|(_, _, t)| !renamed.iter().chain(&rewrapped).any(|(_, r)| r == t)).cloned().collect();
    let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        Diagnostics(vec![Diagnostic::error(Code::TomlSyntax, format!("cannot edit the policy: {}", e.message()))])
    })?;
    let mut out = Synced::default();
    let mut tables: Vec<Option<Table>> = match doc.remove("unit") {
        Some(Item::ArrayOfTables(aot)) => aot.into_iter().map(Some).collect(),
        // An inline array (`unit = [{ … }, …]`) is valid TOML, but editing it would mean
        // rewriting it whole: refused, the policy byte for byte as it was.
        Some(other) if add.is_empty() && drop.is_empty() && change.is_empty() => {
            doc.insert("unit", other);
            Vec::new()
        }
        Some(_) => {
            let d = Diagnostic::error(
                Code::Unsupported,
                "the policy's units are an inline array (`unit = [...]`), which sync cannot edit in place",
            )
            .hint(crate::hint![
                "write each unit as a `[[unit]]` table (as import writes them), then run ",
                crate::diagnostic::Fix::Sync,
                " again"
            ]);
            let d = match policy.units.first() {
                Some(u) => d.at(u.location.clone()),
                None => d,
            };
            return Err(Diagnostics(vec![d]));
        }
        None => Vec::new(),
    };
    for (u, t) in &renamed {
        let new_path = unit_path(&units[*t].dir, units[*t].object.as_deref());
        if let Some(table) = tables.get_mut(*u).and_then(Option::as_mut) {
            if let Some(Item::Value(v)) = table.get_mut("path") {
                let decor = v.decor().clone();
                *v = Value::from(new_path.as_str());
                *v.decor_mut() = decor;
            }
        }
        out.renamed.push(format!("{} -> {new_path}", policy.units[*u].path.text));
    }
    for (u, t) in &rewrapped {
        if let Some(table) = tables.get_mut(*u).and_then(Option::as_mut) {
            set_when(table, &units[*t]);
        }
        let when = match units[*t].when.as_slice() {
            [] => "no condition".to_string(),
            when => format!("`{}`", when.join("` and `")),
        };
        out.changed.push(format!("{}: now under {when} (the tree moved its line)", policy.units[*u].path.text));
    }
    for (key, said, u, was) in change {
        if let Some(t) = tables.get_mut(*u).and_then(Option::as_mut) {
            set_mechanism(t, key.3, Some(said));
            out.changed.push(format!("{} {}", policy.units[*u].path.text, key.3));
            if *was != said.setting {
                mark_flipped(t, &policy.units[*u].why, key, *was, said.setting);
                out.flipped.push(Flip {
                    unit: policy.units[*u].path.text.clone(),
                    mechanism: key.3,
                    from: *was,
                    to: said.setting,
                    at: policy.units[*u].location.to_string(),
                    old_reason: policy.units[*u].why.clone(),
                });
            }
        }
    }
    for (key, u) in &drop {
        if let Some(t) = tables.get_mut(*u).and_then(Option::as_mut) {
            set_mechanism(t, key.3, None);
            out.removed.push(format!("{} {}", policy.units[*u].path.text, key.3));
        }
    }
    // A unit left with nothing to skip or force goes, with the comment above it.
    for t in tables.iter_mut() {
        if t.as_ref().is_some_and(|t| names(t, "skip").is_empty() && names(t, "force").is_empty()) {
            *t = None;
        }
    }
    // New lines: into the unit for the same object, conditions and reason, else a new unit
    // placed after the last unit of the same directory (so the policy stays grouped as the tree
    // is). A line with another comment (or none) does not join: its unit's reason would be
    // shown for a mechanism it does not explain.
    let order = tree_order(policy, units);
    let mut appended: Vec<(Option<usize>, usize, Table)> = Vec::new();
    let mut fresh: BTreeMap<usize, usize> = BTreeMap::new();
    for (key, said, t) in &add {
        let why = units[*t].why();
        let same = policy.units.iter().position(|u| {
            u.path.kbuild_dir == key.0 && u.path.object == key.1 && u.conditions == key.2 && u.why == why
        });
        out.added.push(format!("{} {}", unit_path(&key.0, key.1.as_deref()), key.3));
        if let Some(Some(table)) = same.and_then(|u| tables.get_mut(u)) {
            set_mechanism(table, key.3, Some(said));
            continue;
        }
        // A new unit is written whole, as import writes it, the first time one of its lines comes.
        if fresh.contains_key(t) {
            continue;
        }
        // Among the directory's units where its line stands in the tree (the policy is in tree
        // order); a directory the policy has no unit of goes where its path sorts among the
        // policy's directories.
        let after = place_in_dir(policy, &order, &key.0, *t)
            .unwrap_or_else(|| policy.units.iter().rposition(|u| dir_order(&u.path.kbuild_dir, &key.0).is_lt()));
        fresh.insert(*t, appended.len());
        // Only the mechanisms the tree gained: a line of the same imported unit the policy
        // already has stays in its own unit (written whole, it would be listed twice).
        let mut gained = units[*t].clone();
        gained.settings.retain(|id, _| add.iter().any(|(k, _, other)| other == t && k.3 == *id));
        gained.flags.retain(|id, _| gained.settings.contains_key(id));
        appended.push((after, *t, new_unit(&gained)));
    }
    // New units of one place keep the tree's order (their lines' order), not the keys'.
    appended.sort_by_key(|(after, t, _)| (*after, *t));
    let mut aot = ArrayOfTables::new();
    let mut pending = appended;
    let first_position = tables.iter().flatten().find_map(Table::position).unwrap_or(0);
    let (before_all, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(after, _, _)| after.is_none());
    for (_, _, mut t) in before_all {
        t.set_position(first_position);
        aot.push(t);
    }
    pending = rest;
    // A new table sorts where its document position says: give it its predecessor's.
    let mut last_position = first_position;
    for (i, t) in tables.into_iter().enumerate() {
        if let Some(t) = t {
            last_position = t.position().unwrap_or(last_position);
            aot.push(t);
        }
        let (here, later): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(after, _, _)| *after == Some(i));
        for (_, _, mut t) in here {
            t.set_position(last_position);
            aot.push(t);
        }
        pending = later;
    }
    for (_, _, mut t) in pending {
        t.set_position(last_position);
        aot.push(t);
    }
    if !aot.is_empty() {
        doc.insert("unit", Item::ArrayOfTables(aot));
    }
    out.text = doc.to_string();
    Ok(out)
}

/// Directories in tree order: by path components, so `kernel/locking` follows `kernel`.
fn dir_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

/// Mark a unit whose value sync turned around: its reason was written for the other value, so
/// it becomes a placeholder (`check` warns, `--strict` refuses, `explain` and `report` show it)
/// that keeps the old words for the person who rewrites it.
fn mark_flipped(t: &mut Table, old: &str, key: &Key, from: Setting, to: Setting) {
    if crate::policy::is_placeholder(old) {
        return;
    }
    let name = |s: Setting| if s == Setting::Skip { "skip" } else { "force" };
    let dir = if key.0.is_empty() { "the top directory" } else { key.0.as_str() };
    let why = format!(
        "{}: the tree ({dir}) turned `{}` from {} to {}; rewrite this reason, written for {}:\n{old}",
        crate::policy::FLIPPED_REASON,
        key.3,
        name(from),
        name(to),
        name(from)
    );
    if let Some(Item::Value(v)) = t.get_mut("why") {
        let decor = v.decor().clone();
        *v = Value::from(why.as_str());
        *v.decor_mut() = decor;
    }
}

/// The mechanism names in `skip` or `force`.
fn names(t: &Table, key: &str) -> Vec<String> {
    t.get(key)
        .and_then(Item::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Put `id` into `skip` or `force` as `said` says (or take it out of both), keeping the
/// arrays' formatting, and its `flags` entry in step.
fn set_mechanism(t: &mut Table, id: MechId, said: Option<&Said>) {
    let name = id.get().name;
    for key in ["skip", "force"] {
        if let Some(a) = t.get_mut(key).and_then(Item::as_array_mut) {
            a.retain(|v| v.as_str() != Some(name));
        }
    }
    let flags_empty = {
        if let Some(f) = t.get_mut("flags").and_then(Item::as_table_like_mut) {
            f.remove(name);
            f.is_empty()
        } else {
            false
        }
    };
    if flags_empty {
        t.remove("flags");
    }
    let Some(said) = said else {
        for key in ["skip", "force"] {
            if t.get(key).and_then(Item::as_array).is_some_and(Array::is_empty) {
                t.remove(key);
            }
        }
        return;
    };
    let key = if said.setting == Setting::Skip { "skip" } else { "force" };
    match t.get_mut(key).and_then(Item::as_array_mut) {
        Some(a) => a.push(name),
        None => {
            let mut a = Array::new();
            a.push(name);
            t.insert(key, Item::Value(Value::Array(a)));
        }
    }
    if let Some(flags) = &said.flags {
        match t.get_mut("flags").and_then(Item::as_inline_table_mut) {
            Some(f) => {
                f.insert(name, flags.as_str().into());
            }
            None => {
                let mut f = toml_edit::InlineTable::new();
                f.insert(name, flags.as_str().into());
                t.insert("flags", Item::Value(Value::InlineTable(f)));
            }
        }
    }
    for key in ["skip", "force"] {
        if t.get(key).and_then(Item::as_array).is_some_and(Array::is_empty) {
            t.remove(key);
        }
    }
}

/// A `[[unit]]` for lines the tree gained, as import writes it.
fn new_unit(unit: &ImportedUnit) -> Table {
    let text = super::policy_toml(std::slice::from_ref(unit), "", crate::policy::Layout::InPlace);
    let doc: DocumentMut = text.parse().expect("import writes valid TOML");
    let mut table =
        doc.get("unit").and_then(Item::as_array_of_tables).and_then(|a| a.get(0)).cloned().unwrap_or_default();
    table.decor_mut().set_prefix("\n");
    table
}
