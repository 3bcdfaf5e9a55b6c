//! Recorded real runs: `explore --record FILE` keeps each case's scenario
//! and the real driver's trace (one JSON object per line), and `explore
//! --replay FILE` judges the simulator against them later, without a GPU.
//!
//! Device time is scarce and the hardware does not change between commits,
//! so the expensive half of the differential is done once and the cheap half
//! (the simulator) is re-run at every commit: a simulator change that
//! breaks agreement with any recorded case shows up in CI.

use super::case::{
    differences, finding_header, side_by_side, timing_steps, CaseId, DifferingCase, Evaluation,
    ExploreOptions, Finding, Summary, HARNESS, HEADER_LINES, UNATTRIBUTED,
};
use crate::explore::properties::{self, Property};
use ipc_harness::scenario::{self, ExecOptions};
use ipc_harness::trace::StepOutcome;
use ipc_harness::{Backend, Trace};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

use std::time::Instant;

/// One case as the real driver ran it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recorded {
    pub case: CaseIdRecord,
    /// The scenario text exactly as it ran (no header).
    pub scenario: String,
    /// `None`: the real backend could not run it (NotSupported).
    pub real: Option<Trace>,
    /// Devices of the machine it ran on (the simulator plays the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<u32>,
}

/// [`CaseId`] as stored.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CaseIdRecord {
    pub index: u64,
    pub seed: u64,
    pub dialect: ipc_harness::Dialect,
}

impl From<CaseIdRecord> for CaseId {
    fn from(c: CaseIdRecord) -> CaseId {
        CaseId {
            index: c.index,
            seed: c.seed,
            dialect: c.dialect,
        }
    }
}

/// Appends cases to a `--record` file, a line each, written with one call
/// so a run killed mid-way leaves whole lines. A file named `*.gz` gets
/// each line as a gzip member of its own: the file is a gzip stream at
/// every moment, and [`read`] inflates all its members. The first write
/// error is kept (and reported in the summary); recording stops there.
pub struct Recorder {
    file: Option<std::fs::File>,
    gzip: bool,
    devices: Option<u32>,
    pub error: Option<String>,
}

impl Recorder {
    pub fn new(path: &Path, devices: Option<u32>) -> Recorder {
        let gzip = path.extension().is_some_and(|e| e == "gz");
        match crate::safe_fs::open_append(path) {
            Ok(f) => Recorder {
                file: Some(f),
                gzip,
                devices,
                error: None,
            },
            Err(e) => Recorder {
                file: None,
                gzip,
                devices,
                error: Some(format!("{}: {e}", path.display())),
            },
        }
    }

    pub fn record(&mut self, id: CaseId, scenario: &str, eval: &Evaluation) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let rec = Recorded {
            case: CaseIdRecord {
                index: id.index,
                seed: id.seed,
                dialect: id.dialect,
            },
            scenario: scenario.to_string(),
            real: if eval.not_compared {
                None
            } else {
                eval.real_trace.clone()
            },
            devices: self.devices,
        };
        let gzip = self.gzip;
        let written = serde_json::to_string(&rec)
            .map_err(|e| e.to_string())
            .and_then(|mut line| {
                line.push('\n');
                let bytes = if gzip {
                    let mut gz = flate2::write::GzEncoder::new(
                        Vec::with_capacity(line.len() / 4),
                        flate2::Compression::default(),
                    );
                    gz.write_all(line.as_bytes())
                        .and_then(|()| gz.finish())
                        .map_err(|e| e.to_string())?
                } else {
                    line.into_bytes()
                };
                file.write_all(&bytes).map_err(|e| e.to_string())
            });
        if let Err(e) = written {
            self.error = Some(e);
            self.file = None;
        }
    }
}

/// Read a `--record` file (plain or gzipped). A malformed line is an error naming it; an
/// unterminated last line (a run killed while writing) is left out.
pub fn read(path: &Path) -> Result<Vec<Recorded>, String> {
    read_limited(path, crate::limits::MAX_RECORDING_BYTES)
}

/// [`read`] with `limit` on the file and on what it inflates to.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<Recorded>, String> {
    let bytes = crate::safe_fs::read_bounded(path, limit, "a recording")
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    // Committed recordings are gzipped (`.gz`, every member of the stream);
    // what they inflate to is bounded as the file itself is.
    let text = crate::compressed::text_of(bytes, limit, "a recording")
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let complete = if text.ends_with('\n') {
        &text[..]
    } else {
        text.rsplit_once('\n').map(|(a, _)| a).unwrap_or("")
    };
    complete
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{}:{}: not a recorded case: {e}", path.display(), i + 1))
        })
        .collect()
}

/// The simulated machine a recorded case ran against: the default, with
/// the recording's device count where it names one.
fn recorded_machine(devices: Option<u32>) -> ipc_mock_driver::SimConfig {
    let mut machine = ipc_mock_driver::SimConfig::default();
    if let Some(devices) = devices {
        machine.devices = devices;
    }
    machine
}

