//! Fixes as commands. A finding names the command that clears it as a typed [`Fix`]; what the
//! user sees is that command rendered for the [`Invocation`] in use: the front end that
//! printed it (`sanpolicy` as it was run, `cargo xtask`, or the pre-commit framework's
//! manual-stage hooks) and the user's own `--policy`, `--tree`, `--config` and `--layout`, so a
//! fix line copied and pasted into the same directory runs as printed. No finding spells a
//! command out itself; only [`Invocation::argv`] does.

use std::collections::BTreeSet;

use serde::Serialize;

/// A command that clears a finding, or one step towards it. Variants are in the order to run
/// them: `sync` moves no kbuild line, so it goes first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fix {
    /// Take the tree's changes into the policy.
    Sync,
    /// Write the policy into the tree.
    GenMakefiles,
    /// Write the policy into the tree over what the tree changed.
    GenMakefilesForce,
    /// Adopt the tree: write the policy from its own lines.
    ImportAdopt,
    /// Run every check (what the tree breaks, not only drift).
    Check,
    /// Write the policy's profile tables into the Cargo workspace.
    GenCargo,
    /// A command of another program (git, rm), word by word: the same for every front end.
    Run(Vec<String>),
}

impl Fix {
    /// `git ARGS…`.
    pub fn git(args: &[&str]) -> Fix {
        Fix::Run(std::iter::once("git").chain(args.iter().copied()).map(str::to_string).collect())
    }

    /// A stable name for JSON and SARIF consumers.
    pub fn name(&self) -> &'static str {
        match self {
            Fix::Sync => "sync",
            Fix::GenMakefiles => "gen-makefiles",
            Fix::GenMakefilesForce => "gen-makefiles --force",
            Fix::ImportAdopt => "import --adopt",
            Fix::Check => "check",
            Fix::GenCargo => "gen-cargo",
            Fix::Run(_) => "run",
        }
    }

    /// The sanpolicy subcommand and its own arguments; `None` for another program's command.
    fn subcommand(&self) -> Option<&'static [&'static str]> {
        Some(match self {
            Fix::Sync => &["sync"],
            Fix::GenMakefiles => &["gen-makefiles"],
            Fix::GenMakefilesForce => &["gen-makefiles", "--force"],
            Fix::ImportAdopt => &["import", "--adopt"],
            Fix::Check => &["check"],
            Fix::GenCargo => &["gen-cargo"],
            Fix::Run(_) => return None,
        })
    }

    /// The pre-commit framework's hook id that runs this fix (`.pre-commit-hooks.yaml`, stage
    /// `manual`), for the fixes a commit can need.
    pub fn hook_id(&self) -> Option<&'static str> {
        Some(match self {
            Fix::Sync => "sanpolicy-sync",
            Fix::GenMakefiles => "sanpolicy-gen-makefiles",
            Fix::GenMakefilesForce => "sanpolicy-gen-makefiles-force",
            Fix::Check => "sanpolicy-check",
            _ => return None,
        })
    }
}

/// How the program a fix names is run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "program")]
pub enum FrontEnd {
    /// The `sanpolicy` binary, named as it was run (`sanpolicy`, `./target/debug/sanpolicy`,
    /// or the absolute path a git hook runs).
    Binary(String),
    /// `cargo xtask` in sanpolicy's own repository.
    Xtask,
    /// The pre-commit framework, whose environment alone holds the binary (`program`, its
    /// absolute path there): a fix is one of the manual-stage hooks sanpolicy ships where the
    /// user's `.pre-commit-config.yaml` lists it (`hooks`: the ids it lists), else the binary
    /// by that path, which runs from any shell.
    PreCommit { program: String, hooks: Vec<String> },
}

/// The invocation in use: what every fix is rendered for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Invocation {
    pub front: FrontEnd,
    /// The user's own flags, as typed (relative paths stay relative to where they ran).
    pub policy: Option<String>,
    pub tree: Option<String>,
    pub config: Option<String>,
    pub layout: Option<String>,
    pub workspace: Option<String>,
    /// The fixes are for what is staged (the pre-commit hook): `sync` and `gen-makefiles` stage
    /// exactly what they write (`--stage`).
    pub stage: bool,
}

impl Default for Invocation {
    fn default() -> Invocation {
        Invocation::of(FrontEnd::Binary("sanpolicy".into()))
    }
}

impl Invocation {
    /// `front` with none of the user's flags.
    pub fn of(front: FrontEnd) -> Invocation {
        Invocation { front, policy: None, tree: None, config: None, layout: None, workspace: None, stage: false }
    }

    /// The words of `fix` as it runs here.
    pub fn argv(&self, fix: &Fix) -> Vec<String> {
        let Some(sub) = fix.subcommand() else {
            let Fix::Run(words) = fix else { unreachable!("only `Run` has no subcommand") };
            return words.clone();
        };
        if let (FrontEnd::PreCommit { hooks, .. }, Some(id)) = (&self.front, fix.hook_id()) {
            if hooks.iter().any(|h| h == id) {
                return ["pre-commit", "run", id, "--hook-stage", "manual"].map(str::to_string).to_vec();
            }
        }
        let mut words: Vec<String> = match &self.front {
            FrontEnd::Binary(program) | FrontEnd::PreCommit { program, .. } => vec![program.clone()],
            FrontEnd::Xtask => vec!["cargo".into(), "xtask".into()],
        };
        words.extend(sub.iter().map(|s| s.to_string()));
        let mut flag = |name: &str, value: &Option<String>| {
            if let Some(v) = value {
                words.push(name.to_string());
                words.push(v.clone());
            }
        };
        match fix {
            Fix::Sync | Fix::GenMakefiles | Fix::GenMakefilesForce => {
                flag("--policy", &self.policy);
                flag("--tree", &self.tree);
            }
            Fix::ImportAdopt => {
                flag("--tree", &self.tree);
                flag("--policy", &self.policy);
                flag("--layout", &self.layout);
            }
            Fix::Check => {
                flag("--policy", &self.policy);
                flag("--tree", &self.tree);
                flag("--config", &self.config);
            }
            Fix::GenCargo => {
                flag("--policy", &self.policy);
                flag("--workspace", &self.workspace);
            }
            Fix::Run(_) => {}
        }
        if self.stage && matches!(fix, Fix::Sync | Fix::GenMakefiles | Fix::GenMakefilesForce) {
            words.push("--stage".into());
        }
        words
    }

