//! Whether this is a child made by `fork()` since a NIC started: a count
//! of forks, raised in each child by a `pthread_atfork` handler, so that
//! the hot path compares two integers instead of asking the kernel for the
//! process id. The only `unsafe` here is registering the handler
//! (`unsafe_code` is allowed for this module alone, where `lib.rs`
//! declares it).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static GENERATION: AtomicU32 = AtomicU32::new(0);
/// Whether the handler is registered (or being): a flag, not a `Once`,
/// which a fork while another thread ran it would leave running in the
/// child.
static REGISTERED: AtomicBool = AtomicBool::new(false);

extern "C" fn child() {
    // Async-signal-safe: one atomic add.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Forks from the first call's process to this one: a value read when a
/// NIC starts differs from a later one only in a child.
pub(crate) fn generation() -> u32 {
    // A load before the swap: every NIC's hot path asks, from every thread,
    // and a swap would write the flag's line each time, for the threads to
    // take from each other.
    if !REGISTERED.load(Ordering::Acquire) && !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: registers a child handler that only adds to an atomic;
        // pthread_atfork copies the function pointer. A failure (ENOMEM)
        // leaves forks uncounted, as before the first NIC.
        let _ = unsafe { libc::pthread_atfork(None, None, Some(child)) };
    }
    GENERATION.load(Ordering::Relaxed)
}
