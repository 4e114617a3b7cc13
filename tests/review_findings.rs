//! `explain` and `report` show what qualifies their answer (issue 9 points 4 and 5): a finding
//! the policy acknowledges, with its reason, for the objects and directories it is about, and an
//! opaque construct in a directory's kbuild file (`opaque-construct`), through which make may
//! change a mechanism in ways sanpolicy does not read, so the answer there is not certain.
//! A small in-place tree with 6.12's rule files; `check` is run first to show the findings are
//! real (acknowledged, so it passes).

mod fixture_tree;

use std::fs;
use std::path::Path;

use fixture_tree::{run_in, Run};
use serde_json::Value;

/// `lib/b.o` must be exempt from KASAN and is not (acknowledged); `gone.o` has no source
/// (acknowledged); line 6 is a `$(eval)` that may set a KCOV variable.
const MAKEFILE: &str = "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\nKCSAN_SANITIZE_gone.o := n\n$(eval KCOV_INSTRUMENT_b.o := n)\n";

const POLICY_TAIL: &str = r#"
[[require]]
path = "lib/b.o"
exempt = ["kasan"]
why = "b recurses into the allocator"

[[acknowledge]]
code = "recursion-prone"
path = "lib/b.o"
mechanism = "kasan"
why = "upstream keeps b instrumented; the fix belongs upstream"

[[acknowledge]]
code = "missing-source"
path = "lib/gone.o"
why = "upstream's dead exemption; renaming it belongs upstream"
"#;

const B_WHY: &str = "upstream keeps b instrumented; the fix belongs upstream";
const GONE_WHY: &str = "upstream's dead exemption; renaming it belongs upstream";

fn tree() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("sanpolicy-review-findings-").tempdir().unwrap();
    let p = dir.path();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules/linux-6.12/scripts");
    fs::create_dir_all(p.join("scripts")).unwrap();
    fs::create_dir_all(p.join("lib")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), p.join("scripts").join(f)).unwrap();
    }
    for f in ["a.c", "b.c"] {
        fs::write(p.join("lib").join(f), "").unwrap();
    }
    fs::write(p.join("lib/Makefile"), MAKEFILE).unwrap();
    let import = run_in(p, &["import", "--adopt"]);
    assert_eq!(import.code, 0, "{}", import.both());
    let policy = p.join("sanitizer-policy.toml");
    let text = fs::read_to_string(&policy).unwrap();
    assert!(text.contains("\nlayout = \"in-place\"\n"), "{text}");
    let text = text.replacen("\nlayout = ", "\nbuiltin-requirements = false\nlayout = ", 1);
    fs::write(&policy, format!("{text}{POLICY_TAIL}")).unwrap();
    // The findings are real: check lists both as acknowledged and passes.
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 0, "{}", check.both());
    assert!(check.stderr.contains("acknowledged [recursion-prone]"), "{}", check.both());
    assert!(check.stderr.contains("acknowledged [missing-source]"), "{}", check.both());
    assert!(check.stderr.contains("2 acknowledged"), "{}", check.both());
    dir
}

fn ok(p: &Path, args: &[&str]) -> Run {
    let run = run_in(p, args);
    assert_eq!(run.code, 0, "{args:?}: {}", run.both());
    run
}

/// The text lines of `explain` for one mechanism: its row and the indented lines under it.
fn rows_of<'a>(out: &'a str, mech: &str) -> Vec<&'a str> {
    let mut lines = out.lines().skip_while(|l| l.split_whitespace().next() != Some(mech));
    let mut rows: Vec<&str> = lines.next().into_iter().collect();
    rows.extend(lines.take_while(|l| l.starts_with("                    ")));
    rows
}

