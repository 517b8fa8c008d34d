//! The receive engine, the responder half of RC and UC and UD receive: the
//! PSN checks ([`doorbell_roce::Responder`] decides for RC), receive-WQE
//! use and scatter, RDMA WRITE placement, READ and atomic execution,
//! ACK/NAK/RNR answers, duplicates, and receive completions.
//!
//! UC (IBTA §9.7.5.2.4, and rxe's UC responder): a packet out of sequence
//! never NAKs; it aborts the message in progress, whose receive WQE is kept
//! for the next SEND, and everything up to the next First or Only packet
//! is dropped. A First or Only packet starts a message at its own PSN.

use doorbell_hif::{Access, QpState, QpType};
use doorbell_layout::cqe::{CqeOpcode, Syndrome};
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_roce::{CREDITS_INVALID, RequestPsn};
use doorbell_types::{HostAddr, Mkey, Psn};
use doorbell_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, BthOpcode, BthRepr, ExtHeaders, NakCode, RoceRepr,
};

use crate::cqe::{RecvDone, recv_done, recv_error};
use crate::ctx::Ctx;
use crate::dma::{PayloadIn, dma_write, write_payload};
use crate::emit::{self, aeth_headers, peer_ip};
use crate::fault::{Fault, Outcome};
use crate::fetch::{RecvFetchError, next_recv_wqe};
use crate::mkey::MkeyTable;
use crate::owed;
use crate::qp::Qp;
use crate::sge::{MAX_MSG_LEN, ScatterError, scatter};
use crate::wq::{Answer, Owed, ReadOwed, RecvInProgress, RecvWqe, WriteInProgress};

/// Bytes of the GRH area a UD receive buffer starts with.
const GRH_LEN: usize = 40;

/// What a UD CQE reports of the packet in its SL bits: a RoCEv2 frame
/// (UDP) with an IPv4 header (20 bytes) or an IPv6 one (40).
fn roce_pkt_type(ip_header: &[u8]) -> u8 {
    use doorbell_layout::cqe::{ROCE_PKT_IPV4, ROCE_PKT_IPV6, ROCE_PKT_UDP};
    let l3 = if ip_header.first().is_some_and(|b| b >> 4 == 6) {
        ROCE_PKT_IPV6
    } else {
        ROCE_PKT_IPV4
    };
    ROCE_PKT_UDP | l3
}

/// The transport bits of a BTH opcode (reference A.2): 000 for RC.
const RC_TRANSPORT_MASK: u8 = 0xe0;

/// Sends an ACK or NAK of `psn` with `syndrome` now, or behind the READ
/// responses the QP still owes (the `owed` module).
fn send_aeth<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, psn: Psn, syndrome: AethSyndrome) {
    let Some(dst) = peer_ip(qp) else { return };
    let repr = aeth_headers(qp, ctx, dst, psn, syndrome).repr();
    if qp.owed.is_empty() {
        emit::emit_repr(ctx, dst, repr, &[]);
    } else {
        owed::behind(qp, ctx, Answer::Packet(repr));
    }
}

/// A plain ACK's syndrome.
const ACK: AethSyndrome = AethSyndrome::Ack {
    credits: CREDITS_INVALID,
};

/// ACKs `psn` for `qp`. The ACK is held, not built
/// ([`crate::ctx::Outputs::held_ack`]): if the next frame for the port is
/// another ACK of the same QP (packets of one burst, handled before any
/// frame left), that one replaces it: ACKs are cumulative, so the later
/// says all the earlier did, as a NIC that coalesces ACKs sends it.
///
/// Behind READ responses the QP still owes (the `owed` module), the ACK
/// waits in their queue, where a later ACK replaces it the same way.
#[inline]
fn ack<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, psn: Psn) {
    let Some(dst) = peer_ip(qp) else { return };
    ctx.charge(ctx.cfg.timing.tx_packet);
    let held = aeth_headers(qp, ctx, dst, psn, ACK);
    if !qp.owed.is_empty() {
        let owed = Answer::Ack {
            psn,
            aeth: held.aeth,
            ready: held.ready,
            held_ends: ctx.out.held_ends,
        };
        owed::behind(qp, ctx, owed);
        return;
    }
    let out = &mut *ctx.out;
    if out.held_ack.as_ref().is_some_and(|h| h.qpn == qp.qpn) {
        out.counters.acks_coalesced += 1;
        out.held_ack = Some(held);
    } else {
        // Another QP's ACK is built first, in its place.
        out.push_held(held);
        out.counters.tx_packets += 1;
    }
}

