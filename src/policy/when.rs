//! `when`: the make conditionals a policy may wrap its lines in, as a small grammar.
//!
//! A condition becomes a line of a kernel Makefile, so it must not be make code: GNU make
//! expands both operands of `ifeq` (and the name after `ifdef`), and an expansion can run a
//! shell (`$(shell …)`, or `$(call shell,…)`, which is the same), define or undefine variables
//! (`$(eval …)`), read or write files (`$(file …)`). The grammar admits only what cannot:
//!
//! ```text
//! when     := blank* ( defined | compare ) blank*
//! defined  := ("ifdef" | "ifndef") blank+ SYMBOL
//! compare  := ("ifeq" | "ifneq") blank+ ( "(" operand "," operand ")" | quoted blank* quoted )
//! quoted   := '"' operand '"' | "'" operand "'"
//! operand  := ( "$(" SYMBOL ")" | "$(call " HELPER "," blank* DIGITS blank* ")" | LITERAL )*
//! SYMBOL   := "CONFIG_" [A-Za-z0-9_]+
//! HELPER   := "clang-min-version" | "gcc-min-version" | "rustc-min-version"
//! LITERAL  := [A-Za-z0-9_.+/=:-] | " "
//! ```
//!
//! The helpers are Kbuild's own (`scripts/Makefile.compiler`) and compare a Kconfig version with
//! their argument; with a literal number nothing of the policy reaches the shell 6.1 runs them
//! in. This covers every conditional Linux 6.1 and 6.12 put around an instrumentation directive
//! (`tests/when_grammar.rs` scans both trees). Everything else is refused with the span of the
//! offending part.

use std::collections::HashSet;
use std::ops::Range;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::makefile::CondKind;

/// Kbuild helpers a condition may call, each with one literal number.
pub const HELPERS: &[&str] = &["clang-min-version", "gcc-min-version", "rustc-min-version"];

/// One piece of an `ifeq`/`ifneq` operand.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// `$(CONFIG_X)`: the symbol's name, `CONFIG_` included.
    Symbol(String),
    /// `$(call clang-min-version, 180000)`: the helper and its argument, blanks trimmed.
    Helper { name: &'static str, arg: String },
    /// Literal text, as make compares it.
    Literal(String),
}

/// A condition that passed [`validate`]: what it tests, and its text as make reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct When {
    pub kind: CondKind,
    /// `ifdef`/`ifndef`: the symbol, `CONFIG_` included.
    pub symbol: Option<String>,
    /// `ifeq`/`ifneq`: the two operands as make compares them (after its blank stripping).
    pub operands: Vec<Vec<Part>>,
    /// The directive as written to the Makefile: `keyword rest`, blanks around it trimmed (the
    /// same normal form [`crate::makefile::Condition::parse`] gives a line read from a tree).
    pub text: String,
}

impl When {
    /// Every Kconfig symbol the condition reads, in order, `CONFIG_` included.
    pub fn symbols(&self) -> Vec<&str> {
        let parts = self.operands.iter().flatten().filter_map(|p| match p {
            Part::Symbol(s) => Some(s.as_str()),
            _ => None,
        });
        self.symbol.as_deref().into_iter().chain(parts).collect()
    }
}

/// Why a condition was refused: the bytes of the condition at fault, what is wrong, and how to
/// write it instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub span: Range<usize>,
    pub message: String,
    pub hint: String,
}

const GRAMMAR_HINT: &str =
    "write `ifdef CONFIG_X`, `ifndef CONFIG_X`, `ifeq ($(CONFIG_X),y)` or `ifneq ($(CONFIG_X),y)`";

fn problem(span: Range<usize>, message: impl Into<String>, hint: impl Into<String>) -> Problem {
    Problem { span, message: message.into(), hint: hint.into() }
}

fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

fn is_symbol_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn is_literal_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"_.+/=:- ".contains(&c)
}

