//! The bus between host and device, at the level of PCIe transactions.
//!
//! # Model
//! Every crossing between host and device is one of three transaction kinds
//! (invariant 1 of DESIGN.md):
//! - **MWr**, a posted write: the CPU's MMIO stores into UAR pages
//!   (host → device), and the device's DMA writes (device → host);
//! - **MRd**, a read request the device sends to host memory;
//! - **CplD**, a completion with data that comes back for it.
//!
//! A DMA of `n` bytes is split the way a PCIe device must split it
//! ([`LinkConfig`]): writes into MWr TLPs of at most MPS bytes, reads into MRd
//! requests of at most MRRS bytes, and each request's data into CplD TLPs of at
//! most MPS bytes that end on read-completion-boundary (RCB) addresses. No TLP
//! crosses a 4 KiB boundary.
//!
//! [`Bus`] is the device's end of the link: the device performs all DMA
//! through the [`Dma`] trait it implements, and reports each MMIO write it
//! receives, so that [`Counters`] see every crossing, by kind, direction,
//! purpose and QP. This crate has no clock: the simulator attaches time to the
//! same splits.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod model;
pub mod report;

pub use report::PerPost;

use std::collections::BTreeMap;
use std::sync::Arc;

use doorbell_host::{HostMemory, MemError, Placed, RecordDoorbell};
use doorbell_types::{HostAddr, Instant, Qpn, UarIndex};

/// No TLP may cross a 4 KiB address boundary (PCIe Base Specification §2.2.7).
pub const TLP_BOUNDARY: u64 = 4096;

/// Link parameters that decide how transactions are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// Max payload size of a TLP, in bytes (128..=4096, power of two).
    pub mps_bytes: u32,
    /// Max read request size, in bytes (128..=4096, power of two).
    pub mrrs_bytes: u32,
    /// Read completion boundary, in bytes (64 or 128).
    pub rcb_bytes: u32,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            mps_bytes: 256,
            mrrs_bytes: 512,
            rcb_bytes: 64,
        }
    }
}

/// A link parameter outside what PCIe allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// MPS, MRRS or RCB is not a power of two in its legal range.
    #[error("{name} = {value} is not a power of two in {min}..={max}")]
    OutOfRange {
        /// Which parameter.
        name: &'static str,
        /// The value given.
        value: u32,
        /// Smallest legal value.
        min: u32,
        /// Largest legal value.
        max: u32,
    },
}

impl LinkConfig {
    /// Checks every parameter against the ranges PCIe allows.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |name, value: u32, min, max| {
            if value.is_power_of_two() && (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange {
                    name,
                    value,
                    min,
                    max,
                })
            }
        };
        check("mps", self.mps_bytes, 128, 4096)?;
        check("mrrs", self.mrrs_bytes, 128, 4096)?;
        check("rcb", self.rcb_bytes, 64, 128)
    }

    /// Splits `[addr, addr + len)` into pieces of at most `max` bytes that do
    /// not cross a 4 KiB boundary. (Here and below a parameter of zero, which
    /// [`Self::validate`] refuses, counts as one byte: an unchecked
    /// configuration gives odd counts, never a hang or a panic.)
    fn split(addr: u64, len: u64, max: u64) -> impl Iterator<Item = (u64, u64)> {
        let max = max.max(1);
        let end = addr.saturating_add(len);
        let mut at = addr;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let to_boundary = TLP_BOUNDARY - (at % TLP_BOUNDARY);
            let n = max.min(to_boundary).min(end - at);
            let piece = (at, n);
            at += n;
            Some(piece)
        })
    }

    /// The MWr TLPs of a write: `(address, bytes)` each.
    pub fn write_tlps(&self, addr: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
        Self::split(addr, len, u64::from(self.mps_bytes))
    }

    /// The MRd requests of a read: `(address, bytes)` each.
    pub fn read_requests(&self, addr: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
        Self::split(addr, len, u64::from(self.mrrs_bytes))
    }

    /// The CplD TLPs answering one read request: `(address, bytes)` each.
    /// Every completion but the last ends on an RCB-aligned address and
    /// carries at most MPS bytes.
    pub fn completions(&self, addr: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
        let end = addr.saturating_add(len);
        let mps = u64::from(self.mps_bytes).max(1);
        let rcb = u64::from(self.rcb_bytes).max(1);
        let mut at = addr;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let limit = at.saturating_add(mps);
            let n = if limit >= end {
                end - at
            } else {
                let aligned = limit - (limit % rcb);
                if aligned > at { aligned - at } else { mps }
            };
            let piece = (at, n);
            at += n;
            Some(piece)
        })
    }

    /// `(MRd, CplD)` TLP counts of a read of `len` bytes at `addr`: as
    /// many as [`Self::read_requests`] and [`Self::completions`] yield,
    /// counted without walking them all (the bus counts every DMA). Where
    /// RCB divides 4 KiB (in every legal configuration), every whole 4 KiB
    /// page of the range splits as every other.
    pub fn read_tlp_counts(&self, addr: u64, len: u64) -> (u64, u64) {
        let pages_alike = TLP_BOUNDARY.is_multiple_of(u64::from(self.rcb_bytes).max(1));
        let (mrrs, rcb) = (u64::from(self.mrrs_bytes), u64::from(self.rcb_bytes));
        // A whole page, where MRRS divides it and RCB divides MRRS: its
        // requests are alike, each MRRS bytes from an RCB-aligned address.
        let whole_page =
            mrrs.is_power_of_two() && mrrs <= TLP_BOUNDARY && rcb.is_power_of_two() && rcb <= mrrs;
        Self::by_pages(addr, len, pages_alike, |a, n| {
            if whole_page && n == TLP_BOUNDARY {
                let requests = TLP_BOUNDARY / mrrs;
                return (requests, requests * self.completion_count(a, mrrs));
            }
            self.read_requests(a, n)
                .fold((0, 0), |(mrd, cpld), (x, m)| {
                    (mrd + 1, cpld + self.completion_count(x, m))
                })
        })
    }

    /// MWr TLP count of a write of `len` bytes at `addr`: as many as
    /// [`Self::write_tlps`] yields.
    pub fn write_tlp_count(&self, addr: u64, len: u64) -> u64 {
        let max = u64::from(self.mps_bytes).max(1);
        // Inside one page, `split` cuts only at every `max` bytes.
        Self::by_pages(addr, len, true, |_, n| (div_ceil(n, max), 0)).0
    }

    /// Sums `count` over `[addr, addr + len)` cut at 4 KiB boundaries
    /// (each piece inside one page): the head up to the first boundary, the
    /// tail after the last, and the whole pages between. If `alike` (a
    /// whole page counts as every other), one whole page is counted for
    /// them all; otherwise the range is counted in one call.
    fn by_pages(
        addr: u64,
        len: u64,
        alike: bool,
        count: impl Fn(u64, u64) -> (u64, u64),
    ) -> (u64, u64) {
        let end = addr.saturating_add(len);
        let past_first = (addr - addr % TLP_BOUNDARY).checked_add(TLP_BOUNDARY);
        let Some(first) = past_first.filter(|&b| b < end && alike) else {
            return if end > addr {
                count(addr, end - addr)
            } else {
                (0, 0)
            };
        };
        let last = end - end % TLP_BOUNDARY;
        let whole = (last - first) / TLP_BOUNDARY;
        let head = count(addr, first - addr);
        let tail = if end > last {
            count(last, end - last)
        } else {
            (0, 0)
        };
        let page = if whole > 0 {
            count(first, TLP_BOUNDARY)
        } else {
            (0, 0)
        };
        (
            head.0 + tail.0 + whole * page.0,
            head.1 + tail.1 + whole * page.1,
        )
    }

    /// How many CplD TLPs [`Self::completions`] makes for one request.
    /// Past the first, which ends on an RCB boundary, each carries MPS
    /// bytes until the last: MPS is a multiple of RCB in every legal
    /// configuration. Any other configuration is walked.
    fn completion_count(&self, addr: u64, len: u64) -> u64 {
        let mps = u64::from(self.mps_bytes).max(1);
        let rcb = u64::from(self.rcb_bytes).max(1);
        if mps < rcb || mps % rcb != 0 {
            return self.completions(addr, len).count() as u64;
        }
        let end = addr.saturating_add(len);
        if end <= addr {
            return 0;
        }
        let limit = addr.saturating_add(mps);
        if limit >= end {
            return 1;
        }
        let first_end = limit - limit % rcb;
        1 + div_ceil(end - first_end, mps)
    }
}

