//! The one boundary every exported function goes through (STYLE R16).
//!
//! [`guard`] runs the Rust side of an export under `catch_unwind`. The body
//! returns `Ok(value)` or `Err(errno)`; an `Err` and a panic (as `EIO`) both
//! become the function's C error value by its [`Conv`]ention. Where the C
//! function has no error channel ([`Conv::Abort`]: `void` functions, string
//! tables) a panic aborts the process with a message: no unwinding ever
//! crosses `extern "C"`.

#![allow(unsafe_code)]

use core::ffi::c_int;
use core::sync::atomic::{AtomicU64, Ordering};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Panics [`guard`] has caught in this process.
static PANICS_CAUGHT: AtomicU64 = AtomicU64::new(0);

/// Panics [`guard`] has caught so far (each answered as `EIO`): a count
/// that only tells a caller whether any happened, so `Relaxed`.
#[cfg_attr(not(feature = "fuzzing"), allow(dead_code))]
pub(crate) fn panics_caught() -> u64 {
    PANICS_CAUGHT.load(Ordering::Relaxed)
}

/// How a C function reports failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Conv {
    /// Set `errno`, return NULL (the object constructors).
    Null,
    /// Return the errno value itself, 0 meaning success (`ibv_destroy_*`, `ibv_modify_*`, `ibv_cmd_*`).
    Errno,
    /// Set `errno`, return -1 (`ibv_query_gid`, `ibv_get_cq_event`, ...).
    MinusOne,
    /// Return minus the errno value (`_ibv_query_gid_table`).
    NegErrno,
    /// Return this fixed "unknown" value, errno untouched (`ibv_get_device_guid` → 0).
    Value(i64),
    /// No error channel: abort with a message.
    Abort,
}

/// A C return type that can carry a failure.
pub(crate) trait CRet: Sized {
    /// The failure value for `errno` under `conv`, or `None` if `conv` cannot
    /// express it for this type.
    fn fail(conv: Conv, errno: c_int) -> Option<Self>;
}

impl<T> CRet for *mut T {
    fn fail(conv: Conv, errno: c_int) -> Option<Self> {
        (conv == Conv::Null).then(|| {
            set_errno(errno);
            core::ptr::null_mut()
        })
    }
}

impl<T> CRet for *const T {
    fn fail(conv: Conv, errno: c_int) -> Option<Self> {
        (conv == Conv::Null).then(|| {
            set_errno(errno);
            core::ptr::null()
        })
    }
}

macro_rules! int_ret {
    ($($t:ty),*) => {$(
        impl CRet for $t {
            fn fail(conv: Conv, errno: c_int) -> Option<Self> {
                match conv {
                    Conv::Errno => Some(errno as $t),
                    Conv::MinusOne => {
                        set_errno(errno);
                        Some((-1i64) as $t)
                    }
                    Conv::NegErrno => Some((-(errno as i64)) as $t),
                    Conv::Value(v) => Some(v as $t),
                    Conv::Null | Conv::Abort => None,
                }
            }
        }
    )*};
}
int_ret!(i32, u32, i64, u64, isize);

impl CRet for () {
    fn fail(_conv: Conv, _errno: c_int) -> Option<Self> {
        None
    }
}

/// Runs `body` for the export `name` and turns an error or a panic into the
/// C failure value of `conv`.
pub(crate) fn guard<R: CRet>(name: &str, conv: Conv, body: impl FnOnce() -> Result<R, c_int>) -> R {
    // AssertUnwindSafe: after a panic nothing of the body's state is used
    // again by this call; the caller only gets the error value.
    let (errno, what) = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => return v,
        Ok(Err(errno)) => (errno, "failed"),
        Err(_) => {
            PANICS_CAUGHT.fetch_add(1, Ordering::Relaxed);
            (libc::EIO, "panicked")
        }
    };
    R::fail(conv, errno).unwrap_or_else(|| {
        eprintln!(
            "libibverbs.so.1 (doorbell): {name} {what} (errno {errno}) and has no way to \
             report it; aborting"
        );
        std::process::abort()
    })
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(errno: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot, a
    // valid, aligned int that lives as long as the thread.
    unsafe { *libc::__errno_location() = errno };
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> c_int {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_follow_the_convention() {
        set_errno(0);
        let p: *mut u8 = guard("t", Conv::Null, || Err(libc::EOPNOTSUPP));
        assert!(p.is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(
            guard::<i32>("t", Conv::Errno, || Err(libc::ENOSYS)),
            libc::ENOSYS
        );
        set_errno(0);
        assert_eq!(guard::<i32>("t", Conv::MinusOne, || Err(libc::EINVAL)), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            guard::<isize>("t", Conv::NegErrno, || Err(libc::EOPNOTSUPP)),
            -95
        );
        assert_eq!(guard::<u64>("t", Conv::Value(0), || Err(libc::EIO)), 0);
        assert_eq!(guard::<i32>("t", Conv::Errno, || Ok(7)), 7);
    }

    #[test]
    fn a_panic_becomes_eio() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = guard::<i32>("t", Conv::Errno, || panic!("boom"));
        std::panic::set_hook(hook);
        assert_eq!(r, libc::EIO);
    }
}
