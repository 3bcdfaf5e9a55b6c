//! `ForkChildAlloc`: `fork()` after CUDA is initialised; the child makes one
//! device allocation and reports its result code; the worker goes on.
//!
//! The child never returns into Rust code: it makes the call, writes the
//! 4-byte code into a socket the worker holds the other end of, and
//! `_exit`s (no destructors, no atexit handlers, no CUDA teardown).

use crate::cuda::protocol::WireError;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, ForkResult};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// How long the worker waits for the child's answer: a child that blocks on
/// a lock another thread held at the fork is killed and reported.
const CHILD_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// The code the child writes when the call could not be made at all (a
/// missing library or symbol): never a CUDA code.
const CHILD_HARNESS_FAILURE: i32 = i32::MIN;

fn harness(msg: impl Into<String>) -> WireError {
    WireError::Harness(msg.into())
}

/// Forks; the child runs `child_call` (the worker passes its allocation)
/// and reports the outcome, which this returns.
pub(super) fn fork_child_call(
    child_call: impl FnOnce() -> Result<u64, WireError>,
) -> Result<(), WireError> {
    let (mut parent_end, child_end) =
        UnixStream::pair().map_err(|e| harness(format!("socketpair for the forked child: {e}")))?;
    parent_end
        .set_read_timeout(Some(CHILD_ANSWER_TIMEOUT))
        .map_err(|e| harness(format!("socket timeout: {e}")))?;
    // SAFETY: the child only makes the CUDA call, writes 4 bytes and
    // `_exit`s; it touches none of the worker's state after the fork.
    match unsafe { fork() } {
        Err(e) => Err(harness(format!("fork: {e}"))),
        Ok(ForkResult::Child) => {
            let code = match child_call() {
                Ok(_) => 0,
                Err(WireError::Api(code)) => code,
                Err(WireError::Harness(_)) => CHILD_HARNESS_FAILURE,
            };
            let _ = (&child_end).write_all(&code.to_le_bytes());
            // SAFETY: ends the child without running any Rust or C teardown.
            unsafe { nix::libc::_exit(0) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(child_end);
            let mut answer = [0u8; 4];
            let read = parent_end.read_exact(&mut answer);
            if read.is_err() {
                let _ = kill(child, Signal::SIGKILL);
            }
            let status = waitpid(child, None);
            match read {
                Err(e) => Err(harness(format!(
                    "the forked child gave no answer ({e}); it ended as {status:?}"
                ))),
                Ok(()) => match i32::from_le_bytes(answer) {
                    0 => Ok(()),
                    CHILD_HARNESS_FAILURE => Err(harness(
                        "the forked child could not make the call (library or symbol missing)",
                    )),
                    code => Err(WireError::Api(code)),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_childs_outcome_comes_back_and_the_caller_goes_on() {
        assert_eq!(fork_child_call(|| Ok(1)), Ok(()));
        assert_eq!(
            fork_child_call(|| Err(WireError::Api(3))),
            Err(WireError::Api(3))
        );
        match fork_child_call(|| Err(harness("no library"))) {
            Err(WireError::Harness(m)) => assert!(m.contains("could not make the call"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
