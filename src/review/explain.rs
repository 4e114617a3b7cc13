//! `explain`: for an object and every mechanism, the effective state under the tree's rules,
//! the line that decided it (policy entry, generated Makefile line, hand-written line, directory
//! value or the kernel default), its reason and links, and the requirements that involve it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::generate::snapshot::dir_file;
use crate::generate::Plan;
use crate::kbuild::configs::{self, State};
use crate::kbuild::descent::{self, Descent};
use crate::kbuild::dotconfig::DotConfig;
use crate::kbuild::{arch, DecidedBy, Rules};
use crate::makefile::{self, KbuildFile};
use crate::makefile::{kbuild_file, read_kbuild};
use crate::mechanism::MechId;
use crate::policy::{Policy, UnitPath};

/// What decided one mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A policy unit (through its generated line).
    Policy { unit: usize, line: Option<usize> },
    /// A line outside the generated block.
    Makefile { line: usize, text: String, comment: Option<String> },
    /// The tree's default expression, and what it means for this object (`on`, `off`, …).
    Default { text: String, at: String, meaning: String },
    /// The build's `.config` does not set the mechanism's option.
    NotConfigured(String),
    /// The tree does not read this mechanism.
    NotRead,
}

#[derive(Debug, Clone)]
pub struct MechanismExplanation {
    pub mech: MechId,
    pub state: State,
    pub source: Source,
    /// Indices into [`Explanation::opaque`]: constructs through which make may change this
    /// mechanism's decision, so the state is not certain.
    pub uncertain: Vec<usize>,
}

/// A construct in the directory's kbuild file that sanpolicy does not read
/// (`makefile::constructs`, check's `opaque-construct`): make may change these mechanisms there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpaqueAt {
    pub line: usize,
    pub construct: String,
    pub mechanisms: Vec<MechId>,
}

#[derive(Debug, Clone)]
pub struct Explanation {
    pub object: String,
    pub kbuild_dir: String,
    pub kbuild_file: Option<PathBuf>,
    pub mechanisms: Vec<MechanismExplanation>,
    /// Requirements naming the object or its directory: (index, holds).
    pub requirements: Vec<(usize, bool)>,
    /// With a tree, an object without a `.c`/`.S`/`.rs` source (nor a rule building it): the
    /// states are what Kbuild would apply to such a name, not facts about a built object.
    pub no_source: bool,
    /// With a `.config`: whether the object is linked into vmlinux or a module in that build.
    pub kernel_object: Option<bool>,
    /// The target-specific `is-kernel-object` line that decides it (with a `.config`: in that
    /// build; without: where its conditions hold).
    pub kernel_object_line: Option<usize>,
    /// With a `.config` and a tree: whether Kbuild builds the object at all in that build
    /// (its descent from the top), and for `n` the line that decides it.
    pub built: Option<descent::Answer>,
    /// Variables expanded in per-object names (`BITS=64`).
    pub preset: Vec<(String, String)>,
    /// Indices into the policy's `[[acknowledge]]` entries about this object or its directory
    /// (for a directory, also about the objects in it): findings kept on purpose.
    pub acknowledged: Vec<usize>,
    /// The opaque constructs of the directory's kbuild file that may change a mechanism.
    pub opaque: Vec<OpaqueAt>,
    /// The states above are the tree's as it is on disk; where the policy would make a
    /// mechanism's state another (the tree and the policy differ here: drift), that state.
    pub drift: Vec<(MechId, State)>,
}

/// Explain `object` (a path like `kernel/locking/lockdep.o`) over all configurations.
pub fn explain(
    policy: &Policy,
    rules: &Rules,
    tree: Option<&Path>,
    plan: Option<&Plan>,
    object: &str,
) -> Result<Explanation, String> {
    explain_for(policy, rules, tree, plan, object, None, None)
}

