//! Host memory that is the process's own: bus addresses are the process's
//! virtual addresses, and registration pins the application's buffers in
//! place, with no copy and no shadow buffer.
//!
//! # Model
//! [`ProcessMemory`] implements [`HostMemory`] over two kinds of range:
//!
//! - **Allocations** it made itself ([`HostMemory::alloc`]): anonymous,
//!   page-aligned, zeroed mappings (`memmap2`), for the provider's queue
//!   buffers and doorbell-record pages. They live until
//!   [`HostMemory::free`], which refuses while they are pinned, so reads
//!   and writes copy straight in and out of them, each under the
//!   allocation's lock, in safe code.
//!   [`HostMemory::adopt`] makes a caller's `Vec<u8>` such an allocation,
//!   in place (its address is the vector's), and
//!   [`HostMemory::release`] gives it back.
//! - **Granted ranges**: memory it does not own, which a caller handed over
//!   with [`ProcessMemory::grant`] (`ibv_reg_mr` on a C application's
//!   buffer). The application may unmap them at any time, so no access may
//!   fault the process: each is a copy whose page faults are caught (the
//!   `guard` module: one instruction a SIGSEGV/SIGBUS handler resumes
//!   past), or, where that cannot be used or [`ProcessMemory::through_kernel`]
//!   asked, goes through the kernel (`process_vm_readv`/`writev` on our own
//!   pid, in the `vm` module). A page that is gone fails the access with
//!   EFAULT. The device turns that error into a protection error CQE, as
//!   hardware reports an access to an invalidated MR. `guard` and `vm` hold
//!   the only `unsafe` here.
//!   [`HostMemory::pin`] of anything else fails: safe code can never make
//!   the NIC write memory that Rust references point into.
//!
//! An address that is in neither is refused, so the NIC reaches only what
//! host software allocated or registered (DESIGN invariant 6).
//!
//! # Guarantees
//! - No access panics or raises a signal, whatever the application did to
//!   its memory; each fails with [`MemError::Unmapped`] instead.
//! - An access is allowed only wholly inside one allocation, or one range
//!   that is both granted and pinned.
//! - Pinning checks that every page of the range is mapped (EFAULT, as the
//!   kernel's `ib_umem_get` answers, becomes [`MemError::Unmapped`]).
//!
//! # Limits
//! - A write into a pinned range that the application unmaps half-way fails
//!   after writing the bytes before the hole (a device's DMA would too).
//! - Pinning does not check that the pages are writable; a write to a
//!   read-only page fails when it happens.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[allow(unsafe_code)]
mod guard;
#[allow(unsafe_code)]
mod vm;

use std::cell::RefCell;
use std::sync::Arc;

/// The lock the guarded copy's handlers are installed under, held (for
/// the runtime's fork handlers); nothing where there is no guarded copy.
pub(crate) fn hold_for_fork() -> ForkHeld {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    return ForkHeld {
        _held: guard::hold_for_fork(),
    };
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    ForkHeld { _held: () }
}

/// What [`hold_for_fork`] holds.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(crate) struct ForkHeld {
    _held: std::sync::MutexGuard<'static, ()>,
}
/// What [`hold_for_fork`] holds.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub(crate) struct ForkHeld {
    _held: (),
}

use doorbell_host::{
    Allocation, CowMap, HostMemory, MemError, NotFreed, PAGE_SIZE, Recent, page_list,
};
use doorbell_types::HostAddr;
use memmap2::MmapMut;

/// Largest single allocation (1 GiB), as for `HostRam`.
const MAX_ALLOC: u64 = 1 << 30;

/// What an allocation's bytes live in.
enum Backing {
    /// An anonymous mapping of our own.
    Map(MmapMut),
    /// A caller's buffer, adopted in place.
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Backing::Map(m) => &mut m[..],
            Backing::Owned(v) => &mut v[..],
        }
    }
}

/// One allocation of our own (as `HostRam`'s regions, decision record
/// 0031).
type Alloc = Allocation<Backing>;

