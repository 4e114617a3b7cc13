//! Policy-wide keys (`layout`, `builtin-requirements`), `[[acknowledge]]` entries, and a unit's
//! exact `flags`: what says how the policy lives in a tree and which findings it keeps.

use std::collections::BTreeMap;
use std::ops::Range;

use toml_edit::TableLike;

use super::{closest, quoted, reason, string, tables, unknown_keys, Ctx};
use crate::diagnostic::{Code, Fix, CODES};
use crate::mechanism::{Form, MechId};
use crate::policy::{Acknowledgement, Layout, Policy, Setting};

const ACK_KEYS: &[&str] = &["code", "path", "mechanism", "why", "links"];

/// Names of the codes a policy may acknowledge (the code table's `acknowledgeable` column):
/// facts about the tree, never drift or bad input.
fn acknowledgeable() -> Vec<&'static str> {
    CODES.iter().filter(|c| c.acknowledgeable).map(|c| c.name).collect()
}

/// Parse the policy-wide keys of one file into `policy`; `main` says whether it is the policy
/// itself (policy-wide keys are refused in an included file: they would apply to the includer).
pub(super) fn parse(cx: &mut Ctx, root: &dyn TableLike, policy: &mut Policy, main: bool) {
    for key in ["layout", "builtin-requirements"] {
        if !main && root.contains_key(key) {
            let span = root.key(key).and_then(toml_edit::Key::span);
            cx.error(
                Code::UnknownKey,
                span,
                format!("`{key}` is a policy-wide key: it belongs in the main policy file, not an include"),
                format!("move `{key}` into the policy that includes this file"),
            );
        }
    }
    if main {
        if let Some((name, span)) = string(cx, root, "layout") {
            match Layout::by_name(&name) {
                Some(l) => policy.layout = l,
                None => cx.error(Code::WrongType, span, format!("unknown layout `{name}`"), layout_hint(&name)),
            }
        }
        if let Some(item) = root.get("builtin-requirements") {
            match item.as_bool() {
                Some(b) => policy.builtin_requirements = b,
                None => cx.error(
                    Code::WrongType,
                    item.span(),
                    "`builtin-requirements` must be `true` or `false`".into(),
                    "write `builtin-requirements = false` to opt out of sanpolicy's recursion-prone requirements",
                ),
            }
        }
    }
    for (table, span) in tables(cx, root, "acknowledge") {
        if let Some(ack) = parse_acknowledgement(cx, table, span) {
            policy.acknowledged.push(ack);
        }
    }
}

fn layout_hint(name: &str) -> String {
    match closest(name, Layout::NAMES) {
        Some(c) => format!("did you mean `{c}`? expected one of {}", quoted(Layout::NAMES)),
        None => format!("expected one of {}", quoted(Layout::NAMES)),
    }
}

fn parse_acknowledgement(cx: &mut Ctx, table: &dyn TableLike, span: Option<Range<usize>>) -> Option<Acknowledgement> {
    unknown_keys(cx, table, ACK_KEYS, "`[[acknowledge]]`");
    let code = string(cx, table, "code");
    let path = string(cx, table, "path");
    let mechanism = string(cx, table, "mechanism");
    let why = reason(cx, table, span.clone(), "`[[acknowledge]]`", true, "acknowledgement");
    let Some((code, code_span)) = code else {
        missing(cx, table, span.clone(), "code", "add `code = \"missing-source\"` (the finding's code in brackets)");
        return None;
    };
    let code = match Code::by_name(&code) {
        Some(known) if known.is_acknowledgeable() => known,
        known => {
            let ackable = acknowledgeable();
            let message = match known {
                Some(_) => format!("`{code}` findings cannot be acknowledged"),
                None => format!("unknown code `{code}`"),
            };
            let hint = match closest(&code, &ackable) {
                Some(c) => {
                    format!("did you mean `{c}`? findings that can be acknowledged: {}", quoted(&ackable)).into()
                }
                None => crate::hint![
                    format!("findings that can be acknowledged: {}; drift is fixed with ", quoted(&ackable)),
                    Fix::Sync,
                    " or ",
                    Fix::GenMakefiles
                ],
            };
            cx.error(Code::UnknownKey, code_span, message, hint);
            return None;
        }
    };
    let Some((path, path_span)) = path else {
        missing(cx, table, span, "path", "add `path = \"dir/object.o\"`: the unit or requirement the finding is about");
        return None;
    };
    let mechanism = match mechanism {
        None => None,
        Some((name, s)) => match MechId::by_name(&name) {
            Some(id) => Some(id),
            None => {
                let names = crate::mechanism::names();
                cx.error(
                    Code::UnknownMechanism,
                    s,
                    format!("unknown mechanism `{name}`"),
                    format!("known mechanisms: {}", names.join(", ")),
                );
                return None;
            }
        },
    };
    let (why, _) = why?;
    Some(Acknowledgement { code, path, mechanism, why: why.trim().to_string(), location: cx.loc(path_span) })
}

