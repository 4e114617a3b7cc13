//! The verdict as a property (issues 18 and 26): seeded, reproducible cases on small trees with
//! the real 6.1 and 6.12 rule files, each run through the real binary, git and GNU make.
//!
//! A case draws: a kernel version and a layout; where the policy lives (in the tree, in a
//! subdirectory `linux/` of the repository, or outside the tree at the repository's top, every
//! command given `--policy` and `--tree`); initial lines (plain, or an `ifdef … else … endif`
//! pair); a history (none, a unit renamed, written and renamed back with the Makefile checked
//! out again, or a policy and snapshot copied from a tree that has one more curated line); a
//! `git clone` to work in; policy edits (add, drop, reword); tree edits (append, delete, flip
//! a value, wrap a line in a condition as a merge does, append `:= y` then `:= n`); what is
//! staged; and, for a fixed subset, the hook run through the pre-commit framework.
//!
//! For every case:
//! (a) the pre-commit hook passes exactly when `gen-makefiles --check` passes on the commit the
//!     index would make (the index exported with `git checkout-index`);
//! (b) explain's state per object and mechanism is GNU make's on the disk tree (after the edits,
//!     and at the clean end), or explain says it is not certain;
//! (d) after `sync`, nothing is left to take back (no fix names `sync`), or sync exited 2 with
//!     the policy byte-identical; a curated unit of a copied policy survives it;
//! (e) following the printed fixes literally reaches a clean state (`check` and
//!     `gen-makefiles --check` pass) within three rounds;
//! (f) `check`, `gen-makefiles --check` and `sync --check` print the same fix for a state, and
//!     the hook too when nothing is unstaged (its fix also stages: `--stage`);
//! (g) each printed fix, run as printed in the directory it was printed in, exits 0 and leaves
//!     fewer findings (`check --format json`'s counts; the hook's own for the hook's fix);
//! (h) no command of a fix deletes a tree line the policy does not own (by object, mechanism
//!     and condition) or turns on, in make's evaluation, instrumentation the policy exempts;
//! (i) every kbuild file written parses under GNU make (the probe of (b) includes them).
//! (c), requirements against make, is `tests/kernel_object.rs`' and `tests/round_trip.rs`'.
//!
//! Make reads a directory as `scripts/Makefile.build` does: its kbuild file, then (central
//! layout) the central file; by Kbuild's rule a value starting with `n` is off and any other
//! set value on; unset is the kernel default, judged by `tests/make_agreement.rs`. The probe
//! defines no `CONFIG_SP_*`, so `ifdef` branches are false and their `else` branches true.
//!
//! `SANPOLICY_DIFF_CASES` (default 300, in both tiers; see REAL_TIER_CASES), `SANPOLICY_DIFF_SEED`
//! (default fixed) and `SANPOLICY_DIFF_WORKERS` (default two per core) choose the cases. The
//! first 60 cases of the real-kernel tier run the hook through the pre-commit framework (from
//! PyPI: it must be installed there, at least the version `.pre-commit-hooks.yaml` asks for),
//! as a `language: system` hook on the built binary. A failure prints the seed, the case, the
//! commands run and `SANPOLICY_DIFF_SEED=S SANPOLICY_DIFF_ONLY=N cargo test --test
//! differential`, which replays it alone.

mod fixture_tree;

use std::collections::BTreeMap;
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
/// Cases the real-kernel tier runs by default. Issue 26 asks for 3,000 within 6 minutes: all
/// 3,000 (seed 1511493825) agree, but take 529 s on 2 cores (each case starts about 16
/// sanpolicy, 35 git and 4 make processes), over that and over what CI's budget has left, so
/// the tier runs 300 (the first 60 through the framework) until a case costs less:
/// `SANPOLICY_DIFF_CASES=3000 cargo test --features real-kernel --test differential`.
const REAL_TIER_CASES: usize = 300;

