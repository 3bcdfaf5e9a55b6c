//! The differential check: every clause on the simulator and on a real
//! backend, traces compared step by step ([`Trace::differences`]).
//!
//! - A clause NotSupported or Broken on either side, or without a trace on
//!   either side, is *not compared* (listed with the reason).
//! - Differences in `undefined` clauses are reported but not judged: the
//!   language records the driver's answers to undefined behaviour without
//!   judging them.
//! - The check fails (exit 1) on any judged difference of a clause in the
//!   gated tiers (`--tiers`, recorded in the simulator run's
//!   `gated_tiers`) and on any Broken result (a harness failure on either
//!   side). Differences of other tiers are reported, and counted per tier.

use crate::catalogue::{ClauseKind, Tier};
use crate::model::{tier_name, ClauseResult, RunInfo, RunReport};
use crate::report::markdown::{self, cell, status_symbol};
use crate::report::text::outcome_text;
use crate::report::ReportError;
use crate::sysinfo;
use ipc_harness::trace::StepDifference;
use ipc_harness::{Dialect, Status, Trace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Version 2 added each compared clause's `tier`, `gated_tiers`, the
/// per-tier totals and `differing_ungated`.
pub const SCHEMA_VERSION: u32 = 2;

/// A clause compared on both backends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    pub id: String,
    pub title: String,
    pub kind: Option<ClauseKind>,
    /// The clause's tier (`None`: it has none, and gates).
    #[serde(default)]
    pub tier: Option<Tier>,
    pub dialect: Dialect,
    pub sim_status: Status,
    pub real_status: Status,
    pub sim_message: String,
    pub real_message: String,
    /// False for `undefined` clauses: differences are informational.
    pub judged: bool,
    /// Every step whose observation differs (`left` = simulator, `right` = real).
    pub differences: Vec<StepDifference>,
}

/// A clause that could not be compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotCompared {
    pub id: String,
    pub dialect: Dialect,
    /// `None` when the clause did not run on that side.
    pub sim_status: Option<Status>,
    pub real_status: Option<Status>,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DiffTotals {
    pub compared: usize,
    pub identical: usize,
    /// Clauses with at least one judged difference, of every tier.
    pub differing: usize,
    /// Of `differing`, those outside the gated tiers: reported, not failing.
    #[serde(default)]
    pub differing_ungated: usize,
    /// `undefined` clauses with differences (not judged).
    pub differing_unjudged: usize,
    pub not_compared: usize,
    /// Broken results on either side.
    pub broken: usize,
    /// The compared clauses of each tier (`-`: without a tier).
    #[serde(default)]
    pub per_tier: BTreeMap<String, TierTotals>,
}

/// The compared clauses of one tier.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TierTotals {
    pub compared: usize,
    pub identical: usize,
    /// With a judged difference.
    pub differing: usize,
    /// `undefined` clauses with differences.
    pub differing_unjudged: usize,
    /// Whether a judged difference of this tier fails the check.
    pub gated: bool,
}

/// `differential.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DifferentialReport {
    pub schema_version: u32,
    pub started_at: String,
    pub duration_ms: f64,
    pub sim: RunInfo,
    pub real: RunInfo,
    /// The tiers whose judged differences fail the check (`None`: every
    /// tier, as in files written before tiers existed).
    #[serde(default)]
    pub gated_tiers: Option<Vec<Tier>>,
    pub totals: DiffTotals,
    pub compared: Vec<Compared>,
    pub not_compared: Vec<NotCompared>,
    /// Both full result sets (for the matrix in `differential.md`).
    pub sim_results: Vec<ClauseResult>,
    pub real_results: Vec<ClauseResult>,
}

impl DifferentialReport {
    /// 0 when no judged difference in a gated tier and nothing Broken,
    /// else 1.
    pub fn exit_code(&self) -> u8 {
        let gated_differing = self.totals.differing - self.totals.differing_ungated;
        if gated_differing == 0 && self.totals.broken == 0 {
            crate::exit::EXIT_OK
        } else {
            crate::exit::EXIT_FAILURES
        }
    }

    /// Whether a judged difference of a clause of `tier` fails the check.
    pub fn gates(&self, tier: Option<Tier>) -> bool {
        match (&self.gated_tiers, tier) {
            (Some(gated), Some(tier)) => gated.contains(&tier),
            _ => true,
        }
    }

