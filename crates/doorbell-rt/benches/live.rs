//! End-to-end speed of the live runtime, against a memcpy baseline measured
//! in the same run.
//!
//! Two [`LiveNic`]s in one process, joined by a [`Fabric`], each with one RC
//! QP. The host thread posts RDMA WRITEs on NIC A's QP to NIC B's memory and
//! polls A's CQ to retire them; the two device threads do the rest. Figures:
//!
//! - the message rate of 8-byte inline WRITEs, one in 16 signalled, the send
//!   queue kept full, posted as postlists of 16 (one doorbell each) and one
//!   WR per post (BlueFlame);
//! - the bandwidth of 64 KiB WRITEs by pointer, several outstanding, and of
//!   64 KiB READs of B's memory into A's the same way;
//! - the message rate of the same 8-byte postlists with the same number in
//!   flight, on one QP and spread round-robin over 1 000 QPs
//!   (`DOORBELL_BENCH_QPS`), and the ratio of the two: what a post costs
//!   as QPs are added;
//! - the baselines: `copy_from_slice` between two `Vec`s and
//!   [`HostRam::write`] (the path every host store and device DMA takes), at
//!   64 KiB and at 8 bytes; and a bare single-producer single-consumer
//!   hand-off of 64-byte records between two threads (rtrb's ring), the
//!   most a NIC thread could take from a posting thread per message;
//! - the 8-byte postlist rate again, in rounds each taken right after a
//!   hand-off of its own, and the median of the rounds' ratios: the
//!   hand-off's rate moves several-fold with where the machine places the
//!   two threads, so the ratio is taken within a round.
//!
//! Each figure is the median rate over ten slices of its run, after a warm-up;
//! the spread column shows the slowest and fastest slice. `cargo bench` passes
//! `--bench`; without it (`cargo test --benches`, or running the binary by
//! hand) every run is cut short, to check that the benchmark works, and the
//! figures mean nothing.
//!
//! Environment:
//! - `DOORBELL_BENCH_SECS`: seconds per end-to-end figure (default 2; each
//!   baseline takes half as long);
//! - `DOORBELL_BENCH_DEPTH`: send-queue depth for the 8-byte WRITEs (default 128);
//! - `DOORBELL_BENCH_OUTSTANDING`: 64 KiB WRITEs in flight (default 16);
//! - `DOORBELL_BENCH_MTU`: path MTU (default 4096);
//! - `DOORBELL_BENCH_QPS`: QPs of the spread 8-byte WRITEs (default 1000);
//! - `DOORBELL_BENCH_ONLY=qps`: only the 1 vs many QPs figures;
//! - `DOORBELL_BENCH_ONLY=big`: only the 64 KiB figure and memcpy;
//! - `DOORBELL_BENCH_ONLY=read`: only the 64 KiB READ figure and memcpy;
//! - `DOORBELL_BENCH_ONLY=small`: only the paired rounds of the 8-byte
//!   postlist figure and the SPSC hand-off (also to profile the cost per
//!   packet);
//! - `DOORBELL_BENCH_ONLY=list`: only the 8-byte postlist figure, once,
//!   with no hand-off beside it: a run whose every instruction is the
//!   WRITEs' or their set-up's, to count them per WRITE (`valgrind
//!   --tool=callgrind`);
//! - `DOORBELL_BENCH_ONLY=single`: only the 8-byte figure posted one WR at
//!   a time (BlueFlame), to profile a post's fixed cost;
//! - the provider's `MLX5_*` variables (e.g. `MLX5_SHUT_UP_BF=1`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use doorbell_host::{HostMemory, HostRam, offset};
use doorbell_pcie::{DmaPurpose, LinkConfig};
use doorbell_rt::{Fabric, LiveNic};
use doorbell_types::{Mkey, Psn};
use doorbell_verbs::{
    Access, Context, Cq, Mr, ProviderConfig, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint,
    RemoteAddr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};

#[path = "live/handoff.rs"]
mod handoff;
#[path = "live/spread.rs"]
mod spread;
use spread::spread_writes;

/// Bytes of one large WRITE.
const BIG: usize = 64 << 10;
/// Large buffers rotate over this many slots, on both sides.
const SLOTS: usize = 16;
/// One WR in this many is signalled, and a postlist is this long.
const SIGNAL_EVERY: usize = 16;
/// Bytes of one small WRITE.
const SMALL: usize = 8;
/// Small WRITEs rotate over this many 8-byte targets.
const SMALL_SLOTS: usize = 512;
/// Slices per measurement; the figure is their median.
const SLICES: usize = 10;

