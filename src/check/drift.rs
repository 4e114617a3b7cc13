//! Drift: where the tree's directives, or a generated file, differ from the policy. One
//! definition, used by `check`, `gen-makefiles --check` and the pre-commit hook alike (the hook
//! feeds it the staged files). Each finding says which side moved, by comparing both with the
//! last generated state, the effective snapshot beside the policy: a line the tree lost is told
//! from a unit the policy added but has not written yet, and the hint names the command that
//! moves the right side.

use std::collections::BTreeSet;
use std::path::Path;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, LineIndex, Location};

use crate::emit::inplace::{existing_key, Edit};
use crate::generate::Plan;
use crate::kbuild::Rules;
use crate::mechanism::MechId;
use crate::output::Change;
use crate::policy::{expand_variants, Layout, Policy};
use crate::snapshot::Base;

/// Every drift finding of `plan` (whose `changes` include the snapshot's), against `base`.
pub fn findings(policy: &Policy, plan: &Plan, rules: &Rules, base: &Base, program: &str) -> Diagnostics {
    Diagnostics(classified(policy, plan, rules, base, program).into_iter().map(|(d, _)| d).collect())
}

/// The drift findings where the tree moved since the last generation (a merge or a hand edit):
/// writing the policy over them would lose that change, so `gen-makefiles` refuses them.
pub fn tree_moved(policy: &Policy, plan: &Plan, rules: &Rules, base: &Base, program: &str) -> Diagnostics {
    if !base.known {
        return Diagnostics::default();
    }
    Diagnostics(
        classified(policy, plan, rules, base, program).into_iter().filter(|(_, t)| *t).map(|(d, _)| d).collect(),
    )
}

/// Drift findings, each with whether the tree (rather than the policy) moved.
fn classified(policy: &Policy, plan: &Plan, rules: &Rules, base: &Base, program: &str) -> Vec<(Diagnostic, bool)> {
    let mut diags = Vec::new();
    // What the policy says now: the planned snapshot.
    let now = plan
        .changes
        .iter()
        .find(|c| c.display.ends_with(".effective.txt"))
        .map(|c| Base::parse(c.new.as_deref()))
        .unwrap_or_default();
    let by_dir = policy.units_by_dir();
    for change in plan.changes.iter().filter(|c| !c.is_noop()) {
        let dir =
            plan.files.iter().find(|(d, f)| f.path == change.path || same_display(change, d, &f.path)).map(|(d, _)| d);
        match dir.and_then(|d| plan.edits.get(d).map(|e| (d, e))) {
            Some((dir, edits)) if policy.layout == Layout::InPlace => {
                let units = by_dir.get(dir.as_str()).map_or(&[][..], Vec::as_slice);
                let lines = LineIndex::new(change.old.as_deref().unwrap_or(""));
                for edit in edits {
                    diags.push(edit_finding(change, &lines, dir, units, edit, base, &now, program));
                }
            }
            _ => diags.push((stale_file(change, program), false)),
        }
    }
    match policy.layout {
        Layout::InPlace => {}
        Layout::Block => outside_lines(plan, rules, base, program, &mut diags),
        Layout::Central => unowned_lines(policy, plan, rules, base, program, &mut diags),
    }
    diags
}

/// Whether `change` is the kbuild file `path` of directory `dir` (its display is tree-relative).
fn same_display(change: &Change, dir: &str, path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    change.display == format!("{dir}/{name}") || (dir.is_empty() && change.display == name)
}

