//! Faults on the simulated wire (`[network.faults]`): decided by a seeded
//! `doorbell_fault` stage per direction, delays in virtual time, so a
//! faulty run is as deterministic as a clean one (DESIGN invariant 4).

use doorbell_sim::{Op, Profile, WireFaults, Workload};

use crate::cib;

fn lossy(seed: u64, loss: f64) -> Profile {
    let mut p = cib();
    let mut f = WireFaults::new(seed);
    f.loss = loss;
    f.duplicate = 0.01;
    f.reorder = 0.01;
    f.corrupt = 0.01;
    f.max_delay_ns = 20_000.0;
    p.network.faults = Some(f);
    p
}

fn rc(op: Op) -> Workload {
    Workload {
        op,
        size: 4096,
        qps: 4,
        threads: 2,
        iters: 100,
        seed: 3,
        ..Workload::default()
    }
}

#[test]
fn the_same_seed_and_faults_give_the_same_event_log_and_report() {
    let p = lossy(11, 0.05);
    let w = rc(Op::Send);
    let a = w.event_log(&p).unwrap();
    assert_eq!(a, w.event_log(&p).unwrap());
    // The faults did something: held frames came due (kind 5), and the run
    // differs from the clean one and from another fault seed.
    assert!(a.iter().any(|l| l.kind == 5), "no frame was held back");
    assert_ne!(a, w.event_log(&cib()).unwrap());
    assert_ne!(a, w.event_log(&lossy(12, 0.05)).unwrap());
    let ra = serde_json::to_string(&w.run(&p).unwrap()).unwrap();
    let rb = serde_json::to_string(&w.run(&p).unwrap()).unwrap();
    assert_eq!(ra, rb);
}

#[test]
fn five_percent_loss_still_completes_rc_workloads() {
    for op in [Op::Write, Op::Send, Op::Read, Op::Faa] {
        let w = Workload {
            size: if matches!(op, Op::Faa) { 8 } else { 4096 },
            ..rc(op)
        };
        let clean = w.run(&cib()).unwrap();
        let r = w
            .run(&lossy(5, 0.05))
            .unwrap_or_else(|e| panic!("{op:?} under 5% loss: {e}"));
        // Retransmissions cost time: the faulty run is slower, not wrong.
        assert!(
            r.simulated_ns > clean.simulated_ns,
            "{op:?}: {} ns with loss, {} ns clean",
            r.simulated_ns,
            clean.simulated_ns
        );
    }
}

#[test]
fn wire_faults_round_trip_through_the_profile_toml() {
    let p = lossy(1, 0.05);
    let q = Profile::parse("copy", &p.to_toml()).unwrap();
    assert_eq!(q.network.faults, p.network.faults);
    // Without faults the printed profile is what it was.
    assert!(!cib().to_toml().contains("faults"));
    let mut bad = lossy(1, 0.7);
    bad.network.faults.as_mut().unwrap().reorder = 0.5;
    assert!(Profile::parse("bad", &bad.to_toml()).is_err());
}
