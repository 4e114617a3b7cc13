//! Reading kbuild files (`Makefile`, `Kbuild`, `Makefile.*`): logical lines, assignments with
//! their enclosing conditionals and the comment paragraph above them, sanpolicy's generated
//! block markers, and which assignments are instrumentation directives.

mod comment;
mod condition;
mod constructs;
mod directive;
mod read;
mod target;
mod tree;
mod twice;
mod variants;

pub use comment::{comment_problem, forges_marker};
pub use condition::{config_symbols, CondKey, CondKind, Condition};
pub use constructs::{NamePattern, Opaque};
pub use directive::{classify, is_plain_flag, unmodelled, Directive, DirectiveValue};
pub use read::{decode_kbuild, kbuild_file, read_kbuild, unreadable};
pub use target::{TargetKernelObject, KERNEL_OBJECT};
pub use tree::{
    is_kbuild_name, is_swept, read_kbuild_files, skipped_file, walk_kbuild_files, walk_kbuild_files_with, Walk,
};
pub use twice::overridden_by;
pub use variants::expand_variants;

/// Assignment operators of GNU make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `:=` or `::=`
    Simple,
    /// `:::=`
    Immediate,
    /// `=`
    Recursive,
    /// `+=`
    Append,
    /// `?=`
    Conditional,
    /// `!=`
    Shell,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Simple => ":=",
            Op::Immediate => ":::=",
            Op::Recursive => "=",
            Op::Append => "+=",
            Op::Conditional => "?=",
            Op::Shell => "!=",
        }
    }
}

/// One enclosing conditional of an assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub condition: Condition,
    /// 1-based line of the `if…` directive.
    pub line: usize,
    /// The assignment is in the `else` branch.
    pub in_else: bool,
}

/// A variable assignment as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The variable name, unexpanded (`KASAN_SANITIZE_head$(BITS).o`).
    pub name: String,
    pub op: Op,
    /// The value as make stores it: leading blanks dropped, trailing blanks kept, no comment.
    pub value: String,
    /// Text after an unescaped `#` on the same line.
    pub inline_comment: Option<String>,
    /// `export`, `override` or `private` prefixes.
    pub modifiers: Vec<String>,
    /// 1-based first and last physical line.
    pub line: usize,
    pub end_line: usize,
    /// Enclosing conditionals, outermost first.
    pub frames: Vec<Frame>,
    /// The comment paragraph directly above (joined, `#` stripped); shared by a block of lines.
    pub comment: Option<String>,
    /// First line of that comment paragraph.
    pub comment_line: Option<usize>,
    /// Inside sanpolicy's generated block.
    pub in_block: bool,
    /// The line was joined from continuation lines.
    pub continued: bool,
    /// Byte range of the assignment's physical lines in the file, final newline included.
    pub bytes: std::ops::Range<usize>,
    /// Byte offset in the file where the value starts (meaningful when not `continued`).
    pub value_start: usize,
    /// Leading blanks of the line.
    pub indent: String,
}

impl Assignment {
    /// A plain, unconditional `:=` or `=` on one line: what make reads as written.
    pub fn is_plain(&self) -> bool {
        self.frames.is_empty()
            && !self.continued
            && self.modifiers.is_empty()
            && matches!(self.op, Op::Simple | Op::Recursive)
    }

    /// The conditions the line is active under, outermost first, each as a condition that holds
    /// (an `else` branch becomes the negated test), in canonical spelling: what a unit's `when`
    /// says when it means this line.
    pub fn when(&self) -> Vec<String> {
        when_of(&self.frames)
    }

    /// The conditions as keys: what lines and units are matched by, so that one condition
    /// spelled two ways (`ifeq ($(CONFIG_X),y)`, `ifeq "y" "$(CONFIG_X)"`) is one condition.
    pub fn when_keys(&self) -> Vec<CondKey> {
        self.frames.iter().map(|f| if f.in_else { f.condition.negated().key() } else { f.condition.key() }).collect()
    }
}

/// The keys of conditions written as text (a unit's `when`, an imported line's conditions).
pub fn when_keys(when: &[String]) -> Vec<CondKey> {
    when.iter().map(|c| condition_key(c)).collect()
}

/// The key of one condition written as text; a text that does not parse is equal only to itself.
pub fn condition_key(when: &str) -> CondKey {
    Condition::parse(when).unwrap_or_else(|_| Condition::unparsed(when)).key()
}

/// See [`Assignment::when`].
pub fn when_of(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(|f| if f.in_else { f.condition.negated().text } else { f.condition.canonical().text }).collect()
}

