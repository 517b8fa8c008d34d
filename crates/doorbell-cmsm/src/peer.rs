//! Who a MAD came from, or goes to.

use core::net::IpAddr;

use doorbell_types::Qpn;
use doorbell_wire::Gid;

/// The far end of a MAD: what the layer below needs to address a UD send
/// on QP 1 and what it learnt from a receive (the GRH's source GID and the
/// BTH/DETH's source QP).
///
/// On RoCEv2 the GID is the peer's IP address ([`Peer::ip_addr`]); the CM
/// QP is 1 ([`doorbell_cm::GSI_QPN`]) unless a redirect says otherwise,
/// which this agent does not model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Peer {
    /// The peer port's GID (on RoCEv2 its IP address, IPv4-mapped for IPv4).
    pub gid: Gid,
    /// The peer's CM QP: the source QP of its MADs, the destination of ours.
    pub qpn: Qpn,
}

impl Peer {
    /// The peer at `gid`, on QP 1.
    pub const fn new(gid: Gid) -> Self {
        Self {
            gid,
            qpn: Qpn::new(doorbell_cm::GSI_QPN),
        }
    }

    /// The peer's IP address: IPv4 for an IPv4-mapped GID, else IPv6.
    pub fn ip_addr(&self) -> IpAddr {
        match self.gid.to_ipv4() {
            Some(v4) => IpAddr::from(v4),
            None => IpAddr::from(self.gid.octets()),
        }
    }
}
