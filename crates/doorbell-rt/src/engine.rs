//! Who runs a live NIC: whichever thread has work for it.
//!
//! # Model
//! A NIC's state (the sans-IO [`Nic`], its end of the [`Bus`], its port's
//! egress) sits in an [`Engine`] behind a lock, and every input (an MMIO
//! store, a command, frames from the port) goes into one FIFO, the
//! [`Core`]'s inbox. The thread that puts a message there then tries the
//! lock: if it gets it, it handles everything queued, its own message
//! last, in its own thread: a doorbell is processed inside the store that
//! rang it, a frame from the in-process fabric inside the peer's send, a
//! datagram inside the port's receive thread, and no thread is woken. If
//! another thread holds the lock, the message waits for that thread, which
//! looks at the inbox again after it lets the lock go (the two sides fence
//! between their store and their load, so one of them sees the other's).
//!
//! The NIC's own thread (the worker) runs what no caller drives: transport
//! timers, and the rest of the inbox when a caller has done [`BUDGET`]
//! units of work in one turn. It parks until the next timer is due,
//! or, with no timer while the NIC is in use, for [`BUSY_TICK`]; a turn
//! that arms a timer due before then unparks it. An idle NIC's worker
//! sleeps until its next timer, or indefinitely.
//!
//! Between NICs of one process (decision record 0049), frames whose
//! payloads the receiver copies in from the sender's memory are handed to
//! the receiver's worker ([`Core::hand_to_worker`]), where the process may
//! run on two cores or more (decision record 0056). The worker keeps
//! looking for [`STREAM_SPIN`] before it parks: a stream's copies then run
//! on one core beside the program's thread. What such a worker sends to a NIC
//! whose program polls its CQ (a stream's ACKs) is left for that poll
//! ([`Core::deliver`], [`Core::poll_inbox`]), so that each NIC's work
//! stays on its own core; a poll that does not come within [`LEFT_WAIT`]
//! is done by the worker itself.
//!
//! # Guarantees
//! - The messages of one thread are handled in the order it sent them, and
//!   a message is handled after every message queued before it: the FIFO is
//!   drained in order, under the lock.
//! - Frames leave the port in the order the NIC emitted them: the egress is
//!   driven under the same lock.
//! - What the NIC owes leaves after at most [`FLUSH_PACKETS`] packets
//!   taken in, however much the inbox holds and however many packets a
//!   frame carries: a burst's answers go out while the burst is taken in,
//!   not after all of it.
//! - No turn sends more than about [`FLUSH_LIMIT`] packets of what the
//!   NIC builds a burst at a time (a long READ's responses): the rest
//!   goes on in a later turn ([`Msg::Resume`], queued behind the inputs
//!   that came meanwhile), so other QPs' inputs are taken in between and
//!   a program's post that started a long READ gets its thread back.
//! - No thread blocks on another NIC's lock: a delivery to a NIC that is
//!   busy only queues, so two NICs that send to each other inside one
//!   another's turns cannot deadlock.
//! - No message waits for a worker's timeout: each is run by the thread
//!   that queued it, by the thread that holds the lock, by the worker it
//!   was handed to, or by a poll or the worker it was left for.
//!   [`Core::stalls`] counts the wake-ups that found otherwise.
//! - After [`Core::stop`], messages are dropped unhandled: a command then
//!   fails with `DeviceGone`, as from a removed device. A panic in the
//!   device code marks the NIC stopped the same way.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_channel::Sender;
use doorbell_device::{Frame, Nic, PacketHeaders, Received, Unfilled};
use doorbell_hif::NicEvent;
use doorbell_host::HostMemory;
use doorbell_pcie::Bus;
use doorbell_types::Instant;

use crate::inbox::{BusSnapshot, Inbox, Msg};

/// Work a caller does in one turn before it leaves the rest to the worker:
/// a thread that posts is not kept long doing others' work. A message is
/// one unit, a batch of frames one per frame.
pub(crate) const BUDGET: usize = 256;
/// Frames queued for a NIC beyond which its receivers stop taking more
/// ([`Core::backlogged`]): sixteen turns' budget.
pub(crate) const BACKLOG: usize = 16 * BUDGET;
/// How long a receive thread that found its NIC backlogged waits before
/// it looks again.
const BACKLOG_WAIT: std::time::Duration = std::time::Duration::from_micros(100);

/// Packets taken in, at most, before what the NIC owes (ACKs, responses,
/// the frames they let go) leaves for the port (its timers wait for the
/// end of the turn, [`TIMERS_HELD_MAX`]). Without a bound, a turn's sends waited for everything the inbox
/// held: after a go-back-N, thousands of duplicates, while the peer's ACK
/// timer ran out again and sent it a window more (decision record 0033).
/// Packets, not frames: a run or a train from a NIC of this process is one
/// frame of up to 32 packets, and 64 of them held a stream's ACKs for
/// longer than its window (decision record 0050).
pub(crate) const FLUSH_PACKETS: usize = 64;

/// Packets one flush sends, at most, before it leaves the rest of what the
/// NIC has to build (a long READ's responses, every QP's windows) for a
/// later turn ([`Msg::Resume`]): inputs queued meanwhile, other QPs'
/// requests and ACKs among them, are taken in between, as a NIC
/// interleaves its QPs rather than finishing one READ of a gigabyte
/// first, and a program whose post started a long READ gets its thread
/// back. 4 MiB at MTU 4096.
const FLUSH_LIMIT: usize = 1024;

/// The longest a NIC holds back transport timers that are due while its
/// inbox still holds messages ([`Engine::flush`]): what is queued there
/// is taken before a timer can call it lost, unless the inbox stays
/// non-empty this long (a flood, while a packet of its own was lost).
/// Every kind of timer waits (ACK, adaptive retransmission, RNR wait, an
/// error-state QP's flush poll), and all that are due fire together when
/// the bound runs out. Frames a port's receivers left in their socket or
/// ring ([`BACKLOG`]) are not in the inbox, and do not hold timers.
const TIMERS_HELD_MAX: doorbell_types::Duration = doorbell_types::Duration::from_us(1_000_000);

/// How long a worker with no timer sleeps while its NIC is in use. A turn
/// wakes a sleeping worker only for a timer due before the worker wakes
/// anyway; had the worker slept indefinitely, every message that armed the
/// ACK timer after the last ACK stopped it would wake it, and the woken
/// worker then contends for the lock with the caller that is doing the
/// work. A timer further out than this wakes no one. An idle NIC's worker
/// takes one more look after this and then sleeps until woken.
const BUSY_TICK: Duration = Duration::from_millis(10);

/// How long a worker that was handed frames by another NIC of the process
/// ([`Core::hand_to_worker`]) keeps looking for more before it parks: the
/// next batch of a stream comes sooner than a wake-up would.
const STREAM_SPIN: Duration = Duration::from_micros(50);

/// How long frames a worker left for a polling program ([`Core::deliver`])
/// wait for that program's next poll before the worker runs them itself.
const LEFT_WAIT: Duration = Duration::from_micros(20);

/// A program that polled a NIC's CQ this recently is taken to be polling
/// it still ([`Core::deliver`]).
const POLLING: Duration = Duration::from_micros(100);

/// How long a UDP port's receive thread stays off its socket at first
/// while the program's CQ polls receive for it ([`Core::rx_wait`]), and
/// how recent a poll must be for the program to count as polling.
const LEASE: Duration = Duration::from_micros(200);

/// The longest a receive thread stays off its socket at a time: each stay
/// that the polls outlast is twice the one before, up to this
/// ([`Core::stay_away`], decision record 0074).
const AWAY_MAX: Duration = Duration::from_millis(2);

/// How long a receive thread stays off its socket after a stay of
/// `park`: [`LEASE`] after an arm during it, else twice `park`, from
/// [`LEASE`] up to [`AWAY_MAX`].
fn next_stay(park: Duration, armed: bool) -> Duration {
    if armed {
        LEASE
    } else {
        (park * 2).clamp(LEASE, AWAY_MAX)
    }
}

/// A stream whose window has not filled for this long no longer counts as
/// one ([`Core::rx_wait`]).
const STREAM_QUIET: Duration = Duration::from_millis(10);

/// How long a worker that woke at its timeout, unwoken, to messages in its
/// inbox watches for another thread to take them before it counts them
/// as having waited for that timeout ([`Core::stalls`]): a thread that
/// queued them and is about to run them does so well within it.
const STALL_CHECK: Duration = Duration::from_micros(100);

/// NICs a worker left frames for, for their programs' polls to take
/// ([`Core::deliver`]), each with when it first did.
type Left = Vec<(Arc<Core>, std::time::Instant)>;

thread_local! {
    /// In a NIC's worker thread, what it left ([`Left`]); `None` elsewhere.
    static LEFT: std::cell::RefCell<Option<Left>> = const { std::cell::RefCell::new(None) };
}

/// Spare buffers a NIC keeps of the frames it took in, for its answers.
const ANSWER_SPARES: usize = 32;

