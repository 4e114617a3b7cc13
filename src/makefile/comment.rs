//! What a `#` comment line of a kbuild file can hold. The policy parser asks it of every reason
//! and link (they become comment lines), the emitter and import neutralise with it: a comment
//! is kbuild text, so the rule lives with the reader of kbuild text.

use super::{BEGIN_MARKER, END_MARKER};

/// Why `text` (a reason or a link) cannot be written as comment lines of a generated block, if
/// it cannot: a control character (a lone carriage return would make the file unreadable as
/// Kbuild text), or a line that would read as one of the block's own markers. The policy parser
/// refuses such text; the block renderer neutralises it anyway, so no text can end the block
/// early.
pub fn comment_problem(text: &str) -> Option<String> {
    let text = text.replace("\r\n", "\n");
    if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\n' && *c != '\t') {
        return Some(format!("a control character (U+{:04X})", u32::from(c)));
    }
    text.lines().find(|l| forges_marker(l)).map(|l| format!("a line that reads as a generated block marker: `{l}`"))
}

/// Whether `# {line}` would be taken for a begin or end marker.
pub fn forges_marker(line: &str) -> bool {
    [BEGIN_MARKER, END_MARKER].iter().any(|m| m.strip_prefix("# ").is_some_and(|m| line.starts_with(m)))
}
