//! Host memory and MMIO: the two sides of the bus as host software sees them.
//!
//! # Model
//! [`HostMemory`] is the host's memory as a bus address space, in the manner
//! of vm-memory's `GuestMemory`: checked reads and writes by address, the
//! allocation of queue buffers and doorbell-record pages, and the pinning
//! (registration) of ranges for DMA. Host software (driver and provider)
//! reads and writes it directly; the device reaches it only through DMA on
//! the bus, which the `doorbell-pcie` crate wraps around a `HostMemory`.
//! [`Mmio`] is the other direction: stores the CPU makes into a device's UAR
//! pages. Both are traits so that the live runtime and the simulator can
//! provide them (STYLE §1, "host software sees the device only through
//! doorbell-host traits").
//!
//! Nothing above the trait may assume how addresses are made. Two
//! implementations exist: [`HostRam`] here, a private address space of
//! regions it allocated itself (the simulator's and the safe Rust API's
//! memory), and the live runtime's process memory, whose addresses are the
//! process's own virtual addresses, where [`HostMemory::pin`] registers the
//! application's buffers in place.
//!
//! One fact about the host's CPUs is here too, for host software and the
//! live runtime alike: whether the calling thread may run on one CPU only
//! ([`one_cpu`]), where nothing should wait by spinning.
//!
//! # Guarantees
//! Every access is checked: an access that is not wholly inside memory the
//! implementation may touch returns [`MemError`] and changes nothing.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

mod allocation;
mod cow_map;
pub use allocation::{Allocation, NotFreed};
pub use cow_map::{CowMap, Recent, Snapshot};

use doorbell_types::{Cqn, HostAddr, Qpn, UarIndex};

/// Bytes in a host page.
pub const PAGE_SIZE: u64 = 4096;

/// Why a host-memory access or allocation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// The range is not wholly inside one allocated region. Fatal to the
    /// access only; the device turns it into a protection error.
    #[error("{len} bytes at {addr} are not inside allocated host memory")]
    Unmapped {
        /// Start of the access.
        addr: HostAddr,
        /// Length of the access.
        len: usize,
    },
    /// No region starts at this address.
    #[error("no allocation starts at {0}")]
    NotAllocated(HostAddr),
    /// The region is pinned for DMA and cannot be freed until unpinned.
    #[error("region at {0} is pinned for DMA ({1} pins)")]
    Pinned(HostAddr, u32),
    /// A zero-length or absurdly large allocation.
    #[error("cannot allocate {0} bytes")]
    BadSize(u64),
    /// An unpin of a range that holds no pin.
    #[error("{len} bytes at {addr} are not pinned")]
    NotPinned {
        /// Start of the range.
        addr: HostAddr,
        /// Its length.
        len: u64,
    },
}

/// Bytes of a source and where in host memory they go: one of the writes
/// [`HostMemory::write_each`] makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Where they go.
    pub to: HostAddr,
    /// Which bytes of the source.
    pub from: std::ops::Range<usize>,
}

/// Copies `src` into the buffers `pieces` yields, in order, each filled
/// whole; `None` if they do not add up to `src.len()` bytes (what they
/// hold is then unspecified).
pub fn spread(src: &[u8], pieces: &mut dyn Iterator<Item = &mut [u8]>) -> Option<()> {
    let mut from = src;
    for p in pieces {
        let (head, rest) = from.split_at_checked(p.len())?;
        p.copy_from_slice(head);
        from = rest;
    }
    from.is_empty().then_some(())
}

