//! Faults on the way out of a port: drop, duplicate, delay (and so
//! reorder), and flip bits, frame by frame, on the wall clock.
//!
//! # Model
//! The decisions and their timing are `doorbell-fault`'s: a sans-IO
//! [`FaultStage`] that takes frames at an [`Instant`] and gives each back
//! when it is due (re-exported here: [`Fate`], [`FaultPolicy`], [`Faults`],
//! [`RandomFaults`], [`FaultStats`]). This module only drives one on real
//! time. A NIC started with a [`FaultPolicy`] hands every frame it sends to
//! a relay thread of its own instead of to the port. The relay maps the
//! wall clock, from its start, to an [`Instant`], feeds the stage, sends
//! what is due to the port, and sleeps until the stage's
//! [`FaultStage::poll_timeout`] or the next frame. Give both NICs of a pair
//! a policy and every packet between their ports, requests and responses,
//! meets one; the frames stay the RoCEv2 packets the port would send, so a
//! corrupted one reaches the peer and is dropped there by its ICRC check,
//! as on a real link.
//!
//! The same seed makes the same decisions for the same sequence of frames.
//! Which frames a NIC sends depends on wall-clock timing, so a live run
//! replays the decisions, not the run; the simulator and
//! [`crate::LoopbackLink::with_faults`] drive the same stage on a virtual
//! clock, where a seed replays the whole run.
//!
//! The relay stops by itself when its NIC stops: frames still waiting then
//! are dropped, as a link that goes down drops them.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};
use doorbell_device::Frame;
pub use doorbell_fault::{
    DEFAULT_QUEUE_LIMIT, Fate, FaultPolicy, FaultStage, FaultStats, Faults, Packet, ROCE_AT,
    RandomFaults,
};
use doorbell_types::Instant;

/// Batches of frames the device thread may hand the relay before it drops.
const HANDOFF_BATCHES: usize = 4096;

/// A device frame as the stage sees it: its bytes, with the destination
/// and readiness carried along.
#[derive(Clone)]
struct Out(Frame);

impl Packet for Out {
    fn bytes(&self) -> &[u8] {
        &self.0.bytes
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0.bytes
    }
}

/// Where frames leave a NIC: a fabric or a socket.
pub(crate) trait Sink: Send {
    /// Sends the frames, in order, and empties `frames`. `now`: the
    /// caller's reading of the clock, no older than the frames (a NIC's
    /// turn reads it once): a sink need not read it again. The buffers of
    /// frames the sink copied out go onto `spent`, for the sender's NIC to
    /// build its next frames in; a sink that passes a frame on keeps its
    /// buffer.
    fn send(&mut self, frames: &mut Vec<Frame>, now: std::time::Instant, spent: &mut Vec<Vec<u8>>);
}

/// What a relay counted: its stage's counts, and the frames the device
/// thread could not hand over because the relay was backed up.
#[derive(Default)]
struct Counts {
    stage: FaultStats,
    handoff_lost: u64,
}

/// A shared view of a relay's counts.
#[derive(Clone)]
pub(crate) struct StatsView(Arc<Mutex<Counts>>);

impl StatsView {
    /// The relay's [`FaultStats`], frames lost at the handoff counted as
    /// frames in and overflowed.
    pub(crate) fn get(&self) -> FaultStats {
        let c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        FaultStats {
            frames: c.stage.frames + c.handoff_lost,
            overflowed: c.stage.overflowed + c.handoff_lost,
            ..c.stage
        }
    }
}

/// The relay: its thread, and the end the device thread sends to.
pub(crate) struct Relay {
    tx: Option<Sender<Vec<Frame>>>,
    stats: StatsView,
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
        let stats = StatsView(Arc::default());
        let st = stats.clone();
        let stage = FaultStage::new(policy, queue_limit);
        let thread = std::thread::Builder::new()
            .name(format!("doorbell-{name}-relay"))
            .spawn(move || relay_loop(rx, stage, sink, st))?;
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
            let mut c = self.stats.0.lock().unwrap_or_else(|e| e.into_inner());
            c.handoff_lost += n;
        }
    }

    /// A shared view of the relay's counts.
    pub(crate) fn stats(&self) -> StatsView {
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

/// The wall clock since the relay started, as the stage's [`Instant`].
struct WallClock(std::time::Instant);

impl WallClock {
    fn now(&self) -> Instant {
        let ps = self.0.elapsed().as_nanos().saturating_mul(1000);
        Instant::from_ps(ps.min(u128::from(u64::MAX)) as u64)
    }

    /// How long to sleep until `t`, rounded up to whole nanoseconds, so
    /// that the relay wakes at or after it, not just before.
    fn until(&self, t: Instant) -> Duration {
        Duration::from_nanos(t.since(self.now()).as_ps().div_ceil(1000))
    }
}

fn relay_loop(
    rx: Receiver<Vec<Frame>>,
    mut stage: FaultStage<Out>,
    mut sink: Box<dyn Sink>,
    stats: StatsView,
) {
    let clock = WallClock(std::time::Instant::now());
    let mut out: Vec<Frame> = Vec::new();
    let mut spent = Vec::new();
    loop {
        let wait = stage
            .poll_timeout()
            .map(|t| clock.until(t))
            .unwrap_or(Duration::from_secs(3600));
        match rx.recv_timeout(wait) {
            Ok(batch) => {
                let now = clock.now();
                for f in batch {
                    stage.handle_frame(now, Out(f));
                }
                // Counted before the frames go on, so that whoever sees a
                // fault's effect sees it counted too.
                stats.0.lock().unwrap_or_else(|e| e.into_inner()).stage = stage.stats();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = clock.now();
        out.extend(std::iter::from_fn(|| stage.poll_ready(now)).map(|Out(f)| f));
        if !out.is_empty() {
            sink.send(&mut out, std::time::Instant::now(), &mut spent);
            // No NIC builds frames in this thread: to its spares.
            for b in spent.drain(..) {
                crate::buffers::recycle(b);
            }
        }
        out.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Instant;

    use doorbell_types::Duration as Span;

    fn frame(len: usize) -> Vec<u8> {
        vec![0u8; len]
    }

    struct Collect(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Sink for Collect {
        fn send(&mut self, frames: &mut Vec<Frame>, _: std::time::Instant, _: &mut Vec<Vec<u8>>) {
            let mut v = self.0.lock().unwrap();
            v.extend(frames.drain(..).map(|f| f.bytes));
        }
    }

    fn tagged(i: u8) -> Frame {
        let mut bytes = frame(40);
        bytes[ROCE_AT] = i;
        Frame {
            dst: [127, 0, 0, 1],
            bytes,
            ready: doorbell_types::Instant::ZERO,
            unfilled: None,
            train: 1,
            headers: Vec::new(),
        }
    }

    #[test]
    fn the_relay_carries_out_each_fate() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let mut n = 0u8;
        let policy = move |_: &[u8]| {
            n += 1;
            match n {
                1 => Fate::Delay(Span::from_us(30_000)),
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
        let order: Vec<u8> = v.iter().map(|b| b[ROCE_AT]).collect();
        assert_eq!(order, [3, 3, 4, 5, 1], "the delayed frame comes last");
        assert_eq!(v[2][ROCE_AT + 1], 0x80, "one bit flipped");
        assert_eq!(
            stats.get(),
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
