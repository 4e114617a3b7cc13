//! The in-place layout: each directive is an ordinary line of its directory's kbuild file, where
//! the tree keeps it. Reconciling a file with the policy's units changes only what differs:
//! a line that already says what a unit says is left byte for byte; a changed value is edited in
//! place; a line no unit wants is removed with a comment that headed only it (and a conditional
//! left empty); a new unit becomes one line placed by the rule of the book
//! (`docs/src/guide/edits.md`, "Where a new line goes", [`insertion`]), in the style of its
//! neighbours, its reason as a comment above.
//!
//! Lines are matched by what they mean, not by their text: mechanism, object (as Kbuild names
//! it) and the conditions they are active under (an `else` branch is the negated test).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{block::comment_lines, unit_line, LineParts};
use crate::kbuild::Rules;
use crate::makefile::{Assignment, CondKey, Condition, Directive, DirectiveValue, KbuildFile, Op};
use crate::mechanism::{Form, MechId};
use crate::policy::{Setting, Unit};

/// What a directive line means: mechanism, the per-file object name Kbuild reads (`None` for the
/// directory) and the conditions it is active under. Keys are equal by mechanism, stem and the
/// conditions' keys ([`crate::makefile::CondKey`]): one condition spelled two ways is one key.
/// `when` is the conditions' canonical spelling, for writing and placing lines.
#[derive(Debug, Clone)]
pub struct LineKey {
    pub mech: MechId,
    pub stem: Option<String>,
    pub when: Vec<String>,
    pub conds: Vec<CondKey>,
}

impl LineKey {
    fn identity(&self) -> (MechId, &Option<String>, &[CondKey]) {
        (self.mech, &self.stem, &self.conds)
    }
}

