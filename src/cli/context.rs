//! What every command shares: resolving the policy and tree from flags and defaults, loading
//! them with all diagnostics collected, and rendering those diagnostics.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;

use super::{Defaults, EXIT_BAD_INPUT};
use crate::diagnostic::Invocation;
use crate::diagnostic::{self, Code, Diagnostic, Diagnostics, Sources};
use crate::generate::{self, Plan};
use crate::kbuild::Rules;
use crate::output::{self, Change, TreeLock, LOCK_WAIT};
use crate::policy::{self, Policy};

#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Policy file (default: `sanitizer-policy.toml` in the tree; `policy/linux.toml` for xtask).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Kernel source tree (default: `.` for sanpolicy; none for xtask).
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
}

/// Renders diagnostics to stderr, in colour on a terminal, with every fix rendered for the
/// invocation in use.
pub struct Ui {
    pub sources: Sources,
    pub invocation: Invocation,
    color: bool,
}

impl Ui {
    pub fn new(invocation: Invocation) -> Ui {
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Ui { sources: Sources::default(), invocation, color }
    }

    pub fn report(&mut self, diags: &Diagnostics) {
        if !diags.is_empty() {
            eprint!("{}", diagnostic::render(diags, &mut self.sources, self.color, &self.invocation));
        }
    }

    /// Take the user's `--policy` and `--tree` into the invocation the fixes are rendered for.
    pub fn invoked_with(&mut self, args: &CommonArgs) {
        let typed = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        self.invocation.policy = typed(&args.policy);
        self.invocation.tree = typed(&args.tree);
    }
}

/// The resolved inputs of a command.
pub struct Inputs {
    pub policy_path: PathBuf,
    pub tree: Option<PathBuf>,
    pub policy: Policy,
    pub rules: Rules,
}

/// The tree a command works on when `--tree` is absent: for `sanpolicy`, the nearest directory
/// at or above the current one that holds the policy, else the top of the kernel tree (the
/// directory with `scripts/Makefile.build`), so commands work from any subdirectory.
pub fn default_tree(defaults: &Defaults) -> Option<PathBuf> {
    let tree = defaults.tree.clone()?;
    if tree != Path::new(".") {
        return Some(tree);
    }
    let cwd = std::env::current_dir().ok()?;
    let up = |found: &dyn Fn(&Path) -> bool| cwd.ancestors().find(|d| found(d)).map(Path::to_path_buf);
    let root =
        up(&|d| d.join(&defaults.policy).is_file()).or_else(|| up(&|d| d.join("scripts/Makefile.build").is_file()));
    Some(match root {
        Some(r) if r != cwd => pathdiff(&cwd, &r),
        _ => tree,
    })
}

/// `to` as a path relative to `from`, an ancestor of it (`../..`).
fn pathdiff(from: &Path, to: &Path) -> PathBuf {
    let depth = from.strip_prefix(to).map(|rest| rest.components().count()).unwrap_or(0);
    (0..depth).map(|_| "..").collect::<PathBuf>()
}

