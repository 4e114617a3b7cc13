//! A directive continued over several lines by `\` is modelled (issue 18, "Done when" 4): 6.1's
//! `arch/arm64/kernel/vdso/Makefile:41` (`CFLAGS_REMOVE_vgettimeofday.o = $(CC_FLAGS_FTRACE)
//! -Os $(CC_FLAGS_SCS) \` and three more lines) is adopted in place, `check` reports no
//! unrepresentable line, and the flags the unit holds are the value GNU make reads for the
//! variable, before and after the policy changes them.

mod make_judge;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sanpolicy::mechanism::MechId;
use sanpolicy::policy;

const TARBALL: &str = "/usr/src/linux-source-6.1.tar.xz";
const VDSO: &str = "arch/arm64/kernel/vdso";
const VARIABLE: &str = "CFLAGS_REMOVE_vgettimeofday.o";

/// A tree holding 6.1's real `arch/arm64/kernel/vdso/Makefile` (from the Debian source
/// package), its objects' sources, and 6.1's `scripts/Makefile.{lib,build}`.
fn vdso_tree(scratch: &Path) -> PathBuf {
    assert!(
        Path::new(TARBALL).is_file(),
        "{TARBALL} is missing: install it with `apt-get install linux-source-6.1` (.ci/run does)"
    );
    let extracted = scratch.join("src");
    fs::create_dir_all(&extracted).unwrap();
    let status = Command::new("tar")
        .arg("-xJf")
        .arg(TARBALL)
        .arg("-C")
        .arg(&extracted)
        .args(["--wildcards", &format!("*/{VDSO}/Makefile")])
        .status()
        .expect("running tar");
    assert!(status.success(), "tar -xJf {TARBALL} failed: {status}");
    let top = fs::read_dir(&extracted).unwrap().next().unwrap().unwrap().path();
    let tree = scratch.join("tree");
    fs::create_dir_all(tree.join(VDSO)).unwrap();
    fs::copy(top.join(VDSO).join("Makefile"), tree.join(VDSO).join("Makefile")).unwrap();
    for source in ["vgettimeofday.c", "note.S", "sigreturn.S"] {
        fs::write(tree.join(VDSO).join(source), "").unwrap();
    }
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-rules/linux-6.1/scripts");
    fs::create_dir_all(tree.join("scripts")).unwrap();
    for f in ["Makefile.lib", "Makefile.build"] {
        fs::copy(rules.join(f), tree.join("scripts").join(f)).unwrap();
    }
    tree
}

fn sanpolicy(tree: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sanpolicy"))
        .args(args)
        .current_dir(tree)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().expect("sanpolicy was killed by a signal"), text)
}

/// The value GNU make gives `VARIABLE` after reading the vdso Makefile (unexpanded: the flags
/// as written, with make's joining of continued lines).
fn make_reads(tree: &Path, scratch: &Path) -> String {
    // The Makefile includes `$(srctree)/lib/vdso/Makefile`: an empty one stands in for it.
    let srctree = scratch.join("srctree");
    fs::create_dir_all(srctree.join("lib/vdso")).unwrap();
    fs::write(srctree.join("lib/vdso/Makefile"), "").unwrap();
    let driver = scratch.join("judge.mk");
    fs::write(
        &driver,
        format!(
            "srctree := {}\nobj := {VDSO}\ninclude {}\n$(info [$(value {VARIABLE})])\nsanpolicy-judge: ;\n",
            srctree.display(),
            tree.join(VDSO).join("Makefile").display()
        ),
    )
    .unwrap();
    let stdout = make_judge::make(scratch, &["-f", "judge.mk", "sanpolicy-judge"]);
    let line = stdout.lines().find(|l| l.starts_with('[')).unwrap_or_else(|| panic!("no value from make: {stdout}"));
    line.trim_start_matches('[').trim_end_matches(']').to_string()
}

/// The flags the policy's unit for `vgettimeofday.o` removes.
fn unit_flags(tree: &Path) -> String {
    let (policy, diags) = policy::load(&tree.join("sanitizer-policy.toml"));
    assert!(!diags.has_errors(), "{diags:?}");
    let ftrace = MechId::by_name("ftrace").unwrap();
    let unit = policy
        .units
        .iter()
        .find(|u| u.path.text == format!("{VDSO}/vgettimeofday.o"))
        .expect("a unit for vgettimeofday.o");
    unit.value(ftrace).expect("the unit removes the ftrace flags")
}

#[test]
fn a_continued_directive_of_6_1_is_modelled_as_make_reads_it() {
    let scratch = tempfile::tempdir().unwrap();
    let tree = vdso_tree(scratch.path());
    let makefile = tree.join(VDSO).join("Makefile");
    let original = fs::read(&makefile).unwrap();
    assert!(
        String::from_utf8_lossy(&original).lines().any(|l| l.starts_with(VARIABLE) && l.ends_with('\\')),
        "the 6.1 Makefile no longer continues `{VARIABLE}`: this test needs another line"
    );

    let (code, out) = sanpolicy(&tree, &["import", "--adopt"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(fs::read(&makefile).unwrap(), original, "adoption in place rewrote the Makefile");
    assert!(!out.contains("unrepresentable") && !out.contains("not imported"), "{out}");
    let (code, out) = sanpolicy(&tree, &["check"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("[unrepresentable]"), "{out}");
    assert_eq!(unit_flags(&tree), make_reads(&tree, scratch.path()), "the unit's flags are what make reads");

    // The policy drops `-Os`: the line is written anew, on one line, and make reads the
    // policy's flags; a second run changes nothing.
    let policy_path = tree.join("sanitizer-policy.toml");
    let text = fs::read_to_string(&policy_path).unwrap();
    assert!(text.contains(" -Os "), "{text}");
    fs::write(&policy_path, text.replacen(" -Os ", " ", 1)).unwrap();
    let (code, out) = sanpolicy(&tree, &["gen-makefiles", "--force"]);
    assert_eq!(code, 0, "{out}");
    let flags = unit_flags(&tree);
    assert!(!flags.contains("-Os"), "{flags}");
    assert_eq!(flags, make_reads(&tree, scratch.path()), "after gen-makefiles, make reads the policy's flags");
    let (code, out) = sanpolicy(&tree, &["gen-makefiles", "--check"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = sanpolicy(&tree, &["check"]);
    assert_eq!(code, 0, "{out}");
}
