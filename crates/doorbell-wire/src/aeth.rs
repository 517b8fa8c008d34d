//! ACK Extended Transport Header (IBTA Vol 1 §9.3.5; reference A.3, A.4).

use crate::{Error, Result, be24, enum_with_unknown, fixed_view, set_be24};

/// Field offsets of the AETH.
pub mod field {
    use crate::Field;

    /// Syndrome byte: reserved (bit 7), type (bits 6..5), value (bits 4..0).
    pub const SYNDROME: usize = 0;
    /// Mask of the syndrome type.
    pub const TYPE_MASK: u8 = 0x60;
    /// Syndrome type: ACK, value = credit count.
    pub const TYPE_ACK: u8 = 0x00;
    /// Syndrome type: RNR NAK, value = RNR timer code.
    pub const TYPE_RNR_NAK: u8 = 0x20;
    /// Syndrome type: reserved.
    pub const TYPE_RESERVED: u8 = 0x40;
    /// Syndrome type: NAK, value = NAK code.
    pub const TYPE_NAK: u8 = 0x60;
    /// Mask of the syndrome value.
    pub const VALUE_MASK: u8 = 0x1f;
    /// Message sequence number, BE24.
    pub const MSN: Field = 1..4;
}

/// Length of the AETH.
pub const HEADER_LEN: usize = field::MSN.end;

/// ACK credit count meaning "credits invalid / unlimited" (what rxe sends).
pub const CREDITS_INVALID: u8 = 0x1f;

enum_with_unknown! {
    /// NAK code, the value bits of a NAK syndrome (reference A.4).
    pub enum NakCode(u8) {
        /// PSN sequence error: the requester rewinds to the PSN in the BTH.
        PsnSeqErr = 0,
        /// Invalid request.
        InvalidRequest = 1,
        /// Remote access error.
        RemoteAccessErr = 2,
        /// Remote operational error.
        RemoteOpErr = 3,
        /// Invalid RD request.
        InvalidRdRequest = 4,
    }
}

/// The AETH syndrome, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// Positive acknowledgement with an end-to-end credit count (5 bits;
    /// [`CREDITS_INVALID`] = none advertised).
    Ack {
        /// Credit count code, 0..=31.
        credits: u8,
    },
    /// Receiver not ready; retry after the time the 5-bit timer code names.
    RnrNak {
        /// RNR timer code, 0..=31 (reference A.8 table).
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl AethSyndrome {
    /// Decodes a syndrome byte; `None` for the reserved type (bits 6..5 =
    /// 10). The reserved bit 7 is ignored.
    pub const fn decode(raw: u8) -> Option<Self> {
        let value = raw & field::VALUE_MASK;
        match raw & field::TYPE_MASK {
            field::TYPE_ACK => Some(Self::Ack { credits: value }),
            field::TYPE_RNR_NAK => Some(Self::RnrNak { timer: value }),
            field::TYPE_NAK => Some(Self::Nak(match value {
                0 => NakCode::PsnSeqErr,
                1 => NakCode::InvalidRequest,
                2 => NakCode::RemoteAccessErr,
                3 => NakCode::RemoteOpErr,
                4 => NakCode::InvalidRdRequest,
                v => NakCode::Unknown(v),
            })),
            _ => None,
        }
    }

    /// Encodes the syndrome byte; values are truncated to their 5 bits.
    pub fn encode(self) -> u8 {
        let (ty, value) = match self {
            Self::Ack { credits } => (field::TYPE_ACK, credits),
            Self::RnrNak { timer } => (field::TYPE_RNR_NAK, timer),
            Self::Nak(code) => (field::TYPE_NAK, u8::from(code)),
        };
        ty | (value & field::VALUE_MASK)
    }

    /// True for [`AethSyndrome::Ack`].
    pub const fn is_ack(self) -> bool {
        matches!(self, Self::Ack { .. })
    }
}

impl From<AethSyndrome> for u8 {
    fn from(s: AethSyndrome) -> u8 {
        s.encode()
    }
}

impl TryFrom<u8> for AethSyndrome {
    type Error = Error;

    /// Fails with [`Error::Malformed`] for the reserved syndrome type.
    fn try_from(raw: u8) -> Result<Self> {
        Self::decode(raw).ok_or(Error::Malformed)
    }
}

fixed_view!(
    /// ACK Extended Transport Header (IBTA Vol 1 §9.3.5), 4 bytes: syndrome
    /// and 24-bit MSN.
    AethHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> AethHeader<T> {
    /// Raw syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        be24(self.buffer.as_ref(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AethHeader<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME] = v;
    }
    /// Sets the message sequence number (low 24 bits).
    pub fn set_msn(&mut self, v: u32) {
        set_be24(self.buffer.as_mut(), field::MSN, v);
    }
}

/// A parsed AETH. `parse` rejects the reserved syndrome type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    /// Decoded syndrome.
    pub syndrome: AethSyndrome,
    /// Message sequence number, 24 bits (`emit` keeps the low 24).
    pub msn: u32,
}

