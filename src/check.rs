//! Checks that need more than the policy text: recursion-prone requirements against the
//! effective state, sources of named objects, directives the policy cannot model, and drift.
//!
//! One verdict, two tiers: *drift* (the tree's directives or a generated file differ from the
//! policy; [`Code::is_drift`]) fails `check`, `gen-makefiles --check` and the pre-commit hook
//! alike; *tree findings* (a requirement the tree breaks, a stale directive) fail `check` only
//! and can be acknowledged in the policy.

mod acknowledge;
pub mod drift;
pub mod judge;
mod twice;

use std::path::Path;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Fix};
use crate::generate::snapshot::Base;
use crate::generate::Plan;
use crate::kbuild::descent::{Built, Descent};
use crate::kbuild::dotconfig::DotConfig;
use crate::kbuild::{arch, configs, has_source, DecidedBy, Rules};
use crate::makefile::{self, kbuild_file, read_kbuild, KbuildFile};
use crate::mechanism::MechId;
use crate::policy::{expand_variants, Policy, Requirement};

/// Every check; `tree` is `None` when only the policy is checked (the plan then holds the
/// rendered fragments). `base` is the last generated state (the effective snapshot), which
/// tells drift's hints which side moved.
pub fn run(policy: &Policy, rules: &Rules, tree: Option<&Path>, plan: &Plan, base: &Base) -> Diagnostics {
    run_for(policy, rules, tree, plan, base, None)
}

/// [`run`], with the requirements judged for the build of `config` (a kernel `.config`) when given.
pub fn run_for(
    policy: &Policy,
    rules: &Rules,
    tree: Option<&Path>,
    plan: &Plan,
    base: &Base,
    config: Option<&DotConfig>,
) -> Diagnostics {
    let mut diags = Diagnostics::default();
    unread_mechanisms(policy, rules, &mut diags);
    placeholder_reasons(policy, &mut diags);
    if let Some(tree) = tree {
        sources(policy, rules, tree, plan, &mut diags);
        unmodelled_lines(plan, rules, &mut diags);
        twice::findings(plan, &mut diags);
        overridden_units(policy, plan, &mut diags);
        rules_file_lines(rules, &mut diags);
        diags.extend(drift::findings(policy, plan, rules, base));
    }
    // With a `.config` and a tree: which objects the build compiles at all.
    let descent = match (tree, config) {
        (Some(t), Some(c)) => match Descent::walk(t, c) {
            Ok(d) => Some(d),
            Err(e) => {
                diags.push(Diagnostic::warning(
                    Code::BadConfig,
                    format!("cannot tell which objects this .config builds: {e}; every requirement is judged as if its objects were built"),
                ));
                None
            }
        },
        _ => None,
    };
    for req in &policy.requirements {
        if let Some(note) = tree.and_then(|t| not_applicable(req, rules, t, plan)) {
            diags.push(note);
            continue;
        }
        if let Some(note) = descent.as_ref().and_then(|d| not_built(req, d)) {
            diags.push(note);
            continue;
        }
        requirement(policy, req, rules, tree, plan, config, descent.as_ref(), &mut diags);
    }
    acknowledge::apply(policy, diags, tree.is_some())
}

/// Each requirement as `check` judges it on `tree` as planned: `None` when it does not apply
/// (the tree has no such object or directory), else the mechanisms it is not proven exempt
/// from (empty: it holds). `report` shows these, so the two never disagree.
pub fn requirement_states(policy: &Policy, rules: &Rules, tree: &Path, plan: &Plan) -> Vec<Option<Vec<MechId>>> {
    policy
        .requirements
        .iter()
        .map(|req| {
            if not_applicable(req, rules, tree, plan).is_some() {
                return None;
            }
            let mut found = Diagnostics::default();
            requirement(policy, req, rules, Some(tree), plan, None, None, &mut found);
            let mut failing: Vec<MechId> =
                found.iter().filter(|d| d.is_error()).filter_map(|d| d.subject.as_ref()?.mechanism).collect();
            failing.dedup();
            Some(failing)
        })
        .collect()
}

