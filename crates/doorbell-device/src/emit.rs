//! The frame emitter: RoCEv2 frames out of a QP, ready once the NIC has
//! spent its per-packet cost.

use doorbell_pcie::Dma;
use doorbell_types::Psn;
use doorbell_wire::{AethRepr, AethSyndrome, BthRepr, ExtHeaders, RoceIp, RoceRepr, Seal};

use crate::config::{Frame, Unfilled};
use crate::ctx::{AckHeaders, Building, Ctx, hand_over};
use crate::qp::Qp;

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
    let repr = repr(qp, ctx, dst, bth, ext);
    emit_repr(ctx, dst, repr, payload);
}

/// Builds a frame to `dst` with headers `repr` and queues it for the
/// port, as [`emit`] does; nothing if the headers do not fit their opcode.
pub(crate) fn emit_repr<D: Dma>(
    ctx: &mut Ctx<'_, D>,
    dst: [u8; 4],
    repr: RoceRepr,
    payload: &[u8],
) {
    let Some(mut f) = building(ctx, repr, payload.len()) else {
        return;
    };
    f.bytes[f.payload.clone()].copy_from_slice(payload);
    finish(ctx, dst, &mut f);
}

/// A frame with headers `repr` and room for `payload_len` bytes of
/// payload, for the payload to be put in before [`finish`]: `None` if the
/// headers do not fit their opcode or the frame would be too long. Its
/// buffer is a spare of the right length, not cleared: every byte is
/// written before the frame leaves.
#[inline(always)]
pub(crate) fn building<D: Dma>(
    ctx: &mut Ctx<'_, D>,
    repr: RoceRepr,
    payload_len: usize,
) -> Option<Building> {
    let len = repr.checked_frame_len(payload_len).ok()?;
    let at = repr.header_len();
    Some(Building {
        bytes: ctx.out.spare.take_len(len),
        repr,
        payload: at..at + payload_len,
        ready: ctx.t,
        left: None,
        segments: 1,
        last: None,
    })
}

/// Writes the headers, pad and ICRC around the payload already in `f` and
/// queues the frame for the port, ready once its payload is in and the NIC
/// has spent its per-packet cost (for each packet of a run,
/// [`Building::segments`]); false, with the buffer back among the spares,
/// if the headers cannot be written (never, for a payload of an MTU at
/// most).
pub(crate) fn finish<D: Dma>(ctx: &mut Ctx<'_, D>, dst: [u8; 4], f: &mut Building) -> bool {
    // `building` checked the headers and made the buffer the frame's length.
    let mut bytes = std::mem::take(&mut f.bytes);
    let len = bytes.len();
    // The ICRC covers the payload: a frame whose payload is left in memory
    // is sealed once it is filled in.
    let seal = match f.left {
        Some(_) => Seal::Later,
        None => ctx.out.seal,
    };
    let headers = if hands_over(ctx, f.left.is_none(), &f.repr) {
        let mut list = ctx.out.header_lists.take();
        hand_over(&mut list, &f.repr, 0, f.payload.clone(), len);
        list
    } else {
        let emitted = f.repr.emit_checked(&mut bytes, f.payload.len(), len, seal);
        if emitted.is_err() {
            ctx.out.spare.give(bytes);
            return false;
        }
        Vec::new()
    };
    ctx.t = ctx.t.max(f.ready);
    for _ in 0..f.segments {
        ctx.charge(ctx.cfg.timing.tx_packet);
    }
    ctx.out.counters.tx_packets += u64::from(f.segments);
    // A payload of an MTU at most, at an offset of a few dozen bytes.
    let unfilled = f.left.map(|from| Unfilled {
        from,
        at: f.payload.start as u32,
        len: f.payload.len() as u32,
        segments: f.segments,
        last: f.last,
    });
    let frame = Frame {
        dst,
        bytes,
        ready: ctx.t,
        unfilled,
        train: 1,
        segment: 0,
        headers,
    };
    match unfilled {
        // Every byte in the frame: it may join a train.
        None => ctx.out.push_packet(frame, f.repr.bth.dest_qp),
        Some(_) => ctx.out.push(frame),
    }
    true
}

