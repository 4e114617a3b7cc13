//! `import`: a kernel tree's directives into a policy; with `--adopt` the policy owns them, in
//! the layout chosen (in place: no kbuild byte changes; block; central).

use std::path::PathBuf;

use clap::Args;

use super::context::{display, lock_tree, rules_for_tree, write, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::generate::snapshot as effective;
use crate::{import, output, policy};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Kernel source tree (default: `.` for sanpolicy).
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
    /// Where to write the policy (`-` for standard output; default: `sanitizer-policy.toml` in the tree).
    #[arg(long, value_name = "FILE", visible_alias = "policy")]
    pub out: Option<PathBuf>,
    /// Adopt the tree as it is: in the in-place layout no kbuild byte changes (the policy owns
    /// the lines where they are); in the block layout the lines move into generated blocks; in
    /// the central layout they are also written to the one central file.
    #[arg(long)]
    pub adopt: bool,
    /// How the policy's directives live in the tree (written as `layout` in the policy).
    #[arg(long, value_name = "LAYOUT", default_value = "in-place", value_parser = ["in-place", "block", "central"])]
    pub layout: String,
    /// List every line the policy cannot model, not only a summary.
    #[arg(long)]
    pub verbose: bool,
    /// Overwrite an existing policy file.
    #[arg(long)]
    pub force: bool,
    /// `json`: print the summary (schema `sanpolicy.import/1`) on stdout instead of text.
    #[arg(long, value_enum, default_value_t = super::gen::GenFormat::Text)]
    pub format: super::gen::GenFormat,
}

/// `import --format json`: what was read, written and found, and the command that comes next.
#[derive(Debug, serde::Serialize)]
struct Summary<'a> {
    schema: &'static str,
    tree: String,
    layout: &'static str,
    files_read: usize,
    directives: usize,
    units: usize,
    without_reason: usize,
    outside_policy: usize,
    stale: usize,
    kbuild_files_changed: usize,
    written: Vec<String>,
    diagnostics: &'a [Diagnostic],
    next: crate::check::judge::Command,
    exit_code: u8,
}

pub const IMPORT_SCHEMA: &str = "sanpolicy.import/1";

const IMPORT_HEADER: &str = "Imported from a kernel tree by `sanpolicy import`.
Each reason is the tree's own comment above the lines; `TODO(sanpolicy import)` marks units
the tree gives no reason for. After editing, apply with `sanpolicy gen-makefiles`; after a
merge, take the tree's changes back with `sanpolicy sync`.";

