//! doorbell's `librdmacm.so.1`: the rdma_cm API of rdma-core v44, as a
//! drop-in library for unmodified programs.
//!
//! # Model
//! A process's NIC lives in doorbell's `libibverbs.so.1` (its first
//! `ibv_open_device` starts it), and so does the connection manager that
//! speaks for it: the CM needs the NIC's GSI QP, its contexts and its
//! events. This library is only the face rdma-core's clients link against:
//! each `rdma_*` function passes its arguments, unchanged, to the function
//! of the same signature that `libibverbs.so.1` exports as `doorbell_rdma_*`
//! (version node `DOORBELL_PRIVATE_1`), and returns what that returns. The
//! library records a DT_NEEDED on `libibverbs.so.1`, so loading it loads
//! that too (decision record 0020).
//!
//! The rsocket API (`rsocket`, `rsend`, ...) is not offered: each call fails
//! with `ENOSYS` by its function's convention (-1, or `(size_t)-1` for
//! `riowrite`) and touches nothing.
//!
//! # Safety
//! The forwards are `unsafe extern "C"` on both sides with identical
//! parameter lists: the caller's promises about its pointers are passed on
//! as they are, and nothing here dereferences them.

#![allow(unsafe_code)]

use core::ffi::{c_char, c_int, c_void};

use libc::{nfds_t, off_t, size_t, socklen_t, ssize_t};

/// Any pointer the library only passes on.
type P = *mut c_void;

macro_rules! forward {
    ($( fn $name:ident => $target:ident ( $($arg:ident : $ty:ty),* ) $(-> $ret:ty)? ; )*) => {
        unsafe extern "C" {
            $( fn $target($($arg: $ty),*) $(-> $ret)?; )*
        }
        $(
            #[doc = concat!("`", stringify!($name), "`, done by libibverbs' `",
                            stringify!($target), "`.")]
            ///
            /// # Safety
            /// As rdma-core's `librdmacm` documents the function: the
            /// pointers are the caller's, passed on unchanged.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
                // SAFETY: the same C signature on both sides (see the
                // module's Safety section); the arguments pass unchanged.
                unsafe { $target($($arg),*) }
            }
        )*
        /// Every forwarded function, for the tests.
        pub const FORWARDED: &[&str] = &[$(stringify!($name)),*];
    };
}

forward! {
    fn rdma_create_event_channel => doorbell_rdma_create_event_channel() -> P;
    fn rdma_destroy_event_channel => doorbell_rdma_destroy_event_channel(channel: P);
    fn rdma_create_id => doorbell_rdma_create_id(channel: P, id: *mut P, context: P, ps: c_int) -> c_int;
    fn rdma_create_ep => doorbell_rdma_create_ep(id: *mut P, res: P, pd: P, qp_init_attr: P) -> c_int;
    fn rdma_destroy_ep => doorbell_rdma_destroy_ep(id: P);
    fn rdma_destroy_id => doorbell_rdma_destroy_id(id: P) -> c_int;
    fn rdma_bind_addr => doorbell_rdma_bind_addr(id: P, addr: P) -> c_int;
    fn rdma_resolve_addr => doorbell_rdma_resolve_addr(id: P, src_addr: P, dst_addr: P, timeout_ms: c_int) -> c_int;
    fn rdma_resolve_route => doorbell_rdma_resolve_route(id: P, timeout_ms: c_int) -> c_int;
    fn rdma_create_qp => doorbell_rdma_create_qp(id: P, pd: P, qp_init_attr: P) -> c_int;
    fn rdma_create_qp_ex => doorbell_rdma_create_qp_ex(id: P, qp_init_attr: P) -> c_int;
    fn rdma_destroy_qp => doorbell_rdma_destroy_qp(id: P);
    fn rdma_create_srq => doorbell_rdma_create_srq(id: P, pd: P, attr: P) -> c_int;
    fn rdma_create_srq_ex => doorbell_rdma_create_srq_ex(id: P, attr: P) -> c_int;
    fn rdma_destroy_srq => doorbell_rdma_destroy_srq(id: P);
    fn rdma_connect => doorbell_rdma_connect(id: P, conn_param: P) -> c_int;
    fn rdma_establish => doorbell_rdma_establish(id: P) -> c_int;
    fn rdma_listen => doorbell_rdma_listen(id: P, backlog: c_int) -> c_int;
    fn rdma_get_request => doorbell_rdma_get_request(listen: P, id: *mut P) -> c_int;
    fn rdma_accept => doorbell_rdma_accept(id: P, conn_param: P) -> c_int;
    fn rdma_reject => doorbell_rdma_reject(id: P, private_data: P, private_data_len: u8) -> c_int;
    fn rdma_reject_ece => doorbell_rdma_reject_ece(id: P, private_data: P, private_data_len: u8) -> c_int;
    fn rdma_notify => doorbell_rdma_notify(id: P, event: c_int) -> c_int;
    fn rdma_disconnect => doorbell_rdma_disconnect(id: P) -> c_int;
    fn rdma_join_multicast => doorbell_rdma_join_multicast(id: P, addr: P, context: P) -> c_int;
    fn rdma_join_multicast_ex => doorbell_rdma_join_multicast_ex(id: P, mc_join_attr: P, context: P) -> c_int;
    fn rdma_leave_multicast => doorbell_rdma_leave_multicast(id: P, addr: P) -> c_int;
    fn rdma_get_cm_event => doorbell_rdma_get_cm_event(channel: P, event: *mut P) -> c_int;
    fn rdma_ack_cm_event => doorbell_rdma_ack_cm_event(event: P) -> c_int;
    fn rdma_get_src_port => doorbell_rdma_get_src_port(id: P) -> u16;
    fn rdma_get_dst_port => doorbell_rdma_get_dst_port(id: P) -> u16;
    fn rdma_get_devices => doorbell_rdma_get_devices(num_devices: *mut c_int) -> *mut P;
    fn rdma_free_devices => doorbell_rdma_free_devices(list: *mut P);
    fn rdma_event_str => doorbell_rdma_event_str(event: c_int) -> *const c_char;
    fn rdma_set_option => doorbell_rdma_set_option(id: P, level: c_int, optname: c_int, optval: P, optlen: size_t) -> c_int;
    fn rdma_migrate_id => doorbell_rdma_migrate_id(id: P, channel: P) -> c_int;
    fn rdma_getaddrinfo => doorbell_rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: P, res: *mut P) -> c_int;
    fn rdma_freeaddrinfo => doorbell_rdma_freeaddrinfo(res: P);
    fn rdma_init_qp_attr => doorbell_rdma_init_qp_attr(id: P, qp_attr: P, qp_attr_mask: *mut c_int) -> c_int;
    fn rdma_set_local_ece => doorbell_rdma_set_local_ece(id: P, ece: P) -> c_int;
    fn rdma_get_remote_ece => doorbell_rdma_get_remote_ece(id: P, ece: P) -> c_int;
}

