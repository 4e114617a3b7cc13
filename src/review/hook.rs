//! The pre-commit check: drift both ways on what is staged. The policy changed but the blocks
//! were not regenerated; a block edited by hand; a directive added to or removed from a kbuild
//! file by hand. It reads only what it must, from the git index: the staged kbuild files, the
//! policy, and the kbuild files of the policy's directories when the policy changed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::git::{git, repo_root, Blob, Blobs, Indexed};
use crate::diagnostic::{Code, Diagnostic, Diagnostics, Fix, Location};
use crate::kbuild::Rules;
use crate::policy::{self, Policy};

/// What the hook judges: the plan of the commit the index would make, and the staged text of
/// every file its diagnostics point into.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The staged policy (empty when the index has none), whose units of the staged
    /// directories were planned.
    pub policy: Policy,
    /// The units judged: those of the directories the commit touches (every unit in the
    /// central layout, whose one file holds them all).
    pub judged: Policy,
    /// The plan of those directories' staged kbuild files, with the staged policy's snapshot
    /// (compared with the staged one when the commit holds the policy or the snapshot) and the
    /// committed snapshot as the memory; the hook's own problems (a deleted policy, a deleted
    /// kbuild file, a path that is not UTF-8) are its diagnostics.
    pub plan: crate::generate::Plan,
    /// The staged text of every file the diagnostics point into (the policy, kbuild files):
    /// positions are in these, not in the working tree, so they must be rendered from them.
    pub sources: Vec<(PathBuf, String)>,
    /// The repository's top and the tree's path in it (`linux/`, or empty).
    pub repo: PathBuf,
    pub prefix: String,
}

impl Outcome {
    /// Repository paths of the files the fixes write (the policy, its snapshot, the kbuild
    /// files of the judged directories), for telling whether the working tree holds what is
    /// staged there.
    pub fn fixed_files(&self) -> Vec<String> {
        let mut out: Vec<String> = self.policy.files.iter().filter_map(|(p, _)| in_repo(p, &self.repo)).collect();
        if let Some(first) = out.first() {
            out.push(crate::generate::snapshot::snapshot_path(Path::new(first)).display().to_string());
        }
        out.extend(
            self.plan
                .dirs
                .values()
                .filter_map(|d| d.file.path.strip_prefix(&self.repo).ok())
                .map(|p| p.display().to_string()),
        );
        out
    }
}

fn dir_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// What the central layout writes besides the policy: its file, and the Makefile.build line
/// that includes it.
const CENTRAL_INPUTS: [&str; 2] = [crate::emit::central::CENTRAL_FILE, "scripts/Makefile.build"];

fn is_kbuild(path: &str) -> bool {
    matches!(path.rsplit('/').next(), Some("Makefile" | "Kbuild"))
}

/// Load a policy from git (`:0:` for the index, `HEAD:` for the last commit).
fn policy_from(
    blobs: &std::cell::RefCell<Blobs>,
    repo: &Path,
    prefix: &str,
    policy_rel: &Path,
) -> Option<(Policy, Diagnostics)> {
    let abs = repo.join(policy_rel);
    let reader = |p: &Path| -> std::io::Result<Vec<u8>> {
        let rel = p.strip_prefix(repo).unwrap_or(p);
        let bytes = blobs.borrow_mut().get(&format!("{prefix}{}", rel.display()))?.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, format!("{prefix}{} not in git", rel.display()))
        })?;
        if bytes.len() as u64 > crate::input::SOURCE_LIMIT {
            return Err(crate::input::ReadError::TooLarge { limit: crate::input::SOURCE_LIMIT }.into());
        }
        Ok(bytes)
    };
    reader(&abs).ok()?;
    Some(policy::load_with(&abs, &reader))
}

/// `path` relative to the repository's top, as git names it.
fn in_repo(path: &Path, repo: &Path) -> Option<String> {
    let abs = super::resolved(path).ok()?;
    abs.strip_prefix(repo).ok().map(|p| p.display().to_string())
}

/// Whether the index holds every file of `policy` (the policy and its includes) byte for byte.
fn same_as_staged(policy: &Policy, repo: &Path, blobs: &std::cell::RefCell<Blobs>) -> bool {
    !policy.files.is_empty()
        && policy.files.iter().all(|(path, text)| {
            let Some(rel) = in_repo(path, repo) else { return false };
            matches!(blobs.borrow_mut().get(&format!(":0:{rel}")), Ok(Some(b)) if b == text.as_bytes())
        })
}

