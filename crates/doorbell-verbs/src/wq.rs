//! The work-queue bookkeeping that a QP and the CQs it completes into
//! share: which WR each WQE came from, and how far each queue has retired.

use std::sync::Mutex;

use doorbell_types::Qpn;

pub(crate) struct SqState {
    /// Free-running producer counter in WQEBBs.
    pub(crate) cur_post: u16,
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) wrid: Vec<u64>,
    pub(crate) wqe_head: Vec<u32>,
}

pub(crate) struct RqState {
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) wrid: Vec<u64>,
}

/// The part of a QP that poll_cq needs.
pub(crate) struct QpShared {
    pub(crate) qpn: Qpn,
    pub(crate) sq: Mutex<SqState>,
    pub(crate) rq: Mutex<RqState>,
    pub(crate) sq_wqe_cnt: u32,
    pub(crate) rq_wqe_cnt: u32,
}

impl QpShared {
    /// Retires send WQEs up to the one at `wqe_counter`; returns its wr_id.
    pub(crate) fn complete_send(&self, wqe_counter: u16) -> (u64, u32) {
        let mut sq = self.sq.lock().unwrap_or_else(|e| e.into_inner());
        let idx = (u32::from(wqe_counter) & (self.sq_wqe_cnt - 1)) as usize;
        sq.tail = sq.wqe_head[idx].wrapping_add(1);
        (sq.wrid[idx], sq.tail)
    }

    /// Retires the receive WQE at `wqe_counter`; returns its wr_id.
    pub(crate) fn complete_recv(&self, wqe_counter: u16) -> u64 {
        let mut rq = self.rq.lock().unwrap_or_else(|e| e.into_inner());
        let idx = (u32::from(wqe_counter) & (self.rq_wqe_cnt - 1)) as usize;
        rq.tail = rq.tail.wrapping_add(1);
        rq.wrid[idx]
    }
}
