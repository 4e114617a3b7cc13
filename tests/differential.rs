//! The verdict as a property (issue 18, point 2): seeded, reproducible cases of policy edits ×
//! tree edits × staged subsets × layouts × repository placement, on small trees with the real
//! 6.1 and 6.12 rule files, each run through the real binary and git. For every case:
//! (a) the pre-commit hook passes exactly when `gen-makefiles --check` passes on the commit the
//!     index would make (the index exported with `git checkout-index`);
//! (d) after `sync`, `sync --check` passes (nothing left to take), or sync exited 2 with the
//!     policy byte-identical;
//! (e) following `check`'s printed fixes literally reaches a clean state (`check` and
//!     `gen-makefiles --check` pass) within three rounds.
//! (b) explain's state per object and mechanism is GNU make's on the disk tree (after the edits,
//!     and again at the clean end), or explain says it is not certain: make reads the
//!     directory's kbuild file (and, in the central layout, the central file after it, as
//!     `scripts/Makefile.build` does) and prints each object's per-object and directory values;
//!     by Kbuild's rule (`$(patsubst n%,,…)` over their concatenation) a value starting with `n`
//!     is off and any other set value on; unset is the kernel default, judged by
//!     `tests/make_agreement.rs`.
//! (c), requirements against make, is `tests/kernel_object.rs`' and `tests/round_trip.rs`' (no
//! generated case has a requirement that applies to its objects).
//!
//! `SANPOLICY_DIFF_CASES` (default 2,000: issue 18's bar), `SANPOLICY_DIFF_SEED` (default fixed) and
//! `SANPOLICY_DIFF_WORKERS` (default two per core) choose the
//! cases; a failure prints the seed, the case number and the case, and
//! `SANPOLICY_DIFF_SEED=S SANPOLICY_DIFF_ONLY=N cargo test --test differential` replays it.

mod fixture_tree;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use fixture_tree::copy_dir;

/// The library's SplitMix64 (the bootstrap's generator): a fixed sequence per seed.
type Rng = sanpolicy::runtime::stats::SplitMix;

/// What the cases draw besides `below`.
trait Draw {
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T;
    fn chance(&mut self, percent: u64) -> bool;
}

