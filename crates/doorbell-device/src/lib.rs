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
//! ICRC, and [`Nic::handle_frame`] takes them in. Between NICs of one
//! process the runtime may leave the ICRC to the link ([`NicConfig::icrc`])
//! and the payload of an RC WRITE, SEND or READ response in the sender's
//! host memory
//! ([`NicConfig::leave_payload`]): the receiver takes such frames with
//! [`Nic::handle_emitted_frame`] and [`Nic::handle_unfilled_frame`], and
//! copies the payload from the sender's memory into its own, once. Such a
//! sender may also hand a run of a message's MIDDLE packets on as one frame
//! ([`NicConfig::max_segments`], [`Unfilled::segments`]), with its FIRST
//! and LAST too ([`NicConfig::runs_with_ends`]): the receiver takes each
//! packet of it as it would have taken it alone, its headers parsed
//! once. And it may hand a QP's packets whose bytes are all in
//! their frames on back to back, as a train ([`NicConfig::max_train`],
//! [`Frame::train`]), which the receiver takes with
//! [`Nic::handle_emitted_train`], packet by packet. Such a NIC hands those
//! packets' headers over parsed, unwritten ([`Frame::headers`]), and the
//! receiver takes them as they are with [`Nic::handle_parsed_frame`].
//!
//! The NIC never reads a clock or touches a socket or thread. Time comes in
//! as `now` on every call; the transport's timers come out of
//! [`Nic::poll_timeout`] and fire through [`Nic::handle_timeout`].
//!
//! # Driving it
//! After any `handle_*` or [`Nic::exec`] call, drain the outputs in this
//! order: [`Nic::poll_transmit`] until `None` (frames to the fabric);
//! with a burst ([`NicConfig::tx_burst`], [`NicConfig::read_burst`]),
//! [`Nic::resume_transmit`] and [`Nic::poll_transmit`] again, until
//! `resume_transmit` answers `false`, also where the first poll found
//! nothing (a port whose link went down dropped the frames built, not
//! what was still to build);
//! [`Nic::poll_event`] until `None` (completion and error events to the
//! host), then ask [`Nic::poll_timeout`] when to call
//! [`Nic::handle_timeout`] next.
//!
//! # Cost
//! Nothing on the path of a post, a frame or a timer looks at every QP:
//! QPs are found by number, and the timers of all QPs sit in one index
//! ordered by deadline, so [`Nic::poll_timeout`] is O(log n) and
//! [`Nic::handle_timeout`] visits only the QPs that are due.
//!
//! # Bad input
//! Every index, key, length and address read from host memory or a frame is
//! checked. A bad WQE becomes an error CQE with the mlx5 syndrome and moves
//! its QP to the error state, flushing the rest; a doorbell through a UAR the
//! QP does not own is dropped and counted; a malformed or corrupt frame is
//! dropped and counted. Nothing here panics on input.
//!
//! # Modules
//! In layers; a module uses only modules of lower layers or its own
//! (`DESIGN.md` draws the graph):
//! - data: [`config`](NicConfig) (configuration, frames, counters), `qp`
//!   (a QP split into send queue, receive queue, RC requester and responder
//!   from [`doorbell_roce`], and its timers), `wq` (queue state, SGEs, sent
//!   messages), `wqe` (send-WQE parsing), `cq`, `mkey`, `timer` (the
//!   NIC-wide timer index), `fault` (what an engine reports);
//! - plumbing: `dma` (DMA helpers, and a received payload wherever it
//!   is), `ctx` (what one input's work runs in),
//!   `cqe` (the CQE writer), `emit` (the frame emitter), `sge` (the one SGE
//!   walker behind payload gather and receive scatter), `fetch` (send and
//!   receive WQE fetch, doorbell records);
//! - shared steps: `transmit` (the requester's window and go-back-N),
//!   `complete` (completion in order, flushes, and turning a fault into the
//!   error state);
//! - engines: `send` (doorbells and WQE execution), `response` (ACKs, NAKs,
//!   READ and atomic responses, the requester's timers), `recv` (the
//!   responder and UD receive). Engines never call each other: they return
//!   a fault, or ask for the send engine to run, and the [`Nic`] does it.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod complete;
mod config;
mod cq;
mod cqe;
mod ctx;
mod dma;
mod emit;
mod eq;
mod fault;
mod fetch;
mod mkey;
mod owed;
mod pool;
mod qp;
mod recv;
mod response;
mod send;
mod sge;
mod srq;
mod timer;
mod transmit;
mod wq;
mod wqe;

use std::collections::{BTreeMap, BTreeSet};

use doorbell_host::{HostMemory, RecordDoorbell};
use doorbell_layout::uar::{self, CqArmDoorbell, SendDoorbell, UarRegister};
use doorbell_layout::wqe as wqe_layout;
use doorbell_pcie::{Dma, DmaPurpose, DmaTag};
use doorbell_types::{Cqn, Duration, HostAddr, Instant, Pdn, Qpn, Srqn, UarIndex};
use doorbell_wire::RoceRepr;

use doorbell_hif::{
    CmdError, CmdOut, Command, MkeyParams, NicEvent, ObjKind, Param, QpParams, QpState, QpType,
    SrqParams,
};

pub use config::{
    ADAPTIVE_RETRANSMIT_FLOOR, Frame, MAX_SEGMENTS, MAX_TRAIN_BYTES, NicConfig, NicCounters,
    NicTiming, PacketHeaders, RunLast, Split, Unfilled,
};

use cq::Cq;
use ctx::{Ctx, Outputs};
use dma::PayloadIn;
use eq::Eqs;
use fault::Outcome;
use mkey::MkeyTable;
use qp::Qp;
use response::Then;
use srq::Srq;
use timer::{Timer, TimerIndex};

/// What became of a frame the NIC was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A QP took it (whatever the transport then made of it: a duplicate,
    /// a NAK, an RNR wait).
    Taken,
    /// It went no further than the port, for this reason (counted in
    /// `rx_icrc_errors`, `rx_dropped` or `link_down_dropped`).
    Dropped(&'static str),
}

impl Received {
    /// What a train answers so far, `self` for its latest packet and
    /// `before` for those before it: the latest drop's reason, if any.
    fn or_before(self, before: Received) -> Received {
        match self {
            Received::Taken => before,
            dropped => dropped,
        }
    }
}

