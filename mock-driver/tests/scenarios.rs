//! The simulator's scenario files, `tests/scenarios/**/*.ipc`: each runs on
//! the default simulator in every dialect its `# dialects:` line lists (all
//! when it has none), as a clause does, and must pass. A file states its rule
//! in its comments, chooses simulator semantics with a `semantics` line and
//! writes each step's expected outcome next to it.

use ipc_harness::scenario::{execute, parse_file, ExecOptions};
use ipc_harness::{Dialect, Status};
use ipc_mock_driver::SimBackend;
use std::path::{Path, PathBuf};

/// Every `.ipc` file under `dir`, sorted.
fn scenario_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|x| x == "ipc") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The dialects a file's `# dialects:` line lists (commas or spaces), or all.
fn dialects_of(listed: Option<String>) -> Result<Vec<Dialect>, String> {
    match listed {
        None => Ok(Dialect::ALL.to_vec()),
        Some(list) => list
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|w| !w.is_empty())
            .map(|w| w.parse::<Dialect>().map_err(|e| format!("dialects: {e}")))
            .collect(),
    }
}

#[test]
fn every_simulator_scenario_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let files = scenario_files(&root);
    assert!(
        !files.is_empty(),
        "no scenario files under {}",
        root.display()
    );
    let sim = SimBackend::default();
    let mut failures = Vec::new();
    for path in &files {
        let scenario = match parse_file(path) {
            Ok(s) => s,
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        let dialects = match dialects_of(scenario.meta.get("dialects")) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        for dialect in dialects {
            let opts = ExecOptions {
                dialect,
                seed: 1,
                ..ExecOptions::default()
            };
            let run = execute(&scenario, &sim, &opts);
            if run.verdict.status != Status::Pass {
                failures.push(format!(
                    "{dialect:?}: {:?}: {}",
                    run.verdict.status, run.verdict.message
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenario files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
