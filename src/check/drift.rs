//! Drift: where the tree's directives, or a generated file, differ from the policy. One
//! definition, used by `check`, `gen-makefiles --check` and the pre-commit hook alike (the hook
//! feeds it the staged files). Each finding says which side moved, by comparing both with the
//! last generated state, the effective snapshot beside the policy: a line the tree lost is told
//! from a unit the policy added but has not written yet, and the hint names the command that
//! moves the right side.

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Fix, LineIndex, Location};
use crate::hint;

use crate::emit::inplace::{existing_key, Edit};
use crate::generate::snapshot::Base;
use crate::generate::Plan;
use crate::kbuild::configs::State;
use crate::kbuild::Rules;
use crate::mechanism::MechId;
use crate::output::Change;
use crate::policy::{expand_variants, Layout, Policy};

/// Every drift finding of `plan` (whose `changes` include the snapshot's), against `base`.
pub fn findings(policy: &Policy, plan: &Plan, rules: &Rules, base: &Base) -> Diagnostics {
    Diagnostics(classified(policy, plan, rules, base).into_iter().map(|(d, _)| d).collect())
}

/// The drift findings where the tree moved since the last generation (a merge or a hand edit):
/// writing the policy over them would lose that change, so `gen-makefiles` refuses them. On a
/// first application (no snapshot of this tree) the policy's lines are written and a tree line
/// the policy lacks is refused: nothing says the policy meant to drop it.
pub fn tree_moved(policy: &Policy, plan: &Plan, rules: &Rules, base: &Base) -> Diagnostics {
    Diagnostics(classified(policy, plan, rules, base).into_iter().filter(|(_, t)| *t).map(|(d, _)| d).collect())
}

/// Drift findings, each with whether the tree (rather than the policy) moved.
fn classified(policy: &Policy, plan: &Plan, rules: &Rules, base: &Base) -> Vec<(Diagnostic, bool)> {
    let mut diags = Vec::new();
    // What the policy says now: the planned snapshot.
    let now = planned_snapshot(plan);
    let by_dir = policy.units_by_dir();
    // Each directory knows its own change: no join by path or by name.
    let dir_of: std::collections::HashMap<usize, (&String, &crate::generate::PlannedDir)> =
        plan.dirs.iter().filter_map(|(d, p)| p.change.map(|c| (c, (d, p)))).collect();
    for (i, change) in plan.changes.iter().enumerate().filter(|(_, c)| !c.is_noop()) {
        match dir_of.get(&i).filter(|(_, p)| !p.edits.is_empty()) {
            Some((dir, planned)) if policy.layout == Layout::InPlace => {
                let edits = &planned.edits;
                let units = by_dir.get(dir.as_str()).map_or(&[][..], Vec::as_slice);
                let lines = LineIndex::new(change.old.as_deref().unwrap_or(""));
                let before = planned.before.as_ref().map(|r| r.parsed());
                for edit in edits {
                    diags.push(edit_finding(change, &lines, dir, units, edit, base, &now, before));
                }
            }
            _ => diags.push((stale_file(change), false)),
        }
    }
    match policy.layout {
        Layout::InPlace => {}
        Layout::Block => outside_lines(plan, rules, (base, &now), &mut diags),
        Layout::Central => {
            for v in central_verdicts(plan, rules, base, &now) {
                match v {
                    Verdict::InSync => {}
                    Verdict::Finding(d, moved) => diags.push((d, moved)),
                    Verdict::Unwritable(d) => diags.push((d, false)),
                }
            }
        }
    }
    diags
}

fn stale_file(change: &Change) -> Diagnostic {
    Diagnostic::error(Code::StaleFile, format!("`{}` is not in sync with the policy", change.display))
        .at(Location::file(&change.path))
        .hint(hint!["run ", Fix::GenMakefiles, " and commit the result"])
        .fixed_by(Fix::GenMakefiles)
}

/// The policy path a line of `dir` stands for.
fn path_of(dir: &str, object: Option<&str>) -> String {
    match object {
        Some(o) => format!("{dir}/{o}"),
        None => format!("{dir}/"),
    }
}