/// The host's memory as a bus address space.
///
/// # Contract
/// - [`read`](Self::read) and [`write`](Self::write) succeed only if the
///   whole range is memory the implementation may touch (an allocation of
///   its own, or a pinned range); otherwise they return
///   [`MemError::Unmapped`] and change nothing.
/// - [`alloc`](Self::alloc) returns zeroed, page-aligned memory that stays
///   valid until [`free`](Self::free); a pinned allocation cannot be freed.
/// - [`pin`](Self::pin) makes `[addr, addr + len)` reachable by DMA until the
///   matching [`unpin`](Self::unpin) with the same range, and returns the
///   bus address of each 4 KiB page it covers (the PAS or MTT list the
///   driver hands to the device). Pins nest: each takes one reference.
/// - [`adopt`](Self::adopt) takes a buffer the caller owned and makes it host
///   memory, as an allocation; [`release`](Self::release) gives it back with
///   what was written into it. Whether the bytes stay in place is the
///   implementation's affair (the process's own memory keeps them there).
pub trait HostMemory: Send + Sync {
    /// Copies `buf.len()` bytes at `addr` into `buf`.
    fn read(&self, addr: HostAddr, buf: &mut [u8]) -> Result<(), MemError>;
    /// Copies the `len` bytes at `addr` into the buffers `pieces` yields,
    /// in order, each filled whole: [`Self::read`] of `len` bytes, spread
    /// over several buffers (a payload read into the frames that carry
    /// it). Fails as that read does, and where the pieces do not add up to
    /// `len` bytes ([`MemError::Unmapped`]; what they hold is then
    /// unspecified). The provided method reads into a buffer of its own and
    /// copies out.
    fn read_into(
        &self,
        addr: HostAddr,
        len: usize,
        pieces: &mut dyn Iterator<Item = &mut [u8]>,
    ) -> Result<(), MemError> {
        let mut buf = vec![0u8; len];
        self.read(addr, &mut buf)?;
        spread(&buf, pieces).ok_or(MemError::Unmapped { addr, len })
    }
    /// Copies `data` to `addr`.
    fn write(&self, addr: HostAddr, data: &[u8]) -> Result<(), MemError>;
    /// Makes a [`Self::write`] of each piece of `src`, in order, all or
    /// none: false, having written nothing, where a piece lies outside
    /// `src` or outside memory, or where this memory cannot make them at
    /// once. The caller then writes them one by one. The provided method
    /// always answers false; [`HostRam`] makes them under one lock where
    /// they all lie in one region (a train's small payloads, into one
    /// buffer).
    fn write_each(&self, src: &[u8], pieces: &[Placed]) -> bool {
        let _ = (src, pieces);
        false
    }
    /// Copies the `len` bytes at `from` in `src` to `to` in this memory: a
    /// [`Self::write`] of what `src.read` gives (a payload that one NIC of
    /// a process left in its memory, taken into another's), with
    /// memmove's result where the two ranges overlap in one memory. Fails
    /// as that read or that write does, having changed nothing. The
    /// provided method checks both ranges and then copies through a buffer
    /// of its own, a page at a time; [`HostRam`] copies straight from one
    /// `HostRam` into another (or within one), under both regions' locks.
    fn copy_from(
        &self,
        to: HostAddr,
        src: &dyn HostMemory,
        from: HostAddr,
        len: usize,
    ) -> Result<(), MemError> {
        copy_through_buffer(self, to, src, from, len)
    }
    /// This memory, if it is a [`HostRam`]: what [`Self::copy_from`] looks
    /// for in its source.
    fn as_ram(&self) -> Option<&HostRam> {
        None
    }

    /// Allocates `len` zeroed bytes at a page-aligned address.
    fn alloc(&self, len: u64) -> Result<HostAddr, MemError>;
    /// Frees the allocation that starts at `addr`.
    fn free(&self, addr: HostAddr) -> Result<(), MemError>;
    /// Makes `buf` host memory, as an allocation starting at the returned
    /// address; on failure the buffer comes back untouched.
    fn adopt(&self, buf: Vec<u8>) -> Result<HostAddr, (MemError, Vec<u8>)>;
    /// Gives back the buffer adopted at `addr`, with its current bytes. Like
    /// [`free`](Self::free), it refuses while the memory is pinned.
    fn release(&self, addr: HostAddr) -> Result<Vec<u8>, MemError>;
    /// Pins `[addr, addr + len)` for DMA and returns its page list.
    fn pin(&self, addr: HostAddr, len: u64) -> Result<Vec<HostAddr>, MemError>;
    /// Releases one pin of `[addr, addr + len)` taken by [`Self::pin`].
    fn unpin(&self, addr: HostAddr, len: u64) -> Result<(), MemError>;
    /// Checks that `[addr, addr + len)` may be read and written now.
    fn check(&self, addr: HostAddr, len: usize) -> Result<(), MemError>;

    /// Reads a big-endian u32.
    fn read_be32(&self, addr: HostAddr) -> Result<u32, MemError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Writes a big-endian u32.
    fn write_be32(&self, addr: HostAddr, v: u32) -> Result<(), MemError> {
        self.write(addr, &v.to_be_bytes())
    }
}

/// [`HostMemory::copy_from`] through a page-sized buffer on the stack.
/// Both ranges are checked first, so that a copy that fails has changed
/// nothing (unless the memory changes under it); within one memory, an
/// overlapping copy to a higher address goes from the end, as memmove's.
fn copy_through_buffer<M: HostMemory + ?Sized>(
    dst: &M,
    to: HostAddr,
    src: &dyn HostMemory,
    from: HostAddr,
    len: usize,
) -> Result<(), MemError> {
    src.check(from, len)?;
    dst.check(to, len)?;
    let same = std::ptr::addr_eq(dst as *const M, src as *const dyn HostMemory);
    let backwards = same && from < to;
    let mut buf = [0u8; PAGE_SIZE as usize];
    let chunks = len.div_ceil(buf.len());
    for k in 0..chunks {
        let k = if backwards { chunks - 1 - k } else { k };
        let start = k * buf.len();
        let n = (len - start).min(buf.len());
        let off = start as u64;
        src.read(offset(from, off)?, &mut buf[..n])?;
        dst.write(offset(to, off)?, &buf[..n])?;
    }
    Ok(())
}

