//! Base Transport Header (IBTA Vol 1 §9.2; reference A.2) and the opcode table
//! (reference A.5).

use doorbell_types::{Psn, Qpn};

use crate::{Error, Result, be16, be24, enum_with_unknown, fixed_view, set_be16, set_be24};

/// Field offsets of the BTH.
pub mod field {
    use crate::Field;

    /// OpCode byte.
    pub const OPCODE: usize = 0;
    /// SE (bit 7), MigReq (bit 6), PadCnt (bits 5..4), TVer (bits 3..0).
    pub const FLAGS: usize = 1;
    /// Solicited-event bit in [`FLAGS`].
    pub const SE_BIT: u8 = 0x80;
    /// MigReq bit in [`FLAGS`].
    pub const MIG_REQ_BIT: u8 = 0x40;
    /// Mask of PadCnt in [`FLAGS`].
    pub const PAD_COUNT_MASK: u8 = 0x30;
    /// Shift of PadCnt in [`FLAGS`].
    pub const PAD_COUNT_SHIFT: u32 = 4;
    /// Mask of the transport header version in [`FLAGS`].
    pub const TVER_MASK: u8 = 0x0f;
    /// Partition key, BE16.
    pub const PKEY: Field = 2..4;
    /// FECN (bit 7), BECN (bit 6), six reserved bits. The ICRC masks this byte.
    pub const FECN_BECN: usize = 4;
    /// FECN bit in [`FECN_BECN`].
    pub const FECN_BIT: u8 = 0x80;
    /// BECN bit in [`FECN_BECN`].
    pub const BECN_BIT: u8 = 0x40;
    /// Destination QP, BE24.
    pub const DEST_QP: Field = 5..8;
    /// AckReq (bit 7) and seven reserved bits.
    pub const ACK_REQ: usize = 8;
    /// AckReq bit in [`ACK_REQ`].
    pub const ACK_REQ_BIT: u8 = 0x80;
    /// Packet sequence number, BE24.
    pub const PSN: Field = 9..12;
}

/// The transport bits of the UC opcodes (reference A.5).
const UC_TRANSPORT: u8 = 0x20;
/// The last operation UC has: RDMA WRITE Only with Immediate.
const UC_LAST_OP: u8 = 0x0b;

/// Length of the BTH.
pub const HEADER_LEN: usize = field::PSN.end;

/// The default partition key (full member of the default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// Bytes after the BTH of a CNP, reserved and zero (RoCEv2 annex A17.9.3).
pub const CNP_RESERVED_LEN: usize = 16;

