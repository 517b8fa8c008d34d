//! RoCEv2 over UDP loopback between two processes, beside TCP loopback
//! doing the same exchange in the same run.
//!
//! ```text
//! CARGO_TARGET_DIR=/tmp/target-bench cargo bench -p doorbell-cli --bench udp
//! ```
//!
//! Four figures, each for doorbell and for TCP:
//! - **round trip of 8 B and of 4 KiB**: `doorbell pingpong` (the built
//!   binary, server and client as two processes, polling its CQ) against a
//!   TCP ping-pong of the same size between two processes (`TCP_NODELAY`),
//!   both sides polling non-blocking sockets, and again with blocking
//!   reads; the figure is the time per iteration (one round trip), the
//!   median of three runs;
//! - **64 KiB stream**: this process posts RDMA WRITEs of 64 KiB (MTU
//!   4096, 16 outstanding, all signalled) into the memory of a child
//!   process's NIC, against writes of 64 KiB to a TCP socket whose reader,
//!   the child, discards them;
//! - **8 B message rate**: 8-byte inline RDMA WRITEs, postlists of 16 with
//!   the last signalled, 128 in flight, against 8-byte `write`s to a
//!   `TCP_NODELAY` socket (one send call per message; the kernel may
//!   coalesce segments, as it would for an application).
//!
//! Stream and rate figures are the median of ten slices after a warm-up.
//! The child is this bench binary run again (`--peer ...`); the NICs use
//! 127.P.90.2 to .5 (P from the process id of the run, so that two runs
//! at once do not collide) and the control connections 127.0.0.1. The TCP reader
//! counts what it got and the WRITE target checks the bytes that landed, so
//! a figure is never taken from traffic that did not arrive; the run fails
//! on any retransmission.
//!
//! `cargo bench` passes `--bench`; without it (running the binary by hand,
//! or `cargo test --benches`) every run is cut short to check that the
//! benchmark works, and the figures mean nothing.
//!
//! Environment: `DOORBELL_BENCH_SECS`, seconds per stream or rate figure
//! (default 2).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use doorbell_cli::pingpong::{Dest, pattern_byte};
use doorbell_rt::{LiveNic, NicOptions, Port};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Mr, Pd, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RemoteAddr, SendFlags,
    SendWr, Wc, WcStatus, WrOpcode,
};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Bytes of one large WRITE or TCP write.
const BIG: usize = 64 << 10;
/// Large WRITEs in flight; the target's memory has this many slots.
const OUTSTANDING: usize = 16;
/// Bytes of one small message.
const SMALL: usize = 8;
/// Small WRITEs in flight.
const DEPTH: usize = 128;
/// Small WRITEs per postlist; the last of each is signalled.
const POSTLIST: usize = 16;
/// Path MTU of the stream QPs.
const MTU: u32 = 4096;
/// Slices per stream or rate figure.
const SLICES: usize = 10;
/// The NICs of the stream and rate figures.
const REQ_HOST: u8 = 2;
const TARGET_HOST: u8 = 3;
/// The NICs of `doorbell pingpong`.
const PP_SERVER: u8 = 4;
const PP_CLIENT: u8 = 5;

