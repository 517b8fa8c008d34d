//! The 64-byte event queue entry and the EQ doorbell (mlx5 `struct mlx5_eqe`
//! and `enum mlx5_event` in the kernel's `include/linux/mlx5/device.h`;
//! `eq_update_ci` in `drivers/net/ethernet/mellanox/mlx5/core/lib/eq.h`).
//!
//! The device writes EQEs into an event queue in host memory by DMA and
//! raises the EQ's MSI-X vector if the EQ is armed. Host software (the
//! kernel's interrupt handler) finds new entries by their owner bit, then
//! writes its consumer index to the EQ doorbell in a UAR page, re-arming
//! the EQ or not. Every entry starts with owner 1 ([`OWNER_INIT`]); the
//! device writes owner `(producer_index >> log_size) & 1`, so an entry is
//! new when its owner bit equals `(consumer_index >> log_size) & 1`.
//!
//! These layouts are not in rdma-core's public headers (the EQ belongs to
//! the kernel); the unit tests restate `device.h`'s member lists (names and
//! sizes, in order) and derive every offset from them, and the CQ error
//! syndromes come from `mlx5_ifc.h`.

use crate::{be32, fixed_view, set_be32};

/// Bytes in an EQE.
pub const EQE_LEN: usize = field::OWNER + 1;

/// Field offsets of the EQE (`struct mlx5_eqe`, packed).
pub mod field {
    use crate::Field;

    /// `type`: the event type ([`super::EventType`]).
    pub const TYPE: usize = 1;
    /// `sub_type` (port change: DOWN or ACTIVE).
    pub const SUB_TYPE: usize = 3;
    /// Start of the 28-byte `data` union.
    pub const DATA: usize = 32;
    /// Completion: `data.comp.cqn`, BE32, bits 23..0.
    pub const COMP_CQN: Field = 56..60;
    /// QP and SRQ events: `data.qp_srq.type` (0 QP, 1 RQ, 2 SQ).
    pub const QP_SRQ_TYPE: usize = 52;
    /// QP and SRQ events: `data.qp_srq.qp_srq_n`, BE32, bits 23..0.
    pub const QP_SRQ_N: Field = 56..60;
    /// CQ error: `data.cq_err.cqn`, BE32, bits 23..0.
    pub const CQ_ERR_CQN: Field = 32..36;
    /// CQ error: `data.cq_err.syndrome`.
    pub const CQ_ERR_SYNDROME: usize = 43;
    /// Port change: `data.port.port`, the port number in bits 7..4.
    pub const PORT: usize = 40;
    /// Signature byte.
    pub const SIGNATURE: usize = 62;
    /// Owner byte, bit 0.
    pub const OWNER: usize = 63;
}

crate::enum_with_unknown! {
    /// EQE type (`enum mlx5_event`), the ones doorbell raises.
    pub enum EventType(u8) {
        /// A completion on an armed CQ (MLX5_EVENT_TYPE_COMP).
        Comp = 0x00,
        /// A CQ error, such as an overrun (MLX5_EVENT_TYPE_CQ_ERROR).
        CqError = 0x04,
        /// A QP's work queue hit a catastrophic error
        /// (MLX5_EVENT_TYPE_WQ_CATAS_ERROR: IBV_EVENT_QP_FATAL).
        WqCatasError = 0x05,
        /// Port state change (MLX5_EVENT_TYPE_PORT_CHANGE).
        PortChange = 0x09,
        /// The last WQE of a QP on an SRQ was reached
        /// (MLX5_EVENT_TYPE_SRQ_LAST_WQE).
        SrqLastWqe = 0x13,
        /// An SRQ fell below its limit (MLX5_EVENT_TYPE_SRQ_RQ_LIMIT).
        SrqRqLimit = 0x14,
    }
}

