//! The kernel's side of a hosted provider's QPs: `ibv_cmd_create_qp_ex`
//! and `_ex2` (`mlx5_ib_create_qp`), modify, query and destroy.

// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]
#![allow(unsafe_code)]

use core::ffi::{c_int, c_uint, c_void};
use core::mem::size_of;

use doorbell_driver::CreateQpReq;
use doorbell_hif::QpState;
use doorbell_types::{Cqn, HostAddr, Pdn, Qpn, Srqn};
use libc::{EINVAL, EOPNOTSUPP, size_t};

use super::context::{HostedCtx, Obj, QpReg, context, owner};
use super::io::{db_page, errno, read_req, write_resp};
use crate::abi::consts::*;
use crate::abi::private34::*;
use crate::abi::uapi::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::{self, ROUTER};

/// `enum ibv_qp_init_attr_mask`: what only `_ex2` carries.
const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 3;
const IBV_QP_INIT_ATTR_MAX_TSO_HEADER: u32 = 1 << 4;
const IBV_QP_INIT_ATTR_IND_TABLE: u32 = 1 << 5;
const IBV_QP_INIT_ATTR_RX_HASH: u32 = 1 << 6;

/// `ibv_cmd_create_qp_ex`: an RC or UD QP over the buffer and doorbell
/// record libmlx5 allocated (`mlx5_ib_create_qp`); the response carries
/// the QPN and the gross bfreg index libmlx5 indexes its registers with.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_create_qp_ex(
    context_: *mut ibv_context,
    qp: *mut verbs_qp,
    attr_ex: *mut ibv_qp_init_attr_ex,
    cmd: *mut ibv_create_qp,
    cmd_size: size_t,
    resp: *mut ib_uverbs_create_qp_resp,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_create_qp_ex", Conv::Errno, || {
        let drv = read_req(cmd.cast(), size_of::<ibv_create_qp>(), cmd_size)?;
        let (r, d) = create(context_, qp, attr_ex, &drv)?;
        write_resp(resp.cast(), 0, resp_size, &r)?;
        write_resp(
            resp.cast(),
            size_of::<ib_uverbs_create_qp_resp>(),
            resp_size,
            &d,
        )?;
        Ok(0)
    })
}

/// `ibv_cmd_create_qp_ex2` (libmlx5 uses it when create flags, TSO or RSS
/// are asked for): as `ibv_cmd_create_qp_ex`; create flags, which doorbell
/// has none of, are refused (EOPNOTSUPP).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_create_qp_ex2(
    context_: *mut ibv_context,
    qp: *mut verbs_qp,
    attr_ex: *mut ibv_qp_init_attr_ex,
    cmd: *mut c_void,
    cmd_size: size_t,
    resp: *mut c_void,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_create_qp_ex2", Conv::Errno, || {
        if attr_ex.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the provider's attributes.
        let a = unsafe { &*attr_ex };
        let extra = IBV_QP_INIT_ATTR_CREATE_FLAGS
            | IBV_QP_INIT_ATTR_MAX_TSO_HEADER
            | IBV_QP_INIT_ATTR_IND_TABLE
            | IBV_QP_INIT_ATTR_RX_HASH;
        let asked = a.comp_mask & extra;
        let flags = if asked & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 {
            a.create_flags
        } else {
            0
        };
        if asked & !IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 || flags != 0 {
            return Err(EOPNOTSUPP);
        }
        let drv = read_req(cmd, size_of::<ibv_create_qp_ex>(), cmd_size)?;
        let (r, d) = create(context_, qp, attr_ex, &drv)?;
        let ex = ib_uverbs_ex_create_qp_resp {
            base: r,
            comp_mask: 0,
            response_length: resp_size.min(u32::MAX as usize) as u32,
        };
        write_resp(resp, 0, resp_size, &ex)?;
        write_resp(
            resp,
            size_of::<ib_uverbs_ex_create_qp_resp>(),
            resp_size,
            &d,
        )?;
        Ok(0)
    })
}

