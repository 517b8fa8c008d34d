//! The rdma_cm API, where the process's NIC is: doorbell's `librdmacm.so.1`
//! passes each `rdma_*` call to the `doorbell_rdma_*` function of the same
//! signature exported here (version node `DOORBELL_PRIVATE_1`; decision
//! record 0020).
//!
//! The logic is doorbell-cma's (ids, ports, address and route resolution);
//! this module keeps the C structs in step with it. What works so far:
//! event channels (a real file descriptor, an eventfd that is readable
//! while events wait; `O_NONBLOCK` gives EAGAIN), `rdma_get_cm_event` and
//! `rdma_ack_cm_event`, `rdma_get_devices` (the device, opened once for the
//! life of the library, as librdmacm keeps its devices) and
//! `rdma_free_devices`, `rdma_event_str`, and ids: `rdma_create_id` (a
//! NULL channel makes a synchronous id), `rdma_destroy_id`,
//! `rdma_bind_addr`, `rdma_resolve_addr`, `rdma_resolve_route`,
//! `rdma_get_src_port`/`rdma_get_dst_port`, `rdma_set_option`,
//! `rdma_migrate_id`. The calls that need the communication manager on the
//! wire fail, for now, with ENOSYS by librdmacm's convention (-1 and
//! `errno`), and touch nothing.

#![allow(unsafe_code)]

use core::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use libc::{EINVAL, ENOSYS};

use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::handles;

mod channel;
mod conn;
mod devices;
mod ep;
mod id;
mod process;
mod qp;

/// Exports the fork tests call.
#[cfg(test)]
pub(crate) use conn::doorbell_rdma_listen;
#[cfg(test)]
pub(crate) use devices::{doorbell_rdma_free_devices, doorbell_rdma_get_devices};
#[cfg(test)]
pub(crate) use id::{doorbell_rdma_bind_addr, doorbell_rdma_create_id, doorbell_rdma_destroy_id};

use channel::CEventChannel;

/// Events handed out by `rdma_get_cm_event` and not yet acknowledged, by
/// address, with the private data each points to. A leaf lock (decision
/// record 0068).
static OUT: Mutex<Vec<Handed>> = Mutex::new(Vec::new());

/// An event's address and the private data it points to.
type Handed = (usize, Option<Box<[u8]>>);

/// The process-wide locks of rdma_cm, held (for `forks`): every one a
/// leaf, taken in this order.
pub(crate) struct ForkHeld {
    devices: MutexGuard<'static, devices::Devices>,
    _services: MutexGuard<'static, devices::Services>,
    _default_pds: MutexGuard<'static, Vec<(usize, usize)>>,
    _events_out: MutexGuard<'static, Vec<Handed>>,
    _answers_out: MutexGuard<'static, Vec<usize>>,
    _destroyed: MutexGuard<'static, std::collections::BTreeSet<usize>>,
}

impl ForkHeld {
    /// In a forked child: forgets the parent's devices and what threads
    /// the child does not have were doing (an opening of the devices).
    pub(crate) fn forget_in_child(&mut self) {
        self.devices.forget_in_child();
    }

    /// Marks the devices as being opened by a thread, or not.
    #[cfg(test)]
    pub(crate) fn set_opening_for_test(&mut self, on: bool) {
        self.devices.set_opening_for_test(on);
    }

    /// Whether a thread is opening the devices.
    #[cfg(test)]
    pub(crate) fn opening_for_test(&self) -> bool {
        self.devices.opening_for_test()
    }
}

/// Each of [`ForkHeld`]'s locks alone, by name: for the test that holds
/// one at a time.
#[cfg(test)]
pub(crate) fn each_lock_for_test() -> Vec<crate::events::OneLock> {
    vec![
        ("rdma_cm devices", || Box::new(devices::hold_devices())),
        ("rdma_cm services", || Box::new(devices::hold_services())),
        ("rdma_cm default PDs", || Box::new(qp::hold_for_fork())),
        ("rdma_cm events out", || Box::new(crate::events::lock(&OUT))),
        ("rdma_cm answers out", || Box::new(ep::hold_for_fork())),
        ("rdma_cm destroyed channels", || {
            Box::new(channel::hold_for_fork())
        }),
    ]
}

/// Takes [`ForkHeld`]'s locks.
pub(crate) fn hold_for_fork() -> ForkHeld {
    let (devices, services) = devices::hold_for_fork();
    ForkHeld {
        devices,
        _services: services,
        _default_pds: qp::hold_for_fork(),
        _events_out: crate::events::lock(&OUT),
        _answers_out: ep::hold_for_fork(),
        _destroyed: channel::hold_for_fork(),
    }
}