/// `n / d` rounded up, `d` at least 1: a shift where `d` is a power of
/// two, as every legal TLP size is (the bus counts the TLPs of every DMA,
/// and a division is tens of cycles).
fn div_ceil(n: u64, d: u64) -> u64 {
    if d.is_power_of_two() {
        (n >> d.trailing_zeros()) + u64::from(n & (d - 1) != 0)
    } else {
        n.div_ceil(d.max(1))
    }
}

/// What a DMA is for; counters keep each purpose apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DmaPurpose {
    /// Reading send WQEs from the send queue.
    SendWqe,
    /// Reading payload named by a send WQE's data segments (or a READ
    /// response's source at the responder).
    Payload,
    /// Reading receive WQEs.
    RecvWqe,
    /// Writing received data into host memory (receive scatter, RDMA WRITE
    /// target, READ response scatter, atomic result).
    Scatter,
    /// Atomic read-modify-write of the target word at the responder.
    Atomic,
    /// Writing a CQE.
    Cqe,
    /// Reading a doorbell record.
    DoorbellRecord,
    /// Writing an event queue entry.
    Eqe,
    /// An MSI-X interrupt: the posted 4-byte write of the vector's message
    /// to the interrupt controller's address (one MWr TLP, no host memory).
    Msix,
}

/// Number of [`DmaPurpose`]s: the length of the per-purpose counters.
pub const PURPOSES: usize = 9;

/// Where MSI-X messages go on x86: the local APIC's window (0xFEE0_0000),
/// four bytes per vector here.
pub const MSIX_ADDRESS: u64 = 0xfee0_0000;

impl DmaPurpose {
    /// Every purpose, in counter order.
    pub const ALL: [DmaPurpose; PURPOSES] = [
        DmaPurpose::SendWqe,
        DmaPurpose::Payload,
        DmaPurpose::RecvWqe,
        DmaPurpose::Scatter,
        DmaPurpose::Atomic,
        DmaPurpose::Cqe,
        DmaPurpose::DoorbellRecord,
        DmaPurpose::Eqe,
        DmaPurpose::Msix,
    ];

    const fn index(self) -> usize {
        self as usize
    }

    /// A short name, for reports: `wqe`, `payload`, `recv_wqe`, `scatter`,
    /// `atomic`, `cqe`, `doorbell_record`, `eqe`, `msix`.
    pub const fn name(self) -> &'static str {
        match self {
            DmaPurpose::SendWqe => "wqe",
            DmaPurpose::Payload => "payload",
            DmaPurpose::RecvWqe => "recv_wqe",
            DmaPurpose::Scatter => "scatter",
            DmaPurpose::Atomic => "atomic",
            DmaPurpose::Cqe => "cqe",
            DmaPurpose::DoorbellRecord => "doorbell_record",
            DmaPurpose::Eqe => "eqe",
            DmaPurpose::Msix => "msix",
        }
    }
}

/// Who a DMA is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaTag {
    /// The QP on whose behalf the DMA runs, if any.
    pub qpn: Option<Qpn>,
    /// What it is for.
    pub purpose: DmaPurpose,
}

impl DmaTag {
    /// A tag for `qpn` and `purpose`.
    pub const fn new(qpn: Qpn, purpose: DmaPurpose) -> Self {
        Self {
            qpn: Some(qpn),
            purpose,
        }
    }
}

/// A DMA that host memory refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DmaError {
    /// The range is not mapped host memory. Fatal to the work request; the
    /// device reports it as a protection error.
    #[error("DMA to unmapped host memory")]
    Unmapped(#[from] MemError),
}

/// Counts of bus crossings. Operations (a DMA read of a WQE, one MMIO store)
/// and TLPs are counted separately.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// MMIO writes the device received (host → device MWr TLPs).
    pub mmio_writes: u64,
    /// Bytes those MMIO writes carried.
    pub mmio_bytes: u64,
    /// DMA read operations, by [`DmaPurpose`].
    pub dma_reads: [u64; PURPOSES],
    /// Bytes read by DMA, by purpose.
    pub dma_read_bytes: [u64; PURPOSES],
    /// DMA write operations, by purpose.
    pub dma_writes: [u64; PURPOSES],
    /// Bytes written by DMA, by purpose.
    pub dma_write_bytes: [u64; PURPOSES],
    /// MWr TLPs device → host (DMA writes).
    pub dma_mwr_tlps: u64,
    /// MRd TLPs (device → host).
    pub mrd_tlps: u64,
    /// CplD TLPs (host → device).
    pub cpld_tlps: u64,
}

