//! The record format of `ipc-conformance trace`: one JSON object per line,
//! one file `trace-<pid>.jsonl` per process. Written by the `ipc-tracer`
//! library inside the traced program and read by `ipc-conformance check`;
//! defined here once for both.
//!
//! A file holds one `header` line, then `call`, `host` and `lookup` lines
//! in the order the process made them (one `seq` counter for all three),
//! then (when the process exited normally) one `exit` line. Each line is
//! written with a single `write(2)` on a descriptor opened with
//! `O_APPEND`, so a process that crashes keeps every line it finished.
//!
//! **Files.** Each program image the tracer loads into creates its own
//! file with `O_CREAT|O_EXCL|O_NOFOLLOW`: `trace-<pid>.jsonl`, or, when
//! that name is taken (an earlier image of the same process before an
//! `exec`, or a process of another PID namespace with the same number),
//! `trace-<pid>.<n>.jsonl` with the smallest free `n` from 2
//! ([`file_name`], [`parse_file_name`]). A forked child creates its own
//! file as it starts. The header's `pid_ns` and `proc_start` tell the
//! images of one process (same values) from different processes.
//!
//! **Compatibility.** Readers must accept older files: every field added
//! after the first version is `#[serde(default)]`, and line kinds are only
//! ever added. Files written before `coverage` existed read as coverage 0.
//!
//! **Coverage.** [`Header::coverage`] says which entry points the writer
//! recorded, so a reader can tell "not called" from "not recorded":
//! - 0: tracer 0.1.0: contexts, allocations, legacy IPC, events, VMM,
//!   1D copies and 8/32-bit sets, kernels. No memory pools, no
//!   `cuCtxSynchronize_v2`, no stream creation, no host operations, header
//!   written at the first call.
//! - 1: every entry point of `tracer/symbols/libcuda-580.159.04.txt` that is
//!   not listed as irrelevant to IPC in `tracer/symbols/not-traced.txt`
//!   (memory pools, peer and 2D/3D copies and sets, streams, pointer
//!   attributes, external memory and semaphores, multicast, graph launches
//!   as opaque work, ...); host operations (`host` lines); lookups of
//!   entry points unknown to the tracer (`lookup` lines); the header
//!   written when the tracer loads.

use serde::{Deserialize, Serialize};

/// The file name prefix of a per-process trace (`trace-<pid>.jsonl`).
pub const FILE_PREFIX: &str = "trace-";
/// The file name suffix of a per-process trace (one JSON object a line).
pub const FILE_SUFFIX: &str = ".jsonl";

/// The environment variable naming the directory the tracer writes to.
pub const DIR_ENV: &str = "IPC_TRACE_DIR";

/// The coverage of the tracer built from this source (see the module
/// documentation for what each value records).
pub const COVERAGE: u32 = 1;

/// The file name of a program image's trace: `trace-<pid>.jsonl` for
/// `index` 1, `trace-<pid>.<index>.jsonl` after.
pub fn file_name(pid: u32, index: u32) -> String {
    if index <= 1 {
        format!("{FILE_PREFIX}{pid}{FILE_SUFFIX}")
    } else {
        format!("{FILE_PREFIX}{pid}.{index}{FILE_SUFFIX}")
    }
}

/// The pid and index a trace file name carries (the inverse of
/// [`file_name`]), or `None` for any other name. Digits only, no sign, no
/// leading zero (`trace-0101.jsonl` is not a trace name: only the tracer's
/// own spelling is).
pub fn parse_file_name(name: &str) -> Option<(u32, u32)> {
    let middle = name.strip_prefix(FILE_PREFIX)?.strip_suffix(FILE_SUFFIX)?;
    let number = |text: &str| -> Option<u32> {
        let canonical = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        canonical.then(|| text.parse().ok()).flatten()
    };
    match middle.split_once('.') {
        None => Some((number(middle)?, 1)),
        Some((pid, index)) => {
            let index = number(index)?;
            (index >= 2).then_some((number(pid)?, index))
        }
    }
}

/// One line of a trace file. (Lines are made and dropped one at a time, so
/// the size of the call variant costs nothing worth a box.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceLine {
    /// The first line: which process wrote the file.
    Header(Header),
    /// One driver call, in call order.
    Call(CallRecord),
    /// The last line when the process exited normally.
    Exit(ExitRecord),
    /// A host operation that orders processes or passes descriptors
    /// (coverage 1 and later).
    Host(HostRecord),
    /// A driver entry point the program looked up that this tracer does
    /// not know (coverage 1 and later).
    Lookup(LookupRecord),
}

