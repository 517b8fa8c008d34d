//! The timeline of a simulated run (`Workload::run_with` with
//! [`crate::RunOptions::trace`]): what each core, link direction, NIC
//! processing unit, DMA engine and wire direction did, and each work
//! request's steps 0 to 5, as a [`Trace`].
//!
//! The world records what it sees as it happens ([`Timeline`]'s `record`
//! methods); the steps of each work request are found afterwards from
//! those records, by the rules of [`Timeline::into_trace`], so the NIC and
//! the provider need not know that anyone watches.

use std::collections::BTreeMap;

use doorbell_device::{PuTask, PuWork};
use doorbell_pcie::DmaPurpose;
use doorbell_pcie::model::{Direction, TlpKind, TlpTiming};
use doorbell_trace::{Args, Trace, Track};
use doorbell_types::{Duration, Instant, Psn, Qpn};
use doorbell_wire::aeth::AethSyndrome;

/// One `post_send` call.
#[derive(Debug, Clone)]
pub(crate) struct PostObs {
    pub(crate) seq: u64,
    pub(crate) core: usize,
    pub(crate) qpn: Qpn,
    /// The WR ids posted, in order.
    pub(crate) wr_ids: Vec<u64>,
    pub(crate) signalled: Vec<bool>,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    /// The provider's report: the WQEs were built (and the lock taken) by
    /// then.
    pub(crate) ring: Option<RingObs>,
}

/// What the provider reported as it rang.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingObs {
    pub(crate) built: Instant,
    pub(crate) lock_wait: Option<(Instant, Instant)>,
    pub(crate) blueflame: bool,
}

/// A QP whose work requests the timeline follows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpObs {
    pub(crate) local: Qpn,
    pub(crate) remote: Qpn,
    pub(crate) first_psn: Psn,
    /// PSNs each WR takes.
    pub(crate) psns_per_wr: u32,
    /// Whether the responder answers (RC): step 4 ends at its response,
    /// otherwise when the last packet has left the port.
    pub(crate) answered: bool,
    pub(crate) op: &'static str,
    pub(crate) bytes: u32,
}

#[derive(Debug, Clone, Copy)]
struct Store {
    post: Option<u64>,
    nic: usize,
    core: usize,
    left: Instant,
    arrived: Instant,
    len: u8,
}

#[derive(Debug, Clone, Copy)]
struct Dma {
    nic: usize,
    qpn: Option<Qpn>,
    purpose: DmaPurpose,
    write: bool,
    slot: Instant,
    done: Instant,
    len: u64,
}

#[derive(Debug, Clone)]
struct Frame {
    from: usize,
    /// When the NIC had it ready for the port.
    ready: Instant,
    start: Instant,
    done: Instant,
    arrival: Instant,
    name: String,
    dqpn: u32,
    psn: u32,
    len: usize,
    lost: bool,
}

#[derive(Debug, Clone, Copy)]
struct Arrival {
    nic: usize,
    at: Instant,
    dqpn: u32,
    psn: u32,
    /// An ACK, a READ response or an atomic ACK: it acknowledges up to its
    /// PSN.
    acks: bool,
}

#[derive(Debug, Clone)]
struct Poll {
    core: usize,
    start: Instant,
    end: Instant,
    wcs: Vec<(Qpn, u64)>,
}

/// Everything seen during a run, until [`Timeline::into_trace`].
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    pub(crate) host_of_core: Vec<usize>,
    pub(crate) dma_period: Duration,
    pub(crate) qps: Vec<QpObs>,
    pub(crate) posts: Vec<PostObs>,
    stores: Vec<Store>,
    dmas: Vec<Dma>,
    tlps: Vec<(usize, TlpTiming, Instant)>,
    pus: Vec<(usize, PuWork)>,
    frames: Vec<Frame>,
    arrivals: Vec<Arrival>,
    polls: Vec<Poll>,
    recv_posts: Vec<(usize, Instant, Instant, u32)>,
}

const PID_POSTS: u32 = 1;
const PID_WIRE: u32 = 2;
const HOST_NAMES: [&str; 2] = ["host A (requester)", "host B (responder)"];

fn pid_host(h: usize) -> u32 {
    10 + h as u32
}

const TID_TO_DEVICE: u32 = 1000;
const TID_TO_HOST: u32 = 1001;
const TID_DMA: u32 = 1002;
const TID_PU: u32 = 1100;

fn ns(t: Instant) -> f64 {
    t.as_ps() as f64 / 1000.0
}

