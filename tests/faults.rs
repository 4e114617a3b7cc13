//! Faults while writing: a run that is killed part-way must leave every file either wholly old
//! or wholly new, and a failure at any step, before or during the renames, must change nothing
//! at all (no file, no mode, no temporary file, no directory: renamed files are put back). Faults are injected at every step of
//! `output::apply_with`, both as errors from its hook and as real file-system sabotage (root
//! ignores permission bits, so a path is made unusable instead: a file where a directory
//! belongs, a directory where a file is renamed to); the kill is a child process exiting
//! mid-run.

mod fixture_tree;

use std::fs;
use std::io;
use std::path::Path;
use std::process::Command;

use fixture_tree::{assert_unchanged, Fingerprint, Tree, V6_12};
use sanpolicy::generate;
use sanpolicy::kbuild::Rules;
use sanpolicy::output::{self, Change, Step};
use sanpolicy::policy;

/// The changes `gen-makefiles` would apply to a fresh `mechanisms` tree: three kbuild files.
fn planned(tree: &Path) -> Vec<Change> {
    let (policy, diags) = policy::load(&tree.join("sanitizer-policy.toml"));
    assert!(!diags.has_errors(), "{diags:?}");
    let (rules, diags) = Rules::from_tree(tree);
    assert!(!diags.has_errors(), "{diags:?}");
    let plan = generate::plan_tree(&policy, tree, &rules, false, true);
    assert!(!plan.diags.has_errors(), "{:?}", plan.diags);
    let changes: Vec<Change> = plan.changes.into_iter().filter(|c| !c.is_noop()).collect();
    assert_eq!(changes.len(), 3);
    changes
}

/// Each planned file holds exactly its old or its new text, and which one it is.
fn states(changes: &[Change]) -> Vec<&'static str> {
    changes
        .iter()
        .map(|c| {
            let now = fs::read_to_string(&c.path).ok();
            if now == c.new {
                "new"
            } else if now == c.old {
                "old"
            } else {
                panic!("{}: neither old nor new: {now:?}", c.display)
            }
        })
        .collect()
}

/// Temporary files left anywhere under `root`.
fn temporaries(root: &Path) -> Vec<String> {
    Fingerprint::of(root).files.into_keys().filter(|p| p.contains(".sanpolicy-")).collect()
}

/// An injected error at the `n`-th step of the given kind.
fn fail_at(kind: &'static str, n: usize) -> impl FnMut(Step<'_>) -> io::Result<()> {
    let mut seen = 0;
    move |step| {
        let this = matches!((kind, step), ("stage", Step::Stage(_)) | ("commit", Step::Commit(_)));
        if this {
            seen += 1;
            if seen == n + 1 {
                return Err(io::Error::other("injected fault"));
            }
        }
        Ok(())
    }
}

#[test]
fn a_failure_while_staging_changes_nothing() {
    for n in 0..3 {
        let tree = Tree::new("mechanisms", V6_12);
        let changes = planned(tree.path());
        let before = tree.fingerprint();
        let error = output::apply_with(&changes, &mut fail_at("stage", n)).unwrap_err();
        assert!(error.to_string().contains("nothing was written"), "{error}");
        assert_unchanged(&before, &tree.fingerprint(), &format!("failure staging file {n}"));
        assert_eq!(states(&changes), ["old"; 3]);
    }
}

#[test]
fn a_failure_while_renaming_puts_back_the_files_renamed() {
    for n in 0..3 {
        let tree = Tree::new("mechanisms", V6_12);
        let changes = planned(tree.path());
        let before = tree.fingerprint();
        let error = output::apply_with(&changes, &mut fail_at("commit", n)).unwrap_err();
        assert!(error.to_string().contains("rolled back: nothing was written"), "{error}");
        assert!(error.to_string().contains(&changes[n].display), "{error}");
        assert_eq!(states(&changes), ["old"; 3], "failure renaming file {n}");
        assert_unchanged(&before, &tree.fingerprint(), &format!("failure renaming file {n}"));
        // Rerunning does the job.
        output::apply(&changes).unwrap();
        assert_eq!(states(&changes), ["new"; 3]);
    }
}

/// Real faults: the `n`-th file's directory turns into a file just before staging it, or its
/// path turns into a non-empty directory just before the rename (the files renamed before it are
/// put back, and the directory is left alone).
#[test]
fn real_file_system_faults_part_way() {
    for n in 0..3 {
        let tree = Tree::new("mechanisms", V6_12);
        let changes = planned(tree.path());
        let before = tree.fingerprint();
        let target = changes[n].path.clone();
        let dir = target.parent().unwrap().to_path_buf();
        let moved = dir.with_extension("moved");
        let mut seen = 0;
        let error = output::apply_with(&changes, &mut |step| {
            if let Step::Stage(_) = step {
                if seen == n {
                    fs::rename(&dir, &moved)?;
                    fs::write(&dir, "a file where a directory was\n")?;
                }
                seen += 1;
            }
            Ok(())
        })
        .unwrap_err();
        assert!(error.to_string().contains("nothing was written"), "{error}");
        fs::remove_file(&dir).unwrap();
        fs::rename(&moved, &dir).unwrap();
        assert_unchanged(&before, &tree.fingerprint(), &format!("directory of file {n} gone while staging"));
    }
    for n in 0..3 {
        let tree = Tree::new("mechanisms", V6_12);
        let changes = planned(tree.path());
        let target = changes[n].path.clone();
        let mut seen = 0;
        let error = output::apply_with(&changes, &mut |step| {
            if let Step::Commit(_) = step {
                if seen == n {
                    fs::remove_file(&target)?;
                    fs::create_dir(&target)?;
                    fs::write(target.join("keep"), "")?;
                }
                seen += 1;
            }
            Ok(())
        })
        .unwrap_err();
        assert!(error.to_string().contains(&changes[n].display), "{error}");
        assert!(error.to_string().contains("[changed-during-run]"), "{error}");
        assert!(target.join("keep").exists(), "the directory that replaced file {n} was touched");
        fs::remove_dir_all(&target).unwrap();
        fs::write(&target, changes[n].old.as_deref().unwrap()).unwrap();
        assert_eq!(states(&changes), ["old"; 3], "file {n} replaced by a directory before its rename");
        assert_eq!(temporaries(tree.path()), Vec::<String>::new());
    }
}

