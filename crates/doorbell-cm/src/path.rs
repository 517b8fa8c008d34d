//! The 44-byte path information a REQ carries twice, for the primary and
//! the alternate path (IBA Vol 1 §12.6.5, Table 106, bytes 52–95 and
//! 96–139; the kernel's `CM_REQ_PRIMARY_*` / `CM_REQ_ALTERNATE_*`).
//!
//! On RoCEv2 the LIDs are 0 and the GIDs are the IP addresses
//! (`::ffff:a.b.c.d` for IPv4); flow label, traffic class and hop limit go
//! into the IP header.

use doorbell_wire::Gid;

use crate::{Result, array, be16, be32, fixed_view, set_be16, set_be32};

/// Field offsets of the path information, from its first byte.
pub mod field {
    use crate::{Bits, Field};

    /// Local port LID, BE16.
    pub const LOCAL_LID: Field = 0..2;
    /// Remote port LID, BE16.
    pub const REMOTE_LID: Field = 2..4;
    /// Local port GID, 16 bytes.
    pub const LOCAL_GID: Field = 4..20;
    /// Remote port GID, 16 bytes.
    pub const REMOTE_GID: Field = 20..36;
    /// BE32 word: flow label in bits 31..12, 6 reserved bits, packet rate in
    /// bits 5..0.
    pub const FLOW_LABEL_WORD: Field = 36..40;
    /// Shift of the flow label in [`FLOW_LABEL_WORD`].
    pub const FLOW_LABEL_SHIFT: u32 = 12;
    /// Largest flow label (20 bits).
    pub const FLOW_LABEL_MAX: u32 = 0xf_ffff;
    /// Packet rate (IBA rate code, 6 bits).
    pub const PACKET_RATE: Bits = Bits::new(39, 0, 6);
    /// Traffic class.
    pub const TRAFFIC_CLASS: usize = 40;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 41;
    /// Service level, 4 bits.
    pub const SL: Bits = Bits::new(42, 4, 4);
    /// Subnet local: the path stays in the local subnet.
    pub const SUBNET_LOCAL: Bits = Bits::new(42, 3, 1);
    /// Local ACK timeout, 5 bits (4.096 µs × 2^n).
    pub const LOCAL_ACK_TIMEOUT: Bits = Bits::new(43, 3, 5);
}

/// Length of the path information.
pub const PATH_LEN: usize = 44;

fixed_view!(
    /// The path information of a REQ (IBA Vol 1 §12.6.5), 44 bytes.
    PathInfo,
    PATH_LEN
);

