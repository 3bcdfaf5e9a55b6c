//! `ipc-conformance trace [--out DIR] -- CMD ARGS...`: run CMD with the
//! tracer preloaded (inherited by every process it starts) and say what was
//! recorded. The exit code is CMD's (128 + N when a signal N ended it).

use ipc_harness::trace_record::{DIR_ENV, FILE_PREFIX, FILE_SUFFIX};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The tracer library's file name.
pub const TRACER_FILE: &str = "libipc_tracer.so";
/// Environment variable naming the tracer library (instead of `--tracer`).
pub const TRACER_ENV: &str = "IPC_TRACER_LIB";

#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// Directory for the per-process traces (created; must hold no traces yet).
    #[arg(long, default_value = "ipc-trace")]
    pub out: PathBuf,
    /// The tracer library (default: $IPC_TRACER_LIB, else libipc_tracer.so
    /// next to this executable).
    #[arg(long)]
    pub tracer: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

fn find_tracer(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => std::env::var_os(TRACER_ENV)
            .map(PathBuf::from)
            .into_iter()
            .chain(
                std::env::current_exe()
                    .ok()
                    .and_then(|e| e.parent().map(|d| d.join(TRACER_FILE))),
            )
            .collect(),
    };
    for c in &candidates {
        if c.is_file() {
            return std::fs::canonicalize(c)
                .map_err(|e| format!("cannot resolve {}: {e}", c.display()));
        }
    }
    Err(format!(
        "no tracer library (looked for {}); build it with `cargo build -p ipc-tracer` or pass --tracer",
        candidates.iter().map(|c| c.display().to_string()).collect::<Vec<_>>().join(", ")
    ))
}

/// Trace files in `dir` and their call lines.
pub fn recorded(dir: &Path) -> (usize, usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let mut files = 0;
    let mut calls = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(FILE_PREFIX) && name.ends_with(FILE_SUFFIX) {
            files += 1;
            calls += std::fs::read_to_string(entry.path())
                .map(|t| t.lines().filter(|l| l.contains(r#""kind":"call""#)).count())
                .unwrap_or(0);
        }
    }
    (files, calls)
}

pub fn command(args: &TraceArgs) -> Result<u8, String> {
    let tracer = find_tracer(args.tracer.as_deref())?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let out = std::fs::canonicalize(&args.out)
        .map_err(|e| format!("cannot resolve {}: {e}", args.out.display()))?;
    if recorded(&out).0 > 0 {
        return Err(format!(
            "{} already holds traces; remove them or choose another --out",
            out.display()
        ));
    }
    let mut preload = tracer.into_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(":");
        preload.push(existing);
    }
    let (program, rest) = args.command.split_first().ok_or("no command to trace")?;
    let status = std::process::Command::new(program)
        .args(rest)
        .env("LD_PRELOAD", preload)
        .env(DIR_ENV, &out)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
    let code = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => code.clamp(0, 255) as u8,
        (None, Some(signal)) => {
            eprintln!(
                "ipc-conformance trace: {} was killed by signal {signal}; what it recorded is kept",
                program.to_string_lossy()
            );
            (128 + signal).clamp(0, 255) as u8
        }
        (None, None) => 255,
    };
    let (files, calls) = recorded(&out);
    if calls == 0 {
        println!(
            "nothing was recorded: {} made no traced driver call",
            program.to_string_lossy()
        );
    } else {
        println!(
            "recorded {calls} calls from {files} processes in {}; judge them with: ipc-conformance check {}",
            out.display(),
            out.display()
        );
    }
    Ok(code)
}
