//! The timing model: idle-link latency follows the curve, streams reach the
//! stream figures, tags and credits bound what is in flight, and the same
//! calls give the same answers.

use doorbell_pcie::model::{
    Credits, Direction, LinkModel, LinkModelConfig, ReadLatencyCurve, TlpKind,
};
use doorbell_types::{Duration, Instant};

fn link(cfg: LinkModelConfig) -> LinkModel {
    LinkModel::new(cfg).unwrap()
}

fn ns(t: Instant) -> f64 {
    t.as_ps() as f64 / 1000.0
}

#[test]
fn idle_read_takes_the_curve_latency_whatever_the_split() {
    let cfg = LinkModelConfig::neugebauer18();
    for (len, addr) in [
        (8, 0x40),
        (64, 0x1000),
        (256, 0x10),
        (1024, 0x2000),
        (2048, 0x2f00),
        (4096, 0),
    ] {
        let mut l = link(cfg);
        let start = Instant::from_ps(5_000_000);
        let t = l.read(start, addr, len);
        let want = cfg.read_latency.at(len);
        assert_eq!(t.last_data.since(start), want, "{len} B at {addr:#x}");
        assert!(t.first_data <= t.last_data);
        let split = cfg.link.split;
        assert_eq!(t.requests as usize, split.read_requests(addr, len).count());
    }
}

#[test]
fn back_to_back_streams_reach_the_stream_figures() {
    let cfg = LinkModelConfig::neugebauer18();
    let n = 20_000u64;
    // Writes: P14's 82.2 M/s.
    let mut l = link(cfg);
    let mut last = Instant::ZERO;
    for i in 0..n {
        last = l.write(Instant::ZERO, i * 64, 64, Direction::ToHost);
    }
    let rate = n as f64 / (ns(last) * 1e-9) / 1e6;
    let want = cfg.link.write_stream(64).transactions_per_s / 1e6;
    assert!(
        (rate / want - 1.0).abs() < 0.001,
        "MWr {rate} vs {want} M/s"
    );
    assert_eq!(l.stats(Direction::ToHost).tlps, n);
    assert_eq!(l.stats(Direction::ToHost).wire_bytes, n * 88);

    // Reads: P14's 86.1 M/s, limited by the completions, not by tags or
    // credits.
    let mut l = link(cfg);
    let mut first = None;
    let mut last = Instant::ZERO;
    for i in 0..n {
        let t = l.read(Instant::ZERO, i * 64, 64);
        first.get_or_insert(t.last_data);
        last = t.last_data;
    }
    let span = last.since(first.unwrap());
    let rate = (n - 1) as f64 / (span.as_ns_f64() * 1e-9) / 1e6;
    let want = cfg.link.read_stream(64).transactions_per_s / 1e6;
    assert!(
        (rate / want - 1.0).abs() < 0.001,
        "MRd {rate} vs {want} M/s"
    );
}

#[test]
fn tags_bound_outstanding_reads() {
    let mut cfg = LinkModelConfig::neugebauer18();
    cfg.read_tags = 1;
    cfg.read_latency = ReadLatencyCurve::constant(Duration::from_ns(500));
    let mut l = link(cfg);
    let a = l.read(Instant::ZERO, 0, 64);
    let b = l.read(Instant::ZERO, 64, 64);
    assert_eq!(a.last_data, Instant::ZERO.add(Duration::from_ns(500)));
    // The second request waits for the first's tag.
    assert_eq!(b.last_data, a.last_data.add(Duration::from_ns(500)));
    // One read of 4 requests: with 4 tags it takes the curve's time; with
    // one, each request waits for the one before to come back.
    cfg.read_tags = 4;
    let r = link(cfg).read(Instant::ZERO, 0, 2048);
    assert_eq!(r.requests, 4);
    assert_eq!(ns(r.last_data), 500.0);
    cfg.read_tags = 1;
    let r = link(cfg).read(Instant::ZERO, 0, 2048);
    assert!(ns(r.last_data) > 2.0 * 500.0, "{}", ns(r.last_data));
}

#[test]
fn posted_credits_throttle_writes() {
    let mut cfg = LinkModelConfig::neugebauer18();
    cfg.flow_control.host_posted = Credits::new(2, 0);
    cfg.flow_control.update_latency = Duration::from_ns(1000);
    let mut l = link(cfg);
    let t: Vec<Instant> = (0..6)
        .map(|i| l.write(Instant::ZERO, i * 64, 64, Direction::ToHost))
        .collect();
    // Two go at once (12.2 ns each on the wire); each later pair waits a
    // credit update.
    assert!(ns(t[1]) < 30.0, "{t:?}");
    assert!(ns(t[2]) > 1000.0 && ns(t[3]) < 1040.0, "{t:?}");
    assert!(ns(t[4]) > 2000.0, "{t:?}");
    // Data credits too: 64 B TLPs take 4 credits each.
    let mut cfg = LinkModelConfig::neugebauer18();
    cfg.flow_control.device_posted = Credits::new(0, 16);
    cfg.flow_control.update_latency = Duration::from_ns(1000);
    let mut l = link(cfg);
    let t: Vec<Instant> = (0..5)
        .map(|i| l.write_combined(Instant::ZERO, 0x800 + i * 64, 64))
        .collect();
    assert!(ns(t[3]) < 60.0 && ns(t[4]) > 1000.0, "{t:?}");
}

