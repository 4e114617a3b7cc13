//! `sync`: take the tree's directives (a merge, a hand edit) back into the policy.

use clap::Args;

use super::context::{base_for, display, inputs, lock_tree, write, CommonArgs, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::generate::snapshot::{self, Snapshot};
use crate::output::Change;
use crate::{import, policy};

#[derive(Debug, Args)]
pub struct SyncArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Write nothing; exit 1 when the policy would change.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: &SyncArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    // Held from before the first read until the policy is written: no run interleaves.
    let tree = args.common.tree.clone().or_else(|| super::context::default_tree(defaults)).filter(|_| !args.check);
    let Ok(lock) = lock_tree(tree.as_deref(), ui) else { return EXIT_BAD_INPUT };
    let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let Some(tree) = inputs.tree.clone() else {
        let usage = Diagnostic::error(Code::Usage, "`sync` needs a kernel tree").hint("pass `--tree DIR`");
        ui.report(&Diagnostics(vec![usage]));
        return EXIT_BAD_INPUT;
    };
    let main = inputs.policy.files.first().map(|(_, t)| t.clone()).unwrap_or_default();
    let base = match base_for(&inputs, None, &defaults.program) {
        Ok(base) => base,
        Err(d) => {
            ui.report(&Diagnostics(vec![*d]));
            return EXIT_BAD_INPUT;
        }
    };
    let now = Snapshot::compute(&inputs.policy, &inputs.rules, super::context::binding(&inputs, None)).as_now();
    // A hand-edited block is what sync takes back, so it is read; a file it cannot read at all
    // (broken markers) would lose its units: refused.
    let scan = import::scan_edited(&tree, &inputs.rules);
    if scan.diags.has_errors() {
        ui.report(&Diagnostics(scan.diags.iter().filter(|d| d.is_error()).cloned().collect()).sorted());
        eprintln!("error: the tree has kbuild files sync cannot read; nothing was written");
        return EXIT_BAD_INPUT;
    }
    let Ok((central, reset)) = central_units(&inputs.policy, &tree, ui) else { return EXIT_BAD_INPUT };
    let synced =
        match import::sync::sync(&inputs.policy, &main, &scan, &central, &reset, &base, &now, &defaults.program) {
            Ok(s) => s,
            Err(diags) => {
                ui.report(&diags.sorted());
                eprintln!("error: nothing was written");
                return EXIT_BAD_INPUT;
            }
        };
    // The new policy must still be a valid policy, and its snapshot is rewritten to match.
    let (policy, diags) = policy::parse_str(&inputs.policy_path, &synced.text);
    if diags.has_errors() {
        ui.sources.insert(&inputs.policy_path, &synced.text);
        ui.report(&diags);
        eprintln!("error: the synced policy does not validate (a sanpolicy bug); nothing was written");
        return EXIT_BAD_INPUT;
    }
    for (what, list) in [
        ("added", &synced.added),
        ("removed", &synced.removed),
        ("changed", &synced.changed),
        ("renamed", &synced.renamed),
    ] {
        for item in list {
            eprintln!("{what}: {item}");
        }
    }
    let name = |s: crate::policy::Setting| if s == crate::policy::Setting::Skip { "skip" } else { "force" };
    for f in &synced.flipped {
        // Where the unit is in the policy as written now (units added above it move it).
        let at = policy
            .units
            .iter()
            .find(|u| u.path.text == f.unit && u.settings.get(&f.mechanism) == Some(&f.to))
            .map_or(f.at.clone(), |u| u.location.to_string());
        let reason = f.old_reason.lines().next().unwrap_or_default();
        let more = if f.old_reason.lines().nth(1).is_some() { " …" } else { "" };
        eprintln!(
            "flipped: {} {} {} -> {} at {}: its reason was written for {}: \"{reason}{more}\"; rewrite it where it now says the opposite",
            f.unit,
            f.mechanism,
            name(f.from),
            name(f.to),
            at,
            name(f.from)
        );
    }
    let mut changes = vec![Change {
        path: inputs.policy_path.clone(),
        display: display(&inputs.policy_path),
        old: Some(main.clone()),
        new: Some(synced.text.clone()),
    }];
    let synced_inputs = super::context::Inputs { policy, ..inputs };
    // The snapshot of the synced policy, but where the policy is still ahead of the tree it
    // keeps the last generation's state: that part is not generated yet.
    let binding = super::context::binding(&synced_inputs, None);
    let snapshot =
        Snapshot::compute(&synced_inputs.policy, &synced_inputs.rules, binding).keeping(&base, &synced.pending_keys);
    let path = snapshot::snapshot_path(&synced_inputs.policy_path);
    let mut change = snapshot::snapshot_change(&snapshot, &path, &synced_inputs.policy_path);
    change.display = display(&path);
    changes.push(change);
    ui.report(&synced.pending);
    if args.check {
        let stale = changes.iter().any(|c| !c.is_noop());
        eprintln!(
            "{}",
            if stale {
                "the policy is behind the tree: run `sanpolicy sync`"
            } else {
                "the policy is in sync with the tree"
            }
        );
        return if stale { super::EXIT_FINDINGS } else { EXIT_OK };
    }
    if write(lock.as_ref(), &changes, ui).is_err() {
        return EXIT_BAD_INPUT;
    }
    let _ = tree;
    if synced.is_noop() {
        eprintln!("{}: in sync with the tree, nothing to take back", display(&synced_inputs.policy_path));
    } else {
        eprintln!(
            "{}: {} added, {} removed, {} changed ({} flipped), {} renamed; review the policy diff (reasons come from the tree's comments; a flipped unit keeps the reason of its old value), then commit",
            display(&synced_inputs.policy_path),
            synced.added.len(),
            synced.removed.len(),
            synced.changed.len(),
            synced.flipped.len(),
            synced.renamed.len()
        );
    }
    if !synced.pending.is_empty() {
        eprintln!(
            "the policy is ahead of the tree in {} place(s) (notes above): run `{}` to write them",
            synced.pending.0.len(),
            crate::diagnostic::Fix::GenMakefiles.command(&defaults.program)
        );
    }
    EXIT_OK
}

