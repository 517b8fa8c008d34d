//! The receive side: receive-WQE fetch, scatter and receive CQEs, and the
//! responder half of RC (PSN checking, ACK/NAK, RNR, READ and atomic
//! execution, duplicates).

use doorbell_layout::cqe::{CqeOpcode, Syndrome};
use doorbell_layout::dbr;
use doorbell_layout::wqe::{DataSeg, field as wf};
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::{Mkey, Psn};
use doorbell_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, BthOpcode, BthRepr, ExtHeaders, NakCode, RoceRepr,
};

use crate::Ctx;
use crate::qp::{AtomicReplay, Qp, RecvInProgress, WriteInProgress};
use crate::sq::{ScatterError, Sge, emit, peer_ip, scatter, to_error, write_cqe};
use doorbell_hif::{Access, QpState, QpType};

/// Atomic results kept for replaying duplicates.
const ATOMIC_REPLAY_DEPTH: usize = 16;
/// Bytes of the GRH area a UD receive buffer starts with.
const GRH_LEN: usize = 40;
/// ACK syndrome credit field meaning "no credits advertised".
const CREDITS_INVALID: u8 = 0x1f;

/// A receive WQE taken from the RQ.
struct RecvWqe {
    index: u16,
    sges: Vec<Sge>,
}

/// Fetches the next receive WQE, reading the doorbell record when the
/// device's copy of the producer index says the RQ is empty.
fn next_recv_wqe<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Result<Option<RecvWqe>, ()> {
    if qp.rq_ci == qp.rq_pi {
        let mut w = [0u8; 4];
        let addr = qp.dbr_word(dbr::RCV_DBR).ok_or(())?;
        if !ctx.read(
            DmaTag::new(qp.qpn, DmaPurpose::DoorbellRecord),
            addr,
            &mut w,
        ) {
            return Err(());
        }
        let pi = u32::from_be_bytes(w) as u16;
        if u32::from(pi.wrapping_sub(qp.rq_ci)) > qp.rq_size {
            return Err(());
        }
        qp.rq_pi = pi;
        if qp.rq_ci == qp.rq_pi {
            return Ok(None);
        }
    }
    let index = qp.rq_ci;
    let slot = u64::from(u32::from(index) & (qp.rq_size - 1));
    let stride = qp.rq_stride as usize;
    let mut buf = vec![0u8; stride];
    let mut ok = true;
    let tag = DmaTag::new(qp.qpn, DmaPurpose::RecvWqe);
    let mut runs = Vec::new();
    if !qp.buf_runs(slot * stride as u64, stride as u64, |h, n, o| {
        runs.push((h, n, o))
    }) {
        return Err(());
    }
    for (h, n, o) in runs {
        ok &= ctx.read(tag, h, &mut buf[o as usize..(o + n) as usize]);
    }
    if !ok {
        return Err(());
    }
    let mut sges = Vec::new();
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
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    Ok(Some(RecvWqe { index, sges }))
}

/// A successful receive completion.
struct RecvDone {
    index: u16,
    opcode: CqeOpcode,
    byte_cnt: u32,
    imm: Option<u32>,
    solicited: bool,
    ud_src: Option<u32>,
}

fn recv_cqe<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, d: RecvDone) {
    let qpn = qp.qpn;
    write_cqe(ctx, qp.p.recv_cq, qpn, d.opcode, d.solicited, |c| {
        c.set_sop_qpn(0, qpn.get());
        c.set_wqe_counter(d.index);
        c.set_byte_cnt(d.byte_cnt);
        if let Some(imm) = d.imm {
            c.set_imm(imm);
        }
        if let Some(src) = d.ud_src {
            c.set_flags_rqpn(src, 0, 1);
        }
    });
}

fn recv_error_cqe<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, index: u16, s: Syndrome) {
    let qpn = qp.qpn;
    write_cqe(ctx, qp.p.recv_cq, qpn, CqeOpcode::RespErr, false, |c| {
        c.set_sop_qpn(0, qpn.get());
        c.set_wqe_counter(index);
        c.set_syndrome(s, 0);
    });
}

