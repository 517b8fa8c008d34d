//! A synchronous loopback device link: one NIC with no thread, driven to
//! completion inside every call, on a clock that moves only when told.
//!
//! # Model
//! [`LoopbackLink`] implements [`DeviceLink`] over a [`Nic`], a [`Bus`] and
//! a [`HostRam`] behind one lock. A command runs before
//! [`DeviceLink::exec`] returns; an MMIO store runs the doorbell, and
//! everything it causes, before [`Mmio::mmio_write`] returns: frames the NIC
//! sends to its own address are fed straight back in (two QPs of one NIC
//! talk to each other, as on a NIC that delivers frames addressed to
//! itself), frames to any other address are counted and dropped, and events
//! travel as on hardware: the device writes EQEs into the kernel's event
//! queues ([`EventQueues`]) and raises their MSI-X vector, the interrupt
//! handler runs inline, re-arms through the EQ doorbell, and the events
//! queue for [`DeviceLink::next_event`]. Time is a virtual clock that
//! starts at zero; [`LoopbackLink::advance`] moves it and fires the
//! transport's timers (ACK timeouts, RNR waits) that fall due, so a test of
//! a retry or a timeout takes no wall-clock time and cannot fail by chance.
//!
//! [`LoopbackLink::with_faults`] puts a [`FaultStage`] on the loopback path:
//! every frame the NIC sends to itself, request or response, meets the
//! policy, and a delayed frame comes back in when [`LoopbackLink::advance`]
//! reaches its due time on the virtual clock, so a test of loss, reordering
//! or corruption is exact too.
//!
//! It exists so that the driver and the provider get tests of their own,
//! single-threaded and deterministic; the live runtime proper is
//! [`crate::LiveNic`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use doorbell_device::{Nic, NicConfig, NicCounters};
use doorbell_driver::EventQueues;
use doorbell_fault::{DEFAULT_QUEUE_LIMIT, FaultPolicy, FaultStage, FaultStats};
use doorbell_hif::{CmdError, CmdOut, Command, DeviceLink, NicEvent};
use doorbell_host::{HostMemory, HostRam, Mmio, RecordDoorbell};
use doorbell_pcie::{Bus, Counters, LinkConfig};
use doorbell_types::{Duration, Instant, Qpn, UarIndex};

struct Device {
    nic: Nic,
    bus: Bus,
    now: Instant,
    events: VecDeque<NicEvent>,
    /// Frames sent to an address other than the NIC's own.
    dropped: u64,
    /// Faults on the way from the NIC back to itself.
    faults: Option<FaultStage<Vec<u8>>>,
    /// The kernel's EQs (`None` only if creating them failed).
    eqs: Option<EventQueues>,
    mem: Arc<dyn HostMemory>,
    /// Events the interrupt handler decoded, reused between interrupts.
    decoded: Vec<NicEvent>,
}

impl Device {
    /// Runs the NIC until it has nothing left to do at `now`: frames to
    /// itself go back in (through the fault stage, if there is one), timers
    /// due fire, events queue.
    fn settle(&mut self, own: [u8; 4]) {
        loop {
            let mut moved = false;
            while let Some(f) = self.nic.poll_transmit() {
                moved = true;
                if f.dst != own {
                    self.dropped += 1;
                } else if let Some(stage) = &mut self.faults {
                    stage.handle_frame(self.now, f.bytes);
                } else {
                    self.nic.handle_frame(self.now, &f.bytes, &mut self.bus);
                }
            }
            // A NIC configured to build its windows a burst at a time
            // (`NicConfig::tx_burst`) builds the next one now.
            if self.nic.resume_transmit(self.now, &mut self.bus) {
                moved = true;
            }
            if let Some(stage) = &mut self.faults {
                while let Some(bytes) = stage.poll_ready(self.now) {
                    moved = true;
                    self.nic.handle_frame(self.now, &bytes, &mut self.bus);
                }
            }
            if self.nic.poll_timeout().is_some_and(|t| t <= self.now) {
                moved = true;
                self.nic.handle_timeout(self.now, &mut self.bus);
            }
            while let Some(v) = self.nic.poll_interrupt() {
                moved = true;
                self.interrupt(v);
            }
            while let Some(e) = self.nic.poll_event() {
                self.events.push_back(e);
            }
            if !moved {
                return;
            }
        }
    }

    /// Runs the interrupt handler of `vector`; its EQ doorbell goes
    /// straight to the NIC.
    fn interrupt(&mut self, vector: u16) {
        let Device {
            nic,
            bus,
            now,
            eqs,
            mem,
            decoded,
            events,
            ..
        } = self;
        if let Some(eqs) = eqs {
            let mut ring = |u, o, d: &[u8]| nic.handle_mmio(*now, u, o, d, bus);
            eqs.handle_interrupt(vector, &**mem, &mut ring, decoded);
            events.extend(decoded.drain(..));
        }
    }