/// One branch of a conditional: the lines between an `if…`/`else` and the `else`/`endif` that
/// closes it, with the conditions that hold inside (see [`Assignment::when`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Branch {
    pub when: Vec<String>,
    /// 1-based lines of the opening `if…`/`else` and of the closing `else`/`endif`.
    pub open_line: usize,
    pub close_line: usize,
    /// Byte offset where the closing line starts, and where the line after the opening one starts.
    pub close_byte: usize,
    pub body_byte: usize,
    /// Leading blanks of the lines inside, as the first assignment in it is indented.
    pub indent: String,
}

/// Where sanpolicy's generated block sits, by 1-based physical line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub begin_line: usize,
    pub end_line: usize,
    /// Byte range of the whole block, markers included, with the final newline.
    pub byte_range: std::ops::Range<usize>,
    /// The checksum recorded in the end marker.
    pub recorded_checksum: Option<String>,
    /// The text between the markers.
    pub body: String,
}

/// A structural problem with the markers (reported as bad input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerProblem {
    pub line: usize,
    pub message: String,
}

/// A parsed kbuild file.
#[derive(Debug, Clone, Default)]
pub struct KbuildFile {
    pub assignments: Vec<Assignment>,
    pub block: Option<Block>,
    pub marker_problems: Vec<MarkerProblem>,
    /// A `define` or conditional still open at the end of the file: its 1-based line and
    /// keyword. Make rejects such a file, and a block appended to it would land inside.
    pub unclosed: Option<(usize, String)>,
    /// The first `else` or `endif` make refuses as extraneous (no conditional open, or a second
    /// `else` in one): its 1-based line and keyword.
    pub extraneous: Option<(usize, String)>,
    /// Conditional directives in source order (for evaluation).
    pub events: Vec<Event>,
    /// Every branch of every conditional, in the order they close.
    pub branches: Vec<Branch>,
    /// Where make may change directive variables in ways sanpolicy cannot read (`$(eval)`,
    /// `include`, target-specific values, …; the table in `constructs`), in line order.
    pub opaque: Vec<Opaque>,
    /// Target-specific `is-kernel-object` lines the reader models (`target`), by `Event::Target`.
    pub kernel_object_lines: Vec<TargetKernelObject>,
    /// Index into `assignments` and classification of every instrumentation directive, in order
    /// (classified once at parse time; the resolver asks for them many times).
    directives: Vec<(usize, Directive)>,
    /// Indices into `assignments` by variable name, in file order: built on first use, so that
    /// asking about one name is not a walk over every line (a directory of 100,000 units asks
    /// about each).
    by_name: NameIndex,
}

/// [`KbuildFile::setters`]' index: built on first use, so it is no part of what a file is
/// (two parses of one text compare and print alike, asked or not).
#[derive(Clone, Default)]
struct NameIndex(std::sync::OnceLock<std::collections::HashMap<String, Vec<usize>>>);

impl std::fmt::Debug for NameIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameIndex")
    }
}

/// What an evaluator walks: conditionals and assignments in source order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    If(Condition),
    Else(Option<Condition>),
    Endif,
    Assign(usize),
    /// `undefine` of the (unexpanded) name of `assignments[i]`.
    Undefine(usize),
    /// The target-specific `is-kernel-object` of `kernel_object_lines[i]`.
    Target(usize),
}

impl KbuildFile {
    /// Names of the variables the generated block assigns.
    pub fn block_names(&self) -> std::collections::BTreeSet<&str> {
        self.assignments.iter().filter(|a| a.in_block).map(|a| a.name.as_str()).collect()
    }

    /// Whether every line that sets `name` is a plain, unconditional `:=` or `=` of one physical
    /// line: then make reads the last of them, wherever the generated block stands, and the
    /// block layout can take a hand-written one into the block (see `import::scan` and
    /// `check::drift`). Anything else (a conditional, `+=`, `override`) is left to a person.
    pub fn plainly_set(&self, name: &str) -> bool {
        self.setters(name).all(Assignment::is_plain)
    }

    /// The last line that sets `name`: the one make reads when [`Self::plainly_set`] holds.
    pub fn last_setter(&self, name: &str) -> Option<&Assignment> {
        self.setters(name).max_by_key(|a| a.line)
    }

