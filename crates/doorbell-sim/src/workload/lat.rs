//! perftest's latency tests (`--test lat`): one message outstanding.
//!
//! SEND and WRITE are a ping-pong, as `ib_send_lat` and `ib_write_lat` run
//! them: the client posts, the server waits for the message (a receive
//! completion, or the last byte of the WRITE changing in its buffer) and
//! answers the same way; each iteration's latency is half the client's
//! round trip. READ and atomics go one at a time from the client, as
//! `ib_read_lat` and `ib_atomic_lat` do, and each latency is the whole
//! post-to-completion time. The distribution is reported as perftest
//! prints it ([`LatencyDist`]).

use doorbell_hif::{AddressVector, QpType};
use doorbell_types::{Duration, Instant};
use doorbell_verbs::{
    Ah, Cq, Mr, Qp, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdTarget, WcOpcode, WcStatus,
    WrOpcode,
};
use serde::Serialize;

use super::{Kind, Op, Run, Thread, Workload, blank_wc, note_post, poll_charged};
use crate::world::{Ev, lock};

/// perftest's test type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Test {
    /// Bandwidth: the send queue kept full (`ib_*_bw`).
    #[default]
    Bw,
    /// Latency: one message outstanding (`ib_*_lat`).
    Lat,
}

/// The latency distribution of a `--test lat` run, as perftest prints it,
/// in µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyDist {
    /// Iterations measured.
    pub iterations: u64,
    /// Smallest.
    pub t_min_us: f64,
    /// Largest.
    pub t_max_us: f64,
    /// The median.
    pub t_typical_us: f64,
    /// The mean.
    pub t_avg_us: f64,
    /// The standard deviation.
    pub t_stdev_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p99_9_us: f64,
}

impl LatencyDist {
    /// The distribution of `samples`, picking percentiles as perftest does
    /// (the sorted sample at index `n × p`).
    pub fn of(samples: &[Duration]) -> Option<LatencyDist> {
        if samples.is_empty() {
            return None;
        }
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_ns_f64() / 1000.0).collect();
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let at = |p: f64| us[((n as f64 * p) as usize).min(n - 1)];
        let avg = us.iter().sum::<f64>() / n as f64;
        let var = us.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        Some(LatencyDist {
            iterations: n as u64,
            t_min_us: us[0],
            t_max_us: us[n - 1],
            t_typical_us: us[n / 2],
            t_avg_us: avg,
            t_stdev_us: var.sqrt(),
            p99_us: at(0.99),
            p99_9_us: at(0.999),
        })
    }
}

/// Where a latency-test thread is in its iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Posting the next message.
    Post,
    /// Waiting for that post's completion.
    Cqe,
    /// Waiting for the peer's message.
    Peer,
}

/// One side of a latency test.
pub(super) struct PingPong {
    pub(super) qp: Qp,
    pub(super) cq: Cq,
    sge: Sge,
    remote: RemoteAddr,
    ud: Option<UdTarget>,
    mr: Mr,
    /// Offset in `mr` of the last byte the peer's WRITE lands on.
    watch: u64,
    /// Where the peer's SENDs land.
    recv: Option<Sge>,
    /// The client (starts, and measures).
    starts: bool,
    phase: Phase,
    receives_posted: bool,
    sent: u64,
    arrived: u64,
    completed: u64,
    /// When each of the client's posts started.
    posts: Vec<Instant>,
}

impl Op {
    /// Whether a latency test of this operation is a ping-pong.
    pub(super) fn is_ping_pong(self) -> bool {
        matches!(self, Op::Send | Op::Write)
    }
}

/// Byte offset of the half of a latency test's buffer the peer writes.
pub(super) fn half(size: u32) -> u64 {
    u64::from(size).next_multiple_of(64).max(64)
}

