//! Every error path of the device, end to end: the status of the error
//! completion (the mlx5 syndrome as `ibv_wc_status`), the QP states the
//! device reports, the flushes that follow in posting order, what the peer
//! and other QPs keep, doorbells the device must refuse, and the typed
//! errors of the provider and of the slow path.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use doorbell_device::NicCounters;
use doorbell_driver::{AllocUcontextReq, CreateQpReq, DeviceLink, DriverError, Ucontext};
use doorbell_hif::{CmdError, CmdOut, Command, NicEvent, ObjKind};
use doorbell_host::{HostMemory, Mmio, RecordDoorbell};
use doorbell_layout::uar::{self, SendDoorbell};
use doorbell_layout::wqe::WqeOpcode;
use doorbell_rt::{Fabric, LiveNic};
use doorbell_types::{Mkey, Psn, Qpn, UarIndex};
use doorbell_verbs::{
    Access, AddressVector, Context, Cq, Mr, ProviderConfig, Qp, QpAttrs, QpCaps, QpInitAttr,
    QpState, QpType, RcEndpoint, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, VerbsError, Wc,
    WcOpcode, WcStatus, WrOpcode,
};

use crate::common::*;

const MR_LEN: usize = 1 << 16;
/// What fills memory that nothing may touch.
const SENTINEL: u8 = 0x5a;

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Two RC QPs connected as `pair()` does, with small MRs.
fn small_pair() -> Pair {
    pair_with(ProviderConfig::default(), caps(), MR_LEN, 64, 1024)
}

/// The QP's state as the device reports it.
fn state(qp: &Qp) -> QpState {
    qp.query().unwrap().0
}

/// Waits until the NIC's thread has handled everything queued to it so far
/// and returns its counters; fails if the thread is gone (it panicked).
fn sync(s: &Side) -> NicCounters {
    assert!(
        matches!(s.nic.exec(Command::QueryCaps), Ok(CmdOut::Caps(_))),
        "the device thread of {} is gone",
        s.ctx.device_name()
    );
    s.nic.counters(None).1
}

/// Lets both NICs handle whatever is in flight between them.
fn settle(p: &Pair) -> (NicCounters, NicCounters) {
    sync(&p.a);
    sync(&p.b);
    (sync(&p.a), sync(&p.b))
}

fn blank() -> Wc {
    Wc::default()
}

/// Asserts that `cq` holds no completion.
fn assert_empty(cq: &Cq, what: &str) {
    let mut buf = [blank(); 8];
    let n = cq.poll(&mut buf).unwrap();
    assert_eq!(n, 0, "{what}: unexpected completions {:?}", &buf[..n]);
}

/// `(wr_id, status, opcode)` of each completion.
fn outcome(wcs: &[Wc]) -> Vec<(u64, WcStatus, WcOpcode)> {
    wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

fn fill(mr: &Mr, byte: u8) {
    mr.write(0, &vec![byte; mr.len()]).unwrap();
}

fn assert_filled(mr: &Mr, byte: u8, what: &str) {
    let v = mr.to_vec().unwrap();
    let bad = v.iter().position(|&b| b != byte);
    assert_eq!(bad, None, "{what}: memory changed at {bad:?}");
}

/// Moves `qp` through INIT, RTR and RTS to `remote` with the given RNR and
/// retry settings.
fn connect(qp: &Qp, local: &RcEndpoint, remote: &RcEndpoint, rnr: (u8, u8), retry: (u8, u8)) {
    let (min_rnr_timer, rnr_retry) = rnr;
    let (timeout, retry_cnt) = retry;
    let t = crate::net::Timers {
        mtu: 1024,
        timeout,
        retry_cnt,
        min_rnr_timer,
        rnr_retry,
        rd_atomic: 1,
    };
    crate::net::connect_qp(qp, local, remote, t);
}

/// A pair built by hand: B answers an RNR with `min_rnr_timer`, A retries
/// `rnr_retry` times; A's ACK timeout and transport retries are `retry`.
fn rc_pair_with(min_rnr_timer: u8, rnr_retry: u8, retry: (u8, u8)) -> Pair {
    let fabric = Fabric::new();
    let cfg = ProviderConfig::default();
    let a = side(
        &fabric,
        "nic-a",
        [127, 0, 0, 2],
        cfg.clone(),
        caps(),
        MR_LEN,
        64,
    );
    let b = side(&fabric, "nic-b", [127, 0, 0, 3], cfg, caps(), MR_LEN, 64);
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x00ff_fffe),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(0x10),
    };
    connect(&a.qp, &ea, &eb, (12, rnr_retry), retry);
    connect(&b.qp, &eb, &ea, (min_rnr_timer, 7), (14, 7));
    Pair {
        a,
        b,
        _fabric: fabric,
    }
}

fn rc_pair(min_rnr_timer: u8, rnr_retry: u8) -> Pair {
    rc_pair_with(min_rnr_timer, rnr_retry, (14, 7))
}

// ---------------------------------------------------------------------------
// 1. Local protection.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    Write,
    Read,
    FetchAdd,
    CmpSwap,
}

impl Op {
    fn wr(self, remote: RemoteAddr) -> WrOpcode {
        match self {
            Op::Send => WrOpcode::Send,
            Op::Write => WrOpcode::RdmaWrite(remote),
            Op::Read => WrOpcode::RdmaRead(remote),
            Op::FetchAdd => WrOpcode::AtomicFetchAdd { remote, add: 1 },
            Op::CmpSwap => WrOpcode::AtomicCmpSwp {
                remote,
                compare: 0,
                swap: 1,
            },
        }
    }

