//! The order the CUDA documents give device work, which the properties
//! judge a simulator's reads and hazard log by ([`super::properties`]):
//! "Stream synchronization behavior"
//! (<https://docs.nvidia.com/cuda/cuda-runtime-api/stream-sync-behavior.html>),
//! "API synchronization behavior"
//! (<https://docs.nvidia.com/cuda/cuda-driver-api/api-sync-behavior.html>),
//! and cudaEventRecord / cudaStreamWaitEvent
//! (<https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__EVENT.html>).
//! It is written apart from the simulator's own model, so that a wrong
//! simulator cannot excuse itself.
//!
//! Each stream of a process is a *lane* (its legacy default stream, each
//! stream it creates); device work that writes takes the next number on its
//! lane (a [`Stamp`]). A [`Clock`] holds, per lane, the newest write
//! something is ordered after:
//! - work on a stream runs after the work queued on it before, and after
//!   what the hosts had seen complete when it was queued;
//! - work on the legacy stream first waits for the process's blocking
//!   streams, which then wait for it; a non-blocking stream waits for
//!   neither, and blocking streams do not wait for one another;
//! - a record captures its stream's clock, replacing what the event held
//!   (an unrecorded event holds nothing); a wait joins the event's clock
//!   into its stream only, as it is at the wait;
//! - a host waits for a stream by a synchronize of it or a query that says
//!   it is done, for the legacy stream (and the blocking streams it waits
//!   for) by a copy to the host or from pageable memory, for an event by a
//!   synchronize or a query that says it is done, for every stream of its
//!   process by a device synchronize, `free` or exit (an exit: the work
//!   that has ended; a kernel still running then, and what its stream
//!   queued after it, are not judged: the properties leave them out);
//! - the hosts are one: a scenario's steps run one after another, so a
//!   step is ordered after everything any host saw before it.
//!
//! The per-thread default stream (`stream=per_thread`) is a blocking stream
//! each process makes on its first use. As the simulator does, the legacy
//! stream waits for the blocking streams of its process, not only those of
//! its current context, and a process has one per-thread stream.

use ipc_harness::scenario::PER_THREAD_STREAM;

use rustc_hash::FxHashMap as HashMap;

/// A lane: the legacy stream of process `p` is lane `p`; created streams
/// follow the processes'.
pub type Lane = usize;

/// One device write: its lane and its number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub lane: Lane,
    pub n: u64,
}

/// Per lane, the newest write something is ordered after (0: none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Clock(Vec<u64>);

impl Clock {
    fn get(&self, lane: Lane) -> u64 {
        self.0.get(lane).copied().unwrap_or(0)
    }

    fn set(&mut self, lane: Lane, n: u64) {
        if self.0.len() <= lane {
            self.0.resize(lane + 1, 0);
        }
        self.0[lane] = n;
    }

    fn join(&mut self, other: &Clock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// Whether the write `s` is ordered before what this clock stands for.
    pub fn covers(&self, s: Stamp) -> bool {
        self.get(s.lane) >= s.n
    }
}

#[derive(Debug)]
struct Stream {
    process: usize,
    lane: Lane,
    nonblocking: bool,
    clock: Clock,
}

/// The order of one scenario's device work so far.
#[derive(Debug, Default)]
pub struct Order {
    nprocs: usize,
    /// What the hosts saw complete.
    host: Clock,
    /// Per process: its legacy stream.
    legacy: Vec<Clock>,
    /// Created streams, lane `nprocs + i` at `i`.
    streams: Vec<Stream>,
    /// (process, binding) -> index in `streams`.
    by_name: HashMap<(usize, String), usize>,
    /// Per lane: writes so far.
    writes: Vec<u64>,
    /// Per event: what its last record captured.
    events: Vec<Clock>,
}

impl Order {
    pub fn new(nprocs: usize) -> Order {
        Order {
            nprocs,
            host: Clock::default(),
            legacy: vec![Clock::default(); nprocs],
            streams: Vec::new(),
            by_name: HashMap::default(),
            writes: vec![0; nprocs],
            events: Vec::new(),
        }
    }

    /// `p` bound `name` to a new stream.
    pub fn create_stream(&mut self, p: usize, name: &str, nonblocking: bool) {
        let lane = self.nprocs + self.streams.len();
        self.streams.push(Stream {
            process: p,
            lane,
            nonblocking,
            clock: Clock::default(),
        });
        self.writes.push(0);
        self.by_name
            .insert((p, name.to_string()), self.streams.len() - 1);
    }

