//! Whether Kbuild builds an object at all in one configuration: its descent from the top.
//!
//! `make` (the `$(build-dir)` rule of the top Makefile) runs `scripts/Makefile.build` on the top
//! directory's kbuild file (`Kbuild`) with `need-builtin=1 need-modorder=1`; each directory's
//! file lists objects and subdirectories in `obj-y`/`obj-m`/`lib-y` and `subdir-y`/`subdir-m`,
//! and `Makefile.build` descends into every listed subdirectory, passing `need-builtin` only to
//! those of `obj-y` (their `built-in.a` joins the parent's) and `need-modorder` to those of
//! `obj-y`/`obj-m` of a directory that has it. The top `Kbuild` reads `$(ARCH_CORE)`,
//! `$(ARCH_LIB)` and `$(ARCH_DRIVERS)`, which the top Makefile sets from the `core-y`, `libs-y`
//! and `drivers-y` lists of `arch/$(SRCARCH)/Makefile`.
//!
//! Every file is run by the same evaluator as the configuration walk (`configs::Prepared` with
//! the `.config`): the top Makefile with its `include $(srctree)/arch/$(SRCARCH)/Makefile` read
//! in place, for the variables it exports to the sub-makes; then each directory's kbuild file,
//! for its lists. An object is built in (`y`) when it is in `real-obj-y` of a directory reached
//! with `need-builtin` or in `lib-y` of any reached directory (its `lib.a`), a module part
//! (`m`) when it is in `real-obj-m` of a directory reached with `need-modorder`, and not built
//! otherwise. The architecture is the one the `.config` selects (`CONFIG_X86`, `CONFIG_ARM64`).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;

use super::configs::{Lists, Prepared};
use super::dotconfig::DotConfig;
use super::eval::{Env, Evaluate};
use crate::makefile::{self, kbuild_file, read_kbuild, KbuildFile};

/// How an object is built in one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Built {
    /// Linked into vmlinux: a member of a `built-in.a`, or of a `lib.a`.
    Y,
    /// Part of a module (`modules.order`).
    M,
    /// Not built.
    N,
}

impl Built {
    pub fn as_str(self) -> &'static str {
        match self {
            Built::Y => "y",
            Built::M => "m",
            Built::N => "n",
        }
    }
}

/// A line of a kbuild file (relative to the tree) that decides an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    pub file: String,
    /// 1-based; `None` when no line of the file names the object (nothing lists it).
    pub line: Option<usize>,
    /// The line as written (`obj-$(CONFIG_KMSAN) += kmsan/`).
    pub text: String,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.file),
            None => write!(f, "{}", self.file),
        }
    }
}

/// The answer for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub built: Built,
    /// Why, in words ("Kbuild does not descend into mm/kmsan/").
    pub why: String,
    /// For `n`: the line that decides it.
    pub at: Option<At>,
}

/// One directory Kbuild descends into.
#[derive(Debug, Clone)]
struct Visit {
    /// The kbuild file run, relative to the tree (`mm/Makefile`); `None` when the directory has
    /// none (make stops there with an error).
    file: Option<String>,
    builtin: bool,
    modorder: bool,
    lists: Lists,
}

/// The descent of one build.
#[derive(Debug, Clone)]
pub struct Descent {
    /// The architecture's directory under `arch/` (`SRCARCH`).
    pub arch: String,
    dirs: BTreeMap<String, Visit>,
    objects: BTreeMap<String, Built>,
    /// Parsed kbuild files by path relative to the tree (for the lines of an answer).
    files: BTreeMap<String, KbuildFile>,
    /// Kbuild files that could not be read: (path, why).
    pub unreadable: Vec<(String, String)>,
    /// The variables the top Makefile exports to every directory's run (`BITS`, `SRCARCH`, …).
    exported: Vec<(String, String)>,
}

/// Kconfig symbol of each architecture directory whose name is not its symbol's.
const ARCH_SYMBOLS: &[(&str, &str)] = &[("um", "CONFIG_UML"), ("powerpc", "CONFIG_PPC"), ("sh", "CONFIG_SUPERH")];

