//! The per-post counts equal DESIGN.md's table, as in live mode.

use doorbell_sim::{Op, PerPost, Workload};

use crate::cib;

fn per_post(w: Workload) -> PerPost {
    // A CQ deeper than the run, so that no consumer-index refresh is counted.
    let w = Workload {
        op: Op::Write,
        size: 8,
        iters: 256,
        tx_depth: 512,
        ..w
    };
    w.run(&cib()).unwrap().per_post
}

fn ops(p: &PerPost) -> (f64, f64, f64, f64, f64) {
    (
        p.mmio_writes,
        p.mmio_bytes,
        p.wqe_dma_reads,
        p.payload_dma_reads,
        p.cqe_dma_writes,
    )
}

#[test]
fn each_configuration_costs_what_the_table_says() {
    let base = Workload {
        blueflame: false,
        ..Workload::default()
    };
    assert_eq!(ops(&per_post(base.clone())), (1.0, 8.0, 1.0, 1.0, 1.0));
    assert_eq!(
        ops(&per_post(Workload {
            inline_threshold: 8,
            ..base.clone()
        })),
        (1.0, 8.0, 1.0, 0.0, 1.0)
    );
    assert_eq!(
        ops(&per_post(Workload {
            blueflame: true,
            ..base.clone()
        })),
        (1.0, 64.0, 0.0, 1.0, 1.0)
    );
    assert_eq!(
        ops(&per_post(Workload {
            blueflame: true,
            inline_threshold: 8,
            ..base.clone()
        })),
        (1.0, 64.0, 0.0, 0.0, 1.0)
    );
    assert_eq!(
        ops(&per_post(Workload {
            postlist: 16,
            ..base.clone()
        })),
        (1.0 / 16.0, 0.5, 1.0 / 16.0, 1.0, 1.0)
    );
    assert_eq!(
        ops(&per_post(Workload {
            signal_every: 16,
            ..base
        })),
        (1.0, 8.0, 1.0, 1.0, 1.0 / 16.0)
    );
}

#[test]
fn link_bytes_include_tlp_overheads() {
    // Baseline: an 8-byte doorbell MWr (8 + 24 B) and two 20-byte CplD
    // headers with 64 + 8 bytes of data come down; two MRd (24 B each) and
    // a 64-byte CQE MWr (64 + 24 B) go up.
    let p = per_post(Workload {
        blueflame: false,
        ..Workload::default()
    });
    assert_eq!(
        p.host_to_device_bytes,
        Some((8.0 + 24.0) + (64.0 + 20.0) + (8.0 + 20.0))
    );
    assert_eq!(p.device_to_host_bytes, Some(24.0 + 24.0 + (64.0 + 24.0)));
}
