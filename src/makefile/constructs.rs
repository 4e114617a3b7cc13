//! Make constructs that can define, undefine or change a directive variable, or change how the
//! lines after them are read, and what the reader does with each. GNU make 4.3's grammar
//! ("Reading Makefiles", "Conditional Syntax", "Multi-Line", "Undefine Directive", "Eval
//! Function", "Special Variables", "Target-specific Variable Values", "Suppressing
//! Inheritance"), as `read.c` applies it: a line is first tried as an assignment (with any of
//! `export`, `unexport`, `override`, `private` before it, or `define`/`undefine`), then as a
//! conditional, then as `export`/`include`/`vpath`/`load`, else it is a rule line. `tests/
//! make_agreement.rs` (`make_constructs_*`) has make decide each row on real rules and requires
//! the reader to agree or to report the construct.
//!
//! | construct | reader |
//! |---|---|
//! | `NAME op value` (`=`, `:=`, `::=`, `+=`, `?=`), `export`/`unexport` before it | modelled (`Event::Assign`) |
//! | `override NAME op value` | modelled: later plain assignments and `undefine` leave it alone |
//! | `private NAME op value` on a directive (a global private variable is not visible in recipes, where Kbuild expands the flags) | opaque |
//! | `NAME != command` on a directive (the shell decides the value) | opaque |
//! | `define NAME [op]` … `endef`, with any modifiers | modelled as one assignment of the body; nothing inside is a directive; nesting counted as make counts it (a `define` word at the start of a line not led by the recipe prefix) |
//! | `undefine NAME`, `override undefine NAME` | modelled (`Event::Undefine`): the variable is undefined from there on |
//! | `ifdef`/`ifndef`/`ifeq`/`ifneq`, `else [if…]`, `endif` | modelled (`Event::If`/`Else`/`Endif`); a keyword followed by an operator (`ifdef := 1`) is an assignment, as in make |
//! | `$(eval …)`, `${eval …}` anywhere (also in recipes, values and `define` bodies, which may be expanded later), `$(guile …)` | opaque; the mechanisms it can touch are read from the literal start of each name it could assign; a line of its text that starts with a reference (`$(eval $(call …))`) can assign anything |
//! | `TARGETS: [modifiers] NAME op value` (target- and pattern-specific) on a directive | opaque |
//! | `TARGETS: [modifiers] is-kernel-object op value` | modelled for `$(obj)/NAME.o` targets and plain values, else opaque (`target`) |
//! | `include`, `-include`, `sinclude`, `load`, `-load` | opaque, any mechanism (the other file is not read) |
//! | `.RECIPEPREFIX` set unconditionally to a literal | modelled: after a rule, a line led by the new prefix is a recipe line and a tab-led one is not |
//! | `.RECIPEPREFIX` set under a conditional, to a computed value, by `+=`/`?=`/`define`/`undefine` | opaque, any mechanism (how later lines read is unknown) |
//! | a line led by the recipe prefix after a rule line (blank lines, comments and conditionals do not end the rule; an assignment, `export`, `include` does) | a recipe line: not read (but searched for `$(eval`) |
//! | a tab-led line with no rule before it | read as any other line, as make does |
//! | `export NAME`/`unexport NAME`, `vpath`, `.SECONDEXPANSION` (its `$$(eval` is found as above), `.POSIX`, `.ONESHELL` | no effect on a variable's value |
//! | `$(shell …)`, `$(call …)` of Kbuild's helpers in a value | expand to nothing (the evaluator); `$(call f)` of a function this file defines is caught at the `$(eval` in its body |
//! | environment and command-line values, `make -e` | not modelled (they override every file; see the book, docs/src/explanation/kbuild.md) |

use std::collections::BTreeSet;

use crate::mechanism::{Form, MechId, MECHANISMS};

/// Where make may change directive variables in ways sanpolicy does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opaque {
    /// 1-based line.
    pub line: usize,
    /// What the construct is, e.g. "`$(eval …)`".
    pub construct: String,
    /// The mechanisms whose variables it may change; `None`: any (or how later lines are read).
    pub touches: Option<BTreeSet<MechId>>,
    /// The names it may assign, as patterns; `None`: any.
    pub names: Option<Vec<NamePattern>>,
    /// It reads another file (`include`, `load`): what that file does is unknown here.
    pub other_file: bool,
    /// It may set `is-kernel-object` for objects of the directory (`target`), which every
    /// decision reading `$(is-kernel-object)` depends on.
    pub kernel_object: bool,
}

