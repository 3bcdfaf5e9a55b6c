//! Reading a trace folder: every `trace-<pid>.jsonl`, bounded and line by
//! line, into one list of processes, and what keeps the folder from being
//! judged (a file that is not a regular one or is too long, a line that does
//! not parse, a call missing from a process's sequence, two files for one
//! process). A problem with one file or one line is reported; it never stops
//! the reading of the rest.
//!
//! Two processes may share a pid (PID namespaces, or a pid the kernel gave
//! out again): their lines then share one file, each process starting with
//! its own header, and are told apart by their sequence numbers and times.

use crate::limits::{MAX_TRACE_CALLS, MAX_TRACE_FILES, MAX_TRACE_FILE_BYTES, MAX_TRACE_LINE_BYTES};
use ipc_harness::trace_record::{
    parse_file_name, CallArgs, CallRecord, Header, HostRecord, TraceLine, FILE_PREFIX, FILE_SUFFIX,
};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Index of an entry point's name in [`Folder::entries`].
pub type EntryId = u16;

/// Most distinct entry-point names kept; further ones share the last slot
/// (named [`OTHER_ENTRY`]), so a hostile file cannot grow the table.
const MAX_ENTRIES: usize = 4096;
/// The name the calls past [`MAX_ENTRIES`] distinct names share.
pub const OTHER_ENTRY: &str = "(another entry point)";

/// A numeric argument of a recorded call ([`Args`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Ptr,
    Src,
    Size,
    Offset,
    Value,
    Flags,
    Device,
    Ctx,
    Event,
    Stream,
    Vmm,
    HandleType,
    Fd,
    Pool,
    SrcCtx,
    Base,
    Pitch,
    Width,
    Height,
    Count,
}

/// What a memory kind a copy or set reported is (`dst_kind`, `src_kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Device,
    Host,
    Managed,
    Pageable,
    Array,
}

impl Kind {
    fn parse(text: &str) -> Option<Kind> {
        Some(match text {
            "device" => Kind::Device,
            "host" => Kind::Host,
            "managed" => Kind::Managed,
            "pageable" => Kind::Pageable,
            "array" => Kind::Array,
            _ => return None,
        })
    }
}

/// A recorded call's arguments, kept small: a trace may hold a million
/// calls, each with a handful of the record format's many optional fields.
#[derive(Debug, Clone, Default)]
pub struct Args {
    numbers: Box<[(Field, u64)]>,
    extra: Option<Box<Extra>>,
}

/// IPC handle bytes (memory, event, pool pointer export data), as the
/// record's 128 hex digits name them.
pub type HandleBytes = [u8; 64];

/// The bytes 128 hex digits spell; `None` for anything else.
fn handle_bytes(hex: &str) -> Option<Box<HandleBytes>> {
    let digits = hex.as_bytes();
    if digits.len() != 128 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 64];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(Box::new(out))
}

/// The arguments that are not numbers.
#[derive(Debug, Clone, Default)]
struct Extra {
    handle: Option<Box<HandleBytes>>,
    access: Option<Vec<(i32, u32)>>,
    pointer_args: Option<Vec<u64>>,
    objects: Option<Vec<u64>>,
    dst_kind: Option<Kind>,
    src_kind: Option<Kind>,
}

impl Args {
    fn get(&self, field: Field) -> Option<u64> {
        self.numbers
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, v)| *v)
    }

    pub fn ptr(&self) -> Option<u64> {
        self.get(Field::Ptr)
    }
    pub fn src(&self) -> Option<u64> {
        self.get(Field::Src)
    }
    pub fn size(&self) -> Option<u64> {
        self.get(Field::Size)
    }
    pub fn offset(&self) -> Option<u64> {
        self.get(Field::Offset)
    }
    pub fn value(&self) -> Option<u64> {
        self.get(Field::Value)
    }
    pub fn flags(&self) -> Option<u64> {
        self.get(Field::Flags)
    }
    /// A device ordinal (negative ones read as absent).
    pub fn device(&self) -> Option<u32> {
        self.get(Field::Device)
            .and_then(|d| u32::try_from(d as i64).ok())
    }
    pub fn ctx(&self) -> Option<u64> {
        self.get(Field::Ctx)
    }
    pub fn event(&self) -> Option<u64> {
        self.get(Field::Event)
    }
    pub fn stream(&self) -> Option<u64> {
        self.get(Field::Stream)
    }
    pub fn vmm(&self) -> Option<u64> {
        self.get(Field::Vmm)
    }
    pub fn handle_type(&self) -> Option<u64> {
        self.get(Field::HandleType)
    }
    pub fn fd(&self) -> Option<i64> {
        self.get(Field::Fd).map(|f| f as i64)
    }
    pub fn pool(&self) -> Option<u64> {
        self.get(Field::Pool)
    }
    pub fn src_ctx(&self) -> Option<u64> {
        self.get(Field::SrcCtx)
    }
    pub fn base(&self) -> Option<u64> {
        self.get(Field::Base)
    }
    pub fn pitch(&self) -> Option<u64> {
        self.get(Field::Pitch)
    }
    pub fn width(&self) -> Option<u64> {
        self.get(Field::Width)
    }
    pub fn height(&self) -> Option<u64> {
        self.get(Field::Height)
    }
    pub fn count(&self) -> Option<u64> {
        self.get(Field::Count)
    }
    /// IPC handle bytes (absent when the record's were not 128 hex digits).
    pub fn handle(&self) -> Option<&HandleBytes> {
        self.extra.as_ref()?.handle.as_deref()
    }
    /// `cuMemSetAccess`, `cuMemPoolSetAccess`: (device, flags) per descriptor.
    pub fn access(&self) -> Option<&[(i32, u32)]> {
        self.extra.as_ref()?.access.as_deref()
    }
    /// A kernel's 8-byte parameters, when the driver could say where they lie.
    pub fn pointer_args(&self) -> Option<&[u64]> {
        self.extra.as_ref()?.pointer_args.as_deref()
    }
    /// Handles a call takes as a list (the events of an elapsed time).
    pub fn objects(&self) -> Option<&[u64]> {
        self.extra.as_ref()?.objects.as_deref()
    }
    pub fn dst_kind(&self) -> Option<Kind> {
        self.extra.as_ref()?.dst_kind
    }
    pub fn src_kind(&self) -> Option<Kind> {
        self.extra.as_ref()?.src_kind
    }
}

