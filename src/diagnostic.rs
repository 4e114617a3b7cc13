//! One shape for every problem sanpolicy reports: a code, a severity, a message, a location
//! (file:line:col with the byte span), and a hint saying how to fix it.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor::Buffer};

/// Every diagnostic code, with whether it means bad input (exit 2) or a finding (exit 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Code {
    Io,
    TomlSyntax,
    UnknownKey,
    WrongType,
    MissingKey,
    UnknownMechanism,
    EmptyReason,
    DuplicateUnit,
    SkipAndForce,
    BadPath,
    BadCondition,
    UnknownVariable,
    Unsupported,
    Rules,
    MissingDirectory,
    MissingKbuildFile,
    BadMarker,
    HandEditedBlock,
    MissingSource,
    ConflictingDirective,
    UnmanagedDirective,
    StaleFile,
    Unrepresentable,
    PlaceholderReason,
    RecursionProne,
    UnreadByTree,
    Workspace,
    UnknownCrate,
    AmbiguousCrate,
    UnownedTable,
    UndocumentedAttribute,
    UnparsableSource,
    BadReason,
    ConflictingUnits,
    Symlink,
    Drift,
    StaleAcknowledgement,
    Acknowledged,
    NotApplicable,
    ReservedProfile,
    ProcMacroCrate,
    UnlinkedRuntime,
    BadCategory,
    UnknownSymbol,
    IncludeCycle,
    BadInclude,
    BadRevision,
    PolicyRemoved,
    DeletedKbuildFile,
    Unwritable,
    ChangedDuringRun,
    Locked,
    BadConfig,
    OpaqueConstruct,
    BadProfileName,
    BadCrateName,
    DuplicateProfile,
    DuplicateCrate,
    FlagsOutsidePolicy,
    CentralReset,
    BadSnapshot,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Io => "io",
            Code::TomlSyntax => "toml-syntax",
            Code::UnknownKey => "unknown-key",
            Code::WrongType => "wrong-type",
            Code::MissingKey => "missing-key",
            Code::UnknownMechanism => "unknown-mechanism",
            Code::EmptyReason => "empty-reason",
            Code::DuplicateUnit => "duplicate-unit",
            Code::SkipAndForce => "skip-and-force",
            Code::BadPath => "bad-path",
            Code::BadCondition => "bad-condition",
            Code::UnknownVariable => "unknown-variable",
            Code::Unsupported => "unsupported",
            Code::Rules => "rules",
            Code::MissingDirectory => "missing-directory",
            Code::MissingKbuildFile => "missing-kbuild-file",
            Code::BadMarker => "bad-marker",
            Code::HandEditedBlock => "hand-edited-block",
            Code::MissingSource => "missing-source",
            Code::ConflictingDirective => "conflicting-directive",
            Code::UnmanagedDirective => "unmanaged-directive",
            Code::StaleFile => "stale-file",
            Code::Unrepresentable => "unrepresentable",
            Code::PlaceholderReason => "placeholder-reason",
            Code::RecursionProne => "recursion-prone",
            Code::UnreadByTree => "unread-by-tree",
            Code::Workspace => "workspace",
            Code::UnknownCrate => "unknown-crate",
            Code::AmbiguousCrate => "ambiguous-crate",
            Code::UnownedTable => "unowned-table",
            Code::UndocumentedAttribute => "undocumented-attribute",
            Code::UnparsableSource => "unparsable-source",
            Code::BadReason => "bad-reason",
            Code::ConflictingUnits => "conflicting-units",
            Code::Symlink => "symlink",
            Code::Drift => "drift",
            Code::StaleAcknowledgement => "stale-acknowledgement",
            Code::Acknowledged => "acknowledged",
            Code::NotApplicable => "not-applicable",
            Code::ReservedProfile => "reserved-profile",
            Code::ProcMacroCrate => "proc-macro-crate",
            Code::UnlinkedRuntime => "unlinked-runtime",
            Code::BadCategory => "bad-category",
            Code::UnknownSymbol => "unknown-symbol",
            Code::IncludeCycle => "include-cycle",
            Code::BadInclude => "bad-include",
            Code::BadRevision => "bad-revision",
            Code::PolicyRemoved => "policy-removed",
            Code::DeletedKbuildFile => "deleted-kbuild-file",
            Code::Unwritable => "unwritable",
            Code::ChangedDuringRun => "changed-during-run",
            Code::Locked => "locked",
            Code::BadConfig => "bad-config",
            Code::OpaqueConstruct => "opaque-construct",
            Code::BadProfileName => "bad-profile-name",
            Code::BadCrateName => "bad-crate-name",
            Code::DuplicateProfile => "duplicate-profile",
            Code::DuplicateCrate => "duplicate-crate",
            Code::FlagsOutsidePolicy => "flags-outside-policy",
            Code::CentralReset => "central-reset",
            Code::BadSnapshot => "bad-snapshot",
        }
    }

    /// Bad input stops every command with exit code 2 before anything is written; findings
    /// are what `check` exists to report (exit code 1). A placeholder reason is a warning,
    /// and bad input only where the policy must have real reasons (`--strict`).
    pub fn is_bad_input(self) -> bool {
        !matches!(
            self,
            Code::MissingSource
                | Code::ConflictingDirective
                | Code::UnmanagedDirective
                | Code::StaleFile
                | Code::Unrepresentable
                | Code::RecursionProne
                | Code::UnreadByTree
                | Code::HandEditedBlock
                | Code::UndocumentedAttribute
                | Code::UnparsableSource
                | Code::PolicyRemoved
                | Code::DeletedKbuildFile
                | Code::UnlinkedRuntime
                | Code::Drift
                | Code::OpaqueConstruct
                | Code::FlagsOutsidePolicy
                | Code::CentralReset
                | Code::StaleAcknowledgement
                | Code::Acknowledged
                | Code::NotApplicable
        )
    }

    /// Drift: the tree's directives (or a generated file) differ from the policy. The same
    /// codes fail `check`, `gen-makefiles --check` and the pre-commit hook, and cannot be
    /// acknowledged: they are fixed by `sync` or `gen-makefiles`.
    pub fn is_drift(self) -> bool {
        matches!(
            self,
            Code::Drift
                | Code::StaleFile
                | Code::UnmanagedDirective
                | Code::ConflictingDirective
                | Code::HandEditedBlock
                | Code::PolicyRemoved
                | Code::DeletedKbuildFile
                | Code::CentralReset
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
    /// Listed, never failing: an acknowledged finding, a requirement that does not apply.
    Note,
}

/// Where a diagnostic points: a file, 1-based line and column, and the byte span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    pub line: usize,
    pub col: usize,
    pub span: Range<usize>,
}

