//! Reading a trace directory: every `trace-<pid>.jsonl`, tolerant of a
//! last line cut short by a crash, merged into one history by the machine's
//! monotonic clock.

use ipc_harness::trace_record::{self, CallRecord, Header, TraceLine};
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
/// directory without trace files is an empty list. The images of one
/// process (`trace-<pid>.jsonl`, then `trace-<pid>.<n>.jsonl` after each
/// `exec`) are read as one process, in image order.
pub fn read_dir(dir: &Path) -> Result<Vec<ProcessTrace>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some((pid, index)) = trace_record::parse_file_name(name) else {
            continue;
        };
        files.push((pid, index, path));
    }
    files.sort();
    let mut out: Vec<ProcessTrace> = Vec::new();
    for (pid, index, path) in files {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let image = parse_process(pid, &path, &text);
        match out.last_mut() {
            Some(process) if index > 1 && process.pid == pid => process.append_image(image),
            _ => out.push(image),
        }
    }
    out.sort_by_key(|p| (p.header.as_ref().map_or(u64::MAX, |h| h.start_ns), p.pid));
    Ok(out)
}

impl ProcessTrace {
    /// The calls of a later image of this process (after an `exec`), in
    /// order after this one's.
    fn append_image(&mut self, image: ProcessTrace) {
        let next = self.calls.last().map_or(0, |c| c.seq + 1);
        self.calls.extend(image.calls.into_iter().map(|mut c| {
            c.seq += next;
            c
        }));
        if let (Some(header), Some(later)) = (&mut self.header, image.header) {
            header.exe = later.exe;
        }
        self.exit_ns = image.exit_ns;
        self.bad_lines.extend(image.bad_lines);
    }
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