/// Which process wrote the file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The process id of the writer.
    pub pid: u32,
    /// Its parent's process id, to rebuild the process tree.
    pub ppid: u32,
    /// `/proc/self/exe`, or empty when unreadable.
    pub exe: String,
    /// Monotonic clock (`CLOCK_MONOTONIC`, shared by all processes of the
    /// machine) when the file was opened, in nanoseconds.
    pub start_ns: u64,
    /// The `ipc-tracer` crate version that wrote the file.
    pub tracer_version: String,
    /// Which entry points and operations the writer records (module
    /// documentation); 0 for files written before this field.
    #[serde(default)]
    pub coverage: u32,
    /// How this file came to be: `load` (the tracer was loaded into a new
    /// program image: the traced command itself, or a process started by
    /// `exec` or `posix_spawn`), `fork` (a child forked by a traced
    /// process, which inherits the tracer), or empty for files written
    /// before this field, whose header was written at the first call.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub origin: String,
    /// The inode of the process's PID namespace (`/proc/self/ns/pid`), 0
    /// when unknown: two files with one pid and different namespaces are
    /// two processes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pid_ns: u64,
    /// When the process started, in clock ticks since boot (field 22 of
    /// `/proc/self/stat`), 0 when unknown. It survives `exec`, so it tells
    /// the images of one process apart from a later process that reused
    /// the pid.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub proc_start: u64,
    /// The driver symbol list the writer's hooks were checked against
    /// (`libcuda-580.159.04`: a driver exporting entry points beyond it may
    /// have calls this writer does not know; `lookup` lines name those the
    /// program asked for). Empty before coverage 1.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub symbols: String,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// One driver call: its exact entry point, arguments, result and timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Order within the process, from 0.
    pub seq: u64,
    /// The exact driver symbol (`cuMemAlloc_v2`, `cuEventRecord_ptsz`).
    pub call: String,
    /// The `CUresult` it returned (0 is success).
    pub result: i32,
    /// Monotonic clock at entry, nanoseconds.
    pub t_ns: u64,
    /// How long the real call took, nanoseconds.
    pub dur_ns: u64,
    /// Kernel thread id of the caller.
    pub tid: u32,
    /// The call's IPC-relevant arguments (empty for an older record).
    #[serde(default)]
    pub args: CallArgs,
}

