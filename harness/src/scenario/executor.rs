//! Runs a parsed scenario on a machine and judges it.

use super::ast::{ExpectList, Expectation, HazardCheck, Op, Ref, Step, NULL_CONTEXT, NULL_EVENT};
use super::expect::{
    bytes_summary, check_result, describe, failure, Bindings, Bound, Label, Observed, Value,
};
use super::model::{ExecOptions, Execution, Scenario};
use super::parser::{LIST_SUFFIX, MAX_WRITE_BYTES};
use crate::calls::{Call, Returned};
use crate::driver::{
    DevicePtr, DriverError, EventId, Fd, IpcEventHandle, IpcMemHandle, PoolId, PoolPtrExport,
    ProcessLoss, StreamId, VmmHandle, IPC_HANDLE_SIZE,
};
use crate::driver::{PointerAttribute, PointerAttributeValue};
use crate::machine::{Backend, Hazard, Machine, MachineSpec, StartError};
use crate::trace::{
    CheckResult, Status, StepOutcome, StepRecord, Timing, Trace, ValueSummary, Verdict,
};
// Keys are names and driver values chosen by the scenario: no need for
// SipHash's flood resistance.
use rustc_hash::FxHashMap as HashMap;
use std::borrow::Cow;
use std::time::Instant;

/// One step of splitmix64.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The bytes `handle_random` produces at step `index` of a run seeded with `seed`.
pub fn random_handle(seed: u64, index: usize) -> IpcMemHandle {
    let mut state = seed
        ^ (index as u64)
            .wrapping_add(1)
            .wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut bytes = [0u8; IPC_HANDLE_SIZE];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
    }
    IpcMemHandle(bytes)
}

/// First-seen label numbers for one kind of value in one scope: `n` of
/// `PREFIXn`, numbered by every label ever issued in the scope, so a
/// retired label is never given out again.
struct Namer<K> {
    live: HashMap<K, u64>,
    /// Values whose object was destroyed, with the number they had.
    retired: HashMap<K, u64>,
    issued: u64,
}

