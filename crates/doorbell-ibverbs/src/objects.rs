//! PDs, MRs, CQs, completion channels, QPs and AHs, and the fast path the
//! inline `ibv_post_*`/`ibv_poll_cq` reach through the context's ops.
//!
//! Each C handle is the first field of a Rust object that owns the verbs
//! object it stands for ([`crate::handles`]); the conversions here are from
//! C values to the provider's types and back, nothing more.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint, c_void};
use core::ptr::null_mut;
use std::sync::Mutex;

use doorbell_hif::{Access, AddressVector, QpAttrs, QpState, QpType};
use doorbell_types::{HostAddr, Mkey, Psn, Qpn};
use doorbell_verbs::{
    Ah, Cq, Mr, Pd, Qp, QpCaps, QpInitAttr, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdTarget,
    Wc, WrOpcode,
};
use libc::{EINVAL, EOPNOTSUPP, size_t};

use crate::abi::consts::*;
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::ctx::context;
use crate::handles::{self, Handle, Kind};

macro_rules! handle {
    ($t:ty, $c:ty, $field:ident, $kind:ident) => {
        // SAFETY: repr(C) with the C struct as the field named here.
        unsafe impl Handle for $t {
            type C = $c;
            const C_AT: usize = core::mem::offset_of!($t, $field);
            const KIND: Kind = Kind::$kind;
        }
        // SAFETY: the C part is raw pointers and plain data written before
        // the handle is handed out; the Rust part is Send + Sync.
        unsafe impl Send for $t {}
        // SAFETY: as above.
        unsafe impl Sync for $t {}
    };
}

// ---------------------------------------------------------------------------
// Protection domains and memory regions.

#[repr(C)]
struct CPd {
    pd: ibv_pd,
    inner: Pd,
}
handle!(CPd, ibv_pd, pd, Pd);

/// `ibv_alloc_pd`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_alloc_pd(context_: *mut ibv_context) -> *mut ibv_pd {
    guard("ibv_alloc_pd", Conv::Null, || {
        let c = context(context_)?;
        let inner = c.ctx.alloc_pd().map_err(|e| e.errno())?;
        let pd = ibv_pd {
            context: context_,
            handle: inner.pdn().get(),
        };
        Ok(handles::register(Box::new(CPd { pd, inner })))
    })
}

/// `ibv_dealloc_pd`: EBUSY while an MR, QP or AH of it exists.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard("ibv_dealloc_pd", Conv::Errno, || {
        let obj = handles::take::<CPd>(pd)?;
        // The verbs Pd is shared by every object made in it: only the last
        // holder frees the device's PD.
        if obj.inner.is_shared() {
            handles::restore(obj);
            return Err(libc::EBUSY);
        }
        drop(obj);
        Ok(0)
    })
}

fn pd_of<'a>(pd: *mut ibv_pd) -> Result<&'a CPd, c_int> {
    handles::get::<CPd>(pd)
}

#[repr(C)]
struct CMr {
    mr: ibv_mr,
    inner: Option<Mr>,
    /// The range handed to process memory, revoked at deregistration.
    granted: (HostAddr, u64),
    ctx: *mut ibv_context,
}
handle!(CMr, ibv_mr, mr, Mr);

impl Drop for CMr {
    fn drop(&mut self) {
        // Deregister (unpin) before the grant is withdrawn.
        self.inner.take();
        if let Ok(c) = context(self.ctx) {
            let _ = c.nic.memory().revoke(self.granted.0, self.granted.1);
        }
    }
}

/// The access bits the kernel knows; anything else is EINVAL.
const KNOWN_ACCESS: c_uint = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB
    | IBV_ACCESS_OPTIONAL_RANGE;

fn reg_mr(
    pd_: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_uint,
) -> Result<*mut ibv_mr, c_int> {
    let pd = pd_of(pd_)?;
    if access & !KNOWN_ACCESS != 0 {
        return Err(EINVAL);
    }
    // Memory windows, zero-based MRs and on-demand paging are not doorbell's.
    if access & (IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND) != 0 {
        return Err(EOPNOTSUPP);
    }
    if iova != addr as u64 {
        return Err(EOPNOTSUPP);
    }
    let c = context(pd.pd.context)?;
    let at = HostAddr::new(addr as u64);
    let len = length as u64;
    let mem = c.nic.memory();
    // SAFETY: the C program registers its own buffer: from here until
    // ibv_dereg_mr no Rust reference points into it (this library makes
    // none; Rust callers in the same process use the Rust API, not this
    // one), and memory it unmaps meanwhile makes accesses fail, not crash.
    unsafe { mem.grant(at, len) };
    let access = Access(access & 0xf);
    let mr = match pd.inner.reg_mr_at(addr as u64, length, access) {
        Ok(mr) => mr,
        Err(e) => {
            let _ = mem.revoke(at, len);
            return Err(e.errno());
        }
    };
    let m = ibv_mr {
        context: pd.pd.context,
        pd: pd_,
        addr,
        length,
        handle: mr.lkey().raw(),
        lkey: mr.lkey().raw(),
        rkey: mr.rkey().raw(),
    };
    Ok(handles::register(Box::new(CMr {
        mr: m,
        inner: Some(mr),
        granted: (at, len),
        ctx: pd.pd.context,
    })))
}

