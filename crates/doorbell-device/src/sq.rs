//! The send side: doorbells, WQE fetch and parse, request packets, and the
//! requester half of RC (ACK, NAK, READ and atomic responses, retransmission).

use doorbell_layout::cqe::{CqeOpcode, Syndrome};
use doorbell_layout::uar::SendDoorbell;
use doorbell_layout::wqe::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg, WQEBB_LEN, WqeOpcode,
    wqebbs_for_ds,
};
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::{Cqn, Instant, Psn, Qpn};
use doorbell_wire::{
    AethSyndrome, AtomicEthRepr, BthOpcode, BthRepr, DethRepr, ExtHeaders, ImmDtRepr, NakCode,
    RethRepr, RoceIp, RoceRepr,
};

use crate::mkey::KeyError;
use crate::qp::{Qp, RNR_TIMER_US};
use crate::{Ctx, Frame, NicEvent};
use doorbell_hif::{Access, QpState, QpType};

/// Packets after which a long message asks for an ACK anyway
/// (rxe's `RXE_MAX_PKT_PER_ACK`).
const ACK_EVERY_PACKETS: u32 = 64;
/// PSNs that may be in flight past the last acknowledged one (rxe's
/// `RXE_MAX_UNACKED_PSNS`). A READ counts all the PSNs its responses use,
/// but its request may always go when it is the oldest thing unacknowledged.
pub(crate) const MAX_UNACKED_PSNS: u32 = 128;
/// Largest message, 2^31 bytes (`max_msg_sz`).
pub(crate) const MAX_MSG_LEN: u64 = 1 << 31;

/// A local scatter/gather entry from a data segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sge {
    pub(crate) lkey: u32,
    pub(crate) addr: u64,
    pub(crate) len: u32,
}

/// Where a message's data comes from.
pub(crate) enum Payload {
    /// Copied into the WQE.
    Inline(Vec<u8>),
    /// Named by data segments.
    Sges(Vec<Sge>),
}

/// A request message sent and not yet completed.
pub(crate) struct SentMsg {
    pub(crate) wqe_index: u16,
    pub(crate) opcode: WqeOpcode,
    pub(crate) signaled: bool,
    pub(crate) solicited: bool,
    pub(crate) imm: u32,
    pub(crate) raddr: u64,
    pub(crate) rkey: u32,
    pub(crate) swap_add: u64,
    pub(crate) compare: u64,
    pub(crate) payload: Payload,
    pub(crate) len: u64,
    pub(crate) first_psn: Psn,
    /// PSNs the message uses: its packets, or for a READ its responses; 0
    /// for a NOP, which only keeps its place in the completion order.
    pub(crate) npsn: u32,
    /// Packets of this message sent in the current pass (go-back-N sets it
    /// back). A READ or atomic has one request packet: `npsn` once sent.
    pub(crate) sent: u32,
    /// READ response bytes already placed.
    pub(crate) done_bytes: u64,
    /// A READ or atomic whose response is all in and placed: it completes
    /// when everything posted before it has.
    pub(crate) answered: bool,
    /// The response PSN this READ or atomic was last asked for again from
    /// because its responses were found missing (implied NAK): once per
    /// position, or copies and stragglers of the stream already asked for
    /// would ask again and again.
    pub(crate) implied_at: Option<Psn>,
}

impl SentMsg {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.wrapping_sub(1))
    }

    fn is_sent(&self) -> bool {
        self.sent >= self.npsn
    }

    fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.opcode,
            WqeOpcode::RdmaRead | WqeOpcode::AtomicCs | WqeOpcode::AtomicFa
        )
    }

    fn contains(&self, psn: Psn) -> bool {
        let d = psn.diff(self.first_psn);
        d >= 0 && (d as u32) < self.npsn
    }
}

/// A parsed send WQE.
struct Wqe {
    index: u16,
    opcode: WqeOpcode,
    wqebbs: u16,
    fm_ce_se: u8,
    imm: u32,
    raddr: u64,
    rkey: u32,
    swap_add: u64,
    compare: u64,
    ud: Option<UdDest>,
    payload: Payload,
}

#[derive(Clone, Copy)]
struct UdDest {
    qkey: u32,
    dqpn: u32,
    dgid: [u8; 16],
}

/// Takes a send doorbell (8 bytes, or a BlueFlame WQE) for `qp`.
pub(crate) fn doorbell<D: Dma>(
    qp: &mut Qp,
    db: SendDoorbell,
    bf: Option<&[u8]>,
    ctx: &mut Ctx<'_, D>,
) {
    ctx.charge(ctx.cfg.timing.doorbell);
    if !matches!(qp.state, QpState::Rts | QpState::Err) {
        ctx.out.counters.doorbells_not_ready += 1;
        return;
    }
    let new_pi = db.wqe_index.wrapping_add(wqebbs_for_ds(db.ds).max(1));
    let ahead = new_pi.wrapping_sub(qp.sq_ci);
    if ahead == 0 || ahead > qp.sq_size || ahead < qp.sq_pi.wrapping_sub(qp.sq_ci) {
        ctx.out.counters.bad_doorbells += 1;
        return;
    }
    qp.sq_pi = new_pi;
    if qp.state == QpState::Err {
        flush(qp, ctx);
        return;
    }
    if let Some(bf) = bf {
        // The WQE came with the doorbell: fetch only what precedes it.
        if fetch_upto(qp, db.wqe_index, ctx) {
            let n = usize::from(wqebbs_for_ds(db.ds));
            for chunk in bf.chunks_exact(WQEBB_LEN).take(n) {
                let mut b = [0u8; WQEBB_LEN];
                b.copy_from_slice(chunk);
                qp.wqe_cache.push_back(b);
            }
        }
    }
    pump(qp, ctx);
}

