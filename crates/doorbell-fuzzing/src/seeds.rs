//! The seed corpus of every target: a few valid inputs each (frames,
//! headers, WQEs, CQEs, commands, call sequences), written to
//! `fuzz/corpus/<target>/` by the `write_seeds` example.
//!
//! Seeds that name device objects (QPNs, keys, addresses) take them from
//! a [`Rig`] or a [`Setup`] made as the harness makes it, so they stay
//! valid inputs as long as the harness and the device are deterministic.

use doorbell_hif::codec::encode_result;
use doorbell_hif::{CmdError, CmdOut, Command, ObjKind, QpAttrs, QpState};
use doorbell_layout::cqe::{CQE_LEN, Cqe64, CqeOpcode, Syndrome};
use doorbell_layout::dbr::{CqDoorbellRecord, DBR_LEN, QpDoorbellRecord};
use doorbell_layout::eqe::{EQE_LEN, EqDoorbell, Eqe64, EventType};
use doorbell_layout::uar::{CQ_DOORBELL, CqArmDoorbell, EQ_DOORBELL, SendDoorbell};
use doorbell_layout::wqe::{
    AtomicSeg, CtrlSeg, DataSeg, InlineSeg, RaddrSeg, WQEBB_LEN, WqeOpcode, ctrl_flags, field,
};
use doorbell_types::{Pdn, Psn, Qpn, Rkey};
use doorbell_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthOpcode, BthRepr, DethRepr,
    ExtHeaders, IethRepr, ImmDtRepr, NakCode, RethRepr, RoceIp, RoceRepr,
};

use crate::frames::{ExtVals, ext_for};
use crate::input::Seed;
use crate::rig::{EPSN, REG, Rig, SQ_PSN};
use crate::verbs::Setup;
use crate::wire::HeaderKind;