/// A requirement whose object (or directory) the build of the `.config` does not compile:
/// nothing to exempt there, so it does not apply; the note names the line that decides it.
fn not_built(req: &Requirement, descent: &Descent) -> Option<Diagnostic> {
    let (why, at) = match &req.path.object {
        Some(_) => {
            let a = descent.built(&req.path.text);
            if a.built != Built::N {
                return None;
            }
            (a.why, a.at)
        }
        None => {
            if descent.descends(&req.path.kbuild_dir) {
                return None;
            }
            let a = descent.built(&format!("{}/{}", req.path.kbuild_dir, crate::kbuild::ANY_OBJECT));
            (a.why, a.at)
        }
    };
    let at = at.map(|a| if a.text.is_empty() { format!(" ({a})") } else { format!(" ({a} `{}`)", a.text) });
    Some(
        Diagnostic::note(
            Code::NotApplicable,
            format!(
                "requirement for `{}` does not apply in this configuration: not built: {why}{}",
                req.path.text,
                at.unwrap_or_default()
            ),
        )
        .at(req.location.clone())
        .about(&req.path.text, None),
    )
}

/// What writing `plan` would newly break, so `gen-makefiles` refuses it (nothing is written):
/// a line the plan writes for an object with no source (a line already in the tree is the
/// tree's finding, not the write's), and a requirement that holds in the tree as it is but not
/// as planned. Judged on what the plan writes against what it read, never on the memory, and
/// with the policy's acknowledgements applied, as `check` applies them: what `check` accepts,
/// writing accepts.
pub fn new_problems(policy: &Policy, rules: &Rules, tree: &Path, plan: &Plan) -> Diagnostics {
    let mut out = Diagnostics::default();
    let mut found = Diagnostics::default();
    sources(policy, rules, tree, plan, &mut found);
    found.0.retain(|d| d.subject.as_ref().is_some_and(|s| !already_named(plan, &s.path)));
    for d in &mut found.0 {
        d.hint = Some(
            "writing this line would add a dead exemption: fix the object name in the policy (or drop the unit)".into(),
        );
    }
    let before = plan.as_read(tree);
    for req in &policy.requirements {
        let (mut now, mut then) = (Diagnostics::default(), Diagnostics::default());
        requirement(policy, req, rules, Some(tree), &before, None, None, &mut now);
        requirement(policy, req, rules, Some(tree), plan, None, None, &mut then);
        for d in then.0 {
            if !now.iter().any(|n| n.subject == d.subject && n.code == d.code) {
                found.push(Diagnostic {
                    message: format!("writing the policy would break a requirement: {}", d.message),
                    ..d
                });
            }
        }
    }
    // Acknowledged, a finding is kept on purpose: writing it is what the policy asks for.
    let judged = acknowledge::apply(policy, found, false);
    out.extend(Diagnostics(judged.0.into_iter().filter(Diagnostic::is_error).collect()));
    out
}

/// Whether the tree's kbuild file of `path`'s directory, as the plan read it, already names
/// `path`'s object in a directive: writing then adds no new line for it.
fn already_named(plan: &Plan, path: &str) -> bool {
    let (dir, object) = path.rsplit_once('/').unwrap_or(("", path));
    plan.before_parsed(dir).is_some_and(|f| f.directives().any(|(_, d)| d.object.as_deref() == Some(object)))
}

/// Planned kbuild files whose conditionals would not balance (an `else` or `endif` without its
/// `if`, an `if` never closed) where the file as read balanced: make refuses such a file, so
/// writing it is refused, a sanpolicy bug rather than anything the user wrote.
pub fn unbalanced(plan: &Plan) -> Diagnostics {
    let mut out = Diagnostics::default();
    for (dir, planned) in &plan.dirs {
        let Some(problem) = makefile::unbalanced(planned.file.parsed()) else { continue };
        if planned.before.as_ref().is_some_and(|b| makefile::unbalanced(b.parsed()).is_some()) {
            continue;
        }
        out.push(
            Diagnostic::error(
                Code::Internal,
                format!("writing `{dir}`'s kbuild file would leave it unbalanced ({}), which make refuses", problem.1),
            )
            .at(crate::diagnostic::Location::at_line(&planned.file.path, &planned.file.text, problem.0))
            .hint("nothing was written; this is a sanpolicy bug: please report it with the policy's change"),
        );
    }
    out
}

