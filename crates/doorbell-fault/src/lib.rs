//! Faults on a wire, sans-IO: each frame is delivered, dropped, duplicated,
//! delayed (and so overtaken) or has bits flipped, and comes out when it is
//! due on a clock the caller moves.
//!
//! # Model
//! A [`FaultStage`] sits on one direction of a link, between the port that
//! sends and whatever carries the frames on. Every frame that enters it with
//! [`FaultStage::handle_frame`] meets a [`FaultPolicy`], which gives its
//! [`Fate`]; the stage carries the fate out and holds the frames until they
//! are due: at once for a delivered, duplicated or corrupted frame, `d`
//! later for one delayed by `d`, so that the frames behind it pass it.
//! Delayed frames wait in a bounded queue; one that finds it full is
//! dropped and counted as [`FaultStats::overflowed`]. Frames are the RoCEv2
//! packets the NIC built, IPv4 header first: corruption flips bits from the
//! BTH on (after [`ROCE_AT`] bytes of IPv4 and UDP header), so a corrupted
//! frame reaches the peer and is dropped there by its ICRC check, as on a
//! real link.
//!
//! [`Faults`] is the random policy's configuration: the probability of each
//! fault per frame and the seed of its generator. [`RandomFaults`] owns a
//! ChaCha8 generator seeded from it, so the same seed makes the same
//! decisions for the same sequence of frames. Any `FnMut(&[u8]) -> Fate` is
//! a policy too, for tests that must hit one given packet.
//!
//! # Guarantees
//! - No clock, no thread, no OS randomness: time comes in as
//!   `now: doorbell_types::Instant`, and the output depends only on the
//!   policy, the frames and the times given.
//! - Frames come out in order of their due time, frames due at the same
//!   time in the order they went in (a duplicate right behind its original).
//! - Nothing is lost silently: every frame in is counted in [`FaultStats`],
//!   and each one dropped says why.
//!
//! # Driving it
//! Feed frames with [`FaultStage::handle_frame`] at their time; then take
//! [`FaultStage::poll_ready`] at the same time until it returns `None`, and
//! come back at [`FaultStage::poll_timeout`] (call `poll_ready` again with
//! that time) for the frames held back. `now` must not go backwards. The
//! live runtime drives a stage from a relay thread on the wall clock, the
//! simulator and the loopback link on their virtual clocks.
//!
//! ```
//! use doorbell_fault::{Fate, FaultStage};
//! use doorbell_types::{Duration, Instant};
//!
//! // Hold the first frame back 5 µs, pass the rest.
//! let mut n = 0;
//! let policy = move |_: &[u8]| {
//!     n += 1;
//!     if n == 1 { Fate::Delay(Duration::from_us(5)) } else { Fate::Deliver }
//! };
//! let mut stage = FaultStage::new(Box::new(policy), 16);
//! let t0 = Instant::ZERO;
//! stage.handle_frame(t0, vec![1u8; 40]);
//! stage.handle_frame(t0, vec![2u8; 40]);
//! assert_eq!(stage.poll_ready(t0).map(|f| f[0]), Some(2), "the second overtakes");
//! assert_eq!(stage.poll_ready(t0), None);
//! let due = stage.poll_timeout().unwrap();
//! assert_eq!(due, t0.add(Duration::from_us(5)));
//! assert_eq!(stage.poll_ready(due).map(|f| f[0]), Some(1));
//! assert_eq!(stage.stats().delayed, 1);
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

use std::collections::BTreeMap;

use doorbell_types::{Duration, Instant};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// Bytes of IPv4 and UDP header before the BTH in a frame: where
/// [`Fate::Corrupt`] offsets start.
pub const ROCE_AT: usize = 28;

/// Delayed frames a stage holds at once unless told otherwise.
pub const DEFAULT_QUEUE_LIMIT: usize = 4096;

/// What becomes of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Sent as it is.
    Deliver,
    /// Lost.
    Drop,
    /// Sent twice, back to back.
    Duplicate,
    /// Sent with the bits of `mask` flipped in byte `at` of the RoCEv2 part
    /// (from the BTH on; `at` is taken modulo its length).
    Corrupt {
        /// Byte offset from the start of the BTH.
        at: usize,
        /// Bits to flip (non-zero to change anything).
        mask: u8,
    },
    /// Held back this long; frames after it go first.
    Delay(Duration),
}

