//! rdma-core v44's C ABI: the structs that C programs and the inline
//! functions of `<infiniband/verbs.h>` read and write directly, as
//! `#[repr(C)]` Rust types with the header's names.
//!
//! Every size and the offsets the inline code depends on (B.3/B.6 of the
//! reference) are asserted at compile time below; `tests/it/layout.rs`
//! compiles a C probe against the installed header and compares the size,
//! alignment and every declared field's offset and size with these types.
//!
//! Conventions: C enums are `c_uint` (or `c_int` where the enum has a
//! negative value) behind a type alias named like the enum, so values from C
//! stay unvalidated integers until the edge checks them. C's anonymous unions
//! of two 32-bit views (`imm_data`/`invalidated_rkey`) are one `u32` named
//! after the first. Function-pointer slots are `Option<unsafe extern "C" fn>`
//! with the header's signature, `None` being C's NULL; slots whose
//! argument types this crate does not model take [`Opaque`] pointers.
//! Big-endian (`__be*`) fields are plain integers holding network-order bytes.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};

use libc::{pthread_cond_t, pthread_mutex_t, size_t, timespec};

/// A C struct this crate only passes by pointer (declared opaque).
#[repr(C)]
pub struct Opaque {
    _private: [u8; 0],
}

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`struct ", stringify!($name), "`, passed only by pointer.")]
        pub type $name = Opaque;
    )*};
}

opaque!(
    ibv_counters,
    ibv_counters_init_attr,
    ibv_counter_attach_attr,
    ibv_flow_action,
    ibv_flow_action_esp_attr,
    ibv_ops_wr,
    ibv_td_init_attr,
    ibv_rwq_ind_table_init_attr,
    ibv_wq_attr,
    ibv_wq_init_attr,
    ibv_xrcd_init_attr,
    ibv_wc_tm_info,
    ibv_sa_path_rec,
    verbs_ex_private,
    verbs_device_ops,
    verbs_sysfs_dev,
    verbs_context_ops,
    verbs_cq,
    verbs_qp,
    verbs_srq,
    verbs_mr,
    verbs_dm,
    verbs_xrcd,
    verbs_counters,
    verbs_flow_action,
    ibv_command_buffer,
    ib_user_path_rec,
    ib_uverbs_qp_attr,
    ib_uverbs_ah_attr,
    ibv_alloc_mw,
    ibv_alloc_pd,
    ibv_create_cq_ex,
    ibv_create_qp,
    ibv_create_qp_ex,
    ibv_create_srq,
    ibv_create_xsrq,
    ibv_create_wq,
    ibv_get_context,
    ibv_modify_cq,
    ibv_modify_qp,
    ibv_modify_qp_ex,
    ibv_modify_srq,
    ibv_modify_wq,
    ibv_open_qp,
    ibv_open_xrcd,
    ibv_query_port,
    ibv_query_qp,
    ibv_query_srq,
    ibv_reg_mr,
    ibv_rereg_mr,
    ibv_resize_cq,
    ib_uverbs_alloc_mw_resp,
    ib_uverbs_alloc_pd_resp,
    ib_uverbs_create_ah_resp,
    ib_uverbs_ex_create_cq_resp,
    ib_uverbs_create_qp_resp,
    ib_uverbs_ex_create_qp_resp,
    ib_uverbs_ex_create_rwq_ind_table_resp,
    ib_uverbs_create_srq_resp,
    ib_uverbs_ex_create_wq_resp,
    ib_uverbs_get_context_resp,
    ib_uverbs_ex_modify_qp_resp,
    ib_uverbs_ex_query_device_resp,
    ib_uverbs_reg_mr_resp,
    ib_uverbs_rereg_mr_resp,
    ib_uverbs_resize_cq_resp,
    ib_uverbs_open_xrcd_resp,
);

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

// ---------------------------------------------------------------------------
// Device and context.

