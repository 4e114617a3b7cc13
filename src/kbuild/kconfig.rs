//! The Kconfig symbols a tree defines, so that a condition naming a misspelt symbol
//! (`ifdef CONFIG_FUNCTION_TRACR`, never true) is caught instead of silently dropping an
//! exemption.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Every symbol declared by `config NAME` or `menuconfig NAME` in a `Kconfig*` file of `tree`,
/// as Kconfig spells it (without `CONFIG_`). Unreadable files are skipped: a missing symbol
/// then shows as unknown, never the reverse.
pub fn defined_symbols(tree: &Path) -> HashSet<String> {
    let files: Vec<PathBuf> = walkdir::WalkDir::new(tree)
        .into_iter()
        .filter_entry(|e| e.file_name() != ".git")
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.file_name().as_encoded_bytes().starts_with(b"Kconfig"))
        .map(walkdir::DirEntry::into_path)
        .collect();
    // About 1800 files in 6.12: reading them is most of the time, on two threads.
    let (first, second) = files.split_at(files.len() / 2);
    std::thread::scope(|s| {
        let other = s.spawn(|| symbols_of(second));
        let mut all = symbols_of(first);
        all.extend(other.join().unwrap_or_default());
        all
    })
}

fn symbols_of(files: &[PathBuf]) -> HashSet<String> {
    let mut out = HashSet::new();
    for path in files {
        let Ok(bytes) = crate::input::read_listed(path, crate::input::KBUILD_LIMIT) else { continue };
        // Only lines mentioning `config` can declare a symbol.
        for at in memchr::memmem::find_iter(&bytes, b"config") {
            let line_start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |i| i + 1);
            if let Some(name) = declared(&bytes[line_start..]) {
                out.insert(name.to_string());
            }
        }
    }
    out
}

/// The symbol a Kconfig line declares: `config NAME` or `menuconfig NAME`, indented or not.
fn declared(line: &[u8]) -> Option<&str> {
    let line = &line[line.iter().position(|b| !b" \t".contains(b))?..];
    let rest = line.strip_prefix(b"menuconfig").or_else(|| line.strip_prefix(b"config"))?;
    let blanks = rest.iter().take_while(|b| b" \t".contains(b)).count();
    let rest = &rest[blanks..];
    let len = rest.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count();
    let ends = rest.get(len).is_none_or(|b| b" \t\r\n#".contains(b));
    (blanks > 0 && len > 0 && ends).then(|| std::str::from_utf8(&rest[..len]).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_read_and_mentions_are_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("kernel/trace")).unwrap();
        std::fs::write(
            dir.path().join("Kconfig"),
            "config KASAN\n\tbool \"KASAN\"\n\tdepends on HAVE_ARCH_KASAN\nmenuconfig  FTRACE\n\
             # config COMMENTED_OUT is a mention\n\thelp\n\t  Select config OTHER to ...\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("kernel/trace/Kconfig.debug"), "\tconfig FUNCTION_TRACER # tracer\n").unwrap();
        std::fs::write(dir.path().join("kernel/trace/Makefile"), "config NOT_KCONFIG\n").unwrap();
        std::fs::write(dir.path().join("kernel/trace/Kconfig.x"), "configX NO\nconfig\nconfig BAD-NAME\n").unwrap();
        let mut found: Vec<String> = defined_symbols(dir.path()).into_iter().collect();
        found.sort();
        assert_eq!(found, ["FTRACE", "FUNCTION_TRACER", "KASAN"]);
    }
}