impl Location {
    pub fn from_span(path: &Path, text: &str, span: Range<usize>) -> Location {
        let start = span.start.min(text.len());
        let before = &text[..floor_char_boundary(text, start)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        Location { path: path.to_path_buf(), line, col, span }
    }

    /// Like [`Location::from_span`], using a precomputed index of `text`'s line starts, for
    /// files with many locations (a large policy).
    pub fn indexed(path: &Path, text: &str, lines: &LineIndex, span: Range<usize>) -> Location {
        let start = floor_char_boundary(text, span.start.min(text.len()));
        let line = lines.starts.partition_point(|s| *s <= start);
        let line_start = lines.starts[line - 1];
        let col = text[line_start..start].chars().count() + 1;
        Location { path: path.to_path_buf(), line, col, span }
    }

    /// A location at a whole line (1-based) of `text`.
    pub fn at_line(path: &Path, text: &str, line: usize) -> Location {
        let start: usize = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
        let len = text[start..].find('\n').unwrap_or(text.len() - start);
        Location::from_span(path, text, start..start + len)
    }

    /// The first invalid byte of `bytes`, which are not UTF-8. Line and column count in the
    /// valid prefix; the span covers the replacement character the text is rendered with.
    pub fn invalid_utf8(path: &Path, bytes: &[u8], error: std::str::Utf8Error) -> Location {
        let at = error.valid_up_to();
        let text = String::from_utf8_lossy(bytes);
        Location::from_span(path, &text, at..at + char::REPLACEMENT_CHARACTER.len_utf8())
    }

    /// A location for a file as a whole (no particular line).
    pub fn file(path: &Path) -> Location {
        Location { path: path.to_path_buf(), line: 0, col: 0, span: 0..0 }
    }
}

/// Byte offsets where the lines of a text start.
#[derive(Debug, Clone)]
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        LineIndex { starts }
    }

    /// [`Location::at_line`] in constant time: many locations in one large file.
    pub fn line(&self, path: &Path, text: &str, line: usize) -> Location {
        let Some(&start) = self.starts.get(line.saturating_sub(1)) else { return Location::at_line(path, text, line) };
        let end = self.starts.get(line).map_or(text.len(), |next| next - 1).max(start);
        Location { path: path.to_path_buf(), line: line.max(1), col: 1, span: start..end }
    }
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.path.display())
        } else {
            write!(f, "{}:{}:{}", self.path.display(), self.line, self.col)
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    pub location: Option<Location>,
    /// Short text under the caret.
    pub label: Option<String>,
    /// How to fix it.
    pub hint: Option<String>,
    /// What the finding is about, for `[[acknowledge]]`.
    pub subject: Option<Subject>,
    /// The command that clears it, when one does (drift: `sync` or `gen-makefiles`).
    pub fix: Option<Fix>,
}

