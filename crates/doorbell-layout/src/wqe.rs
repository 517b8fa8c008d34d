//! Send and receive WQE segments (mlx5 reference §5, §7; `struct mlx5_wqe_*_seg`
//! in `mlx5dv.h`).
//!
//! A send WQE is a control segment followed by the segments its opcode needs,
//! in 16-byte units ("DS"), occupying `ceil(ds * 16 / 64)` 64-byte basic blocks
//! (WQEBBs) of the send queue. A receive WQE is an array of data segments ended
//! by a terminator whose lkey is [`doorbell_types::Mkey::INVALID`].

use crate::{be16, be32, be64, enum_with_unknown, fixed_view, set_be16, set_be32, set_be64};

/// Bytes in a send-queue basic block (MLX5_SEND_WQE_BB).
pub const WQEBB_LEN: usize = 64;
/// log2 of [`WQEBB_LEN`] (MLX5_SEND_WQE_SHIFT).
pub const WQEBB_SHIFT: u32 = 6;
/// Bytes in one descriptor unit, the unit of the control segment's DS count.
pub const DS_LEN: usize = 16;
/// Largest DS count the 6-bit field holds.
pub const MAX_DS: u8 = 0x3f;

/// Number of WQEBBs a WQE of `ds` descriptor units occupies.
pub const fn wqebbs_for_ds(ds: u8) -> u16 {
    (ds as usize * DS_LEN).div_ceil(WQEBB_LEN) as u16
}

enum_with_unknown! {
    /// Send WQE opcode, bits 7..0 of `opmod_idx_opcode` (MLX5_OPCODE_*).
    pub enum WqeOpcode(u8) {
        /// No operation.
        Nop = 0x00,
        /// SEND with invalidate.
        SendInval = 0x01,
        /// RDMA WRITE.
        RdmaWrite = 0x08,
        /// RDMA WRITE with immediate.
        RdmaWriteImm = 0x09,
        /// SEND.
        Send = 0x0a,
        /// SEND with immediate.
        SendImm = 0x0b,
        /// RDMA READ.
        RdmaRead = 0x10,
        /// Atomic compare and swap.
        AtomicCs = 0x11,
        /// Atomic fetch and add.
        AtomicFa = 0x12,
    }
}

/// `fm_ce_se` flags of the control segment (MLX5_WQE_CTRL_*).
pub mod ctrl_flags {
    /// Solicited event (IBV_SEND_SOLICITED).
    pub const SOLICITED: u8 = 1 << 1;
    /// CE = 2: write a CQE for this WQE.
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// Mask of the CE field.
    pub const CE_MASK: u8 = 3 << 2;
    /// Fence mode "small and fence", used by the provider for IBV_SEND_FENCE.
    pub const FENCE: u8 = 4 << 5;
    /// Initiator small fence.
    pub const INITIATOR_SMALL_FENCE: u8 = 1 << 5;
    /// Mask of the fence-mode field.
    pub const FM_MASK: u8 = 7 << 5;
}

fixed_view!(
    /// Control segment, 16 bytes, first in every send WQE (`struct mlx5_wqe_ctrl_seg`).
    CtrlSeg,
    field::CTRL_LEN
);

/// Field offsets of the WQE segments.
pub mod field {
    use crate::Field;

    /// `opmod_idx_opcode`, BE32: opmod 31..24, WQE index 23..8, opcode 7..0.
    pub const OPMOD_IDX_OPCODE: Field = 0..4;
    /// `qpn_ds`, BE32: QPN 31..8, DS count 5..0.
    pub const QPN_DS: Field = 4..8;
    /// WQE signature byte.
    pub const SIGNATURE: usize = 8;
    /// `dci_stream_channel_id`, BE16.
    pub const DCI_STREAM: Field = 9..11;
    /// `fm_ce_se` flags byte.
    pub const FM_CE_SE: usize = 11;
    /// Immediate data or invalidate key, BE32.
    pub const IMM: Field = 12..16;
    /// Length of the control segment.
    pub const CTRL_LEN: usize = IMM.end;

