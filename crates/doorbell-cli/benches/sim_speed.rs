//! How fast the simulator runs, beside the live runtime on the same
//! workload.
//!
//! ```text
//! cargo bench -p doorbell-cli --bench sim_speed            # 1 000 000 posts
//! DOORBELL_SIM_POSTS=200000 cargo bench -p doorbell-cli --bench sim_speed
//! ```
//!
//! Prints simulated TLPs per wall-clock second, the wall time to simulate
//! one million posts, and the live runtime's post rate for the same
//! workload (8-byte inline RDMA WRITEs, postlist 16, one in 16 signalled,
//! one QP); then the TLP rate of 16 KiB WRITEs by pointer, whose posts cross
//! the link in many TLPs each; then what a post costs against the number
//! of QPs: the same 100 000 posts (`DOORBELL_SIM_SPREAD_POSTS`) on one QP
//! and spread round-robin over 1 000 QPs (`DOORBELL_SIM_SPREAD_QPS`), setup
//! not counted, and their ratio. Without `--bench` (as `cargo test` runs
//! it) it does a short smoke run.

use std::time::Instant;

use doorbell_cli::seed::{SeedConfig, SeedOptions};
use doorbell_sim::{Op, Profile, Workload};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let posts: u64 = std::env::var("DOORBELL_SIM_POSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { 1_000_000 } else { 20_000 });
    let profile = Profile::builtin("connectib-haswell")
        .expect("built in")
        .expect("valid");
    let w = Workload {
        op: Op::Write,
        size: 8,
        inline_threshold: 8,
        postlist: 16,
        signal_every: 16,
        blueflame: true,
        iters: posts,
        tx_depth: 256,
        ..Workload::default()
    };
    let t = Instant::now();
    let r = w.run(&profile).expect("the workload runs");
    let wall = t.elapsed().as_secs_f64();
    // Every TLP the run simulated, on both hosts' links, both directions.
    let tlps = r.tlps as f64;
    println!("| figure | value |");
    println!("|---|---|");
    println!("| posts simulated | {posts} |");
    println!("| simulated time | {:.3} ms |", r.simulated_ns / 1e6);
    println!("| events | {} |", r.events);
    println!("| wall time | {wall:.3} s |");
    println!("| simulated TLPs (both links) | {tlps:.0} |");
    println!(
        "| simulated TLPs per wall second | {:.2} M |",
        tlps / wall / 1e6
    );
    println!(
        "| wall time per million posts | {:.3} s |",
        wall / posts as f64 * 1e6
    );
    println!(
        "| simulated posts per wall second | {:.3} M |",
        posts as f64 / wall / 1e6
    );
    // TLPs per post grow with the message: 16 KiB WRITEs by pointer cross the
    // link in dozens of TLPs each, so this run shows the per-TLP cost.
    let bulk_posts = (posts / 10).max(2_000);
    let bulk = Workload {
        size: 16384,
        inline_threshold: 0,
        iters: bulk_posts,
        ..w.clone()
    };
    let t = Instant::now();
    let rb = bulk.run(&profile).expect("the bulk workload runs");
    let bulk_wall = t.elapsed().as_secs_f64();
    println!("| 16 KiB WRITE posts simulated | {bulk_posts} |");
    println!("| 16 KiB WRITE: TLPs simulated | {} |", rb.tlps);
    println!(
        "| 16 KiB WRITE: simulated TLPs per wall second | {:.2} M |",
        rb.tlps as f64 / bulk_wall / 1e6
    );
    // What a post costs as QPs are added: the same posts on one QP and
    // spread round-robin over many. Each run's setup (creating and
    // connecting the QPs) is timed on its own with one post per QP and
    // taken off.
    let spread_posts: u64 = env_or(
        "DOORBELL_SIM_SPREAD_POSTS",
        if bench { 100_000 } else { 4_000 },
    );
    let spread_qps: u32 = env_or("DOORBELL_SIM_SPREAD_QPS", if bench { 1_000 } else { 100 });
    let per_post = |qps: u32| {
        let iters = (spread_posts / u64::from(qps)).max(2);
        let spread = Workload {
            qps,
            iters,
            ..w.clone()
        };
        let t = Instant::now();
        spread.run(&profile).expect("the spread workload runs");
        let full = t.elapsed().as_secs_f64();
        let t = Instant::now();
        Workload { iters: 1, ..spread }
            .run(&profile)
            .expect("the setup-only workload runs");
        let setup = t.elapsed().as_secs_f64();
        let posts = (iters - 1) * u64::from(qps);
        ((full - setup).max(0.0) / posts as f64, setup)
    };
    let (one, one_setup) = per_post(1);
    let (many, many_setup) = per_post(spread_qps);
    println!(
        "| posts on 1 QP: wall time per post | {:.3} µs |",
        one * 1e6
    );
    println!(
        "| posts over {spread_qps} QPs: wall time per post | {:.3} µs |",
        many * 1e6
    );
    println!(
        "| setup (not counted): 1 QP, {spread_qps} QPs | {one_setup:.3} s, {many_setup:.3} s |"
    );
    println!(
        "| per-post cost, {spread_qps} QPs / 1 QP | {:.2}x |",
        many / one
    );
    // The live runtime on the same workload: the seed's postlist row runs
    // 8-byte WRITEs in postlists of 16 through two live NICs.
    let live_posts = (posts / 10).clamp(1_024, 100_000) as u32;
    let o = SeedOptions {
        posts: live_posts,
        postlist: 16,
        signal_every: 16,
        ..SeedOptions::default()
    };
    let t = Instant::now();
    doorbell_cli::seed::measure(SeedConfig::Postlist(16), &o).expect("the live run works");
    let live = t.elapsed().as_secs_f64();
    println!(
        "| live runtime posts per wall second | {:.3} M |",
        f64::from(live_posts) / live / 1e6
    );
    println!(
        "| simulator / live | {:.2}x |",
        (posts as f64 / wall) / (f64::from(live_posts) / live)
    );
}
