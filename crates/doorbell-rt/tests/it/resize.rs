//! `Cq::resize` on the loopback NIC: growing and shrinking a CQ keeps its
//! unpolled completions, in order, and a size too small for them is
//! refused.

use std::sync::Arc;

use doorbell_rt::LoopbackLink;
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr, SendFlags, SendWr,
    VerbsError, Wc, WcStatus, WrOpcode,
};

use crate::common::FULL;

fn poll(cq: &Cq) -> Vec<Wc> {
    let mut buf = [Wc::default(); 8];
    let mut out = Vec::new();
    loop {
        let n = cq.poll(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_resized_cq_keeps_its_unpolled_completions() {
    let link = Arc::new(LoopbackLink::new("resize", [10, 0, 0, 6]));
    let ctx = Context::open(link.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // The send CQ under test: 3 asked, 4 slots, 3 usable.
    let scq = ctx.create_cq(3).unwrap();
    assert_eq!(scq.capacity(), 3);
    let rcq = ctx.create_cq(128).unwrap();
    let cap = QpCaps {
        max_send_wr: 32,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mk = |send_cq: &Cq| {
        pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: send_cq.clone(),
            recv_cq: rcq.clone(),
            cap,
            sq_sig_all: true,
            srq: None,
        })
        .unwrap()
    };
    let (a, b) = (mk(&scq), mk(&rcq));
    let e = |q: &doorbell_verbs::Qp, psn| RcEndpoint {
        gid: ctx.gid(),
        qpn: q.qpn(),
        psn: Psn::new(psn),
    };
    a.connect_rc(&e(&a, 1), &e(&b, 2), 1024).unwrap();
    b.connect_rc(&e(&b, 2), &e(&a, 1), 1024).unwrap();
    let mr = pd.reg_mr(4096, Access(FULL)).unwrap();
    let sge = [mr.sge(0, 8).unwrap()];
    let mut next = 0u64;
    let mut sends = |n: usize| {
        for _ in 0..n {
            b.post_recv(&[RecvWr {
                wr_id: 0,
                sg_list: &sge,
            }])
            .unwrap();
            next += 1;
            a.post_send(&[SendWr {
                wr_id: next,
                sg_list: &sge,
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
        }
        let _ = poll(&rcq);
    };
    let ids = |w: Vec<Wc>| {
        assert!(w.iter().all(|w| w.status == WcStatus::Success));
        w.iter().map(|w| w.wr_id).collect::<Vec<_>>()
    };
    // Full, then grown: the three unpolled come out first, in order.
    sends(3);
    scq.resize(100).unwrap();
    assert_eq!(scq.capacity(), 127);
    sends(10);
    assert_eq!(ids(poll(&scq)), (1..=13).collect::<Vec<_>>());
    // Twelve unpolled do not fit 8 slots; they fit 16, where the counts
    // (14..=25) wrap the smaller ring.
    sends(12);
    let e = scq.resize(7).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    scq.resize(15).unwrap();
    assert_eq!(scq.capacity(), 15);
    sends(3);
    assert_eq!(ids(poll(&scq)), (14..=28).collect::<Vec<_>>());
    // The same size is nothing to do; out of range is refused.
    scq.resize(15).unwrap();
    assert!(matches!(scq.resize(0), Err(VerbsError::InvalidArgument(_))));
    assert_eq!(link.counters(None).1.bad_doorbells, 0);
}
