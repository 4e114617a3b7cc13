//! The real build: the tree's own Kbuild, out of tree in `--build DIR`, configured once from
//! `tinyconfig` plus the runtime's Kconfig symbols (with the tree's `scripts/config`), and built
//! with gcc's call-graph output (`KCFLAGS=-fcallgraph-info`). Kbuild's own dependency tracking
//! makes a rerun recompile only what changed; the command line never varies between runs, since
//! Kbuild rebuilds every object whose command line changed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::runtimes::{Config, Runtime};

/// The flag that makes gcc write `x.ci` beside `x.o`.
pub const KCFLAGS: &str = "KCFLAGS=-fcallgraph-info";

/// The make target: the build directory itself (`.`), i.e. Kbuild's descent into every
/// directory of the kernel, which compiles every built-in object, checks every object's sources,
/// headers and command line, and writes each directory's `built-in.a` and the `lib.a`
/// libraries. Derive reads objects, `.ci` files and those archives' member lists, never the
/// linked image, so linking `vmlinux` (vmlinux.a, vmlinux.o, objtool on it, modpost, three
/// kallsyms links) is time spent on every run for nothing. `vmlinux.a` cannot be the goal: a
/// goal ending in `.a` is one of Kbuild's single targets, made without the descent, so an
/// existing archive would hide a changed source.
const TARGET: &str = ".";

/// Trees whose top Makefile has no `$(build-dir)` rule (older than the descent's current form):
/// there the image itself is the target.
const OLD_TARGET: &str = "vmlinux";

/// Where make's output goes, inside the build directory.
pub const LOG: &str = "sanpolicy-derive.log";

/// What the build step did and how long each part took.
#[derive(Debug, Clone, Default)]
pub struct Built {
    pub steps: Vec<(String, Duration)>,
    /// Objects Kbuild compiled in this run (its `CC` lines): 0 when nothing changed.
    pub compiled: usize,
    /// Those objects, relative to the build directory, in make's order.
    pub objects: Vec<String>,
    pub log: PathBuf,
}

/// What to configure and build: the Kconfig symbols (on top of `tinyconfig`), the make
/// arguments after `-jN` (variables and goals), the log's name in the build directory, and the
/// command a failure's hint says to run again.
#[derive(Debug, Clone)]
pub struct Recipe<'a> {
    pub config: &'a Config,
    pub make: &'a [&'a str],
    pub log: &'a str,
    pub again: &'a str,
}

/// A build step that failed: what, and where to look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub hint: String,
}

/// Whether `build` may be used as the build directory of `tree`: it does not exist yet, is
/// empty (or holds only derive's log), or is a Kbuild build directory of this tree (Kbuild's
/// `outputmakefile` writes a `source` symlink to the tree and a `Makefile` that includes the
/// tree's). Anything else (the user's own files, the source tree itself, another tree's build)
/// is refused before anything is configured or written there.
pub fn check_build_dir(tree: &Path, build: &Path) -> Result<(), Failure> {
    let refuse = |what: String| Failure {
        message: format!("`{}` {what}", build.display()),
        hint: "pass a new or empty directory, or a build directory of this tree, with `--build DIR`".into(),
    };
    let entries = match fs::read_dir(build) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(format!("cannot be listed: {e}"))),
    };
    let names: Vec<std::ffi::OsString> = entries.filter_map(Result::ok).map(|e| e.file_name()).collect();
    if names.iter().all(|n| n == LOG) {
        return Ok(());
    }
    if is_build_of(tree, build) {
        return Ok(());
    }
    Err(refuse(format!(
        "is not empty and not a Kbuild build directory of `{}` (no `source` link to it and `Makefile` including it)",
        tree.display()
    )))
}

/// Kbuild's marks of a build directory of `tree`: `source` links to the tree, and `Makefile`
/// includes the tree's `Makefile`.
fn is_build_of(tree: &Path, build: &Path) -> bool {
    let Ok(tree) = fs::canonicalize(tree) else { return false };
    let linked = fs::symlink_metadata(build.join("source")).is_ok_and(|m| m.file_type().is_symlink())
        && fs::canonicalize(build.join("source")).is_ok_and(|t| t == tree);
    let Ok(bytes) = crate::input::read(&build.join("Makefile"), crate::input::KBUILD_LIMIT) else { return false };
    let includes = String::from_utf8_lossy(&bytes).lines().any(|l| {
        l.strip_prefix("include ")
            .and_then(|p| p.trim().strip_suffix("/Makefile"))
            // Kbuild writes `..` when the build directory is a subdirectory of the tree.
            .is_some_and(|dir| fs::canonicalize(build.join(dir)).is_ok_and(|d| d == tree))
    });
    linked && includes
}

