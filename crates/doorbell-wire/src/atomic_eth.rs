//! Atomic Extended Transport Header (IBTA Vol 1 §9.3.4; reference A.3).

use doorbell_types::Rkey;

use crate::{Result, be32, be64, fixed_view, set_be32, set_be64};

/// Field offsets of the AtomicETH.
pub mod field {
    use crate::Field;

    /// Remote virtual address (8-byte aligned), BE64.
    pub const VA: Field = 0..8;
    /// Remote key, BE32.
    pub const RKEY: Field = 8..12;
    /// Swap value (CmpSwap) or addend (FetchAdd), BE64.
    pub const SWAP_ADD: Field = 12..20;
    /// Compare value (CmpSwap), BE64.
    pub const COMPARE: Field = 20..28;
}

/// Length of the AtomicETH.
pub const HEADER_LEN: usize = field::COMPARE.end;

fixed_view!(
    /// Atomic Extended Transport Header (IBTA Vol 1 §9.3.4), 28 bytes, on
    /// CmpSwap and FetchAdd.
    AtomicEthHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> AtomicEthHeader<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        Rkey::from_raw(be32(self.buffer.as_ref(), field::RKEY))
    }
    /// Swap value or addend.
    pub fn swap_add(&self) -> u64 {
        be64(self.buffer.as_ref(), field::SWAP_ADD)
    }
    /// Compare value.
    pub fn compare(&self) -> u64 {
        be64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEthHeader<T> {
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::VA, v);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: Rkey) {
        set_be32(self.buffer.as_mut(), field::RKEY, v.raw());
    }
    /// Sets the swap value or addend.
    pub fn set_swap_add(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::SWAP_ADD, v);
    }
    /// Sets the compare value.
    pub fn set_compare(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::COMPARE, v);
    }
}

/// A parsed AtomicETH. The 8-byte alignment of `va` is a transport rule
/// (checked by the responder), not a format rule, so `parse` accepts any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicEthRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// Swap value (CmpSwap) or addend (FetchAdd).
    pub swap_add: u64,
    /// Compare value (CmpSwap; ignored by FetchAdd).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses an AtomicETH view.
    pub fn parse<T: AsRef<[u8]>>(h: &AtomicEthHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AtomicETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut AtomicEthHeader<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_atomic_eth()(va: u64, rkey: u32, swap_add: u64, compare: u64) -> AtomicEthRepr {
            AtomicEthRepr { va, rkey: Rkey::from_raw(rkey), swap_add, compare }
        }
    }

    const GOLDEN: [u8; HEADER_LEN] = [
        0, 0, 0, 0, 0, 0, 0x10, 0x08, // va
        0xaa, 0xbb, 0xcc, 0xdd, // rkey
        0, 0, 0, 0, 0, 0, 0, 1, // swap/add
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, // compare
    ];

    #[test]
    fn deconstruct() {
        let h = AtomicEthHeader::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(h.va(), 0x1008);
        assert_eq!(h.rkey(), Rkey::from_raw(0xaabb_ccdd));
        assert_eq!(h.swap_add(), 1);
        assert_eq!(h.compare(), u64::MAX - 1);
        assert!(AtomicEthHeader::new_checked(&GOLDEN[..27]).is_err());
    }

    #[test]
    fn construct_writes_every_byte() {
        let mut buf = [0xa5u8; HEADER_LEN];
        AtomicEthRepr {
            va: 0x1008,
            rkey: Rkey::from_raw(0xaabb_ccdd),
            swap_add: 1,
            compare: u64::MAX - 1,
        }
        .emit(&mut AtomicEthHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_atomic_eth()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut AtomicEthHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(AtomicEthRepr::parse(&AtomicEthHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