/// The `arch/` directory the `.config` selects: the one whose symbol (`CONFIG_` and its name in
/// capitals; `CONFIG_UML`, `CONFIG_PPC`, `CONFIG_SUPERH` for `um`, `powerpc`, `sh`) is set.
pub fn arch_of(tree: &Path, config: &DotConfig) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(tree.join("arch"))
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    names.into_iter().find(|name| {
        let symbol = ARCH_SYMBOLS
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| format!("CONFIG_{}", name.to_uppercase()), |(_, s)| s.to_string());
        config.get(&symbol) == "y"
    })
}

/// `a/b` for `dir` `a` and `entry` `b` (`.` is the top); `..` and `.` resolved.
fn join(dir: &str, entry: &str) -> String {
    let mut parts: Vec<&str> = if dir == "." { Vec::new() } else { dir.split('/').collect() };
    for p in entry.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// The directory of `path` (`.` for a top-level name).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or(".", |(d, _)| d)
}

impl Descent {
    /// Walk the descent of `tree` for `config`.
    pub fn walk(tree: &Path, config: &DotConfig) -> Result<Descent, String> {
        let arch = arch_of(tree, config)
            .ok_or("the .config selects no architecture of the tree (no `CONFIG_<ARCH>=y` for a directory of arch/)")?;
        let mut descent = Descent {
            arch: arch.clone(),
            dirs: BTreeMap::new(),
            objects: BTreeMap::new(),
            files: BTreeMap::new(),
            unreadable: Vec::new(),
            exported: Vec::new(),
        };
        let exported = descent.top(tree, config)?;
        descent.exported = exported.clone();
        let mut queue: VecDeque<(String, bool, bool)> = VecDeque::from([(".".to_string(), true, true)]);
        while let Some((dir, builtin, modorder)) = queue.pop_front() {
            if let Some(v) = descent.dirs.get(&dir) {
                if (v.builtin || !builtin) && (v.modorder || !modorder) {
                    continue;
                }
            }
            let (builtin, modorder) = match descent.dirs.get(&dir) {
                Some(v) => (v.builtin || builtin, v.modorder || modorder),
                None => (builtin, modorder),
            };
            let Some(path) = kbuild_file(&tree.join(&dir)) else {
                descent.dirs.insert(dir, Visit { file: None, builtin, modorder, lists: Lists::default() });
                continue;
            };
            let rel = path.strip_prefix(tree).unwrap_or(&path).to_string_lossy().into_owned();
            let text = match read_kbuild(&path) {
                Ok(t) => t,
                Err(d) => {
                    descent.unreadable.push((rel.clone(), d.message.clone()));
                    String::new()
                }
            };
            let file = makefile::parse(&text);
            let mut preset = descent.preset(&dir);
            for (name, value) in
                [("need-builtin", if builtin { "1" } else { "" }), ("need-modorder", if modorder { "1" } else { "" })]
            {
                preset.push((name.to_string(), value.to_string()));
            }
            let lists = Prepared::with_config(&file, &preset, config).lists().unwrap_or_default();
            for o in lists.real_obj_y.iter().filter(|o| builtin && o.ends_with(".o")) {
                descent.objects.insert(join(&dir, o), Built::Y);
            }
            for o in lists.lib.iter().filter(|o| o.ends_with(".o")) {
                descent.objects.insert(join(&dir, o), Built::Y);
            }
            for o in lists.real_obj_m.iter().filter(|o| modorder && o.ends_with(".o")) {
                descent.objects.entry(join(&dir, o)).or_insert(Built::M);
            }
            // `$(subdir-ym)`: each directory once, `need-builtin` for those of `obj-y`,
            // `need-modorder` for those of `obj-y` and `obj-m` (when this one has it).
            let mut subdirs: BTreeMap<String, (bool, bool)> = BTreeMap::new();
            let listed = lists.obj_y.iter().map(|d| (d, builtin, modorder));
            let listed = listed.chain(lists.obj_m.iter().map(|d| (d, false, modorder)));
            for (d, b, m) in listed.filter(|(d, _, _)| d.ends_with('/')) {
                let e = subdirs.entry(join(&dir, d)).or_default();
                *e = (e.0 || b, e.1 || m);
            }
            for d in &lists.subdir {
                subdirs.entry(join(&dir, d)).or_default();
            }
            queue.extend(subdirs.into_iter().filter(|(d, _)| *d != dir).map(|(d, (b, m))| (d, b, m)));
            descent.files.insert(rel.clone(), file);
            descent.dirs.insert(dir, Visit { file: Some(rel), builtin, modorder, lists });
        }
        Ok(descent)
    }

