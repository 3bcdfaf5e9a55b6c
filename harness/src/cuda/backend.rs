//! [`CudaBackend`]: probing the host once, checking a scenario's needs, and
//! starting [`CudaMachine`]s.

use super::machine::{planned_machine, CudaMachine};
use super::pool::{PoolStats, WorkerPool, DEFAULT_POOL_SIZE};
use super::process::WorkerProxy;
use super::protocol::{ProbeReport, Reply, Request};
use super::spawn::{worker_env, WorkerCommand};
use crate::errors::{ApiError, Dialect};
use crate::machine::{Backend, BackendInfo, Machine, MachineSpec, StartError, Upcoming, WorkerFit};
use crate::sharing::{WorkerPolicy, WorkerSharing};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How long the probe worker may take (`cuInit` on a cold multi-GPU host
/// can take seconds).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// `CUDA_ERROR_NO_DEVICE`.
const CUDA_ERROR_NO_DEVICE: i32 = 100;

/// What the one-off probe found, cached for the backend's lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The parent could not load `libcuda`; no worker was started.
    NoLibcuda,
    /// The probe worker could not be started or did not answer.
    Failed(String),
    /// The probe worker answered.
    Report(ProbeReport),
}

/// The real CUDA backend: each scenario process is a worker OS process
/// speaking the runtime or driver API (see the [module docs](super)).
///
/// It keeps a pool of workers started and initialised ahead of time (see
/// [`with_pool_size`](Self::with_pool_size)), and can reuse workers that
/// served a machine cleanly (opt-in: [`with_worker_reuse`](Self::with_worker_reuse));
/// dropping the backend kills and reaps the idle ones.
pub struct CudaBackend {
    worker: WorkerCommand,
    probe: OnceLock<ProbeOutcome>,
    /// Shared with the machines of a reusing backend, which hold it weakly
    /// (a machine that outlives its backend shuts its workers down).
    pool: Arc<Mutex<WorkerPool>>,
    policy: WorkerPolicy,
    /// Under [`WorkerPolicy::ByScenario`], processes that use only the
    /// legacy default stream get workers with one hardware queue
    /// ([`WorkerFit::one_queue`]).
    one_queue: bool,
}

/// `0` here keeps every worker on the driver's default hardware queues
/// ([`CudaBackend::with_one_queue`]).
pub const ONE_QUEUE_ENV: &str = "IPC_CONFORMANCE_ONE_QUEUE";

/// Whether the environment lets workers of one-stream processes have one
/// hardware queue ([`CudaBackend::with_one_queue`]): unless
/// [`ONE_QUEUE_ENV`] is `0`, or the user set `CUDA_DEVICE_MAX_CONNECTIONS`
/// (every worker then inherits theirs).
pub fn one_queue_allowed() -> bool {
    std::env::var_os(ONE_QUEUE_ENV).is_none_or(|v| v != "0")
        && std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none()
}

impl CudaBackend {
    /// A backend whose workers run `worker` (usually
    /// `WorkerCommand::current_exe_subcommand("worker")`), with a pool of
    /// [`DEFAULT_POOL_SIZE`] workers per key. Starts nothing.
    pub fn new(worker: WorkerCommand) -> CudaBackend {
        CudaBackend {
            worker,
            probe: OnceLock::new(),
            pool: Arc::new(Mutex::new(WorkerPool::new(DEFAULT_POOL_SIZE))),
            policy: WorkerPolicy::Fresh,
            one_queue: false,
        }
    }

    /// Whether, under [`WorkerPolicy::ByScenario`], a process that uses
    /// only the legacy default stream ([`WorkerFit::one_queue`]) runs in a
    /// worker with one hardware queue (`CUDA_DEVICE_MAX_CONNECTIONS=1`),
    /// whose contexts cost half as much. Default: off. `ipc-conformance
    /// run` turns it on where [`one_queue_allowed`]; `explore` does not,
    /// so that generated cases meet the driver as programs do. The other
    /// policies keep the driver's default queues, so that a run on fresh
    /// workers shows what the policy's runs must equal.
    pub fn with_one_queue(self, on: bool) -> CudaBackend {
        CudaBackend {
            one_queue: on,
            ..self
        }
    }

