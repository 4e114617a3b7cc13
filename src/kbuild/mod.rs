//! Kbuild semantics: the tree's rules, a make evaluator for kbuild files, and the resolver that
//! gives the effective state of any object for any mechanism.

pub mod arch;
pub mod configs;
pub mod descent;
pub mod dotconfig;
pub mod eval;
pub mod kconfig;
pub mod outside;
pub mod resolve;
pub mod rules;
mod source;

/// Stands for "any object of the directory without a setting of its own" where a state is
/// asked of a directory.
pub const ANY_OBJECT: &str = "sanpolicy-any-object.o";

pub use eval::{Env, Evaluate, Oracle};
pub use outside::{affecting, outside_lines, OutsideLine};
pub use resolve::{evaluate, evaluate_as, instrumented_env, DecidedBy, Evaluation};
pub use rules::{Decision, DecisionKind, Naming, Rules, Term};
pub use source::{has_source, has_source_in, KbuildWords};
