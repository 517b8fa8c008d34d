//! What a live NIC receives: the one queue through which MMIO stores,
//! frames from the port, commands and control reach it, in order.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;
use doorbell_device::{Frame, NicCounters};
use doorbell_hif::{CmdError, CmdOut, Command};
use doorbell_host::{HostMemory, RecordDoorbell};
use doorbell_pcie::{Carried, Counters, Crossing};
use doorbell_types::{Qpn, UarIndex};
use doorbell_wire::Ipv4Header;

/// One input of a device thread.
pub(crate) enum Msg {
    Mmio {
        uar: UarIndex,
        offset: u32,
        len: u8,
        data: [u8; 64],
    },
    /// A store into a UAR page the device did not see
    /// ([`doorbell_host::Mmio::record_doorbell`]).
    RecordDoorbell(UarIndex, RecordDoorbell),
    Frames(Vec<Vec<u8>>),
    /// Frames a port rebuilt from what its socket gave, several to a
    /// buffer: each buffer holds whole IPv4 frames back to back, each as
    /// long as its header's total length says (the port wrote those
    /// headers; [`next_frame`] walks them), so that a run of datagrams
    /// the kernel coalesced costs one buffer, not one a datagram. Then
    /// how many frames the buffers hold in all.
    PortRuns(Vec<Vec<u8>>, usize),
    /// Frames another NIC of this process emitted, untouched since, and
    /// that NIC's host memory, where payloads it left
    /// ([`doorbell_device::Frame::unfilled`]) are.
    EmittedFrames(Vec<Frame>, Arc<dyn HostMemory>),
    Cmd(Command, Sender<Result<CmdOut, CmdError>>),
    Counters(Option<Qpn>, Sender<(Counters, NicCounters)>),
    Record(bool, Sender<Vec<Crossing>>),
    /// Starts or stops a capture of the host interface; answers what it
    /// holds.
    Capture(bool, Sender<Vec<Carried>>),
    /// Every QP's bus counters, the totals and the device's counters.
    Snapshot(Sender<BusSnapshot>),
    /// What the NIC's timeline recorded so far, if it records one.
    Trace(Sender<Option<doorbell_trace::Trace>>),
    /// A flush stopped at its limit with more for the NIC to build (a
    /// long READ's responses): the turn that takes this goes on with it.
    Resume,
}

impl Msg {
    /// Frames from a port or another NIC the message holds (0 for any
    /// other message): what [`Inbox::backlog`] counts.
    fn frames(&self) -> usize {
        match self {
            Msg::Frames(fs) => fs.len(),
            Msg::PortRuns(_, frames) => *frames,
            Msg::EmittedFrames(fs, _) => fs.len(),
            _ => 0,
        }
    }

    /// How much work the message is, for a turn's budget: a frame is one
    /// unit, as is every other message.
    pub(crate) fn work(&self) -> usize {
        match self {
            Msg::Frames(fs) => fs.len().max(1),
            Msg::PortRuns(_, frames) => (*frames).max(1),
            Msg::EmittedFrames(fs, _) => fs.len().max(1),
            _ => 1,
        }
    }
}

/// Where the frame after `at` lies in a buffer of [`Msg::PortRuns`]: from
/// `at`, as long as its IPv4 header's total length says; `None` at the end
/// of the buffer, or where the bytes left hold no such frame.
pub(crate) fn next_frame(run: &[u8], at: usize) -> Option<std::ops::Range<usize>> {
    let h = Ipv4Header::new_checked(run.get(at..)?).ok()?;
    let len = usize::from(h.total_len());
    let end = at.checked_add(len).filter(|&e| len > 0 && e <= run.len())?;
    Some(at..end)
}

/// Messages in the order they were queued, from any thread, taken one at a
/// time by the thread that holds the NIC. A queue that keeps its memory:
/// once it has held a burst, queueing allocates nothing, where a channel's
/// linked blocks cost an allocation (and a zeroing) every few dozen
/// messages of a busy NIC.
pub(crate) struct Inbox {
    queue: Mutex<VecDeque<Msg>>,
    /// The queue's length, written under its lock: an empty inbox is seen
    /// without taking the lock (a poll that finds nothing looks thousands
    /// of times a millisecond).
    len: AtomicUsize,
    /// Frames queued ([`Msg::frames`]), written under the lock.
    frames: AtomicUsize,
}

/// Room a drained inbox keeps; a burst's extra room beyond it is given
/// back once the burst is handled.
const KEEP: usize = 1024;