enum_with_unknown! {
    /// BTH OpCode (reference A.5): the top three bits name the transport
    /// (000 RC, 001 UC, 011 UD, 100 CNP), the low five the operation.
    pub enum BthOpcode(u8) {
        /// RC SEND First.
        RcSendFirst = 0x00,
        /// RC SEND Middle.
        RcSendMiddle = 0x01,
        /// RC SEND Last.
        RcSendLast = 0x02,
        /// RC SEND Last with Immediate (ImmDt).
        RcSendLastWithImmediate = 0x03,
        /// RC SEND Only.
        RcSendOnly = 0x04,
        /// RC SEND Only with Immediate (ImmDt).
        RcSendOnlyWithImmediate = 0x05,
        /// RC RDMA WRITE First (RETH).
        RcRdmaWriteFirst = 0x06,
        /// RC RDMA WRITE Middle.
        RcRdmaWriteMiddle = 0x07,
        /// RC RDMA WRITE Last.
        RcRdmaWriteLast = 0x08,
        /// RC RDMA WRITE Last with Immediate (ImmDt).
        RcRdmaWriteLastWithImmediate = 0x09,
        /// RC RDMA WRITE Only (RETH).
        RcRdmaWriteOnly = 0x0a,
        /// RC RDMA WRITE Only with Immediate (RETH, ImmDt).
        RcRdmaWriteOnlyWithImmediate = 0x0b,
        /// RC RDMA READ Request (RETH).
        RcRdmaReadRequest = 0x0c,
        /// RC RDMA READ response First (AETH).
        RcRdmaReadResponseFirst = 0x0d,
        /// RC RDMA READ response Middle.
        RcRdmaReadResponseMiddle = 0x0e,
        /// RC RDMA READ response Last (AETH).
        RcRdmaReadResponseLast = 0x0f,
        /// RC RDMA READ response Only (AETH).
        RcRdmaReadResponseOnly = 0x10,
        /// RC Acknowledge (AETH).
        RcAck = 0x11,
        /// RC ATOMIC Acknowledge (AETH, AtomicAckETH).
        RcAtomicAck = 0x12,
        /// RC CmpSwap (AtomicETH).
        RcCompareSwap = 0x13,
        /// RC FetchAdd (AtomicETH).
        RcFetchAdd = 0x14,
        /// RC SEND Last with Invalidate (IETH).
        RcSendLastWithInvalidate = 0x16,
        /// RC SEND Only with Invalidate (IETH).
        RcSendOnlyWithInvalidate = 0x17,
        /// UC SEND First.
        UcSendFirst = 0x20,
        /// UC SEND Middle.
        UcSendMiddle = 0x21,
        /// UC SEND Last.
        UcSendLast = 0x22,
        /// UC SEND Last with Immediate (ImmDt).
        UcSendLastWithImmediate = 0x23,
        /// UC SEND Only.
        UcSendOnly = 0x24,
        /// UC SEND Only with Immediate (ImmDt).
        UcSendOnlyWithImmediate = 0x25,
        /// UC RDMA WRITE First (RETH).
        UcRdmaWriteFirst = 0x26,
        /// UC RDMA WRITE Middle.
        UcRdmaWriteMiddle = 0x27,
        /// UC RDMA WRITE Last.
        UcRdmaWriteLast = 0x28,
        /// UC RDMA WRITE Last with Immediate (ImmDt).
        UcRdmaWriteLastWithImmediate = 0x29,
        /// UC RDMA WRITE Only (RETH).
        UcRdmaWriteOnly = 0x2a,
        /// UC RDMA WRITE Only with Immediate (RETH, ImmDt).
        UcRdmaWriteOnlyWithImmediate = 0x2b,
        /// UD SEND Only (DETH).
        UdSendOnly = 0x64,
        /// UD SEND Only with Immediate (DETH, ImmDt).
        UdSendOnlyWithImmediate = 0x65,
        /// Congestion Notification Packet (16 reserved bytes).
        Cnp = 0x81,
    }
}

impl BthOpcode {
    /// True for the opcodes this crate names.
    pub const fn is_known(self) -> bool {
        !matches!(self, Self::Unknown(_))
    }

    /// The extension headers this opcode calls for, as [`ext_bit`]s:
    /// none for an unknown opcode or a CNP. One look-up; the `has_*`
    /// predicates, [`Self::ext_headers_len`] and
    /// [`crate::ExtHeaders::fits`] read it.
    pub const fn ext_bits(self) -> u8 {
        use ext_bit::*;
        match self {
            Self::RcRdmaWriteFirst
            | Self::RcRdmaWriteOnly
            | Self::RcRdmaReadRequest
            | Self::UcRdmaWriteFirst
            | Self::UcRdmaWriteOnly => RETH,
            Self::RcRdmaWriteOnlyWithImmediate | Self::UcRdmaWriteOnlyWithImmediate => RETH | IMMDT,
            Self::RcCompareSwap | Self::RcFetchAdd => ATOMIC_ETH,
            Self::RcRdmaReadResponseFirst
            | Self::RcRdmaReadResponseLast
            | Self::RcRdmaReadResponseOnly
            | Self::RcAck => AETH,
            Self::RcAtomicAck => AETH | ATOMIC_ACK_ETH,
            Self::RcSendLastWithImmediate
            | Self::RcSendOnlyWithImmediate
            | Self::RcRdmaWriteLastWithImmediate
            | Self::UcSendLastWithImmediate
            | Self::UcSendOnlyWithImmediate
            | Self::UcRdmaWriteLastWithImmediate => IMMDT,
            Self::RcSendLastWithInvalidate | Self::RcSendOnlyWithInvalidate => IETH,
            Self::UdSendOnly => DETH,
            Self::UdSendOnlyWithImmediate => DETH | IMMDT,
            _ => 0,
        }
    }

