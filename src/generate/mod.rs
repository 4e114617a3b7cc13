//! Planning what `gen-makefiles` writes: the new text of every kbuild file the policy touches
//! (or of every fragment under an output directory), computed and validated before anything is
//! written.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

pub mod snapshot;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::emit::{self, SpliceError};
use crate::kbuild::Rules;
use crate::makefile::{self, kbuild_file, read_kbuild, KbuildFile, BEGIN_MARKER};
use crate::mechanism::MechId;
use crate::output::Change;
use crate::policy::{Layout, Policy, Setting, Unit};

/// The planned new state of one directory's kbuild file.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    pub path: PathBuf,
    pub text: String,
    /// Parsed on first use: writing needs only the text.
    parsed: std::sync::OnceLock<KbuildFile>,
}

impl PlannedFile {
    pub fn new(path: PathBuf, text: String) -> PlannedFile {
        PlannedFile { path, text, parsed: std::sync::OnceLock::new() }
    }

    pub fn parsed(&self) -> &KbuildFile {
        self.parsed.get_or_init(|| makefile::parse(&self.text))
    }

    /// The file with the parse planning already made of it (not parsed again on use).
    fn with_parse(mut self, parsed: KbuildFile) -> PlannedFile {
        self.parsed = std::sync::OnceLock::from(parsed);
        self
    }
}

/// One directory of a plan: its kbuild file before and after, and what the layout does to it.
#[derive(Debug)]
pub struct PlannedDir {
    /// The kbuild file as it would be after writing (central layout: the directory's own file
    /// followed by its section of the central file, which is what Kbuild reads).
    pub file: PlannedFile,
    /// The kbuild file as the plan read it (on disk, or staged), parsed once for every reader
    /// (drift, `check`'s line findings); `None` for a fragment, which is sanpolicy's own file.
    pub before: Option<PlannedFile>,
    /// In-place layout: what reconciling the file with the policy changes, keyed by the lines
    /// they are about (drift is exactly these edits).
    pub edits: Vec<emit::inplace::Edit>,
    /// Central layout: the lines of the directory's own file the policy does not hold, each
    /// with the reset its section writes (or why it cannot).
    pub unheld: Vec<emit::central::Unheld>,
    /// The index in [`Plan::changes`] of this file's change, where writing changes the file.
    pub change: Option<usize>,
}

impl PlannedDir {
    fn new(path: PathBuf, text: String, before: Option<String>) -> PlannedDir {
        let before = before.map(|b| PlannedFile::new(path.clone(), b));
        PlannedDir { file: PlannedFile::new(path, text), before, edits: Vec::new(), unheld: Vec::new(), change: None }
    }

    /// Keep planning's parse of the text read, so no reader parses it again.
    fn read_as(mut self, parsed: KbuildFile) -> PlannedDir {
        self.before = self.before.map(|b| b.with_parse(parsed));
        self
    }
}

/// Everything a generation would change, and the problems that stop it.
#[derive(Debug, Default)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub diags: Diagnostics,
    /// By directory (relative to the tree): what the plan read and would write there.
    pub dirs: BTreeMap<String, PlannedDir>,
    /// The effective snapshot this generation writes: what the policy says now.
    pub snapshot: Option<snapshot::Snapshot>,
    /// The memory of the last generation of this tree (the validated snapshot written for it),
    /// which tells which side of a drift moved; unknown on a first application.
    pub base: snapshot::Base,
    /// Directories whose kbuild file holds directives but whose name a policy path cannot hold
    /// (a blank, a non-ASCII character): as `import` leaves their lines outside the policy,
    /// planning never writes them, and `check` reports each line (`unrepresentable`). By
    /// directory: its kbuild file, its text, and why the name cannot be a policy path.
    pub unnameable: BTreeMap<String, (PathBuf, String, String)>,
}

impl Plan {
    /// The kbuild file of `dir` as it would be after writing.
    pub fn file(&self, dir: &str) -> Option<&PlannedFile> {
        self.dirs.get(dir).map(|d| &d.file)
    }

    /// The kbuild file of `dir` as the plan read it.
    pub fn before(&self, dir: &str) -> Option<&str> {
        self.dirs.get(dir).and_then(|d| d.before.as_ref()).map(|b| b.text.as_str())
    }

    /// The kbuild file of `dir` as the plan read it, parsed (once).
    pub fn before_parsed(&self, dir: &str) -> Option<&KbuildFile> {
        self.dirs.get(dir).and_then(|d| d.before.as_ref()).map(PlannedFile::parsed)
    }

    /// Every directory's planned file, by directory.
    pub fn files(&self) -> impl Iterator<Item = (&String, &PlannedFile)> {
        self.dirs.iter().map(|(dir, d)| (dir, &d.file))
    }

    /// The plan of writing nothing: each directory's kbuild file as this plan read it (what a
    /// requirement held before the policy's change).
    pub fn as_read(&self, tree: &Path) -> Plan {
        let read = |(d, p): (&String, &PlannedDir)| {
            let text = p.before.as_ref()?.text.clone();
            Some((d.clone(), PlannedDir::new(tree.join(d), text.clone(), Some(text))))
        };
        Plan { dirs: self.dirs.iter().filter_map(read).collect(), ..Plan::default() }
    }

    /// Add `dir` with `change` as its file's change (pushed onto [`Plan::changes`]).
    fn add_dir(&mut self, dir: &str, mut planned: PlannedDir, change: Option<Change>) -> &mut PlannedDir {
        if let Some(c) = change {
            planned.change = Some(self.changes.len());
            self.changes.push(c);
        }
        self.dirs.insert(dir.to_string(), planned);
        self.dirs.get_mut(dir).expect("just inserted")
    }
}

/// Plan writing the policy's blocks into `tree`. With `sweep`, the whole tree is also searched for
/// blocks in directories the policy no longer names (they are removed); without it only the
/// policy's own directories are read, which is what a fast drift check needs.
pub fn plan_tree(policy: &Policy, tree: &Path, rules: &Rules, force: bool, sweep: bool) -> Plan {
    plan_tree_swept(policy, tree, rules, force, sweep.then(|| self::sweep(tree)))
}

