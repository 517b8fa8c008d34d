//! A live NIC fed arbitrary frames by a peer that knows its QPNs and PSNs,
//! while its own QPs post sends and receives and its timers run.

use doorbell_layout::wqe::{
    AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, WQEBB_LEN, WqeOpcode, ctrl_flags, field, wqebbs_for_ds,
};
use doorbell_types::{Duration, Mkey, Psn};
use doorbell_wire::{BthOpcode, BthRepr};

use crate::frames::{ExtVals, ext_for};
use crate::input::Input;
use crate::rig::{EPSN, MR_LEN, RQ_STRIDE, Rig, SQ_PSN};

/// Steps [`peer_frames`] runs at most.
pub const MAX_STEPS: usize = 48;

/// Requests a peer sends to a responder.
pub const REQUESTS: [BthOpcode; 20] = {
    use BthOpcode as O;
    [
        O::RcSendFirst,
        O::RcSendMiddle,
        O::RcSendLast,
        O::RcSendLastWithImmediate,
        O::RcSendOnly,
        O::RcSendOnlyWithImmediate,
        O::RcRdmaWriteFirst,
        O::RcRdmaWriteMiddle,
        O::RcRdmaWriteLast,
        O::RcRdmaWriteLastWithImmediate,
        O::RcRdmaWriteOnly,
        O::RcRdmaWriteOnlyWithImmediate,
        O::RcRdmaReadRequest,
        O::RcCompareSwap,
        O::RcFetchAdd,
        O::RcSendLastWithInvalidate,
        O::RcSendOnlyWithInvalidate,
        O::UcSendOnly,
        O::UdSendOnly,
        O::Cnp,
    ]
};

/// Responses a peer's responder sends to a requester.
pub const RESPONSES: [BthOpcode; 6] = {
    use BthOpcode as O;
    [
        O::RcAck,
        O::RcRdmaReadResponseFirst,
        O::RcRdmaReadResponseMiddle,
        O::RcRdmaReadResponseLast,
        O::RcRdmaReadResponseOnly,
        O::RcAtomicAck,
    ]
};

/// What one step of [`peer_frames`] does, by its first byte (mod 6).
///
/// Frames (steps 0 and 1) are read as: a byte (bit 0 the QP; bit 7: the
/// next byte is a raw opcode rather than an index into [`REQUESTS`] or
/// [`RESPONSES`]), the opcode byte, a PSN offset (`u16`, signed) from the
/// next PSN the QP expects (requests) or from its first send PSN
/// (responses), a flags byte (solicited, AckReq, FECN, BECN, MigReq,
/// a P_Key `u16` follows, the ICRC is broken), then the fields of the
/// headers the opcode calls for, in wire order (an address as a choice
/// byte, 0 to 2 for an offset (`u16`) into the open MR, the closed MR or
/// the guard buffer, else a `u64`; a key as a choice byte, 0 the open MR's,
/// 1 the closed MR's, else a `u32`), then the payload length (`u16`, mod
/// 4097) and its fill byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A request from the peer.
    Request = 0,
    /// A response from the peer.
    Response = 1,
    /// A receive WQE posted: the QP (bit 0), an offset into the open MR and
    /// a length (`u16` each).
    PostRecv = 2,
    /// A send WQE posted and rung: the QP (bit 0 of a byte whose upper bits
    /// pick SEND, WRITE, READ, CmpSwap or FetchAdd, mod 5), an offset into
    /// the open MR and a length (`u16` each), the remote address (`u64`)
    /// and key (`u32`).
    PostSend = 3,
    /// Time moves on by a `u16` of microseconds, and timers fire.
    Advance = 4,
    /// A frame of any bytes: a `u16` length and the bytes.
    Raw = 5,
}

