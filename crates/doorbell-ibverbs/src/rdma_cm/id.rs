//! Communication identifiers as C sees them: a `struct rdma_cm_id` over a
//! [`doorbell_cma::CmId`], its fields kept in step with the model on each
//! call and each event the program takes, as librdmacm does.
//!
//! An id made without a channel is synchronous, as in librdmacm: it gets a
//! channel of its own, and each call that would report an event waits for
//! it, acknowledges it, and fails with its status.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, OnceLock};

use doorbell_cma::{CmError, CmEvent, CmId, EventSink, PortSpace};
use libc::{
    AF_INET, AF_INET6, EAFNOSUPPORT, EINVAL, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage,
};

use super::channel::{self, CEventChannel, Sink};
use super::devices;
use crate::abi::consts::{IBV_QPT_RC, IBV_QPT_UD};
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::Queue;
use crate::handle;
use crate::handles;

/// An id: the C struct first, then the model and what the C struct points
/// to.
#[repr(C)]
pub(crate) struct CCmId {
    /// C reads it; this library writes it only inside calls on the id, and
    /// C's rule (as rdma-core's) is that one id is not used by two threads
    /// at once.
    c: UnsafeCell<rdma_cm_id>,
    /// Set right after the handle exists: the handle is the model's token.
    inner: OnceLock<CmId>,
    /// What `route.path_rec` points to once the route resolved.
    path: UnsafeCell<ibv_sa_path_rec>,
    /// A synchronous id's own channel: its handle and queue.
    own: Own,
    /// A passive endpoint's QP attributes (`rdma_create_ep`), for the QPs
    /// of the connections it accepts.
    pub(crate) ep_qp: std::sync::Mutex<Option<(*mut ibv_pd, ibv_qp_init_attr)>>,
}
handle!(CCmId, rdma_cm_id, c, CmId);

impl CCmId {
    pub(crate) fn id(&self) -> Result<&CmId, c_int> {
        self.inner.get().ok_or(EINVAL)
    }

    /// Runs `f` on the C struct.
    pub(crate) fn with_c<R>(&self, f: impl FnOnce(&mut rdma_cm_id) -> R) -> R {
        // SAFETY: see the field's comment: no other thread uses the id
        // during a call on it, and no reference into it outlives `f`.
        f(unsafe { &mut *self.c.get() })
    }

    /// Waits for the event a synchronous id's last call reports, and turns
    /// its status into the call's result; nothing for an id with a channel.
    fn complete(&self) -> Result<(), c_int> {
        let Some((_, q)) = &self.own else {
            return Ok(());
        };
        let ev = q.pop()?;
        self.sync_c();
        if ev.status != 0 {
            Err(-ev.status)
        } else {
            Ok(())
        }
    }

    /// Brings the C struct in line with the model.
    pub(crate) fn sync_c(&self) {
        let Ok(id) = self.id() else {
            return;
        };
        // SAFETY: see the field's comment: no other thread uses the id now,
        // and the writes are plain data and pointers into this object.
        let c = unsafe { &mut *self.c.get() };
        let dev = id.device();
        c.verbs = dev.as_ref().map_or(null_mut(), devices::handle_of);
        c.port_num = u8::from(dev.is_some());
        if let Some(s) = id.src() {
            c.route.addr.src_storage = storage(s);
            c.route.addr.ibaddr.sgid = ibv_gid {
                raw: doorbell_cma::gid_of(s.ip()),
            };
        }
        if let Some(d) = id.dst() {
            c.route.addr.dst_storage = storage(d);
            c.route.addr.ibaddr.dgid = ibv_gid {
                raw: doorbell_cma::gid_of(d.ip()),
            };
        }
        c.route.addr.ibaddr.pkey = 0xffff_u16.to_be();
        if let Some(p) = id.path() {
            // SAFETY: as above; `path` lives as long as the id.
            let rec = unsafe { &mut *self.path.get() };
            *rec = path_record(&p);
            c.route.path_rec = self.path.get();
            c.route.num_paths = 1;
        }
    }
}

/// `enum ibv_mtu` of a size in bytes.
fn mtu_enum(bytes: u32) -> u8 {
    match bytes {
        0..=256 => 1,
        257..=512 => 2,
        513..=1024 => 3,
        1025..=2048 => 4,
        _ => 5,
    }
}