    fn wc(self) -> WcOpcode {
        match self {
            Op::Send => WcOpcode::Send,
            Op::Write => WcOpcode::RdmaWrite,
            Op::Read => WcOpcode::RdmaRead,
            Op::FetchAdd => WcOpcode::FetchAdd,
            Op::CmpSwap => WcOpcode::CompSwap,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum BadLocal {
    /// A key the device never issued.
    MadeUpKey,
    /// The lkey of an MR of another PD of the same context.
    OtherPd,
    /// An SGE that runs 4 bytes past the end of its MR.
    PastTheEnd,
    /// The lkey of an MR dropped since; its mkey index is registered again
    /// with a new variant byte.
    Stale,
}

/// An 8-byte SGE that is bad in the way `how` says, and MRs to keep alive
/// until the end of the case.
fn bad_sge(p: &Pair, how: BadLocal) -> (Sge, Vec<Mr>) {
    let mr = &p.a.mr;
    match how {
        BadLocal::MadeUpKey => (
            Sge {
                addr: mr.addr(),
                length: 8,
                lkey: Mkey::from_raw(0x1234_5678),
            },
            vec![],
        ),
        BadLocal::OtherPd => {
            let pd2 = p.a.ctx.alloc_pd().unwrap();
            let other = pd2.reg_mr(4096, Access(FULL)).unwrap();
            (other.sge(0, 8).unwrap(), vec![other])
        }
        BadLocal::PastTheEnd => (
            // Mr::sge refuses this range, so build it by hand.
            Sge {
                addr: mr.addr() + MR_LEN as u64 - 4,
                length: 8,
                lkey: mr.lkey(),
            },
            vec![],
        ),
        BadLocal::Stale => {
            let gone = p.a.pd.reg_mr(4096, Access(FULL)).unwrap();
            let sge = gone.sge(0, 8).unwrap();
            drop(gone);
            let again = p.a.pd.reg_mr(4096, Access(FULL)).unwrap();
            assert_eq!(again.lkey().index(), sge.lkey.index(), "index reused");
            assert_ne!(again.lkey(), sge.lkey, "with a new variant byte");
            fill(&again, SENTINEL);
            (sge, vec![again])
        }
    }
}

#[test]
fn bad_local_keys_and_ranges_are_local_protection_errors() {
    let ops = [Op::Send, Op::Write, Op::Read, Op::FetchAdd];
    let hows = [
        BadLocal::MadeUpKey,
        BadLocal::OtherPd,
        BadLocal::PastTheEnd,
        BadLocal::Stale,
    ];
    for how in hows {
        for op in ops {
            let what = format!("{how:?} {op:?}");
            let p = small_pair();
            fill(&p.b.mr, SENTINEL);
            post_recv(&p.b.qp, 50, &[p.b.mr.sge(0, 256).unwrap()]);
            let (a0, b0) = settle(&p);
            let (sge, keep) = bad_sge(&p, how);
            let remote = RemoteAddr {
                addr: p.b.mr.addr() + 64,
                rkey: p.b.mr.rkey(),
            };
            post(&p.a.qp, signaled(1, &[sge], op.wr(remote)));
            let wc = wait(&p.a.cq, 1)[0];
            assert_eq!(
                (wc.wr_id, wc.status, wc.opcode, wc.qp_num),
                (1, WcStatus::LocProtErr, op.wc(), p.a.qp.qpn()),
                "{what}"
            );
            assert_eq!(state(&p.a.qp), QpState::Err, "{what}");
            // The provider still thinks RTS, so it posts; the device flushes.
            let good = p.a.mr.sge(0, 8).unwrap();
            post(&p.a.qp, signaled(2, &[good], op.wr(remote)));
            assert_eq!(
                outcome(&wait(&p.a.cq, 1)),
                [(2, WcStatus::WrFlushErr, op.wc())],
                "{what}"
            );
            // Nothing left A: B's QP, receive and memory are as they were.
            let (a1, b1) = settle(&p);
            assert_eq!(a1.tx_packets, a0.tx_packets, "{what}: nothing sent");
            assert_eq!(b1.rx_packets, b0.rx_packets, "{what}");
            assert_eq!(state(&p.b.qp), QpState::Rts, "{what}");
            assert_empty(&p.b.cq, &what);
            assert_filled(&p.b.mr, SENTINEL, &what);
            for mr in &keep {
                if matches!(how, BadLocal::Stale) {
                    assert_filled(mr, SENTINEL, &format!("{what}: the MR now at that index"));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 2. Remote access and remote invalid request.

#[derive(Debug, Clone, Copy)]
enum BadRemote {
    /// A key B never issued.
    MadeUpKey,
    /// An MR of B without the right the operation needs (all others granted).
    NoRight(u32),
    /// An MR of another PD on B's context.
    OtherPd,
    /// A range that ends past the MR.
    PastTheEnd,
    /// An atomic at an address that is not 8-byte aligned.
    Misaligned,
}

#[test]
fn remote_access_errors_move_both_qps_to_error() {
    use BadRemote::*;
    let cases = [
        (Op::Write, MadeUpKey, WcStatus::RemAccessErr),
        (Op::Read, MadeUpKey, WcStatus::RemAccessErr),
        (Op::FetchAdd, MadeUpKey, WcStatus::RemAccessErr),
        (
            Op::Write,
            NoRight(Access::REMOTE_WRITE),
            WcStatus::RemAccessErr,
        ),
        (
            Op::Read,
            NoRight(Access::REMOTE_READ),
            WcStatus::RemAccessErr,
        ),
        (
            Op::FetchAdd,
            NoRight(Access::REMOTE_ATOMIC),
            WcStatus::RemAccessErr,
        ),
        (
            Op::CmpSwap,
            NoRight(Access::REMOTE_ATOMIC),
            WcStatus::RemAccessErr,
        ),
        (Op::Write, OtherPd, WcStatus::RemAccessErr),
        (Op::Write, PastTheEnd, WcStatus::RemAccessErr),
        (Op::Read, PastTheEnd, WcStatus::RemAccessErr),
        (Op::FetchAdd, PastTheEnd, WcStatus::RemAccessErr),
        (Op::FetchAdd, Misaligned, WcStatus::RemInvReqErr),
        (Op::CmpSwap, Misaligned, WcStatus::RemInvReqErr),
    ];
    for (op, how, want) in cases {
        let what = format!("{op:?} {how:?}");
        let p = small_pair();
        let victim = match how {
            NoRight(bit) => p.b.pd.reg_mr(4096, Access(FULL & !bit)).unwrap(),
            OtherPd => {
                let pd2 = p.b.ctx.alloc_pd().unwrap();
                pd2.reg_mr(4096, Access(FULL)).unwrap()
            }
            _ => p.b.pd.reg_mr(4096, Access(FULL)).unwrap(),
        };
        fill(&victim, SENTINEL);
        fill(&p.b.mr, SENTINEL);
        let len = 64u32;
        // Past the end: an atomic starts right at the end; a WRITE or READ
        // of 64 bytes starts 8 bytes before it.
        let (addr, rkey) = match (how, op) {
            (MadeUpKey, _) => (victim.addr(), Mkey::from_raw(0x1234_5678)),
            (PastTheEnd, Op::FetchAdd | Op::CmpSwap) => (victim.addr() + 4096, victim.rkey()),
            (PastTheEnd, _) => (victim.addr() + 4096 - 8, victim.rkey()),
            (Misaligned, _) => (victim.addr() + 4, victim.rkey()),
            _ => (victim.addr(), victim.rkey()),
        };
        let remote = RemoteAddr { addr, rkey };
        post_recv(&p.b.qp, 60, &[p.b.mr.sge(0, 128).unwrap()]);
        post_recv(&p.b.qp, 61, &[p.b.mr.sge(128, 128).unwrap()]);
        post_recv(&p.a.qp, 70, &[p.a.mr.sge(4096, 128).unwrap()]);
        let atomic = matches!(op, Op::FetchAdd | Op::CmpSwap);
        let local_len = if atomic { 8 } else { len };
        p.a.mr.write(0, &pattern(local_len as usize, 9)).unwrap();
        let sge = p.a.mr.sge(0, local_len).unwrap();
        post(&p.a.qp, signaled(1, &[sge], op.wr(remote)));
        // The requester: the error, then its posted receive flushed.
        assert_eq!(
            outcome(&wait(&p.a.cq, 2)),
            [
                (1, want, op.wc()),
                (70, WcStatus::WrFlushErr, WcOpcode::Recv)
            ],
            "{what}"
        );
        // The responder NAKed and went to ERR, flushing its receives.
        assert_eq!(
            outcome(&wait(&p.b.cq, 2)),
            [
                (60, WcStatus::WrFlushErr, WcOpcode::Recv),
                (61, WcStatus::WrFlushErr, WcOpcode::Recv)
            ],
            "{what}"
        );
        assert_eq!(state(&p.a.qp), QpState::Err, "{what}");
        assert_eq!(state(&p.b.qp), QpState::Err, "{what}");
        assert_filled(&victim, SENTINEL, &what);
        assert_filled(&p.b.mr, SENTINEL, &what);
        let mut local = vec![0u8; local_len as usize];
        p.a.mr.read(0, &mut local).unwrap();
        assert_eq!(
            local,
            pattern(local_len as usize, 9),
            "{what}: no result placed"
        );
        // Both sides flush whatever is posted next.
        post(&p.a.qp, signaled(2, &[sge], WrOpcode::Send));
        post(
            &p.b.qp,
            signaled(3, &[p.b.mr.sge(0, 8).unwrap()], WrOpcode::Send),
        );
        assert_eq!(
            outcome(&wait(&p.a.cq, 1)),
            [(2, WcStatus::WrFlushErr, WcOpcode::Send)],
            "{what}"
        );
        assert_eq!(
            outcome(&wait(&p.b.cq, 1)),
            [(3, WcStatus::WrFlushErr, WcOpcode::Send)],
            "{what}"
        );
        settle(&p);
        assert_empty(&p.a.cq, &what);
        assert_empty(&p.b.cq, &what);
    }
}

#[test]
fn an_error_on_one_qp_leaves_the_other_qps_of_both_nics_alone() {
    let p = small_pair();
    // A second connected pair on the same NICs, contexts and PDs, with its
    // own CQs and MRs.
    let mk = |s: &Side| {
        let cq = s.ctx.create_cq(64).unwrap();
        let qp =
            s.pd.create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                cap: caps(),
                sq_sig_all: false,
                srq: None,
            })
            .unwrap();
        let mr = s.pd.reg_mr(MR_LEN, Access(FULL)).unwrap();
        (cq, qp, mr)
    };
    let (cq_a2, qp_a2, mr_a2) = mk(&p.a);
    let (cq_b2, qp_b2, mr_b2) = mk(&p.b);
    let e = |s: &Side, qp: &Qp, psn| RcEndpoint {
        gid: s.ctx.gid(),
        qpn: qp.qpn(),
        psn: Psn::new(psn),
    };
    let (ea2, eb2) = (e(&p.a, &qp_a2, 77), e(&p.b, &qp_b2, 99));
    qp_a2.connect_rc(&ea2, &eb2, 1024).unwrap();
    qp_b2.connect_rc(&eb2, &ea2, 1024).unwrap();
    fill(&p.b.mr, SENTINEL);
    let data = pattern(3000, 4);
    mr_a2.write(0, &data).unwrap();
    let remote2 = RemoteAddr {
        addr: mr_b2.addr(),
        rkey: mr_b2.rkey(),
    };
    // A postlist of WRITEs on the healthy pair around a bad WRITE on the
    // other; then a SEND with a receive.
    let sge2 = mr_a2.sge(0, 3000).unwrap();
    qp_a2
        .post_send(&[
            signaled(1, &[sge2], WrOpcode::RdmaWrite(remote2)),
            signaled(2, &[sge2], WrOpcode::RdmaWrite(remote2)),
        ])
        .unwrap();
    let bad = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: Mkey::from_raw(0x1234_5678),
    };
    post(
        &p.a.qp,
        signaled(9, &[p.a.mr.sge(0, 8).unwrap()], WrOpcode::RdmaWrite(bad)),
    );
    post_recv(&qp_b2, 30, &[mr_b2.sge(8192, 4096).unwrap()]);
    post(
        &qp_a2,
        signaled(3, &[mr_a2.sge(0, 1500).unwrap()], WrOpcode::Send),
    );
    assert_eq!(
        outcome(&wait(&p.a.cq, 1)),
        [(9, WcStatus::RemAccessErr, WcOpcode::RdmaWrite)]
    );
    let w = wait(&cq_a2, 3);
    assert!(w.iter().all(Wc::is_ok), "{w:?}");
    assert_eq!(w.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2, 3]);
    let r = wait(&cq_b2, 1)[0];
    assert_eq!(
        (r.wr_id, r.status, r.byte_len),
        (30, WcStatus::Success, 1500)
    );
    let mut got = vec![0u8; 3000];
    mr_b2.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let mut got = vec![0u8; 1500];
    mr_b2.read(8192, &mut got).unwrap();
    assert_eq!(got, data[..1500]);
    assert_eq!(
        (state(&p.a.qp), state(&p.b.qp)),
        (QpState::Err, QpState::Err)
    );
    assert_eq!((state(&qp_a2), state(&qp_b2)), (QpState::Rts, QpState::Rts));
    assert_filled(&p.b.mr, SENTINEL, "the errored pair's target");
    settle(&p);
    assert_empty(&cq_a2, "healthy pair");
    assert_empty(&cq_b2, "healthy pair");
}

// ---------------------------------------------------------------------------
// 3. Remote invalid request / local length; remote operational error.

#[test]
fn a_send_longer_than_the_receive_buffer_fails_both_sides() {
    // (message length, receive SGE lengths): one packet, and three packets
    // of which the last overflows two SGEs.
    let cases: [(u32, &[u32]); 2] = [(64, &[16]), (3000, &[1024, 1024])];
    for (len, rsges) in cases {
        let what = format!("{len} bytes into {rsges:?}");
        let p = small_pair();
        fill(&p.b.mr, SENTINEL);
        let mut at = 0;
        let sges: Vec<Sge> = rsges
            .iter()
            .map(|&l| {
                let s = p.b.mr.sge(at, l).unwrap();
                at += u64::from(l);
                s
            })
            .collect();
        post_recv(&p.b.qp, 80, &sges);
        post_recv(&p.b.qp, 81, &[p.b.mr.sge(8192, 4096).unwrap()]);
        p.a.mr.write(0, &pattern(len as usize, 1)).unwrap();
        post(
            &p.a.qp,
            signaled(1, &[p.a.mr.sge(0, len).unwrap()], WrOpcode::Send),
        );
        assert_eq!(
            outcome(&wait(&p.a.cq, 1)),
            [(1, WcStatus::RemInvReqErr, WcOpcode::Send)],
            "{what}"
        );
        assert_eq!(
            outcome(&wait(&p.b.cq, 2)),
            [
                (80, WcStatus::LocLenErr, WcOpcode::Recv),
                (81, WcStatus::WrFlushErr, WcOpcode::Recv)
            ],
            "{what}"
        );
        assert_eq!(
            (state(&p.a.qp), state(&p.b.qp)),
            (QpState::Err, QpState::Err),
            "{what}"
        );
        // Nothing landed past the receive buffer, nor in the flushed one.
        let v = p.b.mr.to_vec().unwrap();
        assert!(v[at as usize..].iter().all(|&b| b == SENTINEL), "{what}");
        post(
            &p.a.qp,
            signaled(2, &[p.a.mr.sge(0, 8).unwrap()], WrOpcode::Send),
        );
        assert_eq!(
            outcome(&wait(&p.a.cq, 1)),
            [(2, WcStatus::WrFlushErr, WcOpcode::Send)],
            "{what}"
        );
        settle(&p);
    }
}

#[test]
fn a_receive_with_a_bad_lkey_is_a_remote_operational_error() {
    let p = small_pair();
    post_recv(
        &p.b.qp,
        90,
        &[Sge {
            addr: p.b.mr.addr(),
            length: 256,
            lkey: Mkey::from_raw(0x1234_5678),
        }],
    );
    post_recv(&p.b.qp, 91, &[p.b.mr.sge(0, 256).unwrap()]);
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, 32).unwrap()], WrOpcode::Send),
    );
    assert_eq!(
        outcome(&wait(&p.a.cq, 1)),
        [(1, WcStatus::RemOpErr, WcOpcode::Send)]
    );
    assert_eq!(
        outcome(&wait(&p.b.cq, 2)),
        [
            (90, WcStatus::LocProtErr, WcOpcode::Recv),
            (91, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
    assert_eq!(
        (state(&p.a.qp), state(&p.b.qp)),
        (QpState::Err, QpState::Err)
    );
    settle(&p);
}

// ---------------------------------------------------------------------------
// 4. RNR and transport retries.

#[test]
fn rnr_retry_zero_fails_at_the_first_rnr_nak() {
    // Timer code 1: 10 µs.
    let p = rc_pair(1, 0);
    let (a0, b0) = settle(&p);
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, 100).unwrap()], WrOpcode::Send),
    );
    assert_eq!(
        outcome(&wait(&p.a.cq, 1)),
        [(1, WcStatus::RnrRetryExcErr, WcOpcode::Send)]
    );
    let (a1, b1) = settle(&p);
    assert_eq!(b1.rnr_nak_sent - b0.rnr_nak_sent, 1);
    assert_eq!(a1.rnr_nak_retry_err - a0.rnr_nak_retry_err, 0);
    assert_eq!(a1.req_rnr_retries_exceeded - a0.req_rnr_retries_exceeded, 1);
    // An RNR NAK is not fatal to the responder.
    assert_eq!(
        (state(&p.a.qp), state(&p.b.qp)),
        (QpState::Err, QpState::Rts)
    );
    // B's receive posted now is not consumed by anything.
    post_recv(&p.b.qp, 5, &[p.b.mr.sge(0, 256).unwrap()]);
    settle(&p);
    assert_empty(&p.b.cq, "responder");
}

