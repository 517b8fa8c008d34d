use doorbell_device::QpType;
use doorbell_sim::{Op, Profile, Workload};

fn show(name: &str, w: Workload) {
    let p = Profile::builtin("connectib-haswell").unwrap().unwrap();
    let t = std::time::Instant::now();
    let r = w.run(&p).unwrap();
    println!(
        "{name}: {:.1} Mops {:.2} Gb/s p50 {:.0} ns  pcie dev {:.2} host {:.2} pu {:.2} cores {:?} per_post h2d {:.1} d2h {:.1}  events {} wall {:?}",
        r.msg_rate_mops,
        r.bandwidth_gbps,
        r.latency_ns.p50,
        r.utilisation.pcie_to_device,
        r.utilisation.pcie_to_host,
        r.utilisation.nic_processing_units,
        r.utilisation
            .cores
            .iter()
            .map(|c| (c * 100.0).round())
            .collect::<Vec<_>>(),
        r.per_post.host_to_device_bytes,
        r.per_post.device_to_host_bytes,
        r.events,
        t.elapsed()
    );
}

#[test]
#[ignore]
fn explore() {
    let ud = |size, postlist, bf| Workload {
        qp_type: QpType::Ud,
        op: Op::Send,
        size,
        threads: 14,
        qps: 14,
        postlist,
        inline_threshold: 64,
        signal_every: 64,
        blueflame: bf,
        iters: 20_000,
        tx_depth: 256,
        ..Workload::default()
    };
    show("K11 ud send 16B BF", ud(16, 1, true));
    show("K12 ud send 16B postlist16", ud(16, 16, true));
    show("K28 ud send 0B BF", ud(0, 1, true));
    show(
        "K19 rc read 8B",
        Workload {
            op: Op::Read,
            size: 8,
            threads: 14,
            qps: 14,
            signal_every: 64,
            iters: 20_000,
            tx_depth: 256,
            ..Workload::default()
        },
    );
}
