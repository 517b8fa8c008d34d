//! The live runtime: the NIC on a real thread, at wall-clock speed.
//!
//! # Model
//! Each [`LiveNic`] runs the sans-IO [`doorbell_device::Nic`] on a thread of
//! its own, with its end of the PCIe [`Bus`] over the host memory the host
//! software shares with it. Everything reaches the device thread through one
//! FIFO: MMIO writes from the CPU (in the order each thread made them),
//! commands from the driver, and frames from the [`Fabric`]. The thread
//! handles each in turn, then drains the NIC's outputs: frames go to the
//! fabric, events to the host's event queue. Transport timers run on the
//! wall clock.
//!
//! [`Fabric`] is the in-process link: it routes each IPv4 frame to the NIC
//! that owns the destination address, unchanged, so the frames are the same
//! RoCEv2 packets a UDP link would carry.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};
use doorbell_device::{
    CmdError, CmdOut, Command, DeviceLink, Nic, NicConfig, NicCounters, NicEvent,
};
use doorbell_host::{HostRam, Mmio};
use doorbell_pcie::{Bus, ConfigError, Counters, Crossing, LinkConfig};
use doorbell_types::{Instant, Qpn, UarIndex};

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
}

enum Msg {
    Mmio {
        uar: UarIndex,
        offset: u32,
        len: u8,
        data: [u8; 64],
    },
    Frame(Vec<u8>),
    Cmd(Command, Sender<Result<CmdOut, CmdError>>),
    Counters(Option<Qpn>, Sender<(Counters, NicCounters)>),
    Record(bool, Sender<Vec<Crossing>>),
    Stop,
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
    mem: Arc<HostRam>,
    mmio: Arc<dyn Mmio>,
    events: Receiver<NicEvent>,
    fabric: Fabric,
    ipv4: [u8; 4],
    thread: Option<JoinHandle<()>>,
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
        link.validate()?;
        let (tx, rx) = unbounded();
        {
            let mut routes = fabric.routes.lock().unwrap_or_else(|e| e.into_inner());
            if routes.contains_key(&ipv4) {
                return Err(RtError::AddressInUse(ipv4));
            }
            routes.insert(ipv4, tx.clone());
        }
        let mem = Arc::new(HostRam::new());
        let (ev_tx, ev_rx) = unbounded();
        let cfg = NicConfig::new(ipv4);
        let gid = cfg.gid();
        let bus = Bus::new(link, mem.clone());
        let f = fabric.clone();
        let thread = std::thread::Builder::new()
            .name(format!("doorbell-{name}"))
            .spawn(move || device_loop(Nic::new(cfg), bus, rx, f, ev_tx))
            .map_err(|_| RtError::Spawn)?;
        Ok(Self {
            name: name.to_string(),
            gid,
            mmio: Arc::new(ChannelMmio { tx: tx.clone() }),
            tx,
            mem,
            events: ev_rx,
            fabric: fabric.clone(),
            ipv4,
            thread: Some(thread),
        })
    }

    /// Bus counters (all, or one QP's) and device counters, after every
    /// MMIO write made so far has been handled.
    pub fn counters(&self, qpn: Option<Qpn>) -> (Counters, NicCounters) {
        let (tx, rx) = bounded(1);
        if self.tx.send(Msg::Counters(qpn, tx)).is_err() {
            return Default::default();
        }
        rx.recv().unwrap_or_default()
    }

    /// Starts or stops recording bus crossings; returns those recorded so far.
    pub fn record(&self, on: bool) -> Vec<Crossing> {
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
}

impl Drop for LiveNic {
    fn drop(&mut self) {
        self.fabric
            .routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.ipv4);
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl DeviceLink for LiveNic {
    fn name(&self) -> &str {
        &self.name
    }

    fn exec(&self, cmd: Command) -> Result<CmdOut, CmdError> {
        let (tx, rx) = bounded(1);
        let gone = CmdError::Exhausted("device (the device thread has stopped)");
        self.tx.send(Msg::Cmd(cmd, tx)).map_err(|_| gone.clone())?;
        rx.recv().unwrap_or(Err(gone))
    }

    fn memory(&self) -> &Arc<HostRam> {
        &self.mem
    }

    fn mmio(&self) -> &Arc<dyn Mmio> {
        &self.mmio
    }

    fn gid(&self) -> [u8; 16] {
        self.gid
    }

    fn next_event(&self, timeout: Duration) -> Option<NicEvent> {
        self.events.recv_timeout(timeout).ok()
    }
}

fn device_loop(
    mut nic: Nic,
    mut bus: Bus,
    rx: Receiver<Msg>,
    fabric: Fabric,
    events: Sender<NicEvent>,
) {
    let start = std::time::Instant::now();
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
            Ok(Msg::Cmd(c, reply)) => {
                let _ = reply.send(nic.exec(now(), c, &mut bus));
            }
            Ok(Msg::Counters(q, reply)) => {
                let c = q
                    .map(|q| bus.qp_counters(q))
                    .unwrap_or_else(|| bus.counters());
                let _ = reply.send((c, nic.counters()));
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
        while let Some(f) = nic.poll_transmit() {
            fabric.deliver(f.dst, f.bytes);
        }
        while let Some(e) = nic.poll_event() {
            let _ = events.send(e);
        }
    }
}