/// Spare buffers lent to the NIC after each flush, at most.
const LEND: usize = 64;

/// Lists of headers ([`Frame::headers`]) a NIC is lent after it sent
/// frames, as [`LEND`].
const LEND_HEADERS: usize = 8;

/// The port a NIC sends through.
pub(crate) enum Egress {
    /// Straight to the port.
    Direct(Box<dyn crate::fault::Sink>),
    /// Through a fault-injecting relay thread.
    Relay(crate::fault::Relay),
}

impl Egress {
    fn send(&mut self, frames: &mut Vec<Frame>, now: std::time::Instant, spent: &mut Vec<Vec<u8>>) {
        match self {
            Egress::Direct(s) => s.send(frames, now, spent),
            Egress::Relay(r) => r.send(frames),
        }
    }
}

/// A NIC's state and where its outputs go.
pub(crate) struct Engine {
    pub(crate) nic: Nic,
    pub(crate) bus: Bus,
    pub(crate) egress: Egress,
    /// MSI-X vectors, for the interrupt handler; `None` once stopped, which
    /// ends the handler.
    pub(crate) irqs: Option<Sender<u16>>,
    /// Events no EQ took.
    pub(crate) events: Sender<NicEvent>,
    /// Where frames taken in are recorded, if anywhere.
    pub(crate) capture: Option<crate::pcap::Capture>,
    /// The timeline, if one is recorded (the bus then records every
    /// crossing, which the timeline takes after each input).
    pub(crate) timeline: Option<Timeline>,
    out: Vec<Frame>,
    /// Whether the engine writes the ICRC of each frame the NIC built
    /// ([`doorbell_wire::Seal::Later`]) before anything sees it: a port's
    /// frames are sealed two at a time ([`seal_frames`]).
    pub(crate) seal_out: bool,
    /// Fills in frames whose payload the NIC left in memory before anything
    /// sees them: a port NIC's ([`crate::fill`]).
    pub(crate) fill: Option<crate::fill::Filler>,
    /// Buffers of frames the port copied out, on their way back to the NIC.
    spent: Vec<Vec<u8>>,
    /// Packets taken in since the last flush.
    unflushed: usize,
    /// A [`Msg::Resume`] waits in the inbox.
    resume_queued: bool,
    /// Until when due timers wait for the inbox to empty, once one has
    /// waited ([`TIMERS_HELD_MAX`]).
    timers_held_until: Option<Instant>,
    /// Flushes that stopped at [`FLUSH_LIMIT`] ([`Core::flushes_cut`]).
    flushes_cut: u64,
    /// Port runs taken as one train ([`Core::port_trains`]).
    port_trains: u64,
    /// Whether a turn handled a message since the worker last looked.
    busy: bool,
    /// The clock's reading at the start of the turn running (the one a
    /// turn takes, [`Core::turn`]), for the port.
    clock: std::time::Instant,
    /// Register stores and doorbell records taken: what a program's posts
    /// and arms ring, and the driver's EQ doorbells after the events such
    /// arms ask for ([`Core::rings`]).
    rings: u64,
}

/// A live NIC's timeline and what it needs.
pub(crate) struct Timeline {
    pub(crate) rec: crate::timeline::LiveTimeline,
    /// The NIC's name, for the timeline's names.
    pub(crate) name: String,
    /// The device clock's zero.
    pub(crate) start: std::time::Instant,
    /// Crossings a [`Msg::Record`] asked for, kept aside while the
    /// timeline also takes the bus's record.
    pub(crate) kept: Option<Vec<doorbell_pcie::Crossing>>,
}

impl Timeline {
    fn now(&self) -> Instant {
        device_time(self.start, std::time::Instant::now())
    }

    /// After an input: the bus's crossings, and the work from `start`.
    fn after(&mut self, bus: &mut Bus, what: Option<String>, start: Instant) {
        let log = bus.take_log();
        if let Some(k) = &mut self.kept {
            k.extend_from_slice(&log);
        }
        self.rec.crossings(&log);
        if let Some(w) = what {
            let end = self.now();
            self.rec.work(w, start, end);
        }
    }
}

/// The reading at `t` of a device clock whose zero is `start`.
fn device_time(start: std::time::Instant, t: std::time::Instant) -> Instant {
    let ps = t.duration_since(start).as_nanos().saturating_mul(1000);
    Instant::from_ps(u64::try_from(ps).unwrap_or(u64::MAX))
}

/// The device's work an input is, as a timeline names it; `None` for
/// queries that are no work of the device.
fn work_name(msg: &Msg) -> Option<String> {
    Some(match msg {
        Msg::Mmio {
            uar, offset, len, ..
        } => format!("register store: UAR {}, +{offset:#x}, {len} B", uar.get()),
        Msg::RecordDoorbell(uar, db) => format!("doorbell record: UAR {}, {db:?}", uar.get()),
        Msg::Frames(fs) => format!("frames in ×{}", fs.len()),
        Msg::PortRuns(_, n) => format!("frames in ×{n}"),
        Msg::EmittedFrames(fs, _) => format!("frames in ×{}", fs.len()),
        Msg::Cmd(c, _) => {
            let full = format!("{c:?}");
            let kind = full.split(|ch: char| !ch.is_alphanumeric()).next();
            format!("command {}", kind.unwrap_or_default())
        }
        _ => return None,
    })
}

impl Engine {
    pub(crate) fn new(
        nic: Nic,
        bus: Bus,
        egress: Egress,
        irqs: Sender<u16>,
        events: Sender<NicEvent>,
    ) -> Self {
        Self {
            nic,
            bus,
            egress,
            irqs: Some(irqs),
            events,
            capture: None,
            timeline: None,
            out: Vec::new(),
            seal_out: false,
            fill: None,
            spent: Vec::new(),
            unflushed: 0,
            busy: false,
            resume_queued: false,
            timers_held_until: None,
            flushes_cut: 0,
            port_trains: 0,
            clock: std::time::Instant::now(),
            rings: 0,
        }
    }

    fn handle(&mut self, now: Instant, msg: Msg) {
        let what = self.timeline.as_ref().and_then(|_| work_name(&msg));
        self.handle_msg(now, msg);
        let Self { bus, timeline, .. } = self;
        if let Some(tl) = timeline {
            tl.after(bus, what, now);
        }
    }

    /// Takes frames from the port in, flushing after every
    /// [`FLUSH_PACKETS`] packets.
    fn take_frames(&mut self, now: Instant, mut frames: Vec<Vec<u8>>) {
        let mut it = frames.drain(..);
        // Two frames at a time, their ICRCs checked together.
        while let Some(mut f) = it.next() {
            let Some(mut g) = it.next() else {
                self.take_frame(now, f, Arrival::Port);
                break;
            };
            let [f_ok, g_ok] = doorbell_wire::icrc_matches_in_place_pair(&mut f, &mut g, pair_hash);
            self.take_frame(now, f, Arrival::Checked(f_ok));
            self.take_frame(now, g, Arrival::Checked(g_ok));
        }
        drop(it);
        crate::buffers::recycle_list(frames);
    }

    /// Takes in frames another NIC of this process built, as
    /// [`Self::take_frames`] does; `from` is that NIC's host memory.
    fn take_emitted(&mut self, now: Instant, mut frames: Vec<Frame>, from: &dyn HostMemory) {
        // (Taken where they lie, not moved again.)
        for f in &mut frames {
            if !f.headers.is_empty() {
                // A capture or a timeline sees a frame's headers written.
                if self.capture.is_some() || self.timeline.is_some() {
                    f.write_headers();
                } else {
                    let bytes = std::mem::take(&mut f.bytes);
                    self.take_frame(now, bytes, Arrival::Parsed(&f.headers));
                    crate::buffers::recycle_headers(std::mem::take(&mut f.headers));
                    continue;
                }
            }
            let bytes = std::mem::take(&mut f.bytes);
            match f.unfilled {
                // A capture or a timeline sees a run's packets one by one.
                Some(u)
                    if u.segments > 1 && (self.capture.is_some() || self.timeline.is_some()) =>
                {
                    self.take_run(now, bytes, u, from);
                }
                Some(u) => self.take_frame(now, bytes, Arrival::Unfilled(u, from)),
                // A capture or a timeline sees a train's packets one by one.
                None if f.train > 1 && (self.capture.is_some() || self.timeline.is_some()) => {
                    let train = Frame {
                        bytes,
                        headers: Vec::new(),
                        ..*f
                    };
                    for at in train.packet_ranges() {
                        let mut one = crate::buffers::buffer(at.len());
                        one.extend_from_slice(&train.bytes[at]);
                        self.take_frame(now, one, Arrival::Emitted);
                    }
                    crate::buffers::recycle(train.bytes);
                }
                None if f.train > 1 => self.take_frame(now, bytes, Arrival::Train(f.train)),
                None => self.take_frame(now, bytes, Arrival::Emitted),
            }
        }
        crate::buffers::recycle_emitted(frames);
    }