/// Exit codes: 0 clean, 1 findings or drift, 2 bad input or usage (nothing was written).
pub const EXIT_OK: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
pub const EXIT_BAD_INPUT: u8 = 2;

/// What a finding is about: the unit or requirement path it names (a directory, ending in `/`,
/// for a finding on a directory unit; the object for a finding on an object) and the mechanism,
/// for findings about one. An acknowledgement matches a finding's subject exactly.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Subject {
    pub path: String,
    pub mechanism: Option<crate::mechanism::MechId>,
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mechanism {
            Some(m) => write!(f, "`{}` `{m}`", self.path),
            None => write!(f, "`{}`", self.path),
        }
    }
}

/// A command that clears a finding. Findings carry it typed, so that the closing line of a
/// command is made from the same fixes as the findings' `help:` lines, rendered with the front
/// end in use (`sanpolicy …` or `cargo xtask …`): two lines of output cannot contradict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fix {
    /// Take the tree's changes into the policy (run first: it moves no kbuild line).
    Sync,
    /// Write the policy into the tree.
    GenMakefiles,
}

impl Fix {
    /// The command line, for the front end `program`.
    pub fn command(self, program: &str) -> String {
        match self {
            Fix::Sync => format!("{program} sync"),
            Fix::GenMakefiles => format!("{program} gen-makefiles"),
        }
    }

    /// `fixes` as one sequence of commands to run in order (`a`, then `b`).
    pub fn sequence(fixes: &std::collections::BTreeSet<Fix>, program: &str) -> String {
        let steps: Vec<String> = fixes.iter().map(|f| format!("`{}`", f.command(program))).collect();
        steps.join(", then ")
    }
}

impl Diagnostic {
    pub fn error(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: message.into(),
            location: None,
            label: None,
            hint: None,
            subject: None,
            fix: None,
        }
    }

    pub fn note(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Note, ..Diagnostic::error(code, message) }
    }

    /// Say what the finding is about, so a policy can acknowledge it.
    pub fn about(mut self, path: &str, mechanism: Option<crate::mechanism::MechId>) -> Diagnostic {
        self.subject = Some(Subject { path: path.to_string(), mechanism });
        self
    }

    /// Say which command clears it.
    pub fn fixed_by(mut self, fix: Fix) -> Diagnostic {
        self.fix = Some(fix);
        self
    }

    pub fn warning(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(code, message) }
    }

    pub fn at(mut self, location: Location) -> Diagnostic {
        self.location = Some(location);
        self
    }

    pub fn label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = Some(label.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// One line, for logs and tests: `path:line:col: error[code]: message`.
    pub fn one_line(&self) -> String {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        let place = self.location.as_ref().map(|l| format!("{l}: ")).unwrap_or_default();
        format!("{place}{sev}[{}]: {}", self.code.as_str(), self.message)
    }
}

