//! `cargo xtask bench`: times `sanpolicy import` and `sanpolicy gen-makefiles --check` on a real
//! kernel tree against ripgrep searching the same kbuild files for the same directive names, in
//! the same run, and prints medians and ratios. Speed is reported here, never asserted in tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sanpolicy::mechanism::MECHANISMS;

pub struct Options {
    pub tree: Option<PathBuf>,
    pub runs: usize,
    /// Skip the pre-commit hook measurement (its first run builds a git repository of 6.1).
    pub no_hook: bool,
    /// Also price lockdep's KASAN exemption at run time (`sanpolicy cost`, QEMU): the seed's
    /// direction must hold. Opt-in: a kernel build and 2 × `runs` boots.
    pub cost: bool,
    /// With `--cost`: the PREEMPT_RT configuration too.
    pub preempt_rt: bool,
    /// Only the scaling criterion (synthetic trees, no kernel tree).
    pub units_only: bool,
}

pub const USAGE: &str =
    "usage: cargo xtask bench [--tree DIR] [--runs N] [--no-hook] [--cost [--preempt-rt]] [--units-only]

Times import, gen-makefiles --check and the pre-commit hook against ripgrep in the same run
and prints medians and ratios. With --cost, also boots the KASAN + lockdep kernel with and
without lockdep's KASAN exemption under QEMU (`sanpolicy cost`, 8 interleaved boots each) and
requires the exempt build's guest sys time to be lower with a 95% interval below 1; with
--preempt-rt, for the real-time configuration too. Always (alone with --units-only): check,
sync --check, explain and gen-makefiles --check on one directory of 100,000 units against
10,000 (synthetic trees under target/bench), each within 12x (medians of up to 3 runs).

Examples:
  cargo xtask bench --runs 21
  cargo xtask bench --runs 5 --no-hook --cost --preempt-rt
  cargo xtask bench --units-only";

pub fn parse(args: &[String]) -> Result<Options, String> {
    let mut options =
        Options { tree: None, runs: 11, no_hook: false, cost: false, preempt_rt: false, units_only: false };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--tree" => options.tree = Some(it.next().ok_or("--tree needs a directory")?.into()),
            "--runs" => {
                options.runs =
                    it.next().and_then(|r| r.parse().ok()).filter(|r| *r > 0).ok_or("--runs needs a positive number")?
            }
            "--no-hook" => options.no_hook = true,
            "--cost" => options.cost = true,
            "--preempt-rt" => options.preempt_rt = true,
            "--units-only" => options.units_only = true,
            other => return Err(format!("unexpected argument `{other}`\n\n{USAGE}")),
        }
    }
    Ok(options)
}

pub(crate) fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    status.success().then_some(()).ok_or_else(|| format!("{cmd:?} failed with {status}"))
}

