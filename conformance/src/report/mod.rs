//! Reports: `results.json` ([`json`]), `junit.xml` ([`junit`]) and
//! `summary.md` ([`markdown`]), each written atomically.

mod error;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod text;

pub use error::ReportError;

use crate::model::RunReport;
use std::path::{Path, PathBuf};

/// The default `--out` directory.
pub const DEFAULT_OUT_DIR: &str = "reports/latest";

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

/// Write one file given as `--out FILE` (`diff`, `summary`): its folder is
/// created if missing, then the file is written atomically. A folder
/// shared with others (`/tmp`) is fine for one file: nothing planted at
/// its name is followed ([`crate::safe_fs`]).
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| ReportError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    write_atomic(path, bytes)
}

/// Create the output directory (and parents), refusing one another user
/// could have planted or could tamper with ([`crate::safe_fs::prepare_dir`]).
pub fn ensure_dir(dir: &Path) -> Result<(), ReportError> {
    Ok(crate::safe_fs::prepare_dir(dir)?)
}

/// Write `results.json`, `junit.xml` and `summary.md` of one run into `dir`.
/// Returns the paths written. `results.json` and `junit.xml` are written
/// as they are rendered, never held whole in memory.
pub fn write_run(dir: &Path, report: &RunReport) -> Result<Vec<PathBuf>, ReportError> {
    ensure_dir(dir)?;
    let junit = junit::build(report);
    let summary = markdown::summary(std::slice::from_ref(report));
    // results.json last: the record readers act on is switched after the
    // files derived from it.
    let set: [(&str, crate::safe_fs::Contents<'_>); 3] = [
        ("junit.xml", &|w| junit::write(&junit, w)),
        ("summary.md", &|w| w.write_all(summary.as_bytes())),
        ("results.json", &|w| json::write(report, w)),
    ];
    Ok(crate::safe_fs::write_set_with(dir, &set)?)
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
mod tests {
    use super::testutil::TempDir;
    use super::*;
    use crate::model::fixtures;
    use std::fs;

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