/// A class-C/D responder error: NAK the request, complete what the error
/// consumed, and move the QP to ERR. Behind the READ responses the QP
/// still owes, the NAK waits its turn, the QP takes no more requests, and
/// it goes to ERR once the NAK has left (the `owed` module).
fn nak_fatal<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, psn: Psn, code: NakCode) -> Outcome {
    let access_error = code == NakCode::RemoteAccessErr;
    send_aeth(qp, ctx, psn, AethSyndrome::Nak(code));
    if !qp.owed.is_empty() {
        // Counted when it leaves: the QP may yet go to ERR another way.
        owed::end_after(qp, ctx, access_error);
        return Ok(());
    }
    if access_error {
        ctx.out.counters.resp_remote_access_errors += 1;
    }
    Err(Fault::Qp)
}

/// Handles a request packet for `qp`.
pub(crate) fn handle_request<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    ip_header: &[u8],
    payload: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    if !qp.is_from_peer(&repr.ip) {
        ctx.out.counters.rx_dropped += 1;
        return Ok(());
    }
    // Only an RC WRITE's or SEND's payload may be left in memory: the
    // others carry theirs.
    let carried = payload.in_frame().unwrap_or_default();
    match qp.p.qp_type {
        QpType::Ud => ud_receive(qp, repr, ip_header, carried, ctx),
        QpType::Uc => uc_request(qp, repr, carried, ctx),
        // A packet of another transport (UC, UD, a CNP) is silently
        // dropped, as the opcode check of IBTA Vol 1 §9.6 says: the top
        // three bits of an RC opcode are 000.
        QpType::Rc if u8::from(repr.bth.opcode) & RC_TRANSPORT_MASK != 0 => {
            ctx.out.counters.rx_dropped += 1;
            Ok(())
        }
        QpType::Rc => rc_request(qp, repr, payload, ctx),
    }
}

/// Drops a UC packet and the rest of its message.
fn uc_drop<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Outcome {
    qp.inbound.abort();
    qp.inbound.uc_drop = true;
    ctx.out.counters.rx_dropped += 1;
    Ok(())
}

fn uc_request<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    use BthOpcode::*;
    let bth = repr.bth;
    let op = bth.opcode.uc_as_rc();
    let (Some(op), true) = (op, qp.takes_requests()) else {
        ctx.out.counters.rx_dropped += 1;
        return Ok(());
    };
    let start = matches!(
        op,
        RcSendFirst
            | RcSendOnly
            | RcSendOnlyWithImmediate
            | RcRdmaWriteFirst
            | RcRdmaWriteOnly
            | RcRdmaWriteOnlyWithImmediate
    );
    let is_send = matches!(
        op,
        RcSendFirst
            | RcSendMiddle
            | RcSendLast
            | RcSendLastWithImmediate
            | RcSendOnly
            | RcSendOnlyWithImmediate
    );
    let in_seq = bth.psn == qp.resp.epsn();
    if !in_seq {
        ctx.out.counters.out_of_sequence += 1;
    }
    if start {
        // A new message, at its own PSN; one in progress is given up.
        if !in_seq || qp.inbound.recv.is_some() || qp.inbound.write.is_some() {
            qp.inbound.abort();
        }
        qp.inbound.uc_drop = false;
        qp.resp.set_psn(bth.psn);
    } else {
        let continues = if is_send {
            qp.inbound.recv.is_some()
        } else {
            qp.inbound.write.is_some()
        };
        if !in_seq || qp.inbound.uc_drop || !continues {
            return uc_drop(qp, ctx);
        }
    }
    if is_send {
        uc_send(qp, repr, op, payload, ctx)
    } else {
        uc_write(qp, repr, op, payload, ctx)
    }
}

/// The receive WQE for a new UC message: the one an aborted SEND left, or
/// the next posted.
fn uc_recv_wqe<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Result<Option<RecvWqe>, Fault> {
    if let Some(w) = qp.inbound.spare.take() {
        return Ok(Some(w));
    }
    next_recv_wqe(qp, ctx).map_err(|RecvFetchError| Fault::Qp)
}

