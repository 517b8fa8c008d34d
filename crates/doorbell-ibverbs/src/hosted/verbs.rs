//! libibverbs' part for a hosted provider: the private entry points it
//! calls (`_verbs_init_and_alloc_context`, `verbs_set_ops`,
//! `verbs_uninit_context`, `verbs_init_cq`, `verbs_register_driver_34`), and
//! the public verbs on its objects, which call its ops as libibverbs' own
//! `verbs.c` does. Each public helper answers `None` for an object that is
//! not hosted, and the export goes on with its own handles.

// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::{c_int, c_uint, c_void};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use libc::{EINVAL, EOPNOTSUPP, size_t};

use super::HostedDevice;
use super::context::{self as hctx, HasContext, HostedCtx, context, owner};
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::{self, ROUTER};

/// `verbs_register_driver_34`: a provider's constructor registers its
/// device ops (Debian's libmlx5 and libefa do when they are loaded). Only
/// a hosted provider's are ever used.
#[unsafe(no_mangle)]
pub extern "C" fn verbs_register_driver_34(ops: *const verbs_device_ops) {
    guard("verbs_register_driver_34", Conv::Abort, || {
        super::register(ops);
        Ok(())
    })
}

/// `_verbs_init_and_alloc_context`: see [`hctx::init_and_alloc`].
#[unsafe(no_mangle)]
pub extern "C" fn _verbs_init_and_alloc_context(
    device: *mut ibv_device,
    cmd_fd: c_int,
    alloc_size: size_t,
    context_offset: *mut verbs_context,
    _driver_id: u32,
) -> *mut c_void {
    guard("_verbs_init_and_alloc_context", Conv::Null, || {
        hctx::init_and_alloc(device, cmd_fd, alloc_size, context_offset as usize)
    })
}

/// `verbs_set_ops`: see [`hctx::set_ops`].
#[unsafe(no_mangle)]
pub extern "C" fn verbs_set_ops(vctx: *mut verbs_context, ops: *const verbs_context_ops) {
    guard("verbs_set_ops", Conv::Abort, || {
        if vctx.is_null() || ops.is_null() {
            return Ok(());
        }
        // SAFETY: checked non-NULL; the provider's static ops table.
        let _ = hctx::set_ops(vctx, unsafe { &*ops });
        Ok(())
    })
}

/// `verbs_uninit_context`: see [`hctx::uninit`].
#[unsafe(no_mangle)]
pub extern "C" fn verbs_uninit_context(vctx: *mut verbs_context) {
    guard("verbs_uninit_context", Conv::Abort, || {
        if !vctx.is_null() {
            let _ = hctx::uninit(vctx);
        }
        Ok(())
    })
}

/// `verbs_init_cq`: the library's fields of a CQ the provider made, and
/// one more CQ on its channel.
#[unsafe(no_mangle)]
pub extern "C" fn verbs_init_cq(
    cq: *mut ibv_cq,
    context_: *mut ibv_context,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
) {
    guard("verbs_init_cq", Conv::Abort, || {
        init_cq(cq, context_, channel, cq_context);
        Ok(())
    })
}

fn init_cq(
    cq: *mut ibv_cq,
    context_: *mut ibv_context,
    channel: *mut ibv_comp_channel,
    cq_context: *mut c_void,
) {
    if cq.is_null() {
        return;
    }
    // SAFETY: the provider's new CQ; its mutex and condition variable are
    // zeroed (calloc), which is their static initializer on glibc.
    unsafe {
        (*cq).context = context_;
        (*cq).channel = channel;
        (*cq).cq_context = cq_context;
        (*cq).comp_events_completed = 0;
        (*cq).async_events_completed = 0;
    }
    crate::channel::channel_uses(channel, 1);
}

/// `ibv_open_device` of the hosted device.
pub(crate) fn open_device(dev: *mut ibv_device) -> Option<Result<*mut ibv_context, c_int>> {
    let d = super::is_device(dev)?;
    Some(open(d, core::ptr::null_mut()))
}

