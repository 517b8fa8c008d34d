//! The state of an `ibv_wr_*` batch: the WRs built between `ibv_wr_start`
//! and `ibv_wr_complete`. Below both `qp` (which keeps one per QP) and
//! `qp_ex` (which builds and posts it).

use core::ffi::c_int;

use doorbell_verbs::{SendFlags, Sge, UdTarget, WrOpcode};

/// One WR being built.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) wr_id: u64,
    pub(crate) flags: SendFlags,
    pub(crate) op: WrOpcode,
    pub(crate) sges: Vec<Sge>,
    /// Inline data set by `ibv_wr_set_inline_data*`, already staged.
    pub(crate) inline: Option<Sge>,
    pub(crate) ud: Option<UdTarget>,
}

/// The batch between `ibv_wr_start` and `ibv_wr_complete`.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) open: bool,
    pub(crate) wrs: Vec<Pending>,
    /// The first misuse, reported by `ibv_wr_complete`.
    pub(crate) error: Option<c_int>,
}