fn stale_file(change: &Change, program: &str) -> Diagnostic {
    Diagnostic::error(Code::StaleFile, format!("`{}` is not in sync with the policy", change.display))
        .at(Location::file(&change.path))
        .hint(format!(
            "run `{program} gen-makefiles` and commit the result (`{program} gen-makefiles --check` shows the diff)"
        ))
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
    program: &str,
) -> (Diagnostic, bool) {
    let old = change.old.as_deref().unwrap_or("");
    match edit {
        Edit::Added { unit, mech, text, .. } => {
            let u = units[*unit];
            let was = expand_variants(&u.path.text, &u.vars).iter().any(|p| base.has(p, *mech)) && base.known;
            let (message, hint) = if was {
                (
                    format!("`{}` is gone from `{}`, but the policy still has `{}` skip/force `{mech}`", text.trim(), change.display, u.path.text),
                    format!("the tree lost the line (a merge or a hand edit): run `{program} sync` to drop the unit from the policy, or `{program} gen-makefiles --force` to write the line back"),
                )
            } else {
                (
                    format!("`{}` sets `{mech}` but `{}` has no line for it yet", u.path.text, change.display),
                    format!("run `{program} gen-makefiles` to write it"),
                )
            };
            (
                Diagnostic::error(Code::Drift, message)
                    .at(u.setting_locations.get(mech).unwrap_or(&u.location).clone())
                    .hint(hint),
                was,
            )
        }
        Edit::Removed { line, text } => {
            let object = removed_object(text);
            let mech = object.as_ref().map(|(m, _)| *m);
            let path = path_of(dir, object.as_ref().and_then(|(_, o)| o.as_deref()));
            let was = mech.is_some_and(|m| base.has(&path, m)) && base.known;
            let hint = if was {
                format!("the policy dropped this unit: run `{program} gen-makefiles` to remove the line")
            } else {
                format!("run `{program} sync` to take it into the policy (the comment above it becomes the reason), or delete the line")
            };
            let d = Diagnostic::error(Code::Drift, format!("`{}` is in the tree but not in the policy", text.trim()))
                .at(lines.line(&change.path, old, *line))
                .hint(hint);
            (d, !was)
        }
        Edit::Changed { line, old: was, new } => {
            // The policy's state is what the snapshot recorded: the tree changed the value.
            let object = removed_object(was);
            let path = path_of(dir, object.as_ref().and_then(|(_, o)| o.as_deref()));
            let tree_moved = object.is_some_and(|(m, _)| base.known && base.state(&path, m) == now.state(&path, m));
            let hint = if tree_moved {
                format!("the tree changed the value since the last generation: run `{program} sync` to take it into the policy, or `{program} gen-makefiles --force` to write the policy's value back")
            } else {
                format!("run `{program} gen-makefiles` to write the policy's value")
            };
            let d = Diagnostic::error(
                Code::Drift,
                format!("`{}` differs from the policy, which says `{}`", was.trim(), new.trim()),
            )
            .at(lines.line(&change.path, old, *line))
            .hint(hint);
            (d, tree_moved)
        }
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
fn outside_lines(plan: &Plan, rules: &Rules, base: &Base, program: &str, diags: &mut Vec<(Diagnostic, bool)>) {
    for (dir, file) in &plan.files {
        let Some(before) = plan.before.get(dir) else { continue };
        let parsed = crate::makefile::parse(before);
        let lines = LineIndex::new(before);
        let inside = parsed.block_names();
        for (i, d) in parsed.directives() {
            let a = &parsed.assignments[i];
            if a.in_block || existing_key(a, d, rules).is_none() {
                continue;
            }
            let loc = lines.line(&file.path, before, a.line);
            let path = path_of(dir, d.object.as_deref());
            if inside.contains(a.name.as_str()) {
                diags.push((
                    Diagnostic::error(
                        Code::ConflictingDirective,
                        format!("`{}` is set both here and in the generated block", a.name),
                    )
                    .at(loc)
                    .hint("the policy owns this variable: delete this hand-written line"),
                    false,
                ));
            } else {
                let known = base.has(&path, d.mech) && base.known;
                let hint = if known {
                    format!("run `{program} gen-makefiles` to move it into the generated block")
                } else {
                    format!("run `{program} sync` to take it into the policy, then `{program} gen-makefiles` moves it into the block")
                };
                // Writing the block leaves this line alone: nothing is lost, so it never blocks a write.
                let text = before[a.bytes.clone()].trim_end().to_string();
                diags.push((
                    Diagnostic::error(
                        Code::UnmanagedDirective,
                        format!("`{text}` is in the tree but not in the policy"),
                    )
                    .at(loc)
                    .hint(hint),
                    false,
                ));
            }
        }
    }
}

/// Central layout: a directory line (outside the central file) that no unit says is drift;
/// the lines the central file repeats are the policy's own.
fn unowned_lines(
    policy: &Policy,
    plan: &Plan,
    rules: &Rules,
    base: &Base,
    program: &str,
    diags: &mut Vec<(Diagnostic, bool)>,
) {
    let owned: BTreeSet<_> = policy
        .units
        .iter()
        .flat_map(|u| {
            u.settings
                .keys()
                .filter_map(|id| crate::emit::inplace::unit_key(u, *id, rules))
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        })
        .collect();
    for (dir, file) in &plan.files {
        let Some(before) = plan.before.get(dir) else { continue };
        let parsed = crate::makefile::parse(before);
        let lines = LineIndex::new(before);
        for (i, d) in parsed.directives() {
            let a = &parsed.assignments[i];
            let Some((key, _)) = existing_key(a, d, rules) else { continue };
            if owned.contains(&key) {
                continue;
            }
            let path = path_of(dir, d.object.as_deref());
            let hint = if base.known && base.has(&path, d.mech) {
                format!("the policy dropped this unit, and the central file no longer sets it: drop the line too, or run `{program} sync` to keep it")
            } else {
                format!("run `{program} sync` to take it into the policy (the central file then repeats it)")
            };
            let text = before[a.bytes.clone()].trim_end().to_string();
            diags.push((
                Diagnostic::error(Code::UnmanagedDirective, format!("`{text}` is in the tree but not in the policy"))
                    .at(lines.line(&file.path, before, a.line))
                    .hint(hint),
                false,
            ));
        }
    }
}