/// `ibv_reg_mr@IBVERBS_1.1`: registers the caller's buffer in place.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr", Conv::Null, || {
        reg_mr(pd, addr, length, addr as u64, access as c_uint)
    })
}

/// `ibv_reg_mr_iova`: the IOVA must be the address (no zero-based MRs).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova", Conv::Null, || {
        reg_mr(pd, addr, length, iova, access as c_uint)
    })
}

/// `ibv_reg_mr_iova2`: what the inline `ibv_reg_mr` calls for access flags
/// that are not compile-time constants.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: size_t,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    guard("ibv_reg_mr_iova2", Conv::Null, || {
        reg_mr(pd, addr, length, iova, access)
    })
}

/// `ibv_dereg_mr`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard("ibv_dereg_mr", Conv::Errno, || {
        drop(handles::take::<CMr>(mr)?);
        Ok(0)
    })
}

// ---------------------------------------------------------------------------
// Completion channels and CQs.

#[repr(C)]
struct CChannel {
    /// C reads `fd`; this library counts its CQs in `refcnt`.
    ch: UnsafeCell<ibv_comp_channel>,
}

impl CChannel {
    fn get(&self) -> ibv_comp_channel {
        // SAFETY: a copy of plain data; writes happen through `refcnt`
        // below, under the rule that a channel is not destroyed in use.
        unsafe { self.ch.get().read() }
    }

    fn add_cq(&self, n: c_int) {
        // SAFETY: the cell's own pointer; C never writes refcnt.
        unsafe { (*self.ch.get()).refcnt += n };
    }
}
handle!(CChannel, ibv_comp_channel, ch, Channel);

impl Drop for CChannel {
    fn drop(&mut self) {
        // SAFETY: the fd was made by eventfd for this channel alone.
        unsafe { libc::close(self.get().fd) };
    }
}

/// `ibv_create_comp_channel`: its fd is a real eventfd.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_comp_channel(context_: *mut ibv_context) -> *mut ibv_comp_channel {
    guard("ibv_create_comp_channel", Conv::Null, || {
        context(context_)?;
        // SAFETY: eventfd takes no pointers; a negative result is an error.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        let ch = ibv_comp_channel {
            context: context_,
            fd,
            refcnt: 0,
        };
        Ok(handles::register(Box::new(CChannel {
            ch: UnsafeCell::new(ch),
        })))
    })
}

/// `ibv_destroy_comp_channel`: EBUSY while a CQ uses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard("ibv_destroy_comp_channel", Conv::Errno, || {
        let obj = handles::take::<CChannel>(channel)?;
        if obj.get().refcnt > 0 {
            handles::restore(obj);
            return Err(libc::EBUSY);
        }
        drop(obj);
        Ok(0)
    })
}

#[repr(C)]
struct CCq {
    /// C reads it; this library counts acknowledged events in it.
    cq: UnsafeCell<ibv_cq>,
    inner: Cq,
    /// Completion events delivered and not yet acknowledged.
    unacked: Mutex<u32>,
}
handle!(CCq, ibv_cq, cq, Cq);

