//! `rdma_getaddrinfo` over doorbell-cma's lookup, and endpoints:
//! `rdma_create_ep` (a synchronous id, bound for a passive answer or
//! resolved to its destination for an active one, with a QP if asked) and
//! `rdma_destroy_ep`.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::{c_char, c_int};
use core::ptr::null_mut;
use std::ffi::{CStr, CString};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};

use doorbell_cma::{Family, Hints, LookupError, PortSpace};
use libc::{
    AF_INET, AF_INET6, AF_UNSPEC, EAFNOSUPPORT, EINVAL, EOPNOTSUPP, sockaddr, sockaddr_storage,
    socklen_t,
};

use super::id::{self, id_of};
use super::qp;
use crate::abi::consts::{IBV_QPT_RC, IBV_QPT_UD};
use crate::abi::*;
use crate::boundary::{Conv, guard};

const RAI_PASSIVE: c_int = 0x1;
const RAI_NUMERICHOST: c_int = 0x2;
const RAI_NOROUTE: c_int = 0x4;
const RAI_FAMILY: c_int = 0x8;
const RAI_SA: c_int = 0x20;

/// Answers handed out and not yet freed, by address. A leaf lock
/// (decision record 0068).
static OUT: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The lock of the answers handed out, held (for `forks`).
pub(super) fn hold_for_fork() -> MutexGuard<'static, Vec<usize>> {
    crate::events::lock(&OUT)
}

fn addr_len(a: &SocketAddr) -> socklen_t {
    (match a {
        SocketAddr::V4(_) => core::mem::size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => core::mem::size_of::<libc::sockaddr_in6>(),
    }) as socklen_t
}

/// A boxed `sockaddr_storage` holding `a`, as a `sockaddr` pointer.
fn boxed_addr(a: SocketAddr) -> *mut sockaddr {
    Box::into_raw(Box::new(id::storage(a))).cast::<sockaddr>()
}

/// Frees what [`boxed_addr`] made.
///
/// # Safety
/// `p` is NULL or came from [`boxed_addr`] and is not used again.
unsafe fn free_addr(p: *mut sockaddr) {
    if !p.is_null() {
        // SAFETY: the caller's promise: a Box<sockaddr_storage>.
        drop(unsafe { Box::from_raw(p.cast::<sockaddr_storage>()) });
    }
}

fn lookup_errno(e: LookupError) -> c_int {
    match e {
        LookupError::Nothing => EINVAL,
        LookupError::NoName => libc::EAI_NONAME,
        LookupError::Service => libc::EAI_SERVICE,
        LookupError::Family => libc::EAI_FAMILY,
        _ => libc::EAI_FAIL,
    }
}

/// `rdma_getaddrinfo`: one answer. A lookup failure returns the
/// `getaddrinfo` code as librdmacm does; bad arguments are -1 with errno.
///
/// # Safety
/// `node`, `service` are NULL or C strings; `hints` NULL or the caller's;
/// `res` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard("rdma_getaddrinfo", Conv::MinusOne, || {
        if res.is_null() || (node.is_null() && service.is_null() && hints.is_null()) {
            return Err(EINVAL);
        }
        // SAFETY: NULL or the caller's hints, read once.
        let h = unsafe { hints.as_ref() }.copied();
        let flags = h.map_or(0, |h| h.ai_flags);
        if flags & RAI_SA != 0 {
            return Err(EOPNOTSUPP);
        }
        let family = match h.map_or(AF_UNSPEC, |h| h.ai_family) {
            AF_UNSPEC => Family::Any,
            AF_INET => Family::V4,
            AF_INET6 => Family::V6,
            _ => return Err(EAFNOSUPPORT),
        };
        let text = |p: *const c_char| {
            // SAFETY: NULL or the caller's C string.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        let (node, service) = (text(node), text(service));
        let port_space = h.and_then(|h| PortSpace::from_code(h.ai_port_space as u32));
        let datagram = h.and_then(|h| match h.ai_qp_type {
            0 => None,
            t => Some(t == IBV_QPT_UD as c_int),
        });
        // SAFETY: rdma_addrinfo is pointers and integers; zero is empty.
        let mut rai: rdma_addrinfo = unsafe { core::mem::zeroed() };
        if node.is_none() && service.is_none() {
            // Only hints: they are the answer (with their destination).
            if let Some(h) = h {
                rai.ai_flags = h.ai_flags;
                rai.ai_family = h.ai_family;
                rai.ai_qp_type = h.ai_qp_type;
                rai.ai_port_space = h.ai_port_space;
                if !h.ai_dst_addr.is_null() {
                    // SAFETY: the caller's address.
                    let d = unsafe { id::socket_addr(h.ai_dst_addr) }?;
                    rai.ai_dst_addr = boxed_addr(d);
                    rai.ai_dst_len = addr_len(&d);
                }
            }
        } else {
            let hints = Hints {
                passive: flags & RAI_PASSIVE != 0,
                numeric: flags & RAI_NUMERICHOST != 0,
                family,
                port_space,
                datagram,
            };
            let a = match doorbell_cma::lookup(node.as_deref(), service.as_deref(), hints) {
                Ok(a) => a,
                // getaddrinfo's own code, returned as it is.
                Err(e @ (LookupError::NoName | LookupError::Service | LookupError::Family)) => {
                    return Ok(lookup_errno(e));
                }
                Err(e) => return Err(lookup_errno(e)),
            };
            rai.ai_flags = if a.passive { RAI_PASSIVE } else { 0 }
                | (flags & (RAI_NUMERICHOST | RAI_NOROUTE | RAI_FAMILY));
            rai.ai_family = if a.addr.is_ipv4() { AF_INET } else { AF_INET6 };
            rai.ai_qp_type = if a.datagram { IBV_QPT_UD } else { IBV_QPT_RC } as c_int;
            rai.ai_port_space = a.port_space.code() as c_int;
            let canon = a
                .canonname
                .and_then(|n| CString::new(n).ok())
                .map_or(null_mut(), CString::into_raw);
            if a.passive {
                rai.ai_src_addr = boxed_addr(a.addr);
                rai.ai_src_len = addr_len(&a.addr);
                rai.ai_src_canonname = canon;
            } else {
                rai.ai_dst_addr = boxed_addr(a.addr);
                rai.ai_dst_len = addr_len(&a.addr);
                rai.ai_dst_canonname = canon;
            }
        }
        if let Some(h) = h
            && rai.ai_src_addr.is_null()
            && !h.ai_src_addr.is_null()
        {
            // SAFETY: the caller's address.
            let s = unsafe { id::socket_addr(h.ai_src_addr) }?;
            rai.ai_src_addr = boxed_addr(s);
            rai.ai_src_len = addr_len(&s);
        }
        let p = Box::into_raw(Box::new(rai));
        crate::events::lock(&OUT).push(p as usize);
        // SAFETY: non-NULL, the caller's pointer.
        unsafe { *res = p };
        Ok(0)
    })
}

