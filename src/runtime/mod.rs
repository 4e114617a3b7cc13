//! Run time: boot the debug kernel a policy builds and read what it reports ([`boot`]), and
//! price one exemption by booting the kernel with and without it ([`cost`]).
//!
//! The stage configures and builds a bootable kernel (derive's configuration for the mechanism
//! plus `[boot]` of `policy/runtimes.toml`, or the user's `.config`) in its own build directory
//! with the policy applied in a scratch copy of the tree ([`scratch`]; the user's tree only with
//! `--in-place`), packs the workload (`workload.c`, built here with `gcc -static`) into a `newc`
//! initramfs ([`cpio`]), boots it under QEMU ([`qemu`]; KVM only where a probe shows it works,
//! else TCG with instruction-count time), and parses the console ([`console`]) into reports
//! attributed to objects and the workload's figures; [`stats`] decides whether a difference is
//! real. Nothing here prints: progress goes through a callback, results back to the CLI.

pub mod console;
pub mod cpio;
pub mod qemu;
pub mod scratch;
pub mod stats;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::derive::build::{self, Recipe};
use crate::derive::runtimes::{self, Config, Runtime};
use crate::mechanism::{MechId, Setting};
use crate::policy::Policy;
use console::{Console, Report};
use qemu::{Accel, End, Guest};

/// The workload's source, compiled on the machine.
pub const WORKLOAD_C: &str = include_str!("workload.c");
/// make's output for boot builds, in the build directory.
pub const LOG: &str = "sanpolicy-boot.log";
/// Where the stage keeps its artifacts inside the build directory.
const ARTIFACTS: &str = "sanpolicy";

/// A failure before any boot: bad input (exit 2) or a failed configure or build (exit 2, with
/// make's error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// How to fix it; its commands are rendered for the front end in use.
    pub hint: crate::diagnostic::Hint,
}

impl From<build::Failure> for Failure {
    fn from(f: build::Failure) -> Failure {
        Failure { message: f.message, hint: f.hint.into() }
    }
}

fn fail(message: impl Into<String>, hint: impl Into<crate::diagnostic::Hint>) -> Failure {
    Failure { message: message.into(), hint: hint.into() }
}

/// What to build and boot.
#[derive(Debug, Clone)]
pub struct Options {
    pub tree: PathBuf,
    /// The build directory (default: one per tree, mechanism and preemption model under the
    /// scratch root).
    pub build: Option<PathBuf>,
    /// Apply the policy in the user's tree itself instead of a scratch copy.
    pub in_place: bool,
    pub runtime: Runtime,
    pub policy: Policy,
    /// The user's `.config` instead of tinyconfig plus the recipe.
    pub config: Option<PathBuf>,
    pub preempt_rt: bool,
    /// The workload's scale (`sanpolicy.scale=N`).
    pub scale: u32,
    pub jobs: usize,
    /// Guest CPUs and memory.
    pub cpus: u32,
    pub memory_mb: u32,
}

/// Where things live for one run.
#[derive(Debug, Clone)]
pub struct Place {
    /// The tree make builds from: the scratch copy, or the user's tree with `--in-place`.
    pub source: PathBuf,
    pub build: PathBuf,
    /// The per-tree root under the cache directory (KVM probe answer, default build dirs).
    pub root: PathBuf,
}

/// Progress for a terminal: the CLI shows it, or not.
pub type Progress<'a> = &'a mut dyn FnMut(&str);