pub fn inputs(args: &CommonArgs, defaults: &Defaults, allow_tree: bool, ui: &mut Ui) -> Result<Inputs, u8> {
    ui.invoked_with(args);
    let tree = if allow_tree { args.tree.clone().or_else(|| default_tree(defaults)) } else { None };
    let mut diags = Diagnostics::default();
    diags.0.extend(tree.as_deref().and_then(tree_problem));
    if diags.is_empty() {
        diags.0.extend(args.tree.as_deref().filter(|_| allow_tree).and_then(not_the_top));
    }
    let policy_path = match (&args.policy, &tree) {
        (Some(p), _) => p.clone(),
        (None, Some(t)) if defaults.policy.is_relative() => t.join(&defaults.policy),
        (None, _) => defaults.policy.clone(),
    };
    // Diagnostics name the policy as the user would type it: relative to the current directory.
    let policy_path = PathBuf::from(display(&policy_path));
    diags.0.extend(policy_problem(&policy_path));
    if let (None, Some(t)) = (&args.policy, &tree) {
        if !diags.has_errors() && std::fs::symlink_metadata(&policy_path).is_err() {
            let _ = t;
            diags.push(
                Diagnostic::error(
                    Code::Io,
                    format!("cannot read policy `{}`: there is none, the tree is not adopted yet", policy_path.display()),
                )
                .at(diagnostic::Location::file(&policy_path))
                .hint(crate::hint![
                    "adopt it: ",
                    crate::diagnostic::Fix::ImportAdopt,
                    " writes the policy from the tree's own lines (no kbuild byte changes); or pass a policy with `--policy FILE`"
                ]),
            );
        }
    }
    if diags.has_errors() {
        ui.report(&diags);
        return Err(EXIT_BAD_INPUT);
    }
    // The policy and the tree's rules are independent: read them on both cores.
    let ((policy, policy_diags), (rules, rule_diags)) = std::thread::scope(|scope| {
        let rules = scope.spawn(|| match &tree {
            Some(t) => Rules::from_tree(t),
            None => (Rules::builtin(), Diagnostics::default()),
        });
        let policy = policy::load(&policy_path);
        (policy, rules.join().unwrap_or_else(|_| (Rules::builtin(), Diagnostics::default())))
    });
    for (path, text) in policy.sources() {
        ui.sources.insert(path, text);
    }
    diags.extend(policy_diags);
    diags.extend(rule_diags);
    if let Some(tree) = &tree {
        let dirs = policy.units.iter().map(|u| &u.path).chain(policy.requirements.iter().map(|r| &r.path));
        diags.extend(arch_problems(tree, dirs.map(|p| p.kbuild_dir.as_str())));
    }
    if diags.has_bad_input() {
        ui.report(&diags.sorted());
        return Err(EXIT_BAD_INPUT);
    }
    ui.report(&diags.sorted());
    Ok(Inputs { policy_path, tree, policy, rules })
}

/// Whether planning sweeps the whole tree for kbuild files holding directives, and whether that
/// sweep is already under way.
pub enum Sweeping {
    No,
    Yes,
    Started(EarlySweep),
}

/// The sweep of a tree, started before the policy is read: the two are independent, and the
/// walk is the longest part of a `--check`.
pub struct EarlySweep {
    tree: PathBuf,
    handle: std::thread::JoinHandle<generate::Sweep>,
}

/// Start sweeping the tree the command will work on (as [`inputs`] finds it). Call it after
/// taking the tree's lock: the sweep reads the tree.
pub fn start_sweep(args: &CommonArgs, defaults: &Defaults) -> Option<EarlySweep> {
    let tree = args.tree.clone().or_else(|| default_tree(defaults)).filter(|t| t.is_dir())?;
    let walked = tree.clone();
    Some(EarlySweep { tree, handle: std::thread::spawn(move || generate::sweep(&walked)) })
}

impl Sweeping {
    /// `Yes`, using the early sweep when there is one.
    pub fn yes(early: Option<EarlySweep>) -> Sweeping {
        early.map_or(Sweeping::Yes, Sweeping::Started)
    }

    fn of(self, tree: &Path) -> Option<generate::Sweep> {
        match self {
            Sweeping::No => None,
            Sweeping::Started(early) if early.tree == tree => {
                Some(early.handle.join().unwrap_or_else(|_| generate::sweep(tree)))
            }
            Sweeping::Yes | Sweeping::Started(_) => Some(generate::sweep(tree)),
        }
    }
}

/// The whole plan of the run (see [`generate::plan`]): the tree's (`out` `None` with a tree) or
/// the fragments' under `out` (or the front end's default directory), with its snapshot and the
/// memory of the last generation.
pub fn plan(inputs: &Inputs, out: Option<&Path>, defaults: &Defaults, force: bool, sweep: Sweeping) -> Plan {
    let command = format!("{} gen-makefiles", defaults.program);
    let target = match (&inputs.tree, out) {
        (Some(tree), None) => generate::Target::Tree { tree, force, sweep: sweep.of(tree) },
        (_, out) => generate::Target::Fragments { out: out.unwrap_or(&defaults.out), command: &command },
    };
    generate::plan(&inputs.policy, &inputs.rules, &inputs.policy_path, target)
}

/// The judge's inputs of this run.
pub fn judged<'a>(inputs: &'a Inputs, out: Option<&Path>, ui: &'a Ui) -> crate::check::judge::Inputs<'a> {
    crate::check::judge::Inputs {
        policy: &inputs.policy,
        rules: &inputs.rules,
        tree: inputs.tree.as_deref().filter(|_| out.is_none()),
        invocation: &ui.invocation,
    }
}

