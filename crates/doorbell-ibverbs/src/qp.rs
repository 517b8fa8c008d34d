//! Address handles and queue pairs, with the QP entries of the context's
//! op table (`post_send`, `post_recv`): C's work requests converted to the
//! provider's and posted; `bad_wr` names the first one not posted.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint};
use std::sync::Mutex;

use doorbell_hif::{Access, AddressVector, QpAttrs, QpState, QpType};
use doorbell_types::{Mkey, Psn, Qpn};
use doorbell_verbs::{
    Ah, GRH_LEN, Pd, Qp, QpCaps, QpInitAttr, RemoteAddr, SendBatch, SendFlags, UdTarget, WrOpcode,
};
use libc::{EINVAL, EOPNOTSUPP};

use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::cq::CCq;
use crate::ctx::context;
use crate::events::{self, ROUTER};
use crate::handle;
use crate::handles;
use crate::pd::pd_of;
use crate::wr_batch::{WrState, c_sges, inline_pieces, post_recv_chain, sge_of};

#[repr(C)]
struct CAh {
    ah: ibv_ah,
    inner: Ah,
    _pd: Pd,
}
handle!(CAh, ibv_ah, ah, Ah);

fn av_of(a: &ibv_ah_attr) -> Result<AddressVector, c_int> {
    if a.is_global == 0 || a.port_num != 1 {
        // RoCE needs the GRH: a path is a GID.
        return Err(EINVAL);
    }
    // SAFETY: ibv_gid is a 16-byte union of byte views.
    let dgid = unsafe { *core::ptr::from_ref(&a.grh.dgid).cast::<[u8; 16]>() };
    Ok(AddressVector {
        dgid,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        sl: a.sl,
    })
}

/// `ibv_create_ah`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_ah(pd_: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard("ibv_create_ah", Conv::Null, || {
        if let Some(r) = crate::hosted::verbs::create_ah(pd_, attr) {
            return r;
        }
        // SAFETY: NULL is refused; the caller passes an ibv_ah_attr.
        let a = unsafe { attr.as_ref() }.ok_or(EINVAL)?;
        create_ah(pd_, a)
    })
}

fn create_ah(pd_: *mut ibv_pd, attr: &ibv_ah_attr) -> Result<*mut ibv_ah, c_int> {
    let pd = pd_of(pd_)?;
    let av = av_of(attr)?;
    let ah = ibv_ah {
        context: pd.pd.context,
        pd: pd_,
        handle: 0,
    };
    Ok(handles::register(Box::new(CAh {
        ah,
        inner: Ah { av },
        _pd: pd.inner.clone(),
    })))
}

/// `ibv_init_ah_from_wc`: the address attributes that reach the sender of
/// the UD message `wc` completed, from the 40 bytes (`grh`) the device put
/// in front of it. -1 with errno on failure: EINVAL for a NULL argument, a
/// port other than 1, a multicast message or one sent to a GID of another
/// port; EPROTONOSUPPORT if the bytes are not a RoCEv2 header.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_init_ah_from_wc(
    context_: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard("ibv_init_ah_from_wc", Conv::MinusOne, || {
        if ah_attr.is_null() {
            return Err(EINVAL);
        }
        let a = ah_from_wc(context_, port_num, wc, grh)?;
        // SAFETY: checked non-NULL; the caller's attributes to fill.
        unsafe { ah_attr.write(a) };
        Ok(0)
    })
}