/// Fetches by DMA every WQEBB from the end of the WQE cache up to `upto`.
fn fetch_upto<D: Dma>(qp: &mut Qp, upto: u16, ctx: &mut Ctx<'_, D>) -> bool {
    let start = qp.sq_ci.wrapping_add(qp.wqe_cache.len() as u16);
    let count = upto.wrapping_sub(start);
    if count == 0 || count > qp.sq_size {
        return count == 0;
    }
    let mask = qp.sq_size - 1;
    let first = start & mask;
    // Split at the end of the ring: at most two DMA reads.
    let till_end = qp.sq_size - first;
    let pieces = [
        (first, count.min(till_end)),
        (0, count.saturating_sub(till_end)),
    ];
    let tag = DmaTag::new(qp.qpn, DmaPurpose::SendWqe);
    let mut buf = vec![0u8; usize::from(count) * WQEBB_LEN];
    let mut filled = 0usize;
    for (slot, n) in pieces {
        if n == 0 {
            continue;
        }
        let off = qp.sq_offset() + u64::from(slot) * WQEBB_LEN as u64;
        let len = u64::from(n) * WQEBB_LEN as u64;
        let mut ok = true;
        let mut runs = Vec::new();
        let covered = qp.buf_runs(off, len, |h, b, o| runs.push((h, b, o)));
        if !covered {
            return false;
        }
        // One DMA for the piece when the pages are contiguous, as they are
        // for a buffer the provider allocated in one go.
        for (h, b, o) in runs {
            let dst = &mut buf[filled + o as usize..filled + (o + b) as usize];
            ok &= ctx.read(tag, h, dst);
        }
        if !ok {
            return false;
        }
        filled += len as usize;
    }
    for chunk in buf.chunks_exact(WQEBB_LEN) {
        let mut b = [0u8; WQEBB_LEN];
        b.copy_from_slice(chunk);
        qp.wqe_cache.push_back(b);
    }
    true
}

/// Executes WQEs from the consumer index while the QP may send, then sends
/// what the window allows (also when the next WQE has to wait).
pub(crate) fn pump<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    execute(qp, ctx);
    if qp.state == QpState::Rts && qp.p.qp_type == QpType::Rc {
        send_or_fail(qp, ctx);
    }
}

/// Executes WQEs from the consumer index while the QP may send.
fn execute<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    while qp.state == QpState::Rts && qp.sq_ci != qp.sq_pi && qp.rnr_resume.is_none() {
        if qp.wqe_cache.is_empty() && !fetch_upto(qp, qp.sq_pi, ctx) {
            fail_wqe(qp, qp.sq_ci, WqeOpcode::Nop, Syndrome::LocalQpOpErr, ctx);
            return;
        }
        let avail = qp.sq_pi.wrapping_sub(qp.sq_ci);
        let Some(head) = qp.wqe_cache.front() else {
            return;
        };
        let ctrl = CtrlSeg::new_unchecked(&head[..]);
        let (ds, index, opcode) = (ctrl.ds(), ctrl.wqe_index(), ctrl.opcode());
        let n = wqebbs_for_ds(ds);
        let too_big = usize::from(ds) * wqe::DS_LEN > ctx.cfg.caps.max_sq_desc_sz as usize;
        if ds == 0 || n > avail || too_big || index != qp.sq_ci || ctrl.qpn() != qp.qpn.get() {
            let at = qp.sq_ci;
            skip_head(qp, n);
            fail_wqe(qp, at, opcode, Syndrome::LocalQpOpErr, ctx);
            return;
        }
        if usize::from(n) > qp.wqe_cache.len() && !fetch_upto(qp, qp.sq_pi, ctx) {
            fail_wqe(qp, qp.sq_ci, opcode, Syndrome::LocalQpOpErr, ctx);
            return;
        }
        let mut bytes = [0u8; 1024];
        for (i, b) in qp.wqe_cache.iter().take(usize::from(n)).enumerate() {
            bytes[i * WQEBB_LEN..(i + 1) * WQEBB_LEN].copy_from_slice(b);
        }
        let w = match parse_wqe(&bytes[..usize::from(ds) * wqe::DS_LEN], qp.p.qp_type) {
            Ok(w) => w,
            Err(s) => {
                let at = qp.sq_ci;
                skip_head(qp, n);
                fail_wqe(qp, at, opcode, s, ctx);
                return;
            }
        };
        // READ and atomics wait for the outstanding-request limit; a fenced
        // WQE waits for every READ and atomic before it.
        let rd_out = qp
            .outstanding
            .iter()
            .filter(|m| m.is_read_or_atomic())
            .count() as u8;
        let is_rd = matches!(
            w.opcode,
            WqeOpcode::RdmaRead | WqeOpcode::AtomicCs | WqeOpcode::AtomicFa
        );
        let fenced = w.fm_ce_se & wqe::ctrl_flags::FM_MASK != 0;
        if qp.p.qp_type == QpType::Rc
            && ((is_rd && rd_out >= qp.attrs.max_rd_atomic.unwrap_or(1).max(1))
                || (fenced && rd_out > 0))
        {
            return;
        }
        for _ in 0..n {
            qp.wqe_cache.pop_front();
        }
        qp.sq_ci = qp.sq_ci.wrapping_add(n);
        ctx.charge(ctx.cfg.timing.wqe);
        let result = match qp.p.qp_type {
            QpType::Rc => execute_rc(qp, w, ctx),
            QpType::Ud => execute_ud(qp, w, ctx),
        };
        if let Err((index, opcode, s)) = result {
            fail_wqe(qp, index, opcode, s, ctx);
            return;
        }
    }
}

/// Steps over the malformed WQE at the consumer index, taken as `n`
/// WQEBBs (at least one) when that many are posted, so that the flush after
/// its error completion does not complete it a second time. A WQE whose
/// size runs past the producer index is left for the flush to stop at.
fn skip_head(qp: &mut Qp, n: u16) {
    let n = n.max(1);
    if n <= qp.sq_pi.wrapping_sub(qp.sq_ci) {
        for _ in 0..n {
            qp.wqe_cache.pop_front();
        }
        qp.sq_ci = qp.sq_ci.wrapping_add(n);
    }
}

