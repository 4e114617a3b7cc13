//! `gen-makefiles`: write the policy's blocks into a tree, or fragments into a directory.

use std::path::{Path, PathBuf};

use clap::Args;

use super::context::{display, inputs, lock_tree, plan_with_snapshot, start_sweep, write, CommonArgs, Sweeping, Ui};
use super::{summary, Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::check::judge::{judge, Mode};

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
    let tree = inputs.tree.as_deref().filter(|_| args.out.is_none());
    let mode = if args.check { Mode::Drift } else { Mode::Write { force: args.force } };
    let verdict = judge(&inputs.policy, &inputs.rules, tree, &plan, &base, mode, &defaults.program);
    let stale = verdict.stale.len();
    if args.check {
        for i in &verdict.stale {
            out!("{}", plan.changes[*i].diff());
        }
        ui.report(&verdict.diags);
        let code = verdict.exit_code();
        if code == EXIT_OK {
            eprintln!("{} generated file(s) up to date", plan.changes.len());
        } else if code == EXIT_FINDINGS {
            let drift = verdict.diags.iter().filter(|d| d.is_error()).count();
            let fix = verdict.fix_line(&defaults.program).unwrap_or_else(|| "follow each `help:` above".into());
            eprintln!("error: {drift} drift finding(s), {stale} file(s) out of date; fix: {fix}");
        } else {
            eprintln!("error: the check could not be made (see above)");
        }
        return code;
    }
    ui.report(&verdict.diags);
    if !verdict.may_write {
        match verdict.fix_line(&defaults.program) {
            Some(fix) => eprintln!("error: nothing was written; fix: {fix}"),
            None => eprintln!("error: nothing was written"),
        }
        return verdict.exit_code();
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
            stale
        )
    );
    EXIT_OK
}
