//! The effective state of an object for a mechanism: the only place that knows Kbuild's
//! precedence (per-object value, then directory value, then the default). Everything else asks.

use super::eval::Env;
use super::rules::{DecisionKind, Rules, Term};
use crate::mechanism::{Form, MechId, Polarity, MECHANISMS};

/// Which part of the concatenation decided the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidedBy {
    /// A per-object variable, e.g. `KASAN_SANITIZE_lockdep.o`.
    Object(String),
    /// The directory variable, e.g. `KASAN_SANITIZE`.
    Directory(String),
    /// The tree's default (`y`, `$(is-kernel-object)`, a `CONFIG_*_ALL` switch, …).
    Default,
    /// Flag removal: the variables that removed or re-added the flags (empty: nothing did).
    Flags(Vec<String>),
}

/// The result of evaluating one object for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// Instrumented (objtool: checked; ftrace: traced).
    pub on: bool,
    /// The word list Kbuild tested (for chains) or the flags left (for flag removal).
    pub words: String,
    pub decided_by: DecidedBy,
}

/// An environment with every mechanism configured and every `*_ALL` switch on: the
/// configuration in which an exemption matters most.
pub fn instrumented_env() -> Env {
    let mut env = Env::default();
    for m in MECHANISMS {
        env.set(m.config, "y");
        if let Form::FlagRemoval { expansion, .. } = m.form {
            env.set(m.directive_name(), expansion);
        }
    }
    for all in ["CONFIG_KCOV_INSTRUMENT_ALL", "CONFIG_GCOV_PROFILE_ALL", "CONFIG_UBSAN_SANITIZE_ALL"] {
        env.set(all, "y");
    }
    env
}

/// Evaluate `object` (relative to its kbuild directory, e.g. `lockdep.o`) for `id` in `env`,
/// the variables of that directory's kbuild file. `None` when the tree does not read `id`.
pub fn evaluate(rules: &Rules, id: MechId, object: &str, env: &Env, kernel_object: bool) -> Option<Evaluation> {
    let decision = rules.decision(id)?;
    let stem = decision.naming.stem(object);
    Some(match &decision.kind {
        DecisionKind::Chain { polarity, terms, gated } => {
            let mut words = String::new();
            let mut decided_by = None;
            for term in terms {
                let value = term_value(term, &stem, env, kernel_object);
                if decided_by.is_none() && !value.trim().is_empty() {
                    decided_by = Some(match term {
                        Term::PerObject(v) => DecidedBy::Object(format!("{v}_{stem}.o")),
                        Term::Directory(v) => DecidedBy::Directory(v.clone()),
                        _ => DecidedBy::Default,
                    });
                }
                words.push_str(&value);
            }
            let on = match polarity {
                Polarity::OffIfAllN => words.split_whitespace().any(|w| !w.starts_with('n')),
                Polarity::SkipIfAllY => {
                    words.split_whitespace().any(|w| !w.starts_with('y')) && (!gated || kernel_object)
                }
            };
            Evaluation { on, words, decided_by: decided_by.unwrap_or(DecidedBy::Default) }
        }
        DecisionKind::Flags => flags(id, &stem, env),
    })
}

fn term_value(term: &Term, stem: &str, env: &Env, kernel_object: bool) -> String {
    match term {
        Term::PerObject(v) => env.value(&format!("{v}_{stem}.o")),
        Term::Directory(v) | Term::Config(v) => env.value(v),
        Term::KernelObject => {
            if kernel_object {
                "y".into()
            } else {
                String::new()
            }
        }
        Term::IfKernelObject(inner) if kernel_object => {
            inner.iter().map(|t| term_value(t, stem, env, kernel_object)).collect()
        }
        Term::IfKernelObject(_) => String::new(),
        Term::Literal(l) => l.clone(),
    }
}

/// `_c_flags = $(filter-out $(CFLAGS_REMOVE_<stem>.o), $(filter-out $(ccflags-remove-y), …) $(CFLAGS_<stem>.o))`.
fn flags(id: MechId, stem: &str, env: &Env) -> Evaluation {
    let Form::FlagRemoval { remove_prefix, add_prefix, flags, marker_words, .. } = id.get().form else {
        unreachable!("flag decision for a variable mechanism")
    };
    let remove_var = format!("{remove_prefix}{stem}.o");
    let add_var = format!("{add_prefix}{stem}.o");
    let base = env.expand(flags);
    let dir_removed = env.value("ccflags-remove-y");
    let obj_removed = env.value(&remove_var);
    let added = env.value(&add_var);
    let keep = |list: &str, removed: &str| -> Vec<String> {
        list.split_whitespace().filter(|w| !removed.split_whitespace().any(|r| r == *w)).map(str::to_string).collect()
    };
    // The per-object removal filters the per-object additions too; the directory removal does not.
    let mut kept = keep(&base, &dir_removed);
    kept.extend(added.split_whitespace().map(str::to_string));
    let words = keep(&kept.join(" "), &obj_removed);
    let on = words.iter().any(|w| marker_words.contains(&w.as_str()));
    let mut by = Vec::new();
    for (var, value) in
        [("ccflags-remove-y", &dir_removed), (remove_var.as_str(), &obj_removed), (add_var.as_str(), &added)]
    {
        if value.split_whitespace().any(|w| marker_words.contains(&w)) {
            by.push(var.to_string());
        }
    }
    Evaluation { on, words: words.join(" "), decided_by: DecidedBy::Flags(by) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kbuild::eval::Evaluate;
    use crate::makefile::parse;

    fn state(text: &str, mech: &str, object: &str) -> bool {
        let mut env = instrumented_env();
        env.run(&parse(text), &mut Evaluate);
        evaluate(&Rules::builtin(), MechId::by_name(mech).unwrap(), object, &env, true).unwrap().on
    }

    #[test]
    fn per_object_beats_directory_beats_default() {
        assert!(!state("KASAN_SANITIZE := n\n", "kasan", "a.o"));
        assert!(state("KASAN_SANITIZE := n\nKASAN_SANITIZE_a.o := y\n", "kasan", "a.o"));
        assert!(!state("KASAN_SANITIZE := y\nKASAN_SANITIZE_a.o := n\n", "kasan", "a.o"));
        assert!(state("", "kasan", "a.o"));
        assert!(state("KASAN_SANITIZE_a.o := n # why\n", "kasan", "a.o"), "inline comment keeps a blank: on");
    }

    #[test]
    fn objtool_is_inverted_and_ftrace_is_flags() {
        assert!(!state("OBJECT_FILES_NON_STANDARD_a.o := y\n", "objtool", "a.o"));
        assert!(state("OBJECT_FILES_NON_STANDARD := y\nOBJECT_FILES_NON_STANDARD_a.o := n\n", "objtool", "a.o"));
        assert!(!state("CFLAGS_REMOVE_a.o = $(CC_FLAGS_FTRACE)\n", "ftrace", "a.o"));
        assert!(!state("ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)\n", "ftrace", "a.o"));
        assert!(state(
            "ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)\nCFLAGS_a.o += $(CC_FLAGS_FTRACE)\n",
            "ftrace",
            "a.o"
        ));
        assert!(
            !state("CFLAGS_REMOVE_a.o = $(CC_FLAGS_FTRACE)\nCFLAGS_a.o += $(CC_FLAGS_FTRACE)\n", "ftrace", "a.o"),
            "CFLAGS_REMOVE_ filters CFLAGS_ too"
        );
    }
}
