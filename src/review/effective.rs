//! The effective policy: for every object and directory the policy names, each mechanism whose
//! effective state differs from the kernel default, as Kbuild would compute it. Rendered as a
//! committed plain-text snapshot (one line per object × mechanism) so a PR diff shows effects.

use std::collections::BTreeMap;
use std::path::Path;

use crate::emit;
use crate::kbuild::configs::{self, State};
use crate::kbuild::Rules;
use crate::makefile::{self, KbuildFile};
use crate::mechanism::MechId;
use crate::policy::{Policy, Unit};

const HEADER: &str = include_str!("../../templates/effective-header.txt");

pub use crate::kbuild::ANY_OBJECT;

/// One object (or directory, ending in `/`) and mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub state: State,
    /// The unit whose setting or reason explains the state, if any.
    pub unit: Option<usize>,
    /// Where it was evaluated: directory, object relative to it, variables preset.
    pub at: Site,
}

/// An object as the resolver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub dir: String,
    pub object: String,
    pub preset: Vec<(String, String)>,
}

/// The state of `site` for `id` under `policy` (the generated blocks only).
pub fn state_at(files: &BTreeMap<String, KbuildFile>, rules: &Rules, site: &Site, id: MechId) -> Option<State> {
    let empty = KbuildFile::default();
    let file = files.get(&site.dir).unwrap_or(&empty);
    configs::Prepared::new(file, &site.preset).state(rules, id, &site.object, true)
}

/// Keyed by (path, mechanism); paths of objects with `$(VAR)` are expanded per declared value.
pub type Effective = BTreeMap<(String, MechId), Entry>;

/// The kbuild file each directory of the policy would have on its own: the generated block.
pub fn dir_files(policy: &Policy, rules: &Rules) -> BTreeMap<String, KbuildFile> {
    policy.units_by_dir().into_iter().map(|(dir, units)| (dir.to_string(), dir_file(&units, rules))).collect()
}

/// The kbuild file of one directory's units: their generated block.
pub fn dir_file(units: &[&Unit], rules: &Rules) -> KbuildFile {
    makefile::parse(&emit::render_block(units, rules))
}

/// Every (object or directory) × mechanism whose state differs from the kernel default for it
/// (on, except barrier instrumentation), or that the policy sets.
pub fn compute(policy: &Policy, rules: &Rules) -> Effective {
    compute_in(policy, rules, &dir_files(policy, rules))
}

/// [`compute`] with the directories' kbuild files already built by [`dir_files`].
pub fn compute_in(policy: &Policy, rules: &Rules, files: &BTreeMap<String, KbuildFile>) -> Effective {
    let mut out = Effective::new();
    // Units of one directory share its file: its lines and runs are prepared once per preset.
    let mut prepared: BTreeMap<(&str, configs::Preset), configs::Prepared> = BTreeMap::new();
    let defaults: BTreeMap<MechId, Option<State>> =
        MechId::all().map(|id| (id, configs::state(&KbuildFile::default(), rules, id, ANY_OBJECT, true))).collect();
    let explaining = Explaining::new(policy);
    for (index, unit) in policy.units.iter().enumerate() {
        let Some(file) = files.get(&unit.path.kbuild_dir) else { continue };
        for (shown, site) in variants(unit) {
            let file = prepared
                .entry((unit.path.kbuild_dir.as_str(), site.preset.clone()))
                .or_insert_with(|| configs::Prepared::new(file, &site.preset));
            // One key per spelling, its mechanism changed in place: the lookup clones nothing.
            let mut key = (shown, MechId::all().next().expect("a mechanism"));
            for id in MechId::all() {
                key.1 = id;
                if out.contains_key(&key) {
                    continue;
                }
                // With no line for it in the file, an object has the (default) state.
                if !unit.settings.contains_key(&id) && !file.lines(rules, id).touched {
                    continue;
                }
                let Some(state) = file.state(rules, id, &site.object, true) else { continue };
                if Some(&state) != defaults[&id].as_ref() || unit.settings.contains_key(&id) {
                    let explaining = explaining.unit(unit, id).or(Some(index));
                    out.insert(key.clone(), Entry { state, unit: explaining, at: site.clone() });
                }
            }
        }
    }
    out
}