/// `ibv_open_device` of the hosted device: the provider makes the context.
fn open(dev: &'static HostedDevice, private_data: *mut c_void) -> Result<*mut ibv_context, c_int> {
    let alloc = dev.ops.alloc_context.ok_or(EOPNOTSUPP)?;
    let fd = memfd()?;
    // SAFETY: the provider's alloc_context with its own device and a
    // command fd it may map; it calls back into this library and returns
    // its verbs_context or NULL (errno set).
    let vctx = unsafe { alloc(dev.ibv_device(), fd, private_data) };
    if vctx.is_null() {
        return Err(crate::boundary::errno().max(1));
    }
    // SAFETY: the provider's fresh context.
    let c = unsafe { core::ptr::addr_of_mut!((*vctx).context) };
    let h = context(c).ok_or(EINVAL)?;
    let ops = h.ops();
    if let (Some(post_send), Some(poll_cq), Some(req_notify_cq)) =
        (ops.post_send, ops.poll_cq, ops.req_notify_cq)
    {
        let _ = h.fast.set(hctx::Fast {
            post_send,
            poll_cq,
            req_notify_cq,
        });
    }
    // SAFETY: the provider's live verbs_context; the library's own slots
    // are set as libibverbs' set_lib_ops does, and the two fast-path ops
    // that ring doorbells are wrapped.
    unsafe {
        let v = &mut *vctx;
        v.query_port = Some(query_port_lib);
        v.create_cq_ex = Some(create_cq_ex_lib);
        if h.fast.get().is_some() {
            v.context.ops.post_send = Some(hctx::post_send);
            v.context.ops.poll_cq = Some(hctx::poll_cq);
            v.context.ops.req_notify_cq = Some(hctx::req_notify_cq);
        }
    }
    events::lock(&ROUTER).contexts.insert(c as usize);
    crate::stats::opened(h.nic.nic());
    Ok(c)
}

/// The command fd: a sparse memfd whose pages are the UAR pages libmlx5
/// maps (it writes doorbells there; the device learns of them from the
/// wrapped ops).
fn memfd() -> Result<RawFd, c_int> {
    // SAFETY: a NUL-terminated name; the result is a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"doorbell-uar".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::boundary::errno().max(1));
    }
    // SAFETY: our own new fd.
    if unsafe { libc::ftruncate(fd, super::uar::CMD_FD_BYTES as i64) } != 0 {
        let e = crate::boundary::errno().max(1);
        // SAFETY: as above; closed once.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        return Err(e);
    }
    Ok(fd)
}

/// `verbs_open_device`: `ibv_open_device` with the provider's own
/// attributes (`mlx5dv_open_device` passes its `mlx5dv_context_attr`).
#[unsafe(no_mangle)]
pub extern "C" fn verbs_open_device(
    device: *mut ibv_device,
    private_data: *mut c_void,
) -> *mut ibv_context {
    guard("verbs_open_device", Conv::Null, || {
        let d = super::is_device(device).ok_or(EINVAL)?;
        open(d, private_data)
    })
}

/// `ibv_close_device` of a hosted context: the provider frees it.
pub(crate) fn close_device(c: *mut ibv_context) -> Option<Result<c_int, c_int>> {
    let h = context(c)?;
    Some(h.op(|o| o.free_context).map(|f| {
        drop(h);
        // SAFETY: the provider's own op on its own context.
        unsafe { f(c) };
        0
    }))
}

/// The extended attributes of a hosted context's device.
pub(crate) fn device_attr_ex(h: &HostedCtx) -> Result<ibv_device_attr_ex, c_int> {
    Ok(crate::attrs::device_attr_ex_of(h.ctx()?, h.device.guid))
}

