//! The virtual-time runtime of doorbell (work in progress).
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod profile;
pub mod queue;
pub mod workload;
mod world;

pub use profile::Profile;
pub use workload::{Latency, Op, PerPost, Report, SimError, Steps, Utilisation, Workload};
pub use world::LogLine;