pub fn run(args: &ImportArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Some(tree) = args.tree.clone().or_else(|| super::context::default_tree(defaults)) else {
        eprintln!("error: `import` needs `--tree DIR`");
        return EXIT_BAD_INPUT;
    };
    let out = args.out.clone().unwrap_or_else(|| tree.join(&Defaults::binary().policy));
    ui.invocation.tree = args.tree.as_ref().map(|t| t.display().to_string());
    ui.invocation.policy = args.out.as_ref().filter(|o| o.as_os_str() != "-").map(|o| o.display().to_string());
    ui.invocation.layout = Some(args.layout.clone()).filter(|l| l != "in-place");
    let to_stdout = out.as_os_str() == "-";
    let json = args.format == super::gen::GenFormat::Json;
    if json && to_stdout {
        ui.report(&Diagnostics(vec![Diagnostic::error(
            Code::Usage,
            "`--format json` prints the summary on stdout, where `--out -` prints the policy",
        )
        .hint("write the policy to a file (`--out FILE`), or drop `--format json`")]));
        return EXIT_BAD_INPUT;
    }
    // A run that writes holds the tree's lock from before the first read until written.
    let Ok(lock) = lock_tree(Some(tree.as_path()).filter(|_| args.adopt || !to_stdout), ui) else {
        return EXIT_BAD_INPUT;
    };
    let Ok(rules) = rules_for_tree(&tree, ui) else { return EXIT_BAD_INPUT };
    if !to_stdout && out.exists() && !args.force {
        ui.report(&Diagnostics(vec![Diagnostic::error(Code::Usage, format!("`{}` already exists", out.display()))
            .hint("pass `--force` to overwrite it, or `--out FILE`")]));
        return EXIT_BAD_INPUT;
    }
    let scan = super::context::with_spinner(&format!("reading kbuild files under {}", tree.display()), || {
        import::scan(&tree, &rules)
    });
    if scan.diags.has_errors() {
        // A kbuild file the import cannot read back (broken markers, a hand-edited block):
        // adopting around it would leave a tree every later run refuses.
        ui.report(&scan.diags.clone().sorted());
        eprintln!("error: the tree has kbuild files import cannot read; nothing was written");
        return EXIT_BAD_INPUT;
    }
    let layout = policy::Layout::by_name(&args.layout).unwrap_or_default();
    let text = import::policy_toml(&scan.units, IMPORT_HEADER, layout);
    let (policy, diags) = policy::parse_str(&out, &text);
    if diags.has_errors() {
        // Located in the tree: the policy was never written, so it is not the user's to fix.
        ui.report(&import::in_tree(&scan, &text, &diags));
        eprintln!("error: the tree holds directives a policy cannot record (see above); nothing was written");
        return EXIT_BAD_INPUT;
    }
    let mut changes = Vec::new();
    if !to_stdout {
        changes.push(output::Change {
            path: out.clone(),
            display: display(&out),
            old: crate::input::read_to_string(&out, crate::input::POLICY_LIMIT).ok(),
            new: Some(text.clone()),
        });
        // The policy's effective-instrumentation snapshot starts out in sync, as gen-makefiles
        // keeps it: the tree's lines are the policy's, so it is this tree's last generation.
        changes.push(crate::generate::adopted_snapshot(&policy, &rules, &out, &tree));
    }
    if args.adopt {
        match adoption(&policy, &scan, &rules, &tree) {
            Ok(c) => changes.extend(c),
            Err(diags) => {
                ui.report(&diags);
                eprintln!("error: nothing was written");
                return EXIT_BAD_INPUT;
            }
        }
    }
    if !json {
        report_scan(ui, &scan, args.verbose);
    }
    if to_stdout {
        out!("{text}");
    }
    if write(lock.as_ref(), &changes, ui).is_err() {
        return EXIT_BAD_INPUT;
    }
    let placeholders = scan.units.iter().filter(|u| u.reasons.is_empty()).count();
    let count = |code: Code| scan.diags.iter().filter(|d| d.code == code).count();
    let rewritten =
        changes.iter().filter(|c| c.path != out && !c.display.ends_with(".effective.txt") && !c.is_noop()).count();
    if json {
        let fix = crate::diagnostic::Fix::Check;
        let summary = Summary {
            schema: IMPORT_SCHEMA,
            tree: tree.display().to_string(),
            layout: layout.name(),
            files_read: scan.files_read,
            directives: scan.directives,
            units: scan.units.len(),
            without_reason: placeholders,
            outside_policy: count(Code::Unrepresentable),
            stale: count(Code::MissingSource),
            kbuild_files_changed: if args.adopt { rewritten } else { 0 },
            written: changes.iter().filter(|c| !c.is_noop()).map(|c| c.display.clone()).collect(),
            diagnostics: &scan.diags.0,
            next: crate::check::judge::Command::of(&fix, &ui.invocation),
            exit_code: EXIT_OK,
        };
        outln!("{}", serde_json::to_string_pretty(&summary).unwrap_or_default());
        return EXIT_OK;
    }
    eprintln!(
        "{}: {} kbuild files read, {} directives, {} units ({placeholders} without a reason), {} outside the policy, {} stale; layout {}{}",
        tree.display(),
        scan.files_read,
        scan.directives,
        scan.units.len(),
        count(Code::Unrepresentable),
        count(Code::MissingSource),
        layout.name(),
        if args.adopt { format!(", {rewritten} kbuild file(s) changed") } else { String::new() }
    );
    if !to_stdout {
        let check = ui.invocation.render(&crate::diagnostic::Fix::Check);
        eprintln!("wrote {} and {}", display(&out), display(&effective::snapshot_path(&out)));
        let files = [display(&out), display(&effective::snapshot_path(&out))];
        let add = if git_ignores(&files) { "git add -f" } else { "git add" };
        let how = if add == "git add -f" { " (git ignores them here: `-f` adds them anyway)" } else { "" };
        eprintln!("next: `{check}` lists what the tree breaks (recursion-prone units, stale directives); acknowledge what you keep on purpose with `[[acknowledge]]`, fix the rest; replace the `TODO(sanpolicy import)` reasons; commit both files: `{add} {} {}`{how}", files[0], files[1]);
    }
    EXIT_OK
}

