//! Fuzzing on stable Rust: seeded random and mutated inputs for the readers
//! of untrusted input: the scenario parser, the expectations reader, the
//! results.json reader, the worker's request decoder and the shard merger.
//!
//! The corpus is the committed clause files, expectations files and small
//! results.json files; the mutator flips and inserts bytes, deletes,
//! duplicates and splices ranges, and drops in tokens that tend to find
//! limits (huge numbers, sizes, keywords). Every input must give a result
//! or an error: no panic, no input slower than [`SLOWEST`], no single
//! allocation above [`LARGEST_ALLOCATION`].
//!
//! The budget is a number of inputs per target, not a time (the same work on
//! any machine): `IPC_FUZZ_INPUTS` (default [`DEFAULT_INPUTS`], a few
//! seconds in all), and `IPC_FUZZ_SEED` picks another sequence. The long
//! budget: `IPC_FUZZ_INPUTS=1000000 cargo nextest run -p ipc-conformance
//! --profile fuzz --release` (or `cargo test --release --test fuzz`). A
//! failing input is written to `CARGO_TARGET_TMPDIR/fuzz-failures/`.

use ipc_conformance::expectations::Expectations;
use ipc_conformance::report::json;
use ipc_conformance::shard;
use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Inputs per target in a plain `cargo test`.
const DEFAULT_INPUTS: u64 = 400;
/// The slowest an input may be.
const SLOWEST: Duration = Duration::from_secs(1);
/// The slowest a trace folder may be to judge: [`SLOWEST`] in a release
/// build, the build docs/reliability.md measures. `check` runs the replay
/// on the simulator once per profile, and a debug build does that some 35
/// times slower (74 ms against 2.6 s for the slowest of the 400 default
/// inputs on the 2-core build machine), so there the bound only catches a
/// hang.
const SLOWEST_CHECK: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(30)
} else {
    SLOWEST
};
/// The largest single allocation an input may make.
const LARGEST_ALLOCATION: usize = 1 << 30;
/// The longest input the mutator makes.
const MAX_INPUT: usize = 256 << 10;

/// The system allocator, remembering the largest single request.
struct Tracking;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds GlobalAlloc's contract; System is forwarded it unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller upholds GlobalAlloc's contract; System is forwarded it unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds GlobalAlloc's contract; System is forwarded it unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: the caller upholds GlobalAlloc's contract; System is forwarded it unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// xorshift64*: small, seeded, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens that reach limits and keywords faster than random bytes.
const DICTIONARY: &[&str] = &[
    "0",
    "1",
    "2",
    "255",
    "256",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "-9223372036854775808",
    "0x",
    "0xffffffff",
    "256MiB",
    "1GiB",
    "4096GiB",
    "KiB",
    "\n",
    "\r\n",
    "\t",
    " ",
    "=",
    "=>",
    ":",
    ",",
    "#",
    "*",
    "\"",
    "'",
    "{",
    "}",
    "[",
    "]",
    "[[expect]]",
    "\\u0000",
    "\u{feff}",
    "é",
    "devices ",
    "process ",
    "topology peers=all",
    "peer_budget=",
    "device=",
    "visible=",
    "expect hazard ",
    "malloc ",
    "read ",
    "device_read ",
    "write ",
    "fill ",
    "ipc_get ",
    "ipc_open ",
    "ipc_close ",
    "send ",
    " -> ",
    "exit",
    "flags=",
    "ok",
    "bytes ",
    "*16",
    "clause = ",
    "outcome = ",
    "reason = ",
    "driver = ",
    ">=580, <590",
    "cc = ",
    "\"1/4294967295\"",
    "\"shard\": ",
    "\"results\": ",
    "\"status\": ",
    "\"Pass\"",
    "\"NotSupported\"",
    "null",
    "true",
    "Probe",
    "Init",
    "Alloc",
    "IpcOpenMemHandle",
    "VmmCreate",
    "ReceiveFd",
    "SendFd",
    "Write",
    "\"bytes\":\"",
    "\"len\":",
    "\"size\":",
];

