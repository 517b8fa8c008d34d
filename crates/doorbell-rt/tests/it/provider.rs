//! What the provider puts on the bus and in host memory, seen from outside:
//! MMIO offsets and contents (doorbell vs BlueFlame, alternating buffers),
//! no MMIO for receives, shared doorbell-record pages, and the context's
//! alloc_ucontext values.

use std::sync::{Arc, Mutex};

use doorbell_hif::{CmdError, CmdOut, Command, DeviceLink, NicEvent};
use doorbell_host::{HostMemory, Mmio, RecordDoorbell};
use doorbell_layout::uar::{BF_BUF_SIZE, SendDoorbell};
use doorbell_layout::wqe::WqeOpcode;
use doorbell_pcie::LinkConfig;
use doorbell_rt::{Fabric, LiveNic};
use doorbell_types::{Psn, UarIndex};
use doorbell_verbs::{
    Access, Context, ProviderConfig, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr, RemoteAddr,
    SendFlags, SendWr, WrOpcode,
};

use crate::common::{FULL, wait};

type Log = Arc<Mutex<Vec<(UarIndex, u32, Vec<u8>)>>>;

/// A device link whose MMIO path records every store before passing it on.
struct Tap {
    nic: Arc<LiveNic>,
    mmio: Arc<dyn Mmio>,
}

struct TapMmio {
    inner: Arc<dyn Mmio>,
    log: Log,
}

impl Mmio for TapMmio {
    fn mmio_write(&self, uar: UarIndex, offset: u32, data: &[u8]) {
        self.log.lock().unwrap().push((uar, offset, data.to_vec()));
        self.inner.mmio_write(uar, offset, data);
    }

    fn record_doorbell(&self, uar: UarIndex, db: RecordDoorbell) {
        self.inner.record_doorbell(uar, db);
    }
}

impl DeviceLink for Tap {
    fn name(&self) -> &str {
        self.nic.name()
    }
    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError> {
        self.nic.exec(cmd)
    }
    fn memory(&self) -> &Arc<dyn HostMemory> {
        self.nic.memory()
    }
    fn mmio(&self) -> &Arc<dyn Mmio> {
        &self.mmio
    }
    fn gid(&self) -> [u8; 16] {
        self.nic.gid()
    }
    fn next_event(&self, timeout: doorbell_types::Duration) -> Option<NicEvent> {
        self.nic.next_event(timeout)
    }
}

struct Rig {
    log: Log,
    ctx: Context,
    qp: doorbell_verbs::Qp,
    cq: doorbell_verbs::Cq,
    mr: doorbell_verbs::Mr,
    remote: RemoteAddr,
    sge8: [doorbell_verbs::Sge; 1],
    sge64: [doorbell_verbs::Sge; 1],
    _keep: (
        Arc<LiveNic>,
        Context,
        doorbell_verbs::Qp,
        doorbell_verbs::Mr,
        Fabric,
    ),
}

fn rig(cfg: ProviderConfig) -> Rig {
    let fabric = Fabric::new();
    let a =
        Arc::new(LiveNic::start("tap-a", &fabric, [127, 0, 2, 2], LinkConfig::default()).unwrap());
    let b =
        Arc::new(LiveNic::start("tap-b", &fabric, [127, 0, 2, 3], LinkConfig::default()).unwrap());
    let log: Log = Arc::default();
    let tap = Arc::new(Tap {
        mmio: Arc::new(TapMmio {
            inner: a.mmio().clone(),
            log: log.clone(),
        }),
        nic: a,
    });
    let ctx = Context::with_config(tap, cfg.clone()).unwrap();
    let ctx_b = Context::with_config(b.clone(), cfg).unwrap();
    let cap = QpCaps {
        max_send_wr: 32,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mk = |ctx: &Context| {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                cap,
                sq_sig_all: true,
                srq: None,
            })
            .unwrap();
        let mr = pd.reg_mr(4096, Access(FULL)).unwrap();
        (cq, qp, mr)
    };
    let (cq, qp, mr) = mk(&ctx);
    let (_cqb, qpb, mrb) = mk(&ctx_b);
    let ea = RcEndpoint {
        gid: ctx.gid(),
        qpn: qp.qpn(),
        psn: Psn::new(1),
    };
    let eb = RcEndpoint {
        gid: ctx_b.gid(),
        qpn: qpb.qpn(),
        psn: Psn::new(2),
    };
    qp.connect_rc(&ea, &eb, 1024).unwrap();
    qpb.connect_rc(&eb, &ea, 1024).unwrap();
    let remote = RemoteAddr {
        addr: mrb.addr(),
        rkey: mrb.rkey(),
    };
    log.lock().unwrap().clear();
    let sge8 = [mr.sge(0, 8).unwrap()];
    let sge64 = [mr.sge(0, 64).unwrap()];
    Rig {
        log,
        ctx,
        qp,
        cq,
        mr,
        remote,
        sge8,
        sge64,
        _keep: (b, ctx_b, qpb, mrb, fabric),
    }
}

