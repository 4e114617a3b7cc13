//! `--adopt`: rewrite each kbuild file whose directives were imported. The imported lines (and
//! the comments that became their reasons, and conditionals left empty) are removed, and the
//! generated block goes where the first of them stood.

use std::collections::BTreeSet;

use super::Taken;
use crate::emit;
use crate::kbuild::Rules;
use crate::output::Change;
use crate::policy::Policy;

/// The changes that adopt `policy` (as parsed back from the imported text) in each file.
pub fn adopt(taken: &[Taken], policy: &Policy, rules: &Rules, tree: &std::path::Path) -> Vec<Change> {
    let by_dir = policy.units_by_dir();
    taken
        .iter()
        .map(|t| {
            let units = by_dir.get(t.dir.as_str()).map_or(&[][..], Vec::as_slice);
            let block = emit::render_block(units, rules);
            let new = rewrite(t, &block);
            let display = t.path.strip_prefix(tree).unwrap_or(&t.path).display().to_string();
            Change { path: t.path.clone(), display, old: Some(t.text.clone()), new: Some(new) }
        })
        .collect()
}

fn first_word(line: &str) -> &str {
    line.split(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("")
}

/// Lines (1-based) to drop: the directives, comments only they used, then empty conditionals;
/// and where the new block goes. A generated block already in the file (read back as units by
/// the scan, e.g. after a killed run) is dropped whole and the new one takes its place, so a
/// rerun on an adopted file rewrites it to the same bytes.
fn removed_lines(t: &Taken, lines: &[&str]) -> (BTreeSet<usize>, usize) {
    let mut removed = BTreeSet::new();
    let taken: BTreeSet<usize> = t.assignments.iter().copied().collect();
    let mut anchor = usize::MAX;
    if let Some(block) = &t.parsed.block {
        removed.extend(block.begin_line..=block.end_line);
        anchor = block.begin_line;
    }
    for &i in &t.assignments {
        let a = &t.parsed.assignments[i];
        if a.in_block {
            continue;
        }
        removed.extend(a.line..=a.end_line);
        let mut at = a.frames.first().map_or(a.line, |f| f.line);
        if let Some(start) = a.comment_line {
            let shared = t.parsed.assignments.iter().enumerate().filter(|(_, b)| b.comment_line == Some(start));
            if shared.clone().all(|(j, _)| taken.contains(&j)) {
                let mut line = start;
                while line <= lines.len() && lines[line - 1].trim_start().starts_with('#') {
                    removed.insert(line);
                    line += 1;
                }
                at = at.min(start);
            }
        }
        anchor = anchor.min(at);
    }
    remove_empty_conditionals(lines, &mut removed);
    (removed, anchor.max(below_dead_lines(t, lines)))
}

/// The first line the block may stand on so that it follows every line it makes dead (a line
/// the scan left in the tree because a taken line sets its variable again, `set-twice`): above
/// them, the tree's line would become the one make reads. Past the `endif` of a conditional
/// holding such a line.
fn below_dead_lines(t: &Taken, lines: &[&str]) -> usize {
    let taken: BTreeSet<&str> = t.assignments.iter().map(|&i| t.parsed.assignments[i].name.as_str()).collect();
    let dead = t.parsed.assignments.iter().enumerate().filter(|(i, a)| {
        !t.assignments.contains(i)
            && taken.contains(a.name.as_str())
            && crate::makefile::overridden_by(&t.parsed, a).is_some()
    });
    dead.map(|(_, a)| match a.frames.first() {
        Some(f) => endif_of(lines, f.line) + 1,
        None => a.end_line + 1,
    })
    .max()
    .unwrap_or(0)
}

/// The 1-based line of the `endif` closing the conditional opened at `open`.
fn endif_of(lines: &[&str], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, line) in lines.iter().enumerate().skip(open - 1) {
        match first_word(line.trim()) {
            "ifdef" | "ifndef" | "ifeq" | "ifneq" => depth += 1,
            "endif" => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    lines.len()
}

fn remove_empty_conditionals(lines: &[&str], removed: &mut BTreeSet<usize>) {
    let mut stack: Vec<(usize, bool)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        match first_word(line.trim()) {
            "ifdef" | "ifndef" | "ifeq" | "ifneq" => stack.push((n, false)),
            "else" => {
                if let Some(top) = stack.last_mut() {
                    top.1 = true;
                }
            }
            "endif" => {
                let Some((start, has_else)) = stack.pop() else { continue };
                let empty = !has_else && (start + 1..n).all(|k| removed.contains(&k) || lines[k - 1].trim().is_empty());
                if empty && (start + 1..n).any(|k| removed.contains(&k)) {
                    removed.extend(start..=n);
                }
            }
            _ => {}
        }
    }
}

fn rewrite(t: &Taken, block: &str) -> String {
    let lines: Vec<&str> = t.text.split_inclusive('\n').collect();
    let (removed, anchor) = removed_lines(t, &lines);
    let mut out = String::with_capacity(t.text.len() + block.len());
    let mut after_removal = false;
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        if n == anchor {
            if !out.is_empty() && !out.ends_with("\n\n") {
                out.push('\n');
            }
            out.push_str(block);
            after_removal = true;
        }
        if removed.contains(&n) {
            after_removal = true;
            continue;
        }
        let blank = line.trim().is_empty();
        if blank && after_removal && (out.is_empty() || out.ends_with("\n\n")) {
            continue;
        }
        if !blank && after_removal && out.ends_with(block) {
            out.push('\n');
        }
        after_removal = after_removal && blank;
        out.push_str(line);
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    if anchor > lines.len() {
        // After the file's last line (it makes the last line dead): the block ends the file.
        if !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(block);
    }
    out
}
