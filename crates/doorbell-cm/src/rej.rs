//! REJ, the reject (IBA Vol 1 §12.6.7, Tables 108–109; attribute 0x0012;
//! the kernel's `CM_REJ_*` and `enum ib_cm_rej_reason`).
//!
//! Either side may reject a REQ or a REP, and a side that times out waiting
//! for a REP or RTU sends one too. The reason says why; the additional
//! reject information (ARI, up to 72 bytes) depends on the reason (a GID
//! for a redirect, the offending value for an invalid field); `rdma_cm`
//! passes the private data of a consumer-defined reject to the peer.

use crate::{Error, Result, be16, be32, enum_with_unknown, fixed_view, set_be16, set_be32};

/// Field offsets of the REJ, from the start of the MAD data area.
pub mod field {
    use crate::{Bits, Field};

    /// Local communication ID, BE32.
    pub const LOCAL_COMM_ID: Field = 0..4;
    /// Remote communication ID, BE32 (0 when rejecting a REQ's sender does
    /// not know it).
    pub const REMOTE_COMM_ID: Field = 4..8;
    /// Message rejected, 2 bits ([`super::MsgResponse`]).
    pub const MESSAGE_REJECTED: Bits = Bits::new(8, 6, 2);
    /// Reject info length in bytes, 7 bits.
    pub const REJECT_INFO_LENGTH: Bits = Bits::new(9, 1, 7);
    /// Reason, BE16 ([`super::RejectReason`]).
    pub const REASON: Field = 10..12;
    /// Additional reject information.
    pub const ARI: Field = 12..84;
    /// Private data.
    pub const PRIVATE_DATA: Field = 84..232;
}

/// Length of the ARI area.
pub const ARI_LEN: usize = field::ARI.end - field::ARI.start;
/// Length of the REJ's private data.
pub const PRIVATE_DATA_LEN: usize = field::PRIVATE_DATA.end - field::PRIVATE_DATA.start;
/// Length of the REJ: the whole MAD data area.
pub const MSG_LEN: usize = field::PRIVATE_DATA.end;

enum_with_unknown! {
    /// Which message a REJ rejects or an MRA acknowledges (2 bits; the
    /// kernel's `enum cm_msg_response`).
    pub enum MsgResponse(u8) {
        /// A REQ.
        Req = 0,
        /// A REP.
        Rep = 1,
        /// Another message (for an MRA: a LAP).
        Other = 2,
    }
}

enum_with_unknown! {
    /// Reject reason (IBA Vol 1 Table 109; the kernel's
    /// `enum ib_cm_rej_reason`). Reasons this crate does not name are kept
    /// as `Unknown`: the spec adds them over time.
    pub enum RejectReason(u16) {
        /// No QP available.
        NoQp = 1,
        /// No EE context available.
        NoEec = 2,
        /// No resources available.
        NoResources = 3,
        /// Timeout waiting for a REP or RTU.
        Timeout = 4,
        /// The REQ asks for something unsupported.
        Unsupported = 5,
        /// Invalid communication ID.
        InvalidCommId = 6,
        /// Invalid communication instance.
        InvalidCommInstance = 7,
        /// No one listens on the service ID.
        InvalidServiceId = 8,
        /// Invalid transport service type.
        InvalidTransportType = 9,
        /// Stale connection: the QP is still connected in the peer's view.
        StaleConn = 10,
        /// RDC does not exist.
        RdcNotExist = 11,
        /// Primary remote port GID rejected (ARI: a GID to use).
        InvalidGid = 12,
        /// Primary remote port LID rejected.
        InvalidLid = 13,
        /// Primary SL rejected.
        InvalidSl = 14,
        /// Primary traffic class rejected.
        InvalidTrafficClass = 15,
        /// Primary hop limit rejected.
        InvalidHopLimit = 16,
        /// Primary packet rate rejected.
        InvalidPacketRate = 17,
        /// Alternate remote port GID rejected.
        InvalidAltGid = 18,
        /// Alternate remote port LID rejected.
        InvalidAltLid = 19,
        /// Alternate SL rejected.
        InvalidAltSl = 20,
        /// Alternate traffic class rejected.
        InvalidAltTrafficClass = 21,
        /// Alternate hop limit rejected.
        InvalidAltHopLimit = 22,
        /// Alternate packet rate rejected.
        InvalidAltPacketRate = 23,
        /// Port CM redirect (ARI: a ClassPortInfo).
        PortCmRedirect = 24,
        /// Port redirect.
        PortRedirect = 25,
        /// Invalid path MTU.
        InvalidMtu = 26,
        /// Insufficient responder resources.
        InsufficientRespResources = 27,
        /// Consumer defined: the application rejected (`rdma_reject`).
        ConsumerDefined = 28,
        /// Invalid RNR retry count.
        InvalidRnrRetry = 29,
        /// Duplicate local communication ID.
        DuplicateLocalCommId = 30,
        /// Unsupported class version (ARI: the highest supported).
        InvalidClassVersion = 31,
        /// Primary flow label rejected.
        InvalidFlowLabel = 32,
        /// Alternate flow label rejected.
        InvalidAltFlowLabel = 33,
        /// ECE vendor option not supported.
        VendorOptionNotSupported = 35,
    }
}

