//! What thread domains save: with more threads than dedicated bfregs, the
//! others share medium bfregs and every post through one takes its lock;
//! with a thread domain per thread no post does, and a post costs the CPU
//! less.

use doorbell_sim::{Report, Workload};

use crate::cib;

fn sixteen_threads(thread_domains: bool) -> Report {
    Workload {
        threads: 16,
        qps: 16,
        iters: 400,
        thread_domains,
        ..Workload::default()
    }
    .run(&cib())
    .unwrap()
}

/// CPU time of the posting cores per completed WR, ns.
fn cpu_ns_per_op(r: &Report) -> f64 {
    let busy: f64 = r.utilisation.cores.iter().sum();
    busy * r.simulated_ns / (r.workload.iters * u64::from(r.workload.qps)) as f64
}

#[test]
fn thread_domains_take_no_bfreg_lock_and_cost_less_cpu_per_post() {
    let plain = sixteen_threads(false);
    let td = sixteen_threads(true);
    // 16 QPs of 16 bfregs, 4 low latency: 12 QPs on the 11 medium ones,
    // every one of their posts locked.
    assert_eq!(plain.locked_posts, 12 * 400);
    assert!(plain.lock_wait_ns > 0.0, "two QPs share bfreg 1 and wait");
    assert_eq!(td.locked_posts, 0);
    assert_eq!(td.lock_wait_ns, 0.0);
    let (a, b) = (cpu_ns_per_op(&plain), cpu_ns_per_op(&td));
    assert!(b < a, "TD {b:.1} ns of CPU per WR, without {a:.1}");
    // The wire work is the same.
    assert_eq!(plain.per_post, td.per_post);
}

#[test]
fn one_thread_gains_nothing_from_a_thread_domain() {
    // A single QP already has a dedicated, lockless bfreg.
    let w = Workload {
        iters: 300,
        ..Workload::default()
    };
    let plain = w.run(&cib()).unwrap();
    let td = Workload {
        thread_domains: true,
        ..w
    }
    .run(&cib())
    .unwrap();
    assert_eq!((plain.locked_posts, td.locked_posts), (0, 0));
    assert_eq!(plain.msg_rate_mops, td.msg_rate_mops);
}
