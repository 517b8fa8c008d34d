//! A NIC port on a real UDP socket: RoCEv2 between processes and hosts.
//!
//! # Model
//! The port binds UDP port 4791 on the address the user gives the NIC. On
//! the way out, the frame the NIC built (IPv4 | UDP | BTH ... ICRC) loses
//! its IPv4 and UDP headers and the rest goes to `dst:4791`; the kernel
//! writes headers again. The ICRC covers some of their fields, so the
//! socket is set up to write exactly what the NIC assumed: Don't Fragment
//! (with which Linux sends identification 0 from an unconnected socket),
//! TTL 64, TOS 0, and the NIC's UDP source port set to the socket's own
//! (`NicConfig::udp_src_port`). A frame too long for the path is refused
//! by the kernel (DF) and counted, never fragmented.
//!
//! Runs of equal datagrams to one address leave as one segmented send
//! (`UDP_SEGMENT`, unless the NIC was started without it), and arrive,
//! where the kernel keeps them together, as one coalesced buffer
//! (`UDP_GRO`) that is cut back into the same datagrams.
//!
//! On the way in, datagrams are taken in batches (`recvmmsg`), by a thread
//! per port or by a thread of the program whose CQ poll found nothing
//! ([`UdpPort::progress`]), one at a time under a lock held until the
//! batch is in the NIC's inbox, so frames reach the NIC in the order the
//! socket gave them. While a program polls the NIC's CQ and a stream
//! waits for ACKs, the thread leaves the socket to the polls, 200 µs at
//! first and twice as long each time the polls outlast it, up to 2 ms,
//! until an arm of a CQ calls it back ([`Core::rx_wait`], decision
//! records 0052 and 0074). Where no program drives the NIC, the thread keeps
//! receiving for a while after a stream's burst rather than wait in the
//! kernel ([`looks_again`], decision record 0064). The receiver puts the IPv4 and UDP headers back from
//! what the kernel tells: source address and port, destination address
//! (`IP_PKTINFO`), length; identification 0 and DF, with TTL and TOS as
//! anything (the ICRC masks them). The rebuilt frames go to the NIC (run
//! by the thread that received them when the NIC is idle), a coalesced
//! run's back to back in one buffer; the NIC checks each frame's ICRC
//! exactly as for a frame from the in-process fabric: a datagram
//! whose addresses, ports or bytes are not those its sender's ICRC covers
//! is dropped and counted there. The engine hashes the ICRCs of two
//! frames at once, on the way out and on the way in (`crate::crc`).

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use doorbell_device::Frame;
use doorbell_wire::{
    IpProtocol, Ipv4Header, Ipv4Repr, ROCE_V2_UDP_PORT, UdpHeader, UdpRepr, ipv4, udp,
};

use crate::datagrams::HEADERS_LEN;
use crate::engine::{Core, RxWait, StreamsSeen};
use crate::fault::Sink;
use crate::inbox::Msg;
use crate::sys::{self, RecvBatch, Taken};

/// Receive buffer asked of the kernel: room for a burst of a few MiB (a
/// 1 MiB READ answered at once) while the receive thread catches up.
const RCVBUF_BYTES: i32 = 8 << 20;
/// How long the receive thread blocks before it looks at its stop flag.
const RECV_TIMEOUT: Duration = Duration::from_millis(200);
/// How long the receive thread blocks while a stream runs, before it
/// looks whether to leave the socket to a program's polls
/// ([`Core::rx_wait`]).
const LOOK_AGAIN: Duration = Duration::from_millis(1);
/// How long a receive thread that runs its NIC alone keeps looking for
/// datagrams after a receive that found a stream's burst, before it waits
/// in the kernel again ([`looks_again`]): longer than the gap between a
/// 64 KiB stream's messages (about 30 µs at 2 GB/s), short beside the 1%
/// of a core an idle device may use once a stream ends.
const KEEP_LOOKING: Duration = Duration::from_micros(50);
/// How long after a program last rang its NIC (a post, an arm) the receive
/// thread takes it for one that drives the NIC ([`RingWatch`]).
const RANG_LATELY: Duration = Duration::from_micros(200);
/// Datagrams a receive must find to be a stream's burst: a latency test's
/// receives find a request and an ACK at most, and its programs keep both
/// cores busy polling, which a looking thread would take turns with.
const STREAM_BURST: usize = 16;
/// After this many empty receives in a row, a caller tries the socket
/// only every this many times ([`UdpPort::progress`]).
const IDLE_EVERY: u32 = 64;

