//! Frame buffers, reused by the thread that frees them: a port that takes
//! frames in, and the NIC it feeds, then allocate nothing for the next.
//! Ports take buffers for the frames they receive ([`buffer`]); the engine
//! gives back each frame's buffer once the NIC has taken it in
//! ([`recycle`]); a sink that copied frames out returns their buffers to
//! the engine, which gives them to the NIC that built them (the device's
//! own [`Nic::recycle`]), and lends it spares from here when it has too
//! few ([`lend`]). A buffer never handed back is simply freed.
//!
//! Each thread keeps its own spares (at most [`KEEP`], none larger than
//! [`LARGEST`] bytes), and the process up to [`SHARED_KEEP`] more that any
//! thread may take: a thread with none of its own takes from there. A
//! thread that gathers [`OWN`] + [`BATCH`] of its own hands all but
//! [`OWN`] there at once while they are fewer than [`SHARED_LOW`]; any
//! thread does so once its own are full. A buffer that one thread fills
//! and another frees (a port's receive thread takes a frame, the program
//! thread that ran the NIC recycles it) then goes round instead of being
//! allocated by the one and freed by the other, and a thread that wakes
//! now and then finds spares waiting; a thread whose buffers go round (a
//! ping-pong run in the program's thread) keeps them without the store's
//! lock. [`lend`] takes what a NIC needs from the store under one
//! taking of its lock, not one per buffer. No thread keeps more than about a
//! hundred kilobytes of frames (16 of [`LARGEST`] at most), nor the
//! process more than about three megabytes beside them. A port's coalesced
//! datagrams are rebuilt as frames back to back in one buffer
//! ([`run_buffer`], [`recycle_run`]), kept the same way: four at most
//! (of [`LARGEST_RUN`]) by a thread, four by the process. Batches of frames
//! go round the same way, in lists ([`frame_list`], [`recycle_list`]; and
//! [`emitted_list`], [`recycle_emitted`] between NICs of this process).
//! Reuse changes only where the bytes live, never what they are: a buffer
//! comes out empty from [`buffer`]. Spares keep their length until then,
//! so that a NIC that builds a frame over a lent one writes its bytes
//! without clearing them first.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use doorbell_device::{Frame, Nic, PacketHeaders};

/// The least room a buffer is given: any frame of MTU 4096 with its
/// headers fits, so that a buffer that carried an ACK carries a full packet
/// next without growing (buffers go round: a frame received, recycled,
/// lent to the NIC for a frame it builds).
const ROOM: usize = 4096 + 128;
/// Most spare buffers a thread keeps.
const KEEP: usize = 16;
/// Most spare buffers the process keeps for any thread.
const SHARED_KEEP: usize = 512;
/// Spares the process keeps for any thread before a thread that frees more
/// than it takes keeps its own.
const SHARED_LOW: usize = 16;
/// The largest buffer kept (a frame of MTU 4096 with its headers fits).
const LARGEST: usize = 6 * 1024;

/// Most spare frame lists a thread keeps, and the process for any thread.
const KEEP_LISTS: usize = 16;
/// Lists the process keeps for any thread before a thread that frees more
/// than it takes keeps its own.
const SHARED_LOW_LISTS: usize = 4;
/// The longest frame list kept (a port's receive batch, a ring's drain).
const LONGEST_LIST: usize = 256;

/// Spares a thread keeps before it fills the process's reserve
/// ([`give_to`]).
const OWN: usize = 4;
/// Spares past [`OWN`] a thread gathers before it hands them to the
/// process's reserve at once ([`give_to`]).
const BATCH: usize = 4;

/// Most spare run buffers a thread keeps, and the process for any thread.
const KEEP_RUNS: usize = 4;
/// Run buffers the process keeps for any thread before a thread that frees
/// more than it takes keeps its own.
const SHARED_LOW_RUNS: usize = 2;
/// The largest run buffer kept: a coalesced run of 64 KiB of datagrams
/// with the headers put back before each (at most 64 of them).
const LARGEST_RUN: usize = 65536 + 64 * 64;

thread_local! {
    static SPARE: Cell<Vec<Vec<u8>>> = const { Cell::new(Vec::new()) };
    static SPARE_LISTS: Cell<Vec<Vec<Vec<u8>>>> = const { Cell::new(Vec::new()) };
    static SPARE_EMITTED: Cell<Vec<Vec<Frame>>> = const { Cell::new(Vec::new()) };
    static SPARE_RUNS: Cell<Vec<Vec<u8>>> = const { Cell::new(Vec::new()) };
    static SPARE_HEADERS: Cell<Vec<Vec<PacketHeaders>>> = const { Cell::new(Vec::new()) };
}

