//! IBVERBS_PRIVATE_34: what libibverbs and its providers share and programs
//! never see (rdma-core v44's `libibverbs/driver.h`, identical from v44 to
//! v52). A provider names this version by calling `verbs_register_driver_34`;
//! another private version would get a module of its own beside this one
//! (decision record 0023).
//!
//! The layouts are not in any installed header, so they are checked here
//! against the sizes and offsets read from v44's `driver.h` for x86_64.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_void};

use libc::size_t;

use super::*;

/// The private ABI version this module describes.
pub const PABI_VERSION: u32 = 34;

/// `struct verbs_match_ent`: one entry of a provider's match table.
#[repr(C)]
pub struct verbs_match_ent {
    /// Provider data for a match.
    pub driver_data: *mut c_void,
    /// `modalias` or `driver_id`, by `kind`.
    pub u: u64,
    /// PCI vendor.
    pub vendor: u16,
    /// PCI device.
    pub device: u16,
    /// `VERBS_MATCH_*`.
    pub kind: u8,
}

/// `VERBS_MATCH_DRIVER_ID`.
pub const VERBS_MATCH_DRIVER_ID: u8 = 3;
/// `RDMA_DRIVER_MLX5` (`enum rdma_driver_id`).
pub const RDMA_DRIVER_MLX5: u32 = 1;

/// `struct verbs_sysfs_dev`: an RDMA device as libibverbs found it in sysfs.
#[repr(C)]
pub struct verbs_sysfs_dev {
    /// `struct list_node entry`.
    pub entry: list_node,
    /// Provider data of the match.
    pub provider_data: *mut c_void,
    /// The match table entry that matched.
    pub match_: *const verbs_match_ent,
    /// `VSYSFS_READ_*`.
    pub flags: c_uint,
    /// uverbs name (`uverbs0`).
    pub sysfs_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// `dev_t` of the uverbs character device.
    pub sysfs_cdev: u64,
    /// Device name (`mlx5_0`).
    pub ibdev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the infiniband class device.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// Module alias.
    pub modalias: [c_char; 512],
    /// Node GUID.
    pub node_guid: u64,
    /// `enum rdma_driver_id`.
    pub driver_id: u32,
    /// `enum ibv_node_type`.
    pub node_type: ibv_node_type,
    /// Device index.
    pub ibdev_idx: c_int,
    /// Ports.
    pub num_ports: u32,
    /// uverbs ABI version the kernel driver speaks.
    pub abi_ver: u32,
    /// `struct timespec time_created`.
    pub time_created: [i64; 2],
}

/// `struct verbs_device_ops`: what a provider registers.
#[repr(C)]
pub struct verbs_device_ops {
    /// The provider's name (`"mlx5"`).
    pub name: *const c_char,
    /// Lowest kernel ABI version it drives.
    pub match_min_abi_version: u32,
    /// Highest kernel ABI version it drives.
    pub match_max_abi_version: u32,
    /// Its match table, ended by a zeroed entry.
    pub match_table: *const verbs_match_ent,
    /// Static builds only.
    pub static_providers: *const *const verbs_device_ops,
    /// A match function of its own, if any.
    pub match_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> bool>,
    /// Makes a context.
    pub alloc_context:
        Option<unsafe extern "C" fn(*mut ibv_device, c_int, *mut c_void) -> *mut verbs_context>,
    /// Imports a context from a command fd.
    pub import_context: Option<unsafe extern "C" fn(*mut ibv_device, c_int) -> *mut verbs_context>,
    /// Makes the device.
    pub alloc_device: Option<unsafe extern "C" fn(*mut verbs_sysfs_dev) -> *mut verbs_device>,
    /// Frees it.
    pub uninit_device: Option<unsafe extern "C" fn(*mut verbs_device)>,
}

