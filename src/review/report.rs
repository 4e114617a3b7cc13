//! `report`: the whole policy as a reviewable summary — per mechanism, how many objects and
//! directories are exempt or forced, by reason category, with the recursion-prone set marked.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use std::path::Path;

use super::explain::{opaque_in, OpaqueAt};
use crate::generate::snapshot::{dir_files, ANY_OBJECT};
use crate::kbuild::configs::{self, State};
use crate::kbuild::descent::{Built, Descent};
use crate::kbuild::dotconfig::DotConfig;
use crate::kbuild::{arch, Rules};
use crate::makefile::{self, KbuildFile};
use crate::makefile::{kbuild_file, read_kbuild};
use crate::mechanism::MechId;
use crate::policy::{Policy, Setting};

/// Reason categories, first match wins. A keyword matches case-insensitively at the start of a
/// word of the reason (`recurs` matches "recursion", `efi` does not match "Makefile"); a keyword
/// of several words matches those words in a row (`entry code`, `real-mode` = `real mode`).
const CATEGORIES: &[(&str, &[&str])] = &[
    ("recursion", &["recurs", "runtime", "self-instrument", "deadlock", "reentr"]),
    ("noinstr / entry", &["noinstr", "entry code", "entry path"]),
    ("early boot / no shadow", &["early", "boot", "shadow", "mmu", "real mode", "decompress", "relocat"]),
    ("user space / vDSO", &["vdso", "user space", "userspace"]),
    ("firmware / hypervisor", &["firmware", "efi", "hypervisor", "smc", "sbi", "bios", "hyp"]),
    ("coverage noise", &["coverage", "non-deterministic", "noise", "flicker", "uninteresting"]),
    ("performance", &["performance", "overhead", "build time", "slow"]),
    ("tests", &["test"]),
];

pub const NO_REASON: &str = "no reason yet";
pub const OTHER: &str = "other";

/// The category a reason falls in.
pub fn category(why: &str) -> &'static str {
    if crate::policy::is_placeholder(why) {
        return NO_REASON;
    }
    let lower = why.to_lowercase();
    let words = words(&lower);
    CATEGORIES
        .iter()
        .find(|(_, keywords)| keywords.iter().any(|k| matches_words(&words, &self::words(k))))
        .map_or(OTHER, |(name, _)| name)
}

/// A unit's category: the one its `category` key names, or the one its reason's words say.
pub fn unit_category(unit: &crate::policy::Unit) -> String {
    unit.category.clone().unwrap_or_else(|| category(&unit.why).to_string())
}

/// The words of a text: runs of letters and digits (`self-instrument` is two words).
fn words(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect()
}

/// Whether `keyword`'s words occur in a row in `words`, the last one as the start of a word.
fn matches_words(words: &[&str], keyword: &[&str]) -> bool {
    let Some((last, exact)) = keyword.split_last() else { return false };
    words.windows(keyword.len()).any(|w| w[..exact.len()] == *exact && w[exact.len()].starts_with(last))
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub objects_skipped: usize,
    pub directories_skipped: usize,
    pub forced: usize,
    pub by_category: BTreeMap<String, usize>,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub policy: String,
    pub units: usize,
    pub objects: usize,
    pub directories: usize,
    pub per_mechanism: BTreeMap<MechId, Counts>,
    /// (requirement index, mechanisms that are not exempt)
    pub requirements: Vec<(usize, Vec<MechId>)>,
    /// With a tree: the requirements that do not apply to it (no such object or directory),
    /// as `check` counts them.
    pub not_applicable: std::collections::BTreeSet<usize>,
    /// With a tree ([`Report::with_tree`]): the opaque constructs in the kbuild files of the
    /// directories the policy names, as (directory, file shown, construct).
    pub opaque: Vec<(String, String, OpaqueAt)>,
    /// With a `.config` ([`Report::with_config`]): requirements whose object or directory that
    /// build does not compile, by index, with why and the deciding line.
    pub not_built: BTreeMap<usize, String>,
}

