//! Which assignments are instrumentation directives, decided from the mechanism table alone.

use super::{Assignment, Op};
use crate::mechanism::{Form, MechId, Setting, MECHANISMS};

/// What a directive's value means for its mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectiveValue {
    /// Exactly the value that exempts or forces.
    Plain(Setting),
    /// Anything else (`N`, `yes`, `n y`, a trailing blank, flags mixed with other flags …).
    Other,
}

/// An assignment that sets a mechanism for an object or a whole directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub mech: MechId,
    /// `Some("lockdep.o")` (as written, may hold `$(BITS)`) or `None` for the directory.
    pub object: Option<String>,
    pub value: DirectiveValue,
}

/// Classify an assignment; `None` when it is not an instrumentation directive.
pub fn classify(a: &Assignment) -> Option<Directive> {
    MECHANISMS.iter().enumerate().find_map(|(i, m)| match m.form {
        Form::Variable { var, skip_value, force_value, .. } => {
            let object = if a.name == var {
                None
            } else {
                Some(a.name.strip_prefix(var)?.strip_prefix('_')?.strip_suffix(".o")?.to_string() + ".o")
            };
            let value = match a.value.as_str() {
                v if v == skip_value => DirectiveValue::Plain(Setting::Skip),
                v if v == force_value => DirectiveValue::Plain(Setting::Force),
                _ => DirectiveValue::Other,
            };
            Some(Directive { mech: MechId(i), object, value })
        }
        Form::FlagRemoval { remove_prefix, add_prefix, dir_remove_var, flags, marker_words, .. } => {
            let mentions = a.value.split_whitespace().any(|w| w == flags || marker_words.contains(&w));
            if !mentions {
                return None;
            }
            // Any mix of plain options and variable references is modelled: the unit keeps the
            // exact flags (`-pg`, `$(CC_FLAGS_FTRACE) $(CC_FLAGS_SCS)`).
            let pure = a.value.split_whitespace().all(is_plain_flag) && !a.value.ends_with(char::is_whitespace);
            let plain = |s| if pure { DirectiveValue::Plain(s) } else { DirectiveValue::Other };
            let object_of =
                |prefix: &str| a.name.strip_prefix(prefix).filter(|o| o.ends_with(".o")).map(str::to_string);
            if let Some(o) = object_of(remove_prefix) {
                return Some(Directive { mech: MechId(i), object: Some(o), value: plain(Setting::Skip) });
            }
            if a.name == dir_remove_var || a.name == "ccflags-remove-y" {
                return Some(Directive { mech: MechId(i), object: None, value: plain(Setting::Skip) });
            }
            let o = object_of(add_prefix)?;
            Some(Directive { mech: MechId(i), object: Some(o), value: plain(Setting::Force) })
        }
    })
}

/// A compiler option (`-pg`, `-fno-stack-protector`, `-Os`) or a plain `$(VARIABLE)` reference:
/// the words a modelled flag line may hold. Nothing else can become make code from a policy.
pub fn is_plain_flag(word: &str) -> bool {
    if let Some(name) = word.strip_prefix("$(").and_then(|w| w.strip_suffix(')')) {
        return name.starts_with(|c: char| c.is_ascii_uppercase())
            && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    }
    word.strip_prefix('-').is_some_and(|rest| {
        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric() || "_=.,+-/".contains(c))
    })
}

/// Why a directive line cannot be a unit's line, if it cannot: its value or its form says more
/// than a unit can (`n # why`, `N`, an `export`). A line continued by `\` is read as make joins
/// it (one blank for each break) and is a unit's line like any other. Import reports such lines once;
/// generation leaves them alone; `check` lists them as findings about the tree.
pub fn unmodelled(a: &Assignment, d: &Directive) -> Option<String> {
    if d.value == DirectiveValue::Other {
        return Some(format!("value `{}` is not a plain `n`/`y` or plain compiler flags", a.value.escape_debug()));
    }
    if let Some(m) = a.modifiers.first() {
        return Some(format!("`{m}` assignment"));
    }
    if a.inline_comment.is_some() {
        return Some("inline comment on the directive line".into());
    }
    if let Some(f) = a.frames.iter().find(|f| f.condition.args.is_empty()) {
        return Some(format!("unreadable condition `{}`", f.condition.text));
    }
    if matches!(d.mech.get().form, Form::Variable { .. }) && matches!(a.op, Op::Conditional | Op::Shell | Op::Immediate)
    {
        return Some(format!("operator `{}`", a.op.as_str()));
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::makefile::parse;
    use crate::mechanism::Setting;

    use super::*;

    fn first(text: &str) -> Option<Directive> {
        classify(&parse(text).assignments[0])
    }

    #[test]
    fn every_form_is_recognised() {
        let d = first("KASAN_SANITIZE_head$(BITS).o := n\n").unwrap();
        assert_eq!(
            (d.mech.get().name, d.object.as_deref(), d.value),
            ("kasan", Some("head$(BITS).o"), DirectiveValue::Plain(Setting::Skip))
        );
        let d = first("OBJECT_FILES_NON_STANDARD := y\n").unwrap();
        assert_eq!((d.mech.get().name, d.object, d.value), ("objtool", None, DirectiveValue::Plain(Setting::Skip)));
        let d = first("KCSAN_INSTRUMENT_BARRIERS_x.o := y\n").unwrap();
        assert_eq!((d.mech.get().name, d.value), ("kcsan-barriers", DirectiveValue::Plain(Setting::Force)));
        let d = first("CFLAGS_REMOVE_x.o = $(CC_FLAGS_FTRACE)\n").unwrap();
        assert_eq!((d.mech.get().name, d.value), ("ftrace", DirectiveValue::Plain(Setting::Skip)));
        // Plain options beside the ftrace flags are modelled (the unit keeps them exactly) …
        let d = first("CFLAGS_REMOVE_x.o = $(CC_FLAGS_FTRACE) -fno-stack-protector\n").unwrap();
        assert_eq!(d.value, DirectiveValue::Plain(Setting::Skip));
        // … a function call or a trailing blank is not.
        let d = first("CFLAGS_REMOVE_x.o = $(CC_FLAGS_FTRACE) $(call cc-option,-x)\n").unwrap();
        assert_eq!(d.value, DirectiveValue::Other);
        assert_eq!(first("CFLAGS_REMOVE_x.o = -pg \n").unwrap().value, DirectiveValue::Other);
        let d = first("ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)\n").unwrap();
        assert_eq!((d.object, d.value), (None, DirectiveValue::Plain(Setting::Skip)));
        let d = first("CFLAGS_trace_selftest_dynamic.o = $(CC_FLAGS_FTRACE)\n").unwrap();
        assert_eq!(d.value, DirectiveValue::Plain(Setting::Force));
        assert_eq!(first("KASAN_SANITIZE_x.o := N\n").unwrap().value, DirectiveValue::Other);
    }

    #[test]
    fn other_assignments_are_not_directives() {
        for text in [
            "CFLAGS_REMOVE_x.o = -fstack-protector\n",
            "obj-y += kasan.o\n",
            "KASAN_SANITIZE_x := n\n",
            "CFLAGS_KASAN := -fsanitize=kernel-address\n",
        ] {
            assert_eq!(first(text), None, "{text}");
        }
    }
}
