//! The single pass: walk the tree, read every kbuild file, classify every directive.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::kbuild::Rules;
use crate::makefile::{self, Assignment, Directive, DirectiveValue, KbuildFile};
use crate::makefile::{decode_kbuild, kbuild_file};
use crate::mechanism::{Form, MechId, Mechanism, MECHANISMS};
use crate::policy::Setting;
use crate::policy::PLACEHOLDER_REASON;

/// A unit as found in the tree, before it becomes a `[[unit]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedUnit {
    pub dir: String,
    /// Relative to `dir`, as written (may hold `$(BITS)`); `None` for the directory.
    pub object: Option<String>,
    pub when: Vec<String>,
    pub settings: BTreeMap<MechId, Setting>,
    /// Distinct comments, in file order; empty when the tree gives none.
    pub reasons: Vec<String>,
    pub vars: BTreeMap<String, Vec<String>>,
    /// Exact flags of flag-removal lines that are not the mechanism's own flag variable.
    pub flags: BTreeMap<MechId, String>,
}

impl ImportedUnit {
    pub fn path(&self) -> String {
        match &self.object {
            Some(o) => format!("{}/{o}", self.dir),
            None => format!("{}/", self.dir),
        }
    }

    pub fn why(&self) -> String {
        if self.reasons.is_empty() {
            PLACEHOLDER_REASON.to_string()
        } else {
            self.reasons.join("\n\n")
        }
    }
}

/// The directives of one kbuild file that became policy units.
#[derive(Debug, Clone)]
pub struct Taken {
    pub path: PathBuf,
    pub dir: String,
    pub text: String,
    pub parsed: KbuildFile,
    /// Indices into `parsed.assignments`.
    pub assignments: Vec<usize>,
}

/// What one pass over a tree found.
#[derive(Debug, Default)]
pub struct Scan {
    pub files_read: usize,
    pub directives: usize,
    pub units: Vec<ImportedUnit>,
    pub taken: Vec<Taken>,
    /// Unrepresentable and stale directives (warnings with file:line).
    pub diags: Diagnostics,
}

/// Words that every directive contains; files without any are not parsed at all.
fn needles() -> Vec<&'static str> {
    MECHANISMS.iter().map(Mechanism::directive_name).chain(["-pg"]).collect()
}

/// Walk `tree` once and import every directive.
pub fn scan(tree: &Path, rules: &Rules) -> Scan {
    scan_with(tree, rules, false)
}

/// [`scan`] for `sync`, which takes a hand-edited generated block back into the policy: such a
/// block's lines are read as they stand instead of refusing the file (broken markers are still
/// refused).
pub fn scan_edited(tree: &Path, rules: &Rules) -> Scan {
    scan_with(tree, rules, true)
}

