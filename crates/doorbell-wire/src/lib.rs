//! RoCEv2 on the wire, byte for byte.
//!
//! Every header a RoCEv2 packet can carry has a view and a repr here (STYLE R1):
//! the optional Ethernet II header ([`ethernet`]), IPv4 ([`ipv4`]) and IPv6
//! ([`ipv6`]), UDP ([`udp`]), the InfiniBand Base Transport Header ([`bth`]) and
//! its extension headers ([`reth`], [`aeth`], [`immdt`], [`ieth`],
//! [`atomic_eth`], [`atomic_ack_eth`], [`deth`]), plus the invariant CRC
//! ([`icrc`](mod@icrc)) and the GID ↔ IP mapping ([`gid`]). [`roce`] puts them together:
//! [`RoceRepr::emit`] builds a whole `IP | UDP | BTH | ext | payload | pad | ICRC`
//! frame into a caller's buffer and [`parse_roce`] takes one apart again.
//! Layouts follow the shared reference, Part A (`roce-and-verbs-abi.md`), which
//! summarises IBTA Vol 1 ch. 9 and the RoCEv2 annex A17.
//!
//! # Model
//! * A *view* (`XxxHeader<T: AsRef<[u8]>>`) wraps any buffer (a received slice,
//!   a `Vec`, a slot of a transmit ring) and reads or writes fields in place.
//!   Views pass every value through, including code points this crate does not
//!   name (`Unknown(raw)`, STYLE R4).
//! * A *repr* (`XxxRepr`) is a plain value. `parse(&view)` validates and rejects
//!   what the format does not allow; `emit(&mut view)` writes every byte of the
//!   header, reserved bits included, so stale buffer contents never leak.
//! * Field offsets live in one `mod field` per header (STYLE R2); all multi-byte
//!   fields are big-endian, except the ICRC, which goes on the wire
//!   least-significant byte first.
//! * Frames handled by [`roce`] start at the IP header: the fabric carries IP
//!   packets, so no Ethernet header is needed. [`EthernetHeader`] is there for
//!   captures and tools.
//!
//! # Guarantees
//! * **No panics after `check_len`.** `new_checked` (or `check_len`) verifies
//!   the buffer holds the whole header; after that no getter or setter panics.
//!   `new_unchecked` skips the check, so it is only for buffers whose length the
//!   caller has just established. Every `Repr::parse` calls `check_len` itself.
//! * **`emit` needs `buffer_len()` bytes.** A repr's `emit` writes exactly
//!   `buffer_len()` bytes at the start of the view and panics if the buffer is
//!   shorter; never use `new_checked` on an *output* buffer (STYLE R3).
//!   [`RoceRepr::emit`] instead checks the frame buffer and returns
//!   [`Error::Truncated`].
//! * **[`parse_roce`] never panics**, whatever the input (property-tested), and
//!   it does not allocate. Building a frame allocates only through
//!   [`RoceRepr::emit_to_vec`].
//! * Errors are a small [`Error`] enum; the caller drops the packet and, for
//!   [`Error::BadIcrc`], counts it.
//!
//! # Example
//! ```
//! use doorbell_types::{Psn, Qpn, Rkey};
//! use doorbell_wire::{
//!     parse_roce, BthOpcode, BthRepr, ExtHeaders, RethRepr, RoceIp, RoceRepr,
//! };
//!
//! let repr = RoceRepr {
//!     ip: RoceIp::v4([192, 0, 2, 1], [192, 0, 2, 2]),
//!     src_port: 0xc001,
//!     bth: BthRepr::new(BthOpcode::RcRdmaWriteOnly, Qpn::new(0x11), Psn::new(7)),
//!     ext: ExtHeaders {
//!         reth: Some(RethRepr { va: 0x1000, rkey: Rkey::from_raw(0x2233), dma_len: 5 }),
//!         ..ExtHeaders::default()
//!     },
//! };
//! let mut frame = [0u8; 128];
//! let len = repr.emit(b"hello", &mut frame).unwrap();
//! assert_eq!(len, repr.frame_len(5)); // 20 IP + 8 UDP + 12 BTH + 16 RETH + 5 + 3 pad + 4 ICRC
//!
//! let parsed = parse_roce(&frame[..len]).unwrap();
//! assert_eq!(&frame[parsed.payload.clone()], b"hello");
//! assert_eq!(parsed.repr.bth.pad_count, 3);
//! assert_eq!(parsed.repr.ext, repr.ext);
//! ```
#![no_std]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod checksum;
pub mod deth;
pub mod ethernet;
pub mod ext;
pub mod gid;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ipv4;
pub mod ipv6;
pub mod reth;
pub mod roce;
pub mod udp;