/// Target `peer_frames`: up to [`MAX_STEPS`] [`Step`]s on a rig whose two
/// QPs are connected to the peer. Nothing may panic, and at the end the
/// closed MR (no remote write) and the guard buffer (no MR) must be
/// unchanged.
pub fn peer_frames(data: &[u8]) {
    let mut input = Input::new(data);
    let mut rig = Rig::new();
    let mut next_psn = EPSN.map(Psn::new);
    for _ in 0..MAX_STEPS {
        if input.is_empty() {
            break;
        }
        match input.u8() % 6 {
            op @ (0 | 1) => {
                let request = op == 0;
                let b = input.u8();
                let i = usize::from(b & 1);
                let code = input.u8();
                let opcode = match (b & 0x80 != 0, request) {
                    (true, _) => BthOpcode::from(code),
                    (false, true) => REQUESTS[usize::from(code) % REQUESTS.len()],
                    (false, false) => RESPONSES[usize::from(code) % RESPONSES.len()],
                };
                let offset = input.u16() as i16;
                let base = if request {
                    next_psn[i]
                } else {
                    Psn::new(SQ_PSN[i])
                };
                let psn = Psn::new(base.get().wrapping_add(offset as i32 as u32));
                if request && offset == 0 {
                    next_psn[i] = psn.add(1);
                }
                let flags = input.u8();
                let mut bth = BthRepr::new(opcode, rig.qps[i].qpn, psn);
                bth.solicited = flags & 1 != 0;
                bth.ack_req = flags & 2 != 0;
                bth.fecn = flags & 4 != 0;
                bth.becn = flags & 8 != 0;
                bth.mig_req = flags & 0x10 != 0;
                if flags & 0x20 != 0 {
                    bth.pkey = input.u16();
                }
                let vals = ext_vals(&rig, opcode, &mut input);
                let len = usize::from(input.u16()) % 4097;
                let payload = vec![input.u8(); len];
                let ext = ext_for(opcode, &vals);
                if let Some(mut f) = rig.peer_frame(i, bth, ext, &payload) {
                    if flags & 0x40 != 0 {
                        let at = f.len() / 2;
                        f[at] ^= 0x01;
                    }
                    rig.frame(&f);
                }
            }
            2 => {
                let i = usize::from(input.u8() & 1);
                let (off, len) = (input.u16(), input.u16());
                post_recv(&mut rig, i, u64::from(off), u32::from(len));
            }
            3 => {
                let b = input.u8();
                let i = usize::from(b & 1);
                let kind = usize::from(b >> 1) % 5;
                let (off, len) = (input.u16(), input.u16());
                let (raddr, rkey) = (input.u64(), input.u32());
                post_send(
                    &mut rig,
                    i,
                    kind,
                    u64::from(off),
                    u32::from(len),
                    raddr,
                    rkey,
                );
            }
            4 => rig.advance(Duration::from_us(u64::from(input.u16()))),
            _ => {
                let bytes = input.long_bytes();
                rig.frame(bytes);
            }
        }
        rig.drain();
        rig.consume_cqes();
    }
    rig.advance(Duration::from_us(1_000_000));
    rig.drain();
    rig.check_guards();
}

/// Reads the header fields `opcode` calls for (see [`Step`]).
fn ext_vals(rig: &Rig, opcode: BthOpcode, input: &mut Input<'_>) -> ExtVals {
    let mut v = ExtVals::default();
    if opcode.has_deth() {
        v.qkey = input.u32();
        v.src_qp = input.u32();
    }
    if opcode.has_reth() || opcode.has_atomic_eth() {
        v.va = addr_choice(rig, input);
        v.rkey = key_choice(rig, input);
    }
    if opcode.has_reth() {
        v.dma_len = input.u32();
    }
    if opcode.has_atomic_eth() {
        v.swap_add = input.u64();
        v.compare = input.u64();
    }
    if opcode.has_aeth() {
        v.syndrome = input.u8();
        v.msn = input.u32();
    }
    if opcode.has_atomic_ack_eth() {
        v.orig = input.u64();
    }
    if opcode.has_immdt() {
        v.imm = input.u32();
    }
    if opcode.has_ieth() {
        v.rkey = key_choice(rig, input);
    }
    v
}

