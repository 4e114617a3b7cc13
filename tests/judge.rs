//! One judge for every command (issue 26): each case a user hit, reproduced on a small tree
//! with 6.12's rule files through the real binary. For each state every command that prints a
//! fix prints the same one; that fix, copied and run by a shell in the same directory, exits 0
//! and leaves fewer findings; no fix deletes a line the policy does not own.

mod fixture_tree;

use std::fs;
use std::path::Path;

use fixture_tree::{all_green, edit, errors, follow_line, git, ok, read, rules_tree, run_in, Run};

const POLICY: &str = "sanitizer-policy.toml";
const MAKEFILE: &str = "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\n";

fn adopted(layout: &str, makefile: &str) -> tempfile::TempDir {
    let t = rules_tree("sanpolicy-judge-", makefile);
    ok(t.path(), &["import", "--adopt", "--layout", layout]);
    all_green(t.path(), "adopted");
    t
}

fn committed(layout: &str, makefile: &str) -> tempfile::TempDir {
    let t = adopted(layout, makefile);
    git(t.path(), &["init", "-q"]);
    git(t.path(), &["add", "-A"]);
    git(t.path(), &["commit", "-q", "-m", "adopt"]);
    t
}

/// The commands of the closing `fix:` line (the last line holding `fix: `), in order; empty
/// when there is none.
fn fixes(run: &Run) -> Vec<String> {
    let Some(last) = run.stderr.lines().rev().find(|l| l.contains("fix: ")) else { return Vec::new() };
    let after = &last[last.find("fix: ").unwrap() + 5..];
    let upto = after.find("; ").map_or(after, |i| &after[..i]);
    upto.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The closing fix of each of `commands` (args), where one printed a fix at all.
fn closing_fixes(p: &Path, commands: &[&[&str]]) -> Vec<(String, Vec<String>)> {
    commands.iter().map(|args| (args.join(" "), fixes(&run_in(p, args)))).filter(|(_, f)| !f.is_empty()).collect()
}

/// Every error the judging commands report now (check's findings, and the drift `--check`
/// sees), each once.
fn findings(p: &Path) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = [&["check"][..], &["gen-makefiles", "--check"][..], &["sync", "--check"][..]]
        .iter()
        .flat_map(|args| errors(&run_in(p, args).stderr))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// (f): every command that prints a fix prints the same one (the hook's staging variant
/// aside, whose commands also stage what they write).
fn one_fix(p: &Path, what: &str) -> Vec<String> {
    let all = closing_fixes(p, &[&["check"], &["gen-makefiles", "--check"], &["sync", "--check"]]);
    assert!(!all.is_empty(), "{what}: no command printed a fix");
    for (cmd, f) in &all {
        assert_eq!(f, &all[0].1, "{what}: `{cmd}` prints another fix than `{}`: {all:?}", all[0].0);
    }
    all[0].1.clone()
}

/// (g): run each command of the fix literally; each exits 0 and the findings shrink.
fn follow(p: &Path, fix: &[String], what: &str) {
    let before = findings(p);
    for line in fix {
        let run = follow_line(p, line);
        assert_eq!(run.code, 0, "{what}: `{line}`: {}", run.both());
    }
    let after = findings(p);
    assert!(after.len() < before.len(), "{what}: after {fix:?} still {after:?} (before {before:?})");
}

/// A: a staged value flip. The hook, check, gen-makefiles --check, sync --check and gen-makefiles
/// give one fix (sync: the tree moved), and the hook's own version of it, followed, lets the
/// commit in.
#[test]
fn a_staged_flip_gets_one_fix_from_every_command() {
    let t = committed("in-place", MAKEFILE);
    let p = t.path();
    edit(p, "lib/Makefile", "KASAN_SANITIZE_a.o := n", "KASAN_SANITIZE_a.o := y");
    git(p, &["add", "lib/Makefile"]);
    let fix = one_fix(p, "flip");
    assert_eq!(fix, ["sanpolicy sync"], "the tree moved: the policy takes it");
    let before = fixture_tree::Fingerprint::of(p);
    let gen = run_in(p, &["gen-makefiles"]);
    assert_eq!(gen.code, 2, "writing would undo the tree's change: {}", gen.both());
    assert_eq!(fixes(&gen), fix, "gen-makefiles names the same fix: {}", gen.both());
    fixture_tree::assert_unchanged(&before, &fixture_tree::Fingerprint::of(p), "refused");
    let hook = run_in(p, &["pre-commit"]);
    assert_eq!(hook.code, 1, "{}", hook.both());
    assert_eq!(fixes(&hook), ["sanpolicy sync --stage"], "{}", hook.both());
    let run = follow_line(p, "sanpolicy sync --stage");
    assert_eq!(run.code, 0, "{}", run.both());
    let hook = run_in(p, &["pre-commit"]);
    assert_eq!(hook.code, 0, "followed, the commit goes in: {}", hook.both());
}

/// B: a unit renamed in the policy, written, renamed back, the Makefile checked out again: the
/// tree has the policy's line but the memory has the other name. Every command names one fix,
/// which clears it; sync does not claim "nothing to take back" while writing.
#[test]
fn a_rename_and_back_gets_one_fix_that_clears_it() {
    let t = committed("in-place", MAKEFILE);
    let p = t.path();
    let policy = read(p, POLICY);
    fs::write(p.join("lib/c.c"), "").unwrap();
    edit(p, "lib/Makefile", "obj-y := a.o b.o", "obj-y := a.o b.o c.o");
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "c.o"]);
    edit(p, POLICY, "path = \"lib/a.o\"", "path = \"lib/c.o\"");
    ok(p, &["gen-makefiles"]);
    fs::write(p.join(POLICY), &policy).unwrap();
    git(p, &["checkout", "--", "lib/Makefile"]);
    let fix = one_fix(p, "rename and back");
    follow(p, &fix, "rename and back");
    all_green(p, "after the fix");
    assert!(read(p, "lib/Makefile").contains("KASAN_SANITIZE_a.o := n"), "the curated line stays");
}

