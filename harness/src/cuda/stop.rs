//! A stop asked of every wait on a worker (SIGINT, SIGTERM).
//!
//! A run stopped by a signal finishes the clause in progress; a step whose
//! driver call hangs would keep it waiting the whole step timeout (20 s by
//! default). Once [`request_stop`] is called, a wait on a worker's answer
//! lasts at most [`STOP_GRACE`] more; a worker that has not answered by
//! then is killed and its step is a Timeout, as any hung step is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a wait goes on after a stop was asked.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Ask every wait on a worker to end within [`STOP_GRACE`]. Only an atomic
/// store: safe to call from a signal handler.
pub fn request_stop() {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Forget a stop request (a new run).
pub fn clear_stop() {
    STOP_REQUESTED.store(false, Ordering::SeqCst);
}

/// Whether a stop was asked.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}
