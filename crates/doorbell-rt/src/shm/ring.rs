//! One direction between two NICs of a host: a single-producer
//! single-consumer ring of frames in a shared mapping. The only `unsafe`
//! of the shared-memory port's data path (`unsafe_code` is allowed for this
//! module alone, where `shm.rs` declares it).
//!
//! # Layout
//! A header of [`HEADER_LEN`] bytes, then the data area of `capacity`
//! bytes (a power of two). In the header, each on its own cache line:
//! the magic and capacity (offset 0), the producer's `tail` (64), the
//! consumer's `head` (128) and the consumer's `parked` flag (192). `tail`
//! and `head` count bytes since the ring was made; a record starts at a
//! multiple of 8: a `u32` length, 4 bytes of zero, the frame, padding to
//! 8. A record that would cross the end of the data area is not split: a
//! length of `u32::MAX` there says "continue at the start". Beside the
//! magic and capacity, at offset 16, the consumer's `closed` word: written
//! once, when the consumer stops taking frames, and read by the producer
//! before each run of frames, from its own cache, since nothing else on
//! that line is written after the ring is made.
//!
//! # Trust
//! The producer made the mapping and the consumer mapped it from a
//! descriptor it was sent: each can write anything into it at any time.
//! Neither ever forms a Rust reference into the data area, only copies in
//! or out through raw pointers; every position and length read from the
//! mapping is checked against the capacity before use, and a ring whose
//! positions make no sense is reported [`Fault::Broken`], which ends that
//! one connection. The header's words (magic, capacity, `closed`, `tail`,
//! `head`) and the `parked` flag are accessed only atomically, by both
//! sides.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::MmapRaw;

/// Bytes before the data area.
pub(crate) const HEADER_LEN: usize = 256;
/// The longest frame a ring carries: more than any RoCEv2 packet of a
/// 4096-byte MTU.
pub(crate) const MAX_FRAME: usize = 16 << 10;
const MAGIC: u64 = u64::from_le_bytes(*b"DBRING01");
const WRAP: u32 = u32::MAX;
const OFF_MAGIC: usize = 0;
const OFF_CAP: usize = 8;
const OFF_CLOSED: usize = 16;
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
const OFF_PARKED: usize = 192;

/// Why a ring cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No room for the frame now.
    Full,
    /// The positions or a length in the mapping make no sense: the other
    /// side broke it.
    Broken,
}

/// A ring over a shared mapping; one side's view of it.
pub(crate) struct Ring {
    map: MmapRaw,
    cap: u64,
    /// This side's own position: `tail` for the producer, `head` for the
    /// consumer (never read back from the mapping, which the other side
    /// could change).
    pos: u64,
    /// The other side's position as this side last read it: the producer
    /// reads `head` again only when the ring looks full by this reading,
    /// the consumer `tail` only when it has taken everything up to it, so
    /// that neither pulls the other's cache line over for every frame.
    /// The other side's position only grows, so an old reading is safe: it
    /// shows less room, or fewer frames, than there are.
    seen: u64,
}

fn record_len(frame_len: usize) -> u64 {
    8 + (frame_len as u64).div_ceil(8) * 8
}

impl Ring {
    /// The bytes a ring of `capacity` needs.
    pub(crate) fn mapping_len(capacity: u64) -> u64 {
        HEADER_LEN as u64 + capacity
    }

