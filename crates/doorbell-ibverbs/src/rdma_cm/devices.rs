//! The devices of rdma_cm: every doorbell device, opened once for the life
//! of the library as librdmacm keeps its devices, and the C contexts that
//! stand for them.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::c_int;
use core::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use doorbell_verbs::Context;

use crate::abi::*;
use crate::boundary::{Conv, guard};

/// The opened contexts, and whether a thread is opening them.
pub(crate) struct Devices {
    /// The opened contexts, as handles.
    handles: Vec<usize>,
    /// A thread is opening the devices, with no lock held.
    opening: bool,
}

impl Devices {
    /// In a forked child, with the lock held by the fork handlers: the
    /// devices the parent opened are contexts of the parent's NIC, whose
    /// threads the child does not have, and the thread that was opening
    /// them, if any, is not in the child either. The child forgets both
    /// (the parent's contexts stay allocated, never freed, so no new one
    /// takes their addresses), and its first call opens devices of its
    /// own: a NIC of its own and its CM.
    pub(crate) fn forget_in_child(&mut self) {
        self.handles.clear();
        self.opening = false;
    }

    #[cfg(test)]
    pub(crate) fn set_opening_for_test(&mut self, on: bool) {
        self.opening = on;
    }

    #[cfg(test)]
    pub(crate) fn opening_for_test(&self) -> bool {
        self.opening
    }
}

/// A leaf lock (decision record 0068): the devices are opened with it
/// released (the NIC starts then), and others wait for that on [`OPENED`].
static DEVICES: Mutex<Devices> = Mutex::new(Devices {
    handles: Vec::new(),
    opening: false,
});
/// Signalled when a thread has finished opening the devices.
static OPENED: Condvar = Condvar::new();
/// The CM of each, started with it and kept while the library is loaded,
/// with the process that started it: a forked child inherits the
/// parent's services' state, not their threads, and starts its own if it
/// opens the devices again. A leaf lock.
static SERVICES: Mutex<Services> = Mutex::new(Vec::new());

/// What [`SERVICES`] holds.
pub(crate) type Services = Vec<(u32, std::sync::Arc<doorbell_cma::CmService>)>;

/// Whether the exit handler is registered: a flag, not a `Once`, whose
/// guard a fork could leave half run for the child to wait on.
static AT_EXIT: AtomicBool = AtomicBool::new(false);
/// How long an exiting process waits for its last MADs to leave.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// The locks of the devices and of their services, held (for `forks`).
pub(crate) fn hold_for_fork() -> (MutexGuard<'static, Devices>, MutexGuard<'static, Services>) {
    (hold_devices(), hold_services())
}

/// The devices' lock, held.
pub(crate) fn hold_devices() -> MutexGuard<'static, Devices> {
    crate::events::lock(&DEVICES)
}

/// The services' lock, held.
pub(crate) fn hold_services() -> MutexGuard<'static, Services> {
    crate::events::lock(&SERVICES)
}

/// At the process's exit: every connection ends as the kernel ends them
/// when a process's rdma_cm file closes (DREQ, or REJ while being set up),
/// so that peers see DISCONNECTED rather than a silent peer. A process
/// killed by a signal cannot do this: its peers see what they would see of
/// a host that lost power (their sends fail with retry exceeded, their
/// DREQs time out into DISCONNECTED).
extern "C" fn close_connections() {
    guard("exit", Conv::Abort, || {
        // A forked child inherited its parent's services' state, not their
        // threads: it closes only those it started.
        let me = std::process::id();
        let services: Vec<_> = crate::events::lock(&SERVICES)
            .iter()
            .filter(|(pid, _)| *pid == me)
            .map(|(_, svc)| svc.clone())
            .collect();
        for svc in services {
            svc.close_all(EXIT_WAIT);
        }
        Ok(())
    })
}

/// Ends an opening of the devices, also one that panicked: the next
/// caller may open them, and those waiting look again.
struct Opening;