/// What `ibv_init_ah_from_wc` fills in.
fn ah_from_wc(
    context_: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
) -> Result<ibv_ah_attr, c_int> {
    let c = context(context_)?;
    if wc.is_null() || grh.is_null() || port_num != 1 {
        return Err(EINVAL);
    }
    // SAFETY: checked non-NULL; the caller passes a work completion and
    // the 40 bytes its receive buffer starts with, read once each (as
    // bytes: the GRH area has no alignment).
    let (w, bytes) = unsafe { (wc.read(), grh.cast::<[u8; GRH_LEN]>().read_unaligned()) };
    // SAFETY: ibv_ah_attr is integers and a byte union: zero is valid.
    let mut a: ibv_ah_attr = unsafe { core::mem::zeroed() };
    a.dlid = w.slid;
    a.sl = w.sl;
    a.src_path_bits = w.dlid_path_bits;
    a.port_num = port_num;
    a.grh.flow_label = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) & 0xf_ffff;
    if w.wc_flags & IBV_WC_GRH != 0 {
        let path = c.ctx.return_path(&bytes).map_err(|e| e.errno())?;
        a.is_global = 1;
        a.grh = ibv_global_route {
            dgid: ibv_gid { raw: path.av.dgid },
            flow_label: path.flow_label,
            sgid_index: path.av.sgid_index,
            hop_limit: path.av.hop_limit,
            traffic_class: path.av.traffic_class,
        };
    }
    Ok(a)
}

/// `ibv_create_ah_from_wc`: `ibv_init_ah_from_wc`, then `ibv_create_ah`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    guard("ibv_create_ah_from_wc", Conv::Null, || {
        let a = ah_from_wc(pd_of(pd)?.pd.context, port_num, wc, grh)?;
        create_ah(pd, &a)
    })
}

/// The path of address handle `ah`.
pub(crate) fn ah_of(ah: *mut ibv_ah) -> Result<Ah, c_int> {
    Ok(handles::get::<CAh>(ah)?.inner)
}

/// `ibv_destroy_ah`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_destroy_ah", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::destroy_ah(ah) {
            return r;
        }
        drop(handles::take::<CAh>(ah)?);
        Ok(0)
    })
}

#[repr(C)]
pub(crate) struct CQp {
    /// C reads it (`qp_num`, `state`, and, for the `ibv_wr_*` API,
    /// `wr_id`, `wr_flags` and the op pointers); this library updates
    /// `state`.
    pub(crate) qp: UnsafeCell<ibv_qp_ex>,
    pub(crate) inner: Qp,
    sq_sig_all: bool,
    /// Made by `ibv_create_qp_ex` with send ops: `ibv_qp_to_qp_ex` works.
    pub(crate) ex: bool,
    /// The `ibv_wr_*` batch being built.
    pub(crate) wr: Mutex<WrState>,
    /// The batch `ibv_post_send` converts C's chain into (kept, so that a
    /// post allocates nothing once warm).
    post: Mutex<SendBatch>,
}

handle!(CQp, ibv_qp, qp, Qp);

pub(crate) fn qp_type_of(t: c_uint) -> Result<QpType, c_int> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        // Types verbs.h names that doorbell does not have: raw packet, XRC
        // send and receive, driver-specific.
        IBV_QPT_RAW_PACKET | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV | IBV_QPT_DRIVER => {
            Err(EOPNOTSUPP)
        }
        _ => Err(EINVAL),
    }
}

pub(crate) fn c_qp_type(t: QpType) -> c_uint {
    match t {
        QpType::Rc => IBV_QPT_RC,
        QpType::Uc => IBV_QPT_UC,
        QpType::Ud => IBV_QPT_UD,
    }
}

pub(crate) fn c_state(s: QpState) -> c_uint {
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Sqe => IBV_QPS_SQE,
        QpState::Err => IBV_QPS_ERR,
    }
}

pub(crate) fn state_of(s: c_uint) -> Result<QpState, c_int> {
    Ok(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        IBV_QPS_SQE => QpState::Sqe,
        IBV_QPS_ERR => QpState::Err,
        _ => return Err(EINVAL),
    })
}

fn mtu_bytes(m: c_uint) -> Result<u32, c_int> {
    match m {
        IBV_MTU_256..=IBV_MTU_4096 => Ok(128 << m),
        _ => Err(EINVAL),
    }
}

fn c_caps(c: QpCaps) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// What creating a QP takes from C: the parts of `ibv_qp_init_attr` and
/// `ibv_qp_init_attr_ex` they share.
pub(crate) struct NewQp<'a> {
    pub(crate) pd: *mut ibv_pd,
    pub(crate) attr: &'a mut ibv_qp_init_attr,
    /// `ibv_qp_init_attr_ex.send_ops_flags` when the `ibv_wr_*` API is asked
    /// for.
    pub(crate) send_ops: Option<u64>,
}

