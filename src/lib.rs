//! sanpolicy: the Linux kernel's sanitizer and coverage exemptions as one declarative policy.
//!
//! Pipeline, one module per stage:
//! - [`input`]: the one way a file is read (regular files only, never blocking, bounded);
//! - [`mechanism`]: the table of instrumentation mechanisms (data, not code);
//! - [`policy`]: the policy model and its parsing with spans;
//! - [`makefile`]: reading kbuild files (assignments, conditionals, comments, generated blocks);
//! - [`kbuild`]: the tree's rules, a make evaluator and the resolver of effective state;
//! - [`emit`]: rendering directive lines and generated blocks;
//! - [`generate`]: planning the new text of every file before writing, and the effective
//!   snapshot, the memory of the last generation bound to its tree;
//! - [`check`]: requirements, sources and drift;
//! - [`output`]: the one atomic writer and the diffs;
//! - [`diagnostic`]: one shape for every problem; [`cli`]: the shared command line;
//! - [`runtime`]: boot the debug kernel a policy builds under QEMU, read its reports, price an exemption;
//! - [`cargo`]: the Cargo side: `[[crate]]` entries as profile tables in a workspace's `Cargo.toml`.

pub mod cargo;
pub mod check;
pub mod cli;
pub mod derive;
pub mod diagnostic;
pub mod emit;
pub mod generate;
pub mod import;
pub mod input;
pub mod kbuild;
pub mod makefile;
pub mod mechanism;
pub mod output;
pub mod policy;
pub mod review;
pub mod runtime;
