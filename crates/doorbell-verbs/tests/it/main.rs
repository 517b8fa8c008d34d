//! The provider on its own: one NIC on a synchronous loopback link (no
//! threads, a virtual clock), two RC QPs of one context talking to each
//! other. Every MMIO store runs the device to completion before it
//! returns, so each test sees exactly what one post puts on the bus.
#![allow(missing_docs, unreachable_pub)]

mod gather;
mod port;
mod rereg;
mod staged;
mod td;

use std::sync::Arc;

use doorbell_pcie::DmaPurpose;
use doorbell_rt::LoopbackLink;
use doorbell_types::{Duration, Psn};
use doorbell_verbs::{
    Access, Context, Cq, Mr, Pd, PostObserver, PostReport, Qp, QpCaps, QpInitAttr, QpType,
    RcEndpoint, RecvWr, RemoteAddr, Ring, SendFlags, SendWr, Wc, WcStatus, WrOpcode,
};

const FULL: u32 =
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;

struct Rig {
    link: Arc<LoopbackLink>,
    ctx: Context,
    cq: Cq,
    a: Qp,
    b: Qp,
    mr: Mr,
}

fn rig() -> Rig {
    let link = Arc::new(LoopbackLink::new("loop0", [10, 0, 0, 9]));
    let ctx = Context::open(link.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let cap = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let (a, b) = rc_pair(&ctx, &pd, &cq, cap, Psn::new(0xff_fffe));
    let mr = pd.reg_mr(8192, Access(FULL)).unwrap();
    Rig {
        link,
        ctx,
        cq,
        a,
        b,
        mr,
    }
}

/// Two RC QPs of `pd` with `cap`, both on `cq`, connected to each other at
/// MTU 1024: A starts at PSN 0x10, B at `b_psn`.
fn rc_pair(ctx: &Context, pd: &Pd, cq: &Cq, cap: QpCaps, b_psn: Psn) -> (Qp, Qp) {
    let attr = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap,
        sq_sig_all: false,
        srq: None,
    };
    let a = pd.create_qp(&attr).unwrap();
    let b = pd.create_qp(&attr).unwrap();
    let ea = RcEndpoint {
        gid: ctx.gid(),
        qpn: a.qpn(),
        psn: Psn::new(0x10),
    };
    let eb = RcEndpoint {
        gid: ctx.gid(),
        qpn: b.qpn(),
        psn: b_psn,
    };
    a.connect_rc(&ea, &eb, 1024).unwrap();
    b.connect_rc(&eb, &ea, 1024).unwrap();
    (a, b)
}

fn poll_all(cq: &Cq) -> Vec<Wc> {
    let mut wc = [Wc::default(); 16];
    let n = cq.poll(&mut wc).unwrap();
    wc[..n].to_vec()
}

fn write_wr<'a>(r: &Rig, sge: &'a [doorbell_verbs::Sge], flags: SendFlags) -> SendWr<'a> {
    SendWr {
        wr_id: 7,
        sg_list: sge,
        opcode: WrOpcode::RdmaWrite(RemoteAddr {
            addr: r.mr.addr() + 4096,
            rkey: r.mr.rkey(),
        }),
        flags,
        ud: None,
    }
}

#[test]
fn a_write_completes_before_post_send_returns() {
    let r = rig();
    r.mr.write(0, b"loopback").unwrap();
    let sge = [r.mr.sge(0, 8).unwrap()];
    r.a.post_send(&[write_wr(&r, &sge, SendFlags::SIGNALED)])
        .unwrap();
    // Synchronous: the WRITE, its ACK and the CQE all happened inside the
    // doorbell's MMIO store.
    let wc = poll_all(&r.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].status, wc[0].wr_id), (WcStatus::Success, 7));
    let mut got = [0u8; 8];
    r.mr.read(4096, &mut got).unwrap();
    assert_eq!(&got, b"loopback");
    assert_eq!(r.link.dropped_frames(), 0);
}

#[test]
fn one_post_is_one_doorbell_one_wqe_read_one_payload_read_one_cqe() {
    let r = rig();
    let sge = [r.mr.sge(0, 8).unwrap()];
    // A postlist of two, so the provider rings a plain doorbell (a single
    // small WR would go by BlueFlame and need no WQE read).
    let wr = write_wr(&r, &sge, SendFlags::SIGNALED);
    let (before, _) = r.link.counters(Some(r.a.qpn()));
    r.a.post_send(&[wr, wr]).unwrap();
    let (after, _) = r.link.counters(Some(r.a.qpn()));
    let d = after.since(&before);
    assert_eq!(d.mmio_writes, 1, "one doorbell for the postlist");
    assert_eq!(d.mmio_bytes, 8);
    assert_eq!(d.reads(DmaPurpose::SendWqe), 1, "both WQEs in one read");
    assert_eq!(d.reads(DmaPurpose::Payload), 2);
    assert_eq!(d.writes(DmaPurpose::Cqe), 2);
    assert_eq!(poll_all(&r.cq).len(), 2);
}