/// [`plan_tree`] with the whole-tree sweep already made (or none), so that a caller can run it
/// while it reads the policy.
pub fn plan_tree_swept(policy: &Policy, tree: &Path, rules: &Rules, force: bool, sweep: Option<Sweep>) -> Plan {
    let at = Site::on_disk(tree);
    match policy.layout {
        Layout::InPlace => plan_in_place(policy, at, rules, sweep),
        Layout::Block => plan_blocks(policy, at, rules, force, sweep),
        Layout::Central => plan_central(policy, at, rules, force, sweep),
    }
}

/// What a plan is made for: a tree (its kbuild files, swept or not), or standalone fragments
/// under an output directory.
pub enum Target<'a> {
    Tree { tree: &'a Path, force: bool, sweep: Option<Sweep> },
    Fragments { out: &'a Path, command: &'a str },
}

/// The whole plan of a run: every generated file, the effective snapshot beside the policy at
/// `policy_path` (computed on the other core while the files are planned; its change is the
/// plan's last), and the memory of the last generation read back from it. Nothing outside
/// this module computes a snapshot.
pub fn plan(policy: &Policy, rules: &Rules, policy_path: &Path, target: Target) -> Plan {
    let (tree, out) = match &target {
        Target::Tree { tree, .. } => (Some(*tree), None),
        Target::Fragments { out, .. } => (None, Some(*out)),
    };
    let binding = match out {
        Some(_) => snapshot::Binding::None,
        None => snapshot::Binding::of(policy_path, tree),
    };
    let (mut plan, memory) = std::thread::scope(|scope| {
        let memory = scope.spawn(|| {
            let snapshot = snapshot::Snapshot::compute(policy, rules, binding.clone());
            let path = snapshot::snapshot_path(policy_path);
            let path = match out {
                Some(dir) => dir.join(path.file_name().unwrap_or_default()),
                None => path,
            };
            let change = snapshot::snapshot_change(&snapshot, &path, policy_path);
            (snapshot, change, snapshot::read_base(policy_path, &binding))
        });
        let plan = match target {
            // Without a sweep of the whole tree, the directories the last generation wrote are
            // read too: a block whose last unit the policy dropped is still this plan's to
            // remove (and `check`, which sweeps, says so).
            Target::Tree { tree, force, sweep: None } => {
                let remembered = snapshot::read_base(policy_path, &binding).unwrap_or_default().directories();
                plan_tree_swept(policy, tree, rules, force, Some(sweep_of(tree, &remembered)))
            }
            Target::Tree { tree, force, sweep } => plan_tree_swept(policy, tree, rules, force, sweep),
            Target::Fragments { out, command } => {
                plan_fragments(policy, rules, out, command, &crate::output::shown(policy_path))
            }
        };
        (plan, memory.join())
    });
    let Ok((snapshot, mut change, base)) = memory else {
        plan.diags.push(Diagnostic::error(Code::Internal, "computing the effective snapshot failed (a sanpolicy bug)"));
        return plan;
    };
    change.display = crate::output::shown(&change.path);
    plan.changes.push(change);
    plan.snapshot = Some(snapshot);
    plan.base = base.unwrap_or_else(|d| {
        plan.diags.push(*d);
        snapshot::Base::default()
    });
    plan
}

/// Kbuild files given by their bytes rather than read from a tree, by path relative to it: what
/// the pre-commit hook plans is the index, not the work tree.
#[derive(Debug, Default)]
pub struct Staged {
    pub files: BTreeMap<String, Vec<u8>>,
    /// Paths that are there but are no regular file (a symlink or a submodule in the index, a
    /// directory in HEAD), with what they are: planning refuses them as it refuses such a file
    /// on disk, and a sweep passes them by.
    pub irregular: BTreeMap<String, &'static str>,
}

impl Staged {
    fn has(&self, rel: &str) -> bool {
        self.files.contains_key(rel) || self.irregular.contains_key(rel)
    }

    /// Whether `rel` is a directory: a staged path is below it (the index lists no directories).
    fn is_dir(&self, rel: &str) -> bool {
        let prefix = format!("{rel}/");
        let first_after = |keys: &mut dyn Iterator<Item = &String>| keys.next().is_some_and(|k| k.starts_with(&prefix));
        rel.is_empty()
            || first_after(&mut self.files.range(prefix.clone()..).map(|(k, _)| k))
            || first_after(&mut self.irregular.range(prefix.clone()..).map(|(k, _)| k))
    }
}

/// [`plan_tree`] with a sweep over `staged` instead of the tree: every kbuild file is read from
/// `staged`, and a directory without one there has none. Locations name the files under `tree`
/// (where they would be written), though nothing of the tree is read.
pub fn plan_staged(policy: &Policy, tree: &Path, rules: &Rules, staged: &Staged) -> Plan {
    let at = Site::staged(tree, staged);
    let sweep = Some(sweep_staged(tree, staged));
    match policy.layout {
        Layout::InPlace => plan_in_place(policy, at, rules, sweep),
        Layout::Block => plan_blocks(policy, at, rules, false, sweep),
        Layout::Central => plan_central(policy, at, rules, false, sweep),
    }
}

/// The snapshot `sync` writes beside the synced `policy`: what it generates, except that where
/// the policy is still ahead of the tree (`kept`: the last generation's memory and the pending
/// `(path, mechanism)` pairs) it keeps the last generation's state, so the next `gen-makefiles`
/// still sees the policy as ahead there.
pub fn synced_snapshot(
    policy: &Policy,
    rules: &Rules,
    policy_path: &Path,
    tree: &Path,
    kept: (&snapshot::Base, &[(String, MechId)]),
) -> Change {
    let binding = snapshot::Binding::of(policy_path, Some(tree));
    let snapshot = snapshot::Snapshot::compute(policy, rules, binding).keeping(kept.0, kept.1);
    let path = snapshot::snapshot_path(policy_path);
    let mut change = snapshot::snapshot_change(&snapshot, &path, policy_path);
    change.display = crate::output::shown(&path);
    change
}