/// C: a policy forcing KASAN on a directory whose requirement it acknowledges: check and the
/// write guard agree (gen-makefiles writes it), and an acknowledgement whose reason names one
/// object does not silence another object's finding.
#[test]
fn an_acknowledged_requirement_is_one_answer_for_check_and_gen_makefiles() {
    let t = adopted("in-place", MAKEFILE);
    let p = t.path();
    let policy = read(p, POLICY);
    let extra = "\n[[require]]\npath = \"lib/\"\nexempt = [\"kasan\"]\nwhy = \"The runtime.\"\n\n\
                 [[unit]]\npath = \"lib/\"\nskip = [\"kasan\"]\nwhy = \"The runtime.\"\n\n\
                 [[unit]]\npath = \"lib/b.o\"\nforce = [\"kasan\"]\nwhy = \"Test the runtime.\"\n\n\
                 [[acknowledge]]\npath = \"lib/b.o\"\ncode = \"recursion-prone\"\nmechanism = \"kasan\"\nwhy = \"Measured: b.o is not reached.\"\n";
    fs::write(p.join(POLICY), format!("{policy}{extra}")).unwrap();
    let check = run_in(p, &["check"]);
    let gen = run_in(p, &["gen-makefiles"]);
    assert_eq!(
        gen.code,
        0,
        "check accepted the acknowledgement, so the write guard does: {}\n{}",
        gen.both(),
        check.both()
    );
    assert!(!gen.both().contains("sanpolicy-any-object"), "no invented object name: {}", gen.both());
    ok(p, &["check"]);
    // The acknowledgement is for b.o: a.o made instrumented is a new finding.
    let now = read(p, POLICY);
    fs::write(p.join(POLICY), now.replace("skip = [\"kasan\"]", "force = [\"kasan\"]")).unwrap();
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("lib/a.o"), "the finding names the broken object: {}", check.stderr);
}

