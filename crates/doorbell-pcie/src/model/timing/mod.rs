//! The timing engine: [`LinkModel`], its configuration and what it reports.
//! Its bookkeeping lives in submodules: model time and the search over
//! time-ordered lists (`q`), wire reservations and posted-write order
//! (`wire`), and flow-control credits and read tags (`credit`).

mod credit;
mod q;
mod wire;

use doorbell_types::{Duration, Instant};

use crate::LinkConfig;
use crate::model::curve::ReadLatencyCurve;
use crate::model::params::{
    CACHE_LINE_BYTES, Convention, Direction, FC_UNIT_BYTES, LinkParams, ModelError, TlpKind,
    WC_CHUNK_BYTES,
};

pub use credit::Credits;
use credit::{Pool, never_short};
use q::{Q, Q_SHIFT, instant_of, q_of, q_of_d};
use wire::{PostedOrder, Wire};

/// The flow-control credits of both ends and how fast they come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowControl {
    /// What the root port advertises for the device's DMA writes.
    pub host_posted: Credits,
    /// What the root port advertises for the device's read requests (MRd
    /// take header credits only).
    pub host_non_posted: Credits,
    /// What the device advertises for MMIO writes.
    pub device_posted: Credits,
    /// What the device advertises for completions of its reads.
    pub device_completion: Credits,
    /// From a TLP's arrival at the receiver until its credits are back at
    /// the sender.
    pub update_latency: Duration,
}

impl Default for FlowControl {
    /// Assumed values, not fitted to any figure: 127 header credits (the
    /// most an unscaled InitFC carries) and 1024 data credits (16 KiB) for
    /// posted writes either way, 127 non-posted header credits at the host,
    /// infinite completion credits at the device (endpoints advertise
    /// infinite completion credits, PCIe Base Spec §2.6.1), and an update
    /// latency of 200 ns (about the spec's UpdateFC guideline for Gen3 x8,
    /// 203 symbol times of 1 ns). None of them binds the stream figures of
    /// a Gen3 link.
    fn default() -> Self {
        FlowControl {
            host_posted: Credits::new(127, 1024),
            host_non_posted: Credits::new(127, 0),
            device_posted: Credits::new(127, 1024),
            device_completion: Credits::INFINITE,
            update_latency: Duration::from_ns(200),
        }
    }
}

/// Everything [`LinkModel`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkModelConfig {
    /// The link.
    pub link: LinkParams,
    /// The host's read round trip by size.
    pub read_latency: ReadLatencyCurve,
    /// Time a TLP spends between the end of its serialisation and its
    /// arrival at the other end (PHY and data-link pipelines, flight). For
    /// reads it is part of [`read_latency`](Self::read_latency), not added
    /// to it.
    pub one_way_latency: Duration,
    /// Credits and their update latency.
    pub flow_control: FlowControl,
    /// Read requests the device may have outstanding (tags), 1..=768.
    pub read_tags: u16,
}

impl LinkModelConfig {
    /// Most read tags (10-bit tags).
    pub const MAX_READ_TAGS: u16 = 768;

    /// Neugebauer18's host: [`LinkParams::neugebauer18`], the P2 latency
    /// curve, default credits, 256 tags (8-bit extended tags) and no
    /// one-way latency beyond serialisation (assumed: the data set gives
    /// round trips only, which the curve holds).
    pub fn neugebauer18() -> Self {
        LinkModelConfig {
            link: LinkParams::neugebauer18(),
            read_latency: ReadLatencyCurve::neugebauer18(),
            one_way_latency: Duration::ZERO,
            flow_control: FlowControl::default(),
            read_tags: 256,
        }
    }

    /// Checks the link, credits and tags.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.link.validate()?;
        if self.read_tags == 0 || self.read_tags > Self::MAX_READ_TAGS {
            return Err(ModelError::ReadTags {
                tags: self.read_tags,
            });
        }
        let fc = &self.flow_control;
        let mps_units = u64::from(self.link.split.mps_bytes).div_ceil(FC_UNIT_BYTES);
        for (pool, c, needs_data) in [
            ("host_posted", fc.host_posted, true),
            ("host_non_posted", fc.host_non_posted, false),
            ("device_posted", fc.device_posted, true),
            ("device_completion", fc.device_completion, true),
        ] {
            let too_small = needs_data && c.data != 0 && u64::from(c.data) < mps_units;
            if c.header > Credits::MAX_HEADER || c.data > Credits::MAX_DATA || too_small {
                return Err(ModelError::Credits {
                    pool,
                    header: c.header,
                    data: c.data,
                    min_data: mps_units,
                });
            }
        }
        Ok(())
    }
}

