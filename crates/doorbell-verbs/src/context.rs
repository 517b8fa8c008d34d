//! A device context (`ibv_context`): the driver's user context, the
//! provider's view of the UAR pages and their bfregs, the doorbell-record
//! pages, and the registry of QPs that `poll_cq` consults.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use doorbell_driver::{AllocUcontextReq, AllocUcontextResp, DeviceLink, Ucontext};
use doorbell_hif::{DeviceCaps, NicEvent};
use doorbell_host::{HostMemory, Mmio, PAGE_SIZE};
use doorbell_layout::uar;
use doorbell_types::{Cqn, HostAddr, Qpn, UarIndex};

use crate::config::ProviderConfig;
use crate::error::VerbsError;
use crate::report::PostObserver;
use crate::wq::QpShared;

/// One doorbell/BlueFlame register as the provider sees it (`struct mlx5_bf`).
pub(crate) struct Bfreg {
    pub(crate) uar: UarIndex,
    /// Offset of the register in its UAR page.
    pub(crate) reg: u32,
    /// Size of one of its two BlueFlame buffers; 0 for bfreg 0.
    pub(crate) buf_size: u32,
    pub(crate) need_lock: bool,
    /// Its dynamic bfreg index (`bfreg_dyn_index`) when it lies on a
    /// dynamic page; `None` for a static register.
    pub(crate) dyn_index: Option<u32>,
    /// Which buffer the next write goes to (0 or `buf_size`). Under
    /// `lock` when `need_lock`; otherwise only its one QP writes it, under
    /// that QP's send queue lock.
    pub(crate) offset: AtomicU32,
    /// Held over a ring of a shared register (`need_lock`): its offset and
    /// its BlueFlame copy.
    pub(crate) lock: Mutex<()>,
}

/// The dynamic registers of a context (`dyn_uar_bf_list` and
/// `curr_legacy_dyn_sys_uar_page`).
#[derive(Default)]
pub(crate) struct DynRegs {
    /// Registers of mapped pages that no thread domain holds, in the order
    /// they are handed out.
    pub(crate) free: VecDeque<Arc<Bfreg>>,
    /// The next dynamic page to map.
    pub(crate) next_page: u32,
}

/// Doorbell-record pages: one host page split into cache-line slots, first
/// fit (`mlx5_alloc_dbrec`).
struct DbrPages {
    pages: Vec<(HostAddr, u64)>,
}

struct ContextInner {
    ucontext: Ucontext,
    cfg: ProviderConfig,
    mem: Arc<dyn HostMemory>,
    mmio: Arc<dyn Mmio>,
    bfregs: Vec<Arc<Bfreg>>,
    tot_uuars: u32,
    low_lat_uuars: u32,
    dbr: Mutex<DbrPages>,
    qps: RwLock<BTreeMap<Qpn, Arc<QpShared>>>,
    /// User indexes in use (`uidx` of create_qp).
    uidx: Mutex<std::collections::BTreeSet<u32>>,
    observer: RwLock<Option<Arc<dyn PostObserver>>>,
    /// Whether `observer` holds one: a post looks here, and takes the
    /// read lock only if so.
    observed: AtomicBool,
    /// Events read from the device while waiting for the other kind.
    pending: Mutex<PendingEvents>,
    /// Registers of the dynamic pages mapped for thread domains.
    dyn_regs: Mutex<DynRegs>,
}

/// The device has one event queue; the context hands completion events to
/// [`Context::get_cq_event`] and the rest to [`Context::get_async_event`],
/// keeping each kind that one of them reads while waiting for the other.
#[derive(Default)]
struct PendingEvents {
    cq: VecDeque<Cqn>,
    other: VecDeque<NicEvent>,
}

/// An open device context (`ibv_context`).
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

