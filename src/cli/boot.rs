//! `boot` and `cost`: parse the arguments, run the run-time stage, print what it found.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use super::context::Ui;
use super::{Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::policy;
use crate::runtime::{self, console::Phase, qemu::End, Boot, Figure, Options};

/// The bundled policy, used when the tree has none and `--policy` names none.
const BUNDLED_POLICY: &str = include_str!("../../policy/linux.toml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// What `boot` and `cost` share.
#[derive(Debug, Args)]
pub struct KernelArgs {
    /// Kernel source tree (default: `.` for sanpolicy; required for xtask). It is copied to a
    /// scratch directory per tree under the cache directory and never changed (unless
    /// `--in-place`).
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
    /// Build directory (default: one per tree, mechanism and preemption model beside the
    /// scratch copy, reused by later runs).
    #[arg(long, value_name = "DIR")]
    pub build: Option<PathBuf>,
    /// The sanitizer the kernel is built with: kasan, kcsan, kcov or ubsan.
    #[arg(long, default_value = "kasan", value_name = "M")]
    pub mechanism: String,
    /// Policy to apply (default: the tree's `sanitizer-policy.toml`, else the bundled
    /// `policy/linux.toml`).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Build from this `.config` instead of tinyconfig plus the mechanism's and the boot's
    /// options (it must still enable what they require).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The real-time preemption model (`CONFIG_PREEMPT_RT`), in its own build directory.
    #[arg(long, conflicts_with = "config")]
    pub preempt_rt: bool,
    /// Apply the policy in the tree itself and build from it (changes the tree's Makefiles).
    #[arg(long)]
    pub in_place: bool,
    /// The workload's scale (1: about 2 to 3 s of guest time with KASAN and lockdep, after a
    /// 2 s boot).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub scale: u32,
    /// Parallel compile jobs (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct BootArgs {
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Boots of the same kernel.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub runs: usize,
}

#[derive(Debug, Args)]
pub struct CostArgs {
    /// The unit whose setting is flipped: an object or a directory (`kernel/locking/lockdep.o`).
    #[arg(value_name = "UNIT-PATH")]
    pub unit: String,
    #[command(flatten)]
    pub kernel: KernelArgs,
    /// Boots of each variant, interleaved.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub runs: usize,
    /// Boots running at once (default under TCG: 2 on two or more cores, since guest time
    /// counts instructions; under KVM: 1). `--side-by-side 1` boots one at a time.
    #[arg(long, value_name = "N")]
    pub side_by_side: Option<usize>,
}

fn bad(ui: &mut Ui, d: Diagnostic) -> u8 {
    ui.report(&Diagnostics(vec![d]));
    EXIT_BAD_INPUT
}

/// Progress on a terminal, nothing when piped or under CI.
fn progress() -> impl FnMut(&str) {
    let show = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
    move |line: &str| {
        if show {
            eprintln!("{line}");
        }
    }
}

/// Check the arguments and load what the stage needs; every refusal is exit 2 before anything
/// is written.
fn options(a: &KernelArgs, defaults: &Defaults, ui: &mut Ui, command: &str) -> Result<Options, u8> {
    let Some(tree) = a.tree.clone().or_else(|| defaults.tree.clone()) else {
        return Err(bad(
            ui,
            Diagnostic::error(Code::Io, format!("{command} needs a kernel tree"))
                .hint(format!("pass it: `{} {command} --tree DIR`", defaults.program)),
        ));
    };
    if !tree.join("scripts/config").is_file() || !tree.join("Makefile").is_file() {
        return Err(bad(
            ui,
            Diagnostic::error(
                Code::Io,
                format!("`{}` is not a kernel source tree (no `scripts/config`)", tree.display()),
            )
            .hint("pass the top of a kernel source tree with `--tree DIR`"),
        ));
    }
    let runtime = super::derive::runtime_for(&a.mechanism, "build", ui)?;
    if a.scale == 0 {
        return Err(bad(
            ui,
            Diagnostic::error(Code::Io, "`--scale 0` runs no workload").hint("pass `--scale 1` or more"),
        ));
    }
    if let Some(c) = &a.config {
        if !c.is_file() {
            return Err(bad(
                ui,
                Diagnostic::error(Code::Io, format!("`{}` is not a file", c.display()))
                    .at(Location::file(c))
                    .hint("pass a kernel `.config` with `--config FILE`"),
            ));
        }
    }
    let policy = load_policy(a, defaults, &tree, ui)?;
    Ok(Options {
        tree,
        build: a.build.clone(),
        in_place: a.in_place,
        runtime,
        policy,
        config: a.config.clone(),
        preempt_rt: a.preempt_rt,
        scale: a.scale,
        jobs: a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        cpus: 2,
        memory_mb: 1024,
    })
}

fn load_policy(a: &KernelArgs, defaults: &Defaults, tree: &Path, ui: &mut Ui) -> Result<policy::Policy, u8> {
    let own = tree.join(&defaults.policy);
    let (loaded, diags) = match &a.policy {
        Some(p) => policy::load(p),
        None if defaults.policy.is_absolute() && defaults.policy.is_file() => policy::load(&defaults.policy),
        None if own.is_file() => policy::load(&own),
        None => policy::parse_str(Path::new("policy/linux.toml"), BUNDLED_POLICY),
    };
    for (path, text) in &loaded.files {
        ui.sources.insert(path, text);
    }
    let diags = diags.sorted();
    if diags.has_bad_input() {
        ui.report(&diags);
        return Err(EXIT_BAD_INPUT);
    }
    Ok(loaded)
}

fn failed(ui: &mut Ui, f: runtime::Failure) -> u8 {
    bad(ui, Diagnostic::error(Code::Io, f.message).hint(f.hint))
}

pub fn boot_run(args: &BootArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let o = match options(&args.kernel, defaults, ui, "boot") {
        Ok(o) => o,
        Err(code) => return code,
    };
    if args.runs == 0 {
        return bad(ui, Diagnostic::error(Code::Io, "`--runs 0` boots nothing").hint("pass `--runs 1` or more"));
    }
    let mut show = progress();
    let run = match runtime::boot(&o, args.runs, &mut show) {
        Ok(r) => r,
        Err(f) => return failed(ui, f),
    };
    let clean = run.boots.iter().all(Boot::clean);
    match args.kernel.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&boot_json(&run)).unwrap_or_default()),
        Format::Text => {
            outln!(
                "boot {}: {} ({}), kernel {}",
                o.runtime.mech.get().name,
                run.accel.as_str(),
                run.accel_why,
                run.kernel.image.display()
            );
            outln!("built in `{}` ({} objects compiled)", run.place.build.display(), run.kernel.compiled.len());
            for (i, b) in run.boots.iter().enumerate() {
                out!("{}", boot_text(i + 1, b));
            }
            let times: Vec<String> = run.timings.iter().map(|(s, d)| format!("{s} {:.1} s", d.as_secs_f64())).collect();
            outln!("time: {}", times.join(", "));
        }
    }
    if clean {
        eprintln!("boot ok: {} clean boot(s), no report", run.boots.len());
        EXIT_OK
    } else {
        let bad: Vec<String> = run.boots.iter().filter_map(Boot::verdict).collect();
        eprintln!("boot FAILED: {}", bad.join(" | "));
        EXIT_FINDINGS
    }
}