/// The scratch root, the copy (synced) or the tree, and the build directory.
pub fn place(o: &Options, progress: Progress) -> Result<Place, Failure> {
    let root = scratch::root_for(&o.tree).map_err(|e| fail(e, "set HOME or XDG_CACHE_HOME to a writable directory"))?;
    let cache = root.parent().and_then(Path::parent).and_then(Path::parent).unwrap_or(&root).to_path_buf();
    scratch::private_dir(&cache, &root).map_err(|e| fail(e, format!("remove `{}` and run again", root.display())))?;
    let source = if o.in_place {
        o.tree.clone()
    } else {
        let copy = root.join("tree");
        progress(&format!("copying `{}` to `{}` (changed files only)", o.tree.display(), copy.display()));
        scratch::sync(&o.tree, &copy).map_err(|e| {
            fail(
                format!("cannot copy `{}` to `{}`: {e}", o.tree.display(), copy.display()),
                "free disk space, or remove the copy and run again",
            )
        })?;
        copy
    };
    let name = format!("build-{}{}", o.runtime.mech.get().name, if o.preempt_rt { "-rt" } else { "" });
    let build = match &o.build {
        Some(b) => std::path::absolute(b)
            .map_err(|e| fail(format!("cannot resolve `{}`: {e}", b.display()), "pass an absolute `--build DIR`"))?,
        None => root.join(name),
    };
    Ok(Place { source, build, root })
}

/// Write the policy's lines into `source` (generated blocks rewritten even where the tree's own
/// lines differ: the policy is what is being built). Returns the files written.
pub fn apply_policy(policy: &Policy, source: &Path) -> Result<Vec<PathBuf>, Failure> {
    let (rules, diags) = crate::kbuild::Rules::from_tree(source);
    if diags.has_errors() {
        return Err(fail(
            format!("cannot read the Kbuild rules of `{}`", source.display()),
            "pass a kernel source tree with `--tree DIR`",
        ));
    }
    let plan = crate::generate::plan_tree(policy, source, &rules, true, false);
    if plan.diags.has_errors() {
        let first = plan.diags.iter().find(|d| d.is_error()).map_or(String::new(), |d| d.message.clone());
        return Err(fail(
            format!("the policy cannot be written into `{}`: {first}", source.display()),
            crate::hint!["run ", crate::diagnostic::Fix::Check, " on the policy and fix what it reports"],
        ));
    }
    crate::output::apply(&plan.changes).map_err(|e| {
        fail(format!("writing the policy into `{}`: {e}", source.display()), "check that the tree is writable")
    })
}

/// The configuration a boot builds: the mechanism's, plus `[boot]` (and `[boot.preempt-rt]`).
pub fn recipe_config(runtime: &Runtime, preempt_rt: bool) -> Result<Config, Failure> {
    let boot =
        runtimes::boot().map_err(|e| fail(e, "the bundled policy/runtimes.toml is broken: reinstall sanpolicy"))?;
    let mut c = runtime.config.with(&boot.config);
    if preempt_rt {
        c = c.with(&boot.preempt_rt);
    }
    Ok(c)
}

/// The kernel one build produced, copied out so a later build cannot change it.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub image: PathBuf,
    pub system_map: PathBuf,
    /// Objects Kbuild compiled for it.
    pub compiled: Vec<String>,
    pub steps: Vec<(String, Duration)>,
}

/// Configure (when needed) and build `bzImage`; copy the image and `System.map` to `label`.
pub fn build_kernel(o: &Options, p: &Place, label: &str) -> Result<Kernel, Failure> {
    let config = recipe_config(&o.runtime, o.preempt_rt)?;
    let config = match &o.config {
        None => {
            recipe_again(&p.build)?;
            config
        }
        Some(user) => {
            // The user's configuration is taken as it is: only the requirements are checked,
            // and its compiler is the one make is told to use (a clang `.config` built without
            // `LLVM=1` would be configured again for gcc).
            let text = use_user_config(user, &p.build)?;
            let clang = build::is_set(&text, "CC_IS_CLANG");
            Config { enable: Vec::new(), disable: Vec::new(), require: config.require, clang }
        }
    };
    let recipe = Recipe { config: &config, make: &["bzImage"], log: LOG, again: "boot" };
    let built = build::ensure_with(&p.source, &p.build, &recipe, o.jobs)?;
    let dir = artifacts(&p.build)?;
    let image = dir.join(format!("{label}.bzImage"));
    let system_map = dir.join(format!("{label}.System.map"));
    copy(&p.build.join("arch/x86/boot/bzImage"), &image)?;
    copy(&p.build.join("System.map"), &system_map)?;
    Ok(Kernel { image, system_map, compiled: built.objects, steps: built.steps })
}