/// Whether the calling thread may run on one CPU only: its affinity, as
/// [`std::thread::available_parallelism`] reads it on Linux (`taskset -c
/// 0`, a container given one CPU). There, a thread that waits by spinning
/// holds back the very thread it waits for (the NIC's, a peer
/// process's), and a second thread for the work only takes turns with the
/// first: host software and the live runtime then neither spin nor hand
/// work across threads (decision records 0056 and 0057).
pub fn one_cpu() -> bool {
    !std::thread::available_parallelism().is_ok_and(|n| n.get() > 1)
}

/// `base + off`, or [`MemError::Unmapped`] if that passes the end of the
/// address space: the checked form of every "buffer start plus offset" host
/// software computes.
pub fn offset(base: HostAddr, off: u64) -> Result<HostAddr, MemError> {
    base.checked_add(off).ok_or(MemError::Unmapped {
        addr: base,
        len: usize::try_from(off).unwrap_or(usize::MAX),
    })
}

/// The bus address of each 4 KiB page that `[addr, addr + len)` touches
/// (at least one page, for a zero length), or `None` if the range passes
/// the end of the address space. Implementations of [`HostMemory::pin`]
/// whose bus addresses are their addresses return this.
pub fn page_list(addr: HostAddr, len: u64) -> Option<Vec<HostAddr>> {
    let first = addr.get() & !(PAGE_SIZE - 1);
    let end = addr.get().checked_add(len.max(1))?;
    Some(
        (first..end)
            .step_by(PAGE_SIZE as usize)
            .map(HostAddr::new)
            .collect(),
    )
}

/// Stores the CPU makes into device registers (UAR pages).
///
/// One call is one MMIO write as the CPU issues it: an 8-byte doorbell, or one
/// 64-byte write-combined BlueFlame chunk. Implementations deliver calls from
/// one thread in order.
pub trait Mmio: Send + Sync {
    /// Writes `data` at byte `offset` of UAR page `uar`.
    fn mmio_write(&self, uar: UarIndex, offset: u32, data: &[u8]);
    /// Tells the device of a store into UAR page `uar` whose bytes it did
    /// not see: a provider that maps the page itself rings with plain stores
    /// (rdma-core's libmlx5). The device reads the doorbell record that
    /// `db` names, which the provider writes before the store.
    fn record_doorbell(&self, uar: UarIndex, db: RecordDoorbell);
}

/// A doorbell the device takes from a doorbell record rather than from the
/// bytes of the register store ([`Mmio::record_doorbell`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordDoorbell {
    /// A send doorbell of this QP: its send counter says how far it posted.
    Send(Qpn),
    /// An arm of this CQ: its arm word says how.
    Arm(Cqn),
}

/// One region: its bytes, boxed.
type Region = Allocation<Box<[u8]>>;

thread_local! {
    /// The regions this thread reached lately, in any `HostRam`
    /// ([`HostRam::with_found`]).
    static RECENT: RefCell<Recent<Arc<Region>>> = const { RefCell::new(Recent::new()) };
}

/// Host memory made of page-aligned regions, shareable between threads.
///
/// Accesses find their region in a map that is read without a lock (each
/// access loads the current one) and copied on change: allocation and free
/// are rare, and a read lock taken by every access would be a cache line
/// that the device and every polling host thread write in turn.
///
/// For the same reason it starts on a line of its own: the counts of an
/// `Arc` that holds it, which one thread raises and another lowers for
/// each batch of frames that a NIC of this process hands another
/// (decision record 0062), are on other lines than the map's.
#[repr(align(128))]
pub struct HostRam {
    regions: CowMap<u64, Arc<Region>>,
    /// The next free address.
    next: Mutex<u64>,
}

/// First address handed out; low addresses stay unmapped so that zero and
/// small integers used as addresses fault.
const BASE: u64 = 0x1_0000_0000;
/// Largest single allocation (1 GiB).
const MAX_ALLOC: u64 = 1 << 30;

impl Default for HostRam {
    fn default() -> Self {
        Self::new()
    }
}

impl HostRam {
    /// An empty address space.
    pub fn new() -> Self {
        Self {
            regions: CowMap::new(),
            next: Mutex::new(BASE),
        }
    }

    /// Places `bytes` as a region at a fresh page-aligned address.
    fn insert(&self, bytes: Box<[u8]>) -> HostAddr {
        let len = bytes.len() as u64;
        let pages = len.div_ceil(PAGE_SIZE);
        let base = {
            let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
            let base = *next;
            // Leave one unmapped guard page after every region.
            *next += (pages + 1) * PAGE_SIZE;
            base
        };
        let region = Arc::new(Region::new(len, bytes));
        self.regions.update(|map| map.insert(base, region));
        HostAddr::new(base)
    }

