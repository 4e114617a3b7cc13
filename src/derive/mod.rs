//! `derive`: the recursion-prone set derived from the kernel's real call graph. From a build
//! directory holding objects and gcc's `.ci` call graphs (see [`build`]), it walks from a
//! runtime's entries ([`runtimes`]) through the compiler's call edges, counts each reached
//! function's instrumentation sites from the object's relocations ([`elf`]), cross-checks every
//! object's instrumented-or-not against the effective state sanpolicy computes for it, and
//! judges the shipped requirements against what it found.

pub mod build;
pub mod callgraph;
pub mod elf;
pub mod graph;
pub mod objcalls;
pub mod render;
pub mod runtimes;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::kbuild::configs::{Prepared, State};
use crate::kbuild::descent::{Built, Descent};
use crate::kbuild::dotconfig::DotConfig;
use crate::kbuild::{arch, Rules};
use crate::makefile;
use crate::makefile::{kbuild_file, read_kbuild};
use crate::policy::Requirement;

pub use build::Failure;
use graph::{FuncId, Graph, Walk};
use runtimes::Runtime;

/// What the object itself says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectState {
    /// It calls the mechanism's hooks somewhere.
    Instrumented,
    /// No hook call anywhere in it.
    Exempt,
}

impl ObjectState {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectState::Instrumented => "instrumented",
            ObjectState::Exempt => "exempt",
        }
    }
}

/// One object the runtime reaches outside its own files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub object: String,
    pub state: ObjectState,
    /// Hook call sites inside the reached functions: the cost on the runtime's own path.
    pub sites: u32,
    /// A shortest call chain from an entry to a reached function of this object, entry first.
    pub witness: Vec<String>,
    /// Functions of the object the runtime reaches.
    pub functions: usize,
    /// Calls through a pointer in those functions (not followed).
    pub indirect: u32,
    /// The effective state sanpolicy computes for the object (`on`, `off`, `off only when …`).
    pub model: String,
}

/// The object and sanpolicy's model disagree: the model or the tree is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    pub object: String,
    pub model: String,
    pub hook_calls: u32,
    pub functions: usize,
}

/// A stop point the walk met.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopHit {
    pub function: String,
    pub object: String,
    pub why: String,
    pub witness: Vec<String>,
}

/// How a shipped requirement relates to the derived set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Reached: it is in the derived set (by its first-ranked object).
    Derived { object: String, state: ObjectState, sites: u32, witness: Vec<String> },
    /// It is the runtime itself, where the walk starts.
    Runtime,
    /// No object of it is compiled in this configuration.
    NotBuilt,
    /// Reached only through a stop point.
    ThroughStop { stop: String, witness: Vec<String> },
    /// Built, but no call chain from the runtime reaches it.
    NotReached,
    /// It does not name this mechanism.
    OtherMechanisms(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequirementCheck {
    pub path: String,
    pub verdict: Verdict,
}

/// Whole-run numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub units: usize,
    pub functions: usize,
    pub calls: usize,
    pub entries: usize,
    pub runtime_functions_reached: usize,
    pub functions_reached: usize,
    pub functions_instrumented: usize,
    pub objects_reached: usize,
    pub objects_instrumented: usize,
    pub objects_exempt: usize,
    pub sites: u32,
    /// Calls through a pointer in reached functions (runtime included): left unresolved.
    pub indirect_calls: u32,
    pub undefined_calls: usize,
    pub duplicate_names: usize,
    pub model_conditional: usize,
    /// Objects the model instruments that call no hook: nothing to check in them, or the model
    /// is wrong; relocations cannot tell which.
    pub model_on_without_hooks: usize,
    /// Objects whose relocations agree with the model (instrumented with hook calls, or exempt
    /// without).
    pub model_agrees: usize,
}

