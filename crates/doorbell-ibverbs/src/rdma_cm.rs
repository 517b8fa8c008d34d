//! The rdma_cm API, where the process's NIC is: doorbell's `librdmacm.so.1`
//! passes each `rdma_*` call to the `doorbell_rdma_*` function of the same
//! signature exported here (version node `DOORBELL_PRIVATE_1`; decision
//! record 0020).
//!
//! What works so far: event channels (a real file descriptor, an eventfd
//! that is readable while events wait; `O_NONBLOCK` gives EAGAIN),
//! `rdma_get_cm_event`/`rdma_ack_cm_event` over them, `rdma_get_devices`
//! (the device, opened once for the life of the library, as librdmacm
//! keeps its devices) and `rdma_free_devices`, and `rdma_event_str`. The
//! calls that need the communication manager fail, for now, with ENOSYS by
//! librdmacm's convention (-1 and `errno`), and touch nothing.

#![allow(unsafe_code)]

use core::ffi::{c_char, c_int, c_void};
use core::ptr::null_mut;
use std::sync::Mutex;

use libc::{EINVAL, ENOSYS, size_t};

use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::Queue;
use crate::handle;
use crate::handles;

/// An event channel: the C struct first, then the queue whose eventfd it
/// names.
#[repr(C)]
pub(crate) struct CEventChannel {
    ch: rdma_event_channel,
    events: Queue<Box<rdma_cm_event>>,
}
handle!(CEventChannel, rdma_event_channel, ch, CmChannel);

/// Events handed out by `rdma_get_cm_event` and not yet acknowledged, by
/// address.
static OUT: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// `rdma_create_event_channel`.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_create_event_channel() -> *mut rdma_event_channel {
    guard("rdma_create_event_channel", Conv::Null, || {
        let events = Queue::new()?;
        let ch = rdma_event_channel {
            fd: events.fd.raw(),
        };
        Ok(handles::register(Box::new(CEventChannel { ch, events })))
    })
}

/// `rdma_destroy_event_channel`: closes the descriptor. Events still queued
/// are dropped with it.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard("rdma_destroy_event_channel", Conv::Abort, || {
        // A NULL or unknown channel is ignored, as the real one cannot tell.
        drop(handles::take::<CEventChannel>(channel));
        Ok(())
    })
}

/// `rdma_get_cm_event`: the next event, waiting for one unless the
/// channel's descriptor is non-blocking (EAGAIN then).
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
        let ch = handles::get::<CEventChannel>(channel)?;
        let e = Box::into_raw(ch.events.pop()?);
        crate::events::lock(&OUT).push(e as usize);
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
            .position(|&e| e == event as usize)
            .ok_or(EINVAL)?;
        out.swap_remove(i);
        // SAFETY: the address was handed out by Box::into_raw above and is
        // removed from OUT before it is freed, so it is freed once.
        drop(unsafe { Box::from_raw(event) });
        Ok(0)
    })
}

