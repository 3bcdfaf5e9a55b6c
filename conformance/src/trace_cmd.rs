//! `ipc-conformance trace [--out DIR] -- CMD ARGS...`: run CMD with the
//! tracer preloaded (inherited by every process it starts) and say what was
//! recorded, and where the tracer did not load. The exit code is CMD's
//! (128 + N when a signal N ended it).
//!
//! The binary carries the tracer library (`conformance/build.rs` builds it)
//! and writes it into a private folder of its own (mode 0700, the file made
//! with `O_EXCL`) that it preloads from, under a path with no space or colon
//! (`LD_PRELOAD` splits on both); `--tracer` or `$IPC_TRACER_LIB` name
//! another library, copied there the same way. SIGINT, SIGTERM and SIGHUP
//! reaching `trace` are passed to CMD's process group, and `trace` waits
//! for CMD before it exits.

use crate::trace_check::load::{ProgramEnd, PROGRAM_END_FILE};
use ipc_harness::trace_record::{self, TraceLine, DIR_ENV};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{BufRead, Write as _};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};

/// The tracer library's file name.
pub const TRACER_FILE: &str = "libipc_tracer.so";
/// Environment variable naming the tracer library (instead of `--tracer`).
pub const TRACER_ENV: &str = "IPC_TRACER_LIB";

/// The tracer library this binary was built with.
static EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libipc_tracer.so"));

#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// Directory for the per-process traces (created; must hold no traces
    /// yet, belong to you and be writable by no one else).
    #[arg(long, default_value = "ipc-trace")]
    pub out: PathBuf,
    /// The tracer library (default: $IPC_TRACER_LIB, else the one this
    /// binary carries).
    #[arg(long)]
    pub tracer: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

/// Whether `bytes` start like an ELF shared object (`ET_DYN`).
fn is_shared_library(bytes: &[u8]) -> bool {
    bytes.len() > 18
        && bytes.starts_with(b"\x7fELF")
        && u16::from_le_bytes([bytes[16], bytes[17]]) == 3
}

/// The library to preload: an explicit one (read and checked), else the
/// carried one.
fn tracer_bytes(explicit: Option<&Path>) -> Result<(Vec<u8>, String), String> {
    let chosen = explicit.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(TRACER_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    let Some(path) = chosen else {
        return Ok((EMBEDDED.to_vec(), "the tracer this binary carries".into()));
    };
    let meta = std::fs::metadata(&path)
        .map_err(|e| format!("cannot read the tracer library {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "the tracer library {} is not a file",
            path.display()
        ));
    }
    if meta.len() > 256 << 20 {
        return Err(format!(
            "the tracer library {} is larger than 256 MiB",
            path.display()
        ));
    }
    let bytes = std::fs::read(&path)
        .map_err(|e| format!("cannot read the tracer library {}: {e}", path.display()))?;
    if !is_shared_library(&bytes) {
        return Err(format!(
            "{} is not a shared library (an ELF file of type ET_DYN): the loader would ignore it and nothing would be recorded",
            path.display()
        ));
    }
    Ok((bytes, path.display().to_string()))
}

/// A base for the private folder whose path `LD_PRELOAD` can carry: no
/// space, colon or newline.
fn private_base() -> PathBuf {
    let ok = |p: &Path| {
        p.is_absolute()
            && p.to_str()
                .is_some_and(|s| !s.contains([' ', ':', '\n', '\t']))
            && p.is_dir()
    };
    let tmp = std::env::temp_dir();
    if ok(&tmp) {
        tmp
    } else {
        PathBuf::from("/tmp")
    }
}

