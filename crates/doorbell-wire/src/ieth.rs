//! Invalidate Extended Transport Header (IBTA Vol 1 §9.3.7; reference A.3).

use doorbell_types::Rkey;

use crate::{Result, be32, fixed_view, set_be32};

/// Field offsets of the IETH.
pub mod field {
    use crate::Field;

    /// R_Key to invalidate, BE32.
    pub const RKEY: Field = 0..4;
}

/// Length of the IETH.
pub const HEADER_LEN: usize = field::RKEY.end;

fixed_view!(
    /// Invalidate Extended Transport Header (IBTA Vol 1 §9.3.7), 4 bytes, on
    /// SEND Last/Only with Invalidate.
    IethHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> IethHeader<T> {
    /// R_Key to invalidate.
    pub fn rkey(&self) -> Rkey {
        Rkey::from_raw(be32(self.buffer.as_ref(), field::RKEY))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IethHeader<T> {
    /// Sets the R_Key to invalidate.
    pub fn set_rkey(&mut self, v: Rkey) {
        set_be32(self.buffer.as_mut(), field::RKEY, v.raw());
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IethRepr {
    /// R_Key to invalidate.
    pub rkey: Rkey,
}

impl IethRepr {
    /// Parses an IETH view.
    pub fn parse<T: AsRef<[u8]>>(h: &IethHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self { rkey: h.rkey() })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the IETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut IethHeader<T>) {
        h.set_rkey(self.rkey);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn deconstruct_and_construct() {
        let golden = [0x00, 0x12, 0x34, 0x05];
        let h = IethHeader::new_checked(&golden[..]).unwrap();
        assert_eq!(h.rkey(), Rkey::from_parts(0x1234, 5));
        assert!(IethHeader::new_checked(&golden[..3]).is_err());
        let mut buf = [0xa5u8; HEADER_LEN];
        IethRepr {
            rkey: Rkey::from_parts(0x1234, 5),
        }
        .emit(&mut IethHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    proptest! {
        #[test]
        fn roundtrip(rkey: u32) {
            let r = IethRepr { rkey: Rkey::from_raw(rkey) };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut IethHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(IethRepr::parse(&IethHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