/// `ibv_create_cq`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_cq(
    context_: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard("ibv_create_cq", Conv::Null, || {
        let c = context(context_)?;
        if cqe < 1 || comp_vector != 0 {
            return Err(EINVAL);
        }
        let ch = if channel.is_null() {
            None
        } else {
            Some(handles::get::<CChannel>(channel)?)
        };
        let inner = c.ctx.create_cq(cqe as u32).map_err(|e| e.errno())?;
        // SAFETY: ibv_cq is pointers, integers and pthread objects whose
        // all-zero value is their static initializer on glibc.
        let mut cq: ibv_cq = unsafe { core::mem::zeroed() };
        cq.context = context_;
        cq.channel = channel;
        cq.cq_context = cq_context;
        cq.handle = inner.cqn().get();
        // One CQE stays free, as mlx5 reports (2^n - 1 of 2^n).
        cq.cqe = (inner.capacity() - 1) as c_int;
        let cqn = inner.cqn();
        let h = handles::register(Box::new(CCq {
            cq: UnsafeCell::new(cq),
            inner,
            unacked: Mutex::new(0),
        }));
        if let Some(ch) = ch {
            ch.add_cq(1);
        }
        lock(&c.cqs).insert(cqn, h as usize);
        Ok(h)
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `ibv_destroy_cq`: EBUSY while a QP uses it.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard("ibv_destroy_cq", Conv::Errno, || {
        let obj = handles::take::<CCq>(cq)?;
        if obj.inner.is_shared() {
            handles::restore(obj);
            return Err(libc::EBUSY);
        }
        let cq = obj.c();
        if let Ok(c) = context(cq.context) {
            lock(&c.cqs).remove(&obj.inner.cqn());
            lock(&c.pending_events).retain(|&n| n != obj.inner.cqn());
        }
        if !cq.channel.is_null()
            && let Ok(ch) = handles::get::<CChannel>(cq.channel)
        {
            ch.add_cq(-1);
        }
        drop(obj);
        Ok(0)
    })
}

impl CCq {
    fn c(&self) -> ibv_cq {
        // SAFETY: a copy of the cell's plain data (pointers, integers, and
        // pthread objects that are never used by value).
        unsafe { self.cq.get().read() }
    }
}

fn wc_flags(w: &Wc) -> c_uint {
    (if w.grh { IBV_WC_GRH } else { 0 })
        | (if w.imm_data.is_some() {
            IBV_WC_WITH_IMM
        } else {
            0
        })
}

fn to_c_wc(w: &Wc) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as c_uint,
        opcode: w.opcode as c_uint,
        vendor_err: u32::from(w.vendor_err),
        byte_len: w.byte_len,
        // C holds immediate data in network order.
        imm_data: w.imm_data.unwrap_or(0).to_be(),
        qp_num: w.qp_num.get(),
        src_qp: w.src_qp,
        wc_flags: wc_flags(w),
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

/// `ops.poll_cq`.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    guard("ibv_poll_cq", Conv::MinusOne, || {
        let c = handles::get::<CCq>(cq)?;
        if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
            return Err(EINVAL);
        }
        let mut buf = [Wc::default(); 16];
        let mut done = 0usize;
        while done < num_entries as usize {
            let want = (num_entries as usize - done).min(buf.len());
            let n = c.inner.poll(&mut buf[..want]).map_err(|e| e.errno())?;
            for (i, w) in buf[..n].iter().enumerate() {
                // SAFETY: the caller's array has num_entries entries;
                // done + i < num_entries.
                unsafe { wc.add(done + i).write(to_c_wc(w)) };
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done as c_int)
    })
}

/// `ops.req_notify_cq`.
unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard("ibv_req_notify_cq", Conv::Errno, || {
        let c = handles::get::<CCq>(cq)?;
        c.inner
            .req_notify(solicited_only != 0)
            .map_err(|e| e.errno())?;
        Ok(0)
    })
}

/// The completion-queue entries of the context's op table.
pub(crate) struct CqOps {
    pub(crate) poll_cq: PollCqFn,
    pub(crate) req_notify_cq: unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int,
}

/// The CQ ops every context gets.
pub(crate) const CQ_OPS: CqOps = CqOps {
    poll_cq,
    req_notify_cq,
};

fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no pointer.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// `ibv_get_cq_event`: waits for the next completion event of a CQ on
/// `channel`; EAGAIN at once if the channel's fd is non-blocking and none
/// is there.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard("ibv_get_cq_event", Conv::MinusOne, || {
        let ch = handles::get::<CChannel>(channel)?;
        if cq.is_null() || cq_context.is_null() {
            return Err(EINVAL);
        }
        let chv = ch.get();
        let c = context(chv.context)?;
        let wait = if nonblocking(chv.fd) {
            std::time::Duration::ZERO
        } else {
            std::time::Duration::from_secs(3600)
        };
        let mine = |cqn: doorbell_types::Cqn| -> Option<*mut ibv_cq> {
            let h = *lock(&c.cqs).get(&cqn)? as *mut ibv_cq;
            let obj = handles::get::<CCq>(h).ok()?;
            (obj.c().channel == channel).then_some(h)
        };
        loop {
            let taken = {
                let mut p = lock(&c.pending_events);
                p.iter()
                    .position(|&n| mine(n).is_some())
                    .map(|i| p.remove(i))
            };
            let cqn = match taken {
                Some(n) => n,
                None => match c.ctx.get_cq_event(wait) {
                    Some(n) => n,
                    None if wait.is_zero() => return Err(libc::EAGAIN),
                    None => continue,
                },
            };
            match mine(cqn) {
                Some(h) => {
                    let obj = handles::get::<CCq>(h)?;
                    *lock(&obj.unacked) += 1;
                    // SAFETY: both checked non-NULL.
                    unsafe {
                        cq.write(h);
                        cq_context.write(obj.c().cq_context);
                    }
                    return Ok(0);
                }
                None => {
                    if lock(&c.cqs).contains_key(&cqn) {
                        lock(&c.pending_events).push(cqn);
                    }
                }
            }
        }
    })
}

