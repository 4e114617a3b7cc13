//! The source scan of the workspace's own crates, with syn: runtime hooks (exported functions
//! named like the calls an instrumentation inserts, `__asan_load1`, `__sanitizer_cov_trace_pc`)
//! make a crate recursion-prone for that mechanism; item-level `#[sanitize(… = "off")]` and
//! `#[no_sanitize(…)]` attributes are exemptions the policy has to document.

use std::path::{Path, PathBuf};

use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Expr, ExprLit, Lit, Meta, Token};

use super::workspace::{Package, Workspace};
use crate::diagnostic::{Code, Diagnostic, Diagnostics, Location};
use crate::mechanism::{RustMechId, FOREIGN_HOOKS};

/// An exported function named like a sanitizer or coverage runtime hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The package defining it (name, version).
    pub package: (String, String),
    pub symbol: String,
    /// Mechanisms whose instrumentation calls it: instrumenting the crate with one recurses.
    pub mechanisms: Vec<RustMechId>,
    /// For hooks of instrumentation rustc never emits: what it belongs to.
    pub foreign: Option<&'static str>,
    pub location: Location,
}

/// An item-level `#[sanitize(… = "off")]` or `#[no_sanitize(…)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemAttribute {
    pub package: (String, String),
    /// The item it is on, as a path inside the file's module (`Arena::alloc`), or `crate`.
    pub item: String,
    /// Sanitizer names turned off, as written (`address`).
    pub names: Vec<String>,
    /// The rustc mechanisms they map to.
    pub mechanisms: Vec<RustMechId>,
    pub location: Location,
}

/// What the scan found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub files: usize,
    pub hooks: Vec<Hook>,
    pub attributes: Vec<ItemAttribute>,
    /// Files that did not parse (warnings).
    pub diags: Diagnostics,
}

/// Scan every member's library and binary sources.
pub fn scan(workspace: &Workspace) -> Scan {
    let mut out = Scan::default();
    for package in workspace.packages.iter().filter(|p| p.member) {
        for file in rust_files(package) {
            scan_file(package, &file, &mut out);
        }
    }
    out
}

/// `.rs` files under the package's source directories, sorted, skipping nested packages,
/// hidden directories and `target/`.
fn rust_files(package: &Package) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in &package.source_dirs {
        let walker = walkdir::WalkDir::new(dir).sort_by_file_name().into_iter().filter_entry(|e| {
            let name = e.file_name().to_string_lossy();
            e.depth() == 0
                || !e.file_type().is_dir()
                || !(name.starts_with('.') || name == "target" || e.path().join("Cargo.toml").is_file())
        });
        for entry in walker.flatten() {
            if entry.file_type().is_file() && entry.path().extension().is_some_and(|x| x == "rs") {
                files.push(entry.into_path());
            }
        }
    }
    files
}

fn scan_file(package: &Package, path: &Path, out: &mut Scan) {
    let text = match crate::input::read_to_string(path, crate::input::SOURCE_LIMIT) {
        Ok(t) => t,
        Err(e) => {
            out.diags.push(
                Diagnostic::warning(Code::UnparsableSource, format!("cannot read `{}`: {e}", path.display()))
                    .at(Location::file(path))
                    .hint("the source scan skipped this file"),
            );
            return;
        }
    };
    out.files += 1;
    match syn::parse_file(&text) {
        Ok(file) => {
            let mut v = Visitor { package, path, text: &text, stack: Vec::new(), out };
            v.visit_file(&file);
        }
        Err(e) => {
            let loc = Location::from_span(path, &text, e.span().byte_range());
            out.diags.push(
                Diagnostic::warning(Code::UnparsableSource, format!("the source scan cannot parse this file: {e}"))
                    .at(loc)
                    .hint("hooks and `#[sanitize]` attributes in this file were not checked"),
            );
        }
    }
    // The span map of proc-macro2 grows with every file parsed on this thread.
    proc_macro2::extra::invalidate_current_thread_spans();
}

