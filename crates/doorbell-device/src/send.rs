//! The send engine: doorbells, WQE execution in posting order, and new
//! request messages (RC through the transmitter; UC and UD at once, since
//! nothing comes back for them).

use doorbell_hif::{Access, QpState, QpType};
use doorbell_layout::cqe::Syndrome;
use doorbell_layout::dbr::{self, QpDoorbellRecord};
use doorbell_layout::uar::SendDoorbell;
use doorbell_layout::wqe::{self, CtrlSeg, WQEBB_LEN, WqeOpcode, wqebbs_for_ds};
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_roce::PsnRange;
use doorbell_types::Qpn;
use doorbell_types::{Duration, Mkey};
use doorbell_wire::{BthOpcode, BthRepr, DethRepr, ExtHeaders, ImmDtRepr, RethRepr};

use crate::complete::{flush_sq, retire};
use crate::cqe::send_done;
use crate::ctx::Ctx;
use crate::emit::peer_ip;
use crate::fault::{Fault, Outcome};
use crate::fetch::fetch_upto;
use crate::qp::Qp;
use crate::sge::{MAX_MSG_LEN, check_keys};
use crate::transmit::{Packets, request_opcode, send_packets, send_window};
use crate::wq::{Payload, SentMsg};
use crate::wqe::{Wqe, parse_wqe};

/// Takes a send doorbell (8 bytes, or a BlueFlame WQE) for `qp`.
pub(crate) fn doorbell<D: Dma>(
    qp: &mut Qp,
    db: SendDoorbell,
    bf: Option<&[u8]>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    let new_pi = db.wqe_index.wrapping_add(wqebbs_for_ds(db.ds).max(1));
    produce(qp, new_pi, bf.map(|b| (db, b)), ctx)
}

/// Takes a send doorbell through memory: the device reads `qp`'s send
/// counter from its doorbell record (which the provider writes before it
/// stores to the register, and which counts WQEBBs exactly), and fetches the
/// WQEs from the ring. A record that cannot be read counts as a bad
/// doorbell; one that has not moved is nothing to do.
pub(crate) fn record<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Outcome {
    let word = dbr::field::WORD1;
    let Some(addr) = qp.p.dbr_addr.checked_add(word.start as u64) else {
        ctx.out.counters.bad_doorbells += 1;
        return Ok(());
    };
    let mut rec = [0u8; dbr::DBR_LEN];
    let tag = DmaTag::new(qp.qpn, DmaPurpose::DoorbellRecord);
    if !ctx.read(tag, addr, &mut rec[word]) {
        ctx.out.counters.bad_doorbells += 1;
        return Ok(());
    }
    let pi = QpDoorbellRecord::new_unchecked(&rec[..]).send_counter();
    if pi == qp.sq.pi {
        return Ok(());
    }
    ctx.out.counters.doorbells_by_record += 1;
    produce(qp, pi, None, ctx)
}

/// Moves `qp`'s producer index to `new_pi` (refused if it would go
/// backwards or past the ring) and executes what it uncovers; a BlueFlame
/// WQE that came with its doorbell is used instead of fetching it.
fn produce<D: Dma>(
    qp: &mut Qp,
    new_pi: u16,
    bf: Option<(SendDoorbell, &[u8])>,
    ctx: &mut Ctx<'_, D>,
) -> Outcome {
    ctx.charge(ctx.cfg.timing.doorbell);
    if !matches!(qp.state, QpState::Rts | QpState::Err) {
        ctx.out.counters.doorbells_not_ready += 1;
        return Ok(());
    }
    let ahead = new_pi.wrapping_sub(qp.sq.ci);
    if ahead == 0 || ahead > qp.sq.size || ahead < qp.sq.posted() {
        ctx.out.counters.bad_doorbells += 1;
        return Ok(());
    }
    qp.sq.pi = new_pi;
    if qp.state == QpState::Err {
        flush_sq(qp, ctx);
        return Ok(());
    }
    if let Some((db, bf)) = bf {
        // The WQE came with the doorbell: fetch only what precedes it.
        if fetch_upto(qp, db.wqe_index, ctx) {
            let n = usize::from(wqebbs_for_ds(db.ds));
            for chunk in bf.chunks_exact(WQEBB_LEN).take(n) {
                let mut b = [0u8; WQEBB_LEN];
                b.copy_from_slice(chunk);
                qp.sq.wqe_cache.push_back(b);
            }
        }
    }
    pump(qp, ctx)
}

