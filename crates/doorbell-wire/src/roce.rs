//! Whole RoCEv2 frames: `IP | UDP | BTH | ext | payload | pad | ICRC`
//! (reference A.1).
//!
//! [`RoceRepr`] describes everything but the payload bytes. It builds a frame
//! into a caller's buffer in one of two ways:
//!
//! * [`RoceRepr::emit`] copies the payload from a slice;
//! * [`RoceRepr::emit_in_place`] expects the payload to be in the frame at
//!   [`RoceRepr::payload_range`] already (a DMA engine put it there) and writes
//!   everything around it.
//!
//! Either way the pad count, lengths, IPv4 header checksum, ICRC and (for
//! IPv6) the UDP checksum are computed; over IPv4 the UDP checksum is 0, as
//! rxe sends it. [`parse_roce`] checks a received frame and returns the repr
//! and where the payload is.

use core::ops::Range;

use alloc::vec::Vec;

use crate::bth::{self, BthHeader, BthRepr};
use crate::ext::ExtHeaders;
use crate::gid::Gid;
use crate::icrc::{
    ICRC_LEN, icrc_ipv4, icrc_ipv4_in_place, icrc_ipv4_in_place_pair, icrc_ipv6, icrc_ipv6_in_place,
};
use crate::ipv4::{self, IpProtocol, Ipv4Header, Ipv4Repr};
use crate::ipv6::{self, Ipv6Header, Ipv6Repr};
use crate::udp::{self, UdpHeader, UdpRepr, udp_checksum_ipv6};
use crate::{Error, Result};

/// UDP destination port of RoCEv2 (IANA "roce").
pub const ROCE_V2_UDP_PORT: u16 = 4791;

/// Lowest UDP source port for RoCEv2 flow entropy (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`).
pub const UDP_SRC_PORT_MIN: u16 = 0xc000;

/// Default IPv4 TTL / IPv6 hop limit of [`RoceIp::v4`] and [`RoceIp::v6`].
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// Pad bytes that bring `payload_len` to a multiple of 4.
pub const fn pad_len(payload_len: usize) -> usize {
    payload_len.wrapping_neg() & 3
}

/// The IP layer of a RoCEv2 frame: the fields a sender chooses. Lengths,
/// protocol and checksums are derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoceIp {
    /// IPv4, no options.
    V4 {
        /// Source address.
        src: [u8; 4],
        /// Destination address.
        dst: [u8; 4],
        /// DSCP and ECN (the TOS byte; from the address vector's traffic class).
        dscp_ecn: u8,
        /// Identification.
        ident: u16,
        /// Don't Fragment (rxe sets it).
        dont_frag: bool,
        /// Time to live (from the address vector's hop limit).
        ttl: u8,
    },
    /// IPv6, no extension headers.
    V6 {
        /// Source address.
        src: [u8; 16],
        /// Destination address.
        dst: [u8; 16],
        /// Traffic class.
        traffic_class: u8,
        /// Flow label, 20 bits.
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

impl RoceIp {
    /// IPv4 with TOS 0, identification 0, DF set and TTL 64.
    pub const fn v4(src: [u8; 4], dst: [u8; 4]) -> Self {
        Self::V4 {
            src,
            dst,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: DEFAULT_HOP_LIMIT,
        }
    }

    /// IPv6 with traffic class 0, flow label 0 and hop limit 64.
    pub const fn v6(src: [u8; 16], dst: [u8; 16]) -> Self {
        Self::V6 {
            src,
            dst,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: DEFAULT_HOP_LIMIT,
        }
    }

    /// Addressing between two GIDs with the defaults of [`RoceIp::v4`] /
    /// [`RoceIp::v6`]: IPv4 if both are IPv4-mapped, IPv6 if neither is,
    /// `None` for a mix.
    pub fn from_gids(sgid: Gid, dgid: Gid) -> Option<Self> {
        match (sgid.to_ipv4(), dgid.to_ipv4()) {
            (Some(s), Some(d)) => Some(Self::v4(s, d)),
            (None, None) => Some(Self::v6(sgid.octets(), dgid.octets())),
            _ => None,
        }
    }

    /// Source GID.
    pub fn src_gid(&self) -> Gid {
        match *self {
            Self::V4 { src, .. } => Gid::from_ipv4(src),
            Self::V6 { src, .. } => Gid::from_ipv6(src),
        }
    }

    /// Destination GID.
    pub fn dst_gid(&self) -> Gid {
        match *self {
            Self::V4 { dst, .. } => Gid::from_ipv4(dst),
            Self::V6 { dst, .. } => Gid::from_ipv6(dst),
        }
    }

    /// ECN code point (0 not ECT, 1/2 ECT, 3 CE).
    pub fn ecn(&self) -> u8 {
        let tos = match *self {
            Self::V4 { dscp_ecn, .. } => dscp_ecn,
            Self::V6 { traffic_class, .. } => traffic_class,
        };
        tos & ipv4::field::ECN_MASK
    }

    /// Length of the IP header.
    pub const fn header_len(&self) -> usize {
        match self {
            Self::V4 { .. } => ipv4::HEADER_LEN,
            Self::V6 { .. } => ipv6::HEADER_LEN,
        }
    }

    /// Largest IP payload (UDP header onwards).
    const fn max_payload_len(&self) -> usize {
        match self {
            Self::V4 { .. } => ipv4::MAX_PAYLOAD_LEN,
            Self::V6 { .. } => ipv6::MAX_PAYLOAD_LEN,
        }
    }
}

/// Everything in a RoCEv2 frame except the payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceRepr {
    /// IP addressing and per-hop fields.
    pub ip: RoceIp,
    /// UDP source port (flow entropy; the destination is always 4791).
    pub src_port: u16,
    /// Base transport header. `emit` overwrites `pad_count` with the value
    /// the payload length calls for.
    pub bth: BthRepr,
    /// Extension headers; must [fit](ExtHeaders::fits) `bth.opcode`.
    pub ext: ExtHeaders,
}

impl RoceRepr {
    /// Bytes before the payload: IP, UDP, BTH and extension headers.
    pub fn header_len(&self) -> usize {
        self.ip.header_len() + udp::HEADER_LEN + bth::HEADER_LEN + self.bth.opcode.ext_headers_len()
    }

