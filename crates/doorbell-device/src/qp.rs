//! QP contexts and the state machine of MODIFY_QP (mlx5 reference §9.1).

use std::collections::VecDeque;

use doorbell_types::{Instant, Psn, Qpn};

use crate::sq::SentMsg;
use doorbell_hif::{CmdError, QpAttrs, QpParams, QpState, check_modify};

/// Progress of an inbound multi-packet SEND.
pub(crate) struct RecvInProgress {
    pub(crate) wqe_index: u16,
    pub(crate) sges: Vec<crate::sq::Sge>,
    pub(crate) offset: u64,
    pub(crate) imm: Option<u32>,
}

/// Progress of an inbound multi-packet RDMA WRITE.
pub(crate) struct WriteInProgress {
    pub(crate) va: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u64,
    pub(crate) offset: u64,
}

/// Responder memory of one executed atomic, for replaying duplicates.
pub(crate) struct AtomicReplay {
    pub(crate) psn: Psn,
    pub(crate) orig: u64,
}

/// Everything the device keeps for one QP.
pub(crate) struct Qp {
    pub(crate) qpn: Qpn,
    pub(crate) p: QpParams,
    pub(crate) state: QpState,
    pub(crate) attrs: QpAttrs,
    // Send queue, in WQEBBs.
    pub(crate) sq_size: u16,
    pub(crate) sq_ci: u16,
    pub(crate) sq_pi: u16,
    /// WQEBBs fetched ahead of `sq_ci` (a WQE cache), starting at `sq_ci`.
    pub(crate) wqe_cache: VecDeque<[u8; 64]>,
    // Receive queue, in WQEs.
    pub(crate) rq_size: u32,
    pub(crate) rq_stride: u32,
    pub(crate) rq_ci: u16,
    pub(crate) rq_pi: u16,
    // Requester.
    /// PSN the next new message starts at.
    pub(crate) next_psn: Psn,
    /// One past the highest PSN ever transmitted: ACKs beyond it are forged.
    pub(crate) high_psn: Psn,
    /// The highest PSN the responder has acknowledged (explicitly, or
    /// implicitly by a NAK, a READ response or an atomic ACK); the send
    /// window starts right after it.
    pub(crate) ack_psn: Psn,
    /// Messages executed and not yet completed, in posting order.
    pub(crate) outstanding: VecDeque<SentMsg>,
    pub(crate) retry_left: u8,
    pub(crate) rnr_left: u8,
    pub(crate) ack_deadline: Option<Instant>,
    pub(crate) rnr_resume: Option<(Instant, Psn)>,
    /// In the error state: when to look at the receive doorbell record
    /// again for receives posted since, to flush them.
    pub(crate) rq_flush_poll: Option<Instant>,
    /// The PSN a PSN-sequence NAK last made us go back to; a copy of that
    /// NAK before any progress is ignored.
    pub(crate) nak_retry_psn: Option<Psn>,
    // Responder.
    pub(crate) epsn: Psn,
    pub(crate) msn: u32,
    pub(crate) recv_ip: Option<RecvInProgress>,
    pub(crate) write_ip: Option<WriteInProgress>,
    pub(crate) nak_sent: bool,
    pub(crate) atomic_replay: VecDeque<AtomicReplay>,
}

impl Qp {
    pub(crate) fn new(qpn: Qpn, p: QpParams) -> Self {
        Self {
            qpn,
            sq_size: 1 << p.log_sq_size,
            rq_size: 1 << p.log_rq_size,
            rq_stride: 16 << p.log_rq_stride,
            p,
            state: QpState::Reset,
            attrs: QpAttrs::default(),
            sq_ci: 0,
            sq_pi: 0,
            wqe_cache: VecDeque::new(),
            rq_ci: 0,
            rq_pi: 0,
            next_psn: Psn::new(0),
            high_psn: Psn::new(0),
            ack_psn: Psn::new(Psn::MASK),
            outstanding: VecDeque::new(),
            retry_left: 0,
            rnr_left: 0,
            ack_deadline: None,
            rnr_resume: None,
            rq_flush_poll: None,
            nak_retry_psn: None,
            epsn: Psn::new(0),
            msn: 0,
            recv_ip: None,
            write_ip: None,
            nak_sent: false,
            atomic_replay: VecDeque::new(),
        }
    }

    /// Byte offset of the send queue in the QP buffer (after the RQ).
    pub(crate) fn sq_offset(&self) -> u64 {
        u64::from(self.rq_size) * u64::from(self.rq_stride)
    }

    /// Path MTU in bytes.
    pub(crate) fn mtu(&self) -> u32 {
        self.attrs.path_mtu.unwrap_or(1024)
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
        if let Some(psn) = a.rq_psn {
            self.epsn = psn;
        }
        if let Some(psn) = a.sq_psn {
            self.next_psn = psn;
            self.high_psn = psn;
            self.ack_psn = psn.add(Psn::MASK);
        }
        if to == QpState::Rts {
            self.retry_left = self.attrs.retry_cnt.unwrap_or(7);
            self.rnr_left = self.attrs.rnr_retry.unwrap_or(7);
        }
        Ok(from)
    }

    fn reset(&mut self) {
        let (qpn, p) = (self.qpn, self.p.clone());
        *self = Qp::new(qpn, p);
    }
}

impl Qp {
    /// Calls `f(host_addr, bytes, offset_into_range)` for each run of the QP
    /// buffer `[off, off + len)` that is contiguous in host memory. Returns
    /// false if the range is outside the buffer's pages.
    pub(crate) fn buf_runs(
        &self,
        off: u64,
        len: u64,
        mut f: impl FnMut(doorbell_types::HostAddr, u64, u64),
    ) -> bool {
        use doorbell_host::PAGE_SIZE;
        let end = off + len;
        let mut at = off;
        let mut run: Option<(u64, u64, u64)> = None;
        while at < end {
            let Some(page) = self.p.pas.get((at / PAGE_SIZE) as usize) else {
                return false;
            };
            let host = page.get() + at % PAGE_SIZE;
            let n = (PAGE_SIZE - at % PAGE_SIZE).min(end - at);
            run = match run {
                Some((h, b, o)) if h + b == host => Some((h, b + n, o)),
                Some((h, b, o)) => {
                    f(doorbell_types::HostAddr::new(h), b, o);
                    Some((host, n, at - off))
                }
                None => Some((host, n, at - off)),
            };
            at += n;
        }
        if let Some((h, b, o)) = run {
            f(doorbell_types::HostAddr::new(h), b, o);
        }
        true
    }

    /// Host address of the QP's doorbell record word `word`.
    pub(crate) fn dbr_word(&self, word: usize) -> Option<doorbell_types::HostAddr> {
        self.p.dbr_addr.checked_add(4 * word as u64)
    }

    /// Time the ACK timer waits: 4.096 µs × 2^timeout; `None` when infinite.
    pub(crate) fn ack_timeout(&self) -> Option<doorbell_types::Duration> {
        match self.attrs.timeout.unwrap_or(0) {
            0 => None,
            t => Some(doorbell_types::Duration::from_ps(4_096_000u64 << t.min(31))),
        }
    }
}

/// RNR NAK timer codes in microseconds (IBTA Vol 1 Table 45).
pub(crate) const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_hif::{Access, AddressVector, Param, QpAttr, QpType};
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
            },
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
        assert_eq!(q.epsn, Psn::new(100));
        q.modify(QpState::Rts, &rts_attrs()).unwrap();
        assert_eq!((q.state, q.next_psn), (QpState::Rts, Psn::new(200)));
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
