//! `set-twice`: a kbuild file that sets a variable again below a directive line, so make never
//! reads the earlier line (a clean merge can leave `KASAN_SANITIZE_x.o := n` above and below
//! another line). One warning per dead line, at the line make reads, naming both.

use crate::diagnostic::{Code, Diagnostic, Diagnostics, LineIndex};
use crate::generate::Plan;
use crate::makefile::overridden_by;

/// Every dead directive line of the tree's kbuild files as the plan read them.
pub fn findings(plan: &Plan, diags: &mut Diagnostics) {
    for (dir, file) in plan.files() {
        let (Some(before), Some(parsed)) = (plan.before(dir), plan.before_parsed(dir)) else { continue };
        let lines = LineIndex::new(before);
        for (i, d) in parsed.directives() {
            let a = &parsed.assignments[i];
            let Some(later) = overridden_by(parsed, a) else { continue };
            let path = match &d.object {
                Some(o) => format!("{dir}/{o}"),
                None => format!("{dir}/"),
            };
            diags.push(
                Diagnostic::warning(
                    Code::SetTwice,
                    format!(
                        "`{}` is set twice: line {} (`{} {}`) is never read, make reads this line's `{}`",
                        a.name,
                        a.line,
                        a.op.as_str(),
                        a.value.trim_end(),
                        later.value.trim_end()
                    ),
                )
                .at(lines.line(&file.path, before, later.line))
                .label(format!("{} sets it first; this line replaces it", lines.line(&file.path, before, a.line)))
                .hint(format!(
                    "delete line {} if this value is right, or move its value here; to keep both on purpose, add an `[[acknowledge]]` with `code = \"set-twice\"`, `path = \"{path}\"`, `mechanism = \"{}\"` and a `why`",
                    a.line, d.mech
                ))
                .about(&path, Some(d.mech)),
            );
        }
    }
}
