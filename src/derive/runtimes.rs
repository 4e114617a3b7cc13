//! The runtime data of `policy/runtimes.toml`, compiled into the binary: per mechanism the
//! runtime's own files, entry prefixes, hook prefixes, stop points with reasons, and the
//! configuration that builds it with each check as a call.

use toml_edit::{DocumentMut, Item, Table};

use crate::mechanism::MechId;

/// The bundled data, kept as a file beside the requirements so a change to it is a reviewed diff.
pub const RUNTIMES_TOML: &str = include_str!("../../policy/runtimes.toml");

/// A group of stop points sharing one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub functions: Vec<String>,
    pub why: String,
}

/// Kconfig symbols (without `CONFIG_`) for `scripts/config`, and those that must end up `y`;
/// and the compiler, which Kbuild takes from make's command line (`LLVM=1`), not the `.config`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    pub enable: Vec<String>,
    pub disable: Vec<String>,
    pub require: Vec<String>,
    /// `compiler = "clang"`: every make call gets `LLVM=1` (clang, lld and the LLVM binutils).
    pub clang: bool,
}

/// One mechanism's runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    pub mech: MechId,
    /// Paths relative to the tree: an object (`kernel/kcov.o`) or a directory (`mm/kasan/`).
    pub files: Vec<String>,
    pub entries: Vec<String>,
    pub entries_why: String,
    pub hooks: Vec<String>,
    pub stops: Vec<Stop>,
    pub config: Config,
    /// Why the mechanism cannot be derived on this toolchain (KMSAN needs clang).
    pub unsupported: Option<String>,
}

impl Runtime {
    /// Whether `object` (relative to the tree, `mm/kasan/common.o`) is one of the runtime's files.
    pub fn owns(&self, object: &str) -> bool {
        self.files.iter().any(|f| if f.ends_with('/') { object.starts_with(f.as_str()) } else { object == f })
    }

    /// Whether a function of that name (clone suffixes dropped) is an entry.
    pub fn is_entry_name(&self, name: &str) -> bool {
        self.entries.iter().any(|p| base_name(name).starts_with(p.as_str()))
    }

    /// Whether a call to a symbol of that name is an instrumentation site.
    pub fn is_hook(&self, symbol: &str) -> bool {
        self.hooks.iter().any(|p| symbol.starts_with(p.as_str()))
    }

    /// The stop group a function belongs to, by its name without clone suffixes.
    pub fn stop_for(&self, name: &str) -> Option<&Stop> {
        let base = base_name(name);
        self.stops.iter().find(|s| s.functions.iter().any(|f| f == base))
    }
}

/// `foo` for gcc's clones `foo.constprop.0`, `foo.isra.0`, `foo.part.0`, `foo.cold`.
pub fn base_name(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

/// The bundled runtimes.
pub fn bundled() -> Result<Vec<Runtime>, String> {
    parse(RUNTIMES_TOML)
}

/// Parse runtime data; an error names the `[[runtime]]` and key.
pub fn parse(text: &str) -> Result<Vec<Runtime>, String> {
    let doc: DocumentMut = text.parse().map_err(|e| format!("runtimes.toml: {e}"))?;
    let Some(runtimes) = doc.get("runtime").and_then(Item::as_array_of_tables) else {
        return Err("runtimes.toml: no [[runtime]] tables".into());
    };
    runtimes
        .iter()
        .enumerate()
        .map(|(i, t)| runtime(t).map_err(|e| format!("runtimes.toml [[runtime]] #{}: {e}", i + 1)))
        .collect()
}

fn runtime(t: &Table) -> Result<Runtime, String> {
    let name = string(t, "mechanism")?.ok_or("`mechanism` is missing")?;
    let mech = MechId::by_name(&name).ok_or_else(|| format!("unknown mechanism `{name}`"))?;
    let unsupported = string(t, "unsupported")?;
    let stops = match t.get("stop") {
        None => Vec::new(),
        Some(item) => item
            .as_array_of_tables()
            .ok_or("`stop` must be [[runtime.stop]] tables")?
            .iter()
            .map(|s| {
                let why = string(s, "why")?.filter(|w| !w.trim().is_empty()).ok_or("a stop needs a non-empty `why`")?;
                Ok(Stop { functions: strings(s, "functions")?, why })
            })
            .collect::<Result<_, String>>()?,
    };
    let config = config(t)?;
    let runtime = Runtime {
        mech,
        files: strings(t, "files")?,
        entries: strings(t, "entries")?,
        entries_why: string(t, "entries-why")?.unwrap_or_default(),
        hooks: strings(t, "hooks")?,
        stops,
        config,
        unsupported,
    };
    if runtime.unsupported.is_none()
        && (runtime.files.is_empty() || runtime.entries.is_empty() || runtime.hooks.is_empty())
    {
        return Err(format!("`{name}` needs `files`, `entries` and `hooks` (or `unsupported` saying why not)"));
    }
    Ok(runtime)
}

/// A table's `config` (`enable`, `disable`, `require`), empty when absent.
fn config(t: &Table) -> Result<Config, String> {
    let Some(item) = t.get("config") else { return Ok(Config::default()) };
    let c = item.as_table_like().ok_or("`config` must be a table")?;
    let list =
        |key: &str| -> Result<Vec<String>, String> { c.get(key).map_or(Ok(Vec::new()), |v| string_list(v, key)) };
    let clang = match c.get("compiler").map(|v| v.as_str().ok_or("`compiler` must be a string")).transpose()? {
        None | Some("gcc") => false,
        Some("clang") => true,
        Some(other) => return Err(format!("unknown `compiler` `{other}`: use \"gcc\" or \"clang\"")),
    };
    Ok(Config { enable: list("enable")?, disable: list("disable")?, require: list("require")?, clang })
}

impl Config {
    /// This configuration with `more`'s symbols after its own.
    pub fn with(&self, more: &Config) -> Config {
        let join = |a: &[String], b: &[String]| -> Vec<String> {
            let mut all = a.to_vec();
            all.extend(b.iter().filter(|s| !a.contains(s)).cloned());
            all
        };
        Config {
            enable: join(&self.enable, &more.enable),
            disable: join(&self.disable, &more.disable),
            require: join(&self.require, &more.require),
            clang: self.clang || more.clang,
        }
    }

    /// make's variables for this configuration, on every make call (configure and build alike:
    /// without `LLVM=1` Kbuild would configure the tree again for gcc).
    pub fn make_vars(&self) -> &'static [&'static str] {
        if self.clang {
            &["LLVM=1"]
        } else {
            &[]
        }
    }
}