/// A bag of diagnostics collected across a whole run (never stop at the first problem).
#[derive(Debug, Default, Clone)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }

    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }

    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }

    pub fn has_bad_input(&self) -> bool {
        self.0.iter().any(|d| d.is_error() && d.code.is_bad_input())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }

    /// Stable order: by file, position, then code.
    pub fn sorted(mut self) -> Diagnostics {
        fn key(d: &Diagnostic) -> (&Path, usize, usize) {
            d.location.as_ref().map_or((Path::new(""), 0, 0), |l| (l.path.as_path(), l.line, l.col))
        }
        self.0.sort_by(|a, b| key(a).cmp(&key(b)).then(a.code.cmp(&b.code)).then(a.message.cmp(&b.message)));
        self.0.dedup();
        self
    }
}

/// Source texts for rendering snippets; files not inserted are read from disk on demand.
#[derive(Debug, Default)]
pub struct Sources {
    texts: HashMap<PathBuf, String>,
}

impl Sources {
    pub fn insert(&mut self, path: &Path, text: &str) {
        self.texts.insert(path.to_path_buf(), text.to_string());
    }

    fn get(&mut self, path: &Path) -> Option<&str> {
        if !self.texts.contains_key(path) {
            let text = crate::input::read(path, crate::input::POLICY_LIMIT).ok()?;
            self.texts.insert(path.to_path_buf(), String::from_utf8_lossy(&text).into_owned());
        }
        self.texts.get(path).map(String::as_str)
    }
}

/// Text as it may be printed to a terminal: a control character from the input (a lone `\r`,
/// an escape sequence, a NUL, a C1 control) would move the cursor or recolour the screen and
/// hide the very byte the diagnostic points at, so each is shown visibly: a C0 control as its
/// Unicode control picture (`␍`, `␛`), a C1 control as `\u{85}`. Newlines, tabs and the `\r`
/// of a CRLF stay, so lines and columns keep their meaning.
#[derive(Debug)]
struct Displayable {
    text: String,
    /// For every replaced character: its byte offset in the original and how many bytes the
    /// shown text has grown by up to and including it, ascending.
    growth: Vec<(usize, usize)>,
}

impl Displayable {
    fn new(original: &str) -> Displayable {
        let mut text = String::with_capacity(original.len());
        let mut growth = Vec::new();
        let mut grown = 0;
        let bytes = original.as_bytes();
        for (i, c) in original.char_indices() {
            let crlf = c == '\r' && bytes.get(i + 1) == Some(&b'\n');
            match visible(c).filter(|_| !crlf) {
                Some(shown) => {
                    grown += shown.len() - c.len_utf8();
                    growth.push((i, grown));
                    text.push_str(&shown);
                }
                None => text.push(c),
            }
        }
        Displayable { text, growth }
    }

    /// A span of the original text, moved to where the same bytes sit in the shown text.
    fn span(&self, span: Range<usize>) -> Range<usize> {
        let shift = |offset: usize| match self.growth.partition_point(|&(at, _)| at < offset) {
            0 => offset,
            n => offset + self.growth[n - 1].1,
        };
        shift(span.start)..shift(span.end)
    }
}

/// A message, label, note or path as it may be printed (see [`Displayable`]): one line, so a
/// newline from the input (a file name, a quoted value) is shown as `␊` too and cannot start a
/// line that reads as a diagnostic of its own.
fn shown(text: &str) -> String {
    Displayable::new(&text.replace('\n', "\u{240a}")).text
}

/// A source line longer than this is shown as a window around the span: a diagnostic quotes
/// the offending position, never a whole file that happens to be one line (an environment
/// block, a minified file).
const MAX_SHOWN_LINE: usize = 200;
/// Bytes of context kept on each side of the span in a clipped line.
const CLIP_CONTEXT: usize = 60;

