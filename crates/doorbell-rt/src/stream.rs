//! When a shared-memory port's receiving thread is in a stream, and how
//! long it then looks again before it sleeps (decision record 0022). The
//! UDP socket's thread waits in the kernel (decision record 0042), but
//! for a short look after a stream's burst where no program polls its NIC
//! (decision record 0064).

use std::time::Duration;

/// Receives in a row that found frames, after which the thread counts as
/// in a stream: frames come faster than it can be woken for each.
pub(crate) const TURNS: u32 = 4;
/// How long a thread in a stream spins for the next frame before it
/// sleeps.
pub(crate) const SPIN: Duration = Duration::from_micros(50);
