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

/// The manifest's new text, or why it cannot be written. The promise is byte for byte outside
/// the owned tables, so a UTF-8 byte order mark and CRLF line endings are kept: the text is
/// edited with LF endings, then every line that was in the original gets its own ending back
/// and every line written gets the file's usual one.
pub fn update(path: &Path, text: &str, edit: &Edit) -> Result<String, Diagnostics> {
    let (bom, body) = match text.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", text),
    };
    if bom.is_empty() && !body.contains('\r') {
        return update_lf(path, body, edit);
    }
    let lf = body.replace("\r\n", "\n");
    // Positions in diagnostics refer to the LF text; the manifest's lines are the same lines.
    let new = update_lf(path, &lf, edit)?;
    Ok(format!("{bom}{}", restore_endings(body, &new)))
}

/// `new` (LF endings) with the line endings of `original` on the lines it kept, and the
/// original's majority ending on lines that are new.
fn restore_endings(original: &str, new: &str) -> String {
    let old_lines: Vec<&str> = original.split_inclusive('\n').collect();
    let crlf = old_lines.iter().filter(|l| l.ends_with("\r\n")).count();
    let usual = if crlf * 2 > old_lines.iter().filter(|l| l.ends_with('\n')).count() { "\r\n" } else { "\n" };
    let lf = original.replace("\r\n", "\n");
    let mut out = String::with_capacity(new.len() + new.len() / 16);
    let diff = similar::TextDiff::from_lines(lf.as_str(), new);
    for op in diff.ops() {
        for change in diff.iter_changes(op) {
            let line = change.value();
            let (content, ended) = match line.strip_suffix('\n') {
                Some(c) => (c, true),
                None => (line, false),
            };
            let ending = match (change.tag(), change.old_index()) {
                (similar::ChangeTag::Equal, Some(i)) => match old_lines[i] {
                    l if l.ends_with("\r\n") => "\r\n",
                    l if l.ends_with('\n') => "\n",
                    // The original's last line had no newline; now something follows it.
                    _ => usual,
                },
                (similar::ChangeTag::Delete, _) => continue,
                _ => usual,
            };
            out.push_str(content);
            if ended {
                out.push_str(ending);
            }
        }
    }
    out
}

/// [`update`] for a text with LF line endings and no byte order mark.
fn update_lf(path: &Path, text: &str, edit: &Edit) -> Result<String, Diagnostics> {
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
    // Comments after the last table are the user's, about that table: the first appended
    // profile starts after them, so they stay above the generated tables.
    let mut trailing = Some(doc.trailing().as_str().unwrap_or("").to_string());
    let mut appended = false;
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
            None => {
                let before = trailing.take().unwrap_or_default();
                appended = true;
                let separator = if text.trim().is_empty() { "" } else { "\n" };
                (end + i as isize, format!("{before}{separator}"))
            }
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
    let mut removed: Vec<Table> = Vec::new();
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
            if let Some(Item::Table(t)) = profiles.remove(&name) {
                removed.push(t);
            }
        }
    }
    if appended {
        doc.set_trailing("");
    }
    for t in &removed {
        keep_user_prefix(&mut doc, t);
    }
    if edit.profiles.iter().any(ProfileTables::uses_rustflags) {
        add_feature(&mut doc, path, &mut diags);
    }
    if diags.has_errors() {
        return Err(diags);
    }
    Ok(doc.to_string())
}

/// A removed owned table's user text (comments the user wrote above its marker, or the trailing
/// comments moved there when it was appended) goes to the table that followed it, or back to
/// the end of the document; only the blank separator line sanpolicy wrote goes with the table.
fn keep_user_prefix(doc: &mut DocumentMut, removed: &Table) {
    let prefix = user_prefix(removed);
    let user = match prefix.strip_suffix('\n') {
        Some(rest) if rest.is_empty() || rest.ends_with('\n') => rest,
        _ => prefix.as_str(),
    };
    if user.is_empty() {
        return;
    }
    let after = max_position(removed);
    match next_table(doc.as_table_mut(), after) {
        Some(t) => {
            let old = t.decor().prefix().and_then(|p| p.as_str()).unwrap_or("").to_string();
            t.decor_mut().set_prefix(format!("{user}{old}"));
        }
        None => {
            let old = doc.trailing().as_str().unwrap_or("").to_string();
            doc.set_trailing(format!("{user}{old}"));
        }
    }
}

/// The first table written after `position` (a header in the text: not implicit, not dotted).
fn next_table(root: &mut Table, position: isize) -> Option<&mut Table> {
    let mut first = None;
    visit_tables(root, &mut |t| {
        let visible = header(t);
        if let Some(p) = t.position().filter(|p| visible && *p > position) {
            first = Some(first.map_or(p, |f: isize| f.min(p)));
        }
    });
    let first = first?;
    find_table(root, first)
}

/// Whether a table is written as a header in the text (not dotted keys, not an implicit
/// parent without values).
fn header(t: &Table) -> bool {
    !(t.is_dotted() || t.is_implicit() && t.get_values().is_empty())
}