/// One mutated input drawn from `corpus`.
fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    if rng.below(16) == 0 {
        let len = rng.below(512);
        return (0..len).map(|_| rng.next() as u8).collect();
    }
    let mut v = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(v.len() + 1);
        match rng.below(9) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            2 | 3 => {
                let token = DICTIONARY[rng.below(DICTIONARY.len())].as_bytes();
                v.splice(at..at, token.iter().copied());
            }
            4 => {
                let end = (at + 1 + rng.below(64)).min(v.len());
                v.drain(at..end);
            }
            5 => {
                let end = (at + 1 + rng.below(256)).min(v.len());
                let chunk = v[at..end].to_vec();
                let to = rng.below(v.len() + 1);
                for _ in 0..1 + rng.below(4) {
                    v.splice(to..to, chunk.iter().copied());
                }
            }
            6 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len() + 1);
                v.truncate(at);
                v.extend_from_slice(&other[from..]);
            }
            7 => {
                // A number replaced by another, often a huge one.
                if let Some(i) = (at..v.len()).find(|&i| v[i].is_ascii_digit()) {
                    let end = (i..v.len())
                        .find(|&j| !v[j].is_ascii_digit())
                        .unwrap_or(v.len());
                    let n = DICTIONARY[rng.below(8)].as_bytes();
                    v.splice(i..end, n.iter().copied());
                }
            }
            _ => v.truncate(at),
        }
        v.truncate(MAX_INPUT);
    }
    v
}

