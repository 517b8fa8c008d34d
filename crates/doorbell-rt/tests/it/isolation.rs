//! What a peer can reach of a NIC's host, over every port (in-process
//! fabric, shared memory between processes of a host, UDP): only memory
//! registered for the access it asks, inside the MR, with its rkey, in the
//! QP's protection domain. Every other WRITE, READ or atomic fails on the
//! requester with a remote access error, and no byte of the responder's
//! memory changes: not of the MR it named, not of its neighbours.
//!
//! A doorbell through another context's UAR page is dropped and counted
//! (`errors.rs`), a peer that scribbles over a shared-memory ring breaks
//! only its own ring (`shm.rs`), and registering memory of another process
//! needs a grant (`data.rs`).

use doorbell_hif::QpState;
use doorbell_rt::NicOptions;
use doorbell_types::Psn;
use doorbell_verbs::{Access, Mr, QpInitAttr, RcEndpoint, RemoteAddr, WcStatus, WrOpcode};

use crate::common::*;
use crate::net::*;

const SENTINEL: u8 = 0xc3;
const LEN: usize = 1 << 14;

fn filled(mr: &Mr, byte: u8) {
    mr.write(0, &vec![byte; mr.len()]).unwrap();
}

fn unchanged(mr: &Mr, byte: u8, what: &str) {
    let mut got = vec![0u8; mr.len()];
    mr.read(0, &mut got).unwrap();
    assert!(
        got.iter().all(|&b| b == byte),
        "{what}: the responder's memory changed"
    );
}

/// A fresh RC QP pair between the two sides (a failed access moves both to
/// the error state, so every case has its own).
fn fresh(p: &Pair, n: u32) -> (doorbell_verbs::Qp, doorbell_verbs::Qp) {
    let attr = |s: &Side| QpInitAttr {
        qp_type: doorbell_hif::QpType::Rc,
        send_cq: s.cq.clone(),
        recv_cq: s.cq.clone(),
        cap: caps(8),
        sq_sig_all: false,
        srq: None,
    };
    let qa = p.a.pd.create_qp(&attr(&p.a)).unwrap();
    let qb = p.b.pd.create_qp(&attr(&p.b)).unwrap();
    let ea = RcEndpoint {
        gid: p.a.ctx.gid(),
        qpn: qa.qpn(),
        psn: Psn::new(100 * n),
    };
    let eb = RcEndpoint {
        gid: p.b.ctx.gid(),
        qpn: qb.qpn(),
        psn: Psn::new(7 + 100 * n),
    };
    let t = Timers {
        rd_atomic: 4,
        ..Timers::default()
    };
    connect_qp(&qa, &ea, &eb, t);
    connect_qp(&qb, &eb, &ea, t);
    (qa, qb)
}