fn parse_wqe(b: &[u8], ty: QpType) -> Result<Wqe, Syndrome> {
    let ctrl = CtrlSeg::new_unchecked(&b[..wqe::field::CTRL_LEN]);
    let mut w = Wqe {
        index: ctrl.wqe_index(),
        opcode: ctrl.opcode(),
        wqebbs: wqebbs_for_ds(ctrl.ds()),
        fm_ce_se: ctrl.fm_ce_se(),
        imm: ctrl.imm(),
        raddr: 0,
        rkey: 0,
        swap_add: 0,
        compare: 0,
        ud: None,
        payload: Payload::Sges(Vec::new()),
    };
    let mut off = wqe::field::CTRL_LEN;
    let seg = |off: usize, len: usize| b.get(off..off + len).ok_or(Syndrome::LocalQpOpErr);
    if ty == QpType::Ud {
        let av = DatagramSeg::new_unchecked(seg(off, wqe::field::AV_LEN)?);
        w.ud = Some(UdDest {
            qkey: av.qkey(),
            dqpn: av.dqpn(),
            dgid: av.rgid(),
        });
        off += wqe::field::AV_LEN;
    }
    let remote = |w: &mut Wqe, off: &mut usize| -> Result<(), Syndrome> {
        let r = RaddrSeg::new_unchecked(seg(*off, wqe::field::RADDR_LEN)?);
        w.raddr = r.raddr();
        w.rkey = r.rkey();
        *off += wqe::field::RADDR_LEN;
        Ok(())
    };
    match (w.opcode, ty) {
        (WqeOpcode::Nop, _) => return Ok(w),
        (WqeOpcode::Send | WqeOpcode::SendImm, _) => {}
        (WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm | WqeOpcode::RdmaRead, QpType::Rc) => {
            remote(&mut w, &mut off)?
        }
        (WqeOpcode::AtomicCs | WqeOpcode::AtomicFa, QpType::Rc) => {
            remote(&mut w, &mut off)?;
            let a = AtomicSeg::new_unchecked(seg(off, wqe::field::ATOMIC_LEN)?);
            w.swap_add = a.swap_add();
            w.compare = a.compare();
            off += wqe::field::ATOMIC_LEN;
        }
        _ => return Err(Syndrome::LocalQpOpErr),
    }
    // Data: one inline segment, or data segments to the end of the WQE.
    if off + wqe::field::INLINE_HDR_LEN <= b.len()
        && InlineSeg::new_unchecked(&b[off..]).is_inline()
    {
        let n = InlineSeg::new_unchecked(&b[off..]).byte_count() as usize;
        let start = off + wqe::field::INLINE_HDR_LEN;
        let data = b.get(start..start + n).ok_or(Syndrome::LocalLengthErr)?;
        w.payload = Payload::Inline(data.to_vec());
    } else {
        let mut sges = Vec::new();
        while off + wqe::field::DATA_LEN <= b.len() {
            let d = DataSeg::new_unchecked(&b[off..off + wqe::field::DATA_LEN]);
            sges.push(Sge {
                lkey: d.lkey(),
                addr: d.addr(),
                len: d.byte_count(),
            });
            off += wqe::field::DATA_LEN;
        }
        w.payload = Payload::Sges(sges);
    }
    Ok(w)
}

fn payload_len(p: &Payload) -> u64 {
    match p {
        Payload::Inline(v) => v.len() as u64,
        Payload::Sges(s) => s.iter().map(|s| u64::from(s.len)).sum(),
    }
}

fn key_syndrome(_: KeyError) -> Syndrome {
    Syndrome::LocalProtErr
}

/// Reads bytes `offset..offset + len` of a message's payload from host
/// memory (one DMA per contiguous run).
fn gather<D: Dma>(
    qp: &Qp,
    p: &Payload,
    offset: u64,
    len: u64,
    ctx: &mut Ctx<'_, D>,
) -> Result<Vec<u8>, Syndrome> {
    let end = offset.checked_add(len).ok_or(Syndrome::LocalLengthErr)?;
    if end > payload_len(p) || len > MAX_MSG_LEN {
        return Err(Syndrome::LocalLengthErr);
    }
    match p {
        Payload::Inline(v) => Ok(v[offset as usize..end as usize].to_vec()),
        Payload::Sges(sges) => {
            let mut buf = vec![0u8; len as usize];
            let mut at = 0usize;
            let mut skip = offset;
            let tag = DmaTag::new(qp.qpn, DmaPurpose::Payload);
            for s in sges {
                if at == buf.len() {
                    break;
                }
                let sl = u64::from(s.len);
                if skip >= sl {
                    skip -= sl;
                    continue;
                }
                let n = (sl - skip).min((buf.len() - at) as u64);
                let mut dma_ok = true;
                // The SGE comes from host memory: an address past 2^64 is
                // a protection error, not an overflow.
                let addr = s.addr.checked_add(skip).ok_or(Syndrome::LocalProtErr)?;
                let dst = &mut buf[at..at + n as usize];
                let dma = &mut *ctx.dma;
                let t = &mut ctx.t;
                ctx.mkeys
                    .translate(
                        doorbell_types::Mkey::from_raw(s.lkey),
                        qp.p.pd,
                        0,
                        addr,
                        n,
                        |h, b, o| {
                            dma_ok &= crate::dma_read(
                                dma,
                                t,
                                tag,
                                h,
                                &mut dst[o as usize..(o + b) as usize],
                            );
                        },
                    )
                    .map_err(key_syndrome)?;
                if !dma_ok {
                    return Err(Syndrome::LocalProtErr);
                }
                at += n as usize;
                skip = 0;
            }
            Ok(buf)
        }
    }
}

/// Checks that the device may write the local buffers of a READ or atomic.
fn check_local_write<D: Dma>(qp: &Qp, p: &Payload, ctx: &Ctx<'_, D>) -> Result<(), Syndrome> {
    let Payload::Sges(sges) = p else {
        return Err(Syndrome::LocalQpOpErr);
    };
    for s in sges {
        ctx.mkeys
            .translate(
                doorbell_types::Mkey::from_raw(s.lkey),
                qp.p.pd,
                Access::LOCAL_WRITE,
                s.addr,
                s.len.into(),
                |_, _, _| {},
            )
            .map_err(key_syndrome)?;
    }
    Ok(())
}

/// Checks that the device may read the local buffers of a SEND or WRITE
/// (the data itself is read when its packets go out).
fn check_local_read<D: Dma>(
    qp: &Qp,
    p: &Payload,
    len: u64,
    ctx: &Ctx<'_, D>,
) -> Result<(), Syndrome> {
    if len > MAX_MSG_LEN {
        return Err(Syndrome::LocalLengthErr);
    }
    let Payload::Sges(sges) = p else {
        return Ok(());
    };
    for s in sges {
        ctx.mkeys
            .translate(
                doorbell_types::Mkey::from_raw(s.lkey),
                qp.p.pd,
                0,
                s.addr,
                s.len.into(),
                |_, _, _| {},
            )
            .map_err(key_syndrome)?;
    }
    Ok(())
}

type WqeFailure = (u16, WqeOpcode, Syndrome);