/// Creates a QP; the caps it grants are written back to the caller's
/// attributes, as rdma-core does.
pub(crate) fn create_qp(n: NewQp<'_>) -> Result<*mut ibv_qp, c_int> {
    let pd = pd_of(n.pd)?;
    let attr = n.attr;
    let srq = if attr.srq.is_null() {
        None
    } else {
        Some(crate::srq::srq_of(attr.srq)?.inner.clone())
    };
    let qp_type = qp_type_of(attr.qp_type)?;
    let send_cq = handles::get::<CCq>(attr.send_cq)?;
    let recv_cq = handles::get::<CCq>(attr.recv_cq)?;
    let cap = QpCaps {
        max_send_wr: attr.cap.max_send_wr,
        max_recv_wr: attr.cap.max_recv_wr,
        max_send_sge: attr.cap.max_send_sge,
        max_recv_sge: attr.cap.max_recv_sge,
        max_inline_data: attr.cap.max_inline_data,
    };
    let inner = pd
        .inner
        .create_qp(&QpInitAttr {
            qp_type,
            send_cq: send_cq.inner.clone(),
            recv_cq: recv_cq.inner.clone(),
            cap,
            sq_sig_all: attr.sq_sig_all != 0,
            srq,
        })
        .map_err(|e| e.errno())?;
    attr.cap = c_caps(inner.caps());
    // SAFETY: ibv_qp_ex is pointers, integers, pthread objects (zero is
    // their initializer on glibc) and NULL function pointers.
    let mut qp: ibv_qp_ex = unsafe { core::mem::zeroed() };
    let q = &mut qp.qp_base;
    q.context = pd.pd.context;
    q.qp_context = attr.qp_context;
    q.pd = n.pd;
    q.send_cq = attr.send_cq;
    q.recv_cq = attr.recv_cq;
    q.srq = attr.srq;
    q.handle = inner.qpn().get();
    q.qp_num = inner.qpn().get();
    q.state = IBV_QPS_RESET;
    q.qp_type = attr.qp_type;
    let qpn = inner.qpn();
    let ctx = pd.pd.context as usize;
    let h = handles::register(Box::new(CQp {
        qp: UnsafeCell::new(qp),
        inner,
        sq_sig_all: attr.sq_sig_all != 0,
        ex: n.send_ops.is_some(),
        wr: Mutex::new(WrState::default()),
        post: Mutex::new(SendBatch::new()),
    }));
    events::lock(&ROUTER).qps.insert(qpn, (h as usize, ctx));
    Ok(h)
}

/// `ibv_create_qp`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_qp(pd_: *mut ibv_pd, attr_: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard("ibv_create_qp", Conv::Null, || {
        if let Some(r) = crate::hosted::verbs::create_qp(pd_, attr_) {
            return r;
        }
        if attr_.is_null() {
            return Err(EINVAL);
        }
        create_qp(NewQp {
            pd: pd_,
            // SAFETY: checked non-NULL; the caller passes an ibv_qp_init_attr.
            attr: unsafe { &mut *attr_ },
            send_ops: None,
        })
    })
}

/// `ibv_destroy_qp`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard("ibv_destroy_qp", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::destroy_qp(qp) {
            return r;
        }
        let obj = handles::take::<CQp>(qp)?;
        events::lock(&ROUTER).qps.remove(&obj.inner.qpn());
        drop(obj);
        Ok(0)
    })
}

pub(crate) fn qp_of<'a>(qp: *mut ibv_qp) -> Result<&'a CQp, c_int> {
    handles::get::<CQp>(qp)
}

