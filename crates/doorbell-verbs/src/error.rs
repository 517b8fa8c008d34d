//! The errors of the verbs API.

use doorbell_driver::DriverError;
use doorbell_hif::{CmdError, QpState};
use doorbell_host::MemError;

/// Errors of the verbs API. Each maps to the errno rdma-core would return.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// The slow path failed (EINVAL, ENOMEM, EBUSY from the kernel).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// Host memory could not be allocated or accessed.
    #[error(transparent)]
    Memory(#[from] MemError),
    /// An `MLX5_*` environment variable has a value the provider refuses.
    #[error("environment variable {name}={value:?} is out of range")]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// An argument is out of range (EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The work queue is full (ENOMEM from post_send / post_recv).
    #[error("work queue full: {posted} posted, room for {max}")]
    QueueFull {
        /// WRs outstanding.
        posted: u32,
        /// Capacity.
        max: u32,
    },
    /// Inline data longer than the QP's max_inline_data (ENOMEM).
    #[error("inline data of {len} bytes exceeds max_inline_data {max}")]
    InlineTooLong {
        /// Bytes asked for.
        len: usize,
        /// The QP's limit.
        max: usize,
    },
    /// The QP is not in a state that allows this post (EINVAL).
    #[error("QP {qpn:#x} is in state {state:?}")]
    BadQpState {
        /// The QP.
        qpn: u32,
        /// Its state.
        state: QpState,
    },
    /// A range outside a memory region.
    #[error("range {offset}+{len} is outside the {size}-byte region")]
    OutOfRange {
        /// Start offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Region size.
        size: u64,
    },
}

impl From<CmdError> for VerbsError {
    fn from(e: CmdError) -> Self {
        VerbsError::Driver(DriverError::Command(e))
    }
}