impl Counters {
    /// DMA reads for `p`.
    pub fn reads(&self, p: DmaPurpose) -> u64 {
        self.dma_reads[p.index()]
    }
    /// Bytes DMA reads for `p` carried.
    pub fn read_bytes(&self, p: DmaPurpose) -> u64 {
        self.dma_read_bytes[p.index()]
    }
    /// DMA writes for `p`.
    pub fn writes(&self, p: DmaPurpose) -> u64 {
        self.dma_writes[p.index()]
    }
    /// Total DMA read bytes.
    pub fn total_read_bytes(&self) -> u64 {
        self.dma_read_bytes.iter().sum()
    }
    /// Total DMA write bytes.
    pub fn total_write_bytes(&self) -> u64 {
        self.dma_write_bytes.iter().sum()
    }
    /// All MWr TLPs, both directions (MMIO and DMA writes).
    pub fn mwr_tlps(&self) -> u64 {
        self.mmio_writes + self.dma_mwr_tlps
    }

    /// `self - earlier`, field by field (saturating).
    pub fn since(&self, earlier: &Counters) -> Counters {
        let sub = |a: [u64; PURPOSES], b: [u64; PURPOSES]| {
            std::array::from_fn(|i| a[i].saturating_sub(b[i]))
        };
        Counters {
            mmio_writes: self.mmio_writes.saturating_sub(earlier.mmio_writes),
            mmio_bytes: self.mmio_bytes.saturating_sub(earlier.mmio_bytes),
            dma_reads: sub(self.dma_reads, earlier.dma_reads),
            dma_read_bytes: sub(self.dma_read_bytes, earlier.dma_read_bytes),
            dma_writes: sub(self.dma_writes, earlier.dma_writes),
            dma_write_bytes: sub(self.dma_write_bytes, earlier.dma_write_bytes),
            dma_mwr_tlps: self.dma_mwr_tlps.saturating_sub(earlier.dma_mwr_tlps),
            mrd_tlps: self.mrd_tlps.saturating_sub(earlier.mrd_tlps),
            cpld_tlps: self.cpld_tlps.saturating_sub(earlier.cpld_tlps),
        }
    }

    fn add_read(&mut self, p: DmaPurpose, bytes: u64, mrd: u64, cpld: u64) {
        self.dma_reads[p.index()] += 1;
        self.dma_read_bytes[p.index()] += bytes;
        self.mrd_tlps += mrd;
        self.cpld_tlps += cpld;
    }

    /// `writes` writes of `bytes` and `mwr` TLPs in all.
    fn add_writes(&mut self, p: DmaPurpose, writes: u64, bytes: u64, mwr: u64) {
        self.dma_writes[p.index()] += writes;
        self.dma_write_bytes[p.index()] += bytes;
        self.dma_mwr_tlps += mwr;
    }

    fn add_mmio(&mut self, bytes: u64) {
        self.mmio_writes += 1;
        self.mmio_bytes += bytes;
    }
}

/// One recorded crossing, for traces and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crossing {
    /// An MMIO write of `bytes` (one MWr TLP, host → device).
    Mmio {
        /// When the device received it.
        at: Instant,
        /// Attributed QP, if the device could tell.
        qpn: Option<Qpn>,
        /// Bytes carried.
        bytes: u32,
    },
    /// A DMA read: `mrd` requests and `cpld` completions.
    DmaRead {
        /// When the device issued it.
        at: Instant,
        /// Who it was for.
        tag: DmaTag,
        /// Bytes read.
        bytes: u32,
        /// MRd TLPs.
        mrd: u32,
        /// CplD TLPs.
        cpld: u32,
    },
    /// A DMA write in `mwr` TLPs.
    DmaWrite {
        /// When the device issued it.
        at: Instant,
        /// Who it was for.
        tag: DmaTag,
        /// Bytes written.
        bytes: u32,
        /// MWr TLPs.
        mwr: u32,
    },
}

/// The device's access to host memory and its record of MMIO arrivals.
///
/// Every call carries the time `at` the device issues it and returns the
/// time the device may go on: for a read, when its data has arrived; for a
/// (posted) write, when the device may issue its next transaction. A bus
/// without a timing model returns `at`; the simulator's returns what its
/// link model says, and defers the host's view of a write to its arrival.
pub trait Dma {
    /// Reads `buf.len()` bytes of host memory at `addr`.
    fn dma_read(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        buf: &mut [u8],
    ) -> Result<Instant, DmaError>;
    /// Reads `len` bytes of host memory at `addr` as one DMA, counted and
    /// timed as [`Self::dma_read`] of `len` bytes, into the buffers
    /// `pieces` yields, in order, each filled whole: a payload read straight
    /// into the frames that carry it.
    ///
    /// Fails as [`Self::dma_read`] does, and, as a read of unmapped memory,
    /// where the pieces do not add up to `len` bytes (what the pieces hold
    /// then is unspecified). The provided method reads into a buffer of its
    /// own and copies out; buses that can, read into the pieces.
    fn dma_read_into(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        len: usize,
        pieces: &mut dyn Iterator<Item = &mut [u8]>,
    ) -> Result<Instant, DmaError> {
        read_whole_into(self, at, tag, addr, len, pieces)
    }
    /// Reads `len` bytes of host memory at `addr` for a NIC of the same
    /// process that will copy them from there itself
    /// ([`Self::dma_write_from`]): checked, counted and timed as
    /// [`Self::dma_read`] of `len` bytes, with no bytes moved. The provided
    /// method reads them into a buffer of its own and drops it.
    fn dma_read_left(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        len: usize,
    ) -> Result<Instant, DmaError> {
        self.dma_read(at, tag, addr, &mut vec![0u8; len])
    }
    /// Writes `data` into host memory at `addr`.
    fn dma_write(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        data: &[u8],
    ) -> Result<Instant, DmaError>;
    /// Writes into host memory at `addr` the `len` bytes at `from` in
    /// `src`, another NIC's host memory in this process, which read them
    /// with [`Self::dma_read_left`]: counted and timed as
    /// [`Self::dma_write`] of those bytes, and fails as it does (or as a
    /// read of `src` would). The provided method reads them into a buffer
    /// of its own and writes that.
    fn dma_write_from(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        src: &dyn HostMemory,
        from: HostAddr,
        len: usize,
    ) -> Result<Instant, DmaError> {
        write_through_buffer(self, at, tag, addr, src, from, len)
    }
    /// Makes the writes of a run of packets, one [`Self::dma_write_from`]
    /// of `len` bytes per entry of `at` (the `k`-th at `at[k]`, to `addr +
    /// k * len`, from `from + k * len`), with one copy of all their bytes:
    /// counted and timed as those writes. Returns false, having moved and
    /// counted nothing, where it cannot (a write would fail, or the bytes
    /// must be kept one write at a time); the caller then makes them one by
    /// one. The provided method always returns false.
    fn dma_write_run_from(
        &mut self,
        at: &[Instant],
        tag: DmaTag,
        addr: HostAddr,
        src: &dyn HostMemory,
        from: HostAddr,
        len: usize,
    ) -> bool {
        let _ = (at, tag, addr, src, from, len);
        false
    }
    /// Makes one [`Self::dma_write`] of each piece of `src`, the `k`-th at
    /// `at[k]`, each done at its time (a posted write, as this bus makes
    /// them): counted and recorded as those writes. Returns false, having
    /// moved and counted nothing, where it cannot (a write would fail, the
    /// bus times its writes or keeps their bytes, or `at` and `pieces`
    /// differ in length); the caller then makes them one by one. The
    /// provided method always returns false.
    fn dma_write_each(
        &mut self,
        at: &[Instant],
        tag: DmaTag,
        src: &[u8],
        pieces: &[Placed],
    ) -> bool {
        let _ = (at, tag, src, pieces);
        false
    }
    /// Records an MMIO write of `bytes` the device received at `at`,
    /// attributed to `qpn`.
    fn record_mmio(&mut self, at: Instant, qpn: Option<Qpn>, bytes: usize);
    /// Raises MSI-X `vector` at `at`: a posted 4-byte write towards the
    /// host's interrupt controller, counted as a [`DmaPurpose::Msix`]
    /// write. Returns when the device may go on.
    fn raise_msix(&mut self, at: Instant, vector: u16) -> Instant;
}