/// Turns the bandwidth test's client and server threads (one QP each)
/// into the two sides of a latency test.
pub(super) fn pair(
    w: &Workload,
    threads: &mut [Thread],
    mr_a: &Mr,
    mr_b: &Mr,
    av_a: AddressVector,
) -> Result<(), doorbell_verbs::VerbsError> {
    let h = half(w.size);
    let len = if w.op.is_atomic() { 8 } else { w.size };
    let rlen = if w.qp_type == QpType::Ud {
        w.size + 40
    } else {
        w.size
    };
    let recv_of = |mr: &Mr| -> Result<Option<Sge>, doorbell_verbs::VerbsError> {
        if w.op == Op::Send {
            Ok(Some(mr.sge(h, rlen.max(1))?))
        } else {
            Ok(None)
        }
    };
    let mut client_qpn = None;
    for th in threads.iter_mut() {
        let cq = match &th.kind {
            Kind::Client { cq, .. } | Kind::Server { cq, .. } => cq.clone(),
            Kind::Ping(p) => p.cq.clone(),
        };
        let placeholder = Kind::Server {
            qps: Vec::new(),
            by_qpn: Default::default(),
            cq,
        };
        let kind = std::mem::replace(&mut th.kind, placeholder);
        th.kind = match kind {
            Kind::Client { mut qps, cq, .. } => {
                let q = qps.remove(0);
                client_qpn = Some(q.qp.qpn());
                Kind::Ping(Box::new(PingPong {
                    qp: q.qp,
                    cq,
                    sge: q.sge,
                    remote: q.remote,
                    ud: q.ud,
                    mr: mr_a.clone(),
                    watch: h + u64::from(w.size.max(1)) - 1,
                    recv: recv_of(mr_a)?,
                    starts: true,
                    phase: Phase::Post,
                    receives_posted: false,
                    sent: 0,
                    arrived: 0,
                    completed: 0,
                    posts: Vec::new(),
                }))
            }
            Kind::Server { mut qps, cq, .. } => {
                let (qp, _) = qps.remove(0);
                let ud = client_qpn.map(|qpn| UdTarget {
                    ah: Ah { av: av_a },
                    remote_qpn: qpn,
                    remote_qkey: 0x1111,
                });
                Kind::Ping(Box::new(PingPong {
                    qp,
                    cq,
                    sge: mr_b.sge(0, len)?,
                    remote: RemoteAddr {
                        addr: mr_a.addr() + h,
                        rkey: mr_a.rkey(),
                    },
                    ud: ud.filter(|_| w.qp_type == QpType::Ud),
                    mr: mr_b.clone(),
                    watch: h + u64::from(w.size.max(1)) - 1,
                    recv: recv_of(mr_b)?,
                    starts: false,
                    phase: Phase::Peer,
                    receives_posted: false,
                    sent: 0,
                    arrived: 0,
                    completed: 0,
                    posts: Vec::new(),
                }))
            }
            other => other,
        };
    }
    Ok(())
}

