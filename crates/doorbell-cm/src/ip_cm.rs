//! The RDMA IP CM Service (IBA annex A11) as `rdma_cm` uses it: the header
//! it puts first in the private data of a REQ or SIDR_REQ, and the service
//! IDs of its port spaces (the kernel's `struct cma_hdr`,
//! `cma_format_hdr` and `rdma_get_service_id` in
//! `drivers/infiniband/core/cma.c`; `enum rdma_ucm_port_space` in
//! `include/uapi/rdma/rdma_user_cm.h`; librdmacm's `struct ib_connect_hdr`
//! in rdma-core's `librdmacm/cma.h` and the `RDMA_IB_IP_PS_*` constants in
//! `librdmacm/rdma_cma.h`).
//!
//! The header tells the passive side which IP addresses and source port
//! the active side connects from and to, since a CM MAD carries none. An
//! IPv4 address fills the last 4 bytes of its 16-byte slot and the first 12
//! are zero (the kernel's `union cma_ip_addr`): *not* the IPv4-mapped form
//! a GID uses.
//!
//! The service ID names the listener: `(port_space << 16) | port`, e.g.
//! `0x0000_0000_0106_4e20` for TCP port space, port 20000.

use core::net::{Ipv4Addr, Ipv6Addr};

use crate::{Error, Result, array, be16, enum_with_unknown, fixed_view, set_be16};

/// Field offsets of the IP CM header, from the start of the private data.
pub mod field {
    use crate::{Bits, Field};

    /// CM version (`cma_version`; annex A11 splits it into major and minor
    /// nibbles), 0.
    pub const VERSION: usize = 0;
    /// IP version, 4 bits: 4 or 6.
    pub const IP_VERSION: Bits = Bits::new(1, 4, 4);
    /// Source port, BE16.
    pub const SRC_PORT: Field = 2..4;
    /// Source IP address, 16 bytes.
    pub const SRC_ADDR: Field = 4..20;
    /// Destination IP address, 16 bytes.
    pub const DST_ADDR: Field = 20..36;
    /// Where an IPv4 address sits in its 16-byte slot.
    pub const V4_IN_SLOT: Field = 12..16;
}

/// Length of the IP CM header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;
/// The header's version (`CMA_VERSION`).
pub const CMA_VERSION: u8 = 0x00;
/// Private data left for the application in a REQ after the header: what
/// `rdma_connect` accepts on IB and RoCE.
pub const REQ_USER_PRIVATE_DATA_LEN: usize = crate::req::PRIVATE_DATA_LEN - HEADER_LEN;
/// Private data left for the application in a SIDR_REQ after the header.
pub const SIDR_REQ_USER_PRIVATE_DATA_LEN: usize = crate::sidr::REQ_PRIVATE_DATA_LEN - HEADER_LEN;

/// Service IDs of the IP CM service: bits 63..24 are
/// `0x0000_0000_01` (`IB_CMA_SERVICE_ID`, under [`CMA_SERVICE_ID_MASK`]).
pub const CMA_SERVICE_ID: u64 = 0x0000_0000_0100_0000;
/// The bits of a service ID that mark it as the IP CM service's.
pub const CMA_SERVICE_ID_MASK: u64 = 0xffff_ffff_ff00_0000;

/// The bits of an `rdma_cm` service ID that name the port space
/// (`RDMA_IB_IP_PS_MASK`).
pub const RDMA_IB_IP_PS_MASK: u64 = 0xffff_ffff_ffff_0000;
/// Service ID of the TCP port space, port 0 (`RDMA_IB_IP_PS_TCP`).
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
/// Service ID of the UDP port space, port 0 (`RDMA_IB_IP_PS_UDP`).
pub const RDMA_IB_IP_PS_UDP: u64 = 0x0000_0000_0111_0000;
/// Service ID of the IB port space, port 0 (`RDMA_IB_PS_IB`).
pub const RDMA_IB_PS_IB: u64 = 0x0000_0000_013f_0000;
/// The Q_Key `rdma_cm` gives UD QPs of the UDP and IB port spaces, which a
/// SIDR_REP carries (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