fn path_record(p: &doorbell_cma::Path) -> ibv_sa_path_rec {
    ibv_sa_path_rec {
        dgid: ibv_gid { raw: p.dgid },
        sgid: ibv_gid { raw: p.sgid },
        dlid: 0,
        slid: 0,
        raw_traffic: 0,
        flow_label: 0,
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        reversible: 1,
        numb_path: 1,
        pkey: p.pkey.to_be(),
        sl: p.sl,
        // 2: exactly this MTU.
        mtu_selector: 2,
        mtu: mtu_enum(p.mtu),
        rate_selector: 2,
        // IBV_RATE_100_GBPS, what mlx5 reports for a 100 Gb/s RoCE port.
        rate: 10,
        packet_life_time_selector: 2,
        packet_life_time: 18,
        preference: 0,
    }
}

/// A socket address as C's `sockaddr_storage`.
pub(crate) fn storage(a: SocketAddr) -> sockaddr_storage {
    // SAFETY: sockaddr_storage is plain bytes; all-zero is the empty value.
    let mut s: sockaddr_storage = unsafe { core::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            let sin = sockaddr_in {
                sin_family: AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage, which is
            // aligned for it.
            unsafe { core::ptr::write(core::ptr::from_mut(&mut s).cast::<sockaddr_in>(), sin) };
        }
        SocketAddr::V6(v6) => {
            let sin6 = sockaddr_in6 {
                sin6_family: AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { core::ptr::write(core::ptr::from_mut(&mut s).cast::<sockaddr_in6>(), sin6) };
        }
    }
    s
}

/// The socket address at `addr` (IPv4 or IPv6; other families are
/// EAFNOSUPPORT, NULL is EINVAL).
///
/// # Safety
/// `addr` is NULL or points to a whole address of the family it names.
pub(crate) unsafe fn socket_addr(addr: *const sockaddr) -> Result<SocketAddr, c_int> {
    if addr.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: non-NULL; every sockaddr starts with its family.
    let family = c_int::from(unsafe { (*addr).sa_family });
    match family {
        AF_INET => {
            // SAFETY: the caller's promise for AF_INET: a sockaddr_in.
            let sin = unsafe { core::ptr::read_unaligned(addr.cast::<sockaddr_in>()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        AF_INET6 => {
            // SAFETY: the caller's promise for AF_INET6: a sockaddr_in6.
            let s6 = unsafe { core::ptr::read_unaligned(addr.cast::<sockaddr_in6>()) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s6.sin6_addr.s6_addr),
                u16::from_be(s6.sin6_port),
                u32::from_be(s6.sin6_flowinfo),
                s6.sin6_scope_id,
            )))
        }
        _ => Err(EAFNOSUPPORT),
    }
}

fn errno(e: CmError) -> c_int {
    e.errno()
}

pub(crate) fn id_of<'a>(id: *mut rdma_cm_id) -> Result<&'a CCmId, c_int> {
    handles::get::<CCmId>(id)
}

/// A synchronous id's own channel: its handle and queue.
type Own = Option<(usize, Arc<Queue<CmEvent>>)>;

/// The sink and C channel of `channel`, or a new own channel for NULL.
fn sink_for(
    channel: *mut rdma_event_channel,
) -> Result<(Arc<Sink>, *mut rdma_event_channel, Own), c_int> {
    if channel.is_null() {
        let ch = channel::create()?;
        let q = handles::get::<CEventChannel>(ch)?.events.clone();
        Ok((Arc::new(Sink(q.clone())), ch, Some((ch as usize, q))))
    } else {
        let q = handles::get::<CEventChannel>(channel)?.events.clone();
        Ok((Arc::new(Sink(q)), channel, None))
    }
}

/// `rdma_create_id`.
///
/// # Safety
/// `id` is NULL or points to a writable id pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    guard("rdma_create_id", Conv::MinusOne, || {
        if id.is_null() {
            return Err(EINVAL);
        }
        let space = PortSpace::from_code(ps).ok_or(EINVAL)?;
        let (sink, ch, own) = sink_for(channel)?;
        // SAFETY: rdma_cm_id is pointers and integers; zero is its empty
        // value (NULL pointers, no paths).
        let mut c: rdma_cm_id = unsafe { core::mem::zeroed() };
        c.channel = ch;
        c.context = context;
        c.ps = ps;
        c.qp_type = if matches!(space, PortSpace::Udp | PortSpace::Ipoib) {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        };
        let obj = Box::new(CCmId {
            c: UnsafeCell::new(c),
            inner: OnceLock::new(),
            // SAFETY: plain data; zero is its empty value.
            path: UnsafeCell::new(unsafe { core::mem::zeroed() }),
            own,
            ep_qp: std::sync::Mutex::new(None),
        });
        let h = handles::register(obj);
        let devs = devices::open().into_iter().map(|(_, c)| c).collect();
        let model = CmId::new(sink, h as u64, space, devs);
        let _ = id_of(h)?.inner.set(model);
        // SAFETY: non-NULL, the caller's pointer.
        unsafe { *id = h };
        Ok(0)
    })
}