    /// Remote virtual address, BE64.
    pub const RADDR: Field = 0..8;
    /// Remote key, BE32.
    pub const RKEY: Field = 8..12;
    /// Reserved, zero.
    pub const RADDR_RSVD: Field = 12..16;
    /// Length of the remote-address segment.
    pub const RADDR_LEN: usize = RADDR_RSVD.end;

    /// Byte count, BE32 (bit 31 set marks an inline header instead).
    pub const BYTE_COUNT: Field = 0..4;
    /// Local key, BE32.
    pub const LKEY: Field = 4..8;
    /// Local address, BE64.
    pub const ADDR: Field = 8..16;
    /// Length of a data (scatter/gather) segment.
    pub const DATA_LEN: usize = ADDR.end;

    /// SRQ next segment: reserved, BE16.
    pub const SRQ_NEXT_RSVD0: Field = 0..2;
    /// SRQ next segment: `next_wqe_index`, BE16: the WQE the device takes
    /// after this one.
    pub const SRQ_NEXT_WQE_INDEX: Field = 2..4;
    /// SRQ next segment: signature byte and reserved bytes.
    pub const SRQ_NEXT_RSVD1: Field = 4..16;
    /// Length of the SRQ next segment (`struct mlx5_wqe_srq_next_seg`).
    pub const SRQ_NEXT_LEN: usize = SRQ_NEXT_RSVD1.end;

    /// Inline header: BE32 byte count | 0x8000_0000.
    pub const INLINE_BYTE_COUNT: Field = 0..4;
    /// Length of the inline header.
    pub const INLINE_HDR_LEN: usize = INLINE_BYTE_COUNT.end;

    /// Swap value (CS) or addend (FA), BE64.
    pub const SWAP_ADD: Field = 0..8;
    /// Compare value (CS), BE64.
    pub const COMPARE: Field = 8..16;
    /// Length of the atomic segment.
    pub const ATOMIC_LEN: usize = COMPARE.end;

    /// Datagram segment (`struct mlx5_wqe_av`): Q_Key, BE32.
    pub const AV_QKEY: Field = 0..4;
    /// Reserved half of the 8-byte key field (zero).
    pub const AV_RSVD_KEY: Field = 4..8;
    /// Remote QPN | 0x8000_0000 (extended AV flag), BE32.
    pub const AV_DQP: Field = 8..12;
    /// Static rate and service level.
    pub const AV_STAT_RATE_SL: usize = 12;
    /// Flow-label MSB / source path bits.
    pub const AV_FL_MLID: usize = 13;
    /// Remote LID, BE16.
    pub const AV_RLID: Field = 14..16;
    /// Remote MAC address.
    pub const AV_RMAC: Field = 20..26;
    /// Traffic class.
    pub const AV_TCLASS: usize = 26;
    /// Hop limit.
    pub const AV_HOP_LIMIT: usize = 27;
    /// GRH flag, GID index and flow label, BE32.
    pub const AV_GRH_GID_FL: Field = 28..32;
    /// Remote GID.
    pub const AV_RGID: Field = 32..48;
    /// Length of the datagram segment.
    pub const AV_LEN: usize = AV_RGID.end;

    /// Length of the UMR control segment (`struct mlx5_wqe_umr_ctrl_seg`).
    /// doorbell builds no UMR WQEs; the provider sizes RC and UC send WQEs
    /// with room for one, as rdma-core's `_sq_overhead` does for memory
    /// window binds and local invalidations.
    pub const UMR_CTRL_LEN: usize = 48;
    /// Length of the mkey context segment (`struct
    /// mlx5_wqe_mkey_context_seg`).
    pub const MKEY_CONTEXT_LEN: usize = 64;
    /// Length of one KLM entry (`struct mlx5_wqe_umr_klm_seg`).
    pub const UMR_KLM_LEN: usize = 16;
}

