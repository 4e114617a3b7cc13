//! The placement rule of the in-place layout, judged on real 6.12 files (part of
//! `tests/round_trip.rs`, which owns the extracted tree and GNU make's evaluation).
//!
//! Each edit adds one unit to an adopted copy's policy and runs `sanpolicy gen-makefiles`. Where
//! the new line must go is computed here from the file's text alone, by this module's own
//! reading of the rule the README states (no sanpolicy code): its object's own lines (the last
//! one that does not sit right above another object's line); else after the run of the same
//! mechanism's per-object lines whose comment shares the most words of five letters or more
//! with the reason (ties: the first run); else at the end of the directive block at the top;
//! else above the first `obj-`/`lib-` line and its comment. For each edit the test checks that
//! the diff only adds lines, in one place, right where the rule puts them, never between two
//! list lines, with the reason as a comment wrapped at 80 columns directly above (none only when
//! the line joins its own object's lines under a comment the reason begins with), that no file but the
//! directory's kbuild file, the policy and its snapshot changed, and that make sees exactly the
//! edit: only the edited object (every object, for a directory unit) and mechanism change, the
//! right way.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use sanpolicy::kbuild::Rules;
use sanpolicy::mechanism::MechId;

use super::kernel_source::say;
use super::{adopted_copy, finish, rewritten_by_edit, run, write_atomic, Evaluator, POLICY};

