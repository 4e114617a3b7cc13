//! `sanpolicy`: run inside a kernel checkout; the tree is `.` and the policy
//! `sanitizer-policy.toml` unless told otherwise.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let code = sanpolicy::cli::main(std::env::args(), &sanpolicy::cli::Defaults::binary());
    std::process::ExitCode::from(code)
}
