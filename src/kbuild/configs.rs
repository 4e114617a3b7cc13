//! Effective state across configurations, as an exact function of the Kconfig symbols.
//!
//! A kbuild file's lines for a mechanism may sit inside `ifdef`/`ifeq` blocks, use
//! `$(CONFIG_X)` in names or values, and the tree's decision expression may read a `*_ALL`
//! switch. For one object and mechanism this finds the lines that can decide it (directory-wide
//! lines, the object's own lines, and, transitively, every assignment to a variable those
//! lines, their names or their conditions read), collects the `CONFIG_` symbols they mention,
//! and runs the file once per assignment of those symbols, each symbol over the values that can
//! tell apart (`y`, `m`, unset, and literals an `ifeq` compares it with; `y`/`m` are one value
//! for a symbol only tested by `ifdef`). Symbols that guard only lines irrelevant to the object
//! drop out, so the walk is exponential only in the symbols that really guard that object.
//! The mechanism's own `CONFIG_` is taken as set (the state is "when the mechanism is built
//! in"). More than [`MAX_RUNS`] assignments is an error ([`Limit`]), never a pass.
//!
//! With a `.config` ([`Prepared::with_config`]) every symbol, switch and mechanism option has
//! its value from that build, and whether the object is a kernel object is read from the
//! file's `obj-y`/`obj-m`/`lib-y` under it: one run, a definite answer.

use std::collections::{BTreeMap, BTreeSet};

// Keys are names from the tree (see `eval`): foldhash, seeded per process.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::dotconfig::DotConfig;
use super::eval::{Env, Evaluate};
use super::resolve::{evaluate_as, DecidedBy, Evaluation};
use super::rules::Rules;
use crate::makefile::{CondKind, Condition, Event, KbuildFile};
use crate::mechanism::{Form, MechId, MECHANISMS};

/// Assignments of symbols enumerated for one object at most; beyond, [`Limit`].
pub const MAX_RUNS: usize = 1 << 16;

/// Too many symbol assignments to enumerate for one object: the state is unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub symbols: Vec<String>,
    pub runs: u128,
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} Kconfig symbols guard the lines deciding it ({} configurations, more than the {MAX_RUNS} sanpolicy enumerates): {}",
            self.symbols.len(),
            self.runs,
            self.symbols.join(", ")
        )
    }
}

/// The result in one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Each symbol the result depends on and its value here (`""`: not set).
    pub symbols: Vec<(String, String)>,
    pub eval: Evaluation,
}

/// The state of one object for one mechanism over all configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    On,
    Off,
    /// On in some configurations, off in others: the full table over the symbols that matter.
    /// Empty when the configurations were too many to enumerate (see [`Limit`]): unknown.
    Depends(Vec<Outcome>),
}

impl State {
    pub fn label(&self) -> String {
        match self {
            State::On => "on".into(),
            State::Off => "off".into(),
            State::Depends(rows) if rows.is_empty() => {
                format!("undecided: more than {MAX_RUNS} configurations to enumerate")
            }
            State::Depends(rows) => format!("on iff {}", condition(rows)),
        }
    }

    /// The state a table of outcomes (from [`Prepared::outcomes`]) amounts to.
    pub fn from_outcomes(outcomes: Vec<Outcome>) -> State {
        if outcomes.iter().all(|o| o.eval.on) {
            State::On
        } else if outcomes.iter().all(|o| !o.eval.on) {
            State::Off
        } else {
            State::Depends(influential(outcomes))
        }
    }

    /// Off in every configuration (a requirement holds).
    pub fn is_off(&self) -> bool {
        *self == State::Off
    }
}

/// The on-set of a full table as a short sum of products: each on row widened symbol by symbol
/// while every row it then covers is still on, duplicates and covered terms dropped.
fn condition(rows: &[Outcome]) -> String {
    let Some(first) = rows.first() else { return String::new() };
    let names: Vec<&str> = first.symbols.iter().map(|(s, _)| s.as_str()).collect();
    let domains: Vec<BTreeSet<&str>> =
        (0..names.len()).map(|i| rows.iter().map(|r| r.symbols[i].1.as_str()).collect()).collect();
    let covers =
        |cube: &[BTreeSet<&str>], r: &Outcome| r.symbols.iter().zip(cube).all(|((_, v), s)| s.contains(v.as_str()));
    let all_on = |cube: &[BTreeSet<&str>]| rows.iter().filter(|r| covers(cube, r)).all(|r| r.eval.on);
    let mut cubes: Vec<Vec<BTreeSet<&str>>> = Vec::new();
    for row in rows.iter().filter(|r| r.eval.on) {
        let mut cube: Vec<BTreeSet<&str>> = row.symbols.iter().map(|(_, v)| BTreeSet::from([v.as_str()])).collect();
        for i in 0..cube.len() {
            // Any value, else all values but one ("set", "not y", …).
            let mut candidates = vec![domains[i].clone()];
            candidates.extend(domains[i].iter().map(|v| domains[i].iter().copied().filter(|w| w != v).collect()));
            for wider in candidates {
                if !wider.is_superset(&cube[i]) {
                    continue;
                }
                let old = std::mem::replace(&mut cube[i], wider);
                if all_on(&cube) {
                    break;
                }
                cube[i] = old;
            }
        }
        if !cubes.contains(&cube) {
            cubes.push(cube);
        }
    }
    let subsumed =
        |c: &Vec<BTreeSet<&str>>, by: &Vec<BTreeSet<&str>>| c != by && c.iter().zip(by).all(|(a, b)| b.is_superset(a));
    let kept: Vec<&Vec<BTreeSet<&str>>> = cubes.iter().filter(|c| !cubes.iter().any(|b| subsumed(c, b))).collect();
    let terms: Vec<String> = kept
        .iter()
        .map(|cube| {
            let lits: Vec<String> = cube
                .iter()
                .enumerate()
                .filter(|(i, s)| **s != domains[*i])
                .map(|(i, s)| literal(names[i], s, &domains[i]))
                .collect();
            if lits.len() > 1 && kept.len() > 1 {
                format!("({})", lits.join(" and "))
            } else {
                lits.join(" and ")
            }
        })
        .collect();
    terms.join(" or ")
}

