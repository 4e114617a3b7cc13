//! `gen-makefiles` and `check` on the fixture trees under `tests/fixtures/trees/`: snapshots of
//! the generated blocks and of the rendered diagnostics, idempotency, drift detection, the
//! shape of every generated line, and the effective Kbuild state the blocks produce.

mod fixture_tree;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use fixture_tree::{assert_unchanged, kbuild_files, literal, Tree, V6_1, V6_12};
use sanpolicy::emit::checksum;
use sanpolicy::kbuild::{evaluate, instrumented_env, Evaluate, Rules};
use sanpolicy::makefile::{self, classify, DirectiveValue};
use sanpolicy::mechanism::{MechId, MECHANISMS};

/// Every kbuild file with a block: LF only, ends in a newline, valid markers and checksum, and
/// every line of the body is a comment, a conditional or a plain directive with nothing after
/// the value (make would keep a trailing blank or comment in the value).
fn assert_well_formed(tree: &Tree) {
    for rel in kbuild_files(tree.path()) {
        let text = tree.read(&rel);
        let parsed = makefile::parse(&text);
        let Some(block) = &parsed.block else { continue };
        assert!(!text.contains('\r'), "{rel}: CR in a generated file");
        assert!(text.ends_with('\n'), "{rel}: no final newline");
        assert!(parsed.marker_problems.is_empty(), "{rel}: {:?}", parsed.marker_problems);
        assert_eq!(block.recorded_checksum.as_deref(), Some(checksum(&block.body).as_str()), "{rel}: checksum");
        let mut directive_lines = 0;
        for line in block.body.lines() {
            assert_eq!(line, line.trim_end(), "{rel}: trailing blank in {line:?}");
            assert!(!line.ends_with('\\'), "{rel}: continuation in {line:?}");
            let word = line.split_whitespace().next().unwrap_or("");
            if line.starts_with('#') || ["ifdef", "ifndef", "ifeq", "ifneq", "endif"].contains(&word) {
                continue;
            }
            if line.is_empty() {
                continue; // between units
            }
            assert!(!line.contains('#'), "{rel}: comment on a directive line {line:?}");
            directive_lines += 1;
        }
        let in_block: Vec<_> = parsed.assignments.iter().filter(|a| a.in_block).collect();
        assert_eq!(in_block.len(), directive_lines, "{rel}: every directive line reads as one assignment");
        for a in in_block {
            assert!(a.inline_comment.is_none() && !a.value.ends_with(char::is_whitespace), "{rel}: {a:?}");
            let d = classify(a).unwrap_or_else(|| panic!("{rel}: `{}` is not an instrumentation directive", a.name));
            assert!(
                matches!(d.value, DirectiveValue::Plain(_)),
                "{rel}: `{} {} {}` is not a plain value",
                a.name,
                a.op.as_str(),
                a.value
            );
        }
    }
}

/// Copy the fixture, run `gen-makefiles`, and check what every generation must satisfy: the
/// lines are well formed, a second run changes no byte, and `--check` then finds no drift.
fn generate(name: &str, version: &str) -> Tree {
    let tree = Tree::new(name, version);
    let first = tree.run(&["gen-makefiles"]);
    assert_eq!(first.code, 0, "{}", first.both());
    assert_well_formed(&tree);
    let after = tree.fingerprint();
    let second = tree.run(&["gen-makefiles"]);
    assert_eq!(second.code, 0, "{}", second.both());
    assert_unchanged(&after, &tree.fingerprint(), "second gen-makefiles");
    let check = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!((check.code, check.stdout.as_str()), (0, ""), "{}", check.both());
    assert_unchanged(&after, &tree.fingerprint(), "gen-makefiles --check");
    tree
}

/// Whether `object` (relative to `dir`) is instrumented by `mech` after generation, by running
/// the directory's kbuild file with every mechanism configured plus `config`.
fn on(tree: &Tree, dir: &str, object: &str, mech: &str, config: &[(&str, &str)], kernel_object: bool) -> bool {
    let (rules, diags) = Rules::from_tree(tree.path());
    assert!(diags.is_empty(), "{diags:?}");
    let path = sanpolicy::makefile::kbuild_file(&tree.join(dir)).unwrap();
    let mut env = instrumented_env(&rules);
    for (k, v) in config {
        env.set(k, v);
    }
    env.run(&makefile::parse(&fs::read_to_string(path).unwrap()), &mut Evaluate);
    let id = MechId::by_name(mech).unwrap();
    evaluate(&rules, id, object, &env, kernel_object)
        .unwrap_or_else(|| panic!("{mech} is not read by {}", rules.source))
        .on
}

