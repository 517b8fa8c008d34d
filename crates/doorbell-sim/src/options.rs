//! What a simulated run does besides measuring: a capture of its frames and
//! a progress callback ([`crate::Workload::run_with`]).

use std::sync::Arc;

/// Told `(done, of)` operations of a run as it goes.
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// What a run does besides measuring ([`Workload::run_with`]).
#[derive(Default)]
pub struct RunOptions {
    /// Where the measured run's frames are written (interface 0 the
    /// client's NIC, 1 the server's), at virtual time.
    pub capture: Option<doorbell_pcap::Capture>,
    /// Told how many operations are done, now and then (every few thousand
    /// events), while the measured run goes.
    pub progress: Option<Progress>,
}