/// BlueFlame chunks collected for one buffer of one bfreg.
#[derive(Default)]
struct BfAssembly {
    bytes: Vec<u8>,
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
            srqs: &mut $self.srqs,
            out: &mut $self.out,
            cfg: &$self.cfg,
            cqe_lost: false,
        }
    };
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

/// Acts on what an engine returned: runs the send engine if asked, and
/// turns a fault, or a completion its CQ could not take, into the error
/// state.
fn settle<D: Dma>(qp: &mut Qp, r: Outcome<Then>, ctx: &mut Ctx<'_, D>) {
    let r = match r {
        Ok(Then::Pump) => send::pump(qp, ctx),
        Ok(Then::Done) => Ok(()),
        Err(f) => Err(f),
    };
    if let Err(f) = r {
        complete::fault(qp, f, ctx);
    }
    if std::mem::take(&mut ctx.cqe_lost) {
        complete::fault(qp, fault::Fault::Qp, ctx);
        ctx.cqe_lost = false;
    }
}

/// Brings the NIC's timer index in line with `qp`'s timers.
fn sync_timers(index: &mut TimerIndex, qp: &mut Qp) {
    let at = Timer::ALL.map(|t| qp.timer(t));
    index.sync(qp.qpn, &mut qp.indexed, at);
}

/// The GSI QP's number (IBA's QP1).
const GSI_QPN: u32 = 1;

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
    srqs: BTreeMap<Srqn, Srq>,
    next_srqn: u32,
    bf: BTreeMap<(UarIndex, u32, u32), BfAssembly>,
    out: Outputs,
    /// When each processing unit is next free.
    pus: Vec<Instant>,
    /// When each atomic address bucket is next free.
    atomic_free: BTreeMap<u64, Instant>,
    /// Processing-unit time spent, all units together.
    pu_busy: Duration,
    /// Each stretch of processing-unit time, while recorded.
    pu_work: Option<Vec<PuWork>>,
    /// Every QP's running timers, by deadline.
    timers: TimerIndex,
    /// The QPs whose timers [`Nic::handle_timeout`] fires, kept for reuse.
    due: Vec<Qpn>,
    /// The port's link is down (administratively): no frame leaves or
    /// arrives.
    link_down: bool,
    /// Event queues, their interrupts, and events no EQ takes.
    eqs: Eqs,
    /// Room for [`Nic::write_run`], kept for reuse.
    run: RunScratch,
}

/// What [`Nic::write_run`] works out before it takes a run's packets.
#[derive(Default)]
struct RunScratch {
    /// The processing units' free times as the packets would leave them.
    pus: Vec<Instant>,
    /// Each packet's unit, start and time on it.
    units: Vec<(usize, Instant, Duration)>,
    /// Each packet's write's time.
    times: Vec<Instant>,
    /// Each packet's write ([`Nic::write_only_train`]).
    to: Vec<doorbell_host::Placed>,
}

/// What a processing unit worked on ([`PuWork`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PuTask {
    /// A doorbell, BlueFlame copy or doorbell record: WQEs to send.
    Doorbell,
    /// A frame that arrived.
    Frame,
    /// A transport timer (retransmission, RNR).
    Timer,
}

/// One stretch of a processing unit's time, for timelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PuWork {
    /// Which unit.
    pub unit: u16,
    /// When it started.
    pub start: Instant,
    /// When it was free again.
    pub end: Instant,
    /// The QP it worked for.
    pub qpn: Qpn,
    /// What it did.
    pub task: PuTask,
}

