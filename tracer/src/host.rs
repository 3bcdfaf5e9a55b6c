//! The host operations that pass descriptors and order processes, as
//! `host` lines: data on pipes and sockets (with `SCM_RIGHTS`), semaphores,
//! `fork`/`posix_spawn`/`exec`, reaping a child, `pidfd_getfd`, and copies
//! and closes of the descriptors the tracer follows. Each wrapper calls the
//! real function first and records only in a process that records, only on
//! pipes, sockets, semaphores and process operations; `errno` is left as the
//! call left it. The wrappers of `close`, `close_range`, `closefrom`,
//! `dup2`, `dup3` and `fcntl` also keep the program off the tracer's own
//! descriptors (`writer`): the program sees what it would see without the
//! tracer (`EBADF` for a number it never opened).
//!
//! No wrapper allocates (each line is built on the stack), so those a
//! signal handler may call (`write`, `read`, `sem_post`, ...) stay safe
//! there.

use crate::fds::{self, Object};
use crate::json::Line;
use crate::resolve::Slot;
use crate::{sys, writer};
use std::ffi::{c_char, c_int, c_long, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

macro_rules! real {
    ($slot:ident, $name:literal, $ty:ty) => {{
        static $slot: Slot = Slot::next($name);
        match $slot.get() {
            // SAFETY: the next definition of this libc function.
            Some(p) => std::mem::transmute::<usize, $ty>(p),
            None => {
                sys::set_errno(libc::ENOSYS);
                return -1;
            }
        }
    }};
}

/// This library's own file, to tell whether an environment keeps it.
static SELF_PATH: AtomicUsize = AtomicUsize::new(0);

pub fn at_load() {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address of one of our functions.
    if unsafe { libc::dladdr(at_load as *const c_void, &mut info) } != 0
        && !info.dli_fname.is_null()
    {
        SELF_PATH.store(info.dli_fname as usize, Ordering::Relaxed);
    }
}

/// A host line: `op`, `call`, `result`, times and thread, then `args`.
fn begin(op: &str, call: &str, result: Option<i64>, t_ns: u64) -> Line {
    let mut line = Line::new("host");
    writer::add_seq(&mut line);
    line.str("op", op);
    line.str("call", call);
    if let Some(result) = result {
        line.i64("result", result);
    }
    line.u64("t_ns", t_ns);
    line.u64("dur_ns", sys::now_ns().saturating_sub(t_ns));
    writer::add_tid(&mut line);
    line.open("args");
    line
}

fn end(line: &mut Line) {
    line.close();
    writer::emit(line);
}

/// Run `record` keeping `errno` and swallowing a panic.
fn recording(record: impl FnOnce()) {
    let errno = sys::errno();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(record));
    sys::set_errno(errno);
}

/// The descriptor's object, writing its `describe` line the first time.
fn object(fd: c_int) -> Option<Object> {
    let (object, fresh) = fds::classify(fd);
    let object = object?;
    if fresh {
        let mut line = begin("describe", "describe", None, sys::now_ns());
        line.i64("fd", fd.into());
        object.write(&mut line, "object");
        if let Object::Socket { ino } = object {
            fds::describe_socket(fd, ino, &mut line);
        }
        end(&mut line);
    }
    Some(object)
}

/// Descriptors passed with `SCM_RIGHTS` in a message's control data.
unsafe fn passed_fds(msg: *const libc::msghdr, out: &mut [i64; 256]) -> usize {
    let mut n = 0;
    if msg.is_null() || (*msg).msg_control.is_null() {
        return 0;
    }
    let mut cmsg = libc::CMSG_FIRSTHDR(msg);
    while !cmsg.is_null() {
        if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
            let header = libc::CMSG_LEN(0) as usize;
            let count = ((*cmsg).cmsg_len as usize).saturating_sub(header) / 4;
            let data = libc::CMSG_DATA(cmsg) as *const c_int;
            for i in 0..count {
                if n < out.len() {
                    out[n] = std::ptr::read_unaligned(data.add(i)).into();
                    n += 1;
                }
            }
        }
        cmsg = libc::CMSG_NXTHDR(msg, cmsg);
    }
    n
}

