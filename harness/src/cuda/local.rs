//! The real driver in this very process: the worker's request handler
//! called directly instead of over a socket. For code that must run in its
//! own OS process with CUDA loaded (a role of a [`crate::roles::RoleSet`]
//! on the real backend), where a worker per call would be a second process.
//!
//! Every call runs on the calling thread and uses its current context, as
//! in the worker; use one `LocalCudaDriver` from one thread.

use super::process::RequestChannel;
use super::protocol::{Reply, Request, WireError};
use super::worker::Worker;
use crate::driver::{DeviceOrdinal, DriverError, DriverResult};
use crate::errors::{ApiError, Dialect};

/// The CUDA driver, in-process, in one dialect (see [`super::worker`] for
/// the API calls behind each method).
pub struct LocalCudaDriver {
    dialect: Dialect,
    worker: Worker,
}

impl LocalCudaDriver {
    /// Loads CUDA, initialises it and makes `device` current (`Init`).
    pub fn new(dialect: Dialect, device: DeviceOrdinal) -> DriverResult<LocalCudaDriver> {
        let mut driver = LocalCudaDriver {
            dialect,
            worker: Worker::default(),
        };
        match driver.call(Request::Init { dialect, device })? {
            Reply::Unit => Ok(driver),
            r => Err(unexpected("init", r)),
        }
    }

    fn call(&mut self, request: Request) -> DriverResult<Reply> {
        let name = request.name();
        match self.worker.handle_guarded(request) {
            Ok(reply) => Ok(reply),
            Err(WireError::Api(code)) => {
                Err(DriverError::Api(ApiError::from_code(self.dialect, code)))
            }
            Err(WireError::Harness(m)) => Err(DriverError::Harness(format!("{name}: {m}"))),
        }
    }
}

fn unexpected(what: &str, reply: Reply) -> DriverError {
    DriverError::Harness(format!("unexpected answer to {what}: {reply:?}"))
}

impl RequestChannel for LocalCudaDriver {
    fn channel_dialect(&self) -> Dialect {
        self.dialect
    }

    fn request(&mut self, request: Request) -> DriverResult<Reply> {
        self.call(request)
    }
}
