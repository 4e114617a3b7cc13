//! The in-place layout: each directive is an ordinary line of its directory's kbuild file, where
//! the tree keeps it. Reconciling a file with the policy's units changes only what differs:
//! a line that already says what a unit says is left byte for byte; a changed value is edited in
//! place; a line no unit wants is removed with a comment that headed only it (and a conditional
//! left empty); a new unit becomes one line placed with the lines it belongs to, in the style of
//! its neighbours.
//!
//! Lines are matched by what they mean, not by their text: mechanism, object (as Kbuild names
//! it) and the conditions they are active under (an `else` branch is the negated test).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{block::comment_lines, unit_line, LineParts};
use crate::kbuild::Rules;
use crate::makefile::{unmodelled, Assignment, Condition, Directive, DirectiveValue, KbuildFile, Op};
use crate::mechanism::{Form, MechId};
use crate::policy::{Setting, Unit};

/// What a directive line means: mechanism, the per-file object name Kbuild reads (`None` for the
/// directory) and the conditions it is active under, in canonical spelling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineKey {
    pub mech: MechId,
    pub stem: Option<String>,
    pub when: Vec<String>,
}

/// What a line sets: skip or force, and the exact value (`n`, `-pg`, `$(CC_FLAGS_FTRACE)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineValue {
    pub setting: Setting,
    /// Blank-separated words, single-spaced.
    pub value: String,
}

/// One change the reconciliation makes, for drift reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// A unit's line is missing: it is added (1-based line of the new text).
    Added { unit: usize, mech: MechId, line: usize, text: String },
    /// A line no unit wants (1-based line of the old text).
    Removed { line: usize, text: String },
    /// A line whose value differs from its unit's.
    Changed { line: usize, old: String, new: String },
}

/// A file reconciled with its units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    pub text: String,
    pub edits: Vec<Edit>,
}

/// The key of a modelled directive line of the file, or `None` for lines units do not own.
pub fn existing_key(a: &Assignment, d: &Directive, rules: &Rules) -> Option<(LineKey, LineValue)> {
    if a.in_block || unmodelled(a, d).is_some() {
        return None;
    }
    let DirectiveValue::Plain(setting) = d.value else { return None };
    let stem = d.object.as_deref().map(|o| rules.naming(d.mech).stem(o));
    let value = a.value.split_whitespace().collect::<Vec<_>>().join(" ");
    Some((LineKey { mech: d.mech, stem, when: a.when() }, LineValue { setting, value }))
}

/// The key and value of a unit's line for `id`.
pub fn unit_key(unit: &Unit, id: MechId, rules: &Rules) -> Option<(LineKey, LineValue)> {
    let setting = *unit.settings.get(&id)?;
    let value = unit.value(id)?.split_whitespace().collect::<Vec<_>>().join(" ");
    let stem = unit.path.object.as_deref().map(|o| rules.naming(id).stem(o));
    Some((LineKey { mech: id, stem, when: canonical_when(&unit.when) }, LineValue { setting, value }))
}

/// A unit's `when` in the spelling lines are matched in.
pub fn canonical_when(when: &[String]) -> Vec<String> {
    when.iter().map(|c| Condition::parse(c).map(|c| c.canonical().text).unwrap_or_else(|_| c.clone())).collect()
}

/// One insertion or removal on the old text, applied back to front.
struct Splice {
    range: std::ops::Range<usize>,
    text: String,
    /// Policy order among insertions at one place.
    order: usize,
}