    fn runs(&self) -> [RunReport; 2] {
        [
            RunReport::new(self.sim.clone(), self.sim_results.clone()),
            RunReport::new(self.real.clone(), self.real_results.clone()),
        ]
    }
}

type Key = (String, &'static str, String);

fn key(r: &ClauseResult) -> Key {
    (r.id.clone(), r.dialect.as_str(), r.path.clone())
}

/// Compare a simulator run with a real run of the same clauses.
pub fn compare(sim: RunReport, real: RunReport) -> DifferentialReport {
    let mut real_by_key: BTreeMap<Key, &ClauseResult> = BTreeMap::new();
    for r in &real.results {
        real_by_key.insert(key(r), r);
    }
    let mut compared = Vec::new();
    let mut not_compared = Vec::new();
    let mut totals = DiffTotals::default();
    let mut seen = std::collections::BTreeSet::new();
    let gated_tiers = sim.run.gated_tiers.clone();
    let gates = |tier: Option<Tier>| match (&gated_tiers, tier) {
        (Some(gated), Some(tier)) => gated.contains(&tier),
        _ => true,
    };

    for s in &sim.results {
        let k = key(s);
        seen.insert(k.clone());
        let r = real_by_key.get(&k).copied();
        totals.broken += usize::from(s.status == Status::Broken)
            + usize::from(r.is_some_and(|r| r.status == Status::Broken));
        let Some(r) = r else {
            not_compared.push(NotCompared {
                id: s.id.clone(),
                dialect: s.dialect,
                sim_status: Some(s.status),
                real_status: None,
                reason: "did not run on the real backend".into(),
            });
            continue;
        };
        if let Some(reason) = not_comparable(s, r) {
            not_compared.push(NotCompared {
                id: s.id.clone(),
                dialect: s.dialect,
                sim_status: Some(s.status),
                real_status: Some(r.status),
                reason,
            });
            continue;
        }
        let (st, rt): (&Trace, &Trace) = match (&s.trace, &r.trace) {
            (Some(a), Some(b)) => (a, b),
            _ => unreachable!("not_comparable checks traces"),
        };
        let differences = st.differences(rt);
        let judged = s.kind != Some(ClauseKind::Undefined);
        totals.compared += 1;
        let of_tier = totals
            .per_tier
            .entry(tier_name(s.tier).to_string())
            .or_insert_with(|| TierTotals {
                gated: gates(s.tier),
                ..TierTotals::default()
            });
        of_tier.compared += 1;
        if differences.is_empty() {
            totals.identical += 1;
            of_tier.identical += 1;
        } else if judged {
            totals.differing += 1;
            of_tier.differing += 1;
            totals.differing_ungated += usize::from(!gates(s.tier));
        } else {
            totals.differing_unjudged += 1;
            of_tier.differing_unjudged += 1;
        }
        compared.push(Compared {
            id: s.id.clone(),
            title: s.title.clone(),
            kind: s.kind,
            tier: s.tier,
            dialect: s.dialect,
            sim_status: s.status,
            real_status: r.status,
            sim_message: s.message.clone(),
            real_message: r.message.clone(),
            judged,
            differences,
        });
    }
    for r in &real.results {
        if !seen.contains(&key(r)) {
            totals.broken += usize::from(r.status == Status::Broken);
            not_compared.push(NotCompared {
                id: r.id.clone(),
                dialect: r.dialect,
                sim_status: None,
                real_status: Some(r.status),
                reason: "did not run on the simulator".into(),
            });
        }
    }
    totals.not_compared = not_compared.len();
    DifferentialReport {
        schema_version: SCHEMA_VERSION,
        started_at: sim.run.started_at.clone(),
        duration_ms: sim.run.duration_ms + real.run.duration_ms,
        sim: sim.run,
        real: real.run,
        gated_tiers,
        totals,
        compared,
        not_compared,
        sim_results: sim.results,
        real_results: real.results,
    }
}

fn not_comparable(s: &ClauseResult, r: &ClauseResult) -> Option<String> {
    let side = |x: &ClauseResult, name: &str| -> Option<String> {
        match x.status {
            Status::NotSupported | Status::Broken => {
                Some(format!("{} on {name}: {}", x.status.name(), x.message))
            }
            _ if x.trace.is_none() => Some(format!("no trace on {name}: {}", x.message)),
            _ => None,
        }
    };
    match (side(s, "the simulator"), side(r, "the real backend")) {
        (None, None) => None,
        (Some(a), None) | (None, Some(a)) => Some(a),
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
    }
}

fn outcome_or_missing(o: &Option<ipc_harness::trace::StepOutcome>) -> String {
    o.as_ref()
        .map(outcome_text)
        .unwrap_or_else(|| "(no such step)".into())
}

/// One line per differing step:
/// `DIFF mem.open.twice [runtime] L13 p = ipc_open h: sim error ... | real ok ...`.
pub fn difference_lines(report: &DifferentialReport) -> Vec<String> {
    let mut out = Vec::new();
    for c in &report.compared {
        let label = match (c.judged, report.gates(c.tier)) {
            (false, _) => "diff (undefined, not judged)".to_string(),
            (true, true) => "DIFF".to_string(),
            (true, false) => format!("diff ({}, not gated)", tier_name(c.tier)),
        };
        for d in &c.differences {
            out.push(format!(
                "{label} {} [{}] L{} {}: sim {} | real {}",
                c.id,
                c.dialect,
                d.line,
                d.op,
                outcome_or_missing(&d.left),
                outcome_or_missing(&d.right)
            ));
        }
    }
    out
}

pub fn totals_line(report: &DifferentialReport) -> String {
    let t = &report.totals;
    let ungated = if t.differing_ungated > 0 {
        format!(" ({} not gated)", t.differing_ungated)
    } else {
        String::new()
    };
    format!(
        "{} compared: {} identical, {} differing{ungated}, {} differing but not judged (undefined); {} not compared; {} broken",
        t.compared, t.identical, t.differing, t.differing_unjudged, t.not_compared, t.broken
    )
}

/// The tiers in report order (`-`, clauses without a tier, last) with
/// their totals.
fn tiers_in_order(report: &DifferentialReport) -> Vec<(&str, &TierTotals)> {
    let names = Tier::ALL.map(Tier::as_str).into_iter().chain(["-"]);
    names
        .filter_map(|n| report.totals.per_tier.get(n).map(|t| (n, t)))
        .collect()
}

/// `per tier: contract 60 compared, 60 identical; incidental 316
/// compared, 300 identical, 16 differing (not gated)`.
pub fn per_tier_line(report: &DifferentialReport) -> String {
    let parts: Vec<String> = tiers_in_order(report)
        .into_iter()
        .map(|(name, t)| {
            let mut part = format!("{name} {} compared, {} identical", t.compared, t.identical);
            if t.differing > 0 {
                let _ = write!(part, ", {} differing", t.differing);
                if !t.gated {
                    part.push_str(" (not gated)");
                }
            }
            if t.differing_unjudged > 0 {
                let _ = write!(part, ", {} undefined differing", t.differing_unjudged);
            }
            part
        })
        .collect();
    format!(
        "per tier (gated: {}): {}",
        crate::model::tiers_text(report.gated_tiers.as_deref()),
        if parts.is_empty() {
            "nothing compared".to_string()
        } else {
            parts.join("; ")
        }
    )
}

pub fn to_json(report: &DifferentialReport) -> Result<String, ReportError> {
    let mut s = serde_json::to_string_pretty(report).map_err(|e| ReportError::Serialize {
        what: "differential.json".into(),
        message: e.to_string(),
    })?;
    s.push('\n');
    Ok(s)
}

/// `differential.md`.
pub fn to_markdown(report: &DifferentialReport) -> String {
    let mut out = String::from("# IPC conformance: simulator vs real backend\n\n");
    out.push_str("| | simulator | real |\n| --- | --- | --- |\n");
    type Row = (&'static str, fn(&RunInfo) -> String);
    let rows: [Row; 7] = [
        ("backend", |r| r.backend.clone()),
        ("dialect", |r| r.dialect.clone()),
        ("seed", |r| r.seed.to_string()),
        ("GPU", |r| r.gpu_name.clone().unwrap_or_else(|| "—".into())),
        ("driver", |r| {
            r.driver_version.clone().unwrap_or_else(|| "—".into())
        }),
        ("devices", |r| {
            r.device_count
                .map(|d| d.to_string())
                .unwrap_or_else(|| "—".into())
        }),
        ("duration", |r| sysinfo::human_ms(r.duration_ms)),
    ];
    for (name, f) in rows {
        let _ = writeln!(
            out,
            "| {name} | {} | {} |",
            cell(&f(&report.sim)),
            cell(&f(&report.real))
        );
    }
    let _ = writeln!(
        out,
        "\nStarted {} · tool {} · git {}\n",
        report.started_at,
        report.sim.tool_version,
        report.sim.git_revision.as_deref().unwrap_or("unknown")
    );
    let _ = writeln!(out, "**{}**\n", totals_line(report));
    out.push_str("| tier | gated | compared | identical | differing | undefined, differing |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: |\n");
    for (name, t) in tiers_in_order(report) {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} |",
            if t.gated { "yes" } else { "no" },
            t.compared,
            t.identical,
            t.differing,
            t.differing_unjudged
        );
    }
    out.push('\n');

    out.push_str("## Differences\n\n");
    let differing: Vec<&Compared> = report
        .compared
        .iter()
        .filter(|c| !c.differences.is_empty())
        .collect();
    if differing.is_empty() {
        out.push_str("None: every compared clause observed the same outcomes.\n");
    }
    for c in differing {
        let _ = writeln!(
            out,
            "### `{}` ({}, {}){}\n\n{}\n\nsimulator {} {} · real {} {}\n",
            c.id,
            c.dialect,
            tier_name(c.tier),
            match (c.judged, report.gates(c.tier)) {
                (false, _) => " — undefined, not judged",
                (true, false) => " — not gated",
                (true, true) => "",
            },
            cell(&c.title),
            status_symbol(c.sim_status),
            c.sim_status.name(),
            status_symbol(c.real_status),
            c.real_status.name()
        );
        out.push_str("| line | step | simulator | real |\n| ---: | --- | --- | --- |\n");
        for d in &c.differences {
            let _ = writeln!(
                out,
                "| {} | `{}` | {} | {} |",
                d.line,
                cell(&d.op),
                cell(&outcome_or_missing(&d.left)),
                cell(&outcome_or_missing(&d.right))
            );
        }
        out.push('\n');
    }

    if !report.not_compared.is_empty() {
        out.push_str("\n## Not compared\n\n");
        for n in &report.not_compared {
            let st = |s: Option<Status>| s.map(|s| s.name()).unwrap_or("not run");
            let _ = writeln!(
                out,
                "- `{}` ({}): simulator {}, real {} — {}",
                n.id,
                n.dialect,
                st(n.sim_status),
                st(n.real_status),
                n.reason.replace('\n', " ")
            );
        }
    }

    out.push_str("\n## Matrix\n\n");
    out.push_str(&markdown::matrix(&report.runs()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{result, run, trace};
    use ipc_harness::trace::{StepOutcome, ValueSummary};

    fn with_second_step(mut r: ClauseResult, outcome: StepOutcome) -> ClauseResult {
        r.trace.as_mut().unwrap().steps[1].outcome = outcome;
        r
    }

    #[test]
    fn differences_not_compared_and_exit_code() {
        let ok = StepOutcome::Ok {
            value: ValueSummary::Ptr {
                label: "peer.p1".into(),
            },
        };
        let mut undefined = result("mem.ub.x", Status::Pass, Dialect::Runtime, "sim");
        undefined.kind = Some(ClauseKind::Undefined);
        let mut undefined_real = undefined.clone();
        undefined_real.backend = "cuda".into();
        let sim = run(
            "sim",
            "runtime",
            vec![
                result("mem.same", Status::Pass, Dialect::Runtime, "sim"),
                result("mem.diff", Status::Pass, Dialect::Runtime, "sim"),
                result("mem.two-dev", Status::Pass, Dialect::Runtime, "sim"),
                undefined,
            ],
        );
        let real = run(
            "cuda",
            "runtime",
            vec![
                result("mem.same", Status::Pass, Dialect::Runtime, "cuda"),
                with_second_step(
                    result("mem.diff", Status::Fail, Dialect::Runtime, "cuda"),
                    ok.clone(),
                ),
                result(
                    "mem.two-dev",
                    Status::NotSupported,
                    Dialect::Runtime,
                    "cuda",
                ),
                with_second_step(undefined_real, ok),
            ],
        );
        let d = compare(sim, real);
        assert_eq!(d.totals.compared, 3);
        assert_eq!(d.totals.identical, 1);
        assert_eq!(d.totals.differing, 1);
        assert_eq!(d.totals.differing_unjudged, 1);
        assert_eq!(d.totals.not_compared, 1);
        assert_eq!(d.not_compared[0].id, "mem.two-dev");
        assert!(d.not_compared[0]
            .reason
            .contains("NotSupported on the real backend"));
        assert_eq!(d.exit_code(), 1);

        let lines = difference_lines(&d);
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            "DIFF mem.diff [runtime] L13 p = ipc_open h: sim error cudaErrorInvalidValue (1) | real ok ptr peer.p1"
        );
        assert!(lines[1].starts_with("diff (undefined, not judged) mem.ub.x"));

        let md = to_markdown(&d);
        assert!(md.contains("### `mem.diff` (runtime, contract)"), "{md}");
        assert!(md.contains(
            "| 13 | `p = ipc_open h` | error cudaErrorInvalidValue (1) | ok ptr peer.p1 |"
        ));
        assert!(md.contains("## Not compared"));
        assert!(md.contains("| clause | kind | tier | sim runtime | cuda runtime |"));
        let json: serde_json::Value = serde_json::from_str(&to_json(&d).unwrap()).unwrap();
        assert_eq!(json["totals"]["differing"], 1);
        assert_eq!(json["compared"][1]["differences"][0]["line"], 13);
    }

    #[test]
    fn identical_runs_pass() {
        let mk = |b: &str| {
            run(
                b,
                "runtime",
                vec![result("a.b", Status::Pass, Dialect::Runtime, b)],
            )
        };
        let d = compare(mk("sim"), mk("cuda"));
        assert_eq!(d.exit_code(), 0);
        assert!(difference_lines(&d).is_empty());
        assert!(to_markdown(&d).contains("None: every compared clause"));
        let _ = trace();
    }

    /// A judged difference outside the gated tiers is reported and counted
    /// in its tier, but passes the check; gating every tier fails it.
    #[test]
    fn differences_count_per_tier_and_only_gated_tiers_fail() {
        let ok = StepOutcome::Ok {
            value: ValueSummary::Unit,
        };
        let tiered = |id: &str, tier: Tier, backend: &str| {
            let mut r = result(id, Status::Pass, Dialect::Runtime, backend);
            r.tier = Some(tier);
            r
        };
        let pair = |gated: &[Tier]| {
            let mut sim = run(
                "sim",
                "runtime",
                vec![
                    tiered("mem.promised", Tier::Contract, "sim"),
                    tiered("mem.placement", Tier::Incidental, "sim"),
                ],
            );
            sim.run.gated_tiers = Some(gated.to_vec());
            let real = run(
                "cuda",
                "runtime",
                vec![
                    tiered("mem.promised", Tier::Contract, "cuda"),
                    with_second_step(
                        tiered("mem.placement", Tier::Incidental, "cuda"),
                        ok.clone(),
                    ),
                ],
            );
            compare(sim, real)
        };
        let d = pair(&crate::model::DEFAULT_GATED_TIERS);
        assert_eq!((d.totals.differing, d.totals.differing_ungated), (1, 1));
        assert_eq!(d.exit_code(), 0);
        let incidental = &d.totals.per_tier["incidental"];
        assert_eq!((incidental.compared, incidental.differing), (1, 1));
        assert!(!incidental.gated);
        assert_eq!(d.totals.per_tier["contract"].identical, 1);
        assert!(difference_lines(&d)[0].starts_with("diff (incidental, not gated) mem.placement"));
        assert_eq!(
            per_tier_line(&d),
            "per tier (gated: contract, relied-on): contract 1 compared, 1 identical; \
             incidental 1 compared, 0 identical, 1 differing (not gated)"
        );
        assert!(to_markdown(&d).contains("| incidental | no | 1 | 0 | 1 | 0 |"));

        let d = pair(&Tier::ALL);
        assert_eq!((d.totals.differing, d.totals.differing_ungated), (1, 0));
        assert_eq!(d.exit_code(), 1);
        assert!(difference_lines(&d)[0].starts_with("DIFF mem.placement"));
    }

    #[test]
    fn broken_fails_the_check() {
        let sim = run(
            "sim",
            "runtime",
            vec![result("a.b", Status::Broken, Dialect::Runtime, "sim")],
        );
        let real = run(
            "cuda",
            "runtime",
            vec![result("a.b", Status::Broken, Dialect::Runtime, "cuda")],
        );
        let d = compare(sim, real);
        assert_eq!(d.totals.broken, 2);
        assert_eq!(d.totals.not_compared, 1);
        assert_eq!(d.exit_code(), 1);
    }
}
