//! `cargo xtask fuzz`: explore with fresh seeds for a while, or walk the fixed seed sequence
//! that `.ci/run` walks for a bounded time, further than CI gets, so that CI stays green for a
//! reason: a red CI means the change broke something, not that a fresh seed was lucky.

use std::path::Path;
use std::process::Command;

pub struct Options {
    pub seconds: u64,
    pub seed: Option<u64>,
    /// Walk CI's fixed seed sequence instead of fresh seeds.
    pub sequence: bool,
}

pub const USAGE: &str = "usage: cargo xtask fuzz [--seconds N] [--sequence | --seed S]

Runs the policy-parser and kbuild-reader fuzzers of tests/fuzz.rs in release mode, in
parallel, for N seconds each (default 300) with fresh seeds. --sequence walks the fixed
seed sequence that .ci/run walks for 50 seconds instead (run it longer than CI does before
pushing); --seed S replays one seed.
A failing input is shrunk, printed and saved under target/fuzz-findings/; add it to
tests/fuzz_regressions/ together with the fix.";

pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options { seconds: 300, seed: None, sequence: false };
    let mut it = args.iter();
    let number = |v: Option<&String>, what: &str| {
        v.and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| format!("{what} needs a non-negative number"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => options.seconds = number(it.next(), "--seconds")?.max(1),
            "--seed" => options.seed = Some(number(it.next(), "--seed")?),
            "--sequence" => options.sequence = true,
            other => return Err(format!("unexpected argument `{other}`\n\n{USAGE}")),
        }
    }
    Ok(options)
}

/// Whether the run ended without a finding.
pub fn fuzz(root: &Path, options: Options) -> Result<bool, String> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root).args(["test", "--release", "--test", "fuzz", "--", "--nocapture", "fuzz_"]);
    match options.seed {
        Some(seed) => cmd.env("SANPOLICY_FUZZ_SEED", seed.to_string()),
        None => cmd.env("SANPOLICY_FUZZ_SECONDS", options.seconds.to_string()),
    };
    if !options.sequence {
        cmd.env("SANPOLICY_FUZZ_FRESH", "1");
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    Ok(status.success())
}
