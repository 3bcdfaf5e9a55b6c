//! What a process does to itself: `fork()` after CUDA is initialised.

use crate::world::{SimResult, World};
use ipc_harness::{ErrorKind, ProcessIndex};

impl World {
    /// `fork()`, then `cudaMalloc`/`cuMemAlloc` in the child. A simulated
    /// process has initialised CUDA before its first step (as the worker's
    /// `Init` does), and CUDA's state does not survive a fork: the child's
    /// first call is the initialisation error that forked children report
    /// (`cudaErrorInitializationError`, `CUDA_ERROR_NOT_INITIALIZED`); the
    /// parent is untouched (mem.fork.child-call-after-init).
    pub(crate) fn fork_child_alloc(&mut self, _p: ProcessIndex, _size: u64) -> SimResult<()> {
        Err(ErrorKind::NotInitialized.into())
    }
}
