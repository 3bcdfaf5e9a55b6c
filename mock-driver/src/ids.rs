//! The keys the simulator's state is indexed by. A leaf, so that every
//! state type can name them without importing `world.rs`.

/// A block of simulated device memory (`World::blocks`).
pub(crate) type BlockId = u64;

/// A context of a process: its handle value as the driver returns it.
pub(crate) type CtxKey = u64;