/// Port change sub-type: the link went down (MLX5_PORT_CHANGE_SUBTYPE_DOWN).
pub const PORT_SUBTYPE_DOWN: u8 = 1;
/// Port change sub-type: the link is active (MLX5_PORT_CHANGE_SUBTYPE_ACTIVE).
pub const PORT_SUBTYPE_ACTIVE: u8 = 4;
/// `data.qp_srq.type` of an event about a QP (MLX5_EVENT_QUEUE_TYPE_QP).
pub const QUEUE_TYPE_QP: u8 = 0;
/// The owner byte every entry gets when the EQ is created
/// (MLX5_EQE_OWNER_INIT_VAL).
pub const OWNER_INIT: u8 = 1;
/// CQ error syndrome: the CQ overran (MLX5_CQ_ERROR_SYNDROME_CQ_OVERRUN).
pub const CQ_SYNDROME_OVERRUN: u8 = 1;
/// CQ error syndrome: a CQE write faulted
/// (MLX5_CQ_ERROR_SYNDROME_CQ_ACCESS_VIOLATION_ERROR).
pub const CQ_SYNDROME_ACCESS_VIOLATION: u8 = 2;

fixed_view!(
    /// A 64-byte EQE.
    Eqe64,
    EQE_LEN
);

impl<T: AsRef<[u8]>> Eqe64<T> {
    /// Event type.
    pub fn event_type(&self) -> EventType {
        EventType::from(self.buffer.as_ref()[field::TYPE])
    }
    /// Sub-type.
    pub fn sub_type(&self) -> u8 {
        self.buffer.as_ref()[field::SUB_TYPE]
    }
    /// Owner bit.
    pub fn owner(&self) -> bool {
        self.buffer.as_ref()[field::OWNER] & 1 != 0
    }
    /// CQN of a completion event.
    pub fn comp_cqn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::COMP_CQN) & 0x00ff_ffff
    }
    /// QPN or SRQN of a QP or SRQ event.
    pub fn qp_srq_n(&self) -> u32 {
        be32(self.buffer.as_ref(), field::QP_SRQ_N) & 0x00ff_ffff
    }
    /// Queue type of a QP or SRQ event.
    pub fn qp_srq_type(&self) -> u8 {
        self.buffer.as_ref()[field::QP_SRQ_TYPE]
    }
    /// CQN of a CQ error.
    pub fn cq_err_cqn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CQ_ERR_CQN) & 0x00ff_ffff
    }
    /// Syndrome of a CQ error.
    pub fn cq_err_syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::CQ_ERR_SYNDROME]
    }
    /// Port number of a port change.
    pub fn port(&self) -> u8 {
        self.buffer.as_ref()[field::PORT] >> 4
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Eqe64<T> {
    /// Zeroes every byte but the owner byte.
    pub fn clear_body(&mut self) {
        self.buffer.as_mut()[..field::OWNER].fill(0);
    }
    /// Sets type and sub-type.
    pub fn set_type(&mut self, t: EventType, sub_type: u8) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = u8::from(t);
        b[field::SUB_TYPE] = sub_type;
    }
    /// Sets the CQN of a completion event.
    pub fn set_comp_cqn(&mut self, cqn: u32) {
        set_be32(self.buffer.as_mut(), field::COMP_CQN, cqn & 0x00ff_ffff);
    }
    /// Sets the resource of a QP or SRQ event, and its queue type.
    pub fn set_qp_srq(&mut self, queue_type: u8, n: u32) {
        self.buffer.as_mut()[field::QP_SRQ_TYPE] = queue_type;
        set_be32(self.buffer.as_mut(), field::QP_SRQ_N, n & 0x00ff_ffff);
    }
    /// Sets the CQN and syndrome of a CQ error.
    pub fn set_cq_err(&mut self, cqn: u32, syndrome: u8) {
        set_be32(self.buffer.as_mut(), field::CQ_ERR_CQN, cqn & 0x00ff_ffff);
        self.buffer.as_mut()[field::CQ_ERR_SYNDROME] = syndrome;
    }
    /// Sets the port of a port change.
    pub fn set_port(&mut self, port: u8) {
        self.buffer.as_mut()[field::PORT] = port << 4;
    }
    /// Sets the owner byte: written last, after the rest of the entry.
    pub fn set_owner(&mut self, owner: bool) {
        self.buffer.as_mut()[field::OWNER] = u8::from(owner);
    }
}

/// Bytes of an EQ doorbell write (one BE32 word).
pub const EQ_DOORBELL_LEN: usize = 4;