/// [`Dma::dma_read_into`] as one [`Dma::dma_read`] into a buffer of its
/// own, then copied out into the pieces.
fn read_whole_into<D: Dma + ?Sized>(
    dma: &mut D,
    at: Instant,
    tag: DmaTag,
    addr: HostAddr,
    len: usize,
    pieces: &mut dyn Iterator<Item = &mut [u8]>,
) -> Result<Instant, DmaError> {
    let mut buf = vec![0u8; len];
    let done = dma.dma_read(at, tag, addr, &mut buf)?;
    doorbell_host::spread(&buf, pieces)
        .map(|()| done)
        .ok_or(uneven(addr, len))
}

/// [`Dma::dma_write_from`] as a read of `src` into a buffer of its own,
/// then one [`Dma::dma_write`] of it.
fn write_through_buffer<D: Dma + ?Sized>(
    dma: &mut D,
    at: Instant,
    tag: DmaTag,
    addr: HostAddr,
    src: &dyn HostMemory,
    from: HostAddr,
    len: usize,
) -> Result<Instant, DmaError> {
    let mut buf = vec![0u8; len];
    src.read(from, &mut buf)?;
    dma.dma_write(at, tag, addr, &buf)
}

/// The error of a [`Dma::dma_read_into`] whose pieces do not add up to its
/// length.
fn uneven(addr: HostAddr, len: usize) -> DmaError {
    DmaError::Unmapped(MemError::Unmapped { addr, len })
}

/// The device's end of a PCIe link to host memory.
pub struct Bus {
    cfg: LinkConfig,
    mem: Arc<dyn HostMemory>,
    total: Counters,
    per_qp: BTreeMap<Qpn, Counters>,
    log: Option<Vec<Crossing>>,
    capture: Option<Vec<Carried>>,
}

/// A host-interface crossing with the bytes it carried: what a capture of
/// the interface between driver and device shows (the register stores, the
/// WQEs and doorbell records the device read, the CQEs it wrote). The
/// payload DMA of messages is not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Carried {
    /// A store into UAR page `uar` at `offset`.
    Mmio {
        /// The UAR page.
        uar: UarIndex,
        /// Byte offset in it.
        offset: u32,
        /// The bytes stored.
        data: Vec<u8>,
    },
    /// A store the device did not see, taken from a doorbell record.
    RecordDoorbell {
        /// The UAR page it was made on.
        uar: UarIndex,
        /// Which record.
        db: RecordDoorbell,
    },
    /// A DMA read of a WQE, a receive WQE or a doorbell record.
    Read {
        /// Who and what for.
        tag: DmaTag,
        /// The bytes read.
        data: Vec<u8>,
    },
    /// A DMA write of a CQE.
    Write {
        /// Who and what for.
        tag: DmaTag,
        /// The bytes written.
        data: Vec<u8>,
    },
}

/// Whether a capture keeps DMA of `purpose` (the host interface's own
/// structures, not message payloads).
fn captured(purpose: DmaPurpose) -> bool {
    matches!(
        purpose,
        DmaPurpose::SendWqe | DmaPurpose::RecvWqe | DmaPurpose::DoorbellRecord | DmaPurpose::Cqe
    )
}

impl Bus {
    /// A bus to `mem` with link parameters `cfg` (validate them first).
    pub fn new(cfg: LinkConfig, mem: Arc<dyn HostMemory>) -> Self {
        Self {
            cfg,
            mem,
            total: Counters::default(),
            per_qp: BTreeMap::new(),
            log: None,
            capture: None,
        }
    }

    /// Starts or stops capturing what crosses the host interface, with
    /// its bytes ([`Carried`]).
    pub fn set_capture(&mut self, on: bool) {
        self.capture = if on { Some(Vec::new()) } else { None };
    }

