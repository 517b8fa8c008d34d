//! The CQE writer: send and receive completions, good and bad, and the
//! events they raise.

use doorbell_hif::NicEvent;
use doorbell_layout::cqe::{Cqe64, CqeOpcode, Syndrome};
use doorbell_layout::wqe::WqeOpcode;
use doorbell_pcie::Dma;
use doorbell_types::Cqn;

use crate::cq::CqeWrite;
use crate::ctx::Ctx;
use crate::qp::Qp;

/// Writes a CQE of `qp` to `cqn` and raises the events it causes. Its
/// timestamp is the device's time when it starts the write, in ticks of
/// [`doorbell_hif::CORE_CLOCK_KHZ`]; it carries the QP's user index in
/// `srqn_uidx`, as mlx5 hardware does for a context of CQE version 1.
///
/// A CQE the CQ cannot take (it overran, or is in error since it did) is
/// lost: the CQ error event is raised once, and `ctx.cqe_lost` tells the
/// caller to move `qp` to the error state.
pub(crate) fn write_cqe<D: Dma>(
    ctx: &mut Ctx<'_, D>,
    qp: &Qp,
    cqn: Cqn,
    opcode: CqeOpcode,
    solicited: bool,
    fill: impl FnOnce(&mut Cqe64<&mut [u8]>),
) {
    let Some(cq) = ctx.cqs.get_mut(&cqn) else {
        return;
    };
    let was_error = cq.is_error();
    ctx.t = ctx.t.add(ctx.cfg.timing.cqe);
    ctx.busy = ctx.busy.add(ctx.cfg.timing.cqe);
    let stamp = ctx.t.as_ps() / (1_000_000_000 / doorbell_hif::CORE_CLOCK_KHZ);
    let uidx = qp.p.user_index;
    let fill = |c: &mut Cqe64<&mut [u8]>| {
        c.set_timestamp(stamp);
        c.set_srqn_uidx(uidx);
        fill(c);
    };
    match cq.write(ctx.dma, &mut ctx.t, qp.qpn, opcode, solicited, fill) {
        CqeWrite::Written { event: true } => ctx.raise(NicEvent::Completion(cqn)),
        CqeWrite::Written { event: false } => {}
        CqeWrite::Overrun | CqeWrite::DmaFault => {
            // One CQ error event, when the CQ goes to error; the QP whose
            // completion was lost goes to error too (`Ctx::cqe_lost`).
            ctx.cqe_lost = true;
            if !was_error {
                ctx.raise(NicEvent::CqError(cqn));
            }
        }
    }
}

/// A successful send-side completion.
pub(crate) fn send_done<D: Dma>(
    qp: &Qp,
    index: u16,
    opcode: WqeOpcode,
    byte_cnt: u32,
    ctx: &mut Ctx<'_, D>,
) {
    let qpn = qp.qpn;
    write_cqe(ctx, qp, qp.p.send_cq, CqeOpcode::Req, false, |c| {
        c.set_sop_qpn(u8::from(opcode), qpn.get());
        c.set_wqe_counter(index);
        c.set_byte_cnt(byte_cnt);
    });
}

/// A send-side error completion.
pub(crate) fn send_error<D: Dma>(
    qp: &Qp,
    index: u16,
    opcode: WqeOpcode,
    s: Syndrome,
    ctx: &mut Ctx<'_, D>,
) {
    let qpn = qp.qpn;
    if s == Syndrome::WrFlushErr {
        ctx.out.counters.req_cqe_flush_error += 1;
    } else {
        ctx.out.counters.req_cqe_error += 1;
    }
    write_cqe(ctx, qp, qp.p.send_cq, CqeOpcode::ReqErr, false, |c| {
        c.set_sop_qpn(u8::from(opcode), qpn.get());
        c.set_wqe_counter(index);
        c.set_syndrome(s, 0);
    });
}

/// A successful receive completion.
pub(crate) struct RecvDone {
    pub(crate) index: u16,
    pub(crate) opcode: CqeOpcode,
    pub(crate) byte_cnt: u32,
    pub(crate) imm: Option<u32>,
    pub(crate) solicited: bool,
    /// UD: the source QP, and the RoCE packet type mlx5 reports in the
    /// SL bits (`doorbell_layout::cqe::ROCE_PKT_*`).
    pub(crate) ud_src: Option<(u32, u8)>,
}

/// Writes a successful receive completion.
pub(crate) fn recv_done<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, d: RecvDone) {
    let qpn = qp.qpn;
    write_cqe(ctx, qp, qp.p.recv_cq, d.opcode, d.solicited, |c| {
        c.set_sop_qpn(0, qpn.get());
        c.set_wqe_counter(d.index);
        c.set_byte_cnt(d.byte_cnt);
        if let Some(imm) = d.imm {
            c.set_imm(imm);
        }
        if let Some((src, pkt_type)) = d.ud_src {
            c.set_flags_rqpn(src, pkt_type, 1);
        }
    });
}

/// A receive-side error completion.
pub(crate) fn recv_error<D: Dma>(qp: &Qp, ctx: &mut Ctx<'_, D>, index: u16, s: Syndrome) {
    let qpn = qp.qpn;
    match s {
        Syndrome::WrFlushErr => ctx.out.counters.resp_cqe_flush_error += 1,
        Syndrome::LocalLengthErr => {
            ctx.out.counters.resp_local_length_error += 1;
            ctx.out.counters.resp_cqe_error += 1;
        }
        _ => ctx.out.counters.resp_cqe_error += 1,
    }
    write_cqe(ctx, qp, qp.p.recv_cq, CqeOpcode::RespErr, false, |c| {
        c.set_sop_qpn(0, qpn.get());
        c.set_wqe_counter(index);
        c.set_syndrome(s, 0);
    });
}
