//! The 64-byte completion queue entry (mlx5 reference §8; `struct mlx5_cqe64`
//! and `struct mlx5_err_cqe` in `mlx5dv.h`).
//!
//! The device writes every byte but `op_own` first and `op_own` last, so a
//! consumer that sees the owner bit it expects may read the rest after a read
//! barrier.

use crate::{be16, be32, be64, enum_with_unknown, fixed_view, set_be16, set_be32, set_be64};

/// Bytes in a CQE.
pub const CQE_LEN: usize = field::OP_OWN + 1;

/// Field offsets of the CQE.
pub mod field {
    use crate::Field;

    /// `flags_rqpn`, BE32: bits 29..28 GRH present, 27..24 SL, 23..0 remote QPN.
    pub const FLAGS_RQPN: Field = 24..28;
    /// `srqn_uidx`, BE32, bits 23..0.
    pub const SRQN_UIDX: Field = 32..36;
    /// `imm_inval_pkey`, BE32: immediate data or invalidated rkey.
    pub const IMM_INVAL_PKEY: Field = 36..40;
    /// `byte_cnt`, BE32: bytes received, or read (requester READ).
    pub const BYTE_CNT: Field = 44..48;
    /// `timestamp`, BE64.
    pub const TIMESTAMP: Field = 48..56;
    /// Error CQE: vendor syndrome.
    pub const VENDOR_ERR_SYND: usize = 54;
    /// Error CQE: syndrome.
    pub const SYNDROME: usize = 55;
    /// `sop_drop_qpn`, BE32: bits 31..24 send opcode (requester), 23..0 QPN.
    pub const SOP_DROP_QPN: Field = 56..60;
    /// `wqe_counter`, BE16.
    pub const WQE_COUNTER: Field = 60..62;
    /// Signature byte.
    pub const SIGNATURE: usize = 62;
    /// `op_own`: opcode 7..4, format 3..2, solicited 1, owner 0.
    pub const OP_OWN: usize = 63;
}

enum_with_unknown! {
    /// CQE opcode, `op_own >> 4` (MLX5_CQE_*).
    pub enum CqeOpcode(u8) {
        /// Send-side completion.
        Req = 0,
        /// RDMA WRITE with immediate received.
        RespWrImm = 1,
        /// SEND received.
        RespSend = 2,
        /// SEND with immediate received.
        RespSendImm = 3,
        /// SEND with invalidate received.
        RespSendInv = 4,
        /// CQ resize.
        ResizeCq = 5,
        /// No packet.
        NoPacket = 6,
        /// Signature error.
        SigErr = 12,
        /// Requester error.
        ReqErr = 13,
        /// Responder error.
        RespErr = 14,
        /// Empty slot.
        Invalid = 15,
    }
}

enum_with_unknown! {
    /// Error CQE syndrome (MLX5_CQE_SYNDROME_*), reference §8.4.
    pub enum Syndrome(u8) {
        /// Local length error.
        LocalLengthErr = 0x01,
        /// Local QP operation error.
        LocalQpOpErr = 0x02,
        /// Local protection error.
        LocalProtErr = 0x04,
        /// Work request flushed.
        WrFlushErr = 0x05,
        /// Memory window bind error.
        MwBindErr = 0x06,
        /// Bad response.
        BadRespErr = 0x10,
        /// Local access error.
        LocalAccessErr = 0x11,
        /// Remote invalid request.
        RemoteInvalReqErr = 0x12,
        /// Remote access error.
        RemoteAccessErr = 0x13,
        /// Remote operational error.
        RemoteOpErr = 0x14,
        /// Transport retry counter exceeded.
        TransportRetryExcErr = 0x15,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = 0x16,
        /// Remote aborted.
        RemoteAbortedErr = 0x22,
    }
}

