//! The requester half of RC: PSNs out, the send window, ACK/NAK handling,
//! retry and RNR counters, and the ACK and RNR timers.

use doorbell_types::{Duration, Instant, Psn};

use crate::{MAX_UNACKED_PSNS, RETRY_FOREVER, Timer, TimerTable, deadline, rnr_timer};

/// What the QP's attributes say about retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequesterConfig {
    /// How long to wait for an acknowledgement; `None` waits for ever.
    pub ack_timeout: Option<Duration>,
    /// Retries after an ACK timeout or a PSN-sequence NAK (`retry_cnt`).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (`rnr_retry`; 7 retries for ever).
    pub rnr_retry: u8,
}

impl Default for RequesterConfig {
    fn default() -> Self {
        Self {
            ack_timeout: None,
            retry_cnt: RETRY_FOREVER,
            rnr_retry: RETRY_FOREVER,
        }
    }
}

/// What an acknowledgement of a PSN did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// The PSN was never sent (a forged or stale answer): nothing changed,
    /// and the rest of the packet is to be ignored.
    Stale,
    /// Nothing new: the PSN was already acknowledged.
    Old,
    /// The window moved on: everything up to the PSN is acknowledged, and
    /// before, everything up to `from` was.
    Advanced {
        /// The last PSN acknowledged before.
        from: Psn,
    },
}

impl Ack {
    /// False for [`Ack::Stale`]: the answer is to be dropped.
    pub fn is_valid(self) -> bool {
        self != Ack::Stale
    }
}

/// What to do about an RNR NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RnrNak {
    /// A copy of the NAK that started the current wait: nothing.
    Copy,
    /// No RNR retry left: the oldest message fails with RNR retry exceeded.
    Exhausted,
    /// Wait; the requester sends again from the NAKed PSN when
    /// [`Requester::poll_rnr_resume`] says so.
    Wait,
}

/// What to do about a PSN-sequence-error NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqNak {
    /// Nothing: a copy of the NAK already acted on, an RNR wait that will
    /// resend anyway, or nothing outstanding.
    Ignore,
    /// No retry left: the oldest message fails with transport retry
    /// exceeded.
    Exhausted,
    /// Go back and send again from this PSN.
    GoBack(Psn),
}

/// What the ACK timer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckTimeout {
    /// Not running or not due.
    NotDue,
    /// Due with nothing outstanding: it has been stopped.
    Idle,
    /// Due with no retry left: the oldest message fails with transport
    /// retry exceeded.
    Exhausted,
    /// Due: go back and send again from this PSN (a retry was used).
    Retry(Psn),
}

/// The requester of one RC QP.
#[derive(Debug, Clone)]
pub struct Requester {
    cfg: RequesterConfig,
    /// PSN the next new message starts at.
    next_psn: Psn,
    /// One past the highest PSN ever transmitted: ACKs beyond it are forged.
    high_psn: Psn,
    /// The highest PSN the responder has acknowledged (explicitly, or
    /// implicitly by a NAK, a READ response or an atomic ACK); the send
    /// window starts right after it.
    ack_psn: Psn,
    retry_left: u8,
    rnr_left: u8,
    /// The PSN a PSN-sequence NAK last made us go back to; a copy of that
    /// NAK before any progress is ignored.
    nak_retry_psn: Option<Psn>,
    /// The PSN to send again from when the RNR wait is over.
    rnr_psn: Option<Psn>,
    timers: TimerTable,
}

impl Default for Requester {
    fn default() -> Self {
        Self::new()
    }
}

impl Requester {
    /// A requester at PSN 0 with no retries (a QP in RESET).
    pub fn new() -> Self {
        Self {
            cfg: RequesterConfig::default(),
            next_psn: Psn::new(0),
            high_psn: Psn::new(0),
            ack_psn: Psn::new(Psn::MASK),
            retry_left: 0,
            rnr_left: 0,
            nak_retry_psn: None,
            rnr_psn: None,
            timers: TimerTable::default(),
        }
    }

    /// Takes the retry settings (on every MODIFY_QP).
    pub fn configure(&mut self, cfg: RequesterConfig) {
        self.cfg = cfg;
    }

    /// Starts the send PSN space at `psn` (the `sq_psn` attribute).
    pub fn set_psn(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.high_psn = psn;
        self.ack_psn = crate::prev(psn);
    }

    /// Fills both retry counters (on the way to RTS, and on progress).
    pub fn refill_retries(&mut self) {
        self.retry_left = self.cfg.retry_cnt;
        self.rnr_left = self.cfg.rnr_retry;
    }

