//! Queue pairs as both sides of the bus name them: states, service types,
//! access rights, the address vector, the attributes of MODIFY_QP and the
//! transitions (mlx5 reference §9.1). The rules of which transition takes
//! which attributes are in [`crate::modify`].

use core::fmt;

use doorbell_types::{Psn, Qpn};

/// QP state, with the mlx5 state codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QpState {
    /// RESET (0).
    Reset = 0,
    /// INIT (1).
    Init = 1,
    /// Ready to receive (2).
    Rtr = 2,
    /// Ready to send (3).
    Rts = 3,
    /// Send queue error (4).
    Sqe = 4,
    /// Send queue drained (5).
    Sqd = 5,
    /// Error (6).
    Err = 6,
}

impl QpState {
    /// Every state, in code order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqe,
        QpState::Sqd,
        QpState::Err,
    ];

    /// The state with mlx5 code `code`.
    pub fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(usize::from(code)).copied()
    }
}

/// Transport service type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected: SEND and RDMA WRITE, no ACKs, no retries.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl QpType {
    /// The PRM's `st` code (`MLX5_QP_ST_*` of the kernel's
    /// `include/linux/mlx5/qp.h`): RC 0x0, UC 0x1, UD 0x2 (0x3 is XRC).
    pub const fn code(self) -> u8 {
        match self {
            QpType::Rc => 0x0,
            QpType::Uc => 0x1,
            QpType::Ud => 0x2,
        }
    }

    /// The type with PRM `st` code `code`.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0x0 => Some(QpType::Rc),
            0x1 => Some(QpType::Uc),
            0x2 => Some(QpType::Ud),
            _ => None,
        }
    }
}

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

/// Names one field of [`QpAttrs`]: a bit of the attribute mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum QpAttr {
    /// [`QpAttrs::cur_state`].
    CurState,
    /// [`QpAttrs::pkey_index`].
    PkeyIndex,
    /// [`QpAttrs::port`].
    Port,
    /// [`QpAttrs::access`].
    Access,
    /// [`QpAttrs::qkey`].
    Qkey,
    /// [`QpAttrs::av`].
    Av,
    /// [`QpAttrs::path_mtu`].
    PathMtu,
    /// [`QpAttrs::dest_qpn`].
    DestQpn,
    /// [`QpAttrs::rq_psn`].
    RqPsn,
    /// [`QpAttrs::sq_psn`].
    SqPsn,
    /// [`QpAttrs::max_dest_rd_atomic`].
    MaxDestRdAtomic,
    /// [`QpAttrs::max_rd_atomic`].
    MaxRdAtomic,
    /// [`QpAttrs::min_rnr_timer`].
    MinRnrTimer,
    /// [`QpAttrs::timeout`].
    Timeout,
    /// [`QpAttrs::retry_cnt`].
    RetryCnt,
    /// [`QpAttrs::rnr_retry`].
    RnrRetry,
}

impl QpAttr {
    /// Every attribute, in mask-bit order.
    pub const ALL: [QpAttr; 16] = [
        QpAttr::CurState,
        QpAttr::PkeyIndex,
        QpAttr::Port,
        QpAttr::Access,
        QpAttr::Qkey,
        QpAttr::Av,
        QpAttr::PathMtu,
        QpAttr::DestQpn,
        QpAttr::RqPsn,
        QpAttr::SqPsn,
        QpAttr::MaxDestRdAtomic,
        QpAttr::MaxRdAtomic,
        QpAttr::MinRnrTimer,
        QpAttr::Timeout,
        QpAttr::RetryCnt,
        QpAttr::RnrRetry,
    ];

    /// The field's name in [`QpAttrs`].
    pub const fn name(self) -> &'static str {
        match self {
            QpAttr::CurState => "cur_state",
            QpAttr::PkeyIndex => "pkey_index",
            QpAttr::Port => "port",
            QpAttr::Access => "access",
            QpAttr::Qkey => "qkey",
            QpAttr::Av => "av",
            QpAttr::PathMtu => "path_mtu",
            QpAttr::DestQpn => "dest_qpn",
            QpAttr::RqPsn => "rq_psn",
            QpAttr::SqPsn => "sq_psn",
            QpAttr::MaxDestRdAtomic => "max_dest_rd_atomic",
            QpAttr::MaxRdAtomic => "max_rd_atomic",
            QpAttr::MinRnrTimer => "min_rnr_timer",
            QpAttr::Timeout => "timeout",
            QpAttr::RetryCnt => "retry_cnt",
            QpAttr::RnrRetry => "rnr_retry",
        }
    }

    /// Its bit in [`QpAttrs::mask`].
    pub const fn bit(self) -> u32 {
        1 << self as u32
    }
}