fn uc_send<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    op: BthOpcode,
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    use BthOpcode::*;
    let first = matches!(op, RcSendFirst | RcSendOnly | RcSendOnlyWithImmediate);
    let last = !matches!(op, RcSendFirst | RcSendMiddle);
    if first {
        let Some(w) = uc_recv_wqe(qp, ctx)? else {
            // No receive WQE: UC has no RNR, the message is dropped.
            ctx.out.counters.out_of_buffer += 1;
            return uc_drop(qp, ctx);
        };
        qp.inbound.recv = Some(RecvInProgress {
            wqe_index: w.index,
            sges: w.sges,
            offset: 0,
            imm: None,
        });
    }
    let Some(ip) = qp.inbound.recv.take() else {
        return uc_drop(qp, ctx);
    };
    if let Err(e) = scatter(qp, &ip.sges, ip.offset, PayloadIn::Frame(payload), ctx) {
        // A local error of the receiver (class D): the WQE completes in
        // error and the QP goes to ERR, as for UD.
        let s = if e == ScatterError::Length {
            Syndrome::LocalLengthErr
        } else {
            Syndrome::LocalProtErr
        };
        recv_error(qp, ctx, ip.wqe_index, s);
        return Err(Fault::Qp);
    }
    let offset = ip.offset + payload.len() as u64;
    qp.resp.advance(1);
    if last {
        send_message_done(qp, ctx, repr, &ip, offset);
        ctx.out.payloads.recycle_sges(ip.sges);
    } else {
        qp.inbound.recv = Some(RecvInProgress { offset, ..ip });
    }
    Ok(())
}

/// Completes the receive WQE of a SEND on its last packet (RC and UC):
/// `offset` bytes placed, with the immediate if the message carried one.
fn send_message_done<D: Dma>(
    qp: &Qp,
    ctx: &mut Ctx<'_, D>,
    repr: &RoceRepr,
    ip: &RecvInProgress,
    offset: u64,
) {
    let imm = repr.ext.immdt.map(|i| i.imm).or(ip.imm);
    let opcode = if imm.is_some() {
        CqeOpcode::RespSendImm
    } else {
        CqeOpcode::RespSend
    };
    recv_done(
        qp,
        ctx,
        RecvDone {
            index: ip.wqe_index,
            opcode,
            byte_cnt: offset as u32,
            imm,
            solicited: repr.bth.solicited,
            ud_src: None,
        },
    );
}

fn uc_write<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    op: BthOpcode,
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    use BthOpcode::*;
    let bth = repr.bth;
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
        // A WRITE longer than the largest message is dropped whole.
        let Some(reth) = repr
            .ext
            .reth
            .filter(|r| u64::from(r.dma_len) <= MAX_MSG_LEN)
        else {
            return uc_drop(qp, ctx);
        };
        let allowed = qp
            .attrs
            .access
            .unwrap_or_default()
            .allows(Access::REMOTE_WRITE);
        // A WRITE of no bytes checks neither key nor address (IBTA C9-88):
        // programs send them to flush or probe a connection (UCX does).
        let key_ok = reth.dma_len == 0
            || ctx
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
            // UC answers nothing: a WRITE the responder may not do is
            // dropped whole.
            return uc_drop(qp, ctx);
        }
        qp.inbound.write = Some(WriteInProgress {
            va: reth.va,
            rkey: reth.rkey.raw(),
            len: reth.dma_len.into(),
            offset: 0,
        });
    }
    let Some(w) = qp.inbound.write.take() else {
        return uc_drop(qp, ctx);
    };
    let end = w.offset + payload.len() as u64;
    if end > w.len || (last && end != w.len) {
        // More or less data than the RETH said: UC has no NAK, and the
        // message is dropped whole, the QP left as it is (class D1).
        return uc_drop(qp, ctx);
    }
    let Some(va) = w.va.checked_add(w.offset) else {
        return uc_drop(qp, ctx);
    };
    // An immediate needs a receive WQE: found before touching memory, so
    // that a message without one leaves its last packet unwritten.
    let recv = if last && with_imm {
        match uc_recv_wqe(qp, ctx)? {
            Some(r) => Some(r),
            None => {
                ctx.out.counters.out_of_buffer += 1;
                return uc_drop(qp, ctx);
            }
        }
    } else {
        None
    };
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Scatter);
    let mut ok = true;
    let dma = &mut *ctx.dma;
    let t = &mut ctx.t;
    let translated = if payload.is_empty() {
        Ok(())
    } else {
        ctx.mkeys
            .translate(
                Mkey::from_raw(w.rkey),
                qp.p.pd,
                Access::REMOTE_WRITE,
                va,
                payload.len() as u64,
                |h, n, o| ok &= dma_write(dma, t, tag, h, &payload[o as usize..(o + n) as usize]),
            )
            .map(|_| ())
    };
    if translated.is_err() || !ok {
        if let Some(r) = recv {
            qp.inbound.spare = Some(r);
        }
        return uc_drop(qp, ctx);
    }
    qp.resp.advance(1);
    if last {
        ctx.out.counters.rx_write_requests += 1;
        if let Some(r) = recv {
            recv_done(
                qp,
                ctx,
                RecvDone {
                    index: r.index,
                    opcode: CqeOpcode::RespWrImm,
                    byte_cnt: w.len as u32,
                    imm: repr.ext.immdt.map(|i| i.imm),
                    solicited: bth.solicited,
                    ud_src: None,
                },
            );
            ctx.out.payloads.recycle_sges(r.sges);
        }
    } else {
        qp.inbound.write = Some(WriteInProgress { offset: end, ..w });
    }
    Ok(())
}

