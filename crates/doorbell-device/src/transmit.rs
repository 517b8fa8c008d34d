//! The requester's transmitter: request packets for the outstanding
//! messages, as far as the RC window allows, and go-back-N. Shared by the
//! send engine (new messages) and response handling (resends).

use doorbell_hif::QpState;
use doorbell_layout::wqe::WqeOpcode;
use std::ops::Range;

use doorbell_layout::cqe::Syndrome;
use doorbell_pcie::Dma;
use doorbell_roce::ACK_EVERY_PACKETS;
use doorbell_types::{Mkey, Psn, Qpn};
use doorbell_wire::{AtomicEthRepr, BthOpcode, BthRepr, ExtHeaders, ImmDtRepr, RethRepr};

use crate::config::RunLast;
use crate::ctx::{Building, Ctx};
use crate::emit::{self, emit, peer_ip};
use crate::fault::{Fault, Outcome};
use crate::qp::Qp;
use crate::sge::{self, MAX_MSG_LEN};
use crate::wq::{Payload, SentMsg};

/// Sends what the window allows of the outstanding messages: packets not
/// yet sent in this pass, while they stay within the QP's window
/// ([`doorbell_roce::window_psns`] of its MTU) of the oldest
/// unacknowledged PSN.
/// Payload is read from host memory for the packets that go, so a long
/// message is read as its window moves. With a burst
/// ([`crate::NicConfig::tx_burst`]) it stops once that many frames wait
/// for the port; a QP stopped so with more in its window is noted for
/// [`crate::Nic::resume_transmit`].
///
/// A payload that cannot be read fails its WQE.
pub(crate) fn send_window<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Outcome {
    if qp.state != QpState::Rts || qp.req.is_rnr_waiting() {
        return Ok(());
    }
    let una = qp.req.una();
    let mtu = u64::from(qp.mtu());
    let mut sent_any = false;
    let mut left = ctx.out.room(ctx.cfg.tx_burst);
    let mut stopped = false;
    for i in qp.sq.unsent_from..qp.sq.outstanding.len() {
        let m = &qp.sq.outstanding[i];
        if m.is_sent() {
            if i == qp.sq.unsent_from {
                qp.sq.unsent_from = i + 1;
            }
            continue;
        }
        let rd_atomic = m.is_read_or_atomic();
        // SENDs and WRITEs the responder has already acknowledged (behind a
        // READ still waiting for its data) are not sent again.
        if !rd_atomic && m.last_psn().precedes(una) {
            qp.sq.outstanding[i].sent = m.npsn();
            continue;
        }
        let mut from = if m.opcode == WqeOpcode::RdmaRead {
            (m.done_bytes / mtu) as u32
        } else {
            m.sent
        };
        if !rd_atomic && m.psns.nth(from).precedes(una) {
            from = una.diff(m.first_psn()) as u32;
        }
        let psn = m.psns.nth(from);
        let room = qp.req.window_room(psn);
        if room <= 0 {
            ctx.out.window_stops += 1;
            break;
        }
        if left == 0 {
            stopped = true;
            break;
        }
        // Where the window lets this message go, and where this call
        // stops.
        let (window_to, to) = if rd_atomic {
            (m.npsn(), m.npsn())
        } else {
            let w = m.npsn().min(from.saturating_add(room as u32));
            (w, w.min(from.saturating_add(left)))
        };
        let count = if rd_atomic {
            ask(qp, m, from, ctx)
        } else if send_small(qp, m, from, ctx) {
            1
        } else {
            send_data(qp, m, from..to, window_to, ctx).map_err(|syndrome| Fault::Wqe {
                index: m.wqe_index,
                opcode: m.opcode,
                syndrome,
            })?
        };
        let m = &qp.sq.outstanding[i];
        let end = psn.add(if rd_atomic {
            m.npsn() - from
        } else {
            to - from
        });
        ctx.out.counters.tx_retransmits += qp.req.note_sent(ctx.now, psn, count, end);
        qp.sq.outstanding[i].sent = to;
        sent_any = true;
        left = left.saturating_sub(count);
        if to < qp.sq.outstanding[i].npsn() {
            stopped = to < window_to;
            if !stopped {
                ctx.out.window_stops += 1;
            }
            break;
        }
    }
    if stopped && !ctx.out.tx_pending.contains(&qp.qpn) {
        ctx.out.tx_pending.push(qp.qpn);
    }
    if sent_any {
        qp.req.arm_ack_timer(ctx.now);
        hold_adaptive(qp, ctx.now);
    }
    Ok(())
}

