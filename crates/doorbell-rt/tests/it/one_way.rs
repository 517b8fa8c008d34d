//! One-way QPs, as mlx5 makes them: a QP may ask for no send queue (a
//! receive-only end) or no receive queue (a send-only end). Its caps then
//! say 0, a post to the missing queue is refused as a full queue (ENOMEM),
//! and the other queue works.

use std::sync::Arc;

use doorbell_rt::LoopbackLink;
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr, SendFlags, SendWr, VerbsError,
    Wc, WcStatus, WrOpcode,
};

use crate::common::FULL;

#[test]
fn a_receive_only_qp_and_a_send_only_qp_talk() {
    let link = Arc::new(LoopbackLink::new("oneway", [10, 0, 0, 7]));
    let ctx = Context::open(link.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mk = |send: u32, recv: u32| {
        pd.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: send,
                max_recv_wr: recv,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
            srq: None,
        })
        .unwrap()
    };
    let (sender, receiver) = (mk(8, 0), mk(0, 8));
    assert_eq!(receiver.caps().max_send_wr, 0, "no send queue");
    assert!(sender.caps().max_send_wr >= 8);
    let e = |q: &doorbell_verbs::Qp, psn| RcEndpoint {
        gid: ctx.gid(),
        qpn: q.qpn(),
        psn: Psn::new(psn),
    };
    sender
        .connect_rc(&e(&sender, 1), &e(&receiver, 2), 1024)
        .unwrap();
    receiver
        .connect_rc(&e(&receiver, 2), &e(&sender, 1), 1024)
        .unwrap();
    let mr = pd.reg_mr(4096, Access(FULL)).unwrap();
    let sge = [mr.sge(0, 8).unwrap()];
    let send = |q: &doorbell_verbs::Qp| {
        q.post_send(&[SendWr {
            wr_id: 7,
            sg_list: &sge,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
    };
    let err = send(&receiver).unwrap_err();
    assert!(matches!(err, VerbsError::QueueFull { .. }), "{err}");
    assert_eq!(err.errno(), libc::ENOMEM);

    receiver
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &sge,
        }])
        .unwrap();
    send(&sender).unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while got.len() < 2 && std::time::Instant::now() < deadline {
        let mut wc = [Wc::default(); 4];
        let n = cq.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
    }
    let mut ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [7, 9], "{got:?}");
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    assert_eq!(link.counters(None).1.bad_doorbells, 0);
}