/// Executes WQEs from the consumer index while the QP may send, then sends
/// what the window allows (also when the next WQE has to wait).
///
/// A NIC that leaves messages for this pass ([`sends_as_executed`])
/// behaves as one that sends each message as it executes it, faults
/// included. Where a WQE is refused, the messages executed before it go
/// first, as their own passes would have sent them; if that sending
/// fails, its fault is the one reported (the other NIC met it first), and
/// the refused WQE, which execution leaves on the ring, is flushed in its
/// turn. Where nothing was left for this pass, a fault ends it at once, as
/// it ends execution on the other NIC.
pub(crate) fn pump<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>) -> Outcome {
    let mut left = false;
    let executed = execute(qp, ctx, &mut left);
    if executed.is_err() && !left {
        return executed;
    }
    if qp.state == QpState::Rts
        && qp.p.qp_type == QpType::Rc
        && let Err(sent) = send_window(qp, ctx)
    {
        return Err(sent);
    }
    executed
}

/// Whether an RC message goes out as its WQE executes, rather than with
/// the rest of the doorbell's once [`pump`] has executed them all. A NIC
/// models a send engine that starts a message's first packet as soon as
/// its WQE is parsed; where parsing takes time ([`crate::NicTiming::wqe`])
/// it does. Where it takes none, one pass of the send window for the
/// whole doorbell builds the same packets at the same times, with the
/// window's entry work done once rather than once a message.
fn sends_as_executed<D: Dma>(ctx: &Ctx<'_, D>) -> bool {
    ctx.cfg.timing.wqe != Duration::ZERO
}

/// A malformed WQE at the consumer index.
fn bad_wqe(qp: &Qp, opcode: WqeOpcode, syndrome: Syndrome) -> Fault {
    Fault::Wqe {
        index: qp.sq.ci,
        opcode,
        syndrome,
    }
}

/// Executes WQEs from the consumer index while the QP may send; sets
/// `left` if it left an RC message for [`pump`] to send.
fn execute<D: Dma>(qp: &mut Qp, ctx: &mut Ctx<'_, D>, left: &mut bool) -> Outcome {
    // Looked up once: the oldest outstanding message stays the oldest
    // while WQEs execute (only completions retire it), and one executed
    // now becomes it if none was.
    let mut room = qp.sq.room_before_completions();
    while qp.state == QpState::Rts && qp.sq.ci != qp.sq.pi && !qp.req.is_rnr_waiting() {
        if qp.sq.wqe_cache.is_empty() && !fetch_upto(qp, qp.sq.pi, ctx) {
            return Err(bad_wqe(qp, WqeOpcode::Nop, Syndrome::LocalQpOpErr));
        }
        let avail = qp.sq.posted();
        let Some(head) = qp.sq.wqe_cache.front() else {
            return Ok(());
        };
        let ctrl = CtrlSeg::new_unchecked(&head[..]);
        let (ds, index, opcode) = (ctrl.ds(), ctrl.wqe_index(), ctrl.opcode());
        let fenced = ctrl.fm_ce_se() & wqe::ctrl_flags::FM_MASK != 0;
        let n = wqebbs_for_ds(ds);
        let too_big = usize::from(ds) * wqe::DS_LEN > ctx.cfg.caps.max_sq_desc_sz as usize;
        if ds == 0 || n > avail || too_big || index != qp.sq.ci || ctrl.qpn() != qp.qpn.get() {
            // Left on the ring, as every WQE execution refuses: the fault
            // that completes it steps over it, and a flush before that
            // completes it in its turn.
            return Err(bad_wqe(qp, opcode, Syndrome::LocalQpOpErr));
        }
        if usize::from(n) > qp.sq.wqe_cache.len() && !fetch_upto(qp, qp.sq.pi, ctx) {
            return Err(bad_wqe(qp, opcode, Syndrome::LocalQpOpErr));
        }
        // READ and atomics wait for the outstanding-request limit; a fenced
        // WQE waits for every READ and atomic before it. Both are known
        // from the control segment: a WQE that waits is not parsed (nor
        // its SGE list built) on every look until it may go.
        let rd_out = u8::try_from(qp.sq.reads).unwrap_or(u8::MAX);
        let is_rd = matches!(
            opcode,
            WqeOpcode::RdmaRead | WqeOpcode::AtomicCs | WqeOpcode::AtomicFa
        );
        if qp.p.qp_type == QpType::Rc
            && ((is_rd && rd_out >= qp.attrs.max_rd_atomic.unwrap_or(1).max(1))
                || (fenced && rd_out > 0))
        {
            return Ok(());
        }
        // A WQE posted over one not yet completed waits for completions
        // (decision record 0067).
        if n > room {
            return Ok(());
        }
        room -= n;
        // The WQE is parsed where the cache holds it: its WQEBBs are one
        // slice once the cache is contiguous, which moves blocks only when
        // the cache's own buffer has wrapped (once per turn of it).
        // (The fetch just made holds every WQEBB up to the producer index,
        // `n` at least; a cache short of them is the WQE's error, not a
        // panic.)
        let Some(blocks) = qp.sq.wqe_cache.make_contiguous().get(..usize::from(n)) else {
            return Err(bad_wqe(qp, opcode, Syndrome::LocalQpOpErr));
        };
        let w = match parse_wqe(
            &blocks.as_flattened()[..usize::from(ds) * wqe::DS_LEN],
            qp.p.qp_type,
            &mut ctx.out.payloads,
        ) {
            Ok(w) => w,
            Err(s) => return Err(bad_wqe(qp, opcode, s)),
        };
        ctx.charge(ctx.cfg.timing.wqe);
        match qp.p.qp_type {
            QpType::Rc => execute_rc(qp, w, n, ctx, left)?,
            QpType::Uc => {
                qp.sq.consume(n);
                execute_uc(qp, w, ctx)?;
            }
            QpType::Ud => {
                qp.sq.consume(n);
                execute_ud(qp, w, ctx)?;
            }
        }
    }
    Ok(())
}

