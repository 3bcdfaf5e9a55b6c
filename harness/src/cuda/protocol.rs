//! The wire protocol between the parent (the harness) and its worker processes.
//!
//! # Framing
//!
//! Every message is one *frame*: a `u32` little-endian payload length
//! followed by that many bytes of JSON (`serde_json`). Frames travel over a
//! `SOCK_STREAM` Unix socket pair. A frame may carry file descriptors
//! (`SCM_RIGHTS`); they are attached to the frame's first bytes and collected
//! by [`recv_frame`] while it reads that frame. Readers always read exactly
//! the bytes of the current frame, so descriptors never stray into the next
//! one.
//!
//! The plain [`read_frame`] / [`write_frame`] work on any `Read` / `Write`
//! (tests, pipes); [`send_frame`] / [`recv_frame`] work on a socket and move
//! descriptors too. Every failure is a [`ProtocolError`], never a panic:
//! a truncated frame, an oversized length, bad JSON.
//!
//! # Messages
//!
//! The parent sends [`Request`]s; the worker answers each with exactly one
//! [`Response`] (`Ok(Reply)` or `Err(WireError)`), in order. The first
//! request to a worker is [`Request::Init`] (or [`Request::Probe`] for the
//! short-lived probe worker); [`Request::Exit`] is answered and then the
//! worker exits at once. [`Request::Reset`] (only sent when the backend
//! reuses workers) releases everything the worker's requests created and is
//! answered with [`Reply::Clean`] when nothing is left.

use crate::calls::{CallKind, Driver};
use crate::driver::PointerAttribute;
use crate::driver::{
    ContextId, DeviceAttribute, DeviceOrdinal, DevicePtr, DriverResult, EventId, Fd, FreeKind,
    GranularityKind, HandleTypes, IpcEventHandle, IpcMemHandle, MemKind, OutArg, PointerInfo,
    PoolId, PoolPtrExport, ShareableHandleType, StreamId, VmmAccess, VmmHandle,
};
use crate::errors::Dialect;
use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Largest payload a frame may announce (512 MiB). A larger length is
/// treated as a corrupt stream, not allocated.
pub const MAX_FRAME_LEN: u32 = 512 << 20;

/// Most file descriptors one frame may carry.
pub const MAX_FDS_PER_FRAME: usize = 16;

/// Largest `read` / `device_read` / `write` a worker performs in one call
/// (128 MiB): the host buffer must exist, and the reply must fit in a frame.
pub const MAX_TRANSFER: u64 = 128 << 20;

/// Why a frame could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The stream ended cleanly, between two frames.
    #[error("end of stream")]
    Eof,
    /// The stream ended inside a frame.
    #[error("truncated frame: {0}")]
    Truncated(String),
    /// The length prefix is larger than [`MAX_FRAME_LEN`].
    #[error("frame length {0} exceeds the limit of {MAX_FRAME_LEN} bytes")]
    TooLarge(u64),
    /// The payload is not the JSON of the expected message.
    #[error("malformed message: {0}")]
    Json(#[from] serde_json::Error),
    /// More descriptors arrived than the receive buffer holds; some were lost.
    #[error("file descriptors were truncated (more than {MAX_FDS_PER_FRAME} in one frame)")]
    TooManyFds,
    /// Reading or writing the socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
}

// --------------------------------------------------------------------------
// Messages
// --------------------------------------------------------------------------