#[test]
fn rnr_retry_seven_waits_until_a_receive_is_posted() {
    // Timer code 8: 160 µs between retries, forever. On the device thread's
    // wall clock: wait for refusals, not for a time (virtual_time.rs has
    // the exact count and the time of the retry that lands).
    let p = rc_pair(8, 7);
    let (a0, b0) = settle(&p);
    let data = pattern(700, 3);
    p.a.mr.write(0, &data).unwrap();
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, 700).unwrap()], WrOpcode::Send),
    );
    crate::net::wait_counters(&p.b, "three RNR NAKs", |c| {
        c.rnr_nak_sent >= b0.rnr_nak_sent + 3
    });
    assert_empty(&p.a.cq, "still waiting");
    post_recv(&p.b.qp, 2, &[p.b.mr.sge(0, 1024).unwrap()]);
    assert_eq!(
        outcome(&wait(&p.a.cq, 1)),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
    let r = wait(&p.b.cq, 1)[0];
    assert_eq!((r.wr_id, r.status, r.byte_len), (2, WcStatus::Success, 700));
    let mut got = vec![0u8; 700];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let (a1, b1) = settle(&p);
    let sent = b1.rnr_nak_sent - b0.rnr_nak_sent;
    assert!(sent >= 3, "B sent RNR NAKs while no receive was posted");
    assert_eq!(
        a1.rnr_nak_retry_err - a0.rnr_nak_retry_err,
        sent,
        "each RNR NAK retried once"
    );
    assert_eq!(a1.req_rnr_retries_exceeded, a0.req_rnr_retries_exceeded);
    assert_eq!(
        (state(&p.a.qp), state(&p.b.qp)),
        (QpState::Rts, QpState::Rts)
    );
}