/// Bit 31 of an inline header's byte count (MLX5_INLINE_SEG).
pub const INLINE_SEG_FLAG: u32 = 0x8000_0000;
/// Bit 31 of the datagram segment's remote-QPN word (MLX5_EXTENDED_UD_AV).
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// Opcode modifier, bits 31..24 of the first word.
    pub fn opmod(&self) -> u8 {
        (be32(self.buffer.as_ref(), field::OPMOD_IDX_OPCODE) >> 24) as u8
    }
    /// WQE index: the producer counter in WQEBBs where this WQE starts.
    pub fn wqe_index(&self) -> u16 {
        (be32(self.buffer.as_ref(), field::OPMOD_IDX_OPCODE) >> 8) as u16
    }
    /// Opcode.
    pub fn opcode(&self) -> WqeOpcode {
        WqeOpcode::from(self.buffer.as_ref()[field::OPMOD_IDX_OPCODE.end - 1])
    }
    /// QP number, bits 31..8 of the second word.
    pub fn qpn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::QPN_DS) >> 8
    }
    /// WQE size in 16-byte units, bits 5..0 of the second word.
    pub fn ds(&self) -> u8 {
        (be32(self.buffer.as_ref(), field::QPN_DS) & 0x3f) as u8
    }
    /// Signature byte.
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }
    /// `fm_ce_se` flags ([`ctrl_flags`]).
    pub fn fm_ce_se(&self) -> u8 {
        self.buffer.as_ref()[field::FM_CE_SE]
    }
    /// True if the WQE asks for a CQE.
    pub fn is_signaled(&self) -> bool {
        self.fm_ce_se() & ctrl_flags::CE_MASK == ctrl_flags::CQ_UPDATE
    }
    /// True if the WQE carries the solicited-event flag.
    pub fn is_solicited(&self) -> bool {
        self.fm_ce_se() & ctrl_flags::SOLICITED != 0
    }
    /// Immediate data (or invalidate key) as the raw big-endian word.
    pub fn imm(&self) -> u32 {
        be32(self.buffer.as_ref(), field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    /// Sets opcode modifier, WQE index and opcode (the first word).
    pub fn set_opmod_idx_opcode(&mut self, opmod: u8, wqe_index: u16, opcode: WqeOpcode) {
        let v =
            (u32::from(opmod) << 24) | (u32::from(wqe_index) << 8) | u32::from(u8::from(opcode));
        set_be32(self.buffer.as_mut(), field::OPMOD_IDX_OPCODE, v);
    }
    /// Sets QP number and DS count (the second word).
    pub fn set_qpn_ds(&mut self, qpn: u32, ds: u8) {
        let v = ((qpn & 0x00ff_ffff) << 8) | u32::from(ds & MAX_DS);
        set_be32(self.buffer.as_mut(), field::QPN_DS, v);
    }
    /// Sets the signature byte.
    pub fn set_signature(&mut self, v: u8) {
        self.buffer.as_mut()[field::SIGNATURE] = v;
    }
    /// Sets the DCI stream channel (zero for RC/UC/UD).
    pub fn set_dci_stream(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::DCI_STREAM, v);
    }
    /// Sets the `fm_ce_se` flags.
    pub fn set_fm_ce_se(&mut self, v: u8) {
        self.buffer.as_mut()[field::FM_CE_SE] = v;
    }
    /// Sets the immediate word: `v` is the value as a host integer and is
    /// stored big-endian, so reading it back with [`CtrlSeg::imm`] gives `v`.
    pub fn set_imm(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::IMM, v);
    }
}

fixed_view!(
    /// Remote address segment, 16 bytes (`struct mlx5_wqe_raddr_seg`).
    RaddrSeg,
    field::RADDR_LEN
);

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// Remote virtual address.
    pub fn raddr(&self) -> u64 {
        be64(self.buffer.as_ref(), field::RADDR)
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::RKEY)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RaddrSeg<T> {
    /// Sets the remote virtual address.
    pub fn set_raddr(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::RADDR, v);
    }
    /// Sets the remote key and clears the reserved word.
    pub fn set_rkey(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::RKEY, v);
        set_be32(self.buffer.as_mut(), field::RADDR_RSVD, 0);
    }
}

fixed_view!(
    /// The 16-byte segment an SRQ WQE starts with (`struct
    /// mlx5_wqe_srq_next_seg`, mlx5 reference §7): the index of the next WQE
    /// of the SRQ's list. Data segments follow it.
    SrqNextSeg,
    field::SRQ_NEXT_LEN
);