/// Write the library into a fresh private folder (0700, `O_EXCL`, never
/// following a link) and give back the folder (removed when dropped) and
/// the file's path.
fn install_private(bytes: &[u8]) -> Result<(tempfile::TempDir, PathBuf), String> {
    let base = private_base();
    let dir = tempfile::Builder::new()
        .prefix("ipc-conformance-tracer-")
        .tempdir_in(&base)
        .map_err(|e| format!("cannot make a private folder in {}: {e}", base.display()))?;
    // Before anything is written in it.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .map_err(|e| format!("cannot make {} private: {e}", dir.path().display()))?;
    let path = dir.path().join(TRACER_FILE);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o500)
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    file.write_all(bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((dir, path))
}

/// Make `--out` and check that only this user can write it: another user
/// who can write the folder could plant names the tracer or `check` would
/// use.
fn prepare_out(out: &Path) -> Result<PathBuf, String> {
    if let Err(e) = std::fs::create_dir_all(out) {
        return Err(match out.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) if parent.exists() && !parent.is_dir() => {
                format!(
                    "cannot create {}: {} is not a folder",
                    out.display(),
                    parent.display()
                )
            }
            Some(parent) if !parent.exists() => {
                format!(
                    "cannot create {}: its folder {} does not exist",
                    out.display(),
                    parent.display()
                )
            }
            _ => format!("cannot create {}: {e}", out.display()),
        });
    }
    let dir =
        std::fs::canonicalize(out).map_err(|e| format!("cannot resolve {}: {e}", out.display()))?;
    let meta =
        std::fs::metadata(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    // SAFETY: plain query.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to another user (uid {}): choose a folder of your own for --out",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} can be written by others (mode {:o}): they could plant files the traced processes and check would use; choose a folder only you can write (chmod go-w)",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    if nix::unistd::access(
        &dir,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .is_err()
    {
        return Err(format!(
            "cannot write into {} (mode {:o}): the traced processes could not create their files",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(dir)
}

/// What the trace files of a directory say: per file, its pid, whether it
/// has a header, its call lines; and the processes the tracer saw start.
#[derive(Default)]
struct Recorded {
    files: usize,
    calls: usize,
    /// Pids with a file, and how many files (images) each has.
    pids: BTreeMap<u32, usize>,
    /// Children the traced processes started, and how.
    started: Vec<Started>,
}

struct Started {
    parent: u32,
    pid: u32,
    how: String,
    path: Option<String>,
    env_traced: Option<bool>,
    setid: Option<bool>,
    /// For an exec: the images of `pid` the exec should have added to.
    images_before: usize,
}

/// Trace files in `dir` (regular files only) and what they hold.
fn recorded(dir: &Path) -> Recorded {
    let mut out = Recorded::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, index)) = name.to_str().and_then(trace_record::parse_file_name) else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            files.push((pid, index, entry.path()));
        }
    }
    files.sort();
    for (pid, _, path) in files {
        out.files += 1;
        *out.pids.entry(pid).or_default() += 1;
        let images = out.pids[&pid];
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        let mut pending_exec: Option<Started> = None;
        for line in std::io::BufReader::new(file)
            .split(b'\n')
            .map_while(Result::ok)
        {
            if line.len() > 1 << 20 {
                continue;
            }
            const CALL: &[u8] = br#""kind":"call","#;
            if line.windows(CALL.len()).any(|w| w == CALL) {
                out.calls += 1;
                continue;
            }
            if !line.starts_with(br#"{"kind":"host""#) {
                continue;
            }
            let Ok(TraceLine::Host(host)) = serde_json::from_slice::<TraceLine>(&line) else {
                continue;
            };
            let started = |how: &str, child: u32| Started {
                parent: pid,
                pid: child,
                how: how.to_string(),
                path: host.args.path.clone(),
                env_traced: host.args.env_traced,
                setid: host.args.setid,
                images_before: 0,
            };
            match host.op.as_str() {
                "fork" | "spawn" => {
                    if let Some(child) = host.args.pid {
                        out.started.push(started(&host.call, child));
                    }
                }
                "exec" => {
                    let mut s = started(&host.call, pid);
                    s.images_before = images;
                    pending_exec = Some(s);
                }
                "exec_failed" => pending_exec = None,
                _ => {}
            }
        }
        out.started.extend(pending_exec);
    }
    out
}