/// The kernel's part of creating a QP, whichever command asked.
fn create(
    context_: *mut ibv_context,
    qp: *mut verbs_qp,
    attr_ex: *mut ibv_qp_init_attr_ex,
    drv: &mlx5_ib_create_qp,
) -> Result<(ib_uverbs_create_qp_resp, mlx5_ib_create_qp_resp), c_int> {
    let h = context(context_).ok_or(EINVAL)?;
    if qp.is_null() || attr_ex.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: checked non-NULL; the provider's attributes.
    let a = unsafe { &mut *attr_ex };
    if drv.flags & MLX5_QP_FLAG_BFREG_INDEX != 0 {
        // Thread domains' dynamic registers: not hosted yet.
        return Err(EOPNOTSUPP);
    }
    let qp_type = crate::qp::qp_type_of(a.qp_type)?;
    if a.pd.is_null() || a.send_cq.is_null() || a.recv_cq.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: the provider's live PD, CQs and SRQ of this context, whose
    // handles are their numbers.
    let (pd, send_cq, recv_cq, srq) = unsafe {
        (
            Pdn::new((*a.pd).handle),
            Cqn::new((*a.send_cq).handle),
            Cqn::new((*a.recv_cq).handle),
            (!a.srq.is_null()).then(|| Srqn::new((*a.srq).handle)),
        )
    };
    let log2 = |n: u32| -> Result<u8, c_int> {
        match n {
            0 => Ok(0),
            n if n.is_power_of_two() => Ok(n.trailing_zeros() as u8),
            _ => Err(EINVAL),
        }
    };
    let rq_bytes = if srq.is_some() {
        0
    } else {
        u64::from(drv.rq_wqe_count) << drv.rq_wqe_shift.min(16)
    };
    let sq_bytes = u64::from(drv.sq_wqe_count) * 64;
    let buf_len = (rq_bytes + sq_bytes).max(64);
    let buf = HostAddr::new(drv.buf_addr);
    let (dbp, dbl) = db_page(drv.db_addr);
    let req = CreateQpReq {
        qp_type,
        pd,
        send_cq,
        recv_cq,
        buf_addr: buf,
        buf_len,
        log_sq_size: log2(drv.sq_wqe_count)?,
        log_rq_size: log2(drv.rq_wqe_count)?,
        log_rq_stride: (drv.rq_wqe_shift.max(4) - 4) as u8,
        db_addr: HostAddr::new(drv.db_addr),
        srq,
        dyn_bfreg: None,
        gsi: false,
        user_index: drv.uidx,
    };
    let mem = h.memory();
    // SAFETY: the provider allocated the queue buffer and the record
    // page for this QP and frees them only after destroying it; the
    // grants are withdrawn at destroy (or below, on failure).
    unsafe {
        mem.grant(buf, buf_len);
        mem.grant(dbp, dbl);
    }
    let ucontext = h.ctx()?.ucontext();
    let out = match ucontext.create_qp(req) {
        Ok(o) => o,
        Err(e) => {
            let _ = mem.revoke(buf, buf_len);
            let _ = mem.revoke(dbp, dbl);
            return Err(errno(e));
        }
    };
    let qpn = out.qpn;
    h.record_grant(Obj::Qp(qpn), buf, buf_len);
    h.record_grant(Obj::Qp(qpn), dbp, dbl);
    if let Some(uar) = ucontext.qp_uar(qpn) {
        let counter = (drv.db_addr + 4) as *const u32;
        // SAFETY: the send counter of the record libmlx5 allocated for
        // this QP (word 1, MLX5_SND_DBR), aligned in a page it keeps
        // until the QP is destroyed, which forgets it first.
        unsafe { h.watch.add(qpn, uar, send_cq, counter) };
        // The gross index counts four registers per UAR page.
        let r = ucontext.resp();
        let gross = out.bfreg_index as usize;
        h.set_reg(
            qpn,
            QpReg {
                uar,
                page: gross / 4,
                offset: 0x800 + (gross % 4) * r.bf_reg_size as usize,
                half: (r.bf_reg_size as usize / 2).max(8),
            },
        );
    }
    // SAFETY: checked non-NULL; the provider's new QP, filled as
    // libibverbs' set_qp fills it.
    unsafe {
        let b = &mut (*qp).qp_ex.qp_base;
        b.context = context_;
        b.qp_context = a.qp_context;
        b.pd = a.pd;
        b.send_cq = a.send_cq;
        b.recv_cq = a.recv_cq;
        b.srq = a.srq;
        b.qp_type = a.qp_type;
        b.state = IBV_QPS_RESET;
        b.events_completed = 0;
        b.handle = qpn.get();
        b.qp_num = qpn.get();
    }
    events::lock(&ROUTER)
        .qps
        .insert(qpn, (qp as usize, context_ as usize));
    let rq = if srq.is_some() {
        (0, 0)
    } else {
        (drv.rq_wqe_count, (1u32 << drv.rq_wqe_shift.min(16)) / 16)
    };
    events::lock(&h.qp_caps).insert(qpn, (rq.0, rq.1, a.sq_sig_all != 0));
    let r = ib_uverbs_create_qp_resp {
        qp_handle: qpn.get(),
        qpn: qpn.get(),
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
        reserved: 0,
    };
    let d = mlx5_ib_create_qp_resp {
        bfreg_index: out.bfreg_index,
        ..Default::default()
    };
    Ok((r, d))
}