/// `ibv_query_device` of a hosted context: the provider's
/// `query_device_ex` with the legacy struct's size.
pub(crate) fn query_device(
    c: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> Option<Result<c_int, c_int>> {
    let h = context(c)?;
    Some(h.op(|o| o.query_device_ex).and_then(|f| {
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the provider's op; the legacy struct is the first part
        // of the extended one, and its size bounds what is written.
        let r = unsafe {
            f(
                c,
                core::ptr::null(),
                attr.cast(),
                core::mem::size_of::<ibv_device_attr>(),
            )
        };
        Ok(r)
    }))
}

/// The port through the provider's `query_port`, whole.
fn port_of(h: &HostedCtx, c: *mut ibv_context, port: u8) -> Result<ibv_port_attr, c_int> {
    let f = h.op(|o| o.query_port)?;
    // SAFETY: ibv_port_attr is plain data.
    let mut a: ibv_port_attr = unsafe { core::mem::zeroed() };
    // SAFETY: the provider's op with a whole struct.
    match unsafe { f(c, port, &mut a) } {
        0 => Ok(a),
        e => Err(e),
    }
}

/// `ibv_query_port@IBVERBS_1.1` of a hosted context: the compat struct.
pub(crate) fn query_port_compat(
    c: *mut ibv_context,
    port: u8,
    out: *mut _compat_ibv_port_attr,
) -> Option<Result<c_int, c_int>> {
    let h = context(c)?;
    Some(port_of(&h, c, port).and_then(|a| {
        if out.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the compat struct is the first 48 bytes of the full one
        // (checked by the layout test); the caller gives 48.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(&a).cast::<u8>(),
                out.cast::<u8>(),
                core::mem::size_of::<_compat_ibv_port_attr>(),
            )
        };
        Ok(0)
    }))
}

/// `verbs_context.query_port` of a hosted context (the inline
/// `ibv_query_port`, with the caller's struct size).
pub(crate) unsafe extern "C" fn query_port_lib(
    c: *mut ibv_context,
    port: u8,
    out: *mut ibv_port_attr,
    len: size_t,
) -> c_int {
    guard("ibv_query_port", Conv::Errno, || {
        let h = context(c).ok_or(EINVAL)?;
        let a = port_of(&h, c, port)?;
        if out.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the caller's struct has `len` bytes; at most that many are
        // written, zero past ours.
        unsafe {
            let dst = out.cast::<u8>();
            core::ptr::write_bytes(dst, 0, len);
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(&a).cast::<u8>(),
                dst,
                core::mem::size_of::<ibv_port_attr>().min(len),
            );
        }
        Ok(0)
    })
}

/// `verbs_context.create_cq_ex` of a hosted context: the provider's, then
/// the library's fields.
pub(crate) unsafe extern "C" fn create_cq_ex_lib(
    c: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    guard("ibv_create_cq_ex", Conv::Null, || {
        let h = context(c).ok_or(EINVAL)?;
        let f = h.op(|o| o.create_cq_ex)?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the provider's op with the caller's attributes.
        let cq = unsafe { f(c, attr) };
        if cq.is_null() {
            return Err(crate::boundary::errno().max(1));
        }
        // SAFETY: checked non-NULL above; read before the provider's CQ is
        // handed out.
        let (channel, cq_context) = unsafe { ((*attr).channel, (*attr).cq_context) };
        init_cq(cq.cast(), c, channel, cq_context);
        Ok(cq)
    })
}

/// Calls the op `pick` chooses of the context that owns `obj`, if it is
/// hosted.
fn with_owner<T: HasContext, R>(
    obj: *mut T,
    f: impl FnOnce(Arc<HostedCtx>) -> Result<R, c_int>,
) -> Option<Result<R, c_int>> {
    owner(obj).map(f)
}

/// A NULL object from the provider is its errno.
fn made<T>(p: *mut T) -> Result<*mut T, c_int> {
    if p.is_null() {
        Err(crate::boundary::errno().max(1))
    } else {
        Ok(p)
    }
}

