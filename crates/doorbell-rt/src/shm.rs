//! The shared-memory port: RoCEv2 frames between NICs of one host without
//! the kernel's UDP stack.
//!
//! # Model
//! A NIC with a UDP port also listens on an abstract Unix socket named
//! after its address, `doorbell-roce/<a.b.c.d>`: the host's rendezvous.
//! Abstract names belong to a network namespace, as addresses do, so the
//! NICs that find each other this way are exactly those of one host; in
//! two namespaces (two hosts joined by a veth pair) they find nothing and
//! keep to UDP.
//!
//! Each direction between two NICs is a [`ring::Ring`] made by its sender:
//! the first frame a NIC sends to an address it has not met connects to
//! that name (nobody listening: the address is another host's, and UDP
//! carries the frame, asked again after [`RETRY`]). The sender makes a
//! sealed memfd with an empty ring and a pipe for that connection (its
//! bell, whose write end the sender keeps), and sends the ring and the
//! bell's read end with its own address.
//! From then on frames to
//! that address go into the ring, the same bytes a UDP port would carry
//! (IPv4, UDP, BTH ... ICRC), after the fault relay if there is one; the
//! receiver takes them out and hands them to its NIC like any datagram, so
//! the ICRC is checked, counters count and faults apply. A full ring holds
//! the sender back, as a lossless link's pause would: for as long as its
//! receiver keeps taking frames (up to [`FULL_WAIT_MAX`] for one frame),
//! and [`FULL_WAIT`] more once it stops.
//! Then the frame is dropped, as a congested link would, and until the
//! receiver moves again every frame for that ring is dropped at once, so
//! a stopped or hung peer costs its senders [`FULL_WAIT`] once, not per
//! frame; after a wait of [`FULL_WAIT_MAX`] (a receiver that moves, but
//! never frees room for the frame), until it has taken half a ring.
//! A receiver whose NIC stops marks its rings closed, and a sender that
//! finds the mark asks the rendezvous again before its next frame; it also
//! looks whether its receiver hung up every [`LIVENESS`], and before the
//! first frame after [`IDLE`] without one (a process killed before its NIC
//! stopped). So a process that exits and another that takes its address
//! (a restarted server, a server's child for its next client) get their
//! frames from the first, not lost into the old ring.
//!
//! The receiver's thread takes frames while they come, spins for
//! [`crate::NicOptions::shm_spin`] after the last one, then parks: it marks every ring parked,
//! looks once more, and sleeps on its bell, which a sender rings only if
//! it finds the mark. A thread that polls an empty CQ takes frames too
//! ([`ShmPort::progress`]), when the receiver thread is not at it.
//!
//! # Trust
//! A peer reaches this process only through rings: it can put frames in
//! them, never bytes into registered memory, and every frame is parsed as
//! untrusted, as one from the wire. A frame whose IPv4 addresses are not
//! the ring's two ends is dropped and counted: a ring carries frames from
//! the one address its hello claimed, and to this NIC only. (Nothing
//! checks that claim, as nothing checks a datagram's source address on
//! the host's loopback: a process of the same user may claim any.) A ring
//! whose positions make no sense, or whose peer hangs up, ends that one
//! connection. A receiver's
//! closed mark is believed without question: at worst its sender asks the
//! rendezvous again. Only a process of the same user is admitted
//! (`SO_PEERCRED`), and a sender talks only to a rendezvous that a
//! process of its own user listens at (whoever binds an abstract name
//! first holds it), and waits [`WELCOME_WAIT`] at most for its answer. A
//! NIC takes frames from [`MAX_RINGS`] rings at most, and only a ring in
//! a tmpfs file sealed against shrinking (a memfd): no peer can make the
//! mapping fault. Each connection has its own bell, a pipe the sender
//! makes:
//! - the sender keeps the write end to itself, non-blocking, and a copy
//!   of the read end: a receiver can make it neither blocking nor
//!   readerless, so a ring never holds its sender nor raises SIGPIPE in
//!   it (a bell full of rings not emptied is rung already);
//! - the receiver takes only the read end of a pipe with a writer whose
//!   reads honour `RWF_NOWAIT` (not a file, socket or eventfd, which
//!   poll as always ready or may block), and empties it with reads that
//!   cannot block, a bounded number a turn: a peer that fills its bell or
//!   makes it blocking (it may keep the file) reaches no other peer and
//!   cannot hold the receiver thread. A bell whose writer is gone ends
//!   its ring, which would otherwise poll ready for ever.
//!
//! A ring is measured only once its seal is checked, its first position
//! must be on the records' grid, and every record taken counts toward a
//! turn's batch, kept or dropped.

#[allow(unsafe_code)]
mod os;
#[allow(unsafe_code)]
mod ring;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use doorbell_device::Frame;
use memmap2::{MmapOptions, MmapRaw};

use crate::engine::Core;
use crate::fault::Sink;
use crate::inbox::Msg;
use crate::udp::UdpSink;

use ring::{Fault, Ring};

/// Bytes of a ring's data area: 256 frames of a 4096-byte MTU.
const RING_BYTES: u64 = 1 << 20;
/// How long a sender waits for room in a full ring before it drops.
const FULL_WAIT: Duration = Duration::from_millis(20);
/// The longest one frame waits for room, however its receiver moves.
const FULL_WAIT_MAX: Duration = Duration::from_millis(200);
/// How long an address with no NIC of this host is left to UDP.
const RETRY: Duration = Duration::from_secs(1);
/// How often a sender looks whether its receiver hung up.
const LIVENESS: Duration = Duration::from_millis(100);
/// A ring that carried nothing for this long is looked at before its next
/// frame: a peer that exited meanwhile may have come back at its address
/// (a restarted process, a server's child for the next test), and a frame
/// put into the old ring would be lost.
const IDLE: Duration = Duration::from_millis(1);
/// How long the receiver thread sleeps at most when parked.
const PARK: Duration = Duration::from_millis(200);
/// How long a peer that connected to the rendezvous has to send its hello.
const HANDSHAKE: Duration = Duration::from_millis(100);
/// Most connections that wait for their hello at once.
const MAX_HANDSHAKES: usize = 16;
/// Most rings a NIC takes frames from at once. A peer that connects again
/// and again holds at most this many pairs of the process's descriptors
/// (a ring's connection and bell) and mappings; past it a sender is
/// refused (counted) and keeps to UDP, unless it claims the address of a
/// ring held already, which its ring then replaces.
const MAX_RINGS: usize = 64;
/// How long a sender waits for the welcome of the rendezvous it connected
/// to. The sender waits in the NIC's turn, with the NIC held: a NIC of
/// this host answers within microseconds (its receiver thread polls the
/// rendezvous) when that thread is free, but the thread also runs its
/// NIC's turns, which may wait up to [`FULL_WAIT_MAX`] for room in a
/// full ring, or in a connect of their own. A listener that does not
/// answer (a process stopped in a debugger, or one that holds the name
/// and stays silent) costs each try this long, and is tried again after
/// [`RETRY`], then twice as late each time it stays silent, up to
/// [`SILENT_RETRY_MAX`].
const WELCOME_WAIT: Duration = Duration::from_millis(500);
/// The longest a sender leaves a silent rendezvous before it tries it
/// again (for UDP meanwhile): a wait of [`WELCOME_WAIT`] every 64 s then
/// costs the NIC under 1% of its time.
const SILENT_RETRY_MAX: Duration = Duration::from_secs(64);
/// How long a rendezvous whose accept failed for want of a descriptor or
/// memory is left alone before the next try.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a thread whose CQ poll found nothing waits in the rings
/// before it returns to poll again (none where the process may run on
/// one CPU only: [`Waits::new`]).
const CALLER_SPIN: Duration = Duration::from_micros(5);
/// Frames taken from one ring per turn.
const BATCH: usize = 64;
/// How long the receiver thread tries the rings' lock before it waits for
/// it ([`spin_lock`]): a caller holds it for [`CALLER_SPIN`] and a drain.
const SPIN_LOCK: Duration = Duration::from_micros(100);
/// How long a sender that found its receiver parked waits for one of the
/// receiver's own threads to come back to its rings (a program that polls
/// its CQ, between two polls) before it rings the bell.
const BELL_WAIT: Duration = Duration::from_micros(2);
/// A ring whose sender's waits last paid off this many times in a row
/// has its sender wait again; each wait that did not halves that credit.
const BELL_CREDIT: u8 = 8;
/// A ring without credit has its sender wait once every this many bells,
/// to see whether the receiver has begun to poll.
const BELL_PROBE: u32 = 64;
/// A sender's hello, with its ring and its bell's read end: a NIC of an
/// earlier build (whose receiver made the bell) refuses it, and its
/// sender goes through UDP.
const HELLO: &[u8; 8] = b"DBHELLO2";
const WELCOME: &[u8; 8] = b"DBWELCO2";

/// The sockets of every shared-memory port of the process (the
/// rendezvous listeners and the connections), for a child after `fork()`
/// to let go of the parent's ([`each_socket`]). A slot holds a descriptor
/// or -1; beyond 256 sockets the rest are not tracked, and a child keeps
/// its copies of those.
static SOCKETS: [AtomicI32; 256] = [const { AtomicI32::new(-1) }; 256];

/// A socket of the port, tracked in [`SOCKETS`] while it is open.
struct Tracked<T: AsRawFd>(T);