fn missing(cx: &mut Ctx, table: &dyn TableLike, span: Option<Range<usize>>, key: &str, hint: &str) {
    if table.get(key).is_none() {
        cx.error(Code::MissingKey, span, format!("`[[acknowledge]]` has no `{key}`"), hint.to_string());
    }
}

/// `flags = { ftrace = "-pg" }`: the exact flags of a flag-removal mechanism the unit sets.
/// Each word is a compiler option or a plain `$(VARIABLE)` reference, and the mechanism's own
/// flags or marker word must be among them: policy text never becomes make code.
pub(super) fn parse_flags(
    cx: &mut Ctx,
    table: &dyn TableLike,
    settings: &BTreeMap<MechId, Setting>,
) -> BTreeMap<MechId, String> {
    let mut out = BTreeMap::new();
    let Some(item) = table.get("flags") else { return out };
    let Some(flags) = item.as_table_like() else {
        cx.error(
            Code::WrongType,
            item.span(),
            "`flags` must be a table".into(),
            "write `flags = { ftrace = \"-pg\" }`",
        );
        return out;
    };
    for (name, value) in flags.iter() {
        let key_span = flags.key(name).and_then(toml_edit::Key::span);
        let Some(id) = MechId::by_name(name).filter(|id| matches!(id.get().form, Form::FlagRemoval { .. })) else {
            cx.error(
                Code::UnknownMechanism,
                key_span,
                format!("`{name}` is not a flag-removal mechanism"),
                "only mechanisms switched by removing compiler flags (`ftrace`) take `flags`",
            );
            continue;
        };
        if !settings.contains_key(&id) {
            cx.error(
                Code::MissingKey,
                key_span,
                format!("`flags` for `{name}`, which the unit neither skips nor forces"),
                format!("add `{name}` to `skip` or `force`, or remove its `flags`"),
            );
            continue;
        }
        let Some(text) = value.as_str() else {
            cx.error(
                Code::WrongType,
                value.span(),
                format!("`flags.{name}` must be a string"),
                "write the flags as one string",
            );
            continue;
        };
        match flag_problem(id, text) {
            Some(problem) => cx.error(
                Code::BadCondition,
                value.span(),
                format!("`flags.{name}`: {problem}"),
                "write compiler options (`-pg`) and plain variable references (`$(CC_FLAGS_FTRACE)`), separated by blanks",
            ),
            None => {
                out.insert(id, text.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    out
}

/// Why `text` cannot be the flags of `id`'s line, if it cannot.
pub fn flag_problem(id: MechId, text: &str) -> Option<String> {
    let Form::FlagRemoval { flags, marker_words, .. } = id.get().form else {
        return Some("not a flag mechanism".into());
    };
    let words: Vec<&str> = text.split_whitespace().collect();
    if let Some(bad) = words.iter().find(|w| !crate::makefile::is_plain_flag(w)) {
        return Some(format!("`{}` is neither a compiler option nor a plain `$(VARIABLE)`", bad.escape_debug()));
    }
    if !words.iter().any(|w| *w == flags || marker_words.contains(w)) {
        return Some(format!("the flags must contain `{flags}` or {}", quoted(marker_words)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_options_and_plain_references_with_the_mechanism_in_them() {
        let ftrace = MechId::by_name("ftrace").unwrap();
        for good in
            ["-pg", "$(CC_FLAGS_FTRACE)", "-pg $(CC_FLAGS_FTRACE)", "$(CC_FLAGS_FTRACE) -Os -fno-stack-protector"]
        {
            assert_eq!(flag_problem(ftrace, good), None, "{good}");
        }
        for bad in [
            "-fstack-protector",
            "$(shell touch /tmp/x) -pg",
            "-pg $(eval X := y)",
            "-pg $(call cc-option,-x)",
            "-pg;",
            "-pg $(cc_flags)",
            "-pg #",
            "-",
        ] {
            assert!(flag_problem(ftrace, bad).is_some(), "{bad}");
        }
    }
}
