//! `pre-commit` (what the git hook runs) and `install-hook`.

use std::path::Path;

use clap::Args;

use super::context::{inputs, tree_problem, CommonArgs, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::diagnostic::{Code, Diagnostic, Diagnostics, Fix};
use crate::output;
use crate::review::hook;

pub fn pre_commit_run(args: &CommonArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    // git lists what is staged while the policy and the rules are read.
    let started = hook::start(args.tree.as_deref().unwrap_or(Path::new(".")));
    if let Some(note) = no_policy_here(args, defaults) {
        eprintln!("{note}");
        return EXIT_OK;
    }
    let Ok(inputs) = inputs(args, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let tree = inputs.tree.clone().unwrap_or_else(|| ".".into());
    let started = started.or_else(|_| hook::start(&tree));
    let on_disk = inputs.policy;
    let outcome = match started
        .and_then(|s| hook::pre_commit_started(s, &tree, &inputs.policy_path, Some(on_disk), &inputs.rules))
    {
        Ok(o) => o,
        Err(e) => {
            ui.report(&Diagnostics(vec![Diagnostic::error(Code::Usage, e).hint("run inside a git checkout")]));
            return EXIT_BAD_INPUT;
        }
    };
    // Diagnostics point into the staged text, which the working tree may not hold.
    for (path, text) in &outcome.sources {
        ui.sources.insert(path, text);
    }
    for c in &outcome.stale {
        out!("{}", c.diff());
    }
    ui.report(&outcome.diags.clone().sorted());
    if outcome.diags.has_bad_input() {
        return EXIT_BAD_INPUT;
    }
    if outcome.stale.is_empty() && !outcome.diags.has_errors() {
        return EXIT_OK;
    }
    // The closing line names the same fixes as the findings' `help:` lines, in the order to run
    // them, then what the hook judges: the index.
    let mut fixes = outcome.diags.fixes();
    if fixes.is_empty() && !outcome.stale.is_empty() {
        fixes.insert(Fix::GenMakefiles);
    }
    let fix = if fixes.is_empty() {
        "follow each `help:` above".to_string()
    } else {
        format!("{}, then stage what they wrote (`git add -u`)", Fix::sequence(&fixes, &defaults.program))
    };
    eprintln!("sanpolicy: the commit is out of sync with the policy; fix: {fix}");
    EXIT_FINDINGS
}

/// One note line when this branch has no policy (an upstream branch, before adoption): neither
/// the working tree nor git has it, so there is nothing to keep in sync and the commit passes.
fn no_policy_here(args: &CommonArgs, defaults: &Defaults) -> Option<String> {
    let tree = args.tree.clone().or_else(|| super::context::default_tree(defaults)).unwrap_or_else(|| ".".into());
    let policy = match &args.policy {
        Some(p) => p.clone(),
        None => tree.join(&defaults.policy),
    };
    if policy.exists() || hook::policy_in_git(&tree, &policy).unwrap_or(true) {
        return None;
    }
    Some(format!("sanpolicy: no policy on this branch (`{}`): nothing to check", policy.display()))
}

#[derive(Debug, Args)]
pub struct InstallHookArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Replace an existing pre-commit hook that sanpolicy did not write.
    #[arg(long)]
    pub force: bool,
}

pub fn install_run(args: &InstallHookArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let tree =
        args.common.tree.clone().or_else(|| super::context::default_tree(defaults)).unwrap_or_else(|| ".".into());
    if let Some(problem) = tree_problem(&tree) {
        ui.report(&Diagnostics(vec![problem]));
        return EXIT_BAD_INPUT;
    }
    let dir = match hook::hooks_dir(&tree) {
        Ok(d) => d,
        Err(e) => {
            ui.report(&Diagnostics(vec![
                Diagnostic::error(Code::Usage, e).hint("run inside the kernel's git checkout")
            ]));
            return EXIT_BAD_INPUT;
        }
    };
    let path = dir.join("pre-commit");
    if let Ok(existing) = crate::input::read_to_string(&path, crate::input::SOURCE_LIMIT) {
        if !existing.contains(hook::HOOK_MARKER) && !args.force {
            ui.report(&Diagnostics(vec![Diagnostic::error(
                Code::Usage,
                format!("`{}` exists and was not written by sanpolicy", path.display()),
            )
            .hint("pass `--force` to replace it, or call `sanpolicy pre-commit` from your own hook")]));
            return EXIT_BAD_INPUT;
        }
    }
    let program = std::env::current_exe().ok().filter(|_| defaults.program == "sanpolicy");
    // A relative `--policy` would be read from wherever git runs the hook: make it absolute.
    let policy = args.common.policy.as_deref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()));
    // git runs the hook at the repository's top: a tree below it is named from there.
    let in_repo = match hook::tree_in_repo(&tree) {
        Ok(rel) => rel,
        Err(e) => {
            ui.report(&Diagnostics(vec![
                Diagnostic::error(Code::Usage, e).hint("run inside the kernel's git checkout")
            ]));
            return EXIT_BAD_INPUT;
        }
    };
    let script = hook::hook_script(policy.as_deref(), program.as_deref(), Some(&in_repo));
    if let Err(e) = output::write_atomic(&path, &script).and_then(|()| make_executable(&path)) {
        eprintln!("error: cannot write `{}`: {e}", path.display());
        return EXIT_BAD_INPUT;
    }
    outln!("installed {}", path.display());
    EXIT_OK
}

fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}