/// What a UDP port counted, beside the NIC's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Datagrams handed to the kernel.
    pub tx_datagrams: u64,
    /// Datagrams the kernel refused (no route, longer than the path MTU).
    pub tx_refused: u64,
    /// Packets not sent because the NIC's memory no longer held their
    /// payload when the port was to send them: a registered buffer
    /// unmapped while a request from it was on its way (the receiver asks
    /// for them again, and the NIC then completes the request in error).
    pub tx_payload_lost: u64,
    /// Datagrams received and passed to the NIC.
    pub rx_datagrams: u64,
    /// Datagrams dropped for being longer than the receive buffer.
    pub rx_truncated: u64,
    /// Datagrams the socket dropped for want of buffer space, as the kernel
    /// last reported it (`SO_RXQ_OVFL`).
    pub rx_socket_drops: u64,
    /// Times the receive thread left the socket to the program's CQ polls
    /// for a while (up to 2 ms each), while a stream waited for the ACKs
    /// those polls take (decision records 0052, 0074).
    pub rx_left_to_polls: u64,
    /// How long those stays were meant to last, in microseconds, summed:
    /// 200 µs at first, twice as long each time the polls outlast one, up
    /// to 2 ms (an arm cuts a stay short, and counts in full here).
    pub rx_left_to_polls_us: u64,
    /// Times a program arming a CQ called that thread back before its time.
    pub rx_called_back: u64,
    /// Times the receive thread kept looking for datagrams after a
    /// stream's burst, instead of waiting in the kernel (decision record
    /// 0064).
    pub rx_looked: u64,
    /// Coalesced receives of more than one datagram whose ICRCs all
    /// matched, taken by the NIC as one train (decision record 0054);
    /// none where a capture or a timeline records each frame.
    pub rx_trains: u64,
    /// Frames put into rings to NICs of this host (shared memory).
    pub shm_tx_frames: u64,
    /// Frames dropped because a peer's ring stayed full.
    pub shm_tx_full_drops: u64,
    /// Times a full ring held the sender back for the whole wait while its
    /// receiver took nothing (a stopped or hung peer); the frames after
    /// such a stall are dropped without waiting until the receiver moves.
    pub shm_tx_stalls: u64,
    /// Frames taken from rings of NICs of this host.
    pub shm_rx_frames: u64,
    /// Frames taken from a ring and dropped: their IPv4 addresses were not
    /// the ring's two ends.
    pub shm_rx_dropped: u64,
    /// Rings made to NICs of this host.
    pub shm_peers_out: u64,
    /// Rings of NICs of this host admitted.
    pub shm_peers_in: u64,
    /// Rings of NICs of this host refused because the NIC held as many as
    /// it takes (64), none from the same address.
    pub shm_peers_refused: u64,
    /// Rings dropped because their positions or a length made no sense
    /// (the peer broke them).
    pub shm_rings_broken: u64,
    /// Times a sender woke a parked receiver thread for a frame (its bell;
    /// a sender held back by a full ring rings too, uncounted).
    pub shm_bells: u64,
    /// Times a sender found its receiver parked, waited, and one of the
    /// receiver's own threads came to the rings first (no bell).
    pub shm_bells_spared: u64,
    /// Times a thread that took and ran frames, its receiver thread
    /// asleep, waited for more and got them (no bell for the peer's
    /// answer).
    pub shm_lingers_paid: u64,
}

#[derive(Default)]
struct Stats {
    tx_datagrams: AtomicU64,
    tx_refused: AtomicU64,
    rx_datagrams: AtomicU64,
    rx_truncated: AtomicU64,
    rx_socket_drops: AtomicU64,
    rx_looked: AtomicU64,
}

// Counters only: no other memory is published through them, so Relaxed.
impl Stats {
    fn snapshot(&self) -> PortCounters {
        PortCounters {
            tx_datagrams: self.tx_datagrams.load(Ordering::Relaxed),
            tx_refused: self.tx_refused.load(Ordering::Relaxed),
            rx_datagrams: self.rx_datagrams.load(Ordering::Relaxed),
            rx_truncated: self.rx_truncated.load(Ordering::Relaxed),
            rx_socket_drops: self.rx_socket_drops.load(Ordering::Relaxed),
            rx_looked: self.rx_looked.load(Ordering::Relaxed),
            ..PortCounters::default()
        }
    }
}

