//! The Rust model of Kbuild's instrumentation decisions against GNU make itself, case by case.
//!
//! For every generated kbuild file and configuration, make includes the file exactly as
//! `scripts/Makefile.build` does and evaluates, for each object, the decision expression that
//! `Rules` extracted from the tree's own `scripts/Makefile.lib` / `Makefile.build` (6.1, 6.12 and
//! the built-in rules), with `$@` set to the object's real target path. The Rust side runs the
//! same file through `Env` and asks `evaluate`. Every answer must agree.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use sanpolicy::kbuild::{evaluate, DecisionKind, Env, Evaluate, Naming, Rules};
use sanpolicy::makefile;
use sanpolicy::mechanism::{Form, MechId, MECHANISMS};

/// What `CC_FLAGS_FTRACE` expands to in both worlds.
const CC_FLAGS_FTRACE: &str = "-pg -mrecord-mcount";

/// Objects evaluated in every case, relative to the kbuild directory. `head$(BITS).o` names
/// `head64.o` only when `BITS` is 64.
const OBJECTS: &[&str] = &["foo.o", "sub/foo.o", "bar.o", "head64.o", "x.nvhe.o"];

/// Stems that generated lines name (`$(BITS)` is 32 or 64).
const STEMS: &[&str] = &["foo", "sub/foo", "bar", "head$(BITS)", "head64", "x.nvhe"];

/// Values, including the odd ones: trailing blank, inline comment, several words, references.
const VALUES: &[&str] = &["n", "no", "nope", "N", "0", "y", "yes", "n y", "n ", "n # comment", "Y", "", "$(CONFIG_A)"];

/// Every `CONFIG_` the generated files or the defaults read.
const CONFIGS: &[&str] = &[
    "CONFIG_A",
    "CONFIG_B",
    "CONFIG_KCOV_INSTRUMENT_ALL",
    "CONFIG_GCOV_PROFILE_ALL",
    "CONFIG_UBSAN_SANITIZE_ALL",
    "CONFIG_FUNCTION_TRACER",
];

/// Conditionals as kbuild files write them (and a few odd spellings make still accepts).
const CONDITIONS: &[&str] = &[
    "ifdef CONFIG_A",
    "ifndef CONFIG_B",
    "ifdef CONFIG_FUNCTION_TRACER",
    "ifdef CONFIG_B # reason",
    "ifeq ($(CONFIG_A)$(CONFIG_B),yy)",
    "ifeq ($(CONFIG_A),y)",
    "ifneq ($(CONFIG_B),y)",
    "ifeq ($(CONFIG_A), y)",
    "ifeq ($(CONFIG_A),y )",
    "ifeq ( $(CONFIG_A),y)",
    "ifeq \"$(CONFIG_B)\" \"y\"",
    "ifneq '$(CONFIG_A)' ''",
    "ifeq ($(CONFIG_A)_$(CONFIG_B),y_)",
    "ifeq ($(CONFIG_A)_$(call clang-min-version, 180000),y_)",
    "ifeq ($(BITS),64)",
    "ifdef CONFIG_KCOV_INSTRUMENT_ALL",
];

/// ftrace lines: per-object removal (whole `CC_FLAGS_FTRACE` or `-pg` only), directory removal,
/// re-adding, and lines that touch other flags only.
const FTRACE_FORMS: &[&str] = &[
    "CFLAGS_REMOVE_foo.o = $(CC_FLAGS_FTRACE)",
    "CFLAGS_REMOVE_sub/foo.o = -pg",
    "ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)",
    "CFLAGS_foo.o += $(CC_FLAGS_FTRACE)",
    "CFLAGS_bar.o += -pg",
    "CFLAGS_REMOVE_bar.o += -mrecord-mcount",
    "ccflags-remove-y += -pg",
    "CFLAGS_REMOVE_head$(BITS).o := $(CC_FLAGS_FTRACE)",
];

/// One kbuild file under one configuration: one make run.
struct Scenario {
    text: String,
    /// The `CONFIG_` options set to a value (absent ones are unset, as in `auto.conf`).
    config: Vec<(&'static str, &'static str)>,
    bits: &'static str,
}

impl Scenario {
    fn presets(&self) -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> = self.config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        p.push(("BITS".into(), self.bits.into()));
        p.push(("CC_FLAGS_FTRACE".into(), CC_FLAGS_FTRACE.into()));
        p
    }

    fn describe(&self) -> String {
        let config: Vec<String> = self.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("config: [{}] BITS={}\n--- kbuild file ---\n{}--- end ---", config.join(" "), self.bits, self.text)
    }
}

/// SplitMix64: a fixed, dependency-free generator so every run sees the same cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

fn variable_names() -> Vec<&'static str> {
    MECHANISMS
        .iter()
        .filter_map(|m| match m.form {
            Form::Variable { var, .. } => Some(var),
            Form::FlagRemoval { .. } => None,
        })
        .collect()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules")
}

/// The rules of both fixture trees, read from their own `scripts/`, and the built-in rules.
fn rule_sets() -> Vec<(&'static str, Rules)> {
    let mut sets = Vec::new();
    for tree in ["linux-6.1", "linux-6.12"] {
        let (rules, diags) = Rules::from_tree(&fixtures().join(tree));
        assert!(diags.is_empty(), "{tree}: {:?}", diags.iter().map(|d| d.one_line()).collect::<Vec<_>>());
        sets.push((tree, rules));
    }
    sets.push(("builtin", Rules::builtin()));
    sets
}

/// The make text that prints `on`/`off` for one decision, built from the extracted expression.
fn make_expression(rules: &Rules, id: MechId) -> Option<String> {
    let d = rules.decision(id)?;
    Some(match &d.kind {
        DecisionKind::Chain { gated: false, .. } => format!("$(if {},on,off)", d.expression),
        // 6.12 `is-standard-object = $(if $(filter-out y%, …),$(is-kernel-object))`.
        DecisionKind::Chain { gated: true, .. } => {
            format!("$(if $(if {},$(is-kernel-object)),on,off)", d.expression)
        }
        DecisionKind::Flags => {
            let Form::FlagRemoval { marker_words, .. } = id.get().form else {
                unreachable!("flags for a variable mechanism")
            };
            format!("$(if $(filter {},{}),on,off)", marker_words.join(" "), d.expression)
        }
    })
}

/// A line from a fixture file, verbatim, starting with `prefix`.
fn fixture_line(file: &str, prefix: &str) -> String {
    let text = std::fs::read_to_string(fixtures().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("{file} has no line starting with {prefix:?}"))
        .to_string()
}

const BASETARGET: &str = "basetarget = $(basename $(notdir $@))";
const TARGET_STEM: &str = "target-stem = $(basename $(patsubst $(obj)/%,%,$@))";

