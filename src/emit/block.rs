//! The generated block: markers from `templates/`, units grouped with their reasons as comments,
//! conditions as `if…`/`endif`, and a checksum in the end marker that tells a stale block (safe
//! to regenerate) from a hand-edited one (never overwritten silently).

use super::unit_line;
use crate::kbuild::Rules;
use crate::makefile::{forges_marker, Block, KbuildFile};
use crate::policy::Unit;

const BEGIN_TEMPLATE: &str = include_str!("../../templates/kbuild-block-begin.txt");
const END_TEMPLATE: &str = include_str!("../../templates/kbuild-block-end.txt");
const FRAGMENT_TEMPLATE: &str = include_str!("../../templates/fragment-header.txt");

/// The command named in markers: the same whichever front end wrote the block.
pub const REGENERATE: &str = "sanpolicy gen-makefiles";

/// FNV-1a over the block body: cheap, stable, and only meant to notice hand edits.
pub fn checksum(body: &str) -> String {
    let hash = body.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{hash:016x}")
}

pub(crate) fn comment_lines(out: &mut String, text: &str) {
    for line in text.lines() {
        // Control characters become blanks, and a line that reads as a marker is indented.
        let line: String = line.chars().map(|c| if c.is_control() && c != '\t' { ' ' } else { c }).collect();
        // A comment ending in `\` would continue onto the next line and swallow a directive.
        let line = line.trim_end_matches(|c: char| c == '\\' || c.is_whitespace());
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            out.push_str(if forges_marker(line) { "#  " } else { "# " });
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// The line a condition is written as. Policy text never becomes make code: a condition that
/// is not in the `when` grammar ([`crate::policy::when::validate`], which the parser applies) is
/// never written. Reaching here with one is a bug of the caller (a debug build stops); a release
/// build writes a line that stops make with an error and a test that is never true, so the
/// block stays balanced and nothing of the condition runs.
fn condition_line(condition: &str) -> String {
    match crate::policy::when::validate(condition) {
        Ok(w) => w.text,
        Err(p) => {
            debug_assert!(false, "condition {condition:?} reached the emitter unvalidated: {}", p.message);
            "$(error sanpolicy refused a condition that is not in its grammar: run `sanpolicy check`)\nifeq (sanpolicy,refused)"
                .to_string()
        }
    }
}

/// Every condition of `units` that the emitter refuses to write, as `bad-condition` errors at
/// the unit: callers that build units without the policy parser check with this first.
pub fn condition_problems(units: &[&Unit]) -> crate::diagnostic::Diagnostics {
    use crate::diagnostic::{Code, Diagnostic};
    let mut diags = crate::diagnostic::Diagnostics::default();
    for unit in units {
        for condition in &unit.when {
            if let Err(p) = crate::policy::when::validate(condition) {
                diags.push(
                    Diagnostic::error(Code::BadCondition, format!("invalid condition `{condition}`: {}", p.message))
                        .at(unit.location.clone())
                        .hint(p.hint),
                );
            }
        }
    }
    diags
}

/// The body (between the markers) for the units of one directory, in policy order. Adjacent
/// units with the same reason, links and conditions share one comment and one conditional.
/// The central file (`central.rs`) puts exactly these lines in each directory's section.
pub(crate) fn render_body(units: &[&Unit], rules: &Rules) -> String {
    let mut out = String::new();
    let same_group = |a: &Unit, b: &Unit| a.why == b.why && a.links == b.links && a.when == b.when;
    for (i, unit) in units.iter().enumerate() {
        let opens = i == 0 || !same_group(units[i - 1], unit);
        let closes = i + 1 == units.len() || !same_group(unit, units[i + 1]);
        if opens {
            if i > 0 {
                out.push('\n');
            }
            comment_lines(&mut out, &unit.why);
            for link in &unit.links {
                comment_lines(&mut out, &format!("see: {link}"));
            }
            for condition in &unit.when {
                out.push_str(&condition_line(condition));
                out.push('\n');
            }
        }
        for id in unit.settings.keys() {
            if let Some(l) = unit_line(unit, *id, rules.naming(*id)) {
                out.push_str(&format!("{} {} {}\n", l.name, l.op, l.value));
            }
        }
        if closes {
            for _ in &unit.when {
                out.push_str("endif\n");
            }
        }
    }
    out
}

/// The whole block, markers included, ending in a newline.
pub fn render_block(units: &[&Unit], rules: &Rules) -> String {
    wrap_body(&render_body(units, rules))
}

/// `body` between the begin marker and the end marker recording its checksum.
pub(crate) fn wrap_body(body: &str) -> String {
    let begin = BEGIN_TEMPLATE.replace("{command}", REGENERATE);
    let end = END_TEMPLATE.replace("{checksum}", &checksum(body));
    format!("{begin}{body}{end}")
}

/// A standalone fragment for `target/`: the do-not-edit header, then the block.
pub fn render_fragment(units: &[&Unit], rules: &Rules, command: &str, policy: &str, dir: &str) -> String {
    let header = FRAGMENT_TEMPLATE
        .replace("{command}", command)
        .replace("{policy}", policy)
        .replace("{dir}", dir)
        .replace("{units}", &units.len().to_string());
    format!("{header}\n{}", render_block(units, rules))
}

/// Why a block cannot be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpliceError {
    /// Broken markers, at a 1-based line.
    Markers(usize, String),
    /// The body no longer matches its recorded checksum.
    HandEdited(Block),
}

/// `existing` with its generated block replaced by `block` (appended when there is none;
/// removed when `block` is empty). Hand edits are refused unless `force`.
pub fn splice(existing: &str, parsed: &KbuildFile, block: &str, force: bool) -> Result<String, SpliceError> {
    if let Some(p) = parsed.marker_problems.first() {
        return Err(SpliceError::Markers(p.line, p.message.clone()));
    }
    match &parsed.block {
        Some(b) => {
            if !force && b.recorded_checksum.as_deref() != Some(checksum(&b.body).as_str()) {
                return Err(SpliceError::HandEdited(b.clone()));
            }
            let mut out = String::with_capacity(existing.len() + block.len());
            out.push_str(&existing[..b.byte_range.start]);
            out.push_str(block);
            let rest = &existing[b.byte_range.end..];
            if block.is_empty() && out.ends_with("\n\n") && (rest.is_empty() || rest.starts_with('\n')) {
                out.pop();
            }
            out.push_str(rest);
            Ok(out)
        }
        None if block.is_empty() => Ok(existing.to_string()),
        None => {
            // Without a final newline, a last `\` is a character to make; the newline the block
            // needs before it would turn it into a line continuation.
            let last = existing.rsplit('\n').next().unwrap_or("");
            if (last.len() - last.trim_end_matches('\\').len()) % 2 == 1 {
                let line = existing.split_inclusive('\n').count();
                let message = "the file ends in `\\` without a final newline: adding the newline a block needs would make it a line continuation";
                return Err(SpliceError::Markers(line, message.into()));
            }
            if let Some((line, keyword)) = &parsed.unclosed {
                return Err(SpliceError::Markers(
                    *line,
                    format!("this `{keyword}` is never closed: a block appended to the file would land inside it"),
                ));
            }
            let mut out = existing.to_string();
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            if !out.is_empty() && !out.ends_with("\n\n") {
                out.push('\n');
            }
            out.push_str(block);
            Ok(out)
        }
    }
}
