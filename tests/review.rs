//! The review workflow: the pre-commit hook in a real git repository, `install-hook`, and
//! snapshots of `explain`, `report` and `diff` (including `diff --base` over git history).

mod fixture_tree;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use fixture_tree::{Run, Tree, V6_12};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fixture tree, generated, committed as the first commit of a fresh repository.
fn repo(fixture: &str) -> Tree {
    let tree = Tree::new(fixture, V6_12);
    assert_eq!(tree.run(&["gen-makefiles"]).code, 0);
    git(tree.path(), &["init", "-q", "-b", "main"]);
    git(tree.path(), &["config", "user.email", "dev@example.org"]);
    git(tree.path(), &["config", "user.name", "Dev"]);
    git(tree.path(), &["add", "-A"]);
    git(tree.path(), &["commit", "-q", "-m", "adopt sanpolicy"]);
    tree
}

fn append(tree: &Tree, rel: &str, text: &str) {
    let mut now = tree.read(rel);
    now.push_str(text);
    tree.write(rel, now.as_bytes());
}

fn pre_commit(tree: &Tree) -> Run {
    tree.run(&["pre-commit"])
}

#[test]
fn clean_commit_and_unrelated_changes_pass() {
    let tree = repo("dir-off-file-on");
    assert_eq!(pre_commit(&tree).code, 0, "nothing staged");
    append(&tree, "lib/Makefile", "obj-y += list_sort.o\n");
    git(tree.path(), &["add", "lib/Makefile"]);
    let run = pre_commit(&tree);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""), "{}", run.both());
}

#[test]
fn hand_added_directive_is_refused() {
    let tree = repo("dir-off-file-on");
    append(&tree, "lib/Makefile", "KASAN_SANITIZE_sort.o := n\n");
    git(tree.path(), &["add", "lib/Makefile"]);
    let run = pre_commit(&tree);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(run.stderr.contains("`KASAN_SANITIZE_sort.o := n` is in the tree but not in the policy"), "{}", run.stderr);
    assert!(run.stderr.contains("lib/Makefile:"), "points at the line: {}", run.stderr);
    assert!(run.stderr.contains("sanpolicy sync"), "names the fix: {}", run.stderr);
}

#[test]
fn only_the_staged_version_counts() {
    let tree = repo("dir-off-file-on");
    // A hand edit in the work tree that is not staged is not what the commit contains.
    append(&tree, "lib/Makefile", "KASAN_SANITIZE_sort.o := n\n");
    assert_eq!(pre_commit(&tree).code, 0);
}

#[test]
fn hand_edited_block_is_refused() {
    let tree = repo("dir-off-file-on");
    let text = tree.read("mm/kmsan/Makefile").replace("KCOV_INSTRUMENT := n", "KCOV_INSTRUMENT := y");
    tree.write("mm/kmsan/Makefile", text.as_bytes());
    git(tree.path(), &["add", "-u"]);
    let run = pre_commit(&tree);
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(run.stderr.contains("error[hand-edited-block]"), "{}", run.stderr);
}

#[test]
fn policy_change_needs_regenerated_blocks() {
    let tree = repo("dir-off-file-on");
    append(
        &tree,
        "sanitizer-policy.toml",
        "\n[[unit]]\npath = \"lib/sort.o\"\nskip = [\"kasan\"]\nwhy = \"Sorting runs inside KASAN reports.\"\n",
    );
    git(tree.path(), &["add", "sanitizer-policy.toml"]);
    let stale = pre_commit(&tree);
    assert_eq!(stale.code, 1, "{}", stale.both());
    assert!(stale.stdout.contains("+++ b/lib/Makefile"), "the diff of what must change: {}", stale.stdout);
    assert!(stale.stdout.contains("+KASAN_SANITIZE_sort.o := n"), "{}", stale.stdout);
    // One command writes and stages what it wrote: followed literally, the commit goes in.
    assert!(stale.stderr.contains("fix: `sanpolicy gen-makefiles --stage`"), "{}", stale.stderr);
    assert_eq!(tree.run(&["gen-makefiles", "--stage"]).code, 0);
    let fixed = pre_commit(&tree);
    assert_eq!(fixed.code, 0, "{}", fixed.both());
}

