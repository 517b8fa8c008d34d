//! Thread domains and parent domains: a QP of a parent domain with a thread
//! domain rings a dynamic register of its own, with no lock, and its data
//! still flows.

use std::sync::Arc;

use doorbell_driver::INVALID_BFREG;
use doorbell_rt::LoopbackLink;
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Pd, ProviderConfig, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr,
    RemoteAddr, Ring, SendFlags, SendWr, VerbsError, WcStatus, WrOpcode,
};

use crate::{FULL, Recorder, poll_all};

fn open(cfg: ProviderConfig) -> (Arc<LoopbackLink>, Context) {
    let link = Arc::new(LoopbackLink::new("loop0", [10, 0, 0, 9]));
    let ctx = Context::with_config(link.clone(), cfg).unwrap();
    (link, ctx)
}

fn qp(pd: &Pd, cq: &Cq) -> Qp {
    pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        sq_sig_all: false,
        srq: None,
    })
    .unwrap()
}

fn connect(ctx: &Context, a: &Qp, b: &Qp) {
    let ea = RcEndpoint {
        gid: ctx.gid(),
        qpn: a.qpn(),
        psn: Psn::new(0x100),
    };
    let eb = RcEndpoint {
        gid: ctx.gid(),
        qpn: b.qpn(),
        psn: Psn::new(0x200),
    };
    a.connect_rc(&ea, &eb, 1024).unwrap();
    b.connect_rc(&eb, &ea, 1024).unwrap();
}

#[test]
fn a_td_qp_rings_a_register_no_other_qp_uses_with_no_lock_and_data_flows() {
    let (link, ctx) = open(ProviderConfig::default());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    // Twenty static QPs: more than 16 bfregs, so the medium ones are shared.
    let statics: Vec<Qp> = (0..20).map(|_| qp(&pd, &cq)).collect();
    let (td_a, td_b) = (ctx.alloc_td().unwrap(), ctx.alloc_td().unwrap());
    let pa = pd.parent_domain(Some(&td_a)).unwrap();
    let pb = pd.parent_domain(Some(&td_b)).unwrap();
    assert_eq!(pa.pdn(), pd.pdn(), "a parent domain shares the PD number");
    let (a, b) = (qp(&pa, &cq), qp(&pb, &cq));
    let place = |q: &Qp| ctx.placement(q);
    let pa_place = place(&a);
    assert_eq!(a.bfreg_index(), INVALID_BFREG);
    assert_eq!(pa_place.dyn_bfreg, Some(td_a.dyn_bfreg_index()));
    assert!(!pa_place.lock, "a thread domain's register takes no lock");
    assert!(pa_place.blueflame);
    assert!(
        pa_place.uar_page >= ctx.uar_pages().len() as u32,
        "a dynamic UAR, after the static ones"
    );
    let taken: Vec<(u32, u32)> = statics
        .iter()
        .chain([&b])
        .map(|q| (place(q).uar_page, place(q).uar_offset))
        .collect();
    assert!(
        !taken.contains(&(pa_place.uar_page, pa_place.uar_offset)),
        "no other QP rings it"
    );
    assert!(statics.iter().any(|q| place(q).lock), "the statics do lock");

    connect(&ctx, &a, &b);
    let rec = Arc::new(Recorder::default());
    ctx.set_post_observer(Some(rec.clone()));
    let mr = pa.reg_mr(8192, Access(FULL)).unwrap();
    mr.write(0, b"thread-domain").unwrap();
    // A WRITE by BlueFlame (single small inline WR), then a SEND.
    let sge = [mr.sge(0, 13).unwrap()];
    let write = SendWr {
        wr_id: 1,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite(RemoteAddr {
            addr: mr.addr() + 4096,
            rkey: mr.rkey(),
        }),
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ud: None,
    };
    a.post_send(&[write]).unwrap();
    let rsge = [mr.sge(6000, 13).unwrap()];
    b.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &rsge,
    }])
    .unwrap();
    let send = SendWr {
        wr_id: 2,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        ..write
    };
    a.post_send(&[send]).unwrap();
    let wc = poll_all(&cq);
    let ok: Vec<(u64, WcStatus)> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert!(ok.contains(&(1, WcStatus::Success)), "{ok:?}");
    assert!(ok.contains(&(2, WcStatus::Success)), "{ok:?}");
    assert!(ok.contains(&(9, WcStatus::Success)), "{ok:?}");
    let mut got = [0u8; 13];
    mr.read(4096, &mut got).unwrap();
    assert_eq!(&got, b"thread-domain");
    mr.read(6000, &mut got).unwrap();
    assert_eq!(&got, b"thread-domain");
    assert_eq!(link.dropped_frames(), 0);
    let reports = rec.0.lock().unwrap();
    assert!(
        reports.iter().all(|(_, r)| !r.locked),
        "no post took a lock"
    );
    assert!(
        reports
            .iter()
            .any(|(w, r)| *w == "after" && matches!(r.ring, Ring::BlueFlame { .. })),
        "BlueFlame works through a dynamic register"
    );
}