/// Whether `a` is at or after `b`, in 24-bit PSN order.
fn psn_at_or_after(a: u32, b: u32) -> bool {
    Psn::new(a).diff(Psn::new(b)) >= 0
}

impl Timeline {
    /// A timeline that follows the work requests of `qps`.
    pub(crate) fn following(qps: Vec<QpObs>) -> Self {
        Self {
            qps,
            ..Self::default()
        }
    }

    pub(crate) fn record_store(
        &mut self,
        post: Option<u64>,
        nic: usize,
        core: usize,
        left: Instant,
        arrived: Instant,
        len: u8,
    ) {
        self.stores.push(Store {
            post,
            nic,
            core,
            left,
            arrived,
            len,
        });
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_dma(
        &mut self,
        nic: usize,
        qpn: Option<Qpn>,
        purpose: DmaPurpose,
        write: bool,
        slot: Instant,
        done: Instant,
        len: u64,
    ) {
        self.dmas.push(Dma {
            nic,
            qpn,
            purpose,
            write,
            slot,
            done,
            len,
        });
    }

    pub(crate) fn record_tlp(&mut self, nic: usize, tlp: TlpTiming, serialised: Instant) {
        self.tlps.push((nic, tlp, serialised));
    }

    pub(crate) fn record_pu(&mut self, nic: usize, work: Vec<PuWork>) {
        self.pus.extend(work.into_iter().map(|w| (nic, w)));
    }

    /// A frame NIC `from` had ready at `ready` and sent: on the wire from
    /// `start` to `done`, at the other end at `arrival` unless `lost`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_frame(
        &mut self,
        from: usize,
        ready: Instant,
        start: Instant,
        done: Instant,
        arrival: Instant,
        bytes: &[u8],
        lost: bool,
    ) {
        let Ok(p) = doorbell_wire::parse_roce_emitted(bytes) else {
            return;
        };
        let bth = &p.repr.bth;
        self.frames.push(Frame {
            from,
            ready,
            start,
            done,
            arrival,
            name: format!("{:?} PSN {}", bth.opcode, bth.psn.get()),
            dqpn: bth.dest_qp.get(),
            psn: bth.psn.get(),
            len: bytes.len(),
            lost,
        });
    }

    /// A frame NIC `nic` took in at `at`.
    pub(crate) fn record_arrival(&mut self, nic: usize, at: Instant, bytes: &[u8]) {
        let Ok(p) = doorbell_wire::parse_roce_emitted(bytes) else {
            return;
        };
        let bth = &p.repr.bth;
        let acks = bth.opcode.is_response()
            && p.repr
                .ext
                .aeth
                .is_none_or(|a| matches!(a.syndrome, AethSyndrome::Ack { .. }));
        self.arrivals.push(Arrival {
            nic,
            at,
            dqpn: bth.dest_qp.get(),
            psn: bth.psn.get(),
            acks,
        });
    }

    pub(crate) fn record_poll(
        &mut self,
        core: usize,
        start: Instant,
        end: Instant,
        wcs: Vec<(Qpn, u64)>,
    ) {
        self.polls.push(Poll {
            core,
            start,
            end,
            wcs,
        });
    }

    pub(crate) fn record_recv_posts(&mut self, core: usize, start: Instant, end: Instant, n: u32) {
        if n > 0 {
            self.recv_posts.push((core, start, end, n));
        }
    }

    fn name_tracks(&self, t: &mut Trace) {
        t.name_process(PID_POSTS, "work requests (host A)", 0);
        for (h, name) in HOST_NAMES.iter().enumerate() {
            let pid = pid_host(h);
            t.name_process(pid, name, 1 + h as u32 * 2);
            for (c, _) in self.host_of_core.iter().enumerate().filter(|x| *x.1 == h) {
                t.name_track(
                    Track::new(pid, c as u32),
                    &format!("CPU core {c}"),
                    c as u32,
                );
            }
            t.name_track(Track::new(pid, TID_TO_DEVICE), "PCIe host → NIC", 100);
            t.name_track(Track::new(pid, TID_TO_HOST), "PCIe NIC → host", 101);
            t.name_track(Track::new(pid, TID_DMA), "NIC DMA engine", 102);
            let units = self
                .pus
                .iter()
                .filter(|(n, _)| *n == h)
                .map(|(_, w)| w.unit)
                .max();
            for u in 0..=units.unwrap_or(0) {
                let name = format!("NIC processing unit {u}");
                t.name_track(
                    Track::new(pid, TID_PU + u32::from(u)),
                    &name,
                    110 + u32::from(u),
                );
            }
        }
        t.name_process(PID_WIRE, "wire", 2);
        t.name_track(Track::new(PID_WIRE, 0), "A → B", 0);
        t.name_track(Track::new(PID_WIRE, 1), "B → A", 1);
    }

