//! The command line shared by `sanpolicy` (inside a kernel checkout) and `cargo xtask` (in this
//! repository). Only this module prints; every stage below returns values.

/// `print!` that ends quietly when stdout is closed (`sanpolicy report | head`) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `println!` counterpart of [`out!`].
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

mod boot;
mod check;
mod context;
mod derive;
mod dist;
mod dotconfig;
mod gen;
mod gen_cargo;
mod hook;
mod import;
mod review;
mod rules;
mod summary;
mod sync;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use context::{CommonArgs, Ui};

use crate::diagnostic::{FrontEnd, Invocation};
pub use crate::diagnostic::{EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
pub use dist::{command, completion, completion_file, man_pages, reference_markdown, write_dist};

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
    /// How the user runs this front end: what printed fixes name.
    pub front: FrontEnd,
}

impl Defaults {
    /// `sanpolicy` run inside a kernel checkout: the tree is `.`, the policy `sanitizer-policy.toml`.
    pub fn binary() -> Defaults {
        Defaults {
            program: "sanpolicy".into(),
            policy: "sanitizer-policy.toml".into(),
            tree: Some(".".into()),
            out: "target/sanpolicy/fragments".into(),
            front: binary_front_end(),
        }
    }

    /// `cargo xtask` in this repository: the bundled policy and no tree.
    pub fn xtask(repo: &Path) -> Defaults {
        Defaults {
            program: "cargo xtask".into(),
            policy: repo.join("policy/linux.toml"),
            tree: None,
            out: repo.join("target/sanpolicy/fragments"),
            front: FrontEnd::Xtask,
        }
    }

    /// The invocation fixes are rendered for before a command takes in the user's flags.
    pub fn invocation(&self) -> Invocation {
        Invocation::of(self.front.clone())
    }
}

/// How this binary was run: by the pre-commit framework from its own environment (a `language:
/// rust` hook: the binary is nowhere else, so fixes are the framework's manual-stage hooks),
/// else as the user named it (`sanpolicy` from PATH, `./target/debug/sanpolicy`, or the
/// absolute path a git hook runs), so a fix runs as printed where it was printed.
fn binary_front_end() -> FrontEnd {
    let exe = std::env::current_exe().ok();
    if std::env::var_os("PRE_COMMIT").is_some_and(|v| v == "1") {
        if let Some(exe) = exe.as_deref().filter(|e| in_pre_commit_store(e)) {
            return FrontEnd::PreCommit { program: exe.to_string_lossy().into_owned(), hooks: configured_hooks() };
        }
    }
    let named = std::env::args_os().next().map(|a| a.to_string_lossy().into_owned());
    FrontEnd::Binary(match named {
        // Run by a path: the short name only where the shell finds this very binary by it.
        Some(path) if path.contains('/') && !on_path_as(exe.as_deref(), "sanpolicy") => path,
        Some(name) if !name.contains('/') => name,
        _ => "sanpolicy".to_string(),
    })
}

/// The hook ids the framework's configuration lists (`- id: NAME` lines of
/// `.pre-commit-config.yaml` in the directory the framework runs hooks in, the repository's
/// top): a fix is printed as `pre-commit run ID` only where that would find the hook.
fn configured_hooks() -> Vec<String> {
    // A configuration is a few hundred bytes: a larger or special file is not one to trust.
    let Ok(text) = crate::input::read_to_string(Path::new(".pre-commit-config.yaml"), 1 << 20) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| l.trim_start().trim_start_matches("- ").trim_start().strip_prefix("id:"))
        .map(|id| id.trim().trim_matches(|c| c == '"' || c == '\'').to_string())
        .filter(|id| !id.is_empty())
        .collect()
}

/// Whether `name`, looked up on `PATH` as a shell does, is the executable `exe`.
fn on_path_as(exe: Option<&Path>, name: &str) -> bool {
    let (Some(exe), Some(path)) = (exe.and_then(|e| e.canonicalize().ok()), std::env::var_os("PATH")) else {
        return false;
    };
    let found = std::env::split_paths(&path).map(|d| d.join(name)).find(|c| c.is_file());
    found.and_then(|f| f.canonicalize().ok()).is_some_and(|f| f == exe)
}