fn ud_receive<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    ip_header: &[u8],
    payload: &[u8],
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    let op = repr.bth.opcode;
    let (Some(deth), true) = (
        repr.ext.deth,
        matches!(
            op,
            BthOpcode::UdSendOnly | BthOpcode::UdSendOnlyWithImmediate
        ),
    ) else {
        ctx.out.counters.rx_dropped += 1;
        return Ok(());
    };
    if !matches!(qp.state, QpState::Rtr | QpState::Rts) || Some(deth.qkey) != qp.attrs.qkey {
        ctx.out.counters.rx_dropped += 1;
        return Ok(());
    }
    let wqe = match next_recv_wqe(qp, ctx) {
        Ok(Some(w)) => w,
        Ok(None) => {
            // UD has no RNR: the datagram is dropped.
            ctx.out.counters.rx_dropped += 1;
            ctx.out.counters.out_of_buffer += 1;
            return Ok(());
        }
        Err(RecvFetchError) => return Err(Fault::Qp),
    };
    // The GRH area: the IPv6 header, or for IPv4 20 zero bytes and then the
    // IPv4 header.
    let mut grh = [0u8; GRH_LEN];
    let n = ip_header.len().min(GRH_LEN);
    grh[GRH_LEN - n..].copy_from_slice(&ip_header[..n]);
    let placed = scatter(qp, &wqe.sges, 0, PayloadIn::Frame(&grh), ctx).and_then(|()| {
        scatter(
            qp,
            &wqe.sges,
            GRH_LEN as u64,
            PayloadIn::Frame(payload),
            ctx,
        )
    });
    ctx.out.payloads.recycle_sges(wqe.sges);
    match placed {
        Ok(()) => {
            let imm = repr.ext.immdt.map(|i| i.imm);
            let opcode = if imm.is_some() {
                CqeOpcode::RespSendImm
            } else {
                CqeOpcode::RespSend
            };
            let n = (GRH_LEN + payload.len()) as u32;
            recv_done(
                qp,
                ctx,
                RecvDone {
                    index: wqe.index,
                    opcode,
                    byte_cnt: n,
                    imm,
                    solicited: repr.bth.solicited,
                    ud_src: Some((deth.src_qp.get(), roce_pkt_type(ip_header))),
                },
            );
            Ok(())
        }
        Err(e) => {
            let s = if e == ScatterError::Length {
                Syndrome::LocalLengthErr
            } else {
                Syndrome::LocalProtErr
            };
            recv_error(qp, ctx, wqe.index, s);
            Err(Fault::Qp)
        }
    }
}

fn rc_request<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    payload: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    if !qp.takes_requests() {
        ctx.out.counters.rx_dropped += 1;
        return Ok(());
    }
    let bth = repr.bth;
    let psn = bth.psn;
    match qp.resp.handle_psn(psn) {
        RequestPsn::OutOfSequence { nak } => {
            ctx.out.counters.out_of_sequence += 1;
            if let Some(epsn) = nak {
                send_aeth(qp, ctx, epsn, AethSyndrome::Nak(NakCode::PsnSeqErr));
            }
            return Ok(());
        }
        RequestPsn::Duplicate => return duplicate(qp, repr, ctx),
        RequestPsn::Expected => {}
    }
    if !fits_path_mtu(bth.opcode, payload.len(), qp.mtu()) {
        return nak_fatal(qp, ctx, psn, NakCode::InvalidRequest);
    }
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
        // A READ or atomic inside a SEND or WRITE of several packets is
        // out of the opcode sequence (IBTA §9.7.5.1.1; rxe's
        // `check_op_seq`): an invalid request.
        RcRdmaReadRequest | RcCompareSwap | RcFetchAdd
            if qp.inbound.recv.is_some() || qp.inbound.write.is_some() =>
        {
            nak_fatal(qp, ctx, psn, NakCode::InvalidRequest)
        }
        RcRdmaReadRequest => inbound_read(qp, repr, ctx, true),
        RcCompareSwap | RcFetchAdd => inbound_atomic(qp, repr, ctx),
        _ => nak_fatal(qp, ctx, psn, NakCode::InvalidRequest),
    }
}