/// Reconcile `text` (parsed as `file`) with `units`, the units of this directory (indices are
/// positions in `units`).
pub fn reconcile(text: &str, file: &KbuildFile, units: &[&Unit], rules: &Rules) -> Reconciled {
    let mut existing: BTreeMap<LineKey, Vec<(usize, LineValue)>> = BTreeMap::new();
    for (i, d) in file.directives() {
        if let Some((key, value)) = existing_key(&file.assignments[i], d, rules) {
            existing.entry(key).or_default().push((i, value));
        }
    }
    let mut wanted: Vec<(LineKey, LineValue, usize, MechId)> = Vec::new();
    for (u, unit) in units.iter().enumerate() {
        for id in unit.settings.keys() {
            if let Some((key, value)) = unit_key(unit, *id, rules) {
                wanted.push((key, value, u, *id));
            }
        }
    }
    let mut splices = Vec::new();
    let mut edits = Vec::new();
    let mut removed: Vec<usize> = Vec::new();
    let mut inserts = Vec::new();
    for (key, value, u, id) in &wanted {
        match existing.remove(key) {
            // The last assignment decides: when it already says it, every line stays.
            Some(found) => {
                let (last, last_value) = found.last().expect("non-empty");
                if last_value != value {
                    let a = &file.assignments[*last];
                    let new = changed_line(text, a, units[*u], *id, rules);
                    edits.push(Edit::Changed {
                        line: a.line,
                        old: line_text(text, a),
                        new: new.trim_end().to_string(),
                    });
                    splices.push(Splice { range: a.bytes.clone(), text: new, order: 0 });
                }
            }
            None => inserts.push((key.clone(), *u, *id)),
        }
    }
    for found in existing.into_values() {
        removed.extend(found.into_iter().map(|(i, _)| i));
    }
    removed.sort_unstable();
    if removed.is_empty() && inserts.is_empty() {
        // Only changed values (or nothing, as in every up-to-date `--check`): no line moves,
        // so the file's index of neighbours is not needed.
        return Reconciled { text: apply(text, splices), edits };
    }
    for &i in &removed {
        let a = &file.assignments[i];
        edits.push(Edit::Removed { line: a.line, text: line_text(text, a) });
    }
    let gone: HashSet<usize> = removed.iter().copied().collect();
    let index = Index::new(file, rules, &gone);
    let lines = LineStarts::new(text);
    splices.extend(removals(text, file, &index, &lines, &removed, &gone));
    for (order, (key, u, id)) in inserts.into_iter().enumerate() {
        if let Some(s) = insertion(text, file, &index, &key, units[u], id, rules, order) {
            splices.push(s);
            edits.push(Edit::Added { unit: u, mech: id, line: 0, text: String::new() });
        }
    }
    let new = apply(text, splices);
    locate_added(&new, &mut edits, units, rules);
    Reconciled { text: new, edits }
}

/// Fill in where each added line landed in the new text.
fn locate_added(new: &str, edits: &mut [Edit], units: &[&Unit], rules: &Rules) {
    if !edits.iter().any(|e| matches!(e, Edit::Added { .. })) {
        return;
    }
    let parsed = crate::makefile::parse(new);
    // The first line of the new text with each meaning and value.
    let mut first: HashMap<LineKey, Vec<(LineValue, usize)>> = HashMap::new();
    for (i, d) in parsed.directives() {
        if let Some((k, v)) = existing_key(&parsed.assignments[i], d, rules) {
            let seen = first.entry(k).or_default();
            if !seen.iter().any(|(w, _)| *w == v) {
                seen.push((v, i));
            }
        }
    }
    for e in edits.iter_mut() {
        if let Edit::Added { unit, mech, line, text } = e {
            let Some((key, value)) = unit_key(units[*unit], *mech, rules) else { continue };
            let found = first.get(&key).and_then(|seen| seen.iter().find(|(v, _)| *v == value)).map(|(_, i)| *i);
            if let Some(i) = found {
                *line = parsed.assignments[i].line;
                *text = line_text(new, &parsed.assignments[i]);
            }
        }
    }
}

fn line_text(text: &str, a: &Assignment) -> String {
    text[a.bytes.clone()].trim_end_matches('\n').to_string()
}

