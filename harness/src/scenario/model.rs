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
    pub meta: Metadata,
    /// Minimum devices the machine needs.
    pub devices: u32,
    /// `topology ...`: a simulated topology (simulator only).
    pub topology: Option<crate::machine::Topology>,
    /// `semantics name=value,...`: simulator semantic choices (simulator
    /// only), `(name, value)` in file order; empty when there is no such line.
    pub semantics: Vec<(String, String)>,
    pub processes: Vec<ProcessSpec>,
    /// The steps, in file order.
    pub steps: Vec<Step>,
    /// `expect hazard ...` / `expect no-hazards` lines, checked after the last step.
    pub hazard_expectations: Vec<HazardExpectation>,
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