/// Directories created for new files are removed again when staging fails.
#[test]
fn a_failed_run_removes_the_directories_it_created() {
    let out = tempfile::tempdir().unwrap();
    let changes: Vec<Change> = ["a/b/one.mk", "a/c/two.mk", "d/three.mk"]
        .iter()
        .map(|rel| Change { path: out.path().join(rel), display: rel.to_string(), old: None, new: Some("x\n".into()) })
        .collect();
    let before = Fingerprint::of(out.path());
    output::apply_with(&changes, &mut fail_at("stage", 2)).unwrap_err();
    assert_unchanged(&before, &Fingerprint::of(out.path()), "failed run into a fresh output directory");
    output::apply(&changes).unwrap();
    assert_eq!(Fingerprint::of(out.path()).files.len(), 3);
}

/// What the preflight refuses before anything is written: a read-only target, a directory or
/// a symlink where the file belongs, a file where a directory belongs.
#[test]
fn preflight_refuses_unwritable_targets() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = |rel: &str| dir.path().join(rel);
    fs::write(p("read-only"), "old\n").unwrap();
    fs::set_permissions(p("read-only"), fs::Permissions::from_mode(0o444)).unwrap();
    fs::create_dir(p("a-directory")).unwrap();
    fs::write(p("target"), "old\n").unwrap();
    std::os::unix::fs::symlink(p("target"), p("a-symlink")).unwrap();
    fs::write(p("a-file"), "old\n").unwrap();
    fs::write(p("writable"), "old\n").unwrap();
    let change =
        |rel: &str| Change { path: p(rel), display: rel.into(), old: Some("old\n".into()), new: Some("new\n".into()) };
    let changes: Vec<Change> =
        ["read-only", "a-directory", "a-symlink", "a-file/under", "writable"].iter().map(|r| change(r)).collect();
    let found: Vec<String> = output::preflight(&changes).iter().map(|d| d.message.clone()).collect();
    assert_eq!(
        found,
        [
            "`read-only` is read-only".to_string(),
            "`a-directory` is a directory".to_string(),
            "`a-symlink` is a symlink".to_string(),
            format!("cannot write `a-file/under`: `{}` is not a directory", p("a-file").display()),
        ]
    );
    let before = Fingerprint::of(dir.path());
    let error = output::apply(&changes).unwrap_err();
    assert!(error.to_string().contains("nothing was written"), "{error}");
    assert_unchanged(&before, &Fingerprint::of(dir.path()), "refused by the preflight");
    // The same changes without the unwritable ones go through.
    output::apply(&changes[4..]).unwrap();
    assert_eq!(fs::read_to_string(p("writable")).unwrap(), "new\n");
}

const CHILD_TREE: &str = "SANPOLICY_FAULT_CHILD_TREE";
const CHILD_STEP: &str = "SANPOLICY_FAULT_CHILD_STEP";

/// A run killed at each step: the test runs itself as a child process that applies the plan
/// and exits on the spot (no destructor runs, as with a kill) at step `n`. Every file is then
/// old or new; temporary files may be left; a rerun finishes the job and removes them.
#[test]
fn a_run_killed_part_way_leaves_each_file_old_or_new() {
    if let (Ok(tree), Ok(step)) = (std::env::var(CHILD_TREE), std::env::var(CHILD_STEP)) {
        return child(Path::new(&tree), step.parse().unwrap());
    }
    for n in 0..6usize {
        let tree = Tree::new("mechanisms", V6_12);
        let changes = planned(tree.path());
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "a_run_killed_part_way_leaves_each_file_old_or_new", "--nocapture"])
            .env(CHILD_TREE, tree.path())
            .env(CHILD_STEP, n.to_string())
            .output()
            .unwrap();
        assert_eq!(child.status.code(), Some(86), "the child did not stop at step {n}: {child:?}");
        // Steps 0-2 stage the three files, steps 3-5 rename them one by one.
        let expected: Vec<&str> = (0..3).map(|i| if n > 3 + i { "new" } else { "old" }).collect();
        assert_eq!(states(&changes), expected, "killed at step {n}");
        // Staged files stay behind as temporary files, and nothing else: those not renamed yet,
        // and for each file renamed, its old version (kept for a rollback until the run ends).
        let left = temporaries(tree.path());
        assert_eq!(left.len(), n.min(3), "killed at step {n}: {left:?}");
        output::apply(&changes).unwrap();
        assert_eq!(states(&changes), ["new"; 3], "rerun after a kill at step {n}");
        // The rerun also removed what the killed run left.
        assert_eq!(temporaries(tree.path()), Vec::<String>::new(), "rerun after a kill at step {n}");
    }
}

fn child(tree: &Path, stop_at: usize) {
    let changes = planned(tree);
    let mut step = 0;
    let result = output::apply_with(&changes, &mut |_| {
        if step == stop_at {
            std::process::exit(86);
        }
        step += 1;
        Ok(())
    });
    panic!("the child ran past step {stop_at}: {result:?}");
}