impl<T: AsRawFd> Tracked<T> {
    fn new(t: T) -> Self {
        let fd = t.as_raw_fd();
        let _ = SOCKETS.iter().find(|s| {
            s.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        Self(t)
    }
}

impl<T: AsRawFd> Drop for Tracked<T> {
    fn drop(&mut self) {
        let fd = self.0.as_raw_fd();
        let _ = SOCKETS.iter().find(|s| {
            s.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
    }
}

impl<T: AsRawFd> std::ops::Deref for Tracked<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Hands every tracked socket to `f` and forgets it: for a `fork()` child
/// handler, which must not allocate (nothing here does).
pub(crate) fn each_socket(mut f: impl FnMut(std::os::fd::RawFd)) {
    for s in &SOCKETS {
        let fd = s.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            f(fd);
        }
    }
}

/// Whether `frame`, as the rings carry it (IPv4, UDP, BTH), is a request:
/// not an RC response (ACK, atomic ACK, READ response), nor too short to
/// say.
fn is_request(frame: &[u8]) -> bool {
    let ihl = usize::from(frame.first().map_or(0, |b| b & 0x0f)) * 4;
    frame
        .get(ihl + 8)
        .is_some_and(|&op| !doorbell_wire::BthOpcode::from(op).is_response())
}

/// The rendezvous name of the NIC at `ipv4` (an abstract socket name).
fn rendezvous_name(ipv4: [u8; 4]) -> String {
    let [a, b, c, d] = ipv4;
    format!("doorbell-roce/{a}.{b}.{c}.{d}")
}

/// The rendezvous of the NIC at `ipv4`.
fn rendezvous(ipv4: [u8; 4]) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(rendezvous_name(ipv4))
}

/// What the shared-memory port counted.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) tx_frames: AtomicU64,
    pub(crate) tx_full_drops: AtomicU64,
    pub(crate) tx_stalls: AtomicU64,
    pub(crate) rx_frames: AtomicU64,
    pub(crate) rx_dropped: AtomicU64,
    pub(crate) peers_out: AtomicU64,
    pub(crate) peers_in: AtomicU64,
    pub(crate) peers_refused: AtomicU64,
    pub(crate) rings_broken: AtomicU64,
    pub(crate) bells: AtomicU64,
    pub(crate) bells_spared: AtomicU64,
    pub(crate) lingers_paid: AtomicU64,
}

/// Adds `n` to a counter that one thread at a time writes (its one owner,
/// or under a lock): a load and a store. A `fetch_add` is a locked
/// instruction, which waits until every store before it has left the core:
/// after a push into a ring, until the ring's lines have left the core
/// that polls them.
fn add_one_writer(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// One inbound ring and who feeds it.
struct InRing {
    ring: Ring,
    peer: [u8; 4],
    conn: Tracked<UnixStream>,
    /// The read end of the pipe this peer rings when the receiver thread
    /// parked, made and sent by the peer: one a connection, so that what
    /// a peer does to its bell (fill it, make it blocking: it may keep a
    /// copy of this end) touches no other peer's.
    bell: File,
    /// The bell has no writer left, or failed: the ring goes once it is
    /// empty, as one whose peer hung up (a dead pipe polls readable for
    /// ever).
    bell_gone: bool,
}

/// The receiving side's state: what the receiver thread and empty polls
/// share, one at a time.
struct Inbound {
    local: [u8; 4],
    /// The rendezvous; `None` once the port stopped, so that the name is
    /// free at once and a sender that asks finds nobody, rather than a
    /// listener that no longer answers.
    listener: Option<Tracked<UnixListener>>,
    bell: File,
    rings: Vec<InRing>,
    /// The receiver thread has marked the rings parked and sleeps.
    parked: bool,
    /// Whether a caller that took frames waits for more ([`put_back`]).
    linger: WaitCredit,
    /// And for how long, and how long a caller that found nothing waits
    /// in the rings.
    waits: Waits,
    /// A drain since [`ShmPort::look`] began took a request (the peer's
    /// SEND or WRITE, say): its answer is here, nothing to wait for.
    took_requests: bool,
    /// Until when the rendezvous is not listened to: the last accept
    /// failed for want of a descriptor or memory, and the connection
    /// waiting there keeps the listener readable.
    accept_after: Option<Instant>,
}

/// The receiving half of a NIC's shared-memory port.
pub(crate) struct ShmPort {
    inbound: Arc<Mutex<Inbound>>,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    rx: Option<JoinHandle<()>>,
    /// To wake the receiver thread when it is told to stop.
    bell: File,
    /// The port's waits, for the receiver thread ([`Waits::receiver`]).
    waits: Waits,
}

/// How long the port's threads look for frames that have not come yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waits {
    /// The receiver thread, after its last frame
    /// ([`crate::NicOptions::shm_spin`]).
    after_frame: Duration,
    /// The receiver thread, after a frame of a stream: `after_frame`, or
    /// [`crate::stream::SPIN`] if longer.
    in_stream: Duration,
    /// A caller that took frames, for more ([`crate::NicOptions::shm_linger`]).
    linger: Duration,
    /// A caller that found nothing ([`CALLER_SPIN`]).
    caller: Duration,
}

impl Waits {
    /// The waits of a port with `spin` and `linger`
    /// ([`crate::NicOptions`]); none at all if `alone`, the process
    /// being able to run on one CPU only ([`doorbell_host::one_cpu`]):
    /// there, the peer process that would send the frame runs only once
    /// this one's thread stops looking (decision record 0057).
    fn new(alone: bool, spin: Duration, linger: Duration) -> Self {
        if alone {
            return Self {
                after_frame: Duration::ZERO,
                in_stream: Duration::ZERO,
                linger: Duration::ZERO,
                caller: Duration::ZERO,
            };
        }
        Self {
            after_frame: spin,
            in_stream: spin.max(crate::stream::SPIN),
            linger,
            caller: CALLER_SPIN,
        }
    }

    /// How long the receiver thread looks for the next frame after its
    /// last: [`Self::in_stream`] in a stream (`streak` turns in a row found
    /// frames), and while it is `answering` requests that no program
    /// polls the NIC's CQ for (not `polled()`, asked only then: a READ's
    /// target, which only answers). The thread then takes the next frame
    /// itself, and a wake-up for it would cost more than the frame's whole
    /// round trip (decision record 0058). Otherwise [`Self::after_frame`].
    fn receiver(&self, streak: u32, answering: bool, polled: impl FnOnce() -> bool) -> Duration {
        if streak >= crate::stream::TURNS || (answering && !polled()) {
            self.in_stream
        } else {
            self.after_frame
        }
    }
}

impl ShmPort {
    /// Listens at the rendezvous name of `local`. `None` if the name is
    /// taken or the host offers no shared memory: the NIC keeps to UDP.
    /// `spin` and `linger`: [`crate::NicOptions::shm_spin`] and
    /// [`crate::NicOptions::shm_linger`] ([`Waits::new`]).
    pub(crate) fn listen(
        local: [u8; 4],
        stats: Arc<Stats>,
        spin: Duration,
        linger: Duration,
    ) -> Option<Self> {
        let waits = Waits::new(doorbell_host::one_cpu(), spin, linger);
        let listener = UnixListener::bind_addr(&rendezvous(local).ok()?).ok()?;
        listener.set_nonblocking(true).ok()?;
        let bell = os::eventfd().ok()?;
        let wake = bell.try_clone().ok()?;
        Some(Self {
            inbound: Arc::new(Mutex::new(Inbound {
                local,
                listener: Some(Tracked::new(listener)),
                bell,
                rings: Vec::new(),
                parked: false,
                linger: WaitCredit::default(),
                waits,
                took_requests: false,
                accept_after: None,
            })),
            stats,
            stop: Arc::default(),
            rx: None,
            bell: wake,
            waits,
        })
    }

    /// Starts the receiver thread, feeding `core`.
    pub(crate) fn start_rx(&mut self, name: &str, core: Arc<Core>) -> io::Result<()> {
        let (inbound, stats, stop) = (self.inbound.clone(), self.stats.clone(), self.stop.clone());
        let bell = self.bell.try_clone()?;
        let waits = self.waits;
        self.rx = Some(
            std::thread::Builder::new()
                .name(format!("doorbell-{name}-shm"))
                .spawn(move || rx_loop(&inbound, &bell, &stats, &stop, &core, waits))?,
        );
        Ok(())
    }

    /// Takes what the rings hold for the NIC, in the caller's thread, if
    /// the receiver thread is not doing so; tells whether it took any.
    pub(crate) fn progress(&self, core: &Core) -> bool {
        let (got, marks_down, responses_only) = self.look(core);
        if got > 0 {
            // In the inbox, in ring order; run with the rings' lock let go,
            // so that the receiver thread, or another caller, may take
            // frames meanwhile (a peer held back by a full ring here rings
            // the receiver thread whatever the marks say).
            // The marks of a sleeping receiver thread stay down while this
            // thread runs what it took: the answer a peer sends meanwhile
            // (the next WRITE of a ping-pong, which its program polls
            // memory for) is taken below, without a wake-up.
            core.run();
        }
        if marks_down {
            put_back(&self.inbound, core, &self.stats, responses_only);
        }
        got > 0
    }

    /// [`Self::progress`]'s part under the rings' lock: queues what the
    /// rings hold in `core`'s inbox; returns how many frames, whether it
    /// left a sleeping receiver thread's marks down ([`put_back`]), and
    /// whether they were only responses (ACKs, READ responses: the peer's
    /// program has yet to answer).
    fn look(&self, core: &Core) -> (usize, bool, bool) {
        let Ok(mut inb) = self.inbound.try_lock() else {
            return (0, false, false);
        };
        if inb.rings.is_empty() {
            // No NIC of this host talks to this one: nothing to wait for.
            return (0, false, false);
        }
        inb.took_requests = false;
        if !inb.parked {
            return (inb.drain(core, &self.stats), false, false);
        }
        // The receiver thread sleeps: while this thread looks, senders
        // need not ring (a wake-up that would find nothing, and take a
        // core from a thread that works); then the marks go back, and
        // whatever came meanwhile, unrung, is taken here.
        inb.set_parked(false);
        let mut got = inb.drain(core, &self.stats);
        // A caller that found nothing would only come back: it waits here
        // a moment, unrung, for what a peer is about to send.
        let start = Instant::now();
        while got == 0 && start.elapsed() < inb.waits.caller {
            // (Spaced as `linger_for`'s looks are, and for its reason.)
            for _ in 0..3 {
                std::hint::spin_loop();
            }
            got += inb.drain(core, &self.stats);
        }
        if got > 0 {
            return (got, true, !inb.took_requests);
        }
        (inb.mark_parked(core, &self.stats), false, false)
    }

    /// A handle for [`Poster::around`].
    pub(crate) fn poster(&self) -> Poster {
        Poster {
            inbound: self.inbound.clone(),
            stats: self.stats.clone(),
        }
    }

    /// Stops the receiver thread, closes the rendezvous and marks the
    /// rings closed: each sender then asks the rendezvous again before its
    /// next frame, and finds a NIC that took the address meanwhile (a
    /// restarted process) or nobody, instead of putting frames nobody takes
    /// into the old ring until it finds its receiver hung up. A port whose
    /// thread was forgotten (a child after `fork()`) leaves the parent's
    /// rendezvous and rings as they are.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.rx.take() {
            ring(&self.bell);
            let _ = t.join();
            let mut inb = self.inbound.lock().unwrap_or_else(|e| e.into_inner());
            // The name first: a sender that sees a mark must not find the
            // old listener, which would take its hello and never answer.
            inb.listener = None;
            for r in &inb.rings {
                r.ring.close();
            }
        }
    }

    /// Forgets the receiver thread: in a child after `fork()` it is the
    /// parent's.
    pub(crate) fn abandon(&mut self) {
        std::mem::forget(self.rx.take());
    }
}

/// What an application thread that posts holds of the port: while it is
/// inside the NIC, a frame a peer sends needs no bell (the thread takes
/// it on its way out).
pub(crate) struct Poster {
    inbound: Arc<Mutex<Inbound>>,
    stats: Arc<Stats>,
}

impl Poster {
    /// Runs `f` (a doorbell, in the caller's thread) with the receiver's
    /// marks cleared if it sleeps; then puts them back and takes what came
    /// meanwhile, unrung. A forked child's copy only runs `f`: the marks
    /// and the rings are the parent's, in memory both map, and taking
    /// frames there would take the parent's.
    pub(crate) fn around(&self, core: &Core, f: impl FnOnce()) {
        if core.is_forked_copy() {
            return f();
        }
        let held = match self.inbound.try_lock() {
            Ok(inb) if inb.parked && !inb.rings.is_empty() => {
                inb.set_parked(false);
                true
            }
            _ => false,
        };
        f();
        if held {
            put_back(&self.inbound, core, &self.stats, false);
        }
    }
}

/// Rounds in which [`put_back`] takes and runs, marks down, what came
/// while they were down, before it leaves them up.
const PUT_BACK_ROUNDS: u32 = 4;
/// Times [`Inbound::mark_parked`] finds frames after putting the marks up
/// before it leaves the rest to the receiver thread.
const MARK_ROUNDS: u32 = 8;

