//! The extension headers between the BTH and the payload, as a set
//! (reference A.3, A.5).
//!
//! Wire order: `[DETH] [RETH | AtomicETH] [AETH] [AtomicAckETH] [ImmDt | IETH]`;
//! which ones are present is a function of the opcode (`BthOpcode::has_*`).
//! A CNP instead carries 16 reserved bytes.

use crate::bth::{BthOpcode, CNP_RESERVED_LEN, ext_bit};
use crate::{
    AethHeader, AethRepr, AtomicAckEthHeader, AtomicAckEthRepr, AtomicEthHeader, AtomicEthRepr,
    DethHeader, DethRepr, Error, IethHeader, IethRepr, ImmDtHeader, ImmDtRepr, Result, RethHeader,
    RethRepr,
};

/// The extension headers of one packet; each is `Some` exactly when the
/// opcode calls for it (see [`ExtHeaders::fits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// Datagram ETH (UD).
    pub deth: Option<DethRepr>,
    /// RDMA ETH (WRITE First/Only, READ Request).
    pub reth: Option<RethRepr>,
    /// Atomic ETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// ACK ETH (ACK, ATOMIC ACK, READ response First/Last/Only).
    pub aeth: Option<AethRepr>,
    /// Atomic ACK ETH (ATOMIC ACK).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data (`…WithImmediate`).
    pub immdt: Option<ImmDtRepr>,
    /// Invalidate ETH (`…WithInvalidate`).
    pub ieth: Option<IethRepr>,
}

impl ExtHeaders {
    /// No extension headers.
    pub const NONE: Self = Self {
        deth: None,
        reth: None,
        atomic_eth: None,
        aeth: None,
        atomic_ack_eth: None,
        immdt: None,
        ieth: None,
    };

    /// True if exactly the headers `opcode` calls for are present, and the
    /// opcode is known.
    pub const fn fits(&self, opcode: BthOpcode) -> bool {
        opcode.is_known() && self.bits() == opcode.ext_bits()
    }

    /// The headers present, as [`ext_bit`]s.
    pub const fn bits(&self) -> u8 {
        /// `bit` if `present`.
        const fn bit(present: bool, bit: u8) -> u8 {
            if present { bit } else { 0 }
        }
        bit(self.deth.is_some(), ext_bit::DETH)
            | bit(self.reth.is_some(), ext_bit::RETH)
            | bit(self.atomic_eth.is_some(), ext_bit::ATOMIC_ETH)
            | bit(self.aeth.is_some(), ext_bit::AETH)
            | bit(self.atomic_ack_eth.is_some(), ext_bit::ATOMIC_ACK_ETH)
            | bit(self.immdt.is_some(), ext_bit::IMMDT)
            | bit(self.ieth.is_some(), ext_bit::IETH)
    }