impl<K> Default for Namer<K> {
    fn default() -> Self {
        Namer {
            live: HashMap::default(),
            retired: HashMap::default(),
            issued: 0,
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Namer<K> {
    /// The number of `key` as a call that makes (or retains) an object
    /// returned it: its old one while it is live, else a fresh one. A
    /// retired value coming back from such a call is a new object at a
    /// reused address. `room`: how many values the running step may still
    /// label, this one included (a `repeat 1000` step's first value makes
    /// room for all, so the map is not regrown as they come).
    fn label(&mut self, key: K, room: usize) -> u64 {
        if room > 1 {
            self.live.reserve(room);
        }
        if !self.retired.is_empty() && !self.live.contains_key(&key) {
            self.retired.remove(&key);
        }
        // One hash of the key: a live key keeps its number, below `fresh`.
        let fresh = self.issued + 1;
        let n = *self.live.entry(key).or_insert(fresh);
        if n == fresh {
            self.issued = fresh;
        }
        n
    }

    /// The number of `key` as a query returned it (`ctx_current`): a live
    /// object's, or the destroyed object's it still names.
    fn recall(&mut self, key: K, room: usize) -> u64 {
        match self.retired.get(&key) {
            Some(&n) if !self.live.contains_key(&key) => n,
            _ => self.label(key, room),
        }
    }

    /// The object `key` names is gone: a new object with an equal value
    /// gets a fresh label.
    fn retire(&mut self, key: &K) {
        if let Some(n) = self.live.remove(key) {
            self.retired.insert(key.clone(), n);
        }
    }

    fn retire_all(&mut self) {
        self.retired.extend(self.live.drain());
    }

    /// Forget every label, keeping the maps' room for the next run (a map
    /// grown past `MAX_KEPT_ROOM` by a long `repeat` is given back instead).
    fn clear(&mut self) {
        for map in [&mut self.live, &mut self.retired] {
            if map.capacity() > MAX_KEPT_ROOM {
                *map = HashMap::default();
            } else {
                map.clear();
            }
        }
        self.issued = 0;
    }
}

/// The most labels a [`Namer`] map kept for the next run may hold.
const MAX_KEPT_ROOM: usize = 512;

/// Labels for pointers, contexts and handles: first-seen order, never addresses.
///
/// A label names one object. Opaque driver objects (contexts, VMM
/// allocation handles, events) are addresses of driver heap objects: once a
/// step destroys or releases one (`ctx_destroy`, `vmm_release`,
/// `event_destroy`, each when it succeeds) or its process exits, its label
/// is retired, and a call that makes an object (`ctx_create`,
/// `primary_ctx`, `event_create`, `ipc_open_event`, `vmm_create`,
/// `vmm_import`) and returns the same address (the driver's heap reused it:
/// allocator noise, not IPC semantics) gives that object a fresh label; a
/// query (`ctx_current`) returning it still names the destroyed object.
/// Pointers and VAs keep their labels (address reuse after free or close is
/// measured semantics), and so do memory and event handles (labelled by
/// their bytes) and descriptors (POSIX numbering, which the simulator models).
struct Labels {
    /// Per process, by process index.
    processes: Vec<ProcessLabels>,
    handles: Namer<[u8; IPC_HANDLE_SIZE]>,
    event_handles: Namer<[u8; IPC_HANDLE_SIZE]>,
    /// Pool pointer export data, by bytes (`px1`).
    pool_exports: Namer<[u8; IPC_HANDLE_SIZE]>,
}

/// The labels one process gives (`owner.p1`, `peer.f2`), in one value per
/// process: a run makes and drops them all at once.
#[derive(Default)]
struct ProcessLabels {
    ptrs: Namer<u64>,
    ctxs: Namer<u64>,
    vmm_handles: Namer<u64>,
    fds: Namer<i32>,
    events: Namer<u64>,
    /// Memory pools, retired when destroyed (`PROC.l1`).
    pools: Namer<u64>,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`s (`owner.b1`).
    buffer_ids: Namer<u64>,
    streams: Namer<u64>,
}

/// The label numbered `number` in `scope` (a process name, or empty).
fn issued<'s>(scope: &'s str, prefix: &'static str, number: u64) -> Label<'s> {
    Label::Issued {
        scope,
        prefix,
        number,
    }
}

impl ProcessLabels {
    fn clear(&mut self) {
        // Destructured, so a new namer cannot be left out.
        let ProcessLabels {
            ptrs,
            ctxs,
            vmm_handles,
            fds,
            events,
            pools,
            buffer_ids,
            streams,
        } = self;
        ptrs.clear();
        ctxs.clear();
        vmm_handles.clear();
        fds.clear();
        events.clear();
        pools.clear();
        buffer_ids.clear();
        streams.clear();
    }
}

thread_local! {
    /// The labels of this thread's last run, cleared, so that the next run
    /// reuses their maps rather than allocating and growing new ones.
    static SPARE_LABELS: std::cell::Cell<Option<Box<Labels>>> =
        const { std::cell::Cell::new(None) };
}

impl Labels {
    fn new(processes: usize) -> Labels {
        Labels {
            processes: (0..processes).map(|_| ProcessLabels::default()).collect(),
            handles: Namer::default(),
            event_handles: Namer::default(),
            pool_exports: Namer::default(),
        }
    }

    /// Fresh labels for `processes` processes: [`Labels::new`]'s, in the
    /// maps this thread's last run gave back ([`Labels::give_back`]).
    fn take(processes: usize) -> Box<Labels> {
        match SPARE_LABELS.take() {
            Some(mut l) => {
                // Processes past `processes` are cleared and go unused.
                if l.processes.len() < processes {
                    l.processes.resize_with(processes, ProcessLabels::default);
                }
                l
            }
            None => Box::new(Labels::new(processes)),
        }
    }

    /// Clear the labels and keep them for this thread's next run.
    fn give_back(mut self: Box<Labels>) {
        let Labels {
            processes,
            handles,
            event_handles,
            pool_exports,
        } = &mut *self;
        processes.iter_mut().for_each(ProcessLabels::clear);
        handles.clear();
        event_handles.clear();
        pool_exports.clear();
        SPARE_LABELS.set(Some(self));
    }

    fn ptr<'s>(&mut self, proc: usize, name: &'s str, p: DevicePtr, room: usize) -> Label<'s> {
        if p == DevicePtr::NULL {
            return Label::Null;
        }
        issued(name, "p", self.processes[proc].ptrs.label(p.0, room))
    }

    /// `query`: the context came from `ctx_current` (see [`Namer::recall`]).
    fn ctx<'s>(
        &mut self,
        proc: usize,
        name: &'s str,
        c: Option<u64>,
        query: bool,
        room: usize,
    ) -> Label<'s> {
        let Some(c) = c else {
            return Label::Null;
        };
        let number = if query {
            self.processes[proc].ctxs.recall(c, room)
        } else {
            self.processes[proc].ctxs.label(c, room)
        };
        issued(name, "c", number)
    }

    fn event<'s>(&mut self, proc: usize, name: &'s str, e: EventId, room: usize) -> Label<'s> {
        issued(name, "e", self.processes[proc].events.label(e.0, room))
    }

    /// After step `op` of process `proc` succeeded: retire the labels of the
    /// opaque driver objects it destroyed (see [`Labels`]). `destroyed`
    /// gives the bound value the step named (looked up only for an op that
    /// destroys).
    fn retire_after<'v>(
        &mut self,
        proc: usize,
        op: &Op,
        destroyed: impl FnOnce() -> Option<&'v Value>,
    ) {
        let destroyed = match op {
            Op::CtxDestroy { .. }
            | Op::VmmRelease { .. }
            | Op::EventDestroy { .. }
            | Op::PoolDestroy { .. }
            | Op::StreamDestroy { .. } => destroyed(),
            _ => None,
        };
        match (op, destroyed) {
            (Op::CtxDestroy { .. }, Some(Value::Ctx(Some(c)))) => {
                self.processes[proc].ctxs.retire(&c.0)
            }
            (Op::VmmRelease { .. }, Some(Value::VmmHandle(h))) => {
                self.processes[proc].vmm_handles.retire(&h.0);
            }
            (Op::EventDestroy { .. }, Some(Value::Event(e))) => {
                self.processes[proc].events.retire(&e.0)
            }
            (Op::PoolDestroy { .. }, Some(Value::Pool(p))) => {
                self.processes[proc].pools.retire(&p.0)
            }
            (Op::StreamDestroy { .. }, Some(Value::Stream(s))) => {
                self.processes[proc].streams.retire(&s.0)
            }
            (Op::Exit, _) => {
                let p = &mut self.processes[proc];
                p.pools.retire_all();
                p.ctxs.retire_all();
                p.vmm_handles.retire_all();
                p.events.retire_all();
                p.streams.retire_all();
            }
            _ => {}
        }
    }

    /// The label of `v` as seen by process `proc` (named `name`), if its
    /// kind has labels; a value seen for the first time gets a fresh one.
    /// `room`: see [`Namer::label`].
    fn label<'s>(
        &mut self,
        proc: usize,
        name: &'s str,
        op: &Op,
        v: &Value,
        room: usize,
    ) -> Option<Label<'s>> {
        let own = &mut self.processes[proc];
        Some(match v {
            Value::Unit | Value::Int(_) | Value::Bytes(_) | Value::Info(_) => return None,
            Value::Ptr(p) | Value::Range(p, _) => self.ptr(proc, name, *p, room),
            Value::Ctx(c) => {
                let query = matches!(op, Op::CtxCurrent);
                self.ctx(proc, name, c.map(|c| c.0), query, room)
            }
            Value::Handle(h) => issued("", "h", self.handles.label(h.0, room)),
            Value::Event(e) => self.event(proc, name, *e, room),
            Value::Stream(s) => issued(name, "s", own.streams.label(s.0, room)),
            Value::EventHandle(h) => issued("", "eh", self.event_handles.label(h.0, room)),
            Value::VmmHandle(h) => issued(name, "m", own.vmm_handles.label(h.0, room)),
            Value::BufferId(b) => issued(name, "b", own.buffer_ids.label(*b, room)),
            Value::Fd(f) => issued(name, "f", own.fds.label(f.0, room)),
            Value::Pool(pool) => issued(name, "l", own.pools.label(pool.0, room)),
            Value::PoolExport(x) => issued("", "px", self.pool_exports.label(x.0, room)),
        })
    }
}

/// The trace's summary of `v`, whose label [`Labels::label`] gave.
fn summary(v: &Value, label: Option<Label<'_>>) -> ValueSummary {
    let label = || label.map_or_else(String::new, Label::text);
    match v {
        Value::Unit => ValueSummary::Unit,
        Value::Ptr(_) => ValueSummary::Ptr { label: label() },
        Value::Ctx(_) => ValueSummary::Context { label: label() },
        Value::Handle(_) | Value::EventHandle(_) | Value::BufferId(_) | Value::PoolExport(_) => {
            ValueSummary::Handle { label: label() }
        }
        Value::Event(_) => ValueSummary::Event { label: label() },
        Value::Stream(_) => ValueSummary::Stream { label: label() },
        Value::Int(i) => ValueSummary::Int { value: *i },
        Value::Bytes(b) => bytes_summary(b),
        Value::Range(_, size) => ValueSummary::Range {
            base: label(),
            size: *size,
        },
        Value::Info(i) => ValueSummary::PointerInfo {
            memory_type: i.memory_type.name().to_string(),
            device: i.device,
        },
        Value::VmmHandle(_) => ValueSummary::VmmHandle { label: label() },
        Value::Fd(_) => ValueSummary::Fd { label: label() },
        Value::Pool(_) => ValueSummary::Pool { label: label() },
    }
}

/// The scenario value of what a driver call returned. Elapsed milliseconds
/// differ run to run, so traces keep only the outcome; a granularity too big
/// for an int saturates.
#[inline(always)]
fn value_of(returned: Returned) -> Value {
    match returned {
        Returned::Unit | Returned::ElapsedMs(_) => Value::Unit,
        Returned::Count(n) => Value::Int(i64::from(n)),
        Returned::Int(n) => Value::Int(n),
        Returned::Size(n) => Value::Int(i64::try_from(n).unwrap_or(i64::MAX)),
        Returned::Context(c) => Value::Ctx(Some(c)),
        Returned::CurrentContext(c) => Value::Ctx(c),
        Returned::Ptr(p) => Value::Ptr(p),
        Returned::Bytes(b) => Value::Bytes(b),
        Returned::Range(base, size) => Value::Range(base, size),
        Returned::PointerInfo(i) => Value::Info(i),
        Returned::IpcMemHandle(h) => Value::Handle(h),
        Returned::VmmHandle(h) => Value::VmmHandle(h),
        Returned::Fd(f) => Value::Fd(f),
        Returned::Event(e) => Value::Event(e),
        Returned::IpcEventHandle(h) => Value::EventHandle(h),
        Returned::Pool(p) => Value::Pool(p),
        Returned::PoolPtrExport(x) => Value::PoolExport(x),
        Returned::Stream(s) => Value::Stream(s),
    }
}

/// The scenario value of a `cuPointerGetAttribute` answer: addresses are
/// pointers (labelled, compared with `==`), buffer ids are labelled ids,
/// the rest are ints.
fn pointer_attribute_value(attr: PointerAttribute, v: u64) -> Value {
    match attr.value_kind() {
        PointerAttributeValue::Address => Value::Ptr(DevicePtr(v)),
        PointerAttributeValue::BufferId => Value::BufferId(v),
        PointerAttributeValue::Number => Value::Int(i64::try_from(v).unwrap_or(i64::MAX)),
    }
}

/// The skip of a step whose argument `n` is not `what` (`a bound pointer`).
#[inline(always)]
fn not_bound<'n>(n: &'n str, what: &'static str) -> Failure<'n> {
    Failure::NotBound(n, what)
}

/// Why a step did not produce a value.
enum Failure<'n> {
    Driver(DriverError),
    Skip(String),
    /// Skipped because name `.0` is not `.1` (`a bound pointer`): the
    /// reason is written only where the trace shows it (a step that
    /// names an unbound name is skipped as never bound instead).
    NotBound(&'n str, &'static str),
}

impl Failure<'_> {
    /// The reason of a step skipped by this failure (not a driver error).
    #[cold]
    fn skip_reason(self) -> String {
        match self {
            Failure::Skip(reason) => reason,
            Failure::NotBound(n, what) => format!("'{n}' is not {what}"),
            Failure::Driver(e) => e.to_string(),
        }
    }
}

impl From<DriverError> for Failure<'_> {
    fn from(e: DriverError) -> Self {
        Failure::Driver(e)
    }
}

/// The most elements a `repeat` step's list, and the labels of the values
/// it makes, are given room for before its first iteration.
const MAX_LIST_RESERVE: usize = 1 << 16;

struct Run<'a> {
    scenario: &'a Scenario,
    opts: &'a ExecOptions,
    bindings: Bindings<'a>,
    /// List bindings (`e[]`): element `i` of a list is what iteration `i`
    /// of the `repeat` step that binds it bound, if it did.
    lists: Vec<Vec<Option<Bound<'a>>>>,
    /// Where each list name's elements are in `lists`.
    list_ids: HashMap<&'a str, usize>,
    /// The lists the running step names, looked up once for all its
    /// iterations (a `repeat 1000` step reads its lists 1000 times).
    step_lists: Vec<(&'a str, usize)>,
    /// The iteration of the `repeat` step running (0 for other steps).
    iteration: usize,
}

impl<'a> Run<'a> {
    /// Look up the lists `step` uses or binds, for [`Run::bound`] and
    /// [`Run::bind`] during its iterations (a step that does not repeat
    /// finds them when it names them).
    fn enter_step(&mut self, step: &'a Step) {
        self.step_lists.clear();
        if step.repeat.is_none() {
            return;
        }
        let names = step.op.used().into_iter().chain([step.bind.as_deref()]);
        for name in names.flatten().filter(|n| n.ends_with(LIST_SUFFIX)) {
            let id = self.list_made(name);
            self.step_lists.push((name, id));
        }
        // Room for the elements the step binds, so the list is not regrown
        // (and its elements moved) as it fills; up to a bound, as a step
        // may stop long before a huge count.
        if let (Some(n), Some(name)) = (step.repeat, step.bind.as_deref()) {
            if let Some(id) = self.list_id(name) {
                let list = &mut self.lists[id];
                let wanted = (n as usize).min(MAX_LIST_RESERVE);
                list.reserve(wanted.saturating_sub(list.len()));
            }
        }
    }

    /// Where list `name`'s elements are, made empty if no step named it yet.
    fn list_made(&mut self, name: &'a str) -> usize {
        let next = self.list_ids.len();
        let id = *self.list_ids.entry(name).or_insert(next);
        if id == self.lists.len() {
            self.lists.push(Vec::new());
        }
        id
    }

    /// Where list `name`'s elements are: one the running step names.
    #[inline]
    fn list_id(&self, name: &str) -> Option<usize> {
        // The names come from the step itself: the same string, mostly,
        // found without comparing any text.
        let of_step = (self.step_lists.iter())
            .find(|(n, _)| std::ptr::eq(*n, name))
            .or_else(|| self.step_lists.iter().find(|(n, _)| *n == name));
        match of_step {
            Some(&(_, id)) => Some(id),
            None => self.list_ids.get(name).copied(),
        }
    }

    /// The binding `n` names; a list name (`e[]`) names the current
    /// iteration's element.
    #[inline(always)]
    fn bound(&self, n: &str) -> Option<&Bound<'a>> {
        // A list the running step names, by the very string it names it
        // with: found without hashing or comparing text.
        if let Some(&(_, id)) = (self.step_lists.iter()).find(|(s, _)| std::ptr::eq(*s, n)) {
            return self.lists[id].get(self.iteration)?.as_ref();
        }
        if n.ends_with(LIST_SUFFIX) {
            self.list_bound(n)
        } else {
            self.bindings.get(n)
        }
    }

    /// The current iteration's element of list `n`, found by its text.
    #[inline(never)]
    fn list_bound(&self, n: &str) -> Option<&Bound<'a>> {
        self.lists[self.list_id(n)?].get(self.iteration)?.as_ref()
    }

    /// Bind `name` (for a list name of the running step, the current
    /// iteration's element).
    fn bind(&mut self, name: &'a str, bound: Bound<'a>) {
        let of_step = (self.step_lists.iter()).find(|(s, _)| std::ptr::eq(*s, name));
        let id = match of_step {
            // The list a repeat step binds, by the string the step names it with.
            Some(&(_, id)) => id,
            None if !name.ends_with(LIST_SUFFIX) => {
                self.bindings.insert(name, bound);
                return;
            }
            None => match self.list_id(name) {
                Some(id) => id,
                None => self.list_made(name),
            },
        };
        let list = &mut self.lists[id];
        if list.len() == self.iteration {
            // The usual case: iterations bind their elements in order.
            list.push(Some(bound));
            return;
        }
        if list.len() < self.iteration {
            list.resize_with(self.iteration + 1, || None);
        }
        list[self.iteration] = Some(bound);
    }

    #[inline(always)]
    fn ptr<'n>(&self, r: &'n Ref) -> Result<DevicePtr, Failure<'n>> {
        match r {
            Ref::Null => Ok(DevicePtr::NULL),
            Ref::Name(n) => match self.bound(n).map(|b| &b.value) {
                Some(Value::Ptr(p)) => Ok(*p),
                _ => Err(not_bound(n, "a bound pointer")),
            },
        }
    }

    #[inline]
    fn handle<'n>(&self, n: &'n str) -> Result<IpcMemHandle, Failure<'n>> {
        match self.bound(n).map(|b| &b.value) {
            Some(Value::Handle(h)) => Ok(*h),
            _ => Err(not_bound(n, "a bound handle")),
        }
    }

    fn vmm_handle<'n>(&self, n: &'n str) -> Result<VmmHandle, Failure<'n>> {
        match self.bound(n).map(|b| &b.value) {
            Some(Value::VmmHandle(h)) => Ok(*h),
            _ => Err(not_bound(n, "a bound VMM handle")),
        }
    }

    fn fd<'n>(&self, n: &'n str) -> Result<Fd, Failure<'n>> {
        match self.bound(n).map(|b| &b.value) {
            Some(Value::Fd(f)) => Ok(*f),
            _ => Err(not_bound(n, "a bound descriptor")),
        }
    }

    #[inline]
    fn event<'n>(&self, n: &'n str) -> Result<EventId, Failure<'n>> {
        if n == NULL_EVENT {
            return Ok(EventId::NULL);
        }
        match self.bound(n).map(|b| &b.value) {
            Some(Value::Event(e)) => Ok(*e),
            _ => Err(not_bound(n, "a bound event")),
        }
    }

    /// A stream argument: a bound stream, or none for the legacy default stream.
    fn stream<'n>(&self, n: Option<&'n String>) -> Result<StreamId, Failure<'n>> {
        let Some(n) = n else {
            return Ok(StreamId::LEGACY_DEFAULT);
        };
        if n == super::ast::PER_THREAD_STREAM {
            return Ok(StreamId::PER_THREAD);
        }
        match self.bindings.get(n.as_str()).map(|b| &b.value) {
            Some(Value::Stream(s)) => Ok(*s),
            _ => Err(not_bound(n, "a bound stream")),
        }
    }

    #[inline]
    fn event_handle<'n>(&self, n: &'n str) -> Result<IpcEventHandle, Failure<'n>> {
        match self.bound(n).map(|b| &b.value) {
            Some(Value::EventHandle(h)) => Ok(*h),
            _ => Err(not_bound(n, "a bound event handle")),
        }
    }

    fn pool<'n>(&self, n: &'n str) -> Result<PoolId, Failure<'n>> {
        match self.bindings.get(n).map(|b| &b.value) {
            Some(Value::Pool(p)) => Ok(*p),
            _ => Err(not_bound(n, "a bound memory pool")),
        }
    }

    fn pool_export<'n>(&self, n: &'n str) -> Result<PoolPtrExport, Failure<'n>> {
        match self.bindings.get(n).map(|b| &b.value) {
            Some(Value::PoolExport(x)) => Ok(*x),
            _ => Err(Failure::Skip(format!(
                "'{n}' is not bound pool pointer export data"
            ))),
        }
    }

    fn ctx<'n>(&self, n: &'n str) -> Result<crate::driver::ContextId, Failure<'n>> {
        match self.bound(n).map(|b| &b.value) {
            Some(Value::Ctx(Some(c))) => Ok(*c),
            Some(Value::Ctx(None)) => Err(Failure::Skip(format!(
                "context '{n}' is null (no context was current)"
            ))),
            _ => Err(not_bound(n, "a bound context")),
        }
    }

    /// Perform one step: a driver call, a machine call, or harness-local work.
    fn perform<'n>(
        &self,
        machine: &mut dyn Machine,
        index: usize,
        step: &'n Step,
    ) -> Result<Value, Failure<'n>> {
        let proc = step.process;
        let v = match &step.op {
            // Harness-local ops: no driver call.
            Op::Offset { ptr, bytes } => Value::Ptr(self.ptr(ptr)?.offset(*bytes)),
            Op::HandleZero => Value::Handle(IpcMemHandle::ZERO),
            Op::HandleRandom => Value::Handle(random_handle(self.opts.seed, index)),
            Op::HandleFlip { handle, offset } => {
                let mut h = self.handle(handle)?;
                h.0[usize::from(*offset) % IPC_HANDLE_SIZE] ^= 0xff;
                Value::Handle(h)
            }
            Op::Send { handle, .. } => {
                match self.bound(handle).map(|b| &b.value) {
                    Some(Value::Handle(_) | Value::EventHandle(_) | Value::PoolExport(_)) => {}
                    _ => return Err(not_bound(handle, "a bound handle")),
                }
                Value::Unit
            }
            Op::EventHandleZero => Value::EventHandle(IpcEventHandle::ZERO),
            Op::EventHandleRandom => {
                Value::EventHandle(IpcEventHandle(random_handle(self.opts.seed, index).0))
            }
            Op::FdNumber { number } => Value::Fd(Fd(*number)),
            // Machine calls.
            Op::Exit => {
                machine.exit(proc)?;
                Value::Unit
            }
            Op::SendFd { fd, to, .. } => {
                let f = self.fd(fd)?;
                Value::Fd(machine.transfer_fd(proc, f, *to)?)
            }
            // The harness hands the importer the owner's pid as it sees it
            // (vmm.pidfd.*): across PID namespaces that pid may name nothing.
            Op::PidfdGetfd { owner, fd, .. } => {
                let f = self.fd(fd)?;
                let pid = machine.process_pid(*owner)?;
                let call = Call::PidfdGetfd { pid, fd: f };
                value_of(call.call_on(machine.driver(proc))?)
            }
            op => match self.driver_call(op)? {
                Some(call) => {
                    let returned = call.call_on(machine.driver(proc))?;
                    match (op, returned) {
                        (Op::PointerAttribute { attr, .. }, Returned::Size(v)) => {
                            pointer_attribute_value(*attr, v)
                        }
                        (Op::PoolGetAccess { .. }, Returned::Size(v)) => {
                            Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
                        }
                        (_, returned) => value_of(returned),
                    }
                }
                None => {
                    return Err(Failure::Skip(format!(
                        "'{}' is neither a driver call nor run by the harness",
                        op.keyword()
                    )))
                }
            },
        };
        Ok(v)
    }

    /// The driver call `op` makes, with its bindings resolved; `None` for a
    /// harness-local op or a machine call.
    fn driver_call<'n>(&self, op: &'n Op) -> Result<Option<Call>, Failure<'n>> {
        let call = match op {
            Op::DeviceCount => Call::DeviceCount,
            Op::Attr { device, attr } => Call::DeviceAttribute {
                device: *device,
                attr: *attr,
            },
            Op::CanAccessPeer { device, peer } => Call::CanAccessPeer {
                device: *device,
                peer: *peer,
            },
            Op::EnablePeer { peer } => Call::EnablePeerAccess { peer: *peer },
            Op::SetDevice { device } => Call::SetDevice { device: *device },
            Op::PrimaryCtx { device } => Call::PrimaryContext { device: *device },
            Op::CtxCreate { device } => Call::CreateContext { device: *device },
            Op::CtxSet { ctx } if ctx == NULL_CONTEXT => Call::SetCurrentContext {
                ctx: crate::driver::ContextId(0),
            },
            Op::CtxSet { ctx } => Call::SetCurrentContext {
                ctx: self.ctx(ctx)?,
            },
            Op::CtxCurrent => Call::CurrentContext,
            Op::CtxDestroy { ctx } => Call::DestroyContext {
                ctx: self.ctx(ctx)?,
            },
            Op::Malloc { kind, size } => Call::Alloc {
                kind: *kind,
                size: *size,
            },
            Op::Free { kind, ptr } => Call::Free {
                kind: *kind,
                ptr: self.ptr(ptr)?,
            },
            Op::Fill {
                ptr,
                value,
                at,
                resolved_len,
                ..
            } => Call::Memset {
                ptr: self.ptr(ptr)?.offset(at.unwrap_or(0)),
                value: *value,
                len: *resolved_len,
            },
            Op::Write {
                ptr,
                offset,
                pattern,
            } => {
                let p = self.ptr(ptr)?.offset(*offset);
                if pattern.len() > MAX_WRITE_BYTES {
                    return Err(Failure::Skip(format!(
                        "pattern of {} bytes is longer than 64MiB",
                        pattern.len()
                    )));
                }
                Call::Write {
                    ptr: p,
                    bytes: pattern.to_bytes(),
                }
            }
            Op::Read { ptr, offset, len } => Call::Read {
                ptr: self.ptr(ptr)?.offset(*offset),
                len: *len,
            },
            Op::DeviceRead { ptr, offset, len } => Call::DeviceRead {
                ptr: self.ptr(ptr)?.offset(*offset),
                len: *len,
            },
            Op::AddressRange { ptr } => Call::AddressRange {
                ptr: self.ptr(ptr)?,
            },
            Op::ForkChildAlloc { size } => Call::ForkChildAlloc { size: *size },
            Op::PointerAttribute { ptr, attr } => Call::PointerAttribute {
                ptr: self.ptr(ptr)?,
                attr: *attr,
            },
            Op::PointerAttr { ptr } => Call::PointerInfo {
                ptr: self.ptr(ptr)?,
            },
            Op::IpcGet { ptr, out } => Call::IpcGetMemHandle {
                ptr: self.ptr(ptr)?,
                out: *out,
            },
            Op::IpcOpen { handle, flags, out } => Call::IpcOpenMemHandle {
                handle: self.handle(handle)?,
                flags: *flags,
                out: *out,
            },
            Op::IpcClose { ptr } => Call::IpcCloseMemHandle {
                ptr: self.ptr(ptr)?,
            },
            Op::Sync => Call::Synchronize,
            Op::EventCreate { flags } => Call::EventCreate { flags: *flags },
            Op::EventRecord {
                event,
                stream: None,
            } => Call::EventRecord {
                event: self.event(event)?,
            },
            Op::EventRecord {
                event,
                stream: stream @ Some(_),
            } => Call::EventRecordOn {
                event: self.event(event)?,
                stream: self.stream(stream.as_ref())?,
            },
            Op::EventQuery { event } => Call::EventQuery {
                event: self.event(event)?,
            },
            Op::EventSync { event } => Call::EventSynchronize {
                event: self.event(event)?,
            },
            Op::StreamWait {
                event,
                stream: None,
            } => Call::StreamWaitEvent {
                event: self.event(event)?,
            },
            Op::StreamWait {
                event,
                stream: stream @ Some(_),
            } => Call::StreamWaitEventOn {
                stream: self.stream(stream.as_ref())?,
                event: self.event(event)?,
            },
            Op::EventElapsed { start, end } => Call::EventElapsed {
                start: self.event(start)?,
                end: self.event(end)?,
            },
            Op::EventDestroy { event } => Call::EventDestroy {
                event: self.event(event)?,
            },
            Op::IpcGetEvent { event, out } => Call::IpcGetEventHandle {
                event: self.event(event)?,
                out: *out,
            },
            Op::IpcOpenEvent { handle, out } => Call::IpcOpenEventHandle {
                handle: self.event_handle(handle)?,
                out: *out,
            },
            Op::SlowFill {
                ptr,
                value,
                micros,
                at,
                resolved_len,
                stream: None,
                ..
            } => Call::SlowFill {
                ptr: self.ptr(ptr)?.offset(at.unwrap_or(0)),
                value: *value,
                len: *resolved_len,
                micros: *micros,
            },
            Op::SlowFill {
                ptr,
                value,
                micros,
                at,
                resolved_len,
                stream: stream @ Some(_),
                ..
            } => Call::SlowFillOn {
                ptr: self.ptr(ptr)?.offset(at.unwrap_or(0)),
                value: *value,
                len: *resolved_len,
                micros: *micros,
                stream: self.stream(stream.as_ref())?,
            },
            Op::StreamCreate { flags } => Call::StreamCreate { flags: *flags },
            Op::StreamDestroy { stream } => Call::StreamDestroy {
                stream: self.stream(Some(stream))?,
            },
            Op::StreamSync { stream } => Call::StreamSynchronize {
                stream: self.stream(Some(stream))?,
            },
            Op::StreamQuery { stream } => Call::StreamQuery {
                stream: self.stream(Some(stream))?,
            },
            Op::Copy {
                dst,
                src,
                len,
                stream,
            } => Call::CopyDevice {
                dst: self.ptr(dst)?,
                src: self.ptr(src)?,
                len: *len,
                stream: self.stream(stream.as_ref())?,
            },
            Op::CopyPeer {
                dst,
                dst_device,
                src,
                src_device,
                len,
            } => Call::CopyPeer {
                dst: self.ptr(dst)?,
                dst_device: *dst_device,
                src: self.ptr(src)?,
                src_device: *src_device,
                len: *len,
            },
            Op::KernelPattern {
                ptr,
                content,
                at,
                resolved_len,
                ..
            } => {
                let (pattern, width, step) = content.call_args();
                Call::KernelPattern {
                    ptr: self.ptr(ptr)?.offset(at.unwrap_or(0)),
                    len: *resolved_len,
                    pattern,
                    width,
                    step,
                }
            }
            Op::VmmGranularity {
                device,
                kind,
                types,
            } => Call::VmmGranularity {
                device: *device,
                types: *types,
                kind: *kind,
            },
            Op::VmmCreate {
                size,
                types,
                device,
            } => Call::VmmCreate {
                device: *device,
                size: *size,
                types: *types,
            },
            Op::VmmExport { handle, ty } => Call::VmmExport {
                handle: self.vmm_handle(handle)?,
                ty: *ty,
            },
            Op::VmmImport { fd } => Call::VmmImport { fd: self.fd(fd)? },
            Op::VmmReserve { size } => Call::VmmReserve { size: *size },
            Op::VmmMap {
                va,
                size,
                handle,
                offset,
            } => {
                let va = self.ptr(va)?;
                Call::VmmMap {
                    va,
                    size: *size,
                    offset: *offset,
                    handle: self.vmm_handle(handle)?,
                }
            }
            Op::VmmSetAccess {
                va,
                size,
                access,
                device,
            } => Call::VmmSetAccess {
                va: self.ptr(va)?,
                size: *size,
                device: *device,
                access: *access,
            },
            Op::VmmUnmap { va, size } => Call::VmmUnmap {
                va: self.ptr(va)?,
                size: *size,
            },
            Op::VmmAddressFree { va, size } => Call::VmmAddressFree {
                va: self.ptr(va)?,
                size: *size,
            },
            Op::VmmRelease { handle } => Call::VmmRelease {
                handle: self.vmm_handle(handle)?,
            },
            Op::FdClose { fd } => Call::FdClose { fd: self.fd(fd)? },
            Op::FdNullDevice => Call::FdOpenNullDevice,
            Op::PoolCreate { types, device } => Call::PoolCreate {
                device: *device,
                types: *types,
            },
            Op::PoolDefault { device } => Call::PoolDefault { device: *device },
            Op::PoolDestroy { pool } => Call::PoolDestroy {
                pool: self.pool(pool)?,
            },
            Op::PoolExport { pool } => Call::PoolExport {
                pool: self.pool(pool)?,
            },
            Op::PoolImport { fd } => Call::PoolImport { fd: self.fd(fd)? },
            Op::PoolSetAccess {
                pool,
                access,
                device,
            } => Call::PoolSetAccess {
                pool: self.pool(pool)?,
                device: *device,
                access: *access,
            },
            Op::PoolGetAccess { pool, device } => Call::PoolGetAccess {
                pool: self.pool(pool)?,
                device: *device,
            },
            Op::PoolAlloc { pool, size } => Call::PoolAlloc {
                pool: self.pool(pool)?,
                size: *size,
            },
            Op::PoolFree { ptr } => Call::PoolFree {
                ptr: self.ptr(ptr)?,
            },
            Op::PoolExportPtr { ptr } => Call::PoolExportPtr {
                ptr: self.ptr(ptr)?,
            },
            Op::PoolImportPtr { pool, data } => Call::PoolImportPtr {
                pool: self.pool(pool)?,
                data: self.pool_export(data)?,
            },
            Op::Offset { .. }
            | Op::HandleZero
            | Op::HandleRandom
            | Op::HandleFlip { .. }
            | Op::Send { .. }
            | Op::EventHandleZero
            | Op::EventHandleRandom
            | Op::FdNumber { .. }
            | Op::Exit
            | Op::SendFd { .. }
            | Op::PidfdGetfd { .. } => return Ok(None),
        };
        Ok(Some(call))
    }

    /// The reason a step cannot run because a binding it needs is missing.
    fn missing_binding(&self, step: &Step) -> Option<String> {
        step.op.used().into_iter().flatten().find_map(|n| {
            // The line of the (last) step that binds it.
            let binder = || {
                self.scenario
                    .steps
                    .iter()
                    .rev()
                    .find(|s| s.bind.as_deref() == Some(n))
                    .map(|s| s.line)
            };
            // Written piece by piece rather than formatted: skipped steps
            // are common in generated cases.
            self.bound(n).is_none().then(|| {
                let mut reason = String::with_capacity(n.len() + 64);
                reason.push('\'');
                reason.push_str(n);
                reason.push_str("' was never bound");
                if let Some(line) = binder() {
                    reason.push_str(" (the step at line ");
                    crate::trace::push_decimal(&mut reason, line as u64);
                    reason.push_str(" did not succeed)");
                }
                reason
            })
        })
    }

    fn where_(&self, line: usize) -> String {
        format!("{}:{line}", self.scenario.path.display())
    }
}

fn hazard_text(h: &Hazard, scenario: &Scenario) -> String {
    let proc = scenario
        .processes
        .get(h.process)
        .map_or("?", |p| p.name.as_str());
    match h.step.and_then(|i| scenario.steps.get(i)) {
        Some(s) => format!("{} in {proc} at line {}", h.kind.name(), s.line),
        None => format!("{} in {proc}", h.kind.name()),
    }
}

fn check_hazards(scenario: &Scenario, log: Option<&[Hazard]>) -> Vec<(usize, CheckResult)> {
    scenario
        .hazard_expectations
        .iter()
        .map(|he| {
            let expected = he.check.to_string();
            let result = match log {
                None => CheckResult {
                    passed: true,
                    expected,
                    message: "unchecked: backend has no hazard log".to_string(),
                },
                Some(log) => {
                    let logged = || {
                        if log.is_empty() {
                            "an empty hazard log".to_string()
                        } else {
                            let all: Vec<String> =
                                log.iter().map(|h| hazard_text(h, scenario)).collect();
                            format!("hazards: {}", all.join("; "))
                        }
                    };
                    let passed = match he.check {
                        HazardCheck::Hazard(k) => log.iter().any(|h| h.kind == k),
                        HazardCheck::NoHazards => log.is_empty(),
                    };
                    let message = if passed {
                        String::new()
                    } else {
                        format!("expected {expected}, got {}", logged())
                    };
                    CheckResult {
                        passed,
                        expected,
                        message,
                    }
                }
            };
            (he.line, result)
        })
        .collect()
}

/// The machine [`execute`] starts for `scenario`.
pub(crate) fn machine_spec(scenario: &Scenario, opts: &ExecOptions) -> MachineSpec {
    MachineSpec {
        devices: scenario.devices,
        processes: scenario.processes.clone(),
        dialect: opts.dialect,
        seed: opts.seed,
        step_timeout: opts.step_timeout,
        topology: scenario.topology.clone(),
        semantics: scenario.semantics.clone(),
    }
}

/// Start a machine on `backend`, run the scenario, shut the machine down.
/// `shared`: whether the machine may take reused workers (where the backend
/// shares them and the scenario's sharing allows).
pub(crate) fn execute(
    scenario: &Scenario,
    backend: &dyn Backend,
    opts: &ExecOptions,
    shared: bool,
    detail: TraceDetail,
) -> Execution {
    let spec = machine_spec(scenario, opts);
    let started = Instant::now();
    let machine = if shared && backend.shares_workers() {
        backend.start_shared(
            &spec,
            &super::sharing::sharing(scenario),
            &super::sharing::worker_fits(scenario),
        )
    } else {
        backend.start(&spec)
    };
    match machine {
        Err(StartError::NotSupported(reason)) => Execution {
            trace: Trace::default(),
            verdict: Verdict {
                status: Status::NotSupported,
                message: reason,
            },
        },
        Err(StartError::Harness(m)) => Execution {
            trace: Trace::default(),
            verdict: Verdict {
                status: Status::Broken,
                message: format!(
                    "{}: the machine did not start: {m}",
                    scenario.path.display()
                ),
            },
        },
        Ok(mut machine) => {
            let start_us = micros(started.elapsed());
            let steps = Instant::now();
            let mut e = execute_on(scenario, machine.as_mut(), opts, detail);
            let steps_us = micros(steps.elapsed());
            let shutdown = Instant::now();
            machine.shutdown();
            e.trace.timing = Timing {
                start_us,
                steps_us,
                shutdown_us: micros(shutdown.elapsed()),
            };
            e
        }
    }
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The verdict message of a run that `step` (in process `pname`) failed
/// for reason `what`: `PATH:LINE: step 'TEXT' in PROC: WHAT (seed N)`.
/// Joined, not formatted: generated cases that fail are common.
fn step_failure(path: &std::path::Path, step: &Step, pname: &str, what: &str, seed: u64) -> String {
    let path = path.to_string_lossy();
    let text = step.text();
    let mut m = String::with_capacity(path.len() + text.len() + pname.len() + what.len() + 64);
    m.push_str(&path);
    m.push(':');
    crate::trace::push_decimal(&mut m, step.line as u64);
    m.push_str(": step '");
    m.push_str(&text);
    m.push_str("' in ");
    m.push_str(pname);
    m.push_str(": ");
    m.push_str(what);
    m.push_str(" (seed ");
    crate::trace::push_decimal(&mut m, seed);
    m.push(')');
    m
}

/// The record of a step's last iteration: its outcome, and the check of
/// its expectations (`failed`: why they did not hold), which for a repeat
/// step names the iteration that failed.
#[inline(always)]
fn finish(
    outcome: StepOutcome,
    mut failed: Option<String>,
    step: &Step,
    iteration: usize,
    iterations: usize,
    full: bool,
    list: &ExpectList,
) -> (StepOutcome, CheckResult) {
    if let Some(message) = failed.as_mut().filter(|_| step.repeat.is_some()) {
        *message = format!(
            "iteration {iteration} of {iterations} ({} passed): {message}",
            iteration - 1,
        );
    }
    let expected = if full { &*list.text } else { "" };
    (outcome, check_result(expected, failed))
}

/// What the trace's step records hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TraceDetail {
    Full,
    /// The outcomes and whether their checks held (with the failure
    /// messages), without the texts and times only a kept trace shows: the
    /// step's text, process name, API name, expectation text and wall time
    /// (`execute_for_outcomes`).
    OutcomesOnly,
}

/// Run every step on `machine` (already started) and judge the run.
pub(crate) fn execute_on(
    scenario: &Scenario,
    machine: &mut dyn Machine,
    opts: &ExecOptions,
    detail: TraceDetail,
) -> Execution {
    let nproc = scenario.processes.len();
    if machine.process_count() < nproc {
        return Execution {
            trace: Trace::default(),
            verdict: Verdict {
                status: Status::Broken,
                message: format!(
                    "{}: the machine runs {} processes, the scenario declares {nproc}",
                    scenario.path.display(),
                    machine.process_count()
                ),
            },
        };
    }
    let bad_index = scenario.steps.iter().find(|s| {
        s.process >= nproc
            || matches!(s.op, Op::Send { to, .. } | Op::SendFd { to, .. } if to >= nproc)
            || matches!(s.op, Op::PidfdGetfd { owner, .. } if owner >= nproc)
    });
    if let Some(s) = bad_index {
        return Execution {
            trace: Trace::default(),
            verdict: Verdict {
                status: Status::Broken,
                message: format!(
                    "{}:{}: the step names a process the scenario does not declare",
                    scenario.path.display(),
                    s.line
                ),
            },
        };
    }
    let mut run = Run {
        scenario,
        opts,
        // Room for a binding per binding step, so the map is not regrown as
        // it fills (and not twice the room where half the steps bind).
        bindings: HashMap::with_capacity_and_hasher(
            scenario.steps.iter().filter(|s| s.bind.is_some()).count(),
            Default::default(),
        ),
        lists: Vec::new(),
        list_ids: HashMap::default(),
        step_lists: Vec::new(),
        iteration: 0,
    };
    let mut labels = Labels::take(nproc);
    // Why a process runs no more steps (crashed, timed out, harness failure).
    let mut dead: Vec<Option<String>> = vec![None; nproc];
    let mut first_failure: Option<Verdict> = None;
    let mut trace = Trace {
        steps: Vec::with_capacity(scenario.steps.len()),
        ..Trace::default()
    };
    let seed = opts.seed;

    let profiling = crate::profile::enabled();
    // Whether the records hold the texts and times only a kept trace shows.
    let full = detail == TraceDetail::Full;

    for (index, step) in scenario.steps.iter().enumerate() {
        machine.begin_step(index);
        run.enter_step(step);
        let pname = scenario.processes[step.process].name.as_str();
        let list = step.expect.in_force(opts.dialect);
        let iterations = step.repeat.map_or(1, |n| n as usize);
        // A passed descriptor is the receiver's: label it there.
        let (owner, oname) = match &step.op {
            Op::SendFd { to, .. } => (*to, scenario.processes[*to].name.as_str()),
            _ => (step.process, pname),
        };
        let call = full.then(Instant::now);
        // A repeat step runs until an iteration fails its expectation; the
        // trace keeps one record: the last iteration's outcome, and for a
        // failure its iteration and how many passed before it. Only that
        // record's outcome is built; every iteration labels its value.
        let mut iteration = 0;
        let (outcome, result) = loop {
            run.iteration = iteration;
            let skip = match (&dead[step.process], &step.op) {
                (Some(reason), _) => Some(reason.clone()),
                // A descriptor cannot reach a process that crashed or hung.
                (None, Op::SendFd { to, .. }) => dead
                    .get(*to)
                    .and_then(|r| r.as_ref())
                    .map(|r| format!("the receiver is gone: {r}")),
                (None, _) => None,
            };
            let performed = skip.is_none();
            let result = match skip {
                Some(reason) => Err(Failure::Skip(reason)),
                None if profiling => crate::profile::timed_in("step", step.op.keyword(), || {
                    run.perform(machine, index, step)
                }),
                None => run.perform(machine, index, step),
            };
            // A value is judged, labelled and bound where it lies; only the
            // record of the last iteration gets an outcome built.
            match result {
                Ok(v) => {
                    let room = (iterations - run.iteration).min(MAX_LIST_RESERVE);
                    let label = labels.label(owner, oname, &step.op, &v, room);
                    labels.retire_after(step.process, &step.op, || {
                        step.op.used()[0]
                            .and_then(|n| run.bound(n))
                            .map(|b| &b.value)
                    });
                    let described = || {
                        describe(&StepOutcome::Ok {
                            value: summary(&v, label),
                        })
                    };
                    let failed = failure(list, &Observed::Ok(&v), described, &run.bindings);
                    iteration += 1;
                    let last =
                        failed.is_some() || iteration == iterations || dead[step.process].is_some();
                    let outcome = last.then(|| StepOutcome::Ok {
                        value: summary(&v, label),
                    });
                    if let Some(name) = &step.bind {
                        run.bind(name, Bound { value: v, label });
                    }
                    if let Some(outcome) = outcome {
                        break finish(outcome, failed, step, iteration, iterations, full, list);
                    }
                }
                Err(why) => {
                    let (outcome, api) = match why {
                        // A name the step uses that is not bound skips it as
                        // never bound. `perform` resolves every name the
                        // step uses before it calls anything, so it skipped
                        // such a step too: the names are looked up once, and
                        // again only for a step it skipped.
                        why @ (Failure::Skip(_) | Failure::NotBound(..)) => {
                            let reason = match performed.then(|| run.missing_binding(step)) {
                                Some(Some(missing)) => missing,
                                _ => why.skip_reason(),
                            };
                            (StepOutcome::Skipped { reason }, None)
                        }
                        Failure::Driver(DriverError::Api(e)) => (
                            StepOutcome::Error {
                                code: e.code,
                                name: e.name().into_owned(),
                            },
                            Some(e),
                        ),
                        Failure::Driver(DriverError::Lost(ProcessLoss::TimedOut { after_ms })) => {
                            dead[step.process] =
                                Some(format!("process '{pname}' timed out at line {}", step.line));
                            (StepOutcome::Timeout { after_ms }, None)
                        }
                        Failure::Driver(e @ DriverError::Lost(ProcessLoss::Crashed { .. })) => {
                            dead[step.process] =
                                Some(format!("process '{pname}' crashed at line {}", step.line));
                            (
                                StepOutcome::Crash {
                                    detail: e.to_string(),
                                },
                                None,
                            )
                        }
                        Failure::Driver(DriverError::Harness(m)) => {
                            dead[step.process] = Some(format!(
                                "process '{pname}' lost to a harness error at line {}",
                                step.line
                            ));
                            (StepOutcome::Broken { detail: m }, None)
                        }
                    };
                    let observed = match (&outcome, api) {
                        (_, Some(e)) => Observed::Api(e),
                        (StepOutcome::Crash { .. }, None) => Observed::Crash,
                        (StepOutcome::Skipped { reason }, None) => Observed::Skipped(reason),
                        (_, None) => Observed::NoAnswer,
                    };
                    let failed = failure(list, &observed, || describe(&outcome), &run.bindings);
                    iteration += 1;
                    let last =
                        failed.is_some() || iteration == iterations || dead[step.process].is_some();
                    if last {
                        break finish(outcome, failed, step, iteration, iterations, full, list);
                    }
                }
            }
        };
        let elapsed_us = call.map_or(0, |c| micros(c.elapsed()));

        if first_failure.is_none() {
            // Looked up only for a crash.
            let crash_expected = || result.passed && list.items.contains(&Expectation::Crash);
            let lost = match &outcome {
                StepOutcome::Crash { .. } if crash_expected() => None,
                StepOutcome::Crash { .. } => Some(Status::Crash),
                StepOutcome::Timeout { .. } => Some(Status::Timeout),
                StepOutcome::Broken { .. } => Some(Status::Broken),
                _ => None,
            };
            let message = |what: &str| step_failure(&scenario.path, step, pname, what, seed);
            if let Some(status) = lost {
                let what = match &outcome {
                    StepOutcome::Crash { detail } => detail.clone(),
                    StepOutcome::Timeout { after_ms } => {
                        format!("process timed out after {after_ms} ms")
                    }
                    other => describe(other),
                };
                first_failure = Some(Verdict {
                    status,
                    message: message(&what),
                });
            } else if !result.passed {
                first_failure = Some(Verdict {
                    status: Status::Fail,
                    message: message(&result.message),
                });
            }
        }

        trace.steps.push(StepRecord {
            index,
            line: step.line,
            process: if full {
                pname.to_string()
            } else {
                String::new()
            },
            op: if full { step.text() } else { String::new() },
            api: if full {
                step.op.api(opts.dialect).map(Cow::Borrowed)
            } else {
                None
            },
            outcome,
            check: Some(result),
            elapsed_us,
        });
    }

    labels.give_back();
    let log = machine.hazards();
    for (line, result) in check_hazards(scenario, log.as_deref()) {
        if !result.passed && first_failure.is_none() {
            first_failure = Some(Verdict {
                status: Status::Fail,
                message: format!("{}: {} (seed {seed})", run.where_(line), result.message),
            });
        }
        trace.hazard_checks.push(result);
    }
    trace.hazards = log;
    let verdict = first_failure.unwrap_or(Verdict {
        status: Status::Pass,
        message: String::new(),
    });
    Execution { trace, verdict }
}

#[cfg(test)]
mod label_tests {
    use super::*;
    use std::path::Path;

    /// An exit retires the process's contexts, VMM handles and events (no
    /// trace shows it: an exited process runs no further steps).
    #[test]
    fn exit_retires_opaque_labels_only() {
        let mut l = Labels::new(2);
        let text = |label: Label<'_>| label.text();
        assert_eq!(text(l.ctx(0, "a", Some(5), false, 1)), "a.c1");
        assert_eq!(text(l.event(0, "a", EventId(6), 1)), "a.e1");
        assert_eq!(l.processes[0].vmm_handles.label(7, 1), 1);
        assert_eq!(text(l.ptr(0, "a", DevicePtr(0x1000), 1)), "a.p1");
        assert_eq!(text(l.ctx(1, "b", Some(5), false, 1)), "b.c1");
        l.retire_after(0, &Op::Exit, || None);
        assert_eq!(text(l.ctx(0, "a", Some(5), true, 1)), "a.c1");
        assert_eq!(text(l.ctx(0, "a", Some(5), false, 1)), "a.c2");
        assert_eq!(text(l.event(0, "a", EventId(6), 1)), "a.e2");
        assert_eq!(l.processes[0].vmm_handles.label(7, 1), 2);
        assert_eq!(text(l.ptr(0, "a", DevicePtr(0x1000), 1)), "a.p1");
        assert_eq!(text(l.ctx(1, "b", Some(5), false, 1)), "b.c1");
    }

    /// A label's text is the one its parts spell, with or without a scope.
    #[test]
    fn labels_are_written_from_their_parts() {
        assert_eq!(issued("owner", "p", 17).text(), "owner.p17");
        assert_eq!(issued("", "eh", 2).text(), "eh2");
        assert_eq!(
            issued("x", "b", u64::MAX).to_string(),
            format!("x.b{}", u64::MAX)
        );
        assert_eq!(Label::Null.text(), "null");
        // The text against its formatted definition, over scopes, prefixes
        // and numbers of every length.
        let mut n = 1u64;
        for _ in 0..400 {
            for scope in ["", "a", "owner", "peer-process"] {
                for prefix in ["p", "eh", "px"] {
                    let want = if scope.is_empty() {
                        format!("{prefix}{n}")
                    } else {
                        format!("{scope}.{prefix}{n}")
                    };
                    assert_eq!(issued(scope, prefix, n).text(), want);
                }
            }
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                >> (n % 60);
        }
    }

    /// A run's labels taken from the spare ones a run gave back are those
    /// of new labels: numbering restarts and nothing is retired.
    #[test]
    fn reused_labels_are_new_labels() {
        let script = |l: &mut Labels| -> Vec<String> {
            let mut out = Vec::new();
            for round in 0..3u64 {
                for p in 0..3 {
                    let name = ["a", "b", "c"][p];
                    out.push(l.ptr(p, name, DevicePtr(0x1000 + round), 1).text());
                    out.push(l.ctx(p, name, Some(5), round == 1, 1).text());
                    out.push(l.event(p, name, EventId(6 + round), 1).text());
                    let v = Value::Handle(IpcMemHandle([round as u8; IPC_HANDLE_SIZE]));
                    let label = l.label(p, name, &Op::HandleZero, &v, 1);
                    out.push(label.map_or_else(String::new, Label::text));
                }
                l.retire_after(round as usize % 3, &Op::Exit, || None);
            }
            // Many values, so a map outgrows what is kept.
            for i in 0..1000 {
                out.push(
                    l.ptr(0, "a", DevicePtr(0x10_0000 + i), 1000 - i as usize)
                        .text(),
                );
            }
            out
        };
        let want = script(&mut Labels::new(3));
        for processes in [3, 1, 4, 3] {
            let mut l = Labels::take(processes);
            if processes >= 3 {
                assert_eq!(script(&mut l), want);
            } else {
                l.ptr(0, "a", DevicePtr(0x1000), 1);
            }
            l.give_back();
        }
    }

    /// A failed step's message, joined, is the one formatted from its
    /// parts, for odd paths, names and seeds.
    #[test]
    fn step_failure_messages_read_as_formatted_ones() {
        let src = "devices 1\nprocess a device=0\na: repeat 3 p[] = malloc 4KiB\n\
                   a: repeat 3 free p[]\na: q = malloc 1MiB\n";
        let scenario = super::super::parse(src, Path::new("t.ipc")).expect("parses");
        for path in ["t.ipc", "", "dir with space/ü.ipc", "/abs/x:y.ipc"] {
            for step in &scenario.steps {
                for (pname, what, seed) in [
                    ("a", "why", 0u64),
                    ("peer", "", u64::MAX),
                    ("ö", "x: y", 17),
                ] {
                    let where_ = format!("{}:{}", Path::new(path).display(), step.line);
                    let head = format!("{where_}: step '{}' in {pname}", step.text());
                    let want = format!("{head}: {what} (seed {seed})");
                    assert_eq!(step_failure(Path::new(path), step, pname, what, seed), want);
                }
            }
        }
    }

    /// A reason written only when shown reads as it did when formatted
    /// at once.
    #[test]
    fn late_skip_reasons_read_as_formatted_ones() {
        let reason = not_bound("p[]", "a bound pointer").skip_reason();
        assert_eq!(reason, "'p[]' is not a bound pointer");
        assert_eq!(Failure::Skip("why".into()).skip_reason(), "why");
    }
}

#[cfg(test)]
mod list_lookup_tests {
    use super::*;
    use std::path::Path;

    /// A list the running step names is found by the step's own string;
    /// an equal string elsewhere (the lookup by text) finds the same
    /// element, for every iteration, before and after binding.
    #[test]
    fn lists_found_by_the_steps_string_are_those_found_by_text() {
        let src = "devices 1\nprocess a device=0\n\
                   a: repeat 4 p[] = malloc 4KiB\n\
                   a: repeat 4 q[] = offset p[] 16\n\
                   a: x = malloc 4KiB\n";
        let scenario = super::super::parse(src, Path::new("t.ipc")).expect("parses");
        let opts = ExecOptions::default();
        let mut run = Run {
            scenario: &scenario,
            opts: &opts,
            bindings: HashMap::default(),
            lists: Vec::new(),
            list_ids: HashMap::default(),
            step_lists: Vec::new(),
            iteration: 0,
        };
        for (s, step) in scenario.steps.iter().enumerate() {
            run.enter_step(step);
            let n = step.repeat.map_or(1, |n| n as usize);
            for i in 0..n {
                run.iteration = i;
                let names = step.op.used().into_iter().chain([step.bind.as_deref()]);
                for name in names.flatten() {
                    let copy = name.to_string();
                    let by_step = run.bound(name).map(|b| b.value.clone());
                    let by_text = run.bound(&copy).map(|b| b.value.clone());
                    assert_eq!(by_step, by_text, "{name} at step {s} iteration {i}");
                }
                if let Some(name) = step.bind.as_deref() {
                    let value = Value::Ptr(DevicePtr(0x1000 * (s as u64 + 1) + i as u64));
                    // Bind by the step's string, read back by an equal one.
                    run.bind(
                        name,
                        Bound {
                            value: value.clone(),
                            label: None,
                        },
                    );
                    let copy = name.to_string();
                    assert_eq!(run.bound(&copy).map(|b| &b.value), Some(&value));
                    assert_eq!(run.bound(name).map(|b| &b.value), Some(&value));
                }
            }
        }
        // Every element of both lists, and the plain binding, are where the
        // lookup by text finds them.
        for (list, base) in [("p[]", 0x1000u64), ("q[]", 0x2000)] {
            let id = run.list_ids[list];
            let got: Vec<_> = run.lists[id]
                .iter()
                .map(|b| b.as_ref().map(|b| b.value.clone()))
                .collect();
            let want: Vec<_> = (0..4)
                .map(|i| Some(Value::Ptr(DevicePtr(base + i))))
                .collect();
            assert_eq!(got, want, "{list}");
        }
        assert_eq!(
            run.bindings.get("x").map(|b| &b.value),
            Some(&Value::Ptr(DevicePtr(0x3000)))
        );
    }
}