    /// A DETH follows the BTH (UD).
    pub const fn has_deth(self) -> bool {
        self.ext_bits() & ext_bit::DETH != 0
    }

    /// A RETH follows (WRITE First/Only, READ Request).
    pub const fn has_reth(self) -> bool {
        self.ext_bits() & ext_bit::RETH != 0
    }

    /// An AtomicETH follows (CmpSwap, FetchAdd).
    pub const fn has_atomic_eth(self) -> bool {
        self.ext_bits() & ext_bit::ATOMIC_ETH != 0
    }

    /// An AETH follows (ACK, ATOMIC ACK, READ response First/Last/Only).
    pub const fn has_aeth(self) -> bool {
        self.ext_bits() & ext_bit::AETH != 0
    }

    /// An AtomicAckETH follows the AETH (ATOMIC ACK).
    pub const fn has_atomic_ack_eth(self) -> bool {
        self.ext_bits() & ext_bit::ATOMIC_ACK_ETH != 0
    }

    /// An ImmDt is the last extension header (the `…WithImmediate` opcodes).
    pub const fn has_immdt(self) -> bool {
        self.ext_bits() & ext_bit::IMMDT != 0
    }

    /// An IETH is the last extension header (the `…WithInvalidate` opcodes).
    pub const fn has_ieth(self) -> bool {
        self.ext_bits() & ext_bit::IETH != 0
    }

    /// True for the Congestion Notification Packet.
    pub const fn is_cnp(self) -> bool {
        matches!(self, Self::Cnp)
    }

    /// True for requests: SEND, RDMA WRITE, RDMA READ Request and atomics.
    pub const fn is_request(self) -> bool {
        matches!(
            self,
            Self::RcSendFirst
                | Self::RcSendMiddle
                | Self::RcSendLast
                | Self::RcSendLastWithImmediate
                | Self::RcSendOnly
                | Self::RcSendOnlyWithImmediate
                | Self::RcRdmaWriteFirst
                | Self::RcRdmaWriteMiddle
                | Self::RcRdmaWriteLast
                | Self::RcRdmaWriteLastWithImmediate
                | Self::RcRdmaWriteOnly
                | Self::RcRdmaWriteOnlyWithImmediate
                | Self::RcRdmaReadRequest
                | Self::RcCompareSwap
                | Self::RcFetchAdd
                | Self::RcSendLastWithInvalidate
                | Self::RcSendOnlyWithInvalidate
                | Self::UcSendFirst
                | Self::UcSendMiddle
                | Self::UcSendLast
                | Self::UcSendLastWithImmediate
                | Self::UcSendOnly
                | Self::UcSendOnlyWithImmediate
                | Self::UcRdmaWriteFirst
                | Self::UcRdmaWriteMiddle
                | Self::UcRdmaWriteLast
                | Self::UcRdmaWriteLastWithImmediate
                | Self::UcRdmaWriteOnly
                | Self::UcRdmaWriteOnlyWithImmediate
                | Self::UdSendOnly
                | Self::UdSendOnlyWithImmediate
        )
    }

    /// True for the UC opcodes (0x20..=0x2b).
    pub const fn is_uc(self) -> bool {
        self.uc_as_rc().is_some()
    }

    /// The UC opcode of the same operation (0x20 + op, reference A.5), for
    /// the RC SEND and RDMA WRITE opcodes (0x00..=0x0b); `None` for the
    /// rest, which UC does not have.
    pub fn rc_as_uc(self) -> Option<Self> {
        let op = u8::from(self);
        (op <= UC_LAST_OP).then(|| Self::from(UC_TRANSPORT | op))
    }