impl Nic {
    /// A NIC with no objects.
    pub fn new(cfg: NicConfig) -> Self {
        let cfg_pus = cfg.timing.processing_units.max(1) as usize;
        let out = Outputs::new(cfg.icrc, cfg.max_train);
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
            srqs: BTreeMap::new(),
            next_srqn: 1,
            bf: BTreeMap::new(),
            out,
            pus: vec![Instant::ZERO; cfg_pus],
            atomic_free: BTreeMap::new(),
            pu_busy: Duration::ZERO,
            pu_work: None,
            timers: TimerIndex::default(),
            due: Vec::new(),
            link_down: false,
            eqs: Eqs::default(),
            run: RunScratch::default(),
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

    /// Times a QP's sending stopped with packets left to send because its
    /// window was full: it goes on when ACKs come. A runtime that sees
    /// this grow knows a stream is waiting for ACKs (a count, not a
    /// transport counter: nothing in hardware reports it). Counted once a
    /// pass of the window: once a doorbell where a NIC sends a doorbell's
    /// messages together (decision record 0063).
    #[must_use]
    pub fn window_stops(&self) -> u64 {
        self.out.window_stops
    }

    /// Processing-unit time spent so far, all units together.
    pub fn pu_busy(&self) -> Duration {
        self.pu_busy
    }

    /// Starts (`on`) or stops recording each stretch of processing-unit
    /// time ([`Nic::take_pu_work`]), for timelines.
    pub fn record_pu_work(&mut self, on: bool) {
        self.pu_work = on.then(|| self.pu_work.take().unwrap_or_default());
    }

    /// The stretches of processing-unit time recorded since the last call.
    pub fn take_pu_work(&mut self) -> Vec<PuWork> {
        self.pu_work
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Unit `pu` worked on `qpn` from `start` for `busy`.
    fn occupy(&mut self, pu: usize, start: Instant, busy: Duration, qpn: Qpn, task: PuTask) {
        self.pus[pu] = start.add(busy);
        self.pu_busy = self.pu_busy.add(busy);
        if let Some(log) = &mut self.pu_work {
            log.push(PuWork {
                unit: pu as u16,
                start,
                end: start.add(busy),
                qpn,
                task,
            });
        }
    }

    /// State of a QP, if it exists.
    pub fn qp_state(&self, qpn: Qpn) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    /// What CREATE_MKEY and MODIFY_MKEY check of an mkey context: its PD
    /// exists, its range fits, and its MTT covers every page of it.
    fn check_mkey(&self, params: &MkeyParams) -> Result<(), CmdError> {
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
        Ok(())
    }

    /// Executes a driver command.
    pub fn exec(
        &mut self,
        now: Instant,
        cmd: Command,
        dma: &mut impl Dma,
    ) -> Result<CmdOut, CmdError> {
        let r = self.command(now, cmd, dma);
        self.deliver_events(dma);
        r
    }

    /// Writes the events raised so far into the EQs that take them.
    fn deliver_events(&mut self, dma: &mut impl Dma) {
        let lost = self
            .eqs
            .deliver(&mut self.out.events, dma, self.cfg.timing.cqe);
        self.out.counters.events_lost += lost;
    }

    fn command(
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
                    || self.eqs.uses(u)
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
                if self.mkeys.count_in_pd(p) > 0
                    || self.qps.values().any(|q| q.p.pd == p)
                    || self.srqs.values().any(|s| s.p.pd == p)
                {
                    return Err(CmdError::Busy {
                        kind: ObjKind::Pd,
                        id: p.get(),
                    });
                }
                self.pds.remove(&p);
                Ok(CmdOut::Done)
            }
            Command::AccessPaos(set) => {
                if let Some(up) = set
                    && up == self.link_down
                {
                    self.link_down = !up;
                    let ev = if up {
                        NicEvent::PortUp(1)
                    } else {
                        NicEvent::PortDown(1)
                    };
                    self.out.events.push_back((ev, now));
                }
                Ok(CmdOut::PortUp(!self.link_down))
            }
            Command::CreateMkey(params) => {
                self.check_mkey(&params)?;
                self.mkeys
                    .create(params)
                    .map(CmdOut::Mkey)
                    .ok_or(CmdError::Exhausted(ObjKind::Mkey))
            }
            Command::ModifyMkey(k, params) => {
                self.check_mkey(&params)?;
                if self.mkeys.modify(k, params) {
                    Ok(CmdOut::Done)
                } else {
                    Err(CmdError::NoSuchObject {
                        kind: ObjKind::Mkey,
                        id: k.raw(),
                    })
                }
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
                if !matches!(p.cqe_bytes, 64 | 128) {
                    return Err(CmdError::BadParam {
                        name: Param::CqeSize,
                        value: p.cqe_bytes.into(),
                    });
                }
                let bytes = n * u64::from(p.cqe_bytes);
                if (p.pas.len() as u64) < bytes.div_ceil(doorbell_host::PAGE_SIZE) {
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
            Command::ResizeCq { cqn, log_size, pas } => {
                let max_cqe = caps.max_cqe;
                let cq = self.cqs.get_mut(&cqn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Cq,
                    id: cqn.get(),
                })?;
                let n = 1u64 << log_size.min(31);
                if log_size > 24 || n > u64::from(max_cqe) {
                    return Err(CmdError::BadParam {
                        name: Param::LogCqSize,
                        value: log_size.into(),
                    });
                }
                let bytes = n * u64::from(cq.cqe_bytes());
                if (pas.len() as u64) < bytes.div_ceil(doorbell_host::PAGE_SIZE) {
                    return Err(CmdError::BadParam {
                        name: Param::CqPasEntries,
                        value: pas.len() as u64,
                    });
                }
                let mut t = now;
                if cq.resize(dma, &mut t, log_size, pas) {
                    Ok(CmdOut::Done)
                } else {
                    Err(CmdError::BadParam {
                        name: Param::LogCqSize,
                        value: log_size.into(),
                    })
                }
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
                    complete::flush_sq(qp, &mut ctx);
                    complete::flush_rq(qp, &mut ctx);
                }
                sync_timers(&mut self.timers, qp);
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
                let mut qp = self.qps.remove(&qpn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Qp,
                    id: qpn.get(),
                })?;
                self.timers
                    .sync(qpn, &mut qp.indexed, [None; Timer::ALL.len()]);
                for c in [qp.p.send_cq, qp.p.recv_cq] {
                    if let Some(cq) = self.cqs.get_mut(&c) {
                        cq.users = cq.users.saturating_sub(1);
                    }
                }
                if let Some(srq) = qp.p.srq.and_then(|s| self.srqs.get_mut(&s)) {
                    srq.users = srq.users.saturating_sub(1);
                }
                Ok(CmdOut::Done)
            }
            Command::CreateSrq(p) => self.create_srq(p),
            Command::ModifySrq { srqn, limit } => {
                let srq = self.srqs.get_mut(&srqn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Srq,
                    id: srqn.get(),
                })?;
                // One WQE of the ring is the list's end: at most size - 1
                // are ever posted.
                if limit >= srq.size {
                    return Err(CmdError::BadParam {
                        name: Param::SrqLimit,
                        value: limit.into(),
                    });
                }
                srq.limit = limit;
                Ok(CmdOut::Done)
            }
            Command::QuerySrq(srqn) => {
                let srq = self.srqs.get(&srqn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Srq,
                    id: srqn.get(),
                })?;
                Ok(CmdOut::SrqInfo { limit: srq.limit })
            }
            Command::DestroySrq(srqn) => {
                let srq = self.srqs.get(&srqn).ok_or(CmdError::NoSuchObject {
                    kind: ObjKind::Srq,
                    id: srqn.get(),
                })?;
                if srq.users > 0 {
                    return Err(CmdError::Busy {
                        kind: ObjKind::Srq,
                        id: srqn.get(),
                    });
                }
                self.srqs.remove(&srqn);
                Ok(CmdOut::Done)
            }
            Command::CreateEq(p) => {
                if !self.uars.contains(&p.uar) {
                    return Err(CmdError::NoSuchObject {
                        kind: ObjKind::Uar,
                        id: p.uar.get(),
                    });
                }
                self.eqs.create(p).map(CmdOut::Eq)
            }
            Command::DestroyEq(n) => self.eqs.destroy(n).map(|()| CmdOut::Done),
            #[allow(unreachable_patterns)]
            _ => Err(CmdError::BadParam {
                name: Param::Command,
                value: 0,
            }),
        }
    }

    fn create_srq(&mut self, p: SrqParams) -> Result<CmdOut, CmdError> {
        let caps = &self.cfg.caps;
        if !self.pds.contains(&p.pd) {
            return Err(CmdError::NoSuchObject {
                kind: ObjKind::Pd,
                id: p.pd.get(),
            });
        }
        if p.log_size > 15 || (1u32 << p.log_size) > caps.max_recv_wr {
            return Err(CmdError::BadParam {
                name: Param::LogSrqSize,
                value: p.log_size.into(),
            });
        }
        // A WQE holds its next segment and at least one data segment.
        if p.log_stride == 0 || p.log_stride > 8 || (16u32 << p.log_stride) > caps.max_rq_desc_sz {
            return Err(CmdError::BadParam {
                name: Param::LogSrqStride,
                value: p.log_stride.into(),
            });
        }
        let srq = Srq::new(p);
        if (srq.p.pas.len() as u64) < srq.pages() {
            return Err(CmdError::BadParam {
                name: Param::SrqPasEntries,
                value: srq.p.pas.len() as u64,
            });
        }
        if self.next_srqn > Srqn::MAX {
            return Err(CmdError::Exhausted(ObjKind::Srq));
        }
        let s = Srqn::new(self.next_srqn);
        self.next_srqn += 1;
        self.srqs.insert(s, srq);
        Ok(CmdOut::Srq(s))
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
        if let Some(s) = p.srq
            && !self.srqs.contains_key(&s)
        {
            return Err(CmdError::NoSuchObject {
                kind: ObjKind::Srq,
                id: s.get(),
            });
        }
        let own_rq = p.srq.is_none();
        if own_rq && ((1u32 << p.log_rq_size.min(31)) > caps.max_recv_wr || p.log_rq_size > 15) {
            return Err(CmdError::BadParam {
                name: Param::LogRqSize,
                value: p.log_rq_size.into(),
            });
        }
        if own_rq && (p.log_rq_stride > 8 || (16u32 << p.log_rq_stride) > caps.max_rq_desc_sz) {
            return Err(CmdError::BadParam {
                name: Param::LogRqStride,
                value: p.log_rq_stride.into(),
            });
        }
        let rq_bytes = if own_rq {
            (16u64 << p.log_rq_stride) * (1u64 << p.log_rq_size)
        } else {
            0
        };
        let bytes = rq_bytes + 64 * (1u64 << p.log_sq_size);
        if (p.pas.len() as u64) < bytes.div_ceil(doorbell_host::PAGE_SIZE) {
            return Err(CmdError::BadParam {
                name: Param::QpPasEntries,
                value: p.pas.len() as u64,
            });
        }
        let qpn = if p.gsi {
            // The port's GSI QP is QP 1: peers address their MADs to it.
            if p.qp_type != QpType::Ud {
                return Err(CmdError::BadParam {
                    name: Param::QpType,
                    value: u64::from(p.qp_type.code()),
                });
            }
            let one = Qpn::new(GSI_QPN);
            if self.qps.contains_key(&one) {
                return Err(CmdError::Busy {
                    kind: ObjKind::Qp,
                    id: GSI_QPN,
                });
            }
            one
        } else {
            let q = Qpn::new(self.next_qpn);
            self.next_qpn += 1;
            q
        };
        for c in [p.send_cq, p.recv_cq] {
            if let Some(cq) = self.cqs.get_mut(&c) {
                cq.users += 1;
            }
        }
        if let Some(srq) = p.srq.and_then(|s| self.srqs.get_mut(&s)) {
            srq.users += 1;
        }
        self.qps
            .insert(qpn, Qp::new(qpn, p, self.cfg.adaptive_retransmit_floor));
        Ok(CmdOut::Qp(qpn))
    }

    /// Takes one MMIO write the CPU made into UAR page `uar`: an 8-byte
    /// doorbell, a 64-byte BlueFlame chunk, a CQ arm doorbell or an EQ
    /// doorbell.
    pub fn handle_mmio(
        &mut self,
        now: Instant,
        uar: UarIndex,
        offset: u32,
        data: &[u8],
        dma: &mut impl Dma,
    ) {
        self.mmio(now, uar, offset, data, dma);
        self.deliver_events(dma);
    }

    fn mmio(&mut self, now: Instant, uar: UarIndex, offset: u32, data: &[u8], dma: &mut impl Dma) {
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
                            let ev = NicEvent::Completion(Cqn::new(arm.cqn));
                            self.out.events.push_back((ev, now));
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
            UarRegister::Eq { arm } => {
                dma.record_mmio(now, None, data.len());
                if !self.eqs.doorbell(now, uar, data, arm, dma) {
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
        let ctrl = wqe_layout::CtrlSeg::new_unchecked(&asm.bytes[..wqe_layout::field::CTRL_LEN]);
        let qpn = ctrl.qpn();
        dma.record_mmio(now, Some(Qpn::new(qpn)), data.len());
        let need =
            (usize::from(ctrl.ds()) * wqe_layout::DS_LEN).div_ceil(uar::BF_CHUNK) * uar::BF_CHUNK;
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
        let r = send::doorbell(qp, db, bf, &mut ctx);
        settle(qp, r.map(|()| Then::Done), &mut ctx);
        let busy = ctx.busy;
        sync_timers(&mut self.timers, qp);
        let qpn = qp.qpn;
        self.occupy(pu, start, busy, qpn, PuTask::Doorbell);
    }

    /// Takes a doorbell that reached UAR page `uar` as a store the device
    /// did not see (a provider that maps the page itself and writes it with
    /// plain stores), from the doorbell record `db` names. The store is
    /// recorded as one 8-byte MMIO write, the least it can have been;
    /// whether it was a doorbell or a BlueFlame copy is not known
    /// ([`NicCounters::doorbells_by_record`], [`NicCounters::arms_by_record`]).
    pub fn handle_record_doorbell(
        &mut self,
        now: Instant,
        uar: UarIndex,
        db: RecordDoorbell,
        dma: &mut impl Dma,
    ) {
        match db {
            RecordDoorbell::Send(qpn) => self.send_record(now, uar, qpn, dma),
            RecordDoorbell::Arm(cqn) => self.arm_record(now, uar, cqn, dma),
        }
        self.deliver_events(dma);
    }

    /// A send doorbell from `qpn`'s send counter; WQEs come from the ring.
    fn send_record(&mut self, now: Instant, uar: UarIndex, qpn: Qpn, dma: &mut impl Dma) {
        dma.record_mmio(now, Some(qpn), uar::DOORBELL_LEN);
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.out.counters.bad_doorbells += 1;
            return;
        };
        if qp.p.uar != uar {
            self.out.counters.bad_doorbells += 1;
            return;
        }
        let (pu, start) = acquire_pu(&mut self.pus, now);
        let mut ctx = ctx!(self, now, start, dma);
        let r = send::record(qp, &mut ctx);
        settle(qp, r.map(|()| Then::Done), &mut ctx);
        let busy = ctx.busy;
        sync_timers(&mut self.timers, qp);
        let qpn = qp.qpn;
        self.occupy(pu, start, busy, qpn, PuTask::Doorbell);
    }

    /// A CQ arm from `cqn`'s arm word. Several CQs share one arm register
    /// and a repeated arm may leave it unchanged, so the record, which is
    /// per CQ, is what tells them apart.
    fn arm_record(&mut self, now: Instant, uar: UarIndex, cqn: Cqn, dma: &mut impl Dma) {
        dma.record_mmio(now, None, uar::DOORBELL_LEN);
        let mut t = now;
        let word = match self.cqs.get(&cqn) {
            Some(cq) if cq.uar() == uar => cq.read_arm_word(dma, &mut t),
            _ => None,
        };
        let Some(word) = word else {
            self.out.counters.bad_doorbells += 1;
            return;
        };
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&word.to_be_bytes());
        bytes[4..].copy_from_slice(&cqn.get().to_be_bytes());
        let arm = CqArmDoorbell::parse(&bytes);
        self.out.counters.arms_by_record += 1;
        if let Some(cq) = self.cqs.get_mut(&cqn)
            && cq.arm(arm.solicited_only, arm.ci)
        {
            let ev = NicEvent::Completion(cqn);
            self.out.events.push_back((ev, t));
        }
    }

    /// Takes one frame from the fabric; tells whether it reached a QP.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8], dma: &mut impl Dma) -> Received {
        let r = self.frame(now, frame, dma, true, None);
        self.deliver_events(dma);
        r
    }

    /// [`Nic::handle_frame`] for a frame whose ICRC is known to be right,
    /// so it is not computed again: one another NIC of this process
    /// emitted and handed over untouched (no port, no fault relay between;
    /// a link inside one process cannot corrupt a frame), or one whose
    /// ICRC the runtime checked in the frame's own buffer
    /// ([`doorbell_wire::icrc_matches_in_place`]). Everything else is
    /// checked as for any frame.
    pub fn handle_emitted_frame(
        &mut self,
        now: Instant,
        frame: &[u8],
        dma: &mut impl Dma,
    ) -> Received {
        let r = self.frame(now, frame, dma, false, None);
        self.deliver_events(dma);
        r
    }

    /// [`Nic::handle_emitted_frame`] for a train another NIC of this
    /// process built ([`Frame::train`]), or for packets from a port whose
    /// ICRCs the runtime checked: `packets` whole packets back to back in
    /// `bytes`. Each is taken as [`Nic::handle_emitted_frame`]
    /// would have taken it alone, checked and counted, its events
    /// delivered; but the IP and UDP headers it shares with the packet
    /// before are not parsed again
    /// ([`doorbell_wire::parse_roce_emitted_after`]). A packet that does
    /// not parse is dropped and counted, and the next taken; bytes that
    /// hold no whole packet where one should start end the train, counted
    /// as one more drop. Tells whether every packet reached a QP, or why
    /// the last that did not was dropped.
    pub fn handle_emitted_train(
        &mut self,
        now: Instant,
        bytes: &[u8],
        packets: u32,
        dma: &mut impl Dma,
    ) -> Received {
        if self.link_down {
            self.out.counters.link_down_dropped += u64::from(packets.max(1));
            return Received::Dropped("the link is down");
        }
        let mut r = Received::Taken;
        // The last packet parsed (where it is, and its headers), taken once
        // the next is parsed: the timer index is brought up to date after
        // the last packet to its QP, as for a run.
        let mut last: Option<(std::ops::Range<usize>, doorbell_wire::ParsedRoce)> = None;
        let mut at = 0;
        for _ in 0..packets.max(1) {
            let rest = bytes.get(at..).unwrap_or(&[]);
            let Ok(len) = doorbell_wire::packet_len(rest) else {
                self.take_parsed(now, bytes, last.as_ref(), true, dma);
                self.out.counters.rx_dropped += 1;
                return Received::Dropped("a train whose bytes hold no whole packet");
            };
            let here = at..at + len;
            at += len;
            let pkt = &bytes[here.clone()];
            let parsed = match &last {
                Some((prev, p)) => {
                    doorbell_wire::parse_roce_emitted_after(pkt, &bytes[prev.clone()], p)
                }
                None => doorbell_wire::parse_roce_emitted(pkt),
            };
            match parsed {
                Ok(p) => {
                    let same_qp = last
                        .as_ref()
                        .is_some_and(|(_, l)| l.repr.bth.dest_qp == p.repr.bth.dest_qp);
                    r = self
                        .take_parsed(now, bytes, last.as_ref(), !same_qp, dma)
                        .or_before(r);
                    last = Some((here, p));
                }
                Err(_) => {
                    self.take_parsed(now, bytes, last.take().as_ref(), true, dma);
                    r = self.unparsed();
                }
            }
        }
        self.take_parsed(now, bytes, last.as_ref(), true, dma)
            .or_before(r)
    }

    /// [`Nic::handle_emitted_train`] for a frame another NIC of this
    /// process built and whose packets' headers it handed over parsed
    /// ([`Frame::headers`]): `headers`, one for each packet of `bytes`, in
    /// order. Each packet is taken as [`Nic::handle_emitted_frame`] would
    /// have taken it alone, its headers written: checked and counted, its
    /// events delivered; but its headers are not parsed. A packet whose
    /// headers do not fit its opcode, or that does not lie where they say,
    /// is dropped and counted, and the next taken. Tells whether every
    /// packet reached a QP, or why the last that did not was dropped.
    pub fn handle_parsed_frame(
        &mut self,
        now: Instant,
        bytes: &[u8],
        headers: &[PacketHeaders],
        dma: &mut impl Dma,
    ) -> Received {
        if self.link_down {
            self.out.counters.link_down_dropped += headers.len().max(1) as u64;
            return Received::Dropped("the link is down");
        }
        let mut r = Received::Taken;
        // The QP whose timers the index is not yet up to date with: it is
        // brought up to date after the last packet to a QP, as for a train.
        let mut unsynced = None;
        let mut k = 0;
        while let Some(h) = headers.get(k) {
            let qpn = h.repr.bth.dest_qp;
            if unsynced.is_some_and(|q| q != qpn) {
                self.sync_timers_of(unsynced.take());
            }
            // WRITE ONLY packets in a row, taken together where they can be.
            if h.repr.bth.opcode == doorbell_wire::BthOpcode::RcRdmaWriteOnly {
                let n = self.write_only_train(now, bytes, &headers[k..], dma);
                if n > 0 {
                    k += n;
                    unsynced = Some(qpn);
                    continue;
                }
            }
            k += 1;
            let taken = match h.payload_in(bytes) {
                Some(payload) => {
                    if h.repr.ext.deth.is_some() {
                        // A UD receive gives the IP header it came with:
                        // written out, the packet is taken as any other.
                        self.written_out(now, &h.repr, payload, dma)
                    } else {
                        unsynced = Some(qpn);
                        let payload = PayloadIn::Frame(payload);
                        self.packet(now, &h.repr, &[], payload, dma, false)
                    }
                }
                _ => self.unparsed(),
            };
            self.deliver_events(dma);
            r = taken.or_before(r);
        }
        self.sync_timers_of(unsynced);
        r
    }

    /// Brings the timer index up to date with the timers of QP `qpn`, if
    /// there is one.
    fn sync_timers_of(&mut self, qpn: Option<Qpn>) {
        if let Some(qp) = qpn.and_then(|q| self.qps.get_mut(&q)) {
            sync_timers(&mut self.timers, qp);
        }
    }

    /// Takes the packet with headers `repr` and `payload`, written out
    /// first, as [`Nic::handle_emitted_frame`] takes a frame.
    fn written_out(
        &mut self,
        now: Instant,
        repr: &RoceRepr,
        payload: &[u8],
        dma: &mut impl Dma,
    ) -> Received {
        let mut pkt = self.out.spare.take_len(0);
        let r = match repr.emit_to_vec(payload, &mut pkt) {
            Ok(()) => self.frame(now, &pkt, dma, false, None),
            Err(_) => self.unparsed(),
        };
        self.out.spare.give(pkt);
        r
    }

    /// Takes the packet `parsed` of the train `bytes`, if any, bringing
    /// the timer index up to date if `index_timers`; delivers its events.
    /// (Borrowed where it lies: a parsed packet's headers are a hundred
    /// and fifty bytes, and a copy just made is read back through stores
    /// still on their way.)
    fn take_parsed(
        &mut self,
        now: Instant,
        bytes: &[u8],
        parsed: Option<&(std::ops::Range<usize>, doorbell_wire::ParsedRoce)>,
        index_timers: bool,
        dma: &mut impl Dma,
    ) -> Received {
        let Some((at, p)) = parsed else {
            return Received::Taken;
        };
        let r = self.carried(now, &bytes[at.clone()], p, dma, index_timers);
        self.deliver_events(dma);
        r
    }

    /// Takes the packet `pkt`, parsed as `parsed`, whose payload it
    /// carries, as [`Self::packet`] does.
    fn carried(
        &mut self,
        now: Instant,
        pkt: &[u8],
        parsed: &doorbell_wire::ParsedRoce,
        dma: &mut impl Dma,
        index_timers: bool,
    ) -> Received {
        let ip_header = pkt.get(..parsed.repr.ip.header_len()).unwrap_or(&[]);
        let payload = PayloadIn::Frame(pkt.get(parsed.payload.clone()).unwrap_or(&[]));
        self.packet(now, &parsed.repr, ip_header, payload, dma, index_timers)
    }

    /// Counts a frame, or a packet of a train, that does not parse as a
    /// RoCEv2 packet (other than by its ICRC), and says why it was dropped.
    fn unparsed(&mut self) -> Received {
        self.out.counters.rx_dropped += 1;
        Received::Dropped("not a RoCEv2 packet this NIC can parse")
    }

    /// [`Nic::handle_emitted_frame`] for a frame whose payload the NIC that
    /// built it left in its host memory, `src` ([`Frame::unfilled`],
    /// [`NicConfig::leave_payload`]): the payload is copied from there
    /// straight into this NIC's host memory, where the frame's would have
    /// been written. Only an RC WRITE's, SEND's or READ response's payload
    /// may be left; any other such frame, or one whose payload is not where
    /// `unfilled` says, is dropped as malformed.
    pub fn handle_unfilled_frame(
        &mut self,
        now: Instant,
        frame: &[u8],
        unfilled: &Unfilled,
        src: &dyn HostMemory,
        dma: &mut impl Dma,
    ) -> Received {
        let r = self.frame(now, frame, dma, false, Some((unfilled, src)));
        self.deliver_events(dma);
        r
    }

    fn frame(
        &mut self,
        now: Instant,
        frame: &[u8],
        dma: &mut impl Dma,
        check_icrc: bool,
        left: Option<(&Unfilled, &dyn HostMemory)>,
    ) -> Received {
        let segments = left.map_or(1, |(u, _)| u.segments);
        if self.link_down {
            self.out.counters.link_down_dropped += u64::from(segments.max(1));
            return Received::Dropped("the link is down");
        }
        let parsed = if check_icrc {
            doorbell_wire::parse_roce(frame)
        } else {
            doorbell_wire::parse_roce_emitted(frame)
        };
        let parsed = match parsed {
            Ok(p) => p,
            Err(doorbell_wire::Error::BadIcrc) => {
                self.out.counters.rx_icrc_errors += 1;
                return Received::Dropped("bad ICRC");
            }
            Err(_) => return self.unparsed(),
        };
        let Some((u, src)) = left else {
            return self.carried(now, frame, &parsed, dma, true);
        };
        let repr = parsed.repr;
        let ip_header = frame.get(..repr.ip.header_len()).unwrap_or(&[]);
        if !(transmit::may_leave_payload(repr.bth.opcode)
            && parsed.payload.start == u.at as usize
            && parsed.payload.len() == u.len as usize)
        {
            self.out.counters.rx_dropped += 1;
            return Received::Dropped(
                "a payload left in memory that no WRITE, SEND or READ response carries",
            );
        }
        if !u.is_made(&repr) {
            self.out.counters.rx_dropped += 1;
            return Received::Dropped("a run of packets that are no part of one message in a row");
        }
        // Each packet of a run as it would have been taken alone, with the
        // headers `Unfilled::packet_headers` gives it.
        let mut r = Received::Taken;
        let mut from = u.from;
        // The MIDDLEs after the first packet, which a WRITE takes in one go.
        let middles = segments - 1 - u32::from(u.last.is_some());
        let mut k = 0;
        while let Some((each, len)) = u.packet_headers(&repr, k) {
            let payload = PayloadIn::Left {
                src,
                from,
                len: len as usize,
            };
            // After a WRITE's first packet, its MIDDLEs in one go if each
            // would be taken as the expected next.
            let taken =
                if k == 1 && middles > 0 && self.write_run(now, &each, middles, payload, dma) {
                    middles
                } else {
                    // Nothing reads the timer index between a run's packets,
                    // which all go to one QP: it is brought up to date after
                    // the last.
                    r = self.packet(now, &each, ip_header, payload, dma, k + 1 == segments);
                    1
                };
            // (`is_made` checked that the run ends within the address space.)
            from = HostAddr::new(from.get().wrapping_add(u64::from(taken) * u64::from(len)));
            k += taken;
        }
        r
    }

    /// Takes the `n` RDMA WRITE MIDDLE packets of a run that follow one
    /// taken already, the first with the headers `repr` and the payload
    /// `first` (left in the sender's memory, the others' after it), as
    /// taking each alone would: each counted, on a processing unit for as
    /// long, its write counted and timed on the bus; but with one check of
    /// their PSNs and key and one copy of their bytes
    /// ([`Dma::dma_write_run_from`]). False, having taken none, if any
    /// would be taken otherwise ([`recv::write_run_target`]) or the bus
    /// cannot copy them at once.
    fn write_run(
        &mut self,
        now: Instant,
        repr: &RoceRepr,
        n: u32,
        first: PayloadIn<'_>,
        dma: &mut impl Dma,
    ) -> bool {
        let PayloadIn::Left { src, from, len } = first else {
            return false;
        };
        let qpn = repr.bth.dest_qp;
        let Some(to) = self
            .qps
            .get(&qpn)
            .and_then(|qp| recv::write_run_target(qp, repr, n, len, &self.mkeys))
        else {
            return false;
        };
        // Each packet's unit, and its write's time, as alone: a packet's
        // write follows its reception's charge.
        let busy = self.cfg.timing.rx_packet;
        let RunScratch {
            pus, units, times, ..
        } = &mut self.run;
        pus.clone_from(&self.pus);
        units.clear();
        times.clear();
        for _ in 0..n {
            let (pu, start) = acquire_pu(pus, now);
            pus[pu] = start.add(busy);
            units.push((pu, start, busy));
            times.push(start.add(busy));
        }
        let tag = DmaTag::new(qpn, DmaPurpose::Scatter);
        if !dma.dma_write_run_from(times, tag, to, src, from, len) {
            return false;
        }
        let units = std::mem::take(&mut self.run.units);
        for &(pu, start, busy) in &units {
            self.occupy(pu, start, busy, qpn, PuTask::Frame);
        }
        self.run.units = units;
        self.out.counters.rx_packets += u64::from(n);
        if let Some(qp) = self.qps.get_mut(&qpn) {
            recv::took_write_run(qp, n, len);
            sync_timers(&mut self.timers, qp);
        }
        true
    }

    /// Takes the RDMA WRITE ONLY packets at the start of `headers` (of
    /// the frame `bytes`) that [`recv::write_only_targets`] finds their QP
    /// executes whole, as taking each alone would: each counted, on a
    /// processing unit for as long, its write counted and timed on the
    /// bus, its ACK owed; but with one look-up of the QP, one check of what
    /// they share, and their writes made at once
    /// ([`Dma::dma_write_each`]). Answers how many it took: none where
    /// the first would be taken otherwise, or where the bus cannot make
    /// their writes at once.
    fn write_only_train(
        &mut self,
        now: Instant,
        bytes: &[u8],
        headers: &[PacketHeaders],
        dma: &mut impl Dma,
    ) -> usize {
        let qpn = headers[0].repr.bth.dest_qp;
        let Some(qp) = self.qps.get(&qpn) else {
            return 0;
        };
        let RunScratch {
            pus,
            units,
            times,
            to,
        } = &mut self.run;
        recv::write_only_targets(qp, headers, bytes, &self.mkeys, to);
        let n = to.len();
        if n == 0 {
            return 0;
        }
        // Each packet's unit, and its write's time, as alone: its reception
        // is charged, then its write made, then its ACK charged.
        let timing = &self.cfg.timing;
        pus.clone_from(&self.pus);
        units.clear();
        times.clear();
        for h in &headers[..n] {
            let busy = if h.repr.bth.ack_req {
                timing.rx_packet.add(timing.tx_packet)
            } else {
                timing.rx_packet
            };
            let (pu, start) = acquire_pu(pus, now);
            pus[pu] = start.add(busy);
            units.push((pu, start, busy));
            times.push(start.add(timing.rx_packet));
        }
        let tag = DmaTag::new(qpn, DmaPurpose::Scatter);
        if !dma.dma_write_each(times, tag, bytes, to) {
            return 0;
        }
        let units = std::mem::take(&mut self.run.units);
        if let Some(qp) = self.qps.get_mut(&qpn) {
            for (h, &(_, start, busy)) in headers.iter().zip(&units) {
                self.out.counters.rx_packets += 1;
                let mut ctx = ctx!(self, now, start, &mut *dma);
                ctx.charge(ctx.cfg.timing.rx_packet);
                recv::took_write_only(qp, &h.repr.bth, &mut ctx);
                debug_assert_eq!(ctx.busy, busy, "the time the units were given");
            }
        }
        // The units' time once every packet is taken: taking one reads none.
        for &(pu, start, busy) in &units {
            self.occupy(pu, start, busy, qpn, PuTask::Frame);
        }
        self.run.units = units;
        self.deliver_events(dma);
        n
    }

    /// Takes one packet, its headers parsed; brings the timer index up to
    /// date with its QP's timers if `index_timers`.
    fn packet(
        &mut self,
        now: Instant,
        repr: &RoceRepr,
        ip_header: &[u8],
        payload: PayloadIn<'_>,
        dma: &mut impl Dma,
        index_timers: bool,
    ) -> Received {
        let (pu, start) = acquire_pu(&mut self.pus, now);
        let Some(qp) = self.qps.get_mut(&repr.bth.dest_qp) else {
            self.out.counters.rx_dropped += 1;
            return Received::Dropped("no such QP");
        };
        self.out.counters.rx_packets += 1;
        let mut ctx = ctx!(self, now, start, dma);
        ctx.charge(ctx.cfg.timing.rx_packet);
        let r = if repr.bth.opcode.is_response() {
            response::handle_response(qp, repr, payload, &mut ctx)
        } else {
            recv::handle_request(qp, repr, ip_header, payload, &mut ctx).map(|()| Then::Done)
        };
        settle(qp, r, &mut ctx);
        let busy = ctx.busy;
        if index_timers {
            sync_timers(&mut self.timers, qp);
        }
        let qpn = qp.qpn;
        self.occupy(pu, start, busy, qpn, PuTask::Frame);
        Received::Taken
    }

    /// Fires every transport timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant, dma: &mut impl Dma) {
        self.timeout(now, dma);
        self.deliver_events(dma);
    }

    fn timeout(&mut self, now: Instant, dma: &mut impl Dma) {
        // QPs due, in QPN order; firing one QP's timers touches no other's.
        let mut due = std::mem::take(&mut self.due);
        self.timers.due(now, &mut due);
        for &qpn in &due {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let (pu, start) = acquire_pu(&mut self.pus, now);
            let mut ctx = ctx!(self, now, start, &mut *dma);
            let r = response::handle_timeout(qp, &mut ctx);
            settle(qp, r, &mut ctx);
            let busy = ctx.busy;
            sync_timers(&mut self.timers, qp);
            self.occupy(pu, start, busy, qpn, PuTask::Timer);
        }
        self.due = due;
    }

    /// Builds the next burst of request packets of each QP whose send
    /// engine stopped at [`NicConfig::tx_burst`] with more in its window,
    /// and the next burst of READ responses of each QP that owes them
    /// ([`NicConfig::read_burst`]), with the answers waiting behind them;
    /// tells whether there was any. A runtime that sets a burst calls it
    /// once it has taken the frames built so far ([`Nic::poll_transmit`]),
    /// until it answers `false`; without a burst it never has work.
    #[inline]
    pub fn resume_transmit(&mut self, now: Instant, dma: &mut impl Dma) -> bool {
        if self.out.tx_pending.is_empty() && self.out.owing.is_empty() {
            return false;
        }
        self.resume_lists(now, dma);
        true
    }

    /// [`Nic::resume_transmit`] where there is work: out of line, as the
    /// runtime asks after every batch it sends.
    #[inline(never)]
    fn resume_lists(&mut self, now: Instant, dma: &mut impl Dma) {
        // Requests first, then responses.
        self.resume_list(
            now,
            dma,
            |o| &mut o.tx_pending,
            PuTask::Doorbell,
            transmit::send_window,
        );
        self.resume_list(now, dma, |o| &mut o.owing, PuTask::Frame, owed::resume);
        self.deliver_events(dma);
    }

    /// Runs `engine` for each QP of the list `list` picks, as it stood, on
    /// a processing unit, as `task`, and acts on what it returned; those
    /// it puts on the list again wait for the next call (the list keeps
    /// its memory).
    fn resume_list<D: Dma>(
        &mut self,
        now: Instant,
        dma: &mut D,
        list: fn(&mut ctx::Outputs) -> &mut Vec<Qpn>,
        task: PuTask,
        engine: fn(&mut Qp, &mut Ctx<'_, D>) -> fault::Outcome,
    ) {
        let mut qpns = std::mem::take(list(&mut self.out));
        for &qpn in &qpns {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let (pu, start) = acquire_pu(&mut self.pus, now);
            let mut ctx = ctx!(self, now, start, &mut *dma);
            let r = engine(qp, &mut ctx).map(|()| Then::Done);
            settle(qp, r, &mut ctx);
            let busy = ctx.busy;
            sync_timers(&mut self.timers, qp);
            self.occupy(pu, start, busy, qpn, task);
        }
        qpns.clear();
        qpns.append(list(&mut self.out));
        *list(&mut self.out) = qpns;
    }

    /// Whether [`Nic::resume_transmit`] has work: a window stopped at its
    /// burst, or READ responses owed.
    pub fn transmit_pending(&self) -> bool {
        !self.out.tx_pending.is_empty() || !self.out.owing.is_empty()
    }

    /// The next frame for the fabric.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Frame> {
        if self.link_down {
            self.out.counters.link_down_dropped += self.out.queued() as u64;
            self.out.clear();
        }
        self.out.pop()
    }

    /// Every frame for the fabric, in order, to the end of `out`: as
    /// [`Nic::poll_transmit`] until it answers `None`, with each frame
    /// moved once.
    pub fn transmit_into(&mut self, out: &mut Vec<Frame>) {
        if self.link_down {
            self.out.counters.link_down_dropped += self.out.queued() as u64;
            self.out.clear();
        }
        self.out.drain_into(out);
    }

    /// Gives back the buffer of a frame this NIC sent, once the port is done
    /// with it (or of one it took in), for the next frame it builds: with
    /// its frames handed back, a NIC allocates nothing per frame. Buffers
    /// are kept up to a bound; the bytes never matter (each frame is
    /// written whole).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        // (Reuse changes where bytes live, never what a frame says.)
        self.out.spare.give(buf);
    }

    /// Gives back a list of headers ([`Frame::headers`]) that a NIC
    /// handed over with a frame, once it is taken, for the frames this NIC
    /// builds: with its lists handed back, a NIC that hands headers over
    /// allocates nothing per frame. Lists are kept up to a bound.
    /// A NIC that hands none over ([`NicConfig::max_train`] 1) keeps none.
    pub fn recycle_headers(&mut self, list: Vec<PacketHeaders>) {
        if self.cfg.max_train > 1 {
            self.out.header_lists.give(list);
        }
    }

    /// How many more lists [`Nic::recycle_headers`] would keep now: none
    /// for a NIC that hands no headers over.
    #[must_use]
    pub fn header_list_room(&self) -> usize {
        if self.cfg.max_train > 1 {
            self.out.header_lists.room()
        } else {
            0
        }
    }

    /// How many more buffers [`Nic::recycle`] would keep now.
    #[must_use]
    pub fn spare_room(&self) -> usize {
        self.out.spare.room()
    }

    /// How many spare buffers it keeps now.
    #[must_use]
    pub fn spares(&self) -> usize {
        self.out.spare.len()
    }

    /// The next event that no EQ took (none does until host software
    /// creates EQs with [`Command::CreateEq`]; then events arrive as EQEs
    /// in host memory and interrupts from [`Nic::poll_interrupt`]).
    #[must_use]
    pub fn poll_event(&mut self) -> Option<NicEvent> {
        self.eqs.poll_unrouted()
    }

    /// The next MSI-X vector the device raised: an armed EQ got an EQE.
    /// The host's interrupt handler for the vector consumes the EQ and
    /// re-arms it through its doorbell.
    #[must_use]
    pub fn poll_interrupt(&mut self) -> Option<u16> {
        self.eqs.poll_interrupt()
    }

    /// When [`Nic::handle_timeout`] should next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }
}