/// `struct verbs_context_ops`: the union of every op a provider may give,
/// 76 slots, sorted by name. Slots with a public place keep that place's
/// type (so they are copied there without a cast); the ones this library
/// calls are typed; the rest are [`OpaqueFn`].
#[repr(C)]
pub struct verbs_context_ops {
    /// `ibv_advise_mr`.
    pub advise_mr: Option<
        unsafe extern "C" fn(*mut ibv_pd, ibv_advise_mr_advice, u32, *mut ibv_sge, u32) -> c_int,
    >,
    /// `ibv_alloc_dm`.
    pub alloc_dm:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_alloc_dm_attr) -> *mut ibv_dm>,
    /// `ibv_alloc_mw`.
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, ibv_mw_type) -> *mut ibv_mw>,
    /// `ibv_alloc_null_mr`.
    pub alloc_null_mr: Option<unsafe extern "C" fn(*mut ibv_pd) -> *mut ibv_mr>,
    /// `ibv_alloc_parent_domain`.
    pub alloc_parent_domain: Option<
        unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd,
    >,
    /// `ibv_alloc_pd`.
    pub alloc_pd: Option<unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd>,
    /// `ibv_alloc_td`.
    pub alloc_td:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td>,
    /// Called by `ibv_get_async_event`.
    pub async_event: Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event)>,
    /// `ibv_attach_counters_point_flow`.
    pub attach_counters_point_flow: OpaqueFn,
    /// `ibv_attach_mcast`.
    pub attach_mcast: OpaqueFn,
    /// `ibv_bind_mw`.
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    /// `ibv_close_xrcd`.
    pub close_xrcd: Option<unsafe extern "C" fn(*mut ibv_xrcd) -> c_int>,
    /// Called by `ibv_get_cq_event`.
    pub cq_event: Option<unsafe extern "C" fn(*mut ibv_cq)>,
    /// `ibv_create_ah`.
    pub create_ah: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah>,
    /// `ibv_create_counters`.
    pub create_counters: OpaqueFn,
    /// `ibv_create_cq`.
    pub create_cq: Option<
        unsafe extern "C" fn(*mut ibv_context, c_int, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    >,
    /// `ibv_create_cq_ex`.
    pub create_cq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex>,
    /// `ibv_create_flow`.
    pub create_flow: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow>,
    /// `ibv_create_flow_action_esp`.
    pub create_flow_action_esp: OpaqueFn,
    /// `ibv_create_qp`.
    pub create_qp: Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp>,
    /// `ibv_create_qp_ex`.
    pub create_qp_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp>,
    /// `ibv_create_rwq_ind_table`.
    pub create_rwq_ind_table: OpaqueFn,
    /// `ibv_create_srq`.
    pub create_srq:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq>,
    /// `ibv_create_srq_ex`.
    pub create_srq_ex:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq>,
    /// `ibv_create_wq`.
    pub create_wq: OpaqueFn,
    /// `ibv_dealloc_mw`.
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    /// `ibv_dealloc_pd`.
    pub dealloc_pd: Option<unsafe extern "C" fn(*mut ibv_pd) -> c_int>,
    /// `ibv_dealloc_td`.
    pub dealloc_td: Option<unsafe extern "C" fn(*mut ibv_td) -> c_int>,
    /// `ibv_dereg_mr` (with the `verbs_mr` around the `ibv_mr`).
    pub dereg_mr: Option<unsafe extern "C" fn(*mut verbs_mr) -> c_int>,
    /// `ibv_destroy_ah`.
    pub destroy_ah: Option<unsafe extern "C" fn(*mut ibv_ah) -> c_int>,
    /// `ibv_destroy_counters`.
    pub destroy_counters: OpaqueFn,
    /// `ibv_destroy_cq`.
    pub destroy_cq: Option<unsafe extern "C" fn(*mut ibv_cq) -> c_int>,
    /// `ibv_destroy_flow`.
    pub destroy_flow: Option<unsafe extern "C" fn(*mut ibv_flow) -> c_int>,
    /// `ibv_destroy_flow_action`.
    pub destroy_flow_action: OpaqueFn,
    /// `ibv_destroy_qp`.
    pub destroy_qp: Option<unsafe extern "C" fn(*mut ibv_qp) -> c_int>,
    /// `ibv_destroy_rwq_ind_table`.
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int>,
    /// `ibv_destroy_srq`.
    pub destroy_srq: Option<unsafe extern "C" fn(*mut ibv_srq) -> c_int>,
    /// `ibv_destroy_wq`.
    pub destroy_wq: Option<unsafe extern "C" fn(*mut ibv_wq) -> c_int>,
    /// `ibv_detach_mcast`.
    pub detach_mcast: OpaqueFn,
    /// Called by `ibv_close_device`.
    pub free_context: Option<unsafe extern "C" fn(*mut ibv_context)>,
    /// `ibv_free_dm`.
    pub free_dm: Option<unsafe extern "C" fn(*mut ibv_dm) -> c_int>,
    /// `ibv_get_srq_num`.
    pub get_srq_num: Option<unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int>,
    /// `ibv_import_dm`.
    pub import_dm: OpaqueFn,
    /// `ibv_import_mr`.
    pub import_mr: OpaqueFn,
    /// `ibv_import_pd`.
    pub import_pd: OpaqueFn,
    /// `ibv_modify_cq`.
    pub modify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, *mut ibv_modify_cq_attr) -> c_int>,
    /// `ibv_modify_flow_action_esp`.
    pub modify_flow_action_esp: OpaqueFn,
    /// `ibv_modify_qp`.
    pub modify_qp: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int>,
    /// `ibv_modify_qp_rate_limit`.
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_rate_limit_attr) -> c_int>,
    /// `ibv_modify_srq`.
    pub modify_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int>,
    /// `ibv_modify_wq`.
    pub modify_wq: OpaqueFn,
    /// `ibv_open_qp`.
    pub open_qp:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_open_attr) -> *mut ibv_qp>,
    /// `ibv_open_xrcd`.
    pub open_xrcd:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd>,
    /// `ibv_poll_cq`.
    pub poll_cq: Option<PollCqFn>,
    /// `ibv_post_recv`.
    pub post_recv: Option<PostRecvFn>,
    /// `ibv_post_send`.
    pub post_send: Option<PostSendFn>,
    /// `ibv_post_srq_ops`.
    pub post_srq_ops: OpaqueFn,
    /// `ibv_post_srq_recv`.
    pub post_srq_recv: Option<PostSrqRecvFn>,
    /// `ibv_query_device_ex`.
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            *mut ibv_context,
            *const ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            size_t,
        ) -> c_int,
    >,
    /// `ibv_query_ece`.
    pub query_ece: OpaqueFn,
    /// `ibv_query_port` (the full struct).
    pub query_port: Option<unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int>,
    /// `ibv_query_qp`.
    pub query_qp: Option<
        unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
    >,
    /// `ibv_query_qp_data_in_order`.
    pub query_qp_data_in_order: OpaqueFn,
    /// `ibv_query_rt_values_ex`.
    pub query_rt_values:
        Option<unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int>,
    /// `ibv_query_srq`.
    pub query_srq: Option<unsafe extern "C" fn(*mut ibv_srq, *mut ibv_srq_attr) -> c_int>,
    /// `ibv_read_counters`.
    pub read_counters: OpaqueFn,
    /// `ibv_reg_dm_mr`.
    pub reg_dm_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut ibv_dm, u64, size_t, c_uint) -> *mut ibv_mr>,
    /// `ibv_reg_dmabuf_mr`.
    pub reg_dmabuf_mr: OpaqueFn,
    /// `ibv_reg_mr` (address, length, IOVA, access).
    pub reg_mr:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, size_t, u64, c_int) -> *mut ibv_mr>,
    /// `ibv_req_notify_cq`.
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    /// `ibv_rereg_mr`.
    pub rereg_mr: Option<
        unsafe extern "C" fn(
            *mut verbs_mr,
            c_int,
            *mut ibv_pd,
            *mut c_void,
            size_t,
            c_int,
        ) -> c_int,
    >,
    /// `ibv_resize_cq`.
    pub resize_cq: Option<unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int>,
    /// `ibv_set_ece`.
    pub set_ece: OpaqueFn,
    /// `ibv_unimport_dm`.
    pub unimport_dm: OpaqueFn,
    /// `ibv_unimport_mr`.
    pub unimport_mr: OpaqueFn,
    /// `ibv_unimport_pd`.
    pub unimport_pd: OpaqueFn,
}

