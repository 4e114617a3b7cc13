//! Fuzzing, on stable Rust with proptest, of the two readers of untrusted text: the policy
//! parser and the kbuild file reader (and of the policy's `when` grammar, whose accepted
//! conditions GNU make must run without a shell or a new variable, and of include graphs with
//! symlinked directories, which must terminate, parse each file once and stay inside). Neither may panic or hang, every location they report
//! must lie inside the text, and the reader's directives must survive the emitter:
//! generate(parse(x)) reparses to the same directives, and splicing a block into `x` keeps every
//! byte outside the block.
//!
//! Inputs come from grammars of policy entries and make lines, from random edits of the corpus
//! in `tests/fuzz_regressions/` (seeds, and every input that once failed: each file there is
//! also replayed as a plain test), and from arbitrary strings.
//!
//! `cargo test` runs a fixed, seeded number of cases. `SANPOLICY_FUZZ_SECONDS=N` runs each
//! target for N seconds along a fixed sequence of seeds (`.ci/run` does, so CI is
//! reproducible, and a longer local run covers everything CI tries); with
//! `SANPOLICY_FUZZ_FRESH=1` the seeds are fresh instead (`cargo xtask fuzz` explores that way).
//! `SANPOLICY_FUZZ_SEED=S` replays one seed. A failing input is shrunk, printed and saved under
//! `target/fuzz-findings/`, to be added to the corpus with the fix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use sanpolicy::diagnostic::{self, Sources};
use sanpolicy::emit::{self, checksum, SpliceError};
use sanpolicy::kbuild::Rules;
use sanpolicy::makefile::{self, classify, DirectiveValue, KbuildFile, BEGIN_MARKER, END_MARKER};
use sanpolicy::mechanism::{MechId, MECHANISMS};
use sanpolicy::policy::{self, Setting, Unit, UnitPath};

/// The built-in rules, read once.
fn builtin() -> &'static Rules {
    static RULES: std::sync::OnceLock<Rules> = std::sync::OnceLock::new();
    RULES.get_or_init(Rules::builtin)
}

/// Cases per target in a plain `cargo test`.
const CASES: u32 = 256;
/// A single input taking longer than this is a hang.
const HANG: Duration = Duration::from_secs(20);

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions").join(target)
}

/// The corpus of one target, as text (invalid UTF-8 read lossily, as the readers never see it).
fn corpus(target: &str) -> Vec<(String, String)> {
    let mut files: Vec<_> =
        std::fs::read_dir(corpus_dir(target)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Generators.

/// Fragments that have broken parsers before, or that would break make lines.
const NASTY: &[&str] = &[
    "\\",
    "\\\\",
    "\n",
    "\r",
    "\r\n",
    "\t",
    "\u{0}",
    "\u{b}",
    "\u{c}",
    "\u{85}",
    "\u{2028}",
    "é",
    "😀",
    "$",
    "$(",
    "$(shell id)",
    "$(BITS)",
    ")",
    "#",
    ":",
    ";",
    "=",
    ":=",
    "+=",
    " ",
    "/",
    "..",
    ".o",
    "\"",
    "'",
    "'''",
    "\"\"\"",
    "[",
    "]",
    "{",
    "}",
    "[[unit]]",
    "ifdef X",
    "endif",
    "else",
    "KASAN_SANITIZE := y",
    "BEGIN sanpolicy generated block",
    "END sanpolicy generated block (checksum 0)",
    "TODO(sanpolicy import): the tree gives no reason",
];

fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(NASTY).prop_map(str::to_string),
        2 => "[a-zA-Z0-9_./ -]{0,12}",
        1 => any::<String>().prop_map(|s| s.chars().take(12).collect()),
    ]
}

/// Text made of nasty fragments and plain words.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(nasty(), 0..5).prop_map(|parts| parts.concat())
}

/// A random edit of a corpus text.
#[derive(Debug, Clone)]
enum Edit {
    Insert(prop::sample::Index, String),
    Delete(prop::sample::Index, usize),
    DuplicateLine(prop::sample::Index),
    SwapLines(prop::sample::Index, prop::sample::Index),
    Byte(prop::sample::Index, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<prop::sample::Index>(), text()).prop_map(|(i, t)| Edit::Insert(i, t)),
        2 => (any::<prop::sample::Index>(), 1usize..20).prop_map(|(i, n)| Edit::Delete(i, n)),
        1 => any::<prop::sample::Index>().prop_map(Edit::DuplicateLine),
        1 => (any::<prop::sample::Index>(), any::<prop::sample::Index>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Byte(i, b)),
    ]
}