    /// Run the top Makefile with the arch Makefile read where it is included; returns the
    /// variables it exports (what every directory's run starts with).
    fn top(&mut self, tree: &Path, config: &DotConfig) -> Result<Vec<(String, String)>, String> {
        let read = |rel: &str| read_kbuild(&tree.join(rel)).map_err(|d| format!("{rel}: {}", d.message));
        let arch_rel = format!("arch/{}/Makefile", self.arch);
        let (top, arch) = (read("Makefile")?, read(&arch_rel)?);
        let include = "include $(srctree)/arch/$(SRCARCH)/Makefile";
        let spliced: String =
            top.lines().map(|l| if l.trim() == include { arch.clone() } else { format!("{l}\n") }).collect();
        let mut env = Env::with(config.values.clone());
        // As the make that runs the descent sees it: the sub-make in the output directory
        // (`sub_make_done`, already there, `--no-print-directory` set), no goal given.
        let preset = [
            ("SRCARCH", self.arch.as_str()),
            ("srctree", "."),
            ("objtree", "."),
            ("sub_make_done", "1"),
            ("abs_objtree", "."),
            ("CURDIR", "."),
            ("MAKEFLAGS", "--no-print-directory"),
        ];
        for (name, value) in preset {
            env.set(name, value);
        }
        let file = makefile::parse(&spliced);
        env.run(&file, &mut Evaluate);
        // Exported by `export NAME := …` or by a separate `export NAME …` line.
        let mut names: Vec<String> = file
            .assignments
            .iter()
            .filter(|a| a.modifiers.iter().any(|m| m == "export"))
            .map(|a| env.expand(&a.name).trim().to_string())
            .collect();
        for line in spliced.lines() {
            if let Some(rest) = line.strip_prefix("export ").filter(|r| !r.contains('=')) {
                names.extend(rest.split_whitespace().map(|n| env.expand(n)));
            }
        }
        names.sort();
        names.dedup();
        let mut out: Vec<(String, String)> =
            names.into_iter().filter(|n| !n.is_empty()).map(|n| (n.clone(), env.value(&n))).collect();
        out.push(("SRCARCH".into(), self.arch.clone()));
        out.push(("srctree".into(), ".".into()));
        out.push(("objtree".into(), ".".into()));
        self.files.insert(arch_rel, makefile::parse(&arch));
        self.files.insert("Makefile".into(), makefile::parse(&top));
        Ok(out)
    }

    /// The variables a run of `dir`'s kbuild file starts with in this build, as Kbuild's
    /// sub-make has them: what the top Makefile exports (`BITS` for `obj-y += irq_$(BITS).o`),
    /// and `obj`/`src`. Each answer about one of its objects evaluates the file with them.
    pub fn preset(&self, dir: &str) -> Vec<(String, String)> {
        let mut out = self.exported.clone();
        out.push(("obj".into(), dir.to_string()));
        out.push(("src".into(), dir.to_string()));
        out
    }

    /// Every object the build compiles into vmlinux or a module, with how.
    pub fn objects(&self) -> impl Iterator<Item = (&str, Built)> {
        self.objects.iter().map(|(o, b)| (o.as_str(), *b))
    }

