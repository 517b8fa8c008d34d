//! The simulated machines: NICs behind modelled PCIe links, host memory,
//! CPU cores, and the wire between two hosts, driven by one event queue.
//!
//! The NIC, driver and provider are the ordinary ones. What is simulated:
//! - [`SimBus`], the device's `Dma`: it times every transaction on the
//!   NIC's [`LinkModel`], counts it like the live bus, and makes a DMA write
//!   visible to the host only when its last TLP has arrived;
//! - [`SimMmio`], the CPU's MMIO path: each store leaves at the posting
//!   core's virtual time (plus its cost) and reaches the NIC when the link
//!   delivers it;
//! - the wire: each port serialises frames at its rate, then the network
//!   delays them by its one-way latency; with `[network.faults]`, the
//!   frames of each direction pass a `doorbell_fault` stage on the way,
//!   which may drop, duplicate, corrupt or hold them back in virtual time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use doorbell_device::{Nic, NicConfig, Received};
use doorbell_driver::EventQueues;
use doorbell_fault::{FaultStage, FaultStats, Packet};
use doorbell_hif::{CmdError, CmdOut, Command, DeviceLink, NicEvent};
use doorbell_host::{HostMemory, HostRam, MemError, Mmio, RecordDoorbell};
use doorbell_pcap::Direction as Way;
use doorbell_pcie::model::{Direction, LinkModel, TlpTiming};
use doorbell_pcie::{Bus, Counters, Dma, DmaError, DmaTag};
use doorbell_types::{Cqn, Duration, HostAddr, Instant, Qpn, UarIndex};

use crate::kernel::Kernel;
use crate::profile::{Profile, dur_ns};
use crate::queue::EventQueue;
use crate::timeline::Timeline;

/// Locks a mutex, taking the data even if a panic poisoned it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The simulation's current time, shared with the links the driver uses.
#[derive(Default)]
pub(crate) struct Clock(AtomicU64);

impl Clock {
    pub(crate) fn now(&self) -> Instant {
        // Single-threaded: the ordering only has to be consistent.
        Instant::from_ps(self.0.load(Ordering::Relaxed))
    }

    pub(crate) fn set(&self, t: Instant) {
        self.0.store(t.as_ps(), Ordering::Relaxed);
    }
}

/// A DMA as a timeline records it: tag, write, engine slot, done, bytes.
pub(crate) type DmaDone = (DmaTag, bool, Instant, Instant, u64);

/// A DMA write on its way to host memory.
struct Pending {
    id: u64,
    visible: Instant,
    addr: HostAddr,
    data: Vec<u8>,
}

/// The device's end of a simulated PCIe link.
pub(crate) struct SimBus {
    counter: Bus,
    pub(crate) link: LinkModel,
    mem: Arc<dyn HostMemory>,
    pending: Vec<Pending>,
    next_id: u64,
    engine_runs: BTreeMap<u64, u64>,
    period: Duration,
    /// Writes applied ahead of their event (a later read forced them), with
    /// the time they became visible.
    pub(crate) applied: Vec<(HostAddr, usize, Instant)>,
    /// New writes since the world last looked: `(id, visible)`.
    pub(crate) fresh: Vec<(u64, Instant)>,
    /// MSI-X writes since the world last looked: `(vector, arrival)`.
    pub(crate) irqs: Vec<(u16, Instant)>,
    /// Every TLP (with the end of its serialisation) and every DMA (tag,
    /// write, engine slot, done, bytes), while a timeline is recorded.
    pub(crate) tlps: Option<Vec<(TlpTiming, Instant)>>,
    pub(crate) dmas: Option<Vec<DmaDone>>,
}

impl SimBus {
    fn new(profile: &Profile, mem: Arc<dyn HostMemory>) -> Self {
        let cfg = profile
            .link_model()
            .expect("validated when the profile was loaded");
        let split = cfg.link.split;
        Self {
            counter: Bus::new(split, mem.clone()),
            link: LinkModel::new(cfg).expect("validated when the profile was loaded"),
            mem,
            pending: Vec::new(),
            next_id: 0,
            engine_runs: BTreeMap::new(),
            period: profile.dma_period(),
            applied: Vec::new(),
            fresh: Vec::new(),
            irqs: Vec::new(),
            tlps: None,
            dmas: None,
        }
    }

