//! The effective snapshot: the memory of the last generation, one type from computing to
//! validating. For every object and directory the policy names, each mechanism whose effective
//! state differs from the kernel default (as Kbuild computes it from the generated lines), or
//! that the policy sets; rendered as a committed plain-text file beside the policy, one line per
//! object × mechanism, so that a PR diff shows effects.
//!
//! It is also the base of every "which side moved" decision (drift, `sync`, the hook), so it is
//! bound to the tree it was written for and sealed with a checksum of its text: a snapshot for
//! another tree (or written without one, like the bundled fragments' snapshot) is no base, and a
//! truncated or hand-edited one is an error, never a silent base.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::diagnostic::{Code, Diagnostic, Location};
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

/// The tree a snapshot was written for. Only a snapshot written for the tree at hand is the
/// last generated state there; one written for another tree, or for none, says nothing of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// Written without a tree (fragments, the bundled `policy/linux.effective.txt`): never a base.
    None,
    /// The policy lies inside the tree, at this path relative to the tree's top: a clone or a
    /// moved tree keeps its base.
    PolicyAt(String),
    /// The policy lies outside the tree: the tree's path relative to the policy's directory
    /// (`linux`, `../linux`), so a clone of a repository holding both keeps its base.
    TreeAt(String),
    /// Written by an older sanpolicy: the tree's canonical path (read, never written).
    Tree(String),
}

const BINDING_PREFIX: &str = "# for-tree: ";
const CHECKSUM_PREFIX: &str = "# checksum: ";

impl Binding {
    /// The binding of a run with the policy at `policy_path` on `tree` (none without a tree).
    /// A path that is not UTF-8 cannot be recorded exactly: such a run binds to nothing, so its
    /// snapshot is never taken for another tree's.
    pub fn of(policy_path: &Path, tree: Option<&Path>) -> Binding {
        let Some(root) = tree.and_then(|t| t.canonicalize().ok()) else { return Binding::None };
        let policy = canonical_file(policy_path);
        match policy.as_deref().and_then(|p| p.strip_prefix(&root).ok()) {
            Some(rel) => rel.to_str().map_or(Binding::None, |r| Binding::PolicyAt(r.to_string())),
            None => policy
                .as_deref()
                .and_then(Path::parent)
                .and_then(|dir| relative(dir, &root))
                .and_then(|rel| rel.to_str().map(|r| Binding::TreeAt(r.to_string())))
                .unwrap_or(Binding::None),
        }
    }

    fn render(&self) -> String {
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
        match self {
            Binding::None => "none".to_string(),
            Binding::PolicyAt(rel) => format!("policy-at {}", quote(rel)),
            Binding::TreeAt(rel) => format!("tree-at {}", quote(rel)),
            Binding::Tree(path) => format!("tree {}", quote(path)),
        }
    }

    fn parse(text: &str) -> Option<Binding> {
        let unquote = |s: &str| serde_json::from_str::<String>(s).ok();
        match text.split_once(' ') {
            None if text == "none" => Some(Binding::None),
            Some(("policy-at", rel)) => unquote(rel).map(Binding::PolicyAt),
            Some(("tree-at", rel)) => unquote(rel).map(Binding::TreeAt),
            Some(("tree", path)) => unquote(path).map(Binding::Tree),
            _ => None,
        }
    }
}

/// `to` relative to the directory `from` (both canonical): `..` for each of `from`'s components
/// past their common prefix, then the rest of `to`.
fn relative(from: &Path, to: &Path) -> Option<PathBuf> {
    let (from, to): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    if common == 0 {
        return None;
    }
    let mut rel: PathBuf = from[common..].iter().map(|_| std::path::Component::ParentDir).collect();
    rel.extend(&to[common..]);
    Some(if rel.as_os_str().is_empty() { PathBuf::from(".") } else { rel })
}

/// `path` with its directory resolved (the file itself may not exist yet: import writes it).
fn canonical_file(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.canonicalize().ok()?,
        _ => std::env::current_dir().ok()?,
    };
    Some(parent.join(path.file_name()?))
}

/// A snapshot: for whom it was written, and each `(path, mechanism)` pair's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub binding: Binding,
    states: BTreeMap<(String, MechId), String>,
}

