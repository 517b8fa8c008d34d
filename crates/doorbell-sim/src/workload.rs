//! Workloads in perftest's vocabulary, run on the simulated machines, and
//! what they report.

use std::collections::BTreeMap;
use std::sync::Arc;

use doorbell_hif::{AddressVector, DeviceLink, QpAttrs, QpState, QpType};
use doorbell_pcie::PerPost;
use doorbell_types::{Duration, Instant, Psn, Qpn};
use doorbell_verbs::{
    Access, Ah, Context, Cq, ProviderConfig, Qp, QpCaps, QpInitAttr, RcEndpoint, RecvWr,
    RemoteAddr, SendFlags, SendWr, Sge, UdTarget, Wc, WcStatus, WrOpcode,
};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use serde::Serialize;

use crate::options::{Outcome, Progress, RunOptions};
use crate::post_cost::{BuildCosts, PostCosts};
use crate::timeline::{PostObs, QpObs, Timeline};

mod lat;
use crate::profile::{Profile, dur_ns};
use crate::world::{LogLine, World, lock};
pub use lat::{LatencyDist, Test};

/// The operation each work request performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteImm,
    /// RDMA READ.
    Read,
    /// Atomic compare and swap.
    Cas,
    /// Atomic fetch and add.
    Faa,
}

impl Op {
    /// Parses perftest-style names: send, send_imm, write, write_imm, read, cas, faa.
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "send" => Op::Send,
            "send_imm" => Op::SendImm,
            "write" => Op::Write,
            "write_imm" => Op::WriteImm,
            "read" => Op::Read,
            "cas" => Op::Cas,
            "faa" => Op::Faa,
            _ => return None,
        })
    }

    fn needs_recv(self) -> bool {
        matches!(self, Op::Send | Op::SendImm | Op::WriteImm)
    }

    fn is_atomic(self) -> bool {
        matches!(self, Op::Cas | Op::Faa)
    }

    /// perftest's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::SendImm => "send_imm",
            Op::Write => "write",
            Op::WriteImm => "write_imm",
            Op::Read => "read",
            Op::Cas => "cas",
            Op::Faa => "faa",
        }
    }
}

/// A workload (perftest's options).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// RC or UD.
    #[serde(serialize_with = "ser_qp_type")]
    pub qp_type: QpType,
    /// Operation.
    pub op: Op,
    /// Message size in bytes (8 for atomics).
    pub size: u32,
    /// Queue pairs in all.
    pub qps: u32,
    /// Posting threads.
    pub threads: u32,
    /// Each posting thread's QPs are made in a parent domain with a thread
    /// domain of that thread, so they ring a dynamic register of their
    /// own with no lock (`ibv_alloc_td`); otherwise they share the static
    /// bfregs by the kernel's policy.
    pub thread_domains: bool,
    /// WRs per post_send (perftest -l).
    pub postlist: u32,
    /// Largest message sent inline (perftest -I).
    pub inline_threshold: u32,
    /// One WR in this many is signalled (perftest -Q).
    pub signal_every: u32,
    /// BlueFlame allowed.
    pub blueflame: bool,
    /// Completion events (perftest -e): a thread with nothing to post
    /// arms its CQ and blocks until the event instead of polling, so each
    /// wait costs an EQE write, an MSI-X interrupt, the kernel's handler
    /// and a wake-up.
    pub events: bool,
    /// WRs per QP.
    pub iters: u64,
    /// Send queue depth per QP (perftest -t).
    pub tx_depth: u32,
    /// Path MTU.
    pub mtu: u32,
    /// Seed of the run's random choices.
    pub seed: u64,
    /// perftest's test type: bandwidth (the queue kept full) or latency
    /// (one message outstanding).
    pub test: Test,
}

fn ser_qp_type<S: serde::Serializer>(t: &QpType, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match t {
        QpType::Rc => "rc",
        QpType::Uc => "uc",
        QpType::Ud => "ud",
    })
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            qp_type: QpType::Rc,
            op: Op::Write,
            size: 8,
            qps: 1,
            threads: 1,
            thread_domains: false,
            postlist: 1,
            inline_threshold: 0,
            signal_every: 1,
            blueflame: true,
            events: false,
            iters: 1000,
            tx_depth: 128,
            mtu: 1024,
            seed: 1,
            test: Test::Bw,
        }
    }
}

/// Why a workload cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The workload's options do not fit together.
    #[error("{0}")]
    BadWorkload(String),
    /// Setting up the verbs objects failed.
    #[error("setup failed: {0}")]
    Setup(#[from] doorbell_verbs::VerbsError),
    /// A work request completed with an error.
    #[error("a work request completed with {0:?}")]
    Completion(WcStatus),
    /// The run stopped making progress.
    #[error("the simulation stalled at {0} ns with work outstanding")]
    Stalled(u64),
}

