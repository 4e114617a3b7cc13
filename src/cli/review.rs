//! `explain`, `report` and `diff`: reading the policy's effect, for people and for scripts.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::context::{display, inputs, judged, plan, CommonArgs, Sweeping, Ui};
use super::{Defaults, EXIT_BAD_INPUT, EXIT_OK};
use crate::diagnostic::{Code, Diagnostic, Diagnostics};
use crate::policy;
use crate::review::{diff, explain, report};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Objects (`kernel/locking/lockdep.o`) or directories (`mm/kasan/`) to explain.
    #[arg(required = true, value_name = "OBJECT")]
    pub objects: Vec<String>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// A kernel `.config`: answer for that build (every condition, `*_ALL` switch and
    /// mechanism option from it, and whether the object is a kernel object in it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn explain_run(args: &ExplainArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let config = match args.config.as_deref().map(super::dotconfig::read).transpose() {
        Ok(c) => c,
        Err(d) => {
            ui.report(&d);
            return EXIT_BAD_INPUT;
        }
    };
    if let Some(tree) = inputs.tree.as_deref() {
        let dirs: Vec<String> = args
            .objects
            .iter()
            .filter_map(|o| crate::policy::UnitPath::parse(&object_in_tree(o, Some(tree)), None).ok())
            .map(|p| p.kbuild_dir)
            .collect();
        let problems = super::context::arch_problems(tree, dirs.iter().map(String::as_str));
        if problems.has_errors() {
            ui.report(&problems);
            return EXIT_BAD_INPUT;
        }
    }
    let plan = inputs.tree.as_ref().map(|_| plan(&inputs, None, defaults, true, Sweeping::No));
    // Drift about what is explained is the judge's, with the fix every other command prints.
    let verdict = plan
        .as_ref()
        .map(|p| crate::check::judge::judge(judged(&inputs, None, ui), p, crate::check::judge::Mode::Explain));
    let descent = descent_for(inputs.tree.as_deref(), config.as_ref(), ui);
    let mut json = Vec::new();
    for object in &args.objects {
        let object = &object_in_tree(object, inputs.tree.as_deref());
        let (tree, plan) = (inputs.tree.as_deref(), plan.as_ref());
        let e = match explain::explain_for(
            &inputs.policy,
            &inputs.rules,
            tree,
            plan,
            object,
            config.as_ref(),
            descent.as_ref(),
        ) {
            Ok(e) => e,
            Err(message) => {
                ui.report(&Diagnostics(vec![Diagnostic::error(Code::BadPath, message)]));
                return EXIT_BAD_INPUT;
            }
        };
        if let (true, Some(t)) = (e.no_source, tree) {
            if !inputs.policy.units.iter().any(|u| u.path.text == *object) && !named_by_kbuild_file(&e) {
                let hint = match did_you_mean(t, object) {
                    Some(near) => format!("did you mean `{near}`? name an object whose source is in the tree"),
                    None => "name an object whose source (.c, .S or .rs) is in the tree".to_string(),
                };
                ui.report(&Diagnostics(vec![Diagnostic::error(
                    Code::BadPath,
                    format!("no source for `{object}` in the tree, and no unit names it"),
                )
                .hint(hint)]));
                return EXIT_BAD_INPUT;
            }
        }
        let outside = outside_lines(&e, tree);
        let object = e.object.strip_prefix(&format!("{}/", e.kbuild_dir)).unwrap_or(&e.object);
        let rules_lines = inputs.rules.lines_for(object);
        match args.format {
            Format::Json => {
                let mut j = explain::to_json(&e, &inputs.policy);
                if let Some(map) = j.as_object_mut() {
                    let lines = outside.iter().map(
                        |(at, l)| serde_json::json!({"mechanism": l.mech.get().name, "at": at, "line": l.describe()}),
                    );
                    map.insert("outside_policy".into(), serde_json::Value::Array(lines.collect()));
                    let lines = rules_lines.iter().map(|l| {
                        serde_json::json!({"mechanism": l.mech.get().name, "at": l.location.to_string(), "line": l.text})
                    });
                    map.insert("rules_files".into(), serde_json::Value::Array(lines.collect()));
                    // The judge's drift about this object, as every other command reports it.
                    let drift: Vec<&Diagnostic> = verdict
                        .iter()
                        .flat_map(|v| v.diagnostics.iter())
                        .filter(|d| d.subject.as_ref().is_some_and(|s| s.path == e.object))
                        .collect();
                    map.insert("schema".into(), serde_json::Value::from(EXPLAIN_SCHEMA));
                    map.insert("drift".into(), serde_json::to_value(drift).unwrap_or_default());
                }
                json.push(j)
            }
            _ => {
                let advice = |id: crate::mechanism::MechId| drift_advice(verdict.as_ref(), &e, id, &ui.invocation);
                out!("{}", explain::render_text(&e, &inputs.policy, &advice));
                for (at, l) in &outside {
                    outln!("  {:<18} also decided outside the policy: {at}: {}", l.mech.get().name, l.describe());
                }
                for l in &rules_lines {
                    outln!(
                        "  {:<18} not certain: `{}` at {} is read for every directory, over the state above",
                        l.mech.get().name,
                        l.text,
                        l.location
                    );
                }
            }
        }
    }
    if args.format == Format::Json {
        outln!("{}", serde_json::to_string_pretty(&json).unwrap_or_default());
    }
    EXIT_OK
}

