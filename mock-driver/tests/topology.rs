//! Several devices: the topology (which pairs peer, the per-device peer
//! budget), peer capability and peer access, and cross-device IPC opens.

mod common;

use common::*;
use ipc_harness::{Backend, Dialect, ErrorKind, MachineSpec, OutArg, StartError, Topology};
use ipc_mock_driver::{SimBackend, SimConfig};

/// `devices` devices under `topology`, processes `(name, device, visible)`.
fn machine_with(
    devices: u32,
    topology: Option<Topology>,
    procs: Vec<ipc_harness::ProcessSpec>,
    settings: &str,
) -> Box<dyn ipc_harness::Machine> {
    let spec = MachineSpec {
        devices,
        topology,
        ..spec(procs, 1, Dialect::Runtime)
    };
    let config = SimConfig {
        semantics: semantics(settings),
        ..SimConfig::default()
    };
    start_cfg(config, &spec)
}

fn pcie(devices: u32, budget: u32) -> Box<dyn ipc_harness::Machine> {
    machine_with(
        devices,
        Some(Topology {
            all_peers: true,
            peer_pairs: vec![],
            peer_budget: Some(budget),
        }),
        vec![proc_spec("a", 0, None), proc_spec("b", 0, None)],
        "",
    )
}

#[test]
fn the_default_machine_is_two_devices_that_peer_like_the_nvlink_h200_pair() {
    let mut m = machine_with(2, None, vec![proc_spec("a", 0, None)], "");
    let d = m.driver(0);
    assert_eq!(d.device_count().unwrap(), 2);
    assert_eq!(d.can_access_peer(0, 1).unwrap(), 1);
    assert_eq!(d.can_access_peer(1, 0).unwrap(), 1);
    assert_eq!(
        d.can_access_peer(0, 0).unwrap(),
        0,
        "a device is not its own peer"
    );
    assert_eq!(err(d.can_access_peer(0, 2)), ErrorKind::InvalidDevice);
    assert_eq!(err(d.can_access_peer(5, 0)), ErrorKind::InvalidDevice);
}

#[test]
fn enabling_peer_access_twice_or_to_oneself_is_an_error() {
    let mut m = machine_with(2, None, vec![proc_spec("a", 0, None)], "");
    let d = m.driver(0);
    d.enable_peer_access(1).unwrap();
    assert_eq!(
        err(d.enable_peer_access(1)),
        ErrorKind::PeerAccessAlreadyEnabled
    );
    // Measured on 2 x H200: oneself is PeerAccessUnsupported, not InvalidDevice.
    assert_eq!(
        err(d.enable_peer_access(0)),
        ErrorKind::PeerAccessUnsupported
    );
    assert_eq!(err(d.enable_peer_access(9)), ErrorKind::InvalidDevice);
    // Peer access belongs to the context: device 1's context starts without.
    d.set_device(1).unwrap();
    d.enable_peer_access(0).unwrap();
}

#[test]
fn without_peers_capability_is_zero_and_access_unsupported() {
    let mut m = machine_with(
        2,
        Some(Topology {
            all_peers: false,
            peer_pairs: vec![],
            peer_budget: None,
        }),
        vec![proc_spec("owner", 0, None), proc_spec("peer", 1, None)],
        "",
    );
    assert_eq!(m.driver(1).can_access_peer(1, 0).unwrap(), 0);
    assert_eq!(
        err(m.driver(1).enable_peer_access(0)),
        ErrorKind::PeerAccessUnsupported
    );
    let (_a, h) = export(m.as_mut(), 2 * MIB, 7);
    assert_eq!(
        err(open(m.as_mut(), 1, h)),
        ErrorKind::PeerAccessUnsupported
    );
}

#[test]
fn only_listed_pairs_peer_in_a_partial_topology() {
    // Two PCIe switches: 0-1 and 2-3 peer, nothing across.
    let mut m = machine_with(
        4,
        Some(Topology {
            all_peers: false,
            peer_pairs: vec![(0, 1), (2, 3)],
            peer_budget: None,
        }),
        vec![proc_spec("owner", 0, None), proc_spec("peer", 1, None)],
        "",
    );
    assert_eq!(m.driver(1).can_access_peer(1, 0).unwrap(), 1);
    assert_eq!(m.driver(1).can_access_peer(1, 2).unwrap(), 0);
    let (_a, h) = export(m.as_mut(), 2 * MIB, 3);
    let q = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(m.driver(1).read(q, 1).unwrap(), vec![3]);
    m.driver(1).set_device(2).unwrap();
    assert_eq!(
        err(open(m.as_mut(), 1, h)),
        ErrorKind::PeerAccessUnsupported
    );
}

#[test]
fn a_scenario_topology_builds_a_machine_of_its_own_size() {
    let mut m = pcie(10, 8);
    assert_eq!(m.driver(0).device_count().unwrap(), 10);
    // Without a topology the simulator keeps its own two devices.
    let spec = MachineSpec {
        devices: 10,
        ..spec(vec![proc_spec("a", 0, None)], 1, Dialect::Runtime)
    };
    match SimBackend::default().start(&spec) {
        Err(StartError::NotSupported(m)) => assert!(m.contains("needs 10 device(s)"), "{m}"),
        Err(other) => panic!("expected NotSupported, got {other:?}"),
        Ok(_) => panic!("expected NotSupported, got a machine"),
    }
}