/// What a context reports about the device (`ibv_device_attr` and the
/// provider's view of the alloc_ucontext response).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Device capabilities.
    pub caps: DeviceCaps,
    /// The alloc_ucontext response.
    pub ucontext: AllocUcontextResp,
}

/// The port as `ibv_query_port` reports it: one port, RoCE on Ethernet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// The link is up (ACTIVE); down (DOWN) after [`Context::set_port_up`]
    /// took it down, or when the device is gone.
    pub active: bool,
    /// Largest path MTU in bytes.
    pub max_mtu: u32,
    /// The MTU in use: the largest, so that any path MTU up to it works.
    pub active_mtu: u32,
    /// GID table entries (index 0 holds the port's address).
    pub gid_tbl_len: u32,
    /// Largest message in bytes (2^31, as mlx5 reports).
    pub max_msg_sz: u32,
    /// P_Key table entries.
    pub pkey_tbl_len: u16,
    /// Ethernet (RoCE), not InfiniBand: no LID.
    pub ethernet: bool,
}

impl Context {
    /// Opens a context with settings from the `MLX5_*` environment variables.
    pub fn open(link: Arc<dyn DeviceLink>) -> Result<Self, VerbsError> {
        Self::with_config(link, ProviderConfig::from_env()?)
    }

    /// Opens a context with explicit settings.
    pub fn with_config(link: Arc<dyn DeviceLink>, cfg: ProviderConfig) -> Result<Self, VerbsError> {
        let (total, low) = cfg.normalised()?;
        let req = AllocUcontextReq {
            total_num_bfregs: total,
            num_low_latency_bfregs: low,
        };
        Self::with_request(link, req, cfg)
    }

    /// Opens a context with the bfreg request exactly as given, which the
    /// driver checks as the kernel does: what a host of another provider
    /// (rdma-core's libmlx5, which made the request) uses. That provider
    /// then drives the queues itself; this context answers the queries and
    /// carries the events, and [`Context::ucontext`] the commands.
    pub fn with_request(
        link: Arc<dyn DeviceLink>,
        req: AllocUcontextReq,
        cfg: ProviderConfig,
    ) -> Result<Self, VerbsError> {
        let low = req.num_low_latency_bfregs;
        let mem = Arc::clone(link.memory());
        let mmio = Arc::clone(link.mmio());
        let ucontext = Ucontext::alloc(link, req)?;
        let resp = ucontext.resp().clone();
        let tot_uuars = resp.tot_bfregs;
        let bf_reg_size = resp.bf_reg_size;
        // Map every static UAR: four registers each, 0 and 1 for user QPs.
        let mut bfregs = Vec::new();
        for (page, uar_index) in ucontext.uar_pages().iter().enumerate() {
            for k in 0..uar::BFREGS_PER_UAR {
                let bfi = page as u32 * uar::BFREGS_PER_UAR + k;
                let need_lock = need_uuar_lock(bfi, tot_uuars, low, cfg.single_threaded);
                bfregs.push(Arc::new(Bfreg {
                    uar: *uar_index,
                    reg: uar::bfreg_offset(k, bf_reg_size as usize) as u32,
                    buf_size: if bfi == 0 { 0 } else { bf_reg_size / 2 },
                    need_lock,
                    dyn_index: None,
                    offset: AtomicU32::new(0),
                    lock: Mutex::new(()),
                }));
            }
        }
        Ok(Self {
            inner: Arc::new(ContextInner {
                ucontext,
                cfg,
                mem,
                mmio,
                bfregs,
                tot_uuars,
                low_lat_uuars: low,
                dbr: Mutex::new(DbrPages { pages: Vec::new() }),
                qps: RwLock::new(BTreeMap::new()),
                uidx: Mutex::new(std::collections::BTreeSet::new()),
                observer: RwLock::new(None),
                observed: AtomicBool::new(false),
                pending: Mutex::new(PendingEvents::default()),
                dyn_regs: Mutex::new(DynRegs::default()),
            }),
        })
    }