fn addr_choice(rig: &Rig, input: &mut Input<'_>) -> u64 {
    let base = match input.u8() {
        0 => rig.open_buf,
        1 => rig.closed_buf,
        2 => rig.guard_buf,
        _ => return input.u64(),
    };
    base.get() + u64::from(input.u16())
}

fn key_choice(rig: &Rig, input: &mut Input<'_>) -> u32 {
    match input.u8() {
        0 => rig.open_mr.raw(),
        1 => rig.closed_mr.raw(),
        _ => input.u32(),
    }
}

/// Posts one receive WQE of one SGE into the open MR.
fn post_recv(rig: &mut Rig, i: usize, off: u64, len: u32) {
    let mut w = [0u8; RQ_STRIDE as usize];
    let mut d = DataSeg::new_unchecked(&mut w[..field::DATA_LEN]);
    d.set_byte_count(len);
    d.set_lkey(rig.open_mr.raw());
    d.set_addr(rig.open_buf.get() + off % MR_LEN);
    // The list ends at the first SGE with the invalid key (MLX5_INVALID_LKEY).
    DataSeg::new_unchecked(&mut w[field::DATA_LEN..2 * field::DATA_LEN])
        .set_lkey(Mkey::INVALID.raw());
    let pi = rig.qps[i].rq_pi;
    rig.write_rq(i, pi, &w);
    rig.set_recv_counter(i, pi.wrapping_add(1));
}

/// Posts and rings one signalled send WQE: SEND, WRITE, READ, CmpSwap or
/// FetchAdd, its local buffer in the open MR.
fn post_send(rig: &mut Rig, i: usize, kind: usize, off: u64, len: u32, raddr: u64, rkey: u32) {
    let opcode = [
        WqeOpcode::Send,
        WqeOpcode::RdmaWrite,
        WqeOpcode::RdmaRead,
        WqeOpcode::AtomicCs,
        WqeOpcode::AtomicFa,
    ][kind];
    let atomic = matches!(opcode, WqeOpcode::AtomicCs | WqeOpcode::AtomicFa);
    let mut w = [0u8; WQEBB_LEN];
    let mut at = field::CTRL_LEN;
    if opcode != WqeOpcode::Send {
        let mut r = RaddrSeg::new_unchecked(&mut w[at..at + field::RADDR_LEN]);
        r.set_raddr(raddr);
        r.set_rkey(rkey);
        at += field::RADDR_LEN;
    }
    if atomic {
        let mut a = AtomicSeg::new_unchecked(&mut w[at..at + field::ATOMIC_LEN]);
        a.set_swap_add(u64::from(len));
        a.set_compare(off);
        at += field::ATOMIC_LEN;
    }
    let mut d = DataSeg::new_unchecked(&mut w[at..at + field::DATA_LEN]);
    d.set_byte_count(if atomic { 8 } else { len });
    d.set_lkey(rig.open_mr.raw());
    d.set_addr(rig.open_buf.get() + ((off % MR_LEN) & !7));
    at += field::DATA_LEN;
    let ds = (at / 16) as u8;
    let pi = rig.qps[i].sq_pi;
    let qpn = rig.qps[i].qpn.get();
    let mut c = CtrlSeg::new_unchecked(&mut w[..field::CTRL_LEN]);
    c.set_opmod_idx_opcode(0, pi, opcode);
    c.set_qpn_ds(qpn, ds);
    c.set_fm_ce_se(ctrl_flags::CQ_UPDATE);
    rig.write_sq(i, pi, &w);
    rig.set_send_counter(i, pi.wrapping_add(wqebbs_for_ds(ds)));
    let (uar, reg) = (rig.uar, crate::rig::REG);
    rig.mmio(uar, reg, &w[..8]);
}
