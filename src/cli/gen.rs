//! `gen-makefiles`: write the policy's lines into a tree (or fragments into a directory), or with
//! `--check` say whether the tree is exactly their generation. Both render the judge's verdict.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::context::{display, inputs, judged, lock_tree, plan, start_sweep, write, CommonArgs, Sweeping, Ui};
use super::{summary, Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::check::judge::{judge, Mode, Verdict};

/// How `gen-makefiles --check` prints its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GenFormat {
    /// A unified diff per stale file and the findings.
    Text,
    /// The verdict as JSON (schema in the book's reference).
    Json,
}

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
    /// Overwrite what the tree changed since the last generation (generated blocks edited by
    /// hand, lines a merge changed).
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
    /// Stage what is written (`git add`), for a commit the pre-commit hook judges.
    #[arg(long, conflicts_with_all = ["check", "out"])]
    pub stage: bool,
    /// With --check: how to print the verdict.
    #[arg(long, value_enum, default_value = "text", requires = "check")]
    pub format: GenFormat,
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
    let plan = plan(&inputs, args.out.as_deref(), defaults, args.force, sweep);
    let judged = judged(&inputs, args.out.as_deref(), ui);
    let mode = if args.check { Mode::Drift } else { Mode::Write { force: args.force } };
    let verdict = judge(judged, &plan, mode);
    if args.check {
        return render_check(&verdict, &plan, args.format, ui);
    }
    ui.report(&verdict.diagnostics);
    if !verdict.may_write {
        eprintln!("{}", verdict.closing("error: nothing was written"));
        return verdict.exit_code();
    }
    if write(lock.as_ref(), &plan.changes, ui).is_err() {
        return EXIT_BAD_INPUT;
    }
    let written: Vec<&Path> = verdict.stale.iter().map(|i| plan.changes[*i].path.as_path()).collect();
    if args.stage && super::hook::stage(&written, ui).is_err() {
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
            verdict.stale.len()
        )
    );
    EXIT_OK
}

/// `--check`: the diff of every stale file, the findings, and one closing line.
fn render_check(verdict: &Verdict, plan: &crate::generate::Plan, format: GenFormat, ui: &mut Ui) -> u8 {
    let code = verdict.exit_code();
    if format == GenFormat::Json {
        outln!("{}", serde_json::to_string_pretty(verdict).unwrap_or_default());
        return code;
    }
    for i in &verdict.stale {
        out!("{}", plan.changes[*i].diff());
    }
    ui.report(&verdict.diagnostics);
    match code {
        EXIT_OK => eprintln!("{} generated file(s) up to date", plan.changes.len()),
        super::EXIT_FINDINGS => eprintln!(
            "{}",
            verdict.closing(&format!(
                "error: {} drift finding(s), {} file(s) out of date",
                verdict.counts.drift,
                verdict.stale.len()
            ))
        ),
        _ => eprintln!("error: the check could not be made (see above)"),
    }
    if let Some(line) = verdict.remaining_line(&ui.invocation) {
        eprintln!("{line}");
    }
    code
}