// `the_rnr_timer_paces_retries_with_several_messages_in_flight` asserts
// times, so it runs on the virtual clock only: virtual_time.rs.

#[test]
fn transport_retries_run_out_when_the_peer_stops_answering() {
    // ACK timeout 4.096 µs × 2^8 ≈ 1 ms, two retries.
    let p = rc_pair_with(12, 7, (8, 2));
    // B's QP goes back to RESET: it drops A's packets.
    p.b.qp.modify(QpState::Reset, &QpAttrs::default()).unwrap();
    let (a0, b0) = settle(&p);
    // In one post, so that both are sent before the first timeout, and
    // each retry resends both, however slowly this thread runs.
    let sge = [p.a.mr.sge(0, 64).unwrap()];
    p.a.qp
        .post_send(&[
            signaled(1, &sge, WrOpcode::Send),
            signaled(2, &sge, WrOpcode::Send),
        ])
        .unwrap();
    assert_eq!(
        outcome(&wait(&p.a.cq, 2)),
        [
            (1, WcStatus::RetryExcErr, WcOpcode::Send),
            (2, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    let (a1, b1) = settle(&p);
    // Three timeouts: two retried (`local_ack_timeout_err`, as mlx5 counts
    // them, with retries left), the third exhausts the retries.
    assert_eq!(a1.local_ack_timeout_err - a0.local_ack_timeout_err, 2);
    assert_eq!(
        a1.req_transport_retries_exceeded - a0.req_transport_retries_exceeded,
        1
    );
    // Two messages, each sent once and retried twice.
    assert_eq!(a1.tx_packets - a0.tx_packets, 6);
    assert_eq!(b1.rx_dropped - b0.rx_dropped, 6);
    assert_eq!(state(&p.a.qp), QpState::Err);
    assert_eq!(state(&p.b.qp), QpState::Reset);
}

// ---------------------------------------------------------------------------
// 5. Flushes.

#[test]
fn wrs_around_an_error_complete_in_order_and_later_ones_flush() {
    let p = small_pair();
    fill(&p.b.mr, SENTINEL);
    for id in 100..104 {
        post_recv(&p.b.qp, id, &[p.b.mr.sge(8192, 256).unwrap()]);
    }
    for id in 200..202 {
        post_recv(&p.a.qp, id, &[p.a.mr.sge(8192, 256).unwrap()]);
    }
    let remote = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    p.a.mr.write(0, &pattern(64, 8)).unwrap();
    let good = p.a.mr.sge(0, 64).unwrap();
    let bad = Sge {
        lkey: Mkey::from_raw(0x1234_5678),
        ..good
    };
    let read_into = p.a.mr.sge(4096, 64).unwrap();
    // W0 is sent (and outstanding) when W1 fails; W2..W4 never run. W3 is
    // unsignalled: flushed WRs complete all the same.
    p.a.qp
        .post_send(&[
            signaled(0, &[good], WrOpcode::RdmaWrite(remote)),
            signaled(1, &[bad], WrOpcode::Send),
            signaled(2, &[good], WrOpcode::Send),
            SendWr {
                flags: SendFlags::default(),
                ..signaled(3, &[good], WrOpcode::RdmaWrite(remote))
            },
            signaled(4, &[read_into], WrOpcode::RdmaRead(remote)),
        ])
        .unwrap();
    let wcs = wait(&p.a.cq, 7);
    let sends: Vec<_> = wcs.iter().filter(|w| w.opcode != WcOpcode::Recv).collect();
    let recvs: Vec<_> = wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(
        sends
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        [
            (0, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (1, WcStatus::LocProtErr, WcOpcode::Send),
            (2, WcStatus::WrFlushErr, WcOpcode::Send),
            (3, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (4, WcStatus::WrFlushErr, WcOpcode::RdmaRead),
        ]
    );
    assert_eq!(
        recvs
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [(200, WcStatus::WrFlushErr), (201, WcStatus::WrFlushErr)]
    );
    assert_eq!(state(&p.a.qp), QpState::Err);
    // Posted afterwards, a postlist and a single WR: flushed in order.
    p.a.qp
        .post_send(&[
            signaled(5, &[good], WrOpcode::Send),
            signaled(6, &[good], WrOpcode::RdmaWrite(remote)),
        ])
        .unwrap();
    post(&p.a.qp, signaled(7, &[good], WrOpcode::Send));
    assert_eq!(
        outcome(&wait(&p.a.cq, 3)),
        [
            (5, WcStatus::WrFlushErr, WcOpcode::Send),
            (6, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (7, WcStatus::WrFlushErr, WcOpcode::Send)
        ]
    );
    // W0 did reach B before A failed: B stays RTS with its receives posted
    // and only W0's bytes written.
    settle(&p);
    assert_eq!(state(&p.b.qp), QpState::Rts);
    assert_empty(&p.b.cq, "responder");
    let v = p.b.mr.to_vec().unwrap();
    assert_eq!(v[..64], pattern(64, 8));
    assert!(v[64..].iter().all(|&b| b == SENTINEL));
    assert_empty(&p.a.cq, "requester");
}

#[test]
fn modify_to_error_flushes_posted_sends_and_receives() {
    let p = small_pair();
    fill(&p.b.mr, SENTINEL);
    for id in 300..303 {
        post_recv(&p.a.qp, id, &[p.a.mr.sge(8192, 256).unwrap()]);
    }
    // B has no receive: the SEND waits on RNR (retried forever), and the
    // WRITE and SEND behind it stay outstanding.
    let remote = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    let sge = p.a.mr.sge(0, 64).unwrap();
    p.a.qp
        .post_send(&[
            signaled(1, &[sge], WrOpcode::Send),
            signaled(2, &[sge], WrOpcode::RdmaWrite(remote)),
            signaled(3, &[sge], WrOpcode::Send),
        ])
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert_empty(&p.a.cq, "before modify");
    p.a.qp.modify(QpState::Err, &QpAttrs::default()).unwrap();
    assert_eq!(
        outcome(&wait(&p.a.cq, 6)),
        [
            (1, WcStatus::WrFlushErr, WcOpcode::Send),
            (2, WcStatus::WrFlushErr, WcOpcode::RdmaWrite),
            (3, WcStatus::WrFlushErr, WcOpcode::Send),
            (300, WcStatus::WrFlushErr, WcOpcode::Recv),
            (301, WcStatus::WrFlushErr, WcOpcode::Recv),
            (302, WcStatus::WrFlushErr, WcOpcode::Recv),
        ]
    );
    assert_eq!(state(&p.a.qp), QpState::Err);
    // The provider knows of this ERR: it takes sends only in RTS (§9.1).
    assert_eq!(
        p.a.qp.post_send(&[signaled(4, &[sge], WrOpcode::Send)]),
        Err(VerbsError::BadQpState {
            qpn: p.a.qp.qpn().get(),
            state: QpState::Err
        })
    );
    // B never took the WRITE (it was behind the refused SEND) and stays RTS.
    settle(&p);
    assert_eq!(state(&p.b.qp), QpState::Rts);
    assert_filled(&p.b.mr, SENTINEL, "responder");
    assert_empty(&p.b.cq, "responder");
    // The device reported the error only as completions: a QP moved to ERR
    // by the user raises no QpFatal.
    while let Some(e) = p.a.nic.next_event(doorbell_types::Duration::ZERO) {
        assert_ne!(e, NicEvent::QpFatal(p.a.qp.qpn()));
    }
    // Back to RESET and up again, the QP works.
    p.a.qp.modify(QpState::Reset, &QpAttrs::default()).unwrap();
    assert_eq!(state(&p.a.qp), QpState::Reset);
}

// ---------------------------------------------------------------------------
// 6. Doorbells the device must refuse.

/// A device link whose MMIO writes can be redirected to another UAR page.
struct Detour {
    nic: Arc<LiveNic>,
    mmio: Arc<dyn Mmio>,
    to: Arc<Mutex<Option<UarIndex>>>,
}

struct DetourMmio {
    inner: Arc<dyn Mmio>,
    to: Arc<Mutex<Option<UarIndex>>>,
}

impl Mmio for DetourMmio {
    fn mmio_write(&self, uar: UarIndex, offset: u32, data: &[u8]) {
        let to = *self.to.lock().unwrap();
        self.inner.mmio_write(to.unwrap_or(uar), offset, data);
    }

    fn record_doorbell(&self, uar: UarIndex, db: RecordDoorbell) {
        let to = *self.to.lock().unwrap();
        self.inner.record_doorbell(to.unwrap_or(uar), db);
    }
}

impl Detour {
    fn new(nic: Arc<LiveNic>) -> Self {
        let to = Arc::new(Mutex::new(None));
        let mmio: Arc<dyn Mmio> = Arc::new(DetourMmio {
            inner: Arc::clone(DeviceLink::mmio(&*nic)),
            to: Arc::clone(&to),
        });
        Self { nic, mmio, to }
    }
}

impl DeviceLink for Detour {
    fn name(&self) -> &str {
        DeviceLink::name(&*self.nic)
    }
    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError> {
        self.nic.exec(cmd)
    }
    fn memory(&self) -> &Arc<dyn HostMemory> {
        self.nic.memory()
    }
    fn mmio(&self) -> &Arc<dyn Mmio> {
        &self.mmio
    }
    fn gid(&self) -> [u8; 16] {
        self.nic.gid()
    }
    fn next_event(&self, timeout: doorbell_types::Duration) -> Option<NicEvent> {
        self.nic.next_event(timeout)
    }
}

#[test]
fn doorbells_through_a_uar_the_qp_does_not_own_are_dropped() {
    let fabric = Fabric::new();
    let nic =
        Arc::new(LiveNic::start("nic-a", &fabric, [127, 0, 0, 2], Default::default()).unwrap());
    let detour = Arc::new(Detour::new(nic.clone()));
    let ctx = Context::with_config(detour.clone(), ProviderConfig::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: caps(),
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    let mr = pd.reg_mr(MR_LEN, Access(FULL)).unwrap();
    let b = side(
        &fabric,
        "nic-b",
        [127, 0, 0, 3],
        ProviderConfig::default(),
        caps(),
        MR_LEN,
        64,
    );
    let ea = RcEndpoint {
        gid: ctx.gid(),
        qpn: qp.qpn(),
        psn: Psn::new(1),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(2),
    };
    qp.connect_rc(&ea, &eb, 1024).unwrap();
    b.qp.connect_rc(&eb, &ea, 1024).unwrap();
    fill(&b.mr, SENTINEL);
    // Another context on the same NIC: another process's UAR.
    let other_ctx = Context::with_config(nic.clone(), ProviderConfig::default()).unwrap();

    let placement = ctx.placement(&qp);
    assert!(placement.blueflame, "a single small WQE goes by BlueFlame");
    let pages = ctx.uar_pages();
    let own = pages[placement.uar_page as usize];
    let sibling = pages[(placement.uar_page as usize + 1) % pages.len()];
    assert_ne!(own, sibling);
    let bad_doorbells = || nic.counters(None).1.bad_doorbells;
    let c0 = nic.counters(None).1;

    // The provider's own doorbells, sent to a sibling UAR page of the same
    // context: a BlueFlame WQE (a single inline WRITE), then the 8-byte
    // doorbell of a postlist of two WRITEs.
    *detour.to.lock().unwrap() = Some(sibling);
    let words: Vec<u64> = (0..4).map(|i| 0x1111_1111_1111_1111 * (i + 1)).collect();
    for (i, w) in words.iter().enumerate() {
        mr.write(8 * i as u64, &w.to_le_bytes()).unwrap();
    }
    let at = |i: u64| RemoteAddr {
        addr: b.mr.addr() + 8 * i,
        rkey: b.mr.rkey(),
    };
    let s: Vec<Sge> = (0..4).map(|i| mr.sge(8 * i, 8).unwrap()).collect();
    qp.post_send(&[SendWr {
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..signaled(0, &s[0..1], WrOpcode::RdmaWrite(at(0)))
    }])
    .unwrap();
    qp.post_send(&[
        signaled(1, &s[1..2], WrOpcode::RdmaWrite(at(1))),
        signaled(2, &s[2..3], WrOpcode::RdmaWrite(at(2))),
    ])
    .unwrap();
    *detour.to.lock().unwrap() = None;
    assert_eq!(bad_doorbells() - c0.bad_doorbells, 2);

    // Forged 8-byte doorbells for the QP, whose last WQE starts at WQEBB 2.
    let db = SendDoorbell {
        wqe_index: 2,
        opcode: u8::from(WqeOpcode::RdmaWrite),
        qpn: qp.qpn().get(),
        ds: 3,
    }
    .emit();
    let mmio = DeviceLink::mmio(&*nic);
    let reg = placement.uar_offset;
    let forged: [(UarIndex, u32, [u8; 8], &str); 7] = [
        (sibling, reg, db, "a sibling UAR page"),
        (other_ctx.uar_pages()[0], reg, db, "another context's UAR"),
        (UarIndex::new(0xdead), reg, db, "a UAR that does not exist"),
        (own, 0x100, db, "an offset that is no register"),
        (own, reg + 8, db, "the middle of the register"),
        (own, uar::EQ_DOORBELL as u32, db, "the EQ doorbell"),
        (
            own,
            reg,
            SendDoorbell {
                qpn: 0x00ab_cdef,
                ..SendDoorbell::parse(&db)
            }
            .emit(),
            "a QP that does not exist",
        ),
    ];
    for (k, (u, off, bytes, what)) in forged.iter().enumerate() {
        mmio.mmio_write(*u, *off, bytes);
        assert_eq!(
            bad_doorbells() - c0.bad_doorbells,
            3 + k as u64,
            "dropped: {what}"
        );
    }
    // Through its own register, but more than the queue's size ahead.
    let ahead = SendDoorbell {
        wqe_index: 2 + qp.sq_wqe_count() as u16 + 5,
        ..SendDoorbell::parse(&db)
    };
    mmio.mmio_write(own, reg, &ahead.emit());
    let c1 = nic.counters(None).1;
    assert_eq!(c1.bad_doorbells - c0.bad_doorbells, 3 + forged.len() as u64);
    // Nothing ran: no packet, no completion, the peer's memory as it was.
    assert_eq!(c1.tx_packets, c0.tx_packets);
    sync(&b);
    assert_empty(&cq, "after dropped doorbells");
    assert_filled(&b.mr, SENTINEL, "peer");
    assert_eq!(state(&qp), QpState::Rts);

    // The QP still works: its next doorbell covers the WQEs posted before.
    qp.post_send(&[signaled(3, &s[3..4], WrOpcode::RdmaWrite(at(3)))])
        .unwrap();
    let wcs = wait(&cq, 4);
    assert_eq!(
        outcome(&wcs),
        (0..4)
            .map(|i| (i, WcStatus::Success, WcOpcode::RdmaWrite))
            .collect::<Vec<_>>()
    );
    for (i, w) in words.iter().enumerate() {
        let mut got = [0u8; 8];
        b.mr.read(8 * i as u64, &mut got).unwrap();
        assert_eq!(u64::from_le_bytes(got), *w);
    }
    let c2 = nic.counters(None).1;
    assert_eq!(c2.bad_doorbells, c1.bad_doorbells);
    assert_eq!(state(&qp), QpState::Rts);
    assert_eq!(state(&b.qp), QpState::Rts);
    assert!(matches!(nic.exec(Command::QueryCaps), Ok(CmdOut::Caps(_))));
    sync(&b);
}

// ---------------------------------------------------------------------------
// 8. Posting errors in the provider.

#[test]
fn posts_in_the_wrong_state_are_refused_and_post_nothing() {
    let p = small_pair();
    let qp =
        p.a.pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: p.a.cq.clone(),
                recv_cq: p.a.cq.clone(),
                cap: caps(),
                sq_sig_all: true,
                srq: None,
            })
            .unwrap();
    let sge = p.a.mr.sge(0, 8).unwrap();
    let send = || qp.post_send(&[signaled(1, &[sge], WrOpcode::Send)]);
    let bad = |state| {
        Err(VerbsError::BadQpState {
            qpn: qp.qpn().get(),
            state,
        })
    };
    let m0 = p.a.nic.counters(None).0.mmio_writes;
    assert_eq!(send(), bad(QpState::Reset));
    assert_eq!(
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &[sge]
        }]),
        bad(QpState::Reset)
    );
    let peer = RcEndpoint {
        gid: p.b.ctx.gid(),
        qpn: Qpn::new(0x4242),
        psn: Psn::new(0),
    };
    qp.modify(
        QpState::Init,
        &QpAttrs {
            pkey_index: Some(0),
            port: Some(1),
            access: Some(Access(FULL)),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(send(), bad(QpState::Init));
    // Receives may be posted from INIT on.
    qp.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &[sge],
    }])
    .unwrap();
    qp.modify(
        QpState::Rtr,
        &QpAttrs {
            av: Some(AddressVector {
                dgid: peer.gid,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
            }),
            path_mtu: Some(1024),
            dest_qpn: Some(peer.qpn),
            rq_psn: Some(peer.psn),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(send(), bad(QpState::Rtr));
    assert_eq!(p.a.nic.counters(None).0.mmio_writes, m0, "no doorbell rung");
    assert_eq!(state(&qp), QpState::Rtr);
    settle(&p);
    assert_empty(&p.a.cq, "nothing posted");
}

#[test]
fn bad_work_requests_are_typed_errors_and_post_nothing() {
    let p = small_pair();
    fill(&p.b.mr, SENTINEL);
    let c = p.a.qp.caps();
    let remote = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    let mmio = || p.a.nic.counters(None).0.mmio_writes;
    let m0 = mmio();

    // Inline data above max_inline_data.
    let long = [p.a.mr.sge(0, c.max_inline_data + 1).unwrap()];
    let inline = SendWr {
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..signaled(1, &long, WrOpcode::RdmaWrite(remote))
    };
    assert_eq!(
        p.a.qp.post_send(&[inline]),
        Err(VerbsError::InlineTooLong {
            len: c.max_inline_data as usize + 1,
            max: c.max_inline_data as usize
        })
    );
    // More SGEs than max_send_sge, on either queue.
    let many: Vec<Sge> = (0..=u64::from(c.max_send_sge))
        .map(|i| p.a.mr.sge(i * 8, 8).unwrap())
        .collect();
    assert_eq!(
        p.a.qp
            .post_send(&[signaled(2, &many, WrOpcode::RdmaWrite(remote))]),
        Err(VerbsError::InvalidArgument("more SGEs than max_send_sge"))
    );
    let many_r: Vec<Sge> = (0..=u64::from(c.max_recv_sge))
        .map(|i| p.a.mr.sge(i * 8, 8).unwrap())
        .collect();
    assert_eq!(
        p.a.qp.post_recv(&[RecvWr {
            wr_id: 3,
            sg_list: &many_r
        }]),
        Err(VerbsError::InvalidArgument("more SGEs than max_recv_sge"))
    );
    // An atomic needs exactly one 8-byte SGE.
    let four = p.a.mr.sge(0, 4).unwrap();
    assert!(matches!(
        p.a.qp.post_send(&[signaled(
            4,
            &[four],
            WrOpcode::AtomicFetchAdd { remote, add: 1 }
        )]),
        Err(VerbsError::InvalidArgument(_))
    ));
    // Mr::sge, read and write check their range.
    let size = MR_LEN as u64;
    assert_eq!(
        p.a.mr.sge(size - 3, 4),
        Err(VerbsError::OutOfRange {
            offset: size - 3,
            len: 4,
            size
        })
    );
    assert!(matches!(
        p.a.mr.sge(u64::MAX, 1),
        Err(VerbsError::OutOfRange { .. })
    ));
    assert!(matches!(
        p.a.mr.write(size, &[1]),
        Err(VerbsError::OutOfRange { .. })
    ));
    assert!(matches!(
        p.a.mr.read(size - 1, &mut [0u8; 2]),
        Err(VerbsError::OutOfRange { .. })
    ));
    // Nothing reached the device.
    assert_eq!(mmio(), m0, "no doorbell rung");
    settle(&p);
    assert_empty(&p.a.cq, "nothing posted");
    assert_filled(&p.b.mr, SENTINEL, "peer");

    // A postlist posts the WRs before the bad one (rdma-core's bad_wr).
    let ok = p.a.mr.sge(0, 8).unwrap();
    p.a.mr.write(0, &7u64.to_le_bytes()).unwrap();
    assert_eq!(
        p.a.qp.post_send(&[
            signaled(5, &[ok], WrOpcode::RdmaWrite(remote)),
            signaled(6, &many, WrOpcode::RdmaWrite(remote)),
        ]),
        Err(VerbsError::InvalidArgument("more SGEs than max_send_sge"))
    );
    assert_eq!(
        outcome(&wait(&p.a.cq, 1)),
        [(5, WcStatus::Success, WcOpcode::RdmaWrite)]
    );

    // A full send queue: completions retire WRs only when polled.
    let n = c.max_send_wr;
    for i in 0..u64::from(n) {
        post(
            &p.a.qp,
            signaled(100 + i, &[ok], WrOpcode::RdmaWrite(remote)),
        );
    }
    let before = mmio();
    assert_eq!(
        p.a.qp
            .post_send(&[signaled(999, &[ok], WrOpcode::RdmaWrite(remote))]),
        Err(VerbsError::QueueFull { posted: n, max: n })
    );
    assert_eq!(mmio(), before, "the refused WR rang nothing");
    let wcs = wait(&p.a.cq, n as usize);
    assert!(wcs.iter().all(Wc::is_ok));
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (100..100 + u64::from(n)).collect::<Vec<_>>()
    );
    settle(&p);
    assert_empty(&p.a.cq, "the refused WR never ran");
    // A full receive queue.
    let r = p.b.mr.sge(0, 8).unwrap();
    let max_r = p.a.qp.caps().max_recv_wr;
    for i in 0..u64::from(max_r) {
        post_recv(&p.a.qp, i, &[r]);
    }
    assert_eq!(
        p.a.qp.post_recv(&[RecvWr {
            wr_id: 99,
            sg_list: &[r]
        }]),
        Err(VerbsError::QueueFull {
            posted: max_r,
            max: max_r
        })
    );
    // After all that the QP still works.
    post(&p.a.qp, signaled(7, &[ok], WrOpcode::RdmaWrite(remote)));
    assert_eq!(
        outcome(&wait(&p.a.cq, 1)),
        [(7, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(state(&p.a.qp), QpState::Rts);
    settle(&p);
}

// ---------------------------------------------------------------------------
// 9. Resource lifetime at the device.

#[test]
fn objects_in_use_cannot_be_destroyed() {
    let p = small_pair();
    let nic = &p.a.nic;
    let cqn = p.a.cq.cqn();
    let pdn = p.a.pd.pdn();
    // Through the command interface, behind the provider's back.
    assert_eq!(
        nic.exec(Command::DestroyCq(cqn)),
        Err(CmdError::Busy {
            kind: ObjKind::Cq,
            id: cqn.get()
        })
    );
    assert_eq!(
        nic.exec(Command::DeallocPd(pdn)),
        Err(CmdError::Busy {
            kind: ObjKind::Pd,
            id: pdn.get()
        })
    );
    let uar = p.a.ctx.uar_pages()[0];
    assert_eq!(
        nic.exec(Command::DeallocUar(uar)),
        Err(CmdError::Busy {
            kind: ObjKind::Uar,
            id: uar.get()
        })
    );
    assert!(matches!(
        nic.exec(Command::DestroyCq(doorbell_types::Cqn::new(0x00ab_cdef))),
        Err(CmdError::NoSuchObject {
            kind: ObjKind::Cq,
            ..
        })
    ));
    // The refused commands changed nothing: the QP, its CQ and PD still work.
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 64).unwrap()]);
    post(
        &p.a.qp,
        signaled(2, &[p.a.mr.sge(0, 64).unwrap()], WrOpcode::Send),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    assert!(wait(&p.b.cq, 1)[0].is_ok());

    // Through the driver: a CQ while a QP uses it, a PD while an MR or a QP
    // is in it; each goes once its user is gone.
    let link: Arc<dyn DeviceLink> = nic.clone();
    let uc = Ucontext::alloc(
        link,
        AllocUcontextReq {
            total_num_bfregs: 4,
            num_low_latency_bfregs: 0,
        },
    )
    .unwrap();
    let mem = nic.memory();
    let busy = |kind, id| Err(DriverError::Command(CmdError::Busy { kind, id }));
    let pd = uc.alloc_pd().unwrap();
    let buf = mem.alloc(4096).unwrap();
    let key = uc.reg_mr(pd, buf, 4096, Access(FULL)).unwrap();
    assert_eq!(uc.dealloc_pd(pd), busy(ObjKind::Pd, pd.get()));
    uc.dereg_mr(key).unwrap();
    let cq_buf = mem.alloc(64 * 8).unwrap();
    // Doorbell records live in pages the driver pins whole.
    let cq_db = mem.alloc(4096).unwrap();
    let cq = uc.create_cq(3, cq_buf, cq_db).unwrap();
    let qp_buf = mem.alloc(4096).unwrap();
    let qp_db = mem.alloc(4096).unwrap();
    let qp = uc
        .create_qp(CreateQpReq {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            buf_addr: qp_buf,
            buf_len: 4096,
            log_sq_size: 3,
            log_rq_size: 2,
            log_rq_stride: 0,
            db_addr: qp_db,
            srq: None,
            dyn_bfreg: None,
            gsi: false,
            user_index: 0,
        })
        .unwrap()
        .qpn;
    assert_eq!(uc.destroy_cq(cq), busy(ObjKind::Cq, cq.get()));
    assert_eq!(uc.dealloc_pd(pd), busy(ObjKind::Pd, pd.get()));
    uc.destroy_qp(qp).unwrap();
    uc.destroy_cq(cq).unwrap();
    uc.dealloc_pd(pd).unwrap();
    assert_eq!(uc.destroy_qp(qp), Err(DriverError::NoSuchObject(qp.get())));
    for a in [buf, cq_buf, cq_db, qp_buf, qp_db] {
        mem.free(a).unwrap();
    }
    assert!(mem.read(buf, &mut [0u8; 1]).is_err(), "freed");
    sync(&p.a);
}