/// D: a policy outside the tree, passed with --policy and --tree: the printed fix carries both
/// flags and works from the same directory; `--tree` naming a subdirectory says where the top is.
#[test]
fn fixes_carry_the_users_policy_and_tree() {
    let t = adopted("in-place", MAKEFILE);
    let p = t.path();
    let outside = tempfile::tempdir().unwrap();
    let work = outside.path();
    fs::copy(p.join(POLICY), work.join("out.toml")).unwrap();
    let tree = p.to_str().unwrap();
    edit(work, "out.toml", "skip = [\"kasan\"]", "skip = [\"kasan\", \"kcov\"]");
    let check = run_in(work, &["check", "--policy", "out.toml", "--tree", tree]);
    assert_eq!(check.code, 1, "{}", check.both());
    let fix = fixes(&check);
    assert!(!fix.is_empty(), "{}", check.both());
    for line in &fix {
        assert!(line.contains("--policy out.toml") && line.contains("--tree"), "{line}");
        let run = follow_line(work, line);
        assert_eq!(run.code, 0, "`{line}` from the same directory: {}", run.both());
    }
    let lib = p.join("lib");
    let sub = run_in(p, &["check", "--tree", lib.to_str().unwrap()]);
    assert_eq!(sub.code, 2, "{}", sub.both());
    assert!(!sub.stderr.contains("import --adopt"), "no adoption of a subdirectory: {}", sub.stderr);
    assert_eq!(sub.stderr.matches("error").count(), 1, "said once: {}", sub.stderr);
}

/// F: a `when` typo is bad input: every command refuses it and none prints a fix that would
/// then be refused.
#[test]
fn a_when_typo_is_refused_with_no_fix_line() {
    let t = adopted("in-place", MAKEFILE);
    let p = t.path();
    fs::write(p.join("Kconfig"), "config FUNCTION_TRACER\n\tbool \"Kernel function tracer\"\n").unwrap();
    edit(p, POLICY, "why = ", "when = \"ifdef CONFIG_FUNCTION_TRACR\"\nwhy = ");
    for args in [&["gen-makefiles", "--check"][..], &["check"][..], &["gen-makefiles"][..]] {
        let run = run_in(p, args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.both());
        assert!(fixes(&run).is_empty(), "{args:?}: no fix to follow: {}", run.both());
        assert!(run.stderr.contains("CONFIG_FUNCTION_TRACR"), "{args:?}: {}", run.stderr);
    }
}

/// K: dropping the unit of one branch of an `ifdef … else … endif` pair: whatever is written
/// make reads (no lone `else`), and after the fixes check sees no drift.
#[test]
fn dropping_one_branch_of_an_else_pair_never_writes_a_lone_else() {
    let makefile = "obj-y := a.o b.o\n\nifdef CONFIG_KASAN_OUTLINE\n# Outline.\nKASAN_SANITIZE_a.o := n\nelse\n# Inline.\nKCOV_INSTRUMENT_a.o := n\nendif\n";
    let t = adopted("in-place", makefile);
    let p = t.path();
    let policy = read(p, POLICY);
    let start = policy.find("[[unit]]").unwrap();
    let second = policy[start + 1..].find("[[unit]]").map(|i| i + start + 1).unwrap_or(policy.len());
    fs::write(p.join(POLICY), format!("{}{}", &policy[..start], &policy[second..])).unwrap();
    let gen = run_in(p, &["gen-makefiles"]);
    let text = read(p, "lib/Makefile");
    let balanced = text.matches("\nifdef").count() == text.matches("\nendif").count()
        && (!text.contains("\nelse") || text.matches("\nifdef").count() > 0);
    assert!(balanced, "gen-makefiles (exit {}) wrote what make refuses:\n{text}\n{}", gen.code, gen.both());
    let make =
        std::process::Command::new("make").args(["-n", "-f", "lib/Makefile", "obj="]).current_dir(p).output().unwrap();
    assert!(!String::from_utf8_lossy(&make.stderr).contains("extraneous"), "{}", String::from_utf8_lossy(&make.stderr));
}

/// CRLF: a snapshot checked out with `core.autocrlf=true` is the same memory.
#[test]
fn a_snapshot_with_crlf_line_endings_is_the_same_base() {
    let t = adopted("in-place", MAKEFILE);
    let p = t.path();
    let snapshot = read(p, "sanitizer-policy.effective.txt");
    fs::write(p.join("sanitizer-policy.effective.txt"), snapshot.replace('\n', "\r\n")).unwrap();
    let check = run_in(p, &["check"]);
    assert!(!check.stderr.contains("bad-snapshot"), "{}", check.both());
    edit(p, "lib/Makefile", "KASAN_SANITIZE_a.o := n\n", "");
    let gen = run_in(p, &["gen-makefiles"]);
    assert_eq!(gen.code, 2, "the base still knows the line was the tree's: {}", gen.both());
}