/// The derivation for one mechanism.
#[derive(Debug, Clone)]
pub struct Derivation {
    pub mechanism: &'static str,
    pub runtime: Runtime,
    /// Ranked by sites, then name.
    pub findings: Vec<Finding>,
    pub stats: Stats,
    pub stops: Vec<StopHit>,
    pub disagreements: Vec<Disagreement>,
    pub requirements: Vec<RequirementCheck>,
    /// Reached functions with the most indirect calls: (function, object, calls).
    pub indirect: Vec<(String, String, u32)>,
    /// Where the time went, step by step.
    pub timings: Vec<(String, Duration)>,
    /// Objects Kbuild compiled in this run, when the run built (0: nothing had changed).
    pub objects_compiled: Option<usize>,
    /// Where the call edges came from.
    pub edges: Edges,
}

/// Where the call edges come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edges {
    /// gcc's `.ci` files (`-fcallgraph-info`).
    Gcc,
    /// The objects' machine code ([`objcalls`]): clang's builds, which have no `.ci`.
    MachineCode,
}

impl Edges {
    pub fn as_str(self) -> &'static str {
        match self {
            Edges::Gcc => "gcc-callgraph",
            Edges::MachineCode => "machine-code",
        }
    }

    /// How a report says it.
    pub fn describe(self) -> &'static str {
        match self {
            Edges::Gcc => "call edges from gcc's `-fcallgraph-info`",
            Edges::MachineCode => "call edges read from the objects' machine code (clang writes no call graph)",
        }
    }
}

/// Analyse `build` (already built from `tree`) for `runtime`, with the call edges its compiler
/// gives (the `.config`'s `CONFIG_CC_IS_CLANG`).
pub fn analyse(
    tree: &Path,
    build: &Path,
    runtime: &Runtime,
    rules: &Rules,
    requirements: &[Requirement],
) -> Result<Derivation, Failure> {
    analyse_with(tree, build, runtime, rules, requirements, None)
}

/// [`analyse`] with the edges' source chosen (`None`: by the build's compiler). A gcc build has
/// both, which is how the machine-code reader is judged against gcc's own call graph.
pub fn analyse_with(
    tree: &Path,
    build: &Path,
    runtime: &Runtime,
    rules: &Rules,
    requirements: &[Requirement],
    edges: Option<Edges>,
) -> Result<Derivation, Failure> {
    let mut timings = Vec::new();
    let start = Instant::now();
    // The build's own `.config`, when there is one: what is built (linked into vmlinux) and
    // each object's state are those of that build, as `explain --config` gives them.
    let config = crate::input::read_to_string(&build.join(".config"), crate::input::KBUILD_LIMIT)
        .ok()
        .and_then(|t| DotConfig::parse(&t).ok());
    let descent = config.as_ref().and_then(|c| Descent::walk(tree, c).ok());
    let linked = match &descent {
        Some(d) => Some(d.objects().filter(|(_, b)| *b == Built::Y).map(|(o, _)| o.to_string()).collect()),
        None => linked_objects(build)?,
    };
    // clang writes no call graph: its edges are read from the objects' machine code.
    let clang = config.as_ref().is_some_and(|c| c.get("CONFIG_CC_IS_CLANG") == "y");
    let edges = edges.unwrap_or(if clang { Edges::MachineCode } else { Edges::Gcc });
    let units = match edges {
        Edges::MachineCode => object_units(tree, build, linked.as_ref())?,
        Edges::Gcc => load_units(tree, build, linked.as_ref())?,
    };
    let g = Graph::build(&units, &|name| runtime.is_hook(name));
    drop(units);
    timings.push(("call graph".into(), start.elapsed()));

    let start = Instant::now();
    let sites = read_objects(build, &g.objects, runtime)?;
    timings.push(("objects".into(), start.elapsed()));

    let start = Instant::now();
    let models = model_states(tree, rules, runtime, &g.objects, config.as_ref().zip(descent.as_ref()));
    timings.push(("effective state".into(), start.elapsed()));

    let start = Instant::now();
    // A stop point is never an entry, even when its name has an entry's prefix (KCSAN's
    // `kcsan_report_*`): the walk would otherwise start behind the stop it is meant to respect.
    let entries: Vec<FuncId> = (0..g.funcs.len())
        .filter(|&f| runtime.owns(&g.objects[g.funcs[f].object]) && runtime.is_entry_name(&g.funcs[f].name))
        .filter(|&f| runtime.stop_for(&g.funcs[f].name).is_none())
        .collect();
    if entries.is_empty() {
        return Err(Failure {
            message: format!(
                "no function of {}'s runtime ({}) is in the call graph",
                runtime.mech.get().title,
                runtime.files.join(", ")
            ),
            hint: format!(
                "check that CONFIG_{} is `y` in `{}`",
                runtime.config.require.first().map_or("", String::as_str),
                build.join(".config").display()
            ),
        });
    }
    // A stop point inside the runtime (its report functions) or outside it (the scheduler).
    let stop = |f: FuncId| runtime.stop_for(&g.funcs[f].name).is_some();
    let walk = graph::walk(&g, &entries, &stop);
    let unstopped = graph::walk(&g, &entries, &|_| false);
    let mut d = Derivation {
        mechanism: runtime.mech.get().name,
        runtime: runtime.clone(),
        findings: findings(&g, &walk, runtime, &sites, &models),
        stats: Stats::default(),
        stops: stop_hits(&g, &walk, runtime),
        disagreements: disagreements(&g, &sites, &models),
        requirements: Vec::new(),
        indirect: indirect(&g, &walk),
        timings: Vec::new(),
        objects_compiled: None,
        edges,
    };
    d.requirements =
        requirements.iter().map(|r| check_requirement(r, &d, &g, &unstopped, runtime, descent.as_ref())).collect();
    d.stats = stats(&g, &walk, runtime, &sites, &d, entries.len(), &models);
    timings.push(("walk and report".into(), start.elapsed()));
    d.timings = timings;
    Ok(d)
}

