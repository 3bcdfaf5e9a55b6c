//! Reading a trace directory: every `trace-<pid>.jsonl`, tolerant of a
//! last line cut short by a crash, merged into one history by the machine's
//! monotonic clock.

use ipc_harness::trace_record::{CallRecord, Header, TraceLine, FILE_PREFIX, FILE_SUFFIX};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct ProcessTrace {
    pub pid: u32,
    pub file: PathBuf,
    pub header: Option<Header>,
    pub calls: Vec<CallRecord>,
    /// The exit record's time; `None` when the process crashed, was killed
    /// or left through `_exit`.
    pub exit_ns: Option<u64>,
    /// Lines that did not parse (a crash can cut the last one short).
    pub bad_lines: Vec<usize>,
}

/// One event of the merged history: a call (by process and call index)
/// or the end of a process.
#[derive(Debug, Clone, Copy)]
pub enum MergedEntry {
    Call {
        pid: u32,
        process: usize,
        call: usize,
    },
    End {
        pid: u32,
    },
}

pub struct Merged {
    pub processes: Vec<ProcessTrace>,
    pub entries: Vec<MergedEntry>,
}

/// Read every trace file of `dir`. An unreadable directory is an error; a
/// directory without trace files is an empty list.
pub fn read_dir(dir: &Path) -> Result<Vec<ProcessTrace>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(FILE_PREFIX)
            .and_then(|n| n.strip_suffix(FILE_SUFFIX))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        out.push(parse_process(pid, &path, &text));
    }
    out.sort_by_key(|p| (p.header.as_ref().map_or(u64::MAX, |h| h.start_ns), p.pid));
    Ok(out)
}

pub fn parse_process(pid: u32, file: &Path, text: &str) -> ProcessTrace {
    let mut p = ProcessTrace {
        pid,
        file: file.to_path_buf(),
        header: None,
        calls: Vec::new(),
        exit_ns: None,
        bad_lines: Vec::new(),
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<TraceLine>(line) {
            Ok(TraceLine::Header(h)) => {
                p.header.get_or_insert(h);
            }
            Ok(TraceLine::Call(c)) => p.calls.push(c),
            Ok(TraceLine::Exit(e)) => p.exit_ns = Some(e.t_ns),
            // Host operations and lookups (coverage 1): not judged yet.
            Ok(TraceLine::Host(_) | TraceLine::Lookup(_)) => {}
            Err(_) => p.bad_lines.push(i + 1),
        }
    }
    p.calls.sort_by_key(|c| c.seq);
    p
}

impl Merged {
    /// All calls in the order of their start times (ties: process, then
    /// sequence), each process ending at its exit record or its last call.
    pub fn new(processes: Vec<ProcessTrace>) -> Merged {
        let mut keyed: Vec<((u64, u32, u64, u8), MergedEntry)> = Vec::new();
        for (process, p) in processes.iter().enumerate() {
            let mut last = 0;
            for (call, c) in p.calls.iter().enumerate() {
                last = last.max(c.t_ns + c.dur_ns);
                keyed.push((
                    (c.t_ns, p.pid, c.seq, 0),
                    MergedEntry::Call {
                        pid: p.pid,
                        process,
                        call,
                    },
                ));
            }
            let end = p.exit_ns.unwrap_or(last).max(last);
            keyed.push(((end, p.pid, u64::MAX, 1), MergedEntry::End { pid: p.pid }));
        }
        keyed.sort_by_key(|(k, _)| *k);
        Merged {
            processes,
            entries: keyed.into_iter().map(|(_, e)| e).collect(),
        }
    }

    pub fn record(&self, process: usize, call: usize) -> &CallRecord {
        &self.processes[process].calls[call]
    }
}