impl AethRepr {
    /// Parses an AETH view.
    pub fn parse<T: AsRef<[u8]>>(h: &AethHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self {
            syndrome: AethSyndrome::try_from(h.syndrome())?,
            msn: h.msn(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AethHeader<T>) {
        h.set_syndrome(self.syndrome.encode());
        h.set_msn(self.msn);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn arb_syndrome() -> impl Strategy<Value = AethSyndrome> {
        prop_oneof![
            (0u8..32).prop_map(|credits| AethSyndrome::Ack { credits }),
            (0u8..32).prop_map(|timer| AethSyndrome::RnrNak { timer }),
            (0u8..32).prop_map(|c| AethSyndrome::Nak(NakCode::from(c))),
        ]
    }

    prop_compose! {
        pub(crate) fn arb_aeth()(syndrome in arb_syndrome(), msn in 0u32..0x100_0000) -> AethRepr {
            AethRepr { syndrome, msn }
        }
    }

    #[test]
    fn deconstruct() {
        let b = [0x1f, 0x00, 0x01, 0x02];
        let h = AethHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.syndrome(), 0x1f);
        assert_eq!(h.msn(), 0x102);
        let r = AethRepr::parse(&h).unwrap();
        assert_eq!(
            r.syndrome,
            AethSyndrome::Ack {
                credits: CREDITS_INVALID
            }
        );
        assert!(AethHeader::new_checked(&b[..3]).is_err());
    }

    #[test]
    fn construct_writes_every_byte() {
        let mut buf = [0xa5u8; HEADER_LEN];
        AethRepr {
            syndrome: AethSyndrome::Nak(NakCode::RemoteAccessErr),
            msn: 0xab_cdef,
        }
        .emit(&mut AethHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0x62, 0xab, 0xcd, 0xef]);
    }

    #[test]
    fn syndrome_codes() {
        assert_eq!(
            AethSyndrome::decode(0x00),
            Some(AethSyndrome::Ack { credits: 0 })
        );
        assert_eq!(
            AethSyndrome::decode(0x2e),
            Some(AethSyndrome::RnrNak { timer: 14 })
        );
        assert_eq!(
            AethSyndrome::decode(0x60),
            Some(AethSyndrome::Nak(NakCode::PsnSeqErr))
        );
        assert_eq!(
            AethSyndrome::decode(0x64),
            Some(AethSyndrome::Nak(NakCode::InvalidRdRequest))
        );
        assert_eq!(
            AethSyndrome::decode(0x7f),
            Some(AethSyndrome::Nak(NakCode::Unknown(0x1f)))
        );
        assert_eq!(AethSyndrome::decode(0x45), None);
        assert_eq!(AethSyndrome::try_from(0x5f), Err(Error::Malformed));
        // Bit 7 is reserved and ignored.
        assert_eq!(
            AethSyndrome::decode(0x81),
            Some(AethSyndrome::Ack { credits: 1 })
        );
        for raw in 0..=0x7fu8 {
            if let Some(s) = AethSyndrome::decode(raw) {
                assert_eq!(u8::from(s), raw);
            }
        }
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_aeth()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut AethHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(AethRepr::parse(&AethHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
