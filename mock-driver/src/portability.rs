//! The portability verdict: run one scenario, or one set of roles, under
//! every [`Profile`] and say where the outcomes differ from `measured`, and
//! which semantic choices (with their [`Tier`]) are behind each difference.
//!
//! Attribution: each choice a profile sets unlike `measured` is flipped
//! alone, on top of `measured`; a difference that such a single flip
//! reproduces names that choice. A difference no single flip reproduces
//! comes from choices acting together: it names each choice whose return
//! alone to its `measured` value (in the profile) makes the difference go.

use crate::profiles::{choice_tier, Profile, Tier};
use crate::{SimBackend, SimConfig};
use ipc_harness::roles::{RoleOutcome, RoleSet, RunOptions, RunReport};
use ipc_harness::scenario::{self, ExecOptions, Scenario};
use ipc_harness::trace::{StepOutcome, StepRecord};
use ipc_harness::{Dialect, StartError, Status, Trace};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A semantic choice behind a difference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub choice: &'static str,
    /// Its value under `measured`.
    pub measured: String,
    /// Its value under the other profile.
    pub value: String,
    /// What the `measured` value rests on.
    pub tier: Tier,
}

/// Why an outcome differs: the choices, and whether one alone explains it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Causes {
    pub choices: Vec<Cause>,
    /// No single choice reproduces the difference; `choices` are the ones
    /// it needs together (empty: none could be named).
    pub together: bool,
}

impl Causes {
    /// The least firm tier among the causes (incidental before relied-on
    /// before contract); `None` when no choice was named.
    pub fn tier(&self) -> Option<Tier> {
        self.choices.iter().map(|c| c.tier).max()
    }

    /// `va_reuse=never (incidental)`, joined with `+` when the choices act
    /// together.
    pub fn text(&self) -> String {
        if self.choices.is_empty() {
            return "several choices together (none named alone)".into();
        }
        let parts: Vec<String> = self
            .choices
            .iter()
            .map(|c| {
                format!(
                    "{}={} (measured {}; {})",
                    c.choice, c.value, c.measured, c.tier
                )
            })
            .collect();
        if self.together {
            format!("together: {}", parts.join(" + "))
        } else {
            parts.join("; or ")
        }
    }
}

/// One step whose outcome under `profile` differs from `measured`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDivergence {
    pub profile: Profile,
    /// 0-based step index.
    pub index: usize,
    /// 1-based line in the scenario.
    pub line: usize,
    pub op: String,
    /// `None`: the step did not run under that profile.
    pub measured: Option<StepOutcome>,
    pub other: Option<StepOutcome>,
    pub causes: Causes,
}

/// A scenario under every profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioPortability {
    pub dialect: Dialect,
    /// The scenario's own verdict under each profile.
    pub verdicts: Vec<(Profile, Status, String)>,
    pub divergences: Vec<StepDivergence>,
}

impl ScenarioPortability {
    /// Every step's outcome is the same under every profile.
    pub fn is_portable(&self) -> bool {
        self.divergences.is_empty()
    }

    /// The tiers of the choices behind the differences.
    pub fn tiers(&self) -> BTreeSet<Tier> {
        self.divergences
            .iter()
            .flat_map(|d| d.causes.choices.iter().map(|c| c.tier))
            .collect()
    }
}

/// A choice a profile sets unlike `measured`.
#[derive(Debug, Clone)]
struct Flip {
    name: &'static str,
    measured: String,
    value: String,
}

/// The choices `target` sets unlike `base`: for `dialect` only, or in
/// either set of choices when the dialect is unknown (roles).
fn flips(base: &SimConfig, target: &SimConfig, dialect: Option<Dialect>) -> Vec<Flip> {
    let sets = |c: &SimConfig| match dialect {
        Some(d) => vec![c.semantics_for(d).describe()],
        None => vec![c.semantics.describe(), c.hip_semantics.describe()],
    };
    let mut out: Vec<Flip> = Vec::new();
    for (b, t) in sets(base).into_iter().zip(sets(target)) {
        for (bc, tc) in b.into_iter().zip(t) {
            if bc.value != tc.value && !out.iter().any(|f| f.name == bc.name) {
                out.push(Flip {
                    name: bc.name,
                    measured: bc.value,
                    value: tc.value,
                });
            }
        }
    }
    out
}

