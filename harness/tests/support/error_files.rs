//! The runner of error-message files, shared by the test crates that pin
//! their parsers' messages (`harness/tests/parse_errors.rs`,
//! `conformance/tests/expectations_errors.rs`): every input file of a folder
//! must be refused with exactly the message in the `.err` file beside it.
//! Bless mode: `UPDATE_EXPECT=1` writes every `.err` from what the parser
//! says now; review the diff before committing it.

use std::path::{Path, PathBuf};

/// Every file with extension `ext` in `dir`, sorted.
fn cases(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    files
}

fn bless() -> bool {
    std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v == "1")
}

/// Checks (or, blessing, rewrites) every `*.ext` file of `dir`. `refuse`
/// parses a file's text under its bare file name and gives the message it
/// was refused with, or `Ok(what)` when it parsed (`what` says what it
/// parsed to, for the failure message).
pub fn check_error_files(
    dir: &Path,
    ext: &str,
    refuse: impl Fn(&str, &Path) -> Result<String, String>,
) {
    let files = cases(dir, ext);
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().expect("a file name");
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let got = match refuse(&text, Path::new(name)) {
            Ok(what) => {
                failures.push(format!("{}: parsed without an error{what}", path.display()));
                continue;
            }
            Err(message) => message,
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