impl Default for LinkModelConfig {
    fn default() -> Self {
        Self::neugebauer18()
    }
}

/// When a read's data arrives at the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadTiming {
    /// Arrival of the first completion (the whole TLP).
    pub first_data: Instant,
    /// Arrival of the last completion: the read is done.
    pub last_data: Instant,
    /// MRd TLPs sent.
    pub requests: u32,
    /// CplD TLPs received.
    pub completions: u32,
}

/// One TLP's crossing, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlpTiming {
    /// Its kind.
    pub kind: TlpKind,
    /// Which way it went.
    pub dir: Direction,
    /// First address it carries or asks for.
    pub addr: u64,
    /// Payload (MWr, CplD) or requested (MRd) bytes.
    pub bytes: u64,
    /// Bytes on the wire, overhead included.
    pub wire_bytes: u64,
    /// Start of its serialisation.
    pub start: Instant,
    /// Arrival of its last byte at the receiver.
    pub arrival: Instant,
}

/// What one direction of the link has carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirectionStats {
    /// TLPs.
    pub tlps: u64,
    /// Bytes on the wire, TLP overheads included.
    pub wire_bytes: u64,
    /// Time spent serialising them (divide by elapsed time for
    /// utilisation).
    pub busy: Duration,
}

/// Addresses are taken modulo 2⁴⁸ ([`LinkModel`] docs).
const ADDR_MASK: u64 = (1 << 48) - 1;
/// Longest transfer the timing model splits.
const MAX_LEN: u64 = 1 << 32;

const POOL_HOST_POSTED: usize = 0;
const POOL_HOST_NON_POSTED: usize = 1;
const POOL_DEVICE_POSTED: usize = 2;
const POOL_DEVICE_COMPLETION: usize = 3;
const POOL_TAGS: usize = 4;

