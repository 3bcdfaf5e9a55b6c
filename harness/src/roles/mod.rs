//! Testing your own IPC code: roles, peers, and a run on any backend.
//!
//! A test declares processes as named *roles*, each with a closure that talks
//! to the [`Driver`] and to its peers through a [`RoleCtx`]. The same
//! [`RoleSet`] then runs
//! - on any in-process [`Backend`] (the simulator): [`RoleSet::run`]. Every
//!   role runs on its own thread, but only one at a time: each driver call,
//!   send, receive and role end is a scheduling point where a seeded
//!   scheduler picks which role goes on, so a run is a pure function of
//!   its [`RunOptions`] (seed, [`Schedule`], [`Fault`]s);
//! - on drivers the test supplies, such as a mockall `MockDriver`:
//!   [`RoleSet::run_with_drivers`];
//! - on a real GPU, each role in its own OS process
//!   (`RoleSet::run_in_processes`, feature `cuda`): the test binary re-runs
//!   itself once per role (`--exact <test> ...`, the role named in
//!   [`ROLE_ENV`]); the child finds its role by name in the `RoleSet` the
//!   test builds in every process, and reaches its peers through the parent
//!   over a Unix socket (file descriptors travel with `SCM_RIGHTS`).
//!
//! After a run, a [`RunReport`] gives each role's [`RoleOutcome`], the
//! simulator's hazard log, and each process's final state
//! ([`ProcessState`]: allocations and IPC mappings still held, call counts)
//! as seen through its driver calls. See `docs/testing-your-code.md`.

mod driver;
mod ledger;
#[cfg(feature = "cuda")]
mod processes;
mod scheduler;
#[cfg(feature = "proptest")]
pub mod strategies;
#[cfg(test)]
mod tests;

pub use driver::{CallKind, RoleDriver};
pub use ledger::{CallBy, Held, Kept, Leak, Ledger, ReachedError, RoleFailure};

use crate::calls::Driver;
use crate::driver::{IpcEventHandle, IpcMemHandle};
use crate::errors::{Dialect, ErrorKind};
use crate::machine::{Backend, Hazard, HazardKind, MachineSpec, ProcessSpec, StartError};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::Arc;
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

pub(crate) type RoleBody = Arc<dyn Fn(&mut RoleCtx) -> RoleResult + Send + Sync>;

/// Why a role failed. Any error converts into it with `?`; a driver error
/// keeps its dialect-neutral [`ErrorKind`] (and the report adds the call).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleError {
    pub message: String,
    pub kind: Option<ErrorKind>,
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

/// What one peer sends another: bytes and, optionally, file descriptors.
#[derive(Debug, Default)]
pub struct Message {
    pub bytes: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

impl Message {
    pub fn bytes(bytes: impl Into<Vec<u8>>) -> Message {
        Message {
            bytes: bytes.into(),
            fds: Vec::new(),
        }
    }

    /// A message carrying one IPC handle's 64 bytes.
    pub fn handle(handle: IpcMemHandle) -> Message {
        Message::bytes(handle.0.to_vec())
    }

    /// The 64 bytes as a handle, if the message is exactly one.
    pub fn as_handle(&self) -> Option<IpcMemHandle> {
        IpcMemHandle::from_slice(&self.bytes)
    }

    /// A message carrying one IPC event handle's 64 bytes.
    pub fn event_handle(handle: IpcEventHandle) -> Message {
        Message::bytes(handle.0.to_vec())
    }

    /// The 64 bytes as an event handle, if the message is exactly one.
    pub fn as_event_handle(&self) -> Option<IpcEventHandle> {
        IpcEventHandle::from_slice(&self.bytes)
    }

    /// A serde value, JSON-encoded.
    pub fn json<T: Serialize>(value: &T) -> Result<Message, RoleError> {
        Ok(Message::bytes(serde_json::to_vec(value)?))
    }

    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, RoleError> {
        Ok(serde_json::from_slice(&self.bytes)?)
    }
}

/// How a role's messages reach its peers (threads on the simulator, the
/// parent process on the real backend).
pub(crate) trait PeerLink: Send {
    fn send(&mut self, to: usize, msg: Message) -> Result<(), RoleError>;
    /// The next message (from `from` only, when given) and its sender.
    fn recv(&mut self, from: Option<usize>) -> Result<(usize, Message), RoleError>;
}

/// What a role's closure gets: its driver and its peers.
pub struct RoleCtx {
    name: String,
    names: Vec<String>,
    driver: RoleDriver,
    link: Box<dyn PeerLink>,
}

impl RoleCtx {
    /// This role's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver as this role's process sees it.
    pub fn driver(&mut self) -> &mut dyn Driver {
        &mut self.driver
    }