/// The snapshot `import --adopt` writes beside the policy it writes at `policy_path`: the
/// adopted tree is the policy's first generation.
pub fn adopted_snapshot(policy: &Policy, rules: &Rules, policy_path: &Path, tree: &Path) -> Change {
    let snapshot = snapshot::Snapshot::compute(policy, rules, snapshot::Binding::of(policy_path, Some(tree)));
    let path = snapshot::snapshot_path(policy_path);
    let mut change = snapshot::snapshot_change(&snapshot, &path, policy_path);
    change.display = crate::output::shown(&path);
    change
}

/// What planning the index needs besides the staged kbuild files.
pub struct Index<'a> {
    pub staged: &'a Staged,
    /// When the commit holds the policy or its snapshot, the two must travel together: where
    /// the snapshot is (for diagnostics), the policy's path in the repository (what its header
    /// names) and the staged snapshot's text (`None`: the index has none).
    pub snapshot: Option<(PathBuf, PathBuf, Option<String>)>,
    /// What the staged snapshot is bound to.
    pub binding: snapshot::Binding,
    /// The committed snapshot, validated: the memory of the last generation.
    pub base: snapshot::Base,
}

/// The plan of the commit the index would make (the pre-commit hook): `judged`'s units (those
/// of the directories the commit touches) planned on the staged kbuild files, the snapshot of
/// the whole staged `policy` (compared with the staged snapshot when the commit holds either),
/// and the committed snapshot as the memory.
pub fn plan_index(policy: &Policy, judged: &Policy, tree: &Path, rules: &Rules, index: Index) -> Plan {
    // A staged kbuild file of a directory without units (one the memory remembers, or one a
    // hand-added line is staged in) is still planned: its lines may be the policy's to remove.
    let mut plan = if judged.units.is_empty() && policy.layout != Layout::Central && index.staged.files.is_empty() {
        Plan::default()
    } else {
        plan_staged(judged, tree, rules, index.staged)
    };
    let snapshot = snapshot::Snapshot::compute(policy, rules, index.binding);
    if let Some((path, policy_rel, have)) = index.snapshot {
        let new = snapshot.render(&policy_rel);
        let old =
            have.map(|old| if old.contains('\r') && old.replace("\r\n", "\n") == new { new.clone() } else { old });
        plan.changes.push(Change { display: crate::output::shown(&path), path, old, new: Some(new) });
    }
    plan.snapshot = Some(snapshot);
    plan.base = index.base;
    plan
}

/// The in-place layout: every directory the policy names, and with `sweep` every directory
/// whose kbuild file holds a directive, reconciled line by line with its units.
fn plan_in_place(policy: &Policy, mut at: Site, rules: &Rules, sweep: Option<Sweep>) -> Plan {
    let mut plan = Plan::default();
    let by_dir = policy.units_by_dir();
    let mut dirs: BTreeMap<String, Vec<&Unit>> = by_dir.iter().map(|(d, u)| (d.to_string(), u.clone())).collect();
    let mut swept = swept_dirs(sweep, &at, |d| by_dir.contains_key(d), &mut plan);
    for dir in swept.keys() {
        dirs.entry(dir.clone()).or_default();
    }
    for (dir, units) in &dirs {
        if conflicts(units, rules, &mut plan.diags) {
            continue;
        }
        let known = swept.remove(dir);
        let Some((path, target, display, old, parsed)) = open_dir_known(&mut plan, &mut at, dir, units, known) else {
            continue;
        };
        let parsed = parsed.unwrap_or_else(|| makefile::parse(&old));
        let reconciled = emit::inplace::reconcile(&old, &parsed, units, rules);
        let change = Change { path: target, display, old: Some(old.clone()), new: Some(reconciled.text.clone()) };
        let planned = PlannedDir { edits: reconciled.edits, ..PlannedDir::new(path, reconciled.text, Some(old)) };
        let planned = planned.read_as(parsed);
        plan.add_dir(dir, planned, Some(change));
    }
    plan
}

/// A directory's kbuild file, ready to plan: its path, the file to write (symlinks inside the
/// tree resolved), its name as shown, and its text; or the problem reported in `plan`.
fn open_dir(plan: &mut Plan, at: &mut Site, dir: &str, units: &[&Unit]) -> Option<(PathBuf, PathBuf, String, String)> {
    open_dir_known(plan, at, dir, units, None).map(|(path, target, display, old, _)| (path, target, display, old))
}

/// [`open_dir`], taking the file's text and parse from the sweep (`known`) when the sweep read
/// the very file planning opens, instead of reading and parsing it a second time.
fn open_dir_known(
    plan: &mut Plan,
    at: &mut Site,
    dir: &str,
    units: &[&Unit],
    known: Option<Swept>,
) -> Option<(PathBuf, PathBuf, String, String, Option<KbuildFile>)> {
    let tree = at.tree;
    if let Some(swept) = known.and_then(|k| swept_file(at, k)) {
        return Some(swept);
    }
    let unit_at = units.first().map(|u| u.location.clone());
    let located = |d: Diagnostic| match &unit_at {
        Some(l) => d.at(l.clone()),
        None => d,
    };
    if !at.is_dir(dir) {
        plan.diags.push(located(
            Diagnostic::error(Code::MissingDirectory, format!("directory `{dir}/` does not exist in the tree"))
                .hint("fix the unit's path, or point `--tree` at the kernel tree it belongs to"),
        ));
        return None;
    }
    let Some(path) = at.kbuild_file(dir) else {
        plan.diags.push(located(Diagnostic::error(Code::MissingKbuildFile, format!("`{dir}/` has no `Kbuild` or `Makefile`")).hint("Kbuild only reads directories with a kbuild file; name the directory whose Makefile builds the object (`kbuild-dir`)")));
        return None;
    };
    let display = path.strip_prefix(tree).unwrap_or(&path).display().to_string();
    let target = match inside_tree(at, &path, &display) {
        Ok(t) => t,
        Err(d) => {
            plan.diags.push(*d);
            return None;
        }
    };
    match at.read(&path) {
        Ok(old) => Some((path, target, display, old, None)),
        Err(d) => {
            plan.diags.push(*d);
            None
        }
    }
}

