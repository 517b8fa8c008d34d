//! Resources run out, through the provider: objects up to the caps the
//! device reports and ENOMEM one past them; queues posted past their
//! depth; registrations that overlap or are too large; a CQ that overruns
//! (the CQ error event, then QP fatal for each QP whose completion was
//! lost, as mlx5 reports an overrun); thousands of QPs on one NIC; and
//! many threads ringing doorbells and BlueFlame copies through shared
//! bfregs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use doorbell_device::NicConfig;
use doorbell_hif::{CmdError, Command, DeviceLink};
use doorbell_pcie::{DmaPurpose, LinkConfig};
use doorbell_rt::{Fabric, LiveNic, LoopbackLink};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, NicEvent, Pd, ProviderConfig, Qp, QpCaps, QpInitAttr, QpState, QpType,
    RcEndpoint, RemoteAddr, SendFlags, SendWr, SrqInitAttr, Wc, WcStatus, WrOpcode,
};

use crate::common::{FULL, Side, host, pattern, post, signaled, wait};
use crate::net::{Timers, caps, connect_qp};

fn rc_attr(cq: &Cq, cap: QpCaps) -> QpInitAttr {
    QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap,
        sq_sig_all: false,
        srq: None,
    }
}

fn endpoint(ctx: &Context, qp: &Qp, psn: u32) -> RcEndpoint {
    RcEndpoint {
        gid: ctx.gid(),
        qpn: qp.qpn(),
        psn: Psn::new(psn),
    }
}

fn errno<T>(r: Result<T, doorbell_verbs::VerbsError>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno(),
    }
}

#[test]
fn objects_up_to_the_caps_then_enomem_and_room_again_after_a_destroy() {
    let mut cfg = NicConfig::new([10, 0, 0, 7]);
    cfg.caps.log_max_qp = 4;
    cfg.caps.max_pd = 6;
    cfg.caps.max_mkeys = 8;
    cfg.caps.max_cqe = 64;
    cfg.caps.max_send_wqebb = 64;
    cfg.caps.max_recv_wr = 64;
    let link = Arc::new(LoopbackLink::with_config("small0", cfg.clone()));
    let ctx = Context::open(link).unwrap();
    let caps = ctx.query_device().caps;
    assert_eq!(caps, cfg.caps, "the caps are the device's own");
    // PDs: max_pd, then ENOMEM; one freed makes room for one.
    let mut pds: Vec<Pd> = (0..caps.max_pd).map(|_| ctx.alloc_pd().unwrap()).collect();
    assert_eq!(errno(ctx.alloc_pd()), libc::ENOMEM);
    pds.pop();
    pds.push(ctx.alloc_pd().unwrap());
    assert_eq!(errno(ctx.alloc_pd()), libc::ENOMEM);
    let pd = pds[0].clone();
    // MRs: max_mkeys, then ENOMEM; the pinned memory of the refused one is
    // let go (it registers again once there is room).
    let mut mrs: Vec<_> = (0..caps.max_mkeys)
        .map(|i| {
            pd.reg_mr(4096, Access(FULL))
                .unwrap_or_else(|e| panic!("MR {i}: {e}"))
        })
        .collect();
    assert_eq!(errno(pd.reg_mr(4096, Access(FULL))), libc::ENOMEM);
    drop(mrs.remove(3));
    mrs.push(pd.reg_mr(4096, Access(FULL)).unwrap());
    assert_eq!(errno(pd.reg_mr(4096, Access(FULL))), libc::ENOMEM);
    // An MR over another's memory needs a key of its own too.
    let over = pd.reg_mr_at(mrs[0].addr(), 64, Access(FULL));
    assert_eq!(errno(over), libc::ENOMEM);
    // CQs: sizes past max_cqe - 1 are EINVAL.
    let cq = ctx.create_cq(caps.max_cqe - 1).unwrap();
    assert_eq!(errno(ctx.create_cq(caps.max_cqe)), libc::EINVAL);
    // QPs: 2^log_max_qp, then ENOMEM; queues deeper than the caps EINVAL.
    let cap = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let deep = |send, recv| QpCaps {
        max_send_wr: send,
        max_recv_wr: recv,
        ..cap
    };
    assert_eq!(
        errno(pd.create_qp(&rc_attr(&cq, deep(caps.max_send_wqebb + 1, 1)))),
        libc::EINVAL
    );
    assert_eq!(
        errno(pd.create_qp(&rc_attr(&cq, deep(1, caps.max_recv_wr + 1)))),
        libc::EINVAL
    );
    let max_qp = 1usize << caps.log_max_qp;
    let mut qps: Vec<Qp> = (0..max_qp)
        .map(|i| {
            pd.create_qp(&rc_attr(&cq, cap))
                .unwrap_or_else(|e| panic!("QP {i}: {e}"))
        })
        .collect();
    assert_eq!(errno(pd.create_qp(&rc_attr(&cq, cap))), libc::ENOMEM);
    qps.swap_remove(5);
    qps.push(pd.create_qp(&rc_attr(&cq, cap)).unwrap());
    assert_eq!(errno(pd.create_qp(&rc_attr(&cq, cap))), libc::ENOMEM);
    // SRQs: deeper than max_recv_wr - 1 is EINVAL.
    let srq = |max_wr| SrqInitAttr {
        max_wr,
        max_sge: 1,
        srq_limit: 0,
    };
    assert!(pd.create_srq(&srq(caps.max_recv_wr - 1)).is_ok());
    assert_eq!(errno(pd.create_srq(&srq(caps.max_recv_wr))), libc::EINVAL);
    // Everything goes; the device has room for all of it again.
    drop((qps, mrs, pds, pd, cq));
    let pds: Vec<Pd> = (0..caps.max_pd).map(|_| ctx.alloc_pd().unwrap()).collect();
    let cq = ctx.create_cq(8).unwrap();
    let qps: Vec<Qp> = (0..max_qp)
        .map(|_| pds[0].create_qp(&rc_attr(&cq, cap)).unwrap())
        .collect();
    let mrs: Vec<_> = (0..caps.max_mkeys)
        .map(|_| pds[1].reg_mr(64, Access(FULL)).unwrap())
        .collect();
    assert_eq!((qps.len(), mrs.len()), (max_qp, caps.max_mkeys as usize));
}