/// The git processes a hook run reads the index with, started before anything else: listing
/// what is staged costs about what `git diff --cached` does, so the policy and the tree's rules
/// are read while it runs rather than after.
pub struct Started {
    repo: PathBuf,
    staged: std::process::Child,
    blobs: Blobs,
}

/// Start listing what is staged in the repository containing `tree`, and the blob reader.
pub fn start(tree: &Path) -> Result<Started, String> {
    let repo = repo_root(tree)?;
    let staged = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["diff", "--cached", "--raw", "--no-abbrev", "-z", "--no-renames"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git: {e}"))?;
    let blobs = Blobs::start(&repo)?;
    Ok(Started { repo, staged, blobs })
}

/// Run the check in the repository containing `tree`, with the policy at `policy_path`.
pub fn pre_commit(tree: &Path, policy_path: &Path, rules: &Rules) -> Result<Outcome, String> {
    pre_commit_started(start(tree)?, tree, policy_path, None, rules)
}

/// [`pre_commit`] with git already started by [`start`]. `on_disk` is the policy as read from
/// the working tree, if it was: used as the staged one when the index holds its files byte for
/// byte (parsing it again from the index would give the same, and would cost as much as what
/// git does).
pub fn pre_commit_started(
    started: Started,
    tree: &Path,
    policy_path: &Path,
    on_disk: Option<Policy>,
    rules: &Rules,
) -> Result<Outcome, String> {
    let repo = repo_root(tree)?;
    // Started elsewhere (the policy's tree is in another repository than the directory the
    // hook runs in): start again where the tree is.
    let started = if started.repo == repo { started } else { start(tree)? };
    let Started { staged: staged_run, blobs, .. } = started;
    let policy_abs = super::resolved(policy_path).map_err(|e| e.to_string())?;
    let policy_rel = policy_abs
        .strip_prefix(&repo)
        .map(Path::to_path_buf)
        .map_err(|_| format!("policy `{}` is not inside the repository", policy_path.display()))?;
    let mut blobs = blobs;
    // The kernel tree may be a subdirectory of the repository (`linux/`): kbuild paths are
    // judged relative to the tree's top, as the policy names them; git is asked with the prefix.
    let prefix = tree_prefix(tree, &repo)?;
    let mut outcome = Outcome { repo: repo.clone(), prefix: prefix.clone(), ..Outcome::default() };
    let mut diags = Diagnostics::default();
    // Read while git lists what is staged: what was last generated (drift needs it whenever a
    // kbuild file is staged, the usual commit in a kernel tree), and the committed policy (the
    // staged one, unless the commit changes it).
    use crate::generate::snapshot::{self, Binding};
    let snapshot_rel = snapshot::snapshot_path(&policy_rel).display().to_string();
    let binding = Binding::of(policy_path, Some(tree));
    let snapshot_spec = format!("HEAD:{snapshot_rel}");
    let mut ahead = vec![snapshot_spec.clone()];
    let policy_files = on_disk.iter().flat_map(|p| &p.files).filter_map(|(p, _)| in_repo(p, &repo));
    ahead.extend(policy_files.map(|rel| format!("HEAD:{rel}")));
    blobs.prefetch(ahead).map_err(|e| e.to_string())?;
    let base_bytes = blobs.get(&snapshot_spec).map_err(|e| e.to_string())?;
    let blobs = std::cell::RefCell::new(blobs);
    // The committed snapshot is the base of every "which side moved": validated like on disk.
    let base = match base_bytes {
        None => Ok(snapshot::Base::default()),
        Some(bytes) => snapshot::base_from_bytes(&shown(&repo.join(&snapshot_rel)), bytes, &binding),
    };
    let base = base.unwrap_or_else(|d| {
        diags.push(*d);
        snapshot::Base::default()
    });
    let staged_out = staged_run.wait_with_output().map_err(|e| e.to_string())?;
    if !staged_out.status.success() {
        return Err(format!("git diff --cached: {}", String::from_utf8_lossy(&staged_out.stderr).trim()));
    }
    let mut entries = staged_entries(&staged_out.stdout);
    // A path that is not UTF-8 is not asked of git as its bytes (two of them could read the same
    // here, and one would be judged as the other): a staged kbuild file's is refused instead.
    for e in entries.iter().filter(|e| !e.utf8 && is_kbuild(&e.path)) {
        diags.push(
            Diagnostic::error(Code::BadPath, format!("the staged `{}` has a path that is not UTF-8", e.path))
                .at(Location::file(&shown(&repo.join(&e.path))))
                .hint("rename it: the hook judges kbuild files by UTF-8 paths, as every kernel tree names them"),
        );
    }
    entries.retain(|e| e.utf8);
    let staged: Vec<String> = entries.iter().map(|e| e.path.clone()).collect();
    let in_tree = |path: &String| path.strip_prefix(&prefix).map(str::to_string);
    let kbuild_staged: Vec<String> = staged.iter().filter_map(in_tree).collect();
    let deleted: BTreeSet<String> =
        entries.iter().filter(|e| e.id.is_none()).filter_map(|e| in_tree(&e.path)).collect();
    blobs.borrow_mut().staged = Some(entries.into_iter().map(|e| (e.path, e.id)).collect());
    let loaded = match on_disk.filter(|p| same_as_staged(p, &repo, &blobs)) {
        Some(p) => Some((p, Diagnostics::default())),
        None => policy_from(&blobs, &repo, ":0:", &policy_rel),
    };
    let Some((policy, policy_diags)) = loaded else {
        // A policy in HEAD but not in the index is being removed: the blocks it generated stay.
        if let Some((head, _)) = policy_from(&blobs, &repo, "HEAD:", &policy_rel) {
            let shown = policy_rel.display().to_string();
            diags.push(
                Diagnostic::error(Code::PolicyRemoved, format!("the policy `{shown}` is deleted from the index"))
                    .at(Location::file(&policy_abs))
                    .hint(crate::hint![
                        "restore it with ",
                        Fix::git(&["restore", "--staged", "--worktree", "--", &shown]),
                        format!(
                            "; to stop using sanpolicy, also remove the {} generated block(s) and the hook",
                            head.directories().len()
                        )
                    ]),
            );
        }
        outcome.plan.diags = diags;
        return Ok(outcome); // no policy staged or committed: nothing to keep in sync
    };
    outcome.sources.extend(policy.files.iter().cloned());
    if policy_diags.has_errors() {
        diags.extend(policy_diags);
        outcome.plan.diags = diags;
        outcome.policy = policy;
        return Ok(outcome);
    }
    let policy_files: BTreeSet<String> = policy.files.iter().filter_map(|(p, _)| in_repo(p, &repo)).collect();
    let policy_changed = staged.iter().any(|s| policy_files.contains(s));
    // The hook judges the commit whole, as `gen-makefiles --check` judges the tree the commit
    // would make: every directory the policy, the committed memory or the committed policy has
    // lines in, and every staged kbuild file's (a hand-added line there is drift). A commit that
    // does not touch an out-of-date directory still fails on it: the commit would be out of
    // sync, and CI's `--check` would say so.
    let mut dirs: BTreeSet<String> =
        kbuild_staged.iter().filter(|s| is_kbuild(s)).map(|s| dir_of(s).to_string()).collect();
    dirs.extend(policy.units_by_dir().keys().map(|d| d.to_string()));
    dirs.extend(base.directories());
    if policy_changed {
        if let Some((head, _)) = policy_from(&blobs, &repo, "HEAD:", &policy_rel) {
            dirs.extend(head.units_by_dir().keys().map(|d| d.to_string()));
        }
    }
    let central = policy.layout == crate::policy::Layout::Central;
    let mut blobs = blobs.into_inner();
    // The policy and its snapshot travel together: a staged policy needs its staged snapshot,
    // compared whole, as `gen-makefiles --check` compares it (its header is the same whoever
    // writes it, and its binding and checksum are part of what is committed).
    let judged_snapshot = if policy_changed || staged.contains(&snapshot_rel) {
        let have = blobs.get(&format!(":0:{snapshot_rel}")).map_err(|e| e.to_string())?;
        Some(have.map(|b| String::from_utf8_lossy(&b).into_owned()))
    } else {
        None
    };
    let at = Top { dir: repo.join(&prefix), prefix };
    let staged_files = staged_files(&at, &policy, &dirs, &deleted, &mut blobs, &mut diags, &mut outcome.sources)?;
    let judged = if central {
        policy.clone()
    } else {
        policy.with_units_where(|u| staged_files.present.contains(&u.path.kbuild_dir))
    };
    let index = crate::generate::Index {
        staged: &staged_files.staged,
        snapshot: judged_snapshot.map(|have| (repo.join(&snapshot_rel), policy_rel.clone(), have)),
        binding,
        base,
    };
    let mut plan = if dirs.is_empty() {
        crate::generate::plan_index(&policy, &crate::policy::Policy::default(), &at.dir, rules, index)
    } else {
        crate::generate::plan_index(&policy, &judged, &at.dir, rules, index)
    };
    diags.extend(std::mem::take(&mut plan.diags));
    plan.diags = diags;
    outcome.plan = plan;
    outcome.policy = policy;
    outcome.judged = judged;
    Ok(outcome)
}

/// The tree's top inside the repository: its directory, and its path there as a git path
/// prefix (`linux/`, or empty when the tree is the repository).
struct Top {
    dir: PathBuf,
    prefix: String,
}

/// `tree`'s path inside the repository at `repo`, as a prefix of git paths.
fn tree_prefix(tree: &Path, repo: &Path) -> Result<String, String> {
    let top = tree.canonicalize().map_err(|e| format!("{}: {e}", tree.display()))?;
    let rel = top.strip_prefix(repo).map_err(|_| format!("`{}` is not inside `{}`", tree.display(), repo.display()))?;
    let rel = rel.to_str().ok_or_else(|| format!("`{}` is not a UTF-8 path", tree.display()))?;
    Ok(if rel.is_empty() { String::new() } else { format!("{rel}/") })
}

/// One staged path: its object id in the index, `None` when the commit deletes it there.
struct Entry {
    path: String,
    id: Option<Indexed>,
    /// The path's bytes are UTF-8 (`path` is then exactly them).
    utf8: bool,
}

/// `git diff --cached --raw --no-abbrev -z` output (`:MODE MODE OLD NEW STATUS\0PATH\0` per
/// path): every staged path with its object id and kind in the index.
fn staged_entries(out: &[u8]) -> Vec<Entry> {
    let mut fields = out.split(|b| *b == 0).filter(|s| !s.is_empty());
    let mut entries = Vec::new();
    while let (Some(raw), Some(path)) = (fields.next(), fields.next()) {
        let raw = String::from_utf8_lossy(raw);
        let new = raw.split(' ').nth(3).filter(|id| id.bytes().any(|b| b != b'0'));
        let irregular = match raw.split(' ').nth(1) {
            Some("120000") => Some("a symlink in the index"),
            Some("160000") => Some("a submodule in the index"),
            _ => None,
        };
        // Deleted, or unmerged: nothing a commit can take at stage 0.
        let id = new.filter(|_| !raw.ends_with(" D") && !raw.ends_with(" U"));
        let id = id.map(|id| Indexed { id: id.to_string(), irregular });
        let utf8 = std::str::from_utf8(path).is_ok();
        entries.push(Entry { path: String::from_utf8_lossy(path).into_owned(), id, utf8 });
    }
    entries
}

/// A staged deletion of a kbuild file that holds the policy's block or directives: the commit
/// drops exemptions without the policy saying so.
fn deleted_kbuild_file(path: &Path, rel: &str, head: &str, units: usize, diags: &mut Diagnostics) {
    let parsed = crate::makefile::parse(head);
    let directives = parsed.directives().count();
    if units == 0 && directives == 0 && parsed.block.is_none() {
        return;
    }
    diags.push(
        Diagnostic::error(
            Code::DeletedKbuildFile,
            format!(
                "`{rel}` is deleted, but holds {directives} directive line(s) and the policy names {units} unit(s) there"
            ),
        )
        .at(Location::file(path))
        .hint(crate::hint![
            "restore it with ",
            Fix::git(&["restore", "--staged", "--worktree", "--", rel]),
            ", or drop the directory's units from the policy and run ",
            Fix::GenMakefiles
        ]),
    );
}

/// A repository path as diagnostics show it: relative to where the hook runs (the repository's
/// root, when git runs it), so that positions and staged snippets match.
fn shown(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&cwd).map(Path::to_path_buf).unwrap_or_else(|_| path.to_path_buf())
}