/// Checks that the device may write the local buffers of a READ or atomic.
fn check_local_write<D: Dma>(qp: &Qp, p: &Payload, ctx: &Ctx<'_, D>) -> Result<(), Syndrome> {
    let Payload::Sges(sges) = p else {
        return Err(Syndrome::LocalQpOpErr);
    };
    check_keys(ctx.mkeys, qp.p.pd, Access::LOCAL_WRITE, sges)
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
    check_keys(ctx.mkeys, qp.p.pd, 0, sges)
}

/// Executes the RC WQE `w` of `n` WQEBBs at the consumer index: takes it
/// off the ring once its checks pass, queues its message and sends it,
/// or, on a NIC that does not send as it executes, sets `left` and leaves
/// it to [`pump`].
fn execute_rc<D: Dma>(
    qp: &mut Qp,
    w: Wqe,
    n: u16,
    ctx: &mut Ctx<'_, D>,
    left: &mut bool,
) -> Outcome {
    let fail = |syndrome| Fault::Wqe {
        index: w.index,
        opcode: w.opcode,
        syndrome,
    };
    let signaled = w.fm_ce_se & wqe::ctrl_flags::CE_MASK == wqe::ctrl_flags::CQ_UPDATE;
    let len = w.payload.len();
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
    // PSNs are told apart by their distance in a circle of 2^24, up to
    // 2^23 either way: a message of 2^23 PSNs or more (2 GiB at a path MTU
    // of 256 bytes) would read as acknowledged before it is sent. mlx5
    // takes it; this NIC completes it with a length error instead.
    if npsn >= MAX_MSG_PSNS {
        return Err(fail(Syndrome::LocalLengthErr));
    }
    // Its checks passed: the WQE, `n` WQEBBs, leaves the ring for the
    // outstanding messages. (One refused above stays on the ring.)
    qp.sq.consume(n);
    let first = qp.req.alloc(npsn);
    qp.sq.push_outstanding(SentMsg {
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
        psns: PsnRange { first, len: npsn },
        sent: 0,
        done_bytes: 0,
        answered: false,
        implied: Default::default(),
    });
    if npsn == 0 {
        retire(qp, ctx);
        return Ok(());
    }
    if !sends_as_executed(ctx) {
        *left = true;
        return Ok(());
    }
    send_window(qp, ctx)
}

/// The PSNs an RC message may span: less than half the PSN circle.
const MAX_MSG_PSNS: u32 = 1 << 23;

/// Most frames of a UC message built at once (each holds a spare buffer
/// until it is queued).
const UC_BATCH: u32 = 16;