    fn resources(&self, t: &mut Trace) {
        for s in &self.stores {
            let pid = pid_host(s.nic);
            let what = if s.len <= 8 { "doorbell" } else { "BlueFlame" };
            t.instant(
                Track::new(pid, s.core as u32),
                "mmio",
                format!("{what} store ({} B)", s.len),
                s.left,
                Args::new().with("arrives_ns", ns(s.arrived)),
            );
        }
        // A TLP's serialisation, rounded, may end a picosecond after the
        // next one on its direction starts: a track's slices must not
        // overlap.
        let mut tlps: Vec<&(usize, TlpTiming, Instant)> = self.tlps.iter().collect();
        tlps.sort_by_key(|(nic, t, _)| (*nic, t.dir == Direction::ToHost, t.start));
        for (i, (nic, tlp, end)) in tlps.iter().enumerate() {
            let end = match tlps.get(i + 1) {
                Some((n, next, _)) if n == nic && next.dir == tlp.dir => (*end).min(next.start),
                _ => *end,
            };
            let tid = match tlp.dir {
                Direction::ToDevice => TID_TO_DEVICE,
                Direction::ToHost => TID_TO_HOST,
            };
            let kind = match tlp.kind {
                TlpKind::MWr => "MWr",
                TlpKind::MRd => "MRd",
                TlpKind::CplD => "CplD",
            };
            t.slice(
                Track::new(pid_host(*nic), tid),
                "tlp",
                format!("{kind} {} B", tlp.bytes),
                tlp.start,
                end,
                Args::new()
                    .with("addr", format!("{:#x}", tlp.addr))
                    .with("wire_bytes", tlp.wire_bytes)
                    .with("arrives_ns", ns(tlp.arrival)),
            );
        }
        for d in &self.dmas {
            let mut args = Args::new().with("bytes", d.len).with("done_ns", ns(d.done));
            if let Some(q) = d.qpn {
                args = args.with_qpn("qpn", q.get());
            }
            let way = if d.write { "write" } else { "read" };
            t.slice(
                Track::new(pid_host(d.nic), TID_DMA),
                "dma",
                format!("{:?} {way}", d.purpose),
                d.slot,
                d.slot.add(self.dma_period),
                args,
            );
        }
        for (nic, w) in &self.pus {
            let what = match w.task {
                PuTask::Doorbell => "send queue",
                PuTask::Frame => "frame in",
                PuTask::Timer => "timer",
            };
            t.slice(
                Track::new(pid_host(*nic), TID_PU + u32::from(w.unit)),
                "nic",
                format!("{what} QP {:#x}", w.qpn.get()),
                w.start,
                w.end,
                Args::new().with_qpn("qpn", w.qpn.get()),
            );
        }
        for f in &self.frames {
            t.slice(
                Track::new(PID_WIRE, f.from as u32),
                "wire",
                f.name.clone(),
                f.start,
                f.done,
                Args::new()
                    .with_qpn("dest_qp", f.dqpn)
                    .with("psn", f.psn)
                    .with("bytes", f.len)
                    .with("arrives_ns", ns(f.arrival))
                    .with("lost", f.lost),
            );
        }
        for p in &self.posts {
            let host = self.host_of_core.get(p.core).copied().unwrap_or(0);
            let track = Track::new(pid_host(host), p.core as u32);
            t.slice(
                track,
                "cpu",
                format!("post_send ×{}", p.wr_ids.len()),
                p.start,
                p.end,
                Args::new()
                    .with_qpn("qpn", p.qpn.get())
                    .with("first_wr_id", p.wr_ids.first().copied().unwrap_or(0)),
            );
            if let Some((a, b)) = p.ring.and_then(|r| r.lock_wait)
                && b > a
            {
                t.slice(track, "lock", "bfreg lock wait", a, b, Args::new());
            }
        }
        for p in &self.polls {
            let host = self.host_of_core.get(p.core).copied().unwrap_or(0);
            t.slice(
                Track::new(pid_host(host), p.core as u32),
                "cpu",
                format!("poll_cq → {}", p.wcs.len()),
                p.start,
                p.end,
                Args::new(),
            );
        }
        for &(core, a, b, n) in &self.recv_posts {
            let host = self.host_of_core.get(core).copied().unwrap_or(0);
            t.slice(
                Track::new(pid_host(host), core as u32),
                "cpu",
                format!("post_recv ×{n}"),
                a,
                b,
                Args::new(),
            );
        }
    }