#[test]
fn a_single_small_inline_write_goes_by_blueflame_with_no_dma_read() {
    let r = rig();
    r.mr.write(0, b"bf").unwrap();
    let sge = [r.mr.sge(0, 2).unwrap()];
    let (before, _) = r.link.counters(Some(r.a.qpn()));
    r.a.post_send(&[write_wr(&r, &sge, SendFlags::SIGNALED | SendFlags::INLINE)])
        .unwrap();
    let (after, _) = r.link.counters(Some(r.a.qpn()));
    let d = after.since(&before);
    assert_eq!(d.mmio_writes, 1);
    assert_eq!(
        d.mmio_bytes, 64,
        "the whole WQE in one write-combined chunk"
    );
    assert_eq!(
        d.reads(DmaPurpose::SendWqe) + d.reads(DmaPurpose::Payload),
        0
    );
    assert_eq!(poll_all(&r.cq).len(), 1);
}

#[test]
fn rnr_retries_run_on_the_virtual_clock() {
    let r = rig();
    r.mr.write(0, b"hello").unwrap();
    let sge = [r.mr.sge(0, 5).unwrap()];
    r.a.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
    // No receive posted at B: an RNR NAK, and A waits the peer's RNR timer
    // (code 12: 640 µs) before it sends again.
    let (_, nic) = r.link.counters(None);
    assert_eq!((nic.rnr_nak_sent, nic.rnr_nak_retry_err), (1, 1));
    assert!(poll_all(&r.cq).is_empty());
    let due = r.link.next_deadline().expect("the RNR wait is a timer");
    assert_eq!(due.since(r.link.now()), Duration::from_us(640));
    // Just before the wait is over nothing has happened.
    r.link.advance(Duration::from_us(639));
    assert_eq!(r.link.counters(None).1.rnr_nak_sent, 1);
    // Post the receive; when the wait is over the retry lands in it.
    let rsge = [r.mr.sge(2048, 64).unwrap()];
    r.b.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &rsge,
    }])
    .unwrap();
    r.link.advance(Duration::from_us(1));
    let wc = poll_all(&r.cq);
    let mut ids: Vec<_> = wc.iter().map(|w| (w.wr_id, w.is_ok())).collect();
    ids.sort();
    assert_eq!(ids, [(1, true), (2, true)]);
    let mut got = [0u8; 5];
    r.mr.read(2048, &mut got).unwrap();
    assert_eq!(&got, b"hello");
}

#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<(&'static str, PostReport)>>);

impl PostObserver for Recorder {
    fn before_ring(&self, r: &PostReport) {
        self.0.lock().unwrap().push(("before", *r));
    }
    fn after_ring(&self, r: &PostReport) {
        self.0.lock().unwrap().push(("after", *r));
    }
}

#[test]
fn the_provider_reports_what_each_post_wrote_and_how_it_rang() {
    let r = rig();
    let rec = Arc::new(Recorder::default());
    r.ctx.set_post_observer(Some(rec.clone()));
    let sge = [r.mr.sge(0, 8).unwrap()];
    let inline = write_wr(&r, &sge, SendFlags::SIGNALED | SendFlags::INLINE);
    // A postlist of two inline WRITEs: ctrl + raddr + inline each.
    r.a.post_send(&[inline, inline]).unwrap();
    // One WRITE by pointer, alone: ctrl + raddr + data, by BlueFlame too
    // (MLX5_POST_SEND_PREFER_BF is on by default).
    r.a.post_send(&[write_wr(&r, &sge, SendFlags::SIGNALED)])
        .unwrap();
    // One inline WRITE alone: BlueFlame, one 64-byte chunk.
    r.a.post_send(&[inline]).unwrap();
    let log = rec.0.lock().unwrap().clone();
    let order: Vec<_> = log.iter().map(|(w, _)| *w).collect();
    assert_eq!(
        order,
        ["before", "after", "before", "after", "before", "after"]
    );
    let reports: Vec<PostReport> = log.iter().skip(1).step_by(2).map(|(_, r)| *r).collect();
    let facts: Vec<_> = reports
        .iter()
        .map(|p| (p.wqes, p.segments, p.inline_bytes, p.inline_chunks, p.ring))
        .collect();
    assert_eq!(
        facts,
        [
            (2, 4, 16, 2, Ring::Doorbell),
            (1, 2, 0, 0, Ring::BlueFlame { chunks: 1 }),
            (1, 2, 8, 1, Ring::BlueFlame { chunks: 1 }),
        ]
    );
    let p = reports[0];
    assert_eq!(
        (p.qpn, p.bfreg, p.locked),
        (r.a.qpn(), r.a.bfreg_index(), false)
    );
    assert_eq!(poll_all(&r.cq).len(), 4);
}