/// The staged kbuild files of the judged directories, and which directories have one.
struct StagedFiles {
    staged: crate::generate::Staged,
    present: BTreeSet<String>,
}

/// The staged kbuild files of `dirs` (both names of every directory asked in one batch;
/// Kbuild reads `Kbuild` when there is one), for planning the index from their bytes with
/// nothing laid out on disk; a directory the commit deletes is judged on what HEAD had there.
fn staged_files(
    top: &Top,
    policy: &Policy,
    dirs: &BTreeSet<String>,
    deleted: &BTreeSet<String>,
    blobs: &mut Blobs,
    diags: &mut Diagnostics,
    sources: &mut Vec<(PathBuf, String)>,
) -> Result<StagedFiles, String> {
    let join = |d: &str, n: &str| if d.is_empty() { n.to_string() } else { format!("{d}/{n}") };
    let by_dir = policy.units_by_dir();
    let mut staged = crate::generate::Staged::default();
    let mut present = BTreeSet::new();
    let central = policy.layout == crate::policy::Layout::Central;
    let mut rels: Vec<String> = dirs.iter().flat_map(|d| [join(d, "Kbuild"), join(d, "Makefile")]).collect();
    if central {
        rels.extend(CENTRAL_INPUTS.map(str::to_string));
    }
    let repo = top.dir.as_path();
    let specs: Vec<String> = rels.iter().map(|rel| format!(":0:{}{rel}", top.prefix)).collect();
    let mut found = rels.into_iter().zip(blobs.get_many(&specs).map_err(|e| e.to_string())?);
    let mut fetch = |spec: String| blobs.get(&spec).map_err(|e| e.to_string());
    for d in dirs {
        let (kbuild, makefile) = (found.next(), found.next());
        if let Some((rel, bytes)) = [kbuild, makefile].into_iter().flatten().find(|(_, b)| b.is_some()) {
            staged_into(&mut staged, repo, rel, bytes, sources);
            present.insert(d.clone());
            continue;
        }
        // Deleted in this commit: judged on what HEAD had there, not planned.
        for name in ["Kbuild", "Makefile"] {
            let rel = join(d, name);
            if let Some(bytes) = fetch(format!("HEAD:{}{rel}", top.prefix))?.filter(|_| deleted.contains(&rel)) {
                let head = String::from_utf8_lossy(&bytes);
                let units = by_dir.get(d.as_str()).map_or(0, Vec::len);
                deleted_kbuild_file(&repo.join(&rel), &rel, &head, units, diags);
                break;
            }
        }
    }
    if central {
        // Planned as the tree is: with the staged central file and the Makefile.build reading it.
        for (rel, bytes) in found.by_ref() {
            staged_into(&mut staged, repo, rel, bytes, sources);
        }
    }
    Ok(StagedFiles { staged, present })
}