impl From<CallArgs> for Args {
    fn from(a: CallArgs) -> Args {
        let numbers: Vec<(Field, u64)> = [
            (Field::Ptr, a.ptr),
            (Field::Src, a.src),
            (Field::Size, a.size),
            (Field::Offset, a.offset),
            (Field::Value, a.value),
            (Field::Flags, a.flags),
            (Field::Device, a.device.map(|d| i64::from(d) as u64)),
            (Field::Ctx, a.ctx),
            (Field::Event, a.event),
            (Field::Stream, a.stream),
            (Field::Vmm, a.vmm),
            (Field::HandleType, a.handle_type.map(u64::from)),
            (Field::Fd, a.fd.map(|f| f as u64)),
            (Field::Pool, a.pool),
            (Field::SrcCtx, a.src_ctx),
            (Field::Base, a.base),
            (Field::Pitch, a.pitch),
            (Field::Width, a.width),
            (Field::Height, a.height),
            (Field::Count, a.count),
        ]
        .into_iter()
        .filter_map(|(f, v)| v.map(|v| (f, v)))
        .collect();
        let extra = Extra {
            handle: a.handle.as_deref().and_then(handle_bytes),
            access: a.access,
            pointer_args: a.pointer_args,
            objects: a.objects,
            dst_kind: a.dst_kind.as_deref().and_then(Kind::parse),
            src_kind: a.src_kind.as_deref().and_then(Kind::parse),
        };
        let empty = extra.handle.is_none()
            && extra.access.is_none()
            && extra.pointer_args.is_none()
            && extra.objects.is_none()
            && extra.dst_kind.is_none()
            && extra.src_kind.is_none();
        Args {
            numbers: numbers.into_boxed_slice(),
            extra: (!empty).then(|| Box::new(extra)),
        }
    }
}

/// One recorded call, its entry point interned.
#[derive(Debug, Clone)]
pub struct Rec {
    pub seq: u64,
    pub entry: EntryId,
    pub result: i32,
    pub t_ns: u64,
    pub dur_ns: u64,
    pub args: Args,
}

/// One process's records.
#[derive(Debug, Clone)]
pub struct ProcessTrace {
    pub pid: u32,
    /// The file it came from (its name in the folder).
    pub file: String,
    pub header: Option<Header>,
    /// In `seq` order.
    pub calls: Vec<Rec>,
    /// Host operations (descriptor passing, pipes, sockets, semaphores,
    /// process creation and waits), in `seq` order.
    pub host: Vec<HostRecord>,
    /// Driver entry points it looked up that the tracer does not know.
    pub lookups: Vec<String>,
    /// The exit record's time; `None` when the process crashed, was killed
    /// or left through `_exit`.
    pub exit_ns: Option<u64>,
    /// Lines of its file that did not parse (1-based).
    pub bad_lines: Vec<usize>,
}

impl ProcessTrace {
    fn new(pid: u32, file: &str, header: Option<Header>) -> ProcessTrace {
        ProcessTrace {
            pid,
            file: file.to_string(),
            header,
            calls: Vec::new(),
            host: Vec::new(),
            lookups: Vec::new(),
            exit_ns: None,
            bad_lines: Vec::new(),
        }
    }

    /// The tracer's coverage of this process's file (0: tracer 0.1.0).
    pub fn coverage(&self) -> u32 {
        self.header.as_ref().map_or(0, |h| h.coverage)
    }

    /// When the process ends in the merged history: its exit record, or
    /// the end of its last call.
    pub fn end_ns(&self) -> u64 {
        let calls = self.calls.iter().map(|c| c.t_ns.saturating_add(c.dur_ns));
        let host = self.host.iter().map(|h| h.t_ns.saturating_add(h.dur_ns));
        let last = calls.chain(host).max().unwrap_or(0);
        self.exit_ns.unwrap_or(last).max(last)
    }
}

