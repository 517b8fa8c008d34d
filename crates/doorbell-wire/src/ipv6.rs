//! IPv6 header (RFC 8200 §3), without extension headers.

use crate::ipv4::IpProtocol;
use crate::{Error, Result, be16, be32, fixed_view, set_be16, set_be32};

/// Field offsets of the IPv6 header.
pub mod field {
    use crate::Field;

    /// Version (bits 31..28), traffic class (27..20), flow label (19..0), BE32.
    /// The ICRC masks everything but the version.
    pub const VER_TC_FLOW: Field = 0..4;
    /// Shift of the version in [`VER_TC_FLOW`].
    pub const VERSION_SHIFT: u32 = 28;
    /// Shift of the traffic class in [`VER_TC_FLOW`].
    pub const TC_SHIFT: u32 = 20;
    /// Mask of the flow label in [`VER_TC_FLOW`].
    pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;
    /// Payload length (bytes after this header), BE16.
    pub const PAYLOAD_LEN: Field = 4..6;
    /// Next header (protocol of the payload).
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit. The ICRC masks it.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC_ADDR: Field = 8..24;
    /// Destination address.
    pub const DST_ADDR: Field = 24..40;
}

/// Length of the IPv6 header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Largest payload a single IPv6 packet can carry without a jumbogram.
pub const MAX_PAYLOAD_LEN: usize = u16::MAX as usize;

fixed_view!(
    /// IPv6 header (RFC 8200 §3), 40 bytes.
    Ipv6Header,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> Ipv6Header<T> {
    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// IP version (6).
    pub fn version(&self) -> u8 {
        (self.word0() >> field::VERSION_SHIFT) as u8
    }
    /// Traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> field::TC_SHIFT) as u8
    }
    /// ECN code point (0 not ECT, 1/2 ECT, 3 CE).
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & crate::ipv4::field::ECN_MASK
    }
    /// Flow label, 20 bits.
    pub fn flow_label(&self) -> u32 {
        self.word0() & field::FLOW_LABEL_MASK
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }
    /// Next header.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::NEXT_HEADER])
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        a
    }
    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        a
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Header<T> {
    /// Sets version, traffic class and flow label (the first word).
    pub fn set_ver_tc_flow(&mut self, version: u8, traffic_class: u8, flow_label: u32) {
        let v = (u32::from(version & 0x0f) << field::VERSION_SHIFT)
            | (u32::from(traffic_class) << field::TC_SHIFT)
            | (flow_label & field::FLOW_LABEL_MASK);
        set_be32(self.buffer.as_mut(), field::VER_TC_FLOW, v);
    }
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::PAYLOAD_LEN, v);
    }
    /// Sets the next header.
    pub fn set_next_header(&mut self, v: IpProtocol) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v.into();
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&v);
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&v);
    }
}

/// A parsed IPv6 header.
///
/// `parse` expects the view's buffer to hold the whole packet: it checks the
/// version and that the payload length fits the buffer. The next header
/// passes through unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: [u8; 16],
    /// Destination address.
    pub dst_addr: [u8; 16],
    /// Next header.
    pub next_header: IpProtocol,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label, 20 bits (`emit` keeps the low 20).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Bytes after the header (at most [`MAX_PAYLOAD_LEN`]).
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Parses an IPv6 view over a whole packet.
    pub fn parse<T: AsRef<[u8]>>(h: &Ipv6Header<T>) -> Result<Self> {
        h.check_len()?;
        if h.version() != 6 {
            return Err(Error::BadIpVersion);
        }
        let payload_len = usize::from(h.payload_len());
        if HEADER_LEN + payload_len > h.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(Self {
            src_addr: h.src_addr(),
            dst_addr: h.dst_addr(),
            next_header: h.next_header(),
            traffic_class: h.traffic_class(),
            flow_label: h.flow_label(),
            hop_limit: h.hop_limit(),
            payload_len,
        })
    }

    /// Bytes `emit` writes: the header only.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 40-byte header. `payload_len` must not exceed
    /// [`MAX_PAYLOAD_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Ipv6Header<T>) {
        h.set_ver_tc_flow(6, self.traffic_class, self.flow_label);
        h.set_payload_len(self.payload_len as u16);
        h.set_next_header(self.next_header);
        h.set_hop_limit(self.hop_limit);
        h.set_src_addr(self.src_addr);
        h.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GOLDEN: [u8; HEADER_LEN] = [
        0x6a, 0xb1, 0x23, 0x45, 0x00, 0x10, 0x11, 0x40, // ver 6, tc 0xab, fl 0x12345
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src fd00::1
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, // dst fd00::2
    ];

    fn addr(last: u8) -> [u8; 16] {
        let mut a = [0; 16];
        a[0] = 0xfd;
        a[15] = last;
        a
    }

    fn golden_repr() -> Ipv6Repr {
        Ipv6Repr {
            src_addr: addr(1),
            dst_addr: addr(2),
            next_header: IpProtocol::Udp,
            traffic_class: 0xab,
            flow_label: 0x12345,
            hop_limit: 64,
            payload_len: 16,
        }
    }

    #[test]
    fn deconstruct() {
        let h = Ipv6Header::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(h.version(), 6);
        assert_eq!(h.traffic_class(), 0xab);
        assert_eq!(h.ecn(), 3);
        assert_eq!(h.flow_label(), 0x12345);
        assert_eq!(h.payload_len(), 16);
        assert_eq!(h.next_header(), IpProtocol::Udp);
        assert_eq!(h.hop_limit(), 64);
        assert_eq!(h.src_addr(), addr(1));
        assert_eq!(h.dst_addr(), addr(2));
        let mut pkt = [0u8; HEADER_LEN + 16];
        pkt[..HEADER_LEN].copy_from_slice(&GOLDEN);
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Header::new_checked(&pkt[..]).unwrap()),
            Ok(golden_repr())
        );
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Header::new_checked(&pkt[..55]).unwrap()),
            Err(Error::Truncated)
        );
        pkt[0] = 0x4a;
        assert_eq!(
            Ipv6Repr::parse(&Ipv6Header::new_checked(&pkt[..]).unwrap()),
            Err(Error::BadIpVersion)
        );
        assert!(Ipv6Header::new_checked(&GOLDEN[..39]).is_err());
    }

    #[test]
    fn construct_writes_every_byte() {
        let mut buf = [0xa5u8; HEADER_LEN];
        golden_repr().emit(&mut Ipv6Header::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    proptest! {
        #[test]
        fn roundtrip(src: [u8; 16], dst: [u8; 16], nh: u8, tc: u8, fl in 0u32..0x10_0000, hl: u8, len in 0usize..100) {
            let r = Ipv6Repr {
                src_addr: src, dst_addr: dst, next_header: IpProtocol::from(nh), traffic_class: tc,
                flow_label: fl, hop_limit: hl, payload_len: len,
            };
            let mut buf = [0u8; HEADER_LEN + 100];
            r.emit(&mut Ipv6Header::new_unchecked(&mut buf[..]));
            prop_assert_eq!(Ipv6Repr::parse(&Ipv6Header::new_checked(&buf[..]).unwrap()), Ok(r));
        }
    }
}
