//! The library's process-wide locks across `fork()` (decision record 0068).
//!
//! A `pthread_atfork` prepare handler takes every process-wide lock of the
//! library and of doorbell-cma ([`hold`]) in the forking thread and keeps
//! their guards in that thread's thread-local; the parent handler drops
//! them; the child handler (in the child's only thread, the copy of the
//! forking one, with the same thread-locals) forgets what threads it does
//! not have were doing, then drops them. So a child never finds a lock held
//! by a thread it does not have, and its first call into the library (a
//! device list, a CM id, an event) does not hang. The process's NIC does the
//! same for its own locks (`doorbell_rt`'s `process/os.rs`).
//!
//! Every one of these locks is a leaf: while one is held, no other lock is
//! taken, nothing is waited for (no device command, no round trip to the
//! NIC's thread, no event) and nothing is dropped that would. So the order
//! below cannot deadlock against any thread, and neither can the runtime's
//! handler, which takes its state and spare stores before this one runs
//! (this one is registered first, when the library is loaded, and
//! prepare handlers run in reverse order of registration).
//!
//! The only `unsafe` here is registering the handlers (`unsafe_code` is
//! allowed for this module alone, as for the FFI modules).

#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{MutexGuard, Once};

use crate::events::{ROUTER, Router};
use crate::handles::Kind;

/// Every process-wide lock of the library and of doorbell-cma, held, in
/// the order they are taken (fields drop in the same order).
pub(crate) struct Held {
    rdma_cm: crate::rdma_cm::ForkHeld,
    _watch: MutexGuard<'static, crate::stats::Watch>,
    _hosted: crate::hosted::ForkHeld,
    _router: MutexGuard<'static, Router>,
    _live: MutexGuard<'static, BTreeMap<usize, Kind>>,
    _cma: doorbell_cma::ForkHold,
}

/// Takes every lock, in one order: rdma_cm's (devices, their CM services,
/// default PDs, events and answers handed out, destroyed channels), the
/// statistics, the hosting's (providers, contexts), the event router, the
/// live handles, then doorbell-cma's (services, ports).
pub(crate) fn hold() -> Held {
    Held {
        rdma_cm: crate::rdma_cm::hold_for_fork(),
        _watch: crate::stats::hold_for_fork(),
        _hosted: crate::hosted::hold_for_fork(),
        _router: crate::events::lock(&ROUTER),
        _live: crate::handles::hold_for_fork(),
        _cma: doorbell_cma::hold_for_fork(),
    }
}

thread_local! {
    /// Every lock, held by this thread across a `fork()`.
    static HELD: Cell<Option<Held>> = const { Cell::new(None) };
}

/// Set as the prepare handler starts, for the test's thread that holds
/// the locks until a fork waits for them.
#[cfg(test)]
static PREPARING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn prepare() {
    // Relaxed: a flag alone, nothing is published with it.
    #[cfg(test)]
    PREPARING.store(true, std::sync::atomic::Ordering::Relaxed);
    let held = hold();
    // A thread that is exiting has no thread-locals left; it then forks
    // without the locks, as if no handler were registered.
    let _ = HELD.try_with(|h| h.set(Some(held)));
}

extern "C" fn parent() {
    let _ = HELD.try_with(|h| drop(h.take()));
}

extern "C" fn child() {
    let _ = HELD.try_with(|h| {
        if let Some(mut held) = h.take() {
            held.rdma_cm.forget_in_child();
            drop(held);
        }
    });
}

/// Registers the handlers when the library is loaded, before any of its
/// code runs and so before any of the locks is first taken: an ELF
/// constructor, as C libraries register theirs. (Registered from the
/// exports instead, this module would sit in a circle with them: the
/// exports' boundary would call it, and it takes the locks of the modules
/// whose exports go through that boundary.)
#[used]
#[unsafe(link_section = ".init_array")]
static REGISTER_AT_LOAD: extern "C" fn() = register_at_load;

extern "C" fn register_at_load() {
    register();
}

/// Registers the fork handlers, once per process (a child inherits them).
/// A failure (ENOMEM) leaves forks as they were without the handlers.
fn register() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: the handlers are `extern "C"` functions without arguments
        // that live as long as the library (pthread_atfork unregisters them
        // if it is unloaded) and never unwind: they only lock, move guards
        // and reset a flag.
        let _ = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    /// How long the parent waits for its child before calling it hung.
    const CHILD_WAIT: Duration = Duration::from_secs(10);

    /// A thread holds every lock of the library when another forks (as a
    /// call that opens the devices, allocates a PD or hands out an event
    /// holds one): the child, which has no copy of that thread, must find
    /// them free (the fork waits for them), not hang on its first call.
    /// Runs in a process of its own, where no other test's thread holds a
    /// lock across the fork.
    #[test]
    fn a_child_forked_while_the_locks_are_held_finds_them_free() {
        if !doorbell_cprobe::alone::in_own_process(
            "forks::tests::a_child_forked_while_the_locks_are_held_finds_them_free",
        ) {
            return;
        }
        // The handlers were registered when the binary was loaded
        // (`REGISTER_AT_LOAD`): nothing here registers them.
        // A thread opening the devices when the process forks: the child
        // must not wait for it.
        crate::rdma_cm::hold_for_fork().set_opening_for_test(true);
        let (held, is_held) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let all = hold();
            held.send(()).unwrap();
            // Until the fork below waits for the locks (or, without the
            // handlers, long after it has happened).
            let start = Instant::now();
            while !PREPARING.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(50));
            drop(all);
        });
        is_held.recv().unwrap();
        // SAFETY: fork in a process of this one test; the child only makes
        // library calls that take the locks and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = child_takes_the_locks();
            // SAFETY: _exit runs none of the harness's exit paths a second
            // time.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        holder.join().unwrap();
        let status = wait_for(pid);
        // The parent handler released them too.
        drop(hold());
        crate::rdma_cm::hold_for_fork().set_opening_for_test(false);
        assert!(
            status.is_some_and(|s| libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0),
            "the child hung or failed: status {status:?}"
        );
        doorbell_cprobe::alone::passed();
    }

    /// In the child: C calls that take the live handles, the destroyed
    /// channels and the events handed out (each refusing a NULL), then
    /// every lock at once; and no opening of the devices to wait for.
    fn child_takes_the_locks() -> bool {
        let mut event = core::ptr::null_mut();
        // SAFETY: `event` is a live local to write an event pointer to;
        // the NULL channel and event are refused without being read.
        let refused = unsafe {
            crate::rdma_cm::doorbell_rdma_get_cm_event(core::ptr::null_mut(), &mut event) == -1
                && crate::rdma_cm::doorbell_rdma_ack_cm_event(core::ptr::null_mut()) == -1
        };
        let all = hold();
        let opening = all.rdma_cm.opening_for_test();
        drop(all);
        refused && !opening
    }

    /// The child's wait status, or `None` if it has not ended after
    /// [`CHILD_WAIT`] (it is then killed).
    fn wait_for(pid: libc::pid_t) -> Option<libc::c_int> {
        let start = Instant::now();
        let mut status = 0;
        while start.elapsed() < CHILD_WAIT {
            // SAFETY: `pid` is our child; `status` is a live local.
            match unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } {
                0 => std::thread::sleep(Duration::from_millis(10)),
                r if r == pid => return Some(status),
                _ => return None,
            }
        }
        // SAFETY: `pid` is our child, not yet reaped; it is killed and
        // reaped here.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, &mut status, 0);
        }
        None
    }
}