/// Sends the READ or atomic request `msg`; a READ is asked for from
/// response `from` on. Returns the number of packets sent.
fn ask<D: Dma>(qp: &Qp, msg: &SentMsg, from: u32, ctx: &mut Ctx<'_, D>) -> u32 {
    let Some(dst) = peer_ip(qp) else { return 0 };
    let dqpn = qp.attrs.dest_qpn.unwrap_or_default();
    let (op, ext) = if msg.opcode == WqeOpcode::RdmaRead {
        let skip = u64::from(from) * u64::from(qp.mtu());
        let ext = ExtHeaders {
            reth: Some(RethRepr {
                va: msg.raddr.wrapping_add(skip),
                rkey: Mkey::from_raw(msg.rkey),
                dma_len: msg.len.saturating_sub(skip) as u32,
            }),
            ..ExtHeaders::default()
        };
        (BthOpcode::RcRdmaReadRequest, ext)
    } else {
        let op = if msg.opcode == WqeOpcode::AtomicCs {
            BthOpcode::RcCompareSwap
        } else {
            BthOpcode::RcFetchAdd
        };
        let ext = ExtHeaders {
            atomic_eth: Some(AtomicEthRepr {
                va: msg.raddr,
                rkey: Mkey::from_raw(msg.rkey),
                swap_add: msg.swap_add,
                compare: msg.compare,
            }),
            ..ExtHeaders::default()
        };
        (op, ext)
    };
    let psn = if op == BthOpcode::RcRdmaReadRequest {
        msg.psns.nth(from)
    } else {
        msg.first_psn()
    };
    let mut bth = BthRepr::new(op, dqpn, psn);
    bth.ack_req = true;
    emit(qp, ctx, dst, bth, ext, &[]);
    1
}

/// Sends the SEND or WRITE `msg` from packet `from` as [`send_data`]
/// would, if it is a message of one packet of inline data, not sent yet,
/// on a NIC that makes trains: its one packet, which asks for an ACK,
/// straight onto its train ([`emit::onto_train`]). False, with nothing
/// sent, for any other message, or where the packet cannot go so; the
/// caller then sends it with [`send_data`].
fn send_small<D: Dma>(qp: &Qp, msg: &SentMsg, from: u32, ctx: &mut Ctx<'_, D>) -> bool {
    let Payload::Inline(data) = &msg.payload else {
        return false;
    };
    if ctx.cfg.max_train <= 1 || from != 0 || msg.npsn() != 1 || msg.len != data.len() as u64 {
        return false;
    }
    let Some(dst) = peer_ip(qp) else {
        return false;
    };
    // The last packet: it asks for an ACK wherever the window closes.
    let (bth, ext) = data_headers(msg, qp.attrs.dest_qpn.unwrap_or_default(), 0, 1);
    let repr = emit::repr(qp, ctx, dst, bth, ext);
    emit::onto_train(ctx, dst, &repr, data)
}

/// The headers of packet `i` of the SEND or WRITE `msg` to the peer's QP
/// `dqpn`, whose window closes after packet `window_to`. (Always inlined:
/// its 140 bytes of headers are then built where the caller puts them,
/// not returned through the stack.)
#[inline(always)]
fn data_headers(msg: &SentMsg, dqpn: Qpn, i: u32, window_to: u32) -> (BthRepr, ExtHeaders) {
    let is_write = matches!(msg.opcode, WqeOpcode::RdmaWrite | WqeOpcode::RdmaWriteImm);
    let has_imm = matches!(msg.opcode, WqeOpcode::SendImm | WqeOpcode::RdmaWriteImm);
    let (first, last) = (i == 0, i + 1 == msg.npsn());
    let op = request_opcode(is_write, has_imm, first, last);
    let mut bth = BthRepr::new(op, dqpn, msg.psns.nth(i));
    // An ACK for the last packet, every ACK_EVERY_PACKETS inside a long
    // message, and where the window closes, so that an ACK always comes
    // back to open it again.
    bth.ack_req = last || i % ACK_EVERY_PACKETS == ACK_EVERY_PACKETS - 1 || i + 1 == window_to;
    bth.solicited = last && msg.solicited;
    let ext = ExtHeaders {
        reth: (is_write && first).then_some(RethRepr {
            va: msg.raddr,
            rkey: Mkey::from_raw(msg.rkey),
            dma_len: msg.len as u32,
        }),
        immdt: (has_imm && last).then_some(ImmDtRepr { imm: msg.imm }),
        ..ExtHeaders::default()
    };
    (bth, ext)
}

