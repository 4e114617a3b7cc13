//! `--config FILE` as Kconfig and make read it: the kernel's own `scripts/kconfig/conf` (built
//! from the 6.12 source package) turns a `.config` into `include/config/auto.conf`, GNU make
//! includes that, and what make sees for each symbol (its value, and whether it is defined at
//! all, which is what `ifdef` asks) must be what `DotConfig` says.

mod make_judge;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sanpolicy::kbuild::dotconfig::DotConfig;

const TARBALL: &str = "/usr/src/linux-source-6.12.tar.xz";

/// `scripts/kconfig/conf` built in `scratch` from the 6.12 sources (flex, bison and gcc, as the
/// kernel's `make` would).
fn build_conf(scratch: &Path) -> PathBuf {
    assert!(
        Path::new(TARBALL).is_file(),
        "{TARBALL} is missing: install it with `apt-get install linux-source-6.12` (.ci/run does)"
    );
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e} (flex, bison and gcc are needed)"));
        assert!(out.status.success(), "{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    };
    run(Command::new("tar").arg("-xJf").arg(TARBALL).arg("-C").arg(scratch).args([
        "--wildcards",
        "*/scripts/kconfig/*",
        "*/scripts/include/*",
    ]));
    let top = fs::read_dir(scratch).unwrap().next().unwrap().unwrap().path();
    let kconfig = top.join("scripts/kconfig");
    run(Command::new("flex").current_dir(&kconfig).args(["-o", "lexer.lex.c", "lexer.l"]));
    run(Command::new("bison").current_dir(&kconfig).args([
        "-t",
        "-o",
        "parser.tab.c",
        "--defines=parser.tab.h",
        "parser.y",
    ]));
    let conf = scratch.join("conf");
    let sources = [
        "conf.c",
        "confdata.c",
        "expr.c",
        "lexer.lex.c",
        "menu.c",
        "parser.tab.c",
        "preprocess.c",
        "symbol.c",
        "util.c",
    ];
    run(Command::new("gcc").current_dir(&kconfig).args(["-I", "../include", "-I", ".", "-o"]).arg(&conf).args(sources));
    conf
}

const KCONFIG: &str = "config MODULES\n\tbool \"modules\"\n\tmodules\n\tdefault y\n\
    config FOO\n\tbool \"foo\"\nconfig BAR\n\ttristate \"bar\"\nconfig BAZ\n\tbool \"baz\"\n\tdefault y\n";

/// Each symbol as make sees it after `include include/config/auto.conf`: `name=value origin`.
fn make_view(dir: &Path, symbols: &[&str]) -> Vec<String> {
    let mut makefile = String::from("include include/config/auto.conf\n");
    for s in symbols {
        makefile.push_str(&format!("$(info {s}=$({s}) $(origin {s}))\n"));
    }
    makefile.push_str("all: ;\n");
    fs::write(dir.join("judge.mk"), makefile).unwrap();
    make_judge::make(dir, &["-f", "judge.mk"]).lines().map(String::from).collect()
}

/// Each symbol as `DotConfig` reads `text`, in [`make_view`]'s shape.
fn our_view(text: &str, symbols: &[&str]) -> Vec<String> {
    let config = DotConfig::parse(text).unwrap();
    symbols
        .iter()
        .map(|s| {
            let origin = if config.values.contains_key(*s) { "file" } else { "undefined" };
            format!("{s}={} {origin}", config.get(s))
        })
        .collect()
}

#[test]
fn config_n_reads_as_not_set_like_kconfig_and_make() {
    let scratch = tempfile::tempdir().unwrap();
    let conf = build_conf(scratch.path());
    let symbols = ["CONFIG_FOO", "CONFIG_BAR", "CONFIG_BAZ"];
    let cases = [
        "CONFIG_FOO=n\nCONFIG_BAR=n\nCONFIG_BAZ=n\n",
        "CONFIG_MODULES=y\nCONFIG_FOO=y\nCONFIG_BAR=m\nCONFIG_BAZ=y\n",
        "CONFIG_MODULES=y\n# CONFIG_FOO is not set\nCONFIG_BAR=m\nCONFIG_BAR=n\n# CONFIG_BAZ is not set\n",
        "CONFIG_FOO=n\nCONFIG_FOO=y\nCONFIG_BAR=y\nCONFIG_BAZ=y\n",
        "CONFIG_MODULES=y\nCONFIG_FOO=y\nCONFIG_FOO=n\nCONFIG_BAR=n\nCONFIG_BAR=m\nCONFIG_BAZ=n\nCONFIG_BAZ=y\n",
    ];
    for (i, text) in cases.iter().enumerate() {
        let dir = scratch.path().join(format!("case{i}"));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("Kconfig"), KCONFIG).unwrap();
        fs::write(dir.join(".config"), text).unwrap();
        let out = Command::new(&conf)
            .current_dir(&dir)
            .args(["--syncconfig", "Kconfig"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "conf --syncconfig failed on\n{text}{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(our_view(text, &symbols), make_view(&dir, &symbols), "on this .config:\n{text}");
    }
}
