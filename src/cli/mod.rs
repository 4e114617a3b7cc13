//! The command line shared by `sanpolicy` (inside a kernel checkout) and `cargo xtask` (in this
//! repository). Only this module prints; every stage below returns values.

mod summary;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::diagnostic::{self, Code, Diagnostic, Diagnostics, Location, Sources};
use crate::generate::{self, Plan};
use crate::kbuild::Rules;
use crate::policy::{self, Policy};
use crate::{check, import, output};

/// Exit codes: 0 clean, 1 findings or drift, 2 bad input or usage.
pub const EXIT_OK: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
pub const EXIT_BAD_INPUT: u8 = 2;

/// What differs between the two front ends.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// How the program is invoked, for messages and headers (`cargo xtask`, `sanpolicy`).
    pub program: String,
    /// Policy used when `--policy` is absent; relative paths are taken inside the tree.
    pub policy: PathBuf,
    /// Tree used when `--tree` is absent.
    pub tree: Option<PathBuf>,
    /// Where fragments go when there is no tree.
    pub out: PathBuf,
}

impl Defaults {
    /// `sanpolicy` run inside a kernel checkout: the tree is `.`, the policy `sanitizer-policy.toml`.
    pub fn binary() -> Defaults {
        Defaults {
            program: "sanpolicy".into(),
            policy: "sanitizer-policy.toml".into(),
            tree: Some(".".into()),
            out: "target/sanpolicy/fragments".into(),
        }
    }

    /// `cargo xtask` in this repository: the bundled policy and no tree.
    pub fn xtask(repo: &Path) -> Defaults {
        Defaults {
            program: "cargo xtask".into(),
            policy: repo.join("policy/linux.toml"),
            tree: None,
            out: repo.join("target/sanpolicy/fragments"),
        }
    }
}

#[derive(Debug, Parser)]
#[command(name = "sanpolicy", version, about = "Kernel sanitizer and coverage exemptions as one reviewed policy")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write the policy's Kbuild blocks into the tree (or fragments into an output directory).
    #[command(
        after_help = "Examples:\n  sanpolicy gen-makefiles                 # inside a kernel checkout\n  cargo xtask gen-makefiles               # bundled policy into target/\n  sanpolicy gen-makefiles --check         # exit 1 with a diff when stale"
    )]
    GenMakefiles(GenArgs),
    /// Validate the policy (and the tree): requirements, sources, drift.
    #[command(after_help = "Examples:\n  sanpolicy check\n  cargo xtask check --tree /usr/src/linux")]
    Check(CommonArgs),
    /// Import a kernel tree's existing directives into a policy (and with --adopt, rewrite the
    /// Makefiles to hold generated blocks instead).
    #[command(
        after_help = "Examples:\n  sanpolicy import                        # writes ./sanitizer-policy.toml\n  sanpolicy import --adopt                # and moves the directives into generated blocks\n  cargo xtask import --tree /usr/src/linux --out -"
    )]
    Import(ImportArgs),
    /// Show which Kbuild rules the tree uses (naming and defaults per mechanism).
    #[command(after_help = "Example:\n  sanpolicy rules --tree /usr/src/linux")]
    Rules(CommonArgs),
}

#[derive(Debug, Args)]
struct CommonArgs {
    /// Policy file (default: `sanitizer-policy.toml` in the tree; `policy/linux.toml` for xtask).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Kernel source tree (default: `.` for sanpolicy; none for xtask).
    #[arg(long, value_name = "DIR")]
    tree: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct GenArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Write nothing; exit 1 with a unified diff per stale file.
    #[arg(long)]
    check: bool,
    /// Write standalone fragments into DIR instead of a tree.
    #[arg(long, value_name = "DIR", conflicts_with = "tree")]
    out: Option<PathBuf>,
    /// Overwrite generated blocks even when they were edited by hand.
    #[arg(long)]
    force: bool,
    /// With --check: also search the whole tree for blocks in directories the policy no longer
    /// names (writing always does; `check` always does). Without it --check reads only the
    /// policy's directories, fast enough for a pre-commit hook.
    #[arg(long, requires = "check")]
    sweep: bool,
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// Kernel source tree (default: `.` for sanpolicy).
    #[arg(long, value_name = "DIR")]
    tree: Option<PathBuf>,
    /// Where to write the policy (`-` for standard output; default: `sanitizer-policy.toml` in the tree).
    #[arg(long, value_name = "FILE", visible_alias = "policy")]
    out: Option<PathBuf>,
    /// Also rewrite the kbuild files: the imported lines move into generated blocks.
    #[arg(long)]
    adopt: bool,
    /// Overwrite an existing policy file.
    #[arg(long)]
    force: bool,
}