/// A UC SEND or RDMA WRITE: every packet leaves now, with its PSN and no
/// ACK request, and the WQE completes when the last has left (UC has no
/// ACKs, so nothing is retransmitted and no timer runs).
fn execute_uc<D: Dma>(qp: &mut Qp, w: Wqe, ctx: &mut Ctx<'_, D>) -> Outcome {
    let fail = |syndrome| Fault::Wqe {
        index: w.index,
        opcode: w.opcode,
        syndrome,
    };
    let signaled = w.fm_ce_se & wqe::ctrl_flags::CE_MASK == wqe::ctrl_flags::CQ_UPDATE;
    let (is_write, has_imm) = match w.opcode {
        WqeOpcode::Nop => {
            if signaled {
                send_done(qp, w.index, w.opcode, 0, ctx);
            }
            return Ok(());
        }
        WqeOpcode::Send => (false, false),
        WqeOpcode::SendImm => (false, true),
        WqeOpcode::RdmaWrite => (true, false),
        WqeOpcode::RdmaWriteImm => (true, true),
        // UC has no READ and no atomics (the provider refuses them at post).
        _ => return Err(fail(Syndrome::LocalQpOpErr)),
    };
    let len = w.payload.len();
    check_local_read(qp, &w.payload, len, ctx).map_err(fail)?;
    let mtu = u64::from(qp.mtu());
    let n = len.div_ceil(mtu).max(1) as u32;
    let first_psn = qp.req.alloc(n);
    let dqpn = qp.attrs.dest_qpn.unwrap_or_default();
    let headers = |i: u32| {
        let (first, last) = (i == 0, i + 1 == n);
        let op = request_opcode(is_write, has_imm, first, last);
        let op = op.rc_as_uc().ok_or(Syndrome::LocalQpOpErr)?;
        let mut bth = BthRepr::new(op, dqpn, first_psn.add(i));
        bth.solicited = last && w.fm_ce_se & wqe::ctrl_flags::SOLICITED != 0;
        let ext = ExtHeaders {
            reth: (is_write && first).then_some(RethRepr {
                va: w.raddr,
                rkey: Mkey::from_raw(w.rkey),
                dma_len: len as u32,
            }),
            immdt: (has_imm && last).then_some(ImmDtRepr { imm: w.imm }),
            ..ExtHeaders::default()
        };
        Ok((bth, ext))
    };
    let packets = Packets {
        payload: &w.payload,
        len,
        mtu,
        range: 0..n,
        batch: UC_BATCH,
        runs: false,
    };
    send_packets(qp, ctx, peer_ip(qp), packets, headers).map_err(fail)?;
    if signaled {
        send_done(qp, w.index, w.opcode, 0, ctx);
    }
    // UC keeps nothing to send again: the payload's storage is done with.
    ctx.out.payloads.recycle(w.payload);
    Ok(())
}

fn execute_ud<D: Dma>(qp: &mut Qp, w: Wqe, ctx: &mut Ctx<'_, D>) -> Outcome {
    let fail = |syndrome| Fault::Wqe {
        index: w.index,
        opcode: w.opcode,
        syndrome,
    };
    let signaled = w.fm_ce_se & wqe::ctrl_flags::CE_MASK == wqe::ctrl_flags::CQ_UPDATE;
    if w.opcode == WqeOpcode::Nop {
        // Completes in its turn, sending nothing (UD completes at once).
        if signaled {
            send_done(qp, w.index, w.opcode, 0, ctx);
        }
        return Ok(());
    }
    let Some(dest) = w.ud else {
        return Err(fail(Syndrome::LocalQpOpErr));
    };
    if w.payload.len() > u64::from(ctx.cfg.caps.max_mtu) {
        return Err(fail(Syndrome::LocalLengthErr));
    }
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
    let psn = qp.req.alloc(1);
    let mut bth = BthRepr::new(opcode, Qpn::new(dest.dqpn), psn);
    bth.solicited = w.fm_ce_se & wqe::ctrl_flags::SOLICITED != 0;
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey,
            src_qp: qp.qpn,
        }),
        immdt: with_imm.then_some(ImmDtRepr { imm: w.imm }),
        ..ExtHeaders::default()
    };
    let dst = doorbell_wire::Gid::new(dest.dgid).to_ipv4();
    let len = w.payload.len();
    let packets = Packets {
        payload: &w.payload,
        len,
        mtu: len.max(1),
        range: 0..1,
        batch: 1,
        runs: false,
    };
    send_packets(qp, ctx, dst, packets, |_| Ok((bth, ext))).map_err(fail)?;
    if signaled {
        send_done(qp, w.index, w.opcode, 0, ctx);
    }
    ctx.out.payloads.recycle(w.payload);
    Ok(())
}
