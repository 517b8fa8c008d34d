//! The agent: its tables, the upper layer's requests, timers and outputs.
//! Received MADs are handled in `rx`.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use doorbell_cm::{
    CmMad, CmMessage, DrepRepr, DreqRepr, MAD_LEN, MraRepr, MsgResponse, PathRepr, RejRepr,
    RejectReason, RepRepr, ReqRepr, RtuRepr, SidrRepRepr, SidrReqRepr, SidrStatus, drep, dreq, mra,
    rej, rep, req, rtu, sidr,
};
use doorbell_types::{Duration, Instant, Qpn};

use crate::conn::{CmState, Conn, ConnId, Retx};
use crate::error::CmError;
use crate::event::{CmEvent, TimedOut};
use crate::params::{RepParams, ReqParams, SidrReqParams, cm_timeout};
use crate::peer::Peer;

/// rdma_cm's packet lifetime on RoCE (`CMA_IBOE_PACKET_LIFETIME`), as a
/// [`cm_timeout`] exponent: about 268 ms.
pub const DEFAULT_PACKET_LIFE_TIME: u8 = 16;

/// How one agent is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentConfig {
    /// The local CA (node) GUID, sent in REQ and REP and in the ARI of a
    /// REJ for a timeout.
    pub ca_guid: u64,
    /// Mixed into communication IDs (low 32 bits, as the kernel XORs a
    /// random operand into its ID table index) and transaction IDs (high
    /// 32 bits, the MAD agent's `hi_tid`). The driver draws it from its
    /// seeded RNG.
    pub seed: u64,
    /// The packet lifetime, as a [`cm_timeout`] exponent: twice it is
    /// added to the REQ's wait, and once (plus one) to an MRA's.
    pub packet_life_time: u8,
    /// How long a connection stays in time-wait.
    pub time_wait: Duration,
}

impl AgentConfig {
    /// An agent for the CA `ca_guid`, with rdma_cm's RoCE packet lifetime
    /// and a time-wait of one ACK timeout's worth (4.096 µs · 2^(lifetime
    /// + 1)), as the kernel's `cm_enter_timewait` waits.
    pub const fn new(ca_guid: u64, seed: u64) -> Self {
        Self {
            ca_guid,
            seed,
            packet_life_time: DEFAULT_PACKET_LIFE_TIME,
            time_wait: cm_timeout(DEFAULT_PACKET_LIFE_TIME + 1),
        }
    }
}

/// Counters of what the agent received and sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs handed to `handle_mad`.
    pub received: u64,
    /// Of those, not a CM MAD the agent can parse: dropped.
    pub bad_mads: u64,
    /// Parsed, but naming no handle, or not fitting its state: dropped.
    pub unmatched: u64,
    /// Repeats of a message already handled (answered again or dropped).
    pub duplicates: u64,
    /// MADs queued for sending, retransmissions included.
    pub sent: u64,
    /// Retransmissions of REQ, REP, DREQ and SIDR_REQ.
    pub retransmits: u64,
}

