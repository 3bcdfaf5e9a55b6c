//! The record format of `ipc-conformance trace`: one JSON object per line,
//! one file `trace-<pid>.jsonl` per process. Written by the `ipc-tracer`
//! library inside the traced program and read by `ipc-conformance check`;
//! defined here once for both.
//!
//! A file holds one `header` line, then `call` lines in the order the
//! process made them, then (when the process exited normally) one `exit`
//! line. Each line is written with a single `write(2)` on a descriptor
//! opened with `O_APPEND`, so a process that crashes keeps every line it
//! finished.

use serde::{Deserialize, Serialize};

/// The file name prefix of a per-process trace (`trace-<pid>.jsonl`).
pub const FILE_PREFIX: &str = "trace-";
/// The file name suffix of a per-process trace (one JSON object a line).
pub const FILE_SUFFIX: &str = ".jsonl";

/// The environment variable naming the directory the tracer writes to.
pub const DIR_ENV: &str = "IPC_TRACE_DIR";

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
}

/// Which process wrote the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    fn base_names_drop_every_abi_suffix() {
        assert_eq!(base_name("cuMemAlloc_v2"), "cuMemAlloc");
        assert_eq!(base_name("cuMemcpyHtoDAsync_v2_ptsz"), "cuMemcpyHtoDAsync");
        assert_eq!(base_name("cuEventRecord_ptsz"), "cuEventRecord");
        assert_eq!(base_name("cuIpcGetMemHandle"), "cuIpcGetMemHandle");
    }
}