/// `text` with the line holding `span` clipped to a window around it, and the span moved to
/// match; `None` when the line is short enough to show whole.
fn clipped(text: &str, span: Range<usize>) -> Option<(String, Range<usize>)> {
    let start = floor_char_boundary(text, span.start.min(text.len()));
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    if line_end - line_start <= MAX_SHOWN_LINE {
        return None;
    }
    // A span running over most of the line (a parser's "from here on") is shown by its start.
    let end = span.end.clamp(start, line_end).max((start + 1).min(line_end)).min(start + CLIP_CONTEXT);
    let end = floor_char_boundary(text, end.min(line_end));
    let from = floor_char_boundary(text, start.saturating_sub(CLIP_CONTEXT).max(line_start));
    let mut to = (end + CLIP_CONTEXT).min(line_end).max(end);
    while !text.is_char_boundary(to) {
        to += 1;
    }
    let (before, after) = (if from > line_start { "…" } else { "" }, if to < line_end { "…" } else { "" });
    let out = format!("{}{before}{}{after}{}", &text[..line_start], &text[from..to], &text[line_end..]);
    let moved = line_start + before.len() + (start - from);
    Some((out, moved..moved + (span.end.min(end).max(start) - start)))
}

fn visible(c: char) -> Option<String> {
    match c {
        '\n' | '\t' => None,
        '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32).map(String::from),
        '\u{7f}' => Some('\u{2421}'.to_string()),
        c if c.is_control() => Some(c.escape_unicode().to_string()),
        _ => None,
    }
}