/// The Communication Manager agent of one port: the state machines of its
/// connections (IBA Vol 1 chapter 12), sans-IO.
///
/// # Driving it
/// Feed it MADs received on QP 1 with [`handle_mad`](Self::handle_mad),
/// the upper layer's requests ([`listen`](Self::listen),
/// [`connect`](Self::connect), [`accept`](Self::accept), ...) and, when
/// [`poll_timeout`](Self::poll_timeout) is due,
/// [`handle_timeout`](Self::handle_timeout). After each call drain
/// [`poll_transmit`](Self::poll_transmit) (MADs to send, in order) and
/// [`poll_event`](Self::poll_event) (what to tell the upper layer, in
/// order), then ask [`poll_timeout`](Self::poll_timeout) again: any input
/// may move it.
///
/// # Handles
/// A [`ConnId`] names a listener, a connection or a SIDR exchange. A
/// connection handle is freed, as the kernel resets its `ib_cm_id` to idle,
/// after the event that ends it: [`CmEvent::Unreachable`],
/// [`CmEvent::Rejected`] (unless it went to time-wait),
/// [`CmEvent::TimewaitExit`], [`CmEvent::SidrReply`], or after a local
/// `reject` or `sidr_reply`, or [`destroy`](Self::destroy). A freed
/// handle's requests fail with [`CmError::UnknownConn`].
///
/// # Guarantees
/// Deterministic: no clock, no randomness but the configured seed, no
/// hash-ordered iteration. No input bytes make it panic; a MAD it cannot
/// parse is counted in [`CmStats::bad_mads`] and dropped, and only a REQ or
/// SIDR_REQ to a service listened on creates a handle.
#[derive(Debug)]
pub struct CmAgent {
    pub(crate) cfg: AgentConfig,
    pub(crate) conns: BTreeMap<ConnId, Conn>,
    pub(crate) listeners: BTreeMap<u64, ConnId>,
    /// (remote CA GUID, remote comm ID) of every connection that knows its
    /// peer, until it is freed: finds duplicate REQs and REPs.
    pub(crate) by_remote_id: BTreeMap<(u64, u32), ConnId>,
    /// (remote CA GUID, remote QPN), likewise: finds stale connections.
    pub(crate) by_remote_qpn: BTreeMap<(u64, u32), ConnId>,
    /// (peer, request ID) of SIDR_REQs waiting for the upper layer.
    pub(crate) sidr_by_remote: BTreeMap<(Peer, u32), ConnId>,
    pub(crate) next_index: u32,
    pub(crate) tx: VecDeque<(Peer, [u8; MAD_LEN])>,
    pub(crate) events: VecDeque<CmEvent>,
    pub(crate) stats: CmStats,
}

/// Copies `data` into a zeroed private-data area of `N` bytes.
pub(crate) fn private<const N: usize>(data: &[u8]) -> Result<[u8; N], CmError> {
    if data.len() > N {
        return Err(CmError::PrivateDataTooLong {
            len: data.len(),
            max: N,
        });
    }
    let mut a = [0u8; N];
    a[..data.len()].copy_from_slice(data);
    Ok(a)
}

/// Fails unless `value <= max`.
fn check(name: &'static str, value: u8, max: u8) -> Result<(), CmError> {
    if value > max {
        return Err(CmError::ParamOutOfRange {
            name,
            value: u32::from(value),
        });
    }
    Ok(())
}

impl CmAgent {
    /// An agent with no handles.
    pub fn new(cfg: AgentConfig) -> Self {
        Self {
            cfg,
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            by_remote_id: BTreeMap::new(),
            by_remote_qpn: BTreeMap::new(),
            sidr_by_remote: BTreeMap::new(),
            next_index: 0,
            tx: VecDeque::new(),
            events: VecDeque::new(),
            stats: CmStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// The state of a live handle; `None` once it is freed.
    pub fn state(&self, conn: ConnId) -> Option<CmState> {
        self.conns
            .get(&conn)
            .filter(|c| !c.destroyed)
            .map(|c| c.state)
    }

    /// Live handles (listeners included).
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    // ---- outputs -------------------------------------------------------

    /// The next MAD to send on QP 1, with its destination.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(Peer, [u8; MAD_LEN])> {
        self.tx.pop_front()
    }

    /// Whether a MAD waits for [`poll_transmit`](Self::poll_transmit).
    #[must_use]
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// The next event for the upper layer.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be
    /// called: the earliest retransmission or end of time-wait.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns.values().filter_map(Conn::next_deadline).min()
    }