/// One unit added to the policy: (path, `skip`/`force`, mechanism, `when`, reason, why it is a
/// realistic edit).
type Edit = (&'static str, &'static str, &'static str, Option<&'static str>, &'static str);

/// Edits drawn from kernel history (the issue's own examples, upstream commits that added such
/// lines) and from what a developer asks of these files. Every mechanism, skip and force, per
/// object and per directory, conditional, and each step of the rule.
const EDITS: &[Edit] = &[
    // The examples.
    ("lib/llist.o", "skip", "kcov", None, "llist's lock-free list operations produce flaky coverage that is not a function of syscall inputs."),
    ("kernel/sched/core.o", "skip", "gcov", Some("ifdef CONFIG_FUNCTION_TRACER"), "The scheduler core runs under the function tracer; its GCOV counters are updated from every traced context switch and make the profile meaningless."),
    ("kernel/time/ntp.o", "skip", "kcov", None, "NTP adjustments run from the timer interrupt; their coverage is not a function of syscall inputs."),
    ("lib/ubsan.o", "skip", "kcov", None, "The UBSAN runtime runs on reports, not on syscall inputs: its coverage is noise."),
    // Upstream's lockdep fix: the same reason as the line it joins, so no new comment.
    ("kernel/locking/lockdep.o", "skip", "kasan", None, "Avoid recursion lockdep -> sanitizer -> ... -> lockdep."),
    ("kernel/locking/lockdep.o", "skip", "ubsan", None, "Avoid recursion lockdep -> sanitizer -> ... -> lockdep.\n\nUBSAN's report path takes locks lockdep tracks."),
    ("kernel/kcov.o", "skip", "gcov", None, "If sanitizers detect any issues in kcov, it may lead to recursion\nvia printk, etc."),
    ("lib/string.o", "skip", "kmsan", Some("ifdef CONFIG_AMD_MEM_ENCRYPT"), "Early boot use of cmdline, don't instrument it"),
    // Joining the object's own lines with a reason of its own.
    ("lib/stackdepot.o", "skip", "ubsan", None, "stackdepot is called from the sanitizers' report paths: instrumenting it with UBSAN recurses into the report."),
    ("kernel/softirq.o", "skip", "kasan", None, "softirq entry runs with the shadow of the interrupted task; KASAN reports from it are unreliable."),
    ("kernel/stackleak.o", "skip", "objtool", None, "stackleak's erase routine runs on the entry stack, which objtool cannot follow."),
    ("kernel/locking/", "skip", "kcsan", None, "Locking primitives implement the synchronization KCSAN would report as races."),
    ("mm/", "skip", "ubsan", None, "Allocator paths run with interrupts off; a UBSAN report from them can deadlock on the allocator itself."),
    ("lib/", "skip", "gcov", None, "Library helpers are called from everywhere; their GCOV counters dominate every profile."),
    // After the run whose comment fits best.
    ("lib/list_debug.o", "skip", "kcsan", None, "list_debug's checks race with concurrent list users by design; KCSAN reports them as data races."),
    ("mm/page_alloc.o", "skip", "kasan", None, "page_alloc hands out the pages KASAN poisons; instrumenting it slows every allocation."),
    ("mm/vmalloc.o", "skip", "kcov", None, "vmalloc produces flaky coverage that is not a function of syscall inputs, e.g. when a lazy purge runs."),
    ("mm/mempool.o", "skip", "kcsan", None, "mempool produces frequent data race reports on the same word, like the slab allocators."),
    ("kernel/irq_work.o", "skip", "kcov", None, "irq_work runs from interrupts and produces uninteresting coverage traces."),
    ("kernel/locking/lockdep_proc.o", "skip", "kcsan", None, "Avoid recursion lockdep -> sanitizer -> ... -> lockdep: lockdep_proc reads lockdep's tables."),
    ("kernel/locking/qspinlock.o", "skip", "ftrace", Some("ifdef CONFIG_FUNCTION_TRACER"), "The queued spinlock slow path is taken by the function tracer's own locks; tracing it recurses."),
    ("arch/x86/mm/kaslr.o", "skip", "kasan", None, "kaslr runs before the KASAN shadow is mapped: like mem_encrypt it must not be instrumented."),
    ("arch/x86/mm/init.o", "skip", "kmsan", None, "Avoid recursion by not calling KMSAN hooks while the direct mapping is built."),
    ("arch/x86/mm/ioremap.o", "skip", "ftrace", None, "ioremap is used by early boot code before ftrace can patch call sites."),
    ("arch/x86/kernel/kvm.o", "skip", "kcov", None, "kvm guest hooks are called from save_stack_trace() on debug paths and produce uninteresting coverage."),
    ("arch/x86/kernel/alternative.o", "skip", "kcov", None, "If instrumentation of alternative patching is enabled, boot hangs during the first second."),
    ("kernel/trace/trace_selftest.o", "skip", "kcov", None, "The tracer selftests run from IRQ entry before hardirq context is visible to KCOV."),
    // Force: back on where the directory turns it off.
    ("kernel/locking/mutex.o", "force", "kcov", None, "Mutex slow paths are a function of syscall inputs: syzkaller needs their coverage."),
    ("kernel/sched/fair.o", "force", "kcov", None, "The fair class's pick and enqueue paths depend on what the syscalls do: keep their coverage."),
    ("kernel/rcu/update.o", "force", "kcov", None, "Grace period requests come from syscalls: keep their coverage for the fuzzer."),
    ("kernel/rcu/tree.o", "force", "kcov", Some("ifdef CONFIG_RCU_EXPERT"), "Expert RCU configurations are fuzzed for their grace-period state machine: keep its coverage."),
    // A file without directives: above the first list line.
    ("kernel/time/", "skip", "kcsan", None, "Timekeeping reads are seqcount-protected retries; KCSAN reports them as races."),
    ("kernel/time/timekeeping.o", "skip", "ubsan", Some("ifdef CONFIG_SMP"), "Cross-CPU clock adjustments overflow by design while the clocksource wraps."),
];

/// The mechanisms' variables as kernel Makefiles spell them (this test's own table).
const VARIABLES: &[(&str, &str)] = &[
    ("KASAN_SANITIZE", "kasan"),
    ("KCSAN_SANITIZE", "kcsan"),
    ("KCSAN_INSTRUMENT_BARRIERS", "kcsan-barriers"),
    ("KCOV_INSTRUMENT", "kcov"),
    ("UBSAN_SANITIZE", "ubsan"),
    ("UBSAN_SIGNED_WRAP", "ubsan-signed-wrap"),
    ("KMSAN_SANITIZE", "kmsan"),
    ("KMSAN_ENABLE_CHECKS", "kmsan-checks"),
    ("GCOV_PROFILE", "gcov"),
    ("OBJECT_FILES_NON_STANDARD", "objtool"),
];

/// One logical line of a kbuild file, as this test reads it.
#[derive(Debug, Clone)]
struct Line {
    /// 1-based first and last physical line.
    first: usize,
    last: usize,
    text: String,
    /// The enclosing conditions, outermost first (an `else` branch as `else <condition>`).
    conds: Vec<String>,
    /// (mechanism, object stem) when the line is a directive; `None` stem for the directory.
    directive: Option<(String, Option<String>)>,
    list: bool,
    comment: bool,
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What `name = value` means as a directive, by this test's table.
fn directive(name: &str, value: &str) -> Option<(String, Option<String>)> {
    if name == "ccflags-remove-$(CONFIG_FUNCTION_TRACER)" {
        return Some(("ftrace".into(), None));
    }
    if let Some(rest) = name.strip_prefix("CFLAGS_REMOVE_") {
        let ftrace = value.contains("$(CC_FLAGS_FTRACE)") || value.split_whitespace().any(|w| w == "-pg");
        return (ftrace && rest.ends_with(".o")).then(|| ("ftrace".into(), Some(rest.trim_end_matches(".o").into())));
    }
    let mut best: Option<(String, Option<String>)> = None;
    for (var, mech) in VARIABLES {
        if name == *var {
            best = Some((mech.to_string(), None));
        } else if let Some(obj) =
            name.strip_prefix(var).and_then(|r| r.strip_prefix('_')).and_then(|r| r.strip_suffix(".o"))
        {
            // `KCSAN_SANITIZE_x.o` is not `KCSAN_INSTRUMENT_BARRIERS`: the longest variable wins.
            if best.as_ref().is_none_or(|(m, _)| m.len() < mech.len()) {
                best = Some((mech.to_string(), Some(obj.to_string())));
            }
        }
    }
    best
}

fn read_lines(text: &str) -> Vec<Line> {
    let physical: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut conds: Vec<String> = Vec::new();
    let mut i = 0;
    while i < physical.len() {
        let first = i + 1;
        let mut joined = physical[i].to_string();
        while joined.ends_with('\\') && i + 1 < physical.len() {
            joined.pop();
            i += 1;
            joined.push(' ');
            joined.push_str(physical[i]);
        }
        let last = i + 1;
        i += 1;
        let trimmed = joined.trim().to_string();
        let word = trimmed.split_whitespace().next().unwrap_or("");
        let mut line = Line {
            first,
            last,
            text: trimmed.clone(),
            conds: conds.clone(),
            directive: None,
            list: false,
            comment: false,
        };
        match word {
            "ifdef" | "ifndef" | "ifeq" | "ifneq" => conds.push(collapse(&trimmed)),
            "else" => {
                if let Some(c) = conds.last_mut() {
                    *c = format!("else {c}");
                }
            }
            "endif" => {
                conds.pop();
            }
            _ if trimmed.starts_with('#') => line.comment = true,
            _ => {
                for op in [":=", "+=", "?=", "="] {
                    if let Some((name, value)) = trimmed.split_once(op) {
                        let name = name.trim();
                        if !name.is_empty() && !name.contains(' ') {
                            line.list = name.starts_with("obj-") || name.starts_with("lib-");
                            line.directive = directive(name, value);
                        }
                        break;
                    }
                }
            }
        }
        out.push(line);
    }
    out
}

fn long_words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() >= 5).map(str::to_lowercase).collect()
}

