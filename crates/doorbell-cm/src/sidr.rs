//! Service ID resolution: SIDR_REQ and SIDR_REP (IBA Vol 1 §12.11,
//! Tables 119–121; attributes 0x0017 and 0x0018; the kernel's
//! `CM_SIDR_REQ_*`, `CM_SIDR_REP_*` and `enum ib_cm_sidr_status`).
//!
//! A UD client asks which QP and Q_Key serve a service ID; `rdma_cm` does
//! this for `RDMA_PS_UDP` and `RDMA_PS_IB` ids, with its
//! [`crate::ip_cm`] header first in the SIDR_REQ's private data.

use doorbell_types::Qpn;

use crate::{
    Error, Result, be16, be24, be32, be64, enum_with_unknown, fixed_view, set_be16, set_be24,
    set_be32, set_be64,
};

/// Field offsets of the SIDR_REQ, from the start of the MAD data area.
pub mod req_field {
    use crate::Field;

    /// Request ID, BE32.
    pub const REQUEST_ID: Field = 0..4;
    /// Partition key, BE16 (bytes 6..8 are reserved).
    pub const PKEY: Field = 4..6;
    /// Reserved.
    pub const RESERVED: Field = 6..8;
    /// Service ID, BE64.
    pub const SERVICE_ID: Field = 8..16;
    /// Private data.
    pub const PRIVATE_DATA: Field = 16..232;
}

/// Field offsets of the SIDR_REP, from the start of the MAD data area.
pub mod rep_field {
    use crate::Field;

    /// Request ID, BE32.
    pub const REQUEST_ID: Field = 0..4;
    /// Status ([`super::SidrStatus`]).
    pub const STATUS: usize = 4;
    /// Additional information length in bytes.
    pub const ADDITIONAL_INFO_LENGTH: usize = 5;
    /// Vendor ID (ECE), bits 23..8, BE16.
    pub const VENDOR_ID_H: Field = 6..8;
    /// QPN, BE24.
    pub const QPN: Field = 8..11;
    /// Vendor ID, bits 7..0.
    pub const VENDOR_ID_L: usize = 11;
    /// Service ID, BE64.
    pub const SERVICE_ID: Field = 12..20;
    /// Q_Key, BE32.
    pub const QKEY: Field = 20..24;
    /// Additional information (a ClassPortInfo for a redirect).
    pub const ADDITIONAL_INFO: Field = 24..96;
    /// Private data.
    pub const PRIVATE_DATA: Field = 96..232;
}

/// Length of the SIDR_REQ's private data.
pub const REQ_PRIVATE_DATA_LEN: usize = req_field::PRIVATE_DATA.end - req_field::PRIVATE_DATA.start;
/// Length of the SIDR_REP's additional information area.
pub const ADDITIONAL_INFO_LEN: usize =
    rep_field::ADDITIONAL_INFO.end - rep_field::ADDITIONAL_INFO.start;
/// Length of the SIDR_REP's private data.
pub const REP_PRIVATE_DATA_LEN: usize = rep_field::PRIVATE_DATA.end - rep_field::PRIVATE_DATA.start;
/// Length of either message: the whole MAD data area.
pub const MSG_LEN: usize = req_field::PRIVATE_DATA.end;

enum_with_unknown! {
    /// SIDR_REP status (IBA Vol 1 Table 121; `enum ib_cm_sidr_status`).
    pub enum SidrStatus(u8) {
        /// The QPN and Q_Key are valid.
        Success = 0,
        /// No one serves the service ID.
        Unsupported = 1,
        /// The service provider rejected the request.
        Reject = 2,
        /// No QP available.
        NoQp = 3,
        /// Ask elsewhere (additional information: a ClassPortInfo).
        Redirect = 4,
        /// Unsupported class version.
        UnsupportedVersion = 5,
    }
}

fixed_view!(
    /// A SIDR_REQ message in the MAD data area (IBA Vol 1 §12.11.1), 232
    /// bytes.
    SidrReqMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> SidrReqMsg<T> {
    /// Request ID.
    pub fn request_id(&self) -> u32 {
        be32(self.buffer.as_ref(), req_field::REQUEST_ID)
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be16(self.buffer.as_ref(), req_field::PKEY)
    }
    /// Service ID.
    pub fn service_id(&self) -> u64 {
        be64(self.buffer.as_ref(), req_field::SERVICE_ID)
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[req_field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SidrReqMsg<T> {
    /// Sets the request ID.
    pub fn set_request_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), req_field::REQUEST_ID, v);
    }
    /// Sets the partition key and clears the reserved bytes after it.
    pub fn set_pkey(&mut self, v: u16) {
        set_be16(self.buffer.as_mut(), req_field::PKEY, v);
        set_be16(self.buffer.as_mut(), req_field::RESERVED, 0);
    }
    /// Sets the service ID.
    pub fn set_service_id(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), req_field::SERVICE_ID, v);
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[req_field::PRIVATE_DATA]
    }
}