fn write(r: &Rig, len: u32, flags: SendFlags) -> SendWr<'_> {
    let sg_list = if len == 8 { &r.sge8[..] } else { &r.sge64[..] };
    assert_eq!(sg_list[0].length, len);
    SendWr {
        wr_id: 0,
        sg_list,
        opcode: WrOpcode::RdmaWrite(r.remote),
        flags,
        ud: None,
    }
}

#[test]
fn blueflame_copies_the_wqe_and_alternates_buffers() {
    let r = rig(ProviderConfig::default());
    let place = r.ctx.placement(&r.qp);
    assert!(place.blueflame);
    for i in 0..4u16 {
        r.qp.post_send(&[write(&r, 8, SendFlags::default())])
            .unwrap();
        wait(&r.cq, 1);
        let log = r.log.lock().unwrap().clone();
        assert_eq!(log.len(), 1, "one 64-byte chunk for a 48-byte WQE");
        let (uar, off, data) = &log[0];
        assert_eq!(*uar, r.ctx.uar_pages()[place.uar_page as usize]);
        let half = if i % 2 == 0 { 0 } else { BF_BUF_SIZE as u32 };
        assert_eq!(
            *off,
            place.uar_offset + half,
            "post {i} uses the other buffer"
        );
        assert_eq!(data.len(), 64);
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&data[..8]);
        let db = SendDoorbell::parse(&prefix);
        assert_eq!(
            (db.qpn, db.wqe_index, db.opcode, db.ds),
            (r.qp.qpn().get(), i, u8::from(WqeOpcode::RdmaWrite), 3)
        );
        r.log.lock().unwrap().clear();
    }
}

#[test]
fn a_wqe_larger_than_a_blueflame_buffer_rings_the_doorbell() {
    // 64 bytes inline: 16 + 16 + 80 = 112 bytes, 7 DS: still BlueFlame (2 chunks).
    let r = rig(ProviderConfig::default());
    r.qp.post_send(&[write(&r, 64, SendFlags::INLINE)]).unwrap();
    wait(&r.cq, 1);
    let log = r.log.lock().unwrap().clone();
    assert_eq!(
        log.iter()
            .map(|(_, o, d)| (*o - log[0].1, d.len()))
            .collect::<Vec<_>>(),
        vec![(0, 64), (64, 64)]
    );
}

#[test]
fn postlist_and_shut_up_bf_ring_eight_bytes() {
    let r = rig(ProviderConfig::default());
    let place = r.ctx.placement(&r.qp);
    let list = [
        write(&r, 8, SendFlags::default()),
        write(&r, 8, SendFlags::default()),
        write(&r, 8, SendFlags::default()),
    ];
    r.qp.post_send(&list).unwrap();
    wait(&r.cq, 3);
    let log = r.log.lock().unwrap().clone();
    assert_eq!(log.len(), 1, "a postlist rings once");
    assert_eq!(log[0].2.len(), 8);
    let db = SendDoorbell::parse(&log[0].2[..8].try_into().unwrap());
    assert_eq!(db.wqe_index, 2, "the doorbell names the last WQE");
    assert_eq!(log[0].1, place.uar_offset);

    let r = rig(ProviderConfig {
        shut_up_bf: true,
        ..Default::default()
    });
    let place = r.ctx.placement(&r.qp);
    for i in 0..2 {
        r.qp.post_send(&[write(&r, 8, SendFlags::INLINE)]).unwrap();
        wait(&r.cq, 1);
        let log = std::mem::take(&mut *r.log.lock().unwrap());
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].2.len(), 8, "MLX5_SHUT_UP_BF: never BlueFlame");
        // Plain doorbells alternate buffers too.
        assert_eq!(
            log[0].1,
            place.uar_offset + if i == 0 { 0 } else { BF_BUF_SIZE as u32 }
        );
    }
}