    /// Every assignment to `name` (as written, unexpanded), in file order.
    pub fn setters<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a Assignment> + 'a {
        let index = self.by_name.0.get_or_init(|| {
            let mut map: std::collections::HashMap<String, Vec<usize>> = std::collections::HashMap::new();
            for (i, a) in self.assignments.iter().enumerate() {
                map.entry(a.name.clone()).or_default().push(i);
            }
            map
        });
        index.get(name).map_or(&[][..], Vec::as_slice).iter().map(|&i| &self.assignments[i])
    }

    /// The instrumentation directives among the assignments.
    pub fn directives(&self) -> impl Iterator<Item = (usize, &Directive)> + '_ {
        self.directives.iter().map(|(i, d)| (*i, d))
    }
}

pub const BEGIN_MARKER: &str = "# BEGIN sanpolicy generated block";
pub const END_MARKER: &str = "# END sanpolicy generated block";

/// Make's assignment operators, longest first so that a prefix never wins.
const OPERATORS: [(&str, Op); 7] = [
    (":::=", Op::Immediate),
    ("::=", Op::Simple),
    (":=", Op::Simple),
    ("+=", Op::Append),
    ("?=", Op::Conditional),
    ("!=", Op::Shell),
    ("=", Op::Recursive),
];

impl Assignment {
    /// An assignment read from `logical`, before the reader places it (frames, comment, bytes).
    fn on(
        logical: &Logical,
        name: &str,
        op: Op,
        modifiers: Vec<String>,
        value: String,
        inline_comment: Option<String>,
        value_start: usize,
    ) -> Assignment {
        Assignment {
            name: name.to_string(),
            op,
            value,
            inline_comment,
            modifiers,
            line: logical.line,
            end_line: logical.end_line,
            frames: Vec::new(),
            comment: None,
            comment_line: None,
            in_block: false,
            continued: logical.end_line > logical.line,
            bytes: 0..0,
            value_start,
            indent: logical.text[..logical.text.len() - logical.text.trim_start().len()].to_string(),
        }
    }
}

/// One logical line: physical lines joined at backslash-newline.
struct Logical {
    text: String,
    line: usize,
    end_line: usize,
    start_byte: usize,
}

fn logical_lines(text: &str) -> Vec<Logical> {
    let mut out: Vec<Logical> = Vec::new();
    let mut pending: Option<Logical> = None;
    let mut byte = 0;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let start = byte;
        byte += raw.len();
        let line = raw.strip_suffix('\n').unwrap_or(raw);
        // A final `\` continues the line only before a newline: at the very end of a file
        // without one, make keeps it as a character.
        let continues = (line.len() - line.trim_end_matches('\\').len()) % 2 == 1 && raw.ends_with('\n');
        let body = if continues { &line[..line.len() - 1] } else { line };
        let mut logical =
            pending.take().unwrap_or(Logical { text: String::new(), line: i + 1, end_line: i + 1, start_byte: start });
        if !logical.text.is_empty() || logical.line != i + 1 {
            // Make replaces backslash-newline and the blanks around it by one space (in place:
            // a line continued thousands of times stays linear).
            let kept = logical.text.trim_end().len();
            logical.text.truncate(kept);
            logical.text.push(' ');
            logical.text.push_str(body.trim_start());
        } else {
            logical.text.push_str(body);
        }
        logical.end_line = i + 1;
        if continues {
            pending = Some(logical);
        } else {
            out.push(logical);
        }
    }
    // Continued into the end of the file: make joins it to an empty line, leaving one blank.
    if let Some(mut last) = pending {
        let kept = last.text.trim_end().len();
        last.text.truncate(kept);
        last.text.push(' ');
        out.push(last);
    }
    out
}

/// An open `define`: the assignment it becomes, how deep it nests, its body so far.
struct OpenDefine {
    /// Index in `assignments`, or `None` for a `define` under a modifier make ignores here.
    assignment: usize,
    depth: usize,
    body: Vec<String>,
}

/// How lines are being read: make's recipe prefix and whether a rule line came before (then a
/// line led by the prefix is a recipe line).
struct Reading {
    recipe_prefix: char,
    in_rule: bool,
}

impl Reading {
    fn is_recipe(&self, raw: &str) -> bool {
        self.in_rule && raw.starts_with(self.recipe_prefix)
    }
}

/// Why make would refuse `file`'s conditionals, if it would: the line and what is wrong there.
pub fn unbalanced(file: &KbuildFile) -> Option<(usize, String)> {
    if let Some((line, what)) = &file.extraneous {
        return Some((*line, format!("an extraneous `{what}`")));
    }
    file.unclosed.as_ref().map(|(line, what)| (*line, format!("`{what}` never closed")))
}