/// Sends packets `range` of the SEND or WRITE `msg` ([`send_packets`],
/// their payload read at once); the window lets the message go up to
/// packet `window_to`, where the last packet asks for an ACK. Returns the
/// number of packets sent, or why the payload could not be read.
fn send_data<D: Dma>(
    qp: &Qp,
    msg: &SentMsg,
    range: Range<u32>,
    window_to: u32,
    ctx: &mut Ctx<'_, D>,
) -> Result<u32, Syndrome> {
    let (from, to) = (range.start, range.end);
    let Some(dst) = peer_ip(qp) else { return Ok(0) };
    let mtu = u64::from(qp.mtu());
    let start = u64::from(from) * mtu;
    let end = (u64::from(to) * mtu).min(msg.len).max(start);
    if end > msg.payload.len() || end - start > MAX_MSG_LEN {
        return Err(Syndrome::LocalLengthErr);
    }
    let dqpn = qp.attrs.dest_qpn.unwrap_or_default();
    let headers = |i: u32| Ok(data_headers(msg, dqpn, i, window_to));
    let packets = Packets {
        payload: &msg.payload,
        len: msg.len,
        mtu,
        range: from..to,
        batch: to - from,
        runs: true,
    };
    send_packets(qp, ctx, Some(dst), packets, headers)
}

/// Which packets of a message [`send_packets`] sends, and how.
pub(crate) struct Packets<'a> {
    /// The message's payload.
    pub(crate) payload: &'a Payload,
    /// The message's length.
    pub(crate) len: u64,
    /// Bytes per packet; the last carries what is left.
    pub(crate) mtu: u64,
    /// The packets to send.
    pub(crate) range: Range<u32>,
    /// Frames built and read into at once: one DMA per contiguous run of
    /// host memory within a batch.
    pub(crate) batch: u32,
    /// Whether packets may leave as runs
    /// ([`crate::NicConfig::max_segments`]): for an RC WRITE or SEND, whose
    /// headers never fail.
    pub(crate) runs: bool,
}

impl Packets<'_> {
    /// The payload bytes of packet `k`.
    fn data_len(&self, k: u32) -> usize {
        self.mtu
            .min(self.len.saturating_sub(u64::from(k) * self.mtu)) as usize
    }
}

