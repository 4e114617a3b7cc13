//! The policy model: which units (objects or directories) skip or force which mechanisms, why,
//! and which units must stay exempt (recursion-prone requirements).

mod crates;
mod include;
mod parse;
mod paths;
pub mod when;

pub use crates::{CargoProfile, CrateEntry, CrateSpec, RESERVED_PROFILES};
pub use parse::{load, load_with, parse_str, Reader};
pub use paths::{expand_variants, make_variables, UnitPath};
pub use when::{undefined_symbols, validate, When};

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::diagnostic::Location;
use crate::mechanism::MechId;

/// What a unit asks of one mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setting {
    /// Exempt: the object is not instrumented (objtool: not checked; ftrace: flags removed).
    Skip,
    /// Forced on, whatever the directory or default says.
    Force,
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
    /// Values to try for each make variable used in the object name (`BITS = ["32", "64"]`).
    pub vars: BTreeMap<String, Vec<String>>,
    /// Where `path = …` is written.
    pub location: Location,
    /// Where each mechanism name is written, for pointing at it.
    pub setting_locations: BTreeMap<MechId, Location>,
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

/// A parsed policy file (with its includes).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Every file read, main file first, with its text.
    pub files: Vec<(PathBuf, String)>,
    pub units: Vec<Unit>,
    pub requirements: Vec<Requirement>,
    /// `[[crate]]` entries: Cargo packages (the Cargo side, `gen-cargo`).
    pub crates: Vec<CrateEntry>,
    /// `[[profile]]` entries: the Cargo profiles `gen-cargo` writes.
    pub profiles: Vec<CargoProfile>,
}

impl Policy {
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