/// The socket of a port and its receive thread.
pub(crate) struct UdpPort {
    sock: Arc<UdpSocket>,
    addr: SocketAddrV4,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    rx: Option<JoinHandle<()>>,
    /// The socket as the other threads that receive read it.
    taker: Arc<Taker>,
}

/// The socket as a thread other than the port's receive thread reads it:
/// a program's CQ poll ([`UdpPort::progress`]), or the NIC's worker while
/// the receive thread stays away (decision record 0075).
struct Taker {
    sock: Arc<UdpSocket>,
    addr: SocketAddrV4,
    stats: Arc<Stats>,
    /// The receive buffers, and the lock whoever receives holds.
    batch: Arc<Mutex<RecvBatch>>,
    /// Callers' receives in a row that found nothing ([`UdpPort::progress`]);
    /// 0 again whenever a receive finds datagrams.
    idle: Arc<AtomicU32>,
}

impl Taker {
    /// Takes what the socket holds into `core`'s inbox without running
    /// it: `None` if another thread is receiving, else whether it took any
    /// (then callers try every time again).
    fn take(&self, core: &Core) -> Option<bool> {
        let mut batch = match self.batch.try_lock() {
            Ok(b) => b,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        let got = take(&self.sock, self.addr, &self.stats, &mut batch, core, false);
        let took = matches!(got, Took::Queued(_) | Took::HandedOver(_));
        if took {
            self.idle.store(0, Ordering::Relaxed);
        }
        Some(took)
    }
}

/// The largest RoCE path MTU that fits an Ethernet interface of `if_mtu`
/// bytes, as the kernel's `iboe_get_mtu` picks the port's active MTU: the
/// interface MTU less 96 bytes of headers (GRH, UDP, BTH, XRC and atomic
/// extension headers, ICRC), rounded down to 256, 512, 1024, 2048 or 4096.
pub(crate) fn roce_mtu(if_mtu: u32) -> u32 {
    let room = if_mtu.saturating_sub(96);
    [4096, 2048, 1024, 512]
        .into_iter()
        .find(|&m| room >= m)
        .unwrap_or(256)
}

/// The RoCE MTU the interface holding `ipv4` allows (`None` if no
/// interface holds it or its MTU cannot be read).
pub(crate) fn interface_roce_mtu(ipv4: [u8; 4]) -> Option<u32> {
    let name = sys::interface_of(ipv4)?;
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?;
    mtu.trim().parse().ok().map(roce_mtu)
}

impl UdpPort {
    /// Binds `ipv4:4791` and sets the socket up; no thread runs yet.
    pub(crate) fn bind(ipv4: [u8; 4]) -> io::Result<Self> {
        let addr = SocketAddrV4::new(Ipv4Addr::from(ipv4), ROCE_V2_UDP_PORT);
        let sock = UdpSocket::bind(addr)?;
        sys::configure(&sock, RCVBUF_BYTES)?;
        sock.set_read_timeout(Some(RECV_TIMEOUT))?;
        let (sock, stats) = (Arc::new(sock), Arc::<Stats>::default());
        Ok(Self {
            sock: sock.clone(),
            addr,
            stats: stats.clone(),
            stop: Arc::default(),
            rx: None,
            taker: Arc::new(Taker {
                sock,
                addr,
                stats,
                batch: Arc::new(Mutex::new(RecvBatch::new())),
                idle: Arc::default(),
            }),
        })
    }

    /// The UDP source port of what this port sends.
    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Starts the receive thread, feeding `to`: the thread runs the NIC
    /// on what it received when no other thread is.
    pub(crate) fn start_rx(&mut self, name: &str, to: Arc<Core>) -> io::Result<()> {
        let rx = RxThread {
            sock: self.sock.clone(),
            local: self.addr,
            stats: self.stats.clone(),
            stop: self.stop.clone(),
            batch: self.taker.batch.clone(),
            idle: self.taker.idle.clone(),
            to,
            look: if doorbell_host::one_cpu() {
                Duration::ZERO
            } else {
                KEEP_LOOKING
            },
        };
        // The worker's receive, while this thread is away (decision record
        // 0075): it runs the frames in its own turn.
        let taker = self.taker.clone();
        rx.to
            .set_port_reader(Box::new(move |core| taker.take(core) == Some(true)));
        let t = std::thread::Builder::new()
            .name(format!("doorbell-{name}-rx"))
            .spawn(move || rx.run())?;
        self.rx = Some(t);
        Ok(())
    }

