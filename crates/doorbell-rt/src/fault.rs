//! Faults on the way out of a port: drop, duplicate, delay (and so
//! reorder), and flip bits, frame by frame.
//!
//! # Model
//! A NIC started with a [`FaultPolicy`] hands every frame it sends to a
//! relay thread of its own instead of to the port. The relay asks the
//! policy for the frame's [`Fate`] and carries it out: a delayed frame
//! waits in a bounded queue while later frames pass it. Give both NICs of
//! a pair a policy and every packet between their ports, requests and
//! responses, meets one; the frames stay the RoCEv2 packets the port would
//! send, so a corrupted one reaches the peer and is dropped there by its
//! ICRC check, as on a real link.
//!
//! [`Faults`] is the random policy: each frame is dropped, duplicated,
//! delayed or corrupted with the probabilities it names, drawn from a
//! ChaCha8 generator seeded by [`Faults::seed`], so the same seed makes the
//! same decisions for the same sequence of frames. (Which frames a NIC sends
//! depends on wall-clock timing, so a live run replays the decisions, not
//! the run; print the seed when a run fails and start from it.) Any
//! `FnMut(&[u8]) -> Fate` is a policy too, for tests that must hit one
//! given packet.
//!
//! The relay stops by itself when its NIC stops: frames still waiting then
//! are dropped, as a link that goes down drops them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};
use doorbell_device::Frame;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// Bytes of IPv4 and UDP header before the BTH in a frame.
const TRANSPORT_AT: usize = 28;
/// Batches of frames the device thread may hand the relay before it drops.
const HANDOFF_BATCHES: usize = 4096;

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

/// Decides the fate of each frame a port sends. `frame` is the whole IPv4
/// packet, headers included.
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
    /// Longest hold of a reordered frame.
    pub max_delay: Duration,
    /// Frames that may wait in the relay at once; more are dropped.
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
            max_delay: Duration::from_micros(200),
            queue_limit: 4096,
        }
    }
}

/// The running random policy of a [`Faults`].
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
        let max_delay_ns = c.max_delay.as_nanos().max(1) as u64;
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
            return Fate::Delay(Duration::from_nanos(ns.max(1)));
        }
        x -= reorder;
        if x < corrupt {
            let len = frame.len().saturating_sub(TRANSPORT_AT).max(1);
            let at = (self.rng.next_u64() % len as u64) as usize;
            let mask = 1u8 << (self.rng.next_u32() % 8);
            return Fate::Corrupt { at, mask };
        }
        Fate::Deliver
    }
}

/// What a relay did, frame by frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames that reached the relay.
    pub frames: u64,
    /// Frames dropped by the policy.
    pub dropped: u64,
    /// Frames sent twice.
    pub duplicated: u64,
    /// Frames held back.
    pub delayed: u64,
    /// Frames sent with flipped bits.
    pub corrupted: u64,
    /// Frames dropped because the relay's queue was full.
    pub overflowed: u64,
}

/// Where frames leave a NIC: a fabric or a socket.
pub(crate) trait Sink: Send {
    /// Sends the frames, in order, and empties `frames`.
    fn send(&mut self, frames: &mut Vec<Frame>);
}

/// The relay: its thread, and the end the device thread sends to.
pub(crate) struct Relay {
    tx: Option<Sender<Vec<Frame>>>,
    stats: Arc<Mutex<FaultStats>>,
    thread: Option<JoinHandle<()>>,
}

impl Relay {
    /// Starts a relay applying `policy` in front of `sink`, holding at most
    /// `queue_limit` delayed frames.
    pub(crate) fn start(
        name: &str,
        policy: Box<dyn FaultPolicy>,
        sink: Box<dyn Sink>,
        queue_limit: usize,
    ) -> std::io::Result<Self> {
        let (tx, rx) = bounded(HANDOFF_BATCHES);
        let stats = Arc::new(Mutex::new(FaultStats::default()));
        let st = stats.clone();
        let thread = std::thread::Builder::new()
            .name(format!("doorbell-{name}-relay"))
            .spawn(move || relay_loop(rx, policy, sink, st, queue_limit))?;
        Ok(Self {
            tx: Some(tx),
            stats,
            thread: Some(thread),
        })
    }

    /// Hands frames to the relay; drops (and counts) them if it is backed
    /// up.
    pub(crate) fn send(&mut self, frames: &mut Vec<Frame>) {
        if frames.is_empty() {
            return;
        }
        let batch = std::mem::take(frames);
        let n = batch.len() as u64;
        let full = match self.tx.as_ref().map(|t| t.try_send(batch)) {
            Some(Ok(())) => false,
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => true,
        };
        if full {
            let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            s.frames += n;
            s.overflowed += n;
        }
    }