    /// Applies the write `id` if it is still pending; returns where it went.
    pub(crate) fn apply(&mut self, id: u64) -> Option<(HostAddr, usize)> {
        let i = self.pending.iter().position(|p| p.id == id)?;
        let p = self.pending.remove(i);
        // The address was checked when the write was issued.
        let _ = self.mem.write(p.addr, &p.data);
        Some((p.addr, p.data.len()))
    }

    fn flush(&mut self, at: Instant) {
        for p in std::mem::take(&mut self.pending) {
            let _ = self.mem.write(p.addr, &p.data);
            self.applied.push((p.addr, p.data.len(), p.visible.max(at)));
        }
    }

    /// The DMA engine issues one transaction per `period`: the transaction
    /// takes the first stretch of `period` free at or after `at` (an idle
    /// engine issues at once). Taken time is kept as merged runs
    /// `[start, end)` in ps, not a single busy-until, because one input's
    /// later DMAs are submitted before another input's earlier ones.
    fn engine(&mut self, at: Instant) -> Instant {
        let p = self.period.as_ps();
        if p == 0 {
            return at;
        }
        let mut t = at.as_ps();
        // A run that holds `t` moves it to the run's end.
        if let Some((_, &end)) = self.engine_runs.range(..=t).next_back()
            && end > t
        {
            t = end;
        }
        // A gap shorter than a period before the next run is no room.
        while let Some((&s, &e)) = self.engine_runs.range(t + 1..).next() {
            if s >= t + p {
                break;
            }
            t = e;
        }
        // Take [t, t + p), merging with the run that ends at t and the one
        // that starts at t + p: runs never touch.
        let start = match self.engine_runs.range(..=t).next_back() {
            Some((&s, &e)) if e == t => s,
            _ => t,
        };
        let end = self.engine_runs.remove(&(t + p)).unwrap_or(t + p);
        self.engine_runs.insert(start, end);
        Instant::from_ps(t)
    }

    /// Forgets what ends before `before`: no later call is issued earlier.
    pub(crate) fn retire(&mut self, before: Instant) {
        self.link.retire(before);
        let now = before.as_ps();
        while let Some((&s, &e)) = self.engine_runs.first_key_value() {
            if e > now {
                break;
            }
            self.engine_runs.remove(&s);
        }
    }

    pub(crate) fn counters(&self) -> Counters {
        self.counter.counters()
    }

    /// Keeps `tlps` and the DMA, if a timeline is recorded.
    fn note(&mut self, tlps: Vec<TlpTiming>, dma: DmaDone) {
        if let Some(log) = &mut self.tlps {
            for t in tlps {
                let end = t.start.add(self.link.wire_time(t.wire_bytes));
                log.push((t, end));
            }
        }
        if let Some(d) = &mut self.dmas {
            d.push(dma);
        }
    }

    fn timed(&self) -> bool {
        self.tlps.is_some()
    }
}

impl SimBus {
    /// A DMA read of `len` bytes at `addr` issued at `at`, its bytes moved
    /// by `fill`: counted, and timed by the link. Returns when its data is
    /// in.
    fn read_timed(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        len: usize,
        fill: impl FnOnce(&dyn HostMemory) -> Result<(), MemError>,
    ) -> Result<Instant, DmaError> {
        // A read does not pass the writes before it.
        self.flush(at);
        let t = self.engine(at);
        self.counter.count_read(t, tag, addr, len as u64);
        fill(&*self.mem)?;
        let mut tlps = Vec::new();
        let done = if self.timed() {
            self.link
                .read_with(t, addr.get(), len as u64, |x| tlps.push(x))
                .last_data
        } else {
            self.link.read(t, addr.get(), len as u64).last_data
        };
        self.note(tlps, (tag, false, t, done, len as u64));
        Ok(done)
    }
}

impl Dma for SimBus {
    fn dma_read(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        buf: &mut [u8],
    ) -> Result<Instant, DmaError> {
        let len = buf.len();
        self.read_timed(at, tag, addr, len, |mem| mem.read(addr, buf))
    }

    fn dma_read_into(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        len: usize,
        pieces: &mut dyn Iterator<Item = &mut [u8]>,
    ) -> Result<Instant, DmaError> {
        self.read_timed(at, tag, addr, len, |mem| mem.read_into(addr, len, pieces))
    }