/// Most frames a message of [`Msg::EmittedFrames`] holds through joins
/// ([`Inbox::push`]): a turn's budget still counts each frame, and a
/// joined list stays short enough to be kept for reuse.
const JOIN_UP_TO: usize = 64;

impl Inbox {
    pub(crate) fn new() -> Self {
        Self {
            queue: Mutex::new(VecDeque::with_capacity(64)),
            len: AtomicUsize::new(0),
            frames: AtomicUsize::new(0),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Msg>> {
        // Nothing panics with the lock held: a poisoned queue is whole.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `msg` behind everything queued. Frames another NIC emitted
    /// join the message queued last where that one holds frames of the
    /// same memory and the two fit in [`JOIN_UP_TO`] (decision record
    /// 0071): in order still, and a NIC that has fallen behind takes a
    /// stream's frames a batch at a time, not a message (a lock, a
    /// list, an `Arc` let go on its core) a doorbell.
    pub(crate) fn push(&self, msg: Msg) {
        let frames = msg.frames();
        let mut q = self.queue();
        let joined = match (q.back_mut(), msg) {
            (Some(Msg::EmittedFrames(queued, from)), Msg::EmittedFrames(mut more, mem))
                if Arc::ptr_eq(from, &mem) && queued.len() + more.len() <= JOIN_UP_TO =>
            {
                queued.append(&mut more);
                Some((more, mem))
            }
            (_, msg) => {
                q.push_back(msg);
                self.len.store(q.len(), Ordering::Release);
                None
            }
        };
        if frames > 0 {
            self.frames.fetch_add(frames, Ordering::Relaxed);
        }
        drop(q);
        // The emptied list back to this thread's spares, outside the lock.
        if let Some((list, mem)) = joined {
            crate::buffers::recycle_emitted(list);
            drop(mem);
        }
    }

    /// The oldest message, if any.
    #[cfg(test)]
    pub(crate) fn pop(&self) -> Option<Msg> {
        self.pop_if(|_| true)
    }

    /// The oldest message, if there is one and `take` says so of it.
    pub(crate) fn pop_if(&self, take: impl FnOnce(&Msg) -> bool) -> Option<Msg> {
        if self.is_empty() {
            return None;
        }
        let mut q = self.queue();
        if !q.front().is_some_and(take) {
            return None;
        }
        let m = q.pop_front();
        self.len.store(q.len(), Ordering::Release);
        if let Some(n) = m.as_ref().map(Msg::frames).filter(|&n| n > 0) {
            self.frames.fetch_sub(n, Ordering::Relaxed);
        }
        if q.is_empty() && q.capacity() > KEEP {
            q.shrink_to(KEEP);
        }
        m
    }

    /// Whether nothing is queued. A caller that must not miss a message
    /// queued meanwhile fences (SeqCst) between its own last store and
    /// this load, as the engine's protocol does.
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Frames queued and not yet taken: what the NIC's receivers have
    /// handed it beyond what its turns took so far.
    pub(crate) fn backlog(&self) -> usize {
        self.frames.load(Ordering::Relaxed)
    }

    /// Drops everything queued (a stopped NIC's messages), outside the
    /// lock: a command's reply channel closes as it drops.
    pub(crate) fn clear(&self) {
        let dropped = {
            let mut q = self.queue();
            self.len.store(0, Ordering::Release);
            self.frames.store(0, Ordering::Relaxed);
            std::mem::take(&mut *q)
        };
        drop(dropped);
    }
}

/// The device thread's part of a `stats::NicStats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BusSnapshot {
    /// Bus counters of every crossing.
    pub total: Counters,
    /// Bus counters of each QP that crossed the bus, in QPN order.
    pub qps: Vec<(Qpn, Counters)>,
    /// The device's own counters.
    pub nic: NicCounters,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame of `len` bytes whose header gives that length.
    fn frame(len: u16, fill: u8) -> Vec<u8> {
        let mut f = vec![fill; usize::from(len)];
        f[2..4].copy_from_slice(&len.to_be_bytes());
        f
    }

    #[test]
    fn the_backlog_counts_the_frames_queued_and_not_taken() {
        let inbox = Inbox::new();
        inbox.push(Msg::PortRuns(vec![frame(60, 1)], 5));
        inbox.push(Msg::Frames(vec![frame(60, 2); 3]));
        inbox.push(Msg::RecordDoorbell(
            UarIndex::new(0),
            RecordDoorbell::Arm(doorbell_types::Cqn::new(1)),
        ));
        assert_eq!(inbox.backlog(), 8, "a doorbell is no frame");
        assert!(
            inbox.pop_if(|m| m.work() <= 4).is_none(),
            "a batch of five left where it is"
        );
        assert_eq!(inbox.backlog(), 8);
        assert!(matches!(inbox.pop(), Some(Msg::PortRuns(..))));
        assert_eq!(inbox.backlog(), 3);
        inbox.clear();
        assert_eq!(inbox.backlog(), 0);
    }

    /// An emitted frame whose one byte tells it apart.
    fn emitted(tag: u8) -> Frame {
        Frame {
            dst: [10, 0, 0, 2],
            bytes: vec![tag],
            ready: doorbell_types::Instant::ZERO,
            unfilled: None,
            train: 1,
            segment: 0,
            headers: Vec::new(),
        }
    }

    fn emitted_list(tags: std::ops::Range<u8>) -> Vec<Frame> {
        tags.map(emitted).collect()
    }

    /// The tags of the frames of each message queued, oldest first, and
    /// whether each came with `mem`; empties the inbox.
    fn drained(inbox: &Inbox, mem: &Arc<dyn HostMemory>) -> Vec<(Vec<u8>, bool)> {
        std::iter::from_fn(|| inbox.pop())
            .map(|m| match m {
                Msg::EmittedFrames(fs, from) => (
                    fs.iter().map(|f| f.bytes[0]).collect(),
                    Arc::ptr_eq(&from, mem),
                ),
                _ => (Vec::new(), false),
            })
            .collect()
    }

    #[test]
    fn emitted_frames_join_the_last_message_of_their_memory_in_order() {
        let inbox = Inbox::new();
        let a: Arc<dyn HostMemory> = Arc::new(doorbell_host::HostRam::new());
        let b: Arc<dyn HostMemory> = Arc::new(doorbell_host::HostRam::new());
        inbox.push(Msg::EmittedFrames(emitted_list(0..2), a.clone()));
        inbox.push(Msg::EmittedFrames(emitted_list(2..5), a.clone()));
        assert_eq!(inbox.backlog(), 5);
        assert_eq!(Arc::strong_count(&a), 2, "the joined message's Arc let go");
        // Another memory's frames queue on their own; so do the next of
        // the first memory's, behind them.
        inbox.push(Msg::EmittedFrames(emitted_list(5..6), b.clone()));
        inbox.push(Msg::EmittedFrames(emitted_list(6..7), a.clone()));
        // Nor do frames join across another message.
        inbox.push(Msg::RecordDoorbell(
            UarIndex::new(0),
            RecordDoorbell::Arm(doorbell_types::Cqn::new(1)),
        ));
        inbox.push(Msg::EmittedFrames(emitted_list(7..8), a.clone()));
        assert_eq!(inbox.backlog(), 8);
        assert_eq!(
            drained(&inbox, &a),
            [
                (vec![0, 1, 2, 3, 4], true),
                (vec![5], false),
                (vec![6], true),
                (vec![], false),
                (vec![7], true),
            ]
        );
        assert_eq!(inbox.backlog(), 0);
    }

    #[test]
    fn a_join_stops_at_its_limit() {
        let inbox = Inbox::new();
        let a: Arc<dyn HostMemory> = Arc::new(doorbell_host::HostRam::new());
        let full = JOIN_UP_TO as u8;
        inbox.push(Msg::EmittedFrames(emitted_list(0..full - 1), a.clone()));
        inbox.push(Msg::EmittedFrames(emitted_list(full - 1..full), a.clone()));
        inbox.push(Msg::EmittedFrames(emitted_list(full..full + 1), a.clone()));
        let got = drained(&inbox, &a);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, (0..full).collect::<Vec<_>>());
        assert_eq!(got[1].0, [full]);
    }

    #[test]
    fn a_run_is_walked_frame_by_frame_to_its_end() {
        let run: Vec<u8> = [frame(60, 1), frame(60, 2), frame(28, 3)].concat();
        assert_eq!(next_frame(&run, 0), Some(0..60));
        assert_eq!(next_frame(&run, 60), Some(60..120));
        assert_eq!(next_frame(&run, 120), Some(120..148));
        assert_eq!(next_frame(&run, 148), None);
    }

    #[test]
    fn bytes_that_hold_no_whole_frame_end_the_walk() {
        // A length past the end, a length of zero, too few bytes for a
        // header.
        let mut long = frame(60, 1);
        long.truncate(59);
        assert_eq!(next_frame(&long, 0), None);
        let mut zero = frame(60, 1);
        zero[2..4].fill(0);
        assert_eq!(next_frame(&zero, 0), None);
        assert_eq!(next_frame(&[0x45, 0, 0], 0), None);
        assert_eq!(next_frame(&frame(60, 1), usize::MAX), None);
    }
}
