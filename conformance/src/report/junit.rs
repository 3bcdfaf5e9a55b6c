//! `junit.xml` for CI systems: a test suite per area (first id segment), a
//! test case per clause result. Fail is a `failure`; Crash, Timeout and
//! Broken are `error`s; NotSupported is `skipped`. Each case's system-out
//! holds the trace, step by step.
//!
//! The tier is the last part of each case's classname
//! (`sim.runtime.incidental`) and a `tier` property: CI test tabs (GitLab,
//! Jenkins, the GitHub junit reporters) show and group by classname, and
//! seldom show properties. A result that would fail the gate but whose tier
//! is not gated is `skipped` with type `NotGated`, so the tab's verdict is
//! the exit code's, and the failure is still listed with its message.

use super::error::ReportError;
use crate::catalogue::area_of;
use crate::model::{
    classification_of, tier_name, tiers_text, Classification, ClauseResult, RunReport,
};
use crate::report::text;
use ipc_harness::Status;
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

pub fn to_string(report: &RunReport) -> Result<String, ReportError> {
    build(report)
        .to_string()
        .map_err(|e| ReportError::Serialize {
            what: "junit.xml".into(),
            message: e.to_string(),
        })
}

/// Write a built report (see [`build`]) into `w`.
pub fn write(junit: &Report, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    junit
        .serialize(w)
        .map_err(|e| std::io::Error::other(format!("cannot serialize junit.xml: {e}")))
}

pub fn build(report: &RunReport) -> Report {
    let run = &report.run;
    let several_dialects = report
        .results
        .iter()
        .map(|r| r.dialect.as_str())
        .collect::<BTreeSet<_>>()
        .len()
        > 1;
    let mut suites: BTreeMap<&str, Vec<&ClauseResult>> = BTreeMap::new();
    for r in &report.results {
        suites.entry(area_of(&r.id)).or_default().push(r);
    }

    let mut junit = Report::new("ipc-conformance");
    junit.set_time(Duration::from_secs_f64(run.duration_ms.max(0.0) / 1000.0));
    for (area, results) in suites {
        let mut suite = TestSuite::new(area);
        suite.add_properties([
            Property::new("backend", run.backend.as_str()),
            Property::new("dialect", run.dialect.as_str()),
            Property::new("seed", run.seed.to_string()),
            Property::new("tool_version", run.tool_version.as_str()),
            Property::new(
                "git_revision",
                run.git_revision.as_deref().unwrap_or("unknown"),
            ),
            Property::new("gated_tiers", tiers_text(report.gated_tiers())),
        ]);
        let mut total = 0.0;
        for r in results {
            total += r.duration_ms;
            suite.add_test_case(test_case(r, several_dialects, report.gates(r)));
        }
        suite.set_time(Duration::from_secs_f64(total.max(0.0) / 1000.0));
        junit.add_test_suite(suite);
    }
    junit
}

fn test_case(r: &ClauseResult, several_dialects: bool, gated: bool) -> TestCase {
    let status = match r.status {
        Status::Pass => TestCaseStatus::success(),
        Status::NotSupported => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(r.message.as_str()).set_type("NotSupported");
            s
        }
        Status::Fail => non_success(NonSuccessKind::Failure, r),
        Status::Crash | Status::Timeout | Status::Broken => non_success(NonSuccessKind::Error, r),
    };
    // With expectations: expected failures pass, unexpected passes fail.
    let (status, mut note) = junit_status(r, status);
    // Outside the gated tiers, what would fail the gate is told, not failed.
    let status = if !gated && classification_of(r).fails_gate() {
        let mut s = TestCaseStatus::skipped();
        let message = format!(
            "not gated ({} tier): {}: {}",
            tier_name(r.tier),
            r.status.name(),
            r.message.lines().next().unwrap_or("")
        );
        s.set_message(message.as_str()).set_type("NotGated");
        let _ = writeln!(note, "{message}");
        s
    } else {
        status
    };
    let name = if several_dialects {
        format!("{} [{}]", r.id, r.dialect)
    } else {
        r.id.clone()
    };
    let mut case = TestCase::new(name, status);
    case.set_classname(format!("{}.{}.{}", r.backend, r.dialect, tier_name(r.tier)))
        .set_time(Duration::from_secs_f64(r.duration_ms.max(0.0) / 1000.0));
    case.add_property(Property::new("tier", tier_name(r.tier)));
    let mut out = format!(
        "{} — {}\n{}\ntier: {}\n{note}",
        r.id,
        r.title,
        r.path,
        tier_name(r.tier)
    );
    if let Some(trace) = &r.trace {
        out.push_str(&text::trace_text(trace));
    }
    case.set_system_out(out);
    case
}