/// The id of a connection request to `listener`, made as librdmacm makes
/// it when the program takes the request: on the listener's channel with
/// its context and port space (synchronous if the listener is), reporting
/// the connection's events from now on.
pub(crate) fn new_child(
    listener: *mut rdma_cm_id,
    make: impl FnOnce(&CmId, Arc<dyn EventSink>, u64) -> Result<CmId, doorbell_cma::CmError>,
) -> Result<*mut rdma_cm_id, c_int> {
    let l = id_of(listener)?;
    let lm = l.id()?;
    let (ch, context, ps, qp_type) = l.with_c(|c| (c.channel, c.context, c.ps, c.qp_type));
    let q = handles::get::<CEventChannel>(ch)?.events.clone();
    // SAFETY: zero is rdma_cm_id's empty value (NULL pointers, no paths).
    let mut c: rdma_cm_id = unsafe { core::mem::zeroed() };
    c.channel = ch;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    let obj = Box::new(CCmId {
        c: UnsafeCell::new(c),
        inner: OnceLock::new(),
        // SAFETY: plain data; zero is its empty value.
        path: UnsafeCell::new(unsafe { core::mem::zeroed() }),
        own: None,
        ep_qp: std::sync::Mutex::new(None),
    });
    let h = handles::register(obj);
    let child = match make(lm, Arc::new(Sink(q)), h as u64) {
        Ok(m) => m,
        Err(e) => {
            drop(handles::take::<CCmId>(h));
            return Err(e.errno());
        }
    };
    let c = id_of(h)?;
    let _ = c.inner.set(child);
    c.sync_c();
    if l.own.is_some() {
        // A synchronous listener's requests are synchronous ids.
        doorbell_rdma_migrate_id(h, null_mut());
    }
    Ok(h)
}

/// Whether the id is synchronous (has a channel of its own).
pub(crate) fn own_queue(c: &CCmId) -> Option<Arc<Queue<CmEvent>>> {
    c.own.as_ref().map(|(_, q)| q.clone())
}

/// `rdma_destroy_id`: its events not yet taken go with it.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_destroy_id", Conv::MinusOne, || {
        let obj = handles::take::<CCmId>(id)?;
        // SAFETY: the object is ours now; the C part is plain data.
        let ch = unsafe { (*obj.c.get()).channel };
        if let Ok(c) = handles::get::<CEventChannel>(ch) {
            c.events.remove(|e| e.id == id as u64);
        }
        if let Some((own, _)) = &obj.own {
            channel::doorbell_rdma_destroy_event_channel(*own as *mut rdma_event_channel);
        }
        Ok(0)
    })
}

/// `rdma_bind_addr`.
///
/// # Safety
/// `addr` is NULL or a whole address of the family it names.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut sockaddr,
) -> c_int {
    guard("rdma_bind_addr", Conv::MinusOne, || {
        let c = id_of(id)?;
        // SAFETY: the caller's promise.
        let a = unsafe { socket_addr(addr) }?;
        c.id()?.bind_addr(a).map_err(errno)?;
        c.sync_c();
        Ok(0)
    })
}

