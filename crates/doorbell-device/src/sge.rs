//! The SGE walker: bytes `[offset, offset + len)` of the buffers a list of
//! SGEs names, key-checked and turned into runs of host memory, one DMA
//! per run. Payload gather (reads) and receive scatter (writes) are the
//! two directions of the same walk.

use std::ops::Range;

use doorbell_hif::Access;
use doorbell_layout::cqe::Syndrome;
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::{HostAddr, Mkey, Pdn};

use crate::ctx::{Building, Ctx};
use crate::dma::{PayloadIn, dma_read_into, dma_read_left, write_payload};
use crate::mkey::MkeyTable;
use crate::qp::Qp;
use crate::wq::{Payload, Sge};

/// Largest message, 2^31 bytes (`max_msg_sz`).
pub(crate) const MAX_MSG_LEN: u64 = 1 << 31;

/// Why a walk stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WalkError {
    /// The SGEs end before the range does.
    Short,
    /// An address past 2^64, a key that does not grant the access, or a
    /// failed DMA.
    Protection,
}

/// Walks bytes `[offset, offset + len)` of `sges` with `need` access in
/// `pd`, calling `dma(host, range_in_walk)` for each contiguous run; a run
/// returns false when its DMA failed, which stops the walk after that SGE.
fn walk(
    mkeys: &MkeyTable,
    pd: Pdn,
    need: u32,
    sges: &[Sge],
    offset: u64,
    len: u64,
    mut dma: impl FnMut(HostAddr, Range<usize>) -> bool,
) -> Result<(), WalkError> {
    let mut at = 0u64;
    let mut skip = offset;
    for s in sges {
        if at == len {
            break;
        }
        let sl = u64::from(s.len);
        if skip >= sl {
            skip -= sl;
            continue;
        }
        let n = (sl - skip).min(len - at);
        // The SGE comes from host memory: an address past 2^64 is a
        // protection error, not an overflow.
        let addr = s.addr.checked_add(skip).ok_or(WalkError::Protection)?;
        let mut ok = true;
        let base = at as usize;
        mkeys
            .translate(Mkey::from_raw(s.lkey), pd, need, addr, n, |h, b, o| {
                let start = base + o as usize;
                ok &= dma(h, start..start + b as usize);
            })
            .map_err(|_| WalkError::Protection)?;
        if !ok {
            return Err(WalkError::Protection);
        }
        at += n;
        skip = 0;
    }
    if at == len {
        Ok(())
    } else {
        Err(WalkError::Short)
    }
}

/// Puts bytes `start..` of the payload `p` into the payload ranges of
/// `frames`, one `mtu` each in order (the last may be shorter): copied
/// from a WQE's inline data, or read from host memory with one DMA per
/// contiguous run of the SGEs, spread over the frames that run lands in.
/// With `leave`, a payload that lies in one run is left in host memory
/// ([`Building::left`]), its read checked and counted but no bytes moved
/// ([`crate::NicConfig::leave_payload`]). Fails with the syndrome of the
/// WQE whose payload this is.
pub(crate) fn read_into_frames<D: Dma>(
    qp: &Qp,
    p: &Payload,
    start: u64,
    mtu: usize,
    leave: bool,
    frames: &mut [Building],
    ctx: &mut Ctx<'_, D>,
) -> Result<(), Syndrome> {
    let total: usize = frames.iter().map(|f| f.payload.len()).sum();
    match p {
        Payload::Inline(v) => {
            let mut at = usize::try_from(start).map_err(|_| Syndrome::LocalLengthErr)?;
            for f in frames {
                let n = f.payload.len();
                let src = v.get(at..at + n).ok_or(Syndrome::LocalLengthErr)?;
                f.bytes[f.payload.clone()].copy_from_slice(src);
                at += n;
            }
            Ok(())
        }
        Payload::Sges(sges) => {
            let tag = DmaTag::new(qp.qpn, DmaPurpose::Payload);
            let Ctx { dma, t, mkeys, .. } = ctx;
            walk_read(mkeys, qp.p.pd, sges, start, total as u64, |h, r| {
                // (An address past the end of memory is read below, and
                // fails there.)
                if leave && r == (0..total) && h.checked_add(total as u64).is_some() {
                    // Frame `k`'s payload starts `k` MTUs into the run.
                    for (k, f) in frames.iter_mut().enumerate() {
                        f.left = h.checked_add((k * mtu) as u64);
                    }
                    return dma_read_left(*dma, t, tag, h, total);
                }
                // The frames that bytes `r` of the walk land in.
                let (mut w, end) = (r.start, r.end);
                let mut pieces = frames[r.start / mtu..].iter_mut().map_while(|f| {
                    if w >= end {
                        return None;
                    }
                    let off = w % mtu;
                    let n = (f.payload.len() - off).min(end - w);
                    w += n;
                    let at = f.payload.start + off;
                    Some(&mut f.bytes[at..at + n])
                });
                dma_read_into(*dma, t, tag, h, r.len(), &mut pieces)
            })
        }
    }
}