/// A trace folder as read.
#[derive(Debug, Default)]
pub struct Folder {
    /// In the order they started.
    pub processes: Vec<ProcessTrace>,
    /// Entry-point names, by [`EntryId`].
    pub entries: Vec<String>,
    /// Why the folder cannot be judged as it is (each a sentence).
    pub problems: Vec<String>,
    /// What the reader noticed that does not keep it from judging.
    pub notes: Vec<String>,
    /// Recorded calls, over every process.
    pub calls: usize,
}

impl Folder {
    /// The entry point a call was made through (`cuMemAlloc_v2`).
    pub fn entry(&self, r: &Rec) -> &str {
        self.entries
            .get(usize::from(r.entry))
            .map_or(OTHER_ENTRY, String::as_str)
    }

    fn intern(&mut self, index: &mut BTreeMap<String, EntryId>, name: String) -> EntryId {
        if let Some(id) = index.get(&name) {
            return *id;
        }
        if self.entries.len() >= MAX_ENTRIES {
            if self.entries.len() == MAX_ENTRIES {
                self.entries.push(OTHER_ENTRY.to_string());
            }
            return MAX_ENTRIES as EntryId;
        }
        let id = self.entries.len() as EntryId;
        self.entries.push(name.clone());
        index.insert(name, id);
        id
    }
}

/// A name from the folder (a file name, an executable path), printable on
/// one line: control characters and line separators are escaped, so a
/// name never adds a line to a report or a step to a replay.
pub fn escaped(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// What a folder entry's name says: a trace file's pid, a name that looks
/// like one but is not the tracer's spelling, or anything else.
enum Name {
    Trace(u32),
    Misspelt,
    Other,
}

fn name_kind(name: &str) -> Name {
    match parse_file_name(name) {
        Some((pid, _)) => Name::Trace(pid),
        None if name.starts_with(FILE_PREFIX) && name.ends_with(FILE_SUFFIX) => Name::Misspelt,
        None => Name::Other,
    }
}

fn misspelt_note(names: &[String]) -> Option<String> {
    (!names.is_empty()).then(|| {
        let shown: Vec<String> = names.iter().take(10).map(|n| escaped(n)).collect();
        format!(
            "left out {} file(s) whose names are not the tracer's (trace-<pid>.jsonl or \
             trace-<pid>.<n>.jsonl): {}{}",
            names.len(),
            shown.join(", "),
            if names.len() > 10 { ", ..." } else { "" }
        )
    })
}

/// Open `path` for reading if it is a regular file: never blocks on a FIFO
/// and never reads a device (a symlink to `/dev/zero`).
fn open_regular(path: &Path) -> Result<(File, u64), String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot be opened: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be examined: {e}"))?;
    if !meta.is_file() {
        let what = if meta.file_type().is_dir() {
            "a folder"
        } else {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            if t.is_fifo() {
                "a FIFO"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            }
        };
        return Err(format!("is {what}; a trace file must be a regular file"));
    }
    if meta.len() > MAX_TRACE_FILE_BYTES {
        return Err(format!(
            "is {} bytes, more than the {MAX_TRACE_FILE_BYTES} bytes `check` reads from one trace file",
            meta.len()
        ));
    }
    Ok((file, meta.len()))
}

/// Read every trace file of `dir`. An unreadable folder is an error (exit 2);
/// a problem with one of its files is a [`Folder::problems`] entry.
/// The file `trace` writes into its folder once the traced program has
/// ended: `{"program":NAME,"pid":PID,"exit":CODE}` or `{...,"signal":N}`.
pub const PROGRAM_END_FILE: &str = "program-end.json";

/// How the traced program ended, as `trace` wrote it in
/// [`PROGRAM_END_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgramEnd {
    pub program: String,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// A program killed by a signal did not run to its end: its processes'
/// records stop wherever the signal found them, so the trace is cut short.
fn program_end(folder: &mut Folder, bytes: &[u8]) {
    match serde_json::from_slice::<ProgramEnd>(bytes) {
        Ok(ProgramEnd {
            program,
            pid,
            signal: Some(signal),
            ..
        }) => folder.problems.push(format!(
            "the traced program ({}, pid {pid}) was killed by signal {signal} before it ended: the trace is cut short",
            escaped(&program)
        )),
        Ok(_) => {}
        Err(e) => folder.problems.push(format!(
            "{PROGRAM_END_FILE} does not parse ({e}): how the program ended is unknown"
        )),
    }
}

