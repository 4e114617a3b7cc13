//! The policy model: which units (objects or directories) skip or force which mechanisms, why,
//! and which units must stay exempt (recursion-prone requirements).

mod crates;
mod include;
mod parse;
mod paths;
pub mod when;

pub use crate::makefile::expand_variants;
pub use crates::{CargoProfile, CrateEntry, CrateSpec, RESERVED_PROFILES};
pub use parse::{condition_key, load, load_with, parse_str, Reader};
pub use paths::{make_variables, UnitPath};
pub use when::{undefined_symbols, validate, When};

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::diagnostic::Location;
use crate::mechanism::MechId;

/// Reason `import` writes for a unit whose directives have no comment in the tree; `check`
/// counts these and `report` files them under "no reason". Part of the policy's vocabulary, so
/// every stage above the policy reads it from here.
pub const PLACEHOLDER_REASON: &str = "TODO(sanpolicy import): the tree gives no reason";

/// How `sync` marks the reason of a unit whose value it turned around (skip ↔ force): the
/// reason was written for the other value, so it is a placeholder until someone rewrites it.
pub const FLIPPED_REASON: &str = "TODO(sanpolicy sync)";

/// Whether `why` is a placeholder a person still has to replace with a real reason.
pub fn is_placeholder(why: &str) -> bool {
    why.starts_with(PLACEHOLDER_REASON) || why.starts_with(FLIPPED_REASON)
}

/// What a unit asks of one mechanism; defined with the mechanism table, below the makefile
/// reader, which reads directives as settings.
pub use crate::mechanism::Setting;

/// How a policy's directives live in the tree (`layout = "…"`). All three give the same
/// effective state; they differ in which files hold the lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Ordinary lines in each directory's kbuild file, where the tree keeps them.
    #[default]
    InPlace,
    /// One marked, checksummed generated block per directory.
    Block,
    /// One generated file for the whole tree, read by Kbuild after each directory's own file.
    Central,
}

impl Layout {
    pub const NAMES: &'static [&'static str] = &["in-place", "block", "central"];

    pub fn name(self) -> &'static str {
        match self {
            Layout::InPlace => "in-place",
            Layout::Block => "block",
            Layout::Central => "central",
        }
    }

    pub fn by_name(name: &str) -> Option<Layout> {
        [Layout::InPlace, Layout::Block, Layout::Central].into_iter().find(|l| l.name() == name)
    }
}

/// One `[[acknowledge]]` entry: a finding the policy keeps on purpose (a stale upstream
/// directive, a requirement this tree breaks). `check` lists it and does not fail on it.
#[derive(Debug, Clone)]
pub struct Acknowledgement {
    /// The finding's diagnostic code (`missing-source`, `recursion-prone`, …): one of the
    /// acknowledgeable codes, parsed when the policy loads.
    pub code: crate::diagnostic::Code,
    /// The unit or requirement path the finding is about.
    pub path: String,
    /// The mechanism, for findings about one (`recursion-prone`).
    pub mechanism: Option<MechId>,
    pub why: String,
    pub location: Location,
}

/// One `[[unit]]` entry.
#[derive(Debug, Clone)]
pub struct Unit {
    pub path: UnitPath,
    pub settings: BTreeMap<MechId, Setting>,
    pub why: String,
    /// Where `why = …` is written.
    pub why_location: Location,
    pub links: Vec<String>,
    /// Make conditionals the lines are wrapped in, outermost first (`ifdef CONFIG_X`).
    pub when: Vec<String>,
    /// Where each of `when` is written (empty for units not read from a policy file).
    pub when_locations: Vec<Location>,
    /// `when` in canonical form, parsed once: what units are compared by (two spellings of one
    /// condition are one condition).
    pub conditions: Vec<crate::makefile::CondKey>,
    /// Values to try for each make variable used in the object name (`BITS = ["32", "64"]`).
    pub vars: BTreeMap<String, Vec<String>>,
    /// Where `path = …` is written.
    pub location: Location,
    /// Where each mechanism name is written, for pointing at it.
    pub setting_locations: BTreeMap<MechId, Location>,
    /// For flag-removal mechanisms (ftrace): the exact flags the line removes or adds when they
    /// are not the mechanism's own flag variable (x86's `CFLAGS_REMOVE_head64.o = -pg` keeps
    /// `-mfentry -mrecord-mcount`, unlike `$(CC_FLAGS_FTRACE)`). Absent: the mechanism's flags.
    pub flags: BTreeMap<MechId, String>,
    /// The report's reason category, when the policy names it (`category = "firmware"`);
    /// otherwise the report reads it from the reason's words.
    pub category: Option<String>,
}