    /// Takes in the run of packets `u` whose first is `bytes`
    /// ([`Unfilled::segments`]) packet by packet, as its sender would have
    /// handed them on one by one.
    fn take_run(&mut self, now: Instant, bytes: Vec<u8>, u: Unfilled, from: &dyn HostMemory) {
        let mut one = crate::buffers::buffer(bytes.len());
        // The run's headers parsed once; if its last packet can be cut
        // out, every one can.
        let split = u
            .split(&bytes)
            .filter(|s| s.packet(u.segments - 1, &mut one).is_some());
        let Some(split) = split else {
            // No run its sender could have made: the NIC drops it whole.
            crate::buffers::recycle(one);
            self.take_frame(now, bytes, Arrival::Unfilled(u, from));
            return;
        };
        for k in 0..u.segments {
            if let Some(single) = split.packet(k, &mut one) {
                self.take_frame(now, one, Arrival::Unfilled(single, from));
                one = crate::buffers::buffer(bytes.len());
            }
        }
        crate::buffers::recycle(one);
        crate::buffers::recycle(bytes);
    }

    /// Takes in the frames of port runs ([`Msg::PortRuns`]) where they lie:
    /// a run whose ICRCs all match as one train, where no capture or
    /// timeline records each frame; otherwise each frame as
    /// [`Self::take_frames`] takes one. A run short enough for a frame
    /// buffer (a datagram alone) gives it back as a frame's.
    fn take_runs(&mut self, now: Instant, mut runs: Vec<Vec<u8>>) {
        // Where no capture or timeline records each frame, a run whose
        // ICRCs all match is one train.
        let trains = self.capture.is_none() && self.timeline.is_none();
        for mut run in runs.drain(..) {
            let checked = check_run(&mut run);
            if trains && checked.count > 1 && checked.all_match() {
                self.room_for(now, checked.count as usize);
                self.port_trains += 1;
                let Self { nic, bus, .. } = self;
                let _ = nic.handle_emitted_train(now, &run[..checked.end], checked.count, bus);
                self.count_in(now, checked.count as usize);
            } else {
                let mut at = 0;
                let mut k = 0;
                while let Some(f) = crate::inbox::next_frame(&run, at) {
                    at = f.end;
                    let how = match checked.matched(k) {
                        Some(ok) => Arrival::Checked(ok),
                        None => Arrival::Port,
                    };
                    self.take_in(now, &mut run[f], how);
                    self.count_in(now, 1);
                    k += 1;
                }
            }
            if crate::buffers::holds_a_frame(&run) {
                // A datagram alone, or a few small ones: a frame buffer.
                self.give_taken(run);
            } else {
                crate::buffers::recycle_run(run);
            }
        }
        crate::buffers::recycle_list(runs);
    }

    fn take_frame(&mut self, now: Instant, mut f: Vec<u8>, how: Arrival<'_>) {
        let packets = match how {
            Arrival::Unfilled(u, _) => u.segments.max(1) as usize,
            Arrival::Train(n) => n.max(1) as usize,
            Arrival::Parsed(headers) => headers.len().max(1),
            Arrival::Port | Arrival::Checked(_) | Arrival::Emitted => 1,
        };
        self.room_for(now, packets);
        self.take_in(now, &mut f, how);
        self.give_taken(f);
        self.count_in(now, packets);
    }

    /// Gives back the buffer of a frame the NIC took in. The NIC builds
    /// its answer next (an ACK, a READ response) in it, so it goes to the
    /// NIC's own spares without a trip through the thread's; a NIC with
    /// enough for its answers leaves the rest to the thread's, for the NIC
    /// whose stream it takes in.
    fn give_taken(&mut self, f: Vec<u8>) {
        if self.nic.spares() < ANSWER_SPARES {
            self.nic.recycle(f);
        } else {
            crate::buffers::recycle(f);
        }
    }

    /// Flushes what the NIC owes before a frame of `packets` packets would
    /// take the count past [`FLUSH_PACKETS`]: a train or a run (at most 64
    /// packets) does not hold it back for up to twice as many.
    fn room_for(&mut self, now: Instant, packets: usize) {
        if self.unflushed > 0 && self.unflushed + packets > FLUSH_PACKETS {
            // The message being taken is not all in: no timer yet.
            let _ = self.flush(now, false);
        }
    }

    /// Counts `packets` taken in, and flushes after every
    /// [`FLUSH_PACKETS`].
    fn count_in(&mut self, now: Instant, packets: usize) {
        self.unflushed += packets;
        if self.unflushed >= FLUSH_PACKETS {
            // (What a cut flush left, the turn's own flush goes on with.
            // The message being taken is not all in: no timer yet.)
            let _ = self.flush(now, false);
        }
    }

    /// Hands the NIC the frame `f`, as it arrived; a capture and a
    /// timeline see it.
    fn take_in(&mut self, now: Instant, f: &mut [u8], how: Arrival<'_>) {
        let Self {
            nic,
            bus,
            capture,
            timeline,
            ..
        } = self;
        if let Some(tl) = timeline {
            tl.rec.frame(false, now, f);
        }
        let r = match how {
            // A frame the NIC is handed whole: its ICRC is checked in its
            // own buffer, in one pass, and a frame that fails is taken the
            // long way, which says why and counts it.
            Arrival::Port if doorbell_wire::icrc_matches_in_place(f) => {
                nic.handle_emitted_frame(now, f, bus)
            }
            Arrival::Port | Arrival::Checked(false) => nic.handle_frame(now, f, bus),
            Arrival::Checked(true) => nic.handle_emitted_frame(now, f, bus),
            Arrival::Emitted => nic.handle_emitted_frame(now, f, bus),
            Arrival::Train(packets) => nic.handle_emitted_train(now, f, packets, bus),
            Arrival::Parsed(headers) => nic.handle_parsed_frame(now, f, headers, bus),
            Arrival::Unfilled(u, from) => nic.handle_unfilled_frame(now, f, &u, from, bus),
        };
        if let Some(c) = capture {
            let why = match r {
                Received::Taken => None,
                Received::Dropped(why) => Some(why),
            };
            if let Arrival::Unfilled(u, from) = how {
                // A payload the sender's memory no longer holds stays
                // as the frame's buffer had it.
                let _ = u.fill(f, from);
            }
            if !matches!(how, Arrival::Port | Arrival::Checked(_)) {
                // Bytes that are no frame stay as they came.
                let _ = doorbell_wire::seal_roce(f);
            }
            c.record(crate::pcap::Direction::In, f, why);
        }
    }

    fn handle_msg(&mut self, now: Instant, msg: Msg) {
        let Self {
            nic, bus, timeline, ..
        } = self;
        match msg {
            Msg::Mmio {
                uar,
                offset,
                len,
                data,
            } => {
                let data = &data[..usize::from(len)];
                bus.capture_mmio(uar, offset, data);
                nic.handle_mmio(now, uar, offset, data, bus);
                self.rings += 1;
            }
            Msg::RecordDoorbell(uar, db) => {
                self.rings += 1;
                bus.capture_record(uar, db);
                nic.handle_record_doorbell(now, uar, db, bus);
            }
            Msg::Frames(fs) => self.take_frames(now, fs),
            Msg::PortRuns(rs, _) => self.take_runs(now, rs),
            Msg::EmittedFrames(fs, from) => self.take_emitted(now, fs, &*from),
            Msg::Cmd(c, reply) => {
                let _ = reply.send(nic.exec(now, c, bus));
            }
            Msg::Counters(q, reply) => {
                let c = q.map_or_else(|| bus.counters(), |q| bus.qp_counters(q));
                let _ = reply.send((c, nic.counters()));
            }
            Msg::Snapshot(reply) => {
                let _ = reply.send(BusSnapshot {
                    total: bus.counters(),
                    qps: bus.all_qp_counters(),
                    nic: nic.counters(),
                });
            }
            Msg::Capture(on, reply) => {
                let c = bus.take_capture();
                bus.set_capture(on);
                let _ = reply.send(c);
            }
            Msg::Record(on, reply) => match timeline {
                // The bus keeps recording for the timeline; the asker's
                // crossings are kept aside.
                Some(tl) => {
                    let mut log = tl.kept.take().unwrap_or_default();
                    log.extend(bus.take_log());
                    tl.kept = on.then(Vec::new);
                    let _ = reply.send(log);
                }
                None => {
                    let log = bus.take_log();
                    bus.set_recording(on);
                    let _ = reply.send(log);
                }
            },
            Msg::Trace(reply) => {
                let t = timeline.as_mut().map(|tl| tl.rec.take(&tl.name));
                let _ = reply.send(t);
            }
            // The turn's flush goes on with what the last one left.
            Msg::Resume => self.resume_queued = false,
        }
    }

