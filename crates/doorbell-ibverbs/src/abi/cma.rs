//! rdma-core v44's `<rdma/rdma_cma.h>` structs that programs read: the event
//! channel, the event with its connection and datagram parameters, the
//! communication identifier with its route, and `<infiniband/sa.h>`'s path
//! record.

use core::ffi::{c_int, c_void};

use libc::sockaddr_storage;

use super::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_qp_type,
    ibv_srq,
};

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sa_path_rec {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination LID (0 on RoCE).
    pub dlid: u16,
    /// Source LID.
    pub slid: u16,
    /// Raw traffic.
    pub raw_traffic: c_int,
    /// Flow label, network order.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reversible.
    pub reversible: c_int,
    /// Number of paths.
    pub numb_path: u8,
    /// P_Key, network order.
    pub pkey: u16,
    /// Service level.
    pub sl: u8,
    /// MTU selector (2: exactly).
    pub mtu_selector: u8,
    /// `enum ibv_mtu`.
    pub mtu: u8,
    /// Rate selector.
    pub rate_selector: u8,
    /// `enum ibv_rate`.
    pub rate: u8,
    /// Packet life time selector.
    pub packet_life_time_selector: u8,
    /// Packet life time exponent.
    pub packet_life_time: u8,
    /// Preference.
    pub preference: u8,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
    /// P_Key, network order.
    pub pkey: u16,
}

/// `struct rdma_addr`: the source and destination as socket addresses
/// (each C's union of `sockaddr`, `sockaddr_in`, `sockaddr_in6` and
/// `sockaddr_storage`), and the IB view.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    /// Source address.
    pub src_storage: sockaddr_storage,
    /// Destination address.
    pub dst_storage: sockaddr_storage,
    /// GIDs and P_Key (C's one-member union `addr`).
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    /// The addresses.
    pub addr: rdma_addr,
    /// The path records (`num_paths` of them).
    pub path_rec: *mut ibv_sa_path_rec,
    /// How many.
    pub num_paths: c_int,
}

/// `enum rdma_port_space`.
pub type rdma_port_space = core::ffi::c_uint;

/// `struct rdma_cm_id`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_id {
    /// The device it is bound to.
    pub verbs: *mut ibv_context,
    /// Its event channel.
    pub channel: *mut rdma_event_channel,
    /// The program's context.
    pub context: *mut c_void,
    /// Its QP.
    pub qp: *mut ibv_qp,
    /// Addresses and path.
    pub route: rdma_route,
    /// Port space.
    pub ps: rdma_port_space,
    /// The port it is bound to.
    pub port_num: u8,
    /// The event being processed (synchronous ids).
    pub event: *mut rdma_cm_event,
    /// Channel of the send CQ.
    pub send_cq_channel: *mut ibv_comp_channel,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Channel of the receive CQ.
    pub recv_cq_channel: *mut ibv_comp_channel,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ.
    pub srq: *mut ibv_srq,
    /// PD.
    pub pd: *mut ibv_pd,
    /// QP type.
    pub qp_type: ibv_qp_type,
}

/// `enum rdma_cm_event_type`.
pub type rdma_cm_event_type = core::ffi::c_uint;

/// `struct rdma_event_channel`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_event_channel {
    /// Readable while events wait (an eventfd here).
    pub fd: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    /// Private data for the peer.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// RDMA READ/atomic requests the local side accepts in flight.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the local side sends in flight.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// Whether the QP uses an SRQ (no QP on the id).
    pub srq: u8,
    /// The QP number (no QP on the id).
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    /// Private data from the peer.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// The path to the peer.
    pub ah_attr: ibv_ah_attr,
    /// The peer's QP.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    /// Connected services.
    pub conn: rdma_conn_param,
    /// Datagram services.
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_event {
    /// The id the event is about.
    pub id: *mut rdma_cm_id,
    /// For a connection request: the listening id.
    pub listen_id: *mut rdma_cm_id,
    /// What happened.
    pub event: rdma_cm_event_type,
    /// 0, or why it failed (a negative errno or a reject reason).
    pub status: c_int,
    /// Its parameters.
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addrinfo {
    /// RAI_* flags.
    pub ai_flags: c_int,
    /// Address family.
    pub ai_family: c_int,
    /// `enum ibv_qp_type`.
    pub ai_qp_type: c_int,
    /// `enum rdma_port_space`.
    pub ai_port_space: c_int,
    /// Length of the source address.
    pub ai_src_len: libc::socklen_t,
    /// Length of the destination address.
    pub ai_dst_len: libc::socklen_t,
    /// Source address.
    pub ai_src_addr: *mut libc::sockaddr,
    /// Destination address.
    pub ai_dst_addr: *mut libc::sockaddr,
    /// Source name.
    pub ai_src_canonname: *mut core::ffi::c_char,
    /// Destination name.
    pub ai_dst_canonname: *mut core::ffi::c_char,
    /// Length of the route data.
    pub ai_route_len: libc::size_t,
    /// Route data.
    pub ai_route: *mut c_void,
    /// Length of the connection data.
    pub ai_connect_len: libc::size_t,
    /// Connection data.
    pub ai_connect: *mut c_void,
    /// The next answer.
    pub ai_next: *mut rdma_addrinfo,
}
