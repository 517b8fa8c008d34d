//! A live NIC's timeline ([`crate::NicOptions::trace`]): the crossings a
//! simulated run's trace shows, stamped with the wall clock (the device
//! clock, which starts when the NIC does).
//!
//! Tracks of the NIC's process: the device's work (each MMIO store,
//! doorbell record, batch of frames, command and timer it handled, from
//! start to end), the register stores as they reached it (with their QP),
//! its DMAs (WQE and payload reads, CQE, EQE and receive writes, with QP,
//! purpose and bytes), and the frames it sent and took in (opcode, PSN,
//! destination QP). [`crate::LiveNic::take_trace`] hands them over.

use doorbell_pcie::Crossing;
use doorbell_trace::{Args, Trace, Track};
use doorbell_types::Instant;

const WORK: u32 = 1;
const MMIO: u32 = 2;
const DMA: u32 = 3;
const OUT: u32 = 4;
const IN: u32 = 5;

/// What a live NIC has recorded so far.
pub(crate) struct LiveTimeline {
    trace: Trace,
    pid: u32,
}

impl LiveTimeline {
    /// A timeline for the NIC `name` of this process.
    pub(crate) fn new(name: &str) -> Self {
        let mut t = Self {
            trace: Trace::new(),
            pid: std::process::id(),
        };
        t.name(name);
        t
    }

    fn name(&mut self, nic: &str) {
        let pid = self.pid;
        self.trace
            .name_process(pid, &format!("NIC {nic} (process {pid})"), 0);
        for (tid, what) in [
            (WORK, "NIC: work"),
            (MMIO, "PCIe host → NIC: register stores"),
            (DMA, "PCIe NIC ↔ host: DMA"),
            (OUT, "wire: sent"),
            (IN, "wire: received"),
        ] {
            self.trace.name_track(Track::new(pid, tid), what, tid);
        }
    }

    fn track(&self, tid: u32) -> Track {
        Track::new(self.pid, tid)
    }

    /// The device worked on `what` from `start` to `end`.
    pub(crate) fn work(&mut self, what: String, start: Instant, end: Instant) {
        let t = self.track(WORK);
        self.trace.slice(t, "nic", what, start, end, Args::new());
    }

    /// What crossed the bus meanwhile.
    pub(crate) fn crossings(&mut self, log: &[Crossing]) {
        for c in log {
            match *c {
                Crossing::Mmio { at, qpn, bytes } => {
                    let what = if bytes <= 8 { "doorbell" } else { "BlueFlame" };
                    let mut args = Args::new().with("bytes", bytes);
                    if let Some(q) = qpn {
                        args = args.with_qpn("qpn", q.get());
                    }
                    let t = self.track(MMIO);
                    self.trace
                        .instant(t, "mmio", format!("{what} ({bytes} B)"), at, args);
                }
                Crossing::DmaRead {
                    at,
                    tag,
                    bytes,
                    mrd,
                    cpld,
                } => {
                    let mut args = Args::new()
                        .with("bytes", bytes)
                        .with("mrd_tlps", mrd)
                        .with("cpld_tlps", cpld);
                    if let Some(q) = tag.qpn {
                        args = args.with_qpn("qpn", q.get());
                    }
                    let t = self.track(DMA);
                    let name = format!("{:?} read {bytes} B", tag.purpose);
                    self.trace.instant(t, "dma", name, at, args);
                }
                Crossing::DmaWrite {
                    at,
                    tag,
                    bytes,
                    mwr,
                } => {
                    let mut args = Args::new().with("bytes", bytes).with("mwr_tlps", mwr);
                    if let Some(q) = tag.qpn {
                        args = args.with_qpn("qpn", q.get());
                    }
                    let t = self.track(DMA);
                    let name = format!("{:?} write {bytes} B", tag.purpose);
                    self.trace.instant(t, "dma", name, at, args);
                }
            }
        }
    }

    /// A frame left (`sent`) or came in at `at`.
    pub(crate) fn frame(&mut self, sent: bool, at: Instant, bytes: &[u8]) {
        let t = self.track(if sent { OUT } else { IN });
        let Ok(p) = doorbell_wire::parse_roce_emitted(bytes) else {
            let args = Args::new().with("bytes", bytes.len());
            self.trace.instant(t, "wire", "not RoCEv2", at, args);
            return;
        };
        let bth = &p.repr.bth;
        let args = Args::new()
            .with_qpn("dest_qp", bth.dest_qp.get())
            .with("psn", bth.psn.get())
            .with("bytes", bytes.len());
        let name = format!("{:?} PSN {}", bth.opcode, bth.psn.get());
        self.trace.instant(t, "wire", name, at, args);
    }

    /// What was recorded, leaving the timeline empty but named.
    pub(crate) fn take(&mut self, nic: &str) -> Trace {
        let t = std::mem::take(&mut self.trace);
        self.name(nic);
        t
    }
}