/// Puts back the marks of a sleeping receiver thread that a caller took
/// down, and takes and runs, marks down, whatever came meanwhile, for at
/// most [`PUT_BACK_ROUNDS`] rounds: the last round leaves the marks up,
/// so that a peer's steady stream goes to the receiver thread instead of
/// keeping this caller from returning. Nothing to do if the thread woke
/// meanwhile (the marks are its own), or if another thread is at the
/// rings: the receiver thread, awake, or a caller, who puts them back
/// itself.
///
/// With `linger` (a poll took only responses and ran them: the ACK of a
/// ping-pong's last message, say), the first round first waits up to
/// [`crate::NicOptions::shm_linger`] for more, marks down, where such
/// waits paid off lately ([`Inbound::linger`]). A program that polls memory for its peer's
/// WRITE, as `ib_write_lat` does after the poll that returned its own
/// WRITE's completion, then finds the WRITE there: this thread took it,
/// where the peer would have rung the receiver thread awake for it.
/// A poll that took a request does not wait: its answer (the peer's
/// next message) may be what this thread's program sends next.
fn put_back(inbound: &Mutex<Inbound>, core: &Core, stats: &Stats, linger: bool) {
    for round in 1..=PUT_BACK_ROUNDS {
        let got = {
            let Ok(mut inb) = inbound.try_lock() else {
                return;
            };
            if !inb.parked {
                return;
            }
            if round == 1 && linger && !inb.waits.linger.is_zero() && inb.linger.wait() {
                let got = inb.linger_for(core, stats);
                if got > 0 {
                    drop(inb);
                    core.run();
                    continue;
                }
            }
            if round == PUT_BACK_ROUNDS {
                let got = inb.mark_parked(core, stats);
                drop(inb);
                if got > 0 {
                    core.run();
                }
                return;
            }
            // Up, and nothing came: the only way out but the last round.
            let Some(got) = inb.up_or_take(core, stats) else {
                return;
            };
            got
        };
        // Nothing taken (what there was, the drain dropped): the marks are
        // still down, and the next round puts them up and looks again.
        if got > 0 {
            core.run();
        }
    }
}

impl Drop for ShmPort {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inbound {
    /// [`Self::drain`], telling also whether any frame taken was a
    /// request (a peer's SEND, WRITE, READ or atomic), which this NIC
    /// answers.
    fn drain_requests(&mut self, core: &Core, stats: &Stats) -> (usize, bool) {
        self.took_requests = false;
        let got = self.drain(core, stats);
        (got, self.took_requests)
    }

    /// Takes up to [`BATCH`] frames from each ring into the NIC's inbox
    /// (queued in ring order, not run: the caller runs the NIC,
    /// [`Core::run`], once it let the rings' lock go); returns how many.
    /// Drops the rings that broke.
    fn drain(&mut self, core: &Core, stats: &Stats) -> usize {
        // A NIC behind on what it was given takes no more for now: the
        // rings hold the frames, and their senders back.
        if core.backlogged() {
            return 0;
        }
        let mut total = 0;
        let mut requests = false;
        let local = self.local;
        self.rings.retain_mut(|r| {
            let mut frames = Vec::new();
            let mut alive = true;
            // Records taken, dropped ones included: a peer that keeps its
            // ring full of frames to be dropped still gets one batch a
            // turn, and the other rings theirs.
            let mut popped = 0;
            // A buffer only for a frame that is there (a poll that finds
            // nothing looks thousands of times a millisecond); a ring whose
            // positions broke has "data" too, and `pop` tells.
            while popped < BATCH && r.ring.has_data() {
                let mut buf = crate::buffers::buffer(0);
                match r.ring.pop(&mut buf) {
                    Ok(true) => {
                        popped += 1;
                        // The ring's two ends, and nothing else, in the IPv4
                        // header (src at 12, dst at 16).
                        if buf.len() >= 20 && buf[12..16] == r.peer && buf[16..20] == local {
                            requests |= is_request(&buf);
                            if frames.capacity() == 0 {
                                frames = crate::buffers::frame_list();
                            }
                            frames.push(buf);
                        } else {
                            stats.rx_dropped.fetch_add(1, Ordering::Relaxed);
                            crate::buffers::recycle(buf);
                        }
                    }
                    Ok(false) => {
                        crate::buffers::recycle(buf);
                        break;
                    }
                    Err(_) => {
                        stats.rings_broken.fetch_add(1, Ordering::Relaxed);
                        alive = false;
                        break;
                    }
                }
            }
            total += frames.len();
            if !frames.is_empty() {
                // Written only here, under the rings' lock.
                add_one_writer(&stats.rx_frames, frames.len() as u64);
                core.enqueue(Msg::Frames(frames));
            }
            alive
        });
        self.took_requests |= requests;
        total
    }

    /// Takes up to `room` connections waiting at the rendezvous, for
    /// [`handshake`] once the rings' lock is let go. If the process is out
    /// of descriptors (or memory), the connection stays queued and is tried
    /// again after [`ACCEPT_BACKOFF`]; the peer meanwhile reaches this NIC
    /// over UDP.
    fn callers(&mut self, room: usize) -> Vec<Tracked<UnixStream>> {
        let mut got = Vec::new();
        let Some(listener) = self.listener.as_ref().filter(|_| self.listening()) else {
            return got;
        };
        self.accept_after = None;
        while got.len() < room {
            match listener.accept() {
                Ok((s, _)) => got.push(Tracked::new(s)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
                Err(_) => {
                    self.accept_after = Some(Instant::now() + ACCEPT_BACKOFF);
                    return got;
                }
            }
        }
        got
    }

    /// How long until the rendezvous is listened to again (zero if it is).
    fn listen_in(&self) -> Duration {
        self.accept_after.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
        })
    }

    /// Whether the rendezvous is listened to now ([`Self::accept_after`]).
    fn listening(&self) -> bool {
        self.accept_after.is_none_or(|t| Instant::now() >= t)
    }

    /// Drops the rings whose peers hung up (or whose bells died), once
    /// they are empty: what a peer sent just before it went away (a DREQ
    /// from its exit handler) is still taken.
    fn reap(&mut self) {
        self.rings
            .retain(|r| r.ring.has_data() || !(r.bell_gone || os::hung_up(&r.conn)));
    }

    /// Waits, marks down, up to [`Waits::linger`] for a frame, and
    /// takes what came; notes in [`Self::linger`] whether anything did.
    fn linger_for(&mut self, core: &Core, stats: &Stats) -> usize {
        let start = Instant::now();
        let mut came = self.any_data();
        while !came && start.elapsed() < self.waits.linger {
            // Four pauses (about 45 ns) between looks. The frame waited
            // for is on the critical path of a ping-pong, but a look
            // (which also fetches the lines of the next record) more often
            // than that made the round trip slower, not faster: it takes
            // back, shared, the lines the peer is writing, whose stores
            // then wait longer to leave its core (docs/benchmarks.md).
            for _ in 0..4 {
                std::hint::spin_loop();
            }
            came = self.any_data();
        }
        self.linger.waited(came);
        if !came {
            return 0;
        }
        stats.lingers_paid.fetch_add(1, Ordering::Relaxed);
        self.drain(core, stats)
    }

    /// Puts back the marks of a parked receiver thread that a caller
    /// cleared while it looked, then takes whatever came meanwhile (a
    /// sender that found no mark rang no bell); returns how many frames.
    /// After [`MARK_ROUNDS`] looks that found frames, it rings the
    /// receiver thread for the rest instead.
    fn mark_parked(&mut self, core: &Core, stats: &Stats) -> usize {
        let mut got = 0;
        for _ in 0..MARK_ROUNDS {
            match self.up_or_take(core, stats) {
                None => return got,
                Some(n) => got += n,
            }
        }
        // Frames keep coming: the marks go up, and the receiver thread is
        // rung to take the rest, so that this caller gets back to its CQ.
        self.set_parked(true);
        ring(&self.bell);
        got
    }

    /// Puts the marks up and looks once more: `None` if nothing came
    /// (the marks stay up); otherwise takes it, marks down, and says how
    /// many frames (0 if the drain dropped what it found).
    fn up_or_take(&mut self, core: &Core, stats: &Stats) -> Option<usize> {
        self.set_parked(true);
        fence(Ordering::SeqCst);
        if !self.any_data() {
            return None;
        }
        self.set_parked(false);
        Some(self.drain(core, stats))
    }

    fn set_parked(&self, parked: bool) {
        for r in &self.rings {
            r.ring.set_parked(parked);
        }
    }

    fn any_data(&self) -> bool {
        self.rings.iter().any(|r| r.ring.has_data())
    }
}

/// The receiver thread. It never sleeps on the rings' lock while a caller
/// holds it to look at the rings ([`ShmPort::progress`]), which would make
/// the caller pay for waking it on its way out: in its turns it only tries
/// the lock (the caller is taking the frames), and woken by a bell it
/// tries in a loop ([`spin_lock`]) and then looks.
fn rx_loop(
    inbound: &Mutex<Inbound>,
    bell: &File,
    stats: &Stats,
    stop: &AtomicBool,
    core: &Core,
    waits: Waits,
) {
    let lock = || inbound.lock().unwrap_or_else(|e| e.into_inner());
    let mut last = Instant::now();
    let mut turns = 0u32;
    // Turns in a row, since the last wake-up, that found frames: a stream
    // (frames come faster than a wake-up) has the thread spin for
    // crate::stream::SPIN between them rather than be rung for each.
    let mut streak = 0u32;
    // The last frames taken held a request: where no program polls the
    // NIC's CQ, this thread answers for the NIC (a READ's target) and
    // waits for the next as in a stream ([`Waits::receiver`]).
    let mut answering = false;
    let mut fds = Vec::new();
    let mut ready = Vec::new();
    let mut shaking = Handshakes::default();
    while !stop.load(Ordering::Acquire) {
        // The rings keep their frames until the NIC caught up.
        if core.waited_out_backlog() {
            continue;
        }
        turns = turns.wrapping_add(1);
        let (got, requests) = match inbound.try_lock() {
            Ok(mut inb) => {
                let look = turns.is_multiple_of(1024);
                let callers = if look {
                    inb.callers(shaking.room())
                } else {
                    Vec::new()
                };
                let (got, requests) = inb.drain_requests(core, stats);
                drop(inb);
                if look {
                    shaking.go(callers, None, inbound, stats);
                }
                (got, requests)
            }
            // A caller is taking what the rings hold.
            Err(TryLockError::WouldBlock) => (0, false),
            Err(TryLockError::Poisoned(e)) => e.into_inner().drain_requests(core, stats),
        };
        if got > 0 {
            core.run();
            last = Instant::now();
            streak = streak.saturating_add(1);
            answering = requests;
            continue;
        }
        let wait = waits.receiver(streak, answering, || core.polled_lately());
        if last.elapsed() < wait {
            std::hint::spin_loop();
            continue;
        }
        streak = 0;
        // Park: mark, look once more, sleep on the bell, the rendezvous
        // and the peers' connections (a hang-up is readable).
        let rings: usize;
        let park_for = {
            let mut inb = lock();
            inb.set_parked(true);
            fence(Ordering::SeqCst);
            if inb.any_data() {
                inb.set_parked(false);
                continue;
            }
            inb.parked = true;
            fds.clear();
            fds.push(inb.bell.as_raw_fd());
            // poll() skips a negative descriptor: the rendezvous is left
            // out during its backoff, and while as many handshakes as are
            // allowed wait (the connection stays queued meanwhile).
            let listening = inb.listening() && shaking.room() > 0;
            fds.push(match &inb.listener {
                Some(l) if listening => l.as_raw_fd(),
                _ => -1,
            });
            fds.extend(inb.rings.iter().map(|r| r.conn.as_raw_fd()));
            fds.extend(inb.rings.iter().map(|r| r.bell.as_raw_fd()));
            rings = inb.rings.len();
            fds.extend(shaking.fds());
            let park = match inb.listen_in() {
                Duration::ZERO => PARK,
                backoff => backoff,
            };
            shaking.park_for(park)
        };
        os::poll_readable(&fds, park_for, &mut ready);
        os::clear_own_bell(bell);
        // Rung while a caller may be at the rings: its last look may be
        // behind it already (the marks back up, nothing seen), and the
        // frame this bell is for pushed after it. Wait for the caller to
        // leave, without making it pay for waking this thread on its way
        // out (nobody waits on the lock).
        let mut inb = spin_lock(inbound);
        inb.parked = false;
        inb.set_parked(false);
        // A peer rang its bell: every ring's is emptied (the rings may
        // have changed since the poll, so not by its place in it), each
        // read unable to block whatever the peer did to the file. A dead
        // bell ends its ring.
        let bells = ready.get(2 + rings..2 + 2 * rings).unwrap_or_default();
        if bells.iter().any(|&r| r) {
            let mut gone = false;
            for r in &mut inb.rings {
                if !os::clear_peer_bell(&r.bell) {
                    r.bell_gone = true;
                    gone = true;
                }
            }
            if gone {
                inb.reap();
            }
        }
        // A connection waits at the rendezvous, or the rendezvous was left
        // out of the poll and its backoff may be over.
        let callers =
            if ready.get(1).copied().unwrap_or(false) || fds.get(1).is_none_or(|&fd| fd < 0) {
                inb.callers(shaking.room())
            } else {
                Vec::new()
            };
        let (got, requests) = if ready.iter().skip(2).take(rings).any(|&r| r) {
            // Take what the rings hold first; a ring that still holds
            // frames stays until a later turn has emptied it.
            let got = inb.drain_requests(core, stats);
            inb.reap();
            got
        } else {
            (0, false)
        };
        drop(inb);
        let shaken = ready.get(2 + 2 * rings..).unwrap_or_default();
        shaking.go(callers, Some(shaken), inbound, stats);
        if got > 0 {
            core.run();
        }
        answering = requests;
        last = Instant::now();
    }
}