/// The comment lines directly above physical line `line` (1-based).
fn comment_above(lines: &[Line], line: usize) -> Option<String> {
    let at = lines.iter().position(|l| l.first == line)?;
    let mut parts = Vec::new();
    for l in lines[..at].iter().rev() {
        if !l.comment || l.text.contains("SPDX-License-Identifier") {
            break;
        }
        parts.push(l.text.trim_start_matches('#').trim().to_string());
    }
    parts.reverse();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// The comment heading the paragraph line `at` belongs to: up through the paragraph's
/// non-comment lines to the first comment.
fn paragraph_comment(lines: &[Line], at: usize) -> Option<String> {
    let mut k = at;
    while k > 0 && !lines[k - 1].text.is_empty() && !lines[k - 1].comment {
        k -= 1;
    }
    comment_above(lines, lines[k].first)
}

/// Where the rule puts a new line: (the last original line before it, the conditions it must
/// add around the line, whether a comment goes above, which step decided).
#[derive(Debug, PartialEq, Eq)]
struct Place {
    after: usize,
    wrap: Vec<String>,
    comment: bool,
    step: u8,
}

fn expected_place(text: &str, stem: Option<&str>, mech: &str, when: &[String], why: &str) -> Place {
    let lines = read_lines(text);
    let prefix = |conds: &[String]| when.starts_with(conds);
    let wrap_of = |conds: &[String]| when[conds.len()..].to_vec();
    // 1. The object's own lines, the last one not right above another object's line.
    let own: Vec<usize> = (0..lines.len())
        .filter(|&k| lines[k].directive.as_ref().is_some_and(|(_, s)| s.as_deref() == stem) && prefix(&lines[k].conds))
        .filter(|&k| {
            let next = lines[k + 1..].iter().find(|l| !l.comment);
            !next.is_some_and(|n| {
                n.first == lines[k].last + 1 + lines[k + 1..].iter().take_while(|l| l.comment).count()
                    && n.directive.as_ref().is_some_and(|(_, s)| s.as_deref() != stem)
            })
        })
        .collect();
    if let Some(&k) = own.iter().max_by_key(|&&k| (lines[k].conds.len(), k)) {
        let wrap = wrap_of(&lines[k].conds);
        let same = wrap.is_empty()
            && paragraph_comment(&lines, k)
                .is_some_and(|c| format!("{} ", collapse(why)).starts_with(&format!("{} ", collapse(&c))));
        return Place { after: lines[k].last, wrap, comment: !same, step: 1 };
    }
    // 2. Runs of the mechanism's per-object lines.
    if stem.is_some() {
        let wanted = long_words(why);
        let mut best: Option<(usize, usize)> = None;
        let mut k = 0;
        while k < lines.len() {
            let is_mech = |l: &Line| l.directive.as_ref().is_some_and(|(m, s)| m == mech && s.is_some());
            if !is_mech(&lines[k]) {
                k += 1;
                continue;
            }
            let start = k;
            while k + 1 < lines.len()
                && is_mech(&lines[k + 1])
                && lines[k + 1].first == lines[k].last + 1
                && lines[k + 1].conds == lines[start].conds
            {
                k += 1;
            }
            if prefix(&lines[start].conds) {
                let score = comment_above(&lines, lines[start].first)
                    .map_or(0, |c| long_words(&c).intersection(&wanted).count());
                if best.is_none_or(|(s, _)| score > s) {
                    best = Some((score, k));
                }
            }
            k += 1;
        }
        if let Some((_, end)) = best {
            return Place { after: lines[end].last, wrap: wrap_of(&lines[end].conds), comment: true, step: 2 };
        }
    }
    // 3. The directive block at the top: its last top-level directive before the first list
    // line, and the assignments adjoining it.
    let first_list = lines.iter().position(|l| l.list).unwrap_or(lines.len());
    if let Some(mut k) = (0..first_list).rev().find(|&k| lines[k].directive.is_some() && lines[k].conds.is_empty()) {
        while k + 1 < lines.len() {
            let n = &lines[k + 1];
            let assignment = !n.comment && !n.text.is_empty() && n.text.contains('=') && n.conds.is_empty();
            if !assignment || n.list || n.first != lines[k].last + 1 || n.text.starts_with("if") {
                break;
            }
            k += 1;
        }
        return Place { after: lines[k].last, wrap: when.to_vec(), comment: true, step: 3 };
    }
    // 4. Above the first list line, its conditionals and its comment.
    let mut k = first_list;
    while !lines[k].conds.is_empty() {
        k -= 1;
    }
    while k > 0 && lines[k - 1].comment && !lines[k - 1].text.contains("SPDX-License-Identifier") {
        k -= 1;
    }
    let after = lines[..k].iter().rev().find(|l| !l.text.is_empty()).map_or(0, |l| l.last);
    Place { after, wrap: when.to_vec(), comment: true, step: 4 }
}

/// The added lines of `after` against `before` (only additions allowed): the 1-based index in
/// `after` of each added line, and the original line each follows.
fn additions(before: &str, after: &str) -> Result<Vec<(usize, usize, String)>, String> {
    let diff = similar::TextDiff::from_lines(before, after);
    let (mut old, mut new) = (0, 0);
    let mut out = Vec::new();
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Delete => return Err(format!("removes `{}`", change.value().trim_end())),
            similar::ChangeTag::Insert => {
                new += 1;
                out.push((new, old, change.value().trim_end_matches('\n').to_string()));
            }
            similar::ChangeTag::Equal => {
                old += 1;
                new += 1;
            }
        }
    }
    Ok(out)
}

