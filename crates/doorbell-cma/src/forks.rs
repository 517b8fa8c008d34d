//! The crate's process-wide locks, held across a `fork()` by the C
//! library's handlers.

/// The process-wide locks of this crate (the started services, the port
/// table), all held until dropped: for a library's `pthread_atfork`
/// prepare handler, so that a forked child never finds one held by a thread
/// it does not have. Both are leaf locks (nothing is taken or waited for
/// while either is held), so they may be taken after any other lock.
pub fn hold_for_fork() -> ForkHeld {
    ForkHeld {
        _services: crate::service::hold_services(),
        _ports: crate::ports::hold(),
    }
}

/// What [`hold_for_fork`] holds; dropping it releases every lock.
#[must_use = "the locks are released when this is dropped"]
pub struct ForkHeld {
    _services: std::sync::MutexGuard<'static, Vec<std::sync::Weak<crate::service::CmService>>>,
    _ports: std::sync::MutexGuard<'static, Option<crate::ports::Table>>,
}

impl std::fmt::Debug for ForkHeld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkHeld").finish_non_exhaustive()
    }
}

/// [`hold_for_fork`]'s lock number `which` alone (the services', then the
/// ports'), `None` past the last: for a test that holds one at a time.
#[doc(hidden)]
pub fn hold_one_for_fork(which: usize) -> Option<Box<dyn std::any::Any>> {
    match which {
        0 => Some(Box::new(crate::service::hold_services())),
        1 => Some(Box::new(crate::ports::hold())),
        _ => None,
    }
}