/// Objects linked into vmlinux (the top `built-in.a`, `lib/lib.a`, `arch/*/lib/lib.a`: what
/// `vmlinux.a` is archived from), so code built for the boot loader, the vDSO or the real-mode
/// trampoline does not join the kernel's graph (it defines its own `memcpy`); used when the
/// build has no `.config` to walk the descent with. `None` when the build has no top
/// `built-in.a` (then every `.ci` counts).
fn linked_objects(build: &Path) -> Result<Option<std::collections::HashSet<String>>, Failure> {
    let Some(top) = read_built(&build.join("built-in.a"))? else { return Ok(None) };
    // Thin archives name members relative to the archive's own directory.
    let mut archives = vec![(String::new(), top)];
    let mut libs = vec!["lib/".to_string()];
    if let Ok(arches) = std::fs::read_dir(build.join("arch")) {
        libs.extend(arches.flatten().filter_map(|e| Some(format!("arch/{}/lib/", e.file_name().to_str()?))));
    }
    for dir in libs {
        if let Some(bytes) = read_built(&build.join(&dir).join("lib.a"))? {
            archives.push((dir, bytes));
        }
    }
    let mut out = std::collections::HashSet::new();
    for (dir, bytes) in archives {
        let Ok(archive) = object::read::archive::ArchiveFile::parse(bytes.as_slice()) else { continue };
        for member in archive.members().flatten() {
            if let Ok(name) = std::str::from_utf8(member.name()) {
                out.insert(format!("{dir}{}", name.trim_start_matches("./")));
            }
        }
    }
    Ok(Some(out))
}

/// The bytes of a file the build wrote (`None` when it is not there), through the bounded
/// reader: a FIFO, a device or a symlink is refused, not followed (Kbuild writes none of them
/// among objects, call graphs and archives; one there was put by someone else).
fn read_built(path: &Path) -> Result<Option<Vec<u8>>, Failure> {
    let refuse = |what: String| Failure {
        message: format!("`{}` {what}", path.display()),
        hint: format!("derive reads only what the build wrote: remove `{}` and run derive again", path.display()),
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(refuse(format!("cannot be read: {e}"))),
        Ok(m) if m.file_type().is_symlink() => {
            let target = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
            return Err(refuse(format!("is a symlink (to `{target}`), not a file the build wrote")));
        }
        Ok(_) => {}
    }
    crate::input::read(path, crate::input::BUILD_LIMIT).map(Some).map_err(|e| refuse(e.to_string()))
}

