//! The responder half of RC: the expected PSN, the MSN, sequence checks,
//! NAK-once-per-gap and the atomic replay cache.

use std::collections::VecDeque;

use doorbell_types::Psn;

/// Atomic results kept for replaying duplicates.
pub const ATOMIC_REPLAY_DEPTH: usize = 16;
/// READs remembered for answering their duplicates: as many as a QP may
/// have outstanding (the device's largest `max_dest_rd_atomic`).
pub const READ_REPLAY_DEPTH: usize = 16;

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

/// The PSNs one READ taken spans.
#[derive(Debug, Clone, Copy)]
struct ReadReplay {
    first: Psn,
    npsn: u32,
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
    read_replay: VecDeque<ReadReplay>,
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
            // Full size at once: a READ taken allocates nothing.
            read_replay: VecDeque::with_capacity(READ_REPLAY_DEPTH),
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

    /// Remembers a READ taken at `first`, answered with `npsn` responses.
    pub fn record_read(&mut self, first: Psn, npsn: u32) {
        if self.read_replay.len() == READ_REPLAY_DEPTH {
            self.read_replay.pop_front();
        }
        self.read_replay.push_back(ReadReplay { first, npsn });
    }

    /// Whether a duplicate READ request at `psn`, to be answered with
    /// `npsn` responses, repeats (all or the rest of) a READ remembered:
    /// its responses lie within that READ's. One that does not repeats no
    /// READ this QP took, and is not answered (as mlx5 and rxe drop it).
    pub fn read_taken(&self, psn: Psn, npsn: u32) -> bool {
        self.read_replay.iter().any(|r| {
            let from = psn.diff(r.first);
            from >= 0 && u64::from(from.unsigned_abs()) + u64::from(npsn) <= u64::from(r.npsn)
        })
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
    fn a_read_taken_across_the_psn_wrap_is_known_by_each_of_its_responses() {
        let mut r = Responder::new();
        r.record_read(Psn::new(0xff_fffe), 4);
        assert!(r.read_taken(Psn::new(0xff_fffe), 4), "the whole READ");
        assert!(r.read_taken(Psn::new(0x00_0001), 1), "its last response");
        assert!(!r.read_taken(Psn::new(0x00_0001), 2), "one past its end");
        assert!(!r.read_taken(Psn::new(0xff_fffd), 1), "one before it");
        // Only the last READ_REPLAY_DEPTH are kept.
        for i in 0..READ_REPLAY_DEPTH as u32 {
            r.record_read(Psn::new(100 + i), 1);
        }
        assert!(!r.read_taken(Psn::new(0xff_fffe), 1), "forgotten");
        assert!(r.read_taken(Psn::new(100), 1));
    }

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
