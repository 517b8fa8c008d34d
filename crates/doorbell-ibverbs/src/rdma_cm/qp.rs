//! QPs on ids, as librdmacm makes them: `rdma_create_qp` creates the QP on
//! the id's device (on the PD given, or the device's default PD; with
//! CQs and completion channels of the id's own where the attributes name
//! none), then moves a connected QP to INIT and a datagram QP through INIT
//! and RTR to RTS, with what `rdma_init_qp_attr` gives; the CM moves a
//! connected one on as the connection forms.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::c_int;
use core::ptr::null_mut;
use std::sync::{Mutex, MutexGuard};

use libc::EINVAL;

use super::id::id_of;
use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};

/// Each device's default PD, allocated on first use, by context handle.
/// A leaf lock (decision record 0068): the PD is allocated, a command to
/// the device, with it released.
static DEFAULT_PDS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// The lock of the default PDs, held (for `forks`).
pub(super) fn hold_for_fork() -> MutexGuard<'static, Vec<(usize, usize)>> {
    crate::events::lock(&DEFAULT_PDS)
}

fn default_pd(ctx: *mut ibv_context) -> Result<*mut ibv_pd, c_int> {
    let known = |pds: &[(usize, usize)]| {
        pds.iter()
            .find(|(c, _)| *c == ctx as usize)
            .map(|&(_, pd)| pd as *mut ibv_pd)
    };
    if let Some(pd) = known(&crate::events::lock(&DEFAULT_PDS)) {
        return Ok(pd);
    }
    let pd = crate::pd::ibv_alloc_pd(ctx);
    if pd.is_null() {
        return Err(errno_now());
    }
    let mut pds = crate::events::lock(&DEFAULT_PDS);
    if let Some(first) = known(&pds) {
        drop(pds);
        // Another thread made the default meanwhile: it stays the one.
        crate::pd::ibv_dealloc_pd(pd);
        return Ok(first);
    }
    pds.push((ctx as usize, pd as usize));
    Ok(pd)
}

fn errno_now() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .filter(|&e| e != 0)
        .unwrap_or(libc::EIO)
}

/// The INIT (and for UD, RTR and RTS) attributes of `state`, with mask.
fn attrs_for(
    m: &doorbell_cma::CmId,
    ud: bool,
    state: ibv_qp_state,
) -> Result<(ibv_qp_attr, c_int), c_int> {
    // SAFETY: ibv_qp_attr is plain data; zero is its empty value.
    let mut a: ibv_qp_attr = unsafe { core::mem::zeroed() };
    a.qp_state = state;
    let mask = match state {
        IBV_QPS_INIT => {
            let i = m.init_attrs(ud).map_err(|e| e.errno())?;
            a.pkey_index = i.pkey_index;
            a.port_num = i.port;
            let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            if let Some(q) = i.qkey {
                a.qkey = q;
                mask |= IBV_QP_QKEY;
            }
            if let Some(acc) = i.access {
                a.qp_access_flags = acc;
                mask |= IBV_QP_ACCESS_FLAGS;
            }
            mask
        }
        IBV_QPS_RTR if ud => IBV_QP_STATE,
        IBV_QPS_RTS if ud => IBV_QP_STATE | IBV_QP_SQ_PSN,
        // A connected QP's RTR and RTS come from the connection (EINVAL
        // before its REQ or REP is known).
        IBV_QPS_RTR | IBV_QPS_RTS => {
            let c = m.conn_attrs().map_err(|e| e.errno())?;
            return Ok(conn_attr(&c, state));
        }
        _ => return Err(EINVAL),
    };
    Ok((a, mask as c_int))
}

/// The address of a peer's port 1 over RoCE: its GID, with the GRH.
pub(crate) fn ah_attr(dgid: [u8; 16], hop_limit: u8, traffic_class: u8) -> ibv_ah_attr {
    // SAFETY: ibv_ah_attr is plain data; zero is its empty value.
    let mut a: ibv_ah_attr = unsafe { core::mem::zeroed() };
    a.is_global = 1;
    a.grh.dgid = ibv_gid { raw: dgid };
    a.grh.hop_limit = hop_limit;
    a.grh.traffic_class = traffic_class;
    a.port_num = 1;
    a
}

