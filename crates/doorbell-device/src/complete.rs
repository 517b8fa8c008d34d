//! Completions in posting order, and the way to the error state: retiring
//! acknowledged messages, flushing both queues, and turning an engine's
//! [`Fault`] into error completions, ERR, an async event and flushes.

use doorbell_hif::{NicEvent, QpState};
use doorbell_layout::cqe::Syndrome;
use doorbell_layout::wqe::{CtrlSeg, WqeOpcode, wqebbs_for_ds};
use doorbell_pcie::Dma;
use doorbell_types::Duration;

use crate::cqe::{recv_error, send_done, send_error};
use crate::ctx::Ctx;
use crate::fault::Fault;
use crate::fetch::{fetch_upto, next_recv_wqe};
use crate::qp::Qp;
use crate::wq::Payload;

/// How often a QP in the error state looks for receives posted since its
/// last flush (there is no receive doorbell to tell it).
pub(crate) const ERR_RQ_POLL: Duration = Duration::from_us(1000);

/// Completes, in posting order, the messages at the head that the
/// responder has acknowledged; a READ or atomic at the head completes once
/// its response is all in.
pub(crate) fn retire<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    let ack_psn = qp.req.ack_psn();
    while let Some(m) = qp.sq.outstanding.front_mut() {
        // What completes it is read where it lies, and it is dropped
        // there: a message moved out whole would be read back through the
        // narrow stores of the move.
        let bytes = if m.npsn() == 0 {
            0
        } else if m.is_read_or_atomic() && m.answered {
            if m.opcode == WqeOpcode::RdmaRead {
                m.len as u32
            } else {
                8
            }
        } else if m.is_read_or_atomic() {
            break;
        } else if m.last_psn().diff(ack_psn) > 0 {
            // Partly acknowledged: never send the acknowledged part again.
            m.sent = m.sent.max(m.psns.acked(ack_psn));
            break;
        } else {
            0
        };
        let (signaled, index, opcode) = (m.signaled, m.wqe_index, m.opcode);
        ctx.out
            .payloads
            .recycle(std::mem::replace(&mut m.payload, Payload::Sges(Vec::new())));
        qp.sq.drop_front();
        if signaled {
            send_done(qp, index, opcode, bytes, ctx);
        }
    }
}

/// Acts on an engine's fault: error completions in posting order, then
/// the QP to ERR and both queues flushed.
pub(crate) fn fault<D: Dma>(qp: &mut Qp, f: Fault, ctx: &mut Ctx<'_, D>) {
    match f {
        Fault::Wqe {
            index,
            opcode,
            syndrome,
        } => fail_wqe(qp, index, opcode, syndrome, ctx),
        Fault::Head(s) => match qp.sq.pop_outstanding() {
            Some(m) => fail_wqe(qp, m.wqe_index, m.opcode, s, ctx),
            None => to_error(qp, ctx),
        },
        Fault::Qp => to_error(qp, ctx),
    }
}

/// Completes WQE `index` in error, moves the QP to ERR and flushes the rest.
///
/// Completions leave in posting order: messages posted before `index` and
/// still unacknowledged are flushed first, and `index` itself, if it is
/// still among the outstanding messages, completes only with the error.
fn fail_wqe<D: Dma>(qp: &mut Qp, index: u16, opcode: WqeOpcode, s: Syndrome, ctx: &mut Ctx<'_, D>) {
    while let Some(m) = qp.sq.outstanding.front() {
        let before = crate::wq::posted_after(index, m.wqe_index);
        if before < 0 {
            break;
        }
        let m = qp.sq.pop_outstanding().expect("front exists");
        if before > 0 {
            send_error(qp, m.wqe_index, m.opcode, Syndrome::WrFlushErr, ctx);
        }
    }
    send_error(qp, index, opcode, s, ctx);
    if index == qp.sq.ci {
        // Failed where it lies on the ring (execution refused it without
        // taking it off): completed once, not flushed again.
        step_over_head(qp, ctx);
    }
    to_error(qp, ctx);
}

