//! Checks that need more than the policy text: recursion-prone requirements against the
//! effective state, sources of named objects, and directives outside the generated block.

use std::path::Path;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::generate::{kbuild_file, read_kbuild, Plan};
use crate::kbuild::{configs, DecidedBy, Rules};
use crate::makefile::{self, KbuildFile};
use crate::mechanism::MechId;
use crate::policy::{expand_variants, Policy, Requirement};

/// Every check; `tree` is `None` when only the policy is checked (the plan then holds the
/// rendered fragments).
pub fn run(policy: &Policy, rules: &Rules, tree: Option<&Path>, plan: &Plan) -> Diagnostics {
    let mut diags = Diagnostics::default();
    unread_mechanisms(policy, rules, &mut diags);
    placeholder_reasons(policy, &mut diags);
    if let Some(tree) = tree {
        sources(policy, rules, tree, plan, &mut diags);
        outside_directives(plan, &mut diags);
    }
    for req in &policy.requirements {
        requirement(req, rules, tree, plan, &mut diags);
    }
    diags
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
    let placeholders: Vec<_> =
        policy.units.iter().filter(|u| u.why.starts_with(crate::import::PLACEHOLDER_REASON)).collect();
    if let Some(first) = placeholders.first() {
        diags.push(
            Diagnostic::warning(
                Code::PlaceholderReason,
                format!("{} unit(s) still lack a real reason", placeholders.len()),
            )
            .at(first.location.clone())
            .hint("replace each `TODO(sanpolicy import)` reason with why the unit is exempt"),
        );
    }
}

/// Where the policy must have real reasons (`--strict`): every unit whose reason is still the
/// import placeholder, as an error at its `why`.
pub fn placeholder_errors(policy: &Policy) -> Diagnostics {
    let mut diags = Diagnostics::default();
    for unit in policy.units.iter().filter(|u| u.why.starts_with(crate::import::PLACEHOLDER_REASON)) {
        diags.push(
            Diagnostic::error(Code::PlaceholderReason, format!("`{}` has no real reason", unit.path.text))
                .at(unit.why_location.clone())
                .label("written by `sanpolicy import` where the tree had no comment")
                .hint("say why the unit is exempt: what recursion, breakage or cost it avoids"),
        );
    }
    diags
}

/// Every per-object unit must name an object that has a source (or a local rule building it).
fn sources(policy: &Policy, rules: &Rules, tree: &Path, plan: &Plan, diags: &mut Diagnostics) {
    for unit in &policy.units {
        let Some(object) = &unit.path.object else { continue };
        let dir = tree.join(&unit.path.kbuild_dir);
        let makefile_text = plan.files.get(&unit.path.kbuild_dir).map(|f| f.text.as_str()).unwrap_or("");
        let naming = unit.settings.keys().next().map_or(crate::kbuild::Naming::TargetStem, |id| rules.naming(*id));
        let found = has_source(&dir, object, &unit.vars, makefile_text, naming);
        if !found && dir.is_dir() {
            let variants = expand_variants(object, &unit.vars);
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
                    .hint("the exemption is dead: fix the object name or remove the unit"),
            );
        }
    }
}

/// Whether `object` (relative to `dir`, with its variables expanded every declared way) has a
/// `.c`, `.S` or `.rs` source, or a `.S` that the kbuild text builds with a local rule. Under
/// `$(basetarget)` naming (6.1) a bare name also stands for the same-named objects the kbuild
/// file lists in subdirectories (`vmenter.o` for `vmx/vmenter.o`).
pub fn has_source(
    dir: &Path,
    object: &str,
    vars: &std::collections::BTreeMap<String, Vec<String>>,
    kbuild_text: &str,
    naming: crate::kbuild::Naming,
) -> bool {
    let exists = |stem: &str| ["c", "S", "rs"].iter().any(|ext| dir.join(format!("{stem}.{ext}")).is_file());
    expand_variants(object, vars).iter().any(|v| {
        let stem = v.strip_suffix(".o").unwrap_or(v);
        let name = stem.rsplit('/').next().unwrap_or(stem);
        let in_subdirectory = format!("/{name}.o");
        exists(stem)
            || kbuild_text.contains(&format!("$(obj)/{name}.S"))
            || (naming == crate::kbuild::Naming::Basetarget
                && kbuild_text
                    .split(|c: char| c.is_whitespace() || c == '=')
                    .filter_map(|w| w.strip_suffix(in_subdirectory.as_str()))
                    .any(|sub| exists(&format!("{sub}/{name}"))))
    })
}

