//! The roles of one test ([`RoleSet`]): their processes and closures, and
//! the checks a run's options must pass. The runs themselves are in
//! `mod.rs`, above the scheduler and the process runner.

use super::ctx::{RoleBody, RoleCtx};
use super::model::{RoleResult, RunOptions};
use crate::errors::Dialect;
use crate::machine::{MachineSpec, ProcessSpec, StartError};
use std::sync::Arc;

pub(super) struct RoleDecl {
    pub(super) spec: ProcessSpec,
    pub(super) body: RoleBody,
}

/// The processes of one test and the closure each runs. Build it the same
/// way in every process (a plain function the test calls): on the real
/// backend each role's process finds its closure by name.
pub struct RoleSet {
    pub(super) devices: u32,
    pub(super) dialect: Dialect,
    pub(super) roles: Vec<RoleDecl>,
}

impl Default for RoleSet {
    fn default() -> Self {
        RoleSet::new()
    }
}

impl RoleSet {
    /// One device, runtime dialect, no roles yet.
    pub fn new() -> RoleSet {
        RoleSet {
            devices: 1,
            dialect: Dialect::Runtime,
            roles: Vec::new(),
        }
    }

    /// Devices the machine must have.
    pub fn devices(mut self, devices: u32) -> RoleSet {
        self.devices = devices;
        self
    }

    /// Every role's process speaks `dialect`.
    pub fn dialect(mut self, dialect: Dialect) -> RoleSet {
        self.dialect = dialect;
        self
    }

    /// A role on `device` (all devices visible).
    pub fn role<F>(self, name: &str, device: u32, body: F) -> RoleSet
    where
        F: Fn(&mut RoleCtx) -> RoleResult + Send + Sync + 'static,
    {
        self.process(
            ProcessSpec {
                name: name.into(),
                device,
                visible_devices: None,
                pid_namespace: Default::default(),
            },
            body,
        )
    }

    /// A role with a full process spec (visible devices).
    pub fn process<F>(mut self, spec: ProcessSpec, body: F) -> RoleSet
    where
        F: Fn(&mut RoleCtx) -> RoleResult + Send + Sync + 'static,
    {
        self.roles.push(RoleDecl {
            spec,
            body: Arc::new(body),
        });
        self
    }

    /// The role names, in the order they were added.
    pub fn names(&self) -> Vec<String> {
        self.roles.iter().map(|r| r.spec.name.clone()).collect()
    }

    pub(super) fn machine_spec(&self, opts: &RunOptions) -> MachineSpec {
        MachineSpec {
            devices: self.devices,
            processes: self.roles.iter().map(|r| r.spec.clone()).collect(),
            dialect: self.dialect,
            seed: opts.seed,
            step_timeout: opts.timeout,
            topology: None,
            semantics: Vec::new(),
        }
    }

    /// Bad declarations: no roles, a name twice, a fault for no role.
    pub(super) fn validate(&self, opts: &RunOptions) -> Result<(), StartError> {
        let names = self.names();
        if names.is_empty() {
            return Err(StartError::Harness("the role set has no roles".into()));
        }
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(StartError::Harness(format!("role '{n}' declared twice")));
            }
        }
        if let Some(f) = opts.faults.iter().find(|f| !names.contains(&f.role)) {
            return Err(StartError::Harness(format!(
                "a fault names role '{}', which is not declared",
                f.role
            )));
        }
        if let Some(c) = opts.crashes.iter().find(|c| !names.contains(&c.role)) {
            return Err(StartError::Harness(format!(
                "a crash names role '{}', which is not declared",
                c.role
            )));
        }
        for (i, c) in opts.crashes.iter().enumerate() {
            if c.nth == 0 {
                return Err(StartError::Harness(format!(
                    "the crash of role '{}' is at number 0 of {:?}: calls count from 1",
                    c.role, c.call
                )));
            }
            if opts.crashes[..i].iter().any(|d| d.role == c.role) {
                return Err(StartError::Harness(format!(
                    "role '{}' has two crashes planned: a process dies once",
                    c.role
                )));
            }
        }
        Ok(())
    }
}