impl PartialEq for LineKey {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for LineKey {}

impl std::hash::Hash for LineKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl PartialOrd for LineKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LineKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
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

/// The key of a directive line `a` of `file` that a policy can hold, or `None` for lines units
/// do not own (see [`crate::policy::holdable`]: those stay as they are).
pub fn existing_key(file: &KbuildFile, a: &Assignment, d: &Directive, rules: &Rules) -> Option<(LineKey, LineValue)> {
    if crate::makefile::overridden_by(file, a).is_some() {
        return None;
    }
    line_key(file, a, d, rules)
}

/// [`existing_key`] of a line make may never read (see [`crate::policy::holdable_line`]).
pub fn line_key(file: &KbuildFile, a: &Assignment, d: &Directive, rules: &Rules) -> Option<(LineKey, LineValue)> {
    if a.in_block || crate::policy::holdable_line(file, a, d).is_err() {
        return None;
    }
    let DirectiveValue::Plain(setting) = d.value else { return None };
    let stem = d.object.as_deref().map(|o| rules.naming(d.mech).stem(o));
    let value = a.value.split_whitespace().collect::<Vec<_>>().join(" ");
    Some((LineKey { mech: d.mech, stem, when: a.when(), conds: a.when_keys() }, LineValue { setting, value }))
}

/// The key and value of a unit's line for `id`.
pub fn unit_key(unit: &Unit, id: MechId, rules: &Rules) -> Option<(LineKey, LineValue)> {
    let setting = *unit.settings.get(&id)?;
    let value = unit.value(id)?.split_whitespace().collect::<Vec<_>>().join(" ");
    let stem = unit.path.object.as_deref().map(|o| rules.naming(id).stem(o));
    let (when, conds) = (canonical_when(&unit.when), unit.conditions.clone());
    Some((LineKey { mech: id, stem, when, conds }, LineValue { setting, value }))
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
        if let Some((key, value)) = existing_key(file, &file.assignments[i], d, rules) {
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
    let index = Index::new(text, file, rules, &gone);
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
        if let Some((k, v)) = existing_key(&parsed, &parsed.assignments[i], d, rules) {
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
        // Paragraphs inserted at one place are set off by one blank line, not two.
        let body = if out.ends_with("\n\n") { s.text.strip_prefix('\n').unwrap_or(&s.text) } else { &s.text };
        out.push_str(body);
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
    // A conditional whose every line goes, goes too: an `if…`/`endif`, or an `if…`/`else`/
    // `endif` chain whose every branch is left empty (one `else` alone is kept: it is valid).
    for chain in chains(&file.branches) {
        let (first, last) = (chain[0], chain[chain.len() - 1]);
        let open = lines.start(first.open_line);
        // A removal ending in a body; it starts above the `if…` line when the comment
        // paragraph it takes heads the conditional.
        let inside = |r: &std::ops::Range<usize>| chain.iter().any(|b| r.end > b.body_byte && r.end <= b.close_byte);
        let empty = chain.iter().all(|b| {
            let body = b.body_byte..b.close_byte;
            let mut rest = text[body.clone()].to_string();
            for r in ranges.iter().filter(|r| r.end > body.start && r.end <= body.end).rev() {
                rest.replace_range(r.start.max(body.start) - body.start..r.end - body.start, "");
            }
            rest.trim().is_empty()
        });
        if ranges.iter().any(inside) && empty {
            let end = text[last.close_byte..].find('\n').map_or(text.len(), |n| last.close_byte + n + 1);
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

/// The conditionals of a file, each as its branches in order (`if…` then each `else`), for
/// those not nested in another's body with a line of their own between.
fn chains(branches: &[crate::makefile::Branch]) -> Vec<Vec<&crate::makefile::Branch>> {
    let mut out = Vec::new();
    for b in branches.iter().filter(|b| !branches.iter().any(|o| o.close_line == b.open_line)) {
        let mut chain = vec![b];
        while let Some(next) = branches.iter().find(|o| o.open_line == chain[chain.len() - 1].close_line) {
            chain.push(next);
        }
        out.push(chain);
    }
    out
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
    /// The surviving modelled lines of each object stem (`None`: the directory's own lines), in
    /// file order.
    own: HashMap<Option<String>, Vec<usize>>,
    /// The runs of each mechanism's per-object lines, in file order.
    runs: HashMap<MechId, Vec<Run>>,
    /// Every variable the file assigns.
    names: HashSet<String>,
    /// Where each directive line starts.
    directive_starts: HashSet<usize>,
    /// The assignments under each comment paragraph (by its first line).
    by_comment: HashMap<usize, Vec<usize>>,
    /// The last line of the file's directive block at the top (rule 3), if it has one.
    top_block_end: Option<usize>,
    /// The 1-based line above which rule 4 inserts: the first `obj-`/`lib-` line, above its
    /// comment and the conditionals around it.
    first_list_line: Option<usize>,
}

/// Consecutive lines of one mechanism, each for one object, under the same conditions.
struct Run {
    /// Assignment index of the run's last line.
    last: usize,
    when: Vec<String>,
    /// The words of five letters or more of the comment directly above the run's first line.
    words: HashSet<String>,
}

/// A list line: `obj-…` or `lib-…`, which a new line never joins or splits.
fn is_list(a: &Assignment) -> bool {
    a.name.starts_with("obj-") || a.name.starts_with("lib-")
}

/// The words of five letters or more of `text`, lowercased: what a reason and a comment are
/// compared by.
pub fn long_words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() >= 5).map(str::to_lowercase).collect()
}

/// The comment paragraph that ends directly above `a`, if any (a paragraph shared by earlier
/// lines of the same block is not `a`'s own).
fn own_comment(a: &Assignment) -> Option<&str> {
    let (comment, first) = (a.comment.as_deref()?, a.comment_line?);
    (first + comment.split('\n').count() == a.line).then_some(comment)
}

impl Index {
    fn new(text: &str, file: &KbuildFile, rules: &Rules, removed: &HashSet<usize>) -> Index {
        let mut index = Index {
            own: HashMap::new(),
            runs: HashMap::new(),
            names: file.assignments.iter().map(|a| a.name.clone()).collect(),
            directive_starts: HashSet::new(),
            by_comment: HashMap::new(),
            top_block_end: None,
            first_list_line: None,
        };
        let first_list = file.assignments.iter().position(is_list);
        let mut top_directive = None;
        let mut open_run: Option<(MechId, usize)> = None;
        let lines: Vec<&str> = text.lines().collect();
        let stems: HashMap<usize, Option<String>> =
            file.directives().map(|(i, d)| (i, d.object.as_deref().map(|o| rules.naming(d.mech).stem(o)))).collect();
        for (i, d) in file.directives() {
            index.directive_starts.insert(file.assignments[i].bytes.start);
            if removed.contains(&i) {
                continue;
            }
            let a = &file.assignments[i];
            if a.frames.is_empty() && first_list.is_none_or(|f| i < f) {
                top_directive = Some(i);
            }
            let Some((k, _)) = existing_key(file, a, d, rules) else { continue };
            // A line right above another object's directive sits in a list: joining it would
            // split the list.
            let in_list = file.assignments.get(i + 1).is_some_and(|next| {
                let between = (a.end_line + 1..next.line)
                    .all(|l| lines.get(l - 1).is_some_and(|t| t.trim_start().starts_with('#')));
                between && stems.get(&(i + 1)).is_some_and(|stem| *stem != k.stem)
            });
            if !in_list {
                index.own.entry(k.stem.clone()).or_default().push(i);
            }
            if k.stem.is_none() {
                continue;
            }
            let runs = index.runs.entry(k.mech).or_default();
            let continues = open_run.is_some_and(|(m, last)| {
                m == k.mech && file.assignments[last].end_line + 1 == a.line && file.assignments[last].when() == k.when
            });
            match runs.last_mut() {
                Some(run) if continues => run.last = i,
                _ => {
                    runs.push(Run { last: i, when: k.when, words: own_comment(a).map(long_words).unwrap_or_default() })
                }
            }
            open_run = Some((k.mech, i));
        }
        // The top block ends where its paragraph does: at a blank line, a comment, a conditional
        // or a list line.
        if let Some(mut end) = top_directive {
            while let Some(next) = file.assignments.get(end + 1) {
                let adjoining = next.line == file.assignments[end].end_line + 1;
                if !adjoining
                    || !next.frames.is_empty()
                    || is_list(next)
                    || next.comment_line.is_some_and(|c| c > file.assignments[end].line)
                {
                    break;
                }
                end += 1;
            }
            index.top_block_end = Some(end);
        }
        if let Some(f) = first_list {
            let a = &file.assignments[f];
            let mut line = a.frames.first().map_or(a.line, |frame| frame.line);
            while line > 1 {
                let above = lines.get(line - 2).map_or("", |l| l.trim());
                if !above.starts_with('#') || above.contains("SPDX-License-Identifier") {
                    break;
                }
                line -= 1;
            }
            index.first_list_line = Some(line);
        }
        for (i, a) in file.assignments.iter().enumerate() {
            if let Some(c) = a.comment_line {
                index.by_comment.entry(c).or_default().push(i);
            }
        }
        index
    }

    /// The last surviving line of the object (`stem`) under exactly `when`, else under the
    /// longest prefix of `when`.
    fn own_line(&self, file: &KbuildFile, stem: &Option<String>, when: &[String]) -> Option<usize> {
        let lines = self.own.get(stem)?;
        lines
            .iter()
            .rev()
            .filter_map(|&i| {
                let w = file.assignments[i].when();
                when.starts_with(&w).then_some((w.len(), i))
            })
            .max_by_key(|&(len, i)| (len, i))
            .map(|(_, i)| i)
    }

    /// The run of `mech`'s per-object lines (under a prefix of `when`) whose comment shares the
    /// most long words with `why`; ties go to the first.
    fn best_run(&self, mech: MechId, when: &[String], why: &str) -> Option<&Run> {
        let wanted = long_words(why);
        let mut best: Option<(usize, &Run)> = None;
        for run in self.runs.get(&mech).map_or(&[][..], Vec::as_slice) {
            if !when.starts_with(&run.when) {
                continue;
            }
            let score = run.words.intersection(&wanted).count();
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, run));
            }
        }
        best.map(|(_, run)| run)
    }
}

/// Where and how a new unit line goes. The rule (the book, `docs/src/guide/edits.md`, "Where a new
/// line goes"): with its object's own lines; else after the run of the same mechanism's per-object
/// lines whose comment shares the most words of five letters or more with the unit's reason (ties:
/// the first run); else at the end of the file's directive block at the top; else above the file's
/// first `obj-`/`lib-` line (and its comment); never inside or between list lines. A conditional
/// unit goes the same way, wrapped in the conditions its place does not already hold.
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
    let new = NewLine { index, parts: &parts, id, unit };
    // 1. With the object's own lines (the directory's own, for a directory unit).
    if let Some(i) = index.own_line(file, &key.stem, &key.when) {
        let a = &file.assignments[i];
        let wrap = &key.when[a.when().len()..];
        let same_reason = wrap.is_empty() && a.comment.as_deref().is_some_and(|c| states(c, &unit.why));
        return Some(new.after(text, a, Style::of(text, a), wrap, !same_reason, order));
    }
    // 2. After the best-matching run of the mechanism's per-object lines.
    if key.stem.is_some() {
        if let Some(run) = index.best_run(key.mech, &key.when, &unit.why) {
            let a = &file.assignments[run.last];
            let wrap = &key.when[run.when.len()..];
            return Some(new.after(text, a, Style::of(text, a), wrap, true, order));
        }
    }
    // 3. At the end of the directive block at the top.
    if let Some(end) = index.top_block_end {
        let a = &file.assignments[end];
        return Some(new.after(text, a, Style::plain(""), &key.when, true, order));
    }
    // 4. Above the first list line, its comment and its conditionals.
    let lines = LineStarts::new(text);
    if let Some(line) = index.first_list_line {
        let at = lines.start(line);
        let mut s = String::new();
        if at > 0 && !text[..at].ends_with("\n\n") {
            s.push('\n');
        }
        s.push_str(&new.lines(&Style::plain(""), &key.when, true));
        s.push('\n');
        return Some(Splice { range: at..at, text: s, order });
    }
    // 5. At the end of the file.
    let mut s = String::new();
    if !text.is_empty() && !text.ends_with('\n') {
        s.push('\n');
    }
    if !text.is_empty() {
        s.push('\n');
    }
    s.push_str(&new.lines(&Style::plain(""), &key.when, true));
    Some(Splice { range: text.len()..text.len(), text: s, order })
}