fn apply_edits(seed: &str, edits: &[Edit]) -> String {
    let mut bytes = seed.as_bytes().to_vec();
    for e in edits {
        let at = |i: &prop::sample::Index, len: usize| if len == 0 { 0 } else { i.index(len + 1) };
        match e {
            Edit::Insert(i, t) => {
                let p = at(i, bytes.len());
                bytes.splice(p..p, t.bytes());
            }
            Edit::Delete(i, n) => {
                let p = at(i, bytes.len());
                let end = (p + n).min(bytes.len());
                bytes.drain(p..end);
            }
            Edit::Byte(i, b) if !bytes.is_empty() => {
                let p = i.index(bytes.len());
                bytes[p] = *b;
            }
            Edit::Byte(..) => {}
            Edit::DuplicateLine(i) | Edit::SwapLines(i, _) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                if lines.is_empty() {
                    continue;
                }
                let a = i.index(lines.len());
                match e {
                    Edit::SwapLines(_, j) => {
                        let b = j.index(lines.len());
                        lines.swap(a, b);
                    }
                    _ => lines.insert(a, lines[a]),
                }
                bytes = lines.concat().into_bytes();
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A corpus file of `target`, randomly edited.
fn mutated(target: &str) -> impl Strategy<Value = String> {
    let seeds: Vec<String> = corpus(target).into_iter().map(|(_, t)| t).collect();
    (proptest::sample::select(seeds), prop::collection::vec(edit(), 1..6)).prop_map(|(s, e)| apply_edits(&s, &e))
}

/// A TOML basic string holding `s` exactly.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn mechanism_name() -> impl Strategy<Value = String> {
    let names: Vec<&'static str> = MECHANISMS.iter().map(|m| m.name).collect();
    prop_oneof![6 => proptest::sample::select(names).prop_map(str::to_string), 1 => text()]
}

fn unit_path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{1,4}(/[a-z]{1,4}){0,2}/[a-z_]{1,6}\\.o",
        2 => "[a-z]{1,4}(/[a-z]{1,4}){0,2}/",
        1 => "[a-z]{1,3}/[a-z]{1,4}\\$\\(BITS\\)\\.o",
        2 => text(),
    ]
}

fn condition() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "ifn?def CONFIG_[A-Z]{1,4}",
        2 => "ifn?eq \\(\\$\\(CONFIG_[A-Z]{1,3}\\),y?\\)",
        1 => "ifeq '[a-z]{0,2}' \"[a-z]{0,2}\"",
        1 => text(),
    ]
}

/// A TOML value for `key`: mostly of the right type, sometimes not.
fn value_for(key: &'static str) -> BoxedStrategy<String> {
    let list = |s: BoxedStrategy<String>| {
        prop::collection::vec(s, 0..4)
            .prop_map(|v| format!("[{}]", v.iter().map(|x| toml_string(x)).collect::<Vec<_>>().join(", ")))
    };
    let right: BoxedStrategy<String> = match key {
        "path" => unit_path().prop_map(|p| toml_string(&p)).boxed(),
        "kbuild-dir" => "[a-z]{1,4}(/[a-z]{1,4}){0,1}/?".prop_map(|p| toml_string(&p)).boxed(),
        "skip" | "force" | "exempt" => list(mechanism_name().boxed()).boxed(),
        "when" => prop_oneof![condition().prop_map(|c| toml_string(&c)), list(condition().boxed())].boxed(),
        "why" => prop_oneof![
            3 => "[A-Za-z ,.]{1,30}".prop_map(|w| toml_string(&w)),
            2 => text().prop_map(|w| toml_string(&w)),
            1 => text().prop_map(|w| format!("\"\"\"\n{}\"\"\"", w.replace('\\', "\\\\").replace('"', "\\\""))),
        ]
        .boxed(),
        "links" | "except" => list(text().boxed()).boxed(),
        "vars" => ("[A-Z]{1,4}", prop::collection::vec("[0-9a-z$() ]{0,3}", 0..3))
            .prop_map(|(n, v)| {
                format!("{{ {n} = [{}] }}", v.iter().map(|x| toml_string(x)).collect::<Vec<_>>().join(", "))
            })
            .boxed(),
        _ => text().prop_map(|t| toml_string(&t)).boxed(),
    };
    prop_oneof![8 => right, 1 => Just("42".to_string()), 1 => Just("{ a = 1 }".to_string()), 1 => Just("true".to_string())]
        .boxed()
}

const UNIT_KEYS: &[&str] = &["path", "skip", "force", "why", "links", "when", "vars", "kbuild-dir", "skp"];
const REQUIRE_KEYS: &[&str] = &["path", "exempt", "except", "why", "links"];

fn entry(header: &'static str, keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    let fields: Vec<BoxedStrategy<Option<String>>> = keys
        .iter()
        .map(|k| {
            let weight_present = if ["path", "why"].contains(k) { 9 } else { 3 };
            prop_oneof![1 => Just(None), weight_present => value_for(k).prop_map(move |v| Some(format!("{k} = {v}")))]
                .boxed()
        })
        .collect();
    fields.prop_map(move |lines| {
        format!("[[{header}]]\n{}\n", lines.into_iter().flatten().collect::<Vec<_>>().join("\n"))
    })
}

/// A policy from the grammar: units and requirements with right and wrong values.
fn grammar_policy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop_oneof![5 => entry("unit", UNIT_KEYS), 1 => entry("require", REQUIRE_KEYS)], 0..8)
        .prop_map(|entries| entries.join("\n"))
}