/// A seed: a file name and its bytes.
pub type SeedFile = (&'static str, Vec<u8>);

/// The seeds of the target `name` (none for a name no target has).
pub fn seeds(name: &str) -> Vec<SeedFile> {
    match name {
        "roce_frame" => roce_frame(),
        "ext_header" => ext_header(),
        "sq_wqe" => sq_wqe(),
        "rq_wqe" => rq_wqe(),
        "cqe_record" => cqe_record(),
        "poll_cq" => poll_cq(),
        "uar_mmio" => uar_mmio(),
        "command" => command(),
        "command_result" => command_result(),
        "peer_frames" => peer_frames(),
        "ibverbs_calls" => ibverbs_calls(),
        _ => Vec::new(),
    }
}

fn frame(ip: RoceIp, opcode: BthOpcode, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
    let mut bth = BthRepr::new(opcode, Qpn::new(0x101), Psn::new(77));
    bth.ack_req = opcode.is_request();
    let repr = RoceRepr {
        ip,
        src_port: 0xc123,
        bth,
        ext,
    };
    let mut out = Vec::new();
    repr.emit_to_vec(payload, &mut out).expect("seed frame");
    out
}

fn vals() -> ExtVals {
    ExtVals {
        va: 0x7f00_0000_1000,
        rkey: 0x0012_3456,
        dma_len: 256,
        swap_add: 5,
        compare: 9,
        syndrome: AethSyndrome::Ack { credits: 0x1f }.encode(),
        msn: 3,
        orig: 41,
        imm: 0xdead_beef,
        qkey: 0x1111_1111,
        src_qp: 0x2a,
    }
}

fn roce_frame() -> Vec<SeedFile> {
    let v4 = RoceIp::v4([10, 0, 0, 1], [10, 0, 0, 2]);
    let v6 = RoceIp::v6([0xfe; 16], [0x20; 16]);
    let v = vals();
    let f = |ip, op, payload: &[u8]| frame(ip, op, ext_for(op, &v), payload);
    let nak = ExtVals {
        syndrome: AethSyndrome::Nak(NakCode::PsnSeqErr).encode(),
        ..v
    };
    vec![
        ("send_only_v4", f(v4, BthOpcode::RcSendOnly, b"hello")),
        (
            "write_first_v6",
            f(v6, BthOpcode::RcRdmaWriteFirst, &[0xab; 256]),
        ),
        ("read_request", f(v4, BthOpcode::RcRdmaReadRequest, &[])),
        (
            "read_response_only",
            f(v4, BthOpcode::RcRdmaReadResponseOnly, &[7; 33]),
        ),
        (
            "nak",
            frame(v4, BthOpcode::RcAck, ext_for(BthOpcode::RcAck, &nak), &[]),
        ),
        ("atomic_ack", f(v4, BthOpcode::RcAtomicAck, &[])),
        ("cmp_swap", f(v6, BthOpcode::RcCompareSwap, &[])),
        (
            "ud_send_imm",
            f(v4, BthOpcode::UdSendOnlyWithImmediate, b"ud"),
        ),
        (
            "send_inv",
            f(v4, BthOpcode::RcSendOnlyWithInvalidate, b"inv"),
        ),
        ("cnp", f(v4, BthOpcode::Cnp, &[])),
    ]
}

fn header<F: FnOnce(&mut [u8])>(kind: HeaderKind, len: usize, emit: F) -> Vec<u8> {
    let mut b = vec![0u8; len];
    emit(&mut b);
    Seed::new().u8(kind as u8).bytes(&b).into_bytes()
}

fn ext_header() -> Vec<SeedFile> {
    use doorbell_wire::{
        AethHeader, AtomicAckEthHeader, AtomicEthHeader, BthHeader, DethHeader, IethHeader,
        ImmDtHeader, RethHeader,
    };
    let bth = BthRepr::new(
        BthOpcode::RcRdmaWriteOnly,
        Qpn::new(0x12),
        Psn::new(0xff_fffe),
    );
    let reth = RethRepr {
        va: 0x1000,
        rkey: Rkey::from_raw(0x2233),
        dma_len: 4096,
    };
    let aeth = AethRepr {
        syndrome: AethSyndrome::RnrNak { timer: 12 },
        msn: 0x00ab_cdef,
    };
    let atomic = AtomicEthRepr {
        va: 0x2000,
        rkey: Rkey::from_raw(9),
        swap_add: 1,
        compare: 2,
    };
    let op = BthOpcode::RcRdmaWriteOnlyWithImmediate;
    let ext = ext_for(op, &vals());
    let mut set = vec![0u8; op.ext_headers_len()];
    ext.emit(op, &mut set);
    vec![
        (
            "bth",
            header(HeaderKind::Bth, 12, |b| {
                bth.emit(&mut BthHeader::new_unchecked(b))
            }),
        ),
        (
            "reth",
            header(HeaderKind::Reth, 16, |b| {
                reth.emit(&mut RethHeader::new_unchecked(b))
            }),
        ),
        (
            "aeth_rnr",
            header(HeaderKind::Aeth, 4, |b| {
                aeth.emit(&mut AethHeader::new_unchecked(b))
            }),
        ),
        (
            "atomic_eth",
            header(HeaderKind::AtomicEth, 28, |b| {
                atomic.emit(&mut AtomicEthHeader::new_unchecked(b))
            }),
        ),
        (
            "atomic_ack_eth",
            header(HeaderKind::AtomicAckEth, 8, |b| {
                AtomicAckEthRepr { orig: 77 }.emit(&mut AtomicAckEthHeader::new_unchecked(b))
            }),
        ),
        (
            "immdt",
            header(HeaderKind::ImmDt, 4, |b| {
                ImmDtRepr { imm: 0x0102_0304 }.emit(&mut ImmDtHeader::new_unchecked(b))
            }),
        ),
        (
            "ieth",
            header(HeaderKind::Ieth, 4, |b| {
                IethRepr {
                    rkey: Rkey::from_raw(0x55),
                }
                .emit(&mut IethHeader::new_unchecked(b))
            }),
        ),
        (
            "deth",
            header(HeaderKind::Deth, 8, |b| {
                DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: Qpn::new(1),
                }
                .emit(&mut DethHeader::new_unchecked(b))
            }),
        ),
        (
            "set_write_imm",
            Seed::new()
                .u8(HeaderKind::Set as u8)
                .u8(u8::from(op))
                .bytes(&set)
                .into_bytes(),
        ),
    ]
}

