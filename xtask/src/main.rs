//! `cargo xtask`: the same commands as `sanpolicy`, with this repository's defaults
//! (`policy/linux.toml`, no tree, fragments into `target/sanpolicy/fragments`), plus `bench`.

mod bench;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("bench") {
        return match bench::parse(&args[1..]).and_then(|o| bench::bench(&repo_root(), o)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    let args = std::iter::once("cargo xtask".to_string()).chain(args);
    ExitCode::from(sanpolicy::cli::main(args, &sanpolicy::cli::Defaults::xtask(&repo_root())))
}