/// `struct _ibv_device_ops`: two unused slots.
#[repr(C)]
pub struct _ibv_device_ops {
    /// Unused (`_dummy1`).
    pub _dummy1: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut ibv_context>,
    /// Unused (`_dummy2`).
    pub _dummy2: Option<unsafe extern "C" fn(*mut ibv_context)>,
}

/// `struct ibv_device`, 664 bytes.
#[repr(C)]
pub struct ibv_device {
    /// Unused slots.
    pub _ops: _ibv_device_ops,
    /// `enum ibv_node_type`.
    pub node_type: ibv_node_type,
    /// `enum ibv_transport_type`.
    pub transport_type: ibv_transport_type,
    /// Kernel device name, e.g. `mlx5_0`; NUL-terminated.
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name, e.g. `uverbs0`.
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the infiniband_verbs class device.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// sysfs path of the infiniband class device.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `struct list_node` (ccan list, driver.h).
#[repr(C)]
pub struct list_node {
    /// Next.
    pub next: *mut list_node,
    /// Previous.
    pub prev: *mut list_node,
}

/// `struct verbs_device` (driver.h, not in the installed headers): extends
/// `ibv_device`. The real libmlx5 tells its own devices from others by `ops`,
/// so ours keep this tail zeroed (B.6).
#[repr(C)]
pub struct verbs_device {
    /// The public part; a `*mut ibv_device` points here.
    pub device: ibv_device,
    /// The provider's ops; NULL for ours.
    pub ops: *const verbs_device_ops,
    /// `atomic_int refcount`.
    pub refcount: c_int,
    /// `struct list_node entry`.
    pub entry: list_node,
    /// `struct verbs_sysfs_dev *sysfs`.
    pub sysfs: *mut verbs_sysfs_dev,
    /// `uint64_t core_support`.
    pub core_support: u64,
}

/// `ibv_context_ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `ibv_context_ops.post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `ibv_context_ops.post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `ibv_context_ops.post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// An obsolete slot, `void *(*)(void)`; always NULL.
pub type CompatFn = Option<unsafe extern "C" fn() -> *mut c_void>;

/// `struct ibv_context_ops`, 256 bytes of function pointers. The inline
/// `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_*` and `ibv_*_mw` call
/// through these.
#[repr(C)]
pub struct ibv_context_ops {
    /// Obsolete.
    pub _compat_query_device:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int>,
    /// Obsolete.
    pub _compat_query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int>,
    /// Obsolete.
    pub _compat_alloc_pd: CompatFn,
    /// Obsolete.
    pub _compat_dealloc_pd: CompatFn,
    /// Obsolete.
    pub _compat_reg_mr: CompatFn,
    /// Obsolete.
    pub _compat_rereg_mr: CompatFn,
    /// Obsolete.
    pub _compat_dereg_mr: CompatFn,
    /// `ibv_alloc_mw` (inline).
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw>,
    /// `ibv_bind_mw` (inline).
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    /// `ibv_dealloc_mw` (inline).
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    /// Obsolete.
    pub _compat_create_cq: CompatFn,
    /// `ibv_poll_cq` (inline), ops+88.
    pub poll_cq: Option<PollCqFn>,
    /// `ibv_req_notify_cq` (inline), ops+96.
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    /// Obsolete.
    pub _compat_cq_event: CompatFn,
    /// Obsolete.
    pub _compat_resize_cq: CompatFn,
    /// Obsolete.
    pub _compat_destroy_cq: CompatFn,
    /// Obsolete.
    pub _compat_create_srq: CompatFn,
    /// Obsolete.
    pub _compat_modify_srq: CompatFn,
    /// Obsolete.
    pub _compat_query_srq: CompatFn,
    /// Obsolete.
    pub _compat_destroy_srq: CompatFn,
    /// `ibv_post_srq_recv` (inline), ops+160.
    pub post_srq_recv: Option<PostSrqRecvFn>,
    /// Obsolete.
    pub _compat_create_qp: CompatFn,
    /// Obsolete.
    pub _compat_query_qp: CompatFn,
    /// Obsolete.
    pub _compat_modify_qp: CompatFn,
    /// Obsolete.
    pub _compat_destroy_qp: CompatFn,
    /// `ibv_post_send` (inline), ops+200.
    pub post_send: Option<PostSendFn>,
    /// `ibv_post_recv` (inline), ops+208.
    pub post_recv: Option<PostRecvFn>,
    /// Obsolete.
    pub _compat_create_ah: CompatFn,
    /// Obsolete.
    pub _compat_destroy_ah: CompatFn,
    /// Obsolete.
    pub _compat_attach_mcast: CompatFn,
    /// Obsolete.
    pub _compat_detach_mcast: CompatFn,
    /// Obsolete.
    pub _compat_async_event: CompatFn,
}

/// `struct ibv_context`, 328 bytes.
#[repr(C)]
pub struct ibv_context {
    /// The device it was opened on.
    pub device: *mut ibv_device,
    /// Fast-path function pointers.
    pub ops: ibv_context_ops,
    /// Command fd (a real fd for `ibv_import_device`).
    pub cmd_fd: c_int,
    /// Async event fd; UCX sets O_NONBLOCK on it and polls it.
    pub async_fd: c_int,
    /// Number of completion vectors.
    pub num_comp_vectors: c_int,
    /// `pthread_mutex_t mutex`.
    pub mutex: pthread_mutex_t,
    /// All-ones (`__VERBS_ABI_IS_EXTENDED`) when a `verbs_context` precedes it.
    pub abi_compat: *mut c_void,
}

/// An extended op whose argument types this crate does not model.
pub type OpaqueFn = Option<unsafe extern "C" fn()>;

/// `struct verbs_context`, 648 bytes: extended ops, growing *downwards*
/// from the `ibv_context` at its end. The inline `verbs_get_ctx_op` uses an
/// op only if `sz >= size_of::<verbs_context>() - offset_of(op)` and the slot
/// is not NULL.
#[repr(C)]
pub struct verbs_context {
    /// The inline `ibv_query_port` (with the caller's struct size), +0.
    pub query_port:
        Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, size_t) -> c_int>,
    /// `ibv_advise_mr`.
    pub advise_mr: Option<
        unsafe extern "C" fn(*mut ibv_pd, ibv_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int,
    >,
    /// `ibv_alloc_null_mr`.
    pub alloc_null_mr: Option<unsafe extern "C" fn(*mut ibv_pd) -> *mut ibv_mr>,
    /// `ibv_read_counters`.
    pub read_counters: OpaqueFn,
    /// `ibv_attach_counters_point_flow`.
    pub attach_counters_point_flow: OpaqueFn,
    /// `ibv_create_counters`.
    pub create_counters: OpaqueFn,
    /// `ibv_destroy_counters`.
    pub destroy_counters: OpaqueFn,
    /// `ibv_reg_dm_mr`.
    pub reg_dm_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, size_t, c_uint) -> *mut ibv_mr>,
    /// `ibv_alloc_dm`.
    pub alloc_dm:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm>,
    /// `ibv_free_dm`.
    pub free_dm: Option<unsafe extern "C" fn(*mut ibv_dm) -> c_int>,
    /// `ibv_modify_flow_action_esp`.
    pub modify_flow_action_esp: OpaqueFn,
    /// `ibv_destroy_flow_action`.
    pub destroy_flow_action: OpaqueFn,
    /// `ibv_create_flow_action_esp`.
    pub create_flow_action_esp: OpaqueFn,
    /// `ibv_modify_qp_rate_limit`.
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_rate_limit_attr) -> c_int>,
    /// `ibv_alloc_parent_domain`, +112.
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd,
    >,
    /// `ibv_dealloc_td`.
    pub dealloc_td: Option<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
    /// `ibv_alloc_td`, +128.
    pub alloc_td:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
    /// `ibv_modify_cq`.
    pub modify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int>,
    /// `ibv_post_srq_ops`.
    pub post_srq_ops: OpaqueFn,
    /// `ibv_destroy_rwq_ind_table`.
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int>,
    /// `ibv_create_rwq_ind_table`.
    pub create_rwq_ind_table: OpaqueFn,
    /// `ibv_destroy_wq`.
    pub destroy_wq: Option<unsafe extern "C" fn(*mut ibv_wq) -> c_int>,
    /// `ibv_modify_wq`.
    pub modify_wq: OpaqueFn,
    /// `ibv_create_wq`.
    pub create_wq: OpaqueFn,
    /// `ibv_query_rt_values_ex`.
    pub query_rt_values:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    /// `ibv_create_cq_ex`, +200.
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    /// Library-private data.
    pub priv_: *mut verbs_ex_private,
    /// `ibv_query_device_ex`, +216.
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            size_t,
        ) -> c_int,
    >,
    /// `ibv_destroy_flow`.
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(*mut ibv_flow) -> c_int>,
    /// Placeholder.
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    /// `ibv_create_flow`.
    pub ibv_create_flow:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow>,
    /// Placeholder.
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    /// `ibv_open_qp`, +256.
    pub open_qp:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp>,
    /// `ibv_create_qp_ex`, +264.
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    /// `ibv_get_srq_num`.
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    /// `ibv_create_srq_ex`, +280.
    pub create_srq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    /// `ibv_open_xrcd`.
    pub open_xrcd:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
    /// `ibv_close_xrcd`.
    pub close_xrcd: Option<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
    /// Placeholder.
    pub _ABI_placeholder3: u64,
    /// Bytes of this struct that are valid, counted back from `context`'s end.
    pub sz: size_t,
    /// The public context; must be last.
    pub context: ibv_context,
}