impl Report {
    /// The report with what only the tree can say: the opaque constructs (check's
    /// `opaque-construct`) in the kbuild file of every directory a unit or requirement names,
    /// through which make may change a mechanism there, so the report is not certain there.
    pub fn with_tree(mut self, policy: &Policy, rules: &Rules, tree: &Path, plan: &crate::generate::Plan) -> Report {
        // The requirements as `check` judges them on this tree (not on the policy's lines alone).
        for (i, state) in crate::check::requirement_states(policy, rules, tree, plan).into_iter().enumerate() {
            match state {
                None => {
                    self.not_applicable.insert(i);
                    self.requirements[i].1.clear();
                }
                Some(failing) => self.requirements[i].1 = failing,
            }
        }
        let mut dirs: Vec<&str> = policy.directories();
        dirs.extend(policy.requirements.iter().map(|r| r.path.kbuild_dir.as_str()));
        dirs.sort_unstable();
        dirs.dedup();
        for dir in dirs {
            let Some(path) = kbuild_file(&tree.join(dir)) else { continue };
            let Ok(text) = read_kbuild(&path) else { continue };
            let shown = path.strip_prefix(tree).unwrap_or(&path).display().to_string();
            for o in opaque_in(&makefile::parse(&text), rules) {
                self.opaque.push((dir.to_string(), shown.clone(), o));
            }
        }
        self
    }

    /// The requirements judged for the build of `config` instead of every configuration: a
    /// requirement whose objects the build does not compile (`descent`) does not apply, the
    /// others are broken where an object the build compiles is instrumented.
    pub fn with_config(
        mut self,
        policy: &Policy,
        rules: &Rules,
        tree: &Path,
        config: &DotConfig,
        descent: &Descent,
    ) -> Report {
        let files = dir_files(policy, rules);
        let empty = KbuildFile::default();
        for (i, broken) in self.requirements.iter_mut() {
            let r = &policy.requirements[*i];
            let dir = &r.path.kbuild_dir;
            let answer = match &r.path.object {
                Some(_) => Some(descent.built(&r.path.text)).filter(|a| a.built == Built::N),
                None => (!descent.descends(dir)).then(|| descent.built(&format!("{dir}/{ANY_OBJECT}"))),
            };
            if let Some(a) = answer {
                let at = a.at.map(|a| format!(" ({a})")).unwrap_or_default();
                self.not_built.insert(*i, format!("{}{at}", a.why));
                broken.clear();
                continue;
            }
            // The tree's own file for the directory (what that build reads), else the policy's.
            let parsed = kbuild_file(&tree.join(dir)).and_then(|p| read_kbuild(&p).ok()).map(|t| makefile::parse(&t));
            let file = parsed.as_ref().or(files.get(dir)).unwrap_or(&empty);
            let mut preset = descent.preset(dir);
            preset.extend(arch::preset(Some(tree), dir, file, ANY_OBJECT, Some(config)));
            let mut prepared = configs::Prepared::with_config(file, &preset, config);
            let objects: Vec<String> = match &r.path.object {
                Some(o) => vec![o.clone()],
                None => prepared
                    .kernel_objects()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|o| !r.except.contains(o) && descent.built(&format!("{dir}/{o}")).built != Built::N)
                    .collect(),
            };
            *broken = r
                .exempt
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| {
                    objects.iter().any(|o| prepared.state(rules, *id, o, true).is_some_and(|s| s != State::Off))
                })
                .collect();
        }
        self
    }

    /// The opaque constructs of requirement `i`'s directory that may change one of its mechanisms.
    fn opaque_for<'a>(&'a self, policy: &'a Policy, i: usize) -> impl Iterator<Item = &'a (String, String, OpaqueAt)> {
        let r = &policy.requirements[i];
        self.opaque.iter().filter(move |(d, _, o)| {
            *d == r.path.kbuild_dir && r.exempt.iter().any(|(id, _)| o.mechanisms.contains(id))
        })
    }
}

