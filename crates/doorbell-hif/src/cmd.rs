//! The command interface: how the driver creates and destroys device objects.
//!
//! Real mlx5 devices take commands through a command queue with mailboxes in
//! host memory; the values that cross are the ones here (the PRM's
//! QUERY_HCA_CAP, ALLOC_UAR, CREATE_CQ, CREATE_QP, CREATE_MKEY ... contexts),
//! carried as typed structs. [`crate::codec`] gives each its byte form.

use doorbell_layout::uar;
use doorbell_types::{Cqn, Eqn, HostAddr, Mkey, Pdn, Qpn, Srqn, UarIndex};

use crate::qp::{Access, QpAttrs, QpState, QpType};

/// Capabilities the device reports (QUERY_HCA_CAP), from which the driver
/// answers alloc_ucontext and query_device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCaps {
    /// log2 of the QP table size.
    pub log_max_qp: u8,
    /// Largest send queue, in WQEBBs.
    pub max_send_wqebb: u32,
    /// Largest receive queue, in WQEs.
    pub max_recv_wr: u32,
    /// Largest send WQE, in bytes.
    pub max_sq_desc_sz: u32,
    /// Largest receive WQE, in bytes.
    pub max_rq_desc_sz: u32,
    /// Largest CQ, in CQEs.
    pub max_cqe: u32,
    /// Memory keys.
    pub max_mkeys: u32,
    /// Protection domains.
    pub max_pd: u32,
    /// UARs.
    pub max_uar: u32,
    /// Size of one bfreg in a UAR (0: no write-combining, no BlueFlame).
    pub bf_reg_size: u32,
    /// log2 of a UAR's size.
    pub log_uar_size: u8,
    /// UARs per system page.
    pub num_uars_per_page: u32,
    /// Cache line size.
    pub cache_line_size: u32,
    /// Outstanding READ/atomic per QP, each direction.
    pub max_rd_atomic: u8,
    /// Largest path MTU.
    pub max_mtu: u32,
    /// PCI vendor ID.
    pub vendor_id: u32,
    /// PCI device ID.
    pub vendor_part_id: u32,
}

impl Default for DeviceCaps {
    fn default() -> Self {
        Self {
            log_max_qp: 18,
            max_send_wqebb: 32768,
            max_recv_wr: 32768,
            max_sq_desc_sz: 1024,
            max_rq_desc_sz: 512,
            max_cqe: 1 << 22,
            max_mkeys: 1 << 24,
            max_pd: 1 << 24,
            max_uar: 1 << 16,
            bf_reg_size: uar::BF_REG_SIZE as u32,
            log_uar_size: uar::LOG_UAR_SIZE as u8,
            num_uars_per_page: 1,
            cache_line_size: 64,
            max_rd_atomic: MAX_RD_ATOMIC,
            max_mtu: 4096,
            vendor_id: 0x02c9,
            vendor_part_id: 4115,
        }
    }
}

/// READs and atomics a QP may have outstanding, each direction (the
/// device's `max_qp_rd_atom`); MODIFY_QP refuses more, as mlx5 does.
pub const MAX_RD_ATOMIC: u8 = 16;

/// The device's free-running clock, in kHz (the PRM's `device_frequency_khz`):
/// 1 GHz, so a CQE's timestamp counts nanoseconds of the device's time line.
pub const CORE_CLOCK_KHZ: u64 = 1_000_000;

/// Memory-key context (CREATE_MKEY, MTT access mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkeyParams {
    /// Protection domain.
    pub pd: Pdn,
    /// Access rights.
    pub access: Access,
    /// First I/O virtual address covered.
    pub start: u64,
    /// Bytes covered.
    pub len: u64,
    /// Bus address of each 4 KiB page from `start` rounded down.
    pub mtt: Vec<HostAddr>,
}

/// Completion-queue context (CREATE_CQ).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CqParams {
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// UAR through which this CQ is armed.
    pub uar: UarIndex,
    /// Bus address of the CQ's doorbell record.
    pub dbr_addr: HostAddr,
    /// Bytes each CQE takes in the buffer: 64, or 128 (the CQ context's
    /// `cqe_sz`), where the 64-byte CQE is the entry's second half, as
    /// libmlx5 asks for when the first half may hold received data.
    pub cqe_bytes: u16,
    /// Pages of the CQE buffer.
    pub pas: Vec<HostAddr>,
}

/// Event-queue context (CREATE_EQ): the EQE ring in host memory, the UAR
/// whose EQ doorbell moves its consumer index, the MSI-X vector it raises,
/// and which event types it takes (`event_bitmask`, bit `1 << type` for
/// each `doorbell_layout::eqe::EventType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqParams {
    /// log2 of the number of EQEs.
    pub log_size: u8,
    /// UAR whose EQ doorbell updates and arms this EQ.
    pub uar: UarIndex,
    /// MSI-X vector raised when an armed EQ gets an EQE.
    pub vector: u16,
    /// Event types it takes, one bit per type code.
    pub events: u64,
    /// Pages of the EQE buffer.
    pub pas: Vec<HostAddr>,
}