/// The version of `explain --format json`'s objects: each also carries the judge's drift
/// findings about it, serialised as every verdict's diagnostics are.
pub const EXPLAIN_SCHEMA: &str = "sanpolicy.explain/1";

/// Kbuild's descent for the build of `config` in `tree` (both needed); a tree whose descent
/// cannot be walked is a warning, and the answers then say nothing of what is built.
pub(super) fn descent_for(
    tree: Option<&std::path::Path>,
    config: Option<&crate::kbuild::dotconfig::DotConfig>,
    ui: &mut Ui,
) -> Option<crate::kbuild::descent::Descent> {
    let (tree, config) = (tree?, config?);
    match crate::kbuild::descent::Descent::walk(tree, config) {
        Ok(d) => {
            for (file, why) in &d.unreadable {
                let w = Diagnostic::warning(
                    Code::Io,
                    format!("`{file}` cannot be read ({why}): the descent takes it as listing nothing"),
                );
                ui.report(&Diagnostics(vec![w]));
            }
            Some(d)
        }
        Err(e) => {
            let d = Diagnostic::warning(Code::BadConfig, format!("cannot tell which objects this .config builds: {e}"))
                .hint("pass the `.config` of a build of this tree (`make O=DIR …` writes DIR/.config)");
            ui.report(&Diagnostics(vec![d]));
            None
        }
    }
}

/// Lines of the object's kbuild file that pass or remove a mechanism's flags without its
/// variables (`kbuild::outside`), each with `file:line` relative to the tree: what the
/// mechanism's variables say is then not the whole answer.
fn outside_lines(
    e: &explain::Explanation,
    tree: Option<&std::path::Path>,
) -> Vec<(String, crate::kbuild::OutsideLine)> {
    let Some(path) = e.kbuild_file.as_deref() else { return Vec::new() };
    let Ok(text) = crate::makefile::read_kbuild(path) else { return Vec::new() };
    let object = e.object.strip_prefix(&format!("{}/", e.kbuild_dir)).unwrap_or(&e.object);
    let shown = tree.and_then(|t| path.strip_prefix(t).ok()).unwrap_or(path).display().to_string();
    let file = crate::makefile::parse(&text);
    crate::kbuild::affecting(&file, object).into_iter().map(|l| (format!("{shown}:{}", l.line), l)).collect()
}

