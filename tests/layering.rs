//! One direction of dependencies (issue 11, point 6): a module of the library refers only to
//! modules of its own stage or of stages below it. The stage order is data ([`STAGES`]); every
//! `crate::X` (and `super::…` climbing to the crate root) in the token stream of every file
//! under `src/` is a reference, wherever it appears: `use` trees, paths in code, paths in macro
//! arguments. Comments are not tokens; doc comments are string literals and do not count.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use proc_macro2::{Delimiter, TokenStream, TokenTree};

/// Bottom first. A module may use its own stage and any stage before it; modules of one stage
/// share a row only when they do not use each other (the test enforces that too: a row's
/// members are peers, and a reference between peers is a violation).
const STAGES: &[&[&str]] = &[
    &["input"],
    &["mechanism"],
    &["diagnostic"],
    &["output"],
    &["makefile"],
    &["kbuild"],
    &["policy"],
    &["emit"],
    &["generate"],
    &["cargo", "check", "import", "derive"],
    &["review", "runtime"],
    &["cli"],
];

/// The stage of a top-level module, and whether it has one.
fn stage_of(module: &str) -> Option<usize> {
    STAGES.iter().position(|row| row.contains(&module))
}

/// One reference from a file to a top-level module.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Reference {
    file: String,
    line: usize,
    target: String,
}

