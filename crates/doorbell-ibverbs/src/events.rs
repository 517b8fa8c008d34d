//! Completion channels and the async event queue as real file descriptors,
//! as uverbs gives them: an eventfd each (semaphore mode, so it is readable
//! exactly while events wait), which a program may `poll`/`epoll` or make
//! non-blocking (then an empty queue answers EAGAIN).
//!
//! The device's events are one stream for every context of the process's
//! NIC. Each context runs a dispatcher thread (the library playing the
//! kernel's event handler) that takes events from the device and routes
//! them by number, through [`ROUTER`], to where they belong: a completion
//! to the channel of its CQ, a CQ error or QP fatal error to the async
//! queue of the context that owns the object. The threads start with every
//! signal blocked.

#![allow(unsafe_code)]

use core::ffi::c_int;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use doorbell_hif::NicEvent;
use doorbell_types::{Cqn, Qpn, Srqn};
use doorbell_verbs::Context;

use crate::abi::*;

/// An eventfd in semaphore mode: each [`EventFd::signal`] makes one read
/// succeed.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> Result<Self, c_int> {
        // SAFETY: eventfd takes no pointers; a negative result is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes one more read succeed.
    pub(crate) fn signal(&self) {
        let one = 1u64;
        // SAFETY: writes the 8 bytes of `one` to our own eventfd.
        let _ = unsafe { libc::write(self.raw(), core::ptr::from_ref(&one).cast(), 8) };
    }

    /// Takes one signal: blocks until there is one, unless the fd was made
    /// non-blocking (by the program), when it answers EAGAIN, or a signal
    /// interrupts it (EINTR).
    pub(crate) fn wait(&self) -> Result<(), c_int> {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from our own eventfd.
        let n = unsafe { libc::read(self.raw(), core::ptr::from_mut(&mut v).cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        // A signal ends the wait with EINTR, as rdma-core's read() of the
        // channel does: programs such as qperf stop a blocked
        // ibv_get_cq_event with alarm().
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }

    /// Takes one signal if there is one, never blocking.
    pub(crate) fn try_take(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, timeout 0.
        let ready = unsafe { libc::poll(&mut p, 1, 0) } == 1;
        // Ready: the read does not block.
        ready && self.wait().is_ok()
    }
}

/// Where each object's events go, by the device's numbers.
#[derive(Default)]
pub(crate) struct Router {
    /// CQ → (its C handle, its channel's C handle or 0, its context's).
    pub(crate) cqs: BTreeMap<Cqn, (usize, usize, usize)>,
    /// QP → (its C handle, its context's).
    pub(crate) qps: BTreeMap<Qpn, (usize, usize)>,
    /// SRQ → (its C handle, its context's).
    pub(crate) srqs: BTreeMap<Srqn, (usize, usize)>,
    /// Every open context's C handle: port events go to all of them.
    pub(crate) contexts: BTreeSet<usize>,
}

/// A process-wide lock by name, and how to take it alone: for the fork
/// test that holds one at a time (`forks`).
#[cfg(test)]
pub(crate) type OneLock = (&'static str, fn() -> Box<dyn std::any::Any>);

/// The process's one router. A leaf lock (decision record 0068): nothing
/// is taken, waited for or called while it is held.
pub(crate) static ROUTER: Mutex<Router> = Mutex::new(Router {
    cqs: BTreeMap::new(),
    qps: BTreeMap::new(),
    srqs: BTreeMap::new(),
    contexts: BTreeSet::new(),
});

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A queue of events behind an eventfd.
pub(crate) struct Queue<T> {
    pub(crate) fd: EventFd,
    items: Mutex<VecDeque<T>>,
}

impl<T> Queue<T> {
    pub(crate) fn new() -> Result<Self, c_int> {
        Ok(Self {
            fd: EventFd::new()?,
            items: Mutex::new(VecDeque::new()),
        })
    }

    pub(crate) fn push(&self, item: T) {
        lock(&self.items).push_back(item);
        self.fd.signal();
    }

    /// The next item: waits for one (or EAGAIN on a non-blocking fd).
    pub(crate) fn pop(&self) -> Result<T, c_int> {
        loop {
            self.fd.wait()?;
            if let Some(i) = lock(&self.items).pop_front() {
                return Ok(i);
            }
        }
    }

    /// Drops the queued items `drop_it` picks, with their signals.
    pub(crate) fn remove(&self, mut drop_it: impl FnMut(&T) -> bool) {
        let mut q = lock(&self.items);
        let before = q.len();
        q.retain(|i| !drop_it(i));
        for _ in q.len()..before {
            self.fd.try_take();
        }
    }
}

/// An async event with its element, as C gets it.
#[derive(Clone, Copy)]
pub(crate) struct AsyncEvent(pub(crate) ibv_async_event);

// SAFETY: the element is a handle (an address) or a port number, plain data
// that C alone dereferences.
unsafe impl Send for AsyncEvent {}

/// What routes a completion: the channel behind a CQ's handle.
pub(crate) trait Deliver: Send + Sync {
    /// Puts a completion event of CQ `cqn` on channel `channel`.
    fn completion(&self, channel: usize, cq: usize, cqn: Cqn);
    /// Puts an async event on the queue of context `ctx`.
    fn async_event(&self, ctx: usize, event: AsyncEvent);
}

/// Routes one device event.
fn route(ev: NicEvent, to: &dyn Deliver) {
    let r = lock(&ROUTER);
    let event = |element: ibv_async_event_element, event_type| {
        AsyncEvent(ibv_async_event {
            element,
            event_type,
        })
    };
    match ev {
        NicEvent::Completion(cqn) => {
            if let Some(&(cq, ch, _)) = r.cqs.get(&cqn)
                && ch != 0
            {
                drop(r);
                to.completion(ch, cq, cqn);
            }
        }
        NicEvent::CqError(cqn) => {
            if let Some(&(cq, _, ctx)) = r.cqs.get(&cqn) {
                drop(r);
                let e = ibv_async_event_element {
                    cq: cq as *mut ibv_cq,
                };
                to.async_event(ctx, event(e, 0)); // IBV_EVENT_CQ_ERR
            }
        }
        NicEvent::QpFatal(qpn) | NicEvent::QpLastWqeReached(qpn) => {
            if let Some(&(qp, ctx)) = r.qps.get(&qpn) {
                drop(r);
                let e = ibv_async_event_element {
                    qp: qp as *mut ibv_qp,
                };
                // IBV_EVENT_QP_FATAL, IBV_EVENT_QP_LAST_WQE_REACHED.
                let t = if matches!(ev, NicEvent::QpFatal(_)) {
                    1
                } else {
                    16
                };
                to.async_event(ctx, event(e, t));
            }
        }
        NicEvent::PortDown(port) | NicEvent::PortUp(port) => {
            let all: Vec<usize> = r.contexts.iter().copied().collect();
            drop(r);
            // IBV_EVENT_PORT_ERR, IBV_EVENT_PORT_ACTIVE.
            let t = if matches!(ev, NicEvent::PortDown(_)) {
                10
            } else {
                9
            };
            for ctx in all {
                let e = ibv_async_event_element {
                    port_num: c_int::from(port),
                };
                to.async_event(ctx, event(e, t));
            }
        }
        NicEvent::SrqLimit(srqn) => {
            if let Some(&(srq, ctx)) = r.srqs.get(&srqn) {
                drop(r);
                let e = ibv_async_event_element {
                    srq: srq as *mut ibv_srq,
                };
                to.async_event(ctx, event(e, 15)); // IBV_EVENT_SRQ_LIMIT_REACHED
            }
        }
    }
}

/// A context's dispatcher thread.
pub(crate) struct Dispatcher {
    stop: Arc<AtomicBool>,
    /// To end the thread's wait when it is to stop.
    ctx: Context,
    thread: Option<JoinHandle<()>>,
}

/// How long the dispatcher waits for an event before it looks at its stop
/// flag anyway; it is woken to stop, so this only bounds a stop whose
/// wake-up went astray. An idle device's dispatcher costs one wake-up per
/// this long.
const DISPATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Dispatcher {
    /// Starts routing the device's events through `ctx` to `to`.
    pub(crate) fn start(ctx: Context, to: Arc<dyn Deliver>) -> Result<Self, c_int> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let waiter = ctx.clone();
        let thread = std::thread::Builder::new()
            .name("doorbell-events".into())
            .spawn(move || {
                block_signals();
                while !flag.load(Ordering::Acquire) {
                    if let Some(ev) = waiter.next_event_or_wake(DISPATCH_WAIT) {
                        route(ev, &*to);
                    }
                }
            })
            .map_err(|_| libc::EAGAIN)?;
        Ok(Self {
            stop,
            ctx,
            thread: Some(thread),
        })
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        // Release pairs with the thread's Acquire load; the wake ends its
        // wait (sent after the flag, so the woken thread sees it). Every
        // context of the process waits on its NIC, and another context's
        // dispatcher may take the wake (and wait again): it is sent again
        // until this thread has ended.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            let start = std::time::Instant::now();
            while !t.is_finished() && start.elapsed() < DISPATCH_WAIT {
                self.ctx.wake_event_waiter();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every signal but SIGSEGV and SIGBUS: the set the library's threads
/// block. Those two stay open because they are not the program's to take
/// (a fault raises them in the thread that faults) and because the NIC's
/// copies into registered memory catch them (a fault whose signal is
/// blocked kills the process, handler or not).
fn library_mask() -> libc::sigset_t {
    // SAFETY: sigset_t is a plain bit array, valid all-zero; sigfillset and
    // sigdelset write only the set they are given, a live local.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::sigdelset(&mut set, libc::SIGSEGV);
        libc::sigdelset(&mut set, libc::SIGBUS);
        set
    }
}

/// Runs `f` with every signal but SIGSEGV and SIGBUS blocked in the calling
/// thread, so that the threads it starts (the NIC's, the CM's) inherit that
/// mask: the program's signals then reach the program's own threads, where
/// its handlers run and its blocking calls return EINTR, as they would with
/// rdma-core, which starts no threads.
pub(crate) fn without_signals<R>(f: impl FnOnce() -> R) -> R {
    let set = library_mask();
    // SAFETY: pthread_sigmask reads `set`, writes the old mask into `old`,
    // and changes only the calling thread's mask; the second call restores
    // that mask.
    unsafe {
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        r
    }
}

/// Blocks every signal but SIGSEGV and SIGBUS in the calling thread (one of
/// the library's own), so that the program's handlers (perftest's
/// `alarm()`) run in its threads.
pub(crate) fn block_signals() {
    let set = library_mask();
    // SAFETY: pthread_sigmask reads `set` and changes only the calling
    // thread's mask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut());
    }
}