fn all_mechanisms() -> impl Iterator<Item = &'static str> {
    MECHANISMS.iter().map(|m| m.name)
}

#[test]
fn every_mechanism_skipped_and_forced() {
    let tree = generate("mechanisms", V6_12);
    insta::assert_snapshot!("mechanisms", tree.changed_kbuild_files());
    for m in all_mechanisms() {
        assert!(!on(&tree, "lib", "skipall.o", m, &[], true), "{m}: skip per object");
        assert!(on(&tree, "lib", "forceall.o", m, &[], true), "{m}: force per object");
        // Without a directive the kernel default applies: on for a kernel object with every
        // `*_ALL` switch set, except KCSAN barrier instrumentation (literal `n` default).
        assert_eq!(on(&tree, "lib", "plain.o", m, &[], true), m != "kcsan-barriers", "{m}: default");
        assert!(!on(&tree, "mm/runtime", "core.o", m, &[], true), "{m}: skip per directory");
        // A directory value beats the default even for objects that are not kernel objects,
        // except objtool, whose result 6.12 ANDs with `$(is-kernel-object)`.
        if m != "ftrace" {
            assert_eq!(
                on(&tree, "drivers/selftest", "selftest.o", m, &[], false),
                m != "objtool",
                "{m}: force per directory"
            );
            assert!(on(&tree, "drivers/selftest", "selftest.o", m, &[], true), "{m}: force per directory");
        }
    }
}

