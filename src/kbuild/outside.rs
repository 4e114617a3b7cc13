//! Lines that change an object's instrumentation without the mechanism's own variables: a
//! per-object `CFLAGS_x.o`/`RUSTFLAGS_x.o` that passes a mechanism's flags (6.12's
//! `CFLAGS_kcsan_test.o := $(CFLAGS_KCSAN) …`), or a directory-wide `ccflags-y`,
//! `subdir-ccflags-y` or `KBUILD_CFLAGS` that adds or filters them. Kbuild appends those flags
//! after the mechanism's own decision, so `KCSAN_SANITIZE := n` does not exempt such an object:
//! `explain` and `check` name the line instead of trusting the variables.
//!
//! A value counts when it names a flag variable of [`crate::mechanism::FLAG_CARRIERS`] directly
//! or through variables the file defines (`CFLAGS_KASAN_TEST := $(CFLAGS_KASAN)`, then
//! `CFLAGS_kasan_test_c.o := $(CFLAGS_KASAN_TEST)`), in any branch of its conditionals.

use super::eval::{Env, Oracle};
use crate::makefile::{Assignment, Condition, KbuildFile};
use crate::mechanism::MechId;

/// One line that passes (or removes) a mechanism's flags outside the policy's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutsideLine {
    pub mech: MechId,
    /// `Some("kcsan_test.o")` for a per-object line; `None` for a directory-wide one.
    pub object: Option<String>,
    /// The variable the line assigns, as written (`CFLAGS_kcsan_test.o`, `ccflags-y`).
    pub variable: String,
    /// The flag variable it carries (`CFLAGS_KCSAN`).
    pub carrier: &'static str,
    /// It takes the flags away (`CFLAGS_REMOVE_x.o`, `ccflags-remove-y`, `$(filter-out …)`)
    /// rather than adding them.
    pub removes: bool,
    /// 1-based line.
    pub line: usize,
}

impl OutsideLine {
    /// What the line does, for a message: "passes `$(CFLAGS_KCSAN)` to `kcsan_test.o`".
    pub fn describe(&self) -> String {
        let verb = if self.removes { "removes" } else { "passes" };
        let to = match &self.object {
            Some(o) => format!("`{o}`"),
            None => "every object of the directory".to_string(),
        };
        let prep = if self.removes { "from" } else { "to" };
        format!("`{}` {verb} `$({})` ({}'s flags) {prep} {to}", self.variable, self.carrier, self.mech)
    }

    /// Whether the line affects `object` (relative to the directory, as the policy names it).
    pub fn affects(&self, object: &str) -> bool {
        self.object.as_deref().is_none_or(|o| o == object)
    }
}

/// Takes every branch, so a variable defined under any condition is known to carry flags.
struct EveryBranch;

impl Oracle for EveryBranch {
    fn decide(&mut self, _: &Condition, _: &Env) -> bool {
        true
    }
}

/// Stands for a flag variable in the evaluation: no compiler option looks like it.
fn marker(carrier: &str) -> String {
    format!("@sanpolicy-carrier:{carrier}@")
}

/// Per-object flag variables and their object, `None` when `name` is not one.
fn per_object(name: &str) -> Option<(String, bool)> {
    for (prefix, removes) in
        [("CFLAGS_REMOVE_", true), ("RUSTFLAGS_REMOVE_", true), ("CFLAGS_", false), ("RUSTFLAGS_", false)]
    {
        if let Some(o) = name.strip_prefix(prefix).filter(|o| o.ends_with(".o") && o.len() > 2) {
            return Some((o.to_string(), removes));
        }
    }
    None
}

/// Directory-wide flag variables (the variable part before any `$(CONFIG_…)`), and whether
/// they remove.
fn directory_wide(name: &str) -> Option<bool> {
    let literal = name.split('$').next().unwrap_or(name);
    if ["ccflags-remove-", "subdir-ccflags-remove-", "rustflags-remove-"].iter().any(|p| literal.starts_with(p)) {
        return Some(true);
    }
    let adds =
        ["ccflags-", "subdir-ccflags-", "rustflags-", "subdir-rustflags-"].iter().any(|p| literal.starts_with(p))
            || ["KBUILD_CFLAGS", "KBUILD_RUSTFLAGS"].contains(&literal);
    adds.then_some(false)
}

