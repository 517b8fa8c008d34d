//! The InfiniBand Communication Manager (CM) on the wire, byte for byte.
//!
//! Two RDMA hosts that use `rdma_cm` (librdmacm, the kernel's `ib_cm`) set up
//! a reliable connection by exchanging CM messages: management datagrams
//! (MADs) sent on the General Services Interface, UD QP 1 with Q_Key
//! [`GSI_QKEY`]. On RoCEv2 each is one UD SEND Only packet carrying the
//! 256-byte MAD. This crate has the formats (IBTA Vol 1 §13.4 for the MAD,
//! §12.6 for the CM messages, annex A11 for the IP CM Service header that
//! `rdma_cm` puts in the private data); the connection state machine is a
//! job for a crate above it.
//!
//! * [`mad`]: the 24-byte common MAD header ([`MadHeader`], [`MadRepr`]) and
//!   the GSI constants.
//! * One module per CM message, each a view over the 232-byte MAD data area
//!   and a repr: [`req`] (REQ, with its [`path`]s), [`mra`], [`rej`],
//!   [`rep`], [`rtu`], [`dreq`], [`drep`], [`sidr`] (SIDR_REQ and SIDR_REP).
//! * [`cm`]: a whole CM MAD ([`CmMad`]): header and message together, parsed
//!   by attribute ID into a [`CmMessage`].
//! * [`ip_cm`]: rdma_cm's private-data header ([`CmaHeaderRepr`]) and the
//!   service IDs of its port spaces ([`service_id`]).
//!
//! # Model
//! As in `doorbell-wire` (STYLE R1–R5): a *view* (`XxxMsg<T: AsRef<[u8]>>`)
//! wraps a buffer and reads or writes each field in place, passing every
//! value through; a *repr* (`XxxRepr`) is a plain value whose `parse`
//! rejects what the format does not allow and whose `emit` writes every byte
//! of the message, reserved bits as zero. Field offsets live in one
//! `mod field` per message and count from the start of the MAD data area,
//! exactly as the spec's tables (and the kernel's `ibta_vol1_c12.h`) do: add
//! [`mad::HEADER_LEN`] for an offset into the MAD. Fields narrower than a
//! byte are [`Bits`] (byte, shift, width); all multi-byte fields are
//! big-endian.
//!
//! # Guarantees
//! * **No panics after `check_len`.** `new_checked` (or `check_len`) checks
//!   that the buffer holds the whole view; after that no getter or setter
//!   panics. Every `parse`, and [`CmMad::parse`] on any input, calls it.
//! * **`emit` needs `buffer_len()` bytes** and panics on a shorter buffer;
//!   [`CmMad::emit`] instead checks and returns [`Error::Truncated`].
//! * Nothing allocates; the crate is `#![no_std]`.
//!
//! # Example
//! ```
//! use doorbell_cm::{CmMad, CmMessage, DrepRepr, MAD_LEN};
//!
//! let mad = CmMad::new(0x1122_3344_5566_7788, CmMessage::Drep(DrepRepr {
//!     local_comm_id: 7,
//!     remote_comm_id: 9,
//!     private_data: [0; doorbell_cm::drep::PRIVATE_DATA_LEN],
//! }));
//! let mut buf = [0u8; MAD_LEN];
//! mad.emit(&mut buf).unwrap();
//! assert_eq!(&buf[16..18], &[0x00, 0x16]); // attribute ID: DREP
//! assert_eq!(CmMad::parse(&buf), Ok(mad));
//! ```
#![no_std]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

#[cfg(test)]
extern crate std;

pub mod cm;
pub mod drep;
pub mod dreq;
pub mod ip_cm;
pub mod mad;
pub mod mra;
pub mod path;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr;

