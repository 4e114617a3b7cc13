//! `gen-cargo`: write the policy's Cargo profiles into a workspace's root `Cargo.toml`, or with
//! `--check` report drift, recursion-prone crates and undocumented `#[sanitize]` attributes.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::context::{display, policy_problem, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
use crate::cargo::{self, CargoPlan, Options};
use crate::diagnostic::Diagnostics;
use crate::{output, policy};

/// The policy's name inside a workspace when `--policy` is absent.
pub const POLICY_IN_WORKSPACE: &str = "sanitizer-policy.toml";

#[derive(Debug, Args)]
pub struct GenCargoArgs {
    /// Policy file (default: `sanitizer-policy.toml` at the top of the workspace).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The Cargo workspace (default: `.` for sanpolicy; required for xtask).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Write only this `[[profile]]` of the policy; other profiles in the manifest stay as they are.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Write nothing; exit 1 with a unified diff when the manifest is stale, or on findings.
    #[arg(long)]
    pub check: bool,
    /// Replace a `[profile.<name>]` sanpolicy did not write, or one edited by hand.
    #[arg(long)]
    pub force: bool,
}

fn summary(plan: &CargoPlan, policy: &str) -> String {
    let ws = &plan.workspace;
    let members = ws.packages.iter().filter(|p| p.member).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{policy} -> {}: {} package(s) in the graph, {members} member(s), {} source file(s) scanned",
        display(&ws.manifest),
        ws.packages.len(),
        plan.scan.files
    );
    for p in &plan.profiles {
        let flags = p.rustflags.as_ref().map(|f| f.join(" ")).unwrap_or_else(|| "(inherited)".into());
        let _ = writeln!(
            out,
            "profile `{}` (inherits {}): rustflags {flags}; {} package table(s){}",
            p.name,
            p.inherits,
            p.packages.len(),
            if p.target_modifiers.is_empty() { "" } else { "; target modifier: ABI mismatch allowed" }
        );
        for t in &p.packages {
            let _ = writeln!(out, "  {}: {}", t.key, t.comment.first().map(String::as_str).unwrap_or(""));
        }
    }
    for h in &plan.scan.hooks {
        let what = match h.foreign {
            Some(f) => format!("{f} hook; rustc never calls it"),
            None => h.mechanisms.iter().map(|id| id.get().name).collect::<Vec<_>>().join(", ") + " hook",
        };
        let _ =
            writeln!(out, "hook: {} {} defines `{}` ({what}) at {}", h.package.0, h.package.1, h.symbol, h.location);
    }
    for g in &plan.generic {
        let skipped: Vec<&str> = g.skipped.iter().map(|id| id.get().name).collect();
        let _ = writeln!(
            out,
            "limit: {} {} skips {}, but {} public generic or #[inline] function(s) ({}{}) are compiled into the crates calling them and instrumented there",
            g.key,
            g.version,
            skipped.join(", "),
            g.api.functions,
            g.api.examples.iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", "),
            if g.api.functions > g.api.examples.len() { ", …" } else { "" }
        );
    }
    for a in &plan.scan.attributes {
        let _ = writeln!(
            out,
            "attribute: {} {} turns off {} for `{}` at {}",
            a.package.0,
            a.package.1,
            a.names.join(", "),
            a.item,
            a.location
        );
    }
    out
}

fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// The policy beside the root manifest of the workspace containing `dir` (a member directory
/// too), named as the user named the workspace where `dir` is the root.
pub fn default_policy(dir: &std::path::Path) -> Result<PathBuf, Box<crate::diagnostic::Diagnostic>> {
    let root = cargo::workspace::root(dir)?;
    Ok(if same_dir(&root, dir) { dir.join(POLICY_IN_WORKSPACE) } else { root.join(POLICY_IN_WORKSPACE) })
}

pub fn run(args: &GenCargoArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Some(dir) = args.workspace.clone().or_else(|| defaults.tree.clone()) else {
        eprintln!("error: no workspace: pass `--workspace DIR`");
        return EXIT_BAD_INPUT;
    };
    let mut diags = Diagnostics::default();
    let policy_path = match &args.policy {
        Some(p) => p.clone(),
        None => match default_policy(&dir) {
            Ok(p) => p,
            Err(d) => {
                diags.push(*d);
                ui.report(&diags);
                return EXIT_BAD_INPUT;
            }
        },
    };
    if let Some(problem) = policy_problem(&policy_path) {
        diags.push(problem);
        ui.report(&diags);
        return EXIT_BAD_INPUT;
    }
    let (policy, policy_diags) = policy::load(&policy_path);
    for (path, text) in policy.sources() {
        ui.sources.insert(path, text);
    }
    if policy_diags.has_bad_input() {
        ui.report(&policy_diags.sorted());
        eprintln!("error: nothing was written");
        return EXIT_BAD_INPUT;
    }
    diags.extend(policy_diags);
    let options = Options { profile: args.profile.clone(), force: args.force };
    let mut plan = match cargo::plan(&policy, &policy_path, &dir, &options) {
        Ok(p) => p,
        Err(d) => {
            diags.extend(d);
            ui.report(&diags.sorted());
            eprintln!("error: nothing was written");
            return EXIT_BAD_INPUT;
        }
    };
    diags.extend(std::mem::take(&mut plan.diags));
    let diags = diags.sorted();
    ui.report(&diags);
    if diags.has_bad_input() {
        eprintln!("error: nothing was written");
        return EXIT_BAD_INPUT;
    }
    let findings = diags.has_errors();
    let Some(change) = &plan.change else {
        eprintln!("error: nothing was written");
        return EXIT_FINDINGS;
    };
    // A finding (a recursion-prone crate left instrumented, an undocumented attribute) means
    // the tables would build something wrong: write nothing, as for bad input.
    if findings && !args.check {
        eprintln!("error: nothing was written");
        return EXIT_FINDINGS;
    }
    let policy_name = display(&policy_path);
    if args.check {
        if !change.is_noop() {
            out!("{}", change.diff());
            eprintln!(
                "error: {} is out of date; run `{} gen-cargo` and commit the result",
                display(&change.path),
                defaults.program
            );
            return EXIT_FINDINGS;
        }
        eprintln!("{} up to date", display(&change.path));
        return if findings { EXIT_FINDINGS } else { EXIT_OK };
    }
    if let Err(e) = output::apply(std::slice::from_ref(change)) {
        eprintln!("error: writing failed: {e}");
        return EXIT_BAD_INPUT;
    }
    out!("{}", summary(&plan, &policy_name));
    outln!("{} {}", display(&change.path), if change.is_noop() { "was up to date" } else { "written" });
    if findings {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    }
}
