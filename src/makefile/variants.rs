//! Concrete spellings of a name that holds make variable references (`head$(BITS).o`), for the
//! values a policy declares for them. Plain text substitution, as make's expansion of a
//! reference to a simply expanded variable would give.

use std::collections::BTreeMap;

/// Every concrete spelling of `text` with the declared values substituted, e.g.
/// `head$(BITS).o` with `BITS = ["32", "64"]` → `head32.o`, `head64.o`.
pub fn expand_variants(text: &str, vars: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out = vec![text.to_string()];
    for (name, values) in vars {
        let pattern = format!("$({name})");
        out = out
            .into_iter()
            .flat_map(|t| {
                if t.contains(&pattern) {
                    values.iter().map(|v| t.replace(&pattern, v)).collect()
                } else {
                    vec![t]
                }
            })
            .collect();
    }
    out
}