/// The attributes of `attr` that `mask` names, as the provider takes them.
pub(crate) fn attrs_of(attr: &ibv_qp_attr, mask: c_uint) -> Result<QpAttrs, c_int> {
    let has = |bit: c_uint| mask & bit != 0;
    let known = IBV_QP_STATE
        | IBV_QP_CUR_STATE
        | IBV_QP_ACCESS_FLAGS
        | IBV_QP_PKEY_INDEX
        | IBV_QP_PORT
        | IBV_QP_QKEY
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_TIMEOUT
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_QP_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER
        | IBV_QP_SQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_DEST_QPN;
    if mask & !known != 0 {
        // Alternate paths, SQD notification, path migration, caps: not
        // doorbell's.
        return Err(EOPNOTSUPP);
    }
    Ok(QpAttrs {
        cur_state: has(IBV_QP_CUR_STATE)
            .then(|| state_of(attr.cur_qp_state))
            .transpose()?,
        pkey_index: has(IBV_QP_PKEY_INDEX).then_some(attr.pkey_index),
        port: has(IBV_QP_PORT).then_some(attr.port_num),
        access: has(IBV_QP_ACCESS_FLAGS).then_some(Access(attr.qp_access_flags & 0xf)),
        qkey: has(IBV_QP_QKEY).then_some(attr.qkey),
        av: has(IBV_QP_AV).then(|| av_of(&attr.ah_attr)).transpose()?,
        path_mtu: has(IBV_QP_PATH_MTU)
            .then(|| mtu_bytes(attr.path_mtu))
            .transpose()?,
        dest_qpn: has(IBV_QP_DEST_QPN).then_some(Qpn::new(attr.dest_qp_num)),
        rq_psn: has(IBV_QP_RQ_PSN).then_some(Psn::new(attr.rq_psn)),
        sq_psn: has(IBV_QP_SQ_PSN).then_some(Psn::new(attr.sq_psn)),
        max_dest_rd_atomic: has(IBV_QP_MAX_DEST_RD_ATOMIC).then_some(attr.max_dest_rd_atomic),
        max_rd_atomic: has(IBV_QP_MAX_QP_RD_ATOMIC).then_some(attr.max_rd_atomic),
        min_rnr_timer: has(IBV_QP_MIN_RNR_TIMER).then_some(attr.min_rnr_timer),
        timeout: has(IBV_QP_TIMEOUT).then_some(attr.timeout),
        retry_cnt: has(IBV_QP_RETRY_CNT).then_some(attr.retry_cnt),
        rnr_retry: has(IBV_QP_RNR_RETRY).then_some(attr.rnr_retry),
    })
}

/// `ibv_modify_qp`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    guard("ibv_modify_qp", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::modify_qp(qp, attr, attr_mask) {
            return r;
        }
        let q = qp_of(qp)?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL.
        let a = unsafe { &*attr };
        let mask = attr_mask as c_uint;
        let to = if mask & IBV_QP_STATE != 0 {
            state_of(a.qp_state)?
        } else {
            q.inner.state()
        };
        let attrs = attrs_of(a, mask)?;
        q.inner.modify(to, &attrs).map_err(|e| e.errno())?;
        // SAFETY: the cell's own pointer; C only reads `state`.
        unsafe { (*q.qp.get()).qp_base.state = c_state(to) };
        Ok(0)
    })
}

/// `ibv_query_qp`: the attributes as set, and the creation attributes.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard("ibv_query_qp", Conv::Errno, || {
        if let Some(r) = crate::hosted::verbs::query_qp(qp, attr, _attr_mask, init_attr) {
            return r;
        }
        let q = qp_of(qp)?;
        if attr.is_null() || init_attr.is_null() {
            return Err(EINVAL);
        }
        let (state, s) = q.inner.query().map_err(|e| e.errno())?;
        let mut a = c_qp_attr(state, &s);
        a.cap = c_caps(q.inner.caps());
        // SAFETY: a copy of plain data the QP's creation wrote.
        let b = unsafe { core::ptr::addr_of!((*q.qp.get()).qp_base).read() };
        let init = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: b.srq,
            cap: a.cap,
            qp_type: c_qp_type(q.inner.qp_type()),
            sq_sig_all: c_int::from(q.sq_sig_all),
        };
        // SAFETY: both checked non-NULL; the caller passes whole structs.
        unsafe {
            attr.write(a);
            init_attr.write(init);
        }
        Ok(0)
    })
}