pub fn read_dir(dir: &Path) -> Result<Folder, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", escaped(&dir.display().to_string())))?;
    let mut names: Vec<(u32, String)> = Vec::new();
    let mut misspelt: Vec<String> = Vec::new();
    let mut folder = Folder::default();
    for entry in entries {
        let entry = entry
            .map_err(|e| format!("cannot read {}: {e}", escaped(&dir.display().to_string())))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name == PROGRAM_END_FILE {
            match open_regular(&dir.join(name)) {
                Ok((mut file, _)) => {
                    let mut bytes = Vec::new();
                    let read = std::io::Read::read_to_end(
                        &mut std::io::Read::take(&mut file, 4096),
                        &mut bytes,
                    );
                    match read {
                        Ok(_) => program_end(&mut folder, &bytes),
                        Err(e) => folder
                            .problems
                            .push(format!("{PROGRAM_END_FILE} cannot be read: {e}")),
                    }
                }
                Err(why) => folder.problems.push(format!("{PROGRAM_END_FILE} {why}")),
            }
            continue;
        }
        match name_kind(name) {
            Name::Misspelt => misspelt.push(name.to_string()),
            Name::Other => {}
            Name::Trace(pid) => {
                if names.len() >= MAX_TRACE_FILES {
                    folder.problems.push(format!(
                    "the folder holds more than {MAX_TRACE_FILES} trace files; `check` reads no more"
                ));
                    break;
                }
                names.push((pid, name.to_string()));
            }
        }
    }
    folder.notes.extend(misspelt_note(&misspelt));
    names.sort();
    let mut files = Vec::with_capacity(names.len());
    for (pid, name) in names {
        let path = dir.join(&name);
        match open_regular(&path) {
            Ok((file, _)) => files.push((pid, name, file)),
            Err(why) => folder.problems.push(format!("{} {why}", escaped(&name))),
        }
    }
    let mut index = BTreeMap::new();
    for (pid, name, file) in files {
        read_file(&mut folder, &mut index, pid, &name, file);
        if folder.calls > MAX_TRACE_CALLS {
            folder.problems.push(format!(
                "the folder holds more than {MAX_TRACE_CALLS} recorded calls, the most `check` judges"
            ));
            break;
        }
    }
    finish(&mut folder);
    Ok(folder)
}

/// Read trace files given as (file name, contents), as `read_dir` reads a
/// folder: for tests and fuzzing. Names that are not `trace-<pid>.jsonl`
/// are left out.
pub fn read_files(files: &[(String, Vec<u8>)]) -> Folder {
    let mut folder = Folder::default();
    let mut index = BTreeMap::new();
    let mut named: Vec<(u32, &String, &Vec<u8>)> = Vec::new();
    let mut misspelt = Vec::new();
    for (n, b) in files {
        if n == PROGRAM_END_FILE {
            program_end(&mut folder, b);
            continue;
        }
        match name_kind(n) {
            Name::Trace(p) => named.push((p, n, b)),
            Name::Misspelt => misspelt.push(n.clone()),
            Name::Other => {}
        }
    }
    folder.notes.extend(misspelt_note(&misspelt));
    named.sort();
    for (pid, name, bytes) in named {
        read_file(&mut folder, &mut index, pid, name, bytes.as_slice());
        if folder.calls > MAX_TRACE_CALLS {
            folder.problems.push(format!(
                "the folder holds more than {MAX_TRACE_CALLS} recorded calls, the most `check` judges"
            ));
            break;
        }
    }
    finish(&mut folder);
    folder
}

/// One line of a file, as the reader sees it (one at a time: the size of
/// a parsed line costs nothing worth a box).
#[allow(clippy::large_enum_variant)]
enum Line {
    Parsed(TraceLine),
    /// A JSON object of a kind this reader does not know (a newer tracer's).
    OtherKind(String),
    Bad(String),
}

fn parse_line(bytes: &[u8]) -> Line {
    // Call lines are nearly all of a trace: read as the record itself,
    // without the tagged enum's buffering (its `kind` field is ignored).
    if bytes.starts_with(br#"{"kind":"call","#) {
        if let Ok(call) = serde_json::from_slice::<CallRecord>(bytes) {
            return Line::Parsed(TraceLine::Call(call));
        }
    }
    match serde_json::from_slice::<TraceLine>(bytes) {
        Ok(line) => Line::Parsed(line),
        Err(e) => {
            // A well-formed object whose kind is not one of ours.
            #[derive(serde::Deserialize)]
            struct Kind {
                kind: String,
            }
            match serde_json::from_slice::<Kind>(bytes) {
                Ok(k)
                    if !matches!(
                        k.kind.as_str(),
                        "header" | "call" | "exit" | "host" | "lookup"
                    ) =>
                {
                    Line::OtherKind(k.kind)
                }
                _ => Line::Bad(e.to_string()),
            }
        }
    }
}

/// The processes of one file: usually one; several when processes of
/// different PID namespaces (or a reused pid) shared the file, each from
/// its own header on.
struct FileProcesses {
    procs: Vec<ProcessTrace>,
    /// Per process: the next `seq` expected.
    next: Vec<u64>,
    /// Per process: the line of its latest call.
    last_line: Vec<usize>,
    /// Per process: the sequence numbers it wrote, with their lines.
    seqs: Vec<Vec<(u64, usize)>>,
    /// Lines whose process could not be told.
    ambiguous: Vec<usize>,
}

impl FileProcesses {
    fn push_next(&mut self) {
        self.next.push(0);
        self.last_line.push(0);
        self.seqs.push(Vec::new());
    }

