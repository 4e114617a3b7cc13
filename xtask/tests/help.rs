//! `cargo xtask --help` names every command xtask runs: the shared ones and its own.

use std::process::Command;

#[test]
fn help_lists_bench_and_fuzz_with_the_shared_commands() {
    for flag in ["--help", "-h"] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask")).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for command in ["gen-makefiles", "check", "import", "derive", "bench", "fuzz"] {
            assert!(text.lines().any(|l| l.trim_start().starts_with(command)), "{flag}: no `{command}` in:\n{text}");
        }
    }
    // Each own command's help is what `cargo xtask --help` points at.
    for command in ["bench", "fuzz"] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask")).args([command, "--help"]).output().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{command} --help: {out:?}");
    }
}
