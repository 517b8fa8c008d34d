//! The device and the context, with their op tables.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_void};

use libc::{pthread_mutex_t, size_t};

use super::*;

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