/// Why the arch Makefiles that name objects of `dirs` (directories under `arch/<arch>/`)
/// cannot be read, one diagnostic per arch Makefile.
pub fn arch_problems<'a>(tree: &Path, dirs: impl Iterator<Item = &'a str>) -> Diagnostics {
    let mut arches: Vec<&str> = dirs.filter_map(|d| d.strip_prefix("arch/")?.split('/').next()).collect();
    arches.sort_unstable();
    arches.dedup();
    let problems = arches.into_iter().filter_map(|a| crate::kbuild::arch::read_problem(tree, &format!("arch/{a}/")));
    Diagnostics(problems.map(|d| *d).collect())
}

pub fn display(path: &Path) -> String {
    output::shown(path)
}

/// Why `path` cannot be read as a policy before loading it: a directory (a missing file is
/// reported by the loader, with the include chain).
pub fn policy_problem(path: &Path) -> Option<Diagnostic> {
    path.is_dir().then(|| {
        Diagnostic::error(Code::Io, format!("policy `{}` is a directory", path.display()))
            .at(diagnostic::Location::file(path))
            .hint("pass the policy file itself with `--policy FILE`")
    })
}

/// A `--tree` that names a directory inside a kernel tree rather than its top (`--tree mm`):
/// every command needs the top, where the rules and the policy are.
fn not_the_top(tree: &Path) -> Option<Diagnostic> {
    if tree.join("scripts/Makefile.build").is_file() {
        return None;
    }
    let abs = tree.canonicalize().ok()?;
    let top = abs.ancestors().skip(1).find(|d| d.join("scripts/Makefile.build").is_file())?;
    let cwd = std::env::current_dir().ok()?.canonicalize().ok()?;
    let shown = match cwd.strip_prefix(top) {
        Ok(rest) if rest.as_os_str().is_empty() => ".".to_string(),
        Ok(rest) => rest.components().map(|_| "..").collect::<Vec<_>>().join("/"),
        Err(_) => top.strip_prefix(&cwd).map_or_else(|_| top.display().to_string(), |p| p.display().to_string()),
    };
    Some(
        Diagnostic::error(
            Code::Usage,
            format!("`{}` is a directory inside the kernel tree `{shown}`, not its top", tree.display()),
        )
        .at(diagnostic::Location::file(tree))
        .hint(format!(
            "pass the tree's top: `--tree {}` (the policy names directories relative to it, e.g. `{}/…`)",
            crate::diagnostic::fix::quote(&shown),
            abs.strip_prefix(top).map(|p| p.display().to_string()).unwrap_or_default()
        )),
    )
}

/// Why `tree` cannot be used as a kernel tree, if it cannot.
pub fn tree_problem(tree: &Path) -> Option<Diagnostic> {
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
pub fn rules_for_tree(tree: &Path, ui: &mut Ui) -> Result<Rules, u8> {
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

/// The write lock on `tree`, for a command about to write into it: taken before anything is
/// read, so two runs never plan from the same old text. While another run holds it, says so and
/// waits (up to [`LOCK_WAIT`]). `None` without a usable tree (the command reports the tree).
pub fn lock_tree(tree: Option<&Path>, ui: &mut Ui) -> Result<Option<TreeLock>, u8> {
    let Some(tree) = tree.filter(|t| t.is_dir()) else { return Ok(None) };
    let lock = match TreeLock::try_exclusive(tree) {
        Ok(None) => {
            eprintln!(
                "waiting for another sanpolicy run on `{}` to finish (at most {} s)",
                display(tree),
                LOCK_WAIT.as_secs()
            );
            TreeLock::exclusive(tree, LOCK_WAIT)
        }
        Ok(Some(lock)) => Ok(lock),
        Err(d) => Err(d),
    };
    lock.map(Some).map_err(|d| {
        ui.report(&Diagnostics(vec![*d]));
        EXIT_BAD_INPUT
    })
}

/// Write `changes` (through the tree's handle when the tree is locked); a failure is reported
/// with its code and path.
pub fn write(lock: Option<&TreeLock>, changes: &[Change], ui: &mut Ui) -> Result<(), u8> {
    let written = match lock {
        Some(lock) => lock.apply(changes),
        None => output::apply(changes),
    };
    written.map(|_| ()).map_err(|e| {
        ui.report(&Diagnostics(vec![e.diagnostic().clone()]));
        EXIT_BAD_INPUT
    })
}

/// Run `work` with a spinner on a terminal; nothing when stderr is piped or under CI.
pub fn with_spinner<T>(message: &str, work: impl FnOnce() -> T) -> T {
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
