//! The one place a verdict is made. `gen-makefiles` (writing, and `--check`), `check`, the
//! pre-commit hook, `sync` and `explain` feed it their inputs (the policy, the plan of the tree
//! or of the staged blobs, the validated base) and only render what it returns: the findings by
//! tier, which generated files are out of date, whether writing is allowed, and the fixes as
//! typed commands. One function maps a verdict to an exit code, and the closing line of every
//! command is made from the same fixes as the findings' `help:` lines, so no two lines of
//! output contradict each other.

use std::collections::BTreeSet;
use std::path::Path;

use crate::diagnostic::{Diagnostics, Fix};
use crate::generate::snapshot::Base;
use crate::generate::Plan;
use crate::kbuild::dotconfig::DotConfig;
use crate::kbuild::Rules;
use crate::policy::Policy;

/// What a command asks.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// `gen-makefiles`: may the plan be written? (`force`: overwrite what the tree changed.)
    Write { force: bool },
    /// `gen-makefiles --check` and the hook: is the tree exactly the policy's generation?
    Drift,
    /// `check`: drift, and what the tree breaks (requirements, sources, …), for the build of
    /// `config` when given.
    Full { config: Option<&'a DotConfig> },
}

/// What the judge found.
#[derive(Debug)]
pub struct Verdict {
    /// Every finding, sorted: bad input, drift, the tree's findings, warnings and notes.
    pub diags: Diagnostics,
    /// Indexes into the plan's changes of the generated files that are out of date.
    pub stale: Vec<usize>,
    /// Writing the plan is allowed (`Write` mode; always false in the others).
    pub may_write: bool,
    /// The commands that clear the failing findings, in the order to run them.
    pub fixes: BTreeSet<Fix>,
    mode: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    Drift,
    Full,
}

/// The verdict on `plan` (planned against `tree`, or fragments when `None`) with `base`, the
/// last generated state of this tree. `program` names the front end in the findings' hints.
pub fn judge(
    policy: &Policy,
    rules: &Rules,
    tree: Option<&Path>,
    plan: &Plan,
    base: &Base,
    mode: Mode,
    program: &str,
) -> Verdict {
    let mut diags = plan.diags.clone();
    let stale: Vec<usize> = plan.changes.iter().enumerate().filter(|(_, c)| !c.is_noop()).map(|(i, _)| i).collect();
    let kind = match mode {
        Mode::Write { force } => {
            // A plan that cannot be made is refused on its own problems: what writing it would
            // lose or break is judged on a plan that can be written.
            if let Some(tree) = tree.filter(|_| !diags.has_errors()) {
                if !force {
                    diags.extend(super::drift::tree_moved(policy, plan, rules, base, program));
                }
                diags.extend(super::drift::unwritable(policy, plan, base, program));
                diags.extend(super::new_problems(policy, rules, tree, plan, base));
            }
            if !diags.has_errors() {
                diags.extend(crate::output::preflight(&plan.changes));
            }
            Kind::Write
        }
        Mode::Drift => {
            if tree.is_some() {
                diags.extend(super::drift::findings(policy, plan, rules, base, program));
            }
            Kind::Drift
        }
        Mode::Full { config } => {
            diags.extend(super::run_for(policy, rules, tree, plan, base, program, config));
            Kind::Full
        }
    };
    let diags = diags.sorted();
    let mut fixes = diags.fixes();
    if kind == Kind::Drift && !stale.is_empty() && fixes.is_empty() {
        // Out-of-date files with no finding of their own (a snapshot, a fragment): regenerate.
        fixes.insert(Fix::GenMakefiles);
    }
    let may_write = kind == Kind::Write && !diags.has_errors();
    Verdict { diags, stale, may_write, fixes, mode: kind }
}

impl Verdict {
    /// The exit code: 2 on bad input, and when writing was refused (nothing was written); 1 on
    /// findings or out-of-date files; 0 when clean.
    pub fn exit_code(&self) -> u8 {
        use crate::diagnostic::{EXIT_BAD_INPUT, EXIT_FINDINGS};
        match exit_code_of(&self.diags) {
            _ if self.mode == Kind::Write && !self.may_write => EXIT_BAD_INPUT,
            0 if self.mode == Kind::Drift && !self.stale.is_empty() => EXIT_FINDINGS,
            code => code,
        }
    }

    /// The failing findings' fixes as one line of commands (`` `a`, then `b` ``), if any.
    pub fn fix_line(&self, program: &str) -> Option<String> {
        (!self.fixes.is_empty()).then(|| Fix::sequence(&self.fixes, program))
    }
}

/// The exit code of findings judged outside a verdict's mode (`check` adds the workspace's and
/// `--strict`'s to its verdict): 2 on bad input, 1 on any error, else 0.
pub fn exit_code_of(diags: &Diagnostics) -> u8 {
    use crate::diagnostic::{EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
    if diags.has_bad_input() {
        EXIT_BAD_INPUT
    } else if diags.has_errors() {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    }
}
