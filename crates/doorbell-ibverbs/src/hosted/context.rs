//! A hosted context: what this library keeps for a context the provider
//! made, and libibverbs' part of its life (`_verbs_init_and_alloc_context`,
//! `verbs_set_ops`, `verbs_uninit_context`, opening and closing, and the
//! public ops that wrap the provider's).

use core::ffi::{c_int, c_void};
use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};

use doorbell_hif::DeviceLink;
use doorbell_host::{Mmio, RecordDoorbell};

use super::uar::{Store, UarPages};
use super::watch::Watch;
use doorbell_layout::uar::BF_CHUNK;
use doorbell_rt::ProcessNic;
use doorbell_types::{Cqn, HostAddr, Qpn, Srqn, UarIndex};
use doorbell_verbs::Context;
use libc::{EINVAL, EOPNOTSUPP};

use super::{HostedDevice, is_device};
use crate::abi::*;
use crate::boundary::{Conv, guard};
use crate::events::{self, AsyncEvent, Deliver, Dispatcher, Queue, ROUTER};

/// A device object the provider's buffers were granted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Obj {
    Cq(Cqn),
    Qp(Qpn),
    Mr(u32),
    Srq(Srqn),
}

/// The provider's fast-path ops, which the public ones wrap.
#[derive(Clone, Copy)]
pub(crate) struct Fast {
    pub(crate) post_send: PostSendFn,
    pub(crate) poll_cq: PollCqFn,
    pub(crate) req_notify_cq: unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int,
}

/// Where a QP rings: see [`HostedCtx::set_reg`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpReg {
    pub(crate) uar: UarIndex,
    pub(crate) page: usize,
    pub(crate) offset: usize,
    pub(crate) half: usize,
}

/// Completion events of a hosted CQ: taken and acknowledged
/// (`ibv_cmd_destroy_cq` waits until they agree, as uverbs has it wait).
#[derive(Default)]
pub(crate) struct CqEvents {
    pub(crate) taken: BTreeMap<usize, (u32, u32)>,
}

/// What this library keeps for one hosted context.
pub(crate) struct HostedCtx {
    pub(crate) device: &'static HostedDevice,
    ctx: OnceLock<Context>,
    dispatcher: Mutex<Option<Dispatcher>>,
    pub(crate) async_events: Queue<AsyncEvent>,
    /// The provider's ops, merged by `verbs_set_ops`.
    ops: Mutex<Box<verbs_context_ops>>,
    pub(crate) fast: OnceLock<Fast>,
    /// The QPs' send doorbell records, watched.
    pub(crate) watch: Watch,
    /// The command fd's pages, where libmlx5 stores its doorbells.
    uar: UarPages,
    /// Each QP's register.
    qp_regs: RwLock<BTreeMap<Qpn, QpReg>>,
    /// Held while a register is read back and cleared.
    reg_lock: Mutex<()>,
    /// Ranges granted to the device for each object's buffers.
    grants: Mutex<BTreeMap<Obj, Vec<(HostAddr, u64)>>>,
    pub(crate) cq_events: Mutex<CqEvents>,
    /// What the kernel reports of each QP: its receive WRs and SGEs, and
    /// whether it signals every send.
    pub(crate) qp_caps: Mutex<BTreeMap<Qpn, (u32, u32, bool)>>,
    /// Each SRQ's size as the kernel reports it: WRs and SGEs.
    pub(crate) srq_sizes: Mutex<BTreeMap<Srqn, (u32, u32)>>,
    pub(crate) cq_acked: Condvar,
    /// Last: the context's hold on the NIC and the watch's thread go
    /// first, so that this, the last hold, stops the NIC before its port
    /// is said to be free (a process that opens the device again meanwhile
    /// waits for that).
    pub(crate) nic: ProcessNic,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A verbs_context_ops seen as its 76 slots (all pointer-sized options).
fn slots(ops: &verbs_context_ops) -> &[usize; 76] {
    // SAFETY: verbs_context_ops is repr(C) with 76 fields, each an
    // Option of a function pointer: pointer-sized, NULL as None
    // (asserted in abi::private34), so it reads as 76 words.
    unsafe { &*core::ptr::from_ref(ops).cast::<[usize; 76]>() }
}

fn slots_mut(ops: &mut verbs_context_ops) -> &mut [usize; 76] {
    // SAFETY: as in `slots`; every word written is a non-zero slot of
    // another verbs_context_ops, so each field stays a valid Option.
    unsafe { &mut *core::ptr::from_mut(ops).cast::<[usize; 76]>() }
}

impl HostedCtx {
    /// The context's doorbell-side view, once `ibv_cmd_get_context` made it.
    pub(crate) fn ctx(&self) -> Result<&Context, c_int> {
        self.ctx.get().ok_or(EINVAL)
    }