/// `struct verbs_mr`: the `ibv_mr` a provider hands out, and what the
/// library keeps beside it.
#[repr(C)]
pub struct verbs_mr {
    /// The public part.
    pub ibv_mr: ibv_mr,
    /// `enum ibv_mr_type`.
    pub mr_type: c_uint,
    /// The access flags it was registered with.
    pub access: c_int,
}

/// `IBV_MR_TYPE_MR`.
pub const IBV_MR_TYPE_MR: c_uint = 0;

/// `struct verbs_qp`: the `ibv_qp` (or `ibv_qp_ex`) and the library's tail.
#[repr(C)]
pub struct verbs_qp {
    /// The public part (`ibv_qp_ex`, whose `qp_base` is first).
    pub qp_ex: ibv_qp_ex,
    /// `VERBS_QP_*`.
    pub comp_mask: u32,
    /// The XRC domain.
    pub xrcd: *mut c_void,
}

/// `struct verbs_srq`: the `ibv_srq` and the library's tail.
#[repr(C)]
pub struct verbs_srq {
    /// The public part.
    pub srq: ibv_srq,
    /// `enum ibv_srq_type`.
    pub srq_type: c_uint,
    /// The XRC domain.
    pub xrcd: *mut c_void,
    /// The XRC CQ.
    pub cq: *mut ibv_cq,
    /// SRQ number (XRC).
    pub srq_num: u32,
}

