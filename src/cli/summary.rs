//! The short summary `gen-makefiles` prints: units, directories, exemptions per mechanism.

use crate::kbuild::Rules;
use crate::policy::Policy;
use crate::review::report;

pub fn render(policy: &Policy, rules: &Rules, policy_name: &str, target: &str, files: usize, changed: usize) -> String {
    let mut out = format!(
        "{policy_name}: {} units in {} directories, {} requirements\n{target}: {files} file(s), {changed} changed\n{}\n",
        policy.units.len(),
        policy.directories().len(),
        policy.requirements.len(),
        rules.describe()[0],
    );
    out.push_str(&format!("{:<18} {:>8} {:>8} {:>8}\n", "mechanism", "skip obj", "skip dir", "force"));
    for (id, c) in report::counts(policy) {
        let (obj, dir, forced) = (c.objects_skipped, c.directories_skipped, c.forced);
        out.push_str(&format!("{:<18} {obj:>8} {dir:>8} {forced:>8}\n", id.get().name));
    }
    out.trim_end().to_string()
}