/// The reasons of the `[[acknowledge]]` entries that keep requirement `i`'s broken mechanisms
/// on purpose (code `recursion-prone`, its path, no mechanism or a broken one).
fn acknowledged_reasons(policy: &Policy, i: usize, broken: &[MechId]) -> Vec<String> {
    let r = &policy.requirements[i];
    policy
        .acknowledged
        .iter()
        .filter(|a| a.code == crate::diagnostic::Code::RecursionProne && a.path == r.path.text)
        .filter(|a| a.mechanism.is_none_or(|m| broken.contains(&m)))
        .map(|a| a.why.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A requirement's status: holds, or broken (acknowledged, with the reason), and whether an
/// opaque construct makes it uncertain. `strong` wraps the broken word (Markdown bold).
fn requirement_status(report: &Report, policy: &Policy, i: usize, broken: &[MechId], strong: &str) -> String {
    if let Some(why) = report.not_built.get(&i) {
        return format!("not built in this configuration: {why}");
    }
    if report.not_applicable.contains(&i) {
        return "does not apply: the tree has no such object or directory".to_string();
    }
    let mut status = if broken.is_empty() {
        "holds".to_string()
    } else {
        let names: Vec<&str> = broken.iter().map(|id| id.get().name).collect();
        let word = if strong.is_empty() { "BROKEN" } else { "broken" };
        format!("{strong}{word}{strong}: {}", names.join(", "))
    };
    for why in acknowledged_reasons(policy, i, broken) {
        status.push_str(&format!(" (acknowledged: {why})"));
    }
    for (_, file, o) in report.opaque_for(policy, i) {
        let construct = if strong.is_empty() { o.construct.replace('`', "") } else { o.construct.clone() };
        status.push_str(&format!(" (not certain: {file}:{} has {construct})", o.line));
    }
    status
}

/// Per mechanism the policy sets: its units by setting, and its exemptions by reason category.
pub fn counts(policy: &Policy) -> BTreeMap<MechId, Counts> {
    let mut per_mechanism: BTreeMap<MechId, Counts> = BTreeMap::new();
    for unit in &policy.units {
        for (id, setting) in &unit.settings {
            let c = per_mechanism.entry(*id).or_default();
            match (setting, unit.path.is_directory()) {
                (Setting::Force, _) => c.forced += 1,
                (Setting::Skip, true) => c.directories_skipped += 1,
                (Setting::Skip, false) => c.objects_skipped += 1,
            }
            if *setting == Setting::Skip {
                *c.by_category.entry(unit_category(unit)).or_default() += 1;
            }
        }
    }
    per_mechanism
}

pub fn build(policy: &Policy, rules: &Rules, policy_name: &str) -> Report {
    let per_mechanism = counts(policy);
    let files = dir_files(policy, rules);
    let empty = KbuildFile::default();
    let requirements = policy
        .requirements
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let file = files.get(&r.path.kbuild_dir).unwrap_or(&empty);
            let object = r.path.object.clone().unwrap_or_else(|| ANY_OBJECT.to_string());
            let broken = r
                .exempt
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| configs::state(file, rules, *id, &object, true).is_some_and(|s| s != State::Off))
                .collect();
            (i, broken)
        })
        .collect();
    Report {
        policy: policy_name.to_string(),
        units: policy.units.len(),
        objects: policy.units.iter().filter(|u| !u.path.is_directory()).count(),
        directories: policy.directories().len(),
        per_mechanism,
        requirements,
        not_applicable: Default::default(),
        opaque: Vec::new(),
        not_built: BTreeMap::new(),
    }
}

/// The categories in use: the built-in ones in their order, then those only the policy names,
/// then "other" and "no reason yet".
fn categories_used(report: &Report) -> Vec<String> {
    let builtin: Vec<&str> = CATEGORIES.iter().map(|(n, _)| *n).collect();
    let mut named: Vec<&String> = report
        .per_mechanism
        .values()
        .flat_map(|m| m.by_category.keys())
        .filter(|c| !builtin.contains(&c.as_str()) && *c != OTHER && *c != NO_REASON)
        .collect();
    named.sort();
    named.dedup();
    let mut all: Vec<String> = builtin.iter().map(|c| c.to_string()).collect();
    all.extend(named.into_iter().cloned());
    all.extend([OTHER.to_string(), NO_REASON.to_string()]);
    all.retain(|c| report.per_mechanism.values().any(|m| m.by_category.contains_key(c)));
    all
}

