//! The mechanism table: every instrumentation Kbuild can switch per object or directory.
//!
//! This is the only place that names the Kbuild variables. Adding a mechanism is one row here;
//! the policy parser, the Makefile reader, the emitter, the rules reader and the resolver all
//! work from these rows.

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
    variable("ubsan-signed-wrap", "UBSAN signed wrap", "CONFIG_UBSAN", "UBSAN_SIGNED_WRAP"),
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

impl std::fmt::Display for MechId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get().name)
    }
}

/// The policy names of all mechanisms, for "expected one of" hints.
pub fn names() -> Vec<&'static str> {
    MECHANISMS.iter().map(|m| m.name).collect()
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
    fn lookup_round_trips() {
        for id in MechId::all() {
            assert_eq!(MechId::by_name(id.get().name), Some(id));
        }
        assert_eq!(MechId::by_name("KASAN"), None);
    }
}