fn columns(s: &str) -> usize {
    s.chars().fold(0, |col, c| if c == '\t' { (col / 8 + 1) * 8 } else { col + 1 })
}

/// What is wrong with the diff of one edit (empty: nothing).
fn judge(before: &str, after: &str, place: &Place, name: &str, why: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let added = match additions(before, after) {
        Ok(a) => a,
        Err(e) => return vec![e],
    };
    let solid: Vec<&(usize, usize, String)> = added.iter().filter(|(_, _, t)| !t.trim().is_empty()).collect();
    if solid.is_empty() {
        return vec!["nothing added".into()];
    }
    if solid.windows(2).any(|w| w[1].0 != w[0].0 + 1) {
        wrong.push("the added lines are not one block".into());
    }
    let old: Vec<&str> = before.lines().collect();
    // The original line right before the block, blank lines aside.
    let at = solid[0].1;
    let prev = (1..=at).rev().find(|&l| !old[l - 1].trim().is_empty()).unwrap_or(0);
    if prev != place.after {
        wrong.push(format!("placed after line {prev}, the rule says after line {} (step {})", place.after, place.step));
    }
    let is_list = |l: &str| l.starts_with("obj-") || l.starts_with("lib-");
    let next = old[at..].iter().find(|l| !l.trim().is_empty()).copied().unwrap_or("");
    let before_line = if prev == 0 { "" } else { old[prev - 1] };
    if is_list(before_line.trim_start()) && is_list(next.trim_start()) {
        wrong.push(format!("between two list lines: `{before_line}` and `{next}`"));
    }
    if old.get(prev.saturating_sub(1)).is_some_and(|l| l.ends_with('\\')) {
        wrong.push("inside a continued line".into());
    }
    let texts: Vec<&str> = solid.iter().map(|(_, _, t)| t.trim_start()).collect();
    let comments: Vec<&str> = texts.iter().take_while(|t| t.starts_with('#')).copied().collect();
    let rest = &texts[comments.len()..];
    let mut shape: Vec<String> = place.wrap.iter().map(|w| collapse(w)).collect();
    shape.push(format!("{name} …"));
    shape.extend(place.wrap.iter().map(|_| "endif".to_string()));
    let shaped = rest.len() == shape.len()
        && rest.iter().zip(&shape).all(|(r, s)| match s.strip_suffix(" …") {
            Some(var) => r.split_whitespace().next() == Some(var) || r.starts_with(&format!("{var}\t")),
            None => collapse(r) == *s,
        });
    if !shaped {
        wrong.push(format!("added {rest:?}, expected the shape {shape:?}"));
    }
    if place.comment {
        let said: Vec<&str> = comments.iter().flat_map(|c| c.trim_start_matches('#').split_whitespace()).collect();
        if !said.iter().copied().eq(why.split_whitespace()) {
            wrong.push(format!("the comment {comments:?} does not say the reason"));
        }
        if let Some(long) = solid.iter().take(comments.len()).find(|(_, _, t)| columns(t) > 80) {
            wrong.push(format!("comment line over 80 columns: `{}`", long.2));
        }
    } else if !comments.is_empty() {
        wrong.push(format!("a comment {comments:?} repeats the reason of the lines it joins"));
    }
    wrong
}

