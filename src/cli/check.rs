//! `check`: validate the policy and, with a tree, the tree against it.

use clap::Args;

use super::context::{display, inputs, plan_with_snapshot, start_sweep, CommonArgs, Sweeping, Ui};
use super::{Defaults, EXIT_BAD_INPUT};
use crate::check::judge::{judge, Mode};
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
    /// Print only what fails the run (and the summary line).
    #[arg(long, short, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also list the requirements that do not apply to this tree.
    #[arg(long, short)]
    pub verbose: bool,
    /// A kernel `.config`: judge the requirements for that build instead of every configuration.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

/// The closing line: the verdict in numbers, the same shape whatever was found.
fn summary(policy: &crate::policy::Policy, path: &std::path::Path, diags: &crate::diagnostic::Diagnostics) -> String {
    let count = |f: &dyn Fn(&Diagnostic) -> bool| diags.iter().filter(|d| f(d)).count();
    let drift = count(&|d| d.is_error() && d.code.is_drift());
    let findings = count(&|d| d.is_error() && !d.code.is_drift());
    let acknowledged = count(&|d| d.code == Code::Acknowledged);
    let not_applicable = count(&|d| d.code == Code::NotApplicable);
    let warnings = count(&|d| d.severity == crate::diagnostic::Severity::Warning);
    let verdict = if drift + findings == 0 { "ok" } else { "FAILED" };
    format!(
        "check {verdict}: {}: {} unit(s), {} requirement(s) ({not_applicable} not applicable here); {drift} drift, {findings} finding(s), {acknowledged} acknowledged, {warnings} warning(s)",
        display(path),
        policy.units.len(),
        policy.requirements.len()
    )
}

pub fn run(args: &CheckArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let mut common = args.common.clone();
    if let (Some(ws), None) = (&args.workspace, &common.policy) {
        // Not a workspace: the policy is looked for in `ws` and `cargo metadata` says why later.
        let policy = super::gen_cargo::default_policy(ws);
        common.policy = Some(policy.unwrap_or_else(|_| ws.join(super::gen_cargo::POLICY_IN_WORKSPACE)));
    }
    let with_tree = args.workspace.is_none() || args.common.tree.is_some();
    let early = if with_tree { start_sweep(&common, defaults) } else { None };
    let Ok(inputs) = inputs(&common, defaults, with_tree, ui) else { return EXIT_BAD_INPUT };
    let config = match args.config.as_deref().map(super::dotconfig::read).transpose() {
        Ok(c) => c,
        Err(d) => {
            ui.report(&d);
            return EXIT_BAD_INPUT;
        }
    };
    let (plan, base) = plan_with_snapshot(&inputs, None, defaults, false, Sweeping::yes(early));
    let tree = inputs.tree.as_deref();
    let mode = Mode::Full { config: config.as_ref() };
    let mut diags = judge(&inputs.policy, &inputs.rules, tree, &plan, &base, mode, &defaults.program).diags;
    if args.strict {
        // One error per placeholder replaces the summary warning.
        diags.0.retain(|d| d.code != Code::PlaceholderReason);
        diags.extend(crate::check::placeholder_errors(&inputs.policy));
    }
    if let Some(ws) = &args.workspace {
        diags.extend(workspace_findings(&inputs.policy, &inputs.policy_path, ws, defaults));
    }
    let diags = diags.sorted();
    // Requirements that do not apply to this tree are counted in the summary; `--verbose` lists
    // them, and so does `--config` (which requirements this build leaves out, and why).
    let listed = args.verbose || config.is_some();
    let shown =
        diags.iter().filter(|d| if args.quiet { d.is_error() } else { listed || d.code != Code::NotApplicable });
    ui.report(&crate::diagnostic::Diagnostics(shown.cloned().collect()));
    eprintln!("{}", summary(&inputs.policy, &inputs.policy_path, &diags));
    let fixes = diags.fixes();
    if !fixes.is_empty() {
        eprintln!("fix: {}", crate::diagnostic::Fix::sequence(&fixes, &defaults.program));
    }
    crate::check::judge::exit_code_of(&diags)
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
