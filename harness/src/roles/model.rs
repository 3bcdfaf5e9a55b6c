//! What a run of roles is given and gives back: its options
//! ([`RunOptions`], [`Schedule`], [`Fault`], [`Crash`]), each role's end
//! ([`RoleOutcome`], [`RoleError`]) and process state ([`ProcessState`]),
//! and the [`RunReport`]. Below the role driver, the scheduler and the
//! process runner, which all fill it in.

use super::ledger::{Kept, Leak, Ledger, ReachedError};
use crate::calls::CallKind;
use crate::errors::ErrorKind;
use crate::machine::{Hazard, HazardKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Environment variable naming the role a re-run test binary must play.
pub const ROLE_ENV: &str = "IPC_HARNESS_ROLE";
/// Environment variable naming the child's socket descriptor.
pub const ROLE_FD_ENV: &str = "IPC_HARNESS_ROLE_FD";
/// Environment variable that sets the seed of [`RunOptions::from_env`].
pub const SEED_ENV: &str = "IPC_HARNESS_SEED";

/// What a role returns: a JSON value the test asserts on (it crosses process
/// boundaries on the real backend), or why it failed.
pub type RoleResult = Result<serde_json::Value, RoleError>;

/// Why a role failed. Any error converts into it with `?`; a driver error
/// keeps its dialect-neutral [`ErrorKind`] (and the report adds the call).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleError {
    /// What went wrong, in words.
    pub message: String,
    /// The driver error's dialect-neutral kind, when a driver error caused it.
    pub kind: Option<ErrorKind>,
    /// The driver call that failed, when known.
    pub call: Option<CallKind>,
}

impl<E: std::error::Error + 'static> From<E> for RoleError {
    fn from(e: E) -> Self {
        let kind = match (&e as &dyn std::any::Any).downcast_ref::<crate::driver::DriverError>() {
            Some(crate::driver::DriverError::Api(api)) => api.kind(),
            _ => None,
        };
        RoleError {
            message: e.to_string(),
            kind,
            call: None,
        }
    }
}

impl fmt::Display for RoleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A role's failure with a message, for `return Err(fail("..."))`.
pub fn fail(message: impl Into<String>) -> RoleError {
    RoleError {
        message: message.into(),
        kind: None,
        call: None,
    }
}

/// A role's failure that names the driver error it stands for, so tests
/// match the kind (`fail_with(ErrorKind::TooManyPeers, "no slot")`).
pub fn fail_with(kind: ErrorKind, message: impl Into<String>) -> RoleError {
    RoleError {
        message: message.into(),
        kind: Some(kind),
        call: None,
    }
}

/// How one role ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RoleOutcome {
    /// The closure returned `Ok`.
    Ok(serde_json::Value),
    /// The closure returned `Err`: the message, and the call and error
    /// kind when a driver error caused it.
    Failed(RoleFailure),
    /// The closure panicked (message).
    Panicked(String),
    /// The role's process died or never answered (real backend), or the run
    /// was stopped (timeout) before the role ended.
    Lost(String),
}

impl RoleOutcome {
    /// Whether the role's closure returned `Ok`.
    pub fn is_ok(&self) -> bool {
        matches!(self, RoleOutcome::Ok(_))
    }

    /// The value the role returned, if it ended `Ok`.
    pub fn value(&self) -> Option<&serde_json::Value> {
        match self {
            RoleOutcome::Ok(v) => Some(v),
            _ => None,
        }
    }

    /// The failure, when the closure returned `Err`.
    pub fn failure(&self) -> Option<&RoleFailure> {
        match self {
            RoleOutcome::Failed(f) => Some(f),
            _ => None,
        }
    }
}

/// One IPC mapping a process still holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    /// Opens not yet matched by a close (the driver refcounts re-opens).
    pub open_count: u32,
    /// Bytes the mapping reaches (`cuMemGetAddressRange` right after the
    /// open); `None` if the query failed. More than the buffer the protocol
    /// meant to share means neighbours are exposed.
    pub mapped_len: Option<u64>,
}

/// A process's final state, as its own driver calls left it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    /// Allocations made and not freed: pointer -> size.
    pub allocations: BTreeMap<u64, u64>,
    /// IPC mappings opened and not fully closed: pointer -> mapping.
    pub mappings: BTreeMap<u64, Mapping>,
    /// Every mapping this process opened (a re-open of a pointer still
    /// mapped is not new), in order: pointer and the bytes it reached.
    pub opened: Vec<(u64, Option<u64>)>,
    /// Driver calls made, by kind (injected faults included).
    pub calls: BTreeMap<CallKind, usize>,
    /// Every call with who made it and what it returned, the errors that
    /// reached the role, the events, VMM objects and descriptors it holds.
    pub ledger: Ledger,
}

