//! Choosing and configuring a backend: the simulator (`sim`) or real CUDA
//! hardware through worker processes (`cuda`, feature `cuda`).
//!
//! Everything that touches the two backends' own APIs lives here, so a change
//! in their constructors is a change in one small function.

use ipc_harness::sharing::WorkerPolicy;
use ipc_harness::Backend;
use ipc_mock_driver::{Profile, SemanticChoice, SimBackend, SimConfig};

/// The subcommand the real backend spawns its workers with.
/// A backend that threads may share (`run --jobs`).
pub type SharedBackend = Box<dyn Backend + Send + Sync>;

pub const WORKER_SUBCOMMAND: &str = "worker";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The deterministic simulator (no GPU needed).
    Sim,
    /// Real GPUs through the CUDA runtime/driver (needs the `cuda` feature;
    /// without libcuda or devices every clause is NotSupported).
    Cuda,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Sim => "sim",
            BackendKind::Cuda => "cuda",
        }
    }
}

/// Simulator settings from the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimSettings {
    /// `--sim-devices N`; `None` keeps the simulator's default.
    pub devices: Option<u32>,
    /// `--semantics name=value,...`, in order.
    pub semantics: Vec<(String, String)>,
    /// `--profile NAME`; `None` is `measured`.
    pub profile: Option<Profile>,
}

impl SimSettings {
    pub fn is_default(&self) -> bool {
        self.devices.is_none() && self.semantics.is_empty() && self.profile.is_none()
    }
}

/// Parse `--semantics` arguments: each holds `name=value` pairs separated by
/// commas.
pub fn parse_semantics<S: AsRef<str>>(args: &[S]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for arg in args {
        for part in arg.as_ref().split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("bad --semantics entry '{part}': expected name=value"))?;
            let (name, value) = (name.trim(), value.trim());
            if name.is_empty() || value.is_empty() {
                return Err(format!(
                    "bad --semantics entry '{part}': expected name=value"
                ));
            }
            out.push((name.to_string(), value.to_string()));
        }
    }
    Ok(out)
}

/// The simulator's configuration for `settings`.
pub fn sim_config(settings: &SimSettings) -> Result<SimConfig, String> {
    let mut config = SimConfig::default();
    if let Some(devices) = settings.devices {
        if devices == 0 {
            return Err("--sim-devices must be at least 1".into());
        }
        let limit = ipc_harness::scenario::limits::MAX_DEVICES;
        if devices > limit {
            return Err(format!(
                "--sim-devices {devices} is above the limit of {limit} devices"
            ));
        }
        config.devices = devices;
    }
    if let Some(profile) = settings.profile {
        profile.apply(&mut config);
    }
    // A choice set on the command line holds for every dialect, the hip
    // dialect's HIP profile included.
    for (name, value) in &settings.semantics {
        for sem in [&mut config.semantics, &mut config.hip_semantics] {
            sem.set(name, value)
                .map_err(|e| format!("--semantics {name}={value}: {e}"))?;
        }
    }
    Ok(config)
}

/// The simulator's semantic choices (defaults), for `ipc-conformance semantics`.
pub fn semantic_choices() -> Vec<SemanticChoice> {
    SimConfig::default().semantics.describe()
}

/// Make the backend `kind`; simulator settings only apply to `sim`. Real
/// workers follow the worker policy of [`worker_policy`]`(None)`.
pub fn make(kind: BackendKind, sim: &SimSettings) -> Result<Box<dyn Backend>, String> {
    make_with_workers(kind, sim, None)
}

/// Environment variable: `1` reuses workers for every scenario, `0` for
/// none (`--workers reused` / `fresh`); `--workers` wins over it.
pub const REUSE_WORKERS_ENV: &str = "IPC_CONFORMANCE_REUSE_WORKERS";

/// The worker policy: `chosen` (`--workers`), else what
/// [`REUSE_WORKERS_ENV`] says, else [`WorkerPolicy::ByScenario`] (reused
/// workers for the scenarios whose sharing allows it, fresh ones for the
/// rest; see `ipc_harness::sharing`).
pub fn worker_policy(chosen: Option<WorkerPolicy>) -> Result<WorkerPolicy, String> {
    // A misspelt rule name is an error here, not a silent "no rule off".
    if let Ok(v) = std::env::var(ipc_harness::sharing::SHARE_ALSO_ENV) {
        ipc_harness::sharing::ShareAlso::parse(&v)?;
    }
    // So is a check results file that cannot be read.
    ipc_harness::sharing::CheckedClauses::from_env()?;
    if let Some(p) = chosen {
        return Ok(p);
    }
    match std::env::var(REUSE_WORKERS_ENV) {
        Ok(v) => match v.trim() {
            "1" => Ok(WorkerPolicy::Reused),
            "0" => Ok(WorkerPolicy::Fresh),
            other => Err(format!(
                "{REUSE_WORKERS_ENV}={other}: expected 1 (reuse workers for every scenario) \
                 or 0 (fresh workers for every scenario)"
            )),
        },
        Err(_) => Ok(WorkerPolicy::ByScenario),
    }
}

