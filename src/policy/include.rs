//! Which file an `include = ["…"]` entry names, and whether it may be read.
//!
//! An include is a relative path that stays inside the directory of the policy that includes it,
//! after `..` and (on the file system) symlinks are resolved; it names a regular file (a FIFO
//! would block the read, a device never end it); and each file is parsed once, keyed by its
//! canonical path, so files that include each other (directly, or through symlinked directories)
//! are a cycle reported once instead of an exponential number of parses.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use crate::diagnostic::Code;

/// Includes deeper than this are refused (each file is parsed once, so this only bounds the
/// stack of files being read).
const MAX_DEPTH: usize = 32;

/// The state of one policy load: which files are being read (the include stack) and which
/// have been parsed.
#[derive(Debug)]
pub(super) struct Includes {
    /// Resolve symlinks and check file types on the file system; otherwise the files come from
    /// a reader (a git revision, which has no symlinks to follow) and paths are checked lexically.
    fs: bool,
    stack: Vec<PathBuf>,
    parsed: HashSet<PathBuf>,
}

/// What an include entry resolves to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Resolved {
    /// Read and parse `path`; `key` identifies the file (its canonical path).
    Load {
        path: PathBuf,
        key: PathBuf,
    },
    /// Parsed already through another include (a diamond, not a cycle): nothing to do.
    Parsed,
    Refused {
        code: Code,
        message: String,
        hint: String,
    },
}

impl Includes {
    /// The load of the policy at `root`.
    pub(super) fn new(root: &Path, fs: bool) -> Includes {
        let key = if fs { canonical(root) } else { lexical(root) };
        Includes { fs, stack: vec![key.clone()], parsed: HashSet::from([key]) }
    }

    /// `name` as included by the file `including`.
    pub(super) fn resolve(&self, including: &Path, name: &str) -> Resolved {
        let dir = including.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let dir_text = dir.display();
        let refuse = |code, message: String, hint: String| Resolved::Refused { code, message, hint };
        let relative_hint = format!(
            "name a file relative to `{dir_text}`, the directory of the including policy, e.g. `include = [\"recursion-prone.toml\"]`"
        );
        if name.is_empty() {
            return refuse(Code::BadInclude, "empty include".into(), relative_hint);
        }
        if name.chars().any(char::is_control) {
            return refuse(Code::BadInclude, format!("include `{name}` holds a control character"), relative_hint);
        }
        let name_path = Path::new(name);
        if name_path.is_absolute() {
            return refuse(Code::BadInclude, format!("include `{name}` is an absolute path"), relative_hint);
        }
        if escapes(name_path) {
            let message = format!("include `{name}` leads outside `{dir_text}`, the directory of the including policy");
            return refuse(Code::BadInclude, message, relative_hint);
        }
        let path = dir.join(name_path);
        let key = if self.fs {
            match checked_on_disk(dir, &path, name) {
                Ok(key) => key,
                Err((message, hint)) => return refuse(Code::BadInclude, message, hint),
            }
        } else {
            lexical(&path)
        };
        if let Some(at) = self.stack.iter().position(|k| *k == key) {
            let chain: Vec<String> = self.stack[at..].iter().map(|k| file_name(k)).collect();
            return refuse(
                Code::IncludeCycle,
                format!("include `{name}` is a cycle: {} → {}", chain.join(" → "), file_name(&key)),
                "remove this include: the file is already being read".into(),
            );
        }
        if self.parsed.contains(&key) {
            return Resolved::Parsed;
        }
        if self.stack.len() > MAX_DEPTH {
            return refuse(
                Code::BadInclude,
                format!("include `{name}` is nested more than {MAX_DEPTH} files deep"),
                "include the files from fewer levels".into(),
            );
        }
        Resolved::Load { path, key }
    }

    /// Reading the file `key` (from [`Resolved::Load`]) starts.
    pub(super) fn enter(&mut self, key: PathBuf) {
        self.parsed.insert(key.clone());
        self.stack.push(key);
    }

    /// Reading the innermost file ended.
    pub(super) fn leave(&mut self) {
        self.stack.pop();
    }
}

/// Whether a relative path climbs above its start (`..` beyond what it descended).
fn escapes(path: &Path) -> bool {
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::ParentDir if depth == 0 => return true,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// `path` with `.` and `..` resolved without the file system, made absolute.
fn lexical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for c in absolute.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| lexical(path))
}

fn file_name(key: &Path) -> String {
    key.file_name().map_or_else(|| key.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// The canonical path of `path` (include `name` of a policy in `dir`) when it is a regular file
/// inside `dir` once symlinks are resolved; else the message and hint of the problem.
fn checked_on_disk(dir: &Path, path: &Path, name: &str) -> Result<PathBuf, (String, String)> {
    let dir_text = dir.display();
    let meta = std::fs::metadata(path).map_err(|e| {
        let message = if e.kind() == std::io::ErrorKind::NotFound {
            format!("included file `{name}` does not exist in `{dir_text}`")
        } else {
            format!("cannot read included file `{name}`: {e}")
        };
        (message, format!("create `{}` or remove it from `include`", path.display()))
    })?;
    let canon = path.canonicalize().map_err(|e| (format!("cannot resolve include `{name}`: {e}"), String::new()))?;
    let canon_dir = dir.canonicalize().unwrap_or_else(|_| lexical(dir));
    if !canon.starts_with(&canon_dir) {
        return Err((
            format!(
                "include `{name}` is a symlink leading outside `{dir_text}`, the directory of the including policy"
            ),
            format!("copy the file into `{dir_text}` instead of linking to it"),
        ));
    }
    if !meta.is_file() {
        let kind = file_kind(&meta);
        return Err((
            format!("include `{name}` is {kind}, not a regular file"),
            "include a policy file (TOML)".to_string(),
        ));
    }
    Ok(canon)
}

fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_lexical_and_exact() {
        for (path, out) in
            [("a.toml", false), ("a/../b.toml", false), ("../b.toml", true), ("a/../../b", true), ("./a", false)]
        {
            assert_eq!(escapes(Path::new(path)), out, "{path}");
        }
    }
}