/// A send WQE of one WQEBB: ctrl, then raddr (all but SEND), atomic
/// (atomics), then one data segment in the rig's open MR.
fn send_wqe(rig: &Rig, i: usize, index: u16, opcode: WqeOpcode, len: u32) -> [u8; WQEBB_LEN] {
    let mut w = [0u8; WQEBB_LEN];
    let mut at = field::CTRL_LEN;
    if opcode != WqeOpcode::Send {
        let mut r = RaddrSeg::new_unchecked(&mut w[at..at + field::RADDR_LEN]);
        r.set_raddr(0x7000_0000);
        r.set_rkey(0x4242);
        at += field::RADDR_LEN;
    }
    if matches!(opcode, WqeOpcode::AtomicCs | WqeOpcode::AtomicFa) {
        let mut a = AtomicSeg::new_unchecked(&mut w[at..at + field::ATOMIC_LEN]);
        a.set_swap_add(1);
        a.set_compare(0);
        at += field::ATOMIC_LEN;
    }
    let mut d = DataSeg::new_unchecked(&mut w[at..at + field::DATA_LEN]);
    d.set_byte_count(len);
    d.set_lkey(rig.open_mr.raw());
    d.set_addr(rig.open_buf.get());
    at += field::DATA_LEN;
    let mut c = CtrlSeg::new_unchecked(&mut w[..field::CTRL_LEN]);
    c.set_opmod_idx_opcode(0, index, opcode);
    c.set_qpn_ds(rig.qps[i].qpn.get(), (at / 16) as u8);
    c.set_fm_ce_se(ctrl_flags::CQ_UPDATE);
    w
}

/// A SEND of inline data, in one WQEBB.
fn inline_send(rig: &Rig, i: usize, data: &[u8]) -> [u8; WQEBB_LEN] {
    let mut w = [0u8; WQEBB_LEN];
    let at = field::CTRL_LEN;
    InlineSeg::new_unchecked(&mut w[at..at + field::INLINE_HDR_LEN])
        .set_byte_count(data.len() as u32);
    let d = at + field::INLINE_HDR_LEN;
    w[d..d + data.len()].copy_from_slice(data);
    let ds = (d + data.len()).div_ceil(16) as u8;
    let mut c = CtrlSeg::new_unchecked(&mut w[..field::CTRL_LEN]);
    c.set_opmod_idx_opcode(0, 0, WqeOpcode::Send);
    c.set_qpn_ds(rig.qps[i].qpn.get(), ds);
    c.set_fm_ce_se(ctrl_flags::CQ_UPDATE);
    w
}

fn sq_wqe() -> Vec<SeedFile> {
    let rig = Rig::new();
    let seed = |flags: u8, posted: u8, wqes: &[[u8; WQEBB_LEN]]| {
        let mut s = Seed::new().u8(flags).u16(0).u8(posted);
        for w in wqes {
            s = s.bytes(w);
        }
        s.into_bytes()
    };
    let write = send_wqe(&rig, 0, 0, WqeOpcode::RdmaWrite, 64);
    let read = send_wqe(&rig, 1, 0, WqeOpcode::RdmaRead, 128);
    let fa = send_wqe(&rig, 0, 0, WqeOpcode::AtomicFa, 8);
    let send0 = send_wqe(&rig, 0, 0, WqeOpcode::Send, 32);
    let write1 = send_wqe(&rig, 0, 1, WqeOpcode::RdmaWrite, 16);
    vec![
        ("write_doorbell", seed(0, 1, &[write])),
        (
            "inline_send_blueflame",
            seed(2, 1, &[inline_send(&rig, 0, b"blueflame")]),
        ),
        ("read_by_record", seed(4 | 1, 1, &[read])),
        ("fetch_add_twice", seed(6, 1, &[fa])),
        ("send_then_write", seed(0, 2, &[send0, write1])),
    ]
}