// ---------------------------------------------------------------------------
// Attributes.

/// `struct ibv_device_attr`, 232 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    /// Firmware version string.
    pub fw_ver: [c_char; 64],
    /// `__be64 node_guid`.
    pub node_guid: u64,
    /// `__be64 sys_image_guid`.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// IEEE vendor ID.
    pub vendor_id: u32,
    /// Part ID; perftest picks its posting path from it.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Max QPs.
    pub max_qp: c_int,
    /// Max WRs per QP.
    pub max_qp_wr: c_int,
    /// `enum ibv_device_cap_flags`.
    pub device_cap_flags: c_uint,
    /// Max SGEs per WR.
    pub max_sge: c_int,
    /// Max SGEs per RDMA read.
    pub max_sge_rd: c_int,
    /// Max CQs.
    pub max_cq: c_int,
    /// Max CQEs per CQ.
    pub max_cqe: c_int,
    /// Max MRs.
    pub max_mr: c_int,
    /// Max PDs.
    pub max_pd: c_int,
    /// Max outstanding RDMA read/atomic per QP as target.
    pub max_qp_rd_atom: c_int,
    /// EE equivalent.
    pub max_ee_rd_atom: c_int,
    /// Device-wide.
    pub max_res_rd_atom: c_int,
    /// As initiator.
    pub max_qp_init_rd_atom: c_int,
    /// EE equivalent.
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: ibv_atomic_cap,
    /// Max EE contexts.
    pub max_ee: c_int,
    /// Max RDDs.
    pub max_rdd: c_int,
    /// Max MWs.
    pub max_mw: c_int,
    /// Raw IPv6 QPs.
    pub max_raw_ipv6_qp: c_int,
    /// Raw Ethertype QPs.
    pub max_raw_ethy_qp: c_int,
    /// Multicast groups.
    pub max_mcast_grp: c_int,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: c_int,
    /// Total multicast attachments.
    pub max_total_mcast_qp_attach: c_int,
    /// Max AHs.
    pub max_ah: c_int,
    /// Max FMRs.
    pub max_fmr: c_int,
    /// Maps per FMR.
    pub max_map_per_fmr: c_int,
    /// Max SRQs.
    pub max_srq: c_int,
    /// Max WRs per SRQ.
    pub max_srq_wr: c_int,
    /// Max SGEs per SRQ WR.
    pub max_srq_sge: c_int,
    /// P_Key table size.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Number of ports.
    pub phys_port_cnt: u8,
}