#[allow(clippy::too_many_arguments)]
fn edit_finding(
    change: &Change,
    lines: &LineIndex,
    dir: &str,
    units: &[&crate::policy::Unit],
    edit: &Edit,
    base: &Base,
    now: &Base,
    before: Option<&crate::makefile::KbuildFile>,
) -> (Diagnostic, bool) {
    let old = change.old.as_deref().unwrap_or("");
    match edit {
        Edit::Added { unit, mech, text, .. } => {
            let u = units[*unit];
            let was = expand_variants(&u.path.text, &u.vars).iter().any(|p| base.has(p, *mech))
                && base.known
                && history_had(&change.path, text);
            let (message, hint) = if was {
                (
                    format!(
                        "`{}` is gone from `{}`, but the policy still has `{}` skip/force `{mech}`",
                        text.trim(),
                        change.display,
                        u.path.text
                    ),
                    hint![
                        "the tree lost the line (a merge or a hand edit): run ",
                        Fix::Sync,
                        " to drop the unit from the policy, or ",
                        Fix::GenMakefilesForce,
                        " to write the line back"
                    ],
                )
            } else {
                (
                    format!("`{}` sets `{mech}` but `{}` has no line for it yet", u.path.text, change.display),
                    hint!["run ", Fix::GenMakefiles, " to write it"],
                )
            };
            (
                Diagnostic::error(Code::Drift, message)
                    .at(u.setting_locations.get(mech).unwrap_or(&u.location).clone())
                    .about(&u.path.text, Some(*mech))
                    .hint(hint)
                    .fixed_by(if was { Fix::Sync } else { Fix::GenMakefiles }),
                was,
            )
        }
        Edit::Removed { line, text } => {
            let object = removed_object(text);
            let mech = object.as_ref().map(|(m, _)| *m);
            let path = path_of(dir, object.as_ref().and_then(|(_, o)| o.as_deref()));
            // The line is the last generation's only if the memory had it under the same
            // conditions: a hand-added `ifdef CONFIG_FOO` line for an object the policy sets
            // unconditionally is the tree's.
            let at = before.and_then(|b| b.assignments.iter().find(|a| a.line == *line).map(|a| (b, a)));
            let symbols = at.map(|(_, a)| line_symbols(a)).unwrap_or_default();
            let decides = at.and_then(|(b, a)| line_decides(b, a));
            let was = mech.is_some_and(|m| base.had(&path, m, &symbols, decides)) && base.known;
            let hint = if was {
                hint!["the policy dropped this unit: run ", Fix::GenMakefiles, " to remove the line"]
            } else {
                hint![
                    "run ",
                    Fix::Sync,
                    " to take it into the policy (the comment above it becomes the reason), or delete the line"
                ]
            };
            let d = Diagnostic::error(Code::Drift, format!("`{}` is in the tree but not in the policy", text.trim()))
                .at(lines.line(&change.path, old, *line))
                .about(&path, mech)
                .hint(hint)
                .fixed_by(if was { Fix::GenMakefiles } else { Fix::Sync });
            (d, !was)
        }
        Edit::Changed { line, old: was, new } => {
            // The policy's state is what the snapshot recorded: the tree changed the value.
            let object = removed_object(was);
            let path = path_of(dir, object.as_ref().and_then(|(_, o)| o.as_deref()));
            let tree_moved =
                object.as_ref().is_some_and(|(m, _)| base.known && base.state(&path, *m) == now.state(&path, *m));
            let hint = if tree_moved {
                hint![
                    "the tree changed the value since the last generation: run ",
                    Fix::Sync,
                    " to take it into the policy, or ",
                    Fix::GenMakefilesForce,
                    " to write the policy's value back"
                ]
            } else {
                hint!["run ", Fix::GenMakefiles, " to write the policy's value"]
            };
            let d = Diagnostic::error(
                Code::Drift,
                format!("`{}` differs from the policy, which says `{}`", was.trim(), new.trim()),
            )
            .at(lines.line(&change.path, old, *line))
            .about(&path, object.as_ref().map(|(m, _)| *m))
            .hint(hint)
            .fixed_by(if tree_moved { Fix::Sync } else { Fix::GenMakefiles });
            (d, tree_moved)
        }
    }
}

