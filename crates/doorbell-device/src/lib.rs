//! The doorbell NIC: an mlx5-style RDMA device as a sans-IO state machine.
//!
//! # Model
//! The device sees the host only across the bus. Host software reaches it by
//! MMIO writes into UAR pages ([`Nic::handle_mmio`]: 8-byte doorbells,
//! 64-byte BlueFlame chunks, CQ arm doorbells) and by commands
//! ([`Nic::exec`], the driver's slow path). The device reaches host memory
//! only through a [`doorbell_pcie::Dma`] the caller passes into every call:
//! WQE fetch, payload fetch, receive-WQE fetch, scatter and CQE write-back
//! are all DMA, so the bus counts each one. Peers are reached by RoCEv2
//! frames: [`Nic::poll_transmit`] hands out IPv4/UDP/BTH frames with their
//! ICRC, and [`Nic::handle_frame`] takes them in.
//!
//! The NIC never reads a clock or touches a socket or thread. Time comes in
//! as `now` on every call; the transport's timers come out of
//! [`Nic::poll_timeout`] and fire through [`Nic::handle_timeout`].
//!
//! # Driving it
//! After any `handle_*` or [`Nic::exec`] call, drain the outputs in this
//! order: [`Nic::poll_transmit`] until `None` (frames to the fabric),
//! [`Nic::poll_event`] until `None` (completion and error events to the
//! host), then ask [`Nic::poll_timeout`] when to call
//! [`Nic::handle_timeout`] next.
//!
//! # Bad input
//! Every index, key, length and address read from host memory or a frame is
//! checked. A bad WQE becomes an error CQE with the mlx5 syndrome and moves
//! its QP to the error state, flushing the rest; a doorbell through a UAR the
//! QP does not own is dropped and counted; a malformed or corrupt frame is
//! dropped and counted. Nothing here panics on input.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod cq;
mod mkey;
mod qp;
mod rq;
mod sq;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use doorbell_layout::uar::{self, CqArmDoorbell, SendDoorbell, UarRegister};
use doorbell_layout::wqe;
use doorbell_pcie::{Dma, DmaTag};
use doorbell_types::{Cqn, Duration, HostAddr, Instant, Pdn, Qpn, UarIndex};

use doorbell_hif::{
    CmdError, CmdOut, Command, DeviceCaps, NicEvent, ObjKind, Param, QpParams, QpState,
};

use cq::Cq;
use mkey::MkeyTable;
use qp::Qp;

/// Static configuration of one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicConfig {
    /// The port's IPv4 address; its GID 0 is the IPv4-mapped form.
    pub ipv4: [u8; 4],
    /// What the device reports.
    pub caps: DeviceCaps,
    /// Processing costs (all zero: work takes no time of its own).
    pub timing: NicTiming,
    /// UDP source port of every frame. `None`: per QP, `0xC000 | (qpn &
    /// 0x3fff)`, as rxe picks flow entropy. A port that sends through a UDP
    /// socket sets the socket's own port here, since the ICRC covers the
    /// source port the kernel writes.
    pub udp_src_port: Option<u16>,
}

impl NicConfig {
    /// A NIC on `ipv4` with default capabilities and no processing costs.
    pub fn new(ipv4: [u8; 4]) -> Self {
        Self {
            ipv4,
            caps: DeviceCaps::default(),
            timing: NicTiming::default(),
            udp_src_port: None,
        }
    }

    /// GID 0 of the port: `::ffff:a.b.c.d`.
    pub fn gid(&self) -> [u8; 16] {
        doorbell_wire::Gid::from_ipv4(self.ipv4).octets()
    }
}

/// How long the NIC's own work takes. Work runs on a pool of processing
/// units: each input (a doorbell, a frame, a timer) takes the unit that
/// frees up first, holds it for the costs it incurs, and waits for its DMA
/// reads without holding it longer (the device overlaps DMA with other
/// work). All zero by default: the live runtime runs at the host's speed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicTiming {
    /// Processing units (at least one).
    pub processing_units: u32,
    /// Per doorbell or BlueFlame burst taken in.
    pub doorbell: Duration,
    /// Per send WQE executed.
    pub wqe: Duration,
    /// Per packet built and sent.
    pub tx_packet: Duration,
    /// Per packet received.
    pub rx_packet: Duration,
    /// Per CQE written.
    pub cqe: Duration,
    /// Time an atomic holds its address bucket.
    pub atomic: Duration,
    /// Bytes of address that share one atomic bucket (a power of two).
    pub atomic_bucket_bytes: u64,
}