/// Queue-pair context (CREATE_QP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpParams {
    /// Transport service.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: Pdn,
    /// CQ of send completions.
    pub send_cq: Cqn,
    /// CQ of receive completions.
    pub recv_cq: Cqn,
    /// The UAR whose registers may ring this QP (QPC.uar_page).
    pub uar: UarIndex,
    /// log2 of the send queue's WQEBB count.
    pub log_sq_size: u8,
    /// log2 of the receive queue's WQE count.
    pub log_rq_size: u8,
    /// log2(receive WQE stride) − 4.
    pub log_rq_stride: u8,
    /// Bus address of the QP's doorbell record.
    pub dbr_addr: HostAddr,
    /// Pages of the QP buffer: receive queue first, send queue after it.
    pub pas: Vec<HostAddr>,
    /// The shared receive queue the QP takes its receive WQEs from
    /// (QPC.rq_type SRQ). A QP with one has no receive queue of its own:
    /// `log_rq_size` and `log_rq_stride` are ignored and the buffer holds
    /// only the send queue.
    pub srq: Option<Srqn>,
    /// The port's GSI QP (PRM `st` QP1, what the kernel's CM and MAD layer
    /// use): a UD QP that the device numbers 1, so that it takes the
    /// management datagrams peers send to QP 1 and sends its own from QP 1.
    /// One per device.
    pub gsi: bool,
    /// The user index the provider gave the QP (`mlx5_ib_create_qp.uidx`,
    /// 24 bits): every CQE of the QP carries it in `srqn_uidx`, which is how
    /// a provider of CQE version 1 finds the QP of a completion.
    pub user_index: u32,
}

/// Shared-receive-queue context (CREATE_SRQ): a ring of receive WQEs,
/// each a 16-byte next segment (`next_wqe_index` at bytes 2..4) and data
/// segments, linked in the order the device takes them, with its own
/// doorbell record (word 0: the count of WQEs posted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrqParams {
    /// Protection domain.
    pub pd: Pdn,
    /// log2 of the number of WQEs.
    pub log_size: u8,
    /// log2(WQE stride) − 4.
    pub log_stride: u8,
    /// Bus address of the SRQ's doorbell record.
    pub dbr_addr: HostAddr,
    /// Pages of the WQE ring.
    pub pas: Vec<HostAddr>,
}

/// A device command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// QUERY_HCA_CAP.
    QueryCaps,
    /// ALLOC_UAR.
    AllocUar,
    /// DEALLOC_UAR.
    DeallocUar(UarIndex),
    /// ALLOC_PD.
    AllocPd,
    /// DEALLOC_PD.
    DeallocPd(Pdn),
    /// CREATE_MKEY.
    CreateMkey(MkeyParams),
    /// DESTROY_MKEY.
    DestroyMkey(Mkey),
    /// ACCESS_REG of the PAOS register (port 1): with `Some`, sets the
    /// port's administrative state (what `ip link set ... up/down` makes
    /// the driver do); either way reports the operational state.
    AccessPaos(Option<bool>),
    /// Rewrites an mkey's context in place, keeping the key
    /// (`ibv_rereg_mr`; the kernel does this with a UMR WQE on its own QP).
    ModifyMkey(Mkey, MkeyParams),
    /// CREATE_CQ.
    CreateCq(CqParams),
    /// DESTROY_CQ.
    DestroyCq(Cqn),
    /// MODIFY_CQ with the resize op_mod (`ibv_resize_cq`): CQEs from the
    /// next one on go to the new buffer, at the same producer count; the
    /// provider copies the ones it has not polled. Refused if the new size
    /// cannot hold them.
    ResizeCq {
        /// The CQ.
        cqn: Cqn,
        /// log2 of the new number of CQEs.
        log_size: u8,
        /// Pages of the new CQE buffer.
        pas: Vec<HostAddr>,
    },
    /// CREATE_QP.
    CreateQp(QpParams),
    /// The RST2INIT … 2ERR family: move to `state` with `attrs`.
    ModifyQp {
        /// The QP.
        qpn: Qpn,
        /// Target state.
        state: QpState,
        /// Attributes in the mask.
        attrs: QpAttrs,
    },
    /// QUERY_QP.
    QueryQp(Qpn),
    /// DESTROY_QP.
    DestroyQp(Qpn),
    /// CREATE_SRQ.
    CreateSrq(SrqParams),
    /// ARM_RQ of an SRQ (`ibv_modify_srq` with IBV_SRQ_LIMIT): raise
    /// [`crate::NicEvent::SrqLimit`] once when fewer than `limit` WQEs
    /// stay posted; 0 disarms.
    ModifySrq {
        /// The SRQ.
        srqn: Srqn,
        /// The limit (the PRM's `lwm`).
        limit: u32,
    },
    /// QUERY_SRQ.
    QuerySrq(Srqn),
    /// DESTROY_SRQ.
    DestroySrq(Srqn),
    /// CREATE_EQ.
    CreateEq(EqParams),
    /// DESTROY_EQ.
    DestroyEq(Eqn),
}

/// What a successful command returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmdOut {
    /// No output.
    Done,
    /// Capabilities.
    Caps(DeviceCaps),
    /// A new UAR.
    Uar(UarIndex),
    /// A new PD.
    Pd(Pdn),
    /// A new memory key.
    Mkey(Mkey),
    /// A new CQ.
    Cq(Cqn),
    /// A new QP.
    Qp(Qpn),
    /// QP state and attributes.
    QpInfo {
        /// Current state.
        state: QpState,
        /// Attributes as set.
        attrs: QpAttrs,
    },
    /// A new SRQ.
    Srq(Srqn),
    /// The port's operational state (PAOS `oper_status` up).
    PortUp(bool),
    /// What QUERY_SRQ reports.
    SrqInfo {
        /// The armed limit; 0 when disarmed (after its event fired).
        limit: u32,
    },
    /// A new EQ.
    Eq(Eqn),
}
