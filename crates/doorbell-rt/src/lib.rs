//! The live runtime: the NIC on a real thread, at wall-clock speed.
//!
//! # Model
//! Each [`LiveNic`] runs the sans-IO [`doorbell_device::Nic`] on a thread of
//! its own, with its end of the PCIe [`Bus`] over the host memory the host
//! software shares with it. Everything reaches the device thread through one
//! FIFO: MMIO writes from the CPU (in the order each thread made them),
//! commands from the driver, and frames from the [`Fabric`]. The thread
//! handles each in turn, then drains the NIC's outputs: frames go to the
//! fabric, MSI-X interrupts to the NIC's interrupt handler thread. That
//! thread plays the kernel: it created the event queues when the NIC
//! started ([`doorbell_driver::EventQueues`]), reads the EQEs the device
//! wrote into them, re-arms them through their doorbell, and hands the
//! events to [`DeviceLink::next_event`]. Transport timers run on the wall
//! clock.
//!
//! A NIC's port is one of two transports ([`Port`]):
//! * [`Fabric`], the in-process link: it routes each IPv4 frame to the NIC
//!   that owns the destination address, unchanged, so the frames are the
//!   same RoCEv2 packets a UDP link would carry;
//! * a UDP socket bound to port 4791 on the NIC's address (module `udp`):
//!   RoCEv2 between processes and hosts, with a receive thread per port
//!   feeding the device thread's FIFO. [`LiveNic::start_udp`].
//!
//! Either way the port's GID 0 is the IPv4-mapped form of its address, and
//! frames may pass a fault-injecting relay on their way out ([`fault`]).
//!
//! The host memory a NIC serves is a fresh [`doorbell_host::HostRam`] unless
//! [`NicOptions::memory`] names another: [`ProcessMemory`] is the process's
//! own memory, where registration pins a caller's buffer in place (what the
//! C library uses).
//!
//! [`LoopbackLink`] is the third way to drive the same NIC: no thread, every
//! call run to completion, time on a virtual clock that only tests move;
//! host software tests itself against it.
//!
//! # Example
//! ```no_run
//! use doorbell_pcie::LinkConfig;
//! use doorbell_rt::LiveNic;
//!
//! // Two NICs, as two processes would start them, on 127.0.0.2 and .3.
//! let a = LiveNic::start_udp("a", [127, 0, 0, 2], LinkConfig::default()).unwrap();
//! let b = LiveNic::start_udp("b", [127, 0, 0, 3], LinkConfig::default()).unwrap();
//! assert_eq!(a.gid()[10..], [0xff, 0xff, 127, 0, 0, 2]);
//! # drop(b);
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

pub mod fault;
mod inbox;
mod irq;
pub mod loopback;
pub mod process;
pub mod procmem;
pub mod stats;
#[allow(unsafe_code)]
mod sys;
mod udp;

pub use fault::{Fate, FaultPolicy, FaultStage, FaultStats, Faults, RandomFaults};
pub use udp::PortCounters;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};
use doorbell_device::{Frame, Nic, NicConfig, NicCounters};
use doorbell_driver::EventQueues;
use doorbell_hif::{CmdError, CmdOut, Command, DeviceLink, NicEvent};
use doorbell_host::{HostMemory, HostRam, Mmio};
use doorbell_pcie::{Bus, ConfigError, Counters, Crossing, LinkConfig};
use doorbell_types::{Instant, Qpn, UarIndex};

use inbox::Msg;
pub use loopback::LoopbackLink;
pub use process::{LinkDown, ProcessNic, ProcessNicConfig, ProcessNicError};
pub use procmem::ProcessMemory;

/// Errors of the live runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtError {
    /// The PCIe parameters are not legal.
    #[error(transparent)]
    Link(#[from] ConfigError),
    /// Another NIC on the fabric already has this address.
    #[error("address {0:?} is already taken on the fabric")]
    AddressInUse([u8; 4]),
    /// The device thread could not be started.
    #[error("could not start the device thread")]
    Spawn,
    /// The port's UDP socket could not be bound or set up.
    #[error("UDP port on {addr:?}: {kind}")]
    Socket {
        /// The address asked for.
        addr: [u8; 4],
        /// What the OS said.
        kind: std::io::ErrorKind,
    },
}