    /// Records missing from a process's sequence, or written twice: each
    /// a problem (a record lost keeps the trace from being judged).
    fn gaps(&mut self, shown: &str, problems: &mut Vec<String>) {
        for (p, seqs) in self.procs.iter_mut().zip(&mut self.seqs) {
            seqs.sort_unstable();
            let mut expect = 0;
            for &(seq, line) in seqs.iter() {
                if seq < expect {
                    problems.push(format!(
                        "{shown}: record seq {seq} (line {line}) comes again"
                    ));
                } else if seq > expect {
                    problems.push(format!(
                        "{shown}: records seq {expect} to {} are missing (before line {line})",
                        seq - 1
                    ));
                }
                expect = expect.max(seq.saturating_add(1));
            }
            p.calls.sort_by_key(|c| c.seq);
            p.host.sort_by_key(|h| h.seq);
        }
    }

    /// Each exit record to the one process that can have written it: one
    /// that has not exited, whose every call line came before it.
    fn give_exits(&mut self, pid: u32, file: &str, exits: &[(usize, u64)]) {
        if self.procs.is_empty() && !exits.is_empty() {
            self.procs.push(ProcessTrace::new(pid, file, None));
            self.push_next();
        }
        for &(line, t_ns) in exits {
            let waiting: Vec<usize> = (0..self.procs.len())
                .filter(|&i| self.procs[i].exit_ns.is_none() && self.last_line[i] < line)
                .collect();
            // The exit record is written by the tracer's own destructor:
            // destructors of other libraries (a C++ runtime's statics
            // releasing their CUDA objects) may still call the driver after
            // it. So the record also belongs to the one process without an
            // exit whose records began before it.
            // Records are kept in the order read: the first is the earliest.
            let begun = || -> Vec<usize> {
                (0..self.procs.len())
                    .filter(|&i| {
                        self.procs[i].exit_ns.is_none()
                            && self.seqs[i].first().is_some_and(|&(_, n)| n < line)
                    })
                    .collect()
            };
            match (waiting.as_slice(), begun().as_slice()) {
                ([one], _) | ([], [one]) => self.procs[*one].exit_ns = Some(t_ns),
                _ => self.ambiguous.push(line),
            }
        }
    }

    /// The process a record with `seq` belongs to.
    fn owner_of_call(&mut self, pid: u32, file: &str, seq: u64) -> Option<usize> {
        if self.procs.is_empty() {
            self.procs.push(ProcessTrace::new(pid, file, None));
            self.push_next();
        }
        if self.procs.len() == 1 {
            return Some(0);
        }
        let candidates: Vec<usize> = (0..self.procs.len())
            .filter(|&i| self.next[i] == seq)
            .collect();
        match candidates.as_slice() {
            [one] => Some(*one),
            [] => None,
            // Several processes wait for this number: which one wrote the
            // line cannot be told.
            _ => None,
        }
    }
}