/// A receive WQE of up to four SGEs in the open MR, `len` bytes each.
fn recv_wqe(rig: &Rig, sges: usize, len: u32) -> Vec<u8> {
    let mut w = vec![0u8; crate::rig::RQ_STRIDE as usize];
    for (k, seg) in w.chunks_exact_mut(field::DATA_LEN).enumerate() {
        let mut d = DataSeg::new_unchecked(seg);
        if k < sges {
            d.set_byte_count(len);
            d.set_lkey(rig.open_mr.raw());
            d.set_addr(rig.open_buf.get() + k as u64 * u64::from(len));
        } else {
            d.set_lkey(doorbell_types::Mkey::INVALID.raw());
        }
    }
    w
}

fn rq_wqe() -> Vec<SeedFile> {
    let rig = Rig::new();
    let seed = |flags: u8, posted: u8, messages: u8, len: u16, key: u32, wqes: usize, sges| {
        let mut s = Seed::new()
            .u8(flags)
            .u8(posted)
            .u8(messages)
            .u16(len)
            .u32(key);
        for _ in 0..wqes {
            s = s.bytes(&recv_wqe(&rig, sges, 1024));
        }
        s.into_bytes()
    };
    let kind = |k: u8, qp: u8| (k << 1) | qp;
    vec![
        ("send_one", seed(kind(0, 0), 1, 0, 100, 0, 1, 1)),
        ("send_imm_two", seed(kind(1, 1), 2, 1, 64, 0x1234, 2, 1)),
        ("send_three_packets", seed(kind(0, 0), 1, 0, 3000, 0, 1, 4)),
        (
            "write_imm_two_packets",
            seed(kind(4, 0), 1, 0, 2000, 7, 1, 1),
        ),
        (
            "send_inv",
            seed(kind(2, 0), 1, 0, 10, rig.open_mr.raw(), 1, 1),
        ),
        ("no_wqe_posted", seed(kind(0, 1), 0, 0, 8, 0, 1, 1)),
    ]
}

fn cqe_record() -> Vec<SeedFile> {
    let mut cqe = [0u8; CQE_LEN];
    let mut c = Cqe64::new_unchecked(&mut cqe[..]);
    c.set_byte_cnt(64);
    c.set_sop_qpn(u8::from(WqeOpcode::RdmaWrite), 0x100);
    c.set_wqe_counter(3);
    c.set_op_own(CqeOpcode::Req, false, true);
    let mut err = [0u8; CQE_LEN];
    let mut e = Cqe64::new_unchecked(&mut err[..]);
    e.set_sop_qpn(u8::from(WqeOpcode::Send), 0x101);
    e.set_syndrome(Syndrome::RemoteAccessErr, 0x22);
    e.set_op_own(CqeOpcode::ReqErr, true, false);
    let mut eqe = [0u8; EQE_LEN];
    let mut q = Eqe64::new_unchecked(&mut eqe[..]);
    q.set_type(EventType::Comp, 0);
    q.set_comp_cqn(5);
    q.set_owner(true);
    let mut rec = [0u8; DBR_LEN];
    QpDoorbellRecord::new_unchecked(&mut rec[..]).set_recv_counter(4);
    CqDoorbellRecord::new_unchecked(&mut rec[..]).set_arm(0x1000_0004);
    let send = SendDoorbell {
        wqe_index: 7,
        opcode: u8::from(WqeOpcode::Send),
        qpn: 0x100,
        ds: 2,
    };
    let arm = CqArmDoorbell {
        sn: 1,
        solicited_only: true,
        ci: 9,
        cqn: 1,
    };
    let ctrl = {
        let rig = Rig::new();
        send_wqe(&rig, 0, 0, WqeOpcode::RdmaWrite, 64)
    };
    let s = |kind: u8, b: &[u8]| Seed::new().u8(kind).bytes(b).into_bytes();
    vec![
        ("cqe_req", s(0, &cqe)),
        ("cqe_error", s(0, &err)),
        ("eqe_completion", s(1, &eqe)),
        ("records", s(2, &rec)),
        ("send_doorbell", s(3, &send.emit())),
        ("arm_doorbell", s(3, &arm.emit())),
        ("eq_doorbell", s(4, &EqDoorbell { eqn: 3, ci: 17 }.emit())),
        (
            "bfreg_offset",
            Seed::new().u8(5).u32(0xa40).u16(512).into_bytes(),
        ),
        ("owner_bit", Seed::new().u8(6).u32(33).u8(5).into_bytes()),
        ("wqe_segments", s(7, &ctrl)),
    ]
}

