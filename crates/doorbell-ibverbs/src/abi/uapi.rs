//! The kernel's uAPI for uverbs write commands and for mlx5's driver data
//! (`<rdma/ib_user_verbs.h>`, `<rdma/mlx5-abi.h>`): the requests and
//! responses that rdma-core's libmlx5 builds and this library, playing the
//! kernel, answers. uAPI structs only ever grow at their end; the fields
//! here are those of Linux 6.1, which `tests/it/layout.rs` checks against
//! the installed headers. The rdma-core command structs that prefix a
//! header to them are in [`super::private34`].

#![allow(non_camel_case_types)]

// ---------------------------------------------------------------------------
// <rdma/ib_user_verbs.h>

/// `struct ib_uverbs_cmd_hdr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_cmd_hdr {
    /// Command number.
    pub command: u32,
    /// Request length in 32-bit words.
    pub in_words: u16,
    /// Response length in 32-bit words.
    pub out_words: u16,
}

/// `struct ib_uverbs_ex_cmd_hdr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_ex_cmd_hdr {
    /// Response address.
    pub response: u64,
    /// Driver request length in 64-bit words.
    pub provider_in_words: u16,
    /// Driver response length in 64-bit words.
    pub provider_out_words: u16,
    /// Reserved.
    pub cmd_hdr_reserved: u32,
}

/// `struct ib_uverbs_get_context` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_get_context {
    /// Response address.
    pub response: u64,
}

/// `struct ib_uverbs_get_context_resp` (without its driver data, whose
/// 64-bit words align it to 8).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_get_context_resp {
    /// The context's async event fd.
    pub async_fd: u32,
    /// Completion vectors.
    pub num_comp_vectors: u32,
}

/// `struct ib_uverbs_alloc_pd` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_alloc_pd {
    /// Response address.
    pub response: u64,
}

/// `struct ib_uverbs_alloc_pd_resp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_alloc_pd_resp {
    /// The PD's handle.
    pub pd_handle: u32,
}

/// `struct ib_uverbs_ex_create_cq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_ex_create_cq {
    /// The user's handle.
    pub user_handle: u64,
    /// Entries asked for.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
    /// Completion channel fd, or -1.
    pub comp_channel: i32,
    /// Extensions in use.
    pub comp_mask: u32,
    /// `IB_UVERBS_CQ_FLAGS_*`.
    pub flags: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct ib_uverbs_create_cq_resp` (without its driver data).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_create_cq_resp {
    /// The CQ's handle.
    pub cq_handle: u32,
    /// Entries granted.
    pub cqe: u32,
}

/// `struct ib_uverbs_ex_create_cq_resp` (without its driver data).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_ex_create_cq_resp {
    /// The legacy part.
    pub base: ib_uverbs_create_cq_resp,
    /// Extensions answered.
    pub comp_mask: u32,
    /// Bytes of response written.
    pub response_length: u32,
}

/// `struct ib_uverbs_create_qp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_create_qp {
    /// Response address.
    pub response: u64,
    /// The user's handle.
    pub user_handle: u64,
    /// Its PD.
    pub pd_handle: u32,
    /// Its send CQ.
    pub send_cq_handle: u32,
    /// Its receive CQ.
    pub recv_cq_handle: u32,
    /// Its SRQ.
    pub srq_handle: u32,
    /// Send WRs asked for.
    pub max_send_wr: u32,
    /// Receive WRs asked for.
    pub max_recv_wr: u32,
    /// Send SGEs asked for.
    pub max_send_sge: u32,
    /// Receive SGEs asked for.
    pub max_recv_sge: u32,
    /// Inline bytes asked for.
    pub max_inline_data: u32,
    /// Signal every send.
    pub sq_sig_all: u8,
    /// `IB_QPT_*`.
    pub qp_type: u8,
    /// Receives from an SRQ.
    pub is_srq: u8,
    /// Reserved.
    pub reserved: u8,
}

