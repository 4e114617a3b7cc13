//! A kernel `.config`: the values `include/config/auto.conf` gives make. A symbol set to `y`,
//! `m`, a number or a string is defined; `# CONFIG_X is not set`, `CONFIG_X=n` and absent
//! symbols are not (Kconfig reads `=n` of a bool or tristate as n, and `auto.conf` leaves n
//! symbols out; a later line for a symbol overrides an earlier one).

use std::collections::BTreeMap;

/// The symbols of one build configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DotConfig {
    /// Defined symbols and their values as make sees them (strings without their quotes).
    pub values: BTreeMap<String, String>,
}

/// A line of a `.config` that is neither an assignment nor a comment: (1-based line, message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl DotConfig {
    pub fn parse(text: &str) -> Result<DotConfig, ParseError> {
        let mut values = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let Some((name, value)) = line.split_once('=') else {
                return Err(ParseError { line: i + 1, col: 1, message: "expected `CONFIG_NAME=value`".into() });
            };
            if !name.starts_with("CONFIG_") || !name[7..].chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ParseError {
                    line: i + 1,
                    col: 1,
                    message: format!("`{name}` is not a Kconfig symbol (`CONFIG_` and letters, digits, `_`)"),
                });
            }
            // `n` is a bool or tristate set to n (an unquoted `n` is no string value): Kconfig
            // writes no line for it to `auto.conf`, so make sees the symbol undefined.
            if value == "n" {
                values.remove(name);
                continue;
            }
            // auto.conf keeps the quotes of strings; make compares them with the quotes. Kbuild's
            // conditions only compare bool/tristate/number values, so keep the text as written.
            values.insert(name.to_string(), value.to_string());
        }
        Ok(DotConfig { values })
    }

    /// The value make sees (`""` when not set).
    pub fn get(&self, symbol: &str) -> &str {
        self.values.get(symbol).map_or("", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_set_and_unset_symbols() {
        let c =
            DotConfig::parse("# comment\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\nCONFIG_S=\"x y\"\n\n").unwrap();
        assert_eq!((c.get("CONFIG_A"), c.get("CONFIG_B"), c.get("CONFIG_C")), ("y", "", "m"));
        assert_eq!(c.get("CONFIG_S"), "\"x y\"");
        let n = DotConfig::parse("CONFIG_A=y\nCONFIG_A=n\nCONFIG_B=n\n").unwrap();
        assert!(n.values.is_empty(), "{n:?}");
        let e = DotConfig::parse("CONFIG_A=y\nbogus line\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(DotConfig::parse("FOO=y\n").is_err());
    }
}