/// Whether `exe` lies in the pre-commit framework's store (`$PRE_COMMIT_HOME`, else
/// `$XDG_CACHE_HOME/pre-commit`, else `~/.cache/pre-commit`), where it builds `language: rust`
/// hooks.
fn in_pre_commit_store(exe: &Path) -> bool {
    let store = std::env::var_os("PRE_COMMIT_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("pre-commit")))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pre-commit")));
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    store.is_some_and(|s| canonical(exe).starts_with(canonical(&s)))
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
    GenMakefiles(gen::GenArgs),
    /// Write the policy's `[[profile]]`s and `[[crate]]` exemptions into a Cargo workspace's root
    /// `Cargo.toml`; scan its crates for sanitizer hooks and `#[sanitize]` attributes.
    #[command(
        after_help = "Examples:\n  sanpolicy gen-cargo                     # workspace `.`, policy ./sanitizer-policy.toml\n  cargo xtask gen-cargo --workspace DIR --profile asan\n  sanpolicy gen-cargo --check             # exit 1 with a diff when stale, or on findings"
    )]
    GenCargo(gen_cargo::GenCargoArgs),
    /// Validate the policy (and the tree): requirements, sources, drift.
    #[command(
        after_help = "Examples:\n  sanpolicy check\n  sanpolicy check --strict                # placeholder reasons are errors\n  cargo xtask check --tree /usr/src/linux"
    )]
    Check(check::CheckArgs),
    /// Import a kernel tree's existing directives into a policy (with --adopt, the policy then
    /// owns them where they are: no kbuild byte changes in the default in-place layout).
    #[command(
        after_help = "Examples:\n  sanpolicy import                        # writes ./sanitizer-policy.toml\n  sanpolicy import --adopt                # and owns the lines where they are (no kbuild byte changes)\n  sanpolicy import --adopt --layout block # moves the lines into generated blocks instead\n  cargo xtask import --tree /usr/src/linux --out -"
    )]
    Import(import::ImportArgs),
    /// Take the tree's directives back into the policy after a merge or a hand edit (changes no
    /// kbuild file): added lines become units, removed ones drop theirs, changed values update.
    #[command(
        after_help = "Examples:\n  git merge v6.13 && sanpolicy sync && git diff sanitizer-policy.toml\n  sanpolicy sync --check                  # exit 1 when the tree is ahead of the policy"
    )]
    Sync(sync::SyncArgs),
    /// Show which Kbuild rules the tree uses (naming and defaults per mechanism).
    #[command(after_help = "Example:\n  sanpolicy rules --tree /usr/src/linux")]
    Rules(CommonArgs),
    /// Why is an object (not) instrumented: state per mechanism, the deciding line, its reason.
    #[command(
        after_help = "Examples:\n  sanpolicy explain kernel/locking/lockdep.o\n  cargo xtask explain mm/kasan/ --format json"
    )]
    Explain(review::ExplainArgs),
    /// The whole policy as a reviewable summary (Markdown for a PR comment, or JSON).
    #[command(after_help = "Examples:\n  sanpolicy report\n  cargo xtask report --format json")]
    Report(review::ReportArgs),
    /// What a policy change does to effective instrumentation, newly uninstrumented first.
    #[command(
        after_help = "Examples:\n  sanpolicy diff --base origin/master     # this branch's policy against master's\n  cargo xtask diff old.toml new.toml --format json"
    )]
    Diff(review::DiffArgs),
    /// The git pre-commit check: staged kbuild files and policy in sync, no hand-added directives.
    #[command(after_help = "Example:\n  sanpolicy pre-commit        # what `install-hook` makes git run")]
    PreCommit(hook::PreCommitArgs),
    /// Install the pre-commit hook into this checkout (`.git/hooks/pre-commit`).
    #[command(
        after_help = "Example:\n  sanpolicy install-hook\n  sanpolicy install-hook --force   # replace a hook sanpolicy did not write"
    )]
    InstallHook(hook::InstallHookArgs),
    /// Derive the recursion-prone set from the kernel's real call graph (builds the tree).
    #[command(
        after_help = "Examples:\n  sanpolicy derive --build ~/build/kasan\n  cargo xtask derive --tree /usr/src/linux --mechanism kcsan --format json"
    )]
    Derive(derive::DeriveArgs),
    /// Build the debug kernel the policy gives, boot it under QEMU with a workload, and report
    /// every sanitizer and lockdep report (attributed to objects) and the workload's figures.
    #[command(
        after_help = "Examples:\n  sanpolicy boot --mechanism kasan\n  cargo xtask boot --tree /usr/src/linux --runs 3 --format json"
    )]
    Boot(boot::BootArgs),
    /// Price one exemption: boot the kernel with the unit's setting as the policy has it and
    /// flipped, interleaved, and compare the workload's sys and wall time.
    #[command(
        after_help = "Examples:\n  sanpolicy cost kernel/locking/lockdep.o --mechanism kasan --runs 8\n  cargo xtask cost kernel/locking/lockdep.o --tree /usr/src/linux --preempt-rt --format json"
    )]
    Cost(boot::CostArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(
        after_help = "Examples:\n  sanpolicy completions bash > ~/.local/share/bash-completion/completions/sanpolicy\n  sanpolicy completions zsh > ~/.zfunc/_sanpolicy"
    )]
    Completions(dist::CompletionsArgs),
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
    let mut ui = Ui::new(defaults.invocation());
    match cli.command {
        Command::GenMakefiles(a) => gen::run(&a, defaults, &mut ui),
        Command::GenCargo(a) => gen_cargo::run(&a, defaults, &mut ui),
        Command::Check(a) => check::run(&a, defaults, &mut ui),
        Command::Rules(a) => rules::run(&a, defaults, &mut ui),
        Command::Sync(a) => sync::run(&a, defaults, &mut ui),
        Command::Import(a) => import::run(&a, defaults, &mut ui),
        Command::Explain(a) => review::explain_run(&a, defaults, &mut ui),
        Command::Report(a) => review::report_run(&a, defaults, &mut ui),
        Command::Diff(a) => review::diff_run(&a, defaults, &mut ui),
        Command::PreCommit(a) => hook::pre_commit_run(&a, defaults, &mut ui),
        Command::InstallHook(a) => hook::install_run(&a, defaults, &mut ui),
        Command::Derive(a) => derive::run(&a, defaults, &mut ui),
        Command::Boot(a) => boot::boot_run(&a, defaults, &mut ui),
        Command::Cost(a) => boot::cost_run(&a, defaults, &mut ui),
        Command::Completions(a) => dist::completions_run(&a),
    }
}
