//! Attribute structs of the query, create and modify calls.

#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_void};

use libc::{size_t, timespec};

use super::*;

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

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_td_init_attr {
    /// Valid fields (none are defined).
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