    /// Length of the whole frame for `payload_len` bytes of payload, pad and
    /// ICRC included (saturating, so absurd lengths fail in `emit`).
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.header_len()
            .saturating_add(payload_len)
            .saturating_add(pad_len(payload_len) + ICRC_LEN)
    }

    /// The headers a parse of the frame [`Self::emit`] builds for
    /// `payload_len` bytes of payload gives back: these, with the pad count
    /// that length calls for. For a receiver handed headers that were never
    /// written, to take them as the parse would have given them.
    pub fn as_parsed(&self, payload_len: usize) -> RoceRepr {
        let mut r = *self;
        r.make_parsed(payload_len);
        r
    }

    /// Makes these headers [`Self::as_parsed`]`(payload_len)` where they
    /// lie.
    pub fn make_parsed(&mut self, payload_len: usize) {
        self.bth.pad_count = pad_len(payload_len) as u8;
    }

    /// Where the payload goes in the frame.
    pub fn payload_range(&self, payload_len: usize) -> Range<usize> {
        let start = self.header_len();
        start..start.saturating_add(payload_len)
    }

    /// Writes headers, pad and ICRC around a payload already at
    /// [`Self::payload_range`]`(payload_len)` in `frame`; returns the frame
    /// length, [`Self::frame_len`]`(payload_len)`. Bytes of `frame` past
    /// that are untouched.
    ///
    /// Fails with [`Error::Truncated`] if `frame` is shorter than the frame,
    /// and [`Error::Malformed`] if the extension headers do not fit the
    /// opcode (or it is unknown) or the frame would exceed the IP length
    /// limit. On error `frame` is unchanged.
    pub fn emit_in_place(&self, frame: &mut [u8], payload_len: usize) -> Result<usize> {
        let len = self.checked_frame_len(payload_len)?;
        self.fill_in(frame, len, payload_len, Seal::Now)
    }

    /// [`Self::emit_in_place`] for a frame of `len` bytes, which
    /// [`Self::checked_frame_len`] gave for `payload_len` (its checks are
    /// not made again); with `seal` [`Seal::Later`], the ICRC (and over
    /// IPv6 the UDP checksum, which covers it) is left zero, for
    /// [`seal_roce`] to write where the frame leaves its sender's hands.
    /// Fails with [`Error::Truncated`] if `frame` is shorter than `len`.
    ///
    /// Contract (as an emitter's buffer length, STYLE R3): `len` is what
    /// `checked_frame_len(payload_len)` returned for this very repr, which
    /// a debug assertion checks; with another `len` the frame is wrong and
    /// the call may panic. Input from the wire never reaches it: it is for
    /// the sender that sized the buffer.
    pub fn emit_checked(
        &self,
        frame: &mut [u8],
        payload_len: usize,
        len: usize,
        seal: Seal,
    ) -> Result<usize> {
        debug_assert_eq!(self.checked_frame_len(payload_len), Ok(len));
        self.fill_in(frame, len, payload_len, seal)
    }

    /// [`Self::emit_in_place`] of a frame of `len` bytes, which
    /// [`Self::checked_frame_len`] gave for `payload_len`.
    fn fill_in(
        &self,
        frame: &mut [u8],
        len: usize,
        payload_len: usize,
        seal: Seal,
    ) -> Result<usize> {
        let frame = frame.get_mut(..len).ok_or(Error::Truncated)?;
        let opcode = self.bth.opcode;
        let ip_hlen = self.ip.header_len();
        let ip_payload_len = len - ip_hlen;

        match self.ip {
            RoceIp::V4 {
                src,
                dst,
                dscp_ecn,
                ident,
                dont_frag,
                ttl,
            } => Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: IpProtocol::Udp,
                dscp_ecn,
                ident,
                dont_frag,
                ttl,
                payload_len: ip_payload_len,
            }
            .emit(&mut Ipv4Header::new_unchecked(&mut *frame)),
            RoceIp::V6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            } => Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Udp,
                traffic_class,
                flow_label,
                hop_limit,
                payload_len: ip_payload_len,
            }
            .emit(&mut Ipv6Header::new_unchecked(&mut *frame)),
        }

        let udp_at = ip_hlen;
        UdpRepr {
            src_port: self.src_port,
            dst_port: ROCE_V2_UDP_PORT,
            payload_len: ip_payload_len - udp::HEADER_LEN,
        }
        .emit(&mut UdpHeader::new_unchecked(&mut frame[udp_at..]));

        let bth_at = udp_at + udp::HEADER_LEN;
        let pad = pad_len(payload_len);
        let bth = BthRepr {
            pad_count: pad as u8,
            ..self.bth
        };
        bth.emit(&mut BthHeader::new_unchecked(&mut frame[bth_at..]));

        let ext_at = bth_at + bth::HEADER_LEN;
        self.ext.emit(opcode, &mut frame[ext_at..]);

        let pad_at = self.header_len() + payload_len;
        let icrc_at = len - ICRC_LEN;
        frame[pad_at..icrc_at].fill(0);
        match seal {
            Seal::Now => seal_in_place(frame, ip_hlen),
            Seal::Later => frame[icrc_at..].fill(0),
        }
        Ok(len)
    }

    /// Builds the frame with `payload` at the start of `frame`; returns its
    /// length. Errors as [`Self::emit_in_place`].
    pub fn emit(&self, payload: &[u8], frame: &mut [u8]) -> Result<usize> {
        let len = self.checked_frame_len(payload.len())?;
        if len > frame.len() {
            return Err(Error::Truncated);
        }
        frame[self.payload_range(payload.len())].copy_from_slice(payload);
        self.fill_in(frame, len, payload.len(), Seal::Now)
    }

    /// Replaces the contents of `out` with the frame, reusing its capacity.
    /// Errors as [`Self::emit_in_place`]; on error `out` is left empty.
    pub fn emit_to_vec(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        let len = self.checked_frame_len(payload.len())?;
        // Headers, payload, then pad and ICRC: each byte written once
        // before the headers are filled in.
        out.reserve(len);
        out.resize(self.header_len(), 0);
        out.extend_from_slice(payload);
        out.resize(len, 0);
        self.fill_in(out, len, payload.len(), Seal::Now)
            .map(|_| ())
            .inspect_err(|_| out.clear())
    }

    /// [`Self::frame_len`], after checking that the extension headers fit a
    /// known opcode and that the frame stays within the IP length limit:
    /// a `payload_len` for which this succeeds is one that
    /// [`Self::emit_to_vec`] emits.
    ///
    /// Fails with [`Error::Malformed`] where those checks fail.
    pub fn checked_frame_len(&self, payload_len: usize) -> Result<usize> {
        if !self.ext.fits(self.bth.opcode) {
            return Err(Error::Malformed);
        }
        let len = self.frame_len(payload_len);
        if len - self.ip.header_len() > self.ip.max_payload_len() {
            return Err(Error::Malformed);
        }
        Ok(len)
    }
}