/// A PCIe link in time: both directions, credits, tags and the host's read
/// latency.
///
/// # Model
/// - Each direction serialises one TLP at a time at the usable TLP
///   bandwidth ([`LinkParams::usable_gbps`]); a TLP of `n` wire bytes takes
///   `8n / usable` and arrives [`one_way_latency`] after its last byte is
///   sent. A TLP ready at `t` takes the first idle gap at or after `t`,
///   whatever was reserved before it and for when: it may go before TLPs
///   reserved for later times (a doorbell passes completions still waiting
///   at the host; a transaction issued at 10 ns, submitted after one issued
///   at 1 µs, is not held behind it).
/// - A write is split as [`crate::Bus`] splits it (MPS, 4 KiB); a posted
///   TLP does not start before every posted TLP of its direction issued at
///   or before it (by its `now`; equal `now`s in call order) has been sent,
///   and takes the receiver's posted credits, back `update_latency` after
///   it arrives.
/// - A read is split into MRd requests (MRRS, 4 KiB) that each need a free
///   tag and a non-posted credit. The host answers each request a fixed
///   delay `D` after it arrives, with completions split as
///   [`LinkParams::completion_bytes`] and RCB say, which queue on the link
///   towards the device behind MMIO writes issued before the host answers
///   (completions do not pass posted writes). `D` is chosen per read so
///   that, on an idle link, the last completion arrives exactly
///   [`ReadLatencyCurve::at`]`(len)` after the read is issued (never less
///   than the wire time). A tag is free again when its request's last
///   completion arrives.
/// - Credits and tags are held from the start of a TLP's serialisation
///   until they are back, and kept as what is held over time, so a TLP
///   placed at an earlier time than what earlier calls reserved sees the
///   pool as it is at its own start.
/// - With the Kalia convention, DMA (reads, and writes towards the host)
///   covers whole cache lines; MMIO does not.
/// - Only an address's alignment matters: the model works on its low 48
///   bits (reports carry the address as given) and splits at most 4 GiB of
///   a longer transfer.
///
/// # Calls out of time order
/// Calls may come in any order of `now`, as long as no `now` is below the
/// watermark the caller moves with [`retire`](Self::retire); a `now` below
/// it is taken as the watermark. Each TLP is placed at its own time, as
/// above. A call never moves what an earlier call reserved (its times were
/// answered), which leaves two approximations:
/// - *Ordering against answered TLPs.* A posted write or completion waits
///   for the posted writes issued before it that are already reserved. One
///   reserved later cannot hold back what an earlier call placed: a posted
///   write issued after it, or a completion the host answers after it was
///   issued (the latter also with calls in time order, as before).
/// - *Credits and tags are checked at the instant a TLP starts*, against
///   what is held then. A TLP placed before TLPs that earlier calls
///   reserved may hold its credits (or tag) while they start, so a pool can
///   be over-subscribed for a while, by at most the TLPs so placed. The
///   alternative, keeping the pool within bounds over the whole hold, would
///   push an earlier request behind later ones that hold nothing yet at its
///   own time. With calls in time order this does not arise for posted
///   writes, whose TLPs start in the order they are issued.
///
/// [`one_way_latency`]: LinkModelConfig::one_way_latency
///
/// # Driving it
/// Call [`write`](Self::write), [`write_combined`](Self::write_combined)
/// and [`read`](Self::read) with the time each transaction is issued. Each
/// call reserves what its TLPs need and returns when they arrive; the
/// caller schedules its own event then. The `_with` variants also report
/// each TLP. A discrete-event loop calls [`retire`](Self::retire) with its
/// clock whenever the clock moves; the model then forgets what is over by
/// then, and holds only what ends after the watermark.
#[derive(Debug, Clone)]
pub struct LinkModel {
    cfg: LinkModelConfig,
    /// Serialisation time of one wire byte.
    byte_q: Q,
    one_way_q: Q,
    update_q: Q,
    /// How completions are cut: a LinkConfig with MPS = completion size.
    cpl_split: LinkConfig,
    wires: [Wire; 2],
    /// Posted TLPs of each direction by issue time.
    posted: [PostedOrder; 2],
    /// The four credit pools, then the read tags.
    pools: [Pool; 5],
    /// No call is earlier than this.
    watermark: Q,
}