/// As [`make`], with the worker policy `workers` (see [`worker_policy`]).
pub fn make_with_workers(
    kind: BackendKind,
    sim: &SimSettings,
    workers: Option<WorkerPolicy>,
) -> Result<Box<dyn Backend>, String> {
    Ok(make_shared(kind, sim, workers)?)
}

/// [`make_with_workers`] for a backend that threads may share (`run --jobs`).
pub fn make_shared(
    kind: BackendKind,
    sim: &SimSettings,
    workers: Option<WorkerPolicy>,
) -> Result<SharedBackend, String> {
    make_backend(kind, sim, workers, false)
}

/// [`make_shared`] for `run` (and the policy side of its sharing check):
/// under the sharing policy, a process that uses only the legacy default
/// stream gets a worker with one hardware queue, whose contexts cost half
/// as much (`ipc_harness::WorkerFit::one_queue`; off where
/// `IPC_CONFORMANCE_ONE_QUEUE=0` or `CUDA_DEVICE_MAX_CONNECTIONS` is set).
pub fn make_for_run(
    kind: BackendKind,
    sim: &SimSettings,
    workers: Option<WorkerPolicy>,
) -> Result<SharedBackend, String> {
    make_backend(kind, sim, workers, true)
}

fn make_backend(
    kind: BackendKind,
    sim: &SimSettings,
    workers: Option<WorkerPolicy>,
    one_queue: bool,
) -> Result<SharedBackend, String> {
    match kind {
        BackendKind::Sim => Ok(Box::new(SimBackend::new(sim_config(sim)?))),
        BackendKind::Cuda => {
            if !sim.is_default() {
                return Err(
                    "--profile, --semantics and --sim-devices apply to the simulator only (--backend sim)"
                        .into(),
                );
            }
            cuda_backend(worker_policy(workers)?, one_queue)
        }
    }
}

/// The real backend: workers are this executable run as `ipc-conformance worker`.
#[cfg(feature = "cuda")]
fn cuda_backend(policy: WorkerPolicy, one_queue: bool) -> Result<SharedBackend, String> {
    use ipc_harness::cuda::{CudaBackend, WorkerCommand};
    let worker = WorkerCommand::current_exe_subcommand(WORKER_SUBCOMMAND).map_err(|e| {
        format!("--backend cuda: cannot locate this executable to start workers: {e}")
    })?;
    let backend = CudaBackend::new(worker);
    // Pre-started workers per (dialect, device); 0 starts each one on demand.
    let backend = match std::env::var(WORKER_POOL_ENV) {
        Ok(v) => {
            let limit = crate::limits::MAX_WORKER_POOL;
            let size: usize = v.trim().parse().map_err(|_| {
                format!("{WORKER_POOL_ENV}={v}: expected a number of idle workers (0 = no pool)")
            })?;
            if size > limit {
                return Err(format!(
                    "{WORKER_POOL_ENV}={v}: above the limit of {limit} idle workers"
                ));
            }
            backend.with_pool_size(size)
        }
        Err(_) => backend,
    };
    let one_queue = one_queue && ipc_harness::cuda::one_queue_allowed();
    Ok(Box::new(
        backend.with_worker_policy(policy).with_one_queue(one_queue),
    ))
}

/// Environment variable: idle, pre-initialised workers kept per key (default 3).
#[cfg(feature = "cuda")]
pub const WORKER_POOL_ENV: &str = "IPC_CONFORMANCE_WORKER_POOL";

#[cfg(not(feature = "cuda"))]
fn cuda_backend(_policy: WorkerPolicy, _one_queue: bool) -> Result<SharedBackend, String> {
    Err(
        "--backend cuda: this ipc-conformance was built without the `cuda` feature \
         (rebuild with `cargo build -p ipc-conformance --features cuda`)"
            .into(),
    )
}

/// The worker side of the real backend (`ipc-conformance worker`).
#[cfg(feature = "cuda")]
pub fn worker_main() -> i32 {
    ipc_harness::cuda::worker_main()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantics_strings_parse() {
        assert_eq!(
            parse_semantics(&["a=1, b=two", "c=x"]).unwrap(),
            vec![
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "two".to_string()),
                ("c".to_string(), "x".to_string())
            ]
        );
        assert!(parse_semantics::<&str>(&[]).unwrap().is_empty());
        for bad in ["a", "=1", "a=", "a=1,b"] {
            let err = parse_semantics(&[bad]).unwrap_err();
            assert!(err.contains("name=value"), "{bad}: {err}");
        }
    }
}