/// The staged text of `rel` (relative to the repository), if the index has it: taken into
/// `staged` and kept as a source for diagnostics.
fn staged_into(
    staged: &mut crate::generate::Staged,
    repo: &Path,
    rel: String,
    blob: Option<Blob>,
    sources: &mut Vec<(PathBuf, String)>,
) {
    match blob {
        None => {}
        Some(Blob::Irregular(what)) => {
            staged.irregular.insert(rel, what);
        }
        Some(Blob::File(bytes)) => {
            sources.push((repo.join(&rel), String::from_utf8_lossy(&bytes).into_owned()));
            staged.files.insert(rel, bytes);
        }
    }
}

/// The hook script `install-hook` writes; the marker line identifies it as ours.
pub const HOOK_MARKER: &str = "# installed by `sanpolicy install-hook`";

/// The hook script. `program` is the sanpolicy binary that installed it, by absolute path: git
/// GUIs and `env -i` run hooks without the user's PATH. Should it be gone, the hook falls back
/// to `sanpolicy` on PATH.
/// `tree` is the kernel tree's path relative to the repository's top (git runs hooks there),
/// when it is not the top itself.
pub fn hook_script(policy: Option<&Path>, program: Option<&Path>, tree: Option<&Path>) -> String {
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let mut policy = policy.map(|p| format!(" --policy {}", quote(p))).unwrap_or_default();
    if let Some(tree) = tree.filter(|t| !t.as_os_str().is_empty()) {
        policy = format!(" --tree {}{policy}", quote(tree));
    }
    let program = program.map(quote).unwrap_or_else(|| "sanpolicy".into());
    format!(
        "#!/bin/sh\n{HOOK_MARKER}: keeps the tree's directives in sync with the sanitizer policy.\n\
         # Skip once with `git commit --no-verify`; CI runs `sanpolicy gen-makefiles --check`, which fails on the same drift.\n\
         sanpolicy={program}\n\
         [ -x \"$sanpolicy\" ] || sanpolicy=sanpolicy\n\
         exec \"$sanpolicy\" pre-commit{policy}\n"
    )
}