#[test]
fn generation_keeps_file_modes_and_leaves_no_temporary_files() {
    let tree = Tree::new("mechanisms", V6_12);
    fs::set_permissions(tree.join("lib/Makefile"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::set_permissions(tree.join("mm/runtime/Makefile"), fs::Permissions::from_mode(0o755)).unwrap();
    let before = tree.fingerprint();
    let run = tree.run(&["gen-makefiles"]);
    assert_eq!(run.code, 0, "{}", run.both());
    let after = tree.fingerprint();
    assert_eq!(after.files["lib/Makefile"].0, 0o640);
    assert_eq!(after.files["mm/runtime/Makefile"].0, 0o755);
    assert_eq!(after.files["drivers/selftest/Makefile"].0, before.files["drivers/selftest/Makefile"].0);
    let mut names: Vec<_> = after.files.keys().collect();
    names.retain(|n| *n != "sanitizer-policy.effective.txt");
    assert_eq!(names, before.files.keys().collect::<Vec<_>>(), "files created or removed besides the snapshot");
}

#[test]
fn conditions_wrap_the_lines() {
    let tree = generate("conditions", V6_12);
    insta::assert_snapshot!("conditions", tree.changed_kbuild_files());
    let amd = [("CONFIG_AMD_MEM_ENCRYPT", "y")];
    assert!(on(&tree, "lib", "string.o", "kasan", &[], true), "ifdef false: default");
    assert!(!on(&tree, "lib", "string.o", "kasan", &amd, true), "ifdef true: exempt");
    assert!(!on(&tree, "lib", "string.o", "kcov", &[], true), "unconditional unit of the same object");
    assert!(on(&tree, "lib", "test_bitops.o", "kasan", &[], true));
    assert!(!on(&tree, "lib", "test_bitops.o", "kasan", &[("CONFIG_CC_IS_CLANG", "y")], true), "ifeq (yy,yy)");
    assert!(!on(&tree, "lib", "memcpy_kunit.o", "ubsan", &[], true), "ifneq (,y)");
    assert!(on(&tree, "lib", "memcpy_kunit.o", "ubsan", &[("CONFIG_UBSAN_TRAP", "y")], true), "ifneq (y,y)");
    let no_gcov_all = [("CONFIG_GCOV_PROFILE_ALL", "")];
    assert!(on(&tree, "lib", "crc32.o", "gcov", &no_gcov_all, true), "ifndef: forced");
    assert!(!on(&tree, "lib", "string.o", "gcov", &no_gcov_all, true), "control: no default without GCOV_PROFILE_ALL");
    assert!(!on(&tree, "kernel/trace", "trace.o", "kcsan", &[], true));
    assert!(on(&tree, "kernel/trace", "trace.o", "kcsan", &[("CONFIG_FUNCTION_TRACER", "")], true));
    assert!(!on(&tree, "kernel/trace", "trace.o", "gcov", &no_gcov_all, true));
    assert!(on(
        &tree,
        "kernel/trace",
        "trace.o",
        "gcov",
        &[("CONFIG_GCOV_PROFILE_ALL", ""), ("CONFIG_GCOV_PROFILE_FTRACE", "y")],
        true
    ));
    let early = [("CONFIG_RISCV_ALTERNATIVE_EARLY", "y")];
    assert!(on(&tree, "arch/riscv/kernel", "alternative.o", "kasan", &[], true), "outer condition false");
    assert!(!on(&tree, "arch/riscv/kernel", "alternative.o", "kasan", &early, true), "both conditions true");
    let clang_test =
        [("CONFIG_RISCV_ALTERNATIVE_EARLY", "y"), ("CONFIG_COMPILE_TEST", "y"), ("CONFIG_CC_IS_CLANG", "y")];
    assert!(on(&tree, "arch/riscv/kernel", "cpufeature.o", "kcov", &early, true));
    assert!(!on(&tree, "arch/riscv/kernel", "cpufeature.o", "kcov", &clang_test, true));
}

#[test]
fn bits_and_sub_paths_on_6_12() {
    let tree = generate("bits", V6_12);
    insta::assert_snapshot!("bits_6_12", tree.changed_kbuild_files());
    for bits in ["32", "64"] {
        let env = [("BITS", bits)];
        for m in ["kasan", "kmsan", "kcov"] {
            assert!(!on(&tree, "arch/x86/kernel", &format!("head{bits}.o"), m, &env, true), "{m} head{bits}");
        }
        assert!(!on(&tree, "arch/x86/kernel", &format!("head{bits}.o"), "ftrace", &env, true));
        assert!(!on(&tree, "arch/x86/kernel", &format!("dumpstack_{bits}.o"), "kasan", &env, true));
        assert!(on(&tree, "arch/x86/kernel", &format!("dumpstack_{bits}.o"), "ubsan", &env, true));
    }
    assert!(on(&tree, "arch/x86/kernel", "dumpstack.o", "kasan", &[("BITS", "64")], true), "no `$(BITS)`: not exempt");
    for m in ["kasan", "objtool", "ftrace"] {
        assert!(!on(&tree, "arch/x86/entry/vdso", "vdso32/note.o", m, &[], true), "{m}");
    }
    // 6.12 names objects by their path inside the directory: `note.o` elsewhere is not exempt.
    assert!(on(&tree, "arch/x86/entry/vdso", "note.o", "kasan", &[], true));
}

#[test]
fn bits_and_sub_paths_on_6_1() {
    // 6.1 names the variables with `$(basetarget)` (file name only) but `CFLAGS_REMOVE_` with
    // `$(target-stem)`; the block follows the tree's own rules.
    let tree = generate("bits", V6_1);
    insta::assert_snapshot!("bits_6_1", tree.changed_kbuild_files());
    let vdso = tree.read("arch/x86/entry/vdso/Makefile");
    assert!(
        vdso.contains("\nKASAN_SANITIZE_note.o := n\n")
            && vdso.contains("\nCFLAGS_REMOVE_vdso32/note.o += $(CC_FLAGS_FTRACE)\n"),
        "{vdso}"
    );
    for m in ["kasan", "objtool", "ftrace"] {
        assert!(!on(&tree, "arch/x86/entry/vdso", "vdso32/note.o", m, &[], true), "{m}");
    }
}

#[test]
fn directory_off_file_on() {
    let tree = generate("dir-off-file-on", V6_12);
    insta::assert_snapshot!("dir_off_file_on", tree.changed_kbuild_files());
    for m in ["kmsan", "kcov", "ubsan", "objtool"] {
        assert!(!on(&tree, "mm/kmsan", "core.o", m, &[], true), "{m}: directory off");
    }
    assert!(on(&tree, "mm/kmsan", "kmsan_test.o", "kmsan", &[], true), "per-object force beats the directory");
    assert!(on(&tree, "mm/kmsan", "kmsan_test.o", "objtool", &[], true), "per-object `n` beats directory `y`");
    assert!(!on(&tree, "mm/kmsan", "kmsan_test.o", "kcov", &[], true), "only the forced mechanisms come back");
    assert!(!on(&tree, "lib", "sort.o", "ftrace", &[], true));
    assert!(on(&tree, "lib", "test_fprobe.o", "ftrace", &[], true), "`CFLAGS_` is added after the removal");
    // The requirements name the forced object in `except`, so they hold.
    let check = tree.run(&["check"]);
    assert_eq!(check.code, 0, "{}", check.both());
    assert!(
        check.stderr.starts_with("check ok:")
            && check.stderr.ends_with("0 drift, 0 finding(s), 0 acknowledged, 0 warning(s)\n"),
        "{}",
        check.stderr
    );
}

#[test]
fn kbuild_shadows_makefile() {
    let tree = generate("kbuild-shadows-makefile", V6_12);
    insta::assert_snapshot!("kbuild_shadows_makefile", tree.changed_kbuild_files());
    assert_eq!(
        fs::read(tree.join("drivers/misc/foo/Makefile")).unwrap(),
        fs::read(tree.original().join("drivers/misc/foo/Makefile")).unwrap(),
        "the shadowed Makefile is not touched"
    );
    assert!(tree.read("drivers/misc/foo/Kbuild").contains("KCSAN_SANITIZE_foo_core.o := n\n"));
    // The fixture's Makefile has no final newline; the block starts on a line of its own.
    assert!(tree
        .read("drivers/misc/bar/Makefile")
        .starts_with("# SPDX-License-Identifier: GPL-2.0\nobj-$(CONFIG_BAR) += bar.o\n\n# BEGIN sanpolicy"));
}

/// The unified diff of one file in `gen-makefiles --check` output.
fn diff_of<'a>(stdout: &'a str, rel: &str) -> Option<&'a str> {
    let start = stdout.find(&format!("--- a/{rel}\n"))?;
    let rest = &stdout[start..];
    let end = rest[1..].find("\n--- a/").map_or(rest.len(), |i| i + 2);
    Some(&rest[..end])
}