/// `rdma_get_cm_event`: the next event, waiting for one unless the
/// channel's descriptor is non-blocking (EAGAIN then), taken as librdmacm
/// takes it (`process`).
///
/// # Safety
/// `event` is NULL or points to a writable event pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard("rdma_get_cm_event", Conv::MinusOne, || {
        if event.is_null() {
            return Err(EINVAL);
        }
        // The queue is taken out before the wait: a program may destroy the
        // channel while a thread of its waits here, or is about to (rping
        // does, as it exits); that thread then goes on waiting, as a read on
        // the kernel's descriptor does, until the process ends.
        let events = match handles::with::<CEventChannel, _>(channel, |ch| ch.events.clone()) {
            Ok(q) => q,
            Err(_) if channel::was_destroyed(channel) => loop {
                std::thread::park();
            },
            Err(e) => return Err(e),
        };
        let t = process::next(&events)?;
        let e = Box::into_raw(t.ev);
        crate::events::lock(&OUT).push((e as usize, t.data));
        // SAFETY: non-NULL, the caller's pointer to write the event to.
        unsafe { *event = e };
        Ok(0)
    })
}

/// `rdma_ack_cm_event`: frees an event `rdma_get_cm_event` gave.
///
/// # Safety
/// None beyond C's: an event that this library did not hand out, or
/// already freed, is refused (EINVAL) without being touched.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard("rdma_ack_cm_event", Conv::MinusOne, || {
        let mut out = crate::events::lock(&OUT);
        let i = out
            .iter()
            .position(|(e, _)| *e == event as usize)
            .ok_or(EINVAL)?;
        out.swap_remove(i);
        // SAFETY: the address was handed out by Box::into_raw above and is
        // removed from OUT before it is freed, so it is freed once.
        drop(unsafe { Box::from_raw(event) });
        Ok(0)
    })
}

/// The names of v44's events, by value.
const EVENT_NAMES: [&core::ffi::CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

/// `rdma_event_str`.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    EVENT_NAMES
        .get(event as usize)
        .copied()
        .unwrap_or(c"UNKNOWN EVENT")
        .as_ptr()
}

macro_rules! not_yet {
    ($( [$conv:ident] fn $name:ident ( $($arg:ident : $ty:ty),* ) $(-> $ret:ty)? ; )*) => {
        $(not_yet!(@one $conv $name ($($arg: $ty),*) $(-> $ret)?);)*
        /// The calls that wait for the communication manager.
        pub const NOT_YET: &[&str] = &[$(stringify!($name)),*];
    };
    (@one void $name:ident ($($arg:ident: $ty:ty),*)) => {
        #[doc = concat!("`", stringify!($name), "`: not yet (does nothing).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) {
            let _ = ($($arg,)*);
        }
    };
    (@one port $name:ident ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        #[doc = concat!("`", stringify!($name), "`: not yet (port 0).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) -> $ret {
            let _ = ($($arg,)*);
            0
        }
    };
    (@one neg1 $name:ident ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        #[doc = concat!("`", stringify!($name), "`: not yet (-1, ENOSYS).")]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) -> $ret {
            let _ = ($($arg,)*);
            guard(stringify!($name), Conv::MinusOne, || Err(ENOSYS))
        }
    };
}

type P = *mut c_void;

not_yet! {
    [neg1] fn doorbell_rdma_create_srq(id: P, pd: P, attr: P) -> c_int;
    [neg1] fn doorbell_rdma_create_srq_ex(id: P, attr: P) -> c_int;
    [void] fn doorbell_rdma_destroy_srq(id: P);
    [neg1] fn doorbell_rdma_reject_ece(id: P, private_data: P, private_data_len: u8) -> c_int;
    [neg1] fn doorbell_rdma_join_multicast(id: P, addr: P, context: P) -> c_int;
    [neg1] fn doorbell_rdma_join_multicast_ex(id: P, mc_join_attr: P, context: P) -> c_int;
    [neg1] fn doorbell_rdma_leave_multicast(id: P, addr: P) -> c_int;
    [neg1] fn doorbell_rdma_set_local_ece(id: P, ece: P) -> c_int;
    [neg1] fn doorbell_rdma_get_remote_ece(id: P, ece: P) -> c_int;
}

/// The calls that work, for the export check.
pub const WORKING: &[&str] = &[
    "doorbell_rdma_create_qp_ex",
    "doorbell_rdma_listen",
    "doorbell_rdma_connect",
    "doorbell_rdma_get_request",
    "doorbell_rdma_accept",
    "doorbell_rdma_reject",
    "doorbell_rdma_establish",
    "doorbell_rdma_disconnect",
    "doorbell_rdma_notify",
    "doorbell_rdma_create_ep",
    "doorbell_rdma_destroy_ep",
    "doorbell_rdma_getaddrinfo",
    "doorbell_rdma_freeaddrinfo",
    "doorbell_rdma_create_qp",
    "doorbell_rdma_destroy_qp",
    "doorbell_rdma_init_qp_attr",
    "doorbell_rdma_create_id",
    "doorbell_rdma_destroy_id",
    "doorbell_rdma_bind_addr",
    "doorbell_rdma_resolve_addr",
    "doorbell_rdma_resolve_route",
    "doorbell_rdma_get_src_port",
    "doorbell_rdma_get_dst_port",
    "doorbell_rdma_set_option",
    "doorbell_rdma_migrate_id",
    "doorbell_rdma_create_event_channel",
    "doorbell_rdma_destroy_event_channel",
    "doorbell_rdma_get_cm_event",
    "doorbell_rdma_ack_cm_event",
    "doorbell_rdma_get_devices",
    "doorbell_rdma_free_devices",
    "doorbell_rdma_event_str",
];