/// Every line of `file` that passes or removes a mechanism's flags outside its variables.
pub fn outside_lines(file: &KbuildFile) -> Vec<OutsideLine> {
    let carriers: Vec<(MechId, &'static str)> =
        MechId::all().flat_map(|id| id.flag_carriers().iter().map(move |c| (id, *c))).collect();
    if carriers.is_empty() {
        return Vec::new();
    }
    let mut env = Env::with(carriers.iter().map(|(_, c)| (c.to_string(), marker(c))));
    env.run(file, &mut EveryBranch);
    let mut out = Vec::new();
    for a in &file.assignments {
        let target =
            per_object(&a.name).map(|(o, r)| (Some(o), r)).or_else(|| directory_wide(&a.name).map(|r| (None, r)));
        let Some((object, removes)) = target else { continue };
        for (id, carrier) in &carriers {
            if carries(a, &env, carrier) {
                let removes = removes || a.value.contains("filter-out");
                out.push(OutsideLine {
                    mech: *id,
                    object: object.clone(),
                    variable: a.name.clone(),
                    carrier,
                    removes,
                    line: a.line,
                });
            }
        }
    }
    out
}

/// The lines of `file` that affect `object` (relative to the file's directory).
pub fn affecting(file: &KbuildFile, object: &str) -> Vec<OutsideLine> {
    outside_lines(file).into_iter().filter(|l| l.affects(object)).collect()
}

/// Whether `a`'s value names `carrier`, directly (also inside functions the evaluator does not
/// run, such as `$(filter-out …)`) or through the file's variables.
fn carries(a: &Assignment, env: &Env, carrier: &str) -> bool {
    let direct = a.value.contains(&format!("$({carrier})")) || a.value.contains(&format!("${{{carrier}}}"));
    direct || env.expand(&a.value).contains(&marker(carrier))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::makefile;

    fn lines(text: &str) -> Vec<(String, Option<String>, String, bool, usize)> {
        outside_lines(&makefile::parse(text))
            .into_iter()
            .map(|l| (l.mech.to_string(), l.object, l.carrier.to_string(), l.removes, l.line))
            .collect()
    }

    #[test]
    fn per_object_lines_directly_and_through_variables() {
        let text = "KCSAN_SANITIZE := n\n\
                    CFLAGS_core.o := -fno-conserve-stack\n\
                    CFLAGS_kcsan_test.o := $(CFLAGS_KCSAN) -fno-omit-frame-pointer\n\
                    CFLAGS_KASAN_TEST := $(CFLAGS_KASAN)\n\
                    ifdef CONFIG_X\n\
                    CFLAGS_KASAN_TEST += -fno-builtin\n\
                    endif\n\
                    CFLAGS_kasan_test_c.o := $(CFLAGS_KASAN_TEST)\n\
                    RUSTFLAGS_kasan_test_rust.o := $(RUSTFLAGS_KASAN)\n";
        assert_eq!(
            lines(text),
            [
                ("kcsan".into(), Some("kcsan_test.o".into()), "CFLAGS_KCSAN".into(), false, 3),
                ("kasan".into(), Some("kasan_test_c.o".into()), "CFLAGS_KASAN".into(), false, 8),
                ("kasan".into(), Some("kasan_test_rust.o".into()), "RUSTFLAGS_KASAN".into(), false, 9),
            ]
        );
    }

    #[test]
    fn directory_wide_lines_and_removals() {
        let text = "ccflags-y += $(CFLAGS_KCOV)\n\
                    KBUILD_CFLAGS := $(filter-out $(CFLAGS_UBSAN), $(KBUILD_CFLAGS))\n\
                    CFLAGS_REMOVE_x.o += $(CFLAGS_GCOV)\n\
                    ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)\n\
                    ifdef CONFIG_Y\n\
                    subdir-ccflags-y += ${CFLAGS_KMSAN}\n\
                    endif\n";
        assert_eq!(
            lines(text),
            [
                ("kcov".into(), None, "CFLAGS_KCOV".into(), false, 1),
                ("ubsan".into(), None, "CFLAGS_UBSAN".into(), true, 2),
                ("gcov".into(), Some("x.o".into()), "CFLAGS_GCOV".into(), true, 3),
                ("kmsan".into(), None, "CFLAGS_KMSAN".into(), false, 6),
            ]
        );
    }
}