thread_local! {
    /// The allocations this thread reached lately, in any `ProcessMemory`
    /// ([`ProcessMemory::with_alloc`]).
    static RECENT: RefCell<Recent<Arc<Alloc>>> = const { RefCell::new(Recent::new()) };
    /// The pinned ranges this thread reached lately, in any
    /// `ProcessMemory` ([`ProcessMemory::in_pinned`]), each noted under the
    /// stamps of the allocation map and the pinned map together: a note
    /// says that the range is pinned and that no allocation overlaps it,
    /// which holds while neither map changes.
    static PINNED: RefCell<Recent<(), (u64, u64)>> = const { RefCell::new(Recent::new()) };
}

/// The process's own memory as host memory. See the module docs.
///
/// The three maps are read without a lock and copied on change
/// ([`CowMap`]): every access reads them, and only allocation,
/// registration and their undoing change them.
#[derive(Default)]
pub struct ProcessMemory {
    /// Granted ranges are copied through the kernel even where a guarded
    /// copy could be used.
    kernel_only: bool,
    allocs: CowMap<u64, Arc<Alloc>>,
    /// Pinned ranges outside the allocations: `(start, len)` → pins.
    pinned: CowMap<(u64, u64), u32>,
    /// Ranges handed over by [`ProcessMemory::grant`]: `(start, len)` →
    /// grants.
    granted: CowMap<(u64, u64), u32>,
}

fn unmapped(addr: HostAddr, len: usize) -> MemError {
    MemError::Unmapped { addr, len }
}

impl ProcessMemory {
    /// Memory with no allocations and no pins.
    pub fn new() -> Self {
        Self::default()
    }

    /// Memory with no allocations and no pins, whose granted ranges are
    /// always copied through the kernel (`process_vm_readv`/`writev`): for
    /// a program that installs SIGSEGV or SIGBUS handlers of its own that
    /// do not hand on faults they did not cause.
    pub fn through_kernel() -> Self {
        Self {
            kernel_only: true,
            ..Self::default()
        }
    }

    fn path(&self) -> vm::Path {
        if self.kernel_only {
            vm::Path::Kernel
        } else {
            vm::Path::Direct
        }
    }

    /// Number of live allocations.
    pub fn alloc_count(&self) -> usize {
        self.allocs.load().len()
    }

    fn insert(&self, base: u64, len: u64, backing: Backing) -> HostAddr {
        let al = Arc::new(Alloc::new(len, backing));
        self.allocs.update(|m| m.insert(base, al));
        HostAddr::new(base)
    }

    fn remove(&self, addr: HostAddr) -> Result<Backing, MemError> {
        self.allocs.try_update(|allocs| {
            let al = allocs
                .get(&addr.get())
                .ok_or(MemError::NotAllocated(addr))?;
            let backing = al.free().map_err(|e| match e {
                NotFreed::Pinned(pins) => MemError::Pinned(addr, pins),
                NotFreed::Gone => MemError::NotAllocated(addr),
            })?;
            allocs.remove(&addr.get());
            Ok(backing)
        })
    }

    /// True if one granted range holds all of `[addr, addr + len)`.
    fn is_granted(&self, addr: HostAddr, len: u64) -> bool {
        let a = addr.get();
        let Some(end) = a.checked_add(len) else {
            return false;
        };
        self.granted
            .load()
            .range(..=(a, u64::MAX))
            .any(|(&(start, n), _)| end <= start.saturating_add(n))
    }

    /// Withdraws one grant of exactly `[addr, addr + len)` made by
    /// [`ProcessMemory::grant`]. A range still pinned stays reachable until
    /// it is unpinned (as a registration outlives nothing: the driver unpins
    /// before it revokes).
    pub fn revoke(&self, addr: HostAddr, len: u64) -> Result<(), MemError> {
        self.granted.try_update(|g| {
            let n = g
                .get_mut(&(addr.get(), len))
                .ok_or(MemError::NotPinned { addr, len })?;
            *n -= 1;
            if *n == 0 {
                g.remove(&(addr.get(), len));
            }
            Ok(())
        })
    }

    /// Number of pinned ranges outside the allocations.
    pub fn pinned_count(&self) -> usize {
        self.pinned.load().len()
    }