fn policy_input() -> impl Strategy<Value = String> {
    prop_oneof![4 => grammar_policy(), 4 => mutated("policy"), 1 => any::<String>()]
}

fn directive_line() -> impl Strategy<Value = String> {
    let vars: Vec<String> = MECHANISMS
        .iter()
        .flat_map(|m| match m.form {
            sanpolicy::mechanism::Form::Variable { var, .. } => vec![var.to_string()],
            sanpolicy::mechanism::Form::FlagRemoval { remove_prefix, add_prefix, dir_remove_var, .. } => {
                vec![remove_prefix.to_string(), add_prefix.to_string(), dir_remove_var.to_string()]
            }
        })
        .collect();
    let object = prop_oneof![Just(String::new()), "_[a-z]{1,4}(/[a-z]{1,3})?(\\$\\(BITS\\))?\\.o", "[a-z]{1,4}\\.o"];
    let op = proptest::sample::select(vec![":=", "=", "+=", "?=", "::=", ":::=", "!=", " := ", "\t="]);
    let value = proptest::sample::select(vec![
        "n",
        "y",
        "N",
        "$(CC_FLAGS_FTRACE)",
        "n ",
        "y # comment",
        "-pg",
        "$(CC_FLAGS_FTRACE) -pg",
        "",
        "n \\",
    ]);
    let modifier = proptest::sample::select(vec!["", "", "", "export ", "override "]);
    (modifier, proptest::sample::select(vars), object, op, value)
        .prop_map(|(m, var, obj, op, value)| format!("{m}{var}{obj}{op}{value}"))
}

fn make_line() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => directive_line(),
        2 => condition(),
        1 => proptest::sample::select(vec!["else", "else ifdef CONFIG_B", "endif", "endif # X", "define foo", "endef"])
            .prop_map(str::to_string),
        2 => "# [ -~]{0,20}",
        1 => Just(String::new()),
        1 => Just(format!("{BEGIN_MARKER}: do not edit by hand")),
        1 => "[0-9a-f]{0,16}".prop_map(|c| format!("{END_MARKER} (checksum {c})")),
        1 => proptest::sample::select(vec!["obj-y += a.o \\", "\t$(Q)cmd", "\\", "x \\\\", "a.o: b.c", "  "])
            .prop_map(str::to_string),
        1 => text(),
    ]
}

/// A kbuild file from the grammar, maybe with a generated block (valid or not) inside.
fn grammar_makefile() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(make_line(), 0..25),
        prop::collection::vec(make_line(), 0..10),
        prop_oneof![Just(None), units().prop_map(Some)],
        proptest::sample::select(vec!["\n", "\n", "\n", "\r\n"]),
        any::<bool>(),
    )
        .prop_map(|(before, after, units, newline, final_newline)| {
            let mut text = before.join(newline);
            if let Some(units) = units {
                let refs: Vec<&Unit> = units.iter().collect();
                text.push_str(newline);
                text.push_str(&emit::render_block(&refs, builtin()));
            }
            text.push_str(&after.join(newline));
            if final_newline {
                text.push_str(newline);
            }
            text
        })
}

/// Units as the policy parser would build them, for generated blocks.
fn units() -> impl Strategy<Value = Vec<Unit>> {
    let unit = (
        prop_oneof!["[a-z]{1,4}(/[a-z]{1,3})?(\\$\\(BITS\\))?\\.o".prop_map(Some), Just(None)],
        prop::collection::btree_map(0..MECHANISMS.len(), prop_oneof![Just(Setting::Skip), Just(Setting::Force)], 1..4),
        prop_oneof![text(), "[A-Za-z .]{1,20}"],
        prop::collection::vec(condition(), 0..3),
    )
        .prop_map(|(object, settings, why, when)| {
            let settings: BTreeMap<MechId, Setting> = settings.into_iter().map(|(i, s)| (MechId(i), s)).collect();
            let when = when.into_iter().filter_map(|c| policy::when::validate(&c).ok().map(|w| w.text)).collect();
            unit("d", object.as_deref(), settings, &why, when)
        });
    prop::collection::vec(unit, 1..5)
}

fn makefile_input() -> impl Strategy<Value = String> {
    prop_oneof![4 => grammar_makefile(), 4 => mutated("makefile"), 1 => any::<String>()]
}

// ---------------------------------------------------------------------------------------------
// Properties.

fn unit(dir: &str, object: Option<&str>, settings: BTreeMap<MechId, Setting>, why: &str, when: Vec<String>) -> Unit {
    let text = match object {
        Some(o) => format!("{dir}/{o}"),
        None => format!("{dir}/"),
    };
    let path = UnitPath::parse(&text, object.map(|_| dir)).unwrap_or_else(|e| panic!("{text}: {e:?}"));
    let here = sanpolicy::diagnostic::Location::file(Path::new("fuzz.toml"));
    Unit {
        path,
        settings,
        why: why.to_string(),
        why_location: here.clone(),
        links: Vec::new(),
        conditions: when.iter().map(|w| sanpolicy::policy::condition_key(w)).collect(),
        when,
        when_locations: Vec::new(),
        vars: BTreeMap::new(),
        location: here,
        setting_locations: BTreeMap::new(),
        flags: BTreeMap::new(),
        category: None,
    }
}