/// What a boot adds to a runtime's configuration (`[boot]`), and what `--preempt-rt` adds on top
/// (`[boot.preempt-rt]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    pub config: Config,
    pub preempt_rt: Config,
}

/// The bundled `[boot]` table.
pub fn boot() -> Result<Boot, String> {
    let doc: DocumentMut = RUNTIMES_TOML.parse().map_err(|e| format!("runtimes.toml: {e}"))?;
    let t = doc.get("boot").and_then(Item::as_table).ok_or("runtimes.toml: no [boot] table")?;
    let rt = t.get("preempt-rt").and_then(Item::as_table).ok_or("runtimes.toml: no [boot.preempt-rt] table")?;
    Ok(Boot {
        config: config(t).map_err(|e| format!("runtimes.toml [boot]: {e}"))?,
        preempt_rt: config(rt).map_err(|e| format!("runtimes.toml [boot.preempt-rt]: {e}"))?,
    })
}

fn string(t: &Table, key: &str) -> Result<Option<String>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(v) => v.as_str().map(|s| Some(s.to_string())).ok_or_else(|| format!("`{key}` must be a string")),
    }
}

fn strings(t: &Table, key: &str) -> Result<Vec<String>, String> {
    t.get(key).map_or(Ok(Vec::new()), |v| string_list(v, key))
}

fn string_list(v: &Item, key: &str) -> Result<Vec<String>, String> {
    let array = v.as_array().ok_or_else(|| format!("`{key}` must be a list of strings"))?;
    array
        .iter()
        .map(|s| s.as_str().map(str::to_string).ok_or_else(|| format!("`{key}` must be a list of strings")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_runtimes_parse_and_say_why() {
        let all = bundled().unwrap();
        let kasan = all.iter().find(|r| r.mech.get().name == "kasan").unwrap();
        assert!(kasan.is_entry_name("__asan_load8_noabort") && kasan.is_entry_name("__kasan_slab_free"));
        assert!(!kasan.is_entry_name("kasan_save_stack"));
        assert!(kasan.is_hook("__asan_store4_noabort") && !kasan.is_hook("__kasan_kmalloc"));
        assert!(kasan.owns("mm/kasan/common.o") && !kasan.owns("mm/kasanx.o"));
        assert!(kasan.stop_for("__schedule").is_some() && kasan.stop_for("kasan_report.cold").is_some());
        assert!(kasan.stops.iter().all(|s| !s.why.is_empty()));
        let kmsan = all.iter().find(|r| r.mech.get().name == "kmsan").unwrap();
        assert!(kmsan.unsupported.is_none() && kmsan.config.clang && !kasan.config.clang);
        assert_eq!(kmsan.config.make_vars(), ["LLVM=1"]);
        assert!(kmsan.is_hook("__msan_metadata_ptr_for_load_8") && kmsan.is_entry_name("kmsan_slab_alloc"));
        assert!(kmsan.stop_for("kmsan_init_runtime").is_some() && kmsan.stop_for("kmsan_report").is_some());
    }

    #[test]
    fn boot_adds_a_console_and_an_initramfs() {
        let boot = boot().unwrap();
        let kasan = bundled().unwrap().into_iter().find(|r| r.mech.get().name == "kasan").unwrap();
        let both = kasan.config.with(&boot.config);
        for s in ["KASAN", "PROVE_LOCKING", "SERIAL_8250_CONSOLE", "BLK_DEV_INITRD", "ACPI"] {
            assert!(both.require.iter().any(|r| r == s), "{s} missing from {both:?}");
        }
        assert_eq!(both.enable.iter().filter(|s| *s == "SMP").count(), 1, "{both:?}");
        assert!(boot.preempt_rt.require.contains(&"PREEMPT_RT".to_string()));
    }

    #[test]
    fn bad_data_is_named() {
        let e = parse("[[runtime]]\nmechanism = \"kasan\"\nfiles = [\"mm/kasan/\"]\n").unwrap_err();
        assert!(e.contains("#1") && e.contains("needs `files`, `entries` and `hooks`"), "{e}");
        let e = parse("[[runtime]]\nmechanism = \"kasn\"\n").unwrap_err();
        assert!(e.contains("unknown mechanism `kasn`"), "{e}");
        let e = parse("[[runtime]]\nmechanism = \"kasan\"\nfiles = [\"a/\"]\nentries = [\"x\"]\nhooks = [\"y\"]\n[[runtime.stop]]\nfunctions = [\"f\"]\n").unwrap_err();
        assert!(e.contains("non-empty `why`"), "{e}");
        let e = parse("[[runtime]]\nmechanism = \"kasan\"\nfiles = [\"a/\"]\nentries = [\"x\"]\nhooks = [\"y\"]\nconfig.compiler = \"icc\"\n").unwrap_err();
        assert!(e.contains("unknown `compiler` `icc`"), "{e}");
    }
}