fn phase_json(p: &Phase) -> Value {
    json!({"name": p.name, "wall": p.wall, "user": p.user, "sys": p.sys})
}

fn boot_json_one(b: &Boot) -> Value {
    let reports: Vec<Value> = b
        .reports
        .iter()
        .map(|(r, at)| {
            json!({
                "kind": r.kind,
                "headline": r.headline,
                "function": at.as_ref().map(|(f, _)| f),
                "object": at.as_ref().map(|(_, o)| o),
                "excerpt": r.excerpt,
            })
        })
        .collect();
    let total = b.console.total.as_ref();
    let lockdep: serde_json::Map<String, Value> =
        b.console.lockdep.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    json!({
        "booted": b.booted(),
        "clean": b.clean(),
        "end": end_name(b.end),
        "verdict": b.verdict(),
        "init": b.console.init,
        "reports": reports,
        "workload": {
            "wall": total.map(|t| t.wall),
            "user": total.map(|t| t.user),
            "sys": total.map(|t| t.sys),
            "scale": b.console.scale,
            "phases": b.console.phases.iter().map(phase_json).collect::<Vec<_>>(),
        },
        "lockdep": lockdep,
        "errors": b.console.errors,
        "host_seconds": b.host.as_secs_f64(),
        "console_file": b.console_file.as_ref().map(|p| p.display().to_string()),
        "console_tail": if b.clean() { Vec::new() } else { b.tail.clone() },
    })
}

