//! The C probe (doorbell-cprobe) on rdma-core's `infiniband/mlx5dv.h`.

pub(crate) use doorbell_cprobe::{Print, Printed, Probe, c_array};

/// The header under test.
pub(crate) const HEADER: &str = "infiniband/mlx5dv.h";

/// An empty probe of [`HEADER`], built under this test's target directory.
pub(crate) fn probe() -> Probe {
    Probe::new(HEADER, env!("CARGO_TARGET_TMPDIR"))
}