    /// Lays a fresh, empty ring out over `map` (the producer, which made
    /// it): the capacity is the mapping's length less the header, rounded
    /// down to a power of two.
    pub(crate) fn create(map: MmapRaw) -> Option<Self> {
        let room = map.len().checked_sub(HEADER_LEN)? as u64;
        if room < 2 * record_len(MAX_FRAME) {
            return None;
        }
        let cap = 1u64 << room.ilog2();
        let r = Self {
            map,
            cap,
            pos: 0,
            seen: 0,
        };
        r.word(OFF_CAP).store(cap, Ordering::Relaxed);
        r.word(OFF_TAIL).store(0, Ordering::Relaxed);
        r.word(OFF_HEAD).store(0, Ordering::Relaxed);
        r.word(OFF_CLOSED).store(0, Ordering::Relaxed);
        r.flag().store(0, Ordering::Relaxed);
        r.word(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Some(r)
    }

    /// The consumer's view of a ring another process made, if `map` holds
    /// one: the magic, and a capacity that is a power of two the mapping
    /// holds. Starts at the producer's tail: what was sent before the
    /// consumer attached is not taken.
    pub(crate) fn attach(map: MmapRaw) -> Option<Self> {
        if map.len() < HEADER_LEN {
            return None;
        }
        let probe = Self {
            map,
            cap: 0,
            pos: 0,
            seen: 0,
        };
        if probe.word(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            return None;
        }
        let cap = probe.word(OFF_CAP).load(Ordering::Relaxed);
        let fits = cap.is_power_of_two()
            && cap >= 2 * record_len(MAX_FRAME)
            && Self::mapping_len(cap) <= probe.map.len() as u64;
        if !fits {
            return None;
        }
        let tail = probe.word(OFF_TAIL).load(Ordering::Acquire);
        // Records start at multiples of 8, and `pop` reads their lengths
        // as aligned words.
        if !tail.is_multiple_of(8) {
            return None;
        }
        let r = Self {
            map: probe.map,
            cap,
            pos: tail,
            seen: tail,
        };
        r.word(OFF_HEAD).store(tail, Ordering::Release);
        Some(r)
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HEADER_LEN);
        // SAFETY: the mapping is page-aligned and at least HEADER_LEN long
        // (checked by create/attach), so `off` (a multiple of 8 below
        // HEADER_LEN) names an aligned u64 inside it, valid for as long as
        // `self.map`. Both processes access these words only atomically,
        // and AtomicU64 has u64's size and alignment.
        unsafe { &*self.map.as_mut_ptr().add(off).cast::<AtomicU64>() }
    }

    fn flag(&self) -> &AtomicU32 {
        // SAFETY: as in `word`: OFF_PARKED is 4-aligned inside the header.
        unsafe { &*self.map.as_mut_ptr().add(OFF_PARKED).cast::<AtomicU32>() }
    }

    /// Pointer to byte `at` of the data area. Every caller passes a
    /// position reduced modulo `cap`; the check makes that a guarantee of
    /// this function, not of its callers (a compare the branch predictor
    /// never misses).
    fn data(&self, at: u64) -> *mut u8 {
        assert!(at < self.cap, "a ring position past its data area");
        // SAFETY: `at < cap` and the mapping holds HEADER_LEN + cap bytes
        // (checked by create and attach), so the result is inside it.
        unsafe { self.map.as_mut_ptr().add(HEADER_LEN + at as usize) }
    }

    /// Producer: appends `frame` (at most [`MAX_FRAME`] bytes).
    pub(crate) fn push(&mut self, frame: &[u8]) -> Result<(), Fault> {
        self.push_parts([frame, &[]])
    }

    /// Producer: appends one frame made of `parts`, the second after the
    /// first (together at most [`MAX_FRAME`] bytes): a packet whose
    /// headers and payload lie apart goes in without being put together
    /// first.
    pub(crate) fn push_parts(&mut self, parts: [&[u8]; 2]) -> Result<(), Fault> {
        let len = parts[0].len() + parts[1].len();
        debug_assert!(len <= MAX_FRAME);
        let need = record_len(len);
        let at = self.pos % self.cap;
        let to_end = self.cap - at;
        let skip = if to_end < need { to_end } else { 0 };
        // `seen` never passes `pos` (checked when it is read), and `pos`
        // moves only by what fits.
        if self.pos - self.seen + skip + need > self.cap {
            let head = self.word(OFF_HEAD).load(Ordering::Acquire);
            let used = self.pos.checked_sub(head).ok_or(Fault::Broken)?;
            if used > self.cap || head < self.seen {
                return Err(Fault::Broken);
            }
            self.seen = head;
            if used + skip + need > self.cap {
                return Err(Fault::Full);
            }
        }
        if skip > 0 {
            // SAFETY: `at` is 8-aligned and below cap, so 4 bytes fit.
            unsafe { self.data(at).cast::<u32>().write_volatile(WRAP) };
        }
        let at = (self.pos + skip) % self.cap;
        let [first, second] = parts;
        // SAFETY: the record (8 + both parts, padded) fits between `at`
        // and the end of the data area (`skip` moved it to the start
        // otherwise); the parts are private slices that cannot overlap
        // the mapping.
        unsafe {
            let p = self.data(at);
            p.cast::<u32>().write_volatile(len as u32);
            std::ptr::copy_nonoverlapping(first.as_ptr(), p.add(8), first.len());
            std::ptr::copy_nonoverlapping(second.as_ptr(), p.add(8 + first.len()), second.len());
        }
        self.pos += skip + need;
        self.word(OFF_TAIL).store(self.pos, Ordering::Release);
        Ok(())
    }

