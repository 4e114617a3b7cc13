//! What `sync` would do with a tree, planned before anything is written: the scan of the
//! tree's kbuild files (hand-edited blocks read too), the central file's sections, the merge
//! of both into the policy, and the policy file and snapshot it would write. `sync` renders and
//! writes it.

use std::path::Path;

use super::sync::{Key, Synced};
use super::ImportedUnit;
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::generate::Plan;
use crate::kbuild::Rules;
use crate::output::Change;
use crate::policy::{self, Policy};

/// What sync would do.
#[derive(Debug, Default)]
pub struct SyncPlan {
    /// Lines make never reads (`set-twice`): the tree's, said and left alone.
    pub unread: Diagnostics,
    /// Why sync cannot take the tree's lines; nothing is written when it has errors.
    pub refused: Diagnostics,
    /// The merge, when it could be made.
    pub synced: Option<Synced>,
    /// The synced policy, when it validates.
    pub policy: Option<Policy>,
    /// The policy file and its snapshot, as sync would write them.
    pub changes: Vec<Change>,
}

/// Where the policy file is, what it holds and the tree it is synced with.
#[derive(Debug, Clone, Copy)]
pub struct Sides<'a> {
    pub policy: &'a Policy,
    pub policy_path: &'a Path,
    pub rules: &'a Rules,
    pub tree: &'a Path,
}

/// Sync's plan for `sides`, with the memory and the policy's state read from `plan` (the tree's
/// generation plan); `history` says whether the tree's git history ever had a key's line.
pub fn plan(sides: Sides, plan: &Plan, history: &dyn Fn(&Key) -> bool) -> SyncPlan {
    let Sides { policy, policy_path, rules, tree } = sides;
    let now = plan.snapshot.as_ref().map(|s| s.as_now()).unwrap_or_default();
    let main = policy.files.first().map(|(_, t)| t.clone()).unwrap_or_default();
    // A hand-edited block is what sync takes back, so it is read; a file it cannot read at all
    // (broken markers) would lose its units: refused.
    let scan = super::scan_edited(tree, rules);
    let mut out = SyncPlan {
        unread: Diagnostics(scan.diags.iter().filter(|d| d.code == Code::SetTwice).cloned().collect()),
        refused: Diagnostics(scan.diags.iter().filter(|d| d.is_error()).cloned().collect()),
        ..SyncPlan::default()
    };
    let (units, reset) = central_units(policy, tree).unwrap_or_else(|d| {
        out.refused.push(*d);
        Default::default()
    });
    if out.refused.has_errors() {
        return out;
    }
    match super::sync::sync(policy, &main, &scan, &units, &reset, &plan.base, &now, history) {
        Ok(s) => out.synced = Some(s),
        Err(diags) => {
            out.refused.extend(diags);
            return out;
        }
    }
    let Some(synced) = &out.synced else { return out };
    // The new policy must still be a valid policy, and its snapshot is written to match.
    let (synced_policy, diags) = policy::parse_str(policy_path, &synced.text);
    if diags.has_errors() {
        out.refused.push(Diagnostic::error(Code::Internal, "the synced policy does not validate (a sanpolicy bug)"));
        out.refused.extend(diags);
        return out;
    }
    out.changes.push(Change {
        path: policy_path.to_path_buf(),
        display: crate::output::shown(policy_path),
        old: Some(main),
        new: Some(synced.text.clone()),
    });
    // Where the policy is still ahead of the tree, the snapshot keeps the last generation's
    // state: that part is not generated yet.
    let kept = (&plan.base, synced.pending_keys.as_slice());
    out.changes.push(crate::generate::synced_snapshot(&synced_policy, rules, policy_path, tree, kept));
    out.policy = Some(synced_policy);
    out
}

/// In the central layout, the units the tree's central file holds and the directory lines it
/// resets (none when it is not there yet: nothing was generated); an error when its sections
/// cannot be read.
fn central_units(policy: &Policy, tree: &Path) -> Result<(Vec<ImportedUnit>, Vec<Key>), Box<Diagnostic>> {
    use crate::emit::central::CENTRAL_FILE;
    if policy.layout != crate::policy::Layout::Central {
        return Ok(Default::default());
    }
    let path = tree.join(CENTRAL_FILE);
    let text = match crate::input::read_to_string(&path, crate::input::KBUILD_LIMIT) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => {
            return Err(Box::new(
                Diagnostic::error(Code::Io, format!("cannot read `{CENTRAL_FILE}`: {e}"))
                    .at(crate::diagnostic::Location::file(&path))
                    .hint(crate::hint![
                        format!("make it a readable regular file, or delete `{CENTRAL_FILE}` and run "),
                        crate::diagnostic::Fix::GenMakefiles,
                        " to write it anew from the policy"
                    ]),
            ))
        }
    };
    let reset = super::central_resets(tree, &text);
    super::central_units(tree, &text).map(|units| (units, reset)).ok_or_else(|| {
        Box::new(
            Diagnostic::error(
                Code::BadMarker,
                format!("`{CENTRAL_FILE}` is not a generated block of `ifeq ($(obj),DIR)` sections"),
            )
            .at(crate::diagnostic::Location::file(&path))
            .hint(crate::hint![
                format!("restore its markers and sections by hand, or delete `{CENTRAL_FILE}` and run "),
                crate::diagnostic::Fix::GenMakefiles,
                " to write it anew from the policy"
            ]),
        )
    })
}
