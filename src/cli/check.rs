//! `check`: validate the policy and, with a tree, the tree against it.

use super::context::{display, inputs, plan_for, CommonArgs, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::check;
use crate::diagnostic::{Code, Diagnostic, Location};

pub fn run(args: &CommonArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(args, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let plan = plan_for(&inputs, None, defaults, false, true);
    let mut diags = plan.diags.clone();
    diags.extend(check::run(&inputs.policy, &inputs.rules, inputs.tree.as_deref(), &plan));
    if let Some(tree) = &inputs.tree {
        for c in plan.changes.iter().filter(|c| !c.is_noop()) {
            diags.push(
                Diagnostic::error(Code::StaleFile, format!("`{}` is not in sync with the policy", c.display))
                    .at(Location::file(&tree.join(&c.display)))
                    .hint(format!("run `{} gen-makefiles` (see `--check` for the diff)", defaults.program)),
            );
        }
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
