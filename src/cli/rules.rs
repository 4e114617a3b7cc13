//! `rules`: which Kbuild rules a tree uses.

use super::context::{rules_for_tree, CommonArgs, Ui};
use super::{Defaults, EXIT_OK};
use crate::kbuild::Rules;

pub fn run(args: &CommonArgs, defaults: &Defaults, ui: &mut Ui) -> u8 {
    let rules = match args.tree.clone().or_else(|| super::context::default_tree(defaults)) {
        Some(tree) => match rules_for_tree(&tree, ui) {
            Ok(rules) => rules,
            Err(code) => return code,
        },
        None => Rules::builtin(),
    };
    for line in rules.describe() {
        outln!("{line}");
    }
    EXIT_OK
}
