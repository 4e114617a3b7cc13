//! Shared by `tests/round_trip.rs`, `tests/import_rerun.rs` and `tests/central_kbuild.rs`: the Debian kernel source
//! tarballs, extracted once per test binary into a temporary directory shared by the tests of
//! that run (see [`Lease`]), and hard-linked copies of them.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

/// `/usr/src/linux-source-<version>.tar.xz`, extracted into a temporary directory that goes
/// when this is dropped.
pub struct Extracted {
    version: String,
    tree: PathBuf,
    scratch: Option<tempfile::TempDir>,
}

impl Extracted {
    fn new(version: &str) -> Extracted {
        let tarball = PathBuf::from(format!("/usr/src/linux-source-{version}.tar.xz"));
        assert!(
            tarball.is_file(),
            "{} is missing: install the kernel sources with `apt-get install linux-source-6.1 linux-source-6.12` \
             (.ci/run does this on a fresh machine)",
            tarball.display()
        );
        let scratch = scratch_dir(&format!("{version}-src"));
        let start = Instant::now();
        let src = scratch.path();
        let status = Command::new("tar").arg("-xf").arg(&tarball).arg("-C").arg(src).status().expect("running tar");
        assert!(status.success(), "tar -xf {} failed: {status}", tarball.display());
        let mut tops: Vec<PathBuf> =
            fs::read_dir(src).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
        assert_eq!(tops.len(), 1, "{} should hold one top directory: {tops:?}", tarball.display());
        let tree = tops.remove(0);
        say(&format!("round-trip {version}: extracted {} in {:.1?}", tarball.display(), start.elapsed()));
        Extracted { version: version.to_string(), tree, scratch: Some(scratch) }
    }
}

impl Drop for Extracted {
    fn drop(&mut self) {
        let Some(scratch) = self.scratch.take() else { return };
        let start = Instant::now();
        let path = scratch.path().to_path_buf();
        if let Err(e) = scratch.close() {
            say(&format!("round-trip {}: could not remove {}: {e}", self.version, path.display()));
        }
        say(&format!("round-trip {}: removed the extracted tree in {:.1?}", self.version, start.elapsed()));
    }
}

/// The trees extracted in this run, by version, and how many tests hold a [`Lease`].
struct Extractions {
    leases: usize,
    trees: BTreeMap<String, Arc<OnceLock<Arc<Extracted>>>>,
}

static EXTRACTIONS: Mutex<Extractions> = Mutex::new(Extractions { leases: 0, trees: BTreeMap::new() });

fn extractions() -> MutexGuard<'static, Extractions> {
    EXTRACTIONS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A tarball test's use of the extracted tree of its version, shared by the tests of this run.
///
/// The first test of a version extracts it (one of the same version starting meanwhile waits for
/// that extraction). Extracted trees stay while any tarball test holds a lease, so a test that
/// starts before the others have all ended reuses them; the last lease to go removes them all.
/// libtest starts tests in name order, here two at a time: the 6.12 and 6.1 round trips extract
/// side by side, and `linux_curated_policy_6_12` starts when the first of them ends, while the
/// other still holds its lease. A test run alone (or after all others ended) extracts its own
/// tree: slower, never wrong.
pub struct Lease {
    extracted: Option<Arc<Extracted>>,
}

impl Lease {
    pub fn extracted(version: &str) -> Lease {
        let slot = {
            let mut all = extractions();
            all.leases += 1;
            Arc::clone(all.trees.entry(version.to_string()).or_default())
        };
        // Held before extracting, so that a failed extraction gives the lease back too.
        let mut lease = Lease { extracted: None };
        lease.extracted = Some(Arc::clone(slot.get_or_init(|| Arc::new(Extracted::new(version)))));
        lease
    }

    pub fn tree(&self) -> &Path {
        &self.extracted.as_ref().expect("an extracted tree").tree
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.extracted = None;
        let last = {
            let mut all = extractions();
            all.leases -= 1;
            if all.leases == 0 {
                std::mem::take(&mut all.trees)
            } else {
                BTreeMap::new()
            }
        };
        // No test holds these any more: dropping them removes the trees, side by side.
        std::thread::scope(|s| {
            for slot in last.into_values() {
                s.spawn(move || drop(slot));
            }
        });
    }
}

pub fn scratch_dir(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("sanpolicy-round-trip-{label}-"))
        .tempdir()
        .expect("creating a temporary directory")
}

/// Write a line to stderr directly, so that it shows even when the harness captures output.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// `cp -al` (hard links); a full `cp -a` when the copy is on another file system. Returns
/// whether the copy is hard-linked.
pub fn copy_tree(original: &Path, copy: &Path) -> bool {
    let linked =
        Command::new("cp").arg("-al").arg(original).arg(copy).stderr(Stdio::null()).status().expect("running cp");
    if linked.success() {
        return true;
    }
    let _ = fs::remove_dir_all(copy);
    let status = Command::new("cp").arg("-a").arg(original).arg(copy).status().expect("running cp");
    assert!(status.success(), "cp -a {} {} failed", original.display(), copy.display());
    false
}