/// `127.P.90.host`, P from the process id of the run: the bench's, passed
/// to its children in `DOORBELL_BENCH_NET`.
fn lo(host: u8) -> [u8; 4] {
    let p = std::env::var("DOORBELL_BENCH_NET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 + (std::process::id() % 250) as u8);
    [127, p, 90, host]
}

fn lo_text(host: u8) -> String {
    std::net::Ipv4Addr::from(lo(host)).to_string()
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--peer") {
        return peer(&args[i + 1..]);
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", USAGE);
        return Ok(());
    }
    let quick = !args.iter().any(|a| a == "--bench");
    let secs: f64 = match std::env::var("DOORBELL_BENCH_SECS") {
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("DOORBELL_BENCH_SECS={v:?} is not a number"))?,
        Err(_) => 2.0,
    };
    let secs = if quick { 0.05 } else { secs };
    if !secs.is_finite() || secs <= 0.0 {
        return Err("DOORBELL_BENCH_SECS must be positive".into());
    }
    if quick {
        println!("(no --bench: a short smoke run; the figures mean nothing)");
    }
    machine();
    let runs = if quick { 1 } else { 3 };
    let mut others = Vec::new();
    // Round trips: doorbell, TCP polling, TCP blocking.
    let pp = |size: usize, iters: u32, others: &mut Vec<(String, f64)>| -> Result<[f64; 3]> {
        let iters = if quick { 50 } else { iters };
        let (d, o) = busy(|| (0..runs).map(|_| doorbell_pingpong(size, iters)).collect())?;
        others.push((format!("doorbell ping-pong {size} B"), o));
        let (t, o) = busy(|| (0..runs).map(|_| tcp_pingpong(size, iters, true)).collect())?;
        others.push((format!("TCP ping-pong {size} B polling"), o));
        let (b, o) = busy(|| {
            (0..runs)
                .map(|_| tcp_pingpong(size, iters, false))
                .collect()
        })?;
        others.push((format!("TCP ping-pong {size} B blocking"), o));
        Ok([median(d), median(t), median(b)])
    };
    let [d8, t8, b8] = pp(SMALL, 10_000, &mut others)?;
    let [d4k, t4k, b4k] = pp(4096, 3_000, &mut others)?;
    let ((write_big, write_small), o) = busy(|| doorbell_stream(secs))?;
    others.push(("doorbell WRITE streams".into(), o));
    let (tcp_big, o) = busy(|| tcp_stream(secs, BIG))?;
    others.push(("TCP 64 KiB stream".into(), o));
    let (tcp_small, o) = busy(|| tcp_stream(secs, SMALL))?;
    others.push(("TCP 8 B messages".into(), o));

    println!();
    println!("| figure | doorbell (RoCEv2 over UDP) | TCP | doorbell vs TCP |");
    println!("|---|---|---|---|");
    for (name, d, t, b) in [
        ("round trip, 8 B ping-pong", d8, t8, b8),
        ("round trip, 4 KiB ping-pong", d4k, t4k, b4k),
    ] {
        println!(
            "| {name} (both sides polling) | {d:.1} µs | {t:.1} µs | {:.1}× TCP's time |",
            d / t
        );
        println!(
            "| {name}, TCP with blocking reads | | {b:.1} µs | {:.1}× TCP's time |",
            d / b
        );
    }
    println!(
        "| 64 KiB stream | {:.3} GB/s ({}) | {:.3} GB/s ({}) | {:.1}% of TCP |",
        write_big.median() / 1e9,
        write_big.spread(1e9),
        tcp_big.median() / 1e9,
        tcp_big.spread(1e9),
        100.0 * write_big.median() / tcp_big.median()
    );
    println!(
        "| 8 B message rate | {:.3} Mmsg/s ({}) | {:.3} Mmsg/s ({}) | {:.1}% of TCP |",
        write_small.median() / 1e6,
        write_small.spread(1e6),
        tcp_small.median() / SMALL as f64 / 1e6,
        tcp_small.spread(1e6 * SMALL as f64),
        100.0 * write_small.median() / (tcp_small.median() / SMALL as f64)
    );
    println!();
    println!(
        "Ping-pong: median of {runs} runs. Streams and rates: median of {SLICES} slices of \
         {secs} s (slowest–fastest slice in brackets)."
    );
    let o: Vec<String> = others
        .iter()
        .map(|(n, o)| format!("{n} {:.0}%", o * 100.0))
        .collect();
    println!(
        "CPU share other processes used meanwhile (the machine may be shared): {}",
        o.join(", ")
    );
    Ok(())
}

/// CPU ticks: all CPUs busy and in total (/proc/stat), and this process's
/// with its reaped children (/proc/self/stat).
fn ticks() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let total: u64 = cpu.iter().take(8).sum();
    let idle = cpu.get(3)? + cpu.get(4)?;
    let me = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command's closing parenthesis: utime is the 14th
    // field of the line, so the 12th after it.
    let f: Vec<u64> = me
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let own = f.get(10)? + f.get(11)? + f.get(12)? + f.get(13)?;
    Some((total - idle, total, own))
}

