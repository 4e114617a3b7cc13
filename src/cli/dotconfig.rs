//! `--config FILE`: a kernel `.config` read for `explain` and `check`.

use std::path::Path;

use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::kbuild::dotconfig::DotConfig;

/// Read and parse `path`; a bad file is one error at the offending line.
pub fn read(path: &Path) -> Result<DotConfig, Diagnostics> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| {
            Diagnostic::error(Code::Io, format!("cannot read `{}`: {e}", path.display()))
                .hint("pass the build's `.config` (e.g. `--config build/.config`)")
        })
        .map_err(|d| Diagnostics(vec![d]))?;
    DotConfig::parse(&text)
        .map_err(|e| {
            Diagnostic::error(Code::BadConfig, e.message)
                .at(Location::at_line(path, &text, e.line))
                .hint("pass a kernel `.config` as `make` writes it (`CONFIG_X=y`, `# CONFIG_X is not set`)")
        })
        .map_err(|d| Diagnostics(vec![d]))
}
