//! The connectib-haswell profile against Kalia16's published figures, and
//! the link against Neugebauer18's DMA read latency. Each must be within 10%.

use doorbell_hif::QpType;
use doorbell_sim::{Op, Workload};

use crate::cib;

fn within(got: f64, want: f64, what: &str) {
    let err = (got - want).abs() / want;
    assert!(
        err <= 0.10,
        "{what}: simulated {got:.1}, published {want}, off by {:.1}%",
        err * 100.0
    );
}

/// Kalia16's UD SEND experiments: small inline SENDs from as many cores as
/// needed, selectively signalled.
fn ud_send(size: u32, postlist: u32) -> Workload {
    Workload {
        qp_type: QpType::Ud,
        op: Op::Send,
        size,
        threads: 14,
        qps: 14,
        postlist,
        inline_threshold: 64,
        signal_every: 64,
        blueflame: true,
        iters: 6_000,
        tx_depth: 256,
        ..Workload::default()
    }
}

#[test]
fn k11_ud_send_without_batching() {
    // WQE by BlueFlame: ctrl + datagram + 16 B inline = 2 cache lines.
    within(
        ud_send(16, 1).run(&cib()).unwrap().msg_rate_mops,
        80.0,
        "K11",
    );
}

#[test]
fn k12_ud_send_with_doorbell_batching() {
    within(
        ud_send(16, 16).run(&cib()).unwrap().msg_rate_mops,
        101.6,
        "K12",
    );
}

#[test]
fn k28_header_only_ud_send() {
    // A header-only UD WQE is one cache line.
    within(
        ud_send(0, 1).run(&cib()).unwrap().msg_rate_mops,
        122.0,
        "K28",
    );
}

#[test]
fn k19_outbound_read() {
    let w = Workload {
        op: Op::Read,
        size: 8,
        threads: 14,
        qps: 14,
        signal_every: 64,
        iters: 6_000,
        tx_depth: 256,
        ..Workload::default()
    };
    within(w.run(&cib()).unwrap().msg_rate_mops, 88.0, "K19");
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