/// `name` restricted to `values` of its `domain`, in Kconfig words.
fn literal(name: &str, values: &BTreeSet<&str>, domain: &BTreeSet<&str>) -> String {
    let set: BTreeSet<&str> = domain.iter().copied().filter(|v| !v.is_empty()).collect();
    let shown = |v: &str| if v.is_empty() { "unset".to_string() } else { v.to_string() };
    if *values == set {
        return name.to_string();
    }
    if values.len() == 1 && values.contains("") {
        return format!("not {name}");
    }
    if values.len() == 1 {
        return format!("{name}={}", shown(values.iter().next().unwrap_or(&"")));
    }
    let rest: Vec<&str> = domain.difference(values).copied().collect();
    if rest.len() == 1 {
        return format!("{name}!={}", shown(rest[0]));
    }
    format!("{name} in {{{}}}", values.iter().map(|v| shown(v)).collect::<Vec<_>>().join(","))
}

/// What a file's lines are for one mechanism, found once per file so that a directory with
/// thousands of objects is not rescanned per object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    /// Some line can decide the mechanism (else every object has the tree's default).
    pub touched: bool,
    /// Lines that can decide every object: directory-wide lines, and per-file names still
    /// holding a variable.
    everywhere: Vec<usize>,
    /// Lines that name one object, by its per-file name (stem).
    by_stem: HashMap<String, Vec<usize>>,
}

impl Lines {
    pub fn of(file: &KbuildFile, rules: &Rules, id: MechId, preset: &[(String, String)]) -> Lines {
        let read = rules.reads(id);
        let naming = rules.naming(id);
        let mut lines = Lines { touched: false, everywhere: Vec::new(), by_stem: HashMap::new() };
        for (i, d) in file.directives().filter(|(_, d)| read.contains(&d.mech)) {
            lines.touched = true;
            match d.object.as_deref().map(|o| substitute(o, preset)) {
                Some(o) if !o.contains('$') => lines.by_stem.entry(naming.stem(&o)).or_default().push(i),
                _ => lines.everywhere.push(i),
            }
        }
        lines
    }
}

/// `text` with each `$(NAME)` of `preset` replaced by its value.
pub(crate) fn substitute(text: &str, preset: &[(String, String)]) -> String {
    preset.iter().fold(text.to_string(), |t, (n, v)| t.replace(&format!("$({n})"), v))
}

/// The state of one object over all configurations.
pub fn state(file: &KbuildFile, rules: &Rules, id: MechId, object: &str, kernel_object: bool) -> Option<State> {
    Prepared::new(file, &[]).state(rules, id, object, kernel_object)
}

/// Variables set before a file is run (values for `$(BITS)` in names).
pub type Preset = Vec<(String, String)>;

/// A run of a file: the mechanism option taken as set, and each symbol's value.
type RunKey = (&'static str, Vec<(String, String)>);

/// Assignment indices by assigned name, and those whose name holds a reference.
type Assigns = (HashMap<String, Vec<usize>>, Vec<usize>);

/// The symbols one object's state depends on, each with the values that can tell apart.
type Symbols = Vec<(String, Vec<String>)>;

/// A kbuild file (with variables preset) ready to evaluate many of its objects: what its lines
/// are per mechanism, and the file run once per configuration, are kept, so a directory of
/// thousands of objects costs that many lookups rather than that many runs over the file.
pub struct Prepared<'f> {
    file: &'f KbuildFile,
    preset: Preset,
    config: Option<&'f DotConfig>,
    lines: HashMap<MechId, Lines>,
    runs: HashMap<RunKey, Env>,
    /// Assignments by the variable name they assign; names with a reference are in `dynamic`.
    assigns: Option<Assigns>,
    /// The conditions deciding whether each line runs.
    guards: Option<Guards>,
    /// The symbol usage of every line reachable from a set of seed lines (sorted), by that
    /// set: objects of one directory mostly share their seeds (its directory-wide lines).
    closures: HashMap<Vec<usize>, Usage>,
    /// The symbol usage reached from the [`setters`] of each variable looked up so far: shared by
    /// every object that reads the variable (`obj-y` of a directory of 100,000 objects is set by
    /// 100,000 lines, walked once, not once per object).
    var_closures: HashMap<String, Usage>,
}