/// Median and tail latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Median, ns.
    pub p50: f64,
    /// 99th percentile, ns.
    pub p99: f64,
}

/// How busy each resource was over the run, 0..=1.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Utilisation {
    /// Requester link, host → device.
    pub pcie_to_device: f64,
    /// Requester link, device → host.
    pub pcie_to_host: f64,
    /// Requester NIC's processing units.
    pub nic_processing_units: f64,
    /// Each posting core.
    pub cores: Vec<f64>,
}

/// One post's critical path, by the seed's steps, in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Steps {
    /// 0: building the WQE and the barriers before the doorbell.
    pub wqe_write: f64,
    /// 1: the doorbell (or BlueFlame) MMIO until the NIC has it.
    pub doorbell: f64,
    /// 2: the NIC's DMA read of the WQE.
    pub wqe_dma_read: f64,
    /// 3: the DMA read of the payload.
    pub payload_dma_read: f64,
    /// 4: the wire and the response (ACK, READ data, atomic result).
    pub wire_and_ack: f64,
    /// 5: the CQE's DMA write until the poller sees it.
    pub cqe_dma_write: f64,
    /// Sum of the steps: one post's latency.
    pub total: f64,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Profile name.
    pub profile: String,
    /// The workload.
    pub workload: Workload,
    /// Completed operations per second, millions.
    pub msg_rate_mops: f64,
    /// Payload bandwidth, Gb/s.
    pub bandwidth_gbps: f64,
    /// Post-to-completion latency of signalled WRs; with `--test lat`,
    /// the latency of each iteration (half the round trip of a SEND or
    /// WRITE ping-pong).
    pub latency_ns: Latency,
    /// With `--test lat`, the distribution as perftest prints it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyDist>,
    /// Per-post crossings.
    pub per_post: PerPost,
    /// Utilisation.
    pub utilisation: Utilisation,
    /// One post's critical path.
    pub steps: Steps,
    /// Simulated time, ns.
    pub simulated_ns: f64,
    /// Events processed.
    pub events: u64,
    /// TLPs simulated on both hosts' links, both directions.
    pub tlps: u64,
    /// Posts (post_send calls that rang) that took a shared bfreg's lock.
    pub locked_posts: u64,
    /// Time the posting threads waited for bfreg locks held by others, ns.
    pub lock_wait_ns: f64,
}

/// READs and atomics a QP keeps outstanding (Connect-IB's and ConnectX-4's
/// limit, as perftest sets it).
const RD_ATOMIC: u8 = 16;

struct ClientQp {
    qp: Qp,
    sge: Sge,
    remote: RemoteAddr,
    ud: Option<UdTarget>,
    posted: u64,
    retired: u64,
    signals: BTreeMap<u64, (u64, Instant)>,
}

struct Thread {
    core: usize,
    host: usize,
    kind: Kind,
}

enum Kind {
    Client {
        qps: Vec<ClientQp>,
        /// Index in `qps` of each QP, to find a completion's QP without a
        /// scan (a post's cost must not grow with the number of QPs).
        by_qpn: BTreeMap<Qpn, usize>,
        cq: Cq,
        next: usize,
    },
    Server {
        qps: Vec<(Qp, Sge)>,
        by_qpn: BTreeMap<Qpn, usize>,
        cq: Cq,
    },
    /// A side of a latency test.
    Ping(Box<lat::PingPong>),
}

fn index_by_qpn<'a>(qpns: impl Iterator<Item = &'a Qp>) -> BTreeMap<Qpn, usize> {
    qpns.enumerate().map(|(i, q)| (q.qpn(), i)).collect()
}

struct Costs {
    poll_empty: Duration,
    poll_cqe: Duration,
    recv_post: Duration,
}

/// A run in progress.
struct Run {
    w: Workload,
    world: World,
    threads: Vec<Thread>,
    costs: Costs,
    latencies: Vec<Duration>,
    first_post: Option<Instant>,
    last_done: Instant,
    done_ops: u64,
    target_ops: u64,
    /// Told `(done, of)` operations as the run goes.
    progress: Option<Progress>,
    error: Option<WcStatus>,
    /// The requester's post observer, which counts lock waits.
    posts: Arc<PostCosts>,
    /// The client QPs, as a timeline follows them.
    followed: Vec<QpObs>,
    /// `post_send` calls made.
    calls: u64,
    _keep: Vec<Box<dyn std::any::Any>>,
}

fn blank_wc() -> Wc {
    Wc::default()
}