/// [`explain`] for the build of `config` (a kernel `.config`) when given: a definite state; with
/// the build's descent (from the same `.config`), also whether the object is built at all.
pub fn explain_for(
    policy: &Policy,
    rules: &Rules,
    tree: Option<&Path>,
    plan: Option<&Plan>,
    object: &str,
    config: Option<&DotConfig>,
    descent: Option<&Descent>,
) -> Result<Explanation, String> {
    let path = UnitPath::parse(object, None).map_err(|(m, h)| format!("{m}: {h}"))?;
    let path = match policy.units.iter().find(|u| u.path.text == path.text) {
        Some(u) => u.path.clone(),
        None => home(tree, plan, path),
    };
    let rel = path.object.clone().unwrap_or_else(|| crate::generate::snapshot::ANY_OBJECT.to_string());
    let (file, kbuild_path, disk) = file_for(policy, rules, tree, plan, &path.kbuild_dir);
    let preset = arch::preset(tree, &path.kbuild_dir, &file, &rel, config);
    // For one build, the file runs as Kbuild runs it there: with what the top Makefile exports.
    let walk_preset = match (descent, config) {
        (Some(d), Some(_)) => [d.preset(&path.kbuild_dir), preset.clone()].concat(),
        _ => preset.clone(),
    };
    let mut prepared = prepare(&file, &walk_preset, config);
    let kernel_object = prepared.kernel_object(&rel);
    let kernel_object_line = prepared.kernel_object_line(&rel);
    // `None`: the tree does not read the mechanism.
    let outcomes: BTreeMap<MechId, Option<Result<Vec<configs::Outcome>, configs::Limit>>> =
        MechId::all().map(|id| (id, prepared.outcomes(rules, id, &rel, true).transpose())).collect();
    let states: BTreeMap<MechId, Option<State>> = outcomes
        .iter()
        .map(|(id, o)| {
            let state = o.as_ref().map(|o| match o {
                Ok(rows) => State::from_outcomes(rows.clone()),
                Err(_) => State::Depends(Vec::new()),
            });
            (*id, state)
        })
        .collect();
    let opaque = opaque_in(&file, rules);
    let mechanisms = states
        .iter()
        .map(|(&id, state)| {
            let Some(state) = state.clone() else {
                return MechanismExplanation {
                    mech: id,
                    state: State::On,
                    source: Source::NotRead,
                    uncertain: Vec::new(),
                };
            };
            // The line that decides: for a conditional state, the one that exempts (or forces).
            let rows = outcomes[&id].as_ref().and_then(|o| o.as_ref().ok());
            // A line of the tree or the policy that decides some configurations is cited before
            // the default that decides the others (a `force` under `ifdef` is the line that
            // matters where it applies, not the default it overrides).
            let deciding = rows.and_then(|rows| {
                let by_line = rows.iter().find(|r| {
                    matches!(&r.eval.decided_by, DecidedBy::Object(_) | DecidedBy::Directory(_))
                        || matches!(&r.eval.decided_by, DecidedBy::Flags(v) if !v.is_empty())
                });
                let minority = rows.iter().find(|r| !r.eval.on && matches!(state, State::Depends(_)));
                by_line.or(minority).or(rows.first()).map(|r| r.eval.decided_by.clone())
            });
            let source = source(policy, rules, &file, &path, id, deciding, &preset, &state);
            let uncertain =
                opaque.iter().enumerate().filter(|(_, o)| o.mechanisms.contains(&id)).map(|(i, _)| i).collect();
            MechanismExplanation { mech: id, state, source, uncertain }
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
        .map(|(i, r)| (i, r.exempt.iter().all(|(id, _)| states[id].as_ref().is_none_or(State::is_off))))
        .collect();
    // What the policy would make of it, where that is not what the tree says now.
    let planned = plan.and_then(|p| p.file(&path.kbuild_dir)).filter(|f| disk.is_some_and(|d| d != f.text));
    let planned = planned.map(|f| f.parsed());
    let drift = match planned {
        None => Vec::new(),
        Some(planned) => {
            let mut after = prepare(planned, &walk_preset, config);
            MechId::all()
                .filter_map(|id| {
                    let now = states[&id].clone()?;
                    let then = after.outcomes(rules, id, &rel, true).transpose()?;
                    let then = then.map_or(State::Depends(Vec::new()), State::from_outcomes);
                    (then != now).then_some((id, then))
                })
                .collect()
        }
    };
    let no_source = match (tree, &path.object) {
        (Some(tree), Some(o)) => {
            let text = kbuild_path.as_deref().and_then(|p| read_kbuild(p).ok()).unwrap_or_default();
            let vars: BTreeMap<String, Vec<String>> = BTreeMap::new();
            !crate::kbuild::has_source(&tree.join(&path.kbuild_dir), o, &vars, &text, rules.naming(MechId(0)))
        }
        _ => false,
    };
    Ok(Explanation {
        object: path.text.clone(),
        kbuild_dir: path.kbuild_dir.clone(),
        kbuild_file: kbuild_path,
        mechanisms,
        requirements,
        no_source,
        kernel_object,
        kernel_object_line,
        built: descent.filter(|_| path.object.is_some()).map(|d| d.built(&path.text)),
        preset,
        acknowledged: acknowledged_for(policy, &path),
        opaque,
        drift,
    })
}

/// The configuration walk over `file`: for the build of `config`, or over all configurations.
fn prepare<'a>(
    file: &'a KbuildFile,
    preset: &[(String, String)],
    config: Option<&'a DotConfig>,
) -> configs::Prepared<'a> {
    match config {
        Some(c) => configs::Prepared::with_config(file, preset, c),
        None => configs::Prepared::new(file, preset),
    }
}

