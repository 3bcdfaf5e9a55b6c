//! Whether the requested backend could run anything at all.
//!
//! Without a driver or a device every clause of a real backend is
//! NotSupported, which alone would exit 0: a GPU CI runner that lost its
//! driver would stay green. [`unavailable`] tells that case apart, and
//! `run` and `differential` then exit [`EXIT_BACKEND_UNAVAILABLE`] unless
//! the user accepted it (`--allow-unsupported`, or expectations entries
//! that expect NotSupported for every clause that ran).

use crate::expectations::ExpectedOutcome;
use crate::model::ClauseResult;
use ipc_harness::Status;

pub use crate::exit::EXIT_BACKEND_UNAVAILABLE;

/// Why the backend `backend` ran nothing, when it is a real backend that
/// saw no device and every result is NotSupported, and no expectations
/// entry expected that of every result. `None` when it ran, or when the
/// user's expectations accept it.
pub fn unavailable(
    backend: &str,
    device_count: Option<u32>,
    results: &[ClauseResult],
) -> Option<String> {
    if backend == "sim" || device_count.is_some_and(|n| n > 0) || results.is_empty() {
        return None;
    }
    if !results.iter().all(|r| r.status == Status::NotSupported) {
        return None;
    }
    let expected = |r: &ClauseResult| {
        r.expectation
            .as_ref()
            .is_some_and(|e| e.expected == Some(ExpectedOutcome::NotSupported))
    };
    if results.iter().all(expected) {
        return None;
    }
    let why = results[0].message.lines().next().unwrap_or("").to_string();
    Some(format!(
        "backend {backend} cannot run at all (no device found; every clause is NotSupported): {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::result;
    use ipc_harness::Dialect;

    fn not_supported(id: &str) -> ClauseResult {
        let mut r = result(id, Status::NotSupported, Dialect::Runtime, "cuda");
        r.message = "libcuda.so not found".into();
        r
    }

    #[test]
    fn a_real_backend_without_devices_that_ran_nothing_is_unavailable() {
        let results = vec![not_supported("a.b.c"), not_supported("a.b.d")];
        let why = unavailable("cuda", None, &results).expect("unavailable");
        assert!(why.contains("libcuda.so not found"), "{why}");
        assert!(unavailable("cuda", Some(0), &results).is_some());
        // A device, the simulator, or one clause that ran: it could run.
        assert!(unavailable("cuda", Some(1), &results).is_none());
        assert!(unavailable("sim", None, &results).is_none());
        let mut ran = results.clone();
        ran.push(result("a.b.e", Status::Pass, Dialect::Runtime, "cuda"));
        assert!(unavailable("cuda", None, &ran).is_none());
        assert!(unavailable("cuda", None, &[]).is_none());
    }

    #[test]
    fn expectations_that_expect_not_supported_everywhere_accept_it() {
        let record = crate::expectations::ExpectationRecord {
            classification: crate::expectations::Classification::NotSupported,
            entry: Some(1),
            line: Some(1),
            expected: Some(ExpectedOutcome::NotSupported),
            error: None,
            reason: Some("CPU runner".into()),
            link: None,
            detail: String::new(),
            attempts: vec![],
        };
        let mut results = vec![not_supported("a.b.c"), not_supported("a.b.d")];
        results[0].expectation = Some(record.clone());
        assert!(unavailable("cuda", None, &results).is_some());
        results[1].expectation = Some(record);
        assert!(unavailable("cuda", None, &results).is_none());
    }
}