/// `rdma_resolve_addr`.
///
/// # Safety
/// Each address is NULL or a whole address of the family it names.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut sockaddr,
    dst_addr: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    guard("rdma_resolve_addr", Conv::MinusOne, || {
        let c = id_of(id)?;
        let src = if src_addr.is_null() {
            None
        } else {
            // SAFETY: the caller's promise.
            Some(unsafe { socket_addr(src_addr) }?)
        };
        // SAFETY: the caller's promise.
        let dst = unsafe { socket_addr(dst_addr) }?;
        c.id()?.resolve_addr(src, dst, timeout_ms).map_err(errno)?;
        c.sync_c();
        c.complete()?;
        Ok(0)
    })
}

/// `rdma_resolve_route`.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    guard("rdma_resolve_route", Conv::MinusOne, || {
        let c = id_of(id)?;
        c.id()?.resolve_route(timeout_ms).map_err(errno)?;
        c.sync_c();
        c.complete()?;
        Ok(0)
    })
}

/// `rdma_get_src_port`: the bound port, network order; 0 if none.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id)
        .ok()
        .and_then(|c| c.id().ok()?.src())
        .map_or(0, |a| a.port().to_be())
}

/// `rdma_get_dst_port`: the destination's port, network order; 0 if none.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id)
        .ok()
        .and_then(|c| c.id().ok()?.dst())
        .map_or(0, |a| a.port().to_be())
}

/// `rdma_set_option`: RDMA_OPTION_ID's TOS (u8), REUSEADDR and AFONLY
/// (int, before binding) and ACK_TIMEOUT (u8); anything else, or a length
/// that does not fit the option, is EINVAL.
///
/// # Safety
/// `optval` points to `optlen` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: libc::size_t,
) -> c_int {
    guard("rdma_set_option", Conv::MinusOne, || {
        let m = id_of(id)?.id()?;
        if optval.is_null() || level != 0 {
            return Err(EINVAL);
        }
        let byte = || {
            // SAFETY: one byte, which the caller's length says is there.
            (optlen == 1).then(|| unsafe { *optval.cast::<u8>() })
        };
        let int = || {
            // SAFETY: an int, which the caller's length says is there.
            (optlen == core::mem::size_of::<c_int>())
                .then(|| unsafe { core::ptr::read_unaligned(optval.cast::<c_int>()) })
        };
        match optname {
            0 => m.set_tos(byte().ok_or(EINVAL)?),
            1 => m.set_reuseaddr(int().ok_or(EINVAL)? != 0).map_err(errno)?,
            2 => m.set_afonly(int().ok_or(EINVAL)? != 0).map_err(errno)?,
            3 => m.set_ack_timeout(byte().ok_or(EINVAL)?),
            _ => return Err(EINVAL),
        }
        Ok(0)
    })
}

/// `rdma_migrate_id`: later events, and those not yet taken, go to
/// `channel` (NULL: a channel of the id's own, which makes it synchronous).
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    guard("rdma_migrate_id", Conv::MinusOne, || {
        let old = id_of(id)?;
        let (sink, ch, own) = sink_for(channel)?;
        // SAFETY: no other thread uses the id now (C's rule).
        let old_ch = unsafe { (*old.c.get()).channel };
        let mut moved = Vec::new();
        if let Ok(c) = handles::get::<CEventChannel>(old_ch) {
            c.events.remove(|e| {
                let mine = e.id == id as u64;
                if mine {
                    moved.push(e.clone());
                }
                mine
            });
        }
        let mut obj = handles::take::<CCmId>(id)?;
        if let Some((prev, _)) = obj.own.take() {
            channel::doorbell_rdma_destroy_event_channel(prev as *mut rdma_event_channel);
        }
        obj.own = own;
        obj.c.get_mut().channel = ch;
        if let Some(m) = obj.inner.get() {
            m.set_sink(sink.clone());
        }
        for e in moved {
            doorbell_cma::EventSink::deliver(&*sink, e);
        }
        // The same address comes back: the object did not move.
        let again = handles::restore(obj);
        debug_assert_eq!(again, id);
        Ok(0)
    })
}

/// The id of an event's token, to update before the program sees it.
pub(crate) fn sync_for_event(token: u64) -> *mut rdma_cm_id {
    let h = token as *mut rdma_cm_id;
    if let Ok(c) = id_of(h) {
        c.sync_c();
    }
    h
}