fn execute_rc<D: Dma>(qp: &mut Qp, w: Wqe, ctx: &mut Ctx<'_, D>) -> Result<(), WqeFailure> {
    let fail = |s| (w.index, w.opcode, s);
    let signaled = w.fm_ce_se & wqe::ctrl_flags::CE_MASK == wqe::ctrl_flags::CQ_UPDATE;
    let len = payload_len(&w.payload);
    let mtu = u64::from(qp.mtu());
    let npsn = match w.opcode {
        // A NOP uses no PSN; it completes in its turn, after everything
        // posted before it.
        WqeOpcode::Nop => 0,
        WqeOpcode::Send | WqeOpcode::SendImm | WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm => {
            check_local_read(qp, &w.payload, len, ctx).map_err(fail)?;
            len.div_ceil(mtu).max(1) as u32
        }
        WqeOpcode::RdmaRead => {
            if len > MAX_MSG_LEN {
                return Err(fail(Syndrome::LocalLengthErr));
            }
            check_local_write(qp, &w.payload, ctx).map_err(fail)?;
            len.div_ceil(mtu).max(1) as u32
        }
        WqeOpcode::AtomicCs | WqeOpcode::AtomicFa => {
            if len != 8 {
                return Err(fail(Syndrome::LocalLengthErr));
            }
            check_local_write(qp, &w.payload, ctx).map_err(fail)?;
            1
        }
        _ => return Err(fail(Syndrome::LocalQpOpErr)),
    };
    let _ = w.wqebbs;
    qp.outstanding.push_back(SentMsg {
        wqe_index: w.index,
        opcode: w.opcode,
        signaled,
        solicited: w.fm_ce_se & wqe::ctrl_flags::SOLICITED != 0,
        imm: w.imm,
        raddr: w.raddr,
        rkey: w.rkey,
        swap_add: w.swap_add,
        compare: w.compare,
        payload: w.payload,
        len,
        first_psn: qp.next_psn,
        npsn,
        sent: 0,
        done_bytes: 0,
        answered: false,
        implied_at: None,
    });
    qp.next_psn = qp.next_psn.add(npsn);
    if npsn == 0 {
        retire(qp, ctx);
        return Ok(());
    }
    send_window(qp, ctx)
}

fn execute_ud<D: Dma>(qp: &mut Qp, w: Wqe, ctx: &mut Ctx<'_, D>) -> Result<(), WqeFailure> {
    let fail = |s| (w.index, w.opcode, s);
    let signaled = w.fm_ce_se & wqe::ctrl_flags::CE_MASK == wqe::ctrl_flags::CQ_UPDATE;
    let Some(dest) = w.ud else {
        return Err(fail(Syndrome::LocalQpOpErr));
    };
    if payload_len(&w.payload) > u64::from(ctx.cfg.caps.max_mtu) {
        return Err(fail(Syndrome::LocalLengthErr));
    }
    let data = gather(qp, &w.payload, 0, payload_len(&w.payload), ctx).map_err(fail)?;
    let with_imm = w.opcode == WqeOpcode::SendImm;
    let opcode = if with_imm {
        BthOpcode::UdSendOnlyWithImmediate
    } else {
        BthOpcode::UdSendOnly
    };
    // A Q_Key with its top bit set means "use the QP's own".
    let qkey = if dest.qkey & 0x8000_0000 != 0 {
        qp.attrs.qkey.unwrap_or(0)
    } else {
        dest.qkey
    };
    let mut bth = BthRepr::new(opcode, Qpn::new(dest.dqpn), qp.next_psn);
    bth.solicited = w.fm_ce_se & wqe::ctrl_flags::SOLICITED != 0;
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey,
            src_qp: qp.qpn,
        }),
        immdt: with_imm.then_some(ImmDtRepr { imm: w.imm }),
        ..ExtHeaders::default()
    };
    if let Some(dst) = doorbell_wire::Gid::new(dest.dgid).to_ipv4() {
        emit(qp, ctx, dst, bth, ext, &data);
    }
    qp.next_psn = qp.next_psn.add(1);
    if signaled {
        complete(qp, w.index, w.opcode, 0, ctx);
    }
    Ok(())
}

/// Builds a frame from `qp` to `dst` and queues it for the port, ready
/// once the NIC has spent its per-packet cost.
pub(crate) fn emit<D: Dma>(
    qp: &Qp,
    ctx: &mut Ctx<'_, D>,
    dst: [u8; 4],
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) {
    let repr = RoceRepr {
        ip: RoceIp::v4(ctx.cfg.ipv4, dst),
        src_port: ctx
            .cfg
            .udp_src_port
            .unwrap_or(0xc000 | (qp.qpn.get() & 0x3fff) as u16),
        bth,
        ext,
    };
    let mut bytes = Vec::with_capacity(repr.frame_len(payload.len()));
    if repr.emit_to_vec(payload, &mut bytes).is_ok() {
        ctx.charge(ctx.cfg.timing.tx_packet);
        ctx.out.counters.tx_packets += 1;
        ctx.out.tx.push_back(Frame {
            dst,
            bytes,
            ready: ctx.t,
        });
    }
}

/// Destination IPv4 address of an RC QP.
pub(crate) fn peer_ip(qp: &Qp) -> Option<[u8; 4]> {
    qp.attrs
        .av
        .and_then(|av| doorbell_wire::Gid::new(av.dgid).to_ipv4())
}

