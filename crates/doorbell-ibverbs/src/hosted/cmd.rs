//! The kernel's side: the `ibv_cmd_*` calls a hosted provider makes, each
//! answered as uverbs and mlx5_ib answer it, with the driver-specific
//! request and response of `<rdma/mlx5-abi.h>`, through `doorbell-driver`.
//! Requests and responses are copied as the kernel copies them
//! ([`super::io`]).

// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::{c_int, c_uint, c_void};
use core::mem::size_of;

use doorbell_driver::AllocUcontextReq;
use doorbell_types::{Cqn, HostAddr, Mkey, Pdn};
use doorbell_verbs::ProviderConfig;
use libc::{EINVAL, EOPNOTSUPP, size_t};

use super::context::{HostedCtx, Obj, context, owner};
use super::io::{db_page, errno, read_req, write_resp};
use crate::abi::private34::*;
use crate::abi::uapi::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::{self, ROUTER};
use std::sync::Arc;

fn hosted(c: *mut ibv_context) -> Result<Arc<HostedCtx>, c_int> {
    context(c).ok_or(EINVAL)
}

/// `ibv_cmd_get_context`: the driver's ucontext from libmlx5's bfreg
/// request. DEVX is refused (EOPNOTSUPP), so libmlx5 retries without it and
/// takes its non-DEVX paths; the response is static-UAR mode
/// (`tot_bfregs` non-zero), so libmlx5 maps UAR pages 0..n-1 of the
/// command fd.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_get_context(
    context_: *mut verbs_context,
    cmd: *mut ibv_get_context,
    cmd_size: size_t,
    resp: *mut ib_uverbs_get_context_resp,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_get_context", Conv::Errno, || {
        if context_.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the provider's verbs_context.
        let h = hosted(unsafe { core::ptr::addr_of_mut!((*context_).context) })?;
        let at = size_of::<ibv_get_context>();
        let req: mlx5_ib_alloc_ucontext_req_v2 = read_req(cmd.cast(), at, cmd_size)?;
        if req.flags & MLX5_IB_ALLOC_UCTX_DEVX != 0 {
            return Err(EOPNOTSUPP);
        }
        let cfg = ProviderConfig::from_env().map_err(errno)?;
        let link = h.nic.nic().clone();
        let ctx = doorbell_verbs::Context::with_request(
            link,
            AllocUcontextReq {
                total_num_bfregs: req.total_num_bfregs,
                num_low_latency_bfregs: req.num_low_latency_bfregs,
            },
            cfg,
        )
        .map_err(errno)?;
        let r = ctx.ucontext().resp().clone();
        let core_resp = ib_uverbs_get_context_resp {
            async_fd: h.async_events.fd.raw() as u32,
            num_comp_vectors: 1,
        };
        let mut drv = mlx5_ib_alloc_ucontext_resp {
            qp_tab_size: r.qp_tab_size,
            bf_reg_size: r.bf_reg_size,
            tot_bfregs: r.tot_bfregs,
            cache_line_size: r.cache_line_size,
            max_sq_desc_sz: r.max_sq_desc_sz.min(u32::from(u16::MAX)) as u16,
            max_rq_desc_sz: r.max_rq_desc_sz.min(u32::from(u16::MAX)) as u16,
            max_send_wqebb: r.max_send_wqebb,
            max_recv_wr: r.max_recv_wr,
            max_srq_recv_wr: r.max_recv_wr,
            num_ports: 1,
            cqe_version: r.cqe_version.min(req.max_cqe_version),
            cmds_supp_uhw: MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE | MLX5_USER_CMDS_SUPP_UHW_CREATE_AH,
            eth_min_inline: MLX5_USER_INLINE_MODE_NONE,
            log_uar_size: r.log_uar_size,
            num_uars_per_page: r.num_uars_per_page,
            num_dyn_bfregs: r.num_dyn_bfregs,
            ..Default::default()
        };
        let drv_at = size_of::<ib_uverbs_get_context_resp>();
        drv.response_length = resp_size
            .saturating_sub(drv_at)
            .min(size_of::<mlx5_ib_alloc_ucontext_resp>()) as u32;
        write_resp(resp.cast(), 0, resp_size, &core_resp)?;
        write_resp(resp.cast(), drv_at, resp_size, &drv)?;
        h.set_ctx(ctx)?;
        h.start_events(Arc::new(crate::route::Handles))?;
        h.watch.start()?;
        Ok(0)
    })
}