/// `when` conditions naming a Kconfig symbol the tree does not define (`CONFIG_FUNCTION_TRACR`):
/// such a line would silently never (or always) apply. Read only when a condition names one.
pub fn unknown_symbols(policy: &Policy, tree: &Path) -> Diagnostics {
    if policy.units.iter().all(|u| u.when.is_empty()) {
        return Diagnostics::default();
    }
    // A tree without its top `Kconfig` (a partial tree, a test fixture) does not declare every
    // symbol: the symbols cannot be judged there.
    if !tree.join("Kconfig").is_file() {
        return Diagnostics::default();
    }
    let defined = crate::kbuild::kconfig::defined_symbols(tree);
    if defined.is_empty() {
        return Diagnostics::default();
    }
    crate::policy::undefined_symbols(policy, &defined)
}

/// A requirement on an object or directory this tree does not have is listed, not judged.
fn not_applicable(req: &Requirement, rules: &Rules, tree: &Path, plan: &Plan) -> Option<Diagnostic> {
    let dir = tree.join(&req.path.kbuild_dir);
    let present = match &req.path.object {
        None => dir.is_dir(),
        Some(o) => {
            let text = plan.file(&req.path.kbuild_dir).map(|f| f.text.as_str()).unwrap_or("");
            let naming = req.exempt.first().map_or(crate::kbuild::Naming::TargetStem, |(id, _)| rules.naming(*id));
            dir.is_dir() && has_source(&dir, o, &Default::default(), text, naming)
        }
    };
    (!present).then(|| {
        Diagnostic::note(
            Code::NotApplicable,
            format!(
                "requirement for `{}` does not apply: the tree has no such {}",
                req.path.text,
                if req.path.object.is_some() { "object" } else { "directory" }
            ),
        )
        .at(req.location.clone())
    })
}

/// Directive lines of the tree that no unit can stand for (`KASAN_SANITIZE_x.o := n # why`):
/// sanpolicy leaves them alone, and says so once per line.
fn unmodelled_lines(plan: &Plan, rules: &Rules, diags: &mut Diagnostics) {
    let _ = rules;
    for (dir, file) in plan.files() {
        let (Some(before), Some(parsed)) = (plan.before(dir), plan.before_parsed(dir)) else { continue };
        let lines = crate::diagnostic::LineIndex::new(before);
        for (i, d) in parsed.directives() {
            let a = &parsed.assignments[i];
            // Every line a policy cannot hold, by the one answer import and gen-makefiles use.
            let Some(why) = crate::policy::holdable(parsed, a, d).err().filter(|_| !a.in_block) else { continue };
            if makefile::overridden_by(parsed, a).is_some() {
                continue; // `set-twice` names it
            }
            let path = match &d.object {
                Some(o) => format!("{dir}/{o}"),
                None => format!("{dir}/"),
            };
            diags.push(
                Diagnostic::error(Code::Unrepresentable, format!("`{}` is decided outside the policy: {why}", a.name))
                    .at(lines.line(&file.path, before, a.line))
                    .hint(if makefile::unmodelled(a, d).is_some() {
                        crate::hint!["rewrite it as a plain line (`NAME := n`, flags without comments or trailing blanks) and run ", Fix::Sync, ", or acknowledge it with `[[acknowledge]]` code `unrepresentable`"]
                    } else {
                        crate::hint!["change what the message names (the construct above the line, its condition) so that a policy can hold the line, then run ", Fix::Sync, "; or acknowledge it with `[[acknowledge]]` code `unrepresentable`"]
                    })
                    .about(&path, Some(d.mech)),
            );
        }
    }
    // Directories no policy path can name: `import` left their lines outside the policy, sync
    // cannot take them in and writing never touches them; say so, once per line.
    for (dir, (file, text, why)) in &plan.unnameable {
        let parsed = makefile::parse(text);
        let lines = crate::diagnostic::LineIndex::new(text);
        for (i, d) in parsed.directives() {
            let a = &parsed.assignments[i];
            if a.in_block {
                continue;
            }
            diags.push(
                Diagnostic::error(Code::Unrepresentable, format!("`{}` is decided outside the policy: {why}", a.name))
                    .at(lines.line(file, text, a.line))
                    .hint(format!("a policy cannot name `{dir}/`, so sync leaves the line alone: rename the directory, or acknowledge the line with `[[acknowledge]]` code `unrepresentable`"))
                    .about(&format!("{dir}/{}", d.object.as_deref().unwrap_or("")), Some(d.mech)),
            );
        }
    }
}