/// The module path of a file below `src/`: `src/kbuild/rules.rs` is `[kbuild, rules]`,
/// `src/policy/mod.rs` is `[policy]`, `src/lib.rs` is `[]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.strip_suffix(".rs").expect("a .rs file");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The first identifiers after `::` at `tokens[i..]`: one for `X`, each item's first for
/// `{X, Y::z}`.
fn first_segments(tokens: &[TokenTree], i: usize) -> Vec<(String, usize)> {
    match tokens.get(i) {
        Some(TokenTree::Ident(id)) => vec![(id.to_string(), id.span().start().line)],
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
            let inner: Vec<TokenTree> = g.stream().into_iter().collect();
            let mut out = Vec::new();
            let mut at_item_start = true;
            for t in &inner {
                match t {
                    TokenTree::Punct(p) if p.as_char() == ',' => at_item_start = true,
                    TokenTree::Ident(id) if at_item_start => {
                        out.push((id.to_string(), id.span().start().line));
                        at_item_start = false;
                    }
                    _ => at_item_start = false,
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

/// Whether `tokens[i..]` is `::` (two joint colons).
fn is_path_sep(tokens: &[TokenTree], i: usize) -> bool {
    matches!((tokens.get(i), tokens.get(i + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == ':' && b.as_char() == ':')
}

/// Every top-level module a token stream names through `crate::` or enough `super::` to
/// reach the crate root from `depth` (the file's module depth).
fn references(stream: TokenStream, depth: usize, out: &mut Vec<(String, usize)>) {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        if let TokenTree::Group(g) = &tokens[i] {
            references(g.stream(), depth, out);
        }
        let preceded_by_sep = i >= 2 && is_path_sep(&tokens, i - 2);
        if let TokenTree::Ident(id) = &tokens[i] {
            if !preceded_by_sep && id == "crate" && is_path_sep(&tokens, i + 1) {
                out.extend(first_segments(&tokens, i + 3));
            } else if !preceded_by_sep && id == "super" {
                // Count the run of `super::`; a path that climbs out of every module names a
                // top-level module next.
                let mut j = i;
                let mut ups = 0;
                while matches!(&tokens.get(j), Some(TokenTree::Ident(s)) if s == "super") && is_path_sep(&tokens, j + 1)
                {
                    ups += 1;
                    j += 3;
                }
                if ups >= depth && depth > 0 {
                    out.extend(first_segments(&tokens, j));
                }
                // `pub(super)` is no path: step past it.
                i = j.max(i + 1);
                continue;
            }
        }
        i += 1;
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every reference from a file under `root` to a top-level module other than its own.
fn all_references(root: &Path) -> Vec<Reference> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut refs = Vec::new();
    for path in files {
        let rel = path.strip_prefix(root).unwrap();
        let module = module_path(rel);
        let text = fs::read_to_string(&path).unwrap();
        // syn checks the file is Rust; the token stream is what references are read from.
        syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let stream = TokenStream::from_str(&text).unwrap();
        let mut found = Vec::new();
        references(stream, module.len(), &mut found);
        for (target, line) in found {
            if module.first() != Some(&target) {
                refs.push(Reference { file: format!("src/{}", rel.display()), line, target });
            }
        }
    }
    proc_macro2::extra::invalidate_current_thread_spans();
    refs
}

/// The references that go up (or sideways between peers), as `file:line: from -> to` lines.
fn violations(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for r in all_references(root) {
        let from = r.file.trim_start_matches("src/").split(['/', '.']).next().unwrap().to_string();
        let (Some(a), Some(b)) = (stage_of(&from), stage_of(&r.target)) else { continue };
        if b >= a && from != r.target {
            out.push(format!("{}:{}: {from} (stage {a}) -> {} (stage {b})", r.file, r.line, r.target));
        }
    }
    out
}

#[test]
fn dependencies_point_down_the_stages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&root);
    assert!(found.is_empty(), "{} references go up the stages {STAGES:?}:\n{}", found.len(), found.join("\n"));
}

/// Every top-level module of the library has a stage, so a new module cannot escape the test.
#[test]
fn every_module_has_a_stage() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(root.join("lib.rs")).unwrap();
    let file = syn::parse_file(&lib).unwrap();
    let modules: BTreeSet<String> = file
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect();
    assert!(modules.len() > 5, "lib.rs declares too few modules to be the crate root: {modules:?}");
    let missing: Vec<&String> = modules.iter().filter(|m| stage_of(m).is_none()).collect();
    assert!(missing.is_empty(), "modules without a stage in STAGES: {missing:?}");
}

/// The stage list in `ARCHITECTURE.md`, between its markers: one numbered line per row of
/// [`STAGES`], bottom first, each naming the row's modules in backticks.
fn architecture_stages(text: &str) -> Vec<Vec<String>> {
    const BEGIN: &str = "<!-- stages:";
    const END: &str = "<!-- stages end -->";
    let start = text.find(BEGIN).expect("ARCHITECTURE.md lacks the `<!-- stages:` marker");
    let end = start + text[start..].find(END).expect("ARCHITECTURE.md lacks the `<!-- stages end -->` marker");
    text[start..end]
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('`').skip(1).step_by(2).map(str::to_string).collect())
        .collect()
}

/// ARCHITECTURE.md says the directions the test enforces, and has a section for every module.
#[test]
fn architecture_md_lists_the_stages_of_the_layering_test() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = fs::read_to_string(repo.join("ARCHITECTURE.md")).unwrap();
    let listed = architecture_stages(&text);
    let table: Vec<Vec<String>> = STAGES.iter().map(|row| row.iter().map(|m| m.to_string()).collect()).collect();
    assert_eq!(listed, table, "ARCHITECTURE.md's stage list differs from tests/layering.rs's STAGES");
    for module in STAGES.iter().flat_map(|row| row.iter()) {
        let names = [format!("`src/{module}.rs`"), format!("`src/{module}/`")];
        let heading = |l: &&str| l.starts_with("### ") && names.iter().any(|n| l.contains(n.as_str()));
        assert!(text.lines().any(|l| heading(&l)), "ARCHITECTURE.md has no `### ` section naming {names:?}");
    }
}

#[test]
fn architecture_stage_list_is_read_between_its_markers() {
    let text = "x\n<!-- stages: y -->\n1. `a`\n\n2. `b`, `c`\n<!-- stages end -->\n3. `d`\n";
    assert_eq!(architecture_stages(text), vec![vec!["a".to_string()], vec!["b".to_string(), "c".to_string()]]);
}

/// The scanner itself: what it must see and what it must not.
#[test]
fn scanner_reads_use_trees_paths_and_super() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::create_dir_all(src.join("kbuild")).unwrap();
    fs::write(src.join("lib.rs"), "pub mod kbuild;\npub mod emit;\n").unwrap();
    fs::write(
        src.join("kbuild/rules.rs"),
        "//! crate::emit in a comment does not count\n\
         use crate::{makefile::X, emit::{self, Y}};\n\
         fn f() { let _ = format!(\"{}\", crate::generate::g()); }\n\
         fn h() { super::super::policy::p(); super::resolve::r(); }\n\
         /// doc: crate::cli\nfn k() {}\n",
    )
    .unwrap();
    let refs: Vec<(String, usize)> = all_references(src).into_iter().map(|r| (r.target, r.line)).collect();
    assert_eq!(refs, vec![("makefile".into(), 2), ("emit".into(), 2), ("generate".into(), 3), ("policy".into(), 4)]);
    let v = violations(src);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(v[0].starts_with("src/kbuild/rules.rs:2: kbuild (stage 5) -> emit (stage 7)"), "{v:?}");
}

/// Files under `src/` that may read without `src/input.rs`, each with the reason. Anything
/// else that reads a file (issue 18) goes through `input.rs`: only a regular file, opened
/// without blocking, never more than a bound.
const READS_OUTSIDE_INPUT: &[(&str, &str)] = &[
    (
        "src/review/git.rs",
        "reads the stdout pipe of `git cat-file --batch`, a child it started (never a path), \
         each blob through `take` to its bound",
    ),
    (
        "src/runtime/qemu.rs",
        "reads the serial console and stderr pipes of the QEMU child it started (never a path), \
         line by line while the guest runs, ended by the boot's time limit",
    ),
    (
        "src/output.rs",
        "opens its own temporary files with `OpenOptions` to write them (`create_new`), \
         never to read a file",
    ),
];