    /// Takes what the socket holds for the NIC, in the caller's thread, if
    /// no other thread is receiving; tells whether it took any. A program
    /// that polls its CQ then does its NIC's receiving and the work that
    /// follows (ACKs, the next packets of the window) itself, instead of
    /// spinning while the port's thread, on the other core, does it.
    ///
    /// A socket that keeps finding nothing (the NIC's peers are all on
    /// this host, behind shared memory) is tried only every
    /// [`IDLE_EVERY`]th time, so that an idle socket does not cost every
    /// empty CQ poll a system call; any receive that finds datagrams, the
    /// receive thread's included, has callers try every time again.
    pub(crate) fn progress(&self, core: &Core) -> bool {
        core.note_poll();
        let idle = &self.taker.idle;
        let n = idle.load(Ordering::Relaxed);
        // While the receive thread is away, the polls are the socket's only
        // readers: each tries it.
        if n >= IDLE_EVERY && !n.is_multiple_of(IDLE_EVERY) && !core.rx_away() {
            idle.store(n.wrapping_add(1), Ordering::Relaxed);
            return false;
        }
        match self.taker.take(core) {
            Some(true) => {
                // The frames are in the inbox, in order; the NIC runs them
                // with the port's lock let go, so the receive thread is not
                // held.
                core.run();
                true
            }
            Some(false) => {
                idle.store(n.wrapping_add(1).max(1), Ordering::Relaxed);
                false
            }
            None => false,
        }
    }

    /// The sending half, for the device thread or a relay; with `gso`,
    /// runs of equal datagrams go as one segmented send.
    pub(crate) fn sink(&self, gso: bool) -> UdpSink {
        UdpSink {
            gso,
            sock: self.sock.clone(),
            stats: self.stats.clone(),
            out: sys::Outbox::default(),
        }
    }

    pub(crate) fn counters(&self) -> PortCounters {
        self.stats.snapshot()
    }

    /// Stops the receive thread: sets the flag, then wakes the thread by
    /// shutting the socket's receiving side (nothing goes on the wire; the
    /// receive timeout is the fallback), or by unparking it where it stays
    /// off the socket for the program's polls.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.rx.take() {
            sys::shut_rd(&self.sock);
            // A thread off the socket for the program's polls is parked
            // for up to 2 ms: woken, it sees the flag.
            t.thread().unpark();
            let _ = t.join();
        }
    }

    /// Forgets the receive thread without stopping it: in a child after
    /// `fork()` it is the parent's, and does not exist here.
    pub(crate) fn abandon(&mut self) {
        std::mem::forget(self.rx.take());
    }

    /// The socket's descriptor.
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd as _;
        self.sock.as_raw_fd()
    }
}

