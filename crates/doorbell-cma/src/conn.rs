//! What connecting carries: the parameters of `rdma_connect` and
//! `rdma_accept` (`struct rdma_conn_param`), what the id learns of its peer,
//! and the QP attributes the connection gives (the kernel's
//! `ib_cm_init_qp_attr` for RTR and RTS).

/// rdma_cm's CM response timeout exponent (`CMA_CM_RESPONSE_TIMEOUT`).
const CM_RESPONSE_TIMEOUT: u8 = 20;
/// rdma_cm's CM retries (`CMA_MAX_CM_RETRIES`).
const MAX_CM_RETRIES: u8 = 15;
/// `rdma_connect`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// Private data for the peer, at most 56 bytes (rdma_cm's IP header
    /// takes the rest of the REQ's 92).
    pub private_data: Vec<u8>,
    /// RDMA READ/atomic requests the local QP accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the local QP sends at once.
    pub initiator_depth: u8,
    /// Transport retries, 0–7.
    pub retry_count: u8,
    /// RNR retries, 0–7 (7: for ever).
    pub rnr_retry_count: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The QP's number, for an id without a QP of its own.
    pub qp_num: Option<u32>,
    /// It uses an SRQ.
    pub srq: bool,
    /// How long the peer's CM may take to answer, as a CM timeout exponent
    /// (4.096 µs · 2^n), and how long ours takes: rdma_cm's 20 (about
    /// 4.3 s) unless a Rust caller wants its set-up to notice losses
    /// sooner. Capped at 31.
    pub cm_response_timeout: u8,
    /// Times a MAD is sent again before the CM gives up, 0–15 (rdma_cm's
    /// 15).
    pub max_cm_retries: u8,
}

impl Default for ConnectParams {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            flow_control: true,
            qp_num: None,
            srq: false,
            cm_response_timeout: CM_RESPONSE_TIMEOUT,
            max_cm_retries: MAX_CM_RETRIES,
        }
    }
}

/// `rdma_accept`'s parameters (by default: none of the peer's READs, 7
/// RNR retries, flow control, no private data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// Private data for the peer, at most 196 bytes.
    pub private_data: Vec<u8>,
    /// RDMA READ/atomic requests the local QP accepts.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the local QP sends at once.
    pub initiator_depth: u8,
    /// RNR retries the peer should use, 0–7.
    pub rnr_retry_count: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The QP's number, for an id without a QP of its own.
    pub qp_num: Option<u32>,
    /// It uses an SRQ.
    pub srq: bool,
}

impl Default for AcceptParams {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            responder_resources: 0,
            initiator_depth: 0,
            rnr_retry_count: 7,
            flow_control: true,
            qp_num: None,
            srq: false,
        }
    }
}

/// What an id knows of its peer once the REQ or REP came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Remote {
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
    pub(crate) retry_count: u8,
    pub(crate) rnr_retry_count: u8,
    pub(crate) path_mtu: u8,
    pub(crate) dgid: [u8; 16],
    /// The local ACK timeout the REQ's primary path asks for (the passive
    /// side's QP takes it unless the program set its own).
    pub(crate) ack_timeout: Option<u8>,
}

/// The attributes that move a connected QP to RTR and RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnAttrs {
    /// `enum ibv_mtu` code of the path MTU.
    pub path_mtu: u8,
    /// The peer's QP.
    pub dest_qpn: u32,
    /// The first PSN the peer sends.
    pub rq_psn: u32,
    /// The first PSN the local QP sends.
    pub sq_psn: u32,
    /// READ/atomic requests the local QP accepts.
    pub max_dest_rd_atomic: u8,
    /// READ/atomic requests the local QP sends at once.
    pub max_rd_atomic: u8,
    /// The RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// The local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// The peer's GID.
    pub dgid: [u8; 16],
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Access rights at RTR: remote writes, and reads and atomics when the
    /// QP accepts any (IBV_ACCESS_* bits).
    pub access: u32,
}

/// `enum ibv_mtu` of a size in bytes.
pub(crate) fn mtu_code(bytes: u32) -> u8 {
    match bytes {
        0..=256 => 1,
        257..=512 => 2,
        513..=1024 => 3,
        1025..=2048 => 4,
        _ => 5,
    }
}

impl ConnAttrs {
    /// The path MTU in bytes.
    pub fn mtu_bytes(&self) -> u32 {
        128 << self.path_mtu.clamp(1, 5)
    }

    /// The attributes of INIT → RTR.
    pub fn rtr(&self) -> doorbell_verbs::QpAttrs {
        doorbell_verbs::QpAttrs {
            access: Some(doorbell_verbs::Access(self.access)),
            av: Some(doorbell_verbs::AddressVector {
                dgid: self.dgid,
                sgid_index: 0,
                hop_limit: self.hop_limit,
                traffic_class: self.traffic_class,
                sl: 0,
            }),
            path_mtu: Some(self.mtu_bytes()),
            dest_qpn: Some(doorbell_types::Qpn::new(self.dest_qpn)),
            rq_psn: Some(doorbell_types::Psn::new(self.rq_psn)),
            max_dest_rd_atomic: Some(self.max_dest_rd_atomic),
            min_rnr_timer: Some(self.min_rnr_timer),
            ..Default::default()
        }
    }

    /// The attributes of RTR → RTS.
    pub fn rts(&self) -> doorbell_verbs::QpAttrs {
        doorbell_verbs::QpAttrs {
            sq_psn: Some(doorbell_types::Psn::new(self.sq_psn)),
            timeout: Some(self.timeout),
            retry_cnt: Some(self.retry_count),
            rnr_retry: Some(self.rnr_retry_count),
            max_rd_atomic: Some(self.max_rd_atomic),
            ..Default::default()
        }
    }
}