/// `tree`'s path relative to the top of the repository that holds it (empty at the top).
pub fn tree_in_repo(tree: &Path) -> Result<PathBuf, String> {
    let repo = repo_root(tree)?;
    tree_prefix(tree, &repo).map(|p| PathBuf::from(p.trim_end_matches('/')))
}

/// Whether git knows the policy at `policy_path` in the repository holding `tree`: committed
/// (`HEAD`) or staged. A branch without one (an upstream branch) has nothing to keep in sync.
pub fn policy_in_git(tree: &Path, policy_path: &Path) -> Result<bool, String> {
    let repo = repo_root(tree)?;
    let Some(rel) = in_repo(policy_path, &repo) else { return Ok(false) };
    let known = |spec: String| git(&repo, &["cat-file", "-e", &spec]).is_ok();
    Ok(known(format!(":0:{rel}")) || known(format!("HEAD:{rel}")))
}

/// Where git looks for hooks in the repository containing `tree` (honours `core.hooksPath`).
pub fn hooks_dir(tree: &Path) -> Result<PathBuf, String> {
    let out = git(tree, &["rev-parse", "--git-path", "hooks"])?;
    let p = PathBuf::from(String::from_utf8_lossy(&out).trim());
    Ok(if p.is_absolute() { p } else { tree.join(p) })
}