    /// Declares that one driver error of `kind` is expected: the next one
    /// this role's calls get is not held against a clean report (each
    /// declaration covers one error).
    pub fn expect_error(&mut self, kind: ErrorKind) {
        self.driver.state.ledger.expecting.push(kind);
    }

    /// Declares that the role keeps `what` past its end on purpose: it is
    /// not reported as a leak.
    pub fn keep(&mut self, what: Kept) {
        self.driver.state.ledger.kept.push(what);
    }

    fn peer(&self, name: &str) -> Result<usize, RoleError> {
        self.names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| fail(format!("'{}' sent to unknown role '{name}'", self.name)))
    }

    pub fn send(&mut self, to: &str, msg: Message) -> Result<(), RoleError> {
        let to = self.peer(to)?;
        self.link.send(to, msg)
    }

    /// Sends a serde value (JSON).
    pub fn send_json<T: Serialize>(&mut self, to: &str, value: &T) -> Result<(), RoleError> {
        self.send(to, Message::json(value)?)
    }

    /// Blocks until any peer's message arrives; returns the sender's name.
    pub fn recv(&mut self) -> Result<(String, Message), RoleError> {
        let (from, msg) = self.link.recv(None)?;
        Ok((self.names[from].clone(), msg))
    }

    /// Blocks until a message from `from` arrives (others wait their turn).
    pub fn recv_from(&mut self, from: &str) -> Result<Message, RoleError> {
        let from = self.peer(from)?;
        Ok(self.link.recv(Some(from))?.1)
    }

    pub fn recv_json_from<T: DeserializeOwned>(&mut self, from: &str) -> Result<T, RoleError> {
        self.recv_from(from)?.parse()
    }

    /// Blocks for any peer's message, decoded as `T`; returns the sender's name.
    pub fn recv_json<T: DeserializeOwned>(&mut self) -> Result<(String, T), RoleError> {
        let (from, msg) = self.recv()?;
        Ok((from, msg.parse()?))
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
    pub fn is_ok(&self) -> bool {
        matches!(self, RoleOutcome::Ok(_))
    }

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
    pub role: String,
    pub call: CallKind,
    pub nth: usize,
    pub error: ErrorKind,
}

/// Make one role's process die as by `SIGKILL` just before the `nth`
/// (1-based) call of `call` by that role: the call never runs, the role's
/// outcome is [`RoleOutcome::Lost`] (`crashed at ...`), and its peers see
/// what they would see on a GPU (messages it sent arrive, a receive
/// waiting for it fails, its exports follow the backend's crash model).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crash {
    pub role: String,
    pub call: CallKind,
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
    pub schedule: Schedule,
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

    pub fn with_schedule(mut self, schedule: Schedule) -> RunOptions {
        self.schedule = schedule;
        self
    }

    pub fn with_fault(mut self, fault: Fault) -> RunOptions {
        self.faults.push(fault);
        self
    }

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
    pub seed: u64,
    pub schedule: Schedule,
    pub faults: Vec<Fault>,
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
    pub fn outcome(&self, role: &str) -> Option<&RoleOutcome> {
        self.outcomes.get(role)
    }