/// Runs `f` (which must reap its children) and returns what it returned
/// with the share of all CPUs that other processes used meanwhile.
fn busy<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let a = ticks();
    let r = f()?;
    let share = match (a, ticks()) {
        (Some((b0, t0, o0)), Some((b1, t1, o1))) if t1 > t0 => {
            (b1 - b0).saturating_sub(o1 - o0) as f64 / (t1 - t0) as f64
        }
        _ => f64::NAN,
    };
    Ok((r, share))
}

const USAGE: &str = "\
usage: cargo bench -p doorbell-cli --bench udp [-- --help]

RoCEv2 over UDP loopback between two processes (doorbell pingpong, RDMA
WRITE streams of 64 KiB and of 8 B) beside TCP loopback doing the same
exchange, in the same run; prints a table with the ratios.

Without --bench (which cargo bench passes) the run is cut short: a smoke test.

environment:
  DOORBELL_BENCH_SECS   seconds per stream or rate figure (default 2)
";

/// What the figures ran on.
fn machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "machine: {cores} CPUs, {cpu:?}, Linux {}; load average at start {}",
        kernel.trim(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Rates of the slices of one figure, per second.
struct Rate(Vec<f64>);

impl Rate {
    fn median(&self) -> f64 {
        median(self.0.clone())
    }

    fn spread(&self, unit: f64) -> String {
        let min = self.0.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.0.iter().copied().fold(0.0, f64::max);
        format!("{:.3}–{:.3}", min / unit, max / unit)
    }
}

/// Runs `step` (which returns the units it completed) for a warm-up, then
/// for `SLICES` slices of `secs / SLICES` each.
fn timed(secs: f64, mut step: impl FnMut() -> Result<u64>) -> Result<Rate> {
    let warm = Instant::now() + Duration::from_secs_f64((secs / 5.0).min(0.3));
    while Instant::now() < warm {
        step()?;
    }
    let slice = Duration::from_secs_f64(secs / SLICES as f64);
    let mut rates = Vec::with_capacity(SLICES);
    for _ in 0..SLICES {
        let t = Instant::now();
        let mut n = 0;
        while t.elapsed() < slice {
            n += step()?;
        }
        rates.push(n as f64 / t.elapsed().as_secs_f64());
    }
    Ok(Rate(rates))
}

// ---------------------------------------------------------------------------
// Child processes.

/// A child process that is killed if the bench gives up on it.
struct Peer {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Peer {
    /// Runs this binary as `--peer <args>` and waits for its "ready <port>".
    fn start(args: &[&str]) -> Result<(Self, u16)> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--peer")
            .args(args)
            .env("DOORBELL_BENCH_NET", lo(0)[1].to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut p = Peer { child, out };
        let line = p.line()?;
        let port = line
            .strip_prefix("ready ")
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("peer {args:?} said {line:?}"))?;
        Ok((p, port))
    }

    fn line(&mut self) -> Result<String> {
        let mut s = String::new();
        self.out.read_line(&mut s)?;
        if s.is_empty() {
            return Err("the peer process ended".into());
        }
        Ok(s.trim_end().to_string())
    }

    fn finish(mut self) -> Result<()> {
        let st = self.child.wait()?;
        if !st.success() {
            return Err(format!("peer process failed: {st}").into());
        }
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The child's side: `tcp-echo SIZE`, `tcp-sink` or `write-target`.
fn peer(args: &[String]) -> Result<()> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    match args.first().map(String::as_str) {
        Some("tcp-echo") => {
            let size: usize = args.get(1).ok_or("tcp-echo SIZE poll|block")?.parse()?;
            let poll = args.get(2).map(String::as_str) == Some("poll");
            ready(&l)?;
            let (mut c, _) = l.accept()?;
            c.set_nodelay(true)?;
            c.set_nonblocking(poll)?;
            let mut buf = vec![0u8; size];
            while read_full(&mut c, &mut buf).is_ok() {
                write_full(&mut c, &buf)?;
            }
            Ok(())
        }
        Some("tcp-sink") => {
            ready(&l)?;
            let (mut c, _) = l.accept()?;
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0u64;
            loop {
                match c.read(&mut buf)? {
                    0 => break,
                    n => total += n as u64,
                }
            }
            writeln!(c, "{total}")?;
            Ok(())
        }
        Some("write-target") => write_target(&l),
        other => Err(format!("unknown peer role {other:?}").into()),
    }
}

fn ready(l: &TcpListener) -> Result<()> {
    println!("ready {}", l.local_addr()?.port());
    std::io::stdout().flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// doorbell.

/// `doorbell pingpong` of `size` bytes, `iters` times: µs per round trip
/// as the client reports it.
fn doorbell_pingpong(size: usize, iters: u32) -> Result<f64> {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port()
        .to_string();
    let (size, iters) = (size.to_string(), iters.to_string());
    let run = |addr: &str, peer: Option<&str>| -> Result<Child> {
        let mut c = Command::new(env!("CARGO_BIN_EXE_doorbell"));
        c.args(["--json", "pingpong", "--addr", addr, "-p", &port])
            .args(["-s", &size, "-n", &iters])
            .args(peer)
            // Over UDP, as the rest of this bench: not shared memory.
            .env("DOORBELL_SHM", "0")
            .stdout(Stdio::piped());
        Ok(c.spawn()?)
    };
    let server = run(&lo_text(PP_SERVER), None)?;
    let client = run(&lo_text(PP_CLIENT), Some("127.0.0.1"))?;
    let c = client.wait_with_output()?;
    let s = server.wait_with_output()?;
    if !(c.status.success() && s.status.success()) {
        return Err(format!(
            "doorbell pingpong failed: client {}, server {}",
            c.status, s.status
        )
        .into());
    }
    let v: serde_json::Value = serde_json::from_slice(&c.stdout)?;
    v["usec_per_iter"]
        .as_f64()
        .ok_or_else(|| "no usec_per_iter in the client's JSON".into())
}

/// One side's verbs objects.
struct Side {
    nic: Arc<LiveNic>,
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn side(name: &str, ip: [u8; 4], mr_len: usize, access: u32) -> Result<Side> {
    // Over UDP, not shared memory (scripts/bench-tools.sh measures that).
    let opts = NicOptions {
        shm: false,
        ..NicOptions::default()
    };
    let nic = Arc::new(LiveNic::start_with(name, ip, Port::Udp, opts)?);
    let ctx = Context::open(nic.clone())?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(256)?;
    let qp = pd.create_qp(&QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap: QpCaps {
            max_send_wr: DEPTH as u32,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: SMALL as u32,
        },
        sq_sig_all: false,
        srq: None,
    })?;
    let mr = pd.reg_mr(mr_len, Access(access))?;
    Ok(Side {
        nic,
        ctx,
        _pd: pd,
        cq,
        qp,
        mr,
    })
}

fn endpoint(s: &Side, psn: u32) -> RcEndpoint {
    RcEndpoint {
        gid: s.ctx.gid(),
        qpn: s.qp.qpn(),
        psn: Psn::new(psn),
    }
}

fn to_rc(d: &Dest) -> RcEndpoint {
    RcEndpoint {
        gid: d.gid,
        qpn: doorbell_types::Qpn::new(d.qpn),
        psn: Psn::new(d.psn),
    }
}

fn from_rc(e: &RcEndpoint) -> Dest {
    Dest {
        lid: 0,
        qpn: e.qpn.get(),
        psn: e.psn.get(),
        gid: e.gid,
    }
}

/// The child: a NIC whose memory the bench writes into. Over the control
/// connection it sends its address, rkey and buffer address, takes the
/// bench's address, then answers "check" with whether every 64 KiB slot
/// holds the pattern and "done" with its receive counters.
fn write_target(l: &TcpListener) -> Result<()> {
    let t = side(
        "bench-target",
        lo(TARGET_HOST),
        OUTSTANDING * BIG,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    )?;
    ready(l)?;
    let (c, _) = l.accept()?;
    let mut r = BufReader::new(c.try_clone()?);
    let mut w = c;
    let me = endpoint(&t, 0x00ab_cdef);
    w.write_all(&from_rc(&me).to_wire())?;
    writeln!(w, "{} {}", t.mr.rkey().raw(), t.mr.addr())?;
    let mut msg = [0u8; Dest::WIRE_LEN];
    r.read_exact(&mut msg)?;
    let them = to_rc(&Dest::from_wire(&msg)?);
    t.qp.connect_rc(&me, &them, MTU)?;
    writeln!(w, "connected")?;
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Ok(());
        }
        match line.trim() {
            "check" => {
                let mut buf = vec![0u8; OUTSTANDING * BIG];
                t.mr.read(0, &mut buf)?;
                let good = buf
                    .chunks(BIG)
                    .all(|s| s.iter().enumerate().all(|(i, &b)| b == pattern_byte(i)));
                writeln!(w, "{}", if good { "ok" } else { "bad" })?;
            }
            "done" => {
                let c = t.nic.counters(None).1;
                writeln!(
                    w,
                    "rx_packets {} tx_packets (ACKs) {} icrc_errors {} out_of_sequence {} \
                     duplicate_request {}",
                    c.rx_packets,
                    c.tx_packets,
                    c.rx_icrc_errors,
                    c.out_of_sequence,
                    c.duplicate_request
                )?;
                return Ok(());
            }
            other => return Err(format!("unknown command {other:?}").into()),
        }
    }
}

/// The 64 KiB WRITE stream and the 8 B WRITE rate into a child's NIC:
/// (bytes per second, messages per second).
fn doorbell_stream(secs: f64) -> Result<(Rate, Rate)> {
    let (mut p, port) = Peer::start(&["write-target"])?;
    let s = side("bench-requester", lo(REQ_HOST), BIG, Access::LOCAL_WRITE)?;
    let pattern: Vec<u8> = (0..BIG).map(pattern_byte).collect();
    s.mr.write(0, &pattern)?;
    let c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    let mut r = BufReader::new(c.try_clone()?);
    let mut w = c;
    let mut msg = [0u8; Dest::WIRE_LEN];
    r.read_exact(&mut msg)?;
    let them = to_rc(&Dest::from_wire(&msg)?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut it = line.split_whitespace().map(str::parse::<u64>);
    let (rkey, addr) = match (it.next(), it.next()) {
        (Some(Ok(k)), Some(Ok(a))) => (k as u32, a),
        _ => return Err(format!("bad target line {line:?}").into()),
    };
    let me = endpoint(&s, 0x00ff_ff00);
    w.write_all(&from_rc(&me).to_wire())?;
    s.qp.connect_rc(&me, &them, MTU)?;
    line.clear();
    r.read_line(&mut line)?;
    if line.trim() != "connected" {
        return Err(format!("target said {line:?}").into());
    }
    let remote = |off: u64| RemoteAddr {
        addr: addr + off,
        rkey: doorbell_types::Rkey::from_raw(rkey),
    };
    let mut wc = [Wc::default(); 32];
    let check = |w: &Wc| -> Result<()> {
        if w.status != WcStatus::Success {
            return Err(format!("WRITE failed: {w:?}").into());
        }
        Ok(())
    };

    // 64 KiB WRITEs, OUTSTANDING in flight, each signalled.
    let big_sge = [s.mr.sge(0, BIG as u32)?];
    let mut posted = 0u64;
    let post_big = |k: u64| {
        s.qp.post_send(&[SendWr {
            wr_id: k,
            sg_list: &big_sge,
            opcode: WrOpcode::RdmaWrite(remote((k % OUTSTANDING as u64) * BIG as u64)),
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
    };
    for _ in 0..OUTSTANDING {
        post_big(posted)?;
        posted += 1;
    }
    let big = timed(secs, || {
        let n = s.cq.poll(&mut wc)?;
        for w in &wc[..n] {
            check(w)?;
            post_big(posted)?;
            posted += 1;
        }
        if n == 0 {
            std::thread::yield_now();
        }
        Ok((n * BIG) as u64)
    })?;
    drain(&s.cq, OUTSTANDING, &mut wc)?;
    writeln!(w, "check")?;
    line.clear();
    r.read_line(&mut line)?;
    if line.trim() != "ok" {
        return Err(format!("the 64 KiB WRITEs did not land as sent: {line:?}").into());
    }

    // 8-byte inline WRITEs in postlists of POSTLIST, the last signalled,
    // DEPTH in flight.
    let small_sge = [s.mr.sge(0, SMALL as u32)?];
    let mut k = 0u64;
    let mut post_list = || -> Result<()> {
        let list: [SendWr<'_>; POSTLIST] = std::array::from_fn(|i| SendWr {
            wr_id: k + i as u64,
            sg_list: &small_sge,
            opcode: WrOpcode::RdmaWrite(remote(((k + i as u64) % 4096) * SMALL as u64)),
            flags: if i == POSTLIST - 1 {
                SendFlags::SIGNALED | SendFlags::INLINE
            } else {
                SendFlags::INLINE
            },
            ud: None,
        });
        k += POSTLIST as u64;
        s.qp.post_send(&list)?;
        Ok(())
    };
    for _ in 0..DEPTH / POSTLIST {
        post_list()?;
    }
    let small = timed(secs, || {
        let n = s.cq.poll(&mut wc)?;
        for w in &wc[..n] {
            check(w)?;
            post_list()?;
        }
        if n == 0 {
            std::thread::yield_now();
        }
        Ok((n * POSTLIST) as u64)
    })?;
    drain(&s.cq, DEPTH / POSTLIST, &mut wc)?;

    let c = s.nic.counters(None).1;
    writeln!(w, "done")?;
    line.clear();
    r.read_line(&mut line)?;
    p.line().ok();
    p.finish()?;
    println!(
        "requester: tx_packets {} retransmits {} local_ack_timeouts {} seq_naks {}; \
         target: {}",
        c.tx_packets,
        c.tx_retransmits,
        c.local_ack_timeout_err,
        c.packet_seq_err,
        line.trim()
    );
    if c.tx_retransmits != 0 {
        return Err("retransmissions during the run: the figures are not clean".into());
    }
    Ok((big, small))
}

/// Waits for the last `n` signalled WRITEs.
fn drain(cq: &Cq, n: usize, wc: &mut [Wc]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < n {
        let k = cq.poll(wc)?;
        if let Some(w) = wc[..k].iter().find(|w| w.status != WcStatus::Success) {
            return Err(format!("WRITE failed: {w:?}").into());
        }
        got += k;
        if Instant::now() > deadline {
            return Err("WRITEs did not complete within 10 s".into());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// TCP.

/// Reads exactly `buf.len()` bytes; on a non-blocking socket it spins
/// (yielding) while there is nothing to read, as pingpong polls its CQ.
fn read_full(c: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match c.read(&mut buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf`, spinning on a full non-blocking socket.
fn write_full(c: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match c.write(&buf[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A TCP ping-pong of `size` bytes, `iters` times, both sides polling
/// non-blocking sockets (`poll`) or blocking in `read`: µs per round trip.
fn tcp_pingpong(size: usize, iters: u32, poll: bool) -> Result<f64> {
    let mode = if poll { "poll" } else { "block" };
    let (p, port) = Peer::start(&["tcp-echo", &size.to_string(), mode])?;
    let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    c.set_nodelay(true)?;
    c.set_nonblocking(poll)?;
    let mut buf = vec![0x5a; size];
    // One untimed round trip, as pingpong's first post is untimed.
    write_full(&mut c, &buf)?;
    read_full(&mut c, &mut buf)?;
    let t = Instant::now();
    for _ in 0..iters {
        write_full(&mut c, &buf)?;
        read_full(&mut c, &mut buf)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
    c.shutdown(Shutdown::Write)?;
    p.finish()?;
    Ok(us)
}

/// Writes of `size` bytes to a child that discards them, TCP_NODELAY:
/// bytes per second. The child's count of what it read must match.
fn tcp_stream(secs: f64, size: usize) -> Result<Rate> {
    let (p, port) = Peer::start(&["tcp-sink"])?;
    let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    c.set_nodelay(true)?;
    let buf = vec![0x5a; size];
    let mut sent = 0u64;
    let rate = timed(secs, || {
        c.write_all(&buf)?;
        sent += size as u64;
        Ok(size as u64)
    })?;
    c.shutdown(Shutdown::Write)?;
    let mut got = String::new();
    c.read_to_string(&mut got)?;
    p.finish()?;
    if got.trim().parse::<u64>().ok() != Some(sent) {
        return Err(format!("TCP reader got {got:?} bytes of {sent}").into());
    }
    Ok(rate)
}