/// A bounded store of spares any thread may give to and take from, last
/// in first out (the most recently used, still in a cache, first). Its
/// room is taken once, when it is made.
struct Shared<T> {
    items: Mutex<Vec<T>>,
    /// How many it holds, written under the lock: an empty store, or one
    /// below its low mark, is seen without taking it.
    len: AtomicUsize,
    keep: usize,
    /// Times the lock was taken, for the tests.
    #[cfg(test)]
    locked: AtomicUsize,
    /// Below this many, a thread that holds [`OWN`] of its own gives here
    /// before it keeps more.
    low: usize,
}

impl<T> Shared<T> {
    fn new(keep: usize, low: usize) -> Self {
        Self {
            items: Mutex::new(Vec::with_capacity(keep)),
            len: AtomicUsize::new(0),
            keep,
            #[cfg(test)]
            locked: AtomicUsize::new(0),
            low,
        }
    }

    fn items(&self) -> std::sync::MutexGuard<'_, Vec<T>> {
        #[cfg(test)]
        self.locked.fetch_add(1, Ordering::Relaxed);
        // Nothing panics with the lock held: a poisoned store is whole.
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    fn take(&self) -> Option<T> {
        if self.len() == 0 {
            return None;
        }
        let mut items = self.items();
        let v = items.pop();
        self.len.store(items.len(), Ordering::Relaxed);
        v
    }

    /// Keeps `v`, or hands it back if the store is full (for the tests;
    /// threads give through [`Self::give_many`]).
    #[cfg(test)]
    fn give(&self, v: T) -> Result<(), T> {
        let mut items = self.items();
        if items.len() >= self.keep {
            return Err(v);
        }
        items.push(v);
        self.len.store(items.len(), Ordering::Relaxed);
        Ok(())
    }

    /// Keeps what `vs` yields, under one taking of the lock, as far as it
    /// has room; the rest is dropped.
    fn give_many(&self, vs: impl Iterator<Item = T>) {
        let mut items = self.items();
        let room = self.keep.saturating_sub(items.len());
        items.extend(vs.take(room));
        self.len.store(items.len(), Ordering::Relaxed);
    }

    /// Calls `f` with up to `n` of its items, last in first out, under one
    /// taking of the lock.
    fn take_many(&self, n: usize, mut f: impl FnMut(T)) {
        if n == 0 || self.len() == 0 {
            return;
        }
        let mut items = self.items();
        let keep = items.len().saturating_sub(n);
        // (The newest last: taken first, as one `take` after another would.)
        for v in items.drain(keep..).rev() {
            f(v);
        }
        self.len.store(items.len(), Ordering::Relaxed);
    }
}

/// The process's spare stores, every one locked: held across a `fork()`
/// by the forking thread (the process module's fork handlers), so that a
/// child never finds a store held by a thread it does not have, which
/// would hang its first NIC's first frame.
pub(crate) struct StoresHeld {
    _buffers: Held<Vec<u8>>,
    _lists: Held<Vec<Vec<u8>>>,
    _runs: Held<Vec<u8>>,
    _emitted: Held<Vec<Frame>>,
    _headers: Held<Vec<PacketHeaders>>,
}

/// One store, locked.
type Held<T> = MutexGuard<'static, Vec<T>>;

/// Locks every spare store, in one order (nothing takes two of them
/// otherwise).
pub(crate) fn hold_stores() -> StoresHeld {
    StoresHeld {
        _buffers: shared_buffers().items(),
        _lists: shared_lists().items(),
        _runs: shared_runs().items(),
        _emitted: shared_emitted().items(),
        _headers: shared_headers().items(),
    }
}

fn shared_buffers() -> &'static Shared<Vec<u8>> {
    static SHARED: OnceLock<Shared<Vec<u8>>> = OnceLock::new();
    SHARED.get_or_init(|| Shared::new(SHARED_KEEP, SHARED_LOW))
}

fn shared_lists() -> &'static Shared<Vec<Vec<u8>>> {
    static SHARED: OnceLock<Shared<Vec<Vec<u8>>>> = OnceLock::new();
    SHARED.get_or_init(|| Shared::new(KEEP_LISTS, SHARED_LOW_LISTS))
}

