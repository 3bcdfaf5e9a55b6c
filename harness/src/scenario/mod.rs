//! The scenario language: model, parser and executor.
//! See `docs/scenario-language.md` for the language itself.

use crate::errors::Dialect;
use crate::machine::{Backend, Machine, ProcessSpec};
use crate::trace::{Trace, Verdict};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A parsed scenario file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Where it came from (for messages); `<inline>` for strings.
    pub path: PathBuf,
    pub meta: Metadata,
    /// Minimum devices the machine needs.
    pub devices: u32,
    pub processes: Vec<ProcessSpec>,
    // The lang helper adds the step model here (steps, hazard expectations).
}

/// `# key: value` header lines, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    pub entries: Vec<(String, String)>,
}

impl Metadata {
    /// All values of `key` joined by a space (multi-line quotes), if present.
    pub fn get(&self, key: &str) -> Option<String> {
        let parts: Vec<&str> = self
            .entries
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect();
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}

/// A malformed scenario: `file:line:column: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ParseError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(Debug, Clone)]
pub struct ExecOptions {
    pub dialect: Dialect,
    pub seed: u64,
    pub step_timeout: Duration,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            dialect: Dialect::Runtime,
            seed: 0,
            step_timeout: Duration::from_secs(20),
        }
    }
}

/// What running a scenario produced.
#[derive(Debug, Clone)]
pub struct Execution {
    pub trace: Trace,
    pub verdict: Verdict,
}

pub fn parse(_source: &str, _path: &Path) -> Result<Scenario, ParseError> {
    unimplemented!("scenario parser")
}

pub fn parse_file(path: &Path) -> Result<Scenario, ParseError> {
    let source = std::fs::read_to_string(path).map_err(|e| ParseError {
        file: path.display().to_string(),
        line: 0,
        column: 0,
        message: format!("cannot read file: {e}"),
    })?;
    parse(&source, path)
}

/// Start a machine on `backend` and run the scenario on it.
pub fn execute(_scenario: &Scenario, _backend: &dyn Backend, _opts: &ExecOptions) -> Execution {
    unimplemented!("executor")
}

/// Run the scenario on an already started machine (used with mocks).
pub fn execute_on(
    _scenario: &Scenario,
    _machine: &mut dyn Machine,
    _opts: &ExecOptions,
) -> Execution {
    unimplemented!("executor")
}
