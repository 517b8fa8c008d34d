//! Shared receive queues of a hosted provider: the kernel's commands
//! (`mlx5_ib_create_srq`) and the public verbs on them.

// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]
#![allow(unsafe_code)]

use core::ffi::{c_int, c_void};
use core::mem::size_of;

use doorbell_driver::CreateSrqReq;
use doorbell_types::{HostAddr, Pdn, Srqn};
use libc::{EINVAL, EOPNOTSUPP, size_t};

use super::context::{Obj, owner};
use super::io::{db_page, errno, read_req, write_resp};
use crate::abi::consts::*;
use crate::abi::uapi::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::{self, ROUTER};

/// Bytes of a receive WQE of `max_sge` data segments after the 16-byte
/// next segment, as mlx5_ib and libmlx5 both size it: a power of two, at
/// least 32.
fn desc_size(max_sge: u32) -> Option<u32> {
    16u32
        .checked_add(max_sge.checked_mul(16)?)
        .map(|n| n.max(32).next_power_of_two())
}

/// `ibv_cmd_create_srq`: over the ring and doorbell record libmlx5
/// allocated; `max_wr` is its ring less one, `max_sge` what a WQE holds.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_create_srq(
    pd: *mut ibv_pd,
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_init_attr,
    cmd: *mut c_void,
    cmd_size: size_t,
    resp: *mut ib_uverbs_create_srq_resp,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_create_srq", Conv::Errno, || {
        let h = owner(pd).ok_or(EINVAL)?;
        if srq.is_null() || attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the provider's attributes.
        let a = unsafe { &mut *attr };
        let drv: mlx5_ib_create_srq = read_req(cmd, size_of::<ibv_create_srq>(), cmd_size)?;
        if drv.flags != 0 {
            return Err(EOPNOTSUPP);
        }
        let wqes = a
            .attr
            .max_wr
            .checked_add(1)
            .ok_or(EINVAL)?
            .next_power_of_two();
        let desc = desc_size(a.attr.max_sge).ok_or(EINVAL)?;
        let buf = HostAddr::new(drv.buf_addr);
        let len = u64::from(wqes) * u64::from(desc);
        let (dbp, dbl) = db_page(drv.db_addr);
        // SAFETY: a live PD of a hosted context.
        let pdn = Pdn::new(unsafe { (*pd).handle });
        let mem = h.memory();
        // SAFETY: the provider allocated the ring and the record page for
        // this SRQ and frees them only after destroying it; the grants are
        // withdrawn at destroy (or below, on failure).
        unsafe {
            mem.grant(buf, len);
            mem.grant(dbp, dbl);
        }
        let req = CreateSrqReq {
            pd: pdn,
            buf_addr: buf,
            buf_len: len,
            log_size: wqes.trailing_zeros() as u8,
            log_stride: (desc.trailing_zeros() - 4) as u8,
            db_addr: HostAddr::new(drv.db_addr),
        };
        let srqn = match h.ctx()?.ucontext().create_srq(req) {
            Ok(s) => s,
            Err(e) => {
                let _ = mem.revoke(buf, len);
                let _ = mem.revoke(dbp, dbl);
                return Err(errno(e));
            }
        };
        h.record_grant(Obj::Srq(srqn), buf, len);
        h.record_grant(Obj::Srq(srqn), dbp, dbl);
        let (max_wr, max_sge) = (wqes - 1, (desc - 16) / 16);
        events::lock(&h.srq_sizes).insert(srqn, (max_wr, max_sge));
        // SAFETY: checked non-NULL; the provider's new SRQ and a live PD.
        unsafe {
            (*srq).context = (*pd).context;
            (*srq).pd = pd;
            (*srq).handle = srqn.get();
            events::lock(&ROUTER)
                .srqs
                .insert(srqn, (srq as usize, (*pd).context as usize));
        }
        a.attr.max_wr = max_wr;
        a.attr.max_sge = max_sge;
        let r = ib_uverbs_create_srq_resp {
            srq_handle: srqn.get(),
            max_wr,
            max_sge,
            srqn: srqn.get(),
        };
        write_resp(resp.cast(), 0, resp_size, &r)?;
        write_resp(
            resp.cast(),
            size_of::<ib_uverbs_create_srq_resp>(),
            resp_size,
            &mlx5_ib_create_srq_resp {
                srqn: srqn.get(),
                reserved: 0,
            },
        )?;
        Ok(0)
    })
}

