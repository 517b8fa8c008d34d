//! The requester's timers: an array of deadlines indexed by [`Timer`]
//! (quinn-proto's `TimerTable`).

use doorbell_types::Instant;

/// A transport timer of one QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// No acknowledgement came in time: go back and send again.
    Ack,
    /// An RNR NAK's wait is over: send again from the NAKed PSN.
    RnrResume,
    /// Silence for longer than the measured round trip allows: send again
    /// early, without using a retry.
    Adaptive,
}

impl Timer {
    /// Every timer, in the order their deadlines are checked.
    pub const ALL: [Timer; 3] = [Timer::Ack, Timer::RnrResume, Timer::Adaptive];
}

/// When each [`Timer`] fires, if it is running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerTable([Option<Instant>; Timer::ALL.len()]);

impl TimerTable {
    /// Starts (or restarts) `t` to fire at `at`; `None` stops it.
    pub fn set(&mut self, t: Timer, at: Option<Instant>) {
        self.0[t as usize] = at;
    }

    /// When `t` fires, if it is running.
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.0[t as usize]
    }

    /// Stops `t`.
    pub fn stop(&mut self, t: Timer) {
        self.0[t as usize] = None;
    }

    /// True if `t` is running and due at `now`.
    pub fn is_due(&self, t: Timer, now: Instant) -> bool {
        self.get(t).is_some_and(|at| at <= now)
    }

    /// The earliest deadline of all.
    pub fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().copied().min()
    }
}