/// How often a QP in the error state looks for receives posted since its
/// last flush (there is no receive doorbell to tell it).
pub(crate) const ERR_RQ_POLL: doorbell_types::Duration = doorbell_types::Duration::from_us(1000);

/// Completes every posted receive WQE with WR_FLUSH_ERR; in the error state,
/// looks again after [`ERR_RQ_POLL`] for receives posted meanwhile.
pub(crate) fn flush<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    if qp.state == QpState::Err {
        qp.rq_flush_poll = Some(ctx.now.add(ERR_RQ_POLL));
    }
    if let Some(ip) = qp.recv_ip.take() {
        recv_error_cqe(qp, ctx, ip.wqe_index, Syndrome::WrFlushErr);
    }
    qp.write_ip = None;
    while let Ok(Some(w)) = next_recv_wqe(qp, ctx) {
        recv_error_cqe(qp, ctx, w.index, Syndrome::WrFlushErr);
    }
}

fn send_aeth<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, psn: Psn, syndrome: AethSyndrome) {
    let Some(dst) = peer_ip(qp) else { return };
    let bth = BthRepr::new(BthOpcode::RcAck, qp.attrs.dest_qpn.unwrap_or_default(), psn);
    let ext = ExtHeaders {
        aeth: Some(AethRepr {
            syndrome,
            msn: qp.msn,
        }),
        ..ExtHeaders::default()
    };
    emit(qp, ctx, dst, bth, ext, &[]);
}

fn ack<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, psn: Psn) {
    send_aeth(
        qp,
        ctx,
        psn,
        AethSyndrome::Ack {
            credits: CREDITS_INVALID,
        },
    );
}

/// A class-C/D responder error: NAK the request, complete what the error
/// consumed, and move the QP to ERR.
fn nak_fatal<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, psn: Psn, code: NakCode) {
    send_aeth(qp, ctx, psn, AethSyndrome::Nak(code));
    to_error(qp, ctx);
}

/// Handles a request packet for `qp`.
pub(crate) fn handle_request<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    ip_header: &[u8],
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) {
    match qp.p.qp_type {
        QpType::Ud => ud_receive(qp, repr, ip_header, payload, ctx),
        QpType::Rc => rc_request(qp, repr, payload, ctx),
    }
}

fn ud_receive<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    ip_header: &[u8],
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) {
    let op = repr.bth.opcode;
    let (Some(deth), true) = (
        repr.ext.deth,
        matches!(
            op,
            BthOpcode::UdSendOnly | BthOpcode::UdSendOnlyWithImmediate
        ),
    ) else {
        ctx.out.counters.rx_dropped += 1;
        return;
    };
    if !matches!(qp.state, QpState::Rtr | QpState::Rts) || Some(deth.qkey) != qp.attrs.qkey {
        ctx.out.counters.rx_dropped += 1;
        return;
    }
    let wqe = match next_recv_wqe(qp, ctx) {
        Ok(Some(w)) => w,
        Ok(None) => {
            // UD has no RNR: the datagram is dropped.
            ctx.out.counters.rx_dropped += 1;
            ctx.out.counters.out_of_buffer += 1;
            return;
        }
        Err(()) => {
            to_error(qp, ctx);
            return;
        }
    };
    // The GRH area: the IPv6 header, or for IPv4 20 zero bytes and then the
    // IPv4 header.
    let mut grh = [0u8; GRH_LEN];
    let n = ip_header.len().min(GRH_LEN);
    grh[GRH_LEN - n..].copy_from_slice(&ip_header[..n]);
    let placed = scatter(qp, &wqe.sges, 0, &grh, ctx)
        .and_then(|()| scatter(qp, &wqe.sges, GRH_LEN as u64, payload, ctx));
    match placed {
        Ok(()) => {
            let imm = repr.ext.immdt.map(|i| i.imm);
            let opcode = if imm.is_some() {
                CqeOpcode::RespSendImm
            } else {
                CqeOpcode::RespSend
            };
            let n = (GRH_LEN + payload.len()) as u32;
            recv_cqe(
                qp,
                ctx,
                RecvDone {
                    index: wqe.index,
                    opcode,
                    byte_cnt: n,
                    imm,
                    solicited: repr.bth.solicited,
                    ud_src: Some(deth.src_qp.get()),
                },
            );
        }
        Err(e) => {
            let s = if e == ScatterError::Length {
                Syndrome::LocalLengthErr
            } else {
                Syndrome::LocalProtErr
            };
            recv_error_cqe(qp, ctx, wqe.index, s);
            to_error(qp, ctx);
        }
    }
}