/// The value the generated block gives `name`, if it sets it.
fn block_value<'f>(parsed: &'f crate::makefile::KbuildFile, name: &str) -> Option<&'f str> {
    parsed.assignments.iter().rev().find(|a| a.in_block && a.name == name).map(|a| a.value.trim())
}

/// The Kconfig symbols the conditionals around `a` name.
fn line_symbols(a: &crate::makefile::Assignment) -> Vec<String> {
    a.frames.iter().flat_map(|f| crate::makefile::config_symbols(&f.condition.text)).collect()
}

/// The state `a` gives on its own when make reads only it (the variable's last line, plain and
/// unconditional, set to `y` or `n`): what the memory records if the last generation wrote it
/// ([`Base::had`]).
fn line_decides(file: &crate::makefile::KbuildFile, a: &crate::makefile::Assignment) -> Option<State> {
    let last = file.last_setter(&a.name).is_some_and(|l| l.line == a.line);
    match a.value.trim() {
        "y" if last && a.is_plain() => Some(State::On),
        "n" if last && a.is_plain() => Some(State::Off),
        _ => None,
    }
}

/// Whether the tree at `file` can have lost `text`: where the file is tracked by git, some
/// commit of its history added or removed the line. A snapshot copied with its policy from
/// another tree claims lines this tree never had; there the policy is ahead, not the tree.
/// Without git (or when it cannot answer) the snapshot is taken at its word.
pub fn history_had(file: &std::path::Path, text: &str) -> bool {
    let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else { return true };
    let dir = if dir.as_os_str().is_empty() { std::path::Path::new(".") } else { dir };
    let git = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
    };
    let os = std::ffi::OsStr::new;
    let tracked = git(&[os("ls-files"), os("--error-unmatch"), os("--"), name]).is_some_and(|o| o.status.success());
    if !tracked {
        return true;
    }
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or(text).trim();
    let pickaxe = format!("-S{line}");
    match git(&[os("log"), os(&pickaxe), os("--format=%H"), os("-1"), os("--"), name]) {
        Some(o) if o.status.success() => !o.stdout.is_empty(),
        _ => true,
    }
}

/// The mechanism and object of a directive line's text.
fn removed_object(text: &str) -> Option<(MechId, Option<String>)> {
    let parsed = crate::makefile::parse(&format!("{}\n", text.trim()));
    let (_, d) = parsed.directives().next()?;
    Some((d.mech, d.object.clone()))
}

