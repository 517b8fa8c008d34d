//! Asynchronous events the device raises for host software (the EQEs of
//! mlx5's event queues, as the driver decodes them).

use doorbell_types::{Cqn, Qpn, Srqn};

/// An asynchronous event of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicEvent {
    /// An armed CQ got a completion.
    Completion(Cqn),
    /// A CQ overflowed; CQEs were lost.
    CqError(Cqn),
    /// A QP moved to the error state by itself.
    QpFatal(Qpn),
    /// An armed SRQ holds fewer posted WQEs than its limit
    /// (IBV_EVENT_SRQ_LIMIT_REACHED); it is disarmed until armed again.
    SrqLimit(Srqn),
    /// A QP with an SRQ is in the error state and will take no more WQEs
    /// from it (IBV_EVENT_QP_LAST_WQE_REACHED): its own WQEs are flushed.
    QpLastWqeReached(Qpn),
    /// The port's link went down (IBV_EVENT_PORT_ERR).
    PortDown(u8),
    /// The port's link came up (IBV_EVENT_PORT_ACTIVE).
    PortUp(u8),
}