/// Parse kbuild file text. Never fails: anything unrecognised is simply not an assignment, and
/// what make may do that the reader does not follow is listed in `opaque` (see `constructs`).
pub fn parse(text: &str) -> KbuildFile {
    let mut file = KbuildFile::default();
    let mut groups: Vec<Vec<Frame>> = Vec::new();
    // Per open group: (1-based line, byte after it) of the `if…`/`else` opening its current branch.
    let mut opened: Vec<(usize, usize)> = Vec::new();
    let mut define: Option<OpenDefine> = None;
    let mut define_line = 0usize;
    let mut reading = Reading { recipe_prefix: '\t', in_rule: false };
    let mut comment: Option<(String, usize)> = None;
    let mut paragraph_comment: Option<(String, usize)> = None;
    let mut block_begin: Option<(usize, usize)> = None;
    for logical in logical_lines(text) {
        let trimmed = logical.text.trim();
        if let Some(open) = define.as_mut() {
            if marker(trimmed).is_some() {
                file.marker_problems.push(MarkerProblem {
                    line: logical.line,
                    message: "generated block marker inside a `define`: make reads it as part of the variable".into(),
                });
            }
            // make 4.3 `do_define`: only lines not led by the recipe prefix can nest or end it.
            if !logical.text.starts_with(reading.recipe_prefix) {
                match define_keyword(trimmed) {
                    Some("define") => open.depth += 1,
                    Some("endef") => open.depth -= 1,
                    _ => {}
                }
            }
            if open.depth > 0 {
                open.body.push(logical.text.clone());
                continue;
            }
            let open = define.take().expect("open define");
            let body = open.body.join("\n");
            opaque_evals(&mut file, &body, define_line);
            let a = &mut file.assignments[open.assignment];
            a.value = body;
            a.end_line = logical.end_line;
            a.bytes.end = next_line_byte(text, &logical);
            finish_assignment(&mut file, open.assignment, &mut reading);
            paragraph_comment = None;
            continue;
        }
        if let Some(kind) = marker(trimmed) {
            handle_marker(&mut file, &mut block_begin, kind, &logical, text);
            comment = None;
            paragraph_comment = None;
            continue;
        }
        if reading.is_recipe(&logical.text) {
            // Make expands a recipe line when it runs the rule: an `$(eval` there still counts.
            opaque_evals(&mut file, &logical.text, logical.line);
            continue;
        }
        if trimmed.is_empty() {
            comment = None;
            paragraph_comment = None;
            continue;
        }
        if let Some(c) = trimmed.strip_prefix('#') {
            let c = c.strip_prefix(' ').unwrap_or(c);
            if c.starts_with("SPDX-License-Identifier") {
                continue;
            }
            comment = Some(match comment.take() {
                Some((mut prev, line)) => {
                    prev.push('\n');
                    prev.push_str(c);
                    (prev, line)
                }
                None => (c.to_string(), logical.line),
            });
            continue;
        }
        if let Some(c) = comment.take() {
            paragraph_comment = Some(c);
        }
        let code = strip_comment(trimmed).0.trim();
        opaque_evals(&mut file, code, logical.line);
        // Make tries a line as an assignment first: `ifdef := 1` assigns `ifdef`.
        let assignment = parse_assignment(&logical);
        let keyword =
            if assignment.as_ref().is_some_and(|a| a.modifiers.is_empty()) { "" } else { first_word(trimmed) };
        match keyword {
            "ifdef" | "ifndef" | "ifeq" | "ifneq" => {
                let condition = Condition::parse(code).unwrap_or_else(|_| Condition::unparsed(code));
                file.events.push(Event::If(condition.clone()));
                groups.push(vec![Frame { condition, line: logical.line, in_else: false }]);
                opened.push((logical.line, next_line_byte(text, &logical)));
                continue;
            }
            "else" => {
                let second = groups.last().and_then(|g| g.last()).is_some_and(|f| f.in_else);
                if (groups.is_empty() || second) && file.extraneous.is_none() {
                    file.extraneous = Some((logical.line, "else".into()));
                }
                let rest = code[4..].trim().to_string();
                let chained = Condition::parse(&rest).ok();
                file.events.push(Event::Else(chained.clone()));
                close_branch(&mut file, &groups, &mut opened, &logical);
                opened.push((logical.line, next_line_byte(text, &logical)));
                if let Some(group) = groups.last_mut() {
                    if let Some(top) = group.last_mut() {
                        top.in_else = true;
                    }
                    // `else ifeq …` nests one more test under the same `endif`.
                    if let Some(condition) = chained {
                        group.push(Frame { condition, line: logical.line, in_else: false });
                    }
                }
                continue;
            }
            "endif" => {
                if groups.is_empty() && file.extraneous.is_none() {
                    file.extraneous = Some((logical.line, "endif".into()));
                }
                file.events.push(Event::Endif);
                close_branch(&mut file, &groups, &mut opened, &logical);
                groups.pop();
                continue;
            }
            _ => {}
        }
        let Some(mut a) = assignment.or_else(|| header(&logical)) else {
            other_line(&mut file, code, logical.line, &mut reading);
            paragraph_comment = None;
            continue;
        };
        a.frames = groups.iter().flatten().cloned().collect();
        a.in_block = block_begin.is_some();
        a.bytes = logical.start_byte..next_line_byte(text, &logical);
        let index = file.assignments.len();
        let is_define = a.modifiers.iter().any(|m| m == "define");
        file.assignments.push(a);
        if is_define {
            define_line = logical.line;
            define = Some(OpenDefine { assignment: index, depth: 1, body: Vec::new() });
            // Its comment and classification wait for the body (the value).
            if let Some((c, line)) = &paragraph_comment {
                file.assignments[index].comment = Some(c.clone());
                file.assignments[index].comment_line = Some(*line);
            }
            continue;
        }
        // A comment explains the run of directives right below it; any other line ends the run.
        let directive = classify(&file.assignments[index]);
        match (&paragraph_comment, &directive) {
            (Some((c, line)), Some(_)) => {
                file.assignments[index].comment = Some(c.clone());
                file.assignments[index].comment_line = Some(*line);
            }
            _ => paragraph_comment = None,
        }
        finish_assignment(&mut file, index, &mut reading);
    }
    if let Some((line, _)) = block_begin {
        file.marker_problems.push(MarkerProblem { line, message: "generated block has no end marker".into() });
    }
    file.unclosed = if define.is_some() {
        Some((define_line, "define".to_string()))
    } else {
        groups.first().and_then(|g| g.first()).map(|f| (f.line, first_word(&f.condition.text).to_string()))
    };
    file
}