enum_with_unknown! {
    /// `rdma_cm` port space (`enum rdma_ucm_port_space`): bits 31..16 of the
    /// service ID.
    pub enum PortSpace(u16) {
        /// IPoIB (`RDMA_PS_IPOIB`).
        Ipoib = 0x0002,
        /// Connected, reliable: RC QPs (`RDMA_PS_TCP`).
        Tcp = 0x0106,
        /// Datagrams: UD QPs, resolved by SIDR (`RDMA_PS_UDP`).
        Udp = 0x0111,
        /// Native IB, either QP type (`RDMA_PS_IB`).
        Ib = 0x013f,
    }
}

/// The service ID `rdma_cm` listens on and connects to for `port` in port
/// space `ps`.
pub fn service_id(ps: PortSpace, port: u16) -> u64 {
    (u64::from(u16::from(ps)) << 16) | u64::from(port)
}

/// The port space and port of an `rdma_cm` service ID, if it is one (bits
/// 63..32 are zero).
pub fn service_id_parts(sid: u64) -> Option<(PortSpace, u16)> {
    (sid >> 32 == 0).then(|| (PortSpace::from((sid >> 16) as u16), sid as u16))
}

fixed_view!(
    /// The IP CM header at the start of a REQ's or SIDR_REQ's private data
    /// (IBA annex A11), 36 bytes.
    CmaHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> CmaHeader<T> {
    /// CM version byte.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    /// IP version nibble.
    pub fn ip_version(&self) -> u8 {
        field::IP_VERSION.get(self.buffer.as_ref())
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Source address slot, raw.
    pub fn src_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::SRC_ADDR)
    }
    /// Destination address slot, raw.
    pub fn dst_addr(&self) -> [u8; 16] {
        array(self.buffer.as_ref(), field::DST_ADDR)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmaHeader<T> {
    /// Sets the CM version byte.
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    /// Sets the IP version nibble and clears the reserved one.
    pub fn set_ip_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::IP_VERSION.byte] = 0;
        field::IP_VERSION.set(self.buffer.as_mut(), v);
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    /// Sets the source address slot.
    pub fn set_src_addr(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&v);
    }
    /// Sets the destination address slot.
    pub fn set_dst_addr(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&v);
    }
}

/// The addresses of an IP CM header: both of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmaAddrs {
    /// IPv4 (IP version 4).
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
    /// IPv6 (IP version 6).
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
    },
}

/// An IPv4 address in its 16-byte slot: 12 zero bytes, then the address.
fn v4_slot(a: Ipv4Addr) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[field::V4_IN_SLOT].copy_from_slice(&a.octets());
    s
}

fn v4_of_slot(s: [u8; 16]) -> Ipv4Addr {
    Ipv4Addr::from(array::<4>(&s, field::V4_IN_SLOT))
}

/// A parsed IP CM header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeaderRepr {
    /// The active side's source port.
    pub src_port: u16,
    /// Source and destination addresses.
    pub addrs: CmaAddrs,
}