    fn dma_write(
        &mut self,
        at: Instant,
        tag: DmaTag,
        addr: HostAddr,
        data: &[u8],
    ) -> Result<Instant, DmaError> {
        self.mem.check(addr, data.len())?;
        let t = self.engine(at);
        self.counter.count_write(t, tag, addr, data.len() as u64);
        let mut tlps = Vec::new();
        let len = data.len() as u64;
        let visible = if self.timed() {
            self.link
                .write_with(t, addr.get(), len, Direction::ToHost, |x| tlps.push(x))
        } else {
            self.link.write(t, addr.get(), len, Direction::ToHost)
        };
        self.note(tlps, (tag, true, t, visible, len));
        self.next_id += 1;
        self.pending.push(Pending {
            id: self.next_id,
            visible,
            addr,
            data: data.to_vec(),
        });
        self.fresh.push((self.next_id, visible));
        Ok(t)
    }

    fn record_mmio(&mut self, at: Instant, qpn: Option<Qpn>, bytes: usize) {
        self.counter.record_mmio(at, qpn, bytes);
    }

    fn raise_msix(&mut self, at: Instant, vector: u16) -> Instant {
        // A posted write like any other: it leaves behind the writes
        // before it (the EQE) and arrives after them.
        let addr = doorbell_pcie::msix_address(vector);
        let t = self.engine(at);
        self.counter
            .count_write(t, doorbell_pcie::MSIX_TAG, addr, 4);
        let mut tlps = Vec::new();
        let arrive = if self.timed() {
            self.link
                .write_with(t, addr.get(), 4, Direction::ToHost, |x| tlps.push(x))
        } else {
            self.link.write(t, addr.get(), 4, Direction::ToHost)
        };
        self.note(tlps, (doorbell_pcie::MSIX_TAG, true, t, arrive, 4));
        self.irqs.push((vector, arrive));
        t
    }
}

/// Virtual time as a capture's timestamp: since the epoch of the run.
fn virtual_ts(at: Instant) -> std::time::Duration {
    std::time::Duration::from_nanos(at.as_ps() / 1000)
}

/// An MMIO store on its way to the NIC.
pub(crate) struct MmioOut {
    pub(crate) at: Instant,
    pub(crate) nic: usize,
    pub(crate) uar: UarIndex,
    pub(crate) offset: u32,
    pub(crate) len: u8,
    pub(crate) data: [u8; 64],
    /// A store whose bytes the NIC does not see: it reads this record.
    pub(crate) record: Option<RecordDoorbell>,
    pub(crate) core: usize,
    /// The `post_send` call that made it, while a timeline is recorded.
    pub(crate) post: Option<u64>,
}

/// The CPU cores of every host: their virtual clocks and what they cost.
pub(crate) struct Cpu {
    pub(crate) current: usize,
    pub(crate) t: Vec<Instant>,
    pub(crate) busy: Vec<Duration>,
    pub(crate) mmio_8b: Vec<Duration>,
    pub(crate) wc_chunk: Vec<Duration>,
    pub(crate) host_of: Vec<usize>,
    pub(crate) out: Vec<MmioOut>,
    /// The `post_send` call running, while a timeline is recorded.
    pub(crate) post: Option<u64>,
}

impl Cpu {
    pub(crate) fn charge(&mut self, core: usize, d: Duration) {
        self.t[core] = self.t[core].add(d);
        self.busy[core] = self.busy[core].add(d);
    }
}

/// The CPU's MMIO path into one NIC's UAR pages.
pub(crate) struct SimMmio {
    nic: usize,
    cpu: Arc<Mutex<Cpu>>,
}

impl Mmio for SimMmio {
    fn mmio_write(&self, uar: UarIndex, offset: u32, data: &[u8]) {
        let mut cpu = lock(&self.cpu);
        let core = cpu.current;
        let cost = if data.len() <= 8 {
            cpu.mmio_8b[core]
        } else {
            cpu.wc_chunk[core]
        };
        cpu.charge(core, cost);
        let mut buf = [0u8; 64];
        let len = data.len().min(64);
        buf[..len].copy_from_slice(&data[..len]);
        let at = cpu.t[core];
        let post = cpu.post;
        cpu.out.push(MmioOut {
            at,
            nic: self.nic,
            uar,
            offset,
            len: len as u8,
            data: buf,
            record: None,
            core,
            post,
        });
    }

    fn record_doorbell(&self, uar: UarIndex, db: RecordDoorbell) {
        let mut cpu = lock(&self.cpu);
        let core = cpu.current;
        let cost = cpu.mmio_8b[core];
        cpu.charge(core, cost);
        let at = cpu.t[core];
        let post = cpu.post;
        cpu.out.push(MmioOut {
            at,
            nic: self.nic,
            uar,
            offset: 0,
            len: 8,
            data: [0; 64],
            record: Some(db),
            core,
            post,
        });
    }
}