/// `define`/`endef` as make's `do_define` spots them: the first word, alone or before a blank
/// (`endef#x` is not one).
fn define_keyword(trimmed: &str) -> Option<&'static str> {
    let word = &trimmed[..trimmed.find([' ', '\t']).unwrap_or(trimmed.len())];
    ["define", "endef"].into_iter().find(|k| *k == word)
}

/// A `define` or `undefine` line (with any modifiers before it) as an assignment: `define`
/// takes its value from the body; `undefine` has none and becomes `Event::Undefine`.
fn header(logical: &Logical) -> Option<Assignment> {
    let (code, _) = strip_comment(&logical.text);
    let mut rest = code.trim_start();
    let mut modifiers = Vec::new();
    let keyword = loop {
        let word = rest.split_whitespace().next()?;
        rest = rest[word.len()..].trim_start();
        match word {
            "export" | "unexport" | "override" | "private" => modifiers.push(word.to_string()),
            "define" | "undefine" => break word,
            _ => return None,
        }
    };
    modifiers.push(keyword.to_string());
    let (name, op) = if keyword == "define" {
        // `define NAME`, `define NAME =`, `define NAME :=` …: the name ends at a blank or an operator.
        let trimmed = rest.trim_end();
        match OPERATORS.iter().find(|(s, _)| trimmed.ends_with(s)) {
            Some((s, op)) => (trimmed[..trimmed.len() - s.len()].trim_end(), *op),
            None => (trimmed, Op::Recursive),
        }
    } else {
        (rest.trim_end(), Op::Recursive)
    };
    if name.is_empty() {
        return None;
    }
    Some(Assignment::on(logical, name, op, modifiers, String::new(), None, logical.start_byte))
}

