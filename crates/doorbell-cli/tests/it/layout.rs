//! bfreg and UAR assignment of 1..40 QPs in one context, against the kernel
//! policy as the reference document states it (§2.5 alloc_bfreg, §2.6
//! bfregn → UAR and gross index, §3.3 need_uuar_lock). The expected rows
//! below were worked out by hand from those sections, not from our code.

use doorbell_cli::layout::{QpPlacement, run};
use doorbell_verbs::ProviderConfig;

/// (gross bfreg index, UAR page, register offset, BlueFlame, lock) of net
/// bfreg n: gross = (n / 2) · 4 + n % 2, page = n / 2, offset = 0x800 +
/// (n % 2) · 512, lock unless dedicated (n ≥ 16 − 4) or bfreg 0.
const NET: [(u32, u32, u32, bool, bool); 16] = [
    (0, 0, 0x800, false, false),
    (1, 0, 0xa00, true, true),
    (4, 1, 0x800, true, true),
    (5, 1, 0xa00, true, true),
    (8, 2, 0x800, true, true),
    (9, 2, 0xa00, true, true),
    (12, 3, 0x800, true, true),
    (13, 3, 0xa00, true, true),
    (16, 4, 0x800, true, true),
    (17, 4, 0xa00, true, true),
    (20, 5, 0x800, true, true),
    (21, 5, 0xa00, true, true),
    (24, 6, 0x800, true, false),
    (25, 6, 0xa00, true, false),
    (28, 7, 0x800, true, false),
    (29, 7, 0xa00, true, false),
];

/// Net bfreg of the k-th QP with 16 bfregs, 4 low latency: the four
/// dedicated ones (12..15) first, then the eleven shared ones (1..11), each
/// time the least used, lowest index first.
fn expected_net(k: usize) -> usize {
    const ORDER: [usize; 40] = [
        12, 13, 14, 15, // dedicated
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, // shared, first use
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, // second use
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, // third use
        1, 2, 3,
    ];
    ORDER[k]
}

fn check(rows: &[QpPlacement], net_of: impl Fn(usize) -> usize) {
    for (k, r) in rows.iter().enumerate() {
        let (gross, page, off, bf, lock) = NET[net_of(k)];
        assert_eq!(
            (r.bfreg_index, r.uar_page, r.uar_offset, r.blueflame, r.lock),
            (gross, page, off, bf, lock),
            "QP #{} (qpn {:#x})",
            k + 1,
            r.qpn
        );
    }
}

#[test]
fn one_to_forty_qps_follow_the_kernel_policy() {
    for n in [1, 4, 5, 15, 16, 27, 40] {
        let (rows, counts) = run(n, ProviderConfig::default()).unwrap();
        assert_eq!(counts, (16, 4));
        assert_eq!(rows.len(), n as usize);
        check(&rows, expected_net);
    }
}