/// When [`RoceRepr::emit_checked`] writes a frame's ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// With the headers.
    Now,
    /// Not: the frame's holder calls [`seal_roce`] before anything that
    /// could look at the ICRC (a port, a capture, a fault that corrupts)
    /// sees the bytes. A frame handed untouched to a receiver that trusts
    /// its sender ([`parse_roce_emitted`]) is never sealed, as a checksum
    /// left to the link is never computed for a packet that stays in its
    /// host.
    Later,
}

/// Writes the ICRC of a frame emitted with [`Seal::Later`] (over IPv6
/// also the UDP checksum, which covers the ICRC): the frame is then the
/// one [`RoceRepr::emit_in_place`] would have built. The frame runs to its
/// IP length; its headers are trusted (this is the sender's own frame).
/// Fails with [`Error::Truncated`] or [`Error::BadIpVersion`] for bytes
/// that are no such frame, leaving them unchanged.
pub fn seal_roce(frame: &mut [u8]) -> Result<()> {
    let (ip_hlen, pkt_len) = lengths(frame)?;
    seal_in_place(&mut frame[..pkt_len], ip_hlen);
    Ok(())
}

/// [`seal_roce`] for two frames, their ICRCs hashed together by `hash`
/// where both are IPv4 ([`icrc_ipv4_in_place_pair`] says what `hash`
/// must answer). Fails as `seal_roce` does if either is no such frame,
/// leaving both unchanged.
pub fn seal_roce_pair(
    a: &mut [u8],
    b: &mut [u8],
    hash: impl FnOnce([&[u8]; 2]) -> [u32; 2],
) -> Result<()> {
    let (a_hlen, a_len) = lengths(a)?;
    let (b_hlen, b_len) = lengths(b)?;
    let (a, b) = (&mut a[..a_len], &mut b[..b_len]);
    if a[0] >> 4 != 4 || b[0] >> 4 != 4 {
        seal_in_place(a, a_hlen);
        seal_in_place(b, b_hlen);
        return Ok(());
    }
    let (a_at, b_at) = (a_len - ICRC_LEN, b_len - ICRC_LEN);
    let [ia, ib] = icrc_ipv4_in_place_pair(&mut a[..a_at], &mut b[..b_at], hash);
    a[a_at..].copy_from_slice(&ia.to_le_bytes());
    b[b_at..].copy_from_slice(&ib.to_le_bytes());
    Ok(())
}

/// The length of the RoCEv2 packet at the start of `bytes`, as its IP
/// header gives it (IPv4's total length; IPv6's payload length and its
/// header), ICRC included: where the next packet starts when packets lie
/// back to back. Fails with [`Error::BadIpVersion`], or with
/// [`Error::Truncated`] for a length too short for a RoCEv2 packet or
/// past the end of `bytes`. Nothing else in the headers is checked.
pub fn packet_len(bytes: &[u8]) -> Result<usize> {
    lengths(bytes).map(|(_, pkt_len)| pkt_len)
}

/// Whether the RoCEv2 packet at the start of `frame` ends in the ICRC its
/// bytes give, hashed where they lie ([`icrc_ipv4_in_place`]); `false`
/// for bytes whose lengths hold no such packet. `frame` is as it was when
/// this returns. Where it holds, [`parse_roce_emitted`] answers exactly as
/// [`parse_roce`] does: a receiver that owns its frame's buffer checks the
/// ICRC this way, in one pass over the packet, and parses without it
/// (where it does not hold, `parse_roce` says why).
pub fn icrc_matches_in_place(frame: &mut [u8]) -> bool {
    let Ok((_, pkt_len)) = lengths(frame) else {
        return false;
    };
    let icrc_at = pkt_len - ICRC_LEN;
    let computed = icrc_in_place(&mut frame[..icrc_at]);
    frame[icrc_at..pkt_len] == computed.to_le_bytes()
}

/// [`icrc_matches_in_place`] for two frames, their ICRCs hashed together
/// by `hash` where both are IPv4 packets ([`icrc_ipv4_in_place_pair`]
/// says what `hash` must answer). Both frames are as they were when this
/// returns.
pub fn icrc_matches_in_place_pair(
    a: &mut [u8],
    b: &mut [u8],
    hash: impl FnOnce([&[u8]; 2]) -> [u32; 2],
) -> [bool; 2] {
    let (Ok((_, a_len)), Ok((_, b_len))) = (lengths(a), lengths(b)) else {
        return [icrc_matches_in_place(a), icrc_matches_in_place(b)];
    };
    if a[0] >> 4 != 4 || b[0] >> 4 != 4 {
        return [icrc_matches_in_place(a), icrc_matches_in_place(b)];
    }
    let (a_at, b_at) = (a_len - ICRC_LEN, b_len - ICRC_LEN);
    let [ia, ib] = icrc_ipv4_in_place_pair(&mut a[..a_at], &mut b[..b_at], hash);
    [
        a[a_at..a_len] == ia.to_le_bytes(),
        b[b_at..b_len] == ib.to_le_bytes(),
    ]
}