macro_rules! define_requests {
    ($(
        $(#[$doc:meta])*
        $method:ident $Variant:ident $(( $( $(#[$attr:meta])* $arg:ident : $($ty:ident)? $(&[$elem:ident] as $owned:ty)? ),* ))? -> $ret:ty => $keyword:ident $api:tt;
    )*) => {
        /// One API call (or control message) for a worker: a variant per
        /// [`crate::Driver`] method, from the table in `calls.rs`, and the
        /// control messages. Pointers, contexts, events and handles travel as
        /// their raw numbers.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Request {
            /// Report versions, device count and the first device's identity.
            /// Needs no `Init`; used by the backend's one-off probe worker.
            Probe,
            /// First request of a machine's worker: choose the dialect and make
            /// `device` current (`cudaSetDevice`, or primary context + `cuCtxSetCurrent`).
            Init {
                /// The API family the worker's calls use.
                dialect: Dialect,
                /// The device made current.
                device: u32,
            },
            /// Answered with `Ok(Unit)` and descriptor `fd` attached (`SCM_RIGHTS`);
            /// `InvalidValue` when the worker holds no such descriptor.
            SendFd {
                /// The descriptor's number in the worker.
                fd: i32,
            },
            /// Sent with one descriptor attached; answered with `Reply::Fd`, the
            /// number the worker now has for it.
            ReceiveFd,
            /// First step of a reset: release what this worker took from other
            /// processes (IPC mappings, imported pool pointers and pools) and its
            /// streams and events. Answered with `Ok(Unit)` when every release
            /// succeeded. The machine sends it to all its workers and waits for
            /// every answer before any [`Request::Reset`], so no worker frees
            /// memory another still maps.
            ReleaseImported,
            /// Release everything this worker's requests created (IPC mappings,
            /// allocations, created contexts), make the `Init` device's primary
            /// context current again and synchronize. Answered with
            /// [`Reply::Clean`] only when every release call and the synchronize
            /// succeeded and nothing is left; with an error otherwise. Sent only by
            /// a backend that reuses workers ([`crate::cuda::CudaBackend::with_worker_reuse`]).
            Reset,
            /// Answered with `Ok(Unit)`; then the worker exits with status 0 without
            /// another API call (the OS and driver reclaim its resources).
            Exit,
            $(
                $(#[$doc])*
                $Variant $({ $(
                    #[doc = concat!("The `", stringify!($arg), "` argument of [`Driver::", stringify!($method), "`].")]
                    $(#[$attr])* $arg: $($ty)? $($owned)?
                ),* })?,
            )*
        }

        impl Request {
            /// A short name for messages ("the worker died during ipc_open_mem_handle").
            pub fn name(&self) -> &'static str {
                match self {
                    Request::Probe => "probe",
                    Request::Init { .. } => "init",
                    Request::SendFd { .. } => "send_fd",
                    Request::ReceiveFd => "receive_fd",
                    Request::ReleaseImported => "release_imported",
                    Request::Reset => "reset",
                    Request::Exit => "exit",
                    $( Request::$Variant { .. } => stringify!($method), )*
                }
            }

            /// The driver call this request makes; `None` for a control message.
            pub fn call_kind(&self) -> Option<CallKind> {
                match self {
                    $( Request::$Variant { .. } => Some(CallKind::$Variant), )*
                    _ => None,
                }
            }

            /// Makes the call this request names on `driver` and encodes its
            /// value as the reply; `None` for a control message.
            pub fn call_on(self, driver: &mut dyn Driver) -> Option<DriverResult<Reply>> {
                match self {
                    $(
                        Request::$Variant $({ $($arg),* })? => Some(
                            driver
                                .$method($($( $crate::driver_call_pass!($arg $(, $owned)?) ),*)?)
                                .map(WireValue::into_reply),
                        ),
                    )*
                    _ => None,
                }
            }
        }
    };
}

crate::for_each_driver_call!(define_requests);

/// A value a driver call returns, as it travels in a [`Reply`]. Each return
/// type of the call table has one reply variant.
pub trait WireValue: Sized {
    /// The value as the reply variant of its type.
    fn into_reply(self) -> Reply;
    /// The value, or the reply back when it is another variant.
    fn from_reply(reply: Reply) -> Result<Self, Reply>;
}

macro_rules! wire_values {
    ($( $ty:ty : |$v:ident| $into:expr, $pat:pat => $from:expr; )*) => {$(
        impl WireValue for $ty {
            fn into_reply(self) -> Reply {
                let $v = self;
                $into
            }
            fn from_reply(reply: Reply) -> Result<Self, Reply> {
                match reply {
                    $pat => Ok($from),
                    other => Err(other),
                }
            }
        }
    )*};
}

wire_values! {
    (): |_unit| Reply::Unit, Reply::Unit => ();
    u32: |n| Reply::Count(n), Reply::Count(n) => n;
    i64: |n| Reply::Int(n), Reply::Int(n) => n;
    u64: |n| Reply::Int(n as i64), Reply::Int(n) => n as u64;
    f32: |ms| Reply::ElapsedMs(ms.to_bits()), Reply::ElapsedMs(bits) => f32::from_bits(bits);
    Vec<u8>: |bytes| Reply::Bytes(bytes), Reply::Bytes(bytes) => bytes;
    DevicePtr: |p| Reply::Ptr(p.0), Reply::Ptr(p) => DevicePtr(p);
    (DevicePtr, u64): |range| Reply::Range { base: range.0 .0, size: range.1 },
        Reply::Range { base, size } => (DevicePtr(base), size);
    ContextId: |c| Reply::Context(c.0), Reply::Context(c) => ContextId(c);
    Option<ContextId>: |c| Reply::CurrentContext(c.map(|c| c.0)),
        Reply::CurrentContext(c) => c.map(ContextId);
    PointerInfo: |info| Reply::PointerInfo(info), Reply::PointerInfo(info) => info;
    IpcMemHandle: |h| Reply::Handle(h), Reply::Handle(h) => h;
    VmmHandle: |h| Reply::VmmHandle(h.0), Reply::VmmHandle(h) => VmmHandle(h);
    Fd: |fd| Reply::Fd(fd.0), Reply::Fd(fd) => Fd(fd);
    EventId: |e| Reply::Event(e.0), Reply::Event(e) => EventId(e);
    IpcEventHandle: |h| Reply::EventHandle(h), Reply::EventHandle(h) => h;
    PoolId: |p| Reply::Pool(p.0), Reply::Pool(p) => PoolId(p);
    PoolPtrExport: |x| Reply::PoolPtrExport(x), Reply::PoolPtrExport(x) => x;
    StreamId: |s| Reply::Stream(s.0), Reply::Stream(s) => StreamId(s);
}

/// The value of a successful call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// A call that returns nothing succeeded.
    Unit,
    /// A count (`device_count`, ...).
    Count(u32),
    /// A number: an attribute value, or a `u64` carried as its bits.
    Int(i64),
    /// A device pointer's address.
    Ptr(u64),
    /// A context (the raw `CUcontext`).
    Context(u64),
    /// `current_context`: the current context, `None` when there is none.
    CurrentContext(Option<u64>),
    /// Memory contents read back (hex in JSON).
    Bytes(#[serde(with = "hex_bytes")] Vec<u8>),
    /// `address_range`: an allocation's base address and size in bytes.
    Range {
        /// The base address.
        base: u64,
        /// The size in bytes.
        size: u64,
    },
    /// `pointer_info`: the memory type and device of a pointer.
    PointerInfo(PointerInfo),
    /// An IPC memory handle.
    Handle(IpcMemHandle),
    /// The answer to [`Request::Probe`].
    Probe(ProbeReport),
    /// The answer to [`Request::Reset`]: the worker holds nothing its
    /// requests created and may serve another machine.
    Clean {
        /// Emptied contexts it keeps for the next `CreateContext` (the pool
        /// gives such a worker to a process that creates contexts).
        spare_contexts: u32,
    },
    // --- VMM ---
    /// A VMM allocation handle (the raw `CUmemGenericAllocationHandle`).
    VmmHandle(u64),
    /// A file descriptor, as numbered in the worker.
    Fd(i32),
    /// A created or opened event (the raw `cudaEvent_t` / `CUevent`).
    Event(u64),
    /// An IPC event handle.
    EventHandle(IpcEventHandle),
    /// `stream_create`: the `cudaStream_t` / `CUstream`.
    Stream(u64),
    /// `event_elapsed`: milliseconds as `f32::to_bits` (keeps `Reply: Eq`).
    ElapsedMs(u32),
    // --- memory pools ---
    /// A memory pool (the raw `cudaMemPool_t` / `CUmemoryPool`).
    Pool(u64),
    /// A pool pointer's export data (`cuMemPoolExportPointer`).
    PoolPtrExport(PoolPtrExport),
}

/// The error side of a response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireError {
    /// The API returned this code (reported in the process's dialect).
    Api(i32),
    /// The worker could not run the call (bad request, missing library or
    /// symbol, a caught panic): the harness's fault, not the driver's.
    Harness(String),
}

/// What a worker answers to each request.
pub type Response = Result<Reply, WireError>;

/// What the probe worker saw. Versions are the raw integers
/// (`13000` = 13.0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// `libcuda` could be loaded in the worker.
    pub libcuda: bool,
    /// `libcudart` could be loaded in the worker (needed by the runtime dialect).
    pub libcudart: bool,
    /// `cuDriverGetVersion`.
    pub cuda_driver_version: Option<i32>,
    /// `cudaRuntimeGetVersion`.
    pub cuda_runtime_version: Option<i32>,
    /// The code `cuInit(0)` returned when it failed.
    pub init_error: Option<i32>,
    /// `cuDeviceGetCount` (0 when `cuInit` failed).
    pub device_count: u32,
    /// `cuDeviceGetName` of device 0.
    pub gpu_name: Option<String>,
    /// Compute capability (major, minor) of device 0.
    pub compute_capability: Option<(i32, i32)>,
}

/// `Vec<u8>` as a lowercase hex string: compact JSON for memory contents.
pub mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    const DIGITS: &[u8; 16] = b"0123456789abcdef";

    /// `bytes` as lowercase hex, two digits a byte.
    pub fn encode(bytes: &[u8]) -> String {
        let mut s = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            s.push(DIGITS[(b >> 4) as usize] as char);
            s.push(DIGITS[(b & 0xf) as usize] as char);
        }
        s
    }

    /// The bytes `s` spells in hex (either case); an error names an odd
    /// length or a non-hex digit.
    pub fn decode(s: &str) -> Result<Vec<u8>, String> {
        fn nibble(c: u8) -> Option<u8> {
            match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                b'A'..=b'F' => Some(c - b'A' + 10),
                _ => None,
            }
        }
        let raw = s.as_bytes();
        if raw.len() % 2 != 0 {
            return Err(format!("odd-length hex string ({} digits)", raw.len()));
        }
        raw.chunks_exact(2)
            .map(|p| match (nibble(p[0]), nibble(p[1])) {
                (Some(h), Some(l)) => Ok(h << 4 | l),
                _ => Err(format!(
                    "invalid hex digits {:?}",
                    String::from_utf8_lossy(p)
                )),
            })
            .collect()
    }

    /// Serde: write the bytes as a hex string.
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(bytes))
    }

    /// Serde: read a hex string back into bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s: std::borrow::Cow<'de, str> = Deserialize::deserialize(d)?;
        decode(&s).map_err(serde::de::Error::custom)
    }
}