fn shared_runs() -> &'static Shared<Vec<u8>> {
    static SHARED: OnceLock<Shared<Vec<u8>>> = OnceLock::new();
    SHARED.get_or_init(|| Shared::new(KEEP_RUNS, SHARED_LOW_RUNS))
}

fn shared_emitted() -> &'static Shared<Vec<Frame>> {
    static SHARED: OnceLock<Shared<Vec<Frame>>> = OnceLock::new();
    SHARED.get_or_init(|| Shared::new(KEEP_LISTS, SHARED_LOW_LISTS))
}

fn shared_headers() -> &'static Shared<Vec<PacketHeaders>> {
    static SHARED: OnceLock<Shared<Vec<PacketHeaders>>> = OnceLock::new();
    SHARED.get_or_init(|| Shared::new(KEEP_LISTS, SHARED_LOW_LISTS))
}

/// One of this thread's spares in `local`, else one of the process's.
fn take<T: Send + 'static>(
    local: &'static std::thread::LocalKey<Cell<Vec<T>>>,
    shared: &Shared<T>,
) -> Option<T> {
    with_local(local, |l| take_from(l, shared)).flatten()
}

/// Keeps `v` as [`give_to`] does, with this thread's spares in `local`.
fn give<T: Send + 'static>(
    local: &'static std::thread::LocalKey<Cell<Vec<T>>>,
    keep: usize,
    shared: &Shared<T>,
    v: T,
) {
    // During the thread's teardown `v` is simply freed.
    let _ = with_local(local, move |l| give_to(l, keep, shared, v));
}

/// Runs `f` on this thread's spares in `local`, unless the thread is
/// being torn down.
fn with_local<T: 'static, R>(
    local: &'static std::thread::LocalKey<Cell<Vec<T>>>,
    f: impl FnOnce(&mut Vec<T>) -> R,
) -> Option<R> {
    local
        .try_with(|s| {
            let mut spare = s.take();
            let r = f(&mut spare);
            s.set(spare);
            r
        })
        .ok()
}

/// The last of `local`, else one of `shared`.
fn take_from<T>(local: &mut Vec<T>, shared: &Shared<T>) -> Option<T> {
    local.pop().or_else(|| shared.take())
}

/// Keeps `v`: in `local`, until `local` holds [`OWN`] + [`BATCH`] while
/// `shared` holds fewer than its low mark, or until `local` is full
/// (`keep`); then `v` and all of `local` but its first [`OWN`] go to
/// `shared` at once, under one taking of its lock (what it has no room for
/// is freed).
///
/// A thread that frees more than it takes (a thread that runs a NIC
/// another thread's port feeds, or the receiving NIC of a stream between
/// NICs of one process) fills the store's reserve a batch at a time: the
/// thread that takes finds its buffers there, and the store's lock and
/// lines cross between the two threads' cores once a batch, not once a
/// buffer (decision record 0061). A thread that frees as much as it takes
/// (a ping-pong run in the program's thread) keeps its few without the
/// lock. A thread with fewer than [`OWN`] keeps what it frees: one whose
/// own ran out takes from the store and gives back to itself, rather than
/// taking and giving through the lock for good.
fn give_to<T>(local: &mut Vec<T>, keep: usize, shared: &Shared<T>, v: T) {
    let full = local.len() >= keep;
    let batch = local.len() + 1 >= OWN + BATCH && shared.len() < shared.low;
    if full || batch {
        let own = OWN.min(local.len());
        shared.give_many(local.drain(own..).chain(std::iter::once(v)));
        return;
    }
    // Room for all at once: a thread's spares grow no further.
    local.reserve_exact(keep - local.len());
    local.push(v);
}

/// An empty list for a batch of frames on its way to a NIC's inbox: a
/// spare if there is one.
pub(crate) fn frame_list() -> Vec<Vec<u8>> {
    take(&SPARE_LISTS, shared_lists()).unwrap_or_default()
}

/// Gives a frame list back for reuse, once its frames are taken out (any
/// left are dropped with it).
pub(crate) fn recycle_list(mut l: Vec<Vec<u8>>) {
    if l.capacity() == 0 || l.capacity() > LONGEST_LIST {
        return;
    }
    l.clear();
    give(&SPARE_LISTS, KEEP_LISTS, shared_lists(), l);
}

