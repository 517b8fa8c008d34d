//! The shared-memory port: NICs of one host (here, of one process) find
//! each other through the rendezvous and move frames through rings; the
//! frames are the same RoCEv2 packets, so faults, ICRC checks and counters
//! act on them as on datagrams; a NIC that does not listen is reached over
//! UDP.

use doorbell_rt::NicOptions;
use doorbell_verbs::{RemoteAddr, WrOpcode};
use doorbell_wire::BthOpcode;

use crate::common::*;
use crate::net::*;

#[test]
fn nics_of_one_host_move_frames_through_shared_memory_not_the_socket() {
    // The first SEND is corrupted on its way out of A: B's ICRC check
    // drops it, A's ACK timer resends it, as over UDP.
    let t = Timers {
        mtu: 4096,
        ..Timers::default()
    };
    let p = udp_pair(
        [lo(50, 2), lo(50, 3)],
        [exact(corrupting_first_send()), exact(NicOptions::default())],
        caps(32),
        4 << 20,
        t,
    );
    send_through_a_corruption(&p);
    // Large WRITEs and READs: the rings wrap and fill many times over.
    let remote = |off: u64| RemoteAddr {
        addr: p.b.mr.addr() + off,
        rkey: p.b.mr.rkey(),
    };
    for (i, len) in [4097usize, 1 << 20, 2 << 20].into_iter().enumerate() {
        let data = pattern(len, 10 + i as u8);
        p.a.mr.write(0, &data).unwrap();
        let sge = [p.a.mr.sge(0, len as u32).unwrap()];
        post(&p.a.qp, signaled(2, &sge, WrOpcode::RdmaWrite(remote(0))));
        assert!(wait(&p.a.cq, 1)[0].is_ok(), "WRITE of {len}");
        let mut got = vec![0u8; len];
        p.b.mr.read(0, &mut got).unwrap();
        assert!(got == data, "WRITE of {len}: data differ");
        // And back by READ into another place of A's MR.
        let back = [p.a.mr.sge(len as u64, len as u32).unwrap()];
        post(&p.a.qp, signaled(3, &back, WrOpcode::RdmaRead(remote(0))));
        assert!(wait(&p.a.cq, 1)[0].is_ok(), "READ of {len}");
        let mut got = vec![0u8; len];
        p.a.mr.read(len as u64, &mut got).unwrap();
        assert!(got == data, "READ of {len}: data differ");
    }
    // Both NICs done: a ring's sender counts its frames after the batch,
    // and its receiver may have taken them already.
    let (a, b) = settled(&p);
    let (pa, pb) = (p.a.nic.port_counters(), p.b.nic.port_counters());
    assert_eq!((pa.shm_peers_out, pb.shm_peers_out), (1, 1), "{pa:?}");
    assert_eq!((pa.shm_peers_in, pb.shm_peers_in), (1, 1), "{pb:?}");
    // 3 MiB written, 4 KiB a packet; B sent as many READ responses.
    assert!(
        pa.shm_tx_frames > 768 && pb.shm_tx_frames > 768,
        "{pa:?} {pb:?}"
    );
    assert_eq!(pa.shm_tx_frames, pb.shm_rx_frames, "nothing lost in a ring");
    assert_eq!(pb.shm_tx_frames, pa.shm_rx_frames, "nothing lost in a ring");
    assert_eq!((pa.shm_rx_dropped, pb.shm_rx_dropped), (0, 0));
    assert_eq!((pa.shm_tx_full_drops, pb.shm_tx_full_drops), (0, 0));
    assert_eq!(
        (pa.tx_datagrams, pb.tx_datagrams),
        (0, 0),
        "the socket is idle"
    );
    assert_eq!(
        a.tx_packets, pa.shm_tx_frames,
        "every packet went by a ring"
    );
    assert_eq!(
        b.tx_packets, pb.shm_tx_frames,
        "every packet went by a ring"
    );
}