/// Sets `errno` to ENOSYS.
fn no_rsocket() {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
}

macro_rules! rsocket_enosys {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $fail:expr ; )*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: rsockets are not offered (ENOSYS).")]
            #[unsafe(no_mangle)]
            pub extern "C" fn $name($($arg: $ty),*) -> $ret {
                let _ = ($($arg,)*);
                no_rsocket();
                $fail
            }
        )*
        /// Every rsocket function, for the tests.
        pub const RSOCKET: &[&str] = &[$(stringify!($name)),*];
    };
}

rsocket_enosys! {
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int = -1;
    fn rbind(socket: c_int, addr: P, addrlen: socklen_t) -> c_int = -1;
    fn rlisten(socket: c_int, backlog: c_int) -> c_int = -1;
    fn raccept(socket: c_int, addr: P, addrlen: *mut socklen_t) -> c_int = -1;
    fn rconnect(socket: c_int, addr: P, addrlen: socklen_t) -> c_int = -1;
    fn rshutdown(socket: c_int, how: c_int) -> c_int = -1;
    fn rclose(socket: c_int) -> c_int = -1;
    fn rrecv(socket: c_int, buf: P, len: size_t, flags: c_int) -> ssize_t = -1;
    fn rrecvfrom(socket: c_int, buf: P, len: size_t, flags: c_int, src: P, addrlen: *mut socklen_t) -> ssize_t = -1;
    fn rrecvmsg(socket: c_int, msg: P, flags: c_int) -> ssize_t = -1;
    fn rsend(socket: c_int, buf: P, len: size_t, flags: c_int) -> ssize_t = -1;
    fn rsendto(socket: c_int, buf: P, len: size_t, flags: c_int, dest: P, addrlen: socklen_t) -> ssize_t = -1;
    fn rsendmsg(socket: c_int, msg: P, flags: c_int) -> ssize_t = -1;
    fn rread(socket: c_int, buf: P, count: size_t) -> ssize_t = -1;
    fn rreadv(socket: c_int, iov: P, iovcnt: c_int) -> ssize_t = -1;
    fn rwrite(socket: c_int, buf: P, count: size_t) -> ssize_t = -1;
    fn rwritev(socket: c_int, iov: P, iovcnt: c_int) -> ssize_t = -1;
    fn rpoll(fds: P, nfds: nfds_t, timeout: c_int) -> c_int = -1;
    fn rselect(nfds: c_int, readfds: P, writefds: P, exceptfds: P, timeout: P) -> c_int = -1;
    fn rgetpeername(socket: c_int, addr: P, addrlen: *mut socklen_t) -> c_int = -1;
    fn rgetsockname(socket: c_int, addr: P, addrlen: *mut socklen_t) -> c_int = -1;
    fn rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: P, optlen: socklen_t) -> c_int = -1;
    fn rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: P, optlen: *mut socklen_t) -> c_int = -1;
    // Variadic in C; the fixed arguments arrive in the same registers on
    // x86-64 (System V), and the variadic one is never read.
    fn rfcntl(socket: c_int, cmd: c_int) -> c_int = -1;
    fn riomap(socket: c_int, buf: P, len: size_t, prot: c_int, flags: c_int, offset: off_t) -> off_t = -1;
    fn riounmap(socket: c_int, buf: P, len: size_t) -> c_int = -1;
    fn riowrite(socket: c_int, buf: P, count: size_t, offset: off_t, flags: c_int) -> size_t = size_t::MAX;
}