fn rc_request<D: Dma>(qp: &mut Qp, repr: &RoceRepr, payload: &[u8], ctx: &mut Ctx<'_, D>) {
    if !matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
        ctx.out.counters.rx_dropped += 1;
        return;
    }
    let bth = repr.bth;
    let psn = bth.psn;
    let d = psn.diff(qp.epsn);
    if d > 0 {
        ctx.out.counters.out_of_sequence += 1;
        if !qp.nak_sent {
            qp.nak_sent = true;
            send_aeth(qp, ctx, qp.epsn, AethSyndrome::Nak(NakCode::PsnSeqErr));
        }
        return;
    }
    if d < 0 {
        duplicate(qp, repr, ctx);
        return;
    }
    qp.nak_sent = false;
    use BthOpcode::*;
    match bth.opcode {
        RcSendFirst
        | RcSendMiddle
        | RcSendLast
        | RcSendLastWithImmediate
        | RcSendOnly
        | RcSendOnlyWithImmediate => inbound_send(qp, repr, payload, ctx),
        RcRdmaWriteFirst
        | RcRdmaWriteMiddle
        | RcRdmaWriteLast
        | RcRdmaWriteLastWithImmediate
        | RcRdmaWriteOnly
        | RcRdmaWriteOnlyWithImmediate => inbound_write(qp, repr, payload, ctx),
        RcRdmaReadRequest => inbound_read(qp, repr, ctx, true),
        RcCompareSwap | RcFetchAdd => inbound_atomic(qp, repr, ctx),
        _ => nak_fatal(qp, ctx, psn, NakCode::InvalidRequest),
    }
}

fn inbound_send<D: Dma>(qp: &mut Qp, repr: &RoceRepr, payload: &[u8], ctx: &mut Ctx<'_, D>) {
    use BthOpcode::*;
    let bth = repr.bth;
    let op = bth.opcode;
    let first = matches!(op, RcSendFirst | RcSendOnly | RcSendOnlyWithImmediate);
    let last = !matches!(op, RcSendFirst | RcSendMiddle);
    if first {
        if qp.recv_ip.is_some() || qp.write_ip.is_some() {
            nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
            return;
        }
        match next_recv_wqe(qp, ctx) {
            Ok(Some(w)) => {
                qp.recv_ip = Some(RecvInProgress {
                    wqe_index: w.index,
                    sges: w.sges,
                    offset: 0,
                    imm: None,
                });
            }
            Ok(None) => {
                ctx.out.counters.rnr_nak_sent += 1;
                ctx.out.counters.out_of_buffer += 1;
                let timer = qp.attrs.min_rnr_timer.unwrap_or(0);
                send_aeth(qp, ctx, bth.psn, AethSyndrome::RnrNak { timer });
                return;
            }
            Err(()) => {
                nak_fatal(qp, ctx, bth.psn, NakCode::RemoteOpErr);
                return;
            }
        }
    } else if qp.recv_ip.is_none() {
        nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
        return;
    }
    let Some(ip) = qp.recv_ip.take() else { return };
    if let Err(e) = scatter(qp, &ip.sges, ip.offset, payload, ctx) {
        let (s, code) = match e {
            ScatterError::Length => (Syndrome::LocalLengthErr, NakCode::InvalidRequest),
            ScatterError::Protection => (Syndrome::LocalProtErr, NakCode::RemoteOpErr),
        };
        recv_error_cqe(qp, ctx, ip.wqe_index, s);
        nak_fatal(qp, ctx, bth.psn, code);
        return;
    }
    let offset = ip.offset + payload.len() as u64;
    qp.epsn = qp.epsn.add(1);
    if last {
        qp.msn = (qp.msn + 1) & 0x00ff_ffff;
        let imm = repr.ext.immdt.map(|i| i.imm).or(ip.imm);
        let opcode = if imm.is_some() {
            CqeOpcode::RespSendImm
        } else {
            CqeOpcode::RespSend
        };
        recv_cqe(
            qp,
            ctx,
            RecvDone {
                index: ip.wqe_index,
                opcode,
                byte_cnt: offset as u32,
                imm,
                solicited: bth.solicited,
                ud_src: None,
            },
        );
    } else {
        qp.recv_ip = Some(RecvInProgress { offset, ..ip });
    }
    if bth.ack_req {
        ack(qp, ctx, bth.psn);
    }
}