impl CmaHeaderRepr {
    /// Parses a header view: [`Error::Malformed`] unless the version is
    /// [`CMA_VERSION`] and the IP version 4 or 6. For IPv4, the first 12
    /// bytes of each slot are ignored (the kernel reads only the last 4).
    pub fn parse<T: AsRef<[u8]>>(h: &CmaHeader<T>) -> Result<Self> {
        h.check_len()?;
        if h.version() != CMA_VERSION {
            return Err(Error::Malformed);
        }
        let addrs = match h.ip_version() {
            4 => CmaAddrs::V4 {
                src: v4_of_slot(h.src_addr()),
                dst: v4_of_slot(h.dst_addr()),
            },
            6 => CmaAddrs::V6 {
                src: Ipv6Addr::from(h.src_addr()),
                dst: Ipv6Addr::from(h.dst_addr()),
            },
            _ => return Err(Error::Malformed),
        };
        Ok(Self {
            src_port: h.src_port(),
            addrs,
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 36-byte header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut CmaHeader<T>) {
        h.set_version(CMA_VERSION);
        h.set_src_port(self.src_port);
        let (v, src, dst) = match self.addrs {
            CmaAddrs::V4 { src, dst } => (4, v4_slot(src), v4_slot(dst)),
            CmaAddrs::V6 { src, dst } => (6, src.octets(), dst.octets()),
        };
        h.set_ip_version(v);
        h.set_src_addr(src);
        h.set_dst_addr(dst);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_addrs() -> impl Strategy<Value = CmaAddrs> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(s, d)| CmaAddrs::V4 {
                src: Ipv4Addr::from(s),
                dst: Ipv4Addr::from(d)
            }),
            (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(s, d)| CmaAddrs::V6 {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d)
            }),
        ]
    }

    #[test]
    fn ipv4_sits_in_the_last_four_bytes() {
        let r = CmaHeaderRepr {
            src_port: 0xc350,
            addrs: CmaAddrs::V4 {
                src: Ipv4Addr::new(192, 0, 2, 1),
                dst: Ipv4Addr::new(192, 0, 2, 2),
            },
        };
        let mut golden = [0u8; HEADER_LEN];
        golden[..4].copy_from_slice(&[0x00, 0x40, 0xc3, 0x50]);
        golden[16..20].copy_from_slice(&[192, 0, 2, 1]);
        golden[32..36].copy_from_slice(&[192, 0, 2, 2]);
        let mut buf = [0xa5u8; HEADER_LEN];
        r.emit(&mut CmaHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
        assert_eq!(
            CmaHeaderRepr::parse(&CmaHeader::new_checked(&golden[..]).unwrap()),
            Ok(r)
        );
        assert!(CmaHeader::new_checked(&golden[..35]).is_err());
        golden[1] = 0x50;
        assert_eq!(
            CmaHeaderRepr::parse(&CmaHeader::new_unchecked(&golden[..])),
            Err(Error::Malformed)
        );
        golden[1] = 0x40;
        golden[0] = 1;
        assert_eq!(
            CmaHeaderRepr::parse(&CmaHeader::new_unchecked(&golden[..])),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn service_ids_are_the_kernels() {
        assert_eq!(service_id(PortSpace::Tcp, 0), RDMA_IB_IP_PS_TCP);
        assert_eq!(service_id(PortSpace::Udp, 0), RDMA_IB_IP_PS_UDP);
        assert_eq!(service_id(PortSpace::Ib, 0), RDMA_IB_PS_IB);
        assert_eq!(
            service_id(PortSpace::Tcp, 0xffff) & RDMA_IB_IP_PS_MASK,
            RDMA_IB_IP_PS_TCP
        );
        assert_eq!(service_id(PortSpace::Tcp, 20000), 0x0000_0000_0106_4e20);
        let sid = service_id(PortSpace::Tcp, 20000);
        assert_eq!(sid & CMA_SERVICE_ID_MASK, CMA_SERVICE_ID);
        assert_eq!(service_id_parts(sid), Some((PortSpace::Tcp, 20000)));
        assert_eq!(service_id_parts(0x0200_0000_0000_0001), None);
        assert_eq!(REQ_USER_PRIVATE_DATA_LEN, 56);
        assert_eq!(SIDR_REQ_USER_PRIVATE_DATA_LEN, 180);
    }

    proptest! {
        #[test]
        fn roundtrip(src_port: u16, addrs in arb_addrs()) {
            let r = CmaHeaderRepr { src_port, addrs };
            let mut buf = [0xa5u8; HEADER_LEN];
            r.emit(&mut CmaHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[1] & 0x0f, 0);
            if let CmaAddrs::V4 { .. } = addrs {
                prop_assert_eq!(&buf[4..16], &[0u8; 12]);
                prop_assert_eq!(&buf[20..32], &[0u8; 12]);
            }
            prop_assert_eq!(CmaHeaderRepr::parse(&CmaHeader::new_unchecked(&buf[..])), Ok(r));
        }

        #[test]
        fn service_id_roundtrip(ps: u16, port: u16) {
            let ps = PortSpace::from(ps);
            prop_assert_eq!(service_id_parts(service_id(ps, port)), Some((ps, port)));
        }
    }
}