/// A policy line that a later construct of its file names again (`$(eval KASAN_SANITIZE_a.o
/// := y)` after the generated block): make reads what the construct sets, so the unit's value
/// may not be what Kbuild uses. Only constructs that name the variable literally are judged
/// here (an `include` or a computed name may set anything or one of many: `explain` says "not
/// certain" for those, and requirements report them as `opaque-construct` already). A unit
/// that a requirement covers is left to the requirement's finding, so one cause is one finding.
fn overridden_units(policy: &Policy, plan: &Plan, diags: &mut Diagnostics) {
    if policy.layout == crate::policy::Layout::Central {
        // The central file's section is read after the directory's own file: it wins.
        return;
    }
    for (dir, units) in policy.units_by_dir() {
        let (Some(file), Some(before), Some(parsed)) = (plan.file(dir), plan.before(dir), plan.before_parsed(dir))
        else {
            continue;
        };
        let lines = crate::diagnostic::LineIndex::new(before);
        for (i, d) in parsed.directives() {
            let a = &parsed.assignments[i];
            // Names it by the letter: a computed name (`$(eval CFLAGS_$(file) = …)` over
            // lib/Makefile's libfdt objects) may be any of many, which `explain` says.
            let names_it = |o: &crate::makefile::Opaque| {
                o.names.as_ref().is_some_and(|n| n.iter().any(|p| !p.computed && p.literal == a.name))
            };
            let later = |o: &&crate::makefile::Opaque| o.line > a.end_line && names_it(o);
            // The construct first: most lines have none, and the units are many.
            let Some(o) = parsed.opaque.iter().find(later) else { continue };
            let Some(unit) = units.iter().find(|u| u.path.object == d.object && u.settings.contains_key(&d.mech))
            else {
                continue;
            };
            let required = policy
                .requirements
                .iter()
                .any(|r| r.path.text == unit.path.text && r.exempt.iter().any(|(m, _)| *m == d.mech));
            if required {
                continue;
            }
            diags.push(
                Diagnostic::error(
                    Code::OpaqueConstruct,
                    format!(
                        "the policy's `{}` for `{}` may not hold: {} sets `{}` again after the policy's line",
                        d.mech, unit.path.text, o.construct, a.name
                    ),
                )
                .at(lines.line(&file.path, before, o.line))
                .label(format!("make reads this after line {}", a.line))
                .hint(format!(
                    "delete the construct, or say the value it means in the policy; to keep it on purpose, add an `[[acknowledge]]` with `code = \"opaque-construct\"`, `path = \"{}\"`, `mechanism = \"{}\"` and a `why`",
                    unit.path.text, d.mech
                ))
                .about(&unit.path.text, Some(d.mech)),
            );
        }
    }
}

/// Instrumentation lines in the rules files (`scripts/Makefile.lib`, `scripts/Makefile.build`):
/// read by Kbuild for every directory, so neither the policy nor a directory's kbuild file says
/// what make does. Each is a finding at its line.
fn rules_file_lines(rules: &Rules, diags: &mut Diagnostics) {
    for l in &rules.lines {
        diags.push(
            Diagnostic::error(
                Code::RulesDirective,
                format!("`{}` in `{}` sets `{}` for every directory Kbuild builds", l.text, l.file, l.mech),
            )
            .at(l.location.clone())
            .label("read for every directory, after (or before) its own kbuild file")
            .hint(format!(
                "delete the line from `{}` and say it in the policy (a `[[unit]]` for the object or directory it is meant for), so the exemption is written where Kbuild reads it for that directory alone",
                l.file
            )),
        );
    }
}