/// `ibv_alloc_pd`.
pub(crate) fn alloc_pd(c: *mut ibv_context) -> Option<Result<*mut ibv_pd, c_int>> {
    let h = context(c)?;
    Some(h.op(|o| o.alloc_pd).and_then(|f| {
        // SAFETY: the provider's op on its context.
        let pd = made(unsafe { f(c) })?;
        // SAFETY: the provider's new PD.
        unsafe { (*pd).context = c };
        Ok(pd)
    }))
}

/// `ibv_dealloc_pd`.
pub(crate) fn dealloc_pd(pd: *mut ibv_pd) -> Option<Result<c_int, c_int>> {
    with_owner(pd, |h| {
        let f = h.op(|o| o.dealloc_pd)?;
        // SAFETY: the provider's op on its PD.
        Ok(unsafe { f(pd) })
    })
}

/// `ibv_reg_mr` and its IOVA forms.
pub(crate) fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_int,
) -> Option<Result<*mut ibv_mr, c_int>> {
    with_owner(pd, |h| {
        let f = h.op(|o| o.reg_mr)?;
        // SAFETY: the provider's op with the caller's arguments.
        let mr = made(unsafe { f(pd, addr, length, iova, access) })?;
        // SAFETY: the provider's new MR and the caller's live PD.
        unsafe {
            (*mr).context = (*pd).context;
            (*mr).pd = pd;
            (*mr).addr = addr;
            (*mr).length = length;
        }
        Ok(mr)
    })
}

/// `ibv_dereg_mr`.
pub(crate) fn dereg_mr(mr: *mut ibv_mr) -> Option<Result<c_int, c_int>> {
    with_owner(mr, |h| {
        let f = h.op(|o| o.dereg_mr)?;
        // SAFETY: the provider's op; its MRs are verbs_mr with the ibv_mr
        // first.
        Ok(unsafe { f(mr.cast::<verbs_mr>()) })
    })
}

/// `ibv_create_cq`.
pub(crate) fn create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> Option<Result<*mut ibv_cq, c_int>> {
    let h = context(c)?;
    Some(h.op(|o| o.create_cq).and_then(|f| {
        // SAFETY: the provider's op with the caller's arguments.
        let cq = made(unsafe { f(c, cqe, channel, comp_vector) })?;
        init_cq(cq, c, channel, cq_context);
        Ok(cq)
    }))
}

/// `ibv_destroy_cq`: one CQ fewer on its channel once it is gone.
pub(crate) fn destroy_cq(cq: *mut ibv_cq) -> Option<Result<c_int, c_int>> {
    with_owner(cq, |h| {
        let f = h.op(|o| o.destroy_cq)?;
        // SAFETY: the provider's live CQ.
        let channel = unsafe { (*cq).channel };
        // SAFETY: the provider's op on its CQ.
        let r = unsafe { f(cq) };
        if r == 0 {
            crate::channel::channel_uses(channel, -1);
        }
        Ok(r)
    })
}

/// `ibv_create_qp`.
pub(crate) fn create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Option<Result<*mut ibv_qp, c_int>> {
    with_owner(pd, |h| {
        let f = h.op(|o| o.create_qp)?;
        // SAFETY: the provider's op with the caller's arguments.
        made(unsafe { f(pd, attr) })
    })
}

/// `ibv_destroy_qp`.
pub(crate) fn destroy_qp(qp: *mut ibv_qp) -> Option<Result<c_int, c_int>> {
    with_owner(qp, |h| {
        let f = h.op(|o| o.destroy_qp)?;
        // SAFETY: the provider's op on its QP.
        Ok(unsafe { f(qp) })
    })
}