/// Sends packets `p.range` of a message with `headers(i)` for packet `i`:
/// frames built a batch at a time, the payload read straight into them
/// ([`sge::read_into_frames`]), then finished. To no one if `dst` is
/// `None`: the payload is still read, and its errors are still the WQE's.
/// Returns the number of packets sent.
///
/// A batch whose payload lies in one run of host memory, on a NIC that
/// leaves payloads there and joins packets, is built as runs: a packet
/// that [`joins`] the frame of the one before is counted in it, and one
/// DMA read is counted for the batch, as [`sge::read_into_frames`]
/// counts it.
///
/// On a NIC that joins packets into trains ([`crate::NicConfig::max_train`]),
/// a message of one packet of inline data, which has nothing to read, is
/// emitted straight onto the train it joins ([`emit::onto_train`]), where
/// it may. `headers` may then be asked for its headers twice: it is a
/// function of the packet's index.
pub(crate) fn send_packets<D: Dma>(
    qp: &Qp,
    ctx: &mut Ctx<'_, D>,
    dst: Option<[u8; 4]>,
    p: Packets<'_>,
    headers: impl Fn(u32) -> Result<(BthRepr, ExtHeaders), Syndrome>,
) -> Result<u32, Syndrome> {
    // One packet of inline data, on a NIC that joins packets into trains:
    // onto its train, or built as below.
    if let (Some(dst), Payload::Inline(v)) = (dst, p.payload)
        && ctx.cfg.max_train > 1
        && p.range.len() == 1
        && let Ok(at) = usize::try_from(u64::from(p.range.start) * p.mtu)
        && let Some(data) = v.get(at..at + p.data_len(p.range.start))
    {
        let (bth, ext) = headers(p.range.start)?;
        let repr = emit::repr(qp, ctx, dst, bth, ext);
        if emit::onto_train(ctx, dst, &repr, data) {
            return Ok(1);
        }
    }
    let mut frames = std::mem::take(&mut ctx.out.building);
    let mut result = Ok(());
    let mut sent = 0;
    let runs = p.runs
        && dst.is_some()
        && ctx.cfg.leave_payload
        && ctx.cfg.max_segments > 1
        && matches!(p.payload, Payload::Sges(_));
    let mut i = p.range.start;
    while i < p.range.end && result.is_ok() {
        let end = i.saturating_add(p.batch.max(1)).min(p.range.end);
        let start = u64::from(i) * p.mtu;
        let one_run = runs.then(|| {
            let total: usize = (i..end).map(|k| p.data_len(k)).sum();
            sge::one_run(ctx.mkeys, qp.p.pd, p.payload, start, total).map(|h| (h, total))
        });
        if let Some(Some((h, total))) = one_run {
            result = build_runs(qp, ctx, dst, &p, i..end, &headers, &mut frames)
                .and_then(|()| sge::leave_in_runs(qp, h, total, &mut frames, ctx));
        } else {
            for k in i..end {
                let (bth, ext) = match headers(k) {
                    Ok(h) => h,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                };
                let repr = emit::repr(qp, ctx, dst.unwrap_or_default(), bth, ext);
                // Never fails for a packet of an MTU at most.
                let Some(f) = emit::building(ctx, repr, p.data_len(k)) else {
                    result = Err(Syndrome::LocalLengthErr);
                    break;
                };
                frames.push(f);
            }
            if result.is_ok() {
                // Only an RC WRITE's or SEND's payload is left in memory:
                // the receiver takes it from there
                // ([`crate::NicConfig::leave_payload`]).
                let leave = ctx.cfg.leave_payload
                    && frames.iter().all(|f| may_leave_payload(f.repr.bth.opcode));
                result = sge::read_into_frames(
                    qp,
                    p.payload,
                    start,
                    p.mtu as usize,
                    leave,
                    &mut frames,
                    ctx,
                );
            }
        }
        // Finished where they were built, each buffer taken out of its
        // frame: a frame's headers are a few hundred bytes to move.
        for f in &mut frames {
            match dst {
                Some(dst) if result.is_ok() => {
                    if emit::finish(ctx, dst, f) {
                        sent += f.segments;
                    }
                }
                _ => ctx.out.spare.give(std::mem::take(&mut f.bytes)),
            }
        }
        frames.clear();
        i = end;
    }
    ctx.out.building = frames;
    result.map(|()| sent)
}

/// Builds a frame for each of packets `range` into `frames`, its payload
/// yet to be put in, except that a packet that [`joins`] the frame before
/// is counted in it instead; stops at the first packet whose headers fail.
fn build_runs<D: Dma>(
    qp: &Qp,
    ctx: &mut Ctx<'_, D>,
    dst: Option<[u8; 4]>,
    p: &Packets<'_>,
    range: Range<u32>,
    headers: &impl Fn(u32) -> Result<(BthRepr, ExtHeaders), Syndrome>,
    frames: &mut Vec<Building>,
) -> Result<(), Syndrome> {
    let (max, ends) = run_limits(ctx.cfg);
    for k in range {
        let (bth, ext) = headers(k)?;
        let data_len = p.data_len(k);
        if let Some(f) = frames.last_mut()
            && let Some(last) = joins(f, &bth, &ext, data_len, max, ends)
        {
            f.segments += 1;
            f.last = last;
            continue;
        }
        let repr = emit::repr(qp, ctx, dst.unwrap_or_default(), bth, ext);
        // Never fails for a packet of an MTU at most.
        let Some(f) = emit::building(ctx, repr, data_len) else {
            return Err(Syndrome::LocalLengthErr);
        };
        frames.push(f);
    }
    Ok(())
}