/// A parsed SIDR_REQ. Reserved bytes are ignored on parse and zeroed on
/// emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrReqRepr {
    /// Request ID: the requester's handle, echoed in the SIDR_REP.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// Service ID asked for.
    pub service_id: u64,
    /// Private data.
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl SidrReqRepr {
    /// Parses a SIDR_REQ view.
    pub fn parse<T: AsRef<[u8]>>(m: &SidrReqMsg<T>) -> Result<Self> {
        m.check_len()?;
        Ok(Self {
            request_id: m.request_id(),
            pkey: m.pkey(),
            service_id: m.service_id(),
            private_data: crate::array(m.buffer.as_ref(), req_field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut SidrReqMsg<T>) {
        m.set_request_id(self.request_id);
        m.set_pkey(self.pkey);
        m.set_service_id(self.service_id);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

fixed_view!(
    /// A SIDR_REP message in the MAD data area (IBA Vol 1 §12.11.2), 232
    /// bytes.
    SidrRepMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> SidrRepMsg<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Request ID.
    pub fn request_id(&self) -> u32 {
        be32(self.b(), rep_field::REQUEST_ID)
    }
    /// Status.
    pub fn status(&self) -> SidrStatus {
        SidrStatus::from(self.b()[rep_field::STATUS])
    }
    /// Additional information length (may exceed the area in a bad
    /// message).
    pub fn additional_info_length(&self) -> u8 {
        self.b()[rep_field::ADDITIONAL_INFO_LENGTH]
    }
    /// Vendor ID, 24 bits gathered from its two places.
    pub fn vendor_id(&self) -> u32 {
        (u32::from(be16(self.b(), rep_field::VENDOR_ID_H)) << 8)
            | u32::from(self.b()[rep_field::VENDOR_ID_L])
    }
    /// QPN.
    pub fn qpn(&self) -> Qpn {
        Qpn::new(be24(self.b(), rep_field::QPN))
    }
    /// Service ID.
    pub fn service_id(&self) -> u64 {
        be64(self.b(), rep_field::SERVICE_ID)
    }
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        be32(self.b(), rep_field::QKEY)
    }
    /// The whole additional information area.
    pub fn additional_info(&self) -> &[u8] {
        &self.b()[rep_field::ADDITIONAL_INFO]
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.b()[rep_field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SidrRepMsg<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the request ID.
    pub fn set_request_id(&mut self, v: u32) {
        set_be32(self.m(), rep_field::REQUEST_ID, v);
    }
    /// Sets the status.
    pub fn set_status(&mut self, v: SidrStatus) {
        self.m()[rep_field::STATUS] = u8::from(v);
    }
    /// Sets the additional information length.
    pub fn set_additional_info_length(&mut self, v: u8) {
        self.m()[rep_field::ADDITIONAL_INFO_LENGTH] = v;
    }
    /// Sets the vendor ID (low 24 bits of `v`) into its two places.
    pub fn set_vendor_id(&mut self, v: u32) {
        set_be16(self.m(), rep_field::VENDOR_ID_H, (v >> 8) as u16);
        self.m()[rep_field::VENDOR_ID_L] = v as u8;
    }
    /// Sets the QPN.
    pub fn set_qpn(&mut self, v: Qpn) {
        set_be24(self.m(), rep_field::QPN, v.get());
    }
    /// Sets the service ID.
    pub fn set_service_id(&mut self, v: u64) {
        set_be64(self.m(), rep_field::SERVICE_ID, v);
    }
    /// Sets the Q_Key.
    pub fn set_qkey(&mut self, v: u32) {
        set_be32(self.m(), rep_field::QKEY, v);
    }
    /// The additional information area, writable.
    pub fn additional_info_mut(&mut self) -> &mut [u8] {
        &mut self.m()[rep_field::ADDITIONAL_INFO]
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.m()[rep_field::PRIVATE_DATA]
    }
}

/// A parsed SIDR_REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrRepRepr {
    /// Request ID of the SIDR_REQ answered.
    pub request_id: u32,
    /// Status; unknown values are kept.
    pub status: SidrStatus,
    /// Bytes of `additional_info` that carry information (at most
    /// [`ADDITIONAL_INFO_LEN`]).
    pub additional_info_len: u8,
    /// Vendor ID for ECE, 24 bits.
    pub vendor_id: u32,
    /// The QP serving the service ID.
    pub qpn: Qpn,
    /// The service ID resolved.
    pub service_id: u64,
    /// The QP's Q_Key.
    pub qkey: u32,
    /// The additional information area, all of it.
    pub additional_info: [u8; ADDITIONAL_INFO_LEN],
    /// Private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl SidrRepRepr {
    /// Parses a SIDR_REP view; an additional information length past its
    /// area is [`Error::Malformed`].
    pub fn parse<T: AsRef<[u8]>>(m: &SidrRepMsg<T>) -> Result<Self> {
        m.check_len()?;
        let additional_info_len = m.additional_info_length();
        if usize::from(additional_info_len) > ADDITIONAL_INFO_LEN {
            return Err(Error::Malformed);
        }
        Ok(Self {
            request_id: m.request_id(),
            status: m.status(),
            additional_info_len,
            vendor_id: m.vendor_id(),
            qpn: m.qpn(),
            service_id: m.service_id(),
            qkey: m.qkey(),
            additional_info: crate::array(m.b(), rep_field::ADDITIONAL_INFO),
            private_data: crate::array(m.b(), rep_field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut SidrRepMsg<T>) {
        m.set_request_id(self.request_id);
        m.set_status(self.status);
        m.set_additional_info_length(self.additional_info_len);
        m.set_vendor_id(self.vendor_id);
        m.set_qpn(self.qpn);
        m.set_service_id(self.service_id);
        m.set_qkey(self.qkey);
        m.additional_info_mut()
            .copy_from_slice(&self.additional_info);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

const _: () = assert!(MSG_LEN == crate::mad::MAD_DATA_LEN);
const _: () = assert!(rep_field::PRIVATE_DATA.end == MSG_LEN);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_sidr_req()(
            request_id: u32, pkey: u16, service_id: u64,
            pd in proptest::collection::vec(any::<u8>(), REQ_PRIVATE_DATA_LEN),
        ) -> SidrReqRepr {
            SidrReqRepr { request_id, pkey, service_id, private_data: pd.try_into().unwrap() }
        }
    }

    prop_compose! {
        pub(crate) fn arb_sidr_rep()(
            request_id: u32, status: u8, len in 0u8..=ADDITIONAL_INFO_LEN as u8,
            vendor_id in 0u32..1 << 24, qpn in 0u32..1 << 24, service_id: u64, qkey: u32,
            info in proptest::collection::vec(any::<u8>(), ADDITIONAL_INFO_LEN),
            pd in proptest::collection::vec(any::<u8>(), REP_PRIVATE_DATA_LEN),
        ) -> SidrRepRepr {
            SidrRepRepr {
                request_id, status: SidrStatus::from(status), additional_info_len: len,
                vendor_id, qpn: Qpn::new(qpn), service_id, qkey,
                additional_info: info.try_into().unwrap(), private_data: pd.try_into().unwrap(),
            }
        }
    }

    #[test]
    fn sidr_req_deconstruct_and_construct() {
        let mut golden = [0u8; MSG_LEN];
        golden[..16].copy_from_slice(&[
            0, 0, 0, 0x2a, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x12, 0x34,
        ]);
        golden[16] = 0x33;
        let r = SidrReqRepr::parse(&SidrReqMsg::new_checked(&golden[..]).unwrap()).unwrap();
        assert_eq!((r.request_id, r.pkey), (0x2a, 0xffff));
        assert_eq!(r.service_id, 0x0000_0000_0111_1234);
        assert_eq!(r.private_data[0], 0x33);
        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut SidrReqMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    #[test]
    fn sidr_rep_deconstruct_and_construct() {
        let mut golden = [0u8; MSG_LEN];
        golden[..24].copy_from_slice(&[
            0, 0, 0, 0x2a, 3, 0, 0x12, 0x34, // request, status NoQp, info 0, vendor high
            0x00, 0x0c, 0x0d, 0x56, // QPN 0xc0d, vendor low
            0, 0, 0, 0, 0x01, 0x11, 0x12, 0x34, // service ID
            0x01, 0x23, 0x45, 0x67, // Q_Key
        ]);
        golden[96] = 0x44;
        let r = SidrRepRepr::parse(&SidrRepMsg::new_checked(&golden[..]).unwrap()).unwrap();
        assert_eq!(r.status, SidrStatus::NoQp);
        assert_eq!(r.vendor_id, 0x12_3456);
        assert_eq!(r.qpn, Qpn::new(0xc0d));
        assert_eq!(r.qkey, 0x0123_4567);
        assert_eq!(r.private_data[0], 0x44);
        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut SidrRepMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
        golden[5] = 73;
        let bad = SidrRepRepr::parse(&SidrRepMsg::new_unchecked(&golden[..]));
        assert_eq!(bad, Err(Error::Malformed));
    }

    proptest! {
        #[test]
        fn sidr_req_roundtrip(r in arb_sidr_req()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut SidrReqMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(&buf[req_field::RESERVED], &[0, 0]);
            prop_assert_eq!(SidrReqRepr::parse(&SidrReqMsg::new_unchecked(&buf[..])), Ok(r));
        }

        #[test]
        fn sidr_rep_roundtrip(r in arb_sidr_rep()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut SidrRepMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(SidrRepRepr::parse(&SidrRepMsg::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