/// Whether `comment` already states the reason `why`: `why` begins with its words (blanks and
/// line breaks aside), as a unit's reason begins with the comment of the lines it was imported from.
fn states(comment: &str, why: &str) -> bool {
    let mut said = why.split_whitespace();
    comment.split_whitespace().all(|w| said.next() == Some(w))
}

/// One new line to write: its parts and the unit it comes from.
struct NewLine<'a> {
    index: &'a Index,
    parts: &'a LineParts,
    id: MechId,
    unit: &'a Unit,
}

impl NewLine<'_> {
    /// The new line right after the line `a`, in `style`, wrapped in `wrap`, with the reason
    /// above it when `comment`. A block set off by blank lines when it has a comment or a
    /// conditional.
    fn after(&self, text: &str, a: &Assignment, style: Style, wrap: &[String], comment: bool, order: usize) -> Splice {
        let paragraph = comment || !wrap.is_empty();
        let mut s = String::new();
        if paragraph {
            s.push('\n');
        }
        s.push_str(&self.lines(&style, wrap, comment));
        let rest = &text[a.bytes.end..];
        let next = rest.lines().next().map_or("", str::trim);
        let closes = ["else", "endif"].iter().any(|k| next == *k || next.starts_with(&format!("{k} ")));
        if paragraph && !rest.is_empty() && !rest.starts_with('\n') && !closes {
            s.push('\n');
        }
        Splice { range: a.bytes.end..a.bytes.end, text: s, order }
    }

    /// The reason comment (when `comment`), the conditions `wrap` (outermost first), the line
    /// and the `endif`s.
    fn lines(&self, style: &Style, wrap: &[String], comment: bool) -> String {
        let mut s = String::new();
        if comment {
            let width = COMMENT_COLUMNS.saturating_sub(width(&style.indent) + 2).max(20);
            let mut text = String::new();
            comment_lines(&mut text, &wrapped(&self.unit.why, width));
            for link in &self.unit.links {
                comment_lines(&mut text, &format!("see: {link}"));
            }
            for c in text.lines() {
                s.push_str(&style.indent);
                s.push_str(c);
                s.push('\n');
            }
        }
        for c in wrap {
            s.push_str(&style.indent);
            s.push_str(c);
            s.push('\n');
        }
        s.push_str(&style.render(self.parts, operator(self.index, self.parts, self.id, style)));
        for _ in wrap {
            s.push_str(&style.indent);
            s.push_str("endif\n");
        }
        s
    }
}

