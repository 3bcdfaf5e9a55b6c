//! Plain-text rendering of traces and outcomes, shared by the console,
//! `junit.xml` and the differential report.

use crate::model::{self, ExpectationRecord, RunReport};
use ipc_harness::trace::{CheckResult, StepOutcome, StepRecord, ValueSummary};
use ipc_harness::Tier;
use ipc_harness::Trace;
use std::fmt::Write as _;

/// The results of each tier, for the end of a run:
///
/// ```text
/// tiers (gated: contract, relied-on):
///   contract     66 results: 66 Pass
///   incidental  358 results: 356 Pass, 2 Fail  (not gated: 2 reported only)
/// ```
///
/// Results without a tier (broken clauses, old files) are the `-` row.
pub fn tier_lines(report: &RunReport) -> Vec<String> {
    let mut lines = vec![format!(
        "tiers (gated: {}):",
        model::tiers_text(report.gated_tiers())
    )];
    let order = Tier::ALL.map(Some).into_iter().chain([None]);
    for tier in order {
        let of_tier: Vec<model::ClauseResult> = report
            .results
            .iter()
            .filter(|r| r.tier == tier)
            .cloned()
            .collect();
        if of_tier.is_empty() {
            continue;
        }
        let ungated = of_tier
            .iter()
            .filter(|r| model::classification_of(r).fails_gate() && !report.gates(r))
            .count();
        let mut line = format!(
            "  {:<10} {}",
            model::tier_name(tier),
            model::totals_line(&of_tier)
        );
        if ungated > 0 {
            line.push_str(&format!("  (not gated: {ungated} reported only)"));
        }
        lines.push(line);
    }
    lines
}

/// `ok ptr owner.p1`, `error cudaErrorInvalidValue (1)`, `crash: ...`.
pub fn outcome_text(outcome: &StepOutcome) -> String {
    match outcome {
        StepOutcome::Ok { value } => match value {
            ValueSummary::Unit => "ok".to_string(),
            ValueSummary::Ptr { label } => format!("ok ptr {label}"),
            ValueSummary::Context { label } => format!("ok context {label}"),
            ValueSummary::Handle { label } => format!("ok handle {label}"),
            ValueSummary::Event { label } => format!("ok event {label}"),
            ValueSummary::Stream { label } => format!("ok stream {label}"),
            ValueSummary::Range { base, size } => format!("ok range base {base} size {size}"),
            ValueSummary::Int { value } => format!("ok value {value}"),
            ValueSummary::VmmHandle { label } => format!("ok vmm handle {label}"),
            ValueSummary::Fd { label } => format!("ok fd {label}"),
            ValueSummary::Pool { label } => format!("ok pool {label}"),
            ValueSummary::Bytes { pattern } => format!("ok bytes {pattern}"),
            ValueSummary::PointerInfo {
                memory_type,
                device,
            } => match device {
                Some(d) => format!("ok type {memory_type} device {d}"),
                None => format!("ok type {memory_type}"),
            },
        },
        StepOutcome::Error { code, name } => format!("error {name} ({code})"),
        StepOutcome::Crash { detail } => format!("crash: {detail}"),
        StepOutcome::Timeout { after_ms } => format!("timeout after {after_ms} ms"),
        StepOutcome::Broken { detail } => format!("broken: {detail}"),
        StepOutcome::Skipped { reason } => format!("skipped: {reason}"),
    }
}

/// `✓ ok` / `✗ ok: expected ok, got ...` / empty when nothing was checked.
pub fn check_text(check: Option<&CheckResult>) -> String {
    match check {
        None => String::new(),
        Some(c) if c.passed => format!("✓ {}", c.expected),
        Some(c) if c.message.is_empty() => format!("✗ {}", c.expected),
        Some(c) => format!("✗ {}: {}", c.expected, c.message),
    }
}

/// One step: `L13   peer: p = ipc_open h -> ok ptr peer.p1   ✓ ok`.
pub fn step_text(step: &StepRecord) -> String {
    let check = check_text(step.check.as_ref());
    let mut s = format!(
        "L{:<4} {}: {} -> {}",
        step.line,
        step.process,
        step.op,
        outcome_text(&step.outcome)
    );
    if !check.is_empty() {
        s.push_str("   ");
        s.push_str(&check);
    }
    s
}

/// The whole trace, a line per step, then hazard checks and the hazard log.
pub fn trace_text(trace: &Trace) -> String {
    let mut out = String::new();
    for step in &trace.steps {
        out.push_str(&step_text(step));
        out.push('\n');
    }
    for c in &trace.hazard_checks {
        out.push_str("hazard check ");
        out.push_str(&check_text(Some(c)));
        out.push('\n');
    }
    match &trace.hazards {
        None => out.push_str("hazards: no hazard log on this backend\n"),
        Some(h) if h.is_empty() => out.push_str("hazards: none\n"),
        Some(h) => {
            for hz in h {
                out.push_str(&format!(
                    "hazard {} (process {}{}): {}\n",
                    hz.kind.name(),
                    hz.process,
                    hz.step.map(|s| format!(", step {s}")).unwrap_or_default(),
                    hz.detail
                ));
            }
        }
    }
    out
}

/// `ExpectedFail (entry 2: driver 580 refuses ...)`, with the detail where
/// there is one.
pub fn describe(rec: &ExpectationRecord) -> String {
    let mut parts = Vec::new();
    if !rec.detail.is_empty() {
        parts.push(rec.detail.clone());
    }
    if let (Some(n), Some(reason)) = (rec.entry, &rec.reason) {
        let mut s = format!("entry {n}: {reason}");
        if let Some(link) = &rec.link {
            let _ = write!(s, " <{link}>");
        }
        parts.push(s);
    }
    if parts.is_empty() {
        rec.classification.name().to_string()
    } else {
        format!("{} ({})", rec.classification, parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures;

    #[test]
    fn trace_text_lists_steps_and_checks() {
        let t = trace_text(&fixtures::trace());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "L12   owner: a = malloc 2MiB -> ok ptr owner.p1");
        assert_eq!(
            lines[1],
            "L13   peer: p = ipc_open h -> error cudaErrorInvalidValue (1)   \
             ✗ ok: expected ok, got cudaErrorInvalidValue"
        );
        assert_eq!(lines[2], "hazards: none");
    }
}
