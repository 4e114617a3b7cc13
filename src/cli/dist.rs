//! What is generated from the clap definition rather than written by hand: shell completions
//! (`sanpolicy completions SHELL`), man pages and the book's CLI reference page
//! (`docs/src/reference/cli.md`), so none of them can disagree with the command line itself.
//! `cargo xtask dist` writes the first two under `target/dist/`.

use std::io;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, ValueEnum};
use clap_complete::Shell;

use super::Cli;
use crate::output;

/// The whole command line as clap sees it (subcommands built, so their help is complete).
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// `sanpolicy completions SHELL`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to write a completion script for
    #[arg(value_name = "SHELL", value_enum)]
    pub shell: Shell,
}

/// The completion script for `shell`, for a binary called `sanpolicy`.
pub fn completion(shell: Shell) -> Vec<u8> {
    let mut cmd = command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "sanpolicy", &mut out);
    out
}

/// Print the completion script (the one job of `sanpolicy completions`).
pub(super) fn completions_run(args: &CompletionsArgs) -> u8 {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(&completion(args.shell));
    super::EXIT_OK
}

/// One man page per command: `sanpolicy.1`, then `sanpolicy-<command>.1` for each subcommand.
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let cmd = command();
    let mut pages = vec![("sanpolicy.1".to_string(), render_man(cmd.clone()))];
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("sanpolicy-{}", sub.get_name());
        let page = sub.clone().name(name.clone()).bin_name(format!("sanpolicy {}", sub.get_name()));
        pages.push((format!("{name}.1"), render_man(page)));
    }
    pages
}

fn render_man(cmd: clap::Command) -> Vec<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut out).expect("writing into a Vec cannot fail");
    out
}

/// The file name a shell loads its completion from, as each shell's packaging names it.
pub fn completion_file(shell: Shell) -> String {
    match shell {
        Shell::Bash => "sanpolicy".into(),
        Shell::Zsh => "_sanpolicy".into(),
        Shell::Fish => "sanpolicy.fish".into(),
        Shell::PowerShell => "_sanpolicy.ps1".into(),
        Shell::Elvish => "sanpolicy.elv".into(),
        _ => format!("sanpolicy.{shell}"),
    }
}

/// Write `man/*.1` and `completions/*` under `dir` (through the one atomic writer) and return
/// what was written.
pub fn write_dist(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let man = dir.join("man");
    std::fs::create_dir_all(&man)?;
    for (name, bytes) in man_pages() {
        let path = man.join(name);
        output::write_bytes_atomic(&path, &bytes, 0o644)?;
        written.push(path);
    }
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in Shell::value_variants() {
        let path = completions.join(completion_file(*shell));
        output::write_bytes_atomic(&path, &completion(*shell), 0o644)?;
        written.push(path);
    }
    Ok(written)
}

/// The book's CLI reference: every command's long help, as `--help` prints it.
pub fn reference_markdown() -> String {
    let mut cmd = command();
    let mut out = String::from(
        "# Command-line reference\n\n<!-- generated from the clap definitions (src/cli/) by tests/book.rs: do not edit -->\n\n\
         Every command's `--help`, as the `sanpolicy` binary prints it. `cargo xtask COMMAND` takes the\n\
         same options with this repository's defaults (`policy/linux.toml`, no tree).\n",
    );
    section(&mut out, "sanpolicy", &mut cmd);
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).filter(|n| n != "help").collect();
    for name in names {
        let sub = cmd.find_subcommand_mut(&name).expect("a listed subcommand");
        let mut sub = sub.clone().bin_name(format!("sanpolicy {name}"));
        section(&mut out, &format!("sanpolicy {name}"), &mut sub);
    }
    out
}

fn section(out: &mut String, title: &str, cmd: &mut clap::Command) {
    let help = cmd.render_long_help().to_string();
    let help: Vec<&str> = help.lines().map(str::trim_end).collect();
    out.push_str(&format!("\n## `{title}`\n\n```text\n{}\n```\n", help.join("\n").trim_end()));
}