/// `struct ib_uverbs_create_qp_resp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_create_qp_resp {
    /// The QP's handle.
    pub qp_handle: u32,
    /// Its number.
    pub qpn: u32,
    /// Send WRs granted.
    pub max_send_wr: u32,
    /// Receive WRs granted.
    pub max_recv_wr: u32,
    /// Send SGEs granted.
    pub max_send_sge: u32,
    /// Receive SGEs granted.
    pub max_recv_sge: u32,
    /// Inline bytes granted.
    pub max_inline_data: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_create_qp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_ex_create_qp {
    /// The user's handle.
    pub user_handle: u64,
    /// Its PD.
    pub pd_handle: u32,
    /// Its send CQ.
    pub send_cq_handle: u32,
    /// Its receive CQ.
    pub recv_cq_handle: u32,
    /// Its SRQ.
    pub srq_handle: u32,
    /// Send WRs asked for.
    pub max_send_wr: u32,
    /// Receive WRs asked for.
    pub max_recv_wr: u32,
    /// Send SGEs asked for.
    pub max_send_sge: u32,
    /// Receive SGEs asked for.
    pub max_recv_sge: u32,
    /// Inline bytes asked for.
    pub max_inline_data: u32,
    /// Signal every send.
    pub sq_sig_all: u8,
    /// `IB_QPT_*`.
    pub qp_type: u8,
    /// Receives from an SRQ.
    pub is_srq: u8,
    /// Reserved.
    pub reserved: u8,
    /// Extensions in use.
    pub comp_mask: u32,
    /// `IB_UVERBS_QP_CREATE_*`.
    pub create_flags: u32,
    /// RSS indirection table.
    pub rwq_ind_tbl_handle: u32,
    /// Source QPN (UD).
    pub source_qpn: u32,
}

/// `struct ib_uverbs_ex_create_qp_resp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_ex_create_qp_resp {
    /// The legacy part.
    pub base: ib_uverbs_create_qp_resp,
    /// Extensions answered.
    pub comp_mask: u32,
    /// Bytes of response written.
    pub response_length: u32,
}

/// `struct ib_uverbs_create_srq` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_create_srq {
    /// Response address.
    pub response: u64,
    /// The user's handle.
    pub user_handle: u64,
    /// Its PD.
    pub pd_handle: u32,
    /// WRs asked for.
    pub max_wr: u32,
    /// SGEs asked for.
    pub max_sge: u32,
    /// Limit to arm.
    pub srq_limit: u32,
}

/// `struct ib_uverbs_create_srq_resp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_create_srq_resp {
    /// The SRQ's handle.
    pub srq_handle: u32,
    /// WRs granted.
    pub max_wr: u32,
    /// SGEs granted.
    pub max_sge: u32,
    /// Its number (XRC).
    pub srqn: u32,
}

/// `struct ib_uverbs_reg_mr_resp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_reg_mr_resp {
    /// The MR's handle.
    pub mr_handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ib_uverbs_create_ah_resp` (without its driver data).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ib_uverbs_create_ah_resp {
    /// The AH's handle.
    pub ah_handle: u32,
}

// ---------------------------------------------------------------------------
// <rdma/mlx5-abi.h>

/// `MLX5_IB_ALLOC_UCTX_DEVX`: the context asks for DEVX.
pub const MLX5_IB_ALLOC_UCTX_DEVX: u32 = 1 << 0;
/// `MLX5_QP_FLAG_BFREG_INDEX`: user space chose the bfreg (`bfreg_index`).
pub const MLX5_QP_FLAG_BFREG_INDEX: u32 = 1 << 3;
/// `MLX5_QP_FLAG_UAR_PAGE_INDEX`: `bfreg_index` names a UAR page object.
pub const MLX5_QP_FLAG_UAR_PAGE_INDEX: u32 = 1 << 10;
/// `MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE`.
pub const MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE: u8 = 1 << 0;
/// `MLX5_USER_CMDS_SUPP_UHW_CREATE_AH`.
pub const MLX5_USER_CMDS_SUPP_UHW_CREATE_AH: u8 = 1 << 1;
/// `MLX5_USER_INLINE_MODE_NONE`: no L2 header inline in Ethernet WQEs.
pub const MLX5_USER_INLINE_MODE_NONE: u8 = 1;

/// `struct mlx5_ib_alloc_ucontext_req_v2`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_alloc_ucontext_req_v2 {
    /// Static bfregs asked for.
    pub total_num_bfregs: u32,
    /// Of which low latency.
    pub num_low_latency_bfregs: u32,
    /// `MLX5_IB_ALLOC_UCTX_*`.
    pub flags: u32,
    /// Extensions in use.
    pub comp_mask: u32,
    /// Highest CQE version the library reads.
    pub max_cqe_version: u8,
    /// Reserved.
    pub reserved0: u8,
    /// Reserved.
    pub reserved1: u16,
    /// Reserved.
    pub reserved2: u32,
    /// `MLX5_LIB_CAP_*`.
    pub lib_caps: u64,
}

/// `struct mlx5_ib_alloc_ucontext_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_alloc_ucontext_resp {
    /// QP table size.
    pub qp_tab_size: u32,
    /// bfreg size.
    pub bf_reg_size: u32,
    /// Static bfregs granted (0: dynamic UARs only).
    pub tot_bfregs: u32,
    /// Cache line size.
    pub cache_line_size: u32,
    /// Largest send WQE in bytes.
    pub max_sq_desc_sz: u16,
    /// Largest receive WQE in bytes.
    pub max_rq_desc_sz: u16,
    /// Largest send queue in WQEBBs.
    pub max_send_wqebb: u32,
    /// Largest receive queue.
    pub max_recv_wr: u32,
    /// Largest SRQ.
    pub max_srq_recv_wr: u32,
    /// Ports.
    pub num_ports: u16,
    /// Flow action flags.
    pub flow_action_flags: u16,
    /// `MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_*`.
    pub comp_mask: u32,
    /// Bytes of response written.
    pub response_length: u32,
    /// CQE version in use.
    pub cqe_version: u8,
    /// `MLX5_USER_CMDS_SUPP_UHW_*`.
    pub cmds_supp_uhw: u8,
    /// `MLX5_USER_INLINE_MODE_*` + 1, or 0.
    pub eth_min_inline: u8,
    /// Clock info page versions.
    pub clock_info_versions: u8,
    /// Offset of the core clock in its page.
    pub hca_core_clock_offset: u64,
    /// log2 of a UAR's size.
    pub log_uar_size: u32,
    /// UARs per system page.
    pub num_uars_per_page: u32,
    /// Dynamic bfregs reserved.
    pub num_dyn_bfregs: u32,
    /// The dump-fill mkey.
    pub dump_fill_mkey: u32,
}

