//! `cargo xtask judge NAME`: the proofs against real builds that CI does not run (or does, to
//! rerun one), each a test of `tests/descent.rs` or `tests/cross_compilers.rs` run by name with
//! its output shown. Build directories are kept under `target/tmp/kbuild/` and rebuilt
//! incrementally by Kbuild, so a second run costs only the comparison.

use std::path::Path;
use std::process::Command;

pub const USAGE: &str = "Usage: cargo xtask judge NAME|all

Run one proof against a real kernel build (Debian's linux-source-6.12, built under
target/tmp/kbuild/) and show its numbers:

  descent-tiny              y/m/n of every .c of the tree against derive's KASAN build (CI: tests/derive.rs)
  descent-defconfig         the same for x86_64 defconfig + KASAN + PROVE_LOCKING, with modules
  arm64-gcc-kasan-generic   explain --config vs .o.cmd, arm64, gcc-aarch64-linux-gnu (CI runs it)
  arm64-gcc-kasan-sw-tags   the same with KASAN software tags
  x86-clang-kasan           x86_64, clang (LLVM=1), KASAN generic
  x86-clang-kmsan           x86_64, clang (LLVM=1), KMSAN
  all                       every one of them, in this order";

/// Each proof: its name, the test binary and the test.
const PROOFS: &[(&str, &str, &str)] = &[
    ("descent-tiny", "descent", "the_descent_agrees_with_kbuilds_archives_for_derives_kasan_build"),
    ("descent-defconfig", "descent", "the_descent_agrees_with_kbuild_for_x86_defconfig_with_kasan_and_lockdep"),
    ("arm64-gcc-kasan-generic", "cross_compilers", "arm64_gcc_kasan_generic_agrees_with_the_compiler"),
    ("arm64-gcc-kasan-sw-tags", "cross_compilers", "arm64_gcc_kasan_sw_tags_agrees_with_the_compiler"),
    ("x86-clang-kasan", "cross_compilers", "x86_clang_kasan_agrees_with_the_compiler"),
    ("x86-clang-kmsan", "cross_compilers", "x86_clang_kmsan_agrees_with_the_compiler"),
];

pub fn parse(args: &[String]) -> Result<Vec<&'static (&'static str, &'static str, &'static str)>, String> {
    match args {
        [name] if name == "all" => Ok(PROOFS.iter().collect()),
        [name] => PROOFS
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|p| vec![p])
            .ok_or_else(|| format!("no proof named `{name}` (see `cargo xtask judge --help`)")),
        _ => Err("name one proof, or `all` (see `cargo xtask judge --help`)".into()),
    }
}

/// Run the proofs; `false` when one failed.
pub fn judge(root: &Path, proofs: Vec<&(&str, &str, &str)>) -> Result<bool, String> {
    let mut ok = true;
    for (name, binary, test) in proofs {
        eprintln!("judge {name}: cargo test --test {binary} -- --exact {test} --include-ignored --nocapture");
        let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(root)
            .args(["test", "--test", binary, "--", "--exact", test, "--include-ignored", "--nocapture"])
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        ok &= status.success();
    }
    Ok(ok)
}