/// Block and central layouts: modelled directive lines outside the generated text are drift;
/// the policy owns every such line.
fn outside_lines(plan: &Plan, rules: &Rules, (base, now): (&Base, &Base), diags: &mut Vec<(Diagnostic, bool)>) {
    for (dir, planned) in &plan.dirs {
        let (file, Some(read)) = (&planned.file, planned.before.as_ref()) else { continue };
        let (before, parsed) = (read.text.as_str(), read.parsed());
        let lines = LineIndex::new(before);
        let inside = parsed.block_names();
        let planned_inside = planned.file.parsed().block_names();
        let moved = crate::generate::moved_lines(parsed);
        for (i, d) in parsed.directives() {
            let a = &parsed.assignments[i];
            if a.in_block || existing_key(parsed, a, d, rules).is_none() {
                continue;
            }
            let loc = lines.line(&file.path, before, a.line);
            let path = path_of(dir, d.object.as_deref());
            // Writing the block removes this line (the plan's own rule): make reads what the
            // block says before and after.
            if moved.contains(&a.line) {
                let (message, hint) = if a.value.trim() == block_value(parsed, &a.name).unwrap_or_default() {
                    (
                        format!("`{}` is set both here and, to the same value, in the generated block", a.name),
                        hint!["run ", Fix::GenMakefiles, ": it removes this line, which the block now holds"],
                    )
                } else {
                    (
                        format!("`{}` is set here, but a later line sets it again to what the generated block says: make never reads this one", a.name),
                        hint!["run ", Fix::GenMakefiles, ": it removes this line and the later ones, and make reads the block's value as it reads it now"],
                    )
                };
                diags.push((
                    Diagnostic::error(Code::ConflictingDirective, message)
                        .at(loc)
                        .hint(hint)
                        .fixed_by(Fix::GenMakefiles),
                    false,
                ));
            } else if inside.contains(a.name.as_str()) && takes_over(parsed, &planned.file, a) {
                // The policy already says what make reads here (sync took it): the block the
                // plan writes says it too, and writing removes this line.
                diags.push((
                    Diagnostic::error(
                        Code::ConflictingDirective,
                        format!("`{}` is set both here and in the generated block, which the policy now says as this line does", a.name),
                    )
                    .at(loc)
                    .hint(hint!["run ", Fix::GenMakefiles, ": it writes this value into the block and removes this line"])
                    .fixed_by(Fix::GenMakefiles),
                    false,
                ));
            } else if inside.contains(a.name.as_str()) {
                diags.push((conflict(parsed, a, loc, (&path, d.mech), (base, now)), false));
            } else {
                // The policy may hold it already (sync took it since the last generation).
                let held = planned_inside.contains(a.name.as_str());
                let known = (base.has(&path, d.mech) && base.known) || held;
                let hint = if known {
                    hint!["run ", Fix::GenMakefiles, " to move it into the generated block"]
                } else {
                    hint![
                        "run ",
                        Fix::Sync,
                        " to take it into the policy, then ",
                        Fix::GenMakefiles,
                        " moves it into the block"
                    ]
                };
                // Writing the block leaves this line alone: nothing is lost, so it never blocks a write.
                let text = before[a.bytes.clone()].trim_end().to_string();
                let message = if held {
                    format!("`{text}` is outside the generated block, which the policy now writes it into")
                } else {
                    format!("`{text}` is in the tree but not in the policy")
                };
                let d = Diagnostic::error(Code::UnmanagedDirective, message).at(loc).hint(hint);
                // `sync` takes the line into the policy, whose block then holds it, and
                // `gen-makefiles` moves it there: one fix, two commands.
                let d =
                    if known { d.fixed_by(Fix::GenMakefiles) } else { d.fixed_by_then(Fix::Sync, Fix::GenMakefiles) };
                diags.push((d, false));
            }
        }
    }
}

/// Whether `a` (after the block, what make reads: plain, unconditional, the variable's last
/// line) says what the planned block says, so that writing the plan moves it into the block.
fn takes_over(
    parsed: &crate::makefile::KbuildFile,
    planned: &crate::generate::PlannedFile,
    a: &crate::makefile::Assignment,
) -> bool {
    let last = parsed.last_setter(&a.name).is_some_and(|l| l.line == a.line);
    last && parsed.plainly_set(&a.name) && block_value(planned.parsed(), &a.name) == Some(a.value.trim())
}

/// A hand-written line that sets a variable the generated block sets to another value. When
/// make reads it (every line of the variable plain and unconditional, this one the last) and
/// the policy kept its state since the last generation, the tree moved (a merge set the value
/// after the block): `sync` takes it and `gen-makefiles` then moves it into the block. A line
/// the block overrides, or one the policy also moved for, is for a person to decide.
fn conflict(
    parsed: &crate::makefile::KbuildFile,
    a: &crate::makefile::Assignment,
    loc: Location,
    (path, mech): (&str, MechId),
    (base, now): (&Base, &Base),
) -> Diagnostic {
    let plain = parsed.plainly_set(&a.name);
    let last = parsed.last_setter(&a.name).is_some_and(|l| l.line == a.line);
    let policy_kept = base.known && base.state(path, mech) == now.state(path, mech);
    let d = Diagnostic::error(
        Code::ConflictingDirective,
        format!("`{}` is set both here and in the generated block", a.name),
    )
    .at(loc);
    match (plain, last, policy_kept) {
        (true, true, true) => d
            .hint(hint![
                "make reads this line, not the block's (a merge or a hand edit set it since the last generation): run ",
                Fix::Sync,
                " to take its value into the policy, then ",
                Fix::GenMakefiles,
                " moves it into the block"
            ])
            .fixed_by_then(Fix::Sync, Fix::GenMakefiles),
        (true, false, _) => d.hint(
            "make never reads this line: the generated block sets the variable again after it; delete it, or move the change into the policy",
        ),
        (false, _, _) => match parsed.setters(&a.name).find(|o| o.line != a.line && !o.in_block && !o.is_plain()) {
            // This line is plain; another hand line of the variable is not: removing this one
            // would let that one take effect, so only a person can say what the tree means.
            Some(other) if a.is_plain() => d.hint(format!(
                "the policy owns this variable, and line {} sets it too, under a condition or not plainly: decide what the tree means, write that into the policy, then delete both lines",
                other.line
            )),
            _ => d.hint(
                "the policy owns this variable, and this line is conditional or not a plain assignment: write what it means into the policy, then delete it",
            ),
        },
        (true, true, false) => d.hint(
            "the policy changed this variable since the last generation too: decide which value is right, write it into the policy and delete this line",
        ),
    }
}