fn inbound_write<D: Dma>(qp: &mut Qp, repr: &RoceRepr, payload: &[u8], ctx: &mut Ctx<'_, D>) {
    use BthOpcode::*;
    let bth = repr.bth;
    let op = bth.opcode;
    let first = matches!(
        op,
        RcRdmaWriteFirst | RcRdmaWriteOnly | RcRdmaWriteOnlyWithImmediate
    );
    let last = !matches!(op, RcRdmaWriteFirst | RcRdmaWriteMiddle);
    let with_imm = matches!(
        op,
        RcRdmaWriteLastWithImmediate | RcRdmaWriteOnlyWithImmediate
    );
    if first {
        if qp.recv_ip.is_some() || qp.write_ip.is_some() {
            nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
            return;
        }
        let Some(reth) = repr.ext.reth else {
            nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
            return;
        };
        let allowed = qp
            .attrs
            .access
            .unwrap_or_default()
            .allows(Access::REMOTE_WRITE);
        let key_ok = ctx
            .mkeys
            .translate(
                reth.rkey,
                qp.p.pd,
                Access::REMOTE_WRITE,
                reth.va,
                reth.dma_len.into(),
                |_, _, _| {},
            )
            .is_ok();
        if !allowed || !key_ok {
            nak_fatal(qp, ctx, bth.psn, NakCode::RemoteAccessErr);
            return;
        }
        qp.write_ip = Some(WriteInProgress {
            va: reth.va,
            rkey: reth.rkey.raw(),
            len: reth.dma_len.into(),
            offset: 0,
        });
    }
    let Some(w) = qp.write_ip.take() else {
        nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
        return;
    };
    let end = w.offset + payload.len() as u64;
    if end > w.len || (last && end != w.len) {
        nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
        return;
    }
    // An immediate needs a receive WQE: look for it before touching memory,
    // so that an RNR NAK leaves nothing half done.
    let recv = if last && with_imm {
        match next_recv_wqe(qp, ctx) {
            Ok(Some(r)) => Some(r),
            Ok(None) => {
                ctx.out.counters.rnr_nak_sent += 1;
                ctx.out.counters.out_of_buffer += 1;
                let timer = qp.attrs.min_rnr_timer.unwrap_or(0);
                send_aeth(qp, ctx, bth.psn, AethSyndrome::RnrNak { timer });
                if !first {
                    qp.write_ip = Some(w);
                }
                return;
            }
            Err(()) => {
                nak_fatal(qp, ctx, bth.psn, NakCode::RemoteOpErr);
                return;
            }
        }
    } else {
        None
    };
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Scatter);
    let mut ok = true;
    let dma = &mut *ctx.dma;
    let t = &mut ctx.t;
    let translated = ctx.mkeys.translate(
        Mkey::from_raw(w.rkey),
        qp.p.pd,
        Access::REMOTE_WRITE,
        w.va + w.offset,
        payload.len() as u64,
        |h, n, o| ok &= crate::dma_write(dma, t, tag, h, &payload[o as usize..(o + n) as usize]),
    );
    if translated.is_err() || !ok {
        nak_fatal(qp, ctx, bth.psn, NakCode::RemoteAccessErr);
        return;
    }
    qp.epsn = qp.epsn.add(1);
    if last {
        qp.msn = (qp.msn + 1) & 0x00ff_ffff;
        ctx.out.counters.rx_write_requests += 1;
        if let Some(r) = recv {
            let imm = repr.ext.immdt.map(|i| i.imm);
            recv_cqe(
                qp,
                ctx,
                RecvDone {
                    index: r.index,
                    opcode: CqeOpcode::RespWrImm,
                    byte_cnt: w.len as u32,
                    imm,
                    solicited: bth.solicited,
                    ud_src: None,
                },
            );
        }
    } else {
        qp.write_ip = Some(WriteInProgress { offset: end, ..w });
    }
    if bth.ack_req {
        ack(qp, ctx, bth.psn);
    }
}