    /// Takes what was captured so far.
    pub fn take_capture(&mut self) -> Vec<Carried> {
        self.capture
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Captures a register store, as the CPU made it (the runtime calls
    /// this as it hands the store to the device).
    pub fn capture_mmio(&mut self, uar: UarIndex, offset: u32, data: &[u8]) {
        if let Some(c) = &mut self.capture {
            c.push(Carried::Mmio {
                uar,
                offset,
                data: data.to_vec(),
            });
        }
    }

    /// Captures a store the device learns of from a doorbell record.
    pub fn capture_record(&mut self, uar: UarIndex, db: RecordDoorbell) {
        if let Some(c) = &mut self.capture {
            c.push(Carried::RecordDoorbell { uar, db });
        }
    }

    /// The link parameters.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Counters over all crossings.
    pub fn counters(&self) -> Counters {
        self.total
    }

    /// Counters of one QP (zero if it never crossed the bus).
    pub fn qp_counters(&self, qpn: Qpn) -> Counters {
        self.per_qp.get(&qpn).copied().unwrap_or_default()
    }

    /// Every QP that crossed the bus, with its counters, in QPN order.
    pub fn all_qp_counters(&self) -> Vec<(Qpn, Counters)> {
        self.per_qp.iter().map(|(&q, &c)| (q, c)).collect()
    }

    /// Starts or stops recording each crossing.
    pub fn set_recording(&mut self, on: bool) {
        self.log = if on { Some(Vec::new()) } else { None };
    }

    /// Takes the crossings recorded so far.
    pub fn take_log(&mut self) -> Vec<Crossing> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Counts a DMA read of `len` bytes at `addr` without performing it
    /// (for a bus that moves the data itself, such as the simulator's).
    pub fn count_read(&mut self, at: Instant, tag: DmaTag, addr: HostAddr, len: u64) {
        let (mrd, cpld) = self.cfg.read_tlp_counts(addr.get(), len);
        self.apply(tag.qpn, |c| c.add_read(tag.purpose, len, mrd, cpld));
        if let Some(log) = &mut self.log {
            log.push(Crossing::DmaRead {
                at,
                tag,
                bytes: len as u32,
                mrd: mrd as u32,
                cpld: cpld as u32,
            });
        }
    }

    /// Counts a DMA write of `len` bytes at `addr` without performing it.
    pub fn count_write(&mut self, at: Instant, tag: DmaTag, addr: HostAddr, len: u64) {
        self.count_writes(tag, std::iter::once((at, addr.get(), len)));
    }

    /// Counts DMA writes made at once, each `(time, address, length)`, as
    /// [`Self::count_write`] counts each, with one look-up of the QP's
    /// counters for them all.
    fn count_writes(&mut self, tag: DmaTag, writes: impl Iterator<Item = (Instant, u64, u64)>) {
        let (mut n, mut bytes, mut mwrs) = (0, 0, 0);
        for (t, to, len) in writes {
            let mwr = self.cfg.write_tlp_count(to, len);
            n += 1;
            bytes += len;
            mwrs += mwr;
            self.log_write(t, tag, len, mwr);
        }
        self.apply(tag.qpn, |c| c.add_writes(tag.purpose, n, bytes, mwrs));
    }

    /// Records a DMA write of `len` bytes in `mwr` TLPs, if recording.
    fn log_write(&mut self, at: Instant, tag: DmaTag, len: u64, mwr: u64) {
        if let Some(log) = &mut self.log {
            log.push(Crossing::DmaWrite {
                at,
                tag,
                bytes: len as u32,
                mwr: mwr as u32,
            });
        }
    }

    fn apply(&mut self, qpn: Option<Qpn>, f: impl Fn(&mut Counters)) {
        f(&mut self.total);
        if let Some(q) = qpn {
            // Found, the common case, without the entry's bookkeeping.
            match self.per_qp.get_mut(&q) {
                Some(c) => f(c),
                None => f(self.per_qp.entry(q).or_default()),
            }
        }
    }
}

impl Dma for Bus {
    fn dma_read(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        buf: &mut [u8],
    ) -> Result<Instant, DmaError> {
        self.count_read(at, tag, addr, buf.len() as u64);
        self.mem.read(addr, buf)?;
        if let Some(c) = &mut self.capture
            && captured(tag.purpose)
        {
            c.push(Carried::Read {
                tag,
                data: buf.to_vec(),
            });
        }
        Ok(at)
    }

    fn dma_read_into(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        len: usize,
        pieces: &mut dyn Iterator<Item = &mut [u8]>,
    ) -> Result<Instant, DmaError> {
        if self.capture.is_some() && captured(tag.purpose) {
            // The capture keeps the bytes: read them whole.
            return read_whole_into(self, at, tag, addr, len, pieces);
        }
        self.count_read(at, tag, addr, len as u64);
        self.mem.read_into(addr, len, pieces)?;
        Ok(at)
    }

    fn dma_read_left(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        len: usize,
    ) -> Result<Instant, DmaError> {
        if self.capture.is_some() && captured(tag.purpose) {
            // The capture keeps the bytes: read them.
            return self.dma_read(at, tag, addr, &mut vec![0u8; len]);
        }
        self.count_read(at, tag, addr, len as u64);
        self.mem.check(addr, len)?;
        Ok(at)
    }

    fn dma_write_from(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        src: &dyn HostMemory,
        from: HostAddr,
        len: usize,
    ) -> Result<Instant, DmaError> {
        if self.capture.is_some() && captured(tag.purpose) {
            // The capture keeps the bytes: take them in a buffer.
            return write_through_buffer(self, at, tag, addr, src, from, len);
        }
        self.count_write(at, tag, addr, len as u64);
        self.mem.copy_from(addr, src, from, len)?;
        Ok(at)
    }

    fn dma_write_run_from(
        &mut self,
        at: &[Instant],
        tag: DmaTag,
        addr: HostAddr,
        src: &dyn HostMemory,
        from: HostAddr,
        len: usize,
    ) -> bool {
        // One copy of the whole range, which moves all or nothing: where
        // it fails, the caller's writes one by one fail where they would.
        let Some(total) = len.checked_mul(at.len()) else {
            return false;
        };
        if (self.capture.is_some() && captured(tag.purpose))
            || self.mem.copy_from(addr, src, from, total).is_err()
        {
            return false;
        }
        let step = len as u64;
        let writes = at.iter().enumerate().map(|(k, &t)| {
            let to = addr.get().wrapping_add(k as u64 * step);
            (t, to, step)
        });
        self.count_writes(tag, writes);
        true
    }

    fn dma_write_each(
        &mut self,
        at: &[Instant],
        tag: DmaTag,
        src: &[u8],
        pieces: &[Placed],
    ) -> bool {
        if at.len() != pieces.len()
            || (self.capture.is_some() && captured(tag.purpose))
            || !self.mem.write_each(src, pieces)
        {
            return false;
        }
        let writes = at.iter().zip(pieces);
        self.count_writes(
            tag,
            writes.map(|(&t, p)| (t, p.to.get(), p.from.len() as u64)),
        );
        true
    }

    fn dma_write(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        data: &[u8],
    ) -> Result<Instant, DmaError> {
        self.count_write(at, tag, addr, data.len() as u64);
        self.mem.write(addr, data)?;
        if let Some(c) = &mut self.capture
            && captured(tag.purpose)
        {
            c.push(Carried::Write {
                tag,
                data: data.to_vec(),
            });
        }
        Ok(at)
    }

    fn record_mmio(&mut self, at: Instant, qpn: Option<Qpn>, bytes: usize) {
        self.apply(qpn, |c| c.add_mmio(bytes as u64));
        if let Some(log) = &mut self.log {
            log.push(Crossing::Mmio {
                at,
                qpn,
                bytes: bytes as u32,
            });
        }
    }

    fn raise_msix(&mut self, at: Instant, vector: u16) -> Instant {
        self.count_write(at, MSIX_TAG, msix_address(vector), 4);
        at
    }
}

/// The tag of every MSI-X write: no QP, purpose [`DmaPurpose::Msix`].
pub const MSIX_TAG: DmaTag = DmaTag {
    qpn: None,
    purpose: DmaPurpose::Msix,
};

/// The address MSI-X `vector`'s message is written to.
pub fn msix_address(vector: u16) -> HostAddr {
    HostAddr::new(MSIX_ADDRESS + 4 * u64::from(vector))
}

#[cfg(test)]
mod tests {
    use super::*;
    use doorbell_host::HostRam;

    fn cfg() -> LinkConfig {
        LinkConfig::default()
    }

    #[test]
    fn defaults_are_legal_and_bad_values_are_not() {
        assert_eq!(cfg().validate(), Ok(()));
        let bad = LinkConfig {
            mps_bytes: 300,
            ..cfg()
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::OutOfRange { name: "mps", .. })
        ));
        let bad = LinkConfig {
            rcb_bytes: 256,
            ..cfg()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn writes_split_at_mps_and_4k() {
        let v: Vec<_> = cfg().write_tlps(0x1000, 1024).collect();
        assert_eq!(
            v,
            vec![(0x1000, 256), (0x1100, 256), (0x1200, 256), (0x1300, 256)]
        );
        // Crossing a 4 KiB boundary forces a split even below MPS.
        let v: Vec<_> = cfg().write_tlps(0x1fc0, 128).collect();
        assert_eq!(v, vec![(0x1fc0, 64), (0x2000, 64)]);
        assert_eq!(cfg().write_tlps(0x1000, 0).count(), 0);
    }

    #[test]
    fn reads_split_at_mrrs_then_completions_at_rcb() {
        // 1 MiB aligned: 2048 requests of 512, each answered by 2 CplDs of 256.
        assert_eq!(cfg().read_tlp_counts(0, 1 << 20), (2048, 4096));
        // 64 B aligned: one request, one completion.
        assert_eq!(cfg().read_tlp_counts(0x40, 64), (1, 1));
        // A request that fits in one completion gets one, aligned or not.
        assert_eq!(cfg().completions(0x10, 256).count(), 1);
        // An unaligned 512 B read: each split completion ends on an RCB
        // boundary at or below start + MPS.
        let v: Vec<_> = cfg().completions(0x10, 512).collect();
        assert_eq!(v, vec![(0x10, 240), (0x100, 256), (0x200, 16)]);
    }

    #[test]
    fn kalia_style_128_byte_completions() {
        let c = LinkConfig {
            mps_bytes: 128,
            mrrs_bytes: 512,
            rcb_bytes: 64,
        };
        assert_eq!(c.read_tlp_counts(0, 512), (1, 4));
    }

    #[test]
    fn bus_counts_every_crossing_per_qp() {
        let ram = Arc::new(HostRam::new());
        let a = ram.alloc(8192).unwrap();
        let mut bus = Bus::new(cfg(), ram.clone());
        bus.set_recording(true);
        let q = Qpn::new(5);
        bus.record_mmio(Instant::ZERO, Some(q), 8);
        let mut buf = [0u8; 64];
        bus.dma_read(
            Instant::ZERO,
            DmaTag::new(q, DmaPurpose::SendWqe),
            a,
            &mut buf,
        )
        .unwrap();
        bus.dma_write(Instant::ZERO, DmaTag::new(q, DmaPurpose::Cqe), a, &buf)
            .unwrap();
        bus.dma_write(
            Instant::ZERO,
            DmaTag {
                qpn: None,
                purpose: DmaPurpose::Scatter,
            },
            a,
            &[0; 600],
        )
        .unwrap();
        let c = bus.counters();
        assert_eq!(
            (c.mmio_writes, c.mrd_tlps, c.cpld_tlps, c.dma_mwr_tlps),
            (1, 1, 1, 4)
        );
        assert_eq!(c.mwr_tlps(), 5);
        let qc = bus.qp_counters(q);
        assert_eq!(
            (
                qc.reads(DmaPurpose::SendWqe),
                qc.writes(DmaPurpose::Cqe),
                qc.dma_mwr_tlps
            ),
            (1, 1, 1)
        );
        assert_eq!(bus.take_log().len(), 4);
    }

    /// A bus with only the required methods: [`Dma::dma_read_into`] as
    /// the trait provides it.
    struct Plain(Bus);

    impl Dma for Plain {
        fn dma_read(
            &mut self,
            at: Instant,
            tag: DmaTag,
            addr: HostAddr,
            buf: &mut [u8],
        ) -> Result<Instant, DmaError> {
            self.0.dma_read(at, tag, addr, buf)
        }
        fn dma_write(
            &mut self,
            at: Instant,
            tag: DmaTag,
            addr: HostAddr,
            data: &[u8],
        ) -> Result<Instant, DmaError> {
            self.0.dma_write(at, tag, addr, data)
        }
        fn record_mmio(&mut self, at: Instant, qpn: Option<Qpn>, bytes: usize) {
            self.0.record_mmio(at, qpn, bytes);
        }
        fn raise_msix(&mut self, at: Instant, vector: u16) -> Instant {
            self.0.raise_msix(at, vector)
        }
    }

    /// Reads 1 000 bytes at `a` into pieces of `lens` bytes; the pieces
    /// joined, or the error.
    fn read_into(dma: &mut dyn Dma, a: HostAddr, lens: &[usize]) -> Result<Vec<u8>, DmaError> {
        let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
        let tag = DmaTag::new(Qpn::new(5), DmaPurpose::Payload);
        let mut pieces = bufs.iter_mut().map(|b| &mut b[..]);
        dma.dma_read_into(Instant::ZERO, tag, a, 1000, &mut pieces)?;
        Ok(bufs.concat())
    }

    #[test]
    fn a_read_into_pieces_is_one_dma_of_the_whole() {
        let ram = Arc::new(HostRam::new());
        let a = ram.alloc(4096).unwrap();
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i % 253) as u8).collect();
        ram.write(a, &bytes).unwrap();
        let mut bus = Bus::new(cfg(), ram.clone());
        let mut plain = Plain(Bus::new(cfg(), ram.clone()));
        for dma in [&mut bus as &mut dyn Dma, &mut plain] {
            assert_eq!(read_into(dma, a, &[1, 999]).unwrap(), bytes[..1000]);
            assert_eq!(read_into(dma, a, &[300, 0, 700]).unwrap(), bytes[..1000]);
            // Pieces that do not add up are an error, short or long.
            for lens in [&[300, 600][..], &[600, 600]] {
                assert!(matches!(
                    read_into(dma, a, lens),
                    Err(DmaError::Unmapped(_))
                ));
            }
            // A range past the region fails as one read of it would.
            let end = a.checked_add(3500).unwrap();
            assert!(read_into(dma, end, &[500, 500]).is_err());
        }
        let (b, p) = (bus.counters(), plain.0.counters());
        assert_eq!(b, p, "the same counts as reads of the whole");
        // Each call one read of 1 000 bytes, counted as it is issued (as a
        // read that then fails is).
        assert_eq!(b.reads(DmaPurpose::Payload), 5);
        assert_eq!(b.read_bytes(DmaPurpose::Payload), 5 * 1000);
    }