/// The attributes, and mask, that move a connected QP to RTR or RTS.
pub(crate) fn conn_attr(c: &doorbell_cma::ConnAttrs, state: ibv_qp_state) -> (ibv_qp_attr, c_int) {
    // SAFETY: ibv_qp_attr is plain data; zero is its empty value.
    let mut a: ibv_qp_attr = unsafe { core::mem::zeroed() };
    a.qp_state = state;
    let mask = if state == IBV_QPS_RTR {
        a.qp_access_flags = c.access;
        a.path_mtu = u32::from(c.path_mtu);
        a.dest_qp_num = c.dest_qpn;
        a.rq_psn = c.rq_psn;
        a.max_dest_rd_atomic = c.max_dest_rd_atomic;
        a.min_rnr_timer = c.min_rnr_timer;
        a.ah_attr = ah_attr(c.dgid, c.hop_limit, c.traffic_class);
        IBV_QP_STATE
            | IBV_QP_AV
            | IBV_QP_PATH_MTU
            | IBV_QP_DEST_QPN
            | IBV_QP_RQ_PSN
            | IBV_QP_MAX_DEST_RD_ATOMIC
            | IBV_QP_MIN_RNR_TIMER
            | IBV_QP_ACCESS_FLAGS
    } else {
        a.sq_psn = c.sq_psn;
        a.timeout = c.timeout;
        a.retry_cnt = c.retry_count;
        a.rnr_retry = c.rnr_retry_count;
        a.max_rd_atomic = c.max_rd_atomic;
        IBV_QP_STATE
            | IBV_QP_TIMEOUT
            | IBV_QP_RETRY_CNT
            | IBV_QP_RNR_RETRY
            | IBV_QP_SQ_PSN
            | IBV_QP_MAX_QP_RD_ATOMIC
    };
    (a, mask as c_int)
}

/// Moves the id's connected QP to RTR and RTS with what the connection
/// gives (librdmacm does it in `rdma_accept` and on the REP).
pub(crate) fn to_rts(qp: *mut ibv_qp, m: &doorbell_cma::CmId) -> Result<(), c_int> {
    let c = m.conn_attrs().map_err(|e| e.errno())?;
    for s in [IBV_QPS_RTR, IBV_QPS_RTS] {
        let (mut a, mask) = conn_attr(&c, s);
        match crate::qp::ibv_modify_qp(qp, &mut a, mask) {
            0 => {}
            e => return Err(e),
        }
    }
    Ok(())
}

/// Moves a QP to the error state (librdmacm's `rdma_disconnect`).
pub(crate) fn to_err(qp: *mut ibv_qp) {
    if qp.is_null() {
        return;
    }
    // SAFETY: plain data; zero is its empty value.
    let mut a: ibv_qp_attr = unsafe { core::mem::zeroed() };
    a.qp_state = IBV_QPS_ERR;
    crate::qp::ibv_modify_qp(qp, &mut a, IBV_QP_STATE as c_int);
}

/// `rdma_init_qp_attr`: the attributes to move the id's QP to
/// `qp_attr->qp_state` (INIT; RTR and RTS for a datagram id).
///
/// # Safety
/// `qp_attr` and `qp_attr_mask` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    guard("rdma_init_qp_attr", Conv::MinusOne, || {
        let c = id_of(id)?;
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(EINVAL);
        }
        let ud = c.with_c(|c| c.qp_type == IBV_QPT_UD);
        // SAFETY: non-NULL, the caller's struct.
        let state = unsafe { (*qp_attr).qp_state };
        let (a, mask) = attrs_for(c.id()?, ud, state)?;
        // SAFETY: both non-NULL and the caller's.
        unsafe {
            *qp_attr = a;
            *qp_attr_mask = mask;
        }
        Ok(0)
    })
}

/// A completion channel and a CQ of `cqe` entries on `ctx`.
fn channel_and_cq(
    ctx: *mut ibv_context,
    cqe: u32,
) -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
    let ch = crate::cq::ibv_create_comp_channel(ctx);
    if ch.is_null() {
        return Err(errno_now());
    }
    let cq = crate::cq::ibv_create_cq(ctx, cqe.max(1) as c_int, null_mut(), ch, 0);
    if cq.is_null() {
        let e = errno_now();
        crate::cq::ibv_destroy_comp_channel(ch);
        return Err(e);
    }
    Ok((ch, cq))
}

/// Destroys the CQs and channels the id made for its QP.
fn drop_own_cqs(c: &mut rdma_cm_id) {
    for (cq, ch) in [
        (&mut c.send_cq, &mut c.send_cq_channel),
        (&mut c.recv_cq, &mut c.recv_cq_channel),
    ] {
        if !cq.is_null() {
            crate::cq::ibv_destroy_cq(*cq);
            *cq = null_mut();
        }
        if !ch.is_null() {
            crate::cq::ibv_destroy_comp_channel(*ch);
            *ch = null_mut();
        }
    }
}

/// `IBV_QP_INIT_ATTR_PD`.
const ATTR_PD: u32 = 1 << 0;

