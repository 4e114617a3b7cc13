//! The tree's own Kbuild rules: for each mechanism, the decision expression in
//! `scripts/Makefile.lib` (or `Makefile.build`), how it names objects (`$(target-stem)` since
//! 6.12's tool-coverage rework, `$(basetarget)` before) and what it falls back to
//! (`y`, `$(is-kernel-object)`, a `CONFIG_*_ALL` switch). Read from the tree, never assumed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::mechanism::{Form, MechId, Polarity};

/// How a per-object variable name is derived from the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Naming {
    /// `$(basename $(patsubst $(obj)/%,%,$@))`: path relative to the directory (6.12).
    TargetStem,
    /// `$(basename $(notdir $@))`: file name only, matching same-named objects in subdirectories (6.1).
    Basetarget,
}

impl Naming {
    pub fn make_name(self) -> &'static str {
        match self {
            Naming::TargetStem => "target-stem",
            Naming::Basetarget => "basetarget",
        }
    }

    /// The stem this naming gives an object written relative to its directory (`sub/foo.o`).
    pub fn stem(self, object: &str) -> String {
        let base = object.strip_suffix(".o").unwrap_or(object);
        match self {
            Naming::TargetStem => base.to_string(),
            Naming::Basetarget => base.rsplit('/').next().unwrap_or(base).to_string(),
        }
    }
}

/// One piece of the concatenation Kbuild tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// `$(VAR_$(naming).o)`
    PerObject(String),
    /// `$(VAR)`
    Directory(String),
    /// `$(CONFIG_X)`
    Config(String),
    /// `$(is-kernel-object)`
    KernelObject,
    /// `$(if $(is-kernel-object),…)`
    IfKernelObject(Vec<Term>),
    /// Literal text (`y`, `n`).
    Literal(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionKind {
    /// Concatenate the terms, then test the words with the polarity; `gated`: the result is
    /// also ANDed with `$(is-kernel-object)` (objtool in 6.12).
    Chain { polarity: Polarity, terms: Vec<Term>, gated: bool },
    /// `_c_flags` filters out per-object and directory removals, then appends per-object flags.
    Flags,
}

/// How the tree decides one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub naming: Naming,
    pub kind: DecisionKind,
    /// The make expression, verbatim with continuations joined.
    pub expression: String,
    /// Where it is written.
    pub file: String,
    pub line: usize,
    /// [`Decision::references_for`]'s template, made on first use.
    references: Template,
}

/// A cache derived from the decision's expression: no part of what the decision is, so two
/// decisions compare equal whether or not either has made it yet.
#[derive(Debug, Clone, Default)]
struct Template(std::sync::OnceLock<Vec<Vec<String>>>);

impl PartialEq for Template {
    fn eq(&self, _: &Template) -> bool {
        true
    }
}

impl Eq for Template {}

/// Stands for the object's stem in [`Decision::references_for`]'s template: only characters a
/// variable name may hold, so a reference reads the same around it as around a stem made of
/// such characters.
const STEM: &str = "SANPOLICYxSTEMx";

impl Decision {
    fn new(naming: Naming, kind: DecisionKind, expression: String) -> Decision {
        Decision { naming, kind, expression, file: String::new(), line: 0, references: Default::default() }
    }

    /// The variables the expression references for an object (as `configs::references` of
    /// [`Decision::expression_for`] gives them). Asked once per object and mechanism, so
    /// the expression is scanned once, with a placeholder for the stem, and a stem of name
    /// characters is put in its place. A stem of other characters ends a name where it
    /// stands, so it is scanned as it is.
    pub fn references_for(&self, stem: &str) -> Vec<String> {
        if !stem.bytes().all(super::configs::is_name_byte) || self.expression.contains(STEM) {
            return super::configs::references(&self.expression_for(stem));
        }
        let template = self.references.0.get_or_init(|| {
            let refs = super::configs::references(&self.expression_for(STEM));
            refs.iter().map(|r| r.split(STEM).map(str::to_string).collect()).collect()
        });
        template.iter().map(|parts| parts.join(stem)).collect()
    }