    /// How this backend gives scenarios their workers, for reports: the
    /// policy, then the hardware queues its workers have.
    pub fn workers_description(&self) -> String {
        let queues = match std::env::var("CUDA_DEVICE_MAX_CONNECTIONS") {
            Ok(n) => format!("CUDA_DEVICE_MAX_CONNECTIONS={n} for every worker (set by the user)"),
            Err(_) if self.one_queue && self.policy == WorkerPolicy::ByScenario => {
                "one hardware queue for processes on the legacy stream alone".into()
            }
            Err(_) => "the driver's default hardware queues".into(),
        };
        format!("{}; {queues}", self.policy.as_str())
    }

    /// Keeps up to `n` idle workers ready per key (dialect, device made
    /// current, `CUDA_VISIBLE_DEVICES`) seen in a started machine; 0 turns
    /// the pool off (every worker is started by the `start` that needs it).
    ///
    /// Each pooled worker still serves exactly one machine and exits with
    /// it; after each `start` the pool starts replacements and sends them
    /// `Init` without waiting for the answers, so that their contexts are
    /// created while the scenario runs. Each idle worker holds a CUDA
    /// context (device memory) until it is used or the backend is dropped.
    pub fn with_pool_size(self, n: usize) -> CudaBackend {
        let mut pool = WorkerPool::new(n);
        pool.set_reuse(self.policy != WorkerPolicy::Fresh);
        pool.set_share_exits(self.lock_pool().shares_exits());
        CudaBackend {
            pool: Arc::new(Mutex::new(pool)),
            ..self
        }
    }

    /// Reuses workers across machines (default `false`: every worker
    /// serves exactly one machine and exits with it, as described in the
    /// [module docs](super)). Has an effect only with a pool
    /// ([`with_pool_size`](Self::with_pool_size) above 0).
    ///
    /// With reuse on, a machine's shutdown checks that every one of its
    /// processes still runs (none exited, crashed, timed out or broke the
    /// protocol); if so, it sends [`Request::Reset`] to every worker that
    /// never answered a sticky error (code [`STICKY_ERROR_MIN`](super::STICKY_ERROR_MIN)
    /// or above), all at once. A worker answers [`Reply::Clean`] only after
    /// closing every IPC mapping its requests opened (as many times as
    /// opened), freeing every allocation with the matching free, destroying
    /// the contexts it created, making its `Init` device's primary context
    /// current again and synchronizing, all with success. Workers that
    /// answer `Clean` within [`RESET_TIMEOUT`](super::RESET_TIMEOUT) go back
    /// to the pool under the key they were started with (as pooled workers,
    /// up to the pool size; extra ones exit); the others are killed and
    /// reaped. Workers of live machines count as pooled for the refills, so
    /// a run of clean scenarios starts no new worker at all.
    ///
    /// **Isolation is weaker; this is why it is opt-in.** A reset releases
    /// what the worker's requests created and can see, nothing more.
    /// Driver state that no call observes may survive it and influence a
    /// later scenario: bookkeeping of IPC handles opened from other
    /// processes (e.g. the one-mapping-per-device-per-exporting-process
    /// rule, and exporters' views of who still maps their memory), the
    /// stream-ordered memory pool's reserved memory, retained primary
    /// contexts of other devices, loaded modules, the runtime's per-thread
    /// state, and whatever a previous scenario's errors left behind short
    /// of a sticky error. Results that depend on a fresh process (first
    /// context creation, process-exit semantics) are only meaningful
    /// without reuse.
    pub fn with_worker_reuse(self, reuse: bool) -> CudaBackend {
        self.with_worker_policy(if reuse {
            WorkerPolicy::Reused
        } else {
            WorkerPolicy::Fresh
        })
    }