impl Default for NicTiming {
    fn default() -> Self {
        Self {
            processing_units: 1,
            doorbell: Duration::ZERO,
            wqe: Duration::ZERO,
            tx_packet: Duration::ZERO,
            rx_packet: Duration::ZERO,
            cqe: Duration::ZERO,
            atomic: Duration::ZERO,
            atomic_bucket_bytes: 64,
        }
    }
}

/// A frame for the fabric: an IPv4 packet carrying RoCEv2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Destination IPv4 address.
    pub dst: [u8; 4],
    /// The IP packet, ICRC included.
    pub bytes: Vec<u8>,
    /// When the NIC had it ready for the port.
    pub ready: Instant,
}

/// What the device counted. Where the kernel's RDMA `hw_counters` (mlx5's
/// q counters, `drivers/infiniband/hw/mlx5/counters.c`) have a counter for
/// the same event, the field has its name and meaning; [`Self::hw_counters`]
/// lists them under those names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicCounters {
    /// Frames sent, retransmissions included.
    pub tx_packets: u64,
    /// Request packets sent again by go-back-N (after a NAK, a timeout, an
    /// RNR wait or an implied NAK); READ and atomic requests included.
    pub tx_retransmits: u64,
    /// Frames received and accepted for processing.
    pub rx_packets: u64,
    /// Frames dropped for a bad ICRC (`rx_icrc_encapsulated`).
    pub rx_icrc_errors: u64,
    /// Frames dropped as malformed, or for an unknown or unready QP.
    pub rx_dropped: u64,
    /// Responder: request packets that arrived ahead of the expected PSN and
    /// were dropped (`out_of_sequence`).
    pub out_of_sequence: u64,
    /// Requester: PSN-sequence-error NAKs received (`packet_seq_err`).
    pub packet_seq_err: u64,
    /// Requester: READ or atomic responses found missing because a later
    /// PSN was answered first, and asked for again (`implied_nak_seq_err`).
    pub implied_nak_seq_err: u64,
    /// Responder: requests received again after they were executed
    /// (`duplicate_request`).
    pub duplicate_request: u64,
    /// Requester: ACK timeouts that led to a retry, that is with retries
    /// left (`local_ack_timeout_err`).
    pub local_ack_timeout_err: u64,
    /// Requester: RNR NAKs received and retried, that is with RNR retries
    /// left (`rnr_nak_retry_err`).
    pub rnr_nak_retry_err: u64,
    /// Responder: RNR NAKs sent for want of a receive WQE.
    pub rnr_nak_sent: u64,
    /// Responder: messages that found no receive WQE: RNR NAKs sent, and UD
    /// datagrams dropped (`out_of_buffer`).
    pub out_of_buffer: u64,
    /// Requester: ACK timeouts or PSN-sequence NAKs with no retry left; the
    /// WQE completed with transport retry exceeded, syndrome 0x15
    /// (`req_transport_retries_exceeded`).
    pub req_transport_retries_exceeded: u64,
    /// Requester: RNR NAKs with no RNR retry left; the WQE completed with
    /// RNR retry exceeded, syndrome 0x16 (`req_rnr_retries_exceeded`).
    pub req_rnr_retries_exceeded: u64,
    /// Responder: RDMA WRITE requests executed (`rx_write_requests`).
    pub rx_write_requests: u64,
    /// Responder: RDMA READ requests executed, duplicates included
    /// (`rx_read_requests`).
    pub rx_read_requests: u64,
    /// Responder: atomic requests executed (`rx_atomic_requests`); replays
    /// from the response cache are not executions.
    pub rx_atomic_requests: u64,
    /// Doorbells dropped: unknown QP, or a UAR the QP does not own.
    pub bad_doorbells: u64,
    /// Doorbells for a QP not in a state that sends.
    pub doorbells_not_ready: u64,
}

