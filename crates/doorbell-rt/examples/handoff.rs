//! Prints the rate of a bare single-producer single-consumer hand-off of
//! 64-byte records between two threads, in millions a second: the live
//! bench's baseline for 8-byte WRITEs, run alone as a probe of where the
//! machine has put the process's threads. On the 2-core VM of
//! `docs/benchmarks.md` it moves several-fold within minutes (about 8
//! against about 45–65 M/s), and with it every figure that crosses
//! between cores; `scripts/bench-tools.sh` prints it beside its rounds.
//!
//! With `--line` it prints instead the round trip of one cache line
//! between two threads, in nanoseconds: one thread writes a number, the
//! other, spinning, writes it back on a line of its own, and the first
//! spins until it sees it. That is the least a message between two cores
//! waits, once each way; a one-way latency between two processes on one
//! host is a few such crossings besides the work.
//!
//! ```text
//! cargo run --release -p doorbell-rt --example handoff [-- [--line] SECONDS]
//! ```
//!
//! SECONDS (default 0.3) is how long to measure, after a tenth as long
//! of warm-up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "../benches/live/handoff.rs"]
mod handoff;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let line = args.first().is_some_and(|a| a == "--line");
    if line {
        args.remove(0);
    }
    let secs = match args.as_slice() {
        [] => 0.3,
        [a] => match a.parse::<f64>() {
            Ok(s) if s > 0.0 && s <= 60.0 => s,
            _ => usage(&args),
        },
        _ => usage(&args),
    };
    let run = Duration::from_secs_f64(secs);
    if line {
        println!("{:.0}", line_round_trip(run));
        return;
    }
    let rate = handoff::with_handoff(|step| {
        let warm = Instant::now();
        while warm.elapsed() < run / 10 {
            step();
        }
        let t0 = Instant::now();
        let mut n = 0u64;
        while t0.elapsed() < run {
            n += step();
        }
        n as f64 / t0.elapsed().as_secs_f64()
    });
    println!("{:.1}", rate / 1e6);
}

/// Says what the arguments should be, and exits.
fn usage(args: &[String]) -> ! {
    eprintln!(
        "handoff: give at most `--line` and SECONDS, a number above 0 and at most 60, as in `handoff 0.5` or `handoff --line 0.5`; got {args:?}"
    );
    std::process::exit(2);
}

/// One atomic on a cache line of its own.
#[repr(align(64))]
struct Line(AtomicU64);

/// Rounds between two looks at the clock.
const ROUNDS: u64 = 1024;

/// The round trip of a cache line between two threads, in nanoseconds,
/// measured for `run` after a tenth as long of warm-up.
fn line_round_trip(run: Duration) -> f64 {
    let (ping, pong) = (Line(AtomicU64::new(0)), Line(AtomicU64::new(0)));
    // Written by the echoing thread's peer alone when it is done.
    const STOP: u64 = u64::MAX;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut seen = 0;
            loop {
                let v = ping.0.load(Ordering::Acquire);
                if v == STOP {
                    return;
                }
                if v != seen {
                    seen = v;
                    pong.0.store(v, Ordering::Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let mut next = 0u64;
        let mut bounce = |rounds: u64| {
            for _ in 0..rounds {
                next += 1;
                ping.0.store(next, Ordering::Release);
                while pong.0.load(Ordering::Acquire) != next {
                    std::hint::spin_loop();
                }
            }
        };
        let warm = Instant::now();
        while warm.elapsed() < run / 10 {
            bounce(ROUNDS);
        }
        let t0 = Instant::now();
        let mut n = 0u64;
        while t0.elapsed() < run {
            bounce(ROUNDS);
            n += ROUNDS;
        }
        let ns = t0.elapsed().as_nanos() as f64 / n as f64;
        ping.0.store(STOP, Ordering::Release);
        ns
    })
}
