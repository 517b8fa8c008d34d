//! Resources run out: a CQ that the consumer does not poll overruns, and
//! the object tables fill up to the caps the device reports.
//!
//! An mlx5 CQ never overwrites a CQE that has not been polled: on overrun
//! it goes to the error state (the CQ error event, syndrome CQ_OVERRUN)
//! and takes no more CQEs; the QP whose completion was lost goes to the
//! error state too, with a WQ catastrophic error (IBV_EVENT_QP_FATAL),
//! and so does every QP that completes into the CQ later.

use doorbell_device::{Nic, NicConfig};
use doorbell_hif::{
    Access, CmdError, CmdOut, Command, CqParams, MkeyParams, NicEvent, ObjKind, Param, QpParams,
    QpState, QpType,
};
use doorbell_layout::cqe::{CqeOpcode, Syndrome};
use doorbell_layout::wqe::WqeOpcode;
use doorbell_types::{Cqn, Pdn, UarIndex};
use doorbell_wire::{BthOpcode, ExtHeaders};

use crate::{LOCAL, NCQE, Rig, SQ_PSN, cqe_fields, peer_ack, rdma_wqe};

/// Posts WRITE number `i` (one WQEBB, signalled), lets it leave, and
/// answers it with its ACK: one send completion.
fn write_acked(rig: &mut Rig, i: u16) {
    let w = rdma_wqe(rig, i, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(i, &w);
    rig.ring(i, u8::from(WqeOpcode::RdmaWrite), 3);
    assert_eq!(rig.transmitted().len(), 1, "WRITE {i} left");
    let a = peer_ack(rig, SQ_PSN + u32::from(i), u32::from(i) + 1);
    assert!(rig.frame(&a).is_empty());
}

#[test]
fn a_cq_that_overruns_goes_to_error_and_takes_the_qp_with_it() {
    let mut rig = Rig::new();
    // The CQ fills up: nobody polls.
    for i in 0..NCQE as u16 {
        write_acked(&mut rig, i);
    }
    assert_eq!(rig.events(), [], "a full CQ is no error yet");
    assert_eq!(rig.state(), QpState::Rts);
    // One completion more: it has nowhere to go.
    write_acked(&mut rig, NCQE as u16);
    assert_eq!(
        rig.events(),
        [NicEvent::CqError(rig.cq), NicEvent::QpFatal(rig.qpn)],
        "the CQ error event, then the QP's"
    );
    assert_eq!(rig.state(), QpState::Err);
    // The CQEs the consumer had not polled are all there, untouched.
    let qpn = rig.qpn.get();
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    let want: Vec<_> = (0..NCQE as u16)
        .map(|i| (CqeOpcode::Req, Syndrome::Unknown(0), i, 0x08, qpn))
        .collect();
    assert_eq!(cqes, want);
    // The CQ stays in error although it has room again: a WQE posted now
    // is flushed into nothing, and no second CQ error event comes.
    let w = rdma_wqe(&rig, NCQE as u16 + 1, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(NCQE as u16 + 1, &w);
    rig.ring(NCQE as u16 + 1, u8::from(WqeOpcode::RdmaWrite), 3);
    assert!(rig.transmitted().is_empty(), "an ERR QP sends nothing");
    rig.advance_us(2000);
    assert!(rig.cqes().is_empty(), "no CQE after the overrun");
    assert_eq!(rig.events(), []);
    // The QP and the CQ in error can be destroyed.
    let (qpn, cq) = (rig.qpn, rig.cq);
    rig.exec(Command::DestroyQp(qpn)).unwrap();
    rig.exec(Command::DestroyCq(cq)).unwrap();
}

#[test]
fn a_receive_completion_lost_to_an_overrun_fails_the_qp() {
    let mut rig = Rig::new();
    for i in 0..NCQE as u16 {
        write_acked(&mut rig, i);
    }
    // A SEND from the peer finds a receive WQE but no room for its CQE.
    let lkey = rig.mr.raw();
    let addr = rig.mr_buf.get();
    rig.post_recv(lkey, addr, 64);
    let send = rig.request(
        BthOpcode::RcSendOnly,
        crate::EPSN,
        ExtHeaders::default(),
        &[7; 16],
    );
    rig.frame(&send);
    assert_eq!(
        rig.events(),
        [NicEvent::CqError(rig.cq), NicEvent::QpFatal(rig.qpn)]
    );
    assert_eq!(rig.state(), QpState::Err);
    assert_eq!(rig.cqes().len(), NCQE as usize, "the old CQEs stay");
}

/// A NIC of `cfg` over the rig's memory, with a UAR, a PD and a CQ.
fn small_nic(rig: &mut Rig, cfg: NicConfig) -> (UarIndex, Pdn, Cqn) {
    rig.nic = Nic::new(cfg);
    let Ok(CmdOut::Uar(uar)) = rig.exec(Command::AllocUar) else {
        panic!("no UAR")
    };
    let Ok(CmdOut::Pd(pd)) = rig.exec(Command::AllocPd) else {
        panic!("no PD")
    };
    let Ok(CmdOut::Cq(cq)) = rig.exec(Command::CreateCq(CqParams {
        log_size: 0,
        uar,
        dbr_addr: rig.cq_dbr,
        cqe_bytes: 64,
        pas: vec![rig.cq_buf],
    })) else {
        panic!("no CQ")
    };
    (uar, pd, cq)
}

#[test]
fn qps_pds_and_mkeys_up_to_the_caps_and_one_more_is_exhausted() {
    let mut rig = Rig::new();
    let mut cfg = NicConfig::new(LOCAL);
    cfg.caps.log_max_qp = 3;
    cfg.caps.max_pd = 5;
    cfg.caps.max_mkeys = 6;
    cfg.caps.max_cqe = 256;
    cfg.caps.max_send_wqebb = 64;
    cfg.caps.max_recv_wr = 32;
    let (uar, pd, cq) = small_nic(&mut rig, cfg);
    let (qp_dbr, qp_buf) = (rig.qp_dbr, rig.qp_buf);
    let qp = |log_sq_size: u8, log_rq_size: u8| {
        Command::CreateQp(QpParams {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            uar,
            log_sq_size,
            log_rq_size,
            log_rq_stride: 0,
            dbr_addr: qp_dbr,
            pas: vec![qp_buf; 8],
            srq: None,
            gsi: false,
            user_index: 0,
        })
    };
    // QPs: 2^log_max_qp of them, then Exhausted; one destroyed makes room.
    let mut qpns = Vec::new();
    for _ in 0..8 {
        let Ok(CmdOut::Qp(q)) = rig.exec(qp(0, 0)) else {
            panic!("QP {} of 8", qpns.len())
        };
        qpns.push(q);
    }
    assert_eq!(rig.exec(qp(0, 0)), Err(CmdError::Exhausted(ObjKind::Qp)));
    rig.exec(Command::DestroyQp(qpns.pop().unwrap())).unwrap();
    assert!(matches!(rig.exec(qp(0, 0)), Ok(CmdOut::Qp(_))));
    assert_eq!(rig.exec(qp(0, 0)), Err(CmdError::Exhausted(ObjKind::Qp)));
    // PDs: max_pd in all (one is the QPs'), then Exhausted.
    let mut pds = Vec::new();
    for _ in 1..5 {
        let Ok(CmdOut::Pd(p)) = rig.exec(Command::AllocPd) else {
            panic!("PD {} of 5", pds.len() + 2)
        };
        pds.push(p);
    }
    assert_eq!(
        rig.exec(Command::AllocPd),
        Err(CmdError::Exhausted(ObjKind::Pd))
    );
    rig.exec(Command::DeallocPd(pds.pop().unwrap())).unwrap();
    assert!(matches!(rig.exec(Command::AllocPd), Ok(CmdOut::Pd(_))));
    // Memory keys: exactly max_mkeys (the two reserved indices are not
    // among them), then Exhausted.
    let mtt = vec![rig.mr_buf; 2];
    let mkey = |start: u64| {
        Command::CreateMkey(MkeyParams {
            pd,
            access: Access(Access::LOCAL_WRITE),
            start,
            len: 64,
            mtt: mtt.clone(),
        })
    };
    let start = rig.mr_buf.get();
    let mut keys = Vec::new();
    for i in 0..6 {
        let Ok(CmdOut::Mkey(k)) = rig.exec(mkey(start + i * 8)) else {
            panic!("mkey {i} of 6")
        };
        keys.push(k);
    }
    assert_eq!(
        rig.exec(mkey(start)),
        Err(CmdError::Exhausted(ObjKind::Mkey))
    );
    let gone = keys.remove(2);
    rig.exec(Command::DestroyMkey(gone)).unwrap();
    let Ok(CmdOut::Mkey(again)) = rig.exec(mkey(start)) else {
        panic!("no mkey after a destroy")
    };
    assert_eq!(again.index(), gone.index(), "the freed index is reused");
    assert_ne!(again, gone, "with a new variant: the old key stays dead");
    // Sizes past the caps are bad parameters, not exhaustion.
    assert!(matches!(
        rig.exec(Command::CreateCq(CqParams {
            log_size: 9,
            uar,
            dbr_addr: rig.cq_dbr,
            cqe_bytes: 64,
            pas: vec![rig.cq_buf; 8],
        })),
        Err(CmdError::BadParam {
            name: Param::LogCqSize,
            ..
        })
    ));
    rig.exec(Command::DestroyQp(qpns.pop().unwrap())).unwrap();
    assert!(matches!(
        rig.exec(qp(7, 0)),
        Err(CmdError::BadParam {
            name: Param::LogSqSize,
            ..
        })
    ));
    assert!(matches!(
        rig.exec(qp(0, 6)),
        Err(CmdError::BadParam {
            name: Param::LogRqSize,
            ..
        })
    ));
    assert!(matches!(rig.exec(qp(6, 5)), Ok(CmdOut::Qp(_))));
}
