//! QP contexts and the state machine of MODIFY_QP (mlx5 reference §9.1).
//!
//! A [`Qp`] is split the way its engines use it: the send and receive
//! queues ([`crate::wq`]), the RC requester and responder
//! ([`doorbell_roce`]), and the responder's messages in progress.

use doorbell_layout::dbr;
use doorbell_roce::{Requester, RequesterConfig, Responder};
use doorbell_types::{Duration, HostAddr, Instant, Qpn};

use crate::dma::page_runs;
use crate::timer::Timer;
use crate::wq::{Inbound, Owed, RecvQueue, SendQueue};
use doorbell_hif::{CmdError, QpAttrs, QpParams, QpState, QpType, check_modify};
use doorbell_wire::{Gid, RoceIp};

/// Everything the device keeps for one QP.
pub(crate) struct Qp {
    pub(crate) qpn: Qpn,
    pub(crate) p: QpParams,
    pub(crate) state: QpState,
    pub(crate) attrs: QpAttrs,
    pub(crate) sq: SendQueue,
    pub(crate) rq: RecvQueue,
    /// The RC requester: PSNs out, window, retries, its timers.
    pub(crate) req: Requester,
    /// The RC responder: expected PSN, MSN, atomic replay.
    pub(crate) resp: Responder,
    pub(crate) inbound: Inbound,
    /// The responder's answers waiting behind a READ's responses still to
    /// be built (the `owed` module), in PSN order.
    pub(crate) owed: std::collections::VecDeque<Owed>,
    /// The deadline the NIC's timer index holds for this QP, the earliest
    /// of its timers: the NIC brings it in line with [`Qp::timer`] after
    /// each input.
    pub(crate) indexed: Option<Instant>,
    /// In the error state with an SRQ: QP_LAST_WQE_REACHED was raised.
    pub(crate) last_wqe_reported: bool,
    /// Adaptive retransmission's shortest timeout (the NIC's).
    adaptive_floor: Option<Duration>,
}

impl Qp {
    /// A QP in RESET; `adaptive_floor` is the NIC's
    /// [`crate::NicConfig::adaptive_retransmit_floor`].
    pub(crate) fn new(qpn: Qpn, p: QpParams, adaptive_floor: Option<Duration>) -> Self {
        Self {
            qpn,
            sq: SendQueue::new(p.log_sq_size),
            // A QP with an SRQ has no receive queue of its own.
            rq: if p.srq.is_some() {
                RecvQueue::none()
            } else {
                RecvQueue::new(p.log_rq_size, p.log_rq_stride)
            },
            p,
            state: QpState::Reset,
            attrs: QpAttrs::default(),
            req: Requester::new(),
            resp: Responder::new(),
            inbound: Inbound::default(),
            owed: std::collections::VecDeque::new(),
            indexed: None,
            last_wqe_reported: false,
            adaptive_floor,
        }
    }

    /// When timer `t` of this QP fires, if it runs.
    pub(crate) fn timer(&self, t: Timer) -> Option<Instant> {
        match t {
            Timer::Ack => self.req.timers().get(doorbell_roce::Timer::Ack),
            Timer::RnrResume => self.req.timers().get(doorbell_roce::Timer::RnrResume),
            Timer::Adaptive => self.req.timers().get(doorbell_roce::Timer::Adaptive),
            Timer::RqFlushPoll => self.rq.flush_poll,
        }
    }

    /// Byte offset of the send queue in the QP buffer (after the RQ).
    pub(crate) fn sq_offset(&self) -> u64 {
        self.rq.bytes()
    }

    /// Whether the QP takes requests: it is in RTR or after, until an
    /// error or a reset, and its responder has not ended it
    /// ([`Qp::responder_ended`]).
    #[inline]
    pub(crate) fn takes_requests(&self) -> bool {
        self.answers() && !self.responder_ended()
    }

    /// Whether the QP is in a state that answers its peer's requests (RTR
    /// and after, until an error or a reset): whether what it owes is
    /// still sent (the `owed` module).
    #[inline]
    pub(crate) fn answers(&self) -> bool {
        matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
    }