    /// The RC opcode of the same operation, for the UC opcodes: the
    /// responder checks a UC packet's sequence by the same rules as RC's
    /// SEND and WRITE packets.
    pub const fn uc_as_rc(self) -> Option<Self> {
        use BthOpcode::*;
        Some(match self {
            UcSendFirst => RcSendFirst,
            UcSendMiddle => RcSendMiddle,
            UcSendLast => RcSendLast,
            UcSendLastWithImmediate => RcSendLastWithImmediate,
            UcSendOnly => RcSendOnly,
            UcSendOnlyWithImmediate => RcSendOnlyWithImmediate,
            UcRdmaWriteFirst => RcRdmaWriteFirst,
            UcRdmaWriteMiddle => RcRdmaWriteMiddle,
            UcRdmaWriteLast => RcRdmaWriteLast,
            UcRdmaWriteLastWithImmediate => RcRdmaWriteLastWithImmediate,
            UcRdmaWriteOnly => RcRdmaWriteOnly,
            UcRdmaWriteOnlyWithImmediate => RcRdmaWriteOnlyWithImmediate,
            _ => return None,
        })
    }

    /// True for responses: READ responses, ACK and ATOMIC ACK.
    pub const fn is_response(self) -> bool {
        matches!(
            self,
            Self::RcRdmaReadResponseFirst
                | Self::RcRdmaReadResponseMiddle
                | Self::RcRdmaReadResponseLast
                | Self::RcRdmaReadResponseOnly
                | Self::RcAck
                | Self::RcAtomicAck
        )
    }

    /// Bytes of headers between the BTH and the payload for this opcode: the
    /// sum of the extension headers the `has_*` predicates name, or
    /// [`CNP_RESERVED_LEN`] for a CNP. Zero for unknown opcodes.
    pub const fn ext_headers_len(self) -> usize {
        use ext_bit::*;
        /// `n` if `bit` is among `bits`.
        const fn len(bits: u8, bit: u8, n: usize) -> usize {
            if bits & bit != 0 { n } else { 0 }
        }
        if self.is_cnp() {
            return CNP_RESERVED_LEN;
        }
        let b = self.ext_bits();
        len(b, DETH, crate::deth::HEADER_LEN)
            + len(b, RETH, crate::reth::HEADER_LEN)
            + len(b, ATOMIC_ETH, crate::atomic_eth::HEADER_LEN)
            + len(b, AETH, crate::aeth::HEADER_LEN)
            + len(b, ATOMIC_ACK_ETH, crate::atomic_ack_eth::HEADER_LEN)
            + len(b, IMMDT, crate::immdt::HEADER_LEN)
            + len(b, IETH, crate::ieth::HEADER_LEN)
    }
}

/// The extension headers of a packet as bits: what
/// [`BthOpcode::ext_bits`] gives for an opcode and
/// [`crate::ExtHeaders::bits`] for the headers a packet has.
pub mod ext_bit {
    /// Datagram ETH.
    pub const DETH: u8 = 1;
    /// RDMA ETH.
    pub const RETH: u8 = 1 << 1;
    /// Atomic ETH.
    pub const ATOMIC_ETH: u8 = 1 << 2;
    /// ACK ETH.
    pub const AETH: u8 = 1 << 3;
    /// Atomic ACK ETH.
    pub const ATOMIC_ACK_ETH: u8 = 1 << 4;
    /// Immediate data.
    pub const IMMDT: u8 = 1 << 5;
    /// Invalidate ETH.
    pub const IETH: u8 = 1 << 6;
}