    pub(crate) fn set_ctx(&self, ctx: Context) -> Result<(), c_int> {
        self.ctx.set(ctx).map_err(|_| EINVAL)
    }

    /// Starts routing the device's events for this context to `to`.
    pub(crate) fn start_events(&self, to: Arc<dyn Deliver>) -> Result<(), c_int> {
        let d = Dispatcher::start(self.ctx()?.clone(), to)?;
        *lock(&self.dispatcher) = Some(d);
        Ok(())
    }

    /// The provider's ops as merged.
    pub(crate) fn ops(&self) -> std::sync::MutexGuard<'_, Box<verbs_context_ops>> {
        lock(&self.ops)
    }

    /// The provider op `pick` chooses, or EOPNOTSUPP if it has none.
    pub(crate) fn op<F: Copy>(
        &self,
        pick: impl Fn(&verbs_context_ops) -> Option<F>,
    ) -> Result<F, c_int> {
        pick(&lock(&self.ops)).ok_or(EOPNOTSUPP)
    }

    pub(crate) fn memory(&self) -> &Arc<doorbell_rt::ProcessMemory> {
        self.nic.memory()
    }

    pub(crate) fn mmio(&self) -> &Arc<dyn Mmio> {
        DeviceLink::mmio(&**self.nic.nic())
    }

    /// Records that `[addr, addr + len)` was granted to the device for
    /// `obj` (a queue buffer, a doorbell-record page, a registered range),
    /// to be withdrawn when it goes.
    pub(crate) fn record_grant(&self, obj: Obj, addr: HostAddr, len: u64) {
        lock(&self.grants).entry(obj).or_default().push((addr, len));
    }

    /// Withdraws every grant of `obj`.
    pub(crate) fn revoke(&self, obj: Obj) {
        for (a, n) in lock(&self.grants).remove(&obj).unwrap_or_default() {
            let _ = self.memory().revoke(a, n);
        }
    }

    /// A completion event of `cq` was handed to the program.
    pub(crate) fn event_taken(&self, cq: *mut ibv_cq) {
        lock(&self.cq_events)
            .taken
            .entry(cq as usize)
            .or_default()
            .0 += 1;
    }

    /// `n` events of `cq` acknowledged; returns how many were outstanding
    /// of those.
    pub(crate) fn events_acked(&self, cq: *mut ibv_cq, n: u32) -> u32 {
        let mut e = lock(&self.cq_events);
        let t = e.taken.entry(cq as usize).or_default();
        let n = n.min(t.0 - t.1);
        t.1 += n;
        self.cq_acked.notify_all();
        n
    }

    /// Waits until every event taken from `cq` is acknowledged, then
    /// forgets the CQ.
    pub(crate) fn wait_acked(&self, cq: *mut ibv_cq) {
        let mut e = lock(&self.cq_events);
        while e.taken.get(&(cq as usize)).is_some_and(|t| t.0 != t.1) {
            e = self.cq_acked.wait(e).unwrap_or_else(|p| p.into_inner());
        }
        e.taken.remove(&(cq as usize));
    }

    /// QP `qpn` rang its register through the wrapped `post_send`: the
    /// store is read back from the register and handed to the device as the
    /// MMIO writes it was; if it cannot be read back whole (another
    /// thread's store is in the way) the device reads the doorbell record.
    /// If the watcher told the device first, there is nothing left to do
    /// but clear the register.
    pub(crate) fn rang_send(&self, qpn: Qpn) {
        let Some(reg) = self
            .qp_regs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .copied()
        else {
            return;
        };
        let store = {
            let _one = lock(&self.reg_lock);
            self.uar.take(reg.page, reg.offset, reg.half, qpn.get())
        };
        if !self.watch.claim(qpn) {
            return;
        }
        let mmio = self.mmio();
        match store {
            Some((at, Store::Doorbell(d))) => mmio.mmio_write(reg.uar, at as u32, &d),
            Some((at, Store::BlueFlame(b))) => {
                for (i, chunk) in b.chunks(BF_CHUNK).enumerate() {
                    mmio.mmio_write(reg.uar, (at + i * BF_CHUNK) as u32, chunk);
                }
            }
            None => mmio.record_doorbell(reg.uar, RecordDoorbell::Send(qpn)),
        }
    }