/// The ICRC of `packet` (its ICRC excluded), hashed in place, for the IP
/// version its first nibble names; a packet [`lengths`] accepted is IPv4
/// or IPv6, and anything not IPv6 is hashed as IPv4.
fn icrc_in_place(packet: &mut [u8]) -> u32 {
    if packet.first().is_some_and(|b| b >> 4 == 6) {
        icrc_ipv6_in_place(packet)
    } else {
        icrc_ipv4_in_place(packet)
    }
}

/// The IP header's length and the packet's, as [`packet_len`] checks it.
fn lengths(frame: &[u8]) -> Result<(usize, usize)> {
    let first = *frame.first().ok_or(Error::Truncated)?;
    let (ip_hlen, pkt_len) = match first >> 4 {
        4 => {
            let h = Ipv4Header::new_checked(frame)?;
            (usize::from(first & 0x0f) * 4, usize::from(h.total_len()))
        }
        6 => {
            let h = Ipv6Header::new_checked(frame)?;
            (
                ipv6::HEADER_LEN,
                ipv6::HEADER_LEN + usize::from(h.payload_len()),
            )
        }
        _ => return Err(Error::BadIpVersion),
    };
    let min = ip_hlen + udp::HEADER_LEN + bth::HEADER_LEN + ICRC_LEN;
    if pkt_len < min || pkt_len > frame.len() {
        return Err(Error::Truncated);
    }
    Ok((ip_hlen, pkt_len))
}

/// Writes the ICRC into the last four bytes of `frame` (a whole packet
/// from its IP header, with an IP header of `ip_hlen` bytes), then over
/// IPv6 the UDP checksum.
fn seal_in_place(frame: &mut [u8], ip_hlen: usize) {
    let icrc_at = frame.len() - ICRC_LEN;
    let v6 = frame[0] >> 4 == 6;
    let icrc = icrc_in_place(&mut frame[..icrc_at]);
    frame[icrc_at..].copy_from_slice(&icrc.to_le_bytes());
    if v6 {
        let h = Ipv6Header::new_unchecked(&*frame);
        let (src, dst) = (h.src_addr(), h.dst_addr());
        let c = udp_checksum_ipv6(src, dst, &frame[ip_hlen..]);
        UdpHeader::new_unchecked(&mut frame[ip_hlen..]).set_checksum(c);
    }
}

/// A received frame, taken apart by [`parse_roce`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRoce {
    /// Headers. `repr.bth.pad_count` is the received pad count; `repr.ext`
    /// fits `repr.bth.opcode`.
    pub repr: RoceRepr,
    /// Byte range of the payload in the frame, pad excluded.
    pub payload: Range<usize>,
}

/// Parses and checks a RoCEv2 frame that starts at its IP header.
///
/// Checks, in order: IP version ([`Error::BadIpVersion`]); the IP header
/// (IPv4 options or fragments are [`Error::Unsupported`], a bad IPv4 header
/// checksum is [`Error::BadIpChecksum`]); that the packet is UDP to port 4791
/// ([`Error::NotRoce`]); that the UDP length matches the IP length and the
/// transport part is a whole number of 4-byte words ([`Error::Malformed`]);
/// the ICRC ([`Error::BadIcrc`]); then the BTH (known opcode, TVer 0), the
/// extension headers the opcode calls for, and that the pad count fits the
/// data ([`Error::Malformed`]). Lengths that run past `frame` are
/// [`Error::Truncated`].
///
/// Bytes of `frame` after the IP length (an Ethernet minimum-size trailer)
/// are ignored. The UDP checksum is not verified: the ICRC covers the same
/// bytes. Never panics, never allocates.
pub fn parse_roce(frame: &[u8]) -> Result<ParsedRoce> {
    parse(frame, true)
}

/// [`parse_roce`] without the ICRC check: for a frame whose bytes are known
/// to be those its sender's [`RoceRepr::emit`] wrote (it never left the
/// process, nor passed anything that may change it), whose ICRC is then
/// right by construction. Everything else is checked as by `parse_roce`.
pub fn parse_roce_emitted(frame: &[u8]) -> Result<ParsedRoce> {
    parse(frame, false)
}

/// [`parse_roce_emitted`] of `frame`, given `prev`, a frame that parsed
/// as `parsed`: where the two begin with the same IP and UDP headers, byte
/// for byte, the checks and fields of those headers are `parsed`'s, and
/// only the rest of `frame` is parsed. The answer is
/// `parse_roce_emitted(frame)`'s either way. For packets that follow one
/// another to one QP, whose IP and UDP headers differ at most where their
/// lengths do.
pub fn parse_roce_emitted_after(
    frame: &[u8],
    prev: &[u8],
    parsed: &ParsedRoce,
) -> Result<ParsedRoce> {
    let ip_hlen = parsed.repr.ip.header_len();
    let at = ip_hlen + udp::HEADER_LEN;
    match (frame.get(..at), prev.get(..at)) {
        (Some(h), Some(p)) if h == p => {
            // The same header bytes parse the same: only whether the
            // length they give fits `frame` is its own.
            let (_, pkt_len) = lengths(frame)?;
            let pkt = &frame[..pkt_len];
            let ib = pkt.get(at..).ok_or(Error::Truncated)?;
            parse_ib(
                pkt,
                ib,
                parsed.repr.ip,
                ip_hlen,
                parsed.repr.src_port,
                false,
            )
        }
        _ => parse(frame, false),
    }
}