/// A directive as the property compares it: mechanism, object, setting, conditions.
type Found = (MechId, Option<String>, Setting, Vec<String>);

/// The directives of `file` a policy unit can express, in file order; with `all`, fail on any
/// that it cannot (a generated block must hold nothing else).
fn expressible(file: &KbuildFile, all: bool) -> Result<Vec<Found>, TestCaseError> {
    let mut out = Vec::new();
    for a in &file.assignments {
        let Some(d) = classify(a) else { continue };
        let setting = match d.value {
            DirectiveValue::Plain(s) => Some(s),
            DirectiveValue::Other => None,
        };
        let when: Option<Vec<String>> = a
            .frames
            .iter()
            .map(|f| {
                (!f.in_else && policy::when::validate(&f.condition.text).is_ok()).then(|| f.condition.text.clone())
            })
            .collect();
        let object_ok = d.object.as_deref().is_none_or(|o| UnitPath::parse(&format!("d/{o}"), Some("d")).is_ok());
        let line = setting.and_then(|s| emit::directive_line(d.mech, d.object.as_deref(), s, builtin().naming(d.mech)));
        match (setting, when, object_ok, line) {
            (Some(s), Some(when), true, Some(_)) => out.push((d.mech, d.object, s, when)),
            _ if all => return Err(TestCaseError::fail(format!("inexpressible directive {a:?}"))),
            _ => {}
        }
    }
    Ok(out)
}

/// What a block rendered from `found` holds, and the block.
fn render(found: &[Found]) -> String {
    let units: Vec<Unit> = found
        .iter()
        .map(|(mech, object, setting, when)| {
            unit("d", object.as_deref(), BTreeMap::from([(*mech, *setting)]), "r", when.clone())
        })
        .collect();
    let refs: Vec<&Unit> = units.iter().collect();
    emit::render_block(&refs, builtin())
}

fn check_makefile(text: &str) -> Result<(), TestCaseError> {
    let file = makefile::parse(text);
    let lines = text.split_inclusive('\n').count();
    for a in &file.assignments {
        prop_assert!(a.line >= 1 && a.line <= a.end_line && a.end_line <= lines.max(1), "lines of {:?}", a);
    }
    for p in &file.marker_problems {
        prop_assert!(p.line >= 1 && p.line <= lines, "marker problem at {}", p.line);
    }
    if let Some(b) = &file.block {
        let r = b.byte_range.clone();
        prop_assert!(r.start <= r.end && r.end <= text.len(), "block range {:?}", r);
        prop_assert!(text.is_char_boundary(r.start) && text.is_char_boundary(r.end));
        prop_assert!(text[r].contains(&b.body), "body outside the block");
    }

    // generate(parse(x)) reparses to the same directives.
    let found = expressible(&file, false)?;
    let block = render(&found);
    let reparsed = makefile::parse(&block);
    prop_assert!(reparsed.marker_problems.is_empty(), "{:?}", reparsed.marker_problems);
    let body = reparsed.block.as_ref().map(|b| b.body.clone());
    prop_assert!(body.is_some(), "no block in {block:?}");
    prop_assert_eq!(expressible(&reparsed, true)?, found.clone(), "block: {}", block);
    prop_assert!(reparsed.assignments.iter().all(|a| a.in_block && a.inline_comment.is_none() && !a.continued));

    // Splicing the block into `x` keeps every byte outside it, and is stable.
    if text.contains('\r') {
        return Ok(());
    }
    match emit::splice(text, &file, &block, true) {
        Err(SpliceError::Markers(..)) => {
            // Broken markers; or, with no block to replace, a file ending in a `\` (no final
            // newline) or inside a `define` or conditional.
            let last = text.rsplit('\n').next().unwrap_or("");
            let backslash = (last.len() - last.trim_end_matches('\\').len()) % 2 == 1;
            prop_assert!(
                !file.marker_problems.is_empty() || (file.block.is_none() && (backslash || file.unclosed.is_some()))
            );
        }
        Err(SpliceError::HandEdited(_)) => prop_assert!(false, "--force refused a hand edit"),
        Ok(new) => {
            prop_assert!(file.marker_problems.is_empty());
            match &file.block {
                Some(old) => {
                    prop_assert!(new.starts_with(&text[..old.byte_range.start]), "bytes before the block lost");
                    prop_assert!(new.ends_with(&text[old.byte_range.end..]), "bytes after the block lost");
                }
                None => prop_assert!(new.starts_with(text), "bytes of the file lost"),
            }
            let after = makefile::parse(&new);
            prop_assert!(after.marker_problems.is_empty(), "{:?} in {new:?}", after.marker_problems);
            let spliced = after.block.clone();
            prop_assert_eq!(spliced.as_ref().map(|b| b.body.clone()), body.clone(), "in {:?}", new);
            prop_assert_eq!(
                spliced.as_ref().and_then(|b| b.recorded_checksum.clone()),
                body.as_deref().map(checksum),
                "checksum"
            );
            if file.block.is_none() {
                let inside: Vec<Found> = expressible(&after, false)?.into_iter().skip(found.len()).collect::<Vec<_>>();
                prop_assert_eq!(inside, found, "appended block reads differently in {:?}", new);
            }
            // Regenerating the same block changes nothing, even without --force.
            let again = emit::splice(&new, &after, &block, false);
            prop_assert_eq!(again, Ok(new.clone()));
            // Removing the block (its units left the policy) keeps everything around it; only
            // the blank line that set it apart may go.
            let range = after.block.as_ref().map(|b| b.byte_range.clone()).unwrap_or_default();
            let removed = emit::splice(&new, &after, "", false);
            let (before, rest) = (&new[..range.start], &new[range.end..]);
            let kept = [format!("{before}{rest}"), format!("{}{rest}", before.strip_suffix('\n').unwrap_or(before))];
            prop_assert!(removed.as_ref().is_ok_and(|r| kept.contains(r)), "removal gave {removed:?} from {new:?}");
        }
    }
    Ok(())
}