fn unread_mechanisms(policy: &Policy, rules: &Rules, diags: &mut Diagnostics) {
    for unit in &policy.units {
        for id in unit.settings.keys().filter(|id| rules.decision(**id).is_none()) {
            diags.push(
                Diagnostic::warning(
                    Code::UnreadByTree,
                    format!("this tree's Kbuild does not read `{id}`; the line has no effect"),
                )
                .at(unit.setting_locations[id].clone())
                .hint(format!("{} is not evaluated by {}", id.get().title, rules.source)),
            );
        }
    }
}

/// Imported units whose tree had no comment still need a reason written by a person.
fn placeholder_reasons(policy: &Policy, diags: &mut Diagnostics) {
    let placeholders: Vec<_> = policy.units.iter().filter(|u| crate::policy::is_placeholder(&u.why)).collect();
    if let Some(first) = placeholders.first() {
        diags.push(
            Diagnostic::warning(
                Code::PlaceholderReason,
                format!("{} unit(s) still lack a real reason", placeholders.len()),
            )
            .at(first.location.clone())
            .hint("replace each `TODO(sanpolicy import)` or `TODO(sanpolicy sync)` reason with why the unit is exempt (or forced)"),
        );
    }
}

/// Where the policy must have real reasons (`--strict`): every unit whose reason is still the
/// import placeholder, as an error at its `why`.
pub fn placeholder_errors(policy: &Policy) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for unit in policy.units.iter().filter(|u| crate::policy::is_placeholder(&u.why)) {
        diags.push(
            Diagnostic::error(Code::PlaceholderReason, format!("`{}` has no real reason", unit.path.text))
                .at(unit.why_location.clone())
                .label(if unit.why.starts_with(crate::policy::FLIPPED_REASON) {
                    "marked by `sync`: the tree turned the value around, and the reason was written for the other"
                } else {
                    "written by `sanpolicy import` where the tree had no comment"
                })
                .hint("say why the unit is exempt: what recursion, breakage or cost it avoids"),
        );
    }
    diags
}

/// Every per-object unit must name an object that has a source (or a local rule building it).
/// One finding per path: units of one object with different reasons (6.12's
/// `arch/x86/kernel/cpu/perf_event.o`, ftrace and KCOV) are one dead name, listed once at the
/// first unit, the others named in its label.
fn sources(policy: &Policy, rules: &Rules, tree: &Path, plan: &Plan, diags: &mut Diagnostics) {
    let mut reported: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut words: std::collections::HashMap<&str, crate::kbuild::KbuildWords> = std::collections::HashMap::new();
    for unit in &policy.units {
        let Some(object) = &unit.path.object else { continue };
        if let Some(&at) = reported.get(unit.path.text.as_str()) {
            let d = &mut diags.0[at];
            let label = d.label.take().unwrap_or_default();
            d.label = Some(format!("{label}; also the unit at {}", unit.location));
            continue;
        }
        let dir = tree.join(&unit.path.kbuild_dir);
        // Each directory's kbuild file read for its words once, for all of its units.
        let words = words.entry(unit.path.kbuild_dir.as_str()).or_insert_with(|| {
            crate::kbuild::KbuildWords::new(plan.file(&unit.path.kbuild_dir).map(|f| f.text.as_str()).unwrap_or(""))
        });
        let naming = unit.settings.keys().next().map_or(crate::kbuild::Naming::TargetStem, |id| rules.naming(*id));
        let found = crate::kbuild::has_source_in(&dir, object, &unit.vars, words, naming);
        if !found && dir.is_dir() {
            let variants = expand_variants(object, &unit.vars);
            reported.insert(&unit.path.text, diags.0.len());
            diags.push(
                Diagnostic::error(Code::MissingSource, format!("no source for `{}`", unit.path.text))
                    .at(unit.location.clone())
                    .label(format!(
                        "looked for {}",
                        variants
                            .iter()
                            .map(|v| format!("`{}.{{c,S,rs}}`", v.trim_end_matches(".o")))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                    .hint("the exemption is dead: fix the object name or remove the unit (or acknowledge it with `[[acknowledge]]` code `missing-source` when the line is upstream's)")
                    .about(&unit.path.text, None),
            );
        }
    }
}

/// The kbuild text the requirement is judged against: as generated, else as on disk.
fn file_for<'p>(dir: &str, tree: Option<&Path>, plan: &'p Plan) -> std::borrow::Cow<'p, KbuildFile> {
    if let Some(f) = plan.file(dir) {
        return std::borrow::Cow::Borrowed(f.parsed());
    }
    let text = tree.and_then(|t| kbuild_file(&t.join(dir))).and_then(|path| read_kbuild(&path).ok());
    std::borrow::Cow::Owned(text.map(|t| makefile::parse(&t)).unwrap_or_default())
}