// --------------------------------------------------------------------------
// Framing over Read / Write
// --------------------------------------------------------------------------

/// The JSON payload of a message.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    let payload = serde_json::to_vec(msg)?;
    if payload.len() as u64 > MAX_FRAME_LEN as u64 {
        return Err(ProtocolError::TooLarge(payload.len() as u64));
    }
    Ok(payload)
}

/// A message from its JSON payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ProtocolError> {
    Ok(serde_json::from_slice(payload)?)
}

/// A whole frame (length prefix and payload) for `msg`.
pub fn encode_frame<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtocolError> {
    let payload = encode(msg)?;
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Writes one frame holding `payload`.
pub fn write_frame<W: Write>(w: &mut W, payload: &[u8]) -> Result<(), ProtocolError> {
    if payload.len() as u64 > MAX_FRAME_LEN as u64 {
        return Err(ProtocolError::TooLarge(payload.len() as u64));
    }
    w.write_all(&(payload.len() as u32).to_le_bytes())?;
    w.write_all(payload)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame's payload. A clean end of stream before the frame is
/// [`ProtocolError::Eof`]; an end inside it is [`ProtocolError::Truncated`].
pub fn read_frame<R: Read>(r: &mut R) -> Result<Vec<u8>, ProtocolError> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < header.len() {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(ProtocolError::Eof),
            Ok(0) => {
                return Err(ProtocolError::Truncated(format!(
                    "stream ended after {got} of 4 length bytes"
                )))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_le_bytes(header);
    if len > MAX_FRAME_LEN {
        return Err(ProtocolError::TooLarge(len as u64));
    }
    // Grow with the data rather than trusting the length up front.
    let mut payload = Vec::with_capacity((len as usize).min(64 << 10));
    r.take(len as u64).read_to_end(&mut payload)?;
    if payload.len() != len as usize {
        return Err(ProtocolError::Truncated(format!(
            "stream ended after {} of {len} payload bytes",
            payload.len()
        )));
    }
    Ok(payload)
}

/// Writes `msg` as one frame.
pub fn write_message<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), ProtocolError> {
    write_frame(w, &encode(msg)?)
}

/// Reads one frame and decodes it as `T`.
pub fn read_message<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, ProtocolError> {
    decode(&read_frame(r)?)
}

// --------------------------------------------------------------------------
// Framing over a Unix socket, with file descriptors
// --------------------------------------------------------------------------

/// Sends one frame holding `payload` over the stream socket `sock`, with
/// `fds` attached (`SCM_RIGHTS`). Uses `MSG_NOSIGNAL`: a dead peer is an
/// `EPIPE` error, never a `SIGPIPE`.
pub fn send_frame(
    sock: BorrowedFd<'_>,
    payload: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), ProtocolError> {
    if payload.len() as u64 > MAX_FRAME_LEN as u64 {
        return Err(ProtocolError::TooLarge(payload.len() as u64));
    }
    if fds.len() > MAX_FDS_PER_FRAME {
        return Err(ProtocolError::TooManyFds);
    }
    let header = (payload.len() as u32).to_le_bytes();
    let raw_fds: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let total = header.len() + payload.len();
    let mut sent = 0usize;
    while sent < total {
        let (h, p) = if sent < header.len() {
            (&header[sent..], payload)
        } else {
            (&header[..0], &payload[sent - header.len()..])
        };
        let iov = [IoSlice::new(h), IoSlice::new(p)];
        let rights = [ControlMessage::ScmRights(&raw_fds)];
        // Descriptors go with the first chunk only.
        let cmsgs: &[ControlMessage] = if sent == 0 && !raw_fds.is_empty() {
            &rights
        } else {
            &[]
        };
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(0) => {
                return Err(ProtocolError::Io(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket accepted no bytes",
                )))
            }
            Ok(n) => sent += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(ProtocolError::Io(e.into())),
        }
    }
    Ok(())
}