/// `ibv_cmd_query_device_any`: the attributes doorbell's own provider
/// reports; the mlx5 part of the response reads as zero (no TSO, RSS,
/// CQE compression, multi-packet WQEs or striding RQ).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_query_device_any(
    context_: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: size_t,
    resp: *mut c_void,
    resp_size: *mut size_t,
) -> c_int {
    guard("ibv_cmd_query_device_any", Conv::Errno, || {
        let h = hosted(context_)?;
        // SAFETY: NULL or the caller's input struct.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return Err(EINVAL);
        }
        let a = super::verbs::device_attr_ex(&h)?;
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return Err(EINVAL);
        }
        write_resp(attr.cast(), 0, attr_size, &a)?;
        if !resp.is_null() && !resp_size.is_null() {
            // SAFETY: the provider's response of *resp_size bytes.
            let len = unsafe { *resp_size };
            // SAFETY: as above.
            unsafe { core::ptr::write_bytes(resp.cast::<u8>(), 0, len) };
            // The response's first word is the firmware version, which
            // libmlx5 prints as major.minor.sub: doorbell's own version.
            write_resp(resp, 0, len, &raw_fw_ver())?;
        }
        Ok(0)
    })
}

/// doorbell's version as mlx5 firmware versions are numbered:
/// `major << 32 | minor << 16 | patch`.
fn raw_fw_ver() -> u64 {
    let part = |s: &str| s.parse::<u64>().unwrap_or(0) & 0xffff;
    (part(env!("CARGO_PKG_VERSION_MAJOR")) << 32)
        | (part(env!("CARGO_PKG_VERSION_MINOR")) << 16)
        | part(env!("CARGO_PKG_VERSION_PATCH"))
}

/// `ibv_cmd_query_port`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_query_port(
    context_: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    _cmd: *mut c_void,
    _cmd_size: size_t,
) -> c_int {
    guard("ibv_cmd_query_port", Conv::Errno, || {
        let h = hosted(context_)?;
        let a = crate::attrs::port_attr(h.ctx()?, port_num)?;
        if port_attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the provider passes a whole struct.
        unsafe { port_attr.write(a) };
        Ok(0)
    })
}

/// `ibv_cmd_alloc_pd`: the PD's handle is its number, which mlx5's part of
/// the response carries too.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_alloc_pd(
    context_: *mut ibv_context,
    pd: *mut ibv_pd,
    _cmd: *mut ibv_alloc_pd,
    _cmd_size: size_t,
    resp: *mut ib_uverbs_alloc_pd_resp,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_alloc_pd", Conv::Errno, || {
        let h = hosted(context_)?;
        if pd.is_null() {
            return Err(EINVAL);
        }
        let pdn = h.ctx()?.ucontext().alloc_pd().map_err(errno)?;
        // SAFETY: checked non-NULL; the provider's new PD.
        unsafe {
            (*pd).context = context_;
            (*pd).handle = pdn.get();
        }
        let core_resp = ib_uverbs_alloc_pd_resp {
            pd_handle: pdn.get(),
        };
        write_resp(resp.cast(), 0, resp_size, &core_resp)?;
        write_resp(
            resp.cast(),
            size_of::<ib_uverbs_alloc_pd_resp>(),
            resp_size,
            &mlx5_ib_alloc_pd_resp { pdn: pdn.get() },
        )?;
        Ok(0)
    })
}

/// `ibv_cmd_dealloc_pd`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard("ibv_cmd_dealloc_pd", Conv::Errno, || {
        let h = owner(pd).ok_or(EINVAL)?;
        // SAFETY: a live PD of a hosted context.
        let pdn = Pdn::new(unsafe { (*pd).handle });
        h.ctx()?.ucontext().dealloc_pd(pdn).map_err(errno)?;
        Ok(0)
    })
}