/// Every `.ci` file under `build` of an object linked into vmlinux, with its object path
/// relative to the build directory, sorted by path so a run's output does not depend on the
/// order the file system lists directories in.
fn load_units(
    tree: &Path,
    build: &Path,
    linked: Option<&std::collections::HashSet<String>>,
) -> Result<Vec<(String, callgraph::Unit)>, Failure> {
    let mut paths: Vec<(String, PathBuf)> = walkdir::WalkDir::new(build)
        .into_iter()
        .filter_map(Result::ok)
        // Not only regular files: a FIFO or a symlink named `.ci` is refused when read.
        .filter(|e| !e.file_type().is_dir() && e.path().extension().is_some_and(|x| x == "ci"))
        .filter_map(|e| {
            let rel = e.path().strip_prefix(build).ok()?.with_extension("o");
            let object = rel.to_str()?.to_string();
            let wanted = linked.is_none_or(|l| l.contains(&object));
            wanted.then(|| (object, e.into_path()))
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(Failure {
            message: format!("no `.ci` call graphs under `{}`", build.display()),
            hint: format!(
                "gcc writes them when asked: `make -C {} O={} {} vmlinux` (the compiler must be gcc)",
                tree.display(),
                build.display(),
                build::KCFLAGS
            ),
        });
    }
    parallel(&paths, |(object, path)| {
        let bytes = read_built(path)?.ok_or_else(|| Failure {
            message: format!("`{}` went away while derive read the build", path.display()),
            hint: "run derive again when no other build runs in that directory".into(),
        })?;
        let text = String::from_utf8(bytes).map_err(|_| Failure {
            message: format!("`{}` is not UTF-8: not a gcc call graph", path.display()),
            hint: format!("remove `{}` and run derive again so gcc writes it again", path.display()),
        })?;
        let unit = callgraph::parse(&text).map_err(|(line, m)| Failure {
            message: format!("{}:{line}: not a gcc call graph: {m}", path.display()),
            hint: format!(
                "remove `{}` and `{}`, then run derive again so gcc writes both again",
                path.display(),
                path.with_extension("o").display()
            ),
        })?;
        Ok((object.clone(), unit))
    })
}

/// The call graph of every object linked into vmlinux that was compiled from C (the objects gcc
/// would have written a `.ci` for), read from its machine code ([`objcalls`]); sorted by path.
fn object_units(
    tree: &Path,
    build: &Path,
    linked: Option<&std::collections::HashSet<String>>,
) -> Result<Vec<(String, callgraph::Unit)>, Failure> {
    let mut objects: Vec<String> = walkdir::WalkDir::new(build)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| !e.file_type().is_dir() && e.path().extension().is_some_and(|x| x == "o"))
        .filter_map(|e| e.path().strip_prefix(build).ok()?.to_str().map(str::to_string))
        .filter(|o| linked.is_none_or(|l| l.contains(o)))
        .filter(|o| !o.starts_with(".tmp") && !o.ends_with(".mod.o") && o != "vmlinux.o")
        .filter(|o| tree.join(Path::new(o).with_extension("c")).is_file())
        .collect();
    objects.sort();
    if objects.is_empty() {
        return Err(Failure {
            message: format!("no objects compiled from C under `{}`", build.display()),
            hint: format!("build the tree first: `make -C {} O={} LLVM=1`", tree.display(), build.display()),
        });
    }
    parallel(&objects, |object| {
        let path = build.join(object);
        let bytes = read_built(&path)?.ok_or_else(|| Failure {
            message: format!("`{}` went away while derive read the build", path.display()),
            hint: "run derive again when no other build runs in that directory".into(),
        })?;
        let unit = objcalls::unit(&bytes, object).map_err(|e| Failure {
            message: format!("`{}`: cannot read its calls: {e}", path.display()),
            hint: format!("remove `{}` and run derive again to rebuild it", path.display()),
        })?;
        Ok((object.clone(), unit))
    })
}