/// Connections at the rendezvous whose hello has not come yet, each with
/// the time it has until, kept by the receiver thread: a peer that stalls
/// in its handshake keeps the thread from no frame.
#[derive(Default)]
struct Handshakes(Vec<(Tracked<UnixStream>, Instant)>);

impl Handshakes {
    /// Shakes hands with `callers` and with the connections still waiting:
    /// all of them, or with `ready` (readiness in the order of
    /// [`Self::fds`]) only those that are readable. Drops those whose time
    /// is up, and adds the rings admitted (the rings' lock is not held
    /// while it shakes hands). A ring added while the receiver thread runs has its
    /// mark down, as the thread's others do; the thread marks it with the
    /// rest when it parks.
    fn go(
        &mut self,
        callers: Vec<Tracked<UnixStream>>,
        ready: Option<&[bool]>,
        inbound: &Mutex<Inbound>,
        stats: &Stats,
    ) {
        if callers.is_empty() && self.0.is_empty() {
            return;
        }
        let now = Instant::now();
        let waiting = std::mem::take(&mut self.0);
        let mut rings = Vec::new();
        let fresh = callers.into_iter().map(|s| (s, now + HANDSHAKE, true));
        let again = waiting.into_iter().enumerate().map(|(i, (s, until))| {
            let look = ready.is_none_or(|r| r.get(i).copied().unwrap_or(false));
            (s, until, look)
        });
        for (s, until, look) in again.chain(fresh) {
            if !look {
                if now < until {
                    self.0.push((s, until));
                }
                continue;
            }
            match handshake(s) {
                Ok(Some(r)) => rings.push(r),
                Ok(None) => {}
                Err(s) if now < until => self.0.push((s, until)),
                Err(_) => {}
            }
        }
        if rings.is_empty() {
            return;
        }
        let mut inb = spin_lock(inbound);
        for r in rings {
            // At the limit, a ring from an address that has one already
            // replaces it: its sender made a new one because it found the
            // old one gone (a restarted process, a ring it found broken),
            // and the old one's slot would otherwise be held until this
            // thread parks. Any other is refused: its connection closes
            // unanswered, and its sender keeps to UDP. (Below the limit
            // nothing is replaced: an address is only what a hello
            // claims.)
            let full = inb.rings.len() >= MAX_RINGS;
            let old = full
                .then(|| inb.rings.iter().position(|o| o.peer == r.peer))
                .flatten();
            if full && old.is_none() {
                stats.peers_refused.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // A fresh socket's send buffer is empty: this does not block.
            if os::send_with_fds(&r.conn, WELCOME, &[]).is_err() {
                continue;
            }
            if let Some(i) = old {
                inb.rings.swap_remove(i);
            }
            inb.rings.push(r);
            stats.peers_in.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many more connections may wait for their hello: a peer that
    /// connects again and again holds at most this many of the process's
    /// descriptors.
    fn room(&self) -> usize {
        MAX_HANDSHAKES.saturating_sub(self.0.len())
    }

    /// The descriptors to wait on, in order.
    fn fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        self.0.iter().map(|(s, _)| s.as_raw_fd())
    }

    /// How long a park may last before the first of them runs out of time.
    fn park_for(&self, park: Duration) -> Duration {
        let now = Instant::now();
        self.0
            .iter()
            .map(|(_, until)| until.saturating_duration_since(now))
            .fold(park, Duration::min)
    }
}

/// Takes `m` by trying it in a loop, yielding now and then, and after
/// [`SPIN_LOCK`] by waiting for it: a holder that lets go of a lock
/// nobody waits on makes no system call.
fn spin_lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    let start = Instant::now();
    let mut tries = 0u32;
    loop {
        match m.try_lock() {
            Ok(g) => return g,
            Err(TryLockError::Poisoned(e)) => return e.into_inner(),
            Err(TryLockError::WouldBlock) => {}
        }
        tries = tries.wrapping_add(1);
        if tries.is_multiple_of(64) {
            if start.elapsed() >= SPIN_LOCK {
                return m.lock().unwrap_or_else(|e| e.into_inner());
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A ring to a peer and how to wake it.
struct OutRing {
    ring: Ring,
    conn: Tracked<UnixStream>,
    /// The bell's write end, the sender's alone ([`os::bell_pipe`]).
    bell: File,
    /// The sender's copy of the bell's read end, kept so that the pipe
    /// never loses its last reader (a ring would then raise SIGPIPE).
    bell_read: File,
    checked: Instant,
    /// When a frame last went in.
    used: Instant,
    /// Until when the ring is used without a look ([`Peers::ring`]): the
    /// earlier of [`IDLE`] after the last look and [`LIVENESS`] after the
    /// last check.
    fresh_until: Instant,
    /// The receiver's position when a frame was last dropped because the
    /// ring stayed full: while it has not moved since, frames for the ring
    /// are dropped without waiting.
    stuck_at: Option<u64>,
    /// Whether to wait for the receiver before its bell.
    credit: WaitCredit,
    /// The tries before this ring that gave no working one
    /// ([`Peer::Elsewhere`]'s `strikes`): kept until the receiver takes a
    /// frame.
    strikes: u32,
}

/// Whether to wait, where a wait pays off only when the other side acts
/// in time: a sender for its parked receiver before it rings
/// ([`wake_after_a_wait`]), a caller for its peer's answer
/// ([`put_back`]). After waits that paid off, yes; after waits that did
/// not, only at every [`BELL_PROBE`]th chance.
#[derive(Debug, Default)]
struct WaitCredit {
    /// Waits that paid off lately, up to [`BELL_CREDIT`].
    credit: u8,
    /// Chances passed without a wait, since the last wait.
    unwaited: u32,
}

impl WaitCredit {
    /// Whether to wait at this chance.
    fn wait(&mut self) -> bool {
        if self.credit == 0 {
            self.unwaited += 1;
            if self.unwaited < BELL_PROBE {
                return false;
            }
        }
        self.unwaited = 0;
        true
    }

    /// How the wait went: `spared`, the other side came in time.
    fn waited(&mut self, spared: bool) {
        self.credit = if spared {
            (self.credit + 1).clamp(2, BELL_CREDIT)
        } else {
            self.credit / 2
        };
    }
}

enum Peer {
    Shm(OutRing),
    /// Not a NIC of this host (or it would not talk): UDP, until `retry`.
    /// `strikes`: how many tries in a row found a rendezvous that took the
    /// connection and gave no working ring: that did not answer
    /// ([`WELCOME_WAIT`]), or whose ring was closed before its receiver
    /// took a frame. A refusal between them keeps the count.
    Elsewhere {
        retry: Instant,
        strikes: u32,
    },
}

impl Peer {
    /// Whether it is a NIC of another host not to be asked about again
    /// before `now`.
    fn elsewhere_at(&self, now: Instant) -> bool {
        matches!(self, Peer::Elsewhere { retry, .. } if now < *retry)
    }

    /// Not to be asked about again until [`RETRY`] after `now`.
    fn elsewhere(now: Instant) -> Self {
        Peer::Elsewhere {
            retry: now + RETRY,
            strikes: 0,
        }
    }

    /// Not to be asked about again until later the more `strikes` there
    /// are: [`RETRY`] after `now` for one, twice as late for each more, up
    /// to [`SILENT_RETRY_MAX`].
    fn struck(now: Instant, strikes: u32) -> Self {
        let wait = RETRY
            .saturating_mul(1 << strikes.saturating_sub(1).min(6))
            .min(SILENT_RETRY_MAX);
        Peer::Elsewhere {
            retry: now + wait,
            strikes,
        }
    }
}

/// Why [`connect`] made no ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NoRing {
    /// Nobody listens at the rendezvous (or a process of another user
    /// does, or its backlog is full): a NIC of another host.
    Nobody,
    /// The rendezvous took the connection and refused it: closed it, or
    /// answered with something other than the welcome; or no ring could
    /// be made here.
    Refused,
    /// The rendezvous took the connection and sent nothing back within
    /// [`WELCOME_WAIT`].
    Silent,
}

/// The sending side of a NIC with a UDP port: frames to NICs of this host
/// go into their rings, the rest to the socket.
pub(crate) struct HostSink {
    udp: UdpSink,
    peers: Peers,
    stats: Arc<Stats>,
    /// Frames for UDP, reused.
    rest: Vec<Frame>,
}

/// Where each destination a NIC sent to is reached: its ring, or UDP.
struct Peers {
    local: [u8; 4],
    map: BTreeMap<[u8; 4], Peer>,
    stats: Arc<Stats>,
}

/// What became of a frame offered to a ring.
enum Pushed {
    In,
    /// Dropped: the ring stayed full.
    Dropped,
    /// The ring is broken: the frame goes by UDP, and so does the rest.
    Broken,
}

impl HostSink {
    pub(crate) fn new(udp: UdpSink, local: [u8; 4], stats: Arc<Stats>) -> Self {
        Self {
            udp,
            peers: Peers {
                local,
                map: BTreeMap::new(),
                stats: Arc::clone(&stats),
            },
            stats,
            rest: Vec::new(),
        }
    }
}

impl Peers {
    /// The peer's ring, connecting first if it is time to try.
    fn ring(&mut self, dst: [u8; 4], now: Instant) -> Option<&mut OutRing> {
        // The common case, a ring in use lately whose receiver still takes
        // frames: one look-up to see, one to lend it, a comparison of two
        // readings of the clock and a load from a line written only once
        // the receiver stops (from this side's cache until then).
        let fresh = matches!(
            self.map.get(&dst),
            Some(Peer::Shm(r)) if now < r.fresh_until && !r.ring.consumer_closed()
        );
        if !fresh {
            self.refresh(dst, now);
        }
        match self.map.get_mut(&dst) {
            Some(Peer::Shm(r)) => {
                r.used = now;
                Some(r)
            }
            _ => None,
        }
    }

    /// Connects to `dst` if it is time to try, and checks that a ring idle
    /// or unchecked for a while still has its receiver.
    fn refresh(&mut self, dst: [u8; 4], now: Instant) {
        let again = match self.map.get(&dst) {
            None => true,
            Some(p @ Peer::Elsewhere { .. }) => !p.elsewhere_at(now),
            Some(Peer::Shm(_)) => false,
        };
        if again {
            let strikes_before = match self.map.get(&dst) {
                Some(Peer::Elsewhere { strikes, .. }) => *strikes,
                _ => 0,
            };
            let p = match connect(self.local, dst) {
                Ok(mut r) => {
                    self.stats.peers_out.fetch_add(1, Ordering::Relaxed);
                    r.strikes = strikes_before;
                    Peer::Shm(r)
                }
                Err(NoRing::Nobody) => Peer::elsewhere(now),
                Err(why) => {
                    // A silent rendezvous held this NIC for WELCOME_WAIT:
                    // asked again twice as late each time it stays so. A
                    // refusal keeps that count, so that a listener that
                    // takes turns at both is not asked every second.
                    let strikes = strikes_before.saturating_add(u32::from(why == NoRing::Silent));
                    Peer::struck(now, strikes)
                }
            };
            self.map.insert(dst, p);
            // A fresh ring is not checked again.
            return;
        }
        let Some(Peer::Shm(r)) = self.map.get_mut(&dst) else {
            return;
        };
        let closed = r.ring.consumer_closed();
        let idle = now.duration_since(r.used) >= IDLE;
        if closed || idle || now.duration_since(r.checked) >= LIVENESS {
            r.checked = now;
            if closed || os::hung_up(&r.conn) {
                if !r.ring.taken_any() {
                    // Closed before its receiver took a frame: a ring that
                    // never worked, as a silent rendezvous's welcome. A
                    // peer that welcomes and closes each ring would
                    // otherwise have this NIC make one (tens of
                    // microseconds in its turn) for every batch of frames.
                    let strikes = r.strikes.saturating_add(1);
                    self.map.insert(dst, Peer::struck(now, strikes));
                    return;
                }
                // Gone after it worked, and perhaps back already (a
                // restarted process, a server's child for the next test):
                // ask again at once.
                self.map.insert(
                    dst,
                    Peer::Elsewhere {
                        retry: now,
                        strikes: 0,
                    },
                );
                self.refresh(dst, now);
                return;
            }
        }
        // A ring in steady use is looked at here once every IDLE.
        r.fresh_until = (now + IDLE).min(r.checked + LIVENESS);
    }
}

/// Puts `frame`, its two parts one after the other (at most
/// [`ring::MAX_FRAME`] bytes in all), into `r`, waiting a
/// bounded time for room if it is full.
fn push_into(r: &mut OutRing, frame: [&[u8]; 2], stats: &Stats) -> Pushed {
    // The furthest the receiver's position was seen, and when; and when
    // this frame started to wait.
    let mut seen: Option<(u64, Instant)> = None;
    let mut start: Option<Instant> = None;
    loop {
        match r.ring.push_parts(frame) {
            Ok(()) => {
                r.stuck_at = None;
                return Pushed::In;
            }
            Err(Fault::Full) => {
                // A receiver that stopped takes nothing more: no wait, and
                // the next run asks the rendezvous again.
                if r.ring.consumer_closed() {
                    return Pushed::Dropped;
                }
                // Untrusted (the peer writes it): only a move forward
                // counts, and the whole wait is bounded whatever it does.
                let pos = r.ring.consumer_pos();
                if r.stuck_at.is_some_and(|s| pos <= s) {
                    return Pushed::Dropped;
                }
                if seen.is_none() {
                    // Whatever the marks say: a caller of the receiver's
                    // that took them down may be the one running (and
                    // perhaps blocked on a full ring of ours), while the
                    // receiver thread, asleep, could take these frames.
                    // (Not counted in `shm_bells`: those are the bells
                    // for frames, this one for room.)
                    let _ = ring_peer(r);
                }
                let stalled = match seen {
                    Some((p, since)) if pos <= p => since.elapsed() >= FULL_WAIT,
                    // First look, or the receiver moved on: wait afresh.
                    _ => {
                        seen = Some((pos, Instant::now()));
                        false
                    }
                };
                let started = *start.get_or_insert_with(Instant::now);
                let furthest = seen.map_or(pos, |(p, _)| p.max(pos));
                if stalled {
                    r.stuck_at = Some(furthest);
                    stats.tx_stalls.fetch_add(1, Ordering::Relaxed);
                    return Pushed::Dropped;
                }
                if started.elapsed() >= FULL_WAIT_MAX {
                    // Moving, but too slowly for one frame in all that
                    // time (a receiver that frees a few bytes at a time
                    // would cost every frame this wait): frames are
                    // dropped at once until it has taken half a ring.
                    r.stuck_at = Some(furthest.saturating_add(RING_BYTES / 2));
                    stats.tx_stalls.fetch_add(1, Ordering::Relaxed);
                    return Pushed::Dropped;
                }
                wake(r);
                std::thread::yield_now();
            }
            Err(Fault::Broken) => return Pushed::Broken,
        }
    }
}

/// The NIC's side of the rendezvous handshake on `s`, without blocking:
/// `Err(s)` if the peer's hello has not come yet (try again once `s` is
/// readable, until [`HANDSHAKE`] has passed), `Ok(None)` if the peer is
/// refused or broke off, `Ok(Some(ring))` once it is admitted.
fn handshake(s: Tracked<UnixStream>) -> Result<Option<InRing>, Tracked<UnixStream>> {
    if s.set_nonblocking(true).is_err() || os::peer_uid(&s).ok() != Some(os::euid()) {
        return Ok(None);
    }
    let mut hello = [0u8; 16];
    match os::recv_with_fds(&s, &mut hello) {
        Ok((n, fds)) => Ok(welcome(s, &hello[..n], fds)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) =>
        {
            Err(s)
        }
        Err(_) => Ok(None),
    }
}

/// Checks a peer's hello and the ring and bell it sent: the ring, mapped,
/// or `None` if the peer is refused. The welcome is sent once there is
/// room for the ring ([`Handshakes::go`]).
fn welcome(s: Tracked<UnixStream>, hello: &[u8], fds: Vec<OwnedFd>) -> Option<InRing> {
    if hello.len() != 12 || &hello[..8] != HELLO {
        return None;
    }
    let peer: [u8; 4] = hello[8..12].try_into().ok()?;
    let [ring_fd, bell]: [OwnedFd; 2] = fds.try_into().ok()?;
    let bell = File::from(bell);
    if !os::is_peer_bell(&bell) {
        return None;
    }
    let f = File::from(ring_fd);
    // The seal first, then the size: a file measured before it was sealed
    // could have been cut short in between, and a mapping past its end
    // faults (SIGBUS) when touched.
    // And in tmpfs: a page of a hugetlbfs file that its maker punches
    // out faults (SIGBUS) when touched if the huge-page pool is empty.
    if !os::cannot_shrink(&f) || !os::on_tmpfs(&f) {
        return None;
    }
    #[cfg(test)]
    tests::between_seal_and_size(&f);
    let len = f.metadata().ok()?.len();
    if len > 2 * Ring::mapping_len(RING_BYTES) {
        return None;
    }
    let map = MmapOptions::new().len(len as usize).map_raw(&f).ok()?;
    let ring = Ring::attach(map)?;
    Some(InRing {
        ring,
        peer,
        conn: s,
        bell,
        bell_gone: false,
    })
}

/// [`handshake`], waiting up to [`HANDSHAKE`] for the hello, and the
/// welcome sent.
fn admit(s: UnixStream) -> Option<InRing> {
    let until = Instant::now() + HANDSHAKE;
    let mut s = Tracked::new(s);
    let mut ready = Vec::new();
    loop {
        match handshake(s) {
            Ok(r) => return r.filter(|r| os::send_with_fds(&r.conn, WELCOME, &[]).is_ok()),
            Err(back) => {
                let left = until.checked_duration_since(Instant::now())?;
                os::poll_readable(&[back.as_raw_fd()], left, &mut ready);
                s = back;
            }
        }
    }
}

/// Rings the NIC's own eventfd bell (a write of 1; a full counter cannot
/// happen with a reader that empties it).
fn ring(bell: &File) {
    let _ = (&*bell).write_all(&1u64.to_ne_bytes());
}

/// Rings a peer's bell: a byte into the pipe whose write end is this
/// sender's alone ([`os::bell_pipe`]), so it never waits, and whose read
/// end it keeps, so it never raises SIGPIPE. A bell full of rings its
/// receiver has not emptied is rung already (`WouldBlock`).
fn ring_peer(r: &OutRing) -> io::Result<usize> {
    (&r.bell).write(&[1])
}

/// Rings `r`'s bell if its receiver parked.
fn wake(r: &OutRing) {
    fence(Ordering::SeqCst);
    if r.ring.consumer_parked() {
        let _ = ring_peer(r);
    }
}

/// Rings `r`'s bell if its receiver parked and none of its threads comes
/// back to the rings within [`BELL_WAIT`]. A program that polls its CQ is
/// between two polls most of the time it is not in one; waking its
/// receiver thread for a frame the next poll takes costs a system call
/// here and, on a machine with few cores, a busy thread its core. A ring
/// whose receiver did not come back in time (a program that polls memory,
/// or sleeps on events) loses its credit and is rung at once, waited for
/// again only every [`BELL_PROBE`]th bell.
fn wake_after_a_wait(r: &mut OutRing, stats: &Stats) {
    fence(Ordering::SeqCst);
    if !r.ring.consumer_parked() {
        return;
    }
    if r.credit.wait() {
        let start = Instant::now();
        let mut spared = false;
        while !spared && start.elapsed() < BELL_WAIT {
            std::hint::spin_loop();
            // Cleared by a thread that looks at the rings now: it takes
            // the frame (it clears the marks before it looks).
            spared = !r.ring.consumer_parked();
        }
        r.credit.waited(spared);
        if spared {
            stats.bells_spared.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    stats.bells.fetch_add(1, Ordering::Relaxed);
    let _ = ring_peer(r);
}

/// The handshake's sending side: a ring for `dst`, if a NIC of this host
/// listens at its name and admits us.
fn connect(local: [u8; 4], dst: [u8; 4]) -> Result<OutRing, NoRing> {
    let refused = |_| NoRing::Refused;
    // Abstract names have no owner: whoever binds one first holds it. A
    // listener of another user (or a full backlog, which a plain connect
    // would wait on) is nobody to talk to; UDP then.
    let s = os::connect_abstract(rendezvous_name(dst).as_bytes()).map_err(|_| NoRing::Nobody)?;
    if os::peer_uid(&s).ok() != Some(os::euid()) {
        return Err(NoRing::Nobody);
    }
    s.set_nonblocking(false).map_err(refused)?;
    s.set_read_timeout(Some(WELCOME_WAIT)).map_err(refused)?;
    s.set_write_timeout(Some(WELCOME_WAIT)).map_err(refused)?;
    let f = os::memfd("doorbell-ring", Ring::mapping_len(RING_BYTES)).map_err(refused)?;
    let map: MmapRaw = MmapOptions::new().map_raw(&f).map_err(refused)?;
    let ring = Ring::create(map).ok_or(NoRing::Refused)?;
    let (bell_read, bell) = os::bell_pipe().map_err(refused)?;
    let mut hello = [0u8; 12];
    hello[..8].copy_from_slice(HELLO);
    hello[8..].copy_from_slice(&local);
    os::send_with_fds(&s, &hello, &[f.as_raw_fd(), bell_read.as_raw_fd()]).map_err(refused)?;
    // A plain read: descriptors a receiver sent with its welcome are
    // never let into this process.
    let mut answer = [0u8; 16];
    let n = (&s).read(&mut answer).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => NoRing::Silent,
        _ => NoRing::Refused,
    })?;
    if n != WELCOME.len() || &answer[..n] != WELCOME {
        return Err(NoRing::Refused);
    }
    s.set_nonblocking(true).map_err(refused)?;
    let now = Instant::now();
    Ok(OutRing {
        ring,
        conn: Tracked::new(s),
        bell,
        bell_read,
        checked: now,
        used: now,
        fresh_until: now + IDLE.min(LIVENESS),
        stuck_at: None,
        credit: WaitCredit::default(),
        strikes: 0,
    })
}

impl Sink for HostSink {
    fn send(&mut self, frames: &mut Vec<Frame>, now: Instant, spent: &mut Vec<Vec<u8>>) {
        // A batch all to a NIC of another host (a stream between hosts),
        // known to be one until its next look at the rendezvous, goes to
        // the UDP port as it is, rather than frame by frame through `rest`.
        if let Some(dst) = frames.first().map(|f| f.dst)
            && self
                .peers
                .map
                .get(&dst)
                .is_some_and(|p| p.elsewhere_at(now))
            && frames.iter().all(|f| f.dst == dst)
        {
            self.udp.send(frames, now, spent);
            return;
        }
        let mut rest = std::mem::take(&mut self.rest);
        let (mut pushed, mut dropped) = (0u64, 0u64);
        let mut frames = frames.drain(..).peekable();
        while let Some(first) = frames.next() {
            // A run of frames to one destination: its ring is looked up
            // once, and its bell rung once, after the run.
            let dst = first.dst;
            let mut run = Some(first);
            let Some(r) = self.peers.ring(dst, now) else {
                rest.extend(
                    run.take()
                        .into_iter()
                        .chain(std::iter::from_fn(|| frames.next_if(|f| f.dst == dst))),
                );
                continue;
            };
            r.ring.prefetch_mark();
            let mut broken = false;
            let mut took = false;
            while let Some(f) = run.take().or_else(|| frames.next_if(|f| f.dst == dst)) {
                if f.segment > 0 && !broken {
                    // A run of datagrams goes into the ring packet by
                    // packet, as the NIC would have built them.
                    let stats = &self.stats;
                    crate::datagrams::each_packet(&f, |head, datagram| {
                        if broken {
                            // Behind a break: lost, and sent again by the
                            // transport.
                            dropped += 1;
                            return;
                        }
                        match push_into(r, [head, datagram], stats) {
                            Pushed::In => pushed += 1,
                            Pushed::Dropped => dropped += 1,
                            Pushed::Broken => broken = true,
                        }
                    });
                    took = true;
                    spent.push(f.bytes);
                    continue;
                }
                if broken || f.bytes.len() > ring::MAX_FRAME {
                    rest.push(f);
                    continue;
                }
                match push_into(r, [&f.bytes, &[]], &self.stats) {
                    Pushed::In => pushed += 1,
                    Pushed::Dropped => dropped += 1,
                    Pushed::Broken => {
                        broken = true;
                        rest.push(f);
                        continue;
                    }
                }
                took = true;
                spent.push(f.bytes);
            }
            if took {
                wake_after_a_wait(r, &self.stats);
            }
            if broken {
                self.peers.map.insert(dst, Peer::elsewhere(Instant::now()));
            }
        }
        // (This sink is the only writer of both.)
        if pushed > 0 {
            add_one_writer(&self.stats.tx_frames, pushed);
        }
        if dropped > 0 {
            add_one_writer(&self.stats.tx_full_drops, dropped);
        }
        if !rest.is_empty() {
            self.udp.send(&mut rest, now, spent);
        }
        self.rest = rest;
    }
}

/// A process of this host that speaks the rendezvous protocol itself and
/// puts whatever it likes into its ring: what a hostile or broken peer can
/// do to a NIC through shared memory, for tests of what the NIC does then.
#[doc(hidden)]
pub struct RawPeer(OutRing);

impl RawPeer {
    /// Connects to the NIC at `dst`, claiming to be `claim`.
    pub fn connect(claim: [u8; 4], dst: [u8; 4]) -> Option<Self> {
        connect(claim, dst).ok().map(Self)
    }

    /// Puts `frame` into the ring and wakes the NIC; false if it is full.
    pub fn send(&mut self, frame: &[u8]) -> bool {
        let ok = frame.len() <= ring::MAX_FRAME && self.0.ring.push(frame).is_ok();
        wake(&self.0);
        ok
    }

    /// Whether the NIC marked the ring closed (it stopped).
    pub fn receiver_closed(&self) -> bool {
        self.0.ring.consumer_closed()
    }

    /// Makes the bell's read end blocking (the sender keeps a copy of the
    /// file the NIC reads, so for the NIC too), as a hostile peer may.
    pub fn make_bell_blocking(&self) -> io::Result<()> {
        os::set_blocking(&self.0.bell_read)
    }

    /// Writes `value` over the ring's producer position, as a peer that
    /// scribbles over the segment would, and wakes the NIC.
    pub fn scribble_tail(&mut self, value: u64) {
        self.0.ring.scribble_tail(value);
        wake(&self.0);
    }
}

/// A process of this host that admits the rings NICs make to its address
/// and never takes a frame out of them: a receiver that has stopped (a
/// process under SIGSTOP, or hung), for tests of what its senders do.
/// Admits in a thread of its own until dropped.
#[doc(hidden)]
pub struct RawListener {
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RawListener {
    /// Listens at `addr`'s rendezvous; `None` if a NIC already does.
    pub fn listen(addr: [u8; 4]) -> Option<Self> {
        let listener = UnixListener::bind_addr(&rendezvous(addr).ok()?).ok()?;
        listener.set_nonblocking(true).ok()?;
        let (stop, admitted) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (st, ad) = (stop.clone(), admitted.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !st.load(Ordering::Acquire) {
                while let Ok((s, _)) = listener.accept() {
                    if let Some(r) = admit(s) {
                        held.push(r);
                        ad.fetch_add(1, Ordering::Release);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Some(Self {
            stop,
            admitted,
            thread: Some(thread),
        })
    }

    /// Rings admitted so far.
    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Acquire)
    }
}

impl Drop for RawListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{BELL_CREDIT, BELL_PROBE, CALLER_SPIN, WaitCredit, Waits, is_request};

    /// What a test's peer does between the receiver's check of its ring's
    /// seal and the ring's measure ([`super::welcome`]).
    type Between = Box<dyn Fn(&std::fs::File)>;

    thread_local! {
        static BETWEEN: std::cell::RefCell<Option<Between>> = const { std::cell::RefCell::new(None) };
    }

    /// Called by [`super::welcome`] between its two checks of a ring.
    pub(super) fn between_seal_and_size(f: &std::fs::File) {
        BETWEEN.with_borrow(|h| {
            if let Some(h) = h {
                h(f);
            }
        });
    }

    /// A peer sends its ring unsealed, and cuts it short and seals it
    /// while the receiver checks it. A receiver that measured the file
    /// before it looked at the seal would map the first length and fault
    /// (SIGBUS) on its first frame past the new end; one that looks at
    /// the seal first refuses the ring.
    #[test]
    fn a_ring_is_measured_only_once_it_cannot_shrink() {
        use std::os::fd::OwnedFd;

        use super::{HELLO, RING_BYTES, Tracked, os, ring::Ring};
        let full = Ring::mapping_len(RING_BYTES);
        let f = os::tests::unsealed_memfd(full);
        let map = memmap2::MmapOptions::new().map_raw(&f).unwrap();
        let _ring = Ring::create(map).expect("a ring");
        BETWEEN.set(Some(Box::new(|f| {
            f.set_len(4096).unwrap();
            os::tests::seal_at_size(f);
        })));
        let (s, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (bell, _bell_writer) = os::bell_pipe().unwrap();
        let hello = [&HELLO[..], &[10, 79, 0, 2]].concat();
        let fds = vec![OwnedFd::from(f.try_clone().unwrap()), OwnedFd::from(bell)];
        let admitted = super::welcome(Tracked::new(s), &hello, fds);
        BETWEEN.set(None);
        let now = f.metadata().unwrap().len();
        // A receiver that measured first admits a ring mapped past the
        // file's end; one that looks at the seal first finds none.
        assert!(
            admitted.is_none(),
            "an unsealed ring admitted, mapped for {full} bytes of {now}"
        );
    }

    /// Every hello a peer can get wrong, and every ring or bell it can
    /// send that the receiver must not map or poll, is refused (the
    /// connection then closes unanswered, and the peer keeps to UDP); the
    /// same hello done right is admitted.
    #[test]
    fn a_hello_a_peer_got_wrong_is_refused() {
        use std::fs::File;
        use std::os::fd::{AsRawFd, OwnedFd};

        use super::{HELLO, RING_BYTES, Tracked, os, ring::Ring};
        let full = Ring::mapping_len(RING_BYTES);
        let map = |f: &File| memmap2::MmapOptions::new().map_raw(f).unwrap();
        // A sealed memfd of `len` bytes holding a fresh ring.
        let ring = |len: u64| {
            let f = os::memfd("ring-test", len).unwrap();
            Ring::create(map(&f)).expect("a ring");
            f
        };
        let sealed_against_writes = || {
            let f = os::tests::unsealed_memfd(full);
            // The mapping goes before the seal, which a writable one
            // would refuse.
            Ring::create(map(&f)).expect("a ring");
            os::tests::seal_against_writes(&f);
            f
        };
        let read_only = || {
            let f = ring(full);
            File::open(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap()
        };
        let good = [&HELLO[..], &[10, 75, 0, 2]].concat();
        let mut other_magic = good.clone();
        other_magic[..8].copy_from_slice(b"DBHELLO1");
        // Each bell's write end, kept so that its read end has a writer.
        let mut writers = Vec::new();
        let mut bell = || {
            let (read, write) = os::bell_pipe().unwrap();
            writers.push(write);
            OwnedFd::from(read)
        };
        let cases: Vec<(&str, Vec<u8>, Vec<OwnedFd>)> = vec![
            (
                "a short hello",
                good[..11].to_vec(),
                vec![ring(full).into(), bell()],
            ),
            (
                "another magic",
                other_magic,
                vec![ring(full).into(), bell()],
            ),
            ("nothing sent with it", good.clone(), vec![]),
            ("a ring and no bell", good.clone(), vec![ring(full).into()]),
            (
                "a bell that is no pipe",
                good.clone(),
                vec![ring(full).into(), ring(full).into()],
            ),
            (
                "a ring sealed against writes",
                good.clone(),
                vec![sealed_against_writes().into(), bell()],
            ),
            (
                "a ring sent read-only",
                good.clone(),
                vec![read_only().into(), bell()],
            ),
            (
                "a ring past twice the mapping",
                good.clone(),
                vec![ring(2 * full + 4096).into(), bell()],
            ),
            (
                "a file with no ring in it",
                good.clone(),
                vec![os::memfd("ring-test", full).unwrap().into(), bell()],
            ),
        ];
        for (why, hello, fds) in cases {
            let (s, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
            assert!(
                super::welcome(Tracked::new(s), &hello, fds).is_none(),
                "admitted: {why}"
            );
        }
        let (s, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (bell_read, _bell_writer) = os::bell_pipe().unwrap();
        let fds = vec![OwnedFd::from(ring(full)), OwnedFd::from(bell_read)];
        assert!(
            super::welcome(Tracked::new(s), &good, fds).is_some(),
            "the same hello, done right"
        );
    }

    /// A sender's side of a handshake, up to its hello (claiming `claim`,
    /// with a fresh ring and bell): the receiver's end of the connection,
    /// and what the sender keeps for as long as the ring should live (its
    /// end, and its bell's write end).
    fn hello_sent(
        claim: [u8; 4],
    ) -> (
        super::Tracked<std::os::unix::net::UnixStream>,
        (std::os::unix::net::UnixStream, std::fs::File),
    ) {
        use std::os::fd::AsRawFd;

        use super::{HELLO, RING_BYTES, Tracked, os, ring::Ring};
        let f = os::memfd("ring-test", Ring::mapping_len(RING_BYTES)).unwrap();
        Ring::create(memmap2::MmapOptions::new().map_raw(&f).unwrap()).expect("a ring");
        let (bell_read, bell) = os::bell_pipe().unwrap();
        let (sender, receiver) = std::os::unix::net::UnixStream::pair().unwrap();
        let hello = [&HELLO[..], &claim].concat();
        os::send_with_fds(&sender, &hello, &[f.as_raw_fd(), bell_read.as_raw_fd()]).unwrap();
        (Tracked::new(receiver), (sender, bell))
    }

    /// What a sender reads back from its rendezvous: the welcome, or
    /// nothing (the connection closed unanswered; with its hello unread,
    /// which the sender sees as a reset).
    fn answer(sender: &std::os::unix::net::UnixStream) -> Vec<u8> {
        use std::io::Read as _;

        sender
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = [0u8; 16];
        match (&*sender).read(&mut answer) {
            Ok(n) => answer[..n].to_vec(),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Vec::new(),
            Err(e) => panic!("neither an answer nor a close: {e}"),
        }
    }

    /// A peer that connects again and again holds at most MAX_RINGS
    /// rings, each a connection, a bell and a mapping: past it, a sender
    /// is refused (its connection closed unanswered: it keeps to UDP, and
    /// the refusal is counted) unless it claims an address that has a
    /// ring, which its own replaces; a ring that goes makes room for
    /// another.
    #[test]
    fn a_nic_takes_frames_from_so_many_rings_and_refuses_more() {
        use std::sync::atomic::Ordering;

        use super::{Handshakes, MAX_RINGS, Stats, WELCOME};
        let inbound = std::sync::Mutex::new(inbound([10, 76, 0, 1], Vec::new()));
        let stats = Stats::default();
        let mut shaking = Handshakes::default();
        let claim = |i: usize| [10, 76, 1 + (i >> 8) as u8, i as u8];
        let (callers, mut kept): (Vec<_>, Vec<_>) =
            (0..=MAX_RINGS).map(|i| hello_sent(claim(i))).unzip();
        shaking.go(callers, None, &inbound, &stats);
        assert_eq!(inbound.lock().unwrap().rings.len(), MAX_RINGS);
        assert_eq!(stats.peers_in.load(Ordering::Relaxed), MAX_RINGS as u64);
        let (refused, _) = kept.pop().expect("one past the limit");
        assert!(answer(&refused).is_empty(), "refused: closed unanswered");
        assert_eq!(stats.peers_refused.load(Ordering::Relaxed), 1);
        assert!(kept.iter().all(|(s, _)| answer(s) == WELCOME));
        // Full, a ring from an address that has one replaces it: the
        // old one's connection closes.
        let (caller, (sender, _bell)) = hello_sent(claim(0));
        shaking.go(vec![caller], None, &inbound, &stats);
        assert_eq!(answer(&sender), WELCOME, "the address's new ring");
        assert!(answer(&kept[0].0).is_empty(), "its old ring let go");
        assert_eq!(inbound.lock().unwrap().rings.len(), MAX_RINGS);
        assert_eq!(stats.peers_in.load(Ordering::Relaxed), MAX_RINGS as u64 + 1);
        // A ring that goes makes room for another address's.
        inbound.lock().unwrap().rings.pop();
        let (caller, (sender, _bell)) = hello_sent(claim(MAX_RINGS + 1));
        shaking.go(vec![caller], None, &inbound, &stats);
        assert_eq!(answer(&sender), WELCOME, "room again once a ring went");
        assert_eq!(inbound.lock().unwrap().rings.len(), MAX_RINGS);
        assert_eq!(stats.peers_refused.load(Ordering::Relaxed), 1);
    }

    /// A listener at the rendezvous of `addr`, as a NIC there would hold.
    fn listen_at(addr: [u8; 4]) -> std::os::unix::net::UnixListener {
        std::os::unix::net::UnixListener::bind_addr(&super::rendezvous(addr).unwrap()).unwrap()
    }

    /// A rendezvous that answers the hello with anything but the welcome
    /// gives its sender no ring: the sender keeps to UDP.
    #[test]
    fn a_rendezvous_that_answers_otherwise_gives_no_ring() {
        use std::io::Write as _;

        let addr = [127, 66, 0, 43];
        let listener = listen_at(addr);
        let answerer = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut hello = [0u8; 16];
            let _ = super::os::recv_with_fds(&s, &mut hello).unwrap();
            (&s).write_all(b"DBWELCO1").unwrap();
            // Held open until the sender has read the answer.
            let mut rest = [0u8; 1];
            let _ = std::io::Read::read(&mut &s, &mut rest);
        });
        let got = super::connect([127, 66, 0, 42], addr).err();
        assert_eq!(got, Some(super::NoRing::Refused), "no ring");
        answerer.join().unwrap();
    }

    /// A rendezvous that takes the connection and never answers (a
    /// process stopped in a debugger, or one that holds the name and
    /// stays silent) holds its sender, and the NIC whose turn the sender
    /// runs in, for the welcome's wait, and is found silent.
    #[test]
    fn a_rendezvous_that_never_answers_is_found_silent_after_the_welcomes_wait() {
        use super::WELCOME_WAIT;
        let addr = [127, 66, 0, 41];
        // Never accepted: the kernel completes the connection all the same.
        let _listener = listen_at(addr);
        let start = std::time::Instant::now();
        let got = super::connect([127, 66, 0, 40], addr).err();
        let waited = start.elapsed();
        assert_eq!(got, Some(super::NoRing::Silent), "no ring");
        assert!(
            waited >= WELCOME_WAIT,
            "{waited:?}: it waited for the welcome"
        );
        assert!(
            waited < WELCOME_WAIT * 4,
            "{waited:?}: held for longer than the welcome's wait"
        );
    }

    /// A ring of the port's size, from both ends: the sender's, made
    /// `now` and fresh until `fresh_until`, with a connection whose other
    /// end (returned) stays open, and the receiver's.
    fn ring_pair(
        now: std::time::Instant,
        fresh_until: std::time::Instant,
    ) -> (
        super::OutRing,
        super::ring::Ring,
        std::os::unix::net::UnixStream,
    ) {
        use super::{OutRing, RING_BYTES, Tracked, os, ring::Ring};
        let f = os::memfd("ring-test", Ring::mapping_len(RING_BYTES)).unwrap();
        let map = || memmap2::MmapOptions::new().map_raw(&f).unwrap();
        let (ring, consumer) = (Ring::create(map()).unwrap(), Ring::attach(map()).unwrap());
        let (conn, receiver) = std::os::unix::net::UnixStream::pair().unwrap();
        let (bell_read, bell) = os::bell_pipe().unwrap();
        let out = OutRing {
            ring,
            conn: Tracked::new(conn),
            bell,
            bell_read,
            checked: now,
            used: now,
            fresh_until,
            stuck_at: None,
            credit: WaitCredit::default(),
            strikes: 0,
        };
        (out, consumer, receiver)
    }

    /// A sender's peers, none met yet, for a NIC at `local`.
    fn peers(local: [u8; 4]) -> super::Peers {
        super::Peers {
            local,
            map: std::collections::BTreeMap::new(),
            stats: std::sync::Arc::new(super::Stats::default()),
        }
    }

    /// When `peers` will ask about `dst` again, and how many strikes it
    /// holds against it, if it keeps `dst` to UDP.
    fn strikes_at(peers: &super::Peers, dst: [u8; 4]) -> Option<(std::time::Instant, u32)> {
        match peers.map.get(&dst) {
            Some(super::Peer::Elsewhere { retry, strikes }) => Some((*retry, *strikes)),
            _ => None,
        }
    }

    /// A receiver's rings at `local`, holding `rings`, its thread awake.
    fn inbound(local: [u8; 4], rings: Vec<super::InRing>) -> super::Inbound {
        use super::{Inbound, Waits, os};
        let (own_bell, _) = os::bell_pipe().unwrap();
        Inbound {
            local,
            listener: None,
            bell: own_bell,
            rings,
            parked: false,
            linger: WaitCredit::default(),
            waits: Waits::new(false, Duration::ZERO, Duration::ZERO),
            took_requests: false,
            accept_after: None,
        }
    }

    /// A peer that keeps its ring full of frames the NIC drops (not
    /// addressed between the ring's two ends) gets one batch a drain, its
    /// dropped records counted: a drain that counted only the frames it
    /// kept would take as long as the peer pushed, holding the rings'
    /// lock, and with it a program's CQ poll, all the while.
    #[test]
    fn a_drain_takes_one_batch_of_a_ring_whatever_it_drops() {
        use std::sync::atomic::Ordering;

        use super::{BATCH, InRing, Stats, Tracked, os};
        let (local, peer) = ([10, 78, 0, 1], [10, 78, 0, 2]);
        let now = std::time::Instant::now();
        let (mut out, ring, conn) = ring_pair(now, now);
        // Each from a stranger, to this NIC: dropped by the ring's check.
        let mut frame = vec![0u8; 64];
        frame[0] = 0x45;
        frame[12..16].copy_from_slice(&[10, 78, 0, 9]);
        frame[16..20].copy_from_slice(&local);
        for _ in 0..2 * BATCH {
            out.ring.push(&frame).expect("room in the ring");
        }
        let (bell, _bell_writer) = os::bell_pipe().unwrap();
        let mut inbound = inbound(
            local,
            vec![InRing {
                ring,
                peer,
                conn: Tracked::new(conn),
                bell,
                bell_gone: false,
            }],
        );
        let fabric = crate::Fabric::new();
        let nic = crate::LiveNic::start_with(
            "drain",
            local,
            crate::Port::Fabric(&fabric),
            crate::NicOptions::default(),
        )
        .expect("a NIC");
        let stats = Stats::default();
        assert_eq!(inbound.drain(&nic.core, &stats), 0, "nothing kept");
        assert_eq!(stats.rx_dropped.load(Ordering::Relaxed), BATCH as u64);
        assert!(inbound.rings[0].ring.has_data(), "a batch left for later");
        assert_eq!(inbound.drain(&nic.core, &stats), 0);
        assert_eq!(stats.rx_dropped.load(Ordering::Relaxed), 2 * BATCH as u64);
        assert!(!inbound.rings[0].ring.has_data());
    }

    /// A receiver that closed its copy of the bell (or died) leaves the
    /// pipe a reader: the sender keeps one. A ring into a pipe without a
    /// reader fails with EPIPE and raises SIGPIPE, which ends a C program
    /// that has not set it aside (the test harness has).
    #[test]
    fn a_sender_rings_a_receiver_that_closed_its_bell_without_a_broken_pipe() {
        let addr = [127, 66, 0, 21];
        let listener = listen_at(addr);
        let receiver = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            // Admitted, then gone: its bell and connection closed.
            drop(super::admit(s).expect("the sender admitted"));
        });
        let out = super::connect([127, 66, 0, 22], addr).expect("a ring");
        receiver.join().unwrap();
        for _ in 0..(1 << 17) {
            if let Err(e) = super::ring_peer(&out) {
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
            }
        }
    }

    #[test]
    fn a_sender_asks_the_rendezvous_again_once_its_receiver_closed_the_ring() {
        use std::time::Instant;

        use super::{Peer, RETRY};

        let now = Instant::now();
        // The receiver's end of the connection stays open: it did not hang
        // up, and the ring is fresh for a minute.
        let (out, consumer, _receiver) = ring_pair(now, now + Duration::from_secs(60));
        // No NIC listens at this address's rendezvous.
        let dst = [127, 66, 0, 9];
        let mut peers = peers([127, 66, 0, 8]);
        peers.map.insert(dst, Peer::Shm(out));
        assert!(peers.ring(dst, now).is_some(), "an open ring in use");
        consumer.close();
        assert!(
            peers.ring(dst, now).is_none(),
            "a closed ring is asked about again at once, not used while fresh"
        );
        // Asked, and nobody answered: UDP until the next try.
        assert!(
            matches!(peers.map.get(&dst), Some(Peer::Elsewhere { retry, .. }) if *retry == now + RETRY)
        );
    }

    #[test]
    fn a_nic_found_elsewhere_goes_to_udp_until_its_retry_then_is_asked_about_again() {
        use std::time::Instant;

        use super::{Peer, Peers, RETRY};

        let now = Instant::now();
        // No NIC listens at this address's rendezvous.
        let dst = [127, 66, 0, 11];
        let mut peers = peers([127, 66, 0, 10]);
        let retry_of = |peers: &Peers| match peers.map.get(&dst) {
            Some(Peer::Elsewhere { retry, .. }) => Some(*retry),
            _ => None,
        };
        assert!(peers.ring(dst, now).is_none(), "nobody answers");
        assert_eq!(retry_of(&peers), Some(now + RETRY));
        let p = peers.map.get(&dst).unwrap();
        assert!(p.elsewhere_at(now) && p.elsewhere_at(now + RETRY / 2));
        assert!(!p.elsewhere_at(now + RETRY), "due at its retry");
        // Before its retry the rendezvous is not asked again...
        assert!(peers.ring(dst, now + RETRY / 2).is_none());
        assert_eq!(retry_of(&peers), Some(now + RETRY));
        // ...at it, it is, and nobody answers again.
        let later = now + RETRY;
        assert!(peers.ring(dst, later).is_none());
        assert_eq!(retry_of(&peers), Some(later + RETRY));
    }

    /// A rendezvous that stays silent costs its sender the welcome's wait
    /// each try: tried again after RETRY, then twice as late each time it
    /// is silent again (UDP meanwhile); once nobody holds the name, the
    /// tries are a second apart again.
    #[test]
    fn a_silent_rendezvous_is_tried_again_less_and_less_often() {
        use std::time::Instant;

        use super::RETRY;
        let dst = [127, 66, 0, 45];
        let mut peers = peers([127, 66, 0, 44]);
        let state = |peers: &super::Peers| strikes_at(peers, dst);
        let listener = listen_at(dst);
        let mut at = Instant::now();
        for (k, later) in [1u32, 2, 4].into_iter().enumerate() {
            assert!(peers.ring(dst, at).is_none(), "try {k}: no ring");
            assert_eq!(state(&peers), Some((at + RETRY * later, k as u32 + 1)));
            assert!(peers.ring(dst, at + RETRY * later / 2).is_none());
            assert_eq!(
                state(&peers),
                Some((at + RETRY * later, k as u32 + 1)),
                "not tried"
            );
            at += RETRY * later;
        }
        drop(listener);
        assert!(peers.ring(dst, at).is_none(), "nobody there now");
        assert_eq!(state(&peers), Some((at + RETRY, 0)));
    }

    /// A ring closed before its receiver took a frame counts as a silent
    /// rendezvous does: the sender does not make another at once (a peer
    /// that welcomes and closes each ring would have it make one for every
    /// batch of frames), and waits longer each time in a row. A ring closed
    /// after it worked (its process restarted, or gone for the next test's)
    /// is made again at once, and the count starts over.
    #[test]
    fn a_ring_closed_before_it_carried_a_frame_is_not_made_again_at_once() {
        use std::time::Instant;

        use super::{Peer, RETRY};
        let dst = [127, 66, 0, 47];
        let mut peers = peers([127, 66, 0, 46]);
        let state = |peers: &super::Peers| strikes_at(peers, dst);
        let listener = listen_at(dst);
        listener.set_nonblocking(true).unwrap();
        let now = Instant::now();
        for (strikes, later) in [(0u32, 1u32), (1, 2), (5, 32)] {
            let (mut r, consumer, _receiver) = ring_pair(now, now);
            r.strikes = strikes;
            r.ring.push(&[7u8; 64]).unwrap();
            consumer.close();
            peers.map.insert(dst, Peer::Shm(r));
            assert!(peers.ring(dst, now).is_none(), "no ring");
            assert_eq!(state(&peers), Some((now + RETRY * later, strikes + 1)));
            assert_eq!(
                listener.accept().map_err(|e| e.kind()).err(),
                Some(std::io::ErrorKind::WouldBlock),
                "not asked again"
            );
        }
        // One that carried a frame: asked again at once (here refused: the
        // rendezvous takes the connection and closes it).
        let (mut r, mut consumer, _receiver) = ring_pair(now, now);
        r.strikes = 3;
        r.ring.push(&[7u8; 64]).unwrap();
        assert!(consumer.pop(&mut Vec::new()).unwrap());
        consumer.close();
        peers.map.insert(dst, Peer::Shm(r));
        listener.set_nonblocking(false).unwrap();
        let refuser = std::thread::spawn(move || drop(listener.accept().unwrap()));
        assert!(peers.ring(dst, now).is_none(), "refused");
        refuser.join().unwrap();
        assert_eq!(
            state(&peers),
            Some((now + RETRY, 0)),
            "the count starts over"
        );
        // A receiver killed before it took a frame (its connection hung
        // up, its ring never marked closed) counts the same, once the
        // sender looks (its ring idle a millisecond).
        let other = [127, 66, 0, 50];
        let (r, _consumer, receiver) = ring_pair(now, now);
        drop(receiver);
        peers.map.insert(other, Peer::Shm(r));
        let later = now + std::time::Duration::from_millis(2);
        assert!(peers.ring(other, later).is_none(), "hung up");
        assert_eq!(strikes_at(&peers, other), Some((later + RETRY, 1)));
    }

    /// The count of rings that never worked carries through a ring made
    /// in between: a NIC that welcomes its sender and stops before it
    /// takes a frame, again and again, is asked again a second later, then
    /// two, as a silent rendezvous is.
    #[test]
    fn the_strikes_carry_through_a_ring_made_in_between() {
        use std::time::Instant;

        use super::RETRY;
        use crate::{LiveNic, NicOptions, Port};
        let dst = [127, 66, 0, 49];
        let mut peers = peers([127, 66, 0, 48]);
        let start =
            || LiveNic::start_with("strikes", dst, Port::Udp, NicOptions::default()).unwrap();
        let now = Instant::now();
        let mut at = now;
        for (k, later) in [1u32, 2].into_iter().enumerate() {
            let nic = start();
            assert!(peers.ring(dst, at).is_some(), "try {k}: a ring");
            drop(nic);
            assert!(
                peers.ring(dst, at).is_none(),
                "try {k}: closed, nothing taken"
            );
            assert_eq!(
                strikes_at(&peers, dst),
                Some((at + RETRY * later, k as u32 + 1))
            );
            at += RETRY * later;
        }
    }

    #[test]
    fn a_receiver_that_frees_room_a_few_bytes_at_a_time_costs_one_long_wait() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::Instant;

        use super::{FULL_WAIT_MAX, Pushed, Stats, push_into};

        let now = Instant::now();
        let (mut r, consumer, _receiver) = ring_pair(now, now);
        let stats = Stats::default();
        let frame = vec![7u8; 4000];
        while r.ring.push(&frame).is_ok() {}
        // The receiver moves its position on by 8 bytes every millisecond:
        // never room for a frame, never still for long.
        let stop = Arc::new(AtomicBool::new(false));
        let trickle = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut head = consumer.consumer_pos();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    head += 8;
                    consumer.scribble_head(head);
                }
            })
        };
        let t = Instant::now();
        assert!(matches!(
            push_into(&mut r, [&frame, &[]], &stats),
            Pushed::Dropped
        ));
        assert!(t.elapsed() >= FULL_WAIT_MAX, "waited its whole bound");
        // The next frames, each after the receiver moved again, are
        // dropped at once, not after a wait each.
        let mut took = Duration::ZERO;
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            let t = Instant::now();
            assert!(matches!(
                push_into(&mut r, [&frame, &[]], &stats),
                Pushed::Dropped
            ));
            took += t.elapsed();
        }
        stop.store(true, Ordering::Relaxed);
        trickle.join().unwrap();
        assert!(took < FULL_WAIT_MAX / 2, "three frames took {took:?}");
    }

