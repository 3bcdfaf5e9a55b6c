//! The tracer's own system calls, made directly (`syscall(2)`), never
//! through the libc functions it interposes (`write`, `read`, `close`,
//! `fcntl`, ...): a record never re-enters a wrapper, and none of them
//! allocates, so the host wrappers stay safe in signal handlers.

use std::ffi::{c_int, c_long, CStr};

/// `errno` of the calling thread.
pub fn errno() -> c_int {
    // SAFETY: libc's per-thread errno location.
    unsafe { *libc::__errno_location() }
}

/// Set `errno` (a wrapper restores the program's after recording).
pub fn set_errno(value: c_int) {
    // SAFETY: libc's per-thread errno location.
    unsafe { *libc::__errno_location() = value };
}

fn ret(r: c_long) -> Result<c_long, c_int> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

pub fn write(fd: c_int, bytes: &[u8]) -> Result<usize, c_int> {
    // SAFETY: a buffer we own.
    ret(unsafe { libc::syscall(libc::SYS_write, fd, bytes.as_ptr(), bytes.len()) })
        .map(|n| n as usize)
}

pub fn read(fd: c_int, buf: &mut [u8]) -> Result<usize, c_int> {
    // SAFETY: a buffer we own.
    ret(unsafe { libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) })
        .map(|n| n as usize)
}

pub fn openat(dir: c_int, path: &CStr, flags: c_int, mode: u32) -> Result<c_int, c_int> {
    // SAFETY: a NUL-terminated path.
    ret(unsafe { libc::syscall(libc::SYS_openat, dir, path.as_ptr(), flags, mode) })
        .map(|fd| fd as c_int)
}

pub fn close(fd: c_int) {
    // SAFETY: closing a descriptor the tracer owns.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, min)`: a copy at the lowest free number
/// from `min`.
pub fn dup_from(fd: c_int, min: c_int) -> Result<c_int, c_int> {
    // SAFETY: plain descriptor operation.
    ret(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, min) })
        .map(|fd| fd as c_int)
}

pub fn fstat(fd: c_int) -> Option<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills the buffer.
    (unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) } == 0).then_some(st)
}

pub fn stat(path: &CStr) -> Option<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path; newfstatat fills the buffer.
    (unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            path.as_ptr(),
            &mut st,
            0,
        )
    } == 0)
        .then_some(st)
}

pub fn readlink(path: &CStr, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a NUL-terminated path and a buffer we own.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            path.as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    (n >= 0).then_some(n as usize)
}

pub fn getcwd(buf: &mut [u8]) -> Option<usize> {
    // SAFETY: a buffer we own; the kernel's getcwd returns the length
    // including the NUL.
    let n = unsafe { libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len()) };
    (n > 0).then(|| n as usize - 1)
}

pub fn getpid() -> u32 {
    // SAFETY: plain query.
    unsafe { libc::syscall(libc::SYS_getpid) as u32 }
}

pub fn getppid() -> u32 {
    // SAFETY: plain query.
    unsafe { libc::syscall(libc::SYS_getppid) as u32 }
}

pub fn gettid() -> u32 {
    // SAFETY: plain query.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Monotonic clock in nanoseconds (comparable across the machine's
/// processes). `clock_gettime` is answered in user space (vDSO).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Read a small file (`/proc/self/stat`, fdinfo) into `buf`.
pub fn read_file(path: &CStr, buf: &mut [u8]) -> Option<usize> {
    let fd = openat(libc::AT_FDCWD, path, libc::O_RDONLY | libc::O_CLOEXEC, 0).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match read(fd, &mut buf[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    close(fd);
    Some(len)
}