/// Stage `paths` (files a fix wrote, or deleted) in the repository that holds them, exactly
/// those: `sync --stage` and `gen-makefiles --stage`, so the hook that printed the fix sees what
/// it wrote. Ignored paths too (Debian's tarballs ignore `/*`): the command wrote them for the
/// commit.
pub fn stage(paths: &[&Path]) -> Result<(), String> {
    let Some(first) = paths.first() else { return Ok(()) };
    let dir = first.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let repo = repo_root(dir)?;
    let mut args = vec!["add".to_string(), "-f".into(), "-A".into(), "--".into()];
    for p in paths {
        let abs = super::resolved(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let rel =
            abs.strip_prefix(&repo).map_err(|_| format!("`{}` is not inside `{}`", p.display(), repo.display()))?;
        args.push(rel.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    git(&repo, &args).map(|_| ())
}

/// Which of `paths` (relative to the repository's top) differ between the working tree and
/// the index: a fix run in the working tree would not judge what the hook judged.
pub fn unstaged(repo: &Path, paths: &[String]) -> Result<Vec<String>, String> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec!["diff", "--name-only", "-z", "--"];
    args.extend(paths.iter().map(String::as_str));
    let out = git(repo, &args)?;
    let mut found: Vec<String> =
        out.split(|b| *b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect();
    for p in stashed_by_pre_commit(paths) {
        if !found.contains(&p) {
            found.push(p);
        }
    }
    Ok(found)
}

/// The largest stash patch of the pre-commit framework the hook reads.
const STASH_LIMIT: u64 = 64 << 20;

/// Which of `paths` the pre-commit framework set aside before running the hook: it stashes
/// unstaged changes as a patch in its store (`patch<time>-<its pid>`) and restores them after,
/// so the hook sees a working tree equal to the index, while the fix the user runs afterwards
/// sees those changes. Only the patch's `diff --git` header lines are read, never printed.
fn stashed_by_pre_commit(paths: &[String]) -> Vec<String> {
    if std::env::var_os("PRE_COMMIT").is_none_or(|v| v != "1") {
        return Vec::new();
    }
    let store =
        match (std::env::var_os("PRE_COMMIT_HOME"), std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")) {
            (Some(home), _, _) => PathBuf::from(home),
            (None, Some(cache), _) => PathBuf::from(cache).join("pre-commit"),
            (None, None, Some(home)) => PathBuf::from(home).join(".cache/pre-commit"),
            _ => return Vec::new(),
        };
    let suffix = format!("-{}", std::os::unix::process::parent_id());
    let Ok(entries) = std::fs::read_dir(&store) else { return Vec::new() };
    let mut headers = BTreeSet::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("patch") && name.ends_with(&suffix) && entry.file_type().is_ok_and(|t| t.is_file())) {
            continue;
        }
        // Bounded: a patch too large to read is not looked into (the fixes are then printed
        // as without the framework).
        let Ok(bytes) = crate::input::read(&entry.path(), STASH_LIMIT) else { continue };
        for line in bytes.split(|b| *b == b'\n').filter(|l| l.starts_with(b"diff --git ")) {
            headers.insert(String::from_utf8_lossy(line).into_owned());
        }
    }
    paths.iter().filter(|p| headers.contains(&format!("diff --git a/{p} b/{p}"))).cloned().collect()
}