/// A kbuild file as the sweep read it, ready to plan without opening it again. The sweep
/// reached it through directories it listed as directories (never following a symlink) and
/// read it only as a regular file, Kbuild's pick for its directory: it is inside the tree at
/// its own path, so resolving it once more (a stat per path component) would find nothing new.
/// A link swapped in since is the writer's to catch: it re-verifies every target at rename.
/// Its real path still joins `seen`, so a symlinked directory planned later that leads to it
/// is caught; `None` when it is already there (the full check reports it).
fn swept_file(at: &mut Site, swept: Swept) -> Option<(PathBuf, PathBuf, String, String, Option<KbuildFile>)> {
    let Swept { path, read: Some((old, parsed)) } = swept else { return None };
    let rel = path.strip_prefix(at.tree).ok()?;
    if !at.seen.insert(at.root.join(rel)) {
        return None;
    }
    let display = rel.display().to_string();
    Some((path.clone(), path, display, old, Some(parsed)))
}

/// The central layout: one generated file for the whole tree (`scripts/Makefile.sanpolicy`),
/// read by `scripts/Makefile.build` right after each directory's own kbuild file, so its lines
/// win over the directory's (see `emit::central`). Subsystem Makefiles are never written: each
/// directory's planned text is its own file followed by its section of the central file, which
/// is what Kbuild reads, so requirements and sources are judged on that. A directory line the
/// policy does not hold is reset in the section (`emit::central::unheld`); each directory's `unheld` keeps
/// each such line, for drift to tell a dropped unit from a line a merge brought.
fn plan_central(policy: &Policy, mut at: Site, rules: &Rules, force: bool, sweep: Option<Sweep>) -> Plan {
    use crate::emit::central;
    let tree = at.tree;
    let mut plan = Plan::default();
    let by_dir = policy.units_by_dir();
    let mut bad_dirs = false;
    for (dir, units) in &by_dir {
        if let Some(problem) = central::central_dir_problem(dir) {
            bad_dirs = true;
            let at = units.first().map(|u| u.location.clone());
            let d = Diagnostic::error(Code::BadPath, format!("`{dir}/` cannot be named in the central file: {problem}"))
                .hint("the central layout names directories in make conditionals: rename the path, or use `layout = \"in-place\"`");
            plan.diags.push(match at {
                Some(l) => d.at(l),
                None => d,
            });
        }
        conflicts(units, rules, &mut plan.diags);
    }
    if bad_dirs {
        return plan;
    }
    let file = tree.join(central::CENTRAL_FILE);
    let old = at.is_file(central::CENTRAL_FILE).then(|| at.read(&file)).transpose();
    let mut dirs: std::collections::BTreeSet<String> = by_dir.keys().map(|d| d.to_string()).collect();
    dirs.extend(swept_dirs(sweep, &at, |d| by_dir.contains_key(d), &mut plan).into_keys());
    // Directories whose section holds only resets are not the policy's: without a sweep they
    // are found through the central file as it stands, so a fast check plans them too.
    let written = old.as_ref().ok().and_then(Option::as_deref).and_then(central::sections).unwrap_or_default();
    dirs.extend(written.into_keys().filter(|d| at.kbuild_file(d).is_some()));
    let mut own: Vec<(String, PathBuf, String, Vec<central::Unheld>)> = Vec::new();
    let mut resets = central::Resets::new();
    for dir in &dirs {
        let units = by_dir.get(dir.as_str()).map_or(&[][..], Vec::as_slice);
        let Some((path, _, display, text)) = open_dir(&mut plan, &mut at, dir, units) else { continue };
        let mut unheld = central::unheld(&text, &makefile::parse(&text), units, rules);
        if let Some(problem) = central::central_dir_problem(dir) {
            for u in unheld.iter_mut().filter(|u| u.reset.is_ok()) {
                u.reset = Err(format!("the directory cannot be named in the central file: {problem}"));
            }
        }
        // A dead line is never reset: the section, read after the whole file, would cancel the
        // later line that make reads.
        let ok: Vec<_> =
            unheld.iter().filter(|u| !u.dead).filter_map(|u| u.reset.clone().ok().map(|r| (u.mech, r))).collect();
        if !ok.is_empty() {
            resets.insert(dir.clone(), (display, ok));
        }
        own.push((dir.clone(), path, text, unheld));
    }
    let rendered = central::render_central_with(&by_dir, &resets, rules);
    let sections = central::sections(&rendered).unwrap_or_default();
    for (dir, path, old, unheld) in own {
        let effective = match sections.get(&dir) {
            Some(section) => format!("{old}\n{section}"),
            None => old.clone(),
        };
        plan.add_dir(&dir, PlannedDir { unheld, ..PlannedDir::new(path, effective, Some(old)) }, None);
    }
    match old {
        Err(d) => plan.diags.push(*d),
        Ok(old) => {
            let refused = old.as_deref().filter(|_| !force).map(central::check_central);
            match refused {
                Some(Err(SpliceError::HandEdited(_))) if central_says_the_same(old.as_deref(), &rendered) => {
                    plan.changes.push(Change {
                        path: file.clone(),
                        display: central::CENTRAL_FILE.to_string(),
                        old: old.clone(),
                        new: Some(rendered.clone()),
                    })
                }
                Some(Err(SpliceError::HandEdited(b))) => plan.diags.push(hand_edited(
                    "the central file was edited by hand",
                    Location::at_line(&file, old.as_deref().unwrap_or(""), b.begin_line),
                )),
                Some(Err(SpliceError::Markers(line, message))) => plan.diags.push(
                    Diagnostic::error(Code::BadMarker, message)
                        .at(Location::at_line(&file, old.as_deref().unwrap_or(""), line))
                        .hint(crate::hint![
                            "restore the generated markers, or delete the file and run ",
                            crate::diagnostic::Fix::GenMakefiles
                        ]),
                ),
                _ => plan.changes.push(Change {
                    path: file.clone(),
                    display: central::CENTRAL_FILE.to_string(),
                    old,
                    new: Some(rendered),
                }),
            }
        }
    }
    let build = tree.join("scripts/Makefile.build");
    match at.read(&build) {
        Err(d) => plan.diags.push(*d),
        Ok(text) => match central::include_line(&text) {
            Ok(new) => plan.changes.push(Change {
                path: build.clone(),
                display: "scripts/Makefile.build".into(),
                old: Some(text),
                new: Some(new),
            }),
            Err(message) => plan.diags.push(
                Diagnostic::error(Code::Rules, format!("cannot add the central file's include line: {message}"))
                    .at(Location::file(&build))
                    .hint("the central layout needs the tree's `scripts/Makefile.build` to include each directory's kbuild file in one line; use `layout = \"in-place\"` for this tree"),
            ),
        },
    }
    plan
}