#[test]
fn the_peer_budget_counts_distinct_partners_at_both_ends_system_wide() {
    let mut m = pcie(10, 8);
    for peer in 1..=8 {
        m.driver(0).enable_peer_access(peer).unwrap();
    }
    assert_eq!(
        err(m.driver(0).enable_peer_access(9)),
        ErrorKind::TooManyPeers
    );
    // Another process: device 0 is still full, whoever asks.
    m.driver(1).set_device(9).unwrap();
    assert_eq!(
        err(m.driver(1).enable_peer_access(0)),
        ErrorKind::TooManyPeers
    );
    // An existing connection costs nothing more.
    m.driver(1).set_device(1).unwrap();
    m.driver(1).enable_peer_access(0).unwrap();
    // Device 9 has budget left for partners other than device 0.
    m.driver(1).set_device(9).unwrap();
    m.driver(1).enable_peer_access(1).unwrap();
    // The holder exits: its connections go, and device 0 has room again.
    m.exit(0).unwrap();
    m.driver(1).enable_peer_access(0).unwrap();
}

#[test]
fn a_lazy_cross_device_open_needs_a_peer_connection() {
    let mut m = pcie(10, 1);
    let exporter = 0;
    m.driver(exporter).set_device(1).unwrap();
    let (_a1, h1) = export(m.as_mut(), 2 * MIB, 1);
    m.driver(exporter).set_device(2).unwrap();
    let (_a2, h2) = export(m.as_mut(), 2 * MIB, 2);
    // Process 1 on device 0: the first connection (0-1) fits the budget of 1.
    let p1 = open(m.as_mut(), 1, h1).unwrap();
    assert_eq!(err(open(m.as_mut(), 1, h2)), ErrorKind::TooManyPeers);
    assert_eq!(m.driver(1).read(p1, 1).unwrap(), vec![1]);
    // From device 2 itself no peer connection is needed.
    m.driver(1).set_device(2).unwrap();
    let p2 = open(m.as_mut(), 1, h2).unwrap();
    assert_eq!(m.driver(1).read(p2, 1).unwrap(), vec![2]);
}

#[test]
fn a_lazy_open_leaves_peer_access_disabled_unless_told_otherwise() {
    let specs = || vec![proc_spec("owner", 0, None), proc_spec("peer", 1, None)];
    for (settings, want) in [
        // Measured on 2 x H200: enable_peer after a lazy open succeeds.
        ("", None),
        (
            "lazy_peer_access=enables",
            Some(ErrorKind::PeerAccessAlreadyEnabled),
        ),
    ] {
        let mut m = machine_with(2, None, specs(), settings);
        let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
        open(m.as_mut(), 1, h).unwrap();
        let r = m.driver(1).enable_peer_access(0);
        assert_eq!(r.err().map(|e| err::<()>(Err(e))), want, "{settings}");
    }
}

#[test]
fn without_the_lazy_flag_a_cross_device_open_needs_enabled_access() {
    // Only reachable when flags 0 pass the flag check (not on the H100).
    let specs = vec![proc_spec("owner", 0, None), proc_spec("peer", 1, None)];
    let mut m = machine_with(2, None, specs, "open_flags=lazy-or-zero");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 1);
    let no_flags =
        |m: &mut dyn ipc_harness::Machine| m.driver(1).ipc_open_mem_handle(h, 0, OutArg::Valid);
    assert_eq!(err(no_flags(m.as_mut())), ErrorKind::PeerAccessNotEnabled);
    m.driver(1).enable_peer_access(0).unwrap();
    let p = no_flags(m.as_mut()).unwrap();
    assert_eq!(m.driver(1).read(p, 1).unwrap(), vec![1]);
}

#[test]
fn an_exporter_device_the_importer_cannot_see() {
    let specs = || {
        vec![
            proc_spec("owner", 0, Some(vec![0])),
            proc_spec("peer", 0, Some(vec![1])),
        ]
    };
    let mut m = machine_with(2, None, specs(), "");
    assert_eq!(m.driver(1).device_count().unwrap(), 1);
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0x6b);
    let q = open(m.as_mut(), 1, h).unwrap();
    assert_eq!(m.driver(1).device_read(q, 2).unwrap(), vec![0x6b; 2]);
    let mut m = machine_with(2, None, specs(), "hidden_exporter_device=InvalidDevice");
    let (_a, h) = export(m.as_mut(), 2 * MIB, 0x6b);
    assert_eq!(err(open(m.as_mut(), 1, h)), ErrorKind::InvalidDevice);
}

#[test]
fn two_mappings_of_one_handle_on_two_devices_share_bytes() {
    let specs = vec![proc_spec("owner", 0, None), proc_spec("peer", 1, None)];
    let mut m = machine_with(2, None, specs, "");
    let (a, h) = export(m.as_mut(), 2 * MIB, 0x11);
    let q = open(m.as_mut(), 1, h).unwrap();
    m.driver(1).set_device(0).unwrap();
    let p = open(m.as_mut(), 1, h).unwrap();
    assert_ne!(p, q);
    m.driver(1).write(p, &[0x77; 4]).unwrap();
    assert_eq!(m.driver(1).read(q, 4).unwrap(), vec![0x77; 4]);
    assert_eq!(m.driver(0).read(a, 4).unwrap(), vec![0x77; 4]);
}