/// `ibv_ack_cq_events`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    guard("ibv_ack_cq_events", Conv::Abort, || {
        if let Ok(c) = handles::get::<CCq>(cq) {
            let mut u = lock(&c.unacked);
            let n = nevents.min(*u);
            *u -= n;
            for _ in 0..n {
                c.inner.ack_event();
            }
            // SAFETY: the cell's own pointer; C only reads this counter.
            unsafe {
                let p = c.cq.get();
                (*p).comp_events_completed = (*p).comp_events_completed.wrapping_add(n);
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------
// Address handles.

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
        let pd = pd_of(pd_)?;
        if attr.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the caller passes an ibv_ah_attr.
        let av = av_of(unsafe { &*attr })?;
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
    })
}

/// `ibv_destroy_ah`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard("ibv_destroy_ah", Conv::Errno, || {
        drop(handles::take::<CAh>(ah)?);
        Ok(0)
    })
}

// ---------------------------------------------------------------------------
// Queue pairs.

#[repr(C)]
struct CQp {
    /// C reads it (`qp_num`, `state`); this library updates `state`.
    qp: UnsafeCell<ibv_qp_ex>,
    inner: Qp,
    sq_sig_all: bool,
}
handle!(CQp, ibv_qp, qp, Qp);

fn qp_type_of(t: c_uint) -> Result<QpType, c_int> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UD => Ok(QpType::Ud),
        IBV_QPT_UC => Err(EOPNOTSUPP),
        _ => Err(EINVAL),
    }
}

fn c_qp_type(t: QpType) -> c_uint {
    match t {
        QpType::Rc => IBV_QPT_RC,
        QpType::Ud => IBV_QPT_UD,
    }
}

fn c_state(s: QpState) -> c_uint {
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

fn state_of(s: c_uint) -> Result<QpState, c_int> {
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

/// `ibv_create_qp`. The caps it grants are written back to the caller's
/// attributes, as rdma-core does.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_create_qp(pd_: *mut ibv_pd, attr_: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    guard("ibv_create_qp", Conv::Null, || {
        let pd = pd_of(pd_)?;
        if attr_.is_null() {
            return Err(EINVAL);
        }
        // SAFETY: checked non-NULL; the caller passes an ibv_qp_init_attr.
        let attr = unsafe { &mut *attr_ };
        if !attr.srq.is_null() {
            return Err(EOPNOTSUPP);
        }
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
            })
            .map_err(|e| e.errno())?;
        attr.cap = c_caps(inner.caps());
        // SAFETY: ibv_qp_ex is pointers, integers, pthread objects (zero is
        // their initializer on glibc) and NULL function pointers.
        let mut qp: ibv_qp_ex = unsafe { core::mem::zeroed() };
        let q = &mut qp.qp_base;
        q.context = pd.pd.context;
        q.qp_context = attr.qp_context;
        q.pd = pd_;
        q.send_cq = attr.send_cq;
        q.recv_cq = attr.recv_cq;
        q.handle = inner.qpn().get();
        q.qp_num = inner.qpn().get();
        q.state = IBV_QPS_RESET;
        q.qp_type = attr.qp_type;
        Ok(handles::register(Box::new(CQp {
            qp: UnsafeCell::new(qp),
            inner,
            sq_sig_all: attr.sq_sig_all != 0,
        })))
    })
}

/// `ibv_destroy_qp`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard("ibv_destroy_qp", Conv::Errno, || {
        drop(handles::take::<CQp>(qp)?);
        Ok(0)
    })
}

fn qp_of<'a>(qp: *mut ibv_qp) -> Result<&'a CQp, c_int> {
    handles::get::<CQp>(qp)
}