fn scan_with(tree: &Path, rules: &Rules, edited: bool) -> Scan {
    let needles = needles();
    let mut out = Scan::default();
    let mut found = Found::default();
    // Decoding and parsing run on the walk's workers, beside the reading.
    let walk = makefile::walk_kbuild_files_with(tree, &needles, |path, bytes| {
        let text = decode_kbuild(path, bytes)?;
        let parsed = makefile::parse(&text);
        Ok::<_, Box<Diagnostic>>((text, parsed, is_kbuild_file_of_dir(path)))
    });
    out.files_read = walk.read;
    out.diags.extend(walk.skipped);
    for (path, read) in walk.files {
        let (text, parsed, of_dir) = match read {
            Ok(t) => t,
            Err(d) => {
                out.diags.push(Diagnostic { severity: crate::diagnostic::Severity::Warning, ..*d });
                continue;
            }
        };
        let dir = rel(tree, path.parent().unwrap_or(tree));
        if parsed.directives().next().is_some() {
            if let Some(d) =
                unreadable_block(&path, &text, &parsed).filter(|d| !edited || d.code != Code::HandEditedBlock)
            {
                out.diags.push(d);
                continue;
            }
        }
        let mut taken = Vec::new();
        let mut warned = Vec::new();
        for (i, d) in parsed.directives() {
            out.directives += 1;
            let a = &parsed.assignments[i];
            if let Err(why) = representable(tree, (&path, of_dir), &parsed, a, d) {
                if a.in_block && of_dir {
                    // A generated line that cannot be read back would vanish from the policy
                    // and from the block rewritten from it: refuse the run instead.
                    out.diags.push(
                        Diagnostic::error(Code::ConflictingDirective, format!("generated `{}` cannot be imported back: {why}", a.name))
                            .at(Location::at_line(&path, &text, a.line))
                            .hint("delete the hand-written line that also sets this variable outside the generated block, then rerun the import"),
                    );
                    continue;
                }
                if makefile::overridden_by(&parsed, a).is_some() {
                    // The tree's line, left where it stands: never dropped in silence.
                    out.diags.push(
                        Diagnostic::warning(Code::SetTwice, format!("`{}` not imported: {why}", a.name))
                            .at(Location::at_line(&path, &text, a.line))
                            .hint("left untouched in the Makefile; delete it if the later line is right, or move its value to the later line"),
                    );
                    continue;
                }
                out.diags.push(
                    Diagnostic::warning(Code::Unrepresentable, format!("`{}` not imported: {why}", a.name))
                        .at(Location::at_line(&path, &text, a.line))
                        .hint("left untouched in the Makefile; rewrite it by hand into a plain `:= n`/`:= y` line to import it"),
                );
                continue;
            }
            if take(tree, &dir, &parsed, i, &parsed, &mut found) {
                taken.push(i);
                if let Some(d) = control_in_comment(&path, &text, a, &mut warned) {
                    out.diags.push(d);
                }
            }
        }
        if !taken.is_empty() {
            out.taken.push(Taken { path, dir, text, parsed, assignments: taken });
        }
    }
    stale(tree, rules, &found.units, &out.taken, &mut out.diags);
    // Units stay in tree order (file, then first line), so an adopted block reads like the
    // lines it replaces.
    out.units = found.units;
    out
}

/// A control character in the comment above a taken line (an ESC pasted with a terminal's
/// colours): the reason shows it as a visible picture, so the tree's bytes and the reason
/// differ. Named as other bad bytes are, at `Makefile:line:col` with the character, once per
/// comment paragraph (`warned` holds the paragraphs already named).
fn control_in_comment(path: &Path, text: &str, a: &Assignment, warned: &mut Vec<usize>) -> Option<Diagnostic> {
    let start_line = a.comment_line?;
    if warned.contains(&start_line) {
        return None;
    }
    let start = text.split_inclusive('\n').take(start_line - 1).map(str::len).sum::<usize>();
    let paragraph = text.get(start..a.bytes.start)?;
    let (at, c) = paragraph.char_indices().find(|(_, c)| c.is_control() && *c != '\n' && *c != '\t')?;
    warned.push(start_line);
    let name = match c {
        '\u{0}' => " NUL",
        '\u{7}' => " BEL",
        '\u{8}' => " BS",
        '\u{1b}' => " ESC",
        '\r' => " CR",
        '\u{7f}' => " DEL",
        _ => "",
    };
    let code = format!("U+{:04X}{name}", u32::from(c));
    Some(
        Diagnostic::warning(
            Code::BadReason,
            format!("the comment above `{}` holds a control character ({code}): its reason shows it visibly", a.name),
        )
        .at(Location::from_span(path, text, start + at..start + at + c.len_utf8()))
        .label(code)
        .hint("delete the character from the comment (a terminal escape sequence pasted by accident?); the policy's reason, and a block `--adopt` writes from it, show it as a control picture"),
    )
}

