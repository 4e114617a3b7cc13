//! `diff`: what a policy change does to effective instrumentation, newly uninstrumented objects
//! first, since those are what a reviewer must scrutinise.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::diagnostic::{Code, Diagnostic};
use crate::generate::snapshot::{self as effective, dir_files, state_at, Effective};
use crate::kbuild::configs::State;
use crate::kbuild::Rules;
use crate::mechanism::MechId;
use crate::policy::Policy;

/// How a change moves an object, in review order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// Was instrumented (at least sometimes), now less so.
    Uninstrumented,
    /// Conditions changed.
    Changed,
    /// Was exempt, now instrumented.
    Instrumented,
}

#[derive(Debug, Clone)]
pub struct Change {
    pub direction: Direction,
    pub path: String,
    pub mech: MechId,
    pub before: State,
    pub after: State,
    /// Reason and location of the unit behind the new state (or the removed one).
    pub reason: Option<(String, String)>,
}

fn rank(state: &State) -> u8 {
    match state {
        State::On => 2,
        State::Depends(_) => 1,
        State::Off => 0,
    }
}

/// Compare two policies' effective instrumentation.
pub fn diff(old: &Policy, new: &Policy, rules: &Rules) -> Vec<Change> {
    let (files_old, files_new) = (dir_files(old, rules), dir_files(new, rules));
    let eff_old = effective::compute_in(old, rules, &files_old);
    let eff_new = effective::compute_in(new, rules, &files_new);
    let mut keys: Vec<&(String, MechId)> = eff_old.keys().chain(eff_new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut changes = Vec::new();
    for key in keys {
        let site = eff_new.get(key).or_else(|| eff_old.get(key)).map(|e| e.at.clone()).expect("key from one side");
        let before = side(&eff_old, key).or_else(|| state_at(&files_old, rules, &site, key.1)).unwrap_or(State::On);
        let after = side(&eff_new, key).or_else(|| state_at(&files_new, rules, &site, key.1)).unwrap_or(State::On);
        if before == after || before.label() == after.label() {
            continue;
        }
        let direction = match rank(&after).cmp(&rank(&before)) {
            std::cmp::Ordering::Less => Direction::Uninstrumented,
            std::cmp::Ordering::Greater => Direction::Instrumented,
            std::cmp::Ordering::Equal => Direction::Changed,
        };
        let reason = reason(&eff_new, new, key).or_else(|| reason(&eff_old, old, key));
        changes.push(Change { direction, path: key.0.clone(), mech: key.1, before, after, reason });
    }
    changes.sort_by(|a, b| (a.direction, &a.path, a.mech).cmp(&(b.direction, &b.path, b.mech)));
    changes
}

fn side(eff: &Effective, key: &(String, MechId)) -> Option<State> {
    eff.get(key).map(|e| e.state.clone())
}

fn reason(eff: &Effective, policy: &Policy, key: &(String, MechId)) -> Option<(String, String)> {
    let unit = &policy.units[eff.get(key)?.unit?];
    Some((unit.why.split_whitespace().collect::<Vec<_>>().join(" "), unit.location.to_string()))
}

/// One line per change: `kernel/locking/lockdep.o: KASAN on → off (reason: …)`.
pub fn line(c: &Change) -> String {
    let reason = c.reason.as_ref().map(|(why, at)| format!(" (reason: {why}; {at})")).unwrap_or_default();
    format!("{}: {} {} → {}{reason}", c.path, c.mech.get().title, c.before.label(), c.after.label())
}

pub fn markdown(changes: &[Change], title: &str) -> String {
    let mut out = format!("## Instrumentation changes: {title}\n\n");
    if changes.is_empty() {
        out.push_str("No change in effective instrumentation.\n");
        return out;
    }
    for (direction, heading) in [
        (Direction::Uninstrumented, "Newly uninstrumented (review these first)"),
        (Direction::Changed, "Conditions changed"),
        (Direction::Instrumented, "Newly instrumented"),
    ] {
        let group: Vec<&Change> = changes.iter().filter(|c| c.direction == direction).collect();
        if group.is_empty() {
            continue;
        }
        out.push_str(&format!("### {heading} ({})\n\n", group.len()));
        for c in group {
            let reason = c.reason.as_ref().map(|(why, at)| format!(" — {why} ({at})")).unwrap_or_default();
            out.push_str(&format!(
                "- `{}`: {} {} → {}{reason}\n",
                c.path,
                c.mech.get().title,
                c.before.label(),
                c.after.label()
            ));
        }
        out.push('\n');
    }
    out
}

pub fn to_json(changes: &[Change]) -> Value {
    Value::Array(
        changes
            .iter()
            .map(|c| {
                json!({
                    "path": c.path,
                    "mechanism": c.mech.get().name,
                    "direction": format!("{:?}", c.direction).to_lowercase(),
                    "before": c.before.label(),
                    "after": c.after.label(),
                    "reason": c.reason.as_ref().map(|(w, _)| w),
                    "at": c.reason.as_ref().map(|(_, a)| a),
                })
            })
            .collect(),
    )
}

/// A reader that serves files as they were at git revision `rev` (for `diff --base`). The
/// revision is resolved to a commit first (`rev-parse --verify --end-of-options REV^{commit}`),
/// so a revision spelled like an option (`--output=/tmp/x`) is refused, never passed to git as
/// one; files are then named by the commit's object id. A file the commit does not have is
/// `NotFound`.
pub fn git_reader(rev: &str, near: &Path) -> Result<impl Fn(&Path) -> std::io::Result<Vec<u8>>, Box<Diagnostic>> {
    let dir = near.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let git_problem = |message: String| {
        Box::new(
            Diagnostic::error(Code::Io, message)
                .hint("run inside the git repository that holds the policy, or pass OLD NEW files"),
        )
    };
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel"])
        .output()
        .map_err(|e| git_problem(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(git_problem(format!("`{}` is not in a git repository", near.display())));
    }
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n'));
    let root = root.canonicalize().unwrap_or(root);
    let commit = resolve_commit(&root, rev)?;
    Ok(move |path: &Path| {
        let absolute = super::resolved(path)?;
        let rel = absolute
            .strip_prefix(&root)
            .map_err(|_| std::io::Error::other(format!("`{}` is outside the repository", path.display())))?;
        let object = format!("{commit}:{}", rel.display());
        let blob = Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
            .arg(&object)
            .output()?;
        if !blob.status.success() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("`{}` does not exist at {commit}", rel.display()),
            ));
        }
        let id = String::from_utf8_lossy(&blob.stdout).trim().to_string();
        let out = Command::new("git").arg("-C").arg(&root).args(["cat-file", "blob", &id]).output()?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()))
        }
    })
}

