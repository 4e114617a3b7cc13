//! Hostile input (issue 10), one table per class: `when` conditions that would be make code,
//! includes that would read or print files outside the policy's directory, a `diff --base`
//! revision that would be a git option, and commits that would hide a change from the
//! pre-commit hook. Each row: exit 2 (the hook: its verdict), the expected code at the expected
//! `file:line:col`, text the output must (not) hold, and no byte, mode or directory of the
//! tree or beside it changed (fingerprints before and after).

mod fixture_tree;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fixture_tree::{errors, Fingerprint, Run, Tree, V6_12};

const POLICY: &str = "sanitizer-policy.toml";
/// A unit the `mechanisms` fixture builds: a run that did not stop would write its line.
const HEALTHY: &str =
    "[[unit]]\npath = \"lib/skipall.o\"\nskip = [\"kasan\"]\nwhy = \"Healthy: would be written.\"\n\n";
/// Set in every run: an include that printed the environment would show it.
const SECRET: &str = "hunter2-sanpolicy-secret";

const ALL: &[&[&str]] = &[&["gen-makefiles"], &["gen-makefiles", "--force"], &["gen-makefiles", "--check"], &["check"]];

thread_local! {
    /// A directory put first on PATH for every git and sanpolicy this thread runs: where a test
    /// picks which git the hook (and its setup) uses.
    static GIT_DIR: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// PATH with the thread's chosen git first.
fn path_env() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    match GIT_DIR.with(|g| g.borrow().clone()) {
        Some(dir) => std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(&path))).unwrap(),
        None => path,
    }
}