/// Hook sites of every object of the graph.
fn read_objects(build: &Path, objects: &[String], runtime: &Runtime) -> Result<Vec<elf::Sites>, Failure> {
    parallel(objects, |object| {
        let path = build.join(object);
        let bytes = read_built(&path)?.ok_or_else(|| Failure {
            message: format!("`{}` is missing", path.display()),
            hint: "the object's `.ci` is there but the object is not: run derive again to rebuild".into(),
        })?;
        elf::count(&bytes, &|s| runtime.is_hook(s)).map_err(|e| Failure {
            message: format!("`{}` is not a readable ELF object: {e}", path.display()),
            hint: format!("remove `{}` and run derive again to rebuild it", path.display()),
        })
    })
}

/// `f` over `items` on every core, in order; the first error wins.
fn parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> Result<R, Failure> + Sync) -> Result<Vec<R>, Failure> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).max(1);
    let chunk = items.len().div_ceil(workers).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> =
            items.chunks(chunk).map(|c| s.spawn(|| c.iter().map(&f).collect::<Result<Vec<R>, Failure>>())).collect();
        let mut out = Vec::with_capacity(items.len());
        for h in handles {
            out.extend(
                h.join().map_err(|_| Failure { message: "a reader thread panicked".into(), hint: String::new() })??,
            );
        }
        Ok(out)
    })
}

/// The kbuild directory that builds `object` (the nearest directory up with a kbuild file) and
/// the object's name relative to it.
fn kbuild_home(tree: &Path, object: &str) -> Option<(String, PathBuf, String)> {
    let mut dir = Path::new(object).parent()?;
    loop {
        if let Some(file) = kbuild_file(&tree.join(dir)) {
            let rel = Path::new(object).strip_prefix(dir).ok()?.to_str()?.to_string();
            return Some((dir.to_str()?.to_string(), file, rel));
        }
        dir = dir.parent()?;
    }
}

/// The effective state sanpolicy computes for each object, from its directory's kbuild file
/// over every configuration (`None`: no readable kbuild file, or the tree does not read the
/// mechanism).
fn model_states(
    tree: &Path,
    rules: &Rules,
    runtime: &Runtime,
    objects: &[String],
    build: Option<(&DotConfig, &Descent)>,
) -> Vec<Option<State>> {
    let mut by_dir: BTreeMap<String, (PathBuf, Vec<(usize, String)>)> = BTreeMap::new();
    for (i, o) in objects.iter().enumerate() {
        if let Some((dir, file, rel)) = kbuild_home(tree, o) {
            by_dir.entry(dir).or_insert_with(|| (file, Vec::new())).1.push((i, rel));
        }
    }
    let mut out = vec![None; objects.len()];
    for (dir, (file, members)) in &by_dir {
        let Ok(text) = read_kbuild(file) else { continue };
        let parsed = makefile::parse(&text);
        match build {
            // One run of the file for the build, as Kbuild runs it (the top Makefile's exports).
            Some((c, d)) => {
                let mut preset = d.preset(dir);
                preset.extend(arch::preset(Some(tree), dir, &parsed, crate::kbuild::ANY_OBJECT, Some(c)));
                let mut prepared = Prepared::with_config(&parsed, &preset, c);
                for (i, rel) in members {
                    out[*i] = prepared.state(rules, runtime.mech, rel, true);
                }
            }
            None => {
                for (i, rel) in members {
                    let preset = arch::preset(Some(tree), dir, &parsed, rel, None);
                    out[*i] = Prepared::new(&parsed, &preset).state(rules, runtime.mech, rel, true);
                }
            }
        }
    }
    out
}