/// The block layout: one generated block per directory the policy names.
fn plan_blocks(policy: &Policy, mut at: Site, rules: &Rules, force: bool, sweep: Option<Sweep>) -> Plan {
    let mut plan = Plan::default();
    let by_dir = policy.units_by_dir();
    // The sweep's warnings follow the named directories' findings, as they are found.
    let mut skipped = Plan::default();
    let mut swept = swept_dirs(sweep, &at, |d| by_dir.contains_key(d), &mut skipped);
    plan.unnameable = std::mem::take(&mut skipped.unnameable);
    let skipped = skipped.diags;
    for (dir, units) in &by_dir {
        // A directory whose units conflict has no well-defined block to plan.
        let known = swept.remove(*dir);
        if !conflicts(units, rules, &mut plan.diags) {
            plan_dir(&mut plan, &mut at, dir, units, rules, force, known);
        }
    }
    // Blocks left in directories the policy no longer names are removed; the other files with
    // directives are read too, so that drift sees a hand-added line anywhere.
    plan.diags.extend(skipped);
    for (dir, known) in swept {
        plan_dir(&mut plan, &mut at, &dir, &[], rules, force, Some(known));
    }
    plan
}

/// A directory's kbuild file as the sweep read it: its path, and its text parsed (on the walk's
/// workers), unless it could not be decoded (planning reads it again and reports that).
struct Swept {
    path: PathBuf,
    read: Option<(String, KbuildFile)>,
}

/// What the whole-tree sweep read: every directory whose kbuild file (as Kbuild picks it) holds
/// a directive or a generated block, with that file; and the kbuild files it had to skip.
pub struct Sweep {
    dirs: BTreeMap<String, Swept>,
    skipped: Diagnostics,
}

/// The sweep of `tree`: one parallel walk over its kbuild files, parsing those it keeps. It
/// reads nothing of the policy, so it can run while the policy is read.
pub fn sweep(tree: &Path) -> Sweep {
    let walk = makefile::walk_kbuild_files_with(tree, &sweep_needles(), |path, bytes| {
        let own = path.parent().and_then(kbuild_file).as_deref() == Some(path);
        own.then(|| swept_text(path, bytes))
    });
    let mut dirs = BTreeMap::new();
    for (path, read) in walk.files {
        let Some(read) = read else { continue };
        let Some(dir) = path.parent().and_then(|d| d.strip_prefix(tree).ok()) else { continue };
        dirs.insert(dir.to_string_lossy().into_owned(), Swept { path, read });
    }
    Sweep { dirs, skipped: walk.skipped }
}

/// What the sweep of [`sweep`] finds in `dirs` of `tree` alone: their kbuild files, where
/// they hold a needle.
fn sweep_of(tree: &Path, dirs: &std::collections::BTreeSet<String>) -> Sweep {
    let needles = sweep_needles();
    let mut sweep = Sweep { dirs: BTreeMap::new(), skipped: Diagnostics::default() };
    for dir in dirs {
        let Some(path) = kbuild_file(&tree.join(dir)) else { continue };
        let bytes = match crate::input::read(&path, crate::input::KBUILD_LIMIT) {
            Ok(b) => b,
            Err(e) => {
                sweep.skipped.push(makefile::skipped_file(&path, &e));
                continue;
            }
        };
        if needles.iter().any(|n| memchr::memmem::find(&bytes, n.as_bytes()).is_some()) {
            let read = swept_text(&path, bytes);
            sweep.dirs.insert(dir.clone(), Swept { path, read });
        }
    }
    sweep
}

/// What the sweep of [`sweep`] finds in `staged` instead of a tree: the same kbuild files
/// (Kbuild's pick for their directory, outside the skipped top-level directories, holding a
/// needle), the same warning for one over the size bound.
fn sweep_staged(tree: &Path, staged: &Staged) -> Sweep {
    let needles = sweep_needles();
    let mut sweep = Sweep { dirs: BTreeMap::new(), skipped: Diagnostics::default() };
    for (rel, bytes) in &staged.files {
        let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
        if !makefile::is_swept(rel) || staged_pick(staged, dir).as_deref() != Some(rel.as_str()) {
            continue;
        }
        let path = tree.join(rel);
        if bytes.len() as u64 > crate::input::KBUILD_LIMIT {
            let too_large = crate::input::ReadError::TooLarge { limit: crate::input::KBUILD_LIMIT };
            sweep.skipped.push(makefile::skipped_file(&path, &too_large));
            continue;
        }
        if !needles.iter().any(|n| memchr::memmem::find(bytes, n.as_bytes()).is_some()) {
            continue;
        }
        let read = swept_text(&path, bytes.clone());
        sweep.dirs.insert(dir.to_string(), Swept { path, read });
    }
    sweep
}

/// What a sweep keeps a kbuild file for: a directive name or a generated block's marker.
fn sweep_needles() -> Vec<&'static str> {
    let mut needles = crate::mechanism::directive_words();
    needles.push(BEGIN_MARKER);
    needles
}

/// A swept kbuild file's text and parse; `None` when it cannot be decoded (planning reads it
/// again and reports why).
fn swept_text(path: &Path, bytes: Vec<u8>) -> Option<(String, KbuildFile)> {
    makefile::decode_kbuild(path, bytes).ok().map(|text| {
        let parsed = makefile::parse(&text);
        (text, parsed)
    })
}

