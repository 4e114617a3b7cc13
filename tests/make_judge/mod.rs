//! Shared by the tests that have GNU make judge a claim (`tests/condition_key.rs`,
//! `tests/continued_lines.rs`, `tests/rules_file_lines.rs`, `tests/dotconfig_kconfig.rs`): run
//! make in a directory, with nothing from the environment that could change what it reads.

use std::path::Path;
use std::process::Command;

/// `make -s ARGS` in `dir`: its stdout; a failure fails the test with make's stderr. Make's own
/// flags and any `CONFIG_*` variable of the environment are left out.
pub fn make(dir: &Path, args: &[&str]) -> String {
    let mut command = Command::new("make");
    command.current_dir(dir).arg("-s").args(args);
    for name in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL"] {
        command.env_remove(name);
    }
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CONFIG_") {
            command.env_remove(name);
        }
    }
    let out = command.output().expect("GNU make is the judge: install it (`apt-get install make`)");
    assert!(out.status.success(), "make {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("make's output is UTF-8")
}