impl ProcessState {
    /// How many calls of `kind` the process made.
    pub fn calls_of(&self, kind: CallKind) -> usize {
        self.calls.get(&kind).copied().unwrap_or(0)
    }

    /// The most bytes any mapping this process opened could reach (0 when
    /// it opened none; a failed range query counts as 0).
    pub fn widest_mapping(&self) -> u64 {
        self.opened
            .iter()
            .map(|(_, len)| len.unwrap_or(0))
            .max()
            .unwrap_or(0)
    }
}

/// Which role goes on at each scheduling point (simulator and mock runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Schedule {
    /// A seeded pseudo-random choice at every point.
    Seeded(u64),
    /// At point k, the `choices[k] % ready`-th ready role (in declaration
    /// order); after the list, the first ready role. Shrinks well: all
    /// zeros is "earliest-declared role first".
    Choices(Vec<u32>),
}

/// Make one driver call of one role fail: the `nth` (1-based) call of
/// `call` by `role` returns `error` instead of reaching the driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// The role whose call fails.
    pub role: String,
    /// The kind of call that fails.
    pub call: CallKind,
    /// Which call of that kind fails, counting from 1.
    pub nth: usize,
    /// The error the call returns instead of reaching the driver.
    pub error: ErrorKind,
}

/// Make one role's process die as by `SIGKILL` just before the `nth`
/// (1-based) call of `call` by that role: the call never runs, the role's
/// outcome is [`RoleOutcome::Lost`] (`crashed at ...`), and its peers see
/// what they would see on a GPU (messages it sent arrive, a receive
/// waiting for it fails, its exports follow the backend's crash model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crash {
    /// The role whose process dies.
    pub role: String,
    /// The kind of call it dies at.
    pub call: CallKind,
    /// Which call of that kind, counting from 1.
    pub nth: usize,
}

impl Crash {
    /// The [`RoleOutcome::Lost`] text of this crash.
    pub fn outcome_text(&self) -> String {
        format!("{CRASHED_AT} {:?} number {} (planned)", self.call, self.nth)
    }
}

/// How the [`RoleOutcome::Lost`] text of a planned [`Crash`] starts.
pub const CRASHED_AT: &str = "crashed at";

/// Everything that decides a run besides the roles themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Seeds the machine (addresses, handle bytes).
    pub seed: u64,
    /// The order in which runnable roles go on.
    pub schedule: Schedule,
    /// Driver calls that fail with a chosen error instead of running.
    pub faults: Vec<Fault>,
    /// Roles whose process crashes at a chosen call (one per role).
    pub crashes: Vec<Crash>,
    /// The longest the whole run may take; then the roles still running are
    /// `Lost` (a role blocked in its own code cannot be interrupted).
    pub timeout: Duration,
    /// Real backend: the test to re-run in each role's process; `None`
    /// takes the current thread's name (libtest names it after the test).
    pub test_name: Option<String>,
}

impl RunOptions {
    /// Machine and schedule both seeded with `seed`; no faults.
    pub fn seeded(seed: u64) -> RunOptions {
        RunOptions {
            seed,
            schedule: Schedule::Seeded(seed),
            faults: Vec::new(),
            crashes: Vec::new(),
            timeout: Duration::from_secs(60),
            test_name: None,
        }
    }

    /// Seeded from [`SEED_ENV`] when set (to replay a failure), else `default_seed`.
    pub fn from_env(default_seed: u64) -> RunOptions {
        let seed = std::env::var(SEED_ENV)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(default_seed);
        RunOptions::seeded(seed)
    }

    /// The same options with another schedule.
    pub fn with_schedule(mut self, schedule: Schedule) -> RunOptions {
        self.schedule = schedule;
        self
    }

    /// The same options with one more planned fault.
    pub fn with_fault(mut self, fault: Fault) -> RunOptions {
        self.faults.push(fault);
        self
    }

    /// The same options with these planned faults added.
    pub fn with_faults(mut self, faults: impl IntoIterator<Item = Fault>) -> RunOptions {
        self.faults.extend(faults);
        self
    }

    /// `role`'s process crashes just before its `nth` call of `call` (see
    /// [`Crash`]), so a test can check its peers' recovery.
    pub fn with_crash(mut self, role: &str, call: CallKind, nth: usize) -> RunOptions {
        self.crashes.push(Crash {
            role: role.to_string(),
            call,
            nth,
        });
        self
    }

    /// The crash planned for `role`, if any.
    pub(crate) fn crash_of(&self, role: &str) -> Option<Crash> {
        self.crashes.iter().find(|c| c.role == role).cloned()
    }
}