    /// Fires due timers if `inbox_empty` (the turn took everything queued)
    /// or they have waited [`TIMERS_HELD_MAX`], and hands every output on:
    /// frames to the port,
    /// interrupts to the handler, unrouted events to the host. Builds what
    /// the NIC's bursts left ([`Nic::resume_transmit`]) up to
    /// [`FLUSH_LIMIT`] packets; true if it stopped there with more to
    /// build.
    fn flush(&mut self, now: Instant, inbox_empty: bool) -> bool {
        self.unflushed = 0;
        let mut sent = 0;
        let mut cut = false;
        if self.nic.poll_timeout().is_some_and(|t| t <= now) {
            // Only once everything that has arrived is taken: an ACK
            // waiting in the inbox behind others is not lost. Thousands of
            // QPs' ACKs taken more slowly than their timeout (a debug
            // build) otherwise had the NIC send each request again, its
            // peer answer each duplicate, and the backlog grow until
            // requests ran out of retries, on a fabric that loses nothing.
            let held = *self
                .timers_held_until
                .get_or_insert(now.add(TIMERS_HELD_MAX));
            if inbox_empty || held <= now {
                self.timers_held_until = None;
                self.nic.handle_timeout(now, &mut self.bus);
                if let Some(tl) = &mut self.timeline {
                    tl.after(&mut self.bus, Some("timers".into()), now);
                }
            }
        } else {
            self.timers_held_until = None;
        }
        loop {
            self.nic.transmit_into(&mut self.out);
            let more = self.fill.as_mut().map_or(0, |f| f.fill(&mut self.out));
            if self.seal_out {
                // Bytes that leave for a port or a capture are written
                // whole (a NIC of this runtime that hands headers over
                // parsed sends only to another's engine).
                for f in self.out.iter_mut().filter(|f| !f.headers.is_empty()) {
                    f.write_headers();
                }
                seal_frames(&mut self.out);
            }
            if let Some(tl) = &mut self.timeline {
                for f in &self.out {
                    tl.rec.frame(true, f.ready.max(now), &f.bytes);
                }
            }
            if self.out.is_empty() {
                // Nothing built (or a port whose link is down dropped
                // it): a READ may still owe responses to build.
                if !self.nic.resume_transmit(now, &mut self.bus) {
                    break;
                }
                continue;
            }
            sent += self.out.iter().map(|f| f.packets() as usize).sum::<usize>();
            self.egress.send(&mut self.out, self.clock, &mut self.spent);
            if let Some(f) = &mut self.fill {
                f.keep(&mut self.spent, more);
            }
            // The NIC builds its next frames in the buffers the port
            // copied out, straight back (no trip through the thread's
            // spares, whose bound would send most of a window's buffers
            // through the process's store and its lock); a NIC whose
            // frames went on to another NIC of this process is lent the
            // thread's spares instead.
            crate::buffers::give_back(&mut self.nic, &mut self.spent);
            crate::buffers::lend(&mut self.nic, LEND);
            crate::buffers::lend_headers(&mut self.nic, LEND_HEADERS);
            // A long READ's responses go on in a later turn, other inputs
            // taken in between.
            if sent >= FLUSH_LIMIT && self.nic.transmit_pending() {
                self.flushes_cut += 1;
                cut = true;
                break;
            }
            // The next burst of a window (a NIC with a burst,
            // `NicConfig::tx_burst`), once this one is on its way.
            if !self.nic.resume_transmit(now, &mut self.bus) {
                break;
            }
            if let Some(tl) = &mut self.timeline {
                tl.after(&mut self.bus, Some("transmit".into()), now);
            }
        }
        while let Some(v) = self.nic.poll_interrupt() {
            if let Some(irqs) = &self.irqs {
                let _ = irqs.send(v);
            }
        }
        while let Some(e) = self.nic.poll_event() {
            let _ = self.events.send(e);
        }
        cut
    }
}

/// The CRCs two packets' ICRCs are made of, hashed together
/// ([`doorbell_wire::icrc_ipv4_in_place_pair`]).
fn pair_hash(p: [&[u8]; 2]) -> [u32; 2] {
    crate::crc::crc32_pair(doorbell_wire::icrc::LRH_SEED, p)
}

/// What [`check_run`] found of a run's frames.
struct RunChecked {
    /// Frames the run holds, up to the first bytes that hold none.
    count: u32,
    /// Where the last of them ends.
    end: usize,
    /// Bit `k` set: frame `k`'s ICRC matched (frames past the first
    /// [`RunChecked::CHECKED`] are not checked).
    matched: u64,
}

impl RunChecked {
    /// Frames whose ICRCs a check answers for.
    const CHECKED: u32 = u64::BITS;

    /// Whether frame `k`'s ICRC matched; `None` if it was not checked.
    fn matched(&self, k: u32) -> Option<bool> {
        (k < Self::CHECKED.min(self.count)).then(|| self.matched >> k & 1 == 1)
    }

    /// Whether every frame was checked and matched.
    fn all_match(&self) -> bool {
        let unchecked = u64::BITS.checked_sub(self.count);
        unchecked.is_some_and(|n| self.matched == u64::MAX.checked_shr(n).unwrap_or(0))
    }
}

/// Checks the ICRCs of the frames of a port run ([`Msg::PortRuns`]), two
/// at a time where they lie (the first [`RunChecked::CHECKED`]; a
/// coalesced receive holds at most 64 datagrams).
fn check_run(run: &mut [u8]) -> RunChecked {
    let mut c = RunChecked {
        count: 0,
        end: 0,
        matched: 0,
    };
    let mut at = 0;
    while let Some(f) = crate::inbox::next_frame(run, at) {
        let k = c.count;
        c.count += 1;
        at = f.end;
        c.end = f.end;
        if k >= RunChecked::CHECKED {
            continue;
        }
        let pair = (k + 1 < RunChecked::CHECKED)
            .then(|| crate::inbox::next_frame(run, f.end))
            .flatten();
        let Some(g) = pair else {
            let ok = doorbell_wire::icrc_matches_in_place(&mut run[f]);
            c.matched |= u64::from(ok) << k;
            continue;
        };
        c.count += 1;
        at = g.end;
        c.end = g.end;
        let (head, tail) = run.split_at_mut(f.end);
        let g = g.start - f.end..g.end - f.end;
        let [f_ok, g_ok] =
            doorbell_wire::icrc_matches_in_place_pair(&mut head[f], &mut tail[g], pair_hash);
        c.matched |= u64::from(f_ok) << k | u64::from(g_ok) << (k + 1);
    }
    c
}

/// Writes the ICRC of each of `frames`, which their NIC left unwritten,
/// two frames at a time: two packets' CRCs interleaved cost little more
/// than one's ([`crate::crc`]). Bytes that are no frame stay as they are.
pub(crate) fn seal_frames(frames: &mut [Frame]) {
    let mut alone: Option<&mut Frame> = None;
    for f in frames.iter_mut() {
        if f.segment > 0 {
            seal_datagrams(f);
            continue;
        }
        // A frame to a port is one packet, never a train.
        debug_assert!(f.train == 1);
        let Some(a) = alone.take() else {
            alone = Some(f);
            continue;
        };
        if doorbell_wire::seal_roce_pair(&mut a.bytes, &mut f.bytes, pair_hash).is_err() {
            let _ = doorbell_wire::seal_roce(&mut a.bytes);
            let _ = doorbell_wire::seal_roce(&mut f.bytes);
        }
    }
    if let Some(f) = alone {
        let _ = doorbell_wire::seal_roce(&mut f.bytes);
    }
}

/// Writes the ICRC of each datagram of a run ([`Frame::segment`]): the
/// run's IPv4 and UDP headers hashed once (again for a shorter last
/// datagram, whose lengths differ), each datagram's bytes continued from
/// them, two at a time.
fn seal_datagrams(f: &mut Frame) {
    use doorbell_wire::icrc::ICRC_LEN;
    const HEADERS: usize = crate::datagrams::HEADERS_LEN;
    let seg = f.segment as usize;
    if f.bytes.len() <= HEADERS || seg == 0 {
        return;
    }
    let (headers, body) = f.bytes.split_at_mut(HEADERS);
    let full = doorbell_wire::icrc_ipv4_headers(headers);
    let seal = |d: &mut [u8], crc: u32| {
        if let Some(at) = d.len().checked_sub(ICRC_LEN) {
            d[at..].copy_from_slice(&crc.to_le_bytes());
        }
    };
    // The whole-length datagrams two at a time, then the one left, if
    // any; then a shorter last one, whose lengths differ.
    let (whole, short) = body.split_at_mut(body.len() / seg * seg);
    let mut pairs = whole.chunks_exact_mut(2 * seg);
    for pair in &mut pairs {
        let (a, b) = pair.split_at_mut(seg);
        let [ca, cb] = doorbell_wire::icrc_datagram_pair(full, a, b, crate::crc::crc32_pair);
        seal(a, ca);
        seal(b, cb);
    }
    for a in pairs.into_remainder().chunks_mut(seg) {
        let crc = doorbell_wire::icrc_datagram(full, a);
        seal(a, crc);
    }
    if !short.is_empty() {
        let mut h = [0u8; HEADERS];
        h.copy_from_slice(headers);
        crate::datagrams::set_lengths(&mut h, short.len());
        let crc = doorbell_wire::icrc_datagram(doorbell_wire::icrc_ipv4_headers(&h), short);
        seal(short, crc);
    }
}

