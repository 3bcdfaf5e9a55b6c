//! `PidfdGetfd`: a copy of another process's descriptor, taken with
//! `pidfd_open(pid)` and `pidfd_getfd(pidfd, fd)` instead of a Unix socket
//! (<https://man7.org/linux/man-pages/man2/pidfd_getfd.2.html>).
//!
//! No CUDA call: the worker needs no context for it. `pidfd_getfd` needs
//! ptrace-attach permission over the owner (`PTRACE_MODE_ATTACH_REALCREDS`,
//! and Yama's `ptrace_scope`); a refusal is an answer, not a harness error.

use crate::cuda::protocol::WireError;
use crate::errors::{Dialect, ErrorKind};
use nix::libc;

/// Under Yama's `ptrace_scope` 1 only an ancestor may take a process's
/// descriptors; a worker lets any process of its user do it, as a producer
/// that hands out descriptors this way allows its consumers (with
/// `PR_SET_PTRACER`). Scopes 2 and 3 still refuse (`EPERM`), and without
/// Yama the call fails harmlessly (vmm.pidfd.same-namespace).
pub(crate) fn allow_any_tracer() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// The error kind an `errno` of `pidfd_open`/`pidfd_getfd` reads as
/// (vmm.pidfd.*): `ESRCH` no such process in the caller's PID namespace,
/// `EPERM` no ptrace permission, `EBADF` no such descriptor in the owner,
/// `ENOSYS` a kernel older than 5.6. Any other is a harness error.
pub(crate) fn errno_kind(errno: i32) -> Option<ErrorKind> {
    match errno {
        libc::ESRCH => Some(ErrorKind::NotFound),
        libc::EPERM => Some(ErrorKind::NotPermitted),
        libc::EBADF => Some(ErrorKind::InvalidValue),
        libc::ENOSYS => Some(ErrorKind::NotSupported),
        _ => None,
    }
}

fn errno_error(call: &str, dialect: Dialect) -> WireError {
    let e = std::io::Error::last_os_error();
    let errno = e.raw_os_error().unwrap_or(0);
    match errno_kind(errno).and_then(|k| k.code(dialect)) {
        Some(code) => WireError::Api(code),
        None => WireError::Harness(format!("{call}: {e}")),
    }
}

/// Descriptor `fd` of process `pid` (as this process's PID namespace names
/// it), as a new descriptor of this process; the pidfd is closed again.
pub(crate) fn pidfd_getfd(pid: u32, fd: i32, dialect: Dialect) -> Result<i32, WireError> {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(WireError::Harness(format!(
            "pid {pid} does not fit a pid_t"
        )));
    };
    // SAFETY: plain system calls on integers; the pidfd is ours to close.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        if pidfd < 0 {
            return Err(errno_error("pidfd_open", dialect));
        }
        let pidfd = pidfd as libc::c_int;
        let copy = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0);
        let result = if copy < 0 {
            Err(errno_error("pidfd_getfd", dialect))
        } else {
            Ok(copy as i32)
        };
        libc::close(pidfd);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_process_takes_its_own_descriptor_and_a_missing_one_is_ebadf() {
        let me = std::process::id();
        let file = std::fs::File::open("/dev/null").unwrap();
        match pidfd_getfd(me, file.as_raw_fd(), Dialect::Driver) {
            Ok(copy) => {
                assert_ne!(copy, file.as_raw_fd());
                // SAFETY: the copy is ours.
                unsafe { libc::close(copy) };
                // A number the process does not hold: EBADF.
                assert_eq!(
                    pidfd_getfd(me, 999_999, Dialect::Driver),
                    Err(WireError::Api(1))
                );
            }
            // A kernel before 5.6, or a sandbox that forbids the calls.
            Err(e) => eprintln!("skipped: pidfd_getfd of our own descriptor: {e:?}"),
        }
    }

    #[test]
    fn errnos_read_as_named_kinds() {
        assert_eq!(errno_kind(libc::ESRCH), Some(ErrorKind::NotFound));
        assert_eq!(errno_kind(libc::EPERM), Some(ErrorKind::NotPermitted));
        assert_eq!(errno_kind(libc::EBADF), Some(ErrorKind::InvalidValue));
        assert_eq!(errno_kind(libc::ENOSYS), Some(ErrorKind::NotSupported));
        assert_eq!(errno_kind(libc::EINTR), None);
    }
}
