//! `gen-makefiles`: write the policy's blocks into a tree, or fragments into a directory.

use std::path::{Path, PathBuf};

use clap::Args;

use super::context::{display, inputs, lock_tree, plan_for, write, CommonArgs, Inputs, Ui};
use super::{summary, Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::output::{self, Change};
use crate::review::effective;

#[derive(Debug, Args)]
pub struct GenArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Write nothing; exit 1 with a unified diff per stale file.
    #[arg(long)]
    pub check: bool,
    /// Write standalone fragments into DIR instead of a tree.
    #[arg(long, value_name = "DIR", conflicts_with = "tree")]
    pub out: Option<PathBuf>,
    /// Overwrite generated blocks even when they were edited by hand.
    #[arg(long)]
    pub force: bool,
    /// With --check: also search the whole tree for blocks in directories the policy no longer
    /// names (writing always does; `check` always does). Without it --check reads only the
    /// policy's directories, fast enough for a pre-commit hook.
    #[arg(long, requires = "check")]
    pub sweep: bool,
    /// Require real reasons: refuse (exit 2, nothing written) while a unit's reason is still a
    /// `TODO(sanpolicy import)` placeholder.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(args: &GenArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    // Writing into a tree holds its lock from before the first read until written.
    let tree = args.common.tree.as_deref().or(defaults.tree.as_deref()).filter(|_| !args.check && args.out.is_none());
    let Ok(lock) = lock_tree(tree, ui) else { return EXIT_BAD_INPUT };
    let Ok(inputs) = inputs(&args.common, defaults, args.out.is_none(), ui) else { return EXIT_BAD_INPUT };
    if args.strict {
        let placeholders = crate::check::placeholder_errors(&inputs.policy);
        if placeholders.has_errors() {
            ui.report(&placeholders);
            eprintln!("error: nothing was written");
            return EXIT_BAD_INPUT;
        }
    }
    // The kbuild files and the effective snapshot are computed on both cores.
    let (mut plan, snapshot) = std::thread::scope(|scope| {
        let snapshot = scope.spawn(|| effective_snapshot(&inputs, args.out.as_deref(), defaults));
        let plan = plan_for(&inputs, args.out.as_deref(), defaults, args.force, !args.check || args.sweep);
        (plan, snapshot.join())
    });
    match snapshot {
        Ok(change) => plan.changes.push(change),
        Err(_) => {
            eprintln!("error: computing the effective snapshot failed");
            return EXIT_BAD_INPUT;
        }
    }
    let blocking = plan.diags.clone().sorted();
    if blocking.has_errors() {
        ui.report(&blocking);
        // In --check mode a hand-edited block is drift like any other (exit 1); writing it
        // would lose the edit, so a write refuses as for bad input (exit 2).
        if args.check && !blocking.has_bad_input() {
            eprintln!("error: generated files are out of date; move the hand edit into the policy, then run `{} gen-makefiles --force`", defaults.program);
            return EXIT_FINDINGS;
        }
        eprintln!("error: nothing was written");
        return EXIT_BAD_INPUT;
    }
    ui.report(&blocking);
    let stale: Vec<_> = plan.changes.iter().filter(|c| !c.is_noop()).collect();
    if args.check {
        for c in &stale {
            out!("{}", c.diff());
        }
        if stale.is_empty() {
            eprintln!("{} generated file(s) up to date", plan.changes.len());
            return EXIT_OK;
        }
        eprintln!(
            "error: {} generated file(s) out of date; run `{} gen-makefiles` and commit the result",
            stale.len(),
            defaults.program
        );
        return EXIT_FINDINGS;
    }
    let unwritable = output::preflight(&plan.changes);
    if unwritable.has_errors() {
        ui.report(&unwritable);
        eprintln!("error: nothing was written");
        return EXIT_BAD_INPUT;
    }
    if write(lock.as_ref(), &plan.changes, ui).is_err() {
        return EXIT_BAD_INPUT;
    }
    let target = inputs
        .tree
        .as_deref()
        .filter(|_| args.out.is_none())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| args.out.clone().unwrap_or(defaults.out.clone()));
    outln!(
        "{}",
        summary::render(
            &inputs.policy,
            &inputs.rules,
            &display(&inputs.policy_path),
            &display(&target),
            plan.changes.len(),
            stale.len()
        )
    );
    EXIT_OK
}

/// The committed effective-policy snapshot: beside the policy, or in `--out` when given. It is
/// computed from the policy's blocks alone, so it reads the same with or without a tree.
fn effective_snapshot(inputs: &Inputs, out: Option<&Path>, defaults: &Defaults) -> Change {
    let beside = effective::snapshot_path(&inputs.policy_path);
    let path = match out {
        Some(dir) => dir.join(beside.file_name().unwrap_or_default()),
        None => beside,
    };
    let command = format!("{} gen-makefiles", defaults.program);
    let mut change =
        effective::snapshot_change(&inputs.policy, &inputs.rules, &path, &display(&inputs.policy_path), &command);
    change.display = display(&path);
    change
}
