//! What starting a worker process needs, shared by the backend, the
//! machine (`process.rs`) and the pool: the worker's command line and the
//! environment it gets. Depends on nothing else in `cuda/`.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The program (and leading arguments) that runs [`worker_main`](super::worker_main).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Arguments before any the worker protocol adds.
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// `program` run with `args`.
    pub fn new(
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        WorkerCommand {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        }
    }

    /// This very executable with one subcommand, e.g. `ipc-conformance worker`
    /// for `current_exe_subcommand("worker")`.
    pub fn current_exe_subcommand(subcommand: &str) -> std::io::Result<WorkerCommand> {
        Ok(WorkerCommand {
            program: env::current_exe()?,
            args: vec![subcommand.to_string()],
        })
    }
}

/// `CUDA_VISIBLE_DEVICES` for a worker that should see the parent's devices
/// `wanted` (indices in the parent's numbering). When the parent itself has
/// `CUDA_VISIBLE_DEVICES` set, its entries are picked, so that the worker's
/// device `i` is the parent's device `wanted[i]`.
pub fn child_visible_devices(parent: Option<&str>, wanted: &[u32]) -> Result<String, String> {
    match parent {
        None => Ok(wanted
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")),
        Some(list) => {
            let entries: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .collect();
            let picked = wanted
                .iter()
                .map(|&i| {
                    entries.get(i as usize).copied().ok_or_else(|| {
                        format!(
                            "visible device {i} is not among this host's \
                             CUDA_VISIBLE_DEVICES={list}"
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(picked.join(","))
        }
    }
}

/// Environment added to every worker: `LD_LIBRARY_PATH` extended with the
/// CUDA toolkit's library directory when the loader would not find
/// `libcudart` otherwise (neither `/etc/ld.so.cache` nor `LD_LIBRARY_PATH`
/// mention it), so that the runtime dialect works on a plain toolkit install.
pub(crate) fn worker_env() -> Vec<(OsString, OsString)> {
    static ENV: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();
    ENV.get_or_init(|| {
        let current: Vec<PathBuf> = env::var_os("LD_LIBRARY_PATH")
            .map(|v| env::split_paths(&v).collect())
            .unwrap_or_default();
        if current.iter().any(|d| has_cudart(d)) || ld_cache_has_cudart() {
            return Vec::new();
        }
        let mut candidates: Vec<PathBuf> = Vec::new();
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(root) = env::var_os(var) {
                candidates.push(Path::new(&root).join("lib64"));
            }
        }
        candidates.push("/usr/local/cuda/lib64".into());
        candidates.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
        let Some(found) = candidates.into_iter().find(|d| has_cudart(d)) else {
            return Vec::new();
        };
        let mut paths = current;
        paths.push(found);
        match env::join_paths(paths) {
            Ok(joined) => vec![("LD_LIBRARY_PATH".into(), joined)],
            Err(_) => Vec::new(),
        }
    })
    .clone()
}

fn has_cudart(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries.flatten().any(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("libcudart.so"))
            })
        })
        .unwrap_or(false)
}

fn ld_cache_has_cudart() -> bool {
    std::fs::read("/etc/ld.so.cache")
        .map(|b| b.windows(12).any(|w| w == b"libcudart.so"))
        .unwrap_or(false)
}