#[test]
fn removed_unit_leaves_no_orphan_block() {
    let tree = repo("dir-off-file-on");
    let policy = tree.read("sanitizer-policy.toml");
    let start = policy.find("[[unit]]\npath = \"lib/\"").unwrap();
    let end = policy.find("[[unit]]\npath = \"lib/test_fprobe.o\"").unwrap();
    let trimmed = format!("{}{}", &policy[..start], &policy[end..]).replace(
        "[[require]]\npath = \"lib/\"\nexempt = [\"ftrace\"]\nexcept = [\"test_fprobe.o\"]\nwhy = \"Fixture: a directory requirement on flag removal with an exception.\"\n",
        "",
    );
    tree.write("sanitizer-policy.toml", trimmed.as_bytes());
    git(tree.path(), &["add", "sanitizer-policy.toml"]);
    let run = pre_commit(&tree);
    assert_eq!(run.code, 1, "the lib/ block still removes ftrace flags: {}", run.both());
    assert!(run.stdout.contains("-ccflags-remove-$(CONFIG_FUNCTION_TRACER) += $(CC_FLAGS_FTRACE)"), "{}", run.stdout);
}

#[test]
fn install_hook_runs_on_git_commit() {
    let tree = repo("dir-off-file-on");
    let installed = tree.run(&["install-hook"]);
    assert_eq!(installed.code, 0, "{}", installed.both());
    let hook = tree.join(".git/hooks/pre-commit");
    assert_eq!(fs::metadata(&hook).unwrap().permissions().mode() & 0o111, 0o111, "executable");
    assert_eq!(tree.run(&["install-hook"]).code, 0, "reinstalling our own hook is fine");

    let bin = Path::new(env!("CARGO_BIN_EXE_sanpolicy")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let commit = |msg: &str| {
        Command::new("git")
            .arg("-C")
            .arg(tree.path())
            .args(["commit", "-q", "-m", msg])
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    append(&tree, "lib/Makefile", "KCOV_INSTRUMENT_sort.o := n\n");
    git(tree.path(), &["add", "lib/Makefile"]);
    let refused = commit("hand edit");
    assert!(!refused.status.success(), "the hook stops the commit");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is in the tree but not in the policy"));

    git(tree.path(), &["checkout", "HEAD", "--", "lib/Makefile"]);
    append(&tree, "lib/Makefile", "obj-y += bsearch.o\n");
    git(tree.path(), &["add", "lib/Makefile"]);
    let accepted = commit("plain change");
    assert!(accepted.status.success(), "{}", String::from_utf8_lossy(&accepted.stderr));
}

#[test]
fn install_hook_keeps_a_foreign_hook() {
    let tree = repo("dir-off-file-on");
    let hook = tree.join(".git/hooks/pre-commit");
    fs::write(&hook, "#!/bin/sh\necho mine\n").unwrap();
    let refused = tree.run(&["install-hook"]);
    assert_eq!(refused.code, 2, "{}", refused.both());
    assert!(refused.stderr.contains("--force"), "{}", refused.stderr);
    assert_eq!(fs::read_to_string(&hook).unwrap(), "#!/bin/sh\necho mine\n");
    assert_eq!(tree.run(&["install-hook", "--force"]).code, 0);
    assert!(fs::read_to_string(&hook).unwrap().contains("installed by `sanpolicy install-hook`"));
}

#[test]
fn explain_names_the_deciding_line() {
    let tree = repo("dir-off-file-on");
    let run = tree.run(&["explain", "mm/kmsan/kmsan_test.o", "mm/kmsan/core.o", "lib/test_fprobe.o"]);
    assert_eq!(run.code, 0, "{}", run.both());
    insta::with_settings!({ filters => vec![(fixture_tree::literal(tree.path()).as_str(), "[TREE]")] }, {
        insta::assert_snapshot!("explain", run.stdout);
    });
    let json = tree.run(&["explain", "mm/kmsan/kmsan_test.o", "--format", "json"]);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).expect("valid JSON");
    let kmsan = value[0]["mechanisms"].as_array().unwrap().iter().find(|m| m["mechanism"] == "kmsan").unwrap();
    assert_eq!(kmsan["state"], "on", "the per-file force beats the directory skip");
    assert!(kmsan["decided_by"].as_str().unwrap().contains("sanitizer-policy.toml:"), "{kmsan}");
}

#[test]
fn explain_shows_conditional_states() {
    let tree = Tree::new("conditions", V6_12);
    let run = tree.run(&["explain", "lib/string.o"]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(run.stdout.contains("on iff not CONFIG_AMD_MEM_ENCRYPT"), "{}", run.stdout);
}

#[test]
fn report_summarises_the_policy() {
    let tree = Tree::new("dir-off-file-on", V6_12);
    let run = tree.run(&["report"]);
    assert_eq!(run.code, 0, "{}", run.both());
    insta::assert_snapshot!("report", run.stdout);
    let json = tree.run(&["report", "--format", "json"]);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(value["units"], 4);
    assert!(value["requirements"].as_array().unwrap().iter().all(|r| r["holds"] == true));
}

#[test]
fn report_marks_a_broken_requirement() {
    let tree = Tree::new("broken-requirement", V6_12);
    let run = tree.run(&["report", "--format", "json"]);
    let value: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let broken: Vec<_> = value["requirements"].as_array().unwrap().iter().filter(|r| r["holds"] == false).collect();
    assert!(!broken.is_empty(), "{}", run.stdout);
}

#[test]
fn diff_of_two_files_puts_new_exemptions_first() {
    let tree = Tree::new("dir-off-file-on", V6_12);
    let new = tree.read("sanitizer-policy.toml").replace("force = [\"kmsan\", \"objtool\"]", "force = [\"objtool\"]")
        + "\n[[unit]]\npath = \"lib/sort.o\"\nskip = [\"kasan\"]\nwhy = \"Sorting runs inside KASAN reports.\"\n";
    tree.write("new.toml", new.as_bytes());
    let run = tree.run(&["diff", "sanitizer-policy.toml", "new.toml"]);
    assert_eq!(run.code, 0, "{}", run.both());
    insta::assert_snapshot!("diff_files", run.stdout);
    let text = tree.run(&["diff", "new.toml", "sanitizer-policy.toml", "--format", "text"]);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", text.stdout);
    assert!(lines[0].starts_with("lib/sort.o: KASAN off → on"), "{}", text.stdout);
    assert!(lines[1].starts_with("mm/kmsan/kmsan_test.o: KMSAN off → on"), "{}", text.stdout);
}

#[test]
fn diff_against_a_git_revision() {
    let tree = repo("dir-off-file-on");
    append(&tree, "sanitizer-policy.toml", "\n[[unit]]\npath = \"lib/sort.o\"\nskip = [\"kasan\", \"kcov\"]\nwhy = \"Sorting runs inside KASAN reports.\"\n");
    git(tree.path(), &["commit", "-q", "-am", "exempt sort"]);
    let run = tree.run(&["diff", "--base", "HEAD~1", "--format", "json"]);
    assert_eq!(run.code, 0, "{}", run.both());
    let value: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let changes: Vec<String> = value
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{} {} {} {}", c["path"], c["mechanism"], c["before"], c["after"]))
        .collect();
    // KCOV's default is `$(CONFIG_KCOV_INSTRUMENT_ALL)` for kernel objects, a symbol, not on.
    let kcov = "\"lib/sort.o\" \"kcov\" \"on iff CONFIG_KCOV_INSTRUMENT_ALL\" \"off\"";
    assert_eq!(changes, ["\"lib/sort.o\" \"kasan\" \"on\" \"off\"", kcov]);
    let none = tree.run(&["diff", "--base", "HEAD"]);
    assert!(none.stdout.contains("No change in effective instrumentation."), "{}", none.stdout);
}

#[test]
fn effective_snapshot_follows_the_policy() {
    let tree = repo("dir-off-file-on");
    let snapshot = tree.read("sanitizer-policy.effective.txt");
    assert!(snapshot.contains("mm/kmsan/kmsan_test.o"), "{snapshot}");
    let kmsan_test: Vec<&str> = snapshot.lines().filter(|l| l.starts_with("mm/kmsan/kmsan_test.o")).collect();
    insta::assert_snapshot!("effective_kmsan_test", kmsan_test.join("\n"));
    append(
        &tree,
        "sanitizer-policy.toml",
        "\n[[unit]]\npath = \"lib/sort.o\"\nskip = [\"kasan\"]\nwhy = \"Sorting runs inside KASAN reports.\"\n",
    );
    let check = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(check.code, 1);
    assert!(check.stdout.contains("+lib/sort.o"), "the snapshot diff shows the effect: {}", check.stdout);
}

/// Objects as a person types them (`./mm/kmsan/core.o`, `mm/kmsan/core.c`), and commands run
/// from a subdirectory of the tree: the same answer as `mm/kmsan/core.o` from the top.
#[test]
fn explain_takes_paths_as_typed_and_works_from_a_subdirectory() {
    let tree = repo("dir-off-file-on");
    let top = tree.run(&["explain", "mm/kmsan/core.o"]);
    assert_eq!(top.code, 0, "{}", top.both());
    for typed in ["./mm/kmsan/core.o", "mm/kmsan/core.c"] {
        let run = tree.run(&["explain", typed]);
        assert_eq!((run.code, &run.stdout), (0, &top.stdout), "{typed}: {}", run.both());
    }
    // Paths in the answer are relative to where it runs; the states are the same.
    let states = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let sub = fixture_tree::run_in(&tree.join("mm/kmsan"), &["explain", "core.c"]);
    assert_eq!(sub.code, 0, "{}", sub.both());
    assert!(!states(&top.stdout).is_empty(), "{}", top.stdout);
    assert_eq!(states(&sub.stdout), states(&top.stdout), "{}\n---\n{}", sub.stdout, top.stdout);
    let check = fixture_tree::run_in(&tree.join("mm/kmsan"), &["check"]);
    let at_top = tree.run(&["check"]);
    assert_eq!(check.code, at_top.code, "{}\n---\n{}", check.both(), at_top.both());
    assert!(check.stderr.contains("check ok:"), "check finds the policy from a subdirectory:\n{}", check.both());
}

/// `report --format text` is plain text: no Markdown table, emphasis or code spans.
#[test]
fn report_as_text_is_plain() {
    let tree = Tree::new("dir-off-file-on", V6_12);
    let run = tree.run(&["report", "--format", "text"]);
    assert_eq!(run.code, 0, "{}", run.both());
    for markdown in ["|", "**", "##", "`"] {
        assert!(!run.stdout.contains(markdown), "{markdown:?} in:\n{}", run.stdout);
    }
    assert!(run.stdout.contains("Recursion-prone units:"), "{}", run.stdout);
}

/// mm/Makefile's shape: an uncommented KASAN skip, then the KCSAN and the KCOV paragraphs over
/// lines of the same object. Import keeps each reason with the mechanisms its lines set (one
/// unit per reason), so neither `explain` nor a generated block shows the KCSAN paragraph as
/// the reason for the KASAN skip; generation then changes nothing in either layout.
#[test]
fn import_keeps_each_reason_with_the_lines_it_explains() {
    let tree = Tree::new("mechanisms", V6_12);
    fs::remove_file(tree.join("sanitizer-policy.toml")).unwrap();
    tree.write(
        "lib/Makefile",
        b"obj-y += slub.o\n\nKASAN_SANITIZE_slub.o := n\n\n# Races on bits of one word.\nKCSAN_SANITIZE_slub.o := n\n\n# Coverage that is not a function of syscall inputs.\nKCOV_INSTRUMENT_slub.o := n\nKCOV_INSTRUMENT_slub.o := n\n",
    );
    tree.write("lib/slub.c", b"int slub;\n");
    let before = tree.read("lib/Makefile");
    let import = tree.run(&["import"]);
    assert_eq!(import.code, 0, "{}", import.both());
    let policy = tree.read("sanitizer-policy.toml");
    assert_eq!(policy.matches("path = \"lib/slub.o\"").count(), 3, "{policy}");
    let explain = tree.run(&["explain", "lib/slub.o"]);
    let out = &explain.stdout;
    let section = |mech: &str| {
        let at = out.find(&format!("  {mech} ")).unwrap_or_else(|| panic!("no {mech} in {out}"));
        let end = out[at + 2..].find("\n  k").map_or(out.len(), |e| at + 2 + e);
        out[at..end].to_string()
    };
    assert!(!section("kasan").contains("Races") && !section("kasan").contains("Coverage"), "{out}");
    assert!(section("kcsan").contains("Races on bits") && !section("kcsan").contains("Coverage"), "{out}");
    assert!(section("kcov").contains("Coverage that") && !section("kcov").contains("Races"), "{out}");
    // In place, the policy's line is the tree's own, not a generated one.
    assert!(section("kcsan").contains("line ./lib/Makefile:6") && !out.contains("generated line"), "{out}");
    let check = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(check.code, 0, "{}", check.both());
    assert_eq!(tree.read("lib/Makefile"), before);

    // In a block, each line sits under its own reason.
    tree.write("lib/Makefile", before.as_bytes());
    fs::remove_file(tree.join("sanitizer-policy.toml")).unwrap();
    let adopt = tree.run(&["import", "--adopt", "--layout", "block"]);
    assert_eq!(adopt.code, 0, "{}", adopt.both());
    let adopted = tree.read("lib/Makefile");
    // The first of the two KCOV lines is never read by make: it stays the tree's, above the
    // block (`set-twice`), with the comment it shares.
    let begin = adopted.find("# BEGIN sanpolicy").unwrap();
    assert!(adopted[..begin].ends_with("KCOV_INSTRUMENT_slub.o := n\n\n"), "{adopted}");
    assert!(adopt.stderr.contains("warning[set-twice]"), "{}", adopt.both());
    let block = &adopted[begin..];
    let kasan = block.find("KASAN_SANITIZE_slub.o").unwrap();
    let kcsan = block.find("KCSAN_SANITIZE_slub.o").unwrap();
    assert!(!block[..kasan].contains("Races") && !block[..kasan].contains("Coverage"), "{block}");
    assert!(block[..kcsan].contains("# Races on bits of one word.\n"), "{block}");
    assert_eq!(tree.run(&["gen-makefiles", "--check"]).code, 0);
}
