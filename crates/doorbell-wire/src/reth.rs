//! RDMA Extended Transport Header (IBTA Vol 1 §9.3.3; reference A.3).

use doorbell_types::Rkey;

use crate::{Result, be32, be64, fixed_view, set_be32, set_be64};

/// Field offsets of the RETH.
pub mod field {
    use crate::Field;

    /// Virtual address, BE64.
    pub const VA: Field = 0..8;
    /// Remote key, BE32.
    pub const RKEY: Field = 8..12;
    /// DMA length (total message length), BE32.
    pub const DMA_LEN: Field = 12..16;
}

/// Length of the RETH.
pub const HEADER_LEN: usize = field::DMA_LEN.end;

fixed_view!(
    /// RDMA Extended Transport Header (IBTA Vol 1 §9.3.3), 16 bytes: carried
    /// on RDMA WRITE First/Only and RDMA READ Request.
    RethHeader,
    HEADER_LEN
);

impl<T: AsRef<[u8]>> RethHeader<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), field::VA)
    }
    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        Rkey::from_raw(be32(self.buffer.as_ref(), field::RKEY))
    }
    /// DMA length of the whole message in bytes.
    pub fn dma_len(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethHeader<T> {
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, v: u64) {
        set_be64(self.buffer.as_mut(), field::VA, v);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: Rkey) {
        set_be32(self.buffer.as_mut(), field::RKEY, v.raw());
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        set_be32(self.buffer.as_mut(), field::DMA_LEN, v);
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// DMA length of the whole message in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parses a RETH view.
    pub fn parse<T: AsRef<[u8]>>(h: &RethHeader<T>) -> Result<Self> {
        h.check_len()?;
        Ok(Self {
            va: h.va(),
            rkey: h.rkey(),
            dma_len: h.dma_len(),
        })
    }

    /// Bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the RETH.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut RethHeader<T>) {
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    prop_compose! {
        pub(crate) fn arb_reth()(va: u64, rkey: u32, dma_len: u32) -> RethRepr {
            RethRepr { va, rkey: Rkey::from_raw(rkey), dma_len }
        }
    }

    const GOLDEN: [u8; HEADER_LEN] = [
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x00,
        0x00,
    ];

    #[test]
    fn deconstruct() {
        let h = RethHeader::new_checked(&GOLDEN[..]).unwrap();
        assert_eq!(h.va(), 0x1122_3344_5566_7788);
        assert_eq!(h.rkey(), Rkey::from_raw(0xdead_beef));
        assert_eq!(h.dma_len(), 65536);
        assert!(RethHeader::new_checked(&GOLDEN[..15]).is_err());
    }

    #[test]
    fn construct_writes_every_byte() {
        let mut buf = [0xa5u8; HEADER_LEN];
        RethRepr {
            va: 0x1122_3344_5566_7788,
            rkey: Rkey::from_raw(0xdead_beef),
            dma_len: 65536,
        }
        .emit(&mut RethHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, GOLDEN);
    }

    proptest! {
        #[test]
        fn roundtrip(r in arb_reth()) {
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut RethHeader::new_unchecked(&mut buf[..]));
            prop_assert_eq!(RethRepr::parse(&RethHeader::new_unchecked(&buf[..])), Ok(r));
        }
    }
}