fn model_label(state: &Option<State>) -> String {
    state.as_ref().map_or_else(|| "unknown".to_string(), State::label)
}

fn names(g: &Graph, chain: &[FuncId]) -> Vec<String> {
    chain.iter().map(|&f| g.funcs[f].name.clone()).collect()
}

fn findings(g: &Graph, walk: &Walk, runtime: &Runtime, sites: &[elf::Sites], models: &[Option<State>]) -> Vec<Finding> {
    let mut by_object: BTreeMap<usize, Finding> = BTreeMap::new();
    let mut best: HashMap<usize, usize> = HashMap::new();
    for f in (0..g.funcs.len()).filter(|&f| walk.reached(f)) {
        let o = g.funcs[f].object;
        if runtime.owns(&g.objects[o]) {
            continue;
        }
        let chain = walk.chain(f);
        let finding = by_object.entry(o).or_insert_with(|| Finding {
            object: g.objects[o].clone(),
            state: if sites[o].total > 0 { ObjectState::Instrumented } else { ObjectState::Exempt },
            sites: 0,
            witness: Vec::new(),
            functions: 0,
            indirect: 0,
            model: model_label(&models[o]),
        });
        finding.sites += sites[o].by_function.get(&g.funcs[f].name).copied().unwrap_or(0);
        finding.functions += 1;
        finding.indirect += g.indirect[f];
        if best.get(&o).is_none_or(|&len| chain.len() < len) {
            best.insert(o, chain.len());
            finding.witness = names(g, &chain);
        }
    }
    let mut out: Vec<Finding> = by_object.into_values().collect();
    out.sort_by(|a, b| b.sites.cmp(&a.sites).then(a.state.cmp(&b.state)).then_with(|| a.object.cmp(&b.object)));
    out
}

fn stop_hits(g: &Graph, walk: &Walk, runtime: &Runtime) -> Vec<StopHit> {
    let mut out: Vec<StopHit> = walk
        .stopped
        .iter()
        .map(|&(stop, caller)| {
            let mut witness = names(g, &walk.chain(caller));
            witness.push(g.funcs[stop].name.clone());
            StopHit {
                function: g.funcs[stop].name.clone(),
                object: g.objects[g.funcs[stop].object].clone(),
                why: runtime.stop_for(&g.funcs[stop].name).map(|s| s.why.clone()).unwrap_or_default(),
                witness,
            }
        })
        .collect();
    out.sort_by(|a, b| a.witness.len().cmp(&b.witness.len()).then_with(|| a.function.cmp(&b.function)));
    out
}

/// Objects whose relocations contradict the model: exempt by the model yet calling hooks. The
/// converse cannot be read from relocations: an instrumented object whose functions never touch
/// memory (or are all `noinstr`) calls no hook either; those are counted in [`Stats`].
fn disagreements(g: &Graph, sites: &[elf::Sites], models: &[Option<State>]) -> Vec<Disagreement> {
    (0..g.objects.len())
        .filter(|&o| matches!(&models[o], Some(State::Off)) && sites[o].total > 0)
        .map(|o| Disagreement {
            object: g.objects[o].clone(),
            model: model_label(&models[o]),
            hook_calls: sites[o].total,
            functions: sites[o].functions,
        })
        .collect()
}

