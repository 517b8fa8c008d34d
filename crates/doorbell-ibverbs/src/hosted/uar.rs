//! The UAR pages a hosted provider maps, read back.
//!
//! The command fd is a memfd: libmlx5 maps its pages as its UARs (page `i`
//! at page offset `i`, or `0x300 + i` with MLX5_SHUT_UP_BF) and stores its
//! doorbells and BlueFlame copies there. This library maps the same pages,
//! so that after the provider's `post_send` it can read back what was
//! stored in the QP's register, hand it to the device as the MMIO writes
//! they were (an 8-byte doorbell, or 64-byte BlueFlame chunks, at the half
//! that was used) and clear the register for the next one. libmlx5 never
//! reads its UAR pages, as no program reads a device register it writes.

#![allow(unsafe_code)]

use core::ffi::c_int;
use std::os::fd::RawFd;

use doorbell_layout::uar::{BF_CHUNK, DOORBELL_LEN};

/// Bytes of the command fd (sparse): the UAR pages libmlx5 maps are at
/// page offsets below 0x700 (regular 0.., non-cached 0x300.., the clock
/// pages 0x500 and 0x700 are not advertised, dynamic 0x600..).
pub(crate) const CMD_FD_BYTES: usize = 0x700 * 4096;
/// Page offset of the non-cached mapping of UAR page 0.
const NC_PAGES: usize = 0x300;
const PAGE: usize = 4096;

/// One store read back from a register half.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Store {
    /// An 8-byte doorbell: the control segment's first 8 bytes.
    Doorbell([u8; DOORBELL_LEN]),
    /// A BlueFlame copy: the WQE, in whole 64-byte chunks.
    BlueFlame(Vec<u8>),
}

/// The command fd's pages, mapped in this process.
pub(crate) struct UarPages {
    base: *mut u8,
}

// SAFETY: the mapping is shared memory that lives as long as this object;
// accesses go through volatile reads and writes of its bytes.
unsafe impl Send for UarPages {}
// SAFETY: as above.
unsafe impl Sync for UarPages {}

impl UarPages {
    /// Maps the command fd `fd` (of [`CMD_FD_BYTES`]).
    pub(crate) fn map(fd: RawFd) -> Result<Self, c_int> {
        // SAFETY: a new shared mapping of our own memfd, of its size; the
        // kernel chooses the address.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                CMD_FD_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(crate::boundary::errno().max(1));
        }
        Ok(Self { base: p.cast() })
    }

    /// Takes the store of QP `qpn` from the register at byte `reg` of UAR
    /// page `page`, whose halves are `half` bytes: the first half that
    /// holds one (in the cached or the non-cached mapping), as the offset
    /// into the page it was made at and what it was. A half that holds
    /// another QP's store, or a copy not yet whole, is left alone.
    pub(crate) fn take(
        &self,
        page: usize,
        reg: usize,
        half: usize,
        qpn: u32,
    ) -> Option<(usize, Store)> {
        for at in [page * PAGE, (NC_PAGES + page) * PAGE] {
            for h in [0, half] {
                let off = reg + h;
                if off + half > PAGE || at + PAGE > CMD_FD_BYTES {
                    return None;
                }
                if let Some(s) = self.take_at(at + off, half, qpn) {
                    return Some((off, s));
                }
            }
        }
        None
    }

    fn take_at(&self, at: usize, len: usize, qpn: u32) -> Option<Store> {
        let mut b = vec![0u8; len];
        for (i, v) in b.iter_mut().enumerate() {
            // SAFETY: `at + len` is inside the mapping (checked by the
            // caller); the provider stores there from other threads, so
            // each byte is read once, volatile.
            *v = unsafe { self.base.add(at + i).read_volatile() };
        }
        let used = b.iter().rposition(|&x| x != 0)? + 1;
        // The control segment: QPN in bytes 4..7, DS in byte 7's low bits.
        let ctrl_qpn = u32::from_be_bytes([0, b[4], b[5], b[6]]);
        if ctrl_qpn != qpn & 0x00ff_ffff {
            return None;
        }
        let store = if used <= DOORBELL_LEN {
            let mut d = [0u8; DOORBELL_LEN];
            d.copy_from_slice(&b[..DOORBELL_LEN]);
            Store::Doorbell(d)
        } else {
            let ds = usize::from(b[7] & 0x3f);
            let whole = (ds * 16).div_ceil(BF_CHUNK) * BF_CHUNK;
            if ds == 0 || whole > len || used > whole {
                return None;
            }
            b.truncate(whole);
            Store::BlueFlame(b)
        };
        for i in 0..len {
            // SAFETY: as above; the register is cleared for the next store.
            unsafe { self.base.add(at + i).write_volatile(0) };
        }
        Some(store)
    }
}

impl Drop for UarPages {
    fn drop(&mut self) {
        // SAFETY: the mapping this object made, unmapped once.
        unsafe { libc::munmap(self.base.cast(), CMD_FD_BYTES) };
    }
}