fn read_file(
    folder: &mut Folder,
    index: &mut BTreeMap<String, EntryId>,
    pid: u32,
    name: &str,
    source: impl Read,
) {
    let shown = escaped(name);
    let mut reader = BufReader::with_capacity(1 << 16, source.take(MAX_TRACE_FILE_BYTES + 1));
    let mut fp = FileProcesses {
        procs: Vec::new(),
        next: Vec::new(),
        ambiguous: Vec::new(),
        last_line: Vec::new(),
        seqs: Vec::new(),
    };
    let mut line = Vec::with_capacity(512);
    let mut number = 0usize;
    let mut read_bytes = 0u64;
    let mut other_kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad: Vec<(usize, String)> = Vec::new();
    let mut cut = false;
    // Exit records: (line, time), given to their processes once every
    // call line is read.
    let mut exits: Vec<(usize, u64)> = Vec::new();
    loop {
        line.clear();
        // One line, at most MAX_TRACE_LINE_BYTES kept; the rest of a longer
        // line is skipped.
        let mut too_long = false;
        let ended = loop {
            let buf = match reader.fill_buf() {
                Ok(b) => b,
                Err(e) => {
                    folder.problems.push(format!("{shown} cannot be read: {e}"));
                    break false;
                }
            };
            if buf.is_empty() {
                break false;
            }
            let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if line.len() + chunk.len() > MAX_TRACE_LINE_BYTES {
                too_long = true;
            } else {
                line.extend_from_slice(chunk);
            }
            let used = found.unwrap_or(buf.len());
            read_bytes += used as u64;
            reader.consume(used);
            if found.is_some() {
                break true;
            }
        };
        if !ended && line.is_empty() && !too_long {
            break;
        }
        number += 1;
        if read_bytes > MAX_TRACE_FILE_BYTES {
            folder.problems.push(format!(
                "{shown} is longer than the {MAX_TRACE_FILE_BYTES} bytes `check` reads from one trace file"
            ));
            break;
        }
        if !ended {
            cut = true;
        }
        if too_long {
            bad.push((number, format!("longer than {MAX_TRACE_LINE_BYTES} bytes")));
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_line(&line) {
            Line::Parsed(TraceLine::Header(h)) => {
                if h.pid != pid {
                    folder.problems.push(format!(
                        "{shown}: its header (line {number}) names pid {}, not the pid of its name",
                        h.pid
                    ));
                }
                // A header starts a process, unless it repeats the one the
                // file's calls so far belong to.
                let single = fp.procs.len() == 1;
                match fp.procs.last_mut() {
                    Some(p) if p.header.is_none() && single => p.header = Some(h),
                    _ => {
                        fp.procs.push(ProcessTrace::new(pid, name, Some(h)));
                        fp.push_next();
                    }
                }
            }
            Line::Parsed(
                line @ (TraceLine::Call(_) | TraceLine::Host(_) | TraceLine::Lookup(_)),
            ) => {
                let seq = match &line {
                    TraceLine::Call(c) => c.seq,
                    TraceLine::Host(h) => h.seq,
                    TraceLine::Lookup(l) => l.seq,
                    _ => continue,
                };
                let Some(owner) = fp.owner_of_call(pid, name, seq) else {
                    fp.ambiguous.push(number);
                    continue;
                };
                fp.last_line[owner] = number;
                // Threads take their numbers before they write: lines may
                // come a little out of order, and are checked once sorted.
                fp.next[owner] = seq.saturating_add(1).max(fp.next[owner]);
                fp.seqs[owner].push((seq, number));
                match line {
                    TraceLine::Call(c) => {
                        let entry = folder.intern(index, c.call);
                        fp.procs[owner].calls.push(Rec {
                            seq: c.seq,
                            entry,
                            result: c.result,
                            t_ns: c.t_ns,
                            dur_ns: c.dur_ns,
                            args: c.args.into(),
                        });
                        folder.calls += 1;
                        if folder.calls > MAX_TRACE_CALLS {
                            break;
                        }
                    }
                    TraceLine::Host(h) => fp.procs[owner].host.push(h),
                    TraceLine::Lookup(l) => {
                        let lookups = &mut fp.procs[owner].lookups;
                        if lookups.len() < 64 && !lookups.contains(&l.symbol) {
                            lookups.push(l.symbol);
                        }
                    }
                    _ => {}
                }
            }
            Line::Parsed(TraceLine::Exit(e)) => exits.push((number, e.t_ns)),
            Line::OtherKind(kind) => *other_kinds.entry(kind).or_insert(0) += 1,
            Line::Bad(why) => bad.push((number, why)),
        }
    }
    fp.give_exits(pid, name, &exits);
    fp.gaps(&shown, &mut folder.problems);
    for (n, why) in &bad {
        if let Some(p) = fp.procs.last_mut() {
            p.bad_lines.push(*n);
        }
        let what = if cut && *n == number {
            "is cut short (the file ends inside it)".to_string()
        } else {
            format!("does not parse ({why})")
        };
        folder.problems.push(format!("{shown}: line {n} {what}"));
    }
    if !fp.ambiguous.is_empty() {
        folder.problems.push(format!(
            "{shown} holds {} processes with pid {pid} (PID namespaces, or a pid given out again) \
             whose records cannot be told apart at line(s) {}",
            fp.procs.len(),
            list(&fp.ambiguous)
        ));
    }
    if fp.procs.len() > 1 && fp.ambiguous.is_empty() {
        folder.notes.push(format!(
            "{shown} holds {} processes with pid {pid} (PID namespaces, or a pid given out \
             again), told apart by their headers, sequence numbers and times",
            fp.procs.len()
        ));
    }
    for (kind, n) in other_kinds {
        folder.notes.push(format!(
            "{shown}: {n} record(s) of kind '{}' that this version of `check` does not read",
            escaped(&kind)
        ));
    }
    folder.processes.extend(fp.procs);
}

/// At most ten numbers, then how many more.
fn list(numbers: &[usize]) -> String {
    let mut s: Vec<String> = numbers.iter().take(10).map(usize::to_string).collect();
    if numbers.len() > 10 {
        s.push(format!("and {} more", numbers.len() - 10));
    }
    s.join(", ")
}

/// Order the processes by start, report files that hold one process twice,
/// and folders that hold two traced programs at once.
fn finish(folder: &mut Folder) {
    let start = |p: &ProcessTrace| {
        let first = p.calls.first().map_or(u64::MAX, |c| c.t_ns);
        let host = p.host.first().map_or(u64::MAX, |h| h.t_ns);
        p.header
            .as_ref()
            .map_or(first.min(host), |h| h.start_ns.min(first).min(host))
    };
    folder
        .processes
        .sort_by(|a, b| (start(a), a.pid, &a.file).cmp(&(start(b), b.pid, &b.file)));
    duplicates(folder);
    concurrent_runs(folder);
}

/// Two files for one pid are two processes (PID namespaces, a pid given
/// out again) or two images of one (an `exec`) when their headers say so;
/// otherwise one process twice, which the folder must not hold.
fn duplicates(folder: &mut Folder) {
    let mut by_pid: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, p) in folder.processes.iter().enumerate() {
        by_pid.entry(p.pid).or_default().push(i);
    }
    for (pid, procs) in by_pid {
        let mut files: Vec<&str> = procs
            .iter()
            .map(|&i| folder.processes[i].file.as_str())
            .collect();
        files.sort();
        files.dedup();
        if files.len() < 2 {
            continue;
        }
        // What tells processes and images apart: the PID namespace, the
        // process's start (kept across exec) and when the file was made.
        let identities: Vec<Option<(u64, u64, u64)>> = procs
            .iter()
            .map(|&i| {
                folder.processes[i]
                    .header
                    .as_ref()
                    .map(|h| (h.pid_ns, h.proc_start, h.start_ns))
            })
            .collect();
        let distinct = identities.iter().all(Option::is_some) && {
            let mut s = identities.clone();
            s.sort();
            s.dedup();
            s.len() == identities.len()
        };
        let names: Vec<String> = files.iter().map(|f| escaped(f)).collect();
        if !distinct {
            folder.problems.push(format!(
                "pid {pid} has {} trace files ({}) whose headers do not tell apart two \
                 processes or two images of one: one process recorded twice",
                names.len(),
                names.join(", ")
            ));
            continue;
        }
        let namespaces: std::collections::BTreeSet<u64> =
            identities.iter().flatten().map(|i| i.0).collect();
        let what = if namespaces.len() > 1 {
            "processes of different PID namespaces"
        } else {
            "processes or program images (after an exec) of their own, by their headers"
        };
        folder.notes.push(format!(
            "pid {pid} has {} trace files ({}): {what}",
            names.len(),
            names.join(", ")
        ));
    }
}

