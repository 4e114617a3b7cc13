//! `check`: validate the policy and, with a tree, the tree against it. It renders the judge's
//! verdict (`Mode::Full`): as diagnostics and one closing line, as the verdict's JSON, or as
//! SARIF for code-scanning CI.

use clap::{Args, ValueEnum};

use super::context::{display, inputs, judged, plan, start_sweep, CommonArgs, Sweeping, Ui};
use super::{Defaults, EXIT_BAD_INPUT};
use crate::check::judge::{judge, Mode, Verdict};
use crate::diagnostic::{Code, Diagnostic, Diagnostics, Fix, Location};

/// How `check` prints its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckFormat {
    /// Diagnostics with source snippets, and one closing line.
    Text,
    /// The verdict as JSON (schema in the book's reference).
    Json,
    /// SARIF 2.1.0, for code-scanning CI (rule ids are the codes).
    Sarif,
}

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
    #[arg(long, value_enum, default_value = "text")]
    pub format: CheckFormat,
}

/// The closing line: the verdict in numbers, the same shape whatever was found.
fn summary(policy: &crate::policy::Policy, path: &std::path::Path, verdict: &Verdict) -> String {
    let c = &verdict.counts;
    let not_applicable = verdict.diagnostics.iter().filter(|d| d.code == Code::NotApplicable).count();
    let ok = verdict.exit_code() == crate::diagnostic::EXIT_OK;
    format!(
        "check {}: {}: {} unit(s), {} requirement(s) ({not_applicable} not applicable here); {} drift, {} finding(s), {} acknowledged, {} warning(s)",
        if ok { "ok" } else { "FAILED" },
        display(path),
        policy.units.len(),
        policy.requirements.len(),
        c.drift,
        c.findings,
        c.acknowledged,
        c.warnings,
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
    ui.invocation.config = args.config.as_ref().map(|c| c.display().to_string());
    ui.invocation.workspace = args.workspace.as_ref().map(|w| w.display().to_string());
    let config = match args.config.as_deref().map(super::dotconfig::read).transpose() {
        Ok(c) => c,
        Err(d) => {
            ui.report(&d);
            return EXIT_BAD_INPUT;
        }
    };
    let plan = plan(&inputs, None, defaults, false, Sweeping::yes(early));
    let mut extra = Diagnostics::default();
    if args.strict {
        extra.extend(crate::check::placeholder_errors(&inputs.policy));
    }
    if let Some(ws) = &args.workspace {
        extra.extend(workspace_findings(&inputs.policy, &inputs.policy_path, ws));
    }
    let mode = Mode::Full { config: config.as_ref() };
    let mut verdict = judge(judged(&inputs, None, ui), &plan, mode);
    if !extra.is_empty() {
        // `--strict` and `--workspace` add findings of their own; one error per placeholder
        // replaces the summary warning.
        let mut diags = verdict.diagnostics.clone();
        if args.strict {
            diags.0.retain(|d| d.code != Code::PlaceholderReason);
        }
        diags.extend(extra);
        verdict = crate::check::judge::with_findings(verdict, diags.sorted(), &ui.invocation);
    }
    match args.format {
        CheckFormat::Json => {
            outln!("{}", serde_json::to_string_pretty(&verdict).unwrap_or_default());
            return verdict.exit_code();
        }
        CheckFormat::Sarif => {
            let sarif = crate::review::sarif::of(&verdict, &inputs.policy_path, &ui.invocation);
            outln!("{}", serde_json::to_string_pretty(&sarif).unwrap_or_default());
            return verdict.exit_code();
        }
        CheckFormat::Text => {}
    }
    // Requirements that do not apply to this tree are counted in the summary; `--verbose` lists
    // them, and so does `--config` (which requirements this build leaves out, and why).
    let listed = args.verbose || config.is_some();
    let shown = verdict.diagnostics.iter().filter(|d| {
        if args.quiet {
            d.is_error()
        } else {
            listed || d.code != Code::NotApplicable
        }
    });
    ui.report(&Diagnostics(shown.cloned().collect()));
    eprintln!("{}", summary(&inputs.policy, &inputs.policy_path, &verdict));
    if let Some(advice) = verdict.advice().filter(|_| verdict.exit_code() != crate::diagnostic::EXIT_OK) {
        eprintln!("{advice}");
    }
    verdict.exit_code()
}

/// `gen-cargo --check`'s findings, as diagnostics (drift becomes one `stale-file` error).
fn workspace_findings(
    policy: &crate::policy::Policy,
    policy_path: &std::path::Path,
    ws: &std::path::Path,
) -> Diagnostics {
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
            .hint(crate::hint!["run ", Fix::GenCargo])
            .fixed_by(Fix::GenCargo),
        );
    }
    diags
}
