//! The mechanism table: every instrumentation Kbuild can switch per object or directory.
//!
//! This is the only place that names the Kbuild variables. Adding a mechanism is one row here;
//! the policy parser, the Makefile reader, the emitter, the rules reader and the resolver all
//! work from these rows.
//!
//! [`RUST_MECHANISMS`] is the same for rustc and Cargo (`[[crate]]` entries, `gen-cargo`): one
//! row per sanitizer, coverage pass or profile key, with the runtime hooks that make a crate
//! recursion-prone. It is a separate table so the Kbuild stages never see a Cargo row.

/// What a unit asks of one mechanism: the two values the table gives each mechanism
/// (`skip_value`, `force_value`, or removing and re-adding its flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setting {
    /// Exempt: the object is not instrumented (objtool: not checked; ftrace: flags removed).
    Skip,
    /// Forced on, whatever the directory or default says.
    Force,
}

/// How the kernel decides whether a word list means "on".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polarity {
    /// `$(patsubst n%,,…)`: off iff every word starts with a lowercase `n`.
    OffIfAllN,
    /// `$(filter-out y%,…)` (objtool): skipped iff every word starts with a lowercase `y`.
    SkipIfAllY,
}

/// How a mechanism is written in a kbuild file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `VAR_<stem>.o := VALUE` per object and `VAR := VALUE` per directory.
    Variable {
        var: &'static str,
        /// The value that exempts (skips) the object from the mechanism.
        skip_value: &'static str,
        /// The value that forces the mechanism on.
        force_value: &'static str,
        polarity: Polarity,
    },
    /// Instrumentation added through compiler flags that are removed to exempt an object.
    FlagRemoval {
        /// Per-object removal variable prefix: `CFLAGS_REMOVE_` + `<stem>.o`.
        remove_prefix: &'static str,
        /// Per-object addition variable prefix (re-enables): `CFLAGS_` + `<stem>.o`.
        add_prefix: &'static str,
        /// Directory removal variable, written verbatim (may contain a config reference).
        dir_remove_var: &'static str,
        /// The flags expression that is removed or added.
        flags: &'static str,
        /// Compiler words whose presence means the mechanism is on.
        marker_words: &'static [&'static str],
        /// What `flags` expands to when the mechanism is configured, for the resolver.
        expansion: &'static str,
    },
}

/// One instrumentation mechanism.
#[derive(Debug, PartialEq, Eq)]
pub struct Mechanism {
    /// Name used in policy files (`skip = ["kasan"]`).
    pub name: &'static str,
    /// Human title used in reports.
    pub title: &'static str,
    /// The Kconfig option without which the mechanism does nothing.
    pub config: &'static str,
    /// File, relative to the kernel tree, whose expression decides the mechanism.
    pub rules_file: &'static str,
    pub form: Form,
}

const MAKEFILE_LIB: &str = "scripts/Makefile.lib";

const fn variable(name: &'static str, title: &'static str, config: &'static str, var: &'static str) -> Mechanism {
    Mechanism {
        name,
        title,
        config,
        rules_file: MAKEFILE_LIB,
        form: Form::Variable { var, skip_value: "n", force_value: "y", polarity: Polarity::OffIfAllN },
    }
}

