//! Atomic Acknowledge Extended Transport Header (IBTA Vol 1 §9.3.8; reference A.3).

use crate::{Result, be64, fixed_view, set_be64};

/// Field offsets of the AtomicAckETH.
pub mod field {
    use crate::Field;

    /// Original remote value, BE64.
    pub const ORIG: Field = 0..8;
}

/// Length of the AtomicAckETH.
pub const HEADER_LEN: usize = field::ORIG.end;

fixed_view!(
    /// Atomic Acknowledge Extended Transport Header (IBTA Vol 1 §9.3.8),
    /// 8 bytes, after the AETH of an ATOMIC Acknowledge.
    AtomicAckEthHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> AtomicAckEthHeader<T> {
    /// Value of the remote location before the atomic operation.
    pub fn orig(&self) -> u64 {
        be64(self.buffer.as_ref(), field::ORIG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthHeader<T> {
    /// Sets the original remote value.
    pub fn set_orig(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::ORIG, v);
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicAckEthRepr {
    /// Value of the remote location before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Parses an AtomicAckETH view.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicAckEthHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self { orig: h.orig() })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AtomicAckETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicAckEthHeader<T>) {
        h.set_orig(self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn deconstruct_and_construct() {
        let golden = [1, 2, 3, 4, 5, 6, 7, 8];
        let h = AtomicAckEthHeader::new_checked(&golden[..]).unwrap();
        assert_eq!(h.orig(), 0x0102_0304_0506_0708);
        assert!(AtomicAckEthHeader::new_checked(&golden[..7]).is_err());
        let mut buf = [0xa5u8; HEADER_LEN];
        AtomicAckEthRepr {
            orig: 0x0102_0304_0506_0708,
        }
        .emit(&mut AtomicAckEthHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, golden);
    }

    proptest! {
        #[test]
        fn roundtrip(orig: u64) {
            let r = AtomicAckEthRepr { orig };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut AtomicAckEthHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(AtomicAckEthRepr::parse(&AtomicAckEthHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
