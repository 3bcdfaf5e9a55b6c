//! Host records (tracer coverage 1): descriptors passed between processes
//! (`SCM_RIGHTS` on sockets, `pidfd_getfd`, their `dup`s and `close`s) and
//! the host synchronisation that orders processes (data on pipes and
//! sockets, semaphores, process creation and waits), turned into
//! happens-before edges.
//!
//! A look-ahead pairs each receiving record with the sending ones it took
//! bytes, descriptors or a post from: messages on one pipe, on the two ends
//! of a connected socket (each end has its own inode, the `describe` record
//! names the peer's), to a bound datagram path, or posts of one semaphore,
//! are taken in the order they were made. The walk then passes the
//! sender's happens-before to the receiver, and emits each descriptor's
//! `send_fd` in the sender when it is sent (the simulator passes it at
//! once; the receiver knows it by its own number once its record says it
//! received it).

use super::state::{FdFlow, Lowering, Record, Role};
use crate::trace_check::load::{MergedEntry, Rec};
use ipc_harness::scenario::{Expect, Op};
use ipc_harness::trace_record::HostRecord;
use std::collections::{HashMap, VecDeque};

/// A message on its way: who sent it, how many of its bytes are not yet
/// received, and the descriptors it carries (taken by the first receive).
struct Message {
    process: usize,
    seq: u64,
    left: u64,
    fds: Vec<i64>,
}