    /// The next time something happens: a NIC timer or a held frame due.
    fn next_due(&self) -> Option<Instant> {
        let frames = self.faults.as_ref().and_then(FaultStage::poll_timeout);
        match (self.nic.poll_timeout(), frames) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

struct Shared {
    dev: Mutex<Device>,
    own: [u8; 4],
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Device> {
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct LoopbackMmio(Arc<Shared>);

impl Mmio for LoopbackMmio {
    fn mmio_write(&self, uar: UarIndex, offset: u32, data: &[u8]) {
        let mut d = self.0.lock();
        let Device { nic, bus, now, .. } = &mut *d;
        nic.handle_mmio(*now, uar, offset, data, bus);
        d.settle(self.0.own);
    }

    fn record_doorbell(&self, uar: UarIndex, db: RecordDoorbell) {
        let mut d = self.0.lock();
        let Device { nic, bus, now, .. } = &mut *d;
        nic.handle_record_doorbell(*now, uar, db, bus);
        d.settle(self.0.own);
    }
}

/// A NIC driven synchronously by its callers. See the module docs.
pub struct LoopbackLink {
    name: String,
    gid: [u8; 16],
    shared: Arc<Shared>,
    mem: Arc<dyn HostMemory>,
    mmio: Arc<dyn Mmio>,
}

impl LoopbackLink {
    /// A NIC named `name` at `ipv4` over fresh host memory, with the default
    /// PCIe link.
    pub fn new(name: &str, ipv4: [u8; 4]) -> Self {
        Self::build(name, NicConfig::new(ipv4), None)
    }

    /// As [`LoopbackLink::new`], for a NIC of `cfg` (at `cfg.ipv4`): other
    /// capabilities, such as small tables to run out of.
    pub fn with_config(name: &str, cfg: NicConfig) -> Self {
        Self::build(name, cfg, None)
    }

    /// As [`LoopbackLink::new`], with `policy` deciding the fate of every
    /// frame the NIC sends to itself; delays run on the virtual clock, and
    /// at most [`DEFAULT_QUEUE_LIMIT`] delayed frames wait at once.
    pub fn with_faults(name: &str, ipv4: [u8; 4], policy: impl FaultPolicy + 'static) -> Self {
        let stage = FaultStage::new(Box::new(policy), DEFAULT_QUEUE_LIMIT);
        Self::build(name, NicConfig::new(ipv4), Some(stage))
    }

    fn build(name: &str, cfg: NicConfig, faults: Option<FaultStage<Vec<u8>>>) -> Self {
        let mem: Arc<dyn HostMemory> = Arc::new(HostRam::new());
        let ipv4 = cfg.ipv4;
        let gid = cfg.gid();
        // The kernel's part of bringing the device up: its event queues.
        // Without them events would stay in the NIC.
        let nic = std::cell::RefCell::new(Nic::new(cfg));
        let bus = std::cell::RefCell::new(Bus::new(LinkConfig::default(), mem.clone()));
        let eqs = EventQueues::create(
            &mut |c| {
                nic.borrow_mut()
                    .exec(Instant::ZERO, c, &mut *bus.borrow_mut())
            },
            &*mem,
            &mut |u, o, d| {
                nic.borrow_mut()
                    .handle_mmio(Instant::ZERO, u, o, d, &mut *bus.borrow_mut())
            },
        )
        .ok();
        let mut dev = Device {
            nic: nic.into_inner(),
            bus: bus.into_inner(),
            now: Instant::ZERO,
            events: VecDeque::new(),
            dropped: 0,
            faults,
            eqs,
            mem: mem.clone(),
            decoded: Vec::new(),
        };
        dev.settle(ipv4);
        let shared = Arc::new(Shared {
            dev: Mutex::new(dev),
            own: ipv4,
        });
        Self {
            name: name.to_string(),
            gid,
            mmio: Arc::new(LoopbackMmio(shared.clone())),
            shared,
            mem,
        }
    }

    /// The virtual time now.
    pub fn now(&self) -> Instant {
        self.shared.lock().now
    }

    /// Moves the clock on by `d`, firing every timer that falls due on the
    /// way and delivering every held frame that comes due, each at its own
    /// time, in order.
    pub fn advance(&self, d: Duration) {
        let mut dev = self.shared.lock();
        let end = dev.now.add(d);
        while let Some(t) = dev.next_due().filter(|&t| t <= end) {
            dev.now = dev.now.max(t);
            dev.settle(self.shared.own);
        }
        dev.now = end;
        dev.settle(self.shared.own);
    }

    /// When the next thing is due: a NIC timer, or a frame the fault stage
    /// holds back.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.shared.lock().next_due()
    }

    /// What the fault stage did, if the link has one.
    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.shared.lock().faults.as_ref().map(FaultStage::stats)
    }

    /// Bus counters (all, or one QP's) and device counters.
    pub fn counters(&self, qpn: Option<Qpn>) -> (Counters, NicCounters) {
        let d = self.shared.lock();
        let bus = qpn.map_or_else(|| d.bus.counters(), |q| d.bus.qp_counters(q));
        (bus, d.nic.counters())
    }

    /// Frames the NIC sent to an address other than its own.
    pub fn dropped_frames(&self) -> u64 {
        self.shared.lock().dropped
    }
}

impl DeviceLink for LoopbackLink {
    fn name(&self) -> &str {
        &self.name
    }

    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError> {
        let mut d = self.shared.lock();
        let Device { nic, bus, now, .. } = &mut *d;
        let out = nic.exec(*now, cmd, bus);
        d.settle(self.shared.own);
        out
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

    /// Takes the next queued event; never waits (nothing else can raise
    /// one meanwhile), so `timeout` is ignored.
    fn next_event(&self, _timeout: Duration) -> Option<NicEvent> {
        self.shared.lock().events.pop_front()
    }
}