const USAGE: &str = "\
usage: cargo bench -p doorbell-rt --bench live [-- --help]

Measures, between two LiveNics in one process, the message rate of 8-byte
inline RDMA WRITEs and the bandwidth of 64 KiB RDMA WRITEs, with memcpy,
HostRam::write and SPSC hand-off baselines from the same run, and prints a
table.

Without --bench (which cargo bench passes) the run is cut short: a smoke test.

environment:
  DOORBELL_BENCH_SECS          seconds per end-to-end figure (default 2;
                               baselines take half)
  DOORBELL_BENCH_DEPTH         send-queue depth for 8-byte WRITEs (default 128)
  DOORBELL_BENCH_OUTSTANDING   64 KiB WRITEs in flight (default 16)
  DOORBELL_BENCH_MTU           path MTU: 256, 512, 1024, 2048, 4096 (default 4096)
  DOORBELL_BENCH_QPS           QPs of the spread 8-byte WRITEs (default 1000)
  DOORBELL_BENCH_ONLY=qps      only the 1 vs many QPs figures
  DOORBELL_BENCH_ONLY=big      only the 64 KiB figure and memcpy
  DOORBELL_BENCH_ONLY=read     only the 64 KiB READ figure and memcpy
  DOORBELL_BENCH_ONLY=small    only the 8-byte postlist figure, in rounds paired with the SPSC hand-off
  DOORBELL_BENCH_ONLY=list     only the 8-byte postlist figure, once, with no hand-off
  DOORBELL_BENCH_ONLY=single   only the 8-byte figure posted one WR at a time (BlueFlame)
  MLX5_*                       provider settings, as rdma-core reads them
";

struct Settings {
    secs: f64,
    depth: usize,
    outstanding: usize,
    mtu: u32,
    qps: usize,
    quick: bool,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

impl Settings {
    fn from_env(quick: bool) -> Self {
        let s = Self {
            secs: if quick {
                0.05
            } else {
                env_or("DOORBELL_BENCH_SECS", 2.0)
            },
            depth: env_or("DOORBELL_BENCH_DEPTH", 128),
            outstanding: env_or("DOORBELL_BENCH_OUTSTANDING", 16),
            mtu: env_or("DOORBELL_BENCH_MTU", 4096),
            qps: env_or("DOORBELL_BENCH_QPS", if quick { 50 } else { 1000 }),
            quick,
        };
        assert!(s.secs > 0.0, "DOORBELL_BENCH_SECS must be positive");
        assert!(
            s.depth >= SIGNAL_EVERY && s.depth.is_multiple_of(SIGNAL_EVERY),
            "DOORBELL_BENCH_DEPTH must be a multiple of {SIGNAL_EVERY}"
        );
        assert!(
            (1..=SLOTS).contains(&s.outstanding),
            "DOORBELL_BENCH_OUTSTANDING must be in 1..={SLOTS}"
        );
        assert!(s.qps >= 1, "DOORBELL_BENCH_QPS must be at least 1");
        s
    }

    fn e2e(&self) -> Duration {
        Duration::from_secs_f64(self.secs)
    }

    fn baseline(&self) -> Duration {
        Duration::from_secs_f64(self.secs / 2.0)
    }

    fn warmup(&self) -> Duration {
        Duration::from_secs_f64((self.secs / 10.0).min(0.3))
    }
}

// ---------------------------------------------------------------------------
// Measurement.

/// Rates of the slices of one measurement, in units per second.
struct Rate {
    slices: Vec<f64>,
    /// Share of all CPUs that other processes used meanwhile, if known.
    others: Option<f64>,
    /// CPUs each thread of this process kept busy meanwhile, by name.
    threads: Vec<(String, f64)>,
}

impl Rate {
    fn sorted(&self) -> Vec<f64> {
        let mut s = self.slices.clone();
        s.sort_by(f64::total_cmp);
        s
    }

    fn median(&self) -> f64 {
        let s = self.sorted();
        let n = s.len();
        if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        }
    }

    fn min(&self) -> f64 {
        self.sorted()[0]
    }

    fn max(&self) -> f64 {
        *self.sorted().last().expect("at least one slice")
    }
}