/// `ibv_modify_qp`: the QP's `state` follows a successful state change.
pub(crate) fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> Option<Result<c_int, c_int>> {
    with_owner(qp, |h| {
        let f = h.op(|o| o.modify_qp)?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the provider's op with the caller's arguments.
        let r = unsafe { f(qp, attr, mask) };
        if r == 0 && mask as c_uint & crate::abi::consts::IBV_QP_STATE != 0 {
            // SAFETY: checked non-NULL; the provider's live QP.
            unsafe { (*qp).state = (*attr).qp_state };
        }
        Ok(r)
    })
}

/// `ibv_query_qp`.
pub(crate) fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> Option<Result<c_int, c_int>> {
    with_owner(qp, |h| {
        let f = h.op(|o| o.query_qp)?;
        // SAFETY: the provider's op with the caller's arguments.
        Ok(unsafe { f(qp, attr, mask, init) })
    })
}

/// `ibv_create_ah`.
pub(crate) fn create_ah(
    pd: *mut ibv_pd,
    attr: *mut ibv_ah_attr,
) -> Option<Result<*mut ibv_ah, c_int>> {
    with_owner(pd, |h| {
        let f = h.op(|o| o.create_ah)?;
        // SAFETY: the provider's op with the caller's arguments.
        let ah = made(unsafe { f(pd, attr) })?;
        // SAFETY: the provider's new AH and the caller's live PD.
        unsafe {
            (*ah).context = (*pd).context;
            (*ah).pd = pd;
        }
        Ok(ah)
    })
}

/// `ibv_destroy_ah`.
pub(crate) fn destroy_ah(ah: *mut ibv_ah) -> Option<Result<c_int, c_int>> {
    with_owner(ah, |h| {
        let f = h.op(|o| o.destroy_ah)?;
        // SAFETY: the provider's op on its AH.
        Ok(unsafe { f(ah) })
    })
}

/// `ibv_qp_to_qp_ex`: the extended QP if the provider made one
/// (`VERBS_QP_EX`).
pub(crate) fn qp_to_qp_ex(qp: *mut ibv_qp) -> Option<Result<*mut ibv_qp_ex, c_int>> {
    with_owner(qp, |_| {
        let v = qp.cast::<verbs_qp>();
        // SAFETY: the provider's QPs are verbs_qp, the ibv_qp first.
        if unsafe { (*v).comp_mask } & 2 != 0 {
            Ok(qp.cast::<ibv_qp_ex>())
        } else {
            Err(libc::EOPNOTSUPP)
        }
    })
}

/// A completion event of hosted CQ `cq` is being handed to the program:
/// its `cq_context`, after the provider's `cq_event` (libmlx5 counts arms
/// there).
pub(crate) fn cq_event_taken(cq: *mut ibv_cq) -> Option<*mut c_void> {
    let h = owner(cq)?;
    if let Ok(f) = h.op(|o| o.cq_event) {
        // SAFETY: the provider's op on its CQ.
        unsafe { f(cq) };
    }
    h.event_taken(cq);
    // SAFETY: the provider's live CQ.
    Some(unsafe { (*cq).cq_context })
}

/// `ibv_ack_cq_events` of a hosted CQ.
pub(crate) fn ack_cq_events(cq: *mut ibv_cq, n: c_uint) -> Option<()> {
    let h = owner(cq)?;
    let n = h.events_acked(cq, n);
    // SAFETY: the provider's live CQ; C only reads this counter.
    unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(n) };
    Some(())
}

/// `ibv_get_async_event` of a hosted context: the next event, then the
/// provider's `async_event`.
pub(crate) fn get_async_event(
    c: *mut ibv_context,
    event: *mut ibv_async_event,
) -> Option<Result<c_int, c_int>> {
    let h = context(c)?;
    Some((|| {
        if event.is_null() {
            return Err(EINVAL);
        }
        let e = h.async_events.pop()?;
        // SAFETY: checked non-NULL.
        unsafe { event.write(e.0) };
        if let Ok(f) = h.op(|o| o.async_event) {
            // SAFETY: the provider's op with the event it is told of.
            unsafe { f(c, event) };
        }
        Ok(0)
    })())
}
