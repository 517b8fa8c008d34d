//! One connection (or listener, or SIDR exchange) as the agent keeps it.

use doorbell_cm::MAD_LEN;
use doorbell_types::{Duration, Instant, Qpn};

use crate::params::QpType;
use crate::peer::Peer;

/// The agent's handle for a connection, a listener or a SIDR exchange.
///
/// For connections and SIDR requests it is also the local communication
/// ID (or request ID) on the wire, so it is unique among the agent's live
/// handles and never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub(crate) u32);

impl ConnId {
    /// The local communication ID (or SIDR request ID) this handle sends.
    pub const fn comm_id(self) -> u32 {
        self.0
    }
}

/// The CM states of IBA Vol 1 chapter 12 (the kernel's `enum ib_cm_state`),
/// without IDLE: a handle that goes back to idle is freed (see
/// [`crate::CmAgent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Waiting for REQs and SIDR_REQs to one service ID.
    Listen,
    /// REQ sent, waiting for REP (or REJ, or MRA).
    ReqSent,
    /// The peer sent MRA for our REQ: waiting longer.
    MraReqRcvd,
    /// REQ received and reported; the upper layer has not answered.
    ReqRcvd,
    /// REQ received; we sent MRA and the upper layer has not answered.
    MraReqSent,
    /// REP sent, waiting for RTU.
    RepSent,
    /// The peer sent MRA for our REP: waiting longer.
    MraRepRcvd,
    /// REP received and reported; RTU not sent yet.
    RepRcvd,
    /// REP received; we sent MRA and RTU is not sent yet.
    MraRepSent,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received and reported; DREP not sent yet.
    DreqRcvd,
    /// Disconnected; waiting for stray packets to drain before the QP may
    /// be reused.
    Timewait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received and reported; the upper layer has not answered.
    SidrReqRcvd,
}

/// A MAD waiting for its answer, sent again when the wait runs out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retx {
    /// The MAD as sent.
    pub(crate) mad: [u8; MAD_LEN],
    /// When to send it again (or give up).
    pub(crate) deadline: Instant,
    /// Sends left after this one.
    pub(crate) retries_left: u8,
    /// The wait after each send.
    pub(crate) wait: Duration,
}

/// Everything the agent keeps for one handle.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub(crate) state: CmState,
    /// The far end (unused by listeners).
    pub(crate) peer: Peer,
    pub(crate) service_id: u64,
    /// Transaction ID of the exchange this side answers or started.
    pub(crate) tid: u64,
    /// The peer's communication ID (SIDR: request ID); 0 while unknown.
    pub(crate) remote_comm_id: u32,
    /// The peer's CA GUID; 0 while unknown.
    pub(crate) remote_ca_guid: u64,
    pub(crate) local_qpn: Qpn,
    pub(crate) remote_qpn: Qpn,
    pub(crate) qp_type: QpType,
    /// True for the side that sent the REQ.
    pub(crate) active: bool,
    pub(crate) auto_rtu: bool,
    /// Wait before sending REQ/REP/DREQ again.
    pub(crate) wait: Duration,
    pub(crate) max_cm_retries: u8,
    /// The service timeout of the MRA this side sent, if any.
    pub(crate) service_timeout: u8,
    /// The message waiting for an answer.
    pub(crate) retx: Option<Retx>,
    /// The last answer this side sent (MRA, REP, RTU), sent again when the
    /// peer repeats the message it answered.
    pub(crate) answer: Option<[u8; MAD_LEN]>,
    /// When time-wait ends.
    pub(crate) timewait_end: Option<Instant>,
    /// The remote (CA GUID, comm ID) and (CA GUID, QPN) keys are in the
    /// agent's tables.
    pub(crate) keyed: bool,
    /// The upper layer destroyed the handle: it stays in time-wait to
    /// answer stale and repeated MADs, and ends without an event.
    pub(crate) destroyed: bool,
}

impl Conn {
    /// A handle in `state` for `peer`, with nothing learnt yet.
    pub(crate) fn new(state: CmState, peer: Peer, service_id: u64) -> Self {
        Self {
            state,
            peer,
            service_id,
            tid: 0,
            remote_comm_id: 0,
            remote_ca_guid: 0,
            local_qpn: Qpn::new(0),
            remote_qpn: Qpn::new(0),
            qp_type: QpType::Rc,
            active: false,
            auto_rtu: true,
            wait: Duration::ZERO,
            max_cm_retries: 0,
            service_timeout: 0,
            retx: None,
            answer: None,
            timewait_end: None,
            keyed: false,
            destroyed: false,
        }
    }

    /// The earliest deadline of this handle.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        match (self.retx.map(|r| r.deadline), self.timewait_end) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