    /// Consumer: takes the next frame into `out` (replacing its contents);
    /// `Ok(false)` if the ring is empty.
    pub(crate) fn pop(&mut self, out: &mut Vec<u8>) -> Result<bool, Fault> {
        loop {
            if self.seen == self.pos {
                let tail = self.word(OFF_TAIL).load(Ordering::Acquire);
                if tail == self.pos {
                    return Ok(false);
                }
                if tail < self.pos {
                    return Err(Fault::Broken);
                }
                self.seen = tail;
            }
            // What the producer published up to `seen` (the Acquire load
            // above made those bytes visible); `seen` never falls behind
            // `pos`, which moves only within it.
            let avail = self.seen - self.pos;
            if avail > self.cap {
                return Err(Fault::Broken);
            }
            let at = self.pos % self.cap;
            // SAFETY: `at` is 8-aligned (every record length is a multiple
            // of 8) and below cap.
            let len = unsafe { self.data(at).cast::<u32>().read_volatile() };
            if len == WRAP {
                // A record always fits at the start of the data area, so
                // a producer never writes the marker there: one that does
                // could keep this loop skipping whole capacities.
                let skip = self.cap - at;
                if at == 0 || skip > avail {
                    return Err(Fault::Broken);
                }
                self.pos += skip;
                continue;
            }
            let len = len as usize;
            let need = record_len(len);
            if len > MAX_FRAME || need > avail || need > self.cap - at {
                return Err(Fault::Broken);
            }
            out.clear();
            out.reserve(len);
            // SAFETY: `len` bytes from `at + 8` lie inside the data area
            // (checked above); they are copied into `out`'s spare capacity
            // (reserved), which the mapping cannot overlap, and only then
            // is `out`'s length set. A producer that keeps to the protocol
            // wrote them before its Release store of `tail`, which the
            // Acquire load above saw: the copy races with nothing. One
            // that writes them during the copy is another process, outside
            // what Rust's memory model describes; the mapping is no Rust
            // allocation and is reached only through raw pointers, so the
            // race can give only arbitrary bytes, copied once into a
            // private buffer that the NIC parses as untrusted input. (A
            // copy by atomic words would make the race benign in the
            // model too, at the cost of the vector copy on every frame.)
            unsafe {
                std::ptr::copy_nonoverlapping(self.data(at).add(8), out.as_mut_ptr(), len);
                out.set_len(len);
            }
            self.pos += need;
            self.word(OFF_HEAD).store(self.pos, Ordering::Release);
            return Ok(true);
        }
    }

    /// Producer: the consumer's published position (untrusted: only
    /// compared with an earlier reading, to see whether it moved).
    pub(crate) fn consumer_pos(&self) -> u64 {
        self.word(OFF_HEAD).load(Ordering::Acquire)
    }

    /// Producer: whether the consumer took any of what this side put in:
    /// its published position (untrusted) is past the start and not past
    /// this side's own.
    pub(crate) fn taken_any(&self) -> bool {
        let head = self.consumer_pos();
        head > 0 && head <= self.pos
    }

    /// Producer: overwrites the published tail with `value` (a peer
    /// breaking the ring, for tests).
    pub(crate) fn scribble_tail(&self, value: u64) {
        self.word(OFF_TAIL).store(value, Ordering::Release);
    }

    /// Consumer: overwrites the published head with `value` (a receiver
    /// that frees room a few bytes at a time, for tests).
    #[cfg(test)]
    pub(crate) fn scribble_head(&self, value: u64) {
        self.word(OFF_HEAD).store(value, Ordering::Release);
    }

