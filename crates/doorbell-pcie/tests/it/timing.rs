//! The timing model: idle-link latency follows the curve, streams reach the
//! stream figures, tags and credits bound what is in flight, the same
//! calls give the same answers, and calls out of time order (above a
//! watermark) place each transaction at its own time.

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
    // Past the last point (2 KiB) nothing was measured: the host answers
    // after the longest measured read's delay and the link does the rest,
    // so a read twice as long takes less than the curve's last segment
    // extended, and its extra time is the extra completions' wire time.
    let mut l = link(cfg);
    let start = Instant::from_ps(5_000_000);
    let t = l.read(start, 0, 1 << 20).last_data.since(start);
    let extended = cfg.read_latency.at(1 << 20);
    let wire = cfg.link.read_stream(1 << 20);
    assert!(t < extended, "{t:?} against the extension's {extended:?}");
    let gbps = (1u64 << 20) as f64 * 8.0 / t.as_ns_f64();
    assert!(
        gbps > 0.9 * wire.effective_gbps && gbps <= wire.effective_gbps * 1.001,
        "a 1 MiB read at {gbps} Gb/s, the link's read stream {} Gb/s",
        wire.effective_gbps
    );
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

// Calls out of time order: the caller promises only that every `now` is at
// or after the watermark it moves with `retire`.

/// One transaction of a schedule.
#[derive(Debug, Clone, Copy)]
enum Op {
    Read,
    DmaWrite,
    Mmio,
    WriteCombined,
}

#[derive(Debug, Clone, Copy)]
struct Tx {
    op: Op,
    ready: Instant,
    addr: u64,
    len: u64,
}

/// When a transaction's first and last data arrived (both the arrival of
/// its last TLP for a write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Done {
    first: Instant,
    last: Instant,
}

fn submit(l: &mut LinkModel, tx: Tx, tlps: &mut Vec<Duration>) -> Done {
    let mut each = |t: doorbell_pcie::model::TlpTiming| tlps.push(t.arrival.since(t.start));
    match tx.op {
        Op::Read => {
            let r = l.read_with(tx.ready, tx.addr, tx.len, &mut each);
            Done {
                first: r.first_data,
                last: r.last_data,
            }
        }
        Op::DmaWrite | Op::Mmio => {
            let dir = match tx.op {
                Op::DmaWrite => Direction::ToHost,
                _ => Direction::ToDevice,
            };
            let t = l.write_with(tx.ready, tx.addr, tx.len, dir, &mut each);
            Done { first: t, last: t }
        }
        Op::WriteCombined => {
            let t = l.write_combined_with(tx.ready, tx.addr, tx.len, &mut each);
            Done { first: t, last: t }
        }
    }
}

/// Submits `txs` to a fresh model in the order `order`, after retiring up
/// to the earliest ready time; returns each transaction's times, by index.
fn run_in(cfg: LinkModelConfig, txs: &[Tx], order: &[usize]) -> Vec<Done> {
    let mut l = link(cfg);
    if let Some(w) = txs.iter().map(|t| t.ready).min() {
        l.retire(w);
    }
    let mut out = vec![
        Done {
            first: Instant::ZERO,
            last: Instant::ZERO
        };
        txs.len()
    ];
    for &i in order {
        out[i] = submit(&mut l, txs[i], &mut Vec::new());
    }
    out
}

/// Submission orders of `txs`: by ready time (ties by index), and by `keys`.
fn orders(txs: &[Tx], keys: &[u32]) -> (Vec<usize>, Vec<usize>) {
    let mut in_time: Vec<usize> = (0..txs.len()).collect();
    in_time.sort_by_key(|&i| (txs[i].ready, i));
    let mut shuffled: Vec<usize> = (0..txs.len()).collect();
    shuffled.sort_by_key(|&i| (keys[i], i));
    (in_time, shuffled)
}

fn arb_tx(spacing_ps: u64, jitter_ps: u64) -> impl proptest::strategy::Strategy<Value = (Tx, u32)> {
    use proptest::prelude::*;
    (
        0u8..4,
        0u64..12,
        0..=jitter_ps,
        any::<u64>(),
        1u64..2048,
        any::<u32>(),
    )
        .prop_map(move |(op, slot, jitter, addr, len, key)| {
            let op = [Op::Read, Op::DmaWrite, Op::Mmio, Op::WriteCombined][usize::from(op)];
            let len = match op {
                Op::Mmio => 8,
                Op::WriteCombined => len % 256 + 1,
                _ => len,
            };
            let ready = Instant::from_ps(1_000_000 + slot * spacing_ps + jitter);
            (
                Tx {
                    op,
                    ready,
                    addr: addr % (1 << 40),
                    len,
                },
                key,
            )
        })
}

