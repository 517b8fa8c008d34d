//! A whole CM MAD: the common header and one CM message, as one value.
//!
//! [`CmMad::parse`] takes the 256 bytes a UD receive on QP 1 delivered
//! (after the GRH on RoCE), checks that they are a CM MAD and picks the
//! message's repr by attribute ID; [`CmMad::emit`] writes all 256 bytes.

use crate::drep::{DrepMsg, DrepRepr};
use crate::dreq::{DreqMsg, DreqRepr};
use crate::mad::{self, CmAttribute, MadHeader, MadRepr, Method};
use crate::mra::{MraMsg, MraRepr};
use crate::rej::{RejMsg, RejRepr};
use crate::rep::{RepMsg, RepRepr};
use crate::req::{ReqMsg, ReqRepr};
use crate::rtu::{RtuMsg, RtuRepr};
use crate::sidr::{SidrRepMsg, SidrRepRepr, SidrReqMsg, SidrReqRepr};
use crate::{Error, Result};

/// One CM message, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMessage {
    /// REQ (attribute 0x0010).
    Req(ReqRepr),
    /// MRA (0x0011).
    Mra(MraRepr),
    /// REJ (0x0012).
    Rej(RejRepr),
    /// REP (0x0013).
    Rep(RepRepr),
    /// RTU (0x0014).
    Rtu(RtuRepr),
    /// DREQ (0x0015).
    Dreq(DreqRepr),
    /// DREP (0x0016).
    Drep(DrepRepr),
    /// SIDR_REQ (0x0017).
    SidrReq(SidrReqRepr),
    /// SIDR_REP (0x0018).
    SidrRep(SidrRepRepr),
}

impl CmMessage {
    /// The attribute ID that names this message.
    pub const fn attribute(&self) -> CmAttribute {
        match self {
            Self::Req(_) => CmAttribute::Req,
            Self::Mra(_) => CmAttribute::Mra,
            Self::Rej(_) => CmAttribute::Rej,
            Self::Rep(_) => CmAttribute::Rep,
            Self::Rtu(_) => CmAttribute::Rtu,
            Self::Dreq(_) => CmAttribute::Dreq,
            Self::Drep(_) => CmAttribute::Drep,
            Self::SidrReq(_) => CmAttribute::SidrReq,
            Self::SidrRep(_) => CmAttribute::SidrRep,
        }
    }

    /// Parses the MAD data area `data` as the message `attribute` names.
    /// Fails with [`Error::UnknownAttribute`] for attributes that are not
    /// one of the nine messages (ClassPortInfo, LAP and APR included).
    pub fn parse(attribute: CmAttribute, data: &[u8]) -> Result<Self> {
        Ok(match attribute {
            CmAttribute::Req => Self::Req(ReqRepr::parse(&ReqMsg::new_checked(data)?)?),
            CmAttribute::Mra => Self::Mra(MraRepr::parse(&MraMsg::new_checked(data)?)?),
            CmAttribute::Rej => Self::Rej(RejRepr::parse(&RejMsg::new_checked(data)?)?),
            CmAttribute::Rep => Self::Rep(RepRepr::parse(&RepMsg::new_checked(data)?)?),
            CmAttribute::Rtu => Self::Rtu(RtuRepr::parse(&RtuMsg::new_checked(data)?)?),
            CmAttribute::Dreq => Self::Dreq(DreqRepr::parse(&DreqMsg::new_checked(data)?)?),
            CmAttribute::Drep => Self::Drep(DrepRepr::parse(&DrepMsg::new_checked(data)?)?),
            CmAttribute::SidrReq => {
                Self::SidrReq(SidrReqRepr::parse(&SidrReqMsg::new_checked(data)?)?)
            }
            CmAttribute::SidrRep => {
                Self::SidrRep(SidrRepRepr::parse(&SidrRepMsg::new_checked(data)?)?)
            }
            other => return Err(Error::UnknownAttribute(u16::from(other))),
        })
    }