/// Record a transfer on `fd` that moved `bytes`: `op` is `send` or `recv`.
unsafe fn transfer(
    op: &str,
    call: &str,
    fd: c_int,
    bytes: isize,
    t_ns: u64,
    addr: *const libc::sockaddr,
    addr_len: u32,
    msg: *const libc::msghdr,
) {
    if bytes < 0 {
        return;
    }
    recording(|| {
        let Some(object) = object(fd) else { return };
        let mut line = begin(op, call, Some(bytes as i64), t_ns);
        line.i64("fd", fd.into());
        object.write(&mut line, "object");
        line.u64("bytes", bytes as u64);
        let mut text = [0u8; 1200];
        let n = fds::address(addr, addr_len, &mut text);
        if n > 0 {
            line.bytes_str("path", &text[..n], n);
        }
        let mut passed = [0i64; 256];
        let count = passed_fds(msg, &mut passed);
        if count > 0 {
            line.i64_list("fds", passed[..count].iter().copied());
            if op == "recv" {
                for &fd in &passed[..count] {
                    fds::follow(fd as c_int);
                }
            }
        }
        end(&mut line);
    });
}

type Io = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    let real = real!(SLOT, c"write", Io);
    if !writer::active() {
        return real(fd, buf as *mut c_void, n);
    }
    if writer::is_ours(fd) {
        sys::set_errno(libc::EBADF);
        return -1;
    }
    let t = sys::now_ns();
    let r = real(fd, buf as *mut c_void, n);
    transfer(
        "send",
        "write",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    let real = real!(SLOT, c"read", Io);
    if !writer::active() {
        return real(fd, buf, n);
    }
    if writer::is_ours(fd) {
        sys::set_errno(libc::EBADF);
        return -1;
    }
    let t = sys::now_ns();
    let r = real(fd, buf, n);
    transfer(
        "recv",
        "read",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, size: usize) -> isize {
    type F = unsafe extern "C" fn(c_int, *mut c_void, usize, usize) -> isize;
    let real = real!(SLOT, c"__read_chk", F);
    if !writer::active() {
        return real(fd, buf, n, size);
    }
    let t = sys::now_ns();
    let r = real(fd, buf, n, size);
    transfer(
        "recv",
        "read",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

type Vec_ = unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize;

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let real = real!(SLOT, c"writev", Vec_);
    if !writer::active() {
        return real(fd, iov, count);
    }
    let t = sys::now_ns();
    let r = real(fd, iov, count);
    transfer(
        "send",
        "writev",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let real = real!(SLOT, c"readv", Vec_);
    if !writer::active() {
        return real(fd, iov, count);
    }
    let t = sys::now_ns();
    let r = real(fd, iov, count);
    transfer(
        "recv",
        "readv",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

type SendRecv = unsafe extern "C" fn(c_int, *mut c_void, usize, c_int) -> isize;

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize {
    let real = real!(SLOT, c"send", SendRecv);
    if !writer::active() {
        return real(fd, buf as *mut c_void, n, flags);
    }
    let t = sys::now_ns();
    let r = real(fd, buf as *mut c_void, n, flags);
    transfer(
        "send",
        "send",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize {
    let real = real!(SLOT, c"recv", SendRecv);
    if !writer::active() {
        return real(fd, buf, n, flags);
    }
    let t = sys::now_ns();
    let r = real(fd, buf, n, flags);
    transfer(
        "recv",
        "recv",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    size: usize,
    flags: c_int,
) -> isize {
    type F = unsafe extern "C" fn(c_int, *mut c_void, usize, usize, c_int) -> isize;
    let real = real!(SLOT, c"__recv_chk", F);
    if !writer::active() {
        return real(fd, buf, n, size, flags);
    }
    let t = sys::now_ns();
    let r = real(fd, buf, n, size, flags);
    transfer(
        "recv",
        "recv",
        fd,
        r,
        t,
        std::ptr::null(),
        0,
        std::ptr::null(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    addr: *const libc::sockaddr,
    len: u32,
) -> isize {
    type F = unsafe extern "C" fn(
        c_int,
        *const c_void,
        usize,
        c_int,
        *const libc::sockaddr,
        u32,
    ) -> isize;
    let real = real!(SLOT, c"sendto", F);
    if !writer::active() {
        return real(fd, buf, n, flags, addr, len);
    }
    let t = sys::now_ns();
    let r = real(fd, buf, n, flags, addr, len);
    transfer("send", "sendto", fd, r, t, addr, len, std::ptr::null());
    r
}

type RecvFrom =
    unsafe extern "C" fn(c_int, *mut c_void, usize, c_int, *mut libc::sockaddr, *mut u32) -> isize;

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut u32,
) -> isize {
    let real = real!(SLOT, c"recvfrom", RecvFrom);
    if !writer::active() {
        return real(fd, buf, n, flags, addr, len);
    }
    let t = sys::now_ns();
    let r = real(fd, buf, n, flags, addr, len);
    let addr_len = if r >= 0 && !addr.is_null() && !len.is_null() {
        *len
    } else {
        0
    };
    transfer(
        "recv",
        "recvfrom",
        fd,
        r,
        t,
        addr,
        addr_len,
        std::ptr::null(),
    );
    r
}

#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    size: usize,
    flags: c_int,
    addr: *mut libc::sockaddr,
    len: *mut u32,
) -> isize {
    type F = unsafe extern "C" fn(
        c_int,
        *mut c_void,
        usize,
        usize,
        c_int,
        *mut libc::sockaddr,
        *mut u32,
    ) -> isize;
    let real = real!(SLOT, c"__recvfrom_chk", F);
    if !writer::active() {
        return real(fd, buf, n, size, flags, addr, len);
    }
    let t = sys::now_ns();
    let r = real(fd, buf, n, size, flags, addr, len);
    let addr_len = if r >= 0 && !addr.is_null() && !len.is_null() {
        *len
    } else {
        0
    };
    transfer(
        "recv",
        "recvfrom",
        fd,
        r,
        t,
        addr,
        addr_len,
        std::ptr::null(),
    );
    r
}

type Msg = unsafe extern "C" fn(c_int, *mut libc::msghdr, c_int) -> isize;

#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
    let real = real!(SLOT, c"sendmsg", Msg);
    if !writer::active() {
        return real(fd, msg as *mut libc::msghdr, flags);
    }
    let t = sys::now_ns();
    let r = real(fd, msg as *mut libc::msghdr, flags);
    if r >= 0 && !msg.is_null() {
        let (addr, len) = ((*msg).msg_name as *const libc::sockaddr, (*msg).msg_namelen);
        transfer("send", "sendmsg", fd, r, t, addr, len, msg);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
    let real = real!(SLOT, c"recvmsg", Msg);
    if !writer::active() {
        return real(fd, msg, flags);
    }
    let t = sys::now_ns();
    let r = real(fd, msg, flags);
    if r >= 0 && !msg.is_null() {
        let (addr, len) = ((*msg).msg_name as *const libc::sockaddr, (*msg).msg_namelen);
        transfer("recv", "recvmsg", fd, r, t, addr, len, msg);
    }
    r
}

// Semaphores.

/// Run a semaphore operation; record it when it succeeded.
unsafe fn semaphore(
    op: &str,
    call: &str,
    sem: *mut libc::sem_t,
    real: impl FnOnce() -> c_int,
) -> c_int {
    if !writer::active() {
        return real();
    }
    let t = sys::now_ns();
    let r = real();
    if r != 0 || sem.is_null() {
        return r;
    }
    recording(|| {
        // Memory private to this process orders only its own threads.
        let Some((dev, ino, offset)) = fds::backing(sem as usize) else {
            return;
        };
        let mut line = begin(op, call, Some(0), t);
        let mut buf = [0u8; 80];
        let text = writer::format_args_to(&mut buf, format_args!("sem:{dev}:{ino}+{offset}"));
        line.bytes_str("object", text, text.len());
        end(&mut line);
    });
    r
}

type Sem = unsafe extern "C" fn(*mut libc::sem_t) -> c_int;

#[no_mangle]
pub unsafe extern "C" fn sem_post(sem: *mut libc::sem_t) -> c_int {
    let real = real!(SLOT, c"sem_post", Sem);
    semaphore("sem_post", "sem_post", sem, || real(sem))
}

#[no_mangle]
pub unsafe extern "C" fn sem_wait(sem: *mut libc::sem_t) -> c_int {
    let real = real!(SLOT, c"sem_wait", Sem);
    semaphore("sem_wait", "sem_wait", sem, || real(sem))
}

#[no_mangle]
pub unsafe extern "C" fn sem_trywait(sem: *mut libc::sem_t) -> c_int {
    let real = real!(SLOT, c"sem_trywait", Sem);
    semaphore("sem_wait", "sem_trywait", sem, || real(sem))
}

#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(sem: *mut libc::sem_t, abs: *const libc::timespec) -> c_int {
    type F = unsafe extern "C" fn(*mut libc::sem_t, *const libc::timespec) -> c_int;
    let real = real!(SLOT, c"sem_timedwait", F);
    semaphore("sem_wait", "sem_timedwait", sem, || real(sem, abs))
}

#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(
    sem: *mut libc::sem_t,
    clock: libc::clockid_t,
    abs: *const libc::timespec,
) -> c_int {
    type F =
        unsafe extern "C" fn(*mut libc::sem_t, libc::clockid_t, *const libc::timespec) -> c_int;
    let real = real!(SLOT, c"sem_clockwait", F);
    semaphore("sem_wait", "sem_clockwait", sem, || real(sem, clock, abs))
}

// Processes.

/// Whether an environment keeps the tracer: `LD_PRELOAD` names this
/// library and `IPC_TRACE_DIR` is set.
unsafe fn env_traced(envp: *const *const c_char) -> bool {
    if envp.is_null() {
        return false;
    }
    let me = SELF_PATH.load(Ordering::Relaxed) as *const c_char;
    let me = if me.is_null() {
        &b"libipc_tracer"[..]
    } else {
        CStr::from_ptr(me).to_bytes()
    };
    let (mut preload, mut dir) = (false, false);
    let mut p = envp;
    while !(*p).is_null() {
        let entry = CStr::from_ptr(*p).to_bytes();
        if let Some(list) = entry.strip_prefix(b"LD_PRELOAD=") {
            preload = list
                .split(|&b| b == b':' || b == b' ')
                .any(|item| item == me);
        } else if let Some(value) = entry.strip_prefix(b"IPC_TRACE_DIR=") {
            dir = !value.is_empty();
        }
        p = p.add(1);
    }
    preload && dir
}

/// Whether `path` (when it names a file) is set-user-ID or set-group-ID.
unsafe fn setid(path: *const c_char) -> Option<bool> {
    if path.is_null() {
        return None;
    }
    let path = CStr::from_ptr(path);
    if !path.to_bytes().contains(&b'/') {
        return None;
    }
    sys::stat(path).map(|st| st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0)
}

fn environ() -> *const *const c_char {
    extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: reading libc's environment pointer.
    unsafe { environ }
}

/// Record a program start (`exec` before the call, `spawn` after).
unsafe fn start(
    op: &str,
    call: &str,
    result: Option<i64>,
    t: u64,
    path: *const c_char,
    envp: *const *const c_char,
    pid: Option<u32>,
    fd: Option<c_int>,
) {
    recording(|| {
        let mut line = begin(op, call, result, t);
        if !path.is_null() {
            line.bytes_str("path", CStr::from_ptr(path).to_bytes(), 1024);
        }
        if let Some(fd) = fd {
            line.i64("fd", fd.into());
        }
        if let Some(pid) = pid {
            line.u64("pid", pid.into());
        }
        line.bool("env_traced", env_traced(envp));
        if let Some(setid) = setid(path) {
            line.bool("setid", setid);
        }
        end(&mut line);
    });
}

#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    type F = unsafe extern "C" fn() -> libc::pid_t;
    let real = real!(SLOT, c"fork", F);
    let t = sys::now_ns();
    let r = real();
    if r > 0 && writer::active() {
        recording(|| {
            let mut line = begin("fork", "fork", Some(r.into()), t);
            line.u64("pid", r as u64);
            end(&mut line);
        });
    }
    r
}

type Spawn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const c_void,
    *const c_void,
    *const *const c_char,
    *const *const c_char,
) -> c_int;

/// A `posix_spawn`/`posix_spawnp` that returned `r`: the child it started,
/// recorded as a spawn.
unsafe fn spawned(
    call: &str,
    r: c_int,
    pid: *const libc::pid_t,
    t: u64,
    path: *const c_char,
    envp: *const *const c_char,
) {
    if r == 0 && writer::active() {
        let child = (!pid.is_null()).then(|| *pid as u32);
        start("spawn", call, Some(0), t, path, envp, child, None);
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: *const c_char,
    actions: *const c_void,
    attrs: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = real!(SLOT, c"posix_spawn", Spawn);
    let t = sys::now_ns();
    let r = real(pid, path, actions, attrs, argv, envp);
    spawned("posix_spawn", r, pid, t, path, envp);
    r
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: *const c_char,
    actions: *const c_void,
    attrs: *const c_void,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = real!(SLOT, c"posix_spawnp", Spawn);
    let t = sys::now_ns();
    let r = real(pid, file, actions, attrs, argv, envp);
    spawned("posix_spawnp", r, pid, t, file, envp);
    r
}

/// An `exec`: record it before the call (only in the process that owns the
/// file: a `vfork` child shares the parent's memory and must not touch
/// it), and its failure when the call returns.
unsafe fn exec(
    call: &str,
    path: *const c_char,
    envp: *const *const c_char,
    fd: Option<c_int>,
    real: impl FnOnce() -> c_int,
) -> c_int {
    let records = writer::active() && sys::getpid() == writer::pid();
    let t = sys::now_ns();
    if records {
        start("exec", call, None, t, path, envp, None, fd);
    }
    let r = real();
    if records {
        let errno = sys::errno();
        recording(|| {
            let mut line = begin("exec_failed", call, Some(-1), t);
            line.close();
            line.i64("errno", errno.into());
            writer::emit(&mut line);
        });
    }
    r
}

type Exec =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type ExecNoEnv = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;

#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = real!(SLOT, c"execve", Exec);
    exec("execve", path, envp, None, || real(path, argv, envp))
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let real = real!(SLOT, c"execvpe", Exec);
    exec("execvpe", file, envp, None, || real(file, argv, envp))
}

#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    let real = real!(SLOT, c"execv", ExecNoEnv);
    exec("execv", path, environ(), None, || real(path, argv))
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    let real = real!(SLOT, c"execvp", ExecNoEnv);
    exec("execvp", file, environ(), None, || real(file, argv))
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
    let real = real!(SLOT, c"fexecve", F);
    exec("fexecve", std::ptr::null(), envp, Some(fd), || {
        real(fd, argv, envp)
    })
}

#[no_mangle]
pub unsafe extern "C" fn execveat(
    dir: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(
        c_int,
        *const c_char,
        *const *const c_char,
        *const *const c_char,
        c_int,
    ) -> c_int;
    let real = real!(SLOT, c"execveat", F);
    exec("execveat", path, envp, Some(dir), || {
        real(dir, path, argv, envp, flags)
    })
}

/// Record a reaped child (`status` as `waitpid` gives it) when it ended.
unsafe fn reaped(call: &str, pid: libc::pid_t, status: Option<c_int>, t: u64) {
    if pid <= 0 || !writer::active() {
        return;
    }
    if let Some(s) = status {
        if !(libc::WIFEXITED(s) || libc::WIFSIGNALED(s)) {
            return;
        }
    }
    recording(|| {
        let mut line = begin("wait", call, Some(pid.into()), t);
        line.u64("pid", pid as u64);
        if let Some(s) = status {
            line.i64("status", s.into());
        }
        end(&mut line);
    });
}

/// `reaped` for the calls that fill a `waitpid` status.
unsafe fn reaped_with(call: &str, pid: libc::pid_t, status: *const c_int, t: u64) {
    if pid > 0 && writer::active() {
        let s = (!status.is_null()).then(|| *status);
        reaped(call, pid, s, t);
    }
}

#[no_mangle]
pub unsafe extern "C" fn waitpid(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
) -> libc::pid_t {
    type F = unsafe extern "C" fn(libc::pid_t, *mut c_int, c_int) -> libc::pid_t;
    let real = real!(SLOT, c"waitpid", F);
    let t = sys::now_ns();
    let r = real(pid, status, options);
    reaped_with("waitpid", r, status, t);
    r
}

#[no_mangle]
pub unsafe extern "C" fn wait(status: *mut c_int) -> libc::pid_t {
    type F = unsafe extern "C" fn(*mut c_int) -> libc::pid_t;
    let real = real!(SLOT, c"wait", F);
    let t = sys::now_ns();
    let r = real(status);
    reaped_with("wait", r, status, t);
    r
}

#[no_mangle]
pub unsafe extern "C" fn wait3(
    status: *mut c_int,
    options: c_int,
    usage: *mut libc::rusage,
) -> libc::pid_t {
    type F = unsafe extern "C" fn(*mut c_int, c_int, *mut libc::rusage) -> libc::pid_t;
    let real = real!(SLOT, c"wait3", F);
    let t = sys::now_ns();
    let r = real(status, options, usage);
    reaped_with("wait3", r, status, t);
    r
}

#[no_mangle]
pub unsafe extern "C" fn wait4(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
    usage: *mut libc::rusage,
) -> libc::pid_t {
    type F = unsafe extern "C" fn(libc::pid_t, *mut c_int, c_int, *mut libc::rusage) -> libc::pid_t;
    let real = real!(SLOT, c"wait4", F);
    let t = sys::now_ns();
    let r = real(pid, status, options, usage);
    reaped_with("wait4", r, status, t);
    r
}

#[no_mangle]
pub unsafe extern "C" fn waitid(
    idtype: libc::idtype_t,
    id: libc::id_t,
    info: *mut libc::siginfo_t,
    options: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(libc::idtype_t, libc::id_t, *mut libc::siginfo_t, c_int) -> c_int;
    let real = real!(SLOT, c"waitid", F);
    let t = sys::now_ns();
    let r = real(idtype, id, info, options);
    if r == 0 && !info.is_null() && writer::active() && options & libc::WNOWAIT == 0 {
        let pid = (*info).si_pid();
        let code = (*info).si_code;
        let value = (*info).si_status();
        let status = match code {
            libc::CLD_EXITED => Some((value & 0xff) << 8),
            libc::CLD_KILLED => Some(value & 0x7f),
            libc::CLD_DUMPED => Some((value & 0x7f) | 0x80),
            _ => None,
        };
        if let Some(status) = status {
            reaped("waitid", pid, Some(status), t);
        }
    }
    r
}

// pidfds.

#[no_mangle]
pub unsafe extern "C" fn pidfd_open(pid: libc::pid_t, flags: c_uint) -> c_int {
    type F = unsafe extern "C" fn(libc::pid_t, c_uint) -> c_int;
    let real = real!(SLOT, c"pidfd_open", F);
    let t = sys::now_ns();
    let r = real(pid, flags);
    opened_pidfd("pidfd_open", pid, r, t);
    r
}

fn opened_pidfd(call: &str, pid: libc::pid_t, r: c_int, t: u64) {
    if r >= 0 && writer::active() {
        recording(|| {
            let mut line = begin("pidfd_open", call, Some(r.into()), t);
            line.u64("pid", pid as u64);
            line.i64("new_fd", r.into());
            end(&mut line);
        });
    }
}

/// The pid a pidfd refers to (`Pid:` in its fdinfo).
fn pidfd_pid(pidfd: c_int) -> Option<u32> {
    let mut path = [0u8; 48];
    let n = writer::format_args_to(&mut path, format_args!("/proc/self/fdinfo/{pidfd}\0")).len();
    let path = CStr::from_bytes_with_nul(&path[..n]).ok()?;
    let mut buf = [0u8; 1024];
    let n = sys::read_file(path, &mut buf)?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[no_mangle]
pub unsafe extern "C" fn pidfd_getfd(pidfd: c_int, target: c_int, flags: c_uint) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, c_uint) -> c_int;
    let real = real!(SLOT, c"pidfd_getfd", F);
    let t = sys::now_ns();
    let r = real(pidfd, target, flags);
    took_fd("pidfd_getfd", pidfd, target, r, t);
    r
}

fn took_fd(call: &str, pidfd: c_int, target: c_int, r: c_int, t: u64) {
    if r >= 0 && writer::active() {
        fds::follow(r);
        recording(|| {
            let mut line = begin("pidfd_getfd", call, Some(r.into()), t);
            line.i64("fd", pidfd.into());
            if let Some(pid) = pidfd_pid(pidfd) {
                line.u64("pid", pid.into());
            }
            line.i64("target_fd", target.into());
            line.i64("new_fd", r.into());
            end(&mut line);
        });
    }
}

/// `syscall(2)`, for the pidfd calls programs make through it (glibc
/// before 2.36 has no wrappers; PyTorch's expandable segments call
/// `syscall(SYS_pidfd_getfd, ...)`). Declared with six fixed arguments as
/// `fcntl` is: on the Linux ABIs this library builds for, a variadic call
/// passes them where a fixed one does, and a call with fewer leaves values
/// the kernel ignores.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    type F = unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;
    let real = real!(SLOT, c"syscall", F);
    match number {
        libc::SYS_pidfd_open => {
            let t = sys::now_ns();
            let r = real(number, a1, a2, a3, a4, a5, a6);
            opened_pidfd("syscall(pidfd_open)", a1 as libc::pid_t, r as c_int, t);
            r
        }
        libc::SYS_pidfd_getfd => {
            let t = sys::now_ns();
            let r = real(number, a1, a2, a3, a4, a5, a6);
            took_fd(
                "syscall(pidfd_getfd)",
                a1 as c_int,
                a2 as c_int,
                r as c_int,
                t,
            );
            r
        }
        _ => real(number, a1, a2, a3, a4, a5, a6),
    }
}

// Descriptor copies and closes: keep the program off the tracer's
// descriptors, forget what a number meant, record followed descriptors.

fn closed(call: &str, fd: c_int, t: u64) {
    recording(|| {
        let mut line = begin("close", call, Some(0), t);
        line.i64("fd", fd.into());
        end(&mut line);
    });
}

fn copied(call: &str, fd: c_int, new_fd: c_int, t: u64) {
    recording(|| {
        let mut line = begin("dup", call, Some(new_fd.into()), t);
        line.i64("fd", fd.into());
        line.i64("new_fd", new_fd.into());
        end(&mut line);
    });
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    let real = real!(SLOT, c"close", F);
    if !writer::active() {
        return real(fd);
    }
    if writer::is_ours(fd) {
        sys::set_errno(libc::EBADF);
        return -1;
    }
    fds::forget(fd);
    let t = sys::now_ns();
    let r = real(fd);
    // A close that fails with EINTR has still closed the number on Linux.
    if fds::unfollow(fd) && (r == 0 || sys::errno() == libc::EINTR) {
        closed("close", fd, t);
    }
    r
}

/// `close_range` around the tracer's descriptors.
unsafe fn close_range_around(first: c_uint, last: c_uint, flags: c_uint, call: &str) -> c_int {
    type F = unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int;
    let real = real!(SLOT, c"close_range", F);
    if !writer::active() || first > last {
        return real(first, last, flags as c_int);
    }
    let t = sys::now_ns();
    let mut from = first;
    let mut result = 0;
    for ours in writer::ours_in(first, last).into_iter().flatten() {
        let ours = ours as c_uint;
        if ours > from {
            let r = real(from, ours - 1, flags as c_int);
            if r != 0 {
                result = r;
            }
        }
        from = ours + 1;
    }
    if from <= last {
        let r = real(from, last, flags as c_int);
        if r != 0 {
            result = r;
        }
    }
    if result == 0 && flags & libc::CLOSE_RANGE_CLOEXEC == 0 {
        fds::forget_range(first, last);
        let errno = sys::errno();
        fds::unfollow_range(first, last, |fd| closed(call, fd, t));
        sys::set_errno(errno);
    }
    result
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    close_range_around(first, last, flags as c_uint, "close_range")
}

#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    type F = unsafe extern "C" fn(c_int);
    static SLOT: Slot = Slot::next(c"closefrom");
    let Some(real) = SLOT.get() else { return };
    let real: F = std::mem::transmute(real);
    if !writer::active() {
        return real(low);
    }
    let errno = sys::errno();
    if close_range_around(low.max(0) as c_uint, c_uint::MAX, 0, "closefrom") != 0 {
        // No close_range (an old kernel): close one number at a time.
        let limit = libc::sysconf(libc::_SC_OPEN_MAX).clamp(0, 1 << 20) as c_int;
        for fd in low.max(0)..limit {
            if !writer::is_ours(fd) {
                close(fd);
            }
        }
    }
    sys::set_errno(errno);
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    let real = real!(SLOT, c"dup", F);
    if !writer::active() {
        return real(fd);
    }
    if writer::is_ours(fd) {
        sys::set_errno(libc::EBADF);
        return -1;
    }
    let t = sys::now_ns();
    let r = real(fd);
    if r >= 0 {
        fds::forget(r);
        if fds::followed(fd) {
            fds::follow(r);
            copied("dup", fd, r, t);
        }
    }
    r
}