/// A name a construct may assign: `literal`, or (when `computed`) anything starting with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePattern {
    pub literal: String,
    pub computed: bool,
}

impl Opaque {
    /// A construct that may assign the variables of `names`.
    pub fn new(line: usize, construct: impl Into<String>, names: Option<Vec<NamePattern>>) -> Opaque {
        let touches = names.as_ref().map(|n| n.iter().flat_map(|p| mechanisms_named(&p.literal, p.computed)).collect());
        Opaque { line, construct: construct.into(), touches, names, other_file: false, kernel_object: false }
    }

    /// Whether this may change a variable of `id`.
    pub fn may_touch(&self, id: MechId) -> bool {
        self.touches.as_ref().is_none_or(|t| t.contains(&id))
    }

    /// Whether this may assign the variable written `name` (unexpanded).
    pub fn may_assign(&self, name: &str) -> bool {
        let literal = name.split('$').next().unwrap_or(name);
        self.names.as_ref().is_none_or(|patterns| {
            patterns.iter().any(|p| match (p.computed, literal.len() < name.len()) {
                (false, false) => p.literal == name,
                (false, true) => p.literal.starts_with(literal),
                (true, _) => literal.starts_with(&p.literal) || p.literal.starts_with(literal),
            })
        })
    }
}

/// The literal beginnings of every variable name a mechanism reads (`KASAN_SANITIZE` covers
/// `KASAN_SANITIZE_<obj>.o`; the ftrace removal variables `CFLAGS_REMOVE_`, `CFLAGS_`,
/// `ccflags-remove-`).
fn families(id: MechId) -> Vec<&'static str> {
    match id.get().form {
        Form::Variable { var, .. } => vec![var],
        Form::FlagRemoval { remove_prefix, add_prefix, dir_remove_var, .. } => {
            let dir = dir_remove_var.split('$').next().unwrap_or(dir_remove_var);
            vec![remove_prefix, add_prefix, dir]
        }
    }
}

/// Mechanisms a variable whose name starts with the literal `prefix` (then anything, if
/// `computed`) could belong to.
pub fn mechanisms_named(prefix: &str, computed: bool) -> BTreeSet<MechId> {
    (0..MECHANISMS.len())
        .map(MechId)
        .filter(|id| families(*id).iter().any(|f| prefix.starts_with(f) || (computed && f.starts_with(prefix))))
        .collect()
}

/// Every `$(eval …)` / `${eval …}` / `$(guile …)` in `text`: its byte offset and its argument.
pub fn evals(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find('$').map(|p| p + i) {
        i = at + 1;
        let Some(&open) = bytes.get(at + 1) else { break };
        let close = match open {
            b'(' => b')',
            b'{' => b'}',
            _ => continue,
        };
        let inner = &text[at + 2..];
        let Some(word) = ["eval", "guile"].into_iter().find(|w| inner.starts_with(w)) else { continue };
        let after = inner.as_bytes().get(word.len()).copied();
        if !matches!(after, Some(b' ' | b'\t' | b'\n') | None) && after != Some(close) {
            continue;
        }
        let end = closing(inner, open, close).unwrap_or(inner.len());
        out.push(if word == "guile" { "$(guile)" } else { inner[word.len()..end].trim_start() });
    }
    out
}

