//! The per-process trace file.
//!
//! When the tracer loads into a program image with `IPC_TRACE_DIR` set
//! (`at_load`, the library's constructor) it opens the directory once and
//! creates the image's own file relative to it with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` (`trace-<pid>.jsonl`, or the next free
//! `trace-<pid>.<n>.jsonl`), and writes the header at once, before any
//! call: a process the tracer loaded into always has a file. A forked child
//! creates its own the same way as it starts (`after_fork_in_child`, a
//! `pthread_atfork` handler). Both descriptors are moved to high numbers,
//! out of the way of the program's own (which the kernel hands out lowest
//! first), and the wrappers of `close`, `close_range`, `closefrom`, `dup2`,
//! `dup3` and `fcntl` keep the program from closing or replacing them:
//! the tracer never writes into a descriptor it no longer owns.
//!
//! Each line is one `write(2)` on an `O_APPEND` descriptor, so a crash
//! keeps every finished line. When a write fails the tracer stops
//! recording and says so once on stderr; the program goes on.

use crate::json::Line;
use crate::sys;
use std::cell::Cell;
use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};

/// The environment variable naming the trace directory
/// (`ipc_harness::trace_record::DIR_ENV`; a test holds them equal).
pub const DIR_ENV: &CStr = c"IPC_TRACE_DIR";
/// The record format's coverage this tracer writes
/// (`ipc_harness::trace_record::COVERAGE`).
pub const COVERAGE: u32 = 1;
/// The driver symbol list the hooks were checked against.
pub const SYMBOLS: &str = "libcuda-580.159.04";

/// The trace directory (`O_PATH`), -1 when not recording.
static DIR_FD: AtomicI32 = AtomicI32::new(-1);
/// This image's trace file, -1 when not recording.
static FILE_FD: AtomicI32 = AtomicI32::new(-1);
/// The pid the file belongs to.
static PID: AtomicU32 = AtomicU32::new(0);
static SEQ: AtomicU64 = AtomicU64::new(0);
static STOPPED: AtomicBool = AtomicBool::new(false);
/// Writers between reading `FILE_FD` and finishing their `write`: moving
/// the descriptor waits for them.
static IN_FLIGHT: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// Whether this process records.
#[inline]
pub fn active() -> bool {
    FILE_FD.load(Ordering::Relaxed) >= 0
}

/// The pid the current file belongs to (0 when not recording).
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// Whether `fd` is one of the tracer's own descriptors.
#[inline]
pub fn is_ours(fd: c_int) -> bool {
    fd >= 0 && (fd == FILE_FD.load(Ordering::Relaxed) || fd == DIR_FD.load(Ordering::Relaxed))
}

/// The tracer's descriptors in `[first, last]`, in order.
pub fn ours_in(first: u32, last: u32) -> [Option<c_int>; 2] {
    let mut out = [
        Some(DIR_FD.load(Ordering::Relaxed)),
        Some(FILE_FD.load(Ordering::Relaxed)),
    ];
    for slot in &mut out {
        *slot = slot.filter(|&fd| fd >= 0 && (fd as u32) >= first && (fd as u32) <= last);
    }
    if out[0] > out[1] && out[1].is_some() {
        out.swap(0, 1);
    }
    out
}

fn tid() -> u32 {
    TID.with(|t| {
        let mut v = t.get();
        if v == 0 {
            v = sys::gettid();
            t.set(v);
        }
        v
    })
}

/// Add the next sequence number to a new line.
#[inline]
pub fn add_seq(line: &mut Line) {
    line.u64("seq", SEQ.fetch_add(1, Ordering::Relaxed));
}

/// Add the caller's thread id.
pub fn add_tid(line: &mut Line) {
    line.u64("tid", tid().into());
}

fn say(message: &[u8]) {
    let _ = sys::write(2, message);
}

fn stop(why: &str, err: c_int) {
    if STOPPED.swap(true, Ordering::Relaxed) {
        return;
    }
    FILE_FD.store(-1, Ordering::SeqCst);
    let mut msg = [0u8; 256];
    let text = format_args_to(
        &mut msg,
        format_args!(
            "ipc-tracer: {why}: {}; recording stopped, the program goes on\n",
            std::io::Error::from_raw_os_error(err)
        ),
    );
    say(text);
}