/// The processes the tracer should have loaded in and did not, each with
/// what the records say about why.
fn not_loaded(rec: &Recorded, command: &str, command_pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    if !rec.pids.contains_key(&command_pid) {
        out.push(format!(
            "the tracer did not load in {command} (pid {command_pid}): nothing of it is recorded (a statically linked program, a set-user-ID program, or a library the loader refused; its own messages say which)"
        ));
    }
    let mut seen = BTreeSet::new();
    for s in &rec.started {
        let images = rec.pids.get(&s.pid).copied().unwrap_or(0);
        let loaded = if s.how.starts_with("exec") {
            images > s.images_before
        } else {
            images > 0
        };
        if loaded || !seen.insert((s.pid, s.how.clone())) {
            continue;
        }
        let what = match &s.path {
            Some(path) => format!("{} of {path}", s.how),
            None => s.how.clone(),
        };
        let why = if s.setid == Some(true) {
            "the program is set-user-ID or set-group-ID, so the loader ignores LD_PRELOAD there"
        } else if s.env_traced == Some(false) {
            "its environment no longer preloads the tracer or names the trace folder"
        } else if s.how == "fork" {
            "the child could not create its trace file"
        } else {
            "the tracer did not load there"
        };
        let who = if s.how.starts_with("exec") {
            format!("pid {} after {what}", s.pid)
        } else {
            format!("pid {} ({what} by pid {})", s.pid, s.parent)
        };
        out.push(format!("not traced: {who}: {why}"));
    }
    out
}

/// The child's process group, for the signal handler.
static CHILD_GROUP: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the child's group was known.
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(signal: libc::c_int) {
    let group = CHILD_GROUP.load(Ordering::SeqCst);
    if group > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(-group, signal) };
    } else {
        PENDING.store(signal, Ordering::SeqCst);
    }
}

/// The child's group is known: forward from now on, and what came before.
fn forward_to(group: i32) {
    CHILD_GROUP.store(group, Ordering::SeqCst);
    let pending = PENDING.swap(0, Ordering::SeqCst);
    if pending != 0 {
        // SAFETY: signalling the group of the child this process started.
        unsafe { libc::kill(-group, pending) };
    }
}

/// Pass SIGINT, SIGTERM and SIGHUP on to the child's process group.
fn forward_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installing a handler that only calls kill.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The terminal on standard input when `trace` is its foreground job: the
/// child's group is given the terminal (as a shell would), and it is taken
/// back at the end.
struct Terminal {
    ours: libc::pid_t,
}

impl Terminal {
    fn hand_to(group: libc::pid_t) -> Option<Terminal> {
        // SAFETY: plain terminal queries and settings on stdin.
        unsafe {
            if libc::isatty(0) == 0 || libc::tcgetpgrp(0) != libc::getpgrp() {
                return None;
            }
            let ours = libc::getpgrp();
            Terminal::set(group);
            // A child that read the terminal before it was its own was
            // stopped (SIGTTIN): let it go on.
            libc::kill(-group, libc::SIGCONT);
            Some(Terminal { ours })
        }
    }

    fn set(group: libc::pid_t) {
        // SAFETY: SIGTTOU blocked while a background group takes the
        // terminal, as shells do.
        unsafe {
            let mut block: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut block);
            libc::sigaddset(&mut block, libc::SIGTTOU);
            libc::sigprocmask(libc::SIG_BLOCK, &block, &mut old);
            libc::tcsetpgrp(0, group);
            libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        Terminal::set(self.ours);
    }
}

/// Hold `out` for this `trace` alone while it runs: an exclusive `flock`
/// on the folder, which the kernel drops when `trace` ends however it
/// ends. A second `trace` into the same folder at the same time would mix
/// two programs' processes in one trace.
fn lock_out(out: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let dir =
        std::fs::File::open(out).map_err(|e| format!("cannot open {}: {e}", out.display()))?;
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "another trace is writing into {}; wait for it or choose another --out",
            out.display()
        ));
    }
    Ok(dir)
}

