//! A derivation as Markdown (for a person or a PR), as JSON (for scripts), and as `[[require]]`
//! candidates for a person to review.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Derivation, ObjectState, Verdict};

/// How many reached functions with indirect calls the Markdown lists.
const INDIRECT_SHOWN: usize = 10;

fn chain(witness: &[String]) -> String {
    witness.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(" → ")
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 100.0).round() / 100.0
}

/// One line saying how a shipped requirement relates to the derived set.
pub fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Derived { object, state, sites, witness } => {
            format!("re-derived: `{object}` is reached, {} with {sites} sites, via {}", state.as_str(), chain(witness))
        }
        Verdict::Runtime => "re-derived: it is the runtime itself (the walk starts there)".into(),
        Verdict::NotBuilt => "not built in this configuration".into(),
        Verdict::ThroughStop { stop, witness } => {
            format!("not derived: reached only through the stop point `{stop}`: {}", chain(witness))
        }
        Verdict::NotReached => "not derived: built, but no call chain from the runtime's entries reaches it".into(),
        Verdict::OtherMechanisms(m) => format!("not about this mechanism (requires {})", m.join(", ")),
    }
}

fn verdict_key(v: &Verdict) -> &'static str {
    match v {
        Verdict::Derived { .. } => "derived",
        Verdict::Runtime => "runtime",
        Verdict::NotBuilt => "not-built",
        Verdict::ThroughStop { .. } => "through-stop",
        Verdict::NotReached => "not-reached",
        Verdict::OtherMechanisms(_) => "other-mechanisms",
    }
}

pub fn markdown(d: &Derivation) -> String {
    let s = &d.stats;
    let title = d.runtime.mech.get().title;
    let mut out = format!("# Derived recursion-prone set: {title}\n\n");
    let _ = writeln!(
        out,
        "Runtime: {} — {} entries (functions named {}: {}).\n",
        d.runtime.files.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", "),
        s.entries,
        d.runtime.entries.iter().map(|e| format!("`{e}*`")).collect::<Vec<_>>().join(", "),
        d.runtime.entries_why
    );
    let _ = writeln!(
        out,
        "The runtime reaches **{} functions in {} objects** outside its own files ({} of its own). \
         {} objects are instrumented ({} functions, {} sites on the runtime's path), {} exempt. \
         {} indirect calls in reached functions are left unresolved (not followed). \
         Graph: {} functions, {} calls in {} units ({}).\n",
        s.functions_reached,
        s.objects_reached,
        s.runtime_functions_reached,
        s.objects_instrumented,
        s.functions_instrumented,
        s.sites,
        s.objects_exempt,
        s.indirect_calls,
        s.functions,
        s.calls,
        s.units,
        d.edges.describe()
    );
    out.push_str("| # | object | state | sites | functions | indirect | witness |\n|---|---|---|---|---|---|---|\n");
    for (i, f) in d.findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {} | {} | {} | {} |",
            i + 1,
            f.object,
            f.state.as_str(),
            f.sites,
            f.functions,
            f.indirect,
            chain(&f.witness)
        );
    }
    out.push_str("\n## Shipped requirements\n\n");
    for r in &d.requirements {
        let _ = writeln!(out, "- `{}`: {}", r.path, verdict_text(&r.verdict));
    }
    out.push_str("\n## Stop points met\n\n");
    if d.stops.is_empty() {
        out.push_str("None.\n");
    }
    for st in &d.stops {
        let _ = writeln!(out, "- `{}` (`{}`): {}. Reached by {}", st.function, st.object, st.why, chain(&st.witness));
    }
    out.push_str("\n## Indirect calls in reached functions (not followed)\n\n");
    for (f, o, n) in d.indirect.iter().take(INDIRECT_SHOWN) {
        let _ = writeln!(out, "- `{f}` (`{o}`): {n}");
    }
    if d.indirect.len() > INDIRECT_SHOWN {
        let _ = writeln!(out, "- … {} more functions", d.indirect.len() - INDIRECT_SHOWN);
    }
    let _ = writeln!(
        out,
        "\n## Object and effective state disagree\n\n{} objects' relocations agree with the state sanpolicy \
         computes; {} instrumented by it call no hook (nothing to check in them, or all `noinstr`); \
         {} depend on configuration.\n",
        s.model_agrees, s.model_on_without_hooks, s.model_conditional
    );
    if d.disagreements.is_empty() {
        out.push_str("No object sanpolicy computes as exempt calls a hook.\n");
    }
    for x in &d.disagreements {
        let _ = writeln!(
            out,
            "- `{}`: sanpolicy computes `{}`, the object has {} hook calls in {} functions",
            x.object, x.model, x.hook_calls, x.functions
        );
    }
    let _ = writeln!(out, "\n## Time\n\n{}", timings(d));
    out
}