#[test]
fn stale_blocks_are_updated_and_orphaned_blocks_removed() {
    let tree = Tree::new("stale-block", V6_12);
    let before = tree.fingerprint();
    let check = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert_unchanged(&before, &tree.fingerprint(), "gen-makefiles --check");
    insta::assert_snapshot!(
        "stale_block_check_diff",
        diff_of(&check.stdout, "lib/Makefile").unwrap_or_else(|| panic!("{}", check.both()))
    );
    let findings = tree.run(&["check"]);
    assert_eq!(findings.code, 1, "{}", findings.both());
    assert_unchanged(&before, &tree.fingerprint(), "check");
    insta::assert_snapshot!("stale_block_check", findings.both());

    let tree = generate("stale-block", V6_12);
    insta::assert_snapshot!("stale_block", tree.changed_kbuild_files());
    assert_eq!(
        tree.read("drivers/old/Makefile"),
        "# SPDX-License-Identifier: GPL-2.0\nobj-$(CONFIG_OLD) += old.o\n",
        "the block and the blank line before it are gone"
    );
    let lib = tree.read("lib/Makefile");
    let after_block = &lib[lib.find("# END sanpolicy generated block").unwrap()..];
    assert_eq!(
        after_block.split_once('\n').unwrap().1,
        "\n# Hand-written, after the block: must survive regeneration.\nobj-y += sort.o\n"
    );
    let selftests = "tools/testing/selftests/Makefile";
    assert_eq!(
        tree.read(selftests),
        fs::read_to_string(tree.original().join(selftests)).unwrap(),
        "tools/ is not kernel Kbuild"
    );
}

