//! What a role's closure gets: its [`RoleCtx`] (the driver, its peers) and
//! the [`Message`]s it exchanges with them.

use super::driver::RoleDriver;
use super::ledger::Kept;
use super::model::{fail, RoleError, RoleResult};
use crate::calls::Driver;
use crate::driver::{IpcEventHandle, IpcMemHandle};
use crate::errors::ErrorKind;
use serde::{de::DeserializeOwned, Serialize};
use std::os::fd::OwnedFd;
use std::sync::Arc;

pub(crate) type RoleBody = Arc<dyn Fn(&mut RoleCtx) -> RoleResult + Send + Sync>;

/// What one peer sends another: bytes and, optionally, file descriptors.
#[derive(Debug, Default)]
pub struct Message {
    /// The payload.
    pub bytes: Vec<u8>,
    /// Descriptors sent with it (`SCM_RIGHTS` between OS processes).
    pub fds: Vec<OwnedFd>,
}

impl Message {
    /// A message of these bytes and no descriptors.
    pub fn bytes(bytes: impl Into<Vec<u8>>) -> Message {
        Message {
            bytes: bytes.into(),
            fds: Vec::new(),
        }
    }

    /// A message carrying one IPC handle's 64 bytes.
    pub fn handle(handle: IpcMemHandle) -> Message {
        Message::bytes(handle.0.to_vec())
    }

    /// The 64 bytes as a handle, if the message is exactly one.
    pub fn as_handle(&self) -> Option<IpcMemHandle> {
        IpcMemHandle::from_slice(&self.bytes)
    }

    /// A message carrying one IPC event handle's 64 bytes.
    pub fn event_handle(handle: IpcEventHandle) -> Message {
        Message::bytes(handle.0.to_vec())
    }

    /// The 64 bytes as an event handle, if the message is exactly one.
    pub fn as_event_handle(&self) -> Option<IpcEventHandle> {
        IpcEventHandle::from_slice(&self.bytes)
    }

    /// A serde value, JSON-encoded.
    pub fn json<T: Serialize>(value: &T) -> Result<Message, RoleError> {
        Ok(Message::bytes(serde_json::to_vec(value)?))
    }

    /// Decodes the bytes as the JSON of a `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, RoleError> {
        Ok(serde_json::from_slice(&self.bytes)?)
    }
}

/// How a role's messages reach its peers (threads on the simulator, the
/// parent process on the real backend).
pub(crate) trait PeerLink: Send {
    fn send(&mut self, to: usize, msg: Message) -> Result<(), RoleError>;
    /// The next message (from `from` only, when given) and its sender.
    fn recv(&mut self, from: Option<usize>) -> Result<(usize, Message), RoleError>;
}

/// What a role's closure gets: its driver and its peers.
pub struct RoleCtx {
    pub(super) name: String,
    pub(super) names: Vec<String>,
    pub(super) driver: RoleDriver,
    pub(super) link: Box<dyn PeerLink>,
}

impl RoleCtx {
    /// This role's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The driver as this role's process sees it.
    pub fn driver(&mut self) -> &mut dyn Driver {
        &mut self.driver
    }

    /// Declares that one driver error of `kind` is expected: the next one
    /// this role's calls get is not held against a clean report (each
    /// declaration covers one error).
    pub fn expect_error(&mut self, kind: ErrorKind) {
        self.driver.state.ledger.expecting.push(kind);
    }

    /// Declares that the role keeps `what` past its end on purpose: it is
    /// not reported as a leak.
    pub fn keep(&mut self, what: Kept) {
        self.driver.state.ledger.kept.push(what);
    }

    fn peer(&self, name: &str) -> Result<usize, RoleError> {
        self.names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| fail(format!("'{}' sent to unknown role '{name}'", self.name)))
    }

    /// Sends `msg` to role `to`; an unknown role is an error.
    pub fn send(&mut self, to: &str, msg: Message) -> Result<(), RoleError> {
        let to = self.peer(to)?;
        self.link.send(to, msg)
    }

    /// Sends a serde value (JSON).
    pub fn send_json<T: Serialize>(&mut self, to: &str, value: &T) -> Result<(), RoleError> {
        self.send(to, Message::json(value)?)
    }

    /// Blocks until any peer's message arrives; returns the sender's name.
    pub fn recv(&mut self) -> Result<(String, Message), RoleError> {
        let (from, msg) = self.link.recv(None)?;
        Ok((self.names[from].clone(), msg))
    }

    /// Blocks until a message from `from` arrives (others wait their turn).
    pub fn recv_from(&mut self, from: &str) -> Result<Message, RoleError> {
        let from = self.peer(from)?;
        Ok(self.link.recv(Some(from))?.1)
    }

    /// Blocks for a message from role `from`, decoded as `T`.
    pub fn recv_json_from<T: DeserializeOwned>(&mut self, from: &str) -> Result<T, RoleError> {
        self.recv_from(from)?.parse()
    }

    /// Blocks for any peer's message, decoded as `T`; returns the sender's name.
    pub fn recv_json<T: DeserializeOwned>(&mut self) -> Result<(String, T), RoleError> {
        let (from, msg) = self.recv()?;
        Ok((from, msg.parse()?))
    }
}