/// Which of the units in `group` (one object under the same conditions) a line for `mech`
/// with `reason` joins: the one already setting `mech` (a variable assigned twice: the last
/// line decides, both reasons are kept), else the one with exactly that reason (none for an
/// uncommented line). Lines with different comments stay in different units, so a reason is
/// never shown for a mechanism it does not explain (mm/Makefile's KCSAN paragraph is not why
/// `KASAN_SANITIZE_slub.o := n` is there).
fn unit_for(units: &[ImportedUnit], group: &[usize], mech: MechId, reason: Option<&str>) -> Option<usize> {
    let setting = group.iter().find(|&&u| units[u].settings.contains_key(&mech));
    let same_reason = || {
        group.iter().find(|&&u| match reason {
            Some(r) => units[u].reasons.len() == 1 && units[u].reasons[0] == r,
            None => units[u].reasons.is_empty(),
        })
    };
    setting.or_else(same_reason).copied()
}

/// The units of `dir` in one section of the central layout's file (the text between its
/// `ifeq ($(obj),dir)` and `endif`), read as [`scan`] reads a directory's lines; lines the
/// policy cannot hold (not a plain skip/force) are left out. Make variables in object names
/// take their values from the directory's own kbuild file (`dir_text`), where they are set.
pub fn section_units(tree: &Path, dir: &str, section: &str, dir_text: &str) -> Vec<ImportedUnit> {
    let parsed = makefile::parse(section);
    let own = makefile::parse(dir_text);
    let mut found = Found::default();
    for (i, d) in parsed.directives() {
        if crate::makefile::unmodelled(&parsed.assignments[i], d).is_none() {
            take(tree, dir, &parsed, i, &own, &mut found);
        }
    }
    found.units
}

/// Every section of the central layout's file (`central_text`, as read from the tree), as
/// units of its directory ([`section_units`]); `None` when the file has no generated block or
/// its body is not a sequence of `ifeq ($(obj),dir)` sections.
pub fn central_units(tree: &Path, central_text: &str) -> Option<Vec<ImportedUnit>> {
    let sections = crate::emit::central::sections(central_text)?;
    let mut out = Vec::new();
    for (dir, section) in &sections {
        out.extend(section_units(tree, dir, section, &own_text(tree, dir)));
    }
    Some(out)
}

/// The directory lines the central file's sections reset (a variable set empty under the
/// line's conditions, see `emit::central::section_resets`): each as its directory, its object
/// as the line names it, its conditions (as keys) and its mechanism. Kbuild reads these
/// lines as never set, so to `sync` the tree does not have them.
pub fn central_resets(tree: &Path, central_text: &str) -> Vec<super::sync::Key> {
    let sections = crate::emit::central::sections(central_text).unwrap_or_default();
    let mut out = Vec::new();
    for (dir, section) in &sections {
        // One reset stands for one line: a variable with more lines than resets (upstream
        // re-added one the policy dropped) still has a line Kbuild reads, so it is not reset.
        let mut resets: std::collections::HashMap<(String, Vec<String>), usize> = Default::default();
        for key in crate::emit::central::section_resets(section) {
            *resets.entry(key).or_default() += 1;
        }
        if resets.is_empty() {
            continue;
        }
        let own = makefile::parse(&own_text(tree, dir));
        let mut lines: std::collections::HashMap<(String, Vec<String>), usize> = Default::default();
        let mut covered = Vec::new();
        for (i, d) in own.directives() {
            let a = &own.assignments[i];
            let when = crate::emit::inplace::canonical_when(&a.when());
            let key = (a.name.clone(), when.clone());
            if resets.contains_key(&key) {
                *lines.entry(key.clone()).or_default() += 1;
                covered.push((key, (dir.clone(), d.object.clone(), a.when_keys(), d.mech)));
            }
        }
        out.extend(covered.into_iter().filter(|(key, _)| lines[key] <= resets[key]).map(|(_, k)| k));
    }
    out
}

/// The text of `dir`'s own kbuild file (empty when it cannot be read: it then sets nothing).
fn own_text(tree: &Path, dir: &str) -> String {
    kbuild_file(&tree.join(dir))
        .and_then(|p| crate::input::read(&p, crate::input::KBUILD_LIMIT).ok().map(|b| (p, b)))
        .and_then(|(p, b)| decode_kbuild(&p, b).ok())
        .unwrap_or_default()
}

