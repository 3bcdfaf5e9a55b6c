//! What a scenario is once parsed ([`Scenario`], or the [`ParseError`] that
//! stopped it) and what running one gives ([`Execution`]). A leaf under the
//! parser and the executor, which `mod.rs` puts together.

use super::ast::{HazardExpectation, Step};
use crate::errors::Dialect;
use crate::machine::ProcessSpec;
use crate::trace::{Trace, Verdict};
use std::path::PathBuf;
use std::time::Duration;

/// A parsed scenario file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Where it came from (for messages); `<inline>` for strings.
    pub path: PathBuf,
    /// The `# key: value` header lines.
    pub meta: Metadata,
    /// Minimum devices the machine needs.
    pub devices: u32,
    /// `topology ...`: a simulated topology (simulator only).
    pub topology: Option<crate::machine::Topology>,
    /// `semantics name=value,...`: simulator semantic choices (simulator
    /// only), `(name, value)` in file order; empty when there is no such line.
    pub semantics: Vec<(String, String)>,
    /// The processes, in declaration order (a step names one by index).
    pub processes: Vec<ProcessSpec>,
    /// The steps, in file order.
    pub steps: Vec<Step>,
    /// `expect hazard ...` / `expect no-hazards` lines, checked after the last step.
    pub hazard_expectations: Vec<HazardExpectation>,
}

/// `# key: value` header lines, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// `(key, value)` pairs, in file order.
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
    /// The scenario's path as given (or `<inline>`).
    pub file: String,
    /// 1-based line; 0 when the file could not be read.
    pub line: usize,
    /// 1-based column; 0 when the file could not be read.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// How to run a scenario: the dialect every process speaks, the seed (the
/// simulator's, and random handle bytes) and each step's time limit.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The API dialect of every process.
    pub dialect: Dialect,
    /// The run's seed.
    pub seed: u64,
    /// How long one step may take before its process counts as hung.
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
    /// What each step observed.
    pub trace: Trace,
    /// Whether the scenario's expectations held.
    pub verdict: Verdict,
}