/// The variable a unit's line assigns (this test's own naming).
fn variable(stem: Option<&str>, mech: &str, setting: &str) -> String {
    if mech == "ftrace" {
        return match (stem, setting) {
            (Some(s), "skip") => format!("CFLAGS_REMOVE_{s}.o"),
            (Some(s), _) => format!("CFLAGS_{s}.o"),
            (None, _) => "ccflags-remove-$(CONFIG_FUNCTION_TRACER)".into(),
        };
    }
    let var = VARIABLES.iter().find(|(_, m)| *m == mech).map(|(v, _)| *v).expect("known mechanism");
    stem.map_or(var.to_string(), |s| format!("{var}_{s}.o"))
}

/// How an edit's `when` reads in the file's spelling of conditions.
fn when_lines(when: Option<&str>) -> Vec<String> {
    when.map(|w| vec![collapse(w)]).unwrap_or_default()
}

#[test]
fn linux_6_12_placement_rule() {
    let label = "6.12 placement";
    let (lease, scratch, copy) = adopted_copy("6.12-placement");
    let original = lease.tree();
    let mut problems = Vec::new();
    let policy = copy.join(POLICY);
    let snapshot_files: Vec<PathBuf> = fs::read_dir(&copy)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("sanitizer-policy")))
        .collect();
    let saved: Vec<(PathBuf, Vec<u8>)> = snapshot_files.iter().map(|p| (p.clone(), fs::read(p).unwrap())).collect();
    let (rules, _) = Rules::from_tree(original);
    let scan = sanpolicy::import::scan(original, &rules);
    let mut restored: BTreeMap<PathBuf, u64> = BTreeMap::new();
    let mut steps: BTreeMap<u8, usize> = BTreeMap::new();
    let mut mechanisms: BTreeSet<&str> = BTreeSet::new();
    for (path, setting, mech, when, why) in EDITS {
        let (dir, object) = path.rsplit_once('/').unwrap();
        let stem = (!object.is_empty()).then(|| object.trim_end_matches(".o"));
        let kbuild = format!("{dir}/Makefile");
        let before = fs::read_to_string(original.join(&kbuild)).unwrap();
        let place = expected_place(&before, stem, mech, &when_lines(*when), why);
        *steps.entry(place.step).or_default() += 1;
        mechanisms.insert(mech);
        let text = fs::read_to_string(&policy).unwrap();
        let when_line = when.map(|w| format!("when = \"{w}\"\n")).unwrap_or_default();
        let why_toml = why.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
        let unit =
            format!("\n[[unit]]\npath = \"{path}\"\n{setting} = [\"{mech}\"]\n{when_line}why = \"{why_toml}\"\n");
        write_atomic(&policy, &format!("{text}{unit}"));
        let (code, err) = run(&copy, &["gen-makefiles"]);
        if code != Some(0) {
            problems.push(format!("{path} {setting} {mech}: gen-makefiles: exit {code:?}:\n{err}"));
        } else {
            let after = fs::read_to_string(copy.join(&kbuild)).unwrap();
            let name = variable(stem, mech, setting);
            let wrong = judge(&before, &after, &place, &name, why);
            if !wrong.is_empty() {
                let diff = similar::TextDiff::from_lines(&before, &after).unified_diff().context_radius(3).to_string();
                problems.push(format!("{path} {setting} {mech} (step {}): {}\n{diff}", place.step, wrong.join("; ")));
            }
            let rewritten = rewritten_by_edit(original, &copy, &restored);
            if rewritten != BTreeSet::from([PathBuf::from(&kbuild)]) {
                problems.push(format!("{path}: files changed {rewritten:?}, expected only {kbuild}"));
            }
            // GNU make: only this object (every object, for a directory) and mechanism change.
            let (from, to) = if *setting == "skip" { ('1', '0') } else { ('0', '1') };
            // Turning UBSAN off for a file turns its signed-wrap checks off too (Makefile.lib
            // reads `UBSAN_SANITIZE_x.o` in both decisions).
            let ids: Vec<MechId> = match *mech {
                "ubsan" => vec![MechId::by_name("ubsan").unwrap(), MechId::by_name("ubsan-signed-wrap").unwrap()],
                m => vec![MechId::by_name(m).unwrap()],
            };
            let eval = Evaluator::new(original, &copy, &[(dir.to_string(), Vec::new())], &scan, &rules);
            let cmp = eval.compare(&[0]);
            let unexpected: Vec<String> = cmp
                .mismatches
                .iter()
                .filter(|m| {
                    let right = m.answers.is_some_and(|(id, b, a)| ids.contains(&id) && (b, a) == (from, to));
                    !(right && (object.is_empty() || m.object == *object))
                })
                .map(ToString::to_string)
                .collect();
            if cmp.mismatches.is_empty() || !unexpected.is_empty() || !cmp.failed.is_empty() {
                problems.push(format!(
                    "{path} {setting} {mech}: make saw {} changes, unexpected {:?}, failed {:?}",
                    cmp.mismatches.len(),
                    unexpected.iter().take(5).collect::<Vec<_>>(),
                    cmp.failed
                ));
            }
        }
        // Back to the adopted tree for the next edit.
        for (p, bytes) in &saved {
            fs::write(p, bytes).unwrap();
        }
        write_atomic(&copy.join(&kbuild), &before);
        restored.insert(PathBuf::from(&kbuild), fs::metadata(copy.join(&kbuild)).unwrap().ino());
    }
    say(&format!("round-trip {label}: {} edits, by step {steps:?}, mechanisms {mechanisms:?}", EDITS.len()));
    for step in 1..=4 {
        if !steps.contains_key(&step) {
            problems.push(format!("no edit exercises step {step} of the rule"));
        }
    }
    if mechanisms.len() < 8 {
        problems.push(format!("edits cover only {mechanisms:?}"));
    }
    finish(label, scratch, &problems);
}