fn poll_cq() -> Vec<SeedFile> {
    let seed = |writes: u8, recvs: u8, batch: u8, edit: &dyn Fn(&mut [u8])| {
        let s = Setup::new(writes, recvs);
        let mut ring = s.ring_bytes();
        edit(&mut ring);
        Seed::new()
            .u8(writes)
            .u8(recvs)
            .u8(batch)
            .bytes(&ring)
            .into_bytes()
    };
    vec![
        ("two_writes", seed(2, 0, 4, &|_| {})),
        ("writes_and_recvs", seed(3, 3, 16, &|_| {})),
        (
            "error_cqe",
            seed(1, 0, 1, &|r| {
                let mut c = Cqe64::new_unchecked(&mut r[..CQE_LEN]);
                let owner = c.owner();
                c.set_syndrome(Syndrome::LocalProtErr, 1);
                c.set_op_own(CqeOpcode::ReqErr, false, owner);
            }),
        ),
        (
            "unknown_qpn",
            seed(1, 1, 2, &|r| {
                Cqe64::new_unchecked(&mut r[..CQE_LEN]).set_sop_qpn(0, 0x00ab_cdef);
            }),
        ),
    ]
}

fn uar_mmio() -> Vec<SeedFile> {
    let rig = Rig::new();
    let write = send_wqe(&rig, 0, 0, WqeOpcode::RdmaWrite, 8);
    let arm = CqArmDoorbell {
        sn: 0,
        solicited_only: false,
        ci: 0,
        cqn: rig.cq.get(),
    };
    let wqebb = |s: Seed| s.u8(3).u8(0).u8(0).bytes(&write);
    let mmio = |s: Seed, off: u32, data: &[u8]| s.u8(0).u8(0).u32(off).short_bytes(data);
    let send_counter = |s: Seed, v: u32| s.u8(2).u8(1).u32(v);
    vec![
        (
            "doorbell",
            mmio(send_counter(wqebb(Seed::new()), 1), REG, &write[..8]).into_bytes(),
        ),
        (
            "blueflame",
            mmio(send_counter(Seed::new(), 1), REG, &write).into_bytes(),
        ),
        (
            "record_doorbell",
            send_counter(wqebb(Seed::new()), 1)
                .u8(1)
                .u8(3)
                .u8(0)
                .into_bytes(),
        ),
        (
            "cq_arm",
            mmio(Seed::new(), CQ_DOORBELL as u32, &arm.emit()).into_bytes(),
        ),
        (
            "arm_record_and_advance",
            Seed::new()
                .u8(2)
                .u8(5)
                .u32(arm.arm_word())
                .u8(1)
                .u8(2)
                .u8(0)
                .u8(4)
                .u16(500)
                .into_bytes(),
        ),
        (
            "eq_doorbell_other_uar",
            Seed::new()
                .u8(0)
                .u8(1)
                .u32(EQ_DOORBELL as u32)
                .short_bytes(&EqDoorbell { eqn: 0, ci: 1 }.emit())
                .into_bytes(),
        ),
    ]
}

fn commands(cmds: &[Command]) -> Vec<u8> {
    let mut s = Seed::new();
    for c in cmds {
        let mut b = Vec::new();
        c.encode(&mut b);
        s = s.long_bytes(&b);
    }
    s.into_bytes()
}

