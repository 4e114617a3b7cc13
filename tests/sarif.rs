//! `check --format sarif` (issue 26), judged by Microsoft's SARIF multitool (`npm install
//! @microsoft/sarif-multitool`, which `.ci/run` installs): the log validates against SARIF
//! 2.1.0's schema and rules, and says what the text says: one result per finding, its rule id
//! the code, at the finding's file, line and column. Real-kernel tier: the multitool is not on a
//! fresh machine; this test fails loudly without it.

mod fixture_tree;

use std::path::{Path, PathBuf};
use std::process::Command;

use fixture_tree::{errors, ok, rules_tree, run_in};

/// The multitool's binary: `$SANPOLICY_SARIF_MULTITOOL`, else where `.ci/run` installs it.
fn multitool() -> PathBuf {
    let path = std::env::var_os("SANPOLICY_SARIF_MULTITOOL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/sarif/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool"));
    assert!(
        path.is_file(),
        "{} is missing: `npm install --prefix /opt/sarif @microsoft/sarif-multitool@5.7.0` (.ci/run does), or set SANPOLICY_SARIF_MULTITOOL",
        path.display()
    );
    path
}

/// `validate`'s findings: the multitool prints `… : error JSONnnnn: …` or `SARIFnnnn` lines for
/// each problem (and exits 0 either way, so its output is what is read).
fn validate(log: &Path) -> Vec<String> {
    let out = Command::new(multitool()).arg("validate").arg(log).output().expect("running the SARIF multitool");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    text.lines().filter(|l| l.contains(": error ") || l.contains(": warning ")).map(str::to_string).collect()
}

#[test]
fn check_writes_sarif_that_the_multitool_validates_and_that_says_what_the_text_says() {
    let t = rules_tree("sanpolicy-sarif-", "obj-y := a.o b.o\n\n# A reason.\nKASAN_SANITIZE_a.o := n\n");
    let p = t.path();
    ok(p, &["import", "--adopt"]);
    // Two findings: a dead exemption and drift.
    let policy = fixture_tree::read(p, "sanitizer-policy.toml");
    std::fs::write(
        p.join("sanitizer-policy.toml"),
        format!("{policy}\n[[unit]]\npath = \"lib/gone.o\"\nskip = [\"kcov\"]\nwhy = \"Dead.\"\n"),
    )
    .unwrap();
    let text = run_in(p, &["check"]);
    let sarif = run_in(p, &["check", "--format", "sarif"]);
    assert_eq!(sarif.code, text.code, "the exit code is the verdict's: {}", sarif.both());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("check.sarif");
    std::fs::write(&log, &sarif.stdout).unwrap();
    let problems = validate(&log);
    assert!(problems.is_empty(), "the multitool finds:\n{}\n{}", problems.join("\n"), sarif.stdout);

    let v: serde_json::Value = serde_json::from_str(&sarif.stdout).unwrap();
    assert_eq!(v["version"], "2.1.0");
    let results: Vec<&serde_json::Value> =
        v["runs"][0]["results"].as_array().unwrap().iter().filter(|r| r["level"] == "error").collect();
    let found = errors(&text.stderr);
    assert_eq!(results.len(), found.len(), "one result per finding: {}\n{}", text.stderr, sarif.stdout);
    for ((code, at), r) in found.iter().zip(&results) {
        assert_eq!(r["ruleId"].as_str(), Some(code.as_str()), "{r}");
        if let Some((file, rest)) = at.split_once(':') {
            let region = &r["locations"][0]["physicalLocation"];
            let uri = region["artifactLocation"]["uri"].as_str().unwrap();
            assert!(file.ends_with(uri.trim_start_matches("./")), "{file} vs {uri}");
            let line: u64 = rest.split(':').next().unwrap().parse().unwrap();
            assert_eq!(region["region"]["startLine"].as_u64(), Some(line), "{r}");
        }
    }
    let rules: Vec<&str> =
        v["runs"][0]["tool"]["driver"]["rules"].as_array().unwrap().iter().filter_map(|r| r["id"].as_str()).collect();
    assert!(rules.contains(&"missing-source") && rules.contains(&"drift"), "{rules:?}");
}
