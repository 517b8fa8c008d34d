//! Prints the rate of a bare single-producer single-consumer hand-off of
//! 64-byte records between two threads, in millions a second: the live
//! bench's baseline for 8-byte WRITEs, run alone as a probe of where the
//! machine has put the process's threads. On the 2-core VM of
//! `docs/benchmarks.md` it moves several-fold within minutes (about 8
//! against about 45–65 M/s), and with it every figure that crosses
//! between cores; `scripts/bench-tools.sh` prints it beside its rounds.
//!
//! ```text
//! cargo run --release -p doorbell-rt --example handoff [-- SECONDS]
//! ```
//!
//! SECONDS (default 0.3) is how long to measure, after a tenth as long
//! of warm-up.

use std::time::{Duration, Instant};

#[path = "../benches/live/handoff.rs"]
mod handoff;

fn main() {
    let arg = std::env::args().nth(1);
    let secs = match arg.as_deref().map(str::parse::<f64>) {
        None => 0.3,
        Some(Ok(s)) if s > 0.0 && s <= 60.0 => s,
        Some(_) => {
            eprintln!(
                "handoff: SECONDS must be a number above 0 and at most 60, as in `handoff 0.5`; got {:?}",
                arg.unwrap_or_default()
            );
            std::process::exit(2);
        }
    };
    let run = Duration::from_secs_f64(secs);
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