/// Two RC QPs of one context, on one loopback NIC, connected to each other.
struct Loop {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    a: Qp,
    b: Qp,
}

fn loop_pair(cap: QpCaps, cqe: u32) -> Loop {
    let link = Arc::new(LoopbackLink::new("loop0", [10, 0, 0, 9]));
    let ctx = Context::open(link).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(cqe).unwrap();
    let a = pd.create_qp(&rc_attr(&cq, cap)).unwrap();
    let b = pd.create_qp(&rc_attr(&cq, cap)).unwrap();
    let (ea, eb) = (endpoint(&ctx, &a, 0x10), endpoint(&ctx, &b, 0x20));
    a.connect_rc(&ea, &eb, 1024).unwrap();
    b.connect_rc(&eb, &ea, 1024).unwrap();
    Loop { ctx, pd, cq, a, b }
}

fn poll_all(cq: &Cq) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut wc = [Wc::default(); 16];
    loop {
        let n = cq.poll(&mut wc).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&wc[..n]);
    }
}

#[test]
fn overlapping_registrations_are_independent_and_oversized_ones_refused() {
    let l = loop_pair(caps(16), 64);
    let _ = &l.b;
    let base = l.pd.reg_mr(64 << 10, Access(FULL)).unwrap();
    // Two more MRs over parts of the same memory, overlapping each other.
    let x =
        l.pd.reg_mr_at(base.addr() + 4096, 16 << 10, Access(FULL))
            .unwrap();
    let y =
        l.pd.reg_mr_at(base.addr() + 8192, 16 << 10, Access(FULL))
            .unwrap();
    let keys = [base.rkey(), x.rkey(), y.rkey()];
    assert!(
        keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2],
        "independent keys: {keys:?}"
    );
    base.write(0, &pattern(64, 1)).unwrap();
    let src = [base.sge(0, 64).unwrap()];
    let write = |wr_id, to: &doorbell_verbs::Mr, off: u64| {
        post(
            &l.a,
            signaled(
                wr_id,
                &src,
                WrOpcode::RdmaWrite(RemoteAddr {
                    addr: to.addr() + off,
                    rkey: to.rkey(),
                }),
            ),
        );
        poll_all(&l.cq)
    };
    // Byte 12288 of the base is byte 8192 of x and byte 4096 of y.
    let wcs = write(1, &x, 8192);
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
    let mut got = vec![0u8; 64];
    y.read(4096, &mut got).unwrap();
    assert_eq!(got, pattern(64, 1), "seen through y");
    // Deregistering x leaves y and the base working, and x's key dead.
    drop(x);
    let wcs = write(2, &y, 0);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let wcs = write(3, &base, 100);
    assert_eq!(wcs[0].status, WcStatus::Success);
    let dead = RemoteAddr {
        addr: base.addr() + 4096,
        rkey: keys[1],
    };
    post(&l.a, signaled(4, &src, WrOpcode::RdmaWrite(dead)));
    let wcs = poll_all(&l.cq);
    assert_eq!(wcs[0].wr_id, 4);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr, "x's rkey is gone");
    // Larger than host memory can hold, past the address space, or over
    // memory that is not there: refused, nothing pinned, no crash.
    let pd2 = l.ctx.alloc_pd().unwrap();
    assert_eq!(errno(pd2.reg_mr(1 << 50, Access(FULL))), libc::ENOMEM);
    assert_eq!(
        errno(pd2.reg_mr_at(base.addr(), usize::MAX, Access(FULL))),
        libc::EFAULT
    );
    assert_eq!(
        errno(pd2.reg_mr_at(u64::MAX - 100, 4096, Access(FULL))),
        libc::EFAULT
    );
    assert_eq!(
        errno(pd2.reg_mr_at(base.addr(), (64 << 10) + 1, Access(FULL))),
        libc::EFAULT
    );
    // The base, still registered twice (with y), frees cleanly.
    drop((y, base));
}