/// `op_own` bit 0: the owner bit.
pub const OWNER_MASK: u8 = 0x01;
/// `op_own` bit 1: solicited event.
pub const SOLICITED_MASK: u8 = 0x02;
/// `op_own` as initialised by the provider: opcode INVALID, owner 0.
pub const OP_OWN_INIT: u8 = 0xf0;
/// Shift of the opcode in `op_own`.
pub const OPCODE_SHIFT: u32 = 4;
/// Shift of the GRH-present bits in `flags_rqpn`.
pub const GRH_SHIFT: u32 = 28;
/// Shift of the SL bits in `flags_rqpn`.
pub const SL_SHIFT: u32 = 24;
/// In the SL bits of a responder's UD CQE over RoCE, mlx5 reports the
/// packet's type instead (the PRM, as UCX's `uct_ud_iface_check_grh` reads
/// it): this bit when the frame carried a UDP header (RoCEv2),
pub const ROCE_PKT_UDP: u8 = 0x8;
/// and in bits 2..0 its L3 header: 0 a GRH (RoCE v1), this an IPv6 one,
pub const ROCE_PKT_IPV6: u8 = 0x1;
/// or this an IPv4 one.
pub const ROCE_PKT_IPV4: u8 = 0x2;

fixed_view!(
    /// A 64-byte CQE, success or error layout.
    Cqe64,
    CQE_LEN
);

impl<T: AsRef<[u8]>> Cqe64<T> {
    /// CQE opcode.
    pub fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from(self.op_own() >> OPCODE_SHIFT)
    }
    /// The raw `op_own` byte.
    pub fn op_own(&self) -> u8 {
        self.buffer.as_ref()[field::OP_OWN]
    }
    /// Owner bit.
    pub fn owner(&self) -> bool {
        self.op_own() & OWNER_MASK != 0
    }
    /// Solicited-event bit.
    pub fn is_solicited(&self) -> bool {
        self.op_own() & SOLICITED_MASK != 0
    }
    /// Remote QPN (UD receive).
    pub fn rqpn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FLAGS_RQPN) & 0x00ff_ffff
    }
    /// GRH-present bits (non-zero: a GRH precedes the received data).
    pub fn grh(&self) -> u8 {
        ((be32(self.buffer.as_ref(), field::FLAGS_RQPN) >> GRH_SHIFT) & 0x3) as u8
    }
    /// Service level.
    pub fn sl(&self) -> u8 {
        ((be32(self.buffer.as_ref(), field::FLAGS_RQPN) >> SL_SHIFT) & 0xf) as u8
    }
    /// SRQ number or user index.
    pub fn srqn_uidx(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SRQN_UIDX) & 0x00ff_ffff
    }
    /// Immediate data as the raw word (already in wire order).
    pub fn imm(&self) -> u32 {
        be32(self.buffer.as_ref(), field::IMM_INVAL_PKEY)
    }
    /// Byte count.
    pub fn byte_cnt(&self) -> u32 {
        be32(self.buffer.as_ref(), field::BYTE_CNT)
    }
    /// Timestamp.
    pub fn timestamp(&self) -> u64 {
        be64(self.buffer.as_ref(), field::TIMESTAMP)
    }
    /// Send WQE opcode (requester CQEs), bits 31..24 of `sop_drop_qpn`.
    pub fn send_opcode(&self) -> u8 {
        (be32(self.buffer.as_ref(), field::SOP_DROP_QPN) >> 24) as u8
    }
    /// Local QPN.
    pub fn qpn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SOP_DROP_QPN) & 0x00ff_ffff
    }
    /// WQE counter.
    pub fn wqe_counter(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WQE_COUNTER)
    }
    /// Error syndrome (error CQEs).
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from(self.buffer.as_ref()[field::SYNDROME])
    }
    /// Vendor error syndrome (error CQEs).
    pub fn vendor_syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::VENDOR_ERR_SYND]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe64<T> {
    /// Zeroes every byte but `op_own`.
    pub fn clear_body(&mut self) {
        self.buffer.as_mut()[..field::OP_OWN].fill(0);
    }
    /// Sets `op_own` from opcode, solicited flag and owner bit.
    pub fn set_op_own(&mut self, opcode: CqeOpcode, solicited: bool, owner: bool) {
        let v = (u8::from(opcode) << OPCODE_SHIFT)
            | if solicited { SOLICITED_MASK } else { 0 }
            | u8::from(owner);
        self.buffer.as_mut()[field::OP_OWN] = v;
    }
    /// Sets remote QPN, SL and GRH bits.
    pub fn set_flags_rqpn(&mut self, rqpn: u32, sl: u8, grh: u8) {
        let v = (u32::from(grh & 3) << GRH_SHIFT)
            | (u32::from(sl & 0xf) << SL_SHIFT)
            | (rqpn & 0x00ff_ffff);
        set_be32(self.buffer.as_mut(), field::FLAGS_RQPN, v);
    }
    /// Sets the immediate word.
    pub fn set_imm(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::IMM_INVAL_PKEY, v);
    }
    /// Sets the byte count.
    pub fn set_byte_cnt(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::BYTE_CNT, v);
    }
    /// Sets the timestamp.
    pub fn set_timestamp(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::TIMESTAMP, v);
    }
    /// Sets send opcode and QPN.
    pub fn set_sop_qpn(&mut self, opcode: u8, qpn: u32) {
        set_be32(
            self.buffer.as_mut(),
            field::SOP_DROP_QPN,
            (u32::from(opcode) << 24) | (qpn & 0x00ff_ffff),
        );
    }
    /// Sets the SRQ number or user index (24 bits).
    pub fn set_srqn_uidx(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::SRQN_UIDX, v & 0x00ff_ffff);
    }
    /// Sets the WQE counter.
    pub fn set_wqe_counter(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::WQE_COUNTER, v);
    }
    /// Sets the error syndrome and vendor syndrome.
    pub fn set_syndrome(&mut self, s: Syndrome, vendor: u8) {
        self.buffer.as_mut()[field::SYNDROME] = u8::from(s);
        self.buffer.as_mut()[field::VENDOR_ERR_SYND] = vendor;
    }
}