/// Creates the id's QP from `attr` (librdmacm's `rdma_create_qp_ex`):
/// on the PD it names, else the device's default; the id's own CQs where
/// it names none; then INIT (and for UD, RTR and RTS).
fn create_on(c: &super::id::CCmId, attr: &mut ibv_qp_init_attr_ex) -> Result<(), c_int> {
    let m = c.id()?;
    let verbs = c.with_c(|c| c.verbs);
    if verbs.is_null() || !c.with_c(|c| c.qp.is_null()) {
        return Err(EINVAL);
    }
    if attr.comp_mask & ATTR_PD == 0 || attr.pd.is_null() {
        attr.comp_mask |= ATTR_PD;
        attr.pd = default_pd(verbs)?;
    } else if {
        // SAFETY: non-NULL: the caller's PD; the library checks it again
        // when it creates the QP.
        unsafe { (*attr.pd).context }
    } != verbs
    {
        return Err(EINVAL);
    }
    if attr.send_cq.is_null() {
        let (ch, cq) = channel_and_cq(verbs, attr.cap.max_send_wr)?;
        c.with_c(|c| {
            c.send_cq_channel = ch;
            c.send_cq = cq;
        });
        attr.send_cq = cq;
    }
    if attr.recv_cq.is_null() {
        let (ch, cq) = match channel_and_cq(verbs, attr.cap.max_recv_wr) {
            Ok(x) => x,
            Err(e) => {
                c.with_c(drop_own_cqs);
                return Err(e);
            }
        };
        c.with_c(|c| {
            c.recv_cq_channel = ch;
            c.recv_cq = cq;
        });
        attr.recv_cq = cq;
    }
    // SAFETY: the context is the id's, the attributes a local the caller
    // gave.
    let qp = unsafe { crate::qp_ex::create_qp_ex(verbs, attr) };
    if qp.is_null() {
        let e = errno_now();
        c.with_c(drop_own_cqs);
        return Err(e);
    }
    let ud = attr.qp_type == IBV_QPT_UD;
    let states: &[ibv_qp_state] = if ud {
        &[IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS]
    } else {
        &[IBV_QPS_INIT]
    };
    for &st in states {
        let moved = attrs_for(m, ud, st).and_then(|(mut a, mask)| {
            match crate::qp::ibv_modify_qp(qp, &mut a, mask) {
                0 => Ok(()),
                e => Err(e),
            }
        });
        if let Err(e) = moved {
            crate::qp::ibv_destroy_qp(qp);
            c.with_c(drop_own_cqs);
            return Err(e);
        }
    }
    // SAFETY: the QP this library just made.
    m.set_qp(Some(unsafe { (*qp).qp_num }));
    let pd = attr.pd;
    c.with_c(|c| {
        c.qp = qp;
        c.pd = pd;
        c.qp_type = attr.qp_type;
    });
    Ok(())
}

/// `rdma_create_qp`: [`create_on`] with the attributes as
/// `ibv_qp_init_attr_ex` (its first part), written back with the
/// capacities granted and the CQs used.
///
/// # Safety
/// `qp_init_attr` is NULL or the caller's attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("rdma_create_qp", Conv::MinusOne, || {
        let c = id_of(id)?;
        // SAFETY: NULL or the caller's attributes, read once.
        let a = unsafe { qp_init_attr.as_ref() }.copied().ok_or(EINVAL)?;
        // SAFETY: plain data and pointers; zero is its empty value.
        let mut ex: ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
        ex.qp_context = a.qp_context;
        ex.send_cq = a.send_cq;
        ex.recv_cq = a.recv_cq;
        ex.srq = a.srq;
        ex.cap = a.cap;
        ex.qp_type = a.qp_type;
        ex.sq_sig_all = a.sq_sig_all;
        if !pd.is_null() {
            ex.comp_mask = ATTR_PD;
            ex.pd = pd;
        }
        create_on(c, &mut ex)?;
        // SAFETY: non-NULL, the caller's attributes.
        unsafe {
            (*qp_init_attr).cap = ex.cap;
            (*qp_init_attr).send_cq = ex.send_cq;
            (*qp_init_attr).recv_cq = ex.recv_cq;
        }
        Ok(0)
    })
}

/// `rdma_create_qp_ex`: [`create_on`], the attributes written back.
///
/// # Safety
/// `qp_init_attr` is NULL or the caller's attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    qp_init_attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    guard("rdma_create_qp_ex", Conv::MinusOne, || {
        let c = id_of(id)?;
        // SAFETY: NULL or the caller's attributes, read once.
        let mut ex = unsafe { qp_init_attr.as_ref() }.copied().ok_or(EINVAL)?;
        create_on(c, &mut ex)?;
        // SAFETY: non-NULL, the caller's attributes.
        unsafe { *qp_init_attr = ex };
        Ok(0)
    })
}

/// `rdma_destroy_qp`: the QP, and the CQs the id made for it.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard("rdma_destroy_qp", Conv::Abort, || {
        let Ok(c) = id_of(id) else {
            return Ok(());
        };
        let qp = c.with_c(|c| core::mem::replace(&mut c.qp, null_mut()));
        if !qp.is_null() {
            crate::qp::ibv_destroy_qp(qp);
        }
        if let Ok(m) = c.id() {
            m.set_qp(None);
        }
        c.with_c(drop_own_cqs);
        Ok(())
    })
}
