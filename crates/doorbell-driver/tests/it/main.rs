//! The slow path on its own, against one NIC on a synchronous loopback link:
//! what alloc_ucontext answers, which pages it pins and unpins, and that a
//! failed create leaves nothing behind.
#![allow(missing_docs, unreachable_pub)]

mod dyn_uar;

use std::sync::Arc;

use doorbell_driver::{
    AllocUcontextReq, CreateQpReq, CreateSrqReq, DeviceLink, DriverError, Ucontext, gross_index,
};
use doorbell_hif::{Access, CmdError, ObjKind, QpType};
use doorbell_host::{MemError, PAGE_SIZE};
use doorbell_rt::LoopbackLink;
use doorbell_types::Cqn;

const DEFAULT_REQ: AllocUcontextReq = AllocUcontextReq {
    total_num_bfregs: 16,
    num_low_latency_bfregs: 4,
};

fn ucontext() -> (Arc<LoopbackLink>, Ucontext) {
    let link = Arc::new(LoopbackLink::new("loop0", [10, 0, 0, 9]));
    let uc = Ucontext::alloc(link.clone(), DEFAULT_REQ).unwrap();
    (link, uc)
}

#[test]
fn alloc_ucontext_answers_the_seed_values() {
    let (_, uc) = ucontext();
    let r = uc.resp();
    assert_eq!(r.tot_bfregs, 16);
    assert_eq!(r.num_dyn_bfregs, 1024);
    assert_eq!(r.log_uar_size, 12);
    assert_eq!(r.cache_line_size, 64);
    assert_eq!(r.max_sq_desc_sz, 1024);
    assert_eq!(r.max_send_wqebb, 32768);
    assert_eq!(r.qp_tab_size, 262_144);
    assert_eq!(r.bf_reg_size, 512);
    assert_eq!(uc.uar_pages().len(), 8, "16 bfregs, 2 usable per UAR");
}

#[test]
fn a_bad_bfreg_request_is_refused_and_allocates_no_uar() {
    let link = Arc::new(LoopbackLink::new("loop0", [10, 0, 0, 9]));
    let bad = AllocUcontextReq {
        total_num_bfregs: 16,
        num_low_latency_bfregs: 16,
    };
    assert!(matches!(
        Ucontext::alloc(link.clone(), bad),
        Err(DriverError::Bfreg(_))
    ));
    // The first UAR a good context gets is still the first a context on a
    // fresh link gets (the kernel's own EQ UAR comes before both).
    let uc = Ucontext::alloc(link, DEFAULT_REQ).unwrap();
    let fresh = Arc::new(LoopbackLink::new("loop1", [10, 0, 0, 8]));
    let control = Ucontext::alloc(fresh, DEFAULT_REQ).unwrap();
    assert_eq!(uc.uar_pages()[0], control.uar_pages()[0]);
}

#[test]
fn reg_mr_pins_the_range_and_dereg_releases_it() {
    let (link, uc) = ucontext();
    let mem = link.memory();
    let pd = uc.alloc_pd().unwrap();
    let buf = mem.alloc(3 * PAGE_SIZE).unwrap();
    let key = uc
        .reg_mr(pd, buf, 3 * PAGE_SIZE, Access(Access::LOCAL_WRITE))
        .unwrap();
    assert_eq!(mem.free(buf), Err(MemError::Pinned(buf, 1)));
    // A PD with an MR cannot go.
    assert_eq!(
        uc.dealloc_pd(pd),
        Err(DriverError::Command(CmdError::Busy {
            kind: ObjKind::Pd,
            id: pd.get()
        }))
    );
    uc.dereg_mr(key).unwrap();
    assert_eq!(
        uc.dereg_mr(key),
        Err(DriverError::NoSuchObject(key.raw())),
        "a second dereg names the key"
    );
    mem.free(buf).unwrap();
    uc.dealloc_pd(pd).unwrap();
}

#[test]
fn doorbell_record_pages_are_pinned_once_and_counted() {
    let (link, uc) = ucontext();
    let mem = link.memory();
    let page = mem.alloc(PAGE_SIZE).unwrap();
    let (b1, b2) = (mem.alloc(64 * 8).unwrap(), mem.alloc(64 * 8).unwrap());
    let c1 = uc.create_cq(3, b1, page).unwrap();
    let c2 = uc.create_cq(3, b2, page.checked_add(64).unwrap()).unwrap();
    assert_eq!(uc.db_pages(), vec![(page, 2)]);
    uc.destroy_cq(c1).unwrap();
    assert_eq!(uc.db_pages(), vec![(page, 1)]);
    uc.destroy_cq(c2).unwrap();
    assert!(uc.db_pages().is_empty());
    // Nothing is pinned any more: every buffer can be freed.
    for a in [page, b1, b2] {
        mem.free(a).unwrap();
    }
}