impl Drop for UdpPort {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the port's receive thread holds: the port's shared parts, the
/// NIC it feeds (`to`) and how long it keeps looking after a stream's
/// burst (`look`).
struct RxThread {
    sock: Arc<UdpSocket>,
    local: SocketAddrV4,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    batch: Arc<Mutex<RecvBatch>>,
    idle: Arc<AtomicU32>,
    to: Arc<Core>,
    look: Duration,
}

impl RxThread {
    /// The port's receive thread: waits in the kernel for the socket to be
    /// readable, takes what it holds and runs the NIC on it. Where a
    /// program polls the NIC it does not spin for the next datagram
    /// (decision record 0042): the program's empty CQ polls take datagrams
    /// as soon as a spinning thread would ([`UdpPort::progress`]), and on a
    /// machine with few cores a spinning thread takes a core from the
    /// work. For the same reason it leaves the socket to such polls while
    /// they take a stream's ACKs (decision record 0052). Where no program
    /// drives the NIC (polls its CQ, posts or arms), it keeps looking for
    /// `look` after each receive that found a stream's burst
    /// ([`looks_again`], decision record 0064); `look` is zero where the
    /// process may run on one CPU only.
    fn run(self) {
        let Self {
            ref sock,
            local,
            ref stats,
            ref stop,
            ref batch,
            ref idle,
            ref to,
            look,
        } = self;
        let mut seen = StreamsSeen::new();
        // When a receive last found a stream's burst.
        let mut found_at: Option<std::time::Instant> = None;
        let mut rings = RingWatch::default();
        let mut was_looking = false;
        while !stop.load(Ordering::Relaxed) {
            // Wait without the lock, so that a caller may receive meanwhile;
            // then receive under it.
            let wait = match to.rx_wait(&mut seen) {
                RxWait::LeaveToPolls => {
                    to.stay_away(&mut seen);
                    continue;
                }
                RxWait::Soon => LOOK_AGAIN,
                RxWait::Long => RECV_TIMEOUT,
            };
            if to.waited_out_backlog() {
                continue;
            }
            let found_ago = found_at.map(|t| t.elapsed());
            let driven = || to.polled_lately() || rings.rang_lately(to.rings());
            let looking = looks_again(look, found_ago, driven);
            if looking && !was_looking {
                stats.rx_looked.fetch_add(1, Ordering::Relaxed);
            }
            was_looking = looking;
            if !looking && !sys::wait_readable(sock, wait) {
                continue;
            }
            // A test's hold, made while the thread waited in the kernel.
            if to.held_away() {
                continue;
            }
            let got = {
                let mut b = batch.lock().unwrap_or_else(|e| e.into_inner());
                take(sock, local, stats, &mut b, to, true)
            };
            let n = match got {
                // The socket is gone: stop rather than spin.
                Took::Gone => return,
                Took::Nothing => continue,
                // The worker runs a full batch; this thread goes back to
                // the socket for the next.
                Took::HandedOver(n) => n,
                Took::Queued(n) => {
                    to.run();
                    n
                }
            };
            idle.store(0, Ordering::Relaxed);
            if n >= STREAM_BURST {
                found_at = Some(std::time::Instant::now());
            }
        }
    }
}

/// When the receive thread last saw the count of a program's rings of its
/// NIC ([`Core::rings`]) move: the count is kept by the NIC's turns, and
/// read here only when the thread would look, so that a doorbell costs no
/// clock reading.
#[derive(Default)]
struct RingWatch {
    seen: u64,
    moved_at: Option<std::time::Instant>,
}

impl RingWatch {
    /// Whether the count `rings` moved within [`RANG_LATELY`]: a program
    /// that posts or arms drives its NIC, and is likely busy on a core
    /// itself (a latency test polls memory between its posts).
    fn rang_lately(&mut self, rings: u64) -> bool {
        let now = std::time::Instant::now();
        if rings != self.seen {
            self.seen = rings;
            self.moved_at = Some(now);
        }
        self.moved_at
            .is_some_and(|t| now.duration_since(t) < RANG_LATELY)
    }
}

/// Whether the receive thread receives again at once rather than wait in
/// the kernel: within `look` of a receive that found a stream's burst
/// ([`STREAM_BURST`], `found_ago`), where no program drives the NIC
/// (`driven()`, asked only then: it polled the CQ, posted or armed
/// lately). Such a thread is the only one that receives for its NIC; in a
/// stream, datagrams that come while it looks find no waiter to wake,
/// where each wake-up is an interrupt between CPUs that the sender's
/// kernel pays for in its send (on a VM, through the hypervisor).
fn looks_again(look: Duration, found_ago: Option<Duration>, driven: impl FnOnce() -> bool) -> bool {
    found_ago.is_some_and(|ago| ago < look) && !driven()
}

/// What one [`take`] did with the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Took {
    /// Nothing to take (or the NIC is backlogged).
    Nothing,
    /// Frames queued in the NIC's inbox, for the caller to run
    /// ([`Core::run`]) once it let the port's lock go.
    Queued(usize),
    /// A full batch of frames handed to the NIC's worker, which runs them
    /// while the receive thread goes back to the socket.
    HandedOver(usize),
    /// The socket failed for good.
    Gone,
}