impl LinkModel {
    /// A link in the state of time zero: idle, all credits and tags free.
    pub fn new(cfg: LinkModelConfig) -> Result<Self, ModelError> {
        cfg.validate()?;
        let usable = cfg.link.usable_gbps();
        // ps per byte = 8 bits / (usable Gb/s) × 1000; the one place where a
        // float enters the timing, once.
        let byte_q = (8000.0 / usable * (1u64 << Q_SHIFT) as f64).round() as Q;
        let fc = cfg.flow_control;
        let tags = usize::from(cfg.read_tags);
        // Future reservations are bounded by outstanding reads and posted
        // writes waiting for credits; this is their usual working size.
        let wire_cap = tags + 256;
        // Credits the wire can never run short are not tracked.
        let link = cfg.link;
        let overhead = |k| u64::from(link.tlp_overhead_bytes(k));
        let mps = u64::from(link.split.mps_bytes);
        let extra = q_of_d(cfg.one_way_latency) + q_of_d(fc.update_latency);
        let bounded = |c: Credits, (min, max, units): (u64, u64, u64)| {
            if never_short(c, byte_q, min, max, units, extra) {
                Credits::INFINITE
            } else {
                c
            }
        };
        let posted = (
            overhead(TlpKind::MWr) + 1,
            overhead(TlpKind::MWr) + mps,
            mps / 16,
        );
        let request = (overhead(TlpKind::MRd), overhead(TlpKind::MRd), 0);
        let cpl = u64::from(link.completion_bytes());
        let completion = (
            overhead(TlpKind::CplD) + 1,
            overhead(TlpKind::CplD) + cpl,
            cpl / 16,
        );
        Ok(LinkModel {
            cfg,
            byte_q,
            one_way_q: q_of_d(cfg.one_way_latency),
            update_q: q_of_d(fc.update_latency),
            cpl_split: LinkConfig {
                mps_bytes: cfg.link.completion_bytes(),
                ..cfg.link.split
            },
            wires: [Wire::new(wire_cap), Wire::new(wire_cap)],
            posted: [PostedOrder::new(256), PostedOrder::new(256)],
            pools: [
                Pool::new(bounded(fc.host_posted, posted)),
                Pool::new(bounded(fc.host_non_posted, request)),
                Pool::new(bounded(fc.device_posted, posted)),
                Pool::new(bounded(fc.device_completion, completion)),
                Pool::new(Credits::new(cfg.read_tags, 0)),
            ],
            watermark: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LinkModelConfig {
        &self.cfg
    }

    /// Serialisation time of `bytes` wire bytes (rounded up to a ps).
    pub fn wire_time(&self, bytes: u64) -> Duration {
        let q = self.dur(bytes);
        Duration::from_ps(u64::try_from(q.div_ceil(1 << Q_SHIFT)).unwrap_or(u64::MAX))
    }

    /// End of the last reservation in `dir`.
    pub fn busy_until(&self, dir: Direction) -> Instant {
        instant_of(self.wires[dir.index()].busy_until)
    }

    /// What `dir` has carried so far.
    pub fn stats(&self, dir: Direction) -> DirectionStats {
        let w = &self.wires[dir.index()];
        DirectionStats {
            tlps: w.tlps,
            wire_bytes: w.wire_bytes,
            busy: Duration::from_ps(u64::try_from(w.stats_busy >> Q_SHIFT).unwrap_or(u64::MAX)),
        }
    }

    /// The caller's promise that no later call has a `now` before `before`.
    ///
    /// The model then forgets what is over by `before`: wire reservations
    /// that end by then, the order of posted writes no later TLP waits for,
    /// and credits and tags back by then. It holds nothing else in memory
    /// that grows, so its size is bounded by what ends after the watermark.
    /// A discrete-event loop calls this with its clock each time the clock
    /// moves.
    ///
    /// The watermark only moves forward: a `before` at or below it changes
    /// nothing. A later call with a `now` below the watermark (a broken
    /// promise) is taken as issued at the watermark. Until the first call,
    /// the watermark is time zero and nothing is forgotten.
    pub fn retire(&mut self, before: Instant) {
        let w = q_of(before);
        if w <= self.watermark {
            return;
        }
        self.watermark = w;
        for wire in &mut self.wires {
            wire.prune(w);
        }
        for p in &mut self.posted {
            p.prune(w);
        }
        for p in &mut self.pools {
            p.prune(w);
        }
    }

    /// The watermark [`retire`](Self::retire) last set (time zero before
    /// its first call).
    pub fn watermark(&self) -> Instant {
        instant_of(self.watermark)
    }

    /// How many entries the model keeps (wire intervals, posted-order
    /// records, credit and tag steps): at most a few per TLP that ends, or
    /// whose credits or tag are back, after the watermark. For tests and
    /// diagnostics.
    pub fn retained(&self) -> usize {
        self.wires.iter().map(Wire::retained).sum::<usize>()
            + self.posted.iter().map(PostedOrder::retained).sum::<usize>()
            + self.pools.iter().map(Pool::retained).sum::<usize>()
    }

    fn dur(&self, bytes: u64) -> Q {
        Q::from(bytes) * self.byte_q
    }

    /// `now` in model time, at or after the watermark.
    fn issue_time(&self, now: Instant) -> Q {
        q_of(now).max(self.watermark)
    }

    /// The range the model works on: the low 48 bits of `addr` (only its
    /// alignment matters, and no range can then wrap) and at most 4 GiB,
    /// widened to whole cache lines for DMA with the Kalia convention.
    /// Returns (address, length, high bits to add back when reporting).
    fn range(&self, addr: u64, len: u64, dma: bool) -> (u64, u64, u64) {
        let high = addr & !ADDR_MASK;
        let (addr, len) = (addr & ADDR_MASK, len.min(MAX_LEN));
        if dma && self.cfg.link.convention == Convention::Kalia {
            let start = addr - addr % CACHE_LINE_BYTES;
            let end = (addr + len).next_multiple_of(CACHE_LINE_BYTES);
            (start, end - start, high)
        } else {
            (addr, len, high)
        }
    }

    /// Reserves `dur` (`bytes` on the wire) on wire `d` at the earliest
    /// time at or after `ready` when the wire is idle for `dur` and each
    /// pool of `need` (pool, data credits; at most two) has room at that
    /// instant. Returns (start, end).
    fn place(&mut self, d: usize, ready: Q, dur: Q, bytes: u64, need: &[(usize, u32)]) -> (Q, Q) {
        // One walk forward over the wire's intervals and the pools' steps.
        let mut idx = self.wires[d].first_after(ready);
        let mut cursors = [0; 2];
        for (&(p, _), c) in need.iter().zip(&mut cursors) {
            *c = self.pools[p].next_step(ready);
        }
        let mut t = ready;
        loop {
            t = self.wires[d].idle_from(&mut idx, t, dur);
            let idle = t;
            for (&(p, units), c) in need.iter().zip(&mut cursors) {
                t = self.pools[p].room_from(c, t, units);
            }
            // A pool short when the wire is idle moves `t` to a later
            // step, of which there are finitely many.
            if t == idle {
                return self.wires[d].occupy(t, idx, dur, bytes);
            }
        }
    }

    /// Sends one posted MWr of `bytes` payload in `dir`, issued at
    /// `issued`.
    fn posted(&mut self, issued: Q, dir: Direction, addr: u64, bytes: u64) -> TlpTiming {
        let pool = match dir {
            Direction::ToDevice => POOL_DEVICE_POSTED,
            Direction::ToHost => POOL_HOST_POSTED,
        };
        let d = dir.index();
        let units = u32::try_from(bytes.div_ceil(FC_UNIT_BYTES)).unwrap_or(u32::MAX);
        let ready = issued.max(self.posted[d].end_before(issued));
        let wire_bytes = bytes + u64::from(self.cfg.link.tlp_overhead_bytes(TlpKind::MWr));
        let dur = self.dur(wire_bytes);
        let (start, end) = self.place(d, ready, dur, wire_bytes, &[(pool, units)]);
        let arrival = end + self.one_way_q;
        self.pools[pool].hold(start, arrival + self.update_q, units);
        self.posted[d].record(issued, end);
        TlpTiming {
            kind: TlpKind::MWr,
            dir,
            addr,
            bytes,
            wire_bytes,
            start: instant_of(start),
            arrival: instant_of(arrival),
        }
    }

    /// A write of `len` bytes at `addr` issued at `now`: DMA into host
    /// memory (`ToHost`) or MMIO into the device (`ToDevice`). Returns the
    /// arrival of its last byte; `now` for `len == 0`.
    pub fn write(&mut self, now: Instant, addr: u64, len: u64, dir: Direction) -> Instant {
        self.write_with(now, addr, len, dir, |_| {})
    }

    /// [`write`](Self::write), reporting each TLP to `each`.
    pub fn write_with(
        &mut self,
        now: Instant,
        addr: u64,
        len: u64,
        dir: Direction,
        mut each: impl FnMut(TlpTiming),
    ) -> Instant {
        let now_q = self.issue_time(now);
        if len == 0 {
            return instant_of(now_q);
        }
        let (addr, len, high) = self.range(addr, len, dir == Direction::ToHost);
        let mut last = now_q;
        let split = self.cfg.link.split;
        for (a, n) in split.write_tlps(addr, len) {
            let tlp = self.posted(now_q, dir, a.wrapping_add(high), n);
            last = q_of(tlp.arrival);
            each(tlp);
        }
        instant_of(last)
    }

    /// A write-combined MMIO copy (BlueFlame) of `len` bytes at `addr`
    /// towards the device, issued at `now`: one MWr per 64-byte chunk
    /// (a full 64 B each with the Kalia convention). Returns the arrival of
    /// the last byte.
    pub fn write_combined(&mut self, now: Instant, addr: u64, len: u64) -> Instant {
        self.write_combined_with(now, addr, len, |_| {})
    }

    /// [`write_combined`](Self::write_combined), reporting each TLP.
    pub fn write_combined_with(
        &mut self,
        now: Instant,
        addr: u64,
        len: u64,
        mut each: impl FnMut(TlpTiming),
    ) -> Instant {
        let now_q = self.issue_time(now);
        let (addr, len, high) = self.range(addr, len, false);
        let end = addr + len;
        let mut at = addr;
        let mut last = now_q;
        while at < end {
            let n = (WC_CHUNK_BYTES - at % WC_CHUNK_BYTES).min(end - at);
            let bytes = match self.cfg.link.convention {
                Convention::Kalia => WC_CHUNK_BYTES,
                Convention::PcieModel => n,
            };
            let tlp = self.posted(now_q, Direction::ToDevice, at.wrapping_add(high), bytes);
            last = q_of(tlp.arrival);
            each(tlp);
            at += n;
        }
        instant_of(last)
    }

    /// A DMA read of `len` bytes of host memory at `addr`, issued by the
    /// device at `now`. `len == 0` returns `now` for both times.
    pub fn read(&mut self, now: Instant, addr: u64, len: u64) -> ReadTiming {
        self.read_with(now, addr, len, |_| {})
    }

    /// [`read`](Self::read), reporting each TLP.
    pub fn read_with(
        &mut self,
        now: Instant,
        addr: u64,
        len: u64,
        mut each: impl FnMut(TlpTiming),
    ) -> ReadTiming {
        let now_q = self.issue_time(now);
        let mut timing = ReadTiming {
            first_data: instant_of(now_q),
            last_data: instant_of(now_q),
            requests: 0,
            completions: 0,
        };
        if len == 0 {
            return timing;
        }
        let (addr, len, high) = self.range(addr, len, true);
        let split = self.cfg.link.split;
        let cpl_split = self.cpl_split;
        let link = self.cfg.link;
        let req_oh = u64::from(link.tlp_overhead_bytes(TlpKind::MRd));
        let cpl_oh = u64::from(link.tlp_overhead_bytes(TlpKind::CplD));

        // The host delay that makes an idle-link read take the curve's time.
        // Past the curve's last point nothing was measured: the host answers
        // a longer read after the delay of the longest measured one, and the
        // rest of its time is the link's (serialisation, tags, credits), so
        // a long read streams at what the link carries instead of at the
        // slope of the curve's last segment.
        let probe = self
            .cfg
            .read_latency
            .measured_up_to()
            .map_or(len, |m| len.min(m.max(1)));
        let cpl_wire: u64 = split
            .read_requests(addr, probe)
            .flat_map(|(a, n)| cpl_split.completions(a, n))
            .map(|(_, n)| n + cpl_oh)
            .sum();
        let idle_wire = self.dur(req_oh) + self.dur(cpl_wire) + 2 * self.one_way_q;
        let host_delay = q_of_d(self.cfg.read_latency.at(probe)).saturating_sub(idle_wire);

        let up = Direction::ToHost.index();
        let down = Direction::ToDevice.index();
        let mut ready = now_q;
        let mut first = Q::MAX;
        let mut last = now_q;
        for (ra, rn) in split.read_requests(addr, len) {
            // A tag and a credit, free when the request starts.
            let need = [(POOL_TAGS, 0), (POOL_HOST_NON_POSTED, 0)];
            let (req_start, end) = self.place(up, ready, self.dur(req_oh), req_oh, &need);
            let at_host = end + self.one_way_q;
            self.pools[POOL_HOST_NON_POSTED].hold(req_start, at_host + self.update_q, 0);
            each(TlpTiming {
                kind: TlpKind::MRd,
                dir: Direction::ToHost,
                addr: ra.wrapping_add(high),
                bytes: rn,
                wire_bytes: req_oh,
                start: instant_of(req_start),
                arrival: instant_of(at_host),
            });
            timing.requests += 1;
            ready = end;

            // The host answers at `answered`, behind the MMIO writes issued
            // by then.
            let answered = at_host + host_delay;
            let mut cpl_ready = answered.max(self.posted[down].end_before(answered));
            let mut req_done = cpl_ready;
            for (ca, cn) in cpl_split.completions(ra, rn) {
                let units = u32::try_from(cn.div_ceil(FC_UNIT_BYTES)).unwrap_or(u32::MAX);
                let wire_bytes = cn + cpl_oh;
                let dur = self.dur(wire_bytes);
                let need = [(POOL_DEVICE_COMPLETION, units)];
                let (start, end) = self.place(down, cpl_ready, dur, wire_bytes, &need);
                let arrival = end + self.one_way_q;
                self.pools[POOL_DEVICE_COMPLETION].hold(start, arrival + self.update_q, units);
                each(TlpTiming {
                    kind: TlpKind::CplD,
                    dir: Direction::ToDevice,
                    addr: ca.wrapping_add(high),
                    bytes: cn,
                    wire_bytes,
                    start: instant_of(start),
                    arrival: instant_of(arrival),
                });
                timing.completions += 1;
                cpl_ready = end;
                req_done = req_done.max(arrival);
                first = first.min(arrival);
            }
            last = last.max(req_done);
            self.pools[POOL_TAGS].hold(req_start, req_done, 0);
        }
        timing.first_data = instant_of(first.min(last));
        timing.last_data = instant_of(last);
        timing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::params::{CompletionSplit, Lanes};

    #[test]
    fn bad_configs_are_errors() {
        let mut c = LinkModelConfig::neugebauer18();
        c.read_tags = 0;
        assert!(LinkModel::new(c).is_err());
        let mut c = LinkModelConfig::neugebauer18();
        c.flow_control.host_posted = Credits::new(8, 4);
        assert!(matches!(
            LinkModel::new(c),
            Err(ModelError::Credits {
                pool: "host_posted",
                ..
            })
        ));
        let mut c = LinkModelConfig::neugebauer18();
        c.link.completion = CompletionSplit::Combine(96);
        assert!(LinkModel::new(c).is_err());
        let mut c = LinkModelConfig::neugebauer18();
        c.link.split.mps_bytes = 100;
        assert!(matches!(LinkModel::new(c), Err(ModelError::Link(_))));
    }

    #[test]
    fn credits_the_wire_cannot_exhaust_are_not_tracked() {
        // Default credits, Gen3: at most 69 (x8) or 126 (x16) TLPs hold
        // posted credits at once, 121 (x16) MRd; with the Kalia convention
        // (no data-link overhead) 127 posted TLPs could at x16.
        let x16 = LinkParams {
            lanes: Lanes::X16,
            ..LinkParams::neugebauer18()
        };
        for (link, posted) in [
            (LinkParams::neugebauer18(), false),
            (x16, false),
            (LinkParams::kalia16(), true),
        ] {
            let cfg = LinkModelConfig {
                link,
                ..LinkModelConfig::neugebauer18()
            };
            let l = LinkModel::new(cfg).unwrap();
            let tracked: Vec<bool> = l.pools.iter().map(Pool::tracks).collect();
            assert_eq!(tracked, [posted, false, posted, false, true], "{link:?}");
        }
        let mut cfg = LinkModelConfig::neugebauer18();
        cfg.flow_control.host_posted = Credits::new(64, 0);
        cfg.flow_control.device_posted = Credits::new(0, 64);
        cfg.flow_control.update_latency = Duration::from_ns(2000);
        let l = LinkModel::new(cfg).unwrap();
        let tracked: Vec<bool> = l.pools.iter().map(Pool::tracks).collect();
        assert_eq!(tracked, [true, true, true, false, true]);
    }

    #[test]
    fn zero_length_and_backward_time_do_not_panic() {
        let mut l = LinkModel::new(LinkModelConfig::neugebauer18()).unwrap();
        let t = Instant::from_ps(1_000_000);
        assert_eq!(l.write(t, 0, 0, Direction::ToHost), t);
        let r = l.read(t, 0, 0);
        assert_eq!((r.first_data, r.last_data, r.requests), (t, t, 0));
        // Earlier than the watermark: taken as the watermark.
        l.retire(t);
        let w = l.write(Instant::ZERO, u64::MAX - 3, 8, Direction::ToHost);
        assert!(w > t);
        let r = l.read(Instant::ZERO, u64::MAX - 100, 1000);
        assert!(r.last_data > t);
    }
}