#[test]
fn two_tds_get_different_registers_and_a_freed_one_is_reused() {
    let (_, ctx) = open(ProviderConfig::default());
    // One UAR per page, two registers per UAR: page 0 holds 0 and 1.
    let t1 = ctx.alloc_td().unwrap();
    let t2 = ctx.alloc_td().unwrap();
    assert_eq!((t1.dyn_bfreg_index(), t2.dyn_bfreg_index()), (0, 1));
    assert_eq!(t1.uar(), t2.uar(), "two registers of one UAR");
    assert_eq!(ctx.free_dyn_bfregs(), 0);
    let uar1 = t1.uar();
    drop(t1);
    assert_eq!(ctx.free_dyn_bfregs(), 1);
    let t3 = ctx.alloc_td().unwrap();
    assert_eq!(t3.dyn_bfreg_index(), 0, "the freed register comes back");
    assert_eq!(t3.uar(), uar1);
    // None free: the next page is mapped.
    let t4 = ctx.alloc_td().unwrap();
    assert_eq!(t4.dyn_bfreg_index(), 2);
    assert_ne!(t4.uar(), uar1);
    assert_eq!(ctx.free_dyn_bfregs(), 1, "its sibling waits");
}

#[test]
fn dynamic_pages_run_out_with_enospc() {
    let (_, ctx) = open(ProviderConfig::default());
    // 1024 dynamic bfregs: 1024 thread domains, then no more.
    let tds: Vec<_> = (0..1024).map(|_| ctx.alloc_td().unwrap()).collect();
    let err = ctx.alloc_td().unwrap_err();
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    drop(tds);
    assert!(ctx.alloc_td().is_ok(), "freed registers serve again");
}

#[test]
fn parent_domains_hold_their_pd_and_td_and_free_no_pd_number() {
    let (_, ctx) = open(ProviderConfig::default());
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    assert!(!pd.is_shared() && !td.is_shared());
    let parent = pd.parent_domain(Some(&td)).unwrap();
    assert!(pd.is_shared(), "the base PD is busy");
    assert!(td.is_shared(), "the thread domain is busy (EBUSY)");
    assert!(parent.base().is_some() && parent.thread_domain().is_some());
    assert!(!parent.is_shared());
    let cq = ctx.create_cq(16).unwrap();
    let q = qp(&parent, &cq);
    assert!(parent.is_shared(), "a QP holds the parent domain");
    drop(q);
    drop(parent);
    assert!(!pd.is_shared() && !td.is_shared());
    // The PD number is still the base's: it takes regions and QPs.
    let mr = pd.reg_mr(64, Access(Access::LOCAL_WRITE)).unwrap();
    let q = qp(&pd, &cq);
    assert_eq!(
        ctx.placement(&q).dyn_bfreg,
        None,
        "a plain PD's QP is static"
    );
    drop((mr, q));
    // A parent domain without a thread domain uses the static bfregs.
    let plain = pd.parent_domain(None).unwrap();
    let q = qp(&plain, &cq);
    assert_ne!(q.bfreg_index(), INVALID_BFREG);
    assert!(ctx.placement(&q).dyn_bfreg.is_none());
}

#[test]
fn a_td_of_another_context_or_a_parent_of_a_parent_is_einval() {
    let (_, ctx) = open(ProviderConfig::default());
    let (_, other) = open(ProviderConfig::default());
    let pd = ctx.alloc_pd().unwrap();
    let foreign = other.alloc_td().unwrap();
    let err = pd.parent_domain(Some(&foreign)).unwrap_err();
    assert!(matches!(err, VerbsError::InvalidArgument(_)), "{err}");
    assert_eq!(err.errno(), libc::EINVAL);
    assert!(!foreign.is_shared(), "a refused parent holds nothing");
    let parent = pd.parent_domain(None).unwrap();
    assert_eq!(
        parent.parent_domain(None).unwrap_err().errno(),
        libc::EINVAL
    );
}

#[test]
fn blueflame_through_a_td_follows_shut_up_bf() {
    let cfg = ProviderConfig {
        shut_up_bf: true,
        ..ProviderConfig::default()
    };
    let (_, ctx) = open(cfg);
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    let parent = pd.parent_domain(Some(&td)).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let q = qp(&parent, &cq);
    let p = ctx.placement(&q);
    assert!(!p.blueflame && !p.lock);
    let rec = Arc::new(Recorder::default());
    ctx.set_post_observer(Some(rec.clone()));
    let peer = qp(&pd, &cq);
    connect(&ctx, &q, &peer);
    let mr = pd.reg_mr(4096, Access(FULL)).unwrap();
    let sge = [mr.sge(0, 8).unwrap()];
    q.post_send(&[SendWr {
        wr_id: 3,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite(RemoteAddr {
            addr: mr.addr() + 64,
            rkey: mr.rkey(),
        }),
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ud: None,
    }])
    .unwrap();
    let rings: Vec<Ring> = rec.0.lock().unwrap().iter().map(|(_, r)| r.ring).collect();
    assert_eq!(rings.last(), Some(&Ring::Doorbell));
    assert_eq!(poll_all(&cq)[0].status, WcStatus::Success);
}