/// `struct ib_uverbs_ioctl_hdr`: which object and method an ioctl is for.
#[repr(C)]
pub struct ib_uverbs_ioctl_hdr {
    /// Bytes of header and attributes.
    pub length: u16,
    /// `UVERBS_OBJECT_*` (or a driver's object).
    pub object_id: u16,
    /// The object's method.
    pub method_id: u16,
    /// Attributes that follow.
    pub num_attrs: u16,
    /// Reserved.
    pub reserved1: u64,
    /// `enum rdma_driver_id`.
    pub driver_id: u32,
    /// Reserved.
    pub reserved2: u32,
}

/// `struct ibv_command_buffer` (`cmd_ioctl.h`): only its header is read, to
/// tell which object and method an `execute_ioctl` is for.
#[repr(C)]
pub struct ibv_command_buffer {
    /// The next buffer of the chain.
    pub next: *mut ibv_command_buffer,
    /// End of the attributes in use.
    pub next_attr: *mut c_void,
    /// End of the room for attributes.
    pub last_attr: *mut c_void,
    /// `uhw_in_idx`, `uhw_out_idx`, the two headroom counts and the flag
    /// bits.
    pub uhw: [u8; 5],
    /// The ioctl header.
    pub hdr: ib_uverbs_ioctl_hdr,
}

// ---------------------------------------------------------------------------
// The write commands as rdma-core lays them out (its generated
// `kern-abi.h`): the uverbs header, then the kernel's struct; the driver's
// request follows at the end of each.

/// `struct ibv_get_context`.
#[repr(C)]
pub struct ibv_get_context {
    /// Header.
    pub hdr: uapi::ib_uverbs_cmd_hdr,
    /// The kernel's part.
    pub core: uapi::ib_uverbs_get_context,
}

/// `struct ibv_alloc_pd`.
#[repr(C)]
pub struct ibv_alloc_pd {
    /// Header.
    pub hdr: uapi::ib_uverbs_cmd_hdr,
    /// The kernel's part.
    pub core: uapi::ib_uverbs_alloc_pd,
}

/// `struct ibv_create_cq_ex`.
#[repr(C)]
pub struct ibv_create_cq_ex {
    /// Header.
    pub hdr: uapi::ib_uverbs_cmd_hdr,
    /// Extended header.
    pub ex_hdr: uapi::ib_uverbs_ex_cmd_hdr,
    /// The kernel's part.
    pub core: uapi::ib_uverbs_ex_create_cq,
}

/// `struct ibv_create_qp`.
#[repr(C)]
pub struct ibv_create_qp {
    /// Header.
    pub hdr: uapi::ib_uverbs_cmd_hdr,
    /// The kernel's part.
    pub core: uapi::ib_uverbs_create_qp,
}

