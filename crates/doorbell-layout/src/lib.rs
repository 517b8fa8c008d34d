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

/// Declares a code-point enum whose unknown values survive as `Unknown(raw)`
/// (STYLE R4), with `From` both ways.
#[macro_export]
macro_rules! enum_with_unknown {
    (
        $(#[$enum_attr:meta])*
        pub enum $name:ident($ty:ty) {
            $( $(#[$variant_attr:meta])* $variant:ident = $value:expr ),+ $(,)?
        }
    ) => {
        $(#[$enum_attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$variant_attr])* $variant ),+,
            /// A value this crate does not name.
            Unknown($ty),
        }

        impl ::core::convert::From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant ),+,
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value ),+,
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}

#[inline]
pub(crate) fn be16(b: &[u8], f: Field) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[f]);
    u16::from_be_bytes(a)
}

#[inline]
pub(crate) fn be32(b: &[u8], f: Field) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    u32::from_be_bytes(a)
}

#[inline]
pub(crate) fn be64(b: &[u8], f: Field) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f]);
    u64::from_be_bytes(a)
}

#[inline]
pub(crate) fn set_be16(b: &mut [u8], f: Field, v: u16) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_be32(b: &mut [u8], f: Field, v: u32) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_be64(b: &mut [u8], f: Field, v: u64) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

/// Declares a fixed-length view type with the R1 constructors.
macro_rules! fixed_view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the structure in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer, checking that it holds the whole structure.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds the whole structure.
            pub fn check_len(&self) -> $crate::Result<()> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err($crate::Error)
                } else {
                    Ok(())
                }
            }

            /// Returns the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}
pub(crate) use fixed_view;
