//! The effective snapshot read back as the last generated state. Drift (in `check`) and `sync`
//! (in `import`) both compare the tree and the policy with it to tell which side moved, so it
//! sits below both; `review::effective` renders the snapshot, this only reads it.

use std::collections::{BTreeMap, BTreeSet};

use crate::mechanism::MechId;

/// The last generated state: `(path, mechanism)` pairs of the effective snapshot.
#[derive(Debug, Clone, Default)]
pub struct Base {
    keys: BTreeSet<(String, String)>,
    states: BTreeMap<(String, String), String>,
    /// There was a snapshot to compare with.
    pub known: bool,
}

impl Base {
    /// Read from the snapshot's text (`None`: no snapshot, nothing is known).
    pub fn parse(text: Option<&str>) -> Base {
        let Some(text) = text else { return Base::default() };
        let states: BTreeMap<(String, String), String> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let key = (words.next()?.to_string(), words.next()?.to_string());
                Some((key, words.collect::<Vec<_>>().join(" ")))
            })
            .collect();
        Base { keys: states.keys().cloned().collect(), states, known: true }
    }

    /// The state recorded for `path` and `mech`.
    pub fn state(&self, path: &str, mech: MechId) -> Option<&str> {
        self.states.get(&(path.to_string(), mech.get().name.to_string())).map(String::as_str)
    }

    /// Whether the last generation had `path` (which may hold `$(VAR)` parts) set for `mech`.
    pub fn has(&self, path: &str, mech: MechId) -> bool {
        let name = mech.get().name;
        if !path.contains("$(") {
            return self.keys.contains(&(path.to_string(), name.to_string()));
        }
        self.keys.iter().any(|(p, m)| m == name && matches_pattern(path, p))
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

    #[test]
    fn patterns_stand_for_expanded_names() {
        assert!(matches_pattern("arch/x86/kernel/head$(BITS).o", "arch/x86/kernel/head64.o"));
        assert!(!matches_pattern("arch/x86/kernel/head$(BITS).o", "arch/x86/kernel/dumpstack_64.o"));
        let base = Base::parse(Some("# header\nmm/slub.o   kasan   off\n"));
        assert!(base.has("mm/slub.o", MechId::by_name("kasan").unwrap()));
        assert!(!base.has("mm/slub.o", MechId::by_name("kcov").unwrap()));
    }
}