    /// Removes the region that starts at `addr` unless it is pinned.
    fn remove(&self, addr: HostAddr) -> Result<Box<[u8]>, MemError> {
        self.regions.try_update(|map| {
            let region = map.get(&addr.get()).ok_or(MemError::NotAllocated(addr))?;
            let bytes = region.free().map_err(|e| match e {
                NotFreed::Pinned(pins) => MemError::Pinned(addr, pins),
                NotFreed::Gone => MemError::NotAllocated(addr),
            })?;
            map.remove(&addr.get());
            Ok(bytes)
        })
    }

    /// Number of live regions.
    pub fn region_count(&self) -> usize {
        self.regions.load().len()
    }

    /// Calls `f` with the offset of `addr` in, and the region that holds
    /// all of `[addr, addr + len)`, as the current map has it (or as this
    /// thread found it lately, if the map has not changed since).
    fn with_found<R>(
        &self,
        addr: HostAddr,
        len: usize,
        f: impl FnOnce(usize, &Region) -> R,
    ) -> Result<R, MemError> {
        self.regions
            .with_range(
                &RECENT,
                addr.get(),
                len as u64,
                |r| r.len(),
                |r, off| f(off as usize, r),
            )
            .ok_or(MemError::Unmapped { addr, len })
    }

    /// Calls `f` with the bytes of `[addr, addr + len)` under their
    /// region's lock, unless the region was freed since the map was loaded.
    fn with_region<R>(
        &self,
        addr: HostAddr,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, MemError> {
        self.with_found(addr, len, |off, region| {
            region.with(|bytes| f(&mut bytes[off..off + len]))
        })?
        .ok_or(MemError::Unmapped { addr, len })
    }
}

impl HostMemory for HostRam {
    /// Allocates `len` zeroed bytes at a page-aligned address.
    fn alloc(&self, len: u64) -> Result<HostAddr, MemError> {
        if len == 0 || len > MAX_ALLOC {
            return Err(MemError::BadSize(len));
        }
        Ok(self.insert(vec![0u8; len as usize].into_boxed_slice()))
    }

    /// Frees the region that starts at `addr`.
    fn free(&self, addr: HostAddr) -> Result<(), MemError> {
        self.remove(addr).map(drop)
    }

    /// Takes the buffer's storage as a region of its own (no copy).
    fn adopt(&self, buf: Vec<u8>) -> Result<HostAddr, (MemError, Vec<u8>)> {
        let len = buf.len() as u64;
        if len == 0 || len > MAX_ALLOC {
            return Err((MemError::BadSize(len), buf));
        }
        Ok(self.insert(buf.into_boxed_slice()))
    }

    fn release(&self, addr: HostAddr) -> Result<Vec<u8>, MemError> {
        self.remove(addr).map(<[u8]>::into_vec)
    }

    /// Pins the region containing `[addr, addr + len)` for DMA and returns the
    /// bus address of each 4 KiB page it covers (the PAS list the driver hands
    /// to the device).
    fn pin(&self, addr: HostAddr, len: u64) -> Result<Vec<HostAddr>, MemError> {
        let len_usize = usize::try_from(len).map_err(|_| MemError::Unmapped {
            addr,
            len: usize::MAX,
        })?;
        if !self.with_found(addr, len_usize, |_, region| region.pin())? {
            return Err(MemError::Unmapped {
                addr,
                len: len_usize,
            });
        }
        // with_found checked that the range ends inside a region.
        page_list(addr, len).ok_or(MemError::Unmapped {
            addr,
            len: len as usize,
        })
    }

    /// Releases one pin taken by [`HostMemory::pin`] on the region holding
    /// the range.
    fn unpin(&self, addr: HostAddr, len: u64) -> Result<(), MemError> {
        // The same range as the pin's, zero bytes included: a pin of none
        // at a region's end is found there again.
        let len = usize::try_from(len).map_err(|_| MemError::NotPinned { addr, len })?;
        if self.with_found(addr, len, |_, region| region.unpin())? {
            Ok(())
        } else {
            Err(MemError::NotPinned {
                addr,
                len: len as u64,
            })
        }
    }

    /// Checks that `[addr, addr + len)` lies inside one live region,
    /// without the region's lock ([`Allocation::is_live`]): a check waits
    /// for no access in progress, such as a peer's copy out of the region.
    fn check(&self, addr: HostAddr, len: usize) -> Result<(), MemError> {
        if self.with_found(addr, len, |_, region| region.is_live())? {
            Ok(())
        } else {
            Err(MemError::Unmapped { addr, len })
        }
    }