/// An object as the user may type it, as the policy names it: `./mm/slub.o` and `mm/slub.c`
/// are `mm/slub.o`; from a subdirectory of the tree, `slub.c` is too.
fn object_in_tree(object: &str, tree: Option<&std::path::Path>) -> String {
    let mut o = object.trim_start_matches("./").to_string();
    for ext in [".c", ".S", ".rs"] {
        if let Some(stem) = o.strip_suffix(ext) {
            o = format!("{stem}.o");
        }
    }
    // Relative to the current directory when that is inside the tree.
    let here = tree.and_then(|t| {
        let cwd = std::env::current_dir().ok()?;
        let root = t.canonicalize().ok()?;
        cwd.strip_prefix(&root).ok().map(|p| p.to_string_lossy().into_owned()).filter(|p| !p.is_empty())
    });
    // Relative to the current directory when that names a directory of the tree; else (`./mm/slub.o`
    // typed in `kernel/locking`) relative to the tree's top, where that does.
    let dir_exists = |path: &str| {
        let parent = Path::new(path).parent().unwrap_or(Path::new(""));
        tree.is_some_and(|t| t.join(parent).is_dir())
    };
    match here {
        Some(sub) if !o.starts_with(&format!("{sub}/")) => {
            let joined = format!("{sub}/{o}");
            if !dir_exists(&joined) && dir_exists(&o) {
                o
            } else {
                joined
            }
        }
        _ => o,
    }
}

/// Whether the object's kbuild file names it (in a list, a rule or a directive): then it is an
/// object of the tree even where its source is generated or missing.
fn named_by_kbuild_file(e: &explain::Explanation) -> bool {
    let Some(path) = e.kbuild_file.as_deref() else { return false };
    let Ok(text) = crate::makefile::read_kbuild(path) else { return false };
    let object = e.object.strip_prefix(&format!("{}/", e.kbuild_dir)).unwrap_or(&e.object);
    text.split(|c: char| c.is_whitespace() || matches!(c, '=' | ':' | '+' | '(' | ')' | ',' | '\\')).any(|w| {
        w == object || w.strip_suffix(".o").is_some_and(|s| s.ends_with(&format!("_{}", object.trim_end_matches(".o"))))
    })
}

/// An object nothing names (no source, no unit, no line of its kbuild file) is a mistyped name: the closest object whose
/// source is in its directory, if one is close.
fn did_you_mean(tree: &Path, object: &str) -> Option<String> {
    let (dir, name) = object.rsplit_once('/').unwrap_or(("", object));
    let stem = name.strip_suffix(".o")?;
    let entries = std::fs::read_dir(tree.join(dir)).ok()?;
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let (s, ext) = file.rsplit_once('.')?;
            matches!(ext, "c" | "S" | "rs").then(|| (strsim::jaro_winkler(stem, s), s.to_string()))
        })
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, s)| if dir.is_empty() { format!("{s}.o") } else { format!("{dir}/{s}.o") })
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: Format,
    /// A kernel `.config` (with `--tree`): judge the requirements for that build, and say which
    /// do not apply because it does not build their objects.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn report_run(args: &ReportArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
    let mut r = report::build(&inputs.policy, &inputs.rules, &display(&inputs.policy_path));
    let config = match args.config.as_deref().map(super::dotconfig::read).transpose() {
        Ok(c) => c,
        Err(d) => {
            ui.report(&d);
            return EXIT_BAD_INPUT;
        }
    };
    if let Some(tree) = inputs.tree.as_deref() {
        let plan = plan(&inputs, None, defaults, true, Sweeping::No);
        r = r.with_tree(&inputs.policy, &inputs.rules, tree, &plan);
        if let (Some(c), Some(d)) = (config.as_ref(), descent_for(Some(tree), config.as_ref(), ui)) {
            r = r.with_config(&inputs.policy, &inputs.rules, tree, c, &d);
        }
    }
    match args.format {
        Format::Json => {
            outln!("{}", serde_json::to_string_pretty(&report::to_json(&r, &inputs.policy)).unwrap_or_default())
        }
        Format::Text => out!("{}", report::text(&r, &inputs.policy)),
        Format::Markdown => out!("{}", report::markdown(&r, &inputs.policy)),
    }
    EXIT_OK
}

