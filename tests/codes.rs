//! The book's code table (`docs/src/reference/codes.md`) is generated from the one code table
//! (`diagnostic::CODES`), as rust-analyzer's `ensure_file_contents` keeps generated files: when
//! the page's section differs, the test writes the generated one in its place and fails, saying
//! so; run again (and commit the page), it passes.

use std::fs;
use std::path::Path;

use sanpolicy::diagnostic::code_table;

const BEGIN: &str = "<!-- codes: generated from src/diagnostic.rs by tests/codes.rs; edit the table there -->\n";
const END: &str = "<!-- codes end -->\n";

/// `text` with the section between the markers replaced by `section`.
fn with_section(text: &str, section: &str) -> String {
    let start =
        text.find(BEGIN).unwrap_or_else(|| panic!("the codes page lacks the marker `{}`", BEGIN.trim())) + BEGIN.len();
    let end =
        start + text[start..].find(END).unwrap_or_else(|| panic!("the codes page lacks the marker `{}`", END.trim()));
    format!("{}{section}{}", &text[..start], &text[end..])
}

/// Write `contents` to `path` when it differs, and fail saying so (rust-analyzer's
/// `ensure_file_contents`, with newlines compared as they are: the book uses LF).
fn ensure_file_contents(path: &Path, contents: &str) {
    let old = fs::read_to_string(path).unwrap();
    if old == contents {
        return;
    }
    fs::write(path, contents).unwrap();
    panic!(
        "{} was not up to date and has been updated from the code table: review the change and commit it",
        path.display()
    );
}

#[test]
fn book_code_table_is_generated_from_the_code_table() {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference/codes.md");
    let text = fs::read_to_string(&page).unwrap();
    ensure_file_contents(&page, &with_section(&text, &code_table()));
}

#[test]
fn section_markers_are_replaced_between() {
    let text = format!("a\n{BEGIN}old\nrows\n{END}b\n");
    assert_eq!(with_section(&text, "new\n"), format!("a\n{BEGIN}new\n{END}b\n"));
}
