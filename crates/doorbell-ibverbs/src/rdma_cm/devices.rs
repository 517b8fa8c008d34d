//! The devices of rdma_cm: every doorbell device, opened once for the life
//! of the library as librdmacm keeps its devices, and the C contexts that
//! stand for them.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::c_int;
use core::ptr::null_mut;
use std::sync::Mutex;

use doorbell_verbs::Context;

use crate::abi::*;
use crate::boundary::{Conv, guard};

/// The opened contexts, as handles.
static DEVICES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// The CM of each, started with it and kept while the library is loaded.
static SERVICES: Mutex<Vec<std::sync::Arc<doorbell_cma::CmService>>> = Mutex::new(Vec::new());

static AT_EXIT: std::sync::Once = std::sync::Once::new();
/// The process that started the services (a forked child has none).
static OWNER_PID: Mutex<u32> = Mutex::new(0);
/// How long an exiting process waits for its last MADs to leave.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// At the process's exit: every connection ends as the kernel ends them
/// when a process's rdma_cm file closes (DREQ, or REJ while being set up),
/// so that peers see DISCONNECTED rather than a silent peer. A process
/// killed by a signal cannot do this: its peers see what they would see of
/// a host that lost power (their sends fail with retry exceeded, their
/// DREQs time out into DISCONNECTED).
extern "C" fn close_connections() {
    guard("exit", Conv::Abort, || {
        // A forked child inherited the services' state, not their threads.
        if *crate::events::lock(&OWNER_PID) != std::process::id() {
            return Ok(());
        }
        let services: Vec<_> = crate::events::lock(&SERVICES).clone();
        for svc in services {
            svc.close_all(EXIT_WAIT);
        }
        Ok(())
    })
}

/// Every device, opened (on the first call), with its Rust context.
pub(crate) fn open() -> Vec<(*mut ibv_context, Context)> {
    let mut open = crate::events::lock(&DEVICES);
    if open.is_empty() {
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
                    crate::events::lock(&SERVICES).push(svc);
                    AT_EXIT.call_once(|| {
                        *crate::events::lock(&OWNER_PID) = std::process::id();
                        // SAFETY: registers a function that lives as long as
                        // the library, which is never unloaded while a
                        // program uses its devices (librdmacm keeps them
                        // open for the life of the process).
                        unsafe { libc::atexit(close_connections) };
                    });
                }
            }
        }
        crate::device::ibv_free_device_list(list);
    }
    open.iter()
        .filter_map(|&h| {
            let c = h as *mut ibv_context;
            crate::ctx::context(c).ok().map(|cc| (c, cc.ctx.clone()))
        })
        .collect()
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
