//! One shape for every problem sanpolicy reports: a code, a severity, a message, a location
//! (file:line:col with the byte span), and a hint saying how to fix it.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor::Buffer};
use serde::Serialize;

pub mod fix;

pub use fix::{Fix, FrontEnd, Hint, Invocation};

/// What kind of problem a code names; with the severity it decides how a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The operating system said no: a file missing, of the wrong kind, unreadable, unwritable.
    Io,
    /// The command line asks for something that cannot be done: a bad argument or combination.
    Usage,
    /// A sanpolicy bug: nothing the user gave is wrong.
    Internal,
    /// An input (the policy, a kbuild file, the tree's rules, a workspace) is not valid.
    BadInput,
    /// The tree (or a generated file) differs from the policy: fixed by `sync` or
    /// `gen-makefiles`, never acknowledged.
    Drift,
    /// A fact about the tree that `check` exists to report.
    Finding,
    /// A fact worth saying that never fails a run.
    Warning,
    /// Listed, never failing: an acknowledged finding, a requirement that does not apply.
    Note,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Io => "io",
            Class::Usage => "usage",
            Class::Internal => "internal",
            Class::BadInput => "bad input",
            Class::Drift => "drift",
            Class::Finding => "finding",
            Class::Warning => "warning",
            Class::Note => "note",
        }
    }
}

/// The exit code a diagnostic of a code ends a run with, when it is the worst of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Always this code.
    Always(u8),
    /// The first where a command would write (`gen-makefiles`, `import`), the second where it
    /// only judges (`check`, `--check`, the hook).
    WritingOrJudging(u8, u8),
    /// 0 as a warning; 2 with `--strict`.
    UnlessStrict,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Always(code) => write!(f, "{code}"),
            Exit::WritingOrJudging(writing, judging) => write!(f, "{writing} / {judging}"),
            Exit::UnlessStrict => write!(f, "0 / 2"),
        }
    }
}

/// One row of the code table: everything said about a code, in one place.
#[derive(Debug, Clone, Copy)]
pub struct CodeInfo {
    pub code: Code,
    /// As printed (`error[missing-source]`) and written in `[[acknowledge]] code = "…"`.
    pub name: &'static str,
    pub class: Class,
    /// Whether a policy's `[[acknowledge]]` entry may turn the finding into a note.
    pub acknowledgeable: bool,
    pub exit: Exit,
    /// One line for the README's code table.
    pub doc: &'static str,
}

/// The code table: the [`Code`] enum and [`CODES`] from one list of rows.
macro_rules! codes {
    ($($variant:ident $name:literal $class:ident $ack:literal $exit:expr, $doc:literal;)*) => {
        /// Every diagnostic code. Its row in [`CODES`] says what it means and how a run ends.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code {
            $(#[doc = $doc] $variant,)*
        }

        /// Every code, in the order of [`Code`]: the one table the README's is generated from.
        pub const CODES: &[CodeInfo] = &[
            $(CodeInfo {
                code: Code::$variant,
                name: $name,
                class: Class::$class,
                acknowledgeable: $ack,
                exit: $exit,
                doc: $doc,
            },)*
        ];
    };
}

use Exit::{Always, UnlessStrict, WritingOrJudging};

