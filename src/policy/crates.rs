//! The Cargo side of the policy: `[[crate]]` entries (a package that skips or forces rustc
//! mechanisms, and why) and `[[profile]]` entries (a Cargo profile that turns mechanisms on).

use std::collections::BTreeMap;

use super::Setting;
use crate::diagnostic::Location;
use crate::mechanism::RustMechId;

/// A package named by a `[[crate]]` entry: `name`, or `name@version` where the resolved graph
/// holds two versions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CrateSpec {
    pub name: String,
    /// A full version (`1.0.19`) or a prefix of one (`1`, `0.4`).
    pub version: Option<String>,
}

impl CrateSpec {
    /// Parse `name` or `name@version`; the error is (message, hint).
    pub fn parse(text: &str) -> Result<CrateSpec, (String, String)> {
        let (name, version) = match text.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (text, None),
        };
        let hint = "write the package name as Cargo spells it, e.g. `name = \"regex\"` or `name = \"regex@1.10.2\"`";
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err((format!("`{text}` is not a package name"), hint.into()));
        }
        if let Some(v) = version {
            let parts: Vec<&str> = v.split('.').collect();
            let numeric =
                parts.len() <= 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            // A full version may carry a pre-release or build suffix (`1.0.0-rc.1`).
            let full = v.split(['-', '+']).next().is_some_and(|core| core.split('.').count() == 3)
                && v.chars().all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c));
            if v.is_empty() || !(numeric || full) {
                return Err((format!("`{v}` in `{text}` is not a version"), hint.into()));
            }
        }
        Ok(CrateSpec { name: name.to_string(), version: version.map(str::to_string) })
    }

    /// Whether a package with this name and version is named by the spec.
    pub fn matches(&self, name: &str, version: &str) -> bool {
        self.name == name
            && self
                .version
                .as_deref()
                .is_none_or(|v| version == v || (version.starts_with(v) && version[v.len()..].starts_with('.')))
    }
}

impl std::fmt::Display for CrateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{}@{v}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// One `[[crate]]` entry.
#[derive(Debug, Clone)]
pub struct CrateEntry {
    pub spec: CrateSpec,
    pub settings: BTreeMap<RustMechId, Setting>,
    /// Mechanisms that items of the crate deliberately turn off with `#[sanitize(… = "off")]`
    /// or `#[no_sanitize(…)]` (`item-skip`); the source scan flags undocumented ones.
    pub item_skip: Vec<RustMechId>,
    pub why: String,
    pub links: Vec<String>,
    /// Where `name = …` is written.
    pub location: Location,
    pub setting_locations: BTreeMap<RustMechId, Location>,
}

/// One `[[profile]]` entry: a custom Cargo profile that turns mechanisms on for every crate
/// that does not skip them.
#[derive(Debug, Clone)]
pub struct CargoProfile {
    pub name: String,
    /// The profile it inherits from (`dev` unless told).
    pub inherits: String,
    pub enable: Vec<RustMechId>,
    pub why: Option<String>,
    pub links: Vec<String>,
    /// Where `name = …` is written.
    pub location: Location,
}

/// Profile names Cargo defines or reserves: the generator owns only custom profiles.
pub const RESERVED_PROFILES: &[&str] = &["dev", "release", "test", "bench", "doc", "debug", "check", "build"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_match() {
        let s = CrateSpec::parse("shim@0.1").unwrap();
        assert!(s.matches("shim", "0.1.0") && !s.matches("shim", "0.10.0") && !s.matches("shim", "0.2.0"));
        assert!(CrateSpec::parse("shim").unwrap().matches("shim", "9.9.9"));
        assert!(CrateSpec::parse("a@1.0.0-rc.1").unwrap().matches("a", "1.0.0-rc.1"));
        for bad in ["", "a b", "a@", "a@x", "a@1.2.3.4", "@1", "a/b"] {
            assert!(CrateSpec::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(CrateSpec::parse("shim@0.1.0").unwrap().to_string(), "shim@0.1.0");
    }
}