    /// Runs `f` on the bytes of `[addr, addr + len)` if an allocation
    /// holds all of them, under that allocation's lock; `None` if none does.
    fn with_alloc<R>(
        &self,
        addr: HostAddr,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        self.allocs.with_range(
            &RECENT,
            addr.get(),
            len as u64,
            |al| al.len(),
            |al, off| {
                let off = usize::try_from(off).ok()?;
                al.with(|b| b.bytes().get_mut(off..off.checked_add(len)?).map(f))?
            },
        )?
    }

    /// True if this thread noted lately, with both maps as they stand,
    /// that `[addr, addr + len)` lies in a pinned range that no
    /// allocation overlaps: [`Self::with_alloc`] would find nothing and
    /// [`Self::in_pinned`] would pass. An access to a registered buffer
    /// then costs two stamp loads and a look at a few notes, not two
    /// lookups in the maps.
    fn noted_pinned(&self, addr: HostAddr, len: usize) -> bool {
        let stamps = (self.allocs.stamp(), self.pinned.stamp());
        PINNED
            .try_with(|n| {
                n.try_borrow()
                    .is_ok_and(|n| n.find(stamps, addr.get(), len as u64).is_some())
            })
            .unwrap_or(false)
    }

    /// Checks that one pinned range holds all of `[addr, addr + len)`, and
    /// notes that range for [`Self::noted_pinned`] if no allocation
    /// overlaps it. The stamps are read before the maps, so a change in
    /// between makes the note stale, never wrong.
    fn in_pinned(&self, addr: HostAddr, len: usize) -> Result<(), MemError> {
        let stamps = (self.allocs.stamp(), self.pinned.stamp());
        let a = addr.get();
        let end = a
            .checked_add(len as u64)
            .ok_or_else(|| unmapped(addr, len))?;
        let (start, n) = self
            .pinned
            .load()
            .range(..=(a, u64::MAX))
            .rev()
            .map(|(&r, _)| r)
            .find(|&(start, n)| end <= start.saturating_add(n))
            .ok_or_else(|| unmapped(addr, len))?;
        let range_end = start.saturating_add(n);
        let overlaps = self
            .allocs
            .load()
            .range(..range_end)
            .next_back()
            .is_some_and(|(&base, al)| base.saturating_add(al.len()) > start);
        if !overlaps {
            let _ = PINNED.try_with(|notes| {
                if let Ok(mut notes) = notes.try_borrow_mut() {
                    notes.put(stamps, start, n, ());
                }
            });
        }
        Ok(())
    }

    /// Checks that every page of `[addr, addr + len)` is mapped readable,
    /// by reading one byte of each on `path`: through the kernel at a
    /// registration (no hot path, and it runs in whatever thread of the
    /// program registers), as a read would for a check on a NIC's path (a
    /// payload the NIC leaves in memory is checked there, each packet).
    fn probe(addr: HostAddr, len: u64, path: vm::Path) -> Result<(), MemError> {
        let err = || unmapped(addr, len as usize);
        let end = addr.get().checked_add(len.max(1)).ok_or_else(err)?;
        let mut at = addr.get();
        let mut byte = [0u8; 1];
        while at < end {
            vm::read(at, &mut byte, path).map_err(|_| err())?;
            at = (at & !(PAGE_SIZE - 1)).saturating_add(PAGE_SIZE);
        }
        Ok(())
    }
}

impl HostMemory for ProcessMemory {
    fn read(&self, addr: HostAddr, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len();
        if !self.noted_pinned(addr, len) {
            if let Some(()) = self.with_alloc(addr, len, |src| buf.copy_from_slice(src)) {
                return Ok(());
            }
            self.in_pinned(addr, len)?;
        }
        vm::read(addr.get(), buf, self.path()).map_err(|_| unmapped(addr, len))
    }