#[test]
fn the_oracle_reads_the_rule() {
    // A small file where each step has one answer, checked by hand.
    let text = "# SPDX-License-Identifier: GPL-2.0\n# Flaky coverage.\nKCOV_INSTRUMENT_a.o := n\nKCOV_INSTRUMENT_b.o := n\n# Recursion in the allocator.\nKCOV_INSTRUMENT_c.o := n\n\nobj-y += a.o \\\n\tb.o\n";
    let at = |stem, mech, why| expected_place(text, Some(stem), mech, &[], why);
    assert_eq!(at("c", "kasan", "x"), Place { after: 6, wrap: vec![], comment: true, step: 1 });
    // `a`'s line sits above `b`'s: joining would split the list.
    assert_eq!(at("a", "kasan", "x").step, 3);
    assert_eq!(at("d", "kcov", "allocator recursion").after, 6);
    assert_eq!(at("d", "kcov", "nothing shared").after, 4);
    assert_eq!(at("d", "ubsan", "x"), Place { after: 6, wrap: vec![], comment: true, step: 3 });
    let bare = "# SPDX-License-Identifier: GPL-2.0\n# Build efficiency\nobj-y += a.o\n";
    assert_eq!(
        expected_place(bare, Some("a"), "kcov", &[], "x"),
        Place { after: 1, wrap: vec![], comment: true, step: 4 }
    );
}