/// The units taken so far, and what taking them needs again.
#[derive(Default)]
struct Found {
    units: Vec<ImportedUnit>,
    /// The units of each (directory, object, conditions), one per reason: indices into `units`.
    index: HashMap<(String, Option<String>, Vec<String>), Vec<usize>>,
    /// Each architecture's top Makefile, parsed once (`None` when unreadable): where `$(BITS)`
    /// gets its values for every object that spells it.
    arch: HashMap<String, Option<KbuildFile>>,
}

/// Add directive `i` of `parsed` (in `dir`) to the unit for its object and conditions, its
/// comment as a reason; false when it is not a plain skip/force.
fn take(tree: &Path, dir: &str, parsed: &KbuildFile, i: usize, vars_from: &KbuildFile, found: &mut Found) -> bool {
    let Found { units, index, arch } = found;
    let a = &parsed.assignments[i];
    let Some(d) = makefile::classify(a) else { return false };
    let dir = dir.to_string();
    let DirectiveValue::Plain(setting) = d.value else { return false };
    let when = a.when();
    let reason = line_reason(a, d.mech).and_then(reason_text);
    let key = (dir.clone(), d.object.clone(), when.clone());
    let group = index.entry(key).or_default();
    let slot = match unit_for(units, group, d.mech, reason.as_deref()) {
        Some(slot) => slot,
        None => {
            units.push(ImportedUnit {
                dir: dir.clone(),
                object: d.object.clone(),
                when,
                settings: BTreeMap::new(),
                reasons: Vec::new(),
                vars: BTreeMap::new(),
                flags: BTreeMap::new(),
            });
            group.push(units.len() - 1);
            units.len() - 1
        }
    };
    let unit = &mut units[slot];
    unit.settings.insert(d.mech, setting);
    if let Form::FlagRemoval { flags, .. } = d.mech.get().form {
        let value = a.value.split_whitespace().collect::<Vec<_>>().join(" ");
        if value == flags {
            unit.flags.remove(&d.mech);
        } else {
            unit.flags.insert(d.mech, value);
        }
    }
    if let Some(c) = reason {
        if !unit.reasons.contains(&c) {
            unit.reasons.push(c);
        }
    }
    if let Some(o) = &d.object {
        for var in crate::policy::make_variables(o) {
            let values = variable_values(tree, &dir, vars_from, &var, arch);
            unit.vars.insert(var, values);
        }
    }
    true
}

/// A comment paragraph as a reason, in the form a generated block writes it back (each line
/// without trailing blanks), so that reading a block this import wrote gives the same reason.
/// The placeholder a block carries for a unit without a reason is no reason.
/// The comment that is a line's reason: the paragraph directly above it; a paragraph above
/// earlier lines of its block only when it names no mechanism or names the line's (lib/Makefile's
/// "instrumenting stackdepot.c with KMSAN will result in infinite recursion" heads
/// `KMSAN_SANITIZE_stackdepot.o`, not the `KCOV_INSTRUMENT_stackdepot.o` below it).
pub fn line_reason(a: &Assignment, mech: MechId) -> Option<&str> {
    let comment = a.comment.as_deref()?;
    let first = a.comment_line?;
    if first + comment.split('\n').count() == a.line {
        return Some(comment);
    }
    let name = |m: &Mechanism| m.title.split_whitespace().next().unwrap_or(m.name).to_string();
    let words: Vec<&str> = comment.split(|c: char| !c.is_alphanumeric()).collect();
    let named: Vec<String> = MECHANISMS.iter().map(name).filter(|n| words.contains(&n.as_str())).collect();
    (named.is_empty() || named.contains(&name(mech.get()))).then_some(comment)
}

fn reason_text(comment: &str) -> Option<String> {
    let lines: Vec<&str> = comment.lines().map(str::trim_end).collect();
    let reason = lines.join("\n").trim().to_string();
    (!reason.is_empty() && reason != PLACEHOLDER_REASON).then_some(reason)
}