#[test]
fn a_postlist_past_the_queue_depth_posts_what_fits_and_fails_at_the_first_that_does_not() {
    let l = loop_pair(caps(8), 64);
    let depth = l.a.caps().max_send_wr as usize;
    let mr = l.pd.reg_mr(4096, Access(FULL)).unwrap();
    let sge = [mr.sge(0, 8).unwrap()];
    let remote = RemoteAddr {
        addr: mr.addr() + 1024,
        rkey: mr.rkey(),
    };
    let wrs: Vec<SendWr<'_>> = (0..depth as u64 + 3)
        .map(|i| signaled(i, &sge, WrOpcode::RdmaWrite(remote)))
        .collect();
    let err = l.a.post_send_list(&wrs).unwrap_err();
    assert_eq!(err.index, depth, "bad_wr is the first WR with no room");
    assert_eq!(err.error.errno(), libc::ENOMEM);
    let wcs = poll_all(&l.cq);
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..depth as u64).collect::<Vec<_>>(),
        "exactly the WRs that fit ran"
    );
    assert!(wcs.iter().all(Wc::is_ok));
    // The receive queue alike.
    let rdepth = l.b.caps().max_recv_wr as usize;
    let rsge = [mr.sge(2048, 8).unwrap()];
    let rwrs: Vec<_> = (0..rdepth as u64 + 1)
        .map(|wr_id| doorbell_verbs::RecvWr {
            wr_id,
            sg_list: &rsge,
        })
        .collect();
    let err = l.b.post_recv_list(&rwrs).unwrap_err();
    assert_eq!((err.index, err.error.errno()), (rdepth, libc::ENOMEM));
    assert_eq!(l.a.state(), QpState::Rts);
}

