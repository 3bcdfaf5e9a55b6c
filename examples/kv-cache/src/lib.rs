//! A KV-cache block handoff between two processes, the pattern inference
//! servers use to pass attention state from a prefill worker to a decode
//! worker, written against the harness's [`Driver`] trait so it runs on the
//! simulator and on a GPU.
//!
//! - The **producer** allocates a block, exports it with
//!   `cudaIpcGetMemHandle` and an interprocess event with
//!   `cudaIpcGetEventHandle`, writes the block with a kernel, records the
//!   event ("written") and tells the consumer; it frees the block only after
//!   the consumer acknowledges.
//! - The **consumer** opens the block and the event, waits on the event,
//!   reads, closes both and acknowledges. If it cannot open (the driver
//!   refuses, e.g. too many peers), it declines, and the producer frees.
//!   If the producer dies (a receive from it fails: it ended and sent
//!   nothing more), the consumer closes what it opened and returns
//!   [`PRODUCER_LOST`] instead of waiting forever.
//!
//! [`Variant`] selects the correct handoff or one of seven classic mistakes;
//! `tests/` shows `assert_clean` catching each, with a message that names
//! it. [`kv_roles`] is the whole protocol as a [`RoleSet`].

use ipc_harness::event_flags::{DISABLE_TIMING, INTERPROCESS};
use ipc_harness::roles::{fail, Message, RoleCtx, RoleResult, RoleSet};
use ipc_harness::stream_flags;
use ipc_harness::{FreeKind, MemKind, OutArg, IPC_MEM_LAZY_ENABLE_PEER_ACCESS};
use serde::{Deserialize, Serialize};

/// One block: a whole allocation granule, so a mapping of it reaches no
/// other allocation.
pub const BLOCK_SIZE: u64 = 2 << 20;
/// The bytes the producer's kernel writes, and their value.
pub const WRITTEN_LEN: u64 = 4096;
pub const WRITTEN_BYTE: u8 = 0x4b;
/// How long the producer's kernel runs (µs): long enough that a read not
/// ordered after it sees the old bytes on a GPU.
pub const KERNEL_MICROS: u64 = 200_000;

/// The correct handoff, or one deliberate mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variant {
    Correct,
    /// The producer frees the block right after recording the event,
    /// before the consumer acknowledged (it may still have it mapped).
    FreeBeforeConsumerClose,
    /// The consumer reads without waiting on the event: the kernel's bytes
    /// are not ordered before the read.
    NoEventWait,
    /// The consumer closes its mapping twice and ignores the second close's error.
    DoubleClose,
    /// The producer never frees the block (nor destroys its event).
    Leak,
    /// The consumer closes the pointer of the slot it read (base + offset)
    /// instead of the pointer the open returned, and ignores the error:
    /// the mapping stays open.
    IgnoredError,
    /// The consumer opens the block again from a second context it made
    /// for a worker thread; the driver refuses.
    OpenFromSecondContext,
    /// The producer launches its kernel on one stream of its own and
    /// records "written" on another: the event captures that other stream's
    /// (no) work, so the consumer's wait orders nothing before its read.
    RecordOnWrongStream,
}

impl Variant {
    pub const ALL: [Variant; 8] = [
        Variant::Correct,
        Variant::FreeBeforeConsumerClose,
        Variant::NoEventWait,
        Variant::DoubleClose,
        Variant::Leak,
        Variant::IgnoredError,
        Variant::OpenFromSecondContext,
        Variant::RecordOnWrongStream,
    ];
}

/// What the consumer returns when the producer died before the handoff
/// completed.
pub const PRODUCER_LOST: &str = "producer lost";

/// Consumer to producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Read and closed.
    Done,
    /// Could not open; nothing is mapped.
    Declined,
}