/// What a run left behind, for assertions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// `sim`, `cuda`, `drivers` (test-supplied drivers).
    pub backend: String,
    /// The seed of the run (replay it with the seed variable).
    pub seed: u64,
    /// The schedule the run used.
    pub schedule: Schedule,
    /// The faults that were planned.
    pub faults: Vec<Fault>,
    /// The crashes that were planned.
    #[serde(default)]
    pub crashes: Vec<Crash>,
    /// By role name, in declaration order of `roles`.
    pub outcomes: BTreeMap<String, RoleOutcome>,
    /// The hazard log, where the backend keeps one (the simulator).
    pub hazards: Option<Vec<Hazard>>,
    /// By role name: what its driver calls left allocated and mapped.
    pub final_state: BTreeMap<String, ProcessState>,
    /// Role names in declaration order (hazards name processes by index).
    pub roles: Vec<String>,
    /// What happened, one line per scheduling point (simulator and mock
    /// runs) or per routed message (real backend).
    pub events: Vec<String>,
}

impl RunReport {
    /// How role `role` ended, if there is such a role.
    pub fn outcome(&self, role: &str) -> Option<&RoleOutcome> {
        self.outcomes.get(role)
    }

    /// Role `role`'s process state at its end, if there is such a role.
    pub fn state(&self, role: &str) -> Option<&ProcessState> {
        self.final_state.get(role)
    }

    /// Whether every role ended `Ok`.
    pub fn all_ok(&self) -> bool {
        self.outcomes.values().all(RoleOutcome::is_ok)
    }

    /// Hazards of one kind (empty where there is no hazard log).
    pub fn hazards_of(&self, kind: HazardKind) -> Vec<&Hazard> {
        self.hazards
            .iter()
            .flatten()
            .filter(|h| h.kind == kind)
            .collect()
    }

    /// Every role ended `Ok` (or crashed as the run planned: [`Crash`]),
    /// the hazard log (if any) is empty, no role left anything it did not
    /// declare kept (`RoleCtx::keep`), and no driver error reached a role's
    /// code undeclared (`RoleCtx::expect_error`). What a crashed role held
    /// is not its leak: its process died. A role that failed by returning a
    /// driver error (`?`) is reported once, as failed: that error is not
    /// also an undeclared one.
    pub fn is_clean(&self) -> bool {
        self.problems().is_empty()
    }

    /// Why the run is not clean, one line per problem, each naming the bug.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (role, outcome) in &self.outcomes {
            match outcome {
                RoleOutcome::Ok(_) => {}
                _ if self.crashed_as_planned(role) => {}
                RoleOutcome::Failed(f) => out.push(format!("role {role} failed: {f}")),
                RoleOutcome::Panicked(m) => out.push(format!("role {role} panicked: {m}")),
                RoleOutcome::Lost(m) => out.push(format!("role {role} was lost: {m}")),
            }
        }
        for h in self.hazards.iter().flatten() {
            let who = self.roles.get(h.process).map_or("?", String::as_str);
            out.push(format!("hazard {} in {who}: {}", h.kind.name(), h.detail));
        }
        for (role, s) in &self.final_state {
            if self.crashed_as_planned(role) {
                continue;
            }
            for leak in s.leaks() {
                out.push(format!("leak in {role}: {leak}"));
            }
            // The error a failed role returned is its failure, reported
            // above: not a second time as an undeclared error.
            let propagated = match self.outcome(role) {
                Some(RoleOutcome::Failed(RoleFailure {
                    call: Some(call),
                    kind: Some(kind),
                    ..
                })) => s
                    .ledger
                    .errors
                    .iter()
                    .rposition(|e| !e.expected && e.call == *call && e.kind == Some(*kind)),
                _ => None,
            };
            let undeclared = s
                .ledger
                .errors
                .iter()
                .enumerate()
                .filter(|&(i, e)| !e.expected && Some(i) != propagated);
            for (_, e) in undeclared {
                out.push(format!(
                    "undeclared driver error in {role}: {e} (ignored or handled, but not declared with expect_error)"
                ));
            }
        }
        out
    }

    /// Panics with the problems and the whole report (seed and schedule
    /// included, to replay it) unless [`RunReport::is_clean`].
    #[track_caller]
    pub fn assert_clean(&self) {
        let problems = self.problems();
        assert!(
            problems.is_empty(),
            "the run was not clean:\n  {}\n{self}",
            problems.join("\n  ")
        );
    }

    /// The role was lost to the crash the run planned for it ([`Crash`]).
    pub fn crashed_as_planned(&self, role: &str) -> bool {
        matches!(self.outcome(role), Some(RoleOutcome::Lost(m)) if m.starts_with(CRASHED_AT))
            && self.crashes.iter().any(|c| c.role == role)
    }

    /// The error kind a role's failure carries, if it failed with one.
    pub fn failed_with(&self, role: &str) -> Option<ErrorKind> {
        self.outcome(role)
            .and_then(RoleOutcome::failure)
            .and_then(|f| f.kind)
    }
}

