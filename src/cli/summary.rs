//! The short summary `gen-makefiles` prints: units, directories, exemptions per mechanism.

use crate::kbuild::Rules;
use crate::mechanism::MechId;
use crate::policy::{Policy, Setting};

pub fn render(policy: &Policy, rules: &Rules, policy_name: &str, target: &str, files: usize, changed: usize) -> String {
    let mut out = format!(
        "{policy_name}: {} units in {} directories, {} requirements\n{target}: {files} file(s), {changed} changed\n{}\n",
        policy.units.len(),
        policy.directories().len(),
        policy.requirements.len(),
        rules.describe()[0],
    );
    out.push_str(&format!("{:<18} {:>8} {:>8} {:>8}\n", "mechanism", "skip obj", "skip dir", "force"));
    for id in MechId::all() {
        let count = |setting: Setting, dir: bool| {
            policy
                .units
                .iter()
                .filter(|u| u.path.is_directory() == dir && u.settings.get(&id) == Some(&setting))
                .count()
        };
        let forced = count(Setting::Force, false) + count(Setting::Force, true);
        let (obj, dir) = (count(Setting::Skip, false), count(Setting::Skip, true));
        if obj + dir + forced > 0 {
            out.push_str(&format!("{:<18} {obj:>8} {dir:>8} {forced:>8}\n", id.get().name));
        }
    }
    out.trim_end().to_string()
}
