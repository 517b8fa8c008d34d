//! DMA through the caller's bus, at the time the work has reached.

use doorbell_pcie::{Dma, DmaTag};
use doorbell_types::{HostAddr, Instant};

/// A DMA read at `*t`, moving `*t` to when its data is in; false on error.
pub(crate) fn dma_read<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    buf: &mut [u8],
) -> bool {
    match dma.dma_read(*t, tag, addr, buf) {
        Ok(done) => {
            *t = done.max(*t);
            true
        }
        Err(_) => false,
    }
}

/// A DMA write at `*t`, moving `*t` to when the next may be issued.
pub(crate) fn dma_write<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    data: &[u8],
) -> bool {
    match dma.dma_write(*t, tag, addr, data) {
        Ok(done) => {
            *t = done.max(*t);
            true
        }
        Err(_) => false,
    }
}