impl<T: AsRef<[u8]>> PathInfo<T> {
    /// Local port LID.
    pub fn local_lid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LOCAL_LID)
    }
    /// Remote port LID.
    pub fn remote_lid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::REMOTE_LID)
    }
    /// Local port GID.
    pub fn local_gid(&self) -> Gid {
        Gid::new(array(self.buffer.as_ref(), field::LOCAL_GID))
    }
    /// Remote port GID.
    pub fn remote_gid(&self) -> Gid {
        Gid::new(array(self.buffer.as_ref(), field::REMOTE_GID))
    }
    /// Flow label, 20 bits.
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FLOW_LABEL_WORD) >> field::FLOW_LABEL_SHIFT
    }
    /// Packet rate code.
    pub fn packet_rate(&self) -> u8 {
        field::PACKET_RATE.get(self.buffer.as_ref())
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        self.buffer.as_ref()[field::TRAFFIC_CLASS]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Service level.
    pub fn sl(&self) -> u8 {
        field::SL.get(self.buffer.as_ref())
    }
    /// Subnet local.
    pub fn subnet_local(&self) -> bool {
        field::SUBNET_LOCAL.get(self.buffer.as_ref()) != 0
    }
    /// Local ACK timeout exponent.
    pub fn local_ack_timeout(&self) -> u8 {
        field::LOCAL_ACK_TIMEOUT.get(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PathInfo<T> {
    /// Sets the local port LID.
    pub fn set_local_lid(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::LOCAL_LID, v);
    }
    /// Sets the remote port LID.
    pub fn set_remote_lid(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::REMOTE_LID, v);
    }
    /// Sets the local port GID.
    pub fn set_local_gid(&mut self, v: Gid) {
        self.buffer.as_mut()[field::LOCAL_GID].copy_from_slice(&v.octets());
    }
    /// Sets the remote port GID.
    pub fn set_remote_gid(&mut self, v: Gid) {
        self.buffer.as_mut()[field::REMOTE_GID].copy_from_slice(&v.octets());
    }
    /// Sets the flow label (low 20 bits of `v`), keeping the word's other
    /// bits.
    pub fn set_flow_label(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        let low = be32(b, field::FLOW_LABEL_WORD) & ((1 << field::FLOW_LABEL_SHIFT) - 1);
        let w = ((v & field::FLOW_LABEL_MAX) << field::FLOW_LABEL_SHIFT) | low;
        set_be32(b, field::FLOW_LABEL_WORD, w);
    }
    /// Sets the packet rate code (6 bits).
    pub fn set_packet_rate(&mut self, v: u8) {
        field::PACKET_RATE.set(self.buffer.as_mut(), v);
    }
    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, v: u8) {
        self.buffer.as_mut()[field::TRAFFIC_CLASS] = v;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Sets the service level (4 bits).
    pub fn set_sl(&mut self, v: u8) {
        field::SL.set(self.buffer.as_mut(), v);
    }
    /// Sets subnet local.
    pub fn set_subnet_local(&mut self, v: bool) {
        field::SUBNET_LOCAL.set(self.buffer.as_mut(), u8::from(v));
    }
    /// Sets the local ACK timeout exponent (5 bits).
    pub fn set_local_ack_timeout(&mut self, v: u8) {
        field::LOCAL_ACK_TIMEOUT.set(self.buffer.as_mut(), v);
    }
}

/// A parsed path. Values are kept as the wire has them; fields narrower
/// than their type are masked on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathRepr {
    /// Local port LID (0 on RoCE).
    pub local_lid: u16,
    /// Remote port LID (0 on RoCE).
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: Gid,
    /// Remote port GID.
    pub remote_gid: Gid,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Packet rate code, 6 bits.
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level, 4 bits.
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout exponent, 5 bits.
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// Parses a path view.
    pub fn parse<T: AsRef<[u8]>>(p: &PathInfo<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            local_lid: p.local_lid(),
            remote_lid: p.remote_lid(),
            local_gid: p.local_gid(),
            remote_gid: p.remote_gid(),
            flow_label: p.flow_label(),
            packet_rate: p.packet_rate(),
            traffic_class: p.traffic_class(),
            hop_limit: p.hop_limit(),
            sl: p.sl(),
            subnet_local: p.subnet_local(),
            local_ack_timeout: p.local_ack_timeout(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        PATH_LEN
    }

    /// Writes all 44 bytes, reserved bits as zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut PathInfo<T>) {
        p.buffer.as_mut()[..PATH_LEN].fill(0);
        p.set_local_lid(self.local_lid);
        p.set_remote_lid(self.remote_lid);
        p.set_local_gid(self.local_gid);
        p.set_remote_gid(self.remote_gid);
        p.set_flow_label(self.flow_label);
        p.set_packet_rate(self.packet_rate);
        p.set_traffic_class(self.traffic_class);
        p.set_hop_limit(self.hop_limit);
        p.set_sl(self.sl);
        p.set_subnet_local(self.subnet_local);
        p.set_local_ack_timeout(self.local_ack_timeout);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_path()(
            local_lid: u16, remote_lid: u16, lg: [u8; 16], rg: [u8; 16],
            flow_label in 0u32..=field::FLOW_LABEL_MAX, packet_rate in 0u8..64,
            traffic_class: u8, hop_limit: u8, sl in 0u8..16, subnet_local: bool,
            local_ack_timeout in 0u8..32,
        ) -> PathRepr {
            PathRepr {
                local_lid, remote_lid, local_gid: Gid::new(lg), remote_gid: Gid::new(rg),
                flow_label, packet_rate, traffic_class, hop_limit, sl, subnet_local,
                local_ack_timeout,
            }
        }
    }

    pub(crate) fn sample() -> PathRepr {
        PathRepr {
            local_lid: 0x0102,
            remote_lid: 0x0304,
            local_gid: Gid::from_ipv4([192, 0, 2, 1]),
            remote_gid: Gid::from_ipv4([192, 0, 2, 2]),
            flow_label: 0xa_bcde,
            packet_rate: 0x2f,
            traffic_class: 0x60,
            hop_limit: 64,
            sl: 0x9,
            subnet_local: true,
            local_ack_timeout: 0x0e,
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let mut golden = [0u8; PATH_LEN];
        golden[..4].copy_from_slice(&[0x01, 0x02, 0x03, 0x04]);
        golden[4..20].copy_from_slice(&Gid::from_ipv4([192, 0, 2, 1]).octets());
        golden[20..36].copy_from_slice(&Gid::from_ipv4([192, 0, 2, 2]).octets());
        // flow label 0xabcde in bits 31..12, 6 reserved, rate 0x2f.
        golden[36..44].copy_from_slice(&[0xab, 0xcd, 0xe0, 0x2f, 0x60, 64, 0x98, 0x70]);
        let p = PathInfo::new_checked(&golden[..]).unwrap();
        assert_eq!(PathRepr::parse(&p), Ok(sample()));
        assert!(PathInfo::new_checked(&golden[..43]).is_err());
        let mut buf = [0xa5u8; PATH_LEN];
        sample().emit(&mut PathInfo::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_path()) {
            let mut buf = [0xa5u8; PATH_LEN];
            r.emit(&mut PathInfo::new_unchecked(&mut buf[..]));
            prop_assert_eq!(PathRepr::parse(&PathInfo::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