/// An object of a directory without a kbuild file is built by the nearest directory above that
/// has one, under its path from there (`arch/x86/entry/vdso/Makefile` builds
/// `vdso32/vclock_gettime.o`, and names it so in `CFLAGS_REMOVE_vdso32/vclock_gettime.o`).
fn home(tree: Option<&Path>, plan: Option<&Plan>, path: UnitPath) -> UnitPath {
    let (Some(tree), Some(_)) = (tree, &path.object) else { return path };
    let has_file = |dir: &Path| {
        plan.is_some_and(|p| dir.to_str().is_some_and(|d| p.file(d).is_some()))
            || kbuild_file(&tree.join(dir)).is_some()
    };
    let mut dir = Path::new(&path.kbuild_dir);
    if has_file(dir) {
        return path;
    }
    while let Some(up) = dir.parent().filter(|d| !d.as_os_str().is_empty()) {
        if has_file(up) {
            return up.to_str().and_then(|d| UnitPath::parse(&path.text, Some(d)).ok()).unwrap_or(path);
        }
        dir = up;
    }
    path
}

/// The constructs of `file` through which make may change a mechanism's decision: its own
/// variables, or one its decision reads (as `check` judges them for `opaque-construct`).
pub(super) fn opaque_in(file: &KbuildFile, rules: &Rules) -> Vec<OpaqueAt> {
    file.opaque
        .iter()
        .map(|o| OpaqueAt {
            line: o.line,
            construct: o.construct.clone(),
            mechanisms: MechId::all().filter(|id| rules.opaque_may_change(o, *id)).collect(),
        })
        .filter(|o| !o.mechanisms.is_empty())
        .collect()
}

/// The `[[acknowledge]]` entries about `path`: the object itself or its directory; for a
/// directory, also every path under it.
fn acknowledged_for(policy: &Policy, path: &UnitPath) -> Vec<usize> {
    let dir = format!("{}/", path.kbuild_dir);
    policy
        .acknowledged
        .iter()
        .enumerate()
        .filter(|(_, a)| {
            let a = a.path.trim_start_matches("./");
            a == path.text || a == dir || (path.is_directory() && a.starts_with(&dir))
        })
        .map(|(i, _)| i)
        .collect()
}