/// A build directory a `--config` run left holding the user's `.config` is configured from the
/// recipe again (`tinyconfig` up): otherwise the recipe's check, which only asks that its
/// symbols be set, would take the user's configuration (its local version, its drivers) for
/// its own. Kbuild then rebuilds only the objects whose options changed.
fn recipe_again(build: &Path) -> Result<(), Failure> {
    let last = build.join(USER_CONFIG);
    if !last.exists() {
        return Ok(());
    }
    for f in [build.join(".config"), last] {
        match fs::remove_file(&f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(fail(format!("cannot remove `{}`: {e}", f.display()), "pass a writable `--build DIR`"))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Where the last `--config` run kept the user's `.config`, in the build directory.
const USER_CONFIG: &str = "sanpolicy-user.config";

/// The user's `.config` becomes the build's when it changed since the last run; its text.
fn use_user_config(user: &Path, build: &Path) -> Result<String, Failure> {
    let text = crate::input::read_to_string(user, 16 << 20).map_err(|e| {
        fail(format!("cannot read `{}`: {e}", user.display()), "pass a kernel `.config` with `--config FILE`")
    })?;
    if !text.lines().any(|l| l.starts_with("CONFIG_")) {
        return Err(fail(
            format!("`{}` holds no CONFIG_ line: not a kernel configuration", user.display()),
            "pass a `.config` written by make",
        ));
    }
    fs::create_dir_all(build)
        .map_err(|e| fail(format!("cannot create `{}`: {e}", build.display()), "pass a writable `--build DIR`"))?;
    let last = build.join(USER_CONFIG);
    if crate::input::read_to_string(&last, 16 << 20).ok().as_deref() != Some(text.as_str()) {
        let write = |p: &Path| crate::output::write_atomic(p, &text);
        write(&build.join(".config")).and_then(|()| write(&last)).map_err(|e| {
            fail(format!("cannot write into `{}`: {e}", build.display()), "pass a writable `--build DIR`")
        })?;
    }
    Ok(text)
}

fn artifacts(build: &Path) -> Result<PathBuf, Failure> {
    let dir = build.join(ARTIFACTS);
    fs::create_dir_all(&dir)
        .map_err(|e| fail(format!("cannot create `{}`: {e}", dir.display()), "pass a writable `--build DIR`"))?;
    Ok(dir)
}

fn copy(from: &Path, to: &Path) -> Result<(), Failure> {
    let bytes = crate::input::read(from, 1 << 30).map_err(|e| {
        fail(format!("cannot read `{}`: {e}", from.display()), "the build did not produce it: read the build log")
    })?;
    crate::output::write_bytes_atomic(to, &bytes, 0o644)
        .map_err(|e| fail(format!("cannot write `{}`: {e}", to.display()), "pass a writable `--build DIR`"))
}

/// Build the workload (when its source changed) and pack it as the initramfs's `/init`.
pub fn initramfs(build: &Path) -> Result<PathBuf, Failure> {
    let dir = artifacts(build)?;
    let source = dir.join("workload.c");
    let binary = dir.join("init");
    let stale = crate::input::read_to_string(&source, 1 << 20).ok().as_deref() != Some(WORKLOAD_C) || !binary.is_file();
    if stale {
        crate::output::write_atomic(&source, WORKLOAD_C)
            .map_err(|e| fail(format!("cannot write `{}`: {e}", source.display()), "pass a writable `--build DIR`"))?;
        let out =
            Command::new("gcc").args(["-static", "-O2", "-o"]).arg(&binary).arg(&source).output().map_err(|e| {
                fail(format!("cannot run gcc: {e}"), "install gcc and the C library (`apt-get install gcc libc6-dev`)")
            })?;
        if !out.status.success() {
            let _ = fs::remove_file(&binary);
            return Err(fail(
                format!("gcc -static failed on the workload:\n{}", String::from_utf8_lossy(&out.stderr).trim()),
                "install the static C library (`apt-get install libc6-dev`)",
            ));
        }
    }
    let init = crate::input::read(&binary, 64 << 20)
        .map_err(|e| fail(format!("cannot read `{}`: {e}", binary.display()), "remove it and run again"))?;
    let archive = cpio::newc(&[
        cpio::Entry::Dir { name: "dev".into(), mode: 0o755 },
        cpio::Entry::Char { name: "dev/console".into(), mode: 0o600, major: 5, minor: 1 },
        cpio::Entry::Dir { name: "proc".into(), mode: 0o555 },
        cpio::Entry::Dir { name: "tmp".into(), mode: 0o1777 },
        cpio::Entry::File { name: "init".into(), mode: 0o755, data: init },
    ]);
    let path = dir.join("initramfs.cpio");
    crate::output::write_bytes_atomic(&path, &archive, 0o644)
        .map_err(|e| fail(format!("cannot write `{}`: {e}", path.display()), "pass a writable `--build DIR`"))?;
    Ok(path)
}

/// The accelerator: KVM only where a probe (bounded, its answer cached per machine under the
/// cache root) showed it boots this kernel; else TCG. Returns it and whether it was probed now.
pub fn accelerator(root: &Path, guest: &Guest) -> (Accel, String) {
    let machine = crate::input::read_to_string(Path::new("/etc/machine-id"), 4096).unwrap_or_default();
    let release = crate::input::read_to_string(Path::new("/proc/sys/kernel/osrelease"), 4096).unwrap_or_default();
    let key = format!("{}-{}", machine.trim(), release.trim());
    let cache = root.parent().unwrap_or(root).join("kvm-probe");
    if let Ok(text) = crate::input::read_to_string(&cache, 4096) {
        if let Some((k, v)) = text.trim().split_once(' ') {
            if k == key {
                let accel = if v == "kvm" { Accel::Kvm } else { Accel::Tcg };
                return (accel, format!("cached answer of the KVM probe ({})", cache.display()));
            }
        }
    }
    if !Path::new("/dev/kvm").exists() {
        return (Accel::Tcg, "no /dev/kvm".into());
    }
    let (works, why) = qemu::kvm_works(guest, "sanpolicy: init");
    let accel = if works { Accel::Kvm } else { Accel::Tcg };
    let _ = crate::output::write_atomic(&cache, &format!("{key} {}\n", accel.as_str()));
    (accel, format!("KVM probe: {why}"))
}

/// One boot's outcome.
#[derive(Debug, Clone)]
pub struct Boot {
    pub accel: Accel,
    pub end: End,
    pub console: Console,
    /// Each report with its attribution: (function, object) of the first frame outside the
    /// reporting runtime.
    pub reports: Vec<(Report, Option<(String, String)>)>,
    /// The console's last lines (shown on failure).
    pub tail: Vec<String>,
    pub host: Duration,
    /// The raw console was empty.
    pub silent_console: bool,
    /// The whole console, kept in the build directory (`sanpolicy/console-*.txt`).
    pub console_file: Option<PathBuf>,
}

impl Boot {
    /// Booted and ran the workload to its end.
    pub fn booted(&self) -> bool {
        self.end == End::Marker && self.console.ended
    }

    /// Booted, no report, lockdep still on: a run that counts.
    pub fn clean(&self) -> bool {
        self.booted() && self.reports.is_empty() && self.console.debug_locks() != Some(false)
    }

    /// What went wrong, in words (`None` for a clean run).
    pub fn verdict(&self) -> Option<String> {
        if self.clean() {
            return None;
        }
        let mut parts: Vec<String> = self
            .reports
            .iter()
            .map(|(r, at)| match at {
                Some((f, o)) => format!("{} report in {f} ({o}): {}", r.kind, r.headline),
                None => format!("{} report: {}", r.kind, r.headline),
            })
            .collect();
        match self.end {
            End::Marker => {}
            End::Exited(code) => parts.push(format!(
                "QEMU ended before the workload's end (exit status {}){}",
                code.map_or("signal".into(), |c| c.to_string()),
                if self.silent_console {
                    ": no console output (the machine reset or died before printing)"
                } else {
                    ""
                }
            )),
            End::Silent => parts.push(format!("hang: no console output for {} s", qemu::SILENCE.as_secs())),
            End::TimedOut => {
                parts.push(format!("hang: the workload did not end within {} minutes", qemu::LIMIT.as_secs() / 60))
            }
        }
        Some(parts.join("; "))
    }
}

/// The kernel command line.
pub fn append(scale: u32) -> String {
    format!("console=ttyS0 earlyprintk=serial panic=-1 sanpolicy.scale={scale}")
}

/// Boot one kernel once; the console is kept as `sanpolicy/console-<name>.txt` in the build
/// directory.
pub fn boot_once(
    kernel: &Kernel,
    initrd: &Path,
    o: &Options,
    accel: Accel,
    build: &Path,
    name: &str,
) -> Result<Boot, Failure> {
    let guest = guest(kernel, initrd, o, accel);
    let run = qemu::run(&guest, console::END, qemu::SILENCE, qemu::LIMIT, qemu::GRACE).map_err(|e| {
        fail(format!("cannot run {}: {e}", qemu::QEMU), "install QEMU (`apt-get install qemu-system-x86`)")
    })?;
    let parsed = console::parse(&run.console);
    let mut locate: Option<HashMap<String, String>> = None;
    let reports = parsed
        .reports
        .iter()
        .map(|r| {
            let map = locate.get_or_insert_with(|| functions(build));
            let at = console::attribute(r, &|f| map.get(f).cloned());
            (r.clone(), at)
        })
        .collect();
    let tail: Vec<String> =
        run.console.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().map(str::to_string).collect();
    let file = artifacts(build)?.join(format!("console-{name}.txt"));
    let console_file = crate::output::write_bytes_atomic(&file, run.console.as_bytes(), 0o644).ok().map(|()| file);
    let silent_console = run.console.trim().is_empty();
    Ok(Boot { accel, end: run.end, silent_console, console: parsed, reports, tail, host: run.host, console_file })
}

fn guest(kernel: &Kernel, initrd: &Path, o: &Options, accel: Accel) -> Guest {
    Guest {
        kernel: kernel.image.clone(),
        initrd: initrd.to_path_buf(),
        append: append(o.scale),
        accel,
        cpus: o.cpus,
        memory_mb: o.memory_mb,
    }
}

/// The probe's guest: the kernel about to be booted.
pub fn probe_guest(kernel: &Kernel, initrd: &Path, o: &Options) -> Guest {
    guest(kernel, initrd, o, Accel::Kvm)
}

/// Every function symbol of the build's objects, to the object defining it (relative to the
/// build directory). A name defined in several objects (a `static` helper) keeps the first.
pub fn functions(build: &Path) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let walk = walkdir::WalkDir::new(build).follow_links(false).into_iter().filter_entry(|e| {
        let n = e.file_name().to_string_lossy();
        !(e.depth() == 1 && (n == ARTIFACTS || n == "usr" || n == "scripts" || n == "tools" || n == "source"))
    });
    for entry in walk.flatten() {
        let name = entry.file_name().to_string_lossy();
        if !entry.file_type().is_file() || !name.ends_with(".o") || name.starts_with(".tmp") || name == "vmlinux.o" {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(build) else { continue };
        let Ok(bytes) = crate::input::read_listed(entry.path(), 256 << 20) else { continue };
        let Ok(names) = crate::derive::elf::functions(&bytes) else { continue };
        let rel = rel.display().to_string();
        for f in names {
            map.entry(f).or_insert_with(|| rel.clone());
        }
    }
    map
}

/// `sanpolicy boot`: build (as needed) and boot `runs` times.
#[derive(Debug, Clone)]
pub struct BootRun {
    pub place: Place,
    pub kernel: Kernel,
    pub accel: Accel,
    pub accel_why: String,
    pub boots: Vec<Boot>,
    pub timings: Vec<(String, Duration)>,
}

pub fn boot(o: &Options, runs: usize, progress: Progress) -> Result<BootRun, Failure> {
    check_tools()?;
    let mut timings = Vec::new();
    let start = Instant::now();
    let p = place(o, progress)?;
    apply_policy(&o.policy, &p.source)?;
    timings.push(("copy and policy".to_string(), start.elapsed()));
    progress(&format!("building bzImage in `{}` (make's output: {})", p.build.display(), p.build.join(LOG).display()));
    let kernel = build_kernel(o, &p, "policy")?;
    timings.extend(kernel.steps.iter().cloned());
    let start = Instant::now();
    let initrd = initramfs(&p.build)?;
    let (accel, accel_why) = accelerator(&p.root, &probe_guest(&kernel, &initrd, o));
    timings.push(("workload and accelerator".to_string(), start.elapsed()));
    let mut boots = Vec::new();
    for i in 0..runs {
        progress(&format!("boot {} of {runs} ({})", i + 1, accel.as_str()));
        let start = Instant::now();
        boots.push(boot_once(&kernel, &initrd, o, accel, &p.build, &(i + 1).to_string())?);
        timings.push((format!("boot {}", i + 1), start.elapsed()));
    }
    Ok(BootRun { place: p, kernel, accel, accel_why, boots, timings })
}

fn check_tools() -> Result<(), Failure> {
    if !qemu::installed() {
        return Err(fail(
            format!("`{}` is not installed", qemu::QEMU),
            "install QEMU: `apt-get install qemu-system-x86`",
        ));
    }
    Ok(())
}

/// The unit `cost` flips, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flip {
    pub unit: String,
    pub mechanism: &'static str,
    /// The unit's reason (empty when the policy had no unit for the path).
    pub why: String,
    /// The policy's own setting for the mechanism on that unit, and the flipped one.
    pub before: Option<Setting>,
    pub after: Setting,
}

impl Flip {
    /// Whether the policy as it is exempts the unit (then the flipped build is instrumented).
    pub fn policy_exempts(&self) -> bool {
        self.before == Some(Setting::Skip)
    }
}

/// The policy with `unit`'s setting for `mech` flipped: skip becomes force, force becomes skip,
/// none becomes skip (a new unit when the policy has none for the path).
pub fn flip(policy: &Policy, unit: &str, mech: MechId) -> Result<(Policy, Flip), Failure> {
    let path = crate::policy::UnitPath::parse(unit, None)
        .map_err(|(what, how)| fail(format!("`{unit}` is not a unit path: {what}"), how))?;
    let mut flipped = policy.clone();
    let same = |u: &crate::policy::Unit| u.path.text == path.text && u.when.is_empty();
    let at = flipped
        .units
        .iter()
        .position(|u| same(u) && u.settings.contains_key(&mech))
        .or_else(|| flipped.units.iter().position(same));
    let name = mech.get().name;
    let (before, why) = match at {
        Some(i) => (flipped.units[i].settings.get(&mech).copied(), flipped.units[i].why.clone()),
        None => (None, String::new()),
    };
    let after = if before == Some(Setting::Skip) { Setting::Force } else { Setting::Skip };
    match at {
        Some(i) => {
            flipped.units[i].settings.insert(mech, after);
        }
        None => {
            let text = format!(
                "[[unit]]\npath = \"{}\"\nskip = [\"{name}\"]\nwhy = \"sanpolicy cost: the flipped variant\"\n",
                path.text
            );
            let (parsed, diags) = crate::policy::parse_str(Path::new("cost.toml"), &text);
            if diags.has_bad_input() || parsed.units.is_empty() {
                return Err(fail(
                    format!("cannot make a unit for `{unit}`"),
                    "name an object or directory of the tree: `kernel/locking/lockdep.o`",
                ));
            }
            flipped.units.extend(parsed.units);
        }
    }
    Ok((flipped, Flip { unit: path.text, mechanism: name, why, before, after }))
}

/// Medians, ranges and the ratio's interval of one figure over the counted runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub instrumented: Vec<f64>,
    pub exempt: Vec<f64>,
    /// exempt / instrumented.
    pub interval: Option<stats::Interval>,
}

impl Figure {
    fn new(instrumented: Vec<f64>, exempt: Vec<f64>) -> Figure {
        let interval = stats::ratio_interval(&instrumented, &exempt, stats::RESAMPLES, stats::SEED);
        Figure { instrumented, exempt, interval }
    }

    /// "saves 23% sys time, 18–27% over 5 runs", or "no measurable difference".
    pub fn verdict(&self, what: &str) -> String {
        let Some(i) = self.interval else { return "not enough clean runs to say".into() };
        let n = self.instrumented.len().min(self.exempt.len());
        let pct = |r: f64| ((1.0 - r) * 100.0).round();
        if i.high < 1.0 {
            format!("saves {}% {what} time, {}–{}% over {n} runs", pct(i.ratio), pct(i.high), pct(i.low))
        } else if i.low > 1.0 {
            format!("costs {}% more {what} time, {}–{}% over {n} runs", -pct(i.ratio), -pct(i.low), -pct(i.high))
        } else {
            "no measurable difference".into()
        }
    }
}

/// `sanpolicy cost`.
#[derive(Debug, Clone)]
pub struct Cost {
    pub flip: Flip,
    pub place: Place,
    pub accel: Accel,
    pub accel_why: String,
    pub runs: usize,
    /// Boots that ran at once.
    pub side_by_side: usize,
    /// Objects the two builds differ in (compiled again for the second variant).
    pub differing: Vec<String>,
    /// Every boot: (exempt variant?, outcome).
    pub boots: Vec<(bool, Boot)>,
    pub sys: Figure,
    pub wall: Figure,
    pub timings: Vec<(String, Duration)>,
}

/// How many boots run at once by default. Under TCG guest time counts executed instructions
/// (`-icount`), so a second QEMU beside the first moves no guest figure, only the host time,
/// and each QEMU is one host thread: one boot per core, at most the two of an interleaved pair.
/// Under KVM guest time is the host's, and boots run one at a time.
fn side_by_side(accel: Accel) -> usize {
    match accel {
        Accel::Tcg => std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 2),
        Accel::Kvm => 1,
    }
}

