//! Conditions in canonical form (`makefile::Condition::key`), judged by GNU make: every
//! spelling of a family of conditions on `CONFIG_FOO` is generated (paren and quoted forms,
//! operands swapped, blanks moved, `${}` for `$()`, `ifdef` for `ifneq (…,)`), and for every
//! pair the key calls equal, make must evaluate both alike with `CONFIG_FOO` set to `y`, `m`,
//! empty, and undefined. Every pair is tried, not a sample: the set is small enough.

mod fixture_tree;
mod make_judge;

use std::collections::BTreeMap;
use std::fs;

use sanpolicy::makefile::{CondKey, Condition};

/// `CONFIG_FOO` as the makefile sets it, before the conditions: `y`, `m`, empty, undefined.
const VALUES: [(&str, &str); 4] =
    [("y", "CONFIG_FOO = y\n"), ("m", "CONFIG_FOO = m\n"), ("empty", "CONFIG_FOO =\n"), ("undefined", "")];

/// Every spelling of `ifeq`/`ifneq` over the operand pair `(x, z)`.
fn compare_spellings(x: &str, z: &str, out: &mut Vec<String>) {
    for keyword in ["ifeq", "ifneq"] {
        for form in [
            format!("({x},{z})"),
            format!("({x}, {z})"),
            format!("({x} ,  {z})"),
            format!("({z},{x})"),
            format!("( {x},{z})"),
            format!("({x},{z} )"),
            format!("\"{x}\" \"{z}\""),
            format!("'{x}' '{z}'"),
            format!("\"{x}\" '{z}'"),
            format!("'{z}'  \"{x}\""),
            format!("\"{x} \" \"{z}\""),
            format!("\"{x}\"\t\"{z}\""),
        ] {
            out.push(format!("{keyword} {form}"));
        }
    }
}

fn spellings() -> Vec<String> {
    let mut out = Vec::new();
    for x in ["$(CONFIG_FOO)", "${CONFIG_FOO}"] {
        for z in ["y", "m", "", "n"] {
            compare_spellings(x, z, &mut out);
        }
        compare_spellings(&format!("{x}y"), "yy", &mut out);
    }
    // `ALIAS = $(CONFIG_FOO)` is defined (its unexpanded value is not empty) even when
    // `CONFIG_FOO` is empty: `ifdef ALIAS` is not `ifneq ($(ALIAS),)`.
    compare_spellings("$(ALIAS)", "", &mut out);
    for keyword in ["ifdef", "ifndef"] {
        for name in ["CONFIG_FOO", "ALIAS"] {
            out.push(format!("{keyword} {name}"));
            out.push(format!("{keyword}  {name}"));
        }
    }
    out
}

/// Whether each condition holds, by GNU make, under each of [`VALUES`].
fn judged_by_make(conditions: &[String]) -> Vec<[bool; 4]> {
    let dir = tempfile::tempdir().unwrap();
    let mut results = vec![[false; 4]; conditions.len()];
    for (v, (name, setting)) in VALUES.iter().enumerate() {
        let mut makefile = format!("{setting}ALIAS = $(CONFIG_FOO)\n");
        for (i, c) in conditions.iter().enumerate() {
            makefile.push_str(&format!("{c}\n$(info {i} 1)\nelse\n$(info {i} 0)\nendif\n"));
        }
        makefile.push_str("all: ;\n");
        let file = format!("{name}.mk");
        fs::write(dir.path().join(&file), makefile).unwrap();
        let stdout = make_judge::make(dir.path(), &["-f", &file]);
        let mut seen = 0;
        for line in stdout.lines() {
            let (i, holds) = line.split_once(' ').unwrap();
            results[i.parse::<usize>().unwrap()][v] = holds == "1";
            seen += 1;
        }
        assert_eq!(seen, conditions.len(), "make evaluated every condition once:\n{stdout}");
    }
    results
}

fn key(line: &str) -> CondKey {
    Condition::parse(line).unwrap_or_else(|e| panic!("`{line}`: {e}")).key()
}