/// Decides the fate of each frame. `frame` is the whole IPv4 packet,
/// headers included.
pub trait FaultPolicy: Send {
    /// The fate of the next frame.
    fn fate(&mut self, frame: &[u8]) -> Fate;
}

impl<F: FnMut(&[u8]) -> Fate + Send> FaultPolicy for F {
    fn fate(&mut self, frame: &[u8]) -> Fate {
        self(frame)
    }
}

/// Random faults, each frame independently, from a seeded generator.
/// Probabilities are per frame and checked in the order of the fields;
/// they should add up to at most 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Seed of the generator: print it to replay the decisions.
    pub seed: u64,
    /// Probability a frame is dropped.
    pub loss: f64,
    /// Probability a frame is sent twice.
    pub duplicate: f64,
    /// Probability a frame is held back by up to [`Faults::max_delay`], so
    /// that frames behind it overtake it.
    pub reorder: f64,
    /// Probability a frame has one bit flipped after the IP and UDP headers.
    pub corrupt: f64,
    /// Longest hold of a reordered frame (drawn in whole nanoseconds).
    pub max_delay: Duration,
    /// Delayed frames that may wait at once; more are dropped.
    pub queue_limit: usize,
}

impl Faults {
    /// No faults yet, with `seed`; set the probabilities on the result.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            max_delay: Duration::from_us(200),
            queue_limit: DEFAULT_QUEUE_LIMIT,
        }
    }
}

/// The running random policy of a [`Faults`]: it owns its generator,
/// seeded from [`Faults::seed`].
pub struct RandomFaults {
    cfg: Faults,
    rng: ChaCha8Rng,
}

impl RandomFaults {
    /// A policy drawing from `cfg.seed`.
    pub fn new(cfg: Faults) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
        }
    }

    /// A uniform draw in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl FaultPolicy for RandomFaults {
    fn fate(&mut self, frame: &[u8]) -> Fate {
        let mut x = self.unit();
        let c = &self.cfg;
        let (loss, dup, reorder, corrupt) = (c.loss, c.duplicate, c.reorder, c.corrupt);
        let max_delay_ns = (c.max_delay.as_ps() / 1000).max(1);
        if x < loss {
            return Fate::Drop;
        }
        x -= loss;
        if x < dup {
            return Fate::Duplicate;
        }
        x -= dup;
        if x < reorder {
            let ns = self.rng.next_u64() % max_delay_ns;
            return Fate::Delay(Duration::from_ns(ns.max(1)));
        }
        x -= reorder;
        if x < corrupt {
            let len = frame.len().saturating_sub(ROCE_AT).max(1);
            let at = (self.rng.next_u64() % len as u64) as usize;
            let mask = 1u8 << (self.rng.next_u32() % 8);
            return Fate::Corrupt { at, mask };
        }
        Fate::Deliver
    }
}

/// What a stage did, frame by frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames that reached the stage.
    pub frames: u64,
    /// Frames dropped by the policy.
    pub dropped: u64,
    /// Frames sent twice.
    pub duplicated: u64,
    /// Frames held back.
    pub delayed: u64,
    /// Frames sent with flipped bits.
    pub corrupted: u64,
    /// Frames dropped because the queue of delayed frames was full (or, in
    /// the live runtime, because the relay was backed up).
    pub overflowed: u64,
}

/// A frame as a stage sees it: the bytes of an IPv4 packet, and whatever
/// else the runtime carries with them (a destination, a tag).
pub trait Packet: Clone {
    /// The whole IPv4 packet.
    fn bytes(&self) -> &[u8];
    /// The same, to flip bits in.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl Packet for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// A frame waiting in the stage.
struct Held<F> {
    frame: F,
    /// Held back by [`Fate::Delay`]: counts against the queue limit.
    delayed: bool,
}

/// Faults on one direction of a link. See the crate docs for the model and
/// the order of calls: `handle_frame`, then `poll_ready` until `None`, then
/// `poll_timeout`.
pub struct FaultStage<F> {
    policy: Box<dyn FaultPolicy>,
    queue_limit: usize,
    /// Frames by (due time, arrival order).
    queue: BTreeMap<(Instant, u64), Held<F>>,
    seq: u64,
    delayed_held: usize,
    stats: FaultStats,
}

impl<F: Packet> FaultStage<F> {
    /// A stage applying `policy`, holding at most `queue_limit` delayed
    /// frames at once.
    pub fn new(policy: Box<dyn FaultPolicy>, queue_limit: usize) -> Self {
        Self {
            policy,
            queue_limit,
            queue: BTreeMap::new(),
            seq: 0,
            delayed_held: 0,
            stats: FaultStats::default(),
        }
    }