fn apply(text: &str, mut splices: Vec<Splice>) -> String {
    splices.sort_by_key(|s| (s.range.start, s.range.end, s.order));
    let mut out = String::with_capacity(text.len() + 256);
    let mut at = 0;
    for s in splices {
        if s.range.start < at {
            // Overlapping removals (a comment shared by removed lines): already gone.
            at = at.max(s.range.end);
            out.push_str(&s.text);
            continue;
        }
        out.push_str(&text[at..s.range.start]);
        out.push_str(&s.text);
        at = s.range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Byte offset of each 1-based line's start.
struct LineStarts(Vec<usize>);

impl LineStarts {
    fn new(text: &str) -> LineStarts {
        let mut starts = vec![0, 0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineStarts(starts)
    }

    fn start(&self, line: usize) -> usize {
        self.0.get(line).copied().unwrap_or_else(|| *self.0.last().unwrap_or(&0))
    }
}

/// The splices that remove `removed` lines, the comment paragraphs that headed only removed
/// lines, conditionals left empty, and a blank line the removal would double.
fn removals(
    text: &str,
    file: &KbuildFile,
    index: &Index,
    lines: &LineStarts,
    removed: &[usize],
    gone: &HashSet<usize>,
) -> Vec<Splice> {
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    for &i in removed {
        let a = &file.assignments[i];
        let mut start = a.bytes.start;
        if let Some(c) = a.comment_line {
            let run = index.by_comment.get(&c).map_or(&[][..], Vec::as_slice);
            if run.iter().all(|j| gone.contains(j)) && run.first() == Some(&i) {
                start = lines.start(c);
            }
        }
        ranges.push(start..a.bytes.end);
    }
    // A conditional whose every line goes, goes too.
    for b in &file.branches {
        let single = !file.branches.iter().any(|o| o.close_line == b.open_line || o.open_line == b.close_line);
        if !single {
            continue;
        }
        let body = b.body_byte..b.close_byte;
        // A removal ending in the body; it starts above the `if…` line when the comment
        // paragraph it takes heads the conditional.
        let inside = |r: &std::ops::Range<usize>| r.end > body.start && r.end <= body.end;
        let mut rest = text[body.clone()].to_string();
        for r in ranges.iter().filter(|r| inside(r)).rev() {
            rest.replace_range(r.start.max(body.start) - body.start..r.end - body.start, "");
        }
        let touched = ranges.iter().any(inside);
        if touched && rest.trim().is_empty() {
            let end = text[b.close_byte..].find('\n').map_or(text.len(), |n| b.close_byte + n + 1);
            let open = lines.start(b.open_line);
            let start = ranges.iter().filter(|r| inside(r)).map(|r| r.start).fold(open, usize::min);
            ranges.retain(|r| !inside(r));
            ranges.push(start..end);
        }
    }
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<std::ops::Range<usize>> = Vec::new();
    for r in ranges {
        match merged.last_mut() {
            Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
            _ => merged.push(r),
        }
    }
    for r in &mut merged {
        // Between two blank lines (or a blank line and the end), drop the second blank.
        let before_blank = r.start == 0 || text[..r.start].ends_with("\n\n");
        if before_blank && text[r.end..].starts_with('\n') {
            r.end += 1;
        } else if before_blank && r.end == text.len() && r.start > 0 {
            r.start -= 1;
        }
    }
    merged.into_iter().map(|range| Splice { range, text: String::new(), order: 0 }).collect()
}

/// How a neighbouring directive line is written.
#[derive(Debug, Clone)]
struct Style {
    indent: String,
    /// Blanks between the name and the operator, and the column they reach (tabs at 8).
    gap: String,
    column: usize,
    op: Option<Op>,
    after_op: String,
}

impl Style {
    fn plain(indent: &str) -> Style {
        Style { indent: indent.to_string(), gap: " ".into(), column: 0, op: None, after_op: " ".into() }
    }

    fn of(text: &str, a: &Assignment) -> Style {
        let line = &text[a.bytes.clone()];
        let name_end = a.indent.len() + a.name.len();
        let rest = &line[name_end.min(line.len())..];
        let gap_len = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        let gap = rest[..gap_len].to_string();
        let op_start = name_end + gap_len;
        let value_at = a.value_start.saturating_sub(a.bytes.start);
        let after_op = line.get(op_start + a.op.as_str().len()..value_at).unwrap_or(" ").to_string();
        Style { indent: a.indent.clone(), column: width(&line[..op_start]), gap, op: Some(a.op), after_op }
    }

    /// The line for `parts` in this style: alignment kept where the neighbour aligns.
    fn render(&self, parts: &LineParts, op: &str) -> String {
        let head = format!("{}{}", self.indent, parts.name);
        let gap = if self.gap.contains('\t') {
            let mut col = width(&head);
            let mut tabs = String::new();
            while col < self.column || tabs.is_empty() {
                col = (col / 8 + 1) * 8;
                tabs.push('\t');
            }
            tabs
        } else if self.gap.len() > 1 {
            " ".repeat(self.column.saturating_sub(width(&head)).max(1))
        } else {
            self.gap.clone()
        };
        let after = if self.after_op.is_empty() && parts.value.is_empty() { "" } else { self.after_op.as_str() };
        format!("{head}{gap}{op}{after}{}\n", parts.value)
    }
}

/// Display width with tabs to multiples of 8.
fn width(s: &str) -> usize {
    s.chars().fold(0, |col, c| if c == '\t' { (col / 8 + 1) * 8 } else { col + 1 })
}

/// The operator a new line uses: its neighbour's where that means the same; `+=` for a flag
/// variable that another line of the file also assigns (so neither clobbers the other).
fn operator(index: &Index, parts: &LineParts, id: MechId, style: &Style) -> &'static str {
    let variable = matches!(id.get().form, Form::Variable { .. });
    let assigned_elsewhere = index.names.contains(&parts.name);
    match (variable, style.op) {
        (false, _) if assigned_elsewhere => "+=",
        (true, Some(Op::Simple)) | (true, None) => ":=",
        (true, Some(Op::Recursive)) => "=",
        (true, _) => ":=",
        (false, Some(op @ (Op::Simple | Op::Recursive | Op::Append))) => op.as_str(),
        (false, _) => "=",
    }
}

/// A changed value, written over the old line: the value for a variable, the whole line (in the
/// line's own style) when a flag line turns from removal into addition.
fn changed_line(text: &str, a: &Assignment, unit: &Unit, id: MechId, rules: &Rules) -> String {
    let Some(parts) = unit_line(unit, id, rules.naming(id)) else { return text[a.bytes.clone()].to_string() };
    if parts.name == a.name && !a.continued {
        let line = &text[a.bytes.clone()];
        let value_at = a.value_start - a.bytes.start;
        let value_end = value_at + a.value.len();
        return format!("{}{}{}", &line[..value_at], parts.value, &line[value_end.min(line.len())..]);
    }
    Style::of(text, a).render(&parts, a.op.as_str())
}

/// What placing new lines asks of the old file, computed once per file so that reconciling
/// a file with many units stays linear (each question was a scan of the file per new line).
struct Index {
    /// The last surviving modelled line per (object stem, conditions).
    by_object: HashMap<(Option<String>, Vec<String>), usize>,
    /// The last surviving modelled line per (mechanism, conditions, per-object or not).
    by_mech: HashMap<(MechId, Vec<String>, bool), usize>,
    /// The mechanism of each directive line, by assignment index.
    mech_of: HashMap<usize, MechId>,
    /// The list lines (`obj-y`, `lib-y`, `foo-objs`, …) naming each object, in file order.
    listed: HashMap<String, Vec<usize>>,
    /// Every variable the file assigns.
    names: HashSet<String>,
    /// Where each directive line starts.
    directive_starts: HashSet<usize>,
    /// The assignments under each comment paragraph (by its first line).
    by_comment: HashMap<usize, Vec<usize>>,
}

impl Index {
    fn new(file: &KbuildFile, rules: &Rules, removed: &HashSet<usize>) -> Index {
        let mut index = Index {
            by_object: HashMap::new(),
            by_mech: HashMap::new(),
            mech_of: HashMap::new(),
            listed: HashMap::new(),
            names: file.assignments.iter().map(|a| a.name.clone()).collect(),
            directive_starts: HashSet::new(),
            by_comment: HashMap::new(),
        };
        for (i, d) in file.directives() {
            index.mech_of.insert(i, d.mech);
            index.directive_starts.insert(file.assignments[i].bytes.start);
            if removed.contains(&i) {
                continue;
            }
            if let Some((k, _)) = existing_key(&file.assignments[i], d, rules) {
                index.by_mech.insert((k.mech, k.when.clone(), k.stem.is_some()), i);
                index.by_object.insert((k.stem, k.when), i);
            }
        }
        for (i, a) in file.assignments.iter().enumerate() {
            if let Some(c) = a.comment_line {
                index.by_comment.entry(c).or_default().push(i);
            }
            let list = a.name.starts_with("obj-")
                || a.name.starts_with("lib-")
                || a.name.ends_with("-y")
                || a.name.ends_with("-objs");
            if list {
                for w in a.value.split_whitespace() {
                    let at = index.listed.entry(w.to_string()).or_default();
                    if at.last() != Some(&i) {
                        at.push(i);
                    }
                }
            }
        }
        index
    }
}

/// Where and how a new unit line goes (see the module documentation for the order).
#[allow(clippy::too_many_arguments)]
fn insertion(
    text: &str,
    file: &KbuildFile,
    index: &Index,
    key: &LineKey,
    unit: &Unit,
    id: MechId,
    rules: &Rules,
    order: usize,
) -> Option<Splice> {
    let parts = unit_line(unit, id, rules.naming(id))?;
    // 1. Next to the other lines of the same object under the same conditions: the unit's own.
    if let Some(i) = index.by_object.get(&(key.stem.clone(), key.when.clone())) {
        let a = &file.assignments[*i];
        return Some(after_line(text, index, a, &parts, id, None, order));
    }
    // 2. At the end of the last run of the same mechanism's lines under the same conditions.
    if let Some(i) = index.by_mech.get(&(key.mech, key.when.clone(), key.stem.is_some())) {
        let mut last = *i;
        while let Some(next) = file.assignments.get(last + 1) {
            let same_run = index.mech_of.get(&(last + 1)) == Some(&key.mech)
                && next.line == file.assignments[last].end_line + 1
                && next.when() == key.when;
            if !same_run {
                break;
            }
            last += 1;
        }
        let a = &file.assignments[last];
        return Some(after_line(text, index, a, &parts, id, Some(&unit.why), order));
    }
    // 3. After the object's `obj-` line, when that line is active under a prefix of the conditions.
    if let Some(object) = unit.path.object.as_deref() {
        let candidates = index.listed.get(object).map_or(&[][..], Vec::as_slice);
        let listed = candidates.iter().rev().map(|i| &file.assignments[*i]).find(|a| key.when.starts_with(&a.when()));
        if let Some(a) = listed {
            let wrap = &key.when[a.when().len()..];
            let mut s = new_lines(index, &Style::plain(&a.indent), &parts, id, unit, wrap, true);
            if !text[a.bytes.end..].starts_with('\n') && !text[a.bytes.end..].is_empty() {
                s.push('\n');
            }
            return Some(Splice { range: a.bytes.end..a.bytes.end, text: s, order });
        }
    }
    // 4. At the end of the conditional branch that matches most of the conditions.
    let branch = file
        .branches
        .iter()
        .filter(|b| !b.when.is_empty() && key.when.starts_with(&b.when))
        .max_by_key(|b| (b.when.len(), b.close_line));
    if let Some(b) = branch {
        let wrap = &key.when[b.when.len()..];
        let lead = !text[..b.close_byte].ends_with("\n\n")
            && !text[..b.close_byte].ends_with(&format!("{}\n", cond_line_of(text, b.open_line)));
        let s = new_lines(index, &Style::plain(&b.indent), &parts, id, unit, wrap, lead);
        return Some(Splice { range: b.close_byte..b.close_byte, text: s, order });
    }
    // 5. At the end of the file.
    let mut s = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        s.push('\n');
    }
    s.push_str(&new_lines(index, &Style::plain(""), &parts, id, unit, &key.when, !text.is_empty()));
    Some(Splice { range: text.len()..text.len(), text: s, order })
}

fn cond_line_of(text: &str, line: usize) -> &str {
    text.lines().nth(line.saturating_sub(1)).unwrap_or("")
}

/// A new line right after the directive line `a`, in its style. A reason comment goes above it
/// unless it joins `a`'s unit (`why` is `None`) or a run that already shares that comment.
#[allow(clippy::too_many_arguments)]
fn after_line(
    text: &str,
    index: &Index,
    a: &Assignment,
    parts: &LineParts,
    id: MechId,
    why: Option<&str>,
    order: usize,
) -> Splice {
    let style = Style::of(text, a);
    let op = operator(index, parts, id, &style);
    let line = style.render(parts, op);
    let shares = why.is_none_or(|w| a.comment.as_deref().map(str::trim) == Some(w.trim()));
    let mut s = String::new();
    if !shares {
        s.push('\n');
        comment_lines(&mut s, why.unwrap_or_default());
        s.push_str(&line);
        // A directive right below would read the new comment as its own reason.
        if index.directive_starts.contains(&a.bytes.end) {
            s.push('\n');
        }
    } else {
        s.push_str(&line);
    }
    Splice { range: a.bytes.end..a.bytes.end, text: s, order }
}

/// A new line with its reason comment, wrapped in the conditions `wrap` (outermost first).
#[allow(clippy::too_many_arguments)]
fn new_lines(
    index: &Index,
    style: &Style,
    parts: &LineParts,
    id: MechId,
    unit: &Unit,
    wrap: &[String],
    lead_blank: bool,
) -> String {
    let mut s = String::new();
    if lead_blank {
        s.push('\n');
    }
    let mut comment = String::new();
    comment_lines(&mut comment, &unit.why);
    for link in &unit.links {
        comment_lines(&mut comment, &format!("see: {link}"));
    }
    for c in comment.lines() {
        s.push_str(&style.indent);
        s.push_str(c);
        s.push('\n');
    }
    for c in wrap {
        s.push_str(&style.indent);
        s.push_str(c);
        s.push('\n');
    }
    s.push_str(&style.render(parts, operator(index, parts, id, style)));
    for _ in wrap {
        s.push_str(&style.indent);
        s.push_str("endif\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::parse_str;

    fn run(text: &str, policy: &str) -> Reconciled {
        let (p, d) = parse_str(std::path::Path::new("p.toml"), &format!("builtin-requirements = false\n{policy}"));
        assert!(!d.has_errors(), "{d:?}");
        let units: Vec<&Unit> = p.units.iter().collect();
        reconcile(text, &crate::makefile::parse(text), &units, &Rules::builtin())
    }

    const LOCKING: &str = "# SPDX-License-Identifier: GPL-2.0\n\nKCOV_INSTRUMENT\t\t:= n\n\nobj-y += mutex.o\n\n# Avoid recursion lockdep -> sanitizer -> ... -> lockdep.\nKCSAN_SANITIZE_lockdep.o := n\n\nifdef CONFIG_FUNCTION_TRACER\nCFLAGS_REMOVE_lockdep.o = $(CC_FLAGS_FTRACE)\nendif\n";

    const LOCKING_POLICY: &str = "[[unit]]\npath = \"k/\"\nskip = [\"kcov\"]\nwhy = \"x\"\n[[unit]]\npath = \"k/lockdep.o\"\nskip = [\"kcsan\"]\nwhy = \"y\"\n[[unit]]\npath = \"k/lockdep.o\"\nskip = [\"ftrace\"]\nwhen = \"ifdef  CONFIG_FUNCTION_TRACER\"\nwhy = \"z\"\n";

    #[test]
    fn a_file_that_says_what_the_policy_says_is_untouched() {
        let r = run(LOCKING, LOCKING_POLICY);
        assert_eq!(r.text, LOCKING);
        assert!(r.edits.is_empty());
    }

    #[test]
    fn a_new_skip_joins_its_objects_lines() {
        let policy = LOCKING_POLICY.replace("skip = [\"kcsan\"]", "skip = [\"kcsan\", \"kasan\"]");
        let r = run(LOCKING, &policy);
        let expected = LOCKING.replace(
            "KCSAN_SANITIZE_lockdep.o := n\n",
            "KCSAN_SANITIZE_lockdep.o := n\nKASAN_SANITIZE_lockdep.o := n\n",
        );
        assert_eq!(r.text, expected);
        assert!(matches!(&r.edits[..], [Edit::Added { line: 9, .. }]), "{:?}", r.edits);
    }

    /// A line whose comment paragraph stands above its conditional: the comment, the `if…`
    /// line, the line and the `endif` all go (the `endif` was once left behind, and make
    /// stops at an `extraneous 'endif'`).
    #[test]
    fn a_conditional_under_its_lines_comment_goes_whole() {
        let text = "obj-y += plain.o\n\n# One.\nifdef CONFIG_BAR\nKASAN_SANITIZE_plain.o := n\nendif\n";
        let policy =
            "[[unit]]\npath = \"k/plain.o\"\nskip = [\"kasan\"]\nwhen = \"ifdef CONFIG_FOO\"\nwhy = \"One.\"\n";
        let r = run(text, policy);
        let parsed = crate::makefile::parse(&r.text);
        assert_eq!(r.text.matches("endif").count(), r.text.matches("ifdef").count(), "{}", r.text);
        assert!(!r.text.contains("CONFIG_BAR") && r.text.contains("ifdef CONFIG_FOO\n"), "{}", r.text);
        assert_eq!(parsed.assignments.iter().filter(|a| a.name == "KASAN_SANITIZE_plain.o").count(), 1, "{}", r.text);
    }

    #[test]
    fn dropping_a_unit_drops_its_line_its_comment_and_an_empty_conditional() {
        let policy = "[[unit]]\npath = \"k/\"\nskip = [\"kcov\"]\nwhy = \"x\"\n";
        let r = run(LOCKING, policy);
        assert_eq!(r.text, "# SPDX-License-Identifier: GPL-2.0\n\nKCOV_INSTRUMENT\t\t:= n\n\nobj-y += mutex.o\n\n");
    }

    #[test]
    fn skip_to_force_edits_the_value_in_place() {
        let policy = LOCKING_POLICY.replace("path = \"k/\"\nskip", "path = \"k/\"\nforce");
        let r = run(LOCKING, &policy);
        assert_eq!(r.text, LOCKING.replace("KCOV_INSTRUMENT\t\t:= n", "KCOV_INSTRUMENT\t\t:= y"));
    }

    #[test]
    fn alignment_and_else_branches() {
        let text = "KASAN_SANITIZE_head$(BITS).o\t\t\t\t:= n\nKASAN_SANITIZE_dumpstack.o\t\t\t\t:= n\n\nifeq ($(CONFIG_A),y)\nCFLAGS_REMOVE_a.o = -pg\nelse\nCFLAGS_REMOVE_b.o = -pg\nendif\n";
        let policy = "[[unit]]\npath = \"k/head$(BITS).o\"\nvars = { BITS = [\"64\"] }\nskip = [\"kasan\"]\nwhy = \"w\"\n[[unit]]\npath = \"k/dumpstack.o\"\nskip = [\"kasan\"]\nwhy = \"w\"\n[[unit]]\npath = \"k/x.o\"\nskip = [\"kasan\"]\nwhy = \"w\"\n[[unit]]\npath = \"k/a.o\"\nskip = [\"ftrace\"]\nflags = { ftrace = \"-pg\" }\nwhen = \"ifeq ($(CONFIG_A),y)\"\nwhy = \"w\"\n[[unit]]\npath = \"k/b.o\"\nskip = [\"ftrace\"]\nflags = { ftrace = \"-pg\" }\nwhen = \"ifneq ($(CONFIG_A),y)\"\nwhy = \"w\"\n[[unit]]\npath = \"k/c.o\"\nskip = [\"ftrace\"]\nflags = { ftrace = \"-pg\" }\nwhen = \"ifneq ($(CONFIG_A), y)\"\nwhy = \"w\"\n";
        let r = run(text, policy);
        assert_eq!(
            r.text,
            "KASAN_SANITIZE_head$(BITS).o\t\t\t\t:= n\nKASAN_SANITIZE_dumpstack.o\t\t\t\t:= n\n\n# w\nKASAN_SANITIZE_x.o\t\t\t\t\t:= n\n\nifeq ($(CONFIG_A),y)\nCFLAGS_REMOVE_a.o = -pg\nelse\nCFLAGS_REMOVE_b.o = -pg\n\n# w\nCFLAGS_REMOVE_c.o = -pg\nendif\n"
        );
    }
}
