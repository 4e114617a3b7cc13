//! `pre-commit` (what the git hook runs) and `install-hook`.

use std::path::Path;

use clap::Args;

use super::context::{display, inputs, tree_problem, CommonArgs, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::check::judge::{judge, Mode};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::output;
use crate::output::Change;
use crate::review::hook;

#[derive(Debug, Args)]
pub struct PreCommitArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// How to print the verdict.
    #[arg(long, value_enum, default_value = "text")]
    pub format: super::gen::GenFormat,
}

pub fn pre_commit_run(args: &PreCommitArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let common = &args.common;
    // git lists what is staged while the policy and the rules are read.
    let started = hook::start(common.tree.as_deref().unwrap_or(Path::new(".")));
    if let Some(note) = no_policy_here(common, defaults) {
        eprintln!("{note}");
        return EXIT_OK;
    }
    let Ok(inputs) = inputs(common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let tree = inputs.tree.clone().unwrap_or_else(|| ".".into());
    let started = started.or_else(|_| hook::start(&tree));
    let on_disk = inputs.policy.clone();
    let outcome = match started
        .and_then(|s| hook::pre_commit_started(s, &tree, &inputs.policy_path, Some(on_disk), &inputs.rules))
    {
        Ok(o) => o,
        Err(e) => {
            ui.report(&Diagnostics(vec![Diagnostic::error(Code::Usage, e).hint("run inside a git checkout")]));
            return EXIT_BAD_INPUT;
        }
    };
    // The fixes are for what is staged: they stage what they write, and name the tree so that
    // they run wherever in the repository the user committed from.
    ui.invocation.stage = true;
    if !outcome.prefix.is_empty() {
        ui.invocation.tree = std::path::absolute(&tree).ok().map(|t| t.display().to_string());
        // A policy the user named is named the same way: relative to the top, it would not be
        // found from the directory the user committed in.
        if let Some(policy) = ui.invocation.policy.take() {
            ui.invocation.policy = std::path::absolute(&policy).ok().map(|p| p.display().to_string());
        }
    }
    let judged = crate::check::judge::Inputs {
        policy: &outcome.judged,
        rules: &inputs.rules,
        tree: Some(&tree),
        invocation: &ui.invocation,
    };
    let mut verdict = judge(judged, &outcome.plan, Mode::Staged { unstaged: &[] });
    if !verdict.fixes.is_empty() {
        // A fix runs on the working tree: where it holds something else than the index in a
        // file the fix reads or writes, it would not judge what the hook judged.
        let unstaged = hook::unstaged(&outcome.repo, &outcome.fixed_files()).unwrap_or_default();
        if !unstaged.is_empty() {
            verdict = judge(judged, &outcome.plan, Mode::Staged { unstaged: &unstaged });
        }
    }
    if args.format == super::gen::GenFormat::Json {
        outln!("{}", serde_json::to_string_pretty(&verdict).unwrap_or_default());
        return verdict.exit_code();
    }
    // Diagnostics point into the staged text, which the working tree may not hold; both are
    // named relative to where the hook runs.
    for (path, text) in &outcome.sources {
        ui.sources.insert(Path::new(&display(path)), text);
    }
    for i in &verdict.stale {
        let c = &outcome.plan.changes[*i];
        out!("{}", Change { display: display(&c.path), ..c.clone() }.diff());
    }
    ui.report(&relocated(&verdict.diagnostics));
    let code = verdict.exit_code();
    if code == EXIT_FINDINGS {
        eprintln!("{}", verdict.closing("sanpolicy: the commit is out of sync with the policy"));
    }
    if let Some(line) = verdict.remaining_line(&ui.invocation) {
        eprintln!("{line}");
    }
    code
}

/// `diags` with every location named relative to where the hook runs.
fn relocated(diags: &Diagnostics) -> Diagnostics {
    let mut out = diags.clone();
    for l in out.0.iter_mut().filter_map(|d| d.location.as_mut()) {
        l.path = display(&l.path).into();
    }
    out
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
            .hint("pass `--force` to replace it, or call `sanpolicy pre-commit` from your own hook (the hook script sanpolicy writes shows how)")]));
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

/// Stage the files a fix wrote (`--stage`), reporting a failure.
pub fn stage(paths: &[&Path], ui: &mut Ui) -> Result<(), ()> {
    hook::stage(paths).map_err(|e| {
        ui.report(&Diagnostics(vec![Diagnostic::error(Code::Usage, format!("cannot stage what was written: {e}"))
            .hint("run inside the kernel's git checkout, or without `--stage`")]));
    })
}
