//! Reading a policy file with toml_edit, keeping spans so that every problem points at
//! file:line:col. All problems are collected; nothing stops at the first.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::Path;

use toml_edit::{Document, Item, Key, TableLike};

use super::{Policy, Requirement, Setting, Unit, UnitPath};
use crate::diagnostic::{Code, Diagnostic, Diagnostics, LineIndex, Location};
use crate::mechanism::{self, MechId};

mod cargo;
mod layout;

use super::include::{Includes, Resolved};

const TOP_KEYS: &[&str] =
    &["include", "layout", "builtin-requirements", "unit", "require", "acknowledge", "crate", "profile"];
const UNIT_KEYS: &[&str] =
    &["path", "skip", "force", "flags", "why", "links", "when", "vars", "kbuild-dir", "category"];
const REQUIRE_KEYS: &[&str] = &["path", "exempt", "except", "why", "links"];

/// Read and parse the policy at `path` and the files it includes.
pub fn load(path: &Path) -> (Policy, Diagnostics) {
    load_from(path, &|p| Ok(crate::input::read(p, crate::input::POLICY_LIMIT)?), true)
}

/// Reads file contents for the parser: the filesystem, or another source such as a git revision.
pub type Reader<'a> = &'a dyn Fn(&Path) -> std::io::Result<Vec<u8>>;

/// Like [`load`], reading the policy and its includes through `read`.
pub fn load_with(path: &Path, read: Reader) -> (Policy, Diagnostics) {
    load_from(path, read, false)
}

/// `fs`: the reader is the file system, so includes are checked there (symlinks, file types).
fn load_from(path: &Path, read: Reader, fs: bool) -> (Policy, Diagnostics) {
    let mut policy = Policy::default();
    let mut diags = Diagnostics::default();
    let mut includes = Includes::new(path, fs);
    load_into(path, &mut policy, &mut diags, &mut includes, read);
    add_builtin_requirements(&mut policy, &mut diags);
    check_duplicates(&policy, &mut diags);
    (policy, diags)
}

/// The compiled-in recursion-prone requirements, unless the policy opts out. A requirement the
/// policy already states (same path, same mechanisms) is not added twice.
fn add_builtin_requirements(policy: &mut Policy, diags: &mut Diagnostics) {
    // A Cargo-only policy (`[[crate]]`/`[[profile]]`, no `[[unit]]`) governs no kernel tree.
    let cargo_only = policy.units.is_empty() && !(policy.crates.is_empty() && policy.profiles.is_empty());
    if !policy.builtin_requirements || policy.files.is_empty() || cargo_only {
        return;
    }
    let mut builtin = Policy::default();
    let name = Path::new(super::BUILTIN_REQUIREMENTS_NAME);
    let mut includes = Includes::new(name, false);
    parse_file(name, super::BUILTIN_REQUIREMENTS, &mut builtin, diags, &mut includes, &|_| {
        Err(std::io::Error::other("the built-in requirements include nothing"))
    });
    let key = |r: &Requirement| (r.path.text.clone(), r.exempt.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    let stated: Vec<_> = policy.requirements.iter().map(key).collect();
    policy.requirements.extend(builtin.requirements.into_iter().filter(|r| !stated.contains(&key(r))));
    policy.builtin = builtin.files.into_iter().next();
}

/// Parse policy text that is not on disk (tests, stdin).
pub fn parse_str(path: &Path, text: &str) -> (Policy, Diagnostics) {
    let mut policy = Policy::default();
    let mut diags = Diagnostics::default();
    let mut includes = Includes::new(path, true);
    parse_file(path, text, &mut policy, &mut diags, &mut includes, &|p| {
        Ok(crate::input::read(p, crate::input::POLICY_LIMIT)?)
    });
    add_builtin_requirements(&mut policy, &mut diags);
    check_duplicates(&policy, &mut diags);
    (policy, diags)
}

fn load_into(path: &Path, policy: &mut Policy, diags: &mut Diagnostics, includes: &mut Includes, read: Reader) {
    match read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => parse_file(path, &text, policy, diags, includes, read),
            Err(e) => diags.push(
                Diagnostic::error(
                    Code::Io,
                    format!("policy is not UTF-8 (invalid byte at offset {})", e.utf8_error().valid_up_to()),
                )
                .at(Location::invalid_utf8(path, e.as_bytes(), e.utf8_error()))
                .hint("save the policy as UTF-8"),
            ),
        },
        Err(e) => diags.push(
            Diagnostic::error(Code::Io, format!("cannot read policy `{}`: {e}", path.display()))
                .at(Location::file(path))
                .hint("pass an existing policy file with `--policy FILE`"),
        ),
    }
}