    /// Where QP `qpn` rings: its UAR (as the device numbers it), the page of
    /// the command fd libmlx5 maps for it, and its register there.
    pub(crate) fn set_reg(&self, qpn: Qpn, reg: QpReg) {
        self.qp_regs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qpn, reg);
    }

    pub(crate) fn forget_reg(&self, qpn: Qpn) {
        self.qp_regs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&qpn);
    }
}

/// `_verbs_init_and_alloc_context`: allocates the provider's context
/// (`alloc_size` bytes, zeroed, its `verbs_context` at `context_offset`)
/// and this library's [`HostedCtx`] for it, which starts the process's
/// NIC. On failure the command fd is closed, as rdma-core does.
pub(crate) fn init_and_alloc(
    device: *mut ibv_device,
    cmd_fd: c_int,
    alloc_size: usize,
    context_offset: usize,
) -> Result<*mut c_void, c_int> {
    let close_fd = || {
        // SAFETY: the fd this library made for the open and handed over.
        drop(unsafe { OwnedFd::from_raw_fd(cmd_fd) });
    };
    let Some(dev) = is_device(device) else {
        close_fd();
        return Err(EINVAL);
    };
    if alloc_size < context_offset + core::mem::size_of::<verbs_context>() {
        close_fd();
        return Err(EINVAL);
    }
    let nic = events::without_signals(|| ProcessNic::acquire(&dev.config)).map_err(|e| {
        close_fd();
        e.errno()
    })?;
    let nic_link = Arc::clone(nic.nic());
    let async_events = Queue::new().inspect_err(|_| close_fd())?;
    let uar = UarPages::map(cmd_fd).inspect_err(|_| close_fd())?;
    // SAFETY: calloc of the size the provider asked; the provider frees it
    // with free() after verbs_uninit_context.
    let p = unsafe { libc::calloc(1, alloc_size) };
    if p.is_null() {
        close_fd();
        return Err(libc::ENOMEM);
    }
    // SAFETY: `context_offset + size_of::<verbs_context>() <= alloc_size`
    // (checked), inside the zeroed allocation.
    let vctx = unsafe { &mut *p.cast::<u8>().add(context_offset).cast::<verbs_context>() };
    vctx.sz = core::mem::size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = device;
    c.cmd_fd = cmd_fd;
    c.async_fd = async_events.fd.raw();
    c.num_comp_vectors = 1;
    // __VERBS_ABI_IS_EXTENDED: a verbs_context precedes this context.
    c.abi_compat = usize::MAX as *mut c_void;
    let ibv_ctx = core::ptr::from_mut(c);
    // SAFETY: verbs_context_ops is options of function pointers: all-zero
    // is every op absent (libibverbs starts from its dummy ops, which fail
    // with EOPNOTSUPP; an absent op does here).
    let ops: Box<verbs_context_ops> = Box::new(unsafe { core::mem::zeroed() });
    let h = Arc::new(HostedCtx {
        device: dev,
        nic,
        ctx: OnceLock::new(),
        dispatcher: Mutex::new(None),
        async_events,
        ops: Mutex::new(ops),
        fast: OnceLock::new(),
        watch: Watch::new(Arc::clone(DeviceLink::mmio(&*nic_link))),
        uar,
        qp_regs: RwLock::new(BTreeMap::new()),
        reg_lock: Mutex::new(()),
        grants: Mutex::new(BTreeMap::new()),
        cq_events: Mutex::new(CqEvents::default()),
        qp_caps: Mutex::new(BTreeMap::new()),
        srq_sizes: Mutex::new(BTreeMap::new()),
        cq_acked: Condvar::new(),
    });
    // (A context replaced here, which a provider never makes at a live
    // one's address, would drop after the lock: the lock stays a leaf.)
    let replaced = contexts_write().insert(ibv_ctx as usize, h);
    drop(replaced);
    Ok(p)
}