/// Directives outside the block: for a variable the block also sets they fight over the value
/// (error); others are lines the policy does not know (warning: import them).
fn outside_directives(plan: &Plan, diags: &mut Diagnostics) {
    for file in plan.files.values() {
        let text = &file.text;
        let inside = file.parsed().block_names();
        for (i, _) in file.parsed().directives() {
            let a = &file.parsed().assignments[i];
            if a.in_block {
                continue;
            }
            let loc = Location::at_line(&file.path, text, a.line);
            diags.push(if inside.contains(a.name.as_str()) {
                Diagnostic::error(
                    Code::ConflictingDirective,
                    format!("`{}` is set both here and in the generated block", a.name),
                )
                .at(loc)
                .hint("the policy owns this variable: delete this hand-written line (or `sanpolicy import` it)")
            } else {
                Diagnostic::warning(Code::UnmanagedDirective, format!("`{}` is not in the policy", a.name))
                    .at(loc)
                    .hint(
                    "add it to the policy with a reason (`sanpolicy import --adopt` moves such lines), then regenerate",
                )
            });
        }
    }
}

/// The kbuild text the requirement is judged against: as generated, else as on disk.
fn file_for<'p>(dir: &str, tree: Option<&Path>, plan: &'p Plan) -> std::borrow::Cow<'p, KbuildFile> {
    if let Some(f) = plan.files.get(dir) {
        return std::borrow::Cow::Borrowed(f.parsed());
    }
    let text = tree.and_then(|t| kbuild_file(&t.join(dir))).and_then(|path| read_kbuild(&path).ok());
    std::borrow::Cow::Owned(text.map(|t| makefile::parse(&t)).unwrap_or_default())
}

fn requirement(req: &Requirement, rules: &Rules, tree: Option<&Path>, plan: &Plan, diags: &mut Diagnostics) {
    let dir = &req.path.kbuild_dir;
    let file = file_for(dir, tree, plan);
    for (id, loc) in &req.exempt {
        if let Some(d) = opaque(req, *id, &file, rules, tree, plan) {
            diags.push(d.at(loc.clone()));
            continue;
        }
        if let Some(failure) = first_instrumented(req, *id, &file, rules) {
            let mut message =
                format!("`{}` must be exempt from `{id}` but {} is instrumented", req.path.text, failure.object);
            if !failure.conditions.is_empty() {
                message.push_str(&format!(" when {}", failure.conditions.join(" and ")));
            }
            let (cause, fix) = match &failure.decided_by {
                DecidedBy::Object(v) => (
                    format!("`{v}` turns it back on"),
                    format!("drop the per-object `{v}` setting (a `force`), or list the object in `except` if it must stay instrumented"),
                ),
                DecidedBy::Directory(v) => (format!("directory value `{v}` turns it on"), format!("skip `{id}` for the object or drop the directory's `force`")),
                _ => (
                    "nothing exempts it, so the kernel default applies".to_string(),
                    format!("add `{id}` to `skip` of the unit for `{}` (or of its directory)", req.path.text),
                ),
            };
            diags.push(
                Diagnostic::error(Code::RecursionProne, message)
                    .at(loc.clone())
                    .label(cause)
                    .hint(format!("{fix}: {}", req.why.lines().next().unwrap_or(""))),
            );
        }
    }
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
    let read = rules.reads(id);
    let o = file.opaque.iter().find(|o| o.may_touch(id) || read.iter().any(|r| o.may_touch(*r)))?;
    let dir = &req.path.kbuild_dir;
    let path = plan
        .files
        .get(dir)
        .map(|f| f.path.clone())
        .or_else(|| tree.and_then(|t| kbuild_file(&t.join(dir))))
        .unwrap_or_else(|| Path::new(dir).join("Makefile"));
    let path = tree.and_then(|t| path.strip_prefix(t).ok()).unwrap_or(&path).to_path_buf();
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
    object: String,
    conditions: Vec<String>,
    decided_by: DecidedBy,
}

/// Walk every configuration (see `kbuild::configs`) and find one where an object is instrumented.
fn first_instrumented(req: &Requirement, id: MechId, file: &KbuildFile, rules: &Rules) -> Option<Failure> {
    let mut objects: Vec<String> = match &req.path.object {
        Some(o) => vec![o.clone()],
        None => {
            let mut v = vec![crate::kbuild::ANY_OBJECT.to_string()];
            v.extend(
                file.directives()
                    .filter(|(_, d)| d.mech == id)
                    .filter_map(|(_, d)| d.object.clone())
                    .filter(|o| !o.contains('$') && !req.except.contains(o)),
            );
            v
        }
    };
    objects.dedup();
    let rows = configs::Prepared::new(file, &[]).across(rules, id, &objects, true)?;
    let (object, outcome) = rows.iter().find_map(|row| objects.iter().zip(row).find(|(_, o)| o.eval.on))?;
    let conditions = outcome.guards.iter().map(|(g, v)| format!("`{g}` is {v}")).collect();
    let object = if req.path.object.is_some() { "it".to_string() } else { format!("`{}{object}`", req.path.text) };
    Some(Failure { object, conditions, decided_by: outcome.eval.decided_by.clone() })
}