/// One acknowledgement as shown: `[code] path (mechanism), acknowledged at FILE:LINE: why`.
fn acknowledged_text(policy: &Policy, i: usize) -> String {
    let a = &policy.acknowledged[i];
    let mech = a.mechanism.map(|m| format!(" {m}")).unwrap_or_default();
    format!("acknowledged [{}] `{}`{mech} ({}): {}", a.code, a.path, a.location, a.why.lines().next().unwrap_or(""))
}
/// The directory's kbuild text as Kbuild reads it from the tree on disk (the answer is about
/// the tree as it is, not as `gen-makefiles` would leave it): its own file, and in the central
/// layout its section of the central file on disk after it. Without a tree, the policy's block.
fn file_for(
    policy: &Policy,
    rules: &Rules,
    tree: Option<&Path>,
    plan: Option<&Plan>,
    dir: &str,
) -> (KbuildFile, Option<PathBuf>, Option<String>) {
    if let Some(path) = tree.and_then(|t| kbuild_file(&t.join(dir))) {
        let mut text = match plan.and_then(|p| p.before(dir)) {
            Some(before) => before.to_string(),
            None => read_kbuild(&path).unwrap_or_default(),
        };
        if policy.layout == crate::policy::Layout::Central {
            let central = tree.map(|t| t.join(crate::emit::central::CENTRAL_FILE));
            let sections = central.and_then(|c| read_kbuild(&c).ok()).and_then(|c| crate::emit::central::sections(&c));
            if let Some(section) = sections.and_then(|mut s| s.remove(dir)) {
                text = format!("{text}\n{section}");
            }
        }
        return (makefile::parse(&text), Some(path), Some(text));
    }
    if let Some(f) = plan.and_then(|p| p.file(dir)) {
        return (f.parsed().clone(), Some(f.path.clone()), None);
    }
    (policy.units_by_dir().get(dir).map(|units| dir_file(units, rules)).unwrap_or_default(), None, None)
}