impl Snapshot {
    /// What `policy` generates, for the run bound as `binding`: computed by planning alone
    /// (`generate`), so every command reads one memory.
    pub(in crate::generate) fn compute(policy: &Policy, rules: &Rules, binding: Binding) -> Snapshot {
        Snapshot::of(policy, &compute(policy, rules), binding)
    }

    /// The snapshot of an effective state already computed. A flag removal with flags of its
    /// own (`CFLAGS_REMOVE_head64.o = -pg`) records them after the state: a policy that changes
    /// only the flags has moved, and the next run must tell that from a hand edit of the line.
    pub fn of(policy: &Policy, effective: &Effective, binding: Binding) -> Snapshot {
        let flags = |u: Option<usize>, id: MechId| {
            let unit = policy.units.get(u?)?;
            unit.settings.contains_key(&id).then(|| unit.flags.get(&id)).flatten()
        };
        let states = effective
            .iter()
            .map(|((path, id), entry)| {
                let mut state = entry.state.label();
                if let Some(f) = flags(entry.unit, *id) {
                    state = format!("{state} [{}]", f.split_whitespace().collect::<Vec<_>>().join(" "));
                }
                ((path.clone(), *id), state)
            })
            .collect();
        Snapshot { binding, states }
    }

    /// The file's text: a header naming the policy (by its file name: the snapshot sits beside
    /// it) and the one command that regenerates it, so it reads the same whichever front end
    /// and directory wrote it; the binding and the checksum; then `path  mechanism  state`
    /// lines, sorted.
    pub fn render(&self, policy_path: &Path) -> String {
        let name = policy_path
            .file_name()
            .map_or_else(|| policy_path.display().to_string(), |n| n.to_string_lossy().into_owned());
        let mut out = HEADER.replace("{policy}", &name).replace("{command}", crate::emit::REGENERATE);
        out.push_str(&format!("{BINDING_PREFIX}{}\n", self.binding.render()));
        let width = self.states.keys().map(|(p, _)| p.len()).max().unwrap_or(0);
        let mut body = String::new();
        for ((path, mech), state) in &self.states {
            body.push_str(&format!("{path:<width$}  {:<18} {state}\n", mech.get().name));
        }
        let sum = emit::checksum(&format!("{out}{body}"));
        out.push_str(&format!("{CHECKSUM_PREFIX}{sum}\n"));
        out.push_str(&body);
        out
    }

    /// Read a snapshot's text back, validated: its binding, its checksum over everything but the
    /// checksum line, and every line's shape (a known mechanism, a state). A snapshot that fails
    /// is an error at `path`, never a silent base.
    pub fn parse(path: &Path, text: &str) -> Result<Snapshot, Box<Diagnostic>> {
        let bad = |line: usize, what: String| {
            Box::new(
                Diagnostic::error(Code::BadSnapshot, format!("the effective snapshot {what}"))
                    .at(Location::at_line(path, text, line))
                    .hint(regenerate_hint(path)),
            )
        };
        let mut binding = None;
        let mut sum = None;
        let mut sealed = String::with_capacity(text.len());
        let mut states = BTreeMap::new();
        for (i, line) in text.split_inclusive('\n').enumerate() {
            let n = i + 1;
            if !line.ends_with('\n') {
                return Err(bad(n, "ends in the middle of a line (truncated?)".into()));
            }
            let content = &line[..line.len() - 1];
            if let Some(rest) = content.strip_prefix(CHECKSUM_PREFIX) {
                if sum.replace((rest.to_string(), n)).is_some() {
                    return Err(bad(n, "has two checksum lines".into()));
                }
                continue;
            }
            sealed.push_str(line);
            if let Some(rest) = content.strip_prefix(BINDING_PREFIX) {
                let parsed = Binding::parse(rest)
                    .ok_or_else(|| bad(n, "names its tree in a form sanpolicy never writes".into()))?;
                if binding.replace(parsed).is_some() {
                    return Err(bad(n, "has two `for-tree` lines".into()));
                }
                continue;
            }
            if content.starts_with('#') {
                if binding.is_some() || sum.is_some() {
                    return Err(bad(n, "has a comment line among its entries".into()));
                }
                continue;
            }
            let words: Vec<&str> = content.split_whitespace().collect();
            let (Some(path), Some(mech), state) =
                (words.first(), words.get(1), words.get(2..).unwrap_or(&[]).join(" "))
            else {
                return Err(bad(n, "has a line that is not `path  mechanism  state`".into()));
            };
            let (Some(id), false) = (MechId::by_name(mech), state.is_empty()) else {
                return Err(bad(n, "has a line that is not `path  mechanism  state`".into()));
            };
            if states.insert((path.to_string(), id), state).is_some() {
                return Err(bad(n, format!("lists `{path}` `{mech}` twice")));
            }
        }
        let Some(binding) = binding else {
            return Err(bad(1, "has no `for-tree` line (written by an older sanpolicy, or edited by hand)".into()));
        };
        let Some((sum, line)) = sum else {
            return Err(bad(1, "has no checksum line (written by an older sanpolicy, or edited by hand)".into()));
        };
        if emit::checksum(&sealed) != sum {
            return Err(bad(line, "does not match its checksum: it was edited by hand or cut short".into()));
        }
        Ok(Snapshot { binding, states })
    }

