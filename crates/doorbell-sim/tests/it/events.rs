//! Completion events in the simulator: what they add to a post, on the bus
//! and in time, against the profile's numbers.

use doorbell_sim::{Op, Workload};

use crate::cib;

fn latency_mode(events: bool) -> Workload {
    Workload {
        op: Op::Write,
        size: 8,
        iters: 300,
        tx_depth: 1,
        events,
        ..Workload::default()
    }
}

#[test]
fn an_event_per_post_is_an_arm_an_eqe_an_interrupt_and_a_doorbell() {
    let p = cib();
    let polled = latency_mode(false).run(&p).unwrap();
    let evented = latency_mode(true).run(&p).unwrap();
    let (a, b) = (&polled.per_post, &evented.per_post);
    assert_eq!((a.eqe_dma_writes, a.interrupts), (0.0, 0.0));
    // One outstanding WRITE, so every completion is waited for: one arm,
    // one EQE, one MSI-X, and the handler's EQ doorbell per post.
    assert_eq!((b.eqe_dma_writes, b.interrupts), (1.0, 1.0));
    assert_eq!(b.mmio_writes - a.mmio_writes, 2.0, "CQ arm and EQ doorbell");
    assert_eq!(b.mmio_bytes - a.mmio_bytes, 8.0 + 4.0);
    assert_eq!(
        b.mwr_tlps - a.mwr_tlps,
        2.0 + 2.0,
        "two MMIO, the EQE, the MSI-X"
    );
    // The wait costs at least the handler and the wake-up on top.
    let added = evented.latency_ns.p50 - polled.latency_ns.p50;
    let floor = p.cpu.interrupt_ns + p.cpu.wakeup_ns;
    assert!(
        added >= floor && added < floor + 2_000.0,
        "events add {added} ns to a post; handler and wake-up are {floor} ns"
    );
}

#[test]
fn a_deep_queue_waits_less_often_than_it_posts() {
    let p = cib();
    let w = Workload {
        tx_depth: 64,
        signal_every: 16,
        iters: 4000,
        ..latency_mode(true)
    };
    let r = w.run(&p).unwrap();
    let pp = &r.per_post;
    assert!(
        pp.eqe_dma_writes > 0.0 && pp.eqe_dma_writes <= 1.0 / 16.0,
        "{pp:?}"
    );
    assert!(pp.interrupts <= pp.eqe_dma_writes, "{pp:?}");
}