impl NicCounters {
    /// The counters the kernel's mlx5 driver also has, under its names (as
    /// `/sys/class/infiniband/*/ports/1/hw_counters/*` shows them).
    pub fn hw_counters(&self) -> [(&'static str, u64); 13] {
        [
            ("duplicate_request", self.duplicate_request),
            ("implied_nak_seq_err", self.implied_nak_seq_err),
            ("local_ack_timeout_err", self.local_ack_timeout_err),
            ("out_of_buffer", self.out_of_buffer),
            ("out_of_sequence", self.out_of_sequence),
            ("packet_seq_err", self.packet_seq_err),
            ("req_rnr_retries_exceeded", self.req_rnr_retries_exceeded),
            (
                "req_transport_retries_exceeded",
                self.req_transport_retries_exceeded,
            ),
            ("rnr_nak_retry_err", self.rnr_nak_retry_err),
            ("rx_atomic_requests", self.rx_atomic_requests),
            ("rx_icrc_encapsulated", self.rx_icrc_errors),
            ("rx_read_requests", self.rx_read_requests),
            ("rx_write_requests", self.rx_write_requests),
        ]
    }
}

/// BlueFlame chunks collected for one buffer of one bfreg.
#[derive(Default)]
struct BfAssembly {
    bytes: Vec<u8>,
}

/// Shared outputs and tables a QP's engines need.
pub(crate) struct Ctx<'a, D: Dma> {
    /// When the input that started this work arrived.
    pub(crate) now: Instant,
    /// How far this work has got: advanced by processing costs and by the
    /// bus's answers. Frames leave, and DMAs are issued, at this time.
    pub(crate) t: Instant,
    /// Processing-unit time this work has used.
    pub(crate) busy: Duration,
    pub(crate) atomic_free: &'a mut BTreeMap<u64, Instant>,
    pub(crate) dma: &'a mut D,
    pub(crate) cqs: &'a mut BTreeMap<Cqn, Cq>,
    pub(crate) mkeys: &'a MkeyTable,
    pub(crate) out: &'a mut Outputs,
    pub(crate) cfg: &'a NicConfig,
}

macro_rules! ctx {
    ($self:ident, $now:expr, $start:expr, $dma:expr) => {
        Ctx {
            now: $now,
            t: $start,
            busy: Duration::ZERO,
            atomic_free: &mut $self.atomic_free,
            dma: $dma,
            cqs: &mut $self.cqs,
            mkeys: &$self.mkeys,
            out: &mut $self.out,
            cfg: &$self.cfg,
        }
    };
}

impl<D: Dma> Ctx<'_, D> {
    /// Spends `d` of processing-unit time.
    pub(crate) fn charge(&mut self, d: Duration) {
        self.t = self.t.add(d);
        self.busy = self.busy.add(d);
    }

    /// A DMA read at the current time; the work waits for its data.
    pub(crate) fn read(&mut self, tag: DmaTag, addr: HostAddr, buf: &mut [u8]) -> bool {
        dma_read(self.dma, &mut self.t, tag, addr, buf)
    }

    /// A DMA write at the current time.
    pub(crate) fn write(&mut self, tag: DmaTag, addr: HostAddr, data: &[u8]) -> bool {
        dma_write(self.dma, &mut self.t, tag, addr, data)
    }
}

/// A DMA read at `*t`, moving `*t` to when its data is in; false on error.
pub(crate) fn dma_read<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    buf: &mut [u8],
) -> bool {
    match dma.dma_read(*t, tag, addr, buf) {
        Ok(done) => {
            *t = done.max(*t);
            true
        }
        Err(_) => false,
    }
}

/// A DMA write at `*t`, moving `*t` to when the next may be issued.
pub(crate) fn dma_write<D: Dma>(
    dma: &mut D,
    t: &mut Instant,
    tag: DmaTag,
    addr: HostAddr,
    data: &[u8],
) -> bool {
    match dma.dma_write(*t, tag, addr, data) {
        Ok(done) => {
            *t = done.max(*t);
            true
        }
        Err(_) => false,
    }
}

/// Picks the processing unit that frees up first; work starts at `now` or
/// when it is free, whichever is later.
fn acquire_pu(pus: &mut [Instant], now: Instant) -> (usize, Instant) {
    let (i, free) = pus
        .iter()
        .copied()
        .enumerate()
        .min_by_key(|&(i, t)| (t, i))
        .unwrap_or((0, now));
    (i, free.max(now))
}

/// Queues of outputs and the counters.
#[derive(Default)]
pub(crate) struct Outputs {
    pub(crate) tx: VecDeque<Frame>,
    pub(crate) events: VecDeque<NicEvent>,
    pub(crate) counters: NicCounters,
}