/// Where bytes `[start, start + total)` of the payload `p` lie in host
/// memory, if in one run of it that ends within the address space, with
/// the keys' local access: what [`read_into_frames`] would leave there.
/// `None` for inline data, a payload in several runs, or one the walk
/// refuses (whose error [`read_into_frames`] then reports).
pub(crate) fn one_run(
    mkeys: &MkeyTable,
    pd: Pdn,
    p: &Payload,
    start: u64,
    total: usize,
) -> Option<HostAddr> {
    let Payload::Sges(sges) = p else { return None };
    let mut runs = 0;
    let mut first = None;
    walk(mkeys, pd, 0, sges, start, total as u64, |h, r| {
        runs += 1;
        first = Some((h, r));
        true
    })
    .ok()?;
    match first {
        Some((h, r)) if runs == 1 && r == (0..total) => h.checked_add(total as u64).map(|_| h),
        _ => None,
    }
}

/// Leaves the payload of `frames`, `total` bytes at `h` in one run of host
/// memory ([`one_run`]), where it is: each frame's packets' payloads
/// follow the one before's, and one DMA read of the run is checked and
/// counted, as [`read_into_frames`] does with `leave`.
pub(crate) fn leave_in_runs<D: Dma>(
    qp: &Qp,
    h: HostAddr,
    total: usize,
    frames: &mut [Building],
    ctx: &mut Ctx<'_, D>,
) -> Result<(), Syndrome> {
    let mut off = 0u64;
    for f in frames.iter_mut() {
        f.left = h.checked_add(off);
        off += f.run_len();
    }
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Payload);
    let Ctx { dma, t, .. } = ctx;
    if dma_read_left(*dma, t, tag, h, total) {
        Ok(())
    } else {
        // As the walk reports a failed DMA.
        Err(Syndrome::LocalProtErr)
    }
}

/// The walk of a gather: bytes `[offset, offset + len)` of `sges`, read
/// with the keys' local access, `dma(host, range_in_walk)` for each
/// contiguous run. Fails with the syndrome of the WQE whose SGEs these are.
pub(crate) fn walk_read(
    mkeys: &MkeyTable,
    pd: Pdn,
    sges: &[Sge],
    offset: u64,
    len: u64,
    dma: impl FnMut(HostAddr, Range<usize>) -> bool,
) -> Result<(), Syndrome> {
    walk(mkeys, pd, 0, sges, offset, len, dma).map_err(|e| match e {
        WalkError::Short => Syndrome::LocalLengthErr,
        WalkError::Protection => Syndrome::LocalProtErr,
    })
}

/// Why data could not be placed into an SGE list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The SGEs are shorter than the data.
    Length,
    /// A key did not grant local write, or a DMA failed.
    Protection,
}

/// Writes `data` at byte `offset` of the buffers `sges` names: receive
/// scatter, READ responses and atomic results. Data past the largest
/// message ([`MAX_MSG_LEN`]) is a length error, as data past the buffers
/// is: a SEND that long could not have its byte count in a CQE.
pub(crate) fn scatter<D: Dma>(
    qp: &Qp,
    sges: &[Sge],
    offset: u64,
    data: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Result<(), ScatterError> {
    if offset.saturating_add(data.len() as u64) > MAX_MSG_LEN {
        return Err(ScatterError::Length);
    }
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Scatter);
    let Ctx { dma, t, mkeys, .. } = ctx;
    walk(
        mkeys,
        qp.p.pd,
        Access::LOCAL_WRITE,
        sges,
        offset,
        data.len() as u64,
        |h, r| write_payload(*dma, t, tag, h, data, r),
    )
    .map_err(|e| match e {
        WalkError::Short => ScatterError::Length,
        WalkError::Protection => ScatterError::Protection,
    })
}

/// Writes `data` at byte `offset` of a READ's or atomic's local buffers.
pub(crate) fn place<D: Dma>(
    qp: &Qp,
    p: &Payload,
    offset: u64,
    data: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Result<(), Syndrome> {
    let Payload::Sges(sges) = p else {
        return Err(Syndrome::LocalQpOpErr);
    };
    scatter(qp, sges, offset, data, ctx).map_err(|e| match e {
        ScatterError::Length => Syndrome::LocalLengthErr,
        ScatterError::Protection => Syndrome::LocalProtErr,
    })
}

/// Checks that `sges` grant `need` access in full, each on its own (the
/// data itself moves later).
pub(crate) fn check_keys(
    mkeys: &MkeyTable,
    pd: Pdn,
    need: u32,
    sges: &[Sge],
) -> Result<(), Syndrome> {
    for s in sges {
        mkeys
            .check(Mkey::from_raw(s.lkey), pd, need, s.addr, s.len.into())
            .map_err(|_| Syndrome::LocalProtErr)?;
    }
    Ok(())
}