/// Sends `msg` as one frame with `fds` attached.
pub fn send_message<T: Serialize>(
    sock: BorrowedFd<'_>,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), ProtocolError> {
    send_frame(sock, &encode(msg)?, fds)
}

/// Receives one frame from the stream socket `sock`: its payload and the
/// descriptors that came with it (close-on-exec, owned by the caller).
pub fn recv_frame(sock: BorrowedFd<'_>) -> Result<(Vec<u8>, Vec<OwnedFd>), ProtocolError> {
    let mut reader = FdReader {
        sock,
        fds: Vec::new(),
        fds_truncated: false,
    };
    let payload = read_frame(&mut reader)?;
    if reader.fds_truncated {
        return Err(ProtocolError::TooManyFds);
    }
    Ok((payload, reader.fds))
}

/// Receives one frame and decodes it as `T`. On a decoding error the frame
/// has been consumed whole, so the stream stays in step.
pub fn recv_message<T: DeserializeOwned>(
    sock: BorrowedFd<'_>,
) -> Result<(T, Vec<OwnedFd>), ProtocolError> {
    let (payload, fds) = recv_frame(sock)?;
    Ok((decode(&payload)?, fds))
}

/// `Read` over `recvmsg`, keeping every descriptor that arrives.
struct FdReader<'a> {
    sock: BorrowedFd<'a>,
    fds: Vec<OwnedFd>,
    fds_truncated: bool,
}