/// One NIC with one port.
pub struct Nic {
    cfg: NicConfig,
    uars: BTreeSet<UarIndex>,
    next_uar: u32,
    pds: BTreeSet<Pdn>,
    next_pd: u32,
    mkeys: MkeyTable,
    cqs: BTreeMap<Cqn, Cq>,
    next_cqn: u32,
    qps: BTreeMap<Qpn, Qp>,
    next_qpn: u32,
    bf: BTreeMap<(UarIndex, u32, u32), BfAssembly>,
    out: Outputs,
    /// When each processing unit is next free.
    pus: Vec<Instant>,
    /// When each atomic address bucket is next free.
    atomic_free: BTreeMap<u64, Instant>,
    /// Processing-unit time spent, all units together.
    pu_busy: Duration,
}

impl Nic {
    /// A NIC with no objects.
    pub fn new(cfg: NicConfig) -> Self {
        let cfg_pus = cfg.timing.processing_units.max(1) as usize;
        Self {
            mkeys: MkeyTable::new(cfg.caps.max_mkeys as usize),
            cfg,
            uars: BTreeSet::new(),
            next_uar: 1,
            pds: BTreeSet::new(),
            next_pd: 1,
            cqs: BTreeMap::new(),
            next_cqn: 1,
            qps: BTreeMap::new(),
            next_qpn: 0x100,
            bf: BTreeMap::new(),
            out: Outputs::default(),
            pus: vec![Instant::ZERO; cfg_pus],
            atomic_free: BTreeMap::new(),
            pu_busy: Duration::ZERO,
        }
    }

    /// The NIC's configuration.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// What the device has counted.
    pub fn counters(&self) -> NicCounters {
        self.out.counters
    }

    /// Processing-unit time spent so far, all units together.
    pub fn pu_busy(&self) -> Duration {
        self.pu_busy
    }