fn command() -> Vec<SeedFile> {
    let rig = Rig::new();
    let qpn = rig.qps[0].qpn;
    vec![
        ("query_caps", commands(&[Command::QueryCaps])),
        (
            "pd_and_uar",
            commands(&[
                Command::AllocPd,
                Command::DeallocPd(Pdn::new(2)),
                Command::AllocUar,
                Command::DeallocUar(rig.uar),
            ]),
        ),
        (
            "qp_to_error_and_back",
            commands(&[
                Command::ModifyQp {
                    qpn,
                    state: QpState::Err,
                    attrs: QpAttrs::default(),
                },
                Command::QueryQp(qpn),
                Command::ModifyQp {
                    qpn,
                    state: QpState::Reset,
                    attrs: QpAttrs::default(),
                },
            ]),
        ),
        (
            "destroy_in_use",
            commands(&[
                Command::DestroyCq(rig.cq),
                Command::DestroyMkey(rig.open_mr),
                Command::DestroyQp(rig.qps[1].qpn),
                Command::DestroyCq(rig.cq),
            ]),
        ),
        (
            "resize_cq",
            commands(&[Command::ResizeCq {
                cqn: rig.cq,
                log_size: 6,
                pas: vec![rig.cq_buf],
            }]),
        ),
    ]
}

fn command_result() -> Vec<SeedFile> {
    let enc = |r: Result<CmdOut, CmdError>| {
        let mut b = Vec::new();
        encode_result(&r, &mut b);
        b
    };
    vec![
        ("done", enc(Ok(CmdOut::Done))),
        ("qp", enc(Ok(CmdOut::Qp(Qpn::new(0x100))))),
        (
            "caps",
            enc(Ok(CmdOut::Caps(doorbell_hif::DeviceCaps::default()))),
        ),
        (
            "qp_info",
            enc(Ok(CmdOut::QpInfo {
                state: QpState::Rts,
                attrs: QpAttrs {
                    sq_psn: Some(Psn::new(5)),
                    ..QpAttrs::default()
                },
            })),
        ),
        (
            "no_such_object",
            enc(Err(CmdError::NoSuchObject {
                kind: ObjKind::Qp,
                id: 7,
            })),
        ),
        ("device_gone", enc(Err(CmdError::DeviceGone))),
    ]
}

/// A request step of `peer_frames` with index-chosen opcode, PSN offset 0,
/// AckReq, then the header fields `fields` and the payload.
fn request(s: Seed, qp: u8, index: u8, fields: Seed, len: u16) -> Seed {
    s.u8(0)
        .u8(qp)
        .u8(index)
        .u16(0)
        .u8(2)
        .bytes(&fields.into_bytes())
        .u16(len)
        .u8(0x3c)
}

/// A response step of `peer_frames`.
fn response(s: Seed, qp: u8, index: u8, offset: u16, fields: Seed, len: u16) -> Seed {
    s.u8(1)
        .u8(qp)
        .u8(index)
        .u16(offset)
        .u8(0)
        .bytes(&fields.into_bytes())
        .u16(len)
        .u8(0x77)
}

