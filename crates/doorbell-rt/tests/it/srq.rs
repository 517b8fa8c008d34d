//! Shared receive queues end to end, on one NIC driven synchronously
//! ([`LoopbackLink`]), so that "in posting order" is exact: several RC QPs
//! take their receives from one SRQ, the limit event fires once per arming,
//! a QP in error says it takes no more, and UD receives from an SRQ too.

use std::sync::Arc;
use std::time::Duration;

use doorbell_rt::LoopbackLink;
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, AddressVector, Ah, Context, Cq, Mr, NicEvent, Pd, Qp, QpAttrs, QpCaps, QpInitAttr,
    QpState, QpType, RcEndpoint, RecvWr, SendFlags, SendWr, Srq, SrqInitAttr, UdTarget, VerbsError,
    Wc, WcOpcode, WcStatus, WrOpcode,
};

use crate::common::{FULL, pattern};

const SLOT: u64 = 4096;

struct Rig {
    _link: Arc<LoopbackLink>,
    ctx: Context,
    pd: Pd,
    srq: Srq,
    /// Where the SRQ's receives land, one `SLOT` each.
    mr: Mr,
}

fn rig(max_wr: u32) -> Rig {
    let link = Arc::new(LoopbackLink::new("srq", [10, 0, 0, 5]));
    let ctx = Context::open(link.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd
        .create_srq(&SrqInitAttr {
            max_wr,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mr = pd.reg_mr(64 * SLOT as usize, Access(FULL)).unwrap();
    Rig {
        _link: link,
        ctx,
        pd,
        srq,
        mr,
    }
}

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn qp(pd: &Pd, ty: QpType, cq: &Cq, srq: Option<&Srq>) -> Qp {
    pd.create_qp(&QpInitAttr {
        qp_type: ty,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap: caps(),
        sq_sig_all: true,
        srq: srq.cloned(),
    })
    .unwrap()
}

fn connect(ctx: &Context, a: &Qp, b: &Qp) {
    let e = |q: &Qp, psn| RcEndpoint {
        gid: ctx.gid(),
        qpn: q.qpn(),
        psn: Psn::new(psn),
    };
    let (ea, eb) = (e(a, 0x100), e(b, 0x200));
    a.connect_rc(&ea, &eb, 1024).unwrap();
    b.connect_rc(&eb, &ea, 1024).unwrap();
}

fn poll(cq: &Cq) -> Vec<Wc> {
    let mut buf = [Wc::default(); 16];
    let mut out = Vec::new();
    loop {
        let n = cq.poll(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Posts receive `wr_id` into slot `slot` of the rig's MR.
fn post_srq(r: &Rig, wr_id: u64, slot: u64) {
    let sge = r.mr.sge(slot * SLOT, SLOT as u32).unwrap();
    r.srq
        .post_recv(&[RecvWr {
            wr_id,
            sg_list: &[sge],
        }])
        .unwrap();
}

/// One SEND of `len` bytes of pattern `seed` from `qp` out of `mr`.
fn send(qp: &Qp, mr: &Mr, len: usize, seed: u8) {
    mr.write(0, &pattern(len, seed)).unwrap();
    let sge = [mr.sge(0, len as u32).unwrap()];
    qp.post_send(&[SendWr {
        wr_id: u64::from(seed),
        sg_list: &sge,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
}

fn events(ctx: &Context) -> Vec<NicEvent> {
    std::iter::from_fn(|| ctx.get_async_event(Duration::ZERO)).collect()
}

#[test]
fn rc_qps_share_one_srq_in_posting_order() {
    let r = rig(16);
    // Server: two QPs on the SRQ, each completing into its own CQ.
    let (cq1, cq2) = (r.ctx.create_cq(32).unwrap(), r.ctx.create_cq(32).unwrap());
    let s1 = qp(&r.pd, QpType::Rc, &cq1, Some(&r.srq));
    let s2 = qp(&r.pd, QpType::Rc, &cq2, Some(&r.srq));
    assert_eq!(s1.caps().max_recv_wr, 0, "a QP with an SRQ has no RQ");
    // Two peers.
    let cc = r.ctx.create_cq(32).unwrap();
    let (p1, p2) = (
        qp(&r.pd, QpType::Rc, &cc, None),
        qp(&r.pd, QpType::Rc, &cc, None),
    );
    connect(&r.ctx, &p1, &s1);
    connect(&r.ctx, &p2, &s2);
    let src = r.pd.reg_mr(SLOT as usize, Access(FULL)).unwrap();
    for i in 0..6 {
        post_srq(&r, 100 + i, i);
    }
    // Alternate the peers: message k takes the k-th receive posted.
    let lens = [1000usize, 1, 4096, 0, 2048, 17];
    for (k, &len) in lens.iter().enumerate() {
        let peer = if k % 2 == 0 { &p1 } else { &p2 };
        send(peer, &src, len, k as u8);
        // One CQ for both peers: each completion is its own QP's (the CQ
        // keeps the QP of the last CQE; the next one is the other's).
        let w = poll(&cc);
        assert_eq!(
            w.iter().map(|w| (w.wr_id, w.qp_num)).collect::<Vec<_>>(),
            [(k as u64, peer.qpn())]
        );
    }
    let got1 = poll(&cq1);
    let got2 = poll(&cq2);
    let view = |w: &[Wc]| {
        w.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.qp_num, w.byte_len))
            .collect::<Vec<_>>()
    };
    let want = |q: &Qp, ks: [usize; 3]| {
        ks.map(|k| {
            (
                100 + k as u64,
                WcStatus::Success,
                WcOpcode::Recv,
                q.qpn(),
                lens[k] as u32,
            )
        })
        .to_vec()
    };
    assert_eq!(view(&got1), want(&s1, [0, 2, 4]), "QP 1's on QP 1's CQ");
    assert_eq!(view(&got2), want(&s2, [1, 3, 5]), "QP 2's on QP 2's CQ");
    for (k, &len) in lens.iter().enumerate() {
        let mut buf = vec![0u8; len];
        r.mr.read(k as u64 * SLOT, &mut buf).unwrap();
        assert_eq!(buf, pattern(len, k as u8), "slot {k}");
    }
    // The WQEs went back to the free list: the SRQ takes its depth again
    // (16 asked for, a ring of 32 less the list's end granted).
    let depth = r.srq.query().max_wr;
    assert_eq!(depth, 31);
    for i in 0..u64::from(depth) {
        post_srq(&r, 200 + i, i % 6);
    }
    let e = r
        .srq
        .post_recv_list(&[RecvWr {
            wr_id: 1,
            sg_list: &[],
        }])
        .unwrap_err();
    assert_eq!(e.index, 0);
    assert!(matches!(e.error, VerbsError::QueueFull { .. }));
    assert!(events(&r.ctx).is_empty());
}

#[test]
fn the_limit_event_fires_once_until_armed_again() {
    let r = rig(15);
    assert_eq!(r.srq.query().max_wr, 15);
    let cq = r.ctx.create_cq(64).unwrap();
    let s = qp(&r.pd, QpType::Rc, &cq, Some(&r.srq));
    let cc = r.ctx.create_cq(64).unwrap();
    let p = qp(&r.pd, QpType::Rc, &cc, None);
    connect(&r.ctx, &p, &s);
    let src = r.pd.reg_mr(SLOT as usize, Access(FULL)).unwrap();
    for i in 0..8 {
        post_srq(&r, i, i);
    }
    r.srq.modify(None, Some(4)).unwrap();
    assert_eq!(r.srq.query().srq_limit, 4);
    // 8 posted: the event comes when fewer than 4 are left, at the 5th.
    for k in 0..5u8 {
        assert!(events(&r.ctx).is_empty(), "no event with {} left", 8 - k);
        send(&p, &src, 8, k);
    }
    assert_eq!(events(&r.ctx), [NicEvent::SrqLimit(r.srq.srqn())]);
    assert_eq!(r.srq.query().srq_limit, 0, "disarmed");
    for k in 5..7u8 {
        send(&p, &src, 8, k);
    }
    assert!(events(&r.ctx).is_empty(), "once per arming");
    assert_eq!(poll(&cq).len(), 7);
    // Armed again with 1 left and a limit of 2: nothing until a receive is
    // taken with fewer than 2 left.
    r.srq.modify(None, Some(2)).unwrap();
    for i in 8..12 {
        post_srq(&r, i, i);
    }
    for k in 7..10u8 {
        send(&p, &src, 8, k);
    }
    assert!(events(&r.ctx).is_empty(), "2 left");
    send(&p, &src, 8, 10);
    assert_eq!(events(&r.ctx), [NicEvent::SrqLimit(r.srq.srqn())]);
    send(&p, &src, 8, 11);
    assert!(events(&r.ctx).is_empty());
    assert_eq!(poll(&cq).len(), 5);
    // The limit's range.
    assert!(matches!(
        r.srq.modify(None, Some(16)),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        r.srq.modify(Some(31), None),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert_eq!(r.srq.modify(None, Some(15)), Ok(()));
}

#[test]
fn an_srq_in_use_stays_and_a_qp_in_error_reports_its_last_wqe() {
    let r = rig(8);
    let cq = r.ctx.create_cq(32).unwrap();
    assert!(!r.srq.is_shared());
    let s1 = qp(&r.pd, QpType::Rc, &cq, Some(&r.srq));
    let s2 = qp(&r.pd, QpType::Rc, &cq, Some(&r.srq));
    assert!(r.srq.is_shared(), "destroy would answer EBUSY");
    // A QP with an SRQ posts no receives of its own.
    let sge = [r.mr.sge(0, 8).unwrap()];
    let e = s1
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &sge,
        }])
        .unwrap_err();
    assert!(matches!(e, VerbsError::InvalidArgument(_)));
    let cc = r.ctx.create_cq(32).unwrap();
    let (p1, p2) = (
        qp(&r.pd, QpType::Rc, &cc, None),
        qp(&r.pd, QpType::Rc, &cc, None),
    );
    connect(&r.ctx, &p1, &s1);
    connect(&r.ctx, &p2, &s2);
    for i in 0..3 {
        post_srq(&r, 10 + i, i);
    }
    // QP 1 to ERR: it raises LAST_WQE_REACHED once, and flushes nothing
    // of the SRQ's: those receives are QP 2's to take.
    s1.modify(QpState::Err, &QpAttrs::default()).unwrap();
    assert_eq!(events(&r.ctx), [NicEvent::QpLastWqeReached(s1.qpn())]);
    assert!(poll(&cq).is_empty());
    let src = r.pd.reg_mr(SLOT as usize, Access(FULL)).unwrap();
    send(&p2, &src, 100, 1);
    let got = poll(&cq);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect::<Vec<_>>(),
        [(10, s2.qpn(), WcStatus::Success)]
    );
    assert!(events(&r.ctx).is_empty(), "reported once");
    drop((s1, s2));
    assert!(!r.srq.is_shared(), "the QPs gave it back");
}

#[test]
fn ud_receives_from_an_srq() {
    let r = rig(8);
    let cq = r.ctx.create_cq(32).unwrap();
    let ud = |srq: Option<&Srq>| {
        let q = qp(&r.pd, QpType::Ud, &cq, srq);
        q.modify(
            QpState::Init,
            &QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                qkey: Some(0x1111),
                ..Default::default()
            },
        )
        .unwrap();
        q.modify(QpState::Rtr, &QpAttrs::default()).unwrap();
        q.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(Psn::new(3)),
                ..Default::default()
            },
        )
        .unwrap();
        q
    };
    let server = ud(Some(&r.srq));
    let client = ud(None);
    post_srq(&r, 55, 2);
    let src = r.pd.reg_mr(SLOT as usize, Access(FULL)).unwrap();
    src.write(0, &pattern(300, 9)).unwrap();
    let sge = [src.sge(0, 300).unwrap()];
    client
        .post_send(&[SendWr {
            wr_id: 1,
            sg_list: &sge,
            opcode: WrOpcode::SendWithImm(0x77),
            flags: SendFlags::SIGNALED,
            ud: Some(UdTarget {
                ah: Ah {
                    av: AddressVector {
                        dgid: r.ctx.gid(),
                        sgid_index: 0,
                        hop_limit: 64,
                        traffic_class: 0,
                        sl: 0,
                    },
                },
                remote_qpn: server.qpn(),
                remote_qkey: 0x1111,
            }),
        }])
        .unwrap();
    let got = poll(&cq);
    let recv: Vec<_> = got.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(recv.len(), 1, "{got:?}");
    let w = recv[0];
    assert_eq!(
        (w.wr_id, w.qp_num, w.byte_len, w.imm_data, w.src_qp, w.grh),
        (
            55,
            server.qpn(),
            40 + 300,
            Some(0x77),
            client.qpn().get(),
            true
        )
    );
    let mut buf = vec![0u8; 300];
    r.mr.read(2 * SLOT + 40, &mut buf).unwrap();
    assert_eq!(buf, pattern(300, 9), "after the 40-byte GRH area");
}