/// The most packets a run holds, and whether it may hold its message's
/// FIRST and LAST ([`crate::NicConfig::max_segments`],
/// [`crate::NicConfig::runs_with_ends`]).
pub(crate) fn run_limits(cfg: &crate::config::NicConfig) -> (u32, bool) {
    (
        cfg.max_segments.min(crate::config::MAX_SEGMENTS),
        cfg.runs_with_ends,
    )
}

/// Whether `next`, built with its payload left in memory, may join the run
/// `f` as its next packet, and as what: as [`joins`] says, where its
/// payload follows the run's in memory (a run that may be joined has no
/// LAST yet, so its packets are all as long as its first).
pub(crate) fn continues_run(
    f: &Building,
    next: &Building,
    (max, ends): (u32, bool),
) -> Option<Option<RunLast>> {
    let step = u64::from(f.segments) * f.payload.len() as u64;
    if next.left.is_none() || f.left.and_then(|h| h.checked_add(step)) != next.left {
        return None;
    }
    joins(
        f,
        &next.repr.bth,
        &next.repr.ext,
        next.payload.len(),
        max,
        ends,
    )
}

/// Whether the packet with headers `bth` and `ext` and `data_len` bytes of
/// payload may join the run `f` as its next packet, and as what: `f` is a
/// run of MIDDLE packets of one opcode that ask for no ACK, or with `ends`
/// one that a WRITE's or SEND's FIRST heads, and has no LAST yet; the
/// packet has the next PSN, no extension headers, and the same BTH but for
/// its opcode and ACK request. It joins as a MIDDLE of the run's
/// operation that asks for no ACK and carries as much as the run's first
/// (`Some(None)`), or with `ends` as its LAST, without an immediate and
/// with no more than that (`Some(Some(last))`). Its headers are then what
/// [`crate::Unfilled::packet_headers`] makes of `f`'s.
fn joins(
    f: &Building,
    bth: &BthRepr,
    ext: &ExtHeaders,
    data_len: usize,
    max: u32,
    ends: bool,
) -> Option<Option<RunLast>> {
    let first = &f.repr.bth;
    let middle = crate::config::run_middle(first.opcode).filter(|&m| ends || m == first.opcode)?;
    let fits = f.segments < max
        && f.last.is_none()
        && !first.ack_req
        && bth.psn == first.psn.add(f.segments)
        && BthRepr {
            opcode: first.opcode,
            ack_req: first.ack_req,
            psn: first.psn,
            pad_count: first.pad_count,
            ..*bth
        } == *first
        // (No extension headers, as a MIDDLE and a plain LAST have: one
        // look, not a compare of every field.)
        && ext.bits() == 0;
    if !fits {
        return None;
    }
    let len = u32::try_from(data_len).ok()?;
    if bth.opcode == middle && !bth.ack_req && data_len == f.payload.len() {
        return Some(None);
    }
    let last = crate::config::run_last(middle).filter(|_| ends)?;
    (bth.opcode == last && len > 0 && data_len <= f.payload.len()).then_some(Some(RunLast {
        len,
        ack_req: bth.ack_req,
    }))
}

/// Whether a packet of opcode `op` may leave its payload in host memory
/// ([`crate::NicConfig::leave_payload`]): an RC WRITE's, SEND's or READ
/// response's, which the receiver writes into its memory as the packet
/// comes.
pub(crate) fn may_leave_payload(op: BthOpcode) -> bool {
    use BthOpcode::*;
    matches!(
        op,
        RcRdmaReadResponseFirst
            | RcRdmaReadResponseMiddle
            | RcRdmaReadResponseLast
            | RcRdmaReadResponseOnly
            | RcSendFirst
            | RcSendMiddle
            | RcSendLast
            | RcSendLastWithImmediate
            | RcSendOnly
            | RcSendOnlyWithImmediate
            | RcRdmaWriteFirst
            | RcRdmaWriteMiddle
            | RcRdmaWriteLast
            | RcRdmaWriteLastWithImmediate
            | RcRdmaWriteOnly
            | RcRdmaWriteOnlyWithImmediate
    )
}

