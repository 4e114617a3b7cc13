//! `check --format sarif`: the verdict as a SARIF 2.1.0 log, for code-scanning CI (GitHub's,
//! GitLab's). One rule per diagnostic code of the code table (its id is the code as printed),
//! one result per finding at its file, line and column, relative to the directory `check` ran
//! in (`%SRCROOT%`). Acknowledged findings are results with an in-source suppression carrying
//! the acknowledgement's reason; a finding's fix command is in its message and in the result's
//! properties. Judged by Microsoft's SARIF multitool (`tests/sarif.rs`).

use std::path::Path;

use serde::Serialize;

use crate::check::judge::Verdict;
use crate::diagnostic::{Diagnostic, Invocation, Severity, CODES};

const VERSION: &str = "2.1.0";
const SCHEMA_URI: &str = "https://json.schemastore.org/sarif-2.1.0.json";

#[derive(Debug, Serialize)]
pub struct Log {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: Vec<Run>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Run {
    tool: Tool,
    original_uri_base_ids: std::collections::BTreeMap<&'static str, ArtifactLocation>,
    results: Vec<Result>,
    invocations: Vec<RunInvocation>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RunInvocation {
    execution_successful: bool,
    exit_code: i32,
}

#[derive(Debug, Serialize)]
struct Tool {
    driver: Driver,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Driver {
    name: &'static str,
    version: &'static str,
    semantic_version: &'static str,
    information_uri: &'static str,
    rules: Vec<Rule>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    id: &'static str,
    /// Omitted where it would only repeat the id (`io`: SARIF1001).
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    short_description: Text,
    full_description: Text,
    default_configuration: Configuration,
    properties: RuleProperties,
}

#[derive(Debug, Serialize)]
struct RuleProperties {
    class: &'static str,
    acknowledgeable: bool,
}

#[derive(Debug, Serialize)]
struct Configuration {
    level: &'static str,
}

#[derive(Debug, Serialize)]
struct Text {
    text: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Result {
    rule_id: &'static str,
    rule_index: usize,
    level: &'static str,
    message: Text,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    locations: Vec<Location>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    suppressions: Vec<Suppression>,
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<ResultProperties>,
}

#[derive(Debug, Serialize)]
struct ResultProperties {
    /// The command that clears the finding, as `check` prints it.
    fix: String,
}

#[derive(Debug, Serialize)]
struct Suppression {
    kind: &'static str,
    justification: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Location {
    physical_location: PhysicalLocation,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct PhysicalLocation {
    artifact_location: ArtifactLocation,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<Region>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactLocation {
    uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    uri_base_id: Option<&'static str>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Region {
    #[serde(rename_all = "camelCase")]
    Span { start_line: usize, start_column: usize, char_offset: usize, char_length: usize },
    /// A finding about a whole file: all its bytes.
    #[serde(rename_all = "camelCase")]
    Whole { byte_offset: u64, byte_length: u64 },
}

/// The SARIF log of `verdict`, whose paths are relative to the current directory.
pub fn of(verdict: &Verdict, policy_path: &Path, invocation: &Invocation) -> Log {
    let _ = policy_path;
    let rules = CODES
        .iter()
        .map(|c| Rule {
            id: c.name,
            name: Some(rule_name(c.name)).filter(|n| !n.eq_ignore_ascii_case(c.name)),
            short_description: Text { text: c.doc.to_string() },
            full_description: Text { text: c.doc.to_string() },
            default_configuration: Configuration { level: default_level(c.class) },
            properties: RuleProperties { class: c.class.as_str(), acknowledgeable: c.acknowledgeable },
        })
        .collect();
    let results = verdict.diagnostics.iter().map(|d| result(d, invocation)).collect();
    let root = std::env::current_dir().ok().map(|d| file_uri(&d)).unwrap_or_else(|| "file:///".into());
    let mut bases = std::collections::BTreeMap::new();
    bases.insert("%SRCROOT%", ArtifactLocation { uri: root, uri_base_id: None });
    Log {
        schema: SCHEMA_URI,
        version: VERSION,
        runs: vec![Run {
            tool: Tool {
                driver: Driver {
                    name: "sanpolicy",
                    version: env!("CARGO_PKG_VERSION"),
                    semantic_version: env!("CARGO_PKG_VERSION"),
                    information_uri: "https://github.com/sanpolicy/sanpolicy",
                    rules,
                },
            },
            original_uri_base_ids: bases,
            results,
            invocations: vec![RunInvocation {
                execution_successful: !verdict.diagnostics.has_bad_input(),
                exit_code: i32::from(verdict.exit_code()),
            }],
        }],
    }
}

fn result(d: &Diagnostic, invocation: &Invocation) -> Result {
    // An acknowledged finding is reported under its own code, suppressed with the reason.
    let (code, message, suppressions) = match d.code {
        crate::diagnostic::Code::Acknowledged => acknowledged(d),
        code => (code, d.message.clone(), Vec::new()),
    };
    let mut text = message;
    if let Some(h) = &d.hint {
        text.push_str(&format!(" (help: {})", h.render(invocation)));
    }
    Result {
        rule_id: code.as_str(),
        rule_index: code as usize,
        level: match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        },
        message: Text { text },
        locations: d.location.iter().map(location).collect(),
        suppressions,
        properties: d.fix.as_ref().map(|f| ResultProperties { fix: invocation.render(f) }),
    }
}

/// The code, message and suppression of an acknowledged finding (`acknowledged [code]: …`).
fn acknowledged(d: &Diagnostic) -> (crate::diagnostic::Code, String, Vec<Suppression>) {
    let parsed = d.message.strip_prefix("acknowledged [").and_then(|rest| rest.split_once("]: "));
    let (code, message) = match parsed.and_then(|(name, m)| Some((crate::diagnostic::Code::by_name(name)?, m))) {
        Some((code, m)) => (code, m.to_string()),
        None => (d.code, d.message.clone()),
    };
    let why = d.label.clone().unwrap_or_default();
    (code, message, vec![Suppression { kind: "inSource", justification: why }])
}

fn location(l: &crate::diagnostic::Location) -> Location {
    let region = if l.line > 0 {
        Some(Region::Span {
            start_line: l.line,
            start_column: l.col.max(1),
            char_offset: l.span.start,
            char_length: l.span.end.saturating_sub(l.span.start),
        })
    } else {
        // Its size, not its bytes: nothing of the file is replayed into the log.
        std::fs::metadata(&l.path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| Region::Whole { byte_offset: 0, byte_length: m.len() })
    };
    let path = l.path.display().to_string();
    let path = path.strip_prefix("./").unwrap_or(&path);
    let (uri, base) = if l.path.is_absolute() { (file_uri(&l.path), None) } else { (encode(path), Some("%SRCROOT%")) };
    Location {
        physical_location: PhysicalLocation { artifact_location: ArtifactLocation { uri, uri_base_id: base }, region },
    }
}

/// `missing-source` as a rule name: `MissingSource`.
fn rule_name(code: &str) -> String {
    code.split('-').map(|w| w[..1].to_ascii_uppercase() + &w[1..]).collect()
}

fn default_level(class: crate::diagnostic::Class) -> &'static str {
    use crate::diagnostic::Class;
    match class {
        Class::Warning => "warning",
        Class::Note => "note",
        _ => "error",
    }
}

/// A directory as a `file://` URI ending in `/`, as `originalUriBaseIds` needs.
fn file_uri(dir: &Path) -> String {
    let mut uri = format!("file://{}", encode(&dir.display().to_string()));
    if !uri.ends_with('/') {
        uri.push('/');
    }
    uri
}

/// A path as the path of a URI: every byte but the unreserved ones and `/` percent-encoded.
fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_percent_encoded_and_rule_names_camel_cased() {
        assert_eq!(encode("a b/ü#.mk"), "a%20b/%C3%BC%23.mk");
        assert_eq!(rule_name("missing-source"), "MissingSource");
        assert!(file_uri(Path::new("/t/x y")).ends_with("/t/x%20y/"));
    }
}
