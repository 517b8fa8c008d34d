//! MRA, the message receipt acknowledgement (IBA Vol 1 §12.6.6, Table 107;
//! attribute 0x0011; the kernel's `CM_MRA_*`).
//!
//! A side that needs longer than the peer's CM response timeout to answer a
//! REQ, REP or LAP sends an MRA: the peer then waits the service timeout
//! before it retries.

use crate::rej::MsgResponse;
use crate::{Error, Result, be32, fixed_view, set_be32};

/// Field offsets of the MRA, from the start of the MAD data area.
pub mod field {
    use crate::{Bits, Field};

    /// Local communication ID, BE32.
    pub const LOCAL_COMM_ID: Field = 0..4;
    /// Remote communication ID, BE32.
    pub const REMOTE_COMM_ID: Field = 4..8;
    /// Message MRAed, 2 bits ([`crate::MsgResponse`]).
    pub const MESSAGE_MRAED: Bits = Bits::new(8, 6, 2);
    /// Service timeout, 5 bits (4.096 µs × 2^n).
    pub const SERVICE_TIMEOUT: Bits = Bits::new(9, 3, 5);
    /// Private data.
    pub const PRIVATE_DATA: Field = 10..232;
}

/// Length of the MRA's private data.
pub const PRIVATE_DATA_LEN: usize = field::PRIVATE_DATA.end - field::PRIVATE_DATA.start;
/// Length of the MRA: the whole MAD data area.
pub const MSG_LEN: usize = field::PRIVATE_DATA.end;

fixed_view!(
    /// An MRA message in the MAD data area (IBA Vol 1 §12.6.6), 232 bytes.
    MraMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> MraMsg<T> {
    /// Local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LOCAL_COMM_ID)
    }
    /// Remote communication ID.
    pub fn remote_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REMOTE_COMM_ID)
    }
    /// Message MRAed.
    pub fn message_mraed(&self) -> MsgResponse {
        MsgResponse::from(field::MESSAGE_MRAED.get(self.buffer.as_ref()))
    }
    /// Service timeout exponent.
    pub fn service_timeout(&self) -> u8 {
        field::SERVICE_TIMEOUT.get(self.buffer.as_ref())
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MraMsg<T> {
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::LOCAL_COMM_ID, v);
    }
    /// Sets the remote communication ID.
    pub fn set_remote_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::REMOTE_COMM_ID, v);
    }
    /// Sets message MRAed.
    pub fn set_message_mraed(&mut self, v: MsgResponse) {
        field::MESSAGE_MRAED.set(self.buffer.as_mut(), u8::from(v));
    }
    /// Sets the service timeout exponent (5 bits).
    pub fn set_service_timeout(&mut self, v: u8) {
        field::SERVICE_TIMEOUT.set(self.buffer.as_mut(), v);
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A parsed MRA. Reserved bits are ignored on parse and zeroed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MraRepr {
    /// Local communication ID of the acknowledging side.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged.
    pub message_mraed: MsgResponse,
    /// Service timeout exponent, 5 bits.
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl MraRepr {
    /// Parses an MRA view; the reserved message-MRAed value 3 is
    /// [`Error::Malformed`].
    pub fn parse<T: AsRef<[u8]>>(m: &MraMsg<T>) -> Result<Self> {
        m.check_len()?;
        let message_mraed = m.message_mraed();
        if matches!(message_mraed, MsgResponse::Unknown(_)) {
            return Err(Error::Malformed);
        }
        Ok(Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            message_mraed,
            service_timeout: m.service_timeout(),
            private_data: crate::array(m.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut MraMsg<T>) {
        m.buffer.as_mut()[..MSG_LEN].fill(0);
        m.set_local_comm_id(self.local_comm_id);
        m.set_remote_comm_id(self.remote_comm_id);
        m.set_message_mraed(self.message_mraed);
        m.set_service_timeout(self.service_timeout);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

const _: () = assert!(MSG_LEN == crate::mad::MAD_DATA_LEN);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_mra()(
            local_comm_id: u32, remote_comm_id: u32, msg in 0u8..3, service_timeout in 0u8..32,
            pd in proptest::collection::vec(any::<u8>(), PRIVATE_DATA_LEN),
        ) -> MraRepr {
            MraRepr {
                local_comm_id, remote_comm_id, message_mraed: MsgResponse::from(msg),
                service_timeout, private_data: pd.try_into().unwrap(),
            }
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let mut golden = [0u8; MSG_LEN];
        // local 0x0a0b0c0d, remote 0x01020304, REQ MRAed, timeout 24 << 3.
        golden[..10].copy_from_slice(&[10, 11, 12, 13, 1, 2, 3, 4, 0x00, 0xc0]);
        golden[10] = 0x99;
        golden[231] = 0x42;
        let m = MraMsg::new_checked(&golden[..]).unwrap();
        let r = MraRepr::parse(&m).unwrap();
        assert_eq!(r.local_comm_id, 0x0a0b_0c0d);
        assert_eq!(r.message_mraed, MsgResponse::Req);
        assert_eq!(r.service_timeout, 24);
        assert_eq!((r.private_data[0], r.private_data[221]), (0x99, 0x42));
        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut MraMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
        golden[8] = 0xc0;
        assert_eq!(
            MraRepr::parse(&MraMsg::new_unchecked(&golden[..])),
            Err(Error::Malformed)
        );
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_mra()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut MraMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(MraRepr::parse(&MraMsg::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