/// The verdict serialises with its schema for each command that judges.
#[test]
fn the_verdict_serialises_with_a_schema_for_each_command() {
    let t = committed("in-place", MAKEFILE);
    let p = t.path();
    edit(p, "lib/Makefile", "KASAN_SANITIZE_a.o := n", "KASAN_SANITIZE_a.o := y");
    git(p, &["add", "lib/Makefile"]);
    for args in [
        &["check", "--format", "json"][..],
        &["gen-makefiles", "--check", "--format", "json"][..],
        &["sync", "--check", "--format", "json"][..],
        &["pre-commit", "--format", "json"][..],
    ] {
        let run = run_in(p, args);
        let v: serde_json::Value =
            serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", run.both()));
        assert_eq!(v["schema"], "sanpolicy.verdict/1", "{args:?}");
        assert_eq!(v["exit_code"].as_i64(), Some(run.code as i64), "{args:?}: the JSON's exit code is the exit");
        let lines: Vec<&str> = v["commands"].as_array().unwrap().iter().map(|c| c["line"].as_str().unwrap()).collect();
        assert!(lines.iter().all(|l| l.starts_with("sanpolicy sync")), "{args:?}: {lines:?}");
        assert!(v["diagnostics"].as_array().unwrap().iter().any(|d| d["code"] == "drift"), "{args:?}: {v}");
    }
}

/// G: a broken built-in requirement names the policy's units for the object where they are
/// written (two here, one conditional) and points at a file that can be opened.
#[test]
fn a_broken_builtin_requirement_names_the_units_to_edit_where_they_are() {
    let t = rules_tree("sanpolicy-judge-", MAKEFILE);
    let p = t.path();
    fs::create_dir_all(p.join("kernel/locking")).unwrap();
    fs::write(p.join("kernel/locking/lockdep.c"), "").unwrap();
    fs::write(
        p.join("kernel/locking/Makefile"),
        "obj-y += lockdep.o\n\n# Noisy.\nKCOV_INSTRUMENT_lockdep.o := n\n\nifdef CONFIG_FUNCTION_TRACER\n# Traced.\nKCSAN_SANITIZE_lockdep.o := n\nendif\n",
    )
    .unwrap();
    ok(p, &["import", "--adopt"]);
    let check = run_in(p, &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    let finding = check
        .stderr
        .split("\n\n")
        .find(|b| b.contains("error[recursion-prone]") && b.contains("kasan"))
        .unwrap_or_else(|| panic!("{}", check.stderr));
    assert!(!finding.contains("<sanpolicy>"), "no location that cannot be opened: {finding}");
    let policy = read(p, POLICY);
    let lines: Vec<usize> = policy
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("kernel/locking/lockdep.o"))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 2, "{policy}");
    for line in lines {
        assert!(finding.contains(&format!("{POLICY}:{line}:")), "names the unit at line {line}: {finding}");
    }
    assert!(finding.contains("CONFIG_FUNCTION_TRACER"), "says which unit is conditional: {finding}");
    // Where it points can be opened.
    let at = finding.lines().find_map(|l| l.trim_start().strip_prefix("┌─ ")).expect("a location");
    let file = at.split(':').next().unwrap();
    assert!(p.join(file).is_file(), "{at}");
}