impl<'f> Prepared<'f> {
    pub fn new(file: &'f KbuildFile, preset: &[(String, String)]) -> Prepared<'f> {
        Prepared {
            file,
            preset: preset.to_vec(),
            config: None,
            lines: HashMap::new(),
            runs: HashMap::new(),
            assigns: None,
            guards: None,
            closures: HashMap::new(),
            var_closures: HashMap::new(),
        }
    }

    /// Evaluate for one build: every symbol from `config`, kernel objects from `obj-y`/`obj-m`.
    pub fn with_config(file: &'f KbuildFile, preset: &[(String, String)], config: &'f DotConfig) -> Prepared<'f> {
        Prepared { config: Some(config), ..Prepared::new(file, preset) }
    }

    /// What the file's lines are for `id`.
    pub fn lines(&mut self, rules: &Rules, id: MechId) -> &Lines {
        self.lines.entry(id).or_insert_with(|| Lines::of(self.file, rules, id, &self.preset))
    }

    /// The state of `object` over all configurations (with a `.config`: in that build);
    /// `None` when the tree does not read `id`. With a `.config`, `kernel_object` is not used:
    /// the file's `obj-y`/`obj-m`/`lib-y` under it decide. Too many configurations give an empty
    /// `Depends` (unknown, never `Off`); [`Prepared::try_state`] says why.
    pub fn state(&mut self, rules: &Rules, id: MechId, object: &str, kernel_object: bool) -> Option<State> {
        self.try_state(rules, id, object, kernel_object).unwrap_or(Some(State::Depends(Vec::new())))
    }

    pub fn try_state(
        &mut self,
        rules: &Rules,
        id: MechId,
        object: &str,
        kernel_object: bool,
    ) -> Result<Option<State>, Limit> {
        let Some(outcomes) = self.outcomes(rules, id, object, kernel_object)? else { return Ok(None) };
        Ok(Some(State::from_outcomes(outcomes)))
    }

    /// Evaluate each of `objects` in every configuration of the symbols that can decide any of
    /// them. Returns, per configuration, the outcome for every object in order.
    pub fn across(
        &mut self,
        rules: &Rules,
        id: MechId,
        objects: &[String],
        kernel_object: bool,
    ) -> Result<Option<Vec<Vec<Outcome>>>, Limit> {
        if rules.decision(id).is_none() {
            return Ok(None);
        }
        let mut symbols: Symbols = Vec::new();
        for o in objects {
            for (s, vals) in self.symbols(rules, id, o) {
                match symbols.iter_mut().find(|(n, _)| *n == s) {
                    Some((_, have)) => have.extend(vals.into_iter().filter(|v| !have.contains(v)).collect::<Vec<_>>()),
                    None => symbols.push((s, vals)),
                }
            }
        }
        symbols.sort();
        let rows = self.enumerate(rules, id, objects, kernel_object, &symbols)?;
        Ok(Some(rows))
    }

    /// The outcome of `object` in every configuration of its own symbols.
    pub fn outcomes(
        &mut self,
        rules: &Rules,
        id: MechId,
        object: &str,
        kernel_object: bool,
    ) -> Result<Option<Vec<Outcome>>, Limit> {
        if rules.decision(id).is_none() {
            return Ok(None);
        }
        let objects = [object.to_string()];
        let symbols = if self.config.is_some() { Vec::new() } else { self.symbols(rules, id, object) };
        let rows = self.enumerate(rules, id, &objects, kernel_object, &symbols)?;
        Ok(Some(rows.into_iter().flatten().collect()))
    }

    /// Whether `object` is linked into vmlinux or a module under the `.config` (`None` without one).
    /// A target-specific `is-kernel-object` decides it when it applies (`rust/Makefile:450`).
    pub fn kernel_object(&mut self, object: &str) -> Option<bool> {
        self.config?;
        let env = self.run(None, Vec::new());
        Some(!kernel_value(env, object, is_kernel_object(env, object)).is_empty())
    }

    /// The line of a target-specific `is-kernel-object` for `object`: with a `.config`, the one
    /// that applies in that build; without, the last one naming it (it applies where its
    /// conditions hold).
    pub fn kernel_object_line(&mut self, object: &str) -> Option<usize> {
        if self.config.is_some() {
            return self.run(None, Vec::new()).kernel_object_of(object).map(|(_, line)| line);
        }
        self.file.kernel_object_lines.iter().rev().find(|t| t.objects.iter().any(|o| o == object)).map(|t| t.line)
    }

    /// The objects linked into vmlinux or a module under the `.config`, and those a
    /// target-specific `is-kernel-object` makes kernel objects (`None` without a `.config`).
    pub fn kernel_objects(&mut self) -> Option<Vec<String>> {
        self.config?;
        let env = self.run(None, Vec::new());
        let mut out = kernel_objects(env);
        out.extend(env.kernel_object_targets().filter(|(_, v)| !v.is_empty()).map(|(o, _)| o.to_string()));
        out.sort();
        out.dedup();
        Some(out)
    }

    /// The lists Kbuild's descent reads from the file under the `.config` (`None` without one).
    pub fn lists(&mut self) -> Option<Lists> {
        self.config?;
        Some(Lists::of(self.run(None, Vec::new())))
    }