impl Draw for Rng {
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

const OBJECTS: [&str; 4] = ["a", "b", "c", "d"];
/// (mechanism name, per-object variable prefix): what the cases write.
const MECHS: [(&str, &str); 4] = [
    ("kasan", "KASAN_SANITIZE"),
    ("kcov", "KCOV_INSTRUMENT"),
    ("ubsan", "UBSAN_SANITIZE"),
    ("kcsan", "KCSAN_SANITIZE"),
];

#[derive(Debug, Clone)]
enum PolicyEdit {
    /// A new unit for an object and mechanism no unit sets yet.
    Add { object: &'static str, mech: usize, force: bool },
    /// Drop the n-th unit.
    Drop(usize),
    /// Change the n-th unit's reason.
    Reason(usize),
}

#[derive(Debug, Clone)]
enum TreeEdit {
    /// A new line (with a comment) at the end of `lib/Makefile`.
    Append { object: &'static str, mech: usize, value: char },
    /// Delete the n-th directive line of `lib/Makefile` (outside generated text).
    Delete(usize),
    /// Flip the n-th directive line's value n ↔ y.
    Flip(usize),
}

#[derive(Debug, Clone)]
struct Case {
    version: &'static str,
    layout: &'static str,
    subdir: bool,
    initial: Vec<(&'static str, usize)>,
    policy: Vec<PolicyEdit>,
    tree: Vec<TreeEdit>,
    stage_policy: bool,
    stage_makefile: bool,
}

fn generate(rng: &mut Rng) -> Case {
    let version = *rng.pick(&["linux-6.1", "linux-6.12"]);
    let layout = *rng.pick(&["in-place", "block", "central"]);
    let mut initial = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let line = (OBJECTS[rng.below(OBJECTS.len())], rng.below(MECHS.len()));
        if !initial.contains(&line) {
            initial.push(line);
        }
    }
    let mut policy = Vec::new();
    for _ in 0..rng.below(3) {
        policy.push(match rng.below(3) {
            0 => PolicyEdit::Add {
                object: OBJECTS[rng.below(OBJECTS.len())],
                mech: rng.below(MECHS.len()),
                force: rng.chance(30),
            },
            1 => PolicyEdit::Drop(rng.below(4)),
            _ => PolicyEdit::Reason(rng.below(4)),
        });
    }
    let mut tree = Vec::new();
    for _ in 0..rng.below(3) {
        tree.push(match rng.below(3) {
            0 => TreeEdit::Append {
                object: OBJECTS[rng.below(OBJECTS.len())],
                mech: rng.below(MECHS.len()),
                value: if rng.chance(25) { 'y' } else { 'n' },
            },
            1 => TreeEdit::Delete(rng.below(4)),
            _ => TreeEdit::Flip(rng.below(4)),
        });
    }
    // Both sides setting the same variable differently is a real conflict a person decides
    // (check says so, with no command to run): not generated.
    let added: Vec<(&str, usize)> = policy
        .iter()
        .filter_map(|e| match e {
            PolicyEdit::Add { object, mech, .. } => Some((*object, *mech)),
            _ => None,
        })
        .collect();
    tree.retain(|e| !matches!(e, TreeEdit::Append { object, mech, .. } if added.contains(&(*object, *mech))));
    Case {
        version,
        layout,
        subdir: rng.chance(40),
        initial,
        policy,
        tree,
        stage_policy: rng.chance(60),
        stage_makefile: rng.chance(60),
    }
}

/// A command's exit code and output.
struct Out {
    code: i32,
    text: String,
}

fn run(dir: &Path, program: &str, args: &[&str]) -> Out {
    let bin;
    let program = if program == "sanpolicy" {
        bin = release_binary();
        bin.as_os_str()
    } else {
        std::ffi::OsStr::new(program)
    };
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap_or_else(|e| panic!("{program:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Out { code: out.status.code().unwrap_or(-1), text }
}

/// Build the case's repository: the tree adopted and committed. Returns (repository, tree).
fn build(case: &Case, scratch: &Path) -> Result<(PathBuf, PathBuf), String> {
    let repo = scratch.join("repo");
    let tree = if case.subdir { repo.join("linux") } else { repo.clone() };
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules").join(case.version);
    copy_dir(&rules, &tree);
    fs::create_dir_all(tree.join("lib")).unwrap();
    let mut makefile = "obj-y := a.o b.o c.o d.o\n".to_string();
    for (i, (object, mech)) in case.initial.iter().enumerate() {
        makefile.push_str(&format!("\n# Initial reason {i}.\n{}_{object}.o := n\n", MECHS[*mech].1));
    }
    fs::write(tree.join("lib/Makefile"), makefile).unwrap();
    for o in OBJECTS {
        fs::write(tree.join(format!("lib/{o}.c")), "").unwrap();
    }
    let adopt = run(&tree, "sanpolicy", &["import", "--adopt", "--layout", case.layout]);
    if adopt.code != 0 {
        return Err(format!("import --adopt: {}", adopt.text));
    }
    for args in [&["init", "-q", "-b", "main"][..], &["add", "-A", "-f"], &["commit", "-q", "-m", "adopt"]] {
        let out = run(&repo, "git", args);
        if out.code != 0 {
            return Err(format!("git {args:?}: {}", out.text));
        }
    }
    Ok((repo, tree))
}

/// The unit tables of the policy, by the offset of each `[[unit]]`.
fn unit_starts(policy: &str) -> Vec<usize> {
    policy.match_indices("[[unit]]").map(|(i, _)| i).collect()
}

fn apply_policy_edit(policy: &str, edit: &PolicyEdit) -> String {
    let starts = unit_starts(policy);
    let end_of = |i: usize| starts.get(i + 1).copied().unwrap_or(policy.len());
    match edit {
        PolicyEdit::Add { object, mech, force } => {
            let (name, _) = MECHS[*mech];
            // Only where no unit of the object sets the mechanism (else a duplicate or a conflict,
            // which is bad input, not drift).
            let taken = starts.iter().enumerate().any(|(i, s)| {
                let unit = &policy[*s..end_of(i)];
                unit.contains(&format!("path = \"lib/{object}.o\"")) && unit.contains(&format!("\"{name}\""))
            });
            if taken {
                return policy.to_string();
            }
            let key = if *force { "force" } else { "skip" };
            format!(
                "{policy}\n[[unit]]\npath = \"lib/{object}.o\"\n{key} = [\"{name}\"]\nwhy = \"Added by the case.\"\n"
            )
        }
        PolicyEdit::Drop(n) if !starts.is_empty() => {
            let i = n % starts.len();
            format!("{}{}", &policy[..starts[i]], &policy[end_of(i)..])
        }
        PolicyEdit::Reason(n) if !starts.is_empty() => {
            let i = n % starts.len();
            let unit = policy[starts[i]..end_of(i)].replacen("why = \"", "why = \"Reworded. ", 1);
            format!("{}{unit}{}", &policy[..starts[i]], &policy[end_of(i)..])
        }
        _ => policy.to_string(),
    }
}

/// The lines of `text` that are directives outside generated blocks, by index.
fn directive_lines(text: &str) -> Vec<usize> {
    let mut inside = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("# BEGIN sanpolicy") {
            inside = true;
        } else if line.starts_with("# END sanpolicy") {
            inside = false;
        } else if !inside && MECHS.iter().any(|(_, v)| line.starts_with(v)) {
            out.push(i);
        }
    }
    out
}

fn apply_tree_edit(text: &str, edit: &TreeEdit) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let directives = directive_lines(text);
    match edit {
        TreeEdit::Append { object, mech, value } => {
            lines.push(String::new());
            lines.push("# Merged upstream.".into());
            lines.push(format!("{}_{object}.o := {value}", MECHS[*mech].1));
        }
        TreeEdit::Delete(n) if !directives.is_empty() => {
            lines.remove(directives[n % directives.len()]);
        }
        TreeEdit::Flip(n) if !directives.is_empty() => {
            let at = directives[n % directives.len()];
            let flipped = match lines[at].strip_suffix(" n") {
                Some(stem) => format!("{stem} y"),
                None => lines[at].replace(" y", " n"),
            };
            lines[at] = flipped;
        }
        _ => {}
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The binary under test: `SANPOLICY_DIFF_BIN`, else the optimised build of this very source
/// (built once, on first use, into the target directory's `release/`, where CI's fuzz step
/// builds it anyway). Each case starts about fifteen processes, and the debug binary spends
/// twice the time starting and judging (`check` on a case's tree: 24 ms against 12 ms).
fn release_binary() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("SANPOLICY_DIFF_BIN") {
            return PathBuf::from(bin);
        }
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("the target directory").to_path_buf();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .args(["build", "--release", "--quiet", "--bin", "sanpolicy"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("cargo builds the binary under test");
        assert!(out.status.success(), "cargo build --release failed:\n{}", String::from_utf8_lossy(&out.stderr));
        target.join("release").join("sanpolicy")
    })
    .clone()
}

/// The commands between backticks on the last `fix: ` line of `text`.
fn fixes(text: &str) -> Vec<String> {
    let Some(line) = text.lines().rev().find(|l| l.starts_with("fix: ") || l.contains("; fix: ")) else {
        return Vec::new();
    };
    let after = &line[line.find("fix: ").unwrap() + 5..];
    after.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// `sanpolicy ARGS` with `--tree` when the tree is not the directory the command runs in.
fn sanpolicy(dir: &Path, args: &[&str]) -> Out {
    run(dir, "sanpolicy", args)
}

fn check_case(case: &Case, scratch: &Path) -> Result<(), String> {
    let (repo, tree) = build(case, scratch)?;
    // Edits.
    let mut policy = fs::read_to_string(tree.join("sanitizer-policy.toml")).unwrap();
    for e in &case.policy {
        policy = apply_policy_edit(&policy, e);
    }
    fs::write(tree.join("sanitizer-policy.toml"), &policy).unwrap();
    let mut makefile = fs::read_to_string(tree.join("lib/Makefile")).unwrap();
    for e in &case.tree {
        makefile = apply_tree_edit(&makefile, e);
    }
    fs::write(tree.join("lib/Makefile"), &makefile).unwrap();
    let prefix = if case.subdir { "linux/" } else { "" };
    if case.stage_policy {
        run(&repo, "git", &["add", "-f", &format!("{prefix}sanitizer-policy.toml")]);
    }
    if case.stage_makefile {
        run(&repo, "git", &["add", "-f", &format!("{prefix}lib/Makefile")]);
    }

    // (a) the hook and `--check` on the commit the index makes.
    let hook_args: Vec<&str> = if case.subdir { vec!["pre-commit", "--tree", "linux"] } else { vec!["pre-commit"] };
    let hook = sanpolicy(&repo, &hook_args);
    let export = scratch.join("index");
    let out = run(&repo, "git", &["checkout-index", "-a", "-f", &format!("--prefix={}/", export.display())]);
    if out.code != 0 {
        return Err(format!("git checkout-index: {}", out.text));
    }
    let exported = if case.subdir { export.join("linux") } else { export.clone() };
    let ci = sanpolicy(&exported, &["gen-makefiles", "--check"]);
    if hook.code == 2 || ci.code == 2 || (hook.code == 0) != (ci.code == 0) {
        return Err(format!(
            "(a) the hook exited {} but `gen-makefiles --check` on the staged commit exited {}\n--- hook\n{}\n--- check\n{}",
            hook.code, ci.code, hook.text, ci.text
        ));
    }

    // (b) explain against make, on the edited tree.
    explain_agrees_with_make(&tree).map_err(|e| format!("(b) after the edits: {e}"))?;

    // (d) sync in the work tree.
    let before = fs::read(tree.join("sanitizer-policy.toml")).unwrap();
    let sync = sanpolicy(&tree, &["sync"]);
    match sync.code {
        0 => {
            let again = sanpolicy(&tree, &["sync", "--check"]);
            if again.code != 0 {
                return Err(format!(
                    "(d) after sync, `sync --check` exited {}:\n{}\n--- sync\n{}",
                    again.code, again.text, sync.text
                ));
            }
        }
        2 if fs::read(tree.join("sanitizer-policy.toml")).unwrap() == before => {}
        code => {
            return Err(format!(
                "(d) sync exited {code} (the policy byte-identical: {}):\n{}",
                fs::read(tree.join("sanitizer-policy.toml")).unwrap() == before,
                sync.text
            ))
        }
    }

    // (e) follow check's fixes.
    let mut log = String::new();
    for round in 0..=3 {
        let check = sanpolicy(&tree, &["check"]);
        let ci = sanpolicy(&tree, &["gen-makefiles", "--check"]);
        if check.code == 0 && ci.code == 0 {
            return explain_agrees_with_make(&tree).map_err(|e| format!("(b) at the clean end:\n{log}{e}"));
        }
        if round == 3 {
            return Err(format!(
                "(e) not clean after three rounds of fixes:\n{log}--- check\n{}\n--- --check\n{}",
                check.text, ci.text
            ));
        }
        let source = if check.code != 0 { &check } else { &ci };
        let commands = fixes(&source.text);
        if commands.is_empty() {
            return Err(format!("(e) no fix printed:\n{log}{}", source.text));
        }
        for c in commands {
            let words: Vec<&str> = c.split_whitespace().collect();
            let out = run(&tree, words[0], &words[1..]);
            log.push_str(&format!("$ {c}\n{}\n", out.text));
            if out.code != 0 {
                return Err(format!("(e) the printed fix `{c}` exited {}:\n{log}", out.code));
            }
        }
    }
    unreachable!()
}

/// (b): `explain --format json` on every object of `lib/` against make's reading of the tree.
fn explain_agrees_with_make(tree: &Path) -> Result<(), String> {
    let paths: Vec<String> = OBJECTS.iter().map(|o| format!("lib/{o}.o")).collect();
    let mut args = vec!["explain", "--format", "json"];
    args.extend(paths.iter().map(String::as_str));
    let explained = sanpolicy(tree, &args);
    if explained.code != 0 {
        return Err(format!("explain exited {}: {}", explained.code, explained.text));
    }
    let json_start = explained.text.find('[').unwrap_or(0);
    let mut stream = serde_json::Deserializer::from_str(&explained.text[json_start..]).into_iter::<serde_json::Value>();
    let json = match stream.next() {
        Some(Ok(v)) => v,
        _ => return Err(format!("explain printed no JSON: {}", explained.text)),
    };
    // Make, as scripts/Makefile.build reads a directory: its kbuild file, then the central file.
    let mut probe =
        String::from("obj := lib\nsrctree := .\ninclude lib/Makefile\n-include scripts/Makefile.sanpolicy\n");
    probe.push_str("probe:\n");
    for o in OBJECTS {
        for (name, var) in MECHS {
            probe.push_str(&format!("\t@$(info {o} {name} [$({var}_{o}.o)$({var})])\n"));
        }
    }
    let probe_file = tree.join("sanpolicy-diff-probe.mk");
    fs::write(&probe_file, probe).unwrap();
    let made = run(tree, "make", &["-s", "-r", "-R", "--no-print-directory", "-f", "sanpolicy-diff-probe.mk", "probe"]);
    fs::remove_file(&probe_file).unwrap();
    if made.code != 0 {
        return Err(format!("make failed: {}", made.text));
    }
    for line in made.text.lines() {
        let mut words = line.splitn(3, ' ');
        let (Some(object), Some(mech), Some(value)) = (words.next(), words.next(), words.next()) else { continue };
        let value = value.trim_start_matches('[').trim_end_matches(']').trim();
        if value.is_empty() {
            continue; // the kernel default: tests/make_agreement.rs
        }
        let make_on = !value.starts_with('n');
        let entry = json
            .as_array()
            .and_then(|objects| objects.iter().find(|o| o["object"] == format!("lib/{object}.o")))
            .and_then(|o| o["mechanisms"].as_array())
            .and_then(|ms| ms.iter().find(|m| m["mechanism"] == mech));
        let Some(entry) = entry else { return Err(format!("explain says nothing of lib/{object}.o {mech}")) };
        if entry["certain"] == false {
            continue;
        }
        let said = entry["state"].as_str().unwrap_or("");
        if said != if make_on { "on" } else { "off" } {
            return Err(format!(
                "explain says lib/{object}.o {mech} is {said}, make reads `{value}` ({}):\n{}",
                if make_on { "on" } else { "off" },
                serde_json::to_string_pretty(entry).unwrap_or_default()
            ));
        }
    }
    Ok(())
}

#[test]
fn every_command_agrees_with_the_others_over_generated_cases() {
    let seed: u64 = std::env::var("SANPOLICY_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5a17_90c1);
    let cases: usize = std::env::var("SANPOLICY_DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let only: Option<usize> = std::env::var("SANPOLICY_DIFF_ONLY").ok().and_then(|s| s.parse().ok());
    let mut rng = sanpolicy::runtime::stats::SplitMix(seed);
    let all: Vec<(usize, Case)> = (0..cases).map(|n| (n, generate(&mut rng))).collect();
    let todo: Vec<&(usize, Case)> = all.iter().filter(|(n, _)| only.is_none_or(|o| o == *n)).collect();
    let failures = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers() {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((n, case)) = todo.get(i) else { break };
                let scratch = tempfile::Builder::new().prefix("sanpolicy-diff-").tempdir().unwrap();
                if let Err(e) = check_case(case, scratch.path()) {
                    failures.lock().unwrap().push((*n, format!("{case:#?}\n{e}")));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort_by_key(|(n, _)| *n);
    for (n, f) in &failures {
        let what = f.lines().find(|l| l.starts_with('(')).unwrap_or("");
        eprintln!("case {n}: {what}");
    }
    if let Some((n, first)) = failures.first() {
        panic!(
            "{} of {} cases failed (seed {seed}); the first, case {n}, replays with \
             `SANPOLICY_DIFF_SEED={seed} SANPOLICY_DIFF_ONLY={n} cargo test --test differential`:\n{first}",
            failures.len(),
            todo.len()
        );
    }
    eprintln!("{} cases agree (seed {seed})", todo.len());
}

/// Worker threads: `SANPOLICY_DIFF_WORKERS`, else two per core (each case mostly waits on the
/// processes it starts).
fn workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::env::var("SANPOLICY_DIFF_WORKERS").ok().and_then(|s| s.parse().ok()).unwrap_or(2 * cores)
}
