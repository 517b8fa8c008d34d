//! Dynamic UARs in the kernel's legacy mode: pages the provider maps one at
//! a time (MLX5_IB_MMAP_ALLOC_WC) and QPs that name a register on them
//! (MLX5_QP_FLAG_BFREG_INDEX).

use doorbell_driver::{CreateQpReq, DeviceLink, DriverError, INVALID_BFREG, Ucontext, gross_index};
use doorbell_hif::{CmdError, Command, ObjKind, QpType};
use doorbell_host::PAGE_SIZE;
use doorbell_types::{Cqn, Pdn};

use crate::ucontext;

/// A QP request over fresh buffers, on CQ `cq`.
fn qp_req(uc: &Ucontext, pd: Pdn, cq: Cqn, dyn_bfreg: Option<u32>) -> CreateQpReq {
    let mem = uc.link().memory();
    CreateQpReq {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        buf_addr: mem.alloc(PAGE_SIZE).unwrap(),
        buf_len: PAGE_SIZE,
        log_sq_size: 4,
        log_rq_size: 4,
        log_rq_stride: 0,
        db_addr: mem.alloc(PAGE_SIZE).unwrap(),
        srq: None,
        dyn_bfreg,
        gsi: false,
        user_index: 0,
    }
}

fn cq_of(uc: &Ucontext) -> Cqn {
    let mem = uc.link().memory();
    let buf = mem.alloc(64 * 16).unwrap();
    let db = mem.alloc(PAGE_SIZE).unwrap();
    uc.create_cq(4, buf, db).unwrap()
}

#[test]
fn a_dynamic_page_maps_once_and_only_inside_the_reservation() {
    let (_, uc) = ucontext();
    // 1024 dynamic bfregs, two per 4 KiB UAR: 512 pages.
    let first = uc.map_dyn_uar(0).unwrap();
    assert!(!uc.uar_pages().contains(&first), "a UAR of its own");
    assert_eq!(uc.dyn_uar(0), Some(first));
    assert_eq!(uc.map_dyn_uar(0), Err(DriverError::DynUarMapped(0)));
    assert_eq!(
        uc.map_dyn_uar(512),
        Err(DriverError::DynUarOutOfRange {
            page: 512,
            pages: 512
        })
    );
    let last = uc.map_dyn_uar(511).unwrap();
    assert_ne!(last, first);
    assert_eq!(uc.dyn_uar(1), None, "pages are mapped one by one");
}

#[test]
fn a_qp_on_a_dynamic_bfreg_takes_no_static_count() {
    let (_, uc) = ucontext();
    let pd = uc.alloc_pd().unwrap();
    let cq = cq_of(&uc);
    // A static QP first: it takes the first low-latency bfreg, 12.
    let stat = uc.create_qp(qp_req(&uc, pd, cq, None)).unwrap();
    assert_eq!(stat.bfreg_index, gross_index(12));
    uc.map_dyn_uar(0).unwrap();
    let dynamic = uc.create_qp(qp_req(&uc, pd, cq, Some(1))).unwrap();
    assert_eq!(dynamic.bfreg_index, INVALID_BFREG);
    let counts: Vec<u32> = (0..16).map(|n| uc.bfreg_count(n)).collect();
    let mut want = vec![0; 16];
    want[12] = 1;
    assert_eq!(counts, want, "only the static QP counts");
    uc.destroy_qp(dynamic.qpn).unwrap();
    assert_eq!(uc.bfreg_count(12), 1, "destroying it frees no static count");
    // The next static QP still finds 12 taken.
    let next = uc.create_qp(qp_req(&uc, pd, cq, None)).unwrap();
    assert_eq!(next.bfreg_index, gross_index(13));
}

#[test]
fn a_dynamic_bfreg_off_a_mapped_page_is_refused_and_leaves_no_pins() {
    let (_, uc) = ucontext();
    let pd = uc.alloc_pd().unwrap();
    let cq = cq_of(&uc);
    let pages_before = uc.db_pages();
    // Page 1 (bfregs 2 and 3) is not mapped; 1024 is past the reservation.
    for n in [2, 1024, u32::MAX >> 1] {
        assert_eq!(
            uc.create_qp(qp_req(&uc, pd, cq, Some(n))),
            Err(DriverError::DynBfregUnmapped(n))
        );
    }
    assert_eq!(uc.db_pages(), pages_before, "no doorbell page stays pinned");
    uc.map_dyn_uar(1).unwrap();
    let ok = uc.create_qp(qp_req(&uc, pd, cq, Some(3))).unwrap();
    assert_eq!(ok.bfreg_index, INVALID_BFREG);
}

#[test]
fn dynamic_uars_go_with_the_context() {
    let (link, uc) = ucontext();
    let a = uc.map_dyn_uar(0).unwrap();
    let b = uc.map_dyn_uar(7).unwrap();
    drop(uc);
    for u in [a, b] {
        assert_eq!(
            link.exec(Command::DeallocUar(u)),
            Err(CmdError::NoSuchObject {
                kind: ObjKind::Uar,
                id: u.get()
            }),
            "the context's drop deallocated it"
        );
    }
}