#[allow(clippy::too_many_arguments)]
fn source(
    policy: &Policy,
    rules: &Rules,
    file: &KbuildFile,
    path: &UnitPath,
    id: MechId,
    decided: Option<DecidedBy>,
    preset: &[(String, String)],
    state: &State,
) -> Source {
    let vars = match decided {
        Some(DecidedBy::Object(v)) | Some(DecidedBy::Directory(v)) => vec![v],
        Some(DecidedBy::Flags(vs)) => vs,
        Some(DecidedBy::NotConfigured(c)) => return Source::NotConfigured(c),
        _ => Vec::new(),
    };
    let Some(var) = vars.last() else {
        let d = rules.decision(id);
        return Source::Default {
            text: d.map(|d| d.default_text()).unwrap_or_default(),
            at: d.map(|d| format!("{}:{}", d.file, d.line)).unwrap_or_default(),
            meaning: state.label(),
        };
    };
    // Names as Kbuild expands them: every mechanism configured, `$(BITS)` and the like preset.
    let mut env = crate::kbuild::Env::with(preset.iter().cloned());
    crate::mechanism::MECHANISMS.iter().for_each(|m| env.set(m.config, "y"));
    let Some(a) = file.assignments.iter().rev().find(|a| env.expand(&a.name) == *var || a.name == *var) else {
        return Source::Default { text: format!("`{var}`"), at: String::new(), meaning: state.label() };
    };
    // A line is the policy's when it is in the generated block, or (in the in-place and central
    // layouts, where the policy's lines are ordinary lines) when a unit says it, conditions and all.
    let owned = a.in_block || policy.layout != crate::policy::Layout::Block;
    if let (true, Some(d)) = (owned, makefile::classify(a)) {
        // The deciding line may belong to another mechanism (UBSAN_SANITIZE decides signed-wrap).
        let is_dir_var = d.object.is_none();
        let when = a.when_keys();
        let unit = policy.units.iter().position(|u| {
            u.path.kbuild_dir == path.kbuild_dir
                && u.settings.contains_key(&d.mech)
                && u.path.is_directory() == is_dir_var
                && (is_dir_var || u.path == *path || configs::substitute(&u.path.text, preset) == path.text)
                && (a.in_block || u.conditions == when)
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

/// `drift` says, for a mechanism whose state the tree and the policy disagree on, what the
/// judge found and the fix it prints.
pub fn render_text(e: &Explanation, policy: &Policy, drift: &dyn Fn(MechId) -> String) -> String {
    let file = e.kbuild_file.as_deref().map_or("generated block only, no tree".to_string(), shown);
    let mut out = format!("{}  ({file})\n", e.object);
    for note in notes(e) {
        out.push_str(&format!("  note: {note}\n"));
    }
    for (id, then) in &e.drift {
        out.push_str(&format!(
            "  note: drift: `{id}` is as below in the tree, but the policy makes it {}: {}\n",
            then.label(),
            drift(*id)
        ));
    }
    for o in &e.opaque {
        out.push_str(&format!("  note: {}\n", opaque_text(e, o)));
    }
    for i in &e.acknowledged {
        out.push_str(&format!("  {}\n", acknowledged_text(policy, *i)));
    }
    for m in &e.mechanisms {
        let d = describe(&m.source, policy, e);
        out.push_str(&format!("  {:<18} {:<4} {}\n", m.mech.get().name, short(&m.state), d.what));
        if let State::Depends(_) = m.state {
            out.push_str(&format!("  {:<18}      {}\n", "", m.state.label()));
        }
        for line in d.why.iter().chain(&d.line) {
            out.push_str(&format!("  {:<18}      {line}\n", ""));
        }
        for o in m.uncertain.iter().map(|i| &e.opaque[*i]) {
            out.push_str(&format!("  {:<18}      not certain: {}:{} has {}\n", "", file, o.line, o.construct));
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
            r.why_line()
        ));
    }
    out
}

/// An opaque construct as a note on the whole answer.
fn opaque_text(e: &Explanation, o: &OpaqueAt) -> String {
    let file = e.kbuild_file.as_deref().map_or_else(|| format!("{}/", e.kbuild_dir), shown);
    let mechs: Vec<&str> = o.mechanisms.iter().map(|m| m.get().name).collect();
    format!(
        "not certain: {file}:{} has {}, through which make may change {} in ways sanpolicy does not read (opaque-construct): the states below assume it does not",
        o.line,
        o.construct,
        mechs.join(", ")
    )
}

/// What qualifies the whole answer: no source, the build it is for, the names expanded.
fn notes(e: &Explanation) -> Vec<String> {
    let mut notes = Vec::new();
    if e.no_source {
        notes.push(format!(
            "no source for `{}` in the tree (no .c, .S or .rs, nor a rule building it): the states below are what Kbuild would apply to an object of that name, not facts about a built object",
            e.object
        ));
    }
    let file = e.kbuild_file.as_deref().map_or_else(|| format!("{}/", e.kbuild_dir), shown);
    if let Some(b) = e.built.as_ref().filter(|b| b.built == descent::Built::N) {
        let at =
            b.at.as_ref().map(|a| if a.text.is_empty() { format!(" ({a})") } else { format!(" ({a} `{}`)", a.text) });
        notes.push(format!(
            "not built in this configuration: {}{}; the states below are what Kbuild would apply if it built it",
            b.why,
            at.unwrap_or_default()
        ));
    }
    let unbuilt = e.built.as_ref().is_some_and(|b| b.built == descent::Built::N);
    match (e.kernel_object, e.kernel_object_line) {
        _ if unbuilt => {}
        (Some(k), Some(line)) => notes.push(format!(
            "for the given .config: {} in this build, as {file}:{line} sets its `is-kernel-object` (a target-specific value, whatever obj-y, obj-m and lib-y say)",
            if k { "a kernel object" } else { "not a kernel object" }
        )),
        (Some(true), None) => notes.push("for the given .config: a kernel object (obj-y/obj-m/lib-y) in this build".into()),
        (Some(false), None) => {
            notes.push("for the given .config: not a kernel object in this build (not in obj-y, obj-m or lib-y)".into())
        }
        (None, line) => {
            if let Some(line) = line {
                notes.push(format!(
                    "{file}:{line} sets its `is-kernel-object` (a target-specific value): the states below use it where its conditions hold"
                ));
            }
            notes.push(
            "over all configurations, with each mechanism's own option set; `--config FILE` answers for one build"
                    .into(),
            )
        }
    }
    if !e.preset.is_empty() {
        let vars: Vec<String> = e.preset.iter().map(|(n, v)| format!("{n}={v}")).collect();
        notes.push(format!("names expanded with {} (as Kbuild does)", vars.join(", ")));
    }
    notes
}

fn short(state: &State) -> &'static str {
    match state {
        State::On => "on",
        State::Off => "off",
        State::Depends(_) => "cond",
    }
}

/// What decided one mechanism, for text and JSON.
struct Described {
    what: String,
    /// The reason (policy `why` and links, or the comment above a hand-written line).
    why: Vec<String>,
    /// Where the policy entry's line is (generated, or the tree's own in the in-place layout).
    line: Option<String>,
}

fn describe(source: &Source, policy: &Policy, e: &Explanation) -> Described {
    let file =
        e.kbuild_file.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| format!("{}/ (block)", e.kbuild_dir));
    match source {
        Source::Policy { unit, line } => {
            let u = &policy.units[*unit];
            let mut why: Vec<String> = u.why.lines().map(str::to_string).collect();
            why.extend(u.links.iter().map(|l| format!("see: {l}")));
            let when = if u.when.is_empty() { String::new() } else { format!(" under `{}`", u.when.join("` / `")) };
            Described {
                what: format!("policy {} `{}`{when}", u.location, u.path.text),
                why,
                // In the in-place layout the policy's line is an ordinary line of the file.
                line: line.map(|line| match policy.layout {
                    crate::policy::Layout::InPlace => format!("line {file}:{line}"),
                    _ => format!("generated line {file}:{line}"),
                }),
            }
        }
        Source::Makefile { line, text, comment } => Described {
            what: format!("hand-written {file}:{line} `{text}`"),
            why: comment.as_deref().map(|c| c.lines().map(str::to_string).collect()).unwrap_or_default(),
            line: None,
        },
        Source::Default { text, at, meaning } => Described {
            what: format!(
                "kernel default, meaning {meaning}: {text}{}",
                if at.is_empty() { String::new() } else { format!(" ({at})") }
            ),
            why: Vec::new(),
            line: None,
        },
        Source::NotConfigured(c) => {
            Described { what: format!("`{c}` is not set in this .config"), why: Vec::new(), line: None }
        }
        Source::NotRead => Described { what: "not read by this tree's Kbuild".into(), why: Vec::new(), line: None },
    }
}

/// JSON for scripts.
pub fn to_json(e: &Explanation, policy: &Policy) -> Value {
    let mechanisms: Vec<Value> = e
        .mechanisms
        .iter()
        .map(|m| {
            let d = describe(&m.source, policy, e);
            json!({
                "mechanism": m.mech.get().name,
                "state": short(&m.state),
                "detail": m.state.label(),
                "decided_by": d.what,
                "reason": d.why,
                "generated_line": d.line,
                "certain": m.uncertain.is_empty(),
                "policy_state": e.drift.iter().find(|(id, _)| *id == m.mech).map(|(_, s)| short(s)),
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
    let acknowledged: Vec<Value> = e
        .acknowledged
        .iter()
        .map(|i| {
            let a = &policy.acknowledged[*i];
            json!({
                "code": a.code.as_str(),
                "path": a.path,
                "mechanism": a.mechanism.map(|m| m.get().name),
                "at": a.location.to_string(),
                "why": a.why,
            })
        })
        .collect();
    let opaque: Vec<Value> = e
        .opaque
        .iter()
        .map(|o| {
            json!({
                "line": o.line,
                "construct": o.construct,
                "mechanisms": o.mechanisms.iter().map(|m| m.get().name).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "object": e.object,
        "kbuild_file": e.kbuild_file.as_deref().map(shown),
        "acknowledged": acknowledged,
        "opaque": opaque,
        "notes": notes(e),
        "no_source": e.no_source,
        "kernel_object": e.kernel_object,
        "kernel_object_line": e.kernel_object_line,
        "built": e.built.as_ref().map(|b| b.built.as_str()),
        "built_line": e.built.as_ref().and_then(|b| b.at.as_ref()).map(|a| a.to_string()),
        "mechanisms": mechanisms,
        "requirements": requirements,
    })
}