    fn enumerate(
        &mut self,
        rules: &Rules,
        id: MechId,
        objects: &[String],
        kernel_object: bool,
        symbols: &Symbols,
    ) -> Result<Vec<Vec<Outcome>>, Limit> {
        let runs = symbols.iter().try_fold(1u128, |n, (_, v)| n.checked_mul(v.len() as u128)).unwrap_or(u128::MAX);
        if runs > MAX_RUNS as u128 {
            return Err(Limit { symbols: symbols.iter().map(|(s, _)| s.clone()).collect(), runs });
        }
        let mech = id.get();
        let mut out = Vec::with_capacity(runs as usize);
        for n in 0..runs as usize {
            let mut rest = n;
            let assignment: Vec<(String, String)> = symbols
                .iter()
                .map(|(s, vals)| {
                    let v = vals[rest % vals.len()].clone();
                    rest /= vals.len();
                    (s.clone(), v)
                })
                .collect();
            let row = match self.config {
                Some(config) => {
                    let kernel = {
                        let env = self.run(None, Vec::new());
                        objects.iter().map(|o| kernel_value(env, o, is_kernel_object(env, o))).collect::<Vec<_>>()
                    };
                    let configured = !config.get(mech.config).is_empty();
                    let env = self.run(None, Vec::new());
                    objects
                        .iter()
                        .zip(kernel)
                        .filter_map(|(o, k)| {
                            let eval = if configured {
                                evaluate_as(rules, id, o, env, &k)?
                            } else {
                                Evaluation {
                                    on: false,
                                    words: String::new(),
                                    decided_by: DecidedBy::NotConfigured(mech.config.to_string()),
                                }
                            };
                            Some(Outcome { symbols: assignment.clone(), eval })
                        })
                        .collect()
                }
                None => {
                    let env = self.run(Some(mech.config), assignment.clone());
                    objects
                        .iter()
                        .filter_map(|o| evaluate_as(rules, id, o, env, &kernel_value(env, o, kernel_object)))
                        .map(|eval| Outcome { symbols: assignment.clone(), eval })
                        .collect()
                }
            };
            out.push(row);
        }
        Ok(out)
    }

    /// The file run with `own` (the mechanism option) set and the symbols of `assignment`;
    /// with a `.config`, `own` is `None` and the assignment is the whole configuration.
    fn run(&mut self, own: Option<&'static str>, assignment: Vec<(String, String)>) -> &Env {
        let (file, preset, config) = (self.file, &self.preset, self.config);
        self.runs.entry((own.unwrap_or(""), assignment)).or_insert_with_key(|(own, assignment)| {
            let mut env = Env::default();
            for (name, value) in preset {
                env.set(name, value);
            }
            // After the preset (which may hold the top Makefile's exports, the real flags among
            // them): a removed mechanism's flags are the marker the resolver looks for.
            // The top Makefile also adds them to `KBUILD_CFLAGS`, which a directory may rewrite
            // (`KBUILD_CFLAGS := $(subst $(CC_FLAGS_FTRACE),,$(KBUILD_CFLAGS))`,
            // arch/arm64/kernel/pi/Makefile:4): the run starts it from the same marker.
            let mut kbuild_cflags = Vec::new();
            for m in MECHANISMS {
                if let Form::FlagRemoval { expansion, .. } = m.form {
                    // The top Makefile sets the flags only when the tracer is configured.
                    if config.is_none_or(|c| !c.get(m.config).is_empty()) {
                        env.set(m.directive_name(), expansion);
                        kbuild_cflags.push(expansion);
                    } else {
                        env.set(m.directive_name(), "");
                    }
                }
            }
            env.set("KBUILD_CFLAGS", &kbuild_cflags.join(" "));
            match config {
                Some(c) => c.values.iter().for_each(|(k, v)| env.set(k, v)),
                None => {
                    env.set(own, "y");
                    assignment.iter().filter(|(_, v)| !v.is_empty()).for_each(|(k, v)| env.set(k, v));
                }
            }
            env.run(file, &mut Evaluate);
            env
        })
    }

