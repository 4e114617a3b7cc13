//! Emitting Kbuild text from the policy: one directive line per unit and mechanism, one
//! generated block per directory, spliced into the directory's kbuild file.

mod block;
pub mod central;

pub use block::{checksum, comment_problem, render_block, render_fragment, splice, SpliceError};

use crate::kbuild::Naming;
use crate::mechanism::{Form, MechId};
use crate::policy::Setting;

/// The make line for one setting of one unit, or `None` when Kbuild cannot express it
/// (forcing ftrace back on for a whole directory).
///
/// Lines never end in a blank or a comment: make would keep either in the value and turn an
/// exemption back on.
pub fn directive_line(id: MechId, object: Option<&str>, setting: Setting, naming: Naming) -> Option<String> {
    let stem = object.map(|o| naming.stem(o));
    match (id.get().form, stem) {
        (Form::Variable { var, skip_value, force_value, .. }, stem) => {
            let value = if setting == Setting::Skip { skip_value } else { force_value };
            Some(match stem {
                Some(s) => format!("{var}_{s}.o := {value}"),
                None => format!("{var} := {value}"),
            })
        }
        (Form::FlagRemoval { remove_prefix, add_prefix, flags, .. }, Some(s)) => {
            let prefix = if setting == Setting::Skip { remove_prefix } else { add_prefix };
            Some(format!("{prefix}{s}.o += {flags}"))
        }
        (Form::FlagRemoval { dir_remove_var, flags, .. }, None) => {
            (setting == Setting::Skip).then(|| format!("{dir_remove_var} += {flags}"))
        }
    }
}