/// Sends what the window allows of the outstanding messages: packets not
/// yet sent in this pass, while they stay within [`MAX_UNACKED_PSNS`] of
/// the oldest unacknowledged PSN. Payload is read from host memory for the
/// packets that go, so a long message is read as its window moves.
///
/// An error reading the payload is returned for [`fail_wqe`].
fn send_window<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Result<(), WqeFailure> {
    if qp.state != QpState::Rts || qp.rnr_resume.is_some() {
        return Ok(());
    }
    let una = qp.ack_psn.add(1);
    let mtu = u64::from(qp.mtu());
    let mut sent_any = false;
    for i in 0..qp.outstanding.len() {
        let m = &qp.outstanding[i];
        if m.is_sent() {
            continue;
        }
        let rd_atomic = m.is_read_or_atomic();
        // SENDs and WRITEs the responder has already acknowledged (behind a
        // READ still waiting for its data) are not sent again.
        if !rd_atomic && m.last_psn().precedes(una) {
            qp.outstanding[i].sent = m.npsn;
            continue;
        }
        let mut from = if m.opcode == WqeOpcode::RdmaRead {
            (m.done_bytes / mtu) as u32
        } else {
            m.sent
        };
        if !rd_atomic && m.first_psn.add(from).precedes(una) {
            from = una.diff(m.first_psn) as u32;
        }
        let psn = m.first_psn.add(from);
        let room = i64::from(MAX_UNACKED_PSNS) - i64::from(psn.diff(una));
        if room <= 0 {
            break;
        }
        let to = if rd_atomic {
            m.npsn
        } else {
            m.npsn.min(from.saturating_add(room as u32))
        };
        let payload = if rd_atomic {
            Vec::new()
        } else {
            let start = u64::from(from) * mtu;
            let end = (u64::from(to) * mtu).min(m.len);
            gather(qp, &m.payload, start, end.saturating_sub(start), ctx)
                .map_err(|s| (m.wqe_index, m.opcode, s))?
        };
        let m = &qp.outstanding[i];
        let count = transmit(qp, m, from, to, &payload, ctx);
        let end = psn.add(if rd_atomic { m.npsn - from } else { to - from });
        let old_high = qp.high_psn;
        let resent = old_high.diff(psn).clamp(0, count as i32) as u64;
        ctx.out.counters.tx_retransmits += resent;
        if end.diff(old_high) > 0 {
            qp.high_psn = end;
        }
        qp.outstanding[i].sent = to;
        sent_any = true;
        if to < qp.outstanding[i].npsn {
            break;
        }
    }
    if sent_any && qp.ack_deadline.is_none() {
        qp.ack_deadline = qp.ack_timeout().map(|t| ctx.now.add(t));
    }
    Ok(())
}

/// [`send_window`], completing the message whose payload cannot be read
/// in error.
fn send_or_fail<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    if let Err((index, opcode, s)) = send_window(qp, ctx) {
        fail_wqe(qp, index, opcode, s, ctx);
    }
}

/// Sends packets `from..to` of `msg`, whose bytes from packet `from` on
/// are `payload`; a READ is asked for from response `from` on. Returns the
/// number of packets sent.
fn transmit<D: Dma>(
    qp: &Qp,
    msg: &SentMsg,
    from: u32,
    to: u32,
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) -> u32 {
    let Some(dst) = peer_ip(qp) else { return 0 };
    let dqpn = qp.attrs.dest_qpn.unwrap_or_default();
    let mtu = qp.mtu() as usize;
    match msg.opcode {
        WqeOpcode::RdmaRead => {
            let skip = u64::from(from) * mtu as u64;
            let mut bth = BthRepr::new(BthOpcode::RcRdmaReadRequest, dqpn, msg.first_psn.add(from));
            bth.ack_req = true;
            let ext = ExtHeaders {
                reth: Some(RethRepr {
                    va: msg.raddr.wrapping_add(skip),
                    rkey: doorbell_types::Mkey::from_raw(msg.rkey),
                    dma_len: msg.len.saturating_sub(skip) as u32,
                }),
                ..ExtHeaders::default()
            };
            emit(qp, ctx, dst, bth, ext, &[]);
            1
        }
        WqeOpcode::AtomicCs | WqeOpcode::AtomicFa => {
            let op = if msg.opcode == WqeOpcode::AtomicCs {
                BthOpcode::RcCompareSwap
            } else {
                BthOpcode::RcFetchAdd
            };
            let mut bth = BthRepr::new(op, dqpn, msg.first_psn);
            bth.ack_req = true;
            let ext = ExtHeaders {
                atomic_eth: Some(AtomicEthRepr {
                    va: msg.raddr,
                    rkey: doorbell_types::Mkey::from_raw(msg.rkey),
                    swap_add: msg.swap_add,
                    compare: msg.compare,
                }),
                ..ExtHeaders::default()
            };
            emit(qp, ctx, dst, bth, ext, &[]);
            1
        }
        _ => {
            let is_write = matches!(msg.opcode, WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm);
            let has_imm = matches!(msg.opcode, WqeOpcode::SendImm | WqeOpcode::RdmaWriteImm);
            let n = msg.npsn;
            for i in from..to {
                let (first, last) = (i == 0, i + 1 == n);
                let op = request_opcode(is_write, has_imm, first, last);
                let mut bth = BthRepr::new(op, dqpn, msg.first_psn.add(i));
                // An ACK for the last packet, every ACK_EVERY_PACKETS inside
                // a long message, and where the window closes, so that an
                // ACK always comes back to open it again.
                bth.ack_req = last || i % ACK_EVERY_PACKETS == ACK_EVERY_PACKETS - 1 || i + 1 == to;
                bth.solicited = last && msg.solicited;
                let ext = ExtHeaders {
                    reth: (is_write && first).then_some(RethRepr {
                        va: msg.raddr,
                        rkey: doorbell_types::Mkey::from_raw(msg.rkey),
                        dma_len: msg.len as u32,
                    }),
                    immdt: (has_imm && last).then_some(ImmDtRepr { imm: msg.imm }),
                    ..ExtHeaders::default()
                };
                let start = ((i - from) as usize * mtu).min(payload.len());
                let end = ((i - from + 1) as usize * mtu).min(payload.len());
                emit(qp, ctx, dst, bth, ext, &payload[start..end]);
            }
            to - from
        }
    }
}

fn request_opcode(write: bool, imm: bool, first: bool, last: bool) -> BthOpcode {
    use BthOpcode::*;
    match (write, first, last, imm) {
        (false, true, true, false) => RcSendOnly,
        (false, true, true, true) => RcSendOnlyWithImmediate,
        (false, true, false, _) => RcSendFirst,
        (false, false, false, _) => RcSendMiddle,
        (false, false, true, false) => RcSendLast,
        (false, false, true, true) => RcSendLastWithImmediate,
        (true, true, true, false) => RcRdmaWriteOnly,
        (true, true, true, true) => RcRdmaWriteOnlyWithImmediate,
        (true, true, false, _) => RcRdmaWriteFirst,
        (true, false, false, _) => RcRdmaWriteMiddle,
        (true, false, true, false) => RcRdmaWriteLast,
        (true, false, true, true) => RcRdmaWriteLastWithImmediate,
    }
}

