//! Wire reservations of one direction, and the order of its posted writes.

use std::collections::VecDeque;

use super::q::{Q, partition_from};

/// One direction: busy intervals, sorted and disjoint, so that a TLP ready
/// at `t` can use an idle gap before a reservation made (by an earlier
/// call) for a later time. Intervals over by the watermark are forgotten.
#[derive(Debug, Clone)]
pub(super) struct Wire {
    busy: VecDeque<(Q, Q)>,
    /// End of the last reservation.
    pub(super) busy_until: Q,
    /// Time spent serialising (for `DirectionStats`).
    pub(super) stats_busy: Q,
    /// TLPs reserved.
    pub(super) tlps: u64,
    /// Wire bytes reserved.
    pub(super) wire_bytes: u64,
}

impl Wire {
    pub(super) fn new(capacity: usize) -> Self {
        Wire {
            busy: VecDeque::with_capacity(capacity),
            busy_until: 0,
            stats_busy: 0,
            tlps: 0,
            wire_bytes: 0,
        }
    }

    /// Forgets intervals over by `before` (no later TLP is ready earlier).
    pub(super) fn prune(&mut self, before: Q) {
        while self.busy.front().is_some_and(|&(_, e)| e <= before) {
            self.busy.pop_front();
        }
    }

    /// Index of the first interval not over by `t`.
    pub(super) fn first_after(&self, t: Q) -> usize {
        // Disjoint and sorted, so the ends are sorted too.
        partition_from(&self.busy, 0, |&(_, e)| e <= t)
    }

    /// The earliest idle time at or after `t` with room for `dur`. `i`
    /// indexes an interval at or before the first one not over by `t`; it
    /// is moved on to the index the new interval takes.
    pub(super) fn idle_from(&self, i: &mut usize, mut t: Q, dur: Q) -> Q {
        if self.busy.get(*i).is_some_and(|&(_, e)| e <= t) {
            *i = partition_from(&self.busy, *i, |&(_, e)| e <= t);
        }
        while let Some(&(s, e)) = self.busy.get(*i) {
            if e > t {
                if t + dur <= s {
                    break;
                }
                t = e;
            }
            *i += 1;
        }
        t
    }

    /// Takes `[t, t + dur)`, which [`idle_from`](Self::idle_from) gave
    /// with `idx`.
    pub(super) fn occupy(&mut self, t: Q, idx: usize, dur: Q, bytes: u64) -> (Q, Q) {
        let end = t + dur;
        let merge_prev = idx > 0 && self.busy[idx - 1].1 == t;
        let merge_next = idx < self.busy.len() && self.busy[idx].0 == end;
        match (merge_prev, merge_next) {
            (true, true) => {
                self.busy[idx - 1].1 = self.busy[idx].1;
                self.busy.remove(idx);
            }
            (true, false) => self.busy[idx - 1].1 = end,
            (false, true) => self.busy[idx].0 = t,
            (false, false) => self.busy.insert(idx, (t, end)),
        }
        self.busy_until = self.busy_until.max(end);
        self.stats_busy += dur;
        self.tlps += 1;
        self.wire_bytes += bytes;
        (t, end)
    }

    /// Intervals kept (for `LinkModel::retained`).
    pub(super) fn retained(&self) -> usize {
        self.busy.len()
    }

    /// Reserves `dur` at the earliest idle time at or after `ready`.
    #[cfg(test)]
    fn reserve(&mut self, ready: Q, dur: Q, bytes: u64) -> (Q, Q) {
        let mut idx = self.first_after(ready);
        let t = self.idle_from(&mut idx, ready, dur);
        self.occupy(t, idx, dur, bytes)
    }
}

/// The posted TLPs of one direction by the time they were issued: for each
/// issue time, the latest end of serialisation among posted TLPs issued at
/// or before it. Kept as a staircase (issue times and ends both strictly
/// increasing), so a lookup is a binary search.
#[derive(Debug, Clone)]
pub(super) struct PostedOrder {
    stairs: VecDeque<(Q, Q)>,
}

impl PostedOrder {
    pub(super) fn new(capacity: usize) -> Self {
        PostedOrder {
            stairs: VecDeque::with_capacity(capacity),
        }
    }

    /// The latest end of a posted TLP issued at or before `issued` (0 if
    /// none).
    pub(super) fn end_before(&self, issued: Q) -> Q {
        match partition_from(&self.stairs, 0, |&(r, _)| r <= issued) {
            0 => 0,
            i => self.stairs[i - 1].1,
        }
    }

    /// Notes a posted TLP issued at `issued` whose serialisation ends at
    /// `end`.
    pub(super) fn record(&mut self, issued: Q, end: Q) {
        let i = partition_from(&self.stairs, 0, |&(r, _)| r <= issued);
        if i > 0 && self.stairs[i - 1].1 >= end {
            return;
        }
        let later = self
            .stairs
            .range(i..)
            .take_while(|&&(_, e)| e <= end)
            .count();
        self.stairs.drain(i..i + later);
        if i > 0 && self.stairs[i - 1].0 == issued {
            self.stairs[i - 1].1 = end;
        } else {
            self.stairs.insert(i, (issued, end));
        }
    }

    /// Forgets what no TLP issued at or after `before` waits for.
    pub(super) fn prune(&mut self, before: Q) {
        let i = partition_from(&self.stairs, 0, |&(r, _)| r <= before);
        if i > 1 {
            self.stairs.drain(..i - 1);
        }
        if self
            .stairs
            .front()
            .is_some_and(|&(r, e)| r <= before && e <= before)
        {
            self.stairs.pop_front();
        }
    }

    /// Records kept (for `LinkModel::retained`).
    pub(super) fn retained(&self) -> usize {
        self.stairs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_fills_gaps_and_merges() {
        let mut w = Wire::new(4);
        assert_eq!(w.reserve(100, 10, 1), (100, 110));
        assert_eq!(w.reserve(0, 10, 1), (0, 10));
        assert_eq!(w.reserve(0, 95, 1), (110, 205));
        assert_eq!(w.reserve(0, 90, 1), (10, 100));
        assert_eq!(w.busy, VecDeque::from([(0, 205)]));
        w.prune(205);
        assert!(w.busy.is_empty());
        assert_eq!(w.tlps, 4);
    }

    #[test]
    fn posted_order_is_a_staircase() {
        let mut o = PostedOrder::new(4);
        o.record(100, 150);
        o.record(0, 20);
        assert_eq!(o.end_before(50), 20);
        assert_eq!(o.end_before(100), 150);
        // Issued earlier but ends later: it covers the later one.
        o.record(10, 200);
        assert_eq!(o.stairs, VecDeque::from([(0, 20), (10, 200)]));
        o.record(10, 120);
        assert_eq!(o.end_before(300), 200);
        o.prune(150);
        assert_eq!(o.stairs, VecDeque::from([(10, 200)]));
        o.prune(200);
        assert!(o.stairs.is_empty());
    }
}
