//! DMA through the caller's bus, at the time the work has reached, and
//! the walk of a buffer's page list.

use doorbell_host::{HostMemory, PAGE_SIZE};
use doorbell_pcie::{Dma, DmaError, DmaTag};
use doorbell_types::{HostAddr, Instant};

/// Calls `f(host_addr, bytes, offset_into_range)` for each run of bytes
/// `[off, off + len)` of a buffer whose pages are `pas` that is contiguous
/// in host memory. Returns false if the range is outside the pages.
pub(crate) fn page_runs(
    pas: &[HostAddr],
    off: u64,
    len: u64,
    mut f: impl FnMut(HostAddr, u64, u64),
) -> bool {
    let Some(end) = off.checked_add(len) else {
        return false;
    };
    let mut at = off;
    let mut run: Option<(HostAddr, u64, u64)> = None;
    while at < end {
        let Some(page) = pas.get((at / PAGE_SIZE) as usize) else {
            return false;
        };
        let Some(host) = page.checked_add(at % PAGE_SIZE) else {
            return false;
        };
        let n = (PAGE_SIZE - at % PAGE_SIZE).min(end - at);
        run = match run {
            Some((h, b, o)) if h.checked_add(b) == Some(host) => Some((h, b + n, o)),
            Some((h, b, o)) => {
                f(h, b, o);
                Some((host, n, at - off))
            }
            None => Some((host, n, at - off)),
        };
        at += n;
    }
    if let Some((h, b, o)) = run {
        f(h, b, o);
    }
    true
}

/// Moves `*t` to when a DMA that answered `r` lets the device go on;
/// false if it failed.
fn advance(t: &mut Instant, r: Result<Instant, DmaError>) -> bool {
    match r {
        Ok(done) => {
            *t = done.max(*t);
            true
        }
        Err(_) => false,
    }
}

/// A DMA read of `len` bytes into the buffers `pieces` yields, as
/// [`dma_read`] does into one.
pub(crate) fn dma_read_into<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    len: usize,
    pieces: &mut dyn Iterator<Item = &mut [u8]>,
) -> bool {
    advance(t, dma.dma_read_into(*t, tag, addr, len, pieces))
}

/// A DMA read of `len` bytes left in host memory
/// ([`Dma::dma_read_left`]), as [`dma_read`] would time it.
pub(crate) fn dma_read_left<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    len: usize,
) -> bool {
    advance(t, dma.dma_read_left(*t, tag, addr, len))
}

/// A DMA write of `len` bytes at `from` in `src`
/// ([`Dma::dma_write_from`]), as [`dma_write`] would time it.
pub(crate) fn dma_write_from<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    src: &dyn HostMemory,
    from: HostAddr,
    len: usize,
) -> bool {
    advance(t, dma.dma_write_from(*t, tag, addr, src, from, len))
}

/// A received packet's payload: in its frame, or left in the host memory
/// of the NIC of this process that sent it ([`crate::Frame::unfilled`]).
#[derive(Clone, Copy)]
pub(crate) enum PayloadIn<'a> {
    Frame(&'a [u8]),
    /// `len` bytes at `from` in `src`; only an RC WRITE's, SEND's or READ
    /// response's ([`crate::Nic::handle_unfilled_frame`] checks).
    Left {
        src: &'a dyn HostMemory,
        from: HostAddr,
        len: usize,
    },
}

impl<'a> PayloadIn<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Frame(b) => b.len(),
            Self::Left { len, .. } => *len,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, if the frame carries them.
    pub(crate) fn in_frame(&self) -> Option<&'a [u8]> {
        match *self {
            Self::Frame(b) => Some(b),
            Self::Left { .. } => None,
        }
    }
}

/// Writes bytes `r` of `payload` into host memory at `addr`, at `*t`, as
/// [`dma_write`] does; false on error.
pub(crate) fn write_payload<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    payload: PayloadIn<'_>,
    r: std::ops::Range<usize>,
) -> bool {
    match payload {
        PayloadIn::Frame(b) => b
            .get(r)
            .is_some_and(|part| dma_write(dma, t, tag, addr, part)),
        PayloadIn::Left { src, from, len } => {
            r.end <= len
                && from
                    .checked_add(r.start as u64)
                    .is_some_and(|from| dma_write_from(dma, t, tag, addr, src, from, r.len()))
        }
    }
}

/// A DMA read at `*t`, moving `*t` to when its data is in; false on error.
pub(crate) fn dma_read<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    buf: &mut [u8],
) -> bool {
    advance(t, dma.dma_read(*t, tag, addr, buf))
}

/// A DMA write at `*t`, moving `*t` to when the next may be issued.
pub(crate) fn dma_write<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    data: &[u8],
) -> bool {
    advance(t, dma.dma_write(*t, tag, addr, data))
}