fixed_view!(
    /// Base Transport Header (IBTA Vol 1 §9.2), 12 bytes, big-endian.
    BthHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> BthHeader<T> {
    /// OpCode.
    pub fn opcode(&self) -> BthOpcode {
        BthOpcode::from(self.buffer.as_ref()[field::OPCODE])
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::SE_BIT != 0
    }
    /// Migration request (ignored on receive).
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & field::MIG_REQ_BIT != 0
    }
    /// Pad count, 0..=3 bytes before the ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] & field::PAD_COUNT_MASK) >> field::PAD_COUNT_SHIFT
    }
    /// Transport header version (0).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & field::TVER_MASK
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PKEY)
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & field::FECN_BIT != 0
    }
    /// Backward explicit congestion notification (set in CNPs).
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::FECN_BECN] & field::BECN_BIT != 0
    }
    /// Destination QP number.
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(be24(self.buffer.as_ref(), field::DEST_QP))
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & field::ACK_REQ_BIT != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(be24(self.buffer.as_ref(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthHeader<T> {
    /// Sets the OpCode.
    pub fn set_opcode(&mut self, v: BthOpcode) {
        self.buffer.as_mut()[field::OPCODE] = v.into();
    }
    /// Sets the whole flags byte: SE, MigReq, PadCnt (low 2 bits of
    /// `pad_count`) and TVer (low 4 bits of `tver`).
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        let mut b = ((pad_count << field::PAD_COUNT_SHIFT) & field::PAD_COUNT_MASK)
            | (tver & field::TVER_MASK);
        if solicited {
            b |= field::SE_BIT;
        }
        if mig_req {
            b |= field::MIG_REQ_BIT;
        }
        self.buffer.as_mut()[field::FLAGS] = b;
    }
    /// Sets the pad count only (low 2 bits), keeping the other flags.
    pub fn set_pad_count(&mut self, pad_count: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !field::PAD_COUNT_MASK)
            | ((pad_count << field::PAD_COUNT_SHIFT) & field::PAD_COUNT_MASK);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::PKEY, v);
    }
    /// Sets FECN and BECN and clears the six reserved bits.
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        let mut b = 0;
        if fecn {
            b |= field::FECN_BIT;
        }
        if becn {
            b |= field::BECN_BIT;
        }
        self.buffer.as_mut()[field::FECN_BECN] = b;
    }
    /// Sets the destination QP number.
    pub fn set_dest_qp(&mut self, v: Qpn) {
        set_be24(self.buffer.as_mut(), field::DEST_QP, v.get());
    }
    /// Sets AckReq and clears the seven reserved bits.
    pub fn set_ack_req(&mut self, v: bool) {
        self.buffer.as_mut()[field::ACK_REQ] = if v { field::ACK_REQ_BIT } else { 0 };
    }
    /// Sets the packet sequence number.
    pub fn set_psn(&mut self, v: Psn) {
        set_be24(self.buffer.as_mut(), field::PSN, v.get());
    }
}