    /// The PSN the next new message starts at.
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// The last PSN acknowledged.
    pub fn ack_psn(&self) -> Psn {
        self.ack_psn
    }

    /// The oldest PSN not acknowledged: the start of the window.
    pub fn una(&self) -> Psn {
        self.ack_psn.add(1)
    }

    /// One past the highest PSN sent.
    pub fn high_psn(&self) -> Psn {
        self.high_psn
    }

    /// Retries left after ACK timeouts and PSN-sequence NAKs.
    pub fn retry_left(&self) -> u8 {
        self.retry_left
    }

    /// Retries left after RNR NAKs.
    pub fn rnr_left(&self) -> u8 {
        self.rnr_left
    }

    /// The timers.
    pub fn timers(&self) -> &TimerTable {
        &self.timers
    }

    /// When [`Self::poll_rnr_resume`] or [`Self::poll_ack_timeout`] should
    /// next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Takes `n` PSNs for a new message; returns the first.
    pub fn alloc(&mut self, n: u32) -> Psn {
        let first = self.next_psn;
        self.next_psn = self.next_psn.add(n);
        first
    }

    /// True while an RNR NAK's wait runs: nothing is sent.
    pub fn is_rnr_waiting(&self) -> bool {
        self.rnr_psn.is_some()
    }

    /// PSNs the window has room for from `psn` on (0 or less: none).
    pub fn window_room(&self, psn: Psn) -> i64 {
        i64::from(MAX_UNACKED_PSNS) - i64::from(psn.diff(self.una()))
    }

    /// Records that `count` packets from `psn` were sent, up to `end`
    /// (exclusive; for a READ, its responses' PSNs). Returns how many of
    /// them had been sent before: the retransmissions.
    pub fn note_sent(&mut self, psn: Psn, count: u32, end: Psn) -> u64 {
        let resent = self.high_psn.diff(psn).clamp(0, count as i32) as u64;
        if end.diff(self.high_psn) > 0 {
            self.high_psn = end;
        }
        resent
    }

    /// Starts the ACK timer if it is not running (something was sent).
    pub fn arm_ack_timer(&mut self, now: Instant) {
        if self.timers.get(Timer::Ack).is_none() {
            self.timers
                .set(Timer::Ack, deadline(now, self.cfg.ack_timeout));
        }
    }

    /// Takes the responder's word that everything up to and including
    /// `psn` arrived.
    pub fn handle_ack(&mut self, psn: Psn) -> Ack {
        if !psn.precedes(self.high_psn) {
            return Ack::Stale;
        }
        let old = self.ack_psn;
        if psn.diff(old) > 0 {
            self.ack_psn = psn;
            Ack::Advanced { from: old }
        } else {
            Ack::Old
        }
    }

    /// The responder made progress: refill the retry counters, forget the
    /// last PSN-sequence NAK, and restart the ACK timer while messages are
    /// `outstanding` (stop it otherwise).
    pub fn made_progress(&mut self, now: Instant, outstanding: bool) {
        self.refill_retries();
        self.nak_retry_psn = None;
        let at = if outstanding {
            deadline(now, self.cfg.ack_timeout)
        } else {
            None
        };
        self.timers.set(Timer::Ack, at);
    }

    /// True if an RNR NAK for `psn` is a copy of the one that started the
    /// current wait.
    pub fn is_rnr_copy(&self, psn: Psn) -> bool {
        self.rnr_psn == Some(psn)
    }

    /// An RNR NAK for `psn` with timer code `timer`, after its implied
    /// acknowledgement of everything before `psn` (see [`Self::handle_ack`]).
    pub fn handle_rnr_nak(&mut self, now: Instant, psn: Psn, timer: u8) -> RnrNak {
        if self.is_rnr_copy(psn) {
            return RnrNak::Copy;
        }
        if self.rnr_left == 0 {
            return RnrNak::Exhausted;
        }
        if self.rnr_left != RETRY_FOREVER {
            self.rnr_left -= 1;
        }
        self.rnr_psn = Some(psn);
        self.timers
            .set(Timer::RnrResume, Some(now.add(rnr_timer(timer))));
        self.timers.stop(Timer::Ack);
        RnrNak::Wait
    }

