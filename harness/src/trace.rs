//! What an execution of a scenario observed, in a form that two backends can
//! compare: outcomes and relations between pointers, never raw addresses.

use crate::machine::Hazard;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The value a successful step produced, summarised without addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ValueSummary {
    /// The step returned nothing (a free, close, set or wait).
    Unit,
    /// A pointer, as a label unique per distinct address within its process:
    /// two results with the same label are the same address.
    Ptr {
        /// The pointer's label (`PROC.p1`, ...).
        label: String,
    },
    /// A context, labelled like pointers, except that a destroyed context's
    /// label is retired: a new context at its address gets a fresh label
    /// (the executor's `Labels` says when).
    Context {
        /// The context's label.
        label: String,
    },
    /// A handle; `label` is shared by handles with identical bytes.
    Handle {
        /// The handle's label (`h1`, `h2`, ... by identical bytes).
        label: String,
    },
    /// `address_range`: base labelled like a pointer, size in bytes.
    Range {
        /// The base address's label.
        base: String,
        /// The range's size in bytes.
        size: u64,
    },
    /// A number the step returned (a count, an attribute, a device ordinal).
    Int {
        /// The number.
        value: i64,
    },
    /// Bytes, run-length encoded like scenario patterns: `ab*16 00*48`.
    Bytes {
        /// The pattern, as scenario files write it.
        pattern: String,
    },
    /// `pointer_info`: the pointer's memory type and device attributes.
    PointerInfo {
        /// The memory type's name (`device`, `host`, ...).
        memory_type: String,
        /// The device ordinal; `None` when the pointer has none.
        device: Option<u32>,
    },
    // --- VMM ---
    /// A VMM allocation handle, labelled per process like pointers; a
    /// released handle's label is retired, as a context's is.
    VmmHandle {
        /// The handle's label.
        label: String,
    },
    /// A file descriptor, labelled per process like pointers.
    Fd {
        /// The descriptor's label.
        label: String,
    },
    /// An event, labelled like contexts (`PROC.e1`) per process (a
    /// destroyed event's label is retired). Event handles are `Handle`s
    /// labelled `eh1`, `eh2`, ... by identical bytes.
    Event {
        /// The event's label.
        label: String,
    },
    /// A memory pool, labelled per process like events (`PROC.l1`; a
    /// destroyed pool's label is retired). Pool pointer export data are
    /// `Handle`s labelled `px1`, `px2`, ... by identical bytes.
    Pool {
        /// The pool's label.
        label: String,
    },
    /// A stream, labelled like events (`PROC.s1`) per process (a destroyed
    /// stream's label is retired).
    Stream {
        /// The stream's label.
        label: String,
    },
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum StepOutcome {
    /// The call succeeded with this value.
    Ok {
        /// What it returned.
        value: ValueSummary,
    },
    /// The call returned a driver error.
    Error {
        /// The numeric code, as the dialect returned it.
        code: i32,
        /// The dialect's name for the code (`cudaErrorInvalidValue`).
        name: String,
    },
    /// The process died or hung during the step.
    Crash {
        /// What the backend said about the death.
        detail: String,
    },
    /// The step did not finish within the step timeout.
    Timeout {
        /// How long the runner waited, in milliseconds.
        after_ms: u64,
    },
    /// The harness failed during this step.
    Broken {
        /// What went wrong in the harness.
        detail: String,
    },
    /// Not run: an earlier failure made it impossible (missing binding, dead process).
    Skipped {
        /// Which earlier failure made the step impossible.
        reason: String,
    },
}

impl StepOutcome {
    /// True when two outcomes count as the same observation (the basis of the
    /// differential check).
    pub fn same_observation(&self, other: &StepOutcome) -> bool {
        match (self, other) {
            (StepOutcome::Error { code: a, .. }, StepOutcome::Error { code: b, .. }) => a == b,
            // The details name pids and backends; dying, and how (the
            // signal or exit status), is the observation.
            (StepOutcome::Crash { detail: a }, StepOutcome::Crash { detail: b }) => {
                match (crash_kind(a), crash_kind(b)) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
            }
            (StepOutcome::Timeout { .. }, StepOutcome::Timeout { .. }) => true,
            (a, b) => a == b,
        }
    }
}

/// How a process died, from a crash's detail as `ProcessLoss::Crashed`
/// writes it (`process crashed (signal Some(11), exit None): ...`): the
/// parenthesised signal and exit status, without the pid and text after.
fn crash_kind(detail: &str) -> Option<&str> {
    let rest = detail.strip_prefix("process crashed (")?;
    rest.split_once("):").map(|(kind, _)| kind)
}

/// One executed step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 0-based position among the scenario's steps.
    pub index: usize,
    /// 1-based line in the scenario file.
    pub line: usize,
    /// The scenario process that ran the step.
    pub process: String,
    /// The step as written (canonical form), e.g. `p = ipc_open h flags=lazy`.
    pub op: String,
    /// The API entry point the step called, in the run's dialect
    /// (`cudaIpcOpenMemHandle`, `cuIpcOpenMemHandle`, `hipIpcOpenMemHandle`);
    /// absent for harness-local steps. Not compared between runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<Cow<'static, str>>,
    /// What the step did.
    pub outcome: StepOutcome,
    /// `None` when the step had no expectation to check; otherwise whether it held.
    pub check: Option<CheckResult>,
    /// Wall time of the call, in microseconds (not compared between backends).
    #[serde(default)]
    pub elapsed_us: u64,
}

