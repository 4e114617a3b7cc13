//! Effective state across configurations: a kbuild file's lines for a mechanism may sit inside
//! `ifdef`/`ifeq` blocks, so one object can be exempt in some configurations and instrumented in
//! others. This walks every truth assignment of the conditions guarding that mechanism's lines,
//! with the mechanism's own `CONFIG_` taken as set (a line guarded by it applies whenever the
//! mechanism does) and every other mechanism configured.

use std::collections::HashMap;

use super::eval::{Env, Evaluate, Oracle};
use super::resolve::{evaluate, instrumented_env, Evaluation};
use super::rules::{Naming, Rules};
use crate::makefile::{CondKind, Condition, KbuildFile};
use crate::mechanism::MechId;

/// More guards than this are not enumerated (2^10 runs); the rest are evaluated normally.
const MAX_GUARDS: usize = 10;

/// The result in one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Each guarding condition and whether it held.
    pub guards: Vec<(String, bool)>,
    pub eval: Evaluation,
}

/// The state of one object for one mechanism over all configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    On,
    Off,
    /// On in some configurations, off in others.
    Depends(Vec<Outcome>),
}

impl State {
    pub fn label(&self) -> String {
        match self {
            State::On => "on".into(),
            State::Off => "off".into(),
            State::Depends(outcomes) => {
                let off: Vec<String> = outcomes.iter().filter(|o| !o.eval.on).map(|o| describe(&o.guards)).collect();
                format!("off only when {}", off.join(" or "))
            }
        }
    }
}

fn describe(guards: &[(String, bool)]) -> String {
    guards
        .iter()
        .map(|(c, v)| if *v { format!("`{c}`") } else { format!("not `{c}`") })
        .collect::<Vec<_>>()
        .join(" and ")
}

/// Conditions decided one way for the walk.
struct Fixed<'a> {
    fixed: &'a HashMap<String, bool>,
    mech_config: &'a str,
}

impl Oracle for Fixed<'_> {
    fn decide(&mut self, c: &Condition, env: &Env) -> bool {
        if let Some(v) = self.fixed.get(&c.text) {
            return *v;
        }
        match (c.kind, c.args.first()) {
            (CondKind::Ifdef, Some(a)) if a == self.mech_config => true,
            (CondKind::Ifndef, Some(a)) if a == self.mech_config => false,
            _ => Evaluate.decide(c, env),
        }
    }
}

fn is_own_guard(text: &str, mech_config: &str) -> bool {
    text == format!("ifdef {mech_config}") || text == format!("ifndef {mech_config}")
}

/// What a file's lines are for one mechanism, found once per file so that a directory with
/// thousands of objects is not rescanned per object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lines {
    /// Some line can decide the mechanism (else every object has the tree's default).
    pub touched: bool,
    /// The conditions (other than the mechanism's own option) enclosing lines that can decide
    /// every object: directory-wide lines, and per-file names still holding a variable.
    everywhere: Vec<String>,
    /// The conditions enclosing lines that name one object, by its per-file name (stem).
    by_stem: HashMap<String, Vec<String>>,
}

impl Lines {
    pub fn of(file: &KbuildFile, rules: &Rules, id: MechId, preset: &[(String, String)]) -> Lines {
        let read = rules.reads(id);
        let mech_config = id.get().config;
        let naming = rules.naming(id);
        let mut lines = Lines { touched: false, everywhere: Vec::new(), by_stem: HashMap::new() };
        for (i, d) in file.directives().filter(|(_, d)| read.contains(&d.mech)) {
            lines.touched = true;
            let frames = file.assignments[i].frames.iter().map(|f| &f.condition.text);
            let guards: Vec<String> = frames.filter(|g| !is_own_guard(g, mech_config)).cloned().collect();
            if guards.is_empty() {
                continue;
            }
            match d.object.as_deref() {
                Some(o) if !o.contains("$(") => {
                    lines.by_stem.entry(naming.stem(&substitute(o, preset))).or_default().extend(guards)
                }
                _ => lines.everywhere.extend(guards),
            }
        }
        lines
    }