/// An application's allocator over the link's host memory, recording calls.
struct Recording {
    mem: Arc<dyn doorbell_host::HostMemory>,
    defer: bool,
    calls: std::sync::Mutex<Vec<(&'static str, u64, u64)>>,
    given: std::sync::Mutex<Option<doorbell_types::HostAddr>>,
}

impl doorbell_verbs::BufferAllocator for Recording {
    fn alloc(
        &self,
        len: u64,
        align: u64,
        kind: doorbell_verbs::BufferKind,
    ) -> Result<Option<doorbell_types::HostAddr>, VerbsError> {
        assert_eq!(kind, doorbell_verbs::BufferKind::Qp);
        self.calls.lock().unwrap().push(("alloc", len, align));
        if self.defer {
            return Ok(None);
        }
        let a = self.mem.alloc(len).unwrap();
        // Not zeroed, as posix_memalign's is not: the provider clears it.
        self.mem.write(a, &vec![0xa5; len as usize]).unwrap();
        *self.given.lock().unwrap() = Some(a);
        Ok(Some(a))
    }

    fn free(&self, addr: doorbell_types::HostAddr, len: u64, _: doorbell_verbs::BufferKind) {
        self.calls.lock().unwrap().push(("free", len, addr.get()));
        self.mem.free(addr).unwrap();
    }
}

#[test]
fn a_parent_domains_allocator_gives_the_qp_buffer_and_takes_it_back() {
    use doorbell_hif::DeviceLink;
    let (link, ctx) = open(ProviderConfig::default());
    let rec = Arc::new(Recording {
        mem: link.memory().clone(),
        defer: false,
        calls: Default::default(),
        given: Default::default(),
    });
    let pd = ctx.alloc_pd().unwrap();
    let td = ctx.alloc_td().unwrap();
    let parent = pd.parent_domain_with(Some(&td), Some(rec.clone())).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let a = qp(&parent, &cq);
    let b = qp(&pd, &cq);
    let calls = rec.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one buffer for the QP of the parent domain");
    let (what, len, align) = calls[0];
    assert_eq!((what, len % 4096, align), ("alloc", 0, 4096));
    let given = rec.given.lock().unwrap().expect("an address was given");
    let mut bytes = vec![0xffu8; len as usize];
    link.memory().read(given, &mut bytes).unwrap();
    assert!(bytes.iter().all(|&b| b == 0), "the provider cleared it");
    // Its buffer works: WRITE through it, and a SEND into its receive queue.
    connect(&ctx, &a, &b);
    let mr = pd.reg_mr(4096, Access(FULL)).unwrap();
    mr.write(0, b"own buffer").unwrap();
    let sge = [mr.sge(0, 10).unwrap()];
    a.post_send(&[SendWr {
        wr_id: 5,
        sg_list: &sge,
        opcode: WrOpcode::RdmaWrite(RemoteAddr {
            addr: mr.addr() + 1024,
            rkey: mr.rkey(),
        }),
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
    let rsge = [mr.sge(2048, 10).unwrap()];
    a.post_recv(&[RecvWr {
        wr_id: 6,
        sg_list: &rsge,
    }])
    .unwrap();
    b.post_send(&[SendWr {
        wr_id: 7,
        sg_list: &sge,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 3, "{wc:?}");
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    let mut got = [0u8; 10];
    mr.read(1024, &mut got).unwrap();
    assert_eq!(&got, b"own buffer");
    mr.read(2048, &mut got).unwrap();
    assert_eq!(&got, b"own buffer");
    drop(a);
    let calls = rec.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[1].0, calls[1].1), ("free", len), "given back whole");
}

#[test]
fn an_allocator_may_defer_to_the_provider_or_refuse() {
    use doorbell_hif::DeviceLink;
    let (link, ctx) = open(ProviderConfig::default());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let deferring = Arc::new(Recording {
        mem: link.memory().clone(),
        defer: true,
        calls: Default::default(),
        given: Default::default(),
    });
    let parent = pd
        .parent_domain_with(None, Some(deferring.clone()))
        .unwrap();
    drop(qp(&parent, &cq));
    let calls: Vec<&str> = deferring
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(calls, vec!["alloc"], "asked once, nothing to give back");

    struct Refusing;
    impl doorbell_verbs::BufferAllocator for Refusing {
        fn alloc(
            &self,
            _: u64,
            _: u64,
            _: doorbell_verbs::BufferKind,
        ) -> Result<Option<doorbell_types::HostAddr>, VerbsError> {
            Err(VerbsError::NoMemory("test"))
        }
        fn free(&self, _: doorbell_types::HostAddr, _: u64, _: doorbell_verbs::BufferKind) {
            panic!("nothing was given");
        }
    }
    let refusing = pd
        .parent_domain_with(None, Some(Arc::new(Refusing)))
        .unwrap();
    let records = ctx.doorbell_record_pages();
    let err = refusing
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps::default(),
            sq_sig_all: false,
            srq: None,
        })
        .unwrap_err();
    assert_eq!(err.errno(), libc::ENOMEM);
    assert_eq!(ctx.doorbell_record_pages(), records, "nothing left behind");
}
