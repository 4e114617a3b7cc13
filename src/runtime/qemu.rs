//! Booting under QEMU and reading the serial console. The guest's end is the workload's end
//! marker: QEMU ending before it, whatever its exit status, is a failed boot (a kernel that
//! triple-faults before printing anything makes QEMU exit 0 under `-no-reboot`); no console
//! output for [`SILENCE`], or no end within [`LIMIT`], is a hang.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// No console output for this long is a hang.
pub const SILENCE: Duration = Duration::from_secs(60);
/// No end of the workload within this long is a hang.
pub const LIMIT: Duration = Duration::from_secs(600);
/// The KVM probe's bound.
pub const PROBE: Duration = Duration::from_secs(30);

/// The program.
pub const QEMU: &str = "qemu-system-x86_64";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// One guest.
#[derive(Debug, Clone)]
pub struct Guest {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub append: String,
    pub accel: Accel,
    pub cpus: u32,
    pub memory_mb: u32,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The end marker was printed (QEMU then exits when the guest reboots).
    Marker,
    /// QEMU exited before the marker, with this status code (`None`: killed by a signal).
    Exited(Option<i32>),
    /// No console output for [`SILENCE`].
    Silent,
    /// No marker within [`LIMIT`].
    TimedOut,
}

/// The console and how the run ended.
#[derive(Debug, Clone)]
pub struct Run {
    pub console: String,
    pub end: End,
    /// Host time from start to end.
    pub host: Duration,
}

/// QEMU's arguments for a guest. Under TCG: `-cpu max,la57=off` (5-level paging under TCG gave
/// spurious KASAN reports) and `-icount shift=0,sleep=off` (guest time counts executed
/// instructions, so host load cannot move the figures).
pub fn args(g: &Guest) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |s: &str| a.push(s.to_string());
    match g.accel {
        Accel::Kvm => ["-accel", "kvm", "-cpu", "host"].iter().for_each(|s| push(s)),
        Accel::Tcg => {
            ["-accel", "tcg", "-cpu", "max,la57=off", "-icount", "shift=0,sleep=off"].iter().for_each(|s| push(s))
        }
    }
    for s in ["-smp", &g.cpus.to_string(), "-m", &format!("{}M", g.memory_mb)] {
        push(s);
    }
    for s in ["-nodefaults", "-display", "none", "-serial", "stdio", "-no-reboot"] {
        push(s);
    }
    a.extend(["-kernel".into(), g.kernel.display().to_string(), "-initrd".into(), g.initrd.display().to_string()]);
    a.extend(["-append".into(), g.append.clone()]);
    a
}

/// After the end marker, how long QEMU gets to exit on the guest's reboot before it is stopped.
pub const GRACE: Duration = Duration::from_secs(10);

/// Boot `g` and read its console until the end marker (then QEMU's exit, at most `grace`
/// later), QEMU's exit, silence or the limit.
pub fn run(g: &Guest, end_marker: &str, silence: Duration, limit: Duration, grace: Duration) -> std::io::Result<Run> {
    let start = Instant::now();
    let mut child =
        Command::new(QEMU).args(args(g)).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let (tx, rx) = mpsc::channel::<Option<String>>();
    let stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(Some(String::from_utf8_lossy(&buf).into_owned())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx.send(None);
    });
    let mut stderr = child.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut console = String::new();
    let mut last = Instant::now();
    let mut marker: Option<Instant> = None;
    let end = loop {
        let mut wait = silence.saturating_sub(last.elapsed()).min(limit.saturating_sub(start.elapsed()));
        if let Some(at) = marker {
            if at.elapsed() >= grace {
                stop(&mut child);
                break End::Marker;
            }
            wait = wait.min(grace - at.elapsed());
        }
        match rx.recv_timeout(wait.max(Duration::from_millis(1))) {
            Ok(Some(line)) => {
                last = Instant::now();
                if marker.is_none() && line.contains(end_marker) {
                    marker = Some(Instant::now());
                }
                console.push_str(&line);
            }
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait()?;
                break if marker.is_some() { End::Marker } else { End::Exited(status.code()) };
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if marker.is_some() {
                    continue;
                }
                if start.elapsed() >= limit {
                    break End::TimedOut;
                }
                if last.elapsed() >= silence {
                    break End::Silent;
                }
            }
        }
    };
    if matches!(end, End::Silent | End::TimedOut) {
        stop(&mut child);
    }
    let _ = reader.join();
    let errors = errors.join().unwrap_or_default();
    if !errors.trim().is_empty() && marker.is_none() {
        console.push_str(&format!("\n[qemu] {}", errors.trim()));
    }
    Ok(Run { console, end, host: start.elapsed() })
}

/// End the QEMU this module started (by its own handle, never by name).
fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether QEMU is installed.
pub fn installed() -> bool {
    Command::new(QEMU).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Whether KVM runs an unmodified kernel here, and what the probe saw: boot `g` under KVM for
/// at most [`PROBE`] and see whether init's first line arrives (on PVM the decompressor alone
/// takes minutes; elsewhere QEMU may refuse the CPU model and exit). No `/dev/kvm`: no probe.
pub fn kvm_works(g: &Guest, init_marker: &str) -> (bool, String) {
    if !Path::new("/dev/kvm").exists() {
        return (false, "no /dev/kvm".into());
    }
    let probe = Guest { accel: Accel::Kvm, ..g.clone() };
    match run(&probe, init_marker, PROBE, PROBE, Duration::ZERO) {
        Ok(r) if r.end == End::Marker => (true, format!("KVM reached init in {:.1} s", r.host.as_secs_f64())),
        Ok(r) if matches!(r.end, End::Exited(_)) => {
            let last = r.console.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_string();
            (false, format!("QEMU under KVM exited before init ({last})"))
        }
        Ok(_) => (false, format!("KVM did not reach init within {} s", PROBE.as_secs())),
        Err(e) => (false, format!("cannot run {QEMU}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcg_counts_instructions_and_never_reboots() {
        let g = Guest {
            kernel: "bzImage".into(),
            initrd: "init.cpio".into(),
            append: "console=ttyS0".into(),
            accel: Accel::Tcg,
            cpus: 2,
            memory_mb: 1024,
        };
        let a = args(&g).join(" ");
        assert!(a.starts_with("-accel tcg -cpu max,la57=off -icount shift=0,sleep=off -smp 2 -m 1024M"), "{a}");
        assert!(a.contains("-no-reboot") && a.ends_with("-append console=ttyS0"), "{a}");
        let k = args(&Guest { accel: Accel::Kvm, ..g }).join(" ");
        assert!(k.starts_with("-accel kvm -cpu host -smp 2") && !k.contains("icount"), "{k}");
    }
}