pub use cm::{CmMad, CmMessage};
pub use drep::{DrepMsg, DrepRepr};
pub use dreq::{DreqMsg, DreqRepr};
pub use ip_cm::{CmaAddrs, CmaHeader, CmaHeaderRepr, PortSpace, service_id, service_id_parts};
pub use mad::{
    CmAttribute, DEFAULT_PKEY, GSI_QKEY, GSI_QPN, MAD_DATA_LEN, MAD_LEN, MadHeader, MadRepr, Method,
};
pub use mra::{MraMsg, MraRepr};
pub use path::{PathInfo, PathRepr};
pub use rej::{MsgResponse, RejMsg, RejRepr, RejectReason};
pub use rep::{RepMsg, RepRepr};
pub use req::{ReqMsg, ReqRepr, TransportServiceType};
pub use rtu::{RtuMsg, RtuRepr};
pub use sidr::{SidrRepMsg, SidrRepRepr, SidrReqMsg, SidrReqRepr, SidrStatus};

/// Why a buffer could not be parsed as a CM MAD, or a MAD not built.
///
/// None is fatal to anything: a receiver drops the MAD (the CM answers some
/// with a REJ, which is the caller's decision), a sender passed too small a
/// buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The buffer is shorter than the MAD or the view.
    #[error("buffer too short for the MAD")]
    Truncated,
    /// Base version, management class or class version is not the CM's
    /// (1, 0x07, 2).
    #[error(
        "not a CM MAD (base version {base_version}, class {mgmt_class:#04x}, class version {class_version})"
    )]
    NotCm {
        /// The MAD's base version.
        base_version: u8,
        /// The MAD's management class.
        mgmt_class: u8,
        /// The MAD's class version.
        class_version: u8,
    },
    /// The attribute ID is not one of the CM messages this crate knows.
    #[error("unknown CM attribute ID {0:#06x}")]
    UnknownAttribute(u16),
    /// A field holds a value the format does not allow (a reserved code
    /// point, an IP version other than 4 or 6, a length past its area).
    #[error("malformed CM message")]
    Malformed,
}

/// Result of parsing or emitting.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range inside a message.
pub type Field = core::ops::Range<usize>;

/// A field narrower than a byte: `width` bits of byte `byte`, starting
/// `shift` bits above bit 0. The spec's `Byte[Bit]` notation counts bits
/// from the most significant one: spec bit `b` of width `w` has
/// `shift = 8 - b - w`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits {
    /// Byte offset.
    pub byte: usize,
    /// Position of the field's lowest bit.
    pub shift: u32,
    /// Width in bits (1–8).
    pub width: u32,
}

impl Bits {
    /// `width` bits at `shift` in byte `byte`.
    pub const fn new(byte: usize, shift: u32, width: u32) -> Self {
        Self { byte, shift, width }
    }

    /// The field's largest value: its mask before shifting.
    pub const fn max(self) -> u8 {
        ((1u16 << self.width) - 1) as u8
    }

    /// Reads the field from a buffer that holds byte `self.byte`.
    pub fn get(self, b: &[u8]) -> u8 {
        (b[self.byte] >> self.shift) & self.max()
    }

    /// Writes the low `width` bits of `v`, leaving the byte's other bits.
    pub fn set(self, b: &mut [u8], v: u8) {
        let m = self.max() << self.shift;
        b[self.byte] = (b[self.byte] & !m) | ((v << self.shift) & m);
    }
}

pub(crate) use doorbell_types::be::{
    be16, be24, be32, be64, set_be16, set_be24, set_be32, set_be64,
};
pub(crate) use doorbell_types::enum_with_unknown;

/// Declares a fixed-length view with the R1 constructors.
macro_rules! fixed_view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        doorbell_types::fixed_view!($crate::Error = $crate::Error::Truncated; $(#[$m])* $name, $len);
    };
}
pub(crate) use fixed_view;

/// Copies a fixed-length byte area out of a buffer holding it.
pub(crate) fn array<const N: usize>(b: &[u8], f: Field) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[f]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_follow_the_spec_numbering() {
        // Spec Byte[Bit] 43[5], 2 bits wide: mask 0x06.
        let f = Bits::new(0, 8 - 5 - 2, 2);
        let mut b = [0xffu8];
        f.set(&mut b, 0);
        assert_eq!(b, [0xf9]);
        f.set(&mut b, 0xff); // only the low 2 bits are written
        assert_eq!(b, [0xff]);
        assert_eq!(Bits::new(0, 0, 8).max(), 0xff);
        assert_eq!(Bits::new(0, 3, 5).get(&[0b1010_1111]), 0b10101);
    }
}