    /// Parses the headers `opcode` calls for from the start of `buf` (the
    /// bytes right after the BTH). Fails with [`Error::Malformed`] for an
    /// unknown opcode or a reserved AETH syndrome, [`Error::Truncated`] if
    /// `buf` is shorter than [`BthOpcode::ext_headers_len`].
    pub fn parse(opcode: BthOpcode, buf: &[u8]) -> Result<Self> {
        if !opcode.is_known() {
            return Err(Error::Malformed);
        }
        if buf.len() < opcode.ext_headers_len() {
            return Err(Error::Truncated);
        }
        let mut off = 0;
        let mut ext = Self::NONE;
        if opcode.has_deth() {
            ext.deth = Some(DethRepr::parse(&DethHeader::new_checked(&buf[off..])?)?);
            off += crate::deth::HEADER_LEN;
        }
        if opcode.has_reth() {
            ext.reth = Some(RethRepr::parse(&RethHeader::new_checked(&buf[off..])?)?);
            off += crate::reth::HEADER_LEN;
        }
        if opcode.has_atomic_eth() {
            ext.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEthHeader::new_checked(
                &buf[off..],
            )?)?);
            off += crate::atomic_eth::HEADER_LEN;
        }
        if opcode.has_aeth() {
            ext.aeth = Some(AethRepr::parse(&AethHeader::new_checked(&buf[off..])?)?);
            off += crate::aeth::HEADER_LEN;
        }
        if opcode.has_atomic_ack_eth() {
            ext.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&AtomicAckEthHeader::new_checked(
                &buf[off..],
            )?)?);
            off += crate::atomic_ack_eth::HEADER_LEN;
        }
        if opcode.has_immdt() {
            ext.immdt = Some(ImmDtRepr::parse(&ImmDtHeader::new_checked(&buf[off..])?)?);
            off += crate::immdt::HEADER_LEN;
        }
        if opcode.has_ieth() {
            ext.ieth = Some(IethRepr::parse(&IethHeader::new_checked(&buf[off..])?)?);
        }
        Ok(ext)
    }

    /// Bytes `emit` writes for `opcode`: the present headers, plus the
    /// reserved bytes of a CNP. Equals [`BthOpcode::ext_headers_len`] when
    /// [`ExtHeaders::fits`] holds.
    pub fn buffer_len(&self, opcode: BthOpcode) -> usize {
        let mut n = 0;
        if let Some(h) = &self.deth {
            n += h.buffer_len();
        }
        if let Some(h) = &self.reth {
            n += h.buffer_len();
        }
        if let Some(h) = &self.atomic_eth {
            n += h.buffer_len();
        }
        if let Some(h) = &self.aeth {
            n += h.buffer_len();
        }
        if let Some(h) = &self.atomic_ack_eth {
            n += h.buffer_len();
        }
        if let Some(h) = &self.immdt {
            n += h.buffer_len();
        }
        if let Some(h) = &self.ieth {
            n += h.buffer_len();
        }
        if opcode.is_cnp() {
            n += CNP_RESERVED_LEN;
        }
        n
    }

    /// Writes the present headers in wire order (and zeroes a CNP's reserved
    /// bytes) at the start of `buf`; returns [`ExtHeaders::buffer_len`].
    ///
    /// # Panics
    /// If `buf` is shorter than `self.buffer_len(opcode)`.
    pub fn emit(&self, opcode: BthOpcode, buf: &mut [u8]) -> usize {
        let mut off = 0;
        if let Some(h) = &self.deth {
            h.emit(&mut DethHeader::new_unchecked(&mut buf[off..]));
            off += h.buffer_len();
        }
        if let Some(h) = &self.reth {
            h.emit(&mut RethHeader::new_unchecked(&mut buf[off..]));
            off += h.buffer_len();
        }
        if let Some(h) = &self.atomic_eth {
            h.emit(&mut AtomicEthHeader::new_unchecked(&mut buf[off..]));
            off += h.buffer_len();
        }
        if let Some(h) = &self.aeth {
            h.emit(&mut AethHeader::new_unchecked(&mut buf[off..]));
            off += h.buffer_len();
        }
        if let Some(h) = &self.atomic_ack_eth {
            h.emit(&mut AtomicAckEthHeader::new_unchecked(&mut buf[off..]));
            off += h.buffer_len();
        }
        if let Some(h) = &self.immdt {
            h.emit(&mut ImmDtHeader::new_unchecked(&mut buf[off..]));
            off += h.buffer_len();
        }
        if let Some(h) = &self.ieth {
            h.emit(&mut IethHeader::new_unchecked(&mut buf[off..]));
            off += h.buffer_len();
        }
        if opcode.is_cnp() {
            buf[off..off + CNP_RESERVED_LEN].fill(0);
            off += CNP_RESERVED_LEN;
        }
        off
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::aeth::tests::arb_aeth;
    use crate::atomic_eth::tests::arb_atomic_eth;
    use crate::bth::tests::arb_opcode;
    use crate::deth::tests::arb_deth;
    use crate::reth::tests::arb_reth;
    use doorbell_types::{Qpn, Rkey};
    use proptest::prelude::*;

    /// Extension headers that fit `opcode`, with arbitrary contents.
    pub(crate) fn arb_ext_for(opcode: BthOpcode) -> impl Strategy<Value = ExtHeaders> {
        (
            arb_deth(),
            arb_reth(),
            arb_atomic_eth(),
            arb_aeth(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(
                move |(deth, reth, atomic, aeth, orig, imm, rkey)| ExtHeaders {
                    deth: opcode.has_deth().then_some(deth),
                    reth: opcode.has_reth().then_some(reth),
                    atomic_eth: opcode.has_atomic_eth().then_some(atomic),
                    aeth: opcode.has_aeth().then_some(aeth),
                    atomic_ack_eth: opcode
                        .has_atomic_ack_eth()
                        .then_some(AtomicAckEthRepr { orig }),
                    immdt: opcode.has_immdt().then_some(ImmDtRepr { imm }),
                    ieth: opcode.has_ieth().then_some(IethRepr {
                        rkey: Rkey::from_raw(rkey),
                    }),
                },
            )
    }

    pub(crate) fn arb_opcode_ext() -> impl Strategy<Value = (BthOpcode, ExtHeaders)> {
        arb_opcode().prop_flat_map(|op| (Just(op), arb_ext_for(op)))
    }

    #[test]
    fn ud_with_immediate_order() {
        let ext = ExtHeaders {
            deth: Some(DethRepr {
                qkey: 0x1111_1111,
                src_qp: Qpn::new(0x42),
            }),
            immdt: Some(ImmDtRepr { imm: 0xcafe_f00d }),
            ..ExtHeaders::NONE
        };
        let op = BthOpcode::UdSendOnlyWithImmediate;
        assert!(ext.fits(op));
        assert!(!ext.fits(BthOpcode::UdSendOnly));
        let mut buf = [0xa5u8; 12];
        assert_eq!(ext.emit(op, &mut buf), 12);
        assert_eq!(
            buf,
            [
                0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x42, 0xca, 0xfe, 0xf0, 0x0d
            ]
        );
        assert_eq!(ExtHeaders::parse(op, &buf), Ok(ext));
        assert_eq!(ExtHeaders::parse(op, &buf[..11]), Err(Error::Truncated));
    }

    #[test]
    fn cnp_reserved_bytes_are_zeroed() {
        let mut buf = [0xa5u8; 16];
        assert_eq!(ExtHeaders::NONE.emit(BthOpcode::Cnp, &mut buf), 16);
        assert_eq!(buf, [0; 16]);
        assert_eq!(
            ExtHeaders::parse(BthOpcode::Cnp, &buf),
            Ok(ExtHeaders::NONE)
        );
    }

    proptest! {
        #[test]
        fn roundtrip((op, ext) in arb_opcode_ext()) {
            prop_assert!(ext.fits(op));
            prop_assert_eq!(ext.buffer_len(op), op.ext_headers_len());
            let mut buf = [0u8; 64];
            let n = ext.emit(op, &mut buf);
            prop_assert_eq!(n, op.ext_headers_len());
            prop_assert_eq!(ExtHeaders::parse(op, &buf[..n]), Ok(ext));
        }

        #[test]
        fn parse_never_panics(raw: u8, bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = ExtHeaders::parse(BthOpcode::from(raw), &bytes);
        }
    }
}