    /// Whether Kbuild descends into `dir` (relative to the tree, `.` the top).
    pub fn descends(&self, dir: &str) -> bool {
        self.dirs.contains_key(dir.trim_end_matches('/'))
    }

    /// How `object` (relative to the tree, `mm/kmsan/core.o`) is built, and for `n` the line
    /// that decides it.
    pub fn built(&self, object: &str) -> Answer {
        let object = join(".", object);
        if let Some(b) = self.objects.get(&object) {
            let why = match b {
                Built::Y => "built in (a member of a built-in.a or lib.a)",
                _ => "built as (part of) a module",
            };
            return Answer { built: *b, why: why.into(), at: None };
        }
        let dir = parent(&object);
        if let Some(v) = self.dirs.get(dir) {
            return self.unlisted(&object, dir, v);
        }
        // The nearest directory Kbuild reaches, and the line there naming the way down.
        let mut up = dir;
        while !self.dirs.contains_key(up) && up != "." {
            up = parent(up);
        }
        let below = object.strip_prefix(&format!("{up}/")).unwrap_or(&object);
        let child = below.split('/').next().unwrap_or(below);
        let mut at = self.dirs.get(up).and_then(|v| v.file.as_deref()).map(|f| self.mention(f, &format!("{child}/")));
        // Directories the top lists through the arch Makefile (`drivers-$(CONFIG_PCI) += arch/x86/pci/`).
        if at.as_ref().is_none_or(|a| a.line.is_none()) {
            let arch_file = format!("arch/{}/Makefile", self.arch);
            let deeper = self.mention(&arch_file, &format!("{}/", join(up, child)));
            if deeper.line.is_some() {
                at = Some(deeper);
            }
        }
        let shown = if up == "." { "the top directory".to_string() } else { format!("{up}/") };
        Answer {
            built: Built::N,
            why: format!("Kbuild does not descend into {dir}/: {shown} does not list it in this configuration"),
            at,
        }
    }

    /// The answer for an object of a directory Kbuild reaches that no built list holds.
    fn unlisted(&self, object: &str, dir: &str, v: &Visit) -> Answer {
        let name = object.strip_prefix(&format!("{dir}/")).unwrap_or(object);
        let in_list = |l: &[String]| l.iter().any(|o| o == name);
        let why = if in_list(&v.lists.real_obj_y) {
            format!(
                "listed in obj-y, but {dir}/ is reached only through subdir-y or obj-m: its built-in.a is not built"
            )
        } else if in_list(&v.lists.real_obj_m) {
            format!("listed in obj-m, but {dir}/ is reached only through subdir-y: it is not in modules.order")
        } else {
            format!("not in obj-y, obj-m or lib-y of {dir}/ in this configuration")
        };
        let at = v.file.as_deref().map(|f| self.mention(f, name));
        Answer { built: Built::N, why, at }
    }