/// Run `sanpolicy ARGS` in `cwd`, killed (and reported as a hang) after a minute.
fn run(cwd: &Path, args: &[&str]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .args(args)
        .env("PATH", path_env())
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("SANPOLICY_TEST_SECRET", SECRET)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            let _ = child.wait();
            return Run { code: -1, stdout: String::new(), stderr: format!("hung: {args:?} ran over a minute") };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// One hostile input.
struct Case {
    name: &'static str,
    setup: Box<dyn Fn(&Tree)>,
    commands: Vec<Vec<String>>,
    /// The first command's errors: code and location.
    errors: Vec<(&'static str, String)>,
    /// Text the output must not hold (a secret, a file's contents).
    never: Vec<String>,
    /// Text the first command's output must hold.
    says: Vec<String>,
    exit: i32,
}

impl Case {
    fn new(name: &'static str, setup: impl Fn(&Tree) + 'static, errors: Vec<(&'static str, String)>) -> Case {
        let commands = ALL.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect();
        Case {
            name,
            setup: Box::new(setup),
            commands,
            errors,
            never: vec![SECRET.to_string()],
            says: Vec::new(),
            exit: 2,
        }
    }

    fn says(mut self, text: &str) -> Case {
        self.says.push(text.to_string());
        self
    }

    fn exit(mut self, code: i32) -> Case {
        self.exit = code;
        self
    }

    fn never(mut self, text: &str) -> Case {
        self.never.push(text.to_string());
        self
    }

    fn commands(mut self, commands: &[&[&str]]) -> Case {
        self.commands = commands.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect();
        self
    }
}

/// Beside the tree: what a link or `..` out of it would reach.
fn outside(tree: &Tree) -> PathBuf {
    tree.path().with_extension("outside")
}

fn run_cases(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for case in cases {
        let tree = Tree::new("mechanisms", V6_12);
        fs::create_dir_all(outside(&tree)).unwrap();
        fs::write(outside(&tree).join("secret.toml"), format!("# {SECRET}\n[[unit]]\n")).unwrap();
        (case.setup)(&tree);
        let before = (tree.fingerprint(), Fingerprint::of(&outside(&tree)));
        for (i, command) in case.commands.iter().enumerate() {
            let args: Vec<&str> = command.iter().map(String::as_str).collect();
            let out = run(tree.path(), &args);
            let mut problems = Vec::new();
            let after = (tree.fingerprint(), Fingerprint::of(&outside(&tree)));
            for (b, a, what) in [(&before.0, &after.0, "tree"), (&before.1, &after.1, "outside")] {
                let diff = b.differences(a);
                if !diff.is_empty() {
                    problems.push(format!("the {what} changed: {diff:?}"));
                }
            }
            if out.code != case.exit {
                problems.push(format!("exit {} instead of {}", out.code, case.exit));
            }
            let found = errors(&out.stderr);
            let expected: Vec<(String, String)> = case.errors.iter().map(|(c, a)| (c.to_string(), a.clone())).collect();
            // Locations match by their end: the hook names files by absolute path.
            let matches = found.len() == expected.len()
                && found
                    .iter()
                    .zip(&expected)
                    .all(|(f, e)| f.0 == e.0 && f.1.ends_with(&e.1) && (e.1.is_empty() == f.1.is_empty()));
            if i == 0 && !matches {
                problems.push(format!("errors {found:?}, expected {expected:?}"));
            }
            for says in case.says.iter().filter(|_| i == 0) {
                if !out.stderr.contains(says.as_str()) && !out.stdout.contains(says.as_str()) {
                    problems.push(format!("does not say {says:?}"));
                }
            }
            for never in &case.never {
                if out.stdout.contains(never.as_str()) || out.stderr.contains(never.as_str()) {
                    problems.push(format!("the output holds {:?}", never.chars().take(40).collect::<String>()));
                }
            }
            if !problems.is_empty() {
                let both: String = out.both().chars().take(3000).collect();
                failures.push(format!("{} {args:?}: {}\n{both}", case.name, problems.join("; ")));
            }
        }
        let _ = fs::remove_dir_all(outside(&tree));
    }
    assert!(failures.is_empty(), "{} failing case(s):\n\n{}", failures.len(), failures.join("\n\n"));
}

// ---------------------------------------------------------------------------------------------
// `when`: policy text that make would run.

/// A policy whose second unit has `when = "<condition>"` (line 9, the string at column 9); the
/// error is expected at `needle` inside the condition, or at the whole string (column 8) when
/// the TOML string holds an escape.
fn when_case(name: &'static str, condition: &'static str, needle: Option<&str>) -> Case {
    let text =
        format!("{HEALTHY}[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhen = \"{condition}\"\nwhy = \"x\"\n");
    let col = needle.map_or(8, |n| 9 + condition.find(n).unwrap_or_else(|| panic!("{n} not in {condition}")));
    Case::new(name, move |t| t.write(POLICY, text.as_bytes()), vec![("bad-condition", format!("./{POLICY}:9:{col}"))])
        .commands(&[&["gen-makefiles"], &["gen-makefiles", "--check"], &["check"], &["explain", "lib/plain.o"]])
}

#[test]
fn when_conditions_that_are_make_code_are_refused() {
    run_cases(vec![
        when_case(
            "the issue's eval and shell",
            "ifeq ($(eval KASAN_SANITIZE_plain.o := y)$(shell touch ../marker),)",
            Some("$(eval"),
        ),
        when_case("shell", "ifeq ($(shell touch ../marker),)", Some("$(shell")),
        when_case("call shell", "ifeq ($(call shell,touch ../marker),)", Some("shell,")),
        when_case("value", "ifneq ($(value CONFIG_X),)", Some("$(value")),
        when_case("file", "ifeq ($(file >../marker,x),)", Some("$(file")),
        when_case("origin", "ifeq ($(origin CONFIG_X),file)", Some("$(origin")),
        when_case(
            "helper with a computed argument",
            "ifeq ($(call clang-min-version,$(shell id)),y)",
            Some("$(shell id)"),
        ),
        when_case("nested call of an unknown helper", "ifeq ($(call cc-option,-x),y)", Some("cc-option")),
        when_case("ifdef of a computed name", "ifdef $(shell id)", Some("$(shell id)")),
        when_case("a non-Kconfig variable", "ifeq ($(KBUILD_EXTMOD),)", Some("KBUILD_EXTMOD")),
        when_case("dollar-dollar", "ifeq ($(CONFIG_X),$$(shell id))", Some("$$")),
        when_case("brace reference", "ifeq (${shell id},)", Some("${")),
        when_case("comment", "ifdef CONFIG_X # KASAN_SANITIZE := y", Some("#")),
        when_case("backslash", "ifdef CONFIG_X\\\\", None),
        when_case("newline", "ifdef CONFIG_X\\nKASAN_SANITIZE := y", None),
        when_case("unbalanced parentheses", "ifeq (($(CONFIG_X),y)", Some("($(")),
        when_case("no blank after the keyword", "ifeq($(CONFIG_X),y)", Some("(")),
        when_case("text after the operands", "ifeq ($(CONFIG_X),y) $(shell id)", Some(" $(shell")),
    ]);
}

// ---------------------------------------------------------------------------------------------
// Includes.

/// A policy that includes `includes` (line 1; the first entry's string at column 12).
fn include_case(
    name: &'static str,
    includes: &'static str,
    setup: impl Fn(&Tree) + 'static,
    errors: Vec<(&'static str, String)>,
) -> Case {
    let text = format!("include = [{includes}]\n{HEALTHY}");
    Case::new(
        name,
        move |t| {
            setup(t);
            t.write(POLICY, text.as_bytes());
        },
        errors,
    )
}

fn at(line: usize, col: usize) -> String {
    format!("./{POLICY}:{line}:{col}")
}

#[test]
fn includes_stay_inside_the_policy_directory() {
    run_cases(vec![
        include_case("the environment", "\"/proc/self/environ\"", |_| {}, vec![("bad-include", at(1, 12))]),
        include_case("absolute path", "\"/etc/passwd\"", |_| {}, vec![("bad-include", at(1, 12))]).never("root:x:0"),
        include_case("out with `..`", "\"../../../../../../etc/passwd\"", |_| {}, vec![("bad-include", at(1, 12))])
            .never("root:x:0"),
        include_case(
            "`..` to a file beside the tree",
            "\"lib/../../secret.toml\"",
            |_| {},
            vec![("bad-include", at(1, 12))],
        ),
        include_case(
            "symlink out of the directory",
            "\"inc.toml\"",
            |t| std::os::unix::fs::symlink(outside(t).join("secret.toml"), t.join("inc.toml")).unwrap(),
            vec![("bad-include", at(1, 12))],
        ),
        include_case(
            "symlinked directory out of the directory",
            "\"out/secret.toml\"",
            |t| std::os::unix::fs::symlink(outside(t), t.join("out")).unwrap(),
            vec![("bad-include", at(1, 12))],
        ),
        include_case(
            "FIFO",
            "\"fifo.toml\"",
            |t| {
                let status = Command::new("mkfifo").arg(t.join("fifo.toml")).status().unwrap();
                assert!(status.success());
            },
            vec![("bad-include", at(1, 12))],
        ),
        include_case(
            "directory",
            "\"lib\"",
            |_| {},
            vec![("bad-include", at(1, 12))],
        ),
        include_case("missing file", "\"nosuch.toml\"", |_| {}, vec![("bad-include", at(1, 12))]),
        include_case(
            "cycle through a symlinked directory",
            "\"l/b.toml\", \"l/l/b.toml\", \"l/l/l/b.toml\", \"l/l/l/l/b.toml\", \"l/l/l/l/l/b.toml\"",
            |t| {
                std::os::unix::fs::symlink(".", t.join("l")).unwrap();
                let b = format!("include = [\"l/{POLICY}\", \"l/l/{POLICY}\", \"l/b.toml\"]\n");
                t.write("b.toml", b.as_bytes());
            },
            // b.toml includes the policy (twice, by two names) and itself: three cycles, each
            // reported once, as b.toml is parsed once.
            {
                let b = format!("include = [\"l/{POLICY}\", \"l/l/{POLICY}\", \"l/b.toml\"]\n");
                let col = |n: &str| b.find(&format!("\"{n}\"")).unwrap() + 1;
                vec![
                    ("include-cycle", format!("./l/b.toml:1:{}", col(&format!("l/{POLICY}")))),
                    ("include-cycle", format!("./l/b.toml:1:{}", col(&format!("l/l/{POLICY}")))),
                    ("include-cycle", format!("./l/b.toml:1:{}", col("l/b.toml"))),
                ]
            },
        ),
        include_case(
            "a very long line of an included file is clipped",
            "\"long.toml\"",
            |t| {
                let line = format!("x = 1 {}{SECRET}{}\n", "A".repeat(4000), "B".repeat(4000));
                t.write("long.toml", line.as_bytes());
            },
            vec![("toml-syntax", "./long.toml:1:5".into())],
        )
        .never("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    ]);
}

/// Includes that are fine: a diamond (two files include a third) parses the third once.
#[test]
fn a_diamond_of_includes_is_parsed_once() {
    let dir = tempfile::tempdir().unwrap();
    let unit = |o: &str| format!("[[unit]]\npath = \"lib/{o}.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n");
    fs::write(dir.path().join("p.toml"), "include = [\"a.toml\", \"sub/../b.toml\"]\n").unwrap();
    fs::write(dir.path().join("a.toml"), "include = [\"d.toml\"]\n").unwrap();
    fs::write(dir.path().join("b.toml"), "include = [\"./d.toml\"]\n").unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    fs::write(dir.path().join("d.toml"), unit("d")).unwrap();
    let (policy, diags) = sanpolicy::policy::load(&dir.path().join("p.toml"));
    assert!(diags.is_empty(), "{diags:?}");
    assert_eq!(policy.files.len(), 4, "{:?}", policy.files.iter().map(|f| &f.0).collect::<Vec<_>>());
    assert_eq!(policy.units.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// git: `diff --base`.

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .env("PATH", path_env())
        .args(["-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The tree as a git repository with everything committed.
/// The fixture generated and committed: the hook judges the whole commit, so its starting point
/// is a tree in sync with its policy.
fn committed(t: &Tree) {
    if t.join(POLICY).exists() {
        let out = run(t.path(), &["gen-makefiles"]);
        assert_eq!(out.code, 0, "gen-makefiles of the fixture: {}", out.both());
    }
    git(t.path(), &["init", "-q"]);
    git(t.path(), &["add", "-A"]);
    git(t.path(), &["commit", "-qm", "fixture"]);
}

fn base_case(name: &'static str, base: &'static str) -> Case {
    let arg: &'static str = Box::leak(format!("--base={base}").into_boxed_str());
    Case::new(name, committed, vec![("bad-revision", String::new())])
        .commands(&[&["diff", arg], &["diff", arg, "--format", "json"]])
}

#[test]
fn diff_base_is_a_revision_never_an_option() {
    run_cases(vec![
        base_case("the issue's --output", "--output=written-by-git"),
        base_case("short option", "-owritten-by-git"),
        base_case("upload-pack", "--upload-pack=touch written-by-git"),
        base_case("a path spelled as a revision", "HEAD:--output=written-by-git"),
        base_case("no such revision", "no-such-branch"),
        base_case("a blob, not a commit", "HEAD:sanitizer-policy.toml"),
    ]);
}

/// A policy added after the base revision is compared with an empty policy (issue 9 point 8).
#[test]
fn diff_base_without_the_policy_compares_with_nothing() {
    let tree = Tree::new("mechanisms", V6_12);
    let policy = fs::read(tree.join(POLICY)).unwrap();
    fs::remove_file(tree.join(POLICY)).unwrap();
    committed(&tree);
    fs::write(tree.join(POLICY), policy).unwrap();
    let out = run(tree.path(), &["diff", "--base", "HEAD", "--format", "text"]);
    assert_eq!(out.code, 0, "{}", out.both());
    assert!(out.stdout.contains("lib/skipall.o: KASAN on → off"), "{}", out.both());
}

// ---------------------------------------------------------------------------------------------
// git: the pre-commit hook reads the index exactly.

const HAND: &str = "KASAN_SANITIZE_plain.o := n\n";

/// The hook's cases, run with whichever git is first on PATH.
fn pre_commit_cases() {
    let hook: &[&[&str]] = &[&["pre-commit"]];
    run_cases(vec![
        // No policy path can name the directory: its line is outside the policy, as import
        // leaves it. The hook and `--check` pass it (it is no drift); `check` reports it
        // (`unrepresentable`, tests/verdict.rs `directives_in_directories_no_policy_can_name…`).
        Case::new(
            "a directory name holding a newline",
            |t| {
                committed(t);
                let dir = t.join("lib/evil\ndir");
                fs::create_dir(&dir).unwrap();
                fs::write(dir.join("Makefile"), format!("obj-y += plain.o\n{HAND}")).unwrap();
                git(t.path(), &["add", "-A"]);
            },
            vec![],
        )
        .commands(hook)
        .exit(0),
        Case::new(
            "a kbuild file holding the policy's lines deleted",
            |t| {
                committed(t);
                git(t.path(), &["rm", "-q", "lib/Makefile"]);
            },
            vec![("deleted-kbuild-file", "lib/Makefile".into())],
        )
        .commands(hook)
        .exit(1),
        Case::new(
            "two staged kbuild files whose paths read the same once made UTF-8",
            |t| {
                use std::os::unix::ffi::OsStrExt;
                committed(t);
                for (byte, text) in
                    [(0xfe, "obj-y += plain.o\n".to_string()), (0xff, format!("obj-y += plain.o\n{HAND}"))]
                {
                    let dir = t.join("lib").join(std::ffi::OsStr::from_bytes(&[byte]));
                    fs::create_dir(&dir).unwrap();
                    fs::write(dir.join("Makefile"), text).unwrap();
                }
                git(t.path(), &["add", "-A"]);
            },
            // One finding: both read the same.
            vec![("bad-path", "lib/\u{fffd}/Makefile".into())],
        )
        .says("has a path that is not UTF-8")
        .commands(hook)
        .exit(2),
        Case::new(
            "a kbuild file holding the policy's lines replaced by a submodule",
            |t| {
                committed(t);
                git(t.path(), &["rm", "-q", "--cached", "lib/Makefile"]);
                let gitlink = format!("160000,{},lib/Makefile", "1234567890".repeat(4));
                git(t.path(), &["update-index", "--add", "--cacheinfo", &gitlink]);
            },
            vec![("io", "lib/Makefile".into())],
        )
        .says("is a submodule in the index, not a regular file")
        .commands(hook)
        .exit(2),
        Case::new(
            "the policy removed from the index",
            |t| {
                committed(t);
                git(t.path(), &["rm", "-q", "--cached", POLICY]);
            },
            vec![("policy-removed", POLICY.into())],
        )
        .commands(hook)
        .exit(1),
        Case::new(
            "the staged policy, not the working tree's",
            |t| {
                committed(t);
                let committed_policy = t.read(POLICY);
                let edited = format!("{committed_policy}\n{}", HEALTHY.replace("lib/skipall.o", "lib/plain.o"));
                t.write(POLICY, edited.as_bytes());
                git(t.path(), &["add", POLICY]);
                // The working tree goes back: read from disk, the policy is unchanged.
                t.write(POLICY, committed_policy.as_bytes());
            },
            // The fix (`gen-makefiles --stage`) would read the working tree's policy, not the
            // staged one: the hook says so instead of printing a fix that stages the wrong text.
            // The note that no fix can be run comes first: it is why none is printed.
            vec![
                ("unstaged-changes", String::new()),
                ("stale-file", "lib/Makefile".into()),
                ("stale-file", "sanitizer-policy.effective.txt".into()),
            ],
        )
        .says("differs from what is staged in `sanitizer-policy.toml`")
        .commands(hook)
        .exit(1),
        Case::new(
            "positions and text come from the staged file",
            |t| {
                committed(t);
                let staged = format!("{}{HAND}", t.read("lib/Makefile"));
                t.write("lib/Makefile", staged.as_bytes());
                git(t.path(), &["add", "lib/Makefile"]);
                // The working tree moves on: five more lines above, the directive gone.
                let worktree = format!("#\n#\n#\n#\n#\n{}", staged.replace(HAND, ""));
                t.write("lib/Makefile", worktree.as_bytes());
            },
            // The hand line (after the committed file's 35 lines: the fixture's and its
            // generated block) is not the policy's. The working tree's copy differs, so the
            // fixes are withheld until it is staged or set aside.
            vec![("unmanaged-directive", "lib/Makefile:36:1".into()), ("unstaged-changes", String::new())],
        )
        .says("36 │ KASAN_SANITIZE_plain.o := n")
        .says("1 finding(s) need a person to decide")
        .commands(hook)
        .exit(1),
    ]);
}

#[test]
fn pre_commit_sees_what_is_staged() {
    pre_commit_cases();
}

/// The same verdicts with Debian bookworm's git 2.39, older than `cat-file -Z` (2.43): the hook
/// must not depend on it, and a path holding a newline must still be one request.
#[test]
fn pre_commit_sees_what_is_staged_with_git_2_39() {
    let old = Path::new("/usr/bin/git");
    let version = Command::new(old).arg("--version").output().unwrap_or_else(|e| {
        panic!("this test runs the hook with an old git at {}: {e} (apt-get install git)", old.display())
    });
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let minor = version.trim().strip_prefix("git version 2.").and_then(|v| v.split('.').next()?.parse::<u32>().ok());
    assert!(
        minor.is_some_and(|m| m < 43),
        "this test needs a git older than 2.43 (no `cat-file -Z`) at {}; it is `{}`",
        old.display(),
        version.trim()
    );
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(old, dir.path().join("git")).unwrap();
    GIT_DIR.with(|g| *g.borrow_mut() = Some(dir.path().to_path_buf()));
    let which = Command::new("sh").args(["-c", "git --version"]).env("PATH", path_env()).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&which.stdout), version, "the old git is not first on PATH");
    pre_commit_cases();
}

// ---------------------------------------------------------------------------------------------
// Diagnostics and import: control characters from the tree.

/// A Makefile comment holding an ESC, a NUL or a marker-like line is imported as a reason the
/// policy parser accepts, shown visibly; import never blames a policy it wrote.
#[test]
fn import_writes_reasons_from_hostile_comments_that_parse() {
    let mut failures = Vec::new();
    for (name, comment, shown) in [
        ("escape", "# colour \x1b[2J here\n", "colour \u{241b}[2J here"),
        ("nul", "# nul \0 here\n", "nul \u{2400} here"),
        ("marker-like line", "# ok\n#END sanpolicy generated block (checksum 0)\n", "> END sanpolicy generated block"),
    ] {
        let tree = Tree::new("mechanisms", V6_12);
        fs::remove_file(tree.join(POLICY)).unwrap();
        let makefile = format!("{}\n{comment}KASAN_SANITIZE_plain.o := n\n", tree.read("lib/Makefile"));
        tree.write("lib/Makefile", makefile.as_bytes());
        let out = run(tree.path(), &["import", "--tree", "."]);
        let written = fs::read_to_string(tree.join(POLICY)).unwrap_or_default();
        let (policy, diags) = sanpolicy::policy::parse_str(Path::new("p.toml"), &written);
        let why = policy.units.iter().find(|u| u.path.text == "lib/plain.o").map(|u| u.why.clone());
        if out.code != 0 || diags.has_errors() || !why.as_deref().is_some_and(|w| w.contains(shown)) {
            failures.push(format!("{name}: exit {}, reason {why:?}, {diags:?}\n{}", out.code, out.both()));
        }
        if out.stderr.contains("sanpolicy bug") || out.stderr.chars().any(|c| c.is_control() && c != '\n') {
            failures.push(format!("{name}: {:?}", out.stderr));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `import --adopt --layout block` of a Makefile whose comment holds a control character names
/// the Makefile's line and column and the character, as other bad bytes are named; it never
/// blames sanpolicy or the policy it writes, and prints no raw control character.
#[test]
fn import_adopt_names_the_makefile_line_and_the_control_character() {
    let mut failures = Vec::new();
    for (comment, col, named) in [("# colour \x1b[31m red\n", 10, "U+001B ESC"), ("# nul \0 here\n", 7, "U+0000 NUL")] {
        let tree = Tree::new("mechanisms", V6_12);
        fs::remove_file(tree.join(POLICY)).unwrap();
        let old = tree.read("lib/Makefile");
        let line = old.lines().count() + 1;
        tree.write("lib/Makefile", format!("{old}{comment}KASAN_SANITIZE_plain.o := n\n").as_bytes());
        let out = run(tree.path(), &["import", "--adopt", "--layout", "block"]);
        let at = format!("./lib/Makefile:{line}:{col}");
        let warned = out.stderr.lines().any(|l| l.starts_with("warning[bad-reason]") && l.contains(named));
        if out.code != 0 || !warned || !out.stderr.contains(&at) {
            failures.push(format!(
                "{named}: exit {}, want a warning naming {named} at {at}:\n{}",
                out.code,
                out.both()
            ));
        }
        if out.stderr.contains("sanpolicy bug") || out.stderr.chars().any(|c| c.is_control() && c != '\n') {
            failures.push(format!("{named}: {:?}", out.stderr));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// What import still cannot write into a policy is located in the tree (the Makefile line),
/// not in the policy it did not write; nothing is written.
#[test]
fn import_locates_what_it_cannot_write_in_the_tree() {
    let tree = Tree::new("mechanisms", V6_12);
    fs::remove_file(tree.join(POLICY)).unwrap();
    let makefile = format!("{}BITS := 3 2\nKASAN_SANITIZE_plain$(BITS).o := n\n", tree.read("lib/Makefile"));
    tree.write("lib/Makefile", makefile.as_bytes());
    let before = tree.fingerprint();
    let out = run(tree.path(), &["import", "--tree", "."]);
    fixture_tree::assert_unchanged(&before, &tree.fingerprint(), "import");
    assert_eq!(out.code, 2, "{}", out.both());
    let found = errors(&out.stderr);
    assert!(!found.is_empty() && found.iter().all(|(_, at)| at == "./lib/Makefile:8:1"), "{found:?}\n{}", out.both());
    assert!(!out.stderr.contains("sanitizer-policy.toml") && !out.stderr.contains("sanpolicy bug"), "{}", out.stderr);
}

/// A newline in a path cannot forge a diagnostic line: it is shown as `␊`, in messages and in
/// the location header alike.
#[test]
fn a_newline_in_a_path_is_shown_visibly() {
    let tree = Tree::new("mechanisms", V6_12);
    let evil = "evil\nerror[forged]: x.toml";
    let text = format!("{HEALTHY}[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasn\"]\nwhy = \"x\"\n");
    tree.write(evil, text.as_bytes());
    for args in [vec!["check", "--policy", evil], vec!["check", "--policy", "missing\nerror[forged]: y.toml"]] {
        let out = run(tree.path(), &args);
        assert_eq!(out.code, 2, "{}", out.both());
        let forged: Vec<&str> =
            out.stderr.lines().filter(|l| l.contains("error[forged]") && l.starts_with("error[forged]")).collect();
        assert!(forged.is_empty(), "{}", out.stderr);
        assert!(out.stderr.contains("\u{240a}error[forged]"), "{}", out.stderr);
    }
}