/// Every mechanism, in the order reports and generated blocks list them.
pub static MECHANISMS: &[Mechanism] = &[
    variable("kasan", "KASAN", "CONFIG_KASAN", "KASAN_SANITIZE"),
    variable("kcsan", "KCSAN", "CONFIG_KCSAN", "KCSAN_SANITIZE"),
    variable("kcsan-barriers", "KCSAN barrier instrumentation", "CONFIG_KCSAN", "KCSAN_INSTRUMENT_BARRIERS"),
    variable("kcov", "KCOV", "CONFIG_KCOV", "KCOV_INSTRUMENT"),
    variable("ubsan", "UBSAN", "CONFIG_UBSAN", "UBSAN_SANITIZE"),
    variable("ubsan-signed-wrap", "UBSAN signed wrap", "CONFIG_UBSAN_SIGNED_WRAP", "UBSAN_SIGNED_WRAP"),
    variable("kmsan", "KMSAN", "CONFIG_KMSAN", "KMSAN_SANITIZE"),
    variable("kmsan-checks", "KMSAN checks", "CONFIG_KMSAN", "KMSAN_ENABLE_CHECKS"),
    variable("gcov", "GCOV", "CONFIG_GCOV_KERNEL", "GCOV_PROFILE"),
    Mechanism {
        name: "objtool",
        title: "objtool",
        config: "CONFIG_OBJTOOL",
        rules_file: "scripts/Makefile.build",
        // Inverted: `OBJECT_FILES_NON_STANDARD := y` is what skips objtool.
        form: Form::Variable {
            var: "OBJECT_FILES_NON_STANDARD",
            skip_value: "y",
            force_value: "n",
            polarity: Polarity::SkipIfAllY,
        },
    },
    Mechanism {
        name: "ftrace",
        title: "ftrace",
        config: "CONFIG_FUNCTION_TRACER",
        rules_file: MAKEFILE_LIB,
        form: Form::FlagRemoval {
            remove_prefix: "CFLAGS_REMOVE_",
            add_prefix: "CFLAGS_",
            dir_remove_var: "ccflags-remove-$(CONFIG_FUNCTION_TRACER)",
            flags: "$(CC_FLAGS_FTRACE)",
            marker_words: &["-pg"],
            expansion: "-pg -mrecord-mcount",
        },
    },
];

/// Index of a mechanism in [`MECHANISMS`]; ordering follows the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MechId(pub usize);

impl Mechanism {
    /// The word every directive of the mechanism contains: the variable (`KASAN_SANITIZE`), or
    /// the make variable holding the removed flags (`CC_FLAGS_FTRACE`).
    pub fn directive_name(&self) -> &'static str {
        match self.form {
            Form::Variable { var, .. } => var,
            Form::FlagRemoval { flags, .. } => flags.trim_start_matches("$(").trim_end_matches(')'),
        }
    }
}

impl Mechanism {
    /// Whether Kbuild has a line for `setting` of this mechanism on one object (`per_object`)
    /// or on a whole directory. Only a flag-removal mechanism forced on for a directory has
    /// none: Kbuild has no directory-wide way to add flags back. The policy parser refuses
    /// such a setting and the emitter writes no line for it, both from this one answer.
    pub fn expressible(&self, setting: Setting, per_object: bool) -> bool {
        match self.form {
            Form::Variable { .. } => true,
            Form::FlagRemoval { .. } => per_object || setting == Setting::Skip,
        }
    }
}

impl MechId {
    pub fn get(self) -> &'static Mechanism {
        &MECHANISMS[self.0]
    }

    pub fn all() -> impl Iterator<Item = MechId> {
        (0..MECHANISMS.len()).map(MechId)
    }

    pub fn by_name(name: &str) -> Option<MechId> {
        MECHANISMS.iter().position(|m| m.name == name).map(MechId)
    }
}

impl serde::Serialize for MechId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.get().name)
    }
}

impl std::fmt::Display for MechId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get().name)
    }
}

/// Words every directive line contains one of: files without any hold no directive, so a walk
/// over a tree need not parse them.
pub fn directive_words() -> Vec<&'static str> {
    let mut words: Vec<&'static str> = MECHANISMS.iter().map(Mechanism::directive_name).collect();
    for m in MECHANISMS {
        if let Form::FlagRemoval { marker_words, .. } = m.form {
            words.extend(marker_words);
        }
    }
    words
}

/// The policy names of all mechanisms, for "expected one of" hints.
pub fn names() -> Vec<&'static str> {
    MECHANISMS.iter().map(|m| m.name).collect()
}