/// Where one file's problems are collected, with its text for spans.
struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    lines: LineIndex,
    diags: &'a mut Diagnostics,
}

impl Ctx<'_> {
    fn loc(&self, span: Option<Range<usize>>) -> Location {
        match span {
            Some(s) => Location::indexed(self.path, self.text, &self.lines, s),
            None => Location::file(self.path),
        }
    }

    fn error(
        &mut self,
        code: Code,
        span: Option<Range<usize>>,
        message: String,
        hint: impl Into<crate::diagnostic::Hint>,
    ) {
        let loc = self.loc(span);
        self.diags.push(Diagnostic::error(code, message).at(loc).hint(hint));
    }
}

fn parse_file(
    path: &Path,
    text: &str,
    policy: &mut Policy,
    diags: &mut Diagnostics,
    includes: &mut Includes,
    read: Reader,
) {
    policy.files.push((path.to_path_buf(), text.to_string()));
    // Policy-wide keys belong to the file that is the policy itself, never to an include.
    let main = policy.files.len() == 1;
    let doc = match Document::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            let loc = Location::from_span(path, text, e.span().unwrap_or(0..0));
            diags.push(
                Diagnostic::error(Code::TomlSyntax, format!("invalid TOML: {}", e.message().trim()))
                    .at(loc)
                    .hint("fix the TOML syntax at the marked position"),
            );
            return;
        }
    };
    let mut cx = Ctx { path, text, lines: LineIndex::new(text), diags };
    let root = doc.as_table();
    unknown_keys(&mut cx, root, TOP_KEYS, "top level");
    for (table, span) in tables(&mut cx, root, "unit") {
        if let Some(unit) = parse_unit(&mut cx, table, span) {
            policy.units.push(unit);
        }
    }
    for (table, span) in tables(&mut cx, root, "require") {
        if let Some(req) = parse_requirement(&mut cx, table, span) {
            policy.requirements.push(req);
        }
    }
    cargo::parse(&mut cx, root, policy);
    layout::parse(&mut cx, root, policy, main);
    for (name, span) in string_list(&mut cx, root, "include") {
        match includes.resolve(path, &name) {
            Resolved::Load { path: target, key } => {
                includes.enter(key);
                load_into(&target, policy, cx.diags, includes, read);
                includes.leave();
            }
            Resolved::Parsed => {}
            Resolved::Refused { code, message, hint } => cx.error(code, Some(span), message, hint),
        }
    }
}

/// The entries of an array of tables (`[[unit]]`) or an array of inline tables.
fn tables<'d>(cx: &mut Ctx, root: &'d dyn TableLike, key: &str) -> Vec<(&'d dyn TableLike, Option<Range<usize>>)> {
    let Some((k, item)) = root.get_key_value(key) else { return Vec::new() };
    if let Some(aot) = item.as_array_of_tables() {
        return aot.iter().map(|t| (t as &dyn TableLike, t.span().or_else(|| k.span()))).collect();
    }
    if let Some(array) = item.as_array() {
        let mut out = Vec::new();
        for v in array.iter() {
            match v.as_inline_table() {
                Some(t) => out.push((t as &dyn TableLike, v.span())),
                None => cx.error(
                    Code::WrongType,
                    v.span(),
                    format!("`{key}` entries must be tables"),
                    format!("write each entry as `[[{key}]]`"),
                ),
            }
        }
        return out;
    }
    cx.error(
        Code::WrongType,
        item.span().or_else(|| k.span()),
        format!("`{key}` must be an array of tables"),
        format!("write each entry as `[[{key}]]`"),
    );
    Vec::new()
}