/// The junit status of a classified result, and a note for its system-out:
/// an expected failure or a Flaky result is a passing test case with a note;
/// an unexpected pass is a failure `unexpected pass: <reason>`; anything
/// else keeps `status` (the status's own mapping).
pub fn junit_status(r: &ClauseResult, status: TestCaseStatus) -> (TestCaseStatus, String) {
    let Some(rec) = &r.expectation else {
        return (status, String::new());
    };
    let reason = rec.reason.as_deref().unwrap_or("");
    let mut note = format!("expectation: {}\n", text::describe(rec));
    match rec.classification {
        Classification::ExpectedFail | Classification::Flaky => {
            let _ = writeln!(note, "{}: {}", r.status.name(), r.message);
            for (i, a) in rec.attempts.iter().enumerate() {
                let _ = writeln!(note, "attempt {}: {} {}", i + 1, a.status.name(), a.message);
            }
            (TestCaseStatus::success(), note)
        }
        Classification::UnexpectedPass => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            let message = format!("unexpected pass: {reason}");
            s.set_message(message.as_str())
                .set_type("UnexpectedPass")
                .set_description(text::describe(rec));
            (s, note)
        }
        Classification::UnexpectedFail | Classification::NotSupported | Classification::Pass
            if rec.entry.is_some() || !rec.detail.is_empty() =>
        {
            (status, note)
        }
        _ => (status, String::new()),
    }
}

fn non_success(kind: NonSuccessKind, r: &ClauseResult) -> TestCaseStatus {
    let mut s = TestCaseStatus::non_success(kind);
    s.set_message(r.message.as_str())
        .set_type(r.status.name())
        .set_description(r.message.as_str());
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;
    use ipc_harness::Dialect;

    #[test]
    fn junit_has_suites_cases_and_non_success_elements() {
        let xml = to_string(&fixtures::mixed_run()).unwrap();
        assert!(xml.starts_with("<?xml"), "{xml}");
        for name in [
            "mem.open.refcount",
            "mem.open.twice",
            "ctx.peer.needs-two",
            "ctx.crash.x",
            "handle.slow.y",
            "handle.broken.z",
        ] {
            assert!(xml.contains(&format!("name=\"{name}\"")), "{name} in {xml}");
        }
        assert!(xml.contains("<testsuite name=\"mem\""));
        assert!(xml.contains("<testsuite name=\"ctx\""));
        assert!(xml.contains("<failure"));
        assert_eq!(xml.matches("<error").count(), 3);
        assert!(xml.contains("<skipped"));
        assert!(xml.contains("seed 1"));
        assert!(xml.contains("p = ipc_open h"));
        // Escaped, not raw.
        assert!(xml.contains("&lt;&amp;&gt;"));

        // And the XML parses back.
        let back = Report::deserialize_from_str(&xml).unwrap();
        assert_eq!(back.tests, 6);
        assert_eq!(back.failures, 1);
        assert_eq!(back.errors, 3);
        assert_eq!(back.test_suites.len(), 3);
    }

    #[test]
    fn two_dialects_get_distinct_case_names() {
        let run = fixtures::run(
            "sim",
            "all",
            vec![
                fixtures::result("mem.a", Status::Pass, Dialect::Runtime, "sim"),
                fixtures::result("mem.a", Status::Pass, Dialect::Driver, "sim"),
            ],
        );
        let xml = to_string(&run).unwrap();
        assert!(xml.contains("name=\"mem.a [runtime]\""));
        assert!(xml.contains("name=\"mem.a [driver]\""));
        assert!(xml.contains("classname=\"sim.driver.contract\""));
    }

    /// The tier is in each case's classname and properties; a failure of an
    /// ungated tier is a skipped `NotGated` case, and a failure when every
    /// tier gates.
    #[test]
    fn the_tier_is_shown_and_ungated_failures_are_skipped() {
        let mut failing = fixtures::result("mem.placement", Status::Fail, Dialect::Runtime, "sim");
        failing.tier = Some(ipc_harness::Tier::Incidental);
        let mut report = fixtures::run("sim", "runtime", vec![failing]);
        let xml = to_string(&report).unwrap();
        assert!(
            xml.contains("classname=\"sim.runtime.incidental\""),
            "{xml}"
        );
        assert!(xml.contains("name=\"tier\" value=\"incidental\""), "{xml}");
        assert!(
            xml.contains("name=\"gated_tiers\" value=\"contract, relied-on\""),
            "{xml}"
        );
        assert!(xml.contains("type=\"NotGated\""), "{xml}");
        assert!(xml.contains("not gated (incidental tier): Fail: "), "{xml}");
        let back = Report::deserialize_from_str(&xml).unwrap();
        assert_eq!((back.tests, back.failures, back.errors), (1, 0, 0));

        report.run.gated_tiers = Some(ipc_harness::Tier::ALL.to_vec());
        let back = Report::deserialize_from_str(&to_string(&report).unwrap()).unwrap();
        assert_eq!((back.tests, back.failures, back.errors), (1, 1, 0));
    }
}