    /// Where `p`'s stream `name` (`None`: the legacy stream) is; `None`
    /// for a name no stream was bound to (the step failed to make it). The
    /// per-thread stream is made on first use.
    fn stream_index(&mut self, p: usize, name: Option<&str>) -> Option<Option<usize>> {
        match name {
            None => (p < self.nprocs).then_some(None),
            Some(n) => {
                let key = (p, n.to_string());
                if n == PER_THREAD_STREAM && p < self.nprocs && !self.by_name.contains_key(&key) {
                    self.create_stream(p, n, false);
                }
                self.by_name.get(&key).map(|&i| Some(i))
            }
        }
    }

    fn clock_mut(&mut self, p: usize, at: Option<usize>) -> &mut Clock {
        match at {
            None => &mut self.legacy[p],
            Some(i) => &mut self.streams[i].clock,
        }
    }

    /// The blocking streams of `p`, joined.
    fn blocking_of(&self, p: usize) -> Clock {
        let mut c = Clock::default();
        for s in self
            .streams
            .iter()
            .filter(|s| s.process == p && !s.nonblocking)
        {
            c.join(&s.clock);
        }
        c
    }

    /// Work is queued on `p`'s stream `name` now: its clock joins the host
    /// and the work it implicitly waits for. Returns where it is and its
    /// lane; `None` for an unknown stream.
    fn begin(&mut self, p: usize, name: Option<&str>) -> Option<(Option<usize>, Lane)> {
        let at = self.stream_index(p, name)?;
        let mut after = self.host.clone();
        let lane = match at {
            None => {
                after.join(&self.blocking_of(p));
                p
            }
            Some(i) => {
                if !self.streams[i].nonblocking {
                    after.join(&self.legacy[p]);
                }
                self.streams[i].lane
            }
        };
        self.clock_mut(p, at).join(&after);
        Some((at, lane))
    }

    /// Work on `p`'s stream `name` that reads: what it is ordered after.
    pub fn read(&mut self, p: usize, name: Option<&str>) -> Option<Clock> {
        let (at, _) = self.begin(p, name)?;
        Some(self.clock_mut(p, at).clone())
    }

    /// Work on `p`'s stream `name` that writes: its stamp, and what it is
    /// ordered after (its own earlier writes included).
    pub fn write(&mut self, p: usize, name: Option<&str>) -> Option<(Stamp, Clock)> {
        let (at, lane) = self.begin(p, name)?;
        let after = self.clock_mut(p, at).clone();
        self.writes[lane] += 1;
        let n = self.writes[lane];
        self.clock_mut(p, at).set(lane, n);
        Some((Stamp { lane, n }, after))
    }

    /// A copy between devices (cudaMemcpyPeer): on the legacy stream,
    /// after all of `p`'s work ("serialized with respect to all pending
    /// and future asynchronous work").
    pub fn serialize_all(&mut self, p: usize) {
        let all = self.all_of(p);
        self.legacy[p].join(&all);
    }

    /// Every stream of `p`, the legacy one included, joined.
    fn all_of(&self, p: usize) -> Clock {
        let mut all = self.legacy[p].clone();
        for s in self.streams.iter().filter(|s| s.process == p) {
            all.join(&s.clock);
        }
        all
    }

    /// The host waited for `p`'s stream `name` (the legacy stream: with
    /// the blocking streams it waits for).
    pub fn host_waits_for(&mut self, p: usize, name: Option<&str>) {
        let Some(at) = self.stream_index(p, name) else {
            return;
        };
        let mut done = self.clock_mut(p, at).clone();
        if at.is_none() {
            done.join(&self.blocking_of(p));
        }
        self.host.join(&done);
    }

    /// The host waited for every stream of `p`.
    pub fn host_waits_for_all(&mut self, p: usize) {
        if p < self.nprocs {
            let all = self.all_of(p);
            self.host.join(&all);
        }
    }

    /// A new event, unrecorded: an empty set of work.
    pub fn new_event(&mut self) -> usize {
        self.events.push(Clock::default());
        self.events.len() - 1
    }

    /// A record of `event` on `p`'s stream `name`.
    pub fn record(&mut self, p: usize, name: Option<&str>, event: usize) {
        if let (Some((at, _)), true) = (self.begin(p, name), event < self.events.len()) {
            self.events[event] = self.clock_mut(p, at).clone();
        }
    }

