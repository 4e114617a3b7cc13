//! Importing a kernel tree's scattered directives into a policy, in one pass over its kbuild
//! files: every directive of every mechanism with its conditions and the comment above it as its
//! reason; what the policy cannot represent is reported with file:line and left alone.

mod adopt;
mod locate;
mod planned;
mod scan;
pub mod sync;
mod write;

pub use adopt::adopt;
pub use locate::in_tree;
pub use planned::{plan as plan_sync, Sides, SyncPlan};
pub use scan::{central_resets, central_units, scan, scan_edited, section_units, ImportedUnit, Scan, Taken};
pub use write::policy_toml;