    #[test]
    fn a_payload_left_in_memory_is_counted_as_read_and_written_once_copied() {
        let (src_ram, dst_ram) = (Arc::new(HostRam::new()), Arc::new(HostRam::new()));
        let a = src_ram.alloc(8192).unwrap();
        let b = dst_ram.alloc(8192).unwrap();
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        src_ram.write(a, &bytes).unwrap();
        let (read, write) = (
            DmaTag::new(Qpn::new(5), DmaPurpose::Payload),
            DmaTag::new(Qpn::new(6), DmaPurpose::Scatter),
        );
        // Each bus as the sender's and the receiver's, and a bus whose
        // reads and writes move the bytes, to compare counts with.
        let mut sent = [
            Bus::new(cfg(), src_ram.clone()),
            Bus::new(cfg(), src_ram.clone()),
        ];
        let mut taken = [
            Bus::new(cfg(), dst_ram.clone()),
            Bus::new(cfg(), dst_ram.clone()),
        ];
        let t = Instant::ZERO;
        sent[0].dma_read_left(t, read, a, 5000).unwrap();
        taken[0]
            .dma_write_from(t, write, b, &*src_ram, a, 5000)
            .unwrap();
        let mut plain = Plain(Bus::new(cfg(), dst_ram.clone()));
        plain
            .dma_write_from(t, write, b, &*src_ram, a, 5000)
            .unwrap();
        let mut buf = vec![0u8; 5000];
        sent[1].dma_read(t, read, a, &mut buf).unwrap();
        taken[1].dma_write(t, write, b, &buf).unwrap();
        assert_eq!(sent[0].counters(), sent[1].counters());
        assert_eq!(taken[0].counters(), taken[1].counters());
        assert_eq!(plain.0.counters(), taken[1].counters());
        let mut got = vec![0u8; 5000];
        dst_ram.read(b, &mut got).unwrap();
        assert_eq!(got, bytes);
        // Unmapped on either side: an error, counted as issued.
        let past = a.checked_add(8000).unwrap();
        assert!(sent[0].dma_read_left(t, read, past, 500).is_err());
        assert!(
            taken[0]
                .dma_write_from(t, write, b, &*src_ram, past, 500)
                .is_err()
        );
        let past = b.checked_add(8000).unwrap();
        assert!(
            taken[0]
                .dma_write_from(t, write, past, &*src_ram, a, 500)
                .is_err()
        );
    }