struct Visitor<'a> {
    package: &'a Package,
    path: &'a Path,
    text: &'a str,
    /// Names of the enclosing items, for naming an attribute's item.
    stack: Vec<String>,
    out: &'a mut Scan,
}

impl Visitor<'_> {
    fn id(&self) -> (String, String) {
        (self.package.name.clone(), self.package.version.clone())
    }

    fn loc(&self, start: Span, end: Span) -> Location {
        let (a, b) = (start.byte_range(), end.byte_range());
        Location::from_span(self.path, self.text, a.start..b.end.max(a.end))
    }

    /// An exported function whose symbol is a runtime hook.
    fn function(&mut self, attrs: &[Attribute], ident: &syn::Ident) {
        let Some(symbol) = exported_name(attrs, ident) else { return };
        let mechanisms: Vec<RustMechId> =
            RustMechId::all().filter(|id| id.get().hooks.iter().any(|h| symbol.starts_with(h))).collect();
        let foreign = FOREIGN_HOOKS.iter().find(|(prefix, _)| symbol.starts_with(prefix)).map(|(_, what)| *what);
        if mechanisms.is_empty() && foreign.is_none() {
            return;
        }
        let location = self.loc(ident.span(), ident.span());
        self.out.hooks.push(Hook { package: self.id(), symbol, mechanisms, foreign, location });
    }

    fn with<F: FnOnce(&mut Self)>(&mut self, name: String, f: F) {
        self.stack.push(name);
        f(self);
        self.stack.pop();
    }
}

/// The symbol an item is exported as: `#[no_mangle]`, `#[unsafe(no_mangle)]`,
/// `#[export_name = "…"]` or `#[unsafe(export_name = "…")]`, also inside `cfg_attr` (nested or
/// not): a hook exported in some configuration only is still a hook in that configuration, so
/// every predicate counts as true.
fn exported_name(attrs: &[Attribute], ident: &syn::Ident) -> Option<String> {
    let mut symbol = None;
    for attr in attrs {
        flatten(&attr.meta, &mut |meta| {
            let name = match meta {
                Meta::Path(p) if p.is_ident("no_mangle") => Some(ident.to_string()),
                Meta::NameValue(nv) if nv.path.is_ident("export_name") => match &nv.value {
                    Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Some(s.value()),
                    _ => None,
                },
                _ => None,
            };
            symbol = symbol.take().or(name);
        });
    }
    symbol
}

/// The attributes `meta` stands for: itself, or what `cfg_attr(pred, a, b, …)` and
/// `unsafe(a)` wrap, recursively.
fn flatten(meta: &Meta, f: &mut dyn FnMut(&Meta)) {
    let Meta::List(list) = meta else {
        f(meta);
        return;
    };
    let skip = if list.path.is_ident("cfg_attr") {
        1
    } else if list.path.is_ident("unsafe") {
        0
    } else {
        f(meta);
        return;
    };
    if let Ok(nested) = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) {
        for m in nested.iter().skip(skip) {
            flatten(m, f);
        }
    }
}

/// Sanitizer names an attribute turns off: `sanitize(address = "off")`, `no_sanitize(address)`,
/// also inside `cfg_attr(…, …)`.
fn turned_off(meta: &Meta) -> Vec<String> {
    let mut names = Vec::new();
    flatten(meta, &mut |m| names.extend(turned_off_one(m)));
    names
}

fn turned_off_one(meta: &Meta) -> Vec<String> {
    let Meta::List(list) = meta else { return Vec::new() };
    let mut names = Vec::new();
    if list.path.is_ident("sanitize") {
        let _ = list.parse_nested_meta(|m| {
            let name = m.path.get_ident().map(ToString::to_string).unwrap_or_default();
            let value: syn::LitStr = m.value()?.parse()?;
            if value.value() == "off" {
                names.push(name);
            }
            Ok(())
        });
    } else if list.path.is_ident("no_sanitize") {
        let _ = list.parse_nested_meta(|m| {
            names.extend(m.path.get_ident().map(ToString::to_string));
            Ok(())
        });
    }
    names
}