/// The sides of a live pair, with QPs made by the caller.
fn live_sides(cap: QpCaps, mr_len: usize, cqe: u32) -> (Fabric, Side, Side) {
    let fabric = Fabric::new();
    let nic =
        |name, ip| Arc::new(LiveNic::start(name, &fabric, ip, LinkConfig::default()).unwrap());
    let a = host(
        nic("nic-a", [127, 0, 0, 2]),
        ProviderConfig::default(),
        cap,
        mr_len,
        cqe,
    );
    let b = host(
        nic("nic-b", [127, 0, 0, 3]),
        ProviderConfig::default(),
        cap,
        mr_len,
        cqe,
    );
    (fabric, a, b)
}

fn join(a: &Side, qa: &Qp, b: &Side, qb: &Qp, t: Timers) {
    let (ea, eb) = (endpoint(&a.ctx, qa, 0x100), endpoint(&b.ctx, qb, 0x200));
    connect_qp(qa, &ea, &eb, t);
    connect_qp(qb, &eb, &ea, t);
}

/// The QP's state as the device has it (`ibv_query_qp`).
fn device_state(qp: &Qp) -> QpState {
    qp.query().unwrap().0
}

fn async_events(ctx: &Context, n: usize) -> Vec<NicEvent> {
    (0..n)
        .map_while(|_| ctx.get_async_event(Duration::from_secs(10)))
        .collect()
}

#[test]
fn a_cq_overrun_is_a_cq_error_and_fails_each_qp_whose_completion_was_lost() {
    let (_fabric, a, b) = live_sides(caps(128), 1 << 16, 16);
    join(&a, &a.qp, &b, &b.qp, Timers::default());
    // A second QP of A completes into the same CQ.
    let qp2 = a.pd.create_qp(&rc_attr(&a.cq, caps(8))).unwrap();
    let qp2b = b.pd.create_qp(&rc_attr(&b.cq, caps(8))).unwrap();
    join(&a, &qp2, &b, &qp2b, Timers::default());
    // The ring holds one entry more than ibv_cq.cqe says.
    let n = a.cq.capacity() + 1;
    assert!(n < a.qp.caps().max_send_wr, "the SQ outlasts the CQ");
    let sge = [a.mr.sge(0, 8).unwrap()];
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    // Nobody polls: n completions fill the CQ, the one after overruns it.
    for i in 0..u64::from(n) + 1 {
        post(&a.qp, signaled(i, &sge, WrOpcode::RdmaWrite(remote)));
    }
    assert_eq!(
        async_events(&a.ctx, 2),
        [NicEvent::CqError(a.cq.cqn()), NicEvent::QpFatal(a.qp.qpn())]
    );
    assert_eq!(device_state(&a.qp), QpState::Err);
    // The n CQEs written before are intact, in order; nothing after them.
    let wcs = wait(&a.cq, n as usize);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        (0..u64::from(n))
            .map(|i| (i, WcStatus::Success))
            .collect::<Vec<_>>()
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(poll_all(&a.cq).is_empty(), "the CQ in error takes no CQE");
    // The other QP still runs until its first completion is lost too.
    assert_eq!(device_state(&qp2), QpState::Rts);
    post(&qp2, signaled(99, &sge, WrOpcode::RdmaWrite(remote)));
    assert_eq!(async_events(&a.ctx, 1), [NicEvent::QpFatal(qp2.qpn())]);
    assert_eq!(device_state(&qp2), QpState::Err);
    // The peers saw nothing wrong: their QPs and CQ are fine.
    assert_eq!(device_state(&b.qp), QpState::Rts);
    assert_eq!(device_state(&qp2b), QpState::Rts);
    assert!(poll_all(&b.cq).is_empty());
    assert_eq!(
        b.ctx.get_async_event(Duration::from_millis(50)),
        None,
        "no event at the peer"
    );
}