    #[test]
    fn a_run_written_with_one_copy_counts_as_its_writes_or_does_nothing() {
        let (src_ram, dst_ram) = (Arc::new(HostRam::new()), Arc::new(HostRam::new()));
        let a = src_ram.alloc(16384).unwrap();
        let b = dst_ram.alloc(16384).unwrap();
        let bytes: Vec<u8> = (0..12288u32).map(|i| (i % 251) as u8).collect();
        src_ram.write(a, &bytes).unwrap();
        let tag = DmaTag::new(Qpn::new(6), DmaPurpose::Scatter);
        // Three writes of 4 KiB from an address that splits them at 4 KiB
        // boundaries, each at its own time.
        let to = b.checked_add(100).unwrap();
        let times = [3000, 5000, 8000].map(Instant::from_ps);
        let mut run = Bus::new(cfg(), dst_ram.clone());
        run.set_recording(true);
        assert!(run.dma_write_run_from(&times, tag, to, &*src_ram, a, 4096));
        let mut one_by_one = Bus::new(cfg(), dst_ram.clone());
        one_by_one.set_recording(true);
        for (k, &t) in times.iter().enumerate() {
            let off = 4096 * k as u64;
            one_by_one
                .dma_write_from(
                    t,
                    tag,
                    to.checked_add(off).unwrap(),
                    &*src_ram,
                    a.checked_add(off).unwrap(),
                    4096,
                )
                .unwrap();
        }
        assert_eq!(run.counters(), one_by_one.counters());
        assert_eq!(
            run.qp_counters(Qpn::new(6)),
            one_by_one.qp_counters(Qpn::new(6))
        );
        assert_eq!(run.take_log(), one_by_one.take_log(), "the same crossings");
        let mut got = vec![0u8; 12288];
        dst_ram.read(to, &mut got).unwrap();
        assert_eq!(got, bytes);
        // A run one of whose writes would fail, or that a capture must keep
        // write by write: nothing moved or counted, for the caller to make
        // the writes one by one.
        let mut refused = Bus::new(cfg(), dst_ram.clone());
        let late = b.checked_add(8192).unwrap();
        assert!(!refused.dma_write_run_from(&times, tag, late, &*src_ram, a, 4096));
        let past = a.checked_add(8192).unwrap();
        assert!(!refused.dma_write_run_from(&times, tag, to, &*src_ram, past, 4096));
        refused.set_capture(true);
        let kept = DmaTag::new(Qpn::new(6), DmaPurpose::Cqe);
        assert!(!refused.dma_write_run_from(&times, kept, to, &*src_ram, a, 4096));
        assert_eq!(refused.counters(), Counters::default());
        assert!(refused.take_capture().is_empty());
        let plain = &mut Plain(Bus::new(cfg(), dst_ram.clone()));
        assert!(!plain.dma_write_run_from(&times, tag, to, &*src_ram, a, 4096));
        assert_eq!(plain.0.counters(), Counters::default());
    }

