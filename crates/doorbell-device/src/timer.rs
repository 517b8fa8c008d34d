//! The NIC's timers: each QP's deadlines, indexed by [`Timer`], and one
//! NIC-wide ordered index of each QP's earliest, so that the next deadline
//! is found in O(log n) and a timeout visits only the QPs that are due.

use std::collections::BTreeSet;

use doorbell_types::{Instant, Qpn};

/// A timer of one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// The requester's ACK timer.
    Ack,
    /// The end of the requester's RNR wait.
    RnrResume,
    /// The requester's adaptive retransmission timer.
    Adaptive,
    /// In the error state: look for receives posted since the last flush.
    RqFlushPoll,
}

impl Timer {
    /// Every timer, in index order.
    pub(crate) const ALL: [Timer; 4] = [
        Timer::Ack,
        Timer::RnrResume,
        Timer::Adaptive,
        Timer::RqFlushPoll,
    ];
}

/// The earliest deadline of every QP that has a timer running, in
/// deadline order. One entry a QP, not one a timer: a QP that is due has
/// each of its timers checked against the clock, so only the earliest
/// decides when it is due (a message's ACK and adaptive timers, which
/// start and stop together, then cost one change of the index, not two).
#[derive(Default)]
pub(crate) struct TimerIndex {
    by_deadline: BTreeSet<(Instant, Qpn)>,
}

impl TimerIndex {
    /// Brings the index in line with QP `qpn`'s timers `now_at`; `indexed`
    /// is the deadline the index held for it, and becomes the earliest of
    /// `now_at`.
    pub(crate) fn sync(
        &mut self,
        qpn: Qpn,
        indexed: &mut Option<Instant>,
        now_at: [Option<Instant>; Timer::ALL.len()],
    ) {
        let earliest = now_at.into_iter().flatten().min();
        if *indexed == earliest {
            return;
        }
        if let Some(old) = *indexed {
            self.by_deadline.remove(&(old, qpn));
        }
        if let Some(new) = earliest {
            self.by_deadline.insert((new, qpn));
        }
        *indexed = earliest;
    }

    /// The earliest deadline of all.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.by_deadline.first().map(|&(at, _)| at)
    }

    /// The QPs with a timer due at `now`, in QPN order, into `out`
    /// (emptied first; its room is reused).
    pub(crate) fn due(&self, now: Instant, out: &mut Vec<Qpn>) {
        out.clear();
        out.extend(
            self.by_deadline
                .iter()
                .take_while(|&&(at, _)| at <= now)
                .map(|&(_, qpn)| qpn),
        );
        out.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_follows_each_qps_timers() {
        let mut ix = TimerIndex::default();
        let (a, b) = (Qpn::new(0x101), Qpn::new(0x100));
        let t = Instant::from_ps;
        let (mut ia, mut ib) = (None, None);
        ix.sync(a, &mut ia, [Some(t(30)), None, None, None]);
        ix.sync(b, &mut ib, [None, Some(t(20)), None, Some(t(40))]);
        assert_eq!(ix.next(), Some(t(20)));
        let mut due = Vec::new();
        ix.due(t(30), &mut due);
        assert_eq!(due, [b, a]);
        assert_eq!((ia, ib), (Some(t(30)), Some(t(20))), "each QP's earliest");
        ix.sync(b, &mut ib, [None, None, None, Some(t(40))]);
        assert_eq!(ib, Some(t(40)), "the later timer, once the earlier stops");
        assert_eq!(ix.next(), Some(t(30)));
        ix.due(t(35), &mut due);
        assert_eq!(due, [a]);
        ix.sync(a, &mut ia, [None; 4]);
        ix.sync(b, &mut ib, [None; 4]);
        assert_eq!(ix.next(), None);
        ix.due(t(u64::MAX), &mut due);
        assert!(due.is_empty());
        // Two QPs due at the same instant, one of them by two timers:
        // each listed once.
        ix.sync(a, &mut ia, [Some(t(50)), None, Some(t(50)), None]);
        ix.sync(b, &mut ib, [None, None, Some(t(50)), None]);
        ix.due(t(50), &mut due);
        assert_eq!(due, [b, a]);
        ix.sync(b, &mut ib, [None; 4]);
        ix.due(t(50), &mut due);
        assert_eq!(due, [a], "b's entry gone, a's kept");
    }
}