#[allow(clippy::too_many_arguments)]
fn requirement(
    policy: &Policy,
    req: &Requirement,
    rules: &Rules,
    tree: Option<&Path>,
    plan: &Plan,
    config: Option<&DotConfig>,
    descent: Option<&Descent>,
    diags: &mut Diagnostics,
) {
    let dir = &req.path.kbuild_dir;
    let file = file_for(dir, tree, plan);
    for (id, loc) in &req.exempt {
        if let Some(d) = opaque(req, *id, &file, rules, tree, plan) {
            diags.push(d.at(loc.clone()).about(&req.path.text, Some(*id)));
            continue;
        }
        if let Some(d) = outside(req, *id, &file, tree, plan) {
            diags.push(d.at(loc.clone()).about(&req.path.text, Some(*id)));
            continue;
        }
        let failures = match instrumented(req, *id, &file, rules, tree, config, descent) {
            Ok(failures) => failures,
            Err(limit) => {
                diags.push(
                    Diagnostic::error(
                        Code::RecursionProne,
                        format!("cannot prove `{}` exempt from `{id}`: {limit}", req.path.text),
                    )
                    .at(loc.clone())
                    .label("too many configurations to enumerate; the requirement is not taken as holding")
                    .hint(format!("pass `--config FILE` (a kernel .config) to judge the requirement for that build, or exempt `{}` unconditionally", req.path.text))
                    .about(&req.path.text, Some(*id)),
                );
                continue;
            }
        };
        // One finding per broken object, about that object: an acknowledgement names the one
        // it was written for.
        for failure in failures {
            diags.push(broken(req, *id, loc, &failure, config, policy_units(policy, req)));
        }
    }
}

/// Where the policy's units for `req`'s path are written (with their conditions): the lines a
/// fix edits.
fn policy_units(policy: &Policy, req: &Requirement) -> Vec<(crate::diagnostic::Location, String)> {
    policy
        .units
        .iter()
        .filter(|u| u.path.text == req.path.text)
        .map(|u| {
            let shown = match u.when.as_slice() {
                [] => u.location.to_string(),
                when => format!("{} (`{}`)", u.location, when.join("` and `")),
            };
            (u.location.clone(), shown)
        })
        .collect()
}

