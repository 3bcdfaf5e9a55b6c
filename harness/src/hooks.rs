//! Your own backend around another one (usually the simulator): a hook
//! changes the few driver calls it cares about, and everything else passes
//! through unchanged (docs/testing-your-code.md, "Your own backend").
//!
//! - [`DriverHook`]: one method per driver call, generated from the call
//!   table (`calls.rs`), each given the driver it wraps; every one passes
//!   the call on by default, so a hook overrides only what it changes.
//! - [`Hooked`]: a hook and the driver it wraps, as one [`Driver`] (for
//!   `RoleSet::run_with_drivers`, or any code that takes a driver).
//! - [`HookedBackend`]: a backend under a name of its own whose machines
//!   give each process a fresh hook around that process's driver. Every
//!   other method of [`Backend`] and [`Machine`] is passed through,
//!   the ones `Machine` defaults included (`crash`, `process_pid`,
//!   `transfer_fd`, `begin_step`, `shutdown`): a hand-written wrapper that
//!   forgets one of those gets the default, which behaves unlike the
//!   wrapped backend (a crash becomes a clean exit, descriptors cannot
//!   travel), and this one cannot forget.

use crate::calls::Driver;
use crate::driver::{
    ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, DriverError, DriverResult, EventId, Fd,
    FreeKind, GranularityKind, HandleTypes, IpcEventHandle, IpcMemHandle, MemKind, OutArg,
    PointerAttribute, PointerInfo, PoolId, PoolPtrExport, ShareableHandleType, StreamId, VmmAccess,
    VmmHandle,
};
use crate::errors::Dialect;
use crate::machine::{
    Backend, BackendInfo, Hazard, Machine, MachineSpec, ProcessIndex, StartError, WorkerFit,
    WorkerSharing,
};