    /// `p`'s stream `name` waits for `event` as it is now.
    pub fn wait(&mut self, p: usize, name: Option<&str>, event: usize) {
        let Some(captured) = self.events.get(event).cloned() else {
            return;
        };
        if let Some((at, _)) = self.begin(p, name) {
            self.clock_mut(p, at).join(&captured);
        }
    }

    /// The host waited for `event` (a synchronize, a query that says done).
    pub fn host_waits_for_event(&mut self, event: usize) {
        if let Some(captured) = self.events.get(event) {
            self.host.join(captured);
        }
    }

    /// Whether the hosts saw the write `s` complete.
    pub fn host_covers(&self, s: Stamp) -> bool {
        self.host.covers(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(o: &mut Order, p: usize, s: Option<&str>) -> Stamp {
        o.write(p, s).expect("a known stream").0
    }

    /// The rules of the module docs, one case each: whether a read on the
    /// other process's legacy stream after an event synchronize is
    /// ordered after a kernel.
    #[test]
    fn an_event_covers_its_streams_work_and_the_implicit_waits() {
        // (kernel's stream flags, record's stream flags, same stream, ordered)
        // flags: None = legacy, Some(true) = non-blocking, Some(false) = blocking.
        let cases = [
            (Some(true), Some(true), true, true),
            (Some(true), Some(true), false, false),
            (Some(false), None, false, true),
            (None, Some(false), false, true),
            (Some(true), None, false, false),
            (None, Some(true), false, false),
            (Some(false), Some(false), false, false),
            (None, None, true, true),
        ];
        for (kernel_on, record_on, same, ordered) in cases {
            let mut o = Order::new(2);
            let k = kernel_on.map(|nb| {
                o.create_stream(0, "k", nb);
                "k"
            });
            let r = if same {
                k
            } else {
                record_on.map(|nb| {
                    o.create_stream(0, "r", nb);
                    "r"
                })
            };
            let w = kernel(&mut o, 0, k);
            let e = o.new_event();
            o.record(0, r, e);
            o.host_waits_for_event(e);
            let read = o.read(1, None).unwrap();
            assert_eq!(
                read.covers(w),
                ordered,
                "{kernel_on:?} {record_on:?} {same}"
            );
        }
    }

    #[test]
    fn a_rerecord_replaces_and_a_wait_takes_the_event_as_it_is() {
        let mut o = Order::new(2);
        o.create_stream(0, "s", true);
        o.create_stream(0, "r", true);
        o.create_stream(1, "t", true);
        let w = kernel(&mut o, 0, Some("s"));
        let e = o.new_event();
        o.wait(1, Some("t"), e);
        o.record(0, Some("s"), e);
        assert!(
            !o.read(1, Some("t")).unwrap().covers(w),
            "waited before the record"
        );
        o.record(0, Some("r"), e);
        o.wait(1, Some("t"), e);
        assert!(
            !o.read(1, Some("t")).unwrap().covers(w),
            "the re-record replaced it"
        );
        o.record(0, Some("s"), e);
        o.wait(1, Some("t"), e);
        assert!(o.read(1, Some("t")).unwrap().covers(w));
        assert!(
            !o.read(1, None).unwrap().covers(w),
            "a wait orders its stream only"
        );
    }

    #[test]
    fn a_wait_on_the_legacy_stream_reaches_later_work_on_blocking_streams() {
        for (nonblocking, ordered) in [(false, true), (true, false)] {
            let mut o = Order::new(2);
            o.create_stream(1, "t", nonblocking);
            let w = kernel(&mut o, 0, None);
            let e = o.new_event();
            o.record(0, None, e);
            o.wait(1, None, e);
            assert_eq!(o.read(1, Some("t")).unwrap().covers(w), ordered);
        }
    }

    #[test]
    fn hosts_wait_for_the_streams_they_synchronize() {
        let mut o = Order::new(2);
        o.create_stream(0, "s", true);
        o.create_stream(0, "b", false);
        let w = kernel(&mut o, 0, Some("s"));
        let v = kernel(&mut o, 0, Some("b"));
        o.host_waits_for(0, None);
        assert!(
            !o.host_covers(w) && o.host_covers(v),
            "the legacy stream's sync"
        );
        assert!(!o.read(1, None).unwrap().covers(w));
        o.host_waits_for(0, Some("s"));
        assert!(o.read(1, None).unwrap().covers(w));
        let x = kernel(&mut o, 0, Some("s"));
        o.host_waits_for_all(0);
        assert!(o.host_covers(x));
        assert!(o.stream_index(0, Some("unknown")).is_none());
    }
}