/// One `recvmmsg` of what the socket holds, without waiting, rebuilt into
/// frames for `to`'s inbox (the caller holds `batch`'s lock meanwhile).
/// `thread`: the port's own receive thread, which hands a full batch to
/// the NIC's worker and goes back to the socket.
fn take(
    sock: &UdpSocket,
    local: SocketAddrV4,
    stats: &Stats,
    batch: &mut RecvBatch,
    to: &Core,
    thread: bool,
) -> Took {
    // A NIC behind on what it was given takes no more for now: the
    // socket's buffer holds what comes meanwhile, and drops (and counts)
    // what overflows it, as a NIC's ring would.
    if to.backlogged() {
        return Took::Nothing;
    }
    let n = match batch.recv(sock) {
        Ok(n) => n,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
            ) =>
        {
            return Took::Nothing;
        }
        Err(_) => return Took::Gone,
    };
    let mut runs = crate::buffers::frame_list();
    runs.reserve(n);
    let mut got = 0;
    for i in 0..n {
        let Some(meta) = batch.meta(i) else {
            break;
        };
        if let Some(d) = meta.socket_drops {
            stats.rx_socket_drops.store(u64::from(d), Ordering::Relaxed);
        }
        if meta.truncated {
            stats.rx_truncated.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if meta.len == 0 {
            // Nothing a NIC would send.
            continue;
        }
        let dst = SocketAddrV4::new(meta.dst.unwrap_or(*local.ip()), local.port());
        // The headers before each datagram, made once per length.
        let mut made: Option<(usize, [u8; HEADERS_LEN])> = None;
        let headers = |len| match made {
            Some((l, h)) if l == len => h,
            _ => {
                let mut h = [0u8; HEADERS_LEN];
                write_headers(&mut h, meta.src, dst, len);
                made = Some((len, h));
                h
            }
        };
        let spare = || crate::buffers::run_buffer(sys::RECV_SPAN);
        match batch.take(i, headers, spare) {
            // A run where the receive put it: its frames, nothing copied.
            Some(Taken::Frames { buf, count }) => {
                runs.push(buf);
                got += count;
            }
            // A datagram alone, or a run the receive did not expect:
            // rebuilt into frames. A coalesced run is the datagrams it was
            // cut from, in order.
            Some(Taken::Bytes(payload)) => {
                let seg = meta.segment.unwrap_or(payload.len()).max(1);
                got += rebuild_run(meta.src, dst, payload, seg, &mut runs);
            }
            None => break,
        }
    }
    if got == 0 {
        crate::buffers::recycle_list(runs);
        return Took::Nothing;
    }
    stats.rx_datagrams.fetch_add(got as u64, Ordering::Relaxed);
    // A full batch: more are waiting in the socket, and the receive
    // thread is worth more there (the worker takes these).
    if thread && n == sys::RECV_BATCH {
        to.hand_over(Msg::PortRuns(runs, got));
        Took::HandedOver(got)
    } else {
        to.enqueue(Msg::PortRuns(runs, got));
        Took::Queued(got)
    }
}

/// The frames the sender's NIC built, from a run of datagrams the kernel
/// coalesced (`seg` bytes each, the last maybe fewer; a datagram alone is
/// a run of one) and what the kernel said of them: IPv4 (identification
/// 0, DF, TTL 64, TOS 0) and UDP headers (checksum 0) before each
/// datagram, the frames back to back in one buffer pushed onto `runs`
/// ([`Msg::PortRuns`]). Returns how many frames it holds. The datagrams of
/// a run have one length, so their headers are made once, the IPv4
/// checksum with them, and copied before each.
fn rebuild_run(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    run: &[u8],
    seg: usize,
    runs: &mut Vec<Vec<u8>>,
) -> usize {
    let count = run.len().div_ceil(seg);
    let mut b = crate::buffers::run_buffer(run.len() + count * HEADERS_LEN);
    let mut headers = [0u8; HEADERS_LEN];
    // The datagram length `headers` were made for.
    let mut made_for = None;
    for d in run.chunks(seg) {
        if made_for != Some(d.len()) {
            write_headers(&mut headers, src, dst, d.len());
            made_for = Some(d.len());
        }
        b.extend_from_slice(&headers);
        b.extend_from_slice(d);
    }
    runs.push(b);
    count
}

/// Writes the IPv4 and UDP headers of a datagram of `len` bytes from `src`
/// to `dst` into `h`.
fn write_headers(h: &mut [u8; HEADERS_LEN], src: SocketAddrV4, dst: SocketAddrV4, len: usize) {
    Ipv4Repr {
        src_addr: src.ip().octets(),
        dst_addr: dst.ip().octets(),
        protocol: IpProtocol::Udp,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
        ttl: 64,
        payload_len: udp::HEADER_LEN + len,
    }
    .emit(&mut Ipv4Header::new_unchecked(&mut h[..]));
    UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: len,
    }
    .emit(&mut UdpHeader::new_unchecked(&mut h[ipv4::HEADER_LEN..]));
}