/// `struct ibv_create_qp_ex`.
#[repr(C)]
pub struct ibv_create_qp_ex {
    /// Header.
    pub hdr: uapi::ib_uverbs_cmd_hdr,
    /// Extended header.
    pub ex_hdr: uapi::ib_uverbs_ex_cmd_hdr,
    /// The kernel's part.
    pub core: uapi::ib_uverbs_ex_create_qp,
}

/// `struct ibv_create_srq`.
#[repr(C)]
pub struct ibv_create_srq {
    /// Header.
    pub hdr: uapi::ib_uverbs_cmd_hdr,
    /// The kernel's part.
    pub core: uapi::ib_uverbs_create_srq,
}

// ---------------------------------------------------------------------------
// Checks against v44's `driver.h` (x86_64).

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<verbs_match_ent>() == 24);
    assert!(offset_of!(verbs_sysfs_dev, sysfs_name) == 36);
    assert!(offset_of!(verbs_sysfs_dev, sysfs_cdev) == 104);
    assert!(offset_of!(verbs_sysfs_dev, ibdev_name) == 112);
    assert!(offset_of!(verbs_sysfs_dev, ibdev_path) == 176);
    assert!(offset_of!(verbs_sysfs_dev, modalias) == 432);
    assert!(offset_of!(verbs_sysfs_dev, node_guid) == 944);
    assert!(offset_of!(verbs_sysfs_dev, abi_ver) == 968);
    assert!(size_of::<verbs_sysfs_dev>() == 992);
    assert!(size_of::<verbs_device_ops>() == 72);
    assert!(offset_of!(verbs_device_ops, alloc_context) == 40);
    assert!(offset_of!(verbs_device_ops, alloc_device) == 56);
    // 76 slots, in driver.h's order.
    assert!(size_of::<verbs_context_ops>() == 76 * 8);
    assert!(offset_of!(verbs_context_ops, alloc_pd) == 5 * 8);
    assert!(offset_of!(verbs_context_ops, free_context) == 39 * 8);
    assert!(offset_of!(verbs_context_ops, poll_cq) == 53 * 8);
    assert!(offset_of!(verbs_context_ops, post_send) == 55 * 8);
    assert!(offset_of!(verbs_context_ops, query_port) == 60 * 8);
    assert!(offset_of!(verbs_context_ops, req_notify_cq) == 69 * 8);
    assert!(offset_of!(verbs_context_ops, unimport_pd) == 75 * 8);
    assert!(size_of::<verbs_mr>() == size_of::<ibv_mr>() + 8);
    assert!(offset_of!(verbs_qp, comp_mask) == size_of::<ibv_qp_ex>());
    assert!(offset_of!(ibv_command_buffer, hdr) == 32);
    // The driver's request starts where these end (the reference's
    // get_context +16, create_cq_ex +56, create_qp +64).
    assert!(size_of::<ibv_get_context>() == 16);
    assert!(size_of::<ibv_alloc_pd>() == 16);
    assert!(size_of::<ibv_create_cq_ex>() == 56);
    assert!(size_of::<ibv_create_qp>() == 64);
    assert!(size_of::<ibv_create_srq>() == 40);
    assert!(size_of::<ibv_create_qp_ex>() == 88);
    assert!(size_of::<ibv_get_context>() + size_of::<uapi::mlx5_ib_alloc_ucontext_req_v2>() == 48);
    assert!(size_of::<ibv_create_cq_ex>() + size_of::<uapi::mlx5_ib_create_cq>() == 88);
    assert!(size_of::<ibv_create_qp>() + size_of::<uapi::mlx5_ib_create_qp>() == 120);
    assert!(
        size_of::<uapi::ib_uverbs_get_context_resp>()
            + size_of::<uapi::mlx5_ib_alloc_ucontext_resp>()
            == 80
    );
    assert!(
        size_of::<uapi::ib_uverbs_ex_create_cq_resp>() + size_of::<uapi::mlx5_ib_create_cq_resp>()
            == 24
    );
    assert!(
        size_of::<uapi::ib_uverbs_create_qp_resp>() + size_of::<uapi::mlx5_ib_create_qp_resp>()
            == 72
    );
};