/// A NIC and its bus, shared by the world and the driver's link.
pub(crate) struct NicSide {
    pub(crate) nic: Nic,
    pub(crate) bus: SimBus,
}

/// The driver's view of a simulated NIC.
pub(crate) struct SimLink {
    name: String,
    gid: [u8; 16],
    side: Arc<Mutex<NicSide>>,
    mem: Arc<dyn HostMemory>,
    mmio: Arc<dyn Mmio>,
    clock: Arc<Clock>,
}

impl DeviceLink for SimLink {
    fn name(&self) -> &str {
        &self.name
    }

    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError> {
        let mut s = lock(&self.side);
        let NicSide { nic, bus } = &mut *s;
        nic.exec(self.clock.now(), cmd, bus)
    }

    fn memory(&self) -> &Arc<dyn HostMemory> {
        &self.mem
    }

    fn mmio(&self) -> &Arc<dyn Mmio> {
        &self.mmio
    }

    fn gid(&self) -> [u8; 16] {
        self.gid
    }

    fn next_event(&self, _timeout: Duration) -> Option<NicEvent> {
        // Completion channels are not simulated; workloads poll.
        None
    }
}

/// What happens in the simulated world.
#[derive(Debug)]
pub(crate) enum Ev {
    /// An MMIO store reaches a NIC.
    Mmio {
        nic: usize,
        uar: UarIndex,
        offset: u32,
        len: u8,
        data: [u8; 64],
        record: Option<RecordDoorbell>,
    },
    /// A frame reaches a NIC.
    Frame { nic: usize, bytes: Vec<u8> },
    /// A DMA write becomes visible in host memory.
    Visible { nic: usize, id: u64 },
    /// A NIC's transport timer.
    Timer { nic: usize },
    /// A host thread runs.
    Wake { thread: usize },
    /// Frames the fault stage of NIC `from`'s wire held back come due.
    Faults { from: usize },
    /// NIC `nic`'s MSI-X `vector` reaches its host's interrupt controller.
    Interrupt { nic: usize, vector: u16 },
}

/// A frame on the wire, as the fault stage holds it.
#[derive(Clone)]
struct Wired {
    dst: usize,
    bytes: Vec<u8>,
}

impl Packet for Wired {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

/// One line of the event log, for determinism checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogLine {
    /// When.
    pub at: Instant,
    /// What kind of event (0 MMIO, 1 frame, 2 write visible, 3 timer, 4 wake,
    /// 5 held frames due on a faulty wire, 6 an interrupt).
    pub kind: u8,
    /// The NIC or core.
    pub who: u32,
    /// A value describing it (offset, frame length, write id).
    pub detail: u64,
}

/// The two hosts, their NICs and the wire.
pub(crate) struct World {
    pub(crate) clock: Arc<Clock>,
    pub(crate) q: EventQueue<Ev>,
    pub(crate) nics: Vec<Arc<Mutex<NicSide>>>,
    pub(crate) links: Vec<Arc<SimLink>>,
    ips: Vec<[u8; 4]>,
    port_free: Vec<Instant>,
    timer_at: Vec<Option<Instant>>,
    pub(crate) cpu: Arc<Mutex<Cpu>>,
    port_ps_per_byte: f64,
    frame_overhead: i64,
    one_way: Duration,
    /// Threads waiting for a write into `[start, end)` of host `h`'s memory.
    pub(crate) waiting: Vec<Option<(usize, u64, u64)>>,
    /// Threads blocked in `ibv_get_cq_event` for a CQ of host `h`.
    waiting_event: Vec<Option<(usize, Cqn)>>,
    /// Each host's EQs and interrupt handler.
    kernel: Kernel,
    /// The handler's CPU time per interrupt, and waking a blocked thread.
    irq_cost: Duration,
    wakeup: Duration,
    pub(crate) log: Option<Vec<LogLine>>,
    /// A reusable buffer for frames leaving a NIC.
    frames: Vec<doorbell_device::Frame>,
    /// Where frames are recorded as they leave a port and as a NIC takes
    /// them in, interface by NIC.
    pub(crate) capture: Option<doorbell_pcap::Capture>,
    pub(crate) events: u64,
    /// Faults on the frames each NIC sends, and when its stage is next due.
    faults: Vec<Option<FaultStage<Wired>>>,
    faults_at: Vec<Option<Instant>>,
    /// What a timeline records, when one is asked for.
    pub(crate) timeline: Option<Timeline>,
}

