//! Reliance: which of the simulator's semantic choices the traced program's
//! outcome rests on, and how firmly (the [`Tier`] of each choice).
//!
//! The replay runs under every profile (`ipc_mock_driver::portability`);
//! each step whose outcome under `documented` or `hip` differs from
//! `measured` names the choice(s) behind the difference. A step that holds
//! only under an incidental choice is code that works on this driver by
//! accident. Reliance is not a hazard: it never changes `check`'s exit code.

use crate::report::text::outcome_text;
use ipc_harness::scenario::{ExecOptions, Scenario};
use ipc_harness::trace::StepOutcome;
use ipc_harness::{Dialect, Status, Tier};
use ipc_mock_driver::portability::check_scenario;
use ipc_mock_driver::profiles::{choice_tier, Profile};
use ipc_mock_driver::SimConfig;
use serde::Serialize;

/// A semantic choice one step's outcome depends on.
#[derive(Debug, Clone, Serialize)]
pub struct ChoiceUse {
    pub choice: String,
    /// Its value under `measured` (what the measured driver does).
    pub measured: String,
    /// Its value under the profile where the step differs.
    pub value: String,
    /// What the measured value rests on.
    pub tier: Tier,
    pub rests_on: String,
}

/// One replayed step whose outcome differs under another profile.
#[derive(Debug, Clone, Serialize)]
pub struct RelianceStep {
    /// `documented` or `hip`.
    pub profile: String,
    /// The step's line in replay.ipc.
    pub replay_line: usize,
    pub op: String,
    /// The traced call behind the step: its process, its `seq` in that
    /// process's file (absent for the process's exit), its entry point.
    pub pid: u32,
    pub seq: Option<u64>,
    pub call: String,
    /// The step's outcome under `measured` and under `profile`.
    pub measured: String,
    pub other: String,
    pub choices: Vec<ChoiceUse>,
    /// No single choice reproduces the difference: `choices` act together.
    pub together: bool,
    /// The least firm tier among `choices`; absent when none was named.
    pub tier: Option<Tier>,
    /// `choices` in words, as `portability` prints them
    /// (`ipc_mock_driver::portability::Causes::text`).
    #[serde(skip)]
    because: String,
}

/// Where the program's observed outcome rests on more than the contract.
#[derive(Debug, Clone, Serialize)]
pub struct Reliance {
    /// The least firm tier any differing step rests on: `contract` when
    /// every step has the same outcome under every profile (or differs only
    /// where a contract choice differs, under `hip`), `relied-on` or
    /// `incidental` otherwise. A difference no choice could be named for
    /// counts as incidental.
    pub relies_on: Tier,
    /// One line saying so, naming the choices of that tier.
    pub summary: String,
    pub steps: Vec<RelianceStep>,
    /// Where the verdict itself depends on the dialect's profile: hazards
    /// one dialect's simulator finds and another does not, or a replay the
    /// measured simulator does not answer as the driver did.
    pub notes: Vec<String>,
}

/// Run `replay` under every profile (driver dialect: the trace is of
/// driver calls) and attribute each differing step to its traced call.
pub fn judge(
    replay: &Scenario,
    devices: u32,
    step_origin: &dyn Fn(usize) -> (u32, Option<u64>, String),
) -> Reliance {
    let mut machine = SimConfig::default();
    machine.devices = machine.devices.max(devices);
    let opts = ExecOptions {
        dialect: Dialect::Driver,
        ..ExecOptions::default()
    };
    let portability = check_scenario(replay, &opts, &machine);
    let mut notes = Vec::new();
    for (profile, status, message) in &portability.verdicts {
        if *profile == Profile::Measured && *status != Status::Pass {
            notes.push(format!(
                "the measured simulator does not answer every replayed call as the driver did \
                 ({}): the steps below are compared with the simulator's answers",
                message
            ));
        }
    }
    let side = |o: &Option<StepOutcome>| {
        o.as_ref()
            .map(outcome_text)
            .unwrap_or_else(|| "(not run)".into())
    };
    let steps: Vec<RelianceStep> = portability
        .divergences
        .iter()
        .map(|d| {
            let (pid, seq, call) = step_origin(d.index);
            RelianceStep {
                profile: d.profile.as_str().to_string(),
                replay_line: d.line,
                op: d.op.clone(),
                pid,
                seq,
                call,
                measured: side(&d.measured),
                other: side(&d.other),
                choices: d
                    .causes
                    .choices
                    .iter()
                    .map(|c| ChoiceUse {
                        choice: c.choice.to_string(),
                        measured: c.measured.clone(),
                        value: c.value.clone(),
                        tier: c.tier,
                        rests_on: choice_tier(c.choice)
                            .map(|t| t.rests_on.to_string())
                            .unwrap_or_default(),
                    })
                    .collect(),
                together: d.causes.together,
                tier: d.causes.tier(),
                because: d.causes.text(),
            }
        })
        .collect();
    let step_tier = |s: &RelianceStep| s.tier.unwrap_or(Tier::Incidental);
    let relies_on = steps.iter().map(step_tier).max().unwrap_or(Tier::Contract);
    let mut named: Vec<String> = steps
        .iter()
        .filter(|s| step_tier(s) == relies_on)
        .flat_map(|s| {
            s.choices
                .iter()
                .filter(|c| c.tier == relies_on)
                .map(|c| c.choice.clone())
        })
        .collect();
    named.sort();
    named.dedup();
    let summary = if steps.is_empty() {
        "relies only on contract behaviour: every replayed step has the same outcome \
         under every profile (measured, documented, hip)"
            .to_string()
    } else if relies_on == Tier::Contract {
        format!(
            "relies only on contract behaviour; {} step(s) differ under hip where ROCm's \
             choices differ from CUDA's contract ({})",
            steps.len(),
            named.join(", ")
        )
    } else {
        format!(
            "relies on {relies_on} behaviour: {} ({} differing step(s))",
            if named.is_empty() {
                "choices acting together, none named alone".to_string()
            } else {
                named.join(", ")
            },
            steps.len()
        )
    };
    Reliance {
        relies_on,
        summary,
        steps,
        notes,
    }
}

impl RelianceStep {
    /// `va_reuse=never (measured top-down; incidental)`, as portability prints it.
    pub fn because(&self) -> &str {
        &self.because
    }
}