/// Queues the packet with headers `repr` and `payload` to `dst`, on a
/// NIC that makes trains ([`crate::NicConfig::max_train`]): as the next
/// packet of the train the last frame queued is
/// ([`crate::ctx::Outputs::train_for`]), built where it goes, or else as
/// the first packet of a train of its own. What [`building`], [`finish`]
/// and the join would do, without a frame built aside or a copy into the
/// train. False, with nothing done, where the headers do not fit.
pub(crate) fn onto_train<D: Dma>(
    ctx: &mut Ctx<'_, D>,
    dst: [u8; 4],
    repr: &RoceRepr,
    payload: &[u8],
) -> bool {
    let Ok(len) = repr.checked_frame_len(payload.len()) else {
        return false;
    };
    let (seal, cost) = (ctx.out.seal, ctx.cfg.timing.tx_packet);
    let t = ctx.t.add(cost);
    let parsed = hands_over(ctx, true, repr);
    let within = repr.payload_range(payload.len());
    let to = repr.bth.dest_qp;
    if let Some(train) = ctx.out.train_for(to, dst, len, parsed) {
        let at = train.bytes.len();
        train.bytes.resize(at + len, 0);
        let packet = &mut train.bytes[at..];
        packet[within.clone()].copy_from_slice(payload);
        if parsed {
            let within = at + within.start..at + within.end;
            hand_over(&mut train.headers, repr, at, within, len);
        } else {
            let emitted = repr.emit_checked(packet, payload.len(), len, seal);
            // `checked_frame_len` took the headers, and the packet is that
            // long.
            debug_assert!(emitted.is_ok());
        }
        train.ready = train.ready.max(t);
    } else {
        // A spare of the frame's length, each byte written before the frame
        // leaves (the headers here, or where they are handed over).
        let mut bytes = ctx.out.spare.take_len(len);
        bytes[within.clone()].copy_from_slice(payload);
        let headers = if parsed {
            let mut list = ctx.out.header_lists.take();
            hand_over(&mut list, repr, 0, within, len);
            list
        } else {
            let emitted = repr.emit_checked(&mut bytes, payload.len(), len, seal);
            debug_assert!(emitted.is_ok());
            Vec::new()
        };
        let frame = Frame {
            dst,
            bytes,
            ready: t,
            unfilled: None,
            train: 1,
            segment: 0,
            headers,
        };
        ctx.out.push_packet(frame, to);
    }
    ctx.charge(cost);
    ctx.out.counters.tx_packets += 1;
    true
}

/// Whether a NIC hands the headers `repr` over parsed, leaving them
/// unwritten ([`Frame::headers`]): a NIC that makes trains
/// ([`crate::NicConfig::max_train`]) does, for a packet whose bytes are all
/// in its frame (`carried`) and that has no DETH (a UD receive writes the
/// IP header its packet came with into the receive buffer).
fn hands_over<D: Dma>(ctx: &Ctx<'_, D>, carried: bool, repr: &RoceRepr) -> bool {
    ctx.cfg.max_train > 1 && carried && repr.ext.deth.is_none()
}

/// The headers of a frame from `qp` to `dst`.
pub(crate) fn repr<D: Dma>(
    qp: &Qp,
    ctx: &Ctx<'_, D>,
    dst: [u8; 4],
    bth: BthRepr,
    ext: ExtHeaders,
) -> RoceRepr {
    RoceRepr {
        ip: RoceIp::v4(ctx.cfg.ipv4, dst),
        src_port: src_port(qp, ctx),
        bth,
        ext,
    }
}

/// The UDP source port of `qp`'s frames.
pub(crate) fn src_port<D: Dma>(qp: &Qp, ctx: &Ctx<'_, D>) -> u16 {
    ctx.cfg
        .udp_src_port
        .unwrap_or(0xc000 | (qp.qpn.get() & 0x3fff) as u16)
}

/// The headers of an ACK or NAK of `psn` from `qp` to `dst`, with its
/// MSN, ready now.
pub(crate) fn aeth_headers<D: Dma>(
    qp: &Qp,
    ctx: &Ctx<'_, D>,
    dst: [u8; 4],
    psn: Psn,
    syndrome: AethSyndrome,
) -> AckHeaders {
    AckHeaders {
        qpn: qp.qpn,
        src: ctx.cfg.ipv4,
        dst,
        src_port: src_port(qp, ctx),
        dest_qp: qp.attrs.dest_qpn.unwrap_or_default(),
        psn,
        aeth: AethRepr {
            syndrome,
            msn: qp.resp.msn(),
        },
        ready: ctx.t,
    }
}

/// Destination IPv4 address of an RC QP.
pub(crate) fn peer_ip(qp: &Qp) -> Option<[u8; 4]> {
    qp.attrs
        .av
        .and_then(|av| doorbell_wire::Gid::new(av.dgid).to_ipv4())
}
