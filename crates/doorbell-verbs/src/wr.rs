//! Work-request types that both receive queues take: a QP's own and a
//! shared one (`ibv_recv_wr`), and the error of a post that failed
//! part-way.

use crate::error::VerbsError;
use crate::mr::Sge;

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where data lands.
    pub sg_list: &'a [Sge],
}

/// A post that failed part-way: the WR at `index` failed with `error`; those
/// before it were posted, it and those after were not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostError {
    /// Index of the failing WR in the list.
    pub index: usize,
    /// Why it failed.
    pub error: VerbsError,
}
