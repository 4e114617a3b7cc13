//! Writing the generated profiles into the root `Cargo.toml` with toml_edit. sanpolicy owns
//! `[profile.<name>]` with all its subtables when its prefix carries the marker comment, and
//! adds `"profile-rustflags"` to `cargo-features` when a profile needs `rustflags`; every other
//! byte of the manifest (comments, order, formatting) is left as it was.

use std::path::Path;

use toml_edit::{Array, Document, DocumentMut, Item, Table, TableLike, Value};

use super::plan::ProfileTables;
use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::emit::checksum;

const MARKER_TEMPLATE: &str = include_str!("../../templates/cargo-profile-marker.txt");
/// How the marker's first line starts; what identifies an owned profile.
pub const MARKER_START: &str = "# sanpolicy generated profile `";
/// The command named in markers: the same whichever front end wrote the manifest.
pub const COMMAND: &str = "sanpolicy gen-cargo";
pub const RUSTFLAGS_FEATURE: &str = "profile-rustflags";

/// What to write.
pub struct Edit<'a> {
    pub profiles: &'a [ProfileTables],
    /// The policy as named in markers (relative to the workspace root where possible).
    pub policy: &'a str,
    /// Remove owned profiles that are not in `profiles` (false when `--profile` picks one).
    pub remove_stale: bool,
    /// Take over tables without the marker and overwrite hand-edited ones.
    pub force: bool,
}

/// The canonical content of a table and its subtables, independent of formatting and comments;
/// its checksum in the marker tells a hand-edited profile from a stale one.
fn canonical(prefix: &str, item: &Item, out: &mut String) {
    if let Some(table) = item.as_table_like() {
        canonical_table(prefix, table, out);
    } else if let Some(array) = item.as_array_of_tables() {
        for (i, t) in array.iter().enumerate() {
            canonical_table(&format!("{prefix}[{i}]"), t, out);
        }
    } else if let Some(v) = item.as_value() {
        out.push_str(&format!("{prefix}={}\n", canonical_value(v)));
    }
}

fn canonical_table(prefix: &str, table: &dyn TableLike, out: &mut String) {
    for (k, v) in table.iter() {
        canonical(&format!("{prefix}.{k:?}"), v, out);
    }
}

fn canonical_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{:?}", s.value()),
        Value::Integer(i) => i.value().to_string(),
        Value::Float(f) => f.value().to_string(),
        Value::Boolean(b) => b.value().to_string(),
        Value::Datetime(d) => d.value().to_string(),
        Value::Array(a) => format!("[{}]", a.iter().map(canonical_value).collect::<Vec<_>>().join(",")),
        Value::InlineTable(t) => {
            let mut out = String::new();
            canonical_table("", t, &mut out);
            format!("{{{out}}}")
        }
    }
}

fn table_checksum(table: &Table) -> String {
    let mut out = String::new();
    canonical_table("", table, &mut out);
    checksum(&out)
}

/// The checksum written in an owned table's marker, or `None` when the table is not owned.
fn marker_checksum(table: &Table) -> Option<String> {
    let prefix = table.decor().prefix().and_then(|p| p.as_str()).unwrap_or("");
    let line = prefix.lines().find(|l| l.starts_with(MARKER_START))?;
    let after = line.split_once("(checksum ").map(|(_, rest)| rest).unwrap_or("");
    Some(after.split(')').next().unwrap_or("").to_string())
}

/// The part of a prefix written by the user: everything before the marker line.
fn user_prefix(table: &Table) -> String {
    let prefix = table.decor().prefix().and_then(|p| p.as_str()).unwrap_or("\n");
    let mut out = String::new();
    for line in prefix.split_inclusive('\n') {
        if line.starts_with(MARKER_START) {
            break;
        }
        out.push_str(line);
    }
    out
}

fn comment_block(lines: &[String]) -> String {
    lines.iter().map(|l| if l.is_empty() { "#\n".to_string() } else { format!("# {l}\n") }).collect()
}

fn string_array(items: &[String]) -> Value {
    Value::Array(items.iter().map(String::as_str).collect::<Array>())
}

