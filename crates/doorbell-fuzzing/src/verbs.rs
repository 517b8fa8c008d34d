//! The provider's CQ polling (`doorbell_verbs::Cq::poll`) over a CQ ring
//! whose bytes are the fuzzer's, on a loopback link (decision 0014).

use std::sync::Arc;

use doorbell_hif::link::DeviceLink;
use doorbell_layout::cqe::CQE_LEN;
use doorbell_rt::LoopbackLink;
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Mr, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr, RemoteAddr,
    SendFlags, SendWr, Wc, WrOpcode,
};

use crate::input::Input;

/// A context on a loopback link with one CQ, two connected RC QPs and an
/// MR, after some WRITEs and receives were posted.
pub struct Setup {
    /// The link.
    pub link: Arc<LoopbackLink>,
    /// The context.
    pub ctx: Context,
    /// The CQ both QPs complete into.
    pub cq: Cq,
    /// The QP that writes.
    pub a: Qp,
    /// The QP that receives.
    pub b: Qp,
    /// The MR of both.
    pub mr: Mr,
}

impl Setup {
    /// Posts `writes` signalled WRITEs on `a` and `recvs` receives on `b`.
    pub fn new(writes: u8, recvs: u8) -> Self {
        let link = Arc::new(LoopbackLink::new("fuzz0", [10, 0, 0, 9]));
        let ctx = Context::open(link.clone()).expect("context");
        let pd = ctx.alloc_pd().expect("PD");
        let cq = ctx.create_cq(CQ_ENTRIES).expect("CQ");
        let attr = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
            srq: None,
        };
        let a = pd.create_qp(&attr).expect("QP");
        let b = pd.create_qp(&attr).expect("QP");
        let mr = pd
            .reg_mr(
                4096,
                Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ),
            )
            .expect("MR");
        let ea = RcEndpoint {
            gid: ctx.gid(),
            qpn: a.qpn(),
            psn: Psn::new(1),
        };
        let eb = RcEndpoint {
            gid: ctx.gid(),
            qpn: b.qpn(),
            psn: Psn::new(2),
        };
        a.connect_rc(&ea, &eb, 1024).expect("connect");
        b.connect_rc(&eb, &ea, 1024).expect("connect");
        let sge = [mr.sge(0, 64).expect("SGE")];
        for n in 0..recvs {
            let _ = b.post_recv(&[RecvWr {
                wr_id: u64::from(n),
                sg_list: &sge,
            }]);
        }
        for n in 0..writes {
            let _ = a.post_send(&[SendWr {
                wr_id: 100 + u64::from(n),
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite(RemoteAddr {
                    addr: mr.addr() + 2048,
                    rkey: mr.rkey(),
                }),
                flags: SendFlags::SIGNALED,
                ud: None,
            }]);
        }
        Self {
            link,
            ctx,
            cq,
            a,
            b,
            mr,
        }
    }

    /// The bytes of the CQ ring as the device left them.
    pub fn ring_bytes(&self) -> Vec<u8> {
        let (ring, len) = self.cq.ring();
        let mut v = vec![0u8; len as usize];
        self.link.memory().read(ring, &mut v).expect("CQ ring");
        v
    }
}

/// Entries asked of the CQ (it gets the next power of two above).
pub const CQ_ENTRIES: u32 = 15;

/// Target `poll_cq`: a context with one CQ and two connected RC QPs.
/// Input: how many WRITEs and receives to post first (mod 8 each), how
/// many completions each poll asks for (mod 17), then the bytes written
/// over the CQ ring from entry 0 on. The provider polls until the ring
/// looks empty (at most twice the ring), re-arms the CQ and polls again;
/// nothing may panic, and no poll may return more than it was asked for.
pub fn poll_cq(data: &[u8]) {
    let mut input = Input::new(data);
    let writes = input.u8() % 8;
    let recvs = input.u8() % 8;
    let batch = usize::from(input.u8() % 17);
    let s = Setup::new(writes, recvs);
    let (link, cq) = (&s.link, &s.cq);
    let (ring, ring_len) = cq.ring();
    let bytes = input.bytes(ring_len as usize);
    link.memory().write(ring, bytes).expect("CQ ring");
    let mut wc = vec![Wc::default(); batch];
    let entries = (ring_len as usize / CQE_LEN) * 2;
    for round in 0..2 {
        for _ in 0..entries {
            match cq.poll(&mut wc) {
                Ok(0) | Err(_) => break,
                Ok(n) => assert!(n <= batch, "polled {n} of {batch}"),
            }
        }
        if round == 0 {
            let _ = cq.req_notify(false);
        }
    }
}