/// Record the assignment at `index` as an event (and a directive), and note what it does to
/// the reading of later lines or what make does with it that the reader cannot follow.
fn finish_assignment(file: &mut KbuildFile, index: usize, reading: &mut Reading) {
    // An assignment ends the rule before it (make's `record_waiting_files`).
    reading.in_rule = false;
    let a = &file.assignments[index];
    let undefine = a.modifiers.iter().any(|m| m == "undefine");
    let directive = classify(a);
    if let Some(d) = &directive {
        let construct = if a.modifiers.iter().any(|m| m == "private") {
            Some("a `private` directive (invisible in the recipes where Kbuild reads it)")
        } else if a.op == Op::Shell {
            Some("a directive set by `!=` (the shell decides its value)")
        } else {
            None
        };
        if let Some(construct) = construct {
            let name = NamePattern { literal: a.name.clone(), computed: false };
            let mut o = Opaque::new(a.line, construct, Some(vec![name]));
            o.touches = Some([d.mech].into());
            file.opaque.push(o);
        }
    }
    if a.name == ".RECIPEPREFIX" {
        let literal = !a.value.contains('$') || a.op == Op::Recursive;
        let plain = a.modifiers.iter().all(|m| m == "export" || m == "override") && !undefine;
        if a.frames.is_empty() && literal && plain && matches!(a.op, Op::Simple | Op::Recursive) {
            reading.recipe_prefix = a.value.chars().next().unwrap_or('\t');
        } else {
            let construct = "a `.RECIPEPREFIX` change sanpolicy cannot follow (conditional or computed)";
            file.opaque.push(Opaque::new(a.line, construct, None));
        }
    }
    if let Some(d) = directive {
        file.directives.push((index, d));
    }
    file.events.push(if undefine { Event::Undefine(index) } else { Event::Assign(index) });
}

/// A line that is neither an assignment nor a conditional: `include`, `load`, `export NAME`, or
/// a rule (maybe with a target-specific assignment).
fn other_line(file: &mut KbuildFile, code: &str, line: usize, reading: &mut Reading) {
    let first = first_word(code);
    match first {
        "include" | "-include" | "sinclude" | "load" | "-load" => {
            reading.in_rule = false;
            let mut o = Opaque::new(line, format!("`{first}` of another file (sanpolicy does not read it)"), None);
            o.other_file = true;
            file.opaque.push(o);
        }
        "export" | "unexport" => reading.in_rule = false,
        "vpath" => {}
        _ => {
            let Some(rest) = constructs::after_targets(code) else { return };
            let target_specific = constructs::text_names(rest);
            let assigns =
                parse_assignment(&Logical { text: rest.to_string(), line, end_line: line, start_byte: 0 }).is_some();
            if assigns {
                // A target-specific value: after it, no recipe follows (make resets the rule).
                reading.in_rule = false;
                if kernel_object_line(file, code, rest, line) {
                    return;
                }
                let o = Opaque::new(
                    line,
                    "a target-specific assignment (its value holds only for that target)",
                    target_specific,
                );
                if o.touches.as_ref().is_none_or(|t| !t.is_empty()) {
                    file.opaque.push(o);
                }
            } else {
                reading.in_rule = true;
            }
        }
    }
}

/// A target-specific `is-kernel-object` (the assignment `rest` after the targets of `code`):
/// modelled as `Event::Target`, or opaque; `false` when it assigns another variable.
fn kernel_object_line(file: &mut KbuildFile, code: &str, rest: &str, line: usize) -> bool {
    let logical = Logical { text: rest.to_string(), line, end_line: line, start_byte: 0 };
    let Some(a) = parse_assignment(&logical).filter(|a| a.name == KERNEL_OBJECT) else { return false };
    let targets = code[..code.len() - rest.len()].trim_end_matches(':');
    match target::read(line, targets, a.op, &a.modifiers, &a.value) {
        Ok(Some(t)) => {
            file.events.push(Event::Target(file.kernel_object_lines.len()));
            file.kernel_object_lines.push(t);
        }
        Ok(None) => {}
        Err(construct) => {
            let name = NamePattern { literal: KERNEL_OBJECT.to_string(), computed: false };
            let mut o = Opaque::new(line, construct, Some(vec![name]));
            o.kernel_object = true;
            file.opaque.push(o);
        }
    }
    true
}

/// Every `$(eval …)` in `text` (line `line`) as opaque, with what its argument may touch.
fn opaque_evals(file: &mut KbuildFile, text: &str, line: usize) {
    for argument in constructs::evals(text) {
        let construct = if argument == "$(guile)" { "`$(guile …)`" } else { "`$(eval …)`" };
        let o = Opaque::new(line, construct, constructs::text_names(argument));
        if o.touches.as_ref().is_none_or(|t| !t.is_empty()) {
            file.opaque.push(o);
        }
    }
}

/// Byte offset of the line after `logical` (the file's end for the last line).
fn next_line_byte(text: &str, logical: &Logical) -> usize {
    let mut end = logical.start_byte;
    for _ in logical.line..=logical.end_line {
        end = text[end..].find('\n').map_or(text.len(), |i| end + i + 1);
    }
    end
}