pub fn command(args: &TraceArgs) -> Result<u8, String> {
    let (bytes, source) = tracer_bytes(args.tracer.as_deref())?;
    let out = prepare_out(&args.out)?;
    let _held = lock_out(&out)?;
    let before = recorded(&out);
    if before.files > 0 || out.join(PROGRAM_END_FILE).symlink_metadata().is_ok() {
        return Err(format!(
            "{} already holds traces; remove them or choose another --out",
            out.display()
        ));
    }
    let (private, tracer) = install_private(&bytes)?;
    let mut preload = tracer.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(":");
        preload.push(existing);
    }
    let (program, rest) = args.command.split_first().ok_or("no command to trace")?;
    let name = program.to_string_lossy().into_owned();
    forward_signals();
    let mut child = std::process::Command::new(program)
        .args(rest)
        .env("LD_PRELOAD", preload)
        .env(DIR_ENV, &out)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {name}: {e}"))?;
    let pid = child.id();
    forward_to(pid as i32);
    let terminal = Terminal::hand_to(pid as libc::pid_t);
    let status = child.wait();
    drop(terminal);
    CHILD_GROUP.store(0, Ordering::SeqCst);
    drop(private);
    let status = status.map_err(|e| format!("cannot wait for {name}: {e}"))?;
    let code = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => {
            eprintln!(
                "ipc-conformance trace: {name} was killed by signal {signal}; what it recorded is kept"
            );
            (128 + signal).clamp(0, 255) as u8
        }
        (None, None) => 255,
    };
    write_program_end(&out, &name, pid, &status);
    let rec = recorded(&out);
    let missing = not_loaded(&rec, &name, pid);
    for line in &missing {
        eprintln!("ipc-conformance trace: {line}");
    }
    if rec.calls == 0 {
        if rec.pids.contains_key(&pid) {
            println!(
                "nothing was recorded: {name} made no traced driver call (the tracer loaded in {} process(es))",
                rec.pids.len()
            );
        } else {
            println!("nothing was recorded: the tracer ({source}) did not load in {name}");
        }
    } else {
        println!(
            "recorded {} calls from {} processes in {}; judge them with: ipc-conformance check {}",
            rec.calls,
            rec.pids.len(),
            out.display(),
            out.display()
        );
    }
    Ok(code)
}

/// Tell `check` how the traced program ended ([`PROGRAM_END_FILE`]): a
/// program killed by a signal left a trace cut short. Written only where
/// nothing of that name is (never through a link); a failure is said and
/// the trace kept.
fn write_program_end(out: &Path, name: &str, pid: u32, status: &std::process::ExitStatus) {
    let end = ProgramEnd {
        program: name.to_string(),
        pid,
        exit: status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(status),
    };
    let Ok(json) = serde_json::to_vec(&end) else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(out.join(PROGRAM_END_FILE))
        .and_then(|mut f| f.write_all(&json));
    if let Err(e) = written {
        eprintln!(
            "ipc-conformance trace: cannot write {PROGRAM_END_FILE} in the trace folder: {e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_carried_tracer_is_a_shared_library() {
        assert!(is_shared_library(EMBEDDED), "{} bytes", EMBEDDED.len());
        assert!(!is_shared_library(b"#!/bin/sh\necho not a library\n"));
    }

    #[test]
    fn the_private_copy_is_private_and_its_path_fits_ld_preload() {
        let (dir, path) = install_private(b"\x7fELF bytes").unwrap();
        let dir_mode = std::fs::metadata(dir.path()).unwrap().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        let text = path.to_str().unwrap();
        assert!(!text.contains([' ', ':']), "{text}");
        assert_eq!(std::fs::read(&path).unwrap(), b"\x7fELF bytes");
    }
}
