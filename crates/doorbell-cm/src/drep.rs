//! DREP, the reply to a disconnection request (IBA Vol 1 §12.6.11, Table 113;
//! attribute 0x0016; the kernel's `CM_DREP_*`).
//!
//! The answer to a DREQ; after it both sides wait out the time-wait state
//! before they reuse the QP.

use crate::{Result, be32, fixed_view, set_be32};

/// Field offsets of the DREP, from the start of the MAD data area.
pub mod field {
    use crate::Field;

    /// Local communication ID, BE32.
    pub const LOCAL_COMM_ID: Field = 0..4;
    /// Remote communication ID, BE32.
    pub const REMOTE_COMM_ID: Field = 4..8;
    /// Private data.
    pub const PRIVATE_DATA: Field = 8..232;
}

/// Length of the DREP's private data.
pub const PRIVATE_DATA_LEN: usize = field::PRIVATE_DATA.end - field::PRIVATE_DATA.start;
/// Length of the DREP: the whole MAD data area.
pub const MSG_LEN: usize = field::PRIVATE_DATA.end;

fixed_view!(
    /// A DREP message in the MAD data area (IBA Vol 1 §12.6.11), 232 bytes.
    DrepMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> DrepMsg<T> {
    /// Local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LOCAL_COMM_ID)
    }
    /// Remote communication ID.
    pub fn remote_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REMOTE_COMM_ID)
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DrepMsg<T> {
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::LOCAL_COMM_ID, v);
    }
    /// Sets the remote communication ID.
    pub fn set_remote_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::REMOTE_COMM_ID, v);
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A parsed DREP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrepRepr {
    /// Local communication ID of the replying side.
    pub local_comm_id: u32,
    /// Remote communication ID: the DREQ's local one.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl DrepRepr {
    /// Parses a DREP view.
    pub fn parse<T: AsRef<[u8]>>(m: &DrepMsg<T>) -> Result<Self> {
        m.check_len()?;
        Ok(Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            private_data: crate::array(m.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut DrepMsg<T>) {
        m.set_local_comm_id(self.local_comm_id);
        m.set_remote_comm_id(self.remote_comm_id);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

const _: () = assert!(MSG_LEN == crate::mad::MAD_DATA_LEN);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_drep()(
            local_comm_id: u32, remote_comm_id: u32,
            pd in proptest::collection::vec(any::<u8>(), PRIVATE_DATA_LEN),
        ) -> DrepRepr {
            DrepRepr { local_comm_id, remote_comm_id, private_data: pd.try_into().unwrap() }
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let mut golden = [0u8; MSG_LEN];
        golden[..8].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0x10, 0x01]);
        golden[8] = 1;
        golden[231] = 2;
        let r = DrepRepr::parse(&DrepMsg::new_checked(&golden[..]).unwrap()).unwrap();
        assert_eq!((r.local_comm_id, r.remote_comm_id), (0xdead_beef, 0x1001));
        assert_eq!((r.private_data[0], r.private_data[223]), (1, 2));
        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut DrepMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
        assert!(DrepMsg::new_checked(&golden[..MSG_LEN - 1]).is_err());
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_drep()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut DrepMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(DrepRepr::parse(&DrepMsg::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