/// Configure (when needed) and build `tree` in `build` for `runtime`: with gcc's call graph, or
/// with clang (whose call edges derive reads from the objects).
pub fn ensure(tree: &Path, build: &Path, runtime: &Runtime, jobs: usize) -> Result<Built, Failure> {
    let goal = target(tree);
    let make: &[&str] = if runtime.config.clang { &[goal] } else { &[KCFLAGS, goal] };
    let recipe = Recipe { config: &runtime.config, make, log: LOG, again: "derive" };
    ensure_with(tree, build, &recipe, jobs)
}

/// Configure (when `.config` lacks what the recipe needs) and build `tree` in `build`.
pub fn ensure_with(tree: &Path, build: &Path, recipe: &Recipe, jobs: usize) -> Result<Built, Failure> {
    // make runs with `-C tree`, so a relative `O=` would name a directory inside the tree.
    let build = &std::path::absolute(build).map_err(|e| Failure {
        message: format!("cannot resolve the build directory `{}`: {e}", build.display()),
        hint: "pass an absolute path with `--build DIR`".into(),
    })?;
    if recipe.config.clang {
        clang_installed()?;
    }
    let log = build.join(recipe.log);
    let mut built = Built { log: log.clone(), ..Built::default() };
    fs::create_dir_all(build).map_err(|e| Failure {
        message: format!("cannot create the build directory `{}`: {e}", build.display()),
        hint: "pass a writable directory with `--build DIR`".into(),
    })?;
    let mut output = String::new();
    let start = Instant::now();
    let config = build.join(".config");
    let vars = recipe.config.make_vars();
    if !config.is_file() {
        make(tree, build, &[vars, &["tinyconfig"]].concat(), &mut output, &log, recipe.again)?;
    }
    let wanted = recipe.config;
    if !configured(&read_text(&config), wanted) {
        let mut args: Vec<String> = vec!["--file".into(), config.display().to_string()];
        for (flag, symbols) in [("-e", &wanted.enable), ("-d", &wanted.disable)] {
            for s in symbols {
                args.extend([flag.to_string(), s.clone()]);
            }
        }
        let again = recipe.again;
        run(Command::new(tree.join("scripts/config")).args(&args), "scripts/config", &mut output, &log, again)?;
        make(tree, build, &[vars, &["olddefconfig"]].concat(), &mut output, &log, again)?;
        let text = read_text(&config);
        if let Some(missing) = wanted.require.iter().find(|s| !is_set(&text, s)) {
            return Err(Failure {
                message: format!("CONFIG_{missing} is not `y` in `{}` after olddefconfig", config.display()),
                hint: format!(
                    "a dependency of CONFIG_{missing} is off in this tree: set it with `make -C {} O={} menuconfig`, or remove `{}` to start again from tinyconfig",
                    tree.display(),
                    build.display(),
                    config.display()
                ),
            });
        }
    }
    built.steps.push(("configure".into(), start.elapsed()));
    let start = Instant::now();
    let jobs = format!("-j{jobs}");
    let mut args = vec![jobs.as_str()];
    args.extend(vars);
    args.extend(recipe.make);
    make(tree, build, &args, &mut output, &log, recipe.again)?;
    built.objects = compiled(&output);
    built.compiled = built.objects.len();
    let goals: Vec<&str> = recipe.make.iter().copied().filter(|a| !a.contains('=')).collect();
    built.steps.push((format!("make {}", goals.join(" ")), start.elapsed()));
    write_log(&log, &output);
    Ok(built)
}