impl Unit {
    /// The value the unit's line for `id` carries: `n`/`y` (or objtool's inverse), or the flags.
    pub fn value(&self, id: MechId) -> Option<String> {
        let setting = *self.settings.get(&id)?;
        Some(match id.get().form {
            crate::mechanism::Form::Variable { skip_value, force_value, .. } => {
                (if setting == Setting::Skip { skip_value } else { force_value }).to_string()
            }
            crate::mechanism::Form::FlagRemoval { flags, .. } => {
                self.flags.get(&id).cloned().unwrap_or_else(|| flags.to_string())
            }
        })
    }
}

/// One `[[require]]` entry: a unit that must be exempt from the listed mechanisms.
#[derive(Debug, Clone)]
pub struct Requirement {
    pub path: UnitPath,
    pub exempt: Vec<(MechId, Location)>,
    /// Objects of a directory requirement that are deliberately instrumented (tests of the
    /// runtime), relative to the directory.
    pub except: Vec<String>,
    pub why: String,
    pub links: Vec<String>,
    pub location: Location,
}

impl Requirement {
    /// The reason as one line: a multi-line `why` read by its first line alone can stop
    /// mid-sentence (the shipped lockdep reason's first line ends in a colon).
    pub fn why_line(&self) -> String {
        self.why.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// A parsed policy file (with its includes).
#[derive(Debug, Clone)]
pub struct Policy {
    /// Every file read, main file first, with its text.
    pub files: Vec<(PathBuf, String)>,
    pub units: Vec<Unit>,
    pub requirements: Vec<Requirement>,
    /// `[[crate]]` entries: Cargo packages (the Cargo side, `gen-cargo`).
    pub crates: Vec<CrateEntry>,
    /// `[[profile]]` entries: the Cargo profiles `gen-cargo` writes.
    pub profiles: Vec<CargoProfile>,
    /// `layout = "…"` (main file only).
    pub layout: Layout,
    /// `builtin-requirements = false` opts out of the requirements compiled into sanpolicy.
    pub builtin_requirements: bool,
    /// `[[acknowledge]]` entries.
    pub acknowledged: Vec<Acknowledgement>,
    /// The compiled-in requirements' name and text, when they apply (for diagnostics; not a file).
    pub builtin: Option<(PathBuf, String)>,
}

impl Policy {
    /// This policy with only the units `keep` keeps: what planning a few directories needs,
    /// without copying every other unit first.
    pub fn with_units_where(&self, keep: impl Fn(&Unit) -> bool) -> Policy {
        Policy {
            files: self.files.clone(),
            units: self.units.iter().filter(|u| keep(u)).cloned().collect(),
            requirements: self.requirements.clone(),
            crates: self.crates.clone(),
            profiles: self.profiles.clone(),
            layout: self.layout,
            builtin_requirements: self.builtin_requirements,
            acknowledged: self.acknowledged.clone(),
            builtin: self.builtin.clone(),
        }
    }
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            files: Vec::new(),
            units: Vec::new(),
            requirements: Vec::new(),
            crates: Vec::new(),
            profiles: Vec::new(),
            layout: Layout::default(),
            builtin_requirements: true,
            acknowledged: Vec::new(),
            builtin: None,
        }
    }
}

/// The recursion-prone requirements every kernel policy gets unless it opts out, compiled in
/// from `policy/recursion-prone.toml` so a kernel checkout needs no copy of this repository.
pub const BUILTIN_REQUIREMENTS: &str = include_str!("../../policy/recursion-prone.toml");

/// How diagnostics name the compiled-in requirements file.
pub const BUILTIN_REQUIREMENTS_NAME: &str = "<sanpolicy>/recursion-prone.toml";

