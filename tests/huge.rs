//! Huge inputs: a policy of 100,000 units and kbuild files of 200,000 lines are read, checked
//! and written correctly. Timings are printed (`--nocapture`) but never asserted: a quadratic
//! step shows up as a CI run that does not finish, and `cargo xtask bench` is where speed is
//! measured.

mod fixture_tree;

use std::fs;
use std::time::Instant;

use fixture_tree::{Tree, V6_12};
use sanpolicy::emit;
use sanpolicy::generate;
use sanpolicy::kbuild::Rules;
use sanpolicy::makefile;
use sanpolicy::output;
use sanpolicy::policy;

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    eprintln!("{what}: {took:.2?}");
    out
}

const MECHANISMS: [&str; 8] = ["kasan", "kcsan", "kcov", "ubsan", "kmsan", "gcov", "objtool", "ftrace"];

#[test]
fn a_policy_of_100k_units_is_read_generated_and_checked() {
    const UNITS: usize = 100_000;
    const DIRS: usize = 1_000;
    let tree = Tree::new("mechanisms", V6_12);
    let mut text = String::with_capacity(UNITS * 100);
    for d in 0..DIRS {
        let dir = tree.join(&format!("drivers/d{d}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("Makefile"), format!("# SPDX-License-Identifier: GPL-2.0\nobj-y += o{d}.o\n")).unwrap();
    }
    // The block layout: this measures generated blocks at scale (the in-place reconciler is
    // measured on real trees in tests/round_trip.rs).
    text.push_str("layout = \"block\"\n\n");
    for i in 0..UNITS {
        // Some units share a reason and conditions with the one before: grouped in the block.
        let when = if i % 5 == 0 { "when = \"ifdef CONFIG_X\"\n" } else { "" };
        text.push_str(&format!(
            "[[unit]]\npath = \"drivers/d{}/o{i}.o\"\nskip = [\"{}\", \"{}\"]\n{when}why = \"Reason {}.\"\n\n",
            i % DIRS,
            MECHANISMS[i % 8],
            MECHANISMS[(i + 3) % 8],
            i / 3 % 97
        ));
    }
    tree.write("sanitizer-policy.toml", text.as_bytes());
    let (policy, diags) = timed("load 100k units", || policy::load(&tree.join("sanitizer-policy.toml")));
    assert!(!diags.has_errors(), "{:?}", diags.iter().next());
    assert_eq!(policy.units.len(), UNITS);
    let rules = Rules::from_tree(tree.path()).0;
    let plan = timed("plan 1000 directories", || generate::plan_tree(&policy, tree.path(), &rules, false, true));
    assert!(!plan.diags.has_errors(), "{:?}", plan.diags.iter().next());
    timed("write", || output::apply(&plan.changes).unwrap());
    let again = timed("plan again", || generate::plan_tree(&policy, tree.path(), &rules, false, true));
    assert!(again.changes.iter().all(|c| c.is_noop()), "a second generation changes files");
    let findings =
        timed("check", || sanpolicy::check::run(&policy, &rules, Some(tree.path()), &again, &Default::default()));
    // No object has a source in this tree: one finding per unit, nothing else.
    assert_eq!(findings.iter().filter(|d| d.is_error()).count(), UNITS, "{:?}", findings.iter().next());
    let d7 = tree.read("drivers/d7/Makefile");
    assert_eq!(d7.matches(" := n\n").count() + d7.matches(" += $(CC_FLAGS_FTRACE)\n").count(), 200, "{d7}");

    // Listed twice, half of it is refused, each duplicate located (the bad-input table has the
    // command line refusing a bad unit at the end of a 100k-unit policy).
    let (prefix, units) = text.split_at(text.find("[[unit]]").unwrap());
    let half = &units[..units.match_indices("[[unit]]").nth(UNITS / 2).unwrap().0];
    tree.write("sanitizer-policy.toml", format!("{prefix}{half}{half}").as_bytes());
    let (_, diags) =
        timed("load 100k units, half of them duplicates", || policy::load(&tree.join("sanitizer-policy.toml")));
    let duplicates: Vec<_> = diags.iter().filter(|d| d.code.as_str() == "duplicate-unit").collect();
    assert_eq!(duplicates.len(), UNITS / 2);
    assert_eq!(
        duplicates[0].location.as_ref().map(|l| l.line),
        Some(prefix.lines().count() + half.lines().count() + 2)
    );
}

/// The in-place layout at scale: 50,000 units in 100 directories become ordinary lines next to
/// their objects' `obj-` lines; a second generation changes nothing, and dropping every fifth
/// unit (by object) removes exactly its lines and comments. Reconciling a file once asked the whole file for every new
/// line (30 s for 100k units where the block layout took 1 s); it is linear now.
#[test]
fn a_policy_of_50k_units_lives_in_place() {
    const UNITS: usize = 50_000;
    const DIRS: usize = 100;
    let tree = Tree::new("mechanisms", V6_12);
    for d in 0..DIRS {
        let dir = tree.join(&format!("drivers/d{d}"));
        fs::create_dir_all(&dir).unwrap();
        let objects: String = (0..UNITS / DIRS).map(|k| format!("obj-y += o{}.o\n", k * DIRS + d)).collect();
        fs::write(dir.join("Makefile"), format!("# SPDX-License-Identifier: GPL-2.0\n{objects}")).unwrap();
    }
    let policy_text = |keep: &dyn Fn(usize) -> bool| {
        let mut text = String::from("builtin-requirements = false\n\n");
        for i in (0..UNITS).filter(|i| keep(*i)) {
            text.push_str(&format!(
                "[[unit]]\npath = \"drivers/d{}/o{i}.o\"\nskip = [\"{}\"]\nwhy = \"Reason {}.\"\n\n",
                i % DIRS,
                MECHANISMS[i % 3],
                i % 7
            ));
        }
        text
    };
    let generate = |text: &str| {
        tree.write("sanitizer-policy.toml", text.as_bytes());
        let (policy, diags) = policy::load(&tree.join("sanitizer-policy.toml"));
        assert!(!diags.has_errors(), "{:?}", diags.iter().next());
        let rules = Rules::from_tree(tree.path()).0;
        let plan = timed("plan in place", || generate::plan_tree(&policy, tree.path(), &rules, false, true));
        assert!(!plan.diags.has_errors(), "{:?}", plan.diags.iter().next());
        output::apply(&plan.changes).unwrap();
        let again = timed("plan again", || generate::plan_tree(&policy, tree.path(), &rules, false, true));
        assert!(again.changes.iter().all(|c| c.is_noop()), "a second generation changes files");
    };
    generate(&policy_text(&|_| true));
    let d7 = tree.read("drivers/d7/Makefile");
    let lines: Vec<&str> = d7.lines().collect();
    // The placement rule: the file has no directive, so the first line goes above its `obj-y`
    // list and the others join their mechanism's run there; nothing lands between list lines.
    let first = lines.iter().position(|l| l.starts_with("obj-y")).unwrap();
    assert!(lines[first..].iter().all(|l| l.starts_with("obj-y")), "{}", &d7[..600]);
    assert!(lines[..first].contains(&"KCOV_INSTRUMENT_o107.o := n"), "{}", &d7[..600]);
    assert!(lines[..first].contains(&"# Reason 2."), "{}", &d7[..600]);
    assert_eq!(d7.matches("_SANITIZE_").count() + d7.matches("KCOV_INSTRUMENT_").count(), UNITS / DIRS);

    generate(&policy_text(&|i| !(i / DIRS).is_multiple_of(5)));
    let d7 = tree.read("drivers/d7/Makefile");
    assert!(!d7.contains("_o7.o ") && !d7.contains("_o507.o ") && d7.contains("\nKCOV_INSTRUMENT_o107.o := n\n"));
    assert_eq!(d7.matches("_SANITIZE_").count() + d7.matches("KCOV_INSTRUMENT_").count(), UNITS / DIRS * 4 / 5);
}

/// Thousands of units in one directory: the effective snapshot evaluates each object against a
/// file of thousands of lines, so the file's lines and runs must be shared between its objects
/// (this took 50 s for 20k units before they were; now a fraction of a second).
#[test]
fn a_directory_of_20k_units_has_its_effective_snapshot() {
    const UNITS: usize = 20_000;
    let mut text = String::new();
    for i in 0..UNITS {
        let when = if i % 100 == 0 { "when = \"ifdef CONFIG_X\"\n" } else { "" };
        text.push_str(&format!(
            "[[unit]]\npath = \"lib/f{i}.o\"\nskip = [\"kasan\", \"kcov\"]\n{when}why = \"R{}.\"\n\n",
            i % 7
        ));
    }
    let (policy, diags) = policy::parse_str(std::path::Path::new("big.toml"), &text);
    assert!(!diags.has_errors(), "{:?}", diags.iter().next());
    let rules = Rules::builtin();
    let effective = timed("effective snapshot of 20k units in one directory", || {
        sanpolicy::generate::snapshot::compute(&policy, &rules)
    });
    let states: Vec<String> = effective.values().map(|e| e.state.label()).collect();
    assert_eq!(states.len(), 2 * UNITS);
    // kasan "on iff not CONFIG_X"; kcov also needs its `*_ALL` switch.
    let conditional = states
        .iter()
        .filter(|s| ["on iff not CONFIG_X", "on iff CONFIG_KCOV_INSTRUMENT_ALL and not CONFIG_X"].contains(&s.as_str()))
        .count();
    assert_eq!(conditional, 2 * UNITS / 100);
    assert_eq!(states.iter().filter(|s| s.as_str() == "off").count(), 2 * UNITS - conditional);
}

/// A kbuild file in the kernel's shapes, `rounds` × 10 lines.
fn kernel_shaped(rounds: usize) -> String {
    let mut text = String::from("# SPDX-License-Identifier: GPL-2.0\nobj-y := core.o report.o\n");
    for i in 0..rounds {
        text.push_str(&format!(
            "\n# Paragraph {i} explains\n# the lines below.\nifdef CONFIG_X{i}\nobj-$(CONFIG_Y{i}) += a{i}.o \\\n\tb{i}.o \\\n\tc{i}.o\nendif\nccflags-y += -DX{i}\nKASAN_SANITIZE_a{i}.o := n\n"
        ));
    }
    text
}

#[test]
fn huge_makefiles_are_read_and_written_in_bounded_time() {
    let cases = [
        ("200k lines in the kernel's shapes", kernel_shaped(20_000)),
        ("one line continued 100k times", format!("obj-y := a.o \\\n{}\tz.o\n", "\tb.o \\\n".repeat(100_000))),
        ("a comment paragraph of 100k lines over 1000 directives", {
            format!("{}{}", "# A long reason.\n".repeat(100_000), "KASAN_SANITIZE_x.o := n\n".repeat(1_000))
        }),
        ("conditionals nested 2000 deep", {
            let mut t = String::new();
            for i in 0..2_000 {
                t.push_str(&format!("ifdef CONFIG_{i}\nKCOV_INSTRUMENT_{i}.o := n\n"));
            }
            t.push_str(&"endif\n".repeat(2_000));
            t
        }),
        ("a 10 MB line", format!("obj-y := {}\n", "a.o ".repeat(2_500_000))),
    ];
    let rules = Rules::builtin();
    let (policy, diags) = policy::parse_str(
        std::path::Path::new("p.toml"),
        "[[unit]]\npath = \"mm/runtime/\"\nskip = [\"kasan\"]\nwhy = \"Huge file.\"\n",
    );
    assert!(!diags.has_errors());
    let units: Vec<_> = policy.units.iter().collect();
    let block = emit::render_block(&units, &rules);
    for (name, text) in cases {
        let parsed = timed(&format!("{name}: read"), || makefile::parse(&text));
        let new = timed(&format!("{name}: splice"), || emit::splice(&text, &parsed, &block, false).unwrap());
        assert!(new.starts_with(&text), "{name}: bytes lost");
        let reparsed = timed(&format!("{name}: reread"), || makefile::parse(&new));
        assert_eq!(reparsed.block.map(|b| b.body.len()), makefile::parse(&block).block.map(|b| b.body.len()));
        // Through the command line: generation, then a clean drift check, in a tree.
        let tree = Tree::new("mechanisms", V6_12);
        tree.write("mm/runtime/Makefile", text.as_bytes());
        let run = timed(&format!("{name}: gen-makefiles"), || tree.run(&["gen-makefiles"]));
        assert_eq!(run.code, 0, "{name}: {}", run.both());
        assert!(tree.read("mm/runtime/Makefile").starts_with(&text), "{name}: bytes lost");
        // One verdict: the file's own directive lines are not the policy's, so they are drift.
        let check = timed(&format!("{name}: gen-makefiles --check"), || tree.run(&["gen-makefiles", "--check"]));
        let hand = makefile::parse(&text).directives().count();
        let shown = check.both();
        let head = &shown[..shown.len().min(2000)];
        assert_eq!(check.code, if hand == 0 { 0 } else { 1 }, "{name}: {head}");
        let other = shown.lines().filter(|l| l.starts_with("error[")).filter(|l| {
            !l.starts_with("error[unmanaged-directive]")
                && !l.starts_with("error[conflicting-directive]")
                && !l.starts_with("error[unrepresentable]")
        });
        assert_eq!(other.count(), 0, "{name}: only drift about the file's own lines: {head}");
    }
}