/// An in-process network of NICs, addressed by IPv4.
#[derive(Default, Clone)]
pub struct Fabric {
    routes: Arc<Mutex<BTreeMap<[u8; 4], Sender<Msg>>>>,
    dropped: Arc<Mutex<u64>>,
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Self {
        Self::default()
    }

    fn deliver(&self, dst: [u8; 4], bytes: Vec<u8>) {
        let route = self
            .routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&dst)
            .cloned();
        match route {
            Some(tx) if tx.send(Msg::Frame(bytes)).is_ok() => {}
            _ => *self.dropped.lock().unwrap_or_else(|e| e.into_inner()) += 1,
        }
    }

    /// Frames sent to an address no NIC owns.
    pub fn dropped(&self) -> u64 {
        *self.dropped.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fault::Sink for Fabric {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        for f in frames.drain(..) {
            self.deliver(f.dst, f.bytes);
        }
    }
}

/// Which transport a NIC's port uses.
#[derive(Clone, Copy)]
pub enum Port<'a> {
    /// The in-process fabric.
    Fabric(&'a Fabric),
    /// A UDP socket bound to port 4791 on the NIC's address.
    Udp,
}

/// How to start a [`LiveNic`] beyond its name, address and port.
pub struct NicOptions {
    /// PCIe parameters of the host link.
    pub link: LinkConfig,
    /// Faults for every frame the port sends, applied by a relay thread.
    pub faults: Option<Box<dyn FaultPolicy>>,
    /// Frames the relay may hold back at once (with `faults`).
    pub relay_queue: usize,
    /// The host memory the NIC serves; `None`: a fresh [`HostRam`].
    pub memory: Option<Arc<dyn HostMemory>>,
}

impl Default for NicOptions {
    fn default() -> Self {
        Self {
            link: LinkConfig::default(),
            faults: None,
            relay_queue: fault::DEFAULT_QUEUE_LIMIT,
            memory: None,
        }
    }
}

impl NicOptions {
    /// Default options with random faults from `f` (its `queue_limit` too).
    pub fn with_faults(f: Faults) -> Self {
        Self {
            relay_queue: f.queue_limit,
            faults: Some(Box::new(RandomFaults::new(f))),
            ..Self::default()
        }
    }
}

/// The port a device thread sends through.
enum Egress {
    Direct(Box<dyn fault::Sink>),
    Relay(fault::Relay),
}

impl Egress {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        match self {
            Egress::Direct(s) => s.send(frames),
            Egress::Relay(r) => r.send(frames),
        }
    }
}

/// What a NIC's port holds on to.
enum PortHandle {
    Fabric(Fabric),
    Udp(udp::UdpPort),
}

struct ChannelMmio {
    tx: Sender<Msg>,
}

impl Mmio for ChannelMmio {
    fn mmio_write(&self, uar: UarIndex, offset: u32, data: &[u8]) {
        let mut buf = [0u8; 64];
        let len = data.len().min(64);
        buf[..len].copy_from_slice(&data[..len]);
        // A device that has gone away drops MMIO, as a surprise-removed
        // PCIe device does.
        let _ = self.tx.send(Msg::Mmio {
            uar,
            offset,
            len: len as u8,
            data: buf,
        });
    }
}

/// A NIC running on its own thread, with the host memory it serves.
pub struct LiveNic {
    name: String,
    gid: [u8; 16],
    tx: Sender<Msg>,
    mem: Arc<dyn HostMemory>,
    mmio: Arc<dyn Mmio>,
    events: Receiver<NicEvent>,
    port: PortHandle,
    faults: Option<fault::StatsView>,
    ipv4: [u8; 4],
    thread: Option<JoinHandle<()>>,
    /// The interrupt handler; it hands the EQs back when it stops.
    irq: Option<JoinHandle<EventQueues>>,
    /// Unix time, ns, when the device's clock read zero.
    epoch_unix_ns: u64,
    /// The process that started the NIC. In a child after `fork()` the
    /// NIC's threads do not exist: see [`LiveNic::is_forked_copy`].
    pid: u32,
}