/// The RC opcode of packet `first`/`last` of a SEND or RDMA WRITE, with an
/// immediate or not (UC sends its [`BthOpcode::rc_as_uc`] twin).
pub(crate) fn request_opcode(write: bool, imm: bool, first: bool, last: bool) -> BthOpcode {
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

/// Go-back-N: marks every packet from `psn` on to be sent again, and every
/// READ and atomic still waiting for its response to be asked for again
/// (from the first READ response not yet received), then sends what the
/// window allows and restarts the ACK timer.
pub(crate) fn retransmit_from<D: Dma>(qp: &mut Qp, psn: Psn, ctx: &mut Ctx<'_, D>) -> Outcome {
    rewind(qp, psn);
    qp.req.go_back(ctx.now);
    send_window(qp, ctx)
}

/// Go-back-N on the adaptive timer: as [`retransmit_from`], but the ACK
/// timer keeps running (the requester restarted the adaptive one).
pub(crate) fn resend_early<D: Dma>(qp: &mut Qp, psn: Psn, ctx: &mut Ctx<'_, D>) -> Outcome {
    rewind(qp, psn);
    send_window(qp, ctx)
}

fn rewind(qp: &mut Qp, psn: Psn) {
    for m in qp.sq.outstanding.iter_mut() {
        if m.is_read_or_atomic() {
            if !m.answered {
                m.sent = 0;
            }
        } else {
            m.sent = m.psns.rewind(m.sent, psn);
        }
    }
    qp.sq.unsent_from = 0;
}

/// Holds the requester's adaptive timer while the oldest thing
/// unacknowledged is a READ with no response yet
/// ([`doorbell_roce::Requester::hold_adaptive`]).
pub(crate) fn hold_adaptive(qp: &mut Qp, now: doorbell_types::Instant) {
    let una = qp.req.una();
    // Messages are in PSN order: the oldest not wholly acknowledged is the
    // only one that can start at `una`, and usually the first.
    let hold = qp.sq.reads > 0
        && qp
            .sq
            .outstanding
            .iter()
            .find(|m| !m.last_psn().precedes(una))
            .is_some_and(|m| {
                m.opcode == WqeOpcode::RdmaRead
                    && m.first_psn() == una
                    && m.is_sent()
                    && !m.answered
                    && m.done_bytes == 0
            });
    qp.req.hold_adaptive(now, hold);
}

#[cfg(test)]
mod tests {
    use doorbell_types::{HostAddr, Instant, Qpn};
    use doorbell_wire::{RoceIp, RoceRepr};

    use super::*;

    fn packet(op: BthOpcode, psn: u32, ack_req: bool) -> (BthRepr, ExtHeaders) {
        let mut bth = BthRepr::new(op, Qpn::new(7), Psn::new(psn));
        bth.ack_req = ack_req;
        (bth, ExtHeaders::default())
    }

    fn building(op: BthOpcode, psn: u32, ack_req: bool, segments: u32) -> Building {
        let (bth, ext) = packet(op, psn, ack_req);
        Building {
            bytes: Vec::new(),
            repr: RoceRepr {
                ip: RoceIp::v4([10, 0, 0, 1], [10, 0, 0, 2]),
                src_port: 0xc000,
                bth,
                ext,
            },
            payload: 60..60 + 1024,
            ready: Instant::ZERO,
            left: Some(HostAddr::new(0x1000)),
            segments,
            last: None,
        }
    }

    #[test]
    fn only_the_next_middle_packet_that_asks_for_no_ack_joins_a_run() {
        use BthOpcode::*;
        let run = building(RcRdmaWriteMiddle, 10, false, 3);
        let next = |op, psn, ack| {
            let (bth, ext) = packet(op, psn, ack);
            joins(&run, &bth, &ext, 1024, 64, false).is_some()
        };
        assert!(next(RcRdmaWriteMiddle, 13, false), "the next MIDDLE");
        assert!(!next(RcRdmaWriteMiddle, 13, true), "one asking for an ACK");
        assert!(!next(RcRdmaWriteMiddle, 14, false), "a PSN further on");
        assert!(!next(RcRdmaWriteMiddle, 12, false), "a PSN already in it");
        assert!(!next(RcRdmaWriteLast, 13, false), "a LAST");
        assert!(!next(RcSendMiddle, 13, false), "another opcode");
        let (bth, ext) = packet(RcRdmaWriteMiddle, 13, false);
        assert!(
            joins(&run, &bth, &ext, 1000, 64, false).is_none(),
            "a shorter payload"
        );
        assert!(
            joins(&run, &bth, &ext, 1024, 3, false).is_none(),
            "a run at its most"
        );
        let mut other = bth;
        other.dest_qp = Qpn::new(8);
        assert!(
            joins(&run, &other, &ext, 1024, 64, false).is_none(),
            "another QP"
        );
        for (first, why) in [
            (building(RcRdmaWriteMiddle, 10, true, 3), "asks for an ACK"),
            (building(RcRdmaWriteFirst, 10, false, 3), "is a FIRST"),
        ] {
            assert!(
                joins(&first, &bth, &ext, 1024, 64, false).is_none(),
                "a run that {why}"
            );
        }
    }

    #[test]
    fn with_ends_a_run_starts_at_a_first_and_ends_at_a_plain_last() {
        use BthOpcode::*;
        let (bth, ext) = packet(RcRdmaWriteMiddle, 13, false);
        let joined = |run: &Building, bth: &BthRepr, len| joins(run, bth, &ext, len, 64, true);
        let first = building(RcRdmaWriteFirst, 10, false, 3);
        assert_eq!(
            joined(&first, &bth, 1024),
            Some(None),
            "a MIDDLE after a FIRST"
        );
        let send = building(RcSendFirst, 10, false, 3);
        let (send_middle, _) = packet(RcSendMiddle, 13, false);
        assert_eq!(
            joined(&send, &send_middle, 1024),
            Some(None),
            "a SEND's MIDDLE"
        );
        assert_eq!(
            joined(&send, &bth, 1024),
            None,
            "a WRITE's MIDDLE after a SEND"
        );
        for ack_req in [false, true] {
            let (last, _) = packet(RcRdmaWriteLast, 13, ack_req);
            assert_eq!(
                joined(&first, &last, 100),
                Some(Some(RunLast { len: 100, ack_req })),
                "a LAST, shorter, asking for an ACK or not"
            );
            assert_eq!(joined(&first, &last, 0), None, "a LAST of no bytes");
            assert_eq!(
                joined(&first, &last, 1025),
                None,
                "a LAST longer than a MIDDLE"
            );
        }
        let (imm, _) = packet(RcRdmaWriteLastWithImmediate, 13, false);
        assert_eq!(joined(&first, &imm, 1024), None, "a LAST with an immediate");
        let mut ended = building(RcRdmaWriteFirst, 10, false, 3);
        ended.last = Some(RunLast {
            len: 1024,
            ack_req: false,
        });
        assert_eq!(joined(&ended, &bth, 1024), None, "anything after a LAST");
        let with_reth = ExtHeaders {
            reth: Some(doorbell_wire::RethRepr {
                va: 0x1000,
                rkey: doorbell_types::Rkey::from_raw(0x500),
                dma_len: 4096,
            }),
            ..ExtHeaders::default()
        };
        let mut reth_first = building(RcRdmaWriteFirst, 10, false, 3);
        reth_first.repr.ext = with_reth;
        assert_eq!(
            joined(&reth_first, &bth, 1024),
            Some(None),
            "a MIDDLE after a RETH"
        );
        assert_eq!(
            joins(&reth_first, &bth, &with_reth, 1024, 64, true),
            None,
            "a follower with extension headers"
        );
        let read = building(RcRdmaReadResponseFirst, 10, false, 3);
        let (read_middle, _) = packet(RcRdmaReadResponseMiddle, 13, false);
        assert_eq!(
            joined(&read, &read_middle, 1024),
            None,
            "a READ response's FIRST heads none"
        );
        assert_eq!(
            joins(&first, &bth, &ext, 1024, 64, false),
            None,
            "without ends"
        );
    }
}
