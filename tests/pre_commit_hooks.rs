//! The shipped `.pre-commit-hooks.yaml`: its `files:` pattern decides whether the pre-commit
//! framework runs the hook at all, so a path it misses is committed unchecked. The pattern is
//! compiled by Python's `re` and applied with `re.search`, as pre-commit does (its
//! `filter_by_include_exclude`), to every kind of file the hook judges.

use std::path::Path;
use std::process::Command;

use sanpolicy::emit::central::CENTRAL_FILE;
use sanpolicy::generate::snapshot::snapshot_path;

/// The `files:` value of the hook, unquoted as YAML reads a single-quoted scalar.
fn files_pattern() -> String {
    let yaml = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".pre-commit-hooks.yaml")).unwrap();
    let line = yaml.lines().find_map(|l| l.trim_start().strip_prefix("files:")).expect("a `files:` key");
    let quoted = line.trim();
    let inner = quoted.strip_prefix('\'').and_then(|q| q.strip_suffix('\'')).expect("`files:` single-quoted");
    inner.replace("''", "'")
}

/// Which of `paths` `re.search(pattern, path)` matches, by Python itself.
fn python_matches(pattern: &str, paths: &[String]) -> Vec<bool> {
    let script = "import re, sys\np = re.compile(sys.argv[1])\nfor s in sys.argv[2:]:\n    print(bool(p.search(s)))\n";
    let out = Command::new("python3").arg("-c").arg(script).arg(pattern).args(paths).output().unwrap_or_else(|e| {
        panic!("python3 is needed to read the pattern as pre-commit does (`apt-get install python3`): {e}")
    });
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l == "True").collect()
}

#[test]
fn files_pattern_matches_every_file_the_hook_judges() {
    let snapshot = |policy: &str| snapshot_path(Path::new(policy)).to_str().unwrap().to_string();
    let wanted = [
        CENTRAL_FILE.to_string(),
        "scripts/Makefile.build".into(),
        "scripts/Makefile.lib".into(),
        // A kernel tree in a subdirectory of the repository.
        format!("linux/{CENTRAL_FILE}"),
        "linux/scripts/Makefile.lib".into(),
        snapshot("sanitizer-policy.toml"),
        snapshot("policy/linux.toml"),
        "sanitizer-policy.toml".into(),
        "policy/linux.toml".into(),
        "kernel/locking/Makefile".into(),
        "Makefile".into(),
        "drivers/gpu/drm/Kbuild".into(),
    ];
    let unwanted: Vec<String> =
        ["kernel/locking/lockdep.c", "scripts/Makefile.kasan", "Makefile.lib", "xMakefile", "README"]
            .map(String::from)
            .to_vec();
    let pattern = files_pattern();
    let all: Vec<String> = wanted.iter().chain(&unwanted).cloned().collect();
    let found = python_matches(&pattern, &all);
    let wrong: Vec<String> = all
        .iter()
        .zip(&found)
        .enumerate()
        .filter(|(i, (_, matched))| **matched != (*i < wanted.len()))
        .map(|(i, (p, _))| format!("{p}: {}", if i < wanted.len() { "not matched" } else { "matched" }))
        .collect();
    assert!(wrong.is_empty(), "`files: '{pattern}'` in .pre-commit-hooks.yaml:\n{}", wrong.join("\n"));
}