    fn read_into(
        &self,
        addr: HostAddr,
        len: usize,
        pieces: &mut dyn Iterator<Item = &mut [u8]>,
    ) -> Result<(), MemError> {
        let uneven = || unmapped(addr, len);
        if !self.noted_pinned(addr, len) {
            if let Some(r) = self.with_alloc(addr, len, |src| doorbell_host::spread(src, pieces)) {
                return r.ok_or_else(uneven);
            }
            self.in_pinned(addr, len)?;
        }
        // The way each piece is copied, settled once for them all.
        let path = vm::settle(self.path());
        let mut done = 0usize;
        for p in pieces {
            let end = done.checked_add(p.len()).filter(|&e| e <= len);
            let (Some(end), Some(at)) = (end, addr.get().checked_add(done as u64)) else {
                return Err(uneven());
            };
            vm::read(at, p, path).map_err(|_| unmapped(addr, len))?;
            done = end;
        }
        if done == len { Ok(()) } else { Err(uneven()) }
    }

    fn write(&self, addr: HostAddr, data: &[u8]) -> Result<(), MemError> {
        if !self.noted_pinned(addr, data.len()) {
            if let Some(()) = self.with_alloc(addr, data.len(), |dst| dst.copy_from_slice(data)) {
                return Ok(());
            }
            self.in_pinned(addr, data.len())?;
        }
        vm::write(addr.get(), data, self.path()).map_err(|_| unmapped(addr, data.len()))
    }

    fn alloc(&self, len: u64) -> Result<HostAddr, MemError> {
        if len == 0 || len > MAX_ALLOC {
            return Err(MemError::BadSize(len));
        }
        let size = usize::try_from(len.div_ceil(PAGE_SIZE) * PAGE_SIZE)
            .map_err(|_| MemError::BadSize(len))?;
        let map = MmapMut::map_anon(size).map_err(|_| MemError::BadSize(len))?;
        let base = map.as_ptr() as u64;
        Ok(self.insert(base, len, Backing::Map(map)))
    }

    fn adopt(&self, buf: Vec<u8>) -> Result<HostAddr, (MemError, Vec<u8>)> {
        let len = buf.len() as u64;
        if len == 0 || len > MAX_ALLOC {
            return Err((MemError::BadSize(len), buf));
        }
        // The address is only a key: the bytes are reached through the
        // vector, never through it.
        let base = buf.as_ptr() as u64;
        Ok(self.insert(base, len, Backing::Owned(buf)))
    }

    fn release(&self, addr: HostAddr) -> Result<Vec<u8>, MemError> {
        match self.remove(addr)? {
            Backing::Owned(v) => Ok(v),
            Backing::Map(m) => {
                // An allocation of our own: give its bytes as a vector.
                Ok(m[..].to_vec())
            }
        }
    }

    fn free(&self, addr: HostAddr) -> Result<(), MemError> {
        // Dropping the map unmaps it; nothing else refers to it.
        self.remove(addr).map(drop)
    }

    fn pin(&self, addr: HostAddr, len: u64) -> Result<Vec<HostAddr>, MemError> {
        let pages = page_list(addr, len).ok_or_else(|| unmapped(addr, len as usize))?;
        if let Some((&base, al)) = self.allocs.load().range(..=addr.get()).next_back()
            && addr.get().saturating_add(len) <= base + al.len()
            && al.pin()
        {
            return Ok(pages);
        }
        if !self.is_granted(addr, len) {
            return Err(unmapped(addr, len as usize));
        }
        // A registration is where a program that replaced our fault
        // handlers is noticed (a system call is cheap here).
        vm::check_guard();
        Self::probe(addr, len, vm::Path::Kernel)?;
        self.pinned
            .update(|p| *p.entry((addr.get(), len)).or_insert(0) += 1);
        Ok(pages)
    }

    fn unpin(&self, addr: HostAddr, len: u64) -> Result<(), MemError> {
        let not_pinned = MemError::NotPinned { addr, len };
        let key = (addr.get(), len);
        if self.pinned.load().contains_key(&key) {
            // Checked again under the change: another unpin may have come
            // first.
            let done = self.pinned.try_update(|pinned| {
                let n = pinned.get_mut(&key).ok_or(())?;
                *n -= 1;
                if *n == 0 {
                    pinned.remove(&key);
                }
                Ok::<(), ()>(())
            });
            if done.is_ok() {
                return Ok(());
            }
        }
        let allocs = self.allocs.load();
        match allocs.range(..=addr.get()).next_back() {
            Some((&base, al))
                if addr.get().saturating_add(len) <= base + al.len() && al.unpin() =>
            {
                Ok(())
            }
            _ => Err(not_pinned),
        }
    }

