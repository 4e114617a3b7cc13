//! gcc's `-fcallgraph-info` output: one VCG graph per translation unit (`x.ci` beside `x.o`).
//! Nodes are functions (defined here, or `shape : ellipse` for callees defined elsewhere and for
//! the `__indirect_call` placeholder); edges are the calls left after inlining, so a static
//! inline function from a header is part of its caller, exactly as the compiler resolved it.
//! A static function's title is `<source>:<name>`, a global one's is its name.

/// The placeholder gcc uses as the target of every call through a pointer.
pub const INDIRECT: &str = "__indirect_call";

/// A function defined in the unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defined {
    /// The node title: how edges name it.
    pub title: String,
    /// The symbol name, with gcc's clone suffix (`foo.constprop.0`), as in the object.
    pub name: String,
    pub is_static: bool,
}

/// A call: from a defined function's title to a node title, at `file:line:col`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub from: String,
    pub to: String,
    pub at: String,
}

/// One translation unit's graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unit {
    pub source: String,
    pub defined: Vec<Defined>,
    pub calls: Vec<Call>,
}

impl Unit {
    pub fn indirect_calls(&self) -> usize {
        self.calls.iter().filter(|c| c.to == INDIRECT).count()
    }
}

/// Parse a `.ci` file's text; an error gives the 1-based line.
pub fn parse(text: &str) -> Result<Unit, (usize, String)> {
    let mut unit = Unit::default();
    for (i, line) in text.lines().enumerate() {
        let err = |m: String| (i + 1, m);
        let line = line.trim();
        let Some((kind, rest)) = line.split_once(": {") else {
            if line.is_empty() || line == "}" {
                continue;
            }
            return Err(err(format!("expected `graph:`, `node:` or `edge:`, found `{}`", shorten(line))));
        };
        // A graph's `{` closes at the end of the file; a node's or edge's on its own line.
        let attrs = attributes(rest, kind != "graph").map_err(err)?;
        let get = |k: &str| attrs.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        match kind {
            "graph" => unit.source = get("title").ok_or_else(|| err("graph without `title`".into()))?,
            "node" => {
                let title = get("title").ok_or_else(|| err("node without `title`".into()))?;
                // Callees defined elsewhere and the indirect-call placeholder are ellipses.
                if get("shape").is_some() {
                    continue;
                }
                let prefix = format!("{}:", unit.source);
                let (name, is_static) = match title.strip_prefix(&prefix) {
                    Some(name) => (name.to_string(), true),
                    None => (title.clone(), false),
                };
                unit.defined.push(Defined { title, name, is_static });
            }
            "edge" => {
                let from = get("sourcename").ok_or_else(|| err("edge without `sourcename`".into()))?;
                let to = get("targetname").ok_or_else(|| err("edge without `targetname`".into()))?;
                unit.calls.push(Call { from, to, at: get("label").unwrap_or_default() });
            }
            other => return Err(err(format!("unknown element `{}`", shorten(other)))),
        }
    }
    if unit.source.is_empty() {
        return Err((1, "no `graph:` element".into()));
    }
    Ok(unit)
}

fn shorten(s: &str) -> String {
    s.chars().take(40).collect()
}

/// `key: "string"` and `key : word` pairs up to the closing `}` (or the end of the line when
/// `closed` is false).
fn attributes(text: &str, closed: bool) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        match chars.peek() {
            None if closed => return Err("unterminated element (no `}`)".into()),
            None => return Ok(out),
            Some('}') => return Ok(out),
            _ => {}
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_') {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if key.is_empty() || chars.next() != Some(':') {
            return Err(format!("expected `key:` in `{}`", shorten(text)));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated string after `{key}:`")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('n') => value.push('\n'),
                        Some(c) => value.push(c),
                        None => return Err(format!("unterminated string after `{key}:`")),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace() && *c != '}') {
                value.push(c);
            }
        }
        out.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_edges_and_placeholders() {
        let text = r#"graph: { title: "/s/t.c"
node: { title: "/s/t.c:f.constprop.0" label: "f.constprop\n/s/t.c:2:38" }
node: { title: "g" label: "g\n/s/t.c:3:6" }
node: { title: "ext" label: "ext\n/s/t.c:1:13" shape : ellipse }
edge: { sourcename: "/s/t.c:f.constprop.0" targetname: "ext" label: "/s/h.h:9:2" }
node: { title: "__indirect_call" label: "Indirect Call Placeholder" shape : ellipse }
edge: { sourcename: "g" targetname: "__indirect_call" label: "/s/t.c:4:25" }
}
"#;
        let u = parse(text).unwrap();
        assert_eq!(u.source, "/s/t.c");
        let names: Vec<(&str, bool)> = u.defined.iter().map(|d| (d.name.as_str(), d.is_static)).collect();
        assert_eq!(names, [("f.constprop.0", true), ("g", false)]);
        assert_eq!(u.calls[0], Call { from: "/s/t.c:f.constprop.0".into(), to: "ext".into(), at: "/s/h.h:9:2".into() });
        assert_eq!(u.indirect_calls(), 1);
    }

    #[test]
    fn malformed_lines_are_located() {
        assert_eq!(parse("graph: { title: \"a.c\"\nnode: { label: \"x\" }\n").unwrap_err().0, 2);
        assert_eq!(parse("graph: { title: \"a.c\"\nedge: { sourcename: \"x\n").unwrap_err().0, 2);
        assert!(parse("").is_err());
    }
}