/// `gen-makefiles --check` must predict exactly what `gen-makefiles` writes, including the
/// removal of a block the policy no longer names: otherwise a unit deleted from the policy
/// keeps its exemption in the kernel while CI's drift check passes.
#[test]
fn gen_check_reports_orphaned_blocks() {
    let tree = Tree::new("stale-block", V6_12);
    let fast = tree.run(&["gen-makefiles", "--check"]);
    assert!(
        diff_of(&fast.stdout, "drivers/old/Makefile").is_none(),
        "plain --check reads only the policy's directories"
    );
    let check = tree.run(&["gen-makefiles", "--check", "--sweep"]);
    assert_eq!(check.code, 1, "{}", check.both());
    let orphan = diff_of(&check.stdout, "drivers/old/Makefile")
        .unwrap_or_else(|| panic!("no diff for the orphaned block:\n{}", check.both()));
    assert!(orphan.contains("\n-KCOV_INSTRUMENT := n\n"), "{orphan}");
    // lib/Makefile, the orphan, and the effective-policy snapshot that does not exist yet.
    assert!(
        check.stderr.contains("error: 3 drift finding(s), 3 file(s) out of date; fix: `sanpolicy gen-makefiles`"),
        "{}",
        check.stderr
    );
}

#[test]
fn hand_edited_block_is_refused_then_forced() {
    let tree = Tree::new("hand-edited", V6_12);
    let before = tree.fingerprint();
    let refused = tree.run(&["gen-makefiles"]);
    assert_eq!(refused.code, 2, "{}", refused.both());
    assert_unchanged(&before, &tree.fingerprint(), "gen-makefiles");
    insta::assert_snapshot!("hand_edited_refused", refused.both());
    let check_mode = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(check_mode.code, 1, "--check reports the hand edit as drift: {}", check_mode.both());
    assert!(check_mode.stderr.contains("error[hand-edited-block]"), "{}", check_mode.stderr);
    assert_unchanged(&before, &tree.fingerprint(), "gen-makefiles --check");
    let check = tree.run(&["check"]);
    assert_eq!(check.code, 1, "a hand edit is a finding for `check`: {}", check.both());
    assert_unchanged(&before, &tree.fingerprint(), "check");
    insta::assert_snapshot!("hand_edited_check", check.both());

    let forced = tree.run(&["gen-makefiles", "--force"]);
    assert_eq!(forced.code, 0, "{}", forced.both());
    assert_well_formed(&tree);
    insta::assert_snapshot!("hand_edited_forced", tree.changed_kbuild_files());
    assert!(!tree.read("kernel/locking/Makefile").contains("KMSAN"), "the hand-added line is gone");
    let after = tree.fingerprint();
    let again = tree.run(&["gen-makefiles"]);
    assert_eq!(again.code, 0, "{}", again.both());
    assert_unchanged(&after, &tree.fingerprint(), "gen-makefiles after --force");
    assert_eq!(tree.run(&["check"]).code, 0);
}

