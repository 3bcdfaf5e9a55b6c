//! PID namespaces (`process NAME ... pidns=new`) and `pidfd_getfd`
//! (https://man7.org/linux/man-pages/man2/pidfd_open.2.html,
//! https://man7.org/linux/man-pages/man2/pidfd_getfd.2.html).
//!
//! A process runs in the harness's PID namespace or in a new one of its
//! own (a container's). The harness's namespace names every process by its
//! harness pid; a new namespace names only its own process, as pid 1.

use crate::semantics::ExportRule;
use crate::world::{SimResult, World};
use ipc_harness::{ErrorKind, Fd, PidNamespace, ProcessIndex};

/// The harness pid of process 0; the others follow in declaration order.
const FIRST_HARNESS_PID: u32 = 4100;

/// The pid the harness sees for process `p` (and hands to `pidfd_open`).
pub(crate) fn harness_pid(p: ProcessIndex) -> u32 {
    FIRST_HARNESS_PID.saturating_add(u32::try_from(p).unwrap_or(u32::MAX))
}

impl World {
    /// The process `pid` names in `caller`'s PID namespace, if any.
    fn process_named(&self, caller: ProcessIndex, pid: u32) -> Option<ProcessIndex> {
        match self.procs.get(caller)?.pid_namespace {
            PidNamespace::Harness => (0..self.procs.len()).find(|&q| harness_pid(q) == pid),
            PidNamespace::New => (pid == 1).then_some(caller),
        }
    }

    /// Whether two processes share a PID namespace (each `pidns=new`
    /// process has one of its own).
    pub(crate) fn same_pid_namespace(&self, a: ProcessIndex, b: ProcessIndex) -> bool {
        let ns = |p: ProcessIndex| self.procs.get(p).map(|p| p.pid_namespace);
        a == b || (ns(a) == Some(PidNamespace::Harness) && ns(b) == Some(PidNamespace::Harness))
    }

    /// `pidfd_open(pid)` then `pidfd_getfd(pidfd, fd)` in process `p`. A pid
    /// that names no running process in `p`'s namespace is `ESRCH`
    /// (NotFound): a harness pid seen from inside a new namespace names
    /// nothing (vmm.pidfd.across-pid-namespaces). A number the owner does
    /// not hold is `EBADF` (InvalidValue, vmm.pidfd.bad-descriptor). The
    /// simulator models no ptrace restriction (`EPERM`): its processes all
    /// belong to one user and allow each other (vmm.pidfd.same-namespace).
    pub(crate) fn pidfd_getfd(&mut self, p: ProcessIndex, pid: u32, fd: Fd) -> SimResult<i32> {
        let owner = self
            .process_named(p, pid)
            .filter(|&q| !self.procs[q].exited)
            .ok_or(ErrorKind::NotFound)?;
        self.copy_fd(owner, fd, p)
            .ok_or_else(|| ErrorKind::InvalidValue.into())
    }

    /// `cross_pidns_ipc`: opening a legacy memory or event handle exported
    /// by a process in another PID namespace (mem.namespaces.*,
    /// event.namespaces.*). Those handles name their exporter by its pid.
    pub(crate) fn cross_pidns_rule(
        &self,
        importer: ProcessIndex,
        exporter: ProcessIndex,
    ) -> SimResult<()> {
        match self.sem.cross_pidns_ipc {
            ExportRule::Refuse(kind) if !self.same_pid_namespace(importer, exporter) => {
                Err(kind.into())
            }
            _ => Ok(()),
        }
    }
}