#[test]
fn four_thousand_qps_on_one_nic_each_move_a_message() {
    const QPS: usize = 4000;
    let start = Instant::now();
    let cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 16,
    };
    let (_fabric, a, b) = live_sides(cap, QPS * 16, 8192);
    let max_qp = 1usize << a.ctx.query_device().caps.log_max_qp;
    let n = QPS.min(max_qp - 1);
    let t = Timers::default();
    let pairs: Vec<(Qp, Qp)> = (0..n)
        .map(|_| {
            let qa = a.pd.create_qp(&rc_attr(&a.cq, cap)).unwrap();
            let qb = b.pd.create_qp(&rc_attr(&b.cq, cap)).unwrap();
            join(&a, &qa, &b, &qb, t);
            (qa, qb)
        })
        .collect();
    let made = start.elapsed();
    // Each QP writes 16 bytes of its own into its own slot at B.
    for (i, (qa, _)) in pairs.iter().enumerate() {
        let data = pattern(16, i as u8);
        a.mr.write((i * 16) as u64, &data).unwrap();
        let src = [a.mr.sge((i * 16) as u64, 16).unwrap()];
        post(
            qa,
            SendWr {
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..signaled(
                    i as u64,
                    &src,
                    WrOpcode::RdmaWrite(RemoteAddr {
                        addr: b.mr.addr() + (i * 16) as u64,
                        rkey: b.mr.rkey(),
                    }),
                )
            },
        );
    }
    let wcs = wait(&a.cq, n);
    assert!(
        wcs.iter().all(Wc::is_ok),
        "{:?}",
        wcs.iter().find(|w| !w.is_ok())
    );
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
    let got = b.mr.to_vec().unwrap();
    for i in 0..n {
        assert_eq!(got[i * 16..][..16], pattern(16, i as u8), "QP {i}'s bytes");
    }
    let (_, ca) = a.nic.counters(None);
    assert_eq!(ca.bad_doorbells, 0);
    // Every QP goes; the NIC's table holds none of them any more.
    let qpns: Vec<_> = pairs.iter().map(|(qa, _)| qa.qpn()).collect();
    drop(pairs);
    for qpn in [qpns[0], qpns[n / 2], qpns[n - 1]] {
        assert!(matches!(
            a.nic.exec(Command::QueryQp(qpn)),
            Err(CmdError::NoSuchObject { .. })
        ));
    }
    let elapsed = start.elapsed();
    eprintln!("{n} QPs on each NIC: made in {made:?}, all done in {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(60),
        "{n} QPs took {elapsed:?}"
    );
}

