//! End to end: the generated profiles change what rustc instruments. Each test generates the
//! tables with `sanpolicy gen-cargo`, builds a fixture workspace with the generated profile
//! (`RUSTC_BOOTSTRAP=1`: `profile-rustflags` and `-Zsanitizer` are unstable), runs the result
//! and reads what the sanitizer reports. Builds share one target directory under `target/`.

mod cargo_fixture;
mod fixture_tree;

use std::path::Path;
use std::process::{Command, Output};

use cargo_fixture::Ws;

#[track_caller]
fn build(ws: &Ws, args: &[&str]) -> String {
    let out = ws.cargo(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "cargo {args:?} failed:\n{stderr}");
    stderr
}

/// Run a built program; TSan needs the classic address-space layout on kernels with high
/// mmap randomisation, so a run it refuses is retried with ASLR off.
fn run(program: &Path, arg: &str) -> (Option<i32>, String) {
    let go = |cmd: &mut Command| -> Output {
        cmd.env("ASAN_OPTIONS", "detect_leaks=0").env_remove("TSAN_OPTIONS").output().unwrap()
    };
    let mut out = go(Command::new(program).arg(arg));
    if String::from_utf8_lossy(&out.stderr).contains("unexpected memory mapping") {
        out = go(Command::new("setarch").args([std::env::consts::ARCH, "-R"]).arg(program).arg(arg));
    }
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// The first lines of a sanitizer report, for failure messages and the record.
fn head(text: &str) -> String {
    text.lines().filter(|l| !l.trim().is_empty()).take(4).collect::<Vec<_>>().join("\n")
}

fn gen(ws: &Ws) {
    let run = ws.gen(&[]);
    assert_eq!(run.code, 0, "{}", run.both());
}

#[test]
fn asan_reports_the_bug_in_the_instrumented_crate_and_not_in_the_exempt_one() {
    let ws = Ws::new("sanitized");
    gen(&ws);
    build(&ws, &["build", "--profile", "asan"]);
    let app = ws.target_dir().join("asan/app");

    let (code, report) = run(&app, "oob-app");
    assert_ne!(code, Some(0), "{report}");
    assert!(report.contains("ERROR: AddressSanitizer: heap-buffer-overflow"), "{report}");
    assert!(report.contains("READ of size 1"), "{report}");
    assert!(report.contains(" in app::oob "), "{report}");
    eprintln!("oob-app (instrumented):\n{}", head(&report));

    // The same bug in the exempt crate goes unnoticed: its loads are not instrumented (the
    // ASan allocator still surrounds the buffer with a redzone, which it reads silently).
    let (code, report) = run(&app, "oob-exempt");
    assert_eq!(code, Some(0), "{report}");
    assert!(!report.contains("AddressSanitizer"), "{report}");
    assert!(report.contains("oob-exempt returned"), "{report}");
    eprintln!("oob-exempt (exempt): {}", head(&report));

    // Without the exemption the same build reports it: the policy is what made the difference.
    let policy = ws.read("sanitizer-policy.toml");
    let cut = policy.find("[[crate]]").unwrap();
    ws.write("sanitizer-policy.toml", &policy[..cut]);
    gen(&ws);
    assert!(!ws.read("Cargo.toml").contains("[profile.asan.package.exempt]"));
    build(&ws, &["build", "--profile", "asan"]);
    let (code, report) = run(&app, "oob-exempt");
    assert_ne!(code, Some(0), "{report}");
    assert!(report.contains("ERROR: AddressSanitizer: heap-buffer-overflow"), "{report}");
    assert!(report.contains(" in exempt::oob "), "{report}");
}

#[test]
fn tsan_is_a_target_modifier_and_the_generated_flag_makes_it_link() {
    let ws = Ws::new("sanitized");
    gen(&ws);
    let manifest = ws.read("Cargo.toml");
    build(&ws, &["build", "--profile", "tsan"]);
    let app = ws.target_dir().join("tsan/app");

    let (code, report) = run(&app, "race-app");
    assert_ne!(code, Some(0), "{report}");
    assert!(report.contains("WARNING: ThreadSanitizer: data race"), "{report}");
    assert!(report.contains("SUMMARY: ThreadSanitizer: data race") && report.contains("in app::race"), "{report}");
    eprintln!("race-app (instrumented):\n{}", head(&report));

    let (code, report) = run(&app, "race-exempt");
    assert_eq!(code, Some(0), "{report}");
    assert!(!report.contains("ThreadSanitizer"), "{report}");

    // `base` is instrumented and linked through the exempt crate: its race is reported.
    let (code, report) = run(&app, "race-base");
    assert_ne!(code, Some(0), "{report}");
    assert!(report.contains("in base::race"), "{report}");

    // Without `-Cunsafe-allow-abi-mismatch=sanitizer` rustc refuses to link: on the exempt crate,
    // because it depends on the instrumented `base` ...
    let exempt_table = "[profile.tsan.package.exempt]\nrustflags = [\"-Cunsafe-allow-abi-mismatch=sanitizer\"]";
    assert!(manifest.contains(exempt_table), "{manifest}");
    ws.write("Cargo.toml", &manifest.replace(exempt_table, "[profile.tsan.package.exempt]\nrustflags = []"));
    let stderr = refused(&ws);
    assert_rustc_said(
        &stderr,
        "unset `-Zsanitizer` in this crate is incompatible with `-Zsanitizer=thread` in dependency `base`",
    );
    // ... and on the instrumented crates, because the prebuilt std is not instrumented.
    ws.write("Cargo.toml", &manifest.replace(", \"-Cunsafe-allow-abi-mismatch=sanitizer\"]", "]"));
    let stderr = refused(&ws);
    assert_rustc_said(
        &stderr,
        "`-Zsanitizer=thread` in this crate is incompatible with unset `-Zsanitizer` in dependency `std`",
    );
}

/// A `--profile tsan` build that rustc refuses for mixing sanitizers; its stderr.
#[track_caller]
fn refused(ws: &Ws) -> String {
    let out = ws.cargo(&["build", "--profile", "tsan"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{stderr}");
    assert_rustc_said(&stderr, "mixing `-Zsanitizer` will cause an ABI mismatch");
    stderr
}

/// The channel `rust-toolchain.toml` pins.
fn pinned_channel() -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("rust-toolchain.toml"))
        .expect("rust-toolchain.toml pins the toolchain these texts were measured with");
    let line = text.lines().find(|l| l.trim_start().starts_with("channel")).expect("rust-toolchain.toml has a channel");
    line.split('"').nth(1).expect("channel = \"…\"").to_string()
}

/// `rustc --version` of the toolchain the fixture builds use (the pinned one, unless
/// `RUSTUP_TOOLCHAIN` or a `+toolchain` overrides it).
fn rustc_version(ws: &Ws) -> String {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).arg("--version").current_dir(ws.path()).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// rustc's texts for unstable errors (`-Zsanitizer`) are not a stable interface: these are the
/// pinned toolchain's. A mismatch under another toolchain says so instead of failing obscurely.
#[track_caller]
fn assert_rustc_said(stderr: &str, text: &str) {
    if stderr.contains(text) {
        return;
    }
    let pinned = pinned_channel();
    let ws = Ws::new("sanitized");
    let actual = rustc_version(&ws);
    let why = if actual.starts_with(&format!("rustc {pinned} ")) {
        format!("the pinned toolchain ({actual}) no longer says it")
    } else {
        format!(
            "this text is the wording of rustc {pinned}, pinned in rust-toolchain.toml, but the build used `{actual}`: run the tests with the pinned toolchain, or re-measure the texts and update them together with the pin"
        )
    };
    panic!("rustc did not say {text:?}: {why}\n--- stderr\n{stderr}");
}

#[test]
fn msan_needs_an_instrumented_std_which_a_stable_toolchain_lacks() {
    // MemorySanitizer tracks initialisation through every store; code it did not instrument
    // (here the prebuilt std: `-Zbuild-std` needs the rust-src component and a nightly Cargo)
    // leaves its writes unrecorded, so the first read of them is a false report.
    let ws = Ws::new("sanitized");
    ws.write("sanitizer-policy.toml", "[[profile]]\nname = \"msan\"\nenable = [\"msan\"]\n");
    gen(&ws);
    assert!(ws
        .read("Cargo.toml")
        .contains("rustflags = [\"-Zsanitizer=memory\", \"-Cunsafe-allow-abi-mismatch=sanitizer\"]"));
    build(&ws, &["build", "--profile", "msan"]);
    let (code, report) = run(&ws.target_dir().join("msan/app"), "oob-exempt");
    assert_ne!(code, Some(0), "{report}");
    assert!(report.contains("WARNING: MemorySanitizer: use-of-uninitialized-value"), "{report}");
    let first_frame = report.lines().find(|l| l.trim_start().starts_with("#0")).unwrap_or_default();
    assert!(first_frame.contains("/library/"), "reported inside the standard library: {first_frame}");
}

#[test]
fn crates_io_dependency_exempted_by_name() {
    let ws = Ws::new("crates-io");
    gen(&ws);
    let manifest = ws.read("Cargo.toml");
    assert!(manifest.contains("# itoa 1.0.19: skip asan\n"), "{manifest}");
    assert!(manifest.contains("[profile.asan.package.itoa]\nrustflags = []\n"), "{manifest}");
    // `-v` shows what Cargo passed to rustc for each crate; force the rebuild so it is shown.
    let out = ws.cargo(&["clean", "--profile", "asan", "-p", "itoa", "-p", "strsim", "-p", "app"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = build(&ws, &["build", "--profile", "asan", "-v"]);
    let rustc = |krate: &str| {
        log.lines()
            .find(|l| l.contains("Running `") && l.contains(&format!("--crate-name {krate} ")))
            .unwrap_or_else(|| panic!("no rustc line for {krate}:\n{log}"))
            .to_string()
    };
    assert!(!rustc("itoa").contains("-Zsanitizer"), "{}", rustc("itoa"));
    assert!(rustc("strsim").contains("-Zsanitizer=address"), "{}", rustc("strsim"));
    assert!(rustc("app").contains("-Zsanitizer=address"), "{}", rustc("app"));
    // And in the artifacts: only the instrumented crates call into the ASan runtime.
    let rlib = |krate: &str| {
        let deps = ws.target_dir().join("asan/deps");
        let mut found: Vec<_> = std::fs::read_dir(&deps)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("lib{krate}-")))
            .filter(|p| p.extension().is_some_and(|x| x == "rlib"))
            .collect();
        found.sort_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap());
        std::fs::read(found.last().unwrap_or_else(|| panic!("no rlib for {krate}"))).unwrap()
    };
    let calls_asan = |bytes: &[u8]| bytes.windows(7).any(|w| w == b"__asan_");
    assert!(!calls_asan(&rlib("itoa")), "itoa was instrumented");
    assert!(calls_asan(&rlib("strsim")), "strsim was not instrumented");
    let (code, output) = run(&ws.target_dir().join("asan/app"), "");
    assert_eq!((code, output.trim()), (Some(0), "levenshtein = 3"));
}

