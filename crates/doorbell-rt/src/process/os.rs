//! The only `unsafe` of the process's NIC: the `pthread_atfork` handlers,
//! the signal mask of the threads it starts, and releasing a forked
//! child's copy of the port's socket. Thin wrappers over `libc`.
//! (`unsafe_code` is allowed for this module alone, where `process.rs`
//! declares it.)
//!
//! Fork: the prepare handler takes the state lock, then the process's
//! spare-buffer stores ([`crate::buffers::hold_stores`]), then the lock
//! the guarded copy's signal handlers are installed under
//! ([`crate::procmem::hold_for_fork`]), in the forking
//! thread and keeps their guards in that thread's thread-local; the parent
//! handler drops them; the child handler (in the child's only thread, the
//! copy of the forking one, with the same thread-locals) resets the state
//! under its lock, then drops them all. So the child never finds a lock
//! held by a thread it does not have, and never sees a NIC half started.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use super::{State, forget_in_child, lock_state};
use crate::buffers::{StoresHeld, hold_stores};

/// What the forking thread holds across a `fork()`.
type Held = (
    MutexGuard<'static, State>,
    StoresHeld,
    crate::procmem::ForkHeld,
);

thread_local! {
    /// The state lock and the spare stores, held by this thread across a
    /// `fork()`.
    static HELD: Cell<Option<Held>> = const { Cell::new(None) };
}

extern "C" fn prepare() {
    // The thread-local first: its first use registers its destructor,
    // which takes the loader's lock, and a thread loading a library holds
    // that lock while the library's constructors run, which may take these
    // locks. A thread that is exiting has no thread-locals left; it then
    // forks without the locks, as if no handler were registered.
    if HELD.try_with(|_| ()).is_err() {
        return;
    }
    let guard = lock_state();
    let stores = hold_stores();
    let installing = crate::procmem::hold_for_fork();
    let _ = HELD.try_with(|h| h.set(Some((guard, stores, installing))));
}

extern "C" fn parent() {
    let _ = HELD.try_with(|h| drop(h.take()));
}

extern "C" fn child() {
    let _ = HELD.try_with(|h| {
        if let Some((mut guard, stores, installing)) = h.take() {
            forget_in_child(&mut guard);
            drop(stores);
            drop(installing);
        }
    });
}

/// Registers the fork handlers, once per process (a child inherits them).
/// `Err(errno)` if `pthread_atfork` refused (it fails only for want of
/// memory); every later call reports the same, and a call while another
/// thread registers them reports success. Flags, not a `Once`: a fork
/// while another thread ran a `Once` would leave it running in the child,
/// whose first NIC would wait for ever for a thread it does not have.
pub(crate) fn register_fork_handlers() -> Result<(), i32> {
    static STARTED: AtomicBool = AtomicBool::new(false);
    /// `pthread_atfork`'s answer, or [`PENDING`] until it came.
    static RC: AtomicI32 = AtomicI32::new(PENDING);
    const PENDING: i32 = -1;
    if !STARTED.swap(true, Ordering::AcqRel) {
        // SAFETY: the handlers are `extern "C"` functions without arguments
        // that live as long as the process and never unwind (they only
        // lock, move a guard and make the calls of `forget_in_child`).
        let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        RC.store(rc, Ordering::Release);
    }
    match RC.load(Ordering::Acquire) {
        0 | PENDING => Ok(()),
        errno => Err(errno),
    }
}

/// In a forked child: makes `fd`, the child's copy of the parent NIC's
/// socket, refer to `/dev/null` instead, so the child no longer holds the
/// parent's port. The number stays taken, so the socket object the child
/// never drops can never close another file under that number.
pub(super) fn release_fd(fd: RawFd) {
    // SAFETY: open, dup3 and close are async-signal-safe, as a child
    // handler needs. `fd` is the descriptor of the socket of the NIC the
    // child forgets; no Rust object does I/O on it in the child (a forked
    // copy of a LiveNic answers nothing), and the number stays open.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup3(null, fd, libc::O_CLOEXEC);
            libc::close(null);
        }
    }
}

/// Every blockable signal but the two a bad address raises blocked in the
/// calling thread, until dropped; threads spawned meanwhile keep that mask
/// for their whole life. SIGSEGV and SIGBUS stay open: the NIC's threads
/// copy into registered memory with those faults caught (a fault whose
/// signal is blocked kills the process, handler or not).
pub(super) struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    /// Blocks all signals but SIGSEGV and SIGBUS (the kernel keeps SIGKILL
    /// and SIGSTOP, glibc its own two) and remembers the mask before.
    pub(super) fn all() -> Self {
        // SAFETY: sigset_t is a plain bit array, valid all-zero; sigfillset,
        // sigdelset and pthread_sigmask write only the sets they are given,
        // which are live locals.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigdelset(&mut all, libc::SIGSEGV);
            libc::sigdelset(&mut all, libc::SIGBUS);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            Self { old }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: `self.old` is the mask pthread_sigmask filled in `all`;
        // it is only read.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    /// Forks while another thread holds what `take` takes (for 200 ms,
    /// long after the fork has begun: its prepare handler waits for it
    /// meanwhile), then checks that the child, which has no copy of that
    /// thread, gets through `child` (true) within 5 s. For a test in a
    /// process of its own, where no other test's thread holds a lock
    /// across the fork; `what` names the lock in the failure.
    pub(crate) fn a_child_forked_while_held_finds_it_free<G>(
        take: impl FnOnce() -> G + Send + 'static,
        child: impl FnOnce() -> bool,
        what: &str,
    ) {
        super::register_fork_handlers().unwrap();
        let (held, is_held) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let g = take();
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            drop(g);
        });
        is_held.recv().unwrap();
        // SAFETY: fork in a process of this one test; the child runs
        // `child` and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: alarm only sets a timer, whose default action ends a
            // child that hangs; _exit runs none of the harness's exit
            // paths a second time.
            unsafe {
                libc::alarm(5);
                let ok = child();
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        holder.join().unwrap();
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a live local.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{what}: the child hung or failed: status {status:#x}"
        );
    }
}