/// Calls `step` for `warmup`, then for `run` split into [`SLICES`] slices;
/// `step` does some work and returns how many units (bytes, messages) it
/// finished.
fn measure(warmup: Duration, run: Duration, mut step: impl FnMut() -> u64) -> Rate {
    let start = Instant::now();
    while start.elapsed() < warmup {
        step();
    }
    let slice = run / SLICES as u32;
    let mut slices = Vec::with_capacity(SLICES);
    let cpu0 = CpuTime::now();
    let threads0 = thread_ticks();
    let t0 = Instant::now();
    for _ in 0..SLICES {
        let t0 = Instant::now();
        let mut units = 0u64;
        let mut elapsed;
        loop {
            units += step();
            elapsed = t0.elapsed();
            if elapsed >= slice {
                break;
            }
        }
        slices.push(units as f64 / elapsed.as_secs_f64());
    }
    let others = cpu0.zip(CpuTime::now()).map(|(a, b)| b.others_since(&a));
    let secs = t0.elapsed().as_secs_f64();
    let threads = thread_ticks()
        .into_iter()
        .map(|(tid, (name, t))| {
            let t0 = threads0.get(&tid).map_or(0, |(_, t0)| *t0);
            (
                name,
                t.saturating_sub(t0) as f64 / CLOCK_TICKS_PER_SEC / secs,
            )
        })
        .collect();
    Rate {
        slices,
        others,
        threads,
    }
}

/// `USER_HZ`, the unit of CPU times in `/proc`: 100 on every Linux port
/// that matters here.
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

/// CPU time (user + system, in clock ticks) of each thread of this process,
/// by thread ID, with its name ("host" for the main thread); empty where
/// `/proc` is missing.
fn thread_ticks() -> std::collections::BTreeMap<u32, (String, u64)> {
    let pid = std::process::id();
    let mut out = std::collections::BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = if tid == pid {
            "host".to_string()
        } else {
            stat[open + 1..close].to_string()
        };
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        out.insert(tid, (name, ticks));
    }
    out
}

/// CPU time from `/proc` (Linux), in clock ticks: the whole machine's, busy
/// and in all, and this process's.
struct CpuTime {
    total: u64,
    busy: u64,
    own: u64,
}

impl CpuTime {
    fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let total: u64 = cpu.iter().sum();
        // user nice system idle iowait irq softirq steal
        let busy = total - cpu.get(3)? - cpu.get(4)?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let after_name = own.rsplit_once(')')?.1;
        let f: Vec<&str> = after_name.split_whitespace().collect();
        // Fields 14 and 15 of the line (utime, stime); the split starts at 3.
        let own = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some(Self { total, busy, own })
    }

    /// Share of all CPUs that other processes were busy since `before`.
    fn others_since(&self, before: &Self) -> f64 {
        let total = self.total.saturating_sub(before.total).max(1) as f64;
        let busy = self.busy.saturating_sub(before.busy);
        let own = self.own.saturating_sub(before.own);
        busy.saturating_sub(own) as f64 / total
    }
}

// ---------------------------------------------------------------------------
// Baselines.

fn memcpy_big(s: &Settings) -> Rate {
    let src = pattern(BIG * SLOTS, 1);
    let mut dst = vec![0u8; BIG * SLOTS];
    let mut i = 0usize;
    measure(s.warmup(), s.baseline(), || {
        let at = (i % SLOTS) * BIG;
        i += 1;
        black_box(&mut dst[at..at + BIG]).copy_from_slice(black_box(&src[at..at + BIG]));
        BIG as u64
    })
}

fn memcpy_small(s: &Settings) -> Rate {
    let src = pattern(SMALL * SMALL_SLOTS, 2);
    let mut dst = vec![0u8; SMALL * SMALL_SLOTS];
    measure(s.warmup(), s.baseline(), || {
        for k in 0..SMALL_SLOTS {
            let at = k * SMALL;
            black_box(&mut dst[at..at + SMALL]).copy_from_slice(black_box(&src[at..at + SMALL]));
        }
        SMALL_SLOTS as u64
    })
}

/// A bare single-producer single-consumer hand-off of 64-byte records
/// between two threads ([`handoff::with_handoff`]): the most a NIC thread
/// could take from a posting thread, per message, with nothing else to do.
/// The producer thread fills the ring as fast as it can; the measured
/// thread takes records.
fn spsc_64b(warmup: Duration, run: Duration) -> Rate {
    handoff::with_handoff(|step| measure(warmup, run, step))
}

fn hostram_big(s: &Settings) -> Rate {
    let ram = HostRam::new();
    let base = ram.alloc((BIG * SLOTS) as u64).expect("alloc");
    let src = pattern(BIG * SLOTS, 3);
    let mut i = 0usize;
    measure(s.warmup(), s.baseline(), || {
        let at = (i % SLOTS) * BIG;
        i += 1;
        ram.write(
            offset(base, at as u64).expect("in the buffer"),
            &src[at..at + BIG],
        )
        .expect("write");
        BIG as u64
    })
}

