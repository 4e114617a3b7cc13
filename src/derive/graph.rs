//! The kernel's call graph joined from its translation units, and the walk from a runtime's
//! entries: breadth first, so each reached function's parent chain is a shortest call chain.

use std::collections::{HashMap, VecDeque};

use super::callgraph::{Unit, INDIRECT};

pub type FuncId = usize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    /// Symbol name with gcc's clone suffix, as in the object.
    pub name: String,
    /// Index into the graph's objects.
    pub object: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub objects: Vec<String>,
    pub funcs: Vec<Func>,
    /// Callees per function, resolved, deduplicated.
    pub callees: Vec<Vec<FuncId>>,
    /// Calls through a pointer per function: counted, never guessed.
    pub indirect: Vec<u32>,
    /// Calls whose target no unit defines (assembly, or code not built).
    pub undefined_calls: usize,
    /// Global names defined by more than one unit (a call reaches every definition).
    pub duplicate_names: usize,
    pub calls: usize,
}

impl Graph {
    /// Join units, each with the object it was compiled into. Calls to names `is_hook` accepts
    /// are instrumentation, counted from the objects instead, not edges.
    pub fn build(units: &[(String, Unit)], is_hook: &dyn Fn(&str) -> bool) -> Graph {
        let mut g = Graph::default();
        let mut globals: HashMap<&str, Vec<FuncId>> = HashMap::new();
        let mut locals: Vec<HashMap<&str, FuncId>> = Vec::with_capacity(units.len());
        for (object, unit) in units {
            g.objects.push(object.clone());
            let mut local = HashMap::new();
            for d in &unit.defined {
                let id = g.funcs.len();
                g.funcs.push(Func { name: d.name.clone(), object: g.objects.len() - 1 });
                local.insert(d.title.as_str(), id);
                if !d.is_static {
                    globals.entry(d.title.as_str()).or_default().push(id);
                }
            }
            locals.push(local);
        }
        g.duplicate_names = globals.values().filter(|v| v.len() > 1).count();
        g.callees = vec![Vec::new(); g.funcs.len()];
        g.indirect = vec![0; g.funcs.len()];
        for ((_, unit), local) in units.iter().zip(&locals) {
            for call in &unit.calls {
                let Some(&from) = local.get(call.from.as_str()) else { continue };
                if is_hook(&call.to) {
                    continue;
                }
                g.calls += 1;
                if call.to == INDIRECT {
                    g.indirect[from] += 1;
                } else if let Some(&to) = local.get(call.to.as_str()) {
                    g.callees[from].push(to);
                } else if let Some(defs) = globals.get(call.to.as_str()) {
                    g.callees[from].extend(defs);
                } else {
                    g.undefined_calls += 1;
                }
            }
        }
        for c in &mut g.callees {
            c.sort_unstable();
            c.dedup();
        }
        g
    }
}

/// The result of a walk.
#[derive(Debug, Clone)]
pub struct Walk {
    /// Per function: reached, and from which caller (`None` for an entry).
    pub parent: Vec<Option<Option<FuncId>>>,
    /// Stop points the walk met, with the first caller that reached each.
    pub stopped: Vec<(FuncId, FuncId)>,
}

impl Walk {
    pub fn reached(&self, f: FuncId) -> bool {
        self.parent[f].is_some()
    }

    /// The chain from an entry to `f`, entry first.
    pub fn chain(&self, f: FuncId) -> Vec<FuncId> {
        let mut chain = vec![f];
        let mut at = f;
        while let Some(Some(p)) = self.parent[at] {
            chain.push(p);
            at = p;
        }
        chain.reverse();
        chain
    }
}

/// Walk from `entries`, not entering functions `is_stop` accepts.
pub fn walk(g: &Graph, entries: &[FuncId], is_stop: &dyn Fn(FuncId) -> bool) -> Walk {
    let mut parent = vec![None; g.funcs.len()];
    let mut stop_seen = vec![false; g.funcs.len()];
    let mut stopped = Vec::new();
    let mut queue = VecDeque::new();
    for &e in entries {
        if parent[e].is_none() {
            parent[e] = Some(None);
            queue.push_back(e);
        }
    }
    while let Some(f) = queue.pop_front() {
        for &c in &g.callees[f] {
            if parent[c].is_some() {
                continue;
            }
            if is_stop(c) {
                if !stop_seen[c] {
                    stop_seen[c] = true;
                    stopped.push((c, f));
                }
                continue;
            }
            parent[c] = Some(Some(f));
            queue.push_back(c);
        }
    }
    Walk { parent, stopped }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive::callgraph::parse;

    fn unit(src: &str, body: &str) -> Unit {
        parse(&format!("graph: {{ title: \"{src}\"\n{body}}}\n")).unwrap()
    }

    #[test]
    fn statics_stay_in_their_unit_and_walks_are_shortest() {
        let a = unit(
            "a.c",
            "node: { title: \"entry\" label: \"entry\" }\nnode: { title: \"a.c:helper\" label: \"helper\" }\n\
             edge: { sourcename: \"entry\" targetname: \"a.c:helper\" label: \"\" }\n\
             edge: { sourcename: \"entry\" targetname: \"far\" label: \"\" }\n\
             edge: { sourcename: \"a.c:helper\" targetname: \"__indirect_call\" label: \"\" }\n",
        );
        let b = unit(
            "b.c",
            "node: { title: \"far\" label: \"far\" }\nnode: { title: \"b.c:helper\" label: \"helper\" }\n\
             node: { title: \"stopme\" label: \"stopme\" }\n\
             edge: { sourcename: \"far\" targetname: \"b.c:helper\" label: \"\" }\n\
             edge: { sourcename: \"b.c:helper\" targetname: \"stopme\" label: \"\" }\n\
             edge: { sourcename: \"stopme\" targetname: \"asm_only\" label: \"\" }\n",
        );
        let g = Graph::build(&[("a.o".into(), a), ("b.o".into(), b)], &|_| false);
        let id = |name: &str, obj: usize| g.funcs.iter().position(|f| f.name == name && f.object == obj).unwrap();
        assert_eq!(g.indirect[id("helper", 0)], 1);
        assert_eq!(g.undefined_calls, 1);
        let stop = id("stopme", 1);
        let w = walk(&g, &[id("entry", 0)], &|f| f == stop);
        assert!(w.reached(id("helper", 1)) && !w.reached(stop));
        let names: Vec<&str> = w.chain(id("helper", 1)).iter().map(|&f| g.funcs[f].name.as_str()).collect();
        assert_eq!(names, ["entry", "far", "helper"]);
        assert_eq!(w.stopped, vec![(stop, id("helper", 1))]);
    }
}