#[test]
fn prefer_bf_off_keeps_blueflame_for_inline_only() {
    let r = rig(ProviderConfig {
        prefer_bf: false,
        ..Default::default()
    });
    r.qp.post_send(&[write(&r, 8, SendFlags::default())])
        .unwrap();
    wait(&r.cq, 1);
    assert_eq!(std::mem::take(&mut *r.log.lock().unwrap())[0].2.len(), 8);
    r.qp.post_send(&[write(&r, 8, SendFlags::INLINE)]).unwrap();
    wait(&r.cq, 1);
    assert_eq!(std::mem::take(&mut *r.log.lock().unwrap())[0].2.len(), 64);
}

#[test]
fn receives_and_polling_make_no_mmio() {
    let r = rig(ProviderConfig::default());
    let sge = r.mr.sge(0, 64).unwrap();
    for i in 0..8 {
        r.qp.post_recv(&[RecvWr {
            wr_id: i,
            sg_list: &[sge],
        }])
        .unwrap();
    }
    let mut wc = [wait_placeholder(); 4];
    let _ = r.cq.poll(&mut wc).unwrap();
    assert!(r.log.lock().unwrap().is_empty());
}

fn wait_placeholder() -> doorbell_verbs::Wc {
    doorbell_verbs::Wc::default()
}

#[test]
fn doorbell_records_share_pages() {
    let r = rig(ProviderConfig::default());
    // The rig made one CQ and one QP; two more of each share the same page.
    let pd = r.ctx.alloc_pd().unwrap();
    let cqs: Vec<_> = (0..2).map(|_| r.ctx.create_cq(4).unwrap()).collect();
    let qps: Vec<_> = (0..2)
        .map(|_| {
            pd.create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cqs[0].clone(),
                recv_cq: cqs[1].clone(),
                cap: QpCaps::default(),
                sq_sig_all: false,
                srq: None,
            })
            .unwrap()
        })
        .collect();
    let pages = r.ctx.doorbell_record_pages();
    assert_eq!(pages.len(), 1, "{pages:?}");
    assert_eq!(pages[0].1, 6);
    drop(qps);
    drop(cqs);
    assert_eq!(r.ctx.doorbell_record_pages()[0].1, 2);
}

#[test]
fn the_context_reports_the_seed_values() {
    let r = rig(ProviderConfig::default());
    let attr = r.ctx.query_device();
    let u = attr.ucontext;
    assert_eq!(
        (
            u.tot_bfregs,
            u.num_dyn_bfregs,
            u.log_uar_size,
            u.cache_line_size,
            u.max_sq_desc_sz,
            u.max_send_wqebb,
            u.qp_tab_size,
            u.bf_reg_size
        ),
        (16, 1024, 12, 64, 1024, 32768, 262_144, 512)
    );
    assert_eq!(
        r.ctx.uar_pages().len(),
        8,
        "16 static bfregs take 8 UARs, all mapped at open"
    );
}

#[test]
fn a_postlist_that_fails_half_way_still_rings_for_what_it_posted() {
    // The second WR's inline data is too long: it fails after its segments
    // were built, and must not clobber the first WQE the doorbell carries.
    let r = rig(ProviderConfig::default());
    let long = [r.mr.sge(0, 200).unwrap()];
    let bad = SendWr {
        wr_id: 2,
        sg_list: &long,
        opcode: WrOpcode::RdmaWrite(r.remote),
        flags: SendFlags::INLINE,
        ud: None,
    };
    let good = SendWr {
        wr_id: 1,
        ..write(&r, 8, SendFlags::default())
    };
    let err = r.qp.post_send(&[good, bad]).unwrap_err();
    assert!(
        matches!(err, doorbell_verbs::VerbsError::InlineTooLong { .. }),
        "{err:?}"
    );
    let wc = wait(&r.cq, 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (1, doorbell_verbs::WcStatus::Success)
    );
    let log = r.log.lock().unwrap().clone();
    assert_eq!(log.len(), 1, "one doorbell for the one WR posted");
    let db = SendDoorbell::parse(&log[0].2[..8].try_into().unwrap());
    assert_eq!((db.qpn, db.wqe_index, db.ds), (r.qp.qpn().get(), 0, 3));
}
