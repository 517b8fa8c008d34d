//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq` (arming the
//! limit event; resizing is refused as mlx5 refuses it), `ibv_query_srq`,
//! `ibv_destroy_srq` (EBUSY while a QP uses it), and the context op
//! `post_srq_recv`.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::c_int;

use doorbell_verbs::{Srq, SrqInitAttr};
use libc::{EINVAL, EOPNOTSUPP};

use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::{self, ROUTER};
use crate::handle;
use crate::handles;
use crate::pd::pd_of;
use crate::wr_batch::post_recv_chain;

#[repr(C)]
pub(crate) struct CSrq {
    srq: ibv_srq,
    pub(crate) inner: Srq,
}
handle!(CSrq, ibv_srq, srq, Srq);

/// `ibv_create_srq`: the sizes it grants are written back, as rdma-core
/// does.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_srq(pd_: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    guard("ibv_create_srq", Conv::Null, || {
        if let Some(r) = crate::hosted::srq::create_srq(pd_, attr) {
            return r;
        }
        // SAFETY: NULL is refused; the caller passes an ibv_srq_init_attr
        // it owns, into which the granted sizes are written back.
        let a = unsafe { attr.as_mut() }.ok_or(EINVAL)?;
        create_srq(pd_, a)
    })
}

fn create_srq(pd_: *mut ibv_pd, a: &mut ibv_srq_init_attr) -> Result<*mut ibv_srq, c_int> {
    let pd = pd_of(pd_)?;
    let inner = pd
        .inner
        .create_srq(&SrqInitAttr {
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge,
            srq_limit: a.attr.srq_limit,
        })
        .map_err(|e| e.errno())?;
    let got = inner.query();
    a.attr.max_wr = got.max_wr;
    a.attr.max_sge = got.max_sge;
    // SAFETY: ibv_srq is pointers, integers and pthread objects whose
    // all-zero value is their initializer on glibc.
    let mut srq: ibv_srq = unsafe { core::mem::zeroed() };
    srq.context = pd.pd.context;
    srq.srq_context = a.srq_context;
    srq.pd = pd_;
    srq.handle = inner.srqn().get();
    let srqn = inner.srqn();
    let h = handles::register(Box::new(CSrq { srq, inner }));
    events::lock(&ROUTER)
        .srqs
        .insert(srqn, (h as usize, pd.pd.context as usize));
    Ok(h)
}

/// `verbs_context.create_srq_ex`, which the inline `ibv_create_srq_ex`
/// calls for what it does not pass to `ibv_create_srq` itself: a basic SRQ
/// (no type, or `IBV_SRQT_BASIC`) is made as `ibv_create_srq` makes it, in
/// the PD given (other fields ignored, as mlx5 ignores them); XRC and
/// tag-matching SRQs are not doorbell's (EOPNOTSUPP); another type is
/// EINVAL.
pub(crate) unsafe extern "C" fn create_srq_ex(
    context_: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    guard("ibv_create_srq_ex", Conv::Null, || {
        // SAFETY: the caller's attributes; NULL is refused.
        let a = unsafe { attr.as_ref() }.copied().ok_or(EINVAL)?;
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC {
            return Err(if a.srq_type == IBV_SRQT_XRC || a.srq_type == IBV_SRQT_TM {
                EOPNOTSUPP
            } else {
                EINVAL
            });
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || pd_of(a.pd)?.pd.context != context_ {
            return Err(EINVAL);
        }
        // ibv_srq_init_attr is the first part of ibv_srq_init_attr_ex: the
        // sizes granted are written back into the caller's attributes.
        // SAFETY: `attr` was checked non-NULL above and is the caller's.
        let base = unsafe { &mut *attr.cast::<ibv_srq_init_attr>() };
        create_srq(a.pd, base)
    })
}

/// `ibv_destroy_srq`: EBUSY while a QP uses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard("ibv_destroy_srq", Conv::Errno, || {
        if let Some(r) = crate::hosted::srq::destroy_srq(srq) {
            return r;
        }
        let obj = handles::take::<CSrq>(srq)?;
        if obj.inner.is_shared() {
            handles::restore(obj);
            return Err(libc::EBUSY);
        }
        events::lock(&ROUTER).srqs.remove(&obj.inner.srqn());
        drop(obj);
        Ok(0)
    })
}

/// The SRQ behind `srq`.
pub(crate) fn srq_of<'a>(srq: *mut ibv_srq) -> Result<&'a CSrq, c_int> {
    handles::get::<CSrq>(srq)
}

/// `ibv_modify_srq`: `IBV_SRQ_LIMIT` arms the limit event; `IBV_SRQ_MAX_WR`
/// (resizing) is refused with EINVAL by the provider, as mlx5 refuses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    srq_attr: *mut ibv_srq_attr,
    srq_attr_mask: c_int,
) -> c_int {
    guard("ibv_modify_srq", Conv::Errno, || {
        if let Some(r) = crate::hosted::srq::modify_srq(srq, srq_attr, srq_attr_mask) {
            return r;
        }
        let s = srq_of(srq)?;
        if srq_attr.is_null() {
            return Err(EINVAL);
        }
        if srq_attr_mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: checked non-NULL.
        let a = unsafe { *srq_attr };
        let max_wr = (srq_attr_mask & IBV_SRQ_MAX_WR != 0).then_some(a.max_wr);
        let limit = (srq_attr_mask & IBV_SRQ_LIMIT != 0).then_some(a.srq_limit);
        s.inner.modify(max_wr, limit).map_err(|e| e.errno())?;
        Ok(0)
    })
}

/// `ibv_query_srq`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
    guard("ibv_query_srq", Conv::Errno, || {
        if let Some(r) = crate::hosted::srq::query_srq(srq, srq_attr) {
            return r;
        }
        let s = srq_of(srq)?;
        if srq_attr.is_null() {
            return Err(EINVAL);
        }
        let q = s.inner.query();
        // SAFETY: checked non-NULL.
        unsafe {
            srq_attr.write(ibv_srq_attr {
                max_wr: q.max_wr,
                max_sge: q.max_sge,
                srq_limit: q.srq_limit,
            })
        };
        Ok(0)
    })
}

/// `ops.post_srq_recv`.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("ibv_post_srq_recv", Conv::Errno, || {
        post_recv_chain(wr, bad_wr, srq_of(srq), |s, wrs| {
            s.inner.post_recv_iter(wrs)
        })
    })
}
