//! The live runtime: the NIC on a real thread, at wall-clock speed.
//!
//! # Model
//! Each [`LiveNic`] holds the sans-IO [`doorbell_device::Nic`], its end of
//! the PCIe [`Bus`] over the host memory the host software shares with
//! it, and its port's egress, behind one lock; everything reaches it
//! through one FIFO: MMIO writes from the CPU (in the order each thread
//! made them), commands from the driver, and frames from the port. The
//! thread that brings a message runs the NIC on it when no other thread
//! is (module `engine`): a doorbell is processed inside the store that
//! rang it, a frame inside the call that delivered it. The NIC's own
//! thread runs what no caller drives (transport timers, on the wall
//! clock) and parks in between. After each turn the NIC's outputs are
//! drained: frames go to the port, MSI-X interrupts to the NIC's
//! interrupt handler thread. That thread plays the kernel: it created the
//! event queues when the NIC started ([`doorbell_driver::EventQueues`]),
//! reads the EQEs the device wrote into them, re-arms them through their
//! doorbell, and hands the events to [`DeviceLink::next_event`].
//!
//! A NIC's port is one of two transports ([`Port`]):
//! * [`Fabric`], the in-process link: it routes each IPv4 frame to the NIC
//!   that owns the destination address, unchanged, so the frames are the
//!   same RoCEv2 packets a UDP link would carry;
//! * a UDP socket bound to port 4791 on the NIC's address (module `udp`):
//!   RoCEv2 between processes and hosts, with a receive thread per port.
//!   Beside it, frames to NICs of the same host go through shared-memory
//!   rings instead (module `shm`; [`NicOptions::shm`]), found through a
//!   rendezvous on the host; other addresses keep to the socket.
//!   The NIC leaves payloads in its memory and hands runs of packets on as
//!   one frame; the engine fills each packet in before anything past it
//!   sees the frames (module `fill`), so the rings, the socket, a capture
//!   and a relay all get whole packets. [`LiveNic::start_udp`].
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

mod buffers;
#[allow(unsafe_code)]
pub mod crc;
mod datagrams;
mod engine;
pub mod fault;
mod fill;
#[allow(unsafe_code)]
mod forks;
mod inbox;
mod irq;
pub mod loopback;
pub mod pcap;
pub mod process;
pub mod procmem;
mod shm;
pub mod stats;
mod stream;
#[allow(unsafe_code)]
mod sys;
mod timeline;
mod udp;

pub use fault::{Fate, FaultPolicy, FaultStage, FaultStats, Faults, RandomFaults};
#[doc(hidden)]
pub use shm::{RawListener, RawPeer};
pub use udp::PortCounters;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use doorbell_device::{Frame, Nic, NicConfig, NicCounters};
use doorbell_driver::EventQueues;
use doorbell_hif::{CmdError, CmdOut, Command, DeviceLink, NicEvent};
use doorbell_host::{HostMemory, HostRam, Mmio, RecordDoorbell};
use doorbell_pcie::{Bus, Carried, ConfigError, Counters, Crossing, LinkConfig};
use doorbell_types::{Qpn, UarIndex};

use engine::{Core, Egress, Engine};
use inbox::Msg;
pub use loopback::LoopbackLink;
pub use process::{
    LinkDown, ProcessNic, ProcessNicConfig, ProcessNicError, register_fork_handlers,
};
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
    /// The capture file could not be created.
    #[error("capture file {path:?}: {kind}")]
    Capture {
        /// The file asked for.
        path: std::path::PathBuf,
        /// What the OS said.
        kind: std::io::ErrorKind,
    },
}

/// Frames a NIC on the in-process fabric lets wait for the port before it
/// hands them on and builds more ([`NicConfig::tx_burst`]): 128 KiB at MTU
/// 4096, a quarter of the window. 8, 16, 32 and 64 all ran 64 KiB WRITEs
/// 10 to 25% faster than a whole window at once; 32 was ahead by a little.
const FABRIC_TX_BURST: u32 = 32;

/// Most packets a NIC on the in-process fabric hands on as one frame
/// (`NicConfig::max_segments`, `NicConfig::max_train`): a burst's worth.
const FABRIC_MAX_SEGMENTS: u32 = FABRIC_TX_BURST;

