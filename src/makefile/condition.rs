//! Make conditionals (`ifdef`, `ifndef`, `ifeq`, `ifneq`) as written in kbuild files and policies.

/// The four conditional directives of GNU make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CondKind {
    Ifdef,
    Ifndef,
    Ifeq,
    Ifneq,
}

/// A conditional line, normalised to `keyword argument` with single spacing after the keyword.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Condition {
    pub kind: CondKind,
    /// The whole directive, e.g. `ifeq ($(CONFIG_CC_IS_CLANG)$(CONFIG_KASAN),yy)`.
    pub text: String,
    /// `ifdef`/`ifndef`: the variable; `ifeq`/`ifneq`: the two operands, unexpanded.
    pub args: Vec<String>,
}

impl Condition {
    /// Parse one conditional directive; the error is a hint saying how to write it.
    pub fn parse(line: &str) -> Result<Condition, String> {
        let line = line.trim();
        if line.contains('#') || line.contains('\n') || line.contains('\r') {
            return Err("a condition is one make line without `#` or line breaks".into());
        }
        // A final `\` would continue the condition onto the next line, swallowing a directive.
        if line.ends_with('\\') || line.chars().any(|c| c.is_control() && c != '\t') {
            return Err("a condition is one make line: no control characters, and no `\\` at the end".into());
        }
        let (keyword, rest) = line
            .split_once(|c: char| c.is_whitespace() || c == '(')
            .map_or((line, ""), |(k, _)| (k, line[k.len()..].trim()));
        let kind = match keyword {
            "ifdef" => CondKind::Ifdef,
            "ifndef" => CondKind::Ifndef,
            "ifeq" => CondKind::Ifeq,
            "ifneq" => CondKind::Ifneq,
            _ => return Err("write `ifdef CONFIG_X`, `ifndef CONFIG_X`, `ifeq (A,B)` or `ifneq (A,B)`".into()),
        };
        let args = match kind {
            CondKind::Ifdef | CondKind::Ifndef => {
                if rest.is_empty() || rest.contains(char::is_whitespace) || !balanced(rest) {
                    return Err(format!("`{keyword}` takes one variable name, e.g. `{keyword} CONFIG_KASAN`"));
                }
                vec![rest.to_string()]
            }
            CondKind::Ifeq | CondKind::Ifneq => {
                split_operands(rest).ok_or_else(|| format!("write `{keyword} (A,B)` with balanced parentheses"))?
            }
        };
        let text = format!("{keyword} {rest}");
        Ok(Condition { kind, text, args })
    }

    /// The same test in one spelling: `ifdef X`, `ifeq (a,b)`; so two lines that test the same
    /// thing compare equal however they are spaced or quoted.
    pub fn canonical(&self) -> Condition {
        let keyword = match self.kind {
            CondKind::Ifdef => "ifdef",
            CondKind::Ifndef => "ifndef",
            CondKind::Ifeq => "ifeq",
            CondKind::Ifneq => "ifneq",
        };
        // `${X}` is written `$(X)`: make reads the two alike, and the policy's grammar has one.
        let args: Vec<String> = match self.kind {
            CondKind::Ifeq | CondKind::Ifneq => self.args.iter().map(|a| braces_as_parens(a)).collect(),
            CondKind::Ifdef | CondKind::Ifndef => self.args.clone(),
        };
        let text = match (self.kind, args.as_slice()) {
            (CondKind::Ifdef | CondKind::Ifndef, [v]) => format!("{keyword} {v}"),
            (CondKind::Ifeq | CondKind::Ifneq, [a, b]) if !a.contains(',') && !b.contains(',') => {
                format!("{keyword} ({a},{b})")
            }
            _ => self.text.clone(),
        };
        Condition { kind: self.kind, text, args }
    }

    /// What make tests, as a value: two conditions with equal keys are true for the same values
    /// of every Kconfig symbol, however they are spelled (`tests/condition_key.rs` proves it
    /// with GNU make). Parsed once; compare keys, never texts.
    pub fn key(&self) -> CondKey {
        match (self.kind, self.args.as_slice()) {
            (CondKind::Ifdef | CondKind::Ifndef, [name]) => {
                let defined = self.kind == CondKind::Ifdef;
                if is_kconfig_symbol(name) {
                    // Kconfig gives a symbol a plain value or none: `ifdef CONFIG_X` is true
                    // exactly when `$(CONFIG_X)` is not empty.
                    CondKey::compare(!defined, &format!("$({name})"), "")
                } else {
                    CondKey::Defined { defined, name: name.clone() }
                }
            }
            (CondKind::Ifeq | CondKind::Ifneq, [a, b]) => CondKey::compare(self.kind == CondKind::Ifeq, a, b),
            _ => CondKey::Unparsed(self.text.clone()),
        }
    }

    /// The test that holds in the `else` branch: `ifdef` and `ifndef` swap, as do `ifeq` and
    /// `ifneq`. Exact for every form make has, so an `else` branch is a condition like any other.
    pub fn negated(&self) -> Condition {
        let kind = match self.kind {
            CondKind::Ifdef => CondKind::Ifndef,
            CondKind::Ifndef => CondKind::Ifdef,
            CondKind::Ifeq => CondKind::Ifneq,
            CondKind::Ifneq => CondKind::Ifeq,
        };
        if self.args.is_empty() {
            return Condition::unparsed(&format!("not {}", self.text));
        }
        Condition { kind, text: String::new(), args: self.args.clone() }.canonical()
    }