/// `ibv_cmd_reg_mr`: pins the program's buffer in place; the handle, lkey
/// and rkey are the mkey.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    hca_va: u64,
    access: c_int,
    vmr: *mut verbs_mr,
    _cmd: *mut c_void,
    _cmd_size: size_t,
    resp: *mut ib_uverbs_reg_mr_resp,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_reg_mr", Conv::Errno, || {
        let h = owner(pd).ok_or(EINVAL)?;
        if vmr.is_null() || length == 0 {
            return Err(EINVAL);
        }
        if hca_va != addr as u64 {
            // Zero-based or shifted IOVAs: not doorbell's (as ibv_reg_mr_iova).
            return Err(EOPNOTSUPP);
        }
        let acc = crate::pd::access_of(access as c_uint)?;
        // SAFETY: a live PD of a hosted context.
        let (ctx_ptr, pdn) = unsafe { ((*pd).context, Pdn::new((*pd).handle)) };
        let at = HostAddr::new(addr as u64);
        let len = length as u64;
        let ucontext = h.ctx()?.ucontext();
        // SAFETY: the program registers its own buffer: until dereg no Rust
        // reference points into it, and memory it unmaps meanwhile makes
        // accesses fail, not crash (process memory's checked accesses).
        unsafe { h.memory().grant(at, len) };
        let key = match ucontext.reg_mr(pdn, at, len, acc) {
            Ok(k) => k,
            Err(e) => {
                let _ = h.memory().revoke(at, len);
                return Err(errno(e));
            }
        };
        // The grant is recorded for dereg (made above, before the key was
        // known, so that the pin could find it).
        h.record_grant(Obj::Mr(key.raw()), at, len);
        // SAFETY: checked non-NULL; the provider's verbs_mr.
        unsafe {
            let m = &mut (*vmr).ibv_mr;
            m.context = ctx_ptr;
            m.pd = pd;
            m.addr = addr;
            m.length = length;
            m.handle = key.raw();
            m.lkey = key.raw();
            m.rkey = key.raw();
            (*vmr).mr_type = IBV_MR_TYPE_MR;
            (*vmr).access = access;
        }
        let r = ib_uverbs_reg_mr_resp {
            mr_handle: key.raw(),
            lkey: key.raw(),
            rkey: key.raw(),
        };
        write_resp(resp.cast(), 0, resp_size, &r)?;
        Ok(0)
    })
}

/// `ibv_cmd_dereg_mr`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_dereg_mr(vmr: *mut verbs_mr) -> c_int {
    guard("ibv_cmd_dereg_mr", Conv::Errno, || {
        if vmr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the provider's registered MR.
        let mr = unsafe { core::ptr::addr_of_mut!((*vmr).ibv_mr) };
        let h = owner(mr).ok_or(EINVAL)?;
        // SAFETY: as above.
        let key = unsafe { (*mr).handle };
        h.ctx()?
            .ucontext()
            .dereg_mr(Mkey::from_raw(key))
            .map_err(errno)?;
        h.revoke(Obj::Mr(key));
        Ok(0)
    })
}

/// `ibv_cmd_create_cq_ex`: over the CQE ring and doorbell record libmlx5
/// allocated (`mlx5_ib_create_cq`); 64- or 128-byte CQEs, no compression. A failure
/// is in `errno` too, as the kernel's would be: libmlx5's `create_cq`
/// returns NULL without setting it, and its callers (UCX's
/// `mlx5dv_create_cq`) report `errno`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_create_cq_ex(
    context_: *mut ibv_context,
    cq_attr: *const ibv_cq_init_attr_ex,
    cq: *mut ibv_cq,
    cmd: *mut ibv_create_cq_ex,
    cmd_size: size_t,
    resp: *mut ib_uverbs_ex_create_cq_resp,
    resp_size: size_t,
    _cmd_flags: u32,
) -> c_int {
    let ret = guard("ibv_cmd_create_cq_ex", Conv::Errno, || {
        let h = hosted(context_)?;
        if cq_attr.is_null() || cq.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the provider's attributes.
        let a = unsafe { &*cq_attr };
        let drv: mlx5_ib_create_cq = read_req(cmd.cast(), size_of::<ibv_create_cq_ex>(), cmd_size)?;
        // mlx5_ib's sizes: a 128-byte entry holds the 64-byte CQE in its
        // second half.
        let cqe_bytes: u16 = match drv.cqe_size {
            64 => 64,
            128 => 128,
            _ => return Err(EINVAL),
        };
        if drv.cqe_comp_en != 0 || drv.flags != 0 {
            return Err(EOPNOTSUPP);
        }
        // The provider asks for entries − 1, a power of two less one.
        let entries = a.cqe.checked_add(1).ok_or(EINVAL)?;
        if !entries.is_power_of_two() {
            return Err(EINVAL);
        }
        let log = entries.trailing_zeros() as u8;
        let buf = HostAddr::new(drv.buf_addr);
        let len = u64::from(entries) * u64::from(cqe_bytes);
        let (dbp, dbl) = db_page(drv.db_addr);
        let mem = h.memory();
        // SAFETY: the provider allocated the ring and the record page for
        // this CQ and frees them only after destroying it; the grants are
        // withdrawn at destroy (or below, on failure).
        unsafe {
            mem.grant(buf, len);
            mem.grant(dbp, dbl);
        }
        let cqn = match h.ctx()?.ucontext().create_cq_sized(
            log,
            cqe_bytes,
            buf,
            HostAddr::new(drv.db_addr),
        ) {
            Ok(c) => c,
            Err(e) => {
                let _ = mem.revoke(buf, len);
                let _ = mem.revoke(dbp, dbl);
                return Err(errno(e));
            }
        };
        h.record_grant(Obj::Cq(cqn), buf, len);
        h.record_grant(Obj::Cq(cqn), dbp, dbl);
        let uar = h.ctx()?.ucontext().cq_uar();
        // SAFETY: the arm word (word 1, MLX5_CQ_ARM_DB) of the record
        // libmlx5 allocated for this CQ, aligned in a page it keeps until the
        // CQ is destroyed, which forgets it first.
        unsafe { h.watch.add_cq(cqn, uar, (drv.db_addr + 4) as *mut u32) };
        // SAFETY: checked non-NULL; the provider's new CQ.
        unsafe {
            (*cq).context = context_;
            (*cq).handle = cqn.get();
            (*cq).cqe = a.cqe as c_int;
        }
        events::lock(&ROUTER)
            .cqs
            .insert(cqn, (cq as usize, a.channel as usize, context_ as usize));
        let r = ib_uverbs_ex_create_cq_resp {
            base: ib_uverbs_create_cq_resp {
                cq_handle: cqn.get(),
                cqe: a.cqe,
            },
            comp_mask: 0,
            response_length: resp_size.min(u32::MAX as usize) as u32,
        };
        write_resp(resp.cast(), 0, resp_size, &r)?;
        write_resp(
            resp.cast(),
            size_of::<ib_uverbs_ex_create_cq_resp>(),
            resp_size,
            &mlx5_ib_create_cq_resp {
                cqn: cqn.get(),
                reserved: 0,
            },
        )?;
        Ok(0)
    });
    if ret != 0 {
        crate::boundary::set_errno(ret);
    }
    ret
}