    /// This snapshot as the last generated state of a run bound as `binding`: known only when
    /// it was written for that very tree.
    pub fn base_for(self, binding: &Binding) -> Base {
        if self.binding == Binding::None || &self.binding != binding {
            return Base::default();
        }
        Base { keys: self.states.keys().cloned().collect(), states: self.states, known: true }
    }

    /// This snapshot with `keys` as `base` has them (or without them, where `base` lacks them):
    /// what `sync` records where the policy is still ahead of the tree.
    pub fn keeping(mut self, base: &Base, keys: &[(String, MechId)]) -> Snapshot {
        for (path, id) in keys {
            let key = (path.clone(), *id);
            match base.states.get(&key) {
                Some(state) => self.states.insert(key, state.clone()),
                None => self.states.remove(&key),
            };
        }
        self
    }

    /// This snapshot as what the policy says now (whoever it was written for).
    pub fn as_now(&self) -> Base {
        Base { keys: self.states.keys().cloned().collect(), states: self.states.clone(), known: true }
    }
}

/// Where the snapshot of `policy_path` lives: beside it, `<stem>.effective.txt`.
pub fn snapshot_path(policy_path: &Path) -> PathBuf {
    let stem = policy_path.file_stem().and_then(|s| s.to_str()).unwrap_or("policy");
    policy_path.with_file_name(format!("{stem}.effective.txt"))
}

/// The last generated state for a run bound as `binding`, from the snapshot beside the policy
/// at `policy_path`: unknown (a first application) when there is none or it was written for
/// another tree; an error when it cannot be read or fails validation.
pub fn read_base(policy_path: &Path, binding: &Binding) -> Result<Base, Box<Diagnostic>> {
    let path = snapshot_path(policy_path);
    let bytes = match crate::input::read(&path, crate::input::POLICY_LIMIT) {
        Ok(b) => b,
        Err(e) if e.is_missing() => return Ok(Base::default()),
        Err(e) => {
            return Err(Box::new(
                Diagnostic::error(
                    Code::BadSnapshot,
                    format!("cannot read the effective snapshot `{}`: it {e}", path.display()),
                )
                .at(Location::file(&path))
                .hint(regenerate_hint(&path)),
            ))
        }
    };
    base_from_bytes(&path, bytes, binding)
}

/// How to get a valid snapshot back. Deleting it makes the next run a first application, which
/// never deletes a tree line the policy lacks, so no help here loses anyone's line.
fn regenerate_hint(path: &Path) -> crate::diagnostic::Hint {
    use crate::diagnostic::Fix;
    let shown = path.display().to_string();
    crate::hint![
        "the snapshot is generated: restore it from git (",
        Fix::git(&["checkout", "--", &shown]),
        "), or remove it (",
        Fix::Run(vec!["rm".into(), "-f".into(), shown.clone()]),
        ") and run ",
        Fix::GenMakefiles,
        ", which writes it anew (the policy's lines are written; a tree line the policy lacks is refused, not deleted)"
    ]
}

