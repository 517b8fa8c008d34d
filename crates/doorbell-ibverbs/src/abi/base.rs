//! Enums, constants and addresses.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_int, c_uint};

// ---------------------------------------------------------------------------
// Enums (values stay raw integers until validated at the edge).

/// `enum ibv_node_type` (has `IBV_NODE_UNKNOWN = -1`).
pub type ibv_node_type = c_int;
/// `enum ibv_transport_type` (has `IBV_TRANSPORT_UNKNOWN = -1`).
pub type ibv_transport_type = c_int;
/// `enum ibv_port_state`.
pub type ibv_port_state = c_uint;
/// `enum ibv_mtu`.
pub type ibv_mtu = c_uint;
/// `enum ibv_qp_state`.
pub type ibv_qp_state = c_uint;
/// `enum ibv_qp_type`.
pub type ibv_qp_type = c_uint;
/// `enum ibv_mig_state`.
pub type ibv_mig_state = c_uint;
/// `enum ibv_wc_status`.
pub type ibv_wc_status = c_uint;
/// `enum ibv_wc_opcode`.
pub type ibv_wc_opcode = c_uint;
/// `enum ibv_wr_opcode`.
pub type ibv_wr_opcode = c_uint;
/// `enum ibv_event_type`.
pub type ibv_event_type = c_uint;
/// `enum ibv_atomic_cap`.
pub type ibv_atomic_cap = c_uint;
/// `enum ibv_mw_type`.
pub type ibv_mw_type = c_uint;
/// `enum ibv_rate`.
pub type ibv_rate = c_uint;
/// `enum ibv_srq_type`.
pub type ibv_srq_type = c_uint;
/// `enum ibv_wq_state`.
pub type ibv_wq_state = c_uint;
/// `enum ibv_wq_type`.
pub type ibv_wq_type = c_uint;
/// `enum ibv_advise_mr_advice`.
pub type ibv_advise_mr_advice = c_uint;
/// `enum ibv_fork_status`.
pub type ibv_fork_status = c_uint;
/// `enum ibv_gid_type_sysfs` (driver.h): 0 = RoCE v1 / IB, 1 = RoCE v2.
pub type ibv_gid_type_sysfs = c_uint;
/// `enum ibv_flow_attr_type`.
pub type ibv_flow_attr_type = c_uint;

/// `IBV_FORK_UNNEEDED`: fork is safe without `ibv_fork_init`.
pub const IBV_FORK_UNNEEDED: ibv_fork_status = 2;
/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;
// ---------------------------------------------------------------------------
// Addresses.

/// `union ibv_gid`, 16 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    /// The 16 bytes.
    pub raw: [u8; 16],
    /// As two big-endian halves.
    pub global: ibv_gid_global,
}

/// `ibv_gid.global`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_global {
    /// `__be64 subnet_prefix`.
    pub subnet_prefix: u64,
    /// `__be64 interface_id`.
    pub interface_id: u64,
}

/// `struct ibv_global_route`, 24 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_global_route {
    /// Destination GID.
    pub dgid: ibv_gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_grh`, 40 bytes: the GRH a UD receive buffer starts with.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    /// `__be32 version_tclass_flow`.
    pub version_tclass_flow: u32,
    /// `__be16 paylen`.
    pub paylen: u16,
    /// Next header.
    pub next_hdr: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: ibv_gid,
    /// Destination GID.
    pub dgid: ibv_gid,
}

/// `struct ibv_ah_attr`, 32 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ah_attr {
    /// GRH fields, valid when `is_global`.
    pub grh: ibv_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// `enum ibv_rate` as a byte.
    pub static_rate: u8,
    /// Non-zero if `grh` is valid.
    pub is_global: u8,
    /// Port number.
    pub port_num: u8,
}

/// `struct ibv_gid_entry`, 32 bytes (`ibv_query_gid_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    /// The GID.
    pub gid: ibv_gid,
    /// Its index.
    pub gid_index: u32,
    /// Its port.
    pub port_num: u32,
    /// `enum ibv_gid_type`: 0 IB, 1 RoCE v1, 2 RoCE v2.
    pub gid_type: u32,
    /// The netdev's ifindex.
    pub ndev_ifindex: u32,
}
