//! The results model: what one run produced, as `results.json` holds it
//! (`docs/results-schema.md`). Every other part of the crate builds on it:
//! the runner fills it, the expectations classify it, the renderers
//! (`report`, `diff`, `differential`) read it, and `merge` combines it; it
//! imports none of them.
//!
//! A change to what these types serialize is a change to `results.json`:
//! it bumps [`SCHEMA_VERSION`].

use crate::catalogue::ClauseKind;
use ipc_harness::{Dialect, Status, Tier, Trace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The version of this tool, recorded in every report.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Version of the `results.json` schema (`docs/results-schema.md`).
/// Version 2 added each result's `tier` and `run.gated_tiers`, and with
/// them a new meaning of the exit code: only gated tiers can fail a run.
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest `results.json` schema this tool still reads. Version 1 files
/// have no tiers: every result of theirs gates, as it did when they were
/// written.
pub const OLDEST_READABLE_SCHEMA: u32 = 1;

/// The tiers whose results can fail a run unless `--tiers` says otherwise:
/// what the documents promise and what widely used software relies on.
pub const DEFAULT_GATED_TIERS: [Tier; 2] = [Tier::Contract, Tier::ReliedOn];

/// The outcome of one clause in one dialect on one backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClauseResult {
    pub id: String,
    pub title: String,
    pub kind: Option<ClauseKind>,
    /// The clause's tier; `None` for a clause without a valid one (broken)
    /// and in files written before tiers existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// The clause file.
    pub path: String,
    pub status: Status,
    /// Why it is not Pass (empty for Pass). Failures name the seed.
    pub message: String,
    pub duration_ms: f64,
    pub dialect: Dialect,
    pub backend: String,
    pub seed: u64,
    /// `None` when the clause never ran (broken clause, panic).
    pub trace: Option<Trace>,
    /// How the result stands against `--expectations` (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectation: Option<ExpectationRecord>,
}

/// Facts about a run (`results.json` → `run`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub tool_version: String,
    /// `sim` or `cuda`.
    pub backend: String,
    /// `runtime`, `driver`, or `all` when both ran.
    pub dialect: String,
    pub seed: u64,
    pub step_timeout_ms: u64,
    pub git_revision: Option<String>,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub duration_ms: f64,
    pub host: Option<String>,
    /// `--filter` patterns; empty when every clause was selected.
    pub filter: Vec<String>,
    pub clauses_dir: Option<String>,
    /// True when the run stopped before every selected clause ran.
    pub interrupted: bool,
    pub gpu_name: Option<String>,
    pub compute_capability: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub cuda_runtime_version: Option<String>,
    pub device_count: Option<u32>,
    /// Simulator semantic choices in force (empty on real hardware).
    pub semantics: BTreeMap<String, String>,
    /// Real backend: the worker policy and the workers' hardware queues
    /// (absent on the simulator and in files written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<String>,
    /// `K/N` when this run is one shard (`run --shard`).
    #[serde(default)]
    pub shard: Option<String>,
    /// Set by `merge`: the merged inputs and their shards.
    #[serde(default)]
    pub merged: Option<MergeInfo>,
    /// The `--expectations` file (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectations: Option<ExpectationsRun>,
    /// `--tiers`: the tiers whose results can fail the run. `None` in files
    /// written before tiers existed, where every result gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gated_tiers: Option<Vec<Tier>>,
}

/// One `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub run: RunInfo,
    /// Count per status name; every status is present (zero included).
    pub totals: BTreeMap<String, usize>,
    /// Count per classification name when results were classified against
    /// `--expectations` (absent without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classification_totals: Option<BTreeMap<String, usize>>,
    pub results: Vec<ClauseResult>,
}

impl RunReport {
    pub fn new(run: RunInfo, results: Vec<ClauseResult>) -> RunReport {
        RunReport {
            schema_version: SCHEMA_VERSION,
            totals: totals(&results),
            classification_totals: classification_totals(&results),
            run,
            results,
        }
    }

