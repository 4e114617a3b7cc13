//! `boot` on a real kernel: Debian's Linux 6.12 (extracted from
//! `/usr/src/linux-source-6.12.tar.xz`) built with KASAN and lockdep under the bundled policy in
//! a scratch copy, booted under QEMU with the workload at scale 1, must boot clean; then the same
//! build directory rebuilt (Kbuild's incremental rebuild) with a policy that forces KASAN on the
//! KASAN runtime must fail with what it saw. Slow: one kernel build (see the book's run-time
//! section for the figures); QEMU comes from `.ci/run`'s apt list.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod kernel_source;
use kernel_source::{say, Lease};

fn sanpolicy(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .args(args)
        // The scratch copy, the build directory and the KVM probe's answer go here, and go with it.
        .env("XDG_CACHE_HOME", cache)
        .env("CI", "1")
        .output()
        .expect("running sanpolicy")
}

fn qemu_installed() {
    let ok = Command::new("qemu-system-x86_64").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "qemu-system-x86_64 is missing: `apt-get install qemu-system-x86` (.ci/run does this)");
}

/// The bundled policy with the KASAN runtime forced instrumented, acknowledged so that the
/// static check lets it through.
fn broken_policy() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = fs::read_to_string(repo.join("policy/linux.toml")).unwrap();
    let unit = "path = \"mm/kasan/\"\nskip = [\"kasan\", \"kcov\", \"ubsan\"]\n";
    assert!(text.contains(unit), "policy/linux.toml no longer has the mm/kasan/ unit this test edits");
    let text = text.replacen(unit, "path = \"mm/kasan/\"\nskip = [\"kcov\", \"ubsan\"]\nforce = [\"kasan\"]\n", 1);
    format!(
        "{text}\n[[acknowledge]]\ncode = \"recursion-prone\"\npath = \"mm/kasan/\"\nmechanism = \"kasan\"\nwhy = \"tests/boot.rs: a broken policy that run time must catch\"\n"
    )
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}):\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })
}