    /// Which machines reuse workers: none ([`WorkerPolicy::Fresh`], the
    /// default), all ([`WorkerPolicy::Reused`], as
    /// [`with_worker_reuse`](Self::with_worker_reuse)`(true)`), or those
    /// started for a scenario whose [`sharing`](crate::sharing::sharing)
    /// allows it ([`WorkerPolicy::ByScenario`]): their workers come from
    /// and go back to the reuse pool, while the others get workers that
    /// never served a machine (pre-started ones included) and end them.
    pub fn with_worker_policy(self, policy: WorkerPolicy) -> CudaBackend {
        self.lock_pool().set_reuse(policy != WorkerPolicy::Fresh);
        CudaBackend { policy, ..self }
    }

    /// Whether a reusing machine whose processes all still run or ended by
    /// their `exit` step gives its running workers back (`exits` of
    /// [`ShareAlso`](crate::sharing::ShareAlso); default: on, unless
    /// `IPC_CONFORMANCE_SHARE_ALSO` leaves it out). Without it, any ended process
    /// keeps every worker of the machine from coming back.
    pub fn with_exits_shared(self, share: bool) -> CudaBackend {
        self.lock_pool().set_share_exits(share);
        self
    }

    /// Whether workers are reused across machines, for some scenarios at
    /// least (see [`with_worker_policy`](Self::with_worker_policy)).
    pub fn worker_reuse(&self) -> bool {
        self.policy != WorkerPolicy::Fresh
    }

    /// The worker policy (see [`with_worker_policy`](Self::with_worker_policy)).
    pub fn worker_policy(&self) -> WorkerPolicy {
        self.policy
    }

    /// Idle workers kept ready per key (0: no pool).
    pub fn pool_size(&self) -> usize {
        self.lock_pool().size()
    }

    /// The pool's counters so far.
    pub fn pool_stats(&self) -> PoolStats {
        self.lock_pool().stats()
    }

    fn lock_pool(&self) -> MutexGuard<'_, WorkerPool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The command that starts this backend's workers.
    pub fn worker(&self) -> &WorkerCommand {
        &self.worker
    }

    /// Starts a machine for `spec` as [`start`](Backend::start) does after
    /// probing and checking the requirements: like
    /// [`CudaMachine::launch`], but taking initialised workers from the pool
    /// where it has some for a process, then refilling the pool. Public so
    /// that tests can drive fake workers through the pooled path.
    pub fn launch(&self, spec: &MachineSpec) -> Result<CudaMachine, StartError> {
        self.launch_shared(spec, self.policy == WorkerPolicy::Reused)
    }

    /// [`launch`](Self::launch) for a machine that may take reused
    /// workers and give its own back (`shared`, with reuse on), or that
    /// takes only workers that never served a machine.
    pub fn launch_shared(
        &self,
        spec: &MachineSpec,
        shared: bool,
    ) -> Result<CudaMachine, StartError> {
        self.launch_placed(spec, shared, &[])
    }

    /// [`launch_shared`](Self::launch_shared), each process taking the
    /// reused worker that suits its [`WorkerFit`] (`fits`: one per
    /// process, or empty for none).
    pub fn launch_placed(
        &self,
        spec: &MachineSpec,
        shared: bool,
        fits: &[WorkerFit],
    ) -> Result<CudaMachine, StartError> {
        let (result, reusing) = {
            let mut pool = self.lock_pool();
            let reusing = shared && pool.reusing();
            let pool = (pool.size() > 0).then_some(&mut *pool);
            (
                crate::profile::timed("launch", || {
                    CudaMachine::launch_with(&self.worker, spec, pool, reusing, fits)
                }),
                reusing,
            )
        };
        // Only once the pool is unlocked: a machine dropped while it is
        // locked would deadlock giving its workers back.
        result.map(|mut machine| {
            if reusing {
                machine.give_workers_back_to(Arc::downgrade(&self.pool));
            }
            machine
        })
    }