/// `configure 0.0 s, make vmlinux (0 objects compiled) 3.1 s, …`
pub fn timings(d: &Derivation) -> String {
    let total: Duration = d.timings.iter().map(|(_, t)| *t).sum();
    let parts: Vec<String> = d.timings.iter().map(|(what, t)| format!("{what} {:.2} s", secs(*t))).collect();
    let compiled = d.objects_compiled.map(|n| format!(" ({n} objects compiled)")).unwrap_or_default();
    format!("{} — total {:.2} s{compiled}; {} units read", parts.join(", "), secs(total), d.stats.units)
}

pub fn to_json(d: &Derivation) -> Value {
    let s = &d.stats;
    let findings: Vec<Value> = d
        .findings
        .iter()
        .map(|f| json!({"object": f.object, "state": f.state.as_str(), "sites": f.sites, "witness": f.witness}))
        .collect();
    json!({
        "mechanism": d.mechanism,
        "findings": findings,
        "stats": {
            "edges": d.edges.as_str(),
            "units": s.units,
            "functions": s.functions,
            "calls": s.calls,
            "entries": s.entries,
            "runtime_functions_reached": s.runtime_functions_reached,
            "functions_reached": s.functions_reached,
            "functions_instrumented": s.functions_instrumented,
            "objects_reached": s.objects_reached,
            "objects_instrumented": s.objects_instrumented,
            "objects_exempt": s.objects_exempt,
            "sites": s.sites,
            "indirect_calls": s.indirect_calls,
            "undefined_calls": s.undefined_calls,
            "duplicate_names": s.duplicate_names,
            "objects_conditional_in_model": s.model_conditional,
            "objects_model_agrees": s.model_agrees,
            "objects_model_on_without_hooks": s.model_on_without_hooks,
            "per_object": d.findings.iter().map(|f| json!({"object": f.object, "functions": f.functions, "indirect_calls": f.indirect, "model": f.model})).collect::<Vec<_>>(),
            "stops": d.stops.iter().map(|st| json!({"function": st.function, "object": st.object, "why": st.why, "witness": st.witness})).collect::<Vec<_>>(),
            "disagreements": d.disagreements.iter().map(|x| json!({"object": x.object, "model": x.model, "hook_calls": x.hook_calls, "functions": x.functions})).collect::<Vec<_>>(),
            "requirements": d.requirements.iter().map(|r| json!({"path": r.path, "verdict": verdict_key(&r.verdict), "detail": verdict_text(&r.verdict)})).collect::<Vec<_>>(),
            "objects_compiled": d.objects_compiled,
            "seconds": d.timings.iter().map(|(what, t)| (what.clone(), json!(secs(*t)))).collect::<serde_json::Map<String, Value>>(),
        }
    })
}

/// `[[require]]` candidates: every reached instrumented object with sites, the witness as `why`.
pub fn requirements_toml(d: &Derivation, command: &str) -> String {
    let name = d.mechanism;
    let mut out = format!(
        "# Requirement candidates derived by `{command}` from the kernel's call graph.\n\
         # Each object below is instrumented for {title} and runs inside its runtime; review each\n\
         # one (is the chain a path the runtime really takes?) before moving it into the policy.\n",
        title = d.runtime.mech.get().title
    );
    for f in d.findings.iter().filter(|f| f.state == ObjectState::Instrumented && f.sites > 0) {
        let why = format!(
            "{} runs this code ({} instrumentation sites in {} reached functions): {}",
            d.runtime.mech.get().title,
            f.sites,
            f.functions,
            f.witness.join(" -> ")
        );
        let _ = write!(
            out,
            "\n[[require]]\npath = {}\nexempt = [{}]\nwhy = {}\n",
            toml_edit::Value::from(f.object.as_str()),
            toml_edit::Value::from(name),
            toml_edit::Value::from(why.as_str())
        );
    }
    out
}
