//! The one judge: the simulator runs the replay (driver dialect), each step
//! expecting the driver's answer. Its hazard log gives the hazards; where
//! it answers a call otherwise than the driver did, that is a fidelity
//! finding, and where the answer changed what the simulator holds (a call
//! that makes, releases or maps something), its state is no longer the
//! driver's: the trace is not judged from there on, and says where.

use super::load::{escaped, Folder};
use super::model::{Finding, FindingClass, MAX_LISTED};
use super::replay::{Replay, Role};
use crate::report::text::outcome_text;
use ipc_harness::scenario::{self, ExecOptions, Op};
use ipc_harness::trace::StepOutcome;
use ipc_harness::{Dialect, HazardKind};
use ipc_mock_driver::{SimBackend, SimConfig};
use serde::Serialize;
use std::collections::HashSet;

/// The simulator's run of the replay.
#[derive(Debug, Clone, Serialize)]
pub struct SimulatorRun {
    pub dialect: String,
    /// `Pass` when the simulator answered every replayed call as the
    /// driver did.
    pub status: String,
    pub message: String,
    /// The hazard kinds it logged.
    pub hazards: Vec<String>,
}

/// What the simulator decided.
pub struct Judged {
    pub findings: Vec<Finding>,
    /// Why the trace is not judged whole (each a sentence).
    pub reasons: Vec<String>,
    pub run: SimulatorRun,
    /// The first step after which the simulator's state is not the driver's.
    pub diverged_at: Option<usize>,
    /// Findings left out of `findings` (over [`MAX_LISTED`] of a class).
    pub left_out: usize,
}

/// Calls whose answer changes nothing the simulator holds: a different
/// answer there leaves its state the driver's.
fn changes_nothing(op: &Op) -> bool {
    matches!(
        op,
        Op::Sync
            | Op::StreamSync { .. }
            | Op::EventSync { .. }
            | Op::EventQuery { .. }
            | Op::StreamQuery { .. }
    )
}

/// A query whose answer is timing (ready or not yet).
fn is_query(op: &Op) -> bool {
    matches!(op, Op::EventQuery { .. } | Op::StreamQuery { .. })
}

fn not_ready(outcome: &StepOutcome) -> bool {
    matches!(outcome, StepOutcome::Error { name, .. } if name.contains("NOT_READY"))
}

/// The simulator a replay with `devices` devices runs on: the measured
/// profile, every device peering with every other (NVLink-connected GPUs).
pub fn simulator(devices: u32) -> SimBackend {
    let mut config = SimConfig::default();
    config.devices = config.devices.max(devices);
    SimBackend::new(config)
}