/// Writes a CQE to `cqn` and raises the events it causes.
pub(crate) fn write_cqe<D: Dma>(
    ctx: &mut Ctx<'_, D>,
    cqn: Cqn,
    qpn: Qpn,
    opcode: CqeOpcode,
    solicited: bool,
    fill: impl FnOnce(&mut doorbell_layout::cqe::Cqe64<&mut [u8]>),
) {
    let Some(cq) = ctx.cqs.get_mut(&cqn) else {
        return;
    };
    ctx.t = ctx.t.add(ctx.cfg.timing.cqe);
    ctx.busy = ctx.busy.add(ctx.cfg.timing.cqe);
    match cq.write(ctx.dma, &mut ctx.t, qpn, opcode, solicited, fill) {
        crate::cq::CqeWrite::Written { event: true } => {
            ctx.out.events.push_back(NicEvent::Completion(cqn))
        }
        crate::cq::CqeWrite::Written { event: false } => {}
        crate::cq::CqeWrite::Overrun | crate::cq::CqeWrite::DmaFault => {
            ctx.out.events.push_back(NicEvent::CqError(cqn))
        }
    }
}

/// A successful send-side completion.
fn complete<D: Dma>(qp: &Qp, index: u16, opcode: WqeOpcode, byte_cnt: u32, ctx: &mut Ctx<'_, D>) {
    let qpn = qp.qpn;
    write_cqe(ctx, qp.p.send_cq, qpn, CqeOpcode::Req, false, |c| {
        c.set_sop_qpn(u8::from(opcode), qpn.get());
        c.set_wqe_counter(index);
        c.set_byte_cnt(byte_cnt);
    });
}

fn error_cqe<D: Dma>(qp: &Qp, index: u16, opcode: WqeOpcode, s: Syndrome, ctx: &mut Ctx<'_, D>) {
    let qpn = qp.qpn;
    write_cqe(ctx, qp.p.send_cq, qpn, CqeOpcode::ReqErr, false, |c| {
        c.set_sop_qpn(u8::from(opcode), qpn.get());
        c.set_wqe_counter(index);
        c.set_syndrome(s, 0);
    });
}

/// Completes WQE `index` in error, moves the QP to ERR and flushes the rest.
///
/// Completions leave in posting order: messages posted before `index` and
/// still unacknowledged are flushed first, and `index` itself, if it is
/// still among the outstanding messages, completes only with the error.
pub(crate) fn fail_wqe<D: Dma>(
    qp: &mut Qp,
    index: u16,
    opcode: WqeOpcode,
    s: Syndrome,
    ctx: &mut Ctx<'_, D>,
) {
    while let Some(m) = qp.outstanding.front() {
        // Posting order modulo the 16-bit WQEBB counter: a send queue holds
        // at most 2^15 WQEBBs, so the distance fits an i16.
        let before = index.wrapping_sub(m.wqe_index) as i16;
        if before < 0 {
            break;
        }
        let m = qp.outstanding.pop_front().expect("front exists");
        if before > 0 {
            error_cqe(qp, m.wqe_index, m.opcode, Syndrome::WrFlushErr, ctx);
        }
    }
    error_cqe(qp, index, opcode, s, ctx);
    to_error(qp, ctx);
}

/// Moves a QP to ERR on its own and flushes both queues.
pub(crate) fn to_error<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    if qp.state != QpState::Err {
        qp.state = QpState::Err;
        ctx.out.events.push_back(NicEvent::QpFatal(qp.qpn));
    }
    flush(qp, ctx);
    crate::rq::flush(qp, ctx);
}

/// Completes every outstanding and posted send WQE with WR_FLUSH_ERR.
pub(crate) fn flush<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    while let Some(m) = qp.outstanding.pop_front() {
        error_cqe(qp, m.wqe_index, m.opcode, Syndrome::WrFlushErr, ctx);
    }
    while qp.sq_ci != qp.sq_pi {
        if qp.wqe_cache.is_empty() && !fetch_upto(qp, qp.sq_pi, ctx) {
            break;
        }
        let Some(head) = qp.wqe_cache.front() else {
            break;
        };
        let ctrl = CtrlSeg::new_unchecked(&head[..]);
        let (index, opcode, n) = (ctrl.wqe_index(), ctrl.opcode(), wqebbs_for_ds(ctrl.ds()));
        if n == 0 || n > qp.sq_pi.wrapping_sub(qp.sq_ci) || index != qp.sq_ci {
            break;
        }
        error_cqe(qp, index, opcode, Syndrome::WrFlushErr, ctx);
        for _ in 0..n {
            qp.wqe_cache.pop_front();
        }
        qp.sq_ci = qp.sq_ci.wrapping_add(n);
    }
    qp.wqe_cache.clear();
    qp.sq_ci = qp.sq_pi;
    qp.ack_deadline = None;
    qp.rnr_resume = None;
}

/// The PSN before `psn`.
fn prev(psn: Psn) -> Psn {
    psn.add(Psn::MASK)
}

/// Takes the responder's word that everything up to and including `psn`
/// arrived. Returns false for a PSN never sent (a forged or stale answer),
/// which changes nothing. Progress restarts the ACK timer and refills the
/// retry counters.
///
/// A READ or atomic still waiting for its response that this moves past
/// was executed by the responder and its response lost: it is asked for
/// again at once (an implied NAK). Only when the acknowledgement crosses
/// it: later ACKs past it say nothing new, and asking again on each would
/// have the responder resend a READ's remainder over and over.
fn note_ack<D: Dma>(qp: &mut Qp, psn: Psn, ctx: &mut Ctx<'_, D>) -> bool {
    if !psn.precedes(qp.high_psn) {
        return false;
    }
    let old = qp.ack_psn;
    if psn.diff(old) > 0 {
        qp.ack_psn = psn;
        let mtu = u64::from(qp.mtu());
        for m in qp.outstanding.iter_mut() {
            let crossed = m.last_psn().diff(old) > 0 && m.last_psn().diff(psn) <= 0;
            if !(crossed && m.is_read_or_atomic() && m.is_sent() && !m.answered) {
                continue;
            }
            let expect = if m.opcode == WqeOpcode::RdmaRead {
                m.first_psn.add((m.done_bytes / mtu) as u32)
            } else {
                m.first_psn
            };
            if m.implied_at != Some(expect) {
                m.implied_at = Some(expect);
                m.sent = 0;
                ctx.out.counters.implied_nak_seq_err += 1;
            }
        }
        made_progress(qp, ctx);
    }
    true
}