/// The attributes of `attr` that `mask` names, as the provider takes them.
fn attrs_of(attr: &ibv_qp_attr, mask: c_uint) -> Result<QpAttrs, c_int> {
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
        let q = qp_of(qp)?;
        if attr.is_null() || init_attr.is_null() {
            return Err(EINVAL);
        }
        let (state, s) = q.inner.query().map_err(|e| e.errno())?;
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
        a.cap = c_caps(q.inner.caps());
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
        // SAFETY: a copy of plain data the QP's creation wrote.
        let b = unsafe { core::ptr::addr_of!((*q.qp.get()).qp_base).read() };
        let init = ibv_qp_init_attr {
            qp_context: b.qp_context,
            send_cq: b.send_cq,
            recv_cq: b.recv_cq,
            srq: null_mut(),
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

fn sges(list: *mut ibv_sge, n: c_int) -> Result<Vec<Sge>, c_int> {
    if n < 0 || (n > 0 && list.is_null()) {
        return Err(EINVAL);
    }
    let c: &[ibv_sge] = if n == 0 {
        &[]
    } else {
        // SAFETY: the caller's array holds `n` SGEs (checked non-NULL).
        unsafe { core::slice::from_raw_parts(list, n as usize) }
    };
    Ok(c.iter()
        .map(|s| Sge {
            addr: s.addr,
            length: s.length,
            lkey: Mkey::from_raw(s.lkey),
        })
        .collect())
}

const KNOWN_SEND_FLAGS: c_uint =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE | (1 << 4);

/// One C send WR as the provider's: its opcode, flags and UD target.
fn send_parts(w: &ibv_send_wr) -> Result<(WrOpcode, SendFlags, Option<UdTarget>), c_int> {
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
    let ud = if ud.ah.is_null() {
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

/// `ops.post_send`: converts the chain, posts it, and points `bad_wr` at
/// the first WR not posted.
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
        // The chain as C gave it; converted in one pass, so a bad WR in the
        // middle stops the list there.
        let mut chain: Vec<*mut ibv_send_wr> = Vec::new();
        let mut lists: Vec<Vec<Sge>> = Vec::new();
        let mut parts = Vec::new();
        let mut failed = None;
        let mut at = wr;
        while !at.is_null() {
            // SAFETY: each pointer of the chain is a WR the caller owns.
            let w = unsafe { &*at };
            let converted = sges(w.sg_list, w.num_sge).and_then(|s| {
                let p = send_parts(w)?;
                if is_ud && p.2.is_none() {
                    return Err(EINVAL);
                }
                Ok((s, p))
            });
            match converted {
                Ok((s, p)) => {
                    chain.push(at);
                    lists.push(s);
                    parts.push((w.wr_id, p));
                }
                Err(e) => {
                    failed = Some((at, e));
                    break;
                }
            }
            at = w.next;
        }
        let wrs: Vec<SendWr<'_>> = parts
            .iter()
            .zip(&lists)
            .map(|(&(wr_id, (opcode, flags, ud)), s)| SendWr {
                wr_id,
                sg_list: s,
                opcode,
                flags,
                ud: if is_ud { ud } else { None },
            })
            .collect();
        if let Err(e) = q.inner.post_send_list(&wrs) {
            set_bad(chain.get(e.index).copied().unwrap_or(wr));
            return Err(e.error.errno());
        }
        if let Some((w, e)) = failed {
            set_bad(w);
            return Err(e);
        }
        Ok(0)
    })
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    guard("ibv_post_recv", Conv::Errno, || {
        let set_bad = |w: *mut ibv_recv_wr| {
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
        let mut chain = Vec::new();
        let mut lists = Vec::new();
        let mut failed = None;
        let mut at = wr;
        while !at.is_null() {
            // SAFETY: each pointer of the chain is a WR the caller owns.
            let w = unsafe { &*at };
            match sges(w.sg_list, w.num_sge) {
                Ok(s) => {
                    chain.push((at, w.wr_id));
                    lists.push(s);
                }
                Err(e) => {
                    failed = Some((at, e));
                    break;
                }
            }
            at = w.next;
        }
        let wrs: Vec<RecvWr<'_>> = chain
            .iter()
            .zip(&lists)
            .map(|(&(_, wr_id), s)| RecvWr { wr_id, sg_list: s })
            .collect();
        if let Err(e) = q.inner.post_recv_list(&wrs) {
            set_bad(chain.get(e.index).map_or(wr, |c| c.0));
            return Err(e.error.errno());
        }
        if let Some((w, e)) = failed {
            set_bad(w);
            return Err(e);
        }
        Ok(0)
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