fn hostram_small(s: &Settings) -> Rate {
    let ram = HostRam::new();
    let base = ram.alloc((SMALL * SMALL_SLOTS) as u64).expect("alloc");
    let src = pattern(SMALL * SMALL_SLOTS, 4);
    measure(s.warmup(), s.baseline(), || {
        for k in 0..SMALL_SLOTS {
            let at = k * SMALL;
            ram.write(
                offset(base, at as u64).expect("in the buffer"),
                black_box(&src[at..at + SMALL]),
            )
            .expect("write");
        }
        SMALL_SLOTS as u64
    })
}

// ---------------------------------------------------------------------------
// Two connected RC QPs (after tests/it/common.rs, which benches cannot use).

/// One end. The context holds its NIC, and every verbs object its context,
/// so the device thread outlives whatever it must destroy.
struct Side {
    nic: Arc<LiveNic>,
    ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

struct Pair {
    a: Side,
    b: Side,
    _fabric: Fabric,
}

const FULL: u32 = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;

fn side(fabric: &Fabric, name: &str, ip: [u8; 4], cap: QpCaps, mr_len: usize, cqe: u32) -> Side {
    let nic = Arc::new(LiveNic::start(name, fabric, ip, LinkConfig::default()).expect("start NIC"));
    let cfg = ProviderConfig::from_env().expect("MLX5_* settings");
    let ctx = Context::with_config(nic.clone(), cfg).expect("open context");
    let pd = ctx.alloc_pd().expect("alloc PD");
    let cq = ctx.create_cq(cqe).expect("create CQ");
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap,
            sq_sig_all: false,
            srq: None,
        })
        .expect("create QP");
    let mr = pd.reg_mr(mr_len, Access(FULL)).expect("register MR");
    Side {
        nic,
        ctx,
        cq,
        qp,
        mr,
    }
}

fn pair(cap: QpCaps, mr_len: usize, cqe: u32, mtu: u32) -> Pair {
    let fabric = Fabric::new();
    let a = side(&fabric, "a", [127, 0, 0, 2], cap, mr_len, cqe);
    let b = side(&fabric, "b", [127, 0, 0, 3], cap, mr_len, cqe);
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x00ab_cd01),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(0x00ff_fff0),
    };
    a.qp.connect_rc(&ea, &eb, mtu).expect("connect A");
    b.qp.connect_rc(&eb, &ea, mtu).expect("connect B");
    Pair {
        a,
        b,
        _fabric: fabric,
    }
}

fn blank_wc() -> Wc {
    Wc::default()
}

/// Deterministic pattern bytes.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

/// A send queue kept full: WRs are numbered from 0 by `wr_id`, and a
/// completion for WR `n` retires every WR up to `n`.
struct Window {
    posted: u64,
    retired: u64,
    wc: [Wc; 16],
    /// What every completion must be.
    opcode: WcOpcode,
}

impl Window {
    fn new() -> Self {
        Self::of(WcOpcode::RdmaWrite)
    }

    /// A window of WRs that complete as `opcode`.
    fn of(opcode: WcOpcode) -> Self {
        Self {
            posted: 0,
            retired: 0,
            wc: [blank_wc(); 16],
            opcode,
        }
    }

    fn in_flight(&self) -> usize {
        (self.posted - self.retired) as usize
    }

    /// Polls `cq` once; returns how many WRs it retired.
    fn poll(&mut self, cq: &Cq) -> u64 {
        let n = cq.poll(&mut self.wc).expect("poll CQ");
        let before = self.retired;
        for wc in &self.wc[..n] {
            assert_eq!(
                (wc.status, wc.opcode),
                (WcStatus::Success, self.opcode),
                "WR {} failed: {wc:?}",
                wc.wr_id
            );
            self.retired = wc.wr_id + 1;
        }
        self.retired - before
    }