/// The directories of `sweep` (none without one). A kbuild file the walk skipped (over the
/// size bound, not a regular file) is a warning in `plan.diags`: drift in it goes unseen. Not for
/// the kbuild file of a directory the policy names (`named`): planning that directory refuses
/// the file with an error.
fn swept_dirs(
    sweep: Option<Sweep>,
    at: &Site,
    named: impl Fn(&str) -> bool,
    plan: &mut Plan,
) -> BTreeMap<String, Swept> {
    let Some(Sweep { mut dirs, skipped }) = sweep else { return BTreeMap::new() };
    let refused_when_planned = |d: &Diagnostic| {
        let Some(path) = d.location.as_ref().map(|l| l.path.as_path()) else { return false };
        let dir = path.parent().and_then(|d| d.strip_prefix(at.tree).ok()).map(|d| d.to_string_lossy().into_owned());
        dir.is_some_and(|dir| named(&dir) && at.kbuild_file(&dir).as_deref() == Some(path))
    };
    plan.diags.extend(Diagnostics(skipped.0.into_iter().filter(|d| !refused_when_planned(d)).collect()));
    // A directory no policy path can name is not planned (nothing of it is the policy's).
    let unnameable: Vec<(String, String)> = dirs
        .keys()
        .filter(|d| !named(d))
        .filter_map(|d| crate::policy::UnitPath::parse(&format!("{d}/"), None).err().map(|(why, _)| (d.clone(), why)))
        .collect();
    for (dir, why) in unnameable {
        if let Some(Swept { path, read: Some((text, _)) }) = dirs.remove(&dir) {
            plan.unnameable.insert(dir, (path, text, why));
        }
    }
    dirs
}

/// Units of one directory that set one Kbuild variable both ways under the same conditions:
/// the later line would silently win. Different paths can name one variable (6.1 names
/// `KASAN_SANITIZE_note.o` after the file name, so `note.o` and `vdso32/note.o` collide); the
/// same path twice is a duplicate, reported by the policy parser. True when there are any.
fn conflicts(units: &[&Unit], rules: &Rules, diags: &mut Diagnostics) -> bool {
    let mut found = false;
    // (conditions, mechanism, stem of the object): the first setting and its unit.
    type Variable<'a> = (&'a [crate::makefile::CondKey], MechId, Option<String>);
    let mut seen: HashMap<Variable, (Setting, &Unit)> = HashMap::new();
    for unit in units {
        for (id, setting) in &unit.settings {
            let naming = rules.naming(*id);
            let stem = unit.path.object.as_deref().map(|o| naming.stem(o));
            match seen.entry((unit.conditions.as_slice(), *id, stem)) {
                Entry::Vacant(v) => {
                    v.insert((*setting, unit));
                }
                Entry::Occupied(e) => {
                    let (first_setting, first) = *e.get();
                    if first_setting == *setting || first.path == unit.path {
                        continue;
                    }
                    found = true;
                    let line =
                        emit::directive_line(*id, unit.path.object.as_deref(), *setting, naming).unwrap_or_default();
                    let variable = line.split(' ').next().unwrap_or_default();
                    diags.push(
                        Diagnostic::error(
                            Code::ConflictingUnits,
                            format!(
                                "`{}` and `{}` set `{id}` both ways under the same conditions",
                                first.path.text, unit.path.text
                            ),
                        )
                        .at(unit.setting_locations.get(id).unwrap_or(&unit.location).clone())
                        .label(format!("both are `{variable}` in this tree's Kbuild"))
                        .hint(format!(
                            "the later line would silently win: keep one setting (see {}), or tell them apart with `when`",
                            first.location
                        )),
                    );
                }
            }
        }
    }
    found
}

/// The tree being planned: as given, resolved, and the resolved kbuild files planned so far;
/// with `staged`, the files planning reads instead of the tree's.
struct Site<'a> {
    tree: &'a Path,
    root: PathBuf,
    seen: HashSet<PathBuf>,
    staged: Option<&'a Staged>,
}

impl<'a> Site<'a> {
    fn on_disk(tree: &'a Path) -> Site<'a> {
        let root = tree.canonicalize().unwrap_or_else(|_| tree.to_path_buf());
        Site { tree, root, seen: HashSet::new(), staged: None }
    }

    /// Blobs hold no symlinks to resolve: the tree is its own root.
    fn staged(tree: &'a Path, staged: &'a Staged) -> Site<'a> {
        Site { tree, root: tree.to_path_buf(), seen: HashSet::new(), staged: Some(staged) }
    }

    /// `dir`'s kbuild file as Kbuild picks it (`Kbuild` before `Makefile`).
    fn kbuild_file(&self, dir: &str) -> Option<PathBuf> {
        match self.staged {
            None => kbuild_file(&self.tree.join(dir)),
            Some(staged) => staged_pick(staged, dir).map(|rel| self.tree.join(rel)),
        }
    }

    fn is_dir(&self, dir: &str) -> bool {
        match self.staged {
            None => self.tree.join(dir).is_dir(),
            Some(staged) => staged.is_dir(dir),
        }
    }

    fn is_file(&self, rel: &str) -> bool {
        match self.staged {
            None => self.tree.join(rel).is_file(),
            Some(staged) => staged.files.contains_key(rel),
        }
    }

    /// The kbuild file at `path` (under the tree), as [`read_kbuild`] reads it from disk.
    fn read(&self, path: &Path) -> Result<String, Box<Diagnostic>> {
        use crate::input::{ReadError, KBUILD_LIMIT};
        let Some(staged) = self.staged else { return read_kbuild(path) };
        let rel = path.strip_prefix(self.tree).ok().and_then(Path::to_str).unwrap_or_default();
        if let Some(what) = staged.irregular.get(rel).copied().or_else(|| staged.is_dir(rel).then_some("a directory")) {
            return Err(makefile::unreadable(path, &ReadError::NotRegular(what)));
        }
        let missing = || ReadError::Missing(std::io::Error::from(rustix::io::Errno::NOENT));
        let bytes = staged.files.get(rel).ok_or_else(|| makefile::unreadable(path, &missing()))?;
        if bytes.len() as u64 > KBUILD_LIMIT {
            return Err(makefile::unreadable(path, &ReadError::TooLarge { limit: KBUILD_LIMIT }));
        }
        makefile::decode_kbuild(path, bytes.clone())
    }
}