impl<'ast> Visit<'ast> for Visitor<'_> {
    fn visit_attribute(&mut self, attr: &'ast Attribute) {
        let names = turned_off(&attr.meta);
        if names.is_empty() {
            return;
        }
        let mechanisms =
            RustMechId::all().filter(|id| id.get().attributes.iter().any(|a| names.iter().any(|n| n == a))).collect();
        let item = if self.stack.is_empty() { "crate".to_string() } else { self.stack.join("::") };
        let location = self.loc(attr.pound_token.span, attr.bracket_token.span.close());
        self.out.attributes.push(ItemAttribute { package: self.id(), item, names, mechanisms, location });
    }

    fn visit_item_fn(&mut self, i: &'ast syn::ItemFn) {
        self.function(&i.attrs, &i.sig.ident);
        self.with(i.sig.ident.to_string(), |v| visit::visit_item_fn(v, i));
    }

    fn visit_impl_item_fn(&mut self, i: &'ast syn::ImplItemFn) {
        self.function(&i.attrs, &i.sig.ident);
        self.with(i.sig.ident.to_string(), |v| visit::visit_impl_item_fn(v, i));
    }

    fn visit_item_mod(&mut self, i: &'ast syn::ItemMod) {
        self.with(i.ident.to_string(), |v| visit::visit_item_mod(v, i));
    }

    fn visit_item_static(&mut self, i: &'ast syn::ItemStatic) {
        self.with(i.ident.to_string(), |v| visit::visit_item_static(v, i));
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let name = match &*i.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        self.with(name.unwrap_or_else(|| "impl".into()), |v| visit::visit_item_impl(v, i));
    }

    fn visit_item_trait(&mut self, i: &'ast syn::ItemTrait) {
        self.with(i.ident.to_string(), |v| visit::visit_item_trait(v, i));
    }
}

/// The public API of a package that is compiled where it is called, not in the package:
/// generic functions and methods (monomorphised in the caller's crate) and `#[inline]` ones
/// (codegen'd in every crate that uses them). Exempting the package does not exempt these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GenericApi {
    /// How many such functions the package's library sources declare.
    pub functions: usize,
    /// The first few, as `Type::method` or `function`.
    pub examples: Vec<String>,
}

/// Scan a package's library sources (every `.rs` file beside and below its root file) for
/// public generic and `#[inline]` functions. `None` when it has no library or none were found.
pub fn generic_api(package: &Package) -> Option<GenericApi> {
    let dir = package.lib_root.as_deref()?.parent()?;
    let mut api = GenericApi::default();
    let files = walkdir::WalkDir::new(dir).sort_by_file_name().into_iter().flatten();
    for entry in files.filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "rs")) {
        let Ok(text) = crate::input::read_to_string(entry.path(), crate::input::SOURCE_LIMIT) else { continue };
        if let Ok(file) = syn::parse_file(&text) {
            GenericVisitor { api: &mut api, impl_: None }.visit_file(&file);
        }
        proc_macro2::extra::invalidate_current_thread_spans();
    }
    (api.functions > 0).then_some(api)
}

/// Whether generics make callers compile the item: type or const parameters (lifetimes alone
/// do not).
fn has_type_params(g: &syn::Generics) -> bool {
    g.params.iter().any(|p| !matches!(p, syn::GenericParam::Lifetime(_)))
}

/// `#[inline]` or `#[inline(always)]`, not `#[inline(never)]`.
fn inline(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        Meta::Path(p) => p.is_ident("inline"),
        Meta::List(l) => l.path.is_ident("inline") && !l.tokens.to_string().contains("never"),
        _ => false,
    })
}

/// A signature taking `impl Trait` is generic too.
fn impl_trait_args(sig: &syn::Signature) -> bool {
    sig.inputs.iter().any(|a| matches!(a, syn::FnArg::Typed(t) if matches!(*t.ty, syn::Type::ImplTrait(_))))
}

