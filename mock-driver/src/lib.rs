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
//!         .map(|n| ProcessSpec { name: n.into(), device: 0, visible_devices: None, pid_namespace: Default::default() })
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

mod addr_map;
mod attributes;
mod backend;
mod clock;
mod contexts;
mod dense;
mod event_state;
mod events;
mod handle_codec;
mod hazards;
mod ids;
mod index;
mod ipc;
mod kernel_pattern;
mod machine;
mod memory;
#[cfg(feature = "mutants")]
pub mod mutants;
mod namespaces;
mod order;
mod peers;
mod pool_state;
mod pools;
pub mod portability;
mod process_ops;
pub mod profiles;
#[cfg(test)]
mod robustness;
mod scale_limits;
mod seed;
pub mod semantics;
pub(crate) mod small_map;
mod store;
mod streams;
#[cfg(test)]
mod streams_tests;
mod vmm;
mod vmm_state;
#[cfg(test)]
mod vmm_tests;
mod world;

pub use backend::{SimBackend, SimConfig};
pub use machine::{SimMachine, SimProcess};
#[cfg(feature = "mutants")]
pub use mutants::Mutant;
pub use order::HostOrder;
pub use profiles::{Profile, Tier};
pub use semantics::{SemanticChoice, Semantics};
