//! `[[crate]]` and `[[profile]]` entries: the Cargo side of the policy, parsed with the same
//! spans and the same collect-everything rules as `[[unit]]`.

use std::ops::Range;

use toml_edit::TableLike;

use super::{closest, merge_settings, reason, string, string_list, tables, unknown_keys, Ctx};
use crate::diagnostic::{Code, Diagnostic, Location};
use crate::mechanism::{self, MechId, RustMechId};
use crate::policy::crates::RESERVED_PROFILES;
use crate::policy::{CargoProfile, CrateEntry, CrateSpec, Policy};

const CRATE_KEYS: &[&str] = &["name", "skip", "force", "item-skip", "why", "links"];
const PROFILE_KEYS: &[&str] = &["name", "inherits", "enable", "why", "links"];

/// Parse every `[[crate]]` and `[[profile]]` of one file into `policy`.
pub(super) fn parse(cx: &mut Ctx, root: &dyn TableLike, policy: &mut Policy) {
    for (table, span) in tables(cx, root, "crate") {
        if let Some(entry) = parse_crate(cx, table, span) {
            policy.crates.push(entry);
        }
    }
    for (table, span) in tables(cx, root, "profile") {
        if let Some(profile) = parse_profile(cx, table, span) {
            policy.profiles.push(profile);
        }
    }
}

/// Rust mechanism names, with a pointer to the rustc counterpart of a Kbuild name.
fn mechanisms(cx: &mut Ctx, table: &dyn TableLike, key: &str) -> Vec<(RustMechId, Location)> {
    let mut out = Vec::new();
    for (name, span) in string_list(cx, table, key) {
        if let Some(id) = RustMechId::by_name(&name) {
            out.push((id, cx.loc(Some(span))));
            continue;
        }
        let names = mechanism::rust_names();
        let counterpart = mechanism::RUST_MECHANISMS.iter().find(|m| m.kbuild == Some(name.as_str()));
        let hint = match (counterpart, MechId::by_name(&name), closest(&name, &names)) {
            (Some(m), _, _) => {
                format!(
                    "`{name}` is a Kbuild mechanism; its rustc counterpart is `{}`. Known: {}",
                    m.name,
                    names.join(", ")
                )
            }
            (None, Some(_), _) => {
                format!("`{name}` is a Kbuild mechanism with no rustc counterpart. Known: {}", names.join(", "))
            }
            (None, None, Some(c)) => format!("did you mean `{c}`? known rustc mechanisms: {}", names.join(", ")),
            (None, None, None) => format!("known rustc mechanisms: {}", names.join(", ")),
        };
        cx.error(Code::UnknownMechanism, Some(span), format!("unknown rustc mechanism `{name}`"), hint);
    }
    out
}

