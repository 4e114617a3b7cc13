//! `check`: validate the policy and, with a tree, the tree against it.

use clap::Args;

use super::context::{display, inputs, plan_for, CommonArgs, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::check;
use crate::diagnostic::{Code, Diagnostic, Location};

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Require real reasons: a `TODO(sanpolicy import)` placeholder is an error (exit 2), not a
    /// warning. For curated policies, in CI.
    #[arg(long)]
    pub strict: bool,
    /// Also check a Cargo workspace against the policy's `[[crate]]` entries: unknown crates,
    /// crates defining sanitizer hooks that are not exempt, undocumented `#[sanitize]` items, and
    /// drift of the generated profile tables. Without `--tree`, no kernel tree is read.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<std::path::PathBuf>,
    /// A kernel `.config`: judge the requirements for that build instead of every configuration.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

pub fn run(args: &CheckArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let mut common = args.common.clone();
    if let (Some(ws), None) = (&args.workspace, &common.policy) {
        common.policy = Some(ws.join(super::gen_cargo::POLICY_IN_WORKSPACE));
    }
    let with_tree = args.workspace.is_none() || args.common.tree.is_some();
    let Ok(inputs) = inputs(&common, defaults, with_tree, ui) else { return EXIT_BAD_INPUT };
    let config = match args.config.as_deref().map(super::dotconfig::read).transpose() {
        Ok(c) => c,
        Err(d) => {
            ui.report(&d);
            return EXIT_BAD_INPUT;
        }
    };
    let plan = plan_for(&inputs, None, defaults, false, true);
    let mut diags = plan.diags.clone();
    diags.extend(check::run_for(&inputs.policy, &inputs.rules, inputs.tree.as_deref(), &plan, config.as_ref()));
    if args.strict {
        // One error per placeholder replaces the summary warning.
        diags.0.retain(|d| d.code != Code::PlaceholderReason);
        diags.extend(check::placeholder_errors(&inputs.policy));
    }
    if let Some(tree) = &inputs.tree {
        for c in plan.changes.iter().filter(|c| !c.is_noop()) {
            diags.push(
                Diagnostic::error(Code::StaleFile, format!("`{}` is not in sync with the policy", c.display))
                    .at(Location::file(&tree.join(&c.display)))
                    .hint(format!("run `{} gen-makefiles` (see `--check` for the diff)", defaults.program)),
            );
        }
    }
    if let Some(ws) = &args.workspace {
        diags.extend(workspace_findings(&inputs.policy, &inputs.policy_path, ws, defaults));
    }
    let diags = diags.sorted();
    ui.report(&diags);
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.0.len() - errors;
    eprintln!(
        "{}: {} unit(s), {} requirement(s): {errors} error(s), {warnings} warning(s)",
        display(&inputs.policy_path),
        inputs.policy.units.len(),
        inputs.policy.requirements.len()
    );
    if diags.has_bad_input() {
        EXIT_BAD_INPUT
    } else if errors > 0 {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    }
}

/// `gen-cargo --check`'s findings, as diagnostics (drift becomes one `stale-file` error).
fn workspace_findings(
    policy: &crate::policy::Policy,
    policy_path: &std::path::Path,
    ws: &std::path::Path,
    defaults: &Defaults,
) -> crate::diagnostic::Diagnostics {
    let plan = match crate::cargo::plan(policy, policy_path, ws, &crate::cargo::Options::default()) {
        Ok(p) => p,
        Err(d) => return d,
    };
    let mut diags = plan.diags;
    if let Some(c) = plan.change.as_ref().filter(|c| !c.is_noop()) {
        diags.push(
            Diagnostic::error(
                Code::StaleFile,
                format!("`{}` profile tables are not in sync with the policy", display(&c.path)),
            )
            .at(Location::file(&c.path))
            .hint(format!("run `{} gen-cargo --workspace {}`", defaults.program, ws.display())),
        );
    }
    diags
}
