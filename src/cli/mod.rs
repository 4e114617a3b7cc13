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

pub use crate::diagnostic::{EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};

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
    PreCommit(CommonArgs),
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
    }
}