/// Markdown for a PR comment.
pub fn markdown(report: &Report, policy: &Policy) -> String {
    let broken = report.requirements.iter().filter(|(_, b)| !b.is_empty()).count();
    let mut out = format!(
        "## Instrumentation policy `{}`\n\n{} units ({} objects, {} directory units) in {} directories; {} recursion-prone requirements, {}.\n\n",
        report.policy,
        report.units,
        report.objects,
        report.units - report.objects,
        report.directories,
        report.requirements.len(),
        if broken == 0 { "all hold".to_string() } else { format!("**{broken} broken**") }
    );
    let cats = categories_used(report);
    out.push_str("| mechanism | objects exempt | directories exempt | forced on |");
    for c in &cats {
        out.push_str(&format!(" {c} |"));
    }
    out.push_str("\n|---|---:|---:|---:|");
    out.push_str(&"---:|".repeat(cats.len()));
    out.push('\n');
    for m in MechId::all() {
        let Some(c) = report.per_mechanism.get(&m) else { continue };
        out.push_str(&format!(
            "| {} | {} | {} | {} |",
            m.get().title,
            c.objects_skipped,
            c.directories_skipped,
            c.forced
        ));
        for cat in &cats {
            out.push_str(&format!(" {} |", c.by_category.get(cat).copied().unwrap_or(0)));
        }
        out.push('\n');
    }
    out.push_str("\nCategories are read from each reason's wording (exemptions only).\n\n### Recursion-prone units\n\n| unit | must be exempt from | status | why |\n|---|---|---|---|\n");
    for (i, broken) in &report.requirements {
        let r = &policy.requirements[*i];
        let mechs: Vec<&str> = r.exempt.iter().map(|(id, _)| id.get().name).collect();
        let status = one_line(&requirement_status(report, policy, *i, broken, "**"));
        out.push_str(&format!("| `{}` | {} | {status} | {} |\n", r.path.text, mechs.join(", "), one_line(&r.why)));
    }
    if !policy.acknowledged.is_empty() {
        out.push_str("\n### Acknowledged findings\n\nKept on purpose; `check` lists them and does not fail on them.\n\n| finding | path | mechanism | why |\n|---|---|---|---|\n");
        for a in &policy.acknowledged {
            let mech = a.mechanism.map(|m| m.get().name).unwrap_or("");
            out.push_str(&format!("| `{}` | `{}` | {mech} | {} |\n", a.code, a.path, one_line(&a.why)));
        }
    }
    if !report.opaque.is_empty() {
        out.push_str("\n### Not certain: opaque constructs\n\nmake may change these mechanisms there in ways sanpolicy does not read (`opaque-construct`).\n\n| file | construct | may change |\n|---|---|---|\n");
        for (_, file, o) in &report.opaque {
            let mechs: Vec<&str> = o.mechanisms.iter().map(|m| m.get().name).collect();
            out.push_str(&format!("| `{file}:{}` | {} | {} |\n", o.line, one_line(&o.construct), mechs.join(", ")));
        }
    }
    out
}