fn parse(frame: &[u8], check_icrc: bool) -> Result<ParsedRoce> {
    let first = *frame.first().ok_or(Error::Truncated)?;
    let (ip, ip_hlen, pkt_len) = match first >> 4 {
        4 => {
            let r = Ipv4Repr::parse(&Ipv4Header::new_checked(frame)?)?;
            if r.protocol != IpProtocol::Udp {
                return Err(Error::NotRoce);
            }
            let ip = RoceIp::V4 {
                src: r.src_addr,
                dst: r.dst_addr,
                dscp_ecn: r.dscp_ecn,
                ident: r.ident,
                dont_frag: r.dont_frag,
                ttl: r.ttl,
            };
            (ip, ipv4::HEADER_LEN, ipv4::HEADER_LEN + r.payload_len)
        }
        6 => {
            let r = Ipv6Repr::parse(&Ipv6Header::new_checked(frame)?)?;
            if r.next_header != IpProtocol::Udp {
                return Err(Error::NotRoce);
            }
            let ip = RoceIp::V6 {
                src: r.src_addr,
                dst: r.dst_addr,
                traffic_class: r.traffic_class,
                flow_label: r.flow_label,
                hop_limit: r.hop_limit,
            };
            (ip, ipv6::HEADER_LEN, ipv6::HEADER_LEN + r.payload_len)
        }
        _ => return Err(Error::BadIpVersion),
    };
    // The IP parsers checked that pkt_len fits the frame.
    let pkt = frame.get(..pkt_len).ok_or(Error::Truncated)?;
    let dgram = pkt.get(ip_hlen..).ok_or(Error::Truncated)?;

    let udp_hdr = UdpHeader::new_checked(dgram)?;
    if udp_hdr.dst_port() != ROCE_V2_UDP_PORT {
        return Err(Error::NotRoce);
    }
    let udp = UdpRepr::parse(&udp_hdr)?;
    if udp::HEADER_LEN + udp.payload_len != dgram.len() {
        return Err(Error::Malformed);
    }

    parse_ib(
        pkt,
        &dgram[udp::HEADER_LEN..],
        ip,
        ip_hlen,
        udp.src_port,
        check_icrc,
    )
}