    /// Polls until everything posted has completed.
    fn drain(&mut self, cq: &Cq) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.retired < self.posted {
            if self.poll(cq) == 0 {
                assert!(Instant::now() < deadline, "completions stopped arriving");
                std::thread::yield_now();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// End to end.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Post {
    /// Postlists of [`SIGNAL_EVERY`] WRs, the last signalled: one doorbell each.
    List,
    /// One WR per post_send, every [`SIGNAL_EVERY`]th signalled: BlueFlame.
    Single,
}

/// 8-byte inline WRITEs from A to B with the send queue kept full.
struct SmallWrites {
    p: Pair,
    w: Window,
    post: Post,
    depth: usize,
    sge: [Sge; 1],
    raddr: u64,
    rkey: Mkey,
}

impl SmallWrites {
    fn new(s: &Settings, post: Post) -> Self {
        let cap = QpCaps {
            max_send_wr: s.depth as u32,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let cqe = (s.depth / SIGNAL_EVERY * 2).max(64) as u32;
        let p = pair(cap, SMALL * SMALL_SLOTS, cqe, s.mtu);
        let depth = s.depth.min(p.a.qp.caps().max_send_wr as usize);
        let depth = depth - depth % SIGNAL_EVERY;
        p.a.mr.write(0, &pattern(SMALL, 5)).expect("fill source");
        let sge = [p.a.mr.sge(0, SMALL as u32).expect("sge")];
        let (raddr, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
        Self {
            p,
            w: Window::new(),
            post,
            depth,
            sge,
            raddr,
            rkey,
        }
    }

    /// Posts what the queue has room for, polls A's CQ once; returns the
    /// WRs retired.
    fn step(&mut self) -> u64 {
        let Self {
            p,
            w,
            post,
            depth,
            sge,
            raddr,
            rkey,
        } = self;
        let wr = |n: u64| SendWr {
            wr_id: n,
            sg_list: &sge[..],
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr: *raddr + (n as usize % SMALL_SLOTS * SMALL) as u64,
                rkey: *rkey,
            }),
            flags: if (n + 1).is_multiple_of(SIGNAL_EVERY as u64) {
                SendFlags::INLINE | SendFlags::SIGNALED
            } else {
                SendFlags::INLINE
            },
            ud: None,
        };
        let mut progressed = false;
        match post {
            Post::List => {
                while w.in_flight() + SIGNAL_EVERY <= *depth {
                    let list: [SendWr; SIGNAL_EVERY] =
                        std::array::from_fn(|k| wr(w.posted + k as u64));
                    p.a.qp.post_send(&list).expect("post_send");
                    w.posted += SIGNAL_EVERY as u64;
                    progressed = true;
                }
            }
            Post::Single => {
                while w.in_flight() < *depth {
                    p.a.qp.post_send(&[wr(w.posted)]).expect("post_send");
                    w.posted += 1;
                    progressed = true;
                }
            }
        }
        let done = w.poll(&p.a.cq);
        if done == 0 && !progressed {
            // Two cores are shared by this thread and two device threads.
            std::thread::yield_now();
        }
        done
    }

    /// Drains the queue, checks the run was clean (with `rate`'s thread
    /// figures) and that the data arrived.
    fn finish(mut self, rate: &Rate) {
        self.w.drain(&self.p.a.cq);
        let what = if self.post == Post::List {
            "8 B, postlist"
        } else {
            "8 B, 1 WR/post"
        };
        check(&self.p, &self.w, rate, what);
        let mut got = [0u8; SMALL];
        self.p.b.mr.read(0, &mut got).expect("read target");
        assert_eq!(got[..], pattern(SMALL, 5)[..], "WRITE data arrived");
    }
}

fn small_writes(s: &Settings, post: Post) -> Rate {
    let mut run = SmallWrites::new(s, post);
    let rate = measure(s.warmup(), s.e2e(), || run.step());
    run.finish(&rate);
    rate
}

/// Rounds of the paired 8-byte figure.
const ROUNDS: usize = 5;

/// One round: the SPSC hand-off's rate and the 8-byte postlist rate
/// measured right after it.
struct Paired {
    handoff: f64,
    writes: f64,
}

impl Paired {
    fn ratio(&self) -> f64 {
        self.writes / self.handoff
    }
}

/// The 8-byte postlist WRITEs in [`ROUNDS`] rounds, each measured right
/// after an SPSC hand-off of its own: the hand-off's rate moves with where
/// the machine places the two threads (on this VM it has run at about 10
/// and at about 60 M/s, flipping between runs minutes apart), and the
/// WRITEs, which run in one thread, hardly do. A ratio taken within a
/// round compares the two under one placement.
fn small_paired(s: &Settings) -> Vec<Paired> {
    let mut run = SmallWrites::new(s, Post::List);
    let (e2e, base) = (s.e2e() / ROUNDS as u32, s.baseline() / ROUNDS as u32);
    let mut rounds = Vec::with_capacity(ROUNDS);
    let mut last = None;
    for k in 0..ROUNDS {
        let handoff = spsc_64b(s.warmup() / 2, base).median();
        let warmup = if k == 0 { s.warmup() } else { s.warmup() / 10 };
        let rate = measure(warmup, e2e, || run.step());
        rounds.push(Paired {
            handoff,
            writes: rate.median(),
        });
        last = Some(rate);
    }
    run.finish(&last.expect("at least one round"));
    rounds
}

/// Prints the paired rounds and their median ratio.
fn print_paired(rounds: &[Paired]) {
    println!(
        "8 B postlist WRITEs beside the SPSC hand-off, {} rounds (hand-off, then WRITEs):",
        rounds.len()
    );
    for (k, r) in rounds.iter().enumerate() {
        println!(
            "  round {}: hand-off {:.3} Mops, WRITEs {:.3} Mops: {} of it",
            k + 1,
            r.handoff / 1e6,
            r.writes / 1e6,
            percent(r.ratio())
        );
    }
    let mut ratios: Vec<f64> = rounds.iter().map(Paired::ratio).collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "8 B postlist WRITEs: median of the rounds' ratios {} of the SPSC hand-off",
        percent(median)
    );
}

fn big_writes(s: &Settings) -> Rate {
    big_transfers(s, Big::Write)
}

/// A 64 KiB transfer: A writes to B, or reads from B.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Big {
    Write,
    Read,
}