    /// The last line of `file` whose name or value holds a word naming `what` (an object
    /// `x.o`, or a directory `d/`): the one that lists (or fails to list) it.
    fn mention(&self, file: &str, what: &str) -> At {
        let Some(parsed) = self.files.get(file) else {
            return At { file: file.into(), line: None, text: String::new() };
        };
        let names = |w: &str| {
            let w = w.trim_start_matches("$(obj)/").trim_start_matches("$(src)/");
            w == what || (what.ends_with('/') && (w.starts_with(what) || w == what.trim_end_matches('/')))
        };
        let hit = parsed.assignments.iter().rev().find(|a| a.value.split_whitespace().any(names));
        match hit {
            Some(a) => At {
                file: file.into(),
                line: Some(a.line),
                text: format!("{} {} {}", a.name, a.op.as_str(), a.value.trim()),
            },
            None => At { file: file.into(), line: None, text: String::new() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        dir
    }

    const TOP: &str = "core-y :=\ndrivers-y :=\nlibs-y := lib/\ninclude $(srctree)/arch/$(SRCARCH)/Makefile\n\
                       export ARCH_CORE := $(core-y)\nexport ARCH_LIB := $(filter %/, $(libs-y))\n\
                       export ARCH_DRIVERS := $(drivers-y) $(drivers-m)\n";

    #[test]
    fn the_descent_follows_the_lists_under_the_config() {
        let t = tree(&[
            ("Makefile", TOP),
            ("Kbuild", "obj-y += arch/$(SRCARCH)/ $(ARCH_CORE)\nobj-y += mm/\nobj-y += $(ARCH_LIB) $(ARCH_DRIVERS)\n"),
            (
                "arch/x86/Makefile",
                "libs-y += arch/x86/lib/\ndrivers-$(CONFIG_PCI) += arch/x86/pci/\nexport BITS := 64\n",
            ),
            ("arch/x86/Kbuild", "obj-y += kernel/\n"),
            ("arch/x86/kernel/Makefile", "obj-y += head$(BITS).o\nobj-$(CONFIG_M) += mod.o\n"),
            ("arch/x86/lib/Makefile", "lib-y += insn.o\nobj-y += memcpy_64.o\n"),
            ("arch/x86/pci/Makefile", "obj-y += pci.o\n"),
            ("arch/arm64/Makefile", "libs-y := arch/arm64/lib/ $(libs-y)\n"),
            ("arch/arm64/kernel/Makefile", "obj-y += head.o\n"),
            (
                "lib/Makefile",
                "lib-y += sort.o\nobj-y += string.o\nsubdir-y += tests\ncomp-y := a.o sub/b.o\nobj-m += comp.o\n",
            ),
            ("lib/tests/Makefile", "obj-y += t.o\n"),
            ("mm/Makefile", "obj-y += slub.o\nobj-$(CONFIG_KMSAN) += kmsan/\n"),
            ("mm/kmsan/Makefile", "obj-y := core.o\n"),
        ]);
        let config = DotConfig::parse("CONFIG_X86=y\nCONFIG_M=m\nCONFIG_MODULES=y\n").unwrap();
        let d = Descent::walk(t.path(), &config).unwrap();
        assert_eq!(d.arch, "x86");
        let built: Vec<(&str, Built)> = d.objects().collect();
        assert_eq!(
            built,
            [
                ("arch/x86/kernel/head64.o", Built::Y),
                ("arch/x86/kernel/mod.o", Built::M),
                ("arch/x86/lib/insn.o", Built::Y),
                ("arch/x86/lib/memcpy_64.o", Built::Y),
                ("lib/a.o", Built::M),
                ("lib/sort.o", Built::Y),
                ("lib/string.o", Built::Y),
                ("lib/sub/b.o", Built::M),
                ("mm/slub.o", Built::Y),
            ]
        );
        let kmsan = d.built("mm/kmsan/core.o");
        assert_eq!(kmsan.built, Built::N);
        let at = kmsan.at.unwrap();
        assert_eq!((at.to_string(), at.text.as_str()), ("mm/Makefile:2".into(), "obj-$(CONFIG_KMSAN) += kmsan/"));
        let pci = d.built("arch/x86/pci/pci.o").at.unwrap();
        assert_eq!(pci.to_string(), "arch/x86/Makefile:2");
        let arm = d.built("arch/arm64/kernel/head.o");
        assert_eq!((arm.built, arm.at.unwrap().to_string()), (Built::N, "Kbuild:1".into()));
        // subdir-y visits without linking: its obj-y objects are not built in.
        let t_o = d.built("lib/tests/t.o");
        assert_eq!(t_o.built, Built::N);
        assert!(t_o.why.contains("subdir-y"), "{t_o:?}");
        assert_eq!(d.built("lib/comp.o").built, Built::N, "a composite is linked from its parts");
        let with = DotConfig::parse("CONFIG_X86=y\nCONFIG_KMSAN=y\n").unwrap();
        assert_eq!(Descent::walk(t.path(), &with).unwrap().built("mm/kmsan/core.o").built, Built::Y);
    }
}
