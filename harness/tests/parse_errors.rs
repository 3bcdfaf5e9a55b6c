//! Malformed scenarios and their messages, as files: each
//! `tests/parse-errors/NAME.ipc` must be refused with exactly the message in
//! `NAME.err` (`FILE:LINE:COLUMN: message`, the file named as `NAME.ipc`).
//! Bless mode: `UPDATE_EXPECT=1 cargo test -p ipc-harness --test
//! parse_errors` writes every `.err` from what the parser says now; review
//! the diff before committing it.

#[path = "support/error_files.rs"]
mod error_files;

use ipc_harness::scenario::parse;
use std::path::Path;

#[test]
fn every_malformed_scenario_is_refused_with_its_message() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/parse-errors");
    error_files::check_error_files(&dir, "ipc", |source, name| match parse(source, name) {
        Ok(_) => Ok(String::new()),
        Err(e) => Err(e.to_string()),
    });
}