fn peer_frames() -> Vec<SeedFile> {
    use crate::peer::{REQUESTS, RESPONSES};
    let at = |list: &[BthOpcode], op| list.iter().position(|&o| o == op).expect("listed") as u8;
    let req = |op| at(&REQUESTS, op);
    let resp = |op| at(&RESPONSES, op);
    // RETH: the open MR at offset 0 with its own key, dma_len.
    let reth_open = |len: u32| Seed::new().u8(0).u16(0).u8(0).u32(len);
    let ack = Seed::new()
        .u8(AethSyndrome::Ack { credits: 0x1f }.encode())
        .u32(1);
    let _ = (EPSN, SQ_PSN);
    vec![
        (
            "write_only",
            request(
                Seed::new(),
                0,
                req(BthOpcode::RcRdmaWriteOnly),
                reth_open(64),
                64,
            )
            .into_bytes(),
        ),
        (
            "write_then_ack",
            response(
                Seed::new()
                    .u8(3)
                    .u8(2)
                    .u16(0)
                    .u16(32)
                    .u64(0x1000)
                    .u32(0x4242),
                0,
                resp(BthOpcode::RcAck),
                0,
                ack,
                0,
            )
            .into_bytes(),
        ),
        (
            "read_then_response",
            response(
                Seed::new()
                    .u8(3)
                    .u8(4 | 1)
                    .u16(0)
                    .u16(16)
                    .u64(0x1000)
                    .u32(0x4242),
                1,
                resp(BthOpcode::RcRdmaReadResponseOnly),
                0,
                Seed::new()
                    .u8(AethSyndrome::Ack { credits: 0x1f }.encode())
                    .u32(1),
                16,
            )
            .into_bytes(),
        ),
        (
            "recv_then_send",
            request(
                Seed::new().u8(2).u8(0).u16(0).u16(256),
                0,
                req(BthOpcode::RcSendOnly),
                Seed::new(),
                100,
            )
            .into_bytes(),
        ),
        (
            "fetch_add",
            request(
                Seed::new(),
                1,
                req(BthOpcode::RcFetchAdd),
                Seed::new().u8(0).u16(8).u8(0).u64(1).u64(0),
                0,
            )
            .into_bytes(),
        ),
        (
            "write_to_closed_mr",
            request(
                Seed::new(),
                0,
                req(BthOpcode::RcRdmaWriteOnly),
                Seed::new().u8(1).u16(0).u8(1).u32(8),
                8,
            )
            .into_bytes(),
        ),
        (
            "out_of_sequence_then_timeout",
            Seed::new()
                .u8(0)
                .u8(0)
                .u8(req(BthOpcode::RcSendOnly))
                .u16(5)
                .u8(2)
                .u16(4)
                .u8(1)
                .u8(4)
                .u16(60_000)
                .into_bytes(),
        ),
    ]
}

fn ibverbs_calls() -> Vec<SeedFile> {
    // A step that posts one SEND (opcode index 2) of `len` bytes at offset
    // 0 of the MR, signalled, on QP `qp`.
    let send = |s: Seed, qp: u8, opcode: u8, flags: u8, len: u16| {
        s.u8(0)
            .u8(qp)
            .u8(0)
            .u8(opcode)
            .u8(flags)
            .u8(1)
            .u8(0)
            .u16(0)
            .u16(len)
            .u8(0)
            .u16(0x800)
            .u32(0x0102_0304)
    };
    let recv = |s: Seed, qp: u8| s.u8(1).u8(qp).u8(0).u8(1).u8(0).u16(0x1000).u16(256);
    let poll = |s: Seed| s.u8(13).u8(2).u8(16);
    vec![
        (
            "send_recv_poll",
            poll(send(recv(Seed::new().u8(16), 1), 0, 2, 2, 64)).into_bytes(),
        ),
        (
            "write_poll",
            poll(send(Seed::new().u8(16), 0, 0, 2, 128)).into_bytes(),
        ),
        (
            "inline_send",
            poll(send(recv(Seed::new().u8(8), 0), 1, 2, 2 | 8, 16)).into_bytes(),
        ),
        (
            "qp_to_error",
            poll(Seed::new().u8(8).u8(4).u8(0).u32(1).u8(6).bytes(&[0; 40])).into_bytes(),
        ),
        (
            "reg_dereg",
            Seed::new()
                .u8(4)
                .u8(6)
                .u16(0x100)
                .u16(0x400)
                .u32(1)
                .u8(7)
                .u8(0)
                .into_bytes(),
        ),
        (
            "queries_and_ah",
            Seed::new()
                .u8(4)
                .u8(9)
                .u8(1)
                .u16(0)
                .u8(10)
                .u8(1)
                .u8(1)
                .bytes(&[0; 6])
                .u32(0)
                .u8(0)
                .into_bytes(),
        ),
    ]
}