    /// Consumer: whether a frame is waiting.
    ///
    /// A ring found empty has the lines where the next record will start
    /// fetched meanwhile ([`prefetch`]): when the producer's `tail` moves,
    /// its record is already on its way, and the consumer waits for one
    /// line to cross between cores instead of two in a row (`tail`, then
    /// the record): about 150 ns each on the 2-core VM of
    /// docs/benchmarks.md, against a one-way time of about 2 µs.
    pub(crate) fn has_data(&self) -> bool {
        if self.seen != self.pos {
            return true;
        }
        let at = self.pos % self.cap;
        prefetch(self.data(at));
        // A short frame (an ACK, an 8-byte WRITE) reaches the second line.
        if at + 64 < self.cap {
            prefetch(self.data(at + 64));
        }
        self.word(OFF_TAIL).load(Ordering::Acquire) != self.pos
    }

    /// Consumer: says whether it is parked (then the producer wakes it).
    ///
    /// Raising the mark is ordered (`SeqCst`) before the consumer looks at
    /// the ring once more, as the producer's push is before it reads the
    /// mark: one of the two sees the other. Lowering it needs no order: a
    /// producer that still sees it up rings a bell that finds nothing. A
    /// mark already down is not written again, since every store takes
    /// the line from the producer, which reads it after each push.
    pub(crate) fn set_parked(&self, parked: bool) {
        if parked {
            self.flag().store(1, Ordering::SeqCst);
        } else if self.flag().load(Ordering::Relaxed) != 0 {
            self.flag().store(0, Ordering::Relaxed);
        }
    }

    /// Producer: starts fetching the consumer's mark before a push, so
    /// that the line, which the consumer wrote as it came and went, is
    /// on its way while the frames are copied in and their lines taken
    /// from the consumer; [`Self::consumer_parked`] after the push then
    /// waits for one crossing, not two in a row.
    pub(crate) fn prefetch_mark(&self) {
        prefetch(self.flag().as_ptr().cast());
    }

    /// Consumer: says it takes no more frames (its NIC stopped), so that
    /// the producer asks the rendezvous again before its next frame rather
    /// than lose it here: a NIC that took the address meanwhile gets it.
    /// Relaxed: the mark publishes nothing else, and a producer that sees
    /// it late finds the same as before it (the hang-up check).
    pub(crate) fn close(&self) {
        self.word(OFF_CLOSED).store(1, Ordering::Relaxed);
    }

    /// Producer: whether the consumer said it takes no more frames
    /// ([`Self::close`]). Untrusted like every word of the mapping: a
    /// consumer that says so falsely only makes its sender connect again.
    pub(crate) fn consumer_closed(&self) -> bool {
        self.word(OFF_CLOSED).load(Ordering::Relaxed) != 0
    }

    /// Producer: whether the consumer asked to be woken.
    pub(crate) fn consumer_parked(&self) -> bool {
        self.flag().load(Ordering::SeqCst) != 0
    }
}