fn big_transfers(s: &Settings, op: Big) -> Rate {
    let cap = QpCaps {
        max_send_wr: SLOTS as u32,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let p = pair(cap, BIG * SLOTS, 64, s.mtu);
    let src = pattern(BIG * SLOTS, 6);
    let (from, to) = match op {
        Big::Write => (&p.a.mr, &p.b.mr),
        Big::Read => (&p.b.mr, &p.a.mr),
    };
    from.write(0, &src).expect("fill source");
    let (raddr, rkey) = (p.b.mr.addr(), p.b.mr.rkey());
    let sges: Vec<Sge> = (0..SLOTS)
        .map(|k| p.a.mr.sge((k * BIG) as u64, BIG as u32).expect("sge"))
        .collect();
    let (mut w, what) = match op {
        Big::Write => (Window::of(WcOpcode::RdmaWrite), "64 KiB"),
        Big::Read => (Window::of(WcOpcode::RdmaRead), "64 KiB READ"),
    };
    let rate = measure(s.warmup(), s.e2e(), || {
        let mut progressed = false;
        while w.in_flight() < s.outstanding {
            let slot = w.posted as usize % SLOTS;
            let remote = RemoteAddr {
                addr: raddr + (slot * BIG) as u64,
                rkey,
            };
            p.a.qp
                .post_send(&[SendWr {
                    wr_id: w.posted,
                    sg_list: &sges[slot..slot + 1],
                    opcode: match op {
                        Big::Write => WrOpcode::RdmaWrite(remote),
                        Big::Read => WrOpcode::RdmaRead(remote),
                    },
                    flags: SendFlags::SIGNALED,
                    ud: None,
                }])
                .expect("post_send");
            w.posted += 1;
            progressed = true;
        }
        let done = w.poll(&p.a.cq);
        if done == 0 && !progressed {
            std::thread::yield_now();
        }
        done * BIG as u64
    });
    w.drain(&p.a.cq);
    check(&p, &w, &rate, what);
    assert!(
        to.to_vec().expect("read target") == src,
        "{what}: the data arrived"
    );
    rate
}

/// Prints what the devices counted over a run (warm-up included), and
/// fails if the transport had to recover from anything: the figures assume
/// a clean run.
fn check(p: &Pair, w: &Window, rate: &Rate, what: &str) {
    let (bus_a, nic_a) = p.a.nic.counters(None);
    let (_, nic_b) = p.b.nic.counters(None);
    let wrs = w.posted as f64;
    println!(
        "live: {what}: {} WRs; A per WR: {:.3} MMIO, {:.3} WQE DMA reads, \
         {:.3} payload DMA reads, {:.3} packets; B: {} packets in, {} dropped",
        w.posted,
        bus_a.mmio_writes as f64 / wrs,
        bus_a.reads(DmaPurpose::SendWqe) as f64 / wrs,
        bus_a.reads(DmaPurpose::Payload) as f64 / wrs,
        nic_a.tx_packets as f64 / wrs,
        nic_b.rx_packets,
        nic_b.rx_dropped,
    );
    let busy: Vec<String> = rate
        .threads
        .iter()
        .filter(|(name, _)| name == "host" || name.starts_with("doorbell-"))
        .map(|(name, cpus)| format!("{name} {cpus:.2}"))
        .collect();
    println!(
        "live: {what}: CPUs busy per thread: {}; inputs that waited for a worker's timeout: A {}, B {}",
        busy.join(", "),
        p.a.nic.inbox_stalls(),
        p.b.nic.inbox_stalls()
    );
    let trouble = [
        ("ACK timeouts", nic_a.local_ack_timeout_err),
        ("PSN NAKs", nic_a.packet_seq_err),
        ("RNR NAKs", nic_a.rnr_nak_retry_err),
        ("duplicates at B", nic_b.duplicate_request),
        ("out of sequence at B", nic_b.out_of_sequence),
        ("dropped at B", nic_b.rx_dropped),
    ];
    for (name, n) in trouble {
        assert_eq!(n, 0, "{what}: {n} {name}: the run was not clean");
    }
}

struct Row {
    name: String,
    rate: Rate,
    /// Divisor to the printed unit, and the unit.
    scale: f64,
    unit: &'static str,
    /// Baselines to compare with: (label, median rate).
    versus: Vec<(&'static str, f64)>,
}

fn print_table(rows: &[Row]) {
    let fmt = |v: f64, r: &Row| format!("{:.3}", v / r.scale);
    println!(
        "| {:<44} | {:>9} | {:<4} | {:>17} | {:>6} | ratio to baseline (same run) |",
        "figure", "median", "unit", "slices min–max", "others"
    );
    println!(
        "|{:-<46}|{:->11}|{:-<6}|{:->19}|{:->8}|{:-<30}|",
        "", "", "", "", "", ""
    );
    for r in rows {
        let m = r.rate.median();
        let ratio = r
            .versus
            .iter()
            .map(|(label, base)| format!("{} of {label}", percent(m / base)))
            .collect::<Vec<_>>()
            .join(", ");
        let spread = format!("{}–{}", fmt(r.rate.min(), r), fmt(r.rate.max(), r));
        let others = r
            .rate
            .others
            .map_or("?".to_string(), |o| format!("{:.0}%", o * 100.0));
        println!(
            "| {:<44} | {:>9} | {:<4} | {:>17} | {:>6} | {} |",
            r.name,
            fmt(m, r),
            r.unit,
            spread,
            others,
            if ratio.is_empty() {
                "baseline".to_string()
            } else {
                ratio
            }
        );
    }
    println!();
    println!(
        "others: share of all CPUs that other processes used during the measurement \
         (the machine is shared; a high share makes that figure low)"
    );
}

fn percent(x: f64) -> String {
    let p = x * 100.0;
    if p >= 10.0 {
        format!("{p:.0}%")
    } else if p >= 0.1 {
        format!("{p:.1}%")
    } else {
        format!("{p:.3}%")
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return;
    }
    let quick = !args.iter().any(|a| a == "--bench");
    let s = Settings::from_env(quick);
    if s.quick {
        println!("live: smoke run (no --bench): figures are not meaningful");
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "live: {cpus} CPUs; {:.2} s per end-to-end figure, {:.2} s per baseline; \
         median of {SLICES} slices after {:.2} s warm-up",
        s.secs,
        s.secs / 2.0,
        s.warmup().as_secs_f64()
    );
    println!(
        "live: 8 B WRITEs: SQ depth {}, 1 in {SIGNAL_EVERY} signalled; \
         64 KiB WRITEs: {} outstanding, all signalled; MTU {}",
        s.depth, s.outstanding, s.mtu
    );

    println!("live: load average before: {}", loadavg());
    if std::env::var("DOORBELL_BENCH_ONLY").is_ok_and(|v| v == "qps") {
        let one = spread_writes(&s, 1).median();
        let many = spread_writes(&s, s.qps).median();
        println!(
            "8 B postlist WRITEs: 1 QP {:.3} Mops, {} QPs {:.3} Mops; per-post cost, {} QPs / 1 QP: {:.2}x",
            one / 1e6,
            s.qps,
            many / 1e6,
            s.qps,
            one / many
        );
        return;
    }
    for (only, op, name) in [("big", Big::Write, "WRITEs"), ("read", Big::Read, "READs")] {
        if std::env::var("DOORBELL_BENCH_ONLY").is_ok_and(|v| v == only) {
            let m = memcpy_big(&s).median();
            let b = big_transfers(&s, op).median();
            println!(
                "64 KiB {name}: {:.3} GB/s, memcpy {:.3} GB/s: {:.1}% of memcpy",
                b / 1e9,
                m / 1e9,
                100.0 * b / m
            );
            return;
        }
    }
    if std::env::var("DOORBELL_BENCH_ONLY").is_ok_and(|v| v == "small") {
        print_paired(&small_paired(&s));
        return;
    }
    if std::env::var("DOORBELL_BENCH_ONLY").is_ok_and(|v| v == "list") {
        let r = small_writes(&s, Post::List).median();
        println!("8 B WRITEs, postlist: {:.3} Mops", r / 1e6);
        return;
    }
    if std::env::var("DOORBELL_BENCH_ONLY").is_ok_and(|v| v == "single") {
        let r = small_writes(&s, Post::Single).median();
        println!("8 B WRITEs, 1 WR/post: {:.3} Mops", r / 1e6);
        return;
    }
    let mc_big = memcpy_big(&s);
    let hr_big = hostram_big(&s);
    let mc_small = memcpy_small(&s);
    let hr_small = hostram_small(&s);
    let spsc = spsc_64b(s.warmup(), s.baseline());
    let e2e_big = big_writes(&s);
    let e2e_read = big_transfers(&s, Big::Read);
    let e2e_list = small_writes(&s, Post::List);
    let e2e_single = small_writes(&s, Post::Single);
    let spread_one = spread_writes(&s, 1);
    let spread_many = spread_writes(&s, s.qps);
    let qp_ratio = spread_one.median() / spread_many.median();

    let (gb, mops) = (1e9, 1e6);
    let (m_big, h_big) = (mc_big.median(), hr_big.median());
    let (m_small, h_small) = (mc_small.median(), hr_small.median());
    let spsc_rate = spsc.median();
    let rows = vec![
        Row {
            name: "memcpy 64 KiB (Vec copy_from_slice)".into(),
            rate: mc_big,
            scale: gb,
            unit: "GB/s",
            versus: vec![],
        },
        Row {
            name: "HostRam::write 64 KiB".into(),
            rate: hr_big,
            scale: gb,
            unit: "GB/s",
            versus: vec![("memcpy", m_big)],
        },
        Row {
            name: format!("RDMA WRITE 64 KiB, {} outstanding", s.outstanding),
            rate: e2e_big,
            scale: gb,
            unit: "GB/s",
            versus: vec![("memcpy", m_big), ("HostRam::write", h_big)],
        },
        Row {
            name: format!("RDMA READ 64 KiB, {} outstanding", s.outstanding),
            rate: e2e_read,
            scale: gb,
            unit: "GB/s",
            versus: vec![("memcpy", m_big), ("HostRam::write", h_big)],
        },
        Row {
            name: "memcpy 8 B (Vec copy_from_slice)".into(),
            rate: mc_small,
            scale: mops,
            unit: "Mops",
            versus: vec![],
        },
        Row {
            name: "HostRam::write 8 B".into(),
            rate: hr_small,
            scale: mops,
            unit: "Mops",
            versus: vec![("memcpy", m_small)],
        },
        Row {
            name: "SPSC hand-off of 64 B records, 2 threads".into(),
            rate: spsc,
            scale: mops,
            unit: "Mops",
            versus: vec![],
        },
        Row {
            name: format!("RDMA WRITE 8 B inline, postlist {SIGNAL_EVERY}"),
            rate: e2e_list,
            scale: mops,
            unit: "Mops",
            versus: vec![
                ("memcpy", m_small),
                ("HostRam::write", h_small),
                ("SPSC hand-off", spsc_rate),
            ],
        },
        Row {
            name: "RDMA WRITE 8 B inline, 1 WR/post (BlueFlame)".into(),
            rate: e2e_single,
            scale: mops,
            unit: "Mops",
            versus: vec![("memcpy", m_small), ("HostRam::write", h_small)],
        },
        Row {
            name: format!("RDMA WRITE 8 B inline, postlist {SIGNAL_EVERY}, 1 QP"),
            rate: spread_one,
            scale: mops,
            unit: "Mops",
            versus: vec![],
        },
        Row {
            name: format!(
                "RDMA WRITE 8 B inline, postlist {SIGNAL_EVERY}, {} QPs",
                s.qps
            ),
            rate: spread_many,
            scale: mops,
            unit: "Mops",
            versus: vec![],
        },
    ];
    println!("live: load average after: {}", loadavg());
    println!();
    print_table(&rows);
    println!();
    println!(
        "per-post cost, {} QPs / 1 QP (same WRs in flight): {qp_ratio:.2}x",
        s.qps
    );
    println!();
    print_paired(&small_paired(&s));
}

/// The 1, 5 and 15 minute load averages, where the OS tells them: other work
/// on the machine shows in the figures.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().take(3).collect();
            (f.len() == 3).then(|| f.join(" "))
        })
        .unwrap_or_else(|| "unknown".into())
}