/// The responder's length check against the path MTU (IBTA Vol 1 §9.7.4,
/// responder behaviour; rxe's `check_length`): a First or Middle packet
/// carries exactly one PMTU of payload, a Last between one byte and one
/// PMTU, an Only at most one PMTU. A packet that does not is an invalid
/// request (a class C error: NAK, and the QP goes to ERR).
fn fits_path_mtu(op: BthOpcode, len: usize, mtu: u32) -> bool {
    use BthOpcode::*;
    let mtu = mtu as usize;
    match op {
        RcSendFirst | RcSendMiddle | RcRdmaWriteFirst | RcRdmaWriteMiddle => len == mtu,
        RcSendLast | RcSendLastWithImmediate | RcRdmaWriteLast | RcRdmaWriteLastWithImmediate => {
            (1..=mtu).contains(&len)
        }
        _ => len <= mtu,
    }
}

fn inbound_send<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    payload: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    use BthOpcode::*;
    let bth = repr.bth;
    let op = bth.opcode;
    let first = matches!(op, RcSendFirst | RcSendOnly | RcSendOnlyWithImmediate);
    let last = !matches!(op, RcSendFirst | RcSendMiddle);
    if first {
        if qp.inbound.recv.is_some() || qp.inbound.write.is_some() {
            return nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
        }
        match next_recv_wqe(qp, ctx) {
            Ok(Some(w)) => {
                qp.inbound.recv = Some(RecvInProgress {
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
                return Ok(());
            }
            Err(RecvFetchError) => {
                return nak_fatal(qp, ctx, bth.psn, NakCode::RemoteOpErr);
            }
        }
    } else if qp.inbound.recv.is_none() {
        return nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
    }
    let Some(ip) = qp.inbound.recv.take() else {
        return Ok(());
    };
    if let Err(e) = scatter(qp, &ip.sges, ip.offset, payload, ctx) {
        let (s, code) = match e {
            ScatterError::Length => (Syndrome::LocalLengthErr, NakCode::InvalidRequest),
            ScatterError::Protection => (Syndrome::LocalProtErr, NakCode::RemoteOpErr),
        };
        recv_error(qp, ctx, ip.wqe_index, s);
        return nak_fatal(qp, ctx, bth.psn, code);
    }
    let offset = ip.offset + payload.len() as u64;
    qp.resp.advance(1);
    if last {
        qp.resp.complete_message();
        send_message_done(qp, ctx, repr, &ip, offset);
        ctx.out.payloads.recycle_sges(ip.sges);
    } else {
        qp.inbound.recv = Some(RecvInProgress { offset, ..ip });
    }
    if bth.ack_req {
        ack(qp, ctx, bth.psn);
    }
    Ok(())
}

fn inbound_write<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    payload: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
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
        if qp.inbound.recv.is_some() || qp.inbound.write.is_some() {
            return nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
        }
        // A WRITE longer than the largest message is an invalid request,
        // as a READ is.
        let Some(reth) = repr
            .ext
            .reth
            .filter(|r| u64::from(r.dma_len) <= MAX_MSG_LEN)
        else {
            return nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
        };
        let allowed = qp
            .attrs
            .access
            .unwrap_or_default()
            .allows(Access::REMOTE_WRITE);
        // A WRITE of no bytes checks neither key nor address (IBTA C9-88).
        // Nor, here, does a WRITE ONLY whose payload is its whole message
        // within one page: the translation that writes it below makes the
        // same checks, and the same NAK, before it writes anything (one
        // page: one run, written once the walk is done).
        let checked_by_its_write = last
            && !with_imm
            && u64::from(reth.dma_len) == payload.len() as u64
            && reth.va % doorbell_host::PAGE_SIZE + u64::from(reth.dma_len)
                <= doorbell_host::PAGE_SIZE;
        let key_ok = reth.dma_len == 0
            || checked_by_its_write
            || ctx
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
            return nak_fatal(qp, ctx, bth.psn, NakCode::RemoteAccessErr);
        }
        qp.inbound.write = Some(WriteInProgress {
            va: reth.va,
            rkey: reth.rkey.raw(),
            len: reth.dma_len.into(),
            offset: 0,
        });
    }
    let Some(w) = qp.inbound.write.take() else {
        return nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
    };
    let end = w.offset + payload.len() as u64;
    if end > w.len || (last && end != w.len) {
        return nak_fatal(qp, ctx, bth.psn, NakCode::InvalidRequest);
    }
    // The first packet's key check covered `va..va + len`: the sum cannot
    // overflow, but the address came from the wire.
    let Some(va) = w.va.checked_add(w.offset) else {
        return nak_fatal(qp, ctx, bth.psn, NakCode::RemoteAccessErr);
    };
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
                    qp.inbound.write = Some(w);
                }
                return Ok(());
            }
            Err(RecvFetchError) => {
                return nak_fatal(qp, ctx, bth.psn, NakCode::RemoteOpErr);
            }
        }
    } else {
        None
    };
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Scatter);
    let mut ok = true;
    let dma = &mut *ctx.dma;
    let t = &mut ctx.t;
    let translated = if payload.is_empty() {
        Ok(())
    } else {
        ctx.mkeys
            .translate(
                Mkey::from_raw(w.rkey),
                qp.p.pd,
                Access::REMOTE_WRITE,
                va,
                payload.len() as u64,
                |h, n, o| {
                    let (o, n) = (o as usize, n as usize);
                    ok &= write_payload(dma, t, tag, h, payload, o..o + n);
                },
            )
            .map(|_| ())
    };
    if translated.is_err() || !ok {
        // The receive WQE taken for the immediate completes flushed, with
        // the QP's error, rather than be lost with the message.
        if let Some(r) = recv {
            qp.inbound.spare = Some(r);
        }
        return nak_fatal(qp, ctx, bth.psn, NakCode::RemoteAccessErr);
    }
    qp.resp.advance(1);
    if last {
        qp.resp.complete_message();
        ctx.out.counters.rx_write_requests += 1;
        if let Some(r) = recv {
            let imm = repr.ext.immdt.map(|i| i.imm);
            recv_done(
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
            ctx.out.payloads.recycle_sges(r.sges);
        }
    } else {
        qp.inbound.write = Some(WriteInProgress { offset: end, ..w });
    }
    if bth.ack_req {
        ack(qp, ctx, bth.psn);
    }
    Ok(())
}

