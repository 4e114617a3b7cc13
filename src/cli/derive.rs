//! `derive`: build the tree (or reuse `--build`), walk the runtime's call graph, print the
//! derived recursion-prone set, and optionally write `[[require]]` candidates.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::context::{display, rules_for_tree, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::derive::{self, build, render, runtimes};
use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::policy;

/// The shipped requirements the report checks unless `--policy` names others.
const SHIPPED_REQUIREMENTS: &str = include_str!("../../policy/recursion-prone.toml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Markdown,
    Json,
}

#[derive(Debug, Args)]
pub struct DeriveArgs {
    /// Kernel source tree (default: `.` for sanpolicy; required for xtask).
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
    /// Out-of-tree build directory: new, empty, or a Kbuild build directory of this tree
    /// (default: one per tree and mechanism under the user's cache directory, made 0700).
    #[arg(long, value_name = "DIR")]
    pub build: Option<PathBuf>,
    /// The sanitizer whose runtime is walked: kasan, kcsan, kcov or ubsan (one build each).
    #[arg(long, default_value = "kasan", value_name = "M")]
    pub mechanism: String,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: Format,
    /// Write `[[require]]` candidates (the witness chain as `why`) to FILE for review; an
    /// existing FILE is kept unless `--force` is given.
    #[arg(long, value_name = "FILE")]
    pub write_requirements: Option<PathBuf>,
    /// Overwrite an existing `--write-requirements` FILE.
    #[arg(long)]
    pub force: bool,
    /// Check this policy's requirements instead of the shipped `recursion-prone.toml`.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Parallel compile jobs (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
}

fn bad(ui: &mut Ui, d: Diagnostic) -> u8 {
    ui.report(&Diagnostics(vec![d]));
    EXIT_BAD_INPUT
}

pub fn run(args: &DeriveArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Some(tree) = args.tree.clone().or_else(|| defaults.tree.clone()) else {
        return bad(
            ui,
            Diagnostic::error(Code::Usage, "derive needs a kernel tree")
                .hint(format!("pass it: `{} derive --tree DIR`", defaults.program)),
        );
    };
    let runtime = match runtime_for(&args.mechanism, "derive", ui) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let runtime = &runtime;
    let Ok(rules) = rules_for_tree(&tree, ui) else { return EXIT_BAD_INPUT };
    if !tree.join("scripts/config").is_file() {
        return bad(
            ui,
            Diagnostic::error(
                Code::Usage,
                format!("`{}` has no `scripts/config`: not a kernel source tree", tree.display()),
            )
            .hint("pass the top of a kernel source tree with `--tree DIR`"),
        );
    }
    let requirements = match requirements(args.policy.as_deref(), ui) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if let Some(out) = &args.write_requirements {
        if out.is_dir() {
            return bad(
                ui,
                Diagnostic::error(Code::Io, format!("`{}` is a directory", out.display()))
                    .at(Location::file(out))
                    .hint("pass a file name: `--write-requirements derived.toml`"),
            );
        }
        if !args.force && std::fs::symlink_metadata(out).is_ok() {
            return bad(
                ui,
                Diagnostic::error(
                    Code::Io,
                    format!("`{}` already exists; derive does not overwrite it", out.display()),
                )
                .at(Location::file(out))
                .hint(format!(
                    "pass another file with `--write-requirements FILE`, or add `--force` to replace `{}`",
                    out.display()
                )),
            );
        }
    }
    let build_dir = match &args.build {
        Some(dir) => dir.clone(),
        None => match default_build(&tree, &args.mechanism) {
            Ok(dir) => dir,
            Err(e) => {
                return bad(
                    ui,
                    Diagnostic::error(Code::Io, format!("no private build directory: {e}"))
                        .hint("pass a build directory of your own with `--build DIR`"),
                )
            }
        },
    };
    if let Err(f) = build::check_build_dir(&tree, &build_dir) {
        return bad(ui, Diagnostic::error(Code::Io, f.message).hint(f.hint));
    }
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    eprintln!(
        "derive {}: building `{}` in `{}` (make's output: {})",
        args.mechanism,
        tree.display(),
        build_dir.display(),
        build_dir.join(build::LOG).display()
    );
    let built = match super::context::with_spinner("building with the compiler's call graph", || {
        build::ensure(&tree, &build_dir, runtime, jobs)
    }) {
        Ok(b) => b,
        Err(f) => return bad(ui, Diagnostic::error(Code::Io, f.message).hint(f.hint)),
    };
    let analysed = super::context::with_spinner("walking the call graph", || {
        derive::analyse(&tree, &build_dir, runtime, &rules, &requirements)
    });
    let mut d = match analysed {
        Ok(d) => d,
        Err(f) => return bad(ui, Diagnostic::error(Code::Io, f.message).hint(f.hint)),
    };
    d.timings.splice(0..0, built.steps);
    d.objects_compiled = Some(built.compiled);
    if let Some(out) = &args.write_requirements {
        let command = format!("{} derive --mechanism {}", defaults.program, args.mechanism);
        if let Err(e) = crate::output::write_atomic(out, &render::requirements_toml(&d, &command)) {
            return bad(
                ui,
                Diagnostic::error(Code::Io, format!("cannot write `{}`: {e}", out.display()))
                    .hint("pass a writable path with `--write-requirements FILE`"),
            );
        }
        eprintln!("wrote requirement candidates to {}", display(out));
    }
    match args.format {
        Format::Markdown => out!("{}", render::markdown(&d)),
        Format::Json => outln!("{}", serde_json::to_string_pretty(&render::to_json(&d)).unwrap_or_default()),
    }
    eprintln!("time: {}", render::timings(&d));
    EXIT_OK
}

