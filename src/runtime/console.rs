//! Reading the guest's serial console: the workload's own lines (`sanpolicy: …`, see
//! `workload.c`) and every sanitizer, lockdep, RCU or crash report the kernel printed, each with
//! its call trace, attributed to the object of its first frame outside the runtime that reported.

/// One report the kernel printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// `kasan`, `kcsan`, `kmsan`, `ubsan`, `lockdep`, `rcu-stall`, `hung-task`, `warning`, `bug`,
    /// `oops`, `panic`, or `lockdep-off` (lockdep switched itself off without a report we read).
    pub kind: String,
    /// The report's first line, without the timestamp.
    pub headline: String,
    /// Reliable call-trace frames (function names), innermost first; `RIP:` first when printed.
    pub frames: Vec<String>,
    /// The report's first lines as printed (timestamps dropped).
    pub excerpt: String,
}

/// One phase of the workload, in the guest's seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub name: String,
    pub wall: f64,
    pub user: f64,
    pub sys: f64,
}

/// What the console said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Console {
    /// Guest seconds since boot when init started.
    pub init: Option<f64>,
    pub scale: Option<u64>,
    pub phases: Vec<Phase>,
    pub total: Option<Phase>,
    /// `/proc/lockdep_stats`, key and value as printed.
    pub lockdep: Vec<(String, String)>,
    /// The workload's error lines (a failed system call).
    pub errors: Vec<String>,
    pub reports: Vec<Report>,
    /// The workload printed its end marker.
    pub ended: bool,
}

impl Console {
    /// `debug_locks` from the guest's lockdep statistics: `Some(false)` when lockdep switched
    /// itself off.
    pub fn debug_locks(&self) -> Option<bool> {
        self.lockdep.iter().find(|(k, _)| k == "debug_locks").map(|(_, v)| v.trim() != "0")
    }

    /// A lockdep statistic as a number (`lock-classes`, `direct dependencies`, …).
    pub fn lockdep_stat(&self, key: &str) -> Option<u64> {
        let (_, v) = self.lockdep.iter().find(|(k, _)| k == key)?;
        v.split_whitespace().next()?.parse().ok()
    }
}

/// The marker every workload line starts with.
pub const MARK: &str = "sanpolicy: ";
/// The workload's last line.
pub const END: &str = "sanpolicy: end";

/// Lines kept of a report (its excerpt) and lines searched for its frames.
const EXCERPT_LINES: usize = 14;
const BLOCK_LINES: usize = 80;

/// Parse a whole console log.
pub fn parse(text: &str) -> Console {
    let lines: Vec<&str> = text.lines().map(|l| strip_time(l.trim_end_matches('\r'))).collect();
    let mut c = Console::default();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(at) = line.find(MARK) {
            workload_line(&line[at + MARK.len()..], &mut c);
        }
        if let Some(kind) = kind_of(line) {
            let end = (i + 1..lines.len().min(i + BLOCK_LINES)).find(|&j| ends_block(lines[j])).unwrap_or_else(|| {
                // Up to the next report's headline.
                (i + 1..lines.len().min(i + BLOCK_LINES))
                    .find(|&j| kind_of(lines[j]).is_some())
                    .unwrap_or(lines.len().min(i + BLOCK_LINES))
            });
            let block = &lines[i..end];
            c.reports.push(Report {
                kind: kind.to_string(),
                headline: line.trim().to_string(),
                frames: frames(block),
                excerpt: block.iter().take(EXCERPT_LINES).copied().collect::<Vec<_>>().join("\n"),
            });
            // A panic's trace can hold another headline (the BUG that caused it): read on
            // inside the block, but never report the same line twice.
            i += 1;
            continue;
        }
        i += 1;
    }
    // A report before it explains it (KASAN's taint turns lock debugging off).
    if c.debug_locks() == Some(false) && c.reports.is_empty() {
        c.reports.push(Report {
            kind: "lockdep-off".into(),
            headline: "lockdep switched itself off (debug_locks: 0 in /proc/lockdep_stats)".into(),
            frames: Vec::new(),
            excerpt: "debug_locks: 0".into(),
        });
    }
    c
}

/// `[    1.234567] text` → `text`.
fn strip_time(line: &str) -> &str {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix('[') {
        if let Some(close) = rest.find(']') {
            if rest[..close].trim().chars().all(|ch| ch.is_ascii_digit() || ch == '.') {
                return rest[close + 1..].strip_prefix(' ').unwrap_or(&rest[close + 1..]);
            }
        }
    }
    line
}