/// Completes, in posting order, the messages at the head that the
/// responder has acknowledged; a READ or atomic at the head completes once
/// its response is all in.
fn retire<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    while let Some(m) = qp.outstanding.front_mut() {
        if m.npsn == 0 {
            let m = qp.outstanding.pop_front().expect("front exists");
            if m.signaled {
                complete(qp, m.wqe_index, m.opcode, 0, ctx);
            }
            continue;
        }
        if m.is_read_or_atomic() && m.answered {
            let m = qp.outstanding.pop_front().expect("front exists");
            if m.signaled {
                let n = if m.opcode == WqeOpcode::RdmaRead {
                    m.len
                } else {
                    8
                };
                complete(qp, m.wqe_index, m.opcode, n as u32, ctx);
            }
            continue;
        }
        if m.is_read_or_atomic() {
            break;
        }
        let d = m.last_psn().diff(qp.ack_psn);
        if d > 0 {
            // Partly acknowledged: never send the acknowledged part again.
            let acked = qp.ack_psn.diff(m.first_psn) + 1;
            if acked > 0 {
                m.sent = m.sent.max(acked as u32);
            }
            break;
        }
        let m = qp.outstanding.pop_front().expect("front exists");
        if m.signaled {
            complete(qp, m.wqe_index, m.opcode, 0, ctx);
        }
    }
}

fn made_progress<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    qp.retry_left = qp.attrs.retry_cnt.unwrap_or(7);
    qp.rnr_left = qp.attrs.rnr_retry.unwrap_or(7);
    qp.nak_retry_psn = None;
    qp.ack_deadline = if qp.outstanding.is_empty() {
        None
    } else {
        qp.ack_timeout().map(|t| ctx.now.add(t))
    };
}

/// Handles an ACK, NAK, READ response or atomic ACK for `qp`.
pub(crate) fn handle_response<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) {
    if qp.p.qp_type != QpType::Rc || !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        ctx.out.counters.rx_dropped += 1;
        return;
    }
    let psn = repr.bth.psn;
    match repr.bth.opcode {
        BthOpcode::RcAck => {
            let Some(aeth) = repr.ext.aeth else { return };
            match aeth.syndrome {
                AethSyndrome::Ack { .. } => {
                    note_ack(qp, psn, ctx);
                }
                AethSyndrome::RnrNak { timer } => rnr_nak(qp, psn, timer, ctx),
                AethSyndrome::Nak(NakCode::PsnSeqErr) => {
                    ctx.out.counters.packet_seq_err += 1;
                    psn_seq_nak(qp, psn, ctx);
                }
                AethSyndrome::Nak(code) => {
                    let s = match code {
                        NakCode::InvalidRequest => Syndrome::RemoteInvalReqErr,
                        NakCode::RemoteAccessErr => Syndrome::RemoteAccessErr,
                        _ => Syndrome::RemoteOpErr,
                    };
                    if note_ack(qp, prev(psn), ctx) {
                        retire(qp, ctx);
                        fail_head(qp, s, ctx);
                    }
                }
            }
        }
        BthOpcode::RcRdmaReadResponseFirst
        | BthOpcode::RcRdmaReadResponseMiddle
        | BthOpcode::RcRdmaReadResponseLast
        | BthOpcode::RcRdmaReadResponseOnly => read_response(qp, repr, payload, ctx),
        BthOpcode::RcAtomicAck => atomic_ack(qp, repr, ctx),
        _ => ctx.out.counters.rx_dropped += 1,
    }
    if qp.state == QpState::Rts {
        retire(qp, ctx);
        pump(qp, ctx);
    }
}

/// An RNR NAK for `psn`: everything before it arrived; wait the timer the
/// responder names, then send again from `psn`.
fn rnr_nak<D: Dma>(qp: &mut Qp, psn: Psn, timer: u8, ctx: &mut Ctx<'_, D>) {
    if !note_ack(qp, prev(psn), ctx) {
        return;
    }
    if qp.rnr_resume.is_some_and(|(_, p)| p == psn) {
        // A copy of the NAK that started the wait.
        return;
    }
    retire(qp, ctx);
    if qp.rnr_left == 0 {
        ctx.out.counters.req_rnr_retries_exceeded += 1;
        fail_head(qp, Syndrome::RnrRetryExcErr, ctx);
        return;
    }
    if qp.rnr_left != 7 {
        qp.rnr_left -= 1;
    }
    ctx.out.counters.rnr_nak_retry_err += 1;
    let wait = doorbell_types::Duration::from_us(u64::from(RNR_TIMER_US[usize::from(timer & 31)]));
    qp.rnr_resume = Some((ctx.now.add(wait), psn));
    qp.ack_deadline = None;
}

/// A PSN-sequence-error NAK: the responder has everything before `psn` and
/// dropped what came after a gap; go back to `psn` (once per NAK, and not
/// during an RNR wait, whose timer resends anyway). Retries count against
/// `retry_cnt` as timeouts do.
fn psn_seq_nak<D: Dma>(qp: &mut Qp, psn: Psn, ctx: &mut Ctx<'_, D>) {
    if !note_ack(qp, prev(psn), ctx) {
        return;
    }
    retire(qp, ctx);
    if qp.rnr_resume.is_some() || qp.nak_retry_psn == Some(psn) || qp.outstanding.is_empty() {
        return;
    }
    if qp.retry_left == 0 {
        ctx.out.counters.req_transport_retries_exceeded += 1;
        fail_head(qp, Syndrome::TransportRetryExcErr, ctx);
        return;
    }
    qp.retry_left -= 1;
    qp.nak_retry_psn = Some(psn);
    retransmit_from(qp, psn, ctx);
}

fn atomic_ack<D: Dma>(qp: &mut Qp, repr: &RoceRepr, ctx: &mut Ctx<'_, D>) {
    let psn = repr.bth.psn;
    // Everything before the atomic is implicitly acknowledged.
    if !note_ack(qp, prev(psn), ctx) {
        return;
    }
    let Some(orig) = repr.ext.atomic_ack_eth.map(|a| a.orig) else {
        return;
    };
    let Some(i) = qp.outstanding.iter().position(|m| {
        matches!(m.opcode, WqeOpcode::AtomicCs | WqeOpcode::AtomicFa)
            && m.first_psn == psn
            && m.is_sent()
            && !m.answered
    }) else {
        return;
    };
    let m = &qp.outstanding[i];
    if let Err(s) = place(qp, &m.payload, 0, &orig.to_le_bytes(), ctx) {
        let (index, opcode) = (m.wqe_index, m.opcode);
        fail_wqe(qp, index, opcode, s, ctx);
        return;
    }
    qp.outstanding[i].answered = true;
    note_ack(qp, psn, ctx);
    made_progress(qp, ctx);
}

