//! Every `help:` line, followed literally, fixes the problem or moves it forward: the cases of
//! issue 9 point 7 that the real-tree tests (tests/round_trip.rs: hand-added line, unsynced
//! merge, stale directive, hand-edited block) do not already follow, on a small in-place tree.

mod fixture_tree;

use std::fs;
use std::path::Path;

use fixture_tree::{follow_line, git, run_in, Run};

/// A tree with 6.12's rule files, `lib/a.c`, `lib/b.c` and `lib/Makefile` as given.
fn tree(makefile: &str) -> tempfile::TempDir {
    fixture_tree::rules_tree("sanpolicy-help-", makefile)
}

fn help(run: &Run) -> Vec<String> {
    run.stderr.lines().filter_map(|l| l.trim_start().strip_prefix("= help: ")).map(str::to_string).collect()
}

const MAKEFILE: &str = "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\n";

/// A line the tree lost: check says the tree moved and to run sync; sync drops the unit; then
/// check and `gen-makefiles --check` pass, and sync changed no kbuild byte.
#[test]
fn a_hand_removed_line_is_taken_back_by_sync() {
    let t = tree(MAKEFILE);
    assert_eq!(run_in(t.path(), &["import", "--adopt"]).code, 0);
    fs::write(t.path().join("lib/Makefile"), "obj-y := a.o b.o\n").unwrap();
    let check = run_in(t.path(), &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("is gone from `lib/Makefile`"), "{}", check.both());
    let hints = help(&check);
    assert!(hints.iter().any(|h| h.contains("run `sanpolicy sync` to drop the unit")), "{hints:?}");
    let write = run_in(t.path(), &["gen-makefiles"]);
    assert_eq!(write.code, 2, "writing would put the removed line back unasked: {}", write.both());
    let sync = run_in(t.path(), &["sync"]);
    assert_eq!(sync.code, 0, "{}", sync.both());
    assert!(sync.stderr.contains("removed: lib/a.o kasan"), "{}", sync.both());
    assert_eq!(fs::read_to_string(t.path().join("lib/Makefile")).unwrap(), "obj-y := a.o b.o\n");
    assert!(!fs::read_to_string(t.path().join("sanitizer-policy.toml")).unwrap().contains("lib/a.o"));
    for args in [&["check"][..], &["gen-makefiles", "--check"][..]] {
        let run = run_in(t.path(), args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.both());
    }
}

/// A flag-removal line sanpolicy cannot stand for (an inline comment keeps a blank in the value):
/// check's help offers two ways, and each works when followed.
#[test]
fn an_unmanaged_cflags_remove_line_is_rewritten_or_acknowledged() {
    let odd = format!("{MAKEFILE}CFLAGS_REMOVE_b.o = -pg # keep b untraced\n");
    for way in ["rewrite", "acknowledge"] {
        let t = tree(&odd);
        assert_eq!(run_in(t.path(), &["import", "--adopt"]).code, 0);
        let check = run_in(t.path(), &["check"]);
        assert_eq!(check.code, 1, "{}", check.both());
        assert!(check.stderr.contains("error[unrepresentable]: `CFLAGS_REMOVE_b.o` is decided outside the policy"));
        let hints = help(&check);
        assert!(
            hints.iter().any(|h| h.contains("rewrite it as a plain line") && h.contains("run `sanpolicy sync`")),
            "{hints:?}"
        );
        if way == "rewrite" {
            // As the help says: a plain line (the reason goes in a comment above), then sync.
            let plain = format!("{MAKEFILE}# keep b untraced\nCFLAGS_REMOVE_b.o = -pg\n");
            fs::write(t.path().join("lib/Makefile"), plain).unwrap();
            let sync = run_in(t.path(), &["sync"]);
            assert_eq!(sync.code, 0, "{}", sync.both());
            let policy = fs::read_to_string(t.path().join("sanitizer-policy.toml")).unwrap();
            assert!(policy.contains("path = \"lib/b.o\"") && policy.contains("ftrace = \"-pg\""), "{policy}");
            assert!(policy.contains("keep b untraced"), "the comment is the reason:\n{policy}");
        } else {
            let policy = t.path().join("sanitizer-policy.toml");
            let mut text = fs::read_to_string(&policy).unwrap();
            text.push_str("\n[[acknowledge]]\ncode = \"unrepresentable\"\npath = \"lib/b.o\"\nmechanism = \"ftrace\"\nwhy = \"upstream's line\"\n");
            fs::write(&policy, text).unwrap();
        }
        let check = run_in(t.path(), &["check"]);
        assert_eq!(check.code, 0, "{way}: {}", check.both());
        assert!(check.stderr.contains("check ok:"), "{way}: {}", check.both());
        let ci = run_in(t.path(), &["gen-makefiles", "--check"]);
        assert_eq!(ci.code, 0, "{way}: {}", ci.both());
    }
}