/// Executes a READ request: `fresh` is false for a duplicate, which is
/// answered again without moving the responder's state.
fn inbound_read<D: Dma>(qp: &mut Qp, repr: &RoceRepr, ctx: &mut Ctx<'_, D>, fresh: bool) {
    let psn = repr.bth.psn;
    let Some(reth) = repr.ext.reth else {
        nak_fatal(qp, ctx, psn, NakCode::InvalidRequest);
        return;
    };
    let allowed = qp
        .attrs
        .access
        .unwrap_or_default()
        .allows(Access::REMOTE_READ);
    let len = u64::from(reth.dma_len);
    // The length comes from the wire: check it, then key and range, before
    // allocating. A READ longer than the largest message is an invalid
    // request, as for hardware, even where the key covers it.
    if len > crate::sq::MAX_MSG_LEN {
        nak_fatal(qp, ctx, psn, NakCode::InvalidRequest);
        return;
    }
    let mut runs = Vec::new();
    let translated = ctx.mkeys.translate(
        reth.rkey,
        qp.p.pd,
        Access::REMOTE_READ,
        reth.va,
        len,
        |h, n, o| runs.push((h, n, o)),
    );
    if !allowed || translated.is_err() {
        nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
        return;
    }
    let mut data = vec![0u8; len as usize];
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Payload);
    let mut ok = true;
    for (h, n, o) in runs {
        ok &= ctx.read(tag, h, &mut data[o as usize..(o + n) as usize]);
    }
    if !ok {
        nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
        return;
    }
    let mtu = qp.mtu() as usize;
    let n = data.len().div_ceil(mtu).max(1) as u32;
    ctx.out.counters.rx_read_requests += 1;
    if fresh {
        qp.msn = (qp.msn + 1) & 0x00ff_ffff;
        qp.epsn = qp.epsn.add(n);
    }
    let Some(dst) = peer_ip(qp) else { return };
    let dqpn = qp.attrs.dest_qpn.unwrap_or_default();
    for i in 0..n {
        use BthOpcode::*;
        let op = match (i == 0, i + 1 == n) {
            (true, true) => RcRdmaReadResponseOnly,
            (true, false) => RcRdmaReadResponseFirst,
            (false, false) => RcRdmaReadResponseMiddle,
            (false, true) => RcRdmaReadResponseLast,
        };
        let bth = BthRepr::new(op, dqpn, psn.add(i));
        let with_aeth = !matches!(op, RcRdmaReadResponseMiddle);
        let ext = ExtHeaders {
            aeth: with_aeth.then_some(AethRepr {
                syndrome: AethSyndrome::Ack {
                    credits: CREDITS_INVALID,
                },
                msn: qp.msn,
            }),
            ..ExtHeaders::default()
        };
        let start = (i as usize * mtu).min(data.len());
        let end = ((i as usize + 1) * mtu).min(data.len());
        emit(qp, ctx, dst, bth, ext, &data[start..end]);
    }
}