/// The tier of the difference at step `index` (0-based) of a recorded case:
/// the tier of the semantic choices that step's outcome depends on, found
/// as `portability` finds them (the step's outcome under another profile
/// differs from `measured`, and the choices whose flip reproduces that are
/// named), the least firm when several. `None` (unattributed) when no
/// profile changes that step: the difference is not one of the switchable
/// choices. Run only for differing cases, so its cost (a few simulator
/// runs per profile) is paid rarely.
pub fn attributed_tier(
    sc: &ipc_harness::scenario::Scenario,
    exec: &ExecOptions,
    devices: Option<u32>,
    index: usize,
) -> Option<ipc_harness::Tier> {
    let machine = recorded_machine(devices);
    let verdict =
        crate::guard::guarded(|| ipc_mock_driver::portability::check_scenario(sc, exec, &machine))
            .ok()?;
    verdict
        .divergences
        .iter()
        .filter(|d| d.index == index)
        .filter_map(|d| d.causes.tier())
        .max()
}

/// Whether a differing step differs only in where a value landed: both
/// runs succeeded with a pointer, a range of one size, a descriptor, or an
/// interprocess event's handle, under another label. Which address comes
/// back, which descriptor number the driver's own descriptors leave and
/// which slot of its context's event pool a new event takes (the handle's
/// bytes name the slot) are accidents of one driver (docs/clauses.md:
/// "which virtual address comes back"), so such a difference is
/// incidental even where no semantic choice names it. A memory handle's
/// bytes are not a placement: whether a second `ipc_get` returns the same
/// bytes is a rule (`handle_stable`).
pub fn placement_only(sim: &StepOutcome, real: &StepOutcome) -> bool {
    use ipc_harness::trace::ValueSummary::{Fd, Handle, Ptr, Range};
    let (StepOutcome::Ok { value: a }, StepOutcome::Ok { value: b }) = (sim, real) else {
        return false;
    };
    let event_handle = |l: &str| l.starts_with("eh");
    match (a, b) {
        (Ptr { label: x }, Ptr { label: y }) | (Fd { label: x }, Fd { label: y }) => x != y,
        (Handle { label: x }, Handle { label: y }) => x != y && event_handle(x) && event_handle(y),
        (Range { base: x, size: m }, Range { base: y, size: n }) => x != y && m == n,
        _ => false,
    }
}

/// The tier a difference at step `index` of a recorded case is attributed
/// to: the tier of the semantic choices behind it ([`attributed_tier`]),
/// else incidental where only a value's placement differs
/// ([`placement_only`]), else the tier of a choice that alone makes the
/// simulator answer as the real run did; `None` (unattributed) otherwise.
pub fn difference_tier(
    sc: &ipc_harness::scenario::Scenario,
    exec: &ExecOptions,
    devices: Option<u32>,
    index: usize,
    outcomes: (Option<&StepOutcome>, Option<&StepOutcome>),
) -> Option<ipc_harness::Tier> {
    attributed_tier(sc, exec, devices, index)
        .or_else(|| match outcomes {
            (Some(a), Some(b)) if placement_only(a, b) => Some(ipc_harness::Tier::Incidental),
            _ => None,
        })
        .or_else(|| reproducing_tier(sc, exec, devices, index, outcomes.1?))
}

/// The tier of the choices that, set alone to another value, make the
/// simulator answer step `index` as the real run did
/// ([`choices_reproducing_step`](ipc_mock_driver::portability::choices_reproducing_step)):
/// a difference no profile shows (the `documented` profile answers as
/// `measured` there) but one switchable choice explains.
fn reproducing_tier(
    sc: &ipc_harness::scenario::Scenario,
    exec: &ExecOptions,
    devices: Option<u32>,
    index: usize,
    real: &StepOutcome,
) -> Option<ipc_harness::Tier> {
    let machine = recorded_machine(devices);
    let wanted = |o: &StepOutcome| o.same_observation(real);
    crate::guard::guarded(|| {
        ipc_mock_driver::portability::choices_reproducing_step(sc, exec, &machine, index, &wanted)
    })
    .ok()?
    .tier()
}