impl LiveNic {
    /// Starts a NIC named `name` on `fabric` at `ipv4`, with PCIe `link`
    /// parameters, serving a fresh host memory.
    pub fn start(
        name: &str,
        fabric: &Fabric,
        ipv4: [u8; 4],
        link: LinkConfig,
    ) -> Result<Self, RtError> {
        Self::start_with(
            name,
            ipv4,
            Port::Fabric(fabric),
            NicOptions {
                link,
                ..NicOptions::default()
            },
        )
    }

    /// Starts a NIC named `name` whose port is a UDP socket bound to
    /// `ipv4:4791`, with PCIe `link` parameters, serving a fresh host
    /// memory. Fails with [`RtError::AddressInUse`] if another socket
    /// (another NIC, in this process or another) has that port.
    pub fn start_udp(name: &str, ipv4: [u8; 4], link: LinkConfig) -> Result<Self, RtError> {
        Self::start_with(
            name,
            ipv4,
            Port::Udp,
            NicOptions {
                link,
                ..NicOptions::default()
            },
        )
    }

    /// Starts a NIC on `port` at `ipv4` with `opts`.
    pub fn start_with(
        name: &str,
        ipv4: [u8; 4],
        port: Port<'_>,
        opts: NicOptions,
    ) -> Result<Self, RtError> {
        opts.link.validate()?;
        let (tx, rx) = unbounded();
        let mut cfg = NicConfig::new(ipv4);
        let (handle, sink): (PortHandle, Box<dyn fault::Sink>) = match port {
            Port::Fabric(fabric) => {
                let mut routes = fabric.routes.lock().unwrap_or_else(|e| e.into_inner());
                if routes.contains_key(&ipv4) {
                    return Err(RtError::AddressInUse(ipv4));
                }
                routes.insert(ipv4, tx.clone());
                (PortHandle::Fabric(fabric.clone()), Box::new(fabric.clone()))
            }
            Port::Udp => {
                let sock_err = |e: std::io::Error| match e.kind() {
                    std::io::ErrorKind::AddrInUse => RtError::AddressInUse(ipv4),
                    kind => RtError::Socket { addr: ipv4, kind },
                };
                let mut p = udp::UdpPort::bind(ipv4).map_err(sock_err)?;
                cfg.udp_src_port = Some(p.port());
                // The port's MTU is what its interface carries, as a RoCE
                // NIC's active MTU follows its netdev's (a veth's 1500
                // bytes allow 1024).
                if let Some(mtu) = udp::interface_roce_mtu(ipv4) {
                    cfg.caps.max_mtu = cfg.caps.max_mtu.min(mtu);
                }
                p.start_rx(name, tx.clone()).map_err(|_| RtError::Spawn)?;
                let sink = Box::new(p.sink());
                (PortHandle::Udp(p), sink)
            }
        };
        // From here on a failure drops `handle`, which undoes the port.
        let unroute = |h: &PortHandle| {
            if let PortHandle::Fabric(f) = h {
                f.routes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&ipv4);
            }
        };
        let (egress, faults) = match opts.faults {
            None => (Egress::Direct(sink), None),
            Some(policy) => match fault::Relay::start(name, policy, sink, opts.relay_queue) {
                Ok(r) => {
                    let st = r.stats();
                    (Egress::Relay(r), Some(st))
                }
                Err(_) => {
                    unroute(&handle);
                    return Err(RtError::Spawn);
                }
            },
        };
        let mem = opts
            .memory
            .unwrap_or_else(|| Arc::new(HostRam::new()) as Arc<dyn HostMemory>);
        let (ev_tx, ev_rx) = unbounded();
        let (irq_tx, irq_rx) = unbounded();
        let gid = cfg.gid();
        let bus = Bus::new(opts.link, mem.clone());
        let unrouted = ev_tx.clone();
        // The device's clock starts now; its wall-clock epoch is read at
        // the same moment.
        let epoch = std::time::Instant::now();
        let epoch_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let thread = std::thread::Builder::new()
            .name(format!("doorbell-{name}"))
            .spawn(move || {
                let io = DeviceIo {
                    rx,
                    egress,
                    events: unrouted,
                    irqs: irq_tx,
                };
                device_loop(Nic::new(cfg), bus, epoch, io)
            });
        let Ok(thread) = thread else {
            unroute(&handle);
            return Err(RtError::Spawn);
        };
        let mut nic = Self {
            name: name.to_string(),
            gid,
            mmio: Arc::new(ChannelMmio { tx: tx.clone() }),
            tx,
            mem,
            events: ev_rx,
            port: handle,
            faults,
            ipv4,
            thread: Some(thread),
            irq: None,
            epoch_unix_ns,
            pid: std::process::id(),
        };
        // Dropping `nic` on failure stops the device thread and the port.
        let eqs = EventQueues::create(&mut |c| nic.exec(c), &*nic.mem, &mut |u, o, d| {
            nic.mmio.mmio_write(u, o, d)
        })
        .map_err(|_| RtError::Spawn)?;
        let irq = irq::start(name, eqs, nic.mem.clone(), nic.mmio.clone(), irq_rx, ev_tx)
            .map_err(|_| RtError::Spawn)?;
        nic.irq = Some(irq);
        Ok(nic)
    }

    /// True in a child process after `fork()`: this is the copy of a NIC
    /// whose threads stayed in the parent. Such a copy answers nothing
    /// (commands fail with [`CmdError::DeviceGone`], counters are zero),
    /// and dropping it joins no thread: it only closes the child's copy of
    /// the port's socket if nothing else holds it.
    pub fn is_forked_copy(&self) -> bool {
        self.pid != std::process::id()
    }

    /// The raw descriptor of the UDP port's socket (`None` on the fabric),
    /// for the fork handler of [`process`], which closes the child's copy.
    pub(crate) fn port_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.port {
            PortHandle::Udp(p) => Some(p.raw_fd()),
            PortHandle::Fabric(_) => None,
        }
    }

    /// Bus counters (all, or one QP's) and device counters, after every
    /// MMIO write made so far has been handled.
    pub fn counters(&self, qpn: Option<Qpn>) -> (Counters, NicCounters) {
        if self.is_forked_copy() {
            return Default::default();
        }
        let (tx, rx) = bounded(1);
        if self.tx.send(Msg::Counters(qpn, tx)).is_err() {
            return Default::default();
        }
        rx.recv().unwrap_or_default()
    }

    /// Everything the NIC counted, for a report: bus counters in total and
    /// per QP, the device's counters and the port's. All zero in a forked
    /// copy, or if the device thread has stopped.
    pub fn snapshot(&self) -> stats::NicStats {
        let bus = if self.is_forked_copy() {
            stats::BusSnapshot::default()
        } else {
            let (tx, rx) = bounded(1);
            match self.tx.send(Msg::Snapshot(tx)) {
                Ok(()) => rx.recv().unwrap_or_default(),
                Err(_) => stats::BusSnapshot::default(),
            }
        };
        stats::NicStats {
            name: self.name.clone(),
            addr: self.ipv4,
            bus,
            port: self.port_counters(),
        }
    }

    /// What the UDP port counted (all zero on the fabric).
    pub fn port_counters(&self) -> PortCounters {
        match &self.port {
            PortHandle::Udp(p) => p.counters(),
            PortHandle::Fabric(_) => PortCounters::default(),
        }
    }

    /// What the fault relay did, if the NIC has one.
    pub fn fault_stats(&self) -> Option<FaultStats> {
        self.faults.as_ref().map(fault::StatsView::get)
    }

    /// Starts or stops recording bus crossings; returns those recorded so far.
    pub fn record(&self, on: bool) -> Vec<Crossing> {
        if self.is_forked_copy() {
            return Vec::new();
        }
        let (tx, rx) = bounded(1);
        if self.tx.send(Msg::Record(on, tx)).is_err() {
            return Vec::new();
        }
        rx.recv().unwrap_or_default()
    }

    /// The port's IPv4 address.
    pub fn ipv4(&self) -> [u8; 4] {
        self.ipv4
    }

    /// GID 0 of the port: the IPv4-mapped form of its address.
    pub fn gid(&self) -> [u8; 16] {
        self.gid
    }
}