/// Two programs traced into one folder at once: tracer coverage 1 writes a
/// header as it loads into each program image, so every traced process's
/// parent is in the folder except the traced command's, whose parent is
/// `trace` itself. Two such roots with different parents whose lives
/// overlap are two runs.
fn concurrent_runs(folder: &mut Folder) {
    let procs = &folder.processes;
    if procs.is_empty() || procs.iter().any(|p| p.coverage() == 0) {
        return;
    }
    let pids: std::collections::BTreeSet<u32> = procs.iter().map(|p| p.pid).collect();
    let life = |p: &ProcessTrace| {
        let from = p.header.as_ref().map_or(0, |h| h.start_ns);
        (from, p.end_ns().max(from))
    };
    let roots: Vec<&ProcessTrace> = procs
        .iter()
        .filter(|p| {
            p.header
                .as_ref()
                .is_some_and(|h| h.origin == "load" && !pids.contains(&h.ppid))
        })
        .collect();
    for (i, a) in roots.iter().enumerate() {
        for b in &roots[i + 1..] {
            let (ha, hb) = (a.header.as_ref(), b.header.as_ref());
            let (Some(ha), Some(hb)) = (ha, hb) else {
                continue;
            };
            // Images of one process (exec) share pid, namespace and start.
            let same_process =
                a.pid == b.pid && ha.pid_ns == hb.pid_ns && ha.proc_start == hb.proc_start;
            let (la, lb) = (life(a), life(b));
            let overlap = la.0 <= lb.1 && lb.0 <= la.1;
            if ha.ppid != hb.ppid && !same_process && overlap {
                folder.problems.push(format!(
                    "the folder holds two programs traced at once: {} (pid {}, started by pid {}) \
                     and {} (pid {}, started by pid {}); trace each into a folder of its own",
                    escaped(&ha.exe),
                    a.pid,
                    ha.ppid,
                    escaped(&hb.exe),
                    b.pid,
                    hb.ppid
                ));
                return;
            }
        }
    }
}

/// One event of the merged history: a call (by process and call index)
/// or the end of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergedEntry {
    Call {
        process: usize,
        call: usize,
    },
    /// A host record (`ProcessTrace::host`).
    Host {
        process: usize,
        index: usize,
    },
    End {
        process: usize,
    },
}

/// Host operations that take what another process gave: they are placed in
/// the history when they return, so that the giving record comes first.
fn receives(op: &str) -> bool {
    matches!(op, "recv" | "sem_wait" | "wait" | "pidfd_getfd")
}