    /// Runs the timers due at `now`: sends REQ, REP, DREQ and SIDR_REQ
    /// again, gives up on them after their last retry, and ends time-waits.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.next_deadline().is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.fire(now, id);
        }
    }

    fn fire(&mut self, now: Instant, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.timewait_end.is_some_and(|t| t <= now) {
            let destroyed = c.destroyed;
            self.free(id);
            if !destroyed {
                self.events.push_back(CmEvent::TimewaitExit { conn: id });
            }
            return;
        }
        let peer = c.peer;
        let Some(r) = c.retx.as_mut().filter(|r| r.deadline <= now) else {
            return;
        };
        if r.retries_left > 0 {
            r.retries_left -= 1;
            r.deadline = now.add(r.wait);
            let mad = r.mad;
            self.stats.retransmits += 1;
            self.send(peer, mad);
            return;
        }
        c.retx = None;
        let state = c.state;
        match state {
            CmState::ReqSent | CmState::MraReqRcvd => {
                // IBA Table 108: a REJ for a REP timeout carries the
                // sender's CA GUID in the ARI, so the passive side can find
                // its half-open connection without knowing our comm ID.
                let mut ari = [0u8; rej::ARI_LEN];
                ari[..8].copy_from_slice(&self.cfg.ca_guid.to_be_bytes());
                let rej = self.rej_for(
                    id,
                    RejectReason::Timeout,
                    8,
                    ari,
                    [0; rej::PRIVATE_DATA_LEN],
                );
                self.send_msg(id, CmMessage::Rej(rej));
                self.free(id);
                self.events.push_back(CmEvent::Unreachable {
                    conn: id,
                    message: TimedOut::Req,
                });
            }
            CmState::RepSent | CmState::MraRepRcvd => {
                self.free(id);
                self.events.push_back(CmEvent::Unreachable {
                    conn: id,
                    message: TimedOut::Rep,
                });
            }
            CmState::DreqSent => {
                self.enter_timewait(now, id);
                self.events.push_back(CmEvent::Disconnected {
                    conn: id,
                    private_data: [0; drep::PRIVATE_DATA_LEN],
                    timed_out: true,
                });
            }
            CmState::SidrReqSent => {
                self.free(id);
                self.events.push_back(CmEvent::Unreachable {
                    conn: id,
                    message: TimedOut::SidrReq,
                });
            }
            _ => {}
        }
    }

    // ---- the upper layer's requests ------------------------------------

    /// Listens for REQs and SIDR_REQs to `service_id` (exact match).
    pub fn listen(&mut self, service_id: u64) -> Result<ConnId, CmError> {
        if self.listeners.contains_key(&service_id) {
            return Err(CmError::ServiceIdInUse(service_id));
        }
        let id = self.alloc_id();
        let peer = Peer::new(doorbell_wire::Gid::default());
        self.conns
            .insert(id, Conn::new(CmState::Listen, peer, service_id));
        self.listeners.insert(service_id, id);
        Ok(id)
    }

    /// Stops listening. Connections it accepted are not touched.
    pub fn unlisten(&mut self, listen: ConnId) -> Result<(), CmError> {
        self.expect(listen, &[CmState::Listen])?;
        self.free(listen);
        Ok(())
    }

    /// Sends a REQ for `service_id` to `peer` and returns the new handle,
    /// in REQ_SENT. `private_data` (at most 92 bytes) is zero-padded.
    pub fn connect(
        &mut self,
        now: Instant,
        peer: Peer,
        service_id: u64,
        p: &ReqParams,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let pd = private::<{ req::PRIVATE_DATA_LEN }>(private_data)?;
        check("retry_count", p.retry_count, 7)?;
        check("rnr_retry_count", p.rnr_retry_count, 7)?;
        check("max_cm_retries", p.max_cm_retries, 15)?;
        check("path_mtu", p.path_mtu, 15)?;
        check(
            "remote_cm_response_timeout",
            p.remote_cm_response_timeout,
            31,
        )?;
        check("local_cm_response_timeout", p.local_cm_response_timeout, 31)?;
        let id = self.alloc_id();
        let mut c = Conn::new(CmState::ReqSent, peer, service_id);
        c.active = true;
        c.tid = self.tid_for(id);
        c.local_qpn = p.local_qpn;
        c.qp_type = p.qp_type;
        c.auto_rtu = p.auto_rtu;
        c.max_cm_retries = p.max_cm_retries;
        let life = cm_timeout(self.cfg.packet_life_time);
        c.wait = cm_timeout(p.remote_cm_response_timeout).add(life).add(life);
        self.conns.insert(id, c);
        let msg = CmMessage::Req(ReqRepr {
            local_comm_id: id.0,
            vendor_id: 0,
            service_id,
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: p.qp_type.transport_service_type(),
            end_to_end_flow_control: p.flow_control,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: p.pkey,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport_type: 0,
            primary_path: p.primary_path,
            alternate_path: PathRepr::default(),
            sap_supported: false,
            private_data: pd,
        });
        let mad = self.send_msg(id, msg);
        self.arm(now, id, mad);
        Ok(id)
    }

    /// Accepts a REQ (handle in REQ_RCVD or MRA_REQ_SENT): sends the REP,
    /// which is sent again until the RTU comes; at most 196 bytes of
    /// private data.
    pub fn accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        p: &RepParams,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.expect(conn, &[CmState::ReqRcvd, CmState::MraReqSent])?;
        let pd = private::<{ rep::PRIVATE_DATA_LEN }>(private_data)?;
        check("target_ack_delay", p.target_ack_delay, 31)?;
        check("failover_accepted", p.failover_accepted, 3)?;
        check("rnr_retry_count", p.rnr_retry_count, 7)?;
        let c = self.conn_mut(conn)?;
        c.local_qpn = p.local_qpn;
        c.state = CmState::RepSent;
        let remote_comm_id = c.remote_comm_id;
        let msg = CmMessage::Rep(RepRepr {
            local_comm_id: conn.0,
            remote_comm_id,
            local_qkey: 0,
            local_qpn: p.local_qpn,
            vendor_id: 0,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: p.target_ack_delay,
            failover_accepted: p.failover_accepted,
            end_to_end_flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: self.cfg.ca_guid,
            private_data: pd,
        });
        let mad = self.send_msg(conn, msg);
        self.arm(now, conn, mad);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.answer = Some(mad);
        }
        Ok(())
    }

    /// Rejects: a REQ received (REQ_RCVD, MRA_REQ_SENT), a REP received
    /// (REP_RCVD, MRA_REP_SENT), or our own REQ still unanswered (REQ_SENT,
    /// MRA_REQ_RCVD); the handle is freed. From REP_SENT or MRA_REP_RCVD
    /// (the upper layer changed its mind after accepting) the handle goes
    /// to time-wait, as the kernel's `ib_send_cm_rej` does. `rdma_reject`
    /// passes [`RejectReason::ConsumerDefined`]; at most 148 bytes of
    /// private data.
    pub fn reject(
        &mut self,
        now: Instant,
        conn: ConnId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        use CmState::*;
        let state = self.expect(
            conn,
            &[
                ReqSent, MraReqRcvd, ReqRcvd, MraReqSent, RepRcvd, MraRepSent, RepSent, MraRepRcvd,
            ],
        )?;
        let pd = private::<{ rej::PRIVATE_DATA_LEN }>(private_data)?;
        let rej = self.rej_for(conn, reason, 0, [0; rej::ARI_LEN], pd);
        self.send_msg(conn, CmMessage::Rej(rej));
        if matches!(state, RepSent | MraRepRcvd) {
            self.enter_timewait(now, conn);
        } else {
            self.free(conn);
        }
        Ok(())
    }

    /// Sends an MRA for the REQ (REQ_RCVD → MRA_REQ_SENT) or the REP
    /// (REP_RCVD → MRA_REP_SENT) received: the peer then waits
    /// `service_timeout` (a [`cm_timeout`] exponent) plus a packet lifetime
    /// before it sends again. Repeats of the message get the MRA again.
    pub fn send_mra(&mut self, conn: ConnId, service_timeout: u8) -> Result<(), CmError> {
        self.mra(conn, service_timeout, true)
    }

    /// Arms a delayed MRA for the REQ or REP received (the kernel's
    /// `ib_send_cm_mra` with `IB_CM_MRA_FLAG_DELAY`, which rdma_cm uses
    /// whenever it hands a REQ or REP to the program): the state moves as
    /// for [`send_mra`](Self::send_mra) but nothing is sent until the peer
    /// repeats its message, which then gets the MRA, so that a program
    /// slower than the peer's timer does not lose the connection.
    pub fn arm_mra(&mut self, conn: ConnId, service_timeout: u8) -> Result<(), CmError> {
        self.mra(conn, service_timeout, false)
    }

    fn mra(&mut self, conn: ConnId, service_timeout: u8, now: bool) -> Result<(), CmError> {
        let state = self.expect(conn, &[CmState::ReqRcvd, CmState::RepRcvd])?;
        check("service_timeout", service_timeout, 31)?;
        let (next, message_mraed) = if state == CmState::ReqRcvd {
            (CmState::MraReqSent, MsgResponse::Req)
        } else {
            (CmState::MraRepSent, MsgResponse::Rep)
        };
        let c = self.conn_mut(conn)?;
        c.state = next;
        c.service_timeout = service_timeout;
        let (peer, tid) = (c.peer, c.tid);
        let msg = CmMessage::Mra(MraRepr {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_comm_id,
            message_mraed,
            service_timeout,
            private_data: [0; mra::PRIVATE_DATA_LEN],
        });
        let mut mad = [0u8; MAD_LEN];
        // Cannot fail: the buffer is a whole MAD.
        let _ = CmMad::new(tid, msg).emit(&mut mad);
        if now {
            self.send(peer, mad);
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.answer = Some(mad);
        }
        Ok(())
    }

    /// Active side, after [`CmEvent::ConnectResponse`] without `auto_rtu`:
    /// sends the RTU (at most 224 bytes of private data) and reports
    /// [`CmEvent::Established`].
    pub fn establish(&mut self, conn: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        self.expect(conn, &[CmState::RepRcvd, CmState::MraRepSent])?;
        let pd = private::<{ rtu::PRIVATE_DATA_LEN }>(private_data)?;
        self.send_rtu(conn, pd);
        Ok(())
    }

    /// Passive side: data arrived on the QP before the RTU (the verbs
    /// "communication established" event, `rdma_notify`), so the RTU was
    /// lost or is late. Stops the REP's retransmission and reports
    /// [`CmEvent::Established`].
    pub fn notify_established(&mut self, conn: ConnId) -> Result<(), CmError> {
        self.expect(conn, &[CmState::RepSent, CmState::MraRepRcvd])?;
        self.establish_passive(conn, [0; rtu::PRIVATE_DATA_LEN]);
        Ok(())
    }

    /// Disconnects (rdma_disconnect). ESTABLISHED: sends a DREQ (at most
    /// 220 bytes of private data), sent again until the DREP comes.
    /// DREQ_RCVD (after [`CmEvent::Disconnected`]): sends the DREP (at most
    /// 224 bytes) and goes to time-wait.
    pub fn disconnect(
        &mut self,
        now: Instant,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let state = self.expect(conn, &[CmState::Established, CmState::DreqRcvd])?;
        if state == CmState::Established {
            let pd = private::<{ dreq::PRIVATE_DATA_LEN }>(private_data)?;
            self.send_dreq(now, conn, pd);
        } else {
            let pd = private::<{ drep::PRIVATE_DATA_LEN }>(private_data)?;
            self.send_drep(conn, pd);
            self.enter_timewait(now, conn);
        }
        Ok(())
    }

    /// Sends a SIDR_REQ for `service_id` to `peer` (at most 216 bytes of
    /// private data) and returns the new handle, in SIDR_REQ_SENT.
    pub fn sidr_request(
        &mut self,
        now: Instant,
        peer: Peer,
        service_id: u64,
        p: &SidrReqParams,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let pd = private::<{ sidr::REQ_PRIVATE_DATA_LEN }>(private_data)?;
        check("response_timeout", p.response_timeout, 31)?;
        check("max_cm_retries", p.max_cm_retries, 15)?;
        let id = self.alloc_id();
        let mut c = Conn::new(CmState::SidrReqSent, peer, service_id);
        c.active = true;
        c.tid = self.tid_for(id);
        c.wait = cm_timeout(p.response_timeout);
        c.max_cm_retries = p.max_cm_retries;
        self.conns.insert(id, c);
        let msg = CmMessage::SidrReq(SidrReqRepr {
            request_id: id.0,
            pkey: p.pkey,
            service_id,
            private_data: pd,
        });
        let mad = self.send_msg(id, msg);
        self.arm(now, id, mad);
        Ok(id)
    }

    /// Answers a SIDR_REQ (handle in SIDR_REQ_RCVD) with the QP serving
    /// the service (at most 136 bytes of private data); frees the handle.
    pub fn sidr_reply(
        &mut self,
        conn: ConnId,
        status: SidrStatus,
        qpn: Qpn,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.expect(conn, &[CmState::SidrReqRcvd])?;
        let pd = private::<{ sidr::REP_PRIVATE_DATA_LEN }>(private_data)?;
        let c = self.conn_mut(conn)?;
        let msg = CmMessage::SidrRep(SidrRepRepr {
            request_id: c.remote_comm_id,
            status,
            additional_info_len: 0,
            vendor_id: 0,
            qpn,
            service_id: c.service_id,
            qkey,
            additional_info: [0; sidr::ADDITIONAL_INFO_LEN],
            private_data: pd,
        });
        self.send_msg(conn, msg);
        self.free(conn);
        Ok(())
    }

    /// Destroys a handle (rdma_destroy_id), telling the peer as the
    /// kernel's `cm_destroy_id` does: a REQ still unanswered gets REJ
    /// Timeout; a REQ or REP received and not yet answered, or a REP sent
    /// and not yet acknowledged, gets REJ Consumer defined; an established
    /// connection gets one DREQ (not sent again); a DREQ received gets its
    /// DREP; a SIDR_REQ received gets SIDR_REP status Reject. No event
    /// follows. A connection that knew its peer stays in time-wait, its
    /// handle no longer usable, to answer stale and repeated MADs; the
    /// others are freed at once.
    pub fn destroy(&mut self, now: Instant, conn: ConnId) -> Result<(), CmError> {
        use CmState::*;
        let state = self
            .conns
            .get(&conn)
            .ok_or(CmError::UnknownConn(conn))?
            .state;
        let no_pd = [0; rej::PRIVATE_DATA_LEN];
        match state {
            ReqSent | MraReqRcvd => {
                let mut ari = [0u8; rej::ARI_LEN];
                ari[..8].copy_from_slice(&self.cfg.ca_guid.to_be_bytes());
                let rej = self.rej_for(conn, RejectReason::Timeout, 8, ari, no_pd);
                self.send_msg(conn, CmMessage::Rej(rej));
            }
            ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd => {
                let rej = self.rej_for(
                    conn,
                    RejectReason::ConsumerDefined,
                    0,
                    [0; rej::ARI_LEN],
                    no_pd,
                );
                self.send_msg(conn, CmMessage::Rej(rej));
            }
            Established => {
                self.send_dreq(now, conn, [0; dreq::PRIVATE_DATA_LEN]);
            }
            DreqRcvd => self.send_drep(conn, [0; drep::PRIVATE_DATA_LEN]),
            SidrReqRcvd => {
                let c = self.conn_mut(conn)?;
                let msg = CmMessage::SidrRep(SidrRepRepr {
                    request_id: c.remote_comm_id,
                    status: SidrStatus::Reject,
                    additional_info_len: 0,
                    vendor_id: 0,
                    qpn: Qpn::new(0),
                    service_id: c.service_id,
                    qkey: 0,
                    additional_info: [0; sidr::ADDITIONAL_INFO_LEN],
                    private_data: [0; sidr::REP_PRIVATE_DATA_LEN],
                });
                self.send_msg(conn, msg);
            }
            Listen | SidrReqSent | DreqSent | Timewait => {}
        }
        let lingers = matches!(
            state,
            RepSent | MraRepRcvd | Established | DreqSent | DreqRcvd | Timewait
        );
        if lingers {
            if state != Timewait {
                self.enter_timewait(now, conn);
            }
            if let Some(c) = self.conns.get_mut(&conn) {
                c.destroyed = true;
            }
        } else {
            self.free(conn);
        }
        Ok(())
    }

    // ---- helpers shared with `rx` ---------------------------------------

    /// A fresh local comm ID: a counter mixed with the seed, never 0 and
    /// never one in use.
    pub(crate) fn alloc_id(&mut self) -> ConnId {
        loop {
            self.next_index = self.next_index.wrapping_add(1);
            let id = ConnId(self.next_index ^ self.cfg.seed as u32);
            if id.0 != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// The transaction ID of an exchange `id` starts (the kernel's
    /// `cm_form_tid`).
    pub(crate) fn tid_for(&self, id: ConnId) -> u64 {
        (self.cfg.seed >> 32) << 32 | u64::from(id.0)
    }

    /// The state of `conn` if it is one of `allowed`.
    fn expect(&self, conn: ConnId, allowed: &[CmState]) -> Result<CmState, CmError> {
        let c = self
            .conns
            .get(&conn)
            .filter(|c| !c.destroyed)
            .ok_or(CmError::UnknownConn(conn))?;
        if allowed.contains(&c.state) {
            Ok(c.state)
        } else {
            Err(CmError::InvalidState {
                conn,
                state: c.state,
            })
        }
    }

    fn conn_mut(&mut self, conn: ConnId) -> Result<&mut Conn, CmError> {
        self.conns.get_mut(&conn).ok_or(CmError::UnknownConn(conn))
    }

    /// Queues a MAD for `to`.
    pub(crate) fn send(&mut self, to: Peer, mad: [u8; MAD_LEN]) {
        self.stats.sent += 1;
        self.tx.push_back((to, mad));
    }

    /// Emits `msg` with transaction ID `tid` and queues it for `to`.
    pub(crate) fn send_raw(&mut self, to: Peer, tid: u64, msg: CmMessage) -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        // Cannot fail: the buffer is a whole MAD.
        let _ = CmMad::new(tid, msg).emit(&mut mad);
        self.send(to, mad);
        mad
    }

    /// Emits `msg` in `id`'s exchange and queues it for its peer.
    pub(crate) fn send_msg(&mut self, id: ConnId, msg: CmMessage) -> [u8; MAD_LEN] {
        let (peer, tid) = self
            .conns
            .get(&id)
            .map_or((Peer::new(doorbell_wire::Gid::default()), 0), |c| {
                (c.peer, c.tid)
            });
        self.send_raw(peer, tid, msg)
    }

    /// Starts waiting for the answer to `mad`.
    pub(crate) fn arm(&mut self, now: Instant, id: ConnId, mad: [u8; MAD_LEN]) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.retx = Some(Retx {
                mad,
                deadline: now.add(c.wait),
                retries_left: c.max_cm_retries,
                wait: c.wait,
            });
        }
    }

    /// A REJ from `id`, its IDs and message-rejected code chosen by state
    /// as the kernel's `cm_format_rej` does.
    pub(crate) fn rej_for(
        &self,
        id: ConnId,
        reason: RejectReason,
        ari_len: u8,
        ari: [u8; rej::ARI_LEN],
        private_data: [u8; rej::PRIVATE_DATA_LEN],
    ) -> RejRepr {
        let (state, remote_comm_id) = self
            .conns
            .get(&id)
            .map_or((CmState::Timewait, 0), |c| (c.state, c.remote_comm_id));
        let (local_comm_id, message_rejected) = match state {
            CmState::ReqRcvd => (0, MsgResponse::Req),
            CmState::MraReqSent => (id.0, MsgResponse::Req),
            CmState::RepRcvd | CmState::MraRepSent => (id.0, MsgResponse::Rep),
            _ => (id.0, MsgResponse::Other),
        };
        RejRepr {
            local_comm_id,
            remote_comm_id,
            message_rejected,
            reason,
            ari_len,
            ari,
            private_data,
        }
    }

    /// Sends the RTU (active side) and reports the connection up.
    pub(crate) fn send_rtu(&mut self, id: ConnId, private_data: [u8; rtu::PRIVATE_DATA_LEN]) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let msg = CmMessage::Rtu(RtuRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            private_data,
        });
        let mad = self.send_msg(id, msg);
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::Established;
            c.answer = Some(mad);
        }
        self.events.push_back(CmEvent::Established {
            conn: id,
            private_data: [0; rtu::PRIVATE_DATA_LEN],
        });
    }

    /// Passive side: RTU (or data) arrived.
    pub(crate) fn establish_passive(
        &mut self,
        id: ConnId,
        private_data: [u8; rtu::PRIVATE_DATA_LEN],
    ) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::Established;
            c.retx = None;
        }
        self.events.push_back(CmEvent::Established {
            conn: id,
            private_data,
        });
    }

    /// Sends a DREQ in a new transaction and waits for the DREP.
    pub(crate) fn send_dreq(
        &mut self,
        now: Instant,
        id: ConnId,
        private_data: [u8; dreq::PRIVATE_DATA_LEN],
    ) {
        let tid = self.tid_for(id);
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = CmState::DreqSent;
        c.tid = tid;
        let msg = CmMessage::Dreq(DreqRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            private_data,
        });
        let mad = self.send_msg(id, msg);
        self.arm(now, id, mad);
    }

    /// Sends a DREP in the DREQ's transaction.
    pub(crate) fn send_drep(&mut self, id: ConnId, private_data: [u8; drep::PRIVATE_DATA_LEN]) {
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        let msg = CmMessage::Drep(DrepRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_comm_id,
            private_data,
        });
        let mad = self.send_msg(id, msg);
        if let Some(c) = self.conns.get_mut(&id) {
            c.answer = Some(mad);
        }
    }

    /// Time-wait: nothing outstanding; the handle ends when it runs out.
    /// A connection in time-wait leaves the remote-QPN table, as the
    /// kernel's `cm_enter_timewait` takes it out: a new REQ (a new
    /// communication ID) from the same QP is then a new connection, not a
    /// stale one. It stays in the remote-ID table, so that a late repeat
    /// of the old REQ still gets REJ Stale connection (the kernel drops
    /// that entry too and would take the repeat for a new request).
    pub(crate) fn enter_timewait(&mut self, now: Instant, id: ConnId) {
        let end = now.add(self.cfg.time_wait);
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::Timewait;
            c.retx = None;
            c.timewait_end = Some(end);
            let k = (c.remote_ca_guid, c.remote_qpn.get());
            if c.keyed && self.by_remote_qpn.get(&k) == Some(&id) {
                self.by_remote_qpn.remove(&k);
            }
        }
    }

    /// Removes a connection's entries from the peer-keyed tables.
    fn unkey(&mut self, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if !core::mem::replace(&mut c.keyed, false) {
            return;
        }
        let k = (c.remote_ca_guid, c.remote_comm_id);
        if self.by_remote_id.get(&k) == Some(&id) {
            self.by_remote_id.remove(&k);
        }
        let k = (c.remote_ca_guid, c.remote_qpn.get());
        if self.by_remote_qpn.get(&k) == Some(&id) {
            self.by_remote_qpn.remove(&k);
        }
    }

    /// Records the peer's keys of a connection that now knows them.
    pub(crate) fn key(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.keyed = true;
            self.by_remote_id
                .insert((c.remote_ca_guid, c.remote_comm_id), id);
            self.by_remote_qpn
                .insert((c.remote_ca_guid, c.remote_qpn.get()), id);
        }
    }

    /// Frees a handle and its table entries.
    pub(crate) fn free(&mut self, id: ConnId) {
        self.unkey(id);
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        match c.state {
            CmState::Listen => {
                self.listeners.remove(&c.service_id);
            }
            CmState::SidrReqRcvd => {
                self.sidr_by_remote.remove(&(c.peer, c.remote_comm_id));
            }
            _ => {}
        }
    }
}
