fn main() {
    let t = std::time::Instant::now();
    let (policy, _) = sanpolicy::policy::load(std::path::Path::new("policy/linux.toml"));
    eprintln!("load {:?}", t.elapsed());
    let rules = sanpolicy::kbuild::Rules::builtin();
    eprintln!("rules {:?}", t.elapsed());
    let eff = sanpolicy::review::effective::compute(&policy, &rules, None);
    eprintln!("effective {:?} {}", t.elapsed(), eff.len());
    let files = sanpolicy::review::effective::dir_files(&policy, &rules, None);
    eprintln!("dir_files {:?} {}", t.elapsed(), files.len());
}