fn check_policy(text: &str) -> Result<(), TestCaseError> {
    // Includes resolve next to a file that does not exist: nothing outside is read.
    let path = Path::new("/nonexistent-sanpolicy-fuzz/policy.toml");
    let (parsed, diags) = policy::parse_str(path, text);
    for d in diags.iter() {
        let Some(loc) = &d.location else { continue };
        if loc.path != path || loc.line == 0 {
            continue;
        }
        prop_assert!(loc.span.start <= loc.span.end && loc.span.end <= text.len(), "{d:?}");
        prop_assert!(loc.line <= text.split('\n').count(), "{d:?}");
        prop_assert!(loc.col >= 1, "{d:?}");
    }
    let mut sources = Sources::default();
    sources.insert(path, text);
    let rendered = diagnostic::render(&diags, &mut sources, false, &Default::default());
    // One header line per error; a source line quoted in a snippet may itself say `error[`.
    let headers = rendered.lines().filter(|l| l.starts_with("error[")).count();
    prop_assert_eq!(headers, diags.iter().filter(|d| d.is_error()).count(), "{}", rendered);
    // Nothing from the input can move the terminal's cursor or recolour it.
    let raw = rendered.replace("\r\n", "\n");
    prop_assert!(!raw.chars().any(|c| c.is_control() && c != '\n' && c != '\t'), "{:?}", rendered);
    if diags.has_errors() {
        return Ok(());
    }
    // A policy without errors renders blocks that read back as its units.
    let rules = builtin();
    for (_, units) in parsed.units_by_dir() {
        let block = emit::render_block(&units, rules);
        let file = makefile::parse(&block);
        prop_assert!(file.marker_problems.is_empty(), "{:?}\n{}", file.marker_problems, block);
        prop_assert!(file.block.is_some(), "no block:\n{}", block);
        let mut expected = Vec::new();
        for u in &units {
            for (id, setting) in &u.settings {
                let object = u.path.object.clone();
                if emit::directive_line(*id, object.as_deref(), *setting, rules.naming(*id)).is_some() {
                    expected.push((*id, object, *setting, u.when.clone()));
                }
            }
        }
        let read: Vec<Found> = file
            .directives()
            .filter_map(|(i, d)| match d.value {
                DirectiveValue::Plain(s) => Some((
                    d.mech,
                    d.object.clone(),
                    s,
                    file.assignments[i].frames.iter().map(|f| f.condition.text.clone()).collect(),
                )),
                DirectiveValue::Other => None,
            })
            .collect();
        prop_assert_eq!(read, expected, "block:\n{}", block);
        prop_assert_eq!(file.assignments.len(), file.directives().count(), "a non-directive line in\n{}", block);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The runner: a seeded or timed proptest run with a watchdog for hangs.

/// Aborts the process when one input runs longer than [`HANG`], printing and saving it.
struct Watchdog {
    current: Arc<Mutex<Option<(Instant, String)>>>,
    done: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(target: &'static str) -> Watchdog {
        let current: Arc<Mutex<Option<(Instant, String)>>> = Arc::new(Mutex::new(None));
        let done = Arc::new(AtomicBool::new(false));
        let (c, d) = (current.clone(), done.clone());
        std::thread::spawn(move || {
            while !d.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let guard = c.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((started, input)) = guard.as_ref().filter(|(s, _)| s.elapsed() > HANG) {
                    let saved = save_finding(target, "hang", input);
                    eprintln!(
                        "fuzz {target}: input ran {:?} (hang), saved to {}:\n{input:?}",
                        started.elapsed(),
                        saved.display()
                    );
                    std::process::abort();
                }
            }
        });
        Watchdog { current, done }
    }

    fn watch<T>(&self, input: &str, f: impl FnOnce() -> T) -> T {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), input.to_string()));
        let out = f();
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        out
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

