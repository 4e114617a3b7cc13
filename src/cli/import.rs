//! `import`: a kernel tree's directives into a policy, and with `--adopt` into generated blocks.

use std::path::PathBuf;

use clap::Args;

use super::context::{display, rules_for_tree, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::review::effective;
use crate::{import, output, policy};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Kernel source tree (default: `.` for sanpolicy).
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
    /// Where to write the policy (`-` for standard output; default: `sanitizer-policy.toml` in the tree).
    #[arg(long, value_name = "FILE", visible_alias = "policy")]
    pub out: Option<PathBuf>,
    /// Also rewrite the kbuild files: the imported lines move into generated blocks.
    #[arg(long)]
    pub adopt: bool,
    /// Overwrite an existing policy file.
    #[arg(long)]
    pub force: bool,
}

const IMPORT_HEADER: &str = "Imported from a kernel tree by `sanpolicy import`.
Each reason is the tree's own comment above the lines; `TODO(sanpolicy import)` marks units
the tree gives no reason for. Regenerate the Makefiles with `sanpolicy gen-makefiles`.";

pub fn run(args: &ImportArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Some(tree) = args.tree.clone().or_else(|| defaults.tree.clone()) else {
        eprintln!("error: `import` needs `--tree DIR`");
        return EXIT_BAD_INPUT;
    };
    let Ok(rules) = rules_for_tree(&tree, ui) else { return EXIT_BAD_INPUT };
    let out = args.out.clone().unwrap_or_else(|| tree.join(&Defaults::binary().policy));
    let to_stdout = out.as_os_str() == "-";
    if !to_stdout && out.exists() && !args.force {
        ui.report(&Diagnostics(vec![Diagnostic::error(Code::Io, format!("`{}` already exists", out.display()))
            .hint("pass `--force` to overwrite it, or `--out FILE`")]));
        return EXIT_BAD_INPUT;
    }
    let scan = with_spinner(&format!("reading kbuild files under {}", tree.display()), || import::scan(&tree, &rules));
    if scan.diags.has_errors() {
        // A kbuild file the import cannot read back (broken markers, a hand-edited block):
        // adopting around it would leave a tree every later run refuses.
        ui.report(&scan.diags.clone().sorted());
        eprintln!("error: the tree has kbuild files import cannot read; nothing was written");
        return EXIT_BAD_INPUT;
    }
    let text = import::policy_toml(&scan.units, IMPORT_HEADER);
    let (policy, diags) = policy::parse_str(&out, &text);
    if diags.has_errors() {
        ui.sources.insert(&out, &text);
        ui.report(&diags);
        eprintln!("error: the imported policy does not validate (a sanpolicy bug); nothing was written");
        return EXIT_BAD_INPUT;
    }
    let mut changes = Vec::new();
    if !to_stdout {
        changes.push(output::Change {
            path: out.clone(),
            display: display(&out),
            old: std::fs::read_to_string(&out).ok(),
            new: Some(text.clone()),
        });
        // The policy's effective-instrumentation snapshot starts out in sync, as gen-makefiles keeps it.
        let command = format!("{} gen-makefiles", defaults.program);
        let snapshot = effective::snapshot_path(&out);
        changes.push(effective::snapshot_change(&policy, &rules, &snapshot, &display(&out), &command));
    }
    if args.adopt {
        changes.extend(import::adopt(&scan.taken, &policy, &rules, &tree));
    }
    ui.report(&scan.diags.clone().sorted());
    if to_stdout {
        out!("{text}");
    }
    if let Err(e) = output::apply(&changes) {
        eprintln!("error: writing failed: {e}");
        return EXIT_BAD_INPUT;
    }
    let placeholders = scan.units.iter().filter(|u| u.reasons.is_empty()).count();
    let count = |code: Code| scan.diags.iter().filter(|d| d.code == code).count();
    eprintln!(
        "{}: {} kbuild files read, {} directives, {} units ({placeholders} without a reason), {} not representable, {} stale{}",
        tree.display(),
        scan.files_read,
        scan.directives,
        scan.units.len(),
        count(Code::Unrepresentable),
        count(Code::MissingSource),
        if args.adopt { format!(", {} kbuild files adopted", changes.iter().filter(|c| c.path != out && !c.is_noop()).count()) } else { String::new() }
    );
    EXIT_OK
}

/// Run `work` with a spinner on a terminal; nothing when stderr is piped or under CI.
fn with_spinner<T>(message: &str, work: impl FnOnce() -> T) -> T {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() || std::env::var_os("CI").is_some() {
        return work();
    }
    let spinner = indicatif::ProgressBar::new_spinner().with_message(message.to_string());
    spinner.enable_steady_tick(std::time::Duration::from_millis(80));
    let result = work();
    spinner.finish_and_clear();
    result
}