/// The producer: returns `"freed"` (or `"kept"` for [`Variant::Leak`]).
pub fn producer_role(ctx: &mut RoleCtx, variant: Variant) -> RoleResult {
    let block = ctx.driver().alloc(MemKind::Device, BLOCK_SIZE)?;
    let written = ctx.driver().event_create(INTERPROCESS | DISABLE_TIMING)?;
    let handle = ctx.driver().ipc_get_mem_handle(block, OutArg::Valid)?;
    let event_handle = ctx.driver().ipc_get_event_handle(written, OutArg::Valid)?;
    ctx.send("consumer", Message::handle(handle))?;
    ctx.send("consumer", Message::event_handle(event_handle))?;
    // The kernel that fills the block, then "written" on the same stream.
    let streams = if variant == Variant::RecordOnWrongStream {
        // The kernel on one stream, the record on another: the mistake.
        let kernel_on = ctx.driver().stream_create(stream_flags::NON_BLOCKING)?;
        let record_on = ctx.driver().stream_create(stream_flags::NON_BLOCKING)?;
        ctx.driver()
            .slow_fill_on(block, WRITTEN_BYTE, WRITTEN_LEN, KERNEL_MICROS, kernel_on)?;
        ctx.driver().event_record_on(written, record_on)?;
        vec![kernel_on, record_on]
    } else {
        ctx.driver()
            .slow_fill(block, WRITTEN_BYTE, WRITTEN_LEN, KERNEL_MICROS)?;
        ctx.driver().event_record(written)?;
        Vec::new()
    };
    ctx.send_json("consumer", &"written")?;
    if variant == Variant::FreeBeforeConsumerClose {
        ctx.driver().free(FreeKind::Device, block)?;
        ctx.driver().event_destroy(written)?;
        ctx.recv_json_from::<Reply>("consumer")?;
        return Ok(serde_json::json!("freed"));
    }
    let _reply: Reply = ctx.recv_json_from("consumer")?;
    // Done with the block: the producer's own streams finish.
    for s in streams {
        ctx.driver().stream_synchronize(s)?;
        ctx.driver().stream_destroy(s)?;
    }
    if variant == Variant::Leak {
        return Ok(serde_json::json!("kept"));
    }
    ctx.driver().event_destroy(written)?;
    ctx.driver().free(FreeKind::Device, block)?;
    Ok(serde_json::json!("freed"))
}

/// The consumer: returns the first byte it read, `"declined"`, or
/// [`PRODUCER_LOST`].
pub fn consumer_role(ctx: &mut RoleCtx, variant: Variant) -> RoleResult {
    let Ok(handle) = ctx.recv_from("producer") else {
        return Ok(serde_json::json!(PRODUCER_LOST));
    };
    let handle = handle
        .as_handle()
        .ok_or_else(|| fail("the producer sent no memory handle"))?;
    let Ok(event_handle) = ctx.recv_from("producer") else {
        return Ok(serde_json::json!(PRODUCER_LOST));
    };
    let event_handle = event_handle
        .as_event_handle()
        .ok_or_else(|| fail("the producer sent no event handle"))?;
    let ptr = match ctx.driver().ipc_open_mem_handle(
        handle,
        IPC_MEM_LAZY_ENABLE_PEER_ACCESS,
        OutArg::Valid,
    ) {
        Ok(ptr) => ptr,
        Err(_) => return decline(ctx),
    };
    let written = match ctx
        .driver()
        .ipc_open_event_handle(event_handle, OutArg::Valid)
    {
        Ok(e) => e,
        Err(_) => {
            ctx.driver().ipc_close_mem_handle(ptr)?;
            return decline(ctx);
        }
    };
    if ctx.recv_json_from::<String>("producer").is_err() {
        // The producer died before the block was written: release both.
        ctx.driver().event_destroy(written)?;
        ctx.driver().ipc_close_mem_handle(ptr)?;
        return Ok(serde_json::json!(PRODUCER_LOST));
    }
    if variant == Variant::OpenFromSecondContext {
        // A worker thread with its own context opens the block again.
        ctx.driver().create_context(0)?;
        ctx.driver()
            .ipc_open_mem_handle(handle, IPC_MEM_LAZY_ENABLE_PEER_ACCESS, OutArg::Valid)?;
    }
    if variant != Variant::NoEventWait {
        ctx.driver().event_synchronize(written)?;
    }
    let bytes = ctx.driver().read(ptr, 16)?;
    ctx.driver().event_destroy(written)?;
    if variant == Variant::IgnoredError {
        let _ = ctx.driver().ipc_close_mem_handle(ptr.offset(WRITTEN_LEN));
    } else {
        ctx.driver().ipc_close_mem_handle(ptr)?;
    }
    if variant == Variant::DoubleClose {
        let _ = ctx.driver().ipc_close_mem_handle(ptr);
    }
    ctx.send_json("producer", &Reply::Done)?;
    Ok(serde_json::json!(bytes.first().copied()))
}

/// Declines once the producer said "written": it still sends that, and a
/// consumer that ended before could not receive it.
fn decline(ctx: &mut RoleCtx) -> RoleResult {
    if ctx.recv_json_from::<String>("producer").is_err() {
        return Ok(serde_json::json!(PRODUCER_LOST));
    }
    ctx.send_json("producer", &Reply::Declined)?;
    Ok(serde_json::json!("declined"))
}

/// The handoff as two roles on device 0.
pub fn kv_roles(variant: Variant) -> RoleSet {
    RoleSet::new()
        .role("producer", 0, move |ctx| producer_role(ctx, variant))
        .role("consumer", 0, move |ctx| consumer_role(ctx, variant))
}
