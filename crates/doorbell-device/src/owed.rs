//! A READ's responses built a burst at a time, and the responder's
//! answers that wait behind them.
//!
//! A READ is checked and taken when its request arrives: key, range and
//! access, the responder's PSN and MSN. Its responses need not all be
//! built then. With [`crate::NicConfig::read_burst`], a READ builds that
//! many responses at once (less what already waits for the port), and
//! [`crate::Nic::resume_transmit`] builds the rest a burst at a time, as
//! the runtime takes the frames: a READ of a gigabyte holds a burst of
//! frames, not a gigabyte of them, as hardware streams a READ's responses
//! at the rate the wire takes them. Each burst reads its payloads from
//! host memory when it is built.
//!
//! The responder's answers to one QP leave in PSN order. While a QP owes
//! responses of a READ ([`Qp::owed`]), every later answer of it, an ACK,
//! a NAK, an atomic's response or another READ's responses, waits in that
//! queue behind them: an ACK of a later PSN that overtook them would tell
//! the requester that they were lost.
//!
//! Without a burst, nothing is ever owed: every READ's responses are
//! built, and their reads issued, when the request arrives, as the
//! simulator models them. With one, the frames are those a NIC without
//! it sends, in the same order, with the same counts (the device test
//! `read_burst`), but for two things:
//! - a response reads its payload when it is built, so a WRITE taken
//!   after the READ, to bytes the READ reads, may show in responses built
//!   after it, as IBA allows a responder (a requester that must read
//!   first fences the WRITE);
//! - a QP that goes to ERR sends nothing more, so what it owes is not
//!   sent. A NAK that ends the QP is the exception: it waits behind what
//!   the QP owes, like any answer, and the QP goes to ERR once it has left
//!   ([`end_after`]). Meanwhile the QP takes no more requests (a NIC
//!   without a burst would be in ERR already and drop them too); only its
//!   own send queue goes on a while longer.

use doorbell_hif::Access;
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::Psn;
use doorbell_wire::{AethRepr, AethSyndrome, BthOpcode, BthRepr, ExtHeaders, NakCode};

use crate::ctx::Ctx;
use crate::dma::{dma_read, dma_read_left};
use crate::emit;
use crate::fault::{Fault, Outcome};
use crate::qp::Qp;
use crate::transmit;
use crate::wq::{Answer, Owed, ReadOwed};

/// How many responses a READ may build now: all, without a burst; with
/// one, the burst less what already waits for the port.
pub(crate) fn read_room<D: Dma>(ctx: &Ctx<'_, D>) -> u32 {
    ctx.out.room(ctx.cfg.read_burst)
}

