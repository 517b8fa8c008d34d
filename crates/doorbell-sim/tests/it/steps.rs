//! One unloaded post's critical path, step by step, against the same steps
//! worked out by hand from the profile's numbers: what each step is made of
//! (CPU costs, link serialisation, the host's read round trip, NIC costs,
//! the wire), with no use of the simulator's event flow. The simulated
//! steps come from one time line, so they always add up; this checks that
//! each lands where the profile says it should.

use doorbell_pcie::model::TlpKind;
use doorbell_sim::{Op, Profile, Workload};

fn ns_of_bytes(bytes: f64, gbps: f64) -> f64 {
    bytes * 8.0 / gbps
}

/// The steps of one 8-byte RDMA WRITE by pointer, rung by an 8-byte
/// doorbell (BlueFlame off), as the profile predicts them.
fn predicted(p: &Profile) -> [f64; 6] {
    let link = p.link_model().unwrap();
    let gbps = link.link.usable_gbps();
    let mwr = |len: u64| {
        ns_of_bytes(
            (len + u64::from(link.link.tlp_overhead_bytes(TlpKind::MWr))) as f64,
            gbps,
        ) + link.one_way_latency.as_ns_f64()
    };
    let round_trip = |len: u64| link.read_latency.at(len).as_ns_f64();
    let (cpu, nic, net) = (&p.cpu, &p.nic, &p.network);
    let frame = |ip_bytes: f64| {
        ns_of_bytes(
            ip_bytes + f64::from(net.frame_overhead_bytes),
            net.port_gbps,
        )
    };
    // IPv4 20 + UDP 8 + BTH 12, then RETH 16 + 8 bytes of payload, or an
    // AETH of 4; ICRC 4.
    let write = frame(20.0 + 8.0 + 12.0 + 16.0 + 8.0 + 4.0);
    let ack = frame(20.0 + 8.0 + 12.0 + 4.0 + 4.0);
    [
        // 0: control segment, remote-address and data segments, the
        //    doorbell record and its barriers.
        cpu.wqe_ctrl_ns + 2.0 * cpu.wqe_segment_ns + cpu.barrier_ns,
        // 1: the 8-byte store, and its MWr across the link.
        cpu.mmio_8b_ns + mwr(8),
        // 2: the NIC takes the doorbell, then reads the 64-byte WQEBB.
        nic.doorbell_ns + round_trip(64),
        // 3: the NIC parses the WQE, then reads the 8-byte payload.
        nic.wqe_ns + round_trip(8),
        // 4: the request leaves and crosses the wire; the responder takes
        //    it and sends the ACK back across.
        nic.tx_packet_ns
            + write
            + net.one_way_ns
            + nic.rx_packet_ns
            + nic.tx_packet_ns
            + ack
            + net.one_way_ns,
        // 5: the requester takes the ACK, writes the CQE, the poll finds it.
        nic.rx_packet_ns + nic.cqe_ns + mwr(64) + cpu.poll_cqe_ns,
    ]
}

fn check(profile: &str) {
    let p = Profile::builtin(profile).unwrap().unwrap();
    let w = Workload {
        op: Op::Write,
        size: 8,
        blueflame: false,
        inline_threshold: 0,
        iters: 64,
        ..Workload::default()
    };
    let s = w.run(&p).unwrap().steps;
    let got = [
        s.wqe_write,
        s.doorbell,
        s.wqe_dma_read,
        s.payload_dma_read,
        s.wire_and_ack,
        s.cqe_dma_write,
    ];
    let want = predicted(&p);
    assert!(
        (got[0] - want[0]).abs() < 0.01,
        "{profile}: step 0 is CPU work only: simulated {:.2} ns, profile {:.2} ns",
        got[0],
        want[0]
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate().skip(1) {
        let err = (g - w).abs() / w;
        assert!(
            err <= 0.05,
            "{profile}: step {i}: simulated {g:.1} ns, the profile predicts {w:.1} ns ({:.1}% off)\n\
             simulated {got:?}\npredicted {want:?}",
            err * 100.0
        );
    }
}

#[test]
fn each_step_of_one_post_is_what_the_connectib_profile_predicts() {
    check("connectib-haswell");
}

#[test]
fn each_step_of_one_post_is_what_the_connectx4_profile_predicts() {
    check("connectx4-thunderx2");
}
