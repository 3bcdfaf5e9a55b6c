//! In-process runs: one thread per role, one role running at a time.
//!
//! Every driver call, send, receive and role end is posted to the
//! coordinator (the calling thread, which owns the machine: the simulator is
//! not `Send`). The coordinator waits until every running role has posted,
//! then lets the schedule pick one ready post and serves it. Roles only run
//! their own code between posts, so the order of everything the driver and
//! the peers see is a function of the roles, the seed and the schedule.

use super::ctx::{Message, PeerLink, RoleBody, RoleCtx};
use super::driver::{CallGate, CallKind, Crashed, DriverCall, RoleDriver};
use super::model::{
    fail, Crash, ProcessState, RoleError, RoleOutcome, RunOptions, RunReport, Schedule, CRASHED_AT,
};
use super::set::RoleSet;
use crate::calls::Driver;
use crate::machine::{Hazard, Machine};
use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::Instant;

/// The processes a run's roles drive.
pub(crate) trait Procs {
    fn driver(&mut self, i: usize) -> &mut dyn Driver;
    /// The role ended: its process exits (the simulator records leaks).
    fn exit(&mut self, i: usize);
    /// The role's process crashed (a planned [`Crash`]).
    fn crash(&mut self, i: usize);
    fn begin_step(&mut self, step: usize);
    fn hazards(&self) -> Option<Vec<Hazard>>;
    fn shutdown(&mut self);
}

/// A machine from a [`crate::Backend`].
pub(crate) struct MachineProcs(pub(crate) Box<dyn Machine>);

impl Procs for MachineProcs {
    fn driver(&mut self, i: usize) -> &mut dyn Driver {
        self.0.driver(i)
    }
    fn exit(&mut self, i: usize) {
        // An exit the machine refuses (the process crashed earlier) has
        // nothing left to reclaim.
        let _ = self.0.exit(i);
    }
    fn crash(&mut self, i: usize) {
        let _ = self.0.crash(i);
    }
    fn begin_step(&mut self, step: usize) {
        self.0.begin_step(step);
    }
    fn hazards(&self) -> Option<Vec<Hazard>> {
        self.0.hazards()
    }
    fn shutdown(&mut self) {
        self.0.shutdown();
    }
}

/// Drivers the test supplied, one per role (mocks).
pub(crate) struct OwnDrivers(pub(crate) Vec<Box<dyn Driver + Send>>);

impl Procs for OwnDrivers {
    fn driver(&mut self, i: usize) -> &mut dyn Driver {
        self.0[i].as_mut()
    }
    fn exit(&mut self, _i: usize) {}
    fn crash(&mut self, _i: usize) {}
    fn begin_step(&mut self, _step: usize) {}
    fn hazards(&self) -> Option<Vec<Hazard>> {
        None
    }
    fn shutdown(&mut self) {}
}

type Reply<T> = Sender<T>;

enum Post {
    Call {
        kind: CallKind,
        call: DriverCall,
        reply: Reply<Box<dyn Any + Send>>,
    },
    Send {
        to: usize,
        msg: Message,
        reply: Reply<Result<(), RoleError>>,
    },
    Recv {
        from: Option<usize>,
        reply: Reply<Result<(usize, Message), RoleError>>,
    },
    Done {
        outcome: RoleOutcome,
        state: Box<ProcessState>,
    },
    /// The role's process dies here (a planned crash).
    Crash {
        crash: Crash,
        state: Box<ProcessState>,
        reply: Reply<()>,
    },
}

fn stopped() -> RoleError {
    fail("the run was stopped (timeout or harness failure)")
}

struct SimGate {
    index: usize,
    posts: Sender<(usize, Post)>,
}

impl CallGate for SimGate {
    fn call(&mut self, kind: CallKind, call: DriverCall) -> Option<Box<dyn Any + Send>> {
        let (reply, answer) = channel();
        self.posts
            .send((self.index, Post::Call { kind, call, reply }))
            .ok()?;
        answer.recv().ok()
    }

    /// Waits until the coordinator recorded the death, so nothing the
    /// thread does while unwinding reaches the run.
    fn crash(&mut self, crash: &Crash, state: ProcessState) {
        let (reply, answer) = channel();
        let post = Post::Crash {
            crash: crash.clone(),
            state: Box::new(state),
            reply,
        };
        if self.posts.send((self.index, post)).is_ok() {
            let _ = answer.recv();
        }
    }
}

struct SimLink {
    index: usize,
    posts: Sender<(usize, Post)>,
}

impl PeerLink for SimLink {
    fn send(&mut self, to: usize, msg: Message) -> Result<(), RoleError> {
        let (reply, answer) = channel();
        self.posts
            .send((self.index, Post::Send { to, msg, reply }))
            .map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }

    fn recv(&mut self, from: Option<usize>) -> Result<(usize, Message), RoleError> {
        let (reply, answer) = channel();
        self.posts
            .send((self.index, Post::Recv { from, reply }))
            .map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

/// Picks the ready post to serve at each scheduling point.
struct Chooser {
    schedule: Schedule,
    state: u64,
    point: usize,
}

impl Chooser {
    fn new(schedule: &Schedule) -> Chooser {
        let state = match schedule {
            Schedule::Seeded(seed) => *seed,
            Schedule::Choices(_) => 0,
        };
        Chooser {
            schedule: schedule.clone(),
            state,
            point: 0,
        }
    }

    /// splitmix64: small, well mixed, and stable across versions (a run
    /// must replay from its seed forever).
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick(&mut self, ready: usize) -> usize {
        let choice = match &self.schedule {
            Schedule::Seeded(_) => (self.next_u64() % ready as u64) as usize,
            Schedule::Choices(c) => c.get(self.point).map_or(0, |&x| x as usize % ready),
        };
        self.point += 1;
        choice
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".into()
    }
}

/// Runs the role's closure, catching a panic as an outcome.
pub(crate) fn play(body: &RoleBody, ctx: &mut RoleCtx) -> RoleOutcome {
    match catch_unwind(AssertUnwindSafe(|| body(ctx))) {
        Ok(Ok(v)) => RoleOutcome::Ok(v),
        Ok(Err(e)) => super::model::failed(e, &ctx.driver.state),
        // The run already recorded the crash; this outcome is not reported.
        Err(p) if p.is::<Crashed>() => RoleOutcome::Lost(CRASHED_AT.into()),
        Err(p) => RoleOutcome::Panicked(panic_message(p.as_ref())),
    }
}

pub(crate) fn run(
    set: &RoleSet,
    opts: &RunOptions,
    backend: &str,
    mut procs: impl Procs,
) -> RunReport {
    let names = set.names();
    let n = names.len();
    let (posts, inbox) = channel::<(usize, Post)>();
    let mut outcomes: Vec<Option<RoleOutcome>> = vec![None; n];
    let mut states = vec![ProcessState::default(); n];
    let mut done = vec![false; n];
    let mut events = Vec::new();

    for (i, decl) in set.roles.iter().enumerate() {
        let faults = opts
            .faults
            .iter()
            .filter(|f| f.role == names[i])
            .cloned()
            .collect();
        let gate = SimGate {
            index: i,
            posts: posts.clone(),
        };
        let mut ctx = RoleCtx {
            name: names[i].clone(),
            names: names.clone(),
            driver: RoleDriver::new(
                set.dialect,
                Box::new(gate),
                faults,
                opts.crash_of(&names[i]),
            ),
            link: Box::new(SimLink {
                index: i,
                posts: posts.clone(),
            }),
        };
        let body = decl.body.clone();
        let done_posts = posts.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("role-{}", names[i]))
            .spawn(move || {
                let outcome = play(&body, &mut ctx);
                let state = Box::new(std::mem::take(&mut ctx.driver.state));
                let _ = done_posts.send((i, Post::Done { outcome, state }));
            });
        if let Err(e) = spawned {
            outcomes[i] = Some(RoleOutcome::Lost(format!(
                "could not start its thread: {e}"
            )));
            done[i] = true;
        }
    }
    drop(posts);

    let deadline = Instant::now() + opts.timeout;
    let mut pending: Vec<Option<Post>> = (0..n).map(|_| None).collect();
    let mut queues: Vec<VecDeque<(usize, Message)>> = (0..n).map(|_| VecDeque::new()).collect();
    let mut chooser = Chooser::new(&opts.schedule);
    let mut step = 0usize;

    'run: loop {
        // Wait until every running role stands at a scheduling point.
        while let Some(waiting) = (0..n).find(|&i| !done[i] && pending[i].is_none()) {
            match inbox.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                // A crashed role's thread still ends: nothing it posts counts.
                Ok((i, _)) if done[i] => {}
                Ok((i, post)) => pending[i] = Some(post),
                Err(RecvTimeoutError::Timeout) => {
                    events.push(format!(
                        "timeout after {:?}: '{}' never reached its next call, message or end",
                        opts.timeout, names[waiting]
                    ));
                    break 'run;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    events.push(format!("'{}' stopped without reporting", names[waiting]));
                    break 'run;
                }
            }
        }
        if done.iter().all(|&d| d) {
            break;
        }
        let has_message =
            |i: usize, from: &Option<usize>, queues: &[VecDeque<(usize, Message)>]| {
                queues[i].iter().any(|(f, _)| from.is_none_or(|x| x == *f))
            };
        let ready: Vec<usize> = (0..n)
            .filter(|&i| match &pending[i] {
                // A receive is ready when a message waits, or when the
                // sender it names has ended (it then fails).
                Some(Post::Recv { from, .. }) => {
                    has_message(i, from, &queues) || from.is_some_and(|f| done[f])
                }
                Some(_) => true,
                None => false,
            })
            .collect();
        if ready.is_empty() {
            // Every running role waits to receive and nothing is in flight.
            let stuck: Vec<&str> = (0..n)
                .filter(|&i| !done[i])
                .map(|i| names[i].as_str())
                .collect();
            events.push(format!("deadlock: {stuck:?} all wait to receive"));
            for (i, slot) in pending.iter_mut().enumerate() {
                if let Some(Post::Recv { reply, .. }) = slot.take() {
                    let _ = reply.send(Err(fail(format!(
                        "deadlock: '{}' waits to receive, as does every other running role ({stuck:?})",
                        names[i]
                    ))));
                }
            }
            continue;
        }
        let i = ready[chooser.pick(ready.len())];
        let Some(post) = pending[i].take() else {
            continue;
        };
        step += 1;
        procs.begin_step(step);
        match post {
            Post::Call { kind, call, reply } => {
                let driver = procs.driver(i);
                match catch_unwind(AssertUnwindSafe(|| call(driver))) {
                    Ok(answer) => {
                        // ledger: the line says who called and what it returned.
                        let what = super::ledger::line_of(answer.as_ref())
                            .map_or_else(|| format!("{kind:?}"), str::to_string);
                        events.push(format!("{step}: {} {what}", names[i]));
                        let _ = reply.send(answer);
                    }
                    Err(p) => events.push(format!(
                        "{step}: {} {kind:?}: the driver panicked: {}",
                        names[i],
                        panic_message(p.as_ref())
                    )),
                }
            }
            Post::Send { to, msg, reply } => {
                if done[to] {
                    events.push(format!(
                        "{step}: {} -> {}: refused, ended",
                        names[i], names[to]
                    ));
                    let _ = reply.send(Err(fail(format!(
                        "'{}' sent to '{}', which has already ended",
                        names[i], names[to]
                    ))));
                } else {
                    events.push(format!(
                        "{step}: {} -> {} ({} bytes, {} fds)",
                        names[i],
                        names[to],
                        msg.bytes.len(),
                        msg.fds.len()
                    ));
                    queues[to].push_back((i, msg));
                    let _ = reply.send(Ok(()));
                }
            }
            Post::Recv { from, reply } => {
                let at = queues[i]
                    .iter()
                    .position(|(f, _)| from.is_none_or(|x| x == *f));
                match at.and_then(|at| queues[i].remove(at)) {
                    Some((f, msg)) => {
                        events.push(format!("{step}: {} <- {}", names[i], names[f]));
                        let _ = reply.send(Ok((f, msg)));
                    }
                    None => {
                        let peer = from.map_or("?", |f| names[f].as_str());
                        events.push(format!("{step}: {} <- {peer}: ended", names[i]));
                        let _ = reply.send(Err(fail(format!(
                            "'{}' waits for '{peer}', which has ended and sent nothing more",
                            names[i]
                        ))));
                    }
                }
            }
            Post::Crash {
                crash,
                state,
                reply,
            } => {
                let text = crash.outcome_text();
                events.push(format!("{step}: {} {text}", names[i]));
                done[i] = true;
                procs.crash(i);
                outcomes[i] = Some(RoleOutcome::Lost(text));
                states[i] = *state;
                let _ = reply.send(());
            }
            Post::Done { outcome, state } => {
                events.push(format!("{step}: {} ends: {outcome:?}", names[i]));
                done[i] = true;
                procs.exit(i);
                outcomes[i] = Some(outcome);
                states[i] = *state;
            }
        }
    }
    // Roles still blocked get their replies dropped, so their calls fail.
    drop(pending);
    let hazards = procs.hazards();
    procs.shutdown();

    let mut report_outcomes = BTreeMap::new();
    let mut final_state = BTreeMap::new();
    for (i, name) in names.iter().enumerate() {
        let outcome = outcomes[i]
            .take()
            .unwrap_or_else(|| RoleOutcome::Lost("the run stopped before this role ended".into()));
        report_outcomes.insert(name.clone(), outcome);
        final_state.insert(name.clone(), std::mem::take(&mut states[i]));
    }
    RunReport {
        backend: backend.to_string(),
        seed: opts.seed,
        schedule: opts.schedule.clone(),
        faults: opts.faults.clone(),
        crashes: opts.crashes.clone(),
        outcomes: report_outcomes,
        hazards,
        final_state,
        roles: names,
        events,
    }
}