    /// The trace of the run. Each work request of a followed QP is a span
    /// with its steps inside, found by these rules (the NIC handles a
    /// QP's WRs in order):
    /// 0. WQE write: from the `post_send` call to the first MMIO store of
    ///    the call leaving the core (the WQEs built, the lock taken);
    /// 1. doorbell or BlueFlame: until the last store of the call reached
    ///    the NIC;
    /// 2. WQE DMA read: until the first WQE read of the QP issued after
    ///    that arrival is done (none, for a WQE the NIC had by BlueFlame);
    /// 3. payload DMA read: until the last payload read of the QP done
    ///    before the WR's first packet left (none for inline data);
    /// 4. wire and ACK: until the first response that acknowledges the
    ///    WR's last PSN arrived (RC), or until its last packet left the port
    ///    (UC, UD);
    /// 5. CQE DMA write and poll: until the poll that returned the
    ///    completion of the WR, or of the signalled WR after it.
    pub(crate) fn into_trace(self) -> Trace {
        let mut t = Trace::new();
        self.name_tracks(&mut t);
        self.resources(&mut t);
        self.work_requests(&mut t);
        t
    }

    /// Each followed work request's steps, by the rules of
    /// [`Timeline::into_trace`], in the order the QPs were followed and the
    /// WRs posted.
    pub(crate) fn wr_steps(&self) -> Vec<WrSteps> {
        let on_a = |core: usize| self.host_of_core.get(core).copied() == Some(0);
        // First frame out of NIC 0 for each (dest QP, PSN): when the NIC
        // had it ready, and when its last byte left the port.
        let mut first_tx: BTreeMap<(u32, u32), (Instant, Instant)> = BTreeMap::new();
        for f in self.frames.iter().filter(|f| f.from == 0) {
            first_tx.entry((f.dqpn, f.psn)).or_insert((f.ready, f.done));
        }
        let mut polled: BTreeMap<(Qpn, u64), Instant> = BTreeMap::new();
        for p in self.polls.iter().filter(|p| on_a(p.core)) {
            for w in &p.wcs {
                polled.entry(*w).or_insert(p.end);
            }
        }
        let mut calls: BTreeMap<u64, (Instant, Instant)> = BTreeMap::new();
        for st in &self.stores {
            if let Some(seq) = st.post {
                let e = calls.entry(seq).or_insert((st.left, st.arrived));
                e.0 = e.0.min(st.left);
                e.1 = e.1.max(st.arrived);
            }
        }
        let mut out = Vec::new();
        for q in &self.qps {
            let of = |purpose: DmaPurpose, write: bool| {
                let mut v: Vec<&Dma> = self
                    .dmas
                    .iter()
                    .filter(|d| d.nic == 0 && d.qpn == Some(q.local))
                    .filter(|d| d.purpose == purpose && d.write == write)
                    .collect();
                v.sort_by_key(|d| d.slot);
                v
            };
            let wqe_reads = of(DmaPurpose::SendWqe, false);
            let payload_reads = of(DmaPurpose::Payload, false);
            let cqe_writes = of(DmaPurpose::Cqe, true);
            let answers: Vec<&Arrival> = self
                .arrivals
                .iter()
                .filter(|a| a.nic == 0 && a.dqpn == q.local.get() && a.acks)
                .collect();
            let mut answer_at = 0usize;
            let mut wrs: Vec<(&PostObs, usize)> = Vec::new();
            for p in self.posts.iter().filter(|p| p.qpn == q.local) {
                for k in 0..p.wr_ids.len() {
                    wrs.push((p, k));
                }
            }
            // The signalled WR whose completion retires each WR: the next
            // one at or after it.
            let mut completes: Vec<Option<u64>> = vec![None; wrs.len()];
            let mut next = None;
            for (i, (p, k)) in wrs.iter().enumerate().rev() {
                if p.signalled[*k] {
                    next = Some(p.wr_ids[*k]);
                }
                completes[i] = next;
            }
            for (n, (p, k)) in wrs.iter().enumerate() {
                let psn0 = q.first_psn.add(n as u32 * q.psns_per_wr).get();
                let psn_last = q.first_psn.add((n as u32 + 1) * q.psns_per_wr - 1).get();
                let Some(&(tx, _)) = first_tx.get(&(q.remote.get(), psn0)) else {
                    continue;
                };
                let call = calls.get(&p.seq);
                let s0 = p.start;
                let s1 = call
                    .map(|c| c.0)
                    .or(p.ring.map(|r| r.built))
                    .unwrap_or(s0)
                    .max(s0);
                let s2 = call.map_or(s1, |c| c.1).max(s1).min(tx);
                let s3 = wqe_reads
                    .get(wqe_reads.partition_point(|d| d.slot < s2))
                    .filter(|d| d.done <= tx)
                    .map_or(s2, |d| d.done);
                let s4 = payload_reads[payload_reads.partition_point(|d| d.slot < s3)..]
                    .iter()
                    .take_while(|d| d.slot <= tx)
                    .filter(|d| d.done <= tx)
                    .last()
                    .map_or(s3, |d| d.done);
                let s5 = if q.answered {
                    while answer_at < answers.len()
                        && !(answers[answer_at].at >= s4
                            && psn_at_or_after(answers[answer_at].psn, psn_last))
                    {
                        answer_at += 1;
                    }
                    let Some(a) = answers.get(answer_at) else {
                        continue;
                    };
                    a.at
                } else {
                    first_tx
                        .get(&(q.remote.get(), psn_last))
                        .map_or(s4, |&(_, done)| done)
                        .max(s4)
                };
                let done = completes[n]
                    .and_then(|w| polled.get(&(q.local, w)))
                    .copied()
                    .filter(|&d| d >= s5);
                let cqe = done.and_then(|d| {
                    cqe_writes
                        .get(cqe_writes.partition_point(|c| c.slot < s5))
                        .filter(|c| c.done <= d)
                        .map(|c| (c.slot, c.done))
                });
                out.push(WrSteps {
                    qp: *q,
                    wr_id: p.wr_ids[*k],
                    first_psn: psn0,
                    signalled: p.signalled[*k],
                    blueflame: p.ring.is_some_and(|r| r.blueflame),
                    lock_wait: p.ring.and_then(|r| r.lock_wait),
                    bounds: [s0, s1, s2, s3, s4, s5],
                    done,
                    cqe,
                });
            }
        }
        out
    }