    #[test]
    fn a_peers_sends_writes_reads_and_atomics_are_requests_and_its_answers_are_not() {
        use doorbell_types::{Psn, Qpn};
        use doorbell_wire::{BthOpcode, BthRepr, ExtHeaders, RoceIp, RoceRepr};
        let repr = RoceRepr {
            ip: RoceIp::v4([10, 0, 0, 1], [10, 0, 0, 2]),
            src_port: 0xc000,
            bth: BthRepr::new(BthOpcode::RcSendOnly, Qpn::new(5), Psn::new(9)),
            ext: ExtHeaders::default(),
        };
        let mut send = Vec::new();
        repr.emit_to_vec(b"12345678", &mut send).unwrap();
        // Only the BTH's opcode is looked at, past the IPv4 and UDP headers.
        let frame = |op: BthOpcode| {
            let mut f = send.clone();
            f[20 + 8] = u8::from(op);
            f
        };
        use BthOpcode::*;
        for op in [RcSendOnly, RcRdmaWriteMiddle, RcRdmaReadRequest, RcFetchAdd] {
            assert!(is_request(&frame(op)), "{op:?}");
        }
        for op in [RcAck, RcAtomicAck, RcRdmaReadResponseOnly] {
            assert!(!is_request(&frame(op)), "{op:?}");
        }
        assert!(!is_request(&send[..20 + 8]), "too short to say");
    }

