//! The UAR page and the values written to it (mlx5 reference §1, §6, §8.6).
//!
//! A UAR is a 4 KiB page of device registers. Its upper half holds four
//! doorbell/BlueFlame registers ("bfregs") of `bf_reg_size` bytes; each is two
//! equal buffers used alternately. The first two bfregs of a UAR go to user
//! QPs, the other two are kept for the kernel's fast path. Offset 0x20 takes CQ
//! arm doorbells.

use crate::{be32, set_be32};

/// Size of one UAR (MLX5_ADAPTER_PAGE_SIZE).
pub const UAR_PAGE_SIZE: usize = 4096;
/// log2 of [`UAR_PAGE_SIZE`] (the `log_uar_size` the context reports).
pub const LOG_UAR_SIZE: u32 = 12;
/// Offset of bfreg 0 in a UAR (MLX5_BF_OFFSET).
pub const BF_OFFSET: usize = 0x800;
/// Default size of one bfreg (`1 << log_bf_reg_size`).
pub const BF_REG_SIZE: usize = 512;
/// Size of one of the two alternating BlueFlame buffers of a bfreg.
pub const BF_BUF_SIZE: usize = BF_REG_SIZE / 2;
/// Registers physically in a UAR (MLX5_BFREGS_PER_UAR).
pub const BFREGS_PER_UAR: u32 = 4;
/// Registers of a UAR handed to user QPs (MLX5_NON_FP_BFREGS_PER_UAR).
pub const NON_FP_BFREGS_PER_UAR: u32 = 2;
/// Registers of a UAR kept for the kernel's fast path (MLX5_FP_BFREGS_PER_UAR).
pub const FP_BFREGS_PER_UAR: u32 = 2;
/// Offset of the CQ arm doorbell (MLX5_CQ_DOORBELL).
pub const CQ_DOORBELL: usize = 0x20;
/// Offset of the EQ doorbell with arm (MLX5_EQ_DOORBELL_OFFSET).
pub const EQ_DOORBELL: usize = 0x40;
/// Offset of the EQ doorbell that moves the consumer index without
/// re-arming: `eq_update_ci(eq, 0)` writes the second 32-bit word after
/// [`EQ_DOORBELL`].
pub const EQ_DOORBELL_NO_ARM: usize = EQ_DOORBELL + 8;
/// Bytes the CPU moves in one write-combined BlueFlame chunk.
pub const BF_CHUNK: usize = 64;
/// Bytes of a plain doorbell MMIO write.
pub const DOORBELL_LEN: usize = 8;

/// Byte offset of bfreg slot `slot` (0..4) in its UAR.
pub const fn bfreg_offset(slot: u32, bf_reg_size: usize) -> usize {
    BF_OFFSET + slot as usize * bf_reg_size
}

/// Where an MMIO write inside a UAR page landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UarRegister {
    /// The CQ arm doorbell at 0x20.
    CqArm,
    /// The EQ doorbell: at 0x40 it re-arms the EQ, at 0x48 it only moves
    /// the consumer index (the value is an EQ doorbell word of `eqe`).
    Eq {
        /// Whether the write re-arms the EQ.
        arm: bool,
    },
    /// Bfreg `slot` (0..4), buffer `half` (0 even, 1 odd), `offset` bytes into it.
    Bfreg {
        /// Register slot in the UAR.
        slot: u32,
        /// Which of the two alternating buffers.
        half: u32,
        /// Offset inside that buffer.
        offset: usize,
    },
    /// Anything else: the device ignores it.
    Other,
}

/// Decodes an offset inside a UAR page. With a `bf_reg_size` below 2 (0:
/// no BlueFlame) there are no bfregs: their offsets decode to
/// [`UarRegister::Other`].
pub fn decode_offset(off: usize, bf_reg_size: usize) -> UarRegister {
    if off == CQ_DOORBELL {
        return UarRegister::CqArm;
    }
    if off == EQ_DOORBELL || off == EQ_DOORBELL_NO_ARM {
        return UarRegister::Eq {
            arm: off == EQ_DOORBELL,
        };
    }
    // A size below 2 has no two halves (0: no BlueFlame at all).
    if bf_reg_size < 2 || !(BF_OFFSET..UAR_PAGE_SIZE).contains(&off) {
        return UarRegister::Other;
    }
    let rel = off - BF_OFFSET;
    let slot = (rel / bf_reg_size) as u32;
    let in_reg = rel % bf_reg_size;
    let half_size = bf_reg_size / 2;
    UarRegister::Bfreg {
        slot,
        half: (in_reg / half_size) as u32,
        offset: in_reg % half_size,
    }
}