impl Drop for LiveNic {
    fn drop(&mut self) {
        if self.is_forked_copy() {
            // The threads are the parent's: never join them (that would
            // wait forever) nor detach them; their handles are forgotten.
            std::mem::forget(self.thread.take());
            std::mem::forget(self.irq.take());
            if let PortHandle::Udp(p) = &mut self.port {
                p.abandon();
            }
            return;
        }
        if let PortHandle::Fabric(f) = &self.port {
            f.routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.ipv4);
        }
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The device thread is gone, so the handler's vectors ended: it
        // returns the EQs, whose rings go back to host memory.
        if let Some(Ok(eqs)) = self.irq.take().map(JoinHandle::join) {
            eqs.release(&*self.mem);
        }
        if let PortHandle::Udp(p) = &mut self.port {
            p.stop();
        }
    }
}

impl DeviceLink for LiveNic {
    fn name(&self) -> &str {
        &self.name
    }

    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError> {
        if self.is_forked_copy() {
            // No device thread would ever answer.
            return Err(CmdError::DeviceGone);
        }
        let (tx, rx) = bounded(1);
        self.tx
            .send(Msg::Cmd(cmd, tx))
            .map_err(|_| CmdError::DeviceGone)?;
        rx.recv().unwrap_or(Err(CmdError::DeviceGone))
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

    fn next_event(&self, timeout: doorbell_types::Duration) -> Option<NicEvent> {
        let wait = Duration::from_nanos(timeout.as_ps() / 1000);
        self.events.recv_timeout(wait).ok()
    }

    fn clock_epoch_unix_ns(&self) -> Option<u64> {
        Some(self.epoch_unix_ns)
    }
}

/// What the device thread reads and feeds.
struct DeviceIo {
    rx: Receiver<Msg>,
    egress: Egress,
    /// Events no EQ took.
    events: Sender<NicEvent>,
    /// MSI-X vectors, for the interrupt handler.
    irqs: Sender<u16>,
}

fn device_loop(mut nic: Nic, mut bus: Bus, start: std::time::Instant, io: DeviceIo) {
    let DeviceIo {
        rx,
        mut egress,
        events,
        irqs,
    } = io;
    let mut out: Vec<Frame> = Vec::new();
    let now = || {
        Instant::from_ps(
            start
                .elapsed()
                .as_nanos()
                .saturating_mul(1000)
                .min(u128::from(u64::MAX)) as u64,
        )
    };
    loop {
        let wait = nic
            .poll_timeout()
            .map(|t| Duration::from_nanos(t.as_ps().saturating_sub(now().as_ps()) / 1000))
            .unwrap_or(Duration::from_secs(3600));
        match rx.recv_timeout(wait) {
            Ok(Msg::Mmio {
                uar,
                offset,
                len,
                data,
            }) => nic.handle_mmio(now(), uar, offset, &data[..usize::from(len)], &mut bus),
            Ok(Msg::Frame(f)) => nic.handle_frame(now(), &f, &mut bus),
            Ok(Msg::Frames(fs)) => {
                for f in fs {
                    nic.handle_frame(now(), &f, &mut bus);
                }
            }
            Ok(Msg::Cmd(c, reply)) => {
                let _ = reply.send(nic.exec(now(), c, &mut bus));
            }
            Ok(Msg::Counters(q, reply)) => {
                let c = q
                    .map(|q| bus.qp_counters(q))
                    .unwrap_or_else(|| bus.counters());
                let _ = reply.send((c, nic.counters()));
            }
            Ok(Msg::Snapshot(reply)) => {
                let _ = reply.send(stats::BusSnapshot {
                    total: bus.counters(),
                    qps: bus.all_qp_counters(),
                    nic: nic.counters(),
                });
            }
            Ok(Msg::Record(on, reply)) => {
                let log = bus.take_log();
                bus.set_recording(on);
                let _ = reply.send(log);
            }
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if nic.poll_timeout().is_some_and(|t| t <= now()) {
            nic.handle_timeout(now(), &mut bus);
        }
        out.extend(std::iter::from_fn(|| nic.poll_transmit()));
        egress.send(&mut out);
        while let Some(v) = nic.poll_interrupt() {
            let _ = irqs.send(v);
        }
        // Events no EQ took: none once the EQs exist.
        while let Some(e) = nic.poll_event() {
            let _ = events.send(e);
        }
    }
}
