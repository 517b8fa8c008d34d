//! What host and device read of each other's memory and registers: CQEs,
//! EQEs, doorbell records, doorbell values and UAR offsets
//! (`doorbell_layout`).

use doorbell_layout::cqe::{CQE_LEN, Cqe64, owner_for};
use doorbell_layout::dbr::{CqDoorbellRecord, DBR_LEN, QpDoorbellRecord};
use doorbell_layout::eqe::{EQE_LEN, EqDoorbell, Eqe64};
use doorbell_layout::uar::{CqArmDoorbell, SendDoorbell, UarRegister, decode_offset};
use doorbell_layout::wqe::{self, CtrlSeg, DataSeg, InlineSeg, RaddrSeg};

use crate::input::Input;

/// Target `cqe_record`: the first byte picks what the rest is read as
/// (mod 8): a CQE, an EQE, a QP or CQ doorbell record, a send or CQ-arm
/// doorbell, an EQ doorbell, a UAR offset and bfreg size, a CQE count and
/// ring size (the owner bit), or the first segments of a send WQE.
///
/// No getter may panic once `new_checked` succeeded; a decoded doorbell
/// must encode to bytes that decode to it again; a decoded UAR offset must
/// lie where its register does.
pub fn cqe_record(data: &[u8]) {
    let mut input = Input::new(data);
    match input.u8() % 8 {
        0 => {
            let bytes = input.rest();
            let Ok(c) = Cqe64::new_checked(bytes) else {
                return;
            };
            let _ = (
                c.opcode(),
                c.op_own(),
                c.owner(),
                c.is_solicited(),
                c.rqpn(),
            );
            let _ = (
                c.grh(),
                c.sl(),
                c.srqn_uidx(),
                c.imm(),
                c.byte_cnt(),
                c.timestamp(),
            );
            let _ = (c.send_opcode(), c.qpn(), c.wqe_counter(), c.syndrome());
            let _ = c.vendor_syndrome();
            let mut copy = bytes[..CQE_LEN].to_vec();
            let mut w = Cqe64::new_unchecked(&mut copy[..]);
            let (op, sol) = (c.opcode(), c.is_solicited());
            w.set_op_own(op, sol, !c.owner());
            let w = Cqe64::new_unchecked(&copy[..]);
            assert_eq!(
                (w.opcode(), w.is_solicited()),
                (op, sol),
                "op_own round trip"
            );
            assert_eq!(w.owner(), !c.owner());
        }
        1 => {
            let Ok(e) = Eqe64::new_checked(input.rest()) else {
                return;
            };
            let _ = (
                e.event_type(),
                e.sub_type(),
                e.owner(),
                e.comp_cqn(),
                e.qp_srq_n(),
            );
            let _ = (
                e.qp_srq_type(),
                e.cq_err_cqn(),
                e.cq_err_syndrome(),
                e.port(),
            );
            let _ = EQE_LEN;
        }
        2 => {
            let bytes = input.rest();
            let (Ok(q), Ok(c)) = (
                QpDoorbellRecord::new_checked(bytes),
                CqDoorbellRecord::new_checked(bytes),
            ) else {
                return;
            };
            let (rc, sc, ci, arm) = (
                q.recv_counter(),
                q.send_counter(),
                c.consumer_index(),
                c.arm(),
            );
            let mut buf = [0xa5u8; DBR_LEN];
            let mut w = QpDoorbellRecord::new_unchecked(&mut buf[..]);
            w.set_recv_counter(rc);
            w.set_send_counter(sc);
            let r = QpDoorbellRecord::new_unchecked(&buf[..]);
            assert_eq!((r.recv_counter(), r.send_counter()), (rc, sc), "QP record");
            let mut w = CqDoorbellRecord::new_unchecked(&mut buf[..]);
            w.set_consumer_index(ci);
            w.set_arm(arm);
            let r = CqDoorbellRecord::new_unchecked(&buf[..]);
            let _ = (r.consumer_index(), r.arm());
        }
        3 => {
            let b = input.array::<8>();
            let db = SendDoorbell::parse(&b);
            assert_eq!(
                SendDoorbell::parse(&db.emit()),
                db,
                "send doorbell round trip"
            );
            let arm = CqArmDoorbell::parse(&b);
            assert_eq!(
                CqArmDoorbell::parse(&arm.emit()),
                arm,
                "arm doorbell round trip"
            );
            assert_eq!(arm.emit()[..4], arm.arm_word().to_be_bytes());
        }
        4 => {
            let db = EqDoorbell::parse(&input.array::<4>());
            assert_eq!(EqDoorbell::parse(&db.emit()), db, "EQ doorbell round trip");
        }
        5 => {
            let off = input.u32() as usize;
            let bf_reg_size = usize::from(input.u16());
            match decode_offset(off, bf_reg_size) {
                UarRegister::Bfreg { slot, half, offset } => {
                    let at = doorbell_layout::uar::bfreg_offset(slot, bf_reg_size)
                        + half as usize * (bf_reg_size / 2)
                        + offset;
                    assert_eq!(at, off, "a bfreg offset decodes to where it is");
                    assert!(offset < bf_reg_size / 2);
                    // Only an even size splits into two halves exactly.
                    assert!(half < 2 || bf_reg_size % 2 == 1);
                }
                UarRegister::CqArm | UarRegister::Eq { .. } | UarRegister::Other => {}
            }
        }
        6 => {
            let n = input.u32();
            let ncqe = 1u32 << (input.u8() % 32);
            let _ = owner_for(n, ncqe);
        }
        _ => {
            let bytes = input.rest();
            let _ = wqe::wqe_signature(bytes);
            let Ok(c) = CtrlSeg::new_checked(bytes) else {
                return;
            };
            let _ = (
                c.opmod(),
                c.wqe_index(),
                c.opcode(),
                c.qpn(),
                c.ds(),
                c.signature(),
            );
            let _ = (c.fm_ce_se(), c.is_signaled(), c.is_solicited(), c.imm());
            let _ = wqe::wqebbs_for_ds(c.ds());
            let rest = &bytes[wqe::field::CTRL_LEN..];
            if let Ok(r) = RaddrSeg::new_checked(rest) {
                let _ = (r.raddr(), r.rkey());
            }
            if let Ok(d) = DataSeg::new_checked(rest) {
                let _ = (d.byte_count(), d.lkey(), d.addr());
            }
            if let Ok(i) = InlineSeg::new_checked(rest) {
                let _ = (i.is_inline(), i.byte_count());
                let _ = wqe::inline_ds(i.byte_count() as usize);
            }
        }
    }
}