/// Why the generated block of a file cannot be read back as units (bad input: nothing is
/// written): broken markers, a hand edit the checksum shows, or a block inside a conditional.
/// Reading it anyway would adopt a file every later run refuses, or bless a hand edit.
fn unreadable_block(path: &Path, text: &str, parsed: &KbuildFile) -> Option<Diagnostic> {
    if let Some(p) = parsed.marker_problems.first() {
        return Some(
            Diagnostic::error(Code::BadMarker, p.message.clone()).at(Location::at_line(path, text, p.line)).hint(
                "restore one begin and one end marker on lines of their own, or delete the stray marker line, then rerun the import",
            ),
        );
    }
    let block = parsed.block.as_ref()?;
    if block.recorded_checksum.as_deref() != Some(crate::emit::checksum(&block.body).as_str()) {
        return Some(
            Diagnostic::error(Code::HandEditedBlock, "generated block was edited by hand")
                .at(Location::at_line(path, text, block.begin_line))
                .label("checksum in the end marker no longer matches")
                .hint("delete the block's two marker lines to import its lines as hand-written ones, then rerun the import"),
        );
    }
    let nested = parsed
        .assignments
        .iter()
        .filter(|a| a.in_block)
        .find_map(|a| a.frames.iter().find(|f| f.line < block.begin_line));
    nested.map(|f| {
        Diagnostic::error(Code::BadMarker, "generated block inside a conditional")
            .at(Location::at_line(path, text, f.line))
            .hint("move the generated block out of this conditional (the policy's `when` says when a unit applies), then rerun the import")
    })
}

fn is_kbuild_file_of_dir(path: &Path) -> bool {
    path.parent().and_then(kbuild_file).as_deref() == Some(path)
}

fn rel(tree: &Path, path: &Path) -> String {
    path.strip_prefix(tree).unwrap_or(path).to_string_lossy().into_owned()
}

/// Why a directive cannot become a policy unit, or Ok. `file` is the kbuild file's path and
/// whether it is its directory's kbuild file (looked up once per file, not per line).
fn representable(
    tree: &Path,
    (path, of_dir): (&Path, bool),
    parsed: &KbuildFile,
    a: &Assignment,
    d: &Directive,
) -> Result<(), String> {
    let dir = path.parent().unwrap_or(tree);
    if !of_dir {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        return Err(if name == "Makefile" {
            "a `Kbuild` file shadows this Makefile, so Kbuild never reads it".into()
        } else {
            format!("`{name}` is not the directory's kbuild file")
        });
    }
    crate::policy::holdable(parsed, a, d)?;
    // A generated line whose variable the file sets again outside the block (a merge added a
    // line): when every such line is plain and unconditional, make reads the last one and so
    // does the import (`take`: the last line decides), so `sync` takes a merged line's value
    // and `gen-makefiles` moves it into the block. Otherwise the two fight in ways the policy
    // cannot say, and the block layout owns the variable: refused.
    // (Another kind of line for that variable, such as xtensa's `CFLAGS_REMOVE_x.o +=
    // -fstack-protector` beside the ftrace removal, is not a directive and does not fight.)
    if a.in_block
        && !parsed.plainly_set(&a.name)
        && parsed.assignments.iter().any(|b| !b.in_block && b.name == a.name && makefile::classify(b).is_some())
    {
        return Err(format!("`{}` is also set outside the generated block", a.name));
    }
    let dir = rel(tree, dir);
    let path_text = d.object.as_ref().map_or(format!("{dir}/"), |o| format!("{dir}/{o}"));
    if let Err((why, _)) = crate::policy::UnitPath::parse(&path_text, None) {
        return Err(why);
    }
    Ok(())
}

