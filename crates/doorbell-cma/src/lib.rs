//! The rdma_cm model of doorbell, in safe Rust: what librdmacm and the
//! kernel's `cma.c` do for a program before and around a connection.
//!
//! # Model
//! A [`CmId`] is a communication identifier (`struct rdma_cm_id`): a port
//! space ([`PortSpace`]), a state, a source and a destination address, the
//! device it is bound to, and the options set on it. Its operations run as
//! rdma_cm's do: those that would wait on the network (address and route
//! resolution, and, to come, connecting) return at once and report their
//! outcome later as a [`CmEvent`] given to the id's [`EventSink`], the
//! event channel of the C API. Each id carries a token its creator chose,
//! which comes back with each of its events.
//!
//! Addresses map to devices as RoCE does it: a device's address is the one
//! its GID 0 holds (IPv4-mapped); binding a specific address binds the id
//! to that device, the wildcard binds none yet, and resolving a destination
//! binds an unbound id to the local NIC, which routes to every peer (doorbell
//! has one port per device). Ports are allocated per port space and address
//! across the process, ephemeral ones from the IANA range.
//!
//! Route resolution computes the path as RoCE does, locally, without a
//! subnet administrator: GIDs from the two addresses, the port's MTU, the
//! default P_Key, hop limit 64, and the id's type of service as the
//! traffic class.

#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod addrinfo;
mod conn;
mod forks;
mod id;
mod ports;
mod service;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

pub use addrinfo::{AddrInfo, Family, Hints, LookupError, lookup};
pub use conn::{AcceptParams, ConnAttrs, ConnectParams};
/// Bytes of rdma_cm's IP CM header at the start of a REQ's private data.
pub use doorbell_cm::ip_cm::HEADER_LEN as IP_CM_HEADER_LEN;
pub use forks::{ForkHeld, hold_for_fork, hold_one_for_fork};
pub use id::{CmId, IdState};
pub use service::{CmService, POLL, POLL_IDLE};

/// rdma_cm's port spaces (`enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PortSpace {
    /// RDMA_PS_TCP: reliable connected QPs.
    Tcp,
    /// RDMA_PS_UDP: unreliable datagram QPs.
    Udp,
    /// RDMA_PS_IB: any QP type.
    Ib,
    /// RDMA_PS_IPOIB.
    Ipoib,
}

impl PortSpace {
    /// The C value (`RDMA_PS_TCP` 0x0106, ...).
    pub const fn code(self) -> u32 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013f,
        }
    }

    /// The port space of a C value; `None` for one rdma_cm does not have.
    pub const fn from_code(code: u32) -> Option<Self> {
        match code {
            0x0002 => Some(PortSpace::Ipoib),
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x013f => Some(PortSpace::Ib),
            _ => None,
        }
    }
}

/// What an event reports (`enum rdma_cm_event_type`, same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    /// The destination address resolved.
    AddrResolved,
    /// It did not.
    AddrError,
    /// The route resolved.
    RouteResolved,
    /// It did not.
    RouteError,
    /// A connection request reached a listener.
    ConnectRequest,
    /// The peer replied (an id without a QP).
    ConnectResponse,
    /// Connecting failed.
    ConnectError,
    /// The peer did not answer.
    Unreachable,
    /// The peer refused.
    Rejected,
    /// The connection is up.
    Established,
    /// It is down.
    Disconnected,
    /// The device went away.
    DeviceRemoval,
    /// A multicast join completed.
    MulticastJoin,
    /// It failed.
    MulticastError,
    /// The bound address changed.
    AddrChange,
    /// The connection left its time-wait.
    TimewaitExit,
}

impl CmEventKind {
    /// The C value.
    pub const fn code(self) -> u32 {
        self as u32
    }
}

/// One event of an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmEvent {
    /// The token of the id it is about (for a connection request: of the
    /// listener).
    pub id: u64,
    /// What happened.
    pub kind: CmEventKind,
    /// 0, a negative errno saying why it failed, or a reject's reason.
    pub status: i32,
    /// What came with it.
    pub detail: Detail,
}

