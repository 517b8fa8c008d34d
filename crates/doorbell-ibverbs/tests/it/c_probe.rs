//! The C probe (doorbell-cprobe) on rdma-core's `infiniband/verbs.h`.

pub(crate) use doorbell_cprobe::{Print, Probe};

/// An empty probe of `infiniband/verbs.h`, built under this test's target
/// directory.
pub(crate) fn probe() -> Probe {
    Probe::new("infiniband/verbs.h", env!("CARGO_TARGET_TMPDIR"))
}
