//! Malformed expectations files and their messages, as files: each
//! `tests/expectations-errors/NAME.toml` must be refused with exactly the
//! message in `NAME.err` (every problem, one a line, the file named as
//! `NAME.toml`). Bless mode: `UPDATE_EXPECT=1 cargo test -p ipc-conformance
//! --test expectations_errors` writes every `.err` from what the parser says
//! now; review the diff before committing it.

#[path = "../../harness/tests/support/error_files.rs"]
mod error_files;

use ipc_conformance::expectations::Expectations;
use std::path::Path;

#[test]
fn every_malformed_expectations_file_is_refused_with_its_message() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/expectations-errors");
    error_files::check_error_files(&dir, "toml", |text, name| {
        match Expectations::parse(text, name) {
            Ok(e) => Ok(format!(" ({} entries)", e.entries.len())),
            Err(e) => Err(e.to_string()),
        }
    });
}