/// The arguments that matter to IPC; absent fields were not part of the call.
/// Pointers, contexts, events, streams and VMM handles are numbers; IPC
/// handles are their 64 bytes in hex. Output arguments hold what the call
/// left in them (unchanged, often zero, when it failed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallArgs {
    /// The pointer a call takes or gives back (allocated, opened, freed,
    /// mapped), or the destination of a copy or set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptr: Option<u64>,
    /// The source pointer of a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<u64>,
    /// A size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// An offset in bytes (`cuMemMap`), or the alignment `cuMemAddressReserve`
    /// was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The value a set writes, or the address `cuMemAddressReserve` was asked
    /// for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// The call's flags argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<u64>,
    /// A device ordinal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
    /// A context (`CUcontext`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctx: Option<u64>,
    /// An event (`CUevent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<u64>,
    /// A stream (`CUstream`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
    /// A VMM allocation handle (`CUmemGenericAllocationHandle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm: Option<u64>,
    /// An IPC memory or event handle, 64 bytes as 128 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// A shareable handle's type (`CUmemAllocationHandleType`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle_type: Option<u32>,
    /// A POSIX file descriptor exported or imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd: Option<i64>,
    /// What the descriptor refers to (`st_dev:st_ino` from `fstat`), so an
    /// import can be matched to the export whose descriptor it received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd_identity: Option<String>,
    /// `cuMemSetAccess`: (device, flags) per descriptor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Vec<(i32, u32)>>,
    /// Kernel launches: the 8-byte parameters (candidate pointers), when the
    /// driver can say where the parameters lie (`cuFuncGetParamInfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer_args: Option<Vec<u64>>,
    /// A memory pool (`CUmemoryPool`): created, imported, exported,
    /// allocated from, destroyed, queried, or a device's pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<u64>,
    /// A second context: the source context of a peer copy, the green
    /// context `cuCtxFromGreenCtx` converts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_ctx: Option<u64>,
    /// The memory kind of a copy's destination, or of a set's target, as
    /// the driver reports it where it decides the call's synchronisation
    /// (the driver API's "API synchronization behavior" page): `device`,
    /// `host` (page-locked host memory), `managed`, `pageable` (host
    /// memory the driver does not know), `array`. Absent when the call
    /// names it (`cuMemcpyDtoD`) or the driver could not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dst_kind: Option<String>,
    /// The memory kind of a copy's source, as [`CallArgs::dst_kind`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_kind: Option<String>,
    /// The bytes a 2D/3D copy reads, from `src` (first to last byte
    /// touched); `size` is the same for the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_size: Option<u64>,
    /// A row pitch in bytes (2D/3D sets and copies: the destination's;
    /// `cuMemAllocPitch`: the pitch given back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pitch: Option<u64>,
    /// The source's row pitch of a 2D/3D copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_pitch: Option<u64>,
    /// Width in bytes of a 2D/3D set, copy or pitched allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u64>,
    /// Rows of a 2D/3D set, copy or pitched allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u64>,
    /// Slices of a 3D copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u64>,
    /// The base address `cuMemGetAddressRange` gave back (`size` is the
    /// range's size, `ptr` the address asked about).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    /// A stream's priority (`cuStreamCreateWithPriority`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// A `CUmemLocation`'s type where a call takes one (`device` holds its
    /// id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location_type: Option<u32>,
    /// Attributes read or set, `(attribute, value)`: pointer attributes
    /// (`cuPointerGetAttribute(s)`, `cuPointerSetAttribute`), pool
    /// attributes (`cuMemPoolGet/SetAttribute`). Only attributes whose
    /// value is a number are listed (booleans as 0/1), and only after a
    /// successful call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attrs: Option<Vec<(u32, u64)>>,
    /// A count of items the call takes (batched copies and memory
    /// operations, external semaphores, devices of a multicast object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Handles a call takes as a list: the external semaphores signalled
    /// or waited on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<u64>>,
    /// An external memory or semaphore object (`CUexternalMemory`,
    /// `CUexternalSemaphore`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<u64>,
    /// The allocation handle `cuMulticastBindMem` binds to a multicast
    /// object (`vmm`), and its offset (`src_offset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_vmm: Option<u64>,
    /// The offset in `bound_vmm` that `cuMulticastBindMem` binds from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_offset: Option<u64>,
    /// A device's UUID (16 bytes in hex), recorded where a context is made
    /// on a device ordinal, so that processes with different
    /// `CUDA_VISIBLE_DEVICES` can be matched by device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_uuid: Option<String>,
}

/// A host operation: descriptor passing, process creation and waits, and
/// the host synchronisation that orders processes (pipes, sockets,
/// semaphores). Recorded only in processes the tracer records, only on
/// pipes, sockets, semaphores and process operations, and (for data
/// transfers and waits) only when the call succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostRecord {
    /// Order within the process, one counter with the call records.
    pub seq: u64,
    /// What happened, whatever function did it:
    /// - `send` / `recv`: bytes written to / read from a pipe or socket
    ///   (`write`, `writev`, `send`, `sendto`, `sendmsg`, ... / `read`,
    ///   `readv`, `recv`, `recvfrom`, `recvmsg`, ...); `fds` lists the
    ///   descriptors passed with `SCM_RIGHTS` (the sender's numbers on
    ///   `send`, the receiver's new numbers on `recv`). A `recv` of 0
    ///   bytes is end of file: every writer closed.
    /// - `describe`: what a descriptor is, written once before the first
    ///   `send`/`recv` on it (and again after it is closed and reused):
    ///   `object`, and for sockets `sock_type`, `local`, `peer`,
    ///   `peer_path`.
    /// - `sem_post` / `sem_wait`: a POSIX semaphore in memory a file backs
    ///   (`object` names it by that file and the offset: a named
    ///   semaphore's `/dev/shm` file, a shared mapping, anonymous shared
    ///   memory inherited across `fork`); semaphores in memory private to
    ///   the process order only its threads and are not recorded.
    ///   `sem_wait` also stands for a successful `sem_trywait`,
    ///   `sem_timedwait` and `sem_clockwait`.
    /// - `fork`: `pid` is the child (the child's own file starts with a
    ///   header whose origin is `fork`).
    /// - `spawn`: `posix_spawn`/`posix_spawnp`; `pid` is the child,
    ///   `path` the program, `env_traced` whether its environment keeps
    ///   the tracer.
    /// - `exec`: written just before `execve`, `execv`, `execvp`,
    ///   `execvpe`, `fexecve` or `execveat` replace the program (`result`
    ///   absent; the variadic `execl*` are not seen, but the new image's
    ///   file shows the exec); `path` (or `fd`), `env_traced`, `setid` (the
    ///   file is set-user-ID or set-group-ID: the tracer will not load
    ///   there). An `exec_failed` line (with `errno`) follows when the call
    ///   returned.
    /// - `wait`: a child was reaped (`waitpid`, `wait`, `wait3`, `wait4`,
    ///   `waitid`): `pid`, and `status` as `waitpid` gives it.
    /// - `dup`: `dup`, `dup2`, `dup3`, `fcntl(F_DUPFD*)` of a descriptor
    ///   the tracer follows (one passed with `SCM_RIGHTS`, taken with
    ///   `pidfd_getfd`, or exported by the driver): `fd` to `new_fd`.
    /// - `close`: such a descriptor closed (`close`, `close_range`,
    ///   `closefrom`, or replaced by `dup2`).
    /// - `pidfd_open` / `pidfd_getfd`: `pid` the process, `target_fd` the
    ///   number taken from it, `new_fd` the number it got here.
    pub op: String,
    /// The function the program called (`sendmsg`, `waitpid`).
    pub call: String,
    /// What it returned (bytes, a pid, a descriptor, 0); absent for `exec`,
    /// written before the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<i64>,
    /// `errno` when the call failed (`exec_failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
    /// Monotonic clock at entry, nanoseconds.
    pub t_ns: u64,
    /// How long the call took, nanoseconds.
    pub dur_ns: u64,
    /// Kernel thread id of the caller.
    pub tid: u32,
    /// The operation's arguments.
    #[serde(default)]
    pub args: HostArgs,
}