macro_rules! define_driver_hooks {
    ($(
        $(#[$doc:meta])*
        $method:ident $Variant:ident $(( $( $(#[$attr:meta])* $arg:ident : $($ty:ident)? $(&[$elem:ident] as $owned:ty)? ),* ))? -> $ret:ty => $keyword:ident $api:tt;
    )*) => {
        /// What a wrapper does with each driver call: every method is
        /// given `inner`, the driver it wraps, and by default makes the
        /// same call on it. Override the calls you change; call `inner`
        /// from them to pass the call on after all.
        pub trait DriverHook {
            $(
                $(#[$doc])*
                fn $method(&mut self, inner: &mut dyn Driver $($(, $arg: $($ty)? $(&[$elem])?)*)?) -> DriverResult<$ret> {
                    inner.$method($($($arg),*)?)
                }
            )*
        }

        impl<H: DriverHook, D: Driver> Driver for Hooked<H, D> {
            fn dialect(&self) -> Dialect {
                self.inner.dialect()
            }
            $(
                fn $method(&mut self $($(, $arg: $($ty)? $(&[$elem])?)*)?) -> DriverResult<$ret> {
                    self.hook.$method(&mut self.inner $($(, $arg)*)?)
                }
            )*
        }

        /// The driver of the process [`Machine::driver`] last named: its
        /// hook around the wrapped machine's driver of that process.
        impl<H: DriverHook> Driver for HookedMachine<H> {
            fn dialect(&self) -> Dialect {
                self.dialect
            }
            $(
                fn $method(&mut self $($(, $arg: $($ty)? $(&[$elem])?)*)?) -> DriverResult<$ret> {
                    let p = self.current;
                    let Some(hook) = self.hooks.get_mut(p) else {
                        return Err(no_process(p, self.hooks.len()));
                    };
                    hook.$method(self.inner.driver(p) $($(, $arg)*)?)
                }
            )*
        }
    };
}

crate::for_each_driver_call!(define_driver_hooks);

fn no_process(p: ProcessIndex, count: usize) -> DriverError {
    DriverError::Harness(format!(
        "the hooked machine has {count} process(es), no process {p}"
    ))
}

/// A hook and the driver it wraps, as one [`Driver`]: each call goes to
/// the hook's method, which by default passes it to `inner`.
#[derive(Debug, Clone, Default)]
pub struct Hooked<H, D> {
    /// What changes the calls.
    pub hook: H,
    /// The driver the calls go to.
    pub inner: D,
}

impl<H, D> Hooked<H, D> {
    /// `hook` around `inner`.
    pub fn new(hook: H, inner: D) -> Hooked<H, D> {
        Hooked { hook, inner }
    }
}

/// A backend around `inner` under a name of its own: its machines are
/// `inner`'s, with every process's driver calls going through a hook that
/// `make_hook` builds for that process when the machine starts.
pub struct HookedBackend<B, F> {
    name: String,
    inner: B,
    make_hook: F,
}

impl<B, F, H> HookedBackend<B, F>
where
    B: Backend,
    F: Fn(&MachineSpec, ProcessIndex) -> H,
    H: DriverHook + 'static,
{
    /// `inner` under `name` (what reports and `Backend::name` say), each
    /// process's hook built by `make_hook(spec, process)`.
    pub fn new(name: impl Into<String>, inner: B, make_hook: F) -> HookedBackend<B, F> {
        HookedBackend {
            name: name.into(),
            inner,
            make_hook,
        }
    }

    /// The backend it wraps.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn hooked(&self, spec: &MachineSpec, inner: Box<dyn Machine>) -> Box<dyn Machine> {
        let hooks = (0..spec.processes.len())
            .map(|p| (self.make_hook)(spec, p))
            .collect();
        Box::new(HookedMachine {
            inner,
            hooks,
            current: 0,
            dialect: spec.dialect,
        })
    }
}

impl<B, F, H> Backend for HookedBackend<B, F>
where
    B: Backend,
    F: Fn(&MachineSpec, ProcessIndex) -> H,
    H: DriverHook + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn info(&self) -> BackendInfo {
        BackendInfo {
            backend: self.name.clone(),
            ..self.inner.info()
        }
    }
    fn start(&self, spec: &MachineSpec) -> Result<Box<dyn Machine>, StartError> {
        let inner = self.inner.start(spec)?;
        Ok(self.hooked(spec, inner))
    }
    fn has_hazard_log(&self) -> bool {
        self.inner.has_hazard_log()
    }
    fn dialects(&self) -> &[Dialect] {
        self.inner.dialects()
    }
    fn semantic_choice(&self, dialect: Dialect, name: &str) -> Option<String> {
        self.inner.semantic_choice(dialect, name)
    }
    fn shares_workers(&self) -> bool {
        self.inner.shares_workers()
    }
    fn start_shared(
        &self,
        spec: &MachineSpec,
        sharing: &WorkerSharing,
        fits: &[WorkerFit],
    ) -> Result<Box<dyn Machine>, StartError> {
        let inner = self.inner.start_shared(spec, sharing, fits)?;
        Ok(self.hooked(spec, inner))
    }
}

/// A machine of [`HookedBackend`]: the wrapped machine, and one hook per
/// process. It is its own processes' driver: [`Machine::driver`] names the
/// process whose calls follow.
pub struct HookedMachine<H> {
    inner: Box<dyn Machine>,
    hooks: Vec<H>,
    current: ProcessIndex,
    dialect: Dialect,
}

impl<H> HookedMachine<H> {
    /// Process `p`'s hook, to read what it recorded.
    pub fn hook(&self, p: ProcessIndex) -> Option<&H> {
        self.hooks.get(p)
    }
}

impl<H: DriverHook> Machine for HookedMachine<H> {
    fn process_count(&self) -> usize {
        self.inner.process_count()
    }
    fn driver(&mut self, process: ProcessIndex) -> &mut dyn Driver {
        self.current = process;
        self
    }
    fn exit(&mut self, process: ProcessIndex) -> DriverResult<()> {
        self.inner.exit(process)
    }
    fn crash(&mut self, process: ProcessIndex) -> DriverResult<()> {
        self.inner.crash(process)
    }
    fn begin_step(&mut self, step: usize) {
        self.inner.begin_step(step)
    }
    fn hazards(&self) -> Option<Vec<Hazard>> {
        self.inner.hazards()
    }
    fn shutdown(&mut self) {
        self.inner.shutdown()
    }
    fn transfer_fd(&mut self, from: ProcessIndex, fd: Fd, to: ProcessIndex) -> DriverResult<Fd> {
        self.inner.transfer_fd(from, fd, to)
    }
    fn process_pid(&self, process: ProcessIndex) -> DriverResult<u32> {
        self.inner.process_pid(process)
    }
}