/// Parse `args` (program name first) and run; returns the exit code.
pub fn main(args: impl IntoIterator<Item = String>, defaults: &Defaults) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { EXIT_BAD_INPUT } else { EXIT_OK };
        }
    };
    let mut ui = Ui::new();
    match cli.command {
        Command::GenMakefiles(a) => gen_makefiles(&a, defaults, &mut ui),
        Command::Check(a) => check_command(&a, defaults, &mut ui),
        Command::Rules(a) => rules_command(&a, defaults, &mut ui),
        Command::Import(a) => import_command(&a, defaults, &mut ui),
    }
}

/// Renders diagnostics to stderr, in colour on a terminal.
struct Ui {
    sources: Sources,
    color: bool,
}

impl Ui {
    fn new() -> Ui {
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Ui { sources: Sources::default(), color }
    }

    fn report(&mut self, diags: &Diagnostics) {
        if !diags.is_empty() {
            eprint!("{}", diagnostic::render(diags, &mut self.sources, self.color));
        }
    }
}

/// The resolved inputs of a command.
struct Inputs {
    policy_path: PathBuf,
    tree: Option<PathBuf>,
    policy: Policy,
    rules: Rules,
}

fn inputs(args: &CommonArgs, defaults: &Defaults, allow_tree: bool, ui: &mut Ui) -> Result<Inputs, u8> {
    let tree = if allow_tree { args.tree.clone().or_else(|| defaults.tree.clone()) } else { None };
    let mut diags = Diagnostics::default();
    diags.0.extend(tree.as_deref().and_then(tree_problem));
    let policy_path = match (&args.policy, &tree) {
        (Some(p), _) => p.clone(),
        (None, Some(t)) if defaults.policy.is_relative() => t.join(&defaults.policy),
        (None, _) => defaults.policy.clone(),
    };
    if policy_path.is_dir() {
        diags.push(
            Diagnostic::error(Code::Io, format!("policy `{}` is a directory", policy_path.display()))
                .hint("pass the policy file itself with `--policy FILE`"),
        );
    }
    if diags.has_errors() {
        ui.report(&diags);
        return Err(EXIT_BAD_INPUT);
    }
    let (policy, policy_diags) = policy::load(&policy_path);
    for (path, text) in &policy.files {
        ui.sources.insert(path, text);
    }
    diags.extend(policy_diags);
    let rules = match &tree {
        Some(t) => {
            let (rules, rule_diags) = Rules::from_tree(t);
            diags.extend(rule_diags);
            rules
        }
        None => Rules::builtin(),
    };
    if diags.has_bad_input() {
        ui.report(&diags.sorted());
        return Err(EXIT_BAD_INPUT);
    }
    ui.report(&diags.sorted());
    Ok(Inputs { policy_path, tree, policy, rules })
}

fn plan_for(inputs: &Inputs, out: Option<&Path>, defaults: &Defaults, force: bool, sweep: bool) -> Plan {
    match (&inputs.tree, out) {
        (Some(tree), None) => generate::plan_tree(&inputs.policy, tree, &inputs.rules, force, sweep),
        (_, out) => {
            let out = out.unwrap_or(&defaults.out);
            let command = format!("{} gen-makefiles", defaults.program);
            generate::plan_fragments(&inputs.policy, &inputs.rules, out, &command, &display(&inputs.policy_path))
        }
    }
}

fn display(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&cwd).unwrap_or(path).display().to_string()
}