#[test]
fn a_sanitizer_forced_on_a_library_alone_fails_to_link_as_the_warning_says() {
    let ws = Ws::new("sanitized");
    let policy = "[[profile]]\nname = \"plain\"\nenable = []\n\n[[crate]]\nname = \"base\"\nforce = [\"asan\"]\nwhy = \"only base\"\n";
    ws.write("sanitizer-policy.toml", policy);
    let run = ws.gen(&[]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(run.stderr.contains("warning[unlinked-runtime]") && run.stderr.contains("binary `app`"), "{}", run.stderr);
    let out = ws.cargo(&["build", "--profile", "plain"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the binary linked without the ASan runtime:\n{stderr}");
    assert!(stderr.contains("undefined symbol: __asan_"), "{stderr}");
    // Following the hint's second half (force it on the crate that links the binary) links.
    ws.write(
        "sanitizer-policy.toml",
        &format!("{policy}\n[[crate]]\nname = \"app\"\nforce = [\"asan\"]\nwhy = \"links the runtime\"\n"),
    );
    let run = ws.gen(&[]);
    assert!(!run.stderr.contains("unlinked-runtime"), "{}", run.stderr);
    build(&ws, &["build", "--profile", "plain"]);
}

#[test]
fn an_instrumented_proc_macro_does_not_load_which_is_why_forcing_one_is_refused() {
    let ws = Ws::new("registry");
    gen(&ws);
    // What `force = ["asan"]` on serde_derive would write, added by hand (gen-cargo refuses it).
    let manifest = ws.read("Cargo.toml");
    ws.write(
        "Cargo.toml",
        &format!("{manifest}\n[profile.asan.package.serde_derive]\nrustflags = [\"-Zsanitizer=address\"]\n"),
    );
    let out = ws.cargo(&["build", "--profile", "asan"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("libserde_derive-"), "{stderr}");
    assert!(stderr.contains("undefined symbol: __asan_option_detect_stack_use_after_return"), "{stderr}");
}

/// The functions of a binary (demangled names) whose code calls into the ASan runtime.
fn asan_instrumented_functions(binary: &Path) -> Vec<String> {
    let out = Command::new("objdump")
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(binary)
        .output()
        .expect("objdump (binutils, installed with gcc) disassembles the binary");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")).map(|(_, n)| n) {
            current = Some(name.to_string());
        } else if line.contains("call") && line.contains("<__asan_") {
            if let Some(name) = current.take() {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn an_exempt_crates_generic_code_is_instrumented_in_its_callers() {
    // The limit the book (docs/src/guide/cargo.md) and the generated comment state: smallvec is exempt from ASan, yet its
    // generic code is monomorphised, and instrumented, in the crates that use it.
    let ws = Ws::new("registry");
    let run = ws.gen(&[]);
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(run.stdout.contains("limit: smallvec 1.16.6 skips asan"), "{}", run.stdout);
    assert!(ws.read("Cargo.toml").contains("[profile.asan.package.smallvec]\nrustflags = []\n"));
    build(&ws, &["build", "--profile", "asan"]);
    let instrumented = asan_instrumented_functions(&ws.target_dir().join("asan/app"));
    let smallvec: Vec<&String> =
        instrumented.iter().filter(|f| f.trim_start_matches('<').starts_with("smallvec::")).collect();
    eprintln!("{} smallvec functions instrumented in the binary, e.g. {:?}", smallvec.len(), smallvec.first());
    assert!(
        smallvec.iter().any(|f| f.contains("SmallVec<[u32; 4]>>::push")),
        "SmallVec::push, called from app, is instrumented there: {smallvec:#?}"
    );
}