fn parse_crate(cx: &mut Ctx, table: &dyn TableLike, span: Option<Range<usize>>) -> Option<CrateEntry> {
    unknown_keys(cx, table, CRATE_KEYS, "`[[crate]]`");
    let name = string(cx, table, "name");
    let why = reason(cx, table, span.clone(), "`[[crate]]`", true, "entry").map(|(w, _)| w.trim().to_string());
    let links: Vec<String> = string_list(cx, table, "links").into_iter().map(|(l, _)| l).collect();
    let skip = mechanisms(cx, table, "skip");
    let force = mechanisms(cx, table, "force");
    let item_skip = mechanisms(cx, table, "item-skip");
    let Some((name_text, name_span)) = name else {
        if table.get("name").is_none() {
            cx.error(
                Code::MissingKey,
                span,
                "`[[crate]]` has no `name`".into(),
                "add the package name: `name = \"regex\"` (or `\"regex@1.10.2\"` when the graph has two versions)",
            );
        }
        return None;
    };
    let spec = match CrateSpec::parse(&name_text) {
        Ok(s) => s,
        Err((message, hint)) => {
            cx.error(Code::BadCrateName, name_span, message, hint);
            return None;
        }
    };
    let (settings, setting_locations) = merge_settings(cx, &spec.to_string(), skip, force);
    let mut items = Vec::new();
    for (id, loc) in item_skip {
        if items.contains(&id) {
            cx.diags.push(
                Diagnostic::error(Code::SkipAndForce, format!("`{id}` is listed twice"))
                    .at(loc)
                    .hint("list each mechanism once in `item-skip`"),
            );
        } else if id.get().attributes.is_empty() {
            cx.diags.push(
                Diagnostic::error(Code::Unsupported, format!("no item-level attribute turns `{id}` off")).at(loc).hint(
                    "`item-skip` lists mechanisms that `#[sanitize(… = \"off\")]` can name; skip the crate instead",
                ),
            );
        } else {
            items.push(id);
        }
    }
    let attempted = ["skip", "force", "item-skip"]
        .iter()
        .filter_map(|k| table.get(k))
        .any(|i| i.as_array().is_none_or(|a| !a.is_empty()));
    if settings.is_empty() && items.is_empty() && !attempted {
        cx.error(
            Code::MissingKey,
            name_span.clone(),
            format!("`{spec}` neither skips nor forces anything"),
            "add `skip = [\"…\"]`, `force = [\"…\"]` or `item-skip = [\"…\"]`, or remove the entry",
        );
    }
    Some(CrateEntry {
        spec,
        settings,
        item_skip: items,
        why: why?,
        links,
        location: cx.loc(name_span),
        setting_locations,
    })
}

/// A Cargo profile name: letters, digits, `-` and `_`, starting with a letter.
fn profile_name(cx: &mut Ctx, text: &str, span: Option<Range<usize>>, custom: bool) -> bool {
    let well_formed = text.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !well_formed {
        cx.error(
            Code::BadProfileName,
            span,
            format!("`{text}` is not a Cargo profile name"),
            "use letters, digits, `-` and `_`, starting with a letter, e.g. `asan`",
        );
        return false;
    }
    if custom && RESERVED_PROFILES.contains(&text) {
        cx.error(
            Code::ReservedProfile,
            span,
            format!("`{text}` is a profile Cargo defines; sanpolicy only writes custom profiles"),
            format!("name the sanitized profile, e.g. `name = \"asan\"`, and keep `inherits = \"{text}\"` if you want its settings"),
        );
        return false;
    }
    true
}

fn parse_profile(cx: &mut Ctx, table: &dyn TableLike, span: Option<Range<usize>>) -> Option<CargoProfile> {
    unknown_keys(cx, table, PROFILE_KEYS, "`[[profile]]`");
    let name = string(cx, table, "name");
    let inherits = string(cx, table, "inherits");
    let why = reason(cx, table, span.clone(), "`[[profile]]`", false, "entry").map(|(w, _)| w.trim().to_string());
    let links: Vec<String> = string_list(cx, table, "links").into_iter().map(|(l, _)| l).collect();
    let enable = mechanisms(cx, table, "enable");
    let inherits = match inherits {
        Some((text, s)) if profile_name(cx, &text, s.clone(), false) => Some(text),
        Some(_) => None,
        None if table.get("inherits").is_some() => None,
        None => Some("dev".to_string()),
    };
    let Some((name_text, name_span)) = name else {
        if table.get("name").is_none() {
            cx.error(
                Code::MissingKey,
                span,
                "`[[profile]]` has no `name`".into(),
                "add the Cargo profile to write, e.g. `name = \"asan\"`",
            );
        }
        return None;
    };
    if !profile_name(cx, &name_text, name_span.clone(), true) {
        return None;
    }
    let mut ids = Vec::new();
    for (id, loc) in enable {
        if ids.contains(&id) {
            cx.diags.push(
                Diagnostic::error(Code::SkipAndForce, format!("`{id}` is listed twice"))
                    .at(loc)
                    .hint("list each mechanism once in `enable`"),
            );
        } else {
            ids.push(id);
        }
    }
    Some(CargoProfile { name: name_text, inherits: inherits?, enable: ids, why, links, location: cx.loc(name_span) })
}
