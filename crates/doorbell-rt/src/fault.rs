//! Faults on the way out of a port: drop, duplicate, delay (and so
//! reorder), and flip bits, frame by frame, on the wall clock.
//!
//! # Model
//! The decisions and their timing are `doorbell-fault`'s: a sans-IO
//! [`FaultStage`] that takes frames at an [`Instant`] and gives each back
//! when it is due (re-exported here: [`Fate`], [`FaultPolicy`], [`Faults`],
//! [`RandomFaults`], [`FaultStats`]). This module only drives one on real
//! time. A NIC started with a [`FaultPolicy`] hands every frame it sends to
//! a relay thread of its own instead of to the port, and waits while the
//! relay has 4 096 frames it has not taken yet, as a NIC whose port is
//! busy holds back what it builds: a stream through a relay holds a bounded
//! number of frames, and none is lost at the hand-over. The relay maps the
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

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};
use doorbell_device::Frame;
pub use doorbell_fault::{
    DEFAULT_QUEUE_LIMIT, Fate, FaultPolicy, FaultStage, FaultStats, Faults, Packet, ROCE_AT,
    RandomFaults,
};
use doorbell_types::Instant;

/// Frames the device thread may have handed the relay and the relay not
/// yet taken, beyond which the device thread waits for it, as a NIC whose
/// port is busy holds back what it builds: 16 MiB at MTU 4096. A batch
/// larger than this goes alone.
const HANDOFF_FRAMES: usize = 4096;

/// How long a device thread waits for the relay before it looks whether
/// the relay is still there.
const HANDOFF_RECHECK: Duration = Duration::from_millis(10);

/// The frames handed to a relay and not yet taken, and the relay's
/// signal that it took some.
#[derive(Default)]
struct Handoff {
    queued: Mutex<usize>,
    taken: std::sync::Condvar,
    /// The relay's thread has ended: nothing will take more.
    gone: std::sync::atomic::AtomicBool,
}

impl Handoff {
    /// Waits until `n` more frames fit ([`HANDOFF_FRAMES`]; any number
    /// when none are queued) and counts them in; false, counting nothing,
    /// if the relay is gone.
    fn reserve(&self, n: usize) -> bool {
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        while *q > 0 && *q + n > HANDOFF_FRAMES {
            if self.gone.load(std::sync::atomic::Ordering::Acquire) {
                return false;
            }
            q = self
                .taken
                .wait_timeout(q, HANDOFF_RECHECK)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *q += n;
        true
    }

    /// The relay took `n` frames.
    fn release(&self, n: usize) {
        let mut q = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        *q = q.saturating_sub(n);
        self.taken.notify_all();
    }
}

/// Marks the relay gone when its thread ends, however it ends.
struct Gone(Arc<Handoff>);

impl Drop for Gone {
    fn drop(&mut self) {
        self.0
            .gone
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.taken.notify_all();
    }
}

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
/// thread could not hand over because the relay was gone.
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
    handoff: Arc<Handoff>,
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
        let (tx, rx) = unbounded();
        let stats = StatsView(Arc::default());
        let st = stats.clone();
        let handoff = Arc::new(Handoff::default());
        let gone = Gone(handoff.clone());
        let stage = FaultStage::new(policy, queue_limit);
        let thread = std::thread::Builder::new()
            .name(format!("doorbell-{name}-relay"))
            .spawn(move || relay_loop(rx, stage, sink, st, gone))?;
        Ok(Self {
            tx: Some(tx),
            handoff,
            stats,
            thread: Some(thread),
        })
    }

    /// Hands frames to the relay, waiting while it has [`HANDOFF_FRAMES`]
    /// not yet taken (the relay never waits for this NIC, so the wait
    /// ends); drops (and counts) them if the relay is gone.
    pub(crate) fn send(&mut self, frames: &mut Vec<Frame>) {
        if frames.is_empty() {
            return;
        }
        let batch = std::mem::take(frames);
        let n = batch.len();
        let sent = self.handoff.reserve(n)
            && match self.tx.as_ref().map(|t| t.send(batch)) {
                Some(Ok(())) => true,
                Some(Err(_)) | None => {
                    self.handoff.release(n);
                    false
                }
            };
        if !sent {
            let mut c = self.stats.0.lock().unwrap_or_else(|e| e.into_inner());
            c.handoff_lost += n as u64;
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
    gone: Gone,
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
                gone.0.release(batch.len());
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
            segment: 0,
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

    /// A sink that takes nothing until it is let go.
    struct Stuck {
        go: Arc<(Mutex<bool>, std::sync::Condvar)>,
        got: Arc<Mutex<usize>>,
    }

    impl Sink for Stuck {
        fn send(&mut self, frames: &mut Vec<Frame>, _: std::time::Instant, _: &mut Vec<Vec<u8>>) {
            let (lock, cv) = &*self.go;
            let mut go = lock.lock().unwrap();
            while !*go {
                go = cv.wait(go).unwrap();
            }
            *self.got.lock().unwrap() += frames.len();
            frames.clear();
        }
    }

    #[test]
    fn a_device_thread_waits_for_a_relay_that_falls_behind_and_loses_nothing() {
        // The sink takes nothing: the relay takes one batch and waits in
        // the sink; the next HANDOFF_FRAMES frames fill the hand-over, and
        // the sender of the batch after them waits until the sink goes on.
        let go = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let got = Arc::new(Mutex::new(0));
        let sink = Stuck {
            go: go.clone(),
            got: got.clone(),
        };
        let relay =
            Relay::start("t", Box::new(|_: &[u8]| Fate::Deliver), Box::new(sink), 16).unwrap();
        let stats = relay.stats();
        let batches = HANDOFF_FRAMES / 64 + 3;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (d, mut relay) = (done.clone(), relay);
        let sender = std::thread::spawn(move || {
            for _ in 0..batches {
                let mut batch: Vec<Frame> = (0..64).map(|i| tagged(i as u8)).collect();
                relay.send(&mut batch);
            }
            d.store(true, std::sync::atomic::Ordering::Release);
            relay
        });
        std::thread::sleep(Duration::from_millis(200));
        let waited = !done.load(std::sync::atomic::Ordering::Acquire);
        // The sink goes on before anything is asserted: a failed assertion
        // then does not leave the relay waiting in it for ever.
        *go.0.lock().unwrap() = true;
        go.1.notify_all();
        let relay = sender.join().unwrap();
        assert!(waited, "the sender went on past a full hand-over");
        let t0 = Instant::now();
        while *got.lock().unwrap() < batches * 64 {
            assert!(t0.elapsed() < Duration::from_secs(5), "frames lost");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(stats.get().overflowed, 0, "none dropped at the hand-over");
        drop(relay);
    }
}
