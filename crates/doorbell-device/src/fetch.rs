//! WQE fetch: send WQEBBs into the WQE cache, and receive WQEs, by DMA
//! from the QP buffer or the QP's SRQ; the receive producer index from the
//! doorbell record; the SRQ's limit event.

use doorbell_hif::NicEvent;
use doorbell_layout::dbr::{self, QpDoorbellRecord};
use doorbell_layout::wqe::{DataSeg, SrqNextSeg, WQEBB_LEN, field as wf};
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::{Instant, Mkey, Qpn, Srqn};

use crate::ctx::Ctx;
use crate::dma::dma_read;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::wq::{RecvWqe, Sge};

/// Fetches by DMA every WQEBB from the end of the WQE cache up to `upto`.
pub(crate) fn fetch_upto<D: Dma>(qp: &mut Qp, upto: u16, ctx: &mut Ctx<'_, D>) -> bool {
    let sq = &qp.sq;
    let start = sq.ci.wrapping_add(sq.wqe_cache.len() as u16);
    let count = upto.wrapping_sub(start);
    if count == 0 || count > sq.size {
        return count == 0;
    }
    let mask = sq.size - 1;
    let first = start & mask;
    // Split at the end of the ring: at most two DMA reads.
    let till_end = sq.size - first;
    let pieces = [
        (first, count.min(till_end)),
        (0, count.saturating_sub(till_end)),
    ];
    let tag = DmaTag::new(qp.qpn, DmaPurpose::SendWqe);
    // Reused, so that fetching allocates nothing; every byte is read over.
    let mut buf = std::mem::take(&mut ctx.out.wqe_scratch);
    buf.resize(usize::from(count) * WQEBB_LEN, 0);
    let read = read_pieces(qp, pieces, tag, &mut buf, ctx);
    if read {
        for chunk in buf.chunks_exact(WQEBB_LEN) {
            let mut b = [0u8; WQEBB_LEN];
            b.copy_from_slice(chunk);
            qp.sq.wqe_cache.push_back(b);
        }
    }
    ctx.out.wqe_scratch = buf;
    read
}

/// [`fetch_upto`]'s DMA: each `(slot, count)` piece of the SQ into `buf`,
/// one read per run of contiguous pages (one for the piece when the pages
/// are contiguous, as they are for a buffer the provider allocated in one
/// go), and none unless the QP's pages cover the whole piece.
fn read_pieces<D: Dma>(
    qp: &Qp,
    pieces: [(u16, u16); 2],
    tag: DmaTag,
    buf: &mut [u8],
    ctx: &mut Ctx<'_, D>,
) -> bool {
    let mut filled = 0usize;
    for (slot, n) in pieces {
        if n == 0 {
            continue;
        }
        let off = qp.sq_offset() + u64::from(slot) * WQEBB_LEN as u64;
        let len = u64::from(n) * WQEBB_LEN as u64;
        if !qp.buf_runs(off, len, |_, _, _| ()) {
            return false;
        }
        let mut ok = true;
        qp.buf_runs(off, len, |h, b, o| {
            let dst = &mut buf[filled + o as usize..filled + (o + b) as usize];
            ok &= ctx.read(tag, h, dst);
        });
        if !ok {
            return false;
        }
        filled += len as usize;
    }
    true
}

/// Why the next receive WQE could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecvFetchError;

/// Fetches the next receive WQE, reading the doorbell record when the
/// device's copy of the producer index says the RQ is empty.
pub(crate) fn next_recv_wqe<D: Dma>(
    qp: &mut Qp,
    ctx: &mut Ctx<'_, D>,
) -> Result<Option<RecvWqe>, RecvFetchError> {
    if let Some(srqn) = qp.p.srq {
        return next_srq_wqe(qp.qpn, srqn, ctx);
    }
    if qp.rq.ci == qp.rq.pi {
        // Only the receive counter is read, into its place in a record.
        let mut rec = [0u8; doorbell_layout::dbr::DBR_LEN];
        let (addr, word) = qp.recv_counter_addr().ok_or(RecvFetchError)?;
        if !ctx.read(
            DmaTag::new(qp.qpn, DmaPurpose::DoorbellRecord),
            addr,
            &mut rec[word],
        ) {
            return Err(RecvFetchError);
        }
        let pi = QpDoorbellRecord::new_unchecked(&rec[..]).recv_counter();
        if u32::from(pi.wrapping_sub(qp.rq.ci)) > qp.rq.size {
            return Err(RecvFetchError);
        }
        qp.rq.pi = pi;
        if qp.rq.ci == qp.rq.pi {
            return Ok(None);
        }
    }
    let index = qp.rq.ci;
    let slot = u64::from(u32::from(index) & (qp.rq.size - 1));
    let stride = qp.rq.stride as u64;
    let tag = DmaTag::new(qp.qpn, DmaPurpose::RecvWqe);
    let (off, len) = (slot * stride, stride);
    // Nothing is read unless the QP's pages hold the whole WQE.
    if !qp.buf_runs(off, len, |_, _, _| ()) {
        return Err(RecvFetchError);
    }
    let mut buf = std::mem::take(&mut ctx.out.wqe_scratch);
    buf.resize(len as usize, 0);
    let mut ok = true;
    qp.buf_runs(off, len, |h, n, o| {
        ok &= ctx.read(tag, h, &mut buf[o as usize..(o + n) as usize]);
    });
    let sges = if ok {
        data_segs(&buf, ctx.out.payloads.sges())
    } else {
        Vec::new()
    };
    ctx.out.wqe_scratch = buf;
    if !ok {
        return Err(RecvFetchError);
    }
    qp.rq.ci = qp.rq.ci.wrapping_add(1);
    Ok(Some(RecvWqe { index, sges }))
}

