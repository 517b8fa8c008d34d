//! Ethernet II header (IEEE 802.3 §3.2, DIX framing), for captures and tools;
//! the frames [`crate::roce`] handles start at the IP header.

use crate::{Result, be16, enum_with_unknown, fixed_view, set_be16};

/// Field offsets of the Ethernet II header.
pub mod field {
    use crate::Field;

    /// Destination MAC address.
    pub const DST: Field = 0..6;
    /// Source MAC address.
    pub const SRC: Field = 6..12;
    /// EtherType, BE16.
    pub const ETHERTYPE: Field = 12..14;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;

enum_with_unknown! {
    /// EtherType of the payload.
    pub enum EtherType(u16) {
        /// IPv4.
        Ipv4 = 0x0800,
        /// ARP.
        Arp = 0x0806,
        /// IPv6.
        Ipv6 = 0x86dd,
        /// RoCE v1 (IB GRH directly over Ethernet).
        RoceV1 = 0x8915,
    }
}

fixed_view!(
    /// Ethernet II header, 14 bytes, no VLAN tag.
    EthernetHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> EthernetHeader<T> {
    /// Destination MAC address.
    pub fn dst(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }
    /// Source MAC address.
    pub fn src(&self) -> [u8; 6] {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }
    /// EtherType.
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(be16(self.buffer.as_ref(), field::ETHERTYPE))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetHeader<T> {
    /// Sets the destination MAC address.
    pub fn set_dst(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&v);
    }
    /// Sets the source MAC address.
    pub fn set_src(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&v);
    }
    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, v: EtherType) {
        set_be16(self.buffer.as_mut(), field::ETHERTYPE, v.into());
    }
}

/// A parsed Ethernet II header. The EtherType is a demultiplexing field, so
/// `parse` passes unknown values through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// Source MAC address.
    pub src: [u8; 6],
    /// EtherType.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Parses an Ethernet II view.
    pub fn parse<T: AsRef<[u8]>>(h: &EthernetHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self {
            dst: h.dst(),
            src: h.src(),
            ethertype: h.ethertype(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut EthernetHeader<T>) {
        h.set_dst(self.dst);
        h.set_src(self.src);
        h.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GOLDEN: [u8; HEADER_LEN] = [0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];

    #[test]
    fn deconstruct_and_construct() {
        let h = EthernetHeader::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(h.dst(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(h.src(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(h.ethertype(), EtherType::Ipv4);
        assert!(EthernetHeader::new_checked(&GOLDEN[..13]).is_err());
        let mut buf = [0xa5u8; HEADER_LEN];
        EthernetRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            ethertype: EtherType::Ipv4,
        }
        .emit(&mut EthernetHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    proptest! {
        #[test]
        fn roundtrip(dst: [u8; 6], src: [u8; 6], et: u16) {
            let r = EthernetRepr { dst, src, ethertype: EtherType::from(et) };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut EthernetHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(EthernetRepr::parse(&EthernetHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