/// Every access a peer must not get, against B, from A: each fails with a
/// remote access error and B's memory stays as it was.
fn nothing_beyond_the_rules(p: &Pair, port: &str) {
    let b = &p.b;
    // B's memory: an MR with every remote right (the one the rules allow),
    // MRs with one right each missing, and an MR in another PD.
    let full = b.pd.reg_mr(LEN, Access(FULL)).unwrap();
    let no_write =
        b.pd.reg_mr(
            LEN,
            Access(Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC),
        )
        .unwrap();
    let no_read =
        b.pd.reg_mr(
            LEN,
            Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC),
        )
        .unwrap();
    let no_atomic =
        b.pd.reg_mr(
            LEN,
            Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ),
        )
        .unwrap();
    let other_pd = b.ctx.alloc_pd().unwrap();
    let foreign = other_pd.reg_mr(LEN, Access(FULL)).unwrap();
    let stale = b.pd.reg_mr(LEN, Access(FULL)).unwrap();
    let (stale_addr, stale_rkey) = (stale.addr(), stale.rkey());
    drop(stale);
    let all = [&full, &no_write, &no_read, &no_atomic, &foreign];
    for m in all {
        filled(m, SENTINEL);
    }
    p.a.mr.write(0, &pattern(LEN, 9)).unwrap();
    let at = |m: &Mr, off: u64| RemoteAddr {
        addr: m.addr() + off,
        rkey: m.rkey(),
    };
    let guessed = RemoteAddr {
        addr: full.addr(),
        rkey: doorbell_types::Mkey::from_raw(full.rkey().raw() ^ 0x5a5a_0000),
    };
    let sge = |len: u32| p.a.mr.sge(0, len).unwrap();
    let atomic = |remote| WrOpcode::AtomicFetchAdd { remote, add: 1 };
    let cases: Vec<(&str, WrOpcode, u32)> = vec![
        (
            "a WRITE to an MR without remote write",
            WrOpcode::RdmaWrite(at(&no_write, 0)),
            64,
        ),
        (
            "a WRITE with a guessed rkey",
            WrOpcode::RdmaWrite(guessed),
            64,
        ),
        (
            "a WRITE with the rkey of a deregistered MR",
            WrOpcode::RdmaWrite(RemoteAddr {
                addr: stale_addr,
                rkey: stale_rkey,
            }),
            64,
        ),
        (
            "a WRITE that runs past the MR's end",
            WrOpcode::RdmaWrite(at(&full, LEN as u64 - 32)),
            64,
        ),
        (
            "a WRITE below the MR's start",
            WrOpcode::RdmaWrite(RemoteAddr {
                addr: full.addr() - 64,
                rkey: full.rkey(),
            }),
            64,
        ),
        (
            "a WRITE to an MR of another PD",
            WrOpcode::RdmaWrite(at(&foreign, 0)),
            64,
        ),
        (
            "a multi-packet WRITE whose last packet leaves the MR",
            WrOpcode::RdmaWrite(at(&full, LEN as u64 - 2048)),
            4096,
        ),
        (
            "a READ of an MR without remote read",
            WrOpcode::RdmaRead(at(&no_read, 0)),
            64,
        ),
        (
            "a READ past the MR's end",
            WrOpcode::RdmaRead(at(&full, LEN as u64 - 8)),
            64,
        ),
        (
            "an atomic on an MR without remote atomic",
            atomic(at(&no_atomic, 0)),
            8,
        ),
        ("an atomic with a guessed rkey", atomic(guessed), 8),
        (
            "an atomic past the MR's end",
            atomic(at(&full, LEN as u64)),
            8,
        ),
    ];
    for (n, (what, opcode, len)) in cases.into_iter().enumerate() {
        let (qa, qb) = fresh(p, n as u32 + 1);
        let (ca, cb) = (sync(&p.a), sync(b));
        let s = [sge(len)];
        qa.post_send(&[signaled(n as u64, &s, opcode)]).unwrap();
        let wc = wait(&p.a.cq, 1);
        assert_eq!(wc[0].status, WcStatus::RemAccessErr, "{port}: {what}");
        assert_eq!(wc[0].qp_num, qa.qpn(), "{port}: {what}");
        // Counted as mlx5 counts it, on both sides.
        let (ca2, cb2) = (sync(&p.a), sync(b));
        assert_eq!(
            cb2.resp_remote_access_errors - cb.resp_remote_access_errors,
            1,
            "{port}: {what}"
        );
        assert_eq!(
            ca2.req_remote_access_errors - ca.req_remote_access_errors,
            1,
            "{port}: {what}"
        );
        assert_eq!(ca2.req_cqe_error - ca.req_cqe_error, 1, "{port}: {what}");
        for m in all {
            unchanged(m, SENTINEL, &format!("{port}: {what}"));
        }
        // The responder's QP is in error, as hardware leaves it; the
        // other QPs of both NICs are not.
        sync(b);
        assert_eq!(qb.query().unwrap().0, QpState::Err, "{port}: {what}");
        assert_eq!(p.b.qp.query().unwrap().0, QpState::Rts, "{port}: {what}");
        assert_eq!(p.a.qp.query().unwrap().0, QpState::Rts, "{port}: {what}");
    }
    // What the rules allow still works, on a fresh pair: a WRITE inside the
    // MR with remote write, with its rkey.
    let (qa, _qb) = fresh(p, 99);
    let s = [sge(64)];
    qa.post_send(&[signaled(99, &s, WrOpcode::RdmaWrite(at(&full, 128)))])
        .unwrap();
    assert!(wait(&p.a.cq, 1)[0].is_ok(), "{port}: the allowed WRITE");
    let mut got = vec![0u8; LEN];
    full.read(0, &mut got).unwrap();
    assert_eq!(&got[128..192], &pattern(LEN, 9)[..64], "{port}");
    assert!(
        got[..128].iter().chain(&got[192..]).all(|&x| x == SENTINEL),
        "{port}"
    );
    for m in [&no_write, &no_read, &no_atomic, &foreign] {
        unchanged(m, SENTINEL, &format!("{port}: after the allowed WRITE"));
    }
}

#[test]
fn over_the_in_process_fabric() {
    let p = fabric_pair(
        [exact(NicOptions::default()), exact(NicOptions::default())],
        caps(8),
        LEN,
        Timers::default(),
    );
    nothing_beyond_the_rules(&p, "fabric");
}

#[test]
fn over_shared_memory() {
    let p = udp_pair(
        [lo(57, 2), lo(57, 3)],
        Default::default(),
        caps(8),
        LEN,
        Timers::default(),
    );
    nothing_beyond_the_rules(&p, "shared memory");
    let pa = p.a.nic.port_counters();
    assert!(pa.shm_tx_frames > 0 && pa.tx_datagrams == 0, "{pa:?}");
}

#[test]
fn over_udp() {
    let p = udp_pair(
        [lo(58, 2), lo(58, 3)],
        [udp_only(), udp_only()],
        caps(8),
        LEN,
        Timers::default(),
    );
    nothing_beyond_the_rules(&p, "UDP");
    let pa = p.a.nic.port_counters();
    assert!(pa.tx_datagrams > 0 && pa.shm_tx_frames == 0, "{pa:?}");
}
