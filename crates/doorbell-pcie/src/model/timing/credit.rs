//! Flow-control credits and read tags: what a receiver advertises, and what
//! is held of it over time.

use std::collections::VecDeque;

use crate::model::params::FC_UNIT_BYTES;

use super::q::{Q, partition_from};

/// Flow-control credits one receiver advertises for one kind of TLP: one
/// header credit per TLP, one data credit per 16 B of payload (rounded
/// up). Zero means infinite, as in the spec's InitFC advertisement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Credits {
    /// Header credits (0 = infinite).
    pub header: u16,
    /// Data credits of 16 B (0 = infinite).
    pub data: u16,
}

impl Credits {
    /// No limit.
    pub const INFINITE: Credits = Credits { header: 0, data: 0 };
    /// Most header credits a receiver can advertise (127, scaled ×16).
    pub const MAX_HEADER: u16 = 2032;
    /// Most data credits a receiver can advertise (2047, scaled ×16).
    pub const MAX_DATA: u16 = 32752;

    /// `header` header and `data` data credits.
    pub const fn new(header: u16, data: u16) -> Self {
        Credits { header, data }
    }
}

/// What a [`Pool`] holds from one time on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Step {
    at: Q,
    header: u32,
    data: u64,
}

impl Step {
    const EMPTY: Step = Step {
        at: 0,
        header: 0,
        data: 0,
    };

    fn is_empty(&self) -> bool {
        self.header == 0 && self.data == 0
    }
}

/// One bounded resource in time: a receiver's flow-control credits for one
/// kind of TLP, or the device's read tags. Each TLP holds one header credit
/// (or tag) and its data credits from the start of its serialisation until
/// they are back. The pool keeps what is held as a step function of time,
/// so a TLP placed before TLPs that earlier calls reserved for later times
/// sees what is held at its own start, not what the last call took.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    /// Header credits or tags (0 = infinite).
    header: u32,
    /// Data credits (0 = infinite).
    data: u32,
    /// Where what is held changes, in time order: from `at` until the next
    /// step, `header` and `data` are held. Nothing is held before the first
    /// step, nor from the last one on.
    steps: VecDeque<Step>,
}

impl Pool {
    pub(super) fn new(c: Credits) -> Self {
        // Two steps per TLP holding credits at one time.
        let cap = match (c.header, c.data) {
            (0, 0) => 0,
            (0, d) => usize::from(d),
            (h, _) => usize::from(h),
        };
        Pool {
            header: u32::from(c.header),
            data: u32::from(c.data),
            steps: VecDeque::with_capacity(2 * cap),
        }
    }

    pub(super) fn tracks(&self) -> bool {
        self.header != 0 || self.data != 0
    }

    /// Whether a TLP needing `units` data credits may start while `held`
    /// is held. A TLP that needs more than the pool has goes once nothing
    /// is held.
    fn room(&self, held: Step, units: u32) -> bool {
        let header = self.header == 0 || held.header < self.header;
        let data =
            self.data == 0 || units == 0 || held.data + u64::from(units) <= u64::from(self.data);
        held.is_empty() || (header && data)
    }

    /// Index of the first step after `t`.
    pub(super) fn next_step(&self, t: Q) -> usize {
        partition_from(&self.steps, 0, |s| s.at <= t)
    }

    /// What is held just before step `i`.
    fn held_before(&self, i: usize) -> Step {
        match i {
            0 => Step::EMPTY,
            _ => self.steps[i - 1],
        }
    }

    /// The earliest time at or after `t` when a TLP needing `units` data
    /// credits finds room. `c` indexes a step at or before the first one
    /// after `t`; it is moved on to the first step after the time returned.
    pub(super) fn room_from(&self, c: &mut usize, t: Q, units: u32) -> Q {
        if self.steps.get(*c).is_some_and(|s| s.at <= t) {
            *c = partition_from(&self.steps, *c, |s| s.at <= t);
        }
        if !self.tracks() || self.room(self.held_before(*c), units) {
            return t;
        }
        while let Some(&s) = self.steps.get(*c) {
            *c += 1;
            if self.room(s, units) {
                return s.at;
            }
        }
        // Not reached: nothing is held from the last step on.
        t
    }

    /// [`room_from`](Self::room_from) without a cursor.
    #[cfg(test)]
    fn earliest(&self, t: Q, units: u32) -> Q {
        self.room_from(&mut self.next_step(t), t, units)
    }

