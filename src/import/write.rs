//! Writing imported units as a policy file with toml_edit: deterministic order, reasons kept
//! verbatim as multi-line literal strings, one `[[unit]]` per object or directory.

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value};

use super::ImportedUnit;
use crate::mechanism::MechId;
use crate::policy::Setting;

/// The policy text for `units`; `header` becomes the leading comment.
pub fn policy_toml(units: &[ImportedUnit], header: &str, layout: crate::policy::Layout) -> String {
    let mut doc = DocumentMut::new();
    doc.insert("layout", Item::Value(layout.name().into()));
    let mut tables = ArrayOfTables::new();
    for unit in units {
        tables.push(unit_table(unit));
    }
    doc.insert("unit", Item::ArrayOfTables(tables));
    let mut text = String::new();
    for line in header.lines() {
        text.push_str(if line.is_empty() { "#" } else { "# " });
        text.push_str(line);
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&doc.to_string());
    text
}

fn names(unit: &ImportedUnit, setting: Setting) -> Option<Value> {
    let list: Array =
        unit.settings.iter().filter(|(_, s)| **s == setting).map(|(id, _)| MechId::get(*id).name).collect();
    (!list.is_empty()).then(|| Value::Array(list))
}

fn unit_table(unit: &ImportedUnit) -> Table {
    let mut t = Table::new();
    t.insert("path", Item::Value(unit.path().into()));
    // An object listed with a sub-path (`vdso32/note.o`) is built by this directory's kbuild file.
    if unit.object.as_deref().is_some_and(|o| o.contains('/')) {
        t.insert("kbuild-dir", Item::Value(format!("{}/", unit.dir).into()));
    }
    if let Some(v) = names(unit, Setting::Skip) {
        t.insert("skip", Item::Value(v));
    }
    if let Some(v) = names(unit, Setting::Force) {
        t.insert("force", Item::Value(v));
    }
    match unit.when.as_slice() {
        [] => {}
        [one] => {
            t.insert("when", Item::Value(one.as_str().into()));
        }
        many => {
            t.insert("when", Item::Value(Value::Array(many.iter().map(String::as_str).collect())));
        }
    }
    if !unit.flags.is_empty() {
        let mut flags = InlineTable::new();
        for (id, text) in &unit.flags {
            flags.insert(id.get().name, text.as_str().into());
        }
        t.insert("flags", Item::Value(Value::InlineTable(flags)));
    }
    if !unit.vars.is_empty() {
        let mut vars = InlineTable::new();
        for (name, values) in &unit.vars {
            vars.insert(name, Value::Array(values.iter().map(String::as_str).collect()));
        }
        t.insert("vars", Item::Value(Value::InlineTable(vars)));
    }
    t.insert("why", Item::Value(reason_value(&neutralised(&unit.why()))));
    t
}

/// A comment from the tree as a reason the policy parser accepts (it refuses what a generated
/// comment line cannot hold, see [`crate::makefile::comment_problem`]): a control character (an
/// ESC or NUL in a Makefile comment) becomes its visible picture (`␛`, `␀`; a C1 control its
/// `\u{85}` escape), and a line that would read as a block marker is quoted with `> `.
fn neutralised(why: &str) -> String {
    let mut out = String::with_capacity(why.len());
    for (i, line) in why.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line: String = line
            .chars()
            .map(|c| match c {
                '\t' => c.to_string(),
                '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32).map_or(String::new(), String::from),
                '\u{7f}' => '\u{2421}'.to_string(),
                c if c.is_control() => c.escape_unicode().to_string(),
                c => c.to_string(),
            })
            .collect();
        if crate::makefile::comment_problem(&line).is_some() {
            out.push_str("> ");
        }
        out.push_str(&line);
    }
    out
}

/// A reason as a `'''` literal when it spans lines (readable, verbatim), else a plain string.
fn reason_value(why: &str) -> Value {
    let literal_ok = why.contains('\n')
        && !why.contains("'''")
        && !why.ends_with('\'')
        && why.chars().all(|c| c == '\n' || c == '\t' || !c.is_control());
    if literal_ok {
        let parsed: Result<DocumentMut, _> = format!("why = '''\n{why}'''\n").parse();
        if let Some(v) = parsed.ok().and_then(|d| d.get("why").and_then(Item::as_value).cloned()) {
            return v;
        }
    }
    why.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn comments_with_control_characters_or_markers_become_reasons_that_parse() {
        let unit = |why: &str| ImportedUnit {
            dir: "kernel".into(),
            object: Some("kcov.o".into()),
            when: Vec::new(),
            settings: BTreeMap::from([(MechId::by_name("kasan").unwrap(), Setting::Skip)]),
            reasons: vec![why.into()],
            vars: BTreeMap::new(),
            flags: BTreeMap::new(),
        };
        for (why, expected) in [
            ("colour \x1b[31m here", "colour \u{241b}[31m here"),
            ("nul \0 and del \x7f", "nul \u{2400} and del \u{2421}"),
            ("next line \u{85} c1", "next line \\u{85} c1"),
            ("cr\ronly", "cr\u{240d}only"),
            ("ok\nEND sanpolicy generated block (checksum 0)", "ok\n> END sanpolicy generated block (checksum 0)"),
        ] {
            let text = policy_toml(&[unit(why)], "Imported.", crate::policy::Layout::InPlace);
            let (policy, diags) = crate::policy::parse_str(std::path::Path::new("p.toml"), &text);
            assert!(diags.is_empty(), "{why:?}: {diags:?}\n{text}");
            assert_eq!(policy.units[0].why, expected, "{why:?}");
        }
    }

    #[test]
    fn writes_a_policy_that_parses_back() {
        let unit = ImportedUnit {
            dir: "kernel".into(),
            object: Some("kcov.o".into()),
            when: vec!["ifdef CONFIG_X".into()],
            settings: BTreeMap::from([
                (MechId::by_name("kasan").unwrap(), Setting::Skip),
                (MechId::by_name("gcov").unwrap(), Setting::Force),
            ]),
            reasons: vec!["Don't self-instrument.\nIt's \"recursive\" \\ here.".into()],
            vars: BTreeMap::new(),
            flags: BTreeMap::new(),
        };
        let text = policy_toml(&[unit], "Imported.", crate::policy::Layout::Block);
        let (policy, diags) = crate::policy::parse_str(std::path::Path::new("p.toml"), &text);
        assert!(diags.is_empty(), "{diags:?}\n{text}");
        let u = &policy.units[0];
        assert_eq!(u.why, "Don't self-instrument.\nIt's \"recursive\" \\ here.");
        assert_eq!(u.when, ["ifdef CONFIG_X"]);
        assert!(text.contains("why = '''\nDon't"), "{text}");
    }
}
