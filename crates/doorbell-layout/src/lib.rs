//! The mlx5 host interface, byte for byte.
//!
//! Everything the provider and the device exchange through host memory or MMIO
//! has a view here: send WQE segments ([`wqe`]), receive WQEs, the 64-byte CQE
//! ([`cqe`]), doorbell records ([`dbr`]) and the UAR page with its doorbell and
//! BlueFlame registers ([`uar`]). Layouts follow rdma-core's public header
//! `infiniband/mlx5dv.h`; the integration test `mlx5dv_header` compiles a C
//! file against that header and compares every offset, size, bit and constant
//! used here.
//!
//! # Model
//! Views (`XxxSeg<T: AsRef<[u8]>>`) wrap any buffer: a slot of a mapped send
//! queue, a BlueFlame copy, a `Vec`. All multi-byte fields are big-endian.
//! Field offsets live in one `mod field` per view (STYLE R2).
//!
//! # No-panic contract
//! `new_checked` verifies the buffer is at least the view's length; after that
//! every getter and setter is panic-free. `new_unchecked` skips the check and a
//! short buffer then panics on access, so it is used only on buffers whose
//! length the caller has just established.
#![no_std]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod cqe;
pub mod dbr;
pub mod eqe;
pub mod uar;
pub mod wqe;

use core::fmt;

/// A buffer was too short for the view asked of it, or a field held a value
/// that the format does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed mlx5 structure")
    }
}

impl core::error::Error for Error {}

/// Result of parsing a view.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range inside a structure.
pub type Field = core::ops::Range<usize>;

pub(crate) use doorbell_types::be::{be16, be32, be64, set_be16, set_be32, set_be64};
/// Code-point enums with an `Unknown(raw)` arm (STYLE R4).
pub use doorbell_types::enum_with_unknown;

/// Declares a fixed-length view type with the R1 constructors.
macro_rules! fixed_view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        doorbell_types::fixed_view!($crate::Error = $crate::Error; $(#[$m])* $name, $len);
    };
}
pub(crate) use fixed_view;