#[test]
fn kasan_kernel_boots_clean_then_a_policy_instrumenting_the_kasan_runtime_is_caught() {
    qemu_installed();
    let lease = Lease::extracted("6.12");
    let tree = lease.tree().to_str().unwrap();
    let cache = tempfile::tempdir().unwrap();

    let start = std::time::Instant::now();
    let out =
        sanpolicy(cache.path(), &["boot", "--tree", tree, "--mechanism", "kasan", "--scale", "1", "--format", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    say(&format!("boot: cold build and one boot in {:.0?}: exit {:?}", start.elapsed(), out.status.code()));
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v:#}");
    assert_eq!(v["booted"], true);
    assert!(v["accelerator"] == "tcg" || v["accelerator"] == "kvm", "{}", v["accelerator"]);
    assert_eq!(v["reports"].as_array().unwrap().len(), 0, "{v:#}");
    let w = &v["workload"];
    for k in ["wall", "user", "sys"] {
        assert!(w[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {w}");
    }
    assert!(w["sys"].as_f64().unwrap() > 0.0 && w["wall"].as_f64().unwrap() > 0.0, "{w}");
    let phases: Vec<&str> = w["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(phases, ["fork-exec", "pipes-epoll", "files", "page-faults", "procfs", "futex", "parallel"]);
    assert_eq!(v["lockdep"]["debug_locks"], "1", "lockdep must still be on: {}", v["lockdep"]);
    let classes: u64 =
        v["lockdep"]["lock-classes"].as_str().unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(classes > 100, "lockdep saw {classes} lock classes");
    assert!(v["init"].as_f64().is_some_and(|t| t > 0.0));
    // The user's tree is untouched: the policy went into the scratch copy.
    let locking = fs::read_to_string(lease.tree().join("kernel/locking/Makefile")).unwrap();
    assert!(!locking.contains("KASAN_SANITIZE_lockdep.o"), "boot wrote into the user's tree");
    let source = v["source"].as_str().unwrap();
    assert!(source.starts_with(cache.path().to_str().unwrap()), "{source}");
    let copied = fs::read_to_string(Path::new(source).join("kernel/locking/Makefile")).unwrap();
    assert!(copied.contains("KASAN_SANITIZE_lockdep.o := n"), "the bundled policy exempts lockdep from KASAN");

    // The broken policy, rebuilt in the same build directory (only mm/kasan/ and the link).
    let policy = cache.path().join("broken.toml");
    fs::write(&policy, broken_policy()).unwrap();
    let start = std::time::Instant::now();
    let out = sanpolicy(
        cache.path(),
        &["boot", "--tree", tree, "--mechanism", "kasan", "--policy", policy.to_str().unwrap(), "--format", "json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    say(&format!("boot: broken policy, incremental rebuild and one boot in {:.0?}", start.elapsed()));
    let v = json(&out);
    assert_eq!(out.status.code(), Some(1), "the broken kernel must fail the boot:\n{stderr}\n{v:#}");
    assert_eq!(v["clean"], false);
    let compiled = v["objects_compiled"].as_u64().unwrap();
    assert!(compiled > 0 && compiled < 100, "an incremental rebuild, not a cold one: {compiled} objects");
    let verdict = v["verdict"].as_str().unwrap();
    let named = ["report", "panic", "hang", "QEMU ended before the workload's end"];
    assert!(named.iter().any(|n| verdict.contains(n)), "{verdict}");
    assert!(stderr.contains("boot FAILED"), "{stderr}");
    say(&format!("boot: the broken policy: {verdict}"));

    // The user's own `.config` (`--config FILE`): this build's, with a local version set as a
    // user would; the bundled policy again. Kbuild rebuilds what the version and the policy
    // touch, and the guest's banner names the version: the kernel booted is the user's.
    let build = Path::new(v["build"].as_str().unwrap());
    let mine: String = fs::read_to_string(build.join(".config"))
        .unwrap()
        .lines()
        .map(|l| if l.starts_with("CONFIG_LOCALVERSION=") { "CONFIG_LOCALVERSION=\"-mine\"" } else { l })
        .flat_map(|l| [l, "\n"])
        .collect();
    assert!(mine.contains("CONFIG_LOCALVERSION=\"-mine\""), "tinyconfig has CONFIG_LOCALVERSION");
    let user_config = cache.path().join("user.config");
    fs::write(&user_config, &mine).unwrap();
    let start = std::time::Instant::now();
    let config_arg = user_config.to_str().unwrap();
    let out = sanpolicy(
        cache.path(),
        &["boot", "--tree", tree, "--mechanism", "kasan", "--config", config_arg, "--format", "json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    say(&format!("boot: the user's .config, incremental rebuild and one boot in {:.0?}", start.elapsed()));
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{v:#}");
    assert_eq!((v["booted"].as_bool(), v["reports"].as_array().map(Vec::len)), (Some(true), Some(0)), "{v:#}");
    let console = fs::read_to_string(v["console_file"].as_str().unwrap()).unwrap();
    let banner = console.lines().find(|l| l.contains("Linux version")).expect("the kernel's banner");
    assert!(banner.contains("-mine "), "the booted kernel is not the user's configuration: {banner}");

    // Without `--config` again, the build directory is the recipe's again, not the user's.
    let out = sanpolicy(cache.path(), &["boot", "--tree", tree, "--mechanism", "kasan", "--format", "json"]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{}\n{v:#}", String::from_utf8_lossy(&out.stderr));
    let console = fs::read_to_string(v["console_file"].as_str().unwrap()).unwrap();
    let banner = console.lines().find(|l| l.contains("Linux version")).expect("the kernel's banner");
    assert!(!banner.contains("-mine"), "the recipe's boot kept the user's configuration: {banner}");
    say(&format!("boot: the recipe again after the user's .config, in {:.0?} since that run", start.elapsed()));
}

#[test]
fn bad_arguments_are_refused_before_anything_is_built() {
    let cache = tempfile::tempdir().unwrap();
    let missing = cache.path().join("no-tree");
    let out = sanpolicy(cache.path(), &["boot", "--tree", missing.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a kernel source tree") && stderr.contains("--tree DIR"), "{stderr}");

    // A tree-shaped directory: the mechanism and the counts are checked before any copy.
    let tree = cache.path().join("linux");
    fs::create_dir_all(tree.join("scripts")).unwrap();
    fs::write(tree.join("scripts/config"), "").unwrap();
    fs::write(tree.join("Makefile"), "").unwrap();
    let t = tree.to_str().unwrap();
    let out = sanpolicy(cache.path(), &["boot", "--tree", t, "--mechanism", "kasn"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown-mechanism") && stderr.contains("--mechanism kasan"), "{stderr}");
    let out = sanpolicy(cache.path(), &["cost", "kernel/locking/lockdep.o", "--tree", t, "--runs", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("too few") && stderr.contains("--runs 5"), "{stderr}");
    let out = sanpolicy(cache.path(), &["boot", "--tree", t, "--config", "/nonexistent/.config"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--config FILE"), "{stderr}");
    assert!(!cache.path().join("sanpolicy").exists(), "a refused run creates nothing");
}

/// The workload builds here as a static binary and is packed as the initramfs's `/init`, beside
/// `/dev/console`.
#[test]
fn the_workload_builds_static_and_is_packed_as_init() {
    let build = tempfile::tempdir().unwrap();
    let cpio = sanpolicy::runtime::initramfs(build.path())
        .unwrap_or_else(|f| panic!("{}\n{}", f.message, f.hint.render(&Default::default())));
    let bytes = fs::read(&cpio).unwrap();
    assert!(bytes.starts_with(b"070701"));
    assert!(bytes.windows(12).any(|w| w == b"dev/console\0"));
    let at = bytes.windows(5).position(|w| w == b"init\0").expect("an init entry");
    assert_eq!(&bytes[at + 6..at + 10], b"\x7fELF", "the init's data follows its padded name");
    // Static: no program interpreter to load (the initramfs holds no dynamic loader).
    let init = fs::read(build.path().join("sanpolicy/init")).unwrap();
    assert!(!init.windows(15).any(|w| w == b"/lib64/ld-linux"), "the workload is dynamically linked");
    assert!(bytes.windows(10).any(|w| w == b"TRAILER!!!"));
}