#[test]
fn explain_shows_acknowledged_findings_and_opaque_constructs() {
    let t = tree();
    let p = t.path();
    let out = ok(p, &["explain", "lib/b.o"]).stdout;
    assert!(out.contains("acknowledged [recursion-prone] `lib/b.o` kasan (./sanitizer-policy.toml:"), "{out}");
    assert!(out.contains(B_WHY), "{out}");
    assert!(!out.contains(GONE_WHY), "another object's acknowledgement:\n{out}");
    assert!(
        out.contains("note: not certain: lib/Makefile:6 has `$(eval …)`, through which make may change kcov "),
        "{out}"
    );
    let kcov = rows_of(&out, "kcov");
    assert!(kcov.iter().any(|l| l.trim() == "not certain: lib/Makefile:6 has `$(eval …)`"), "{kcov:?}");
    let kasan = rows_of(&out, "kasan");
    assert!(!kasan.is_empty() && !kasan.iter().any(|l| l.contains("not certain")), "{kasan:?}");

    let json: Value = serde_json::from_str(&ok(p, &["explain", "--format", "json", "lib/b.o"]).stdout).unwrap();
    let e = &json[0];
    assert_eq!(e["acknowledged"].as_array().map(Vec::len), Some(1), "{e}");
    assert_eq!(e["acknowledged"][0]["code"], "recursion-prone");
    assert_eq!(e["acknowledged"][0]["mechanism"], "kasan");
    assert_eq!(e["acknowledged"][0]["why"], B_WHY);
    assert_eq!(e["opaque"][0]["line"], 6);
    assert_eq!(e["opaque"][0]["mechanisms"], serde_json::json!(["kcov"]));
    let certain =
        |m: &str| e["mechanisms"].as_array().unwrap().iter().find(|x| x["mechanism"] == m).unwrap()["certain"].clone();
    assert_eq!((certain("kcov"), certain("kasan")), (Value::Bool(false), Value::Bool(true)));

    // The stale directive's object shows its own acknowledgement; the directory shows both.
    let gone = ok(p, &["explain", "lib/gone.o"]).stdout;
    assert!(gone.contains("acknowledged [missing-source] `lib/gone.o`") && gone.contains(GONE_WHY), "{gone}");
    let dir = ok(p, &["explain", "lib/"]).stdout;
    assert!(dir.contains(B_WHY) && dir.contains(GONE_WHY), "{dir}");
    // An object no acknowledgement names shows none, but the directory's construct still applies.
    let a = ok(p, &["explain", "lib/a.o"]).stdout;
    assert!(!a.contains("acknowledged"), "{a}");
    assert!(a.contains("not certain: lib/Makefile:6"), "{a}");
}

#[test]
fn report_shows_acknowledged_findings_and_opaque_constructs() {
    let t = tree();
    let p = t.path();
    let md = ok(p, &["report"]).stdout;
    let row = md.lines().find(|l| l.starts_with("| `lib/b.o` | kasan |")).unwrap_or_else(|| panic!("{md}"));
    assert!(row.contains(&format!("**broken**: kasan (acknowledged: {B_WHY})")), "{row}");
    assert!(md.contains("### Acknowledged findings"), "{md}");
    assert!(md.contains(&format!("| `missing-source` | `lib/gone.o` |  | {GONE_WHY} |")), "{md}");
    assert!(md.contains(&format!("| `recursion-prone` | `lib/b.o` | kasan | {B_WHY} |")), "{md}");
    assert!(md.contains("### Not certain: opaque constructs"), "{md}");
    assert!(md.contains("| `lib/Makefile:6` | `$(eval …)` | kcov |"), "{md}");
    // The requirement is about kasan, which the construct cannot change: certain there.
    assert!(!row.contains("not certain"), "{row}");

    let text = ok(p, &["report", "--format", "text"]).stdout;
    assert!(text.contains(&format!("BROKEN: kasan (acknowledged: {B_WHY})")), "{text}");
    assert!(text.contains("Acknowledged findings"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("missing-source") && l.contains("lib/gone.o") && l.contains(GONE_WHY)),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("lib/Makefile:6") && l.contains("$(eval …)") && l.ends_with("kcov")),
        "{text}"
    );
    assert!(!text.contains('`') && !text.contains("**"), "plain text:\n{text}");

    let json: Value = serde_json::from_str(&ok(p, &["report", "--format", "json"]).stdout).unwrap();
    assert_eq!(json["requirements"][0]["acknowledged"], serde_json::json!([B_WHY]), "{json}");
    assert_eq!(json["requirements"][0]["certain"], true);
    assert_eq!(json["acknowledged"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(json["opaque"][0]["file"], "lib/Makefile");
    assert_eq!(json["opaque"][0]["line"], 6);
    assert_eq!(json["opaque"][0]["mechanisms"], serde_json::json!(["kcov"]));
}

/// A construct that may change the requirement's own mechanism makes its row not certain.
#[test]
fn report_marks_a_requirement_an_opaque_construct_may_change() {
    let t = tree();
    let p = t.path();
    let makefile = p.join("lib/Makefile");
    let text = fs::read_to_string(&makefile).unwrap().replace("KCOV_INSTRUMENT_b.o", "KASAN_SANITIZE_b.o");
    fs::write(&makefile, text).unwrap();
    let md = ok(p, &["report"]).stdout;
    let row = md.lines().find(|l| l.starts_with("| `lib/b.o` | kasan |")).unwrap_or_else(|| panic!("{md}"));
    assert!(row.contains("(not certain: lib/Makefile:6 has `$(eval …)`)"), "{row}");
    let json: Value = serde_json::from_str(&ok(p, &["report", "--format", "json"]).stdout).unwrap();
    assert_eq!(json["requirements"][0]["certain"], false, "{json}");
}
