//! Published hardware figures the profiles are calibrated to, with the
//! workloads that reproduce them (`tests/it/calibration.rs` checks each
//! against the simulator, within 10%), so that pictures can mark them
//! where a sweep runs the same workload.
//!
//! Sources: Kalia16 = A. Kalia, M. Kaminsky, D. G. Andersen, "Design
//! Guidelines for High Performance RDMA Systems", USENIX ATC 2016, on
//! Connect-IB behind a Haswell host.

use doorbell_hif::QpType;

use crate::{Op, Workload};

/// A published message rate and the workload it was measured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Its id in the reference table (`K11`, …).
    pub id: &'static str,
    /// Where it was published.
    pub source: &'static str,
    /// What it measures.
    pub what: &'static str,
    /// The built-in profile of the hardware it was measured on.
    pub profile: &'static str,
    /// The figure, millions of operations per second.
    pub mops: f64,
    /// The workload that reproduces it.
    pub workload: Workload,
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

/// Every published message rate with its workload.
pub fn figures() -> Vec<Published> {
    let p = |id, what, mops, workload| Published {
        id,
        source: "Kalia16",
        what,
        profile: "connectib-haswell",
        mops,
        workload,
    };
    vec![
        p(
            "K11",
            "peak UD SEND rate without batching (WQE by MMIO)",
            80.0,
            ud_send(16, 1),
        ),
        p(
            "K12",
            "peak UD SEND rate with doorbell batching, batch 16",
            101.6,
            ud_send(16, 16),
        ),
        p(
            "K28",
            "header-only UD SEND (one-cache-line WQE)",
            122.0,
            ud_send(0, 1),
        ),
        p(
            "K19",
            "outbound RDMA READ, not batched",
            88.0,
            Workload {
                op: Op::Read,
                size: 8,
                threads: 14,
                qps: 14,
                signal_every: 64,
                iters: 6_000,
                tx_depth: 256,
                ..Workload::default()
            },
        ),
    ]
}

/// What a sweep varies: the one field a published figure may differ in
/// from the sweep's workload and still be marked on its picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Varied {
    /// Message size.
    Size,
    /// Posting threads (and QPs with them).
    Threads,
    /// Nothing: the workload must match exactly.
    Nothing,
}

impl Published {
    /// Whether this figure was measured with `w` on `profile`, up to what
    /// `varied` lets differ (and the run's length and seed, which change no
    /// rate).
    pub fn applies_to(&self, profile: &str, w: &Workload, varied: Varied) -> bool {
        let f = &self.workload;
        let mut a = w.clone();
        a.iters = f.iters;
        a.seed = f.seed;
        a.tx_depth = f.tx_depth;
        match varied {
            Varied::Size => a.size = f.size,
            Varied::Threads => {
                a.threads = f.threads;
                a.qps = f.qps;
            }
            Varied::Nothing => {}
        }
        profile == self.profile && a == *f
    }
}