/// The finding for one object `failure` names, instrumented against `req`.
fn broken(
    req: &Requirement,
    id: MechId,
    loc: &crate::diagnostic::Location,
    failure: &Failure,
    config: Option<&DotConfig>,
    units: Vec<(crate::diagnostic::Location, String)>,
) -> Diagnostic {
    // A requirement of sanpolicy's own has no file the user can open: the finding points at
    // the policy's unit a fix edits, and names the requirement's line in sanpolicy's source.
    let builtin = loc.path == Path::new(crate::policy::BUILTIN_REQUIREMENTS_NAME);
    let at = if builtin { units.first().map(|(l, _)| l.clone()) } else { Some(loc.clone()) };
    let origin = if builtin {
        format!(" (a requirement sanpolicy ships: `policy/recursion-prone.toml` line {} of its source)", loc.line)
    } else {
        String::new()
    };
    let units: Vec<String> = units.into_iter().map(|(_, shown)| shown).collect();
    {
        let mut message =
            format!("`{}` must be exempt from `{id}` but {} is instrumented", req.path.text, failure.object);
        if !failure.conditions.is_empty() {
            message.push_str(&format!(" when {}", failure.conditions.join(" and ")));
        }
        if config.is_some() {
            message.push_str(" in this configuration");
        }
        let (cause, fix) = match &failure.decided_by {
            DecidedBy::Object(v) => (
                format!("`{v}` turns it back on"),
                format!("drop the per-object `{v}` setting (a `force`), or list the object in `except` if it must stay instrumented"),
            ),
            DecidedBy::Directory(v) => (format!("directory value `{v}` turns it on"), format!("skip `{id}` for the object or drop the directory's `force`")),
            _ => (
                "nothing exempts it, so the kernel default applies".to_string(),
                match units.as_slice() {
                    [] => format!(
                        "add a unit for `{}` with `skip = [\"{id}\"]` to the policy (or skip `{id}` for its directory)",
                        req.path.text
                    ),
                    [one] => format!("add `{id}` to `skip` of the unit for `{}` at {one}", req.path.text),
                    many => format!(
                        "add `{id}` to `skip` of each unit for `{}` that applies to this build ({})",
                        req.path.text,
                        many.join(", ")
                    ),
                },
            ),
        };
        let d = Diagnostic::error(Code::RecursionProne, message)
            .hint(format!("{fix}. Required because: {}{origin}", req.why_line()))
            .about(&failure.subject, Some(id));
        match at {
            Some(at) => d.at(at).label(cause),
            None => d,
        }
    }
}

/// A line that passes `id`'s flags to an object of the requirement (or filters them) without the
/// mechanism's variables: what the variables say does not decide the object, so the
/// requirement is not taken as holding. One finding per requirement and mechanism, naming the
/// first such line; `[[acknowledge]]` keeps it on purpose.
fn outside(req: &Requirement, id: MechId, file: &KbuildFile, tree: Option<&Path>, plan: &Plan) -> Option<Diagnostic> {
    let lines = crate::kbuild::outside_lines(file);
    let hit = lines.iter().filter(|l| l.mech == id).find(|l| match (&req.path.object, &l.object) {
        (Some(o), _) => l.affects(o),
        (None, Some(o)) => !req.except.contains(o),
        (None, None) => true,
    })?;
    let path = shown_path(&req.path.kbuild_dir, tree, plan);
    let at = format!("{}:{}", path.display(), hit.line);
    Some(
        Diagnostic::error(
            Code::FlagsOutsidePolicy,
            format!("`{}` cannot be proven exempt from `{id}`: {at} decides it outside the policy", req.path.text),
        )
        .label(format!("{at}: {}", hit.describe()))
        .hint(format!(
            "drop `$({})` from the line at {at} if the object must stay exempt, or keep it on purpose: add an `[[acknowledge]]` with `code = \"flags-outside-policy\"`, `path = \"{}\"`, `mechanism = \"{id}\"` and a `why`",
            hit.carrier, req.path.text
        )),
    )
}

/// The kbuild file of `dir` as the findings name it: relative to the tree where there is one.
fn shown_path(dir: &str, tree: Option<&Path>, plan: &Plan) -> std::path::PathBuf {
    let path = plan
        .file(dir)
        .map(|f| f.path.clone())
        .or_else(|| tree.and_then(|t| kbuild_file(&t.join(dir))))
        .unwrap_or_else(|| Path::new(dir).join("Makefile"));
    tree.and_then(|t| path.strip_prefix(t).ok()).unwrap_or(&path).to_path_buf()
}

/// A construct in the file through which make may change `id`'s variables in ways sanpolicy
/// cannot read (`$(eval)`, `include`, …): the requirement is not proven, whatever the lines say.
fn opaque(
    req: &Requirement,
    id: MechId,
    file: &KbuildFile,
    rules: &Rules,
    tree: Option<&Path>,
    plan: &Plan,
) -> Option<Diagnostic> {
    let o = file.opaque.iter().find(|o| rules.opaque_may_change(o, id))?;
    let path = shown_path(&req.path.kbuild_dir, tree, plan);
    Some(
        Diagnostic::error(
            Code::OpaqueConstruct,
            format!("`{}` cannot be proven exempt from `{id}`: make may change it at {}:{}", req.path.text, path.display(), o.line),
        )
        .label(format!("{}:{} has {}", path.display(), o.line, o.construct))
        .hint(format!(
            "replace the construct at {}:{} by plain assignments (or delete it), so that `{id}` is decided by lines sanpolicy reads",
            path.display(),
            o.line
        )),
    )
}