    /// A stage applying the random faults of `cfg`, with its queue limit.
    pub fn random(cfg: Faults) -> Self {
        let limit = cfg.queue_limit;
        Self::new(Box::new(RandomFaults::new(cfg)), limit)
    }

    /// A frame enters the stage at `now`; the policy decides its fate.
    pub fn handle_frame(&mut self, now: Instant, mut frame: F) {
        self.stats.frames += 1;
        match self.policy.fate(frame.bytes()) {
            Fate::Deliver => self.hold(now, frame, false),
            Fate::Drop => self.stats.dropped += 1,
            Fate::Duplicate => {
                self.stats.duplicated += 1;
                self.hold(now, frame.clone(), false);
                self.hold(now, frame, false);
            }
            Fate::Corrupt { at, mask } => {
                self.stats.corrupted += 1;
                let b = frame.bytes_mut();
                let n = b.len().saturating_sub(ROCE_AT);
                if n > 0 {
                    b[ROCE_AT + at % n] ^= mask;
                }
                self.hold(now, frame, false);
            }
            Fate::Delay(d) => {
                if self.delayed_held >= self.queue_limit {
                    self.stats.overflowed += 1;
                    return;
                }
                self.stats.delayed += 1;
                self.delayed_held += 1;
                self.hold(now.add(d), frame, true);
            }
        }
    }

    fn hold(&mut self, due: Instant, frame: F, delayed: bool) {
        self.queue.insert((due, self.seq), Held { frame, delayed });
        self.seq += 1;
    }

    /// The next frame due at or before `now`, earliest first.
    #[must_use]
    pub fn poll_ready(&mut self, now: Instant) -> Option<F> {
        let entry = self.queue.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        let held = entry.remove();
        if held.delayed {
            self.delayed_held -= 1;
        }
        Some(held.frame)
    }

    /// When the next frame is due, if the stage holds one.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|(&(t, _), _)| t)
    }