fn save_finding(target: &str, kind: &str, input: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-findings").join(target);
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{kind}-{}", checksum(input)));
    let _ = std::fs::write(&path, input);
    path
}

fn fuzz(target: &'static str, strategy: impl Strategy<Value = String>, check: fn(&str) -> Result<(), TestCaseError>) {
    let budget = std::env::var("SANPOLICY_FUZZ_SECONDS").ok().and_then(|s| s.parse::<u64>().ok());
    let fixed_seed = std::env::var("SANPOLICY_FUZZ_SEED").ok().and_then(|s| s.parse::<u64>().ok());
    let fresh = std::env::var_os("SANPOLICY_FUZZ_FRESH").is_some();
    let watchdog = Watchdog::start(target);
    let started = Instant::now();
    let deadline = budget.map(|s| started + Duration::from_secs(s));
    let mut cases = 0u64;
    let mut batch = 0u64;
    loop {
        let seed = match (fixed_seed, deadline) {
            (Some(s), _) => s,
            (None, Some(_)) if fresh => {
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
                    ^ batch
            }
            // The fixed sequence: a time budget only decides how far along it a run gets, so a
            // longer run on a developer's machine covers every case a shorter CI run tries.
            (None, _) => batch,
        };
        let config = Config {
            cases: if deadline.is_some() { 500 } else { CASES },
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed),
            max_shrink_time: 60_000,
            ..Config::default()
        };
        let batch_cases = config.cases;
        let mut runner = TestRunner::new(config);
        let result = runner.run(&strategy, |input| watchdog.watch(&input, || check(&input)));
        cases += u64::from(batch_cases);
        if let Err(e) = result {
            let (reason, input) = match e {
                TestError::Fail(reason, input) => (reason.to_string(), input),
                TestError::Abort(reason) => panic!("fuzz {target}: aborted: {reason}"),
            };
            let saved = save_finding(target, "crash", &input);
            panic!(
                "fuzz {target}: seed {seed} found a failing input ({reason}), saved to {}; fix it, then add the file to tests/fuzz_regressions/{target}/\ninput: {input:?}",
                saved.display()
            );
        }
        batch += 1;
        if deadline.is_none_or(|d| Instant::now() >= d) || fixed_seed.is_some() {
            break;
        }
    }
    let seeds =
        if fresh || fixed_seed.is_some() { "fresh or given seeds".to_string() } else { format!("seeds 0..{batch}") };
    eprintln!("fuzz {target}: {cases} cases ({seeds}) in {:.1?}, no findings", started.elapsed());
}

#[test]
fn fuzz_policy_parser() {
    fuzz("policy", policy_input(), check_policy);
}

#[test]
fn fuzz_makefile_reader() {
    fuzz("makefile", makefile_input(), check_makefile);
}

