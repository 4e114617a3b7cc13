//! Instrumentation read from the object itself: each function's range from the symbol table, and
//! the relocations inside it that target a mechanism's hooks (`__asan_load8_noabort`, …). A
//! `noinstr` or `__no_sanitize_address` function has none even in an instrumented object, and an
//! object Kbuild exempted has none at all, whatever any Makefile is believed to say.

use std::collections::HashMap;

use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionIndex, SectionKind, SymbolKind};

/// Hook call sites of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sites {
    /// Per function symbol (gcc's split-off `foo.cold` counted as `foo`).
    pub by_function: HashMap<String, u32>,
    /// Every hook relocation in the object's code, inside a function or not (a hook's address in
    /// data, such as the runtime's own export table, is not a call).
    pub total: u32,
    /// Function symbols in the object.
    pub functions: usize,
}

/// Count relocations to symbols `is_hook` accepts, per containing function.
pub fn count(bytes: &[u8], is_hook: &dyn Fn(&str) -> bool) -> Result<Sites, String> {
    let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
    // Function ranges per section, sorted by start, so each relocation is found by binary search.
    let mut ranges: HashMap<SectionIndex, Vec<(u64, u64, String)>> = HashMap::new();
    let mut sites = Sites::default();
    for sym in file.symbols() {
        let (SymbolKind::Text, Some(section)) = (sym.kind(), sym.section_index()) else { continue };
        let Ok(name) = sym.name() else { continue };
        if sym.size() == 0 || name.is_empty() {
            continue;
        }
        sites.functions += 1;
        let name = name.strip_suffix(".cold").unwrap_or(name).to_string();
        ranges.entry(section).or_default().push((sym.address(), sym.address() + sym.size(), name));
    }
    for r in ranges.values_mut() {
        r.sort();
    }
    for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        let funcs = ranges.get(&section.index());
        for (offset, reloc) in section.relocations() {
            let RelocationTarget::Symbol(index) = reloc.target() else { continue };
            let Ok(target) = file.symbol_by_index(index) else { continue };
            if !target.name().is_ok_and(is_hook) {
                continue;
            }
            sites.total += 1;
            let Some(funcs) = funcs else { continue };
            if let Some((_, _, name)) = containing(funcs, offset, |(start, end, _)| (*start, *end)) {
                *sites.by_function.entry(name.clone()).or_default() += 1;
            }
        }
    }
    Ok(sites)
}

/// The entry of `sorted` (ascending by start) whose `[start, end)` range, as `span` gives it,
/// holds `address`.
pub(super) fn containing<T>(sorted: &[T], address: u64, span: impl Fn(&T) -> (u64, u64)) -> Option<&T> {
    let i = sorted.partition_point(|t| span(t).0 <= address).checked_sub(1)?;
    (address < span(&sorted[i]).1).then(|| &sorted[i])
}

/// Names of the functions an object defines (gcc's `foo.cold` parts left out).
pub fn functions(bytes: &[u8]) -> Result<Vec<String>, String> {
    let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
    Ok(file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.section_index().is_some() && s.size() > 0)
        .filter_map(|s| s.name().ok().filter(|n| !n.is_empty() && !n.ends_with(".cold")).map(str::to_string))
        .collect())
}