/// The `[profile.<name>]` table with its subtables, every table at `position` so that the
/// profile stays where it was in the file.
fn build(p: &ProfileTables, position: isize, user_prefix: &str, policy: &str) -> Table {
    let mut t = Table::new();
    t.insert("inherits", Item::Value(p.inherits.as_str().into()));
    if let Some(flags) = &p.rustflags {
        t.insert("rustflags", Item::Value(string_array(flags)));
    }
    for (key, on) in &p.keys {
        t.insert(key, Item::Value((*on).into()));
    }
    if p.build_override() {
        let mut b = Table::new();
        b.insert("rustflags", Item::Value(Value::Array(Array::new())));
        b.decor_mut().set_prefix(format!(
            "\n{}",
            comment_block(&[
                "Build scripts and proc-macros run on the host during the build: never instrumented.".into()
            ])
        ));
        b.set_position(position);
        t.insert("build-override", Item::Table(b));
    }
    if !p.packages.is_empty() {
        let mut packages = Table::new();
        packages.set_implicit(true);
        packages.set_position(position);
        for pt in &p.packages {
            let mut x = Table::new();
            if let Some(flags) = &pt.rustflags {
                x.insert("rustflags", Item::Value(string_array(flags)));
            }
            for (key, on) in &pt.keys {
                x.insert(key, Item::Value((*on).into()));
            }
            x.decor_mut().set_prefix(format!("\n{}", comment_block(&pt.comment)));
            x.set_position(position);
            packages.insert(&pt.key, Item::Table(x));
        }
        t.insert("package", Item::Table(packages));
    }
    let marker = MARKER_TEMPLATE
        .replace("{profile}", &p.name)
        .replace("{checksum}", &table_checksum(&t))
        .replace("{policy}", policy)
        .replace("{command}", COMMAND);
    t.decor_mut().set_prefix(format!("{user_prefix}{marker}{}", comment_block(&p.comment)));
    t.set_position(position);
    t
}

fn max_position(table: &Table) -> isize {
    let mut max = table.position().unwrap_or(0);
    for (_, item) in table.iter() {
        match item {
            Item::Table(t) => max = max.max(max_position(t)),
            Item::ArrayOfTables(a) => {
                for t in a.iter() {
                    max = max.max(max_position(t));
                }
            }
            _ => {}
        }
    }
    max
}

/// Where `[profile.<name>]` is written in the original text.
fn header_location(path: &Path, text: &str, spanned: &Document<&str>, name: &str) -> Location {
    let span = spanned
        .as_table()
        .get("profile")
        .and_then(Item::as_table_like)
        .and_then(|t| t.get(name))
        .and_then(|i| i.span().or_else(|| i.as_table().and_then(Table::span)));
    match span {
        Some(s) => Location::from_span(path, text, s),
        None => Location::file(path),
    }
}

/// The manifest's new text, or why it cannot be written.
pub fn update(path: &Path, text: &str, edit: &Edit) -> Result<String, Diagnostics> {
    let mut diags = Diagnostics::default();
    let spanned = match Document::parse(text) {
        Ok(d) => d,
        Err(e) => {
            diags.push(
                Diagnostic::error(Code::Workspace, format!("invalid TOML: {}", e.message().trim()))
                    .at(Location::from_span(path, text, e.span().unwrap_or(0..0)))
                    .hint("fix the manifest's TOML syntax"),
            );
            return Err(diags);
        }
    };
    let mut doc: DocumentMut = spanned.clone().into_mut();
    let end = max_position(doc.as_table()) + 1;
    let root = doc.as_table_mut();
    if !root.contains_key("profile") {
        let mut t = Table::new();
        t.set_implicit(true);
        root.insert("profile", Item::Table(t));
    }
    let Some(profiles) = root.get_mut("profile").and_then(Item::as_table_mut) else {
        diags.push(
            Diagnostic::error(Code::Workspace, "`profile` is not a table of tables".to_string())
                .at(Location::file(path))
                .hint("write Cargo profiles as `[profile.<name>]` tables"),
        );
        return Err(diags);
    };
    for (i, p) in edit.profiles.iter().enumerate() {
        let existing = profiles.get(&p.name);
        let (position, prefix) = match existing {
            None => (end + i as isize, if text.trim().is_empty() { String::new() } else { "\n".to_string() }),
            Some(Item::Table(t)) => {
                let loc = || header_location(path, text, &spanned, &p.name);
                match marker_checksum(t) {
                    None if !edit.force => {
                        diags.push(
                            Diagnostic::error(
                                Code::UnownedTable,
                                format!("`[profile.{}]` exists and was not written by sanpolicy", p.name),
                            )
                            .at(loc())
                            .hint("name another profile in the policy, or pass `--force` to replace this one"),
                        );
                        continue;
                    }
                    Some(sum) if sum != table_checksum(t) && !edit.force => {
                        diags.push(
                            Diagnostic::error(
                                Code::HandEditedBlock,
                                format!("`[profile.{}]` was edited by hand since sanpolicy wrote it", p.name),
                            )
                            .at(loc())
                            .hint("move the change into the policy, then run with `--force` to overwrite the table"),
                        );
                        continue;
                    }
                    _ => (t.position().unwrap_or(end + i as isize), user_prefix(t)),
                }
            }
            Some(_) if !edit.force => {
                diags.push(
                    Diagnostic::error(
                        Code::UnownedTable,
                        format!("`profile.{}` is written as dotted keys or an inline table", p.name),
                    )
                    .at(header_location(path, text, &spanned, &p.name))
                    .hint("name another profile in the policy, or pass `--force` to replace it"),
                );
                continue;
            }
            Some(_) => (end + i as isize, "\n".to_string()),
        };
        profiles.insert(&p.name, Item::Table(build(p, position, &prefix, edit.policy)));
    }
    if edit.remove_stale {
        let stale: Vec<String> = profiles
            .iter()
            .filter(|(name, item)| {
                item.as_table().is_some_and(|t| marker_checksum(t).is_some())
                    && !edit.profiles.iter().any(|p| p.name == *name)
            })
            .map(|(name, _)| name.to_string())
            .collect();
        for name in stale {
            profiles.remove(&name);
        }
    }
    if edit.profiles.iter().any(ProfileTables::uses_rustflags) {
        add_feature(&mut doc, path, &mut diags);
    }
    if diags.has_errors() {
        return Err(diags);
    }
    Ok(doc.to_string())
}