fn gen_makefiles(args: &GenArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(&args.common, defaults, args.out.is_none(), ui) else { return EXIT_BAD_INPUT };
    let plan = plan_for(&inputs, args.out.as_deref(), defaults, args.force, !args.check || args.sweep);
    let blocking = plan.diags.clone().sorted();
    if blocking.has_errors() {
        ui.report(&blocking);
        eprintln!("error: nothing was written");
        return EXIT_BAD_INPUT;
    }
    ui.report(&blocking);
    let stale: Vec<_> = plan.changes.iter().filter(|c| !c.is_noop()).collect();
    if args.check {
        for c in &stale {
            print!("{}", c.diff());
        }
        if stale.is_empty() {
            eprintln!("{} generated file(s) up to date", plan.changes.len());
            return EXIT_OK;
        }
        eprintln!(
            "error: {} generated file(s) out of date; run `{} gen-makefiles` and commit the result",
            stale.len(),
            defaults.program
        );
        return EXIT_FINDINGS;
    }
    if let Err(e) = output::apply(&plan.changes) {
        eprintln!("error: writing failed: {e}");
        return EXIT_BAD_INPUT;
    }
    let target = inputs
        .tree
        .as_deref()
        .filter(|_| args.out.is_none())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| args.out.clone().unwrap_or(defaults.out.clone()));
    println!(
        "{}",
        summary::render(
            &inputs.policy,
            &inputs.rules,
            &display(&inputs.policy_path),
            &display(&target),
            plan.changes.len(),
            stale.len()
        )
    );
    EXIT_OK
}

fn check_command(args: &CommonArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
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

fn rules_command(args: &CommonArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let rules = match args.tree.clone().or_else(|| defaults.tree.clone()) {
        Some(tree) => match inputs_without_policy(&CommonArgs { policy: None, tree: Some(tree) }, ui) {
            Ok(rules) => rules,
            Err(code) => return code,
        },
        None => Rules::builtin(),
    };
    for line in rules.describe() {
        println!("{line}");
    }
    EXIT_OK
}

const IMPORT_HEADER: &str = "Imported from a kernel tree by `sanpolicy import`.
Each reason is the tree's own comment above the lines; `TODO(sanpolicy import)` marks units
the tree gives no reason for. Regenerate the Makefiles with `sanpolicy gen-makefiles`.";

fn import_command(args: &ImportArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Some(tree) = args.tree.clone().or_else(|| defaults.tree.clone()) else {
        eprintln!("error: `import` needs `--tree DIR`");
        return EXIT_BAD_INPUT;
    };
    let common = CommonArgs { policy: None, tree: Some(tree.clone()) };
    let Ok(inputs) = inputs_without_policy(&common, ui) else { return EXIT_BAD_INPUT };
    let out = args.out.clone().unwrap_or_else(|| tree.join(&Defaults::binary().policy));
    let to_stdout = out.as_os_str() == "-";
    if !to_stdout && out.exists() && !args.force {
        ui.report(&Diagnostics(vec![Diagnostic::error(Code::Io, format!("`{}` already exists", out.display()))
            .hint("pass `--force` to overwrite it, or `--out FILE`")]));
        return EXIT_BAD_INPUT;
    }
    let scan = import::scan(&tree);
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
    }
    if args.adopt {
        changes.extend(import::adopt(&scan.taken, &policy, &inputs, &tree));
    }
    ui.report(&scan.diags.clone().sorted());
    if to_stdout {
        print!("{text}");
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

/// Why `tree` cannot be used as a kernel tree, if it cannot.
fn tree_problem(tree: &Path) -> Option<Diagnostic> {
    let what = if tree.is_dir() {
        return None;
    } else if tree.exists() {
        "is not a directory"
    } else {
        "does not exist"
    };
    Some(
        Diagnostic::error(Code::Io, format!("tree `{}` {what}", tree.display()))
            .hint("pass the top of a kernel source tree with `--tree DIR`"),
    )
}

/// Tree checks and rules for commands that produce a policy rather than read one.
fn inputs_without_policy(args: &CommonArgs, ui: &mut Ui) -> Result<Rules, u8> {
    let tree = args.tree.as_deref().unwrap_or(Path::new("."));
    if let Some(problem) = tree_problem(tree) {
        ui.report(&Diagnostics(vec![problem]));
        return Err(EXIT_BAD_INPUT);
    }
    let (rules, diags) = Rules::from_tree(tree);
    ui.report(&diags);
    if diags.has_errors() {
        return Err(EXIT_BAD_INPUT);
    }
    Ok(rules)
}