impl Read for FdReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut cmsg_buf = nix::cmsg_space!([RawFd; MAX_FDS_PER_FRAME]);
        loop {
            let mut iov = [IoSliceMut::new(&mut *buf)];
            let msg = match recvmsg::<()>(
                self.sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg_buf),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(msg) => msg,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
                self.fds_truncated = true;
            }
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmRights(fds) = c {
                        for fd in fds {
                            // SAFETY: the kernel just installed `fd` in this
                            // process for us; nothing else owns it.
                            self.fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                        }
                    }
                }
            }
            return Ok(msg.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::MemoryType;
    use std::io::{Cursor, Seek, SeekFrom};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn all_requests() -> Vec<Request> {
        let mut h = [0u8; 64];
        h[0] = 0xab;
        h[63] = 0x01;
        vec![
            Request::Probe,
            Request::Init {
                dialect: Dialect::Driver,
                device: 1,
            },
            Request::DeviceCount,
            Request::DeviceAttribute {
                device: 0,
                attr: DeviceAttribute::IpcEventSupport,
            },
            Request::CanAccessPeer { device: 0, peer: 1 },
            Request::EnablePeerAccess { peer: 1 },
            Request::SetDevice { device: 0 },
            Request::PrimaryContext { device: 0 },
            Request::CreateContext { device: 0 },
            Request::SetCurrentContext {
                ctx: ContextId(0xdead_beef),
            },
            Request::CurrentContext,
            Request::DestroyContext {
                ctx: ContextId(u64::MAX),
            },
            Request::Alloc {
                kind: MemKind::StreamOrdered,
                size: 2 << 20,
            },
            Request::Free {
                kind: FreeKind::Host,
                ptr: DevicePtr(0x7f00_0000_0000),
            },
            Request::Memset {
                ptr: DevicePtr(1),
                value: 0xab,
                len: 16,
            },
            Request::Write {
                ptr: DevicePtr(2),
                bytes: vec![0, 1, 0xfe, 0xff],
            },
            Request::Read {
                ptr: DevicePtr(3),
                len: 4096,
            },
            Request::DeviceRead {
                ptr: DevicePtr(4),
                len: 1,
            },
            Request::AddressRange { ptr: DevicePtr(5) },
            Request::PointerInfo { ptr: DevicePtr(6) },
            Request::IpcGetMemHandle {
                ptr: DevicePtr(7),
                out: OutArg::Null,
            },
            Request::IpcOpenMemHandle {
                handle: IpcMemHandle(h),
                flags: 1,
                out: OutArg::Valid,
            },
            Request::IpcCloseMemHandle { ptr: DevicePtr(8) },
            Request::Synchronize,
            Request::VmmGranularity {
                device: 0,
                types: HandleTypes::POSIX_FD,
                kind: GranularityKind::Recommended,
            },
            Request::VmmCreate {
                device: 0,
                size: 2 << 20,
                types: HandleTypes(9),
            },
            Request::VmmExport {
                handle: VmmHandle(0x1234),
                ty: ShareableHandleType::Fabric,
            },
            Request::VmmImport { fd: Fd(-1) },
            Request::VmmReserve { size: 4 << 20 },
            Request::VmmMap {
                va: DevicePtr(1 << 40),
                size: 2 << 20,
                offset: 0,
                handle: VmmHandle(7),
            },
            Request::VmmSetAccess {
                va: DevicePtr(1 << 40),
                size: 2 << 20,
                device: 0,
                access: VmmAccess::Read,
            },
            Request::VmmUnmap {
                va: DevicePtr(8),
                size: 9,
            },
            Request::VmmAddressFree {
                va: DevicePtr(8),
                size: 9,
            },
            Request::VmmRelease {
                handle: VmmHandle(7),
            },
            Request::FdClose { fd: Fd(3) },
            Request::FdOpenNullDevice,
            Request::SendFd { fd: 5 },
            Request::ReceiveFd,
            Request::ReleaseImported,
            Request::Reset,
            Request::Exit,
            Request::EventCreate { flags: 0x6 },
            Request::EventRecord { event: EventId(9) },
            Request::EventQuery { event: EventId(10) },
            Request::EventSynchronize { event: EventId(11) },
            Request::StreamWaitEvent { event: EventId(12) },
            Request::EventElapsed {
                start: EventId(13),
                end: EventId(14),
            },
            Request::EventDestroy { event: EventId(15) },
            Request::IpcGetEventHandle {
                event: EventId(16),
                out: OutArg::Null,
            },
            Request::IpcOpenEventHandle {
                handle: IpcEventHandle([0xc9; 64]),
                out: OutArg::Null,
            },
            Request::ForkChildAlloc { size: 1 << 20 },
            Request::PidfdGetfd {
                pid: 4242,
                fd: Fd(7),
            },
            Request::PointerAttribute {
                ptr: DevicePtr(0x7f00_0000_1000),
                attr: PointerAttribute::BufferId,
            },
            Request::SlowFill {
                ptr: DevicePtr(17),
                value: 0x5a,
                len: 2 << 20,
                micros: 300_000,
            },
            Request::KernelPattern {
                ptr: DevicePtr(21),
                len: 64,
                pattern: 0x0403_0201,
                width: 4,
                step: 0,
            },
            Request::PoolCreate {
                device: 0,
                types: HandleTypes::POSIX_FD,
            },
            Request::PoolDefault { device: 1 },
            Request::PoolDestroy { pool: PoolId(18) },
            Request::PoolExport { pool: PoolId(19) },
            Request::PoolImport { fd: Fd(6) },
            Request::PoolSetAccess {
                pool: PoolId(20),
                device: 0,
                access: VmmAccess::ReadWrite,
            },
            Request::PoolGetAccess {
                pool: PoolId(20),
                device: 1,
            },
            Request::PoolAlloc {
                pool: PoolId(21),
                size: 2 << 20,
            },
            Request::PoolFree { ptr: DevicePtr(22) },
            Request::PoolExportPtr { ptr: DevicePtr(23) },
            Request::PoolImportPtr {
                pool: PoolId(24),
                data: PoolPtrExport([0x3c; 64]),
            },
            Request::StreamCreate { flags: 1 },
            Request::StreamDestroy {
                stream: StreamId(18),
            },
            Request::StreamSynchronize {
                stream: StreamId(19),
            },
            Request::StreamQuery {
                stream: StreamId(20),
            },
            Request::EventRecordOn {
                event: EventId(21),
                stream: StreamId(22),
            },
            Request::StreamWaitEventOn {
                stream: StreamId(23),
                event: EventId(24),
            },
            Request::SlowFillOn {
                ptr: DevicePtr(25),
                value: 0x3c,
                len: 4096,
                micros: 1_000,
                stream: StreamId(26),
            },
            Request::CopyDevice {
                dst: DevicePtr(27),
                src: DevicePtr(28),
                len: 4096,
                stream: StreamId(0),
            },
            Request::CopyPeer {
                dst: DevicePtr(29),
                dst_device: 1,
                src: DevicePtr(30),
                src_device: 0,
                len: 4096,
            },
        ]
    }

    fn all_responses() -> Vec<Response> {
        vec![
            Ok(Reply::Unit),
            Ok(Reply::Count(2)),
            Ok(Reply::Int(-5)),
            Ok(Reply::Ptr(u64::MAX)),
            Ok(Reply::Context(0x5555_0000)),
            Ok(Reply::CurrentContext(None)),
            Ok(Reply::CurrentContext(Some(7))),
            Ok(Reply::Bytes((0..=255).collect())),
            Ok(Reply::Range {
                base: 0x7000,
                size: 2 << 20,
            }),
            Ok(Reply::PointerInfo(PointerInfo {
                memory_type: MemoryType::Managed,
                device: Some(0),
            })),
            Ok(Reply::Handle(IpcMemHandle([0x5a; 64]))),
            Ok(Reply::Probe(ProbeReport {
                libcuda: true,
                libcudart: true,
                cuda_driver_version: Some(13000),
                cuda_runtime_version: Some(13000),
                init_error: None,
                device_count: 1,
                gpu_name: Some("NVIDIA H100 80GB HBM3".into()),
                compute_capability: Some((9, 0)),
            })),
            Ok(Reply::Clean { spare_contexts: 2 }),
            Ok(Reply::VmmHandle(u64::MAX)),
            Ok(Reply::Fd(-1)),
            Ok(Reply::Event(0x5e00_0010)),
            Ok(Reply::EventHandle(IpcEventHandle([1; 64]))),
            Ok(Reply::ElapsedMs(1.5f32.to_bits())),
            Ok(Reply::Pool(0x7f00_0000_1000)),
            Ok(Reply::PoolPtrExport(PoolPtrExport([0xa5; 64]))),
            Ok(Reply::Stream(0x5700_0001)),
            Err(WireError::Api(700)),
            Err(WireError::Harness("bad request".into())),
        ]
    }

    #[test]
    fn every_request_and_response_round_trips_through_frames() {
        let mut buf = Vec::new();
        for r in all_requests() {
            write_message(&mut buf, &r).unwrap();
        }
        for r in all_responses() {
            write_message(&mut buf, &r).unwrap();
        }
        let mut cur = Cursor::new(buf);
        for r in all_requests() {
            let back: Request = read_message(&mut cur).unwrap();
            assert_eq!(back, r);
        }
        for r in all_responses() {
            let back: Response = read_message(&mut cur).unwrap();
            assert_eq!(back, r);
        }
        assert!(matches!(
            read_message::<_, Request>(&mut cur),
            Err(ProtocolError::Eof)
        ));
    }

    #[test]
    fn encode_frame_is_length_prefix_plus_json() {
        let frame = encode_frame(&Response::Ok(Reply::Unit)).unwrap();
        assert_eq!(&frame[..4], &13u32.to_le_bytes());
        assert_eq!(&frame[4..], br#"{"Ok":"Unit"}"#);
    }

    #[test]
    fn bytes_travel_as_hex() {
        let json = serde_json::to_string(&Request::Write {
            ptr: DevicePtr(1),
            bytes: vec![0xab, 0x01],
        })
        .unwrap();
        assert!(json.contains("\"ab01\""), "{json}");
        assert_eq!(hex_bytes::decode("ABff").unwrap(), vec![0xab, 0xff]);
        assert!(hex_bytes::decode("abc").is_err());
        assert!(hex_bytes::decode("zz").is_err());
        let bad = br#"{"Write":{"ptr":1,"bytes":"0g"}}"#;
        assert!(matches!(
            decode::<Request>(bad),
            Err(ProtocolError::Json(_))
        ));
    }

    #[test]
    fn truncated_and_corrupt_frames_are_errors_not_panics() {
        let frame = encode_frame(&Request::DeviceCount).unwrap();
        // Every proper prefix: Eof for the empty one, Truncated otherwise.
        for cut in 0..frame.len() {
            let r = read_frame(&mut Cursor::new(&frame[..cut]));
            match cut {
                0 => assert!(matches!(r, Err(ProtocolError::Eof)), "cut {cut}: {r:?}"),
                _ => assert!(
                    matches!(r, Err(ProtocolError::Truncated(_))),
                    "cut {cut}: {r:?}"
                ),
            }
        }
        // A length beyond the limit is rejected before any allocation.
        let mut huge = (MAX_FRAME_LEN + 1).to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(matches!(
            read_frame(&mut Cursor::new(huge)),
            Err(ProtocolError::TooLarge(_))
        ));
        // A lying length with little data is Truncated, not a huge buffer.
        let mut liar = (MAX_FRAME_LEN).to_le_bytes().to_vec();
        liar.extend_from_slice(b"{}");
        assert!(matches!(
            read_frame(&mut Cursor::new(liar)),
            Err(ProtocolError::Truncated(_))
        ));
        // Garbage payloads: the frame is fine, the JSON is not.
        for garbage in [
            &b"\xff\xfe"[..],
            b"{}",
            b"[1,2]",
            b"\"NoSuchRequest\"",
            b"null",
        ] {
            let mut buf = Vec::new();
            write_frame(&mut buf, garbage).unwrap();
            let r = read_message::<_, Request>(&mut Cursor::new(buf));
            assert!(matches!(r, Err(ProtocolError::Json(_))), "{r:?}");
        }
        // A handle of the wrong length.
        let short = br#"{"IpcOpenMemHandle":{"handle":[1,2,3],"flags":1,"out":"valid"}}"#;
        assert!(decode::<Request>(short).is_err());
    }

    #[test]
    fn socket_frames_round_trip_without_fds() {
        let (a, b) = UnixStream::pair().unwrap();
        for r in all_requests() {
            send_message(a.as_fd(), &r, &[]).unwrap();
        }
        for r in all_requests() {
            let (back, fds): (Request, _) = recv_message(b.as_fd()).unwrap();
            assert_eq!(back, r);
            assert!(fds.is_empty());
        }
        drop(a);
        assert!(matches!(
            recv_message::<Request>(b.as_fd()),
            Err(ProtocolError::Eof)
        ));
    }

    #[test]
    fn socket_eof_inside_a_frame_is_truncated() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let frame = encode_frame(&Request::DeviceCount).unwrap();
        a.write_all(&frame[..frame.len() - 2]).unwrap();
        drop(a);
        assert!(matches!(
            recv_frame(b.as_fd()),
            Err(ProtocolError::Truncated(_))
        ));
    }

    #[test]
    fn scm_rights_passes_a_file_descriptor() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("ipc-harness-fd-test-{}", std::process::id()));
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(b"passed through SCM_RIGHTS").unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        let (a, b) = UnixStream::pair().unwrap();
        // A message without fds before and after, to check boundaries.
        send_message(a.as_fd(), &Request::DeviceCount, &[]).unwrap();
        send_message(a.as_fd(), &Request::Probe, &[file.as_fd(), file.as_fd()]).unwrap();
        send_message(a.as_fd(), &Request::Exit, &[]).unwrap();
        drop(file);

        let (m1, f1): (Request, _) = recv_message(b.as_fd()).unwrap();
        assert_eq!((m1, f1.len()), (Request::DeviceCount, 0));
        let (m2, f2): (Request, _) = recv_message(b.as_fd()).unwrap();
        assert_eq!((m2, f2.len()), (Request::Probe, 2));
        let (m3, f3): (Request, _) = recv_message(b.as_fd()).unwrap();
        assert_eq!((m3, f3.len()), (Request::Exit, 0));

        let mut received = std::fs::File::from(f2.into_iter().next().unwrap());
        let mut text = String::new();
        received.read_to_string(&mut text).unwrap();
        assert_eq!(text, "passed through SCM_RIGHTS");
    }

    #[test]
    fn too_many_fds_are_refused_by_the_sender() {
        let (a, _b) = UnixStream::pair().unwrap();
        let fds: Vec<BorrowedFd<'_>> = (0..=MAX_FDS_PER_FRAME).map(|_| a.as_fd()).collect();
        assert!(matches!(
            send_message(a.as_fd(), &Request::Exit, &fds),
            Err(ProtocolError::TooManyFds)
        ));
    }

    #[test]
    fn send_to_a_closed_peer_is_an_error_not_sigpipe() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let r = send_message(a.as_fd(), &Request::Exit, &[]);
        assert!(matches!(r, Err(ProtocolError::Io(_))), "{r:?}");
    }

    #[test]
    fn call_requests_keep_their_wire_text() {
        // Requests travel as before the call table: raw numbers for
        // pointers, contexts, handles, descriptors and events; no braces
        // for calls without arguments.
        let cases = [
            (Request::DeviceCount, r#""DeviceCount""#),
            (Request::FdOpenNullDevice, r#""FdOpenNullDevice""#),
            (
                Request::SetCurrentContext {
                    ctx: ContextId(0xdead_beef),
                },
                r#"{"SetCurrentContext":{"ctx":3735928559}}"#,
            ),
            (
                Request::VmmUnmap {
                    va: DevicePtr(8),
                    size: 9,
                },
                r#"{"VmmUnmap":{"va":8,"size":9}}"#,
            ),
            (
                Request::Write {
                    ptr: DevicePtr(2),
                    bytes: vec![0, 1, 0xfe, 0xff],
                },
                r#"{"Write":{"ptr":2,"bytes":"0001feff"}}"#,
            ),
            (
                Request::VmmImport { fd: Fd(-1) },
                r#"{"VmmImport":{"fd":-1}}"#,
            ),
            (
                Request::EventElapsed {
                    start: EventId(13),
                    end: EventId(14),
                },
                r#"{"EventElapsed":{"start":13,"end":14}}"#,
            ),
            (
                Request::Free {
                    kind: FreeKind::StreamOrdered,
                    ptr: DevicePtr(5),
                },
                r#"{"Free":{"kind":"stream_ordered","ptr":5}}"#,
            ),
        ];
        for (request, text) in cases {
            assert_eq!(serde_json::to_string(&request).unwrap(), text);
            assert_eq!(decode::<Request>(text.as_bytes()).unwrap(), request);
        }
    }

    #[test]
    fn every_call_request_is_named_after_its_driver_method() {
        let mut seen = std::collections::HashSet::new();
        for r in all_requests() {
            match r.call_kind() {
                Some(kind) => {
                    assert_eq!(r.name(), kind.name());
                    assert!(seen.insert(kind), "{kind:?} twice");
                }
                None => assert!(CallKind::from_name(r.name()).is_none(), "{}", r.name()),
            }
        }
        assert_eq!(
            seen.len(),
            CallKind::ALL.len(),
            "all_requests misses a call"
        );
    }

    #[test]
    fn a_call_request_runs_on_a_driver_and_its_value_comes_back_in_the_reply() {
        let mut driver = crate::calls::MockDriver::new();
        driver
            .expect_write()
            .withf(|ptr, bytes| *ptr == DevicePtr(2) && bytes == [7, 8])
            .returning(|_, _| Ok(()));
        driver.expect_event_elapsed().returning(|_, _| Ok(2.5));
        driver
            .expect_address_range()
            .returning(|p| Ok((DevicePtr(p.0 - 16), 64)));
        driver.expect_current_context().returning(|| Ok(None));
        driver
            .expect_vmm_granularity()
            .returning(|_, _, _| Ok(2 << 20));
        let write = Request::Write {
            ptr: DevicePtr(2),
            bytes: vec![7, 8],
        };
        assert_eq!(write.call_on(&mut driver), Some(Ok(Reply::Unit)));
        let elapsed = Request::EventElapsed {
            start: EventId(1),
            end: EventId(2),
        };
        assert_eq!(
            elapsed.call_on(&mut driver),
            Some(Ok(Reply::ElapsedMs(2.5f32.to_bits())))
        );
        let range = Request::AddressRange { ptr: DevicePtr(48) };
        assert_eq!(
            range.call_on(&mut driver),
            Some(Ok(Reply::Range { base: 32, size: 64 }))
        );
        assert_eq!(
            Request::CurrentContext.call_on(&mut driver),
            Some(Ok(Reply::CurrentContext(None)))
        );
        let granularity = Request::VmmGranularity {
            device: 0,
            types: HandleTypes::POSIX_FD,
            kind: GranularityKind::Minimum,
        };
        let reply = granularity.call_on(&mut driver).unwrap().unwrap();
        assert_eq!(reply, Reply::Int(2 << 20));
        assert_eq!(u64::from_reply(reply), Ok(2 << 20));
        assert_eq!(Request::Reset.call_on(&mut driver), None);
        assert_eq!(
            EventId::from_reply(Reply::Unit),
            Err(Reply::Unit),
            "a reply of another type comes back as it was"
        );
    }

    #[test]
    fn large_frames_cross_the_socket_intact() {
        let (a, b) = UnixStream::pair().unwrap();
        let bytes: Vec<u8> = (0..(3 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        let msg = Request::Write {
            ptr: DevicePtr(1),
            bytes: bytes.clone(),
        };
        let sender = std::thread::spawn(move || send_message(a.as_fd(), &msg, &[]).unwrap());
        let (back, _): (Request, _) = recv_message(b.as_fd()).unwrap();
        sender.join().unwrap();
        assert_eq!(
            back,
            Request::Write {
                ptr: DevicePtr(1),
                bytes
            }
        );
    }
}