/// What a central-layout line the policy does not hold means for drift, and whether writing
/// the policy over it must be refused.
enum Verdict {
    /// Nothing to report.
    InSync,
    /// A finding; `true` when the tree moved (writing would reset the line: refused unless forced).
    Finding(Diagnostic, bool),
    /// The policy dropped a line the central file cannot reset: never written.
    Unwritable(Diagnostic),
}

/// Central layout: each directory line the policy does not hold ([`Plan::unheld`]). The
/// central file resets it when that is exact; then it is in sync once the file on disk holds
/// the reset. Before that, which side moved decides: the policy dropped (or flipped) the unit
/// since the last generation (`gen-makefiles` writes the reset), or the line is new to the
/// tree (a merge: `sync` takes it in; writing would reset it, so `gen-makefiles` refuses).
fn central_verdicts(plan: &Plan, rules: &Rules, base: &Base, now: &Base) -> Vec<Verdict> {
    // Each reset on disk covers one line it was written for: a second line for the same
    // variable (upstream re-adds one the policy dropped) is new to the tree, not in sync.
    let mut written = written_resets(plan);
    let mut out = Vec::new();
    for (dir, planned) in &plan.dirs {
        let (file, unheld, Some(before)) =
            (&planned.file, &planned.unheld, planned.before.as_ref().map(|b| b.text.as_str()))
        else {
            continue;
        };
        let lines = LineIndex::new(before);
        // Parsed once, where a line needs it.
        let parsed = std::cell::OnceCell::new();
        for u in unheld {
            if u.dead {
                // Never read (the set-twice warning says so): not the policy's, not sync's. A
                // reset on disk written for it while it was live is its own, not a later line's.
                if let Ok(r) = &u.reset {
                    take_one(written.get_mut(dir.as_str()), &r.key());
                }
                out.push(Verdict::InSync);
                continue;
            }
            let loc = lines.line(&file.path, before, u.line);
            let path = path_of(dir, u.object.as_deref());
            let mech = u.mech;
            // The policy moved: the last generation had the unit, and it is gone or says otherwise
            // now; or it dropped a unit that changed nothing (an `else` branch's `:= y`), whose
            // line the memory records, and resetting the line changes nothing either.
            let policy_moved = base.known
                && base.has(&path, mech)
                && (!now.has(&path, mech)
                    || base.state(&path, mech) != now.state(&path, mech)
                    || dropped_no_op(
                        (before, parsed.get_or_init(|| crate::makefile::parse(before))),
                        (u, &path),
                        rules,
                        base,
                    ));
            let unmanaged = |hint: crate::diagnostic::Hint| {
                Diagnostic::error(
                    Code::UnmanagedDirective,
                    format!("`{}` is in the tree but not in the policy", u.text),
                )
                .at(loc.clone())
                .hint(hint)
                .fixed_by(Fix::Sync)
            };
            let take_it = hint!["run ", Fix::Sync, " to take it into the policy (the central file then repeats it)"];
            out.push(match &u.reset {
                Ok(r) if take_one(written.get_mut(dir.as_str()), &r.key()) => Verdict::InSync,
                Ok(_) if policy_moved => Verdict::Finding(
                    Diagnostic::error(
                        Code::Drift,
                        format!("`{}` still applies: the policy no longer has `{path}` `{mech}` this way, and `{}` does not reset it yet", u.text, crate::emit::central::CENTRAL_FILE),
                    )
                    .at(loc)
                    .hint(hint!["run ", Fix::GenMakefiles, format!(" to write the reset line into `{}`", crate::emit::central::CENTRAL_FILE)])
                    .fixed_by(Fix::GenMakefiles),
                    false,
                ),
                // New to the tree, or (a first application) not known to be the policy's to drop.
                Ok(_) => Verdict::Finding(unmanaged(take_it), true),
                Err(why) if policy_moved => Verdict::Unwritable(
                    Diagnostic::error(
                        Code::CentralReset,
                        format!("the policy no longer has `{path}` `{mech}` this way, but the central file cannot reset `{}`: {why}", u.text),
                    )
                    .at(loc)
                    .hint(format!(
                        "put the unit back into the policy as it was (`{path}`, `{mech}`), or delete this line from the directory's kbuild file by hand, or use `layout = \"in-place\"`"
                    )),
                ),
                Err(_) => Verdict::Finding(unmanaged(take_it), false),
            });
        }
    }
    out
}