impl Lowering<'_> {
    /// The process image with `pid` that was running at `t_ns` (the latest
    /// started before it).
    fn process_with_pid(&self, pid: u32, t_ns: u64) -> Option<usize> {
        let procs = &self.folder.processes;
        let start = |i: usize| {
            let p = &procs[i];
            let first = p.calls.first().map_or(u64::MAX, |c| c.t_ns);
            let host = p.host.first().map_or(u64::MAX, |h| h.t_ns);
            p.header
                .as_ref()
                .map_or(first.min(host), |h| h.start_ns.min(first).min(host))
        };
        (0..procs.len())
            .filter(|&i| procs[i].pid == pid && start(i) <= t_ns)
            .max_by_key(|&i| start(i))
            .or_else(|| {
                (0..procs.len())
                    .filter(|&i| procs[i].pid == pid)
                    .min_by_key(|&i| start(i))
            })
    }

    /// The image that follows `process` with the same pid (after an
    /// `exec`), or the child `pid` started by a fork or spawn at `t_ns`.
    fn started_image(&self, pid: u32, t_ns: u64, after: Option<usize>) -> Option<usize> {
        let procs = &self.folder.processes;
        (0..procs.len())
            .filter(|&i| Some(i) != after && procs[i].pid == pid)
            .filter(|&i| procs[i].header.as_ref().is_none_or(|h| h.start_ns >= t_ns))
            .min_by_key(|&i| procs[i].header.as_ref().map_or(0, |h| h.start_ns))
    }

    /// Pair receiving host records with the sending ones.
    pub(super) fn look_ahead_host(&mut self, merged: &[MergedEntry]) {
        let folder = self.folder;
        let mut peer_of: HashMap<String, String> = HashMap::new();
        let mut bound: HashMap<String, String> = HashMap::new();
        let mut queues: HashMap<String, VecDeque<Message>> = HashMap::new();
        let mut posts: HashMap<String, VecDeque<(usize, u64)>> = HashMap::new();
        let mut fd_flow: Vec<(Record, FdFlow)> = Vec::new();
        // What each socket's other end is, and where datagram sockets are
        // bound: a description is written as a descriptor is first used.
        for p in &folder.processes {
            for h in p.host.iter().filter(|h| h.op == "describe") {
                let Some(object) = &h.args.object else {
                    continue;
                };
                if let Some(peer) = &h.args.peer {
                    peer_of.insert(object.clone(), peer.clone());
                }
                if let Some(local) = &h.args.local {
                    bound.insert(local.clone(), object.clone());
                }
            }
        }
        for entry in merged {
            let MergedEntry::Host { process, index } = *entry else {
                continue;
            };
            let h: &HostRecord = &folder.processes[process].host[index];
            let a = &h.args;
            let object = a.object.clone().unwrap_or_default();
            match h.op.as_str() {
                "send" => {
                    let key = a
                        .path
                        .as_ref()
                        .and_then(|p| bound.get(p))
                        .or_else(|| peer_of.get(&object))
                        .cloned()
                        .unwrap_or(object);
                    let bytes = h.result.unwrap_or(0).max(0) as u64;
                    queues.entry(key).or_default().push_back(Message {
                        process,
                        seq: h.seq,
                        left: bytes.max(1),
                        fds: a.fds.clone().unwrap_or_default(),
                    });
                }
                "recv" => {
                    let mut need = h.result.unwrap_or(0).max(0) as u64;
                    let mut fds_in: Vec<i64> = a.fds.clone().unwrap_or_default();
                    let queue = queues.entry(object).or_default();
                    while need > 0 {
                        let Some(m) = queue.front_mut() else {
                            break;
                        };
                        self.host_sends
                            .entry((m.process, m.seq))
                            .or_default()
                            .push((process, h.seq));
                        if !m.fds.is_empty() && !fds_in.is_empty() {
                            let pairs: Vec<(i64, i64)> =
                                m.fds.drain(..).zip(fds_in.drain(..)).collect();
                            fd_flow.push(((m.process, m.seq), (process, h.seq, pairs)));
                        }
                        let took = need.min(m.left);
                        m.left -= took;
                        need -= took;
                        if m.left == 0 {
                            queue.pop_front();
                        }
                    }
                }
                "sem_post" => posts.entry(object).or_default().push_back((process, h.seq)),
                "sem_wait" => {
                    if let Some((p, seq)) = posts.entry(object).or_default().pop_front() {
                        self.host_sends
                            .entry((p, seq))
                            .or_default()
                            .push((process, h.seq));
                    }
                }
                _ => {}
            }
        }
        for (from, flow) in fd_flow {
            self.fd_sends.entry(from).or_default().push(flow);
        }
    }

    /// A host record, in the walk.
    pub(super) fn host(&mut self, process: usize, h: &HostRecord) {
        if self.procs[process].exited {
            return;
        }
        let a = &h.args;
        match h.op.as_str() {
            "send" | "sem_post" => {
                let key = (process, h.seq);
                if let Some(receivers) = self.host_sends.get(&key).cloned() {
                    let clock = self.procs[process].clock(process);
                    for r in receivers {
                        self.host_edges.entry(r).or_default().push(clock.clone());
                    }
                }
                if let Some(flows) = self.fd_sends.remove(&key) {
                    for (q, qseq, pairs) in flows {
                        self.pass_fds(process, h.seq, q, qseq, &pairs);
                    }
                }
            }
            "recv" | "sem_wait" => {
                if let Some(clocks) = self.host_edges.remove(&(process, h.seq)) {
                    for c in clocks {
                        self.procs[process].merge(&c);
                    }
                }
                if let Some(arrived) = self.fd_arrivals.remove(&(process, h.seq)) {
                    for (fd, binding) in arrived {
                        self.procs[process]
                            .fds
                            .insert(fd, super::state::FdObject { binding });
                    }
                }
            }
            "fork" | "spawn" | "exec" => {
                let after = (h.op == "exec").then_some(process);
                let pid = if h.op == "exec" {
                    Some(self.folder.processes[process].pid)
                } else {
                    a.pid
                };
                if let Some(child) = pid.and_then(|p| self.started_image(p, h.t_ns, after)) {
                    if h.op == "fork" {
                        self.inherit_fds(process, h.seq, child);
                    }
                    let clock = self.procs[process].clock(process);
                    let start = self.start_clock.entry(child).or_default();
                    for (q, e) in clock {
                        let v = start.entry(q).or_insert(0);
                        *v = (*v).max(e);
                    }
                }
            }
            "wait" => {
                let t_end = h.t_ns.saturating_add(h.dur_ns);
                if let Some(child) = a.pid.and_then(|p| self.process_with_pid(p, t_end)) {
                    if let Some(clock) = self.final_clock.get(&child).cloned() {
                        self.procs[process].merge(&clock);
                    }
                }
            }
            "dup" => {
                if let (Some(fd), Some(new)) = (a.fd, a.new_fd) {
                    if let Some(f) = self.procs[process].fds.get(&fd).cloned() {
                        self.procs[process].fds.insert(new, f);
                    }
                }
            }
            "close" => {
                if let Some(fd) = a.fd {
                    self.procs[process].fds.remove(&fd);
                }
            }
            "pidfd_getfd" => self.take_fd(process, h),
            _ => {}
        }
    }

    /// Descriptors `process` sends in its record `seq` to `q`, which takes
    /// them in with its record `qseq`: each one the replay follows is
    /// passed now (`send_fd`), and is `q`'s under its own number from then.
    fn pass_fds(&mut self, process: usize, seq: u64, q: usize, qseq: u64, pairs: &[(i64, i64)]) {
        for &(sfd, rfd) in pairs {
            let Some(f) = self.procs[process].fds.get(&sfd).cloned() else {
                continue;
            };
            let received = self.send_descriptor(process, q, &f.binding, None, Some(seq));
            self.fd_arrivals
                .entry((q, qseq))
                .or_default()
                .push((rfd, received));
        }
    }

    /// Pass `binding`, a descriptor of `from`, to `to` (a `send_fd` step
    /// at the record `r`, or at `seq` where the passing is bookkeeping of
    /// host records) and give the binding `to` holds it under, the object
    /// behind it followed. A descriptor that stays in its process (a
    /// socket pair inside one process, an import by the exporter) is the
    /// same binding: nothing is passed.
    pub(super) fn send_descriptor(
        &mut self,
        from: usize,
        to: usize,
        binding: &str,
        r: Option<&Rec>,
        seq: Option<u64>,
    ) -> String {
        if from == to {
            return binding.to_string();
        }
        let received = self.procs[to].fresh("f");
        let op = Op::SendFd {
            fd: binding.to_string(),
            to,
            to_name: self.procs[to].name.clone(),
        };
        match r {
            Some(r) => {
                self.model_step(
                    from,
                    Some(r),
                    Some(received.clone()),
                    op,
                    Role::Harness,
                    None,
                    None,
                );
            }
            None => self.harness_step(from, seq, Some(received.clone()), op),
        }
        let object = self.fd_objects.get(binding).copied().flatten();
        self.fd_objects.insert(received.clone(), object);
        received
    }

    /// A forked child holds its parent's descriptors under the same
    /// numbers: each one the replay follows is passed to it.
    fn inherit_fds(&mut self, process: usize, seq: u64, child: usize) {
        let mut fds: Vec<(i64, String)> = self.procs[process]
            .fds
            .iter()
            .map(|(n, f)| (*n, f.binding.clone()))
            .collect();
        fds.sort();
        for (n, binding) in fds {
            let received = self.send_descriptor(process, child, &binding, None, Some(seq));
            self.procs[child]
                .fds
                .insert(n, super::state::FdObject { binding: received });
        }
    }

    /// `pidfd_getfd`: `process` takes a copy of another process's
    /// descriptor by its number there.
    fn take_fd(&mut self, process: usize, h: &HostRecord) {
        let a = &h.args;
        let (Some(pid), Some(target), Some(new)) = (a.pid, a.target_fd, a.new_fd) else {
            return;
        };
        let Some(owner) = self.process_with_pid(pid, h.t_ns) else {
            return;
        };
        let Some(f) = self.procs[owner].fds.get(&target).cloned() else {
            return;
        };
        let g = self.procs[process].fresh("f");
        let owner_name = self.procs[owner].name.clone();
        let origin =
            super::state::Origin::new(process, Some(h.seq), None, Role::Harness, None, None);
        self.step(
            process,
            Some(g.clone()),
            Op::PidfdGetfd {
                owner,
                owner_name,
                fd: f.binding.clone(),
            },
            Expect::Default,
            origin,
        );
        let object = self.fd_objects.get(&f.binding).copied().flatten();
        self.fd_objects.insert(g.clone(), object);
        self.procs[process]
            .fds
            .insert(new, super::state::FdObject { binding: g });
    }
}