fn indirect(g: &Graph, walk: &Walk) -> Vec<(String, String, u32)> {
    let mut out: Vec<(String, String, u32)> = (0..g.funcs.len())
        .filter(|&f| walk.reached(f) && g.indirect[f] > 0)
        .map(|f| (g.funcs[f].name.clone(), g.objects[g.funcs[f].object].clone(), g.indirect[f]))
        .collect();
    out.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Whether `object` belongs to a requirement's path (an object, or an object of a directory
/// outside its `except` list).
fn covers(r: &Requirement, object: &str) -> bool {
    match &r.path.object {
        Some(_) => r.path.text == object,
        None => object
            .strip_prefix(r.path.kbuild_dir.as_str())
            .is_some_and(|rest| !rest.contains('/') && !r.except.iter().any(|e| e == rest)),
    }
}

/// Whether the build's descent (from its `.config`) compiles nothing of the requirement's path.
fn not_built(r: &Requirement, descent: Option<&Descent>) -> bool {
    descent.is_some_and(|d| match &r.path.object {
        Some(_) => d.built(&r.path.text).built == Built::N,
        None => !d.descends(&r.path.kbuild_dir),
    })
}

fn check_requirement(
    r: &Requirement,
    d: &Derivation,
    g: &Graph,
    unstopped: &Walk,
    runtime: &Runtime,
    descent: Option<&Descent>,
) -> RequirementCheck {
    let path = r.path.text.clone();
    let verdict = if !r.exempt.iter().any(|(id, _)| *id == runtime.mech) {
        Verdict::OtherMechanisms(r.exempt.iter().map(|(id, _)| id.get().name.to_string()).collect())
    } else if runtime.files.iter().any(|f| *f == path || (f.ends_with('/') && path.starts_with(f.as_str()))) {
        Verdict::Runtime
    } else if let Some(f) = d.findings.iter().find(|f| covers(r, &f.object)) {
        Verdict::Derived { object: f.object.clone(), state: f.state, sites: f.sites, witness: f.witness.clone() }
    } else if not_built(r, descent) || !g.objects.iter().any(|o| covers(r, o)) {
        Verdict::NotBuilt
    } else {
        let through = (0..g.funcs.len())
            .filter(|&f| unstopped.reached(f) && covers(r, &g.objects[g.funcs[f].object]))
            .map(|f| unstopped.chain(f))
            .min_by_key(Vec::len);
        match through {
            Some(chain) => {
                let stop = chain.iter().find(|&&f| runtime.stop_for(&g.funcs[f].name).is_some());
                Verdict::ThroughStop {
                    stop: stop.map(|&f| g.funcs[f].name.clone()).unwrap_or_default(),
                    witness: names(g, &chain),
                }
            }
            None => Verdict::NotReached,
        }
    };
    RequirementCheck { path, verdict }
}

fn stats(
    g: &Graph,
    walk: &Walk,
    runtime: &Runtime,
    sites: &[elf::Sites],
    d: &Derivation,
    entries: usize,
    models: &[Option<State>],
) -> Stats {
    let reached: Vec<FuncId> = (0..g.funcs.len()).filter(|&f| walk.reached(f)).collect();
    let outside = |f: &&FuncId| !runtime.owns(&g.objects[g.funcs[**f].object]);
    Stats {
        units: g.objects.len(),
        functions: g.funcs.len(),
        calls: g.calls,
        entries,
        runtime_functions_reached: reached.iter().filter(|f| !outside(f)).count(),
        functions_reached: reached.iter().filter(outside).count(),
        functions_instrumented: reached
            .iter()
            .filter(outside)
            .filter(|&&f| sites[g.funcs[f].object].by_function.get(&g.funcs[f].name).is_some_and(|&n| n > 0))
            .count(),
        objects_reached: d.findings.len(),
        objects_instrumented: d.findings.iter().filter(|f| f.state == ObjectState::Instrumented).count(),
        objects_exempt: d.findings.iter().filter(|f| f.state == ObjectState::Exempt).count(),
        sites: d.findings.iter().map(|f| f.sites).sum(),
        indirect_calls: reached.iter().map(|&f| g.indirect[f]).sum(),
        undefined_calls: g.undefined_calls,
        duplicate_names: g.duplicate_names,
        model_conditional: models.iter().filter(|m| matches!(m, Some(State::Depends(_)))).count(),
        model_on_without_hooks: (0..g.objects.len())
            .filter(|&o| matches!(models[o], Some(State::On)) && sites[o].total == 0)
            .count(),
        model_agrees: (0..g.objects.len())
            .filter(|&o| match models[o] {
                Some(State::On) => sites[o].total > 0,
                Some(State::Off) => sites[o].total == 0,
                _ => false,
            })
            .count(),
    }
}