    /// The symbols that can decide `object` for `id`, sorted, each with its values.
    fn symbols(&mut self, rules: &Rules, id: MechId, object: &str) -> Symbols {
        let naming = rules.naming(id);
        let stem = naming.stem(object);
        let lines = self.lines(rules, id);
        let mut seeds = lines.everywhere.clone();
        seeds.extend(lines.by_stem.get(&stem).into_iter().flatten());
        let file = self.file;
        let (by_name, dynamic) = self.assigns.get_or_insert_with(|| assigns_of(file));
        let mut usage = Usage::default();
        // Every assignment that can set `var` is read: what they reach is walked once per
        // variable and merged (reachability from a union is the union of what each part
        // reaches), so the variables every object's expression reads (`KASAN_SANITIZE`,
        // `is-kernel-object`, `obj-y`, …) cost one walk per file.
        let mut vars: Vec<String> = Vec::new();
        let mut setting = |var: &str, _: &mut Vec<usize>| vars.push(var.to_string());
        // The decision expression reads the `*_ALL` switches, the object's own variables and
        // any other (`ccflags-y`, `is-kernel-object`), named for this object.
        if let Some(d) = rules.decision(id) {
            let refs = d.references_for(&stem);
            usage.names(&refs);
            for var in &refs {
                setting(var, &mut seeds);
            }
        }
        let guards = self.guards.get_or_insert_with(|| guards_of(file));
        // A target-specific `is-kernel-object` naming the object: its conditions and value.
        if rules.decision(id).is_some_and(|d| d.reads_kernel_object()) {
            for (t, conditions) in file.kernel_object_lines.iter().zip(&guards.targets) {
                if t.objects.iter().any(|o| naming.stem(o) == stem) {
                    let mut refs = usage.text(&t.value);
                    conditions.iter().for_each(|c| refs.extend(usage.condition(c)));
                    refs.into_iter().for_each(|var| setting(var, &mut seeds));
                }
            }
        }
        seeds.sort_unstable();
        seeds.dedup();
        // What the lines reached from the seeds use depends on the seeds alone, so it is walked
        // once per seed set.
        let reached = match self.closures.get(&seeds) {
            Some(reached) => reached,
            None => {
                let reached = closure(file, by_name, dynamic, guards, &seeds);
                self.closures.entry(seeds).or_insert(reached)
            }
        };
        usage.merge(reached);
        for var in vars {
            let reached = match self.var_closures.get(&var) {
                Some(reached) => reached,
                None => {
                    let reached = closure(file, by_name, dynamic, guards, &setters(file, by_name, dynamic, &var));
                    self.var_closures.entry(var).or_insert(reached)
                }
            };
            usage.merge(reached);
        }
        usage.symbols(id.get().config)
    }
}

/// Assignments by the variable name they assign; those whose name holds a reference apart.
fn assigns_of(file: &KbuildFile) -> Assigns {
    let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
    let mut dynamic = Vec::new();
    for (i, a) in file.assignments.iter().enumerate() {
        if a.name.contains('$') {
            dynamic.push(i);
        } else {
            by_name.entry(a.name.trim().to_string()).or_default().push(i);
        }
    }
    (by_name, dynamic)
}

/// The assignments that can set `var`: by its name, or by a name with references that can
/// expand to it.
fn setters(file: &KbuildFile, by_name: &HashMap<String, Vec<usize>>, dynamic: &[usize], var: &str) -> Vec<usize> {
    let mut found: Vec<usize> = by_name.get(var).cloned().unwrap_or_default();
    found.extend(dynamic.iter().filter(|d| could_name(&file.assignments[**d].name, var)));
    found
}

/// The symbol usage of the assignments `seeds` and of every assignment that can set a variable
/// they (their names, values or guarding conditions) reference, transitively.
fn closure(
    file: &KbuildFile,
    by_name: &HashMap<String, Vec<usize>>,
    dynamic: &[usize],
    guards: &Guards,
    seeds: &[usize],
) -> Usage {
    let mut usage = Usage::default();
    let mut vars_seen: HashSet<&str> = HashSet::new();
    let mut todo = seeds.to_vec();
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    while let Some(i) = todo.pop() {
        if !seen.insert(i) {
            continue;
        }
        let a = &file.assignments[i];
        let mut refs = usage.text(&a.name);
        refs.extend(usage.text(&a.value));
        for c in &guards.assignments[i] {
            refs.extend(usage.condition(c));
        }
        for var in refs {
            if vars_seen.insert(var) {
                todo.extend(setters(file, by_name, dynamic, var));
            }
        }
    }
    usage
}

/// Whether a name with references (`obj-$(CONFIG_X)`) can expand to `var`: its literal parts
/// appear in order, each reference standing for any text.
fn could_name(name: &str, var: &str) -> bool {
    let mut parts = Vec::new();
    let mut rest = name.trim();
    while let Some(i) = rest.find('$') {
        parts.push(&rest[..i]);
        let after = &rest[i + 1..];
        let skip = match after.chars().next() {
            Some(open @ ('(' | '{')) => {
                let close = if open == '(' { ')' } else { '}' };
                super::eval::matching(after, open, close).map_or(after.len(), |e| e + 1)
            }
            Some(c) => c.len_utf8(),
            None => 0,
        };
        rest = &after[skip..];
    }
    let (first, last) = (parts.first().copied().unwrap_or(""), rest);
    let Some(mut middle) = var.strip_prefix(first) else { return false };
    for p in parts.iter().skip(1) {
        match middle.find(p) {
            Some(i) => middle = &middle[i + p.len()..],
            None => return false,
        }
    }
    middle.ends_with(last)
}

/// For each line, every condition that decides whether it runs: those of the enclosing `if`s and
/// of the earlier branches of their `else if` chains.
struct Guards {
    /// Per assignment (and `undefine`).
    assignments: Vec<Vec<Condition>>,
    /// Per target-specific `is-kernel-object` line.
    targets: Vec<Vec<Condition>>,
}

