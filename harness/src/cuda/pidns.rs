//! Starting a worker in a new user and PID namespace of its own
//! (`process NAME ... pidns=new`), as a container would run it, with no
//! container runtime: the spawn's child makes the namespaces with
//! `unshare(CLONE_NEWUSER | CLONE_NEWPID)`, maps its own user and group to
//! themselves, and forks; the grandchild (pid 1 in the new namespace) execs
//! the worker, while the child stays to wait for it and exits as it does.
//! A harness running as root makes the PID namespace alone, as a container
//! runtime running as root does: CUDA cannot initialise inside a new user
//! namespace (`cudaSetDevice` fails with `cudaErrorOperatingSystem` on the
//! H100, see `mem.namespaces.*`).
//! The harness reads the grandchild's pid (in the harness's namespace)
//! through a pipe; a host that refuses the namespaces (user namespaces
//! disabled, a seccomp filter) sends `-errno` instead, and the process
//! cannot run here (NotSupported), which is no failure of the scenario.

use nix::libc;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The marker the reason of a refusal carries, so that the machine maps it
/// to NotSupported rather than a harness error.
pub(crate) const REFUSED: &str = "the host refuses a new user and PID namespace";

/// What the spawn needs before the fork: the pid pipe and the id maps,
/// made here because the forked child may not allocate.
pub(super) struct NamespaceSpawn {
    pid_read: OwnedFd,
    pid_write: OwnedFd,
    child: NamespaceChild,
}

/// The plain values the forked child uses (no allocation after the fork).
#[derive(Clone, Copy)]
pub(super) struct NamespaceChild {
    pid_write: RawFd,
    uid_map: [u8; 32],
    uid_map_len: usize,
    gid_map: [u8; 32],
    gid_map_len: usize,
    /// Root: a PID namespace only, no user namespace.
    pid_only: bool,
}

fn id_map(id: u32) -> ([u8; 32], usize) {
    let text = format!("{id} {id} 1\n");
    let mut buf = [0u8; 32];
    buf[..text.len()].copy_from_slice(text.as_bytes());
    (buf, text.len())
}

impl NamespaceSpawn {
    pub(super) fn new() -> io::Result<NamespaceSpawn> {
        let (pid_read, pid_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let (uid_map, uid_map_len) = id_map(uid);
        let (gid_map, gid_map_len) = id_map(gid);
        let child = NamespaceChild {
            pid_write: pid_write.as_raw_fd(),
            uid_map,
            uid_map_len,
            gid_map,
            gid_map_len,
            pid_only: uid == 0,
        };
        Ok(NamespaceSpawn {
            pid_read,
            pid_write,
            child,
        })
    }

    pub(super) fn child(&self) -> NamespaceChild {
        self.child
    }

    /// After the spawn: the worker's pid in the harness's namespace, or why
    /// the namespaces were refused (an error whose text starts with
    /// [`REFUSED`], kind `Unsupported`).
    pub(super) fn worker_pid(self) -> io::Result<u32> {
        drop(self.pid_write);
        let mut answer = [0u8; 4];
        (&File(self.pid_read))
            .read_exact(&mut answer)
            .map_err(|e| {
                io::Error::other(format!("no worker pid from the namespace's child: {e}"))
            })?;
        match i32::from_le_bytes(answer) {
            pid if pid > 0 => Ok(pid as u32),
            errno => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{REFUSED}: {}", io::Error::from_raw_os_error(-errno)),
            )),
        }
    }
}

struct File(OwnedFd);

impl Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: reads into `buf` from a descriptor we own.
        let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

impl NamespaceChild {
    fn report(&self, value: i32) {
        let bytes = value.to_le_bytes();
        // SAFETY: writes 4 bytes from a local buffer.
        unsafe { libc::write(self.pid_write, bytes.as_ptr().cast(), bytes.len()) };
    }

    fn refuse(&self) -> io::Error {
        let e = io::Error::last_os_error();
        self.report(-e.raw_os_error().unwrap_or(libc::EPERM));
        e
    }

    /// Runs in the spawn's forked child, before exec: only
    /// async-signal-safe calls. Returns in the grandchild (which goes on
    /// to exec the worker); the child itself never returns.
    ///
    /// # Safety
    /// Only in a freshly forked, single-threaded child.
    pub(super) unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: raw system calls on local buffers and our own descriptors,
        // in the single-threaded child the caller promises.
        unsafe {
            let flags = if self.pid_only {
                libc::CLONE_NEWPID
            } else {
                libc::CLONE_NEWUSER | libc::CLONE_NEWPID
            };
            if libc::unshare(flags) < 0 {
                return Err(self.refuse());
            }
            // The worker keeps its user and group inside (a one-line map of
            // one's own id needs no privilege; the group map needs setgroups
            // denied first).
            let all: [(&[u8], &[u8]); 3] = [
                (b"/proc/self/setgroups\0", b"deny"),
                (b"/proc/self/uid_map\0", &self.uid_map[..self.uid_map_len]),
                (b"/proc/self/gid_map\0", &self.gid_map[..self.gid_map_len]),
            ];
            let maps = if self.pid_only { &all[..0] } else { &all[..] };
            for &(path, text) in maps {
                let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(self.refuse());
                }
                let written = libc::write(fd, text.as_ptr().cast(), text.len());
                libc::close(fd);
                if written != text.len() as isize {
                    return Err(self.refuse());
                }
            }
            let worker = libc::fork();
            if worker < 0 {
                return Err(self.refuse());
            }
            if worker == 0 {
                // pid 1 of the new namespace: it dies with the child that waits
                // for it (which itself dies with the harness).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
                    return Err(io::Error::last_os_error());
                }
                return Ok(());
            }
            self.report(worker);
            // The waiting child holds no descriptor: the worker's socket, its
            // stderr and the spawn's exec-error pipe must end with the worker.
            if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) < 0 {
                for fd in 0..4096 {
                    libc::close(fd);
                }
            }
            let mut status = 0;
            loop {
                let r = libc::waitpid(worker, &mut status, 0);
                if r == worker {
                    break;
                }
                if r < 0 && *libc::__errno_location() != libc::EINTR {
                    libc::_exit(127);
                }
            }
            if libc::WIFSIGNALED(status) {
                // Die as the worker died, so the harness sees its signal.
                let signal = libc::WTERMSIG(status);
                libc::signal(signal, libc::SIG_DFL);
                libc::kill(libc::getpid(), signal);
                libc::_exit(128 + signal);
            }
            libc::_exit(libc::WEXITSTATUS(status))
        }
    }
}