#[test]
fn a_nic_that_does_not_listen_is_reached_over_udp() {
    let p = udp_pair(
        [lo(51, 2), lo(51, 3)],
        [NicOptions::default(), udp_only()],
        caps(8),
        1 << 16,
        Timers::default(),
    );
    write_checked(&p, 3000, 4);
    // Both NICs done (the ACK's sender counts it after its send returns).
    settled(&p);
    let (pa, pb) = (p.a.nic.port_counters(), p.b.nic.port_counters());
    assert_eq!((pa.shm_peers_out, pa.shm_tx_frames), (0, 0), "{pa:?}");
    assert!(pa.tx_datagrams > 0 && pb.tx_datagrams > 0, "{pa:?} {pb:?}");
    assert_eq!(pa.rx_datagrams, pb.tx_datagrams);
}

/// RDMA WRITEs `len` bytes of a pattern from A's MR to the start of B's,
/// and checks that they arrived.
fn write_checked(p: &crate::common::Pair, len: usize, seed: u8) {
    let data = pattern(len, seed);
    p.a.mr.write(0, &data).unwrap();
    let sge = [p.a.mr.sge(0, len as u32).unwrap()];
    let remote = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    post(&p.a.qp, signaled(1, &sge, WrOpcode::RdmaWrite(remote)));
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let mut got = vec![0u8; len];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
}

/// A frame from `src` to `dst` for QP `qpn`, with a good ICRC.
fn frame(src: [u8; 4], dst: [u8; 4], qpn: u32) -> Vec<u8> {
    use doorbell_types::{Psn, Qpn};
    use doorbell_wire::{BthRepr, ExtHeaders, ROCE_V2_UDP_PORT, RoceIp, RoceRepr};
    let repr = RoceRepr {
        ip: RoceIp::v4(src, dst),
        src_port: ROCE_V2_UDP_PORT,
        bth: BthRepr::new(BthOpcode::RcSendOnly, Qpn::new(qpn), Psn::new(0)),
        ext: ExtHeaders::default(),
    };
    let mut f = Vec::new();
    repr.emit_to_vec(b"not yours", &mut f).unwrap();
    f
}

#[test]
fn a_peer_that_lies_or_scribbles_breaks_only_its_own_ring() {
    let p = udp_pair(
        [lo(52, 2), lo(52, 3)],
        Default::default(),
        caps(8),
        1 << 16,
        Timers::default(),
    );
    let (a_ip, b_ip, liar) = (lo(52, 2), lo(52, 3), lo(52, 9));
    write_checked(&p, 2000, 1);
    let b_qpn = p.b.qp.qpn().get();
    let mut peer = doorbell_rt::RawPeer::connect(liar, b_ip).expect("B admits a peer");
    // In A's name, to B's real QP: dropped before the NIC sees it.
    assert!(peer.send(&frame(a_ip, b_ip, b_qpn)));
    // In its own name: past the ring's check, to the NIC, as a datagram
    // from that address would be (what the QP does with a packet from
    // another address is the transport's business, as over UDP).
    assert!(peer.send(&frame(liar, b_ip, b_qpn)));
    let before = settled(&p).1;
    let pb = p.b.nic.port_counters();
    assert_eq!(pb.shm_rx_dropped, 1, "{pb:?}");
    assert_eq!(pb.shm_peers_in, 2, "A's ring and the liar's");
    // Now it breaks its ring: B drops that ring, and only that one.
    peer.scribble_tail(u64::MAX / 3);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while p.b.nic.port_counters().shm_rings_broken == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the broken ring stays"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    write_checked(&p, 2000, 2);
    let (_, after) = settled(&p);
    assert_eq!(after.rx_icrc_errors, before.rx_icrc_errors);
    let pb = p.b.nic.port_counters();
    assert_eq!(pb.shm_rings_broken, 1, "{pb:?}");
    assert_eq!(pb.tx_datagrams, 0, "A and B still talk through their rings");
}

