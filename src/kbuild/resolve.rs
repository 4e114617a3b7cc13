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
    /// The build does not configure the mechanism (this Kconfig option is not set).
    NotConfigured(String),
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

/// An environment with every mechanism configured and every `CONFIG_` the tree's decision
/// expressions read (the `*_ALL` switches) set: the configuration in which an exemption
/// matters most. `kbuild::configs` walks those switches as symbols instead.
pub fn instrumented_env(rules: &Rules) -> Env {
    let mut env = Env::default();
    for m in MECHANISMS {
        env.set(m.config, "y");
        if let Form::FlagRemoval { expansion, .. } = m.form {
            env.set(m.directive_name(), expansion);
        }
    }
    for d in rules.decisions.values() {
        for switch in d.configs() {
            env.set(&switch, "y");
        }
    }
    env
}

/// Evaluate `object` (relative to its kbuild directory, e.g. `lockdep.o`) for `id` in `env`,
/// the variables of that directory's kbuild file. `None` when the tree does not read `id`.
pub fn evaluate(rules: &Rules, id: MechId, object: &str, env: &Env, kernel_object: bool) -> Option<Evaluation> {
    evaluate_as(rules, id, object, env, if kernel_object { "y" } else { "" })
}

/// [`evaluate`] with `$(is-kernel-object)` expanding to `kernel` (Kbuild's own gives `y` or
/// nothing; a target-specific value may give anything): the decision reads the text where it
/// writes `$(is-kernel-object)`, and tests it for being non-empty in `$(if …)`.
pub fn evaluate_as(rules: &Rules, id: MechId, object: &str, env: &Env, kernel: &str) -> Option<Evaluation> {
    let kernel_object = !kernel.is_empty();
    let decision = rules.decision(id)?;
    let stem = decision.naming.stem(object);
    Some(match &decision.kind {
        DecisionKind::Chain { polarity, terms, gated } => {
            let mut words = String::new();
            let mut decided_by = None;
            for term in terms {
                let value = term_value(term, &stem, env, kernel);
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
        DecisionKind::Flags => flags(id, decision, &stem, env),
    })
}

fn term_value(term: &Term, stem: &str, env: &Env, kernel: &str) -> String {
    match term {
        Term::PerObject(v) => env.value(&format!("{v}_{stem}.o")),
        Term::Directory(v) | Term::Config(v) => env.value(v),
        Term::KernelObject => kernel.to_string(),
        Term::IfKernelObject(inner) if !kernel.is_empty() => {
            inner.iter().map(|t| term_value(t, stem, env, kernel)).collect()
        }
        Term::IfKernelObject(_) => String::new(),
        Term::Literal(l) => l.clone(),
    }
}

/// The tree's flags expression (`_c_flags = $(filter-out $(CFLAGS_REMOVE_$(target-stem).o), …)`)
/// expanded for the object, with the compiler flags standing for the mechanism's expansion.
fn flags(id: MechId, decision: &super::rules::Decision, stem: &str, env: &Env) -> Evaluation {
    let Form::FlagRemoval { marker_words, expansion, .. } = id.get().form else {
        unreachable!("flag decision for a variable mechanism")
    };
    let marked = |v: &str| v.split_whitespace().any(|w| marker_words.contains(&w));
    let naming = decision.naming.make_name();
    // Where the tree's flags come from: the top Makefile adds the mechanism's flags to
    // KBUILD_CFLAGS; a run of the file (`configs`) starts it from them and keeps what the file
    // did to it (a `$(subst …)` or `$(filter-out …)` of the flags removes them for every object).
    let kbuild_cflags = if env.defined("KBUILD_CFLAGS") { env.value("KBUILD_CFLAGS") } else { expansion.to_string() };
    let overlay = [(naming.to_string(), stem.to_string()), ("KBUILD_CFLAGS".to_string(), kbuild_cflags)];
    let expr = &decision.expression;
    let words = env.expand_with(expr, &overlay);
    let on = marked(&words);
    // The variables the expression reads (per-object ones named for this object) that carry the flags.
    let by = super::configs::references(&decision.expression_for(stem))
        .into_iter()
        .filter(|v| !v.starts_with("KBUILD_") && marked(&env.value(v)))
        .collect();
    Evaluation { on, words: words.split_whitespace().collect::<Vec<_>>().join(" "), decided_by: DecidedBy::Flags(by) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kbuild::eval::Evaluate;
    use crate::makefile::parse;

    fn state(text: &str, mech: &str, object: &str) -> bool {
        let mut env = instrumented_env(&Rules::builtin());
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
