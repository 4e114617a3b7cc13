//! The one place a verdict is made. `gen-makefiles` (writing, and `--check`), `check`, the
//! pre-commit hook, `sync` (writing, and `--check`) and `explain` feed it their inputs (the
//! policy, the plan of the tree or of the staged index, the memory of the last generation that
//! the plan carries) and only render what it returns: the findings by tier, which planned files
//! are out of date, whether writing is allowed (the write guard *is* this answer), and the
//! fixes as typed commands, rendered for the invocation in use. [`Verdict::exit_code`] is the
//! one map from a verdict to an exit code, and every closing line is made from the same fixes
//! as the findings' `help:` lines, so no two lines of output, and no two commands looking at one
//! state, contradict each other.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Fix, Invocation, Severity};
use crate::generate::Plan;
use crate::kbuild::dotconfig::DotConfig;
use crate::kbuild::Rules;
use crate::output::Change;
use crate::policy::Policy;

/// The version of the JSON a verdict prints (`--format json`); documented in the book's
/// reference. A change that removes or renames a field bumps it.
pub const SCHEMA: &str = "sanpolicy.verdict/1";

/// What every verdict is made from besides the plan.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub policy: &'a Policy,
    pub rules: &'a Rules,
    /// The tree the plan was made for; `None` for fragments, where no tree is judged.
    pub tree: Option<&'a Path>,
    /// How the user ran sanpolicy: what the fixes are rendered for.
    pub invocation: &'a Invocation,
}

/// What a command asks.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// `gen-makefiles`: may the plan be written? (`force`: overwrite what the tree changed.)
    Write { force: bool },
    /// `gen-makefiles --check` and `sync --check`: is the tree exactly the policy's generation?
    Drift,
    /// The pre-commit hook: is the commit the index would make the policy's generation? The
    /// plan is the index's; `unstaged` lists the files a fix would read or write that the
    /// working tree holds otherwise than the index (a fix run there would not judge the index).
    Staged { unstaged: &'a [String] },
    /// `check`: drift, and what the tree breaks (requirements, sources, …), for the build of
    /// `config` when given.
    Full { config: Option<&'a DotConfig> },
    /// `sync`: may the synced policy be written? `refused` holds why sync cannot take the
    /// tree's lines (nothing is written then), `pending` where the policy stays ahead of the
    /// tree, `changes` the policy file and snapshot sync would write.
    Sync { refused: &'a Diagnostics, pending: &'a Diagnostics, changes: &'a [Change] },
    /// `explain`: drift about the directories explained, as notes beside the answer.
    Explain,
}

/// The kind of question a verdict answers, as JSON names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Asked {
    Write,
    Drift,
    Staged,
    Full,
    Sync,
    Explain,
}

/// A fix rendered for the invocation: what `--format json` consumers run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Command {
    pub fix: Fix,
    /// The words to run, for a program that spawns it without a shell.
    pub argv: Vec<String>,
    /// The line a shell runs, as printed.
    pub line: String,
}

impl Command {
    /// `fix` as `invocation` runs it.
    pub fn of(fix: &Fix, invocation: &Invocation) -> Command {
        Command { fix: fix.clone(), argv: invocation.argv(fix), line: invocation.render(fix) }
    }
}

/// How many findings of each tier a verdict holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Bad input, I/O and usage errors: nothing could be judged (exit 2).
    pub bad_input: usize,
    /// The tree, a generated file or the memory differ from the policy.
    pub drift: usize,
    /// What the tree breaks (requirements, dead exemptions): `check`'s tier.
    pub findings: usize,
    pub acknowledged: usize,
    pub warnings: usize,
    pub notes: usize,
}

/// What the judge found.
#[derive(Debug, Serialize)]
pub struct Verdict {
    pub schema: &'static str,
    pub asked: Asked,
    /// Every finding shown, sorted: bad input, drift, the tree's findings, warnings and notes.
    pub diagnostics: Diagnostics,
    /// Indexes into the plan's changes (or sync's) of the files that are out of date.
    #[serde(skip)]
    pub stale: Vec<usize>,
    /// Those files, as shown.
    pub stale_files: Vec<String>,
    /// Writing the plan is allowed (`Write` and `Sync`; false in the other modes).
    pub may_write: bool,
    /// The commands that clear the failing findings, in the order to run them.
    #[serde(skip)]
    pub fixes: BTreeSet<Fix>,
    /// [`Verdict::fixes`], rendered.
    pub commands: Vec<Command>,
    /// A person must decide: failing findings that no command clears (both sides moved, a
    /// line a policy cannot hold, a policy that needs editing).
    pub decide: usize,
    /// The tree's findings a drift verdict does not show (`check` lists them).
    pub remaining: usize,
    pub counts: Counts,
    pub exit_code: u8,
}

