//! Why a command failed: the PRM's command statuses, with the offending
//! object, parameter, transition or attribute named by enums, so an error
//! can cross a process boundary in bytes and come back the same.

use core::fmt;

use crate::qp::{QpAttr, QpState, Transition};

/// The kinds of object a command names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ObjKind {
    /// A UAR page.
    Uar,
    /// A protection domain.
    Pd,
    /// A memory key.
    Mkey,
    /// A completion queue.
    Cq,
    /// A queue pair.
    Qp,
    /// A shared receive queue.
    Srq,
    /// An event queue.
    Eq,
}

impl ObjKind {
    /// Every kind, in code order.
    pub const ALL: [ObjKind; 7] = [
        ObjKind::Uar,
        ObjKind::Pd,
        ObjKind::Mkey,
        ObjKind::Cq,
        ObjKind::Qp,
        ObjKind::Srq,
        ObjKind::Eq,
    ];
}

impl fmt::Display for ObjKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjKind::Uar => "UAR",
            ObjKind::Pd => "PD",
            ObjKind::Mkey => "mkey",
            ObjKind::Cq => "CQ",
            ObjKind::Qp => "QP",
            ObjKind::Srq => "SRQ",
            ObjKind::Eq => "EQ",
        })
    }
}

/// The parameters a command can find out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Param {
    /// CREATE_MKEY: the range passes the end of the 64-bit I/O space.
    MkeyLength,
    /// CREATE_MKEY: fewer MTT entries than the range has pages.
    MttEntries,
    /// CREATE_CQ: log2 of the CQ size.
    LogCqSize,
    /// CREATE_CQ: fewer pages than the CQE buffer needs.
    CqPasEntries,
    /// CREATE_CQ: a CQE size other than 64 or 128 bytes.
    CqeSize,
    /// CREATE_QP: log2 of the send queue size.
    LogSqSize,
    /// CREATE_QP: log2 of the receive queue size.
    LogRqSize,
    /// CREATE_QP: receive WQE stride.
    LogRqStride,
    /// CREATE_QP: fewer pages than the QP buffer needs.
    QpPasEntries,
    /// MODIFY_QP: path MTU.
    PathMtu,
    /// MODIFY_QP: port number.
    Port,
    /// MODIFY_QP: local ACK timeout.
    Timeout,
    /// MODIFY_QP: RNR NAK timer.
    MinRnrTimer,
    /// MODIFY_QP: transport retry count.
    RetryCnt,
    /// MODIFY_QP: RNR retry count.
    RnrRetry,
    /// A command the device does not know.
    Command,
    /// CREATE_SRQ: log2 of the SRQ size.
    LogSrqSize,
    /// CREATE_SRQ: WQE stride.
    LogSrqStride,
    /// CREATE_SRQ: fewer pages than the ring needs.
    SrqPasEntries,
    /// ARM_RQ: a limit larger than the SRQ.
    SrqLimit,
    /// CREATE_EQ: log2 of the EQ size.
    LogEqSize,
    /// CREATE_QP: a service type the request cannot have (a GSI QP that
    /// is not UD).
    QpType,
    /// CREATE_EQ: fewer pages than the EQE buffer needs.
    EqPasEntries,
    /// MODIFY_QP: READs and atomics this QP may have outstanding, more
    /// than the device takes ([`crate::MAX_RD_ATOMIC`]).
    MaxRdAtomic,
    /// MODIFY_QP: READs and atomics this QP may answer at once, more than
    /// the device takes.
    MaxDestRdAtomic,
}

impl Param {
    /// Every parameter, in code order.
    pub const ALL: [Param; 25] = [
        Param::MkeyLength,
        Param::MttEntries,
        Param::LogCqSize,
        Param::CqPasEntries,
        Param::LogSqSize,
        Param::LogRqSize,
        Param::LogRqStride,
        Param::QpPasEntries,
        Param::PathMtu,
        Param::Port,
        Param::Timeout,
        Param::MinRnrTimer,
        Param::RetryCnt,
        Param::RnrRetry,
        Param::Command,
        Param::LogSrqSize,
        Param::LogSrqStride,
        Param::SrqPasEntries,
        Param::SrqLimit,
        Param::LogEqSize,
        Param::EqPasEntries,
        Param::QpType,
        Param::CqeSize,
        Param::MaxRdAtomic,
        Param::MaxDestRdAtomic,
    ];

    /// The parameter's name.
    pub const fn name(self) -> &'static str {
        match self {
            Param::MkeyLength => "mkey length",
            Param::MttEntries => "mtt entries",
            Param::LogCqSize => "log_cq_size",
            Param::CqPasEntries => "cq pas entries",
            Param::LogSqSize => "log_sq_size",
            Param::LogRqSize => "log_rq_size",
            Param::LogRqStride => "log_rq_stride",
            Param::QpPasEntries => "qp pas entries",
            Param::PathMtu => "path_mtu",
            Param::Port => "port",
            Param::Timeout => "timeout",
            Param::MinRnrTimer => "min_rnr_timer",
            Param::RetryCnt => "retry_cnt",
            Param::RnrRetry => "rnr_retry",
            Param::Command => "command",
            Param::LogSrqSize => "log_srq_size",
            Param::LogSrqStride => "log_srq_stride",
            Param::SrqPasEntries => "srq pas entries",
            Param::SrqLimit => "srq_limit",
            Param::LogEqSize => "log_eq_size",
            Param::QpType => "qp type",
            Param::EqPasEntries => "eq pas entries",
            Param::CqeSize => "cqe_sz",
            Param::MaxRdAtomic => "max_rd_atomic",
            Param::MaxDestRdAtomic => "max_dest_rd_atomic",
        }
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a command failed (the PRM's command status, with the offending
/// value). Each is fatal to the command only: the device is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmdError {
    /// A resource table is full.
    #[error("no free {0}")]
    Exhausted(ObjKind),
    /// The named object does not exist.
    #[error("no {kind} {id:#x}")]
    NoSuchObject {
        /// Object kind.
        kind: ObjKind,
        /// Its number.
        id: u32,
    },
    /// The object is still referenced by another object.
    #[error("{kind} {id:#x} is still in use")]
    Busy {
        /// Object kind.
        kind: ObjKind,
        /// Its number.
        id: u32,
    },
    /// A parameter is out of range.
    #[error("bad parameter {name}: {value}")]
    BadParam {
        /// Parameter name.
        name: Param,
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
        transition: Transition,
        /// The attribute.
        attr: QpAttr,
    },
    /// An attribute not allowed in this transition is in the mask.
    #[error("QP {qpn:#x}: {transition} does not take attribute {attr}")]
    ExtraAttr {
        /// The QP.
        qpn: u32,
        /// The transition.
        transition: Transition,
        /// The attribute.
        attr: QpAttr,
    },
    /// The device is gone (its thread stopped, its process exited): fatal
    /// to the device link.
    #[error("the device is gone")]
    DeviceGone,
}
