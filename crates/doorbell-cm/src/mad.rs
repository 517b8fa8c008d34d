//! The common MAD header (IBTA Vol 1 §13.4.2; the kernel's
//! `struct ib_mad_hdr` in `include/rdma/ib_mad.h`) and the constants of the
//! General Services Interface that carries CM MADs.
//!
//! A MAD is 256 bytes: this 24-byte header, then a 232-byte data area whose
//! layout the attribute ID names. CM MADs have base version 1, management
//! class 0x07 and class version 2, and are all sent with method Send (the CM
//! matches requests and replies by communication ID, not by MAD method).

use crate::{
    Result, be16, be32, be64, enum_with_unknown, fixed_view, set_be16, set_be32, set_be64,
};

/// Field offsets of the common MAD header.
pub mod field {
    use crate::Field;

    /// Base version.
    pub const BASE_VERSION: usize = 0;
    /// Management class.
    pub const MGMT_CLASS: usize = 1;
    /// Class version.
    pub const CLASS_VERSION: usize = 2;
    /// Method (bit 7 is the response bit).
    pub const METHOD: usize = 3;
    /// Status, BE16.
    pub const STATUS: Field = 4..6;
    /// Class-specific, BE16.
    pub const CLASS_SPECIFIC: Field = 6..8;
    /// Transaction ID, BE64.
    pub const TRANSACTION_ID: Field = 8..16;
    /// Attribute ID, BE16.
    pub const ATTRIBUTE_ID: Field = 16..18;
    /// Reserved, BE16.
    pub const RESERVED: Field = 18..20;
    /// Attribute modifier, BE32.
    pub const ATTRIBUTE_MODIFIER: Field = 20..24;
}

/// Length of the common MAD header.
pub const HEADER_LEN: usize = field::ATTRIBUTE_MODIFIER.end;
/// Length of a MAD.
pub const MAD_LEN: usize = 256;
/// Length of the data area after the header.
pub const MAD_DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// Base version of every MAD (`IB_MGMT_BASE_VERSION`).
pub const BASE_VERSION: u8 = 1;
/// Management class of the Communication Manager (`IB_MGMT_CLASS_CM`).
pub const MGMT_CLASS_CM: u8 = 0x07;
/// Class version of the CM since IBA 1.2 (`IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;

/// The General Services Interface's QP number: every port's QP 1.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of QP 1 (`IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The default (full-membership) partition key.
pub const DEFAULT_PKEY: u16 = 0xffff;

enum_with_unknown! {
    /// MAD method (IBTA Vol 1 §13.4.5, Table 147), the common ones.
    pub enum Method(u8) {
        /// Get.
        Get = 0x01,
        /// Set.
        Set = 0x02,
        /// Send: what the CM uses for every message.
        Send = 0x03,
        /// Trap.
        Trap = 0x05,
        /// Report.
        Report = 0x06,
        /// TrapRepress.
        TrapRepress = 0x07,
        /// GetResp.
        GetResp = 0x81,
        /// ReportResp.
        ReportResp = 0x86,
    }
}

enum_with_unknown! {
    /// Attribute IDs of the CM class (IBTA Vol 1 §12.6, Table 104; the
    /// kernel's `CM_*_ATTR_ID`).
    pub enum CmAttribute(u16) {
        /// ClassPortInfo.
        ClassPortInfo = 0x0001,
        /// REQ: request for communication.
        Req = 0x0010,
        /// MRA: message receipt acknowledgement.
        Mra = 0x0011,
        /// REJ: reject.
        Rej = 0x0012,
        /// REP: reply to request for communication.
        Rep = 0x0013,
        /// RTU: ready to use.
        Rtu = 0x0014,
        /// DREQ: disconnection request.
        Dreq = 0x0015,
        /// DREP: reply to disconnection request.
        Drep = 0x0016,
        /// SIDR_REQ: service ID resolution request.
        SidrReq = 0x0017,
        /// SIDR_REP: service ID resolution response.
        SidrRep = 0x0018,
        /// LAP: load alternate path.
        Lap = 0x0019,
        /// APR: alternate path response.
        Apr = 0x001a,
    }
}

fixed_view!(
    /// The common MAD header (IBTA Vol 1 §13.4.2), 24 bytes, big-endian.
    MadHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> MadHeader<T> {
    /// Base version.
    pub fn base_version(&self) -> u8 {
        self.buffer.as_ref()[field::BASE_VERSION]
    }
    /// Management class.
    pub fn mgmt_class(&self) -> u8 {
        self.buffer.as_ref()[field::MGMT_CLASS]
    }
    /// Class version.
    pub fn class_version(&self) -> u8 {
        self.buffer.as_ref()[field::CLASS_VERSION]
    }
    /// Method.
    pub fn method(&self) -> Method {
        Method::from(self.buffer.as_ref()[field::METHOD])
    }
    /// Status.
    pub fn status(&self) -> u16 {
        be16(self.buffer.as_ref(), field::STATUS)
    }
    /// Class-specific field.
    pub fn class_specific(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CLASS_SPECIFIC)
    }
    /// Transaction ID.
    pub fn transaction_id(&self) -> u64 {
        be64(self.buffer.as_ref(), field::TRANSACTION_ID)
    }
    /// Attribute ID, raw (see [`CmAttribute`] for the CM's).
    pub fn attribute_id(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ATTRIBUTE_ID)
    }
    /// Attribute modifier.
    pub fn attribute_modifier(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ATTRIBUTE_MODIFIER)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MadHeader<T> {
    /// Sets the base version.
    pub fn set_base_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::BASE_VERSION] = v;
    }
    /// Sets the management class.
    pub fn set_mgmt_class(&mut self, v: u8) {
        self.buffer.as_mut()[field::MGMT_CLASS] = v;
    }
    /// Sets the class version.
    pub fn set_class_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::CLASS_VERSION] = v;
    }
    /// Sets the method.
    pub fn set_method(&mut self, v: Method) {
        self.buffer.as_mut()[field::METHOD] = u8::from(v);
    }
    /// Sets the status.
    pub fn set_status(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::STATUS, v);
    }
    /// Sets the class-specific field.
    pub fn set_class_specific(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::CLASS_SPECIFIC, v);
    }
    /// Sets the transaction ID.
    pub fn set_transaction_id(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::TRANSACTION_ID, v);
    }
    /// Sets the attribute ID and clears the reserved field after it.
    pub fn set_attribute_id(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), field::ATTRIBUTE_ID, v);
        set_be16(self.buffer.as_mut(), field::RESERVED, 0);
    }
    /// Sets the attribute modifier.
    pub fn set_attribute_modifier(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::ATTRIBUTE_MODIFIER, v);
    }
}

