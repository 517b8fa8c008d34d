//! Why a local request was refused.

use crate::conn::{CmState, ConnId};

/// A local request the agent refused. Nothing was sent and nothing changed;
/// none is fatal to the agent or to other handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// The handle is not (or no longer) one of the agent's.
    #[error("unknown CM handle {0:?}")]
    UnknownConn(ConnId),
    /// The request does not apply in the handle's state (accepting a
    /// connection already established, disconnecting one not up, ...).
    #[error("{conn:?} is in state {state:?}")]
    InvalidState {
        /// The handle.
        conn: ConnId,
        /// Its state.
        state: CmState,
    },
    /// Another handle already listens on the service ID.
    #[error("service ID {0:#018x} is already listened on")]
    ServiceIdInUse(u64),
    /// More private data than the message carries.
    #[error("{len} bytes of private data, at most {max} fit")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes the message holds.
        max: usize,
    },
    /// A parameter outside its field's range.
    #[error("{name} = {value} is out of range")]
    ParamOutOfRange {
        /// The parameter.
        name: &'static str,
        /// Its value.
        value: u32,
    },
}
