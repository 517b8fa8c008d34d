//! What the upper layer passes with its requests: REQ, REP and SIDR_REQ
//! parameters, and the CM's time unit.

use doorbell_cm::{PathRepr, TransportServiceType};
use doorbell_types::{Duration, Psn, Qpn};

/// The CM's time unit: 4.096 µs · 2^`exponent` (IBA Vol 1 chapter 12, the
/// encoding of the CM response timeout, service timeout and packet
/// lifetime). Exponents above 31 count as 31, the largest a 5-bit field
/// holds.
///
/// The kernel rounds this to milliseconds (`cm_convert_to_ms`); the agent
/// keeps it exact, in picoseconds.
pub const fn cm_timeout(exponent: u8) -> Duration {
    let e = if exponent > 31 { 31 } else { exponent };
    Duration::from_ns(4096u64 << e)
}

/// The QP types a REQ can set up here (the REQ's transport service type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
}

impl QpType {
    /// The REQ's code for this type.
    pub const fn transport_service_type(self) -> TransportServiceType {
        match self {
            QpType::Rc => TransportServiceType::Rc,
            QpType::Uc => TransportServiceType::Uc,
        }
    }

    /// The type a REQ asks for, if it is one the agent sets up (RD and XRC
    /// are not).
    pub fn from_transport_service_type(t: TransportServiceType) -> Option<Self> {
        match t {
            TransportServiceType::Rc => Some(QpType::Rc),
            TransportServiceType::Uc => Some(QpType::Uc),
            _ => None,
        }
    }
}

/// What `connect` puts in the REQ, and how long it waits for an answer
/// (the kernel's `struct ib_cm_req_param`, without the alternate path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqParams {
    /// The local QP being connected.
    pub local_qpn: Qpn,
    /// The first PSN the local QP sends.
    pub starting_psn: Psn,
    /// RC or UC.
    pub qp_type: QpType,
    /// RDMA READ/atomic requests the local QP accepts as responder.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the local QP issues at once.
    pub initiator_depth: u8,
    /// Transport retry count, 0–7.
    pub retry_count: u8,
    /// RNR retry count, 0–7 (7: for ever).
    pub rnr_retry_count: u8,
    /// Path MTU code, 1 (256) to 5 (4096).
    pub path_mtu: u8,
    /// Partition key.
    pub pkey: u16,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The local QP uses an SRQ.
    pub srq: bool,
    /// The primary path (on RoCE: the two GIDs, traffic class, hop limit,
    /// flow label); sent as is.
    pub primary_path: PathRepr,
    /// How long the peer may take to answer, as a [`cm_timeout`] exponent
    /// (rdma_cm: 20). The REQ is sent again after this plus twice the
    /// packet lifetime.
    pub remote_cm_response_timeout: u8,
    /// How long the local side takes to answer (rdma_cm: 20); the peer
    /// waits this long for the RTU before it sends its REP again.
    pub local_cm_response_timeout: u8,
    /// Times the REQ (and later the DREQ) is sent again before the agent
    /// gives up, 0–15 (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Send the RTU as soon as the REP arrives (what rdma_cm does once it
    /// has moved the QP to RTS). With `false` the agent reports the REP and
    /// waits for [`crate::CmAgent::establish`].
    pub auto_rtu: bool,
}

/// What `accept` puts in the REP (the kernel's `struct ib_cm_rep_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepParams {
    /// The local QP being connected.
    pub local_qpn: Qpn,
    /// The first PSN the local QP sends.
    pub starting_psn: Psn,
    /// RDMA READ/atomic requests the local QP accepts as responder.
    pub responder_resources: u8,
    /// RDMA READ/atomic requests the local QP issues at once.
    pub initiator_depth: u8,
    /// Target ACK delay exponent, 0–31.
    pub target_ack_delay: u8,
    /// Failover accepted (0 accepted, 1 not supported, 2 rejected).
    pub failover_accepted: u8,
    /// RNR retry count the peer should use, 0–7.
    pub rnr_retry_count: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// The local QP uses an SRQ.
    pub srq: bool,
}

/// What `sidr_request` puts in the SIDR_REQ and how long it waits (the
/// kernel's `struct ib_cm_sidr_req_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrReqParams {
    /// Partition key.
    pub pkey: u16,
    /// Wait for the SIDR_REP, as a [`cm_timeout`] exponent.
    pub response_timeout: u8,
    /// Times the SIDR_REQ is sent again before the agent gives up, 0–15.
    pub max_cm_retries: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_timeout_is_4096_ns_doubled_and_saturates_at_31() {
        assert_eq!(cm_timeout(0), Duration::from_ns(4096));
        assert_eq!(cm_timeout(1), Duration::from_ns(8192));
        // rdma_cm's CMA_CM_RESPONSE_TIMEOUT: about 4.29 s.
        assert_eq!(cm_timeout(20), Duration::from_ns(4_294_967_296));
        assert_eq!(cm_timeout(31), Duration::from_ns(4096 << 31));
        assert_eq!(cm_timeout(32), cm_timeout(31));
        assert_eq!(cm_timeout(255), cm_timeout(31));
    }

    #[test]
    fn only_rc_and_uc_are_set_up() {
        for t in [QpType::Rc, QpType::Uc] {
            assert_eq!(
                QpType::from_transport_service_type(t.transport_service_type()),
                Some(t)
            );
        }
        assert_eq!(
            QpType::from_transport_service_type(TransportServiceType::Rd),
            None
        );
        assert_eq!(
            QpType::from_transport_service_type(TransportServiceType::Extended),
            None
        );
    }
}