/// `struct mlx5_ib_alloc_pd_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_alloc_pd_resp {
    /// PD number.
    pub pdn: u32,
}

/// `struct mlx5_ib_create_cq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_cq {
    /// CQE buffer.
    pub buf_addr: u64,
    /// Doorbell record.
    pub db_addr: u64,
    /// CQE size (64 or 128).
    pub cqe_size: u32,
    /// CQE compression.
    pub cqe_comp_en: u8,
    /// Its format.
    pub cqe_comp_res_format: u8,
    /// `MLX5_IB_CREATE_CQ_FLAGS_*`.
    pub flags: u16,
    /// UAR page of arm doorbells.
    pub uar_page_index: u16,
    /// Reserved.
    pub reserved0: u16,
    /// Reserved.
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_cq_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_cq_resp {
    /// CQ number.
    pub cqn: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct mlx5_ib_create_qp_dci_streams`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_qp_dci_streams {
    /// log2 of concurrent streams.
    pub log_num_concurent: u8,
    /// log2 of errored streams.
    pub log_num_errored: u8,
}

/// `struct mlx5_ib_create_qp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_qp {
    /// QP buffer (receive queue first).
    pub buf_addr: u64,
    /// Doorbell record.
    pub db_addr: u64,
    /// Send queue WQEBBs.
    pub sq_wqe_count: u32,
    /// Receive queue WQEs.
    pub rq_wqe_count: u32,
    /// log2 of the receive stride.
    pub rq_wqe_shift: u32,
    /// `MLX5_QP_FLAG_*`.
    pub flags: u32,
    /// User index (CQE version 1).
    pub uidx: u32,
    /// bfreg chosen by user space, with `MLX5_QP_FLAG_BFREG_INDEX`.
    pub bfreg_index: u32,
    /// Separate send queue buffer (raw packet QPs), or an access key.
    pub sq_buf_addr: u64,
    /// ECE options.
    pub ece_options: u32,
    /// DCI streams.
    pub dci_streams: mlx5_ib_create_qp_dci_streams,
    /// Reserved.
    pub reserved: u16,
}

/// `struct mlx5_ib_create_qp_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_qp_resp {
    /// The gross bfreg index the QP rings.
    pub bfreg_index: u32,
    /// ECE options.
    pub ece_options: u32,
    /// Extensions answered.
    pub comp_mask: u32,
    /// Raw packet QPs only.
    pub tirn: u32,
    /// Raw packet QPs only.
    pub tisn: u32,
    /// Raw packet QPs only.
    pub rqn: u32,
    /// Raw packet QPs only.
    pub sqn: u32,
    /// Reserved.
    pub reserved1: u32,
    /// Raw packet QPs only.
    pub tir_icm_addr: u64,
}

/// `struct mlx5_ib_create_srq`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_srq {
    /// WQE ring.
    pub buf_addr: u64,
    /// Doorbell record.
    pub db_addr: u64,
    /// Flags.
    pub flags: u32,
    /// Padding.
    pub reserved0: u32,
    /// User index.
    pub uidx: u32,
    /// Reserved.
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_srq_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_srq_resp {
    /// SRQ number.
    pub srqn: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct mlx5_ib_create_ah_resp`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mlx5_ib_create_ah_resp {
    /// Bytes of response written.
    pub response_length: u32,
    /// The destination MAC.
    pub dmac: [u8; 6],
    /// Reserved.
    pub reserved: [u8; 6],
}
