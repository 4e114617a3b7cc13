//! A problem in the policy import wrote is a problem in the tree: it is located at the
//! Makefile line the unit came from, never in a policy file the user did not write.

use super::{ImportedUnit, Scan};
use crate::diagnostic::{Diagnostic, Diagnostics, Location};
use crate::makefile;

/// `diags` (of the policy `text` written for `scan`) located in the tree where they can be:
/// the `[[unit]]` holding a diagnostic is found by counting tables, and the unit's first
/// directive line in its kbuild file becomes the location.
pub fn in_tree(scan: &Scan, text: &str, diags: &Diagnostics) -> Diagnostics {
    let mut out = Diagnostics::default();
    for d in diags.iter() {
        let unit = d.location.as_ref().filter(|l| l.line > 0).and_then(|l| unit_at_line(text, l.line));
        let at = unit.and_then(|i| scan.units.get(i)).and_then(|u| first_line(scan, u));
        match at {
            Some(location) => out.push(
                Diagnostic::error(d.code, format!("this directive cannot become a policy unit: {}", d.message))
                    .at(location)
                    .hint("rewrite this directive in the Makefile (its comment, condition, or the values of the variables in its name) so a policy can record it, then import again"),
            ),
            None => out.push(d.clone()),
        }
    }
    out
}

/// Which `[[unit]]` table (0-based) line `line` (1-based) of `text` belongs to.
fn unit_at_line(text: &str, line: usize) -> Option<usize> {
    let headers = text.lines().take(line).filter(|l| l.trim() == "[[unit]]").count();
    headers.checked_sub(1)
}

fn first_line(scan: &Scan, unit: &ImportedUnit) -> Option<Location> {
    scan.taken.iter().filter(|t| t.dir == unit.dir).find_map(|t| {
        t.assignments.iter().map(|&i| &t.parsed.assignments[i]).find_map(|a| {
            let d = makefile::classify(a)?;
            let when: Vec<&str> = a.frames.iter().map(|f| f.condition.text.as_str()).collect();
            (d.object == unit.object && when == unit.when).then(|| Location::at_line(&t.path, &t.text, a.line))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_line_maps_to_its_unit() {
        let text = "# header\n\n[[unit]]\npath = \"a/x.o\"\n\n[[unit]]\npath = \"b/y.o\"\nwhy = 1\n";
        assert_eq!(unit_at_line(text, 1), None);
        assert_eq!(unit_at_line(text, 4), Some(0));
        assert_eq!(unit_at_line(text, 8), Some(1));
    }
}