/// Where the payloads of a run's MIDDLEs after its first packet go
/// ([`crate::Unfilled::segments`]: `n` RDMA WRITE MIDDLE packets of `len`
/// bytes, the first with the
/// headers `repr`, the others at the PSNs after it): the host address of
/// the first one's bytes, if taking the packets one by one would take
/// each as the expected next packet of the WRITE in progress and write
/// them one after another into one run of host memory. `None` if any
/// would be taken otherwise (out of order, past the WRITE's end, refused
/// by its key, or written into pages apart): the caller then takes them
/// one by one.
pub(crate) fn write_run_target(
    qp: &Qp,
    repr: &RoceRepr,
    n: u32,
    len: usize,
    mkeys: &MkeyTable,
) -> Option<HostAddr> {
    let bth = repr.bth;
    let w = qp.inbound.write.as_ref()?;
    // What `handle_request`, `rc_request` and `inbound_write` check of
    // each packet, for all of them at once.
    let taken = qp.p.qp_type == QpType::Rc
        && qp.takes_requests()
        && bth.opcode == BthOpcode::RcRdmaWriteMiddle
        && !bth.ack_req
        && qp.is_from_peer(&repr.ip)
        && bth.psn == qp.resp.epsn()
        && fits_path_mtu(bth.opcode, len, qp.mtu())
        && len > 0;
    let bytes = u64::from(n).checked_mul(len as u64)?;
    let end = w.offset.checked_add(bytes)?;
    if !taken || end > w.len {
        return None;
    }
    let va = w.va.checked_add(w.offset)?;
    let mut runs = 0;
    let mut at = None;
    mkeys
        .translate(
            Mkey::from_raw(w.rkey),
            qp.p.pd,
            Access::REMOTE_WRITE,
            va,
            bytes,
            |h, _, _| {
                runs += 1;
                at = Some(h);
            },
        )
        .ok()?;
    at.filter(|_| runs == 1)
}

/// Takes the `n` packets of `len` bytes that [`write_run_target`] found
/// to be taken as expected, once their bytes are written: moves the
/// responder's PSN and the WRITE's offset past them, as taking each would.
pub(crate) fn took_write_run(qp: &mut Qp, n: u32, len: usize) {
    // Each at the PSN expected: the first closes any gap, as it would.
    let expected = qp.resp.handle_psn(qp.resp.epsn());
    debug_assert!(matches!(expected, RequestPsn::Expected));
    qp.resp.advance(n);
    if let Some(w) = &mut qp.inbound.write {
        w.offset += u64::from(n) * len as u64;
    }
}