struct GenericVisitor<'a> {
    api: &'a mut GenericApi,
    /// The enclosing impl: its type's name, whether it is generic, whether it implements a
    /// trait (whose methods are public through the trait).
    impl_: Option<(String, bool, bool)>,
}

impl GenericVisitor<'_> {
    fn found(&mut self, name: String) {
        self.api.functions += 1;
        if self.api.examples.len() < 3 {
            self.api.examples.push(name);
        }
    }
}

impl<'ast> Visit<'ast> for GenericVisitor<'_> {
    fn visit_item_fn(&mut self, i: &'ast syn::ItemFn) {
        let public = matches!(i.vis, syn::Visibility::Public(_));
        if public && (has_type_params(&i.sig.generics) || impl_trait_args(&i.sig) || inline(&i.attrs)) {
            self.found(i.sig.ident.to_string());
        }
        visit::visit_item_fn(self, i);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let name = match &*i.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        let outer = self.impl_.replace((
            name.unwrap_or_else(|| "impl".into()),
            has_type_params(&i.generics),
            i.trait_.is_some(),
        ));
        visit::visit_item_impl(self, i);
        self.impl_ = outer;
    }

    fn visit_impl_item_fn(&mut self, i: &'ast syn::ImplItemFn) {
        if let Some((ty, generic, trait_impl)) = self.impl_.clone() {
            let public = trait_impl || matches!(i.vis, syn::Visibility::Public(_));
            if public && (generic || has_type_params(&i.sig.generics) || impl_trait_args(&i.sig) || inline(&i.attrs)) {
                self.found(format!("{ty}::{}", i.sig.ident));
            }
        }
        visit::visit_impl_item_fn(self, i);
    }

    fn visit_item_trait(&mut self, i: &'ast syn::ItemTrait) {
        // A provided method of a public trait is compiled for each implementing type, in the
        // crate that calls it.
        if matches!(i.vis, syn::Visibility::Public(_)) {
            for item in &i.items {
                if let syn::TraitItem::Fn(f) = item {
                    if f.default.is_some() {
                        self.found(format!("{}::{}", i.ident, f.sig.ident));
                    }
                }
            }
        }
        visit::visit_item_trait(self, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_text(text: &str) -> Scan {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.rs");
        std::fs::write(&path, text).unwrap();
        let package = Package {
            name: "p".into(),
            version: "0.1.0".into(),
            member: true,
            source_dirs: vec![],
            proc_macro: false,
            lib_root: None,
        };
        let mut out = Scan::default();
        scan_file(&package, &path, &mut out);
        out
    }

    #[test]
    fn hooks_are_exported_functions_with_hook_names() {
        let s = scan_text(
            r#"
#[no_mangle]
pub extern "C" fn __asan_load1(addr: usize) {}
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sanitizer_cov_trace_pc() {}
#[export_name = "__tsan_read1"]
pub extern "C" fn read1() {}
#[unsafe(export_name = "__msan_warning")]
extern "C" fn warn() {}
#[no_mangle]
pub extern "C" fn __ubsan_handle_add_overflow() {}
pub extern "C" fn __asan_not_exported() {}
#[no_mangle]
pub extern "C" fn helper() {}
mod inner { struct S; impl S { #[no_mangle] extern "C" fn __lsan_ignore_object() {} } }
"#,
        );
        let found: Vec<_> = s
            .hooks
            .iter()
            .map(|h| (h.symbol.as_str(), h.location.line, h.mechanisms.len(), h.foreign.is_some()))
            .collect();
        assert_eq!(
            found,
            [
                ("__asan_load1", 3, 2, false), // address and kernel-address
                ("__sanitizer_cov_trace_pc", 5, 1, false),
                ("__tsan_read1", 7, 1, false),
                ("__msan_warning", 9, 1, false),
                ("__ubsan_handle_add_overflow", 11, 0, true),
                ("__lsan_ignore_object", 15, 1, false),
            ]
        );
    }

    #[test]
    fn hooks_exported_through_cfg_attr_are_hooks() {
        let s = scan_text(
            r#"
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn __asan_on_error() {}
#[cfg_attr(unix, unsafe(export_name = "__asan_default_options"))]
extern "C" fn options() {}
#[cfg_attr(all(), cfg_attr(unix, inline(never), no_mangle))]
extern "C" fn __sanitizer_cov_trace_pc() {}
#[cfg_attr(unix, export_name = "__tsan_func_entry")]
extern "C" fn entry() {}
#[cfg_attr(unix, inline)]
extern "C" fn __asan_not_exported() {}
#[cfg_attr(feature = "no_mangle", inline)]
extern "C" fn __asan_predicate_only() {}
"#,
        );
        let found: Vec<_> = s.hooks.iter().map(|h| (h.symbol.as_str(), h.location.line)).collect();
        assert_eq!(
            found,
            [
                ("__asan_on_error", 3),
                ("__asan_default_options", 5),
                ("__sanitizer_cov_trace_pc", 7),
                ("__tsan_func_entry", 9)
            ]
        );
    }

    #[test]
    fn sanitize_attributes_are_listed_with_their_item() {
        let s = scan_text(
            r#"#![sanitize(thread = "off")]
mod arena {
    pub struct Arena;
    impl Arena {
        #[sanitize(address = "off", memory = "on")]
        pub fn walk(&self) {}
    }
    #[no_sanitize(memory)]
    static TABLE: [u8; 4] = [0; 4];
    #[cfg_attr(sanitize, sanitize(hwaddress = "off"))]
    fn tagged() {}
    #[sanitize(address = "on")]
    fn on() {}
}
"#,
        );
        let found: Vec<_> = s
            .attributes
            .iter()
            .map(|a| (a.item.as_str(), a.names.join(","), a.location.line, a.location.col))
            .collect();
        assert_eq!(
            found,
            [
                ("crate", "thread".into(), 1, 1),
                ("arena::Arena::walk", "address".into(), 5, 9),
                ("arena::TABLE", "memory".into(), 8, 5),
                ("arena::tagged", "hwaddress".into(), 10, 5),
            ]
        );
    }

    #[test]
    fn public_generic_and_inline_functions_are_the_generic_api() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("lib.rs"),
            r#"
pub fn generic<T>(t: T) -> T { t }
pub fn lifetimes<'a>(s: &'a str) -> &'a str { s }
pub fn plain(x: u8) -> u8 { x }
pub fn takes(f: impl Fn()) { f() }
fn private<T>(t: T) -> T { t }
#[inline]
pub fn small() {}
#[inline(never)]
pub fn big() {}
pub struct Vec2<T>(T);
impl<T> Vec2<T> { pub fn push(&mut self) {} fn hidden(&self) {} }
pub struct Plain;
impl Plain { pub fn concrete(&self) {} #[inline(always)] pub fn fast(&self) {} }
impl Clone for Plain { fn clone(&self) -> Plain { Plain } }
impl<T: Clone> Clone for Vec2<T> { fn clone(&self) -> Self { Vec2(self.0.clone()) } }
pub trait Walk { fn step(&self); fn walk(&self) { self.step() } }
"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("sub/more.rs"), "pub fn sized<const N: usize>() {}\n").unwrap();
        let package = Package {
            name: "g".into(),
            version: "1.0.0".into(),
            member: false,
            source_dirs: vec![],
            proc_macro: false,
            lib_root: Some(dir.path().join("lib.rs")),
        };
        let api = generic_api(&package).unwrap();
        assert_eq!(api.examples, ["generic", "takes", "small"]);
        // generic, takes, small, Vec2::push, Plain::fast, Vec2::clone, Walk::walk, sized
        assert_eq!(api.functions, 8);
        let none = Package { lib_root: None, ..package };
        assert_eq!(generic_api(&none), None);
    }

    #[test]
    fn unparsable_files_are_warnings() {
        let s = scan_text("fn broken( {");
        assert_eq!(s.diags.0.len(), 1);
        assert!(!s.diags.has_errors());
        assert_eq!(s.diags.0[0].location.as_ref().unwrap().line, 1);
    }
}