/// Most packets a NIC on a UDP port hands on as one frame, filled in packet
/// by packet before the port sends them (`NicConfig::max_segments`,
/// decision record 0055): a 64 KiB message's at a path MTU of 1024.
const UDP_MAX_SEGMENTS: u32 = 64;

/// READ responses a NIC on a UDP port builds at a time
/// (`NicConfig::read_burst`): as many packets as a requester's send window
/// holds at MTU 1024 (`doorbell_roce::window_psns`), so that a READ's
/// responder holds no more than the requester would, and the port sends
/// them in as few batches as it would a window of WRITEs.
const UDP_READ_BURST: u32 = 256;

/// An in-process network of NICs, addressed by IPv4.
#[derive(Default, Clone)]
pub struct Fabric {
    routes: Arc<RwLock<BTreeMap<[u8; 4], Arc<Core>>>>,
    dropped: Arc<Mutex<u64>>,
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hands `frames` (`n` packets in them), all for `dst`, to the NIC that owns
    /// it: inside this call if that NIC is idle ([`engine`]), or to its
    /// worker if `to_worker` (frames whose payloads the receiver copies in,
    /// decision record 0049).
    fn deliver(
        &self,
        dst: [u8; 4],
        frames: Msg,
        n: usize,
        to_worker: bool,
        clock: std::time::Instant,
    ) {
        // The route is cloned out so that no lock is held while the peer
        // runs (its answer may come back here).
        let route = self
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&dst)
            .cloned();
        match route {
            Some(core) if to_worker => core.hand_to_worker(frames),
            Some(core) => core.deliver(frames, clock),
            None => *self.dropped.lock().unwrap_or_else(|e| e.into_inner()) += n as u64,
        }
    }

    fn routes(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<[u8; 4], Arc<Core>>> {
        self.routes.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Packets sent to an address no NIC owns (each packet of a run or a
    /// train counted).
    pub fn dropped(&self) -> u64 {
        *self.dropped.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A NIC's way onto the fabric.
struct FabricSink {
    fabric: Fabric,
    /// No fault relay stands between the NIC and the fabric: the frames
    /// arrive as the NIC emitted them, and their ICRC is not checked again.
    emitted: bool,
    /// The NIC's host memory, where the payloads it leaves are
    /// (`NicConfig::leave_payload`, set only where `emitted` is).
    mem: Arc<dyn HostMemory>,
    /// The process may run on two cores or more: a receiver's worker then
    /// runs beside the thread that sends, not in turns with it.
    beside: bool,
}

impl fault::Sink for FabricSink {
    fn send(&mut self, frames: &mut Vec<Frame>, clock: std::time::Instant, _: &mut Vec<Vec<u8>>) {
        // One delivery per run of frames to the same address.
        while let Some(first) = frames.first() {
            let dst = first.dst;
            let n = frames.iter().take_while(|f| f.dst == dst).count();
            let packets = frames[..n].iter().map(|f| f.packets() as usize).sum();
            // Payloads left in the sender's memory are copied in by the
            // receiver's worker, so that a stream's copies run on another
            // core while this thread goes on (decision record 0049). Not
            // where the process has one core: the worker would take turns
            // with this thread, and its wait for more frames would keep
            // the core from it (decision record 0056).
            let to_worker =
                self.emitted && self.beside && frames[..n].iter().any(|f| f.unfilled.is_some());
            let run = if self.emitted {
                let mut run = crate::buffers::emitted_list();
                if n == frames.len() {
                    // All to one address (the common case): the list
                    // itself goes, and the frames are not moved.
                    std::mem::swap(&mut run, frames);
                } else {
                    run.extend(frames.drain(..n));
                }
                Msg::EmittedFrames(run, self.mem.clone())
            } else {
                let mut run = crate::buffers::frame_list();
                run.extend(frames.drain(..n).map(|f| f.bytes));
                Msg::Frames(run)
            };
            self.fabric.deliver(dst, run, packets, to_worker, clock);
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
    /// With [`Port::Udp`]: frames to NICs of this host go through shared
    /// memory (module `shm`), the rest through the socket. `false`: all
    /// through the socket.
    pub shm: bool,
    /// With [`Port::Udp`]: runs of equal datagrams to one address leave as
    /// one segmented send (UDP GSO), cut into the same datagrams by the
    /// kernel. A capture on lo or a veth then shows each run as one large
    /// datagram: `false` sends every datagram on its own.
    pub udp_gso: bool,
    /// With `shm`: how long the receiving thread spins for more frames
    /// after its last one before it sleeps (default 0: a thread that polls
    /// its CQ takes frames itself, and a receiver spinning beside it would
    /// take a core from it; decision record 0022).
    pub shm_spin: std::time::Duration,
    /// With `shm`: how long a CQ poll that took only responses waits for
    /// the peer's answer while the receiving thread sleeps, where such
    /// waits paid off lately (default [`SHM_LINGER`]; zero: never;
    /// decision record 0034).
    pub shm_linger: std::time::Duration,
    /// Write every frame the NIC sends and receives to this pcapng file
    /// (module [`pcap`]).
    pub pcap: Option<std::path::PathBuf>,
    /// Record a timeline of the device's work, its register stores, DMAs
    /// and frames, stamped with the wall clock ([`LiveNic::take_trace`]).
    pub trace: bool,
    /// Adaptive retransmission's floor
    /// ([`NicConfig::adaptive_retransmit_floor`]); `None` turns it off. A
    /// [`Port::Fabric`] without `faults` loses nothing and never uses it.
    /// Live, an ACK can also wait for the host's scheduler to run the
    /// peer's threads, and for a burst of packets to be processed, which
    /// the round trip of a lone packet does not show: the default,
    /// [`LIVE_ADAPTIVE_RETRANSMIT_FLOOR`], is long enough for neither to
    /// look like a loss on a busy machine (decision record 0027).
    pub adaptive_retransmit_floor: Option<doorbell_types::Duration>,
}

/// The default [`NicOptions::adaptive_retransmit_floor`]: a few of the
/// host scheduler's time slices, and a seventh of the usual 67 ms ACK
/// timeout.
pub const LIVE_ADAPTIVE_RETRANSMIT_FLOOR: doorbell_types::Duration =
    doorbell_types::Duration::from_us(10_000);

/// The default [`NicOptions::shm_linger`]: a little more than a peer
/// that polls needs to see a frame and answer it.
pub const SHM_LINGER: std::time::Duration = std::time::Duration::from_micros(5);

impl Default for NicOptions {
    fn default() -> Self {
        Self {
            link: LinkConfig::default(),
            faults: None,
            relay_queue: fault::DEFAULT_QUEUE_LIMIT,
            memory: None,
            shm: true,
            udp_gso: true,
            shm_spin: std::time::Duration::ZERO,
            shm_linger: SHM_LINGER,
            pcap: None,
            trace: false,
            adaptive_retransmit_floor: Some(LIVE_ADAPTIVE_RETRANSMIT_FLOOR),
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

/// What a NIC's port holds on to.
enum PortHandle {
    Fabric(Fabric),
    /// The socket, and the shared-memory port beside it (if on).
    Udp(udp::UdpPort, Option<shm::ShmPort>, Arc<shm::Stats>),
    /// Not yet joined to its port (while the NIC starts).
    Detached,
}

/// MMIO stores into the NIC's BAR: each a message to its engine.
struct ChannelMmio {
    core: Arc<Core>,
    /// The shared-memory port's receiving side, if any (see
    /// [`shm::Poster`]).
    poster: Option<shm::Poster>,
}

impl Mmio for ChannelMmio {
    fn mmio_write(&self, uar: UarIndex, offset: u32, data: &[u8]) {
        let mut buf = [0u8; 64];
        let len = data.len().min(64);
        buf[..len].copy_from_slice(&data[..len]);
        // The CQ arm register decodes alike whatever the BlueFlame size
        // (it is looked at first), so none is needed here.
        if doorbell_layout::uar::decode_offset(offset as usize, 0)
            == doorbell_layout::uar::UarRegister::CqArm
        {
            self.core.note_arm();
        }
        // A device that has gone away drops MMIO, as a surprise-removed
        // PCIe device does.
        let msg = Msg::Mmio {
            uar,
            offset,
            len: len as u8,
            data: buf,
        };
        self.submit(msg);
    }

    fn record_doorbell(&self, uar: UarIndex, db: RecordDoorbell) {
        if matches!(db, RecordDoorbell::Arm(_)) {
            self.core.note_arm();
        }
        self.submit(Msg::RecordDoorbell(uar, db));
    }
}

impl ChannelMmio {
    /// Hands a store to the NIC, holding off shared-memory bells meanwhile.
    fn submit(&self, msg: Msg) {
        match &self.poster {
            Some(p) => p.around(&self.core, || self.core.submit(msg)),
            None => self.core.submit(msg),
        }
    }
}

/// A NIC running on its own thread, with the host memory it serves.
pub struct LiveNic {
    name: String,
    gid: [u8; 16],
    core: Arc<Core>,
    mem: Arc<dyn HostMemory>,
    mmio: Arc<dyn Mmio>,
    events: Receiver<NicEvent>,
    /// Ends a wait for `events` early ([`DeviceLink::wake_event_waiter`]).
    wake_events: (Sender<()>, Receiver<()>),
    port: PortHandle,
    faults: Option<fault::StatsView>,
    ipv4: [u8; 4],
    /// The worker ([`engine`]).
    thread: Option<JoinHandle<()>>,
    /// The interrupt handler; it hands the EQs back when it stops.
    irq: Option<JoinHandle<EventQueues>>,
    /// Unix time, ns, when the device's clock read zero.
    epoch_unix_ns: u64,
    /// The fork generation ([`forks`]) of the process that started the
    /// NIC. In a child after `fork()` the NIC's threads do not exist: see
    /// [`LiveNic::is_forked_copy`].
    forks: u32,
    /// A UDP port's packets lost because the NIC's memory no longer held
    /// their payload ([`PortCounters::tx_payload_lost`]).
    payload_lost: Option<Arc<AtomicU64>>,
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
        let mut cfg = NicConfig::new(ipv4);
        // A fabric without faults loses nothing: resending early there
        // could only send again what arrived, when a peer's thread was
        // slow to run (decision record 0027).
        let lossless = matches!(port, Port::Fabric(_)) && opts.faults.is_none();
        cfg.adaptive_retransmit_floor = opts.adaptive_retransmit_floor.filter(|_| !lossless);
        // Nothing between this NIC and the NICs it sends to looks at its
        // frames' ICRC, and they do not check it (decision record 0038):
        // it is written only where a frame is recorded.
        // Nor at their payloads: a WRITE's is copied once, from this NIC's
        // memory into the receiver's (decision record 0046).
        if lossless && opts.pcap.is_none() {
            cfg.icrc = doorbell_wire::Seal::Later;
            cfg.leave_payload = true;
            // And a run of a message's MIDDLE packets goes as one frame,
            // which the receiver takes packet by packet without parsing
            // each (decision record 0047), as do a QP's small packets, back
            // to back (0050); unless this NIC's timeline is to show each
            // frame it sends.
            // A run holds its message's FIRST and LAST too: a 64 KiB WRITE
            // is one frame, whose headers are all of it that crosses to a
            // receiver on another core (decision record 0062).
            if !opts.trace {
                cfg.max_segments = FABRIC_MAX_SEGMENTS;
                cfg.max_train = FABRIC_MAX_SEGMENTS;
                cfg.runs_with_ends = true;
            }
        }
        // On the fabric a frame is taken in inside the send that hands it
        // on: built a burst at a time, a payload is copied out of its frame
        // while both are in the cache, not after the rest of a window of
        // 512 KiB has pushed them out (decision record 0045).
        if matches!(port, Port::Fabric(_)) {
            cfg.tx_burst = Some(FABRIC_TX_BURST);
        }
        // A READ's responses are built a burst at a time too, as the port
        // takes them, so that a long READ holds a burst of frames, not all
        // of its responses (`NicConfig::read_burst`).
        cfg.read_burst = Some(match port {
            Port::Fabric(_) => FABRIC_TX_BURST,
            Port::Udp => UDP_READ_BURST,
        });
        let mem = opts
            .memory
            .unwrap_or_else(|| Arc::new(HostRam::new()) as Arc<dyn HostMemory>);
        let (mut handle, sink): (PortHandle, Box<dyn fault::Sink>) = match port {
            Port::Fabric(fabric) => {
                if fabric.routes().contains_key(&ipv4) {
                    return Err(RtError::AddressInUse(ipv4));
                }
                let sink = FabricSink {
                    fabric: fabric.clone(),
                    emitted: opts.faults.is_none(),
                    mem: mem.clone(),
                    beside: !doorbell_host::one_cpu(),
                };
                (PortHandle::Fabric(fabric.clone()), Box::new(sink))
            }
            Port::Udp => {
                let sock_err = |e: std::io::Error| match e.kind() {
                    std::io::ErrorKind::AddrInUse => RtError::AddressInUse(ipv4),
                    kind => RtError::Socket { addr: ipv4, kind },
                };
                let p = udp::UdpPort::bind(ipv4).map_err(sock_err)?;
                cfg.udp_src_port = Some(p.port());
                // The engine writes each frame's ICRC before anything sees
                // it, two frames at a time (decision record 0054).
                cfg.icrc = doorbell_wire::Seal::Later;
                // And the NIC leaves payloads in memory, a run of MIDDLE
                // packets as one frame: the engine fills each packet in
                // just before it seals it, without the NIC's per-packet
                // work (decision record 0055).
                cfg.leave_payload = true;
                cfg.max_segments = UDP_MAX_SEGMENTS;
                // The port's MTU is what its interface carries, as a RoCE
                // NIC's active MTU follows its netdev's (a veth's 1500
                // bytes allow 1024).
                if let Some(mtu) = udp::interface_roce_mtu(ipv4) {
                    cfg.caps.max_mtu = cfg.caps.max_mtu.min(mtu);
                }
                let stats = Arc::new(shm::Stats::default());
                let local = opts
                    .shm
                    .then(|| {
                        shm::ShmPort::listen(ipv4, stats.clone(), opts.shm_spin, opts.shm_linger)
                    })
                    .flatten();
                let sink: Box<dyn fault::Sink> = if local.is_some() {
                    Box::new(shm::HostSink::new(
                        p.sink(opts.udp_gso),
                        ipv4,
                        stats.clone(),
                    ))
                } else {
                    Box::new(p.sink(opts.udp_gso))
                };
                (PortHandle::Udp(p, local, stats), sink)
            }
        };
        // From here on a failure drops `handle`, which undoes the port.
        let capture = match &opts.pcap {
            Some(path) => {
                Some(
                    pcap::Capture::create(path, name).map_err(|e| RtError::Capture {
                        path: path.clone(),
                        kind: e.kind(),
                    })?,
                )
            }
            None => None,
        };
        let (sink, policy): (Box<dyn fault::Sink>, _) = match &capture {
            Some(c) => (
                Box::new(pcap::CaptureSink {
                    inner: sink,
                    capture: c.clone(),
                }),
                opts.faults.map(|inner| {
                    Box::new(pcap::CapturingPolicy {
                        inner,
                        capture: c.clone(),
                    }) as Box<dyn FaultPolicy>
                }),
            ),
            None => (sink, opts.faults),
        };
        let (egress, faults) = match policy {
            None => (Egress::Direct(sink), None),
            Some(policy) => {
                let r = fault::Relay::start(name, policy, sink, opts.relay_queue)
                    .map_err(|_| RtError::Spawn)?;
                let st = r.stats();
                (Egress::Relay(r), Some(st))
            }
        };
        let (ev_tx, ev_rx) = unbounded();
        let (irq_tx, irq_rx) = unbounded();
        let gid = cfg.gid();
        let bus = Bus::new(opts.link, mem.clone());
        // The device's clock starts now; its wall-clock epoch is read at
        // the same moment.
        let epoch = std::time::Instant::now();
        let epoch_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let mut engine = Engine::new(Nic::new(cfg), bus, egress, irq_tx, ev_tx.clone());
        engine.capture = capture;
        engine.seal_out = matches!(handle, PortHandle::Udp(..));
        let payload_lost =
            matches!(handle, PortHandle::Udp(..)).then(|| Arc::new(AtomicU64::new(0)));
        if let Some(lost) = &payload_lost {
            let mut filler = fill::Filler::new(mem.clone(), lost.clone());
            // A run's datagrams go as one frame where only the port sees
            // them.
            if engine.capture.is_none() && faults.is_none() && !opts.trace {
                filler.runs_whole();
            }
            engine.fill = Some(filler);
        }
        if opts.trace {
            engine.bus.set_recording(true);
            engine.timeline = Some(engine::Timeline {
                rec: timeline::LiveTimeline::new(name),
                name: name.to_string(),
                start: epoch,
                kept: None,
            });
        }
        let core = Arc::new(Core::new(engine, epoch));
        let worker = core.clone();
        let thread = std::thread::Builder::new()
            .name(format!("doorbell-{name}"))
            .spawn(move || worker.work())
            .map_err(|_| RtError::Spawn)?;
        let mut nic = Self {
            name: name.to_string(),
            gid,
            mmio: Arc::new(ChannelMmio {
                core: core.clone(),
                poster: match &handle {
                    PortHandle::Udp(_, Some(l), _) => Some(l.poster()),
                    _ => None,
                },
            }),
            core: core.clone(),
            mem,
            events: ev_rx,
            wake_events: bounded(1),
            port: PortHandle::Detached,
            faults,
            ipv4,
            thread: Some(thread),
            irq: None,
            epoch_unix_ns,
            forks: forks::generation(),
            payload_lost,
        };
        // Dropping `nic` on failure stops the worker and the port.
        match &mut handle {
            PortHandle::Fabric(f) => {
                let mut routes = f.routes();
                if routes.contains_key(&ipv4) {
                    return Err(RtError::AddressInUse(ipv4));
                }
                routes.insert(ipv4, core);
            }
            PortHandle::Udp(p, local, _) => {
                if let Some(l) = local {
                    l.start_rx(name, core.clone()).map_err(|_| RtError::Spawn)?;
                }
                p.start_rx(name, core).map_err(|_| RtError::Spawn)?;
            }
            PortHandle::Detached => {}
        }
        nic.port = handle;
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
        self.forks != forks::generation()
    }

    /// The raw descriptor of the UDP port's socket (`None` on the fabric),
    /// for the fork handler of [`process`], which closes the child's copy.
    pub(crate) fn port_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.port {
            PortHandle::Udp(p, ..) => Some(p.raw_fd()),
            PortHandle::Fabric(_) | PortHandle::Detached => None,
        }
    }

    /// Bus counters (all, or one QP's) and device counters, after every
    /// MMIO write made so far has been handled.
    pub fn counters(&self, qpn: Option<Qpn>) -> (Counters, NicCounters) {
        if self.is_forked_copy() {
            return Default::default();
        }
        let (tx, rx) = bounded(1);
        self.core.submit(Msg::Counters(qpn, tx));
        rx.recv().unwrap_or_default()
    }

    /// Times the NIC's own thread woke from its sleep, woken by a caller or
    /// at a timer: the cost, in context switches, of what no caller drove.
    pub fn worker_wakes(&self) -> u64 {
        self.core.wakes()
    }

    /// Deliveries of frames that another NIC of this process handed to
    /// this NIC's own thread for it to take in (a stream's payloads, left
    /// in the sender's memory, on a machine of two cores or more; decision
    /// records 0049 and 0056). A count for tests and reports.
    pub fn worker_hand_offs(&self) -> u64 {
        self.core.hand_offs()
    }

    /// Flushes that stopped after 1 024 packets with more for the NIC to
    /// build (a long READ's responses), leaving the rest for a later turn,
    /// other inputs taken in between. A count for tests and reports.
    pub fn flushes_cut(&self) -> u64 {
        self.core.flushes_cut()
    }

    /// Times the NIC's own thread woke at its timeout, nobody having woken
    /// it, to find inputs that no other thread took within 100 µs and no
    /// turn was running for: a stall, which no path of the runtime should
    /// cause (each input is run by the thread that brought it, the thread
    /// running the NIC, a worker it was handed to, or a poll or worker it
    /// was left for). A count for tests and reports.
    pub fn inbox_stalls(&self) -> u64 {
        self.core.stalls()
    }

    /// Everything the NIC counted, for a report: bus counters in total and
    /// per QP, the device's counters and the port's. All zero in a forked
    /// copy, or if the device thread has stopped.
    pub fn snapshot(&self) -> stats::NicStats {
        let bus = if self.is_forked_copy() {
            stats::BusSnapshot::default()
        } else {
            let (tx, rx) = bounded(1);
            self.core.submit(Msg::Snapshot(tx));
            rx.recv().unwrap_or_default()
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
            PortHandle::Udp(p, _, st) => {
                let get =
                    |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
                let (stays, called_back, stays_us) = self.core.left_to_polls();
                PortCounters {
                    shm_tx_frames: get(&st.tx_frames),
                    shm_tx_full_drops: get(&st.tx_full_drops),
                    shm_tx_stalls: get(&st.tx_stalls),
                    shm_rx_frames: get(&st.rx_frames),
                    shm_rx_dropped: get(&st.rx_dropped),
                    shm_peers_out: get(&st.peers_out),
                    shm_peers_in: get(&st.peers_in),
                    shm_peers_refused: get(&st.peers_refused),
                    shm_rings_broken: get(&st.rings_broken),
                    shm_bells: get(&st.bells),
                    shm_bells_spared: get(&st.bells_spared),
                    shm_lingers_paid: get(&st.lingers_paid),
                    rx_left_to_polls: stays,
                    rx_left_to_polls_us: stays_us,
                    rx_called_back: called_back,
                    rx_trains: self.core.port_trains(),
                    tx_payload_lost: self
                        .payload_lost
                        .as_ref()
                        .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed)),
                    ..p.counters()
                }
            }
            PortHandle::Fabric(_) | PortHandle::Detached => PortCounters::default(),
        }
    }

    /// Runs `f` with the NIC's state locked, so that no turn runs
    /// meanwhile: a NIC that has fallen behind, for tests of what its
    /// receivers do then.
    #[doc(hidden)]
    pub fn with_turns_held<R>(&self, f: impl FnOnce() -> R) -> R {
        self.core.with_turns_held(f)
    }

    /// Holds the UDP port's receive thread off its socket, as the
    /// program's CQ polls keep it away in a stream, until called with
    /// `false`: for tests of what the NIC does with datagrams that wait
    /// there meanwhile. Nothing on the fabric.
    #[doc(hidden)]
    pub fn hold_rx_away(&self, on: bool) {
        self.core.hold_away(on);
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
        self.core.submit(Msg::Record(on, tx));
        rx.recv().unwrap_or_default()
    }

    /// What the NIC's timeline recorded since the last call, if it records
    /// one ([`NicOptions::trace`]): write it with
    /// [`doorbell_trace::Trace::to_json`] for Perfetto UI.
    pub fn take_trace(&self) -> Option<doorbell_trace::Trace> {
        if self.is_forked_copy() {
            return None;
        }
        let (tx, rx) = bounded(1);
        self.core.submit(Msg::Trace(tx));
        rx.recv().ok().flatten()
    }

    /// Starts or stops a capture of the host interface (every register
    /// store, and the WQEs, doorbell records and CQEs the device moved, with
    /// their bytes); returns what was captured so far.
    pub fn capture(&self, on: bool) -> Vec<Carried> {
        if self.is_forked_copy() {
            return Vec::new();
        }
        let (tx, rx) = bounded(1);
        self.core.submit(Msg::Capture(on, tx));
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
            if let PortHandle::Udp(p, local, _) = &mut self.port {
                p.abandon();
                if let Some(l) = local {
                    l.abandon();
                }
            }
            return;
        }
        // Nothing reaches the NIC from its port any more, then the NIC
        // stops: its worker returns, and the interrupt handler's vectors
        // end, so that it returns the EQs, whose rings go back to host
        // memory.
        match &mut self.port {
            PortHandle::Fabric(f) => {
                f.routes().remove(&self.ipv4);
            }
            PortHandle::Udp(p, local, _) => {
                if let Some(l) = local {
                    l.stop();
                }
                p.stop();
            }
            PortHandle::Detached => {}
        }
        self.core.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(Ok(eqs)) = self.irq.take().map(JoinHandle::join) {
            eqs.release(&*self.mem);
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
        self.core.submit(Msg::Cmd(cmd, tx));
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

    fn next_event_or_wake(&self, timeout: doorbell_types::Duration) -> Option<NicEvent> {
        let wait = Duration::from_nanos(timeout.as_ps() / 1000);
        crossbeam_channel::select! {
            recv(self.events) -> e => e.ok(),
            recv(self.wake_events.1) -> _ => None,
            default(wait) => None,
        }
    }

    fn wake_event_waiter(&self) {
        // One wake is enough; a second finds the first still there.
        let _ = self.wake_events.0.try_send(());
    }

    fn clock_epoch_unix_ns(&self) -> Option<u64> {
        Some(self.epoch_unix_ns)
    }

    fn progress(&self) -> bool {
        match &self.port {
            PortHandle::Udp(p, l, _) if !self.is_forked_copy() => {
                // Both: a NIC may have peers on this host and elsewhere.
                let shm = l.as_ref().is_some_and(|l| l.progress(&self.core));
                p.progress(&self.core) | shm
            }
            // Frames a worker left for this poll ([`engine::Core::deliver`]).
            PortHandle::Fabric(_) if !self.is_forked_copy() => self.core.poll_inbox(),
            _ => false,
        }
    }
}