impl Policy {
    /// Every text a diagnostic may point into: the files read, and the built-in requirements.
    pub fn sources(&self) -> impl Iterator<Item = (&PathBuf, &String)> {
        self.files.iter().chain(self.builtin.iter()).map(|(p, t)| (p, t))
    }

    /// The directories whose kbuild files the policy writes to, sorted.
    pub fn directories(&self) -> Vec<&str> {
        let mut dirs: Vec<&str> = self.units.iter().map(|u| u.path.kbuild_dir.as_str()).collect();
        dirs.sort_unstable();
        dirs.dedup();
        dirs
    }

    /// The units grouped by the directory whose kbuild file holds their lines, each group in
    /// file order.
    pub fn units_by_dir(&self) -> std::collections::BTreeMap<&str, Vec<&Unit>> {
        let mut map: std::collections::BTreeMap<&str, Vec<&Unit>> = std::collections::BTreeMap::new();
        for u in &self.units {
            map.entry(u.path.kbuild_dir.as_str()).or_default().push(u);
        }
        map
    }
}

/// Why a line that [`crate::makefile::overridden_by`] makes dead is not the policy's.
pub fn set_twice(a: &crate::makefile::Assignment, later: &crate::makefile::Assignment) -> String {
    format!(
        "make never reads line {}: line {} sets `{}` again (`{} {}`), and make reads only that",
        a.line,
        later.line,
        a.name,
        later.op.as_str(),
        later.value.trim_end()
    )
}

/// Whether a policy can hold the directive line `a` (`d`) of `file`, or why not: such a line is
/// imported as a unit and owned by `gen-makefiles` (reconciled in place, moved into a block);
/// any other line stays where it is, outside the policy, and `check` reports it
/// (`unrepresentable`). One answer for every layout and every command, so that no command
/// writes away a line import left out.
pub fn holdable(
    file: &crate::makefile::KbuildFile,
    a: &crate::makefile::Assignment,
    d: &crate::makefile::Directive,
) -> Result<(), String> {
    // Make never reads a line set again below it: it stays the tree's (`set-twice` names it).
    if let Some(later) = crate::makefile::overridden_by(file, a) {
        return Err(set_twice(a, later));
    }
    holdable_line(file, a, d)
}

/// [`holdable`] for the line alone, dead or not: the central layout's resets count every line
/// of a variable (one reset stands for one line), read or not.
pub fn holdable_line(
    file: &crate::makefile::KbuildFile,
    a: &crate::makefile::Assignment,
    d: &crate::makefile::Directive,
) -> Result<(), String> {
    // A block goes where the first adopted line stood, so a line may move up, across what make
    // does above it. An `include` is moved across as before: the round trip
    // (`tests/round_trip.rs`) has make prove that the 6.1 and 6.12 trees keep their meaning.
    let above = |o: &&crate::makefile::Opaque| o.line < a.line && !o.other_file && o.may_assign(&a.name);
    if let Some(o) = file.opaque.iter().find(above) {
        return Err(format!("{} at line {} may change it", o.construct, o.line));
    }
    if let Some(p) = file.setters(".RECIPEPREFIX").next() {
        return Err(format!(
            "the file sets `.RECIPEPREFIX` (line {}): a block's lines could read as recipe lines",
            p.line
        ));
    }
    if let Some(why) = crate::makefile::unmodelled(a, d) {
        return Err(why);
    }
    // A `when` is written in the policy's grammar, where make's blanks around an operand are
    // not kept (`ifeq "$(CONFIG_FOO) " "y"` is never true in make, `ifeq ($(CONFIG_FOO),y)`
    // is): such a condition cannot be held, and the line stays where it is.
    if let Some(f) = a.frames.iter().find(|f| f.condition.args.iter().any(|x| x.trim() != x)) {
        return Err(format!(
            "its condition `{}` (line {}) compares an operand with blanks make keeps, which a `when` cannot say",
            f.condition.text, f.line
        ));
    }
    // A policy's `when` is a grammar over Kconfig symbols; what is outside it stays in the tree.
    for condition in a.when() {
        if let Err(p) = when::validate(&condition) {
            return Err(format!("condition `{condition}` is outside the policy's `when` grammar: {}", p.message));
        }
    }
    Ok(())
}