    fn check(&self, addr: HostAddr, len: usize) -> Result<(), MemError> {
        if let Some(()) = self.with_alloc(addr, len, |_| ()) {
            return Ok(());
        }
        self.in_pinned(addr, len)?;
        Self::probe(addr, len as u64, self.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr_of(b: &[u8]) -> HostAddr {
        HostAddr::new(b.as_ptr() as u64)
    }

    #[test]
    fn allocations_are_zeroed_page_aligned_and_bounded() {
        let m = ProcessMemory::new();
        let a = m.alloc(5000).unwrap();
        assert_eq!(a.offset_in(PAGE_SIZE), 0);
        let mut b = [9u8; 8];
        m.read(a.checked_add(4992).unwrap(), &mut b).unwrap();
        assert_eq!(b, [0; 8]);
        m.write(a.checked_add(10).unwrap(), &[1, 2, 3]).unwrap();
        m.read(a.checked_add(9).unwrap(), &mut b[..5]).unwrap();
        assert_eq!(&b[..5], &[0, 1, 2, 3, 0]);
        // One byte past the end is refused, even though the page goes on.
        assert!(m.read(a.checked_add(4993).unwrap(), &mut b).is_err());
        assert!(m.write(a.checked_add(4999).unwrap(), &[0, 0]).is_err());
        m.free(a).unwrap();
        assert!(m.read(a, &mut b).is_err());
        assert_eq!(m.free(a), Err(MemError::NotAllocated(a)));
    }

    #[test]
    fn a_pinned_allocation_cannot_be_freed() {
        let m = ProcessMemory::new();
        let a = m.alloc(3 * 4096).unwrap();
        let pas = m.pin(a.checked_add(100).unwrap(), 8192).unwrap();
        assert_eq!(pas.len(), 3);
        assert_eq!(pas[1].get(), a.get() + 4096);
        assert_eq!(m.free(a), Err(MemError::Pinned(a, 1)));
        m.unpin(a.checked_add(100).unwrap(), 8192).unwrap();
        m.free(a).unwrap();
    }

    #[test]
    fn an_allocation_freed_while_a_map_holds_it_is_unmapped_through_that_map() {
        let m = ProcessMemory::new();
        let a = m.alloc(4096).unwrap();
        let old = m.allocs.load();
        m.free(a).unwrap();
        assert!(old.get(&a.get()).unwrap().is_freed());
        assert!(m.read(a, &mut [0u8; 1]).is_err());
        assert!(m.pin(a, 1).is_err());
        assert_eq!(m.alloc_count(), 0);
    }

    #[test]
    fn pins_from_two_threads_are_all_counted() {
        let m = ProcessMemory::new();
        let buf = vec![0u8; 8192];
        let at = addr_of(&buf);
        grant(&m, at, 8192);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..200 {
                        m.pin(at, 8192).unwrap();
                    }
                });
            }
        });
        for i in 0..400 {
            m.unpin(at, 8192)
                .unwrap_or_else(|e| panic!("unpin {i}: {e}"));
        }
        assert!(m.unpin(at, 8192).is_err(), "no pin left");
        assert_eq!(m.pinned_count(), 0);
        m.revoke(at, 8192).unwrap();
    }

    /// Hands `len` bytes at `at` to `m`.
    #[allow(unsafe_code)]
    fn grant(m: &ProcessMemory, at: HostAddr, len: u64) {
        // SAFETY: every caller passes memory it allocated for the test and
        // reads or writes only through `m` until the test has revoked it
        // (or the memory is gone, which is the case under test).
        unsafe { m.grant(at, len) }
    }

    /// Both ways of reaching granted memory.
    fn both() -> [ProcessMemory; 2] {
        [ProcessMemory::new(), ProcessMemory::through_kernel()]
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[test]
    #[allow(unsafe_code)]
    fn a_path_settled_for_many_copies_is_guarded_only_where_faults_are_caught() {
        use vm::{Path, settle};
        assert_eq!(settle(Path::Kernel), Path::Kernel);
        assert_eq!(settle(Path::Guarded), Path::Guarded);
        // The test's thread takes SIGSEGV and SIGBUS.
        assert_eq!(settle(Path::Direct), Path::Guarded);
        // A thread that blocks them cannot have a fault caught: its copies
        // go through the kernel.
        let blocked = std::thread::spawn(|| {
            let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
            // SAFETY: a signal set built in a local and handed to
            // pthread_sigmask, which changes only this thread's mask.
            unsafe {
                libc::sigemptyset(set.as_mut_ptr());
                libc::sigaddset(set.as_mut_ptr(), libc::SIGSEGV);
                assert_eq!(
                    libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()),
                    0
                );
            }
            settle(Path::Direct)
        });
        assert_eq!(blocked.join().unwrap(), Path::Kernel);
    }

    #[test]
    fn a_read_into_pieces_reads_allocations_and_pinned_memory_alike() {
        let pattern: Vec<u8> = (0..6000u32).map(|i| (i % 241) as u8).collect();
        for m in both() {
            let a = m.alloc(6000).unwrap();
            m.write(a, &pattern).unwrap();
            let buf = pattern.clone();
            let at = addr_of(&buf);
            grant(&m, at, buf.len() as u64);
            m.pin(at, buf.len() as u64).unwrap();
            for base in [a, at] {
                let mut got = [vec![0u8; 1000], vec![0u8; 4000], vec![0u8; 1000]];
                let mut pieces = got.iter_mut().map(|v| &mut v[..]);
                m.read_into(base, 6000, &mut pieces).unwrap();
                assert!(got.concat() == pattern);
                // Pieces that do not add up to the length fail.
                let mut short = [vec![0u8; 1000]];
                let mut pieces = short.iter_mut().map(|v| &mut v[..]);
                assert!(m.read_into(base, 6000, &mut pieces).is_err());
                let mut long = [vec![0u8; 3000], vec![0u8; 3001]];
                let mut pieces = long.iter_mut().map(|v| &mut v[..]);
                assert!(m.read_into(base, 6000, &mut pieces).is_err());
            }
            m.unpin(at, buf.len() as u64).unwrap();
            let mut got = [vec![0u8; 10]];
            let mut pieces = got.iter_mut().map(|v| &mut v[..]);
            assert!(
                m.read_into(at, 10, &mut pieces).is_err(),
                "no longer pinned"
            );
        }
    }

    #[test]
    fn a_granted_buffer_is_registered_in_place() {
        for m in both() {
            granted_in_place(&m);
        }
    }

    fn granted_in_place(m: &ProcessMemory) {
        let mut buf = vec![0u8; 10_000];
        buf[..4].copy_from_slice(b"ping");
        let at = addr_of(&buf);
        // Not reachable before registration, nor pinnable before a grant.
        let mut b = [0u8; 4];
        assert!(m.read(at, &mut b).is_err());
        assert!(matches!(m.pin(at, 64), Err(MemError::Unmapped { .. })));
        grant(m, at, buf.len() as u64);
        assert!(m.read(at, &mut b).is_err(), "granted is not yet pinned");
        let pages = m.pin(at, buf.len() as u64).unwrap();
        assert_eq!(pages[0].get(), at.get() & !(PAGE_SIZE - 1));
        m.read(at, &mut b).unwrap();
        assert_eq!(&b, b"ping");
        m.write(at.checked_add(9_996).unwrap(), b"pong").unwrap();
        assert!(m.write(at.checked_add(9_997).unwrap(), b"pong").is_err());
        m.unpin(at, buf.len() as u64).unwrap();
        assert!(m.read(at, &mut b).is_err());
        assert_eq!(
            &buf[9_996..],
            b"pong",
            "the write went to the caller's own bytes"
        );
        assert!(matches!(
            m.unpin(at, buf.len() as u64),
            Err(MemError::NotPinned { .. })
        ));
    }

    #[test]
    fn what_a_thread_noted_of_a_pinned_range_holds_only_while_the_maps_stand() {
        let m = ProcessMemory::new();
        let buf = vec![0u8; 8192];
        let at = addr_of(&buf);
        let half = at.checked_add(4096).unwrap();
        grant(&m, at, 8192);
        m.pin(at, 8192).unwrap();
        m.pin(half, 4096).unwrap();
        // Noted here, found there.
        m.write(at.checked_add(100).unwrap(), b"one").unwrap();
        m.write(at.checked_add(200).unwrap(), b"two").unwrap();
        // An allocation made meanwhile changes one map: the note is stale,
        // and the range is looked up again.
        let a = m.alloc(4096).unwrap();
        m.write(at.checked_add(300).unwrap(), b"three").unwrap();
        m.free(a).unwrap();
        // The whole range unpinned: only the half still pinned is reached,
        // whatever this thread noted of the whole.
        m.unpin(at, 8192).unwrap();
        let mut b = [0u8; 3];
        assert!(m.read(at.checked_add(100).unwrap(), &mut b).is_err());
        assert!(m.write(at.checked_add(4095).unwrap(), b"xy").is_err());
        m.write(half.checked_add(1).unwrap(), b"four").unwrap();
        m.unpin(half, 4096).unwrap();
        assert!(m.write(half.checked_add(1).unwrap(), b"five").is_err());
        assert_eq!(&buf[100..103], b"one");
        assert_eq!(&buf[200..203], b"two");
        assert_eq!(&buf[300..305], b"three");
        assert_eq!(&buf[4097..4101], b"four");
        m.revoke(at, 8192).unwrap();
    }

    #[test]
    fn memory_unmapped_under_a_registration_fails_instead_of_crashing() {
        for m in both() {
            unmapped_fails(&m);
        }
    }

    /// Makes `map`'s pages inaccessible, as if they were unmapped, while
    /// keeping the addresses reserved: another test thread could map
    /// something new into a hole, and a test must never write there.
    #[allow(unsafe_code)]
    fn take_away(map: &MmapMut) {
        // SAFETY: the whole of a mapping this test owns; no reference into
        // it is used afterwards.
        let rc = unsafe {
            libc::mprotect(
                map.as_ptr() as *mut libc::c_void,
                map.len(),
                libc::PROT_NONE,
            )
        };
        assert_eq!(rc, 0);
    }

    fn unmapped_fails(m: &ProcessMemory) {
        let map = MmapMut::map_anon(2 * PAGE_SIZE as usize).unwrap();
        let at = HostAddr::new(map.as_ptr() as u64);
        grant(m, at, 2 * PAGE_SIZE);
        m.pin(at, 2 * PAGE_SIZE).unwrap();
        m.write(at, b"still here").unwrap();
        // The application takes its buffer away while it is registered.
        take_away(&map);
        let mut b = [0u8; 10];
        assert!(matches!(m.read(at, &mut b), Err(MemError::Unmapped { .. })));
        assert!(m.write(at, b"gone").is_err());
        assert!(m.check(at, 10).is_err());
        m.unpin(at, 2 * PAGE_SIZE).unwrap();
    }

    #[test]
    fn an_adopted_vector_is_used_in_place_and_given_back() {
        let m = ProcessMemory::new();
        let v = b"abcdefgh".to_vec();
        let at_vec = v.as_ptr() as u64;
        let at = m.adopt(v).unwrap();
        assert_eq!(at.get(), at_vec, "in place: the address is the vector's");
        m.pin(at, 8).unwrap();
        m.write(at.checked_add(2).unwrap(), b"CD").unwrap();
        assert_eq!(m.release(at), Err(MemError::Pinned(at, 1)));
        m.unpin(at, 8).unwrap();
        assert_eq!(m.release(at).unwrap(), b"abCDefgh");
        assert_eq!(m.alloc_count(), 0);
    }

    #[test]
    fn pinning_unmapped_memory_fails() {
        let m = ProcessMemory::new();
        let map = MmapMut::map_anon(PAGE_SIZE as usize).unwrap();
        let at = HostAddr::new(map.as_ptr() as u64);
        grant(&m, at, PAGE_SIZE);
        take_away(&map);
        assert!(matches!(m.pin(at, 64), Err(MemError::Unmapped { .. })));
        assert_eq!(m.pinned_count(), 0);
        assert!(m.pin(HostAddr::new(u64::MAX - 10), 64).is_err());
    }
}
