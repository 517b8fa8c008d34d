//! UDP header (RFC 768) and its checksum over the IPv4/IPv6 pseudo-header.

use crate::checksum::{fold, ones_sum};
use crate::ipv4::IpProtocol;
use crate::{Error, Result, be16, fixed_view, set_be16};

/// Field offsets of the UDP header.
pub mod field {
    use crate::Field;

    /// Source port, BE16.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port, BE16.
    pub const DST_PORT: Field = 2..4;
    /// Length of header and payload, BE16.
    pub const LENGTH: Field = 4..6;
    /// Checksum, BE16 (0 = none, IPv4 only). The ICRC masks it.
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

fixed_view!(
    /// UDP header (RFC 768), 8 bytes.
    UdpHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> UdpHeader<T> {
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length of header and payload.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// True if the length field is zero (never valid).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpHeader<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::DST_PORT, v);
    }
    /// Sets the length of header and payload.
    pub fn set_len(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
}

/// Sums a UDP datagram, skipping its checksum field.
fn datagram_sum(acc: u64, datagram: &[u8]) -> u64 {
    match (
        datagram.get(..field::CHECKSUM.start),
        datagram.get(field::CHECKSUM.end..),
    ) {
        (Some(head), Some(tail)) => ones_sum(ones_sum(acc, head), tail),
        _ => ones_sum(acc, datagram),
    }
}

/// Finishes a UDP checksum: complement, and 0 goes out as 0xFFFF.
fn finish(acc: u64) -> u16 {
    match !fold(acc) {
        0 => 0xffff,
        c => c,
    }
}

/// The UDP checksum of `datagram` (header and payload, its length the UDP
/// length) over the IPv4 pseudo-header, computed as if the checksum field
/// were zero.
pub fn udp_checksum_ipv4(src: [u8; 4], dst: [u8; 4], datagram: &[u8]) -> u16 {
    let mut acc = ones_sum(0, &src);
    acc = ones_sum(acc, &dst);
    acc += u64::from(u8::from(IpProtocol::Udp));
    acc += datagram.len() as u64;
    finish(datagram_sum(acc, datagram))
}

/// The UDP checksum of `datagram` over the IPv6 pseudo-header (RFC 8200
/// §8.1), computed as if the checksum field were zero. Mandatory over IPv6.
pub fn udp_checksum_ipv6(src: [u8; 16], dst: [u8; 16], datagram: &[u8]) -> u16 {
    let mut acc = ones_sum(0, &src);
    acc = ones_sum(acc, &dst);
    acc += u64::from(u8::from(IpProtocol::Udp));
    acc += datagram.len() as u64;
    finish(datagram_sum(acc, datagram))
}

/// A parsed UDP header.
///
/// `parse` expects the view's buffer to hold the whole datagram and checks
/// the length field against it; it does not verify the checksum (for RoCEv2
/// the ICRC covers the same bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl UdpRepr {
    /// Parses a UDP view over a whole datagram.
    pub fn parse<T: AsRef<[u8]>>(h: &UdpHeader<T>) -> Result<Self> {
        h.check_len()?;
        let len = usize::from(h.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len > h.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(Self {
            src_port: h.src_port(),
            dst_port: h.dst_port(),
            payload_len: len - HEADER_LEN,
        })
    }

    /// Bytes `emit` writes: the header only.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with a zero checksum; fill it in afterwards with
    /// [`udp_checksum_ipv6`] (mandatory) or [`udp_checksum_ipv4`] (optional).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut UdpHeader<T>) {
        h.set_src_port(self.src_port);
        h.set_dst_port(self.dst_port);
        h.set_len((HEADER_LEN + self.payload_len) as u16);
        h.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GOLDEN: [u8; HEADER_LEN] = [0xc0, 0x01, 0x12, 0xb7, 0x00, 0x24, 0x00, 0x00];

    #[test]
    fn deconstruct_and_construct() {
        let mut dgram = [0u8; 0x24];
        dgram[..8].copy_from_slice(&GOLDEN);
        let h = UdpHeader::new_checked(&dgram[..]).unwrap();
        assert_eq!(h.src_port(), 0xc001);
        assert_eq!(h.dst_port(), 4791);
        assert_eq!(h.len(), 0x24);
        assert_eq!(h.checksum(), 0);
        let r = UdpRepr::parse(&h).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 0xc001,
                dst_port: 4791,
                payload_len: 0x1c
            }
        );
        assert_eq!(
            UdpRepr::parse(&UdpHeader::new_unchecked(&dgram[..0x23])),
            Err(Error::Truncated)
        );
        assert!(UdpHeader::new_checked(&GOLDEN[..7]).is_err());
        let mut buf = [0xa5u8; HEADER_LEN];
        r.emit(&mut UdpHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    #[test]
    fn checksum_v4_example() {
        // 10.0.0.1:1 -> 10.0.0.2:2, payload "ab": hand-computed one's sum.
        let dg = [0, 1, 0, 2, 0, 10, 0xde, 0xad, b'a', b'b'];
        // Pseudo: 0a00+0001+0a00+0002+0011+000a; header 0001+0002+000a; data 6162.
        let sum: u32 =
            0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 0x0011 + 0x000a + 0x0001 + 0x0002 + 0x000a + 0x6162;
        let expect = !((sum & 0xffff) + (sum >> 16)) as u16;
        assert_eq!(udp_checksum_ipv4([10, 0, 0, 1], [10, 0, 0, 2], &dg), expect);
    }

    proptest! {
        #[test]
        fn roundtrip(src_port: u16, dst_port: u16, len in 0usize..64) {
            let r = UdpRepr { src_port, dst_port, payload_len: len };
            let mut buf = [0u8; 72];
            r.emit(&mut UdpHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(UdpRepr::parse(&UdpHeader::new_checked(&buf[..]).unwrap()), Ok(r));
        }

        #[test]
        fn checksum_verifies(src: [u8; 16], dst: [u8; 16], data in proptest::collection::vec(any::<u8>(), 8..64)) {
            // Filling the checksum in makes the whole sum (pseudo-header
            // included) come out as all ones.
            let mut d = data;
            let c = udp_checksum_ipv6(src, dst, &d);
            d[6..8].copy_from_slice(&c.to_be_bytes());
            let mut acc = ones_sum(0, &src);
            acc = ones_sum(acc, &dst);
            acc += 17 + d.len() as u64;
            acc = ones_sum(acc, &d);
            prop_assert_eq!(fold(acc), 0xffff);
        }
    }
}