/// The rest of [`parse`] for the packet `pkt`, its IP and UDP headers
/// (`ip`, `ip_hlen` bytes of IP header, `src_port`) checked: `ib` is the
/// part from the BTH to the ICRC.
fn parse_ib(
    pkt: &[u8],
    ib: &[u8],
    ip: RoceIp,
    ip_hlen: usize,
    src_port: u16,
    check_icrc: bool,
) -> Result<ParsedRoce> {
    if ib.len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::Truncated);
    }
    if !ib.len().is_multiple_of(4) {
        return Err(Error::Malformed);
    }
    if check_icrc {
        let icrc_at = pkt.len() - ICRC_LEN;
        let mut wire = [0u8; ICRC_LEN];
        wire.copy_from_slice(&pkt[icrc_at..]);
        let computed = match ip {
            RoceIp::V4 { .. } => icrc_ipv4(&pkt[..icrc_at]),
            RoceIp::V6 { .. } => icrc_ipv6(&pkt[..icrc_at]),
        };
        if computed != u32::from_le_bytes(wire) {
            return Err(Error::BadIcrc);
        }
    }

    let bth = BthRepr::parse(&BthHeader::new_checked(ib)?)?;
    let body = &ib[bth::HEADER_LEN..ib.len() - ICRC_LEN];
    let ext = ExtHeaders::parse(bth.opcode, body)?;
    let ext_len = bth.opcode.ext_headers_len();
    let data_len = body.len() - ext_len;
    let pad = usize::from(bth.pad_count);
    if pad > data_len {
        return Err(Error::Malformed);
    }
    let start = ip_hlen + udp::HEADER_LEN + bth::HEADER_LEN + ext_len;
    Ok(ParsedRoce {
        repr: RoceRepr {
            ip,
            src_port,
            bth,
            ext,
        },
        payload: start..start + data_len - pad,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bth::BthOpcode;
    use crate::bth::tests::arb_bth;
    use crate::ext::tests::arb_ext_for;
    use crate::reth::RethRepr;
    use doorbell_types::{Psn, Qpn, Rkey};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    fn write_only() -> RoceRepr {
        RoceRepr {
            ip: RoceIp::v4([10, 0, 0, 1], [10, 0, 0, 2]),
            src_port: 0xc000,
            bth: BthRepr::new(BthOpcode::RcRdmaWriteOnly, Qpn::new(0x11), Psn::new(5)),
            ext: ExtHeaders {
                reth: Some(RethRepr {
                    va: 0x1000,
                    rkey: Rkey::from_raw(0x42),
                    dma_len: 5,
                }),
                ..ExtHeaders::NONE
            },
        }
    }

    #[test]
    fn an_emitted_frame_parses_alike_without_the_icrc_check() {
        let mut f = Vec::new();
        write_only().emit_to_vec(b"hello", &mut f).unwrap();
        assert_eq!(parse_roce_emitted(&f), parse_roce(&f));
        // A wrong ICRC is what only the checked parse sees...
        let last = f.len() - 1;
        f[last] ^= 1;
        assert_eq!(parse_roce(&f), Err(Error::BadIcrc));
        assert!(parse_roce_emitted(&f).is_ok());
        // ...and everything else is checked by both.
        f.truncate(f.len() - 2);
        assert!(parse_roce_emitted(&f).is_err());
    }

    /// Recomputes the IPv4 header checksum and the ICRC after an edit.
    fn refresh_v4(frame: &mut [u8]) {
        Ipv4Header::new_unchecked(&mut *frame).fill_checksum();
        let n = frame.len() - 4;
        let c = icrc_ipv4(&frame[..n]);
        frame[n..].copy_from_slice(&c.to_le_bytes());
    }

    #[test]
    fn layout_of_a_write() {
        let r = write_only();
        let mut f = [0xa5u8; 80];
        let n = r.emit(b"hello", &mut f).unwrap();
        assert_eq!(n, 20 + 8 + 12 + 16 + 5 + 3 + 4);
        assert_eq!(r.payload_range(5), 56..61);
        assert_eq!(&f[56..61], b"hello");
        assert_eq!(&f[61..64], &[0, 0, 0]);
        assert_eq!(f[29 + 1] & 0x30, 0x30, "pad count 3 in the BTH");
        assert_eq!(&f[20..24], &[0xc0, 0x00, 0x12, 0xb7]);
        assert_eq!(&f[24..26], &(n as u16 - 20).to_be_bytes());
        assert_eq!(&f[26..28], &[0, 0], "no UDP checksum over IPv4");
        assert_eq!(f[n], 0xa5, "nothing written past the frame");
        let p = parse_roce(&f[..n]).unwrap();
        assert_eq!(p.payload, 56..61);
        assert_eq!(
            p.repr,
            RoceRepr {
                bth: BthRepr {
                    pad_count: 3,
                    ..r.bth
                },
                ..r
            }
        );
    }

    #[test]
    fn emit_errors() {
        let r = write_only();
        let mut f = [0u8; 63];
        assert_eq!(r.emit(b"hello", &mut f), Err(Error::Truncated));
        assert_eq!(f, [0; 63]);
        let bad = RoceRepr {
            ext: ExtHeaders::NONE,
            ..r
        };
        assert_eq!(bad.emit(b"hello", &mut [0; 128]), Err(Error::Malformed));
        let unknown = RoceRepr {
            bth: BthRepr {
                opcode: BthOpcode::Unknown(0x20),
                ..r.bth
            },
            ext: ExtHeaders::NONE,
            ..r
        };
        assert_eq!(unknown.emit(&[], &mut [0; 128]), Err(Error::Malformed));
        let mut v = vec![1, 2, 3];
        assert_eq!(
            r.emit_to_vec(&vec![0; 65536], &mut v),
            Err(Error::Malformed)
        );
        assert!(v.is_empty());
        let mut big = vec![0u8; 70_000];
        assert_eq!(r.emit(&vec![1; 65_500], &mut big), Err(Error::Malformed));
        assert!(big.iter().all(|b| *b == 0), "frame untouched on error");
        assert_eq!(
            r.emit_in_place(&mut [0; 16], usize::MAX),
            Err(Error::Malformed)
        );
        // The largest IPv4 frame: the payload plus pad must stay a multiple
        // of 4, so it ends 3 bytes short of 65535.
        let max = (ipv4::MAX_PAYLOAD_LEN - 8 - 12 - 16 - 4) & !3;
        r.emit_to_vec(&vec![7; max], &mut v).unwrap();
        assert_eq!(v.len(), 65532);
        assert!(parse_roce(&v).is_ok());
        assert_eq!(
            r.emit_to_vec(&vec![7; max + 1], &mut v),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn parse_errors() {
        let r = write_only();
        let mut good = vec![];
        r.emit_to_vec(b"hello", &mut good).unwrap();
        let n = good.len();

        assert_eq!(parse_roce(&[]), Err(Error::Truncated));
        assert_eq!(parse_roce(&[0x55; 40]), Err(Error::BadIpVersion));

        // Trailer bytes (Ethernet minimum-size padding) are ignored.
        let mut long = good.clone();
        long.extend_from_slice(&[0xee; 6]);
        assert_eq!(parse_roce(&long).unwrap().payload, 56..61);

        let mut f = good.clone();
        f[60] ^= 1; // payload
        assert_eq!(parse_roce(&f), Err(Error::BadIcrc));
        f = good.clone();
        f[n - 1] ^= 0x80; // ICRC itself
        assert_eq!(parse_roce(&f), Err(Error::BadIcrc));
        f = good.clone();
        f[62] = 1; // pad byte
        assert_eq!(parse_roce(&f), Err(Error::BadIcrc));

        f = good.clone();
        f[22..24].copy_from_slice(&4792u16.to_be_bytes());
        assert_eq!(parse_roce(&f), Err(Error::NotRoce));
        f = good.clone();
        f[9] = 6; // TCP
        refresh_v4(&mut f);
        assert_eq!(parse_roce(&f), Err(Error::NotRoce));
        f = good.clone();
        f[8] = 1; // TTL changed without the header checksum
        assert_eq!(parse_roce(&f), Err(Error::BadIpChecksum));
        f = good.clone();
        f[8] = 1;
        Ipv4Header::new_unchecked(&mut f[..]).fill_checksum();
        assert!(parse_roce(&f).is_ok(), "TTL is masked out of the ICRC");

        f = good.clone();
        f[25] -= 4; // UDP length disagrees with IP
        refresh_v4(&mut f);
        assert_eq!(parse_roce(&f), Err(Error::Malformed));

        f = good.clone();
        f[28] = 0x2c; // UC 0x0c: UC has no READ
        refresh_v4(&mut f);
        assert_eq!(parse_roce(&f), Err(Error::Malformed));

        // An ACK whose AETH is cut off by the ICRC.
        f = good[..20 + 8 + 12 + 4].to_vec();
        f[2..4].copy_from_slice(&44u16.to_be_bytes());
        f[24..26].copy_from_slice(&24u16.to_be_bytes());
        f[28] = u8::from(BthOpcode::RcAck);
        f[29] = 0;
        refresh_v4(&mut f);
        assert_eq!(parse_roce(&f), Err(Error::Truncated));
        f[28] = u8::from(BthOpcode::RcSendOnly);
        refresh_v4(&mut f);
        assert_eq!(parse_roce(&f).unwrap().payload, 40..40);
        f[29] = 0x10; // pad 1 with no data
        refresh_v4(&mut f);
        assert_eq!(parse_roce(&f), Err(Error::Malformed));

        // Not a multiple of 4 after UDP.
        f = good[..n - 1].to_vec();
        f[2..4].copy_from_slice(&(n as u16 - 1).to_be_bytes());
        f[24..26].copy_from_slice(&(n as u16 - 21).to_be_bytes());
        refresh_v4(&mut f);
        assert_eq!(parse_roce(&f), Err(Error::Malformed));
    }

    #[test]
    fn ipv6_udp_checksum_and_masking() {
        let mut src = [0u8; 16];
        src[0] = 0xfd;
        src[15] = 1;
        let mut dst = src;
        dst[15] = 2;
        let r = RoceRepr {
            ip: RoceIp::V6 {
                src,
                dst,
                traffic_class: 0x02,
                flow_label: 0xabcde,
                hop_limit: 3,
            },
            ..write_only()
        };
        let mut f = vec![];
        r.emit_to_vec(b"hi", &mut f).unwrap();
        assert_eq!(f.len(), 40 + 8 + 12 + 16 + 2 + 2 + 4);
        let c = UdpHeader::new_checked(&f[40..]).unwrap().checksum();
        assert_ne!(c, 0);
        assert_eq!(c, udp_checksum_ipv6(src, dst, &f[40..]));
        assert_eq!(parse_roce(&f).unwrap().repr.ip, r.ip);
        // Routers may change traffic class, flow label, hop limit: the ICRC
        // still verifies.
        f[0] = 0x6f;
        f[1] = 0xff;
        f[7] = 0;
        assert!(parse_roce(&f).is_ok());
    }

    #[test]
    fn gids() {
        let a = RoceIp::from_gids(Gid::from_ipv4([1, 2, 3, 4]), Gid::from_ipv4([5, 6, 7, 8]));
        assert_eq!(a, Some(RoceIp::v4([1, 2, 3, 4], [5, 6, 7, 8])));
        assert_eq!(a.unwrap().dst_gid(), Gid::from_ipv4([5, 6, 7, 8]));
        let v6 = Gid::from_ipv6([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(RoceIp::from_gids(Gid::from_ipv4([1, 2, 3, 4]), v6), None);
        assert_eq!(
            RoceIp::from_gids(v6, v6),
            Some(RoceIp::v6(v6.octets(), v6.octets()))
        );
    }

    fn arb_ip() -> impl Strategy<Value = RoceIp> {
        prop_oneof![
            (
                any::<[u8; 4]>(),
                any::<[u8; 4]>(),
                any::<u8>(),
                any::<u16>(),
                any::<bool>(),
                any::<u8>()
            )
                .prop_map(|(src, dst, dscp_ecn, ident, dont_frag, ttl)| RoceIp::V4 {
                    src,
                    dst,
                    dscp_ecn,
                    ident,
                    dont_frag,
                    ttl
                }),
            (
                any::<[u8; 16]>(),
                any::<[u8; 16]>(),
                any::<u8>(),
                0u32..0x10_0000,
                any::<u8>()
            )
                .prop_map(|(src, dst, traffic_class, flow_label, hop_limit)| {
                    RoceIp::V6 {
                        src,
                        dst,
                        traffic_class,
                        flow_label,
                        hop_limit,
                    }
                }),
        ]
    }

    fn arb_roce() -> impl Strategy<Value = RoceRepr> {
        (arb_ip(), any::<u16>(), arb_bth()).prop_flat_map(|(ip, src_port, bth)| {
            arb_ext_for(bth.opcode).prop_map(move |ext| RoceRepr {
                ip,
                src_port,
                bth,
                ext,
            })
        })
    }

    /// Byte offsets a parse may not notice changing: the fields the ICRC
    /// masks and the checksums do not cover.
    fn unprotected(ip: &RoceIp) -> &'static [usize] {
        match ip {
            RoceIp::V4 { .. } => &[26, 27, 32],
            RoceIp::V6 { .. } => &[0, 1, 2, 3, 7, 46, 47, 52],
        }
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_roce(), payload in proptest::collection::vec(any::<u8>(), 0..70)) {
            let mut f = Vec::new();
            r.emit_to_vec(&payload, &mut f).unwrap();
            prop_assert_eq!(f.len(), r.frame_len(payload.len()));
            let p = parse_roce(&f).unwrap();
            prop_assert_eq!(&f[p.payload.clone()], &payload[..]);
            prop_assert_eq!(p.payload, r.payload_range(payload.len()));
            let expect = RoceRepr { bth: BthRepr { pad_count: pad_len(payload.len()) as u8, ..r.bth }, ..r };
            prop_assert_eq!(p.repr, expect);
            prop_assert_eq!(r.as_parsed(payload.len()), expect);
            // In place gives the same bytes.
            let mut g = vec![0x5a; f.len()];
            g[r.payload_range(payload.len())].copy_from_slice(&payload);
            prop_assert_eq!(r.emit_in_place(&mut g, payload.len()), Ok(f.len()));
            prop_assert_eq!(&g, &f);
            // Sealed later, the same bytes, ICRC and all (over IPv6 the UDP
            // checksum too); only the ICRC is missing before.
            let mut h = vec![0x5a; f.len() + 3];
            h[r.payload_range(payload.len())].copy_from_slice(&payload);
            let len = r.checked_frame_len(payload.len()).unwrap();
            prop_assert_eq!(r.emit_checked(&mut h, payload.len(), len, Seal::Later), Ok(len));
            prop_assert_eq!(&h[len - ICRC_LEN..len], &[0u8; ICRC_LEN][..]);
            prop_assert_eq!(parse_roce_emitted(&h[..len]).map(|p| p.payload), Ok(r.payload_range(payload.len())));
            prop_assert_eq!(seal_roce(&mut h), Ok(()));
            prop_assert_eq!(&h[..len], &f[..]);
            prop_assert_eq!(&h[len..], &[0x5a; 3][..], "nothing past the packet");
            prop_assert_eq!(seal_roce(&mut h), Ok(()));
            prop_assert_eq!(&h[..len], &f[..], "sealing twice changes nothing");
        }

        #[test]
        fn a_pair_sealed_together_is_each_sealed_alone(
            a in arb_roce(),
            b in arb_roce(),
            a_len in 0usize..1100,
            b_len in 0usize..1100,
            fill: u8,
        ) {
            // Payloads long enough for the pair's hash, and short ones that
            // are hashed one by one; IPv6 frames sealed each alone.
            let mut want = Vec::new();
            for (r, n) in [(&a, a_len), (&b, b_len)] {
                let mut f = Vec::new();
                r.emit_to_vec(&vec![fill; n], &mut f).unwrap();
                want.push(f);
            }
            let later = |f: &Vec<u8>| {
                let mut g = f.clone();
                let n = g.len();
                g[n - ICRC_LEN..].fill(0);
                g.extend_from_slice(&[0x5a; 3]);
                g
            };
            let (mut ga, mut gb) = (later(&want[0]), later(&want[1]));
            let mut asked = false;
            let one_by_one = |p: [&[u8]; 2]| {
                asked = true;
                crate::icrc::pair_one_by_one(p)
            };
            prop_assert_eq!(seal_roce_pair(&mut ga, &mut gb, one_by_one), Ok(()));
            prop_assert_eq!(&ga[..want[0].len()], &want[0][..]);
            prop_assert_eq!(&gb[..want[1].len()], &want[1][..]);
            prop_assert_eq!(&ga[want[0].len()..], &[0x5a; 3][..], "nothing past the packet");
            let long = want.iter().all(|f| f.len() > 260 && f[0] >> 4 == 4);
            prop_assert_eq!(asked, long, "the pair's hash is asked for two long IPv4 packets");
            // Checked together, as each alone; a flipped byte fails its
            // own frame only.
            prop_assert_eq!(icrc_matches_in_place_pair(&mut ga, &mut gb, crate::icrc::pair_one_by_one), [true, true]);
            let at = want[1].len() - 1 - (b_len % 7);
            gb[at] ^= 0x10;
            prop_assert_eq!(icrc_matches_in_place_pair(&mut ga, &mut gb, crate::icrc::pair_one_by_one), [true, false]);
            prop_assert_eq!(&ga[..want[0].len()], &want[0][..], "checked, not changed");
            gb[at] ^= 0x10;
            // Bytes that are no frame: an error, and neither changed.
            let mut bad = vec![0x75u8; 40];
            let before = ga.clone();
            prop_assert!(seal_roce_pair(&mut ga, &mut bad, |_| [0, 0]).is_err());
            prop_assert_eq!(&ga, &before);
        }

        #[test]
        fn parsing_after_a_frame_answers_as_parsing_alone(
            a in arb_roce(),
            b in arb_roce(),
            len in 0usize..40,
            other_len in 0usize..40,
            same_path: bool,
            cut: prop::sample::Index,
            flip: Option<(prop::sample::Index, u8)>,
        ) {
            // `b` follows `a` on `a`'s path (the headers alike where the
            // lengths are), or on its own.
            let b = if same_path { RoceRepr { ip: a.ip, src_port: a.src_port, ..b } } else { b };
            let (mut fa, mut fb) = (Vec::new(), Vec::new());
            a.emit_to_vec(&vec![1; len], &mut fa).unwrap();
            let b_len = if same_path && other_len % 2 == 0 { len } else { other_len };
            b.emit_to_vec(&vec![2; b_len], &mut fb).unwrap();
            let pa = parse_roce_emitted(&fa).unwrap();
            prop_assert_eq!(parse_roce_emitted_after(&fb, &fa, &pa), parse_roce_emitted(&fb));
            // Cut short, or with a byte changed, still the same answer.
            let n = cut.index(fb.len() + 1);
            prop_assert_eq!(parse_roce_emitted_after(&fb[..n], &fa, &pa), parse_roce_emitted(&fb[..n]));
            if let Some((at, x)) = flip {
                let i = at.index(fb.len());
                fb[i] ^= x;
                prop_assert_eq!(parse_roce_emitted_after(&fb, &fa, &pa), parse_roce_emitted(&fb));
            }
        }

        #[test]
        fn an_icrc_checked_in_place_answers_as_the_checked_parse(
            r in arb_roce(),
            len in 0usize..1200,
            cut: prop::sample::Index,
            flip: Option<(prop::sample::Index, u8)>,
        ) {
            let mut f = Vec::new();
            r.emit_to_vec(&vec![3; len], &mut f).unwrap();
            let whole = f.clone();
            prop_assert!(icrc_matches_in_place(&mut f));
            prop_assert_eq!(&f, &whole, "the frame is as it was");
            // Cut short, or with a byte changed: where it still matches, the
            // unchecked parse answers as the checked one.
            let n = cut.index(f.len() + 1);
            let mut g = f[..n].to_vec();
            if icrc_matches_in_place(&mut g) {
                prop_assert_eq!(parse_roce_emitted(&g), parse_roce(&g));
            }
            prop_assert_eq!(&g[..], &whole[..n]);
            if let Some((at, x)) = flip {
                let i = at.index(f.len());
                f[i] ^= x;
                let flipped = f.clone();
                let matches = icrc_matches_in_place(&mut f);
                prop_assert_eq!(&f, &flipped);
                if matches {
                    prop_assert_eq!(parse_roce_emitted(&f), parse_roce(&f));
                } else {
                    prop_assert!(parse_roce(&f).is_err());
                }
                // A change the ICRC covers (the payload, the BTH but its
                // FECN byte) never matches.
                let masked = r.ip.header_len() + 8 + 4;
                if x != 0 && i >= r.ip.header_len() + 8 && i != masked && i < f.len() - ICRC_LEN {
                    prop_assert!(!matches, "byte {} changed", i);
                }
            }
        }

        #[test]
        fn packets_back_to_back_are_found_by_their_lengths(
            rs in proptest::collection::vec((arb_roce(), 0usize..40), 1..5),
            tail in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let mut all = Vec::new();
            let mut lens = Vec::new();
            for (r, len) in &rs {
                let mut f = Vec::new();
                r.emit_to_vec(&vec![3; *len], &mut f).unwrap();
                lens.push(f.len());
                all.extend_from_slice(&f);
            }
            all.extend_from_slice(&tail);
            let mut at = 0;
            for want in lens {
                prop_assert_eq!(packet_len(&all[at..]), Ok(want));
                prop_assert_eq!(packet_len(&all[at..at + want - 1]), Err(Error::Truncated));
                at += want;
            }
        }

        #[test]
        fn sealing_bytes_that_are_no_frame_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let before = bytes.clone();
            if seal_roce(&mut bytes).is_err() {
                prop_assert_eq!(bytes, before);
            }
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_roce(&bytes);
        }

        #[test]
        fn corruption_is_caught(r in arb_roce(), payload in proptest::collection::vec(any::<u8>(), 0..40),
                                at: prop::sample::Index, flip in 1u8..=255) {
            let mut f = Vec::new();
            r.emit_to_vec(&payload, &mut f).unwrap();
            let i = at.index(f.len());
            f[i] ^= flip;
            if parse_roce(&f).is_ok() {
                prop_assert!(unprotected(&r.ip).contains(&i), "corruption at {} not detected", i);
            }
        }

        #[test]
        fn truncation_is_caught(r in arb_roce(), payload in proptest::collection::vec(any::<u8>(), 0..40),
                                at: prop::sample::Index) {
            let mut f = Vec::new();
            r.emit_to_vec(&payload, &mut f).unwrap();
            let n = at.index(f.len());
            prop_assert!(parse_roce(&f[..n]).is_err());
        }
    }
}
