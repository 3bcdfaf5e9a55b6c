//! The per-process trace file: opened at the first record of each process
//! (a forked child opens its own), one `write(2)` per line on an `O_APPEND`
//! descriptor, so a crash keeps every finished line. When a write fails the
//! tracer stops recording and says so once on stderr; the program goes on.

use ipc_harness::trace_record::{
    CallArgs, CallRecord, ExitRecord, Header, TraceLine, DIR_ENV, FILE_PREFIX, FILE_SUFFIX,
};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// `(pid << 32) | (fd + 1)` of this process's open trace file, 0 when none.
static FILE: AtomicU64 = AtomicU64::new(0);
static SEQ: AtomicU64 = AtomicU64::new(0);
static STOPPED: AtomicBool = AtomicBool::new(false);

fn trace_dir() -> Option<&'static str> {
    static DIR: OnceLock<Option<String>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var(DIR_ENV).ok().filter(|d| !d.is_empty()))
        .as_deref()
}

/// Whether calls are being recorded (a directory is set and no write failed).
pub fn active() -> bool {
    !STOPPED.load(Ordering::Relaxed) && trace_dir().is_some()
}

/// Monotonic clock in nanoseconds (comparable across the machine's processes).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn stop(why: &str) {
    if !STOPPED.swap(true, Ordering::Relaxed) {
        let msg = format!("ipc-tracer: {why}; recording stopped, the program goes on\n");
        // SAFETY: writing a buffer to stderr.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
    }
}

fn write_all(fd: i32, line: &[u8]) -> bool {
    // SAFETY: writing a buffer we own to a descriptor we opened.
    let n = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    if n == line.len() as isize {
        true
    } else {
        stop(&format!(
            "cannot write the trace file: {}",
            std::io::Error::last_os_error()
        ));
        false
    }
}

fn to_line(line: &TraceLine) -> Vec<u8> {
    let mut text = serde_json::to_vec(line).unwrap_or_default();
    text.push(b'\n');
    text
}

fn header() -> Header {
    Header {
        // SAFETY: plain queries.
        pid: unsafe { libc::getpid() } as u32,
        ppid: unsafe { libc::getppid() } as u32,
        exe: std::fs::read_link("/proc/self/exe")
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        start_ns: now_ns(),
        tracer_version: env!("CARGO_PKG_VERSION").to_string(),
        ..Header::default()
    }
}

/// This process's trace descriptor, opening the file (and writing its
/// header) on first use.
fn descriptor() -> Option<i32> {
    // SAFETY: plain query.
    let pid = unsafe { libc::getpid() } as u32;
    let state = FILE.load(Ordering::Acquire);
    if state != 0 && (state >> 32) as u32 == pid {
        return Some((state & 0xffff_ffff) as i32 - 1);
    }
    let dir = trace_dir()?;
    let path = format!("{dir}/{FILE_PREFIX}{pid}{FILE_SUFFIX}");
    let cpath = CString::new(path.clone()).ok()?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            cpath.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        stop(&format!(
            "cannot open {path}: {}",
            std::io::Error::last_os_error()
        ));
        return None;
    }
    let new_state = ((pid as u64) << 32) | (fd as u64 + 1);
    match FILE.compare_exchange(state, new_state, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            SEQ.store(0, Ordering::Relaxed);
            write_all(fd, &to_line(&TraceLine::Header(header()))).then_some(fd)
        }
        Err(winner) => {
            // Another thread of this process opened it first.
            // SAFETY: closing the descriptor opened above.
            unsafe { libc::close(fd) };
            ((winner >> 32) as u32 == pid).then(|| (winner & 0xffff_ffff) as i32 - 1)
        }
    }
}

/// Append one call record.
pub fn record(call: &str, result: i32, t_ns: u64, dur_ns: u64, args: CallArgs) {
    let Some(fd) = descriptor() else { return };
    let line = TraceLine::Call(CallRecord {
        seq: SEQ.fetch_add(1, Ordering::Relaxed),
        call: call.to_string(),
        result,
        t_ns,
        dur_ns,
        // SAFETY: plain query.
        tid: unsafe { libc::syscall(libc::SYS_gettid) } as u32,
        args,
    });
    write_all(fd, &to_line(&line));
}

/// Append the exit record, if this process recorded anything.
pub fn record_exit() {
    if !active() {
        return;
    }
    let state = FILE.load(Ordering::Acquire);
    // SAFETY: plain query.
    let pid = unsafe { libc::getpid() } as u32;
    if state == 0 || (state >> 32) as u32 != pid {
        return;
    }
    let fd = (state & 0xffff_ffff) as i32 - 1;
    write_all(
        fd,
        &to_line(&TraceLine::Exit(ExitRecord { t_ns: now_ns() })),
    );
}