    /// Device attributes.
    pub fn query_device(&self) -> DeviceAttr {
        DeviceAttr {
            caps: self.inner.ucontext.caps().clone(),
            ucontext: self.inner.ucontext.resp().clone(),
        }
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        self.inner.ucontext.link().name().to_string()
    }

    /// The wall-clock time, in ns since the Unix epoch, of device clock
    /// reading `ticks` (a completion's [`crate::Wc::timestamp`]); `None`
    /// where the device has no wall clock (the simulator).
    pub fn wallclock_ns(&self, ticks: u64) -> Option<u64> {
        let epoch = self.inner.ucontext.link().clock_epoch_unix_ns()?;
        let ns = u128::from(ticks) * 1_000_000 / u128::from(doorbell_hif::CORE_CLOCK_KHZ);
        Some(epoch.saturating_add(u64::try_from(ns).unwrap_or(u64::MAX)))
    }

    /// GID 0 of the port.
    pub fn gid(&self) -> [u8; 16] {
        self.inner.ucontext.link().gid()
    }

    /// True if `self` and `other` are the same context (clones of one open).
    pub fn same_as(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Sets (or with `None` removes) the observer of every post of this
    /// context's QPs.
    ///
    /// A post that runs meanwhile may or may not see the change.
    pub fn set_post_observer(&self, observer: Option<Arc<dyn PostObserver>>) {
        let mut o = self
            .inner
            .observer
            .write()
            .unwrap_or_else(|e| e.into_inner());
        self.inner
            .observed
            .store(observer.is_some(), Ordering::Release);
        *o = observer;
    }

    pub(crate) fn post_observer(&self) -> Option<Arc<dyn PostObserver>> {
        if !self.inner.observed.load(Ordering::Acquire) {
            return None;
        }
        self.inner
            .observer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The one port's attributes (port 1).
    pub fn query_port(&self) -> PortAttr {
        let caps = self.inner.ucontext.caps();
        PortAttr {
            // A device that does not answer has no link.
            active: self.driver().port_admin(None).unwrap_or(false),
            max_mtu: caps.max_mtu,
            active_mtu: caps.max_mtu,
            gid_tbl_len: GID_TABLE_LEN,
            max_msg_sz: 1 << 31,
            pkey_tbl_len: 1,
            ethernet: true,
        }
    }

    /// Takes the port's link down or up, as `ip link set ... down/up` does
    /// (an administrator's act, not a verb): every context then gets
    /// `NicEvent::PortDown` or `NicEvent::PortUp`, and while it is down no
    /// frame leaves or arrives, so RC peers retry and then fail.
    pub fn set_port_up(&self, up: bool) -> Result<(), VerbsError> {
        self.driver().port_admin(Some(up))?;
        Ok(())
    }

    /// GID `index` of port 1: index 0 is the IPv4-mapped form of the port's
    /// address; the other entries of the table are empty (`None`).
    pub fn query_gid(&self, index: u32) -> Option<[u8; 16]> {
        (index == 0).then(|| self.gid())
    }

    /// The provider settings in force.
    pub fn config(&self) -> &ProviderConfig {
        &self.inner.cfg
    }

    /// The UAR pages mapped into this context.
    pub fn uar_pages(&self) -> &[UarIndex] {
        self.inner.ucontext.uar_pages()
    }

    /// Waits up to `timeout` for the device's next asynchronous event of any
    /// kind (completion, CQ error, QP fatal ...). The device's events are
    /// one stream for every context on it: a caller that serves several
    /// routes them (the C library does, to completion channels and async
    /// event queues); it bypasses what [`Context::get_cq_event`] and
    /// [`Context::get_async_event`] keep, so use one way or the other.
    pub fn next_event(&self, timeout: std::time::Duration) -> Option<NicEvent> {
        let wait =
            doorbell_types::Duration::from_ns(timeout.as_nanos().min(u128::from(u64::MAX)) as u64);
        self.inner.ucontext.link().next_event(wait)
    }

    /// As [`Context::next_event`], but [`Context::wake_event_waiter`] ends
    /// the wait early (`None`). A wake is taken by one such waiter of the
    /// device, or kept for the next; the other waits never see it.
    pub fn next_event_or_wake(&self, timeout: std::time::Duration) -> Option<NicEvent> {
        let wait =
            doorbell_types::Duration::from_ns(timeout.as_nanos().min(u128::from(u64::MAX)) as u64);
        self.inner.ucontext.link().next_event_or_wake(wait)
    }

    /// Ends one wait in [`Context::next_event_or_wake`] on this device (the
    /// next, if none is waiting).
    pub fn wake_event_waiter(&self) {
        self.inner.ucontext.link().wake_event_waiter();
    }

    /// Waits up to `timeout` for a completion event of one of this
    /// context's CQs armed with [`crate::Cq::req_notify`]. Other events met while
    /// waiting are kept for [`Context::get_async_event`].
    pub fn get_cq_event(&self, timeout: std::time::Duration) -> Option<doorbell_types::Cqn> {
        self.wait_event(
            timeout,
            |p| p.cq.pop_front(),
            |e, p| match e {
                NicEvent::Completion(c) => Some(c),
                other => {
                    p.other.push_back(other);
                    None
                }
            },
        )
    }

    /// Waits up to `timeout` for the next asynchronous event of the device
    /// (`ibv_get_async_event`): a CQ error, a QP fatal error, an SRQ's limit
    /// ([`NicEvent::SrqLimit`]), a QP with an SRQ that will take no more
    /// WQEs ([`NicEvent::QpLastWqeReached`]). Completion events met while
    /// waiting are kept for [`Context::get_cq_event`].
    pub fn get_async_event(&self, timeout: std::time::Duration) -> Option<NicEvent> {
        self.wait_event(
            timeout,
            |p| p.other.pop_front(),
            |e, p| match e {
                NicEvent::Completion(c) => {
                    p.cq.push_back(c);
                    None
                }
                other => Some(other),
            },
        )
    }

    /// The next event `take` finds kept, or the next one of the device that
    /// `route` keeps for itself rather than for the other kind.
    fn wait_event<T>(
        &self,
        timeout: std::time::Duration,
        take: impl Fn(&mut PendingEvents) -> Option<T>,
        route: impl Fn(NicEvent, &mut PendingEvents) -> Option<T>,
    ) -> Option<T> {
        let pending = || self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = take(&mut pending()) {
            return Some(t);
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let wait =
                doorbell_types::Duration::from_ns(left.as_nanos().min(u128::from(u64::MAX)) as u64);
            match self.inner.ucontext.link().next_event(wait) {
                Some(e) => {
                    if let Some(t) = route(e, &mut pending()) {
                        return Some(t);
                    }
                    if left.is_zero() {
                        return None;
                    }
                }
                None => return None,
            }
        }
    }

    /// Pages holding this context's doorbell records, each with the number
    /// of QPs and CQs whose record it holds (the driver's pinned pages).
    pub fn doorbell_record_pages(&self) -> Vec<(HostAddr, u32)> {
        self.inner.ucontext.db_pages()
    }

    /// Static and low-latency bfreg counts after adjustment.
    pub fn bfreg_counts(&self) -> (u32, u32) {
        (self.inner.tot_uuars, self.inner.low_lat_uuars)
    }

    /// Host memory, for the owner of a buffer.
    pub(crate) fn mem(&self) -> &Arc<dyn HostMemory> {
        &self.inner.mem
    }

    pub(crate) fn driver(&self) -> &Ucontext {
        &self.inner.ucontext
    }

    /// The kernel's side of this context: its UARs, bfregs and objects, for
    /// a host of another provider that sends the commands itself.
    pub fn ucontext(&self) -> &Ucontext {
        &self.inner.ucontext
    }

    /// Allocates a zeroed doorbell record.
    pub(crate) fn alloc_dbrec(&self) -> Result<HostAddr, VerbsError> {
        let line = u64::from(self.inner.ucontext.resp().cache_line_size.max(8));
        let slots = (PAGE_SIZE / line).min(64) as u32;
        let full = if slots == 64 {
            u64::MAX
        } else {
            (1u64 << slots) - 1
        };
        let mut d = self.inner.dbr.lock().unwrap_or_else(|e| e.into_inner());
        let pos = d.pages.iter().position(|(_, used)| *used != full);
        let i = match pos {
            Some(i) => i,
            None => {
                let page = self.inner.mem.alloc(PAGE_SIZE)?;
                d.pages.push((page, 0));
                d.pages.len() - 1
            }
        };
        let (page, used) = &mut d.pages[i];
        let slot = (!*used).trailing_zeros();
        *used |= 1 << slot;
        let addr = doorbell_host::offset(*page, u64::from(slot) * line)?;
        self.inner.mem.write(addr, &[0u8; 8])?;
        Ok(addr)
    }

    /// Releases a doorbell record; frees its page when it was the last.
    pub(crate) fn free_dbrec(&self, addr: HostAddr) {
        let line = u64::from(self.inner.ucontext.resp().cache_line_size.max(8));
        let mut d = self.inner.dbr.lock().unwrap_or_else(|e| e.into_inner());
        let page = addr.get() & !(PAGE_SIZE - 1);
        if let Some(i) = d.pages.iter().position(|(p, _)| p.get() == page) {
            d.pages[i].1 &= !(1u64 << ((addr.get() - page) / line));
            if d.pages[i].1 == 0 {
                let (p, _) = d.pages.remove(i);
                let _ = self.inner.mem.free(p);
            }
        }
    }

    pub(crate) fn bfreg(&self, gross: u32) -> Option<&Arc<Bfreg>> {
        self.inner.bfregs.get(gross as usize)
    }

    /// The dynamic registers, under their lock (`dyn_bfregs_mutex`).
    pub(crate) fn dyn_regs(&self) -> std::sync::MutexGuard<'_, DynRegs> {
        self.inner
            .dyn_regs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn mmio(&self) -> &Arc<dyn Mmio> {
        &self.inner.mmio
    }

    pub(crate) fn register_qp(&self, shared: Arc<QpShared>) {
        self.inner
            .qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(shared.qpn, shared);
    }

    /// The lowest free user index (libmlx5's `mlx5_store_uidx` hands them
    /// out so), now in use.
    pub(crate) fn alloc_uidx(&self) -> u32 {
        let mut u = self.inner.uidx.lock().unwrap_or_else(|e| e.into_inner());
        let free = (0..).find(|i| !u.contains(i)).unwrap_or(0);
        u.insert(free);
        free
    }

    pub(crate) fn free_uidx(&self, uidx: u32) {
        self.inner
            .uidx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uidx);
    }

    pub(crate) fn unregister_qp(&self, qpn: Qpn) {
        self.inner
            .qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&qpn);
    }

    pub(crate) fn find_qp(&self, qpn: Qpn) -> Option<Arc<QpShared>> {
        self.inner
            .qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned()
    }
}

/// GID table entries of the port (mlx5's RoCE ports have 256; one is used).
pub const GID_TABLE_LEN: u32 = 256;

/// rdma-core's `need_uuar_lock`: bfreg 0 and the dedicated high class need
/// no lock, nor does anything when single-threaded; the shared medium class does.
fn need_uuar_lock(uuarn: u32, tot_uuars: u32, low_lat: u32, single_threaded: bool) -> bool {
    if uuarn == 0 || single_threaded {
        return false;
    }
    let i = uuarn / 2 + uuarn % 2;
    i < tot_uuars - low_lat
}