fn inbound_atomic<D: Dma>(qp: &mut Qp, repr: &RoceRepr, ctx: &mut Ctx<'_, D>) {
    let psn = repr.bth.psn;
    let Some(a) = repr.ext.atomic_eth else {
        nak_fatal(qp, ctx, psn, NakCode::InvalidRequest);
        return;
    };
    if a.va % 8 != 0 {
        nak_fatal(qp, ctx, psn, NakCode::InvalidRequest);
        return;
    }
    let allowed = qp
        .attrs
        .access
        .unwrap_or_default()
        .allows(Access::REMOTE_ATOMIC);
    let mut host = None;
    let translated = ctx.mkeys.translate(
        a.rkey,
        qp.p.pd,
        Access::REMOTE_ATOMIC,
        a.va,
        8,
        |h, n, _| {
            if n == 8 {
                host = Some(h);
            }
        },
    );
    let (Some(h), true, Ok(())) = (host, allowed, translated) else {
        nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
        return;
    };
    // Read-modify-write of the 64-bit word, in the responder's byte order,
    // one at a time per address bucket.
    let bucket = a.va / ctx.cfg.timing.atomic_bucket_bytes.max(1);
    if let Some(&free) = ctx.atomic_free.get(&bucket) {
        ctx.t = ctx.t.max(free);
    }
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Atomic);
    let mut b = [0u8; 8];
    if !ctx.read(tag, h, &mut b) {
        nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
        return;
    }
    let orig = u64::from_le_bytes(b);
    let new = if repr.bth.opcode == BthOpcode::RcCompareSwap {
        if orig == a.compare { a.swap_add } else { orig }
    } else {
        orig.wrapping_add(a.swap_add)
    };
    if (new != orig || repr.bth.opcode == BthOpcode::RcFetchAdd)
        && !ctx.write(tag, h, &new.to_le_bytes())
    {
        nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
        return;
    }
    ctx.charge(ctx.cfg.timing.atomic);
    ctx.atomic_free.insert(bucket, ctx.t);
    ctx.out.counters.rx_atomic_requests += 1;
    qp.msn = (qp.msn + 1) & 0x00ff_ffff;
    qp.epsn = qp.epsn.add(1);
    if qp.atomic_replay.len() == ATOMIC_REPLAY_DEPTH {
        qp.atomic_replay.pop_front();
    }
    qp.atomic_replay.push_back(AtomicReplay { psn, orig });
    atomic_ack(qp, ctx, psn, orig);
}

fn atomic_ack<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, psn: Psn, orig: u64) {
    let Some(dst) = peer_ip(qp) else { return };
    let bth = BthRepr::new(
        BthOpcode::RcAtomicAck,
        qp.attrs.dest_qpn.unwrap_or_default(),
        psn,
    );
    let ext = ExtHeaders {
        aeth: Some(AethRepr {
            syndrome: AethSyndrome::Ack {
                credits: CREDITS_INVALID,
            },
            msn: qp.msn,
        }),
        atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
        ..ExtHeaders::default()
    };
    emit(qp, ctx, dst, bth, ext, &[]);
}

/// A request behind the expected PSN: answer it again, never re-execute
/// anything but a READ.
fn duplicate<D: Dma>(qp: &mut Qp, repr: &RoceRepr, ctx: &mut Ctx<'_, D>) {
    ctx.out.counters.duplicate_request += 1;
    let psn = repr.bth.psn;
    match repr.bth.opcode {
        BthOpcode::RcRdmaReadRequest => inbound_read(qp, repr, ctx, false),
        BthOpcode::RcCompareSwap | BthOpcode::RcFetchAdd => {
            if let Some(r) = qp.atomic_replay.iter().find(|r| r.psn == psn) {
                let orig = r.orig;
                atomic_ack(qp, ctx, psn, orig);
            }
        }
        _ => {
            if repr.bth.ack_req {
                let last = qp.epsn.add(Psn::MASK);
                ack(qp, ctx, last);
            }
        }
    }
}
