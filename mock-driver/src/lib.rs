//! `ipc-mock-driver`: a deterministic, seeded simulation of CUDA legacy
//! memory IPC as N processes observe it, with no GPU and no unsafe code.
//!
//! It exists so the conformance suite can run (and be developed) anywhere,
//! and so undefined behaviour the documentation warns about becomes visible
//! as a hazard log instead of silent corruption. Wherever the documentation
//! leaves a choice open, the choice is a named [`Semantics`] field, so a run
//! against real hardware can say which choice the hardware makes.
//!
//! The model, briefly:
//! - Each process has its own 1 TiB address window at a seed-shifted base;
//!   VA is handed out in 2 MiB steps with a 2 MiB unmapped guard after each
//!   reservation. Released VA is handed out again as measured hardware does
//!   ([`Semantics::va_reuse`], top-down by default), so a stale pointer may
//!   land on a newer allocation; `va_reuse=never` keeps stale and foreign
//!   pointers faulting.
//! - Allocations live in physical blocks (2 MiB granular; pinned host 4 KiB);
//!   small device allocations share a block ([`Semantics::suballocation`]).
//!   A block dies when its owner freed everything in it and no importer maps it.
//! - A handle names (exporter, device, block, offsets, size) under a seeded
//!   MAC; opening maps the whole block at fresh VA in the importer.
//! - Contents are sparse segments per block, shared by every mapping of it.
//!
//! ```
//! use ipc_harness::{Backend, Dialect, MachineSpec, MemKind, OutArg, ProcessSpec};
//! use ipc_mock_driver::SimBackend;
//! use std::time::Duration;
//!
//! let spec = MachineSpec {
//!     devices: 1,
//!     processes: ["owner", "peer"]
//!         .map(|n| ProcessSpec { name: n.into(), device: 0, visible_devices: None })
//!         .to_vec(),
//!     dialect: Dialect::Runtime,
//!     seed: 7,
//!     step_timeout: Duration::from_secs(5),
//!     topology: None,
//!     semantics: Vec::new(),
//! };
//! let mut m = SimBackend::default().start(&spec).unwrap();
//! let a = m.driver(0).alloc(MemKind::Device, 2 << 20).unwrap();
//! m.driver(0).memset(a, 0xab, 16).unwrap();
//! let h = m.driver(0).ipc_get_mem_handle(a, OutArg::Valid).unwrap();
//! let p = m.driver(1).ipc_open_mem_handle(h, 1, OutArg::Valid).unwrap();
//! assert_eq!(m.driver(1).read(p, 16).unwrap(), vec![0xab; 16]);
//! ```

#![forbid(unsafe_code)]

mod contexts;
mod events;
mod hazards;
mod ipc;
mod machine;
mod memory;
#[cfg(feature = "mutants")]
pub mod mutants;
mod peers;
pub mod portability;
pub mod profiles;
#[cfg(test)]
mod robustness;
mod seed;
pub mod semantics;
mod store;
mod vmm;
mod world;

pub use machine::{SimMachine, SimProcess};
#[cfg(feature = "mutants")]
pub use mutants::Mutant;
pub use profiles::{Profile, Tier};
pub use semantics::{SemanticChoice, Semantics};

use crate::hazards::HazardLog;
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
    fn world(&self, spec: &MachineSpec) -> Result<World, StartError> {
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
            let mut seen = visible.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != visible.len() {
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
            procs.push(proc);
        }
        let mut world = World {
            seed: spec.seed,
            dialect: spec.dialect,
            topology,
            sem,
            procs,
            blocks: BTreeMap::new(),
            next_block: 0,
            device_used: vec![0; devices as usize],
            handle_serial: 0,
            export_ids: std::collections::BTreeMap::new(),
            freed_exports: std::collections::BTreeMap::new(),
            hazards: HazardLog::default(),
            vmm: Default::default(),
            events: crate::events::Events::default(),
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