/// The EQ doorbell: BE32 `(eqn << 24) | (consumer_index & 0xffffff)`,
/// written at [`crate::uar::EQ_DOORBELL`] to re-arm, at
/// [`crate::uar::EQ_DOORBELL_NO_ARM`] only to update the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EqDoorbell {
    /// EQ number (8 bits).
    pub eqn: u8,
    /// Consumer index, 24 bits.
    pub ci: u32,
}

impl EqDoorbell {
    /// Decodes the 4 bytes of a doorbell write.
    pub fn parse(bytes: &[u8; 4]) -> Self {
        let w = u32::from_be_bytes(*bytes);
        Self {
            eqn: (w >> 24) as u8,
            ci: w & 0x00ff_ffff,
        }
    }

    /// Encodes the doorbell.
    pub fn emit(&self) -> [u8; 4] {
        ((u32::from(self.eqn) << 24) | (self.ci & 0x00ff_ffff)).to_be_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_round_trips_and_masks_the_index() {
        let db = EqDoorbell {
            eqn: 7,
            ci: 0x0123_4567,
        };
        assert_eq!(db.emit(), [7, 0x23, 0x45, 0x67]);
        assert_eq!(
            EqDoorbell::parse(&db.emit()),
            EqDoorbell {
                eqn: 7,
                ci: 0x23_4567
            }
        );
    }

    /// Offset of `member` in a packed C struct given as `(name, size)` in
    /// declaration order.
    fn offset_of(members: &[(&str, usize)], member: &str) -> usize {
        let i = members.iter().position(|(n, _)| *n == member).unwrap();
        members[..i].iter().map(|(_, s)| s).sum()
    }

    #[test]
    fn offsets_follow_the_kernel_structs() {
        // struct mlx5_eqe, __packed.
        let eqe = [
            ("rsvd0", 1),
            ("type", 1),
            ("rsvd1", 1),
            ("sub_type", 1),
            ("rsvd2", 7 * 4),
            ("data", 7 * 4),
            ("rsvd3", 2),
            ("signature", 1),
            ("owner", 1),
        ];
        assert_eq!(eqe.iter().map(|(_, s)| s).sum::<usize>(), EQE_LEN);
        let data = offset_of(&eqe, "data");
        assert_eq!(offset_of(&eqe, "type"), field::TYPE);
        assert_eq!(offset_of(&eqe, "sub_type"), field::SUB_TYPE);
        assert_eq!(data, field::DATA);
        assert_eq!(offset_of(&eqe, "signature"), field::SIGNATURE);
        assert_eq!(offset_of(&eqe, "owner"), field::OWNER);
        // The members of union ev_data that doorbell uses.
        let comp = [("reserved", 6 * 4), ("cqn", 4)];
        assert_eq!(data + offset_of(&comp, "cqn"), field::COMP_CQN.start);
        let qp_srq = [
            ("reserved1", 5 * 4),
            ("type", 1),
            ("reserved2", 3),
            ("qp_srq_n", 4),
        ];
        assert_eq!(data + offset_of(&qp_srq, "type"), field::QP_SRQ_TYPE);
        assert_eq!(data + offset_of(&qp_srq, "qp_srq_n"), field::QP_SRQ_N.start);
        let cq_err = [("cqn", 4), ("reserved1", 7), ("syndrome", 1)];
        assert_eq!(data + offset_of(&cq_err, "cqn"), field::CQ_ERR_CQN.start);
        assert_eq!(
            data + offset_of(&cq_err, "syndrome"),
            field::CQ_ERR_SYNDROME
        );
        let port = [("reserved0", 8), ("port", 1)];
        assert_eq!(data + offset_of(&port, "port"), field::PORT);
    }

    #[test]
    fn fields_land_where_they_should() {
        let mut b = [0u8; EQE_LEN];
        let mut e = Eqe64::new_unchecked(&mut b[..]);
        e.set_type(EventType::PortChange, PORT_SUBTYPE_ACTIVE);
        e.set_port(1);
        e.set_owner(true);
        assert_eq!((b[1], b[3], b[40], b[63]), (0x09, 4, 0x10, 1));
        let e = Eqe64::new_unchecked(&b[..]);
        assert_eq!(e.port(), 1);
        assert!(e.owner());
    }
}
