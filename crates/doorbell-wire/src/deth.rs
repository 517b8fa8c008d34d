//! Datagram Extended Transport Header (IBTA Vol 1 §9.3.2; reference A.3).

use doorbell_types::Qpn;

use crate::{Result, be24, be32, fixed_view, set_be24, set_be32};

/// Field offsets of the DETH.
pub mod field {
    use crate::Field;

    /// Queue key, BE32.
    pub const QKEY: Field = 0..4;
    /// Reserved byte.
    pub const RESERVED: usize = 4;
    /// Source QP, BE24.
    pub const SRC_QP: Field = 5..8;
}

/// Length of the DETH.
pub const HEADER_LEN: usize = field::SRC_QP.end;

fixed_view!(
    /// Datagram Extended Transport Header (IBTA Vol 1 §9.3.2), 8 bytes, on UD
    /// packets.
    DethHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> DethHeader<T> {
    /// Queue key.
    pub fn qkey(&self) -> u32 {
        be32(self.buffer.as_ref(), field::QKEY)
    }
    /// Source QP number.
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(be24(self.buffer.as_ref(), field::SRC_QP))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DethHeader<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::QKEY, v);
    }
    /// Sets the source QP number and clears the reserved byte.
    pub fn set_src_qp(&mut self, v: Qpn) {
        self.buffer.as_mut()[field::RESERVED] = 0;
        set_be24(self.buffer.as_mut(), field::SRC_QP, v.get());
    }
}

/// A parsed DETH. The reserved byte is ignored on parse and zeroed on emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP number.
    pub src_qp: Qpn,
}

impl DethRepr {
    /// Parses a DETH view.
    pub fn parse<T: AsRef<[u8]>>(h: &DethHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the DETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut DethHeader<T>) {
        h.set_qkey(self.qkey);
        h.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_deth()(qkey: u32, qpn in 0u32..0x100_0000) -> DethRepr {
            DethRepr { qkey, src_qp: Qpn::new(qpn) }
        }
    }

    #[test]
    fn deconstruct_and_construct() {
        let golden = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x01];
        let h = DethHeader::new_checked(&golden[..]).unwrap();
        assert_eq!(h.qkey(), 0x1111_1111);
        assert_eq!(h.src_qp(), Qpn::new(1));
        assert!(DethHeader::new_checked(&golden[..7]).is_err());
        let mut buf = [0xa5u8; HEADER_LEN];
        DethRepr {
            qkey: 0x1111_1111,
            src_qp: Qpn::new(1),
        }
        .emit(&mut DethHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_deth()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut DethHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(DethRepr::parse(&DethHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