    /// Bytes `emit` writes: the whole data area.
    pub const fn buffer_len(&self) -> usize {
        mad::MAD_DATA_LEN
    }

    /// Writes the message into the data area `data`, which must hold
    /// [`mad::MAD_DATA_LEN`] bytes.
    ///
    /// # Panics
    /// If `data` is shorter (STYLE R3); [`CmMad::emit`] checks first.
    pub fn emit(&self, data: &mut [u8]) {
        match self {
            Self::Req(r) => r.emit(&mut ReqMsg::new_unchecked(data)),
            Self::Mra(r) => r.emit(&mut MraMsg::new_unchecked(data)),
            Self::Rej(r) => r.emit(&mut RejMsg::new_unchecked(data)),
            Self::Rep(r) => r.emit(&mut RepMsg::new_unchecked(data)),
            Self::Rtu(r) => r.emit(&mut RtuMsg::new_unchecked(data)),
            Self::Dreq(r) => r.emit(&mut DreqMsg::new_unchecked(data)),
            Self::Drep(r) => r.emit(&mut DrepMsg::new_unchecked(data)),
            Self::SidrReq(r) => r.emit(&mut SidrReqMsg::new_unchecked(data)),
            Self::SidrRep(r) => r.emit(&mut SidrRepMsg::new_unchecked(data)),
        }
    }
}

/// A CM MAD: what the CM puts in the header, and the message.
///
/// The header's versions and class are the CM's, the method is Send, and
/// status and class-specific are 0; they are checked, or ignored, on parse
/// and written on emit, so a `CmMad` holds only what varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmMad {
    /// Transaction ID.
    pub transaction_id: u64,
    /// Attribute modifier (ECE options ride here in REQ and REP).
    pub attribute_modifier: u32,
    /// The message; it names the attribute ID.
    pub message: CmMessage,
}

impl CmMad {
    /// A CM MAD with attribute modifier 0.
    pub const fn new(transaction_id: u64, message: CmMessage) -> Self {
        Self {
            transaction_id,
            attribute_modifier: 0,
            message,
        }
    }

    /// The common header `emit` writes.
    pub fn header(&self) -> MadRepr {
        let mut h = MadRepr::cm(self.message.attribute(), self.transaction_id);
        h.attribute_modifier = self.attribute_modifier;
        h
    }

    /// Parses a MAD (bytes past [`mad::MAD_LEN`] are ignored). Never panics.
    ///
    /// Errors: [`Error::Truncated`] if shorter than a MAD, [`Error::NotCm`]
    /// for another class or version, [`Error::Malformed`] for a method other
    /// than Send or a bad field, [`Error::UnknownAttribute`] for an
    /// attribute that is not one of the nine messages. Status and
    /// class-specific are ignored.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let buf = buf.get(..mad::MAD_LEN).ok_or(Error::Truncated)?;
        let (head, data) = buf.split_at(mad::HEADER_LEN);
        let h = MadRepr::parse(&MadHeader::new_checked(head)?)?;
        if !h.is_cm() {
            return Err(Error::NotCm {
                base_version: h.base_version,
                mgmt_class: h.mgmt_class,
                class_version: h.class_version,
            });
        }
        if h.method != Method::Send {
            return Err(Error::Malformed);
        }
        let message = CmMessage::parse(CmAttribute::from(h.attribute_id), data)?;
        Ok(Self {
            transaction_id: h.transaction_id,
            attribute_modifier: h.attribute_modifier,
            message,
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        mad::MAD_LEN
    }

    /// Writes the 256-byte MAD at the start of `buf` and returns its
    /// length; [`Error::Truncated`] if `buf` is shorter.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let buf = buf.get_mut(..mad::MAD_LEN).ok_or(Error::Truncated)?;
        let (head, data) = buf.split_at_mut(mad::HEADER_LEN);
        self.header().emit(&mut MadHeader::new_unchecked(head));
        self.message.emit(data);
        Ok(mad::MAD_LEN)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn arb_message() -> impl Strategy<Value = CmMessage> {
        prop_oneof![
            crate::req::tests::arb_req().prop_map(CmMessage::Req),
            crate::mra::tests::arb_mra().prop_map(CmMessage::Mra),
            crate::rej::tests::arb_rej().prop_map(CmMessage::Rej),
            crate::rep::tests::arb_rep().prop_map(CmMessage::Rep),
            crate::rtu::tests::arb_rtu().prop_map(CmMessage::Rtu),
            crate::dreq::tests::arb_dreq().prop_map(CmMessage::Dreq),
            crate::drep::tests::arb_drep().prop_map(CmMessage::Drep),
            crate::sidr::tests::arb_sidr_req().prop_map(CmMessage::SidrReq),
            crate::sidr::tests::arb_sidr_rep().prop_map(CmMessage::SidrRep),
        ]
    }

    fn rtu() -> CmMad {
        CmMad::new(
            5,
            CmMessage::Rtu(RtuRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: [0; crate::rtu::PRIVATE_DATA_LEN],
            }),
        )
    }

