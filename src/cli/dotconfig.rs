//! `--config FILE`: a kernel `.config` read for `explain` and `check`.

use std::path::Path;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::kbuild::dotconfig::DotConfig;

/// Read and parse `path`; a bad file is one error at the offending line.
pub fn read(path: &Path) -> Result<DotConfig, Diagnostics> {
    let bytes = crate::input::read(path, crate::input::POLICY_LIMIT).map_err(|e| {
        let d = Diagnostic::error(Code::Io, format!("cannot read `{}`: {e}", path.display()))
            .at(Location::file(path))
            .hint("pass the build's `.config`, a regular file (e.g. `--config build/.config`)");
        Diagnostics(vec![d])
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let d = Diagnostic::error(Code::Io, format!("`{}` is not UTF-8", path.display()))
            .at(Location::invalid_utf8(path, e.as_bytes(), e.utf8_error()))
            .hint("pass a kernel `.config` as `make` writes it");
        Diagnostics(vec![d])
    })?;
    DotConfig::parse(&text)
        .map_err(|e| {
            Diagnostic::error(Code::BadConfig, e.message)
                .at(Location::at_line(path, &text, e.line))
                .hint("pass a kernel `.config` as `make` writes it (`CONFIG_X=y`, `# CONFIG_X is not set`)")
        })
        .map_err(|d| Diagnostics(vec![d]))
}
