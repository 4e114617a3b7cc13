//! Variables a kbuild file reads from the architecture's top Makefile, such as `$(BITS)` in
//! `KASAN_SANITIZE_head$(BITS).o := n`: Kbuild expands them before matching the name, so the
//! name must be matched with the value Kbuild gives them.
//!
//! `arch/x86/Makefile` sets `BITS := 32` or `BITS := 64` depending on `CONFIG_X86_32`. With a
//! `.config` the arch Makefile is run under it and the value read. Without one, an object name
//! exists only in the configurations whose value spells it (`head64.o` is built only where
//! `BITS` is 64), so the value among those the arch Makefile can assign that turns some
//! per-object name into the object's is taken. With no arch Makefile to read, the value is the
//! part of the object's name the reference stands in.

use std::path::{Path, PathBuf};

use super::dotconfig::DotConfig;
use super::eval::{Env, Evaluate};
use crate::diagnostic::Diagnostic;
use crate::makefile::{self, KbuildFile, Op};

/// The preset for evaluating `object` (relative to `dir`) of `file`.
pub fn preset(
    tree: Option<&Path>,
    dir: &str,
    file: &KbuildFile,
    object: &str,
    config: Option<&DotConfig>,
) -> Vec<(String, String)> {
    let names: Vec<&str> = file.directives().map(|(i, _)| file.assignments[i].name.as_str()).collect();
    let mut vars: Vec<String> = names
        .iter()
        .flat_map(|n| super::configs::references(n))
        .filter(|v| !v.starts_with("CONFIG_") && !file.assignments.iter().any(|a| a.name.trim() == v))
        .collect();
    vars.sort();
    vars.dedup();
    if vars.is_empty() {
        return Vec::new();
    }
    let arch_file = arch_makefile(tree, dir);
    let mut out = Vec::new();
    for var in vars {
        let value = match (&arch_file, config) {
            (Some(arch), Some(config)) => {
                let mut env = Env::with(config.values.clone());
                env.run(arch, &mut Evaluate);
                Some(env.value(&var))
            }
            (Some(arch), None) => {
                let candidates = literal_values(arch, &var);
                candidates.iter().find(|v| spells(&names, &var, v, object)).or(candidates.first()).cloned()
            }
            (None, _) => names.iter().find_map(|n| solve(n, &var, object)),
        };
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.push((var, v));
        }
    }
    out
}

/// The names `object` (written with references, `head$(BITS).o`) has in the directory `dir`:
/// one per value the arch Makefile can give each reference (none when it gives none).
pub fn spellings(tree: Option<&Path>, dir: &str, object: &str) -> Vec<String> {
    let Some(arch) = arch_makefile(tree, dir) else { return Vec::new() };
    let mut out = vec![object.to_string()];
    for var in super::configs::references(object) {
        let (values, reference) = (literal_values(&arch, &var), format!("$({var})"));
        out = out.iter().flat_map(|o| values.iter().map(|v| o.replace(&reference, v))).collect();
    }
    out.retain(|o| !o.contains('$'));
    out
}

/// The path of `arch/<arch>/Makefile` in `tree`, for a directory under `arch/<arch>/`.
pub fn makefile_path(tree: &Path, dir: &str) -> Option<PathBuf> {
    let arch = dir.strip_prefix("arch/")?.split('/').next().filter(|a| !a.is_empty())?;
    Some(tree.join("arch").join(arch).join("Makefile"))
}

/// Why the arch Makefile a directory's names are expanded with cannot be read, if it cannot:
/// something there that is not a regular file (a FIFO, `/dev/zero`), too large, not UTF-8.
/// Commands ask this before judging (exit 2); a missing arch Makefile is no problem (names are
/// then solved from the object's own name).
pub fn read_problem(tree: &Path, dir: &str) -> Option<Box<Diagnostic>> {
    let path = makefile_path(tree, dir)?;
    std::fs::metadata(&path).ok()?;
    makefile::read_kbuild(&path).err()
}

/// `arch/<arch>/Makefile` of the tree, for a directory under `arch/<arch>/`. Read through
/// [`makefile::read_kbuild`] (never blocking, bounded); one that cannot be read is
/// reported by [`read_problem`] before any command judges.
fn arch_makefile(tree: Option<&Path>, dir: &str) -> Option<KbuildFile> {
    let text = makefile::read_kbuild(&makefile_path(tree?, dir)?).ok()?;
    Some(makefile::parse(&text))
}

/// The literal values the arch Makefile assigns to `var`, in file order.
fn literal_values(file: &KbuildFile, var: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in file.assignments.iter().filter(|a| a.name.trim() == var && a.op != Op::Append) {
        let v = a.value.trim().to_string();
        if !v.contains('$') && !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Some per-object name with `var` set to `value` names `object`.
fn spells(names: &[&str], var: &str, value: &str, object: &str) -> bool {
    let reference = format!("$({var})");
    names.iter().filter(|n| n.contains(&reference)).any(|n| {
        let spelled = n.replace(&reference, value);
        spelled.rsplit_once('_').is_some_and(|_| spelled.ends_with(&format!("_{object}")))
    })
}

/// The value of `var` that makes the per-object name `name` (`KASAN_SANITIZE_head$(BITS).o`)
/// name `object` (`head64.o`), if there is one.
fn solve(name: &str, var: &str, object: &str) -> Option<String> {
    let reference = format!("$({var})");
    let (before, after) = name.split_once(&reference)?;
    // The per-object part starts after a `_` of the mechanism's variable: the longest such tail
    // of `before` the object starts with.
    let prefix = (0..before.len())
        .filter(|i| before.as_bytes()[*i] == b'_')
        .map(|i| &before[i + 1..])
        .find(|p| object.starts_with(p))?;
    let rest = object.strip_prefix(prefix)?.strip_suffix(after)?;
    (!rest.is_empty() && !rest.contains('/')).then(|| rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solves_the_name_without_an_arch_makefile() {
        assert_eq!(solve("KASAN_SANITIZE_head$(BITS).o", "BITS", "head64.o").as_deref(), Some("64"));
        assert_eq!(solve("KCOV_INSTRUMENT_dumpstack_$(BITS).o", "BITS", "dumpstack_64.o").as_deref(), Some("64"));
        assert_eq!(solve("KASAN_SANITIZE_head$(BITS).o", "BITS", "other.o"), None);
    }
}