/// The same report as plain text for a terminal or a log: aligned columns, no Markdown.
pub fn text(report: &Report, policy: &Policy) -> String {
    let broken = report.requirements.iter().filter(|(_, b)| !b.is_empty()).count();
    let mut out = format!(
        "Instrumentation policy {}\n{} units ({} objects, {} directory units) in {} directories; {} recursion-prone requirements, {}.\n\n",
        report.policy,
        report.units,
        report.objects,
        report.units - report.objects,
        report.directories,
        report.requirements.len(),
        if broken == 0 { "all hold".to_string() } else { format!("{broken} broken") }
    );
    let cats = categories_used(report);
    let mut rows = vec![["mechanism", "objects exempt", "directories exempt", "forced on"].map(String::from).to_vec()];
    rows[0].extend(cats.iter().map(ToString::to_string));
    for m in MechId::all() {
        let Some(c) = report.per_mechanism.get(&m) else { continue };
        let mut row = vec![
            m.get().title.to_string(),
            c.objects_skipped.to_string(),
            c.directories_skipped.to_string(),
            c.forced.to_string(),
        ];
        row.extend(cats.iter().map(|cat| c.by_category.get(cat).copied().unwrap_or(0).to_string()));
        rows.push(row);
    }
    out.push_str(&columns(&rows));
    out.push_str("\nRecursion-prone units:\n");
    let mut rows = vec![["unit", "must be exempt from", "status"].map(String::from).to_vec()];
    for (i, broken) in &report.requirements {
        let r = &policy.requirements[*i];
        let mechs: Vec<&str> = r.exempt.iter().map(|(id, _)| id.get().name).collect();
        rows.push(vec![r.path.text.clone(), mechs.join(", "), requirement_status(report, policy, *i, broken, "")]);
    }
    out.push_str(&columns(&rows));
    if !policy.acknowledged.is_empty() {
        out.push_str("\nAcknowledged findings (kept on purpose; check does not fail on them):\n");
        let mut rows = vec![["finding", "path", "mechanism", "why"].map(String::from).to_vec()];
        for a in &policy.acknowledged {
            let mech = a.mechanism.map(|m| m.get().name).unwrap_or("-");
            rows.push(vec![
                a.code.to_string(),
                a.path.clone(),
                mech.to_string(),
                a.why.split_whitespace().collect::<Vec<_>>().join(" "),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    if !report.opaque.is_empty() {
        out.push_str("\nNot certain (opaque constructs: make may change these mechanisms there in ways sanpolicy does not read):\n");
        let mut rows = vec![["file", "construct", "may change"].map(String::from).to_vec()];
        for (_, file, o) in &report.opaque {
            let mechs: Vec<&str> = o.mechanisms.iter().map(|m| m.get().name).collect();
            rows.push(vec![format!("{file}:{}", o.line), o.construct.replace('`', ""), mechs.join(", ")]);
        }
        out.push_str(&columns(&rows));
    }
    out
}

/// Rows as left-aligned columns separated by two blanks.
fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.iter().map(Vec::len).max().unwrap_or(0))
        .map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().enumerate().map(|(i, c)| format!("{c:<w$}", w = widths[i])).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

pub fn to_json(report: &Report, policy: &Policy) -> Value {
    let mechanisms: Vec<Value> = report
        .per_mechanism
        .iter()
        .map(|(id, c)| {
            json!({
                "mechanism": id.get().name,
                "objects_exempt": c.objects_skipped,
                "directories_exempt": c.directories_skipped,
                "forced": c.forced,
                "by_category": c.by_category,
            })
        })
        .collect();
    let requirements: Vec<Value> = report
        .requirements
        .iter()
        .map(|(i, broken)| {
            let r = &policy.requirements[*i];
            json!({
                "path": r.path.text,
                "exempt": r.exempt.iter().map(|(id, _)| id.get().name).collect::<Vec<_>>(),
                "applies": !report.not_applicable.contains(i),
                "holds": broken.is_empty(),
                "not_built": report.not_built.get(i),
                "broken": broken.iter().map(|id| id.get().name).collect::<Vec<_>>(),
                "acknowledged": acknowledged_reasons(policy, *i, broken),
                "certain": report.opaque_for(policy, *i).next().is_none(),
                "why": r.why,
            })
        })
        .collect();
    json!({
        "policy": report.policy,
        "units": report.units,
        "objects": report.objects,
        "directories": report.directories,
        "mechanisms": mechanisms,
        "requirements": requirements,
        "acknowledged": policy.acknowledged.iter().map(|a| json!({
            "code": a.code.as_str(),
            "path": a.path,
            "mechanism": a.mechanism.map(|m| m.get().name),
            "at": a.location.to_string(),
            "why": a.why,
        })).collect::<Vec<_>>(),
        "opaque": report.opaque.iter().map(|(dir, file, o)| json!({
            "directory": dir,
            "file": file,
            "line": o.line,
            "construct": o.construct,
            "mechanisms": o.mechanisms.iter().map(|m| m.get().name).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn the_text_report_is_plain() {
        let (policy, d) = crate::policy::parse_str(
            std::path::Path::new("p.toml"),
            "[[unit]]\npath = \"kernel/locking/lockdep.o\"\nskip = [\"kasan\"]\nwhy = \"recursion | through the allocator\"\n",
        );
        assert!(!d.has_errors(), "{d:?}");
        let out = text(&build(&policy, &crate::kbuild::Rules::builtin(), "p.toml"), &policy);
        for markdown in ["|", "**", "##", "`", "---"] {
            assert!(!out.contains(markdown), "{markdown:?} in:\n{out}");
        }
        assert!(out.contains("kernel/locking/lockdep.o  kasan, kcsan"), "{out}");
        assert!(out.lines().any(|l| l.starts_with("KASAN ") && l.split_whitespace().nth(1) == Some("1")), "{out}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostic::Code;
    use crate::policy::PLACEHOLDER_REASON;

    #[test]
    fn reasons_fall_into_categories() {
        assert_eq!(category("Avoid recursion lockdep -> sanitizer -> lockdep"), "recursion");
        assert_eq!(category("Early boot code runs before shadow memory exists"), "early boot / no shadow");
        assert_eq!(category("vDSO code runs in user space"), "user space / vDSO");
        assert_eq!(category("produce insane amounts of uninteresting coverage"), "coverage noise");
        assert_eq!(category(PLACEHOLDER_REASON), NO_REASON);
        assert_eq!(category("because"), OTHER);
    }

    #[test]
    fn keywords_match_whole_words_not_substrings() {
        // arch/x86/mm/physaddr.o: "Makefile" holds "efi", "latest" holds "test".
        let physaddr = "__phys_addr is called from everywhere; the Makefile keeps it out of KASAN";
        assert_eq!(category(physaddr), OTHER);
        assert_eq!(category("the latest compilers inline it"), OTHER);
        assert_eq!(category("EFI runtime services"), "recursion"); // "runtime" comes first
        assert_eq!(category("called by EFI stubs"), "firmware / hypervisor");
        assert_eq!(category("KVM's hyp code runs at EL2"), "firmware / hypervisor");
        assert_eq!(category("the self-instrumentation of the tracer"), "recursion");
        assert_eq!(category("runs in real-mode trampolines"), "early boot / no shadow");
        assert_eq!(category("boot-time only"), "early boot / no shadow");
        assert_eq!(category("only the tests use it"), "tests");
    }

    #[test]
    fn an_explicit_category_wins_over_the_reasons_words() {
        let text = r#"
[[unit]]
path = "arch/x86/mm/physaddr.o"
skip = ["kasan"]
category = "early boot / no shadow"
why = "the Makefile keeps __phys_addr out of KASAN: it runs before the shadow is mapped"

[[unit]]
path = "arch/x86/mm/mem_encrypt_identity.o"
skip = ["kasan"]
category = "memory encryption"
why = "runs with the identity map, before EFI"

[[unit]]
path = "arch/x86/platform/efi/"
skip = ["kasan"]
why = "called by EFI firmware"
"#;
        let (policy, diags) = crate::policy::parse_str(std::path::Path::new("p.toml"), text);
        assert!(diags.is_empty(), "{diags:?}");
        let kasan = &counts(&policy)[&MechId::by_name("kasan").unwrap()];
        let got: Vec<(&str, usize)> = kasan.by_category.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(got, [("early boot / no shadow", 1), ("firmware / hypervisor", 1), ("memory encryption", 1)]);
        for bad in ["\"\"", "\"a | b\"", "1"] {
            let (_, diags) = crate::policy::parse_str(
                std::path::Path::new("p.toml"),
                &format!("[[unit]]\npath = \"lib/a.o\"\nskip = [\"kasan\"]\ncategory = {bad}\nwhy = \"x\"\n"),
            );
            let lines: Vec<_> = diags.0.iter().map(|d| (d.code, d.location.as_ref().map(|l| l.line))).collect();
            let code = if bad == "1" { Code::WrongType } else { Code::BadCategory };
            assert_eq!(lines, [(code, Some(4))], "{bad}");
        }
    }
}
