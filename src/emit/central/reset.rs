//! Resets: how the central layout drops a line the directory's own kbuild file keeps.
//!
//! The central file cannot delete a line of a subsystem Makefile, but it is read after it, so
//! it can give the line's variable the value Kbuild reads as "never set": the empty value.
//! Every expression the kernel reads these variables with (6.1 and 6.12 `scripts/Makefile.lib`,
//! `scripts/Makefile.build`) concatenates them (`$(KASAN_SANITIZE_$(target-stem).o)$(KASAN_SANITIZE)…`)
//! or filters with them (`$(filter-out $(CFLAGS_REMOVE_$(target-stem).o), …)`), and none asks
//! `$(origin …)`, `$(flavor …)` or `ifdef` of them, so an empty value and an unset variable
//! are the same to Kbuild. `tests/central_reset.rs` has GNU make prove it on both trees' rule
//! files for every mechanism.
//!
//! A directory line the policy has no unit for (same mechanism, object and conditions; for a
//! flag-removal mechanism also the same variable, since the section's `+=` line adds to the
//! directory's instead of replacing it) gets a reset at the top of the directory's section,
//! under the line's own conditions: `KCSAN_SANITIZE_lockdep.o :=`. The section's own lines
//! follow, so for that variable Kbuild then reads exactly the policy's lines. That is exact
//! only when every other line of the file that may set the variable is one the policy can
//! hold (it is repeated by the section, or reset too); otherwise there is no reset and the
//! reason says why (a `CFLAGS_REMOVE_x.o += -fno-stack-protector` beside the ftrace line
//! would be dropped with it).

use std::collections::{HashMap, HashSet};

use crate::emit::inplace::{canonical_when, line_key, unit_key, LineKey};
use crate::kbuild::Rules;
use crate::makefile::{Assignment, KbuildFile};
use crate::mechanism::{Form, MechId, Setting};
use crate::policy::Unit;

/// The line that makes a directory line's variable read as never set, under its conditions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reset {
    /// The variable, exactly as the directory's line names it.
    pub name: String,
    /// The line's conditions, outermost first, as conditional lines in the `when` grammar.
    pub when: Vec<String>,
}

impl Reset {
    /// The reset line itself. `:=` for a per-object or directory variable; `=` for a flag
    /// variable, so that the section's `+=` after it stays deferred, as on an unset variable.
    pub fn line(&self, mech: MechId) -> String {
        let op = match mech.get().form {
            Form::Variable { .. } => ":=",
            Form::FlagRemoval { .. } => "=",
        };
        format!("{} {op}\n", self.name)
    }

    /// What [`section_resets`] reads back for this reset: its name and conditions in the
    /// spelling lines are matched in.
    pub fn key(&self) -> (String, Vec<String>) {
        (self.name.clone(), canonical_when(&self.when))
    }
}

/// A modelled directive line of a directory's kbuild file that the policy does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unheld {
    /// 1-based line in the directory's kbuild file.
    pub line: usize,
    /// The line as written, without its newline.
    pub text: String,
    pub mech: MechId,
    /// The object as the line names it (may hold `$(BITS)`); `None` for the directory.
    pub object: Option<String>,
    pub setting: Setting,
    /// The reset the section writes for it (never, when `dead`), or why none can be exact.
    pub reset: Result<Reset, String>,
    /// A later line of the file sets the variable again: make never reads this one.
    pub dead: bool,
}

/// The lines of `file` (a directory's own kbuild file, `text`) that `units` (the directory's
/// units) do not hold, each with its reset, in file order.
pub fn unheld(text: &str, file: &KbuildFile, units: &[&Unit], rules: &Rules) -> Vec<Unheld> {
    let mut held: HashMap<LineKey, Vec<Setting>> = HashMap::new();
    for unit in units {
        for id in unit.settings.keys() {
            if let Some((key, value)) = unit_key(unit, *id, rules) {
                held.entry(key).or_default().push(value.setting);
            }
        }
    }
    let fitting: HashSet<usize> = file
        .directives()
        .filter(|(i, d)| line_key(file, &file.assignments[*i], d, rules).is_some())
        .map(|(i, _)| i)
        .filter(|i| fits(&file.assignments[*i]).is_ok())
        .collect();
    let mut out = Vec::new();
    for (i, d) in file.directives() {
        let a = &file.assignments[i];
        let Some((key, value)) = line_key(file, a, d, rules) else { continue };
        // A line a later one overrides is dead (sync leaves it, naming it `set-twice`, for a
        // person to delete or move): kept, so that a reset on disk written for it while it was
        // live is not taken for the later line's, but never reset, since the section comes
        // after the whole file and its reset would cancel the later line under this one's
        // conditions.
        let dead = crate::makefile::overridden_by(file, a).is_some();
        // A `:=` line of the section replaces the directory's value; a flag line's `+=` only
        // adds to it, so a flag line is held only by a line for the same variable.
        let replaces = matches!(d.mech.get().form, Form::Variable { .. });
        if held.get(&key).is_some_and(|s| replaces || s.contains(&value.setting)) {
            continue;
        }
        out.push(Unheld {
            line: a.line,
            text: text.get(a.bytes.clone()).unwrap_or("").trim_end().to_string(),
            mech: d.mech,
            object: d.object.clone(),
            setting: value.setting,
            reset: reset_for(file, i, &fitting),
            dead,
        });
    }
    out
}