/// A NIC that stops and starts again at its address (a process that
/// restarts) is reached through a new ring: its peer sees the old one
/// closed and connects again before its next frame.
#[test]
fn a_peer_that_comes_back_is_reached_through_a_new_ring() {
    use doorbell_rt::{LiveNic, Port};
    let (ip_a, ip_b) = (lo(53, 2), lo(53, 3));
    let t = Timers::default();
    let start = |name, ip| LiveNic::start_with(name, ip, Port::Udp, NicOptions::default()).unwrap();
    let a = side_on(start("back-a", ip_a), caps(8), 1 << 16, 64);
    let nic_a = a.nic.clone();
    let p = join(a, side_on(start("back-b", ip_b), caps(8), 1 << 16, 64), t);
    write_checked(&p, 3000, 1);
    let crate::common::Pair { a, b, .. } = p;
    drop(b);
    drop(a);
    let b = side_on(start("back-b2", ip_b), caps(8), 1 << 16, 64);
    let a = crate::common::host(
        nic_a.clone(),
        doorbell_verbs::ProviderConfig::default(),
        caps(8),
        1 << 16,
        64,
    );
    let p = join(a, b, t);
    let resent = nic_a.counters(None).1.tx_retransmits;
    write_checked(&p, 3000, 2);
    let pa = nic_a.port_counters();
    assert_eq!(pa.shm_peers_out, 2, "a second ring to the new NIC: {pa:?}");
    assert_eq!(pa.tx_datagrams, 0, "{pa:?}");
    // The first frame went to the new NIC, not into the old ring (where it
    // would have been lost and sent again after the ACK timeout).
    assert_eq!(nic_a.counters(None).1.tx_retransmits, resent);
}

/// A NIC that stops marks the rings to it closed, and its address's
/// rendezvous is gone once it has: a sender that asks again is refused at
/// once.
#[test]
fn a_nic_that_stops_closes_its_rings_and_its_rendezvous() {
    use doorbell_rt::{LiveNic, Port, RawPeer};
    let (ip, claim) = (lo(55, 2), lo(55, 9));
    let nic = LiveNic::start_with("stops", ip, Port::Udp, NicOptions::default()).unwrap();
    let peer = RawPeer::connect(claim, ip).expect("the NIC admits a peer");
    assert!(!peer.receiver_closed());
    drop(nic);
    assert!(peer.receiver_closed(), "the NIC marked its ring closed");
    let asked = std::time::Instant::now();
    assert!(
        RawPeer::connect(claim, ip).is_none(),
        "nobody listens there"
    );
    assert!(
        asked.elapsed() < std::time::Duration::from_millis(250),
        "refused at once, not after the handshake's timeout: {:?}",
        asked.elapsed()
    );
}

/// A peer makes its bell and may keep a copy of the read end it sends the
/// NIC, a file it then shares with the NIC: one that makes it blocking
/// and rings it must not hold the NIC's receiver thread in a read, nor,
/// through it, the NIC's stop.
#[test]
fn a_peer_that_makes_its_bell_blocking_holds_up_nothing() {
    use doorbell_rt::{LiveNic, Port, RawPeer};
    let (ip, claim) = (lo(74, 2), lo(74, 9));
    let nic = LiveNic::start_with("bell", ip, Port::Udp, NicOptions::default()).unwrap();
    let mut peer = RawPeer::connect(claim, ip).expect("the NIC admits a peer");
    peer.make_bell_blocking().unwrap();
    // Rung each time the receiver thread has parked again (it parks at
    // once with nothing to take).
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(peer.send(&[0u8; 64]), "room in the ring");
    }
    let (done, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(nic);
        let _ = done.send(());
    });
    assert!(
        stopped
            .recv_timeout(std::time::Duration::from_secs(10))
            .is_ok(),
        "the NIC did not stop: its receiver thread is stuck on the bell"
    );
}