/// Builds up to `room` more of `r`'s responses into
/// [`crate::ctx::Outputs::building`], each with its payload read (or left
/// in memory, [`crate::NicConfig::leave_payload`]) and a MIDDLE that
/// follows a run joined to it. False, with nothing kept, if a read failed:
/// the key no longer covers the range, or memory is gone.
pub(crate) fn build_read<D: Dma>(
    qp: &Qp,
    ctx: &mut Ctx<'_, D>,
    r: &mut ReadOwed,
    room: u32,
) -> bool {
    let tag = DmaTag::new(qp.qpn, DmaPurpose::Payload);
    let mtu = u64::from(qp.mtu());
    let dst = emit::peer_ip(qp).unwrap_or_default();
    let dqpn = qp.attrs.dest_qpn.unwrap_or_default();
    let end = r.n.min(r.next.saturating_add(room));
    // Each response's MTU of data is read on its own, into the buffer of
    // its frame, all of a burst issued at once: a response leaves when
    // its data is in, not when the whole message is, as hardware streams
    // a READ's responses.
    let t0 = ctx.t;
    let mut frames = std::mem::take(&mut ctx.out.building);
    let mut ok = true;
    for i in r.next..end {
        use BthOpcode::*;
        let op = match (i == 0, i + 1 == r.n) {
            (true, true) => RcRdmaReadResponseOnly,
            (true, false) => RcRdmaReadResponseFirst,
            (false, false) => RcRdmaReadResponseMiddle,
            (false, true) => RcRdmaReadResponseLast,
        };
        let bth = BthRepr::new(op, dqpn, r.psn.add(i));
        let ext = ExtHeaders {
            aeth: (op != RcRdmaReadResponseMiddle).then_some(AethRepr {
                syndrome: AethSyndrome::Ack {
                    credits: doorbell_roce::CREDITS_INVALID,
                },
                msn: r.msn,
            }),
            ..ExtHeaders::default()
        };
        let repr = emit::repr(qp, ctx, dst, bth, ext);
        let (cs, ce) = (u64::from(i) * mtu, (u64::from(i) + 1) * mtu);
        let (cs, ce) = (cs.min(r.len), ce.min(r.len));
        let data_len = (ce - cs) as usize;
        // Never fails for a response of an MTU at most: stop there if so.
        let Some(mut f) = emit::building(ctx, repr, data_len) else {
            ok = false;
            break;
        };
        let mut t = t0;
        if data_len > 0 {
            let leave = ctx.cfg.leave_payload;
            let Ctx { dma, mkeys, .. } = &mut *ctx;
            // One DMA per page of the range, as the key maps it; or, for a
            // peer of this process, a payload in one run left where it is
            // ([`crate::NicConfig::leave_payload`]).
            let translated = mkeys.translate(
                r.rkey,
                qp.p.pd,
                Access::REMOTE_READ,
                r.va + cs,
                ce - cs,
                |h, n, o| {
                    if leave && o == 0 && n == data_len as u64 {
                        f.left = Some(h);
                        ok &= dma_read_left(*dma, &mut t, tag, h, data_len);
                        return;
                    }
                    let at = f.payload.start + o as usize;
                    ok &= dma_read(*dma, &mut t, tag, h, &mut f.bytes[at..at + n as usize]);
                },
            );
            ok &= translated.is_ok();
        }
        f.ready = t;
        // A MIDDLE response whose payload follows the run before it in
        // memory joins it ([`crate::NicConfig::max_segments`]); its read
        // was counted above, as for any response.
        if let Some(run) = frames.last_mut()
            && let Some(last) = transmit::continues_run(run, &f, transmit::run_limits(ctx.cfg))
        {
            run.segments += 1;
            // (None: no READ response's LAST ends a run.)
            run.last = last;
            run.ready = run.ready.max(f.ready);
            ctx.out.spare.give(f.bytes);
            continue;
        }
        frames.push(f);
    }
    if ok {
        r.next = end;
    } else {
        for f in frames.drain(..) {
            ctx.out.spare.give(f.bytes);
        }
    }
    ctx.out.building = frames;
    ok
}

/// Queues for the port the responses [`build_read`] built, with `msn`,
/// the responder's MSN once it took the READ; to a QP with no peer
/// address, they are dropped.
pub(crate) fn send_built<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, msn: u32) {
    let mut frames = std::mem::take(&mut ctx.out.building);
    let dst = emit::peer_ip(qp);
    for f in &mut frames {
        match dst {
            Some(dst) => {
                if let Some(a) = f.repr.ext.aeth.as_mut() {
                    a.msn = msn;
                }
                emit::finish(ctx, dst, f);
            }
            None => ctx.out.spare.give(std::mem::take(&mut f.bytes)),
        }
    }
    frames.clear();
    ctx.out.building = frames;
}

/// Notes that `qp` owes answers, for [`crate::Nic::resume_transmit`].
pub(crate) fn note_owing<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>) {
    if !ctx.out.owing.contains(&qp.qpn) {
        ctx.out.owing.push(qp.qpn);
    }
}

