//! `cargo xtask`: the same commands as `sanpolicy`, with this repository's defaults
//! (`policy/linux.toml`, no tree, fragments into `target/sanpolicy/fragments`), plus `bench`, `fuzz`, `judge` and `dist`.

mod bench;
mod fuzz;
mod judge;
mod units;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Run one of xtask's own commands: `--help` prints its usage, a usage error exits 2, a run
/// that finds something (a fuzzing finding) exits 1.
fn own_command<O>(
    args: &[String],
    usage: &str,
    parse: fn(&[String]) -> Result<O, String>,
    run: impl FnOnce(O) -> Result<bool, String>,
) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{usage}");
        return ExitCode::SUCCESS;
    }
    match parse(args).and_then(run) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// xtask's own commands, listed after the shared ones in `cargo xtask --help`.
const OWN_COMMANDS: &str = "xtask's own commands:\n  bench  Time import, gen-makefiles --check and the pre-commit hook against ripgrep (`cargo xtask bench --help`)\n  fuzz   Run the policy-parser and kbuild-reader fuzzers in release mode (`cargo xtask fuzz --help`)\n  judge  Compare explain --config with real Kbuild builds: descent, arm64 and clang (`cargo xtask judge --help`)\n  dist   Write man pages and shell completions into target/dist/{man,completions}";

const DIST_USAGE: &str = "usage: cargo xtask dist\n\nWrites one man page per command into target/dist/man/ and a completion script per shell into\ntarget/dist/completions/. Install them with, for example:\n  install -Dm644 target/dist/man/*.1 -t ~/.local/share/man/man1/\n  install -Dm644 target/dist/completions/sanpolicy -t ~/.local/share/bash-completion/completions/";

/// `cargo xtask dist`: man pages and completions, generated from the clap definitions.
fn dist(root: &Path) -> Result<bool, String> {
    let out = root.join("target/dist");
    let written = sanpolicy::cli::write_dist(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    println!("{}: {} file(s) written (man/, completions/)", out.display(), written.len());
    println!("next: install -Dm644 {}/man/*.1 -t ~/.local/share/man/man1/", out.display());
    Ok(true)
}

fn no_args(args: &[String]) -> Result<(), String> {
    match args.first() {
        None => Ok(()),
        Some(a) => Err(format!("`cargo xtask dist` takes no arguments, got `{a}` (see `cargo xtask dist --help`)")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = repo_root();
    match args.first().map(String::as_str) {
        Some("bench") => own_command(&args[1..], bench::USAGE, bench::parse, |o| bench::bench(&root, o).map(|()| true)),
        Some("fuzz") => own_command(&args[1..], fuzz::USAGE, fuzz::parse, |o| fuzz::fuzz(&root, o)),
        Some("-h" | "--help" | "help") if args.len() == 1 => {
            let code = sanpolicy::cli::main(
                ["cargo xtask".to_string(), "--help".to_string()],
                &sanpolicy::cli::Defaults::xtask(&root),
            );
            println!("\n{OWN_COMMANDS}");
            ExitCode::from(code)
        }
        Some("dist") => own_command(&args[1..], DIST_USAGE, no_args, |()| dist(&root)),
        Some("judge") => own_command(&args[1..], judge::USAGE, judge::parse, |o| judge::judge(&root, o)),
        _ => {
            let args = std::iter::once("cargo xtask".to_string()).chain(args);
            ExitCode::from(sanpolicy::cli::main(args, &sanpolicy::cli::Defaults::xtask(&root)))
        }
    }
}
