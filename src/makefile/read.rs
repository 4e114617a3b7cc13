//! Finding and reading a directory's kbuild file: which name Kbuild reads, and its text as UTF-8
//! with LF endings, or a diagnostic saying why it cannot be used. Every stage that reads a
//! kbuild file from disk (generate, check, import, review, derive) reads it through here.

use std::path::{Path, PathBuf};

use crate::diagnostic::{Code, Diagnostic, Location};

/// `Kbuild` shadows `Makefile` in the same directory, as in `scripts/Kbuild.include`. Whatever
/// stands at the name counts (make's `$(wildcard)` sees a directory or a FIFO too): a FIFO named
/// `Makefile` is then refused by [`read_kbuild`] for what it is, not reported as missing.
pub fn kbuild_file(dir: &Path) -> Option<PathBuf> {
    ["Kbuild", "Makefile"].iter().map(|n| dir.join(n)).find(|p| std::fs::metadata(p).is_ok())
}

/// Read a kbuild file as UTF-8 with LF endings, or say why it cannot be used (not a regular
/// file, larger than [`crate::input::KBUILD_LIMIT`], unreadable).
pub fn read_kbuild(path: &Path) -> Result<String, Box<Diagnostic>> {
    let bytes = crate::input::read(path, crate::input::KBUILD_LIMIT).map_err(|e| unreadable(path, &e))?;
    decode_kbuild(path, bytes)
}

/// Why the kbuild file at `path` cannot be planned (named by the policy, so refused).
pub fn unreadable(path: &Path, e: &crate::input::ReadError) -> Box<Diagnostic> {
    let hint = match e {
        crate::input::ReadError::TooLarge { .. } => "no kbuild file is that large: replace it by the real Makefile, or drop the directory's units from the policy",
        crate::input::ReadError::NotRegular(_) => "Kbuild reads a regular file here: replace it by the directory's real Makefile",
        _ => "make the file readable, or drop the directory's units from the policy",
    };
    Box::new(
        Diagnostic::error(Code::Io, format!("cannot read `{}`: {e}", path.display()))
            .at(Location::file(path))
            .hint(hint),
    )
}

/// Kbuild file bytes as UTF-8 text with LF endings, or why they cannot be used.
pub fn decode_kbuild(path: &Path, bytes: Vec<u8>) -> Result<String, Box<Diagnostic>> {
    let text = String::from_utf8(bytes).map_err(|e| {
        Box::new(
            Diagnostic::error(
                Code::Io,
                format!("`{}` is not UTF-8 (invalid byte at offset {})", path.display(), e.utf8_error().valid_up_to()),
            )
            .at(Location::invalid_utf8(path, e.as_bytes(), e.utf8_error()))
            .hint("sanpolicy only edits UTF-8 kbuild files; fix the encoding first"),
        )
    })?;
    if let Some(i) = text.find('\r') {
        return Err(Box::new(
            Diagnostic::error(Code::Io, format!("`{}` has CRLF line endings", path.display()))
                .at(Location::from_span(path, &text, i..i + 1))
                .hint("Kbuild files use LF endings: convert with `dos2unix`"),
        ));
    }
    Ok(text)
}