proptest::proptest! {
    /// Transactions that do not overlap in time (each is done, and its
    /// credits and tags are back, well before the next is issued) get the
    /// same times in whatever order they are submitted: the times of an
    /// idle link. The model used to take each `now` as the largest seen so
    /// far, which pushed every transaction submitted after a later one past
    /// it.
    #[test]
    fn apart_in_time_the_order_of_calls_does_not_matter(
        txs in proptest::collection::vec(arb_tx(5_000_000, 1_000_000), 1..12),
    ) {
        // One transaction per slot of 5 µs: the longest here (a 2 KiB read)
        // is done 1.2 µs after it is issued, its credits 200 ns later.
        let mut seen = std::collections::BTreeSet::new();
        let (txs, keys): (Vec<Tx>, Vec<u32>) = txs
            .into_iter()
            .filter(|(t, _)| seen.insert(t.ready.as_ps() / 5_000_000))
            .unzip();
        let cfg = LinkModelConfig::neugebauer18();
        let (in_time, shuffled) = orders(&txs, &keys);
        let a = run_in(cfg, &txs, &in_time);
        let b = run_in(cfg, &txs, &shuffled);
        for (i, tx) in txs.iter().enumerate() {
            let idle = run_in(cfg, &[*tx], &[0])[0];
            proptest::prop_assert_eq!(a[i], idle, "in time order, {:?}", tx);
            proptest::prop_assert_eq!(b[i], idle, "shuffled, {:?}", tx);
        }
    }

    /// Transactions that compete: submitted in a shuffled order (all at or
    /// after the watermark), each is done no earlier than on an idle link
    /// and no later than that plus the contention it can face, and the same
    /// holds in time order. So the shuffled run is never slower than the
    /// ordered one by more than that contention. (A read's first data may
    /// come earlier than on an idle link: a short completion of a later
    /// request can take a gap the first request's completion did not fit,
    /// as completions of different requests may pass each other.)
    ///
    /// The bound: with credits and tags that cannot run out (infinite
    /// credits, 768 tags), a transaction waits only on the wire, behind
    /// TLPs of other transactions (its own TLPs follow one another as on an
    /// idle link), for their serialisation time and for at most one idle gap
    /// before each of them too short to use, shorter than the longest TLP.
    /// Each such TLP lies before the transaction is done, so it belongs to a
    /// transaction issued before then. Hence `idle ≤ done ≤ idle + Σ` over
    /// the other transactions issued before `done` of (their TLPs' wire
    /// time + their TLP count × the longest TLP's wire time), plus a ps of
    /// rounding per TLP. This holds in any order of calls, because a call
    /// never moves what an earlier call reserved, and the times a TLP waits
    /// for are always those of TLPs reserved before it.
    #[test]
    fn out_of_order_calls_cost_at_most_the_contention(
        txs in proptest::collection::vec(arb_tx(100_000, 300_000), 1..12),
        kalia in proptest::bool::ANY,
    ) {
        let (txs, keys): (Vec<Tx>, Vec<u32>) = txs.into_iter().unzip();
        let mut cfg = LinkModelConfig::neugebauer18();
        if kalia {
            cfg.link = doorbell_pcie::model::LinkParams::kalia16();
        }
        let fc = &mut cfg.flow_control;
        fc.host_posted = Credits::INFINITE;
        fc.host_non_posted = Credits::INFINITE;
        fc.device_posted = Credits::INFINITE;
        fc.device_completion = Credits::INFINITE;
        cfg.read_tags = LinkModelConfig::MAX_READ_TAGS;
        let (in_time, shuffled) = orders(&txs, &keys);
        let a = run_in(cfg, &txs, &in_time);
        let b = run_in(cfg, &txs, &shuffled);
        // Each transaction alone, and its TLPs' wire times.
        let mut idle = Vec::new();
        let mut wire = Vec::new();
        for tx in &txs {
            let mut tlps = Vec::new();
            idle.push(submit(&mut link(cfg), *tx, &mut tlps));
            wire.push(tlps);
        }
        let longest = wire.iter().flatten().max().copied().unwrap_or(Duration::ZERO);
        let bound = |x: usize, done: Instant| {
            let ps: u64 = (0..txs.len())
                .filter(|&y| y != x && txs[y].ready < done)
                .flat_map(|y| wire[y].iter())
                .map(|d| d.as_ps() + longest.as_ps() + 1)
                .sum();
            idle[x].last.add(Duration::from_ps(ps + wire[x].len() as u64))
        };
        for x in 0..txs.len() {
            for (name, got) in [("in time order", a[x]), ("shuffled", b[x])] {
                proptest::prop_assert!(got.last >= idle[x].last,
                    "{name}: {:?} earlier than idle {:?}", got, idle[x]);
                proptest::prop_assert!(got.last <= bound(x, got.last),
                    "{name}: {:?} later than {:?} (idle {:?})", got, bound(x, got.last), idle[x]);
            }
        }
    }
}

