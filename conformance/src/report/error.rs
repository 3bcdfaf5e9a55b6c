//! Why a report could not be written.

use std::io;
use std::path::PathBuf;

/// A report file that could not be serialized or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("cannot serialize {what}: {message}")]
    Serialize { what: String, message: String },
}