/// The staged kbuild file of `dir` Kbuild would read, relative to the tree: as on disk, a
/// `Kbuild` that is there in any form (a directory too) is the pick.
fn staged_pick(staged: &Staged, dir: &str) -> Option<String> {
    let join = |n: &str| if dir.is_empty() { n.to_string() } else { format!("{dir}/{n}") };
    ["Kbuild", "Makefile"].into_iter().map(join).find(|rel| staged.has(rel) || staged.is_dir(rel))
}

/// The file to write for the kbuild file `path`: itself, or where its symlinks lead when that
/// is inside the tree (so the link survives the write). A kbuild file whose symlinks (or whose
/// directory's) lead out of the tree is refused: sanpolicy writes only inside it. So is a file
/// two directories share, which cannot hold two blocks.
fn inside_tree(at: &mut Site, path: &Path, display: &str) -> Result<PathBuf, Box<Diagnostic>> {
    if at.staged.is_some() {
        at.seen.insert(path.to_path_buf());
        return Ok(path.to_path_buf());
    }
    let real = path.canonicalize().map_err(|e| {
        Box::new(Diagnostic::error(Code::Io, format!("cannot resolve `{display}`: {e}")).at(Location::file(path)))
    })?;
    if !real.starts_with(&at.root) {
        return Err(Box::new(
            Diagnostic::error(Code::Symlink, format!("`{display}` leads outside the tree, to `{}`", real.display()))
                .at(Location::file(path))
                .hint("sanpolicy never writes outside the tree: replace the symlink by a copy of the file, or point `--tree` at the tree that holds it"),
        ));
    }
    if !at.seen.insert(real.clone()) {
        return Err(Box::new(
            Diagnostic::error(
                Code::Symlink,
                format!("`{display}` is the same file as another directory's kbuild file, through a symlink"),
            )
            .at(Location::file(path))
            .hint(
                "two directories share one kbuild file, which holds one generated block: replace the symlink by a copy",
            ),
        ));
    }
    let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    Ok(if link { real } else { path.to_path_buf() })
}

fn plan_dir(
    plan: &mut Plan,
    at: &mut Site,
    dir: &str,
    units: &[&Unit],
    rules: &Rules,
    force: bool,
    known: Option<Swept>,
) {
    let Some((path, target, display, old, parsed)) = open_dir_known(plan, at, dir, units, known) else { return };
    let parsed = parsed.unwrap_or_else(|| makefile::parse(&old));
    let block = if units.is_empty() { String::new() } else { emit::render_block(units, rules) };
    // A block edited by hand whose lines say what the policy says (`sync` took the edit back)
    // loses nothing by being written anew: only a change the policy lacks is refused.
    let force = force || says_the_same(&parsed, &block);
    match emit::splice(&old, &parsed, &block, force).map(|new| moved_into_block(&new)) {
        Ok(new) => {
            let change = Change { path: target, display, old: Some(old.clone()), new: Some(new.clone()) };
            plan.add_dir(dir, PlannedDir::new(path.clone(), new, Some(old)).read_as(parsed), Some(change));
        }
        Err(SpliceError::Markers(line, message)) => plan.diags.push(
            Diagnostic::error(Code::BadMarker, message).at(Location::at_line(&path, &old, line)).hint(
                if parsed.marker_problems.is_empty() {
                    // Nothing wrong with markers: the file's end cannot take an appended block.
                    "finish the file's last statement first (close the `define` or conditional, end the last line with a newline)"
                } else {
                    "restore one begin and one end marker on lines of their own, not continued by a final `\\` (or delete the block and regenerate)"
                },
            ),
        ),
        Err(SpliceError::HandEdited(b)) => plan.diags.push(hand_edited(
            "generated block was edited by hand",
            Location::at_line(&path, &old, b.begin_line),
        )),
    }
}

/// A generated block (or the central file) edited by hand: `sync` takes the edit into the
/// policy, after which writing loses nothing; `--force` writes the policy over it instead.
fn hand_edited(message: &str, at: Location) -> Diagnostic {
    use crate::diagnostic::Fix;
    Diagnostic::error(Code::HandEditedBlock, message)
        .at(at)
        .label("checksum in the end marker no longer matches")
        .hint(crate::hint![
            "run ",
            Fix::Sync,
            " to take the edit into the policy (then ",
            Fix::GenMakefiles,
            " writes the block anew), or ",
            Fix::GenMakefilesForce,
            " to overwrite it with the policy"
        ])
        .fixed_by(Fix::Sync)
}

/// Whether the generated block of `file` sets exactly what `block` (the policy's rendering)
/// sets: the same variables, values and conditions, in order.
fn says_the_same(file: &KbuildFile, block: &str) -> bool {
    let said = |a: &makefile::Assignment| {
        let frames: Vec<(String, bool)> = a.frames.iter().map(|f| (f.condition.text.clone(), f.in_else)).collect();
        (a.name.clone(), a.op, a.value.trim().to_string(), frames)
    };
    let rendered = makefile::parse(block);
    let theirs: Vec<_> = file.assignments.iter().filter(|a| a.in_block).map(said).collect();
    let ours: Vec<_> = rendered.assignments.iter().map(said).collect();
    file.block.is_some() && theirs == ours
}

/// Whether the central file as it is (`old`) sets what the policy's rendering sets.
fn central_says_the_same(old: Option<&str>, rendered: &str) -> bool {
    let said = |text: &str| {
        let parsed = makefile::parse(text);
        parsed
            .assignments
            .iter()
            .map(|a| {
                let frames: Vec<(String, bool)> =
                    a.frames.iter().map(|f| (f.condition.text.clone(), f.in_else)).collect();
                (a.name.clone(), a.value.trim().to_string(), frames)
            })
            .collect::<Vec<_>>()
    };
    old.is_some_and(|old| said(old) == said(rendered))
}