codes! {
    Io "io" Io false Always(2),
        "a file or directory cannot be used: missing or of the wrong kind (a FIFO, a socket, a device, a directory, named for what it is), too large (a policy over 64 MiB, a kbuild file over 16 MiB), unreadable, not UTF-8 (at the first bad byte), CRLF line endings (at the first `\\r`), read-only, or a write that fails";
    Usage "usage" Usage false Always(2),
        "the command line asks for what cannot be done: a command run outside what it needs (no kernel tree, no git checkout), an output that already exists, a hook sanpolicy did not write without `--force`";
    Internal "internal" Internal false Always(2),
        "a sanpolicy bug: an internal step failed where no input is wrong; please report it with the command line";
    TomlSyntax "toml-syntax" BadInput false Always(2), "the policy is not TOML";
    UnknownKey "unknown-key" BadInput false Always(2),
        "a key is unknown (\"did you mean\"), or an `[[acknowledge]]` names a code that is unknown or cannot be acknowledged";
    WrongType "wrong-type" BadInput false Always(2), "a value has the wrong type";
    MissingKey "missing-key" BadInput false Always(2), "`path`, `why` or a mechanism is missing";
    UnknownMechanism "unknown-mechanism" BadInput false Always(2), "not in the mechanism table (\"did you mean\")";
    EmptyReason "empty-reason" BadInput false Always(2), "`why` is blank";
    DuplicateUnit "duplicate-unit" BadInput false Always(2),
        "one mechanism set twice for the same path under the same condition (however the condition is spelled)";
    SkipAndForce "skip-and-force" BadInput false Always(2),
        "a mechanism both skipped and forced for one path under the same condition";
    BadPath "bad-path" BadInput false Always(2),
        "a path or `kbuild-dir` that is absolute, has `.`/`..`, spaces or `$ # : ; = ( )` or a newline, or a `vars` value that is not a plain name part";
    BadCondition "bad-condition" BadInput false Always(2),
        "a `when` outside the condition grammar: make functions, `$$`, a line break, a `#`, a control character, a `\\`";
    UnknownVariable "unknown-variable" BadInput false Always(2), "a `$(VAR)` in a path without values in `vars`";
    Unsupported "unsupported" BadInput false Always(2),
        "a setting Kbuild cannot express (forcing ftrace for a directory), or a mechanism `derive` cannot derive";
    Rules "rules" BadInput false Always(2), "the tree lacks `scripts/Makefile.lib` or `scripts/Makefile.build`, or they cannot be read";
    MissingDirectory "missing-directory" BadInput false Always(2), "a unit's directory is not in the tree";
    MissingKbuildFile "missing-kbuild-file" BadInput false Always(2), "a unit's directory has no `Makefile` or `Kbuild`";
    BadMarker "bad-marker" BadInput false Always(2),
        "a kbuild file's block markers are broken (missing end, two begins, an end without a begin, a marker continued by `\\`), or a block cannot be appended (the file ends in `\\` or inside a `define`/conditional)";
    HandEditedBlock "hand-edited-block" Drift false WritingOrJudging(2, 1),
        "the checksum in a block's end marker does not match: writing refuses (`--force` overwrites); to `check` and `--check` it is drift";
    MissingSource "missing-source" Finding true Always(1), "a unit's object has no source file in its directory";
    ConflictingDirective "conflicting-directive" Drift false Always(1),
        "a line outside the generated block sets a mechanism the policy also sets, differently";
    UnmanagedDirective "unmanaged-directive" Drift false Always(0),
        "an instrumentation line the policy has no unit for (`sync` adopts it)";
    StaleFile "stale-file" Drift false Always(1), "a generated file differs from what the policy generates";
    Unrepresentable "unrepresentable" Warning true Always(0),
        "a line Kbuild reads that the policy cannot express, so `sync` cannot adopt it";
    PlaceholderReason "placeholder-reason" BadInput false UnlessStrict,
        "a `TODO(sanpolicy import)` reason: a warning; with `--strict` an error per unit";
    RecursionProne "recursion-prone" Finding true Always(1),
        "a requirement (an object that must not be instrumented, or the runtime recurses) is broken";
    UnreadByTree "unread-by-tree" Warning true Always(0), "the tree's rules do not read a mechanism the policy sets";
    Workspace "workspace" BadInput false Always(2), "no usable Cargo workspace";
    UnknownCrate "unknown-crate" BadInput false Always(2), "a `[[crate]]` naming no package of the workspace";
    AmbiguousCrate "ambiguous-crate" BadInput false Always(2), "a `[[crate]]` naming two packages (add `@version`)";
    UnownedTable "unowned-table" BadInput false Always(2), "a `[profile.*]` table sanpolicy does not own";
    UndocumentedAttribute "undocumented-attribute" Finding false Always(1),
        "a `#[sanitize]` attribute in a crate's source without a `[[crate]]` entry saying why";
    UnparsableSource "unparsable-source" Warning false Always(0), "a Rust source the Cargo scan cannot parse";
    BadReason "bad-reason" BadInput false Always(2),
        "`why` or `links` hold what a `#` comment line cannot: a control character, a line reading as a block marker, a line break in a link";
    ConflictingUnits "conflicting-units" BadInput false Always(2),
        "two paths that name one Kbuild variable (6.1's `$(basetarget)`: `x.o` and `sub/x.o`) set both ways";
    Symlink "symlink" BadInput false Always(2),
        "a kbuild file (or a directory above it) links out of the tree, or two directories share one file";
    Drift "drift" Drift false Always(1), "the tree's lines and the policy differ: `sync` or `gen-makefiles` fixes it";
    StaleAcknowledgement "stale-acknowledgement" Finding false Always(1),
        "an `[[acknowledge]]` entry matches no finding of the tree";
    Acknowledged "acknowledged" Note false Always(0), "a finding an `[[acknowledge]]` entry keeps, with its reason";
    NotApplicable "not-applicable" Note false Always(0), "a requirement on an object the tree does not build";
    ReservedProfile "reserved-profile" BadInput false Always(2),
        "a `[[profile]]` named like a profile Cargo defines (`dev`, `release`, `test`, `bench`, …)";
    ProcMacroCrate "proc-macro-crate" BadInput false Always(2), "a sanitizer or `sancov` forced on a proc-macro crate";
    UnlinkedRuntime "unlinked-runtime" Warning false Always(0),
        "a sanitizer forced on a library in a profile that does not enable it, while a member binary linking it is not built with it";
    BadCategory "bad-category" BadInput false Always(2),
        "a unit's `category` that is blank, longer than 40 characters, or holds a control character, `|` or a backtick";
    UnknownSymbol "unknown-symbol" BadInput false Always(2), "a `when` naming a symbol no `Kconfig` file of the tree declares";
    IncludeCycle "include-cycle" BadInput false Always(2), "policy includes form a cycle";
    BadInclude "bad-include" BadInput false Always(2),
        "an include that is absolute, leaves the including policy's directory, is not a regular file or does not exist";
    BadRevision "bad-revision" BadInput false Always(2), "`diff --base REV` is not a commit";
    PolicyRemoved "policy-removed" Drift false Always(1), "pre-commit: the commit deletes the policy from the index";
    DeletedKbuildFile "deleted-kbuild-file" Drift false Always(1),
        "pre-commit: the commit deletes a kbuild file holding the policy's lines";
    Unwritable "unwritable" Io false Always(2),
        "the kernel refuses to open a file to write: immutable or append-only, a read-only mount, no permission";
    ChangedDuringRun "changed-during-run" Io false Always(2),
        "between reading and writing, a file to write changed or a directory on its way was replaced";
    Locked "locked" Io false Always(2),
        "another run has held the tree's write lock for 2 minutes (`fuser -v TREE` shows it), or the file system has no `flock`";
    BadConfig "bad-config" BadInput false Always(2), "a `--config` line that is neither `CONFIG_X=value` nor a comment";
    OpaqueConstruct "opaque-construct" Finding true Always(1),
        "a requirement cannot be proven: an `include`, `$(eval)` or similar line may change the mechanism";
    BadProfileName "bad-profile-name" BadInput false Always(2),
        "a `[[profile]]` name that is not a Cargo profile name (letters, digits, `-`, `_`, starting with a letter)";
    BadCrateName "bad-crate-name" BadInput false Always(2), "a `[[crate]]` `name` that is not a package name or `name@version`";
    DuplicateProfile "duplicate-profile" BadInput false Always(2), "a profile declared twice";
    DuplicateCrate "duplicate-crate" BadInput false Always(2), "two `[[crate]]` entries naming one package";
    FlagsOutsidePolicy "flags-outside-policy" Finding true Always(1),
        "a requirement's object gets its mechanism's flags from a line that is not the mechanism's variable (`CFLAGS_x.o`, `ccflags-y`, … naming `$(CFLAGS_KASAN)` and the like)";
    CentralReset "central-reset" Drift false WritingOrJudging(2, 1),
        "central layout: the policy dropped a directory's line that the central file cannot reset exactly: writing refuses; to `check` and `--check` it is drift";
    RulesDirective "rules-directive" Finding false Always(1),
        "an instrumentation line in `scripts/Makefile.lib` or `scripts/Makefile.build`: Kbuild reads it for every directory, over what units and kbuild files say";
    UnstagedChanges "unstaged-changes" Drift false Always(1),
        "pre-commit: a file the printed fix would read or write differs between the working tree and the index: stage or stash it, then commit again";
    SetTwice "set-twice" Warning true Always(0),
        "a kbuild file sets a variable again below a line, so make never reads the earlier line; import and sync leave that line in the tree";
    BadSnapshot "bad-snapshot" BadInput false Always(2),
        "the effective snapshot cannot be read or fails validation (truncated, edited by hand, its checksum or tree line wrong): restore or regenerate it";
}