#[test]
fn a_region_over_a_callers_vector_gives_it_back_with_what_the_nic_wrote() {
    let r = rig();
    let pd = r.mr.pd().clone();
    let target = pd
        .reg_mr_buffer(vec![0u8; 64], Access(FULL))
        .map_err(|(e, _)| e)
        .unwrap();
    r.mr.write(0, b"into the vector").unwrap();
    let sge = [r.mr.sge(0, 15).unwrap()];
    r.a.post_send(&[SendWr {
        wr_id: 9,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite(RemoteAddr {
            addr: target.addr() + 8,
            rkey: target.rkey(),
        }),
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
    assert!(poll_all(&r.cq)[0].is_ok());
    // A clone keeps the registration alive: the buffer cannot come back yet.
    let other = target.clone();
    let target = target.into_buffer().unwrap_err();
    drop(other);
    let v = target.into_buffer().unwrap().expect("an adopted buffer");
    assert_eq!(v.len(), 64);
    assert_eq!(&v[8..23], b"into the vector");
    assert_eq!(&v[..8], &[0; 8]);
    // An allocated region has no buffer to give.
    assert_eq!(
        pd.reg_mr(8, Access(0)).unwrap().into_buffer().unwrap(),
        None
    );
    // A zero-length vector is refused and returned.
    let (e, back) = pd.reg_mr_buffer(Vec::new(), Access(0)).unwrap_err();
    assert!(matches!(e, doorbell_verbs::VerbsError::InvalidArgument(_)));
    assert!(back.is_empty());
}

#[test]
fn memory_the_host_did_not_hand_out_cannot_be_registered() {
    let r = rig();
    let pd = r.mr.pd().clone();
    let outside = r.mr.addr() + (1 << 30);
    assert!(matches!(
        pd.reg_mr_at(outside, 4096, Access(FULL)),
        Err(doorbell_verbs::VerbsError::Driver(_))
    ));
    // Inside an existing region it can: a second key over the same bytes.
    let second = pd.reg_mr_at(r.mr.addr(), 4096, Access(FULL)).unwrap();
    assert_ne!(second.lkey(), r.mr.lkey());
    second.write(0, b"shared").unwrap();
    let mut got = [0u8; 6];
    r.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"shared");
}

#[test]
fn a_failing_wr_is_named_and_those_before_it_are_posted() {
    let r = rig();
    let one = [r.mr.sge(0, 8).unwrap()];
    // One SGE more than each queue's real limit (mlx5 may grant more than
    // asked).
    let sges = |n: u32| -> Vec<_> {
        (0..n)
            .map(|i| r.mr.sge(u64::from(i) * 8, 8).unwrap())
            .collect()
    };
    let too_many = sges(r.a.caps().max_send_sge + 1);
    let good = write_wr(&r, &one, SendFlags::SIGNALED);
    let bad = write_wr(&r, &too_many, SendFlags::SIGNALED);
    let e = r.a.post_send_list(&[good, bad, good]).unwrap_err();
    assert_eq!(e.index, 1);
    assert_eq!(e.error.errno(), libc::EINVAL, "more SGEs than max_send_sge");
    assert_eq!(
        poll_all(&r.cq).len(),
        1,
        "only the WR before the bad one ran"
    );
    let rgood = RecvWr {
        wr_id: 1,
        sg_list: &one,
    };
    let many = sges(r.b.caps().max_recv_sge + 1);
    let rbad = RecvWr {
        wr_id: 2,
        sg_list: &many,
    };
    let e = r.b.post_recv_list(&[rgood, rgood, rbad]).unwrap_err();
    assert_eq!(e.index, 2);
}

#[test]
fn a_qp_cannot_complete_into_a_cq_of_another_context() {
    let r = rig();
    let other = Context::open(r.link.clone()).unwrap();
    let pd = other.alloc_pd().unwrap();
    let e = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: r.cq.clone(),
            recv_cq: r.cq.clone(),
            cap: QpCaps::default(),
            sq_sig_all: false,
            srq: None,
        })
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
}