/// A READ response, for whichever outstanding READ it belongs to. Only
/// the next expected response of that READ is taken; one past a gap asks
/// for the rest again from the gap (once per gap); duplicates are dropped.
/// The READ completes when it is all in and everything before it has.
fn read_response<D: Dma>(qp: &mut Qp, repr: &RoceRepr, payload: &[u8], ctx: &mut Ctx<'_, D>) {
    let psn = repr.bth.psn;
    if !note_ack(qp, prev(psn), ctx) {
        return;
    }
    let mtu = u64::from(qp.mtu());
    let Some(i) = qp.outstanding.iter().position(|m| {
        m.opcode == WqeOpcode::RdmaRead && m.contains(psn) && m.is_sent() && !m.answered
    }) else {
        return;
    };
    let m = &mut qp.outstanding[i];
    let expect = m.first_psn.add((m.done_bytes / mtu) as u32);
    let ahead = psn.diff(expect);
    if ahead > 0 {
        if m.implied_at != Some(expect) {
            m.implied_at = Some(expect);
            m.sent = 0;
            ctx.out.counters.implied_nak_seq_err += 1;
        }
        return;
    }
    if ahead < 0 {
        return;
    }
    let last = matches!(
        repr.bth.opcode,
        BthOpcode::RcRdmaReadResponseLast | BthOpcode::RcRdmaReadResponseOnly
    );
    let (index, opcode) = (m.wqe_index, m.opcode);
    let end = m.done_bytes + payload.len() as u64;
    // Every response but the last carries exactly one MTU, and together
    // they carry exactly the length asked for.
    let bad = if last {
        end != m.len
    } else {
        payload.len() as u64 != mtu || end >= m.len
    };
    if bad {
        fail_wqe(qp, index, opcode, Syndrome::BadRespErr, ctx);
        return;
    }
    let offset = m.done_bytes;
    let m = &qp.outstanding[i];
    if let Err(s) = place(qp, &m.payload, offset, payload, ctx) {
        fail_wqe(qp, index, opcode, s, ctx);
        return;
    }
    let m = &mut qp.outstanding[i];
    m.done_bytes = end;
    m.answered = last;
    note_ack(qp, psn, ctx);
    made_progress(qp, ctx);
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
/// scatter, READ responses and atomic results.
pub(crate) fn scatter<D: Dma>(
    qp: &Qp,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
    ctx: &mut Ctx<'_, D>,
) -> Result<(), ScatterError> {
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Scatter);
    let mut skip = offset;
    let mut rest = data;
    for s in sges {
        if rest.is_empty() {
            break;
        }
        let sl = u64::from(s.len);
        if skip >= sl {
            skip -= sl;
            continue;
        }
        let n = (sl - skip).min(rest.len() as u64);
        let (now, later) = rest.split_at(n as usize);
        let addr = s.addr.checked_add(skip).ok_or(ScatterError::Protection)?;
        let mut ok = true;
        let dma = &mut *ctx.dma;
        let t = &mut ctx.t;
        ctx.mkeys
            .translate(
                doorbell_types::Mkey::from_raw(s.lkey),
                qp.p.pd,
                Access::LOCAL_WRITE,
                addr,
                n,
                |h, b, o| {
                    ok &= crate::dma_write(dma, t, tag, h, &now[o as usize..(o + b) as usize])
                },
            )
            .map_err(|_| ScatterError::Protection)?;
        if !ok {
            return Err(ScatterError::Protection);
        }
        rest = later;
        skip = 0;
    }
    if rest.is_empty() {
        Ok(())
    } else {
        Err(ScatterError::Length)
    }
}

/// Writes `data` at byte `offset` of a READ's or atomic's local buffers.
fn place<D: Dma>(
    qp: &Qp,
    p: &Payload,
    offset: u64,
    data: &[u8],
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

fn fail_head<D: Dma>(qp: &mut Qp, s: Syndrome, ctx: &mut Ctx<'_, D>) {
    match qp.outstanding.pop_front() {
        Some(m) => fail_wqe(qp, m.wqe_index, m.opcode, s, ctx),
        None => to_error(qp, ctx),
    }
}

/// Go-back-N: marks every packet from `psn` on to be sent again, and every
/// READ and atomic still waiting for its response to be asked for again
/// (from the first READ response not yet received), then sends what the
/// window allows and restarts the ACK timer.
fn retransmit_from<D: Dma>(qp: &mut Qp, psn: Psn, ctx: &mut Ctx<'_, D>) {
    for m in qp.outstanding.iter_mut() {
        if m.is_read_or_atomic() {
            if !m.answered {
                m.sent = 0;
            }
        } else if m.contains(psn) {
            m.sent = m.sent.min(psn.diff(m.first_psn) as u32);
        } else if !m.first_psn.precedes(psn) {
            m.sent = 0;
        }
    }
    qp.ack_deadline = qp.ack_timeout().map(|t| ctx.now.add(t));
    send_or_fail(qp, ctx);
}

/// When this QP's next timer fires.
pub(crate) fn next_deadline(qp: &Qp) -> Option<Instant> {
    [
        qp.ack_deadline,
        qp.rnr_resume.map(|(t, _)| t),
        qp.rq_flush_poll,
    ]
    .into_iter()
    .flatten()
    .min()
}

/// Fires the QP's timers that are due.
pub(crate) fn handle_timeout<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    if qp.state == QpState::Err {
        if qp.rq_flush_poll.is_some_and(|at| at <= ctx.now) {
            crate::rq::flush(qp, ctx);
        }
        return;
    }
    if qp.state != QpState::Rts {
        return;
    }
    if let Some((at, psn)) = qp.rnr_resume
        && at <= ctx.now
    {
        qp.rnr_resume = None;
        retransmit_from(qp, psn, ctx);
        pump(qp, ctx);
    }
    if let Some(at) = qp.ack_deadline
        && at <= ctx.now
    {
        if qp.outstanding.is_empty() {
            qp.ack_deadline = None;
            return;
        }
        if qp.retry_left == 0 {
            ctx.out.counters.req_transport_retries_exceeded += 1;
            fail_head(qp, Syndrome::TransportRetryExcErr, ctx);
            return;
        }
        ctx.out.counters.local_ack_timeout_err += 1;
        qp.retry_left -= 1;
        retransmit_from(qp, qp.ack_psn.add(1), ctx);
    }
}
