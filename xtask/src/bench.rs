//! `cargo xtask bench`: times `sanpolicy import` and `sanpolicy gen-makefiles --check` on a real
//! kernel tree against ripgrep searching the same kbuild files for the same directive names, in
//! the same run, and prints medians and ratios. Speed is reported here, never asserted in tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sanpolicy::mechanism::{Form, MECHANISMS};

pub struct Options {
    pub tree: Option<PathBuf>,
    pub runs: usize,
}

pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options { tree: None, runs: 11 };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--tree" => options.tree = Some(it.next().ok_or("--tree needs a directory")?.into()),
            "--runs" => {
                options.runs =
                    it.next().and_then(|r| r.parse().ok()).filter(|r| *r > 0).ok_or("--runs needs a positive number")?
            }
            "-h" | "--help" => {
                return Err(
                    "usage: cargo xtask bench [--tree DIR] [--runs N]\n\nExample:\n  cargo xtask bench --runs 21"
                        .into(),
                )
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(options)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    status.success().then_some(()).ok_or_else(|| format!("{cmd:?} failed with {status}"))
}

/// Extract Debian's 6.12 source package once under `target/bench/`.
fn default_tree(work: &Path) -> Result<PathBuf, String> {
    let tree = work.join("linux-source-6.12");
    if tree.join("scripts/Makefile.lib").is_file() {
        return Ok(tree);
    }
    let tarball = Path::new("/usr/src/linux-source-6.12.tar.xz");
    if !tarball.is_file() {
        return Err("no tree: pass --tree DIR, or `apt-get install linux-source-6.12`".into());
    }
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    eprintln!("extracting {} into {} (once)", tarball.display(), work.display());
    run(Command::new("tar").arg("xf").arg(tarball).arg("-C").arg(work))?;
    Ok(tree)
}

/// A hard-linked copy of the tree with its directives adopted into generated blocks.
fn adopted_copy(bin: &Path, tree: &Path, work: &Path) -> Result<PathBuf, String> {
    let copy = work.join("adopted");
    if copy.join("sanitizer-policy.toml").is_file() {
        return Ok(copy);
    }
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    run(Command::new("cp").arg("-al").arg(tree).arg(&copy))?;
    run(Command::new(bin).args(["import", "--adopt", "--force"]).current_dir(&copy).stderr(Stdio::null()))?;
    Ok(copy)
}

fn rg_command(tree: &Path) -> Command {
    let mut cmd = Command::new("rg");
    cmd.args(["--no-messages", "--no-ignore", "--count"]);
    for m in MECHANISMS {
        let name = match m.form {
            Form::Variable { var, .. } => var,
            Form::FlagRemoval { flags, .. } => flags.trim_start_matches("$(").trim_end_matches(')'),
        };
        cmd.args(["-e", name]);
    }
    for glob in ["Makefile", "Makefile.*", "Kbuild", "Kbuild.*", "*.mk", "!/Documentation/", "!/tools/"] {
        cmd.args(["-g", glob]);
    }
    cmd.arg(tree);
    cmd
}

fn time(cmd: &mut Command) -> Result<Duration, String> {
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let start = Instant::now();
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    let elapsed = start.elapsed();
    // rg exits 1 when nothing matched; sanpolicy's check exits 1 on drift: both are results.
    if status.code().is_some_and(|c| c <= 1) {
        Ok(elapsed)
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

pub fn bench(repo: &Path, options: Options) -> Result<(), String> {
    run(Command::new(env!("CARGO")).args(["build", "--release", "--quiet", "--bin", "sanpolicy"]).current_dir(repo))?;
    let bin = repo.join("target/release/sanpolicy");
    let work = repo.join("target/bench");
    let tree = match options.tree {
        Some(t) => t,
        None => default_tree(&work)?,
    };
    let adopted = adopted_copy(&bin, &tree, &work)?;
    let (mut rg, mut import, mut check) = (Vec::new(), Vec::new(), Vec::new());
    // Warm the page cache once, then interleave the three so drift hits them alike.
    time(&mut rg_command(&tree))?;
    for _ in 0..options.runs {
        rg.push(time(&mut rg_command(&tree))?);
        import.push(time(Command::new(&bin).args(["import", "--out", "-", "--tree"]).arg(&tree))?);
        check.push(time(Command::new(&bin).args(["gen-makefiles", "--check"]).current_dir(&adopted))?);
    }
    let (rg, import, check) = (median(rg), median(import), median(check));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("tree: {} ({} runs, medians)", tree.display(), options.runs);
    println!("rg (same kbuild files, same names)  {:>8.1} ms", ms(rg));
    println!(
        "sanpolicy import                    {:>8.1} ms   {:.2}x rg (target <= 1.0x)",
        ms(import),
        ms(import) / ms(rg)
    );
    println!(
        "sanpolicy gen-makefiles --check     {:>8.1} ms   {:.2}x rg (target <= 0.2x)",
        ms(check),
        ms(check) / ms(rg)
    );
    Ok(())
}