/// How a frame reached a NIC.
#[derive(Clone, Copy)]
enum Arrival<'a> {
    /// From the port: checked whole, ICRC included.
    Port,
    /// From the port, its ICRC checked already: whether it matched (a
    /// frame that did not is checked whole, as [`Arrival::Port`], which
    /// says why and counts it).
    Checked(bool),
    /// From another NIC of this process, as it emitted it.
    Emitted,
    /// As [`Arrival::Emitted`], its payload left in that NIC's host memory.
    Unfilled(Unfilled, &'a dyn HostMemory),
    /// As [`Arrival::Emitted`], a train of this many packets
    /// ([`Frame::train`]); never where a capture or a timeline is.
    Train(u32),
    /// As [`Arrival::Emitted`], its packets' headers handed over parsed
    /// and unwritten ([`Frame::headers`]); never where a capture or a
    /// timeline is.
    Parsed(&'a [PacketHeaders]),
}

/// What a UDP port's receive thread saw of its NIC's streams
/// ([`Core::rx_wait`]), and how long it stays off its socket next.
pub(crate) struct StreamsSeen {
    /// [`Nic::window_stops`] as last seen.
    stops: u64,
    /// When it last changed.
    at: std::time::Instant,
    /// The next stay off the socket, while the polls keep receiving for
    /// the thread ([`Core::stay_away`]); [`LEASE`] again whenever the
    /// thread goes back to its socket.
    stay: Duration,
}

impl StreamsSeen {
    pub(crate) fn new() -> Self {
        Self {
            stops: 0,
            at: std::time::Instant::now(),
            stay: LEASE,
        }
    }
}

/// How a UDP port's receive thread waits next ([`Core::rx_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxWait {
    /// Off the socket, parked ([`Core::stay_away`]).
    LeaveToPolls,
    /// On the socket, looking again soon.
    Soon,
    /// On the socket, for as long as it likes.
    Long,
}

/// Takes what a UDP port's socket holds into a NIC's inbox without running
/// it (for the worker, whose turn follows); tells whether it took any.
pub(crate) type PortReader = Box<dyn Fn(&Core) -> bool + Send + Sync>;

/// A NIC's engine, its inbox, and the worker that runs what no caller does.
pub(crate) struct Core {
    engine: Mutex<Engine>,
    inbox: Inbox,
    /// The device clock's zero.
    start: std::time::Instant,
    worker: OnceLock<Thread>,
    /// Device time (ps) until which the worker sleeps unless unparked;
    /// written under the engine's lock.
    sleeping_until: AtomicU64,
    /// Times the worker came back from a park.
    wakes: AtomicU64,
    /// Times the worker woke at its timeout, unwoken, to messages no
    /// thread was running ([`Core::stalls`]).
    stalls: AtomicU64,
    /// The worker was unparked since it last parked.
    rung: AtomicBool,
    /// When a program last polled this NIC's CQ and found it empty
    /// ([`Self::since_start_ns`]; 0: never).
    polled_at_ns: AtomicU64,
    /// When a program last armed one of this NIC's CQs
    /// ([`Self::since_start_ns`]; 0: never): it is about to wait for an event,
    /// not to poll.
    armed_at_ns: AtomicU64,
    /// [`Nic::window_stops`] after the last turn.
    window_stops: AtomicU64,
    /// Flushes that stopped at [`FLUSH_LIMIT`] with more to build, after
    /// the last turn.
    flushes_cut: AtomicU64,
    /// [`Engine::port_trains`] after the last turn.
    port_trains: AtomicU64,
    /// [`Engine::rings`] after the last turn.
    rings: AtomicU64,
    /// The UDP port's receive thread stays off its socket
    /// ([`Core::rx_wait`]).
    away: AtomicBool,
    /// That thread, once it first did.
    away_thread: OnceLock<Thread>,
    /// Takes what the UDP port's socket holds into the inbox, for the
    /// worker while the receive thread is away ([`Core::set_port_reader`]).
    port_reader: OnceLock<PortReader>,
    /// A test holds the receive thread off its socket ([`Core::hold_away`]).
    held_away: AtomicBool,
    /// Times that thread stayed off its socket, and times an arm called it
    /// back ([`crate::PortCounters::rx_left_to_polls`]).
    left_to_polls: AtomicU64,
    called_back: AtomicU64,
    /// The stays the receive thread meant to make, in µs, summed.
    away_us: AtomicU64,
    /// A worker left frames for that program's next poll.
    left: AtomicBool,
    /// Another NIC handed the worker frames since the worker last looked
    /// ([`Core::hand_to_worker`]).
    handed: AtomicBool,
    /// Deliveries another NIC handed to the worker ([`Core::hand_offs`]).
    hand_offs: AtomicU64,
    stop: AtomicBool,
    /// [`crate::forks::generation`] when the NIC was made: in a child
    /// after `fork()` none of its threads exist, and nothing is handled.
    forks: u32,
}

impl Core {
    pub(crate) fn new(engine: Engine, start: std::time::Instant) -> Self {
        Self {
            engine: Mutex::new(engine),
            inbox: Inbox::new(),
            start,
            worker: OnceLock::new(),
            sleeping_until: AtomicU64::new(u64::MAX),
            wakes: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            rung: AtomicBool::new(false),
            polled_at_ns: AtomicU64::new(0),
            armed_at_ns: AtomicU64::new(0),
            window_stops: AtomicU64::new(0),
            flushes_cut: AtomicU64::new(0),
            port_trains: AtomicU64::new(0),
            rings: AtomicU64::new(0),
            away: AtomicBool::new(false),
            away_thread: OnceLock::new(),
            port_reader: OnceLock::new(),
            held_away: AtomicBool::new(false),
            left_to_polls: AtomicU64::new(0),
            called_back: AtomicU64::new(0),
            away_us: AtomicU64::new(0),
            left: AtomicBool::new(false),
            handed: AtomicBool::new(false),
            hand_offs: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            forks: crate::forks::generation(),
        }
    }

    /// Nanoseconds since the NIC started, at least 1 (0 stands for
    /// never): when a program last polled or armed ([`Self::note_poll`],
    /// [`Self::note_arm`]). Per NIC, not a process-wide epoch made on
    /// first use, which a fork in another thread could leave half made.
    fn since_start_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// The device clock's reading now.
    pub(crate) fn now(&self) -> Instant {
        device_time(self.start, std::time::Instant::now())
    }

    /// Flushes that stopped at [`FLUSH_LIMIT`] with more to build
    /// ([`crate::LiveNic::flushes_cut`]).
    pub(crate) fn flushes_cut(&self) -> u64 {
        self.flushes_cut.load(Ordering::Relaxed)
    }

    /// Port runs whose ICRCs all matched, taken as one train, as of the
    /// last turn ([`crate::PortCounters::rx_trains`]).
    pub(crate) fn port_trains(&self) -> u64 {
        self.port_trains.load(Ordering::Relaxed)
    }

    /// Deliveries of frames that another NIC of the process handed to the
    /// worker ([`Core::hand_to_worker`]).
    pub(crate) fn hand_offs(&self) -> u64 {
        self.hand_offs.load(Ordering::Relaxed)
    }

    /// Times the worker came back from a park, woken or at its timeout.
    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// Times the worker woke at its timeout, with nobody having woken it,
    /// to find messages in its inbox that no other thread took within
    /// [`STALL_CHECK`] and that nobody was running the NIC for: messages
    /// that waited for the timeout. None should, since every message is
    /// run by the thread that queued it, by the lock's holder, by a worker
    /// it was handed to (which is woken), or by a poll or the worker it was
    /// left for. (A woken worker that the scheduler kept waiting is not
    /// counted.)
    pub(crate) fn stalls(&self) -> u64 {
        self.stalls.load(Ordering::Relaxed)
    }

    /// Whether this is a forked child's copy of the NIC, whose threads and
    /// peers are the parent's: it handles nothing, and touches nothing it
    /// shares with the parent.
    pub(crate) fn is_forked_copy(&self) -> bool {
        self.forks != crate::forks::generation()
    }

    /// Whether the NIC handles nothing more: stopped, or a forked copy.
    fn stopped_or_forked(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.is_forked_copy()
    }

    /// Queues `msg` and handles the inbox if no other thread is. With
    /// nothing queued and no turn running, `msg` is handled at once, in a
    /// turn of this thread's, without passing through the inbox: a
    /// doorbell rung by the program's thread (the common case) then costs
    /// no queue lock on either side.
    pub(crate) fn submit(&self, msg: Msg) {
        self.submit_at(msg, None);
    }