/// Cases of the real-kernel tier whose hook runs through the pre-commit framework.
const FRAMEWORK_CASES: usize = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The tree is the repository; commands run at its top.
    Tree,
    /// The tree is `linux/` in the repository, the policy in it; commands run in `linux/`.
    Subdir,
    /// The tree is `linux/`, the policy at the repository's top; commands run at the top with
    /// `--policy sanitizer-policy.toml --tree linux`.
    Outside,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Initial {
    /// `VAR_o.o := n` with a comment.
    Plain(&'static str, usize),
    /// `ifdef CONFIG_SP_PAIR` / `VAR_o.o := n` / `else` / `VAR_o.o := y` / `endif`.
    Pair(&'static str, usize),
}

impl Initial {
    fn key(self) -> (&'static str, usize) {
        match self {
            Initial::Plain(o, m) | Initial::Pair(o, m) => (o, m),
        }
    }
}

#[derive(Debug, Clone)]
enum History {
    None,
    /// The n-th unit renamed to an object no unit names, written, renamed back, and the kbuild
    /// files checked out again: the snapshot remembers the rename.
    RenamedBack(usize),
    /// The policy and snapshot copied from a tree that also has this curated line.
    CopiedSnapshot(&'static str, usize),
}

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
    /// `:= y` then `:= n` for one variable at the end of `lib/Makefile`.
    AppendTwice { object: &'static str, mech: usize },
    /// Delete the n-th directive line of `lib/Makefile` (outside generated text).
    Delete(usize),
    /// Flip the n-th directive line's value n ↔ y.
    Flip(usize),
    /// Wrap the n-th directive line outside any conditional in `ifdef CONFIG_SP_MERGED`.
    Wrap(usize),
}

#[derive(Debug, Clone)]
struct Case {
    version: &'static str,
    layout: &'static str,
    place: Place,
    clone: bool,
    initial: Vec<Initial>,
    history: History,
    policy: Vec<PolicyEdit>,
    tree: Vec<TreeEdit>,
    stage_policy: bool,
    stage_makefile: bool,
    framework: bool,
}

fn generate(rng: &mut Rng, framework: bool) -> Case {
    let version = *rng.pick(&["linux-6.1", "linux-6.12"]);
    let layout = *rng.pick(&["in-place", "block", "central"]);
    let place = *rng.pick(&[Place::Tree, Place::Tree, Place::Subdir, Place::Outside]);
    let mut initial: Vec<Initial> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let (o, m) = (OBJECTS[rng.below(OBJECTS.len())], rng.below(MECHS.len()));
        if initial.iter().all(|i| i.key() != (o, m)) {
            initial.push(if rng.chance(15) { Initial::Pair(o, m) } else { Initial::Plain(o, m) });
        }
    }
    let history = match rng.below(10) {
        0 => History::RenamedBack(rng.below(4)),
        1 => {
            let (o, m) = (OBJECTS[rng.below(OBJECTS.len())], rng.below(MECHS.len()));
            if initial.iter().any(|i| i.key() == (o, m)) {
                History::None
            } else {
                History::CopiedSnapshot(o, m)
            }
        }
        _ => History::None,
    };
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
        tree.push(match rng.below(5) {
            0 => TreeEdit::Append {
                object: OBJECTS[rng.below(OBJECTS.len())],
                mech: rng.below(MECHS.len()),
                value: if rng.chance(25) { 'y' } else { 'n' },
            },
            1 => TreeEdit::Delete(rng.below(4)),
            2 => TreeEdit::Flip(rng.below(4)),
            3 => TreeEdit::Wrap(rng.below(4)),
            _ => TreeEdit::AppendTwice { object: OBJECTS[rng.below(OBJECTS.len())], mech: rng.below(MECHS.len()) },
        });
    }
    // Both sides setting the same variable differently is a real conflict a person decides
    // (check says so, with no command to run): not generated. Nor is a copied policy's curated
    // line set by the tree as well.
    let mut taken: Vec<(&str, usize)> = policy
        .iter()
        .filter_map(|e| match e {
            PolicyEdit::Add { object, mech, .. } => Some((*object, *mech)),
            _ => None,
        })
        .collect();
    if let History::CopiedSnapshot(o, m) = history {
        taken.push((o, m));
    }
    // A dropped unit's variable set again by a merge is both sides moving too: with a drop in
    // the case, the tree sets no variable of the initial units anew.
    if policy.iter().any(|e| matches!(e, PolicyEdit::Drop(_))) {
        taken.extend(initial.iter().map(|i| i.key()));
    }
    // An unconditional line appended for a variable the policy sets under `ifdef`/`else`
    // overrides both branches: only a person can say which units it replaces (sync refuses the
    // file, naming the line), a state (e) cannot follow to the end. Known gap: where sync
    // refuses, the other commands may still print `sync` for the file's other lines.
    taken.extend(initial.iter().filter(|i| matches!(i, Initial::Pair(..))).map(|i| i.key()));
    tree.retain(|e| match e {
        TreeEdit::Append { object, mech, .. } | TreeEdit::AppendTwice { object, mech } => {
            !taken.contains(&(*object, *mech))
        }
        _ => true,
    });
    Case {
        version,
        layout,
        place,
        clone: rng.chance(15),
        initial,
        history,
        policy,
        tree,
        stage_policy: rng.chance(60),
        stage_makefile: rng.chance(60),
        framework,
    }
}

/// A command's exit code and output.
struct Out {
    code: i32,
    text: String,
}

/// Where a case's commands run: the repository, the tree, the directory commands run in and
/// the flags every sanpolicy command gets.
#[derive(Clone)]
struct Ctx {
    repo: PathBuf,
    tree: PathBuf,
    here: PathBuf,
    flags: Vec<String>,
    /// The policy file, absolute.
    policy: PathBuf,
    /// The hook's flags, run at the repository's top.
    hook_flags: Vec<String>,
    /// `PATH` with the directory of the binary under test first (the framework's system hook
    /// and its printed fixes find `sanpolicy` there).
    path: String,
}

impl Ctx {
    fn new(case: &Case, repo: &Path, path: &str) -> Ctx {
        let tree = if case.place == Place::Tree { repo.to_path_buf() } else { repo.join("linux") };
        let (here, flags, hook_flags): (PathBuf, Vec<&str>, Vec<&str>) = match case.place {
            Place::Tree => (repo.to_path_buf(), vec![], vec![]),
            Place::Subdir => (tree.clone(), vec![], vec!["--tree", "linux"]),
            Place::Outside => (
                repo.to_path_buf(),
                vec!["--policy", "sanitizer-policy.toml", "--tree", "linux"],
                vec!["--policy", "sanitizer-policy.toml", "--tree", "linux"],
            ),
        };
        let policy = if case.place == Place::Outside {
            repo.join("sanitizer-policy.toml")
        } else {
            tree.join("sanitizer-policy.toml")
        };
        Ctx {
            repo: repo.to_path_buf(),
            tree,
            here,
            flags: flags.into_iter().map(String::from).collect(),
            policy,
            hook_flags: hook_flags.into_iter().map(String::from).collect(),
            path: path.to_string(),
        }
    }

    /// The same case in a copy of the repository at `repo` (`cp -a`).
    fn copied_to(&self, repo: &Path) -> Result<Ctx, String> {
        let out = run(
            Path::new("/"),
            &self.path,
            "cp",
            &["-a", &self.repo.display().to_string(), &repo.display().to_string()],
        );
        if out.code != 0 {
            return Err(format!("cp -a: {}", out.text));
        }
        let moved = |p: &Path| repo.join(p.strip_prefix(&self.repo).unwrap());
        Ok(Ctx {
            tree: moved(&self.tree),
            here: moved(&self.here),
            policy: moved(&self.policy),
            repo: repo.to_path_buf(),
            ..self.clone()
        })
    }

    fn snapshot(&self) -> PathBuf {
        self.policy.with_file_name("sanitizer-policy.effective.txt")
    }

    /// `sanpolicy ARGS FLAGS` in the directory commands run in.
    fn sp(&self, args: &[&str]) -> Out {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(self.flags.iter().map(String::as_str));
        run(&self.here, &self.path, "sanpolicy", &all)
    }

    fn hook(&self, json: bool) -> Out {
        let mut all = vec!["pre-commit"];
        all.extend(self.hook_flags.iter().map(String::as_str));
        if json {
            all.extend(["--format", "json"]);
        }
        run(&self.repo, &self.path, "sanpolicy", &all)
    }

    fn git(&self, args: &[&str]) -> Result<Out, String> {
        let out = run(&self.repo, &self.path, "git", args);
        if out.code != 0 {
            return Err(format!("git {args:?}: {}", out.text));
        }
        Ok(out)
    }
}

fn run(dir: &Path, path: &str, program: &str, args: &[&str]) -> Out {
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
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output();
    // A fix naming a program that does not exist is a failed fix, not a crashed test.
    let out = match out {
        Ok(out) => out,
        Err(e) => return Out { code: 127, text: format!("{program:?}: {e}") },
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Out { code: out.status.code().unwrap_or(-1), text }
}

/// `lib/Makefile` with the initial lines, and `extra` after them.
fn initial_makefile(initial: &[Initial], extra: Option<(&str, usize)>) -> String {
    let mut makefile = "obj-y := a.o b.o c.o d.o\n".to_string();
    for (i, line) in initial.iter().enumerate() {
        match *line {
            Initial::Plain(object, mech) => {
                makefile.push_str(&format!("\n# Initial reason {i}.\n{}_{object}.o := n\n", MECHS[mech].1))
            }
            Initial::Pair(object, mech) => {
                let var = format!("{}_{object}.o", MECHS[mech].1);
                makefile.push_str(&format!(
                    "\n# Initial pair {i}.\nifdef CONFIG_SP_PAIR\n{var} := n\nelse\n{var} := y\nendif\n"
                ))
            }
        }
    }
    if let Some((object, mech)) = extra {
        makefile.push_str(&format!("\n# Curated in another tree.\n{}_{object}.o := n\n", MECHS[mech].1));
    }
    makefile
}

/// A repository at `repo` laid out for the case, its tree holding `makefile`, adopted.
fn adopted(case: &Case, repo: &Path, path: &str, makefile: &str) -> Result<Ctx, String> {
    let ctx = Ctx::new(case, repo, path);
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules").join(case.version);
    copy_dir(&rules, &ctx.tree);
    fs::create_dir_all(ctx.tree.join("lib")).unwrap();
    fs::write(ctx.tree.join("lib/Makefile"), makefile).unwrap();
    for o in OBJECTS {
        fs::write(ctx.tree.join(format!("lib/{o}.c")), "").unwrap();
    }
    let adopt = match case.place {
        Place::Outside => run(
            repo,
            path,
            "sanpolicy",
            &["import", "--adopt", "--layout", case.layout, "--tree", "linux", "--out", "sanitizer-policy.toml"],
        ),
        _ => run(&ctx.tree, path, "sanpolicy", &["import", "--adopt", "--layout", case.layout]),
    };
    if adopt.code != 0 {
        return Err(format!("import --adopt: {}", adopt.text));
    }
    Ok(ctx)
}

/// Build the case's repository: the tree adopted (or given a copied policy), committed, maybe
/// cloned, maybe renamed and back.
fn build(case: &Case, scratch: &Path, log: &mut String) -> Result<Ctx, String> {
    let path =
        format!("{}:{}", release_binary().parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let repo = scratch.join("repo");
    let ctx = match case.history {
        History::CopiedSnapshot(object, mech) => {
            // Tree A has the curated line; its policy and snapshot are copied into tree B.
            let a = adopted(case, &scratch.join("a"), &path, &initial_makefile(&case.initial, Some((object, mech))))?;
            let b = adopted(case, &repo, &path, &initial_makefile(&case.initial, None))?;
            fs::copy(&a.policy, &b.policy).unwrap();
            fs::copy(a.snapshot(), b.snapshot()).unwrap();
            log.push_str("(policy and snapshot copied from a tree with one more curated line)\n");
            b
        }
        _ => adopted(case, &repo, &path, &initial_makefile(&case.initial, None))?,
    };
    if case.framework {
        fs::write(repo.join(".pre-commit-config.yaml"), framework_config(&ctx.hook_flags)).unwrap();
    }
    ctx.git(&["init", "-q", "-b", "main"])?;
    ctx.git(&["add", "-A", "-f"])?;
    ctx.git(&["commit", "-q", "-m", "adopt"])?;
    let ctx = if case.clone {
        let clone = scratch.join("clone");
        let out = run(scratch, &path, "git", &["clone", "-q", "repo", "clone"]);
        if out.code != 0 {
            return Err(format!("git clone: {}", out.text));
        }
        log.push_str("(working in a clone)\n");
        Ctx::new(case, &clone, &path)
    } else {
        ctx
    };
    if let History::RenamedBack(n) = case.history {
        rename_and_back(&ctx, n, log)?;
    }
    Ok(ctx)
}

/// `.pre-commit-config.yaml` with the hook as a `language: system` hook on the binary `PATH`
/// finds (the one under test).
fn framework_config(flags: &[String]) -> String {
    let args: Vec<String> = flags.iter().map(|f| format!("\"{f}\"")).collect();
    format!(
        "repos:\n  - repo: local\n    hooks:\n      - id: sanpolicy\n        name: sanpolicy\n        \
         entry: sanpolicy pre-commit\n        args: [{}]\n        language: system\n        \
         pass_filenames: false\n        always_run: true\n",
        args.join(", ")
    )
}

/// Rename the n-th unit to an object no unit names, `gen-makefiles`, rename it back and check
/// the kbuild files out again: the snapshot remembers a generation the tree no longer shows.
fn rename_and_back(ctx: &Ctx, n: usize, log: &mut String) -> Result<(), String> {
    let policy = fs::read_to_string(&ctx.policy).unwrap();
    let starts = unit_starts(&policy);
    if starts.is_empty() {
        return Ok(());
    }
    let Some(free) = OBJECTS.iter().find(|o| !policy.contains(&format!("path = \"lib/{o}.o\""))) else {
        return Ok(());
    };
    let i = n % starts.len();
    let end = starts.get(i + 1).copied().unwrap_or(policy.len());
    let Some(at) = policy[starts[i]..end].find("path = \"lib/") else { return Ok(()) };
    let at = starts[i] + at + "path = \"lib/".len();
    let renamed = format!("{}{free}{}", &policy[..at], &policy[at + 1..]);
    fs::write(&ctx.policy, renamed).unwrap();
    let out = ctx.sp(&["gen-makefiles"]);
    log.push_str(&format!("(unit {i} renamed to lib/{free}.o) $ gen-makefiles\n{}\n", out.text));
    if out.code != 0 {
        return Err(format!("gen-makefiles of the renamed unit exited {}:\n{log}", out.code));
    }
    fs::write(&ctx.policy, policy).unwrap();
    let rel = |p: &Path| p.strip_prefix(&ctx.repo).unwrap().display().to_string();
    let lib = rel(&ctx.tree.join("lib"));
    let scripts = rel(&ctx.tree.join("scripts"));
    ctx.git(&["checkout", "-q", "--", &lib, &scripts])?;
    log.push_str("(renamed back, kbuild files checked out)\n");
    Ok(())
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

/// A directive line of a kbuild file: its index, text, object, mechanism and the condition
/// it sits under (`ifdef X`, `ifndef X` for an `else` branch), as the policy's `when` writes
/// it; `nested` when under more than one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Directive {
    index: usize,
    text: String,
    object: String,
    mech: usize,
    when: Option<String>,
    nested: bool,
    generated: bool,
}

/// The directives of a kbuild file, read line by line (the cases write no continuations).
fn directives(text: &str) -> Vec<Directive> {
    let mut stack: Vec<String> = Vec::new();
    let mut generated = false;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("# BEGIN sanpolicy") {
            generated = true;
        } else if trimmed.starts_with("# END sanpolicy") {
            generated = false;
        } else if let Some(rest) = trimmed.strip_prefix("ifdef ") {
            stack.push(format!("ifdef {}", rest.trim()));
        } else if let Some(rest) = trimmed.strip_prefix("ifndef ") {
            stack.push(format!("ifndef {}", rest.trim()));
        } else if trimmed.starts_with("ifeq") || trimmed.starts_with("ifneq") {
            stack.push(trimmed.to_string());
        } else if trimmed == "else" {
            if let Some(top) = stack.pop() {
                stack.push(match (top.strip_prefix("ifdef "), top.strip_prefix("ifndef ")) {
                    (Some(x), _) => format!("ifndef {x}"),
                    (_, Some(x)) => format!("ifdef {x}"),
                    _ => format!("else of {top}"),
                });
            }
        } else if trimmed == "endif" {
            stack.pop();
        } else {
            for (mech, (_, var)) in MECHS.iter().enumerate() {
                let Some(rest) = trimmed.strip_prefix(&format!("{var}_")) else { continue };
                let Some(object) = rest.split(".o").next() else { continue };
                out.push(Directive {
                    index,
                    text: line.to_string(),
                    object: object.to_string(),
                    mech,
                    when: stack.last().cloned(),
                    nested: stack.len() > 1,
                    generated,
                });
            }
        }
    }
    out
}

fn apply_tree_edit(text: &str, edit: &TreeEdit) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let hand: Vec<Directive> = directives(text).into_iter().filter(|d| !d.generated).collect();
    match edit {
        TreeEdit::Append { object, mech, value } => {
            lines.push(String::new());
            lines.push("# Merged upstream.".into());
            lines.push(format!("{}_{object}.o := {value}", MECHS[*mech].1));
        }
        TreeEdit::AppendTwice { object, mech } => {
            lines.push(String::new());
            lines.push("# Merged upstream twice.".into());
            lines.push(format!("{}_{object}.o := y", MECHS[*mech].1));
            lines.push(format!("{}_{object}.o := n", MECHS[*mech].1));
        }
        TreeEdit::Delete(n) if !hand.is_empty() => {
            lines.remove(hand[n % hand.len()].index);
        }
        TreeEdit::Flip(n) if !hand.is_empty() => {
            let at = hand[n % hand.len()].index;
            let flipped = match lines[at].strip_suffix(" n") {
                Some(stem) => format!("{stem} y"),
                None => lines[at].replace(" y", " n"),
            };
            lines[at] = flipped;
        }
        TreeEdit::Wrap(n) => {
            // A line of a variable the file sets twice is not wrapped: a dead line made
            // conditional, which the later line overrides, is a state only a person can judge
            // (check says so, with no command to run), as both sides setting one variable are.
            // Nor is a line of a variable the generated block sets as well.
            let all = directives(text);
            let twice = |d: &Directive| all.iter().filter(|o| (&o.object, o.mech) == (&d.object, d.mech)).count() > 1;
            let top: Vec<&Directive> = hand.iter().filter(|d| d.when.is_none() && !twice(d)).collect();
            if !top.is_empty() {
                let at = top[n % top.len()].index;
                lines.insert(at + 1, "endif".into());
                lines.insert(at, "ifdef CONFIG_SP_MERGED".into());
            }
        }
        _ => {}
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The binary under test: `SANPOLICY_DIFF_BIN`, else the optimised build of this very source
/// (built once, on first use, into the target directory's `release/`, where CI's fuzz step
/// builds it anyway). Each case starts a few dozen processes, and the debug binary spends
/// twice the time starting and judging.
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

/// Whether a fix's command is sanpolicy's `sub` (the binary by any name or path).
fn names(command: &str, sub: &str) -> bool {
    let mut words = command.split_whitespace();
    words.next().is_some_and(|w| w.ends_with("sanpolicy")) && words.next() == Some(sub)
}

/// The findings a verdict counts (bad input, drift, findings, warnings), from its JSON.
fn findings(out: &Out) -> Result<u64, String> {
    let start = out.text.find('{').ok_or_else(|| format!("no verdict JSON (exit {}):\n{}", out.code, out.text))?;
    let mut stream = serde_json::Deserializer::from_str(&out.text[start..]).into_iter::<serde_json::Value>();
    let Some(Ok(v)) = stream.next() else { return Err(format!("no verdict JSON:\n{}", out.text)) };
    let counts = &v["counts"];
    Ok(["bad_input", "drift", "findings", "warnings"].iter().map(|k| counts[k].as_u64().unwrap_or(0)).sum())
}

/// What a fix may not undo: the policy's units, the tree's hand-written lines and make's
/// reading of the tree.
struct State {
    /// (object, mechanism, when) of every unit.
    units: Vec<(String, usize, Option<String>)>,
    /// The units' and the last generation's lines (by the snapshot).
    owned: Vec<(String, usize, Option<String>)>,
    /// (object, mechanism) the policy exempts where the probe looks (no `when`, or `ifndef`).
    exempt: Vec<(String, usize)>,
    /// `lib/Makefile`'s directives.
    lines: Vec<Directive>,
    /// Make's value per (object, mechanism), unset left out.
    make: BTreeMap<(String, usize), String>,
}

fn state(ctx: &Ctx) -> Result<State, String> {
    let text = fs::read_to_string(&ctx.policy).map_err(|e| format!("{}: {e}", ctx.policy.display()))?;
    let doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("the policy does not parse: {e}"))?;
    let mut owned = Vec::new();
    let mut exempt = Vec::new();
    for unit in doc.get("unit").and_then(|u| u.as_array_of_tables()).into_iter().flatten() {
        let Some(object) = unit.get("path").and_then(|p| p.as_str()).and_then(|p| p.strip_prefix("lib/")) else {
            continue;
        };
        let object = object.trim_end_matches(".o").to_string();
        let when = unit.get("when").and_then(|w| w.as_str()).map(str::to_string);
        for key in ["skip", "force"] {
            for name in unit.get(key).and_then(|v| v.as_array()).into_iter().flatten().filter_map(|v| v.as_str()) {
                let Some(mech) = MECHS.iter().position(|(n, _)| *n == name) else { continue };
                owned.push((object.clone(), mech, when.clone()));
                let applies = when.as_deref().is_none_or(|w| w.starts_with("ifndef CONFIG_SP_"));
                if key == "skip" && applies {
                    exempt.push((object.clone(), mech));
                }
            }
        }
    }
    let units = owned.clone();
    owned.extend(remembered(&fs::read_to_string(ctx.snapshot()).unwrap_or_default()));
    let makefile = fs::read_to_string(ctx.tree.join("lib/Makefile")).unwrap_or_default();
    Ok(State { units, owned, exempt, lines: directives(&makefile), make: make_values(&ctx.tree)? })
}

/// The lines the last generation wrote, read from the snapshot (the policy's memory): a unit
/// the policy has since dropped still owns its line, which gen-makefiles rightly removes. A
/// state naming `CONFIG_SP_X` was written under `ifdef`/`ifndef CONFIG_SP_X`; any other
/// unconditionally.
fn remembered(snapshot: &str) -> Vec<(String, usize, Option<String>)> {
    let mut owned = Vec::new();
    for line in snapshot.lines().filter(|l| !l.starts_with('#')) {
        let mut words = line.split_whitespace();
        let (Some(path), Some(mech)) = (words.next(), words.next()) else { continue };
        let Some(object) = path.strip_prefix("lib/").and_then(|p| p.strip_suffix(".o")) else { continue };
        let Some(mech) = MECHS.iter().position(|(n, _)| *n == mech) else { continue };
        let configs: Vec<&str> = words.filter(|w| w.starts_with("CONFIG_SP_")).collect();
        if configs.is_empty() {
            owned.push((object.to_string(), mech, None));
        }
        for config in configs {
            for test in ["ifdef", "ifndef"] {
                owned.push((object.to_string(), mech, Some(format!("{test} {config}"))));
            }
        }
    }
    owned
}

/// (h) between two states around one command of a fix.
fn guard(before: &State, after: &State, command: &str) -> Result<(), String> {
    for line in before.lines.iter().filter(|d| !d.generated && !d.nested) {
        let key = (line.object.clone(), line.mech, line.when.clone());
        if before.owned.contains(&key) {
            continue;
        }
        let kept = after.lines.iter().any(|d| d.text.trim() == line.text.trim() && d.when == line.when);
        if !kept {
            return Err(format!(
                "(h) `{command}` deleted `{}` (under {:?}), which the policy does not own",
                line.text, line.when
            ));
        }
    }
    for key in &before.exempt {
        let was_off = before.make.get(key).is_some_and(|v| v.starts_with('n'));
        let is_off = after.make.get(key).is_some_and(|v| v.starts_with('n'));
        if was_off && !is_off {
            return Err(format!(
                "(h) `{command}` turned {} of lib/{}.o on in make's reading ({:?}), which the policy exempts",
                MECHS[key.1].0,
                key.0,
                after.make.get(key)
            ));
        }
    }
    Ok(())
}

/// Each object's and mechanism's value as make reads `lib/` (its kbuild file, then the central
/// file, as `scripts/Makefile.build` does); (i): make must read every written file.
fn make_values(tree: &Path) -> Result<BTreeMap<(String, usize), String>, String> {
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
    let made = Command::new("make")
        .args(["-s", "-r", "-R", "--no-print-directory", "-f", "sanpolicy-diff-probe.mk", "probe"])
        .current_dir(tree)
        .output()
        .expect("GNU make runs");
    fs::remove_file(&probe_file).unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&made.stdout), String::from_utf8_lossy(&made.stderr));
    if !made.status.success() {
        return Err(format!("(i) make does not read the tree's kbuild files: {text}"));
    }
    let mut values = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.splitn(3, ' ');
        let (Some(object), Some(mech), Some(value)) = (words.next(), words.next(), words.next()) else { continue };
        let value = value.trim_start_matches('[').trim_end_matches(']').trim();
        let Some(mech) = MECHS.iter().position(|(n, _)| *n == mech) else { continue };
        if !value.is_empty() {
            values.insert((object.to_string(), mech), value.to_string());
        }
    }
    Ok(values)
}