/// [`read_base`] on a snapshot's bytes (read from git by the hook).
pub fn base_from_bytes(path: &Path, bytes: Vec<u8>, binding: &Binding) -> Result<Base, Box<Diagnostic>> {
    let text = String::from_utf8(bytes).map_err(|e| {
        Box::new(
            Diagnostic::error(Code::BadSnapshot, "the effective snapshot is not UTF-8")
                .at(Location::invalid_utf8(path, e.as_bytes(), e.utf8_error()))
                .hint(regenerate_hint(path)),
        )
    })?;
    // Checked out with `core.autocrlf` it has CRLF line endings: the same snapshot.
    Ok(Snapshot::parse(path, &normalized(text))?.base_for(binding))
}

/// The snapshot file's planned state for `policy` at `path`, bound as `binding`.
pub fn snapshot_change(snapshot: &Snapshot, path: &Path, policy_path: &Path) -> crate::output::Change {
    let new = snapshot.render(policy_path);
    // A snapshot that differs only by CRLF line endings (git's `core.autocrlf`) is up to date:
    // git stores it as written.
    let old = crate::input::read_to_string(path, crate::input::POLICY_LIMIT).ok().map(|old| {
        if old.contains('\r') && normalized(old.clone()) == new {
            new.clone()
        } else {
            old
        }
    });
    crate::output::Change { display: path.display().to_string(), old, new: Some(new), path: path.to_path_buf() }
}

/// `text` with CRLF line endings made LF.
fn normalized(text: String) -> String {
    if text.contains("\r\n") {
        text.replace("\r\n", "\n")
    } else {
        text
    }
}

/// The last generated state: `(path, mechanism)` pairs of a validated snapshot written for the
/// tree at hand (see [`Snapshot::base_for`]); empty and not `known` on a first application.
#[derive(Debug, Clone, Default)]
pub struct Base {
    keys: BTreeSet<(String, MechId)>,
    states: BTreeMap<(String, MechId), String>,
    /// There was a snapshot of this tree to compare with.
    pub known: bool,
}

impl Base {
    /// The kbuild directories the last generation wrote lines in (an object's, or a
    /// directory's own: `lib/b.o` and `lib/` both name `lib`).
    pub fn directories(&self) -> BTreeSet<String> {
        self.keys.iter().map(|(p, _)| p.rsplit_once('/').map_or("", |(d, _)| d).to_string()).collect()
    }

    /// The state recorded for `path` and `mech`.
    pub fn state(&self, path: &str, mech: MechId) -> Option<&str> {
        self.states.get(&(path.to_string(), mech)).map(String::as_str)
    }

    /// Whether the last generation had `path` set for `mech` under conditions naming each of
    /// `symbols` (a line's whole identity: object, mechanism, conditions). The memory records
    /// a state with the symbols it depends on (`on iff not CONFIG_X`): a line under a symbol
    /// the recorded state never names was not the last generation's.
    ///
    /// `decides` is the state a line gives on its own (on or off) when make reads only it
    /// (the variable's last line, plain and unconditional): had the last generation written
    /// it, the memory would record just that state, so another state (a conditional one, made
    /// by an `ifdef`/`else` pair, or the opposite value) means the tree set the line since.
    pub fn had(&self, path: &str, mech: MechId, symbols: &[String], decides: Option<State>) -> bool {
        if !self.has(path, mech) {
            return false;
        }
        let Some(state) = self.state(path, mech) else { return symbols.is_empty() };
        if decides.is_some_and(|says| state != says.label()) {
            return false;
        }
        let words: BTreeSet<&str> = state.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
        symbols.iter().all(|s| words.contains(s.as_str()))
    }

    /// Whether the last generation had `path` (which may hold `$(VAR)` parts) set for `mech`.
    pub fn has(&self, path: &str, mech: MechId) -> bool {
        if !path.contains("$(") {
            return self.keys.contains(&(path.to_string(), mech));
        }
        self.keys.iter().any(|(p, m)| *m == mech && matches_pattern(path, p))
    }
}