    /// The conditions enclosing the lines that can decide `objects`, sorted, at most
    /// [`MAX_GUARDS`] of them.
    fn guards(&self, naming: Naming, objects: &[String]) -> Vec<String> {
        let mut guards = self.everywhere.clone();
        for o in objects {
            guards.extend(self.by_stem.get(&naming.stem(o)).into_iter().flatten().cloned());
        }
        guards.sort();
        guards.dedup();
        guards.truncate(MAX_GUARDS);
        guards
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

/// A run of a file: the mechanism option taken as set, and each guard with its fixed value.
type RunKey = (&'static str, Vec<(String, bool)>);

/// A kbuild file (with variables preset) ready to evaluate many of its objects: what its lines
/// are per mechanism, and the file run once per configuration, are kept, so a directory of
/// thousands of objects costs that many lookups rather than that many runs over the file.
pub struct Prepared<'f> {
    file: &'f KbuildFile,
    preset: Preset,
    lines: HashMap<MechId, Lines>,
    runs: HashMap<RunKey, Env>,
}

impl<'f> Prepared<'f> {
    pub fn new(file: &'f KbuildFile, preset: &[(String, String)]) -> Prepared<'f> {
        Prepared { file, preset: preset.to_vec(), lines: HashMap::new(), runs: HashMap::new() }
    }

    /// What the file's lines are for `id`.
    pub fn lines(&mut self, rules: &Rules, id: MechId) -> &Lines {
        self.lines.entry(id).or_insert_with(|| Lines::of(self.file, rules, id, &self.preset))
    }

    /// The state of `object` over all configurations; `None` when the tree does not read `id`.
    pub fn state(&mut self, rules: &Rules, id: MechId, object: &str, kernel_object: bool) -> Option<State> {
        let rows = self.across(rules, id, &[object.to_string()], kernel_object)?;
        let outcomes: Vec<Outcome> = rows.into_iter().flatten().collect();
        Some(if outcomes.iter().all(|o| o.eval.on) {
            State::On
        } else if outcomes.iter().all(|o| !o.eval.on) {
            State::Off
        } else {
            State::Depends(influential(outcomes))
        })
    }

    /// Evaluate each of `objects` in every configuration of the guards that can decide them.
    /// Returns, per configuration, the outcome for every object in order.
    pub fn across(
        &mut self,
        rules: &Rules,
        id: MechId,
        objects: &[String],
        kernel_object: bool,
    ) -> Option<Vec<Vec<Outcome>>> {
        rules.decision(id)?;
        let guards = self.lines(rules, id).guards(rules.naming(id), objects);
        let mut out = Vec::with_capacity(1 << guards.len());
        for bits in 0u32..(1 << guards.len()) {
            let assignment: Vec<(String, bool)> =
                guards.iter().enumerate().map(|(i, g)| (g.clone(), bits & (1 << i) != 0)).collect();
            let env = self.run(id.get().config, &assignment);
            let row = objects
                .iter()
                .filter_map(|o| evaluate(rules, id, o, env, kernel_object))
                .map(|eval| Outcome { guards: assignment.clone(), eval })
                .collect();
            out.push(row);
        }
        Some(out)
    }

    /// The file run in the instrumented environment with `mech_config` taken as set and the
    /// guards of `assignment` fixed; every other condition evaluated normally.
    fn run(&mut self, mech_config: &'static str, assignment: &[(String, bool)]) -> &Env {
        let (file, preset) = (self.file, &self.preset);
        self.runs.entry((mech_config, assignment.to_vec())).or_insert_with(|| {
            let fixed: HashMap<String, bool> = assignment.iter().cloned().collect();
            let mut env = instrumented_env();
            for (name, value) in preset {
                env.set(name, value);
            }
            env.run(file, &mut Fixed { fixed: &fixed, mech_config });
            env
        })
    }
}

/// Drop guards whose value never changes the result, and the duplicate rows that leaves, so
/// the state reads "off only when `ifdef X`" rather than a full truth table.
fn influential(outcomes: Vec<Outcome>) -> Vec<Outcome> {
    let on_for = |guards: &[(String, bool)]| outcomes.iter().find(|o| o.guards == guards).map(|o| o.eval.on);
    let count = outcomes.first().map_or(0, |o| o.guards.len());
    let matters: Vec<bool> = (0..count)
        .map(|g| {
            outcomes.iter().any(|o| {
                let mut flipped = o.guards.clone();
                flipped[g].1 = !flipped[g].1;
                on_for(&flipped).is_some_and(|on| on != o.eval.on)
            })
        })
        .collect();
    let mut out: Vec<Outcome> = Vec::new();
    for mut o in outcomes.iter().cloned() {
        o.guards = o.guards.into_iter().zip(&matters).filter(|(_, m)| **m).map(|(g, _)| g).collect();
        if !out.iter().any(|p| p.guards == o.guards) {
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

    #[test]
    fn conditions_are_walked_both_ways() {
        assert_eq!(kasan_state("KASAN_SANITIZE_a.o := n\n"), State::Off);
        assert_eq!(kasan_state(""), State::On);
        assert_eq!(
            kasan_state("ifdef CONFIG_KASAN\nKASAN_SANITIZE_a.o := n\nendif\n"),
            State::Off,
            "own option is set"
        );
        let s = kasan_state("ifdef CONFIG_AMD_MEM_ENCRYPT\nKASAN_SANITIZE_a.o := n\nendif\n");
        assert_eq!(s.label(), "off only when `ifdef CONFIG_AMD_MEM_ENCRYPT`");
    }
}