#[test]
fn many_threads_ring_shared_bfregs_and_lose_no_doorbell_and_tear_no_blueflame() {
    const THREADS: usize = 8;
    const QPS_PER_THREAD: usize = 4;
    const WRITES: usize = 4000;
    const LEN: usize = 60;
    let cap = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let slot = 64usize;
    let total = THREADS * WRITES;
    let (_fabric, a, b) = live_sides(cap, 64 << 10, 64);
    let b_mr = b.pd.reg_mr(total * slot, Access(FULL)).unwrap();
    let start = Instant::now();
    // Each thread's QPs complete into a CQ of its own; the QPs of all
    // threads share the context's bfregs.
    let mut work = Vec::new();
    let mut peers = Vec::new();
    for t in 0..THREADS {
        let cq = a.ctx.create_cq(64).unwrap();
        let qps: Vec<Qp> = (0..QPS_PER_THREAD)
            .map(|_| {
                let qa = a.pd.create_qp(&rc_attr(&cq, cap)).unwrap();
                let qb = b.pd.create_qp(&rc_attr(&b.cq, cap)).unwrap();
                join(&a, &qa, &b, &qb, Timers::default());
                peers.push(qb);
                qa
            })
            .collect();
        work.push((t, cq, qps));
    }
    let mut bfregs: Vec<u32> = work
        .iter()
        .flat_map(|(_, _, q)| q.iter().map(Qp::bfreg_index))
        .collect();
    bfregs.sort_unstable();
    let shared = bfregs.windows(2).filter(|w| w[0] == w[1]).count();
    assert!(shared > 0, "QPs share bfregs: {bfregs:?}");
    let c0 = a.nic.counters(None).0;
    let lists = std::thread::scope(|s| {
        work.iter()
            .map(|(t, cq, qps)| {
                let (amr, bmr) = (&a.mr, &b_mr);
                s.spawn(move || {
                    let base = (*t * 64 * LEN) as u64;
                    let mut outstanding = vec![0u32; qps.len()];
                    let mut done = 0usize;
                    let mut wc = [Wc::default(); 16];
                    let (mut i, mut lists) = (0, 0u64);
                    while i < WRITES {
                        let q = i % qps.len();
                        while outstanding[q] as usize >= 8 {
                            let n = cq.poll(&mut wc).unwrap();
                            for w in &wc[..n] {
                                assert!(w.is_ok(), "thread {t}: {w:?}");
                                let k = qps.iter().position(|x| x.qpn() == w.qp_num).unwrap();
                                outstanding[k] -= 1;
                            }
                            done += n;
                            if n == 0 {
                                std::thread::yield_now();
                            }
                        }
                        // Every fifth post is a postlist of two on one QP: an
                        // 8-byte doorbell, the WQEs read from the ring. The
                        // others are single inline WRs, by BlueFlame.
                        let list = if i % 5 == 4 && i + 1 < WRITES { 2 } else { 1 };
                        let srcs: Vec<[doorbell_verbs::Sge; 1]> = (i..i + list)
                            .map(|j| {
                                let off = base + ((j % 64) * LEN) as u64;
                                amr.write(off, &pattern(LEN, (t * 31 + j) as u8)).unwrap();
                                [amr.sge(off, LEN as u32).unwrap()]
                            })
                            .collect();
                        let wrs: Vec<SendWr<'_>> = (i..i + list)
                            .zip(&srcs)
                            .map(|(j, src)| SendWr {
                                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                                ..signaled(
                                    (t * WRITES + j) as u64,
                                    src,
                                    WrOpcode::RdmaWrite(RemoteAddr {
                                        addr: bmr.addr() + ((t * WRITES + j) * slot) as u64,
                                        rkey: bmr.rkey(),
                                    }),
                                )
                            })
                            .collect();
                        qps[q].post_send(&wrs).unwrap();
                        outstanding[q] += list as u32;
                        lists += u64::from(list == 2);
                        i += list;
                    }
                    while done < WRITES {
                        let n = cq.poll(&mut wc).unwrap();
                        assert!(wc[..n].iter().all(Wc::is_ok), "thread {t}");
                        done += n;
                        if n == 0 {
                            std::thread::yield_now();
                        }
                    }
                    lists
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum::<u64>()
    });
    let elapsed = start.elapsed();
    let got = b_mr.to_vec().unwrap();
    for t in 0..THREADS {
        for i in 0..WRITES {
            let at = (t * WRITES + i) * slot;
            assert_eq!(
                got[at..at + LEN],
                pattern(LEN, (t * 31 + i) as u8),
                "thread {t}, WRITE {i}"
            );
        }
    }
    let (c, nc) = a.nic.counters(None);
    assert_eq!(nc.bad_doorbells, 0, "no torn or stray BlueFlame write");
    assert_eq!(nc.doorbells_not_ready, 0);
    // Each single WR went by BlueFlame, two 64-byte chunks carrying the
    // whole WQE (no WQE read); each postlist by one doorbell, its WQEs
    // read from the ring.
    let single = total as u64 - 2 * lists;
    assert_eq!(
        c.mmio_writes - c0.mmio_writes,
        2 * single + lists,
        "two chunks for each BlueFlame copy, one store for each doorbell"
    );
    assert!(c.reads(DmaPurpose::SendWqe) - c0.reads(DmaPurpose::SendWqe) >= lists);
    drop(peers);
    eprintln!("{total} BlueFlame WRITEs from {THREADS} threads in {elapsed:?}");
}