/// A QP's state and attributes as `ibv_query_qp` reports them (the caps
/// are the caller's to fill).
pub(crate) fn c_qp_attr(state: QpState, s: &QpAttrs) -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is plain data.
    let mut a: ibv_qp_attr = unsafe { core::mem::zeroed() };
    a.qp_state = c_state(state);
    a.cur_qp_state = a.qp_state;
    a.path_mtu = s.path_mtu.map_or(IBV_MTU_1024, |m| m.trailing_zeros() - 7);
    a.qkey = s.qkey.unwrap_or(0);
    a.rq_psn = s.rq_psn.map_or(0, Psn::get);
    a.sq_psn = s.sq_psn.map_or(0, Psn::get);
    a.dest_qp_num = s.dest_qpn.map_or(0, Qpn::get);
    a.qp_access_flags = s.access.map_or(0, |x| x.0);
    if let Some(av) = s.av {
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.sl = av.sl;
        // SAFETY: ibv_gid is a 16-byte union of byte views.
        unsafe {
            core::ptr::from_mut(&mut a.ah_attr.grh.dgid)
                .cast::<[u8; 16]>()
                .write(av.dgid)
        };
        a.ah_attr.grh.sgid_index = av.sgid_index;
        a.ah_attr.grh.hop_limit = av.hop_limit;
        a.ah_attr.grh.traffic_class = av.traffic_class;
    }
    a.pkey_index = s.pkey_index.unwrap_or(0);
    a.max_rd_atomic = s.max_rd_atomic.unwrap_or(0);
    a.max_dest_rd_atomic = s.max_dest_rd_atomic.unwrap_or(0);
    a.min_rnr_timer = s.min_rnr_timer.unwrap_or(0);
    a.port_num = s.port.unwrap_or(1);
    a.timeout = s.timeout.unwrap_or(0);
    a.retry_cnt = s.retry_cnt.unwrap_or(0);
    a.rnr_retry = s.rnr_retry.unwrap_or(0);
    a
}

const KNOWN_SEND_FLAGS: c_uint =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE | (1 << 4);

/// One C send WR as the provider's: its opcode, flags and UD target.
/// (`wr.ud` shares its bytes with `wr.rdma`: it is read only for a UD QP.)
fn send_parts(
    w: &ibv_send_wr,
    is_ud: bool,
) -> Result<(WrOpcode, SendFlags, Option<UdTarget>), c_int> {
    // SAFETY: the union's variants are plain data; which one the opcode
    // names is read, the others are not interpreted.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let remote = RemoteAddr {
        addr: rdma.remote_addr,
        rkey: Mkey::from_raw(rdma.rkey),
    };
    let imm = u32::from_be(w.imm_data);
    let op = match w.opcode {
        IBV_WR_RDMA_WRITE => WrOpcode::RdmaWrite(remote),
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOpcode::RdmaWriteWithImm(remote, imm),
        IBV_WR_SEND => WrOpcode::Send,
        IBV_WR_SEND_WITH_IMM => WrOpcode::SendWithImm(imm),
        IBV_WR_RDMA_READ => WrOpcode::RdmaRead(remote),
        IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
            let remote = RemoteAddr {
                addr: atomic.remote_addr,
                rkey: Mkey::from_raw(atomic.rkey),
            };
            if w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP {
                WrOpcode::AtomicCmpSwp {
                    remote,
                    compare: atomic.compare_add,
                    swap: atomic.swap,
                }
            } else {
                WrOpcode::AtomicFetchAdd {
                    remote,
                    add: atomic.compare_add,
                }
            }
        }
        _ => return Err(EINVAL),
    };
    if w.send_flags & !KNOWN_SEND_FLAGS != 0 {
        return Err(EINVAL);
    }
    let flags = SendFlags(w.send_flags & 0xf);
    let ud = if !is_ud || ud.ah.is_null() {
        None
    } else {
        let ah = handles::get::<CAh>(ud.ah)?;
        Some(UdTarget {
            ah: ah.inner,
            remote_qpn: Qpn::new(ud.remote_qpn),
            remote_qkey: ud.remote_qkey,
        })
    };
    Ok((op, flags, ud))
}