    fn read(&self, addr: HostAddr, buf: &mut [u8]) -> Result<(), MemError> {
        self.with_region(addr, buf.len(), |src| buf.copy_from_slice(src))
    }

    fn read_into(
        &self,
        addr: HostAddr,
        len: usize,
        pieces: &mut dyn Iterator<Item = &mut [u8]>,
    ) -> Result<(), MemError> {
        self.with_region(addr, len, |src| spread(src, pieces))?
            .ok_or(MemError::Unmapped { addr, len })
    }

    fn write(&self, addr: HostAddr, data: &[u8]) -> Result<(), MemError> {
        self.with_region(addr, data.len(), |dst| dst.copy_from_slice(data))
    }

    /// Under the lock of the region that holds the first piece, if every
    /// piece lies in it.
    fn write_each(&self, src: &[u8], pieces: &[Placed]) -> bool {
        let Some(first) = pieces.first() else {
            return true;
        };
        let done = self.with_found(first.to, first.from.len(), |off, region| {
            // The region's range, as addresses.
            let start = first.to.get() - off as u64;
            let len = region.len();
            let fits = |p: &Placed| {
                let off = p.to.get().wrapping_sub(start);
                p.to.get() >= start
                    && off
                        .checked_add(p.from.len() as u64)
                        .is_some_and(|end| end <= len)
                    && p.from.start <= p.from.end
                    && p.from.end <= src.len()
            };
            if !pieces.iter().all(fits) {
                return None;
            }
            region.with(|bytes| {
                for p in pieces {
                    let at = (p.to.get() - start) as usize;
                    bytes[at..at + p.from.len()].copy_from_slice(&src[p.from.clone()]);
                }
            })
        });
        matches!(done, Ok(Some(())))
    }

    /// From another `HostRam`, one copy under both regions' locks
    /// ([`Allocation::with_pair`]); within one region, a move inside it.
    fn copy_from(
        &self,
        to: HostAddr,
        src: &dyn HostMemory,
        from: HostAddr,
        len: usize,
    ) -> Result<(), MemError> {
        let Some(src_ram) = src.as_ram() else {
            return copy_through_buffer(self, to, src, from, len);
        };
        let copied = self
            .regions
            .with_ranges(
                &src_ram.regions,
                &RECENT,
                (to.get(), len as u64),
                (from.get(), len as u64),
                |r| r.len(),
                |(dst, dst_off), (src, src_off)| {
                    let (dst_off, src_off) = (dst_off as usize, src_off as usize);
                    if Arc::ptr_eq(dst, src) {
                        dst.with(|b| b.copy_within(src_off..src_off + len, dst_off))
                            .ok_or(to)
                    } else {
                        dst.with_pair(src, |d, s| {
                            d[dst_off..dst_off + len].copy_from_slice(&s[src_off..src_off + len]);
                        })
                        // (Which side was freed is asked only on failure:
                        // taking a lock straight after the copy would wait
                        // for all its stores to drain.)
                        .ok_or_else(|| if src.is_freed() { from } else { to })
                    }
                },
            )
            .unwrap_or_else(|| {
                // Which side holds no such range.
                Err(match self.check(to, len) {
                    Ok(()) => from,
                    Err(_) => to,
                })
            });
        copied.map_err(|addr| MemError::Unmapped { addr, len })
    }