    #[test]
    fn header_and_errors() {
        let mut buf = [0xa5u8; mad::MAD_LEN + 4];
        assert_eq!(rtu().emit(&mut buf), Ok(mad::MAD_LEN));
        assert_eq!(&buf[..4], &[1, 7, 2, 3]);
        assert_eq!(&buf[16..24], &[0, 0x14, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&buf[24..28], &[0, 0, 0, 1]);
        assert_eq!(&buf[mad::MAD_LEN..], &[0xa5; 4]);
        assert_eq!(CmMad::parse(&buf), Ok(rtu()));
        assert_eq!(rtu().emit(&mut buf[..255]), Err(Error::Truncated));
        assert_eq!(CmMad::parse(&buf[..255]), Err(Error::Truncated));

        let mut bad = buf;
        bad[1] = 0x03; // the SA's class
        assert!(matches!(
            CmMad::parse(&bad),
            Err(Error::NotCm { mgmt_class: 3, .. })
        ));
        let mut bad = buf;
        bad[3] = 0x01; // Get
        assert_eq!(CmMad::parse(&bad), Err(Error::Malformed));
        for (attr, id) in [(0x00, 0x19), (0x00, 0x01), (0x12, 0x34)] {
            let mut bad = buf;
            bad[16..18].copy_from_slice(&[attr, id]);
            let want = Err(Error::UnknownAttribute(u16::from_be_bytes([attr, id])));
            assert_eq!(CmMad::parse(&bad), want);
        }
    }

    proptest! {
        #[test]
        fn roundtrip(transaction_id: u64, attribute_modifier: u32, message in arb_message()) {
            let mad = CmMad { transaction_id, attribute_modifier, message };
            let mut buf = [0xa5u8; mad::MAD_LEN];
            prop_assert_eq!(mad.emit(&mut buf), Ok(mad::MAD_LEN));
            prop_assert_eq!(
                u16::from_be_bytes([buf[16], buf[17]]),
                u16::from(message.attribute())
            );
            prop_assert_eq!(CmMad::parse(&buf), Ok(mad));
        }

        #[test]
        fn parse_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = CmMad::parse(&buf);
        }

        #[test]
        fn parse_never_panics_on_cm_headers(
            attr in 0u16..0x20,
            body in proptest::collection::vec(any::<u8>(), mad::MAD_DATA_LEN),
        ) {
            let mut buf = [0u8; mad::MAD_LEN];
            MadRepr::cm(CmAttribute::from(attr), 1).emit(&mut MadHeader::new_unchecked(&mut buf[..]));
            buf[mad::HEADER_LEN..].copy_from_slice(&body);
            if let Ok(m) = CmMad::parse(&buf) {
                prop_assert_eq!(u16::from(m.message.attribute()), attr);
            }
        }
    }
}