/// `ops.post_send`: converts the chain into the QP's batch, posts it, and
/// points `bad_wr` at the first WR not posted.
unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard("ibv_post_send", Conv::Errno, || {
        let set_bad = |w: *mut ibv_send_wr| {
            if !bad_wr.is_null() {
                // SAFETY: non-NULL; the caller passes a pointer to write.
                unsafe { bad_wr.write(w) };
            }
        };
        let q = match qp_of(qp) {
            Ok(q) => q,
            Err(e) => {
                set_bad(wr);
                return Err(e);
            }
        };
        let is_ud = q.inner.qp_type() == QpType::Ud;
        let max_inline = q.inner.caps().max_inline_data;
        let mut batch = lock(&q.post);
        batch.clear();
        // The chain as C gave it, converted WR by WR, so a bad WR in the
        // middle stops the list there.
        let mut failed = None;
        let mut at = wr;
        while !at.is_null() {
            // SAFETY: each pointer of the chain is a WR the caller owns.
            let w = unsafe { &*at };
            let n = batch.len();
            if let Err(e) = add_send(&mut batch, w, is_ud, max_inline) {
                batch.truncate(n);
                failed = Some((at, e));
                break;
            }
            at = w.next;
        }
        if let Err(e) = q.inner.post_batch(&batch) {
            set_bad(nth_send(wr, e.index));
            return Err(e.error.errno());
        }
        if let Some((w, e)) = failed {
            set_bad(w);
            return Err(e);
        }
        Ok(0)
    })
}

/// Adds C's send WR `w` to `batch`; on error the batch may hold part of
/// it (the caller truncates).
fn add_send(
    batch: &mut SendBatch,
    w: &ibv_send_wr,
    is_ud: bool,
    max_inline: u32,
) -> Result<(), c_int> {
    let (op, flags, ud) = send_parts(w, is_ud)?;
    if is_ud && ud.is_none() {
        return Err(EINVAL);
    }
    let list = c_sges(w.sg_list, w.num_sge)?;
    batch.begin(w.wr_id, flags, op);
    if flags.contains(SendFlags::INLINE) && op.carries_payload() {
        // SAFETY: ibv_post_send reads inline data from the caller's SGEs
        // at post time; they need no lkey. The pieces are copied into the
        // batch before this call returns.
        let pieces =
            unsafe { inline_pieces(list.iter().map(|g| (g.addr, g.length as usize)), max_inline) }?;
        batch.set_inline_data_list(pieces).map_err(|e| e.errno())?;
    } else {
        batch
            .set_sge_list(list.iter().map(sge_of))
            .map_err(|e| e.errno())?;
    }
    if let Some(ud) = ud {
        batch.set_ud_addr(ud).map_err(|e| e.errno())?;
    }
    Ok(())
}

/// The WR `index` links after `wr` in C's chain (`wr` itself if the chain
/// is shorter).
fn nth_send(wr: *mut ibv_send_wr, index: usize) -> *mut ibv_send_wr {
    let mut at = wr;
    for _ in 0..index {
        // SAFETY: each pointer of the chain is a WR the caller owns; the
        // provider counted `index` WRs of it.
        let next = unsafe { (*at).next };
        if next.is_null() {
            return wr;
        }
        at = next;
    }
    at
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("ibv_post_recv", Conv::Errno, || {
        post_recv_chain(wr, bad_wr, qp_of(qp), |q, wrs| q.inner.post_recv_iter(wrs))
    })
}

/// The QP entries of the context's op table.
pub(crate) struct QpOps {
    pub(crate) post_send: PostSendFn,
    pub(crate) post_recv: PostRecvFn,
}

/// The QP ops every context gets.
pub(crate) const QP_OPS: QpOps = QpOps {
    post_send,
    post_recv,
};