fn workload_line(rest: &str, c: &mut Console) {
    let mut words = rest.split_whitespace();
    match words.next() {
        Some("init") => {
            c.init = words.next().and_then(|t| t.parse().ok());
            c.scale = words.find_map(|w| w.strip_prefix("scale=")).and_then(|s| s.parse().ok());
        }
        Some("phase") => {
            if let Some(name) = words.next() {
                if let Some(p) = figures(name, words) {
                    c.phases.push(p);
                }
            }
        }
        Some("total") => c.total = figures("total", words),
        Some("lockdep") => {
            let text = rest["lockdep".len()..].trim();
            if let Some((k, v)) = text.split_once(':') {
                c.lockdep.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        Some("error") => c.errors.push(rest["error".len()..].trim().to_string()),
        Some("end") => c.ended = true,
        _ => {}
    }
}

fn figures<'a>(name: &str, words: impl Iterator<Item = &'a str>) -> Option<Phase> {
    let mut p = Phase { name: name.to_string(), wall: f64::NAN, user: f64::NAN, sys: f64::NAN };
    for w in words {
        let (k, v) = w.split_once('=')?;
        let v: f64 = v.parse().ok()?;
        match k {
            "wall" => p.wall = v,
            "user" => p.user = v,
            "sys" => p.sys = v,
            _ => {}
        }
    }
    (!p.wall.is_nan() && !p.user.is_nan() && !p.sys.is_nan()).then_some(p)
}

/// The kind of report a line starts, if it is a report's headline.
pub fn kind_of(line: &str) -> Option<&'static str> {
    let l = line.trim_start();
    let starts = |p: &str| l.starts_with(p);
    Some(if starts("BUG: KASAN:") {
        "kasan"
    } else if starts("BUG: KCSAN:") {
        "kcsan"
    } else if starts("BUG: KMSAN:") {
        "kmsan"
    } else if starts("UBSAN:") {
        "ubsan"
    } else if starts("WARNING: CPU:") {
        "warning"
    } else if starts("WARNING: ") {
        // Lockdep's and RCU-lockdep's splats: `WARNING: possible recursive locking detected`,
        // `… circular locking dependency …`, `inconsistent lock state`, `suspicious RCU usage`.
        "lockdep"
    } else if starts("INFO: ") && (l.contains("lock") || l.contains("key")) && !l.contains("stall") {
        "lockdep"
    } else if (starts("rcu: INFO:") || starts("INFO: rcu")) && l.contains("stall") {
        "rcu-stall"
    } else if starts("INFO: task ") && l.contains("blocked for more than") {
        "hung-task"
    } else if starts("Kernel panic - not syncing") {
        "panic"
    } else if starts("BUG: ") {
        "bug"
    } else if starts("Oops:") || starts("general protection fault") {
        "oops"
    } else {
        return None;
    })
}

/// Whether a line closes a report: lockdep's and KASAN's rulers, or the trace's end.
fn ends_block(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("---[ end") || (l.len() >= 20 && l.chars().all(|c| c == '=')) || l.starts_with(END)
}

/// Reliable frames of a block: `RIP: 0010:f+0x1/0x2` first, then ` f+0x1a/0x40` lines of the
/// call trace (a `? f+…` frame is a guess of the unwinder and is left out).
fn frames(block: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for line in block.iter().skip(1) {
        let l = line.trim();
        let l = l.strip_prefix("RIP: ").map(|r| r.split_once(':').map_or(r, |(_, f)| f)).unwrap_or(l);
        if l.starts_with('?') {
            continue;
        }
        if let Some(name) = frame_name(l) {
            out.push(name.to_string());
        }
    }
    out
}

/// `name+0x1a/0x40` (optionally followed by ` [module]`) → `name`.
fn frame_name(word: &str) -> Option<&str> {
    let first = word.split_whitespace().next()?;
    let (name, offset) = first.split_once('+')?;
    let (off, size) = offset.split_once('/')?;
    let hex = |s: &str| s.strip_prefix("0x").is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()));
    let ident = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    (ident && hex(off) && hex(size)).then_some(name)
}

