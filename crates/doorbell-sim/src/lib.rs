//! The virtual-time runtime of doorbell (work in progress).
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod queue;