    fn as_ram(&self) -> Option<&HostRam> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_this_thread_reached_lately_is_not_reached_once_freed_or_in_another_memory() {
        let ram = HostRam::new();
        let a = ram.alloc(4096).unwrap();
        ram.write(a, &[1, 2, 3]).unwrap();
        let mut b = [0u8; 3];
        ram.read(a, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        // Another memory hands out the same first address; this thread
        // reached `ram`'s region there a moment ago.
        let other = HostRam::new();
        let c = other.alloc(4096).unwrap();
        assert_eq!(c, a, "both start at the same address");
        other.read(c, &mut b).unwrap();
        assert_eq!(b, [0, 0, 0], "other's own zeroed bytes");
        ram.read(a, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        ram.free(a).unwrap();
        assert_eq!(
            ram.read(a, &mut b),
            Err(MemError::Unmapped { addr: a, len: 3 })
        );
        // A region whose access ran past its end is refused however
        // recently its start was reached.
        assert!(other.read(c, &mut [0u8; 4097]).is_err());
        other.read(c.checked_add(4093).unwrap(), &mut b).unwrap();
        assert!(other.read(c.checked_add(4094).unwrap(), &mut b).is_err());
    }

    /// A memory that is not a `HostRam` to `copy_from`: one behind a
    /// wrapper that does not say it is.
    struct Opaque(HostRam);

    impl HostMemory for Opaque {
        fn read(&self, addr: HostAddr, buf: &mut [u8]) -> Result<(), MemError> {
            self.0.read(addr, buf)
        }
        fn write(&self, addr: HostAddr, data: &[u8]) -> Result<(), MemError> {
            self.0.write(addr, data)
        }
        fn alloc(&self, len: u64) -> Result<HostAddr, MemError> {
            self.0.alloc(len)
        }
        fn free(&self, addr: HostAddr) -> Result<(), MemError> {
            self.0.free(addr)
        }
        fn adopt(&self, buf: Vec<u8>) -> Result<HostAddr, (MemError, Vec<u8>)> {
            self.0.adopt(buf)
        }
        fn release(&self, addr: HostAddr) -> Result<Vec<u8>, MemError> {
            self.0.release(addr)
        }
        fn pin(&self, addr: HostAddr, len: u64) -> Result<Vec<HostAddr>, MemError> {
            self.0.pin(addr, len)
        }
        fn unpin(&self, addr: HostAddr, len: u64) -> Result<(), MemError> {
            self.0.unpin(addr, len)
        }
        fn check(&self, addr: HostAddr, len: usize) -> Result<(), MemError> {
            self.0.check(addr, len)
        }
    }

    fn at(a: HostAddr, off: u64) -> HostAddr {
        a.checked_add(off).unwrap()
    }

    #[test]
    fn copy_from_moves_the_same_bytes_whichever_memory_they_come_from() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let ram = HostRam::new();
        let src = ram.alloc(10_000).unwrap();
        ram.write(src, &bytes).unwrap();
        let opaque = Opaque(HostRam::new());
        let osrc = opaque.alloc(10_000).unwrap();
        opaque.write(osrc, &bytes).unwrap();
        let sources: [(&dyn HostMemory, HostAddr); 3] = [
            (&ram, src),
            (&opaque, osrc),
            // Another region of the destination's own memory.
            (&ram, src),
        ];
        for (k, (mem, from)) in sources.into_iter().enumerate() {
            let dst_ram = HostRam::new();
            let dst_mem: &HostRam = if k == 2 { &ram } else { &dst_ram };
            let to = dst_mem.alloc(12_000).unwrap();
            dst_mem
                .copy_from(at(to, 100), mem, at(from, 1), 9_999)
                .unwrap();
            let mut got = vec![0u8; 12_000];
            dst_mem.read(to, &mut got).unwrap();
            assert!(got[..100].iter().all(|&b| b == 0), "source {k}: before");
            assert_eq!(&got[100..10_099], &bytes[1..], "source {k}");
            assert!(got[10_099..].iter().all(|&b| b == 0), "source {k}: after");
        }
    }

    #[test]
    fn copy_from_within_one_region_moves_overlapping_bytes_as_memmove_does() {
        let ram = HostRam::new();
        let a = ram.alloc(64).unwrap();
        let bytes: Vec<u8> = (0..64).collect();
        ram.write(a, &bytes).unwrap();
        ram.copy_from(at(a, 8), &ram, a, 32).unwrap();
        let mut got = vec![0u8; 64];
        ram.read(a, &mut got).unwrap();
        let mut want = bytes.clone();
        want.copy_within(0..32, 8);
        assert_eq!(got, want);
    }

    #[test]
    fn copy_from_through_a_buffer_overlaps_as_memmove_and_fails_whole() {
        let opaque = Opaque(HostRam::new());
        let a = opaque.alloc(3 * 4096).unwrap();
        let bytes: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 241) as u8).collect();
        // Overlapping ranges several pages long, both ways.
        for (from, to) in [(0, 100), (100, 0)] {
            opaque.write(a, &bytes).unwrap();
            opaque
                .copy_from(at(a, to), &opaque, at(a, from), 9000)
                .unwrap();
            let mut got = vec![0u8; bytes.len()];
            opaque.read(a, &mut got).unwrap();
            let mut want = bytes.clone();
            want.copy_within(from as usize..from as usize + 9000, to as usize);
            assert!(got == want, "from {from} to {to}");
        }
        // A source that ends past its memory: nothing is written, though
        // its first pages are there.
        let ram = HostRam::new();
        let b = ram.alloc(3 * 4096).unwrap();
        opaque.write(a, &bytes).unwrap();
        assert!(ram.copy_from(b, &opaque, at(a, 4096), 3 * 4096).is_err());
        let mut got = vec![1u8; 3 * 4096];
        ram.read(b, &mut got).unwrap();
        assert!(got.iter().all(|&x| x == 0), "nothing written");
    }