/// The commit `rev` names in the repository at `root`, as a full object id.
fn resolve_commit(root: &Path, rev: &str) -> Result<String, Box<Diagnostic>> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"))
        .output()
        .map_err(|e| Box::new(Diagnostic::error(Code::Io, format!("cannot run git: {e}"))))?;
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || id.len() < 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Box::new(
            Diagnostic::error(Code::BadRevision, format!("`{rev}` is not a commit of this repository"))
                .hint("pass a branch, tag or commit, e.g. `--base origin/master` or `--base HEAD~1`"),
        ));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn policy(text: &str) -> Policy {
        let (p, d) = crate::policy::parse_str(Path::new("p.toml"), text);
        assert!(!d.has_errors(), "{d:?}");
        p
    }

    #[test]
    fn dropping_an_exemption_is_newly_instrumented() {
        let rules = Rules::builtin();
        let old = policy("[[unit]]\npath = \"kernel/locking/lockdep.o\"\nskip = [\"kcsan\"]\nwhy = \"a\"\n");
        let new = policy("[[unit]]\npath = \"kernel/locking/lockdep.o\"\nskip = [\"kasan\", \"kcsan\"]\nwhy = \"b\"\n");
        let changes = diff(&old, &new, &rules);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(line(&changes[0]), "kernel/locking/lockdep.o: KASAN on → off (reason: b; p.toml:2:8)");
        assert_eq!(changes[0].direction, Direction::Uninstrumented);
        let back = diff(&new, &old, &rules);
        assert_eq!(back[0].direction, Direction::Instrumented);
    }
}