fn end_name(e: End) -> String {
    match e {
        End::Marker => "end-marker".into(),
        End::Exited(c) => format!("qemu-exited-{}", c.map_or("signal".into(), |c| c.to_string())),
        End::Silent => "hang-silent".into(),
        End::TimedOut => "hang-timeout".into(),
    }
}

fn boot_json(run: &runtime::BootRun) -> Value {
    let first = &run.boots[0];
    let mut top = boot_json_one(first);
    let reports: Vec<Value> =
        run.boots.iter().flat_map(|b| boot_json_one(b)["reports"].as_array().cloned().unwrap_or_default()).collect();
    top["booted"] = json!(run.boots.iter().all(Boot::booted));
    top["reports"] = json!(reports);
    top["accelerator"] = json!(run.accel.as_str());
    top["accelerator_why"] = json!(run.accel_why);
    top["build"] = json!(run.place.build.display().to_string());
    top["source"] = json!(run.place.source.display().to_string());
    top["objects_compiled"] = json!(run.kernel.compiled.len());
    top["boots"] = json!(run.boots.iter().map(boot_json_one).collect::<Vec<_>>());
    top["timings"] =
        json!(run.timings.iter().map(|(s, d)| json!({"step": s, "seconds": d.as_secs_f64()})).collect::<Vec<_>>());
    top
}

fn boot_text(n: usize, b: &Boot) -> String {
    let mut s = String::new();
    let init = b.console.init.map_or("init not reached".into(), |t| format!("init after {t:.2} s"));
    let state = if b.booted() { "booted" } else { "did NOT finish" };
    s.push_str(&format!("boot {n}: {state}, {init} (guest time), {:.0} s of host time\n", b.host.as_secs_f64()));
    if b.reports.is_empty() {
        s.push_str("  reports: none\n");
    }
    for (r, at) in &b.reports {
        let place = at.as_ref().map_or("unattributed".into(), |(f, o)| format!("{f} in {o}"));
        s.push_str(&format!("  {} report ({place}):\n", r.kind));
        for l in r.excerpt.lines() {
            s.push_str(&format!("    | {l}\n"));
        }
    }
    if !b.console.phases.is_empty() {
        s.push_str(&format!(
            "  {:<12} {:>9} {:>9} {:>9}   (guest seconds, scale {})\n",
            "phase",
            "wall",
            "user",
            "sys",
            b.console.scale.unwrap_or(1)
        ));
        for p in b.console.phases.iter().chain(b.console.total.as_ref()) {
            s.push_str(&format!("  {:<12} {:>9.3} {:>9.3} {:>9.3}\n", p.name, p.wall, p.user, p.sys));
        }
    }
    let stat = |k: &str| b.console.lockdep_stat(k).map_or("?".into(), |n| n.to_string());
    if !b.console.lockdep.is_empty() {
        s.push_str(&format!(
            "  lockdep: {} lock classes, {} chains, {} direct dependencies, debug_locks {}\n",
            stat("lock-classes"),
            stat("dependency chains"),
            stat("direct dependencies"),
            stat("debug_locks")
        ));
    }
    for e in &b.console.errors {
        s.push_str(&format!("  workload error: {e}\n"));
    }
    if let Some(f) = &b.console_file {
        s.push_str(&format!("  console: {}\n", f.display()));
    }
    if let Some(v) = b.verdict() {
        s.push_str(&format!("  FAILED: {v}\n"));
        if b.silent_console {
            s.push_str("  no console output\n");
        } else {
            s.push_str("  last console lines:\n");
            for l in &b.tail {
                s.push_str(&format!("    | {}\n", l.trim_end()));
            }
        }
    }
    s
}

