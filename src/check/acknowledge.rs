//! Known findings: a policy's `[[acknowledge]]` entries turn the tree findings they name into
//! notes (listed, not failing); an entry that names no finding is itself a finding, so the list
//! cannot outlive what it excuses.

use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::policy::Policy;

/// `diags` with every acknowledged finding turned into a note carrying its reason, plus one
/// error per acknowledgement that matched nothing. Without a tree (`judged` false) the tree's
/// findings were never looked for, so an acknowledgement matching nothing says nothing: it is
/// judged stale only where its finding could have been found.
pub fn apply(policy: &Policy, diags: Diagnostics, judged: bool) -> Diagnostics {
    let mut used = vec![false; policy.acknowledged.len()];
    let mut out = Diagnostics::default();
    for d in diags.0 {
        // Exactly the finding's subject: its path (a directory is not its objects) and its
        // mechanism (an entry without one matches only findings about no mechanism).
        let found = d.subject.as_ref().and_then(|subject| {
            policy
                .acknowledged
                .iter()
                .position(|a| a.code == d.code && subject.path == a.path && subject.mechanism == a.mechanism)
        });
        match found {
            Some(i) if d.is_error() || d.severity == crate::diagnostic::Severity::Warning => {
                used[i] = true;
                let ack = &policy.acknowledged[i];
                out.push(
                    Diagnostic::note(Code::Acknowledged, format!("acknowledged [{}]: {}", d.code.as_str(), d.message))
                        .at(ack.location.clone())
                        .label(first_line(&ack.why)),
                );
            }
            _ => out.push(d),
        }
    }
    for (ack, used) in policy.acknowledged.iter().zip(used) {
        if !used && judged {
            out.push(
                Diagnostic::error(
                    Code::StaleAcknowledgement,
                    format!("`{}` for `{}` acknowledges a finding this tree does not have", ack.code, ack.path),
                )
                .at(ack.location.clone())
                .hint("the finding is gone (fixed upstream or by the policy): remove this `[[acknowledge]]` entry"),
            );
        }
    }
    out
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_string()
}