    #[test]
    fn writes_made_at_once_count_as_each_made_alone_or_do_nothing() {
        let ram = Arc::new(HostRam::new());
        let b = ram.alloc(16384).unwrap();
        let src: Vec<u8> = (0..200u8).collect();
        let tag = DmaTag::new(Qpn::new(6), DmaPurpose::Scatter);
        // Small pieces, one across a 4 KiB boundary and one longer than a
        // TLP's payload, each at its own time.
        let at = |off: u64| b.checked_add(off).unwrap();
        let pieces = [
            Placed {
                to: at(8),
                from: 0..8,
            },
            Placed {
                to: at(4092),
                from: 8..24,
            },
            Placed {
                to: at(9000),
                from: 24..200,
            },
        ];
        let times = [3000, 5000, 8000].map(Instant::from_ps);
        let mut each = Bus::new(cfg(), ram.clone());
        each.set_recording(true);
        assert!(each.dma_write_each(&times, tag, &src, &pieces));
        let mut got = [0u8; 200];
        for p in &pieces {
            ram.read(p.to, &mut got[..p.from.len()]).unwrap();
            assert_eq!(got[..p.from.len()], src[p.from.clone()]);
        }
        let mut alone = Bus::new(cfg(), ram.clone());
        alone.set_recording(true);
        for (p, &t) in pieces.iter().zip(&times) {
            assert_eq!(alone.dma_write(t, tag, p.to, &src[p.from.clone()]), Ok(t));
        }
        assert_eq!(each.counters(), alone.counters());
        assert_eq!(
            each.qp_counters(Qpn::new(6)),
            alone.qp_counters(Qpn::new(6))
        );
        assert_eq!(each.take_log(), alone.take_log(), "the same crossings");
        // Writes one of which would fail, a time short, or a capture that
        // keeps them write by write: nothing moved or counted.
        let mut refused = Bus::new(cfg(), ram.clone());
        let past = [
            Placed {
                to: at(0),
                from: 0..8,
            },
            Placed {
                to: at(16380),
                from: 0..8,
            },
        ];
        assert!(!refused.dma_write_each(&times[..2], tag, &src, &past));
        assert!(!refused.dma_write_each(&times[..2], tag, &src, &pieces));
        refused.set_capture(true);
        let kept = DmaTag::new(Qpn::new(6), DmaPurpose::Cqe);
        assert!(!refused.dma_write_each(&times, kept, &src, &pieces));
        assert_eq!(refused.counters(), Counters::default());
        assert!(refused.take_capture().is_empty());
        ram.read(at(0), &mut got[..8]).unwrap();
        assert_eq!(got[..8], [0; 8], "nothing written");
        let plain = &mut Plain(Bus::new(cfg(), ram.clone()));
        assert!(!plain.dma_write_each(&times, tag, &src, &pieces));
        assert_eq!(plain.0.counters(), Counters::default());
    }

    #[test]
    fn unmapped_dma_is_an_error_not_a_panic() {
        let ram = Arc::new(HostRam::new());
        let mut bus = Bus::new(cfg(), ram);
        let mut buf = [0u8; 8];
        let tag = DmaTag {
            qpn: None,
            purpose: DmaPurpose::Payload,
        };
        assert!(
            bus.dma_read(Instant::ZERO, tag, HostAddr::new(0), &mut buf)
                .is_err()
        );
    }

    proptest::proptest! {
        #[test]
        fn splits_cover_the_range_exactly(addr in 0u64..1 << 20, len in 0u64..70_000, mps in 7u32..=12, mrrs in 7u32..=12, rcb in 6u32..=7) {
            let c = LinkConfig { mps_bytes: 1 << mps, mrrs_bytes: 1 << mrrs, rcb_bytes: 1 << rcb };
            let mut at = addr;
            for (a, n) in c.read_requests(addr, len) {
                proptest::prop_assert_eq!(a, at);
                proptest::prop_assert!(n <= u64::from(c.mrrs_bytes) && n > 0);
                proptest::prop_assert_eq!(a / 4096, (a + n - 1) / 4096);
                let mut ca = a;
                for (x, m) in c.completions(a, n) {
                    proptest::prop_assert_eq!(x, ca);
                    proptest::prop_assert!(m <= u64::from(c.mps_bytes) && m > 0);
                    ca += m;
                    if ca != a + n { proptest::prop_assert_eq!(ca % u64::from(c.rcb_bytes), 0); }
                }
                proptest::prop_assert_eq!(ca, a + n);
                at += n;
            }
            proptest::prop_assert_eq!(at, addr + len);
        }

        #[test]
        fn counts_are_what_the_splits_yield(addr in proptest::prop_oneof![0u64..1 << 20, u64::MAX - 70_000..=u64::MAX], len in 0u64..70_000, mps in 7u32..=12, mrrs in 7u32..=12, rcb in 6u32..=7) {
            let c = LinkConfig { mps_bytes: 1 << mps, mrrs_bytes: 1 << mrrs, rcb_bytes: 1 << rcb };
            proptest::prop_assert_eq!(c.write_tlp_count(addr, len), c.write_tlps(addr, len).count() as u64);
            let walked = c.read_requests(addr, len).fold((0, 0), |(r, k), (a, n)| (r + 1, k + c.completions(a, n).count() as u64));
            proptest::prop_assert_eq!(c.read_tlp_counts(addr, len), walked);
        }

        /// Configurations `validate` refuses (zero, not a power of two,
        /// RCB that does not divide MPS or 4 KiB) still count as they walk.
        #[test]
        fn counts_of_unchecked_configurations_are_what_the_splits_yield(addr in 0u64..1 << 16, len in 0u64..20_000, mps in 0u32..600, mrrs in 0u32..9000, rcb in 0u32..300) {
            let c = LinkConfig { mps_bytes: mps, mrrs_bytes: mrrs, rcb_bytes: rcb };
            proptest::prop_assert_eq!(c.write_tlp_count(addr, len), c.write_tlps(addr, len).count() as u64);
            let walked = c.read_requests(addr, len).fold((0, 0), |(r, k), (a, n)| (r + 1, k + c.completions(a, n).count() as u64));
            proptest::prop_assert_eq!(c.read_tlp_counts(addr, len), walked);
        }
    }
}
