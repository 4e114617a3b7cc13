//! `sync`: take the tree's directives (a merge, a hand edit) back into the policy.

use clap::Args;

use super::context::{display, inputs, judged, lock_tree, plan, write, CommonArgs, Sweeping, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::check::judge::{judge, Mode};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::output::Change;
use crate::{import, policy};

#[derive(Debug, Args)]
pub struct SyncArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Write nothing: judge the tree, the policy and the last generation as `gen-makefiles
    /// --check` does, and exit 1 with the fix when they differ.
    #[arg(long)]
    pub check: bool,
    /// Stage what is written (`git add`), for a commit the pre-commit hook judges.
    #[arg(long, conflicts_with = "check")]
    pub stage: bool,
    /// `json`: print the verdict (schema `sanpolicy.verdict/1`) on stdout instead of text.
    #[arg(long, value_enum, default_value_t = super::gen::GenFormat::Text)]
    pub format: super::gen::GenFormat,
}

pub fn run(args: &SyncArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    if args.check {
        return check(args, defaults, ui);
    }
    // Held from before the first read until the policy is written: no run interleaves.
    let tree = args.common.tree.clone().or_else(|| super::context::default_tree(defaults));
    let Ok(lock) = lock_tree(tree.as_deref(), ui) else { return EXIT_BAD_INPUT };
    let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let Some(tree) = inputs.tree.clone() else {
        let usage = Diagnostic::error(Code::Usage, "`sync` needs a kernel tree").hint("pass `--tree DIR`");
        ui.report(&Diagnostics(vec![usage]));
        return EXIT_BAD_INPUT;
    };
    // The memory of the last generation and what the policy says now, as every command reads
    // them: from the plan.
    let plan = plan(&inputs, None, defaults, true, Sweeping::No);
    if plan.diags.has_bad_input() {
        ui.report(&plan.diags);
        return EXIT_BAD_INPUT;
    }
    let sides =
        import::Sides { policy: &inputs.policy, policy_path: &inputs.policy_path, rules: &inputs.rules, tree: &tree };
    let history = |key: &import::sync::Key| lost_from_history(&tree, key);
    let planned = import::plan_sync(sides, &plan, &history);
    // A line make never reads stays the tree's: said, never dropped in silence.
    ui.report(&planned.unread);
    if let (Some(synced), None) = (&planned.synced, &planned.policy) {
        // The synced text that does not validate is what its findings point into.
        ui.sources.insert(&inputs.policy_path, &synced.text);
    }
    let import::SyncPlan { refused, synced, policy: synced_policy, changes, .. } = planned;
    let empty = Diagnostics::default();
    let pending = synced.as_ref().map_or(&empty, |s| &s.pending);
    let judged = judged(&inputs, None, ui);
    let verdict = judge(judged, &plan, Mode::Sync { refused: &refused, pending, changes: &changes });
    let json = args.format == super::gen::GenFormat::Json;
    if json {
        // The verdict sync acted on: printed before the write, whose outcome the exit says.
        outln!("{}", serde_json::to_string_pretty(&verdict).unwrap_or_default());
    } else {
        ui.report(&verdict.diagnostics);
    }
    if json && !verdict.may_write {
        return verdict.exit_code();
    }
    if !verdict.may_write {
        eprintln!("{}", verdict.closing("error: nothing was written"));
        return verdict.exit_code();
    }
    let (Some(synced), Some(policy)) = (synced, synced_policy) else { return EXIT_BAD_INPUT };
    if write(lock.as_ref(), &changes, ui).is_err() {
        return EXIT_BAD_INPUT;
    }
    let written: Vec<&std::path::Path> = verdict.stale.iter().map(|i| changes[*i].path.as_path()).collect();
    if args.stage && super::hook::stage(&written, ui).is_err() {
        return EXIT_BAD_INPUT;
    }
    if json {
        return EXIT_OK;
    }
    report_synced(&synced, &policy, &inputs.policy_path, &changes);
    if let Some(fix) = verdict.fix_line() {
        eprintln!(
            "the policy is ahead of the tree in {} place(s) (notes above): run {fix} to write them",
            synced.pending.0.len()
        );
    }
    EXIT_OK
}

