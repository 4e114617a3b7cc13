//! Emitting Kbuild text from the policy: one directive line per unit and mechanism, one
//! generated block per directory, spliced into the directory's kbuild file.

mod block;
pub mod central;
pub mod inplace;

pub use block::{checksum, condition_problems, render_block, render_fragment, splice, SpliceError, REGENERATE};

use crate::kbuild::Naming;
use crate::mechanism::{Form, MechId};
use crate::policy::{Setting, Unit};

/// A directive line in parts: the variable, the operator block and central layouts write, and
/// the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineParts {
    pub name: String,
    pub op: &'static str,
    pub value: String,
}

/// The line for one setting of one unit, in parts, with the unit's exact flags for a
/// flag-removal mechanism; `None` when Kbuild cannot express it (forcing ftrace back on for a
/// whole directory).
pub fn unit_line(unit: &Unit, id: MechId, naming: Naming) -> Option<LineParts> {
    let setting = *unit.settings.get(&id)?;
    if !id.get().expressible(setting, unit.path.object.is_some()) {
        return None;
    }
    let value = unit.value(id)?;
    let stem = unit.path.object.as_deref().map(|o| naming.stem(o));
    Some(match (id.get().form, stem) {
        (Form::Variable { var, .. }, Some(s)) => LineParts { name: format!("{var}_{s}.o"), op: ":=", value },
        (Form::Variable { var, .. }, None) => LineParts { name: var.to_string(), op: ":=", value },
        (Form::FlagRemoval { remove_prefix, add_prefix, .. }, Some(s)) => {
            let prefix = if setting == Setting::Skip { remove_prefix } else { add_prefix };
            LineParts { name: format!("{prefix}{s}.o"), op: "+=", value }
        }
        (Form::FlagRemoval { dir_remove_var, .. }, None) => {
            LineParts { name: dir_remove_var.to_string(), op: "+=", value }
        }
    })
}

/// The make line for one setting of one unit, or `None` when Kbuild cannot express it
/// (forcing ftrace back on for a whole directory).
///
/// Lines never end in a blank or a comment: make would keep either in the value and turn an
/// exemption back on.
pub fn directive_line(id: MechId, object: Option<&str>, setting: Setting, naming: Naming) -> Option<String> {
    if !id.get().expressible(setting, object.is_some()) {
        return None;
    }
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
        (Form::FlagRemoval { dir_remove_var, flags, .. }, None) => Some(format!("{dir_remove_var} += {flags}")),
    }
}