/// The calls that read a file's contents: `fs::read`, `fs::read_to_string`, `File::open`,
/// `OpenOptions` (opening to read), `BufReader`, and the reader methods `read_to_string`
/// (other than `input::read_to_string`) and `read_to_end`.
fn direct_reads(tokens: &[TokenTree], out: &mut Vec<(String, usize)>) {
    let mut i = 0;
    while i < tokens.len() {
        // `#[cfg(test)]` items (the unit tests) may read their scratch files directly.
        if is_cfg_test(tokens, i) {
            i = end_of_item(tokens, i + 2);
            continue;
        }
        if let TokenTree::Group(g) = &tokens[i] {
            let inner: Vec<TokenTree> = g.stream().into_iter().collect();
            direct_reads(&inner, out);
        }
        if let TokenTree::Ident(id) = &tokens[i] {
            let name = id.to_string();
            let after = |prefix: &str| i >= 3 && is_path_sep(tokens, i - 2) && tokens[i - 3].to_string() == prefix;
            let found = match name.as_str() {
                "read" | "read_to_string" if after("fs") => Some(format!("fs::{name}")),
                "open" if after("File") => Some("File::open".into()),
                "OpenOptions" | "BufReader" | "read_to_end" => Some(name.clone()),
                "read_to_string" if !after("input") => Some(name.clone()),
                _ => None,
            };
            if let Some(call) = found {
                out.push((call, id.span().start().line));
            }
        }
        i += 1;
    }
}

/// Whether `tokens[i..]` is `#[cfg(test)]`.
fn is_cfg_test(tokens: &[TokenTree], i: usize) -> bool {
    matches!((tokens.get(i), tokens.get(i + 1)),
        (Some(TokenTree::Punct(p)), Some(TokenTree::Group(g)))
            if p.as_char() == '#' && g.delimiter() == Delimiter::Bracket
                && g.stream().to_string().replace(' ', "") == "cfg(test)")
}

/// The index after the item starting at `tokens[i]`: past its body (`{…}`) or its `;`.
fn end_of_item(tokens: &[TokenTree], mut i: usize) -> usize {
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => return i + 1,
            TokenTree::Punct(p) if p.as_char() == ';' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// Every direct read in the files under `root` but `input.rs` and the allowed ones, as
/// `file:line: call` lines.
fn reads_outside_input(root: &Path, allowed: &[(&str, &str)]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let rel = format!("src/{}", path.strip_prefix(root).unwrap().display());
        if rel == "src/input.rs" || allowed.iter().any(|(f, _)| *f == rel) {
            continue;
        }
        let tokens: Vec<TokenTree> =
            TokenStream::from_str(&fs::read_to_string(&path).unwrap()).unwrap().into_iter().collect();
        let mut found = Vec::new();
        direct_reads(&tokens, &mut found);
        out.extend(found.into_iter().map(|(call, line)| format!("{rel}:{line}: {call}")));
    }
    proc_macro2::extra::invalidate_current_thread_spans();
    out
}

#[test]
fn every_file_is_read_through_input() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (file, reason) in READS_OUTSIDE_INPUT {
        assert!(root.parent().unwrap().join(file).is_file(), "allowed `{file}` does not exist: remove its entry");
        assert!(reason.split_whitespace().count() >= 5, "`{file}` is allowed without a reason: say why");
    }
    let found = reads_outside_input(&root, READS_OUTSIDE_INPUT);
    assert!(
        found.is_empty(),
        "{} reads bypass src/input.rs (read through `crate::input::read*`, or add the file to \
         READS_OUTSIDE_INPUT with the reason):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The read scanner itself: what it must see and what it must not.
#[test]
fn read_scanner_sees_reads_and_skips_unit_tests() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    fs::write(src.join("input.rs"), "fn r() { std::fs::read(p); }\n").unwrap();
    fs::write(
        src.join("a.rs"),
        "use std::io::BufReader;\n\
         fn f() { let t = std::fs::read_to_string(p); }\n\
         fn g() { let f = File::open(p); f.read_to_end(&mut v); crate::input::read_to_string(p, 1); }\n\
         /// fs::read(p) in a doc\nfn h() { s.read_to_string(&mut t); fs::metadata(p); }\n\
         #[cfg(test)]\nmod tests { fn t() { std::fs::read(p); } }\n",
    )
    .unwrap();
    fs::write(src.join("b.rs"), "fn f() { std::fs::read(p); }\n").unwrap();
    let found = reads_outside_input(src, &[("src/b.rs", "a reason")]);
    assert_eq!(
        found,
        [
            "src/a.rs:1: BufReader",
            "src/a.rs:2: fs::read_to_string",
            "src/a.rs:3: File::open",
            "src/a.rs:3: read_to_end",
            "src/a.rs:5: read_to_string",
        ]
    );
}