/// Format into a fixed buffer (truncating), without allocating.
pub fn format_args_to<'a>(buf: &'a mut [u8], args: std::fmt::Arguments) -> &'a [u8] {
    use std::io::Write as _;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = cursor.write_fmt(args);
    let n = cursor.position() as usize;
    &buf[..n]
}

/// Write one finished line to this image's file.
pub fn emit(line: &mut Line) {
    let bytes = line.finish();
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let fd = FILE_FD.load(Ordering::SeqCst);
    let result = if fd >= 0 {
        sys::write(fd, bytes)
    } else {
        Ok(bytes.len())
    };
    IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    match result {
        Ok(n) if n == bytes.len() => {}
        Ok(_) => stop("cannot write the trace file", libc::ENOSPC),
        Err(e) => stop("cannot write the trace file", e),
    }
}

/// Where the tracer's descriptors go: well above the numbers a program
/// gets (the kernel hands out the lowest free one), below the soft limit.
fn high_base() -> c_int {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur.min(1024) as c_int
    } else {
        1024
    };
    if soft >= 64 {
        soft * 3 / 4
    } else {
        (soft / 2).max(3)
    }
}

/// Move `fd` to a high number (closing the original), or keep it where it
/// is when no high number is free.
fn to_high(fd: c_int) -> c_int {
    match sys::dup_from(fd, high_base()) {
        Ok(high) => {
            sys::close(fd);
            high
        }
        Err(_) => fd,
    }
}

/// The program wants `fd` (`dup2`/`dup3` onto it): if it is one of the
/// tracer's, move the tracer's elsewhere first and free the number.
pub fn yield_number(fd: c_int) {
    for slot in [&FILE_FD, &DIR_FD] {
        let current = slot.load(Ordering::SeqCst);
        if current < 0 || current != fd {
            continue;
        }
        let Ok(moved) = sys::dup_from(current, fd + 1) else {
            stop("cannot move the trace descriptor", sys::errno());
            continue;
        };
        slot.store(moved, Ordering::SeqCst);
        // A writer that read the old number finishes before it is reused;
        // bounded, in case the caller interrupted a writer of its own
        // thread (a signal handler).
        let mut spins = 0u32;
        while IN_FLIGHT.load(Ordering::SeqCst) != 0 && spins < 1_000_000 {
            std::hint::spin_loop();
            spins += 1;
        }
        sys::close(current);
    }
}

