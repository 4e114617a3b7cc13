//! Shared by `tests/cargo_gen.rs` and `tests/cargo_e2e.rs`: fixture Cargo workspaces from
//! `tests/fixtures/cargo/` copied into a temporary directory under `target/`, and
//! `sanpolicy gen-cargo` run inside them.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixture_tree::{copy_dir, literal, run_in, Fingerprint, Run};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cargo")
}

/// A fixture workspace in a temporary directory under `target/tmp`.
pub struct Ws {
    pub dir: tempfile::TempDir,
    pub name: String,
}

impl Ws {
    pub fn new(name: &str) -> Ws {
        let dir = tempfile::Builder::new().prefix("sanpolicy-ws-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        copy_dir(&fixtures().join(name), dir.path());
        Ws { dir, name: name.to_string() }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    pub fn write(&self, rel: &str, text: &str) {
        fs::write(self.path().join(rel), text).unwrap();
    }

    /// The checked-in text of a fixture file.
    pub fn original(&self, rel: &str) -> String {
        fs::read_to_string(fixtures().join(&self.name).join(rel)).unwrap()
    }

    /// `sanpolicy gen-cargo ARGS` with the workspace as the current directory (the binary's
    /// default workspace, with `sanitizer-policy.toml` as the policy).
    pub fn gen(&self, args: &[&str]) -> Run {
        let mut all = vec!["gen-cargo"];
        all.extend_from_slice(args);
        run_in(self.path(), &all)
    }

    pub fn target_dir(&self) -> PathBuf {
        target_dir(&self.name)
    }

    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.path())
    }

    /// An insta filter replacing the workspace's path.
    pub fn filter(&self) -> (String, &'static str) {
        (literal(self.path()), "[WS]")
    }

    /// `cargo ARGS` in the workspace with unstable features allowed, the shared target
    /// directory, and no flags inherited from the outer build.
    pub fn cargo(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO"))
            .args(args)
            .current_dir(self.path())
            .env("RUSTC_BOOTSTRAP", "1")
            .env("CARGO_TARGET_DIR", self.target_dir())
            .env("CARGO_TERM_COLOR", "never")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET")
            .output()
            .unwrap()
    }
}

/// The target directory of end-to-end builds, under `target/`: one per fixture, kept between
/// runs so registry dependencies are built once (tests of one fixture build different profiles,
/// so concurrent tests never write the same files).
pub fn target_dir(fixture: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("cargo-e2e").join(fixture)
}