fn inputs() -> u64 {
    std::env::var("IPC_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_INPUTS)
}

fn seed() -> u64 {
    std::env::var("IPC_FUZZ_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Files under `dir` (recursively) whose names end in `suffix`, at most
/// `max_len` bytes each, sorted.
fn files(dir: &Path, suffix: &str, max_len: u64) -> Vec<Vec<u8>> {
    fn walk(dir: &Path, suffix: &str, max_len: u64, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, suffix, max_len, out);
            } else if p.to_string_lossy().ends_with(suffix)
                && e.metadata().is_ok_and(|m| m.len() <= max_len)
            {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    walk(dir, suffix, max_len, &mut paths);
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// Run `target` on `inputs()` mutated inputs; fail on a panic, a slow input
/// or a huge allocation, saving the input.
fn fuzz(name: &str, corpus: &[Vec<u8>], target: impl Fn(&[u8])) {
    fuzz_within(name, SLOWEST, corpus, target)
}

/// [`fuzz`] with `slowest` the bound of one input.
fn fuzz_within(name: &str, slowest_allowed: Duration, corpus: &[Vec<u8>], target: impl Fn(&[u8])) {
    assert!(!corpus.is_empty(), "{name}: empty corpus");
    let n = inputs();
    let mut rng = Rng::new(seed() ^ name.len() as u64 ^ name.as_bytes()[0] as u64);
    let mut slowest = Duration::ZERO;
    let start = Instant::now();
    let before = LARGEST.load(Ordering::Relaxed);
    for i in 0..n {
        let input = mutate(&mut rng, corpus);
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| target(&input)));
        let took = t.elapsed();
        slowest = slowest.max(took);
        let largest = LARGEST.load(Ordering::Relaxed);
        let problem = if outcome.is_err() {
            Some("panicked".to_string())
        } else if took > slowest_allowed {
            Some(format!("took {took:?}"))
        } else if largest > LARGEST_ALLOCATION {
            Some(format!("allocated {largest} bytes at once"))
        } else {
            None
        };
        if let Some(problem) = problem {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join(format!("{name}-{}-{i}.bin", seed()));
            std::fs::write(&file, &input).unwrap();
            panic!("{name}: input {i} {problem}: saved as {}", file.display());
        }
    }
    eprintln!(
        "fuzz {name}: {n} inputs in {:.1} s, slowest {:.1} ms, largest allocation {} bytes (before: {before}), no panic",
        start.elapsed().as_secs_f64(),
        slowest.as_secs_f64() * 1000.0,
        LARGEST.load(Ordering::Relaxed),
    );
}

fn text(input: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(input)
}

#[test]
fn fuzz_the_scenario_parser() {
    let mut corpus = files(&repo().join("conformance/clauses"), ".ipc", 64 << 10);
    corpus.extend(files(
        &repo().join("conformance/tests/explore-regressions"),
        ".ipc",
        64 << 10,
    ));
    fuzz("scenario", &corpus, |input| {
        let _ = ipc_harness::scenario::parse(&text(input), Path::new("fuzz.ipc"));
    });
}

#[test]
fn fuzz_the_expectations_reader() {
    let mut corpus = files(&repo().join("conformance/expectations"), ".toml", 64 << 10);
    // The documentation's examples.
    let doc = std::fs::read_to_string(repo().join("docs/expectations.md")).unwrap();
    for block in doc.split("```toml").skip(1) {
        if let Some((toml, _)) = block.split_once("```") {
            corpus.push(toml.as_bytes().to_vec());
        }
    }
    fuzz("expectations", &corpus, |input| {
        let _ = Expectations::parse(&text(input), Path::new("fuzz.toml"));
    });
}

/// Small committed results.json files.
fn results_corpus() -> Vec<Vec<u8>> {
    let corpus = files(&repo().join("reports"), "results.json", 128 << 10);
    assert!(
        corpus.len() >= 2,
        "{} small results.json files",
        corpus.len()
    );
    corpus.into_iter().take(4).collect()
}

#[test]
fn fuzz_the_results_reader() {
    fuzz("results", &results_corpus(), |input| {
        if let Ok(report) = json::from_str(&text(input)) {
            let _ = ipc_conformance::report::markdown::summary(std::slice::from_ref(&report));
            let _ = ipc_conformance::cli::exit_code(&report);
        }
    });
}

#[cfg(feature = "cuda")]
#[test]
fn fuzz_the_worker_request_decoder() {
    use ipc_harness::cuda::protocol::{decode, encode_frame, read_frame};
    use ipc_harness::cuda::Request;
    use ipc_harness::Dialect;
    let requests = [
        Request::Probe,
        Request::Init {
            dialect: Dialect::Runtime,
            device: 0,
        },
        Request::DeviceCount,
        Request::CanAccessPeer { device: 0, peer: 1 },
        Request::SetDevice { device: 1 },
        Request::SetCurrentContext {
            ctx: ipc_harness::ContextId(0x5555_0000),
        },
        Request::Memset {
            ptr: ipc_harness::DevicePtr(0x7f00_0000_0000),
            value: 0xa1,
            len: 4096,
        },
        Request::Write {
            ptr: ipc_harness::DevicePtr(0x7f00_0000_0000),
            bytes: vec![1, 2, 3, 255],
        },
        Request::Read {
            ptr: ipc_harness::DevicePtr(0x7f00_0000_0000),
            len: 16,
        },
        Request::IpcCloseMemHandle {
            ptr: ipc_harness::DevicePtr(0x7f00_0000_0000),
        },
        Request::VmmReserve { size: 2 << 20 },
        Request::ReceiveFd,
        Request::SendFd { fd: 5 },
        Request::Reset,
        Request::Exit,
    ];
    let corpus: Vec<Vec<u8>> = requests.iter().map(|r| encode_frame(r).unwrap()).collect();
    fuzz("request", &corpus, |input| {
        // As the worker reads: a frame, then its JSON; a mutated length
        // prefix is the reader's business too.
        let mut stream = input;
        if let Ok(payload) = read_frame(&mut stream) {
            let _ = decode::<Request>(&payload);
        }
        let _ = decode::<Request>(input);
    });
}

#[test]
fn fuzz_the_shard_merger() {
    // Shards 1/2 and 2/2 of each small results.json, as one input:
    // the two texts joined by a form feed.
    let mut corpus = Vec::new();
    for bytes in results_corpus() {
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let mut halves = [v.clone(), v];
        for (k, half) in halves.iter_mut().enumerate() {
            half["run"]["shard"] = format!("{}/2", k + 1).into();
            let kept: Vec<serde_json::Value> = half["results"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 2 == k)
                .map(|(_, r)| r.clone())
                .collect();
            half["results"] = kept.into();
        }
        let mut input = serde_json::to_vec(&halves[0]).unwrap();
        input.push(b'\x0c');
        input.extend(serde_json::to_vec(&halves[1]).unwrap());
        corpus.push(input);
    }
    fuzz("merge", &corpus, |input| {
        let text = text(input);
        let parts: Vec<_> = text
            .split('\x0c')
            .filter_map(|t| json::from_str(t).ok())
            .enumerate()
            .map(|(i, r)| (format!("shard-{i}"), r))
            .collect();
        if !parts.is_empty() {
            let force = input.len() % 2 == 0;
            if let Ok(merged) = shard::merge(parts, force) {
                let _ = ipc_conformance::report::markdown::summary(std::slice::from_ref(
                    &merged.report,
                ));
            }
        }
    });
}

/// A trace folder as one input: its files, each `NAME\n` then the
/// contents, joined by a form feed (so that the mutator splices lines and
/// files alike).
fn folder_bytes(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, (name, bytes)) in files.iter().enumerate() {
        if i > 0 {
            out.push(b'\x0c');
        }
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(bytes);
    }
    out
}

/// The files an input stands for (names that are not the tracer's are
/// left out by the reader, as in a folder).
fn folder_files(input: &[u8]) -> Vec<(String, Vec<u8>)> {
    input
        .split(|&b| b == b'\x0c')
        .map(|part| match part.iter().position(|&b| b == b'\n') {
            Some(i) => (
                String::from_utf8_lossy(&part[..i]).into_owned(),
                part[i + 1..].to_vec(),
            ),
            None => (String::from_utf8_lossy(part).into_owned(), Vec::new()),
        })
        .collect()
}

/// Tokens of trace records, spliced into the check target's inputs.
const TRACE_TOKENS: &[&str] = &[
    r#"{"kind":"call","seq":0,"call":"cuMemFree_v2","result":0,"t_ns":1,"dur_ns":1,"tid":1,"args":{"ptr":140000000000000}}"#,
    r#"{"kind":"exit","t_ns":18446744073709551615}"#,
    r#"{"kind":"header","pid":1,"ppid":0,"exe":"x\ny: malloc 1","start_ns":0,"tracer_version":"9","coverage":1,"origin":"load"}"#,
    r#"{"kind":"host","seq":3,"op":"recv","call":"recvmsg","result":1,"t_ns":5,"dur_ns":1,"tid":1,"args":{"fd":3,"object":"socket:1","fds":[7,8]}}"#,
    r#"{"kind":"host","seq":4,"op":"fork","call":"fork","result":2,"t_ns":5,"dur_ns":1,"tid":1,"args":{"pid":2}}"#,
    r#"{"kind":"lookup","seq":5,"via":"dlsym","symbol":"cuNew","t_ns":5,"tid":1}"#,
    "\"call\":\"cuLaunchKernel\"",
    "\"call\":\"cuIpcCloseMemHandle\"",
    "\"call\":\"cuMemPoolImportPointer\"",
    "\"pointer_args\":[",
    "\"result\":600",
    "\"seq\":",
    "\"ptr\":",
    "\"device\":255",
    "\"size\":18446744073709551615",
    "trace-1.jsonl\n",
    "trace-1.2.jsonl\n",
    "trace-01.jsonl\n",
];

#[test]
fn fuzz_the_trace_checker() {
    use ipc_conformance::trace_check::{self, load};
    let mut corpus = Vec::new();
    // Every committed trace folder (NVIDIA's samples, the GPU runs of
    // tracer/validation, the stand-in runs).
    fn folders(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.join("expected.txt").is_file() {
                    out.push(p.clone());
                }
                folders(&p, out);
            }
        }
    }
    let mut dirs = Vec::new();
    folders(&repo().join("reports/traces"), &mut dirs);
    dirs.sort();
    for dir in dirs {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("trace-"))
            .map(|n| {
                let bytes = std::fs::read(dir.join(&n)).unwrap();
                (n, bytes)
            })
            .collect();
        files.sort();
        let bytes = folder_bytes(&files);
        if bytes.len() <= MAX_INPUT {
            corpus.push(bytes);
        }
    }
    assert!(corpus.len() >= 20, "{} trace folders", corpus.len());
    let splice = std::sync::Mutex::new(Rng::new(seed() ^ 0x0074_7261_6365));
    fuzz_within("check", SLOWEST_CHECK, &corpus, |input| {
        let mut input = input.to_vec();
        // A record-shaped token now and then, where the mutator put none.
        {
            let mut rng = splice.lock().unwrap();
            if rng.below(3) == 0 {
                let token = TRACE_TOKENS[rng.below(TRACE_TOKENS.len())].as_bytes();
                let at = rng.below(input.len() + 1);
                input.splice(at..at, token.iter().copied());
            }
        }
        let folder = load::read_files(&folder_files(&input));
        let (report, replay) = trace_check::check_folder(folder, "fuzz");
        let _ = trace_check::report::text(&report);
        let _ = trace_check::report::markdown(&report);
        let _ = serde_json::to_vec(&report).unwrap();
        // The replay is a scenario file: it parses back, unless it
        // declares more processes than a file may.
        if report.processes.len() <= ipc_harness::scenario::limits::MAX_PROCESSES {
            if let Err(e) = ipc_harness::scenario::parse(&replay, Path::new("replay.ipc")) {
                panic!("the replay does not parse: {e}\n{replay}");
            }
        }
    });
}