/// A `cost` variant's name: the unit exempt or instrumented.
pub fn variant(exempt: bool) -> &'static str {
    if exempt {
        "exempt"
    } else {
        "instrumented"
    }
}

/// Objects every relink compiles again whatever changed.
fn always_rebuilt(object: &str) -> bool {
    object.starts_with("init/version")
        || object.starts_with("arch/x86/boot/")
        || object.starts_with(".tmp")
        || object.starts_with("usr/")
        || object.contains("vmlinux")
}

/// `side_by_side`: boots at once (`None`: [`side_by_side`]'s default for the accelerator).
pub fn cost(
    o: &Options,
    unit: &str,
    runs: usize,
    side_by_side: Option<usize>,
    progress: Progress,
) -> Result<Cost, Failure> {
    check_tools()?;
    let (flipped, flip) = flip(&o.policy, unit, o.runtime.mech)?;
    let mut timings = Vec::new();
    let p = place(o, progress)?;
    // The flipped variant first, the policy's last: the build directory ends as `boot` builds it.
    let mut kernels = Vec::new();
    for (label, policy) in [("flipped", &flipped), ("policy", &o.policy)] {
        let start = Instant::now();
        apply_policy(policy, &p.source)?;
        progress(&format!("building the {label} variant in `{}`", p.build.display()));
        kernels.push(build_kernel(o, &p, label)?);
        timings.push((format!("build ({label})"), start.elapsed()));
    }
    let differing: Vec<String> = kernels[1].compiled.iter().filter(|c| !always_rebuilt(c)).cloned().collect();
    let initrd = initramfs(&p.build)?;
    let (accel, accel_why) = accelerator(&p.root, &probe_guest(&kernels[1], &initrd, o));
    // kernels[0] is the flipped one: exempt exactly when the policy instruments the unit.
    let exempt_is_flipped = !flip.policy_exempts();
    // The queue, interleaved with the order alternating, so drift over the run touches both
    // variants alike: (kernel index, exempt?, console name).
    let mut queue = Vec::with_capacity(2 * runs);
    for i in 0..runs {
        for k in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let exempt = (k == 0) == exempt_is_flipped;
            queue.push((k, exempt, format!("cost-{}-{}", variant(exempt), i + 1)));
        }
    }
    let side_by_side = side_by_side.unwrap_or_else(|| self::side_by_side(accel)).max(1);
    let mut boots = Vec::with_capacity(queue.len());
    let start = Instant::now();
    for batch in queue.chunks(side_by_side) {
        let what: Vec<String> = batch
            .iter()
            .enumerate()
            .map(|(j, (_, exempt, _))| {
                format!("boot {} of {} ({})", boots.len() + j + 1, queue.len(), variant(*exempt))
            })
            .collect();
        progress(&format!(
            "{} ({}{})",
            what.join(", "),
            accel.as_str(),
            if batch.len() > 1 { ", side by side" } else { "" }
        ));
        let outcomes: Vec<Result<Boot, Failure>> = std::thread::scope(|s| {
            let handles: Vec<_> = batch
                .iter()
                .map(|(k, _, name)| {
                    let kernel = &kernels[*k];
                    let (initrd, build) = (&initrd, &p.build);
                    s.spawn(move || boot_once(kernel, initrd, o, accel, build, name))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(fail("a boot thread panicked", "run cost again"))))
                .collect()
        });
        for ((_, exempt, _), outcome) in batch.iter().zip(outcomes) {
            boots.push((*exempt, outcome?));
        }
    }
    timings.push(("boots".to_string(), start.elapsed()));
    let figure = |f: fn(&console::Phase) -> f64| {
        let pick = |exempt: bool| -> Vec<f64> {
            boots
                .iter()
                .filter(|(e, b)| *e == exempt && b.clean())
                .filter_map(|(_, b)| b.console.total.as_ref().map(f))
                .collect()
        };
        Figure::new(pick(false), pick(true))
    };
    let (sys, wall) = (figure(|p| p.sys), figure(|p| p.wall));
    Ok(Cost { flip, place: p, accel, accel_why, runs, side_by_side, differing, boots, sys, wall, timings })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        let (p, d) = crate::policy::parse_str(Path::new("p.toml"), text);
        assert!(!d.has_bad_input(), "{d:?}");
        p
    }

    #[test]
    fn flipping_a_unit() {
        let kasan = MechId::by_name("kasan").unwrap();
        let p = policy(
            "[[unit]]\npath = \"kernel/locking/lockdep.o\"\nskip = [\"kcsan\", \"kasan\"]\nwhy = \"recursion\"\n",
        );
        let (f, flip) = flip(&p, "kernel/locking/lockdep.o", kasan).unwrap();
        assert_eq!((flip.before, flip.after, flip.why.as_str()), (Some(Setting::Skip), Setting::Force, "recursion"));
        assert!(flip.policy_exempts());
        assert_eq!(f.units[0].settings.get(&kasan), Some(&Setting::Force));
        // Other mechanisms keep their settings.
        assert_eq!(f.units[0].settings.len(), 2);
        // A path the policy does not name gets a new unit that skips.
        let (f, flip) = super::flip(&p, "lib/stackdepot.o", kasan).unwrap();
        assert_eq!((flip.before, flip.after), (None, Setting::Skip));
        assert_eq!(f.units.len(), 2);
        assert!(!flip.policy_exempts());
        assert!(super::flip(&p, "/abs/x.o", kasan).is_err());
    }

    #[test]
    fn verdicts_say_how_much_or_nothing() {
        let a = vec![29.8, 29.0, 34.8, 30.1, 29.5];
        let b = vec![24.6, 22.6, 26.0, 24.9, 23.8];
        let f = Figure::new(a.clone(), b);
        let v = f.verdict("sys");
        assert!(v.starts_with("saves 17% sys time, ") && v.ends_with("over 5 runs"), "{v}");
        assert_eq!(Figure::new(a.clone(), a).verdict("sys"), "no measurable difference");
        assert_eq!(Figure::new(vec![], vec![1.0]).verdict("sys"), "not enough clean runs to say");
    }
}