/// Judge the simulator against recorded real runs: the properties on the
/// simulator and the differential against each recorded trace. Findings are
/// not shrunk (that needs the GPU); each finding file is the whole case
/// with both runs side by side.
pub fn replay(
    opts: &ExploreOptions,
    make_sim: &dyn Fn(Option<u32>) -> Result<Box<dyn Backend>, String>,
    records: &[Recorded],
    source: &str,
    out: Option<&Path>,
    progress: &mut dyn FnMut(u64, usize),
) -> Result<Summary, String> {
    let started = Instant::now();
    let mut summary = Summary {
        backend: format!("sim vs recorded real runs ({source})"),
        seed: opts.seed,
        first_case: records.first().map(|r| r.case.index).unwrap_or(0),
        ..Summary::default()
    };
    let mut sims: Vec<(Option<u32>, Box<dyn Backend>)> = Vec::new();
    for (n, rec) in records.iter().enumerate() {
        let id: CaseId = rec.case.into();
        if !sims.iter().any(|(d, _)| *d == rec.devices) {
            sims.push((rec.devices, make_sim(rec.devices)?));
        }
        let sim = sims
            .iter()
            .find(|(d, _)| *d == rec.devices)
            .map(|(_, s)| s.as_ref())
            .ok_or("no simulator")?;
        summary.cases += 1;
        // The scenario exactly as recorded, so line numbers (which skip
        // reasons quote) are the real run's.
        let sc = match scenario::parse(&rec.scenario, Path::new("recorded.ipc")) {
            Ok(sc) => sc,
            Err(e) => {
                let m = format!("the recorded scenario does not parse: {e}");
                push(
                    &mut summary,
                    id,
                    Property::Robustness,
                    &m,
                    "recorded: does not parse",
                    String::new(),
                    out,
                );
                continue;
            }
        };
        summary.steps += sc.steps.len() as u64;
        let exec = ExecOptions {
            dialect: id.dialect,
            seed: id.seed,
            step_timeout: opts.step_timeout,
        };
        let (trace, mut violations) = properties::check_on_sim(&sc, sim, &exec);
        let mut shifted = None;
        // Steps that read bytes the documents leave to timing.
        let mut timing = Vec::new();
        match (&trace, &rec.real) {
            (Some(t), Some(real)) => {
                summary.compared_steps += real.steps.len() as u64;
                timing = timing_steps(&sc, sim, id.dialect, t, real);
                let at = |i: usize| timing.get(i).copied().unwrap_or(false);
                let diffs = differences(t, real, &at);
                summary.count_other_outcomes(t, real);
                if let Some(lost) = diffs.iter().find(|d| d.property == Property::Harness) {
                    summary.harness_lost_cases += 1;
                    summary.harness_lost.push(DifferingCase {
                        index: id.index,
                        dialect: id.dialect,
                        first: lost.message.clone(),
                        tier: HARNESS.to_string(),
                        placement: false,
                    });
                }
                let first = diffs.iter().find(|d| d.property == Property::Differential);
                if let Some(d) = first {
                    let outcomes = |step: usize| {
                        (
                            t.steps.get(step).map(|s| &s.outcome),
                            real.steps.get(step).map(|s| &s.outcome),
                        )
                    };
                    let tier = d
                        .step
                        .and_then(|step| {
                            difference_tier(&sc, &exec, rec.devices, step, outcomes(step))
                        })
                        .map_or(UNATTRIBUTED, |t| t.as_str());
                    let placement = d.step.is_some_and(|step| match outcomes(step) {
                        (Some(a), Some(b)) => placement_only(a, b),
                        _ => false,
                    });
                    summary.differing_placements += u64::from(placement);
                    *summary
                        .differing_per_tier
                        .entry(tier.to_string())
                        .or_default() += 1;
                    summary.differing.push(DifferingCase {
                        index: id.index,
                        dialect: id.dialect,
                        first: d.message.clone(),
                        tier: tier.to_string(),
                        placement,
                    });
                    summary.differing_cases += 1;
                }
                if !diffs.is_empty() {
                    shifted = Some((below_header(t), below_header(real)));
                    // Every differing case, not only a finding's first, for
                    // whoever works through them: out/cases/caseN.ipc.
                    if let (Some(dir), Some((a, b))) = (out, &shifted) {
                        let dir = dir.join("cases");
                        let first = differences(a, b, &at)
                            .into_iter()
                            .next()
                            .map(|v| v.message)
                            .unwrap_or_default();
                        let text = finding_header(id, Property::Differential, &first, Some("cuda"))
                            + &rec.scenario
                            + &side_by_side(a, b);
                        if std::fs::create_dir_all(&dir).is_ok() {
                            let _ = crate::safe_fs::write_atomic(
                                &dir.join(format!("case{}.ipc", id.index)),
                                text.as_bytes(),
                            );
                        }
                    }
                }
                violations.extend(diffs);
            }
            (_, None) => summary.not_compared += 1,
            _ => {}
        }
        // Every case, alike or not, with both runs side by side:
        // out/all/caseN.ipc (IPC_REPLAY_ALL_CASES=1; for working out a
        // rule against the cases that already match).
        if std::env::var_os("IPC_REPLAY_ALL_CASES").is_some() {
            if let (Some(dir), Some(t), Some(real)) = (out, &trace, &rec.real) {
                let (a, b) = (below_header(t), below_header(real));
                let text = finding_header(id, Property::Differential, "", Some("cuda"))
                    + &rec.scenario
                    + &side_by_side(&a, &b);
                let dir = dir.join("all");
                if std::fs::create_dir_all(&dir).is_ok() {
                    let _ = crate::safe_fs::write_atomic(
                        &dir.join(format!("case{}.ipc", id.index)),
                        text.as_bytes(),
                    );
                }
            }
        }
        match violations
            .iter()
            .find(|v| !summary.findings.iter().any(|f| f.signature == v.signature))
        {
            Some(v) => {
                // The finding file's lines: the header, then the scenario.
                let (message, both) = match &shifted {
                    Some((a, b)) if v.property.needs_real() => (
                        differences(a, b, &|i| timing.get(i).copied().unwrap_or(false))
                            .into_iter()
                            .find(|d| d.signature == v.signature)
                            .map(|d| d.message)
                            .unwrap_or_else(|| v.message.clone()),
                        side_by_side(a, b),
                    ),
                    _ => (v.message.clone(), String::new()),
                };
                let body = rec.scenario.clone() + &both;
                let (p, sig) = (v.property, v.signature.clone());
                push(&mut summary, id, p, &message, &sig, body, out);
            }
            None => {
                if let Some(f) = violations.first().and_then(|v| {
                    summary
                        .findings
                        .iter_mut()
                        .find(|f| f.signature == v.signature)
                }) {
                    f.repeats += 1;
                }
            }
        }
        progress(n as u64 + 1, summary.findings.len());
    }
    summary.seconds = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// A trace with its line numbers moved below a finding file's header.
fn below_header(t: &Trace) -> Trace {
    let mut t = t.clone();
    for s in &mut t.steps {
        s.line += HEADER_LINES;
    }
    t
}

fn push(
    summary: &mut Summary,
    id: CaseId,
    property: Property,
    message: &str,
    signature: &str,
    body: String,
    out: Option<&Path>,
) {
    let real = property.needs_real().then_some("cuda");
    let steps = body
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(':'))
        .count();
    let mut f = Finding {
        case: id,
        property: property.name().to_string(),
        message: message.to_string(),
        original_steps: steps,
        steps,
        scenario: finding_header(id, property, message, real) + &body,
        file: None,
        signature: signature.to_string(),
        repeats: 0,
    };
    if let Some(dir) = out {
        let path = dir.join(format!("{}-case{}.ipc", f.property, id.index));
        if std::fs::create_dir_all(dir).is_ok()
            && crate::safe_fs::write_atomic(&path, f.scenario.as_bytes()).is_ok()
        {
            f.file = Some(path);
        }
    }
    summary.findings.push(f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explore::case::{event_memory_placement_step, race_fault_step, undefined_hang_step};
    use std::io::Write;

    /// A difference at a step that a semantic choice decides takes that
    /// choice's tier; at a step no choice changes, it is unattributed.
    #[test]
    fn differing_steps_are_attributed_to_the_tier_of_their_choices() {
        let text = "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                    owner: a = malloc 2MiB\nowner: fill a 0xab\nowner: h = ipc_get a\n\
                    owner: send h -> peer\npeer: p = ipc_open h flags=3\n\
                    peer: read p 0 16\n";
        let sc = scenario::parse(text, Path::new("case.ipc")).unwrap();
        let exec = ExecOptions::default();
        let step = |op: &str| sc.steps.iter().position(|s| s.text().contains(op)).unwrap();
        // open_flags: the documents want exactly the lazy flag; that other
        // bits are ignored is measured only (incidental).
        assert_eq!(
            attributed_tier(&sc, &exec, None, step("ipc_open")),
            Some(ipc_harness::Tier::Incidental)
        );
        assert_eq!(attributed_tier(&sc, &exec, None, step("malloc")), None);
    }

    /// A difference no profile shows takes the tier of a choice that, set
    /// alone to another value, gives the real answer: a kernel read through
    /// a mapping closed from another context faults under `measured` and
    /// `documented` alike, and reads zeros under `stale_kernel_read=zeros`.
    /// An answer no single choice gives stays unattributed.
    #[test]
    fn a_real_answer_one_choice_gives_takes_that_choices_tier() {
        use ipc_harness::trace::ValueSummary;
        let text = "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                    owner: a = malloc 1000\nowner: h = ipc_get a\n\
                    owner: send h -> peer\nowner: sync\npeer: p = ipc_open h\n\
                    peer: c = ctx_create 0\npeer: ipc_close p\n\
                    peer: device_read p 1KiB 16\n";
        let sc = scenario::parse(text, Path::new("case.ipc")).unwrap();
        let exec = ExecOptions::default();
        let read = sc
            .steps
            .iter()
            .position(|s| s.text().contains("device_read"))
            .unwrap();
        assert_eq!(attributed_tier(&sc, &exec, None, read), None);
        let fault = StepOutcome::Error {
            code: 700,
            name: "cudaErrorIllegalAddress".into(),
        };
        let zeros = StepOutcome::Ok {
            value: ValueSummary::Bytes {
                pattern: "00*16".into(),
            },
        };
        let tier = |real: &StepOutcome| {
            difference_tier(&sc, &exec, None, read, (Some(&fault), Some(real)))
        };
        assert_eq!(tier(&zeros), Some(ipc_harness::Tier::Incidental));
        let ones = StepOutcome::Ok {
            value: ValueSummary::Bytes {
                pattern: "ff*16".into(),
            },
        };
        assert_eq!(tier(&ones), None);
    }

    /// A step that differs only in which address or descriptor number came
    /// back is incidental placement; one that differs in anything else
    /// (an error, a size, bytes) no choice names stays unattributed.
    #[test]
    fn placement_differences_are_incidental_and_others_are_not() {
        use ipc_harness::trace::ValueSummary;
        let text = "devices 1\nprocess owner device=0\nowner: a = malloc 2MiB\n";
        let sc = scenario::parse(text, Path::new("case.ipc")).unwrap();
        let exec = ExecOptions::default();
        let ok = |value| StepOutcome::Ok { value };
        let ptr = |l: &str| ok(ValueSummary::Ptr { label: l.into() });
        let range = |l: &str, size| {
            ok(ValueSummary::Range {
                base: l.into(),
                size,
            })
        };
        let err = StepOutcome::Error {
            code: 1,
            name: "cudaErrorInvalidValue".into(),
        };
        let tier = |a: &StepOutcome, b: &StepOutcome| {
            difference_tier(&sc, &exec, None, 0, (Some(a), Some(b)))
        };
        let incidental = Some(ipc_harness::Tier::Incidental);
        assert_eq!(tier(&ptr("p0.p1"), &ptr("p0.p2")), incidental);
        assert_eq!(
            tier(
                &ok(ValueSummary::Fd {
                    label: "p0.f1".into()
                }),
                &ok(ValueSummary::Fd {
                    label: "p0.f2".into()
                })
            ),
            incidental
        );
        assert_eq!(
            tier(&range("p0.p1", 4096), &range("p0.p2", 4096)),
            incidental
        );
        assert_eq!(tier(&range("p0.p1", 4096), &range("p0.p2", 8192)), None);
        assert_eq!(tier(&ptr("p0.p1"), &err), None);
        // Which pool slot a new event took is a placement; whether a memory
        // handle's bytes repeat is not.
        let handle = |l: &str| ok(ValueSummary::Handle { label: l.into() });
        assert_eq!(tier(&handle("eh1"), &handle("eh2")), incidental);
        assert_eq!(tier(&handle("h1"), &handle("h2")), None);
    }

    /// The simulator's trace of scenario `text`.
    fn run(text: &str) -> Trace {
        let sc = scenario::parse(text, Path::new("case.ipc")).unwrap();
        let sim = ipc_mock_driver::SimBackend::default();
        scenario::execute(&sc, &sim, &ExecOptions::default()).trace
    }

    /// The position of the step whose op is `op`.
    fn step_at(trace: &Trace, op: &str) -> usize {
        trace.steps.iter().position(|s| s.op == op).unwrap()
    }

    /// `trace` as a real run records it (no hazard log), with the step
    /// whose op is `op` answered `outcome`; and that step's position.
    fn answered(trace: &Trace, op: &str, outcome: StepOutcome) -> (Trace, usize) {
        let mut real = trace.clone();
        real.hazards = None;
        let at = step_at(&real, op);
        real.steps[at].outcome = outcome;
        (real, at)
    }

    /// A fill right before `vmm_unmap` of its range is a race: where the
    /// real run faulted (LaunchFailed at a later call of that process, which
    /// the simulator's default answers ok), the case is compared up to that
    /// step. The same LaunchFailed with a `sync` between fill and unmap (no
    /// race) is a difference, as is one in another process.
    #[test]
    fn a_fault_after_an_unmap_race_cuts_the_comparison_there() {
        let case = |between: &str| {
            format!(
                "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                 owner: m = vmm_create 2MiB types=posix_fd\nowner: va = vmm_reserve 2MiB\n\
                 owner: vmm_map va 2MiB m\nowner: vmm_set_access va 2MiB rw\n\
                 owner: fill va 0x5a len=64\n{between}owner: vmm_unmap va 2MiB\n\
                 owner: a = malloc 4KiB\npeer: b = malloc 4KiB\nowner: sync\n"
            )
        };
        let launch_failed = StepOutcome::Error {
            code: 719,
            name: "cudaErrorLaunchFailure".into(),
        };
        let faulted_at = |trace: &Trace, op: &str| {
            let (mut real, at) = answered(trace, op, launch_failed.clone());
            let (at, process) = (real.steps[at].index, real.steps[at].process.clone());
            // Sticky from there on in that process.
            for s in real.steps.iter_mut().filter(|s| s.index > at) {
                if s.process == process {
                    s.outcome = launch_failed.clone();
                }
            }
            real
        };
        let racing = run(&case(""));
        let kinds: Vec<_> = racing.hazards.iter().flatten().map(|h| h.kind).collect();
        assert_eq!(kinds, [ipc_harness::HazardKind::UnmapWithWorkQueued]);
        let real = faulted_at(&racing, "a = malloc 4KiB");
        let cut = race_fault_step(&racing, &real).expect("the fault of the race");
        assert_eq!(racing.steps[cut].op, "a = malloc 4KiB");
        assert!(differences(&racing, &real, &|_| false).is_empty());
        // The simulator's own outcome: nothing to cut.
        assert_eq!(race_fault_step(&racing, &racing), None);
        // A fault in the other process is no outcome of this race.
        let other = faulted_at(&racing, "b = malloc 4KiB");
        assert_eq!(race_fault_step(&racing, &other), None);
        // Synchronised before the unmap: no race, and the fault differs.
        let synced = run(&case("owner: sync\n"));
        assert!(synced.hazards.iter().flatten().next().is_none());
        let real = faulted_at(&synced, "a = malloc 4KiB");
        assert_eq!(race_fault_step(&synced, &real), None);
        assert!(!differences(&synced, &real, &|_| false).is_empty());
        // A sync that never returns (an interprocess event's, after the
        // fault) is that outcome too.
        let (hung, _) = answered(&racing, "sync", StepOutcome::Timeout { after_ms: 20_000 });
        let cut = race_fault_step(&racing, &hung).expect("the hang of the race");
        assert_eq!(racing.steps[cut].op, "sync");
    }

    /// A wait on an imported event whose exporter crashed is undefined:
    /// a real Timeout there (the record never completed) cuts the
    /// comparison; a Timeout at a wait the documents define is a difference.
    #[test]
    fn a_hang_in_an_undefined_event_wait_cuts_the_comparison_there() {
        let case = |crash: &str| {
            format!(
                "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                 owner: m = malloc 1000\nowner: e = event_create flags=interprocess,disable_timing\n\
                 owner: eh = ipc_get_event e\nowner: send eh -> peer\npeer: x = ipc_open_event eh\n\
                 owner: slow_fill m 0x1b us=100000 len=1000\nowner: event_record e\n{crash}\
                 peer: event_sync x\npeer: y = malloc 4KiB\n"
            )
        };
        let hung = |trace: &Trace| {
            let timeout = StepOutcome::Timeout { after_ms: 20000 };
            let (mut real, at) = answered(trace, "event_sync x", timeout);
            real.steps[at + 1].outcome = StepOutcome::Skipped {
                reason: "process 'peer' timed out".into(),
            };
            (real, at)
        };
        let crashed = run(&case("owner: ipc_get_event e out=null\n"));
        let (real, at) = hung(&crashed);
        assert_eq!(undefined_hang_step(&crashed, &real), Some(at));
        assert!(differences(&crashed, &real, &|_| false).is_empty());
        let alive = run(&case(""));
        let (real, _) = hung(&alive);
        assert_eq!(undefined_hang_step(&alive, &real), None);
        assert!(!differences(&alive, &real, &|_| false).is_empty());
    }

    /// The exporter ends while its event's record is still running: the
    /// record never completes on the GPU, so a read behind a stream wait
    /// the importer made before the exit hangs (H200, explore seed 3122026
    /// case 2243). Undefined: the comparison stops there. Once the record
    /// completed before the exit, the same hang is a difference.
    #[test]
    fn a_hang_behind_a_wait_on_an_abandoned_record_cuts_the_comparison() {
        let case = |before_exit: &str| {
            format!(
                "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                 owner: m = malloc 1000\nowner: e = event_create flags=interprocess,disable_timing\n\
                 owner: eh = ipc_get_event e\nowner: send eh -> peer\npeer: x = ipc_open_event eh\n\
                 owner: slow_fill m 0x1b us=100000 len=1000\nowner: event_record e\n\
                 peer: stream_wait x\n{before_exit}owner: exit\npeer: y = malloc 4KiB\n\
                 peer: read y 0 16\n"
            )
        };
        let hung = |trace: &Trace| {
            let timeout = StepOutcome::Timeout { after_ms: 20000 };
            answered(trace, "read y 0 16", timeout)
        };
        let abandoned = run(&case(""));
        let (real, at) = hung(&abandoned);
        assert_eq!(undefined_hang_step(&abandoned, &real), Some(at));
        assert!(differences(&abandoned, &real, &|_| false).is_empty());
        let completed = run(&case("owner: sync\n"));
        assert!(completed.hazards.iter().flatten().next().is_none());
        let (real, _) = hung(&completed);
        assert_eq!(undefined_hang_step(&completed, &real), None);
        assert!(!differences(&completed, &real, &|_| false).is_empty());
    }

    /// A small allocation after the process closed its only mapping and
    /// opened an imported event: the GPU places it on the closed mapping's
    /// VA or on new VA (its own fresh runs answered both ways). New VA on
    /// the real side cuts the comparison there; without the event open, new
    /// VA is a difference.
    #[test]
    fn an_allocation_after_an_imported_event_open_may_take_new_va() {
        let case = |event: &str| {
            format!(
                "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                 owner: m = malloc 1000\nowner: h = ipc_get m\nowner: send h -> peer\n\
                 peer: o = ipc_open h flags=lazy\npeer: ipc_close o\n\
                 owner: e = event_create flags=interprocess,disable_timing\n\
                 owner: eh = ipc_get_event e\nowner: send eh -> peer\n{event}\
                 peer: n = malloc 4KiB\npeer: fill n 0x11\n"
            )
        };
        let elsewhere = |trace: &Trace| {
            let new_va = StepOutcome::Ok {
                value: ipc_harness::trace::ValueSummary::Ptr {
                    label: "peer.p2".into(),
                },
            };
            answered(trace, "n = malloc 4KiB", new_va)
        };
        let opened = run(&case("peer: x = ipc_open_event eh\n"));
        let at = step_at(&opened, "n = malloc 4KiB");
        let reused = |t: &Trace| match &t.steps[at].outcome {
            StepOutcome::Ok {
                value: ipc_harness::trace::ValueSummary::Ptr { label },
            } => label.clone(),
            other => panic!("{other:?}"),
        };
        // The simulator places it on the closed mapping's VA.
        assert_eq!(reused(&opened), "peer.p1");
        let (real, at) = elsewhere(&opened);
        assert_eq!(event_memory_placement_step(&opened, &real), Some(at));
        assert!(differences(&opened, &real, &|_| false).is_empty());
        assert_eq!(event_memory_placement_step(&opened, &opened), None);
        // An earlier step that differs otherwise does not hide the
        // placement, and stays a difference itself.
        let mut earlier = real.clone();
        let send = step_at(&earlier, "send eh -> peer");
        earlier.steps[send].outcome = StepOutcome::Error {
            code: 1,
            name: "cudaErrorInvalidValue".into(),
        };
        assert_eq!(event_memory_placement_step(&opened, &earlier), Some(at));
        assert_eq!(differences(&opened, &earlier, &|_| false).len(), 1);
        let unopened = run(&case(""));
        let (real, _) = elsewhere(&unopened);
        assert_eq!(event_memory_placement_step(&unopened, &real), None);
        assert!(!differences(&unopened, &real, &|_| false).is_empty());
        // Likewise after an allocation of its own was freed.
        let freed = run("devices 1\nprocess owner device=0\nprocess peer device=0\n\
             peer: a = malloc 1000\npeer: free a\n\
             owner: e = event_create flags=interprocess,disable_timing\n\
             owner: eh = ipc_get_event e\nowner: send eh -> peer\n\
             peer: x = ipc_open_event eh\npeer: n = malloc 4KiB\n");
        let (real, at) = elsewhere(&freed);
        assert!(
            matches!(&freed.steps[at].outcome, StepOutcome::Ok {
                value: ipc_harness::trace::ValueSummary::Ptr { label },
            } if label == "peer.p1"),
            "{:?}",
            freed.steps[at].outcome
        );
        assert_eq!(event_memory_placement_step(&freed, &real), Some(at));
    }

    /// An exporter that held a VMM allocation crashes: the importer's
    /// mapping of its memory reads the bytes or zeros on the GPU, run to
    /// run (mem.lifetime.import-after-exporter-crash-with-vmm-varies).
    /// Zeros on the real side cut the comparison there; zeros where the
    /// exporter released its VMM allocation first, or never crashed, are a
    /// difference.
    #[test]
    fn zeros_from_a_crashed_exporter_with_vmm_cut_the_comparison() {
        use crate::explore::case::crashed_exporter_zeros_step;
        let case = |vmm: &str, end: &str| {
            format!(
                "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                 owner: v = vmm_create 2MiB types=posix_fd device=0\n{vmm}\
                 owner: m = malloc 1000\nowner: fill m 0x5a\nowner: h = ipc_get m\n\
                 owner: send h -> peer\npeer: o = ipc_open h flags=lazy\n\
                 owner: e = event_create flags=interprocess,disable_timing\n{end}\
                 peer: d = malloc 4KiB\npeer: copy d o 16\npeer: sync\npeer: read d 0 16\n"
            )
        };
        let zeros = |trace: &Trace| {
            let zeros = StepOutcome::Ok {
                value: ipc_harness::trace::ValueSummary::Bytes {
                    pattern: "00*16".into(),
                },
            };
            answered(trace, "read d 0 16", zeros)
        };
        let crash = "owner: ipc_get_event e out=null\n";
        let crashed = run(&case("", crash));
        assert!(matches!(
            crashed.steps[step_at(&crashed, "ipc_get_event e out=null")].outcome,
            StepOutcome::Crash { .. }
        ));
        let (real, at) = zeros(&crashed);
        assert_eq!(crashed_exporter_zeros_step(&crashed, &real), Some(at));
        assert!(differences(&crashed, &real, &|_| false).is_empty());
        assert_eq!(crashed_exporter_zeros_step(&crashed, &crashed), None);
        for (vmm, end) in [("owner: vmm_release v\n", crash), ("", "owner: sync\n")] {
            let trace = run(&case(vmm, end));
            let (real, _) = zeros(&trace);
            assert_eq!(
                crashed_exporter_zeros_step(&trace, &real),
                None,
                "{vmm}{end}"
            );
            assert!(!differences(&trace, &real, &|_| false).is_empty());
        }
    }

    /// Bytes 48..52 of a handle number the exporting process among the
    /// driver's clients; a damaged word may name a live process on the GPU
    /// (mem.handle.corrupted-fields). An open of such a handle that the GPU
    /// answers other than InvalidHandle cuts the comparison there; the same
    /// answer for a handle damaged elsewhere (byte 52, the check word), or
    /// an open the simulator answers otherwise, is a difference.
    #[test]
    fn an_open_of_a_damaged_process_word_may_name_a_live_process() {
        use crate::explore::case::damaged_process_word_step;
        let case = |byte: u8| {
            format!(
                "devices 1\nprocess owner device=0\nprocess peer device=0\n\
                 owner: m = malloc 1000\nowner: h = ipc_get m\n\
                 owner: f = handle_flip h {byte}\nowner: send f -> peer\n\
                 peer: o = ipc_open f flags=lazy\npeer: read o 0 16\n"
            )
        };
        let invalid_value = StepOutcome::Error {
            code: 1,
            name: "cudaErrorInvalidValue".into(),
        };
        let open = "o = ipc_open f flags=lazy";
        for byte in [48, 51] {
            let trace = run(&case(byte));
            let at = step_at(&trace, open);
            assert!(
                is_invalid_handle(&trace.steps[at].outcome),
                "byte {byte}: {:?}",
                trace.steps[at].outcome
            );
            let (real, at) = answered(&trace, open, invalid_value.clone());
            assert_eq!(
                damaged_process_word_step(&trace, &real),
                Some(at),
                "byte {byte}"
            );
            assert!(
                differences(&trace, &real, &|_| false).is_empty(),
                "byte {byte}"
            );
            assert_eq!(damaged_process_word_step(&trace, &trace), None);
        }
        // The check word (byte 52): InvalidValue on both sides, and another
        // answer on the GPU is a difference.
        let trace = run(&case(52));
        let ok = StepOutcome::Ok {
            value: ipc_harness::trace::ValueSummary::Ptr {
                label: "peer.p1".into(),
            },
        };
        let (real, _) = answered(&trace, open, ok);
        assert_eq!(damaged_process_word_step(&trace, &real), None);
        assert!(!differences(&trace, &real, &|_| false).is_empty());
    }

    fn is_invalid_handle(o: &StepOutcome) -> bool {
        matches!(o, StepOutcome::Error { code: 400, .. })
    }

    #[test]
    fn a_recording_named_gz_is_gzipped_case_by_case() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cases.jsonl.gz");
        let eval = Evaluation {
            violations: Vec::new(),
            steps: 0,
            compared_steps: 0,
            not_compared: true,
            worker_history: false,
            sim_trace: None,
            real_trace: None,
        };
        let id = |index| CaseId {
            index,
            seed: 7,
            dialect: ipc_harness::Dialect::Driver,
        };
        let mut recorder = Recorder::new(&path, Some(2));
        recorder.record(id(0), "devices 1\n", &eval);
        // A run killed here leaves a whole gzip stream.
        let first = std::fs::read(&path).unwrap();
        assert_eq!(&first[..2], &[0x1f, 0x8b]);
        assert_eq!(read(&path).unwrap().len(), 1);
        recorder.record(id(1), "devices 1\n", &eval);
        assert!(recorder.error.is_none());
        let cases = read(&path).unwrap();
        assert_eq!(
            cases.iter().map(|c| c.case.index).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(cases[1].devices, Some(2));
        // Any other name stays plain text.
        let plain = dir.path().join("cases.jsonl");
        Recorder::new(&plain, None).record(id(0), "devices 1\n", &eval);
        assert!(std::fs::read_to_string(&plain).unwrap().starts_with('{'));
    }

    #[test]
    fn a_recording_that_inflates_past_the_limit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bomb.jsonl.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&vec![b'\n'; 64 * 1024]).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let err = read_limited(&path, 4096).unwrap_err();
        assert!(err.contains("limit of 4096 bytes"), "{err}");
        // Within the limit the same file is read (blank lines: no cases).
        assert_eq!(read_limited(&path, 64 * 1024).unwrap().len(), 0);
    }
}
