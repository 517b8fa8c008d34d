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
    /// A protocol this provider does not speak (EPROTONOSUPPORT).
    #[error("protocol not supported: {0}")]
    Protocol(&'static str),
    /// A resource of the context ran out (ENOSPC), as the dynamic UAR
    /// pages do.
    #[error("no space left: {0}")]
    NoSpace(&'static str),
    /// An allocator had no memory to give (ENOMEM).
    #[error("out of memory: {0}")]
    NoMemory(&'static str),
    /// The device cannot do this (EOPNOTSUPP).
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    /// The object is in use (EBUSY).
    #[error("busy: {0}")]
    Busy(&'static str),
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

impl VerbsError {
    /// The errno rdma-core and the kernel answer for this failure, so the C
    /// library and Rust callers report the same thing.
    pub fn errno(&self) -> i32 {
        match self {
            VerbsError::Driver(d) => driver_errno(d),
            VerbsError::Memory(m) => mem_errno(m),
            VerbsError::BadEnv { .. }
            | VerbsError::InvalidArgument(_)
            | VerbsError::BadQpState { .. }
            | VerbsError::OutOfRange { .. } => libc::EINVAL,
            // mlx5's post_send answers ENOMEM for a full queue and for
            // inline data over max_inline_data.
            VerbsError::QueueFull { .. } | VerbsError::InlineTooLong { .. } => libc::ENOMEM,
            VerbsError::Busy(_) => libc::EBUSY,
            VerbsError::NoSpace(_) => libc::ENOSPC,
            VerbsError::NoMemory(_) => libc::ENOMEM,
            VerbsError::NotSupported(_) => libc::EOPNOTSUPP,
            VerbsError::Protocol(_) => libc::EPROTONOSUPPORT,
        }
    }
}

fn driver_errno(e: &DriverError) -> i32 {
    match e {
        DriverError::Command(c) => match c {
            CmdError::Exhausted(_) => libc::ENOMEM,
            CmdError::Busy { .. } => libc::EBUSY,
            CmdError::DeviceGone => libc::EIO,
            _ => libc::EINVAL,
        },
        DriverError::Memory(m) => mem_errno(m),
        DriverError::Protocol => libc::EIO,
        _ => libc::EINVAL,
    }
}

fn mem_errno(e: &MemError) -> i32 {
    match e {
        // The kernel's pin of an unmapped range.
        MemError::Unmapped { .. } => libc::EFAULT,
        MemError::Pinned(..) => libc::EBUSY,
        MemError::BadSize(_) => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}
