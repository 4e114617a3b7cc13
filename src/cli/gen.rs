//! `gen-makefiles`: write the policy's blocks into a tree, or fragments into a directory.

use std::path::{Path, PathBuf};

use clap::Args;

use super::context::{display, inputs, plan_for, CommonArgs, Inputs, Ui};
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
}

pub fn run(args: &GenArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(&args.common, defaults, args.out.is_none(), ui) else { return EXIT_BAD_INPUT };
    let mut plan = plan_for(&inputs, args.out.as_deref(), defaults, args.force, !args.check || args.sweep);
    plan.changes.push(effective_snapshot(&inputs, args.out.as_deref(), defaults));
    let blocking = plan.diags.clone().sorted();
    if blocking.has_errors() {
        ui.report(&blocking);
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
    if let Err(e) = output::apply(&plan.changes) {
        eprintln!("error: writing failed: {e}");
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
    let table = effective::compute(&inputs.policy, &inputs.rules, None);
    let text = effective::render(&table, &display(&inputs.policy_path), &format!("{} gen-makefiles", defaults.program));
    Change { display: display(&path), old: std::fs::read_to_string(&path).ok(), new: Some(text), path }
}