/// What make is asked for every case: each distinct decision expression of the rule sets
/// (6.12 and the built-in rules extract the same text; make evaluates it once per target).
struct Probe {
    expressions: Vec<String>,
    /// (rules set, mechanism) -> index into `expressions`.
    index: HashMap<(usize, usize), usize>,
    /// The driver text after the kbuild file: the naming helper of `Makefile.lib`, then one
    /// phony target per (object, is-kernel-object) sharing one recipe that prints every
    /// expression with `$(info)` (no shell is started). `$@` is the object's real target path.
    tail: String,
}

impl Probe {
    fn new(sets: &[(&str, Rules)]) -> Probe {
        let mut expressions: Vec<String> = Vec::new();
        let mut index = HashMap::new();
        for (r, (_, rules)) in sets.iter().enumerate() {
            for id in MechId::all() {
                if let Some(e) = make_expression(rules, id) {
                    let i = expressions.iter().position(|x| *x == e).unwrap_or_else(|| {
                        expressions.push(e);
                        expressions.len() - 1
                    });
                    index.insert((r, id.0), i);
                }
            }
        }
        let mut t = format!("{TARGET_STEM}\n");
        let mut targets = Vec::new();
        for (o, object) in OBJECTS.iter().enumerate() {
            for (dir, ko) in [("objdir1", "y"), ("objdir0", "")] {
                let target = format!("{dir}/{object}");
                let k = u8::from(!ko.is_empty());
                let _ = writeln!(t, "{target}: obj := {dir}\n{target}: is-kernel-object := {ko}\n{target}: __o := {o}\n{target}: __k := {k}");
                targets.push(target);
            }
        }
        let _ = writeln!(t, "{}:", targets.join(" "));
        for (e, expression) in expressions.iter().enumerate() {
            let _ = writeln!(t, "\t@$(info R $(__o) $(__k) {e} {expression})");
        }
        let _ = writeln!(t, ".PHONY: all {}", targets.join(" "));
        let _ = writeln!(t, "all: {}", targets.join(" "));
        Probe { expressions, index, tail: t }
    }
}

fn answers_per_run(probe: &Probe) -> usize {
    OBJECTS.len() * 2 * probe.expressions.len()
}

fn driver(s: &Scenario, case_file: &str, tail: &str) -> String {
    let mut d = String::from(".DEFAULT_GOAL := all\n");
    for (k, v) in s.presets() {
        let _ = writeln!(d, "{k} := {v}");
    }
    d.push_str("KBUILD_CPPFLAGS :=\nKBUILD_CFLAGS := $(CC_FLAGS_FTRACE)\n");
    d.push_str(BASETARGET);
    d.push('\n');
    let _ = writeln!(d, "include {case_file}");
    d.push_str(tail);
    d
}

fn make_command(dir: &Path) -> Command {
    let mut c = Command::new("make");
    c.args(["-s", "-r", "-R", "--no-print-directory"])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    c
}

/// (object, kernel object, expression) -> on, as make printed it.
type Answers = HashMap<(usize, bool, usize), bool>;

fn run_make(dir: &Path, driver_file: &str) -> Result<Answers, String> {
    let out = make_command(dir).args(["-f", driver_file]).output().map_err(|e| format!("cannot run make: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !stderr.trim().is_empty() {
        return Err(format!("make failed ({}): {stderr}", out.status));
    }
    let mut answers = Answers::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [_, o, k, e, v] = f.as_slice() else {
            return Err(format!("unexpected make output line {line:?}"));
        };
        let on = match *v {
            "on" => true,
            "off" => false,
            _ => return Err(format!("unexpected make output line {line:?}")),
        };
        let key = (o.parse().unwrap(), *k == "1", e.parse().unwrap());
        if answers.insert(key, on).is_some() {
            return Err(format!("duplicate make output {line:?}"));
        }
    }
    Ok(answers)
}

// ---------------------------------------------------------------------------------------------
// Case generation

fn config_from_bits(bits: usize) -> Vec<(&'static str, &'static str)> {
    CONFIGS.iter().enumerate().filter(|(i, _)| (bits >> i) & 1 == 1).map(|(_, c)| (*c, "y")).collect()
}

/// Every (per-object value, directory value) pair for every variable, with the operators
/// rotating, all variables set at once (they do not interact, except that signed-wrap also reads
/// UBSAN's values), with every configuration switch off and then on. Every subset of the ftrace
/// forms rides along (their variables are distinct), under both `CONFIG_FUNCTION_TRACER` values
/// for half of the subsets.
fn grid_scenarios() -> Vec<Scenario> {
    let vars = variable_names();
    let n = VALUES.len() + 1; // "no line" plus every value
    let ops = [":=", "=", "+="];
    let subsets = 1usize << FTRACE_FORMS.len();
    let mut out = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    for j in 0..n * n {
        for (v, bits) in [0b000000, 0b111111].into_iter().enumerate() {
            let mut text = String::new();
            for (i, var) in vars.iter().enumerate() {
                let p = (j + 17 * i) % (n * n);
                let (obj, dir) = (p / n, p % n);
                let op = ops[(j + i + v) % ops.len()];
                if dir > 0 {
                    let _ = writeln!(text, "{var} {op} {}", VALUES[dir - 1]);
                }
                if obj > 0 {
                    let _ = writeln!(text, "{var}_foo.o {op} {}", VALUES[obj - 1]);
                }
            }
            let subset = (j + subsets / 2 * v) % subsets;
            covered.insert(subset);
            for (_, line) in FTRACE_FORMS.iter().enumerate().filter(|(k, _)| (subset >> k) & 1 == 1) {
                let _ = writeln!(text, "{line}");
            }
            out.push(Scenario {
                text,
                config: config_from_bits(bits),
                bits: if (j + v) % 2 == 0 { "64" } else { "32" },
            });
        }
    }
    assert_eq!(covered.len(), subsets, "every ftrace subset is generated");
    out
}

fn random_line(rng: &mut Rng, vars: &[&str], text: &mut String, late: &mut bool) {
    let ops = [":=", ":=", "=", "+=", "?="];
    let op = *rng.pick(&ops);
    let stem = *rng.pick(STEMS);
    if rng.below(100) < 15 {
        let value = *rng.pick(&["$(CC_FLAGS_FTRACE)", "-pg", "-mrecord-mcount", "-fno-stack-protector"]);
        let line = match rng.below(4) {
            0 => format!("CFLAGS_REMOVE_{stem}.o {op} {value}"),
            1 => format!("CFLAGS_{stem}.o {op} {value}"),
            2 => "ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)".to_string(),
            _ => format!("ccflags-remove-y += {value}"),
        };
        let _ = writeln!(text, "{line}");
        return;
    }
    let var = *rng.pick(vars);
    let name = if rng.below(10) < 6 { format!("{var}_{stem}.o") } else { var.to_string() };
    let value = match rng.below(VALUES.len() + 2) {
        i if i < VALUES.len() => VALUES[i].to_string(),
        i if i == VALUES.len() => {
            *late = true;
            "$(LATE)".to_string()
        }
        _ => "$(if $(CONFIG_B),n,y)".to_string(),
    };
    let spacing = match rng.below(4) {
        0 => op.to_string(),
        1 => format!("\t\t{op} "),
        2 => format!(" {op}"),
        _ => format!(" {op} "),
    };
    let _ = writeln!(text, "{name}{spacing}{value}");
}