#[test]
fn conditions_the_key_calls_equal_make_evaluates_alike() {
    let conditions = spellings();
    let results = judged_by_make(&conditions);
    let mut classes: BTreeMap<CondKey, Vec<usize>> = BTreeMap::new();
    for (i, c) in conditions.iter().enumerate() {
        classes.entry(key(c)).or_default().push(i);
    }
    let mut wrong = Vec::new();
    let mut equal_pairs = 0;
    for members in classes.values() {
        for (n, &a) in members.iter().enumerate() {
            for &b in &members[n + 1..] {
                equal_pairs += 1;
                if results[a] != results[b] {
                    wrong.push(format!(
                        "`{}` {:?} and `{}` {:?} (y, m, empty, undefined)",
                        conditions[a], results[a], conditions[b], results[b]
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "the key calls these equal, make does not:\n{}", wrong.join("\n"));
    assert!(equal_pairs > 500, "too few pairs called equal to prove anything: {equal_pairs}");
}

/// The spellings issue 18 names are one condition.
#[test]
fn named_spellings_are_one_condition() {
    let same = [
        ["ifeq ($(CONFIG_FOO),y)", "ifeq \"$(CONFIG_FOO)\" \"y\""],
        ["ifeq ($(CONFIG_FOO),y)", "ifeq '$(CONFIG_FOO)' 'y'"],
        ["ifeq ($(CONFIG_FOO),y)", "ifeq (y, ${CONFIG_FOO})"],
        ["ifneq ($(CONFIG_FOO),)", "ifdef CONFIG_FOO"],
        ["ifeq ($(CONFIG_FOO),)", "ifndef CONFIG_FOO"],
    ];
    for [a, b] in same {
        assert_eq!(key(a), key(b), "`{a}` and `{b}`");
    }
    let different = [
        ["ifeq ($(CONFIG_FOO),y)", "ifneq ($(CONFIG_FOO),y)"],
        ["ifeq ($(CONFIG_FOO),y)", "ifeq ( $(CONFIG_FOO),y)"],
        ["ifdef ALIAS", "ifneq ($(ALIAS),)"],
    ];
    for [a, b] in different {
        assert_ne!(key(a), key(b), "`{a}` and `{b}`");
    }
}

/// The commands match a tree's line and a unit by these keys, not by their texts: a tree line
/// spelled one way and the unit's `when` another (pairs make evaluates alike, above) are in sync
/// for `check` and `--check`, `sync` takes nothing and `gen-makefiles --force` adds no second
/// line; a condition make evaluates differently (`ifdef` is true for `m` too) is drift.
#[test]
fn lines_and_units_are_matched_by_key_in_every_command() {
    let pairs = [
        ("ifeq ($(CONFIG_FOO),y)", "ifeq (y,$(CONFIG_FOO))"),
        ("ifeq \"$(CONFIG_FOO)\" \"y\"", "ifeq ($(CONFIG_FOO),y)"),
        ("ifneq (${CONFIG_FOO},)", "ifdef CONFIG_FOO"),
        ("ifeq ($(CONFIG_FOO),)", "ifndef CONFIG_FOO"),
    ];
    for layout in ["in-place", "block"] {
        for (line, when) in pairs {
            let makefile = format!("obj-y := a.o b.o\n\n{line}\n# A reason.\nKASAN_SANITIZE_a.o := n\nendif\n");
            let t = fixture_tree::rules_tree("sanpolicy-condkey-", &makefile);
            let p = t.path();
            fixture_tree::ok(p, &["import", "--adopt", "--layout", layout]);
            let policy = fixture_tree::read(p, "sanitizer-policy.toml");
            let at = policy.find("when = ").expect("the unit is conditional");
            let end = at + policy[at..].find('\n').unwrap();
            fs::write(p.join("sanitizer-policy.toml"), format!("{}when = '{when}'{}", &policy[..at], &policy[end..]))
                .unwrap();
            let what = format!("{layout}: tree `{line}`, policy `{when}`");
            if layout == "block" {
                // The block is the policy's text: a respelled `when` is written into it once.
                fixture_tree::ok(p, &["gen-makefiles"]);
            }
            fixture_tree::all_green(p, &what);
            let makefile = fixture_tree::read(p, "lib/Makefile");
            assert_eq!(makefile.matches("KASAN_SANITIZE_a.o").count(), 1, "{what}: {makefile}");
            let before = fixture_tree::Fingerprint::of(p);
            fixture_tree::ok(p, &["gen-makefiles", "--force"]);
            fixture_tree::ok(p, &["sync"]);
            fixture_tree::assert_unchanged(&before, &fixture_tree::Fingerprint::of(p), &what);
        }
    }
    // Not one condition: `ifdef CONFIG_FOO` holds for `m`, `ifeq ($(CONFIG_FOO),y)` does not.
    let makefile = "obj-y := a.o b.o\n\nifeq ($(CONFIG_FOO),y)\n# A reason.\nKASAN_SANITIZE_a.o := n\nendif\n";
    let t = fixture_tree::rules_tree("sanpolicy-condkey-", makefile);
    let p = t.path();
    fixture_tree::ok(p, &["import", "--adopt"]);
    let policy = fixture_tree::read(p, "sanitizer-policy.toml")
        .replace("when = \"ifeq ($(CONFIG_FOO),y)\"", "when = \"ifdef CONFIG_FOO\"");
    fs::write(p.join("sanitizer-policy.toml"), policy).unwrap();
    let check = fixture_tree::run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
}