/// Comments a new line gets are wrapped to this many columns.
pub const COMMENT_COLUMNS: usize = 80;

/// `text` with each of its lines wrapped at `width` columns (a word longer than that stays whole).
fn wrapped(text: &str, width: usize) -> String {
    let options = textwrap::Options::new(width).break_words(false);
    let lines: Vec<String> = text
        .lines()
        .flat_map(|line| {
            let wrapped = textwrap::wrap(line.trim_end(), &options);
            if wrapped.is_empty() {
                vec![String::new()]
            } else {
                wrapped.into_iter().map(|l| l.into_owned()).collect()
            }
        })
        .collect();
    lines.join("\n")
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
        let policy = LOCKING_POLICY
            .replace("skip = [\"kcsan\"]", "skip = [\"kcsan\", \"kasan\"]")
            .replace("why = \"y\"", "why = \"Avoid recursion lockdep -> sanitizer -> ... -> lockdep.\"");
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

    /// The `else` branch's line dropped while the `if…` branch's line is to be written anew
    /// (the tree lost it): the emptied `if…`/`else`/`endif` goes whole, and the new line gets
    /// a conditional of its own, balanced (it once left an `extraneous 'endif'`).
    #[test]
    fn an_if_else_pair_left_empty_goes_whole() {
        let text = "obj-y := a.o\n\n# Pair.\nifdef CONFIG_P\nelse\nKASAN_SANITIZE_a.o := y\nendif\n";
        let policy = "[[unit]]\npath = \"k/a.o\"\nskip = [\"kasan\"]\nwhen = \"ifdef CONFIG_P\"\nwhy = \"Pair.\"\n";
        let r = run(text, policy);
        assert_eq!(r.text.matches("endif").count(), 1, "{}", r.text);
        assert!(!r.text.contains("else") && !r.text.contains(":= y"), "{}", r.text);
        assert!(r.text.contains("ifdef CONFIG_P\nKASAN_SANITIZE_a.o := n\nendif\n"), "{}", r.text);
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

    #[test]
    fn a_new_line_under_another_reason_gets_its_comment_even_beside_its_object() {
        let policy = LOCKING_POLICY.replace("skip = [\"kcsan\"]", "skip = [\"kcsan\", \"kasan\"]");
        let r = run(LOCKING, &policy);
        assert!(
            r.text.contains("KCSAN_SANITIZE_lockdep.o := n\n\n# y\nKASAN_SANITIZE_lockdep.o := n\n\nifdef"),
            "{}",
            r.text
        );
    }

    const LIB: &str = "# SPDX-License-Identifier: GPL-2.0\n\n# Flaky coverage that is not a function of syscall inputs.\nKCOV_INSTRUMENT_string.o := n\nKCOV_INSTRUMENT_rbtree.o := n\n\nobj-y += a.o \\\n\t b.o\nobj-y += llist.o\n# Early recursion in the allocator.\nKCOV_INSTRUMENT_stackdepot.o := n\n\nobj-y += z.o\n";

    /// `LIB`'s own units and one more.
    fn unit(path: &str, mech: &str, why: &str, when: Option<&str>) -> String {
        let when = when.map(|w| format!("when = \"{w}\"\n")).unwrap_or_default();
        let mut policy = String::new();
        for o in ["string", "rbtree", "stackdepot"] {
            policy.push_str(&format!("[[unit]]\npath = \"l/{o}.o\"\nskip = [\"kcov\"]\nwhy = \"x\"\n"));
        }
        policy + &format!("[[unit]]\npath = \"{path}\"\nskip = [\"{mech}\"]\n{when}why = \"{why}\"\n")
    }

    #[test]
    fn a_new_line_follows_the_run_whose_comment_shares_most_long_words() {
        let r =
            run(LIB, &unit("l/llist.o", "kcov", "Coverage of llist is flaky, not a function of syscall inputs.", None));
        assert!(
            r.text.contains("KCOV_INSTRUMENT_rbtree.o := n\n\n# Coverage of llist is flaky, not a function of syscall inputs.\nKCOV_INSTRUMENT_llist.o := n\n\nobj-y"),
            "{}",
            r.text
        );
        let r = run(LIB, &unit("l/llist.o", "kcov", "recursion in the allocator", None));
        assert!(r.text.contains("KCOV_INSTRUMENT_stackdepot.o := n\n\n# recursion in the allocator\nKCOV_INSTRUMENT_llist.o := n\n\nobj-y += z.o"), "{}", r.text);
    }

    #[test]
    fn without_a_run_a_line_ends_the_top_block_or_goes_above_the_first_list_line() {
        // KASAN has no run: the top block (the KCOV lines) takes it, in its conditional.
        let r = run(LIB, &unit("l/llist.o", "kasan", "w", Some("ifdef CONFIG_X")));
        assert!(r.text.contains("KCOV_INSTRUMENT_rbtree.o := n\n\n# w\nifdef CONFIG_X\nKASAN_SANITIZE_llist.o := n\nendif\n\nobj-y += a.o"), "{}", r.text);
        let text = "# SPDX-License-Identifier: GPL-2.0\n\nccflags-y += -O2\n\n# Build efficiency\nobj-y += core.o\nobj-y += fair.o\n";
        let r = run(text, "[[unit]]\npath = \"s/core.o\"\nskip = [\"gcov\"]\nwhy = \"w\"\n");
        assert_eq!(r.text, "# SPDX-License-Identifier: GPL-2.0\n\nccflags-y += -O2\n\n# w\nGCOV_PROFILE_core.o := n\n\n# Build efficiency\nobj-y += core.o\nobj-y += fair.o\n");
    }

    #[test]
    fn a_long_reason_is_wrapped_at_80_columns() {
        let why = "word ".repeat(40);
        let r = run(LIB, &unit("l/llist.o", "kasan", why.trim(), None));
        let comment: Vec<&str> = r.text.lines().filter(|l| l.starts_with("# word")).collect();
        assert!(comment.len() > 1 && comment.iter().all(|l| l.len() <= 80), "{comment:?}");
        assert_eq!(comment.concat().matches("word").count(), 40);
    }
}