/// The state a modify moves `qp` to: the one asked, or the current one.
fn target_state(
    h: &HostedCtx,
    qpn: Qpn,
    attr: &ibv_qp_attr,
    mask: c_uint,
) -> Result<QpState, c_int> {
    if mask & IBV_QP_STATE != 0 {
        crate::qp::state_of(attr.qp_state)
    } else {
        Ok(h.ctx()?.ucontext().query_qp(qpn).map_err(errno)?.0)
    }
}

fn modify(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> Result<c_int, c_int> {
    let h = owner(qp).ok_or(EINVAL)?;
    if attr.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: checked non-NULL; a live QP of a hosted context.
    let (a, qpn) = unsafe { (&*attr, Qpn::new((*qp).qp_num)) };
    let mask = attr_mask as c_uint;
    let to = target_state(&h, qpn, a, mask)?;
    let attrs = crate::qp::attrs_of(a, mask)?;
    h.ctx()?
        .ucontext()
        .modify_qp(qpn, to, attrs)
        .map_err(errno)?;
    Ok(0)
}

/// `ibv_cmd_modify_qp`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    _cmd: *mut c_void,
    _cmd_size: size_t,
) -> c_int {
    guard("ibv_cmd_modify_qp", Conv::Errno, || {
        modify(qp, attr, attr_mask)
    })
}

/// `ibv_cmd_modify_qp_ex` (libmlx5 uses it for ECE and rate limits): as
/// `ibv_cmd_modify_qp`; the response's extensions read as zero.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_modify_qp_ex(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    _cmd: *mut c_void,
    _cmd_size: size_t,
    resp: *mut c_void,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_modify_qp_ex", Conv::Errno, || {
        let r = modify(qp, attr, attr_mask)?;
        if !resp.is_null() {
            // SAFETY: the provider's response of resp_size bytes.
            unsafe { core::ptr::write_bytes(resp.cast::<u8>(), 0, resp_size) };
        }
        Ok(r)
    })
}

/// `ibv_cmd_query_qp`: the attributes as set; the caps are the provider's
/// (libmlx5 fills them from its own sizes).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
    _cmd: *mut c_void,
    _cmd_size: size_t,
) -> c_int {
    guard("ibv_cmd_query_qp", Conv::Errno, || {
        let h = owner(qp).ok_or(EINVAL)?;
        if attr.is_null() || init_attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: a live QP of a hosted context.
        let b = unsafe { core::ptr::read(qp) };
        let (state, s) = h
            .ctx()?
            .ucontext()
            .query_qp(Qpn::new(b.qp_num))
            .map_err(errno)?;
        let mut a = crate::qp::c_qp_attr(state, &s);
        // The receive side is the kernel's to report (libmlx5 fills in the
        // send side from its own sizes).
        let (rwr, rsge, sig_all) = events::lock(&h.qp_caps)
            .get(&Qpn::new(b.qp_num))
            .copied()
            .unwrap_or_default();
        a.cap.max_recv_wr = rwr;
        a.cap.max_recv_sge = rsge;
        let init = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: a.cap,
            qp_type: b.qp_type,
            sq_sig_all: c_int::from(sig_all),
        };
        // SAFETY: both checked non-NULL; whole structs.
        unsafe {
            attr.write(a);
            init_attr.write(init);
        }
        Ok(0)
    })
}

/// `ibv_cmd_destroy_qp`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard("ibv_cmd_destroy_qp", Conv::Errno, || {
        let h = owner(qp).ok_or(EINVAL)?;
        // SAFETY: a live QP of a hosted context.
        let qpn = Qpn::new(unsafe { (*qp).qp_num });
        h.ctx()?.ucontext().destroy_qp(qpn).map_err(errno)?;
        // The record stays mapped until this returns.
        h.watch.forget(qpn);
        h.forget_reg(qpn);
        events::lock(&h.qp_caps).remove(&qpn);
        h.revoke(Obj::Qp(qpn));
        events::lock(&ROUTER).qps.remove(&qpn);
        Ok(0)
    })
}