impl fmt::Display for QpAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A MODIFY_QP transition, named as the PRM names its commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transition {
    /// Any state to RESET.
    ToReset,
    /// Any state to ERR.
    ToErr,
    /// RESET to INIT.
    RstToInit,
    /// INIT to INIT.
    InitToInit,
    /// INIT to RTR.
    InitToRtr,
    /// RTR to RTS.
    RtrToRts,
    /// RTS to RTS.
    RtsToRts,
    /// SQE to RTS.
    SqerrToRts,
}

impl Transition {
    /// Every transition.
    pub const ALL: [Transition; 8] = [
        Transition::ToReset,
        Transition::ToErr,
        Transition::RstToInit,
        Transition::InitToInit,
        Transition::InitToRtr,
        Transition::RtrToRts,
        Transition::RtsToRts,
        Transition::SqerrToRts,
    ];

    /// The PRM's name of the command.
    pub const fn name(self) -> &'static str {
        match self {
            Transition::ToReset => "2RST",
            Transition::ToErr => "2ERR",
            Transition::RstToInit => "RST2INIT",
            Transition::InitToInit => "INIT2INIT",
            Transition::InitToRtr => "INIT2RTR",
            Transition::RtrToRts => "RTR2RTS",
            Transition::RtsToRts => "RTS2RTS",
            Transition::SqerrToRts => "SQERR2RTS",
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl QpAttrs {
    /// True if attribute `a` is in the mask.
    pub const fn has(&self, a: QpAttr) -> bool {
        match a {
            QpAttr::CurState => self.cur_state.is_some(),
            QpAttr::PkeyIndex => self.pkey_index.is_some(),
            QpAttr::Port => self.port.is_some(),
            QpAttr::Access => self.access.is_some(),
            QpAttr::Qkey => self.qkey.is_some(),
            QpAttr::Av => self.av.is_some(),
            QpAttr::PathMtu => self.path_mtu.is_some(),
            QpAttr::DestQpn => self.dest_qpn.is_some(),
            QpAttr::RqPsn => self.rq_psn.is_some(),
            QpAttr::SqPsn => self.sq_psn.is_some(),
            QpAttr::MaxDestRdAtomic => self.max_dest_rd_atomic.is_some(),
            QpAttr::MaxRdAtomic => self.max_rd_atomic.is_some(),
            QpAttr::MinRnrTimer => self.min_rnr_timer.is_some(),
            QpAttr::Timeout => self.timeout.is_some(),
            QpAttr::RetryCnt => self.retry_cnt.is_some(),
            QpAttr::RnrRetry => self.rnr_retry.is_some(),
        }
    }

    /// The attribute mask: bit [`QpAttr::bit`] for each field present.
    pub fn mask(&self) -> u32 {
        self.present().fold(0, |m, a| m | a.bit())
    }

    /// The attributes present, in mask-bit order.
    pub fn present(&self) -> impl Iterator<Item = QpAttr> + '_ {
        QpAttr::ALL.into_iter().filter(|&a| self.has(a))
    }

    /// Copies every attribute present in `a` over `self`'s (all but
    /// `cur_state`, which is a check, not a setting).
    pub fn merge(&mut self, a: &QpAttrs) {
        macro_rules! take {
            ($($f:ident),*) => { $( if a.$f.is_some() { self.$f = a.$f; } )* };
        }
        take!(
            pkey_index,
            port,
            access,
            qkey,
            av,
            path_mtu,
            dest_qpn,
            rq_psn,
            sq_psn,
            max_dest_rd_atomic,
            max_rd_atomic,
            min_rnr_timer,
            timeout,
            retry_cnt,
            rnr_retry
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// RST2INIT's attributes for an RC QP (also used by `modify`'s tests).
    pub(crate) fn init_attrs() -> QpAttrs {
        QpAttrs {
            pkey_index: Some(0),
            port: Some(1),
            access: Some(Access(0)),
            ..Default::default()
        }
    }

    #[test]
    fn mask_names_each_present_attribute_once() {
        let a = init_attrs();
        assert_eq!(
            a.present().collect::<Vec<_>>(),
            [QpAttr::PkeyIndex, QpAttr::Port, QpAttr::Access]
        );
        assert_eq!(a.mask(), 0b1110);
        let names: Vec<_> = QpAttr::ALL.iter().map(|a| a.name()).collect();
        let mut dedup = names.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), names.len());
    }

    #[test]
    fn state_and_type_codes_round_trip() {
        for s in QpState::ALL {
            assert_eq!(QpState::from_code(s as u8), Some(s));
        }
        assert_eq!(QpState::from_code(7), None);
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            assert_eq!(QpType::from_code(t.code()), Some(t));
        }
        // The kernel's MLX5_QP_ST_RC, _UC, _UD; XRC (0x3) is not doorbell's.
        assert_eq!(
            [QpType::Rc, QpType::Uc, QpType::Ud].map(QpType::code),
            [0x0, 0x1, 0x2]
        );
        assert_eq!(QpType::from_code(0x3), None);
    }
}