#[test]
fn a_doorbell_passes_completions_still_waiting_at_the_host() {
    let mut l = link(LinkModelConfig::neugebauer18());
    for i in 0..32 {
        let _ = l.read(Instant::ZERO, i * 64, 64);
    }
    // The completions are reserved around 550 ns; the link towards the
    // device is idle until then.
    let t0 = Instant::ZERO.add(Duration::from_ns(10));
    let rung = l.write(t0, 0x800, 8, Direction::ToDevice);
    assert!(ns(rung) < 20.0, "{}", ns(rung));
    assert!(l.busy_until(Direction::ToDevice) > Instant::ZERO.add(Duration::from_ns(500)));
    // A completion does not pass a posted write already on its way: a read
    // right after a large MMIO copy still sees its data after it.
    let mut cfg = LinkModelConfig::neugebauer18();
    cfg.read_latency = ReadLatencyCurve::constant(Duration::ZERO);
    let mut l = link(cfg);
    let copy = l.write_combined(Instant::ZERO, 0x800, 4096);
    let r = l.read(Instant::ZERO, 0, 64);
    assert!(r.first_data > copy);
}

#[test]
fn each_tlp_is_reported_in_order_of_its_kind() {
    let mut l = link(LinkModelConfig::neugebauer18());
    let mut seen = Vec::new();
    let r = l.read_with(Instant::ZERO, 0x1f00, 1024, |t| seen.push(t));
    // 0x1f00..0x2300 crosses 4 KiB: requests of 256 and 512 and 256 B.
    let mrd: Vec<_> = seen
        .iter()
        .filter(|t| t.kind == TlpKind::MRd)
        .map(|t| (t.addr, t.bytes))
        .collect();
    assert_eq!(mrd, [(0x1f00, 256), (0x2000, 512), (0x2200, 256)]);
    let cpl: u64 = seen
        .iter()
        .filter(|t| t.kind == TlpKind::CplD)
        .map(|t| t.bytes)
        .sum();
    assert_eq!(cpl, 1024);
    assert_eq!(r.completions as usize, seen.len() - 3);
    assert_eq!(seen.iter().map(|t| t.arrival).max(), Some(r.last_data));
    let mut w = Vec::new();
    let high = 0xffff_0000_0000_0000u64;
    let _ = l.write_with(Instant::ZERO, high | 0x40, 300, Direction::ToHost, |t| {
        w.push((t.addr, t.bytes, t.wire_bytes))
    });
    assert_eq!(w, [(high | 0x40, 256, 280), (high | 0x140, 44, 68)]);
}

#[test]
fn kalia_convention_moves_whole_cache_lines_for_dma_only() {
    let mut cfg = LinkModelConfig::neugebauer18();
    cfg.link = doorbell_pcie::model::LinkParams::kalia16();
    let mut l = link(cfg);
    let mut w = Vec::new();
    let _ = l.write_with(Instant::ZERO, 0x10, 8, Direction::ToHost, |t| {
        w.push(t.wire_bytes)
    });
    let _ = l.write_with(Instant::ZERO, 0x10, 8, Direction::ToDevice, |t| {
        w.push(t.wire_bytes)
    });
    let _ = l.write_combined_with(Instant::ZERO, 0x800, 8, |t| w.push(t.wire_bytes));
    let _ = l.read_with(Instant::ZERO, 0, 256, |t| w.push(t.wire_bytes));
    assert_eq!(w, [64 + 26, 8 + 26, 64 + 26, 26, 128 + 22, 128 + 22]);
}

fn mixed_run() -> Vec<(u64, u64)> {
    let mut l = link(LinkModelConfig::neugebauer18());
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut now = Instant::ZERO;
    let mut out = Vec::new();
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        now = now.add(Duration::from_ps(x % 20_000));
        let len = 1 + (x >> 20) % 3000;
        let addr = (x >> 8) % (1 << 30);
        let t = match x % 4 {
            0 => {
                let r = l.read(now, addr, len);
                (r.first_data.as_ps(), r.last_data.as_ps())
            }
            1 => (l.write(now, addr, len, Direction::ToHost).as_ps(), 0),
            2 => (l.write(now, addr, 8, Direction::ToDevice).as_ps(), 0),
            _ => (l.write_combined(now, addr, len % 256).as_ps(), 0),
        };
        out.push(t);
    }
    out
}

#[test]
fn same_calls_same_times() {
    assert_eq!(mixed_run(), mixed_run());
}

proptest::proptest! {
    #[test]
    fn never_panics_and_time_only_moves_forward(
        ops in proptest::collection::vec((0u8..4, proptest::num::u64::ANY, 0u64..70_000, 0u64..5_000_000), 1..40),
        tags in 1u16..=8,
        kalia in proptest::bool::ANY,
    ) {
        let mut cfg = LinkModelConfig::neugebauer18();
        cfg.read_tags = tags;
        if kalia {
            cfg.link = doorbell_pcie::model::LinkParams::kalia16();
        }
        let mut l = link(cfg);
        let mut now = Instant::ZERO;
        for (op, addr, len, dt) in ops {
            now = now.add(Duration::from_ps(dt));
            match op {
                0 => {
                    let r = l.read(now, addr, len);
                    proptest::prop_assert!(now <= r.first_data && r.first_data <= r.last_data);
                }
                1 => proptest::prop_assert!(l.write(now, addr, len, Direction::ToHost) >= now),
                2 => proptest::prop_assert!(l.write(now, addr, len, Direction::ToDevice) >= now),
                _ => proptest::prop_assert!(l.write_combined(now, addr, len) >= now),
            }
        }
    }
}
