//! The timeline of a run (`RunOptions::trace`): its tracks, each work
//! request's steps in order inside its span, the resources' slices, and
//! the unloaded post's steps against the report's critical path.

use std::collections::BTreeMap;

use doorbell_hif::QpType;
use doorbell_sim::{Op, RunOptions, Workload};
use serde_json::Value;

use crate::cib;

fn traced(w: &Workload) -> (doorbell_sim::Report, Vec<Value>) {
    let out = w
        .run_with(
            &cib(),
            RunOptions {
                trace: true,
                ..RunOptions::default()
            },
        )
        .unwrap();
    let json: Value = serde_json::from_slice(&out.trace.unwrap().to_json()).unwrap();
    (out.report, json["traceEvents"].as_array().unwrap().clone())
}

/// Each work request: its name and args, and its steps as (name, begin
/// µs, end µs), from the async spans of one id.
struct Wr {
    args: Value,
    begin: f64,
    end: f64,
    steps: Vec<(String, f64, f64)>,
}

fn work_requests(ev: &[Value]) -> Vec<Wr> {
    let mut by_id: BTreeMap<String, Wr> = BTreeMap::new();
    let mut open: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    let mut order = Vec::new();
    for e in ev.iter().filter(|e| e["cat"] == "post") {
        let id = e["id"].as_str().unwrap().to_string();
        let name = e["name"].as_str().unwrap().to_string();
        let ts = e["ts"].as_f64().unwrap();
        let stack = open.entry(id.clone()).or_default();
        match e["ph"].as_str().unwrap() {
            "b" => {
                if stack.is_empty() {
                    assert!(name.starts_with("WR "), "a step outside its WR: {e}");
                    order.push(id.clone());
                    by_id.insert(
                        id.clone(),
                        Wr {
                            args: e["args"].clone(),
                            begin: ts,
                            end: f64::NAN,
                            steps: Vec::new(),
                        },
                    );
                } else {
                    assert_eq!(stack.len(), 1, "steps do not nest in each other: {e}");
                }
                stack.push((name, ts));
            }
            "e" => {
                let (n, b) = stack.pop().expect("an end with nothing open");
                assert_eq!(n, name, "ends out of order");
                let wr = by_id.get_mut(&id).unwrap();
                if stack.is_empty() {
                    wr.end = ts;
                } else {
                    wr.steps.push((n, b, ts));
                }
            }
            other => panic!("a {other} event in a WR's span"),
        }
    }
    assert!(open.values().all(Vec::is_empty), "spans left open");
    order
        .into_iter()
        .map(|id| by_id.remove(&id).unwrap())
        .collect()
}

fn track_names(ev: &[Value]) -> Vec<String> {
    ev.iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_wrs_steps_follow_each_other_inside_its_span() {
    let w = Workload {
        postlist: 4,
        signal_every: 4,
        iters: 64,
        blueflame: false,
        ..Workload::default()
    };
    let (_, ev) = traced(&w);
    let wrs = work_requests(&ev);
    assert_eq!(wrs.len(), 64, "one span per WR");
    for (i, wr) in wrs.iter().enumerate() {
        assert_eq!(wr.args["wr_id"], i as u64);
        assert_eq!(
            wr.args["qpn"].as_str().map(|s| s.starts_with("0x")),
            Some(true)
        );
        let names: Vec<&str> = wr.steps.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "0 WQE write",
                "1 doorbell MMIO",
                "2 WQE DMA read",
                "3 payload DMA read",
                "4 wire and ACK",
                "5 CQE DMA write and poll"
            ],
            "WR {i}"
        );
        assert_eq!(wr.steps[0].1, wr.begin);
        assert_eq!(wr.steps[5].2, wr.end);
        for pair in wr.steps.windows(2) {
            assert_eq!(
                pair[0].2, pair[1].1,
                "WR {i}: {} does not start where {} ends",
                pair[1].0, pair[0].0
            );
        }
        assert!(wr.steps.iter().all(|s| s.2 >= s.1));
        // Rung by doorbell, the WQE is read: step 2 takes time.
        assert!(wr.steps[2].2 > wr.steps[2].1, "WR {i}: no WQE read");
    }
    // The four WRs of a post_send share its WQE write and doorbell.
    assert_eq!(wrs[4].steps[1], wrs[7].steps[1]);
    assert_ne!(wrs[3].steps[1], wrs[4].steps[1]);
    // Their packets leave one after the other.
    assert!(wrs[5].steps[4].1 > wrs[4].steps[4].1);
}