#[test]
fn an_early_read_after_a_late_write_runs_as_on_an_idle_link() {
    let cfg = LinkModelConfig::neugebauer18();
    let late = Instant::ZERO.add(Duration::from_ns(1100));
    let early = Instant::ZERO.add(Duration::from_ns(10));
    // What a NIC's other processing unit reserved first, for 1.1 µs.
    let busy_later = || {
        let mut l = link(cfg);
        let _ = l.write(late, 0x1000, 64, Direction::ToHost);
        let _ = l.write_combined(late, 0x800, 256);
        let _ = l.read(late, 0x4000, 512);
        l
    };
    let r = busy_later().read(early, 0x2000, 64);
    assert_eq!(r.last_data, early.add(cfg.read_latency.at(64)));
    assert_eq!(r, link(cfg).read(early, 0x2000, 64));
    // Nor is an early write held behind the later ones.
    for dir in Direction::ALL {
        let w = busy_later().write(early, 0x3000, 64, dir);
        assert_eq!(w, link(cfg).write(early, 0x3000, 64, dir), "{dir:?}");
    }
    let wc = busy_later().write_combined(early, 0x800, 64);
    assert_eq!(wc, link(cfg).write_combined(early, 0x800, 64));
}

#[test]
fn ordering_follows_issue_time_not_call_order() {
    let cfg = LinkModelConfig::neugebauer18();
    let at = |ns| Instant::ZERO.add(Duration::from_ns(ns));
    let mut l = link(cfg);
    // A 4 KiB DMA write issued at 100 ns, then one issued at 0: the early
    // one is not put behind it; one issued at 150 ns is.
    let big = l.write(at(100), 0x10000, 4096, Direction::ToHost);
    let before = l.write(at(0), 0x100, 64, Direction::ToHost);
    assert_eq!(before, link(cfg).write(at(0), 0x100, 64, Direction::ToHost));
    let after = l.write(at(150), 0x200, 64, Direction::ToHost);
    assert!(after > big, "{after:?} passed {big:?}");

    // Completions wait for MMIO writes issued before the host answers,
    // even when the read was submitted after a later transaction.
    let mut cfg0 = cfg;
    cfg0.read_latency = ReadLatencyCurve::constant(Duration::ZERO);
    let mut l = link(cfg0);
    let _ = l.write(at(5000), 0x1000, 64, Direction::ToHost);
    let copy = l.write_combined(at(0), 0x800, 4096);
    let r = l.read(at(0), 0, 64);
    assert!(r.first_data > copy, "{r:?} passed {copy:?}");
    // ... but not for those issued after: a copy issued at 500 ns is not
    // ahead of a read answered at once at 10 ns.
    let mut l = link(cfg0);
    let _ = l.write_combined(at(500), 0x800, 4096);
    let r = l.read(at(10), 0, 64);
    assert_eq!(r, link(cfg0).read(at(10), 0, 64));
}