/// The make variables holding each mechanism's compiler flags, as `scripts/Makefile.lib` adds
/// them for an instrumented object (`$(CFLAGS_KASAN)` in the `then` of its `$(if …)`). A line
/// that passes one of them to an object itself (`CFLAGS_kcsan_test.o := $(CFLAGS_KCSAN)`, a
/// directory's `ccflags-y`) instruments it whatever the mechanism's variables say. ftrace is not
/// listed: its per-object and directory lines are the mechanism's own form. A mechanism missing
/// here has no such variable (objtool, the KCSAN barrier and KMSAN check switches).
pub static FLAG_CARRIERS: &[(&str, &[&str])] = &[
    ("kasan", &["CFLAGS_KASAN", "RUSTFLAGS_KASAN"]),
    ("kcsan", &["CFLAGS_KCSAN"]),
    ("kcov", &["CFLAGS_KCOV"]),
    ("ubsan", &["CFLAGS_UBSAN"]),
    ("ubsan-signed-wrap", &["CFLAGS_UBSAN_SIGNED_WRAP"]),
    ("kmsan", &["CFLAGS_KMSAN"]),
    ("gcov", &["CFLAGS_GCOV"]),
];

impl MechId {
    /// The flag variables of [`FLAG_CARRIERS`] for this mechanism (none for most of the rest).
    pub fn flag_carriers(self) -> &'static [&'static str] {
        FLAG_CARRIERS.iter().find(|(n, _)| *n == self.get().name).map_or(&[], |(_, v)| v)
    }
}

/// How a mechanism is switched for one Cargo package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RustForm {
    /// `-Zsanitizer=<value>` in the profile's `rustflags` (unstable: `profile-rustflags`).
    Sanitizer {
        value: &'static str,
        /// rustc refuses to link crates that disagree on it (a "target modifier", RFC 3716) unless
        /// they pass `-Cunsafe-allow-abi-mismatch=sanitizer`. `address` and `leak` are exempt.
        target_modifier: bool,
    },
    /// Codegen flags in the profile's `rustflags` (unstable: `profile-rustflags`).
    Flags { flags: &'static [&'static str] },
    /// A stable boolean profile key: `true` when on, `false` when skipped.
    ProfileKey { key: &'static str },
}

/// One instrumentation mechanism of rustc, switched per Cargo package.
#[derive(Debug, PartialEq, Eq)]
pub struct RustMechanism {
    /// Name used in `[[crate]]` and `[[profile]]` entries (`skip = ["asan"]`).
    pub name: &'static str,
    pub title: &'static str,
    pub form: RustForm,
    /// Symbol prefixes of the runtime hooks the instrumentation calls: a crate defining one
    /// (`#[no_mangle] extern "C" fn __asan_load1`) recurses if instrumented, so must be exempt.
    pub hooks: &'static [&'static str],
    /// Names of this mechanism in `#[sanitize(NAME = "off")]` and `#[no_sanitize(NAME)]`.
    pub attributes: &'static [&'static str],
    /// The Kbuild mechanism with the same role, for hints.
    pub kbuild: Option<&'static str>,
}

const fn sanitizer(
    name: &'static str,
    title: &'static str,
    value: &'static str,
    target_modifier: bool,
    hooks: &'static [&'static str],
    attributes: &'static [&'static str],
    kbuild: Option<&'static str>,
) -> RustMechanism {
    RustMechanism { name, title, form: RustForm::Sanitizer { value, target_modifier }, hooks, attributes, kbuild }
}

/// Every rustc mechanism a `[[crate]]` entry can skip or force, in the order generated tables
/// list them. Adding one is one row.
pub static RUST_MECHANISMS: &[RustMechanism] = &[
    sanitizer("asan", "AddressSanitizer", "address", false, &["__asan_"], &["address"], None),
    sanitizer("lsan", "LeakSanitizer", "leak", false, &["__lsan_"], &[], None),
    sanitizer("tsan", "ThreadSanitizer", "thread", true, &["__tsan_"], &["thread"], Some("kcsan")),
    sanitizer("msan", "MemorySanitizer", "memory", true, &["__msan_"], &["memory"], Some("kmsan")),
    sanitizer("hwasan", "HWAddressSanitizer", "hwaddress", true, &["__hwasan_"], &["hwaddress"], None),
    sanitizer("kasan", "KASAN", "kernel-address", true, &["__asan_"], &["address", "kernel_address"], Some("kasan")),
    RustMechanism {
        name: "coverage",
        title: "source-based coverage",
        form: RustForm::Flags { flags: &["-Cinstrument-coverage"] },
        hooks: &["__llvm_profile_"],
        attributes: &[],
        kbuild: Some("gcov"),
    },
    RustMechanism {
        name: "sancov",
        title: "SanitizerCoverage",
        // The flags Rust-for-Linux passes for KCOV (`RUSTFLAGS_KCOV`).
        form: RustForm::Flags {
            flags: &[
                "-Cpasses=sancov-module",
                "-Cllvm-args=-sanitizer-coverage-level=3",
                "-Cllvm-args=-sanitizer-coverage-trace-pc",
            ],
        },
        hooks: &["__sanitizer_cov_"],
        attributes: &[],
        kbuild: Some("kcov"),
    },
    RustMechanism {
        name: "overflow-checks",
        title: "overflow checks",
        form: RustForm::ProfileKey { key: "overflow-checks" },
        hooks: &[],
        attributes: &[],
        kbuild: Some("ubsan"),
    },
    RustMechanism {
        name: "debug-assertions",
        title: "debug assertions",
        form: RustForm::ProfileKey { key: "debug-assertions" },
        hooks: &[],
        attributes: &[],
        kbuild: None,
    },
];