/// Asks the CPU to bring the cache line at `p` in, without waiting for it.
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing into the program and
    // cannot fault, whatever the address (here always inside the mapping).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cap: u64) -> (Ring, Ring) {
        let f = crate::shm::os::memfd("ring-test", Ring::mapping_len(cap)).unwrap();
        let a = memmap2::MmapOptions::new().map_raw(&f).unwrap();
        let b = memmap2::MmapOptions::new().map_raw(&f).unwrap();
        (Ring::create(a).unwrap(), Ring::attach(b).unwrap())
    }

    #[test]
    fn a_frame_pushed_in_two_parts_comes_out_whole_across_the_wrap() {
        let (mut tx, mut rx) = pair(64 << 10);
        let mut out = Vec::new();
        for i in 0..2000usize {
            let f: Vec<u8> = (0..(i * 37) % 4200).map(|b| (b ^ i) as u8).collect();
            let (head, tail) = f.split_at(i % 29 % (f.len() + 1));
            tx.push_parts([head, tail]).unwrap();
            assert!(rx.pop(&mut out).unwrap());
            assert_eq!(out, f, "frame {i}, split after {}", head.len());
        }
    }

    #[test]
    fn frames_come_out_as_they_went_in_across_the_wrap() {
        let (mut tx, mut rx) = pair(64 << 10);
        let mut out = Vec::new();
        for i in 0..2000usize {
            let f: Vec<u8> = (0..(i * 37) % 4200).map(|b| (b ^ i) as u8).collect();
            tx.push(&f).unwrap();
            assert!(rx.has_data());
            assert!(rx.pop(&mut out).unwrap());
            assert_eq!(out, f, "frame {i}");
            assert!(!rx.pop(&mut out).unwrap());
        }
    }

    #[test]
    fn a_consumer_that_closes_is_seen_closed_by_its_producer() {
        let (tx, rx) = pair(64 << 10);
        assert!(!tx.consumer_closed());
        rx.close();
        assert!(tx.consumer_closed());
        // Neither position moved: a close is no frame.
        assert!(!rx.has_data());
    }

    /// The producer sees that its consumer took something only once the
    /// consumer's position moved within what was put in: not before, and
    /// not for a position a peer made up.
    #[test]
    fn a_producer_sees_its_frames_taken_only_within_what_it_put_in() {
        let (mut tx, mut rx) = pair(64 << 10);
        assert!(!tx.taken_any(), "nothing put in");
        rx.scribble_head(8);
        assert!(!tx.taken_any(), "a position past what was put in");
        rx.scribble_head(0);
        tx.push(&[1u8; 100]).unwrap();
        assert!(!tx.taken_any(), "put in, not taken");
        let mut out = Vec::new();
        assert!(rx.pop(&mut out).unwrap());
        assert!(tx.taken_any());
    }

    #[test]
    fn a_full_ring_refuses_and_takes_again_once_drained() {
        let (mut tx, mut rx) = pair(64 << 10);
        let f = vec![7u8; 4000];
        let mut n = 0;
        while tx.push(&f).is_ok() {
            n += 1;
        }
        assert_eq!(tx.push(&f), Err(Fault::Full));
        assert_eq!(n, (64 << 10) / record_len(4000) as usize);
        let mut out = Vec::new();
        assert!(rx.pop(&mut out).unwrap());
        assert!(tx.push(&f).is_ok());
    }

    #[test]
    fn positions_or_lengths_a_peer_scribbled_break_the_ring_not_the_reader() {
        let (mut tx, mut rx) = pair(64 << 10);
        tx.push(b"hello").unwrap();
        // A length beyond any frame.
        // SAFETY: a test's write to the first record's length word, inside
        // the mapping.
        unsafe { rx.data(0).cast::<u32>().write_volatile(1 << 20) };
        let mut out = Vec::new();
        assert_eq!(rx.pop(&mut out), Err(Fault::Broken));
        // A tail far beyond the capacity.
        let (mut tx, mut rx) = pair(64 << 10);
        tx.word(OFF_TAIL).store(u64::MAX / 2, Ordering::Release);
        assert_eq!(rx.pop(&mut out), Err(Fault::Broken));
        // A head ahead of the tail, as the producer sees it once it looks
        // (when the ring seems full).
        rx.word(OFF_HEAD).store(1 << 40, Ordering::Release);
        let f = vec![1u8; 4000];
        let first_error = std::iter::repeat_with(|| tx.push(&f)).find_map(Result::err);
        assert_eq!(first_error, Some(Fault::Broken));
        // A head that moved back.
        let (mut tx, rx) = pair(64 << 10);
        let mut out = Vec::new();
        let mut rx = rx;
        for _ in 0..8 {
            tx.push(&f).unwrap();
            assert!(rx.pop(&mut out).unwrap());
        }
        let first_error = std::iter::repeat_with(|| tx.push(&f)).find_map(Result::err);
        assert_eq!(first_error, Some(Fault::Full), "a full ring, read afresh");
        rx.word(OFF_HEAD).store(0, Ordering::Release);
        assert_eq!(tx.push(&f), Err(Fault::Broken));
        // A mapping without the magic is no ring.
        let f = crate::shm::os::memfd("ring-test", Ring::mapping_len(64 << 10)).unwrap();
        let m = memmap2::MmapOptions::new().map_raw(&f).unwrap();
        assert!(Ring::attach(m).is_none());
        // A tail off the records' 8-byte grid when the consumer attaches:
        // its first length would be read unaligned.
        let f = crate::shm::os::memfd("ring-test", Ring::mapping_len(64 << 10)).unwrap();
        let map = || memmap2::MmapOptions::new().map_raw(&f).unwrap();
        let tx = Ring::create(map()).unwrap();
        tx.word(OFF_TAIL).store(3, Ordering::Release);
        assert!(Ring::attach(map()).is_none());
        tx.word(OFF_TAIL).store(8, Ordering::Release);
        assert!(Ring::attach(map()).is_some(), "on the grid");
    }

    #[test]
    fn a_layout_a_peer_made_up_is_refused_at_attach() {
        // Too short for the header.
        let f = crate::shm::os::memfd("ring-test", 128).unwrap();
        let m = memmap2::MmapOptions::new().map_raw(&f).unwrap();
        assert!(Ring::attach(m).is_none(), "shorter than the header");
        // A capacity that is no power of two, one too small for two of
        // the longest records, and one the mapping does not hold.
        let cap = 64 << 10;
        let f = crate::shm::os::memfd("ring-test", Ring::mapping_len(cap)).unwrap();
        let map = || memmap2::MmapOptions::new().map_raw(&f).unwrap();
        let tx = Ring::create(map()).unwrap();
        for (bad, why) in [
            (cap - 8, "not a power of two"),
            (1024, "too small"),
            (2 * cap, "past the mapping"),
        ] {
            tx.word(OFF_CAP).store(bad, Ordering::Release);
            assert!(Ring::attach(map()).is_none(), "a capacity {why}");
        }
        tx.word(OFF_CAP).store(cap, Ordering::Release);
        assert!(
            Ring::attach(map()).is_some(),
            "the capacity it was made with"
        );
    }

    #[test]
    fn records_a_peer_made_up_break_the_ring() {
        let mut out = Vec::new();
        // A wrap marker at the start of the data area, where a record
        // always fits (a consumer that believed it would skip a whole
        // capacity, and could be kept doing so).
        // Published with a whole capacity behind it, the most a skip may
        // pass.
        let (tx, mut rx) = pair(64 << 10);
        // SAFETY: a test's write to the first record's length word.
        unsafe { rx.data(0).cast::<u32>().write_volatile(WRAP) };
        tx.word(OFF_TAIL).store(rx.cap, Ordering::Release);
        assert_eq!(rx.pop(&mut out), Err(Fault::Broken), "a wrap at 0");
        // A wrap marker whose skip passes what the producer published.
        let (mut tx, mut rx) = pair(64 << 10);
        tx.push(b"first").unwrap();
        assert!(rx.pop(&mut out).unwrap());
        tx.push(b"second").unwrap();
        // SAFETY: as above, the second record's length word (at 16).
        unsafe { rx.data(16).cast::<u32>().write_volatile(WRAP) };
        assert_eq!(rx.pop(&mut out), Err(Fault::Broken), "a wrap past tail");
        // A length short of the longest frame, but past what was
        // published.
        let (mut tx, mut rx) = pair(64 << 10);
        tx.push(b"hello").unwrap();
        // SAFETY: as above.
        unsafe { rx.data(0).cast::<u32>().write_volatile(100) };
        assert_eq!(rx.pop(&mut out), Err(Fault::Broken), "a record past tail");
        // A record that would cross the end of the data area, with room
        // published for it.
        let (tx, mut rx) = pair(64 << 10);
        let near_end = rx.cap - 16;
        (rx.pos, rx.seen) = (near_end, near_end);
        tx.word(OFF_TAIL).store(near_end + 4096, Ordering::Release);
        // SAFETY: as above, the length word 16 bytes before the end.
        unsafe { rx.data(near_end).cast::<u32>().write_volatile(4000) };
        assert_eq!(rx.pop(&mut out), Err(Fault::Broken), "across the end");
        // A producer's position that moved back.
        let (mut tx, mut rx) = pair(64 << 10);
        tx.push(b"hello").unwrap();
        assert!(rx.pop(&mut out).unwrap());
        tx.word(OFF_TAIL).store(8, Ordering::Release);
        assert_eq!(rx.pop(&mut out), Err(Fault::Broken), "tail moved back");
        // Nothing was taken from a broken ring: `out` holds the last
        // good frame.
        assert_eq!(out, b"hello");
    }
}