/// The verdict on `plan` (which carries the memory of the last generation) for `mode`.
pub fn judge(inputs: Inputs, plan: &Plan, mode: Mode) -> Verdict {
    let Inputs { policy, rules, tree, invocation } = inputs;
    let base = &plan.base;
    let mut diags = plan.diags.clone();
    // Bad input only the tree reveals (a `when` naming a symbol no Kconfig file declares)
    // stops every command alike, before anything is judged or written.
    if let Some(tree) = tree.filter(|_| !matches!(mode, Mode::Sync { .. })) {
        diags.extend(super::unknown_symbols(policy, tree));
    }
    let bad_input = diags.has_bad_input();
    let mut stale: Vec<usize> = if bad_input { Vec::new() } else { changed(&plan.changes) };
    let mut remaining = 0;
    let mut may_write = false;
    let asked = match mode {
        Mode::Write { force } => {
            if !diags.has_bad_input() {
                diags.extend(refusals(inputs, plan, force));
            }
            may_write = !diags.has_errors();
            if may_write {
                // What the file system will say, asked before anything is written.
                diags.extend(crate::output::preflight(&plan.changes));
                may_write = !diags.has_errors();
            }
            Asked::Write
        }
        Mode::Drift | Mode::Staged { .. } => {
            if tree.is_some() && !bad_input {
                diags.extend(super::drift::findings(policy, plan, rules, base));
                remaining = tree_findings(inputs, plan).0.iter().filter(|d| d.is_error()).count();
            }
            if matches!(mode, Mode::Drift) {
                Asked::Drift
            } else {
                Asked::Staged
            }
        }
        Mode::Full { config } => {
            if !bad_input {
                diags.extend(super::run_for(policy, rules, tree, plan, base, config));
            }
            Asked::Full
        }
        Mode::Sync { refused, pending, changes } => {
            // Sync reads the plan for the memory and the policy's state alone: what stops
            // writing the policy's lines (a hand-edited block) is what sync takes back.
            diags.0.retain(|d| d.code.is_bad_input());
            diags.extend(refused.clone());
            diags.extend(pending.clone());
            stale = changed(changes);
            may_write = !diags.has_errors();
            Asked::Sync
        }
        Mode::Explain => {
            if tree.is_some() {
                let drift = super::drift::findings(policy, plan, rules, base);
                diags.extend(Diagnostics(drift.0.into_iter().map(as_note).collect()));
            }
            stale.clear();
            Asked::Explain
        }
    };
    let mut diags = diags.sorted();
    // A fix that would be refused is no fix: where writing is what clears a finding, the write
    // guard is asked, and what it refuses is shown instead of the command.
    let mut refused_writing = false;
    if let Mode::Staged { unstaged } = mode {
        if !unstaged.is_empty() {
            diags.push(unstaged_finding(unstaged));
            for d in diags.0.iter_mut() {
                d.fix = None;
                d.then = None;
            }
        }
    }
    if matches!(asked, Asked::Drift | Asked::Staged | Asked::Full) && wants_writing(&diags, &stale) {
        let refused = refusals(inputs, plan, false);
        // A refusal that repeats a finding already shown is not shown twice, but it still
        // refuses: the fix that writes is withheld either way.
        // The tree's own changes, which `sync` takes back first, refuse no `gen-makefiles` that
        // runs after it: such a fix stays, ordered after `sync`.
        let cleared_by_sync = refused.0.iter().all(|r| r.code.is_drift() && r.fix == Some(Fix::Sync));
        refused_writing = !refused.0.is_empty() && !cleared_by_sync;
        let refused: Vec<Diagnostic> =
            refused.0.into_iter().filter(|r| !diags.iter().any(|d| same_finding(d, r))).collect();
        if !refused_writing {
            diags.extend(Diagnostics(refused.into_iter().filter(|r| r.fix == Some(Fix::Sync)).collect()));
            diags = diags.sorted();
        } else {
            diags.extend(Diagnostics(refused.into_iter().map(refused_write).collect()));
            diags = diags.sorted();
            for d in diags.0.iter_mut() {
                if matches!(d.fix, Some(Fix::GenMakefiles)) {
                    d.fix = None;
                }
                if d.fix.is_none() || matches!(d.then, Some(Fix::GenMakefiles)) {
                    d.then = None;
                }
            }
        }
    }
    let stale_files = stale.iter().filter_map(|i| change_display(plan, mode, *i)).collect();
    let verdict = Verdict {
        schema: SCHEMA,
        asked,
        diagnostics: diags,
        stale,
        stale_files,
        may_write,
        fixes: BTreeSet::new(),
        commands: Vec::new(),
        decide: 0,
        remaining,
        counts: Counts::default(),
        exit_code: 0,
    };
    finish(verdict, refused_writing, invocation)
}