fn visit_tables(table: &Table, f: &mut dyn FnMut(&Table)) {
    for (_, item) in table.iter() {
        match item {
            Item::Table(t) => {
                f(t);
                visit_tables(t, f);
            }
            Item::ArrayOfTables(a) => {
                for t in a.iter() {
                    f(t);
                    visit_tables(t, f);
                }
            }
            _ => {}
        }
    }
}

/// The visible table at `position` (positions of visible tables are distinct).
fn find_table(table: &mut Table, position: isize) -> Option<&mut Table> {
    for (_, item) in table.iter_mut() {
        let tables: Vec<&mut Table> = match item {
            Item::Table(t) => vec![t],
            Item::ArrayOfTables(a) => a.iter_mut().collect(),
            _ => continue,
        };
        for t in tables {
            let visible = header(t);
            if visible && t.position() == Some(position) {
                return Some(t);
            }
            if let Some(found) = find_table(t, position) {
                return Some(found);
            }
        }
    }
    None
}

/// `cargo-features = ["profile-rustflags"]`, keeping any features already listed.
fn add_feature(doc: &mut DocumentMut, path: &Path, diags: &mut Diagnostics) {
    let root = doc.as_table_mut();
    match root.get_mut("cargo-features") {
        None => {
            let first_key = root.iter().all(|(_, item)| !item.is_value());
            root.insert("cargo-features", Item::Value(string_array(&[RUSTFLAGS_FEATURE.to_string()])));
            if first_key {
                below_leading_comment(root);
            }
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

/// The new `cargo-features`, the manifest's first line otherwise, goes below the comment the
/// file starts with (a licence header, a note on the workspace): the user's first line, and a
/// byte order mark on it, stay where they were, and the diff only adds lines.
fn below_leading_comment(root: &mut Table) {
    let first = root
        .iter_mut()
        .filter_map(|(_, item)| match item {
            Item::Table(t) => t.position().map(|p| (p, t.decor_mut())),
            Item::ArrayOfTables(a) => a.iter_mut().next().and_then(|t| t.position().map(|p| (p, t.decor_mut()))),
            _ => None,
        })
        .min_by_key(|(p, _)| *p);
    let Some((_, decor)) = first else { return };
    let prefix = decor.prefix().and_then(|p| p.as_str()).unwrap_or("").to_string();
    if !prefix.trim_start().starts_with('#') {
        return;
    }
    // The file's header: up to the first blank line after a comment (all of it when the comment
    // runs into the table); the rest stays above the table it is about.
    let lines: Vec<&str> = prefix.split_inclusive('\n').collect();
    let seen_comment = |i: usize| lines[..i].iter().any(|l| l.trim_start().starts_with('#'));
    let cut = (0..lines.len()).find(|&i| lines[i].trim().is_empty() && seen_comment(i)).map_or(lines.len(), |i| i + 1);
    let (header, rest): (String, String) = (lines[..cut].concat(), lines[cut..].concat());
    // A blank line between the new key and the table: only lines are added.
    decor.set_prefix(format!("\n{rest}"));
    if let Some(mut key) = root.key_mut("cargo-features") {
        key.leaf_decor_mut().set_prefix(header);
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

    #[test]
    fn trailing_comments_stay_with_their_table_and_removing_every_profile_restores_the_text() {
        let text = "[workspace]\nmembers = [\"a\"]\n\n# about the workspace\n";
        let new = update_with(text, &[profile(false)]).unwrap();
        assert!(new.starts_with(text), "{new}");
        assert!(new[text.len()..].starts_with("\n# sanpolicy generated profile `asan`"), "{new}");
        assert_eq!(update_with(&new, &[profile(false)]).unwrap(), new);
        assert_eq!(update_with(&new, &[]).unwrap(), text);
        // A note written above the marker stays when the profile goes, before the next table.
        let noted = new.replace("\n# sanpolicy generated", "\n# my note\n# sanpolicy generated") + "\n[x]\ny = 1\n";
        let gone = update_with(&noted, &[]).unwrap();
        assert_eq!(gone, "[workspace]\nmembers = [\"a\"]\n\n# about the workspace\n\n# my note\n\n[x]\ny = 1\n");
    }

    #[test]
    fn crlf_and_a_byte_order_mark_are_kept() {
        let text = "\u{feff}[workspace]\r\nmembers = [\"a\"]  # x\r\n\r\n[workspace.metadata]\nlf = 1\r\nlast = 2";
        let new = update_with(text, &[profile(true)]).unwrap();
        assert!(new.starts_with("\u{feff}cargo-features = [\"profile-rustflags\"]\r\n[workspace]\r\n"), "{new:?}");
        assert!(new.contains("\r\n[workspace.metadata]\nlf = 1\r\nlast = 2\r\n"), "{new:?}");
        let lone_lf = new.match_indices('\n').filter(|(i, _)| !new[..*i].ends_with('\r')).count();
        assert_eq!(lone_lf, 1, "only the original LF line: {new:?}");
        assert_eq!(update_with(&new, &[profile(true)]).unwrap(), new);
    }
}