/// Run the replay and judge it.
pub fn judge(folder: &Folder, replay: &Replay) -> Judged {
    let backend = simulator(replay.scenario.devices);
    let opts = ExecOptions {
        dialect: Dialect::Driver,
        ..ExecOptions::default()
    };
    let exec = scenario::execute_for_outcomes(&replay.scenario, &backend, &opts);
    let procs = &folder.processes;
    let pname = |p: usize| format!("p{}", p + 1);
    let entry_of = |e: Option<u16>| {
        e.map_or_else(
            || "exit".to_string(),
            |e| escaped(folder.entries.get(usize::from(e)).map_or("?", |s| s)),
        )
    };
    let finding = |class, kind: &str, step: usize, detail: String| {
        let o = replay.origin[step];
        Finding {
            class,
            kind: kind.to_string(),
            process: pname(o.process()),
            pid: procs[o.process()].pid,
            seq: o.seq(),
            call: entry_of(o.entry()),
            detail,
            rules: Vec::new(),
            found_by: "simulator".into(),
            after_divergence: false,
        }
    };
    let mut findings = Listed::default();
    let mut reasons = Vec::new();
    let mut diverged_at: Option<usize> = None;
    let mut skipped_after = 0usize;
    if exec.trace.steps.is_empty() && !replay.scenario.steps.is_empty() {
        reasons.push(format!(
            "the simulator cannot run the replay: {}",
            exec.verdict.message
        ));
    }
    for record in &exec.trace.steps {
        let i = record.index;
        let (Some(step), Some(o)) = (replay.scenario.steps.get(i), replay.origin.get(i)) else {
            continue;
        };
        let held = record.check.as_ref().is_none_or(|c| c.passed);
        let skipped = matches!(record.outcome, StepOutcome::Skipped { .. });
        let lost = matches!(
            record.outcome,
            StepOutcome::Crash { .. } | StepOutcome::Broken { .. } | StepOutcome::Timeout { .. }
        );
        if held && !skipped && !lost {
            continue;
        }
        if o.role == Role::Model && !skipped && !lost {
            // A model's outcome is not the call's answer.
            continue;
        }
        if skipped && diverged_at.is_some() {
            // What the divergence left unbound: counted with it.
            skipped_after += 1;
            continue;
        }
        let sim = outcome_text(&record.outcome);
        let expected = step.expect.in_force(Dialect::Driver).text.to_string();
        if o.role == Role::Call && is_query(&step.op) && !skipped && !lost {
            let timing = not_ready(&record.outcome) || expected.contains("NOT_READY");
            if timing {
                findings.push(finding(
                    FindingClass::Note,
                    "query-timing",
                    i,
                    format!(
                        "the driver answered {expected}, the simulator {sim}: whether work is done \
                         yet is timing, not a difference of rules"
                    ),
                ));
                continue;
            }
        }
        let what = if skipped {
            format!("the simulator could not run it ({sim})")
        } else {
            format!("the driver answered {expected}, the simulator {sim}")
        };
        let mut f = finding(FindingClass::Fidelity, "diverged", i, what.clone());
        f.after_divergence = diverged_at.is_some();
        findings.push(f);
        if diverged_at.is_none() && (skipped || lost || !changes_nothing(&step.op)) {
            diverged_at = Some(i);
            let p = o.process();
            reasons.push(format!(
                "the replay diverges at {} (pid {}) {}{} (replay.ipc line {}): {what}; from there \
                 the simulator's state is not the driver's, and the rest is not judged",
                pname(p),
                procs[p].pid,
                entry_of(o.entry()),
                o.seq().map_or_else(String::new, |s| format!(" seq {s}")),
                step.line,
            ));
        }
    }
    if skipped_after > 0 {
        if let Some(r) = reasons.last_mut() {
            r.push_str(&format!(
                " ({skipped_after} later step(s) could not run for want of what it left unmade)"
            ));
        }
    }
    let log = exec.trace.hazards.clone().unwrap_or_default();
    let mut kinds: Vec<String> = log.iter().map(|h| h.kind.name().to_string()).collect();
    kinds.sort();
    kinds.dedup();
    let mut seen = HashSet::new();
    for h in &log {
        let Some(step) = h.step.filter(|&s| s < replay.origin.len()) else {
            continue;
        };
        let o = replay.origin[step];
        if !seen.insert((h.kind, o.process(), o.seq(), o.entry())) {
            continue;
        }
        let killed_exit = matches!(replay.scenario.steps[step].op, Op::Exit)
            && replay.killed.get(o.process()).copied().unwrap_or(false);
        let mut f = if killed_exit {
            finding(
                FindingClass::Note,
                h.kind.name(),
                step,
                format!(
                    "{} (a signal ended the process: its teardown released what it held)",
                    h.detail
                ),
            )
        } else {
            finding(FindingClass::Hazard, h.kind.name(), step, h.detail.clone())
        };
        f.after_divergence = diverged_at.is_some_and(|d| step > d);
        if h.kind == HazardKind::UnsynchronizedRead {
            race_rules(folder, replay, step, &mut f);
        }
        findings.push(f);
    }
    let run = SimulatorRun {
        dialect: Dialect::Driver.as_str().to_string(),
        status: exec.verdict.status.name().to_string(),
        message: exec.verdict.message.clone(),
        hazards: kinds,
    };
    Judged {
        findings: findings.kept,
        reasons,
        run,
        diverged_at,
        left_out: findings.left_out,
    }
}

/// Name the rows of the synchronisation table a race rests on: the
/// writer's latest call reaching the same memory before the read, and the
/// reader's.
fn race_rules(folder: &Folder, replay: &Replay, step: usize, f: &mut Finding) {
    let reader = replay.origin[step];
    let Some((object, _)) = reader.access() else {
        return;
    };
    let writer = replay.origin[..step]
        .iter()
        .rev()
        .find(|o| o.process() != reader.process() && o.access() == Some((object, true)));
    if let Some(w) = writer {
        let entry = w
            .entry()
            .and_then(|e| folder.entries.get(usize::from(e)))
            .map_or("?".to_string(), |s| escaped(s));
        f.detail.push_str(&format!(
            "; the write: p{}'s {entry}{} [{}]",
            w.process() + 1,
            w.seq().map_or_else(String::new, |s| format!(" seq {s}")),
            w.rule().unwrap_or("?")
        ));
        if let Some(rule) = w.rule() {
            f.rules.push(rule.to_string());
        }
    }
    if let Some(rule) = reader.rule() {
        f.detail.push_str(&format!("; the read [{rule}]"));
        f.rules.push(rule.to_string());
    }
}

/// Findings as they come, at most [`MAX_LISTED`] of each class (a trace of
/// a million calls may give as many), and how many were left out.
#[derive(Default)]
struct Listed {
    kept: Vec<Finding>,
    count: std::collections::HashMap<FindingClass, usize>,
    left_out: usize,
}

impl Listed {
    fn push(&mut self, f: Finding) {
        let n = self.count.entry(f.class).or_insert(0);
        *n += 1;
        if *n <= MAX_LISTED {
            self.kept.push(f);
        } else {
            self.left_out += 1;
        }
    }
}

/// At most [`MAX_LISTED`] findings of each class, in order; how many were
/// left out.
pub fn bounded(findings: Vec<Finding>) -> (Vec<Finding>, usize) {
    let mut count = std::collections::HashMap::new();
    let mut left_out = 0;
    let kept = findings
        .into_iter()
        .filter(|f| {
            let n = count.entry(f.class).or_insert(0usize);
            *n += 1;
            let keep = *n <= MAX_LISTED;
            if !keep {
                left_out += 1;
            }
            keep
        })
        .collect();
    (kept, left_out)
}