    /// A PSN-sequence-error NAK for `psn`, after its implied
    /// acknowledgement of everything before `psn`; `outstanding` says if
    /// any message waits for completion. Retries count against `retry_cnt`
    /// as timeouts do; a copy of a NAK already acted on is ignored.
    pub fn handle_seq_nak(&mut self, psn: Psn, outstanding: bool) -> SeqNak {
        if self.is_rnr_waiting() || self.nak_retry_psn == Some(psn) || !outstanding {
            return SeqNak::Ignore;
        }
        if self.retry_left == 0 {
            return SeqNak::Exhausted;
        }
        self.retry_left -= 1;
        self.nak_retry_psn = Some(psn);
        SeqNak::GoBack(psn)
    }

    /// Go-back-N from some PSN: the resend restarts the ACK timer.
    pub fn go_back(&mut self, now: Instant) {
        self.timers
            .set(Timer::Ack, deadline(now, self.cfg.ack_timeout));
    }

    /// If the RNR wait is over at `now`: ends it and returns the PSN to send
    /// again from.
    pub fn poll_rnr_resume(&mut self, now: Instant) -> Option<Psn> {
        if !self.timers.is_due(Timer::RnrResume, now) {
            return None;
        }
        self.timers.stop(Timer::RnrResume);
        self.rnr_psn.take()
    }

    /// What the ACK timer says at `now`; `outstanding` says if any message
    /// waits for completion.
    pub fn poll_ack_timeout(&mut self, now: Instant, outstanding: bool) -> AckTimeout {
        if !self.timers.is_due(Timer::Ack, now) {
            return AckTimeout::NotDue;
        }
        if !outstanding {
            self.timers.stop(Timer::Ack);
            return AckTimeout::Idle;
        }
        if self.retry_left == 0 {
            return AckTimeout::Exhausted;
        }
        self.retry_left -= 1;
        AckTimeout::Retry(self.una())
    }

    /// Stops both timers and any RNR wait (the QP flushed its messages).
    pub fn cancel(&mut self) {
        self.timers.stop(Timer::Ack);
        self.timers.stop(Timer::RnrResume);
        self.rnr_psn = None;
    }
}

/// The implied NAK of one READ or atomic: its responses were found missing
/// (a later PSN was answered first), so it is asked for again, from the
/// first response not received. Once per position, or copies and
/// stragglers of a stream already asked for again would ask again and
/// again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpliedNak {
    at: Option<Psn>,
}