/// C, the other half: one finding per broken object of a directory requirement.
#[test]
fn a_directory_requirement_gives_one_finding_per_broken_object() {
    let t = adopted("in-place", "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := y\nKASAN_SANITIZE_b.o := y\n");
    let p = t.path();
    let policy = read(p, POLICY);
    fs::write(
        p.join(POLICY),
        format!("{policy}\n[[require]]\npath = \"lib/\"\nexempt = [\"kasan\"]\nwhy = \"The runtime.\"\n\n[[unit]]\npath = \"lib/\"\nskip = [\"kasan\"]\nwhy = \"The runtime.\"\n"),
    )
    .unwrap();
    let check = run_in(p, &["check"]);
    let found: Vec<_> = errors(&check.stderr).into_iter().filter(|(c, _)| c == "recursion-prone").collect();
    assert_eq!(found.len(), 2, "a.o and b.o: {}", check.stderr);
    assert!(check.stderr.contains("`lib/a.o`") && check.stderr.contains("`lib/b.o`"), "{}", check.stderr);
    // An acknowledgement for a.o leaves b.o's finding.
    let now = read(p, POLICY);
    fs::write(
        p.join(POLICY),
        format!("{now}\n[[acknowledge]]\npath = \"lib/a.o\"\ncode = \"recursion-prone\"\nmechanism = \"kasan\"\nwhy = \"Only a.o: measured.\"\n"),
    )
    .unwrap();
    let check = run_in(p, &["check"]);
    let found: Vec<_> = errors(&check.stderr).into_iter().filter(|(c, _)| c == "recursion-prone").collect();
    assert_eq!(found.len(), 1, "b.o stays: {}", check.stderr);
    assert!(check.stderr.contains("1 acknowledged"), "{}", check.stderr);
}