/// The file's [`Guards`], in one walk over its events.
fn guards_of(file: &KbuildFile) -> Guards {
    let mut guards = Guards {
        assignments: vec![Vec::new(); file.assignments.len()],
        targets: vec![Vec::new(); file.kernel_object_lines.len()],
    };
    let mut stack: Vec<Vec<Condition>> = Vec::new();
    for event in &file.events {
        match event {
            Event::If(c) => stack.push(vec![c.clone()]),
            Event::Else(Some(c)) => stack.last_mut().into_iter().for_each(|l| l.push(c.clone())),
            Event::Else(None) => {}
            Event::Endif => {
                stack.pop();
            }
            Event::Assign(i) | Event::Undefine(i) => guards.assignments[*i] = stack.iter().flatten().cloned().collect(),
            Event::Target(i) => guards.targets[*i] = stack.iter().flatten().cloned().collect(),
        }
    }
    guards
}

/// How the symbols are used in the lines read: which are referenced as values (so `y` and `m`
/// differ), and the literals `ifeq` compares each with.
#[derive(Default)]
struct Usage {
    /// symbol -> (referenced as `$(…)`, compared literals)
    symbols: BTreeMap<String, (bool, BTreeSet<String>)>,
}

impl Usage {
    /// `other`'s usage added to this one's.
    fn merge(&mut self, other: &Usage) {
        for (symbol, (referenced, literals)) in &other.symbols {
            let entry = self.symbols.entry(symbol.clone()).or_default();
            entry.0 |= referenced;
            entry.1.extend(literals.iter().cloned());
        }
    }

    /// The variables `text` references; records the `CONFIG_` ones.
    fn text<'t>(&mut self, text: &'t str) -> Vec<&'t str> {
        let refs: Vec<&str> = reference_names(text).collect();
        self.names(&refs);
        refs
    }

    /// Records the `CONFIG_` names among `refs` as referenced.
    fn names(&mut self, refs: &[impl AsRef<str>]) {
        for r in refs.iter().map(AsRef::as_ref).filter(|r| r.starts_with("CONFIG_")) {
            match self.symbols.get_mut(r) {
                Some(entry) => entry.0 = true,
                None => {
                    self.symbols.insert(r.to_string(), (true, BTreeSet::new()));
                }
            }
        }
    }

    fn condition<'c>(&mut self, c: &'c Condition) -> Vec<&'c str> {
        let mut refs = Vec::new();
        for a in &c.args {
            refs.extend(self.text(a));
        }
        match c.kind {
            CondKind::Ifdef | CondKind::Ifndef => {
                if let Some(name) = c.args.first().filter(|a| !a.contains('$')) {
                    let name = name.trim();
                    if name.starts_with("CONFIG_") {
                        self.symbols.entry(name.to_string()).or_default();
                    }
                    refs.push(name);
                }
            }
            CondKind::Ifeq | CondKind::Ifneq => {
                if let [a, b] = c.args.as_slice() {
                    for (var, lit) in [(a, b), (b, a)] {
                        let bare = var.strip_prefix("$(").and_then(|v| v.strip_suffix(')'));
                        if let Some(sym) = bare.filter(|s| s.starts_with("CONFIG_") && !s.contains('$')) {
                            if !lit.contains('$') && !["y", "m", ""].contains(&lit.as_str()) {
                                self.symbols.entry(sym.to_string()).or_default().1.insert(lit.clone());
                            }
                        }
                    }
                }
            }
        }
        refs
    }

    fn symbols(self, own: &str) -> Symbols {
        self.symbols
            .into_iter()
            .filter(|(s, _)| s != own)
            .map(|(s, (referenced, literals))| {
                let mut values: Vec<String> = if referenced { vec!["y".into(), "m".into()] } else { vec!["y".into()] };
                values.push(String::new());
                values.extend(literals);
                (s, values)
            })
            .collect()
    }
}

/// Names inside `$(…)`/`${…}` references, nested ones included (`$(A_$(B))` gives `B` and the
/// dynamic `A_`).
pub(crate) fn references(text: &str) -> Vec<String> {
    reference_names(text).map(str::to_string).collect()
}

/// Whether `b` can be part of a variable name as [`references`] reads one.
pub(crate) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// [`references`], borrowed from `text`.
fn reference_names(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let name = is_name_byte;
    let mut i = 0;
    std::iter::from_fn(move || {
        while i + 1 < bytes.len() {
            match (bytes[i], bytes[i + 1]) {
                (b'$', b'(' | b'{') => {
                    let start = i + 2;
                    let end = bytes[start..].iter().position(|b| !name(*b)).map_or(bytes.len(), |e| start + e);
                    i = start;
                    if end > start {
                        // The name's bytes are ASCII: `start` and `end` are char boundaries.
                        return Some(&text[start..end]);
                    }
                }
                (b'$', b'$') => i += 2,
                _ => i += 1,
            }
        }
        None
    })
}

/// Kbuild's `is-kernel-object`: the object is in `real-obj-y`, `lib-y` or `real-obj-m`.
/// [`ANY_OBJECT`](super::ANY_OBJECT), standing for any object of the directory, is one.
fn is_kernel_object(env: &Env, object: &str) -> bool {
    object == super::ANY_OBJECT || kernel_objects(env).iter().any(|o| o == object)
}

/// What `$(is-kernel-object)` gives for `object` in a run: a target-specific value that the run
/// set, else Kbuild's own (`y` when `listed` in `obj-y`/`obj-m`/`lib-y`, else nothing).
fn kernel_value(env: &Env, object: &str, listed: bool) -> String {
    match env.kernel_object_of(object) {
        Some((value, _)) => value.to_string(),
        None if listed => "y".into(),
        None => String::new(),
    }
}

