//! QPs of thread domains between two live NICs: each rings its own dynamic
//! register with no lock, and WRITEs and SENDs still arrive.

use doorbell_rt::Fabric;
use doorbell_types::Psn;
use doorbell_verbs::{
    ProviderConfig, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RemoteAddr, SendFlags, SendWr,
    WcOpcode, WcStatus, WrOpcode,
};

use crate::common::{Side, pattern, post, post_recv, side, wait};

fn td_qp(s: &Side) -> (Qp, doorbell_verbs::Pd) {
    let td = s.ctx.alloc_td().unwrap();
    let parent = s.pd.parent_domain(Some(&td)).unwrap();
    let qp = parent
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: s.cq.clone(),
            recv_cq: s.cq.clone(),
            cap: QpCaps {
                max_send_wr: 32,
                max_recv_wr: 32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    (qp, parent)
}

#[test]
fn rc_writes_and_sends_flow_between_td_qps_of_two_live_nics() {
    let fabric = Fabric::new();
    let cap = QpCaps::default();
    let cfg = ProviderConfig::default();
    let a = side(
        &fabric,
        "td-a",
        [127, 0, 0, 2],
        cfg.clone(),
        cap,
        1 << 16,
        64,
    );
    let b = side(&fabric, "td-b", [127, 0, 0, 3], cfg, cap, 1 << 16, 64);
    let ((qa, _pa), (qb, _pb)) = (td_qp(&a), td_qp(&b));
    for (s, q) in [(&a, &qa), (&b, &qb)] {
        let p = s.ctx.placement(q);
        assert!(p.dyn_bfreg.is_some() && !p.lock, "{p:?}");
        assert_ne!(
            (p.uar_page, p.uar_offset),
            {
                let o = s.ctx.placement(&s.qp);
                (o.uar_page, o.uar_offset)
            },
            "not the static QP's register"
        );
    }
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: qa.qpn(),
        psn: Psn::new(0x42),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: qb.qpn(),
        psn: Psn::new(0x9000),
    };
    qa.connect_rc(&ea, &eb, 1024).unwrap();
    qb.connect_rc(&eb, &ea, 1024).unwrap();

    // A 4 KiB WRITE (several packets, by pointer) and a small inline one.
    let big = pattern(4096, 7);
    a.mr.write(0, &big).unwrap();
    let sge = [a.mr.sge(0, 4096).unwrap()];
    let write = |wr_id, sg_list, at, flags| SendWr {
        wr_id,
        sg_list,
        opcode: WrOpcode::RdmaWrite(RemoteAddr {
            addr: b.mr.addr() + at,
            rkey: b.mr.rkey(),
        }),
        flags,
        ud: None,
    };
    post(&qa, write(1, &sge, 0, SendFlags::SIGNALED));
    let small = [a.mr.sge(100, 40).unwrap()];
    post(
        &qa,
        write(2, &small, 8192, SendFlags::SIGNALED | SendFlags::INLINE),
    );
    // A SEND into a posted receive.
    let rsge = [b.mr.sge(16384, 512).unwrap()];
    post_recv(&qb, 30, &rsge);
    let ssge = [a.mr.sge(1000, 512).unwrap()];
    post(
        &qa,
        SendWr {
            wr_id: 3,
            sg_list: &ssge,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            ud: None,
        },
    );
    let wc = wait(&a.cq, 3);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    let rwc = wait(&b.cq, 1);
    assert_eq!((rwc[0].wr_id, rwc[0].opcode), (30, WcOpcode::Recv));
    assert_eq!(rwc[0].byte_len, 512);
    let mut got = vec![0u8; 4096];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, big);
    let mut got = vec![0u8; 40];
    b.mr.read(8192, &mut got).unwrap();
    assert_eq!(got, big[100..140]);
    let mut got = vec![0u8; 512];
    b.mr.read(16384, &mut got).unwrap();
    assert_eq!(got, big[1000..1512]);
}
