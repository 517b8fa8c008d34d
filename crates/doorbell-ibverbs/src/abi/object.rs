//! The objects C holds handles to.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_int, c_uint, c_void};

use libc::{pthread_cond_t, pthread_mutex_t, size_t};

use super::*;

// ---------------------------------------------------------------------------
// Objects (handles). Each is allocated by this library inside a Rust object
// that owns it (STYLE R16); C reads these fields directly.

/// `struct ibv_pd`, 16 bytes.
#[repr(C)]
pub struct ibv_pd {
    /// Context.
    pub context: *mut ibv_context,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_td`.
#[repr(C)]
pub struct ibv_td {
    /// Context.
    pub context: *mut ibv_context,
}

/// `struct ibv_xrcd`.
#[repr(C)]
pub struct ibv_xrcd {
    /// Context.
    pub context: *mut ibv_context,
}

/// `struct ibv_mr`, 48 bytes.
#[repr(C)]
pub struct ibv_mr {
    /// Context.
    pub context: *mut ibv_context,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Start.
    pub addr: *mut c_void,
    /// Bytes.
    pub length: size_t,
    /// Kernel handle.
    pub handle: u32,
    /// Local key, +36.
    pub lkey: u32,
    /// Remote key, +40.
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    /// Context.
    pub context: *mut ibv_context,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Remote key.
    pub rkey: u32,
    /// Kernel handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: ibv_mw_type,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    /// MR.
    pub mr: *mut ibv_mr,
    /// Start.
    pub addr: u64,
    /// Bytes.
    pub length: u64,
    /// `enum ibv_access_flags`.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    /// WR ID.
    pub wr_id: u64,
    /// `enum ibv_send_flags`.
    pub send_flags: c_uint,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_dm`.
#[repr(C)]
pub struct ibv_dm {
    /// Context.
    pub context: *mut ibv_context,
    /// Copy in.
    pub memcpy_to_dm:
        Option<unsafe extern "C" fn(*mut ibv_dm, u64, *const c_void, size_t) -> c_int>,
    /// Copy out.
    pub memcpy_from_dm:
        Option<unsafe extern "C" fn(*mut c_void, *mut ibv_dm, u64, size_t) -> c_int>,
    /// Valid fields.
    pub comp_mask: u32,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_comp_channel`, 16 bytes. `fd` must be a real, pollable fd.
#[repr(C)]
pub struct ibv_comp_channel {
    /// Context.
    pub context: *mut ibv_context,
    /// Event fd.
    pub fd: c_int,
    /// CQs using it.
    pub refcnt: c_int,
}

/// `struct ibv_cq`, 128 bytes.
#[repr(C)]
pub struct ibv_cq {
    /// Context; the inline `ibv_poll_cq` reads `context->ops`.
    pub context: *mut ibv_context,
    /// Channel or NULL.
    pub channel: *mut ibv_comp_channel,
    /// User context.
    pub cq_context: *mut c_void,
    /// Kernel handle.
    pub handle: u32,
    /// Actual CQEs.
    pub cqe: c_int,
    /// `pthread_mutex_t mutex`.
    pub mutex: pthread_mutex_t,
    /// `pthread_cond_t cond`.
    pub cond: pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Async events acknowledged.
    pub async_events_completed: u32,
}

/// A `struct ibv_cq_ex` op without further arguments.
pub type CqExFn<R> = Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> R>;

/// `struct ibv_cq_ex`, 288 bytes: `ibv_cq`'s fields, then the polling ops
/// the inline `ibv_start_poll`/`ibv_wc_read_*` call.
#[repr(C)]
pub struct ibv_cq_ex {
    /// As in `ibv_cq`.
    pub context: *mut ibv_context,
    /// As in `ibv_cq`.
    pub channel: *mut ibv_comp_channel,
    /// As in `ibv_cq`.
    pub cq_context: *mut c_void,
    /// As in `ibv_cq`.
    pub handle: u32,
    /// As in `ibv_cq`.
    pub cqe: c_int,
    /// As in `ibv_cq`.
    pub mutex: pthread_mutex_t,
    /// As in `ibv_cq`.
    pub cond: pthread_cond_t,
    /// As in `ibv_cq`.
    pub comp_events_completed: u32,
    /// As in `ibv_cq`.
    pub async_events_completed: u32,
    /// Valid fields.
    pub comp_mask: u32,
    /// Status of the current completion, +132.
    pub status: ibv_wc_status,
    /// WR ID of the current completion, +136.
    pub wr_id: u64,
    /// +144.
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    /// +152.
    pub next_poll: CqExFn<c_int>,
    /// +160.
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    /// +168.
    pub read_opcode: CqExFn<ibv_wc_opcode>,
    /// Vendor error.
    pub read_vendor_err: CqExFn<u32>,
    /// Byte length.
    pub read_byte_len: CqExFn<u32>,
    /// `__be32` immediate.
    pub read_imm_data: CqExFn<u32>,
    /// QPN.
    pub read_qp_num: CqExFn<u32>,
    /// Source QPN.
    pub read_src_qp: CqExFn<u32>,
    /// `enum ibv_wc_flags`.
    pub read_wc_flags: CqExFn<c_uint>,
    /// SLID.
    pub read_slid: CqExFn<u32>,
    /// SL.
    pub read_sl: CqExFn<u8>,
    /// DLID path bits.
    pub read_dlid_path_bits: CqExFn<u8>,
    /// Timestamp.
    pub read_completion_ts: CqExFn<u64>,
    /// CVLAN.
    pub read_cvlan: CqExFn<u16>,
    /// Flow tag.
    pub read_flow_tag: CqExFn<u32>,
    /// Tag matching info.
    pub read_tm_info: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_wc_tm_info)>,
    /// Wall-clock timestamp, +280.
    pub read_completion_wallclock_ns: CqExFn<u64>,
}

/// `struct ibv_srq`, 128 bytes.
#[repr(C)]
pub struct ibv_srq {
    /// Context.
    pub context: *mut ibv_context,
    /// User context.
    pub srq_context: *mut c_void,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
    /// `pthread_mutex_t mutex`.
    pub mutex: pthread_mutex_t,
    /// `pthread_cond_t cond`.
    pub cond: pthread_cond_t,
    /// Events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_wq`.
#[repr(C)]
pub struct ibv_wq {
    /// Context.
    pub context: *mut ibv_context,
    /// User context.
    pub wq_context: *mut c_void,
    /// PD.
    pub pd: *mut ibv_pd,
    /// CQ.
    pub cq: *mut ibv_cq,
    /// WQ number.
    pub wq_num: u32,
    /// Kernel handle.
    pub handle: u32,
    /// `enum ibv_wq_state`.
    pub state: ibv_wq_state,
    /// `enum ibv_wq_type`.
    pub wq_type: ibv_wq_type,
    /// Post receive.
    pub post_recv:
        Option<unsafe extern "C" fn(*mut ibv_wq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int>,
    /// `pthread_mutex_t mutex`.
    pub mutex: pthread_mutex_t,
    /// `pthread_cond_t cond`.
    pub cond: pthread_cond_t,
    /// Events acknowledged.
    pub events_completed: u32,
    /// Valid fields.
    pub comp_mask: u32,
}

/// `struct ibv_rwq_ind_table`.
#[repr(C)]
pub struct ibv_rwq_ind_table {
    /// Context.
    pub context: *mut ibv_context,
    /// Handle.
    pub ind_tbl_handle: c_int,
    /// Number.
    pub ind_tbl_num: c_int,
    /// Valid fields.
    pub comp_mask: u32,
}

/// `struct ibv_flow`.
#[repr(C)]
pub struct ibv_flow {
    /// Valid fields.
    pub comp_mask: u32,
    /// Context.
    pub context: *mut ibv_context,
    /// Handle.
    pub handle: u32,
}

/// `struct ibv_ah`, 24 bytes.
#[repr(C)]
pub struct ibv_ah {
    /// Context.
    pub context: *mut ibv_context,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Kernel handle.
    pub handle: u32,
}

/// `struct ibv_qp`, 160 bytes.
#[repr(C)]
pub struct ibv_qp {
    /// Context; the inline `ibv_post_*` read `context->ops`.
    pub context: *mut ibv_context,
    /// User context.
    pub qp_context: *mut c_void,
    /// PD.
    pub pd: *mut ibv_pd,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ or NULL.
    pub srq: *mut ibv_srq,
    /// Kernel handle.
    pub handle: u32,
    /// QPN, +52; apps read it directly.
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: ibv_qp_state,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
    /// `pthread_mutex_t mutex`.
    pub mutex: pthread_mutex_t,
    /// `pthread_cond_t cond`.
    pub cond: pthread_cond_t,
    /// Events acknowledged.
    pub events_completed: u32,
}

/// A `struct ibv_qp_ex` op.
pub type QpExFn<A> = Option<A>;

/// `struct ibv_qp_ex`, 352 bytes: an `ibv_qp`, then the `ibv_wr_*` ops.
#[repr(C)]
pub struct ibv_qp_ex {
    /// The QP itself.
    pub qp_base: ibv_qp,
    /// Valid fields.
    pub comp_mask: u64,
    /// WR ID of the WR being built, +168.
    pub wr_id: u64,
    /// `enum ibv_send_flags`, +176.
    pub wr_flags: c_uint,
    /// Atomic compare-and-swap.
    pub wr_atomic_cmp_swp: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    /// Atomic fetch-and-add.
    pub wr_atomic_fetch_add: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    /// Bind MW.
    pub wr_bind_mw:
        QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info)>,
    /// Local invalidate.
    pub wr_local_inv: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// RDMA read.
    pub wr_rdma_read: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// RDMA write, +224.
    pub wr_rdma_write: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// RDMA write with immediate.
    pub wr_rdma_write_imm: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    /// Send, +240.
    pub wr_send: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// Send with immediate.
    pub wr_send_imm: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// Send with invalidate.
    pub wr_send_inv: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// TSO send.
    pub wr_send_tso: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, u16, u16)>,
    /// UD address.
    pub wr_set_ud_addr: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    /// XRC SRQN.
    pub wr_set_xrc_srqn: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// Inline data.
    pub wr_set_inline_data: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, size_t)>,
    /// Inline data list.
    pub wr_set_inline_data_list:
        QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, size_t, *const ibv_data_buf)>,
    /// One SGE, +304.
    pub wr_set_sge: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    /// SGE list.
    pub wr_set_sge_list: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, size_t, *const ibv_sge)>,
    /// Start a batch, +320.
    pub wr_start: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// Post the batch, +328.
    pub wr_complete: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    /// Drop the batch, +336.
    pub wr_abort: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// Atomic write.
    pub wr_atomic_write: QpExFn<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void)>,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    /// Start.
    pub addr: *mut c_void,
    /// Bytes.
    pub length: size_t,
}
