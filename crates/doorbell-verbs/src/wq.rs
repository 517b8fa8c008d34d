//! The work-queue bookkeeping that a QP (or an SRQ) and the CQs it
//! completes into share: which WR each WQE came from, and how far each
//! queue has retired; for an SRQ, its free list of WQEs.

use std::sync::{Arc, Mutex};

use doorbell_host::{HostMemory, offset};
use doorbell_layout::wqe::{DataSeg, SrqNextSeg, field};
use doorbell_types::{HostAddr, Mkey, Qpn};

use crate::error::VerbsError;

/// The largest send WQE (`max_sq_desc_sz`).
pub(crate) const MAX_WQE_LEN: usize = 1024;

pub(crate) struct SqState {
    /// Free-running producer counter in WQEBBs.
    pub(crate) cur_post: u16,
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) wrid: Vec<u64>,
    pub(crate) wqe_head: Vec<u32>,
    /// Where a post builds its WQEs, one after another as they will lie
    /// in the send ring, to write them there with one access
    /// ([`STAGE_LEN`] bytes).
    pub(crate) staged: Box<[u8]>,
    /// The last WQE of a post written out before the post ended (its
    /// staging area was full), kept for the doorbell if no later WQE of
    /// the post is built.
    pub(crate) written: Box<[u8; MAX_WQE_LEN]>,
}

/// The bytes of WQEs a post stages before it writes them into the send
/// ring: a postlist of up to 49 WQEs of one WQEBB is one write (the area
/// is written out once it has less room than the largest WQE); a longer
/// one, or one of bigger WQEs, is a write every 3 to 4 KiB.
pub(crate) const STAGE_LEN: usize = 4 * MAX_WQE_LEN;

impl SqState {
    /// An empty queue of `wqebbs` WQEBBs.
    pub(crate) fn new(wqebbs: u32) -> Self {
        Self {
            cur_post: 0,
            head: 0,
            tail: 0,
            wrid: vec![0; wqebbs as usize],
            wqe_head: vec![0; wqebbs as usize],
            staged: vec![0; STAGE_LEN].into_boxed_slice(),
            written: Box::new([0; MAX_WQE_LEN]),
        }
    }
}

/// Writes a receive WQE's data segments into `wqe`: one for each of
/// `sges`, given as `(length, lkey, address)`, with bytes, then, if the
/// WQE has room for more than that (`max` segments), an end marker (no
/// bytes, the invalid lkey), as mlx5 writes them. Returns the bytes
/// written. The caller has checked that `sges` are at most `max`.
pub(crate) fn write_recv_segments(
    wqe: &mut [u8],
    sges: impl Iterator<Item = (u32, u32, u64)>,
    max: usize,
) -> usize {
    let mut segment = |i: usize, (length, lkey, addr): (u32, u32, u64)| {
        let mut d =
            DataSeg::new_unchecked(&mut wqe[i * field::DATA_LEN..(i + 1) * field::DATA_LEN]);
        d.set_byte_count(length);
        d.set_lkey(lkey);
        d.set_addr(addr);
    };
    let mut n = 0;
    for sge in sges.filter(|s| s.0 > 0) {
        segment(n, sge);
        n += 1;
    }
    if n < max {
        segment(n, (0, Mkey::INVALID.raw(), 0));
        n += 1;
    }
    n * field::DATA_LEN
}

pub(crate) struct RqState {
    pub(crate) head: u32,
    pub(crate) tail: u32,
    pub(crate) wrid: Vec<u64>,
    /// A receive WQE's bytes while a post builds it (one stride).
    pub(crate) build: Vec<u8>,
}

/// The part of a QP that poll_cq needs.
pub(crate) struct QpShared {
    pub(crate) qpn: Qpn,
    pub(crate) sq: Mutex<SqState>,
    pub(crate) rq: Mutex<RqState>,
    pub(crate) sq_wqe_cnt: u32,
    pub(crate) rq_wqe_cnt: u32,
    /// The SRQ the QP receives from, instead of its own RQ.
    pub(crate) srq: Option<Arc<SrqShared>>,
}

impl QpShared {
    /// Retires send WQEs up to the one at `wqe_counter`; returns its wr_id.
    pub(crate) fn complete_send(&self, wqe_counter: u16) -> (u64, u32) {
        let mut sq = self.sq.lock().unwrap_or_else(|e| e.into_inner());
        let idx = (u32::from(wqe_counter) & (self.sq_wqe_cnt - 1)) as usize;
        sq.tail = sq.wqe_head[idx].wrapping_add(1);
        (sq.wrid[idx], sq.tail)
    }

    /// Retires the receive WQE at `wqe_counter` (of the SRQ, for a QP with
    /// one); returns its wr_id.
    pub(crate) fn complete_recv(&self, wqe_counter: u16) -> u64 {
        if let Some(srq) = &self.srq {
            return srq.complete(wqe_counter);
        }
        let mut rq = self.rq.lock().unwrap_or_else(|e| e.into_inner());
        let idx = (u32::from(wqe_counter) & (self.rq_wqe_cnt - 1)) as usize;
        rq.tail = rq.tail.wrapping_add(1);
        rq.wrid[idx]
    }
}

pub(crate) struct SrqState {
    /// The next free WQE: where the next post writes.
    pub(crate) head: u16,
    /// The last free WQE, the list's end.
    pub(crate) tail: u16,
    /// WQEs posted, free-running (the doorbell record's value).
    pub(crate) counter: u32,
    /// Each WQE's link, as written in its next segment.
    pub(crate) next: Vec<u16>,
    pub(crate) wrid: Vec<u64>,
    /// A WQE's data segments while a post builds them.
    pub(crate) build: Vec<u8>,
}

/// The part of an SRQ that `poll_cq` needs: the wr_ids and the free list.
pub(crate) struct SrqShared {
    pub(crate) mem: Arc<dyn HostMemory>,
    pub(crate) buf: HostAddr,
    pub(crate) stride: u32,
    pub(crate) state: Mutex<SrqState>,
}

impl SrqShared {
    /// Retires the WQE at `index` (a CQE's `wqe_counter`): returns its
    /// wr_id and links it back at the end of the free list.
    pub(crate) fn complete(&self, index: u16) -> u64 {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let idx = usize::from(index) & (st.wrid.len() - 1);
        let wr_id = st.wrid[idx];
        let tail = st.tail;
        st.next[usize::from(tail)] = idx as u16;
        // The device reads the tail's link only once it is posted, which
        // is after this write: the list's end is never posted.
        let _ = self.write_next(tail, idx as u16);
        st.tail = idx as u16;
        wr_id
    }

    fn write_next(&self, wqe: u16, next: u16) -> Result<(), VerbsError> {
        let mut seg = [0u8; field::SRQ_NEXT_LEN];
        SrqNextSeg::new_unchecked(&mut seg[..]).set_next_wqe_index(next);
        let at = offset(
            self.buf,
            u64::from(wqe) * u64::from(self.stride) + field::SRQ_NEXT_WQE_INDEX.start as u64,
        )?;
        Ok(self.mem.write(at, &seg[field::SRQ_NEXT_WQE_INDEX])?)
    }
}
