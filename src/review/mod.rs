//! Reviewing instrumentation decisions: the effective state the policy produces, why an object
//! is (not) instrumented, a summary for a PR, and what a policy change does.

pub mod diff;
pub mod effective;
pub mod explain;
pub mod hook;
pub mod report;
