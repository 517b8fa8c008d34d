//! The responder half of RC: the expected PSN, the MSN, sequence checks,
//! NAK-once-per-gap and the atomic replay cache.

use std::collections::VecDeque;

use doorbell_types::Psn;

/// Atomic results kept for replaying duplicates.
pub const ATOMIC_REPLAY_DEPTH: usize = 16;

/// Where a request's PSN falls against the one expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestPsn {
    /// The PSN expected: execute the request.
    Expected,
    /// Behind it: a duplicate, to be answered again but not re-executed
    /// (a READ is read again).
    Duplicate,
    /// Ahead of it: packets were lost; the request is dropped. `nak` is the
    /// PSN to send a PSN-sequence-error NAK for, the first time this gap is
    /// seen; `None` when it has already been NAKed.
    OutOfSequence {
        /// The expected PSN, to NAK, once per gap.
        nak: Option<Psn>,
    },
}

/// Responder memory of one executed atomic.
#[derive(Debug, Clone, Copy)]
struct AtomicReplay {
    psn: Psn,
    orig: u64,
}

/// The responder of one RC QP.
#[derive(Debug, Clone)]
pub struct Responder {
    /// The PSN expected next.
    epsn: Psn,
    /// Messages completed, 24 bits.
    msn: u32,
    /// A PSN-sequence NAK was sent for the current gap.
    nak_sent: bool,
    atomic_replay: VecDeque<AtomicReplay>,
}

impl Default for Responder {
    fn default() -> Self {
        Self::new()
    }
}

impl Responder {
    /// A responder expecting PSN 0 (a QP in RESET).
    pub fn new() -> Self {
        Self {
            epsn: Psn::new(0),
            msn: 0,
            nak_sent: false,
            atomic_replay: VecDeque::new(),
        }
    }

    /// Sets the PSN expected next (the `rq_psn` attribute).
    pub fn set_psn(&mut self, psn: Psn) {
        self.epsn = psn;
    }

    /// The PSN expected next.
    pub fn epsn(&self) -> Psn {
        self.epsn
    }

    /// The last PSN received in order: what a duplicate's ACK names.
    pub fn last_psn(&self) -> Psn {
        crate::prev(self.epsn)
    }

    /// The MSN to put in an AETH.
    pub fn msn(&self) -> u32 {
        self.msn
    }

    /// Classifies a request's PSN. A request at the expected PSN closes any
    /// gap, so the next gap is NAKed again.
    pub fn handle_psn(&mut self, psn: Psn) -> RequestPsn {
        let d = psn.diff(self.epsn);
        if d > 0 {
            let nak = (!self.nak_sent).then_some(self.epsn);
            self.nak_sent = true;
            return RequestPsn::OutOfSequence { nak };
        }
        if d < 0 {
            return RequestPsn::Duplicate;
        }
        self.nak_sent = false;
        RequestPsn::Expected
    }

    /// The request at the expected PSN used `n` PSNs (a READ: its
    /// responses).
    pub fn advance(&mut self, n: u32) {
        self.epsn = self.epsn.add(n);
    }

    /// A message's last packet was executed.
    pub fn complete_message(&mut self) {
        self.msn = (self.msn + 1) & Psn::MASK;
    }

    /// Remembers the original value an atomic at `psn` read, to answer
    /// its duplicates; the oldest of [`ATOMIC_REPLAY_DEPTH`] is forgotten.
    pub fn record_atomic(&mut self, psn: Psn, orig: u64) {
        if self.atomic_replay.len() == ATOMIC_REPLAY_DEPTH {
            self.atomic_replay.pop_front();
        }
        self.atomic_replay.push_back(AtomicReplay { psn, orig });
    }

    /// The original value of the atomic executed at `psn`, if remembered.
    pub fn replay_atomic(&self, psn: Psn) -> Option<u64> {
        self.atomic_replay
            .iter()
            .find(|r| r.psn == psn)
            .map(|r| r.orig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_is_naked_once_until_it_closes() {
        let mut r = Responder::new();
        r.set_psn(Psn::new(10));
        assert_eq!(
            r.handle_psn(Psn::new(12)),
            RequestPsn::OutOfSequence {
                nak: Some(Psn::new(10))
            }
        );
        assert_eq!(
            r.handle_psn(Psn::new(13)),
            RequestPsn::OutOfSequence { nak: None }
        );
        assert_eq!(r.handle_psn(Psn::new(10)), RequestPsn::Expected);
        r.advance(1);
        assert_eq!(
            r.handle_psn(Psn::new(13)),
            RequestPsn::OutOfSequence {
                nak: Some(Psn::new(11))
            },
            "a new gap is NAKed again"
        );
    }

    #[test]
    fn duplicates_are_behind_across_the_wrap() {
        let mut r = Responder::new();
        r.set_psn(Psn::new(1));
        assert_eq!(r.handle_psn(Psn::new(Psn::MASK)), RequestPsn::Duplicate);
        assert_eq!(r.handle_psn(Psn::new(0)), RequestPsn::Duplicate);
        assert_eq!(r.last_psn(), Psn::new(0));
        assert_eq!(r.handle_psn(Psn::new(1)), RequestPsn::Expected);
        r.advance(Psn::MASK);
        assert_eq!(r.epsn(), Psn::new(0));
        assert_eq!(r.handle_psn(Psn::new(Psn::MASK)), RequestPsn::Duplicate);
    }

    #[test]
    fn msn_wraps_at_24_bits() {
        let mut r = Responder::new();
        for _ in 0..3 {
            r.complete_message();
        }
        assert_eq!(r.msn(), 3);
        r.msn = Psn::MASK;
        r.complete_message();
        assert_eq!(r.msn(), 0);
    }

    #[test]
    fn atomic_replay_keeps_the_last_sixteen() {
        let mut r = Responder::new();
        for i in 0..ATOMIC_REPLAY_DEPTH as u32 + 2 {
            r.record_atomic(Psn::new(i), u64::from(i) * 10);
        }
        assert_eq!(r.replay_atomic(Psn::new(0)), None);
        assert_eq!(r.replay_atomic(Psn::new(1)), None);
        assert_eq!(r.replay_atomic(Psn::new(2)), Some(20));
        assert_eq!(r.replay_atomic(Psn::new(17)), Some(170));
    }
}