    /// [`Self::submit`], in a turn that takes `clock` as its reading of
    /// the clock if it is given: that of the turn, in this thread, of the
    /// NIC that sent `msg` ([`Self::deliver`]), which saves a reading
    /// (about 23 ns on the VM of `docs/benchmarks.md`).
    fn submit_at(&self, msg: Msg, clock: Option<std::time::Instant>) {
        if self.stopped_or_forked() {
            return;
        }
        if self.inbox.is_empty() {
            match self.engine.try_lock() {
                Ok(mut g) => {
                    // Nothing was queued before `msg`: handling it first
                    // keeps the order a push would have given it.
                    let clock = clock.unwrap_or_else(std::time::Instant::now);
                    let emptied = self.turn(&mut g, BUDGET, Some(msg), clock, true);
                    drop(g);
                    return self.after_turn(emptied);
                }
                Err(TryLockError::Poisoned(_)) => return self.die(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        self.enqueue(msg);
        self.run();
    }

    /// Queues `msg` without handling anything: for a receiver that holds
    /// its port's lock, so that frames enter the inbox in the port's
    /// order, and then lets the lock go before it calls [`Core::run`].
    pub(crate) fn enqueue(&self, msg: Msg) {
        if self.stopped_or_forked() {
            return;
        }
        self.push(msg);
    }

    /// Queues `msg`. One that lands after the NIC stopped (the check
    /// before it raced the stop's clearing) is dropped with the rest, its
    /// reply channel closed, rather than left for a turn that never comes:
    /// the stop's flag is set before its clearing takes the queue's lock,
    /// so a push after the clearing sees it.
    fn push(&self, msg: Msg) {
        self.inbox.push(msg);
        if self.stop.load(Ordering::Acquire) {
            self.inbox.clear();
        }
    }

    /// Runs `f` holding the NIC's state, so that no turn runs meanwhile
    /// (for [`crate::LiveNic::with_turns_held`]); then runs what was
    /// queued.
    pub(crate) fn with_turns_held<R>(&self, f: impl FnOnce() -> R) -> R {
        let held = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        let r = f();
        drop(held);
        self.run();
        r
    }

    /// Whether the NIC has more frames queued than a few turns take
    /// ([`BACKLOG`]): its receivers then leave frames where they are (a
    /// socket's buffer, which drops and counts what overflows it; a ring,
    /// which holds its sender back) until its turns have caught up,
    /// rather than queue them here without bound (decision record 0066).
    pub(crate) fn backlogged(&self) -> bool {
        self.inbox.backlog() >= BACKLOG
    }

    /// For a port's receive thread: if the NIC is backlogged, runs it (if
    /// no other thread is) or lets the thread that is catch up for
    /// [`BACKLOG_WAIT`], and says so; the thread then looks again rather
    /// than spin on a socket or ring that stays readable.
    pub(crate) fn waited_out_backlog(&self) -> bool {
        if !self.backlogged() {
            return false;
        }
        self.run();
        std::thread::sleep(BACKLOG_WAIT);
        true
    }

    /// Handles the inbox if no other thread is (after [`Core::enqueue`]).
    pub(crate) fn run(&self) {
        if self.stopped_or_forked() {
            return;
        }
        // Pairs with the fence after a holder lets the lock go: either it
        // sees the messages queued, or this thread sees the lock free.
        fence(Ordering::SeqCst);
        self.progress();
    }

    /// Queues `msg` for the worker and wakes it, without running the NIC
    /// here: for a receive thread that found a full batch waiting, so that
    /// it goes back to the socket while the worker handles this one (the
    /// two run on two cores).
    pub(crate) fn hand_over(&self, msg: Msg) {
        if self.stopped_or_forked() {
            return;
        }
        self.push(msg);
        self.unpark();
    }

    /// Queues `msg`, frames from another NIC of the process, for the
    /// worker, and wakes it: a stream's payloads are then copied in by one
    /// thread, on one core, while the sender's thread goes on building
    /// (decision record 0049). The worker keeps looking for
    /// [`STREAM_SPIN`] after such frames before it parks.
    pub(crate) fn hand_to_worker(&self, msg: Msg) {
        if self.stopped_or_forked() {
            return;
        }
        self.push(msg);
        self.handed.store(true, Ordering::Relaxed);
        self.hand_offs.fetch_add(1, Ordering::Relaxed);
        self.unpark();
    }

    /// Takes `msg`, frames from another NIC of the process that sent them
    /// in a turn at `clock`, as [`Self::submit_at`] does; except in a
    /// worker thread while a program polls this NIC's CQ (it did within
    /// [`POLLING`]): the frames (a stream's ACKs, say) are then queued for
    /// that program's next poll ([`Self::poll_inbox`]) rather than run on
    /// the worker's core, and the worker runs them itself if no poll has
    /// taken them after [`LEFT_WAIT`], or before it parks.
    pub(crate) fn deliver(self: &Arc<Self>, msg: Msg, clock: std::time::Instant) {
        let leave = LEFT.with_borrow_mut(|left| {
            let Some(left) = left else { return false };
            let polled_at_ns = self.polled_at_ns.load(Ordering::Relaxed);
            let since_ns = self.since_start_ns().saturating_sub(polled_at_ns);
            if polled_at_ns == 0 || since_ns >= POLLING.as_nanos() as u64 {
                return false;
            }
            match left.iter_mut().find(|(c, _)| Arc::ptr_eq(c, self)) {
                // What was left before has been taken: the wait starts
                // again with this.
                Some((_, at)) if self.inbox.is_empty() => *at = std::time::Instant::now(),
                Some(_) => {}
                None => left.push((self.clone(), std::time::Instant::now())),
            }
            true
        });
        if leave {
            self.enqueue(msg);
            self.left.store(true, Ordering::Release);
        } else {
            self.submit_at(msg, Some(clock));
        }
    }

    /// For a program's poll that found its CQ empty: notes the poll, and
    /// runs what a worker left for it ([`Self::deliver`]) if no other
    /// thread is running the NIC; tells whether anything was left. Frames
    /// handed to this NIC's own worker are left to it.
    pub(crate) fn poll_inbox(&self) -> bool {
        self.note_poll();
        if !self.left.load(Ordering::Acquire) || !self.left.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.run();
        true
    }

    /// Notes that a program polled this NIC's CQ and found it empty.
    pub(crate) fn note_poll(&self) {
        self.polled_at_ns
            .store(self.since_start_ns(), Ordering::Relaxed);
    }

    /// Notes that a program armed one of this NIC's CQs: it is about to
    /// wait for an event, so a receive thread that stayed off its socket
    /// for its polls goes back now.
    pub(crate) fn note_arm(&self) {
        self.armed_at_ns
            .store(self.since_start_ns(), Ordering::Relaxed);
        // Pairs with the fence in `stay_away`: either that thread sees the
        // arm, or this one sees it away.
        fence(Ordering::SeqCst);
        if self.away.load(Ordering::Relaxed)
            && let Some(t) = self.away_thread.get()
        {
            t.unpark();
        }
    }

    /// How a UDP port's receive thread waits next (`seen`: what it saw of
    /// the NIC's streams so far). It leaves the socket to the program's CQ
    /// polls while a program polls (it did within [`LEASE`], and armed no
    /// CQ within it) and a stream waits for ACKs (a QP's sending stopped at
    /// a full window within [`STREAM_QUIET`]): the program that polls for
    /// the stream's completions takes its ACKs. A program that waits for a
    /// peer's WRITE by watching its memory fills no window, so its
    /// datagrams never wait for a poll. While a stream runs and no program
    /// polls, the thread looks again soon, for polls that start: they may
    /// take every datagram that would have woken it (the kernel then puts
    /// it back to sleep unseen). Polls alone do not shorten its wait:
    /// waking every millisecond beside a latency test's polls cost that
    /// test a third of its speed over UDP.
    pub(crate) fn rx_wait(&self, seen: &mut StreamsSeen) -> RxWait {
        let stops = self.window_stops.load(Ordering::Relaxed);
        if stops != seen.stops {
            seen.stops = stops;
            seen.at = std::time::Instant::now();
        }
        let streaming = seen.stops != 0 && seen.at.elapsed() < STREAM_QUIET;
        if self.held_away() {
            return RxWait::LeaveToPolls;
        }
        let wait = match (streaming, self.polled_lately()) {
            (true, true) => RxWait::LeaveToPolls,
            (true, false) => RxWait::Soon,
            (false, _) => RxWait::Long,
        };
        if wait != RxWait::LeaveToPolls {
            seen.stay = LEASE;
        }
        wait
    }

    /// Whether a program polled this NIC's CQ within [`LEASE`] and armed
    /// none within it.
    pub(crate) fn polled_lately(&self) -> bool {
        let now = self.since_start_ns();
        let lease = LEASE.as_nanos() as u64;
        let polled = self.polled_at_ns.load(Ordering::Relaxed);
        let armed = self.armed_at_ns.load(Ordering::Relaxed);
        polled != 0
            && now.saturating_sub(polled) < lease
            && (armed == 0 || now.saturating_sub(armed) >= lease)
    }

    /// Register stores and doorbell records this NIC took (a program's
    /// posts and arms, the driver's EQ doorbells), as of its last turn.
    pub(crate) fn rings(&self) -> u64 {
        self.rings.load(Ordering::Relaxed)
    }

    /// Parks the calling receive thread for its next stay (`seen`'s), or
    /// until a program arms a CQ ([`Self::note_arm`]) or the port stops
    /// (which unparks it; a NIC that stopped first is not parked for),
    /// and sets the stay after it, should the polls still receive for the
    /// thread then ([`next_stay`]): twice this one, up to [`AWAY_MAX`], or
    /// [`LEASE`] again after an arm during the stay or where it did not
    /// park at all. A stream that the polls keep taking wakes the thread a
    /// few hundred times a second rather than thousands, each wake-up a
    /// switch on a busy core.
    pub(crate) fn stay_away(&self, seen: &mut StreamsSeen) {
        let park = seen.stay;
        let _ = self.away_thread.get_or_init(std::thread::current);
        self.away.store(true, Ordering::Relaxed);
        // Pairs with the fence in `note_arm`.
        fence(Ordering::SeqCst);
        let armed = self.armed_at_ns.load(Ordering::Relaxed);
        let lease = LEASE.as_nanos() as u64;
        let mut next = LEASE;
        if (armed == 0 || self.since_start_ns().saturating_sub(armed) >= lease)
            && !self.stop.load(Ordering::Acquire)
        {
            // The stay's start is read before the stay is counted, and the
            // count is published with Release (read with Acquire in
            // `left_to_polls`): a program that sees the count move and
            // then arms reads the clock after this did, so its arm is
            // seen as made during the stay.
            let (from, from_ns) = (std::time::Instant::now(), self.since_start_ns());
            self.away_us
                .fetch_add(park.as_micros() as u64, Ordering::Relaxed);
            self.left_to_polls.fetch_add(1, Ordering::Release);
            std::thread::park_timeout(park);
            // An arm during the stay starts the stays over, whenever the
            // scheduler let this thread run; the count is of arms that
            // woke it before its time.
            let armed_since = self.armed_at_ns.load(Ordering::Relaxed) >= from_ns;
            if armed_since && from.elapsed() < park {
                self.called_back.fetch_add(1, Ordering::Relaxed);
            }
            next = next_stay(park, armed_since);
        }
        self.away.store(false, Ordering::Relaxed);
        seen.stay = next;
    }

    /// Whether the UDP port's receive thread is off its socket: the
    /// program's polls, and the worker when it wakes, are then the only
    /// receives.
    pub(crate) fn rx_away(&self) -> bool {
        self.away.load(Ordering::Relaxed) || self.held_away.load(Ordering::Relaxed)
    }

    /// Whether a test holds the receive thread off its socket
    /// ([`Self::hold_away`]).
    pub(crate) fn held_away(&self) -> bool {
        self.held_away.load(Ordering::Relaxed)
    }

    /// Gives the worker the UDP port's socket to read while the receive
    /// thread is away (decision record 0075). Set once, by the port.
    pub(crate) fn set_port_reader(&self, read: PortReader) {
        let _ = self.port_reader.set(read);
    }

    /// Holds the UDP port's receive thread off its socket, as if the
    /// program's polls kept it away, until called with `false`: for tests
    /// of what the NIC does with what waits there meanwhile.
    pub(crate) fn hold_away(&self, on: bool) {
        self.held_away.store(on, Ordering::Relaxed);
        if !on && let Some(t) = self.away_thread.get() {
            t.unpark();
        }
    }

    /// Times the UDP port's receive thread stayed off its socket for the
    /// program's polls, times an arm called it back, and how long the
    /// stays were meant to last, in microseconds, summed (arms cut some
    /// short). The count is read first: the sum then holds
    /// every stay counted, and perhaps the next.
    pub(crate) fn left_to_polls(&self) -> (u64, u64, u64) {
        let stays = self.left_to_polls.load(Ordering::Acquire);
        (
            stays,
            self.called_back.load(Ordering::Relaxed),
            self.away_us.load(Ordering::Relaxed),
        )
    }

    /// Takes turns at the inbox while it has messages and the lock is free.
    fn progress(&self) {
        loop {
            let mut g = match self.engine.try_lock() {
                Ok(g) => g,
                Err(TryLockError::WouldBlock) => return,
                Err(TryLockError::Poisoned(_)) => return self.die(),
            };
            let emptied = self.turn(&mut g, BUDGET, None, std::time::Instant::now(), true);
            drop(g);
            if !self.more_after_turn(emptied) {
                return;
            }
        }
    }

    /// After a turn outside [`Self::progress`]: takes further turns while
    /// messages came meanwhile, as `progress` does.
    fn after_turn(&self, emptied: bool) {
        if self.more_after_turn(emptied) {
            self.progress();
        }
    }

    /// Whether the thread that took a turn takes another: not if the
    /// budget ran out (the worker is woken for the rest), nor if the inbox
    /// is empty once the lock is let go.
    fn more_after_turn(&self, emptied: bool) -> bool {
        if !emptied {
            // Someone else's share: the worker takes it.
            self.unpark();
            return false;
        }
        // Pairs with the fence before a queuer looks at the lock: either
        // it sees the lock free, or this thread sees its message.
        fence(Ordering::SeqCst);
        !self.inbox.is_empty()
    }

    /// Handles up to `budget` messages (`first`, if any, before the
    /// inbox's), then flushes, firing due timers if it emptied the inbox;
    /// takes what came during the flush the same way while the budget
    /// lasts, if `again`; tells whether it emptied the inbox. All at the device time
    /// of `clock`, the turn's one reading of the clock: a turn lasts
    /// microseconds, and the device's timers are milliseconds. Unparks the
    /// worker if this turn armed a timer due before it wakes.
    fn turn(
        &self,
        g: &mut MutexGuard<'_, Engine>,
        budget: usize,
        mut first: Option<Msg>,
        clock: std::time::Instant,
        again: bool,
    ) -> bool {
        if self.stop.load(Ordering::Acquire) {
            self.inbox.clear();
            return true;
        }
        let mut emptied;
        // A reading taken before the lock (by a sending NIC's turn) may be
        // older than the last turn's: the device's time never goes back.
        let clock = clock.max(g.clock);
        g.clock = clock;
        let now = device_time(self.start, clock);
        let mut done = 0;
        loop {
            emptied = false;
            while done < budget {
                // A turn takes its first message whatever it costs; after
                // that, none that would take it past its budget (a port's
                // batch can hold thousands of frames): that one is left
                // for the worker, or for the next turn.
                let room = budget - done;
                let next = first
                    .take()
                    .or_else(|| self.inbox.pop_if(|m| done == 0 || m.work() <= room));
                match next {
                    Some(m) => {
                        g.busy = true;
                        done += m.work();
                        g.handle(now, m);
                    }
                    None => {
                        emptied = self.inbox.is_empty();
                        break;
                    }
                }
            }
            if done >= budget {
                // The budget ran out, perhaps with nothing left.
                emptied = self.inbox.is_empty();
            }
            if g.flush(now, emptied) {
                // The rest of what the NIC builds goes on in a later turn,
                // this thread's or the worker's, behind what is queued now.
                if !g.resume_queued {
                    g.resume_queued = true;
                    self.push(Msg::Resume);
                }
                emptied = false;
                break;
            }
            // What came while the flush ran (the answer of a NIC of this
            // process that took the flushed frames in this thread, say)
            // is taken in this turn, not in another after the lock is let
            // go and taken again. Not in the worker's turns: a program
            // that posts meanwhile would have the worker run its NIC for
            // as long as it posts (decision record 0076).
            if !again || !emptied || done >= budget || self.inbox.is_empty() {
                break;
            }
        }
        self.flushes_cut.store(g.flushes_cut, Ordering::Relaxed);
        self.port_trains.store(g.port_trains, Ordering::Relaxed);
        self.window_stops
            .store(g.nic.window_stops(), Ordering::Relaxed);
        self.rings.store(g.rings, Ordering::Relaxed);
        if let Some(t) = g.nic.poll_timeout()
            && t.as_ps() < self.sleeping_until.load(Ordering::Relaxed)
        {
            self.unpark();
        }
        emptied
    }

    fn unpark(&self) {
        if let Some(w) = self.worker.get() {
            self.rung.store(true, Ordering::Relaxed);
            w.unpark();
        }
    }

    /// The device code panicked with the lock held: the NIC is gone.
    fn die(&self) {
        self.stop.store(true, Ordering::Release);
        self.inbox.clear();
        self.unpark();
    }

    /// Stops the NIC: the worker returns, later messages are dropped, and
    /// the interrupt handler's channel closes. Waits for a turn in progress.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let mut g = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        g.irqs = None;
        drop(g);
        self.inbox.clear();
        self.unpark();
    }

    /// The worker's loop: runs the inbox and the timers when no caller
    /// does, parks in between. Returns once stopped.
    pub(crate) fn work(&self) {
        let _ = self.worker.set(std::thread::current());
        LEFT.with_borrow_mut(|left| *left = Some(Vec::new()));
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            // With the UDP port's receive thread away for the program's
            // polls, nothing else reads its socket: what waits there has
            // arrived, and is taken before the turn below fires a timer
            // for it (an ACK is not late because no poll came; decision
            // record 0075).
            if self.rx_away()
                && let Some(read) = self.port_reader.get()
            {
                read(self);
            }
            let until = {
                let mut g = match self.engine.lock() {
                    Ok(g) => g,
                    Err(_) => return self.die(),
                };
                // Awake: the turns below need not wake this thread for the
                // timers they arm (it looks at them next).
                self.sleeping_until.store(0, Ordering::Relaxed);
                while !self.turn(&mut g, BUDGET, None, std::time::Instant::now(), false) {}
                let until = match g.nic.poll_timeout() {
                    Some(t) => t.as_ps(),
                    None if std::mem::take(&mut g.busy) => self
                        .now()
                        .as_ps()
                        .saturating_add(BUSY_TICK.as_nanos() as u64 * 1000),
                    None => u64::MAX,
                };
                // Under the lock, so a later turn compares against it.
                self.sleeping_until.store(until, Ordering::Relaxed);
                until
            };
            run_left(false);
            // Before the last looks: a message queued after them rings the
            // worker, and its wake-up is not taken for a timeout's.
            self.rung.store(false, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if !self.inbox.is_empty()
                || self.handed.swap(false, Ordering::Relaxed) && self.more_soon()
            {
                continue;
            }
            run_left(true);
            match until {
                u64::MAX => std::thread::park(),
                t => {
                    let wait = t.saturating_sub(self.now().as_ps()) / 1000;
                    if wait == 0 {
                        continue;
                    }
                    std::thread::park_timeout(Duration::from_nanos(wait));
                }
            }
            self.wakes.fetch_add(1, Ordering::Relaxed);
            if !self.rung.load(Ordering::Relaxed) && self.stranded() {
                self.stalls.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether messages wait in the inbox that no thread takes within
    /// [`STALL_CHECK`] and that no turn is running for. Looked at only on
    /// a wake-up at the timeout with messages waiting (rare, and a stall
    /// or a race with their queuer), so that queueing costs no clock.
    fn stranded(&self) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < STALL_CHECK {
            if self.inbox.is_empty() {
                return false;
            }
            std::hint::spin_loop();
        }
        // (A turn that holds the lock takes them before it lets it go.)
        !self.inbox.is_empty() && self.engine.try_lock().is_ok()
    }

    /// Whether a message comes within [`STREAM_SPIN`]; meanwhile runs
    /// what this worker left for polls that did not come.
    fn more_soon(&self) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < STREAM_SPIN {
            if !self.inbox.is_empty() {
                return true;
            }
            run_left(false);
            std::hint::spin_loop();
        }
        false
    }
}

/// Runs, in this worker's thread, the NICs it left frames for that no poll
/// has taken within [`LEFT_WAIT`] (all of them if `all`: the worker is
/// about to park).
fn run_left(all: bool) {
    loop {
        let due = LEFT.with_borrow_mut(|left| {
            let left = left.as_mut()?;
            left.retain(|(c, _)| !c.inbox.is_empty());
            let i = left
                .iter()
                .position(|(_, at)| all || at.elapsed() >= LEFT_WAIT)?;
            Some(left.swap_remove(i).0)
        });
        // (Outside the borrow: the NIC's turn may deliver frames.)
        match due {
            Some(core) => core.run(),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crossbeam_channel::RecvTimeoutError;

    use super::Msg;
    use crate::{Fabric, LiveNic, NicOptions, Port};

    /// `n` RoCEv2 frames back to back, as a port run holds them.
    fn run_of(n: u32) -> Vec<u8> {
        use doorbell_types::{Psn, Qpn};
        use doorbell_wire::{BthOpcode, BthRepr, ExtHeaders, RoceIp, RoceRepr};
        let mut run = Vec::new();
        for k in 0..n {
            let repr = RoceRepr {
                ip: RoceIp::v4([10, 0, 0, 1], [10, 0, 0, 2]),
                src_port: 49152,
                bth: BthRepr::new(BthOpcode::RcSendMiddle, Qpn::new(7), Psn::new(k)),
                ext: ExtHeaders::default(),
            };
            let mut f = Vec::new();
            repr.emit_to_vec(&[k as u8; 256], &mut f).unwrap();
            run.extend_from_slice(&f);
        }
        run
    }

    #[test]
    fn stays_off_the_socket_double_to_their_cap_and_an_arm_starts_them_over() {
        use super::{AWAY_MAX, LEASE, next_stay};
        let mut stay = LEASE;
        let mut stays = vec![stay];
        while stays.len() < 8 {
            stay = next_stay(stay, false);
            stays.push(stay);
        }
        let us = Duration::from_micros;
        assert_eq!(
            stays,
            [
                us(200),
                us(400),
                us(800),
                us(1600),
                us(2000),
                us(2000),
                us(2000),
                us(2000)
            ]
        );
        assert_eq!(AWAY_MAX, us(2000));
        assert_eq!(next_stay(AWAY_MAX, true), LEASE);
        assert_eq!(next_stay(us(400), true), LEASE);
        // Whatever it is given, a stay is never shorter than the first.
        assert_eq!(next_stay(Duration::ZERO, false), LEASE);
    }

    #[test]
    fn a_runs_check_says_which_frames_matched() {
        let whole = run_of(5);
        let len = whole.len();
        let c = super::check_run(&mut whole.clone());
        assert_eq!((c.count, c.end), (5, len));
        assert!(c.all_match());
        assert_eq!(
            (0..5).map(|k| c.matched(k)).collect::<Vec<_>>(),
            [Some(true); 5]
        );
        assert_eq!(c.matched(5), None);
        // A payload byte of the third frame changed, and bytes after the
        // last frame that hold none.
        let mut bad = whole.clone();
        bad[2 * len / 5 + 100] ^= 1;
        bad.extend_from_slice(&[0u8; 10]);
        let before = bad.clone();
        let c = super::check_run(&mut bad);
        assert_eq!((c.count, c.end), (5, len));
        assert!(!c.all_match());
        let matched: Vec<_> = (0..5).map(|k| c.matched(k)).collect();
        assert_eq!(
            matched,
            [Some(true), Some(true), Some(false), Some(true), Some(true)]
        );
        assert_eq!(bad, before, "the frames are as they came");
        // Past the frames a check answers for: checked the long way.
        let mut long = run_of(66);
        let c = super::check_run(&mut long);
        assert_eq!(c.count, 66);
        assert!(!c.all_match());
        assert_eq!(c.matched(63), Some(true));
        assert_eq!(c.matched(64), None);
        // No frame at all.
        let c = super::check_run(&mut [0u8; 10]);
        assert_eq!((c.count, c.end, c.matched(0)), (0, 0, None));
        assert!(c.all_match());
    }

    /// A message whose stop check passed just before the NIC stopped lands
    /// after the stop cleared the inbox: it is dropped with its reply
    /// channel, so its caller hears that the NIC is gone, rather than left
    /// for a turn that never comes, its caller waiting for ever.
    #[test]
    fn a_message_queued_as_the_nic_stops_is_dropped_not_stranded() {
        let fabric = Fabric::new();
        let port = Port::Fabric(&fabric);
        let nic = LiveNic::start_with("stop-race", [10, 77, 0, 1], port, NicOptions::default())
            .expect("a NIC");
        let core = nic.core.clone();
        core.stop();
        // Where the race leaves it: past the check, queued after the stop.
        let (tx, rx) = crossbeam_channel::bounded(1);
        core.push(Msg::Counters(None, tx));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).map(|_| ()),
            Err(RecvTimeoutError::Disconnected),
            "the caller hears the NIC is gone"
        );
        assert!(core.inbox.is_empty());
    }

    /// A frame from another NIC of the process is taken at the reading of
    /// the clock its sender's turn took, before this NIC's lock; a turn of
    /// this NIC's may have read the clock since. The device's time then
    /// stays where that turn left it rather than go back.
    #[test]
    fn a_turn_at_an_older_reading_of_the_clock_keeps_the_device_time() {
        let fabric = Fabric::new();
        let port = Port::Fabric(&fabric);
        let nic = LiveNic::start_with("clock", [10, 77, 0, 2], port, NicOptions::default())
            .expect("a NIC");
        let core = nic.core.clone();
        let older = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let ask = |clock| {
            let (tx, rx) = crossbeam_channel::bounded(1);
            core.submit_at(Msg::Counters(None, tx), clock);
            rx.recv_timeout(Duration::from_secs(5)).expect("counters");
            core.engine.lock().expect("the NIC's state").clock
        };
        let last = ask(None);
        assert!(last > older);
        assert_eq!(ask(Some(older)), last, "the device's time did not go back");
        let newer = std::time::Instant::now();
        assert_eq!(ask(Some(newer)), newer, "a later reading is taken");
    }
}