    /// What the stage has done so far.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// Frames waiting in the stage, due or not.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether the stage holds no frame.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> Vec<u8> {
        vec![0u8; len]
    }

    fn tagged(i: u8) -> Vec<u8> {
        let mut b = frame(40);
        b[ROCE_AT] = i;
        b
    }

    #[test]
    fn the_same_seed_makes_the_same_decisions() {
        let mut cfg = Faults::new(42);
        cfg.loss = 0.05;
        cfg.duplicate = 0.02;
        cfg.reorder = 0.02;
        cfg.corrupt = 0.01;
        let f = frame(100);
        let run = |c: Faults| {
            let mut p = RandomFaults::new(c);
            (0..2000).map(|_| p.fate(&f)).collect::<Vec<_>>()
        };
        let a = run(cfg.clone());
        assert_eq!(a, run(cfg.clone()));
        cfg.seed = 43;
        assert_ne!(a, run(cfg));
        let drops = a.iter().filter(|x| **x == Fate::Drop).count();
        assert!((60..=140).contains(&drops), "{drops} drops of 2000 at 5%");
        for x in &a {
            match x {
                Fate::Corrupt { at, mask } => assert!(*at < 72 && mask.count_ones() == 1),
                Fate::Delay(d) => assert!(*d > Duration::ZERO && *d < Duration::from_us(200)),
                _ => {}
            }
        }
    }

    #[test]
    fn no_probabilities_deliver_everything() {
        let mut p = RandomFaults::new(Faults::new(7));
        assert!((0..1000).all(|_| p.fate(&frame(64)) == Fate::Deliver));
    }

    #[test]
    fn the_stage_carries_out_each_fate_at_its_time() {
        let mut n = 0u8;
        let policy = move |_: &[u8]| {
            n += 1;
            match n {
                1 => Fate::Delay(Duration::from_us(30)),
                2 => Fate::Drop,
                3 => Fate::Duplicate,
                4 => Fate::Corrupt { at: 1, mask: 0x80 },
                6 => Fate::Delay(Duration::from_us(10)),
                _ => Fate::Deliver,
            }
        };
        let mut s = FaultStage::new(Box::new(policy), 16);
        let t0 = Instant::from_ps(1_000);
        for i in 1..=6 {
            s.handle_frame(t0, tagged(i));
        }
        let mut now: Vec<Vec<u8>> = std::iter::from_fn(|| s.poll_ready(t0)).collect();
        let order: Vec<u8> = now.iter().map(|b| b[ROCE_AT]).collect();
        assert_eq!(
            order,
            [3, 3, 4, 5],
            "the dropped and delayed ones are missing"
        );
        assert_eq!(now[2][ROCE_AT + 1], 0x80, "one bit flipped");
        // The 10 µs hold comes out first, at exactly its time, not before.
        let t10 = t0.add(Duration::from_us(10));
        assert_eq!(s.poll_timeout(), Some(t10));
        assert!(s.poll_ready(Instant::from_ps(t10.as_ps() - 1)).is_none());
        now = std::iter::from_fn(|| s.poll_ready(t10)).collect();
        assert_eq!(now, [tagged(6)]);
        let t30 = t0.add(Duration::from_us(30));
        assert_eq!(s.poll_timeout(), Some(t30));
        assert_eq!(s.poll_ready(t30), Some(tagged(1)));
        assert!(s.is_empty() && s.poll_timeout().is_none());
        assert_eq!(
            s.stats(),
            FaultStats {
                frames: 6,
                dropped: 1,
                duplicated: 1,
                delayed: 2,
                corrupted: 1,
                overflowed: 0
            }
        );
    }

    #[test]
    fn a_full_queue_drops_delayed_frames_and_counts_them() {
        let policy = |b: &[u8]| {
            if b[ROCE_AT] < 3 {
                Fate::Delay(Duration::from_us(1))
            } else {
                Fate::Deliver
            }
        };
        let mut s = FaultStage::new(Box::new(policy), 2);
        for i in 0..5 {
            s.handle_frame(Instant::ZERO, tagged(i));
        }
        assert_eq!(s.stats().overflowed, 1, "the third delayed frame");
        assert_eq!(s.stats().delayed, 2);
        // Frames passed at once do not count against the limit.
        let out: Vec<u8> = std::iter::from_fn(|| s.poll_ready(Instant::from_ps(1_000_000)))
            .map(|b| b[ROCE_AT])
            .collect();
        assert_eq!(out, [3, 4, 0, 1]);
        // Released, the queue has room again.
        s.handle_frame(Instant::from_ps(1_000_000), tagged(0));
        assert_eq!(s.stats().overflowed, 1);
    }

    #[test]
    fn a_random_stage_replays_bit_for_bit() {
        let mut cfg = Faults::new(9);
        cfg.loss = 0.1;
        cfg.duplicate = 0.1;
        cfg.reorder = 0.2;
        cfg.corrupt = 0.1;
        let run = || {
            let mut s: FaultStage<Vec<u8>> = FaultStage::random(cfg.clone());
            let mut out = Vec::new();
            for i in 0..500u64 {
                let now = Instant::from_ps(i * 100_000);
                s.handle_frame(now, tagged(i as u8));
                while let Some(f) = s.poll_ready(now) {
                    out.push((now, f));
                }
            }
            while let Some(t) = s.poll_timeout() {
                while let Some(f) = s.poll_ready(t) {
                    out.push((t, f));
                }
            }
            (out, s.stats())
        };
        let (a, st) = run();
        assert_eq!((a.clone(), st), run());
        assert_eq!(
            a.len() as u64,
            st.frames - st.dropped - st.overflowed + st.duplicated
        );
        assert!(st.dropped > 0 && st.duplicated > 0 && st.delayed > 0 && st.corrupted > 0);
    }
}