#[test]
fn a_create_qp_the_device_refuses_unpins_and_frees_its_bfreg() {
    let (link, uc) = ucontext();
    let mem = link.memory();
    let pd = uc.alloc_pd().unwrap();
    let db = mem.alloc(PAGE_SIZE).unwrap();
    let buf = mem.alloc(PAGE_SIZE).unwrap();
    let req = CreateQpReq {
        qp_type: QpType::Rc,
        pd,
        send_cq: Cqn::new(0x77),
        recv_cq: Cqn::new(0x77),
        buf_addr: buf,
        buf_len: PAGE_SIZE,
        log_sq_size: 4,
        log_rq_size: 4,
        log_rq_stride: 0,
        db_addr: db,
        srq: None,
        dyn_bfreg: None,
        gsi: false,
        user_index: 0,
    };
    assert_eq!(
        uc.create_qp(req),
        Err(DriverError::Command(CmdError::NoSuchObject {
            kind: ObjKind::Cq,
            id: 0x77
        }))
    );
    assert!(uc.db_pages().is_empty());
    mem.free(buf).unwrap();
    // The bfreg the failed QP took is free again: the next QP gets the
    // first low-latency bfreg, as the first QP of a context does (net
    // bfreg 12 of 16: the last 4 are the low-latency ones).
    let cq_buf = mem.alloc(64 * 16).unwrap();
    let cq = uc.create_cq(4, cq_buf, db).unwrap();
    let buf = mem.alloc(PAGE_SIZE).unwrap();
    let ok = uc
        .create_qp(CreateQpReq {
            send_cq: cq,
            recv_cq: cq,
            buf_addr: buf,
            ..req
        })
        .unwrap();
    assert_eq!(ok.bfreg_index, gross_index(12));
}

#[test]
fn an_srq_in_use_is_not_destroyed_and_its_pins_go_with_it() {
    let (link, uc) = ucontext();
    let mem = link.memory();
    let pd = uc.alloc_pd().unwrap();
    let db = mem.alloc(PAGE_SIZE).unwrap();
    let ring = mem.alloc(PAGE_SIZE).unwrap();
    let srq = uc
        .create_srq(CreateSrqReq {
            pd,
            buf_addr: ring,
            buf_len: PAGE_SIZE,
            log_size: 4,
            log_stride: 1,
            db_addr: db,
        })
        .unwrap();
    assert_eq!(uc.query_srq(srq), Ok(0));
    uc.modify_srq(srq, 3).unwrap();
    assert_eq!(uc.query_srq(srq), Ok(3));
    // A limit as large as the ring is refused: one WQE is the list's end.
    assert!(matches!(
        uc.modify_srq(srq, 16),
        Err(DriverError::Command(CmdError::BadParam { .. }))
    ));
    let cq_buf = mem.alloc(64 * 16).unwrap();
    let cq = uc.create_cq(4, cq_buf, db).unwrap();
    let buf = mem.alloc(PAGE_SIZE).unwrap();
    let qp = uc
        .create_qp(CreateQpReq {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            buf_addr: buf,
            buf_len: PAGE_SIZE,
            log_sq_size: 4,
            log_rq_size: 0,
            log_rq_stride: 0,
            db_addr: db,
            srq: Some(srq),
            dyn_bfreg: None,
            gsi: false,
            user_index: 0,
        })
        .unwrap();
    assert_eq!(
        uc.destroy_srq(srq),
        Err(DriverError::Command(CmdError::Busy {
            kind: ObjKind::Srq,
            id: srq.get()
        }))
    );
    uc.destroy_qp(qp.qpn).unwrap();
    uc.destroy_srq(srq).unwrap();
    uc.destroy_cq(cq).unwrap();
    assert!(
        uc.db_pages().is_empty(),
        "every doorbell record is unmapped"
    );
    assert_eq!(
        uc.destroy_srq(srq),
        Err(DriverError::NoSuchObject(srq.get()))
    );
}