/// `struct ibv_odp_caps.per_transport_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps_per_transport {
    /// RC.
    pub rc_odp_caps: u32,
    /// UC.
    pub uc_odp_caps: u32,
    /// UD.
    pub ud_odp_caps: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps {
    /// General capabilities.
    pub general_caps: u64,
    /// Per transport.
    pub per_transport_caps: ibv_odp_caps_per_transport,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tso_caps {
    /// Max TSO size.
    pub max_tso: u32,
    /// QP types.
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rss_caps {
    /// QP types.
    pub supported_qpts: u32,
    /// Tables.
    pub max_rwq_indirection_tables: u32,
    /// Table size.
    pub max_rwq_indirection_table_size: u32,
    /// `enum ibv_rx_hash_fields`.
    pub rx_hash_fields_mask: u64,
    /// `enum ibv_rx_hash_function_flags`.
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_packet_pacing_caps {
    /// kbps.
    pub qp_rate_limit_min: u32,
    /// kbps.
    pub qp_rate_limit_max: u32,
    /// QP types.
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_caps {
    /// Rendezvous header.
    pub max_rndv_hdr_size: u32,
    /// Tags.
    pub max_num_tags: u32,
    /// `enum ibv_tm_cap_flags`.
    pub flags: u32,
    /// Outstanding list ops.
    pub max_ops: u32,
    /// SGEs per tagged buffer.
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_moderation_caps {
    /// Count.
    pub max_cq_count: u16,
    /// Microseconds.
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pci_atomic_caps {
    /// Fetch-add sizes.
    pub fetch_add: u16,
    /// Swap sizes.
    pub swap: u16,
    /// CAS sizes.
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`, 400 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    /// The legacy attributes.
    pub orig_attr: ibv_device_attr,
    /// Valid fields.
    pub comp_mask: u32,
    /// ODP.
    pub odp_caps: ibv_odp_caps,
    /// Timestamp mask.
    pub completion_timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    /// `enum ibv_device_cap_flags` and more.
    pub device_cap_flags_ex: u64,
    /// TSO.
    pub tso_caps: ibv_tso_caps,
    /// RSS.
    pub rss_caps: ibv_rss_caps,
    /// WQs.
    pub max_wq_type_rq: u32,
    /// Pacing.
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    /// `enum ibv_raw_packet_caps`.
    pub raw_packet_caps: u32,
    /// Tag matching.
    pub tm_caps: ibv_tm_caps,
    /// CQ moderation.
    pub cq_mod_caps: ibv_cq_moderation_caps,
    /// Device memory.
    pub max_dm_size: u64,
    /// PCIe atomics.
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    /// XRC ODP.
    pub xrc_odp_caps: u32,
    /// Ports, when more than 255.
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_query_device_ex_input {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_port_attr`, 52 bytes with v44 headers (56 with later ones).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: ibv_port_state,
    /// `enum ibv_mtu`.
    pub max_mtu: ibv_mtu,
    /// `enum ibv_mtu`.
    pub active_mtu: ibv_mtu,
    /// GID table length.
    pub gid_tbl_len: c_int,
    /// Capability flags.
    pub port_cap_flags: u32,
    /// Max message size.
    pub max_msg_sz: u32,
    /// Counter.
    pub bad_pkey_cntr: u32,
    /// Counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0 on Ethernet).
    pub lid: u16,
    /// SM LID.
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// VLs.
    pub max_vl_num: u8,
    /// SM SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Width.
    pub active_width: u8,
    /// Speed.
    pub active_speed: u8,
    /// Physical state.
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*` (1 = InfiniBand, 2 = Ethernet).
    pub link_layer: u8,
    /// `enum ibv_port_attr_flags`.
    pub flags: u8,
    /// More capability flags (not in the 48-byte compat struct).
    pub port_cap_flags2: u16,
}

/// `struct _compat_ibv_port_attr`, 48 bytes: what the exported
/// `ibv_query_port@IBVERBS_1.1` may write (the header declares it
/// incomplete; it is `ibv_port_attr` up to `flags`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct _compat_ibv_port_attr {
    /// See [`ibv_port_attr`].
    pub state: ibv_port_state,
    /// See [`ibv_port_attr`].
    pub max_mtu: ibv_mtu,
    /// See [`ibv_port_attr`].
    pub active_mtu: ibv_mtu,
    /// See [`ibv_port_attr`].
    pub gid_tbl_len: c_int,
    /// See [`ibv_port_attr`].
    pub port_cap_flags: u32,
    /// See [`ibv_port_attr`].
    pub max_msg_sz: u32,
    /// See [`ibv_port_attr`].
    pub bad_pkey_cntr: u32,
    /// See [`ibv_port_attr`].
    pub qkey_viol_cntr: u32,
    /// See [`ibv_port_attr`].
    pub pkey_tbl_len: u16,
    /// See [`ibv_port_attr`].
    pub lid: u16,
    /// See [`ibv_port_attr`].
    pub sm_lid: u16,
    /// See [`ibv_port_attr`].
    pub lmc: u8,
    /// See [`ibv_port_attr`].
    pub max_vl_num: u8,
    /// See [`ibv_port_attr`].
    pub sm_sl: u8,
    /// See [`ibv_port_attr`].
    pub subnet_timeout: u8,
    /// See [`ibv_port_attr`].
    pub init_type_reply: u8,
    /// See [`ibv_port_attr`].
    pub active_width: u8,
    /// See [`ibv_port_attr`].
    pub active_speed: u8,
    /// See [`ibv_port_attr`].
    pub phys_state: u8,
    /// See [`ibv_port_attr`].
    pub link_layer: u8,
    /// See [`ibv_port_attr`].
    pub flags: u8,
}

/// `struct ibv_qp_cap`, 20 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_cap {
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// Send SGEs.
    pub max_send_sge: u32,
    /// Receive SGEs.
    pub max_recv_sge: u32,
    /// Inline bytes; rc_pingpong sets IBV_SEND_INLINE from it.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr`, 144 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: ibv_qp_state,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: ibv_qp_state,
    /// `enum ibv_mtu`.
    pub path_mtu: ibv_mtu,
    /// `enum ibv_mig_state`.
    pub path_mig_state: ibv_mig_state,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Remote QPN.
    pub dest_qp_num: u32,
    /// `enum ibv_access_flags`.
    pub qp_access_flags: c_uint,
    /// Capacities.
    pub cap: ibv_qp_cap,
    /// Primary path.
    pub ah_attr: ibv_ah_attr,
    /// Alternate path.
    pub alt_ah_attr: ibv_ah_attr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD async notify.
    pub en_sqd_async_notify: u8,
    /// SQ draining.
    pub sq_draining: u8,
    /// Initiator depth.
    pub max_rd_atomic: u8,
    /// Responder resources.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// kbps.
    pub rate_limit: u32,
}

/// `struct ibv_qp_init_attr`, 64 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ or NULL.
    pub srq: *mut ibv_srq,
    /// Capacities.
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
    /// Signal every send.
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    /// Function.
    pub rx_hash_function: u8,
    /// Key length.
    pub rx_hash_key_len: u8,
    /// Key.
    pub rx_hash_key: *mut u8,
    /// Fields.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`, 136 bytes; begins like `ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    /// User context.
    pub qp_context: *mut c_void,
    /// Send CQ.
    pub send_cq: *mut ibv_cq,
    /// Receive CQ.
    pub recv_cq: *mut ibv_cq,
    /// SRQ or NULL.
    pub srq: *mut ibv_srq,
    /// Capacities.
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
    /// Signal every send.
    pub sq_sig_all: c_int,
    /// `enum ibv_qp_init_attr_mask`.
    pub comp_mask: u32,
    /// PD.
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// `enum ibv_qp_create_flags`.
    pub create_flags: u32,
    /// TSO header.
    pub max_tso_header: u16,
    /// RSS table.
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    /// RSS hash.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// Source QPN.
    pub source_qpn: u32,
    /// `enum ibv_qp_create_send_ops_flags`: which `ibv_wr_*` the QP needs.
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_open_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_open_attr {
    /// Valid fields.
    pub comp_mask: u32,
    /// QPN.
    pub qp_num: u32,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// User context.
    pub qp_context: *mut c_void,
    /// `enum ibv_qp_type`.
    pub qp_type: ibv_qp_type,
}

/// `struct ibv_srq_attr`, 12 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_attr {
    /// WRs.
    pub max_wr: u32,
    /// SGEs.
    pub max_sge: u32,
    /// Limit event threshold.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`, 24 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr {
    /// User context.
    pub srq_context: *mut c_void,
    /// Sizes.
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_cap {
    /// Tags.
    pub max_num_tags: u32,
    /// Ops.
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    /// User context.
    pub srq_context: *mut c_void,
    /// Sizes.
    pub attr: ibv_srq_attr,
    /// Valid fields.
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: ibv_srq_type,
    /// PD.
    pub pd: *mut ibv_pd,
    /// XRC domain.
    pub xrcd: *mut ibv_xrcd,
    /// CQ (XRC).
    pub cq: *mut ibv_cq,
    /// Tag matching.
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    /// Minimum CQEs.
    pub cqe: u32,
    /// User context.
    pub cq_context: *mut c_void,
    /// Channel or NULL.
    pub channel: *mut ibv_comp_channel,
    /// Vector.
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags`.
    pub wc_flags: u64,
    /// `enum ibv_cq_init_attr_mask`.
    pub comp_mask: u32,
    /// `enum ibv_create_cq_attr_flags`.
    pub flags: u32,
    /// Parent domain.
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_poll_cq_attr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_moderate_cq`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_moderate_cq {
    /// Count.
    pub cq_count: u16,
    /// Microseconds.
    pub cq_period: u16,
}

/// `struct ibv_modify_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_modify_cq_attr {
    /// Valid fields.
    pub attr_mask: u32,
    /// Moderation.
    pub moderate: ibv_moderate_cq,
}

/// `struct ibv_values_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_values_ex {
    /// Valid fields.
    pub comp_mask: u32,
    /// Raw clock.
    pub raw_clock: timespec,
}

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_alloc_dm_attr {
    /// Bytes.
    pub length: size_t,
    /// Log2 alignment.
    pub log_align_req: u32,
    /// Valid fields.
    pub comp_mask: u32,
}

/// `struct ibv_qp_rate_limit_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_rate_limit_attr {
    /// kbps.
    pub rate_limit: u32,
    /// Bytes.
    pub max_burst_sz: u32,
    /// Bytes.
    pub typical_pkt_sz: u16,
    /// Valid fields.
    pub comp_mask: u32,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_parent_domain_init_attr {
    /// PD.
    pub pd: *mut ibv_pd,
    /// TD or NULL.
    pub td: *mut ibv_td,
    /// Valid fields.
    pub comp_mask: u32,
    /// Custom allocator.
    pub alloc:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, size_t, size_t, u64) -> *mut c_void>,
    /// Custom free.
    pub free: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
    /// Allocator context.
    pub pd_context: *mut c_void,
}

/// `struct ibv_flow_attr` (specs follow it in memory).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_flow_attr {
    /// Valid fields.
    pub comp_mask: u32,
    /// `enum ibv_flow_attr_type`.
    pub type_: ibv_flow_attr_type,
    /// Bytes including specs.
    pub size: u16,
    /// Priority.
    pub priority: u16,
    /// Specs.
    pub num_of_specs: u8,
    /// Port.
    pub port: u8,
    /// Flags.
    pub flags: u32,
}

/// `struct ibv_ece`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ece {
    /// IEEE OUI.
    pub vendor_id: u32,
    /// Provider options.
    pub options: u32,
    /// Valid fields.
    pub comp_mask: u32,
}

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

// ---------------------------------------------------------------------------
// Compile-time checks against the sizes and offsets the reference measured
// (x86_64, v44 headers). tests/it/layout.rs checks every field against the
// installed header as well.

macro_rules! assert_layout {
    ($t:ty, $size:expr $(, $field:ident = $off:expr)* $(,)?) => {
        const _: () = assert!(size_of::<$t>() == $size);
        $(const _: () = assert!(offset_of!($t, $field) == $off);)*
    };
}

assert_layout!(ibv_gid, 16);
assert_layout!(ibv_global_route, 24, flow_label = 16, sgid_index = 20);
assert_layout!(ibv_ah_attr, 32, dlid = 24, is_global = 29, port_num = 30);
assert_layout!(
    ibv_device,
    664,
    node_type = 16,
    transport_type = 20,
    name = 24,
    dev_name = 88,
    dev_path = 152,
    ibdev_path = 408,
);
assert_layout!(verbs_device, 712, ops = 664);
assert_layout!(
    ibv_context_ops,
    256,
    poll_cq = 88,
    req_notify_cq = 96,
    post_srq_recv = 160
);
assert_layout!(ibv_context_ops, 256, post_send = 200, post_recv = 208);
assert_layout!(
    ibv_context,
    328,
    ops = 8,
    cmd_fd = 264,
    async_fd = 268,
    num_comp_vectors = 272,
    mutex = 280,
    abi_compat = 320,
);
assert_layout!(
    verbs_context,
    648,
    query_port = 0,
    alloc_parent_domain = 112,
    alloc_td = 128,
    create_cq_ex = 200,
    query_device_ex = 216,
    open_qp = 256,
    create_qp_ex = 264,
    create_srq_ex = 280,
    sz = 312,
    context = 320,
);
assert_layout!(ibv_pd, 16);
assert_layout!(ibv_mr, 48, lkey = 36, rkey = 40);
assert_layout!(
    ibv_cq,
    128,
    context = 0,
    channel = 8,
    cq_context = 16,
    cqe = 28
);
assert_layout!(
    ibv_cq_ex,
    288,
    status = 132,
    wr_id = 136,
    start_poll = 144,
    next_poll = 152,
    end_poll = 160,
    read_opcode = 168,
    read_completion_wallclock_ns = 280,
);
assert_layout!(ibv_qp, 160, qp_num = 52, state = 56, qp_type = 60);
assert_layout!(
    ibv_qp_ex,
    352,
    wr_id = 168,
    wr_flags = 176,
    wr_rdma_write = 224,
    wr_send = 240,
    wr_set_sge = 304,
    wr_start = 320,
    wr_complete = 328,
    wr_abort = 336,
);
assert_layout!(ibv_srq, 128);
assert_layout!(ibv_ah, 24);
assert_layout!(ibv_comp_channel, 16, fd = 8);
assert_layout!(
    ibv_wc,
    48,
    status = 8,
    opcode = 12,
    byte_len = 20,
    imm_data = 24,
    qp_num = 28,
    wc_flags = 36,
);
assert_layout!(ibv_sge, 16);
assert_layout!(
    ibv_send_wr,
    128,
    sg_list = 16,
    opcode = 28,
    send_flags = 32,
    imm_data = 36,
    wr = 40,
);
assert_layout!(ibv_recv_wr, 32);
assert_layout!(ibv_qp_attr, 144);
assert_layout!(ibv_qp_init_attr, 64);
assert_layout!(
    ibv_qp_init_attr_ex,
    136,
    comp_mask = 60,
    send_ops_flags = 128
);
assert_layout!(ibv_port_attr, 52, port_cap_flags2 = 48);
assert_layout!(_compat_ibv_port_attr, 48);
assert_layout!(ibv_device_attr, 232);
assert_layout!(ibv_device_attr_ex, 400, comp_mask = 232);
assert_layout!(ibv_async_event, 16, event_type = 8);
assert_layout!(ibv_srq_attr, 12);
assert_layout!(ibv_srq_init_attr, 24);
assert_layout!(ibv_mw, 32);
assert_layout!(ibv_gid_entry, 32);