/// `LLVM=1` needs clang, lld and the LLVM binutils; a missing one is said before make runs.
fn clang_installed() -> Result<(), Failure> {
    for tool in ["clang", "ld.lld", "llvm-ar", "llvm-nm", "llvm-objcopy"] {
        let found = Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
        if !found.is_ok_and(|s| s.success()) {
            return Err(Failure {
                message: format!("`{tool}` is not installed: this configuration builds with clang (`LLVM=1`)"),
                hint: "install clang, lld and llvm (`apt-get install clang lld llvm`)".into(),
            });
        }
    }
    Ok(())
}

/// The objects of make's `CC` lines (`  CC      kernel/locking/lockdep.o`).
pub fn compiled(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("CC "))
        .map(|rest| rest.trim().to_string())
        .filter(|o| !o.is_empty())
        .collect()
}

/// `.` where the tree's top Makefile has the descent's `$(build-dir): prepare` rule (that rule
/// is what make runs; its presence is only how the target is chosen), `vmlinux` otherwise.
fn target(tree: &Path) -> &'static str {
    let top = read_text(&tree.join("Makefile"));
    if top.lines().any(|l| l.starts_with("$(build-dir): prepare")) {
        TARGET
    } else {
        OLD_TARGET
    }
}

/// Whether `.config` already holds what the runtime needs (then it is left alone, so Kbuild
/// sees no configuration change and rebuilds nothing).
fn configured(text: &str, config: &Config) -> bool {
    config.require.iter().all(|s| is_set(text, s)) && !config.disable.iter().any(|s| is_set(text, s))
}

/// Whether `CONFIG_<symbol>=y` is a line of the `.config` text.
pub fn is_set(config: &str, symbol: &str) -> bool {
    let line = format!("CONFIG_{symbol}=y");
    config.lines().any(|l| l == line)
}

fn make(tree: &Path, build: &Path, args: &[&str], output: &mut String, log: &Path, again: &str) -> Result<(), Failure> {
    let mut cmd = Command::new("make");
    cmd.arg("-C").arg(tree).arg(format!("O={}", build.display())).args(args);
    run(&mut cmd, &format!("make {}", args.join(" ")), output, log, again)
}

/// Run a step, keeping its output for the log; a failure points at the log.
fn run(cmd: &mut Command, what: &str, output: &mut String, log: &Path, again: &str) -> Result<(), Failure> {
    let result = cmd.stdin(Stdio::null()).output();
    let out = result.map_err(|e| Failure {
        message: format!("cannot run `{what}`: {e}"),
        hint: "install GNU make and gcc (`apt-get install make gcc flex bison bc libelf-dev libssl-dev`)".into(),
    })?;
    output.push_str(&String::from_utf8_lossy(&out.stdout));
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        return Ok(());
    }
    write_log(log, output);
    // make's own error lines (or the output's end) say what broke, before the log is opened.
    let lines: Vec<&str> = output.lines().collect();
    let errors: Vec<&str> = lines.iter().copied().filter(|l| l.contains("rror")).collect();
    let shown = if errors.is_empty() {
        &lines[lines.len().saturating_sub(10)..]
    } else {
        &errors[errors.len().saturating_sub(10)..]
    };
    Err(Failure {
        message: format!("`{what}` failed ({}):\n{}", out.status, shown.join("\n")),
        hint: format!("read the build's output in `{}`, fix the cause, and run {again} again", log.display()),
    })
}

/// The log is a by-product in the build directory; failing to write it must not hide the result.
fn write_log(log: &Path, output: &str) {
    let _ = crate::output::write_atomic(log, output);
}

/// A text file of the tree or the build (its `.config`, the top `Makefile`) through
/// [`crate::input`]; empty when it cannot be read (then the build step that needs it runs).
fn read_text(path: &Path) -> String {
    crate::input::read_to_string(path, crate::input::KBUILD_LIMIT).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descent_is_the_target_where_the_tree_has_its_rule() {
        let dir = tempfile::tempdir().unwrap();
        let descent = "PHONY += $(build-dir)\n$(build-dir): prepare\n\t$(Q)$(MAKE) $(build)=$@\n";
        fs::write(dir.path().join("Makefile"), descent).unwrap();
        assert_eq!(target(dir.path()), ".");
        // A tree without the rule builds the image.
        fs::write(dir.path().join("Makefile"), "vmlinux: scripts/link-vmlinux.sh autoksyms_recursive FORCE\n").unwrap();
        assert_eq!(target(dir.path()), "vmlinux");
    }
}
