//! perftest's latency test in the simulator (`Test::Lat`).

use doorbell_hif::QpType;
use doorbell_sim::workload::Test;
use doorbell_sim::{Op, Workload};

use crate::cib;

fn lat(op: Op) -> Workload {
    Workload {
        op,
        test: Test::Lat,
        iters: 300,
        ..Workload::default()
    }
}

#[test]
fn one_read_or_atomic_at_a_time_takes_the_unloaded_critical_path() {
    for op in [Op::Read, Op::Cas, Op::Faa] {
        let r = lat(op).run(&cib()).unwrap();
        let d = r.latency.expect("a latency distribution");
        assert_eq!(d.iterations, 300);
        let typical_ns = d.t_typical_us * 1000.0;
        assert!(
            (typical_ns - r.steps.total).abs() <= 1.0,
            "{op:?}: median {typical_ns} ns, critical path {} ns",
            r.steps.total
        );
        assert!(d.t_min_us <= d.t_typical_us && d.t_typical_us <= d.p99_us);
        assert!(d.p99_us <= d.p99_9_us && d.p99_9_us <= d.t_max_us);
    }
}

#[test]
fn a_write_ping_pong_is_half_a_round_trip_and_under_a_writes_completion() {
    let r = lat(Op::Write).run(&cib()).unwrap();
    let d = r.latency.unwrap();
    // One way: the WRITE lands before its ACK comes back, so half the
    // round trip is less than a post's completion, and more than the part
    // of it before the wire.
    let total = r.steps.total;
    let before_wire = r.steps.wqe_write + r.steps.doorbell + r.steps.payload_dma_read;
    let typical = d.t_typical_us * 1000.0;
    assert!(
        typical < total && typical > before_wire,
        "{typical} ns, path {total} ns"
    );
    // Unloaded and deterministic: every iteration takes the same time.
    assert!(d.t_stdev_us < 0.001, "{d:?}");
    // One message outstanding: the rate is one per round trip.
    let rtt_us = 2.0 * d.t_avg_us;
    assert!((r.msg_rate_mops - 1.0 / rtt_us).abs() / r.msg_rate_mops < 0.02);
}

#[test]
fn send_ping_pongs_run_on_rc_and_ud() {
    for qp_type in [QpType::Rc, QpType::Ud] {
        let w = Workload {
            qp_type,
            ..lat(Op::Send)
        };
        let r = w.run(&cib()).unwrap();
        let d = r.latency.unwrap();
        assert_eq!(d.iterations, 300, "{qp_type:?}");
        assert!(
            d.t_typical_us > 0.3 && d.t_typical_us < 5.0,
            "{qp_type:?}: {d:?}"
        );
    }
    // A bigger message takes longer, one way.
    let small = lat(Op::Send).run(&cib()).unwrap().latency.unwrap();
    let big = Workload {
        size: 16384,
        mtu: 4096,
        ..lat(Op::Send)
    }
    .run(&cib())
    .unwrap()
    .latency
    .unwrap();
    assert!(big.t_typical_us > small.t_typical_us + 0.5);
}

#[test]
fn the_json_keeps_its_keys_and_adds_perftests() {
    let r = lat(Op::Read).run(&cib()).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    for k in [
        "msg_rate_mops",
        "bandwidth_gbps",
        "latency_ns",
        "per_post",
        "steps",
    ] {
        assert!(v.get(k).is_some(), "{k}");
    }
    assert_eq!(v["workload"]["test"], "lat");
    for k in [
        "t_min_us",
        "t_max_us",
        "t_typical_us",
        "t_avg_us",
        "t_stdev_us",
        "p99_us",
        "p99_9_us",
    ] {
        assert!(v["latency"][k].as_f64().is_some(), "{k}");
    }
    // The bandwidth test has no distribution.
    let bw = Workload::default().run(&cib()).unwrap();
    assert!(serde_json::to_value(&bw).unwrap().get("latency").is_none());
}

#[test]
fn latency_tests_refuse_what_perftest_would() {
    for w in [
        Workload {
            qps: 2,
            ..lat(Op::Write)
        },
        Workload {
            postlist: 4,
            ..lat(Op::Write)
        },
        Workload {
            size: 0,
            ..lat(Op::Write)
        },
        lat(Op::WriteImm),
    ] {
        assert!(w.run(&cib()).is_err(), "{w:?}");
    }
}

/// Nothing is lost in an unloaded simulation, so nothing is sent twice:
/// every 64 KiB message reads its payload once, however long the run.
/// Adaptive retransmission used to fire here: every round trip took the
/// same time, RTTVAR decayed to nothing, and its timeout came down to
/// SRTT, a picosecond before the ACK. Now it is SRTT + max(floor, 4
/// RTTVAR), with a 16 µs floor.
#[test]
fn long_ping_pongs_never_resend() {
    for op in [Op::Write, Op::Send] {
        let w = Workload {
            size: 64 * 1024,
            iters: 1000,
            ..lat(op)
        };
        let r = w.run(&cib()).unwrap();
        assert_eq!(
            r.per_post.payload_dma_reads, 1.0,
            "{op:?}: {:?}",
            r.per_post
        );
    }
}