/// One expectation checked: a step's, or a hazard-log line's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Whether the expectation held.
    pub passed: bool,
    /// The expectation as written.
    pub expected: String,
    /// Why it failed (empty when it passed).
    pub message: String,
}

/// What one execution of a scenario observed: the record two backends'
/// runs are compared by ([`Trace::differences`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// Every step in order, run or skipped.
    pub steps: Vec<StepRecord>,
    /// Hazard-log expectations (`expect hazard ...`), checked at the end.
    pub hazard_checks: Vec<CheckResult>,
    /// `None` on backends without a hazard log.
    pub hazards: Option<Vec<Hazard>>,
    /// Where the wall time went (not compared between backends).
    #[serde(default)]
    pub timing: Timing,
}

/// Wall time of one execution, in microseconds: starting the machine (real
/// backend: processes and contexts), the steps, and shutting it down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timing {
    /// Starting the machine.
    pub start_us: u64,
    /// Running the steps.
    pub steps_us: u64,
    /// Shutting the machine down.
    pub shutdown_us: u64,
}

/// A difference between two traces of one scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepDifference {
    /// 0-based index of the step.
    pub index: usize,
    /// 1-based line in the scenario file.
    pub line: usize,
    /// The step as written (canonical form).
    pub op: String,
    /// The left trace's outcome; `None` when that trace has no such step.
    pub left: Option<StepOutcome>,
    /// The right trace's outcome; `None` when that trace has no such step.
    pub right: Option<StepOutcome>,
}

impl Trace {
    /// The trace with every wall-time figure zeroed: what two runs of one
    /// seed must agree on.
    pub fn observations(&self) -> Trace {
        let mut t = self.clone();
        t.timing = Timing::default();
        for s in &mut t.steps {
            s.elapsed_us = 0;
        }
        t
    }

    /// Whether `self.observations() == other.observations()`, without
    /// copying either trace.
    pub fn same_observations(&self, other: &Trace) -> bool {
        // Destructured, so a new field must be placed on one side or the other.
        let Trace {
            steps,
            hazard_checks,
            hazards,
            timing: _,
        } = self;
        let same_step = |a: &StepRecord, b: &StepRecord| {
            let StepRecord {
                index,
                line,
                process,
                op,
                api,
                outcome,
                check,
                elapsed_us: _,
            } = a;
            *index == b.index
                && *line == b.line
                && *process == b.process
                && *op == b.op
                && *api == b.api
                && *outcome == b.outcome
                && *check == b.check
        };
        steps.len() == other.steps.len()
            && steps.iter().zip(&other.steps).all(|(a, b)| same_step(a, b))
            && *hazard_checks == other.hazard_checks
            && *hazards == other.hazards
    }

    /// Every step whose observation differs between `self` and `other`.
    pub fn differences(&self, other: &Trace) -> Vec<StepDifference> {
        let n = self.steps.len().max(other.steps.len());
        (0..n)
            .filter_map(|i| {
                let l = self.steps.get(i);
                let r = other.steps.get(i);
                let same = match (l, r) {
                    (Some(a), Some(b)) => a.outcome.same_observation(&b.outcome),
                    _ => false,
                };
                (!same).then(|| {
                    let any = l.or(r).expect("one side exists");
                    StepDifference {
                        index: i,
                        line: any.line,
                        op: any.op.clone(),
                        left: l.map(|s| s.outcome.clone()),
                        right: r.map(|s| s.outcome.clone()),
                    }
                })
            })
            .collect()
    }
}