/// `cargo-features = ["profile-rustflags"]`, keeping any features already listed.
fn add_feature(doc: &mut DocumentMut, path: &Path, diags: &mut Diagnostics) {
    let root = doc.as_table_mut();
    match root.get_mut("cargo-features") {
        None => {
            root.insert("cargo-features", Item::Value(string_array(&[RUSTFLAGS_FEATURE.to_string()])));
        }
        Some(item) => match item.as_array_mut() {
            Some(a) if a.iter().any(|v| v.as_str() == Some(RUSTFLAGS_FEATURE)) => {}
            Some(a) => a.push(RUSTFLAGS_FEATURE),
            None => diags.push(
                Diagnostic::error(Code::Workspace, "`cargo-features` is not a list".to_string())
                    .at(Location::file(path))
                    .hint("write `cargo-features = [\"profile-rustflags\"]`"),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cargo::plan::PackageTable;

    fn profile(rustflags: bool) -> ProfileTables {
        ProfileTables {
            name: "asan".into(),
            inherits: "dev".into(),
            rustflags: rustflags.then(|| vec!["-Zsanitizer=address".into()]),
            keys: vec![],
            target_modifiers: vec![],
            packages: vec![PackageTable {
                key: "x@1.0.0".into(),
                rustflags: rustflags.then(Vec::new),
                keys: vec![("overflow-checks", false)],
                comment: vec!["x 1.0.0: skip asan".into()],
            }],
            comment: vec![],
        }
    }

    fn update_with(text: &str, profiles: &[ProfileTables]) -> Result<String, Diagnostics> {
        let edit = Edit { profiles, policy: "p.toml", remove_stale: true, force: false };
        update(Path::new("Cargo.toml"), text, &edit)
    }

    #[test]
    fn existing_cargo_features_are_kept_and_extended_once() {
        let text = "cargo-features = [\"trim-paths\"]  # mine\n\n[workspace]\n";
        let new = update_with(text, &[profile(true)]).unwrap();
        assert!(
            new.starts_with("cargo-features = [\"trim-paths\", \"profile-rustflags\"]  # mine\n\n[workspace]\n"),
            "{new}"
        );
        assert_eq!(update_with(&new, &[profile(true)]).unwrap(), new);
        // Stable keys alone need no unstable feature.
        let stable = update_with("[workspace]\n", &[profile(false)]).unwrap();
        assert!(!stable.contains("cargo-features") && stable.contains("overflow-checks = false"), "{stable}");
    }

    #[test]
    fn reformatting_an_owned_table_is_not_a_hand_edit_but_a_new_value_is() {
        let new = update_with("[workspace]\n", &[profile(true)]).unwrap();
        assert!(new.contains("[profile.asan.package.\"x@1.0.0\"]"), "{new}");
        let reformatted =
            new.replace("rustflags = [\"-Zsanitizer=address\"]", "rustflags = [ '-Zsanitizer=address' ]  # hmm");
        assert_ne!(reformatted, new);
        assert_eq!(update_with(&reformatted, &[profile(true)]).unwrap(), new);
        let edited = new.replace("overflow-checks = false", "overflow-checks = true");
        let diags = update_with(&edited, &[profile(true)]).unwrap_err();
        assert_eq!(diags.0[0].code, Code::HandEditedBlock);
    }

    #[test]
    fn a_profile_that_is_not_a_table_is_refused() {
        let diags = update_with("[workspace]\n[profile]\nasan = { opt-level = 1 }\n", &[profile(true)]).unwrap_err();
        assert_eq!(diags.0[0].code, Code::UnownedTable);
        assert_eq!(diags.0[0].location.as_ref().map(|l| l.line), Some(3));
        let diags = update_with("profile = 1\n", &[profile(true)]).unwrap_err();
        assert_eq!(diags.0[0].code, Code::Workspace);
    }
}