    /// State of a QP, if it exists.
    pub fn qp_state(&self, qpn: Qpn) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    /// Executes a driver command.
    pub fn exec(
        &mut self,
        now: Instant,
        cmd: Command,
        dma: &mut impl Dma,
    ) -> Result<CmdOut, CmdError> {
        let caps = &self.cfg.caps;
        match cmd {
            Command::QueryCaps => Ok(CmdOut::Caps(caps.clone())),
            Command::AllocUar => {
                if self.uars.len() as u32 >= caps.max_uar {
                    return Err(CmdError::Exhausted(ObjKind::Uar));
                }
                let u = UarIndex::new(self.next_uar);
                self.next_uar += 1;
                self.uars.insert(u);
                Ok(CmdOut::Uar(u))
            }
            Command::DeallocUar(u) => {
                if self.qps.values().any(|q| q.p.uar == u)
                    || self.cqs.values().any(|c| c.uar() == u)
                {
                    return Err(CmdError::Busy {
                        kind: ObjKind::Uar,
                        id: u.get(),
                    });
                }
                self.uars
                    .remove(&u)
                    .then_some(CmdOut::Done)
                    .ok_or(CmdError::NoSuchObject {
                        kind: ObjKind::Uar,
                        id: u.get(),
                    })
            }
            Command::AllocPd => {
                if self.pds.len() as u32 >= caps.max_pd {
                    return Err(CmdError::Exhausted(ObjKind::Pd));
                }
                let p = Pdn::new(self.next_pd);
                self.next_pd += 1;
                self.pds.insert(p);
                Ok(CmdOut::Pd(p))
            }
            Command::DeallocPd(p) => {
                if !self.pds.contains(&p) {
                    return Err(CmdError::NoSuchObject {
                        kind: ObjKind::Pd,
                        id: p.get(),
                    });
                }
                if self.mkeys.count_in_pd(p) > 0 || self.qps.values().any(|q| q.p.pd == p) {
                    return Err(CmdError::Busy {
                        kind: ObjKind::Pd,
                        id: p.get(),
                    });
                }
                self.pds.remove(&p);
                Ok(CmdOut::Done)
            }
            Command::CreateMkey(params) => {
                if !self.pds.contains(&params.pd) {
                    return Err(CmdError::NoSuchObject {
                        kind: ObjKind::Pd,
                        id: params.pd.get(),
                    });
                }
                // The range must fit the 64-bit I/O space: every later
                // bounds check adds to `start`.
                let Some(pages) = params
                    .start
                    .checked_add(params.len)
                    .and_then(|_| (params.start % doorbell_host::PAGE_SIZE).checked_add(params.len))
                    .map(|b| b.div_ceil(doorbell_host::PAGE_SIZE))
                else {
                    return Err(CmdError::BadParam {
                        name: Param::MkeyLength,
                        value: params.len,
                    });
                };
                if (params.mtt.len() as u64) < pages {
                    return Err(CmdError::BadParam {
                        name: Param::MttEntries,
                        value: params.mtt.len() as u64,
                    });
                }
                self.mkeys
                    .create(params)
                    .map(CmdOut::Mkey)
                    .ok_or(CmdError::Exhausted(ObjKind::Mkey))
            }
            Command::DestroyMkey(k) => {
                if self.mkeys.destroy(k) {
                    Ok(CmdOut::Done)
                } else {
                    Err(CmdError::NoSuchObject {
                        kind: ObjKind::Mkey,
                        id: k.raw(),
                    })
                }
            }
            Command::CreateCq(p) => {
                if !self.uars.contains(&p.uar) {
                    return Err(CmdError::NoSuchObject {
                        kind: ObjKind::Uar,
                        id: p.uar.get(),
                    });
                }
                let n = 1u64 << p.log_size.min(31);
                if p.log_size > 24 || n > u64::from(caps.max_cqe) {
                    return Err(CmdError::BadParam {
                        name: Param::LogCqSize,
                        value: p.log_size.into(),
                    });
                }
                if (p.pas.len() as u64) < (n * 64).div_ceil(doorbell_host::PAGE_SIZE) {
                    return Err(CmdError::BadParam {
                        name: Param::CqPasEntries,
                        value: p.pas.len() as u64,
                    });
                }
                let c = Cqn::new(self.next_cqn);
                self.next_cqn += 1;
                self.cqs.insert(c, Cq::new(p));
                Ok(CmdOut::Cq(c))
            }
            Command::DestroyCq(c) => {
                let cq = self.cqs.get(&c).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Cq,
                    id: c.get(),
                })?;
                if cq.users > 0 {
                    return Err(CmdError::Busy {
                        kind: ObjKind::Cq,
                        id: c.get(),
                    });
                }
                self.cqs.remove(&c);
                Ok(CmdOut::Done)
            }
            Command::CreateQp(p) => self.create_qp(p),
            Command::ModifyQp { qpn, state, attrs } => {
                let qp = self.qps.get_mut(&qpn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Qp,
                    id: qpn.get(),
                })?;
                let from = qp.modify(state, &attrs)?;
                if state == QpState::Err && from != QpState::Err {
                    let mut ctx = ctx!(self, now, now, dma);
                    sq::flush(qp, &mut ctx);
                    rq::flush(qp, &mut ctx);
                }
                Ok(CmdOut::Done)
            }
            Command::QueryQp(qpn) => {
                let qp = self.qps.get(&qpn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Qp,
                    id: qpn.get(),
                })?;
                Ok(CmdOut::QpInfo {
                    state: qp.state,
                    attrs: qp.attrs,
                })
            }
            Command::DestroyQp(qpn) => {
                let qp = self.qps.remove(&qpn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Qp,
                    id: qpn.get(),
                })?;
                for c in [qp.p.send_cq, qp.p.recv_cq] {
                    if let Some(cq) = self.cqs.get_mut(&c) {
                        cq.users = cq.users.saturating_sub(1);
                    }
                }
                Ok(CmdOut::Done)
            }
            #[allow(unreachable_patterns)]
            _ => Err(CmdError::BadParam {
                name: Param::Command,
                value: 0,
            }),
        }
    }

    fn create_qp(&mut self, p: QpParams) -> Result<CmdOut, CmdError> {
        let caps = &self.cfg.caps;
        if self.qps.len() >= 1 << caps.log_max_qp {
            return Err(CmdError::Exhausted(ObjKind::Qp));
        }
        if !self.pds.contains(&p.pd) {
            return Err(CmdError::NoSuchObject {
                kind: ObjKind::Pd,
                id: p.pd.get(),
            });
        }
        if !self.uars.contains(&p.uar) {
            return Err(CmdError::NoSuchObject {
                kind: ObjKind::Uar,
                id: p.uar.get(),
            });
        }
        for c in [p.send_cq, p.recv_cq] {
            if !self.cqs.contains_key(&c) {
                return Err(CmdError::NoSuchObject {
                    kind: ObjKind::Cq,
                    id: c.get(),
                });
            }
        }
        if (1u32 << p.log_sq_size.min(31)) > caps.max_send_wqebb || p.log_sq_size > 15 {
            return Err(CmdError::BadParam {
                name: Param::LogSqSize,
                value: p.log_sq_size.into(),
            });
        }
        if (1u32 << p.log_rq_size.min(31)) > caps.max_recv_wr || p.log_rq_size > 15 {
            return Err(CmdError::BadParam {
                name: Param::LogRqSize,
                value: p.log_rq_size.into(),
            });
        }
        if p.log_rq_stride > 8 || (16u32 << p.log_rq_stride) > caps.max_rq_desc_sz {
            return Err(CmdError::BadParam {
                name: Param::LogRqStride,
                value: p.log_rq_stride.into(),
            });
        }
        let bytes =
            (16u64 << p.log_rq_stride) * (1u64 << p.log_rq_size) + 64 * (1u64 << p.log_sq_size);
        if (p.pas.len() as u64) < bytes.div_ceil(doorbell_host::PAGE_SIZE) {
            return Err(CmdError::BadParam {
                name: Param::QpPasEntries,
                value: p.pas.len() as u64,
            });
        }
        let qpn = Qpn::new(self.next_qpn);
        self.next_qpn += 1;
        for c in [p.send_cq, p.recv_cq] {
            if let Some(cq) = self.cqs.get_mut(&c) {
                cq.users += 1;
            }
        }
        self.qps.insert(qpn, Qp::new(qpn, p));
        Ok(CmdOut::Qp(qpn))
    }

    /// Takes one MMIO write the CPU made into UAR page `uar`: an 8-byte
    /// doorbell, a 64-byte BlueFlame chunk, or a CQ arm doorbell.
    pub fn handle_mmio(
        &mut self,
        now: Instant,
        uar: UarIndex,
        offset: u32,
        data: &[u8],
        dma: &mut impl Dma,
    ) {
        let bf_reg_size = self.cfg.caps.bf_reg_size as usize;
        let reg = uar::decode_offset(offset as usize, bf_reg_size);
        if !self.uars.contains(&uar) {
            dma.record_mmio(now, None, data.len());
            self.out.counters.bad_doorbells += 1;
            return;
        }
        match reg {
            UarRegister::CqArm => {
                dma.record_mmio(now, None, data.len());
                let Ok(bytes) = <&[u8; 8]>::try_from(data) else {
                    self.out.counters.bad_doorbells += 1;
                    return;
                };
                let arm = CqArmDoorbell::parse(bytes);
                match self.cqs.get_mut(&Cqn::new(arm.cqn)) {
                    Some(cq) if cq.uar() == uar => {
                        if cq.arm(arm.solicited_only, arm.ci) {
                            self.out
                                .events
                                .push_back(NicEvent::Completion(Cqn::new(arm.cqn)));
                        }
                    }
                    _ => self.out.counters.bad_doorbells += 1,
                }
            }
            UarRegister::Bfreg { slot, half, offset } => {
                if data.len() == uar::DOORBELL_LEN && offset == 0 {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(data);
                    let db = SendDoorbell::parse(&b);
                    dma.record_mmio(now, Some(Qpn::new(db.qpn)), data.len());
                    self.send_doorbell(now, uar, db, None, dma);
                } else if data.len() == uar::BF_CHUNK && offset % uar::BF_CHUNK == 0 {
                    self.bf_chunk(now, uar, slot, half, offset, data, dma);
                } else {
                    dma.record_mmio(now, None, data.len());
                    self.out.counters.bad_doorbells += 1;
                }
            }
            UarRegister::Other => {
                dma.record_mmio(now, None, data.len());
                self.out.counters.bad_doorbells += 1;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn bf_chunk(
        &mut self,
        now: Instant,
        uar: UarIndex,
        slot: u32,
        half: u32,
        offset: usize,
        data: &[u8],
        dma: &mut impl Dma,
    ) {
        let half_size = self.cfg.caps.bf_reg_size as usize / 2;
        let asm = self.bf.entry((uar, slot, half)).or_default();
        if offset == 0 {
            asm.bytes.clear();
        } else if asm.bytes.len() != offset {
            // A chunk out of order: the burst is unusable.
            asm.bytes.clear();
            dma.record_mmio(now, None, data.len());
            self.out.counters.bad_doorbells += 1;
            return;
        }
        asm.bytes.extend_from_slice(data);
        let ctrl = wqe::CtrlSeg::new_unchecked(&asm.bytes[..wqe::field::CTRL_LEN]);
        let qpn = ctrl.qpn();
        dma.record_mmio(now, Some(Qpn::new(qpn)), data.len());
        let need = (usize::from(ctrl.ds()) * wqe::DS_LEN).div_ceil(uar::BF_CHUNK) * uar::BF_CHUNK;
        if need > half_size {
            // A WQE larger than its BlueFlame buffer cannot arrive whole: the
            // burst is dropped (the provider never sends one).
            asm.bytes.clear();
            self.out.counters.bad_doorbells += 1;
            return;
        }
        if asm.bytes.len() < need.max(uar::BF_CHUNK) {
            return;
        }
        let bytes = std::mem::take(&mut asm.bytes);
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&bytes[..8]);
        let db = SendDoorbell::parse(&prefix);
        self.send_doorbell(now, uar, db, Some(&bytes), dma);
        if let Some(asm) = self.bf.get_mut(&(uar, slot, half)) {
            asm.bytes = bytes;
            asm.bytes.clear();
        }
    }

    fn send_doorbell(
        &mut self,
        now: Instant,
        uar: UarIndex,
        db: SendDoorbell,
        bf: Option<&[u8]>,
        dma: &mut impl Dma,
    ) {
        let Some(qp) = self.qps.get_mut(&Qpn::new(db.qpn)) else {
            self.out.counters.bad_doorbells += 1;
            return;
        };
        if qp.p.uar != uar {
            self.out.counters.bad_doorbells += 1;
            return;
        }
        let (pu, start) = acquire_pu(&mut self.pus, now);
        let mut ctx = ctx!(self, now, start, dma);
        sq::doorbell(qp, db, bf, &mut ctx);
        let busy = ctx.busy;
        self.pus[pu] = start.add(busy);
        self.pu_busy = self.pu_busy.add(busy);
    }

    /// Takes one frame from the fabric.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8], dma: &mut impl Dma) {
        let parsed = match doorbell_wire::parse_roce(frame) {
            Ok(p) => p,
            Err(doorbell_wire::Error::BadIcrc) => {
                self.out.counters.rx_icrc_errors += 1;
                return;
            }
            Err(_) => {
                self.out.counters.rx_dropped += 1;
                return;
            }
        };
        let (pu, start) = acquire_pu(&mut self.pus, now);
        let Some(qp) = self.qps.get_mut(&parsed.repr.bth.dest_qp) else {
            self.out.counters.rx_dropped += 1;
            return;
        };
        self.out.counters.rx_packets += 1;
        let payload = frame.get(parsed.payload.clone()).unwrap_or(&[]);
        let mut ctx = ctx!(self, now, start, dma);
        ctx.charge(ctx.cfg.timing.rx_packet);
        if parsed.repr.bth.opcode.is_response() {
            sq::handle_response(qp, &parsed.repr, payload, &mut ctx);
        } else {
            let ip_header = frame.get(..parsed.repr.ip.header_len()).unwrap_or(&[]);
            rq::handle_request(qp, &parsed.repr, ip_header, payload, &mut ctx);
        }
        let busy = ctx.busy;
        self.pus[pu] = start.add(busy);
        self.pu_busy = self.pu_busy.add(busy);
    }

    /// Fires every transport timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant, dma: &mut impl Dma) {
        for qp in self.qps.values_mut() {
            if sq::next_deadline(qp).is_none_or(|t| t > now) {
                continue;
            }
            let (pu, start) = acquire_pu(&mut self.pus, now);
            let mut ctx = ctx!(self, now, start, &mut *dma);
            sq::handle_timeout(qp, &mut ctx);
            let busy = ctx.busy;
            self.pus[pu] = start.add(busy);
            self.pu_busy = self.pu_busy.add(busy);
        }
    }

    /// The next frame for the fabric.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        self.out.tx.pop_front()
    }

    /// The next event for the host.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<NicEvent> {
        self.out.events.pop_front()
    }

    /// When [`Nic::handle_timeout`] should next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.qps.values().filter_map(sq::next_deadline).min()
    }
}