fn srqn_of(srq: *mut ibv_srq) -> Srqn {
    // SAFETY: a live SRQ of a hosted context; its handle is its number.
    Srqn::new(unsafe { (*srq).handle })
}

/// `ibv_cmd_destroy_srq`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard("ibv_cmd_destroy_srq", Conv::Errno, || {
        let h = owner(srq).ok_or(EINVAL)?;
        let srqn = srqn_of(srq);
        h.ctx()?.ucontext().destroy_srq(srqn).map_err(errno)?;
        h.revoke(Obj::Srq(srqn));
        events::lock(&h.srq_sizes).remove(&srqn);
        events::lock(&ROUTER).srqs.remove(&srqn);
        Ok(0)
    })
}

/// `ibv_cmd_modify_srq`: `IBV_SRQ_LIMIT` arms the limit event; resizing
/// (`IBV_SRQ_MAX_WR`) is refused, as mlx5 refuses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_modify_srq(
    srq: *mut ibv_srq,
    srq_attr: *mut ibv_srq_attr,
    srq_attr_mask: c_int,
    _cmd: *mut c_void,
    _cmd_size: size_t,
) -> c_int {
    guard("ibv_cmd_modify_srq", Conv::Errno, || {
        let h = owner(srq).ok_or(EINVAL)?;
        if srq_attr.is_null() || srq_attr_mask & IBV_SRQ_MAX_WR != 0 {
            return Err(EINVAL);
        }
        if srq_attr_mask & !IBV_SRQ_LIMIT != 0 {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: checked non-NULL.
        let limit = unsafe { (*srq_attr).srq_limit };
        h.ctx()?
            .ucontext()
            .modify_srq(srqn_of(srq), limit)
            .map_err(errno)?;
        Ok(0)
    })
}

/// `ibv_cmd_query_srq`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_query_srq(
    srq: *mut ibv_srq,
    srq_attr: *mut ibv_srq_attr,
    _cmd: *mut c_void,
    _cmd_size: size_t,
) -> c_int {
    guard("ibv_cmd_query_srq", Conv::Errno, || {
        let h = owner(srq).ok_or(EINVAL)?;
        if srq_attr.is_null() {
            return Err(EINVAL);
        }
        let srqn = srqn_of(srq);
        let limit = h.ctx()?.ucontext().query_srq(srqn).map_err(errno)?;
        let (max_wr, max_sge) = events::lock(&h.srq_sizes)
            .get(&srqn)
            .copied()
            .ok_or(EINVAL)?;
        // SAFETY: checked non-NULL.
        unsafe {
            srq_attr.write(ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: limit,
            })
        };
        Ok(0)
    })
}

/// `ibv_create_srq` on a hosted PD: the provider's, then the library's
/// fields.
pub(crate) fn create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> Option<Result<*mut ibv_srq, c_int>> {
    let h = owner(pd)?;
    Some(h.op(|o| o.create_srq).and_then(|f| {
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: the provider's op with the caller's arguments.
        let srq = unsafe { f(pd, attr) };
        if srq.is_null() {
            return Err(crate::boundary::errno().max(1));
        }
        // SAFETY: the provider's new SRQ, the caller's attributes.
        unsafe {
            (*srq).context = (*pd).context;
            (*srq).srq_context = (*attr).srq_context;
            (*srq).pd = pd;
            (*srq).events_completed = 0;
        }
        Ok(srq)
    }))
}

/// `ibv_destroy_srq` of a hosted SRQ.
pub(crate) fn destroy_srq(srq: *mut ibv_srq) -> Option<Result<c_int, c_int>> {
    let h = owner(srq)?;
    Some(h.op(|o| o.destroy_srq).map(|f| {
        // SAFETY: the provider's op on its SRQ.
        unsafe { f(srq) }
    }))
}

/// `ibv_modify_srq` of a hosted SRQ.
pub(crate) fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> Option<Result<c_int, c_int>> {
    let h = owner(srq)?;
    Some(h.op(|o| o.modify_srq).map(|f| {
        // SAFETY: the provider's op with the caller's arguments.
        unsafe { f(srq, attr, mask) }
    }))
}

/// `ibv_query_srq` of a hosted SRQ.
pub(crate) fn query_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
) -> Option<Result<c_int, c_int>> {
    let h = owner(srq)?;
    Some(h.op(|o| o.query_srq).map(|f| {
        // SAFETY: the provider's op with the caller's arguments.
        unsafe { f(srq, attr) }
    }))
}
