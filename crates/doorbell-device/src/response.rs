//! Response handling, the requester's inbound half of RC: ACKs, NAKs, READ
//! responses and atomic ACKs, and the requester's timers. The transport
//! decisions are [`doorbell_roce::Requester`]'s; this engine applies them
//! to the outstanding messages, places response data and completes.

use doorbell_hif::{QpState, QpType};
use doorbell_layout::cqe::Syndrome;
use doorbell_layout::wqe::WqeOpcode;
use doorbell_pcie::Dma;
use doorbell_roce::{Ack, AckTimeout, AdaptiveTimeout, RnrNak, SeqNak, prev};
use doorbell_types::Psn;
use doorbell_wire::{AethSyndrome, BthOpcode, NakCode, RoceRepr};

use crate::complete::{flush_rq, retire};
use crate::ctx::Ctx;
use crate::dma::PayloadIn;
use crate::fault::{Fault, Outcome};
use crate::qp::Qp;
use crate::sge::place;
use crate::transmit::{hold_adaptive, resend_early, retransmit_from};

/// What the NIC does after response handling or a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Then {
    /// Nothing more.
    Done,
    /// The window may have opened: run the send engine.
    Pump,
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
    let old = match qp.req.handle_ack(psn) {
        Ack::Stale => return false,
        Ack::Old => return true,
        Ack::Advanced { from } => from,
    };
    let mtu = u64::from(qp.mtu());
    // Only READs and atomics are asked again: none, nothing to look at.
    let scan = if qp.sq.reads > 0 {
        qp.sq.outstanding.len()
    } else {
        0
    };
    for m in qp.sq.outstanding.iter_mut().take(scan) {
        let crossed = m.psns.crossed_by(old, psn);
        if !(crossed && m.is_read_or_atomic() && m.is_sent() && !m.answered) {
            continue;
        }
        let expect = m.expected_response(mtu);
        if m.implied.ask_again(expect) {
            m.sent = 0;
            qp.sq.unsent_from = 0;
            ctx.out.counters.implied_nak_seq_err += 1;
        }
    }
    made_progress(qp, ctx);
    true
}

/// The ACK timer restarts while something sent still waits for its answer
/// and stops otherwise, as the IBA's transport timer does: a PSN past the
/// acknowledged one (a packet not ACKed, a READ response not in), or a
/// READ or atomic asked for whose answer is not all in (one asked again
/// after an ACK went past it waits on PSNs already acknowledged). The
/// messages just acknowledged are still in the send queue here (they
/// complete after this), so counting them would leave the timer running
/// from this ACK, and a message posted later would inherit its deadline.
fn made_progress<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    let waiting = qp.req.una() != qp.req.high_psn()
        || qp.sq.reads > 0
            && qp
                .sq
                .outstanding
                .iter()
                .any(|m| m.is_read_or_atomic() && m.sent > 0 && !m.answered);
    qp.req.made_progress(ctx.now, waiting);
    hold_adaptive(qp, ctx.now);
}

/// Handles an ACK, NAK, READ response or atomic ACK for `qp`.
pub(crate) fn handle_response<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    payload: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome<Then> {
    if qp.p.qp_type != QpType::Rc
        || !matches!(qp.state, QpState::Rts | QpState::Sqd)
        || !qp.is_from_peer(&repr.ip)
    {
        ctx.out.counters.rx_dropped += 1;
        return Ok(Then::Done);
    }
    let psn = repr.bth.psn;
    match repr.bth.opcode {
        BthOpcode::RcAck => {
            let Some(aeth) = repr.ext.aeth else {
                return Ok(Then::Done);
            };
            // A NAK names the request it refuses, one sent and not yet
            // acknowledged; any other is a ghost, forged or stale, and is
            // dropped without acting on it (IBTA Vol 1 §9.7: a response
            // whose PSN names no outstanding request is silently dropped;
            // rxe's completer drops those behind the oldest unacked PSN).
            let unacked = !psn.precedes(qp.req.una()) && psn.precedes(qp.req.high_psn());
            if !matches!(aeth.syndrome, AethSyndrome::Ack { .. }) && !unacked {
                return Ok(Then::Done);
            }
            match aeth.syndrome {
                AethSyndrome::Ack { .. } => {
                    note_ack(qp, psn, ctx);
                }
                AethSyndrome::RnrNak { timer } => rnr_nak(qp, psn, timer, ctx)?,
                AethSyndrome::Nak(NakCode::PsnSeqErr) => {
                    ctx.out.counters.packet_seq_err += 1;
                    psn_seq_nak(qp, psn, ctx)?;
                }
                AethSyndrome::Nak(code) => {
                    let s = match code {
                        NakCode::InvalidRequest => Syndrome::RemoteInvalReqErr,
                        NakCode::RemoteAccessErr => Syndrome::RemoteAccessErr,
                        _ => Syndrome::RemoteOpErr,
                    };
                    if note_ack(qp, prev(psn), ctx) {
                        match code {
                            NakCode::InvalidRequest => {
                                ctx.out.counters.req_remote_invalid_request += 1;
                            }
                            NakCode::RemoteAccessErr => {
                                ctx.out.counters.req_remote_access_errors += 1;
                            }
                            _ => {}
                        }
                        retire(qp, ctx);
                        return Err(Fault::Head(s));
                    }
                }
            }
        }
        BthOpcode::RcRdmaReadResponseFirst
        | BthOpcode::RcRdmaReadResponseMiddle
        | BthOpcode::RcRdmaReadResponseLast
        | BthOpcode::RcRdmaReadResponseOnly => read_response(qp, repr, payload, ctx)?,
        BthOpcode::RcAtomicAck => atomic_ack(qp, repr, ctx)?,
        _ => ctx.out.counters.rx_dropped += 1,
    }
    if qp.state == QpState::Rts {
        retire(qp, ctx);
        return Ok(Then::Pump);
    }
    Ok(Then::Done)
}