impl fmt::Display for RunReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "backend {}, seed {} (replay: {SEED_ENV}={}), schedule {:?}, faults {:?}, crashes {:?}",
            self.backend, self.seed, self.seed, self.schedule, self.faults, self.crashes
        )?;
        for (role, outcome) in &self.outcomes {
            writeln!(f, "  role {role}: {outcome:?}")?;
        }
        match &self.hazards {
            None => writeln!(f, "  hazards: (no hazard log on this backend)")?,
            Some(hs) => {
                for h in hs {
                    let who = self.roles.get(h.process).map_or("?", String::as_str);
                    writeln!(f, "  hazard {} in {who}: {}", h.kind.name(), h.detail)?;
                }
            }
        }
        for (role, s) in &self.final_state {
            if !s.allocations.is_empty() || !s.mappings.is_empty() {
                writeln!(
                    f,
                    "  {role} still holds: allocations {:x?}, mappings {:x?}",
                    s.allocations, s.mappings
                )?;
            }
        }
        writeln!(f, "  events:")?;
        for e in &self.events {
            writeln!(f, "    {e}")?;
        }
        Ok(())
    }
}

impl ProcessState {
    /// What this process still holds at its end that its role did not
    /// declare kept (`RoleCtx::keep`).
    pub fn leaks(&self) -> Vec<Leak> {
        let l = &self.ledger;
        let mut out = Vec::new();
        let mut add = |what: Kept, size: Option<u64>| {
            if !l.keeps(what) {
                out.push(Leak { what, size });
            }
        };
        for (&p, &size) in &self.allocations {
            add(Kept::Allocation(p), Some(size));
        }
        for (&p, m) in &self.mappings {
            add(Kept::Mapping(p), m.mapped_len);
        }
        for &e in &l.held.events {
            add(Kept::Event(e), None);
        }
        for &e in &l.held.imported_events {
            add(Kept::ImportedEvent(e), None);
        }
        for &h in &l.held.vmm_handles {
            add(Kept::VmmHandle(h), None);
        }
        for (&p, &size) in &l.held.vmm_mappings {
            add(Kept::VmmMapping(p), Some(size));
        }
        for (&p, &size) in &l.held.reservations {
            add(Kept::Reservation(p), Some(size));
        }
        for &d in &l.held.fds {
            add(Kept::Fd(d), None);
        }
        for &st in &l.held.streams {
            add(Kept::Stream(st), None);
        }
        for &p in &l.held.pools {
            add(Kept::Pool(p), None);
        }
        for &p in &l.held.imported_pools {
            add(Kept::ImportedPool(p), None);
        }
        for (&p, &size) in &l.held.pool_allocations {
            add(Kept::PoolAllocation(p), Some(size));
        }
        for &p in &l.held.imported_pool_pointers {
            add(Kept::ImportedPoolPointer(p), None);
        }
        out
    }

    /// Driver errors that reached the role's code undeclared.
    pub fn unexpected_errors(&self) -> Vec<&ReachedError> {
        self.ledger.errors.iter().filter(|e| !e.expected).collect()
    }
}

/// A role's failure: its message and, when a driver error caused it, the
/// call and the dialect-neutral kind (match kinds, not strings).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleFailure {
    /// What went wrong, in words.
    pub message: String,
    /// The driver call that failed, when known.
    pub call: Option<CallKind>,
    /// The driver error's dialect-neutral kind, when a driver error caused it.
    pub kind: Option<ErrorKind>,
}

impl fmt::Display for RoleFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.call, self.kind) {
            (Some(c), Some(k)) => write!(f, "{c:?} failed with {k:?}: {}", self.message),
            (None, Some(k)) => write!(f, "{k:?}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

/// The outcome of a role whose closure returned `Err(error)`: the call is
/// the role's last failed driver call when its kind is the error's.
pub(crate) fn failed(error: RoleError, state: &ProcessState) -> RoleOutcome {
    let call = match (error.kind, state.ledger.last_error) {
        (Some(k), Some((call, Some(last)))) if k == last => Some(call),
        _ => None,
    };
    RoleOutcome::Failed(RoleFailure {
        message: error.message,
        call: error.call.or(call),
        kind: error.kind,
    })
}