impl World {
    /// Two hosts, one NIC each, with `cores[h]` cores on host `h` and
    /// `threads` host threads in all.
    pub(crate) fn new(profile: &Profile, cores: [usize; 2], threads: usize) -> Self {
        let clock = Arc::new(Clock::default());
        let host_of: Vec<usize> = (0..cores[0] + cores[1])
            .map(|c| usize::from(c >= cores[0]))
            .collect();
        let cores = cores[0] + cores[1];
        let c = &profile.cpu;
        let cpu = Arc::new(Mutex::new(Cpu {
            current: 0,
            t: vec![Instant::ZERO; cores],
            busy: vec![Duration::ZERO; cores],
            mmio_8b: vec![dur_ns(c.mmio_8b_ns); cores],
            wc_chunk: vec![dur_ns(c.wc_chunk_ns); cores],
            host_of,
            out: Vec::new(),
            post: None,
        }));
        let ips = vec![[10, 0, 0, 1], [10, 0, 0, 2]];
        let mut kernel = Kernel::new();
        let mut nics = Vec::new();
        let mut links = Vec::new();
        for (i, ip) in ips.iter().enumerate() {
            let mem: Arc<dyn HostMemory> = Arc::new(HostRam::new());
            let mut cfg = NicConfig::new(*ip);
            cfg.timing = profile.nic_timing();
            let gid = cfg.gid();
            let side = Arc::new(Mutex::new(NicSide {
                nic: Nic::new(cfg),
                bus: SimBus::new(profile, mem.clone()),
            }));
            let mmio: Arc<dyn Mmio> = Arc::new(SimMmio {
                nic: i,
                cpu: cpu.clone(),
            });
            // mlx5_core's part of bringing the NIC up: its EQs, armed
            // directly (before the run, off the simulated bus).
            let eqs = {
                let mut s = lock(&side);
                let NicSide { nic, bus } = &mut *s;
                let (nic, bus) = (std::cell::RefCell::new(nic), std::cell::RefCell::new(bus));
                EventQueues::create(
                    &mut |c| {
                        nic.borrow_mut()
                            .exec(Instant::ZERO, c, &mut **bus.borrow_mut())
                    },
                    &*mem,
                    &mut |u, o, d| {
                        nic.borrow_mut().handle_mmio(
                            Instant::ZERO,
                            u,
                            o,
                            d,
                            &mut **bus.borrow_mut(),
                        )
                    },
                )
                .ok()
            };
            kernel.add_host(eqs, mem.clone());
            links.push(Arc::new(SimLink {
                name: format!("sim{i}"),
                gid,
                side: side.clone(),
                mem: mem.clone(),
                mmio,
                clock: clock.clone(),
            }));
            nics.push(side);
        }
        let n = &profile.network;
        Self {
            clock,
            q: EventQueue::default(),
            nics,
            links,
            ips,
            port_free: vec![Instant::ZERO; 2],
            timer_at: vec![None; 2],
            cpu,
            port_ps_per_byte: 8000.0 / n.port_gbps,
            frame_overhead: i64::from(n.frame_overhead_bytes),
            one_way: dur_ns(n.one_way_ns),
            waiting: vec![None; threads],
            waiting_event: vec![None; threads],
            kernel,
            irq_cost: dur_ns(c.interrupt_ns),
            wakeup: dur_ns(c.wakeup_ns),
            log: None,
            frames: Vec::new(),
            capture: None,
            events: 0,
            faults: (0..2)
                .map(|d| n.faults.as_ref().map(|f| FaultStage::random(f.faults(d))))
                .collect(),
            faults_at: vec![None; 2],
            timeline: None,
        }
    }

