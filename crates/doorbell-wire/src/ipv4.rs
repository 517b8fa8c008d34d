//! IPv4 header (RFC 791), without options: RoCEv2 never sends them.

use crate::checksum::internet_checksum;
use crate::{Error, Result, be16, enum_with_unknown, fixed_view, set_be16};

/// Field offsets of the IPv4 header.
pub mod field {
    use crate::Field;

    /// Version (bits 7..4) and IHL in 32-bit words (bits 3..0).
    pub const VER_IHL: usize = 0;
    /// DSCP (bits 7..2) and ECN (bits 1..0): the old TOS byte. The ICRC masks it.
    pub const DSCP_ECN: usize = 1;
    /// Mask of the ECN bits in [`DSCP_ECN`].
    pub const ECN_MASK: u8 = 0x03;
    /// Total length of the packet, header included, BE16.
    pub const TOTAL_LEN: Field = 2..4;
    /// Identification, BE16.
    pub const IDENT: Field = 4..6;
    /// Flags (bits 15..13) and fragment offset (bits 12..0, 8-byte units), BE16.
    pub const FLAGS_FRAG: Field = 6..8;
    /// Don't Fragment flag in [`FLAGS_FRAG`].
    pub const DF_FLAG: u16 = 0x4000;
    /// More Fragments flag in [`FLAGS_FRAG`].
    pub const MF_FLAG: u16 = 0x2000;
    /// Mask of the fragment offset in [`FLAGS_FRAG`].
    pub const FRAG_OFFSET_MASK: u16 = 0x1fff;
    /// Time to live. The ICRC masks it.
    pub const TTL: usize = 8;
    /// Protocol of the payload.
    pub const PROTOCOL: usize = 9;
    /// Header checksum, BE16. The ICRC masks it.
    pub const CHECKSUM: Field = 10..12;
    /// Source address.
    pub const SRC_ADDR: Field = 12..16;
    /// Destination address.
    pub const DST_ADDR: Field = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Largest payload a single IPv4 packet can carry.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize - HEADER_LEN;

enum_with_unknown! {
    /// IP protocol number (IPv4 Protocol, IPv6 Next Header).
    pub enum IpProtocol(u8) {
        /// ICMP.
        Icmp = 1,
        /// TCP.
        Tcp = 6,
        /// UDP, which carries RoCEv2.
        Udp = 17,
        /// ICMPv6.
        Icmpv6 = 58,
    }
}

fixed_view!(
    /// IPv4 header (RFC 791 §3.1), 20 bytes; options, if any, follow and
    /// are not covered by the view.
    Ipv4Header,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> Ipv4Header<T> {
    /// IP version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP and ECN (the TOS byte).
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }
    /// ECN code point (0 not ECT, 1/2 ECT, 3 CE).
    pub fn ecn(&self) -> u8 {
        self.dscp_ecn() & field::ECN_MASK
    }
    /// Total length in bytes, header included.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TOTAL_LEN)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & field::DF_FLAG != 0
    }
    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & field::MF_FLAG != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & field::FRAG_OFFSET_MASK
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }
    /// Header checksum.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        a
    }
    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 4] {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        a
    }
    /// True if the header checksum verifies over [`Self::header_len`] bytes
    /// (false if the buffer is shorter than that or IHL is below 5).
    pub fn verify_checksum(&self) -> bool {
        let hl = self.header_len();
        match self.buffer.as_ref().get(..hl) {
            Some(h) if hl >= HEADER_LEN => internet_checksum(h) == 0,
            _ => false,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Header<T> {
    /// Sets the version nibble, keeping IHL.
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }
    /// Sets IHL from a header length in bytes (a multiple of 4, at most 60),
    /// keeping the version. Invalidates `verify_checksum` and the length
    /// checks of `Ipv4Repr::parse`.
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }
    /// Sets DSCP and ECN.
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }
    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::TOTAL_LEN, v);
    }
    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::IDENT, v);
    }
    /// Sets the flags and fragment offset word (the reserved flag is cleared).
    pub fn set_flags_frag(&mut self, dont_frag: bool, more_frags: bool, frag_offset: u16) {
        let mut v = frag_offset & field::FRAG_OFFSET_MASK;
        if dont_frag {
            v |= field::DF_FLAG;
        }
        if more_frags {
            v |= field::MF_FLAG;
        }
        set_be16(self.buffer.as_mut(), field::FLAGS_FRAG, v);
    }
    /// Sets the time to live.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: IpProtocol) {
        self.buffer.as_mut()[field::PROTOCOL] = v.into();
    }
    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&v);
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&v);
    }
    /// Computes and stores the header checksum over [`Self::header_len`]
    /// bytes (over the fixed 20 if IHL is out of range for the buffer).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let buf = self.buffer.as_ref();
        let hdr = match buf.get(..hl) {
            Some(h) if hl >= HEADER_LEN => h,
            _ => &buf[..HEADER_LEN],
        };
        let c = internet_checksum(hdr);
        self.set_checksum(c);
    }
}