#[test]
fn broken_requirements_fail_check() {
    // Writing a `force` that newly breaks a requirement is refused (the write guard and check
    // agree), so the policy stays unwritten and check names the break.
    let tree = Tree::new("broken-requirement", V6_12);
    let before = tree.fingerprint();
    let refused = tree.run(&["gen-makefiles"]);
    assert_eq!(refused.code, 2, "{}", refused.both());
    assert!(refused.stderr.contains("`mm/kasan/kasan_test.o` is instrumented"), "{}", refused.stderr);
    assert_unchanged(&before, &tree.fingerprint(), "refused");
    let check = tree.run(&["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert_unchanged(&before, &tree.fingerprint(), "check");
    insta::assert_snapshot!("broken_requirement_check", check.both());
    // The per-file force is the cause: without it the directory requirement holds.
    assert!(check.stderr.contains("`mm/kasan/kasan_test.o` is instrumented"), "{}", check.stderr);
    let policy = tree.read("sanitizer-policy.toml").replace(
        "path = \"mm/kasan/kasan_test.o\"\nforce = [\"kasan\"]",
        "path = \"mm/kasan/kasan_test.o\"\nforce = [\"kcsan\"]",
    );
    tree.write("sanitizer-policy.toml", policy.as_bytes());
    assert_eq!(tree.run(&["gen-makefiles"]).code, 0);
    let check = tree.run(&["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(!check.stderr.contains("mm/kasan/"), "{}", check.stderr);
}

#[test]
fn missing_sources_fail_check() {
    // Writing never creates a new problem: a line for an object with no source is refused.
    let tree = Tree::new("missing-source", V6_12);
    let before = tree.fingerprint();
    let write = tree.run(&["gen-makefiles"]);
    assert_eq!(write.code, 2, "{}", write.both());
    assert_eq!(write.stderr.matches("error[missing-source]").count(), 2, "{}", write.stderr);
    assert!(write.stderr.contains("writing this line would add a dead exemption"), "{}", write.stderr);
    assert_unchanged(&before, &tree.fingerprint(), "gen-makefiles refusing dead exemptions");
    let check = tree.run(&["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    insta::assert_snapshot!("missing_source_check", check.both());
    assert_eq!(check.stderr.matches("error[missing-source]").count(), 2, "{}", check.stderr);
}

#[test]
fn directives_outside_the_block() {
    // One verdict: a directive the policy does not own fails `gen-makefiles --check` as it
    // fails `check` and the hook (writing the blocks leaves it alone, so writing succeeds).
    let tree = Tree::new("outside-directives", V6_12);
    assert_eq!(tree.run(&["gen-makefiles"]).code, 0);
    let ci = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(ci.code, 1, "{}", ci.both());
    assert!(
        ci.stderr.contains("`KCOV_INSTRUMENT_page_alloc.o := n` is in the tree but not in the policy"),
        "{}",
        ci.stderr
    );
    // The hand-written `KCOV_INSTRUMENT_slub.o := n` above the block says what the block says:
    // make never reads it (the block sets it again), so it is the tree's line, kept where it
    // stands and named (`set-twice`), never a conflict and never dropped in silence.
    assert!(!ci.stderr.contains("error[conflicting-directive]"), "{}", ci.stderr);
    assert_eq!(tree.read("mm/Makefile").matches("KCOV_INSTRUMENT_slub.o := n").count(), 2, "kept");
    let check = tree.run(&["check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert!(check.stderr.contains("warning[set-twice]: `KCOV_INSTRUMENT_slub.o` is set twice"), "{}", check.stderr);
    insta::assert_snapshot!("outside_directives_check", check.both());
}

#[test]
fn warnings_alone_do_not_fail_check() {
    // 6.1 does not read UBSAN_SIGNED_WRAP: a warning per mention, and exit 0.
    let tree = generate("mechanisms", V6_1);
    let check = tree.run(&["check"]);
    assert_eq!(check.code, 0, "{}", check.both());
    assert_eq!(check.stderr.matches("warning[unread-by-tree]").count(), 4, "{}", check.stderr);
    assert!(!check.stderr.contains("error["), "{}", check.stderr);
}

#[test]
fn check_reports_drift_before_generation() {
    let tree = Tree::new("conditions", V6_12);
    let before = tree.fingerprint();
    let check = tree.run(&["gen-makefiles", "--check"]);
    assert_eq!(check.code, 1, "{}", check.both());
    assert_unchanged(&before, &tree.fingerprint(), "gen-makefiles --check");
    // The diff is exactly what a generation then writes.
    let diff = check.stdout.clone();
    assert!(diff.starts_with("--- a/arch/riscv/kernel/Makefile\n+++ b/arch/riscv/kernel/Makefile\n"), "{diff}");
    assert_eq!(diff.matches("\n--- a/").count() + 1, 3, "one diff per stale file: {diff}");
    let generated = generate("conditions", V6_12).changed_kbuild_files();
    for line in generated.lines().filter(|l| l.starts_with("KASAN_") || l.starts_with("if")) {
        assert!(diff.contains(&format!("\n+{line}\n")), "{line} missing from the diff");
    }
}

#[test]
fn fragments_into_an_output_directory() {
    let tree = Tree::new("conditions", V6_12);
    let out = tempfile::tempdir().unwrap();
    let out_arg = out.path().to_str().unwrap();
    let before = tree.fingerprint();
    let run = tree.run(&["gen-makefiles", "--out", out_arg]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert_unchanged(&before, &tree.fingerprint(), "--out writes nothing into the tree");
    let fragments = fixture_tree::Fingerprint::of(out.path());
    let mut text = String::new();
    for (rel, (_, bytes)) in &fragments.files {
        text.push_str(&format!("=== {rel}\n{}", String::from_utf8(bytes.clone()).unwrap()));
    }
    insta::assert_snapshot!("fragments", text);
    // Each fragment's block is the block a tree gets.
    let generated = generate("conditions", V6_12);
    for rel in ["lib", "kernel/trace", "arch/riscv/kernel"] {
        let fragment = fs::read_to_string(out.path().join(rel).join("sanpolicy.mk")).unwrap();
        let block = makefile::parse(&fragment).block.unwrap();
        let in_tree = makefile::parse(&generated.read(&format!("{rel}/Makefile"))).block.unwrap();
        assert_eq!(block.body, in_tree.body, "{rel}");
    }
    // A fragment for a directory the policy no longer names is removed; a rerun is a no-op.
    fs::create_dir_all(out.path().join("drivers/old")).unwrap();
    fs::write(out.path().join("drivers/old/sanpolicy.mk"), "# old\n").unwrap();
    let run = tree.run(&["gen-makefiles", "--out", out_arg]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(!out.path().join("drivers/old/sanpolicy.mk").exists());
    assert_eq!(fixture_tree::Fingerprint::of(out.path()).files, fragments.files);
    let check = tree.run(&["gen-makefiles", "--out", out_arg, "--check"]);
    assert_eq!((check.code, check.stdout.as_str()), (0, ""), "{}", check.both());
    insta::with_settings!({ filters => vec![(literal(out.path()).as_str(), "[OUT]")] }, {
        insta::assert_snapshot!("fragments_summary", run.both());
    });
}

#[test]
fn explicit_tree_argument() {
    // `--tree DIR` from elsewhere gives the same files as running inside the tree.
    let tree = Tree::new("mechanisms", V6_12);
    let elsewhere = tempfile::tempdir().unwrap();
    let run = fixture_tree::run_in(elsewhere.path(), &["gen-makefiles", "--tree", tree.path().to_str().unwrap()]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert_eq!(tree.changed_kbuild_files(), generate("mechanisms", V6_12).changed_kbuild_files());
    insta::with_settings!({ filters => vec![(literal(tree.path()).as_str(), "[TREE]")] }, {
        insta::assert_snapshot!("explicit_tree_summary", run.both());
    });
}

/// The hook plans the staged blobs, not the work tree: planning a tree's kbuild files given as
/// bytes, under a root that does not exist (so nothing can be read from disk), finds exactly what
/// planning the tree itself finds, in every layout. The tree holds what a sweep must tell apart:
/// `Kbuild` beside `Makefile`, a directive under `tools/` (not swept), a hand line in a directory
/// the policy does not name, a file that is not UTF-8, CRLF endings, one over the size bound.
#[test]
fn planning_staged_bytes_finds_what_planning_the_tree_finds() {
    use sanpolicy::generate::{plan_staged, plan_tree, Plan, Staged};
    use sanpolicy::policy::Layout;
    let hand = "KASAN_SANITIZE_hand.o := n\n";
    for name in ["mechanisms", "conditions", "kbuild-shadows-makefile", "stale-block", "hand-edited"] {
        let tree = Tree::new(name, V6_12);
        let add = |rel: &str, bytes: &[u8]| {
            fs::create_dir_all(tree.join(rel).parent().unwrap()).unwrap();
            fs::write(tree.join(rel), bytes).unwrap();
        };
        add("tools/x/Makefile", hand.as_bytes());
        add("extra/Makefile", format!("obj-y += hand.o\n{hand}").as_bytes());
        add("extra/both/Kbuild", format!("obj-y += hand.o\n{hand}").as_bytes());
        add("extra/both/Makefile", b"obj-y += other.o\n");
        add("extra/latin1/Makefile", b"# caf\xe9\nKASAN_SANITIZE_hand.o := n\n");
        add("extra/crlf/Makefile", b"obj-y += hand.o\r\nKASAN_SANITIZE_hand.o := n\r\n");
        add("extra/kdir/Kbuild/Makefile", format!("obj-y += hand.o\n{hand}").as_bytes());
        add("extra/kdir/Makefile", format!("obj-y += hand.o\n{hand}").as_bytes());
        let mut big = hand.as_bytes().to_vec();
        big.resize((16 << 20) + 1, b'#');
        add("extra/big/Makefile", &big);
        add("extra/bignamed/Makefile", &big);
        // Named by the policy: its unreadable kbuild files are refused, not passed by.
        let mut text = tree.read("sanitizer-policy.toml");
        for dir in ["extra/kdir", "extra/bignamed"] {
            text.push_str(&format!("\n[[unit]]\npath = \"{dir}/hand.o\"\nskip = [\"kasan\"]\nwhy = \"Fixture.\"\n"));
        }
        tree.write("sanitizer-policy.toml", text.as_bytes());
        let mut staged = Staged::default();
        for entry in walkdir::WalkDir::new(tree.path()) {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy();
            let rel = entry.path().strip_prefix(tree.path()).unwrap().to_string_lossy().into_owned();
            if entry.file_type().is_file() && (name == "Kbuild" || name == "Makefile" || rel.starts_with("scripts/")) {
                staged.files.insert(rel, fs::read(entry.path()).unwrap());
            }
        }
        let (mut policy, diags) = sanpolicy::policy::load(&tree.join("sanitizer-policy.toml"));
        assert!(!diags.has_errors(), "{name}: {diags:?}");
        let (rules, _) = Rules::from_tree(tree.path());
        let nowhere = std::path::Path::new("/nonexistent/sanpolicy-staged-root");
        assert!(!nowhere.exists());
        for layout in [Layout::InPlace, Layout::Block, Layout::Central] {
            policy.layout = layout;
            let shown = |plan: &Plan, root: &std::path::Path| {
                let root = root.display().to_string();
                let mut lines: Vec<String> = plan.diags.0.iter().map(|d| format!("{d:?}")).collect();
                lines.extend(
                    plan.changes.iter().map(|c| format!("{:?} {:?} {:?} {:?}", c.path, c.display, c.old, c.new)),
                );
                lines.extend(plan.dirs.iter().map(|(d, p)| {
                    format!(
                        "{d} {:?} {:?} {:?} {:?} {:?} {:?}",
                        p.file.path, p.file.text, p.before, p.edits, p.unheld, p.change
                    )
                }));
                let mut lines: Vec<String> = lines.into_iter().map(|l| l.replace(&root, "<tree>")).collect();
                lines.sort();
                lines
            };
            let disk = plan_tree(&policy, tree.path(), &rules, false, true);
            let bytes = plan_staged(&policy, nowhere, &rules, &staged);
            let (bytes, disk_lines) = (shown(&bytes, nowhere), shown(&disk, tree.path()));
            let only = |a: &[String], b: &[String]| -> Vec<String> {
                a.iter().filter(|l| !b.contains(l)).map(|l| l.chars().take(400).collect()).collect()
            };
            assert_eq!(only(&bytes, &disk_lines), only(&disk_lines, &bytes), "{name}, {layout:?}: staged | disk");
            assert_eq!(bytes, disk_lines, "{name}, {layout:?}");
            // What a sweep must tell apart is there to tell apart.
            let all = format!("{:?}", disk.diags);
            let found = [
                "extra/latin1/Makefile` is not UTF-8",
                "extra/crlf/Makefile` has CRLF",
                "skipped `<tree>/extra/big/Makefile`",
                "read `<tree>/extra/bignamed/Makefile`: is larger than 16 MiB",
                "read `<tree>/extra/kdir/Kbuild`: is a directory",
            ];
            let all = all.replace(&tree.path().display().to_string(), "<tree>");
            for found in found {
                assert!(all.contains(found), "{name}, {layout:?}: no `{found}` in {all}");
            }
            assert!(
                !all.contains("skipped `<tree>/extra/bignamed"),
                "{name}, {layout:?}: a named file is refused, not skipped"
            );
            assert!(disk.before("extra/both").is_some() && disk.before("tools/x").is_none(), "{name}");
            assert!(disk.before("extra/both").unwrap().contains(hand), "{name}: Kbuild is read, not Makefile");
        }
    }
}