/// `dup2`/`dup3`: free the number if the tracer holds it, forget what it
/// meant, record it when followed descriptors are involved.
unsafe fn dup_onto(call: &str, old: c_int, new: c_int, real: impl FnOnce() -> c_int) -> c_int {
    if !writer::active() {
        return real();
    }
    if writer::is_ours(old) {
        sys::set_errno(libc::EBADF);
        return -1;
    }
    writer::yield_number(new);
    let t = sys::now_ns();
    let r = real();
    if r >= 0 && old != new {
        fds::forget(new);
        let errno = sys::errno();
        if fds::unfollow(new) {
            closed(call, new, t);
        }
        if fds::followed(old) {
            fds::follow(new);
            copied(call, old, new, t);
        }
        sys::set_errno(errno);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int) -> c_int;
    let real = real!(SLOT, c"dup2", F);
    dup_onto("dup2", old, new, || real(old, new))
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    let real = real!(SLOT, c"dup3", F);
    dup_onto("dup3", old, new, || real(old, new, flags))
}

/// `fcntl` takes a third argument of any type; an integer register
/// carries every one of them on the ABIs this builds for.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    let real = real!(SLOT, c"fcntl", F);
    if !writer::active() {
        return real(fd, cmd, arg);
    }
    if writer::is_ours(fd) {
        sys::set_errno(libc::EBADF);
        return -1;
    }
    let t = sys::now_ns();
    let r = real(fd, cmd, arg);
    if r >= 0 && (cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC) {
        fds::forget(r);
        if fds::followed(fd) {
            let errno = sys::errno();
            fds::follow(r);
            copied("fcntl", fd, r, t);
            sys::set_errno(errno);
        }
    }
    r
}