/// A parsed IPv4 header.
///
/// `parse` expects the view's buffer to hold the whole packet: it checks the
/// version, rejects options and fragments ([`Error::Unsupported`]), checks
/// that the total length fits the buffer and verifies the checksum. The
/// protocol is a demultiplexing field and passes through unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: [u8; 4],
    /// Destination address.
    pub dst_addr: [u8; 4],
    /// Protocol of the payload.
    pub protocol: IpProtocol,
    /// DSCP and ECN (the TOS byte).
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment flag.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Bytes after the header (at most [`MAX_PAYLOAD_LEN`]).
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses an IPv4 view over a whole packet.
    pub fn parse<T: AsRef<[u8]>>(h: &Ipv4Header<T>) -> Result<Self> {
        h.check_len()?;
        if h.version() != 4 {
            return Err(Error::BadIpVersion);
        }
        if h.header_len() < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if h.header_len() > HEADER_LEN || h.more_frags() || h.frag_offset() != 0 {
            return Err(Error::Unsupported);
        }
        let total = usize::from(h.total_len());
        if total < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if total > h.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        if !h.verify_checksum() {
            return Err(Error::BadIpChecksum);
        }
        Ok(Self {
            src_addr: h.src_addr(),
            dst_addr: h.dst_addr(),
            protocol: h.protocol(),
            dscp_ecn: h.dscp_ecn(),
            ident: h.ident(),
            dont_frag: h.dont_frag(),
            ttl: h.ttl(),
            payload_len: total - HEADER_LEN,
        })
    }

    /// Bytes `emit` writes: the header only.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 20-byte header, checksum included. `payload_len` must not
    /// exceed [`MAX_PAYLOAD_LEN`] (the total length would wrap).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ipv4Header<T>) {
        let total_len = (HEADER_LEN + self.payload_len) as u16;
        h.set_version(4);
        h.set_header_len(HEADER_LEN);
        h.set_dscp_ecn(self.dscp_ecn);
        h.set_total_len(total_len);
        h.set_ident(self.ident);
        h.set_flags_frag(self.dont_frag, false, 0);
        h.set_ttl(self.ttl);
        h.set_protocol(self.protocol);
        h.set_src_addr(self.src_addr);
        h.set_dst_addr(self.dst_addr);
        h.set_checksum(self.checksum(total_len));
    }

    /// The header checksum, summed from the fields rather than read back
    /// from the bytes just written (a load that spans several narrower
    /// stores waits for them to reach the cache).
    fn checksum(&self, total_len: u16) -> u16 {
        let [s0, s1, s2, s3] = self.src_addr;
        let [d0, d1, d2, d3] = self.dst_addr;
        let word = |hi: u8, lo: u8| u64::from(u16::from_be_bytes([hi, lo]));
        let flags = if self.dont_frag { field::DF_FLAG } else { 0 };
        let sum = word(0x40 | (HEADER_LEN / 4) as u8, self.dscp_ecn)
            + u64::from(total_len)
            + u64::from(self.ident)
            + u64::from(flags)
            + word(self.ttl, self.protocol.into())
            + word(s0, s1)
            + word(s2, s3)
            + word(d0, d1)
            + word(d2, d3);
        !crate::checksum::fold(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // 192.168.0.1 -> 192.168.0.199, UDP, 0x73 bytes total, DF, TTL 64
    // (the classic example from Wikipedia's "IPv4 header checksum").
    const GOLDEN: [u8; HEADER_LEN] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn golden_repr() -> Ipv4Repr {
        Ipv4Repr {
            src_addr: [192, 168, 0, 1],
            dst_addr: [192, 168, 0, 199],
            protocol: IpProtocol::Udp,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            payload_len: 0x73 - 20,
        }
    }

    #[test]
    fn deconstruct() {
        let h = Ipv4Header::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(h.version(), 4);
        assert_eq!(h.header_len(), 20);
        assert_eq!(h.dscp_ecn(), 0);
        assert_eq!(h.total_len(), 0x73);
        assert_eq!(h.ident(), 0);
        assert!(h.dont_frag());
        assert!(!h.more_frags());
        assert_eq!(h.frag_offset(), 0);
        assert_eq!(h.ttl(), 64);
        assert_eq!(h.protocol(), IpProtocol::Udp);
        assert_eq!(h.checksum(), 0xb861);
        assert!(h.verify_checksum());
        assert_eq!(h.src_addr(), [192, 168, 0, 1]);
        assert_eq!(h.dst_addr(), [192, 168, 0, 199]);
        let mut pkt = [0u8; 0x73];
        pkt[..20].copy_from_slice(&GOLDEN);
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Header::new_checked(&pkt[..]).unwrap()),
            Ok(golden_repr())
        );
    }

    #[test]
    fn construct_writes_every_byte() {
        let mut buf = [0xa5u8; HEADER_LEN];
        golden_repr().emit(&mut Ipv4Header::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn parse_errors() {
        let mut pkt = [0u8; 0x73];
        pkt[..20].copy_from_slice(&GOLDEN);
        let parse = |b: &[u8]| Ipv4Repr::parse(&Ipv4Header::new_unchecked(b));
        assert_eq!(parse(&pkt[..0x72]), Err(Error::Truncated));
        assert_eq!(parse(&pkt[..19]), Err(Error::Truncated));
        let mut bad = pkt;
        bad[0] = 0x65;
        assert_eq!(parse(&bad), Err(Error::BadIpVersion));
        bad = pkt;
        bad[0] = 0x46;
        assert_eq!(parse(&bad), Err(Error::Unsupported));
        bad = pkt;
        bad[0] = 0x44;
        assert_eq!(parse(&bad), Err(Error::Malformed));
        bad = pkt;
        bad[6] = 0x20; // MF
        assert_eq!(parse(&bad), Err(Error::Unsupported));
        bad = pkt;
        bad[8] = 63;
        assert_eq!(parse(&bad), Err(Error::BadIpChecksum));
    }

    proptest! {
        #[test]
        fn roundtrip(src: [u8; 4], dst: [u8; 4], proto: u8, tos: u8, ident: u16, df: bool, ttl: u8, len in 0usize..200) {
            let r = Ipv4Repr {
                src_addr: src, dst_addr: dst, protocol: IpProtocol::from(proto), dscp_ecn: tos,
                ident, dont_frag: df, ttl, payload_len: len,
            };
            let mut buf = [0u8; 220];
            r.emit(&mut Ipv4Header::new_unchecked(&mut buf[..]));
            prop_assert_eq!(Ipv4Repr::parse(&Ipv4Header::new_checked(&buf[..]).unwrap()), Ok(r));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let h = Ipv4Header::new_unchecked(&bytes[..]);
            let _ = Ipv4Repr::parse(&h);
            let _ = h.check_len().map(|()| h.verify_checksum());
        }
    }
}