struct Failure {
    /// As the message names it.
    object: String,
    /// What the finding is about: the object's path, or the requirement's directory where the
    /// object is any of its objects without a line of their own.
    subject: String,
    conditions: Vec<String>,
    decided_by: DecidedBy,
}

/// Walk every configuration of the symbols that can decide each object (see `kbuild::configs`),
/// or the one build of `config`, and find every object that is instrumented. Each object is
/// walked over its own symbols, with `$(BITS)`-style names expanded as Kbuild does.
fn instrumented(
    req: &Requirement,
    id: MechId,
    file: &KbuildFile,
    rules: &Rules,
    tree: Option<&Path>,
    config: Option<&DotConfig>,
    descent: Option<&Descent>,
) -> Result<Vec<Failure>, configs::Limit> {
    let mut objects: Vec<String> = match &req.path.object {
        Some(o) => vec![o.clone()],
        None => {
            let mut v = vec![crate::kbuild::ANY_OBJECT.to_string()];
            let named = file
                .directives()
                .filter(|(_, d)| rules.reads(id).contains(&d.mech))
                .filter_map(|(_, d)| d.object.clone());
            // `head$(BITS).o` is each name the arch Makefile can spell.
            v.extend(named.flat_map(|o| {
                if o.contains('$') {
                    arch::spellings(tree, &req.path.kbuild_dir, &o)
                } else {
                    vec![o]
                }
            }));
            v.retain(|o| !req.except.contains(o));
            v
        }
    };
    if let (Some(c), None) = (config, &req.path.object) {
        // For one build: every object the directory links in it.
        let mut preset = descent.map(|d| d.preset(&req.path.kbuild_dir)).unwrap_or_default();
        preset.extend(arch::preset(tree, &req.path.kbuild_dir, file, crate::kbuild::ANY_OBJECT, config));
        let built = configs::Prepared::with_config(file, &preset, c).kernel_objects().unwrap_or_default();
        objects.extend(built.into_iter().filter(|o| !req.except.contains(o)));
    }
    objects.sort();
    objects.dedup();
    // Objects of a directory requirement that this build does not compile have nothing to exempt.
    if let (Some(d), None) = (descent, &req.path.object) {
        let dir = &req.path.kbuild_dir;
        objects.retain(|o| o == crate::kbuild::ANY_OBJECT || d.built(&format!("{dir}/{o}")).built != Built::N);
    }
    let mut found = Vec::new();
    for object in &objects {
        let mut preset = descent.map(|d| d.preset(&req.path.kbuild_dir)).unwrap_or_default();
        preset.extend(arch::preset(tree, &req.path.kbuild_dir, file, object, config));
        let mut prepared = match config {
            Some(c) => configs::Prepared::with_config(file, &preset, c),
            None => configs::Prepared::new(file, &preset),
        };
        let Some(outcomes) = prepared.outcomes(rules, id, object, true)? else { return Ok(found) };
        let Some(outcome) = outcomes.iter().find(|o| o.eval.on) else { continue };
        let conditions = outcome
            .symbols
            .iter()
            .map(|(s, v)| if v.is_empty() { format!("`{s}` is not set") } else { format!("`{s}={v}`") })
            .collect();
        let (shown, subject) = if req.path.object.is_some() {
            ("it".to_string(), req.path.text.clone())
        } else if object == crate::kbuild::ANY_OBJECT {
            (format!("each object of `{}` without a line of its own", req.path.text), req.path.text.clone())
        } else {
            (format!("`{}{object}`", req.path.text), format!("{}{object}", req.path.text))
        };
        found.push(Failure { object: shown, subject, conditions, decided_by: outcome.eval.decided_by.clone() });
    }
    Ok(found)
}
