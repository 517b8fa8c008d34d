//! Doorbell records: two big-endian 32-bit words in host memory per QP or CQ
//! (mlx5 reference §4.1; MLX5_RCV_DBR, MLX5_SND_DBR, MLX5_CQ_SET_CI,
//! MLX5_CQ_ARM_DB).

use crate::{be32, fixed_view, set_be32};

/// Bytes of a doorbell record used by one object.
pub const DBR_LEN: usize = field::WORD1.end;

/// Field offsets of a doorbell record.
pub mod field {
    use crate::Field;

    /// Word 0: QP receive counter / CQ consumer index.
    pub const WORD0: Field = 0..4;
    /// Word 1: QP send counter / CQ arm word.
    pub const WORD1: Field = 4..8;
}

/// Index of the receive counter word in a QP record (MLX5_RCV_DBR).
pub const RCV_DBR: usize = 0;
/// Index of the send counter word in a QP record (MLX5_SND_DBR).
pub const SND_DBR: usize = 1;
/// Index of the consumer-index word in a CQ record (MLX5_CQ_SET_CI).
pub const CQ_SET_CI: usize = 0;
/// Index of the arm word in a CQ record (MLX5_CQ_ARM_DB).
pub const CQ_ARM_DB: usize = 1;

fixed_view!(
    /// A QP's doorbell record.
    QpDoorbellRecord,
    DBR_LEN
);

impl<T: AsRef<[u8]>> QpDoorbellRecord<T> {
    /// Receive counter: receive WQEs posted, low 16 bits.
    pub fn recv_counter(&self) -> u16 {
        be32(self.buffer.as_ref(), field::WORD0) as u16
    }
    /// Send counter: producer index in WQEBBs, low 16 bits.
    pub fn send_counter(&self) -> u16 {
        be32(self.buffer.as_ref(), field::WORD1) as u16
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QpDoorbellRecord<T> {
    /// Writes the receive counter.
    pub fn set_recv_counter(&mut self, v: u16) {
        set_be32(self.buffer.as_mut(), field::WORD0, u32::from(v));
    }
    /// Writes the send counter.
    pub fn set_send_counter(&mut self, v: u16) {
        set_be32(self.buffer.as_mut(), field::WORD1, u32::from(v));
    }
}

fixed_view!(
    /// A CQ's doorbell record.
    CqDoorbellRecord,
    DBR_LEN
);

impl<T: AsRef<[u8]>> CqDoorbellRecord<T> {
    /// Consumer index, 24 bits.
    pub fn consumer_index(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD0) & 0x00ff_ffff
    }
    /// The raw arm word.
    pub fn arm(&self) -> u32 {
        be32(self.buffer.as_ref(), field::WORD1)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CqDoorbellRecord<T> {
    /// Writes the consumer index.
    pub fn set_consumer_index(&mut self, ci: u32) {
        set_be32(self.buffer.as_mut(), field::WORD0, ci & 0x00ff_ffff);
    }
    /// Writes the arm word.
    pub fn set_arm(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::WORD1, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_record_words() {
        let mut b = [0xa5u8; 8];
        let mut r = QpDoorbellRecord::new_unchecked(&mut b[..]);
        r.set_recv_counter(0x0102);
        r.set_send_counter(0xfffe);
        assert_eq!(b, [0, 0, 1, 2, 0, 0, 0xff, 0xfe]);
        let r = QpDoorbellRecord::new_checked(&b[..]).unwrap();
        assert_eq!((r.recv_counter(), r.send_counter()), (0x0102, 0xfffe));
    }

    #[test]
    fn cq_record_masks_ci() {
        let mut b = [0u8; 8];
        CqDoorbellRecord::new_unchecked(&mut b[..]).set_consumer_index(0x0123_4567);
        assert_eq!(&b[..4], &[0, 0x23, 0x45, 0x67]);
    }
}
