//! Shared receive queues read through their doorbell record: a WQE the
//! NIC has taken stays taken whatever the record says after.

use doorbell_hif::{CmdOut, Command, NicEvent, QpParams, QpType, SrqParams};
use doorbell_host::{HostMemory, PAGE_SIZE};
use doorbell_layout::cqe::{Cqe64, CqeOpcode};
use doorbell_layout::dbr;
use doorbell_layout::wqe::{DataSeg, SrqNextSeg, field};
use doorbell_types::{HostAddr, Srqn};
use doorbell_wire::{BthOpcode, ExtHeaders};

use crate::{EPSN, Rig};

/// log2 of the SRQ's WQEs, and of its stride less 4 (32 bytes: the next
/// segment and one data segment).
const LOG_SRQ: u8 = 3;
const LOG_STRIDE: u8 = 1;
const STRIDE: u64 = 16 << LOG_STRIDE;
/// Where each SRQ WQE's data lands in the rig's MR.
const SLOT: u64 = 64;

/// The rig, with its QP swapped for a connected RC QP that takes its
/// receives from a new SRQ, whose ring and record are returned.
fn srq_rig() -> (Rig, Srqn, HostAddr, HostAddr) {
    let mut rig = Rig::new();
    let alloc = |len: u64| {
        let a = rig.mem.alloc(len).unwrap();
        (a, rig.mem.pin(a, len).unwrap())
    };
    let (ring, ring_pas) = alloc(PAGE_SIZE);
    let (srq_dbr, _) = alloc(PAGE_SIZE);
    let (qp_buf, qp_pas) = alloc(PAGE_SIZE);
    let (qp_dbr, _) = alloc(PAGE_SIZE);
    let Ok(CmdOut::Srq(srqn)) = rig.exec(Command::CreateSrq(SrqParams {
        pd: rig.pd,
        log_size: LOG_SRQ,
        log_stride: LOG_STRIDE,
        dbr_addr: srq_dbr,
        pas: ring_pas,
    })) else {
        panic!("no SRQ")
    };
    let params = QpParams {
        log_rq_size: 0,
        srq: Some(srqn),
        ..rig.qp_params(qp_dbr, qp_pas)
    };
    let Ok(CmdOut::Qp(qpn)) = rig.exec(Command::CreateQp(params)) else {
        panic!("no QP")
    };
    (rig.qpn, rig.qp_buf, rig.qp_dbr) = (qpn, qp_buf, qp_dbr);
    rig.connect(1024, QpType::Rc);
    (rig, srqn, ring, srq_dbr)
}

/// Writes SRQ WQE `i`, one SGE into slot `i` of the MR, its next WQE
/// `i + 1`.
fn write_srq_wqe(rig: &Rig, ring: HostAddr, i: u16) {
    let mut w = [0u8; STRIDE as usize];
    SrqNextSeg::new_unchecked(&mut w[..field::SRQ_NEXT_LEN]).set_next_wqe_index(i + 1);
    let mut d = DataSeg::new_unchecked(&mut w[field::SRQ_NEXT_LEN..]);
    d.set_byte_count(SLOT as u32);
    d.set_lkey(rig.mr.raw());
    d.set_addr(rig.mr_buf.get() + u64::from(i) * SLOT);
    let at = HostAddr::new(ring.get() + u64::from(i) * STRIDE);
    rig.mem.write(at, &w).unwrap();
}

/// Sets the SRQ's record: `pi` WQEs posted in all.
fn set_srq_counter(rig: &Rig, srq_dbr: HostAddr, pi: u16) {
    let at = HostAddr::new(srq_dbr.get() + (dbr::RCV_DBR * 4) as u64);
    rig.mem.write_be32(at, u32::from(pi)).unwrap();
}

/// SEND ONLY `k` (PSN `EPSN + k`) of 8 bytes of `k`; the receive CQEs
/// it completes, as (opcode, WQE index, byte count).
fn send(rig: &mut Rig, k: u8) -> Vec<(CqeOpcode, u16, u32)> {
    let frame = rig.request(
        BthOpcode::RcSendOnly,
        EPSN + u32::from(k),
        ExtHeaders::default(),
        &[k; 8],
    );
    rig.frame(&frame);
    rig.cqes()
        .iter()
        .map(|b| {
            let c = Cqe64::new_unchecked(&b[..]);
            (c.opcode(), c.wqe_counter(), c.byte_cnt())
        })
        .collect()
}

/// With a limit armed, a WQE taken below it has the record read again
/// for the limit. A record that makes no sense then (more posted than
/// the SRQ holds) leaves the limit unchecked until the next WQE; the WQE
/// already taken still receives its message. Before, the read's failure
/// failed the fetch after the WQE had been taken, and that WQE was lost.
#[test]
fn a_wqe_taken_is_kept_when_the_record_read_again_for_the_limit_is_wrong() {
    let (mut rig, srqn, ring, srq_dbr) = srq_rig();
    for i in 0..4 {
        write_srq_wqe(&rig, ring, i);
    }
    set_srq_counter(&rig, srq_dbr, 4);
    rig.exec(Command::ModifySrq { srqn, limit: 3 }).unwrap();
    // WQE 0: three left, not fewer than the limit; the record is not read
    // again.
    assert_eq!(send(&mut rig, 0), [(CqeOpcode::RespSend, 0, 8)]);
    assert!(rig.events().is_empty());
    // The record now claims more WQEs than the SRQ holds.
    set_srq_counter(&rig, srq_dbr, 1 + (1 << LOG_SRQ) + 5);
    assert_eq!(
        send(&mut rig, 1),
        [(CqeOpcode::RespSend, 1, 8)],
        "WQE 1 receives the SEND"
    );
    assert_eq!(rig.mr_bytes(SLOT, 8), [1u8; 8]);
    assert!(rig.events().is_empty(), "the limit is not checked");
    // Set right again: the next WQE checks the limit, one left.
    set_srq_counter(&rig, srq_dbr, 4);
    assert_eq!(send(&mut rig, 2), [(CqeOpcode::RespSend, 2, 8)]);
    assert_eq!(rig.events(), [NicEvent::SrqLimit(srqn)]);
    assert_eq!(rig.mr_bytes(2 * SLOT, 8), [2u8; 8]);
}