/// An RNR NAK for `psn`: everything before it arrived; wait the timer the
/// responder names, then send again from `psn`.
fn rnr_nak<D: Dma>(qp: &mut Qp, psn: Psn, timer: u8, ctx: &mut Ctx<'_, D>) -> Outcome {
    if !note_ack(qp, prev(psn), ctx) || qp.req.is_rnr_copy(psn) {
        return Ok(());
    }
    retire(qp, ctx);
    match qp.req.handle_rnr_nak(ctx.now, psn, timer) {
        RnrNak::Copy => Ok(()),
        RnrNak::Exhausted => {
            ctx.out.counters.req_rnr_retries_exceeded += 1;
            Err(Fault::Head(Syndrome::RnrRetryExcErr))
        }
        RnrNak::Wait => {
            ctx.out.counters.rnr_nak_retry_err += 1;
            Ok(())
        }
    }
}

/// A PSN-sequence-error NAK: the responder has everything before `psn` and
/// dropped what came after a gap; go back to `psn` (once per NAK, and not
/// during an RNR wait, whose timer resends anyway). Retries count against
/// `retry_cnt` as timeouts do.
fn psn_seq_nak<D: Dma>(qp: &mut Qp, psn: Psn, ctx: &mut Ctx<'_, D>) -> Outcome {
    if !note_ack(qp, prev(psn), ctx) {
        return Ok(());
    }
    retire(qp, ctx);
    match qp.req.handle_seq_nak(psn, !qp.sq.outstanding.is_empty()) {
        SeqNak::Ignore => Ok(()),
        SeqNak::Exhausted => {
            ctx.out.counters.req_transport_retries_exceeded += 1;
            Err(Fault::Head(Syndrome::TransportRetryExcErr))
        }
        SeqNak::GoBack(from) => retransmit_from(qp, from, ctx),
    }
}

fn atomic_ack<D: Dma>(qp: &mut Qp, repr: &RoceRepr, ctx: &mut Ctx<'_, D>) -> Outcome {
    let psn = repr.bth.psn;
    // Everything before the atomic is implicitly acknowledged, if the
    // atomic's PSN was sent at all.
    if !psn.precedes(qp.req.high_psn()) || !note_ack(qp, prev(psn), ctx) {
        return Ok(());
    }
    let Some(orig) = repr.ext.atomic_ack_eth.map(|a| a.orig) else {
        return Ok(());
    };
    let Some(i) = qp.sq.outstanding.iter().position(|m| {
        matches!(m.opcode, WqeOpcode::AtomicCs | WqeOpcode::AtomicFa)
            && m.first_psn() == psn
            && m.is_sent()
            && !m.answered
    }) else {
        return Ok(());
    };
    let m = &qp.sq.outstanding[i];
    let (index, opcode) = (m.wqe_index, m.opcode);
    let orig = orig.to_le_bytes();
    if let Err(syndrome) = place(qp, &m.payload, 0, PayloadIn::Frame(&orig), ctx) {
        // What the response acknowledged before the atomic completes as
        // it would have; the atomic, and what is still unacknowledged
        // before it, then fail.
        retire(qp, ctx);
        return Err(Fault::Wqe {
            index,
            opcode,
            syndrome,
        });
    }
    qp.sq.outstanding[i].answered = true;
    note_ack(qp, psn, ctx);
    made_progress(qp, ctx);
    Ok(())
}

