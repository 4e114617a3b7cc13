//! The scaling criterion of issue 27: one directory of 100,000 units must cost `check`,
//! `sync --check`, `explain` and `gen-makefiles --check` at most 12x what 10,000 cost (linear
//! with room for caches; the quadratic loops took 14-17x for 4x the units). Synthetic trees
//! (6.12's rule files, `lib/` with N sources, `obj-y += fN.o` and `KASAN_SANITIZE_fN.o := n`
//! lines, imported in place) under `target/bench/units-N`, built once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The commands judged, as run in the tree.
const COMMANDS: &[(&str, &[&str])] = &[
    ("check", &["check"]),
    ("sync --check", &["sync", "--check"]),
    ("explain", &["explain", "lib/f7.o"]),
    ("gen-makefiles --check", &["gen-makefiles", "--check"]),
];

pub const SMALL: usize = 10_000;
pub const LARGE: usize = 100_000;
pub const LIMIT: f64 = 12.0;

/// The synthetic tree of `n` units, imported by `bin`; made once (a marker says it is whole).
fn tree(repo: &Path, work: &Path, bin: &Path, n: usize) -> Result<PathBuf, String> {
    let dir = work.join(format!("units-{n}"));
    if dir.join(".ready").is_file() {
        return Ok(dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    let rules = repo.join("tests/fixtures/kernel-rules/linux-6.12/scripts");
    std::fs::create_dir_all(dir.join("scripts")).map_err(io)?;
    std::fs::create_dir_all(dir.join("lib")).map_err(io)?;
    for f in ["Makefile.lib", "Makefile.build"] {
        std::fs::copy(rules.join(f), dir.join("scripts").join(f)).map_err(io)?;
    }
    let mut makefile = String::new();
    for i in 0..n {
        std::fs::write(dir.join(format!("lib/f{i}.c")), "").map_err(io)?;
        makefile.push_str(&format!("obj-y += f{i}.o\n"));
    }
    for i in 0..n {
        makefile.push_str(&format!("KASAN_SANITIZE_f{i}.o := n\n"));
    }
    std::fs::write(dir.join("lib/Makefile"), makefile).map_err(io)?;
    super::bench::run(Command::new(bin).arg("import").current_dir(&dir).stderr(std::process::Stdio::null()))?;
    std::fs::write(dir.join(".ready"), "").map_err(io)?;
    Ok(dir)
}

/// One criterion per command: the median time at [`LARGE`] over the median at [`SMALL`].
pub fn criteria(repo: &Path, work: &Path, bin: &Path, runs: usize) -> Result<Vec<(String, f64)>, String> {
    let small = tree(repo, work, bin, SMALL)?;
    let large = tree(repo, work, bin, LARGE)?;
    let mut out = Vec::new();
    for (what, args) in COMMANDS {
        let median = |dir: &Path| -> Result<Duration, String> {
            let mut samples = Vec::new();
            for _ in 0..runs {
                samples.push(super::bench::time(Command::new(bin).args(*args).current_dir(dir))?);
            }
            samples.sort();
            Ok(samples[samples.len() / 2])
        };
        let (s, l) = (median(&small)?, median(&large)?);
        println!(
            "{what:<24} {SMALL} units {:>8.1} ms   {LARGE} units {:>9.1} ms   {:.2}x",
            s.as_secs_f64() * 1e3,
            l.as_secs_f64() * 1e3,
            l.as_secs_f64() / s.as_secs_f64()
        );
        out.push((format!("{what}: {LARGE} / {SMALL} units"), l.as_secs_f64() / s.as_secs_f64()));
    }
    Ok(out)
}