/// (b): `explain --format json` on every object of `lib/` against make's reading of the tree.
fn explain_agrees_with_make(ctx: &Ctx) -> Result<(), String> {
    let paths: Vec<String> = OBJECTS.iter().map(|o| format!("lib/{o}.o")).collect();
    let mut args = vec!["explain", "--format", "json"];
    args.extend(paths.iter().map(String::as_str));
    let explained = ctx.sp(&args);
    if explained.code != 0 {
        return Err(format!("explain exited {}: {}", explained.code, explained.text));
    }
    let json_start = explained.text.find('[').unwrap_or(0);
    let mut stream = serde_json::Deserializer::from_str(&explained.text[json_start..]).into_iter::<serde_json::Value>();
    let json = match stream.next() {
        Some(Ok(v)) => v,
        _ => return Err(format!("explain printed no JSON: {}", explained.text)),
    };
    for ((object, mech), value) in make_values(&ctx.tree)? {
        let make_on = !value.starts_with('n');
        let name = MECHS[mech].0;
        let entry = json
            .as_array()
            .and_then(|objects| objects.iter().find(|o| o["object"] == format!("lib/{object}.o")))
            .and_then(|o| o["mechanisms"].as_array())
            .and_then(|ms| ms.iter().find(|m| m["mechanism"] == name));
        let Some(entry) = entry else { return Err(format!("explain says nothing of lib/{object}.o {name}")) };
        if entry["certain"] == false {
            continue;
        }
        let said = match entry["state"].as_str().unwrap_or("") {
            // `on iff not CONFIG_X` (or `off iff CONFIG_X`): the probe defines no CONFIG_SP_*.
            "cond" => match entry["detail"].as_str().and_then(|d| d.split_once(" iff ")) {
                Some((state, cond)) if cond.starts_with("not CONFIG_SP_") || cond.starts_with("CONFIG_SP_") => {
                    let holds = cond.starts_with("not ");
                    let on = (state == "on") == holds;
                    if on {
                        "on"
                    } else {
                        "off"
                    }
                }
                _ => continue,
            },
            said => said,
        };
        if said != if make_on { "on" } else { "off" } {
            return Err(format!(
                "explain says lib/{object}.o {name} is {said}, make reads `{value}` ({}):\n{}",
                if make_on { "on" } else { "off" },
                serde_json::to_string_pretty(entry).unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// The hook, through the pre-commit framework when the case says so.
fn hook(ctx: &Ctx, case: &Case, framework_home: &Path) -> Out {
    if !case.framework {
        return ctx.hook(false);
    }
    let out = Command::new("pre-commit")
        .args(["run", "--hook-stage", "pre-commit", "sanpolicy"])
        .current_dir(&ctx.repo)
        .env("PATH", &ctx.path)
        .env("PRE_COMMIT_HOME", framework_home)
        .env("NO_COLOR", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap_or_else(|e| panic!("pre-commit (from PyPI) must be installed for the real-kernel tier: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Out { code: out.status.code().unwrap_or(-1), text }
}

/// The fix commands of a verdict, each normalised to what it asks (the subcommand and its
/// own flags, without where it runs or `--stage`): the same fix rendered for two invocations.
fn asked(commands: &[String]) -> Vec<String> {
    commands
        .iter()
        .map(|c| {
            let mut words = c.split_whitespace().skip(1).peekable();
            let mut kept = Vec::new();
            while let Some(w) = words.next() {
                match w {
                    "--stage" => {}
                    "--tree" | "--policy" => {
                        words.next();
                    }
                    w => kept.push(w.to_string()),
                }
            }
            kept.join(" ")
        })
        .collect()
}

/// Run a fix's commands as printed in `dir`, with (h) and (i) around each.
fn follow(ctx: &Ctx, dir: &Path, commands: &[String], log: &mut String) -> Result<(), String> {
    for c in commands {
        let before = state(ctx)?;
        let words: Vec<&str> = c.split_whitespace().collect();
        let out = run(dir, &ctx.path, words[0], &words[1..]);
        log.push_str(&format!("$ {c}\n{}\n", out.text));
        if out.code != 0 {
            return Err(format!("(g) the printed fix `{c}` exited {}:\n{log}", out.code));
        }
        let after = state(ctx).map_err(|e| format!("after `{c}`: {e}\n{log}"))?;
        guard(&before, &after, c).map_err(|e| format!("{e}\n{log}"))?;
    }
    Ok(())
}

fn check_case(case: &Case, scratch: &Path, framework_home: &Path, log: &mut String) -> Result<(), String> {
    let ctx = build(case, scratch, log)?;
    // Edits.
    let mut policy = fs::read_to_string(&ctx.policy).unwrap();
    for e in &case.policy {
        policy = apply_policy_edit(&policy, e);
    }
    fs::write(&ctx.policy, &policy).unwrap();
    let mut makefile = fs::read_to_string(ctx.tree.join("lib/Makefile")).unwrap();
    for e in &case.tree {
        makefile = apply_tree_edit(&makefile, e);
    }
    fs::write(ctx.tree.join("lib/Makefile"), &makefile).unwrap();
    let rel = |p: &Path| p.strip_prefix(&ctx.repo).unwrap().display().to_string();
    if case.stage_policy {
        ctx.git(&["add", "-f", &rel(&ctx.policy)])?;
    }
    if case.stage_makefile {
        ctx.git(&["add", "-f", &rel(&ctx.tree.join("lib/Makefile"))])?;
    }

    // The copied policy's curated unit, where the case's own edits kept it: no fix drops it.
    let curated = |ctx: &Ctx| -> Result<bool, String> {
        let History::CopiedSnapshot(object, mech) = case.history else { return Ok(false) };
        Ok(state(ctx)?.units.iter().any(|(o, m, _)| o == object && *m == mech))
    };

    // The rest of the case works in a copy: the hook's fix runs where the hook ran (it may
    // name the tree by its absolute path, for commits from any subdirectory).
    let hook_ctx = ctx;
    let ctx = hook_ctx.copied_to(&scratch.join("rest"))?;

    // (a) the hook and `--check` on the commit the index makes.
    let hooked = hook(&hook_ctx, case, framework_home);
    let export = scratch.join("index");
    ctx.git(&["checkout-index", "-a", "-f", &format!("--prefix={}/", export.display())])?;
    let exported = Ctx::new(case, &export, &ctx.path);
    let ci = exported.sp(&["gen-makefiles", "--check"]);
    if hooked.code == 2 || ci.code == 2 || (hooked.code == 0) != (ci.code == 0) {
        return Err(format!(
            "(a) the hook exited {} but `gen-makefiles --check` on the staged commit exited {}\n--- hook\n{}\n--- check\n{}",
            hooked.code, ci.code, hooked.text, ci.text
        ));
    }
    let curated_before = curated(&hook_ctx)?;
    hook_fix(&hook_ctx, &hooked, log)?;
    if curated_before && !curated(&hook_ctx)? {
        return Err(format!("(d) the hook's fix dropped the copied policy's curated unit:\n{log}"));
    }

    // (b) explain against make, on the edited tree.
    explain_agrees_with_make(&ctx).map_err(|e| format!("(b) after the edits: {e}"))?;

    // (f) one fix for one state.
    same_fix(&ctx, (hooked.code != 0).then_some(&hooked))?;

    // (d) sync in the work tree.
    let before = fs::read(&ctx.policy).unwrap();
    // The case's own policy edits may have dropped it; sync must not.
    let curated_before = curated(&ctx)?;
    let sync = ctx.sp(&["sync"]);
    log.push_str(&format!("$ sync\n{}\n", sync.text));
    match sync.code {
        0 => {
            let again = ctx.sp(&["sync", "--check"]);
            if again.code == 2 || fixes(&again.text).iter().any(|f| names(f, "sync")) {
                return Err(format!("(d) after sync, `sync --check` exited {}:\n{}\n{log}", again.code, again.text));
            }
        }
        2 if fs::read(&ctx.policy).unwrap() == before => {}
        code => {
            return Err(format!(
                "(d) sync exited {code} (the policy byte-identical: {}):\n{log}",
                fs::read(&ctx.policy).unwrap() == before
            ))
        }
    }
    if let History::CopiedSnapshot(object, mech) = case.history {
        if curated_before && !curated(&ctx)? {
            return Err(format!(
                "(d) sync dropped the copied policy's curated unit lib/{object}.o {}:\n{log}",
                MECHS[mech].0
            ));
        }
    }

    // (e), (g): follow the printed fixes.
    for round in 0..=3 {
        let check = ctx.sp(&["check"]);
        let ci = ctx.sp(&["gen-makefiles", "--check"]);
        if check.code == 0 && ci.code == 0 {
            return explain_agrees_with_make(&ctx).map_err(|e| format!("(b) at the clean end:\n{log}{e}"));
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
        let counted = findings(&ctx.sp(&["check", "--format", "json"]))?;
        follow(&ctx, &ctx.here, &commands, log)?;
        let left = findings(&ctx.sp(&["check", "--format", "json"]))?;
        let clean = ctx.sp(&["gen-makefiles", "--check"]).code == 0 && left == 0;
        if left >= counted && !clean {
            return Err(format!("(g) the fix {commands:?} left {left} finding(s) of {counted}:\n{log}"));
        }
    }
    unreachable!()
}

/// (f): check, `gen-makefiles --check` and `sync --check` print one fix for the work tree; the
/// hook's is the same when nothing is unstaged.
fn same_fix(ctx: &Ctx, hooked: Option<&Out>) -> Result<(), String> {
    let mut printed: Vec<(&str, Vec<String>, String)> = Vec::new();
    for (name, args) in [
        ("check", &["check"][..]),
        ("gen-makefiles --check", &["gen-makefiles", "--check"]),
        ("sync --check", &["sync", "--check"]),
    ] {
        let out = ctx.sp(args);
        let commands = fixes(&out.text);
        if !commands.is_empty() {
            printed.push((name, asked(&commands), out.text));
        }
    }
    let unstaged = run(&ctx.repo, &ctx.path, "git", &["diff", "--quiet"]).code != 0;
    if let (Some(h), false) = (hooked, unstaged) {
        let commands = fixes(&h.text);
        if !commands.is_empty() {
            printed.push(("the hook", asked(&commands), h.text.clone()));
        }
    }
    if let Some((first, fix, text)) = printed.first() {
        for (name, other, other_text) in &printed[1..] {
            if other != fix {
                return Err(format!(
                    "(f) {first} prints the fix {fix:?} but {name} prints {other:?}\n--- {first}\n{text}\n--- {name}\n{other_text}"
                ));
            }
        }
    }
    Ok(())
}

/// (g) for the hook: its fix, run as printed at the repository's top, where git runs the hook,
/// exits 0 and leaves the hook fewer findings.
fn hook_fix(ctx: &Ctx, hooked: &Out, log: &mut String) -> Result<(), String> {
    let commands = fixes(&hooked.text);
    if hooked.code == 0 || commands.is_empty() {
        return Ok(());
    }
    let copied = ctx;
    let counted = findings(&copied.hook(true))?;
    let mut hook_log = String::from("(the hook's fix)\n");
    follow(copied, &copied.repo, &commands, &mut hook_log).map_err(|e| format!("{e}\n--- hook\n{}", hooked.text))?;
    let after = copied.hook(true);
    let left = findings(&after)?;
    if after.code != 0 && left >= counted {
        return Err(format!(
            "(g) the hook's fix {commands:?} left it {left} finding(s) of {counted}:\n{hook_log}--- hook\n{}\n--- after\n{}",
            hooked.text, after.text
        ));
    }
    log.push_str(&hook_log);
    Ok(())
}

#[test]
fn every_command_agrees_with_the_others_over_generated_cases() {
    let full = cfg!(feature = "real-kernel");
    let seed: u64 = std::env::var("SANPOLICY_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5a17_90c1);
    let cases: usize = std::env::var("SANPOLICY_DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(if full {
        REAL_TIER_CASES
    } else {
        300
    });
    let only: Option<usize> = std::env::var("SANPOLICY_DIFF_ONLY").ok().and_then(|s| s.parse().ok());
    let framework_cases = if full { FRAMEWORK_CASES } else { 0 };
    if framework_cases > 0 {
        require_pre_commit();
    }
    let mut rng = sanpolicy::runtime::stats::SplitMix(seed);
    let all: Vec<(usize, Case)> = (0..cases).map(|n| (n, generate(&mut rng, n < framework_cases))).collect();
    let todo: Vec<&(usize, Case)> = all.iter().filter(|(n, _)| only.is_none_or(|o| o == *n)).collect();
    let framework_home = tempfile::Builder::new().prefix("sanpolicy-diff-pre-commit-").tempdir().unwrap();
    let failures = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers() {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((n, case)) = todo.get(i) else { break };
                let scratch = tempfile::Builder::new().prefix("sanpolicy-diff-").tempdir().unwrap();
                let mut log = String::new();
                if let Err(e) = check_case(case, scratch.path(), framework_home.path(), &mut log) {
                    // `SANPOLICY_DIFF_KEEP=1`: a failing case's repositories stay, for a look.
                    let kept = std::env::var_os("SANPOLICY_DIFF_KEEP").is_some().then(|| scratch.keep());
                    let kept = kept.map(|k| format!("(kept in {})\n", k.display())).unwrap_or_default();
                    failures.lock().unwrap().push((*n, format!("{case:#?}\n{e}\n{kept}")));
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
             `SANPOLICY_DIFF_SEED={seed} SANPOLICY_DIFF_ONLY={n} cargo test --test differential{}`:\n{first}",
            failures.len(),
            todo.len(),
            if full { " --features real-kernel" } else { "" }
        );
    }
    let through = todo.iter().filter(|(_, c)| c.framework).count();
    eprintln!("{} cases agree (seed {seed}; {through} through the pre-commit framework)", todo.len());
}

/// The pre-commit framework, at least the version `.pre-commit-hooks.yaml` asks for; the
/// real-kernel tier installs it (`.ci/run`), so its absence fails here, loudly.
fn require_pre_commit() {
    let hooks = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".pre-commit-hooks.yaml")).unwrap();
    let wanted = hooks
        .lines()
        .find_map(|l| l.trim().strip_prefix("minimum_pre_commit_version:"))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect(".pre-commit-hooks.yaml names a minimum_pre_commit_version");
    let out = Command::new("pre-commit")
        .arg("--version")
        .output()
        .expect("pre-commit (from PyPI) must be installed for the real-kernel tier: pip install pre-commit");
    let version = String::from_utf8_lossy(&out.stdout).trim().trim_start_matches("pre-commit ").to_string();
    let parse = |v: &str| v.split('.').map(|p| p.parse::<u32>().unwrap_or(0)).collect::<Vec<_>>();
    assert!(
        parse(&version) >= parse(&wanted),
        "pre-commit {version} is older than the {wanted} `.pre-commit-hooks.yaml` asks for"
    );
}

/// Worker threads: `SANPOLICY_DIFF_WORKERS`, else two per core (each case mostly waits on the
/// processes it starts).
fn workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::env::var("SANPOLICY_DIFF_WORKERS").ok().and_then(|s| s.parse().ok()).unwrap_or(2 * cores)
}