/// An empty list for a batch of frames one NIC of this process hands
/// another ([`crate::inbox::Msg::EmittedFrames`]): a spare if there is one.
pub(crate) fn emitted_list() -> Vec<Frame> {
    take(&SPARE_EMITTED, shared_emitted()).unwrap_or_default()
}

/// Gives a list of [`emitted_list`] back for reuse, once its frames are
/// taken out (any left are dropped with it).
pub(crate) fn recycle_emitted(mut l: Vec<Frame>) {
    if l.capacity() == 0 || l.capacity() > LONGEST_LIST {
        return;
    }
    l.clear();
    give(&SPARE_EMITTED, KEEP_LISTS, shared_emitted(), l);
}

/// An empty buffer with room for at least `len` bytes, and at least
/// [`ROOM`]: a spare if there is one.
pub(crate) fn buffer(len: usize) -> Vec<u8> {
    let mut b = take(&SPARE, shared_buffers()).unwrap_or_default();
    b.clear();
    b.reserve(len.max(ROOM));
    b
}

/// Gives `b` back for reuse; frees it if the spares are full or `b` is too
/// large to keep.
pub(crate) fn recycle(b: Vec<u8>) {
    if b.capacity() == 0 || b.capacity() > LARGEST {
        return;
    }
    give(&SPARE, KEEP, shared_buffers(), b);
}

/// An empty buffer with room for at least `len` bytes, for a run of
/// frames back to back (a port's coalesced datagrams,
/// [`crate::inbox::Msg::PortRuns`]): a frame buffer if `len` fits one,
/// else a spare run buffer if there is one. Give it back with
/// [`recycle_run`].
pub(crate) fn run_buffer(len: usize) -> Vec<u8> {
    if len <= LARGEST {
        return buffer(len);
    }
    let mut b = take(&SPARE_RUNS, shared_runs()).unwrap_or_default();
    b.clear();
    b.reserve(len);
    b
}

/// Whether `b` is a frame buffer, one [`recycle`] keeps: what
/// [`run_buffer`] gives for a run that fits one (a datagram alone).
pub(crate) fn holds_a_frame(b: &Vec<u8>) -> bool {
    b.capacity() <= LARGEST
}

/// Gives back a buffer of [`run_buffer`]: to the frame buffers or to the
/// run buffers, as its size says; frees it if those are full or it is too
/// large to keep.
pub(crate) fn recycle_run(b: Vec<u8>) {
    if holds_a_frame(&b) {
        recycle(b);
    } else if b.capacity() <= LARGEST_RUN {
        give(&SPARE_RUNS, KEEP_RUNS, shared_runs(), b);
    }
}

/// Hands up to `n` spares to `nic`, as many as it keeps, for the frames it
/// builds: this thread's first, then the process's, taken under one lock.
pub(crate) fn lend(nic: &mut Nic, n: usize) {
    let want = n.min(nic.spare_room());
    let _ = with_local(&SPARE, |l| {
        let own = want.min(l.len());
        for b in l.drain(l.len() - own..).rev() {
            nic.recycle(b);
        }
        shared_buffers().take_many(want - own, |b| nic.recycle(b));
    });
}

/// Gives the list of headers of a frame a NIC took in
/// ([`doorbell_device::Frame::headers`]) back for reuse by the NIC that
/// builds the next such frame ([`lend_headers`]).
pub(crate) fn recycle_headers(mut l: Vec<PacketHeaders>) {
    if l.capacity() == 0 {
        return;
    }
    l.clear();
    give(&SPARE_HEADERS, KEEP_LISTS, shared_headers(), l);
}

/// Lends `nic` up to `n` spare lists of headers
/// ([`Nic::recycle_headers`]), as far as it has room.
pub(crate) fn lend_headers(nic: &mut Nic, n: usize) {
    // (A NIC that hands none over has no room: nothing is looked at.)
    for _ in 0..n.min(nic.header_list_room()) {
        let Some(l) = take(&SPARE_HEADERS, shared_headers()) else {
            return;
        };
        nic.recycle_headers(l);
    }
}