    /// Tells the pool the machines that will start from now on (see
    /// [`Backend::expect`]), as [`expect`](Backend::expect) does after
    /// leaving out those this host cannot run: the pool starts the workers
    /// they will need ahead of time and lets idle ones no machine needs go
    /// (see `pool.rs`). Public so that tests can drive fake workers
    /// through it.
    pub fn plan_ahead(&self, upcoming: &[Upcoming]) {
        let parent_visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let mut pool = self.lock_pool();
        if pool.size() == 0 {
            return;
        }
        let reusing = pool.reusing();
        let plan = upcoming
            .iter()
            .take(super::pool::PLAN_WINDOW)
            .filter_map(|u| {
                let shared = self.policy.reuses(&u.sharing) && reusing;
                let fits = self.policy_fits(&u.fits);
                planned_machine(&u.spec, &fits, shared, parent_visible.as_deref())
            })
            .collect();
        pool.set_plan(plan);
        pool.sweep();
        crate::profile::timed("plan: pool refill", || {
            pool.refill(&self.worker, &worker_env(), parent_visible.as_deref())
        });
    }

    /// Whether this process can load `libcuda` (a `dlopen` of cudarc's
    /// candidate names; no CUDA call is made, nothing is initialised).
    pub fn libcuda_present() -> bool {
        static PRESENT: OnceLock<bool> = OnceLock::new();
        // SAFETY: only dlopens (and closes) the candidate library names.
        *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
    }

    /// Probes the host once, in a short-lived worker (never in this
    /// process: the parent must not initialise CUDA), and caches the result.
    pub fn probe(&self) -> &ProbeOutcome {
        self.probe.get_or_init(|| {
            if !Self::libcuda_present() {
                return ProbeOutcome::NoLibcuda;
            }
            run_probe(&self.worker)
        })
    }
}

fn run_probe(worker: &WorkerCommand) -> ProbeOutcome {
    let env = worker_env();
    let mut proxy = match WorkerProxy::spawn("probe", Dialect::Driver, PROBE_TIMEOUT, worker, &env)
    {
        Ok(p) => p,
        Err(e) => {
            return ProbeOutcome::Failed(format!(
                "cannot start the CUDA probe worker ({}): {e}",
                worker.program.display()
            ))
        }
    };
    let outcome = match proxy
        .send(&Request::Probe)
        .and_then(|()| proxy.await_reply("probe", PROBE_TIMEOUT))
    {
        Ok(Reply::Probe(report)) => ProbeOutcome::Report(report),
        Ok(other) => ProbeOutcome::Failed(format!("the CUDA probe worker answered {other:?}")),
        Err(e) => ProbeOutcome::Failed(format!("the CUDA probe worker failed: {e}")),
    };
    let _ = proxy.exit();
    outcome
}

/// The reason given when `libcuda` cannot be loaded.
pub const NO_LIBCUDA: &str = "libcuda.so not found: the NVIDIA driver's CUDA library could not \
                              be loaded (no NVIDIA driver installed, or not on the loader path)";

/// The dialects the CUDA backend speaks ([`Backend::dialects`]): no HIP.
pub const CUDA_BACKEND_DIALECTS: [Dialect; 2] = Dialect::CUDA;

/// Why the CUDA backend runs no HIP process.
pub const HIP_UNSUPPORTED: &str =
    "no AMD GPU / HIP backend: the hip dialect runs on the simulator only";

