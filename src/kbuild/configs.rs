//! Effective state across configurations: a kbuild file's lines for a mechanism may sit inside
//! `ifdef`/`ifeq` blocks, so one object can be exempt in some configurations and instrumented in
//! others. This walks every truth assignment of the conditions guarding that mechanism's lines,
//! with the mechanism's own `CONFIG_` taken as set (a line guarded by it applies whenever the
//! mechanism does) and every other mechanism configured.

use std::collections::HashMap;

use super::eval::{Env, Evaluate, Oracle};
use super::resolve::{evaluate, instrumented_env, Evaluation};
use super::rules::Rules;
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

/// Whether any line of `file` can decide `id` (else every object has the tree's default).
pub fn touches(file: &KbuildFile, rules: &Rules, id: MechId) -> bool {
    let read = rules.reads(id);
    file.directives().any(|(_, d)| read.contains(&d.mech))
}

/// The conditions enclosing the lines that can decide `id` for `objects` (all objects when
/// `None`), other than the mechanism's own option.
pub fn guards(
    file: &KbuildFile,
    rules: &Rules,
    id: MechId,
    objects: Option<&[String]>,
    preset: &[(String, String)],
) -> Vec<String> {
    let mech_config = id.get().config;
    let read = rules.reads(id);
    let naming = rules.naming(id);
    let substitute = |text: &str| preset.iter().fold(text.to_string(), |t, (n, v)| t.replace(&format!("$({n})"), v));
    let stems: Option<Vec<String>> = objects.map(|os| os.iter().map(|o| naming.stem(o)).collect());
    let mut guards: Vec<String> = file
        .directives()
        .filter(|(_, d)| read.contains(&d.mech))
        .filter(|(_, d)| match (&d.object, &stems) {
            (Some(o), Some(stems)) => stems.contains(&naming.stem(&substitute(o))) || o.contains("$("),
            _ => true,
        })
        .flat_map(|(i, _)| file.assignments[i].frames.iter().map(|f| f.condition.text.clone()))
        .filter(|g| !is_own_guard(g, mech_config))
        .collect();
    guards.sort();
    guards.dedup();
    guards.truncate(MAX_GUARDS);
    guards
}

/// Evaluate each of `objects` (relative to the file's directory) in every configuration.
/// Returns, per configuration, the outcome for every object in order. `None` when the tree does
/// not read `id`.
pub fn across(
    file: &KbuildFile,
    rules: &Rules,
    id: MechId,
    objects: &[String],
    kernel_object: bool,
) -> Option<Vec<Vec<Outcome>>> {
    across_with(file, rules, id, objects, kernel_object, &[])
}

/// [`across`] with extra variables preset (values for `$(BITS)` in names).
pub fn across_with(
    file: &KbuildFile,
    rules: &Rules,
    id: MechId,
    objects: &[String],
    kernel_object: bool,
    preset: &[(String, String)],
) -> Option<Vec<Vec<Outcome>>> {
    rules.decision(id)?;
    let guards = guards(file, rules, id, Some(objects), preset);
    let mech_config = id.get().config;
    let mut out = Vec::with_capacity(1 << guards.len());
    for bits in 0u32..(1 << guards.len()) {
        let fixed: HashMap<String, bool> =
            guards.iter().enumerate().map(|(i, g)| (g.clone(), bits & (1 << i) != 0)).collect();
        let mut env = instrumented_env();
        for (name, value) in preset {
            env.set(name, value);
        }
        env.run(file, &mut Fixed { fixed: &fixed, mech_config });
        let assignment: Vec<(String, bool)> = guards.iter().map(|g| (g.clone(), fixed[g])).collect();
        let row = objects
            .iter()
            .filter_map(|o| evaluate(rules, id, o, &env, kernel_object))
            .map(|eval| Outcome { guards: assignment.clone(), eval })
            .collect();
        out.push(row);
    }
    Some(out)
}

/// The state of one object over all configurations.
pub fn state(file: &KbuildFile, rules: &Rules, id: MechId, object: &str, kernel_object: bool) -> Option<State> {
    state_with(file, rules, id, object, kernel_object, &[])
}

/// [`state`] with extra variables preset.
pub fn state_with(
    file: &KbuildFile,
    rules: &Rules,
    id: MechId,
    object: &str,
    kernel_object: bool,
    preset: &[(String, String)],
) -> Option<State> {
    let rows = across_with(file, rules, id, &[object.to_string()], kernel_object, preset)?;
    let outcomes: Vec<Outcome> = rows.into_iter().flatten().collect();
    Some(if outcomes.iter().all(|o| o.eval.on) {
        State::On
    } else if outcomes.iter().all(|o| !o.eval.on) {
        State::Off
    } else {
        State::Depends(influential(outcomes))
    })
}

/// [`state_with`] reusing `base`, the file already run in the instrumented environment with
/// normal evaluation (and `preset`): when no condition guards the deciding lines, that run is
/// the only configuration, so one run serves every mechanism of an object.
pub fn state_in(
    file: &KbuildFile,
    rules: &Rules,
    id: MechId,
    object: &str,
    preset: &[(String, String)],
    base: &Env,
) -> Option<State> {
    if !guards(file, rules, id, Some(&[object.to_string()]), preset).is_empty() {
        return state_with(file, rules, id, object, true, preset);
    }
    let on = evaluate(rules, id, object, base, true)?.on;
    Some(if on { State::On } else { State::Off })
}

/// The instrumented environment with `preset`, after running `file` with normal evaluation.
pub fn base_env(file: &KbuildFile, preset: &[(String, String)]) -> Env {
    let mut env = instrumented_env();
    for (name, value) in preset {
        env.set(name, value);
    }
    env.run(file, &mut Evaluate);
    env
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