/// The other way the hand-removed line's help offers: `gen-makefiles --force` writes the line
/// back (where the placement rule puts it) and everything is green.
#[test]
fn a_hand_removed_line_is_written_back_by_gen_makefiles_force() {
    let t = tree(MAKEFILE);
    assert_eq!(run_in(t.path(), &["import", "--adopt"]).code, 0);
    fs::write(t.path().join("lib/Makefile"), "obj-y := a.o b.o\n").unwrap();
    let check = run_in(t.path(), &["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    let hints = help(&check);
    assert!(hints.iter().any(|h| h.contains("`sanpolicy gen-makefiles --force` to write the line back")), "{hints:?}");
    let write = run_in(t.path(), &["gen-makefiles", "--force"]);
    assert_eq!(write.code, 0, "{}", write.both());
    // Where the placement rule puts a line in a file with no other directive: above the first
    // list line, its reason above it.
    let back = "# A reason.\nKASAN_SANITIZE_a.o := n\n\nobj-y := a.o b.o\n";
    assert_eq!(fs::read_to_string(t.path().join("lib/Makefile")).unwrap(), back);
    green(t.path());
}

/// A flag removal the policy does not manage, added by hand (it takes ftrace out among other
/// flags): check names sync or deleting the line; each way, followed, leaves everything green.
/// A removal with no instrumentation flag in it is no finding at all.
#[test]
fn a_hand_added_cflags_remove_line_is_synced_or_deleted() {
    let odd = "CFLAGS_REMOVE_b.o += -pg -fno-stack-protector\n";
    for way in ["sync", "delete"] {
        let t = tree(&format!("{MAKEFILE}CFLAGS_REMOVE_a.o = -O2\n"));
        assert_eq!(run_in(t.path(), &["import", "--adopt"]).code, 0);
        green(t.path());
        let makefile = t.path().join("lib/Makefile");
        let before = fs::read_to_string(&makefile).unwrap();
        fs::write(&makefile, format!("{before}{odd}")).unwrap();
        let check = run_in(t.path(), &["check"]);
        assert_eq!(check.code, 1, "{}", check.both());
        assert!(check
            .stderr
            .contains("`CFLAGS_REMOVE_b.o += -pg -fno-stack-protector` is in the tree but not in the policy"));
        let hints = help(&check);
        assert!(
            hints
                .iter()
                .any(|h| h.contains("run `sanpolicy sync` to take it into the policy")
                    && h.ends_with("or delete the line")),
            "{hints:?}"
        );
        if way == "sync" {
            let sync = run_in(t.path(), &["sync"]);
            assert_eq!(sync.code, 0, "{}", sync.both());
            let policy = fs::read_to_string(t.path().join("sanitizer-policy.toml")).unwrap();
            assert!(policy.contains("ftrace = \"-pg -fno-stack-protector\""), "the exact flags are kept:\n{policy}");
        } else {
            fs::write(&makefile, &before).unwrap();
        }
        green(t.path());
    }
}

/// The pre-commit hook judges the index: its help for a hand-removed line and for a hand-added
/// flag removal names one command that also stages what it wrote (`--stage`); running it
/// literally, as a shell runs the copied text, makes the hook pass and the commit go in.
#[test]
fn the_hooks_help_followed_literally_lets_the_commit_through() {
    let cases: [(&str, &str, &str); 3] = [
        ("removed, sync", "obj-y := a.o b.o\n", "sanpolicy sync --stage"),
        ("removed, write back", "obj-y := a.o b.o\n", "sanpolicy gen-makefiles --force --stage"),
        ("added flag removal", "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\n\nCFLAGS_REMOVE_b.o += -pg -fno-stack-protector\n", "sanpolicy sync --stage"),
    ];
    for (what, makefile, command) in cases {
        let t = tree(MAKEFILE);
        let p = t.path();
        assert_eq!(run_in(p, &["import", "--adopt"]).code, 0);
        git(p, &["init", "-q"]);
        git(p, &["add", "-A"]);
        git(p, &["commit", "-q", "-m", "adopt"]);
        fs::write(p.join("lib/Makefile"), makefile).unwrap();
        git(p, &["add", "lib/Makefile"]);
        let hook = run_in(p, &["pre-commit"]);
        assert_eq!(hook.code, 1, "{what}: {}", hook.both());
        let hints = help(&hook);
        assert!(
            hints.iter().any(|h| backticked(h).iter().any(|c| c == command)),
            "{what}: no `{command}` in {hints:?}"
        );
        let run = follow_line(p, command);
        assert_eq!(run.code, 0, "{what}: `{command}`: {}", run.both());
        let hook = run_in(p, &["pre-commit"]);
        assert_eq!(hook.code, 0, "{what}: after `{command}`: {}", hook.both());
        green(p);
    }
}

fn green(p: &Path) {
    for args in [&["check"][..], &["gen-makefiles", "--check"][..], &["sync", "--check"][..]] {
        let run = run_in(p, args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.both());
    }
}

/// Every text between a pair of backticks, in order.
fn backticked(s: &str) -> Vec<String> {
    s.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Run a command a text gave (`sanpolicy …` or `git …`) word for word in `dir`.
fn follow(dir: &Path, command: &str) -> std::process::Output {
    let words: Vec<&str> = command.split_whitespace().collect();
    let program = match words[0] {
        "sanpolicy" => env!("CARGO_BIN_EXE_sanpolicy"),
        other => other,
    };
    std::process::Command::new(program).args(&words[1..]).current_dir(dir).output().unwrap()
}

/// `check` where no policy is yet points at adoption; followed from a subdirectory, the command
/// adopts the tree and `check` then reads the policy.
#[test]
fn check_without_a_policy_points_at_import_adopt() {
    let t = tree(MAKEFILE);
    let lib = t.path().join("lib");
    let check = run_in(&lib, &["check"]);
    assert_eq!(check.code, 2, "{}", check.both());
    let hints = help(&check);
    let command = hints.iter().flat_map(|h| backticked(h)).find(|c| c.contains("import --adopt"));
    let command = command.unwrap_or_else(|| panic!("no import --adopt in {hints:?}"));
    let out = follow(&lib, &command);
    assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(t.path().join("sanitizer-policy.toml").is_file());
    assert_eq!(fs::read_to_string(lib.join("Makefile")).unwrap(), MAKEFILE, "adoption changed a kbuild byte");
    assert_eq!(run_in(&lib, &["check"]).code, 0);
}

/// Import's last line says how to commit both files, and that command works, also in a tree
/// whose `.gitignore` ignores everything (Debian's kernel source tarballs: `/*`).
#[test]
fn imports_commit_command_works_where_git_ignores_the_files() {
    for ignore in ["", "/*\n"] {
        let t = tree(MAKEFILE);
        git(t.path(), &["init", "-q"]);
        fs::write(t.path().join(".gitignore"), ignore).unwrap();
        let import = run_in(t.path(), &["import", "--adopt"]);
        assert_eq!(import.code, 0, "{}", import.both());
        let next = import.stderr.lines().find(|l| l.starts_with("next:")).unwrap_or_default().to_string();
        let add = backticked(&next).into_iter().find(|c| c.starts_with("git add"));
        let add = add.unwrap_or_else(|| panic!("no git add in {next:?}"));
        assert_eq!(add.starts_with("git add -f"), !ignore.is_empty(), "{next}");
        let out = follow(t.path(), &add);
        assert!(out.status.success(), "{add}: {}", String::from_utf8_lossy(&out.stderr));
        let staged = std::process::Command::new("git")
            .args(["diff", "--cached", "--name-only"])
            .current_dir(t.path())
            .output()
            .unwrap();
        let staged = String::from_utf8_lossy(&staged.stdout);
        assert!(
            staged.contains("sanitizer-policy.toml") && staged.contains("sanitizer-policy.effective.txt"),
            "{add} staged {staged:?}"
        );
    }
}

/// `import --help`'s examples do what their comments say: `--adopt` changes no kbuild byte,
/// `--adopt --layout block` moves the lines into a generated block.
#[test]
fn the_import_help_examples_do_what_they_say() {
    let help_text = run_in(Path::new("."), &["import", "--help"]).stdout;
    let examples: Vec<(&str, &str)> = help_text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("sanpolicy import --adopt"))
        .map(|rest| rest.split_once('#').map_or((rest.trim(), ""), |(a, c)| (a.trim(), c.trim())))
        .collect();
    assert_eq!(examples.len(), 2, "{help_text}");
    for (args, says) in examples {
        let t = tree(MAKEFILE);
        let out = follow(t.path(), &format!("sanpolicy import --adopt {args}"));
        assert!(out.status.success(), "{args}: {}", String::from_utf8_lossy(&out.stderr));
        let after = fs::read_to_string(t.path().join("lib/Makefile")).unwrap();
        if says.contains("no kbuild byte changes") {
            assert_eq!(after, MAKEFILE, "{says}");
        } else {
            assert!(says.contains("generated blocks"), "{says}");
            assert!(after.contains("# BEGIN sanpolicy generated block"), "{says}: {after}");
        }
    }
    let top = run_in(Path::new("."), &["--help"]).stdout;
    let line = top.lines().find(|l| l.trim_start().starts_with("import")).unwrap_or_default();
    assert!(!line.contains("generated blocks"), "`sanpolicy --help` says adoption writes blocks: {line}");
}

/// The book's policy example (`docs/src/reference/policy.md`), copied into a tree as its
/// policy, loads without a problem.
#[test]
fn the_books_policy_example_works_when_copied_into_a_tree() {
    let page = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference/policy.md")).unwrap();
    let section = &page[page.find("# The policy file").expect("the page's title")..];
    let example = section.split("```toml\n").nth(1).and_then(|s| s.split("```").next()).expect("a toml block");
    let t = tree("obj-y := a.o b.o\n");
    fs::write(t.path().join("sanitizer-policy.toml"), example).unwrap();
    let (_, diags) = sanpolicy::policy::load(&t.path().join("sanitizer-policy.toml"));
    assert!(!diags.has_errors(), "{diags:?}");
}

/// `diff --base` with a revision the repository lacks suggests only revisions it has (no
/// `origin/master` without a remote), and the first suggestion, followed, works.
#[test]
fn diff_base_suggests_revisions_the_repository_has() {
    let t = tree(MAKEFILE);
    git(t.path(), &["init", "-q"]);
    assert_eq!(run_in(t.path(), &["import", "--adopt"]).code, 0);
    git(t.path(), &["add", "-A"]);
    git(t.path(), &["commit", "-qm", "adopt"]);
    fs::write(t.path().join("note"), "x").unwrap();
    git(t.path(), &["add", "note"]);
    git(t.path(), &["commit", "-qm", "second"]);
    let run = run_in(t.path(), &["diff", "--base", "origin/master"]);
    assert_eq!(run.code, 2, "{}", run.both());
    let hints = help(&run);
    let suggested: Vec<String> = hints.iter().flat_map(|h| backticked(h)).collect();
    assert!(!suggested.is_empty() && suggested.iter().all(|s| !s.contains("origin")), "{hints:?}");
    for suggestion in &suggested {
        let args: Vec<&str> = std::iter::once("diff").chain(suggestion.split_whitespace()).collect();
        let run = run_in(t.path(), &args);
        assert_eq!(run.code, 0, "{suggestion}: {}", run.both());
    }
}