fn unknown_keys(cx: &mut Ctx, table: &dyn TableLike, allowed: &[&str], what: &str) {
    for (key, _) in table.iter() {
        if allowed.contains(&key) {
            continue;
        }
        let span = table.key(key).and_then(Key::span);
        let hint = match closest(key, allowed) {
            Some(c) => format!("did you mean `{c}`? expected one of {}", quoted(allowed)),
            None => format!("expected one of {}", quoted(allowed)),
        };
        cx.error(Code::UnknownKey, span, format!("unknown key `{key}` in {what}"), hint);
    }
}

pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(&word.to_lowercase(), c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

fn quoted(items: &[&str]) -> String {
    items.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
}

fn key_span(table: &dyn TableLike, key: &str) -> Option<Range<usize>> {
    table.key(key).and_then(Key::span)
}

fn string(cx: &mut Ctx, table: &dyn TableLike, key: &str) -> Option<(String, Option<Range<usize>>)> {
    let item = table.get(key)?;
    match item.as_str() {
        Some(s) => Some((s.to_string(), item.span())),
        None => {
            cx.error(
                Code::WrongType,
                item.span(),
                format!("`{key}` must be a string"),
                format!("write `{key} = \"…\"`"),
            );
            None
        }
    }
}

/// A list of strings; a single string is accepted where `allow_single` says so.
fn strings_of(cx: &mut Ctx, key: &str, item: &Item, allow_single: bool) -> Vec<(String, Range<usize>)> {
    let span = item.span().unwrap_or(0..0);
    if let (true, Some(s)) = (allow_single, item.as_str()) {
        return vec![(s.to_string(), span)];
    }
    let Some(array) = item.as_array() else {
        cx.error(
            Code::WrongType,
            Some(span),
            format!("`{key}` must be a list of strings"),
            format!("write `{key} = [\"…\"]`"),
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for v in array.iter() {
        match v.as_str() {
            Some(s) => out.push((s.to_string(), v.span().unwrap_or(span.clone()))),
            None => cx.error(
                Code::WrongType,
                v.span(),
                format!("`{key}` entries must be strings"),
                format!("quote each entry of `{key}`"),
            ),
        }
    }
    out
}

fn string_list(cx: &mut Ctx, table: &dyn TableLike, key: &str) -> Vec<(String, Range<usize>)> {
    table.get(key).map(|item| strings_of(cx, key, item, false)).unwrap_or_default()
}

/// `path`, `why` and `links`, shared by units and requirements.
struct Common {
    path: UnitPath,
    path_span: Option<Range<usize>>,
    why: String,
    why_span: Option<Range<usize>>,
    links: Vec<String>,
}

/// Reasons and links become comment lines of the generated block: refuse what a comment line
/// cannot hold (see [`crate::makefile::comment_problem`]).
fn comment_text(cx: &mut Ctx, key: &str, text: &str, span: Option<Range<usize>>) -> bool {
    let problem = if key == "links" && text.contains('\n') {
        Some("a line break".to_string())
    } else {
        crate::makefile::comment_problem(text)
    };
    let Some(problem) = problem else { return true };
    cx.error(
        Code::BadReason,
        span,
        format!("`{key}` holds {problem}"),
        if key == "links" {
            "write each link as one line of text"
        } else {
            "a reason becomes `#` comment lines of the Makefile: remove control characters, and reword a line that reads as a block marker"
        },
    );
    false
}

/// `why` as written, with its span: mandatory and non-empty where `required`. `noun` names
/// what the entry is in the hint ("exemption", "entry").
fn reason(
    cx: &mut Ctx,
    table: &dyn TableLike,
    span: Option<Range<usize>>,
    what: &str,
    required: bool,
    noun: &str,
) -> Option<(String, Option<Range<usize>>)> {
    match string(cx, table, "why") {
        Some((w, s)) if w.trim().is_empty() => {
            cx.error(
                Code::EmptyReason,
                s,
                "empty reason".into(),
                format!("say why this {noun} exists: what recursion, breakage or cost it avoids"),
            );
            None
        }
        Some(found) => Some(found),
        None if required && table.get("why").is_none() => {
            cx.error(
                Code::MissingKey,
                span,
                format!("{what} has no `why`"),
                "every entry needs a reason: add `why = \"…\"`",
            );
            None
        }
        None => None,
    }
}

fn parse_common(cx: &mut Ctx, table: &dyn TableLike, span: Option<Range<usize>>, what: &str) -> Option<Common> {
    let path = string(cx, table, "path");
    let kbuild_dir = string(cx, table, "kbuild-dir");
    // Checked as written: trimming first would let a trailing control character through.
    let why = reason(cx, table, span.clone(), what, true, "exemption")
        .filter(|(w, s)| comment_text(cx, "why", w, s.clone()))
        .map(|(w, s)| (w.trim().replace("\r\n", "\n"), s));
    let links: Vec<String> = string_list(cx, table, "links")
        .into_iter()
        .filter(|(l, s)| comment_text(cx, "links", l, Some(s.clone())))
        .map(|(l, _)| l)
        .collect();
    let Some((path_text, path_span)) = path else {
        if table.get("path").is_none() {
            cx.error(
                Code::MissingKey,
                span,
                format!("{what} has no `path`"),
                "add `path = \"dir/object.o\"` or `path = \"dir/\"`",
            );
        }
        return None;
    };
    let path = match UnitPath::parse(&path_text, kbuild_dir.as_ref().map(|(d, _)| d.as_str())) {
        Ok(p) => p,
        Err((message, hint)) => {
            // A problem of `kbuild-dir` itself points at `kbuild-dir`, not at `path`.
            let of_kbuild_dir = kbuild_dir.as_ref().filter(|(d, _)| {
                message.contains("`kbuild-dir`")
                    || UnitPath::parse(&format!("{}/x.o", d.trim_end_matches('/')), None).is_err()
            });
            let span = of_kbuild_dir.map_or(path_span, |(_, s)| s.clone());
            cx.error(Code::BadPath, span, message, hint);
            return None;
        }
    };
    let (why, why_span) = why?;
    Some(Common { path, path_span, why, why_span, links })
}

fn mechanisms(cx: &mut Ctx, table: &dyn TableLike, key: &str) -> Vec<(MechId, Location)> {
    let mut out = Vec::new();
    for (name, span) in string_list(cx, table, key) {
        match MechId::by_name(&name) {
            Some(id) => out.push((id, cx.loc(Some(span)))),
            None => {
                let names = mechanism::names();
                let hint = match closest(&name, &names) {
                    Some(c) => format!("did you mean `{c}`? known mechanisms: {}", names.join(", ")),
                    None => format!("known mechanisms: {}", names.join(", ")),
                };
                cx.error(Code::UnknownMechanism, Some(span), format!("unknown mechanism `{name}`"), hint);
            }
        }
    }
    out
}

fn parse_unit(cx: &mut Ctx, table: &dyn TableLike, span: Option<Range<usize>>) -> Option<Unit> {
    unknown_keys(cx, table, UNIT_KEYS, "`[[unit]]`");
    let common = parse_common(cx, table, span.clone(), "`[[unit]]`");
    let skip = mechanisms(cx, table, "skip");
    let force = mechanisms(cx, table, "force");
    let when = parse_when(cx, table);
    let vars = parse_vars(cx, table);
    let category = parse_category(cx, table);
    let common = common?;
    let (settings, setting_locations) = merge_settings(cx, &common.path.text, skip, force);
    let flags = layout::parse_flags(cx, table, &settings);
    // A non-empty (or mistyped) `skip`/`force` whose entries were all rejected has been reported
    // already; "neither skips nor forces" would only repeat it less precisely.
    let attempted =
        ["skip", "force"].iter().filter_map(|k| table.get(k)).any(|i| i.as_array().is_none_or(|a| !a.is_empty()));
    if settings.is_empty() && !attempted {
        cx.error(
            Code::MissingKey,
            common.path_span.clone(),
            format!("`{}` neither skips nor forces anything", common.path.text),
            "add `skip = [\"…\"]` or `force = [\"…\"]`, or remove the unit",
        );
    }
    check_unsupported(cx, &common.path, &settings, &setting_locations);
    check_vars(cx, &common, &vars, table);
    Some(Unit {
        path: common.path,
        settings,
        why_location: cx.loc(common.why_span.clone()),
        why: common.why,
        links: common.links,
        conditions: when.iter().map(|(w, _)| condition_key(w)).collect(),
        when: when.iter().map(|(w, _)| w.clone()).collect(),
        when_locations: when.into_iter().map(|(_, l)| l).collect(),
        vars,
        location: cx.loc(common.path_span),
        setting_locations,
        flags,
        category,
    })
}

/// A `when` in canonical form (see [`crate::makefile::Condition::key`]).
pub fn condition_key(when: &str) -> crate::makefile::CondKey {
    crate::makefile::condition_key(when)
}

/// `category = "…"`: the report's category for the unit's reason, one short line of words.
fn parse_category(cx: &mut Ctx, table: &dyn TableLike) -> Option<String> {
    let (text, span) = string(cx, table, "category")?;
    let name = text.trim();
    let printable = name.chars().all(|c| !c.is_control() && c != '|' && c != '`');
    if name.is_empty() || !printable || name.chars().count() > 40 {
        cx.error(
            Code::BadCategory,
            span,
            "a category is a short name on one line".into(),
            "write up to 40 characters without control characters, `|` or backticks, e.g. `category = \"early boot / no shadow\"`",
        );
        return None;
    }
    Some(name.to_string())
}

/// `skip` and `force` as one map; a mechanism in both (or twice) is reported where it repeats.
fn merge_settings<Id: Ord + Copy + std::fmt::Display>(
    cx: &mut Ctx,
    subject: &str,
    skip: Vec<(Id, Location)>,
    force: Vec<(Id, Location)>,
) -> (BTreeMap<Id, Setting>, BTreeMap<Id, Location>) {
    let mut settings = BTreeMap::new();
    let mut locations = BTreeMap::new();
    for (setting, list) in [(Setting::Skip, skip), (Setting::Force, force)] {
        for (id, loc) in list {
            if let Some(previous) = settings.insert(id, setting) {
                let message = if previous == setting {
                    format!("`{id}` is listed twice")
                } else {
                    format!("`{subject}` both skips and forces `{id}`")
                };
                cx.diags.push(
                    Diagnostic::error(Code::SkipAndForce, message)
                        .at(loc)
                        .hint(format!("keep `{id}` in only one of `skip` and `force`")),
                );
                continue;
            }
            locations.insert(id, loc);
        }
    }
    (settings, locations)
}

/// Mechanism forms that Kbuild cannot express (a directory-wide ftrace re-enable).
fn check_unsupported(
    cx: &mut Ctx,
    path: &UnitPath,
    settings: &BTreeMap<MechId, Setting>,
    locs: &BTreeMap<MechId, Location>,
) {
    for (id, setting) in settings {
        if !id.get().expressible(*setting, path.object.is_some()) {
            let loc = locs[id].clone();
            cx.diags.push(
                Diagnostic::error(Code::Unsupported, format!("`{id}` cannot be forced for a whole directory"))
                    .at(loc)
                    .hint("Kbuild has no directory-wide way to re-add these flags: force it per object instead"),
            );
        }
    }
}

fn check_vars(cx: &mut Ctx, common: &Common, vars: &BTreeMap<String, Vec<String>>, table: &dyn TableLike) {
    let used = common.path.variables();
    for name in &used {
        if !vars.contains_key(name) {
            cx.error(
                Code::UnknownVariable,
                common.path_span.clone(),
                format!("`$({name})` in `{}` has no values to try", common.path.text),
                format!("declare them, e.g. `vars = {{ {name} = [\"32\", \"64\"] }}`, so the source check can expand the name"),
            );
        }
    }
    for name in vars.keys().filter(|n| !used.contains(n)) {
        let span = table.get("vars").and_then(Item::as_table_like).and_then(|t| key_span(t, name));
        cx.error(
            Code::UnknownVariable,
            span,
            format!("`{name}` is declared in `vars` but not used in `path`"),
            "remove it from `vars`",
        );
    }
}

/// The unit's conditions, each as make will read it, with where it is written.
fn parse_when(cx: &mut Ctx, table: &dyn TableLike) -> Vec<(String, Location)> {
    let Some(item) = table.get("when") else { return Vec::new() };
    let mut out = Vec::new();
    for (cond, span) in strings_of(cx, "when", item, true) {
        match super::when::validate(&cond) {
            Ok(w) => out.push((w.text, cx.loc(Some(span)))),
            Err(p) => {
                let at = value_span(cx.text, &span, &cond, p.span.clone());
                cx.error(Code::BadCondition, Some(at), format!("invalid condition `{cond}`: {}", p.message), p.hint)
            }
        }
    }
    out
}

/// The bytes of the policy file holding bytes `inner` of the string value `value`, written at
/// `span` (quotes included). Exact when the string is written without escapes; otherwise the
/// whole string, since an escape makes value and source offsets differ.
fn value_span(text: &str, span: &Range<usize>, value: &str, inner: Range<usize>) -> Range<usize> {
    let Some(raw) = text.get(span.clone()) else { return span.clone() };
    let quote = if raw.starts_with("\"\"\"") || raw.starts_with("'''") { 3 } else { 1 };
    let body = raw.get(quote..raw.len().saturating_sub(quote));
    if raw.len() >= 2 * quote && body == Some(value) && inner.end <= value.len() {
        span.start + quote + inner.start..span.start + quote + inner.end
    } else {
        span.clone()
    }
}

fn parse_vars(cx: &mut Ctx, table: &dyn TableLike) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let Some(item) = table.get("vars") else { return out };
    let Some(vars) = item.as_table_like() else {
        cx.error(
            Code::WrongType,
            item.span(),
            "`vars` must be a table".into(),
            "write `vars = { BITS = [\"32\", \"64\"] }`",
        );
        return out;
    };
    for (name, value) in vars.iter() {
        let values: Vec<String> = strings_of(cx, name, value, false).into_iter().map(|(v, _)| v).collect();
        let bad =
            values.iter().find(|v| v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)));
        if let Some(bad) = bad {
            cx.error(
                Code::BadPath,
                value.span(),
                format!("value {bad:?} of `{name}` is not a plain name part"),
                "use letters, digits, `_`, `-` or `.`",
            );
            continue;
        }
        out.insert(name.to_string(), values);
    }
    out
}