fixed_view!(
    /// A REJ message in the MAD data area (IBA Vol 1 §12.6.7), 232 bytes.
    RejMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> RejMsg<T> {
    /// Local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LOCAL_COMM_ID)
    }
    /// Remote communication ID.
    pub fn remote_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REMOTE_COMM_ID)
    }
    /// Message rejected.
    pub fn message_rejected(&self) -> MsgResponse {
        MsgResponse::from(field::MESSAGE_REJECTED.get(self.buffer.as_ref()))
    }
    /// Reject info length (may exceed the ARI area in a bad message).
    pub fn reject_info_length(&self) -> u8 {
        field::REJECT_INFO_LENGTH.get(self.buffer.as_ref())
    }
    /// Reason.
    pub fn reason(&self) -> RejectReason {
        RejectReason::from(be16(self.buffer.as_ref(), field::REASON))
    }
    /// The whole 72-byte ARI area.
    pub fn ari(&self) -> &[u8] {
        &self.buffer.as_ref()[field::ARI]
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RejMsg<T> {
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::LOCAL_COMM_ID, v);
    }
    /// Sets the remote communication ID.
    pub fn set_remote_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::REMOTE_COMM_ID, v);
    }
    /// Sets message rejected.
    pub fn set_message_rejected(&mut self, v: MsgResponse) {
        field::MESSAGE_REJECTED.set(self.buffer.as_mut(), u8::from(v));
    }
    /// Sets the reject info length (7 bits).
    pub fn set_reject_info_length(&mut self, v: u8) {
        field::REJECT_INFO_LENGTH.set(self.buffer.as_mut(), v);
    }
    /// Sets the reason.
    pub fn set_reason(&mut self, v: RejectReason) {
        set_be16(self.buffer.as_mut(), field::REASON, u16::from(v));
    }
    /// The ARI area, writable.
    pub fn ari_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::ARI]
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A parsed REJ. Reserved bits are ignored on parse and zeroed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejRepr {
    /// Local communication ID of the rejecting side.
    pub local_comm_id: u32,
    /// Remote communication ID (the rejected side's).
    pub remote_comm_id: u32,
    /// Which message is rejected.
    pub message_rejected: MsgResponse,
    /// Reason; unknown reasons are kept.
    pub reason: RejectReason,
    /// Bytes of `ari` that carry information (at most [`ARI_LEN`]).
    pub ari_len: u8,
    /// The ARI area, all of it.
    pub ari: [u8; ARI_LEN],
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RejRepr {
    /// The additional reject information: the first `ari_len` bytes.
    pub fn ari_bytes(&self) -> &[u8] {
        &self.ari[..usize::from(self.ari_len).min(ARI_LEN)]
    }

    /// Parses a REJ view. Fails with [`Error::Malformed`] if the message
    /// rejected is the reserved value 3 or the info length exceeds the ARI
    /// area.
    pub fn parse<T: AsRef<[u8]>>(m: &RejMsg<T>) -> Result<Self> {
        m.check_len()?;
        let message_rejected = m.message_rejected();
        let ari_len = m.reject_info_length();
        if matches!(message_rejected, MsgResponse::Unknown(_)) || usize::from(ari_len) > ARI_LEN {
            return Err(Error::Malformed);
        }
        let b = m.buffer.as_ref();
        Ok(Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            message_rejected,
            reason: m.reason(),
            ari_len,
            ari: crate::array(b, field::ARI),
            private_data: crate::array(b, field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut RejMsg<T>) {
        m.buffer.as_mut()[..MSG_LEN].fill(0);
        m.set_local_comm_id(self.local_comm_id);
        m.set_remote_comm_id(self.remote_comm_id);
        m.set_message_rejected(self.message_rejected);
        m.set_reject_info_length(self.ari_len);
        m.set_reason(self.reason);
        m.ari_mut().copy_from_slice(&self.ari);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

const _: () = assert!(MSG_LEN == crate::mad::MAD_DATA_LEN);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_rej()(
            local_comm_id: u32, remote_comm_id: u32, msg in 0u8..3, reason: u16,
            ari_len in 0u8..=ARI_LEN as u8,
            ari in proptest::collection::vec(any::<u8>(), ARI_LEN),
            pd in proptest::collection::vec(any::<u8>(), PRIVATE_DATA_LEN),
        ) -> RejRepr {
            RejRepr {
                local_comm_id, remote_comm_id,
                message_rejected: MsgResponse::from(msg),
                reason: RejectReason::from(reason),
                ari_len,
                ari: ari.try_into().unwrap(),
                private_data: pd.try_into().unwrap(),
            }
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let mut golden = [0u8; MSG_LEN];
        // local 1, remote 2, REP rejected (1 << 6), info length 16 (<< 1),
        // reason 28 (consumer defined).
        golden[..12].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0x40, 0x20, 0, 28]);
        golden[12] = 0xfe;
        golden[84] = 0x77;
        let m = RejMsg::new_checked(&golden[..]).unwrap();
        assert_eq!(m.reason(), RejectReason::ConsumerDefined);
        assert_eq!(m.message_rejected(), MsgResponse::Rep);
        let r = RejRepr::parse(&m).unwrap();
        assert_eq!(r.ari_len, 16);
        assert_eq!(r.ari_bytes().len(), 16);
        assert_eq!(r.ari_bytes()[0], 0xfe);
        assert_eq!(r.private_data[0], 0x77);
        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut RejMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    #[test]
    fn reasons_are_the_kernels() {
        assert_eq!(u16::from(RejectReason::NoQp), 1);
        assert_eq!(u16::from(RejectReason::Timeout), 4);
        assert_eq!(u16::from(RejectReason::InvalidServiceId), 8);
        assert_eq!(u16::from(RejectReason::StaleConn), 10);
        assert_eq!(u16::from(RejectReason::PortCmRedirect), 24);
        assert_eq!(u16::from(RejectReason::InvalidMtu), 26);
        assert_eq!(u16::from(RejectReason::ConsumerDefined), 28);
        assert_eq!(u16::from(RejectReason::InvalidAltFlowLabel), 33);
        assert_eq!(RejectReason::from(34), RejectReason::Unknown(34));
    }

    #[test]
    fn rejects_what_the_format_forbids() {
        let mut buf = [0u8; MSG_LEN];
        buf[8] = 0xc0; // message rejected 3
        assert_eq!(
            RejRepr::parse(&RejMsg::new_unchecked(&buf[..])),
            Err(Error::Malformed)
        );
        buf[8] = 0;
        buf[9] = 73 << 1; // longer than the ARI area
        assert_eq!(
            RejRepr::parse(&RejMsg::new_unchecked(&buf[..])),
            Err(Error::Malformed)
        );
        buf[9] = 72 << 1;
        assert!(RejRepr::parse(&RejMsg::new_unchecked(&buf[..])).is_ok());
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_rej()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut RejMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[8] & 0x3f, 0);
            prop_assert_eq!(buf[9] & 1, 0);
            prop_assert_eq!(RejRepr::parse(&RejMsg::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
