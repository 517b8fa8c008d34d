//! `rdma_getaddrinfo`'s resolution, as librdmacm does it over the C
//! library's `getaddrinfo`: one address for a node and a service, the
//! wildcard for a passive lookup without a node, loopback for an active
//! one, the port space and QP type from the hints or the socket type.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use crate::PortSpace;

/// Why a lookup failed, as `getaddrinfo` reports it (rdma_getaddrinfo
/// returns these codes as they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// Neither a node nor a service (EINVAL, as librdmacm says it).
    #[error("nothing to look up")]
    Nothing,
    /// The node is unknown, or not numeric when it had to be (EAI_NONAME).
    #[error("name or service not known")]
    NoName,
    /// The service is not a port number (EAI_SERVICE).
    #[error("service not supported")]
    Service,
    /// No address of the family asked for (EAI_FAMILY).
    #[error("address family not supported")]
    Family,
}

/// The address family a lookup may be restricted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Either.
    Any,
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// What a lookup is for (the hints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    /// RAI_PASSIVE: the address to listen on.
    pub passive: bool,
    /// RAI_NUMERICHOST: the node must be an address.
    pub numeric: bool,
    /// The family.
    pub family: Family,
    /// The port space asked for, if any.
    pub port_space: Option<PortSpace>,
    /// Datagram (UD) rather than connected, if asked.
    pub datagram: Option<bool>,
}

/// One answer: rdma_getaddrinfo's `struct rdma_addrinfo`, less the parts
/// doorbell leaves empty (route, connect data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrInfo {
    /// The hints' passive flag, kept.
    pub passive: bool,
    /// The address: the source of a passive answer, the destination of an
    /// active one.
    pub addr: SocketAddr,
    /// The port space.
    pub port_space: PortSpace,
    /// A datagram service (UD QP) rather than a connected one (RC).
    pub datagram: bool,
    /// The node's name, for an active answer.
    pub canonname: Option<String>,
}

/// Looks up `node` and `service` (a port number) with `hints`.
pub fn lookup(
    node: Option<&str>,
    service: Option<&str>,
    hints: Hints,
) -> Result<AddrInfo, LookupError> {
    if node.is_none() && service.is_none() {
        return Err(LookupError::Nothing);
    }
    let port = match service {
        None => 0,
        Some(s) => s.parse::<u16>().map_err(|_| LookupError::Service)?,
    };
    let fits = |ip: &IpAddr| match hints.family {
        Family::Any => true,
        Family::V4 => ip.is_ipv4(),
        Family::V6 => ip.is_ipv6(),
    };
    let ip = match node {
        None => {
            let v6 = hints.family == Family::V6;
            match (hints.passive, v6) {
                (true, false) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                (true, true) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                (false, false) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                (false, true) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            }
        }
        Some(n) => match n.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) if hints.numeric => return Err(LookupError::NoName),
            Err(_) => (n, port)
                .to_socket_addrs()
                .map_err(|_| LookupError::NoName)?
                .map(|a| a.ip())
                .find(fits)
                .ok_or(LookupError::NoName)?,
        },
    };
    if !fits(&ip) {
        return Err(LookupError::Family);
    }
    let datagram = hints
        .datagram
        .unwrap_or(hints.port_space == Some(PortSpace::Udp));
    let port_space = hints.port_space.unwrap_or(if datagram {
        PortSpace::Udp
    } else {
        PortSpace::Tcp
    });
    Ok(AddrInfo {
        passive: hints.passive,
        addr: SocketAddr::new(ip, port),
        port_space,
        datagram,
        canonname: (!hints.passive).then(|| node.map(str::to_owned)).flatten(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints() -> Hints {
        Hints {
            passive: false,
            numeric: false,
            family: Family::Any,
            port_space: None,
            datagram: None,
        }
    }

    #[test]
    fn passive_without_a_node_is_the_wildcard_and_active_is_loopback() {
        let p = lookup(
            None,
            Some("7471"),
            Hints {
                passive: true,
                ..hints()
            },
        )
        .unwrap();
        assert_eq!(p.addr, "0.0.0.0:7471".parse().unwrap());
        let a = lookup(None, Some("7471"), hints()).unwrap();
        assert_eq!(a.addr, "127.0.0.1:7471".parse().unwrap());
        assert_eq!((a.port_space, a.datagram), (PortSpace::Tcp, false));
    }

    #[test]
    fn hints_and_errors() {
        let u = lookup(
            Some("10.0.0.1"),
            None,
            Hints {
                port_space: Some(PortSpace::Udp),
                ..hints()
            },
        )
        .unwrap();
        assert_eq!(
            (u.port_space, u.datagram, u.addr.port()),
            (PortSpace::Udp, true, 0)
        );
        assert_eq!(u.canonname.as_deref(), Some("10.0.0.1"));
        assert_eq!(lookup(None, None, hints()), Err(LookupError::Nothing));
        assert_eq!(
            lookup(Some("10.0.0.1"), Some("echo"), hints()),
            Err(LookupError::Service)
        );
        assert_eq!(
            lookup(
                Some("not-an-address"),
                None,
                Hints {
                    numeric: true,
                    ..hints()
                }
            ),
            Err(LookupError::NoName)
        );
        assert_eq!(
            lookup(
                Some("10.0.0.1"),
                None,
                Hints {
                    family: Family::V6,
                    ..hints()
                }
            ),
            Err(LookupError::Family)
        );
    }
}