/// Polls `cq` into `wc` on `core`: charges the poll's cost to the core and
/// records the poll on the timeline, if one is kept. Returns the
/// completions taken and the core's time after the poll.
fn poll_charged(
    world: &mut World,
    costs: &Costs,
    core: usize,
    cq: &Cq,
    wc: &mut [Wc],
) -> (usize, Instant) {
    let n = cq.poll(wc).unwrap_or(0);
    let cost = if n == 0 {
        costs.poll_empty
    } else {
        costs.poll_cqe.mul(n as u32)
    };
    let (from, to) = {
        let mut cpu = lock(&world.cpu);
        let from = cpu.t[core];
        cpu.charge(core, cost);
        (from, cpu.t[core])
    };
    if let Some(tl) = &mut world.timeline
        && n > 0
    {
        let wcs = wc[..n].iter().map(|w| (w.qp_num, w.wr_id)).collect();
        tl.record_poll(core, from, to, wcs);
    }
    (n, to)
}

/// Records `post_send` call `seq` of `wrs` on `qpn`, which started at
/// `start` on `core`, if a timeline is recorded.
fn note_post(
    world: &mut World,
    posts: &PostCosts,
    seq: u64,
    core: usize,
    qpn: Qpn,
    wrs: &[SendWr<'_>],
    start: Instant,
) {
    let Some(tl) = &mut world.timeline else {
        return;
    };
    let end = {
        let mut cpu = lock(&world.cpu);
        cpu.post = None;
        cpu.t[core]
    };
    let ring = lock(&posts.rings).as_mut().and_then(Vec::pop);
    tl.posts.push(PostObs {
        seq,
        core,
        qpn,
        wr_ids: wrs.iter().map(|w| w.wr_id).collect(),
        signalled: wrs
            .iter()
            .map(|w| w.flags.contains(SendFlags::SIGNALED))
            .collect(),
        start,
        end,
        ring,
    });
}

impl Workload {
    /// Checks that the options fit together.
    pub fn validate(&self, profile: &Profile) -> Result<(), SimError> {
        let bad = |s: &str| Err(SimError::BadWorkload(s.to_string()));
        if self.threads == 0 || self.qps == 0 || self.qps < self.threads {
            return bad("need at least one QP per thread (--qps >= --threads >= 1)");
        }
        if self.postlist == 0 || self.signal_every == 0 || self.iters == 0 {
            return bad("--postlist, --signal-every and --iters must be at least 1");
        }
        if self.tx_depth < self.postlist || self.tx_depth < self.signal_every {
            return bad("the send queue (tx depth) must hold a postlist and a signalling period");
        }
        if self.qp_type == QpType::Ud && !matches!(self.op, Op::Send | Op::SendImm) {
            return bad("UD QPs only SEND (--op send or send_imm)");
        }
        if self.qp_type == QpType::Uc && (self.op == Op::Read || self.op.is_atomic()) {
            return bad("UC QPs have no READ and no atomics");
        }
        if self.qp_type == QpType::Ud && self.size > self.mtu {
            return bad("a UD message must fit the MTU");
        }
        if self.op.is_atomic() && self.size != 8 {
            return bad("atomics are 8 bytes (--size 8)");
        }
        if !matches!(self.mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return bad("--mtu is one of 256, 512, 1024, 2048, 4096");
        }
        if self.threads > 1024 || self.qps > 4096 {
            return bad("at most 1024 threads and 4096 QPs");
        }
        if self.test == Test::Lat {
            if self.qps != 1 || self.threads != 1 {
                return bad("the latency test runs one QP on one thread (--qps 1 --threads 1)");
            }
            if self.postlist != 1 || self.signal_every != 1 {
                return bad(
                    "the latency test posts one signalled WR at a time (--postlist 1 --signal-every 1)",
                );
            }
            if matches!(self.op, Op::SendImm | Op::WriteImm) {
                return bad("the latency test runs send, write, read, cas or faa");
            }
            if self.op == Op::Write && self.size == 0 {
                return bad("a WRITE latency test needs at least one byte (--size 1 or more)");
            }
            if self.events {
                return bad("the latency test polls (no -e)");
            }
        }
        let _ = profile;
        Ok(())
    }

    /// Runs the workload on `profile` and measures it.
    pub fn run(&self, profile: &Profile) -> Result<Report, SimError> {
        Ok(self.run_with(profile, RunOptions::default())?.report)
    }

    /// [`Workload::run`] with `opts`: a capture of the measured run's
    /// frames, a progress callback, a timeline.
    pub fn run_with(&self, profile: &Profile, opts: RunOptions) -> Result<Outcome, SimError> {
        let RunOptions {
            capture,
            progress,
            trace,
        } = opts;
        self.validate(profile)?;
        let steps = {
            let probe = Workload {
                qps: 1,
                threads: 1,
                postlist: 1,
                signal_every: 1,
                iters: 1,
                test: Test::Bw,
                ..self.clone()
            };
            let mut run = Run::setup(&probe, profile)?;
            let t = Timeline::following(std::mem::take(&mut run.followed));
            run.world.start_timeline(t);
            run.go()?;
            run.steps()
        };
        let mut run = Run::setup(self, profile)?;
        run.world.capture = capture;
        run.progress = progress;
        if trace {
            let t = Timeline::following(std::mem::take(&mut run.followed));
            run.world.start_timeline(t);
            *lock(&run.posts.rings) = Some(Vec::new());
        }
        let before = (run.world.counters(0), run.world.link_bytes(0));
        run.go()?;
        let report = run.report(profile, before, steps);
        // What the NICs did last is still in their records.
        run.world.drain();
        let trace = run.world.timeline.take().map(Timeline::into_trace);
        Ok(Outcome { report, trace })
    }

    /// Runs the workload with an event log, for determinism checks.
    pub fn event_log(&self, profile: &Profile) -> Result<Vec<LogLine>, SimError> {
        self.validate(profile)?;
        let mut run = Run::setup(self, profile)?;
        run.world.log = Some(Vec::new());
        run.go()?;
        Ok(run.world.log.take().unwrap_or_default())
    }
}

impl Run {
    fn setup(w: &Workload, profile: &Profile) -> Result<Self, SimError> {
        let mut rng = ChaCha8Rng::seed_from_u64(w.seed);
        let threads = w.threads as usize;
        let client_cores = threads.min(profile.cpu.cores as usize);
        let lat = w.test == Test::Lat;
        let server_threads = if lat {
            usize::from(w.op.is_ping_pong())
        } else if w.op.needs_recv() {
            threads
        } else {
            0
        };
        let server_cores = server_threads.clamp(1, profile.cpu.cores as usize);
        let mut world = World::new(
            profile,
            [client_cores, server_cores],
            threads + server_threads,
        );
        let provider = ProviderConfig {
            shut_up_bf: !w.blueflame,
            ..ProviderConfig::default()
        };
        let ca = Context::with_config(
            world.links[0].clone() as Arc<dyn DeviceLink>,
            provider.clone(),
        )?;
        let cb = Context::with_config(world.links[1].clone() as Arc<dyn DeviceLink>, provider)?;
        let pa = ca.alloc_pd()?;
        let pb = cb.alloc_pd()?;
        let access = Access(
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        );
        let buf = if lat {
            2 * lat::half(w.size) as usize + 64
        } else {
            (w.size as usize).max(64) + 64
        };
        let mr_a = pa.reg_mr(buf, access)?;
        let mr_b = pb.reg_mr(buf, access)?;
        let depth = w.tx_depth;
        let cqe = (depth * (w.qps / w.threads + 1))
            .next_power_of_two()
            .max(64);
        let cap = QpCaps {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: w.inline_threshold.min(512),
        };
        let mut threads_v = Vec::new();
        let mut server_qps: Vec<Vec<(Qp, Sge)>> = (0..server_threads).map(|_| Vec::new()).collect();
        let server_cqs: Vec<Cq> = (0..threads)
            .map(|_| cb.create_cq(cqe))
            .collect::<Result<_, _>>()?;
        let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
        let mut followed = Vec::new();
        for t in 0..threads {
            let cq = ca.create_cq(cqe)?;
            // The thread's own parent domains, one per host.
            let (pa, pb) = if w.thread_domains {
                (
                    pa.parent_domain(Some(&ca.alloc_td()?))?,
                    pb.parent_domain(Some(&cb.alloc_td()?))?,
                )
            } else {
                (pa.clone(), pb.clone())
            };
            let mut qps = Vec::new();
            for k in 0..w.qps as usize {
                if k % threads != t {
                    continue;
                }
                let attr = |cq: &Cq| QpInitAttr {
                    qp_type: w.qp_type,
                    send_cq: cq.clone(),
                    recv_cq: cq.clone(),
                    cap,
                    sq_sig_all: false,
                    srq: None,
                };
                let qa = pa.create_qp(&attr(&cq))?;
                let qb = pb.create_qp(&attr(&server_cqs[t]))?;
                let psn_a = Psn::new(rng.next_u32());
                let psn_b = Psn::new(rng.next_u32());
                let mut ud = None;
                match w.qp_type {
                    QpType::Rc => {
                        let ea = RcEndpoint {
                            gid: ca.gid(),
                            qpn: qa.qpn(),
                            psn: psn_a,
                        };
                        let eb = RcEndpoint {
                            gid: cb.gid(),
                            qpn: qb.qpn(),
                            psn: psn_b,
                        };
                        qa.connect_rc_with(&ea, &eb, w.mtu, RD_ATOMIC)?;
                        qb.connect_rc_with(&eb, &ea, w.mtu, RD_ATOMIC)?;
                    }
                    QpType::Uc => {
                        let ea = RcEndpoint {
                            gid: ca.gid(),
                            qpn: qa.qpn(),
                            psn: psn_a,
                        };
                        let eb = RcEndpoint {
                            gid: cb.gid(),
                            qpn: qb.qpn(),
                            psn: psn_b,
                        };
                        qa.connect_uc(&ea, &eb, w.mtu)?;
                        qb.connect_uc(&eb, &ea, w.mtu)?;
                    }
                    QpType::Ud => {
                        for (q, psn) in [(&qa, psn_a), (&qb, psn_b)] {
                            q.modify(
                                QpState::Init,
                                &QpAttrs {
                                    pkey_index: Some(0),
                                    port: Some(1),
                                    qkey: Some(0x1111),
                                    ..Default::default()
                                },
                            )?;
                            q.modify(QpState::Rtr, &QpAttrs::default())?;
                            q.modify(
                                QpState::Rts,
                                &QpAttrs {
                                    sq_psn: Some(psn),
                                    ..Default::default()
                                },
                            )?;
                        }
                        let av = AddressVector {
                            dgid: cb.gid(),
                            sgid_index: 0,
                            hop_limit: 64,
                            traffic_class: 0,
                            sl: 0,
                        };
                        ud = Some(UdTarget {
                            ah: Ah { av },
                            remote_qpn: qb.qpn(),
                            remote_qkey: 0x1111,
                        });
                    }
                }
                let len = if w.op.is_atomic() { 8 } else { w.size };
                let packets = if w.op.is_atomic() || w.qp_type == QpType::Ud {
                    1
                } else {
                    w.size.div_ceil(w.mtu).max(1)
                };
                followed.push(QpObs {
                    local: qa.qpn(),
                    remote: qb.qpn(),
                    first_psn: psn_a,
                    psns_per_wr: packets,
                    answered: w.qp_type == QpType::Rc,
                    op: w.op.name(),
                    bytes: len,
                });
                let sge = mr_a.sge(0, len)?;
                let remote_off = if w.op.is_atomic() {
                    64
                } else if lat && w.op.is_ping_pong() {
                    lat::half(w.size)
                } else {
                    0
                };
                let remote = RemoteAddr {
                    addr: mr_b.addr() + remote_off,
                    rkey: mr_b.rkey(),
                };
                if w.op.needs_recv() || (lat && w.op.is_ping_pong()) {
                    let rlen = if w.qp_type == QpType::Ud {
                        w.size + 40
                    } else {
                        w.size
                    };
                    server_qps[t].push((qb, mr_b.sge(0, rlen.max(1))?));
                } else {
                    keep.push(Box::new(qb));
                }
                qps.push(ClientQp {
                    qp: qa,
                    sge,
                    remote,
                    ud,
                    posted: 0,
                    retired: 0,
                    signals: BTreeMap::new(),
                });
            }
            threads_v.push(Thread {
                core: t % client_cores,
                host: 0,
                kind: Kind::Client {
                    by_qpn: index_by_qpn(qps.iter().map(|q| &q.qp)),
                    qps,
                    cq,
                    next: 0,
                },
            });
        }
        for (t, (qps, cq)) in server_qps
            .into_iter()
            .zip(server_cqs.iter().cloned())
            .enumerate()
        {
            threads_v.push(Thread {
                core: client_cores + t % server_cores,
                host: 1,
                kind: Kind::Server {
                    by_qpn: index_by_qpn(qps.iter().map(|(q, _)| q)),
                    qps,
                    cq,
                },
            });
        }
        let c = &profile.cpu;
        let posts = Arc::new(PostCosts {
            cpu: world.cpu.clone(),
            costs: BuildCosts {
                ctrl: dur_ns(c.wqe_ctrl_ns),
                segment: dur_ns(c.wqe_segment_ns),
                inline64: dur_ns(c.inline_per_64b_ns),
                barrier: dur_ns(c.barrier_ns),
                lock: dur_ns(c.lock_ns),
            },
            lock_free: Default::default(),
            locked: Default::default(),
            rings: Default::default(),
        });
        ca.set_post_observer(Some(posts.clone()));
        if lat {
            // The server posts too: its WQEs cost its core the same.
            let server = PostCosts {
                cpu: world.cpu.clone(),
                costs: posts.costs,
                lock_free: Default::default(),
                locked: Default::default(),
                rings: Default::default(),
            };
            cb.set_post_observer(Some(Arc::new(server)));
            let av_a = AddressVector {
                dgid: ca.gid(),
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
            };
            lat::pair(w, &mut threads_v, &mr_a, &mr_b, av_a)?;
        }
        let costs = Costs {
            poll_empty: dur_ns(c.poll_empty_ns),
            poll_cqe: dur_ns(c.poll_cqe_ns),
            recv_post: dur_ns(c.recv_post_ns),
        };
        // Setup is not timed: start every core at zero, with the seeded
        // jitter of a thread that starts a little later than the others.
        world.drain();
        while world.step().is_some() {}
        let start = world.clock.now();
        {
            let mut cpu = lock(&world.cpu);
            for t in cpu.t.iter_mut() {
                *t = start;
            }
            for b in cpu.busy.iter_mut() {
                *b = Duration::ZERO;
            }
        }
        for (i, th) in threads_v.iter().enumerate() {
            let jitter = if th.host == 0 && i > 0 {
                Duration::from_ps(u64::from(rng.next_u32() % 100_000))
            } else {
                Duration::ZERO
            };
            world
                .q
                .push(start.add(jitter), crate::world::Ev::Wake { thread: i });
        }
        keep.push(Box::new((ca, cb, pa, pb, mr_a, mr_b, server_cqs)));
        Ok(Run {
            target_ops: w.iters * u64::from(w.qps),
            progress: None,
            w: w.clone(),
            world,
            threads: threads_v,
            costs,
            latencies: Vec::new(),
            first_post: None,
            last_done: start,
            done_ops: 0,
            error: None,
            posts,
            followed,
            calls: 0,
            _keep: keep,
        })
    }

    fn go(&mut self) -> Result<(), SimError> {
        let mut steps = 0u32;
        while self.done_ops < self.target_ops {
            if let Some(e) = self.error {
                return Err(SimError::Completion(e));
            }
            steps = steps.wrapping_add(1);
            if steps.is_multiple_of(4096)
                && let Some(p) = &self.progress
            {
                p(self.done_ops, self.target_ops);
            }
            let Some((at, thread)) = self.world.step() else {
                return Err(SimError::Stalled(self.world.clock.now().as_ps() / 1000));
            };
            if let Some(t) = thread {
                self.run_thread(t, at);
                self.world.drain();
            }
        }
        Ok(())
    }

    fn run_thread(&mut self, t: usize, now: Instant) {
        let core = self.threads[t].core;
        {
            let mut cpu = lock(&self.world.cpu);
            cpu.current = core;
            cpu.t[core] = cpu.t[core].max(now);
        }
        match self.threads[t].kind {
            Kind::Server { .. } => self.run_server(t, core),
            Kind::Ping(_) => self.run_ping(t, core),
            Kind::Client { .. } => self.run_client(t, core),
        }
    }

    fn core_t(&self, core: usize) -> Instant {
        lock(&self.world.cpu).t[core]
    }

    /// Gives other events their turn when this core has run ahead of them.
    fn yield_if_ahead(&mut self, t: usize, core: usize) -> bool {
        let ct = self.core_t(core);
        if self.world.q.peek_time().is_some_and(|next| ct > next) {
            self.world.q.push(ct, crate::world::Ev::Wake { thread: t });
            return true;
        }
        false
    }

    fn run_server(&mut self, t: usize, core: usize) {
        let Kind::Server { qps, by_qpn, cq } = &mut self.threads[t].kind else {
            return;
        };
        let mut wc = [blank_wc(); 16];
        // The first run fills every receive queue.
        for (qp, sge) in qps.iter() {
            let room = qp.caps().max_recv_wr;
            let mut posted = 0;
            while posted < room
                && qp
                    .post_recv(&[RecvWr {
                        wr_id: 0,
                        sg_list: std::slice::from_ref(sge),
                    }])
                    .is_ok()
            {
                posted += 1;
            }
            let mut cpu = lock(&self.world.cpu);
            let from = cpu.t[core];
            cpu.charge(core, self.costs.recv_post.mul(posted));
            let to = cpu.t[core];
            drop(cpu);
            if let Some(tl) = &mut self.world.timeline {
                tl.record_recv_posts(core, from, to, posted);
            }
        }
        loop {
            let (n, _) = poll_charged(&mut self.world, &self.costs, core, cq, &mut wc);
            for w in &wc[..n] {
                if w.status != WcStatus::Success && w.status != WcStatus::WrFlushErr {
                    self.error = Some(w.status);
                }
                if let Some((qp, sge)) = by_qpn.get(&w.qp_num).and_then(|&i| qps.get(i)) {
                    let _ = qp.post_recv(&[RecvWr {
                        wr_id: 0,
                        sg_list: std::slice::from_ref(sge),
                    }]);
                    lock(&self.world.cpu).charge(core, self.costs.recv_post);
                }
            }
            if n == 0 {
                if self.w.events {
                    self.block_on_event(t, 1);
                } else {
                    let (ring, len) = cq.ring();
                    self.world.watch(t, 1, ring.get(), len);
                }
                return;
            }
            let ct = lock(&self.world.cpu).t[core];
            if self.world.q.peek_time().is_some_and(|next| ct > next) {
                self.world.q.push(ct, crate::world::Ev::Wake { thread: t });
                return;
            }
        }
    }

    /// Arms thread `t`'s CQ (an MMIO store: the CQ doorbell) and blocks
    /// it until host `host`'s interrupt handler reports the CQ's event.
    fn block_on_event(&mut self, t: usize, host: usize) {
        let cq = match &self.threads[t].kind {
            Kind::Client { cq, .. } | Kind::Server { cq, .. } => cq.clone(),
            Kind::Ping(p) => p.cq.clone(),
        };
        // A CQ that cannot be armed has no events to wait for: poll.
        if cq.req_notify(false).is_err() {
            let (ring, len) = cq.ring();
            self.world.watch(t, host, ring.get(), len);
            return;
        }
        self.world.watch_event(t, host, cq.cqn());
    }

    fn run_client(&mut self, t: usize, core: usize) {
        let mut wc = [blank_wc(); 16];
        loop {
            // Poll first.
            let Kind::Client {
                qps, by_qpn, cq, ..
            } = &mut self.threads[t].kind
            else {
                return;
            };
            let (n, now) = poll_charged(&mut self.world, &self.costs, core, cq, &mut wc);
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    self.error.get_or_insert(w.status);
                    continue;
                }
                let Some(q) = by_qpn.get(&w.qp_num).and_then(|&i| qps.get_mut(i)) else {
                    continue;
                };
                if let Some((upto, posted_at)) = q.signals.remove(&w.wr_id) {
                    let retired = upto - q.retired;
                    q.retired = upto;
                    self.done_ops += retired;
                    self.latencies.push(now.since(posted_at));
                    self.last_done = self.last_done.max(now);
                }
            }
            if self.done_ops >= self.target_ops {
                return;
            }
            // Then post, if some QP has room.
            let w = &self.w;
            let Kind::Client { qps, next, cq, .. } = &mut self.threads[t].kind else {
                return;
            };
            let nq = qps.len();
            let pick = (0..nq).map(|k| (*next + k) % nq).find(|&k| {
                let q = &qps[k];
                q.posted < w.iters
                    && q.posted - q.retired + u64::from(w.postlist.min((w.iters - q.posted) as u32))
                        <= u64::from(w.tx_depth)
            });
            let Some(k) = pick else {
                if n == 0 {
                    if self.w.events {
                        self.block_on_event(t, 0);
                    } else {
                        let (ring, len) = cq.ring();
                        self.world.watch(t, 0, ring.get(), len);
                    }
                    return;
                }
                continue;
            };
            *next = (k + 1) % nq;
            let q = &mut qps[k];
            let count = u64::from(w.postlist).min(w.iters - q.posted);
            let start = now;
            let inline =
                w.size <= w.inline_threshold && !matches!(w.op, Op::Read) && !w.op.is_atomic();
            let mut wrs = Vec::with_capacity(count as usize);
            for i in 0..count {
                let id = q.posted + i;
                let signaled = (id + 1) % u64::from(w.signal_every) == 0 || id + 1 == w.iters;
                let mut flags = if signaled {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::default()
                };
                if inline {
                    flags = flags | SendFlags::INLINE;
                }
                let opcode = match w.op {
                    Op::Send => WrOpcode::Send,
                    Op::SendImm => WrOpcode::SendWithImm(id as u32),
                    Op::Write => WrOpcode::RdmaWrite(q.remote),
                    Op::WriteImm => WrOpcode::RdmaWriteWithImm(q.remote, id as u32),
                    Op::Read => WrOpcode::RdmaRead(q.remote),
                    Op::Cas => WrOpcode::AtomicCmpSwp {
                        remote: q.remote,
                        compare: id,
                        swap: id + 1,
                    },
                    Op::Faa => WrOpcode::AtomicFetchAdd {
                        remote: q.remote,
                        add: 1,
                    },
                };
                wrs.push(SendWr {
                    wr_id: id,
                    sg_list: std::slice::from_ref(&q.sge),
                    opcode,
                    flags,
                    ud: q.ud,
                });
                if signaled {
                    q.signals.insert(id, (id + 1, start));
                }
            }
            // The provider reports what it built, and the CPU model charges
            // for it (`PostCosts`), as the doorbell rings.
            let seq = self.calls;
            self.calls += 1;
            let tracing = self.world.timeline.is_some();
            if tracing {
                lock(&self.world.cpu).post = Some(seq);
            }
            if q.qp.post_send(&wrs).is_err() {
                self.error.get_or_insert(WcStatus::GeneralErr);
                return;
            }
            note_post(
                &mut self.world,
                &self.posts,
                seq,
                core,
                q.qp.qpn(),
                &wrs,
                start,
            );
            q.posted += count;
            self.first_post.get_or_insert(start);
            if self.yield_if_ahead(t, core) {
                return;
            }
        }
    }

    /// One post's critical path: the steps of the first WR of a run that
    /// recorded its timeline (the unloaded probe).
    fn steps(&mut self) -> Steps {
        let ns = |d: Duration| d.as_ns_f64();
        self.world.drain();
        let wr = self
            .world
            .timeline
            .take()
            .and_then(|t| t.wr_steps().into_iter().next());
        let total = self.latencies.first().copied().unwrap_or_default();
        let Some(wr) = wr else {
            return Steps {
                total: ns(total),
                ..Steps::default()
            };
        };
        let [s0, s1, s2, s3, s4, s5] = wr.bounds;
        let end = wr.done.unwrap_or(s0.add(total)).max(s5);
        Steps {
            wqe_write: ns(s1.since(s0)),
            doorbell: ns(s2.since(s1)),
            wqe_dma_read: ns(s3.since(s2)),
            payload_dma_read: ns(s4.since(s3)),
            wire_and_ack: ns(s5.since(s4)),
            cqe_dma_write: ns(end.since(s5)),
            total: ns(total),
        }
    }

    fn report(
        &self,
        profile: &Profile,
        before: (doorbell_pcie::Counters, (u64, u64)),
        steps: Steps,
    ) -> Report {
        let c = self.world.counters(0).since(&before.0);
        let (to_dev, to_host) = self.world.link_bytes(0);
        let start = self.first_post.unwrap_or_default();
        let elapsed = self.last_done.since(start).max(Duration::from_ps(1));
        let secs = elapsed.as_ps() as f64 * 1e-12;
        let mut lat: Vec<u64> = self.latencies.iter().map(|d| d.as_ps()).collect();
        lat.sort_unstable();
        let pct = |p: f64| {
            if lat.is_empty() {
                0.0
            } else {
                lat[((lat.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
            }
        };
        let (busy_dev, busy_host) = self.world.link_busy(0);
        let frac = |d: Duration| (d.as_ps() as f64 / elapsed.as_ps() as f64).min(1.0);
        let cpu = lock(&self.world.cpu);
        let client_cores: Vec<f64> = (0..cpu.t.len())
            .filter(|&i| cpu.host_of[i] == 0)
            .map(|i| frac(cpu.busy[i]))
            .collect();
        drop(cpu);
        let (locked_posts, lock_wait) = *lock(&self.posts.locked);
        Report {
            profile: profile.name.clone(),
            workload: self.w.clone(),
            msg_rate_mops: self.target_ops as f64 / secs / 1e6,
            bandwidth_gbps: self.target_ops as f64 * f64::from(self.w.size) * 8.0 / secs / 1e9,
            latency_ns: Latency {
                p50: pct(0.5),
                p99: pct(0.99),
            },
            latency: (self.w.test == Test::Lat)
                .then(|| LatencyDist::of(&self.latencies))
                .flatten(),
            per_post: PerPost::from_counters(&c, self.target_ops).with_link_bytes(
                to_dev - before.1.0,
                to_host - before.1.1,
                self.target_ops,
            ),
            utilisation: Utilisation {
                pcie_to_device: frac(busy_dev),
                pcie_to_host: frac(busy_host),
                nic_processing_units: (self.world.pu_busy(0).as_ps() as f64
                    / elapsed.as_ps() as f64
                    / f64::from(profile.nic.processing_units))
                .min(1.0),
                cores: client_cores,
            },
            steps,
            simulated_ns: elapsed.as_ns_f64(),
            events: self.world.events,
            tlps: self.world.link_tlps(0) + self.world.link_tlps(1),
            locked_posts,
            lock_wait_ns: lock_wait.as_ns_f64(),
        }
    }
}