/// `config` with choice `name` taken from `from`, in both sets of choices.
fn with_choice_of(config: &SimConfig, name: &str, from: &SimConfig) -> SimConfig {
    let mut out = config.clone();
    for (to, src) in [
        (&mut out.semantics, &from.semantics),
        (&mut out.hip_semantics, &from.hip_semantics),
    ] {
        if let Some(v) = src.get(name) {
            // The value was printed by the same choice: it parses back.
            let _ = to.set(name, &v);
        }
    }
    out
}

/// Name the choices behind each differing key (see the module comment).
fn attribute<O, K: Ord + Clone>(
    base: &SimConfig,
    target: &SimConfig,
    flips: &[Flip],
    measured_obs: &O,
    keys: &BTreeSet<K>,
    observe: &dyn Fn(&SimConfig) -> O,
    differing: &dyn Fn(&O, &O) -> BTreeSet<K>,
) -> BTreeMap<K, Causes> {
    let cause = |f: &Flip| Cause {
        choice: f.name,
        measured: f.measured.clone(),
        value: f.value.clone(),
        tier: choice_tier(f.name).map_or(Tier::Incidental, |c| c.tier),
    };
    let single: Vec<BTreeSet<K>> = flips
        .iter()
        .map(|f| {
            differing(
                measured_obs,
                &observe(&with_choice_of(base, f.name, target)),
            )
        })
        .collect();
    let mut reverted: Option<Vec<BTreeSet<K>>> = None;
    let mut out = BTreeMap::new();
    for k in keys {
        let alone: Vec<Cause> = flips
            .iter()
            .zip(&single)
            .filter(|(_, d)| d.contains(k))
            .map(|(f, _)| cause(f))
            .collect();
        let causes = if alone.is_empty() {
            let reverted = reverted.get_or_insert_with(|| {
                flips
                    .iter()
                    .map(|f| {
                        differing(
                            measured_obs,
                            &observe(&with_choice_of(target, f.name, base)),
                        )
                    })
                    .collect()
            });
            Causes {
                choices: flips
                    .iter()
                    .zip(reverted.iter())
                    .filter(|(_, d)| !d.contains(k))
                    .map(|(f, _)| cause(f))
                    .collect(),
                together: true,
            }
        } else {
            Causes {
                choices: alone,
                together: false,
            }
        };
        out.insert(k.clone(), causes);
    }
    out
}

/// Run `scenario` on the simulator with `config`; a panic is a Broken step.
fn run_scenario(
    scenario: &Scenario,
    config: &SimConfig,
    opts: &ExecOptions,
) -> (Trace, Status, String) {
    let backend = SimBackend::new(config.clone());
    match catch_unwind(AssertUnwindSafe(|| {
        scenario::execute(scenario, &backend, opts)
    })) {
        Ok(exec) => (exec.trace, exec.verdict.status, exec.verdict.message),
        Err(_) => {
            let trace = Trace {
                steps: vec![StepRecord {
                    index: 0,
                    line: 0,
                    process: String::new(),
                    op: "(the simulator panicked)".into(),
                    api: None,
                    outcome: StepOutcome::Broken {
                        detail: "the simulator panicked".into(),
                    },
                    check: None,
                    elapsed_us: 0,
                }],
                ..Trace::default()
            };
            (trace, Status::Broken, "the simulator panicked".into())
        }
    }
}

fn step_indices(a: &Trace, b: &Trace) -> BTreeSet<usize> {
    a.differences(b).into_iter().map(|d| d.index).collect()
}

