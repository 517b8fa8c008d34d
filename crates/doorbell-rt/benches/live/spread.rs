//! The same 8-byte postlists spread round-robin over many QPs: what a post
//! costs as QPs are added.

use super::*;

/// Two NICs with `n` connected RC QP pairs sharing one CQ and one MR per
/// side.
struct Many {
    a_nic: Arc<LiveNic>,
    b_nic: Arc<LiveNic>,
    a_cq: Cq,
    a_qps: Vec<Qp>,
    a_mr: Mr,
    b_mr: Mr,
    // Dropped after the QPs: the contexts own the PDs and CQs.
    _ctx: (Context, Context, Vec<Qp>, Cq),
    _fabric: Fabric,
}

fn many(n: usize, depth: u32, mtu: u32) -> Many {
    let fabric = Fabric::new();
    let start = |name: &str, ip| {
        Arc::new(LiveNic::start(name, &fabric, ip, LinkConfig::default()).expect("start NIC"))
    };
    let (a_nic, b_nic) = (start("a", [127, 0, 0, 2]), start("b", [127, 0, 0, 3]));
    let cfg = ProviderConfig::from_env().expect("MLX5_* settings");
    let ca = Context::with_config(a_nic.clone(), cfg.clone()).expect("open context");
    let cb = Context::with_config(b_nic.clone(), cfg).expect("open context");
    let (pa, pb) = (ca.alloc_pd().expect("PD"), cb.alloc_pd().expect("PD"));
    let (a_cq, b_cq) = (
        ca.create_cq(256).expect("CQ"),
        cb.create_cq(256).expect("CQ"),
    );
    let cap = QpCaps {
        max_send_wr: depth,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let attr = |cq: &Cq| QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap,
        sq_sig_all: false,
        srq: None,
    };
    let mut a_qps = Vec::with_capacity(n);
    let mut b_qps = Vec::with_capacity(n);
    for k in 0..n {
        let qa = pa.create_qp(&attr(&a_cq)).expect("create QP");
        let qb = pb.create_qp(&attr(&b_cq)).expect("create QP");
        let ea = RcEndpoint {
            gid: ca.gid(),
            qpn: qa.qpn(),
            psn: Psn::new(0x00ab_cd01 + k as u32),
        };
        let eb = RcEndpoint {
            gid: cb.gid(),
            qpn: qb.qpn(),
            psn: Psn::new(0x00ff_fff0 + k as u32),
        };
        qa.connect_rc(&ea, &eb, mtu).expect("connect A");
        qb.connect_rc(&eb, &ea, mtu).expect("connect B");
        a_qps.push(qa);
        b_qps.push(qb);
    }
    let a_mr = pa.reg_mr(SMALL, Access(FULL)).expect("register MR");
    let b_mr = pb
        .reg_mr(SMALL * SMALL_SLOTS, Access(FULL))
        .expect("register MR");
    Many {
        a_nic,
        b_nic,
        a_cq,
        a_qps,
        a_mr,
        b_mr,
        _ctx: (ca, cb, b_qps, b_cq),
        _fabric: fabric,
    }
}

/// 8-byte inline WRITEs in postlists of [`SIGNAL_EVERY`], the last of each
/// signalled, `s.depth` WRs in flight in all, on `n` QPs taken round-robin.
pub(crate) fn spread_writes(s: &Settings, n: usize) -> Rate {
    // Each QP holds what it may have in flight: all of it on one QP, one
    // postlist each when there are enough QPs to keep `depth` in flight.
    let per_qp = if n == 1 { s.depth } else { SIGNAL_EVERY };
    let m = many(n, per_qp as u32, s.mtu);
    m.a_mr.write(0, &pattern(SMALL, 7)).expect("fill source");
    let sge = [m.a_mr.sge(0, SMALL as u32).expect("sge")];
    let (raddr, rkey) = (m.b_mr.addr(), m.b_mr.rkey());
    let index: std::collections::BTreeMap<_, _> = m
        .a_qps
        .iter()
        .enumerate()
        .map(|(i, q)| (q.qpn(), i))
        .collect();
    // WRs in flight per QP, and in all.
    let mut in_flight = vec![0usize; n];
    let mut total = 0usize;
    let mut next = 0usize;
    let mut posted = 0u64;
    let mut wc = [blank_wc(); 16];
    let mut list = Vec::with_capacity(SIGNAL_EVERY);
    let rate = measure(s.warmup(), s.e2e(), || {
        let mut progressed = false;
        while total + SIGNAL_EVERY <= s.depth && in_flight[next] + SIGNAL_EVERY <= per_qp {
            list.clear();
            list.extend((0..SIGNAL_EVERY as u64).map(|k| SendWr {
                wr_id: posted + k,
                sg_list: &sge,
                opcode: WrOpcode::RdmaWrite(RemoteAddr {
                    addr: raddr + ((posted + k) as usize % SMALL_SLOTS * SMALL) as u64,
                    rkey,
                }),
                flags: if k + 1 == SIGNAL_EVERY as u64 {
                    SendFlags::INLINE | SendFlags::SIGNALED
                } else {
                    SendFlags::INLINE
                },
                ud: None,
            }));
            m.a_qps[next].post_send(&list).expect("post_send");
            posted += SIGNAL_EVERY as u64;
            in_flight[next] += SIGNAL_EVERY;
            total += SIGNAL_EVERY;
            next = (next + 1) % n;
            progressed = true;
        }
        let got = m.a_cq.poll(&mut wc).expect("poll CQ");
        for w in &wc[..got] {
            assert_eq!(
                w.status,
                WcStatus::Success,
                "WRITE {} failed: {w:?}",
                w.wr_id
            );
            let i = index[&w.qp_num];
            in_flight[i] -= SIGNAL_EVERY;
            total -= SIGNAL_EVERY;
        }
        if got == 0 && !progressed {
            std::thread::yield_now();
        }
        (got * SIGNAL_EVERY) as u64
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while total > 0 {
        let got = m.a_cq.poll(&mut wc).expect("poll CQ");
        total -= got * SIGNAL_EVERY;
        assert!(Instant::now() < deadline, "completions stopped arriving");
    }
    let (_, nic_a) = m.a_nic.counters(None);
    let (_, nic_b) = m.b_nic.counters(None);
    println!(
        "live: 8 B, postlist, {n} QPs: {posted} WRITEs; A sent {} packets, {} ACK timeouts; \
         B: {} packets in, {} dropped",
        nic_a.tx_packets, nic_a.local_ack_timeout_err, nic_b.rx_packets, nic_b.rx_dropped,
    );
    // The fabric loses nothing and an ACK timer starts when its message is
    // sent, so a timeout here is a defect, as in the other figures.
    assert_eq!(nic_b.rx_dropped, 0, "{n} QPs: frames were dropped");
    assert_eq!(
        nic_a.local_ack_timeout_err, 0,
        "{n} QPs: ACK timeouts on a lossless fabric"
    );
    rate
}

// ---------------------------------------------------------------------------
// Report.