    #[test]
    fn copy_from_fails_on_either_side_unmapped_or_freed() {
        let (ram, other) = (HostRam::new(), HostRam::new());
        let a = ram.alloc(4096).unwrap();
        let b = other.alloc(4096).unwrap();
        let past = at(b, 4000);
        assert_eq!(
            ram.copy_from(a, &other, past, 200),
            Err(MemError::Unmapped {
                addr: past,
                len: 200
            })
        );
        let past = at(a, 4000);
        assert_eq!(
            ram.copy_from(past, &other, b, 200),
            Err(MemError::Unmapped {
                addr: past,
                len: 200
            })
        );
        other.free(b).unwrap();
        assert_eq!(
            ram.copy_from(a, &other, b, 1),
            Err(MemError::Unmapped { addr: b, len: 1 })
        );
        let opaque = Opaque(HostRam::new());
        let c = opaque.alloc(4096).unwrap();
        let past = at(c, 4095);
        assert_eq!(
            ram.copy_from(a, &opaque, past, 2),
            Err(MemError::Unmapped { addr: past, len: 2 })
        );
    }

    #[test]
    fn write_each_writes_every_piece_in_order_or_none() {
        let ram = HostRam::new();
        let a = ram.alloc(4096).unwrap();
        let b = ram.alloc(4096).unwrap();
        let src: Vec<u8> = (1..=16).collect();
        let piece = |to: HostAddr, from: std::ops::Range<usize>| Placed { to, from };
        // Every piece in `a`'s region, the last over the first's bytes.
        let pieces = [
            piece(at(a, 100), 0..4),
            piece(at(a, 4092), 4..8),
            piece(at(a, 102), 8..12),
        ];
        assert!(ram.write_each(&src, &pieces));
        let mut got = [0u8; 6];
        ram.read(at(a, 100), &mut got).unwrap();
        assert_eq!(got, [1, 2, 9, 10, 11, 12]);
        ram.read(at(a, 4092), &mut got[..4]).unwrap();
        assert_eq!(got[..4], [5, 6, 7, 8]);
        // A piece in another region, past the region's end, or past the
        // source's: nothing is written, and the first piece's bytes stay.
        for bad in [
            piece(at(b, 0), 0..4),
            piece(at(a, 4093), 0..4),
            piece(at(a, 200), 12..17),
            piece(HostAddr::new(7), 0..1),
        ] {
            let fresh = [piece(at(a, 300), 0..4), bad];
            assert!(!ram.write_each(&src, &fresh), "{fresh:?}");
            ram.read(at(a, 300), &mut got[..4]).unwrap();
            assert_eq!(got[..4], [0; 4], "{fresh:?}");
        }
        // Nothing to write is written.
        assert!(ram.write_each(&src, &[]));
        // Another memory makes none at once.
        assert!(!Opaque(HostRam::new()).write_each(&src, &pieces));
    }

    #[test]
    fn alloc_read_write_free() {
        let ram = HostRam::new();
        let a = ram.alloc(10_000).unwrap();
        assert_eq!(a.offset_in(PAGE_SIZE), 0);
        ram.write(a.checked_add(9_990).unwrap(), &[7; 10]).unwrap();
        let mut b = [0u8; 12];
        assert!(ram.read(a.checked_add(9_990).unwrap(), &mut b).is_err());
        ram.read(a.checked_add(9_988).unwrap(), &mut b[..12])
            .unwrap();
        let mut b = [0u8; 10];
        ram.read(a.checked_add(9_990).unwrap(), &mut b).unwrap();
        assert_eq!(b, [7; 10]);
        ram.free(a).unwrap();
        assert!(ram.read(a, &mut b).is_err());
        assert_eq!(ram.free(a), Err(MemError::NotAllocated(a)));
    }

    #[test]
    fn regions_do_not_touch() {
        let ram = HostRam::new();
        let a = ram.alloc(4096).unwrap();
        let b = ram.alloc(4096).unwrap();
        assert!(
            b.get() >= a.get() + 2 * PAGE_SIZE,
            "guard page between regions"
        );
        // A write that would run from a into the gap fails and changes nothing.
        assert!(ram.write(a.checked_add(4090).unwrap(), &[1; 10]).is_err());
        let mut x = [9u8; 6];
        ram.read(a.checked_add(4090).unwrap(), &mut x).unwrap();
        assert_eq!(x, [0; 6]);
    }

    #[test]
    fn pinned_regions_cannot_be_freed() {
        let ram = HostRam::new();
        let a = ram.alloc(3 * 4096).unwrap();
        let pas = ram.pin(a.checked_add(100).unwrap(), 8192).unwrap();
        assert_eq!(pas.len(), 3);
        assert_eq!(pas[1].get(), a.get() + 4096);
        assert_eq!(ram.free(a), Err(MemError::Pinned(a, 1)));
        ram.unpin(a.checked_add(100).unwrap(), 8192).unwrap();
        assert!(matches!(ram.unpin(a, 1), Err(MemError::NotPinned { .. })));
        ram.free(a).unwrap();
    }