/// The hand-written lines (by first line) of a block-layout file that writing the block
/// removes: for a variable the block sets, the lines after the block, when each is a plain
/// unconditional assignment and the last of them (what make reads) says exactly what the
/// block says. Make reads the same value before and after; a line that says something else,
/// or one under a condition, keeps every line of its variable where it is.
pub fn moved_lines(parsed: &makefile::KbuildFile) -> BTreeSet<usize> {
    let mut block: HashMap<&str, (&str, usize)> = HashMap::new();
    for a in parsed.assignments.iter().filter(|a| a.in_block) {
        block.insert(a.name.as_str(), (a.value.trim(), a.end_line));
    }
    let mut out = BTreeSet::new();
    for (name, (value, end)) in block {
        // A line above the block is one make never reads (the block sets the variable again):
        // it stays the tree's, and `check` names it (`set-twice`).
        let after: Vec<&makefile::Assignment> =
            parsed.assignments.iter().filter(|a| !a.in_block && a.name == name && a.line > end).collect();
        let plain = after.iter().all(|a| {
            a.frames.is_empty() && !a.continued && matches!(a.op, makefile::Op::Simple | makefile::Op::Recursive)
        });
        if plain && after.last().is_some_and(|last| last.value.trim() == value) {
            out.extend(after.iter().map(|a| a.line));
        } else if let [a] = after[..] {
            // One line under a condition of its own that the block's last line for the
            // variable says, under that same condition (a merged line `sync` took): make reads
            // the same with either.
            let last = parsed.assignments.iter().filter(|b| b.in_block && b.name == name).max_by_key(|b| b.line);
            if lone_conditional(parsed, a).is_some()
                && last.is_some_and(|b| b.when_keys() == a.when_keys() && b.value.trim() == a.value.trim())
            {
                out.insert(a.line);
            }
        }
    }
    out
}

/// Where `a` sits alone in an `if…`/`endif` of its own (no `else`, no other assignment in it,
/// not nested), a plain assignment: the `if…` line and the `endif` line.
fn lone_conditional(parsed: &makefile::KbuildFile, a: &makefile::Assignment) -> Option<(usize, usize)> {
    let [frame] = &a.frames[..] else { return None };
    let simple = !frame.in_else && !a.continued && a.modifiers.is_empty();
    let simple = simple && matches!(a.op, makefile::Op::Simple | makefile::Op::Recursive);
    let branch = parsed.branches.iter().find(|b| b.open_line == frame.line)?;
    let has_else = parsed.branches.iter().any(|b| b.open_line == branch.close_line);
    let alone =
        parsed.assignments.iter().filter(|o| o.frames.first().is_some_and(|f| f.line == frame.line)).count() == 1;
    (simple && !has_else && alone).then_some((frame.line, branch.close_line))
}

/// Block layout: `new` without the hand-written lines the generated block now says exactly
/// (same variable, value and no conditions; a line `sync` took into the policy), each with the
/// comment paragraph that headed only it. That is the move `sync` then `gen-makefiles` promise;
/// a line that says something else stays, and `check` reports the conflict.
fn moved_into_block(new: &str) -> String {
    let parsed = makefile::parse(new);
    let lines: Vec<&str> = new.split_inclusive('\n').collect();
    let mut drop = vec![false; lines.len()];
    let moved = moved_lines(&parsed);
    for a in parsed.assignments.iter().filter(|a| moved.contains(&a.line)) {
        // A conditional line goes with its `if…` and `endif`.
        let (first, last) = lone_conditional(&parsed, a).unwrap_or((a.line, a.end_line));
        let after_blank = lines.get(last).is_none_or(|l| l.trim().is_empty());
        let from = match a.comment_line {
            Some(c) if after_blank && c <= first => c,
            _ => first,
        };
        drop[from - 1..last].iter_mut().for_each(|d| *d = true);
        // The blank line that separated the paragraph goes with it.
        if from >= 2 && lines[from - 2].trim().is_empty() {
            drop[from - 2] = true;
        }
    }
    lines.iter().zip(drop).filter(|(_, d)| !d).map(|(l, _)| *l).collect()
}

/// Plan the standalone fragments under `out` (one `<dir>/sanpolicy.mk` per directory), removing
/// fragments of directories the policy no longer names.
pub fn plan_fragments(policy: &Policy, rules: &Rules, out: &Path, command: &str, policy_name: &str) -> Plan {
    let mut plan = Plan::default();
    let by_dir = policy.units_by_dir();
    let mut wanted = Vec::new();
    for (dir, units) in &by_dir {
        if conflicts(units, rules, &mut plan.diags) {
            continue;
        }
        let path = out.join(dir).join(FRAGMENT_NAME);
        let text = emit::render_fragment(units, rules, command, policy_name, dir);
        let Some(old) = old_fragment(&path, &mut plan.diags) else { continue };
        let display = path.strip_prefix(out).unwrap_or(&path).display().to_string();
        wanted.push(path.clone());
        let change = Change { path: path.clone(), display, old, new: Some(text.clone()) };
        plan.add_dir(dir, PlannedDir::new(path, text, None), Some(change));
    }
    for entry in WalkDir::new(out).sort_by_file_name().into_iter().filter_map(Result::ok) {
        let path = entry.path();
        if entry.file_name() == FRAGMENT_NAME && !wanted.iter().any(|w| w == path) {
            let display = path.strip_prefix(out).unwrap_or(path).display().to_string();
            let Some(old) = old_fragment(path, &mut plan.diags) else { continue };
            plan.changes.push(Change { path: path.to_path_buf(), display, old, new: None });
        }
    }
    plan
}

/// The fragment at `path` as it is (`Some(None)` when there is none), read like every other
/// file (see [`crate::input`]); `None` with an error in `diags` when what stands there cannot
/// be a fragment: a FIFO would block the run, a device or a huge file would fill memory.
fn old_fragment(path: &Path, diags: &mut Diagnostics) -> Option<Option<String>> {
    let problem = match crate::input::read(path, crate::input::KBUILD_LIMIT) {
        Err(e) if e.is_missing() => return Some(None),
        Err(e) => e.to_string(),
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => return Some(Some(text)),
            Err(e) => format!("is not UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to()),
        },
    };
    let quoted = path.display().to_string().replace('\'', "'\\''");
    diags.push(
        Diagnostic::error(Code::Io, format!("cannot read the fragment `{}`: it {problem}", path.display()))
            .at(Location::file(path))
            .hint(format!("sanpolicy writes a regular file there: remove it (`rm -r '{quoted}'`) and rerun")),
    );
    None
}

pub const FRAGMENT_NAME: &str = "sanpolicy.mk";