/// Values a make variable takes: assignments in the same file, else in the architecture's
/// top Makefile (`BITS := 32` / `BITS := 64` in `arch/x86/Makefile`), read once into `arches`.
fn variable_values(
    tree: &Path,
    dir: &str,
    parsed: &KbuildFile,
    var: &str,
    arches: &mut HashMap<String, Option<KbuildFile>>,
) -> Vec<String> {
    let mut values = assigned_values(parsed, var);
    if values.is_empty() {
        if let Some(arch) = dir.strip_prefix("arch/").and_then(|r| r.split('/').next()) {
            let top = arches.entry(arch.to_string()).or_insert_with(|| {
                let path = tree.join("arch").join(arch).join("Makefile");
                crate::input::read_to_string(&path, crate::input::KBUILD_LIMIT).ok().map(|t| makefile::parse(&t))
            });
            if let Some(top) = top {
                values = assigned_values(top, var);
            }
        }
    }
    values.sort();
    values.dedup();
    values
}

fn assigned_values(file: &KbuildFile, var: &str) -> Vec<String> {
    file.assignments
        .iter()
        .filter(|a| a.name == var && !a.value.trim().is_empty() && !a.value.contains('$'))
        .map(|a| a.value.trim().to_string())
        .collect()
}

/// Per-object directives whose object has no source in the directory are dead.
fn stale(tree: &Path, rules: &Rules, units: &[ImportedUnit], taken: &[Taken], diags: &mut Diagnostics) {
    // The first unit of each object, looked up once per line rather than searched for.
    let mut first: HashMap<(&str, &str), &ImportedUnit> = HashMap::new();
    for u in units {
        if let Some(o) = &u.object {
            first.entry((u.dir.as_str(), o.as_str())).or_insert(u);
        }
    }
    for t in taken {
        let words = crate::kbuild::KbuildWords::new(&t.text);
        for &i in &t.assignments {
            let a = &t.parsed.assignments[i];
            let Some(d) = makefile::classify(a) else { continue };
            let Some(object) = &d.object else { continue };
            let unit = first.get(&(t.dir.as_str(), object.as_str()));
            let vars = unit.map(|u| u.vars.clone()).unwrap_or_default();
            if !crate::kbuild::has_source_in(&tree.join(&t.dir), object, &vars, &words, rules.naming(d.mech)) {
                diags.push(
                    Diagnostic::warning(
                        Code::MissingSource,
                        format!("stale directive: no source for `{}/{object}`", t.dir),
                    )
                    .at(Location::at_line(&t.path, &t.text, a.line))
                    .hint("the exemption does nothing: fix the object name or drop the unit"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_comment_naming_another_mechanism_is_not_a_lines_reason() {
        let text = "KASAN_SANITIZE_stackdepot.o := n\n# In particular, instrumenting stackdepot.c with KMSAN will result in infinite\n# recursion.\nKMSAN_SANITIZE_stackdepot.o := n\nKCOV_INSTRUMENT_stackdepot.o := n\n\n# Flaky coverage.\nKCOV_INSTRUMENT_a.o := n\nKCOV_INSTRUMENT_b.o := n\n# If sanitizers detect any issues in kcov, it may lead to recursion\nKASAN_SANITIZE_kcov.o := n\nKCSAN_SANITIZE_kcov.o := n\n";
        let file = makefile::parse(text);
        let reasons: Vec<(String, Option<String>)> = file
            .directives()
            .map(|(i, d)| {
                (
                    file.assignments[i].name.clone(),
                    line_reason(&file.assignments[i], d.mech).map(|r| r[..12].to_string()),
                )
            })
            .collect();
        let expect = [
            ("KASAN_SANITIZE_stackdepot.o", None),
            ("KMSAN_SANITIZE_stackdepot.o", Some("In particula")),
            ("KCOV_INSTRUMENT_stackdepot.o", None),
            ("KCOV_INSTRUMENT_a.o", Some("Flaky covera")),
            ("KCOV_INSTRUMENT_b.o", Some("Flaky covera")),
            ("KASAN_SANITIZE_kcov.o", Some("If sanitizer")),
            ("KCSAN_SANITIZE_kcov.o", Some("If sanitizer")),
        ];
        let expect: Vec<(String, Option<String>)> =
            expect.iter().map(|(n, r)| (n.to_string(), r.map(|r| r[..12].to_string()))).collect();
        assert_eq!(reasons, expect);
    }
}