/// Sends frames as datagrams through the port's socket.
pub(crate) struct UdpSink {
    gso: bool,
    sock: Arc<UdpSocket>,
    stats: Arc<Stats>,
    out: sys::Outbox,
}

impl Sink for UdpSink {
    fn send(&mut self, frames: &mut Vec<Frame>, _: std::time::Instant, spent: &mut Vec<Vec<u8>>) {
        // Only IPv4 frames with 20-byte headers are ever built; anything
        // else could not be sent as the NIC built it.
        // A run of datagrams ([`Frame::segment`]) goes as its datagrams,
        // each its own piece of the run's buffer: the kernel's send then
        // copies from one buffer in pieces of a datagram, as it does from
        // frames of their own (in one piece it cost more, decision record
        // 0073).
        let msgs = frames
            .iter()
            .filter(|f| f.bytes.len() > HEADERS_LEN && f.bytes[0] == 0x45)
            .flat_map(|f| {
                let dst = SocketAddrV4::new(Ipv4Addr::from(f.dst), ROCE_V2_UDP_PORT);
                let body = &f.bytes[HEADERS_LEN..];
                let seg = if f.segment > 0 {
                    f.segment as usize
                } else {
                    body.len()
                };
                body.chunks(seg.max(1)).map(move |d| (dst, d))
            });
        // Every datagram handed over is sent or refused: the rest of the
        // frames' are those skipped, refused too.
        let (sent, _) = self.out.send(&self.sock, msgs, self.gso);
        let all: usize = frames.iter().map(|f| f.packets() as usize).sum();
        self.stats
            .tx_datagrams
            .fetch_add(sent as u64, Ordering::Relaxed);
        self.stats
            .tx_refused
            .fetch_add(all.saturating_sub(sent) as u64, Ordering::Relaxed);
        spent.extend(frames.drain(..).map(|f| f.bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_thread_looks_again_only_in_a_stream_nobody_polls_for() {
        let us = Duration::from_micros;
        let polls = || true;
        let no_polls = || false;
        assert!(looks_again(KEEP_LOOKING, Some(us(0)), no_polls));
        assert!(looks_again(KEEP_LOOKING, Some(us(49)), no_polls));
        assert!(
            !looks_again(KEEP_LOOKING, Some(us(50)), no_polls),
            "too long ago"
        );
        assert!(
            !looks_again(KEEP_LOOKING, None, no_polls),
            "nothing found yet"
        );
        assert!(
            !looks_again(KEEP_LOOKING, Some(us(0)), polls),
            "a program drives the NIC"
        );
        // On one CPU the look is zero: never.
        assert!(!looks_again(Duration::ZERO, Some(us(0)), no_polls));
        // Whether a program drives the NIC is asked only within the look.
        assert!(!looks_again(KEEP_LOOKING, None, || unreachable!()));
    }

    #[test]
    fn the_roce_mtu_is_the_kernels_pick_for_the_interface_mtu() {
        // iboe_get_mtu: 96 bytes of headers, then the IB MTU that fits.
        assert_eq!(roce_mtu(65536), 4096, "loopback");
        assert_eq!(roce_mtu(9000), 4096, "jumbo frames");
        assert_eq!(roce_mtu(4192), 4096);
        assert_eq!(roce_mtu(4191), 2048);
        assert_eq!(roce_mtu(1500), 1024, "Ethernet");
        assert_eq!(roce_mtu(1120), 1024);
        assert_eq!(roce_mtu(1119), 512);
        assert_eq!(roce_mtu(500), 256);
    }

    #[test]
    fn a_loopback_address_is_los_and_its_mtu_allows_4096() {
        assert_eq!(sys::interface_of([127, 0, 88, 2]).as_deref(), Some("lo"));
        assert_eq!(interface_roce_mtu([127, 0, 88, 2]), Some(4096));
        assert_eq!(
            sys::interface_of([203, 0, 113, 9]),
            None,
            "TEST-NET-3 is nobody's"
        );
    }
    use doorbell_types::{Psn, Qpn};
    use doorbell_wire::{BthOpcode, BthRepr, ExtHeaders, RoceIp, RoceRepr, parse_roce};

    #[test]
    fn the_socket_writes_the_header_fields_the_icrc_assumed() {
        let p = UdpPort::bind([127, 0, 9, 1]).unwrap();
        let opt = |level, name| sys::getsockopt_int(&p.sock, level, name).unwrap();
        assert_eq!(
            opt(libc::IPPROTO_IP, libc::IP_MTU_DISCOVER),
            libc::IP_PMTUDISC_DO
        );
        assert_eq!(opt(libc::IPPROTO_IP, libc::IP_TTL), 64);
        assert_eq!(opt(libc::IPPROTO_IP, libc::IP_TOS), 0);
        assert_eq!(opt(libc::IPPROTO_IP, libc::IP_PKTINFO), 1);
        assert_eq!(p.port(), ROCE_V2_UDP_PORT);
        assert!(
            matches!(UdpPort::bind([127, 0, 9, 1]), Err(e) if e.kind() == io::ErrorKind::AddrInUse)
        );
    }

    #[test]
    fn a_rebuilt_frame_is_byte_for_byte_the_one_the_nic_built() {
        let repr = RoceRepr {
            ip: RoceIp::v4([127, 0, 0, 2], [127, 0, 0, 3]),
            src_port: ROCE_V2_UDP_PORT,
            bth: BthRepr::new(BthOpcode::RcSendOnly, Qpn::new(0x123), Psn::new(77)),
            ext: ExtHeaders::default(),
        };
        let mut f = Vec::new();
        repr.emit_to_vec(b"hello world", &mut f).unwrap();
        let src = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), ROCE_V2_UDP_PORT);
        let dst = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), ROCE_V2_UDP_PORT);
        let g = rebuild(src, dst, &f[HEADERS_LEN..]);
        assert_eq!(g, f);
        assert!(parse_roce(&g).is_ok());
        // Any other source port than the one the sender's ICRC covers fails.
        let other = SocketAddrV4::new(*src.ip(), 50000);
        assert_eq!(
            parse_roce(&rebuild(other, dst, &f[HEADERS_LEN..])),
            Err(doorbell_wire::Error::BadIcrc)
        );
    }

    /// One datagram, rebuilt as a run of one.
    fn rebuild(src: SocketAddrV4, dst: SocketAddrV4, datagram: &[u8]) -> Vec<u8> {
        let mut runs = Vec::new();
        assert_eq!(
            rebuild_run(src, dst, datagram, datagram.len(), &mut runs),
            1
        );
        assert_eq!(runs.len(), 1);
        let run = runs.pop().unwrap();
        assert_eq!(crate::inbox::next_frame(&run, 0), Some(0..run.len()));
        run
    }

    #[test]
    fn a_coalesced_run_is_rebuilt_into_the_frames_it_was_cut_from() {
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 49152);
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), ROCE_V2_UDP_PORT);
        // Three packets of one length and a shorter last one, as a
        // segmented send carries them.
        let frames: Vec<Vec<u8>> = [(0, 64), (1, 64), (2, 64), (3, 20)]
            .into_iter()
            .map(|(psn, len)| {
                let repr = RoceRepr {
                    ip: RoceIp::v4(src.ip().octets(), dst.ip().octets()),
                    src_port: src.port(),
                    bth: BthRepr::new(BthOpcode::RcSendMiddle, Qpn::new(7), Psn::new(psn)),
                    ext: ExtHeaders::default(),
                };
                let mut f = Vec::new();
                repr.emit_to_vec(&vec![psn as u8; len], &mut f).unwrap();
                f
            })
            .collect();
        let seg = frames[0].len() - HEADERS_LEN;
        let run: Vec<u8> = frames
            .iter()
            .flat_map(|f| f[HEADERS_LEN..].to_vec())
            .collect();
        let mut runs = Vec::new();
        assert_eq!(rebuild_run(src, dst, &run, seg, &mut runs), 4);
        let [rebuilt] = &runs[..] else {
            panic!("one buffer for the run, got {}", runs.len());
        };
        // Walked as the engine walks it: each frame where it lies, then
        // nothing.
        let got: Vec<Vec<u8>> = std::iter::successors(crate::inbox::next_frame(rebuilt, 0), |f| {
            crate::inbox::next_frame(rebuilt, f.end)
        })
        .map(|f| rebuilt[f].to_vec())
        .collect();
        assert_eq!(got, frames);
        assert!(got.iter().all(|g| parse_roce(g).is_ok()));
    }
}