/// Record the branch that the `else`/`endif` at `logical` closes.
fn close_branch(file: &mut KbuildFile, groups: &[Vec<Frame>], opened: &mut Vec<(usize, usize)>, logical: &Logical) {
    let Some((open_line, body_byte)) = opened.pop() else { return };
    let frames: Vec<Frame> = groups.iter().flatten().cloned().collect();
    let indent =
        file.assignments.iter().rev().find(|a| a.line > open_line).map(|a| a.indent.clone()).unwrap_or_default();
    file.branches.push(Branch {
        when: when_of(&frames),
        open_line,
        close_line: logical.line,
        close_byte: logical.start_byte,
        body_byte,
        indent,
    });
}

enum MarkerKind {
    Begin,
    End(Option<String>),
}

fn marker(trimmed: &str) -> Option<MarkerKind> {
    if trimmed.starts_with(BEGIN_MARKER) {
        return Some(MarkerKind::Begin);
    }
    let rest = trimmed.strip_prefix(END_MARKER)?;
    let checksum = rest.split("checksum ").nth(1).map(|s| s.trim_end_matches(')').trim().to_string());
    Some(MarkerKind::End(checksum))
}

fn handle_marker(
    file: &mut KbuildFile,
    begin: &mut Option<(usize, usize)>,
    kind: MarkerKind,
    logical: &Logical,
    text: &str,
) {
    // A marker continued by a final `\` swallows the next line into the comment: replacing
    // the block would take that line with it.
    if logical.end_line > logical.line {
        file.marker_problems.push(MarkerProblem {
            line: logical.line,
            message: "generated block marker continues onto the next line (ends in `\\`)".into(),
        });
        return;
    }
    match kind {
        MarkerKind::Begin => {
            if begin.is_some() || file.block.is_some() {
                file.marker_problems
                    .push(MarkerProblem { line: logical.line, message: "second generated block begin marker".into() });
                return;
            }
            *begin = Some((logical.line, logical.start_byte));
        }
        MarkerKind::End(checksum) => {
            let Some((begin_line, start_byte)) = begin.take() else {
                file.marker_problems
                    .push(MarkerProblem { line: logical.line, message: "end marker without a begin marker".into() });
                return;
            };
            let end_byte = text.split_inclusive('\n').take(logical.end_line).map(str::len).sum::<usize>();
            let body_start = text[start_byte..].find('\n').map_or(end_byte, |i| start_byte + i + 1);
            let body = text[body_start.min(logical.start_byte)..logical.start_byte].to_string();
            file.block = Some(Block {
                begin_line,
                end_line: logical.end_line,
                byte_range: start_byte..end_byte,
                recorded_checksum: checksum,
                body,
            });
        }
    }
}

fn first_word(s: &str) -> &str {
    s.split(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("")
}

/// Split at the first unescaped `#`: (before, comment after).
fn strip_comment(s: &str) -> (&str, Option<&str>) {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'#' => return (&s[..i], Some(&s[i + 1..])),
            _ => i += 1,
        }
    }
    (s, None)
}

const MODIFIERS: &[&str] = &["export", "override", "private", "unexport"];

fn parse_assignment(logical: &Logical) -> Option<Assignment> {
    let (code, inline_comment) = strip_comment(&logical.text);
    let mut rest = code.trim_start();
    let mut modifiers = Vec::new();
    loop {
        let word = rest.split_whitespace().next().unwrap_or("");
        if MODIFIERS.contains(&word) && rest[word.len()..].starts_with(char::is_whitespace) {
            modifiers.push(word.to_string());
            rest = rest[word.len()..].trim_start();
        } else {
            break;
        }
    }
    let name_len = name_length(rest)?;
    let name = &rest[..name_len];
    let after = rest[name_len..].trim_start();
    let (op, op_len) = OPERATORS.iter().find(|(s, _)| after.starts_with(s)).map(|(s, op)| (*op, s.len()))?;
    let value = after[op_len..].trim_start_matches([' ', '\t']).to_string();
    // The value is a suffix of the code part, which starts the logical line.
    let value_start = logical.start_byte + code.len() - after[op_len..].trim_start_matches([' ', '\t']).len();
    let inline_comment = inline_comment.map(|c| c.trim().to_string());
    Some(Assignment::on(logical, name, op, modifiers, value, inline_comment, value_start))
}