    /// A conditional line this module cannot read; it evaluates to false.
    pub fn unparsed(text: &str) -> Condition {
        let kind = match text.split_whitespace().next() {
            Some("ifndef") => CondKind::Ifndef,
            Some("ifneq") => CondKind::Ifneq,
            Some("ifdef") => CondKind::Ifdef,
            _ => CondKind::Ifeq,
        };
        Condition { kind, text: text.to_string(), args: Vec::new() }
    }

    /// Evaluate with `expand` (make expansion of a text) and `defined` (ifdef test).
    pub fn eval(&self, expand: &dyn Fn(&str) -> String, defined: &dyn Fn(&str) -> bool) -> bool {
        if self.args.is_empty() {
            return false;
        }
        match self.kind {
            CondKind::Ifdef => defined(&expand(&self.args[0])),
            CondKind::Ifndef => !defined(&expand(&self.args[0])),
            CondKind::Ifeq => expand(&self.args[0]) == expand(&self.args[1]),
            CondKind::Ifneq => expand(&self.args[0]) != expand(&self.args[1]),
        }
    }
}

/// A condition in canonical form (see [`Condition::key`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CondKey {
    /// `ifeq`/`ifneq`, and `ifdef`/`ifndef` of a Kconfig symbol (as `ifneq ($(CONFIG_X),)`):
    /// whether the operands must be equal, and the two operands as make expands them, in order
    /// (equality is symmetric) with `${X}` written `$(X)`.
    Compare { equal: bool, operands: [String; 2] },
    /// `ifdef`/`ifndef` of a variable that is not a Kconfig symbol: make tests its
    /// unexpanded value, which no other form says.
    Defined { defined: bool, name: String },
    /// A conditional line that did not parse, by its text (equal only to itself).
    Unparsed(String),
}

/// Every `CONFIG_…` name in `text`.
pub fn config_symbols(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("CONFIG_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

impl CondKey {
    /// The Kconfig symbols the condition tests: what the memory records a state with.
    pub fn symbols(&self) -> Vec<String> {
        match self {
            CondKey::Compare { operands, .. } => operands.iter().flat_map(|o| config_symbols(o)).collect(),
            CondKey::Defined { name, .. } => config_symbols(name),
            CondKey::Unparsed(text) => config_symbols(text),
        }
    }

    fn compare(equal: bool, a: &str, b: &str) -> CondKey {
        let (a, b) = (braces_as_parens(a), braces_as_parens(b));
        let operands = if a <= b { [a, b] } else { [b, a] };
        CondKey::Compare { equal, operands }
    }
}

/// `CONFIG_` and letters, digits, `_`: a name Kconfig writes into `auto.conf`.
fn is_kconfig_symbol(name: &str) -> bool {
    name.strip_prefix("CONFIG_")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
}

/// `text` with each `${NAME}` of a plain variable name written `$(NAME)`: make reads the two
/// references alike.
fn braces_as_parens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after.find('}') {
            Some(end) if after[..end].bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') && end > 0 => {
                out.push_str(&format!("$({})", &after[..end]));
                rest = &after[end + 1..];
            }
            _ => {
                out.push_str("${");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn balanced(text: &str) -> bool {
    let mut depth = 0i32;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return false;
        }
    }
    depth == 0
}

/// `(a,b)` or `"a" "b"` / `'a' 'b'`. Like make, whitespace around the comma is dropped.
fn split_operands(rest: &str) -> Option<Vec<String>> {
    if let Some(inner) = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) {
        if !balanced(inner) {
            return None;
        }
        let mut depth = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    // As make: blanks before the comma and after it go; blanks before `)` stay.
                    return Some(vec![inner[..i].trim_end().to_string(), inner[i + 1..].trim_start().to_string()]);
                }
                _ => {}
            }
        }
        return None;
    }
    let mut parts = Vec::new();
    let mut rest = rest.trim();
    while let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let end = rest[1..].find(q)? + 1;
        parts.push(rest[1..end].to_string());
        rest = rest[end + 1..].trim_start();
    }
    (parts.len() == 2 && rest.is_empty()).then_some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_seen_in_kernels() {
        let c = Condition::parse("ifdef CONFIG_FUNCTION_TRACER").unwrap();
        assert_eq!((c.kind, c.args.as_slice()), (CondKind::Ifdef, ["CONFIG_FUNCTION_TRACER".to_string()].as_slice()));
        let c = Condition::parse(
            "ifeq ($(CONFIG_COMPILE_TEST)_$(CONFIG_CC_IS_CLANG)_$(call clang-min-version, 180000),y_y_)",
        )
        .unwrap();
        assert_eq!(c.args[1], "y_y_");
        assert_eq!(c.args[0], "$(CONFIG_COMPILE_TEST)_$(CONFIG_CC_IS_CLANG)_$(call clang-min-version, 180000)");
        assert_eq!(Condition::parse("ifeq ( $(X) , y )").unwrap().args, [" $(X)", "y "], "make keeps these blanks");
        let c = Condition::parse("ifneq \"$(X)\" 'y'").unwrap();
        assert_eq!(c.args, ["$(X)", "y"]);
    }

    #[test]
    fn rejects_what_is_not_a_condition() {
        for bad in [
            "if CONFIG_X",
            "ifdef",
            "ifdef A B",
            "ifeq (a,b",
            "ifeq (ab)",
            "ifdef X # c",
            "ifdef X\nKASAN_SANITIZE := y",
            "ifdef CONFIG_X\\",
            "ifdef CONFIG_\x01X",
        ] {
            assert!(Condition::parse(bad).is_err(), "{bad:?}");
        }
    }
}