/// `ibv_cmd_destroy_cq`: waits, as uverbs does, until every completion
/// event taken from the CQ has been acknowledged.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard("ibv_cmd_destroy_cq", Conv::Errno, || {
        let h = owner(cq).ok_or(EINVAL)?;
        // SAFETY: a live CQ of a hosted context.
        let (cqn, channel) = unsafe { (Cqn::new((*cq).handle), (*cq).channel) };
        h.ctx()?.ucontext().destroy_cq(cqn).map_err(errno)?;
        // The record stays mapped until this returns.
        h.watch.forget_cq(cqn);
        h.revoke(Obj::Cq(cqn));
        events::lock(&ROUTER).cqs.remove(&cqn);
        crate::channel::forget_events(channel, cq);
        h.wait_acked(cq);
        Ok(0)
    })
}

/// `ibv_cmd_create_ah`: RoCE address handles are the provider's own (the
/// address vector goes in each WQE); the kernel's part is the destination
/// MAC, which doorbell derives from the GID.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_create_ah(
    pd: *mut ibv_pd,
    ah: *mut ibv_ah,
    attr: *mut ibv_ah_attr,
    resp: *mut ib_uverbs_create_ah_resp,
    resp_size: size_t,
) -> c_int {
    guard("ibv_cmd_create_ah", Conv::Errno, || {
        let _h = owner(pd).ok_or(EINVAL)?;
        if ah.is_null() || attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL.
        let a = unsafe { &*attr };
        if a.is_global == 0 {
            return Err(EINVAL);
        }
        // SAFETY: ibv_gid is 16 bytes.
        let gid = unsafe { *core::ptr::from_ref(&a.grh.dgid).cast::<[u8; 16]>() };
        // SAFETY: checked non-NULL; the provider's new AH.
        unsafe {
            (*ah).context = (*pd).context;
            (*ah).pd = pd;
            (*ah).handle = 0;
        }
        write_resp(
            resp.cast(),
            0,
            resp_size,
            &ib_uverbs_create_ah_resp { ah_handle: 0 },
        )?;
        let drv = mlx5_ib_create_ah_resp {
            response_length: size_of::<mlx5_ib_create_ah_resp>() as u32,
            dmac: doorbell_verbs::roce_mac(&gid),
            reserved: [0; 6],
        };
        write_resp(
            resp.cast(),
            size_of::<ib_uverbs_create_ah_resp>(),
            resp_size,
            &drv,
        )?;
        Ok(0)
    })
}

/// `ibv_cmd_destroy_ah`: nothing of the kernel's to free.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_cmd_destroy_ah", Conv::Errno, || {
        owner(ah).ok_or(EINVAL)?;
        Ok(0)
    })
}

/// `execute_ioctl`: the ioctl-only methods (DEVX, UAR objects, mlx5's own
/// queries) are refused with EOPNOTSUPP, as a kernel without them answers,
/// so libmlx5 takes its other paths.
#[unsafe(no_mangle)]
pub extern "C" fn execute_ioctl(context_: *mut ibv_context, cmd: *mut ibv_command_buffer) -> c_int {
    guard("execute_ioctl", Conv::Errno, || {
        let _ = (context_, cmd);
        Err(EOPNOTSUPP)
    })
}