impl<T: AsRef<[u8]>> SrqNextSeg<T> {
    /// The WQE after this one.
    pub fn next_wqe_index(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRQ_NEXT_WQE_INDEX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SrqNextSeg<T> {
    /// Sets the WQE after this one.
    pub fn set_next_wqe_index(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::SRQ_NEXT_WQE_INDEX, v);
    }
}

fixed_view!(
    /// Data pointer (scatter/gather) segment, 16 bytes (`struct mlx5_wqe_data_seg`).
    /// Receive WQEs are arrays of these.
    DataSeg,
    field::DATA_LEN
);

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Byte count.
    pub fn byte_count(&self) -> u32 {
        be32(self.buffer.as_ref(), field::BYTE_COUNT)
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LKEY)
    }
    /// Local address.
    pub fn addr(&self) -> u64 {
        be64(self.buffer.as_ref(), field::ADDR)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
    /// Sets the byte count.
    pub fn set_byte_count(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::BYTE_COUNT, v);
    }
    /// Sets the local key.
    pub fn set_lkey(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::LKEY, v);
    }
    /// Sets the local address.
    pub fn set_addr(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::ADDR, v);
    }
}

fixed_view!(
    /// Inline data header, 4 bytes (`struct mlx5_wqe_inline_seg`); the data follows it.
    InlineSeg,
    field::INLINE_HDR_LEN
);

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// True if bit 31 marks this as an inline header.
    pub fn is_inline(&self) -> bool {
        be32(self.buffer.as_ref(), field::INLINE_BYTE_COUNT) & INLINE_SEG_FLAG != 0
    }
    /// Number of inline bytes that follow.
    pub fn byte_count(&self) -> u32 {
        be32(self.buffer.as_ref(), field::INLINE_BYTE_COUNT) & !INLINE_SEG_FLAG
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InlineSeg<T> {
    /// Writes the header for `len` inline bytes.
    pub fn set_byte_count(&mut self, len: u32) {
        set_be32(
            self.buffer.as_mut(),
            field::INLINE_BYTE_COUNT,
            len | INLINE_SEG_FLAG,
        );
    }
}

/// DS units taken by an inline segment carrying `len` bytes (zero when empty).
pub const fn inline_ds(len: usize) -> u8 {
    if len == 0 {
        0
    } else {
        (len + field::INLINE_HDR_LEN).div_ceil(DS_LEN) as u8
    }
}

fixed_view!(
    /// Atomic segment, 16 bytes (`struct mlx5_wqe_atomic_seg`).
    AtomicSeg,
    field::ATOMIC_LEN
);

impl<T: AsRef<[u8]>> AtomicSeg<T> {
    /// Swap value (compare-and-swap) or addend (fetch-and-add).
    pub fn swap_add(&self) -> u64 {
        be64(self.buffer.as_ref(), field::SWAP_ADD)
    }
    /// Compare value (compare-and-swap).
    pub fn compare(&self) -> u64 {
        be64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicSeg<T> {
    /// Sets the swap value or addend.
    pub fn set_swap_add(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::SWAP_ADD, v);
    }
    /// Sets the compare value.
    pub fn set_compare(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::COMPARE, v);
    }
}

fixed_view!(
    /// Datagram segment (UD address vector), 48 bytes (`struct mlx5_wqe_av`).
    DatagramSeg,
    field::AV_LEN
);

impl<T: AsRef<[u8]>> DatagramSeg<T> {
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::AV_QKEY)
    }
    /// Destination QPN (without the extended-AV flag).
    pub fn dqpn(&self) -> u32 {
        be32(self.buffer.as_ref(), field::AV_DQP) & 0x00ff_ffff
    }
    /// Service level (low nibble of `stat_rate_sl`).
    pub fn sl(&self) -> u8 {
        self.buffer.as_ref()[field::AV_STAT_RATE_SL] & 0x0f
    }
    /// Remote LID.
    pub fn rlid(&self) -> u16 {
        be16(self.buffer.as_ref(), field::AV_RLID)
    }
    /// Remote MAC.
    pub fn rmac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::AV_RMAC]);
        m
    }
    /// Traffic class.
    pub fn tclass(&self) -> u8 {
        self.buffer.as_ref()[field::AV_TCLASS]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::AV_HOP_LIMIT]
    }
    /// GRH flag, GID index and flow label word.
    pub fn grh_gid_fl(&self) -> u32 {
        be32(self.buffer.as_ref(), field::AV_GRH_GID_FL)
    }
    /// Remote GID.
    pub fn rgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::AV_RGID]);
        g
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DatagramSeg<T> {
    /// Sets the Q_Key and clears the reserved word after it.
    pub fn set_qkey(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::AV_QKEY, v);
        set_be32(self.buffer.as_mut(), field::AV_RSVD_KEY, 0);
    }
    /// Sets the flow-label MSB / source path bits byte.
    pub fn set_fl_mlid(&mut self, v: u8) {
        self.buffer.as_mut()[field::AV_FL_MLID] = v;
    }
    /// Sets the destination QPN and the extended-AV flag.
    pub fn set_dqpn(&mut self, qpn: u32) {
        set_be32(
            self.buffer.as_mut(),
            field::AV_DQP,
            (qpn & 0x00ff_ffff) | EXTENDED_UD_AV,
        );
    }
    /// Sets the service level (rate bits cleared).
    pub fn set_sl(&mut self, sl: u8) {
        self.buffer.as_mut()[field::AV_STAT_RATE_SL] = sl & 0x0f;
    }
    /// Sets the remote LID.
    pub fn set_rlid(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::AV_RLID, v);
    }
    /// Sets the remote MAC.
    pub fn set_rmac(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::AV_RMAC].copy_from_slice(&mac);
    }
    /// Sets the traffic class.
    pub fn set_tclass(&mut self, v: u8) {
        self.buffer.as_mut()[field::AV_TCLASS] = v;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::AV_HOP_LIMIT] = v;
    }
    /// Sets the GRH flag, GID index and flow label word.
    pub fn set_grh_gid_fl(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::AV_GRH_GID_FL, v);
    }
    /// Sets the remote GID.
    pub fn set_rgid(&mut self, gid: [u8; 16]) {
        self.buffer.as_mut()[field::AV_RGID].copy_from_slice(&gid);
    }
}