    #[test]
    fn the_port_looks_for_frames_to_come_only_where_one_would_and_never_on_one_cpu() {
        let (spin, linger) = (Duration::from_micros(20), Duration::from_micros(7));
        let none = Duration::ZERO;
        let alone = Waits::new(true, spin, linger);
        assert_eq!(
            (
                alone.after_frame,
                alone.in_stream,
                alone.linger,
                alone.caller
            ),
            (none, none, none, none)
        );
        let beside = Waits::new(false, spin, linger);
        // The receiver thread: after a frame, in a stream, and answering
        // requests nobody polls for.
        let turns = crate::stream::TURNS;
        assert_eq!(beside.receiver(1, false, || false), spin);
        assert_eq!(beside.receiver(1, true, || true), spin, "a program polls");
        assert_eq!(beside.receiver(1, true, || false), crate::stream::SPIN);
        assert_eq!(beside.receiver(turns, false, || true), crate::stream::SPIN);
        for (streak, answering, polled) in [(1, true, false), (turns, false, true)] {
            assert_eq!(alone.receiver(streak, answering, || polled), none);
        }
        assert_eq!(
            (beside.after_frame, beside.linger, beside.caller),
            (spin, linger, CALLER_SPIN)
        );
        assert_eq!(
            beside.in_stream,
            crate::stream::SPIN,
            "the longer of the two"
        );
        let long = Duration::from_millis(1);
        assert_eq!(Waits::new(false, long, linger).in_stream, long);
    }

    #[test]
    fn a_sender_waits_for_a_receiver_that_came_back_and_rarely_for_one_that_did_not() {
        let mut c = WaitCredit::default();
        // No credit: one wait in BELL_PROBE bells.
        let waits = (0..BELL_PROBE * 3).filter(|_| c.wait()).count();
        assert_eq!(waits, 3);
        // A wait that paid off: every bell waits from then on.
        c.waited(true);
        assert!((0..100).all(|_| c.wait()));
        for _ in 0..20 {
            c.waited(true);
        }
        assert_eq!(c.credit, BELL_CREDIT);
        // Waits that do not pay off halve the credit down to none.
        let mut failed = 0;
        while c.wait() {
            c.waited(false);
            failed += 1;
        }
        assert_eq!(failed, 4, "8, 4, 2, 1: four waits that found nobody");
        assert!(!c.wait());
    }
}