    /// `12 clauses: 10 Pass, 2 NotSupported`.
    pub fn totals_line(&self) -> String {
        totals_line(&self.results)
    }

    /// The tiers that gate this run (`None`: every result gates).
    pub fn gated_tiers(&self) -> Option<&[Tier]> {
        self.run.gated_tiers.as_deref()
    }

    /// Whether `r` (one of this run's results) can fail the run.
    pub fn gates(&self, r: &ClauseResult) -> bool {
        gates(r, self.gated_tiers())
    }

    /// The gate's verdict on this run ([`gate_passed`]).
    pub fn gate_passed(&self) -> bool {
        gate_passed(&self.results, self.gated_tiers())
    }
}

/// A `--tiers` value: `all`, or a comma list of tier names
/// ([`crate::catalogue::parse_tiers`]); an unknown name is an error that
/// lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierList(pub Vec<Tier>);

impl std::str::FromStr for TierList {
    type Err = String;
    fn from_str(s: &str) -> Result<TierList, String> {
        crate::catalogue::parse_tiers(s).map(TierList)
    }
}

impl Default for TierList {
    fn default() -> TierList {
        TierList(DEFAULT_GATED_TIERS.to_vec())
    }
}

/// Whether a result can fail a run gated on `gated` tiers (`None`: every
/// tier). A result without a tier gates (a broken clause, an old file), and
/// so does a Broken result whatever its tier: the harness or the clause file
/// is at fault, which no tier excuses.
pub fn gates(r: &ClauseResult, gated: Option<&[Tier]>) -> bool {
    match (gated, r.tier) {
        (Some(gated), Some(tier)) => r.status == Status::Broken || gated.contains(&tier),
        _ => true,
    }
}

/// `contract`, `relied-on`, `incidental`, or `-` for a result without a
/// tier.
pub fn tier_name(tier: Option<Tier>) -> &'static str {
    tier.map_or("-", Tier::as_str)
}

/// `contract, relied-on`, or `every tier` for `None`.
pub fn tiers_text(tiers: Option<&[Tier]>) -> String {
    match tiers {
        None => "every tier".to_string(),
        Some([]) => "no tier".to_string(),
        Some(t) => t.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", "),
    }
}

/// Count per status name of each tier's results, in [`Tier::ALL`] order
/// with results without a tier last (as `None`); tiers with no result are
/// left out.
pub fn totals_per_tier(results: &[ClauseResult]) -> Vec<(Option<Tier>, BTreeMap<String, usize>)> {
    let order = Tier::ALL.map(Some).into_iter().chain([None]);
    order
        .filter_map(|tier| {
            let of_tier: Vec<ClauseResult> =
                results.iter().filter(|r| r.tier == tier).cloned().collect();
            (!of_tier.is_empty()).then(|| (tier, totals(&of_tier)))
        })
        .collect()
}

/// Count per status name, every status present.
pub fn totals(results: &[ClauseResult]) -> BTreeMap<String, usize> {
    let mut t: BTreeMap<String, usize> = ALL_STATUSES
        .iter()
        .map(|s| (s.name().to_string(), 0))
        .collect();
    for r in results {
        *t.entry(r.status.name().to_string()).or_default() += 1;
    }
    t
}

/// Milliseconds spent starting machines (processes and contexts), running
/// steps, and shutting machines down, over all results.
pub fn time_split(results: &[ClauseResult]) -> (f64, f64, f64) {
    results
        .iter()
        .filter_map(|r| r.trace.as_ref())
        .fold((0.0, 0.0, 0.0), |(a, b, c), t| {
            let ms = |us: u64| us as f64 / 1000.0;
            (
                a + ms(t.timing.start_us),
                b + ms(t.timing.steps_us),
                c + ms(t.timing.shutdown_us),
            )
        })
}

pub fn totals_line(results: &[ClauseResult]) -> String {
    let t = totals(results);
    let parts: Vec<String> = ALL_STATUSES
        .iter()
        .filter_map(|s| {
            let n = t[s.name()];
            (n > 0).then(|| format!("{n} {}", s.name()))
        })
        .collect();
    let noun = if results.len() == 1 {
        "result"
    } else {
        "results"
    };
    if parts.is_empty() {
        format!("0 {noun}")
    } else {
        format!("{} {noun}: {}", results.len(), parts.join(", "))
    }
}