    /// The expression as make expands it for one object: each `$(target-stem)` (or
    /// `$(basetarget)`) replaced by the object's stem.
    pub fn expression_for(&self, stem: &str) -> String {
        fn after<'s>(s: &'s str, name: &str) -> Option<&'s str> {
            s.strip_prefix("$(")?.strip_prefix(name)?.strip_prefix(')')
        }
        let name = self.naming.make_name();
        let mut out = String::with_capacity(self.expression.len() + 4 * stem.len());
        let mut rest = self.expression.as_str();
        // A `$` starts every occurrence: memchr skips to it (this runs once per object and
        // mechanism, so `str::replace`'s searcher set-up per call was a visible cost).
        while let Some(i) = memchr::memchr(b'$', rest.as_bytes()) {
            out.push_str(&rest[..i]);
            match after(&rest[i..], name) {
                Some(after) => {
                    out.push_str(stem);
                    rest = after;
                }
                None => {
                    out.push('$');
                    rest = &rest[i + 1..];
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// The `CONFIG_` options the expression reads (the `*_ALL` switches).
    pub fn configs(&self) -> Vec<String> {
        fn walk(terms: &[Term], out: &mut Vec<String>) {
            for t in terms {
                match t {
                    Term::Config(c) => out.push(c.clone()),
                    Term::IfKernelObject(inner) => walk(inner, out),
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        if let DecisionKind::Chain { terms, .. } = &self.kind {
            walk(terms, &mut out);
        }
        out
    }

    /// Whether the decision reads `$(is-kernel-object)` (so a target-specific value of it can decide).
    pub fn reads_kernel_object(&self) -> bool {
        fn walk(terms: &[Term]) -> bool {
            terms.iter().any(|t| matches!(t, Term::KernelObject | Term::IfKernelObject(_)))
        }
        match &self.kind {
            DecisionKind::Chain { terms, gated, .. } => *gated || walk(terms),
            DecisionKind::Flags => false,
        }
    }

    /// What applies when neither the object nor the directory sets a value, e.g.
    /// `default $(is-kernel-object)`.
    pub fn default_text(&self) -> String {
        match &self.kind {
            DecisionKind::Chain { terms, gated, polarity } => {
                let tail: Vec<String> = terms
                    .iter()
                    .filter(|t| !matches!(t, Term::PerObject(_) | Term::Directory(_)))
                    .map(term_text)
                    .collect();
                // `OBJECT_FILES_NON_STANDARD` is inverted: its `n` is what leaves objtool on, so
                // the value alone ("on … default n") would read as a contradiction.
                let inverted =
                    if *polarity == Polarity::SkipIfAllY { " (a skip variable: n runs, y skips)" } else { "" };
                format!("default {}{inverted}{}", tail.join(""), if *gated { ", only for kernel objects" } else { "" })
            }
            DecisionKind::Flags => "default: flags kept unless removed".to_string(),
        }
    }
}

/// An instrumentation line in a rules file (`KASAN_SANITIZE := n` added to
/// `scripts/Makefile.lib`): Kbuild reads it for every directory, beside or over each directory's
/// own lines, so no unit and no directory's kbuild file says what make does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RulesLine {
    /// The rules file, relative to the tree (`scripts/Makefile.lib`).
    pub file: String,
    pub location: Location,
    /// The variable it sets (`KASAN_SANITIZE_lockdep.o`).
    pub name: String,
    pub mech: MechId,
    /// The object it names (`lockdep.o`), `None` for a directory-wide line.
    pub object: Option<String>,
    /// The line as written, continuations joined.
    pub text: String,
}

/// The rules of one tree (or the built-in ones).
#[derive(Debug, Clone)]
pub struct Rules {
    /// Where they were read from, for "which rules were picked".
    pub source: String,
    pub decisions: BTreeMap<MechId, Decision>,
    /// Instrumentation lines in the rules files themselves (none in a pristine tree).
    pub lines: Vec<RulesLine>,
    /// For each mechanism, the mechanisms whose variables its decision reads (itself, and
    /// UBSAN for signed-wrap).
    reads: BTreeMap<MechId, Vec<MechId>>,
}

/// Linux 6.12's own rule files, verbatim (GPL-2.0), shared with the tests' fixtures.
const BUILTIN_LIB: &str = include_str!("../../tests/fixtures/kernel-rules/linux-6.12/scripts/Makefile.lib");
const BUILTIN_BUILD: &str = include_str!("../../tests/fixtures/kernel-rules/linux-6.12/scripts/Makefile.build");

/// Reads a rules file by its tree-relative name: its path and text, or why it cannot be read.
type RulesReader<'a> = dyn Fn(&str) -> Result<(PathBuf, String), String> + 'a;

impl Rules {
    /// The rules of Linux 6.12, used when no tree is given.
    pub fn builtin() -> Rules {
        let read = |file: &str| match file {
            "scripts/Makefile.lib" => Ok((PathBuf::from(file), BUILTIN_LIB.to_string())),
            "scripts/Makefile.build" => Ok((PathBuf::from(file), BUILTIN_BUILD.to_string())),
            _ => Err("not built in".to_string()),
        };
        let (rules, diags) = Rules::from_texts("built-in Linux 6.12 rules", &read);
        debug_assert!(diags.is_empty() && rules.lines.is_empty(), "{diags:?} {:?}", rules.lines);
        rules
    }

    /// Read the rules from a kernel tree's `scripts/`.
    pub fn from_tree(tree: &Path) -> (Rules, Diagnostics) {
        let read = |file: &str| {
            let path = tree.join(file);
            // Through `input`: a FIFO or `/dev/zero` here must not hang or fill memory.
            match crate::input::read_to_string(&path, crate::input::KBUILD_LIMIT) {
                Ok(t) => Ok((path, t)),
                Err(e) => Err(e.to_string()),
            }
        };
        Rules::from_texts(&format!("{}/scripts (the tree's own rules)", tree.display()), &read)
    }

    fn from_texts(source: &str, read: &RulesReader) -> (Rules, Diagnostics) {
        let mut diags = Diagnostics::default();
        let mut decisions = BTreeMap::new();
        // Each rules file read and split into logical lines once, for all its mechanisms.
        let mut cache: BTreeMap<&str, Result<(PathBuf, LogicalLines), String>> = BTreeMap::new();
        let mut lines = Vec::new();
        for id in MechId::all() {
            let m = id.get();
            let entry = cache.entry(m.rules_file).or_insert_with(|| {
                read(m.rules_file).map(|(p, t)| {
                    lines.extend(directive_lines(m.rules_file, &p, &t));
                    (p, logical_lines(&t))
                })
            });
            let (path, lines) = match entry {
                Ok(found) => found,
                Err(why) => {
                    diags.push(
                        Diagnostic::error(Code::Rules, format!("cannot read `{}`: {why}", m.rules_file))
                            .hint("point `--tree` at the top of a Linux source tree"),
                    );
                    continue;
                }
            };
            match find_decision(id, lines) {
                Some(Ok((mut d, line))) => {
                    d.file = m.rules_file.to_string();
                    d.line = line;
                    decisions.insert(id, d);
                }
                Some(Err(message)) => diags.push(
                    Diagnostic::error(Code::Rules, message)
                        .at(Location::file(path))
                        .hint("sanpolicy does not understand this Kbuild version's rules; please report it"),
                ),
                None => {} // this kernel does not read the variable (e.g. UBSAN_SIGNED_WRAP before 6.12)
            }
        }
        if cache.values().any(Result::is_err) {
            decisions.clear();
        }
        let reads = MechId::all().map(|id| (id, read_by(decisions.get(&id), id))).collect();
        (Rules { source: source.to_string(), decisions, lines, reads }, diags.sorted())
    }

    /// The mechanisms whose lines can decide `id`.
    pub fn reads(&self, id: MechId) -> &[MechId] {
        self.reads.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Whether make may change `id`'s decision through the opaque construct `o`: it may set the
    /// variables `id` reads, or a target-specific `is-kernel-object` the decision reads.
    pub fn opaque_may_change(&self, o: &crate::makefile::Opaque, id: MechId) -> bool {
        o.may_touch(id)
            || self.reads(id).iter().any(|r| o.may_touch(*r))
            || (o.kernel_object && self.decision(id).is_some_and(Decision::reads_kernel_object))
    }

    pub fn decision(&self, id: MechId) -> Option<&Decision> {
        self.decisions.get(&id)
    }

    /// The rules files' own instrumentation lines that reach `object` (relative to its
    /// directory): directory-wide ones, and per-object ones whose name Kbuild matches to it.
    pub fn lines_for(&self, object: &str) -> Vec<&RulesLine> {
        let reaches = |l: &&RulesLine| {
            l.object.as_deref().is_none_or(|o| self.naming(l.mech).stem(o) == self.naming(l.mech).stem(object))
        };
        self.lines.iter().filter(reaches).collect()
    }

    /// The naming used for `id` (target-stem when the tree does not read the mechanism).
    pub fn naming(&self, id: MechId) -> Naming {
        self.decision(id).map_or(Naming::TargetStem, |d| d.naming)
    }

    /// One line per rule picked, for humans.
    pub fn describe(&self) -> Vec<String> {
        let mut out = vec![format!("rules from {}", self.source)];
        for (id, d) in &self.decisions {
            let default = d.default_text();
            out.push(format!(
                "  {:<18} names $({}), {} ({}:{})",
                id.get().name,
                d.naming.make_name(),
                default,
                d.file,
                d.line
            ));
        }
        out
    }
}

/// Every instrumentation line of the rules file `file` (read from `path`): what a kbuild file's
/// reader would take for a directive, anywhere in the file.
fn directive_lines(file: &str, path: &Path, text: &str) -> Vec<RulesLine> {
    let parsed = crate::makefile::parse(text);
    let index = crate::diagnostic::LineIndex::new(text);
    parsed
        .assignments
        .iter()
        .filter_map(|a| {
            let d = crate::makefile::classify(a)?;
            let physical = text.lines().nth(a.line - 1).unwrap_or("");
            let location = index.line(path, text, a.line);
            let col = physical.len() - physical.trim_start().len();
            let location = Location { col: col + 1, ..location };
            Some(RulesLine {
                file: file.to_string(),
                location,
                name: a.name.clone(),
                mech: d.mech,
                object: d.object,
                text: format!("{} {} {}", a.name, a.op.as_str(), a.value).trim_end().to_string(),
            })
        })
        .collect()
}

fn read_by(decision: Option<&Decision>, id: MechId) -> Vec<MechId> {
    let vars: Vec<&str> = match decision.map(|d| &d.kind) {
        Some(DecisionKind::Chain { terms, .. }) => terms
            .iter()
            .filter_map(|t| match t {
                Term::PerObject(v) | Term::Directory(v) => Some(v.as_str()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut ids: Vec<MechId> =
        MechId::all().filter(|m| matches!(m.get().form, Form::Variable { var, .. } if vars.contains(&var))).collect();
    if !ids.contains(&id) {
        ids.push(id);
    }
    ids
}

fn term_text(t: &Term) -> String {
    match t {
        Term::PerObject(v) => format!("$({v}_<obj>.o)"),
        Term::Directory(v) => format!("$({v})"),
        Term::Config(c) => format!("$({c})"),
        Term::KernelObject => "$(is-kernel-object)".into(),
        Term::IfKernelObject(ts) => {
            format!("$(if $(is-kernel-object),{})", ts.iter().map(term_text).collect::<String>())
        }
        Term::Literal(l) => l.clone(),
    }
}

/// Logical lines (continuations joined with one blank) with their first physical line.
type LogicalLines = Vec<(usize, String)>;

fn logical_lines(text: &str) -> LogicalLines {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let (body, cont) = match line.strip_suffix('\\') {
            Some(b) => (b, true),
            None => (line, false),
        };
        let entry = current.get_or_insert_with(|| (i + 1, String::new()));
        if !entry.1.is_empty() {
            entry.1 = format!("{} {}", entry.1.trim_end(), body.trim_start());
        } else {
            entry.1.push_str(body);
        }
        if !cont {
            out.extend(current.take());
        }
    }
    out.extend(current);
    out
}

fn find_decision(id: MechId, lines: &[(usize, String)]) -> Option<Result<(Decision, usize), String>> {
    let m = id.get();
    match m.form {
        Form::Variable { var, polarity, .. } => {
            let needle = format!("$({var}_$(");
            let (line, logical) =
                lines.iter().find(|(_, l)| l.contains(&needle) && !l.trim_start().starts_with('#'))?;
            Some(chain_decision(var, polarity, logical, &needle).map(|d| (d, *line)))
        }
        Form::FlagRemoval { remove_prefix, .. } => {
            let needle = format!("$(filter-out $({remove_prefix}$(");
            let (line, logical) = lines.iter().find(|(_, l)| l.contains(&needle))?;
            let naming = naming_after(&logical[logical.find(&needle)? + needle.len()..])?;
            let expression = logical.split_once('=').map_or(logical.as_str(), |(_, r)| r).trim().to_string();
            Some(Ok((Decision::new(naming, DecisionKind::Flags, expression), *line)))
        }
    }
}

fn naming_after(s: &str) -> Option<Naming> {
    if s.starts_with("target-stem)") {
        Some(Naming::TargetStem)
    } else if s.starts_with("basetarget)") {
        Some(Naming::Basetarget)
    } else {
        None
    }
}

fn chain_decision(var: &str, polarity: Polarity, logical: &str, needle: &str) -> Result<Decision, String> {
    let at = logical.find(needle).unwrap_or(0);
    let prefix = match polarity {
        Polarity::OffIfAllN => "$(patsubst n%,,",
        Polarity::SkipIfAllY => "$(filter-out y%,",
    };
    let start = logical[..at].rfind(prefix).ok_or_else(|| format!("`{var}` is not tested with `{prefix}…)`"))?;
    let len = super::eval::matching(&logical[start + 1..], '(', ')')
        .ok_or_else(|| format!("unbalanced expression for `{var}`"))?;
    let expression = logical[start..start + 1 + len + 1].to_string();
    let operand = &expression[prefix.len()..expression.len() - 1];
    let terms = parse_terms(operand)?;
    let naming =
        naming_after(&logical[at + needle.len()..]).ok_or_else(|| format!("unknown object naming in `{var}`"))?;
    let gated = logical[start + expression.len()..].trim_start().starts_with(",$(is-kernel-object)");
    Ok(Decision::new(naming, DecisionKind::Chain { polarity, terms, gated }, expression))
}

fn parse_terms(mut s: &str) -> Result<Vec<Term>, String> {
    let mut terms = Vec::new();
    while !s.is_empty() {
        if let Some(after) = s.strip_prefix("$(") {
            let end = super::eval::matching(&s[1..], '(', ')').ok_or("unbalanced `$(`")?;
            let inner = &after[..end - 1];
            terms.push(parse_reference(inner)?);
            s = &s[end + 2..];
        } else {
            let end = s.find('$').unwrap_or(s.len());
            let literal = s[..end].trim();
            if !literal.is_empty() {
                terms.push(Term::Literal(literal.to_string()));
            }
            s = &s[end..];
        }
    }
    Ok(terms)
}

fn parse_reference(inner: &str) -> Result<Term, String> {
    if inner == "is-kernel-object" {
        return Ok(Term::KernelObject);
    }
    if let Some(rest) = inner.strip_prefix("if $(is-kernel-object),") {
        return Ok(Term::IfKernelObject(parse_terms(rest)?));
    }
    if let Some(var) =
        inner.split_once("_$(").filter(|(_, r)| naming_after(r).is_some() && r.ends_with(").o")).map(|(v, _)| v)
    {
        return Ok(Term::PerObject(var.to_string()));
    }
    if inner.starts_with("CONFIG_") {
        return Ok(Term::Config(inner.to_string()));
    }
    if !inner.is_empty() && inner.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
        return Ok(Term::Directory(inner.to_string()));
    }
    Err(format!("unrecognised term `$({inner})` in a decision expression"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mechanism::MECHANISMS;

    proptest::proptest! {
        // No regressions file beside the sources (the workspace's top level is fixed); the
        // cases that once failed are in `references_for_the_stems_that_once_differed`.
        #![proptest_config(proptest::test_runner::Config {
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        /// The fast forms agree with the plain ones: the expression with `str::replace`, its
        /// references scanned from that text, for every mechanism and any stem (name
        /// characters or not, the placeholder itself included).
        #[test]
        fn references_for_a_stem_are_those_of_the_expanded_expression(
            stem in "([a-zA-Z0-9_.]|-|\\+|\\$|\\(|\\)|\\{|\\}| |SANPOLICYxSTEMx){0,6}"
        ) {
            let rules = Rules::builtin();
            for id in MechId::all() {
                let Some(d) = rules.decision(id) else { continue };
                let reference = format!("$({})", d.naming.make_name());
                let expanded = d.expression.replace(&reference, &stem);
                proptest::prop_assert_eq!(d.expression_for(&stem), expanded.clone());
                proptest::prop_assert_eq!(d.references_for(&stem), super::super::configs::references(&expanded));
            }
        }
    }

    #[test]
    fn references_for_the_stems_that_once_differed() {
        let rules = Rules::builtin();
        for stem in ["+", "a+b", "SANPOLICYxSTEMx", "a$(b)", ""] {
            for id in MechId::all() {
                let Some(d) = rules.decision(id) else { continue };
                let expanded = d.expression.replace(&format!("$({})", d.naming.make_name()), stem);
                assert_eq!(d.references_for(stem), super::super::configs::references(&expanded), "{stem}");
            }
        }
    }

    #[test]
    fn a_decision_made_its_template_still_equals_one_that_did_not() {
        let (a, b) = (Rules::builtin(), Rules::builtin());
        let id = MechId::all().find(|id| a.decision(*id).is_some()).expect("a decision");
        a.decision(id).expect("decision").references_for("lockdep");
        assert_eq!(a.decision(id), b.decision(id));
    }

    #[test]
    fn builtin_rules_cover_every_mechanism() {
        let rules = Rules::builtin();
        assert_eq!(rules.decisions.len(), MECHANISMS.len());
        let kasan = rules.decision(MechId::by_name("kasan").unwrap()).unwrap();
        assert_eq!(kasan.naming, Naming::TargetStem);
        assert_eq!(
            kasan.kind,
            DecisionKind::Chain {
                polarity: Polarity::OffIfAllN,
                terms: vec![
                    Term::PerObject("KASAN_SANITIZE".into()),
                    Term::Directory("KASAN_SANITIZE".into()),
                    Term::KernelObject
                ],
                gated: false
            }
        );
        let objtool = rules.decision(MechId::by_name("objtool").unwrap()).unwrap();
        assert!(matches!(objtool.kind, DecisionKind::Chain { gated: true, polarity: Polarity::SkipIfAllY, .. }));
        let kcov = rules.decision(MechId::by_name("kcov").unwrap()).unwrap();
        assert!(
            matches!(&kcov.kind, DecisionKind::Chain { terms, .. } if terms[2] == Term::IfKernelObject(vec![Term::Config("CONFIG_KCOV_INSTRUMENT_ALL".into())]))
        );
    }

    #[test]
    fn stems_follow_the_naming() {
        assert_eq!(Naming::TargetStem.stem("vdso32/note.o"), "vdso32/note");
        assert_eq!(Naming::Basetarget.stem("vdso32/note.o"), "note");
        assert_eq!(Naming::TargetStem.stem("switch.nvhe.o"), "switch.nvhe");
    }
}
