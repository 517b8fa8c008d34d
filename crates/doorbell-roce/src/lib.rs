//! The RC transport of the doorbell NIC: per-QP requester and responder
//! state machines, sans-IO (IBTA Vol 1 §9.7, "Reliable service").
//!
//! # Model
//! A reliable connection numbers its packets with 24-bit PSNs. The
//! [`Requester`] hands out PSNs to new messages, keeps the window of PSNs
//! sent and not yet acknowledged, takes ACKs and NAKs, and decides when to
//! go back and send again (go-back-N after a PSN-sequence NAK, an ACK
//! timeout or an RNR wait, and early, when the silence is longer than the
//! measured round trip allows: adaptive retransmission, [`RttEstimator`])
//! and when retries are exhausted. The
//! [`Responder`] keeps the PSN it expects next and the MSN, classifies each
//! request as new, duplicate or out of sequence, NAKs a gap once, and keeps
//! the results of recent atomics to answer their duplicates.
//!
//! This crate knows PSNs, message sequence numbers, retry counters, RNR
//! timer codes and time, and nothing else: not WQEs, not host memory, not
//! DMA, not frames. The device's engines own those; they ask the state
//! machines what to do and act on the answer.
//!
//! # Guarantees
//! - Deterministic and sans-IO: no clock is read; every method that needs
//!   the time takes `now`, and timers come out of
//!   [`Requester::poll_timeout`] as [`Instant`]s.
//! - PSN arithmetic is modulo 2^24 ([`Psn`]); windows work across the wrap.
//! - An acknowledgement for a PSN never sent ([`Ack::Stale`]) changes
//!   nothing, so a forged or late ACK cannot move the window.
//! - Nothing panics on any PSN, syndrome or timer code from the wire.
//!
//! # Driving it
//! Requester, per message: [`Requester::alloc`] its PSNs; before sending
//! packet PSN `p`, ask [`Requester::window_room`]; after sending, report it
//! with [`Requester::note_sent`] and [`Requester::arm_ack_timer`]. Per
//! response: [`Requester::handle_ack`] with the PSN it acknowledges, then
//! [`Requester::made_progress`] if it advanced; for an RNR NAK
//! [`Requester::handle_rnr_nak`], for a PSN-sequence NAK
//! [`Requester::handle_seq_nak`]. When [`Requester::poll_timeout`] is due,
//! call [`Requester::poll_rnr_resume`], [`Requester::poll_ack_timeout`]
//! and [`Requester::poll_adaptive`].
//!
//! Responder, per request: [`Responder::handle_psn`]; for
//! [`RequestPsn::Expected`] execute it, then [`Responder::advance`] by the
//! PSNs it used and [`Responder::complete_message`] at its last packet.
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod psn;
mod requester;
mod responder;
mod rto;
mod timer;

pub use psn::PsnRange;
pub use requester::{
    Ack, AckTimeout, AdaptiveTimeout, ImpliedNak, Requester, RequesterConfig, RnrNak, SeqNak,
};
pub use responder::{ATOMIC_REPLAY_DEPTH, READ_REPLAY_DEPTH, RequestPsn, Responder};
pub use rto::RttEstimator;
pub use timer::{Timer, TimerTable};

use doorbell_types::{Duration, Instant, Psn};

/// PSNs that may always be in flight past the last acknowledged one (rxe's
/// `RXE_MAX_UNACKED_PSNS`); a QP whose MTU is below 2048 may have more
/// ([`window_psns`]). A READ counts all the PSNs its responses use, but its
/// request may always go when it is the oldest thing unacknowledged.
pub const MAX_UNACKED_PSNS: u32 = 128;

/// Bytes of full packets the send window holds at the least: at an MTU
/// below 2048, [`MAX_UNACKED_PSNS`] packets would hold less.
pub const WINDOW_BYTES: u32 = 256 << 10;

/// The send window, in PSNs, of a QP whose path MTU is `mtu` bytes:
/// [`MAX_UNACKED_PSNS`], or as many packets as carry [`WINDOW_BYTES`],
/// whichever is more (256 at MTU 1024, 1024 at MTU 256).
pub fn window_psns(mtu: u32) -> u32 {
    MAX_UNACKED_PSNS.max(WINDOW_BYTES / mtu.max(1))
}

/// Packets after which a long message asks for an ACK anyway (rxe's
/// `RXE_MAX_PKT_PER_ACK`).
pub const ACK_EVERY_PACKETS: u32 = 64;

/// ACK syndrome credit field meaning "no credits advertised" (IBTA Vol 1
/// §9.7.5.1).
pub const CREDITS_INVALID: u8 = 0x1f;

/// The retry counter value that means "retry for ever" (IBTA Vol 1
/// §9.7.5.2.8, for `rnr_retry`).
pub const RETRY_FOREVER: u8 = 7;

/// RNR NAK timer codes in microseconds (IBTA Vol 1 Table 45).
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

/// The wait an RNR NAK timer code names (IBTA Vol 1 Table 45); only the low
/// five bits of `code` count.
pub fn rnr_timer(code: u8) -> Duration {
    Duration::from_us(u64::from(RNR_TIMER_US[usize::from(code & 31)]))
}

/// The ACK timeout a QP's 5-bit `timeout` attribute names: 4.096 µs ×
/// 2^timeout; `None` for 0, which means infinite (IBTA Vol 1 §9.7.6.1.3).
pub fn ack_timeout(code: u8) -> Option<Duration> {
    match code {
        0 => None,
        t => Some(Duration::from_ps(4_096_000u64 << t.min(31))),
    }
}

/// The PSN before `psn`.
pub const fn prev(psn: Psn) -> Psn {
    psn.add(Psn::MASK)
}

/// `now + d`, for a timer that may be infinite.
fn deadline(now: Instant, d: Option<Duration>) -> Option<Instant> {
    d.map(|d| now.add(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_holds_128_packets_or_256_kib_whichever_is_more() {
        let at = window_psns;
        assert_eq!([at(256), at(512), at(1024)], [1024, 512, 256]);
        assert_eq!([at(2048), at(4096)], [MAX_UNACKED_PSNS; 2]);
        for mtu in [256, 512, 1024, 2048, 4096] {
            assert!(u64::from(window_psns(mtu)) * u64::from(mtu) >= u64::from(WINDOW_BYTES));
        }
        // An MTU the QP never set (0) gives a window, not a division by 0.
        assert!(window_psns(0) >= MAX_UNACKED_PSNS);
    }
}