/// `pattern` with each `$(…)` standing for any text.
fn matches_pattern(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern
        .split("$(")
        .enumerate()
        .map(|(i, p)| if i == 0 { p } else { p.split_once(')').map_or("", |(_, rest)| rest) })
        .collect();
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else { return false };
            rest = r;
        } else if i + 1 == parts.len() {
            return rest.ends_with(part);
        } else {
            let Some(at) = rest.find(part) else { return false };
            rest = &rest[at + part.len()..];
        }
    }
    rest.is_empty() || parts.len() > 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(binding: Binding) -> Snapshot {
        let mut states = BTreeMap::new();
        states.insert(("mm/slub.o".to_string(), MechId::by_name("kasan").unwrap()), "off".to_string());
        states.insert(("kernel/kcov.o".to_string(), MechId::by_name("kcov").unwrap()), "off".to_string());
        Snapshot { binding, states }
    }

    #[test]
    fn patterns_stand_for_expanded_names() {
        assert!(matches_pattern("arch/x86/kernel/head$(BITS).o", "arch/x86/kernel/head64.o"));
        assert!(!matches_pattern("arch/x86/kernel/head$(BITS).o", "arch/x86/kernel/dumpstack_64.o"));
    }

    #[test]
    fn a_rendered_snapshot_reads_back_as_itself() {
        for binding in [
            Binding::None,
            Binding::PolicyAt("sanitizer-policy.toml".into()),
            Binding::TreeAt("../a b".into()),
            Binding::Tree("/a b/\"x\"\n".into()),
        ] {
            let s = snapshot(binding);
            let text = s.render(Path::new("p/sanitizer-policy.toml"));
            assert_eq!(Snapshot::parse(Path::new("s"), &text).unwrap(), s, "{text}");
        }
    }

    #[test]
    fn a_snapshot_is_a_base_only_for_its_own_tree() {
        let here = Binding::PolicyAt("sanitizer-policy.toml".into());
        assert!(snapshot(here.clone()).base_for(&here).has("mm/slub.o", MechId::by_name("kasan").unwrap()));
        assert!(!snapshot(here.clone()).base_for(&Binding::PolicyAt("other.toml".into())).known);
        assert!(!snapshot(Binding::Tree("/t".into())).base_for(&Binding::Tree("/u".into())).known);
        assert!(!snapshot(Binding::TreeAt("linux".into())).base_for(&Binding::TreeAt("../linux".into())).known);
        assert_eq!(relative(Path::new("/r"), Path::new("/r/linux")), Some(PathBuf::from("linux")));
        assert_eq!(relative(Path::new("/r/p"), Path::new("/r/linux")), Some(PathBuf::from("../linux")));
        // Written without a tree: never a base, not even for a run without one.
        assert!(!snapshot(Binding::None).base_for(&Binding::None).known);
    }

    #[test]
    fn truncated_or_edited_snapshots_are_refused() {
        let text = snapshot(Binding::PolicyAt("p.toml".into())).render(Path::new("p.toml"));
        let path = Path::new("p.effective.txt");
        let cut = &text[..text.len() - 1];
        assert!(Snapshot::parse(path, cut).unwrap_err().message.contains("truncated"));
        let last_line_gone = &text[..text.trim_end().rfind('\n').unwrap() + 1];
        assert!(Snapshot::parse(path, last_line_gone).unwrap_err().message.contains("checksum"));
        let edited = text.replace("kcov               off", "kcov               on");
        assert_ne!(edited, text);
        assert!(Snapshot::parse(path, &edited).unwrap_err().message.contains("checksum"));
        let rebound = text.replace("p.toml\"", "q.toml\"");
        assert!(Snapshot::parse(path, &rebound).unwrap_err().message.contains("checksum"));
        let old_format: String = text
            .lines()
            .filter(|l| !l.starts_with("# for-tree") && !l.starts_with("# checksum"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(Snapshot::parse(path, &old_format).unwrap_err().message.contains("for-tree"));
        let e = Snapshot::parse(path, "# x\n# for-tree: none\n# checksum: 0\nmm/slub.o kasn off\n").unwrap_err();
        assert_eq!(e.code, Code::BadSnapshot);
    }
}
