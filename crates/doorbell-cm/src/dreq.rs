//! DREQ, the disconnection request (IBA Vol 1 §12.6.10, Table 112;
//! attribute 0x0015; the kernel's `CM_DREQ_*`).
//!
//! Either side of a connection sends it (`rdma_disconnect`); the peer
//! answers with a DREP.

use doorbell_types::Qpn;

use crate::{Result, be24, be32, fixed_view, set_be24, set_be32};

/// Field offsets of the DREQ, from the start of the MAD data area.
pub mod field {
    use crate::Field;

    /// Local communication ID, BE32.
    pub const LOCAL_COMM_ID: Field = 0..4;
    /// Remote communication ID, BE32.
    pub const REMOTE_COMM_ID: Field = 4..8;
    /// Remote QPN or EECN, BE24 (byte 11 is reserved).
    pub const REMOTE_QPN_EECN: Field = 8..11;
    /// Reserved byte after the QPN.
    pub const RESERVED: usize = 11;
    /// Private data.
    pub const PRIVATE_DATA: Field = 12..232;
}

/// Length of the DREQ's private data.
pub const PRIVATE_DATA_LEN: usize = field::PRIVATE_DATA.end - field::PRIVATE_DATA.start;
/// Length of the DREQ: the whole MAD data area.
pub const MSG_LEN: usize = field::PRIVATE_DATA.end;

fixed_view!(
    /// A DREQ message in the MAD data area (IBA Vol 1 §12.6.10), 232 bytes.
    DreqMsg,
    MSG_LEN
);

impl<T: AsRef<[u8]>> DreqMsg<T> {
    /// Local communication ID.
    pub fn local_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::LOCAL_COMM_ID)
    }
    /// Remote communication ID.
    pub fn remote_comm_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::REMOTE_COMM_ID)
    }
    /// Remote QPN (or EECN).
    pub fn remote_qpn(&self) -> Qpn {
        Qpn::new(be24(self.buffer.as_ref(), field::REMOTE_QPN_EECN))
    }
    /// Private data.
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DreqMsg<T> {
    /// Sets the local communication ID.
    pub fn set_local_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::LOCAL_COMM_ID, v);
    }
    /// Sets the remote communication ID.
    pub fn set_remote_comm_id(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::REMOTE_COMM_ID, v);
    }
    /// Sets the remote QPN (or EECN) and clears the reserved byte after it.
    pub fn set_remote_qpn(&mut self, v: Qpn) {
        set_be24(self.buffer.as_mut(), field::REMOTE_QPN_EECN, v.get());
        self.buffer.as_mut()[field::RESERVED] = 0;
    }
    /// The private data, writable.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A parsed DREQ. The reserved byte is ignored on parse and zeroed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DreqRepr {
    /// Local communication ID of the disconnecting side.
    pub local_comm_id: u32,
    /// Remote communication ID.
    pub remote_comm_id: u32,
    /// The peer's QPN (or EECN).
    pub remote_qpn: Qpn,
    /// Private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl DreqRepr {
    /// Parses a DREQ view.
    pub fn parse<T: AsRef<[u8]>>(m: &DreqMsg<T>) -> Result<Self> {
        m.check_len()?;
        Ok(Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            remote_qpn: m.remote_qpn(),
            private_data: crate::array(m.buffer.as_ref(), field::PRIVATE_DATA),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        MSG_LEN
    }

    /// Writes all 232 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut DreqMsg<T>) {
        m.set_local_comm_id(self.local_comm_id);
        m.set_remote_comm_id(self.remote_comm_id);
        m.set_remote_qpn(self.remote_qpn);
        m.private_data_mut().copy_from_slice(&self.private_data);
    }
}

const _: () = assert!(MSG_LEN == crate::mad::MAD_DATA_LEN);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_dreq()(
            local_comm_id: u32, remote_comm_id: u32, qpn in 0u32..1 << 24,
            pd in proptest::collection::vec(any::<u8>(), PRIVATE_DATA_LEN),
        ) -> DreqRepr {
            DreqRepr {
                local_comm_id, remote_comm_id, remote_qpn: Qpn::new(qpn),
                private_data: pd.try_into().unwrap(),
            }
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let mut golden = [0u8; MSG_LEN];
        golden[..12].copy_from_slice(&[0, 0, 0, 3, 0, 0, 0, 4, 0xab, 0xcd, 0xef, 0]);
        golden[12] = 0x10;
        let r = DreqRepr::parse(&DreqMsg::new_checked(&golden[..]).unwrap()).unwrap();
        assert_eq!(r.remote_qpn, Qpn::new(0xab_cdef));
        assert_eq!(r.private_data[0], 0x10);
        let mut buf = [0xa5u8; MSG_LEN];
        r.emit(&mut DreqMsg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_dreq()) {
            let mut buf = [0xa5u8; MSG_LEN];
            r.emit(&mut DreqMsg::new_unchecked(&mut buf[..]));
            prop_assert_eq!(buf[field::RESERVED], 0);
            prop_assert_eq!(DreqRepr::parse(&DreqMsg::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