pub use aeth::{AethHeader, AethRepr, AethSyndrome, NakCode};
pub use atomic_ack_eth::{AtomicAckEthHeader, AtomicAckEthRepr};
pub use atomic_eth::{AtomicEthHeader, AtomicEthRepr};
pub use bth::{BthHeader, BthOpcode, BthRepr, ext_bit};
pub use deth::{DethHeader, DethRepr};
pub use ethernet::{EtherType, EthernetHeader, EthernetRepr};
pub use ext::ExtHeaders;
pub use gid::Gid;
pub use icrc::{
    icrc, icrc_datagram, icrc_datagram_pair, icrc_ipv4, icrc_ipv4_headers, icrc_ipv4_in_place,
    icrc_ipv4_in_place_pair, icrc_ipv6, icrc_ipv6_in_place,
};
pub use ieth::{IethHeader, IethRepr};
pub use immdt::{ImmDtHeader, ImmDtRepr};
pub use ipv4::{IpProtocol, Ipv4Header, Ipv4Repr};
pub use ipv6::{Ipv6Header, Ipv6Repr};
pub use reth::{RethHeader, RethRepr};
pub use roce::{
    ParsedRoce, ROCE_V2_UDP_PORT, RoceIp, RoceRepr, Seal, icrc_matches_in_place,
    icrc_matches_in_place_pair, packet_len, parse_roce, parse_roce_emitted,
    parse_roce_emitted_after, seal_roce, seal_roce_pair,
};
pub use udp::{UdpHeader, UdpRepr};

/// Why a buffer could not be parsed or a frame could not be built.
///
/// No variant is fatal to a QP, the device or the run: a receiver drops the
/// packet (counting [`Error::BadIcrc`] separately, as a NIC must) and a sender
/// has passed an inconsistent repr or too small a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The buffer is shorter than a header, or than a length field says.
    #[error("buffer too short for the header or the length it declares")]
    Truncated,
    /// The IP version nibble is not 4 or 6, or not the one the view expects.
    #[error("IP version is not 4 or 6")]
    BadIpVersion,
    /// The IPv4 header checksum does not verify.
    #[error("IPv4 header checksum mismatch")]
    BadIpChecksum,
    /// A legal but unsupported encoding: IPv4 options or an IPv4 fragment.
    #[error("unsupported IP encoding (options or fragment)")]
    Unsupported,
    /// The packet is not UDP to port 4791.
    #[error("not a RoCEv2 packet (not UDP to port 4791)")]
    NotRoce,
    /// The invariant CRC does not match the packet; a NIC counts these.
    #[error("ICRC mismatch")]
    BadIcrc,
    /// Lengths disagree, a reserved or unknown code point was used, or the
    /// extension headers do not fit the opcode.
    #[error("malformed packet or inconsistent repr")]
    Malformed,
}

/// Result of parsing or emitting.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range inside a header.
pub type Field = core::ops::Range<usize>;

pub(crate) use doorbell_types::enum_with_unknown;

/// Declares a fixed-length header view with the R1 constructors.
macro_rules! fixed_view {
    ($(#[$m:meta])* $name:ident, $len:expr) => {
        doorbell_types::fixed_view!($crate::Error = $crate::Error::Truncated; $(#[$m])* $name, $len);
    };
}
pub(crate) use fixed_view;

pub(crate) use doorbell_types::be::{
    be16, be24, be32, be64, set_be16, set_be24, set_be32, set_be64,
};
