//! Same inputs and seed, same output, bit for bit (DESIGN invariant 4).

use doorbell_sim::{Op, Workload};

use crate::cib;

fn workload(seed: u64) -> Workload {
    Workload {
        op: Op::Send,
        threads: 4,
        qps: 8,
        iters: 300,
        postlist: 2,
        signal_every: 2,
        seed,
        ..Workload::default()
    }
}

#[test]
fn the_same_seed_gives_the_same_event_log() {
    let p = cib();
    let a = workload(7).event_log(&p).unwrap();
    let b = workload(7).event_log(&p).unwrap();
    assert!(a.len() > 5_000, "a real run: {} events", a.len());
    assert_eq!(a, b);
    let ra = workload(7).run(&p).unwrap();
    let rb = workload(7).run(&p).unwrap();
    assert_eq!(
        serde_json::to_string(&ra).unwrap(),
        serde_json::to_string(&rb).unwrap()
    );
}

#[test]
fn another_seed_gives_another_run() {
    let p = cib();
    assert_ne!(
        workload(7).event_log(&p).unwrap(),
        workload(8).event_log(&p).unwrap()
    );
}
