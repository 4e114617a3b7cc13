//! `explain`, `report` and `diff`: reading the policy's effect, for people and for scripts.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::context::{display, inputs, plan_for, CommonArgs, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::policy;
use crate::review::{diff, explain, report};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Objects (`kernel/locking/lockdep.o`) or directories (`mm/kasan/`) to explain.
    #[arg(required = true, value_name = "OBJECT")]
    pub objects: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// A kernel `.config`: answer for that build (every condition, `*_ALL` switch and
    /// mechanism option from it, and whether the object is a kernel object in it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn explain_run(args: &ExplainArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let config = match args.config.as_deref().map(super::dotconfig::read).transpose() {
        Ok(c) => c,
        Err(d) => {
            ui.report(&d);
            return EXIT_BAD_INPUT;
        }
    };
    let plan = inputs.tree.as_ref().map(|_| plan_for(&inputs, None, defaults, true, false));
    let mut json = Vec::new();
    for object in &args.objects {
        let (tree, plan) = (inputs.tree.as_deref(), plan.as_ref());
        let e = match explain::explain_for(&inputs.policy, &inputs.rules, tree, plan, object, config.as_ref()) {
            Ok(e) => e,
            Err(message) => {
                ui.report(&Diagnostics(vec![Diagnostic::error(Code::BadPath, message)]));
                return EXIT_BAD_INPUT;
            }
        };
        match args.format {
            Format::Json => json.push(explain::to_json(&e, &inputs.policy)),
            _ => out!("{}", explain::render_text(&e, &inputs.policy)),
        }
    }
    if args.format == Format::Json {
        outln!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
    }
    EXIT_OK
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: Format,
}

pub fn report_run(args: &ReportArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let r = report::build(&inputs.policy, &inputs.rules, &display(&inputs.policy_path));
    match args.format {
        Format::Json => {
            outln!("{}", serde_json::to_string_pretty(&report::to_json(&r, &inputs.policy)).unwrap_or_default())
        }
        _ => out!("{}", report::markdown(&r, &inputs.policy)),
    }
    EXIT_OK
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Compare the policy with its version at this git revision (default: HEAD).
    #[arg(long, value_name = "REV", conflicts_with = "files")]
    pub base: Option<String>,
    /// Or compare two policy files: OLD NEW.
    #[arg(num_args = 2, value_names = ["OLD", "NEW"])]
    pub files: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: Format,
}

pub fn diff_run(args: &DiffArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let (old, new, title) = if let [old, new] = args.files.as_slice() {
        let common = CommonArgs { policy: Some(new.clone()), tree: args.common.tree.clone() };
        let Ok(inputs) = inputs(&common, defaults, true, ui) else { return EXIT_BAD_INPUT };
        let (old_policy, diags) = policy::load(old);
        if report_bad(&diags, ui) {
            return EXIT_BAD_INPUT;
        }
        (old_policy, inputs, format!("`{}` → `{}`", display(old), display(new)))
    } else {
        let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
        let rev = args.base.clone().unwrap_or_else(|| "HEAD".into());
        let reader = match diff::git_reader(&rev, &inputs.policy_path) {
            Ok(r) => r,
            Err(e) => {
                ui.report(&Diagnostics(vec![Diagnostic::error(Code::Io, e)
                    .hint("run inside the git repository that holds the policy, or pass OLD NEW files")]));
                return EXIT_BAD_INPUT;
            }
        };
        let (old_policy, diags) = policy::load_with(&inputs.policy_path, &reader);
        if report_bad(&diags, ui) {
            return EXIT_BAD_INPUT;
        }
        let title = format!("`{}` since {rev}", display(&inputs.policy_path));
        (old_policy, inputs, title)
    };
    let changes = diff::diff(&old, &new.policy, &new.rules);
    match args.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&diff::to_json(&changes)).unwrap_or_default()),
        Format::Markdown => out!("{}", diff::markdown(&changes, &title)),
        Format::Text => {
            for c in &changes {
                outln!("{}", diff::line(c));
            }
        }
    }
    EXIT_OK
}

fn report_bad(diags: &Diagnostics, ui: &mut Ui) -> bool {
    if diags.has_errors() {
        ui.report(diags);
        eprintln!("error: the base policy does not parse");
        return true;
    }
    false
}