/// Whether a host that probed as `report` can run `spec`: `NotSupported`
/// with the reason when it cannot.
pub fn check_requirements(report: &ProbeReport, spec: &MachineSpec) -> Result<(), StartError> {
    let unsupported = |m: String| Err(StartError::NotSupported(m));
    if !CUDA_BACKEND_DIALECTS.contains(&spec.dialect) {
        return unsupported(HIP_UNSUPPORTED.into());
    }
    if let Some(t) = &spec.topology {
        return unsupported(format!(
            "the scenario asks for a simulated topology ('{}'); real hardware's cannot be chosen",
            t.describe()
        ));
    }
    if let Some(line) = spec.semantics_line() {
        return unsupported(format!(
            "the scenario chooses simulator semantics ('{line}'); real hardware's are its own"
        ));
    }
    if !report.libcuda {
        return unsupported(format!("{NO_LIBCUDA} (in the worker process)"));
    }
    match report.init_error {
        Some(CUDA_ERROR_NO_DEVICE) => {
            return unsupported(format!(
                "no CUDA device visible (cuInit returned {})",
                ApiError::from_code(Dialect::Driver, CUDA_ERROR_NO_DEVICE)
            ))
        }
        Some(code) => {
            return unsupported(format!(
                "CUDA cannot be initialised: cuInit returned {}",
                ApiError::from_code(Dialect::Driver, code)
            ))
        }
        None => {}
    }
    if report.device_count == 0 {
        return unsupported("no CUDA device visible".into());
    }
    if spec.devices > report.device_count {
        return unsupported(format!(
            "scenario needs {} device{}, machine has {}",
            spec.devices,
            if spec.devices == 1 { "" } else { "s" },
            report.device_count
        ));
    }
    for p in &spec.processes {
        if let Some(v) = p
            .visible_devices
            .as_ref()
            .and_then(|v| v.iter().find(|&&d| d >= report.device_count))
        {
            return unsupported(format!(
                "process '{}' makes device {v} visible, machine has {}",
                p.name, report.device_count
            ));
        }
    }
    if spec.dialect == Dialect::Runtime && !report.libcudart {
        return unsupported(
            "libcudart.so not found: the runtime dialect needs the CUDA runtime library \
             (put its directory on LD_LIBRARY_PATH)"
                .into(),
        );
    }
    Ok(())
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }

    fn dialects(&self) -> &[Dialect] {
        &CUDA_BACKEND_DIALECTS
    }

    fn info(&self) -> BackendInfo {
        let mut info = BackendInfo {
            backend: "cuda".into(),
            driver_version: kernel_driver_version(),
            ..BackendInfo::default()
        };
        if let ProbeOutcome::Report(r) = self.probe() {
            info.gpu_name = r.gpu_name.clone();
            info.compute_capability = r.compute_capability.map(|(a, b)| format!("{a}.{b}"));
            info.cuda_driver_version = r.cuda_driver_version.map(version_string);
            info.cuda_runtime_version = r.cuda_runtime_version.map(version_string);
            info.device_count = Some(r.device_count);
        }
        info.workers = Some(self.workers_description());
        info
    }

    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        self.start_checked(spec, self.policy == WorkerPolicy::Reused, &[])
    }

    fn has_hazard_log(&self) -> bool {
        false
    }

    fn shares_workers(&self) -> bool {
        self.policy == WorkerPolicy::ByScenario
    }

    fn start_shared(
        &self,
        spec: &MachineSpec,
        sharing: &WorkerSharing,
        fits: &[WorkerFit],
    ) -> Result<Box<dyn Machine>, StartError> {
        self.start_checked(spec, self.policy.reuses(sharing), &self.policy_fits(fits))
    }

    /// [`plan_ahead`](CudaBackend::plan_ahead) for the machines this host
    /// can run (none without a working driver).
    fn expect(&self, upcoming: &[Upcoming]) {
        let ProbeOutcome::Report(report) = self.probe() else {
            return;
        };
        let runnable: Vec<Upcoming> = upcoming
            .iter()
            .filter(|u| check_requirements(report, &u.spec).is_ok())
            .take(super::pool::PLAN_WINDOW)
            .cloned()
            .collect();
        self.plan_ahead(&runnable);
    }

    fn prepares_ahead(&self) -> bool {
        self.pool_size() > 0
    }
}

impl CudaBackend {
    /// `fits` as the worker policy reads them: a process's
    /// [`WorkerFit::fresh`], [`WorkerFit::new_contexts`] and
    /// [`WorkerFit::one_queue`] are the `policy` decision's, which
    /// `--workers reused` overrides (every process then takes a reused
    /// worker, whatever it made, with the driver's default queues).
    fn policy_fits(&self, fits: &[WorkerFit]) -> Vec<WorkerFit> {
        let by_scenario = self.policy == WorkerPolicy::ByScenario;
        fits.iter()
            .map(|f| WorkerFit {
                fresh: f.fresh && by_scenario,
                new_contexts: f.new_contexts && by_scenario,
                one_queue: f.one_queue && by_scenario && self.one_queue,
                ..*f
            })
            .collect()
    }

