//! rdma-core v44's `<rdma/rdma_cma.h>` structs that programs read: the event
//! channel and the event with its connection and datagram parameters.

use core::ffi::{c_int, c_void};

use super::{Opaque, ibv_ah_attr};

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
    pub id: *mut Opaque,
    /// For a connection request: the listening id.
    pub listen_id: *mut Opaque,
    /// What happened.
    pub event: rdma_cm_event_type,
    /// 0, or why it failed (a negative errno or a reject reason).
    pub status: c_int,
    /// Its parameters.
    pub param: rdma_cm_event_param,
}
