//! Every kind of bad input, one row each: the command exits 2, the error has the expected code
//! and points at the expected `file:line:col` (or file, where no line applies), and no byte,
//! mode or directory of the tree changed (fingerprint before and after). A few inputs that
//! look bad but are handled losslessly are pinned down at the end.

mod fixture_tree;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fixture_tree::{assert_unchanged, errors, Fingerprint, Run, Tree, V6_1, V6_12};

/// A unit the `mechanisms` fixture can build: with it a run that did not stop would write.
const HEALTHY: &str =
    "[[unit]]\npath = \"lib/skipall.o\"\nskip = [\"kasan\"]\nwhy = \"Healthy: would be written.\"\n\n";

const POLICY: &str = "sanitizer-policy.toml";
const RUNTIME: &str = "mm/runtime/Makefile";
const BEGIN: &str = "# BEGIN sanpolicy generated block: do not edit by hand\n";
const END: &str = "# END sanpolicy generated block (checksum 0000000000000000)\n";

const GEN: &[&str] = &["gen-makefiles"];
const FORCE: &[&str] = &["gen-makefiles", "--force"];
const GEN_CHECK: &[&str] = &["gen-makefiles", "--check"];
const CHECK: &[&str] = &["check"];
/// Every command reading the policy and the tree; each must refuse bad input with exit 2.
const ALL: &[&[&str]] = &[GEN, FORCE, GEN_CHECK, CHECK];

/// One bad input.
struct Case {
    name: &'static str,
    /// Kernel rules of the `mechanisms` fixture tree the case starts from.
    version: &'static str,
    /// Breaks the tree.
    setup: Box<dyn Fn(&Tree)>,
    /// Extra arguments after the command (e.g. `--strict`).
    args: &'static [&'static str],
    /// The commands run, each of which must exit 2.
    commands: &'static [&'static [&'static str]],
    /// The errors of the first command, in order: code and location as rendered (`file:line:col`,
    /// a file alone, or empty where no file applies).
    errors: &'static [(&'static str, &'static str)],
    /// Text the diagnostics must hold (the "did you mean", the reason).
    says: &'static str,
}

fn policy_case(name: &'static str, unit: &'static str, errors: &'static [(&'static str, &'static str)]) -> Case {
    let text = format!("{HEALTHY}{unit}");
    Case {
        name,
        version: V6_12,
        setup: Box::new(move |t: &Tree| t.write(POLICY, text.as_bytes())),
        args: &[],
        commands: ALL,
        errors,
        says: "",
    }
}

fn tree_case(
    name: &'static str,
    setup: impl Fn(&Tree) + 'static,
    errors: &'static [(&'static str, &'static str)],
) -> Case {
    Case { name, version: V6_12, setup: Box::new(setup), args: &[], commands: ALL, errors, says: "" }
}

impl Case {
    fn says(mut self, text: &'static str) -> Case {
        self.says = text;
        self
    }

    fn commands(mut self, commands: &'static [&'static [&'static str]]) -> Case {
        self.commands = commands;
        self
    }

    fn args(mut self, args: &'static [&'static str]) -> Case {
        self.args = args;
        self
    }

    fn version(mut self, version: &'static str) -> Case {
        self.version = version;
        self
    }
}