/// Whether git, run here, ignores any of `files` (Debian's kernel source tarballs ship a
/// `.gitignore` of `/*`). Not in a repository, or without git: no.
fn git_ignores(files: &[String]) -> bool {
    // `-q` takes one path only: ask for each.
    files.iter().any(|file| {
        std::process::Command::new("git")
            .args(["check-ignore", "-q", "--", file])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// What adopting the imported policy changes in the tree: no kbuild file in the in-place and
/// central layouts (proven by planning it: a change there is a sanpolicy bug, refused; central
/// writes only its own file and the include line); blocks in the block layout.
fn adoption(
    policy: &policy::Policy,
    scan: &import::Scan,
    rules: &crate::kbuild::Rules,
    tree: &std::path::Path,
) -> Result<Vec<output::Change>, Diagnostics> {
    match policy.layout {
        policy::Layout::Block => Ok(import::adopt(&scan.taken, policy, rules, tree)),
        policy::Layout::InPlace | policy::Layout::Central => {
            let plan = crate::generate::plan_tree(policy, tree, rules, false, true);
            let mut diags = plan.diags.clone();
            // The central layout writes its own file and the include line, never a kbuild file.
            let own = |c: &output::Change| {
                policy.layout == policy::Layout::Central
                    && [crate::emit::central::CENTRAL_FILE, "scripts/Makefile.build"].contains(&c.display.as_str())
            };
            for c in plan.changes.iter().filter(|c| !c.is_noop() && !own(c)) {
                diags.push(
                    Diagnostic::error(
                        Code::Internal,
                        format!("adopting would change `{}` (a sanpolicy bug)", c.display),
                    )
                    .hint("report it with the file; import without `--adopt` meanwhile"),
                );
            }
            if diags.has_errors() {
                return Err(diags);
            }
            Ok(plan.changes.into_iter().filter(|c| !c.is_noop()).collect())
        }
    }
}

/// Import's findings, summarised: one line per kind of line left outside the policy (with
/// `--verbose`, every one), and every stale directive.
fn report_scan(ui: &mut Ui, scan: &import::Scan, verbose: bool) {
    let (outside, rest): (Vec<_>, Vec<_>) = scan.diags.iter().cloned().partition(|d| d.code == Code::Unrepresentable);
    ui.report(&Diagnostics(rest).sorted());
    if verbose {
        ui.report(&Diagnostics(outside).sorted());
        return;
    }
    let mut kinds: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for d in &outside {
        let why = d.message.split(": ").nth(1).unwrap_or(&d.message).to_string();
        kinds.entry(why).or_default().push(d.location.as_ref().map(ToString::to_string).unwrap_or_default());
    }
    for (why, places) in &kinds {
        let shown: Vec<&str> = places.iter().take(3).map(String::as_str).collect();
        let more = if places.len() > 3 { format!(" and {} more", places.len() - 3) } else { String::new() };
        eprintln!("note: {} line(s) left outside the policy ({why}): {}{more}", places.len(), shown.join(", "));
    }
    if !outside.is_empty() {
        eprintln!("note: these lines stay as they are; `--verbose` lists each");
    }
}