/// A READ response, for whichever outstanding READ it belongs to. Only
/// the next expected response of that READ is taken; one past a gap asks
/// for the rest again from the gap (once per gap); duplicates are dropped.
/// The READ completes when it is all in and everything before it has.
fn read_response<D: Dma>(
    qp: &mut Qp,
    repr: &RoceRepr,
    payload: PayloadIn<'_>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    let psn = repr.bth.psn;
    // A response at a PSN never sent answers no READ: a ghost, which must
    // not acknowledge what came before it either.
    if !psn.precedes(qp.req.high_psn()) || !note_ack(qp, prev(psn), ctx) {
        return Ok(());
    }
    let mtu = u64::from(qp.mtu());
    let Some(i) = qp.sq.outstanding.iter().position(|m| {
        m.opcode == WqeOpcode::RdmaRead && m.psns.contains(psn) && m.is_sent() && !m.answered
    }) else {
        return Ok(());
    };
    let m = &mut qp.sq.outstanding[i];
    let expect = m.expected_response(mtu);
    let ahead = psn.diff(expect);
    if ahead > 0 {
        if m.implied.ask_again(expect) {
            m.sent = 0;
            qp.sq.unsent_from = 0;
            ctx.out.counters.implied_nak_seq_err += 1;
        }
        return Ok(());
    }
    if ahead < 0 {
        return Ok(());
    }
    let last = matches!(
        repr.bth.opcode,
        BthOpcode::RcRdmaReadResponseLast | BthOpcode::RcRdmaReadResponseOnly
    );
    let (index, opcode) = (m.wqe_index, m.opcode);
    let fail = |syndrome| Fault::Wqe {
        index,
        opcode,
        syndrome,
    };
    let end = m.done_bytes + payload.len() as u64;
    // Every response but the last carries exactly one MTU, and together
    // they carry exactly the length asked for.
    let bad = if last {
        end != m.len
    } else {
        payload.len() as u64 != mtu || end >= m.len
    };
    // On a bad response, what it acknowledged before the READ completes
    // as it would have; the READ, and what is still unacknowledged before
    // it, then fail.
    if bad {
        retire(qp, ctx);
        return Err(fail(Syndrome::BadRespErr));
    }
    let offset = m.done_bytes;
    let m = &qp.sq.outstanding[i];
    if let Err(s) = place(qp, &m.payload, offset, payload, ctx) {
        retire(qp, ctx);
        return Err(fail(s));
    }
    let m = &mut qp.sq.outstanding[i];
    m.done_bytes = end;
    m.answered = last;
    note_ack(qp, psn, ctx);
    made_progress(qp, ctx);
    Ok(())
}

/// Fires the QP's timers that are due.
pub(crate) fn handle_timeout<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Outcome<Then> {
    if qp.state == QpState::Err {
        if qp.rq.flush_poll.is_some_and(|at| at <= ctx.now) {
            flush_rq(qp, ctx);
        }
        return Ok(Then::Done);
    }
    if qp.state != QpState::Rts {
        return Ok(Then::Done);
    }
    if let Some(psn) = qp.req.poll_rnr_resume(ctx.now) {
        retransmit_from(qp, psn, ctx)?;
        // The resend restarted the ACK timer: it cannot be due as well.
        return Ok(Then::Pump);
    }
    match qp
        .req
        .poll_ack_timeout(ctx.now, !qp.sq.outstanding.is_empty())
    {
        AckTimeout::Exhausted => {
            ctx.out.counters.req_transport_retries_exceeded += 1;
            Err(Fault::Head(Syndrome::TransportRetryExcErr))
        }
        AckTimeout::Retry(from) => {
            ctx.out.counters.local_ack_timeout_err += 1;
            if qp.req.adaptive_resent() {
                ctx.out.counters.roce_adp_retrans_to += 1;
            }
            retransmit_from(qp, from, ctx)?;
            // The resend restarted the adaptive timer too.
            Ok(Then::Done)
        }
        AckTimeout::NotDue | AckTimeout::Idle => {
            match qp.req.poll_adaptive(ctx.now, !qp.sq.outstanding.is_empty()) {
                AdaptiveTimeout::NotDue => Ok(Then::Done),
                AdaptiveTimeout::Resend(from) => {
                    ctx.out.counters.roce_adp_retrans += 1;
                    resend_early(qp, from, ctx)?;
                    Ok(Then::Done)
                }
            }
        }
    }
}
