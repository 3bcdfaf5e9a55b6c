//! Reports: `results.json` ([`json`]), `junit.xml` ([`junit`]) and
//! `summary.md` ([`markdown`]), each written atomically.

pub mod json;
pub mod junit;
pub mod markdown;
pub mod text;

use crate::runner::RunReport;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The default `--out` directory.
pub const DEFAULT_OUT_DIR: &str = "reports/latest";

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot serialize {what}: {message}")]
    Serialize { what: String, message: String },
}

/// Write `bytes` to `path` so that readers see either the old file or the
/// whole new one, never writing through a name planted in a shared folder
/// (see [`crate::safe_fs`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    crate::safe_fs::write_atomic(path, bytes).map_err(ReportError::from)
}

impl From<crate::safe_fs::PathError> for ReportError {
    fn from(e: crate::safe_fs::PathError) -> Self {
        ReportError::Io {
            path: e.path,
            source: e.source,
        }
    }
}

/// Create the output directory (and parents).
pub fn ensure_dir(dir: &Path) -> Result<(), ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

/// Write `results.json`, `junit.xml` and `summary.md` of one run into `dir`.
/// Returns the paths written.
pub fn write_run(dir: &Path, report: &RunReport) -> Result<Vec<PathBuf>, ReportError> {
    ensure_dir(dir)?;
    let files = [
        ("results.json", json::to_string(report)?),
        ("junit.xml", junit::to_string(report)?),
        (
            "summary.md",
            markdown::summary(std::slice::from_ref(report)),
        ),
    ];
    // results.json last: the record readers act on is switched after the
    // files derived from it.
    let [results, junit, summary] = &files;
    let set = [
        (junit.0, junit.1.as_bytes()),
        (summary.0, summary.1.as_bytes()),
        (results.0, results.1.as_bytes()),
    ];
    Ok(crate::safe_fs::write_set(dir, &set)?)
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh directory under the system temp dir, removed on drop.
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new(tag: &str) -> TempDir {
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "ipc-conformance-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use crate::catalogue::ClauseKind;
    use crate::runner::{ClauseResult, RunInfo, RunReport};
    use ipc_harness::trace::{CheckResult, StepOutcome, StepRecord, ValueSummary};
    use ipc_harness::{Dialect, Status, Trace};
    use std::collections::BTreeMap;

    pub fn trace() -> Trace {
        Trace {
            steps: vec![
                StepRecord {
                    index: 0,
                    line: 12,
                    process: "owner".into(),
                    op: "a = malloc 2MiB".into(),
                    api: None,
                    outcome: StepOutcome::Ok {
                        value: ValueSummary::Ptr {
                            label: "owner.p1".into(),
                        },
                    },
                    check: None,
                    elapsed_us: 0,
                },
                StepRecord {
                    index: 1,
                    line: 13,
                    process: "peer".into(),
                    op: "p = ipc_open h".into(),
                    api: None,
                    outcome: StepOutcome::Error {
                        code: 1,
                        name: "cudaErrorInvalidValue".into(),
                    },
                    check: Some(CheckResult {
                        passed: false,
                        expected: "ok".into(),
                        message: "expected ok, got cudaErrorInvalidValue".into(),
                    }),
                    elapsed_us: 0,
                },
            ],
            hazard_checks: vec![],
            hazards: Some(vec![]),
            timing: Default::default(),
        }
    }

    pub fn result(id: &str, status: Status, dialect: Dialect, backend: &str) -> ClauseResult {
        ClauseResult {
            id: id.into(),
            title: format!("title of {id} <&>"),
            kind: Some(ClauseKind::Specified),
            path: format!("clauses/{id}.ipc"),
            status,
            message: match status {
                Status::Pass => String::new(),
                _ => format!("{id}.ipc:13: expected ok, got cudaErrorInvalidValue (seed 1)"),
            },
            duration_ms: 0.5,
            dialect,
            backend: backend.into(),
            seed: 1,
            trace: Some(trace()),
            expectation: None,
        }
    }

    pub fn run(backend: &str, dialect: &str, results: Vec<ClauseResult>) -> RunReport {
        RunReport::new(
            RunInfo {
                tool_version: "0.1.0".into(),
                backend: backend.into(),
                dialect: dialect.into(),
                seed: 1,
                step_timeout_ms: 20_000,
                git_revision: Some("abc123".into()),
                started_at: "2026-11-01T03:57:44.250Z".into(),
                duration_ms: 12.5,
                host: Some("ci-host".into()),
                filter: vec!["mem.*".into()],
                clauses_dir: Some("conformance/clauses".into()),
                interrupted: false,
                gpu_name: None,
                compute_capability: None,
                driver_version: None,
                cuda_driver_version: None,
                cuda_runtime_version: None,
                device_count: Some(2),
                semantics: BTreeMap::from([("close_last_unmaps".into(), "true".into())]),
                shard: None,
                merged: None,
                expectations: None,
            },
            results,
        )
    }

    /// A sim run with one result of each status.
    pub fn mixed_run() -> RunReport {
        use Status::*;
        run(
            "sim",
            "runtime",
            vec![
                result("mem.open.refcount", Pass, Dialect::Runtime, "sim"),
                result("mem.open.twice", Fail, Dialect::Runtime, "sim"),
                result("ctx.peer.needs-two", NotSupported, Dialect::Runtime, "sim"),
                result("ctx.crash.x", Crash, Dialect::Runtime, "sim"),
                result("handle.slow.y", Timeout, Dialect::Runtime, "sim"),
                result("handle.broken.z", Broken, Dialect::Runtime, "sim"),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::TempDir;
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_tmp() {
        let dir = TempDir::new("atomic");
        let path = dir.path().join("results.json");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new contents").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new contents");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["results.json"]);
    }

    #[test]
    fn atomic_write_into_a_missing_dir_is_an_error_and_cleans_up() {
        let dir = TempDir::new("atomic-missing");
        let path = dir.path().join("nope").join("x.json");
        let err = write_atomic(&path, b"x").unwrap_err();
        assert!(err.to_string().contains("x.json"), "{err}");
        assert!(!dir.path().join("nope").exists());
    }

    #[test]
    fn write_run_writes_three_files() {
        let dir = TempDir::new("write-run");
        let out = dir.path().join("a").join("b");
        let written = write_run(&out, &fixtures::mixed_run()).unwrap();
        assert_eq!(written.len(), 3);
        for name in ["results.json", "junit.xml", "summary.md"] {
            assert!(out.join(name).is_file(), "{name}");
            assert!(!out.join(format!("{name}.tmp")).exists());
        }
    }

    #[test]
    fn unwritable_out_is_an_error() {
        let dir = TempDir::new("unwritable");
        let file = dir.path().join("file");
        fs::write(&file, b"x").unwrap();
        // A directory cannot be created below a regular file.
        let err = write_run(&file.join("sub"), &fixtures::mixed_run()).unwrap_err();
        assert!(matches!(err, ReportError::Io { .. }));
    }
}