/// A connection request as a listener's event carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRequest {
    /// The CM's handle of the new connection.
    pub conn: doorbell_cmsm::ConnId,
    /// The peer's port.
    pub peer: doorbell_cmsm::Peer,
    /// The REQ, resources in the local point of view.
    pub req: doorbell_cmsm::ReqReceived,
}

/// A datagram service request (SIDR_REQ) as a listener's event carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdRequest {
    /// The CM's handle of the request.
    pub conn: doorbell_cmsm::ConnId,
    /// The peer's port.
    pub peer: doorbell_cmsm::Peer,
    /// The private data, rdma_cm's IP header first.
    pub private_data: [u8; doorbell_cm::sidr::REQ_PRIVATE_DATA_LEN],
}

/// The SIDR_REP to an id's datagram service request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdReply {
    /// The SIDR status (0: the QP number and Q_Key are valid).
    pub status: u8,
    /// The peer's QP.
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The private data.
    pub private_data: [u8; doorbell_cm::sidr::REP_PRIVATE_DATA_LEN],
}

/// What an event carries beyond its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// Nothing.
    None,
    /// A connection request: make the new id with [`CmId::from_request`].
    ConnectRequest(Box<ConnRequest>),
    /// The peer's REP.
    ConnectResponse(Box<doorbell_cmsm::RepReceived>),
    /// A reject's private data.
    Rejected(Box<Vec<u8>>),
    /// A datagram service request: make the new id with
    /// [`CmId::from_ud_request`].
    UdRequest(Box<UdRequest>),
    /// The answer to the id's datagram service request.
    UdReply(Box<UdReply>),
}

/// Where an id's events go (an event channel).
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn deliver(&self, event: CmEvent);
}

/// A path between two ports, as route resolution computes it for RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// The local port's GID.
    pub sgid: [u8; 16],
    /// The peer's GID.
    pub dgid: [u8; 16],
    /// The P_Key.
    pub pkey: u16,
    /// The path MTU in bytes.
    pub mtu: u32,
    /// The IP hop limit.
    pub hop_limit: u8,
    /// The traffic class (the id's type of service).
    pub traffic_class: u8,
    /// The service level.
    pub sl: u8,
}

/// The Q_Key of rdma_cm's UDP port space (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// What `rdma_init_qp_attr` gives for the INIT state (the kernel's
/// `cma_ib_init_qp_attr`): the P_Key index and port, and for a datagram QP
/// its Q_Key, for a connected one no access rights yet (the CM grants them
/// at RTR, from the connection's responder resources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttrs {
    /// P_Key index (0: the default P_Key).
    pub pkey_index: u16,
    /// Port.
    pub port: u8,
    /// The Q_Key, for a UD QP.
    pub qkey: Option<u32>,
    /// The access flags, for a connected QP (0).
    pub access: Option<u32>,
}

/// Why an rdma_cm operation was refused, with the errno librdmacm gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// A bad argument or a call in the wrong state (EINVAL).
    #[error("invalid argument or state")]
    Invalid,
    /// No device has the address (ENODEV).
    #[error("no RDMA device has that address")]
    NoDevice,
    /// The port is taken (EADDRINUSE).
    #[error("address in use")]
    AddrInUse,
    /// No port is free (EADDRNOTAVAIL).
    #[error("no free port")]
    NoPort,
    /// The family or option is not supported (EAFNOSUPPORT / ENOSYS).
    #[error("not supported")]
    Unsupported,
}

impl CmError {
    /// The errno librdmacm reports.
    pub const fn errno(self) -> i32 {
        match self {
            CmError::Invalid => 22,
            CmError::NoDevice => 19,
            CmError::AddrInUse => 98,
            CmError::NoPort => 99,
            CmError::Unsupported => 97,
        }
    }
}

/// The GID of an IP address as RoCE v2 writes it: IPv4 in its IPv6-mapped
/// form, IPv6 as it is.
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a GID holds (IPv4 for a mapped one).
pub fn ip_of(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The address with its port replaced.
fn with_port(addr: SocketAddr, port: u16) -> SocketAddr {
    let mut a = addr;
    a.set_port(port);
    a
}