/// Where the payloads of a train's RDMA WRITE ONLY packets go, for as
/// many of `headers` (handed over with the frame `bytes`,
/// [`crate::Frame::headers`]) from the first on as taking each alone would
/// take as a WRITE that `qp` executes whole: the expected next request,
/// from its peer, with a payload of at least a byte that is its whole
/// message, which its key lets it write into one run of host memory (one
/// DMA write, as [`inbound_write`] makes it). Each goes in
/// `to`, with its payload's bytes in the frame. Stops at the first packet
/// that would be taken otherwise (another QP's, out of order, refused,
/// with an immediate, or written across pages apart): that one and those after
/// are taken one by one. The checks are those of `Nic::handle_parsed_frame`,
/// [`handle_request`], [`rc_request`] and [`inbound_write`], made once for
/// the QP and once for each packet.
pub(crate) fn write_only_targets(
    qp: &Qp,
    headers: &[crate::config::PacketHeaders],
    bytes: &[u8],
    mkeys: &MkeyTable,
    to: &mut Vec<doorbell_host::Placed>,
) {
    to.clear();
    let takes = qp.p.qp_type == QpType::Rc
        && qp.takes_requests()
        && qp.inbound.recv.is_none()
        && qp.inbound.write.is_none()
        && peer_ip(qp).is_some()
        && qp
            .attrs
            .access
            .unwrap_or_default()
            .allows(Access::REMOTE_WRITE);
    if !takes {
        return;
    }
    let mtu = qp.mtu();
    let mut psn = qp.resp.epsn();
    for h in headers {
        let bth = &h.repr.bth;
        // (The opcode first: what the entry must fit is then known.)
        if bth.opcode != BthOpcode::RcRdmaWriteOnly {
            return;
        }
        let (Some(reth), Some(payload)) = (h.repr.ext.reth, h.payload_in(bytes)) else {
            return;
        };
        let len = payload.len();
        let fits = bth.dest_qp == qp.qpn
            && bth.psn == psn
            && len > 0
            && fits_path_mtu(bth.opcode, len, mtu)
            && u64::from(reth.dma_len) == len as u64
            && qp.is_from_peer(&h.repr.ip);
        if !fits {
            return;
        }
        // One run of host memory: its key checked, its write one DMA.
        let (mut runs, mut host) = (0, None);
        let translated = mkeys.translate(
            reth.rkey,
            qp.p.pd,
            Access::REMOTE_WRITE,
            reth.va,
            len as u64,
            |h, _, _| {
                runs += 1;
                host = Some(h);
            },
        );
        let (Ok(_), Some(host), 1) = (translated, host, runs) else {
            return;
        };
        to.push(doorbell_host::Placed {
            to: host,
            from: h.payload.clone(),
        });
        psn = psn.add(1);
    }
}

/// Takes a WRITE ONLY packet with the BTH `bth` that
/// [`write_only_targets`] found `qp` executes whole, once its payload is
/// written: moves the responder on and answers as [`inbound_write`] would.
pub(crate) fn took_write_only<D: Dma>(qp: &mut Qp, bth: &BthRepr, ctx: &mut Ctx<'_, D>) {
    let expected = qp.resp.handle_psn(bth.psn);
    debug_assert!(matches!(expected, RequestPsn::Expected));
    qp.resp.advance(1);
    qp.resp.complete_message();
    ctx.out.counters.rx_write_requests += 1;
    if bth.ack_req {
        ack(qp, ctx, bth.psn);
    }
}

// The responder remembers as many READs as a QP may have outstanding.
const _: () = assert!(doorbell_roce::READ_REPLAY_DEPTH == doorbell_hif::MAX_RD_ATOMIC as usize);
const _: () = assert!(doorbell_roce::ATOMIC_REPLAY_DEPTH == doorbell_hif::MAX_RD_ATOMIC as usize);