/// The SGEs of a receive WQE's data segments, up to the terminator, into
/// `sges` (empty, reused).
fn data_segs(buf: &[u8], mut sges: Vec<Sge>) -> Vec<Sge> {
    for seg in buf.chunks_exact(wf::DATA_LEN) {
        let d = DataSeg::new_unchecked(seg);
        if d.lkey() == Mkey::INVALID.raw() {
            break;
        }
        if d.byte_count() > 0 {
            sges.push(Sge {
                lkey: d.lkey(),
                addr: d.addr(),
                len: d.byte_count(),
            });
        }
    }
    sges
}

/// Reads the count of WQEs posted from an SRQ's doorbell record (word 0;
/// the provider writes all 32 bits, the device keeps the low 16).
fn refresh_srq_pi<D: Dma>(
    qpn: Qpn,
    srq: &mut Srq,
    dma: &mut D,
    t: &mut Instant,
) -> Result<(), RecvFetchError> {
    let mut rec = [0u8; dbr::DBR_LEN];
    let word = dbr::field::WORD0;
    let addr = srq
        .p
        .dbr_addr
        .checked_add(word.start as u64)
        .ok_or(RecvFetchError)?;
    let tag = DmaTag::new(qpn, DmaPurpose::DoorbellRecord);
    if !dma_read(dma, t, tag, addr, &mut rec[word]) {
        return Err(RecvFetchError);
    }
    let pi = QpDoorbellRecord::new_unchecked(&rec[..]).recv_counter();
    if u32::from(pi.wrapping_sub(srq.ci)) > srq.size {
        return Err(RecvFetchError);
    }
    srq.pi = pi;
    Ok(())
}

/// Takes the next WQE of SRQ `srqn` for QP `qpn`: the one at the SRQ's
/// head, whose next segment says which is next. With a limit armed and
/// fewer WQEs than the limit left, raises [`NicEvent::SrqLimit`] once and
/// disarms (the count is read again from the doorbell record first, so a
/// stale copy never raises it).
fn next_srq_wqe<D: Dma>(
    qpn: Qpn,
    srqn: Srqn,
    ctx: &mut Ctx<'_, D>,
) -> Result<Option<RecvWqe>, RecvFetchError> {
    let srq = ctx.srqs.get_mut(&srqn).ok_or(RecvFetchError)?;
    if srq.ci == srq.pi {
        refresh_srq_pi(qpn, srq, ctx.dma, &mut ctx.t)?;
        if srq.ci == srq.pi {
            return Ok(None);
        }
    }
    let index = u32::from(srq.head) & (srq.size - 1);
    let stride = srq.stride as usize;
    let (off, len) = (u64::from(index) * stride as u64, stride as u64);
    // Nothing is read unless the SRQ's pages hold the whole WQE.
    if !srq.buf_runs(off, len, |_, _, _| ()) {
        return Err(RecvFetchError);
    }
    let tag = DmaTag::new(qpn, DmaPurpose::RecvWqe);
    let mut buf = std::mem::take(&mut ctx.out.wqe_scratch);
    buf.resize(stride, 0);
    let mut ok = true;
    srq.buf_runs(off, len, |h, n, o| {
        ok &= dma_read(
            ctx.dma,
            &mut ctx.t,
            tag,
            h,
            &mut buf[o as usize..(o + n) as usize],
        );
    });
    if !ok || stride < wf::SRQ_NEXT_LEN {
        ctx.out.wqe_scratch = buf;
        return Err(RecvFetchError);
    }
    srq.head = SrqNextSeg::new_unchecked(&buf[..wf::SRQ_NEXT_LEN]).next_wqe_index();
    let sges = data_segs(&buf[wf::SRQ_NEXT_LEN..], ctx.out.payloads.sges());
    ctx.out.wqe_scratch = buf;
    srq.ci = srq.ci.wrapping_add(1);
    // The WQE is taken: a record that cannot be read again for the limit
    // only leaves the limit unchecked until the next WQE, rather than
    // lose this one.
    if srq.limit > 0
        && srq.posted() < srq.limit
        && refresh_srq_pi(qpn, srq, ctx.dma, &mut ctx.t).is_ok()
        && srq.posted() < srq.limit
    {
        srq.limit = 0;
        ctx.raise(NicEvent::SrqLimit(srqn));
    }
    Ok(Some(RecvWqe {
        index: index as u16,
        sges,
    }))
}
