//! The scenario language: model, parser and executor.
//! See `docs/scenario-language.md` for the language itself.
//!
//! - [`ast`]: the step model ([`Step`], [`Op`], [`Expect`], ...);
//! - `lexer` / `parser`: the hand-written, line-oriented parser with validation;
//! - `executor` / `expect`: running steps on a [`Machine`] and judging them.

pub mod ast;
mod executor;
mod expect;
mod lexer;
pub mod limits;
mod model;
mod parser;
#[cfg(test)]
mod repeat_tests;
pub mod sharing;
#[cfg(test)]
mod tests;

pub use ast::{
    fmt_size, BytePattern, Expect, ExpectList, Expectation, HazardCheck, HazardExpectation, Op,
    ProcIndex, Ref, Step, ValueType, NULL_CONTEXT, NULL_EVENT, PER_THREAD_STREAM,
};
pub use ast::{KernelContent, PatternItem, MAX_KERNEL_WORD};
pub use executor::random_handle;
pub use model::{ExecOptions, Execution, Metadata, ParseError, Scenario};
pub use parser::MAX_WRITE_BYTES;

use crate::machine::{Backend, Machine};
use executor::TraceDetail;
use std::path::Path;

/// Parse and validate a scenario; `path` is only used in messages.
pub fn parse(source: &str, path: &Path) -> Result<Scenario, ParseError> {
    parser::parse(source, path)
}

/// Reads, parses and validates the scenario file at `path`.
pub fn parse_file(path: &Path) -> Result<Scenario, ParseError> {
    let source = read_scenario_file(path).map_err(|e| ParseError {
        file: path.display().to_string(),
        line: 0,
        column: 0,
        message: format!("cannot read file: {e}"),
    })?;
    parse(&source, path)
}

/// The text of a scenario file: a regular file (not a FIFO or a device,
/// which would block or never end) of at most
/// [`limits::MAX_SCENARIO_FILE_BYTES`].
fn read_scenario_file(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    let limit = limits::MAX_SCENARIO_FILE_BYTES;
    if !std::fs::metadata(path)?.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a scenario must be one)",
        ));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("longer than the limit of {limit} bytes for a scenario file"),
        ));
    }
    Ok(text)
}

/// Start a machine on `backend` and run the scenario on it (on reused
/// workers where the backend shares them and [`sharing`] allows).
pub fn execute(scenario: &Scenario, backend: &dyn Backend, opts: &ExecOptions) -> Execution {
    executor::execute(scenario, backend, opts, true, TraceDetail::Full)
}

/// What [`execute`] will ask `backend` to start for `scenario`: what a
/// caller that knows the scenarios to come tells [`Backend::expect`].
pub fn upcoming(scenario: &Scenario, opts: &ExecOptions) -> crate::machine::Upcoming {
    crate::machine::Upcoming {
        spec: executor::machine_spec(scenario, opts),
        sharing: sharing::sharing(scenario),
        fits: sharing::worker_fits(scenario),
    }
}

/// [`execute`] for a caller that judges the outcomes and keeps no trace
/// (explore's property checks): each step record leaves out what only a
/// kept trace shows, the step's text (`op` is empty), process name, API
/// name, expectation text and wall time (formatting the texts was a fifth
/// of an `explore` case). Verdicts, outcomes and check results are
/// [`execute`]'s.
pub fn execute_for_outcomes(
    scenario: &Scenario,
    backend: &dyn Backend,
    opts: &ExecOptions,
) -> Execution {
    executor::execute(scenario, backend, opts, true, TraceDetail::OutcomesOnly)
}

/// [`execute`] on processes that never served another scenario (unless
/// the backend reuses workers for everything, as `--workers reused` asks):
/// what the scenario observes there cannot be an earlier one's leftovers.
pub fn execute_fresh(scenario: &Scenario, backend: &dyn Backend, opts: &ExecOptions) -> Execution {
    executor::execute(scenario, backend, opts, false, TraceDetail::Full)
}

/// Run the scenario on an already started machine (used with mocks).
pub fn execute_on(scenario: &Scenario, machine: &mut dyn Machine, opts: &ExecOptions) -> Execution {
    executor::execute_on(scenario, machine, opts, TraceDetail::Full)
}