/// `verbs_set_ops`: merges the provider's non-NULL ops into the context's,
/// and publishes those with a public slot, as libibverbs does.
pub(crate) fn set_ops(vctx: *mut verbs_context, ops: &verbs_context_ops) -> Result<(), c_int> {
    // SAFETY: `vctx` is a hosted context's (looked up before any write).
    let c = unsafe { core::ptr::addr_of_mut!((*vctx).context) };
    let h = context(c).ok_or(EINVAL)?;
    let mut mine = lock(&h.ops);
    for (d, s) in slots_mut(&mut mine).iter_mut().zip(slots(ops)) {
        if *s != 0 {
            *d = *s;
        }
    }
    // SAFETY: the provider's live verbs_context; only its op slots change.
    publish(unsafe { &mut *vctx }, &mine);
    Ok(())
}

/// Copies the ops that programs reach through the context's own tables.
fn publish(v: &mut verbs_context, o: &verbs_context_ops) {
    macro_rules! set {
        ($($dst:ident = $src:ident),* $(,)?) => {$(
            if o.$src.is_some() {
                v.$dst = o.$src;
            }
        )*};
    }
    set!(
        advise_mr = advise_mr,
        alloc_dm = alloc_dm,
        alloc_null_mr = alloc_null_mr,
        alloc_parent_domain = alloc_parent_domain,
        alloc_td = alloc_td,
        attach_counters_point_flow = attach_counters_point_flow,
        create_counters = create_counters,
        close_xrcd = close_xrcd,
        ibv_create_flow = create_flow,
        create_flow_action_esp = create_flow_action_esp,
        create_qp_ex = create_qp_ex,
        create_rwq_ind_table = create_rwq_ind_table,
        create_srq_ex = create_srq_ex,
        create_wq = create_wq,
        dealloc_td = dealloc_td,
        destroy_counters = destroy_counters,
        free_dm = free_dm,
        get_srq_num = get_srq_num,
        ibv_destroy_flow = destroy_flow,
        destroy_flow_action = destroy_flow_action,
        destroy_rwq_ind_table = destroy_rwq_ind_table,
        destroy_wq = destroy_wq,
        modify_cq = modify_cq,
        modify_flow_action_esp = modify_flow_action_esp,
        modify_qp_rate_limit = modify_qp_rate_limit,
        modify_wq = modify_wq,
        open_qp = open_qp,
        open_xrcd = open_xrcd,
        post_srq_ops = post_srq_ops,
        query_device_ex = query_device_ex,
        query_rt_values = query_rt_values,
        read_counters = read_counters,
        reg_dm_mr = reg_dm_mr,
    );
    let c = &mut v.context.ops;
    macro_rules! set_ctx {
        ($($f:ident),* $(,)?) => {$(
            if o.$f.is_some() {
                c.$f = o.$f;
            }
        )*};
    }
    set_ctx!(
        alloc_mw,
        bind_mw,
        dealloc_mw,
        poll_cq,
        post_recv,
        post_send,
        post_srq_recv,
        req_notify_cq
    );
}

/// `verbs_uninit_context`: the provider is freeing the context; this
/// library's part goes (its events stop, the NIC is released) and the
/// command fd is closed.
pub(crate) fn uninit(vctx: *mut verbs_context) -> Result<(), c_int> {
    // SAFETY: a hosted context's verbs_context, which the provider has
    // not freed yet.
    let c = unsafe { core::ptr::addr_of_mut!((*vctx).context) };
    let h = contexts_write().remove(&(c as usize)).ok_or(EINVAL)?;
    events::lock(&ROUTER).contexts.remove(&(c as usize));
    // SAFETY: as above.
    let fd = unsafe { (*c).cmd_fd };
    if fd >= 0 {
        // SAFETY: the command fd this library made; nothing else closes it.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: as above.
        unsafe { (*c).cmd_fd = -1 };
    }
    crate::stats::closing(h.nic.nic());
    drop(lock(&h.dispatcher).take());
    Ok(())
}

/// The public `post_send` of a hosted context: the provider's, then the
/// device is told of the doorbell it rang.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    guard("ibv_post_send", Conv::Errno, || {
        let h = owner(qp).ok_or(EINVAL)?;
        let f = h.fast.get().ok_or(EOPNOTSUPP)?;
        // SAFETY: a live QP of the provider (owner found its context).
        let qpn = Qpn::new(unsafe { (*qp).qp_num });
        h.watch.posting(qpn, true);
        // SAFETY: the provider's own op, with the caller's arguments.
        let r = unsafe { (f.post_send)(qp, wr, bad_wr) };
        h.rang_send(qpn);
        h.watch.posting(qpn, false);
        Ok(r)
    })
}