/// A reset key with how many resets of it a section holds.
type ResetCounts = std::collections::BTreeMap<(String, Vec<String>), usize>;

/// The resets the central file on disk holds, by directory (as [`crate::emit::central::Reset::key`]),
/// counted: one reset stands for one line.
fn written_resets(plan: &Plan) -> std::collections::BTreeMap<String, ResetCounts> {
    let old =
        plan.changes.iter().find(|c| c.display == crate::emit::central::CENTRAL_FILE).and_then(|c| c.old.as_deref());
    let sections = old.and_then(crate::emit::central::sections).unwrap_or_default();
    let count = |s: &str| {
        let mut counts = ResetCounts::new();
        for key in crate::emit::central::section_resets(s) {
            *counts.entry(key).or_default() += 1;
        }
        counts
    };
    sections.into_iter().map(|(d, s)| (d, count(&s))).collect()
}

/// Use up one written reset of `key`, if there is one left.
fn take_one(counts: Option<&mut ResetCounts>, key: &(String, Vec<String>)) -> bool {
    match counts.and_then(|c| c.get_mut(key)) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

/// The snapshot `plan` would write: what the policy says now.
fn planned_snapshot(plan: &Plan) -> Base {
    plan.snapshot.as_ref().map(|s| s.as_now()).unwrap_or_default()
}

/// Whether `u` is a line of the last generation (the memory's state names its conditions'
/// symbols) that says nothing the directory's file does not say without it: the policy dropped
/// a unit that changed no state, and the reset `gen-makefiles` writes for it changes none
/// either. A line a merge brought that changes the state is the tree's, for `sync`.
fn dropped_no_op(
    (before, file): (&str, &crate::makefile::KbuildFile),
    (u, path): (&crate::emit::central::Unheld, &str),
    rules: &Rules,
    base: &Base,
) -> bool {
    let Some(object) = u.object.as_deref().filter(|o| !o.contains("$(")) else { return false };
    let Some(a) = file.assignments.iter().find(|a| a.line == u.line) else { return false };
    if !base.had(path, u.mech, &line_symbols(a), None) {
        return false;
    }
    let mut without = before.to_string();
    without.replace_range(a.bytes.clone(), &"\n".repeat(a.end_line + 1 - a.line));
    // Compared as states (on, off, on iff …), not as how each configuration got there.
    let state = |f: &crate::makefile::KbuildFile| {
        let s = crate::kbuild::configs::state(f, rules, u.mech, object, true);
        // Too many configurations to enumerate is no answer.
        s.filter(|s| !matches!(s, State::Depends(rows) if rows.is_empty())).map(|s| s.label())
    };
    state(file).is_some_and(|s| Some(s) == state(&crate::makefile::parse(&without)))
}

/// Central layout: what the policy dropped that the central file cannot reset. Writing would
/// leave the directory's line in force while the policy and its snapshot say otherwise, so
/// `gen-makefiles` refuses it, `--force` or not.
pub fn unwritable(policy: &Policy, plan: &Plan, rules: &Rules, base: &Base) -> Diagnostics {
    if policy.layout != Layout::Central {
        return Diagnostics::default();
    }
    let verdicts = central_verdicts(plan, rules, base, &planned_snapshot(plan));
    Diagnostics(
        verdicts
            .into_iter()
            .filter_map(|v| match v {
                Verdict::Unwritable(d) => Some(d),
                _ => None,
            })
            .collect(),
    )
}