/// Whether a directive line is one the central file can name: its conditions are in the
/// `when` grammar and its variable's name is plain text and `$(VAR)` references.
fn fits(a: &Assignment) -> Result<Vec<String>, String> {
    let mut when = Vec::new();
    for c in a.when() {
        match crate::policy::when::validate(&c) {
            Ok(w) => when.push(w.text),
            Err(p) => return Err(format!("its condition `{c}` is outside the policy's `when` grammar: {}", p.message)),
        }
    }
    if !plain_name(&a.name) {
        return Err(format!("its variable name `{}` is more than text and `$(VAR)` references", a.name.escape_debug()));
    }
    Ok(when)
}

/// The reset of directive `i`, or why a reset would not be exact.
fn reset_for(file: &KbuildFile, i: usize, fitting: &HashSet<usize>) -> Result<Reset, String> {
    let a = &file.assignments[i];
    let when = fits(a)?;
    if let Some(o) = file.opaque.iter().find(|o| o.may_assign(&a.name)) {
        return Err(format!("{} at line {} may set `{}` too, and a reset would undo it", o.construct, o.line, a.name));
    }
    let other = file
        .assignments
        .iter()
        .enumerate()
        .find(|(j, b)| *j != i && !fitting.contains(j) && may_alias(&b.name, &a.name));
    if let Some((_, b)) = other {
        return Err(format!(
            "line {} also assigns `{}`, outside what the policy can hold, and a reset would undo that line too",
            b.line, b.name
        ));
    }
    Ok(Reset { name: a.name.clone(), when })
}

/// Text and `$(NAME)` references only: nothing in it can become more make code than the
/// directory's own line already is.
fn plain_name(name: &str) -> bool {
    let mut rest = name;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("$(") {
            let Some(end) = after.find(')') else { return false };
            let var = &after[..end];
            if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return false;
            }
            rest = &after[end + 1..];
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            if !(c.is_ascii_alphanumeric() || "_-.+/".contains(c)) {
                return false;
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    !name.is_empty()
}

/// Whether two variable names may be one variable once make expands them: equal when both are
/// plain text; otherwise whenever one's text before its first `$` begins the other's
/// (`ccflags-remove-$(CONFIG_FUNCTION_TRACER)` and `ccflags-remove-y`).
fn may_alias(a: &str, b: &str) -> bool {
    let (la, lb) = (a.split('$').next().unwrap_or(a), b.split('$').next().unwrap_or(b));
    if la.len() == a.len() && lb.len() == b.len() {
        return a == b;
    }
    la.starts_with(lb) || lb.starts_with(la)
}

/// The resets in a section of the central file (`section`, its text between `ifeq` and
/// `endif`): every plain assignment of an empty value, as [`Reset::key`] names it.
pub fn section_resets(section: &str) -> Vec<(String, Vec<String>)> {
    let parsed = crate::makefile::parse(section);
    parsed
        .assignments
        .iter()
        .filter(|a| a.value.trim().is_empty() && a.modifiers.is_empty() && !a.continued && plain_name(&a.name))
        .filter(|a| matches!(a.op, crate::makefile::Op::Simple | crate::makefile::Op::Recursive))
        .map(|a| (a.name.clone(), a.when()))
        .collect()
}

/// The text of the resets at the top of a section: a comment naming the directory's kbuild
/// file, then each reset under its conditions (adjacent resets under the same conditions share
/// one conditional), in the order of the lines they reset.
pub fn render_resets(kbuild_file: &str, resets: &[(MechId, Reset)]) -> String {
    if resets.is_empty() {
        return String::new();
    }
    let mut out = format!("# Lines of {kbuild_file} the policy does not have: back to Kbuild's default.\n");
    let mut open: &[String] = &[];
    for (mech, reset) in resets {
        if reset.when != open {
            for _ in open {
                out.push_str("endif\n");
            }
            for c in &reset.when {
                out.push_str(c);
                out.push('\n');
            }
            open = &reset.when;
        }
        out.push_str(&reset.line(*mech));
    }
    for _ in open {
        out.push_str("endif\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_alias_as_make_may_expand_them() {
        assert!(may_alias("CFLAGS_REMOVE_x.o", "CFLAGS_REMOVE_x.o"));
        assert!(!may_alias("CFLAGS_REMOVE_x.o", "CFLAGS_REMOVE_y.o"));
        assert!(!may_alias("KASAN_SANITIZE", "KASAN_SANITIZE_x.o"));
        assert!(may_alias("ccflags-remove-$(CONFIG_FUNCTION_TRACER)", "ccflags-remove-y"));
        assert!(may_alias("KASAN_SANITIZE_head64.o", "KASAN_SANITIZE_head$(BITS).o"));
        assert!(!may_alias("ccflags-remove-$(CONFIG_FUNCTION_TRACER)", "ccflags-y"));
    }

    #[test]
    fn only_plain_names_are_written() {
        for good in ["KASAN_SANITIZE_x.o", "KASAN_SANITIZE_head$(BITS).o", "ccflags-remove-$(CONFIG_FUNCTION_TRACER)"] {
            assert!(plain_name(good), "{good}");
        }
        for bad in ["", "A$(shell x).o", "A$(x", "A$$B", "A B", "A#B", "A$(a,b)"] {
            assert!(!plain_name(bad), "{bad}");
        }
    }
}