/// `rdma_freeaddrinfo`: frees an answer `rdma_getaddrinfo` gave (others
/// are left alone).
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard("rdma_freeaddrinfo", Conv::Abort, || {
        let mut out = crate::events::lock(&OUT);
        let Some(i) = out.iter().position(|&p| p == res as usize) else {
            return Ok(());
        };
        out.swap_remove(i);
        // SAFETY: registered above by Box::into_raw and removed before it
        // is freed, so freed once; its parts were made the same way.
        unsafe {
            let rai = Box::from_raw(res);
            free_addr(rai.ai_src_addr);
            free_addr(rai.ai_dst_addr);
            for n in [rai.ai_src_canonname, rai.ai_dst_canonname] {
                if !n.is_null() {
                    drop(CString::from_raw(n));
                }
            }
        }
        Ok(())
    })
}

/// `rdma_create_ep`. See the module docs.
///
/// # Safety
/// `id` writable; `res` the caller's answer; `qp_init_attr` NULL or the
/// caller's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("rdma_create_ep", Conv::MinusOne, || {
        if id.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: NULL or the caller's answer, read once.
        let rai = unsafe { res.as_ref() }.copied().ok_or(EINVAL)?;
        let mut cid = null_mut();
        // SAFETY: a local to write the id to.
        if unsafe {
            id::doorbell_rdma_create_id(null_mut(), &mut cid, null_mut(), rai.ai_port_space as u32)
        } != 0
        {
            return Err(errno_now());
        }
        let set_up = || -> Result<(), c_int> {
            let c = id_of(cid)?;
            if rai.ai_flags & RAI_PASSIVE != 0 {
                // SAFETY: the answer's address.
                if unsafe { id::doorbell_rdma_bind_addr(cid, rai.ai_src_addr) } != 0 {
                    return Err(errno_now());
                }
                if !qp_init_attr.is_null() {
                    // SAFETY: the caller's attributes, kept for the
                    // connections the endpoint will accept.
                    let mut attr = unsafe { *qp_init_attr };
                    attr.qp_type = rai.ai_qp_type as ibv_qp_type;
                    *crate::events::lock(&c.ep_qp) = Some((pd, attr));
                }
                return Ok(());
            }
            // SAFETY: the answer's addresses.
            if unsafe {
                id::doorbell_rdma_resolve_addr(cid, rai.ai_src_addr, rai.ai_dst_addr, 2000)
            } != 0
                || id::doorbell_rdma_resolve_route(cid, 2000) != 0
            {
                return Err(errno_now());
            }
            if !qp_init_attr.is_null() {
                // SAFETY: the caller's attributes; the QP's type is the
                // answer's, as librdmacm sets it.
                if unsafe {
                    (*qp_init_attr).qp_type = rai.ai_qp_type as ibv_qp_type;
                    qp::doorbell_rdma_create_qp(cid, pd, qp_init_attr)
                } != 0
                {
                    return Err(errno_now());
                }
            }
            Ok(())
        };
        if let Err(e) = set_up() {
            id::doorbell_rdma_destroy_id(cid);
            return Err(e);
        }
        // SAFETY: non-NULL, the caller's pointer.
        unsafe { *id = cid };
        Ok(0)
    })
}

/// `rdma_destroy_ep`: its QP, then the id.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard("rdma_destroy_ep", Conv::Abort, || {
        qp::doorbell_rdma_destroy_qp(id);
        id::doorbell_rdma_destroy_id(id);
        Ok(())
    })
}

fn errno_now() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}