/// Every status, in report order.
pub const ALL_STATUSES: [Status; 6] = [
    Status::Pass,
    Status::Fail,
    Status::NotSupported,
    Status::Crash,
    Status::Timeout,
    Status::Broken,
];

// ---------------------------------------------------------------------------
// Expectations: what a result was expected to do, and how it stood

/// The outcome an entry expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExpectedOutcome {
    /// An expectation of the clause did not hold (status Fail), optionally
    /// with a given error at the failing step.
    Fail,
    Crash,
    Timeout,
    /// A requirement is absent (too few devices, ...).
    NotSupported,
    /// Sometimes passes, sometimes not: re-run when it does not pass.
    Flaky,
}

impl ExpectedOutcome {
    pub const ALL: [ExpectedOutcome; 5] = [
        ExpectedOutcome::Fail,
        ExpectedOutcome::Crash,
        ExpectedOutcome::Timeout,
        ExpectedOutcome::NotSupported,
        ExpectedOutcome::Flaky,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ExpectedOutcome::Fail => "Fail",
            ExpectedOutcome::Crash => "Crash",
            ExpectedOutcome::Timeout => "Timeout",
            ExpectedOutcome::NotSupported => "NotSupported",
            ExpectedOutcome::Flaky => "Flaky",
        }
    }

    pub(crate) fn from_name(s: &str) -> Option<ExpectedOutcome> {
        Self::ALL.into_iter().find(|o| o.name() == s)
    }

    /// The status this outcome names (none for Flaky).
    pub fn status(self) -> Option<Status> {
        match self {
            ExpectedOutcome::Fail => Some(Status::Fail),
            ExpectedOutcome::Crash => Some(Status::Crash),
            ExpectedOutcome::Timeout => Some(Status::Timeout),
            ExpectedOutcome::NotSupported => Some(Status::NotSupported),
            ExpectedOutcome::Flaky => None,
        }
    }
}

impl fmt::Display for ExpectedOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a result stands against the expectations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Classification {
    /// Passed (and no entry expected otherwise).
    Pass,
    /// Failed, crashed or timed out exactly as an entry expected.
    ExpectedFail,
    /// Failed, crashed, timed out or was Broken, and no entry expected that.
    UnexpectedFail,
    /// An entry expected a non-pass outcome, but it passed.
    UnexpectedPass,
    /// A requirement is absent.
    NotSupported,
    /// Marked Flaky, and its attempts did not all end the same way.
    Flaky,
}

impl Classification {
    /// Report order.
    pub const ALL: [Classification; 6] = [
        Classification::Pass,
        Classification::ExpectedFail,
        Classification::UnexpectedFail,
        Classification::UnexpectedPass,
        Classification::NotSupported,
        Classification::Flaky,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Classification::Pass => "Pass",
            Classification::ExpectedFail => "ExpectedFail",
            Classification::UnexpectedFail => "UnexpectedFail",
            Classification::UnexpectedPass => "UnexpectedPass",
            Classification::NotSupported => "NotSupported",
            Classification::Flaky => "Flaky",
        }
    }

    /// UnexpectedFail and UnexpectedPass fail the gate; nothing else does.
    pub fn fails_gate(self) -> bool {
        matches!(
            self,
            Classification::UnexpectedFail | Classification::UnexpectedPass
        )
    }

    /// The classification of a result that no entry matched (or of any
    /// result, with no expectations file): Broken is always unexpected.
    pub fn unmatched(status: Status) -> Classification {
        match status {
            Status::Pass => Classification::Pass,
            Status::NotSupported => Classification::NotSupported,
            _ => Classification::UnexpectedFail,
        }
    }

    /// The summary.md symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            Classification::Pass => "✅",
            Classification::ExpectedFail => "☑️",
            Classification::UnexpectedFail => "❌",
            Classification::UnexpectedPass => "❗",
            Classification::NotSupported => "⏭",
            Classification::Flaky => "🎲",
        }
    }
}