pub fn cost_run(args: &CostArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let o = match options(&args.kernel, defaults, ui, "cost") {
        Ok(o) => o,
        Err(code) => return code,
    };
    if args.runs < 2 {
        return bad(
            ui,
            Diagnostic::error(Code::Io, format!("`--runs {}` is too few to compare", args.runs))
                .hint("pass `--runs 5` or more (each run boots both variants)"),
        );
    }
    if args.side_by_side == Some(0) {
        return bad(
            ui,
            Diagnostic::error(Code::Io, "`--side-by-side 0` boots nothing").hint("pass `--side-by-side 1` or 2"),
        );
    }
    let mut show = progress();
    let c = match runtime::cost(&o, &args.unit, args.runs, args.side_by_side, &mut show) {
        Ok(c) => c,
        Err(f) => return failed(ui, f),
    };
    let enough = c.sys.instrumented.len() >= 2 && c.sys.exempt.len() >= 2;
    match args.kernel.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&cost_json(&c)).unwrap_or_default()),
        Format::Text => out!("{}", cost_text(&c)),
    }
    if enough {
        EXIT_OK
    } else {
        eprintln!("cost FAILED: fewer than two clean boots of a variant; see the boots above");
        EXIT_FINDINGS
    }
}

fn setting(s: Option<crate::mechanism::Setting>) -> &'static str {
    match s {
        Some(crate::mechanism::Setting::Skip) => "skip (exempt)",
        Some(crate::mechanism::Setting::Force) => "force (instrumented)",
        None => "default (instrumented)",
    }
}

fn figure_json(f: &Figure, what: &str) -> Value {
    let group = |xs: &[f64]| {
        let (lo, hi) = runtime::stats::range(xs).unzip();
        json!({"median": runtime::stats::median(xs), "min": lo, "max": hi, "values": xs})
    };
    json!({
        "ratio": f.interval.map(|i| i.ratio),
        "low": f.interval.map(|i| i.low),
        "high": f.interval.map(|i| i.high),
        "real": f.interval.is_some_and(|i| i.is_real()),
        "instrumented": group(&f.instrumented),
        "exempt": group(&f.exempt),
        "verdict": f.verdict(what),
    })
}

fn cost_json(c: &runtime::Cost) -> Value {
    json!({
        "unit": c.flip.unit,
        "mechanism": c.flip.mechanism,
        "why": c.flip.why,
        "policy": setting(c.flip.before),
        "flipped": setting(Some(c.flip.after)),
        "runs": c.runs,
        "side_by_side": c.side_by_side,
        "accelerator": c.accel.as_str(),
        "accelerator_why": c.accel_why,
        "build": c.place.build.display().to_string(),
        "differing_objects": c.differing,
        "sys": figure_json(&c.sys, "sys"),
        "wall": figure_json(&c.wall, "wall"),
        "verdict": c.sys.verdict("sys"),
        "boots": c.boots.iter().map(|(exempt, b)| {
            let mut v = boot_json_one(b);
            v["variant"] = json!(runtime::variant(*exempt));
            v["counted"] = json!(b.clean());
            v
        }).collect::<Vec<_>>(),
        "timings": c.timings.iter().map(|(s, d)| json!({"step": s, "seconds": d.as_secs_f64()})).collect::<Vec<_>>(),
    })
}