/// Parse a policy's `when` string, refusing anything but the grammar above.
pub fn validate(text: &str) -> Result<When, Problem> {
    forbidden_characters(text)?;
    let bytes = text.as_bytes();
    let start = bytes.iter().position(|b| !is_blank(*b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|b| !is_blank(*b)).map_or(start, |i| i + 1);
    let keyword_end = start + bytes[start..end].iter().position(|b| !b.is_ascii_alphabetic()).unwrap_or(end - start);
    let keyword = &text[start..keyword_end];
    let kind = match keyword {
        "ifdef" => CondKind::Ifdef,
        "ifndef" => CondKind::Ifndef,
        "ifeq" => CondKind::Ifeq,
        "ifneq" => CondKind::Ifneq,
        "" if start == end => return Err(problem(0..text.len(), "empty condition", GRAMMAR_HINT)),
        _ => {
            let span = start..keyword_end.max(start + 1).min(end);
            let word = text[span.clone()].to_string();
            return Err(problem(span, format!("`{word}` is not a make conditional"), GRAMMAR_HINT));
        }
    };
    // Make reads `ifeq(a,b)` as an ordinary line, not as a conditional: a blank must follow.
    let rest = keyword_end + bytes[keyword_end..end].iter().take_while(|b| is_blank(**b)).count();
    if rest == keyword_end {
        let span = keyword_end..(keyword_end + 1).min(end).max(keyword_end);
        return Err(problem(span, format!("`{keyword}` must be followed by a blank"), GRAMMAR_HINT));
    }
    let mut when = When { kind, symbol: None, operands: Vec::new(), text: format!("{keyword} {}", &text[rest..end]) };
    match kind {
        CondKind::Ifdef | CondKind::Ifndef => when.symbol = Some(defined_symbol(text, keyword, rest, end)?),
        CondKind::Ifeq | CondKind::Ifneq => when.operands = operands(text, rest, end)?,
    }
    Ok(when)
}

/// Characters no condition may hold, wherever they are: they end or continue the line, start a
/// comment, or escape make's own syntax.
fn forbidden_characters(text: &str) -> Result<(), Problem> {
    let bytes = text.as_bytes();
    for (i, c) in text.char_indices() {
        let span = i..i + c.len_utf8();
        let refused = match c {
            '\n' | '\r' => Some((
                "a line break: the rest would be read as Makefile lines",
                "write one condition per list entry, outermost first: `when = [\"ifdef CONFIG_A\", \"ifdef CONFIG_B\"]`",
            )),
            '\t' => None,
            c if c.is_control() => Some(("a control character", "remove the control character")),
            '#' => Some(("`#`, which starts a make comment", "remove the `#` and what follows it; say why in `why`")),
            '\\' => Some((
                "a backslash, which make reads as an escape or a line continuation",
                "remove the backslash: a condition is one line",
            )),
            '$' if bytes.get(i + 1) == Some(&b'$') => {
                return Err(problem(
                    i..i + 2,
                    "the condition holds `$$`, a literal `$` that a second expansion would turn into make code",
                    "refer to Kconfig symbols as `$(CONFIG_X)`",
                ))
            }
            '$' if bytes.get(i + 1) == Some(&b'{') => {
                return Err(problem(
                    i..i + 2,
                    "`${…}` references are not part of the condition grammar",
                    "write the reference as `$(CONFIG_X)`",
                ))
            }
            _ => None,
        };
        if let Some((what, hint)) = refused {
            return Err(problem(span, format!("the condition holds {what}"), hint));
        }
        if !c.is_ascii() {
            return Err(problem(span, "the condition holds a non-ASCII character", GRAMMAR_HINT));
        }
    }
    Ok(())
}

fn defined_symbol(text: &str, keyword: &str, at: usize, end: usize) -> Result<String, Problem> {
    let word = &text[at..end];
    let hint = format!("write `{keyword} CONFIG_X` with one Kconfig symbol");
    if word.starts_with('$') {
        return Err(problem(at..end, format!("`{keyword}` takes a symbol name, not a reference"), hint));
    }
    if let Some(blank) = word.bytes().position(is_blank) {
        return Err(problem(at + blank..end, format!("`{keyword}` takes one symbol; extra text follows it"), hint));
    }
    symbol(word, at).map_err(|p| Problem { hint, ..p })?;
    Ok(word.to_string())
}

/// `word` (starting at byte `at` of the condition) as a Kconfig symbol name.
fn symbol(word: &str, at: usize) -> Result<(), Problem> {
    let bad = word.bytes().position(|b| !is_symbol_char(b));
    match (word.strip_prefix("CONFIG_"), bad) {
        (Some(name), None) if !name.is_empty() => Ok(()),
        (_, Some(i)) => Err(problem(
            at + i..at + i + 1,
            format!("`{word}` is not a Kconfig symbol name"),
            "a symbol is `CONFIG_` followed by letters, digits and `_`",
        )),
        _ => Err(problem(
            at..at + word.len(),
            format!("`{word}` is not a Kconfig symbol (they start with `CONFIG_`)"),
            "conditions test Kconfig symbols: write e.g. `CONFIG_KASAN`",
        )),
    }
}

/// The two operands of `ifeq`/`ifneq` from byte `at` (the first after the blanks) to `end`.
fn operands(text: &str, at: usize, end: usize) -> Result<Vec<Vec<Part>>, Problem> {
    let bytes = text.as_bytes();
    match bytes[at] {
        b'(' => {
            let (first, comma) = operand(text, at + 1, end, Stop::Comma)?;
            // As make does: blanks before the comma and right after it are dropped; blanks after
            // `(` and before `)` stay part of the operands.
            let second_start = comma + 1 + bytes[comma + 1..end].iter().take_while(|b| is_blank(**b)).count();
            let (second, close) = operand(text, second_start, end, Stop::Paren)?;
            if close + 1 != end {
                return Err(problem(close + 1..end, "text after the closing `)`", GRAMMAR_HINT));
            }
            Ok(vec![strip_trailing_blanks(first), second])
        }
        q @ (b'"' | b'\'') => {
            let (first, close) = operand(text, at + 1, end, Stop::Quote(q))?;
            let next = close + 1 + bytes[close + 1..end].iter().take_while(|b| is_blank(**b)).count();
            let q2 = bytes.get(next).copied().filter(|b| *b == b'"' || *b == b'\'').ok_or_else(|| {
                problem(next..(next + 1).min(end).max(next), "expected a second quoted operand", GRAMMAR_HINT)
            })?;
            let (second, close) = operand(text, next + 1, end, Stop::Quote(q2))?;
            if close + 1 != end {
                return Err(problem(close + 1..end, "text after the second operand", GRAMMAR_HINT));
            }
            Ok(vec![first, second])
        }
        _ => Err(problem(at..end, "`ifeq`/`ifneq` compares `(A,B)` or `\"A\" \"B\"`", GRAMMAR_HINT)),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Comma,
    Paren,
    Quote(u8),
}

/// Parts from byte `at` up to the `stop` character (not inside a reference); returns them and
/// where the stop character is.
fn operand(text: &str, mut at: usize, end: usize, stop: Stop) -> Result<(Vec<Part>, usize), Problem> {
    let bytes = text.as_bytes();
    let mut parts: Vec<Part> = Vec::new();
    let expected = match stop {
        Stop::Comma => "`,`",
        Stop::Paren => "`)`",
        Stop::Quote(b'"') => "a closing `\"`",
        Stop::Quote(_) => "a closing `'`",
    };
    loop {
        let Some(&c) = bytes.get(at).filter(|_| at < end) else {
            return Err(problem(end..end, format!("unbalanced condition: expected {expected}"), GRAMMAR_HINT));
        };
        let stops = match stop {
            Stop::Comma => c == b',',
            Stop::Paren => c == b')',
            Stop::Quote(q) => c == q,
        };
        if stops {
            return Ok((parts, at));
        }
        if c == b'$' {
            let (part, next) = reference(text, at, end)?;
            parts.push(part);
            at = next;
            continue;
        }
        if !is_literal_char(c) {
            let what = match c {
                b'(' | b')' => "unbalanced parentheses".to_string(),
                b',' => "a second `,`".to_string(),
                _ => format!("`{}` in literal text", c as char),
            };
            return Err(problem(
                at..at + 1,
                format!("the condition holds {what}"),
                "compare with plain text: letters, digits, blanks and `_ . + / = : -`",
            ));
        }
        match parts.last_mut() {
            Some(Part::Literal(l)) => l.push(c as char),
            _ => parts.push(Part::Literal((c as char).to_string())),
        }
        at += 1;
    }
}

fn strip_trailing_blanks(mut parts: Vec<Part>) -> Vec<Part> {
    if let Some(Part::Literal(l)) = parts.last_mut() {
        l.truncate(l.trim_end_matches([' ', '\t']).len());
        if l.is_empty() {
            parts.pop();
        }
    }
    parts
}

/// The reference starting with `$` at byte `at`: `$(CONFIG_X)` or an allowed helper call.
fn reference(text: &str, at: usize, end: usize) -> Result<(Part, usize), Problem> {
    let bytes = text.as_bytes();
    let refs_hint = "refer to Kconfig symbols as `$(CONFIG_X)`; the only functions allowed are \
                     `$(call clang-min-version, N)`, `$(call gcc-min-version, N)` and `$(call rustc-min-version, N)`";
    if bytes.get(at + 1) != Some(&b'(') {
        return Err(problem(at..(at + 2).min(end), "`$` must start a `$(CONFIG_X)` reference", refs_hint));
    }
    let name_start = at + 2;
    let name_end =
        name_start + bytes[name_start..end].iter().take_while(|b| is_symbol_char(**b) || **b == b'-').count();
    let name = &text[name_start..name_end];
    let close = |i: usize| -> Result<usize, Problem> {
        match bytes.get(i).filter(|_| i < end) {
            Some(b')') => Ok(i + 1),
            _ => Err(problem(at..i.min(end), "unbalanced reference: expected `)`", refs_hint)),
        }
    };
    match bytes.get(name_end).filter(|_| name_end < end) {
        Some(b')') => {
            symbol(name, name_start).map_err(|p| Problem { hint: refs_hint.into(), ..p })?;
            Ok((Part::Symbol(name.to_string()), name_end + 1))
        }
        Some(b' ') if name == "call" => {
            let helper_start = name_end + 1;
            let helper_end = helper_start
                + bytes[helper_start..end].iter().take_while(|b| is_symbol_char(**b) || **b == b'-').count();
            let helper = &text[helper_start..helper_end];
            let Some(&known) = HELPERS.iter().find(|h| **h == helper) else {
                let span = helper_start..helper_end.max(helper_start + 1).min(end);
                return Err(problem(
                    span,
                    format!("`$(call {helper}…)` is not one of the Kbuild helpers a condition may call"),
                    refs_hint,
                ));
            };
            if bytes.get(helper_end) != Some(&b',') {
                return Err(problem(
                    at..helper_end.min(end),
                    format!("`{known}` takes one number: `$(call {known}, 180000)`"),
                    refs_hint,
                ));
            }
            let arg_start = helper_end + 1;
            // To the `)` that closes the call, so a refused nested reference is shown whole.
            let mut depth = 0usize;
            let arg_end = arg_start
                + bytes[arg_start..end]
                    .iter()
                    .take_while(|b| match b {
                        b'(' => {
                            depth += 1;
                            true
                        }
                        b')' if depth == 0 => false,
                        b')' => {
                            depth -= 1;
                            true
                        }
                        _ => true,
                    })
                    .count();
            let arg = text[arg_start..arg_end].trim_matches([' ', '\t']);
            if arg.is_empty() || !arg.bytes().all(|b| b.is_ascii_digit()) {
                return Err(problem(
                    arg_start..arg_end.max(arg_start + 1).min(end),
                    format!("the argument of `{known}` must be a literal number"),
                    format!("write e.g. `$(call {known}, 180000)`"),
                ));
            }
            Ok((Part::Helper { name: known, arg: arg.to_string() }, close(arg_end)?))
        }
        _ => {
            let span = at..name_end.max(at + 2).min(end);
            let message = if name.is_empty() {
                "a computed reference is not part of the condition grammar".to_string()
            } else {
                format!("`$({name} …)` is a make function, not a Kconfig symbol")
            };
            Err(problem(span, message, refs_hint))
        }
    }
}

/// Every `when` of `policy` that names a symbol outside `defined` (the tree's Kconfig symbols,
/// without `CONFIG_`, as [`crate::kbuild::kconfig::defined_symbols`] gives them): such a
/// condition is never true, so the lines under it silently do nothing.
pub fn undefined_symbols(policy: &super::Policy, defined: &HashSet<String>) -> Diagnostics {
    let mut diags = Diagnostics::default();
    let mut known: Vec<&str> = Vec::new();
    for unit in &policy.units {
        for (i, condition) in unit.when.iter().enumerate() {
            let Ok(when) = validate(condition) else { continue };
            for symbol in when.symbols() {
                let name = symbol.strip_prefix("CONFIG_").unwrap_or(symbol);
                if defined.contains(name) {
                    continue;
                }
                if known.is_empty() {
                    known = defined.iter().map(String::as_str).collect();
                    known.sort_unstable();
                }
                let hint = match closest_symbol(name, &known) {
                    Some(c) => {
                        format!("did you mean `CONFIG_{c}`? write a symbol some `Kconfig` file of the tree declares")
                    }
                    None => format!(
                        "no `Kconfig` file of the tree declares `config {name}`: fix the name or drop the condition"
                    ),
                };
                let location = unit
                    .when_locations
                    .get(i)
                    .map(|l| symbol_location(policy, l, symbol))
                    .unwrap_or_else(|| unit.location.clone());
                diags.push(
                    Diagnostic::error(Code::UnknownSymbol, format!("`{symbol}` is not a Kconfig symbol of this tree"))
                        .at(location)
                        .hint(hint),
                );
            }
        }
    }
    diags
}

fn closest_symbol<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .filter(|k| k.len().abs_diff(name.len()) <= 2)
        .map(|k| (strsim::damerau_levenshtein(name, k), *k))
        .filter(|(d, _)| *d <= 2.max(name.len() / 6))
        .min()
        .map(|(_, k)| k)
}

/// `at` (a whole `when` string) narrowed to where `symbol` is written in it, when the string
/// is written plainly in its file.
fn symbol_location(policy: &super::Policy, at: &Location, symbol: &str) -> Location {
    let text = policy.files.iter().find(|(p, _)| *p == at.path).map(|(_, t)| t.as_str());
    let found = text.and_then(|t| Some((t, t.get(at.span.clone())?.find(symbol)?)));
    match found {
        Some((text, offset)) => {
            let start = at.span.start + offset;
            Location::from_span(&at.path, text, start..start + symbol.len())
        }
        None => at.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structure_follows_make() {
        let w = validate("ifeq ($(CONFIG_CC_IS_CLANG)_$(call clang-min-version, 180000),y_)").unwrap();
        assert_eq!(w.kind, CondKind::Ifeq);
        assert_eq!(
            w.operands,
            [
                vec![
                    Part::Symbol("CONFIG_CC_IS_CLANG".into()),
                    Part::Literal("_".into()),
                    Part::Helper { name: "clang-min-version", arg: "180000".into() }
                ],
                vec![Part::Literal("y_".into())],
            ]
        );
        assert_eq!(w.symbols(), ["CONFIG_CC_IS_CLANG"]);
        // Blanks before the comma and after it go, as in make; those after `(` stay.
        let w = validate("  ifeq ( $(CONFIG_X) ,  y )  ").unwrap();
        assert_eq!(w.operands[0], [Part::Literal(" ".into()), Part::Symbol("CONFIG_X".into())]);
        assert_eq!(w.operands[1], [Part::Literal("y ".into())]);
        assert_eq!(w.text, "ifeq ( $(CONFIG_X) ,  y )");
        let w = validate("ifndef\tCONFIG_KASAN").unwrap();
        assert_eq!(
            (w.kind, w.symbol.as_deref(), w.text.as_str()),
            (CondKind::Ifndef, Some("CONFIG_KASAN"), "ifndef CONFIG_KASAN")
        );
        let w = validate("ifneq \"$(CONFIG_A)\"'n'").unwrap();
        assert_eq!(w.operands, [vec![Part::Symbol("CONFIG_A".into())], vec![Part::Literal("n".into())]]);
        assert!(validate("ifeq ($(CONFIG_A),)").unwrap().operands[1].is_empty());
    }

    #[test]
    fn spans_point_at_the_offending_part() {
        let at = |text: &str| {
            let p = validate(text).unwrap_err();
            text[p.span].to_string()
        };
        assert_eq!(at("ifeq ($(shell touch x),)"), "$(shell");
        assert_eq!(at("ifeq ($(call shell,id),)"), "shell");
        assert_eq!(at("ifeq ($(call clang-min-version,$(X)),y)"), "$(X)");
        assert_eq!(at("ifdef CONFIG_X # c"), "#");
        assert_eq!(at("ifeq ($(CONFIG_X),$$(y))"), "$$");
        assert_eq!(at("ifeq (a,b"), "");
        assert_eq!(at("ifeq(a,b)"), "(");
        assert_eq!(at("if CONFIG_X"), "if");
        assert_eq!(at("ifdef KASAN"), "KASAN");
    }

    #[test]
    fn undefined_symbols_are_located_with_a_suggestion() {
        let text = "[[unit]]\npath = \"kernel/trace/a.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n\
                    when = [\"ifdef CONFIG_KASAN\", \"ifeq ($(CONFIG_FUNCTION_TRACR)$(CONFIG_ZZZZZZZZ),yy)\"]\n";
        let (policy, diags) = crate::policy::parse_str(std::path::Path::new("p.toml"), text);
        assert!(diags.is_empty(), "{diags:?}");
        let defined: HashSet<String> = ["KASAN", "FUNCTION_TRACER"].map(String::from).into();
        let found = undefined_symbols(&policy, &defined);
        let lines: Vec<String> = found.iter().map(|d| format!("{} {:?}", d.one_line(), d.hint)).collect();
        assert_eq!(found.0.len(), 2, "{lines:?}");
        let first = &found.0[0];
        assert_eq!(&text[first.location.as_ref().unwrap().span.clone()], "CONFIG_FUNCTION_TRACR");
        assert_eq!(first.location.as_ref().map(|l| (l.line, l.col)), Some((5, 40)));
        assert!(first.help().unwrap().starts_with("did you mean `CONFIG_FUNCTION_TRACER`?"), "{lines:?}");
        assert_eq!(first.code, Code::UnknownSymbol);
        assert!(found.0[1].help().unwrap().starts_with("no `Kconfig` file"), "{lines:?}");
    }
}