/// Hands the buffers of frames a port copied out (`spent`) to `nic`, the
/// NIC that built them, for the frames it builds next, as far as its
/// spares have room; the rest to this thread's ([`recycle`]).
pub(crate) fn give_back(nic: &mut Nic, spent: &mut Vec<Vec<u8>>) {
    for b in spent.drain(..) {
        if nic.spare_room() > 0 {
            nic.recycle(b);
        } else {
            recycle(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread holds the process's store of spare buffers when another
    /// forks: the child, which has no copy of that thread, must find the
    /// store free (the fork waits for it), not hang on its first buffer.
    /// Runs in a process of its own, where no other test's thread holds a
    /// lock of its own across the fork.
    #[test]
    fn a_child_forked_while_a_store_is_held_finds_it_free() {
        if !doorbell_cprobe::alone::in_own_process(
            "buffers::tests::a_child_forked_while_a_store_is_held_finds_it_free",
        ) {
            return;
        }
        // Spares in the store, so that taking one takes its lock.
        shared_buffers().give_many((0..4).map(|_| Vec::with_capacity(64)));
        crate::process::os::tests::a_child_forked_while_held_finds_it_free(
            || shared_buffers().items(),
            || shared_buffers().take().is_some(),
            "the spare buffers' store",
        );
        doorbell_cprobe::alone::passed();
    }

    /// `n` rounds of a ping-pong's thread: two spares taken, two given
    /// back (its own kept up to 16).
    fn ping_pong_rounds(local: &mut Vec<i32>, shared: &Shared<i32>, n: usize) {
        for _ in 0..n {
            let a = take_from(local, shared).expect("a spare");
            let b = take_from(local, shared).expect("a spare");
            give_to(local, 16, shared, a);
            give_to(local, 16, shared, b);
        }
    }

    #[test]
    fn a_thread_that_frees_more_than_it_takes_fills_the_reserve_first() {
        let shared = Shared::new(8, 4);
        let mut local = Vec::new();
        for i in 0..4 {
            give_to(&mut local, 4, &shared, i);
        }
        assert_eq!(
            (shared.len(), &local[..]),
            (0, &[0, 1, 2, 3][..]),
            "its first: its own"
        );
        for i in 4..8 {
            give_to(&mut local, 4, &shared, i);
        }
        assert_eq!(shared.len(), 4, "then the reserve, to its low mark");
        for i in 8..13 {
            give_to(&mut local, 4, &shared, i);
        }
        assert_eq!(
            (shared.len(), local.len()),
            (8, 4),
            "then the shared store, up to its bound; the rest is freed"
        );
        // The thread's own first, then the shared ones, each last in
        // first out.
        let taken: Vec<i32> = std::iter::from_fn(|| take_from(&mut local, &shared)).collect();
        assert_eq!(taken, [3, 2, 1, 0, 11, 10, 9, 8, 7, 6, 5, 4]);
    }

    #[test]
    fn a_thread_that_only_frees_takes_the_stores_lock_once_a_batch() {
        let shared = Shared::new(SHARED_KEEP, SHARED_LOW);
        let mut local = Vec::new();
        let before = shared.locked.load(Ordering::Relaxed);
        let n = 200;
        for i in 0..n {
            give_to(&mut local, KEEP, &shared, i);
            assert!(local.len() < OWN + BATCH || shared.len() >= SHARED_LOW);
        }
        let locks = shared.locked.load(Ordering::Relaxed) - before;
        assert!(
            locks <= n / BATCH + 1,
            "{locks} takings of the lock for {n} buffers"
        );
        assert_eq!(shared.len() + local.len(), n, "none freed: there was room");
        // A thread that takes finds them all, newest first.
        let held = shared.len();
        let mut other = Vec::new();
        let taken: Vec<usize> = std::iter::from_fn(|| take_from(&mut other, &shared)).collect();
        assert_eq!(taken.len(), held);
        assert!(taken.windows(2).all(|w| w[0] > w[1]), "last in, first out");
    }

    #[test]
    fn a_few_buffers_going_round_one_thread_stay_out_of_the_shared_store() {
        let shared = Shared::new(4, 2);
        let mut local = Vec::new();
        for i in 0..3 {
            give_to(&mut local, 16, &shared, i);
        }
        ping_pong_rounds(&mut local, &shared, 100);
        assert_eq!((shared.len(), local.len()), (0, 3));
    }

    #[test]
    fn a_thread_that_gave_more_at_its_start_then_as_much_as_it_takes_takes_no_lock() {
        let shared = Shared::new(64, 16);
        let mut local = Vec::new();
        // A start that frees more than it takes (set-up, a first burst),
        // and others then take the reserve.
        for i in 0..12 {
            give_to(&mut local, 16, &shared, i);
        }
        while shared.take().is_some() {}
        let before = shared.locked.load(Ordering::Relaxed);
        // Then a ping-pong's rounds: two taken, two given back.
        ping_pong_rounds(&mut local, &shared, 100);
        assert_eq!(shared.locked.load(Ordering::Relaxed) - before, 0);
    }

    #[test]
    fn a_thread_whose_own_ran_out_takes_the_lock_only_until_it_has_some() {
        let shared = Shared::new(64, 16);
        for i in 0..8 {
            assert!(shared.give(i).is_ok());
        }
        let mut local = Vec::new();
        let before = shared.locked.load(Ordering::Relaxed);
        ping_pong_rounds(&mut local, &shared, 100);
        assert_eq!(
            shared.locked.load(Ordering::Relaxed) - before,
            2,
            "the first two takes"
        );
    }

    #[test]
    fn taking_many_at_once_takes_what_taking_one_by_one_would() {
        for held in 0..=6 {
            for n in 0..=8 {
                let (one, many) = (Shared::new(8, 2), Shared::new(8, 2));
                for i in 0..held {
                    assert!(one.give(i).is_ok() && many.give(i).is_ok());
                }
                let one_by_one: Vec<i32> = (0..n).map_while(|_| one.take()).collect();
                let before = many.locked.load(Ordering::Relaxed);
                let mut at_once = Vec::new();
                many.take_many(n, |v| at_once.push(v));
                assert_eq!(at_once, one_by_one, "{held} held, {n} wanted");
                assert_eq!(many.len(), one.len());
                assert!(many.locked.load(Ordering::Relaxed) - before <= 1);
            }
        }
    }

    #[test]
    fn a_nic_is_lent_this_threads_spares_first_then_the_stores() {
        std::thread::spawn(|| {
            let (mut nic, _) = nic_with_room_for_more_than(4);
            for _ in 0..3 {
                recycle(Vec::with_capacity(64));
            }
            assert_eq!(spares(), 3, "fewer than OWN: all the thread's own");
            lend(&mut nic, 2);
            assert_eq!((nic.spares(), spares()), (2, 1), "two of its own lent");
            lend(&mut nic, usize::MAX);
            assert_eq!(spares(), 0, "then its last");
            assert!(nic.spares() >= 3, "and the store's, if it had any");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_recycled_buffer_comes_back_empty_with_room_for_any_frame() {
        let mut b = buffer(100);
        assert!(b.is_empty() && b.capacity() >= ROOM);
        b.extend_from_slice(b"frame");
        recycle(b);
        let again = buffer(10);
        assert!(again.is_empty(), "reused buffers come out empty");
        assert!(again.capacity() >= ROOM);
    }

    #[test]
    fn a_frame_list_comes_back_empty() {
        let mut l = frame_list();
        l.push(vec![1, 2, 3]);
        recycle_list(l);
        assert!(frame_list().is_empty(), "its frames are gone");
    }

    fn spares() -> usize {
        with_local(&SPARE, |l| l.len()).unwrap_or(0)
    }

    /// A new NIC, and the spares it has room for (more than `n`).
    fn nic_with_room_for_more_than(n: usize) -> (Nic, usize) {
        let nic = Nic::new(doorbell_device::NicConfig::new([10, 0, 0, 1]));
        let room = nic.spare_room();
        assert!(room > n, "a NIC keeps spares");
        (nic, room)
    }

    #[test]
    fn the_buffers_a_port_copied_out_go_back_to_the_nic_that_built_them() {
        std::thread::spawn(|| {
            let (mut nic, room) = nic_with_room_for_more_than(2);
            let mut spent: Vec<Vec<u8>> = (0..room + 2).map(|_| Vec::with_capacity(2048)).collect();
            give_back(&mut nic, &mut spent);
            assert!(spent.is_empty());
            assert_eq!(nic.spares(), room, "the NIC's spares, up to their room");
            assert_eq!(spares(), 2, "the two it had no room for: this thread's");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_keeps_a_bounded_number_of_spares_and_no_oversized_one() {
        std::thread::spawn(|| {
            for _ in 0..KEEP + SHARED_LOW + 10 {
                recycle(Vec::with_capacity(64));
            }
            assert!(spares() <= KEEP);
            let before = spares();
            recycle(Vec::with_capacity(LARGEST + 1));
            recycle(Vec::new());
            assert_eq!(spares(), before, "neither kept");
        })
        .join()
        .unwrap();
    }
}