/// The end of the run of `b` that starts at `from`: the index of the first
/// byte at or after `from` that is not `b`, or `bytes.len()`.
pub(crate) fn run_end(bytes: &[u8], from: usize, b: u8) -> usize {
    // Short runs are found byte by byte. A long run is then checked against
    // its own start, already known to be `b`, in chunks that double (a
    // `memcmp`: a 2 MiB read is one run); the chunk where it ends is
    // searched a block at a time (a block without early exit compiles to
    // vector compares), then byte by byte.
    const SHORT: usize = 16;
    const BLOCK: usize = 64;
    let mut j = from;
    let short = bytes.len().min(from.saturating_add(SHORT));
    while j < short {
        if bytes[j] != b {
            return j;
        }
        j += 1;
    }
    while j < bytes.len() {
        let chunk = (j - from).min(bytes.len() - j);
        if bytes[j..j + chunk] != bytes[from..from + chunk] {
            break;
        }
        j += chunk;
    }
    while let Some(block) = bytes.get(j..j + BLOCK) {
        if block.iter().fold(0u8, |acc, &x| acc | (x ^ b)) != 0 {
            break;
        }
        j += BLOCK;
    }
    while j < bytes.len() && bytes[j] == b {
        j += 1;
    }
    j
}

/// `n` in decimal ASCII digits, written into the end of `buf`.
pub(crate) fn decimal_digits(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut d = buf.len();
    loop {
        d -= 1;
        buf[d] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[d..]
}

/// Append `n` in decimal.
pub(crate) fn push_decimal(out: &mut String, n: u64) {
    let mut buf = [0u8; 20];
    for &c in decimal_digits(n, &mut buf) {
        out.push(char::from(c));
    }
}

/// Run-length encode bytes the way scenario patterns are written.
pub fn encode_bytes(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Room for a short read's whole text (at most 3 characters a byte);
    // a longer text grows as it is written.
    let mut out = String::with_capacity(bytes.len().min(64) * 3);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // A run of one byte (most runs of a varied read) ends without a call.
        let j = match bytes.get(i + 1) {
            Some(&next) if next == b => run_end(bytes, i + 2, b),
            _ => i + 1,
        };
        let run = j - i;
        if i > 0 {
            out.push(' ');
        }
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
        if run != 1 {
            out.push('*');
            push_decimal(&mut out, run as u64);
        }
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_run_length_encoded() {
        assert_eq!(encode_bytes(&[]), "");
        assert_eq!(encode_bytes(&[0xab; 4]), "ab*4");
        assert_eq!(encode_bytes(&[1, 2, 2, 0]), "01 02*2 00");
    }

    /// The bulk encoder against the byte-at-a-time definition, on runs
    /// that end before, at and across block edges.
    #[test]
    fn bulk_encoding_is_the_bytewise_one() {
        use std::fmt::Write;
        fn bytewise(bytes: &[u8]) -> String {
            let mut out = String::new();
            let mut i = 0;
            while i < bytes.len() {
                let b = bytes[i];
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] == b {
                    j += 1;
                }
                if i > 0 {
                    out.push(' ');
                }
                let _ = if j - i == 1 {
                    write!(out, "{b:02x}")
                } else {
                    write!(out, "{b:02x}*{}", j - i)
                };
                i = j;
            }
            out
        }
        let mut cases: Vec<Vec<u8>> = vec![vec![0xff], (0..=255).collect()];
        for len in [1, 15, 16, 17, 63, 64, 65, 80, 81, 128, 200, 4096, 70_000] {
            // Around block edges, and the ends of the doubling chunks a
            // run from 0 or 1 is compared in (16, 32, 64, ..., 65536).
            let chunk_ends =
                (4..17).flat_map(|k| [(1 << k) - 1, 1 << k, (1 << k) + 1, (1 << k) + 2]);
            let ats = [0, 1, 16, 17, 63, 64, 65, 79, 80, 100, 1000, 40_000, len - 1];
            for at in ats.into_iter().chain(chunk_ends) {
                let mut v = vec![0xabu8; len];
                if at < len {
                    v[at] = 0xac;
                }
                v.push(0);
                cases.push(v);
            }
        }
        for v in &cases {
            assert_eq!(encode_bytes(v), bytewise(v));
            for b in [0u8, 0xab, 0xac] {
                for from in [0, 1, 17, 65, 1000] {
                    let from = from.min(v.len());
                    let want = from
                        + v[from..]
                            .iter()
                            .position(|&x| x != b)
                            .unwrap_or(v.len() - from);
                    assert_eq!(run_end(v, from, b), want);
                }
            }
        }
        let mut s = String::new();
        for n in [0, 7, 10, 2_097_152, u64::MAX] {
            s.clear();
            push_decimal(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }

    #[test]
    fn differences_compare_codes_not_names() {
        let step = |outcome| StepRecord {
            index: 0,
            line: 3,
            process: "a".into(),
            op: "x".into(),
            api: None,
            outcome,
            check: None,
            elapsed_us: 0,
        };
        let a = Trace {
            steps: vec![step(StepOutcome::Error {
                code: 1,
                name: "cudaErrorInvalidValue".into(),
            })],
            ..Trace::default()
        };
        let b = Trace {
            steps: vec![step(StepOutcome::Error {
                code: 1,
                name: "CUDA_ERROR_INVALID_VALUE".into(),
            })],
            ..Trace::default()
        };
        assert!(a.differences(&b).is_empty());
        let c = Trace {
            steps: vec![step(StepOutcome::Ok {
                value: ValueSummary::Unit,
            })],
            ..Trace::default()
        };
        assert_eq!(a.differences(&c).len(), 1);
        assert_eq!(a.differences(&Trace::default()).len(), 1);
    }

    #[test]
    fn crashes_compare_by_signal_not_detail() {
        let step = |index, outcome| StepRecord {
            index,
            line: 3 + index,
            process: "p1".into(),
            op: "x".into(),
            api: None,
            outcome,
            check: None,
            elapsed_us: 0,
        };
        let crash = |detail: &str| StepOutcome::Crash {
            detail: detail.into(),
        };
        let skipped = StepOutcome::Skipped {
            reason: "process 'p1' crashed at line 3".into(),
        };
        let trace = |first| Trace {
            steps: vec![step(0, first), step(1, skipped.clone())],
            ..Trace::default()
        };
        let sim = trace(crash(
            "process crashed (signal Some(11), exit None): cuIpcGetEventHandle of an interprocess event (SIGSEGV)",
        ));
        let real = trace(crash(
            "process crashed (signal Some(11), exit None): worker for process 'p1' (pid 2101) ended during ipc_get_event_handle",
        ));
        assert!(sim.differences(&real).is_empty());
        let abort = trace(crash(
            "process crashed (signal Some(6), exit None): worker for process 'p1' (pid 7) ended",
        ));
        assert_eq!(sim.differences(&abort).len(), 1);
        // A detail in another shape still counts as the same death.
        assert!(sim.differences(&trace(crash("lost"))).is_empty());
    }

    #[test]
    fn same_observations_is_equality_without_wall_times() {
        let step = |op: &str, elapsed_us| StepRecord {
            index: 0,
            line: 3,
            process: "a".into(),
            op: op.into(),
            api: None,
            outcome: StepOutcome::Ok {
                value: ValueSummary::Unit,
            },
            check: None,
            elapsed_us,
        };
        let trace = |op: &str, elapsed_us, steps_us| Trace {
            steps: vec![step(op, elapsed_us)],
            timing: Timing {
                start_us: 1,
                steps_us,
                shutdown_us: 2,
            },
            ..Trace::default()
        };
        let a = trace("sync", 5, 7);
        let cases = [
            trace("sync", 9, 11),
            trace("free x", 5, 7),
            Trace::default(),
            Trace {
                hazards: Some(Vec::new()),
                ..a.clone()
            },
        ];
        for b in &cases {
            assert_eq!(
                a.same_observations(b),
                a.observations() == b.observations(),
                "{b:?}"
            );
        }
        assert!(a.same_observations(&cases[0]));
    }
}

/// The result vocabulary of a scenario or clause run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Status {
    /// Every step ran and every expectation held.
    Pass,
    /// An expectation did not hold.
    Fail,
    /// A requirement is absent (too few devices, no GPU, no libcuda): the
    /// message says which.
    NotSupported,
    /// A process died during the run.
    Crash,
    /// A step did not finish within the step timeout.
    Timeout,
    /// The harness failed (malformed file, protocol error, spawn failure).
    Broken,
}

impl Status {
    /// The status's name as reports write it (`Pass`, `NotSupported`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "Pass",
            Status::Fail => "Fail",
            Status::NotSupported => "NotSupported",
            Status::Crash => "Crash",
            Status::Timeout => "Timeout",
            Status::Broken => "Broken",
        }
    }

    /// Pass and NotSupported are acceptable without expectations.
    pub fn is_success(self) -> bool {
        matches!(self, Status::Pass | Status::NotSupported)
    }
}

/// A status with the message that explains it (empty for Pass).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The status.
    pub status: Status,
    /// Why (empty for Pass).
    pub message: String,
}
