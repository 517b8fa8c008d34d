//! MADs received: one handler per CM message, as `impl CmAgent`.
//!
//! Handles are found as the kernel's `cm_acquire_id` finds them: by the
//! local comm ID the MAD names, checked against the remote comm ID it
//! carries, and here also against the GID it came from. Anything that does
//! not match, or does not fit the handle's state, is counted and dropped.

use doorbell_cm::{
    CmMad, CmMessage, DrepRepr, DreqRepr, MraRepr, MsgResponse, RejRepr, RejectReason, RepRepr,
    ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, drep, dreq, rej, sidr,
};
use doorbell_types::{Instant, Qpn};

use crate::agent::CmAgent;
use crate::conn::{CmState, Conn, ConnId};
use crate::event::{CmEvent, RepReceived, ReqReceived};
use crate::params::{QpType, cm_timeout};
use crate::peer::Peer;

impl CmAgent {
    /// Handles a MAD received on QP 1 from `from` (the 256 bytes after the
    /// GRH; more are ignored). Never panics; a MAD that is not a CM MAD
    /// this agent parses is counted in [`crate::CmStats::bad_mads`].
    pub fn handle_mad(&mut self, now: Instant, from: Peer, bytes: &[u8]) {
        self.stats.received += 1;
        let Ok(mad) = CmMad::parse(bytes) else {
            self.stats.bad_mads += 1;
            return;
        };
        let tid = mad.transaction_id;
        match mad.message {
            CmMessage::Req(r) => self.on_req(now, from, tid, &r),
            CmMessage::Mra(r) => self.on_mra(now, from, &r),
            CmMessage::Rej(r) => self.on_rej(now, from, &r),
            CmMessage::Rep(r) => self.on_rep(now, from, &r),
            CmMessage::Rtu(r) => self.on_rtu(from, &r),
            CmMessage::Dreq(r) => self.on_dreq(now, from, tid, &r),
            CmMessage::Drep(r) => self.on_drep(now, from, &r),
            CmMessage::SidrReq(r) => self.on_sidr_req(from, tid, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(from, &r),
        }
    }

    /// The handle with local comm ID `local`, from `from`, whose remote
    /// comm ID passes `remote_ok`.
    fn find(
        &self,
        from: &Peer,
        local: u32,
        remote_ok: impl Fn(u32) -> bool,
    ) -> Option<(ConnId, &Conn)> {
        let id = ConnId(local);
        self.conns
            .get(&id)
            .filter(|c| {
                c.state != CmState::Listen && c.peer.gid == from.gid && remote_ok(c.remote_comm_id)
            })
            .map(|c| (id, c))
    }

    fn unmatched(&mut self) {
        self.stats.unmatched += 1;
    }

    /// A REJ answering a message we could not match to a handle (the
    /// kernel's `cm_issue_rej`): its IDs are the received ones, swapped.
    fn issue_rej(
        &mut self,
        to: Peer,
        tid: u64,
        local: u32,
        remote: u32,
        message: MsgResponse,
        reason: RejectReason,
    ) {
        let rej = RejRepr {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: message,
            reason,
            ari_len: 0,
            ari: [0; rej::ARI_LEN],
            private_data: [0; rej::PRIVATE_DATA_LEN],
        };
        self.send_raw(to, tid, CmMessage::Rej(rej));
    }

    fn on_req(&mut self, now: Instant, from: Peer, tid: u64, r: &ReqRepr) {
        // A REQ we already have: the peer's REQ timer ran out before our
        // answer arrived (the kernel's `cm_dup_req_handler`).
        if let Some(&id) = self.by_remote_id.get(&(r.local_ca_guid, r.local_comm_id)) {
            self.stats.duplicates += 1;
            let Some(c) = self.conns.get(&id) else { return };
            match c.state {
                CmState::MraReqSent | CmState::RepSent | CmState::MraRepRcvd => {
                    if let Some(mad) = c.answer {
                        let peer = c.peer;
                        self.send(peer, mad);
                    }
                }
                CmState::Timewait => {
                    let rej = self.rej_for(
                        id,
                        RejectReason::StaleConn,
                        0,
                        [0; rej::ARI_LEN],
                        [0; rej::PRIVATE_DATA_LEN],
                    );
                    self.send_raw(from, tid, CmMessage::Rej(rej));
                }
                _ => {}
            }
            return;
        }
        // A new REQ from a QP we still hold a connection with: that one is
        // stale (the kernel's `cm_match_req`): reject the REQ, and ask the
        // old connection down if it is up.
        if let Some(&old) = self
            .by_remote_qpn
            .get(&(r.local_ca_guid, r.local_qpn.get()))
        {
            self.issue_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MsgResponse::Req,
                RejectReason::StaleConn,
            );
            self.drop_stale(now, old);
            return;
        }
        let Some(&listen) = self.listeners.get(&r.service_id) else {
            // Nobody listens: REJ 8, the kernel's choice; nothing reported.
            self.issue_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MsgResponse::Req,
                RejectReason::InvalidServiceId,
            );
            return;
        };
        let Some(qp_type) = QpType::from_transport_service_type(r.transport_service_type) else {
            self.issue_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                MsgResponse::Req,
                RejectReason::InvalidTransportType,
            );
            return;
        };
        let id = self.alloc_id();
        let mut c = Conn::new(CmState::ReqRcvd, from, r.service_id);
        c.tid = tid;
        c.remote_comm_id = r.local_comm_id;
        c.remote_ca_guid = r.local_ca_guid;
        c.remote_qpn = r.local_qpn;
        c.qp_type = qp_type;
        // The REP waits as long as the peer said it takes to answer, and is
        // sent as often as the peer would send its REQ.
        c.wait = cm_timeout(r.local_cm_response_timeout);
        c.max_cm_retries = r.max_cm_retries;
        self.conns.insert(id, c);
        self.key(id);
        let req = ReqReceived {
            service_id: r.service_id,
            remote_ca_guid: r.local_ca_guid,
            remote_qpn: r.local_qpn,
            starting_psn: r.starting_psn,
            qp_type,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            path_mtu: r.path_mtu,
            pkey: r.pkey,
            flow_control: r.end_to_end_flow_control,
            srq: r.srq,
            primary_path: r.primary_path,
            private_data: r.private_data,
        };
        self.events.push_back(CmEvent::ConnectRequest {
            conn: id,
            listen,
            peer: from,
            req,
        });
    }

    /// Asks a connection found stale down, with no private data.
    fn drop_stale(&mut self, now: Instant, old: ConnId) {
        if self.state(old) == Some(CmState::Established) {
            self.send_dreq(now, old, [0; dreq::PRIVATE_DATA_LEN]);
        }
    }

    fn on_mra(&mut self, now: Instant, from: Peer, r: &MraRepr) {
        let found = match r.message_mraed {
            MsgResponse::Req => self.find(&from, r.remote_comm_id, |_| true),
            MsgResponse::Rep => self.find(&from, r.remote_comm_id, |rc| rc == r.local_comm_id),
            _ => None,
        };
        let Some((id, c)) = found else {
            return self.unmatched();
        };
        let next = match (c.state, r.message_mraed) {
            (CmState::ReqSent, MsgResponse::Req) => CmState::MraReqRcvd,
            (CmState::RepSent, MsgResponse::Rep) => CmState::MraRepRcvd,
            (CmState::MraReqRcvd | CmState::MraRepRcvd, _) => {
                self.stats.duplicates += 1;
                return;
            }
            _ => return self.unmatched(),
        };
        // The peer needs `service_timeout` more, and the MAD a packet
        // lifetime to come back (the kernel's `cm_mra_handler`).
        let life = self.cfg.packet_life_time.saturating_add(1);
        let wait = cm_timeout(r.service_timeout).add(cm_timeout(life));
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = next;
            if let Some(rt) = c.retx.as_mut() {
                rt.wait = wait;
                rt.deadline = now.add(wait);
            }
        }
    }

    fn on_rej(&mut self, now: Instant, from: Peer, r: &RejRepr) {
        let found = if r.reason == RejectReason::Timeout {
            // Found by the peer's CA GUID in the ARI and its comm ID: it
            // may never have learnt ours.
            let mut guid = [0u8; 8];
            guid.copy_from_slice(&r.ari[..8]);
            self.by_remote_id
                .get(&(u64::from_be_bytes(guid), r.local_comm_id))
                .copied()
                .filter(|id| self.conns.get(id).is_some_and(|c| c.peer.gid == from.gid))
        } else if r.message_rejected == MsgResponse::Req {
            self.find(&from, r.remote_comm_id, |rc| rc == 0)
                .map(|(id, _)| id)
        } else {
            // The peer names our REQ's comm ID and its own. An active side
            // still waiting for a REP has not learnt the latter: the kernel
            // drops such a REJ (sent when the passive side rejects after
            // accepting) and waits for its REQ to time out; we take it.
            self.find(&from, r.remote_comm_id, |rc| {
                rc == r.local_comm_id || rc == 0
            })
            .filter(|(_, c)| {
                c.remote_comm_id != 0 || matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd)
            })
            .map(|(id, _)| id)
        };
        let Some(id) = found else {
            return self.unmatched();
        };
        let Some(state) = self.state(id) else { return };
        use CmState::*;
        let timewait = match state {
            ReqSent | MraReqRcvd | RepSent | MraRepRcvd | ReqRcvd | MraReqSent => {
                r.reason == RejectReason::StaleConn
            }
            DreqSent | RepRcvd | MraRepSent | Established => true,
            _ => return self.unmatched(),
        };
        if timewait {
            self.enter_timewait(now, id);
        } else {
            self.free(id);
        }
        self.events.push_back(CmEvent::Rejected {
            conn: id,
            reason: r.reason,
            message: r.message_rejected,
            ari_len: r.ari_len,
            ari: r.ari,
            private_data: r.private_data,
            timewait,
        });
    }

    fn on_rep(&mut self, now: Instant, from: Peer, r: &RepRepr) {
        let Some((id, c)) = self.find(&from, r.remote_comm_id, |_| true) else {
            return self.unmatched();
        };
        let (active, state, known, answer, peer, tid, auto_rtu) = (
            c.active,
            c.state,
            c.remote_comm_id,
            c.answer,
            c.peer,
            c.tid,
            c.auto_rtu,
        );
        if !active {
            return self.unmatched();
        }
        match state {
            CmState::ReqSent | CmState::MraReqRcvd => {}
            CmState::Established | CmState::MraRepSent if known == r.local_comm_id => {
                // Our RTU (or MRA) was lost: the REP came again.
                self.stats.duplicates += 1;
                if let Some(mad) = answer {
                    self.send(peer, mad);
                }
                return;
            }
            _ => return self.unmatched(),
        }
        if self
            .by_remote_id
            .contains_key(&(r.local_ca_guid, r.local_comm_id))
        {
            return self.unmatched();
        }
        if let Some(&old) = self
            .by_remote_qpn
            .get(&(r.local_ca_guid, r.local_qpn.get()))
        {
            self.issue_rej(
                from,
                tid,
                id.0,
                r.local_comm_id,
                MsgResponse::Rep,
                RejectReason::StaleConn,
            );
            self.drop_stale(now, old);
            return;
        }
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::RepRcvd;
            c.retx = None;
            c.remote_comm_id = r.local_comm_id;
            c.remote_ca_guid = r.local_ca_guid;
            c.remote_qpn = r.local_qpn;
        }
        self.key(id);
        let rep = RepReceived {
            remote_ca_guid: r.local_ca_guid,
            remote_qpn: r.local_qpn,
            starting_psn: r.starting_psn,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            target_ack_delay: r.target_ack_delay,
            failover_accepted: r.failover_accepted,
            flow_control: r.end_to_end_flow_control,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            private_data: r.private_data,
        };
        self.events
            .push_back(CmEvent::ConnectResponse { conn: id, rep });
        if auto_rtu {
            self.send_rtu(id, [0; doorbell_cm::rtu::PRIVATE_DATA_LEN]);
        }
    }

    fn on_rtu(&mut self, from: Peer, r: &RtuRepr) {
        let Some((id, c)) = self.find(&from, r.remote_comm_id, |rc| rc == r.local_comm_id) else {
            return self.unmatched();
        };
        match c.state {
            CmState::RepSent | CmState::MraRepRcvd if !c.active => {
                self.establish_passive(id, r.private_data);
            }
            _ => self.stats.duplicates += 1,
        }
    }

    fn on_dreq(&mut self, now: Instant, from: Peer, tid: u64, r: &DreqRepr) {
        let Some((id, c)) = self.find(&from, r.remote_comm_id, |rc| rc == r.local_comm_id) else {
            // The IBA: a DREQ for a connection we do not have gets a
            // DREP anyway, so the peer can leave DREQ_SENT.
            self.stats.duplicates += 1;
            let drep = DrepRepr {
                local_comm_id: r.remote_comm_id,
                remote_comm_id: r.local_comm_id,
                private_data: [0; drep::PRIVATE_DATA_LEN],
            };
            self.send_raw(from, tid, CmMessage::Drep(drep));
            return;
        };
        if c.local_qpn != r.remote_qpn {
            return self.unmatched();
        }
        let mut private_data = [0u8; drep::PRIVATE_DATA_LEN];
        private_data[..dreq::PRIVATE_DATA_LEN].copy_from_slice(&r.private_data);
        let state = c.state;
        use CmState::*;
        if !matches!(
            state,
            RepSent | MraRepRcvd | Established | DreqSent | Timewait | DreqRcvd
        ) {
            return self.unmatched();
        }
        if state != DreqRcvd {
            // The DREP goes back in the DREQ's transaction.
            if let Some(c) = self.conns.get_mut(&id) {
                c.tid = tid;
            }
        }
        match state {
            CmState::RepSent | CmState::MraRepRcvd | CmState::Established => {
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = CmState::DreqRcvd;
                    c.retx = None;
                }
            }
            CmState::DreqSent => {
                // Both sides disconnect at once: answer, and go to
                // time-wait without waiting for our own DREP.
                self.send_drep(id, [0; drep::PRIVATE_DATA_LEN]);
                self.enter_timewait(now, id);
            }
            CmState::Timewait => {
                // Our DREP was lost: the same one again, or a bare one if
                // we came to time-wait another way.
                self.stats.duplicates += 1;
                let drep = self.conns.get(&id).and_then(|c| c.answer).filter(is_drep);
                match drep {
                    Some(mad) => self.send(from, mad),
                    None => self.send_drep(id, [0; drep::PRIVATE_DATA_LEN]),
                }
                return;
            }
            _ => {
                self.stats.duplicates += 1;
                return;
            }
        }
        self.events.push_back(CmEvent::Disconnected {
            conn: id,
            private_data,
            timed_out: false,
        });
    }

    fn on_drep(&mut self, now: Instant, from: Peer, r: &DrepRepr) {
        let Some((id, c)) = self.find(&from, r.remote_comm_id, |rc| rc == r.local_comm_id) else {
            return self.unmatched();
        };
        match c.state {
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.events.push_back(CmEvent::Disconnected {
                    conn: id,
                    private_data: r.private_data,
                    timed_out: false,
                });
            }
            // Disconnected was reported with the DREQ; only time-wait now.
            CmState::DreqRcvd => self.enter_timewait(now, id),
            _ => self.stats.duplicates += 1,
        }
    }

    fn on_sidr_req(&mut self, from: Peer, tid: u64, r: &SidrReqRepr) {
        if self.sidr_by_remote.contains_key(&(from, r.request_id)) {
            self.stats.duplicates += 1;
            return;
        }
        let Some(&listen) = self.listeners.get(&r.service_id) else {
            // IBA Vol 1 Table 121: status 1, "service ID not supported" (the
            // kernel's IB_SIDR_UNSUPPORTED); nothing reported.
            let rep = SidrRepRepr {
                request_id: r.request_id,
                status: SidrStatus::Unsupported,
                additional_info_len: 0,
                vendor_id: 0,
                qpn: Qpn::new(0),
                service_id: r.service_id,
                qkey: 0,
                additional_info: [0; sidr::ADDITIONAL_INFO_LEN],
                private_data: [0; sidr::REP_PRIVATE_DATA_LEN],
            };
            self.send_raw(from, tid, CmMessage::SidrRep(rep));
            return;
        };
        let id = self.alloc_id();
        let mut c = Conn::new(CmState::SidrReqRcvd, from, r.service_id);
        c.tid = tid;
        c.remote_comm_id = r.request_id;
        self.conns.insert(id, c);
        self.sidr_by_remote.insert((from, r.request_id), id);
        self.events.push_back(CmEvent::SidrRequest {
            conn: id,
            listen,
            peer: from,
            service_id: r.service_id,
            pkey: r.pkey,
            private_data: r.private_data,
        });
    }

    fn on_sidr_rep(&mut self, from: Peer, r: &SidrRepRepr) {
        let Some((id, c)) = self.find(&from, r.request_id, |_| true) else {
            return self.unmatched();
        };
        if c.state != CmState::SidrReqSent {
            return self.unmatched();
        }
        self.free(id);
        self.events.push_back(CmEvent::SidrReply {
            conn: id,
            status: r.status,
            qpn: r.qpn,
            qkey: r.qkey,
            private_data: r.private_data,
        });
    }
}

/// True if `mad` is a DREP.
fn is_drep(mad: &[u8; doorbell_cm::MAD_LEN]) -> bool {
    let attr = &mad[doorbell_cm::mad::field::ATTRIBUTE_ID];
    u16::from_be_bytes([attr[0], attr[1]]) == u16::from(doorbell_cm::CmAttribute::Drep)
}