    /// Puts a frame from NIC `from` for NIC `dst` on the wire once it has
    /// left the port, at `at`: through the fault stage, if there is one.
    /// `sent` is when the NIC had it ready and when the port started on it.
    fn wire(
        &mut self,
        from: usize,
        sent: (Instant, Instant),
        at: Instant,
        dst: usize,
        bytes: Vec<u8>,
    ) {
        let (ready, start) = sent;
        match &mut self.faults[from] {
            None => {
                if let Some(t) = &mut self.timeline {
                    t.record_frame(from, ready, start, at, at.add(self.one_way), &bytes, false);
                }
                if let Some(c) = &self.capture {
                    c.record_on(from as u32, virtual_ts(at), Way::Out, &bytes, None);
                }
                self.q
                    .push(at.add(self.one_way), Ev::Frame { nic: dst, bytes });
            }
            Some(stage) => {
                // A capture shows a frame the wire's faults lose, marked.
                let copy =
                    (self.capture.is_some() || self.timeline.is_some()).then(|| bytes.clone());
                let lost = stage.stats().dropped;
                stage.handle_frame(at, Wired { dst, bytes });
                let dropped = stage.stats().dropped > lost;
                if let (Some(c), Some(b)) = (&self.capture, &copy) {
                    let why = dropped.then_some("lost on the link (fault injection)");
                    c.record_on(from as u32, virtual_ts(at), Way::Out, b, why);
                }
                if let (Some(t), Some(b)) = (&mut self.timeline, &copy) {
                    t.record_frame(from, ready, start, at, at.add(self.one_way), b, dropped);
                }
                self.release(from, at);
            }
        }
    }

    /// Sends on the frames of `from`'s fault stage due by `upto`, each at
    /// its own due time, and schedules the stage's next one.
    fn release(&mut self, from: usize, upto: Instant) {
        let Some(stage) = &mut self.faults[from] else {
            return;
        };
        while let Some(t) = stage.poll_timeout().filter(|&t| t <= upto) {
            while let Some(w) = stage.poll_ready(t) {
                let ev = Ev::Frame {
                    nic: w.dst,
                    bytes: w.bytes,
                };
                self.q.push(t.add(self.one_way), ev);
            }
        }
        if let Some(t) = stage.poll_timeout()
            && self.faults_at[from].is_none_or(|s| t < s)
        {
            self.faults_at[from] = Some(t);
            self.q.push(t, Ev::Faults { from });
        }
    }