    /// `fix` as one line a shell runs as printed.
    pub fn render(&self, fix: &Fix) -> String {
        self.argv(fix).iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
    }

    /// `fixes` as one sequence of commands to run in order (`` `a`, then `b` ``).
    pub fn sequence(&self, fixes: &BTreeSet<Fix>) -> String {
        fixes.iter().map(|f| format!("`{}`", self.render(f))).collect::<Vec<_>>().join(", then ")
    }

    /// This invocation for the pre-commit hook: its fixes stage what they write.
    pub fn staging(mut self) -> Invocation {
        self.stage = true;
        self
    }
}

/// `word` as a POSIX shell reads it back: as it is when it holds only characters no shell
/// treats specially, else in single quotes.
pub fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// One part of a hint: text, or a command rendered where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Piece {
    Text(String),
    Run(Fix),
}

impl From<&str> for Piece {
    fn from(text: &str) -> Piece {
        Piece::Text(text.to_string())
    }
}

impl From<String> for Piece {
    fn from(text: String) -> Piece {
        Piece::Text(text)
    }
}

impl From<Fix> for Piece {
    fn from(fix: Fix) -> Piece {
        Piece::Run(fix)
    }
}

/// How to fix a finding, in words with the commands in their place.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(transparent)]
pub struct Hint(pub Vec<Piece>);

impl Hint {
    /// The hint as the user reads it: each command rendered for `invocation`, in backticks.
    pub fn render(&self, invocation: &Invocation) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Run(fix) => format!("`{}`", invocation.render(fix)),
            })
            .collect()
    }

    /// The commands the hint names.
    pub fn fixes(&self) -> impl Iterator<Item = &Fix> {
        self.0.iter().filter_map(|p| match p {
            Piece::Run(f) => Some(f),
            Piece::Text(_) => None,
        })
    }
}

impl From<&str> for Hint {
    fn from(text: &str) -> Hint {
        Hint(vec![Piece::from(text)])
    }
}

impl From<String> for Hint {
    fn from(text: String) -> Hint {
        Hint(vec![Piece::from(text)])
    }
}

impl From<&String> for Hint {
    fn from(text: &String) -> Hint {
        Hint(vec![Piece::from(text.as_str())])
    }
}

/// A [`Hint`] of text and commands: `hint!["run ", Fix::Sync, " to take it"]`.
#[macro_export]
macro_rules! hint {
    ($($piece:expr),+ $(,)?) => {
        $crate::diagnostic::fix::Hint(vec![$($crate::diagnostic::fix::Piece::from($piece)),+])
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixes_carry_the_users_flags_through_each_front_end() {
        let mut inv = Invocation::of(FrontEnd::Binary("sanpolicy".into()));
        inv.policy = Some("../out side.toml".into());
        inv.tree = Some("linux".into());
        assert_eq!(inv.render(&Fix::Sync), "sanpolicy sync --policy '../out side.toml' --tree linux");
        inv.front = FrontEnd::Xtask;
        assert_eq!(
            inv.render(&Fix::GenMakefilesForce),
            "cargo xtask gen-makefiles --force --policy '../out side.toml' --tree linux"
        );
        let store = "/home/u/.cache/pre-commit/repo1/rustenv-system/bin/sanpolicy".to_string();
        inv.front = FrontEnd::PreCommit { program: store.clone(), hooks: vec!["sanpolicy-sync".into()] };
        assert_eq!(inv.render(&Fix::Sync), "pre-commit run sanpolicy-sync --hook-stage manual");
        // A hook the user's configuration does not list: the binary in the framework's store.
        assert_eq!(
            inv.render(&Fix::GenMakefiles),
            format!("{store} gen-makefiles --policy '../out side.toml' --tree linux")
        );
        let staged = Invocation::of(FrontEnd::Binary("/opt/bin/sanpolicy".into())).staging();
        assert_eq!(staged.render(&Fix::GenMakefiles), "/opt/bin/sanpolicy gen-makefiles --stage");
        assert_eq!(staged.render(&Fix::git(&["add", "it's"])), "git add 'it'\\''s'");
    }

    #[test]
    fn a_hint_renders_its_commands_in_place() {
        let h = crate::hint!["the tree moved: run ", Fix::Sync, " to take it, or ", Fix::GenMakefilesForce];
        let inv = Invocation::default();
        assert_eq!(
            h.render(&inv),
            "the tree moved: run `sanpolicy sync` to take it, or `sanpolicy gen-makefiles --force`"
        );
        assert_eq!(h.fixes().count(), 2);
        let set: BTreeSet<Fix> = [Fix::GenMakefiles, Fix::Sync].into();
        assert_eq!(inv.sequence(&set), "`sanpolicy sync`, then `sanpolicy gen-makefiles`");
    }
}