fn random_block(rng: &mut Rng, vars: &[&str], depth: usize, text: &mut String, late: &mut bool) {
    for _ in 0..1 + rng.below(4) {
        if depth < 2 && rng.below(10) < 3 {
            let _ = writeln!(text, "{}", rng.pick(CONDITIONS));
            random_block(rng, vars, depth + 1, text, late);
            match rng.below(4) {
                0 => {
                    text.push_str(if rng.below(2) == 0 { "else\n" } else { "else # otherwise\n" });
                    random_block(rng, vars, depth + 1, text, late);
                }
                1 => {
                    let _ = writeln!(text, "else {}", rng.pick(CONDITIONS));
                    random_block(rng, vars, depth + 1, text, late);
                    if rng.below(2) == 0 {
                        text.push_str("else\n");
                        random_block(rng, vars, depth + 1, text, late);
                    }
                }
                _ => {}
            }
            text.push_str(if rng.below(3) == 0 { "endif # CONFIG_A\n" } else { "endif\n" });
        } else {
            random_line(rng, vars, text, late);
        }
    }
}

/// Random files: several mechanisms at once, repeated and appended assignments, nested
/// conditionals with `else` branches, forward references, under random configurations.
fn random_scenarios(count: usize) -> Vec<Scenario> {
    let vars = variable_names();
    let mut rng = Rng(0x5a11_b01c_u64);
    let mut out = Vec::new();
    for _ in 0..count {
        let mut text = String::new();
        let mut late = false;
        random_block(&mut rng, &vars, 0, &mut text, &mut late);
        if late {
            let late_line = *rng.pick(&["LATE := n", "LATE := y", "LATE = $(CONFIG_A)", "LATE := n "]);
            text = if rng.below(4) == 0 { format!("{late_line}\n{text}") } else { format!("{text}{late_line}\n") };
        }
        let mut config: Vec<(&str, &str)> = Vec::new();
        for c in CONFIGS {
            match rng.below(if *c == "CONFIG_A" { 3 } else { 2 }) {
                0 => {}
                1 => config.push((c, "y")),
                _ => config.push((c, "m")),
            }
        }
        out.push(Scenario { text, config, bits: if rng.below(2) == 0 { "32" } else { "64" } });
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Comparison

struct Mismatch {
    scenario: usize,
    rules: &'static str,
    mechanism: &'static str,
    object: &'static str,
    kernel_object: bool,
    make: Option<bool>,
    rust: Option<bool>,
    words: String,
}

#[derive(Default)]
struct Outcome {
    compared: usize,
    mismatches: Vec<Mismatch>,
    failures: Vec<String>,
    /// (rules set, mechanism) -> [off count, on count], from make's answers.
    seen: HashMap<(usize, usize), [usize; 2]>,
    /// make answers for `sub/foo.o` that differ between the 6.1 and 6.12 rules.
    naming_differences: usize,
}

fn compare(
    index: usize,
    s: &Scenario,
    answers: &Answers,
    probe: &Probe,
    sets: &[(&'static str, Rules)],
    out: &mut Outcome,
) {
    let mut env = Env::with(s.presets());
    env.run(&makefile::parse(&s.text), &mut Evaluate);
    for (r, (name, rules)) in sets.iter().enumerate() {
        for id in MechId::all() {
            for (o, object) in OBJECTS.iter().enumerate() {
                for ko in [true, false] {
                    let rust = evaluate(rules, id, object, &env, ko);
                    let make = probe.index.get(&(r, id.0)).and_then(|e| answers.get(&(o, ko, *e))).copied();
                    if rust.is_none() && make.is_none() {
                        continue;
                    }
                    out.compared += 1;
                    if let Some(m) = make {
                        out.seen.entry((r, id.0)).or_default()[usize::from(m)] += 1;
                    }
                    if make != rust.as_ref().map(|e| e.on) {
                        out.mismatches.push(Mismatch {
                            scenario: index,
                            rules: name,
                            mechanism: id.get().name,
                            object,
                            kernel_object: ko,
                            make,
                            rust: rust.as_ref().map(|e| e.on),
                            words: rust.map(|e| e.words).unwrap_or_default(),
                        });
                    }
                }
            }
        }
    }
    let sub = OBJECTS.iter().position(|o| *o == "sub/foo.o").unwrap();
    for id in MechId::all() {
        for ko in [true, false] {
            let make = |r: usize| probe.index.get(&(r, id.0)).and_then(|e| answers.get(&(sub, ko, *e)));
            if let (Some(a), Some(b)) = (make(0), make(1)) {
                out.naming_differences += usize::from(a != b);
            }
        }
    }
}

#[test]
fn rust_model_agrees_with_make_case_by_case() {
    let started = Instant::now();
    let sets = rule_sets();

    // The rules really come from each tree: 6.1 names objects by `$(basetarget)` and defaults
    // to `y`; 6.12 (and the built-in copy) by `$(target-stem)` and `$(is-kernel-object)`.
    let kasan = MechId::by_name("kasan").unwrap();
    let signed_wrap = MechId::by_name("ubsan-signed-wrap").unwrap();
    for (name, rules) in &sets {
        for (id, d) in &rules.decisions {
            if matches!(d.kind, DecisionKind::Chain { .. }) {
                let (naming, helper) = if *name == "linux-6.1" {
                    (Naming::Basetarget, "$(basetarget)")
                } else {
                    (Naming::TargetStem, "$(target-stem)")
                };
                assert_eq!(d.naming, naming, "{name} {id}");
                assert!(d.expression.contains(helper), "{name} {id}: {}", d.expression);
            }
        }
    }
    assert!(sets[0].1.decision(kasan).unwrap().expression.ends_with("$(KASAN_SANITIZE)y)"));
    assert!(sets[1].1.decision(kasan).unwrap().expression.ends_with("$(KASAN_SANITIZE)$(is-kernel-object))"));
    assert!(sets[0].1.decision(signed_wrap).is_none(), "6.1 has no UBSAN_SIGNED_WRAP");
    assert_eq!(sets[1].1.decisions.len(), MECHANISMS.len());
    assert_eq!(sets[2].1.decisions.len(), MECHANISMS.len());
    for (id, d) in &sets[2].1.decisions {
        let tree = sets[1].1.decision(*id).unwrap();
        assert_eq!(
            (&d.naming, &d.kind, &d.expression),
            (&tree.naming, &tree.kind, &tree.expression),
            "built-in {id} differs from 6.12"
        );
    }
    // The naming helpers the driver defines are the kernel's own lines.
    assert_eq!(fixture_line("linux-6.1/scripts/Kbuild.include", "basetarget ="), BASETARGET);
    assert_eq!(fixture_line("linux-6.12/scripts/Kbuild.include", "basetarget ="), BASETARGET);
    assert_eq!(fixture_line("linux-6.1/scripts/Makefile.lib", "target-stem ="), TARGET_STEM);
    assert_eq!(fixture_line("linux-6.12/scripts/Makefile.lib", "target-stem ="), TARGET_STEM);

    let mut scenarios = grid_scenarios();
    scenarios.extend(random_scenarios(1400));

    let tmp = tempfile::tempdir().unwrap();
    let probe = Probe::new(&sets);
    assert_eq!(probe.index.len(), sets.iter().map(|(_, r)| r.decisions.len()).sum::<usize>());
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8);
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Outcome::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(s) = scenarios.get(i) else { break };
                        let (case_file, driver_file) = (format!("case{i}.mk"), format!("driver{i}.mk"));
                        std::fs::write(tmp.path().join(&case_file), &s.text).unwrap();
                        std::fs::write(tmp.path().join(&driver_file), driver(s, &case_file, &probe.tail)).unwrap();
                        match run_make(tmp.path(), &driver_file) {
                            Ok(answers) if answers.len() != answers_per_run(&probe) => out.failures.push(format!(
                                "scenario {i}: make printed {} answers\n{}",
                                answers.len(),
                                s.describe()
                            )),
                            Ok(answers) => compare(i, s, &answers, &probe, &sets, &mut out),
                            Err(e) => out.failures.push(format!("scenario {i}: {e}\n{}", s.describe())),
                        }
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let mut total = Outcome::default();
    for o in outcomes {
        total.compared += o.compared;
        total.mismatches.extend(o.mismatches);
        total.failures.extend(o.failures);
        total.naming_differences += o.naming_differences;
        for (k, [off, on]) in o.seen {
            let e = total.seen.entry(k).or_default();
            e[0] += off;
            e[1] += on;
        }
    }
    assert!(total.failures.is_empty(), "make did not run cleanly:\n{}", total.failures.join("\n\n"));

    println!(
        "compared {} decisions from {} kbuild files x configurations against GNU make in {:.1?}",
        total.compared,
        scenarios.len(),
        started.elapsed()
    );
    for (r, (name, _)) in sets.iter().enumerate() {
        for id in MechId::all() {
            if let Some([off, on]) = total.seen.get(&(r, id.0)) {
                println!("  {name:<10} {:<18} on {on:>6}  off {off:>6}", id.get().name);
            }
        }
    }

    if !total.mismatches.is_empty() {
        total.mismatches.sort_by_key(|m| m.scenario);
        let mut report = format!("{} of {} decisions disagree with make\n", total.mismatches.len(), total.compared);
        let mut shown = std::collections::BTreeSet::new();
        for m in &total.mismatches {
            let _ = writeln!(
                report,
                "scenario {}: rules {} mechanism {} object {} is-kernel-object {}: make {:?}, rust {:?} (rust words {:?})",
                m.scenario,
                m.rules,
                m.mechanism,
                m.object,
                if m.kernel_object { "y" } else { "(empty)" },
                m.make,
                m.rust,
                m.words
            );
            if shown.len() < 25 && shown.insert(m.scenario) {
                let _ = writeln!(report, "{}", scenarios[m.scenario].describe());
            }
        }
        panic!("{report}");
    }

    assert!(scenarios.len() >= 1700, "{} scenarios", scenarios.len());
    assert!(total.compared >= 400_000, "only {} decisions compared", total.compared);
    for (r, (name, rules)) in sets.iter().enumerate() {
        for id in rules.decisions.keys() {
            let [off, on] = total.seen.get(&(r, id.0)).copied().unwrap_or_default();
            assert!(on > 100 && off > 100, "{name} {id}: on {on}, off {off}: both outcomes must occur");
        }
    }
    assert!(total.naming_differences > 100, "6.1 and 6.12 naming must give different answers for sub/foo.o");
}

// ---------------------------------------------------------------------------------------------
// Which file of a directory is read, and directory scope

#[test]
fn kbuild_shadows_makefile_like_make() {
    // 6.12 `scripts/Kbuild.include` and 6.1 `scripts/Makefile.build`, verbatim.
    let kbuild_file_612 = fixture_line("linux-6.12/scripts/Kbuild.include", "kbuild-file =");
    let include_61 = fixture_line("linux-6.1/scripts/Makefile.build", "include $(or $(wildcard $(kbuild-dir)/Kbuild)");
    let expr_61 = include_61.strip_prefix("include ").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let driver = format!(
        "{kbuild_file_612}\nkbuild-dir := $(src)\n$(info 6.12 $(kbuild-file))\n$(info 6.1 {expr_61})\nall: ;\n.PHONY: all\n"
    );
    std::fs::write(tmp.path().join("driver.mk"), driver).unwrap();
    let mut compared = 0;
    for (case, files) in [
        ("both", &["Kbuild", "Makefile"][..]),
        ("makefile", &["Makefile"][..]),
        ("kbuild", &["Kbuild"][..]),
        ("neither", &[][..]),
    ] {
        let dir = tmp.path().join(case);
        std::fs::create_dir(&dir).unwrap();
        for f in files {
            std::fs::write(dir.join(f), "obj-y += a.o\n").unwrap();
        }
        let out = make_command(tmp.path()).args(["-f", "driver.mk", &format!("src={case}")]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let rust = sanpolicy::makefile::kbuild_file(&dir);
        for version in ["6.12", "6.1"] {
            let made = stdout.lines().find_map(|l| l.strip_prefix(&format!("{version} "))).unwrap();
            let made = tmp.path().join(made);
            // make names `Makefile` even when it is missing; the Rust side says there is none.
            let expected = made.is_file().then_some(made.clone());
            assert_eq!(rust, expected, "{case}: make {version} reads {}", made.display());
            compared += 1;
        }
    }
    assert_eq!(compared, 8);
    assert_eq!(sanpolicy::makefile::kbuild_file(&tmp.path().join("both")), Some(tmp.path().join("both/Kbuild")));
}

#[test]
fn directory_values_do_not_reach_subdirectories() {
    // A miniature Makefile.build: one make invocation per directory, recursing into `obj-y`
    // subdirectories as Kbuild does (`$(MAKE) -f … obj=<dir>`), evaluating 6.12's KASAN rule.
    let (rules, _) = Rules::from_tree(&fixtures().join("linux-6.12"));
    let kasan = MechId::by_name("kasan").unwrap();
    let expression = make_expression(&rules, kasan).unwrap();
    let kbuild_file = fixture_line("linux-6.12/scripts/Kbuild.include", "kbuild-file =");
    // The parent also lists an object of the subdirectory itself: that one is built by the
    // parent's invocation, so the parent's directory value does cover it.
    let parent = "KASAN_SANITIZE := n\nobj-y += sub/ a.o sub/bar.o\n";
    let child = "obj-y += foo.o\n";
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("dir/sub")).unwrap();
    std::fs::write(tmp.path().join("dir/Makefile"), parent).unwrap();
    std::fs::write(tmp.path().join("dir/sub/Makefile"), child).unwrap();
    let build = format!(
        "src := $(obj)\n{kbuild_file}\ninclude $(kbuild-file)\n{TARGET_STEM}\nis-kernel-object := y\n\
         subdirs := $(addprefix $(obj)/,$(patsubst %/,%,$(filter %/,$(obj-y))))\n\
         objects := $(addprefix $(obj)/,$(filter %.o,$(obj-y)))\n\
         __build: $(subdirs) $(objects)\n\
         $(subdirs):\n\t@$(MAKE) -f build.mk obj=$@\n\
         $(objects):\n\t@$(info KASAN $@ {expression})\n\
         .PHONY: __build $(subdirs) $(objects)\n"
    );
    std::fs::write(tmp.path().join("build.mk"), build).unwrap();
    let out = make_command(tmp.path()).args(["-f", "build.mk", "obj=dir"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let made: HashMap<&str, bool> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("KASAN "))
        .filter_map(|l| l.split_once(' '))
        .map(|(t, v)| (t, v == "on"))
        .collect();
    assert_eq!(made.len(), 3, "{stdout}");

    // Rust: each directory's own file in its own environment, as in separate make invocations.
    let state = |text: &str, object: &str| {
        let mut env = Env::with([("CC_FLAGS_FTRACE".to_string(), CC_FLAGS_FTRACE.to_string())]);
        env.run(&makefile::parse(text), &mut Evaluate);
        evaluate(&rules, kasan, object, &env, true).unwrap().on
    };
    assert_eq!(made["dir/a.o"], state(parent, "a.o"));
    assert_eq!(made["dir/sub/bar.o"], state(parent, "sub/bar.o"));
    assert_eq!(made["dir/sub/foo.o"], state(child, "foo.o"));
    // Not vacuous: the directory value does switch KASAN off for what its own invocation builds,
    // sub-paths included; it just does not reach the subdirectory's own build.
    assert!(!made["dir/a.o"]);
    assert!(!made["dir/sub/bar.o"]);
    assert!(made["dir/sub/foo.o"]);
}

// ---------------------------------------------------------------------------------------------
// The configuration walk (`kbuild::configs`): for each object and mechanism the Rust side says
// which Kconfig symbols decide it and the result for each assignment of them. Make evaluates
// the kbuild file under each such assignment, every other `CONFIG_` the file mentions set to a
// pseudo-random value (so a symbol the walk leaves out must not matter), and must agree.

use sanpolicy::kbuild::{arch, configs};

/// Every `CONFIG_` name written in `text`.
fn config_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (i, _) in text.match_indices("CONFIG_") {
        let end = text[i..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(text.len(), |e| i + e);
        names.push(text[i..end].to_string());
    }
    names.sort();
    names.dedup();
    names
}

/// One kbuild file of a directory, walked for every mechanism and object its lines name.
struct WalkCase {
    label: String,
    dir: String,
    text: String,
    preset: Vec<(String, String)>,
}

/// Totals of a walk comparison.
#[derive(Default)]
struct WalkTotals {
    compared: usize,
    runs: usize,
    max_symbols: usize,
    mismatches: Vec<String>,
}

/// Whether assignment `a` falls in `row` of a table: equal on the row's symbols, `m` standing
/// for `y` where the table has no `m` for the symbol (the walk found it only tested by `ifdef`).
fn in_row(a: &BTreeMap<String, String>, row: &configs::Outcome, rows: &[configs::Outcome]) -> bool {
    row.symbols.iter().all(|(s, v)| {
        let given = a.get(s).map_or("", String::as_str);
        given == v
            || (given == "m" && v == "y" && !rows.iter().any(|x| x.symbols.iter().any(|(t, w)| t == s && w == "m")))
    })
}

/// Compare the walk of `case` with make, under `rules`: every row of every (mechanism, object)
/// table is run by make at least once (with the other symbols random), and every decision of
/// every run whose assignment sets the mechanism's own option is compared.
fn walk_agrees(case: &WalkCase, rules: &Rules, tmp: &Path, seed: u64, totals: &mut WalkTotals) {
    let file = makefile::parse(&case.text);
    let mut names = config_names(&case.text);
    let mechs: Vec<MechId> = MechId::all().filter(|id| rules.decision(*id).is_some()).collect();
    names.extend(mechs.iter().map(|id| id.get().config.to_string()));
    names.sort();
    names.dedup();
    let mut objects: Vec<String> =
        file.directives().filter_map(|(_, d)| d.object.clone()).filter(|o| !o.contains('$')).collect();
    objects.push(sanpolicy::kbuild::ANY_OBJECT.to_string());
    objects.sort();
    objects.dedup();
    let mut rng = Rng(seed);
    let mut prepared = configs::Prepared::new(&file, &case.preset);
    // (mechanism, object) -> its table of (symbol values) -> on.
    let mut tables: Vec<(MechId, usize, Vec<configs::Outcome>)> = Vec::new();
    for id in &mechs {
        for (o, object) in objects.iter().enumerate() {
            let rows = prepared
                .outcomes(rules, *id, object, true)
                .unwrap_or_else(|l| panic!("{}: {object} {id}: {l}", case.label))
                .expect("the rules read the mechanism");
            totals.max_symbols = totals.max_symbols.max(rows.first().map_or(0, |r| r.symbols.len()));
            tables.push((*id, o, rows));
        }
    }
    let random = |rng: &mut Rng| -> BTreeMap<String, String> {
        let mut a: BTreeMap<String, String> =
            names.iter().map(|n| (n.clone(), rng.pick(&["y", "m", ""]).to_string())).collect();
        for id in &mechs {
            a.insert(id.get().config.to_string(), "y".into());
        }
        a
    };
    let mut assignments = vec![random(&mut rng)];
    for (id, _, rows) in &tables {
        let own = id.get().config;
        for row in rows {
            let covered = assignments.iter().any(|a| a.get(own).is_some_and(|v| v == "y") && in_row(a, row, rows));
            if !covered {
                let mut a = random(&mut rng);
                a.extend(row.symbols.iter().cloned());
                assignments.push(a);
            }
        }
    }
    let expressions: Vec<String> = mechs.iter().map(|id| make_expression(rules, *id).unwrap()).collect();
    let next = AtomicUsize::new(0);
    let answers: Vec<(usize, Vec<Vec<bool>>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(a) = assignments.get(i) else { break };
                        out.push((i, make_walk(case, a, &objects, &expressions, tmp)));
                    }
                    out
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    totals.runs += assignments.len();
    for (a, make) in assignments.iter().zip(order(answers, assignments.len())) {
        for (id, o, rows) in &tables {
            if a.get(id.get().config).is_none_or(|v| v != "y") {
                continue;
            }
            let m = mechs.iter().position(|x| x == id).unwrap();
            let Some(row) = rows.iter().find(|r| in_row(a, r, rows)) else {
                panic!("{}: {} {id}: no row for {a:?}", case.label, objects[*o])
            };
            totals.compared += 1;
            if row.eval.on != make[m][*o] {
                totals.mismatches.push(format!(
                    "{} {} {id}: make {}, rust {} under {:?}",
                    case.label,
                    objects[*o],
                    make[m][*o],
                    row.eval.on,
                    a.iter().filter(|(_, v)| !v.is_empty()).collect::<Vec<_>>()
                ));
            }
        }
    }
}

/// Answers put back in assignment order (each worker tagged its own).
fn order(mut answers: Vec<(usize, Vec<Vec<bool>>)>, n: usize) -> Vec<Vec<Vec<bool>>> {
    answers.sort_by_key(|(i, _)| *i);
    assert_eq!(answers.len(), n);
    answers.into_iter().map(|(_, a)| a).collect()
}

/// Make's answer for each mechanism and object under one assignment of symbols.
fn make_walk(
    case: &WalkCase,
    config: &BTreeMap<String, String>,
    objects: &[String],
    expressions: &[String],
    tmp: &Path,
) -> Vec<Vec<bool>> {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let (case_file, driver_file) = (format!("walk{n}.mk"), format!("walkdriver{n}.mk"));
    std::fs::write(tmp.join(&case_file), &case.text).unwrap();
    let mut d = String::from(".DEFAULT_GOAL := all\nSHELL := /bin/false\n");
    for (k, v) in config.iter().filter(|(_, v)| !v.is_empty()) {
        let _ = writeln!(d, "{k} := {v}");
    }
    for (k, v) in &case.preset {
        let _ = writeln!(d, "{k} := {v}");
    }
    let _ =
        writeln!(d, "CC_FLAGS_FTRACE := {CC_FLAGS_FTRACE}\nKBUILD_CPPFLAGS :=\nKBUILD_CFLAGS := $(CC_FLAGS_FTRACE)");
    let _ = writeln!(d, "{BASETARGET}\ninclude {case_file}\n{TARGET_STEM}");
    let mut targets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        let target = format!("{}/{o}", case.dir);
        let _ = writeln!(d, "{target}: obj := {}\n{target}: is-kernel-object := y\n{target}: __i := {i}", case.dir);
        targets.push(target);
    }
    let _ = writeln!(d, "SP_TARGETS := {}\n$(SP_TARGETS):", targets.join(" "));
    for (m, e) in expressions.iter().enumerate() {
        let _ = writeln!(d, "\t@$(info SP {m} $(__i) {e})");
    }
    let _ = writeln!(d, ".PHONY: all $(SP_TARGETS)\nall: $(SP_TARGETS)");
    std::fs::write(tmp.join(&driver_file), d).unwrap();
    let out = make_command(tmp).args(["-f", &driver_file]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: make failed: {}", case.label, String::from_utf8_lossy(&out.stderr));
    let mut answers = vec![vec![None; objects.len()]; expressions.len()];
    for line in stdout.lines().filter_map(|l| l.strip_prefix("SP ")) {
        let f: Vec<&str> = line.split(' ').collect();
        answers[f[0].parse::<usize>().unwrap()][f[1].parse::<usize>().unwrap()] = Some(f[2] == "on");
    }
    answers
        .into_iter()
        .map(|m| m.into_iter().map(|a| a.unwrap_or_else(|| panic!("{}: make printed no answer", case.label))).collect())
        .collect()
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

use std::collections::BTreeMap;

/// A generated file with more than ten guarding symbols for one object, and thirty that each
/// guard a different object (they must drop out of each other's walks).
fn generated_walk_cases() -> Vec<WalkCase> {
    let mut deep = String::from("obj-y := a.o b.o\nKASAN_SANITIZE := n\n");
    for i in 0..11 {
        let (value, cond) =
            if i % 3 == 2 { ("y", format!("ifndef CONFIG_S{i}")) } else { ("n", format!("ifdef CONFIG_S{i}")) };
        let _ = writeln!(deep, "{cond}\nKASAN_SANITIZE_a.o := {value}\nendif");
    }
    deep.push_str("ifeq ($(CONFIG_S0)$(CONFIG_S1),ym)\nGCOV_PROFILE_a.o := y\nendif\n");
    let mut wide = String::from("KASAN_SANITIZE := n\n");
    for i in 0..30 {
        let _ = writeln!(wide, "ifdef CONFIG_W{i}\nKASAN_SANITIZE_w{i}.o := y\nelse ifeq ($(CONFIG_V{i}),m)\nUBSAN_SANITIZE_w{i}.o := n\nendif");
    }
    vec![
        WalkCase { label: "generated/deep".into(), dir: "gen/deep".into(), text: deep, preset: Vec::new() },
        WalkCase { label: "generated/wide".into(), dir: "gen/wide".into(), text: wide, preset: Vec::new() },
    ]
}

#[test]
fn configuration_walk_agrees_with_make_on_generated_files() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = Rules::builtin();
    let mut totals = WalkTotals::default();
    for (i, case) in generated_walk_cases().iter().enumerate() {
        walk_agrees(case, &rules, tmp.path(), i as u64 + 1, &mut totals);
    }
    println!(
        "walk: {} decisions in {} make runs, at most {} symbols",
        totals.compared, totals.runs, totals.max_symbols
    );
    assert!(totals.mismatches.is_empty(), "{}", totals.mismatches.join("\n"));
    assert!(totals.max_symbols > 10, "the deep case has more than ten guarding symbols");
    assert!(totals.runs >= 2048, "every assignment of the deep case's symbols was run: {}", totals.runs);
}

/// The kbuild files of Debian's source package `version` that have an instrumentation line
/// under a condition or a `CONFIG_` in its name or value, extracted into `dir`.
fn real_walk_cases(version: &str, dir: &Path) -> (Rules, Vec<WalkCase>) {
    let tarball = PathBuf::from(format!("/usr/src/linux-source-{version}.tar.xz"));
    assert!(
        tarball.is_file(),
        "{} is missing: `apt-get install linux-source-{version}` (.ci/run does)",
        tarball.display()
    );
    let status = Command::new("tar")
        .arg("-xJf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir)
        .args(["--wildcards", "*/Makefile", "*/Kbuild", "*/scripts/Makefile.*"])
        .status()
        .unwrap();
    assert!(status.success(), "tar: {status}");
    let tree = dir.join(format!("linux-source-{version}"));
    let (rules, diags) = Rules::from_tree(&tree);
    assert!(diags.is_empty(), "{version}: {:?}", diags.iter().map(|d| d.one_line()).collect::<Vec<_>>());
    let mut cases = Vec::new();
    let mut stack = vec![tree.clone()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        let mut kbuild = None;
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if !p.ends_with("scripts") && !p.ends_with("tools") && !p.ends_with("Documentation") {
                    stack.push(p);
                }
            } else if p.file_name().is_some_and(|n| n == "Kbuild")
                || (kbuild.is_none() && p.file_name().is_some_and(|n| n == "Makefile"))
            {
                kbuild = Some(p);
            }
        }
        let Some(p) = kbuild else { continue };
        let Ok(text) = std::fs::read_to_string(&p) else { continue };
        let file = makefile::parse(&text);
        let interesting = file.directives().any(|(i, _)| {
            let a = &file.assignments[i];
            !a.frames.is_empty() || a.name.contains("CONFIG_") || a.value.contains("CONFIG_")
        });
        // Make cannot include what the file includes, nor stop at its `$(error)`: those are
        // left out (counted), the walk needs only the assignments.
        if !interesting || text.lines().any(|l| l.trim_start().starts_with("include ") || l.contains("$(error")) {
            continue;
        }
        let rel = p.parent().unwrap().strip_prefix(&tree).unwrap().to_string_lossy().to_string();
        let preset = arch::preset(Some(&tree), &rel, &file, "", None);
        cases.push(WalkCase { label: format!("{version}/{rel}"), dir: rel, text, preset });
    }
    cases.sort_by(|a, b| a.label.cmp(&b.label));
    (rules, cases)
}

#[test]
fn configuration_walk_agrees_with_make_on_real_files() {
    let tmp = tempfile::tempdir().unwrap();
    let mut totals = WalkTotals::default();
    let mut files = 0;
    for version in ["6.1", "6.12"] {
        let src = tmp.path().join(format!("src-{version}"));
        std::fs::create_dir_all(&src).unwrap();
        let (rules, cases) = real_walk_cases(version, &src);
        assert!(cases.len() > 20, "{version}: only {} kbuild files with conditional lines", cases.len());
        files += cases.len();
        for (i, case) in cases.iter().enumerate() {
            walk_agrees(case, &rules, tmp.path(), i as u64 + 7, &mut totals);
        }
    }
    println!(
        "walk on real files: {} decisions from {files} files in {} make runs, at most {} symbols",
        totals.compared, totals.runs, totals.max_symbols
    );
    assert!(totals.mismatches.is_empty(), "{} mismatches:\n{}", totals.mismatches.len(), totals.mismatches.join("\n"));
}

// Make constructs that can change a directive variable or how lines are read (issue 10, point 8)

/// What the reader must do with a construct: follow it (agree with make on every decision, and
/// report nothing), or report it as opaque for every mechanism where it disagrees with make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    Models,
    /// `differs`: make's decision is not what the lines around the construct say, so a reader
    /// that ignored the construct would agree wrongly (the case is not vacuous).
    Reports {
        differs: bool,
    },
}

/// One row per construct of `src/makefile/constructs.rs`. `inc.mk` (beside the case) sets
/// `KASAN_SANITIZE_foo.o := y`.
const CONSTRUCTS: &[(&str, &str, Reader)] = &[
    ("export define", "export define X\nKASAN_SANITIZE_foo.o := n\nendef\n", Reader::Models),
    ("override define", "override define X\nKASAN_SANITIZE_foo.o := n\nendef\n", Reader::Models),
    ("define X =", "define X =\nKASAN_SANITIZE_foo.o := n\nendef\n", Reader::Models),
    ("define X :=", "define X :=\nKCOV_INSTRUMENT := n\nendef\n", Reader::Models),
    ("define of a directive", "KASAN_SANITIZE := y\ndefine KASAN_SANITIZE_foo.o\nn\nendef\n", Reader::Models),
    ("define := of a directive", "define KCOV_INSTRUMENT :=\nn\nendef\n", Reader::Models),
    ("nested define", "define A\ndefine B\nendef\nKASAN_SANITIZE_foo.o := n\nendef\n", Reader::Models),
    ("tab-led endef", "define A\n\tendef\nKASAN_SANITIZE_foo.o := n\nendef\n", Reader::Models),
    ("export define nested", "define A\nexport define B\nendef\nKCOV_INSTRUMENT := n\n", Reader::Models),
    ("undefine", "KASAN_SANITIZE_foo.o := n\nundefine KASAN_SANITIZE_foo.o\n", Reader::Models),
    ("undefine under ifdef", "KASAN_SANITIZE := n\nifdef CONFIG_A\nundefine KASAN_SANITIZE\nendif\n", Reader::Models),
    ("undefine of an override", "override KASAN_SANITIZE_foo.o := n\nundefine KASAN_SANITIZE_foo.o\n", Reader::Models),
    (
        "override undefine",
        "override KASAN_SANITIZE_foo.o := n\noverride undefine KASAN_SANITIZE_foo.o\n",
        Reader::Models,
    ),
    (
        "override beats later lines",
        "override KASAN_SANITIZE_foo.o := y\nKASAN_SANITIZE_foo.o := n\nKASAN_SANITIZE_foo.o += n\n",
        Reader::Models,
    ),
    ("undefine then ?=", "KCOV_INSTRUMENT := y\nundefine KCOV_INSTRUMENT\nKCOV_INSTRUMENT ?= n\n", Reader::Models),
    (
        "export and unexport",
        "export KASAN_SANITIZE_foo.o := n\nunexport KCOV_INSTRUMENT := n\nexport KCSAN_SANITIZE\n",
        Reader::Models,
    ),
    ("keyword as a variable", "ifdef := 1\nKASAN_SANITIZE_foo.o := n\n", Reader::Models),
    ("tab-led line before any rule", "\tKASAN_SANITIZE_foo.o := n\n", Reader::Models),
    ("tab-led line after a rule", "bar: ;\n\tKASAN_SANITIZE_foo.o := n\n", Reader::Models),
    (
        "rule spans blanks, comments, ifs",
        "bar: ;\n\n# c\nifdef CONFIG_A\n\tKASAN_SANITIZE_foo.o := n\nendif\n",
        Reader::Models,
    ),
    ("assignment ends the rule", "bar: ;\nX := 1\n\tKASAN_SANITIZE_foo.o := n\n", Reader::Models),
    ("target-specific ends the rule", "bar: Y := 1\n\tKASAN_SANITIZE_foo.o := n\n", Reader::Models),
    (
        ".RECIPEPREFIX makes a line a recipe",
        ".RECIPEPREFIX := K\nbar: ;\nKASAN_SANITIZE_foo.o := n\n.RECIPEPREFIX :=\n",
        Reader::Models,
    ),
    (
        ".RECIPEPREFIX frees tab-led lines",
        ".RECIPEPREFIX := >\nbar: ;\n\tKASAN_SANITIZE_foo.o := n\n.RECIPEPREFIX :=\n",
        Reader::Models,
    ),
    (
        ".RECIPEPREFIX under a condition",
        "ifndef CONFIG_A\n.RECIPEPREFIX := K\nendif\nbar: ;\nKASAN_SANITIZE_foo.o := n\n.RECIPEPREFIX :=\n",
        Reader::Reports { differs: true },
    ),
    (
        "$(eval) after the lines",
        "KASAN_SANITIZE_foo.o := n\n$(eval KASAN_SANITIZE_foo.o := y)\n",
        Reader::Reports { differs: true },
    ),
    (
        "${eval} in a value",
        "KASAN_SANITIZE_foo.o := n\nX := ${eval KASAN_SANITIZE_foo.o := y}\n",
        Reader::Reports { differs: true },
    ),
    (
        "$(eval) in a condition",
        "KCOV_INSTRUMENT := n\nifeq ($(eval KCOV_INSTRUMENT := y),)\nendif\n",
        Reader::Reports { differs: true },
    ),
    (
        "$(eval $(call …))",
        "define gen\nKASAN_SANITIZE_$(1).o := y\nendef\nKASAN_SANITIZE_foo.o := n\n$(eval $(call gen,foo))\n",
        Reader::Reports { differs: true },
    ),
    (
        "$(eval) in a foreach",
        "CFLAGS_REMOVE_foo.o := $(CC_FLAGS_FTRACE)\n$(foreach f,foo,$(eval CFLAGS_REMOVE_$(f).o :=))\n",
        Reader::Reports { differs: true },
    ),
    ("$(eval) of an unrelated variable", "KASAN_SANITIZE_foo.o := n\n$(eval OTHER := y)\n", Reader::Models),
    (
        "target-specific directive",
        "KASAN_SANITIZE_foo.o := n\nobjdir1/foo.o objdir0/foo.o: KASAN_SANITIZE_foo.o := y\n",
        Reader::Reports { differs: true },
    ),
    (
        "pattern-specific directive",
        "KCOV_INSTRUMENT := n\n%.o: KCOV_INSTRUMENT := y\n",
        Reader::Reports { differs: true },
    ),
    ("private directive", "private KASAN_SANITIZE_foo.o := n\n", Reader::Reports { differs: true }),
    ("!= directive", "KASAN_SANITIZE := n\nKASAN_SANITIZE_foo.o != echo y\n", Reader::Reports { differs: true }),
    ("include", "KASAN_SANITIZE_foo.o := n\ninclude inc.mk\n", Reader::Reports { differs: true }),
    ("sinclude", "KASAN_SANITIZE_foo.o := n\nsinclude inc.mk\n", Reader::Reports { differs: true }),
    ("-include", "KASAN_SANITIZE_foo.o := n\n-include inc.mk\n", Reader::Reports { differs: true }),
];

#[test]
fn make_constructs_are_modelled_or_reported() {
    let sets = rule_sets();
    let probe = Probe::new(&sets);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("inc.mk"), "KASAN_SANITIZE_foo.o := y\n").unwrap();
    let mut problems = Vec::new();
    let mut reported = 0;
    for (c, (name, text, expect)) in CONSTRUCTS.iter().enumerate() {
        let parsed = makefile::parse(text);
        let mut differs = false;
        for (k, bits) in [0usize, 0b11].into_iter().enumerate() {
            let s = Scenario { text: text.to_string(), config: config_from_bits(bits), bits: "64" };
            let i = c * 2 + k;
            let (case_file, driver_file) = (format!("case{i}.mk"), format!("driver{i}.mk"));
            std::fs::write(tmp.path().join(&case_file), &s.text).unwrap();
            std::fs::write(tmp.path().join(&driver_file), driver(&s, &case_file, &probe.tail)).unwrap();
            let answers = match run_make(tmp.path(), &driver_file) {
                Ok(a) => a,
                Err(e) => {
                    problems.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let mut out = Outcome::default();
            compare(i, &s, &answers, &probe, &sets, &mut out);
            differs |= !out.mismatches.is_empty();
            for m in &out.mismatches {
                let id = MechId::by_name(m.mechanism).unwrap();
                let rules = &sets.iter().find(|(n, _)| *n == m.rules).unwrap().1;
                let covered =
                    parsed.opaque.iter().any(|o| o.may_touch(id) || rules.reads(id).iter().any(|r| o.may_touch(*r)));
                if *expect == Reader::Models || !covered {
                    problems.push(format!(
                        "{name} (config {bits:#b}): rules {} {} {}: make {:?}, rust {:?}, reported {:?}",
                        m.rules, m.mechanism, m.object, m.make, m.rust, parsed.opaque
                    ));
                }
            }
        }
        match expect {
            Reader::Models if !parsed.opaque.is_empty() => {
                problems.push(format!("{name}: modelled, yet reported {:?}", parsed.opaque))
            }
            Reader::Reports { .. } if parsed.opaque.is_empty() => problems.push(format!("{name}: not reported")),
            Reader::Reports { differs: true } if !differs => {
                problems.push(format!("{name}: make agrees with the lines around it: the case is vacuous"))
            }
            Reader::Reports { .. } => reported += 1,
            Reader::Models => {}
        }
    }
    assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    assert!(reported >= 10, "{reported} constructs reported");
}

/// The list functions the descent reads `obj-y` lists with (`kbuild::descent`): each expression,
/// after a few assignments, expands to what GNU make prints for it.
#[test]
fn list_functions_expand_like_make() {
    let setup = "L := b.o a.o sub/c.o a.o\nD := x/ y/ z.o\nE :=\nF = $(L:.o=-y)\nCONFIG_A := m\n\
                 a-y := p.o q.o\nV := $(foreach m,$(L),$($(m:.o=-y)))\n";
    let exprs = [
        "$(sort $(L))",
        "$(addprefix dir/,$(L))",
        "$(addsuffix /,x y)",
        "$(subst m,y,$(CONFIG_A))",
        "$(subst .o,.c,$(L))",
        "$(notdir $(L) sub/)",
        "$(dir $(L) plain)",
        "$(basename $(L) x.y/z .hidden)",
        "$(suffix $(L) x.y/z)",
        "$(firstword $(L))",
        "$(lastword $(L))",
        "$(words $(L))",
        "$(findstring sub,$(L))",
        "$(findstring nope,$(L))",
        "$(foreach d,$(D),[$(d)])",
        "$(L:.o=.c)",
        "$(L:%.o=%.s)",
        "$(F)",
        "$(V)",
        "$(filter %/,$(D))",
        "$(patsubst %/,%,$(filter %/,$(D)))",
        "$(E:.o=.c)",
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut driver = setup.to_string();
    for (i, e) in exprs.iter().enumerate() {
        driver.push_str(&format!("$(info {i}=[{e}])\n"));
    }
    driver.push_str("all: ;\n");
    std::fs::write(dir.path().join("Makefile"), &driver).unwrap();
    let out = Command::new("make").arg("-s").arg("-C").arg(dir.path()).output().expect("GNU make");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut env = sanpolicy::kbuild::Env::default();
    env.run(&sanpolicy::makefile::parse(setup), &mut sanpolicy::kbuild::Evaluate);
    for (i, e) in exprs.iter().enumerate() {
        let made = stdout.lines().find_map(|l| l.strip_prefix(&format!("{i}=["))?.strip_suffix(']')).unwrap();
        assert_eq!(env.expand(e), made, "{e}");
    }
}