/// The choices under which step `index` of `scenario` answers as `wanted`
/// says (another run's outcome, say the GPU's), found one choice at a time:
/// each set alone to another of its values (a choice of error kind to each
/// of the five kinds the simulator's error choices hold) under `measured`,
/// on `machine`. What a difference is
/// attributed to where no profile shows it: a kernel read that the
/// `documented` profile faults, as `measured` does, while the GPU read
/// zeros, is `stale_kernel_read=zeros`. Empty: no single choice reproduces
/// the wanted answer.
pub fn choices_reproducing_step(
    scenario: &Scenario,
    opts: &ExecOptions,
    machine: &SimConfig,
    index: usize,
    wanted: &dyn Fn(&StepOutcome) -> bool,
) -> Causes {
    let mut base = machine.clone();
    Profile::Measured.apply(&mut base);
    let mut choices = Vec::new();
    for choice in base.semantics_for(opts.dialect).describe() {
        // An error kind can be any of dozens: try the kinds the simulator's
        // error choices hold.
        let candidates: Vec<String> = if choice.options.len() > 8 {
            [
                "InvalidValue",
                "NotPermitted",
                "InvalidHandle",
                "AlreadyMapped",
                "InvalidContext",
            ]
            .map(String::from)
            .to_vec()
        } else {
            choice.options.clone()
        };
        for value in candidates.into_iter().filter(|v| *v != choice.value) {
            let mut config = base.clone();
            let set = config.semantics.set(choice.name, &value).is_ok()
                | config.hip_semantics.set(choice.name, &value).is_ok();
            if !set {
                continue;
            }
            let (trace, _, _) = run_scenario(scenario, &config, opts);
            if trace.steps.get(index).is_some_and(|s| wanted(&s.outcome)) {
                choices.push(Cause {
                    choice: choice.name,
                    measured: choice.value.clone(),
                    value,
                    tier: choice_tier(choice.name).map_or(Tier::Incidental, |c| c.tier),
                });
                break;
            }
        }
    }
    Causes {
        choices,
        together: false,
    }
}

/// Run `scenario` under every profile on `machine` (its devices and peers;
/// its choices are replaced by each profile's) and report the steps whose
/// outcome differs from `measured`.
pub fn check_scenario(
    scenario: &Scenario,
    opts: &ExecOptions,
    machine: &SimConfig,
) -> ScenarioPortability {
    let config_of = |p: Profile| {
        let mut c = machine.clone();
        p.apply(&mut c);
        c
    };
    let base = config_of(Profile::Measured);
    let (measured, status, message) = run_scenario(scenario, &base, opts);
    let mut verdicts = vec![(Profile::Measured, status, message)];
    let mut divergences = Vec::new();
    for profile in Profile::ALL.into_iter().filter(|&p| p != Profile::Measured) {
        let target = config_of(profile);
        let (trace, status, message) = run_scenario(scenario, &target, opts);
        verdicts.push((profile, status, message));
        let diffs = measured.differences(&trace);
        if diffs.is_empty() {
            continue;
        }
        let keys: BTreeSet<usize> = diffs.iter().map(|d| d.index).collect();
        let observe = |c: &SimConfig| run_scenario(scenario, c, opts).0;
        let causes = attribute(
            &base,
            &target,
            &flips(&base, &target, Some(opts.dialect)),
            &measured,
            &keys,
            &observe,
            &step_indices,
        );
        for d in diffs {
            divergences.push(StepDivergence {
                profile,
                index: d.index,
                line: d.line,
                op: d.op,
                measured: d.left,
                other: d.right,
                causes: causes.get(&d.index).cloned().unwrap_or_default(),
            });
        }
    }
    ScenarioPortability {
        dialect: opts.dialect,
        verdicts,
        divergences,
    }
}

/// One aspect of one role that differs under `profile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleDivergence {
    pub profile: Profile,
    pub role: String,
    /// `outcome` (what the role's closure returned), `hazards` (the
    /// undefined behaviour it caused), `state` (what it left allocated and
    /// mapped) or `calls` (driver calls made, by kind).
    pub aspect: &'static str,
    pub measured: String,
    pub other: String,
    pub causes: Causes,
}

/// A set of roles under every profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolesPortability {
    /// Whether every role ended Ok, under each profile.
    pub all_ok: Vec<(Profile, bool)>,
    pub divergences: Vec<RoleDivergence>,
}

impl RolesPortability {
    pub fn is_portable(&self) -> bool {
        self.divergences.is_empty()
    }
}