/// The contexts `rdma_get_devices` opened, kept while the library is
/// loaded (a NULL-free list of handles).
static DEVICES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// `rdma_get_devices`: every doorbell device, opened, NULL-terminated.
///
/// # Safety
/// `num_devices` is NULL or points to a writable int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_get_devices(
    num_devices: *mut c_int,
) -> *mut *mut ibv_context {
    guard("rdma_get_devices", Conv::Null, || {
        let mut open = crate::events::lock(&DEVICES);
        if open.is_empty() {
            let mut n = 0;
            let list = crate::device::ibv_get_device_list(&mut n);
            for i in 0..usize::try_from(n).unwrap_or(0) {
                // SAFETY: ibv_get_device_list gave `n` devices before NULL.
                let dev = unsafe { *list.add(i) };
                let ctx = crate::device::ibv_open_device(dev);
                if !ctx.is_null() {
                    open.push(ctx as usize);
                }
            }
            crate::device::ibv_free_device_list(list);
        }
        let mut list: Vec<*mut ibv_context> = open.iter().map(|&c| c as *mut ibv_context).collect();
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
    [neg1] fn doorbell_rdma_create_id(channel: P, id: *mut P, context: P, ps: c_int) -> c_int;
    [neg1] fn doorbell_rdma_create_ep(id: *mut P, res: P, pd: P, qp_init_attr: P) -> c_int;
    [void] fn doorbell_rdma_destroy_ep(id: P);
    [neg1] fn doorbell_rdma_destroy_id(id: P) -> c_int;
    [neg1] fn doorbell_rdma_bind_addr(id: P, addr: P) -> c_int;
    [neg1] fn doorbell_rdma_resolve_addr(id: P, src_addr: P, dst_addr: P, timeout_ms: c_int) -> c_int;
    [neg1] fn doorbell_rdma_resolve_route(id: P, timeout_ms: c_int) -> c_int;
    [neg1] fn doorbell_rdma_create_qp(id: P, pd: P, qp_init_attr: P) -> c_int;
    [neg1] fn doorbell_rdma_create_qp_ex(id: P, qp_init_attr: P) -> c_int;
    [void] fn doorbell_rdma_destroy_qp(id: P);
    [neg1] fn doorbell_rdma_create_srq(id: P, pd: P, attr: P) -> c_int;
    [neg1] fn doorbell_rdma_create_srq_ex(id: P, attr: P) -> c_int;
    [void] fn doorbell_rdma_destroy_srq(id: P);
    [neg1] fn doorbell_rdma_connect(id: P, conn_param: P) -> c_int;
    [neg1] fn doorbell_rdma_establish(id: P) -> c_int;
    [neg1] fn doorbell_rdma_listen(id: P, backlog: c_int) -> c_int;
    [neg1] fn doorbell_rdma_get_request(listen: P, id: *mut P) -> c_int;
    [neg1] fn doorbell_rdma_accept(id: P, conn_param: P) -> c_int;
    [neg1] fn doorbell_rdma_reject(id: P, private_data: P, private_data_len: u8) -> c_int;
    [neg1] fn doorbell_rdma_reject_ece(id: P, private_data: P, private_data_len: u8) -> c_int;
    [neg1] fn doorbell_rdma_notify(id: P, event: c_int) -> c_int;
    [neg1] fn doorbell_rdma_disconnect(id: P) -> c_int;
    [neg1] fn doorbell_rdma_join_multicast(id: P, addr: P, context: P) -> c_int;
    [neg1] fn doorbell_rdma_join_multicast_ex(id: P, mc_join_attr: P, context: P) -> c_int;
    [neg1] fn doorbell_rdma_leave_multicast(id: P, addr: P) -> c_int;
    [port] fn doorbell_rdma_get_src_port(id: P) -> u16;
    [port] fn doorbell_rdma_get_dst_port(id: P) -> u16;
    [neg1] fn doorbell_rdma_set_option(id: P, level: c_int, optname: c_int, optval: P, optlen: size_t) -> c_int;
    [neg1] fn doorbell_rdma_migrate_id(id: P, channel: P) -> c_int;
    [neg1] fn doorbell_rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: P, res: *mut P) -> c_int;
    [void] fn doorbell_rdma_freeaddrinfo(res: P);
    [neg1] fn doorbell_rdma_init_qp_attr(id: P, qp_attr: P, qp_attr_mask: *mut c_int) -> c_int;
    [neg1] fn doorbell_rdma_set_local_ece(id: P, ece: P) -> c_int;
    [neg1] fn doorbell_rdma_get_remote_ece(id: P, ece: P) -> c_int;
}

/// The calls that work, for the export check.
pub const WORKING: &[&str] = &[
    "doorbell_rdma_create_event_channel",
    "doorbell_rdma_destroy_event_channel",
    "doorbell_rdma_get_cm_event",
    "doorbell_rdma_ack_cm_event",
    "doorbell_rdma_get_devices",
    "doorbell_rdma_free_devices",
    "doorbell_rdma_event_str",
];