/// Run `sanpolicy ARGS` in `cwd`; as another user when `uid` is given (root ignores
/// permission bits, so unreadable files are tried as `nobody`).
fn run_as(cwd: &Path, args: &[&str], user: Option<&Nobody>) -> Run {
    let mut command = Command::new(user.map_or(Path::new(env!("CARGO_BIN_EXE_sanpolicy")), |n| n.binary.as_path()));
    command.args(args).current_dir(cwd).env("NO_COLOR", "1");
    if user.is_some() {
        use std::os::unix::process::CommandExt;
        command.uid(NOBODY).gid(NOBODY);
    }
    let out = command.output().unwrap();
    Run {
        code: out.status.code().expect("sanpolicy was killed by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const NOBODY: u32 = 65534;

/// Runs as `nobody`: a copy of the binary `nobody` can execute wherever the build lives.
struct Nobody {
    dir: tempfile::TempDir,
    binary: std::path::PathBuf,
}

impl Nobody {
    fn new() -> Nobody {
        let dir = tempfile::Builder::new().prefix("sanpolicy-bin-").tempdir().unwrap();
        chmod(dir.path(), 0o755);
        let binary = dir.path().join("sanpolicy");
        fs::copy(env!("CARGO_BIN_EXE_sanpolicy"), &binary).unwrap();
        chmod(&binary, 0o755);
        let nobody = Nobody { dir, binary };
        let probe = run_as(nobody.dir.path(), &["--version"], Some(&nobody));
        assert_eq!(
            probe.code,
            0,
            "cannot run sanpolicy as nobody from {}: {}",
            nobody.dir.path().display(),
            probe.both()
        );
        nobody
    }
}

fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Make the tree `nobody`'s, for runs as `nobody`.
fn give_to_nobody(root: &Path) {
    std::os::unix::fs::lchown(root, Some(NOBODY), Some(NOBODY)).unwrap();
    for entry in fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if fs::symlink_metadata(&path).unwrap().is_dir() {
            give_to_nobody(&path);
        } else {
            std::os::unix::fs::lchown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        }
    }
}

/// A directory beside the tree, for symlinks that lead out of it.
fn outside(tree: &Tree) -> std::path::PathBuf {
    tree.path().with_extension("outside")
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A policy of `units` units spread over the directories of the `mechanisms` tree.
fn huge_policy(units: usize) -> String {
    let mechanisms = ["kasan", "kcsan", "kcov", "ubsan", "kmsan", "gcov", "objtool", "ftrace"];
    let dirs = ["lib", "mm/runtime", "drivers/selftest"];
    let mut text = String::with_capacity(units * 90);
    for i in 0..units {
        text.push_str(&format!(
            "[[unit]]\npath = \"{}/o{i}.o\"\nskip = [\"{}\", \"{}\"]\nwhy = \"Reason {}.\"\n\n",
            dirs[i % dirs.len()],
            mechanisms[i % 8],
            mechanisms[(i + 3) % 8],
            i % 97
        ));
    }
    text
}

/// A kbuild file of exactly `lines` lines in the shapes kernel Makefiles have: objects,
/// conditionals, comment paragraphs, continuation lines, directives.
fn huge_makefile(lines: usize) -> String {
    let mut text = String::from("# SPDX-License-Identifier: GPL-2.0\nobj-y := core.o report.o\n");
    // Ten lines a round, then padding.
    for i in 0..lines.saturating_sub(2) / 10 {
        text.push_str(&format!(
            "\n# Paragraph {i} explains\n# the lines below.\nifdef CONFIG_X{i}\nobj-$(CONFIG_Y{i}) += a{i}.o \\\n\tb{i}.o \\\n\tc{i}.o\nendif\nccflags-y += -DX{i}\nKASAN_SANITIZE_a{i}.o := n\n"
        ));
    }
    for _ in 0..lines.saturating_sub(2) % 10 {
        text.push_str("# padding\n");
    }
    assert_eq!(text.lines().count(), lines.max(2));
    text
}

fn cases() -> Vec<Case> {
    vec![
        // The policy file: syntax, types, keys, mechanisms.
        policy_case(
            "malformed TOML",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"\nwhy = \"Unclosed array.\"\n",
            &[("toml-syntax", "./sanitizer-policy.toml:9:1")],
        ),
        policy_case(
            "wrong type: a string where a list belongs",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = \"kasan\"\nwhy = \"A string, not a list.\"\n",
            &[("wrong-type", "./sanitizer-policy.toml:8:8")],
        ),
        policy_case(
            "wrong type: a number as reason",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhy = 42\n",
            &[("wrong-type", "./sanitizer-policy.toml:9:7")],
        ),
        tree_case(
            "wrong type: a number as requirement list",
            |t| t.write(POLICY, format!("require = 3\n{HEALTHY}").as_bytes()),
            &[("wrong-type", "./sanitizer-policy.toml:1:11")],
        ),
        policy_case(
            "unknown key",
            "[[unit]]\npath = \"lib/plain.o\"\nskp = [\"kasan\"]\nforce = [\"kcov\"]\nwhy = \"Typo.\"\n",
            &[("unknown-key", "./sanitizer-policy.toml:8:1")],
        )
        .says("did you mean `skip`?"),
        policy_case(
            "unknown mechanism",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasn\"]\nwhy = \"Typo.\"\n",
            &[("unknown-mechanism", "./sanitizer-policy.toml:8:9")],
        )
        .says("did you mean `kasan`?"),
        policy_case(
            "unknown code in an acknowledgement",
            "[[acknowledge]]\ncode = \"missing-sorce\"\npath = \"lib/plain.o\"\nwhy = \"Typo.\"\n",
            &[("unknown-key", "./sanitizer-policy.toml:7:8")],
        )
        .says("unknown code `missing-sorce`"),
        policy_case(
            "misspelt code in an acknowledgement",
            "[[acknowledge]]\ncode = \"recursion-prone \"\npath = \"lib/plain.o\"\nwhy = \"Typo.\"\n",
            &[("unknown-key", "./sanitizer-policy.toml:7:8")],
        )
        .says("did you mean `recursion-prone`?"),
        policy_case(
            "drift acknowledged",
            "[[acknowledge]]\ncode = \"drift\"\npath = \"lib/plain.o\"\nwhy = \"Drift is fixed, not kept.\"\n",
            &[("unknown-key", "./sanitizer-policy.toml:7:8")],
        )
        .says("`drift` findings cannot be acknowledged"),
        policy_case(
            "one condition spelled two ways",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhen = \"ifeq ($(CONFIG_FOO),y)\"\nwhy = \"One.\"\n\n\
             [[unit]]\npath = \"lib/plain.o\"\nforce = [\"kasan\"]\nwhen = \"ifeq '$(CONFIG_FOO)' 'y'\"\nwhy = \"Two.\"\n",
            &[("duplicate-unit", "./sanitizer-policy.toml:13:8")],
        ),
        policy_case(
            "ifdef and ifneq of one symbol",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhen = \"ifdef CONFIG_FOO\"\nwhy = \"One.\"\n\n\
             [[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhen = \"ifneq ($(CONFIG_FOO), )\"\nwhy = \"Two.\"\n",
            &[("duplicate-unit", "./sanitizer-policy.toml:13:8")],
        ),
        policy_case(
            "empty reason",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhy = \"  \"\n",
            &[("empty-reason", "./sanitizer-policy.toml:9:7")],
        ),
        policy_case(
            "missing reason",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\n",
            &[("missing-key", "./sanitizer-policy.toml:6:1")],
        ),
        policy_case(
            "placeholder reason where real ones are required",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhy = \"TODO(sanpolicy import): the tree gives no reason\"\n",
            &[("placeholder-reason", "./sanitizer-policy.toml:9:7")],
        )
        .args(&["--strict"])
        .commands(&[GEN, CHECK]),
        policy_case(
            "duplicate unit",
            "[[unit]]\npath = \"lib/skipall.o\"\nskip = [\"kcov\", \"kasan\"]\nwhy = \"Listed twice.\"\n",
            &[("duplicate-unit", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "skip and force of one mechanism",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nforce = [\"kasan\"]\nwhy = \"Both.\"\n",
            &[("skip-and-force", "./sanitizer-policy.toml:9:10")],
        ),
        policy_case(
            "conflicting units: one Kbuild variable set both ways",
            "[[unit]]\npath = \"lib/sub/skipall.o\"\nkbuild-dir = \"lib/\"\nforce = [\"kasan\"]\nwhy = \"6.1 names it KASAN_SANITIZE_skipall.o too.\"\n",
            &[("conflicting-units", "./sanitizer-policy.toml:9:10")],
        )
        .version(V6_1)
        .says("both are `KASAN_SANITIZE_skipall.o` in this tree's Kbuild"),
        // Paths that would escape the tree or inject into a make line.
        policy_case(
            "absolute path",
            "[[unit]]\npath = \"/lib/plain.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "`..` in a path",
            "[[unit]]\npath = \"lib/../mm/plain.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "space in a path",
            "[[unit]]\npath = \"lib/pl ain.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "`$` in a path",
            "[[unit]]\npath = \"lib/$plain.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "`$(shell …)` in a path",
            "[[unit]]\npath = \"lib/$(shell rm -rf ~).o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "`#` in a path",
            "[[unit]]\npath = \"lib/pl#ain.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "`:` in a path",
            "[[unit]]\npath = \"lib/plain.o:\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "`;` in a path",
            "[[unit]]\npath = \"lib/a;plain.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "newline in a path",
            "[[unit]]\npath = \"lib/x.o\\nKASAN_SANITIZE := y\\n#.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:7:8")],
        ),
        policy_case(
            "metacharacter in `kbuild-dir`",
            "[[unit]]\npath = \"lib/sub/plain.o\"\nkbuild-dir = \"lib;\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            // At `kbuild-dir`, the value at fault, not at `path`.
            &[("bad-path", "./sanitizer-policy.toml:8:14")],
        ),
        policy_case(
            "`kbuild-dir` on a directory unit",
            "[[unit]]\npath = \"lib/\"\nkbuild-dir = \"lib/\"\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            &[("bad-path", "./sanitizer-policy.toml:8:14")],
        ),
        policy_case(
            "make code as a `vars` value",
            "[[unit]]\npath = \"lib/plain$(BITS).o\"\nvars = { BITS = [\"$(shell id)\"] }\nskip = [\"kasan\"]\nwhy = \"x\"\n",
            // The rejected value leaves `$(BITS)` without values: reported too.
            &[("unknown-variable", "./sanitizer-policy.toml:7:8"), ("bad-path", "./sanitizer-policy.toml:8:17")],
        ),
        // Text that becomes make lines: conditions, reasons and links.
        policy_case(
            "newline in a condition",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhen = \"ifdef X\\nKASAN_SANITIZE := y\"\nwhy = \"x\"\n",
            &[("bad-condition", "./sanitizer-policy.toml:9:8")],
        ),
        policy_case(
            "condition continued onto the next line",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhen = \"ifdef CONFIG_X\\\\\"\nwhy = \"x\"\n",
            &[("bad-condition", "./sanitizer-policy.toml:9:8")],
        ),
        policy_case(
            "carriage return in a reason",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhy = \"Looks fine\\rKASAN_SANITIZE := y\"\n",
            &[("bad-reason", "./sanitizer-policy.toml:9:7")],
        ),
        policy_case(
            "reason forging the block's end marker",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhy = \"\"\"\nFine.\nEND sanpolicy generated block (checksum 0)\nKASAN_SANITIZE := y\"\"\"\n",
            &[("bad-reason", "./sanitizer-policy.toml:9:7")],
        ),
        policy_case(
            "newline in a link",
            "[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasan\"]\nwhy = \"x\"\nlinks = [\"https://example.org/\\nKASAN_SANITIZE := y\"]\n",
            &[("bad-reason", "./sanitizer-policy.toml:10:10")],
        ),
        tree_case(
            "policy not UTF-8",
            |t| t.write(POLICY, &[HEALTHY.as_bytes(), b"# caf\xc3\xa9 \xe9\n"].concat()),
            &[("io", "./sanitizer-policy.toml:6:8")],
        ),
        tree_case(
            "policy does not exist",
            |t| fs::remove_file(t.join(POLICY)).unwrap(),
            &[("io", "./sanitizer-policy.toml")],
        )
        .says("cannot read policy `./sanitizer-policy.toml`"),
        tree_case(
            "policy is a directory",
            |t| {
                fs::remove_file(t.join(POLICY)).unwrap();
                fs::create_dir(t.join(POLICY)).unwrap();
            },
            &[("io", "./sanitizer-policy.toml")],
        )
        .says("policy `./sanitizer-policy.toml` is a directory"),
        tree_case("tree does not exist", |_| {}, &[("io", "")]).args(&["--tree", "linux"]).says("tree `linux` does not exist"),
        tree_case("tree is a file", |_| {}, &[("io", "")])
            .args(&["--tree", "lib/Makefile"])
            .says("tree `lib/Makefile` is not a directory"),
        // Kbuild files.
        tree_case(
            "CRLF line endings",
            |t| t.write(RUNTIME, b"# SPDX-License-Identifier: GPL-2.0\r\nobj-y := core.o report.o\r\n"),
            &[("io", "./mm/runtime/Makefile:1:35")],
        ),
        tree_case(
            "Makefile not UTF-8",
            |t| t.write(RUNTIME, b"# SPDX-License-Identifier: GPL-2.0\nobj-y := core.o \xffreport.o\n"),
            &[("io", "./mm/runtime/Makefile:2:17")],
        ),
        tree_case(
            "missing end marker",
            |t| t.write(RUNTIME, format!("obj-y := core.o\n{BEGIN}KASAN_SANITIZE := n\n").as_bytes()),
            &[("bad-marker", "./mm/runtime/Makefile:2:1")],
        ),
        tree_case(
            "two begin markers",
            |t| t.write(RUNTIME, format!("obj-y := core.o\n{BEGIN}{BEGIN}KASAN_SANITIZE := n\n{END}").as_bytes()),
            &[("bad-marker", "./mm/runtime/Makefile:3:1")],
        ),
        tree_case(
            "end marker without a begin marker",
            |t| t.write(RUNTIME, format!("obj-y := core.o\nKASAN_SANITIZE := n\n{END}").as_bytes()),
            &[("bad-marker", "./mm/runtime/Makefile:3:1")],
        ),
        tree_case(
            "end marker continued onto the next line",
            |t| {
                assert_eq!(t.run(GEN).code, 0);
                let text = t.read(RUNTIME).replace(")\n", ") \\\nobj-y += swallowed.o\n");
                t.write(RUNTIME, text.as_bytes());
            },
            &[("bad-marker", "./mm/runtime/Makefile:19:1")],
        ),
        tree_case(
            "Makefile ending in `\\` without a final newline",
            |t| t.write(RUNTIME, b"obj-y := core.o report.o \\"),
            &[("bad-marker", "./mm/runtime/Makefile:1:1")],
        ),
        tree_case(
            "Makefile ending inside a conditional",
            |t| t.write(RUNTIME, b"obj-y := core.o\nifdef CONFIG_X\nobj-y += report.o\n"),
            &[("bad-marker", "./mm/runtime/Makefile:2:1")],
        ),
        tree_case(
            "block edited by hand",
            |t| {
                assert_eq!(t.run(GEN).code, 0);
                let text = t.read(RUNTIME).replace("KASAN_SANITIZE := n\n", "KASAN_SANITIZE := n\nKCOV_INSTRUMENT := y\n");
                t.write(RUNTIME, text.as_bytes());
            },
            &[("hand-edited-block", "./mm/runtime/Makefile:4:1")],
        )
        .commands(&[GEN]),
        tree_case(
            "kbuild file symlinked outside the tree",
            |t| {
                let outside = outside(t).join("Makefile");
                fs::create_dir_all(outside.parent().unwrap()).unwrap();
                fs::rename(t.join(RUNTIME), &outside).unwrap();
                std::os::unix::fs::symlink(&outside, t.join(RUNTIME)).unwrap();
            },
            &[("symlink", "./mm/runtime/Makefile")],
        )
        .says("leads outside the tree"),
        tree_case(
            "directory symlinked outside the tree",
            |t| {
                let outside = outside(t).join("runtime");
                fs::create_dir_all(outside.parent().unwrap()).unwrap();
                fs::rename(t.join("mm/runtime"), &outside).unwrap();
                std::os::unix::fs::symlink(&outside, t.join("mm/runtime")).unwrap();
            },
            &[("symlink", "./mm/runtime/Makefile")],
        ),
        tree_case(
            "read-only Makefile",
            |t| chmod(&t.join(RUNTIME), 0o444),
            &[("io", "./mm/runtime/Makefile")],
        )
        .commands(&[GEN, FORCE])
        .says("`mm/runtime/Makefile` is read-only"),
        tree_case(
            "unreadable Makefile",
            |t| chmod(&t.join(RUNTIME), 0o000),
            &[("io", "./mm/runtime/Makefile")],
        )
        .says("cannot read `./mm/runtime/Makefile`: Permission denied"),
        tree_case(
            "directory missing from the tree",
            |t| fs::remove_dir_all(t.join("mm/runtime")).unwrap(),
            &[("missing-directory", "./sanitizer-policy.toml:19:8")],
        ),
        tree_case(
            "directory without a kbuild file",
            |t| fs::remove_file(t.join(RUNTIME)).unwrap(),
            &[("missing-kbuild-file", "./sanitizer-policy.toml:19:8")],
        ),
        tree_case(
            "output directory is a file",
            |t| t.write("out", b"a file\n"),
            &[
                ("io", "out/drivers/selftest/sanpolicy.mk"),
                ("io", "out/lib/sanpolicy.mk"),
                ("io", "out/mm/runtime/sanpolicy.mk"),
                ("io", "out/sanitizer-policy.effective.txt"),
            ],
        )
            .args(&["--out", "out"])
            .commands(&[GEN]),
        // Huge inputs: the error is found, located and reported in bounded time.
        tree_case(
            "huge policy (100k units) with one bad unit at the end",
            |t| {
                let text = format!("{}[[unit]]\npath = \"lib/plain.o\"\nskip = [\"kasn\"]\nwhy = \"x\"\n", huge_policy(100_000));
                t.write(POLICY, text.as_bytes());
            },
            &[("unknown-mechanism", "./sanitizer-policy.toml:500003:9")],
        )
        .commands(&[GEN]),
        tree_case(
            "huge Makefile with a second begin marker near its end",
            |t| {
                let mut text = huge_makefile(200_000);
                text.push_str(&format!("{BEGIN}{END}\n{BEGIN}{END}"));
                t.write(RUNTIME, text.as_bytes());
            },
            &[("bad-marker", "./mm/runtime/Makefile:200004:1")],
        )
        .commands(&[GEN, CHECK]),
    ]
}

#[test]
fn every_bad_input_exits_2_with_a_located_error_and_changes_nothing() {
    let mut failures = Vec::new();
    for case in cases() {
        assert!(!case.errors.is_empty(), "{}: no expected error", case.name);
        let tree = Tree::new("mechanisms", case.version);
        (case.setup)(&tree);
        // Root ignores permission bits: read-only and unreadable files are tried as `nobody`.
        let user = (is_root() && case.name.starts_with("unreadable")).then(|| {
            give_to_nobody(tree.path());
            Nobody::new()
        });
        let outside = outside(&tree);
        let before = (tree.fingerprint(), outside.exists().then(|| Fingerprint::of(&outside)));
        for (i, command) in case.commands.iter().enumerate() {
            let args = [*command, case.args].concat();
            let started = Instant::now();
            let run = run_as(tree.path(), &args, user.as_ref());
            let took = started.elapsed();
            assert_unchanged(&before.0, &tree.fingerprint(), &format!("{}: {args:?}", case.name));
            if let Some(outside_before) = &before.1 {
                assert_unchanged(outside_before, &Fingerprint::of(&outside), &format!("{}: outside", case.name));
            }
            let found = errors(&run.stderr);
            let expected: Vec<(String, String)> =
                case.errors.iter().map(|(c, a)| (c.to_string(), a.to_string())).collect();
            let mut problems = Vec::new();
            if run.code != 2 {
                problems.push(format!("exit {} instead of 2", run.code));
            }
            if i == 0 && found != expected {
                problems.push(format!("errors {found:?}, expected {expected:?}"));
            }
            if found.is_empty() {
                problems.push("no error diagnostic".to_string());
            }
            if !run.stderr.contains(case.says) {
                problems.push(format!("does not say {:?}", case.says));
            }
            if took > Duration::from_secs(60) {
                problems.push(format!("took {took:?}"));
            }
            if !problems.is_empty() {
                failures.push(format!("{} {args:?}: {}\n{}", case.name, problems.join("; "), run.both()));
            }
        }
        if outside.exists() {
            fs::remove_dir_all(&outside).unwrap();
        }
    }
    assert!(failures.is_empty(), "{} failing case(s):\n\n{}", failures.len(), failures.join("\n\n"));
}

/// Inputs that look bad but have one lossless meaning: they are handled, not refused.
#[test]
fn odd_but_valid_inputs_are_handled_losslessly() {
    // No final newline: the block starts on a line of its own; no byte before it changes.
    let tree = Tree::new("mechanisms", V6_12);
    let old = "# SPDX-License-Identifier: GPL-2.0\nobj-y := core.o report.o";
    tree.write(RUNTIME, old.as_bytes());
    let run = tree.run(GEN);
    assert_eq!(run.code, 0, "{}", run.both());
    let new = tree.read(RUNTIME);
    assert!(new.starts_with(&format!("{old}\n\n# BEGIN sanpolicy generated block")), "{new}");

    // A last line continued into the end of the file (as in some kernel Makefiles): make joins
    // it to an empty line, which the blank line before the block keeps it joined to.
    let tree = Tree::new("mechanisms", V6_12);
    let old = "obj-y := core.o \\\n\treport.o \\\n";
    tree.write(RUNTIME, old.as_bytes());
    let before = sanpolicy::makefile::parse(old).assignments[0].value.clone();
    let run = tree.run(GEN);
    assert_eq!(run.code, 0, "{}", run.both());
    let new = tree.read(RUNTIME);
    assert!(new.starts_with(&format!("{old}\n# BEGIN")), "{new}");
    assert_eq!(sanpolicy::makefile::parse(&new).assignments[0].value, before);

    // A kbuild file symlinked inside the tree: the target gets the block, the link stays.
    let tree = Tree::new("mechanisms", V6_12);
    fs::rename(tree.join(RUNTIME), tree.join("mm/runtime/Makefile.real")).unwrap();
    std::os::unix::fs::symlink("Makefile.real", tree.join(RUNTIME)).unwrap();
    let run = tree.run(GEN);
    assert_eq!(run.code, 0, "{}", run.both());
    assert_eq!(fs::read_link(tree.join(RUNTIME)).unwrap(), Path::new("Makefile.real"));
    assert!(tree.read("mm/runtime/Makefile.real").contains("KASAN_SANITIZE := n\n"));
    let after = tree.fingerprint();
    assert_eq!(tree.run(GEN).code, 0);
    assert_unchanged(&after, &tree.fingerprint(), "second run through the symlink");

    // Placeholder reasons are a warning unless real ones are required (`--strict`).
    let tree = Tree::new("mechanisms", V6_12);
    let policy = tree.read(POLICY).replace(
        "why = \"Fixture: one object exempt from every mechanism.\"",
        "why = \"TODO(sanpolicy import): the tree gives no reason\"",
    );
    tree.write(POLICY, policy.as_bytes());
    let run = tree.run(GEN);
    assert_eq!(run.code, 0, "{}", run.both());
    let check = tree.run(CHECK);
    assert_eq!(check.code, 0, "{}", check.both());
    assert!(
        check.stderr.contains("warning[placeholder-reason]: 1 unit(s) still lack a real reason"),
        "{}",
        check.stderr
    );

    // A read-only file that is up to date needs no write; one that is stale is drift to --check.
    let tree = Tree::new("mechanisms", V6_12);
    chmod(&tree.join(RUNTIME), 0o444);
    let before = tree.fingerprint();
    let check = tree.run(GEN_CHECK);
    assert_eq!(check.code, 1, "{}", check.both());
    assert_unchanged(&before, &tree.fingerprint(), "--check of a read-only file");
    chmod(&tree.join(RUNTIME), 0o644);
    assert_eq!(tree.run(GEN).code, 0);
    chmod(&tree.join(RUNTIME), 0o444);
    let run = tree.run(GEN);
    assert_eq!(run.code, 0, "an up-to-date read-only file is not written: {}", run.both());
}

/// The bundled policy is curated: it must pass with real reasons required.
#[test]
fn bundled_policy_has_only_real_reasons() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (policy, diags) = sanpolicy::policy::load(&repo.join("policy/linux.toml"));
    assert!(!diags.has_errors(), "{diags:?}");
    let placeholders = sanpolicy::check::placeholder_errors(&policy);
    assert!(placeholders.is_empty(), "{placeholders:?}");
}