impl fmt::Display for Classification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One run of a clause (the first, and any re-runs of a Flaky clause).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub status: Status,
    pub message: String,
    pub duration_ms: f64,
}

impl Attempt {
    pub fn of(r: &ClauseResult) -> Attempt {
        Attempt {
            status: r.status,
            message: r.message.clone(),
            duration_ms: r.duration_ms,
        }
    }
}

/// `results.json` → `results[].expectation`: how a result stands against
/// the expectations file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectationRecord {
    pub classification: Classification,
    /// 1-based index of the first matching entry; null when none matched.
    pub entry: Option<usize>,
    /// Line of that entry in the file.
    pub line: Option<usize>,
    /// The entry's outcome.
    pub expected: Option<ExpectedOutcome>,
    /// The entry's `error`.
    pub error: Option<String>,
    pub reason: Option<String>,
    pub link: Option<String>,
    /// Why the classification is what it is, where that is not obvious
    /// (an error mismatch, a different failure, a consistent Flaky failure).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Every attempt, when a Flaky clause was re-run (the result's own
    /// status, message and trace are the first attempt's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
}

/// `results.json` → `run.expectations`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectationsRun {
    /// The expectations file, as given on the command line.
    pub file: String,
    /// Number of `[[expect]]` entries.
    pub entries: usize,
    /// `--flaky-retries`.
    pub flaky_retries: u32,
}

/// Count per classification name, every classification present; `None`
/// when no result carries an expectation record (no expectations file).
pub fn classification_totals(results: &[ClauseResult]) -> Option<BTreeMap<String, usize>> {
    if results.iter().all(|r| r.expectation.is_none()) {
        return None;
    }
    let mut t: BTreeMap<String, usize> = Classification::ALL
        .iter()
        .map(|c| (c.name().to_string(), 0))
        .collect();
    for r in results {
        *t.entry(classification_of(r).name().to_string())
            .or_default() += 1;
    }
    Some(t)
}

/// The result's classification; a result without a record (not classified)
/// counts as its status would with an empty expectations file.
pub fn classification_of(r: &ClauseResult) -> Classification {
    match &r.expectation {
        Some(rec) => rec.classification,
        None => Classification::unmatched(r.status),
    }
}

/// The gate's verdict: true when no result that gates ([`gates`]) is
/// UnexpectedFail or UnexpectedPass (or Broken). Without expectations every
/// result counts as its status would with an empty expectations file, so
/// the verdict is "every gated result passed or was NotSupported".
pub fn gate_passed(results: &[ClauseResult], gated: Option<&[Tier]>) -> bool {
    results
        .iter()
        .filter(|r| gates(r, gated))
        .all(|r| r.status != Status::Broken && !classification_of(r).fails_gate())
}

// ---------------------------------------------------------------------------
// Merges

/// What `merge` records in `run.merged`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MergeInfo {
    /// The inputs' shards (`1/4`, ...), sorted; empty when no input was a shard.
    pub shards: Vec<String>,
    /// The merged files, in command-line order.
    pub inputs: Vec<MergedInput>,
}

/// One merged `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergedInput {
    pub path: String,
    pub shard: Option<String>,
    pub host: Option<String>,
    pub started_at: String,
    pub duration_ms: f64,
    pub interrupted: bool,
    /// Number of results it contributed.
    pub results: usize,
}

/// Results and runs for the tests of every part that reads the model.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::{ClauseResult, RunInfo, RunReport};
    use crate::catalogue::ClauseKind;
    use ipc_harness::trace::{CheckResult, StepOutcome, StepRecord, ValueSummary};
    use ipc_harness::{Dialect, Status, Tier, Trace};
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
            tier: Some(Tier::Contract),
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
                workers: None,
                shard: None,
                merged: None,
                expectations: None,
                gated_tiers: Some(crate::model::DEFAULT_GATED_TIERS.to_vec()),
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
