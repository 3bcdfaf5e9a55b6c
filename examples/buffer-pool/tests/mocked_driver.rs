//! A consumer's error handling against a mockall `MockDriver`: the third
//! open fails with TooManyPeers, exactly there, whatever the driver below.
//! The owner is a stand-in that only sends messages, so its mock expects
//! no calls at all.

use ipc_example_buffer_pool::{consumer_role, pattern, Offer, ToConsumer, ToOwner, Variant};
use ipc_harness::roles::{RoleSet, RunOptions};
use ipc_harness::{ApiError, DevicePtr, Driver, DriverError, ErrorKind, MockDriver};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

const BUFFERS: u32 = 4;

fn handle_for(id: u32) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[0] = id as u8 + 1;
    h
}

#[test]
fn too_many_peers_on_the_third_open_is_refused_and_the_rest_released() {
    let roles = RoleSet::new()
        .role("owner", 0, |ctx| {
            for id in 0..BUFFERS {
                let offer = Offer {
                    id,
                    handle: handle_for(id),
                    offset: 0,
                    len: 4096,
                };
                ctx.send_json("consumer", &ToConsumer::Offer(offer))?;
            }
            ctx.send_json("consumer", &ToConsumer::Done)?;
            let mut released = Vec::new();
            for _ in 0..BUFFERS {
                let ToOwner::Released { id, .. } = ctx.recv_json_from("consumer")?;
                released.push(id);
            }
            released.sort();
            Ok(serde_json::json!(released))
        })
        .role("consumer", 0, |ctx| consumer_role(ctx, Variant::Correct));

    let closes = Arc::new(AtomicU32::new(0));
    let closes_seen = Arc::clone(&closes);
    let report = roles
        .run_with_drivers(&RunOptions::seeded(9), move |index, _spec| {
            let mut mock = MockDriver::new();
            mock.expect_dialect()
                .return_const(ipc_harness::Dialect::Runtime);
            if index == 1 {
                let opens = AtomicU32::new(0);
                mock.expect_ipc_open_mem_handle()
                    .times(BUFFERS as usize)
                    .returning(
                        move |h, _, _| match opens.fetch_add(1, Ordering::SeqCst) + 1 {
                            3 => Err(DriverError::Api(ApiError::new(
                                ipc_harness::Dialect::Runtime,
                                ErrorKind::TooManyPeers,
                            ))),
                            _ => Ok(DevicePtr(0x7000_0000 + u64::from(h.0[0]) * 0x20_0000)),
                        },
                    );
                mock.expect_address_range().returning(|p| Ok((p, 4096)));
                mock.expect_read().returning(|p, len| {
                    let id = ((p.0 - 0x7000_0000) / 0x20_0000) as u32 - 1;
                    Ok(vec![pattern(id); len as usize])
                });
                let closes = Arc::clone(&closes_seen);
                mock.expect_ipc_close_mem_handle().returning(move |_| {
                    closes.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                });
            }
            Box::new(mock) as Box<dyn Driver + Send>
        })
        .unwrap();

    assert!(report.all_ok(), "{report}");
    let consumer = report.outcome("consumer").and_then(|o| o.value()).unwrap();
    assert_eq!(consumer["refused"], 1, "{report}");
    assert_eq!(consumer["still_mapped"], 0, "{report}");
    // Every buffer is released to the owner, the refused one included, and
    // exactly the three mappings that opened are closed.
    assert_eq!(
        report.outcome("owner").and_then(|o| o.value()),
        Some(&serde_json::json!([0, 1, 2, 3]))
    );
    assert_eq!(closes.load(Ordering::SeqCst), 3);
    assert!(report.hazards.is_none(), "mocks keep no hazard log");
}
