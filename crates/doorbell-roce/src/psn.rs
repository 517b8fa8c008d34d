//! The PSNs one message uses.

use doorbell_types::Psn;

/// The PSNs of one request message: its packets, or for a READ the
/// responses it asks for. `len` may be 0 (a message that uses no PSN and
/// only keeps its place in the completion order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsnRange {
    /// The first PSN.
    pub first: Psn,
    /// How many PSNs.
    pub len: u32,
}

impl PsnRange {
    /// The last PSN (the one before `first` when `len` is 0).
    pub const fn last(&self) -> Psn {
        self.first.add(self.len.wrapping_sub(1))
    }

    /// The PSN `i` packets after the first.
    pub const fn nth(&self, i: u32) -> Psn {
        self.first.add(i)
    }

    /// True if `psn` is one of this message's PSNs.
    pub const fn contains(&self, psn: Psn) -> bool {
        let d = psn.diff(self.first);
        d >= 0 && (d as u32) < self.len
    }

    /// True if the acknowledgement moving from `old` to `new` passed this
    /// message's last PSN.
    pub const fn crossed_by(&self, old: Psn, new: Psn) -> bool {
        self.last().diff(old) > 0 && self.last().diff(new) <= 0
    }

    /// Go-back-N from `from`: how many of the `sent` packets of this SEND
    /// or WRITE still count as sent. Packets at or after `from` go again; a
    /// message wholly after `from` starts over.
    pub const fn rewind(&self, sent: u32, from: Psn) -> u32 {
        if self.contains(from) {
            let keep = from.diff(self.first) as u32;
            if sent < keep { sent } else { keep }
        } else if !self.first.precedes(from) {
            0
        } else {
            sent
        }
    }

    /// Packets of this message at or before `ack_psn`, the last PSN
    /// acknowledged (0 if none are).
    pub const fn acked(&self, ack_psn: Psn) -> u32 {
        let n = ack_psn.diff(self.first) + 1;
        if n > 0 { n as u32 } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_work_across_the_wrap() {
        let r = PsnRange {
            first: Psn::new(Psn::MASK - 1),
            len: 4,
        };
        assert_eq!(r.last(), Psn::new(1));
        assert!(r.contains(Psn::new(Psn::MASK)) && r.contains(Psn::new(1)));
        assert!(!r.contains(Psn::new(2)) && !r.contains(Psn::new(Psn::MASK - 2)));
        assert!(r.crossed_by(Psn::new(0), Psn::new(1)));
        assert!(!r.crossed_by(Psn::new(1), Psn::new(5)));
        assert_eq!(r.rewind(4, Psn::new(0)), 2);
        assert_eq!(r.rewind(1, Psn::new(0)), 1);
        assert_eq!(r.rewind(4, Psn::new(Psn::MASK - 5)), 0);
        assert_eq!(r.rewind(4, Psn::new(9)), 4);
        assert_eq!(r.acked(Psn::new(0)), 3);
        assert_eq!(r.acked(Psn::new(Psn::MASK - 3)), 0);
    }

    #[test]
    fn an_empty_range_contains_nothing() {
        let r = PsnRange {
            first: Psn::new(5),
            len: 0,
        };
        assert!(!r.contains(Psn::new(5)));
        assert_eq!(r.last(), Psn::new(4));
    }
}