    #[test]
    fn a_pin_of_no_bytes_is_undone_by_its_unpin() {
        let ram = HostRam::new();
        let a = ram.alloc(4096).unwrap();
        for at in [a, a.checked_add(4096).unwrap()] {
            ram.pin(at, 0).unwrap();
            ram.unpin(at, 0).unwrap();
        }
        ram.free(a).unwrap();
    }

    #[test]
    fn an_adopted_buffer_comes_back_with_what_was_written() {
        let ram = HostRam::new();
        let a = ram.adopt(b"hello world".to_vec()).unwrap();
        ram.write(a.checked_add(6).unwrap(), b"rdma!").unwrap();
        ram.pin(a, 11).unwrap();
        assert_eq!(ram.release(a), Err(MemError::Pinned(a, 1)));
        ram.unpin(a, 11).unwrap();
        assert_eq!(ram.release(a).unwrap(), b"hello rdma!");
        assert!(ram.read(a, &mut [0u8; 1]).is_err());
        let (e, back) = ram.adopt(Vec::new()).unwrap_err();
        assert_eq!((e, back), (MemError::BadSize(0), Vec::new()));
    }

    #[test]
    fn allocations_from_two_threads_all_stay_mapped() {
        // The map is copied on change: two threads that allocated at once
        // must not each publish a copy without the other's region.
        let ram = HostRam::new();
        let keep = ram.alloc(64).unwrap();
        ram.write(keep, &[3; 64]).unwrap();
        let made: Vec<Vec<HostAddr>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2u8)
                .map(|t| {
                    let ram = &ram;
                    s.spawn(move || {
                        (0..300)
                            .map(|_| {
                                let a = ram.alloc(64).unwrap();
                                ram.write(a, &[t; 64]).unwrap();
                                let mut b = [0u8; 64];
                                ram.read(keep, &mut b).unwrap();
                                assert_eq!(b, [3; 64]);
                                a
                            })
                            .collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(ram.region_count(), 601);
        for (t, addrs) in made.iter().enumerate() {
            for &a in addrs {
                let mut b = [0u8; 64];
                ram.read(a, &mut b).unwrap();
                assert_eq!(b, [t as u8; 64]);
            }
        }
    }

    #[test]
    fn a_region_freed_while_a_map_holds_it_is_unmapped_through_that_map() {
        // An access that loaded the map before a free finds the region
        // freed (its bytes taken, so `with_region` refuses it); after the
        // free, neither a pin nor a read finds it at all.
        let ram = HostRam::new();
        let a = ram.alloc(4096).unwrap();
        let old = ram.regions.load();
        ram.free(a).unwrap();
        let region = old.get(&a.get()).unwrap();
        assert!(region.is_freed());
        assert_eq!(region.with(|b| b.len()), None);
        assert!(matches!(ram.pin(a, 1), Err(MemError::Unmapped { .. })));
        assert!(ram.read(a, &mut [0u8; 1]).is_err());
    }

    #[test]
    fn a_check_waits_for_no_access_in_progress_and_fails_once_freed() {
        let ram = Arc::new(HostRam::new());
        let a = ram.alloc(4096).unwrap();
        assert_eq!(ram.check(a, 4096), Ok(()));
        assert!(ram.check(a.checked_add(4000).unwrap(), 200).is_err());
        // Another thread holds the region's lock (as a peer's copy out of
        // it does) until told to let go; the check answers meanwhile.
        let (held, let_go) = (std::sync::mpsc::channel(), std::sync::mpsc::channel());
        let holder = {
            let (ram, held, let_go) = (ram.clone(), held.0, let_go.1);
            std::thread::spawn(move || {
                ram.with_region(a, 4096, |_| {
                    held.send(()).unwrap();
                    let_go.recv().unwrap();
                })
                .unwrap();
            })
        };
        held.1.recv().unwrap();
        let (done, answered) = std::sync::mpsc::channel();
        let checker = {
            let ram = ram.clone();
            std::thread::spawn(move || done.send(ram.check(a, 8)).unwrap())
        };
        let answer = answered.recv_timeout(std::time::Duration::from_secs(10));
        let_go.0.send(()).unwrap();
        holder.join().unwrap();
        checker.join().unwrap();
        assert_eq!(answer, Ok(Ok(())), "checked while the lock was held");
        // A region freed after a thread noted it: the note is not trusted.
        let b = ram.alloc(4096).unwrap();
        assert_eq!(ram.check(b, 1), Ok(()));
        let old = ram.regions.load();
        ram.free(b).unwrap();
        assert!(!old.get(&b.get()).unwrap().is_live());
        assert!(matches!(ram.check(b, 1), Err(MemError::Unmapped { .. })));
    }

    #[test]
    fn zero_and_huge_allocations_fail() {
        let ram = HostRam::new();
        assert_eq!(ram.alloc(0), Err(MemError::BadSize(0)));
        assert!(ram.alloc(1 << 40).is_err());
    }
}