/// In the central layout, the units the tree's central file holds and the directory lines it
/// resets (none when it is not there yet: nothing was generated); an error when its sections
/// cannot be read.
fn central_units(
    policy: &policy::Policy,
    tree: &std::path::Path,
    ui: &mut Ui,
) -> Result<(Vec<import::ImportedUnit>, Vec<import::sync::Key>), ()> {
    use crate::emit::central::CENTRAL_FILE;
    if policy.layout != policy::Layout::Central {
        return Ok(Default::default());
    }
    let path = tree.join(CENTRAL_FILE);
    let text = match crate::input::read_to_string(&path, crate::input::KBUILD_LIMIT) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => {
            ui.report(&Diagnostics(vec![Diagnostic::error(Code::Io, format!("cannot read `{CENTRAL_FILE}`: {e}"))
                .at(crate::diagnostic::Location::file(&path))
                .hint(format!(
                    "make it a readable regular file, or delete `{CENTRAL_FILE}` and run `sanpolicy gen-makefiles` to write it anew from the policy"
                ))]));
            eprintln!("error: nothing was written");
            return Err(());
        }
    };
    let reset = import::central_resets(tree, &text);
    import::central_units(tree, &text).map(|units| (units, reset)).ok_or_else(|| {
        ui.report(&Diagnostics(vec![Diagnostic::error(
            Code::BadMarker,
            format!("`{CENTRAL_FILE}` is not a generated block of `ifeq ($(obj),DIR)` sections"),
        )
        .at(crate::diagnostic::Location::file(&path))
        .hint(format!(
            "restore its markers and sections by hand, or delete `{CENTRAL_FILE}` and run `sanpolicy gen-makefiles` to write it anew from the policy"
        ))]));
        eprintln!("error: nothing was written");
    })
}
