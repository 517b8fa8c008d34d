//! The command interface: how the driver creates and destroys device objects.
//!
//! Real mlx5 devices take commands through a command queue with mailboxes in
//! host memory; the values that cross are the ones here (the PRM's
//! CREATE_CQ/CREATE_QP/CREATE_MKEY contexts), carried as typed structs.

use doorbell_types::{Cqn, HostAddr, Mkey, Pdn, Psn, Qpn, UarIndex};

use crate::qp::{QpState, QpType};

/// Access rights of a memory key or of a QP's responder (IBV_ACCESS_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub u32);

impl Access {
    /// The device may write (receive scatter, READ response scatter).
    pub const LOCAL_WRITE: u32 = 1;
    /// Peers may RDMA WRITE.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// Peers may RDMA READ.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// Peers may perform atomics.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;

    /// True if every bit of `bits` is granted.
    pub const fn allows(self, bits: u32) -> bool {
        self.0 & bits == bits
    }
}

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
    /// Pages of the CQE buffer.
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
}

/// Address vector: where a QP's packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// Destination GID (an IPv4-mapped or IPv6 address).
    pub dgid: [u8; 16],
    /// Index of the local GID used as source.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
}

/// Attributes of a MODIFY_QP; `None` means "not in the attribute mask".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttrs {
    /// Current state the caller believes the QP is in.
    pub cur_state: Option<QpState>,
    /// P_Key index.
    pub pkey_index: Option<u16>,
    /// Port number (1).
    pub port: Option<u8>,
    /// Remote access rights of the responder.
    pub access: Option<Access>,
    /// Q_Key (UD).
    pub qkey: Option<u32>,
    /// Path to the peer.
    pub av: Option<AddressVector>,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub path_mtu: Option<u32>,
    /// Peer QPN.
    pub dest_qpn: Option<Qpn>,
    /// First PSN expected from the peer.
    pub rq_psn: Option<Psn>,
    /// First PSN this QP sends.
    pub sq_psn: Option<Psn>,
    /// Inbound READ/atomic depth.
    pub max_dest_rd_atomic: Option<u8>,
    /// Outbound READ/atomic depth.
    pub max_rd_atomic: Option<u8>,
    /// RNR NAK timer code sent to peers (0..=31).
    pub min_rnr_timer: Option<u8>,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: Option<u8>,
    /// Transport retries (0..=7).
    pub retry_cnt: Option<u8>,
    /// RNR retries (0..=7, 7 = forever).
    pub rnr_retry: Option<u8>,
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
    /// CREATE_CQ.
    CreateCq(CqParams),
    /// DESTROY_CQ.
    DestroyCq(Cqn),
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
}

/// What a successful command returns.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmdOut {
    /// No output.
    Done,
    /// Capabilities.
    Caps(crate::DeviceCaps),
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
}

/// Why a command failed (the PRM's command status, with the offending value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmdError {
    /// A resource table is full.
    #[error("no free {0}")]
    Exhausted(&'static str),
    /// The named object does not exist.
    #[error("no {kind} {id:#x}")]
    NoSuchObject {
        /// Object kind.
        kind: &'static str,
        /// Its number.
        id: u32,
    },
    /// The object is still referenced by another object.
    #[error("{kind} {id:#x} is still in use")]
    Busy {
        /// Object kind.
        kind: &'static str,
        /// Its number.
        id: u32,
    },
    /// A parameter is out of range.
    #[error("bad parameter {name}: {value}")]
    BadParam {
        /// Parameter name.
        name: &'static str,
        /// Its value.
        value: u64,
    },
    /// The state transition is not allowed.
    #[error("QP {qpn:#x}: no transition from {from:?} to {to:?}")]
    BadTransition {
        /// The QP.
        qpn: u32,
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// A required attribute is missing from the mask.
    #[error("QP {qpn:#x}: {transition} needs attribute {attr}")]
    MissingAttr {
        /// The QP.
        qpn: u32,
        /// The transition.
        transition: &'static str,
        /// The attribute.
        attr: &'static str,
    },
    /// An attribute not allowed in this transition is in the mask.
    #[error("QP {qpn:#x}: {transition} does not take attribute {attr}")]
    ExtraAttr {
        /// The QP.
        qpn: u32,
        /// The transition.
        transition: &'static str,
        /// The attribute.
        attr: &'static str,
    },
}