    pub fn state(&self, role: &str) -> Option<&ProcessState> {
        self.final_state.get(role)
    }

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
    /// is not its leak: its process died.
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
            for e in s.unexpected_errors() {
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

struct RoleDecl {
    spec: ProcessSpec,
    body: RoleBody,
}

/// The processes of one test and the closure each runs. Build it the same
/// way in every process (a plain function the test calls): on the real
/// backend each role's process finds its closure by name.
pub struct RoleSet {
    devices: u32,
    dialect: Dialect,
    roles: Vec<RoleDecl>,
}

impl Default for RoleSet {
    fn default() -> Self {
        RoleSet::new()
    }
}

impl RoleSet {
    /// One device, runtime dialect, no roles yet.
    pub fn new() -> RoleSet {
        RoleSet {
            devices: 1,
            dialect: Dialect::Runtime,
            roles: Vec::new(),
        }
    }

    /// Devices the machine must have.
    pub fn devices(mut self, devices: u32) -> RoleSet {
        self.devices = devices;
        self
    }

    pub fn dialect(mut self, dialect: Dialect) -> RoleSet {
        self.dialect = dialect;
        self
    }

    /// A role on `device` (all devices visible).
    pub fn role<F>(self, name: &str, device: u32, body: F) -> RoleSet
    where
        F: Fn(&mut RoleCtx) -> RoleResult + Send + Sync + 'static,
    {
        self.process(
            ProcessSpec {
                name: name.into(),
                device,
                visible_devices: None,
            },
            body,
        )
    }

    /// A role with a full process spec (visible devices).
    pub fn process<F>(mut self, spec: ProcessSpec, body: F) -> RoleSet
    where
        F: Fn(&mut RoleCtx) -> RoleResult + Send + Sync + 'static,
    {
        self.roles.push(RoleDecl {
            spec,
            body: Arc::new(body),
        });
        self
    }

    pub fn names(&self) -> Vec<String> {
        self.roles.iter().map(|r| r.spec.name.clone()).collect()
    }

    fn machine_spec(&self, opts: &RunOptions) -> MachineSpec {
        MachineSpec {
            devices: self.devices,
            processes: self.roles.iter().map(|r| r.spec.clone()).collect(),
            dialect: self.dialect,
            seed: opts.seed,
            step_timeout: opts.timeout,
            topology: None,
            semantics: Vec::new(),
        }
    }

    /// Bad declarations: no roles, a name twice, a fault for no role.
    fn validate(&self, opts: &RunOptions) -> Result<(), StartError> {
        let names = self.names();
        if names.is_empty() {
            return Err(StartError::Harness("the role set has no roles".into()));
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(StartError::Harness(format!("role '{n}' declared twice")));
            }
        }
        if let Some(f) = opts.faults.iter().find(|f| !names.contains(&f.role)) {
            return Err(StartError::Harness(format!(
                "a fault names role '{}', which is not declared",
                f.role
            )));
        }
        if let Some(c) = opts.crashes.iter().find(|c| !names.contains(&c.role)) {
            return Err(StartError::Harness(format!(
                "a crash names role '{}', which is not declared",
                c.role
            )));
        }
        for (i, c) in opts.crashes.iter().enumerate() {
            if c.nth == 0 {
                return Err(StartError::Harness(format!(
                    "the crash of role '{}' is at call 0 of {:?}: calls count from 1",
                    c.role, c.call
                )));
            }
            if opts.crashes[..i].iter().any(|d| d.role == c.role) {
                return Err(StartError::Harness(format!(
                    "role '{}' has two crashes planned: a process dies once",
                    c.role
                )));
            }
        }
        Ok(())
    }

    /// Runs every role on `backend` (one machine, all processes in this
    /// test process), one role at a time in the order `opts.schedule` picks.
    pub fn run(&self, backend: &dyn Backend, opts: &RunOptions) -> Result<RunReport, StartError> {
        self.validate(opts)?;
        let machine = backend.start(&self.machine_spec(opts))?;
        let procs = scheduler::MachineProcs(machine);
        Ok(scheduler::run(self, opts, backend.name(), procs))
    }

    /// Runs every role against a driver `make` builds for it (by role index
    /// and spec), e.g. a mockall `MockDriver` that fails one chosen call.
    /// There is no shared machine and no hazard log.
    pub fn run_with_drivers<F>(
        &self,
        opts: &RunOptions,
        mut make: F,
    ) -> Result<RunReport, StartError>
    where
        F: FnMut(usize, &ProcessSpec) -> Box<dyn Driver + Send>,
    {
        self.validate(opts)?;
        let drivers = self
            .roles
            .iter()
            .enumerate()
            .map(|(i, r)| make(i, &r.spec))
            .collect();
        Ok(scheduler::run(
            self,
            opts,
            "drivers",
            scheduler::OwnDrivers(drivers),
        ))
    }

    /// Runs each role in its own OS process on the real GPU (see the
    /// module docs). Call it from a `#[test]` that builds this `RoleSet`
    /// the same way every time: in a role's process it plays that role and
    /// exits. `NotSupported` without libcuda. There is no hazard log; the
    /// schedule is the hardware's own.
    #[cfg(feature = "cuda")]
    pub fn run_in_processes(&self, opts: &RunOptions) -> Result<RunReport, StartError> {
        self.validate(opts)?;
        if let Ok(role) = std::env::var(ROLE_ENV) {
            processes::serve_role(self, opts, &role);
        }
        processes::run_parent(self, opts)
    }
}
