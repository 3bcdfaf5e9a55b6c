//! The simulator as an [`ipc_harness::Backend`]: the simulated hardware
//! and semantic choices ([`SimConfig`]), and the backend that builds a
//! fresh machine from them for each scenario ([`SimBackend`]).

use crate::hazards::HazardLog;
use crate::machine::SimMachine;
#[cfg(feature = "mutants")]
use crate::mutants::Mutant;
use crate::semantics::Semantics;
use crate::world::{Process, World};
use ipc_harness::{Backend, BackendInfo, Machine, MachineSpec, StartError, Topology};
use std::collections::BTreeMap;

/// The simulated hardware and the semantic choices in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// Devices the machine has.
    pub devices: u32,
    /// Every pair of devices can access each other (IPC across devices works),
    /// as on the NVLink-connected 2 x H200.
    pub peer_access: bool,
    /// Most peer connections one device may hold; `None`: unlimited.
    pub peer_budget: Option<u32>,
    /// Choices for the CUDA dialects (runtime, driver).
    pub semantics: Semantics,
    /// Choices for the hip dialect (defaults: [`Semantics::hip_profile`]).
    pub hip_semantics: Semantics,
    /// A deliberate bug (tests of the tests only).
    #[cfg(feature = "mutants")]
    pub mutant: Option<Mutant>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 2,
            peer_access: true,
            peer_budget: None,
            semantics: Semantics::default(),
            #[cfg(feature = "mutants")]
            mutant: None,
            hip_semantics: Semantics::hip_profile(),
        }
    }
}

impl SimConfig {
    /// The choices a machine of `dialect` runs with.
    pub fn semantics_for(&self, dialect: ipc_harness::Dialect) -> &Semantics {
        match dialect {
            ipc_harness::Dialect::Hip => &self.hip_semantics,
            _ => &self.semantics,
        }
    }
}

/// Whether some device is listed twice. Lists are a few devices long: each
/// is compared with those before it, with nothing to allocate; a long one is
/// sorted.
fn has_repeat(devices: &[u32]) -> bool {
    if devices.len() > 16 {
        let mut seen = devices.to_vec();
        seen.sort_unstable();
        return seen.windows(2).any(|w| w[0] == w[1]);
    }
    devices
        .iter()
        .enumerate()
        .any(|(i, d)| devices[..i].contains(d))
}

/// The simulator as a harness backend.
#[derive(Debug, Clone, Default)]
pub struct SimBackend {
    config: SimConfig,
}

impl SimBackend {
    pub fn new(config: SimConfig) -> Self {
        SimBackend { config }
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Build the machine's initial state, or say why the spec cannot run here.
    pub(crate) fn world(&self, spec: &MachineSpec) -> Result<World, StartError> {
        let cfg = &self.config;
        // A scenario's own topology builds a machine of exactly its devices.
        let (devices, topology) = match &spec.topology {
            Some(t) => (spec.devices, t.clone()),
            None => (
                cfg.devices,
                Topology {
                    all_peers: cfg.peer_access,
                    peer_pairs: Vec::new(),
                    peer_budget: cfg.peer_budget,
                },
            ),
        };
        if spec.devices > devices {
            return Err(StartError::NotSupported(format!(
                "the scenario needs {} device(s); the simulator has {}",
                spec.devices, devices
            )));
        }
        // A scenario's `semantics` line overrides the dialect's choices.
        let mut sem = cfg.semantics_for(spec.dialect).clone();
        for (name, value) in &spec.semantics {
            sem.set(name, value).map_err(|e| {
                StartError::Harness(format!(
                    "{e}, in the scenario's '{}'",
                    spec.semantics_line().unwrap_or_default()
                ))
            })?;
        }
        let mut procs = Vec::with_capacity(spec.processes.len());
        for (i, ps) in spec.processes.iter().enumerate() {
            let visible: Vec<u32> = match &ps.visible_devices {
                Some(list) => list.clone(),
                None => (0..devices).collect(),
            };
            if let Some(bad) = visible.iter().find(|&&d| d >= devices) {
                return Err(StartError::NotSupported(format!(
                    "process '{}' lists device {bad}; the simulator has {}",
                    ps.name, devices
                )));
            }
            if has_repeat(&visible) {
                return Err(StartError::NotSupported(format!(
                    "process '{}' lists a device twice in its visible devices",
                    ps.name
                )));
            }
            if ps.device as usize >= visible.len() {
                return Err(StartError::NotSupported(format!(
                    "process '{}' starts on device {}, but sees only {}",
                    ps.name,
                    ps.device,
                    visible.len()
                )));
            }
            let mut proc = Process::new(ps.name.clone(), visible, spec.seed, i);
            proc.va_reuse = sem.va_reuse;
            proc.va_rewind = sem.va_rewind;
            proc.pid_namespace = ps.pid_namespace;
            procs.push(proc);
        }
        let mut world = World {
            seed: spec.seed,
            dialect: spec.dialect,
            topology,
            sem,
            procs,
            blocks: crate::dense::DenseMap::new(),
            next_block: 0,
            device_used: vec![0; devices as usize],
            handle_serial: 0,
            export_ids: Default::default(),
            freed_exports: BTreeMap::new(),
            hazards: HazardLog::default(),
            vmm: Default::default(),
            pools: Default::default(),
            events: crate::event_state::Events::default(),
            order: crate::order::Order::default(),
            last_buffer_id: 0,
            #[cfg(feature = "mutants")]
            mutant: cfg.mutant,
        };
        for (i, ps) in spec.processes.iter().enumerate() {
            // Validated above, so the device exists.
            world
                .set_device(i, ps.device)
                .map_err(|e| StartError::Harness(format!("{e:?}")))?;
        }
        Ok(world)
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &str {
        "sim"
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            backend: "sim".into(),
            gpu_name: Some("simulated (H100-like)".into()),
            compute_capability: Some("9.0".into()),
            device_count: Some(self.config.devices),
            // The CUDA dialects' choices by name; the hip dialect's as
            // `hip.NAME` where they differ.
            semantics: {
                let cuda = self.config.semantics.describe();
                let hip = self.config.hip_semantics.describe();
                let differing: Vec<(String, String)> = cuda
                    .iter()
                    .zip(hip)
                    .filter(|(c, h)| c.value != h.value)
                    .map(|(_, h)| (format!("hip.{}", h.name), h.value))
                    .collect();
                cuda.into_iter()
                    .map(|c| (c.name.to_string(), c.value))
                    .chain(differing)
                    .collect()
            },
            ..BackendInfo::default()
        }
    }

    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        Ok(Box::new(SimMachine::new(self.world(spec)?)))
    }

    fn has_hazard_log(&self) -> bool {
        true
    }

    fn semantic_choice(&self, dialect: ipc_harness::Dialect, name: &str) -> Option<String> {
        self.config.semantics_for(dialect).get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::has_repeat;

    /// `has_repeat` answers as a sort and dedup of the list would.
    #[test]
    fn has_repeat_answers_as_dedup() {
        for round in 0..400u64 {
            let x = crate::seed::mix64(round);
            let len = (x % 24) as usize;
            let list: Vec<u32> = (0..len)
                .map(|i| (crate::seed::mix64(x ^ i as u64) % (1 + x % 40)) as u32)
                .collect();
            let mut seen = list.clone();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(has_repeat(&list), seen.len() != list.len(), "{list:?}");
        }
    }
}