/// Executes a READ request: `fresh` is false for a duplicate, which is
/// answered again without moving the responder's state.
fn inbound_read<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    ctx: &mut Ctx<'_, D>,
    fresh: bool,
) -> Outcome {
    let psn = repr.bth.psn;
    // A duplicate repeats a READ this QP already took, which passed these
    // checks: one that fails them is no copy of it (a forged or garbled
    // packet behind the window) and is dropped, leaving the QP as it is,
    // as mlx5 and rxe drop a duplicate READ that matches no READ they hold.
    let refuse = |qp: &mut Qp, ctx: &mut Ctx<'_, D>, code| {
        if fresh {
            nak_fatal(qp, ctx, psn, code)
        } else {
            ctx.out.counters.rx_dropped += 1;
            Ok(())
        }
    };
    let Some(reth) = repr.ext.reth else {
        return refuse(qp, ctx, NakCode::InvalidRequest);
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
    if len > MAX_MSG_LEN {
        return refuse(qp, ctx, NakCode::InvalidRequest);
    }
    // A READ of no bytes checks neither key nor address, as a WRITE of none.
    let translated = if len == 0 {
        Ok(())
    } else {
        ctx.mkeys
            .translate(
                reth.rkey,
                qp.p.pd,
                Access::REMOTE_READ,
                reth.va,
                len,
                |_, _, _| {},
            )
            .map(|_| ())
    };
    if !allowed || translated.is_err() {
        return refuse(qp, ctx, NakCode::RemoteAccessErr);
    }
    let mtu = u64::from(qp.mtu());
    let n = len.div_ceil(mtu).max(1) as u32;
    // A duplicate is answered only where it repeats (all or the rest of) a
    // READ this QP took: its responses were sent before, and are owed.
    if !fresh && !qp.resp.read_taken(psn, n) {
        ctx.out.counters.rx_dropped += 1;
        return Ok(());
    }
    let mut r = ReadOwed {
        psn,
        n,
        next: 0,
        va: reth.va,
        rkey: reth.rkey,
        len,
        msn: 0,
        fresh,
    };
    // As many responses as the burst allows are built now, their reads
    // checked before the READ is taken; none while the QP owes answers
    // before this READ's.
    let room = if qp.owed.is_empty() {
        owed::read_room(ctx)
    } else {
        0
    };
    if !owed::build_read(qp, ctx, &mut r, room) {
        return refuse(qp, ctx, NakCode::RemoteAccessErr);
    }
    ctx.out.counters.rx_read_requests += 1;
    if fresh {
        qp.resp.record_read(psn, n);
        qp.resp.complete_message();
        qp.resp.advance(n);
    }
    r.msn = qp.resp.msn();
    owed::send_built(qp, ctx, r.msn);
    if r.next < r.n {
        qp.owed.push_back(Owed::Read(r));
        owed::note_owing(qp, ctx);
    }
    Ok(())
}

fn inbound_atomic<D: Dma>(qp: &mut Qp, repr: &RoceRepr, ctx: &mut Ctx<'_, D>) -> Outcome {
    let psn = repr.bth.psn;
    let Some(a) = repr.ext.atomic_eth else {
        return nak_fatal(qp, ctx, psn, NakCode::InvalidRequest);
    };
    if a.va % 8 != 0 {
        return nak_fatal(qp, ctx, psn, NakCode::InvalidRequest);
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
        return nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
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
        return nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
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
        return nak_fatal(qp, ctx, psn, NakCode::RemoteAccessErr);
    }
    ctx.charge(ctx.cfg.timing.atomic);
    ctx.atomic_free.insert(bucket, ctx.t);
    ctx.out.counters.rx_atomic_requests += 1;
    qp.resp.complete_message();
    qp.resp.advance(1);
    qp.resp.record_atomic(psn, orig);
    atomic_ack(qp, ctx, psn, orig);
    Ok(())
}

fn atomic_ack<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, psn: Psn, orig: u64) {
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
            msn: qp.resp.msn(),
        }),
        atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
        ..ExtHeaders::default()
    };
    let repr = emit::repr(qp, ctx, dst, bth, ext);
    if qp.owed.is_empty() {
        emit::emit_repr(ctx, dst, repr, &[]);
    } else {
        owed::behind(qp, ctx, Answer::Packet(repr));
    }
}

/// A request behind the expected PSN: answer it again, never re-execute
/// anything but a READ.
fn duplicate<D: Dma>(qp: &mut Qp, repr: &RoceRepr, ctx: &mut Ctx<'_, D>) -> Outcome {
    ctx.out.counters.duplicate_request += 1;
    let psn = repr.bth.psn;
    match repr.bth.opcode {
        BthOpcode::RcRdmaReadRequest => inbound_read(qp, repr, ctx, false),
        BthOpcode::RcCompareSwap | BthOpcode::RcFetchAdd => {
            if let Some(orig) = qp.resp.replay_atomic(psn) {
                atomic_ack(qp, ctx, psn, orig);
            }
            Ok(())
        }
        _ => {
            if repr.bth.ack_req {
                ack(qp, ctx, qp.resp.last_psn());
            }
            Ok(())
        }
    }
}