/// The arguments of a host operation; absent fields do not apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostArgs {
    /// The descriptor operated on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fd: Option<i64>,
    /// What the descriptor or semaphore is, the same in every process
    /// that shares it: `pipe:<dev>:<inode>` (a pipe or FIFO: both ends
    /// share the inode), `socket:<inode>` (each end of a socket has its
    /// own; `peer` names the other), `sem:<dev>:<inode>+<offset>` (the file
    /// a semaphore lives in, and where; anonymous shared memory is a file
    /// of its own to the kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// A connected Unix socket's other end, `socket:<inode>` (from the
    /// kernel's socket diagnostics), on `describe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// `stream`, `dgram` or `seqpacket`, on a socket's `describe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sock_type: Option<String>,
    /// The address a socket is bound to (a path made absolute with the
    /// working directory, or `@name` for the abstract namespace), on
    /// `describe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// The address a connected socket's other end is bound to, on
    /// `describe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_path: Option<String>,
    /// A path: where a datagram was sent (`send`) or came from (`recv`),
    /// made absolute like `local`; the program started (`exec`, `spawn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Bytes sent or received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Descriptors passed with `SCM_RIGHTS` in this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fds: Option<Vec<i64>>,
    /// A process: the child forked, spawned or reaped, the process a
    /// pidfd refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// A reaped child's status, as `waitpid` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
    /// The descriptor a `dup` or `pidfd_getfd` made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_fd: Option<i64>,
    /// The number `pidfd_getfd` took from the other process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_fd: Option<i64>,
    /// `exec`/`spawn`: whether the new program's environment still
    /// preloads this tracer library and names a trace directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_traced: Option<bool>,
    /// `exec`/`spawn`: the program file is set-user-ID or set-group-ID, so
    /// the dynamic loader ignores `LD_PRELOAD` there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setid: Option<bool>,
}

/// A driver entry point the program obtained (`cuGetProcAddress`, `dlsym`)
/// whose calls are not recorded: one the tracer neither wraps nor lists as
/// irrelevant to IPC (a newer driver's), or a traced name whose variant
/// the tracer could not tell (`dladdr` could not name what the driver gave
/// back, and the name has variants of other signatures: `resolved` is
/// absent). Only such lookups are written; the rest cost nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LookupRecord {
    /// Order within the process, one counter with the call records.
    pub seq: u64,
    /// How it was looked up: `cuGetProcAddress`, `cuGetProcAddress_v2`,
    /// `dlsym`.
    pub via: String,
    /// The name asked for.
    pub symbol: String,
    /// The exported symbol the driver handed back, when `dladdr` can name
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// The CUDA version `cuGetProcAddress` was asked for (absent for
    /// `dlsym`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i32>,
    /// `cuGetProcAddress`'s flags (absent for `dlsym`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<u64>,
    /// Monotonic clock at entry, nanoseconds.
    pub t_ns: u64,
    /// Kernel thread id of the caller.
    pub tid: u32,
}