/// The GRH-present flag in [`DatagramSeg::grh_gid_fl`] (MLX5_EXTENDED_UD_AV's companion, bit 30).
pub const AV_GRH_FLAG: u32 = 1 << 30;

/// Computes the WQE signature over its first `ds * 16` bytes: byte-wise XOR,
/// inverted, with the signature byte itself counted as zero.
pub fn wqe_signature(wqe: &[u8]) -> u8 {
    let x = wqe
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != field::SIGNATURE)
        .fold(0u8, |acc, (_, b)| acc ^ b);
    !x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_deconstruct() {
        let bytes = [
            0x00, 0x12, 0x34, 0x08, // opmod 0, idx 0x1234, RDMA_WRITE
            0x00, 0x01, 0x2a, 0x03, // qpn 0x12a, ds 3
            0x00, 0x00, 0x00, 0x08, // sig, stream, fm_ce_se = CQ_UPDATE
            0xde, 0xad, 0xbe, 0xef,
        ];
        let c = CtrlSeg::new_checked(&bytes[..]).unwrap();
        assert_eq!(c.wqe_index(), 0x1234);
        assert_eq!(c.opcode(), WqeOpcode::RdmaWrite);
        assert_eq!(c.qpn(), 0x12a);
        assert_eq!(c.ds(), 3);
        assert!(c.is_signaled());
        assert!(!c.is_solicited());
        assert_eq!(c.imm(), 0xdead_beef);
    }

    #[test]
    fn ctrl_construct_writes_every_field() {
        let mut buf = [0xa5u8; 16];
        let mut c = CtrlSeg::new_unchecked(&mut buf[..]);
        c.set_opmod_idx_opcode(0, 0xfffe, WqeOpcode::SendImm);
        c.set_qpn_ds(0xab_cdef, 2);
        c.set_signature(0);
        c.set_dci_stream(0);
        c.set_fm_ce_se(ctrl_flags::CQ_UPDATE | ctrl_flags::SOLICITED);
        c.set_imm(0x0102_0304);
        assert_eq!(
            buf,
            [
                0, 0xff, 0xfe, 0x0b, 0xab, 0xcd, 0xef, 0x02, 0, 0, 0, 0x0a, 1, 2, 3, 4
            ]
        );
    }

    #[test]
    fn srq_next_segment_names_bytes_2_and_3() {
        let mut buf = [0xa5u8; 16];
        SrqNextSeg::new_unchecked(&mut buf[..]).set_next_wqe_index(0x1234);
        assert_eq!(buf[..4], [0xa5, 0xa5, 0x12, 0x34]);
        assert_eq!(buf[4..], [0xa5; 12]);
        let n = SrqNextSeg::new_checked(&buf[..]).unwrap();
        assert_eq!(n.next_wqe_index(), 0x1234);
    }

    #[test]
    fn data_and_raddr_roundtrip() {
        let mut buf = [0xa5u8; 32];
        let (a, b) = buf.split_at_mut(16);
        let mut r = RaddrSeg::new_unchecked(a);
        r.set_raddr(0x1122_3344_5566_7788);
        r.set_rkey(0x99aa_bbcc);
        let mut d = DataSeg::new_unchecked(b);
        d.set_byte_count(4096);
        d.set_lkey(0x100);
        d.set_addr(0x7f00_0000_1000);
        assert_eq!(
            &buf[..16],
            &[
                0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0, 0, 0, 0
            ]
        );
        let d = DataSeg::new_checked(&buf[16..]).unwrap();
        assert_eq!(
            (d.byte_count(), d.lkey(), d.addr()),
            (4096, 0x100, 0x7f00_0000_1000)
        );
    }

    #[test]
    fn inline_sizes() {
        assert_eq!(inline_ds(0), 0);
        assert_eq!(inline_ds(1), 1);
        assert_eq!(inline_ds(12), 1);
        assert_eq!(inline_ds(13), 2);
        let mut b = [0u8; 4];
        InlineSeg::new_unchecked(&mut b[..]).set_byte_count(60);
        assert_eq!(b, [0x80, 0, 0, 60]);
        let s = InlineSeg::new_checked(&b[..]).unwrap();
        assert!(s.is_inline());
        assert_eq!(s.byte_count(), 60);
    }

    #[test]
    fn wqebb_rounding() {
        assert_eq!(wqebbs_for_ds(1), 1);
        assert_eq!(wqebbs_for_ds(4), 1);
        assert_eq!(wqebbs_for_ds(5), 2);
        assert_eq!(wqebbs_for_ds(63), 16);
    }

    #[test]
    fn short_buffer_is_an_error() {
        assert!(CtrlSeg::new_checked(&[0u8; 15][..]).is_err());
        assert!(DatagramSeg::new_checked(&[0u8; 47][..]).is_err());
    }

    #[test]
    fn signature_ignores_its_own_byte() {
        let mut w = [0u8; 32];
        w[0] = 0x0f;
        w[20] = 0xf0;
        let s = wqe_signature(&w);
        assert_eq!(s, !0xff);
        w[field::SIGNATURE] = s;
        assert_eq!(wqe_signature(&w), s);
    }

    proptest::proptest! {
        #[test]
        fn ctrl_setters_roundtrip(opmod: u8, idx: u16, op: u8, qpn in 0u32..0x100_0000, ds in 0u8..64, f: u8, imm: u32) {
            let mut buf = [0u8; 16];
            let mut c = CtrlSeg::new_unchecked(&mut buf[..]);
            c.set_opmod_idx_opcode(opmod, idx, WqeOpcode::from(op));
            c.set_qpn_ds(qpn, ds);
            c.set_fm_ce_se(f);
            c.set_imm(imm);
            let c = CtrlSeg::new_checked(&buf[..]).unwrap();
            proptest::prop_assert_eq!(c.opmod(), opmod);
            proptest::prop_assert_eq!(c.wqe_index(), idx);
            proptest::prop_assert_eq!(u8::from(c.opcode()), op);
            proptest::prop_assert_eq!(c.qpn(), qpn);
            proptest::prop_assert_eq!(c.ds(), ds);
            proptest::prop_assert_eq!(c.fm_ce_se(), f);
            proptest::prop_assert_eq!(c.imm(), imm);
        }
    }
}