    /// [`Backend::start`]: probes, checks the requirements, launches.
    fn start_checked(
        &self,
        spec: &MachineSpec,
        shared: bool,
        fits: &[WorkerFit],
    ) -> Result<Box<dyn Machine>, StartError> {
        // Whatever this host has, it runs no process of another dialect (HIP).
        if !self.dialects().contains(&spec.dialect) {
            return Err(StartError::NotSupported(HIP_UNSUPPORTED.into()));
        }
        match self.probe() {
            ProbeOutcome::NoLibcuda => Err(StartError::NotSupported(NO_LIBCUDA.into())),
            ProbeOutcome::Failed(m) => Err(StartError::Harness(m.clone())),
            ProbeOutcome::Report(report) => {
                check_requirements(report, spec)?;
                Ok(Box::new(self.launch_placed(spec, shared, fits)?))
            }
        }
    }
}

/// `13000` -> `"13.0"`, `12080` -> `"12.8"` (the encoding of
/// `cuDriverGetVersion` and `cudaRuntimeGetVersion`).
pub fn version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The kernel driver's version (`580.159.04`) from `/proc/driver/nvidia/version`.
pub fn kernel_driver_version() -> Option<String> {
    std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|t| parse_nvidia_version(&t))
}

/// The version number in the `NVRM version:` line of `/proc/driver/nvidia/version`.
pub fn parse_nvidia_version(text: &str) -> Option<String> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|t| {
            let parts: Vec<&str> = t.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::spawn::{child_visible_devices, WorkerCommand};
    use crate::machine::ProcessSpec;

    fn spec(devices: u32, dialect: Dialect, visible: Option<Vec<u32>>) -> MachineSpec {
        MachineSpec {
            devices,
            processes: vec![ProcessSpec {
                name: "a".into(),
                device: 0,
                visible_devices: visible,
                pid_namespace: Default::default(),
            }],
            dialect,
            seed: 1,
            step_timeout: Duration::from_secs(5),
            topology: None,
            semantics: Vec::new(),
        }
    }

    fn h100() -> ProbeReport {
        ProbeReport {
            libcuda: true,
            libcudart: true,
            cuda_driver_version: Some(13000),
            cuda_runtime_version: Some(13000),
            init_error: None,
            device_count: 1,
            gpu_name: Some("NVIDIA H100 80GB HBM3".into()),
            compute_capability: Some((9, 0)),
        }
    }

    fn reason(r: Result<(), StartError>) -> String {
        match r {
            Err(StartError::NotSupported(m)) => m,
            other => panic!("expected NotSupported, got {other:?}"),
        }
    }

    #[test]
    fn requirements() {
        assert_eq!(
            check_requirements(&h100(), &spec(1, Dialect::Runtime, None)),
            Ok(())
        );
        assert_eq!(
            reason(check_requirements(&h100(), &spec(2, Dialect::Driver, None))),
            "scenario needs 2 devices, machine has 1"
        );
        let no_dev = ProbeReport {
            init_error: Some(100),
            device_count: 0,
            ..h100()
        };
        assert!(
            reason(check_requirements(&no_dev, &spec(1, Dialect::Driver, None)))
                .starts_with("no CUDA device visible")
        );
        let zero = ProbeReport {
            device_count: 0,
            ..h100()
        };
        assert_eq!(
            reason(check_requirements(&zero, &spec(1, Dialect::Driver, None))),
            "no CUDA device visible"
        );
        let no_rt = ProbeReport {
            libcudart: false,
            ..h100()
        };
        assert_eq!(
            check_requirements(&no_rt, &spec(1, Dialect::Driver, None)),
            Ok(())
        );
        assert!(
            reason(check_requirements(&no_rt, &spec(1, Dialect::Runtime, None)))
                .contains("libcudart")
        );
        assert!(reason(check_requirements(
            &h100(),
            &spec(1, Dialect::Driver, Some(vec![1]))
        ))
        .contains("device 1 visible"));
        let no_lib = ProbeReport {
            libcuda: false,
            ..h100()
        };
        assert!(
            reason(check_requirements(&no_lib, &spec(1, Dialect::Driver, None)))
                .contains("libcuda")
        );
    }

    #[test]
    fn hip_processes_and_simulated_topologies_and_semantics_are_not_supported() {
        assert_eq!(
            reason(check_requirements(&h100(), &spec(1, Dialect::Hip, None))),
            HIP_UNSUPPORTED
        );
        let mut with_topology = spec(1, Dialect::Driver, None);
        with_topology.topology = Some(crate::machine::Topology {
            all_peers: true,
            peer_pairs: Vec::new(),
            peer_budget: Some(8),
        });
        assert!(reason(check_requirements(&h100(), &with_topology))
            .contains("'topology peers=all peer_budget=8'"));
        let mut with_semantics = spec(1, Dialect::Driver, None);
        with_semantics.semantics = vec![("reopen".into(), "new-mapping".into())];
        assert!(reason(check_requirements(&h100(), &with_semantics))
            .contains("chooses simulator semantics ('semantics reopen=new-mapping')"));
    }

    #[test]
    fn versions() {
        assert_eq!(version_string(13000), "13.0");
        assert_eq!(version_string(12080), "12.8");
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  \
                    Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct  9 18:51:13 UTC 2025\n\
                    GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)\n";
        assert_eq!(parse_nvidia_version(text).as_deref(), Some("580.159.04"));
        let legacy = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n";
        assert_eq!(parse_nvidia_version(legacy).as_deref(), Some("535.104.05"));
        assert_eq!(parse_nvidia_version("GCC version: 12.2.0\n"), None);
    }

    #[test]
    fn visible_devices_translate_through_the_parents_list() {
        assert_eq!(child_visible_devices(None, &[1, 0]).unwrap(), "1,0");
        assert_eq!(child_visible_devices(None, &[]).unwrap(), "");
        assert_eq!(child_visible_devices(Some("2, 3"), &[1]).unwrap(), "3");
        assert_eq!(
            child_visible_devices(Some("GPU-aaaa,GPU-bbbb"), &[1, 0]).unwrap(),
            "GPU-bbbb,GPU-aaaa"
        );
        assert!(child_visible_devices(Some("2"), &[1]).is_err());
    }

    #[test]
    fn worker_command_for_this_executable() {
        let w = WorkerCommand::current_exe_subcommand("worker").unwrap();
        assert_eq!(w.args, vec!["worker".to_string()]);
        assert!(w.program.is_absolute());
        assert_eq!(
            WorkerCommand::new("/bin/true", ["x"]).args,
            vec!["x".to_string()]
        );
    }

    /// The report says how workers were given, so that `diff` can tell a
    /// queue setting from a driver change. (Skipped where the user's
    /// environment sets the queues for every worker.)
    #[test]
    fn the_workers_description_names_the_policy_and_the_queues() {
        if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_some() {
            return;
        }
        let backend = || CudaBackend::new(WorkerCommand::new("/bin/true", ["x"]));
        assert_eq!(
            backend()
                .with_worker_policy(WorkerPolicy::ByScenario)
                .with_one_queue(true)
                .workers_description(),
            "policy; one hardware queue for processes on the legacy stream alone"
        );
        // Only the policy gives one queue: a fresh run keeps the default.
        assert_eq!(
            backend().with_one_queue(true).workers_description(),
            "fresh; the driver's default hardware queues"
        );
        assert_eq!(
            backend()
                .with_worker_policy(WorkerPolicy::ByScenario)
                .workers_description(),
            "policy; the driver's default hardware queues"
        );
    }
}
