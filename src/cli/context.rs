//! What every command shares: resolving the policy and tree from flags and defaults, loading
//! them with all diagnostics collected, and rendering those diagnostics.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;

use super::{Defaults, EXIT_BAD_INPUT};
use crate::diagnostic::{self, Code, Diagnostic, Diagnostics, Sources};
use crate::generate::snapshot::{self, Base, Binding, Snapshot};
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

/// Renders diagnostics to stderr, in colour on a terminal.
pub struct Ui {
    pub sources: Sources,
    color: bool,
}

impl Ui {
    pub fn new() -> Ui {
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Ui { sources: Sources::default(), color }
    }

    pub fn report(&mut self, diags: &Diagnostics) {
        if !diags.is_empty() {
            eprint!("{}", diagnostic::render(diags, &mut self.sources, self.color));
        }
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
    let tree = if allow_tree { args.tree.clone().or_else(|| default_tree(defaults)) } else { None };
    let mut diags = Diagnostics::default();
    diags.0.extend(tree.as_deref().and_then(tree_problem));
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
            let tree_arg = args.tree.as_ref().map(|_| format!(" --tree {}", display(t))).unwrap_or_default();
            diags.push(
                Diagnostic::error(
                    Code::Io,
                    format!("cannot read policy `{}`: there is none, the tree is not adopted yet", policy_path.display()),
                )
                .at(diagnostic::Location::file(&policy_path))
                .hint(format!(
                        "adopt it: `{} import --adopt{tree_arg}` writes the policy from the tree's own lines (no kbuild byte changes); or pass a policy with `--policy FILE`",
                        defaults.program
                    )),
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

/// The plan of every generated file, the effective snapshot included (computed on the other
/// core): what `gen-makefiles` writes and what drift is judged on. With it, the last generated
/// state ([`base_for`]), read on that core too: the snapshot is done long before the plan.
pub fn plan_with_snapshot(
    inputs: &Inputs,
    out: Option<&Path>,
    defaults: &Defaults,
    force: bool,
    sweep: Sweeping,
) -> (Plan, Base) {
    let (mut plan, snapshot) = std::thread::scope(|scope| {
        let snapshot = scope.spawn(|| (effective_snapshot(inputs, out), base_for(inputs, out, &defaults.program)));
        let plan = plan_for(inputs, out, defaults, force, sweep);
        (plan, snapshot.join())
    });
    let Ok(((snapshot, change), base)) = snapshot else {
        plan.diags.push(Diagnostic::error(Code::Internal, "computing the effective snapshot failed (a sanpolicy bug)"));
        return (plan, Base::default());
    };
    plan.changes.push(change);
    plan.snapshot = Some(snapshot);
    let base = base.unwrap_or_else(|d| {
        plan.diags.push(*d);
        Base::default()
    });
    (plan, base)
}

/// What the run's snapshot is bound to: the tree, unless fragments are written (`--out`, or no
/// tree at all), which are no tree's generation.
pub fn binding(inputs: &Inputs, out: Option<&Path>) -> Binding {
    match out {
        Some(_) => Binding::None,
        None => Binding::of(&inputs.policy_path, inputs.tree.as_deref()),
    }
}

/// The committed effective-policy snapshot: beside the policy, or in `--out` when given. Its
/// body is computed from the policy's blocks alone, so it reads the same with or without a
/// tree; its binding names the tree it was written for.
fn effective_snapshot(inputs: &Inputs, out: Option<&Path>) -> (Snapshot, Change) {
    let beside = snapshot::snapshot_path(&inputs.policy_path);
    let path = match out {
        Some(dir) => dir.join(beside.file_name().unwrap_or_default()),
        None => beside,
    };
    let snapshot = Snapshot::compute(&inputs.policy, &inputs.rules, binding(inputs, out));
    let mut change = snapshot::snapshot_change(&snapshot, &path, &inputs.policy_path);
    change.display = display(&path);
    (snapshot, change)
}

/// The last generated state, for telling which side of a drift moved: the committed snapshot,
/// validated, when it was written for this tree (else unknown: a first application).
pub fn base_for(inputs: &Inputs, out: Option<&Path>, program: &str) -> Result<Base, Box<Diagnostic>> {
    snapshot::read_base(&inputs.policy_path, &binding(inputs, out), program)
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

pub fn plan_for(inputs: &Inputs, out: Option<&Path>, defaults: &Defaults, force: bool, sweep: Sweeping) -> Plan {
    match (&inputs.tree, out) {
        (Some(tree), None) => generate::plan_tree_swept(&inputs.policy, tree, &inputs.rules, force, sweep.of(tree)),
        (_, out) => {
            let out = out.unwrap_or(&defaults.out);
            let command = format!("{} gen-makefiles", defaults.program);
            generate::plan_fragments(&inputs.policy, &inputs.rules, out, &command, &display(&inputs.policy_path))
        }
    }
}

pub fn display(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&cwd).unwrap_or(path).display().to_string()
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
