//! What an engine reports when a QP cannot go on.

use doorbell_layout::cqe::Syndrome;
use doorbell_layout::wqe::WqeOpcode;

/// A fault that moves a QP to the error state. Engines return it and stop;
/// the NIC turns it into error completions, the QP's move to ERR with an
/// async event, and the flush of both queues (`complete::fault`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Fault {
    /// Send WQE `index` failed with `syndrome`: what was posted before it
    /// is flushed first, then it completes with the error.
    Wqe {
        index: u16,
        opcode: WqeOpcode,
        syndrome: Syndrome,
    },
    /// The oldest outstanding message failed with this syndrome (a NAK, or
    /// retries exhausted); with none outstanding, the QP just goes to ERR.
    Head(Syndrome),
    /// The QP goes to ERR with no error completion of its own (a responder
    /// error, whose completion, if any, the engine wrote).
    Qp,
}

/// An engine's outcome: done, or a fault to act on.
pub(crate) type Outcome<T = ()> = Result<T, Fault>;