/// The process returned from `main` or called `exit` (a crash writes none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// Monotonic clock at exit, nanoseconds.
    pub t_ns: u64,
}

/// Format IPC handle bytes as the hex string the records hold.
pub fn handle_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// The entry point without its ABI suffixes (`cuMemAlloc_v2` -> `cuMemAlloc`,
/// `cuEventRecord_ptsz` -> `cuEventRecord`).
pub fn base_name(call: &str) -> &str {
    let mut name = call;
    loop {
        let stripped = ["_ptsz", "_ptds", "_v2", "_v3", "_v4"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix));
        match stripped {
            Some(rest) => name = rest,
            None => return name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_through_json() {
        let line = TraceLine::Call(CallRecord {
            seq: 3,
            call: "cuIpcGetMemHandle".into(),
            result: 0,
            t_ns: 10,
            dur_ns: 2,
            tid: 7,
            args: CallArgs {
                ptr: Some(0x7f00_0000_0000),
                handle: Some(handle_hex(&[0xab; 64])),
                ..CallArgs::default()
            },
        });
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.starts_with(r#"{"kind":"call","seq":3"#), "{text}");
        assert!(
            !text.contains("null"),
            "absent arguments are left out: {text}"
        );
        assert_eq!(serde_json::from_str::<TraceLine>(&text).unwrap(), line);
    }

    #[test]
    fn files_of_the_first_version_still_load() {
        let header = r#"{"kind":"header","pid":9939,"ppid":9938,"exe":"x","start_ns":5,"tracer_version":"0.1.0"}"#;
        match serde_json::from_str::<TraceLine>(header).unwrap() {
            TraceLine::Header(h) => {
                assert_eq!((h.coverage, h.origin.as_str(), h.pid_ns), (0, "", 0));
            }
            other => panic!("{other:?}"),
        }
        let call = r#"{"kind":"call","seq":0,"call":"cuCtxCreate_v4","result":0,"t_ns":1,"dur_ns":2,"tid":3,"args":{"flags":0,"device":0,"ctx":93849013792944}}"#;
        assert!(matches!(
            serde_json::from_str::<TraceLine>(call).unwrap(),
            TraceLine::Call(c) if c.args.pool.is_none() && c.args.ctx == Some(93849013792944)
        ));
    }

    #[test]
    fn host_and_lookup_lines_round_trip() {
        for line in [
            TraceLine::Host(HostRecord {
                seq: 4,
                op: "send".into(),
                call: "sendmsg".into(),
                result: Some(1),
                errno: None,
                t_ns: 10,
                dur_ns: 3,
                tid: 9,
                args: HostArgs {
                    fd: Some(5),
                    object: Some("socket:123".into()),
                    path: Some("/tmp/9949".into()),
                    bytes: Some(1),
                    fds: Some(vec![21]),
                    ..HostArgs::default()
                },
            }),
            TraceLine::Lookup(LookupRecord {
                seq: 5,
                via: "cuGetProcAddress_v2".into(),
                symbol: "cuMemFutureCall".into(),
                resolved: Some("cuMemFutureCall_v2".into()),
                version: Some(13000),
                flags: Some(0),
                t_ns: 11,
                tid: 9,
            }),
        ] {
            let text = serde_json::to_string(&line).unwrap();
            assert!(!text.contains("null"), "{text}");
            assert_eq!(serde_json::from_str::<TraceLine>(&text).unwrap(), line);
        }
    }

    #[test]
    fn file_names_parse_back_and_only_the_tracer_spelling_is_a_trace() {
        for (pid, index) in [(1, 1), (101, 1), (101, 2), (4_000_000, 17)] {
            assert_eq!(parse_file_name(&file_name(pid, index)), Some((pid, index)));
        }
        for name in [
            "trace-0101.jsonl",
            "trace-101.1.jsonl",
            "trace-101.02.jsonl",
            "trace-+1.jsonl",
            "trace-.jsonl",
            "trace-1.jsonl.gz",
            "check.json",
            "trace-99999999999.jsonl",
        ] {
            assert_eq!(parse_file_name(name), None, "{name}");
        }
    }

    #[test]
    fn base_names_drop_every_abi_suffix() {
        assert_eq!(base_name("cuMemAlloc_v2"), "cuMemAlloc");
        assert_eq!(base_name("cuMemcpyHtoDAsync_v2_ptsz"), "cuMemcpyHtoDAsync");
        assert_eq!(base_name("cuEventRecord_ptsz"), "cuEventRecord");
        assert_eq!(base_name("cuIpcGetMemHandle"), "cuIpcGetMemHandle");
    }
}
