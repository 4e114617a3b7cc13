//! `gen-makefiles`: write the policy's blocks into a tree, or fragments into a directory.

use std::path::{Path, PathBuf};

use clap::Args;

use super::context::{display, inputs, lock_tree, plan_with_snapshot, start_sweep, write, CommonArgs, Sweeping, Ui};
use super::{summary, Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::diagnostic::Diagnostics;
use crate::output;

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
    let tree = args.common.tree.clone().or_else(|| super::context::default_tree(defaults));
    let tree = tree.filter(|_| !args.check && args.out.is_none());
    let Ok(lock) = lock_tree(tree.as_deref(), ui) else { return EXIT_BAD_INPUT };
    let early = if args.out.is_none() { start_sweep(&args.common, defaults) } else { None };
    let Ok(inputs) = inputs(&args.common, defaults, args.out.is_none(), ui) else { return EXIT_BAD_INPUT };
    if args.strict {
        let placeholders = crate::check::placeholder_errors(&inputs.policy);
        if placeholders.has_errors() {
            ui.report(&placeholders);
            eprintln!("error: nothing was written");
            return EXIT_BAD_INPUT;
        }
    }
    // In-place, `--check` sees a hand-added line anywhere in the tree: it always sweeps.
    let sweep = !args.check || args.sweep || inputs.policy.layout == crate::policy::Layout::InPlace;
    let sweep = if sweep { Sweeping::yes(early) } else { Sweeping::No };
    let (plan, base) = plan_with_snapshot(&inputs, args.out.as_deref(), defaults, args.force, sweep);
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
    let tree = inputs.tree.as_deref().filter(|_| args.out.is_none());
    if args.check {
        // The same drift `check` and the hook report: stale files, and lines the policy does not own.
        let drift = match tree {
            Some(_) => crate::check::drift::findings(&inputs.policy, &plan, &inputs.rules, &base, &defaults.program),
            None => Default::default(),
        };
        for c in &stale {
            out!("{}", c.diff());
        }
        ui.report(&drift.clone().sorted());
        if stale.is_empty() && drift.is_empty() {
            eprintln!("{} generated file(s) up to date", plan.changes.len());
            return EXIT_OK;
        }
        eprintln!(
            "error: {} drift finding(s) ({} file(s) out of date); follow each `help:` above (`{} gen-makefiles` writes the policy, `{} sync` takes the tree's changes into it)",
            drift.0.len(),
            stale.len(),
            defaults.program,
            defaults.program
        );
        return EXIT_FINDINGS;
    }
    if let Some(tree) = tree {
        let mut refused = Diagnostics::default();
        if !args.force {
            refused.extend(crate::check::drift::tree_moved(
                &inputs.policy,
                &plan,
                &inputs.rules,
                &base,
                &defaults.program,
            ));
        }
        refused.extend(crate::check::drift::unwritable(&inputs.policy, &plan, &base, &defaults.program));
        refused.extend(crate::check::new_problems(&inputs.policy, &inputs.rules, tree, &plan, &base));
        if refused.has_errors() {
            ui.report(&refused.sorted());
            eprintln!("error: nothing was written");
            return EXIT_BAD_INPUT;
        }
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
