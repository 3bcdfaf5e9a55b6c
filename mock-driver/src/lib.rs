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
//!   reservation and is never reused, so stale and foreign pointers fault.
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
mod hazards;
mod ipc;
mod machine;
mod memory;
#[cfg(feature = "mutants")]
pub mod mutants;
#[cfg(test)]
mod robustness;
mod seed;
pub mod semantics;
mod store;
mod world;

pub use machine::{SimMachine, SimProcess};
#[cfg(feature = "mutants")]
pub use mutants::Mutant;
pub use semantics::{SemanticChoice, Semantics};

use crate::hazards::HazardLog;
use crate::world::{Process, World};
use ipc_harness::{Backend, BackendInfo, Machine, MachineSpec, StartError};
use std::collections::BTreeMap;

/// The simulated hardware and the semantic choices in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// Devices the machine has.
    pub devices: u32,
    /// Every pair of devices can access each other (IPC across devices works).
    pub peer_access: bool,
    pub semantics: Semantics,
    /// A deliberate bug (tests of the tests only).
    #[cfg(feature = "mutants")]
    pub mutant: Option<Mutant>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 2,
            peer_access: true,
            semantics: Semantics::default(),
            #[cfg(feature = "mutants")]
            mutant: None,
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
        if spec.devices > cfg.devices {
            return Err(StartError::NotSupported(format!(
                "the scenario needs {} device(s); the simulator has {}",
                spec.devices, cfg.devices
            )));
        }
        let mut procs = Vec::with_capacity(spec.processes.len());
        for (i, ps) in spec.processes.iter().enumerate() {
            let visible: Vec<u32> = match &ps.visible_devices {
                Some(list) => list.clone(),
                None => (0..cfg.devices).collect(),
            };
            if let Some(bad) = visible.iter().find(|&&d| d >= cfg.devices) {
                return Err(StartError::NotSupported(format!(
                    "process '{}' lists device {bad}; the simulator has {}",
                    ps.name, cfg.devices
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
            proc.reuse_va = cfg.semantics.va_reuse == semantics::VaReuse::LowestFit;
            procs.push(proc);
        }
        let mut world = World {
            seed: spec.seed,
            dialect: spec.dialect,
            peer_access: cfg.peer_access,
            sem: cfg.semantics.clone(),
            procs,
            blocks: BTreeMap::new(),
            next_block: 0,
            device_used: vec![0; cfg.devices as usize],
            handle_serial: 0,
            export_ids: std::collections::BTreeMap::new(),
            freed_exports: std::collections::BTreeMap::new(),
            hazards: HazardLog::default(),
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
            semantics: self
                .config
                .semantics
                .describe()
                .into_iter()
                .map(|c| (c.name.to_string(), c.value))
                .collect(),
            ..BackendInfo::default()
        }
    }

    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        Ok(Box::new(SimMachine::new(self.world(spec)?)))
    }

    fn has_hazard_log(&self) -> bool {
        true
    }
}