/// Extract Debian's source package of `version` once under `target/bench/`.
fn extracted(work: &Path, version: &str) -> Result<PathBuf, String> {
    let tree = work.join(format!("linux-source-{version}"));
    if tree.join("scripts/Makefile.lib").is_file() {
        return Ok(tree);
    }
    let tarball = PathBuf::from(format!("/usr/src/linux-source-{version}.tar.xz"));
    let tarball = tarball.as_path();
    if !tarball.is_file() {
        return Err(format!("no tree: pass --tree DIR, or `apt-get install linux-source-{version}`"));
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
    adopt_into(bin, tree, &copy)?;
    Ok(copy)
}

/// Hard-link `tree` into `copy` and adopt it: the policy imported, the Makefiles' directives
/// moved into generated blocks.
fn adopt_into(bin: &Path, tree: &Path, copy: &Path) -> Result<(), String> {
    run(Command::new("cp").arg("-al").arg(tree).arg(copy))?;
    run(Command::new(bin).args(["import", "--adopt", "--force"]).current_dir(copy).stderr(Stdio::null()))
}

fn rg_command(tree: &Path) -> Command {
    let mut cmd = Command::new("rg");
    cmd.args(["--no-messages", "--no-ignore", "--count"]);
    for m in MECHANISMS {
        cmd.args(["-e", m.directive_name()]);
    }
    for glob in ["Makefile", "Makefile.*", "Kbuild", "Kbuild.*", "*.mk", "!/Documentation/", "!/tools/"] {
        cmd.args(["-g", glob]);
    }
    cmd.arg(tree);
    cmd
}

pub(crate) fn time(cmd: &mut Command) -> Result<Duration, String> {
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// A criterion of issue 10: `ratio` (a median over a median of the same run) must not exceed
/// `limit`.
struct Criterion {
    what: std::borrow::Cow<'static, str>,
    ratio: f64,
    limit: f64,
}

impl Criterion {
    fn holds(&self) -> bool {
        self.ratio <= self.limit
    }
}

pub fn bench(repo: &Path, options: Options) -> Result<(), String> {
    run(Command::new(env!("CARGO")).args(["build", "--release", "--quiet", "--bin", "sanpolicy"]).current_dir(repo))?;
    let bin = repo.join("target/release/sanpolicy");
    let work = repo.join("target/bench");
    let units = |criteria: &mut Vec<Criterion>| -> Result<(), String> {
        for (what, ratio) in super::units::criteria(repo, &work, &bin, options.runs.min(3))? {
            criteria.push(Criterion { what: what.into(), ratio, limit: super::units::LIMIT });
        }
        Ok(())
    };
    if options.units_only {
        let mut criteria = Vec::new();
        units(&mut criteria)?;
        return report(&criteria);
    }
    let tree = match options.tree {
        Some(t) => t,
        None => extracted(&work, "6.12")?,
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
    println!("tree: {} ({} runs, medians)", tree.display(), options.runs);
    println!("rg (same kbuild files, same names)  {:>8.1} ms", ms(rg));
    println!("sanpolicy import                    {:>8.1} ms   {:.2}x rg", ms(import), ms(import) / ms(rg));
    println!(
        "sanpolicy gen-makefiles --check     {:>8.1} ms   {:.2}x rg, {:.2}x import",
        ms(check),
        ms(check) / ms(rg),
        ms(check) / ms(import)
    );
    // Import took 0.66x rg before issue 10 (each file read once, memchr for the directive
    // names, on every core): hardening the reads must not make it slower than that.
    let mut criteria = vec![
        Criterion { what: "import / rg".into(), ratio: ms(import) / ms(rg), limit: 0.66 },
        // In place, --check sweeps every kbuild file (a hand-added line anywhere is drift): it
        // reads what import reads, so it must not take longer.
        Criterion { what: "gen-makefiles --check / import".into(), ratio: ms(check) / ms(import), limit: 1.0 },
    ];
    if !options.no_hook {
        criteria.push(hook(&bin, &tree, &work, options.runs)?);
    }
    if options.cost {
        criteria.push(cost(&bin, &tree, &[])?);
        if options.preempt_rt {
            criteria.push(cost(&bin, &tree, &["--preempt-rt"])?);
        }
    }
    units(&mut criteria)?;
    report(&criteria)
}

/// Every criterion with its verdict; an error when one fails.
fn report(criteria: &[Criterion]) -> Result<(), String> {
    println!();
    for c in criteria {
        println!("{:<40} {:>5.2}  (limit {:.2})  {}", c.what, c.ratio, c.limit, if c.holds() { "ok" } else { "FAILS" });
    }
    match criteria.iter().filter(|c| !c.holds()).count() {
        0 => Ok(()),
        n => Err(format!("{n} criterion(s) not met")),
    }
}

fn git(repo: &Path, args: &[&str]) -> Result<(), String> {
    run(Command::new("git").arg("-C").arg(repo).args(args).stdout(Stdio::null()))
}

/// The adopted tree committed to git, with the hook installed (built once: a few minutes for
/// 6.12's 80k files).
fn hook_repo(bin: &Path, tree: &Path, work: &Path) -> Result<PathBuf, String> {
    let repo = work.join("hook-6.12");
    if repo.join(".git/bench-ready").is_file() {
        return Ok(repo);
    }
    let _ = std::fs::remove_dir_all(&repo);
    eprintln!("building a git repository of the adopted tree in {} (once)", repo.display());
    adopt_into(bin, tree, &repo)?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    // Debian's tree ignores everything at the top (`/*`), hence -f.
    git(&repo, &["-c", "core.compression=1", "-c", "core.looseCompression=1", "add", "-f", "-A", "."])?;
    git(&repo, &["-c", "user.email=bench@sanpolicy", "-c", "user.name=bench", "commit", "-q", "-m", "adopted"])?;
    run(Command::new(bin).arg("install-hook").current_dir(&repo).stdout(Stdio::null()))?;
    std::fs::write(repo.join(".git/bench-ready"), "").map_err(|e| e.to_string())?;
    Ok(repo)
}

/// Stage `edits` (and regenerate), time the installed hook against `git diff --cached` (its
/// floor), then restore every touched file by rename so the hard links to the extracted tree
/// stay intact. The ratio of the medians.
fn time_staged(
    bin: &Path,
    repo: &Path,
    runs: usize,
    label: &str,
    edits: &[(&str, String)],
    regenerate: bool,
) -> Result<f64, String> {
    for (rel, text) in edits {
        sanpolicy::output::write_atomic(&repo.join(rel), text).map_err(|e| e.to_string())?;
    }
    if regenerate {
        let out = Command::new(bin).args(["gen-makefiles"]).current_dir(repo).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("gen-makefiles: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    let touched = git_changed(repo)?;
    git(repo, &["add", "-f", "-u"])?;
    // The hook as git runs it: the script install-hook wrote, from the top of the work tree.
    let script = repo.join(".git/hooks/pre-commit");
    let (mut hook, mut floor) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        hook.push(time(Command::new(&script).current_dir(repo))?);
        floor.push(time(Command::new("git").arg("-C").arg(repo).args(["diff", "--cached"]))?);
    }
    let status = Command::new(&script).current_dir(repo).stdout(Stdio::null()).stderr(Stdio::null()).status();
    git(repo, &["reset", "-q"])?;
    for path in touched {
        let rel = path.strip_prefix(repo).unwrap_or(&path).display().to_string();
        let out = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["show", &format!("HEAD:{rel}")])
            .output()
            .map_err(|e| e.to_string())?;
        sanpolicy::output::write_atomic(&path, &String::from_utf8_lossy(&out.stdout)).map_err(|e| e.to_string())?;
    }
    let (hook, floor) = (median(hook), median(floor));
    println!(
        "pre-commit hook, {label:<27} {:>8.1} ms   {:.2}x `git diff --cached` ({:.1} ms; hook exit {})",
        ms(hook),
        ms(hook) / ms(floor),
        ms(floor),
        status.ok().and_then(|s| s.code()).unwrap_or(-1)
    );
    Ok(ms(hook) / ms(floor))
}

fn git_changed(repo: &Path) -> Result<Vec<PathBuf>, String> {
    let out =
        Command::new("git").arg("-C").arg(repo).args(["diff", "--name-only"]).output().map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(|l| repo.join(l)).collect())
}

/// The hook on a typical commit (one Makefile edited: its criterion) and, for information, on
/// a policy change with its regenerated lines.
/// A policy edit on the imported 6.12 policy: KASAN off for lockdep as well (one new line).
const POLICY_EDIT: (&str, &str) = (
    "path = \"kernel/locking/lockdep.o\"\nskip = [\"kcsan\"]\n",
    "path = \"kernel/locking/lockdep.o\"\nskip = [\"kasan\", \"kcsan\"]\n",
);

fn hook(bin: &Path, tree: &Path, work: &Path, runs: usize) -> Result<Criterion, String> {
    let repo = hook_repo(bin, tree, work)?;
    println!("tree: {} (git repository of the adopted tree, hook installed)", repo.display());
    let lib = std::fs::read_to_string(repo.join("lib/Makefile")).map_err(|e| e.to_string())?;
    let typical = time_staged(
        bin,
        &repo,
        runs,
        "Makefile edit (typical):",
        &[("lib/Makefile", format!("{lib}obj-y += sanpolicy_bench.o\n"))],
        false,
    )?;
    let policy = std::fs::read_to_string(repo.join("sanitizer-policy.toml")).map_err(|e| e.to_string())?;
    let edited = policy.replacen(POLICY_EDIT.0, POLICY_EDIT.1, 1);
    if edited == policy {
        return Err(format!("the bench's policy edit did not apply: no `{}` in the policy", POLICY_EDIT.0));
    }
    time_staged(bin, &repo, runs, "policy edit + regenerated:", &[("sanitizer-policy.toml", edited)], true)?;
    Ok(Criterion { what: "pre-commit hook / git diff --cached".into(), ratio: typical, limit: 1.5 })
}

/// `sanpolicy cost kernel/locking/lockdep.o --mechanism kasan --runs 8`: the criterion is the
/// upper end of the 95% interval of the guest sys time's ratio (exempt / instrumented), which
/// must be below 1 (the seed's direction, and a real difference).
fn cost(bin: &Path, tree: &Path, extra: &[&str]) -> Result<Criterion, String> {
    let mut cmd = Command::new(bin);
    cmd.args(["cost", "kernel/locking/lockdep.o", "--mechanism", "kasan", "--runs", "8", "--format", "json", "--tree"])
        .arg(tree)
        .args(extra)
        .stderr(Stdio::inherit());
    let start = Instant::now();
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{cmd:?} printed no JSON ({e}), exit {:?}", out.status.code()))?;
    let f = |k: &str, x: &str| v[k][x].as_f64().unwrap_or(f64::NAN);
    println!(
        "cost lockdep.o kasan{}: sys {:.3} ({:.3}-{:.3}), wall {:.3} ({:.3}-{:.3}), {} in {:.0} s",
        extra.join(" "),
        f("sys", "ratio"),
        f("sys", "low"),
        f("sys", "high"),
        f("wall", "ratio"),
        f("wall", "low"),
        f("wall", "high"),
        v["verdict"].as_str().unwrap_or("?"),
        start.elapsed().as_secs_f64()
    );
    let what =
        if extra.is_empty() { "lockdep KASAN exemption: sys interval top" } else { "... PREEMPT_RT: sys interval top" };
    Ok(Criterion { what: what.into(), ratio: f("sys", "high"), limit: 0.999 })
}
