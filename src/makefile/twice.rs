//! A variable assigned twice in one kbuild file where make reads only the later line: the
//! earlier line is dead. Such a line is the tree's, not the policy's: import and sync leave it
//! where it stands (and say so), and `check` names it (`set-twice`).

use super::{Assignment, KbuildFile, Op};

/// The line that makes `a` dead: a later plain `:=`/`=` of the same name that holds whenever
/// `a` does (its conditions are among `a`'s), without reading the old value. The last such
/// line is returned: it is the one make reads. `None` for a line of sanpolicy's generated block
/// (a hand line after the block is drift, which `sync` takes in) and for an `override` line.
pub fn overridden_by<'f>(file: &'f KbuildFile, a: &Assignment) -> Option<&'f Assignment> {
    if a.in_block || a.modifiers.iter().any(|m| m == "override") {
        return None;
    }
    let keys = a.when_keys();
    file.setters(&a.name)
        .filter(|b| b.line > a.end_line)
        .filter(|b| matches!(b.op, Op::Simple | Op::Immediate | Op::Recursive))
        .filter(|b| b.modifiers.iter().all(|m| m != "private"))
        .filter(|b| !reads_itself(b))
        .filter(|b| b.when_keys().iter().all(|k| keys.contains(k)))
        .max_by_key(|b| b.line)
}

/// `X := $(X) n`: the later line keeps the earlier value, so both count.
fn reads_itself(b: &Assignment) -> bool {
    b.value.contains(&format!("$({})", b.name)) || b.value.contains(&format!("${{{}}}", b.name))
}
