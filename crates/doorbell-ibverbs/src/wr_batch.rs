//! Work requests on their way from C: the state of an `ibv_wr_*` batch
//! (the WRs built between `ibv_wr_start` and `ibv_wr_complete`), C's inline
//! buffers, and C's SGE lists as the provider's. Below `qp` (which keeps a batch per QP),
//! `qp_ex` (which builds and posts it) and `srq`.

#![allow(unsafe_code)]

use core::ffi::c_int;

use doorbell_types::Mkey;
use libc::EINVAL;

use crate::abi::{ibv_recv_wr, ibv_sge};

use doorbell_verbs::{PostError, SendBatch, Sge};

/// The `ibv_wr_*` state of a QP: the batch being built, whether
/// `ibv_wr_start` opened it, and the first misuse, which
/// `ibv_wr_complete` reports (the builders have no error channel).
#[derive(Debug, Default)]
pub(crate) struct WrState {
    pub(crate) open: bool,
    pub(crate) batch: SendBatch,
    pub(crate) error: Option<c_int>,
}

impl WrState {
    /// Empties the batch (keeping its memory) and forgets any misuse;
    /// `open` as `ibv_wr_start` (true) or `ibv_wr_abort` (false) leaves it.
    pub(crate) fn restart(&mut self, open: bool) {
        self.batch.clear();
        self.open = open;
        self.error = None;
    }
}

/// C's inline pieces `(address, length)` as slices, after checking that
/// they add up to at most `max` bytes (ENOMEM otherwise, before anything
/// is read, and before the next check) and that none with bytes is at
/// NULL (EFAULT).
///
/// # Safety
/// Each piece is `(address, length)` of memory the C caller gives to be
/// read now, as `ibv_post_send` and `ibv_wr_set_inline_data*` take it: the
/// slices live only until the caller's call returns.
pub(crate) unsafe fn inline_pieces<'a, I>(
    pieces: I,
    max: u32,
) -> Result<impl Iterator<Item = &'a [u8]>, c_int>
where
    I: Iterator<Item = (u64, usize)> + Clone,
{
    // Too long is ENOMEM whatever the addresses, as mlx5 checks it first.
    let total = pieces
        .clone()
        .fold(0usize, |t, (_, len)| t.saturating_add(len));
    if total > max as usize {
        return Err(libc::ENOMEM);
    }
    if pieces.clone().any(|(addr, len)| len > 0 && addr == 0) {
        return Err(libc::EFAULT);
    }
    Ok(pieces.map(|(addr, len)| -> &'a [u8] {
        if len == 0 {
            return &[];
        }
        // SAFETY: the caller's promise: `len` readable bytes at `addr`
        // (checked non-NULL above), for as long as its call lasts.
        unsafe { core::slice::from_raw_parts(addr as *const u8, len) }
    }))
}

/// C's list of `n` SGEs at `list`; EINVAL for a negative count or a NULL
/// list with SGEs in it.
pub(crate) fn c_sges<'a>(list: *mut ibv_sge, n: c_int) -> Result<&'a [ibv_sge], c_int> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller's array holds `n` SGEs (checked non-NULL), read
    // during the caller's call.
    Ok(unsafe { core::slice::from_raw_parts(list, n as usize) })
}

/// One C SGE as the provider's.
pub(crate) fn sge_of(s: &ibv_sge) -> Sge {
    Sge {
        addr: s.addr,
        length: s.length,
        lkey: Mkey::from_raw(s.lkey),
    }
}

/// The first `left` WRs of C's receive chain from `at`, as the provider
/// takes them ([`doorbell_verbs::Qp::post_recv_iter`]): each WR's `wr_id`
/// and its SGEs, read from C's memory as the WQE is built. Every WR it
/// yields had its SGE list checked ([`c_sges`]) before. Its lifetime is
/// the C call's: the WRs and SGE lists are borrowed for no longer.
pub(crate) struct RecvChain<'a> {
    at: *mut ibv_recv_wr,
    left: usize,
    call: core::marker::PhantomData<&'a ibv_recv_wr>,
}

/// One WR of a [`RecvChain`]: its `wr_id` and its SGEs.
type ChainWr<'a> = (
    u64,
    core::iter::Map<core::slice::Iter<'a, ibv_sge>, fn(&ibv_sge) -> Sge>,
);

impl<'a> Iterator for RecvChain<'a> {
    type Item = ChainWr<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 || self.at.is_null() {
            return None;
        }
        // SAFETY: each pointer of the chain is a WR the caller owns, read
        // during the caller's call.
        let w = unsafe { &*self.at };
        self.at = w.next;
        self.left -= 1;
        // Checked when the chain was walked first: never the fallback.
        let list = c_sges(w.sg_list, w.num_sge).unwrap_or(&[]);
        Some((w.wr_id, list.iter().map(sge_of as fn(&ibv_sge) -> Sge)))
    }
}

/// The WR `index` places after `wr` in C's chain (or `wr` if the chain is
/// shorter).
fn nth_recv(wr: *mut ibv_recv_wr, index: usize) -> *mut ibv_recv_wr {
    let mut at = wr;
    for _ in 0..index {
        if at.is_null() {
            return wr;
        }
        // SAFETY: each pointer of the chain is a WR the caller owns.
        at = unsafe { (*at).next };
    }
    if at.is_null() { wr } else { at }
}

/// Posts C's receive chain `wr` to a queue (`ibv_post_recv`,
/// `ibv_post_srq_recv`): `queue` is the queue's lookup, `post` posts the
/// chain's WRs to it. The WRs before a bad one are posted; `bad_wr` (if
/// not NULL) names the first not posted, or the chain's head if the queue
/// is not one. The chain is walked twice (checked, then posted), and
/// nothing is collected.
pub(crate) fn post_recv_chain<Q>(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    queue: Result<Q, c_int>,
    post: impl FnOnce(&Q, RecvChain<'_>) -> Result<(), PostError>,
) -> Result<c_int, c_int> {
    let set_bad = |w: *mut ibv_recv_wr| {
        if !bad_wr.is_null() {
            // SAFETY: non-NULL; the caller passes a pointer to write.
            unsafe { bad_wr.write(w) };
        }
    };
    let q = queue.inspect_err(|_| set_bad(wr))?;
    // The WRs up to the first whose SGE list is bad.
    let (mut good, mut failed) = (0usize, None);
    let mut at = wr;
    while !at.is_null() {
        // SAFETY: each pointer of the chain is a WR the caller owns.
        let w = unsafe { &*at };
        if let Err(e) = c_sges(w.sg_list, w.num_sge) {
            failed = Some((at, e));
            break;
        }
        good += 1;
        at = w.next;
    }
    let chain = RecvChain {
        at: wr,
        left: good,
        call: core::marker::PhantomData,
    };
    if let Err(e) = post(&q, chain) {
        set_bad(nth_recv(wr, e.index));
        return Err(e.error.errno());
    }
    if let Some((w, e)) = failed {
        set_bad(w);
        return Err(e);
    }
    Ok(0)
}