/// A parsed BTH.
///
/// `parse` rejects unknown opcodes and a non-zero TVer; reserved bits are
/// ignored on parse and written as zero by `emit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    /// OpCode; never `Unknown` after `parse`.
    pub opcode: BthOpcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count, 0..=3 ([`crate::RoceRepr::emit`] derives it from the payload).
    pub pad_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification.
    pub becn: bool,
    /// Destination QP number.
    pub dest_qp: Qpn,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number.
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH with the default P_Key and every flag clear.
    pub const fn new(opcode: BthOpcode, dest_qp: Qpn, psn: Psn) -> Self {
        Self {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Parses a BTH view.
    pub fn parse<T: AsRef<[u8]>>(h: &BthHeader<T>) -> Result<Self> {
        h.check_len()?;
        let opcode = h.opcode();
        if !opcode.is_known() || h.tver() != 0 {
            return Err(Error::Malformed);
        }
        Ok(Self {
            opcode,
            solicited: h.solicited(),
            mig_req: h.mig_req(),
            pad_count: h.pad_count(),
            pkey: h.pkey(),
            fecn: h.fecn(),
            becn: h.becn(),
            dest_qp: h.dest_qp(),
            ack_req: h.ack_req(),
            psn: h.psn(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes every byte of the BTH (TVer 0, reserved bits 0).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut BthHeader<T>) {
        h.set_opcode(self.opcode);
        h.set_flags(self.solicited, self.mig_req, self.pad_count, 0);
        h.set_pkey(self.pkey);
        h.set_fecn_becn(self.fecn, self.becn);
        h.set_dest_qp(self.dest_qp);
        h.set_ack_req(self.ack_req);
        h.set_psn(self.psn);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) const KNOWN: [u8; 38] = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
        0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
        0x27, 0x28, 0x29, 0x2a, 0x2b, 0x64, 0x65, 0x81,
    ];

    pub(crate) fn arb_opcode() -> impl Strategy<Value = BthOpcode> {
        proptest::sample::select(&KNOWN[..]).prop_map(BthOpcode::from)
    }

    prop_compose! {
        pub(crate) fn arb_bth()(
            opcode in arb_opcode(),
            solicited: bool, mig_req: bool, pad_count in 0u8..4, pkey: u16,
            fecn: bool, becn: bool, qpn in 0u32..0x100_0000, ack_req: bool,
            psn in 0u32..0x100_0000,
        ) -> BthRepr {
            BthRepr {
                opcode, solicited, mig_req, pad_count, pkey, fecn, becn,
                dest_qp: Qpn::new(qpn), ack_req, psn: Psn::new(psn),
            }
        }
    }

    #[test]
    fn deconstruct() {
        let bytes = [
            0x0a, 0xe0, 0xff, 0xff, // WRITE_ONLY, SE|M|pad 2, pkey
            0x7f, 0x12, 0x34, 0x56, // BECN + reserved bits, dqp
            0xff, 0xab, 0xcd, 0xef, // AckReq + reserved, psn
        ];
        let h = BthHeader::new_checked(&bytes[..]).unwrap();
        assert_eq!(h.opcode(), BthOpcode::RcRdmaWriteOnly);
        assert!(h.solicited());
        assert!(h.mig_req());
        assert_eq!(h.pad_count(), 2);
        assert_eq!(h.tver(), 0);
        assert_eq!(h.pkey(), 0xffff);
        assert!(!h.fecn());
        assert!(h.becn());
        assert_eq!(h.dest_qp(), Qpn::new(0x12_3456));
        assert!(h.ack_req());
        assert_eq!(h.psn(), Psn::new(0xab_cdef));
        let r = BthRepr::parse(&h).unwrap();
        assert_eq!(r.opcode, BthOpcode::RcRdmaWriteOnly);
        assert_eq!(r.pad_count, 2);
    }

    #[test]
    fn construct_writes_every_byte() {
        let mut buf = [0xa5u8; HEADER_LEN];
        let r = BthRepr {
            solicited: true,
            pad_count: 3,
            fecn: true,
            ack_req: true,
            ..BthRepr::new(BthOpcode::RcAck, Qpn::new(0x01_0203), Psn::new(0x04_0506))
        };
        r.emit(&mut BthHeader::new_unchecked(&mut buf[..]));
        assert_eq!(
            buf,
            [
                0x11, 0xb0, 0xff, 0xff, 0x80, 0x01, 0x02, 0x03, 0x80, 0x04, 0x05, 0x06
            ]
        );
    }

    #[test]
    fn rejects_unknown_opcode_tver_and_short() {
        let mut b = [0u8; HEADER_LEN];
        b[0] = 0x2c; // UC 0x0c (READ): UC has no such operation
        assert_eq!(
            BthRepr::parse(&BthHeader::new_unchecked(&b[..])),
            Err(Error::Malformed)
        );
        b[0] = 0x04;
        b[1] = 0x01;
        assert_eq!(
            BthRepr::parse(&BthHeader::new_unchecked(&b[..])),
            Err(Error::Malformed)
        );
        assert_eq!(
            BthRepr::parse(&BthHeader::new_unchecked(&b[..11])),
            Err(Error::Truncated)
        );
    }

    /// Every opcode's extension headers, by raw value, as IBTA Vol 1
    /// table 38 (reference A.5) lists them; the `has_*` predicates, the
    /// bits and the length must say the same for all 256 values.
    #[test]
    fn extension_headers_by_opcode_follow_the_ibta_table() {
        let any = |set: &[u8], raw: u8| set.contains(&raw) || set.contains(&(raw & !0x20));
        let rc = |raw: u8| raw < 0x20 || (0x20..=0x2b).contains(&raw);
        for raw in 0..=255u8 {
            let op = BthOpcode::from(raw);
            let uc_or_rc = rc(raw);
            let reth = uc_or_rc && any(&[0x06, 0x0a, 0x0b], raw) || raw == 0x0c;
            let immdt = (uc_or_rc && any(&[0x03, 0x05, 0x09, 0x0b], raw)) || raw == 0x65;
            let aeth = [0x0d, 0x0f, 0x10, 0x11, 0x12].contains(&raw);
            let atomic_ack = raw == 0x12;
            let atomic = raw == 0x13 || raw == 0x14;
            let ieth = raw == 0x16 || raw == 0x17;
            let deth = raw == 0x64 || raw == 0x65;
            let known = op.is_known();
            let want = [deth, reth, atomic, aeth, atomic_ack, immdt, ieth].map(|h| h && known);
            let got = [
                op.has_deth(),
                op.has_reth(),
                op.has_atomic_eth(),
                op.has_aeth(),
                op.has_atomic_ack_eth(),
                op.has_immdt(),
                op.has_ieth(),
            ];
            assert_eq!(got, want, "{raw:#04x}");
            let lens = [8, 16, 28, 4, 8, 4, 4];
            let len: usize = (0..7).filter(|&i| want[i]).map(|i| lens[i]).sum();
            let len = if raw == 0x81 { CNP_RESERVED_LEN } else { len };
            assert_eq!(op.ext_headers_len(), len, "{raw:#04x}");
        }
    }

    #[test]
    fn opcode_table() {
        use BthOpcode::*;
        assert_eq!(RcSendOnly.ext_headers_len(), 0);
        assert_eq!(RcRdmaWriteFirst.ext_headers_len(), 16);
        assert_eq!(RcRdmaWriteOnlyWithImmediate.ext_headers_len(), 20);
        assert_eq!(RcRdmaReadRequest.ext_headers_len(), 16);
        assert_eq!(RcRdmaReadResponseMiddle.ext_headers_len(), 0);
        assert_eq!(RcAck.ext_headers_len(), 4);
        assert_eq!(RcAtomicAck.ext_headers_len(), 12);
        assert_eq!(RcCompareSwap.ext_headers_len(), 28);
        assert_eq!(RcSendOnlyWithInvalidate.ext_headers_len(), 4);
        assert_eq!(UdSendOnly.ext_headers_len(), 8);
        assert_eq!(UdSendOnlyWithImmediate.ext_headers_len(), 12);
        assert_eq!(Cnp.ext_headers_len(), 16);
        assert_eq!(Unknown(0x15).ext_headers_len(), 0);
        for raw in 0..=255u8 {
            let op = BthOpcode::from(raw);
            assert_eq!(u8::from(op), raw);
            assert_eq!(op.is_known(), KNOWN.contains(&raw));
            // Known opcodes are exactly one of request, response or CNP.
            // UC is RC's SEND and WRITE with the transport bits 001: the
            // same extension headers, and a way back.
            if let Some(rc) = op.uc_as_rc() {
                assert_eq!(u8::from(rc) | 0x20, raw);
                assert_eq!(rc.rc_as_uc(), Some(op));
                assert_eq!(rc.ext_headers_len(), op.ext_headers_len(), "{op:?}");
                assert!(op.is_uc() && op.is_request());
            } else {
                assert!(!op.is_uc());
            }
            if op.is_known() {
                let kinds = [op.is_request(), op.is_response(), op.is_cnp()];
                assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{op:?}");
            } else {
                assert!(!op.is_request() && !op.is_response());
            }
        }
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_bth()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut BthHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(BthRepr::parse(&BthHeader::new_checked(&buf[..]).unwrap()), Ok(r));
        }

        #[test]
        fn view_never_panics_after_check(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Ok(h) = BthHeader::new_checked(&bytes[..]) {
                let _ = BthRepr::parse(&h);
            }
        }
    }
}
