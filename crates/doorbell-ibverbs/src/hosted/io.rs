//! Reading the driver data of a provider's command and writing its
//! response, as the kernel copies them: no further than the lengths the
//! provider gave, so a shorter struct (an older provider) is fine.

#![allow(unsafe_code)]

use core::ffi::{c_int, c_void};
use core::mem::size_of;

use doorbell_host::PAGE_SIZE;
use doorbell_types::HostAddr;
use doorbell_verbs::VerbsError;
use libc::EINVAL;

/// Reads a `T` at byte `at` of a request of `len` bytes; bytes the request
/// does not have read as zero.
pub(crate) fn read_req<T: Default + Copy>(
    cmd: *const c_void,
    at: usize,
    len: usize,
) -> Result<T, c_int> {
    if cmd.is_null() || len < at {
        return Err(EINVAL);
    }
    let mut t = T::default();
    let n = (len - at).min(size_of::<T>());
    // SAFETY: the provider's request has `len` bytes; n of them from `at`
    // are copied into a plain-data T (uAPI structs of integers).
    unsafe {
        core::ptr::copy_nonoverlapping(
            cmd.cast::<u8>().add(at),
            core::ptr::from_mut(&mut t).cast::<u8>(),
            n,
        );
    }
    Ok(t)
}

/// Writes `t` at byte `at` of a response of `len` bytes, truncated to it.
pub(crate) fn write_resp<T>(resp: *mut c_void, at: usize, len: usize, t: &T) -> Result<(), c_int> {
    if resp.is_null() {
        return Err(EINVAL);
    }
    let n = len.saturating_sub(at).min(size_of::<T>());
    // SAFETY: the provider's response has room for `len` bytes; n of them
    // from `at` are written from a plain-data T.
    unsafe {
        core::ptr::copy_nonoverlapping(
            core::ptr::from_ref(t).cast::<u8>(),
            resp.cast::<u8>().add(at),
            n,
        );
    }
    Ok(())
}

pub(crate) fn errno(e: impl Into<VerbsError>) -> c_int {
    e.into().errno()
}

/// The page holding a doorbell record, as the driver pins it.
pub(crate) fn db_page(db: u64) -> (HostAddr, u64) {
    (HostAddr::new(db & !(PAGE_SIZE - 1)), PAGE_SIZE)
}