/// `verdict` with its findings replaced by `diags` (`check --strict` and `--workspace` add
/// their own): fixes, counts and the exit code made again from them.
pub fn with_findings(mut verdict: Verdict, diags: Diagnostics, invocation: &Invocation) -> Verdict {
    verdict.diagnostics = diags;
    finish(verdict, false, invocation)
}

/// The fixes, counts and exit code of a verdict's findings.
fn finish(mut verdict: Verdict, refused_writing: bool, invocation: &Invocation) -> Verdict {
    // On bad input no command runs until it is fixed: each finding's `help:` says how.
    let bad_input = verdict.diagnostics.has_bad_input();
    let mut fixes = if bad_input { Default::default() } else { verdict.diagnostics.fixes() };
    if verdict.asked == Asked::Sync && verdict.may_write {
        // What stays to do after sync: the policy's own changes, which its notes name.
        fixes.extend(verdict.diagnostics.iter().filter_map(|d| d.fix.clone()));
    }
    let drift = matches!(verdict.asked, Asked::Drift | Asked::Staged);
    // Unstaged changes in the files a fix would use: the fixes are withheld (they would read
    // or stage the wrong text) and the one decision left is what to do with those changes.
    let unstaged = verdict.diagnostics.iter().any(|d| d.code == Code::UnstagedChanges);
    if drift && !verdict.stale.is_empty() && fixes.is_empty() && !refused_writing && !unstaged && !bad_input {
        // Out-of-date files with no finding of their own (a snapshot, a fragment): regenerate.
        fixes.insert(Fix::GenMakefiles);
    }
    verdict.decide = if unstaged {
        1
    } else {
        verdict.diagnostics.iter().filter(|d| d.is_error() && d.fix.is_none() && !d.code.is_bad_input()).count()
    };
    verdict.commands = fixes.iter().map(|f| Command::of(f, invocation)).collect();
    verdict.fixes = fixes;
    verdict.counts = counts(&verdict.diagnostics);
    verdict.exit_code = verdict.code();
    verdict
}

/// The indexes of the changes that write something.
fn changed(changes: &[Change]) -> Vec<usize> {
    changes.iter().enumerate().filter(|(_, c)| !c.is_noop()).map(|(i, _)| i).collect()
}

fn change_display(plan: &Plan, mode: Mode, i: usize) -> Option<String> {
    match mode {
        Mode::Sync { changes, .. } => changes.get(i).map(|c| c.display.clone()),
        _ => plan.changes.get(i).map(|c| c.display.clone()),
    }
}

/// Whether the verdict's fixes would write the plan: a failing finding fixed by
/// `gen-makefiles`, or out-of-date files.
fn wants_writing(diags: &Diagnostics, stale: &[usize]) -> bool {
    !stale.is_empty() || diags.iter().any(|d| d.is_error() && matches!(d.fix, Some(Fix::GenMakefiles)))
}

/// The same finding reported twice (by drift and by the write guard).
fn same_finding(a: &Diagnostic, b: &Diagnostic) -> bool {
    a.code == b.code
        && (a.location == b.location && a.message == b.message || a.subject.is_some() && a.subject == b.subject)
}

/// A refusal of the write guard, as a drift verdict shows it: what `gen-makefiles` would refuse,
/// and why (bad input stays what it is: it stops every command).
fn refused_write(d: Diagnostic) -> Diagnostic {
    if d.code.is_bad_input() || d.code.is_drift() {
        return d;
    }
    Diagnostic { message: format!("`gen-makefiles` would refuse to write: {}", d.message), fix: None, then: None, ..d }
}

/// The working tree differs from the index in files a fix would use: a person stages or
/// stashes them, then commits again.
fn unstaged_finding(unstaged: &[String]) -> Diagnostic {
    let list = unstaged.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
    Diagnostic::error(
        Code::UnstagedChanges,
        format!("the working tree differs from what is staged in {list}, which the fix would read or write"),
    )
    .hint(crate::hint![
        "a fix runs on the working tree, not on the index: stage those files (",
        Fix::git(&[&["add", "--"][..], &unstaged.iter().map(String::as_str).collect::<Vec<_>>()].concat()),
        ") or set them aside (",
        Fix::git(&["stash", "push", "--keep-index"]),
        "), then commit again to see the fix"
    ])
}

