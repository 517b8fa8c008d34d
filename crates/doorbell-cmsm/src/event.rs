//! What the agent reports to the upper layer (rdma_cm's events).

use doorbell_cm::{
    MsgResponse, PathRepr, RejectReason, SidrStatus, drep, rej, rep, req, rtu, sidr,
};
use doorbell_types::{Psn, Qpn};

use crate::conn::ConnId;
use crate::params::QpType;
use crate::peer::Peer;

/// A REQ as the passive side sees it: the peer's values, with responder
/// resources and initiator depth already swapped into the local point of
/// view, as the kernel's `cm_format_req_event` does (the peer's initiator
/// depth is what the local QP must accept as responder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqReceived {
    /// The service ID asked for.
    pub service_id: u64,
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The peer's QP.
    pub remote_qpn: Qpn,
    /// The first PSN the peer sends (the local QP's expected receive PSN).
    pub starting_psn: Psn,
    /// RC or UC.
    pub qp_type: QpType,
    /// Local responder resources: the REQ's initiator depth.
    pub responder_resources: u8,
    /// Local initiator depth: the REQ's responder resources.
    pub initiator_depth: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// Path MTU code.
    pub path_mtu: u8,
    /// Partition key.
    pub pkey: u16,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The peer's QP uses an SRQ.
    pub srq: bool,
    /// The primary path as the peer wrote it (its "local" GID is ours to
    /// send to).
    pub primary_path: PathRepr,
    /// The private data, all 92 bytes (rdma_cm's header comes first).
    pub private_data: [u8; req::PRIVATE_DATA_LEN],
}

/// A REP as the active side sees it, resources swapped as the kernel's
/// `cm_format_rep_event` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepReceived {
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The peer's QP.
    pub remote_qpn: Qpn,
    /// The first PSN the peer sends.
    pub starting_psn: Psn,
    /// Local responder resources: the REP's initiator depth.
    pub responder_resources: u8,
    /// Local initiator depth: the REP's responder resources.
    pub initiator_depth: u8,
    /// Target ACK delay exponent.
    pub target_ack_delay: u8,
    /// Failover accepted.
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// RNR retry count the local QP should use.
    pub rnr_retry_count: u8,
    /// The peer's QP uses an SRQ.
    pub srq: bool,
    /// The private data, all 196 bytes.
    pub private_data: [u8; rep::PRIVATE_DATA_LEN],
}

/// Which message went unanswered after every retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimedOut {
    /// Our REQ: no REP, REJ or MRA came (the kernel's IB_CM_REQ_ERROR).
    Req,
    /// Our REP: no RTU came (IB_CM_REP_ERROR).
    Rep,
    /// Our SIDR_REQ: no SIDR_REP came (IB_CM_SIDR_REQ_ERROR).
    SidrReq,
}

/// An event for the upper layer, from [`crate::CmAgent::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service listened on: a new passive handle in REQ_RCVD.
    /// Answer with `accept`, `reject` or `send_mra`.
    ConnectRequest {
        /// The new handle.
        conn: ConnId,
        /// The listener it came to.
        listen: ConnId,
        /// Where it came from.
        peer: Peer,
        /// Its parameters.
        req: ReqReceived,
    },
    /// The REP to our REQ (rdma_cm's CONNECT_RESPONSE). With `auto_rtu`
    /// the RTU is already sent and [`CmEvent::Established`] follows.
    ConnectResponse {
        /// The handle.
        conn: ConnId,
        /// The REP's parameters.
        rep: RepReceived,
    },
    /// The connection is up: the RTU arrived (passive), was sent (active),
    /// or the upper layer saw data first (`notify_established`).
    Established {
        /// The handle.
        conn: ConnId,
        /// The RTU's private data (zero when none arrived).
        private_data: [u8; rtu::PRIVATE_DATA_LEN],
    },
    /// The peer sent REJ. The handle is freed unless `timewait` says it
    /// went to time-wait (a REJ after REP, or for a stale connection), in
    /// which case [`CmEvent::TimewaitExit`] ends it.
    Rejected {
        /// The handle.
        conn: ConnId,
        /// The reason (28, consumer defined, for `rdma_reject`).
        reason: RejectReason,
        /// The message the peer rejected.
        message: MsgResponse,
        /// Bytes of `ari` that carry information.
        ari_len: u8,
        /// Additional rejection information.
        ari: [u8; rej::ARI_LEN],
        /// The private data, all 148 bytes.
        private_data: [u8; rej::PRIVATE_DATA_LEN],
        /// The handle went to time-wait instead of being freed.
        timewait: bool,
    },
    /// A message went unanswered after every retry (rdma_cm's UNREACHABLE,
    /// status -ETIMEDOUT). The handle is freed.
    Unreachable {
        /// The handle.
        conn: ConnId,
        /// The message that timed out.
        message: TimedOut,
    },
    /// The connection is going down (rdma_cm's DISCONNECTED): a DREQ
    /// arrived (answer with `disconnect`, which sends the DREP), our DREQ
    /// was answered, or it went unanswered (`timed_out`).
    Disconnected {
        /// The handle.
        conn: ConnId,
        /// The DREQ's private data (its 220 bytes, then zeros) or the
        /// DREP's (224 bytes); zero when none arrived.
        private_data: [u8; drep::PRIVATE_DATA_LEN],
        /// Our DREQ went unanswered after every retry.
        timed_out: bool,
    },
    /// Time-wait is over; the handle is freed (rdma_cm's TIMEWAIT_EXIT).
    TimewaitExit {
        /// The handle.
        conn: ConnId,
    },
    /// A SIDR_REQ for a service listened on: a new handle in
    /// SIDR_REQ_RCVD; answer with `sidr_reply`.
    SidrRequest {
        /// The new handle.
        conn: ConnId,
        /// The listener it came to.
        listen: ConnId,
        /// Where it came from.
        peer: Peer,
        /// The service ID asked for.
        service_id: u64,
        /// Partition key.
        pkey: u16,
        /// The private data, all 216 bytes.
        private_data: [u8; sidr::REQ_PRIVATE_DATA_LEN],
    },
    /// The SIDR_REP to our SIDR_REQ. The handle is freed.
    SidrReply {
        /// The handle.
        conn: ConnId,
        /// Status (0 success, 1 no such service, ...).
        status: SidrStatus,
        /// The QP serving the service.
        qpn: Qpn,
        /// Its Q_Key.
        qkey: u32,
        /// The private data, all 136 bytes.
        private_data: [u8; sidr::REP_PRIVATE_DATA_LEN],
    },
}