/// A parsed common MAD header. The reserved field is ignored on parse and
/// zeroed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadRepr {
    /// Base version ([`BASE_VERSION`]).
    pub base_version: u8,
    /// Management class ([`MGMT_CLASS_CM`] for the CM).
    pub mgmt_class: u8,
    /// Class version ([`CM_CLASS_VERSION`] for the CM).
    pub class_version: u8,
    /// Method.
    pub method: Method,
    /// Status (0 in CM MADs).
    pub status: u16,
    /// Class-specific field (0 in CM MADs).
    pub class_specific: u16,
    /// Transaction ID: the CM keeps it for the life of one exchange.
    pub transaction_id: u64,
    /// Attribute ID.
    pub attribute_id: u16,
    /// Attribute modifier (the kernel's ECE puts options here in REQ/REP).
    pub attribute_modifier: u32,
}

impl MadRepr {
    /// The header of a CM MAD: versions and class of the CM, method Send,
    /// status 0, attribute modifier 0.
    pub fn cm(attribute: CmAttribute, transaction_id: u64) -> Self {
        Self {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: Method::Send,
            status: 0,
            class_specific: 0,
            transaction_id,
            attribute_id: u16::from(attribute),
            attribute_modifier: 0,
        }
    }

    /// True if versions and class are the CM's.
    pub const fn is_cm(&self) -> bool {
        self.base_version == BASE_VERSION
            && self.mgmt_class == MGMT_CLASS_CM
            && self.class_version == CM_CLASS_VERSION
    }

    /// Parses a header view. Any values pass; [`crate::CmMad::parse`] checks
    /// that it is the CM's.
    pub fn parse<T: AsRef<[u8]>>(h: &MadHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self {
            base_version: h.base_version(),
            mgmt_class: h.mgmt_class(),
            class_version: h.class_version(),
            method: h.method(),
            status: h.status(),
            class_specific: h.class_specific(),
            transaction_id: h.transaction_id(),
            attribute_id: h.attribute_id(),
            attribute_modifier: h.attribute_modifier(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut MadHeader<T>) {
        h.set_base_version(self.base_version);
        h.set_mgmt_class(self.mgmt_class);
        h.set_class_version(self.class_version);
        h.set_method(self.method);
        h.set_status(self.status);
        h.set_class_specific(self.class_specific);
        h.set_transaction_id(self.transaction_id);
        h.set_attribute_id(self.attribute_id);
        h.set_attribute_modifier(self.attribute_modifier);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_mad()(
            base_version: u8, mgmt_class: u8, class_version: u8, method: u8,
            status: u16, class_specific: u16, transaction_id: u64,
            attribute_id: u16, attribute_modifier: u32,
        ) -> MadRepr {
            MadRepr {
                base_version, mgmt_class, class_version, method: Method::from(method),
                status, class_specific, transaction_id, attribute_id, attribute_modifier,
            }
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let golden = [
            0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, // versions, class, method, status
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // transaction ID
            0x00, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, // REP, modifier 5
        ];
        let h = MadHeader::new_checked(&golden[..]).unwrap();
        assert_eq!(h.method(), Method::Send);
        assert_eq!(h.transaction_id(), 0x1122_3344_5566_7788);
        assert_eq!(CmAttribute::from(h.attribute_id()), CmAttribute::Rep);
        assert_eq!(h.attribute_modifier(), 5);
        assert!(MadHeader::new_checked(&golden[..23]).is_err());

        let mut r = MadRepr::cm(CmAttribute::Rep, 0x1122_3344_5566_7788);
        assert!(r.is_cm());
        r.attribute_modifier = 5;
        assert_eq!(MadRepr::parse(&h), Ok(r));
        let mut buf = [0xa5u8; HEADER_LEN];
        r.emit(&mut MadHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    #[test]
    fn constants() {
        assert_eq!(HEADER_LEN, 24);
        assert_eq!(MAD_DATA_LEN, 232);
        assert_eq!(GSI_QKEY, 0x8001_0000);
        for a in 0x0001..=0x001a_u16 {
            let attr = CmAttribute::from(a);
            if !matches!(attr, CmAttribute::Unknown(_)) {
                assert_eq!(MadRepr::cm(attr, 0).attribute_id, a);
            }
        }
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_mad()) {
            let mut buf = [0xa5u8; HEADER_LEN];
            r.emit(&mut MadHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(&buf[field::RESERVED], &[0, 0]);
            prop_assert_eq!(MadRepr::parse(&MadHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
