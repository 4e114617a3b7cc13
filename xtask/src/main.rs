//! `cargo xtask`: the same commands as `sanpolicy`, with this repository's defaults
//! (`policy/linux.toml`, no tree, fragments into `target/sanpolicy/fragments`), plus `bench`, `fuzz` and `judge`.

mod bench;
mod fuzz;
mod judge;

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
const OWN_COMMANDS: &str = "xtask's own commands:\n  bench  Time import, gen-makefiles --check and the pre-commit hook against ripgrep (`cargo xtask bench --help`)\n  fuzz   Run the policy-parser and kbuild-reader fuzzers in release mode (`cargo xtask fuzz --help`)\n  judge  Compare explain --config with real Kbuild builds: descent, arm64 and clang (`cargo xtask judge --help`)";

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
        Some("judge") => own_command(&args[1..], judge::USAGE, judge::parse, |o| judge::judge(&root, o)),
        _ => {
            let args = std::iter::once("cargo xtask".to_string()).chain(args);
            ExitCode::from(sanpolicy::cli::main(args, &sanpolicy::cli::Defaults::xtask(&root)))
        }
    }
}