impl std::fmt::Display for RolesPortability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_portable() {
            return writeln!(f, "portable: the same under every profile");
        }
        for d in &self.divergences {
            writeln!(
                f,
                "{}: role {} {}: measured {}, {} {}; {}",
                d.profile,
                d.role,
                d.aspect,
                d.measured,
                d.profile,
                d.other,
                d.causes.text()
            )?;
        }
        Ok(())
    }
}

type RoleAspects = BTreeMap<(String, &'static str), String>;

/// What a run shows of each role, without addresses.
fn role_aspects(report: &RunReport) -> RoleAspects {
    let mut out = BTreeMap::new();
    for (i, role) in report.roles.iter().enumerate() {
        let outcome = match report.outcomes.get(role) {
            Some(RoleOutcome::Ok(v)) => format!("Ok({v})"),
            Some(RoleOutcome::Failed(m)) => format!("Failed({m})"),
            Some(RoleOutcome::Panicked(m)) => format!("Panicked({m})"),
            Some(RoleOutcome::Lost(m)) => format!("Lost({m})"),
            None => "(no outcome)".into(),
        };
        out.insert((role.clone(), "outcome"), outcome);
        let hazards: Vec<&str> = report
            .hazards
            .iter()
            .flatten()
            .filter(|h| h.process == i)
            .map(|h| h.kind.name())
            .collect();
        out.insert(
            (role.clone(), "hazards"),
            format!("[{}]", hazards.join(", ")),
        );
        if let Some(s) = report.final_state.get(role) {
            let opens: Vec<u32> = s.mappings.values().map(|m| m.open_count).collect();
            out.insert(
                (role.clone(), "state"),
                format!(
                    "{} allocation(s), mappings open {:?}, widest mapping {} B",
                    s.allocations.len(),
                    opens,
                    s.widest_mapping()
                ),
            );
            out.insert((role.clone(), "calls"), format!("{:?}", s.calls));
        }
    }
    out
}

fn differing_aspects(a: &RoleAspects, b: &RoleAspects) -> BTreeSet<(String, &'static str)> {
    a.keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// Run `roles` on the simulator's default machine under every profile (with
/// the same seed and schedule) and report the roles whose outcome, hazards,
/// final state or calls differ from `measured`.
pub fn check_roles(roles: &RoleSet, opts: &RunOptions) -> Result<RolesPortability, StartError> {
    check_roles_on(roles, opts, &SimConfig::default())
}

/// As [`check_roles`], on `machine` (its devices and peers).
pub fn check_roles_on(
    roles: &RoleSet,
    opts: &RunOptions,
    machine: &SimConfig,
) -> Result<RolesPortability, StartError> {
    let config_of = |p: Profile| {
        let mut c = machine.clone();
        p.apply(&mut c);
        c
    };
    let run = |c: &SimConfig| roles.run(&SimBackend::new(c.clone()), opts);
    let base = config_of(Profile::Measured);
    let measured_report = run(&base)?;
    let measured = role_aspects(&measured_report);
    let mut all_ok = vec![(Profile::Measured, measured_report.all_ok())];
    let mut divergences = Vec::new();
    for profile in Profile::ALL.into_iter().filter(|&p| p != Profile::Measured) {
        let target = config_of(profile);
        let report = run(&target)?;
        all_ok.push((profile, report.all_ok()));
        let other = role_aspects(&report);
        let keys = differing_aspects(&measured, &other);
        if keys.is_empty() {
            continue;
        }
        // A run that cannot start under a flipped choice shows as no roles.
        let observe = |c: &SimConfig| run(c).map(|r| role_aspects(&r)).unwrap_or_default();
        let causes = attribute(
            &base,
            &target,
            &flips(&base, &target, None),
            &measured,
            &keys,
            &observe,
            &differing_aspects,
        );
        for key in keys {
            let none = || "(absent)".to_string();
            divergences.push(RoleDivergence {
                profile,
                role: key.0.clone(),
                aspect: key.1,
                measured: measured.get(&key).cloned().unwrap_or_else(none),
                other: other.get(&key).cloned().unwrap_or_else(none),
                causes: causes.get(&key).cloned().unwrap_or_default(),
            });
        }
    }
    Ok(RolesPortability {
        all_ok,
        divergences,
    })
}