/// Every corpus file (seeds, and inputs that once failed) passes the same properties.
#[test]
fn corpus_replays_cleanly() {
    let mut failures = Vec::new();
    for (target, check) in [
        ("policy", check_policy as fn(&str) -> _),
        ("makefile", check_makefile),
        ("when", check_when),
        ("includes", check_includes),
    ] {
        let files = corpus(target);
        assert!(files.len() >= 5, "{target}: corpus too small");
        for (name, text) in files {
            if let Err(e) = check(&text) {
                failures.push(format!("{target}/{name}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The generators reach what they are meant to: policies that parse cleanly, files with
/// blocks, directives that round-trip (a generator producing only garbage would test nothing).
#[test]
fn generators_reach_valid_inputs() {
    let mut runner = TestRunner::new(Config { rng_seed: RngSeed::Fixed(7), ..Config::default() });
    let (mut clean, mut blocks, mut directives) = (0, 0, 0);
    for _ in 0..300 {
        let p = policy_input().new_tree(&mut runner).unwrap().current();
        clean += usize::from(!policy::parse_str(Path::new("p.toml"), &p).1.has_errors());
        let m = makefile_input().new_tree(&mut runner).unwrap().current();
        let file = makefile::parse(&m);
        blocks += usize::from(file.block.is_some());
        directives += expressible(&file, false).map(|f| f.len()).unwrap_or(0);
    }
    assert!(clean >= 20, "only {clean} clean policies");
    assert!(blocks >= 30, "only {blocks} files with a block");
    assert!(directives >= 300, "only {directives} expressible directives");
}

/// The parser refuses reasons a comment cannot hold; the emitter neutralises them anyway, so
/// a library caller cannot end the block early or continue a comment onto a directive.
#[test]
fn emitter_neutralises_what_the_parser_refuses() {
    for why in [
        "Fine.\nEND sanpolicy generated block (checksum 0)\nKASAN_SANITIZE := y",
        "BEGIN sanpolicy generated block",
        "cr\rKASAN_SANITIZE := y",
        "continued \\\nKASAN_SANITIZE := y",
        "continued \\\u{b}\nKCOV_INSTRUMENT := y",
        "nul\u{0}and\u{85}next-line",
    ] {
        assert!(makefile::comment_problem(why).is_some() || why.contains('\\'), "{why:?} accepted");
        let kasan = MechId::by_name("kasan").unwrap();
        let u = unit("d", Some("x.o"), BTreeMap::from([(kasan, Setting::Skip)]), why, Vec::new());
        let block = emit::render_block(&[&u], builtin());
        let file = makefile::parse(&block);
        assert!(file.marker_problems.is_empty() && file.block.is_some(), "{why:?}:\n{block}");
        let names: Vec<&str> = file.assignments.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["KASAN_SANITIZE_x.o"], "{why:?}:\n{block}");
        assert!(!block.contains('\r') && !block.contains('\u{0}'), "{block:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// The `when` grammar: what it accepts, GNU make runs without a shell or a new variable.

/// Pieces of conditions: the grammar's own, and every make construct that runs code.
const WHEN_PIECES: &[&str] = &[
    "ifdef ",
    "ifndef ",
    "ifeq ",
    "ifneq ",
    "ifeq",
    " ",
    "\t",
    "(",
    ")",
    ",",
    "\"",
    "'",
    "y",
    "n",
    "_",
    "yy",
    "-",
    "$(CONFIG_A)",
    "$(CONFIG_B)",
    "CONFIG_A",
    "$(call clang-min-version, 180000)",
    "$(call gcc-min-version,5)",
    "$(call rustc-min-version, 1)",
    "$(shell touch marker)",
    "$(eval CONFIG_A := n)",
    "$(call shell,touch marker)",
    "$(file >marker,x)",
    "$(value CONFIG_A)",
    "$(origin CONFIG_A)",
    "$(info x)",
    "$$",
    "$$(shell touch marker)",
    "${shell touch marker}",
    "$(if y,$(shell touch marker))",
    "$(call clang-min-version,$(shell touch marker))",
    "$(call clang-min-version, 1;touch marker)",
    "$(CONFIG_A",
    "$(",
    "$",
    "#",
    "\\",
    "\n",
    "\r",
    "\u{0}",
    "$(call cc-option,-x)",
    "$(CONFIG_$(CONFIG_A))",
    "$(CONFIG_A:y=$(shell touch marker))",
    "é",
];

fn when_input() -> impl Strategy<Value = String> {
    let piece = proptest::sample::select(WHEN_PIECES).prop_map(str::to_string);
    let operand = prop::collection::vec(piece.clone(), 0..4).prop_map(|p| p.concat());
    prop_oneof![
        // Shaped like a conditional, operands from the pieces.
        4 => (proptest::sample::select(&["ifeq ", "ifneq "][..]), operand.clone(), operand.clone())
            .prop_map(|(k, a, b)| format!("{k}({a},{b})")),
        2 => (proptest::sample::select(&["ifeq ", "ifneq "][..]), operand.clone(), operand.clone())
            .prop_map(|(k, a, b)| format!("{k}\"{a}\" '{b}'")),
        2 => (proptest::sample::select(&["ifdef ", "ifndef "][..]), piece.clone()).prop_map(|(k, a)| format!("{k}{a}")),
        3 => prop::collection::vec(piece, 1..8).prop_map(|p| p.concat()),
        1 => mutated("when"),
    ]
}

/// Helpers as pure stubs: the fuzzer asks whether the *condition* runs code, not Kbuild's helpers.
const MAKE_PRELUDE: &str = "clang-min-version = $(if $(1),y)\ngcc-min-version = $(if $(1),y)\n\
                            rustc-min-version = $(if $(1),y)\nCONFIG_A := y\nbefore := $(.VARIABLES)\n";

fn check_when(text: &str) -> Result<(), TestCaseError> {
    let Ok(when) = policy::when::validate(text) else { return Ok(()) };
    // Independently of the parser: nothing but references to Kconfig symbols and the helpers.
    let mut rest = when.text.as_str();
    while let Some(at) = rest.find('$') {
        rest = &rest[at..];
        let allowed = rest.starts_with("$(CONFIG_")
            || ["clang-min-version,", "gcc-min-version,", "rustc-min-version,"]
                .iter()
                .any(|h| rest.starts_with(&format!("$(call {h}")));
        prop_assert!(allowed, "accepted {:?} with `{}`", text, rest);
        rest = &rest[1..];
    }
    prop_assert!(!when.text.contains(['\n', '\r', '#', '\\']), "accepted {:?}", text);
    prop_assert!(when.symbols().iter().all(|s| s.starts_with("CONFIG_")), "{:?}", when);
    // GNU make reads it as a conditional, runs no shell, writes no file, defines no variable.
    let dir = tempfile::tempdir().unwrap();
    let makefile = format!(
        "{MAKE_PRELUDE}{}\nRESULT := 1\nendif\nafter := $(.VARIABLES)\n\
         $(info NEW:$(filter-out $(before) before RESULT,$(after)))\nall: ; @:\n",
        when.text
    );
    std::fs::write(dir.path().join("Makefile"), &makefile).unwrap();
    let out = std::process::Command::new("make").args(["-s", "-f", "Makefile"]).current_dir(dir.path()).output();
    let out = out.map_err(|e| TestCaseError::fail(format!("cannot run make: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    prop_assert!(out.status.success(), "make refused {:?}: {}", when.text, String::from_utf8_lossy(&out.stderr));
    prop_assert_eq!(stdout.trim(), "NEW:", "make defined variables for {:?}", when.text);
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    prop_assert_eq!(files.len(), 1, "make wrote files for {:?}: {:?}", when.text, files);
    Ok(())
}

#[test]
fn fuzz_when_grammar() {
    fuzz("when", when_input(), check_when);
}

/// The generator reaches both sides: accepted conditions (so make is really run) and refused
/// ones holding each code-running construct.
#[test]
fn when_generator_reaches_both_sides() {
    let mut runner = TestRunner::new(Config { rng_seed: RngSeed::Fixed(11), ..Config::default() });
    let (mut accepted, mut refused_shell) = (0, 0);
    for _ in 0..500 {
        let c = when_input().new_tree(&mut runner).unwrap().current();
        match policy::when::validate(&c) {
            Ok(_) => accepted += 1,
            Err(_) if c.contains("shell") => refused_shell += 1,
            Err(_) => {}
        }
    }
    assert!(accepted >= 40, "only {accepted} accepted");
    assert!(refused_shell >= 40, "only {refused_shell} refused with a shell");
    // The check fails where it must: make would run this one.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Makefile"),
        format!("{MAKE_PRELUDE}ifeq ($(shell touch marker),)\nendif\nall: ; @:\n"),
    )
    .unwrap();
    let status = std::process::Command::new("make").args(["-s"]).current_dir(dir.path()).status().unwrap();
    assert!(status.success() && dir.path().join("marker").exists(), "the make oracle cannot see a shell");
}

// ---------------------------------------------------------------------------------------------
// Includes: random include graphs with symlinked directories terminate, parse each file once,
// and never leave the policy's directory.

/// Names a file may include: the files, through symlinked directories, escapes, specials.
const INCLUDE_NAMES: &[&str] = &[
    "f0.toml",
    "f1.toml",
    "f2.toml",
    "f3.toml",
    "l/f0.toml",
    "l/l/f1.toml",
    "l/l/l/f2.toml",
    "d/f3.toml",
    "d/../f0.toml",
    "up/f1.toml",
    "../f0.toml",
    "/etc/passwd",
    "missing.toml",
    "fifo",
    "d",
    "d/e/../../f2.toml",
    "./f3.toml",
    "",
];

/// A graph: one line per file `f<i>.toml`, its includes separated by `|`.
fn includes_input() -> impl Strategy<Value = String> {
    let names = prop::collection::vec(proptest::sample::select(INCLUDE_NAMES), 0..6).prop_map(|n| n.join("|"));
    prop_oneof![
        4 => prop::collection::vec(names, 1..5).prop_map(|lines| lines.join("\n")),
        1 => mutated("includes"),
    ]
}

fn check_includes(graph: &str) -> Result<(), TestCaseError> {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p");
    std::fs::create_dir_all(dir.join("d/e")).unwrap();
    std::os::unix::fs::symlink(".", dir.join("l")).unwrap();
    std::os::unix::fs::symlink("..", dir.join("up")).unwrap();
    std::fs::write(root.path().join("f0.toml"), "[[unit]]\npath = \"outside/x.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n")
        .unwrap();
    let fifo = std::process::Command::new("mkfifo").arg(dir.join("fifo")).status().unwrap();
    prop_assert!(fifo.success());
    let lines: Vec<&str> = graph.lines().take(4).collect();
    for i in 0..4 {
        let names: Vec<String> =
            lines.get(i).map(|l| l.split('|').map(|n| format!("{n:?}")).collect()).unwrap_or_default();
        let unit = format!("[[unit]]\npath = \"lib/f{i}.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n");
        std::fs::write(dir.join(format!("f{i}.toml")), format!("include = [{}]\n{unit}", names.join(", "))).unwrap();
    }
    let (policy, diags) = policy::load(&dir.join("f0.toml"));
    let canonical: Vec<PathBuf> = policy.files.iter().map(|(p, _)| p.canonicalize().unwrap()).collect();
    let mut unique = canonical.clone();
    unique.sort();
    unique.dedup();
    prop_assert_eq!(
        unique.len(),
        canonical.len(),
        "a file parsed twice: {:?}",
        policy.files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    let inside = dir.canonicalize().unwrap();
    prop_assert!(canonical.iter().all(|p| p.starts_with(&inside)), "read outside: {:?}", canonical);
    prop_assert!(policy.units.iter().all(|u| u.path.text.starts_with("lib/")), "a unit from outside");
    for d in diags.iter() {
        let Some(loc) = &d.location else { continue };
        let known = loc.path.canonicalize().ok().is_some_and(|p| canonical.contains(&p));
        prop_assert!(loc.line == 0 || known, "{:?}", d);
    }
    Ok(())
}

#[test]
fn fuzz_includes() {
    fuzz("includes", includes_input(), check_includes);
}
