//! Integration tests of doorbell-layout (one binary, STYLE R15).
//!
//! `mlx5dv_header` compiles C against rdma-core's `infiniband/mlx5dv.h` and
//! needs a C compiler and that header: `scripts/setup.sh` installs both.

mod c_probe;
mod mlx5dv_header;
mod reference_doc;