/// `sync --check`: the judge's drift verdict, as `gen-makefiles --check` gives it (one state,
/// one fix, whichever command looks at it).
fn check(args: &SyncArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    if inputs.tree.is_none() {
        let usage = Diagnostic::error(Code::Usage, "`sync` needs a kernel tree").hint("pass `--tree DIR`");
        ui.report(&Diagnostics(vec![usage]));
        return EXIT_BAD_INPUT;
    }
    let sweep = if inputs.policy.layout == policy::Layout::InPlace { Sweeping::Yes } else { Sweeping::No };
    let plan = plan(&inputs, None, defaults, false, sweep);
    let verdict = judge(judged(&inputs, None, ui), &plan, Mode::Drift);
    let code = verdict.exit_code();
    if args.format == super::gen::GenFormat::Json {
        outln!("{}", serde_json::to_string_pretty(&verdict).unwrap_or_default());
        return code;
    }
    ui.report(&verdict.diagnostics);
    match code {
        EXIT_OK => eprintln!("the policy is in sync with the tree"),
        super::EXIT_FINDINGS if verdict.fixes.contains(&crate::diagnostic::Fix::Sync) => {
            eprintln!("{}", verdict.closing("the tree is ahead of the policy"))
        }
        super::EXIT_FINDINGS => {
            eprintln!("{}", verdict.closing("the tree and the policy differ, but not by what sync takes"))
        }
        _ => eprintln!("error: the check could not be made (see above)"),
    }
    if let Some(line) = verdict.remaining_line(&ui.invocation) {
        eprintln!("{line}");
    }
    code
}

/// What sync took, line by line, and the one line summing it up.
fn report_synced(
    synced: &import::sync::Synced,
    policy: &policy::Policy,
    policy_path: &std::path::Path,
    changes: &[Change],
) {
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
            .map_or(f.at.clone(), |u| u.why_location.to_string());
        eprintln!(
            "flipped: {} {} {} -> {} at {}: its reason was written for {}; it is marked `{}` until you rewrite it",
            f.unit,
            f.mechanism,
            name(f.from),
            name(f.to),
            at,
            name(f.from),
            crate::policy::FLIPPED_REASON,
        );
    }
    let snapshot_only = changes.first().is_some_and(|c| c.is_noop()) && changes.get(1).is_some_and(|c| !c.is_noop());
    if snapshot_only {
        eprintln!(
            "{}: in sync with the tree; rewrote `{}`, which recorded another generation than the tree's",
            display(policy_path),
            changes[1].display
        );
    } else if synced.is_noop() {
        eprintln!("{}: in sync with the tree, nothing to take back", display(policy_path));
    } else {
        eprintln!(
            "{}: {} added, {} removed, {} changed ({} flipped), {} renamed; review the policy diff (reasons come from the tree's comments; a flipped unit's reason is marked for rewriting), then commit",
            display(policy_path),
            synced.added.len(),
            synced.removed.len(),
            synced.changed.len(),
            synced.flipped.len(),
            synced.renamed.len()
        );
    }
}

/// Whether a kbuild file of the key's directory (or the central file) ever held the key's
/// variable in git's history: only then can the tree have lost a line the snapshot remembers.
/// Without git or a file to ask, the snapshot is taken at its word.
fn lost_from_history(tree: &std::path::Path, key: &import::sync::Key) -> bool {
    let (dir, object, _, mech) = key;
    // The per-object variable where the mechanism has one; a flag removal's lines all name
    // the flags' variable.
    let name = mech.get().directive_name();
    let var = match (object, &mech.get().form) {
        (Some(o), crate::mechanism::Form::Variable { .. }) => format!("{name}_{o}"),
        _ => name.to_string(),
    };
    let dir = tree.join(dir);
    let files: Vec<std::path::PathBuf> =
        [dir.join("Makefile"), dir.join("Kbuild"), tree.join(crate::emit::central::CENTRAL_FILE)]
            .into_iter()
            .filter(|f| f.is_file())
            .collect();
    files.is_empty() || files.iter().any(|f| crate::check::drift::history_had(f, &var))
}
