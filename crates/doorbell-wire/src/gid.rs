//! Global identifiers on RoCEv2 (reference A.1): the GID *is* the IP
//! address; an IPv4 address is carried as the IPv4-mapped IPv6 address
//! `::ffff:a.b.c.d`.

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

/// Bytes 0..12 of an IPv4-mapped GID.
const V4_MAPPED_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

/// A 128-bit GID, stored in network byte order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Gid([u8; 16]);

impl Gid {
    /// Wraps 16 raw bytes (an IPv6 address, or an IPv4-mapped one).
    pub const fn new(raw: [u8; 16]) -> Self {
        Self(raw)
    }

    /// The IPv4-mapped GID `::ffff:a.b.c.d`.
    pub const fn from_ipv4(a: [u8; 4]) -> Self {
        Self([
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3],
        ])
    }

    /// The GID of an IPv6 address: the address itself.
    pub const fn from_ipv6(a: [u8; 16]) -> Self {
        Self(a)
    }

    /// The 16 bytes, network order.
    pub const fn octets(self) -> [u8; 16] {
        self.0
    }

    /// True for `::ffff:a.b.c.d`.
    pub fn is_ipv4_mapped(self) -> bool {
        self.0[..12] == V4_MAPPED_PREFIX
    }

    /// The MAC address doorbell resolves this GID to (RoCE needs one per
    /// destination, and doorbell has no neighbour table): locally
    /// administered, the GID's last four bytes, so for an IPv4-mapped GID its
    /// address (`02:00:a.b.c.d`). The UD address vectors of doorbell's
    /// provider, mlx5_ib's create_ah answer to libmlx5 and captures use it.
    pub fn roce_mac(self) -> [u8; 6] {
        [0x02, 0x00, self.0[12], self.0[13], self.0[14], self.0[15]]
    }

    /// The IPv4 address of an IPv4-mapped GID, else `None`.
    pub fn to_ipv4(self) -> Option<[u8; 4]> {
        if self.is_ipv4_mapped() {
            Some([self.0[12], self.0[13], self.0[14], self.0[15]])
        } else {
            None
        }
    }
}

impl From<[u8; 16]> for Gid {
    fn from(raw: [u8; 16]) -> Self {
        Self(raw)
    }
}

impl From<Gid> for [u8; 16] {
    fn from(g: Gid) -> Self {
        g.0
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(a: Ipv4Addr) -> Self {
        Self::from_ipv4(a.octets())
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Self {
        Self(a.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(g: Gid) -> Self {
        Ipv6Addr::from(g.0)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", Ipv6Addr::from(self.0))
    }
}

/// Textual IPv6 form; IPv4-mapped GIDs print as `::ffff:a.b.c.d`.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn ipv4_mapped() {
        let g = Gid::from_ipv4([192, 0, 2, 7]);
        assert_eq!(
            g.octets(),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7]
        );
        assert!(g.is_ipv4_mapped());
        assert_eq!(g.to_ipv4(), Some([192, 0, 2, 7]));
        assert_eq!(format!("{g}"), "::ffff:192.0.2.7");
        assert_eq!(g, Gid::from(Ipv4Addr::new(192, 0, 2, 7)));
        assert_eq!(
            Ipv6Addr::from(g).to_ipv4_mapped(),
            Some(Ipv4Addr::new(192, 0, 2, 7))
        );
    }

    #[test]
    fn ipv6() {
        let a: Ipv6Addr = "fe80::1".parse().unwrap();
        let g = Gid::from(a);
        assert!(!g.is_ipv4_mapped());
        assert_eq!(g.to_ipv4(), None);
        assert_eq!(g, Gid::from_ipv6(a.octets()));
        assert_eq!(format!("{g:?}"), "Gid(fe80::1)");
    }
}