/// Length of a variable name at the start of `s`: no blanks, no `:`/`=`/`#` outside `$(…)`.
fn name_length(s: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ' ' | '\t' | ':' | '=' | '#' | '+' | '?' | '!' if depth == 0 => {
                if c == '+' || c == '?' || c == '!' {
                    if s[i + 1..].starts_with('=') {
                        return (i > 0).then_some(i);
                    }
                    continue;
                }
                return (i > 0).then_some(i);
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_assignments_conditions_and_comments() {
        let text = "# SPDX-License-Identifier: GPL-2.0\n# Avoid recursion.\nKCSAN_SANITIZE_lockdep.o := n\nKCOV_INSTRUMENT\t\t:= n\n\nifdef CONFIG_FUNCTION_TRACER\nCFLAGS_REMOVE_lockdep.o = $(CC_FLAGS_FTRACE)\nendif\nobj-y += a.o \\\n\tb.o\nfoo.o: X := y\n";
        let f = parse(text);
        let names: Vec<_> = f.assignments.iter().map(|a| (a.name.as_str(), a.op, a.value.as_str(), a.line)).collect();
        assert_eq!(
            names,
            [
                ("KCSAN_SANITIZE_lockdep.o", Op::Simple, "n", 3),
                ("KCOV_INSTRUMENT", Op::Simple, "n", 4),
                ("CFLAGS_REMOVE_lockdep.o", Op::Recursive, "$(CC_FLAGS_FTRACE)", 7),
                ("obj-y", Op::Append, "a.o b.o", 9),
            ]
        );
        assert_eq!(f.assignments[0].comment.as_deref(), Some("Avoid recursion."));
        assert_eq!(f.assignments[1].comment.as_deref(), Some("Avoid recursion."), "paragraph comment is shared");
        assert_eq!(f.assignments[2].frames[0].condition.text, "ifdef CONFIG_FUNCTION_TRACER");
        assert!(f.assignments[3].continued);
        let f = parse("# About obj-y.\nobj-y += a.o\nKASAN_SANITIZE_a.o := n\n");
        assert_eq!(f.assignments[1].comment, None, "a comment above another line is not a reason");
    }

    #[test]
    fn keeps_trailing_blanks_and_inline_comments_apart() {
        let f = parse("KASAN_SANITIZE_a.o := n # early boot\nKASAN_SANITIZE_b.o := n  \n");
        assert_eq!(f.assignments[0].value, "n ");
        assert_eq!(f.assignments[0].inline_comment.as_deref(), Some("early boot"));
        assert_eq!(f.assignments[1].value, "n  ");
    }

    #[test]
    fn a_final_backslash_is_read_as_make_reads_it() {
        // GNU make: continued into the end of the file, the line ends in one blank; without a
        // final newline the backslash is a plain character.
        assert_eq!(parse("X := n\\\n").assignments[0].value, "n ");
        assert_eq!(parse("X := n \\\n").assignments[0].value, "n ");
        assert_eq!(parse("X := n\\").assignments[0].value, "n\\");
        assert_eq!(parse("X := n\\\n\nY := 1\n").assignments[0].value, "n ");
    }

    #[test]
    fn unclosed_define_and_conditionals_are_reported() {
        assert_eq!(parse("ifdef A\nifdef B\nendif\nX := y\n").unclosed, Some((1, "ifdef".into())));
        assert_eq!(parse("define f\ndefine g\nendef\n").unclosed, Some((1, "define".into())));
        assert_eq!(parse("ifeq (a,b)\nelse\nendif\ndefine f\nendef\n").unclosed, None);
        assert_eq!(parse("ifeq (a,b)\nelse\nendif\n").extraneous, None);
        assert_eq!(parse("X := y\nelse\nY := n\nendif\n").extraneous, Some((2, "else".into())));
        assert_eq!(parse("ifdef A\nelse\nelse\nendif\n").extraneous, Some((3, "else".into())));
        assert_eq!(parse("ifdef A\nelse ifdef B\nelse\nendif\n").extraneous, None);
        assert_eq!(parse("endif\n").extraneous, Some((1, "endif".into())));
    }

    #[test]
    fn finds_the_block_and_bad_markers() {
        let text = format!("obj-y := a.o\n{BEGIN_MARKER}: x\nKASAN_SANITIZE := n\n{END_MARKER} (checksum abc)\n");
        let f = parse(&text);
        let b = f.block.unwrap();
        assert_eq!((b.begin_line, b.end_line, b.recorded_checksum.as_deref()), (2, 4, Some("abc")));
        assert_eq!(b.body, "KASAN_SANITIZE := n\n");
        assert!(f.assignments[1].in_block && !f.assignments[0].in_block);
        let f = parse(&format!("{BEGIN_MARKER}\n{BEGIN_MARKER}\n"));
        assert_eq!(f.marker_problems.len(), 2);
    }
}