fn cost_text(c: &runtime::Cost) -> String {
    let mut s = String::new();
    s.push_str(&format!("cost of `{}` for {}\n", c.flip.unit, c.flip.mechanism));
    let why = c.flip.why.lines().next().unwrap_or("").trim();
    if !why.is_empty() {
        s.push_str(&format!("reason: {why}\n"));
    }
    s.push_str(&format!("policy: {}; flipped: {}\n", setting(c.flip.before), setting(Some(c.flip.after))));
    s.push_str(&format!(
        "objects that differ between the builds: {}\n",
        if c.differing.is_empty() { "none".into() } else { c.differing.join(", ") }
    ));
    s.push_str(&format!(
        "{} boots of each ({}: {}; guest time{}; {} at once), counted: {} instrumented, {} exempt\n",
        c.runs,
        c.accel.as_str(),
        c.accel_why,
        if c.accel == runtime::qemu::Accel::Tcg { " counted in executed instructions" } else { "" },
        c.side_by_side,
        c.sys.instrumented.len(),
        c.sys.exempt.len()
    ));
    for (exempt, b) in &c.boots {
        if let Some(v) = b.verdict() {
            s.push_str(&format!("  not counted ({}): {v}\n", runtime::variant(*exempt)));
        }
    }
    let g = |xs: &[f64]| match (runtime::stats::median(xs), runtime::stats::range(xs)) {
        (Some(m), Some((lo, hi))) => format!("{m:.2} s ({lo:.2}–{hi:.2})"),
        _ => "–".into(),
    };
    s.push_str(&format!(
        "{:<6} {:<24} {:<24} {}\n",
        "", "instrumented", "exempt", "exempt/instrumented (95% interval)"
    ));
    for (name, f) in [("sys", &c.sys), ("wall", &c.wall)] {
        let i = f.interval.map_or("–".into(), |i| format!("{:.2} ({:.2}–{:.2})", i.ratio, i.low, i.high));
        s.push_str(&format!("{name:<6} {:<24} {:<24} {i}\n", g(&f.instrumented), g(&f.exempt)));
    }
    s.push_str(&format!("verdict: {}\n", c.sys.verdict("sys")));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::console;
    use crate::runtime::qemu::Accel;
    use std::time::Duration;

    fn boot(text: &str, end: End) -> Boot {
        let parsed = console::parse(text);
        let reports =
            parsed.reports.iter().map(|r| (r.clone(), Some(("f".to_string(), "lib/x.o".to_string())))).collect();
        Boot {
            accel: Accel::Tcg,
            end,
            console: parsed,
            reports,
            tail: vec!["last".into()],
            host: Duration::from_secs(35),
            silent_console: text.is_empty(),
            console_file: None,
        }
    }

    #[test]
    fn boot_json_has_the_documented_keys() {
        let b = boot("sanpolicy: init 1.5 scale=1\nsanpolicy: phase files wall=0.2 user=0.0 sys=0.19\nsanpolicy: total wall=0.2 user=0.0 sys=0.19\nsanpolicy: lockdep debug_locks: 1\nsanpolicy: end\n", End::Marker);
        let v = boot_json_one(&b);
        assert_eq!((v["booted"].as_bool(), v["clean"].as_bool()), (Some(true), Some(true)));
        assert_eq!(v["reports"], json!([]));
        assert_eq!(v["workload"]["sys"], json!(0.19));
        assert_eq!(v["workload"]["phases"][0]["name"], "files");
        assert_eq!(v["lockdep"]["debug_locks"], "1");
        assert_eq!(v["console_tail"], json!([]), "a clean boot shows no tail");

        // A report: kind, object and excerpt; the boot is not clean.
        let b = boot("UBSAN: shift-out-of-bounds in lib/x.c:1:2\n f+0x1/0x2\nsanpolicy: end\n", End::Marker);
        let v = boot_json_one(&b);
        assert_eq!(v["clean"], false);
        assert_eq!(v["reports"][0]["kind"], "ubsan");
        assert_eq!(v["reports"][0]["object"], "lib/x.o");
        assert!(v["reports"][0]["excerpt"].as_str().unwrap().starts_with("UBSAN:"));

        // A silent death: not booted, the end named.
        let b = boot("", End::Exited(Some(0)));
        let v = boot_json_one(&b);
        assert_eq!((v["booted"].as_bool(), v["end"].as_str()), (Some(false), Some("qemu-exited-0")));
        assert!(b.verdict().unwrap().contains("no console output"), "{:?}", b.verdict());
        let text = boot_text(1, &b);
        assert!(text.contains("FAILED") && text.contains("no console output"), "{text}");
    }

    #[test]
    fn figure_json_gives_ratio_low_high() {
        let f = Figure {
            instrumented: vec![2.6, 2.5, 2.7],
            exempt: vec![1.8, 1.9, 1.7],
            interval: Some(runtime::stats::Interval { ratio: 0.69, low: 0.65, high: 0.74 }),
        };
        let v = figure_json(&f, "sys");
        assert_eq!((v["ratio"].as_f64(), v["low"].as_f64(), v["high"].as_f64()), (Some(0.69), Some(0.65), Some(0.74)));
        assert_eq!(v["instrumented"]["median"], json!(2.6));
        assert_eq!(v["real"], true);
    }
}