/// The bundled runtime data of `--mechanism M`; refused (exit 2, said how to fix) when there is
/// none or the mechanism cannot be built here. `what` is the refused action (`derive`, `build`).
pub(super) fn runtime_for(mechanism: &str, what: &str, ui: &mut Ui) -> Result<runtimes::Runtime, u8> {
    let runtimes = match runtimes::bundled() {
        Ok(r) => r,
        Err(e) => return Err(bad(ui, Diagnostic::error(Code::TomlSyntax, e))),
    };
    let with_runtime: Vec<&str> =
        runtimes.iter().filter(|r| r.unsupported.is_none()).map(|r| r.mech.get().name).collect();
    let hint = format!("use one of: --mechanism {}", with_runtime.join(", --mechanism "));
    let Some(runtime) = runtimes.iter().find(|r| r.mech.get().name == mechanism) else {
        let message = format!("no runtime data for `{mechanism}`");
        return Err(bad(ui, Diagnostic::error(Code::UnknownMechanism, message).hint(hint)));
    };
    if let Some(why) = &runtime.unsupported {
        let message = format!("cannot {what} `{mechanism}`: {why}");
        return Err(bad(ui, Diagnostic::error(Code::Unsupported, message).hint(hint)));
    }
    Ok(runtime.clone())
}

/// The shipped requirements, or those of `--policy FILE`.
fn requirements(policy: Option<&Path>, ui: &mut Ui) -> Result<Vec<policy::Requirement>, u8> {
    let (loaded, diags) = match policy {
        Some(path) => policy::load(path),
        None => policy::parse_str(Path::new("policy/recursion-prone.toml"), SHIPPED_REQUIREMENTS),
    };
    for (path, text) in &loaded.files {
        ui.sources.insert(path, text);
    }
    ui.report(&diags.clone().sorted());
    if diags.has_bad_input() {
        return Err(EXIT_BAD_INPUT);
    }
    Ok(loaded.requirements)
}

/// One build directory per tree and mechanism, reused by later runs: under the user's cache
/// directory (`$XDG_CACHE_HOME`, else `~/.cache`), `sanpolicy/derive-<mechanism>-<hash>`, made
/// 0700 and checked to be this user's own real directories (never a fixed name in a directory
/// other users can write, where one of them could plant a build).
fn default_build(tree: &Path, mechanism: &str) -> std::io::Result<PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::canonicalize(tree).unwrap_or_else(|_| tree.to_path_buf()).hash(&mut h);
    let cache = dirs::cache_dir().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no cache directory (neither XDG_CACHE_HOME nor HOME is set)")
    })?;
    let rel = Path::new("sanpolicy").join(format!("derive-{mechanism}-{:016x}", h.finish()));
    crate::output::private_dir(&cache, &rel)
}