fn env_dir() -> Option<&'static CStr> {
    // SAFETY: getenv of a NUL-terminated name; the value lives in environ.
    let value = unsafe { libc::getenv(DIR_ENV.as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    let value = unsafe { CStr::from_ptr(value) };
    (!value.is_empty()).then_some(value)
}

/// `trace-<pid>.jsonl` or `trace-<pid>.<index>.jsonl`, NUL-terminated.
fn file_name(buf: &mut [u8; 64], pid: u32, index: u32) -> &CStr {
    let mut end = if index <= 1 {
        format_args_to(&mut buf[..], format_args!("trace-{pid}.jsonl")).len()
    } else {
        format_args_to(&mut buf[..], format_args!("trace-{pid}.{index}.jsonl")).len()
    };
    end = end.min(buf.len() - 1);
    buf[end] = 0;
    CStr::from_bytes_until_nul(&buf[..=end]).unwrap_or(c"trace-invalid.jsonl")
}

/// Create this image's file in the directory (never following a link,
/// never reusing an existing file).
fn create_file(dir: c_int, pid: u32) -> Result<c_int, c_int> {
    let flags = libc::O_WRONLY
        | libc::O_CREAT
        | libc::O_EXCL
        | libc::O_NOFOLLOW
        | libc::O_APPEND
        | libc::O_CLOEXEC;
    let mut last = libc::EEXIST;
    for index in 1..=64 {
        let mut buf = [0u8; 64];
        let name = file_name(&mut buf, pid, index);
        match sys::openat(dir, name, flags, 0o644) {
            Ok(fd) => return Ok(to_high(fd)),
            Err(libc::EEXIST) => last = libc::EEXIST,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// `pid:[4026531836]` -> 4026531836.
fn pid_namespace() -> u64 {
    let mut buf = [0u8; 64];
    let Some(n) = sys::readlink(c"/proc/self/ns/pid", &mut buf) else {
        return 0;
    };
    let text = &buf[..n];
    let mut value = 0u64;
    for &b in text.iter().skip_while(|b| **b != b'[').skip(1) {
        if !b.is_ascii_digit() {
            break;
        }
        value = value.saturating_mul(10).saturating_add((b - b'0') as u64);
    }
    value
}

/// Field 22 of `/proc/self/stat`: the process's start in clock ticks.
fn process_start() -> u64 {
    let mut buf = [0u8; 1024];
    let Some(n) = sys::read_file(c"/proc/self/stat", &mut buf) else {
        return 0;
    };
    let text = &buf[..n];
    // The command name may hold spaces and parentheses: fields start
    // after the last ')'; the one after it is field 3.
    let Some(close) = text.iter().rposition(|&b| b == b')') else {
        return 0;
    };
    text[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(22 - 3)
        .and_then(|f| std::str::from_utf8(f).ok())
        .and_then(|f| f.parse().ok())
        .unwrap_or(0)
}

fn write_header(origin: &str) {
    let mut line = Line::new("header");
    line.u64("pid", PID.load(Ordering::Relaxed).into());
    line.u64("ppid", sys::getppid().into());
    let mut exe = [0u8; 2048];
    let n = sys::readlink(c"/proc/self/exe", &mut exe).unwrap_or(0);
    line.bytes_str("exe", &exe[..n], n);
    line.u64("start_ns", sys::now_ns());
    line.str("tracer_version", env!("CARGO_PKG_VERSION"));
    line.u64("coverage", COVERAGE.into());
    line.str("origin", origin);
    let ns = pid_namespace();
    if ns != 0 {
        line.u64("pid_ns", ns);
    }
    let start = process_start();
    if start != 0 {
        line.u64("proc_start", start);
    }
    line.str("symbols", SYMBOLS);
    emit(&mut line);
}

/// The library constructor: when `IPC_TRACE_DIR` is set, open the
/// directory, create this image's file and write its header.
pub fn at_load() {
    let Some(dir) = env_dir() else { return };
    let dir_fd = match sys::openat(
        libc::AT_FDCWD,
        dir,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    ) {
        Ok(fd) => to_high(fd),
        Err(e) => {
            let mut msg = [0u8; 512];
            let text = format_args_to(
                &mut msg,
                format_args!(
                    "ipc-tracer: cannot open the trace directory {}: {}; nothing is recorded, the program goes on\n",
                    dir.to_string_lossy(),
                    std::io::Error::from_raw_os_error(e)
                ),
            );
            say(text);
            STOPPED.store(true, Ordering::Relaxed);
            return;
        }
    };
    DIR_FD.store(dir_fd, Ordering::SeqCst);
    let pid = sys::getpid();
    PID.store(pid, Ordering::SeqCst);
    match create_file(dir_fd, pid) {
        Ok(fd) => FILE_FD.store(fd, Ordering::SeqCst),
        Err(e) => {
            stop("cannot create the trace file", e);
            return;
        }
    }
    write_header("load");
    // SAFETY: registering a plain function; fork runs it in the child.
    unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
}

/// In a forked child (`pthread_atfork`): drop the parent's file, create
/// the child's own and write its header.
extern "C" fn after_fork_in_child() {
    let dir = DIR_FD.load(Ordering::SeqCst);
    let inherited = FILE_FD.swap(-1, Ordering::SeqCst);
    if dir < 0 || inherited < 0 {
        return;
    }
    sys::close(inherited);
    TID.with(|t| t.set(0));
    SEQ.store(0, Ordering::SeqCst);
    let pid = sys::getpid();
    PID.store(pid, Ordering::SeqCst);
    match create_file(dir, pid) {
        Ok(fd) => {
            FILE_FD.store(fd, Ordering::SeqCst);
            write_header("fork");
        }
        Err(e) => stop("cannot create the trace file", e),
    }
}

/// Append the exit record (the process returned from `main` or called
/// `exit`).
pub fn record_exit() {
    if !active() || sys::getpid() != PID.load(Ordering::Relaxed) {
        return;
    }
    let mut line = Line::new("exit");
    line.u64("t_ns", sys::now_ns());
    emit(&mut line);
}