impl Drop for Opening {
    fn drop(&mut self) {
        crate::events::lock(&DEVICES).opening = false;
        OPENED.notify_all();
    }
}

/// Every device, opened (on the first call), with its Rust context.
pub(crate) fn open() -> Vec<(*mut ibv_context, Context)> {
    opened()
        .into_iter()
        .filter_map(|h| {
            let c = h as *mut ibv_context;
            crate::ctx::context(c).ok().map(|cc| (c, cc.ctx.clone()))
        })
        .collect()
}

/// The handles of the opened devices: those opened before, or opened now
/// by this thread, or by another one this thread waits for.
fn opened() -> Vec<usize> {
    let mut d = crate::events::lock(&DEVICES);
    while d.handles.is_empty() && d.opening {
        d = OPENED.wait(d).unwrap_or_else(|e| e.into_inner());
    }
    if !d.handles.is_empty() {
        return d.handles.clone();
    }
    d.opening = true;
    drop(d);
    let _opening = Opening;
    let handles = open_all();
    crate::events::lock(&DEVICES).handles = handles.clone();
    handles
}

/// Opens every device and starts its CM; the contexts' handles.
fn open_all() -> Vec<usize> {
    let mut open = Vec::new();
    let mut n = 0;
    let list = crate::device::ibv_get_device_list(&mut n);
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: ibv_get_device_list gave `n` devices before its NULL.
        let dev = unsafe { *list.add(i) };
        let ctx = crate::device::ibv_open_device(dev);
        if !ctx.is_null() {
            open.push(ctx as usize);
            if let Ok(c) = crate::ctx::context(ctx)
                && let Ok(svc) =
                    crate::events::without_signals(|| doorbell_cma::CmService::start(&c.ctx))
            {
                crate::events::lock(&SERVICES).push((std::process::id(), svc));
                if !AT_EXIT.swap(true, Ordering::Relaxed) {
                    // SAFETY: registers a function that lives as long as
                    // the library, which is never unloaded while a
                    // program uses its devices (librdmacm keeps them
                    // open for the life of the process).
                    unsafe { libc::atexit(close_connections) };
                }
            }
        }
    }
    crate::device::ibv_free_device_list(list);
    open
}

/// The C context of `ctx`, one of [`open`]'s.
pub(crate) fn handle_of(ctx: &Context) -> *mut ibv_context {
    open()
        .into_iter()
        .find(|(_, c)| c.same_as(ctx))
        .map_or(null_mut(), |(h, _)| h)
}

/// `rdma_get_devices`: every doorbell device, opened, NULL-terminated.
///
/// # Safety
/// `num_devices` is NULL or points to a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_get_devices(
    num_devices: *mut c_int,
) -> *mut *mut ibv_context {
    guard("rdma_get_devices", Conv::Null, || {
        let mut list: Vec<*mut ibv_context> = open().into_iter().map(|(h, _)| h).collect();
        if !num_devices.is_null() {
            // SAFETY: non-NULL, the caller's int.
            unsafe { *num_devices = list.len() as c_int };
        }
        list.push(null_mut());
        Ok(Box::into_raw(list.into_boxed_slice()).cast::<*mut ibv_context>())
    })
}

/// `rdma_free_devices`: frees the array (the devices stay open).
///
/// # Safety
/// `list` is NULL or an array `rdma_get_devices` returned, not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_free_devices(list: *mut *mut ibv_context) {
    guard("rdma_free_devices", Conv::Abort, || {
        if list.is_null() {
            return Ok(());
        }
        // SAFETY: `list` came from rdma_get_devices: a boxed slice ending
        // in its one NULL; counting up to it stays inside the slice.
        let len = unsafe {
            let mut n = 0;
            while !(*list.add(n)).is_null() {
                n += 1;
            }
            n + 1
        };
        // SAFETY: the same slice, rebuilt with its length, freed once.
        drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(list, len)) });
        Ok(())
    })
}