fn parse_requirement(cx: &mut Ctx, table: &dyn TableLike, span: Option<Range<usize>>) -> Option<Requirement> {
    unknown_keys(cx, table, REQUIRE_KEYS, "`[[require]]`");
    let common = parse_common(cx, table, span, "`[[require]]`");
    let exempt = mechanisms(cx, table, "exempt");
    let except = string_list(cx, table, "except");
    let common = common?;
    if common.path.object.is_some() && !except.is_empty() {
        cx.error(
            Code::UnknownKey,
            Some(except[0].1.clone()),
            "`except` only applies to directory requirements".into(),
            "remove `except`",
        );
    }
    let except = except.into_iter().map(|(o, _)| o).collect();
    if exempt.is_empty() {
        cx.error(
            Code::MissingKey,
            common.path_span.clone(),
            format!("requirement for `{}` lists no mechanism", common.path.text),
            "add `exempt = [\"…\"]`",
        );
    }
    Some(Requirement {
        path: common.path,
        exempt,
        except,
        why: common.why,
        links: common.links,
        location: cx.loc(common.path_span),
    })
}

/// Two units that set one mechanism for the same path under the same conditions (however each
/// condition is spelled) are ambiguous. Units of one path that set different mechanisms are
/// not: each can give its own reason.
fn check_duplicates(policy: &Policy, diags: &mut Diagnostics) {
    type Key<'a> = (&'a str, &'a [crate::makefile::CondKey], MechId);
    let mut seen: HashMap<Key, &Location> = HashMap::new();
    for unit in &policy.units {
        let mut reported = false;
        for id in unit.settings.keys() {
            let key = (unit.path.text.as_str(), unit.conditions.as_slice(), *id);
            match seen.get(&key) {
                Some(first) if !reported => {
                    reported = true;
                    diags.push(
                        Diagnostic::error(
                            Code::DuplicateUnit,
                            format!("`{}` is listed twice for `{id}`", unit.path.text),
                        )
                        .at(unit.location.clone())
                        .hint(format!("merge it with the entry at {first}, or drop `{id}` from one of them")),
                    );
                }
                Some(_) => {}
                None => {
                    seen.insert(key, &unit.location);
                }
            }
        }
    }
}