    /// A shared view of the relay's counts.
    pub(crate) fn stats(&self) -> Arc<Mutex<FaultStats>> {
        self.stats.clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn relay_loop(
    rx: Receiver<Vec<Frame>>,
    mut policy: Box<dyn FaultPolicy>,
    mut sink: Box<dyn Sink>,
    stats: Arc<Mutex<FaultStats>>,
    queue_limit: usize,
) {
    // Delayed frames by (release time, arrival order).
    let mut held: BinaryHeap<Reverse<(Instant, u64, usize)>> = BinaryHeap::new();
    let mut slots: Vec<Option<Frame>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut seq = 0u64;
    let mut out: Vec<Frame> = Vec::new();
    loop {
        let wait = held
            .peek()
            .map(|Reverse((t, _, _))| t.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(3600));
        let batch = match rx.recv_timeout(wait) {
            Ok(b) => Some(b),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let now = Instant::now();
        if let Some(batch) = batch {
            let mut s = stats.lock().unwrap_or_else(|e| e.into_inner());
            for mut f in batch {
                s.frames += 1;
                match policy.fate(&f.bytes) {
                    Fate::Deliver => out.push(f),
                    Fate::Drop => s.dropped += 1,
                    Fate::Duplicate => {
                        s.duplicated += 1;
                        out.push(f.clone());
                        out.push(f);
                    }
                    Fate::Corrupt { at, mask } => {
                        s.corrupted += 1;
                        let n = f.bytes.len().saturating_sub(TRANSPORT_AT);
                        if n > 0 {
                            f.bytes[TRANSPORT_AT + at % n] ^= mask;
                        }
                        out.push(f);
                    }
                    Fate::Delay(d) => {
                        if held.len() >= queue_limit {
                            s.overflowed += 1;
                            continue;
                        }
                        s.delayed += 1;
                        let slot = match free.pop() {
                            Some(i) => {
                                slots[i] = Some(f);
                                i
                            }
                            None => {
                                slots.push(Some(f));
                                slots.len() - 1
                            }
                        };
                        held.push(Reverse((now + d, seq, slot)));
                        seq += 1;
                    }
                }
            }
        }
        while let Some(&Reverse((t, _, slot))) = held.peek() {
            if t > now {
                break;
            }
            held.pop();
            if let Some(f) = slots.get_mut(slot).and_then(Option::take) {
                out.push(f);
            }
            free.push(slot);
        }
        sink.send(&mut out);
        out.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize) -> Vec<u8> {
        vec![0u8; len]
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
            if let Fate::Corrupt { at, mask } = x {
                assert!(*at < 72 && mask.count_ones() == 1);
            }
        }
    }

    #[test]
    fn no_probabilities_deliver_everything() {
        let mut p = RandomFaults::new(Faults::new(7));
        assert!((0..1000).all(|_| p.fate(&frame(64)) == Fate::Deliver));
    }

    struct Collect(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Sink for Collect {
        fn send(&mut self, frames: &mut Vec<Frame>) {
            let mut v = self.0.lock().unwrap();
            v.extend(frames.drain(..).map(|f| f.bytes));
        }
    }

    fn tagged(i: u8) -> Frame {
        let mut bytes = frame(40);
        bytes[TRANSPORT_AT] = i;
        Frame {
            dst: [127, 0, 0, 1],
            bytes,
            ready: doorbell_types::Instant::ZERO,
        }
    }

    #[test]
    fn the_relay_carries_out_each_fate() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut n = 0u8;
        let policy = move |_: &[u8]| {
            n += 1;
            match n {
                1 => Fate::Delay(Duration::from_millis(30)),
                2 => Fate::Drop,
                3 => Fate::Duplicate,
                4 => Fate::Corrupt { at: 1, mask: 0x80 },
                _ => Fate::Deliver,
            }
        };
        let mut relay =
            Relay::start("t", Box::new(policy), Box::new(Collect(got.clone())), 16).unwrap();
        let stats = relay.stats();
        let mut batch: Vec<Frame> = (1..=5).map(tagged).collect();
        relay.send(&mut batch);
        let t0 = Instant::now();
        while got.lock().unwrap().len() < 5 {
            assert!(t0.elapsed() < Duration::from_secs(5), "relay stuck");
            std::thread::sleep(Duration::from_millis(1));
        }
        let v = got.lock().unwrap().clone();
        let order: Vec<u8> = v.iter().map(|b| b[TRANSPORT_AT]).collect();
        assert_eq!(order, [3, 3, 4, 5, 1], "the delayed frame comes last");
        assert_eq!(v[2][TRANSPORT_AT + 1], 0x80, "one bit flipped");
        assert_eq!(
            *stats.lock().unwrap(),
            FaultStats {
                frames: 5,
                dropped: 1,
                duplicated: 1,
                delayed: 1,
                corrupted: 1,
                overflowed: 0
            }
        );
        drop(relay);
    }
}