/// Takes the WQE at the consumer index off the ring without completing
/// it, as execution steps over a malformed one
/// ([`crate::wq::SendQueue::step_over`]); false where it cannot (not
/// fetched, or its size runs past the producer index), which leaves it in
/// place.
fn step_over_head<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> bool {
    if qp.sq.ci == qp.sq.pi || (qp.sq.wqe_cache.is_empty() && !fetch_upto(qp, qp.sq.pi, ctx)) {
        return false;
    }
    let Some(head) = qp.sq.wqe_cache.front() else {
        return false;
    };
    let n = wqebbs_for_ds(CtrlSeg::new_unchecked(&head[..]).ds());
    qp.sq.step_over(n)
}

/// Moves a QP to ERR on its own and flushes both queues.
fn to_error<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    // A QP in error answers nothing more: READ responses not built yet
    // are not sent (`crate::owed`), as hardware stops a READ's responses
    // when its QP fails.
    qp.owed.clear();
    if qp.state != QpState::Err {
        qp.state = QpState::Err;
        ctx.raise(NicEvent::QpFatal(qp.qpn));
    }
    flush_sq(qp, ctx);
    flush_rq(qp, ctx);
}

/// Completes every outstanding and posted send WQE with WR_FLUSH_ERR.
pub(crate) fn flush_sq<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    while let Some(m) = qp.sq.pop_outstanding() {
        send_error(qp, m.wqe_index, m.opcode, Syndrome::WrFlushErr, ctx);
    }
    // Each WQE on the ring completes flushed at the consumer index, and is
    // stepped over as execution steps over it, a malformed one included
    // (a wrong index in its control segment, no size): a NIC that left it
    // on the ring flushes what a NIC that took it off flushes.
    while qp.sq.ci != qp.sq.pi {
        if qp.sq.wqe_cache.is_empty() && !fetch_upto(qp, qp.sq.pi, ctx) {
            break;
        }
        let Some(head) = qp.sq.wqe_cache.front() else {
            break;
        };
        let (index, opcode) = (qp.sq.ci, CtrlSeg::new_unchecked(&head[..]).opcode());
        if !step_over_head(qp, ctx) {
            break;
        }
        send_error(qp, index, opcode, Syndrome::WrFlushErr, ctx);
    }
    qp.sq.wqe_cache.clear();
    qp.sq.ci = qp.sq.pi;
    qp.req.cancel();
}

/// Completes every posted receive WQE with WR_FLUSH_ERR; in the error state,
/// looks again after [`ERR_RQ_POLL`] for receives posted meanwhile.
///
/// A QP with an SRQ flushes only the WQEs it took (its message in
/// progress); the SRQ's others are for its other QPs. Once in the error
/// state, it raises [`NicEvent::QpLastWqeReached`]: it takes no more.
pub(crate) fn flush_rq<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) {
    let shared = qp.p.srq.is_some();
    if qp.state == QpState::Err && !shared {
        qp.rq.flush_poll = Some(ctx.now.add(ERR_RQ_POLL));
    }
    if let Some(w) = qp.inbound.spare.take() {
        recv_error(qp, ctx, w.index, Syndrome::WrFlushErr);
    }
    if let Some(ip) = qp.inbound.recv.take() {
        recv_error(qp, ctx, ip.wqe_index, Syndrome::WrFlushErr);
    }
    qp.inbound.write = None;
    if shared {
        if qp.state == QpState::Err && !qp.last_wqe_reported {
            qp.last_wqe_reported = true;
            ctx.raise(NicEvent::QpLastWqeReached(qp.qpn));
        }
        return;
    }
    while let Ok(Some(w)) = next_recv_wqe(qp, ctx) {
        recv_error(qp, ctx, w.index, Syndrome::WrFlushErr);
    }
}
