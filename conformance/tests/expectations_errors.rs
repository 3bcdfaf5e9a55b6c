//! Malformed expectations files and their messages, as files: each
//! `tests/expectations-errors/NAME.toml` must be refused with exactly the
//! message in `NAME.err` (every problem, one a line, the file named as
//! `NAME.toml`). Bless mode: `UPDATE_EXPECT=1 cargo test -p ipc-conformance
//! --test expectations_errors` writes every `.err` from what the parser says
//! now; review the diff before committing it.

use ipc_conformance::expectations::Expectations;
use std::path::{Path, PathBuf};

/// Every `.toml` file in `dir`, sorted.
fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

fn bless() -> bool {
    std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v == "1")
}

#[test]
fn every_malformed_expectations_file_is_refused_with_its_message() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/expectations-errors");
    let files = cases(&dir);
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().expect("a file name");
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let got = match Expectations::parse(&text, Path::new(name)) {
            Ok(e) => {
                failures.push(format!(
                    "{}: parsed without an error ({} entries)",
                    path.display(),
                    e.entries.len()
                ));
                continue;
            }
            Err(e) => e.to_string(),
        };
        let expected_path = path.with_extension("err");
        if bless() {
            std::fs::write(&expected_path, format!("{got}\n"))
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", expected_path.display()));
            continue;
        }
        match std::fs::read_to_string(&expected_path) {
            Ok(expected) if expected.trim_end() == got => {}
            Ok(expected) => failures.push(format!(
                "{}:\n  expected: {}\n  got:      {got}",
                path.display(),
                expected.trim_end()
            )),
            Err(e) => failures.push(format!(
                "{}: {e} (UPDATE_EXPECT=1 writes it)",
                expected_path.display()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ (UPDATE_EXPECT=1 rewrites the .err files):\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