    /// Whether the responder NAKed a request in a way that ends the QP
    /// while it still owed answers (the `owed` module): it takes no more
    /// requests, and goes to ERR once the NAK has followed them out.
    #[inline]
    pub(crate) fn responder_ended(&self) -> bool {
        matches!(self.owed.back(), Some(Owed::End { .. }))
    }

    /// Path MTU in bytes.
    pub(crate) fn mtu(&self) -> u32 {
        self.attrs.path_mtu.unwrap_or(1024)
    }

    /// What the attributes say about retries.
    fn requester_config(&self) -> RequesterConfig {
        RequesterConfig {
            ack_timeout: doorbell_roce::ack_timeout(self.attrs.timeout.unwrap_or(0)),
            retry_cnt: self.attrs.retry_cnt.unwrap_or(doorbell_roce::RETRY_FOREVER),
            rnr_retry: self.attrs.rnr_retry.unwrap_or(doorbell_roce::RETRY_FOREVER),
            adaptive_floor: self.adaptive_floor,
            window: doorbell_roce::window_psns(self.mtu()),
        }
    }

    /// Checks and applies a MODIFY_QP. Returns the previous state.
    pub(crate) fn modify(&mut self, to: QpState, a: &QpAttrs) -> Result<QpState, CmdError> {
        let from = self.state;
        check_modify(self.qpn, self.p.qp_type, from, to, a)?;
        self.attrs.merge(a);
        self.state = to;
        if to == QpState::Reset {
            self.reset();
        }
        // In error it answers nothing more (the `owed` module).
        if to == QpState::Err {
            self.owed.clear();
        }
        if let Some(psn) = a.rq_psn {
            self.resp.set_psn(psn);
        }
        if let Some(psn) = a.sq_psn {
            self.req.set_psn(psn);
        }
        self.req.configure(self.requester_config());
        if to == QpState::Rts {
            self.req.refill_retries();
        }
        Ok(from)
    }

    /// Back to a fresh QP; what the NIC's timer index holds stays known.
    fn reset(&mut self) {
        let (qpn, p, indexed) = (self.qpn, self.p.clone(), self.indexed);
        *self = Qp::new(qpn, p, self.adaptive_floor);
        self.indexed = indexed;
    }

    /// Calls `f(host_addr, bytes, offset_into_range)` for each run of the QP
    /// buffer `[off, off + len)` that is contiguous in host memory. Returns
    /// false if the range is outside the buffer's pages.
    pub(crate) fn buf_runs(&self, off: u64, len: u64, f: impl FnMut(HostAddr, u64, u64)) -> bool {
        page_runs(&self.p.pas, off, len, f)
    }

    /// Host address of the receive counter of the QP's doorbell record,
    /// and where it sits in a record.
    pub(crate) fn recv_counter_addr(&self) -> Option<(HostAddr, std::ops::Range<usize>)> {
        let word = dbr::field::WORD0;
        Some((self.p.dbr_addr.checked_add(word.start as u64)?, word))
    }