/// Runtime hooks of instrumentation rustc never emits calls to: a Rust crate may define them
/// (for C code linked with it) without any exemption. Listed by the source scan, never required.
/// (rustc has no UBSan, its overflow checks panic; no KCSAN; its coverage is
/// `-Cinstrument-coverage`, not GCOV).
pub static FOREIGN_HOOKS: &[(&str, &str)] = &[("__ubsan_handle_", "UBSan"), ("__kcsan_", "KCSAN"), ("__gcov_", "GCOV")];

/// Index of a mechanism in [`RUST_MECHANISMS`]; ordering follows the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RustMechId(pub usize);

impl RustMechId {
    pub fn get(self) -> &'static RustMechanism {
        &RUST_MECHANISMS[self.0]
    }

    pub fn all() -> impl Iterator<Item = RustMechId> {
        (0..RUST_MECHANISMS.len()).map(RustMechId)
    }

    pub fn by_name(name: &str) -> Option<RustMechId> {
        RUST_MECHANISMS.iter().position(|m| m.name == name).map(RustMechId)
    }

    /// Whether this mechanism is switched through `rustflags` (needs `profile-rustflags`).
    pub fn uses_rustflags(self) -> bool {
        !matches!(self.get().form, RustForm::ProfileKey { .. })
    }
}

impl std::fmt::Display for RustMechId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get().name)
    }
}

/// The policy names of all rustc mechanisms, for "expected one of" hints.
pub fn rust_names() -> Vec<&'static str> {
    RUST_MECHANISMS.iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_variables_are_unique() {
        let mut names: Vec<_> = MECHANISMS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), MECHANISMS.len());
        for m in MECHANISMS {
            assert!(m.name.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{}", m.name);
        }
    }

    #[test]
    fn flag_carriers_name_mechanisms() {
        for (name, vars) in FLAG_CARRIERS {
            let id = MechId::by_name(name).unwrap_or_else(|| panic!("{name} is no mechanism"));
            assert_eq!(id.flag_carriers(), *vars);
        }
        assert!(MechId::by_name("objtool").unwrap().flag_carriers().is_empty());
    }

    #[test]
    fn lookup_round_trips() {
        for id in MechId::all() {
            assert_eq!(MechId::by_name(id.get().name), Some(id));
        }
        assert_eq!(MechId::by_name("KASAN"), None);
    }

    #[test]
    fn rust_rows_are_unique_and_well_formed() {
        let mut names: Vec<_> = RUST_MECHANISMS.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RUST_MECHANISMS.len());
        for id in RustMechId::all() {
            let m = id.get();
            assert_eq!(RustMechId::by_name(m.name), Some(id));
            assert!(m.name.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{}", m.name);
            assert!(m.kbuild.is_none_or(|k| MechId::by_name(k).is_some()), "{}", m.name);
            assert!(m.hooks.iter().all(|h| h.starts_with("__") && h.ends_with('_')), "{}", m.name);
        }
        // rustc's list: address and leak are not target modifiers, the others are.
        for m in RUST_MECHANISMS {
            if let RustForm::Sanitizer { value, target_modifier } = m.form {
                assert_eq!(target_modifier, !matches!(value, "address" | "leak"), "{value}");
            }
        }
    }
}