/// The 8-byte send doorbell: the first 8 bytes of the last WQE's control
/// segment, `[opmod:8 | wqe_index:16 | opcode:8] [qpn:24 | ds:8]`, big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendDoorbell {
    /// WQE index (start WQEBB, mod 2^16) of the last WQE posted.
    pub wqe_index: u16,
    /// Opcode of that WQE.
    pub opcode: u8,
    /// QP number.
    pub qpn: u32,
    /// DS count of that WQE.
    pub ds: u8,
}

impl SendDoorbell {
    /// Decodes the 8 bytes of a doorbell write.
    pub fn parse(bytes: &[u8; 8]) -> Self {
        let w0 = be32(bytes, 0..4);
        let w1 = be32(bytes, 4..8);
        Self {
            wqe_index: (w0 >> 8) as u16,
            opcode: w0 as u8,
            qpn: w1 >> 8,
            ds: (w1 & 0x3f) as u8,
        }
    }

    /// Encodes the doorbell.
    pub fn emit(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        set_be32(
            &mut b,
            0..4,
            (u32::from(self.wqe_index) << 8) | u32::from(self.opcode),
        );
        set_be32(
            &mut b,
            4..8,
            ((self.qpn & 0x00ff_ffff) << 8) | u32::from(self.ds & 0x3f),
        );
        b
    }
}

/// Arm command: notify on the next completion of any kind (MLX5_CQ_DB_REQ_NOT).
pub const CQ_DB_REQ_NOT: u32 = 0;
/// Arm command: notify on the next solicited or error completion (MLX5_CQ_DB_REQ_NOT_SOL).
pub const CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;

/// The 8-byte CQ arm doorbell: BE32 `(sn << 28) | cmd | ci`, then BE32 `cqn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqArmDoorbell {
    /// Arm sequence number, 2 bits.
    pub sn: u8,
    /// True for "solicited only".
    pub solicited_only: bool,
    /// Consumer index, 24 bits.
    pub ci: u32,
    /// CQ number.
    pub cqn: u32,
}

impl CqArmDoorbell {
    /// The arm word as written to the doorbell record and the first 4 bytes.
    pub fn arm_word(&self) -> u32 {
        (u32::from(self.sn & 3) << 28)
            | if self.solicited_only {
                CQ_DB_REQ_NOT_SOL
            } else {
                CQ_DB_REQ_NOT
            }
            | (self.ci & 0x00ff_ffff)
    }

    /// Decodes the 8 bytes of an arm doorbell.
    pub fn parse(bytes: &[u8; 8]) -> Self {
        let w0 = be32(bytes, 0..4);
        Self {
            sn: ((w0 >> 28) & 3) as u8,
            solicited_only: w0 & CQ_DB_REQ_NOT_SOL != 0,
            ci: w0 & 0x00ff_ffff,
            cqn: be32(bytes, 4..8) & 0x00ff_ffff,
        }
    }

    /// Encodes the doorbell.
    pub fn emit(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        set_be32(&mut b, 0..4, self.arm_word());
        set_be32(&mut b, 4..8, self.cqn & 0x00ff_ffff);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfreg_offsets_fill_upper_half() {
        let offs: [usize; 4] = core::array::from_fn(|i| bfreg_offset(i as u32, BF_REG_SIZE));
        assert_eq!(offs, [0x800, 0xa00, 0xc00, 0xe00]);
    }

    #[test]
    fn a_bfreg_size_without_two_halves_decodes_to_other() {
        assert_eq!(decode_offset(BF_OFFSET, 0), UarRegister::Other);
        assert_eq!(decode_offset(BF_OFFSET + 3, 1), UarRegister::Other);
    }

    #[test]
    fn decode_alternating_buffers() {
        assert_eq!(decode_offset(0x20, 512), UarRegister::CqArm);
        assert_eq!(
            decode_offset(0xa00, 512),
            UarRegister::Bfreg {
                slot: 1,
                half: 0,
                offset: 0
            }
        );
        assert_eq!(
            decode_offset(0xb40, 512),
            UarRegister::Bfreg {
                slot: 1,
                half: 1,
                offset: 0x40
            }
        );
        assert_eq!(decode_offset(0x100, 512), UarRegister::Other);
        assert_eq!(decode_offset(0x1000, 512), UarRegister::Other);
    }

    #[test]
    fn send_doorbell_is_the_ctrl_prefix() {
        let db = SendDoorbell {
            wqe_index: 0x1234,
            opcode: 0x0a,
            qpn: 0xabcdef,
            ds: 2,
        };
        let b = db.emit();
        assert_eq!(b, [0x00, 0x12, 0x34, 0x0a, 0xab, 0xcd, 0xef, 0x02]);
        assert_eq!(SendDoorbell::parse(&b), db);
    }

    #[test]
    fn arm_doorbell_words() {
        let a = CqArmDoorbell {
            sn: 2,
            solicited_only: true,
            ci: 0x12_3456,
            cqn: 7,
        };
        assert_eq!(a.arm_word(), 0x2112_3456);
        assert_eq!(CqArmDoorbell::parse(&a.emit()), a);
    }
}