/// Objects whose frames are the reporting machinery rather than the code a report is about.
const MACHINERY: &[&str] = &[
    "lib/dump_stack.o",
    "kernel/panic.o",
    "lib/bug.o",
    "arch/x86/kernel/dumpstack.o",
    "arch/x86/kernel/dumpstack_64.o",
    "arch/x86/kernel/traps.o",
    "arch/x86/entry/",
    "kernel/printk/",
];

/// The runtime that prints each kind of report: its frames are not the culprit.
pub fn runtime_of(kind: &str) -> &'static [&'static str] {
    match kind {
        "kasan" => &["mm/kasan/"],
        "kcsan" => &["kernel/kcsan/"],
        "kmsan" => &["mm/kmsan/"],
        "ubsan" => &["lib/ubsan.o"],
        "lockdep" | "lockdep-off" => &["kernel/locking/lockdep.o"],
        "rcu-stall" => &["kernel/rcu/"],
        _ => &[],
    }
}

/// The first frame outside the reporting runtime and the printing machinery, with its object:
/// `locate` maps a function to its object (relative to the build directory).
pub fn attribute(report: &Report, locate: &dyn Fn(&str) -> Option<String>) -> Option<(String, String)> {
    let skip = |object: &str| {
        runtime_of(&report.kind).iter().chain(MACHINERY).any(|p| {
            if p.ends_with('/') {
                object.starts_with(p)
            } else {
                object == *p
            }
        })
    };
    report.frames.iter().find_map(|f| {
        let object = locate(f)?;
        (!skip(&object)).then(|| (f.clone(), object))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The end of a clean boot's console as captured under QEMU (scale 1).
    const CLEAN: &str = include_str!("testdata/clean-boot.txt");

    #[test]
    fn a_clean_boot_has_figures_and_no_report() {
        let c = parse(CLEAN);
        assert!(c.ended && c.reports.is_empty(), "{:?}", c.reports);
        assert!(c.init.is_some_and(|t| t > 0.0));
        assert_eq!(c.scale, Some(1));
        let names: Vec<&str> = c.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["fork-exec", "pipes-epoll", "files", "page-faults", "procfs", "futex", "parallel"]);
        let total = c.total.as_ref().unwrap();
        assert!(total.sys > 0.0 && total.wall > 0.0);
        assert_eq!(c.debug_locks(), Some(true));
        assert!(c.lockdep_stat("lock-classes").is_some_and(|n| n > 100));
    }

    /// A KASAN report in the kernel's format (Documentation/dev-tools/kasan.rst), then lockdep
    /// switching itself off.
    const KASAN: &str = "\
[    2.170000] ==================================================================
[    2.171000] BUG: KASAN: slab-out-of-bounds in kmalloc_oob_right+0xa8/0xbc
[    2.172000] Write of size 1 at addr ffff8801f44ec37b by task insmod/2760
[    2.173000]
[    2.174000] CPU: 1 PID: 2760 Comm: insmod Not tainted 4.19.0-rc3+ #698
[    2.175000] Call Trace:
[    2.176000]  <TASK>
[    2.177000]  dump_stack_lvl+0x94/0xd8
[    2.178000]  print_report+0x164/0x4f0
[    2.179000]  ? kmalloc_oob_right+0xa8/0xbc
[    2.180000]  kasan_report+0xc4/0x100
[    2.181000]  __asan_store1+0x7f/0x90
[    2.182000]  kmalloc_oob_right+0xa8/0xbc
[    2.183000]  kmalloc_tests_init+0x16/0x700
[    2.184000]  do_one_initcall+0x9e/0x240
[    2.185000]  </TASK>
[    2.186000] ==================================================================
[    2.187000] Disabling lock debugging due to kernel taint
sanpolicy: lockdep debug_locks: 0
";

    fn locate(f: &str) -> Option<String> {
        Some(
            match f {
                "dump_stack_lvl" => "lib/dump_stack.o",
                "print_report" | "kasan_report" => "mm/kasan/report.o",
                "__asan_store1" => "mm/kasan/generic.o",
                "kmalloc_oob_right" | "kmalloc_tests_init" => "mm/kasan/kasan_test.o",
                "do_one_initcall" => "init/main.o",
                "lock_acquire" | "__lock_acquire" | "print_deadlock_bug" => "kernel/locking/lockdep.o",
                "_raw_spin_lock" => "kernel/locking/spinlock.o",
                "stack_depot_save_flags" => "lib/stackdepot.o",
                _ => return None,
            }
            .to_string(),
        )
    }

    #[test]
    fn a_kasan_report_is_read_and_attributed_past_the_runtime() {
        let c = parse(KASAN);
        assert_eq!(c.reports.len(), 1, "the report explains debug_locks: 0: {:?}", c.reports);
        let r = &c.reports[0];
        assert_eq!(r.kind, "kasan");
        assert_eq!(r.headline, "BUG: KASAN: slab-out-of-bounds in kmalloc_oob_right+0xa8/0xbc");
        assert_eq!(r.frames[..3], ["dump_stack_lvl", "print_report", "kasan_report"]);
        assert!(!r.frames.contains(&"TASK".to_string()));
        assert!(r.excerpt.starts_with("BUG: KASAN") && r.excerpt.contains("Write of size 1"));
        // The test module lives in mm/kasan/ too: the first frame outside the runtime is the
        // initcall that ran it.
        assert_eq!(attribute(r, &locate), Some(("do_one_initcall".into(), "init/main.o".into())));
        assert!(!c.ended);
    }

    /// Lockdep's recursive-locking splat (kernel/locking/lockdep.c, print_deadlock_bug).
    const LOCKDEP: &str = "\
[    3.000000] ============================================
[    3.000001] WARNING: possible recursive locking detected
[    3.000002] 6.12.0 #1 Not tainted
[    3.000003] --------------------------------------------
[    3.000004] init/1 is trying to acquire lock:
[    3.000007] other info that might help us debug this:
[    3.000008] stack backtrace:
[    3.000009] Call Trace:
[    3.000010]  <TASK>
[    3.000011]  dump_stack_lvl+0x94/0xd8
[    3.000012]  print_deadlock_bug+0x2a0/0x2c0
[    3.000013]  __lock_acquire+0x1a1e/0x2840
[    3.000014]  lock_acquire+0x1a4/0x4a0
[    3.000015]  _raw_spin_lock+0x30/0x40
[    3.000016]  stack_depot_save_flags+0x1d4/0x7a0
[    3.000017]  </TASK>
sanpolicy: lockdep debug_locks: 0
";

    #[test]
    fn a_lockdep_splat_is_attributed_to_the_lock_user() {
        let c = parse(LOCKDEP);
        let kinds: Vec<&str> = c.reports.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["lockdep"], "the splat explains debug_locks: 0; no second report");
        let got = attribute(&c.reports[0], &locate);
        assert_eq!(got, Some(("_raw_spin_lock".into(), "kernel/locking/spinlock.o".into())));
    }

    #[test]
    fn headlines_and_frames() {
        assert_eq!(kind_of("Kernel panic - not syncing: Attempted to kill init!"), Some("panic"));
        assert_eq!(kind_of("rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:"), Some("rcu-stall"));
        assert_eq!(kind_of("WARNING: CPU: 0 PID: 1 at mm/slub.c:12 f+0x1/0x2"), Some("warning"));
        assert_eq!(kind_of("UBSAN: shift-out-of-bounds in lib/x.c:3:4"), Some("ubsan"));
        assert_eq!(kind_of("BUG: KCSAN: data-race in a / b"), Some("kcsan"));
        assert_eq!(kind_of("BUG: unable to handle page fault for address: 0"), Some("bug"));
        assert_eq!(kind_of("INFO: trying to register non-static key."), Some("lockdep"));
        assert_eq!(kind_of("INFO: NMI handler (perf_event_nmi_handler) took too long to run"), None);
        assert_eq!(kind_of("INFO: lockdep is turned off."), Some("lockdep"));
        assert_eq!(kind_of("sanpolicy: phase files wall=1 user=0 sys=1"), None);
        assert_eq!(frame_name("__asan_load8_noabort+0x1a/0x40 [mod]"), Some("__asan_load8_noabort"));
        assert_eq!(frame_name("foo.constprop.0+0x1/0x2"), Some("foo.constprop.0"));
        assert_eq!(frame_name("<TASK>"), None);
        assert_eq!(strip_time("[   12.345678] BUG: x"), "BUG: x");
        assert_eq!(strip_time("plain"), "plain");
        // A workload line glued to a kernel message is still read.
        let c = parse("[ 1.0] random: crng initsanpolicy: end\n");
        assert!(c.ended);
        // lockdep switching itself off with no splat we read is a report of its own.
        let c = parse("sanpolicy: lockdep debug_locks: 0\nsanpolicy: end\n");
        assert_eq!(c.reports.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), ["lockdep-off"]);
    }
}
