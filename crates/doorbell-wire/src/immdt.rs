//! Immediate Data extended transport header (IBTA Vol 1 §9.3.6; reference A.3).

use crate::{Result, be32, fixed_view, set_be32};

/// Field offsets of the ImmDt header.
pub mod field {
    use crate::Field;

    /// Immediate data, opaque 32 bits.
    pub const IMM: Field = 0..4;
}

/// Length of the ImmDt header.
pub const HEADER_LEN: usize = field::IMM.end;

fixed_view!(
    /// Immediate Data header (IBTA Vol 1 §9.3.6), 4 bytes, on the
    /// `…WithImmediate` opcodes.
    ImmDtHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> ImmDtHeader<T> {
    /// Immediate data, read big-endian: the same convention as
    /// `doorbell_layout`'s `CtrlSeg::imm`, so the value copies across unchanged.
    pub fn imm(&self) -> u32 {
        be32(self.buffer.as_ref(), field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDtHeader<T> {
    /// Sets the immediate data (written big-endian).
    pub fn set_imm(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::IMM, v);
    }
}

/// A parsed ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImmDtRepr {
    /// Immediate data, read big-endian.
    pub imm: u32,
}

impl ImmDtRepr {
    /// Parses an ImmDt view.
    pub fn parse<T: AsRef<[u8]>>(h: &ImmDtHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self { imm: h.imm() })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the ImmDt header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut ImmDtHeader<T>) {
        h.set_imm(self.imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn deconstruct_and_construct() {
        let golden = [0x01, 0x02, 0x03, 0x04];
        let h = ImmDtHeader::new_checked(&golden[..]).unwrap();
        assert_eq!(h.imm(), 0x0102_0304);
        assert!(ImmDtHeader::new_checked(&golden[..3]).is_err());
        let mut buf = [0xa5u8; HEADER_LEN];
        ImmDtRepr { imm: 0x0102_0304 }.emit(&mut ImmDtHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    proptest! {
        #[test]
        fn roundtrip(imm: u32) {
            let r = ImmDtRepr { imm };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut ImmDtHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(ImmDtRepr::parse(&ImmDtHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
