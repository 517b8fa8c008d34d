//! The values of the C enums and flags this library reads and writes, with
//! the header's names; `tests/it/consts.rs` checks each against the
//! installed `<infiniband/verbs.h>`.

#![allow(missing_docs)]

use core::ffi::{c_int, c_uint};

macro_rules! consts {
    ($($ty:ty { $($name:ident = $v:expr),* $(,)? })*) => {
        $($(pub const $name: $ty = $v;)*)*
        /// Every constant, by name, for the header check.
        pub const ALL: &[(&str, i64)] = &[$($((stringify!($name), $v as i64)),*),*];
    };
}

consts! {
    c_int { IBV_NODE_CA = 1, IBV_TRANSPORT_IB = 0 }
    c_uint {
        IBV_PORT_ACTIVE = 4,
        IBV_MTU_256 = 1, IBV_MTU_512 = 2, IBV_MTU_1024 = 3, IBV_MTU_2048 = 4, IBV_MTU_4096 = 5,
        IBV_QPS_RESET = 0, IBV_QPS_INIT = 1, IBV_QPS_RTR = 2, IBV_QPS_RTS = 3, IBV_QPS_SQD = 4,
        IBV_QPS_SQE = 5, IBV_QPS_ERR = 6,
        IBV_QPT_RC = 2, IBV_QPT_UC = 3, IBV_QPT_UD = 4, IBV_QPT_RAW_PACKET = 8,
        IBV_QPT_XRC_SEND = 9, IBV_QPT_XRC_RECV = 10, IBV_QPT_DRIVER = 0xff,
        IBV_WR_RDMA_WRITE = 0, IBV_WR_RDMA_WRITE_WITH_IMM = 1, IBV_WR_SEND = 2,
        IBV_WR_SEND_WITH_IMM = 3, IBV_WR_RDMA_READ = 4, IBV_WR_ATOMIC_CMP_AND_SWP = 5,
        IBV_WR_ATOMIC_FETCH_AND_ADD = 6,
        IBV_SEND_FENCE = 1, IBV_SEND_SIGNALED = 2, IBV_SEND_SOLICITED = 4, IBV_SEND_INLINE = 8,
        IBV_WC_SEND = 0, IBV_WC_RDMA_WRITE = 1, IBV_WC_RDMA_READ = 2, IBV_WC_COMP_SWAP = 3,
        IBV_WC_FETCH_ADD = 4, IBV_WC_RECV = 128, IBV_WC_RECV_RDMA_WITH_IMM = 129,
        IBV_WC_GRH = 1, IBV_WC_WITH_IMM = 2,
        IBV_WC_SUCCESS = 0, IBV_WC_LOC_LEN_ERR = 1, IBV_WC_LOC_QP_OP_ERR = 2,
        IBV_WC_LOC_PROT_ERR = 4, IBV_WC_WR_FLUSH_ERR = 5, IBV_WC_MW_BIND_ERR = 6,
        IBV_WC_BAD_RESP_ERR = 7, IBV_WC_LOC_ACCESS_ERR = 8, IBV_WC_REM_INV_REQ_ERR = 9,
        IBV_WC_REM_ACCESS_ERR = 10, IBV_WC_REM_OP_ERR = 11, IBV_WC_RETRY_EXC_ERR = 12,
        IBV_WC_RNR_RETRY_EXC_ERR = 13, IBV_WC_REM_ABORT_ERR = 16, IBV_WC_GENERAL_ERR = 21,
        IBV_QP_STATE = 1 << 0, IBV_QP_CUR_STATE = 1 << 1, IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2,
        IBV_QP_ACCESS_FLAGS = 1 << 3, IBV_QP_PKEY_INDEX = 1 << 4, IBV_QP_PORT = 1 << 5,
        IBV_QP_QKEY = 1 << 6, IBV_QP_AV = 1 << 7, IBV_QP_PATH_MTU = 1 << 8,
        IBV_QP_TIMEOUT = 1 << 9, IBV_QP_RETRY_CNT = 1 << 10, IBV_QP_RNR_RETRY = 1 << 11,
        IBV_QP_RQ_PSN = 1 << 12, IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13, IBV_QP_ALT_PATH = 1 << 14,
        IBV_QP_MIN_RNR_TIMER = 1 << 15, IBV_QP_SQ_PSN = 1 << 16,
        IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17, IBV_QP_PATH_MIG_STATE = 1 << 18,
        IBV_QP_CAP = 1 << 19, IBV_QP_DEST_QPN = 1 << 20,
        IBV_ACCESS_LOCAL_WRITE = 1, IBV_ACCESS_REMOTE_WRITE = 2, IBV_ACCESS_REMOTE_READ = 4,
        IBV_ACCESS_REMOTE_ATOMIC = 8, IBV_ACCESS_MW_BIND = 16, IBV_ACCESS_ZERO_BASED = 32,
        IBV_ACCESS_ON_DEMAND = 64, IBV_ACCESS_HUGETLB = 128,
        IBV_ACCESS_RELAXED_ORDERING = 1 << 20,
        IBV_ATOMIC_HCA = 1,
        IBV_LINK_LAYER_ETHERNET = 2,
        IBV_GID_TYPE_ROCE_V2 = 2,
        IBV_DEVICE_RC_RNR_NAK_GEN = 1 << 12,
        IBV_REREG_MR_CHANGE_TRANSLATION = 1 << 0, IBV_REREG_MR_CHANGE_PD = 1 << 1,
        IBV_REREG_MR_CHANGE_ACCESS = 1 << 2, IBV_REREG_MR_FLAGS_SUPPORTED = 7,
        IBV_WC_STANDARD_FLAGS = 0x7f, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP = 1 << 7, IBV_CQ_INIT_ATTR_MASK_FLAGS = 1 << 0,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11, IBV_VALUES_MASK_RAW_CLOCK = 1 << 0,
        IBV_CQ_INIT_ATTR_MASK_PD = 1 << 1, IBV_CREATE_CQ_ATTR_SINGLE_THREADED = 1 << 0,
        IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN = 1 << 1,
        IBV_SRQ_INIT_ATTR_TYPE = 1 << 0, IBV_SRQ_INIT_ATTR_PD = 1 << 1,
        IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS = 1 << 0,
        IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT = 1 << 1,
        IBV_SRQT_BASIC = 0, IBV_SRQT_XRC = 1, IBV_SRQT_TM = 2,
    }
    c_int {
        IBV_REREG_MR_ERR_INPUT = -1, IBV_REREG_MR_ERR_CMD = -4,
        IBV_SRQ_MAX_WR = 1 << 0, IBV_SRQ_LIMIT = 1 << 1,
    }
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: access bits a provider may ignore.
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;
