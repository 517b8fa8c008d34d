//! Work requests on their way from C: the state of an `ibv_wr_*` batch
//! (the WRs built between `ibv_wr_start` and `ibv_wr_complete`), and C's
//! SGE lists as the provider's. Below `qp` (which keeps a batch per QP),
//! `qp_ex` (which builds and posts it) and `srq`.

#![allow(unsafe_code)]

use core::ffi::c_int;

use doorbell_types::Mkey;
use libc::EINVAL;

use crate::abi::{ibv_recv_wr, ibv_sge};

use doorbell_verbs::{PostError, RecvWr, SendFlags, Sge, UdTarget, WrOpcode};

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

/// C's list of `n` SGEs at `list`, as the provider takes them; EINVAL for
/// a negative count or a NULL list with SGEs in it.
pub(crate) fn sges(list: *mut ibv_sge, n: c_int) -> Result<Vec<Sge>, c_int> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    let c: &[ibv_sge] = if n == 0 {
        &[]
    } else {
        // SAFETY: the caller's array holds `n` SGEs (checked non-NULL).
        unsafe { core::slice::from_raw_parts(list, n as usize) }
    };
    Ok(c.iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: Mkey::from_raw(s.lkey),
        })
        .collect())
}

/// Posts C's receive chain `wr` to a queue (`ibv_post_recv`,
/// `ibv_post_srq_recv`): `queue` is the queue's lookup, `post` posts a list
/// to it. The WRs before a bad one are posted; `bad_wr` (if not NULL)
/// names the first not posted, or the chain's head if the queue is not one.
pub(crate) fn post_recv_chain<Q>(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    queue: Result<Q, c_int>,
    post: impl FnOnce(&Q, &[RecvWr<'_>]) -> Result<(), PostError>,
) -> Result<c_int, c_int> {
    let set_bad = |w: *mut ibv_recv_wr| {
        if !bad_wr.is_null() {
            // SAFETY: non-NULL; the caller passes a pointer to write.
            unsafe { bad_wr.write(w) };
        }
    };
    let q = queue.inspect_err(|_| set_bad(wr))?;
    let mut chain = Vec::new();
    let mut lists = Vec::new();
    let mut failed = None;
    let mut at = wr;
    while !at.is_null() {
        // SAFETY: each pointer of the chain is a WR the caller owns.
        let w = unsafe { &*at };
        match sges(w.sg_list, w.num_sge) {
            Ok(l) => {
                chain.push((at, w.wr_id));
                lists.push(l);
            }
            Err(e) => {
                failed = Some((at, e));
                break;
            }
        }
        at = w.next;
    }
    let wrs: Vec<RecvWr<'_>> = chain
        .iter()
        .zip(&lists)
        .map(|(&(_, wr_id), l)| RecvWr { wr_id, sg_list: l })
        .collect();
    if let Err(e) = post(&q, &wrs) {
        set_bad(chain.get(e.index).map_or(wr, |c| c.0));
        return Err(e.error.errno());
    }
    if let Some((w, e)) = failed {
        set_bad(w);
        return Err(e);
    }
    Ok(0)
}
