//! The requester half of RC: PSNs out, the send window, ACK/NAK handling,
//! retry and RNR counters, and the ACK, adaptive retransmission and RNR
//! timers.

use doorbell_types::{Duration, Instant, Psn};

use crate::rto::RttEstimator;
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
    /// Adaptive retransmission: the least it waits beyond the measured
    /// round trip, or `None` to wait for the ACK timer alone. With it, a
    /// silence longer than the round trip allows (SRTT + max(floor, 4
    /// RTTVAR), doubling on each early resend until a new sample) sends
    /// again from the oldest unacknowledged
    /// PSN before `ack_timeout` expires, without using a retry; the ACK
    /// timer and `retry_cnt` still decide when the QP fails. Off when
    /// `ack_timeout` is infinite, which asks for no resends on silence.
    pub adaptive_floor: Option<Duration>,
    /// PSNs that may be in flight past the last acknowledged one
    /// ([`crate::window_psns`] of the path MTU).
    pub window: u32,
}

impl Default for RequesterConfig {
    fn default() -> Self {
        Self {
            ack_timeout: None,
            retry_cnt: RETRY_FOREVER,
            rnr_retry: RETRY_FOREVER,
            adaptive_floor: None,
            window: MAX_UNACKED_PSNS,
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

/// What the adaptive retransmission timer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdaptiveTimeout {
    /// Not running or not due (or due with nothing outstanding: stopped).
    NotDue,
    /// Due: send again from this PSN (no retry used; the ACK timer keeps
    /// running).
    Resend(Psn),
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
    rtt: RttEstimator,
    /// The packet being timed for a round-trip sample, and when it left:
    /// the last of a batch sent for the first time, while no other is
    /// timed. Any resend drops it (Karn's rule).
    timed: Option<(Psn, Instant)>,
    /// Doublings of the adaptive wait: one per early resend, kept until a
    /// packet sent once is acknowledged and gives a new sample (RFC 6298
    /// 5.5 with Karn's rule). Were it reset by any progress, a round trip
    /// that grew past the estimate would draw an early resend of every
    /// message, none of which could then be sampled.
    backoff: u32,
    /// An adaptive resend happened since the last progress.
    adaptive_since_progress: bool,
    /// The answer awaited takes the responder a time of its own to make,
    /// which no round trip measured (see [`Self::hold_adaptive`]).
    adaptive_held: bool,
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
            rtt: RttEstimator::default(),
            timed: None,
            backoff: 0,
            adaptive_since_progress: false,
            adaptive_held: false,
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
        i64::from(self.cfg.window) - i64::from(psn.diff(self.una()))
    }

    /// Records that `count` packets from `psn` were sent at `now`, up to
    /// `end` (exclusive; for a READ, its responses' PSNs). Returns how
    /// many of them had been sent before: the retransmissions.
    pub fn note_sent(&mut self, now: Instant, psn: Psn, count: u32, end: Psn) -> u64 {
        let resent = self.high_psn.diff(psn).clamp(0, count as i32) as u64;
        if end.diff(self.high_psn) > 0 {
            self.high_psn = end;
            if resent == 0 && self.timed.is_none() {
                self.timed = Some((crate::prev(end), now));
            }
        }
        resent
    }

    /// Starts the ACK timer, and the adaptive one, if they are not running
    /// (something was sent).
    pub fn arm_ack_timer(&mut self, now: Instant) {
        if self.timers.get(Timer::Ack).is_none() {
            self.timers
                .set(Timer::Ack, deadline(now, self.cfg.ack_timeout));
        }
        if self.timers.get(Timer::Adaptive).is_none() {
            self.arm_adaptive(now);
        }
    }

    /// The round-trip estimate.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// The adaptive timeout that applies now, doubled for each early
    /// resend since the last sample; `None` when adaptive retransmission
    /// is off or nothing was measured yet.
    pub fn adaptive_timeout(&self) -> Option<Duration> {
        if self.adaptive_held {
            return None;
        }
        let floor = self.cfg.adaptive_floor?;
        self.cfg.ack_timeout?;
        let rto = self.rtt.rto(floor)?;
        Some(Duration::from_ps(
            rto.as_ps().saturating_mul(1u64 << self.backoff.min(32)),
        ))
    }

    /// (Re)starts the adaptive timer from `now`; it stays stopped when it
    /// would fire no earlier than the ACK timer.
    fn arm_adaptive(&mut self, now: Instant) {
        let at = self.adaptive_timeout().map(|d| now.add(d));
        let before_ack = match (at, self.timers.get(Timer::Ack)) {
            (Some(at), Some(ack)) => at < ack,
            _ => false,
        };
        self.timers.set(Timer::Adaptive, at.filter(|_| before_ack));
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
    /// last PSN-sequence NAK, take a round-trip sample if the timed packet
    /// is now acknowledged, and restart the ACK and adaptive timers while
    /// messages are `outstanding` (stop them otherwise).
    pub fn made_progress(&mut self, now: Instant, outstanding: bool) {
        self.refill_retries();
        self.nak_retry_psn = None;
        if let Some((psn, at)) = self.timed
            && psn.diff(self.ack_psn) <= 0
        {
            self.rtt.sample(now.since(at));
            self.timed = None;
            self.backoff = 0;
        }
        self.adaptive_since_progress = false;
        if outstanding {
            self.timers
                .set(Timer::Ack, deadline(now, self.cfg.ack_timeout));
            self.arm_adaptive(now);
        } else {
            self.timers.stop(Timer::Ack);
            self.timers.stop(Timer::Adaptive);
        }
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
        self.timers.stop(Timer::Adaptive);
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

    /// Go-back-N from some PSN after a NAK, an ACK timeout or an RNR
    /// wait: the resend restarts the ACK and adaptive timers, and no
    /// packet is timed any more (its answer could be to either copy).
    pub fn go_back(&mut self, now: Instant) {
        self.timed = None;
        self.timers
            .set(Timer::Ack, deadline(now, self.cfg.ack_timeout));
        self.arm_adaptive(now);
    }

    /// What the adaptive timer says at `now`; `outstanding` says if any
    /// message waits for completion. When due, the requester sends again
    /// from the oldest unacknowledged PSN: the wait doubles and the ACK
    /// timer is left as it was, so the QP fails no later and no sooner
    /// than its timeout and `retry_cnt` say.
    pub fn poll_adaptive(&mut self, now: Instant, outstanding: bool) -> AdaptiveTimeout {
        if !self.timers.is_due(Timer::Adaptive, now) {
            return AdaptiveTimeout::NotDue;
        }
        if !outstanding || self.is_rnr_waiting() {
            self.timers.stop(Timer::Adaptive);
            return AdaptiveTimeout::NotDue;
        }
        self.timed = None;
        self.backoff = self.backoff.saturating_add(1);
        self.adaptive_since_progress = true;
        self.arm_adaptive(now);
        AdaptiveTimeout::Resend(self.una())
    }

    /// Holds the adaptive timer while `hold` (the ACK timer alone runs),
    /// and starts it from `now` when the hold ends. The device holds it
    /// while the oldest thing unacknowledged is a READ with no response
    /// yet: the responder reads the data before the first response can
    /// leave, and a software responder makes every response of a long READ
    /// before the first one is on the wire, which no round trip of a short
    /// packet predicts. Once responses flow, each restarts the timer, so a
    /// READ's lost tail is still sent for early.
    pub fn hold_adaptive(&mut self, now: Instant, hold: bool) {
        if hold == self.adaptive_held {
            return;
        }
        self.adaptive_held = hold;
        if hold {
            self.timers.stop(Timer::Adaptive);
        } else if self.timers.get(Timer::Ack).is_some() {
            self.arm_adaptive(now);
        }
    }

    /// True if adaptive resends were made since the last progress: an ACK
    /// timeout now is one that adaptive retransmission did not prevent
    /// (mlx5's `roce_adp_retrans_to`).
    pub fn adaptive_resent(&self) -> bool {
        self.adaptive_since_progress
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

    /// Stops every timer and any RNR wait (the QP flushed its messages).
    pub fn cancel(&mut self) {
        self.timers.stop(Timer::Ack);
        self.timers.stop(Timer::Adaptive);
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
            adaptive_floor: None,
            window: MAX_UNACKED_PSNS,
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
        assert_eq!(
            r.note_sent(Instant::ZERO, first, MAX_UNACKED_PSNS, edge.add(1)),
            0
        );
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
        assert_eq!(r.note_sent(Instant::ZERO, Psn::new(5), 4, Psn::new(9)), 4);
    }

    #[test]
    fn the_window_holds_what_it_was_configured_for() {
        let mut r = req_at(100, 7, 7);
        r.configure(RequesterConfig {
            window: crate::window_psns(1024),
            ..cfg(7, 7)
        });
        let first = r.alloc(1000);
        assert_eq!(r.window_room(first.add(255)), 1);
        assert_eq!(r.window_room(first.add(256)), 0);
    }

    #[test]
    fn acks_for_psns_never_sent_change_nothing() {
        let mut r = req_at(100, 7, 7);
        r.alloc(3);
        assert_eq!(r.handle_ack(Psn::new(100)), Ack::Stale, "nothing sent yet");
        r.note_sent(Instant::ZERO, Psn::new(100), 3, Psn::new(103));
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
        r.note_sent(Instant::ZERO, Psn::new(0), 10, Psn::new(10));
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
        r.note_sent(Instant::ZERO, Psn::new(0), 1, Psn::new(1));
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
        r.note_sent(Instant::ZERO, Psn::new(0), 2, Psn::new(2));
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

    const US: fn(u64) -> Duration = Duration::from_us;

    fn at_us(us: u64) -> Instant {
        Instant::ZERO.add(US(us))
    }

    /// Sends PSN `psn` alone, for the first time, at `at` µs.
    fn send_one(r: &mut Requester, psn: u32, at: u64) {
        r.alloc(1);
        r.note_sent(at_us(at), Psn::new(psn), 1, Psn::new(psn + 1));
    }

    /// The peer acknowledges up to `psn` at `at` µs, with messages still
    /// `outstanding` or not.
    fn acked(r: &mut Requester, psn: u32, at: u64, outstanding: bool) {
        assert!(r.handle_ack(Psn::new(psn)).is_valid());
        r.made_progress(at_us(at), outstanding);
    }

    /// A requester with a 1 ms ACK timeout and adaptive retransmission,
    /// whose first packet, PSN 0, was sent at 0 and acknowledged at
    /// `rtt_us`.
    fn measured(rtt_us: u64) -> Requester {
        let mut r = Requester::new();
        r.configure(RequesterConfig {
            ack_timeout: Some(US(1000)),
            retry_cnt: 3,
            rnr_retry: 7,
            adaptive_floor: Some(US(1)),
            window: MAX_UNACKED_PSNS,
        });
        r.set_psn(Psn::new(0));
        r.refill_retries();
        send_one(&mut r, 0, 0);
        r.arm_ack_timer(at_us(0));
        assert_eq!(
            r.timers().get(Timer::Adaptive),
            None,
            "nothing measured yet: the ACK timer alone"
        );
        assert!(r.handle_ack(Psn::new(0)).is_valid());
        r.made_progress(at_us(rtt_us), false);
        r
    }

    #[test]
    fn adaptive_resends_come_early_back_off_and_use_no_retry() {
        let mut r = measured(10);
        assert_eq!(r.rtt().srtt(), Some(US(10)));
        assert_eq!(r.adaptive_timeout(), Some(US(30)));
        send_one(&mut r, 1, 20);
        r.arm_ack_timer(at_us(20));
        assert_eq!(r.timers().get(Timer::Ack), Some(at_us(1020)));
        assert_eq!(r.poll_timeout(), Some(at_us(50)));
        assert_eq!(r.poll_adaptive(at_us(49), true), AdaptiveTimeout::NotDue);
        // Each early resend doubles the wait, up to the ACK timer, which it
        // never moves.
        let mut at = 50;
        for wait in [60, 120, 240, 480] {
            assert_eq!(
                r.poll_adaptive(at_us(at), true),
                AdaptiveTimeout::Resend(Psn::new(1))
            );
            assert_eq!(r.retry_left(), 3, "an adaptive resend uses no retry");
            assert!(r.adaptive_resent());
            at += wait;
            assert_eq!(r.timers().get(Timer::Adaptive), Some(at_us(at)));
        }
        // 950 + 960 would be past the ACK timer: it is left to that.
        assert_eq!(
            r.poll_adaptive(at_us(at), true),
            AdaptiveTimeout::Resend(Psn::new(1))
        );
        assert_eq!(r.timers().get(Timer::Adaptive), None);
        assert_eq!(r.poll_timeout(), Some(at_us(1020)));
        assert_eq!(
            r.poll_ack_timeout(at_us(1020), true),
            AckTimeout::Retry(Psn::new(1))
        );
        assert_eq!(r.retry_left(), 2);
        // Progress without a new sample (PSN 1 was sent again) keeps the
        // backoff: 2^5 x 30 us from now.
        acked(&mut r, 1, 1030, true);
        assert!(!r.adaptive_resent());
        assert_eq!(r.timers().get(Timer::Adaptive), Some(at_us(1030 + 960)));
        // A packet sent once and acknowledged gives a sample, and the wait
        // is the estimate's again: SRTT 10 us, RTTVAR 3.75 us.
        send_one(&mut r, 2, 1040);
        acked(&mut r, 2, 1050, true);
        assert_eq!(r.adaptive_timeout(), Some(Duration::from_ns(25_000)));
    }

    #[test]
    fn a_resent_packet_gives_no_round_trip_sample() {
        let mut r = measured(10);
        send_one(&mut r, 1, 20);
        r.go_back(at_us(25));
        r.note_sent(at_us(25), Psn::new(1), 1, Psn::new(2));
        acked(&mut r, 1, 500, false);
        assert_eq!(r.rtt().srtt(), Some(US(10)), "Karn's rule");
        // A packet sent once is timed again.
        send_one(&mut r, 2, 600);
        acked(&mut r, 2, 618, false);
        assert_eq!(r.rtt().srtt(), Some(Duration::from_ns(11_000)));
    }

    #[test]
    fn no_adaptive_resends_when_off_idle_or_waiting_for_ever() {
        let mut r = measured(10);
        send_one(&mut r, 1, 20);
        r.arm_ack_timer(at_us(20));
        assert_eq!(r.poll_adaptive(at_us(50), false), AdaptiveTimeout::NotDue);
        assert_eq!(r.timers().get(Timer::Adaptive), None, "idle: stopped");
        let mut off = r.clone();
        off.configure(RequesterConfig {
            adaptive_floor: None,
            ..off.cfg
        });
        assert_eq!(off.adaptive_timeout(), None);
        let mut forever = r.clone();
        forever.configure(RequesterConfig {
            ack_timeout: None,
            ..forever.cfg
        });
        assert_eq!(forever.adaptive_timeout(), None);
        // An RNR wait stops it too.
        r.arm_ack_timer(at_us(60));
        assert!(r.timers().get(Timer::Adaptive).is_some());
        r.handle_rnr_nak(at_us(61), Psn::new(1), 1);
        assert_eq!(r.timers().get(Timer::Adaptive), None);
    }

    #[test]
    fn a_hold_stops_the_adaptive_timer_and_its_end_starts_it_afresh() {
        let mut r = measured(10);
        send_one(&mut r, 1, 20);
        r.arm_ack_timer(at_us(20));
        r.hold_adaptive(at_us(20), true);
        assert_eq!(r.timers().get(Timer::Adaptive), None);
        assert_eq!(r.adaptive_timeout(), None);
        r.arm_ack_timer(at_us(25));
        assert_eq!(r.timers().get(Timer::Adaptive), None, "held");
        assert_eq!(r.poll_adaptive(at_us(500), true), AdaptiveTimeout::NotDue);
        r.hold_adaptive(at_us(500), false);
        assert_eq!(r.timers().get(Timer::Adaptive), Some(at_us(530)));
    }

    #[test]
    fn implied_nak_asks_once_per_position() {
        let mut n = ImpliedNak::default();
        assert!(n.ask_again(Psn::new(3)));
        assert!(!n.ask_again(Psn::new(3)));
        assert!(n.ask_again(Psn::new(5)));
    }
}