/// What a peer put in its ring before it went away still reaches the NIC:
/// a process that sends its last frames (a DREQ at exit) and exits at once
/// must not have them dropped with its ring.
#[test]
fn frames_sent_just_before_a_peer_hangs_up_are_still_taken() {
    let p = udp_pair(
        [lo(54, 2), lo(54, 3)],
        Default::default(),
        caps(8),
        1 << 16,
        Timers::default(),
    );
    let (b_ip, gone) = (lo(54, 3), lo(54, 9));
    for round in 1..=5u64 {
        let mut peer = doorbell_rt::RawPeer::connect(gone, b_ip).expect("B admits a peer");
        // Let B's receiver park, so that the frame and the hang-up are
        // both waiting when it wakes.
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(peer.send(&frame(gone, b_ip, 0x7777)));
        drop(peer);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while p.b.nic.port_counters().shm_rx_frames < round {
            assert!(
                std::time::Instant::now() < deadline,
                "frame {round} of a peer that hung up was lost: {:?}",
                p.b.nic.port_counters()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// A peer that admits a ring and then takes nothing from it (a process
/// under SIGSTOP, or hung): its sender waits once for the full ring, then
/// drops what is for that peer at once until it moves, instead of waiting
/// again for every frame while its NIC's lock is held.
#[test]
fn a_receiver_that_stops_costs_its_sender_one_wait_not_one_per_frame() {
    use doorbell_types::{Psn, Qpn};
    use doorbell_verbs::{ProviderConfig, RcEndpoint};
    use std::sync::Arc;
    let (a_ip, stuck) = (lo(56, 2), lo(56, 9));
    let listener = doorbell_rt::RawListener::listen(stuck).expect("nobody listens there");
    let nic = doorbell_rt::LiveNic::start_with(
        "stuck-a",
        a_ip,
        doorbell_rt::Port::Udp,
        exact(NicOptions::default()),
    )
    .unwrap();
    let nic = Arc::new(nic);
    let t = Timers {
        mtu: 4096,
        ..Timers::default()
    };
    let mut gid = [0u8; 16];
    gid[10..12].copy_from_slice(&[0xff, 0xff]);
    gid[12..].copy_from_slice(&stuck);
    // Three QPs, each with its window of 128 packets of 4 KiB in flight:
    // more than the 1 MiB ring holds.
    let sides: Vec<_> = (0..3u32)
        .map(|i| {
            let s = host(nic.clone(), ProviderConfig::default(), caps(8), 1 << 20, 16);
            let local = RcEndpoint {
                gid: s.ctx.gid(),
                qpn: s.qp.qpn(),
                psn: Psn::new(0),
            };
            let remote = RcEndpoint {
                gid,
                qpn: Qpn::new(0x100 + i),
                psn: Psn::new(0),
            };
            connect(&s, &local, &remote, t);
            let sge = [s.mr.sge(0, 1 << 20).unwrap()];
            let to = RemoteAddr {
                addr: 0x10_0000,
                rkey: doorbell_types::Mkey::from_raw(0x42),
            };
            post(&s.qp, signaled(1, &sge, WrOpcode::RdmaWrite(to)));
            s
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let pc = loop {
        let pc = nic.port_counters();
        if pc.shm_tx_frames + pc.shm_tx_full_drops >= 3 * 128 {
            break pc;
        }
        assert!(std::time::Instant::now() < deadline, "{pc:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert_eq!(listener.admitted(), 1, "one ring, to the stopped peer");
    // The ring holds about 250 frames of 4 KiB; the rest of the windows
    // was dropped, after one wait.
    assert!(pc.shm_tx_frames > 200, "{pc:?}");
    assert!(pc.shm_tx_full_drops > 100, "{pc:?}");
    assert_eq!(pc.shm_tx_stalls, 1, "{pc:?}");
    assert_eq!(pc.tx_datagrams, 0, "{pc:?}");
    drop(sides);
}

/// A process that connects to a NIC's rendezvous and then says nothing
/// costs that NIC nothing but the handshake's own thread time: the
/// handshake (up to 100 ms of timeouts) runs without the rings' lock, so
/// frames from other peers are taken meanwhile.
#[test]
fn a_peer_that_stalls_its_handshake_holds_up_no_frame() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    const STALLS: u32 = 10;
    let (ip_a, ip_b) = (lo(72, 2), lo(72, 3));
    let p = udp_pair(
        [ip_a, ip_b],
        [NicOptions::default(), NicOptions::default()],
        caps(8),
        1 << 16,
        Timers::default(),
    );
    write_checked(&p, 64, 1);
    let [a, b, c, d] = ip_b;
    let name = format!("doorbell-roce/{a}.{b}.{c}.{d}");
    let at = SocketAddr::from_abstract_name(name).unwrap();
    let mut stalled = Vec::new();
    let start = std::time::Instant::now();
    for i in 0..STALLS {
        stalled.push(UnixStream::connect_addr(&at).unwrap());
        write_checked(&p, 64, i as u8 + 2);
    }
    let took = start.elapsed();
    // Holding the lock through each handshake's 100 ms timeout, B's
    // receiver thread kept each WRITE from B for that long: a second at
    // least for the ten.
    assert!(
        took < std::time::Duration::from_millis(700),
        "{STALLS} WRITEs, each after a stalled handshake, took {took:?}"
    );
    assert_eq!(p.b.nic.port_counters().shm_peers_in, 1, "none admitted");
}
