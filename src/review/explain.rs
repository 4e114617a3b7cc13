//! `explain`: for an object and every mechanism, the effective state under the tree's rules,
//! the line that decided it (policy entry, generated Makefile line, hand-written line, directory
//! value or the kernel default), its reason and links, and the requirements that involve it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::effective::dir_file;
use crate::generate::{kbuild_file, read_kbuild, Plan};
use crate::kbuild::configs::{self, State};
use crate::kbuild::{evaluate, instrumented_env, DecidedBy, Evaluate, Rules};
use crate::makefile::{self, KbuildFile};
use crate::mechanism::MechId;
use crate::policy::{Policy, UnitPath};

/// What decided one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A policy unit (through its generated line).
    Policy { unit: usize, line: Option<usize> },
    /// A line outside the generated block.
    Makefile { line: usize, text: String, comment: Option<String> },
    /// The tree's default expression.
    Default { text: String, at: String },
    /// The tree does not read this mechanism.
    NotRead,
}

#[derive(Debug, Clone)]
pub struct MechanismExplanation {
    pub mech: MechId,
    pub state: State,
    pub source: Source,
}

#[derive(Debug, Clone)]
pub struct Explanation {
    pub object: String,
    pub kbuild_dir: String,
    pub kbuild_file: Option<PathBuf>,
    pub mechanisms: Vec<MechanismExplanation>,
    /// Requirements naming the object or its directory: (index, holds).
    pub requirements: Vec<(usize, bool)>,
}

/// Explain `object` (a path like `kernel/locking/lockdep.o`).
pub fn explain(
    policy: &Policy,
    rules: &Rules,
    tree: Option<&Path>,
    plan: Option<&Plan>,
    object: &str,
) -> Result<Explanation, String> {
    let path = UnitPath::parse(object, None).map_err(|(m, h)| format!("{m}: {h}"))?;
    let path = policy.units.iter().find(|u| u.path.text == path.text).map_or(path, |u| u.path.clone());
    let rel = path.object.clone().unwrap_or_else(|| super::effective::ANY_OBJECT.to_string());
    let (file, kbuild_path) = file_for(policy, rules, tree, plan, &path.kbuild_dir);
    let mut env = instrumented_env();
    env.run(&file, &mut Evaluate);
    // `None`: the tree does not read the mechanism.
    let mut prepared = configs::Prepared::new(&file, &[]);
    let states: BTreeMap<MechId, Option<State>> =
        MechId::all().map(|id| (id, prepared.state(rules, id, &rel, true))).collect();
    let mechanisms = states
        .iter()
        .map(|(&id, state)| {
            let Some(state) = state.clone() else {
                return MechanismExplanation { mech: id, state: State::On, source: Source::NotRead };
            };
            let decided = evaluate(rules, id, &rel, &env, true).map(|e| e.decided_by);
            MechanismExplanation { mech: id, state, source: source(policy, rules, &file, &path, id, decided) }
        })
        .collect();
    let requirements = policy
        .requirements
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.path == path
                || (r.path.is_directory() && r.path.kbuild_dir == path.kbuild_dir && !r.except.contains(&rel))
        })
        .map(|(i, r)| (i, r.exempt.iter().all(|(id, _)| states[id].as_ref().is_none_or(|s| *s == State::Off))))
        .collect();
    Ok(Explanation {
        object: path.text.clone(),
        kbuild_dir: path.kbuild_dir.clone(),
        kbuild_file: kbuild_path,
        mechanisms,
        requirements,
    })
}

fn file_for(
    policy: &Policy,
    rules: &Rules,
    tree: Option<&Path>,
    plan: Option<&Plan>,
    dir: &str,
) -> (KbuildFile, Option<PathBuf>) {
    if let Some(f) = plan.and_then(|p| p.files.get(dir)) {
        return (f.parsed().clone(), Some(f.path.clone()));
    }
    if let Some(path) = tree.and_then(|t| kbuild_file(&t.join(dir))) {
        let text = read_kbuild(&path).unwrap_or_default();
        return (makefile::parse(&text), Some(path));
    }
    (policy.units_by_dir().get(dir).map(|units| dir_file(units, rules)).unwrap_or_default(), None)
}