/// `real-obj-y`, `real-obj-m` and `lib-y` of a run: composite objects replaced by their parts
/// (`foo-objs`/`foo-y`/`foo-m`), subdirectories left out.
fn kernel_objects(env: &Env) -> Vec<String> {
    let lists = Lists::of(env);
    let mut out = [lists.real_obj_y, lists.real_obj_m, lists.lib].concat();
    out.retain(|o| o.ends_with(".o"));
    out.sort();
    out.dedup();
    out
}

/// What Kbuild's descent reads from a directory's kbuild file in one build: the lists of
/// `scripts/Makefile.lib` (6.12 :39-81) after the file ran, in make's words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lists {
    /// `obj-y` as the file left it (objects and `dir/` entries).
    pub obj_y: Vec<String>,
    /// `obj-m` without what `obj-y` lists (`obj-m := $(filter-out $(obj-y),$(obj-m))`).
    pub obj_m: Vec<String>,
    /// `lib-y := $(filter-out $(obj-y), $(sort $(lib-y) $(lib-m)))`.
    pub lib: Vec<String>,
    /// `subdir-y` and `subdir-m`: directories visited without linking anything of them.
    pub subdir: Vec<String>,
    /// `real-obj-y`: `obj-y`'s objects with composites replaced by their parts
    /// (`real-search` over `-objs -y`, a composite with only `foo-` counting as one).
    pub real_obj_y: Vec<String>,
    /// `real-obj-m`, the same over `-objs -y -m`.
    pub real_obj_m: Vec<String>,
}

impl Lists {
    fn of(env: &Env) -> Lists {
        let words = |v: &str| env.value(v).split_whitespace().map(str::to_string).collect::<Vec<_>>();
        // `real-search`: a word whose `-objs`/`-y`/(`-m`)/`-` variables hold something is replaced
        // by what the listed suffixes hold (nothing, when only `foo-` does).
        let real = |list: &[String], suffixes: &[&str]| -> Vec<String> {
            list.iter()
                .flat_map(|m| {
                    let Some(base) = m.strip_suffix(".o") else { return vec![m.clone()] };
                    let parts = |sfx: &[&str]| -> Vec<String> {
                        sfx.iter().flat_map(|s| words(&format!("{base}{s}"))).collect()
                    };
                    let mut any = suffixes.to_vec();
                    any.push("-");
                    if parts(&any).is_empty() {
                        vec![m.clone()]
                    } else {
                        parts(suffixes)
                    }
                })
                .collect()
        };
        let obj_y = words("obj-y");
        let obj_m: Vec<String> = words("obj-m").into_iter().filter(|m| !obj_y.contains(m)).collect();
        let mut lib: Vec<String> =
            [words("lib-y"), words("lib-m")].concat().into_iter().filter(|l| !obj_y.contains(l)).collect();
        lib.sort();
        lib.dedup();
        let objects = |l: &[String]| l.iter().filter(|o| !o.ends_with('/')).cloned().collect::<Vec<_>>();
        Lists {
            real_obj_y: real(&objects(&obj_y), &["-objs", "-y"]),
            real_obj_m: real(&objects(&obj_m), &["-objs", "-y", "-m"]),
            subdir: [words("subdir-y"), words("subdir-m")].concat(),
            obj_y,
            obj_m,
            lib,
        }
    }
}