    /// True if a packet from `src` may reach this QP. A connected QP (RC,
    /// UC) takes packets only from the port its path names (IBTA Vol 1
    /// §9.6, packet header validation; rxe's `check_addr` does the same):
    /// a packet from any other address is silently dropped, before its PSN
    /// or opcode is looked at. UD QPs, and connected QPs with no path yet
    /// (RESET, INIT), take any source.
    pub(crate) fn is_from_peer(&self, src: &RoceIp) -> bool {
        let Some(av) = self.attrs.av else {
            return true;
        };
        if !matches!(self.p.qp_type, QpType::Rc | QpType::Uc) {
            return true;
        }
        let peer = Gid::new(av.dgid);
        match *src {
            RoceIp::V4 { src, .. } => peer.to_ipv4() == Some(src),
            RoceIp::V6 { src, .. } => peer.octets() == src,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_hif::{Access, AddressVector, Param, QpAttr, QpType};
    use doorbell_types::Psn;
    use doorbell_types::{Cqn, HostAddr, Pdn, UarIndex};

    fn qp(ty: QpType) -> Qp {
        Qp::new(
            Qpn::new(0x42),
            QpParams {
                qp_type: ty,
                pd: Pdn::new(1),
                send_cq: Cqn::new(1),
                recv_cq: Cqn::new(1),
                uar: UarIndex::new(1),
                log_sq_size: 6,
                log_rq_size: 6,
                log_rq_stride: 0,
                dbr_addr: HostAddr::new(0),
                pas: vec![],
                srq: None,
                gsi: false,
                user_index: 0,
            },
            None,
        )
    }

    fn init_attrs() -> QpAttrs {
        QpAttrs {
            pkey_index: Some(0),
            port: Some(1),
            access: Some(Access(0)),
            ..Default::default()
        }
    }

    fn rtr_attrs() -> QpAttrs {
        QpAttrs {
            av: Some(AddressVector {
                dgid: [0; 16],
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
            }),
            path_mtu: Some(1024),
            dest_qpn: Some(Qpn::new(7)),
            rq_psn: Some(Psn::new(100)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..Default::default()
        }
    }

    fn rts_attrs() -> QpAttrs {
        QpAttrs {
            sq_psn: Some(Psn::new(200)),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn rc_walks_reset_init_rtr_rts() {
        let mut q = qp(QpType::Rc);
        q.modify(QpState::Init, &init_attrs()).unwrap();
        q.modify(QpState::Rtr, &rtr_attrs()).unwrap();
        assert_eq!(q.resp.epsn(), Psn::new(100));
        q.modify(QpState::Rts, &rts_attrs()).unwrap();
        assert_eq!((q.state, q.req.next_psn()), (QpState::Rts, Psn::new(200)));
    }

    #[test]
    fn illegal_transitions_are_refused() {
        let mut q = qp(QpType::Rc);
        assert!(matches!(
            q.modify(QpState::Rtr, &rtr_attrs()),
            Err(CmdError::BadTransition { .. })
        ));
        assert!(matches!(
            q.modify(QpState::Rts, &rts_attrs()),
            Err(CmdError::BadTransition { .. })
        ));
        q.modify(QpState::Err, &QpAttrs::default()).unwrap();
        assert!(matches!(
            q.modify(QpState::Init, &init_attrs()),
            Err(CmdError::BadTransition { .. })
        ));
        q.modify(QpState::Reset, &QpAttrs::default()).unwrap();
        q.modify(QpState::Init, &init_attrs()).unwrap();
    }

    #[test]
    fn missing_and_extra_attributes_are_refused() {
        let mut q = qp(QpType::Rc);
        let mut a = init_attrs();
        a.access = None;
        assert!(matches!(
            q.modify(QpState::Init, &a),
            Err(CmdError::MissingAttr {
                attr: QpAttr::Access,
                ..
            })
        ));
        let mut a = init_attrs();
        a.dest_qpn = Some(Qpn::new(1));
        assert!(matches!(
            q.modify(QpState::Init, &a),
            Err(CmdError::ExtraAttr {
                attr: QpAttr::DestQpn,
                ..
            })
        ));
        assert_eq!(q.state, QpState::Reset, "a refused modify changes nothing");
    }

    #[test]
    fn bad_values_are_refused() {
        let mut q = qp(QpType::Rc);
        q.modify(QpState::Init, &init_attrs()).unwrap();
        let mut a = rtr_attrs();
        a.path_mtu = Some(1500);
        assert!(matches!(
            q.modify(QpState::Rtr, &a),
            Err(CmdError::BadParam {
                name: Param::PathMtu,
                ..
            })
        ));
    }

    #[test]
    fn ud_needs_qkey_not_access() {
        let mut q = qp(QpType::Ud);
        let a = QpAttrs {
            pkey_index: Some(0),
            port: Some(1),
            qkey: Some(0x1111),
            ..Default::default()
        };
        q.modify(QpState::Init, &a).unwrap();
        q.modify(QpState::Rtr, &QpAttrs::default()).unwrap();
        q.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(Psn::new(0)),
                ..Default::default()
            },
        )
        .unwrap();
    }

    #[test]
    fn cur_state_must_match() {
        let mut q = qp(QpType::Rc);
        let a = QpAttrs {
            cur_state: Some(QpState::Init),
            ..init_attrs()
        };
        assert!(q.modify(QpState::Init, &a).is_err());
    }
}
