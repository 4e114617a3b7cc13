//! Unit paths: `kernel/locking/lockdep.o` (an object) or `mm/kasan/` (a directory).

/// A validated unit path, split into the directory whose kbuild file holds its lines and the
/// object name relative to that directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitPath {
    /// As written in the policy.
    pub text: String,
    /// Directory (no trailing slash) whose `Kbuild`/`Makefile` holds the lines.
    pub kbuild_dir: String,
    /// Object relative to `kbuild_dir` (`lockdep.o`, `vdso32/note.o`); `None` for a directory.
    pub object: Option<String>,
}

impl UnitPath {
    pub fn is_directory(&self) -> bool {
        self.object.is_none()
    }

    /// Validate `text` (and an optional explicit kbuild directory) into a path, or say what is
    /// wrong with it and how to fix it.
    pub fn parse(text: &str, kbuild_dir: Option<&str>) -> Result<UnitPath, (String, String)> {
        check_syntax(text)?;
        if let Some(dir) = text.strip_suffix('/') {
            if kbuild_dir.is_some() {
                return Err(("`kbuild-dir` is only for objects".into(), "remove `kbuild-dir`".into()));
            }
            return Ok(UnitPath { text: text.into(), kbuild_dir: dir.into(), object: None });
        }
        if !text.ends_with(".o") {
            return Err((
                format!("`{text}` is neither an object nor a directory"),
                "name objects as Kbuild does, ending in `.o` (`lib/foo.o`, even for `.S` or `.rs` sources); end directories with `/`".into(),
            ));
        }
        let (dir, object) = match kbuild_dir {
            Some(kd) => {
                let kd = kd.trim_end_matches('/');
                check_syntax(kd)?;
                let rest = text.strip_prefix(kd).and_then(|r| r.strip_prefix('/')).ok_or_else(|| {
                    (
                        format!("`{text}` is not inside `kbuild-dir` `{kd}/`"),
                        "make `path` start with `kbuild-dir`".into(),
                    )
                })?;
                (kd.to_string(), rest.to_string())
            }
            None => match text.rsplit_once('/') {
                Some((d, o)) => (d.to_string(), o.to_string()),
                None => {
                    return Err((
                        format!("`{text}` is at the top of the tree"),
                        "objects live in a directory with a kbuild file: write `dir/name.o`".into(),
                    ))
                }
            },
        };
        Ok(UnitPath { text: text.into(), kbuild_dir: dir, object: Some(object) })
    }

    /// Make variables referenced in the path (`BITS` for `head$(BITS).o`).
    pub fn variables(&self) -> Vec<String> {
        make_variables(&self.text)
    }
}

/// The names of the `$(NAME)` references in `text`, in order.
pub fn make_variables(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("$(") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        out.push(after[..end].to_string());
        rest = &after[end..];
    }
    out
}

/// Reject anything that could break out of a make assignment or point outside the tree.
fn check_syntax(text: &str) -> Result<(), (String, String)> {
    if text.is_empty() || text == "/" {
        return Err(("empty path".into(), "write a path relative to the kernel tree root".into()));
    }
    if text.starts_with('/') {
        return Err((format!("absolute path `{text}`"), "write the path relative to the kernel tree root".into()));
    }
    if text.split('/').any(|seg| seg == ".." || seg == ".") {
        return Err((
            format!("`{text}` has a `.` or `..` segment"),
            "write the normalised path inside the tree".into(),
        ));
    }
    if text.contains("//") {
        return Err((format!("`{text}` has an empty segment"), "remove the doubled `/`".into()));
    }
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("$(") {
            let end = after.find(')').ok_or_else(|| unbalanced(text))?;
            let name = &after[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err((
                    format!("`$({name})` in `{text}` is not a plain make variable"),
                    "only `$(NAME)` references are allowed in names".into(),
                ));
            }
            rest = &after[end + 1..];
            continue;
        }
        let c = rest.chars().next().unwrap_or_default();
        if !(c.is_ascii_alphanumeric() || "_-.+,/".contains(c)) {
            return Err((
                format!("character {c:?} in `{text}` is not allowed in a Kbuild name"),
                "spaces and `$ # : ; = ( )` would change the meaning of the generated make line".into(),
            ));
        }
        rest = &rest[c.len_utf8()..];
    }
    Ok(())
}

fn unbalanced(text: &str) -> (String, String) {
    (format!("unbalanced `$(` in `{text}`"), "close the variable reference with `)`".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::makefile::expand_variants;
    use std::collections::BTreeMap;

    #[test]
    fn objects_and_directories() {
        let o = UnitPath::parse("kernel/locking/lockdep.o", None).unwrap();
        assert_eq!((o.kbuild_dir.as_str(), o.object.as_deref()), ("kernel/locking", Some("lockdep.o")));
        let d = UnitPath::parse("mm/kasan/", None).unwrap();
        assert_eq!((d.kbuild_dir.as_str(), d.object), ("mm/kasan", None));
        let s = UnitPath::parse("arch/x86/entry/vdso/vdso32/note.o", Some("arch/x86/entry/vdso/")).unwrap();
        assert_eq!(s.object.as_deref(), Some("vdso32/note.o"));
    }

    #[test]
    fn rejects_what_would_inject_or_escape() {
        for bad in [
            "/abs/x.o",
            "../x.o",
            "a/../x.o",
            "a/b c.o",
            "a/x#.o",
            "a/x:.o",
            "a/x;.o",
            "a/x\n.o",
            "a/x.c",
            "x.o",
            "a/$(shell rm).o",
            "a/$(X.o",
        ] {
            assert!(UnitPath::parse(bad, None).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn variables_expand_to_every_value() {
        let vars = BTreeMap::from([("BITS".to_string(), vec!["32".to_string(), "64".to_string()])]);
        assert_eq!(expand_variants("head$(BITS).o", &vars), ["head32.o", "head64.o"]);
        let p = UnitPath::parse("arch/x86/kernel/head$(BITS).o", None).unwrap();
        assert_eq!(p.variables(), ["BITS"]);
    }
}