#[test]
fn the_unloaded_posts_steps_are_the_reports() {
    for w in [
        Workload::default(),
        Workload {
            blueflame: false,
            ..Workload::default()
        },
        Workload {
            inline_threshold: 64,
            ..Workload::default()
        },
        Workload {
            op: Op::Read,
            ..Workload::default()
        },
        Workload {
            op: Op::Send,
            ..Workload::default()
        },
        Workload {
            qp_type: QpType::Ud,
            op: Op::Send,
            ..Workload::default()
        },
    ] {
        let w = Workload { iters: 1, ..w };
        let (r, ev) = traced(&w);
        let wrs = work_requests(&ev);
        assert_eq!(wrs.len(), 1);
        let st = &r.steps;
        let want = [
            st.wqe_write,
            st.doorbell,
            st.wqe_dma_read,
            st.payload_dma_read,
            st.wire_and_ack,
            st.cqe_dma_write,
        ];
        let got: Vec<f64> = wrs[0].steps.iter().map(|s| (s.2 - s.1) * 1000.0).collect();
        assert_eq!(got.len(), 6, "{:?} {:?}", w.qp_type, w.op);
        for (g, want) in got.iter().zip(want) {
            assert!(
                (g - want).abs() < 0.01,
                "{:?} {:?}: {got:?} against {want:?}",
                w.qp_type,
                w.op
            );
        }
        assert!(((wrs[0].end - wrs[0].begin) * 1000.0 - st.total).abs() < 0.01);
    }
}

#[test]
fn every_resource_has_its_track_and_busy_slices_do_not_overlap() {
    let w = Workload {
        size: 4096,
        iters: 32,
        ..Workload::default()
    };
    let (_, ev) = traced(&w);
    let names = track_names(&ev);
    for want in [
        "CPU core 0",
        "PCIe host → NIC",
        "PCIe NIC → host",
        "NIC DMA engine",
        "NIC processing unit 0",
        "A → B",
        "B → A",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "no track {want}: {names:?}"
        );
    }
    // Slices of one track: sorted by start, none starts before the one
    // before it ends (TLPs serialise on their direction, frames on the
    // port, the DMA engine issues one at a time).
    type Slices = Vec<(f64, f64, String)>;
    let mut by_track: BTreeMap<(u64, u64), Slices> = BTreeMap::new();
    for e in ev.iter().filter(|e| e["ph"] == "X") {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let ts = e["ts"].as_f64().unwrap();
        let cat = e["cat"].as_str().unwrap().to_string();
        by_track
            .entry(key)
            .or_default()
            .push((ts, ts + e["dur"].as_f64().unwrap(), cat));
    }
    let mut kinds = std::collections::BTreeSet::new();
    for (track, slices) in &by_track {
        let cat = &slices[0].2;
        kinds.insert(cat.clone());
        if cat == "cpu" || cat == "lock" {
            continue; // a lock wait lies inside its post_send
        }
        for pair in slices.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1 - 1e-9,
                "{track:?} ({cat}): a slice at {} starts before the one at {} ends ({})",
                pair[1].0,
                pair[0].0,
                pair[0].1
            );
        }
    }
    for want in ["tlp", "dma", "nic", "wire", "cpu"] {
        assert!(kinds.contains(want), "no {want} slices: {kinds:?}");
    }
    // A 4 KiB payload read is 8 MRds of 512 B (the profile's read request
    // size) answered by CplDs: both kinds are on the link.
    let tlps: Vec<&str> = ev
        .iter()
        .filter(|e| e["cat"] == "tlp")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(tlps.iter().any(|n| n.starts_with("MRd")));
    assert!(tlps.iter().any(|n| n.starts_with("CplD")));
    assert!(tlps.iter().any(|n| n.starts_with("MWr")));
}

#[test]
fn lock_waits_on_shared_bfregs_are_on_the_cores() {
    let w = Workload {
        threads: 16,
        qps: 16,
        iters: 20,
        ..Workload::default()
    };
    let (r, ev) = traced(&w);
    assert!(r.lock_wait_ns > 0.0, "the workload should wait for locks");
    let waits: Vec<&Value> = ev
        .iter()
        .filter(|e| e["cat"] == "lock" && e["name"] == "bfreg lock wait")
        .collect();
    assert!(!waits.is_empty());
    let total_us: f64 = waits.iter().map(|e| e["dur"].as_f64().unwrap()).sum();
    assert!(
        (total_us * 1000.0 - r.lock_wait_ns).abs() < 1.0,
        "{total_us} µs against {} ns",
        r.lock_wait_ns
    );
    let wrs = work_requests(&ev);
    assert!(
        wrs.iter()
            .any(|w| w.args["lock_wait_ns"].as_f64().is_some_and(|x| x > 0.0))
    );
}