/// Queues `answer` behind what `qp` owes (the caller has seen that it
/// owes something). A plain ACK replaces the one owed before it where a
/// held ACK would have been replaced. Out of line: the path of every
/// answer looks only at whether anything is owed.
#[cold]
#[inline(never)]
pub(crate) fn behind<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, answer: Answer) {
    if let (
        Answer::Ack { .. },
        Some(Owed::Answer(Answer::Ack {
            held_ends: before, ..
        })),
    ) = (&answer, qp.owed.back())
        && *before == ctx.out.held_ends
    {
        ctx.out.counters.acks_coalesced += 1;
        qp.owed.pop_back();
    }
    qp.owed.push_back(Owed::Answer(answer));
}

/// Marks `qp`, which owes answers and has just queued a NAK behind them
/// that ends it, to go to ERR once that NAK has been sent
/// ([`Qp::responder_ended`]), and the NAK's remote access error, if it is
/// one, to be counted then (not if the QP goes to ERR before, another
/// way: the counters count what left). The requester sees the answers before the
/// NAK first, as from a NIC without a burst, and the responses are still
/// built a burst at a time: a request that fails behind a READ of 2 GiB
/// does not make the NIC build the READ's responses all at once.
pub(crate) fn end_after<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, access_error: bool) {
    qp.owed.push_back(Owed::End { access_error });
    note_owing(qp, ctx);
}

/// Sends what `qp` owes, in order, while the burst has room: the next
/// responses of the READ at its head, then what waits behind it. A READ
/// whose memory is gone by then (its key destroyed, its pages unmapped)
/// NAKs at its first response not sent, a remote access error, and the
/// QP goes to the error state; a duplicate's is dropped. Past a NAK that
/// ended the QP ([`end_after`]), the QP goes to the error state.
pub(crate) fn resume<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Outcome {
    // A QP that no longer answers (reset, or in error) owes nothing.
    if !qp.answers() {
        qp.owed.clear();
        return Ok(());
    }
    while let Some(item) = qp.owed.pop_front() {
        let mut r = match item {
            Owed::Read(r) => r,
            Owed::Answer(a) => {
                send_now(qp, ctx, a);
                continue;
            }
            Owed::End { access_error } => {
                if access_error {
                    ctx.out.counters.resp_remote_access_errors += 1;
                }
                qp.owed.clear();
                return Err(Fault::Qp);
            }
        };
        let room = read_room(ctx);
        if room == 0 {
            qp.owed.push_front(Owed::Read(r));
            break;
        }
        if !build_read(qp, ctx, &mut r, room) {
            if r.fresh {
                qp.owed.clear();
                ctx.out.counters.resp_remote_access_errors += 1;
                let nak = nak(qp, ctx, r.psn.add(r.next), NakCode::RemoteAccessErr);
                send_now(qp, ctx, nak);
                return Err(Fault::Qp);
            }
            ctx.out.counters.rx_dropped += 1;
            continue;
        }
        send_built(qp, ctx, r.msn);
        if r.next < r.n {
            qp.owed.push_front(Owed::Read(r));
            break;
        }
    }
    if !qp.owed.is_empty() {
        note_owing(qp, ctx);
    }
    Ok(())
}

/// The NAK of `psn` with `code`.
fn nak<D: Dma>(qp: &Qp, ctx: &Ctx<'_, D>, psn: Psn, code: NakCode) -> Answer {
    let dst = emit::peer_ip(qp).unwrap_or_default();
    Answer::Packet(emit::aeth_headers(qp, ctx, dst, psn, AethSyndrome::Nak(code)).repr())
}

/// Queues `answer` for the port now, counted as it leaves; an ACK held
/// as [`crate::recv`]'s are, ready no earlier than the frames before it.
fn send_now<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, answer: Answer) {
    let Some(dst) = emit::peer_ip(qp) else {
        return;
    };
    match answer {
        Answer::Ack {
            psn, aeth, ready, ..
        } => {
            let mut h = emit::aeth_headers(qp, ctx, dst, psn, aeth.syndrome);
            (h.aeth, h.ready) = (aeth, ready.max(h.ready));
            ctx.out.push_held(h);
            ctx.out.counters.tx_packets += 1;
        }
        Answer::Packet(repr) => emit::emit_repr(ctx, dst, repr, &[]),
    }
}