    fn work_requests(&self, t: &mut Trace) {
        for (i, w) in self.wr_steps().iter().enumerate() {
            let id = i as u64 + 1;
            let q = &w.qp;
            let [s0, s1, s2, s3, s4, s5] = w.bounds;
            let end = w.done.unwrap_or(s5);
            let mut args = Args::new()
                .with_qpn("qpn", q.local.get())
                .with("wr_id", w.wr_id)
                .with("op", q.op)
                .with("bytes", q.bytes)
                .with("first_psn", w.first_psn)
                .with("signalled", w.signalled)
                .with(
                    "rung_by",
                    if w.blueflame { "BlueFlame" } else { "doorbell" },
                );
            if let Some((a, b)) = w.lock_wait {
                args = args.with("lock_wait_ns", ns(b) - ns(a));
            }
            t.span(
                PID_POSTS,
                "post",
                id,
                format!("WR {}", w.wr_id),
                s0,
                end,
                args,
            );
            let db = if w.blueflame {
                "1 BlueFlame MMIO"
            } else {
                "1 doorbell MMIO"
            };
            let step4 = if q.answered {
                "4 wire and ACK"
            } else {
                "4 wire"
            };
            let steps = [
                ("0 WQE write", s0, s1),
                (db, s1, s2),
                ("2 WQE DMA read", s2, s3),
                ("3 payload DMA read", s3, s4),
                (step4, s4, s5),
            ];
            let here = || {
                Args::new()
                    .with_qpn("qpn", q.local.get())
                    .with("wr_id", w.wr_id)
            };
            for (name, a, b) in steps {
                t.span(PID_POSTS, "post", id, name, a, b, here());
            }
            if let Some(d) = w.done {
                let mut args = here();
                if let Some((a, b)) = w.cqe {
                    args = args
                        .with("cqe_write_ns", ns(a))
                        .with("cqe_visible_ns", ns(b));
                }
                t.span(
                    PID_POSTS,
                    "post",
                    id,
                    "5 CQE DMA write and poll",
                    s5,
                    d,
                    args,
                );
            }
        }
    }
}

/// One work request's steps ([`Timeline::into_trace`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WrSteps {
    pub(crate) qp: QpObs,
    pub(crate) wr_id: u64,
    pub(crate) first_psn: u32,
    pub(crate) signalled: bool,
    pub(crate) blueflame: bool,
    pub(crate) lock_wait: Option<(Instant, Instant)>,
    /// When steps 0 to 5 began.
    pub(crate) bounds: [Instant; 6],
    /// When the poll that returned its completion ended.
    pub(crate) done: Option<Instant>,
    /// The CQE's DMA write: issued, visible.
    pub(crate) cqe: Option<(Instant, Instant)>,
}
