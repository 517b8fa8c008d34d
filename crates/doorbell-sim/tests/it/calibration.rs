//! The connectib-haswell profile against Kalia16's published figures, and
//! the link against Neugebauer18's DMA read latency. Each must be within 10%.

use doorbell_sim::{Workload, published};

use crate::cib;

fn within(got: f64, want: f64, what: &str) {
    let err = (got - want).abs() / want;
    assert!(
        err <= 0.10,
        "{what}: simulated {got:.1}, published {want}, off by {:.1}%",
        err * 100.0
    );
}

/// The simulated rate of the published figure `id`, from the table the
/// pictures mark it with.
fn check(id: &str) {
    let f = published::figures()
        .into_iter()
        .find(|f| f.id == id)
        .unwrap();
    assert_eq!(f.profile, "connectib-haswell");
    within(f.workload.run(&cib()).unwrap().msg_rate_mops, f.mops, id);
}

#[test]
fn k11_ud_send_without_batching() {
    // WQE by BlueFlame: ctrl + datagram + 16 B inline = 2 cache lines.
    check("K11");
}

#[test]
fn k12_ud_send_with_doorbell_batching() {
    check("K12");
}

#[test]
fn k28_header_only_ud_send() {
    // A header-only UD WQE is one cache line.
    check("K28");
}

#[test]
fn k19_outbound_read() {
    check("K19");
}

#[test]
fn every_published_figure_is_checked() {
    let ids: Vec<&str> = published::figures().iter().map(|f| f.id).collect();
    assert_eq!(ids, ["K11", "K12", "K28", "K19"]);
}

#[test]
fn p1_a_64_byte_dma_read() {
    // One unloaded WRITE by doorbell: step 2 is the NIC's 64-byte WQE read.
    let w = Workload {
        blueflame: false,
        iters: 1,
        ..Workload::default()
    };
    let steps = w.run(&cib()).unwrap().steps;
    within(steps.wqe_dma_read, 547.0, "P1");
}

#[test]
fn long_messages_stream_at_the_links_rate() {
    // A long WRITE or READ is many MTUs of payload that the NIC reads as it
    // goes: its bandwidth stays at what 16 KiB messages reach, instead of
    // falling with the DMA read curve's slope past its last point.
    for op in [doorbell_sim::Op::Write, doorbell_sim::Op::Read] {
        let bw = |size: u32, iters: u64| {
            Workload {
                op,
                size,
                iters,
                mtu: 4096,
                ..Workload::default()
            }
            .run(&cib())
            .unwrap_or_else(|e| panic!("{op:?} of {size} B: {e}"))
            .bandwidth_gbps
        };
        let (mid, long) = (bw(16384, 64), bw(1 << 20, 8));
        assert!(
            long > 0.9 * mid,
            "{op:?}: 1 MiB at {long} Gb/s, 16 KiB at {mid} Gb/s"
        );
    }
}