/// Drop symbols whose value never changes the result (for any other value of it), and the
/// duplicate rows that leaves, so the condition names only what decides.
fn influential(outcomes: Vec<Outcome>) -> Vec<Outcome> {
    let count = outcomes.first().map_or(0, |o| o.symbols.len());
    let table: HashMap<Vec<&str>, bool> =
        outcomes.iter().map(|o| (o.symbols.iter().map(|(_, v)| v.as_str()).collect(), o.eval.on)).collect();
    let domain = |i: usize| outcomes.iter().map(|o| o.symbols[i].1.as_str()).collect::<BTreeSet<_>>();
    let matters: Vec<bool> = (0..count)
        .map(|i| {
            let values = domain(i);
            outcomes.iter().any(|o| {
                let mut key: Vec<&str> = o.symbols.iter().map(|(_, v)| v.as_str()).collect();
                values.iter().any(|v| {
                    key[i] = v;
                    table.get(&key).is_some_and(|on| *on != o.eval.on)
                })
            })
        })
        .collect();
    let mut out: Vec<Outcome> = Vec::new();
    for mut o in outcomes.iter().cloned() {
        o.symbols = o.symbols.into_iter().zip(&matters).filter(|(_, m)| **m).map(|(g, _)| g).collect();
        if !out.iter().any(|p| p.symbols == o.symbols) {
            out.push(o);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::makefile::parse;

    fn kasan_state(text: &str) -> State {
        state(&parse(text), &Rules::builtin(), MechId::by_name("kasan").unwrap(), "a.o", true).unwrap()
    }

    fn mech_state(text: &str, mech: &str, object: &str) -> State {
        state(&parse(text), &Rules::builtin(), MechId::by_name(mech).unwrap(), object, true).unwrap()
    }

    #[test]
    fn conditions_are_walked_by_symbol() {
        assert_eq!(kasan_state("KASAN_SANITIZE_a.o := n\n"), State::Off);
        assert_eq!(kasan_state(""), State::On);
        assert_eq!(
            kasan_state("ifdef CONFIG_KASAN\nKASAN_SANITIZE_a.o := n\nendif\n"),
            State::Off,
            "own option is set"
        );
        let s = kasan_state("ifdef CONFIG_AMD_MEM_ENCRYPT\nKASAN_SANITIZE_a.o := n\nendif\n");
        assert_eq!(s.label(), "on iff not CONFIG_AMD_MEM_ENCRYPT");
        // ifdef and ifndef of one symbol are one symbol: always off.
        let both = "ifdef CONFIG_X\nKASAN_SANITIZE_a.o := n\nendif\nifndef CONFIG_X\nKASAN_SANITIZE_a.o := n\nendif\n";
        assert_eq!(kasan_state(both), State::Off);
        // Two symbols tested together.
        let s = kasan_state("ifeq ($(CONFIG_A)$(CONFIG_B),yy)\nKASAN_SANITIZE_a.o := n\nendif\n");
        assert_eq!(s.label(), "on iff CONFIG_A!=y or CONFIG_B!=y");
        // Through a variable set under a condition.
        let s = kasan_state("ifdef CONFIG_Q\nV := n\nendif\nKASAN_SANITIZE_a.o := $(V)\n");
        assert_eq!(s.label(), "on iff not CONFIG_Q");
    }

    #[test]
    fn all_switches_are_symbols() {
        let s = mech_state("ifdef CONFIG_GCOV_PROFILE_FTRACE\nGCOV_PROFILE := y\nendif\n", "gcov", "trace.o");
        assert_eq!(s.label(), "on iff CONFIG_GCOV_PROFILE_FTRACE or CONFIG_GCOV_PROFILE_ALL");
        assert_eq!(mech_state("", "kcov", "x.o").label(), "on iff CONFIG_KCOV_INSTRUMENT_ALL");
    }

    #[test]
    fn symbols_guarding_other_objects_drop_out() {
        let mut text = String::from("KASAN_SANITIZE := n\n");
        for i in 0..30 {
            text.push_str(&format!("ifdef CONFIG_D{i}\nKASAN_SANITIZE_d{i}.o := y\nendif\n"));
        }
        text.push_str("ifdef CONFIG_ZZ\nKASAN_SANITIZE_z.o := y\nendif\n");
        let file = parse(&text);
        let rules = Rules::builtin();
        let id = MechId::by_name("kasan").unwrap();
        let mut p = Prepared::new(&file, &[]);
        assert_eq!(p.state(&rules, id, "z.o", true).unwrap().label(), "on iff CONFIG_ZZ");
        assert_eq!(p.state(&rules, id, "other.o", true), Some(State::Off));
        let objects: Vec<String> = (0..30).map(|i| format!("d{i}.o")).collect();
        assert!(p.across(&rules, id, &objects, true).is_err(), "2^30 configurations is an error, not a pass");
    }

    #[test]
    fn too_many_symbols_for_one_object_is_an_error() {
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!("ifdef CONFIG_D{i}\nKASAN_SANITIZE_a.o := n\nendif\n"));
        }
        let file = parse(&text);
        let mut p = Prepared::new(&file, &[]);
        let id = MechId::by_name("kasan").unwrap();
        assert!(p.try_state(&Rules::builtin(), id, "a.o", true).is_err());
        assert_ne!(p.state(&Rules::builtin(), id, "a.o", true), Some(State::Off));
    }

    #[test]
    fn a_config_decides() {
        let file = parse("obj-y += a.o\nobj-$(CONFIG_M) += m.o\nc-y := p.o q.o\nobj-y += c.o\nifdef CONFIG_X\nKASAN_SANITIZE_a.o := n\nendif\n");
        let rules = Rules::builtin();
        let id = MechId::by_name("kasan").unwrap();
        let on = DotConfig::parse("CONFIG_KASAN=y\nCONFIG_M=m\n").unwrap();
        let mut p = Prepared::with_config(&file, &[], &on);
        assert_eq!(p.state(&rules, id, "a.o", false), Some(State::On));
        assert_eq!(p.kernel_object("m.o"), Some(true));
        assert_eq!(p.kernel_object("p.o"), Some(true), "part of a composite");
        assert_eq!(p.kernel_object("c.o"), Some(false), "the composite itself is linked, not compiled");
        assert_eq!(p.state(&rules, id, "z.o", true), Some(State::Off), "not a kernel object in this build");
        assert_eq!(p.kernel_objects().unwrap(), ["a.o", "m.o", "p.o", "q.o"]);
        let x = DotConfig::parse("CONFIG_KASAN=y\nCONFIG_X=y\n").unwrap();
        assert_eq!(Prepared::with_config(&file, &[], &x).state(&rules, id, "a.o", true), Some(State::Off));
        let none = DotConfig::parse("CONFIG_X=y\n").unwrap();
        let s = Prepared::with_config(&file, &[], &none).outcomes(&rules, id, "a.o", true).unwrap().unwrap();
        assert_eq!(s[0].eval.decided_by, DecidedBy::NotConfigured("CONFIG_KASAN".into()));
    }
}