    #[cfg(test)]
    fn fits_at(&self, t: Q, units: u32) -> bool {
        self.earliest(t, units) == t
    }

    /// Index of the step at exactly `t`, inserted if there is none; every
    /// step before `from` is earlier than `t`.
    fn split_at(&mut self, from: usize, t: Q) -> usize {
        let i = partition_from(&self.steps, from, |s| s.at < t);
        if self.steps.get(i).is_none_or(|s| s.at != t) {
            let held = self.held_before(i);
            self.steps.insert(i, Step { at: t, ..held });
        }
        i
    }

    /// Holds one header credit (tag) and `units` data credits over
    /// `[from, until)`.
    pub(super) fn hold(&mut self, from: Q, until: Q, units: u32) {
        if !self.tracks() || until <= from {
            return;
        }
        let data = if self.data == 0 { 0 } else { u64::from(units) };
        let i = self.split_at(0, from);
        let j = self.split_at(i, until);
        for s in self.steps.range_mut(i..j) {
            s.header = s.header.saturating_add(1);
            s.data = s.data.saturating_add(data);
        }
    }

    /// Forgets what is back by `before`, keeping what is held at `before`.
    pub(super) fn prune(&mut self, before: Q) {
        while self.steps.get(1).is_some_and(|s| s.at <= before) {
            self.steps.pop_front();
        }
        if self
            .steps
            .front()
            .is_some_and(|s| s.at <= before && s.is_empty())
        {
            self.steps.pop_front();
        }
    }

    /// Steps kept (for `LinkModel::retained`).
    pub(super) fn retained(&self) -> usize {
        self.steps.len()
    }
}

/// Whether TLPs of `min_wire..=max_wire` wire bytes, taking at most
/// `max_units` data credits each and holding them from the start of their
/// serialisation until `extra` after its end, can never find the pool `c`
/// short. One wire sends them one at a time, so at the instant one starts,
/// those still holding credits started within the longest hold `L` before
/// it: at most `L` over the shortest TLP's time of them, carrying at most
/// `L` worth of bytes. Such a pool gives the same times untracked.
pub(super) fn never_short(
    c: Credits,
    byte_q: Q,
    min_wire: u64,
    max_wire: u64,
    max_units: u64,
    extra: Q,
) -> bool {
    let longest = Q::from(max_wire) * byte_q + extra;
    let held = longest / (Q::from(min_wire.max(1)) * byte_q);
    let bytes = longest / byte_q + 1;
    // Each TLP rounds its payload up to a whole credit.
    let units = bytes / FC_UNIT_BYTES as Q + held + Q::from(max_units);
    let header = c.header == 0 || held < Q::from(c.header);
    let data = c.data == 0 || max_units == 0 || units <= Q::from(c.data);
    header && data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_pool_holds_in_time() {
        let mut p = Pool::new(Credits::new(2, 0));
        assert_eq!(p.earliest(0, 0), 0);
        p.hold(0, 50, 0);
        assert_eq!(p.earliest(0, 0), 0);
        p.hold(0, 40, 0);
        // Both held at 10; the first back is at 40.
        assert_eq!(p.earliest(10, 0), 40);
        p.hold(40, 100, 0);
        assert_eq!(p.earliest(45, 0), 50);
        assert_eq!(p.earliest(60, 0), 60);
        // Something held only later does not hold back an earlier TLP.
        p.hold(200, 300, 0);
        p.hold(200, 300, 0);
        assert!(p.fits_at(150, 0) && !p.fits_at(250, 0));
        assert_eq!(p.earliest(250, 0), 300);
        p.prune(250);
        assert_eq!(p.earliest(250, 0), 300);
        p.prune(300);
        assert!(p.steps.is_empty());
        // Data credits; a TLP larger than the pool goes once it is empty.
        let mut d = Pool::new(Credits::new(0, 16));
        d.hold(0, 100, 12);
        assert_eq!(d.earliest(0, 4), 0);
        assert_eq!(d.earliest(0, 5), 100);
        assert_eq!(d.earliest(0, 0), 0);
        assert_eq!(d.earliest(0, 40), 100);
        let mut inf = Pool::new(Credits::INFINITE);
        inf.hold(0, 1000, 4);
        assert_eq!(inf.earliest(0, 4), 0);
        assert!(inf.steps.is_empty());
    }
}