/// Each spelling of the unit: the path shown and the site evaluated (`head$(BITS).o` becomes
/// `head32.o` with `BITS=32` preset, and so on).
fn variants(unit: &Unit) -> Vec<(String, Site)> {
    let dir = unit.path.kbuild_dir.clone();
    let Some(object) = &unit.path.object else {
        return vec![(unit.path.text.clone(), Site { dir, object: ANY_OBJECT.to_string(), preset: Vec::new() })];
    };
    let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (name, values) in &unit.vars {
        combos = combos
            .into_iter()
            .flat_map(|c| values.iter().map(move |v| [c.clone(), vec![(name.clone(), v.clone())]].concat()))
            .collect();
    }
    combos
        .into_iter()
        .map(|preset| {
            let (text, object) = (configs::substitute(&unit.path.text, &preset), configs::substitute(object, &preset));
            (text, Site { dir: dir.clone(), object, preset })
        })
        .collect()
}

/// [`explaining_unit`] for every unit at once: indexed, so a policy of 100k units is not
/// searched once per unit.
struct Explaining<'a> {
    own: foldhash::HashMap<(&'a crate::policy::UnitPath, MechId), usize>,
    directory: foldhash::HashMap<(&'a str, MechId), usize>,
}

impl<'a> Explaining<'a> {
    fn new(policy: &'a Policy) -> Explaining<'a> {
        let mut own = foldhash::HashMap::default();
        let mut directory = foldhash::HashMap::default();
        for (i, u) in policy.units.iter().enumerate() {
            for id in u.settings.keys() {
                own.entry((&u.path, *id)).or_insert(i);
                if u.path.is_directory() {
                    directory.entry((u.path.kbuild_dir.as_str(), *id)).or_insert(i);
                }
            }
        }
        Explaining { own, directory }
    }

    fn unit(&self, unit: &Unit, id: MechId) -> Option<usize> {
        self.own.get(&(&unit.path, id)).or_else(|| self.directory.get(&(unit.path.kbuild_dir.as_str(), id))).copied()
    }
}

/// The snapshot text: a header, then `path  mechanism  state` lines, sorted. The header names
/// the policy by its file name (the snapshot sits beside it) and the one command that
/// regenerates it, so it reads the same whichever front end, and from whichever directory, wrote it.
pub fn render(effective: &Effective, policy_path: &Path) -> String {
    let name =
        policy_path.file_name().map_or_else(|| policy_path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut out = HEADER.replace("{policy}", &name).replace("{command}", crate::emit::REGENERATE);
    let width = effective.keys().map(|(p, _)| p.len()).max().unwrap_or(0);
    for ((path, id), entry) in effective {
        out.push_str(&format!("{path:<width$}  {:<18} {}\n", id.get().name, entry.state.label()));
    }
    out
}

/// Where the snapshot of `policy_path` lives: beside it, `<stem>.effective.txt`.
pub fn snapshot_path(policy_path: &Path) -> std::path::PathBuf {
    let stem = policy_path.file_stem().and_then(|s| s.to_str()).unwrap_or("policy");
    policy_path.with_file_name(format!("{stem}.effective.txt"))
}

/// The snapshot file's planned state for `policy` at `path` (see [`render`]).
pub fn snapshot_change(policy: &Policy, rules: &Rules, path: &Path, policy_path: &Path) -> crate::output::Change {
    let text = render(&compute(policy, rules), policy_path);
    let display = path.display().to_string();
    crate::output::Change {
        display,
        old: crate::input::read_to_string(path, crate::input::POLICY_LIMIT).ok(),
        new: Some(text),
        path: path.to_path_buf(),
    }
}