/// A drift finding beside `explain`'s answer.
fn as_note(d: Diagnostic) -> Diagnostic {
    if d.is_error() {
        Diagnostic { severity: Severity::Note, ..d }
    } else {
        d
    }
}

/// What stops writing `plan`: bad input of the plan itself, then (on a plan that can be
/// made) what writing would lose (the tree's changes, unless `force`) or break (a dead
/// exemption written anew, a requirement newly broken, a conditional left unbalanced), with
/// the policy's acknowledgements applied. Findings about lines already in the tree never block
/// it.
pub fn refusals(inputs: Inputs, plan: &Plan, force: bool) -> Diagnostics {
    let Inputs { policy, rules, tree, .. } = inputs;
    let mut out = Diagnostics::default();
    let Some(tree) = tree.filter(|_| !plan.diags.has_errors()) else { return out };
    if !force {
        out.extend(super::drift::tree_moved(policy, plan, rules, &plan.base));
    }
    out.extend(super::drift::unwritable(policy, plan, rules, &plan.base));
    out.extend(super::new_problems(policy, rules, tree, plan));
    out.extend(super::unbalanced(plan));
    out
}

/// The tree's findings (`check`'s tier, acknowledgements applied) that a drift verdict does not
/// list: counted so that `--check` and the hook can say that some remain.
fn tree_findings(inputs: Inputs, plan: &Plan) -> Diagnostics {
    let Inputs { policy, rules, tree, .. } = inputs;
    let Some(tree) = tree else { return Diagnostics::default() };
    let all = super::run_for(policy, rules, Some(tree), plan, &plan.base, None);
    Diagnostics(all.0.into_iter().filter(|d| !d.code.is_drift() && !d.code.is_bad_input()).collect())
}

fn counts(diags: &Diagnostics) -> Counts {
    let mut c = Counts::default();
    for d in diags.iter() {
        match d.severity {
            Severity::Error if d.code.is_bad_input() => c.bad_input += 1,
            Severity::Error if d.code.is_drift() => c.drift += 1,
            Severity::Error => c.findings += 1,
            Severity::Warning => c.warnings += 1,
            Severity::Note if d.code == Code::Acknowledged => c.acknowledged += 1,
            Severity::Note => c.notes += 1,
        }
    }
    c
}

impl Verdict {
    /// The exit code: 2 on bad input, and when writing was refused (nothing was written); 1 on
    /// drift, findings or out-of-date files where the mode judges them; 0 when clean.
    fn code(&self) -> u8 {
        use crate::diagnostic::{EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK};
        let errors = self.diagnostics.iter().any(|d| d.is_error());
        match self.asked {
            _ if self.diagnostics.has_bad_input() => EXIT_BAD_INPUT,
            Asked::Write | Asked::Sync if !self.may_write => EXIT_BAD_INPUT,
            Asked::Write | Asked::Sync | Asked::Explain => EXIT_OK,
            Asked::Drift | Asked::Staged if errors || !self.stale.is_empty() => EXIT_FINDINGS,
            Asked::Full if errors => EXIT_FINDINGS,
            _ => EXIT_OK,
        }
    }

    /// The verdict's exit code.
    pub fn exit_code(&self) -> u8 {
        self.exit_code
    }

    /// The fixes as one line of commands (`` `a`, then `b` ``), if any.
    pub fn fix_line(&self) -> Option<String> {
        (!self.commands.is_empty())
            .then(|| self.commands.iter().map(|c| format!("`{}`", c.line)).collect::<Vec<_>>().join(", then "))
    }

    /// The closing line's advice: the fixes, or that a person must decide; `None` when each
    /// finding's `help:` says all (bad input).
    pub fn advice(&self) -> Option<String> {
        match self.fix_line() {
            Some(fixes) if self.decide == 0 => Some(format!("fix: {fixes}")),
            Some(fixes) => {
                Some(format!("fix: {fixes}; {} finding(s) need a person to decide (see each help: above)", self.decide))
            }
            None if self.decide > 0 => {
                Some(format!("{} finding(s) need a person to decide (see each help: above)", self.decide))
            }
            None => None,
        }
    }

    /// `head`, then `; ` and the advice when there is any: one closing line.
    pub fn closing(&self, head: &str) -> String {
        match self.advice() {
            Some(advice) => format!("{head}; {advice}"),
            None => head.to_string(),
        }
    }

    /// The one line a drift verdict adds when the tree's own findings remain.
    pub fn remaining_line(&self, invocation: &Invocation) -> Option<String> {
        (self.remaining > 0).then(|| {
            format!(
                "note: {} finding(s) of the tree remain beside drift (requirements, dead exemptions): `{}` lists them",
                self.remaining,
                invocation.render(&Fix::Check)
            )
        })
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
