//! Vocabulary shared by every doorbell crate.
//!
//! Each identifier and address space is its own newtype (STYLE R10) so that a
//! queue number never stands in for a key, nor a host address for an offset in
//! a UAR page. Arithmetic goes through methods that say what they do on
//! overflow. Time is counted in picoseconds (STYLE R8): a byte on a PCIe Gen5
//! x16 link takes tens of picoseconds, and a `u64` of them lasts about 200 days.
#![no_std]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

use core::fmt;

/// Declares a code-point enum whose unknown values survive as `Unknown(raw)`
/// (STYLE R4), with `From` both ways. The formats crates (`doorbell-layout`,
/// `doorbell-wire`) declare their code points with it.
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

/// Declares a fixed-length view over any `T: AsRef<[u8]>` with the R1
/// constructors (`new_unchecked`, `new_checked`, `check_len`,
/// `into_inner`) and its length as `LEN`. `check_len` fails with `$err`
/// (of type `$err_ty`) when the buffer is shorter than `LEN`. The formats
/// crates (`doorbell-layout`, `doorbell-wire`) declare their fixed-size
/// views with it.
#[macro_export]
macro_rules! fixed_view {
    ($err_ty:ty = $err:expr; $(#[$m:meta])* $name:ident, $len:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of the view in bytes.
            pub const LEN: usize = $len;

            /// Wraps a buffer without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer, checking that it holds the whole view.
            pub fn new_checked(buffer: T) -> ::core::result::Result<Self, $err_ty> {
                let v = Self::new_unchecked(buffer);
                v.check_len()?;
                Ok(v)
            }

            /// Checks that the buffer holds all [`Self::LEN`] bytes.
            pub fn check_len(&self) -> ::core::result::Result<(), $err_ty> {
                if self.buffer.as_ref().len() < Self::LEN {
                    Err($err)
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

/// Big-endian fields of byte buffers, for the views of the formats crates.
///
/// Each function takes the field's byte range; a range outside the buffer
/// panics, so views call them only after their length check.
pub mod be {
    use core::ops::Range;

    /// Reads a 16-bit field.
    #[inline]
    pub fn be16(b: &[u8], f: Range<usize>) -> u16 {
        let mut a = [0u8; 2];
        a.copy_from_slice(&b[f]);
        u16::from_be_bytes(a)
    }

    /// Reads a 24-bit field (`f` is 3 bytes long).
    #[inline]
    pub fn be24(b: &[u8], f: Range<usize>) -> u32 {
        let mut a = [0u8; 4];
        a[1..].copy_from_slice(&b[f]);
        u32::from_be_bytes(a)
    }

    /// Reads a 32-bit field.
    #[inline]
    pub fn be32(b: &[u8], f: Range<usize>) -> u32 {
        let mut a = [0u8; 4];
        a.copy_from_slice(&b[f]);
        u32::from_be_bytes(a)
    }

    /// Reads a 64-bit field.
    #[inline]
    pub fn be64(b: &[u8], f: Range<usize>) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[f]);
        u64::from_be_bytes(a)
    }

    /// Writes a 16-bit field.
    #[inline]
    pub fn set_be16(b: &mut [u8], f: Range<usize>, v: u16) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Writes the low 24 bits of `v` (`f` is 3 bytes long).
    #[inline]
    pub fn set_be24(b: &mut [u8], f: Range<usize>, v: u32) {
        b[f].copy_from_slice(&v.to_be_bytes()[1..]);
    }

    /// Writes a 32-bit field.
    #[inline]
    pub fn set_be32(b: &mut [u8], f: Range<usize>, v: u32) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }

    /// Writes a 64-bit field.
    #[inline]
    pub fn set_be64(b: &mut [u8], f: Range<usize>, v: u64) {
        b[f].copy_from_slice(&v.to_be_bytes());
    }
}

macro_rules! id_newtype {
    ($(#[$m:meta])* $name:ident($inner:ty), $mask:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name($inner);

        impl $name {
            /// Largest representable value.
            pub const MAX: $inner = $mask;

            /// Wraps a raw value, keeping only the bits the field has.
            pub const fn new(raw: $inner) -> Self {
                Self(raw & $mask)
            }

            /// The raw value.
            pub const fn get(self) -> $inner {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}

id_newtype!(
    /// Queue pair number, 24 bits (IBTA Vol 1 §9.2, BTH DestQP).
    Qpn(u32),
    0x00ff_ffff
);
id_newtype!(
    /// Completion queue number, 24 bits.
    Cqn(u32),
    0x00ff_ffff
);
id_newtype!(
    /// Shared receive queue number, 24 bits (the CQE's `srqn`).
    Srqn(u32),
    0x00ff_ffff
);
id_newtype!(
    /// Protection domain number, 24 bits.
    Pdn(u32),
    0x00ff_ffff
);
id_newtype!(
    /// Event queue number, 8 bits (the EQ doorbell's top byte).
    Eqn(u32),
    0xff
);
id_newtype!(
    /// UAR index as the device numbers its 4 KiB UAR pages.
    UarIndex(u32),
    0x00ff_ffff
);

/// A memory key: `(mkey_index << 8) | variant` (mlx5 reference §9.2).
///
/// The same value serves as lkey and rkey of a plain memory region; [`Lkey`] and
/// [`Rkey`] keep the two roles apart in signatures.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Mkey(u32);

impl Mkey {
    /// The key reserved as the receive-scatter terminator (index 1, variant 0).
    pub const INVALID: Mkey = Mkey(0x100);

    /// Builds a key from its table index (24 bits) and variant byte.
    pub const fn from_parts(index: u32, variant: u8) -> Self {
        Self(((index & 0x00ff_ffff) << 8) | variant as u32)
    }

    /// Wraps a raw 32-bit key.
    pub const fn from_raw(raw: u32) -> Self {
        Self(raw)
    }

    /// The raw 32-bit key.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// The mkey table index (upper 24 bits).
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The variant byte (lower 8 bits); a stale key differs here.
    pub const fn variant(self) -> u8 {
        (self.0 & 0xff) as u8
    }
}

impl fmt::Debug for Mkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mkey({:#x})", self.0)
    }
}

/// A key used by the local side of a work request (scatter/gather entries).
pub type Lkey = Mkey;
/// A key named by a remote peer (RDMA and atomic requests).
pub type Rkey = Mkey;

/// Packet sequence number: 24 bits, arithmetic modulo 2^24 (IBTA Vol 1 §9.7).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// Bit mask of a PSN.
    pub const MASK: u32 = 0x00ff_ffff;

    /// Wraps a raw value, keeping the low 24 bits.
    pub const fn new(raw: u32) -> Self {
        Self(raw & Self::MASK)
    }

    /// The raw 24-bit value.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Self {
        Self::new(self.0.wrapping_add(n))
    }

    /// Signed distance `self - other` in the 24-bit circle, in -2^23..2^23.
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// True if `self` comes strictly before `other` in the 24-bit circle.
    pub const fn precedes(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
}

impl fmt::Debug for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Psn({})", self.0)
    }
}

/// An address in host memory as the device sees it (bus/DMA address).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HostAddr(u64);

impl HostAddr {
    /// Wraps a raw address.
    pub const fn new(raw: u64) -> Self {
        Self(raw)
    }

    /// The raw address.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// `self + off`, or `None` on overflow.
    pub const fn checked_add(self, off: u64) -> Option<Self> {
        match self.0.checked_add(off) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }

    /// The start of the aligned block of `align` bytes (a power of two) that
    /// holds `self`: the page of an address, for `align` = the page size.
    pub const fn align_down(self, align: u64) -> Self {
        Self(self.0 & !(align - 1))
    }

    /// Offset of `self` within an aligned block of `align` bytes (power of two).
    pub const fn offset_in(self, align: u64) -> u64 {
        self.0 & (align - 1)
    }
}

impl fmt::Debug for HostAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostAddr({:#x})", self.0)
    }
}

impl fmt::Display for HostAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A point in time, in picoseconds since the start of a run.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Instant(u64);

impl Instant {
    /// The start of a run.
    pub const ZERO: Instant = Instant(0);

    /// An instant `ps` picoseconds after the start.
    pub const fn from_ps(ps: u64) -> Self {
        Self(ps)
    }

    /// Picoseconds since the start.
    pub const fn as_ps(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of time.
    pub const fn add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(d.0))
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub const fn since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

/// A span of time in picoseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Duration(u64);

impl Duration {
    /// No time.
    pub const ZERO: Duration = Duration(0);

    /// `ps` picoseconds.
    pub const fn from_ps(ps: u64) -> Self {
        Self(ps)
    }

    /// `ns` nanoseconds.
    pub const fn from_ns(ns: u64) -> Self {
        Self(ns.saturating_mul(1_000))
    }

    /// `us` microseconds.
    pub const fn from_us(us: u64) -> Self {
        Self(us.saturating_mul(1_000_000))
    }

    /// The span in picoseconds.
    pub const fn as_ps(self) -> u64 {
        self.0
    }

    /// The span in (fractional) nanoseconds.
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / 1_000.0
    }

    /// `self + other`, saturating.
    pub const fn add(self, other: Duration) -> Self {
        Self(self.0.saturating_add(other.0))
    }

    /// `self × n`, saturating.
    pub const fn mul(self, n: u32) -> Self {
        Self(self.0.saturating_mul(n as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps_and_compares_across_zero() {
        let top = Psn::new(Psn::MASK);
        assert_eq!(top.add(1), Psn::new(0));
        assert!(top.precedes(Psn::new(0)));
        assert!(!Psn::new(0).precedes(top));
        assert_eq!(Psn::new(3).diff(top), 4);
        // More than 2^23 ahead counts as behind.
        assert!(Psn::new(0x80_0001).precedes(Psn::new(0)));
    }

    #[test]
    fn mkey_splits_into_index_and_variant() {
        let k = Mkey::from_parts(0x12345, 0x6a);
        assert_eq!(k.raw(), 0x0123_456a);
        assert_eq!(k.index(), 0x12345);
        assert_eq!(k.variant(), 0x6a);
        assert_eq!(Mkey::INVALID.index(), 1);
    }

    #[test]
    fn host_addresses_align_down_and_add_checked() {
        let a = HostAddr::new(0x1_2345);
        assert_eq!(a.align_down(4096), HostAddr::new(0x1_2000));
        assert_eq!(a.offset_in(4096), 0x345);
        assert_eq!(HostAddr::new(u64::MAX).checked_add(1), None);
    }

    #[test]
    fn ids_keep_only_their_bits() {
        assert_eq!(Qpn::new(0xff12_3456).get(), 0x12_3456);
        assert_eq!(Cqn::MAX, 0xff_ffff);
        assert_eq!(Srqn::new(0x0100_0007), Srqn::new(7));
    }
}
