//! Asynchronous events the device raises for host software (the EQEs of
//! mlx5's event queues, as the driver decodes them).

use doorbell_types::{Cqn, Qpn};

/// An asynchronous event of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicEvent {
    /// An armed CQ got a completion.
    Completion(Cqn),
    /// A CQ overflowed; CQEs were lost.
    CqError(Cqn),
    /// A QP moved to the error state by itself.
    QpFatal(Qpn),
}