#[test]
fn single_threaded_takes_no_locks_and_shut_up_bf_no_blueflame() {
    let (rows, _) = run(
        20,
        ProviderConfig {
            single_threaded: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(rows.iter().all(|r| !r.lock));
    let (rows, _) = run(
        20,
        ProviderConfig {
            shut_up_bf: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(rows.iter().all(|r| !r.blueflame));
    // The registers themselves do not change.
    for (k, r) in rows.iter().enumerate() {
        let (gross, page, off, _, lock) = NET[expected_net(k)];
        assert_eq!(
            (r.bfreg_index, r.uar_page, r.uar_offset, r.lock),
            (gross, page, off, lock)
        );
    }
}

#[test]
fn fewer_bfregs_change_the_classes() {
    // 8 total, 2 low latency: medium 1..5, dedicated 6 and 7.
    let cfg = ProviderConfig {
        total_uuars: 8,
        low_lat_uuars: 2,
        ..Default::default()
    };
    let (rows, counts) = run(9, cfg).unwrap();
    assert_eq!(counts, (8, 2));
    let nets: Vec<u32> = rows
        .iter()
        .map(|r| (r.bfreg_index / 4) * 2 + r.bfreg_index % 4)
        .collect();
    assert_eq!(nets, vec![6, 7, 1, 2, 3, 4, 5, 1, 2]);
    // Dedicated ones are those with net index ≥ 8 − 2: no lock.
    assert_eq!(
        rows.iter().map(|r| r.lock).collect::<Vec<_>>(),
        vec![false, false, true, true, true, true, true, true, true]
    );
}

#[test]
fn without_medium_bfregs_extra_qps_fall_back_to_bfreg_zero() {
    // 2 total, 1 low latency: no medium class; the second QP gets bfreg 0,
    // which never BlueFlames and takes no lock.
    let cfg = ProviderConfig {
        total_uuars: 2,
        low_lat_uuars: 1,
        ..Default::default()
    };
    let (rows, _) = run(3, cfg).unwrap();
    let got: Vec<(u32, bool, bool)> = rows
        .iter()
        .map(|r| (r.bfreg_index, r.blueflame, r.lock))
        .collect();
    assert_eq!(
        got,
        vec![(1, true, false), (0, false, false), (0, false, false)]
    );
}

#[test]
fn thirty_two_bfregs_raise_the_low_latency_count() {
    // The provider raises low latency to total − 12 = 20.
    let cfg = ProviderConfig {
        total_uuars: 32,
        ..Default::default()
    };
    let (rows, counts) = run(21, cfg).unwrap();
    assert_eq!(counts, (32, 20));
    // Dedicated net 12..31 first (20 of them), then shared net 1.
    let nets: Vec<u32> = rows
        .iter()
        .map(|r| (r.bfreg_index / 4) * 2 + r.bfreg_index % 4)
        .collect();
    let mut want: Vec<u32> = (12..32).collect();
    want.push(1);
    assert_eq!(nets, want);
}

#[test]
fn destroying_a_qp_returns_its_dedicated_bfreg() {
    use doorbell_verbs::{Context, QpCaps, QpInitAttr, QpType};
    use std::sync::Arc;
    let fabric = doorbell_rt::Fabric::new();
    let nic = Arc::new(
        doorbell_rt::LiveNic::start("free", &fabric, [127, 0, 0, 9], Default::default()).unwrap(),
    );
    let ctx = Context::with_config(nic, ProviderConfig::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let attr = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap: QpCaps::default(),
        sq_sig_all: false,
        srq: None,
    };
    let mut qps: Vec<_> = (0..5).map(|_| pd.create_qp(&attr).unwrap()).collect();
    let idx: Vec<u32> = qps.iter().map(|q| q.bfreg_index()).collect();
    assert_eq!(idx, vec![24, 25, 28, 29, 1]);
    // Free the second dedicated register: the next QP gets it back rather
    // than a shared one.
    qps.remove(1);
    let q = pd.create_qp(&attr).unwrap();
    assert_eq!(q.bfreg_index(), 25);
    assert!(!ctx.placement(&q).lock);
}

#[test]
fn with_thread_domains_each_qp_rings_a_dynamic_register_of_its_own() {
    // Twenty QPs, each in a parent domain with a TD of its own. Dynamic
    // bfreg k is register k % 2 of dynamic page k / 2; with one UAR per
    // page, UAR number 8 + k / 2 of the context (after the 8 static ones).
    let (rows, counts) =
        doorbell_cli::layout::run_with(20, ProviderConfig::default(), true).unwrap();
    assert_eq!(counts, (16, 4));
    for (k, r) in rows.iter().enumerate() {
        let k = k as u32;
        assert_eq!(
            (
                r.bfreg_index,
                r.dyn_bfreg,
                r.uar_page,
                r.uar_offset,
                r.blueflame,
                r.lock
            ),
            (
                1 << 31,
                Some(k),
                8 + k / 2,
                0x800 + (k % 2) * 512,
                true,
                false
            ),
            "QP #{}",
            k + 1
        );
    }
    let table = doorbell_cli::layout::render(&rows, counts);
    assert!(table.contains("dyn 19"), "{table}");
    assert!(table.contains("thread domains"), "{table}");
    // Without them, twenty QPs share the medium bfregs and lock.
    let (rows, _) = run(20, ProviderConfig::default()).unwrap();
    assert!(rows.iter().all(|r| r.dyn_bfreg.is_none()));
    assert!(rows.iter().any(|r| r.lock));
}