    /// What the fault stage on NIC `i`'s wire did, if it has one.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn fault_stats(&self, i: usize) -> Option<FaultStats> {
        self.faults[i].as_ref().map(FaultStage::stats)
    }

    /// Moves everything the NICs and cores produced into the event queue.
    pub(crate) fn drain(&mut self) {
        self.drain_cpu();
        for i in 0..self.nics.len() {
            self.drain_nic(i);
        }
    }

    /// Schedules the MMIO stores the cores made.
    fn drain_cpu(&mut self) {
        let outs = {
            let mut cpu = lock(&self.cpu);
            if cpu.out.is_empty() {
                return;
            }
            std::mem::take(&mut cpu.out)
        };
        for o in outs {
            let mut side = lock(&self.nics[o.nic]);
            let addr = 0x8000_0000 + u64::from(o.uar.get()) * 4096 + u64::from(o.offset);
            let mut tlps = Vec::new();
            let each = |t: TlpTiming| tlps.push(t);
            let arrive = if o.len <= 8 {
                side.bus
                    .link
                    .write_with(o.at, addr, u64::from(o.len), Direction::ToDevice, each)
            } else {
                side.bus
                    .link
                    .write_combined_with(o.at, addr, u64::from(o.len), each)
            };
            if let Some(t) = &mut self.timeline {
                for tlp in tlps {
                    let end = tlp.start.add(side.bus.link.wire_time(tlp.wire_bytes));
                    t.record_tlp(o.nic, tlp, end);
                }
                let cost = lock(&self.cpu).mmio_8b[o.core];
                let left = if o.len <= 8 {
                    Instant::from_ps(o.at.as_ps().saturating_sub(cost.as_ps()))
                } else {
                    o.at
                };
                t.record_store(o.post, o.nic, o.core, left, arrive, o.len);
            }
            drop(side);
            self.q.push(
                arrive,
                Ev::Mmio {
                    nic: o.nic,
                    uar: o.uar,
                    offset: o.offset,
                    len: o.len,
                    data: o.data,
                    record: o.record,
                },
            );
        }
    }

    /// Schedules what NIC `i` produced: frames on the wire, DMA writes
    /// becoming visible, its next timer.
    fn drain_nic(&mut self, i: usize) {
        let now = self.clock.now();
        let mut frames = std::mem::take(&mut self.frames);
        let (writes, applied, irqs, timer) = {
            let mut s = lock(&self.nics[i]);
            while let Some(f) = s.nic.poll_transmit() {
                frames.push(f);
            }
            while s.nic.poll_event().is_some() {}
            // The NIC's interrupts are in the bus's record, with their
            // arrival times.
            while s.nic.poll_interrupt().is_some() {}
            if let Some(t) = &mut self.timeline {
                let work = s.nic.take_pu_work();
                t.record_pu(i, work);
                for (tlp, end) in s.bus.tlps.as_mut().map(std::mem::take).unwrap_or_default() {
                    t.record_tlp(i, tlp, end);
                }
                for (tag, write, slot, done, len) in
                    s.bus.dmas.as_mut().map(std::mem::take).unwrap_or_default()
                {
                    t.record_dma(i, tag.qpn, tag.purpose, write, slot, done, len);
                }
            }
            let writes = std::mem::take(&mut s.bus.fresh);
            let applied = std::mem::take(&mut s.bus.applied);
            let irqs = std::mem::take(&mut s.bus.irqs);
            (writes, applied, irqs, s.nic.poll_timeout())
        };
        for (id, visible) in writes {
            self.q.push(visible, Ev::Visible { nic: i, id });
        }
        // After the writes: an EQE and its MSI-X may arrive together.
        for (vector, at) in irqs {
            self.q.push(at, Ev::Interrupt { nic: i, vector });
        }
        for (addr, len, at) in applied {
            self.wake_waiters(i, addr, len, at.max(now));
        }
        for f in frames.drain(..) {
            let Some(dst) = self.ips.iter().position(|ip| *ip == f.dst) else {
                continue;
            };
            let wire_bytes = (f.bytes.len() as i64 + self.frame_overhead).max(1) as f64;
            let start = f.ready.max(self.port_free[i]).max(now);
            let done = start.add(Duration::from_ps(
                (wire_bytes * self.port_ps_per_byte).round() as u64,
            ));
            self.port_free[i] = done;
            self.wire(i, (f.ready, start), done, dst, f.bytes);
        }
        self.frames = frames;
        if let Some(t) = timer
            && self.timer_at[i].is_none_or(|s| t < s)
        {
            self.timer_at[i] = Some(t);
            self.q.push(t, Ev::Timer { nic: i });
        }
    }

    /// Wakes the threads waiting for memory that a write of `len` bytes at
    /// `addr` in host `host` touched.
    fn wake_waiters(&mut self, host: usize, addr: HostAddr, len: usize, at: Instant) {
        let a = addr.get();
        for thread in 0..self.waiting.len() {
            if let Some((h, start, end)) = self.waiting[thread]
                && h == host
                && a < end
                && a + len as u64 > start
            {
                self.waiting[thread] = None;
                self.q.push(at, Ev::Wake { thread });
            }
        }
    }

    /// Runs one event; returns its time and the thread to run, if it was a
    /// wake-up.
    pub(crate) fn step(&mut self) -> Option<(Instant, Option<usize>)> {
        let (at, ev) = self.q.pop()?;
        self.clock.set(at);
        // Nothing is issued before the clock from now on: the links may
        // forget what is over.
        for side in &self.nics {
            lock(side).bus.retire(at);
        }
        self.events += 1;
        let line = |kind: u8, who: usize, detail: u64| LogLine {
            at,
            kind,
            who: who as u32,
            detail,
        };
        let mut run = None;
        let entry = match ev {
            Ev::Mmio {
                nic,
                uar,
                offset,
                len,
                data,
                record,
            } => {
                let mut s = lock(&self.nics[nic]);
                let NicSide { nic: n, bus } = &mut *s;
                match record {
                    Some(db) => n.handle_record_doorbell(at, uar, db, bus),
                    None => n.handle_mmio(at, uar, offset, &data[..usize::from(len)], bus),
                }
                line(0, nic, u64::from(offset))
            }
            Ev::Frame { nic, bytes } => {
                let mut s = lock(&self.nics[nic]);
                let NicSide { nic: n, bus } = &mut *s;
                let r = n.handle_frame(at, &bytes, bus);
                if let Some(t) = &mut self.timeline {
                    t.record_arrival(nic, at, &bytes);
                }
                if let Some(c) = &self.capture {
                    let why = match r {
                        Received::Taken => None,
                        Received::Dropped(why) => Some(why),
                    };
                    c.record_on(nic as u32, virtual_ts(at), Way::In, &bytes, why);
                }
                line(1, nic, bytes.len() as u64)
            }
            Ev::Visible { nic, id } => {
                let applied = lock(&self.nics[nic]).bus.apply(id);
                if let Some((addr, len)) = applied {
                    self.wake_waiters(nic, addr, len, at);
                }
                line(2, nic, id)
            }
            Ev::Timer { nic } => {
                self.timer_at[nic] = None;
                let mut s = lock(&self.nics[nic]);
                let NicSide { nic: n, bus } = &mut *s;
                n.handle_timeout(at, bus);
                line(3, nic, 0)
            }
            Ev::Wake { thread } => {
                run = Some(thread);
                line(4, thread, 0)
            }
            Ev::Faults { from } => {
                self.faults_at[from] = None;
                self.release(from, at);
                line(5, from, 0)
            }
            Ev::Interrupt { nic, vector } => {
                self.interrupt(nic, vector, at);
                line(6, nic, u64::from(vector))
            }
        };
        if let Some(log) = &mut self.log {
            log.push(entry);
        }
        match entry.kind {
            0..=1 | 3 => self.drain_nic(entry.who as usize),
            _ => {}
        }
        Some((at, run))
    }

    /// Counters of NIC `i`'s bus.
    pub(crate) fn counters(&self, i: usize) -> Counters {
        lock(&self.nics[i]).bus.counters()
    }

    /// Starts recording a timeline: every TLP, DMA and stretch of
    /// processing-unit time of both NICs from now on.
    pub(crate) fn start_timeline(&mut self, mut t: Timeline) {
        t.host_of_core = lock(&self.cpu).host_of.clone();
        for side in &self.nics {
            let mut s = lock(side);
            s.bus.tlps = Some(Vec::new());
            s.bus.dmas = Some(Vec::new());
            t.dma_period = s.bus.period;
            s.nic.record_pu_work(true);
        }
        self.timeline = Some(t);
    }

    /// Busy time of each direction of NIC `i`'s link.
    pub(crate) fn link_busy(&self, i: usize) -> (Duration, Duration) {
        let s = lock(&self.nics[i]);
        (
            s.bus.link.stats(Direction::ToDevice).busy,
            s.bus.link.stats(Direction::ToHost).busy,
        )
    }

    /// Bytes on each direction of NIC `i`'s link, TLP overheads included.
    pub(crate) fn link_bytes(&self, i: usize) -> (u64, u64) {
        let s = lock(&self.nics[i]);
        (
            s.bus.link.stats(Direction::ToDevice).wire_bytes,
            s.bus.link.stats(Direction::ToHost).wire_bytes,
        )
    }

    /// TLPs NIC `i`'s link carried, both directions.
    pub(crate) fn link_tlps(&self, i: usize) -> u64 {
        let s = lock(&self.nics[i]);
        s.bus.link.stats(Direction::ToDevice).tlps + s.bus.link.stats(Direction::ToHost).tlps
    }

    /// Processing-unit time NIC `i` spent.
    pub(crate) fn pu_busy(&self, i: usize) -> Duration {
        lock(&self.nics[i]).nic.pu_busy()
    }

    /// Host `host`'s interrupt handler runs on the host's first core: it
    /// costs that core the handler's time, its EQ doorbell crosses the bus
    /// like any MMIO store, and the threads blocked on a CQ it reports wake
    /// after the scheduler's wake-up time.
    fn interrupt(&mut self, host: usize, vector: u16, at: Instant) {
        let (core, done) = {
            let mut cpu = lock(&self.cpu);
            let Some(core) = cpu.host_of.iter().position(|&h| h == host) else {
                return;
            };
            cpu.current = core;
            cpu.t[core] = cpu.t[core].max(at);
            cpu.charge(core, self.irq_cost);
            (core, cpu.t[core])
        };
        let mmio = self.links[host].mmio.clone();
        let (events, _) = self.kernel.interrupt(host, vector, &*mmio);
        let done = lock(&self.cpu).t[core].max(done);
        for e in events {
            let NicEvent::Completion(cqn) = e else {
                continue;
            };
            for thread in 0..self.waiting_event.len() {
                if self.waiting_event[thread] == Some((host, cqn)) {
                    self.waiting_event[thread] = None;
                    self.q.push(done.add(self.wakeup), Ev::Wake { thread });
                }
            }
        }
        self.drain_cpu();
    }

    /// Makes `thread` block until a completion event of CQ `cqn` of host
    /// `host` (after it armed the CQ).
    pub(crate) fn watch_event(&mut self, thread: usize, host: usize, cqn: Cqn) {
        self.waiting_event[thread] = Some((host, cqn));
    }

    /// Makes `thread` wait for a write into `len` bytes at `start` of host
    /// `host`'s memory.
    pub(crate) fn watch(&mut self, thread: usize, host: usize, start: u64, len: u64) {
        self.waiting[thread] = Some((host, start, start + len));
    }
}