/// What fixes the drift `explain` notes for `e`'s `id`: the judge's finding about it, with the
/// fix every command prints, else where to look.
fn drift_advice(
    verdict: Option<&crate::check::judge::Verdict>,
    e: &explain::Explanation,
    id: crate::mechanism::MechId,
    invocation: &crate::diagnostic::Invocation,
) -> String {
    let about = |d: &&Diagnostic| {
        d.subject
            .as_ref()
            .is_some_and(|s| s.mechanism == Some(id) && (s.path == e.object || s.path == format!("{}/", e.kbuild_dir)))
    };
    let found = verdict.and_then(|v| v.diagnostics.iter().find(about));
    match found {
        Some(d) => match &d.fix {
            Some(fix) => format!("{}; fix: `{}`", d.message, invocation.render(fix)),
            None => format!(
                "{}; a person must decide: {}",
                d.message,
                d.hint.as_ref().map(|h| h.render(invocation)).unwrap_or_default()
            ),
        },
        None => {
            format!("`{}` says which side moved and how to fix it", invocation.render(&crate::diagnostic::Fix::Check))
        }
    }
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Compare the policy with its version at this git revision (default: HEAD).
    #[arg(long, value_name = "REV", conflicts_with = "files")]
    pub base: Option<String>,
    /// Or compare two policy files: OLD NEW.
    #[arg(num_args = 2, value_names = ["OLD", "NEW"])]
    pub files: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: Format,
}

pub fn diff_run(args: &DiffArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let (old, new, title) = if let [old, new] = args.files.as_slice() {
        let common = CommonArgs { policy: Some(new.clone()), tree: args.common.tree.clone() };
        let Ok(inputs) = inputs(&common, defaults, true, ui) else { return EXIT_BAD_INPUT };
        let (old_policy, diags) = policy::load(old);
        if report_bad(&diags, ui) {
            return EXIT_BAD_INPUT;
        }
        (old_policy, inputs, format!("`{}` → `{}`", display(old), display(new)))
    } else {
        let Ok(inputs) = inputs(&args.common, defaults, true, ui) else { return EXIT_BAD_INPUT };
        let rev = args.base.clone().unwrap_or_else(|| "HEAD".into());
        let reader = match diff::git_reader(&rev, &inputs.policy_path) {
            Ok(r) => r,
            Err(d) => {
                ui.report(&Diagnostics(vec![*d]));
                return EXIT_BAD_INPUT;
            }
        };
        // A policy added since `rev` is compared with an empty one: everything it does is new.
        let absent = reader(&inputs.policy_path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        let (old_policy, diags) =
            if absent { Default::default() } else { policy::load_with(&inputs.policy_path, &reader) };
        if report_bad(&diags, ui) {
            return EXIT_BAD_INPUT;
        }
        let since = if absent { format!("{rev} (where it did not exist)") } else { rev.clone() };
        let title = format!("`{}` since {since}", display(&inputs.policy_path));
        (old_policy, inputs, title)
    };
    let changes = diff::diff(&old, &new.policy, &new.rules);
    match args.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&diff::to_json(&changes)).unwrap_or_default()),
        Format::Markdown => out!("{}", diff::markdown(&changes, &title)),
        Format::Text => {
            for c in &changes {
                outln!("{}", diff::line(c));
            }
        }
    }
    EXIT_OK
}

fn report_bad(diags: &Diagnostics, ui: &mut Ui) -> bool {
    if diags.has_errors() {
        ui.report(diags);
        eprintln!("error: the base policy does not parse");
        return true;
    }
    false
}
