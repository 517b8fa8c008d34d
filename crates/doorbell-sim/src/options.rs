//! What a simulated run does besides measuring: a capture of its frames,
//! a progress callback and a timeline ([`crate::Workload::run_with`]).

use std::sync::Arc;

/// Told `(done, of)` operations of a run as it goes.
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// What a run does besides measuring ([`Workload::run_with`](crate::Workload::run_with)).
#[derive(Default)]
pub struct RunOptions {
    /// Where the measured run's frames are written (interface 0 the
    /// client's NIC, 1 the server's), at virtual time.
    pub capture: Option<doorbell_pcap::Capture>,
    /// Told how many operations are done, now and then (every few thousand
    /// events), while the measured run goes.
    pub progress: Option<Progress>,
    /// Record the measured run's timeline ([`Outcome::trace`]).
    pub trace: bool,
}

/// What [`crate::Workload::run_with`] returns.
#[derive(Debug)]
pub struct Outcome {
    /// The measurements.
    pub report: crate::Report,
    /// The measured run's timeline, if [`RunOptions::trace`] asked for it:
    /// a track per CPU core, PCIe direction, NIC processing unit and DMA
    /// engine of each host and per wire direction, and each work
    /// request's steps 0 to 5 as a span with its QP and WR id.
    pub trace: Option<doorbell_trace::Trace>,
}
