//! `sanpolicy`: run inside a kernel checkout; the tree is `.` and the policy
//! `sanitizer-policy.toml` unless told otherwise.

fn main() -> std::process::ExitCode {
    let code = sanpolicy::cli::main(std::env::args(), &sanpolicy::cli::Defaults::binary());
    std::process::ExitCode::from(code)
}