/// Every call of every process in the order of their start times (ties:
/// process, then sequence), each process ending at its exit record or the
/// end of its last call.
pub fn merged(folder: &Folder) -> Vec<MergedEntry> {
    let hosts: usize = folder.processes.iter().map(|p| p.host.len()).sum();
    let mut keyed: Vec<((u64, u8, usize, u64), MergedEntry)> =
        Vec::with_capacity(folder.calls + hosts + folder.processes.len());
    for (process, p) in folder.processes.iter().enumerate() {
        for (call, c) in p.calls.iter().enumerate() {
            keyed.push((
                (c.t_ns, 0, process, c.seq),
                MergedEntry::Call { process, call },
            ));
        }
        for (index, h) in p.host.iter().enumerate() {
            let at = if receives(&h.op) {
                h.t_ns.saturating_add(h.dur_ns)
            } else {
                h.t_ns
            };
            keyed.push((
                (at, 0, process, h.seq),
                MergedEntry::Host { process, index },
            ));
        }
        keyed.push((
            (p.end_ns(), 1, process, u64::MAX),
            MergedEntry::End { process },
        ));
    }
    keyed.sort_unstable_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, e)| e).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: u32, start: u64) -> String {
        format!(
            r#"{{"kind":"header","pid":{pid},"ppid":1,"exe":"prog","start_ns":{start},"tracer_version":"0.1.0"}}"#
        )
    }

    fn call(seq: u64, name: &str, t: u64) -> String {
        format!(
            r#"{{"kind":"call","seq":{seq},"call":"{name}","result":0,"t_ns":{t},"dur_ns":10,"tid":1,"args":{{}}}}"#
        )
    }

    fn file(lines: &[String]) -> Vec<u8> {
        let mut s = lines.join("\n");
        s.push('\n');
        s.into_bytes()
    }

    #[test]
    fn a_line_cut_inside_a_character_spoils_that_line_only() {
        let mut bytes = file(&[header(7, 5), call(0, "cuMemAlloc_v2", 1)]);
        // A second call whose entry point ends in a cut two-byte character.
        bytes.extend_from_slice(br#"{"kind":"call","seq":1,"call":"cu"#);
        bytes.push(0xc3);
        let folder = read_files(&[("trace-7.jsonl".into(), bytes)]);
        assert_eq!(folder.processes.len(), 1);
        assert_eq!(folder.calls, 1, "{folder:?}");
        assert_eq!(folder.processes[0].bad_lines, [3]);
        assert!(
            folder.problems[0].contains("line 3 is cut short"),
            "{:?}",
            folder.problems
        );
    }

    #[test]
    fn a_missing_or_repeated_sequence_number_is_a_problem() {
        let f = file(&[
            header(7, 5),
            call(0, "a", 1),
            call(2, "b", 2),
            call(2, "c", 3),
        ]);
        let folder = read_files(&[("trace-7.jsonl".into(), f)]);
        assert!(folder
            .problems
            .iter()
            .any(|p| p.contains("seq 1 to 1 are missing")));
        assert!(folder
            .problems
            .iter()
            .any(|p| p.contains("seq 2 (line 4) comes again")));
    }

    #[test]
    fn two_files_for_one_pid_are_reported() {
        let a = file(&[header(101, 5), call(0, "a", 6)]);
        let folder = read_files(&[
            ("trace-101.jsonl".into(), a.clone()),
            ("trace-101.2.jsonl".into(), a.clone()),
            ("trace-0101.jsonl".into(), a),
        ]);
        assert_eq!(folder.processes.len(), 2);
        assert!(
            folder
                .problems
                .iter()
                .any(|p| p.contains("pid 101 has 2 trace files")),
            "{:?}",
            folder.problems
        );
        assert!(
            folder.notes.iter().any(|n| n.contains("trace-0101.jsonl")),
            "{:?}",
            folder.notes
        );
    }

    #[test]
    fn two_processes_of_one_pid_in_one_file_are_told_apart() {
        // Processes A and B, both pid 1 in PID namespaces of their own,
        // their lines interleaved as they appended them; B started when A
        // had made two calls, so the sequence numbers tell them apart.
        let f = file(&[
            header(1, 100),
            call(0, "a0", 90),
            call(1, "a1", 200),
            header(1, 105),
            call(0, "b0", 300),
            call(2, "a2", 400),
            r#"{"kind":"exit","t_ns":450}"#.to_string(),
            call(1, "b1", 500),
            r#"{"kind":"exit","t_ns":900}"#.to_string(),
        ]);
        let folder = read_files(&[("trace-1.jsonl".into(), f)]);
        assert!(folder.problems.is_empty(), "{:?}", folder.problems);
        assert_eq!(folder.processes.len(), 2, "{folder:?}");
        let names = |p: &ProcessTrace| -> Vec<String> {
            p.calls
                .iter()
                .map(|c| folder.entry(c).to_string())
                .collect()
        };
        assert_eq!(names(&folder.processes[0]), ["a0", "a1", "a2"]);
        assert_eq!(names(&folder.processes[1]), ["b0", "b1"]);
        assert_eq!(folder.processes[0].exit_ns, Some(450));
        assert_eq!(folder.processes[1].exit_ns, Some(900));
        // Two processes waiting for the same sequence number: whose line
        // it is cannot be told.
        let both = file(&[
            header(1, 100),
            header(1, 105),
            call(0, "a0", 110),
            call(0, "b0", 120),
        ]);
        let folder = read_files(&[("trace-1.jsonl".into(), both)]);
        assert!(
            folder
                .problems
                .iter()
                .any(|p| p.contains("cannot be told apart")),
            "{:?}",
            folder.problems
        );
    }

    #[test]
    fn names_are_escaped_onto_one_line() {
        assert_eq!(escaped("a\nb\\c\u{2028}"), "a\\nb\\\\c\\u{2028}");
    }

    #[test]
    fn a_fifo_and_a_device_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("trace-7.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("trace-8.jsonl")).unwrap();
        std::fs::create_dir(dir.path().join("trace-9.jsonl")).unwrap();
        let folder = read_dir(dir.path()).unwrap();
        let problems = folder.problems.join("\n");
        assert!(problems.contains("trace-7.jsonl is a FIFO"), "{problems}");
        assert!(problems.contains("trace-8.jsonl is a device"), "{problems}");
        assert!(problems.contains("trace-9.jsonl is a folder"), "{problems}");
    }
}