impl ImpliedNak {
    /// Responses are missing from `expect` on: true if that position has
    /// not been asked for again yet (and it now has).
    pub fn ask_again(&mut self, expect: Psn) -> bool {
        if self.at == Some(expect) {
            return false;
        }
        self.at = Some(expect);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(retry: u8, rnr: u8) -> RequesterConfig {
        RequesterConfig {
            ack_timeout: Some(Duration::from_us(10)),
            retry_cnt: retry,
            rnr_retry: rnr,
        }
    }

    fn req_at(psn: u32, retry: u8, rnr: u8) -> Requester {
        let mut r = Requester::new();
        r.configure(cfg(retry, rnr));
        r.set_psn(Psn::new(psn));
        r.refill_retries();
        r
    }

    #[test]
    fn window_edges_across_the_psn_wrap() {
        let mut r = req_at(Psn::MASK - 9, 7, 7);
        let first = r.alloc(MAX_UNACKED_PSNS + 10);
        assert_eq!(first, Psn::new(Psn::MASK - 9));
        assert_eq!(r.next_psn(), Psn::new(MAX_UNACKED_PSNS));
        // The window holds exactly MAX_UNACKED_PSNS from the first unacked.
        let edge = first.add(MAX_UNACKED_PSNS - 1);
        assert_eq!(r.window_room(edge), 1);
        assert_eq!(r.window_room(edge.add(1)), 0);
        assert_eq!(r.note_sent(first, MAX_UNACKED_PSNS, edge.add(1)), 0);
        // An ACK past the wrap moves the window across it.
        assert_eq!(
            r.handle_ack(Psn::new(4)),
            Ack::Advanced {
                from: Psn::new(Psn::MASK - 10)
            }
        );
        assert_eq!(r.una(), Psn::new(5));
        assert_eq!(r.window_room(Psn::new(5 + MAX_UNACKED_PSNS - 1)), 1);
        // Sending the first PSNs again counts them as retransmissions.
        assert_eq!(r.note_sent(Psn::new(5), 4, Psn::new(9)), 4);
    }

    #[test]
    fn acks_for_psns_never_sent_change_nothing() {
        let mut r = req_at(100, 7, 7);
        r.alloc(3);
        assert_eq!(r.handle_ack(Psn::new(100)), Ack::Stale, "nothing sent yet");
        r.note_sent(Psn::new(100), 3, Psn::new(103));
        assert_eq!(
            r.handle_ack(Psn::new(103)),
            Ack::Stale,
            "one past the high PSN"
        );
        assert_eq!(r.handle_ack(Psn::new(98)), Ack::Old);
        assert_eq!(
            r.handle_ack(Psn::new(102)),
            Ack::Advanced { from: Psn::new(99) }
        );
        assert_eq!(r.handle_ack(Psn::new(101)), Ack::Old);
        assert_eq!(r.ack_psn(), Psn::new(102));
    }

    #[test]
    fn seq_nak_goes_back_once_per_nak_until_progress() {
        let mut r = req_at(0, 2, 7);
        r.alloc(10);
        r.note_sent(Psn::new(0), 10, Psn::new(10));
        assert_eq!(
            r.handle_seq_nak(Psn::new(4), true),
            SeqNak::GoBack(Psn::new(4))
        );
        assert_eq!(
            r.handle_seq_nak(Psn::new(4), true),
            SeqNak::Ignore,
            "a copy"
        );
        assert_eq!(r.retry_left(), 1);
        assert_eq!(
            r.handle_seq_nak(Psn::new(6), true),
            SeqNak::GoBack(Psn::new(6))
        );
        assert_eq!(r.handle_seq_nak(Psn::new(7), true), SeqNak::Exhausted);
        r.made_progress(Instant::ZERO, true);
        assert_eq!(r.retry_left(), 2, "progress refills the counters");
        assert_eq!(r.handle_seq_nak(Psn::new(7), false), SeqNak::Ignore);
    }

    #[test]
    fn ack_timeouts_retry_then_exhaust() {
        let mut r = req_at(0, 1, 7);
        r.alloc(1);
        r.note_sent(Psn::new(0), 1, Psn::new(1));
        let t0 = Instant::from_ps(1_000);
        r.arm_ack_timer(t0);
        let due = t0.add(Duration::from_us(10));
        assert_eq!(r.poll_timeout(), Some(due));
        assert_eq!(r.poll_ack_timeout(t0, true), AckTimeout::NotDue);
        assert_eq!(
            r.poll_ack_timeout(due, true),
            AckTimeout::Retry(Psn::new(0))
        );
        r.go_back(due);
        let due2 = due.add(Duration::from_us(10));
        assert_eq!(r.poll_ack_timeout(due2, true), AckTimeout::Exhausted);
        assert_eq!(r.poll_ack_timeout(due2, false), AckTimeout::Idle);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn rnr_naks_wait_count_and_exhaust() {
        let mut r = req_at(0, 7, 1);
        r.alloc(2);
        r.note_sent(Psn::new(0), 2, Psn::new(2));
        let now = Instant::from_ps(5);
        assert_eq!(r.handle_rnr_nak(now, Psn::new(1), 1), RnrNak::Wait);
        assert!(r.is_rnr_waiting());
        assert_eq!(
            r.timers().get(Timer::Ack),
            None,
            "the wait stops the ACK timer"
        );
        assert_eq!(r.handle_rnr_nak(now, Psn::new(1), 1), RnrNak::Copy);
        assert_eq!(
            r.handle_seq_nak(Psn::new(1), true),
            SeqNak::Ignore,
            "the RNR wait resends anyway"
        );
        let resume = now.add(Duration::from_us(10));
        assert_eq!(r.poll_timeout(), Some(resume));
        assert_eq!(r.poll_rnr_resume(now), None);
        assert_eq!(r.poll_rnr_resume(resume), Some(Psn::new(1)));
        assert!(!r.is_rnr_waiting());
        assert_eq!(r.handle_rnr_nak(now, Psn::new(1), 1), RnrNak::Exhausted);
    }

    #[test]
    fn rnr_retry_seven_is_for_ever() {
        let mut r = req_at(0, 7, RETRY_FOREVER);
        for i in 0..20u32 {
            assert_eq!(
                r.handle_rnr_nak(Instant::ZERO, Psn::new(i), 0),
                RnrNak::Wait
            );
            assert_eq!(
                r.poll_rnr_resume(Instant::from_ps(u64::MAX)),
                Some(Psn::new(i))
            );
        }
        assert_eq!(r.rnr_left(), RETRY_FOREVER);
    }

    #[test]
    fn implied_nak_asks_once_per_position() {
        let mut n = ImpliedNak::default();
        assert!(n.ask_again(Psn::new(3)));
        assert!(!n.ask_again(Psn::new(3)));
        assert!(n.ask_again(Psn::new(5)));
    }
}
