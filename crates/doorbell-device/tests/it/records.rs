//! Doorbells through memory: a provider that maps its UAR pages itself
//! rings with stores the device does not see, and the device takes the send
//! counter and the arm word from the doorbell records instead.

use doorbell_hif::NicEvent;
use doorbell_host::{HostMemory, RecordDoorbell};
use doorbell_layout::dbr;
use doorbell_layout::uar::CqArmDoorbell;
use doorbell_layout::wqe::WqeOpcode;
use doorbell_types::{HostAddr, UarIndex};

use crate::{Rig, SQ_PSN, USER_INDEX, peer_ack, rdma_wqe};
use doorbell_layout::cqe::{Cqe64, CqeOpcode, Syndrome};
use doorbell_layout::wqe::DataSeg;

fn set_send_counter(rig: &Rig, pi: u16) {
    let at = HostAddr::new(rig.qp_dbr.get() + (dbr::SND_DBR * 4) as u64);
    rig.mem.write_be32(at, u32::from(pi)).unwrap();
}

fn send_record(rig: &mut Rig, uar: UarIndex) {
    let (now, qpn) = (rig.now, rig.qpn);
    rig.nic
        .handle_record_doorbell(now, uar, RecordDoorbell::Send(qpn), &mut rig.bus);
}

fn arm_record(rig: &mut Rig, uar: UarIndex) {
    let (now, cq) = (rig.now, rig.cq);
    rig.nic
        .handle_record_doorbell(now, uar, RecordDoorbell::Arm(cq), &mut rig.bus);
}

/// The record says how many WQEBBs were posted, so two WQEs published
/// behind one store both run, a record that has not moved runs nothing, and
/// a store on a page the QP does not ring through is refused and counted.
#[test]
fn send_doorbells_follow_the_record() {
    let mut rig = Rig::new();
    let c0 = rig.counters();
    for i in 0..2 {
        let w = rdma_wqe(&rig, i, WqeOpcode::RdmaWrite, 8);
        rig.write_sq(i, &w);
    }
    set_send_counter(&rig, 2);
    let uar = rig.uar;
    send_record(&mut rig, uar);
    assert_eq!(rig.transmitted().len(), 2, "both WQEs behind one store");
    send_record(&mut rig, uar);
    assert!(
        rig.transmitted().is_empty(),
        "an unchanged record is nothing"
    );
    let w = rdma_wqe(&rig, 2, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(2, &w);
    set_send_counter(&rig, 3);
    send_record(&mut rig, UarIndex::new(0x7777));
    assert!(rig.transmitted().is_empty(), "another page's store");
    let c = rig.counters();
    assert_eq!(c.bad_doorbells - c0.bad_doorbells, 1);
    assert_eq!(c.doorbells_by_record - c0.doorbells_by_record, 1);
    // A record that runs past the ring is refused as a bad doorbell would be.
    set_send_counter(&rig, 40);
    send_record(&mut rig, uar);
    assert!(rig.transmitted().is_empty());
    assert_eq!(rig.counters().bad_doorbells - c0.bad_doorbells, 2);
    set_send_counter(&rig, 3);
    send_record(&mut rig, uar);
    assert_eq!(rig.transmitted().len(), 1);
}

/// An arm read from the record arms the CQ: the next CQE raises one
/// completion event. The same arm taken twice (a repeated arm leaves memory
/// unchanged) is still an arm.
#[test]
fn cq_arms_follow_the_record() {
    let mut rig = Rig::new();
    let (cq, uar) = (rig.cq, rig.uar);
    let arm = CqArmDoorbell {
        sn: 0,
        solicited_only: false,
        ci: 0,
        cqn: cq.get(),
    };
    let at = HostAddr::new(rig.cq_dbr.get() + (dbr::CQ_ARM_DB * 4) as u64);
    rig.mem.write_be32(at, arm.arm_word()).unwrap();
    for _ in 0..2 {
        arm_record(&mut rig, uar);
    }
    assert!(rig.events().is_empty());
    let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(0, &w);
    set_send_counter(&rig, 1);
    send_record(&mut rig, uar);
    assert_eq!(rig.transmitted().len(), 1);
    rig.frame(&peer_ack(&rig, SQ_PSN, 1));
    assert_eq!(rig.cqes().len(), 1);
    assert_eq!(rig.events(), [NicEvent::Completion(cq)]);
    assert_eq!(rig.counters().arms_by_record, 2);
    // On a page that is not the CQ's, nothing is armed.
    arm_record(&mut rig, UarIndex::new(0x7777));
    assert_eq!(rig.counters().arms_by_record, 2);
}

/// Every CQE carries the QP's user index in `srqn_uidx` (mlx5dv.h's
/// `struct mlx5_cqe64`), good or bad: a provider of CQE version 1, as
/// rdma-core's libmlx5 is, finds the QP of a completion by it.
#[test]
fn cqes_carry_the_qps_user_index() {
    let mut rig = Rig::new();
    let uar = rig.uar;
    let w = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
    rig.write_sq(0, &w);
    set_send_counter(&rig, 1);
    send_record(&mut rig, uar);
    assert_eq!(rig.transmitted().len(), 1);
    rig.frame(&peer_ack(&rig, SQ_PSN, 1));
    // A WQE with a key nobody registered fails locally.
    let mut bad = rdma_wqe(&rig, 1, WqeOpcode::RdmaWrite, 8);
    DataSeg::new_unchecked(&mut bad[32..48]).set_lkey(0x00dd_0000);
    rig.write_sq(1, &bad);
    set_send_counter(&rig, 2);
    send_record(&mut rig, uar);
    let cqes = rig.cqes();
    let seen: Vec<_> = cqes
        .iter()
        .map(|b| {
            let c = Cqe64::new_unchecked(&b[..]);
            (c.opcode(), c.srqn_uidx())
        })
        .collect();
    assert_eq!(
        seen,
        [
            (CqeOpcode::Req, USER_INDEX),
            (CqeOpcode::ReqErr, USER_INDEX)
        ]
    );
    let err = Cqe64::new_unchecked(&cqes[1][..]);
    assert_eq!(err.syndrome(), Syndrome::LocalProtErr);
}
