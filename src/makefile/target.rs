//! Target-specific values of `is-kernel-object` (6.12's `rust/Makefile:450`,
//! `$(obj)/build_error.o: private is-kernel-object := y`). Kbuild's decision expressions read
//! `$(is-kernel-object)` when they compile the target, and a target-specific value beats the
//! global one `scripts/Makefile.lib` defines, so such a line decides whether the object counts as
//! a kernel object whatever `obj-y`/`obj-m` say. The reader models the plain forms and reports
//! the rest as opaque (`constructs`), so that `explain` and `check` never ignore them.
//!
//! | line | reader |
//! |---|---|
//! | `$(obj)/NAME.o …: [private\|override\|export] is-kernel-object := VALUE` (`=`, `::=`, `:::=` too), VALUE literal or `$(CONFIG_X)` references | modelled (`Event::Target`): the object's kernel-object value, where the enclosing conditions hold |
//! | other targets without variables (`$(obj)/x.rlib`) | no object of the directory: no effect |
//! | `NAME.o:` (Kbuild's target is `$(obj)/NAME.o`, so this names it only where `obj` is `.`), `%.o:`, targets with other variables | opaque |
//! | `+=`, `?=`, `!=`, a value with other references | opaque |

use super::Op;

/// The variable Kbuild's decision expressions read to tell kernel objects from others.
pub const KERNEL_OBJECT: &str = "is-kernel-object";

/// A modelled target-specific `is-kernel-object` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetKernelObject {
    /// 1-based line.
    pub line: usize,
    /// The objects it names, relative to the directory (`$(obj)/build_error.o` gives `build_error.o`).
    pub objects: Vec<String>,
    pub op: Op,
    /// The value as written (`y`; empty; `$(CONFIG_X)`).
    pub value: String,
}

/// What a target-specific assignment of `is-kernel-object` is to the reader: modelled
/// (`Ok(Some)`), naming no object of the directory (`Ok(None)`), or opaque (`Err(construct)`).
pub fn read(
    line: usize,
    targets: &str,
    op: Op,
    modifiers: &[String],
    value: &str,
) -> Result<Option<TargetKernelObject>, String> {
    let opaque = |why: &str| Err(format!("a target-specific `{KERNEL_OBJECT}` sanpolicy does not evaluate ({why})"));
    let mut objects = Vec::new();
    for target in targets.split_whitespace() {
        let local = target.strip_prefix("$(obj)/").or_else(|| target.strip_prefix("${obj}/"));
        match local {
            Some(name) if name.contains(['$', '%']) => return opaque(&format!("target `{target}`")),
            Some(name) if name.ends_with(".o") => objects.push(name.to_string()),
            Some(_) => {}
            None if target.contains(['$', '%']) => return opaque(&format!("target `{target}`")),
            None if target.ends_with(".o") => {
                return opaque(&format!(
                    "target `{target}`: Kbuild builds `$(obj)/{target}`, which it names only where `obj` is `.`"
                ))
            }
            None => {}
        }
    }
    if objects.is_empty() {
        return Ok(None);
    }
    if !matches!(op, Op::Simple | Op::Immediate | Op::Recursive) {
        return opaque(&format!("`{}`", op.as_str()));
    }
    if let Some(m) = modifiers.iter().find(|m| !["private", "override", "export", "unexport"].contains(&m.as_str())) {
        return opaque(&format!("`{m}`"));
    }
    if !only_config_references(value) {
        return opaque(&format!("value `{value}`"));
    }
    Ok(Some(TargetKernelObject { line, objects, op, value: value.to_string() }))
}

/// Every `$` in `text` starts a plain `$(CONFIG_X)`/`${CONFIG_X}` reference (constant in a run,
/// so the evaluator gives the value Kbuild sees).
fn only_config_references(text: &str) -> bool {
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        let after = &rest[i + 1..];
        let close = match after.chars().next() {
            Some('(') => ')',
            Some('{') => '}',
            _ => return false,
        };
        let Some(end) = after.find(close) else { return false };
        let name = &after[1..end];
        let plain = name
            .strip_prefix("CONFIG_")
            .is_some_and(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if !plain {
            return false;
        }
        rest = &after[end + 1..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(targets: &str, op: Op, value: &str) -> Result<Option<Vec<String>>, String> {
        read(1, targets, op, &["private".to_string()], value).map(|t| t.map(|t| t.objects))
    }

    #[test]
    fn plain_forms_are_modelled_the_rest_is_opaque() {
        assert_eq!(r("$(obj)/build_error.o", Op::Simple, "y"), Ok(Some(vec!["build_error.o".into()])));
        assert_eq!(
            r("$(obj)/a.o ${obj}/b.o $(obj)/x.rlib", Op::Recursive, ""),
            Ok(Some(vec!["a.o".into(), "b.o".into()]))
        );
        assert_eq!(r("$(obj)/a.o", Op::Simple, "$(CONFIG_X)"), Ok(Some(vec!["a.o".into()])));
        assert_eq!(r("$(obj)/x.rlib", Op::Simple, "y"), Ok(None));
        for (targets, op, value) in [
            ("$(obj)/%.o", Op::Simple, "y"),
            ("%.o", Op::Simple, "y"),
            ("a.o", Op::Simple, "y"),
            ("$(obj)/$(x).o", Op::Simple, "y"),
            ("$(obj)/a.o", Op::Append, "y"),
            ("$(obj)/a.o", Op::Conditional, "y"),
            ("$(obj)/a.o", Op::Simple, "$(part-of-module)"),
            ("$(obj)/a.o", Op::Simple, "$(if $(CONFIG_X),y)"),
        ] {
            assert!(r(targets, op, value).is_err(), "{targets}: {value}");
        }
    }
}
