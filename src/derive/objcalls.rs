//! Call edges read from an object's machine code: the call graph where the compiler writes none
//! (clang has no `-fcallgraph-info`). Each function's bytes (its range from the symbol table)
//! are decoded with `iced-x86`; every near call, and every jump that leaves the function (a tail
//! call), is an edge. Its target is the relocation at the branch's 32-bit field when there is one
//! (a named symbol, or a section symbol plus addend for a function in another section), else the
//! address the branch names in its own section (a call to a `static` function of the same
//! section, which the assembler resolves without a relocation). The result is the same [`Unit`]
//! gcc's `.ci` file gives, so the walk cannot tell the two apart.
//!
//! What the machine code says and the source does not: calls the compiler adds below C (the
//! ftrace hook `__fentry__`, `__stack_chk_fail`, block moves through `memcpy`) are edges like any
//! other; a jump to `__x86_return_thunk` is a return, not a call; a call or jump through
//! `__x86_indirect_thunk_*` (retpolines) is a call through a pointer, counted and never followed,
//! as a `call *%rax` is. An indirect `jmp` is a jump table or a tail call through a pointer, and
//! cannot be told apart: it is left out.

use std::collections::HashMap;

use iced_x86::{Decoder, DecoderOptions, FlowControl};
use object::{
    Architecture, Object, ObjectSection, ObjectSymbol, RelocationTarget, SectionIndex, SectionKind, SymbolIndex,
    SymbolKind,
};

use super::callgraph::{Call, Defined, Unit, INDIRECT};

/// What a branch to the symbol `name` is when it is not a call of that function: a return
/// through the return thunk, or a call through a pointer by a retpoline.
fn special(name: &str) -> Option<Target> {
    if name == "__x86_return_thunk" {
        Some(Target::Return)
    } else if ["__x86_indirect_thunk_", "__x86_indirect_call_thunk_", "__x86_indirect_jump_thunk_"]
        .iter()
        .any(|p| name.starts_with(p))
    {
        Some(Target::Indirect)
    } else {
        None
    }
}

/// A function of the object: its range in its section and its node title.
#[derive(Debug, Clone)]
struct Range {
    start: u64,
    end: u64,
    /// Index into the unit's `defined`.
    def: usize,
}

/// The call graph of one object, `name` its path (the title prefix of its `static` functions,
/// as gcc's source path is in a `.ci` file).
pub fn unit(bytes: &[u8], name: &str) -> Result<Unit, String> {
    let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
    if file.architecture() != Architecture::X86_64 {
        return Err(format!("a {:?} object: call edges are read from x86_64 machine code only", file.architecture()));
    }
    let mut unit = Unit { source: name.to_string(), ..Unit::default() };
    let (ranges, by_symbol) = functions(&file, name, &mut unit);
    for section in file.sections().filter(|s| s.kind() == SectionKind::Text) {
        let Some(funcs) = ranges.get(&section.index()) else { continue };
        let code = section.data().map_err(|e| format!("section `{}`: {e}", section.name().unwrap_or("?")))?;
        let relocs: HashMap<u64, (RelocationTarget, i64)> =
            section.relocations().map(|(at, r)| (at, (r.target(), r.addend()))).collect();
        for f in funcs {
            let from = unit.defined[f.def].title.clone();
            let body = code
                .get(f.start as usize..f.end as usize)
                .ok_or_else(|| format!("`{from}` ({:#x}..{:#x}) lies outside its section's bytes", f.start, f.end))?;
            let mut decoder = Decoder::with_ip(64, body, f.start, DecoderOptions::NONE);
            for ins in &mut decoder {
                let flow = ins.flow_control();
                let jump = matches!(flow, FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch);
                let to = match flow {
                    FlowControl::IndirectCall => Some(Target::Indirect),
                    FlowControl::Call | FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                        // A 32-bit branch field is the instruction's last four bytes.
                        let field = ins.next_ip() - 4;
                        match (ins.len() >= 5).then(|| relocs.get(&field)).flatten() {
                            Some(&(target, addend)) => relocated(&file, target, addend, &ranges, &by_symbol),
                            None => local(funcs, ins.near_branch_target()).map(Target::Defined),
                        }
                    }
                    _ => None,
                };
                let to = match to {
                    // A jump inside the function is control flow, not a call.
                    Some(Target::Defined(d)) if jump && d == f.def => continue,
                    Some(Target::Defined(d)) => unit.defined[d].title.clone(),
                    Some(Target::Name(n)) => n,
                    Some(Target::Indirect) => INDIRECT.to_string(),
                    Some(Target::Return) | None => continue,
                };
                unit.calls.push(Call { from: from.clone(), to, at: format!("{:#x}", ins.ip()) });
            }
        }
    }
    Ok(unit)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A function of this object (index into `defined`).
    Defined(usize),
    /// A symbol this object does not define.
    Name(String),
    Indirect,
    Return,
}