/// The owner bit a CQE at free-running index `n` of a ring of `ncqe`
/// entries (a power of two) must carry to be valid: bit `log2(ncqe)` of `n`.
pub const fn owner_for(n: u32, ncqe: u32) -> bool {
    n & ncqe != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn construct_success_cqe() {
        let mut b = [0xa5u8; 64];
        let mut c = Cqe64::new_unchecked(&mut b[..]);
        c.clear_body();
        c.set_byte_cnt(4096);
        c.set_sop_qpn(0x08, 0x1234);
        c.set_wqe_counter(7);
        c.set_op_own(CqeOpcode::Req, false, true);
        assert_eq!(&b[44..48], &[0, 0, 0x10, 0]);
        assert_eq!(&b[56..64], &[0x08, 0, 0x12, 0x34, 0, 7, 0, 0x01]);
        assert!(b[..44].iter().all(|&x| x == 0));
        let c = Cqe64::new_checked(&b[..]).unwrap();
        assert_eq!(c.opcode(), CqeOpcode::Req);
        assert!(c.owner());
        assert_eq!(c.qpn(), 0x1234);
    }

    #[test]
    fn error_cqe_fields() {
        let mut b = [0u8; 64];
        let mut c = Cqe64::new_unchecked(&mut b[..]);
        c.set_syndrome(Syndrome::WrFlushErr, 0x79);
        c.set_op_own(CqeOpcode::ReqErr, false, false);
        assert_eq!(b[55], 0x05);
        assert_eq!(b[54], 0x79);
        assert_eq!(b[63], 0xd0);
        assert_eq!(
            Cqe64::new_checked(&b[..]).unwrap().syndrome(),
            Syndrome::WrFlushErr
        );
    }

    #[test]
    fn owner_alternates_per_pass() {
        assert!(!owner_for(0, 8));
        assert!(!owner_for(7, 8));
        assert!(owner_for(8, 8));
        assert!(!owner_for(16, 8));
    }

    #[test]
    fn init_value_is_invalid_owner_zero() {
        let mut b = [0u8; 64];
        b[63] = OP_OWN_INIT;
        let c = Cqe64::new_checked(&b[..]).unwrap();
        assert_eq!(c.opcode(), CqeOpcode::Invalid);
        assert!(!c.owner());
    }
}