fn source(
    policy: &Policy,
    rules: &Rules,
    file: &KbuildFile,
    path: &UnitPath,
    id: MechId,
    decided: Option<DecidedBy>,
) -> Source {
    let vars = match decided {
        Some(DecidedBy::Object(v)) | Some(DecidedBy::Directory(v)) => vec![v],
        Some(DecidedBy::Flags(vs)) => vs,
        _ => Vec::new(),
    };
    let Some(var) = vars.last() else {
        let d = rules.decision(id);
        return Source::Default {
            text: d.map(|d| d.default_text()).unwrap_or_default(),
            at: d.map(|d| format!("{}:{}", d.file, d.line)).unwrap_or_default(),
        };
    };
    let env = instrumented_env();
    let Some(a) = file.assignments.iter().rev().find(|a| env.expand(&a.name) == *var || a.name == *var) else {
        return Source::Default { text: format!("`{var}`"), at: String::new() };
    };
    if let (true, Some(d)) = (a.in_block, makefile::classify(a)) {
        // The deciding line may belong to another mechanism (UBSAN_SANITIZE decides signed-wrap).
        let is_dir_var = d.object.is_none();
        let unit = policy.units.iter().position(|u| {
            u.path.kbuild_dir == path.kbuild_dir
                && u.settings.contains_key(&d.mech)
                && u.path.is_directory() == is_dir_var
                && (is_dir_var || u.path == *path)
        });
        if let Some(unit) = unit {
            return Source::Policy { unit, line: Some(a.line) };
        }
    }
    Source::Makefile {
        line: a.line,
        text: format!("{} {} {}", a.name, a.op.as_str(), a.value),
        comment: a.comment.clone(),
    }
}

/// Human text.
fn shown(path: &Path) -> String {
    let text = path.display().to_string();
    text.strip_prefix("./").map(str::to_string).unwrap_or(text)
}

pub fn render_text(e: &Explanation, policy: &Policy) -> String {
    let file = e.kbuild_file.as_deref().map_or("generated block only, no tree".to_string(), shown);
    let mut out = format!("{}  ({file})\n", e.object);
    for m in &e.mechanisms {
        let (what, why) = describe(&m.source, policy, e);
        out.push_str(&format!("  {:<18} {:<4} {what}\n", m.mech.get().name, short(&m.state)));
        if let State::Depends(_) = m.state {
            out.push_str(&format!("  {:<18}      {}\n", "", m.state.label()));
        }
        for line in why {
            out.push_str(&format!("  {:<18}      {line}\n", ""));
        }
    }
    for (i, holds) in &e.requirements {
        let r = &policy.requirements[*i];
        let mechs: Vec<&str> = r.exempt.iter().map(|(id, _)| id.get().name).collect();
        out.push_str(&format!(
            "  required: exempt from {} ({}) {}\n    {}\n",
            mechs.join(", "),
            r.location,
            if *holds { "holds" } else { "BROKEN" },
            r.why.lines().next().unwrap_or("")
        ));
    }
    out
}

fn short(state: &State) -> &'static str {
    match state {
        State::On => "on",
        State::Off => "off",
        State::Depends(_) => "cond",
    }
}

/// (what decided, reason lines)
fn describe(source: &Source, policy: &Policy, e: &Explanation) -> (String, Vec<String>) {
    let file =
        e.kbuild_file.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| format!("{}/ (block)", e.kbuild_dir));
    match source {
        Source::Policy { unit, line } => {
            let u = &policy.units[*unit];
            let mut why: Vec<String> = u.why.lines().map(str::to_string).collect();
            why.extend(u.links.iter().map(|l| format!("see: {l}")));
            if let Some(line) = line {
                why.push(format!("generated line {file}:{line}"));
            }
            (format!("policy {} `{}`", u.location, u.path.text), why)
        }
        Source::Makefile { line, text, comment } => (
            format!("hand-written {file}:{line} `{text}`"),
            comment.as_deref().map(|c| c.lines().map(str::to_string).collect()).unwrap_or_default(),
        ),
        Source::Default { text, at } => {
            (format!("kernel {text}{}", if at.is_empty() { String::new() } else { format!(" ({at})") }), Vec::new())
        }
        Source::NotRead => ("not read by this tree's Kbuild".into(), Vec::new()),
    }
}

/// JSON for scripts.
pub fn to_json(e: &Explanation, policy: &Policy) -> Value {
    let mechanisms: Vec<Value> = e
        .mechanisms
        .iter()
        .map(|m| {
            let (decided_by, why) = describe(&m.source, policy, e);
            json!({
                "mechanism": m.mech.get().name,
                "state": short(&m.state),
                "detail": m.state.label(),
                "decided_by": decided_by,
                "reason": why,
            })
        })
        .collect();
    let requirements: Vec<Value> = e
        .requirements
        .iter()
        .map(|(i, holds)| {
            let r = &policy.requirements[*i];
            json!({
                "path": r.path.text,
                "exempt": r.exempt.iter().map(|(id, _)| id.get().name).collect::<Vec<_>>(),
                "at": r.location.to_string(),
                "holds": holds,
                "why": r.why,
            })
        })
        .collect();
    json!({
        "object": e.object,
        "kbuild_file": e.kbuild_file.as_deref().map(shown),
        "mechanisms": mechanisms,
        "requirements": requirements,
    })
}