/// Every function symbol, as a defined node, with its range per section; gcc's `foo.cold`
/// (the unlikely half it splits off) belongs to `foo`, as in gcc's own call graph. Also each
/// function symbol's node, for relocations that name it.
fn functions(
    file: &object::File,
    name: &str,
    unit: &mut Unit,
) -> (HashMap<SectionIndex, Vec<Range>>, HashMap<SymbolIndex, usize>) {
    let mut ranges: HashMap<SectionIndex, Vec<Range>> = HashMap::new();
    let mut by_symbol = HashMap::new();
    let mut by_title: HashMap<String, usize> = HashMap::new();
    let mut cold = Vec::new();
    for sym in file.symbols() {
        let (SymbolKind::Text, Some(section)) = (sym.kind(), sym.section_index()) else { continue };
        let Ok(symbol) = sym.name() else { continue };
        if symbol.is_empty() {
            continue;
        }
        if let Some(parent) = symbol.strip_suffix(".cold") {
            cold.push((sym.index(), section, sym.address(), sym.size(), parent.to_string(), sym.is_local()));
            continue;
        }
        let is_static = sym.is_local();
        let title = if is_static { format!("{name}:{symbol}") } else { symbol.to_string() };
        let def = *by_title.entry(title.clone()).or_insert_with(|| {
            unit.defined.push(Defined { title, name: symbol.to_string(), is_static });
            unit.defined.len() - 1
        });
        by_symbol.insert(sym.index(), def);
        if sym.size() > 0 {
            ranges.entry(section).or_default().push(Range {
                start: sym.address(),
                end: sym.address() + sym.size(),
                def,
            });
        }
    }
    for (index, section, start, size, parent, local) in cold {
        let title = if local { format!("{name}:{parent}") } else { parent };
        let Some(&def) = by_title.get(&title) else { continue };
        by_symbol.insert(index, def);
        if size > 0 {
            ranges.entry(section).or_default().push(Range { start, end: start + size, def });
        }
    }
    for r in ranges.values_mut() {
        r.sort_by_key(|r| (r.start, r.end));
    }
    (ranges, by_symbol)
}

/// The function whose range holds `address`, in one section's sorted ranges.
fn local(funcs: &[Range], address: u64) -> Option<usize> {
    super::elf::containing(funcs, address, |r| (r.start, r.end)).map(|r| r.def)
}

/// The target a branch's relocation names.
fn relocated(
    file: &object::File,
    target: RelocationTarget,
    addend: i64,
    ranges: &HashMap<SectionIndex, Vec<Range>>,
    by_symbol: &HashMap<SymbolIndex, usize>,
) -> Option<Target> {
    let RelocationTarget::Symbol(index) = target else { return None };
    if let Some(&def) = by_symbol.get(&index) {
        return Some(Target::Defined(def));
    }
    let sym = file.symbol_by_index(index).ok()?;
    if sym.kind() == SymbolKind::Section {
        // `call .text.unlikely+0x1c`: the field holds S + A - P, the branch goes to S + A + 4.
        let at = sym.address().wrapping_add_signed(addend).wrapping_add(4);
        let def = local(ranges.get(&sym.section_index()?)?, at)?;
        return Some(Target::Defined(def));
    }
    let name = sym.name().ok().filter(|n| !n.is_empty())?;
    Some(special(name).unwrap_or_else(|| Target::Name(name.to_string())))
}