#[test]
fn credits_and_tags_are_held_in_time() {
    // One tag: a read issued later, submitted first, takes it from 2 µs;
    // a read issued at 0 still finds it free until then.
    let mut cfg = LinkModelConfig::neugebauer18();
    cfg.read_tags = 1;
    cfg.read_latency = ReadLatencyCurve::constant(Duration::from_ns(500));
    let at = |ns| Instant::ZERO.add(Duration::from_ns(ns));
    let mut l = link(cfg);
    let late = l.read(at(2000), 0x1000, 64);
    let early = l.read(at(0), 0, 64);
    assert_eq!(early.last_data, at(500));
    assert_eq!(late.last_data, at(2500));
    // A read issued at 1800 ns starts before the one at 2 µs takes the tag:
    // the tag is free then, so it goes (and the pool is over-subscribed
    // from 2 µs, the approximation the model documents). One issued at
    // 2100 ns, when both hold it, waits until both are done.
    let between = l.read(at(1800), 0x2000, 64);
    assert_eq!(between.last_data, at(2300));
    let waits = l.read(at(2100), 0x3000, 64);
    assert_eq!(waits.last_data, at(2500 + 500));

    // Two posted credits back 1 µs after arrival: writes issued at 5 µs
    // (submitted first) do not hold back writes issued at 0.
    let mut cfg = LinkModelConfig::neugebauer18();
    cfg.flow_control.host_posted = Credits::new(2, 0);
    cfg.flow_control.update_latency = Duration::from_ns(1000);
    let mut l = link(cfg);
    for i in 0..2 {
        let _ = l.write(at(5000), 0x8000 + i * 64, 64, Direction::ToHost);
    }
    let t: Vec<Instant> = (0..3)
        .map(|i| l.write(at(0), i * 64, 64, Direction::ToHost))
        .collect();
    assert!(ns(t[1]) < 30.0, "{t:?}");
    // The third waits for the first credit back, at about 1 µs.
    assert!(ns(t[2]) > 1000.0 && ns(t[2]) < 1040.0, "{t:?}");
}

#[test]
fn retire_bounds_what_the_model_keeps() {
    // The default link, whose credits the wire cannot exhaust (only tags
    // are tracked), and one whose every pool is tracked: credits come back
    // after 1 µs, and fewer of them.
    let mut tight = LinkModelConfig::neugebauer18();
    let fc = &mut tight.flow_control;
    fc.update_latency = Duration::from_ns(1000);
    fc.host_posted = Credits::new(120, 2000);
    fc.device_posted = Credits::new(120, 2000);
    fc.host_non_posted = Credits::new(120, 0);
    fc.device_completion = Credits::new(300, 0);
    for (cfg, bound) in [(LinkModelConfig::neugebauer18(), 400), (tight, 1500)] {
        let mut kept = link(cfg);
        let mut pruned = link(cfg);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut clock = Instant::ZERO;
        let mut most = 0;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // The clock moves 20 ns on average; each transaction is issued
            // somewhere in the 2 µs after it, so calls come out of time
            // order.
            clock = clock.add(Duration::from_ps(x % 40_000));
            pruned.retire(clock);
            let now = clock.add(Duration::from_ps((x >> 16) % 2_000_000));
            let len = 1 + (x >> 40) % 256;
            let addr = (x >> 8) % (1 << 30);
            for l in [&mut kept, &mut pruned] {
                let _ = match x % 4 {
                    0 => l.read(now, addr, len).last_data,
                    1 => l.write(now, addr, len, Direction::ToHost),
                    2 => l.write(now, addr, 8, Direction::ToDevice),
                    _ => l.write_combined(now, addr, len % 64 + 1),
                };
            }
            most = most.max(pruned.retained());
        }
        // About 100 transactions are issued in any 2 µs, each done within
        // 1.2 µs and its credits back 0.2 or 1 µs later: what ends after
        // the watermark is a few hundred entries, against one or two per
        // TLP ever sent without `retire`.
        assert!(most < bound, "kept up to {most} entries");
        assert!(
            kept.retained() > 100 * most,
            "{} without retire",
            kept.retained()
        );
        assert_eq!(pruned.watermark(), clock);
        // Both saw the same calls, all at or after the watermark: same
        // times.
        let (a, b) = (kept.read(clock, 0, 64), pruned.read(clock, 0, 64));
        assert_eq!(a, b);
        pruned.retire(Instant::from_ps(u64::MAX));
        assert_eq!(pruned.retained(), 0);
    }
}

#[test]
fn a_call_below_the_watermark_is_taken_at_it() {
    let cfg = LinkModelConfig::neugebauer18();
    let w = Instant::ZERO.add(Duration::from_ns(300));
    let mut l = link(cfg);
    l.retire(w);
    // Going back does nothing.
    l.retire(Instant::ZERO);
    assert_eq!(l.watermark(), w);
    let r = l.read(Instant::ZERO, 0, 64);
    assert_eq!(r.last_data, w.add(cfg.read_latency.at(64)));
    assert_eq!(l.write(Instant::ZERO, 0, 0, Direction::ToHost), w);
}