/// What make reads for `var` from `lib/Makefile` of `p` (with `CONFIG_…` from `vars`).
fn make_value(p: &Path, var: &str, vars: &[&str]) -> String {
    let out = std::process::Command::new("make")
        .args(["-s", "--no-print-directory", "-f", "lib/Makefile", "-f", "-"])
        .args(vars)
        .arg("sanpolicy-print")
        .current_dir(p)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin.take().unwrap().write_all(format!("sanpolicy-print:\n\t@echo '$({var})'\n").as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success(), "make: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Follow the closing fixes until every command is green (at most three rounds), checking
/// after each that make still reads `var` as `value` (h: no fix switches on what the policy
/// exempts).
fn follow_keeping(p: &Path, var: &str, value: &str, vars: &[&str], what: &str) {
    for _ in 0..3 {
        let fix = closing_fixes(p, &[&["check"], &["gen-makefiles", "--check"], &["sync", "--check"]]);
        let Some((_, fix)) = fix.into_iter().next() else { return };
        follow(p, &fix, what);
        assert_eq!(make_value(p, var, vars), value, "{what}: after {fix:?}:\n{}", read(p, "lib/Makefile"));
    }
    all_green(p, what);
}

/// I: in place, a hand-added conditional line for a variable the policy holds unconditionally
/// is the tree's (sync takes it), not a dropped unit of the policy's whose line gen-makefiles
/// removes.
#[test]
fn a_hand_added_conditional_line_is_the_trees_not_a_dropped_unit() {
    let t = adopted("in-place", MAKEFILE);
    let p = t.path();
    let text = read(p, "lib/Makefile");
    fs::write(p.join("lib/Makefile"), format!("{text}\nifdef CONFIG_FOO\n# Wanted.\nKASAN_SANITIZE_a.o := y\nendif\n"))
        .unwrap();
    let fix = one_fix(p, "hand-added conditional");
    assert_eq!(fix, ["sanpolicy sync"], "the tree is ahead");
    follow_keeping(p, "KASAN_SANITIZE_a.o", "y", &["CONFIG_FOO=y"], "hand-added conditional");
    assert_eq!(make_value(p, "KASAN_SANITIZE_a.o", &[]), "n");
    assert!(read(p, POLICY).contains("CONFIG_FOO"), "{}", read(p, POLICY));
}

/// J: block layout, `:= y` then `:= n` appended after the block of a policy that skips the
/// mechanism: make reads `n`; no fix leaves the `:= y` as what make reads, and a requirement is
/// judged on the last setter.
#[test]
fn lines_after_a_block_are_judged_by_the_last_setter() {
    let t = adopted("block", MAKEFILE);
    let p = t.path();
    let policy = read(p, POLICY);
    fs::write(
        p.join(POLICY),
        format!("{policy}\n[[require]]\npath = \"lib/a.o\"\nexempt = [\"kasan\"]\nwhy = \"The runtime.\"\n"),
    )
    .unwrap();
    ok(p, &["gen-makefiles"]);
    let text = read(p, "lib/Makefile");
    fs::write(p.join("lib/Makefile"), format!("{text}KASAN_SANITIZE_a.o := y\nKASAN_SANITIZE_a.o := n\n")).unwrap();
    assert_eq!(make_value(p, "KASAN_SANITIZE_a.o", &[]), "n");
    let check = run_in(p, &["check"]);
    assert!(!check.stderr.contains("error[recursion-prone]"), "make reads `n`: {}", check.stderr);
    follow_keeping(p, "KASAN_SANITIZE_a.o", "n", &[], "y then n after the block");
}

/// H: a skip→force flip taken by sync marks the reason for rewriting, and check keeps asking.
#[test]
fn a_flip_taken_by_sync_keeps_asking_for_a_reason() {
    let t = adopted("in-place", MAKEFILE);
    let p = t.path();
    edit(p, "lib/Makefile", "KASAN_SANITIZE_a.o := n", "KASAN_SANITIZE_a.o := y");
    let sync = ok(p, &["sync"]);
    assert!(sync.stderr.contains("flipped"), "{}", sync.both());
    let explain = ok(p, &["explain", "lib/a.o"]).stdout;
    let kasan =
        explain.lines().skip_while(|l| !l.trim_start().starts_with("kasan ")).take(2).collect::<Vec<_>>().join("\n");
    assert!(!kasan.contains("A reason."), "the old reason is not shown as why it is on: {explain}");
    let check = run_in(p, &["check"]);
    assert!(check.stderr.contains("placeholder-reason") || check.code != 0, "check asks again: {}", check.both());
    let strict = run_in(p, &["check", "--strict"]);
    assert_ne!(strict.code, 0, "{}", strict.both());
}

/// L: a merge wraps a unit's line in a condition: sync keeps the unit (its links and category)
/// and adds the condition.
#[test]
fn a_merge_wrapping_a_line_in_a_condition_keeps_the_units_links() {
    let t = adopted("in-place", MAKEFILE);
    let p = t.path();
    edit(p, POLICY, "why = ", "category = \"runtime\"\nlinks = [\"https://lore.kernel.org/x\"]\nwhy = ");
    ok(p, &["gen-makefiles"]);
    all_green(p, "links added");
    edit(
        p,
        "lib/Makefile",
        "# A reason.\nKASAN_SANITIZE_a.o := n\n",
        "ifdef CONFIG_FOO\n# A reason.\nKASAN_SANITIZE_a.o := n\nendif\n",
    );
    let sync = ok(p, &["sync"]);
    let policy = read(p, POLICY);
    assert!(
        policy.contains("https://lore.kernel.org/x") && policy.contains("category = \"runtime\""),
        "{}\n{policy}",
        sync.both()
    );
    assert!(policy.contains("CONFIG_FOO"), "{policy}");
    all_green(p, "after sync");
}

/// P: a line under `ifeq "$(CONFIG_FOO) " "y"` (never true in make) is not a condition the
/// policy can hold: import says so at the line and never writes a `when` true for CONFIG_FOO=y.
#[test]
fn a_condition_make_never_takes_is_unrepresentable_not_a_when() {
    let makefile = "obj-y := a.o b.o\n\nifeq \"$(CONFIG_FOO) \" \"y\"\n# Never.\nKASAN_SANITIZE_a.o := n\nendif\n";
    let t = rules_tree("sanpolicy-judge-", makefile);
    let p = t.path();
    assert_eq!(make_value(p, "KASAN_SANITIZE_a.o", &["CONFIG_FOO=y"]), "", "make never takes the branch");
    let adopt = run_in(p, &["import", "--adopt"]);
    assert!(!adopt.both().contains("bug"), "{}", adopt.both());
    let policy = fs::read_to_string(p.join(POLICY)).unwrap_or_default();
    assert!(!policy.contains("CONFIG_FOO"), "no `when` make would not take: {policy}\n{}", adopt.both());
    if adopt.code == 0 {
        ok(p, &["gen-makefiles"]);
        assert_eq!(make_value(p, "KASAN_SANITIZE_a.o", &["CONFIG_FOO=y"]), "", "{}", read(p, "lib/Makefile"));
    }
}

/// N: a policy at the repository's top with the tree in `linux/`: a clone keeps its base.
#[test]
fn a_policy_outside_its_tree_binds_relative_so_clones_keep_their_base() {
    let repo = tempfile::tempdir().unwrap();
    let r = repo.path();
    let t = rules_tree("sanpolicy-judge-", MAKEFILE);
    fixture_tree::copy_dir(t.path(), &r.join("linux"));
    ok(r, &["import", "--adopt", "--tree", "linux", "--policy", "sanitizer-policy.toml"]);
    ok(r, &["gen-makefiles", "--check", "--tree", "linux", "--policy", "sanitizer-policy.toml"]);
    git(r, &["init", "-q"]);
    git(r, &["add", "-A"]);
    git(r, &["commit", "-q", "-m", "adopt"]);
    let clones = tempfile::tempdir().unwrap();
    let clone = clones.path().join("clone");
    git(clones.path(), &["clone", "-q", r.to_str().unwrap(), "clone"]);
    let run = run_in(&clone, &["gen-makefiles", "--check", "--tree", "linux", "--policy", "sanitizer-policy.toml"]);
    assert_eq!(run.code, 0, "a clone is the same tree: {}", run.both());
    // The clone loses the curated line: the base knows it was the tree's.
    edit(&clone, "linux/lib/Makefile", "KASAN_SANITIZE_a.o := n\n", "");
    let gen = run_in(&clone, &["gen-makefiles", "--tree", "linux", "--policy", "sanitizer-policy.toml"]);
    assert_eq!(gen.code, 2, "{}", gen.both());
}

/// M: a policy and its snapshot copied from tree A into tree B, which never had a curated line:
/// B's history never lost it, so the policy is ahead there (gen-makefiles writes it), not
/// the tree (sync would drop the curated unit).
#[test]
fn a_snapshot_copied_from_another_tree_is_not_its_base() {
    let a = committed("in-place", MAKEFILE);
    let b = rules_tree("sanpolicy-judge-", "obj-y := a.o b.o\n");
    let q = b.path();
    git(q, &["init", "-q"]);
    git(q, &["add", "-A"]);
    git(q, &["commit", "-q", "-m", "upstream"]);
    for f in [POLICY, "sanitizer-policy.effective.txt"] {
        fs::copy(a.path().join(f), q.join(f)).unwrap();
    }
    let fix = one_fix(q, "copied");
    assert_eq!(fix, ["sanpolicy gen-makefiles"], "the policy is ahead of B");
    follow(q, &fix, "copied");
    all_green(q, "copied");
    assert!(read(q, POLICY).contains("lib/a.o"), "the curated unit stays");
    assert!(read(q, "lib/Makefile").contains("KASAN_SANITIZE_a.o := n"));
}

/// import and explain print their JSON with a schema too; explain's carries the judge's drift
/// about the object, with the same fix as the verdict's.
#[test]
fn import_and_explain_json_carry_a_schema_and_the_judges_drift() {
    let t = rules_tree("sanpolicy-judge-", MAKEFILE);
    let p = t.path();
    let run = ok(p, &["import", "--adopt", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.both()));
    assert_eq!(v["schema"], "sanpolicy.import/1");
    assert_eq!(v["units"], 1);
    assert_eq!(v["next"]["line"], "sanpolicy check");
    let written: Vec<&str> = v["written"].as_array().unwrap().iter().filter_map(|w| w.as_str()).collect();
    assert!(written.iter().any(|w| w.ends_with(POLICY)), "{written:?}");
    assert!(p.join(POLICY).is_file());
    edit(p, POLICY, "skip = [\"kasan\"]", "skip = [\"kasan\", \"kcov\"]");
    let run = ok(p, &["explain", "--format", "json", "lib/a.o"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v[0]["schema"], "sanpolicy.explain/1");
    let drift = v[0]["drift"].as_array().unwrap();
    assert!(drift.iter().any(|d| d["code"] == "drift" && d["subject"]["path"] == "lib/a.o"), "{drift:?}");
    let gen = run_in(p, &["gen-makefiles", "--check", "--format", "json"]);
    let verdict: serde_json::Value = serde_json::from_str(&gen.stdout).unwrap();
    assert_eq!(verdict["commands"][0]["line"], "sanpolicy gen-makefiles", "{verdict}");
    // The JSON summary and `--out -` both want stdout: refused before anything is read.
    let both = run_in(p, &["import", "--out", "-", "--format", "json"]);
    assert_eq!(both.code, 2, "{}", both.both());
}