/// Render diagnostics the way rustc and cargo-deny do: code, message, `┌─ file:line:col`,
/// the source line with a caret, then the hint.
pub fn render(diags: &Diagnostics, sources: &mut Sources, color: bool) -> String {
    let mut files = SimpleFiles::new();
    let mut ids: HashMap<PathBuf, (usize, Displayable)> = HashMap::new();
    let mut buffer = if color { Buffer::ansi() } else { Buffer::no_color() };
    let config = term::Config::default();
    for d in diags.iter() {
        let mut cs = match d.severity {
            Severity::Error => CsDiagnostic::error(),
            Severity::Warning => CsDiagnostic::warning(),
            Severity::Note => CsDiagnostic::note(),
        }
        .with_code(d.code.as_str())
        .with_message(shown(&d.message));
        if let Some(loc) = d.location.as_ref().filter(|l| l.line > 0) {
            if let Some(text) = sources.get(&loc.path) {
                let name = shown(&loc.path.display().to_string());
                let (id, span) = match clipped(text, loc.span.clone()) {
                    // A clipped line is its own file for this one diagnostic.
                    Some((text, span)) => {
                        let display = Displayable::new(&text);
                        let span = display.span(span);
                        (files.add(name, display.text), span)
                    }
                    None => {
                        let (id, display) = ids.entry(loc.path.clone()).or_insert_with(|| {
                            let display = Displayable::new(text);
                            (files.add(name, display.text.clone()), display)
                        });
                        (*id, display.span(loc.span.clone()))
                    }
                };
                let label = Label::primary(id, span);
                cs = cs.with_labels(vec![match &d.label {
                    Some(l) => label.with_message(shown(l)),
                    None => label,
                }]);
            } else {
                cs = cs.with_notes(vec![shown(&format!("at {loc}"))]);
            }
        } else if let Some(loc) = &d.location {
            cs = cs.with_notes(vec![shown(&format!("in {loc}"))]);
        }
        if let Some(hint) = &d.hint {
            // `with_notes` appends (codespan-reporting 0.12): pass only the new note.
            cs = cs.with_notes(vec![shown(&format!("help: {hint}"))]);
        }
        if term::emit(&mut buffer, &config, &files, &cs).is_err() {
            // A span outside its file (the file changed since): fall back to one line.
            use std::io::Write;
            let _ = writeln!(buffer, "{}", shown(&d.one_line()));
        }
    }
    String::from_utf8_lossy(buffer.as_slice()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let text = "a = 1\nbb = \"x\"\n";
        let loc = Location::from_span(Path::new("p.toml"), text, 11..14);
        assert_eq!((loc.line, loc.col), (2, 6));
        let index = LineIndex::new(text);
        assert_eq!(Location::indexed(Path::new("p.toml"), text, &index, 11..14), loc);
        assert_eq!(Location::indexed(Path::new("p.toml"), text, &index, 0..1).line, 1);
        let at = Location::at_line(Path::new("p.toml"), text, 2);
        assert_eq!(&text[at.span.clone()], "bb = \"x\"");
    }

    #[test]
    fn bad_input_and_findings_are_told_apart() {
        assert!(Code::UnknownMechanism.is_bad_input());
        assert!(!Code::RecursionProne.is_bad_input());
    }

    #[test]
    fn control_characters_are_shown_as_pictures_and_spans_follow_them() {
        let shown = Displayable::new("a\rb\x1b[31mc\r\nd\te");
        assert_eq!(shown.text, "a\u{240d}b\u{241b}[31mc\r\nd\te");
        // `c` is byte 8 of the original; the two pictures before it add 2 bytes each.
        assert_eq!(&shown.text[shown.span(8..9)], "c");
        assert_eq!(&shown.text[shown.span(1..2)], "\u{240d}");
        assert_eq!(shown.span(0..1), 0..1);
        let c1 = Displayable::new("x\u{85}y");
        assert_eq!(c1.text, "x\\u{85}y");
        assert_eq!(&c1.text[c1.span(3..4)], "y");
        assert_eq!(&c1.text[c1.span(1..3)], "\\u{85}");
    }

    #[test]
    fn rendered_snippet_holds_no_raw_control_character() {
        let path = Path::new("p.toml");
        let text = "a = 1\nx = \"\x1b[2J\r\"\n";
        let mut diags = Diagnostics::default();
        diags.push(Diagnostic::error(Code::TomlSyntax, "bad").at(Location::from_span(path, text, 15..16)));
        let mut sources = Sources::default();
        sources.insert(path, text);
        let out = render(&diags, &mut sources, false);
        assert!(!out.contains('\x1b') && !out.contains('\r'), "{out:?}");
        assert!(out.contains("x = \"\u{241b}[2J\u{240d}\""), "{out}");
        // The caret sits under the carriage return's picture: column 11 of the shown line.
        let line = out.lines().find(|l| l.contains("x = ")).unwrap();
        let caret = out.lines().skip_while(|l| !l.contains("x = ")).nth(1).unwrap();
        let at = |s: &str, c: char| s.chars().position(|x| x == c).unwrap();
        assert_eq!(at(caret, '^'), at(line, '\u{240d}'), "{out}");
    }

    #[test]
    fn names_with_newlines_cannot_forge_a_line_and_long_lines_are_clipped() {
        let path = Path::new("evil\nerror[io]: forged.toml");
        let text = format!("x = 1 {}SECRET{}\n", "A".repeat(300), "B".repeat(300));
        let mut diags = Diagnostics::default();
        diags.push(
            Diagnostic::error(Code::TomlSyntax, "bad `a\nerror[io]: forged`")
                .at(Location::from_span(path, &text, 6..7))
                .hint("fix\nerror[x]: y"),
        );
        let mut sources = Sources::default();
        sources.insert(path, &text);
        let out = render(&diags, &mut sources, false);
        assert_eq!(out.lines().filter(|l| l.starts_with("error")).count(), 1, "{out}");
        assert!(out.contains("evil\u{240a}error[io]: forged.toml:1:7"), "{out}");
        assert!(!out.contains("SECRET") && out.len() < 1000, "{out}");
        let caret = out.lines().find(|l| l.contains('^')).unwrap();
        let line = out.lines().find(|l| l.contains("x = 1 ")).unwrap();
        assert_eq!(caret.find('^'), line.find("1 A").map(|i| i + 2), "{out}");
        // Far into the line, the window moves with the span.
        let far = Location::from_span(path, &text, 306..312);
        let (clip, span) = clipped(&text, far.span).unwrap();
        assert_eq!(&clip[span], "SECRET");
        assert!(clip.starts_with('…') && clip.len() < 200, "{clip}");
    }

    #[test]
    fn invalid_utf8_is_located_at_its_first_bad_byte() {
        let bytes: Vec<u8> = [&b"ok\nab"[..], &[0xff], b"c\n"].concat();
        let error = std::str::from_utf8(&bytes).unwrap_err();
        let loc = Location::invalid_utf8(Path::new("Makefile"), &bytes, error);
        assert_eq!((loc.line, loc.col), (2, 3));
        assert_eq!(&String::from_utf8_lossy(&bytes)[loc.span], "\u{FFFD}");
    }
}