impl Run {
    /// Runs one side of a latency test until it has to wait.
    pub(super) fn run_ping(&mut self, t: usize, core: usize) {
        let (op, iters, size) = (self.w.op, self.w.iters, self.w.size);
        let inline = size <= self.w.inline_threshold && op.is_ping_pong();
        let host = self.threads[t].host;
        let Kind::Ping(p) = &mut self.threads[t].kind else {
            return;
        };
        if !p.receives_posted {
            p.receives_posted = true;
            if let Some(sge) = &p.recv {
                let room = p.qp.caps().max_recv_wr;
                let mut n = 0;
                while n < room
                    && p.qp
                        .post_recv(&[RecvWr {
                            wr_id: 0,
                            sg_list: std::slice::from_ref(sge),
                        }])
                        .is_ok()
                {
                    n += 1;
                }
                lock(&self.world.cpu).charge(core, self.costs.recv_post.mul(n));
            }
        }
        let mut wc = [blank_wc(); 16];
        loop {
            let now = lock(&self.world.cpu).t[core];
            if p.phase == Phase::Post {
                if p.sent == iters {
                    return;
                }
                let seq = p.sent + 1;
                if op == Op::Write {
                    // The byte the peer watches, as ib_write_lat changes it.
                    let _ = p.mr.write(u64::from(size) - 1, &[seq as u8]);
                }
                let opcode = match op {
                    Op::Send => WrOpcode::Send,
                    Op::Write => WrOpcode::RdmaWrite(p.remote),
                    Op::Read => WrOpcode::RdmaRead(p.remote),
                    Op::Cas => WrOpcode::AtomicCmpSwp {
                        remote: p.remote,
                        compare: p.sent,
                        swap: seq,
                    },
                    _ => WrOpcode::AtomicFetchAdd {
                        remote: p.remote,
                        add: 1,
                    },
                };
                let mut flags = SendFlags::SIGNALED;
                if inline {
                    flags = flags | SendFlags::INLINE;
                }
                let wr = SendWr {
                    wr_id: p.sent,
                    sg_list: std::slice::from_ref(&p.sge),
                    opcode,
                    flags,
                    ud: p.ud,
                };
                let call = self.calls;
                self.calls += 1;
                let traced = p.starts && self.world.timeline.is_some();
                if traced {
                    lock(&self.world.cpu).post = Some(call);
                }
                if p.qp.post_send(std::slice::from_ref(&wr)).is_err() {
                    self.error.get_or_insert(WcStatus::GeneralErr);
                    return;
                }
                if traced {
                    let qpn = p.qp.qpn();
                    note_post(&mut self.world, &self.posts, call, core, qpn, &[wr], now);
                }
                if p.starts {
                    p.posts.push(now);
                    self.first_post.get_or_insert(now);
                }
                p.sent += 1;
                p.phase = Phase::Cqe;
                let ct = lock(&self.world.cpu).t[core];
                if self.world.q.peek_time().is_some_and(|next| ct > next) {
                    self.world.q.push(ct, Ev::Wake { thread: t });
                    return;
                }
                continue;
            }
            let expected = if p.starts { p.sent } else { p.sent + 1 };
            if p.phase == Phase::Peer && op == Op::Write {
                // Spinning on the last byte of the buffer.
                lock(&self.world.cpu).charge(core, self.costs.poll_empty);
                let mut b = [0u8];
                let _ = p.mr.read(p.watch, &mut b);
                if b[0] != expected as u8 {
                    let addr = p.mr.addr() + p.watch;
                    self.world.watch(t, host, addr, 1);
                    return;
                }
                p.arrived = expected;
            } else if !(p.phase == Phase::Peer && p.arrived >= expected) {
                let (n, _) = poll_charged(&mut self.world, &self.costs, core, &p.cq, &mut wc);
                for w in &wc[..n] {
                    if w.status != WcStatus::Success {
                        self.error.get_or_insert(w.status);
                        return;
                    }
                    if w.opcode == WcOpcode::Recv {
                        p.arrived += 1;
                        if let Some(sge) = &p.recv {
                            let _ = p.qp.post_recv(&[RecvWr {
                                wr_id: 0,
                                sg_list: std::slice::from_ref(sge),
                            }]);
                            lock(&self.world.cpu).charge(core, self.costs.recv_post);
                        }
                    } else {
                        p.completed += 1;
                    }
                }
                let moved = match p.phase {
                    Phase::Cqe => p.completed == p.sent,
                    _ => p.arrived >= expected,
                };
                if !moved {
                    if n == 0 {
                        let (ring, len) = p.cq.ring();
                        self.world.watch(t, host, ring.get(), len);
                        return;
                    }
                    continue;
                }
            }
            let now = lock(&self.world.cpu).t[core];
            match p.phase {
                Phase::Cqe if op.is_ping_pong() => p.phase = Phase::Peer,
                Phase::Cqe => {
                    // One READ or atomic: post to completion.
                    if let Some(&at) = p.posts.last() {
                        self.latencies.push(now.since(at));
                    }
                    self.done_ops += 1;
                    self.last_done = now;
                    p.phase = Phase::Post;
                }
                _ => {
                    if p.starts {
                        // Half the round trip, as perftest reports it.
                        if let Some(&at) = p.posts.last() {
                            let rtt = now.since(at);
                            self.latencies.push(Duration::from_ps(rtt.as_ps() / 2));
                        }
                        self.done_ops += 1;
                        self.last_done = now;
                    }
                    p.phase = Phase::Post;
                }
            }
        }
    }
}