impl Code {
    /// This code's row of [`CODES`].
    pub fn info(self) -> &'static CodeInfo {
        &CODES[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.info().name
    }

    /// The code named `name` (as printed), if any.
    pub fn by_name(name: &str) -> Option<Code> {
        CODES.iter().find(|c| c.name == name).map(|c| c.code)
    }

    /// Every code's name, in table order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        CODES.iter().map(|c| c.name)
    }

    /// Whether a policy's `[[acknowledge]]` may name findings of this code.
    pub fn is_acknowledgeable(self) -> bool {
        self.info().acknowledgeable
    }

    /// Bad input stops every command with exit code 2 before anything is written; findings
    /// are what `check` exists to report (exit code 1). A placeholder reason is a warning,
    /// and bad input only where the policy must have real reasons (`--strict`).
    pub fn is_bad_input(self) -> bool {
        matches!(self.info().class, Class::Io | Class::Usage | Class::Internal | Class::BadInput)
    }

    /// Drift: the tree's directives (or a generated file) differ from the policy. The same
    /// codes fail `check`, `gen-makefiles --check` and the pre-commit hook, and cannot be
    /// acknowledged: they are fixed by `sync` or `gen-makefiles`.
    pub fn is_drift(self) -> bool {
        self.info().class == Class::Drift
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The README's code table, rendered from [`CODES`] (`tests/codes.rs` keeps the README's copy
/// equal to it).
pub fn code_table() -> String {
    let mut out = String::from("| code | class | exit | acknowledgeable | what is wrong |\n|---|---|---|---|---|\n");
    for c in CODES {
        let ack = if c.acknowledgeable { "yes" } else { "" };
        let doc = c.doc.replace('|', "\\|");
        out.push_str(&format!("| `{}` | {} | {} | {ack} | {doc} |\n", c.name, c.class.as_str(), c.exit));
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Error,
    Warning,
    /// Listed, never failing: an acknowledged finding, a requirement that does not apply.
    Note,
}

/// Where a diagnostic points: a file, 1-based line and column, and the byte span.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub path: PathBuf,
    pub line: usize,
    #[serde(rename = "column")]
    pub col: usize,
    /// Byte offsets `[start, end)` in the file.
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    pub location: Option<Location>,
    /// Short text under the caret.
    pub label: Option<String>,
    /// How to fix it, in words with the commands in their place.
    pub hint: Option<Hint>,
    /// What the finding is about, for `[[acknowledge]]`.
    pub subject: Option<Subject>,
    /// The command that clears it, when one does (drift: `sync` or `gen-makefiles`).
    pub fix: Option<Fix>,
    /// The command that finishes what `fix` starts, when one must follow it (a line `sync`
    /// takes into the policy that `gen-makefiles` then moves into the block): one fix line
    /// names both, so following it leaves fewer findings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub then: Option<Fix>,
}

/// Exit codes: 0 clean, 1 findings or drift, 2 bad input or usage (nothing was written).
pub const EXIT_OK: u8 = 0;
pub const EXIT_FINDINGS: u8 = 1;
pub const EXIT_BAD_INPUT: u8 = 2;

/// What a finding is about: the unit or requirement path it names (a directory, ending in `/`,
/// for a finding on a directory unit; the object for a finding on an object) and the mechanism,
/// for findings about one. An acknowledgement matches a finding's subject exactly.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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
            then: None,
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

    /// Say which command clears it, and which must follow that one.
    pub fn fixed_by_then(mut self, fix: Fix, then: Fix) -> Diagnostic {
        self.fix = Some(fix);
        self.then = Some(then);
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

    pub fn hint(mut self, hint: impl Into<Hint>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    /// The hint as text, its commands rendered for `sanpolicy` with no flags (for logs and tests;
    /// output renders for the invocation in use).
    pub fn help(&self) -> Option<String> {
        self.hint.as_ref().map(|h| h.render(&Invocation::default()))
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
#[derive(Debug, Default, Clone, Serialize)]
#[serde(transparent)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// The fixes of the failing findings, in the order to run them: what every command's
    /// closing line names.
    pub fn fixes(&self) -> std::collections::BTreeSet<Fix> {
        self.0
            .iter()
            .filter(|d| d.is_error())
            .flat_map(|d| d.fix.iter().chain(d.fix.as_ref().and(d.then.as_ref())))
            .cloned()
            .collect()
    }

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
/// Each hint's commands are rendered for `invocation`.
pub fn render(diags: &Diagnostics, sources: &mut Sources, color: bool, invocation: &Invocation) -> String {
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
            cs = cs.with_notes(vec![shown(&format!("help: {}", hint.render(invocation)))]);
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

    /// The table is in enum order (so [`Code::info`] indexes it), names are unique kebab-case,
    /// and a row's class agrees with its exit code and whether it can be acknowledged.
    #[test]
    fn the_code_table_is_consistent() {
        let mut names = std::collections::BTreeSet::new();
        for (i, c) in CODES.iter().enumerate() {
            assert_eq!(c.code as usize, i, "`{}` is out of order", c.name);
            assert!(names.insert(c.name), "`{}` twice", c.name);
            assert!(c.name.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-'), "`{}`", c.name);
            assert_eq!(Code::by_name(c.name), Some(c.code));
            assert!(!c.doc.contains('\n') && !c.doc.ends_with('.'), "`{}`: one line, no final period", c.name);
            let exits: Vec<u8> = match c.exit {
                Exit::Always(e) => vec![e],
                Exit::WritingOrJudging(w, j) => vec![w, j],
                Exit::UnlessStrict => vec![0, 2],
            };
            match c.class {
                Class::Io | Class::Usage | Class::Internal | Class::BadInput => {
                    assert!(exits.contains(&2), "{}", c.name)
                }
                Class::Finding => assert_eq!(exits, [1], "{}", c.name),
                Class::Drift => assert!(exits.iter().all(|e| *e <= 2), "{}", c.name),
                Class::Warning | Class::Note => assert_eq!(exits, [0], "{}", c.name),
            }
            if c.acknowledgeable {
                assert!(matches!(c.class, Class::Finding | Class::Warning), "`{}`: only findings", c.name);
            }
        }
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
        let out = render(&diags, &mut sources, false, &Invocation::default());
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
        let out = render(&diags, &mut sources, false, &Invocation::default());
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
