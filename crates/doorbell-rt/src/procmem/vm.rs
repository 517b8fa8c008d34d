//! The contract under which a caller hands over a range of memory it does
//! not give to Rust ([`ProcessMemory::grant`]), and copies between a buffer
//! of ours and such a range: by the `guard` module's fault-catching copy
//! where it may be used, otherwise by `process_vm_readv(2)` /
//! `process_vm_writev(2)` on our own pid, described here.
//!
//! The kernel does the copy and checks the range against the process's
//! mappings as it goes: an unmapped page, or a read-only page for a write,
//! ends the copy with `EFAULT` instead of a signal. So an application that
//! unmaps a registered buffer while the NIC works on it gets an error, never
//! a crash. No Rust reference to the foreign range is ever made, so the
//! application may write it concurrently without a data race in Rust's
//! sense: the bytes seen are whatever the memory held, as for a device's
//! DMA. (`unsafe_code` is allowed for this module alone, where
//! `procmem.rs` declares it.)

use std::io;

use doorbell_types::HostAddr;

use super::ProcessMemory;

impl ProcessMemory {
    /// Hands `[addr, addr + len)` to this memory, so that
    /// [`HostMemory::pin`](doorbell_host::HostMemory::pin) may register it
    /// and the NIC may then read and write it. Grants nest; each is withdrawn
    /// by one [`ProcessMemory::revoke`] of the same range.
    ///
    /// # Safety
    /// Until the grant is revoked, no Rust reference may point into the
    /// range: the NIC writes it behind the compiler's back (through the
    /// kernel), which is sound only for memory Rust does not see, such as a
    /// C program's buffer that the C library registers. The range need not
    /// stay mapped: memory unmapped under a grant makes accesses fail, not
    /// crash.
    pub unsafe fn grant(&self, addr: HostAddr, len: u64) {
        self.granted
            .update(|g| *g.entry((addr.get(), len)).or_insert(0) += 1);
    }
}

/// This process's id, asked of the kernel once per fork generation (glibc
/// does not cache it, and every copy would otherwise pay a second system
/// call for it).
fn own_pid() -> libc::pid_t {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// The fork generation in the high half, the pid in the low.
    static CACHE: AtomicU64 = AtomicU64::new(u64::MAX);
    let g = crate::forks::generation();
    let c = CACHE.load(Ordering::Relaxed);
    if c != u64::MAX && (c >> 32) as u32 == g {
        return c as u32 as libc::pid_t;
    }
    // SAFETY: getpid cannot fail and touches no memory.
    let pid = unsafe { libc::getpid() };
    CACHE.store(
        (u64::from(g) << 32) | u64::from(pid as u32),
        Ordering::Relaxed,
    );
    pid
}

/// How a copy reaches memory the application owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// A plain copy whose faults are caught, where the `guard` module may
    /// be used; through the kernel where not.
    Direct,
    /// Always through the kernel.
    Kernel,
    /// A plain copy whose faults are caught, [`settle`]d for this thread:
    /// its signal mask was found fit, and is not looked at again; each
    /// copy still checks that the handlers are in.
    Guarded,
}

/// The path copies in this thread take now, asked once for many copies
/// (a run's payloads, a packet at a time): [`Path::Guarded`] where a
/// [`Path::Direct`] copy may go the guarded way, else [`Path::Kernel`].
pub(super) fn settle(path: Path) -> Path {
    if guarded(path) {
        Path::Guarded
    } else {
        Path::Kernel
    }
}

fn efault() -> io::Error {
    io::Error::from_raw_os_error(libc::EFAULT)
}

/// True if a copy on `path` may go the guarded way in this thread now.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn guarded(path: Path) -> bool {
    match path {
        Path::Direct => super::guard::usable(),
        Path::Guarded => super::guard::active(),
        Path::Kernel => false,
    }
}

/// No guarded way on other targets.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn guarded(_: Path) -> bool {
    false
}

/// Looks whether the guarded path's fault handlers are still in place (at
/// a registration; see the `guard` module).
pub(super) fn check_guard() {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    super::guard::check_installed();
}

/// Copies `buf.len()` bytes from address `addr` of this process into `buf`.
/// Fails with EFAULT for unmapped memory (or another OS error); a copy cut
/// short by a fault is an error too.
pub(super) fn read(addr: u64, buf: &mut [u8], path: Path) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    if guarded(path) {
        return guard_read(addr, buf);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, a live, exclusively borrowed buffer of
    // exactly `iov_len` bytes that the kernel writes into. `remote` is only an
    // address for the kernel to look up in our own mappings; Rust never
    // dereferences it, and the kernel fails with EFAULT where it is not
    // mapped readable. One iovec each, flags 0, as the call requires.
    let n = unsafe { libc::process_vm_readv(own_pid(), &local, 1, &remote, 1, 0) };
    done(n, buf.len())
}

/// Copies `data` to address `addr` of this process. Fails with EFAULT for
/// unmapped or read-only memory (or another OS error); a copy cut short by a
/// fault is an error, and the bytes before the fault have then been written.
pub(super) fn write(addr: u64, data: &[u8], path: Path) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    if guarded(path) {
        return guard_write(addr, data);
    }
    let local = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` describes `data`, a live buffer of exactly `iov_len`
    // bytes that the kernel only reads (the cast to *mut is what the iovec
    // type needs; process_vm_writev never writes local memory). `remote` is
    // an address the kernel looks up in our own mappings and writes through
    // its own mapping of the pages, failing with EFAULT where they are not
    // mapped writable; no Rust reference to it exists.
    let n = unsafe { libc::process_vm_writev(own_pid(), &local, 1, &remote, 1, 0) };
    done(n, data.len())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn guard_read(addr: u64, buf: &mut [u8]) -> io::Result<()> {
    super::guard::read(addr, buf).map_err(|()| efault())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn guard_write(addr: u64, data: &[u8]) -> io::Result<()> {
    super::guard::write(addr, data).map_err(|()| efault())
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn guard_read(_: u64, _: &mut [u8]) -> io::Result<()> {
    unreachable!("no guarded path on this target")
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn guard_write(_: u64, _: &[u8]) -> io::Result<()> {
    unreachable!("no guarded path on this target")
}

fn done(n: isize, want: usize) -> io::Result<()> {
    match usize::try_from(n) {
        Ok(n) if n == want => Ok(()),
        Ok(_) => Err(efault()),
        Err(_) => Err(io::Error::last_os_error()),
    }
}