/// The public `poll_cq` of a hosted context: first the device is told of
/// doorbells rung without a call (`ibv_wr_complete`) by the QPs that send
/// into this CQ, then the provider's; a poll that finds nothing lets the
/// device make progress in this thread, as doorbell's own provider does.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    guard("ibv_poll_cq", Conv::Value(-1), || {
        let h = owner(cq).ok_or(EINVAL)?;
        let f = h.fast.get().ok_or(EOPNOTSUPP)?;
        // SAFETY: a live CQ of the provider; its handle is its number.
        h.watch.check(Some(Cqn::new(unsafe { (*cq).handle })));
        // SAFETY: the provider's own op, with the caller's arguments.
        let r = unsafe { (f.poll_cq)(cq, n, wc) };
        if r == 0 {
            h.nic.nic().progress();
        }
        Ok(r)
    })
}

/// The public `req_notify_cq` of a hosted context: the provider's, then the
/// device is told of the arm.
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    guard("ibv_req_notify_cq", Conv::Errno, || {
        let h = owner(cq).ok_or(EINVAL)?;
        let f = h.fast.get().ok_or(EOPNOTSUPP)?;
        // SAFETY: the provider's own op, with the caller's arguments.
        let r = unsafe { (f.req_notify_cq)(cq, solicited_only) };
        if r == 0 {
            // SAFETY: a live CQ of the provider; its handle is its number.
            h.watch.arms(Some(Cqn::new(unsafe { (*cq).handle })));
        }
        Ok(r)
    })
}

/// Hosted contexts by their `ibv_context` address. A leaf lock (decision
/// record 0068): nothing is taken, waited for or dropped but an `Arc`
/// clone's count while it is held.
static CONTEXTS: RwLock<BTreeMap<usize, Arc<HostedCtx>>> = RwLock::new(BTreeMap::new());

fn contexts_read() -> std::sync::RwLockReadGuard<'static, BTreeMap<usize, Arc<HostedCtx>>> {
    CONTEXTS.read().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn contexts_write()
-> std::sync::RwLockWriteGuard<'static, BTreeMap<usize, Arc<HostedCtx>>> {
    CONTEXTS.write().unwrap_or_else(|e| e.into_inner())
}

/// The hosted context `c` is, if it is one.
pub(crate) fn context(c: *mut ibv_context) -> Option<Arc<HostedCtx>> {
    if !super::ACTIVE.load(Ordering::Acquire) || c.is_null() {
        return None;
    }
    contexts_read().get(&(c as usize)).cloned()
}

/// A verbs object: its first field is its context.
///
/// # Safety
/// Implementors are `#[repr(C)]` structs whose first field is
/// `context: *mut ibv_context`.
pub(crate) unsafe trait HasContext {}
// SAFETY: each of these begins with `struct ibv_context *context`.
unsafe impl HasContext for ibv_pd {}
// SAFETY: as above.
unsafe impl HasContext for ibv_mr {}
// SAFETY: as above.
unsafe impl HasContext for ibv_cq {}
// SAFETY: as above.
unsafe impl HasContext for ibv_qp {}
// SAFETY: as above.
unsafe impl HasContext for ibv_srq {}
// SAFETY: as above.
unsafe impl HasContext for ibv_ah {}
// SAFETY: as above.
unsafe impl HasContext for ibv_comp_channel {}
// SAFETY: as above.
unsafe impl HasContext for ibv_td {}

/// The hosted context that owns `obj`, if any: read from the object's
/// `context` field, and only while a hosted device exists (rdma-core reads
/// it unconditionally; a pointer that is not an object is the caller's
/// fault there as here).
pub(crate) fn owner<T: HasContext>(obj: *mut T) -> Option<Arc<HostedCtx>> {
    if !super::ACTIVE.load(Ordering::Acquire) || obj.is_null() {
        return None;
    }
    // SAFETY: HasContext: the first field of a live object of this kind is
    // its context pointer.
    let c = unsafe { obj.cast::<*mut ibv_context>().read() };
    context(c)
}