/// Index in `s` of the `close` that ends a reference opened just before `s`.
fn closing(s: &str, open: u8, close: u8) -> Option<usize> {
    let mut depth = 1;
    for (i, b) in s.bytes().enumerate() {
        if b == open {
            depth += 1;
        } else if b == close {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

const MODIFIERS: &[&str] = &["export", "unexport", "override", "private", "define", "undefine"];

/// The names make text (an `$(eval)` argument) may assign when make reads it; `None` when it
/// can assign anything: a line that starts with a reference may expand to any assignment, and
/// `include`/`load`/`.RECIPEPREFIX` change what is read.
pub fn text_names(text: &str) -> Option<Vec<NamePattern>> {
    if text == "$(guile)" {
        return None;
    }
    let mut out = Vec::new();
    for line in text.lines() {
        let code = super::strip_comment(line).0.trim();
        if code.is_empty() {
            continue;
        }
        let first = code.split_whitespace().next().unwrap_or("");
        if ["include", "-include", "sinclude", "load", "-load"].contains(&first) {
            return None;
        }
        let rest = after_targets(code).unwrap_or(code);
        let mut rest = rest.trim_start();
        while let Some(m) =
            MODIFIERS.iter().find(|m| rest.strip_prefix(**m).is_some_and(|r| r.starts_with(char::is_whitespace)))
        {
            rest = rest[m.len()..].trim_start();
        }
        let name = &rest[..rest.find([' ', '\t', ':', '=', '+', '?', '!']).unwrap_or(rest.len())];
        let literal = name.split('$').next().unwrap_or("");
        if literal.is_empty() || literal == ".RECIPEPREFIX" {
            return None;
        }
        out.push(NamePattern { literal: literal.to_string(), computed: literal.len() < name.len() });
    }
    Some(out)
}

/// The mechanisms whose variables `text_names(text)` may assign (`None`: any).
#[cfg(test)]
fn text_touches(text: &str) -> Option<BTreeSet<MechId>> {
    text_names(text).map(|n| n.iter().flat_map(|p| mechanisms_named(&p.literal, p.computed)).collect())
}

/// The text after the targets of a rule line (`a.o b.o: X := y` gives `X := y`): the first `:`
/// outside references that does not start an assignment operator.
pub fn after_targets(code: &str) -> Option<&str> {
    let bytes = code.as_bytes();
    let mut depth = 0i32;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' | b'{' => depth += 1,
            b')' | b'}' => depth -= 1,
            b'=' if depth == 0 => return None,
            b':' if depth == 0 => {
                let op = code[i..].starts_with(":=") || code[i..].starts_with("::=") || code[i..].starts_with(":::=");
                if op {
                    return None;
                }
                let rest = &code[i + 1..];
                // `a:: b` is a double-colon rule.
                return Some(rest.strip_prefix(':').unwrap_or(rest));
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: Option<BTreeSet<MechId>>) -> Option<Vec<&'static str>> {
        set.map(|s| s.into_iter().map(|id| id.get().name).collect())
    }

    #[test]
    fn eval_arguments_and_what_they_touch() {
        let text = "$(foreach f,$(x),$(eval CFLAGS_$(f) = -I y)) ${eval KASAN_SANITIZE_a.o := y} $(evaluate) $(eval)";
        let found = evals(text);
        assert_eq!(found, ["CFLAGS_$(f) = -I y", "KASAN_SANITIZE_a.o := y", ""]);
        assert_eq!(names(text_touches(found[0])), Some(vec!["ftrace"]));
        assert_eq!(names(text_touches(found[1])), Some(vec!["kasan"]));
        assert_eq!(names(text_touches("$(call gen,a)")), None);
        assert_eq!(names(text_touches("a.o: private KCOV_INSTRUMENT := y")), Some(vec!["kcov"]));
        assert_eq!(names(text_touches("K$(x) := y")).map(|v| v.len()), Some(6), "KASAN, KCSAN (2), KCOV, KMSAN (2)");
        assert_eq!(names(text_touches("include foo.mk")), None);
        assert_eq!(names(text_touches("obj-y += a.o")), Some(vec![]));
        let o = Opaque::new(1, "x", text_names("CFLAGS_$(f) = -I y"));
        assert!(o.may_assign("CFLAGS_test_fprobe.o") && !o.may_assign("ccflags-remove-$(CONFIG_FUNCTION_TRACER)"));
        let o = Opaque::new(1, "x", text_names("KASAN_SANITIZE_a.o := y"));
        assert!(o.may_assign("KASAN_SANITIZE_a.o") && !o.may_assign("KASAN_SANITIZE_b.o"));
        assert!(o.may_assign("KASAN_SANITIZE_$(X).o") && !o.may_assign("KCOV_INSTRUMENT"));
    }

    #[test]
    fn targets_end_at_a_colon_that_is_not_an_operator() {
        assert_eq!(after_targets("$(obj)/a.o: KASAN_SANITIZE := y"), Some(" KASAN_SANITIZE := y"));
        assert_eq!(after_targets("X := y"), None);
        assert_eq!(after_targets("X = a:b"), None);
        assert_eq!(after_targets("a:: b"), Some(" b"));
    }
}
