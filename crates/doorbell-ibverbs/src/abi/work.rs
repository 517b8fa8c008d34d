//! Work requests and completions.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_int, c_uint, c_void};

use super::*;

// ---------------------------------------------------------------------------
// Work requests and completions.

/// `struct ibv_sge`, 16 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    /// Start.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// `ibv_send_wr.wr.rdma`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `ibv_send_wr.wr.atomic`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    /// Remote address.
    pub remote_addr: u64,
    /// Compare or add operand.
    pub compare_add: u64,
    /// Swap operand.
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `ibv_send_wr.wr.ud`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    /// Address handle.
    pub ah: *mut ibv_ah,
    /// Remote QPN.
    pub remote_qpn: u32,
    /// Remote Q_Key.
    pub remote_qkey: u32,
}

/// `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    /// RDMA read/write.
    pub rdma: ibv_send_wr_rdma,
    /// Atomics.
    pub atomic: ibv_send_wr_atomic,
    /// UD.
    pub ud: ibv_send_wr_ud,
}

/// `ibv_send_wr.qp_type.xrc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_xrc {
    /// Remote SRQN.
    pub remote_srqn: u32,
}

/// `ibv_send_wr.qp_type`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    /// XRC.
    pub xrc: ibv_send_wr_xrc,
}

/// `ibv_send_wr.bind_mw`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    /// MW.
    pub mw: *mut ibv_mw,
    /// New rkey.
    pub rkey: u32,
    /// What to bind.
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr.tso`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    /// Header.
    pub hdr: *mut c_void,
    /// Header size.
    pub hdr_sz: u16,
    /// MSS.
    pub mss: u16,
}

/// The last, anonymous union of `ibv_send_wr` (`bind_mw` or `tso`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_mw_tso {
    /// Bind MW.
    pub bind_mw: ibv_send_wr_bind_mw,
    /// TSO.
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`, 128 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    /// WR ID.
    pub wr_id: u64,
    /// Next WR or NULL.
    pub next: *mut ibv_send_wr,
    /// SGEs, +16.
    pub sg_list: *mut ibv_sge,
    /// SGE count.
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`, +28.
    pub opcode: ibv_wr_opcode,
    /// `enum ibv_send_flags`, +32.
    pub send_flags: c_uint,
    /// `__be32 imm_data`, or `invalidate_rkey` (a C anonymous union), +36.
    pub imm_data: u32,
    /// Per-opcode fields, +40.
    pub wr: ibv_send_wr_wr,
    /// Per-QP-type fields.
    pub qp_type: ibv_send_wr_qp_type,
    /// C's anonymous union of `bind_mw` and `tso`.
    pub mw_or_tso: ibv_send_wr_mw_tso,
}

/// `struct ibv_recv_wr`, 32 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    /// WR ID.
    pub wr_id: u64,
    /// Next WR or NULL.
    pub next: *mut ibv_recv_wr,
    /// SGEs.
    pub sg_list: *mut ibv_sge,
    /// SGE count.
    pub num_sge: c_int,
}

/// `struct ibv_wc`, 48 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    /// WR ID.
    pub wr_id: u64,
    /// `enum ibv_wc_status`, +8.
    pub status: ibv_wc_status,
    /// `enum ibv_wc_opcode`, +12.
    pub opcode: ibv_wc_opcode,
    /// Vendor syndrome.
    pub vendor_err: u32,
    /// Bytes, +20.
    pub byte_len: u32,
    /// `__be32 imm_data`, or `invalidated_rkey` (a C anonymous union), +24.
    pub imm_data: u32,
    /// Local QPN, +28.
    pub qp_num: u32,
    /// Remote QPN (UD).
    pub src_qp: u32,
    /// `enum ibv_wc_flags`, +36.
    pub wc_flags: c_uint,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// SL.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
}

/// `ibv_async_event.element`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    /// CQ events.
    pub cq: *mut ibv_cq,
    /// QP events.
    pub qp: *mut ibv_qp,
    /// SRQ events.
    pub srq: *mut ibv_srq,
    /// WQ events.
    pub wq: *mut ibv_wq,
    /// Port events.
    pub port_num: c_int,
}

/// `struct ibv_async_event`, 16 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    /// What it is about.
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type`.
    pub event_type: ibv_event_type,
}
