//! Frame buffers, reused by the thread that frees them: a port that takes
//! frames in, and the NIC it feeds, then allocate nothing for the next.
//! Ports take buffers for the frames they receive ([`buffer`]); the engine
//! gives back each frame's buffer once the NIC has taken it in, and each
//! sink once it has copied a frame out ([`recycle`]); the engine lends
//! spares to its NIC for the frames it builds ([`lend`], the device's own
//! [`Nic::recycle`]). A buffer never handed back is simply freed.
//!
//! Each thread keeps its own spares (at most [`KEEP`], none larger than
//! [`LARGEST`] bytes), so nothing is shared between threads and no thread
//! keeps more than about a megabyte and a half of frames of MTU 4096.
//! Reuse changes only where the bytes live, never what they are: a buffer
//! comes out empty from [`buffer`]. Spares keep their length until then,
//! so that a NIC that builds a frame over a lent one writes its bytes
//! without clearing them first.

use doorbell_device::Nic;
use std::cell::Cell;

/// Most spare buffers a thread keeps.
const KEEP: usize = 256;
/// The largest buffer kept (a frame of MTU 4096 with its headers fits).
const LARGEST: usize = 6 * 1024;

thread_local! {
    static SPARE: Cell<Vec<Vec<u8>>> = const { Cell::new(Vec::new()) };
}

/// An empty buffer with room for at least `len` bytes: one of this
/// thread's spares if it has one.
pub(crate) fn buffer(len: usize) -> Vec<u8> {
    let mut b = SPARE
        .try_with(|s| {
            let mut spare = s.take();
            let b = spare.pop();
            s.set(spare);
            b
        })
        .ok()
        .flatten()
        .unwrap_or_default();
    b.clear();
    b.reserve(len);
    b
}

/// Gives `b` back for this thread to reuse; frees it if the thread has
/// enough spares or `b` is too large to keep.
pub(crate) fn recycle(b: Vec<u8>) {
    if b.capacity() == 0 || b.capacity() > LARGEST {
        return;
    }
    let _ = SPARE.try_with(move |s| {
        let mut spare = s.take();
        if spare.len() < KEEP {
            spare.push(b);
        }
        s.set(spare);
    });
}

/// Hands up to `n` of this thread's spares to `nic`, as many as it keeps,
/// for the frames it builds.
pub(crate) fn lend(nic: &mut Nic, n: usize) {
    let want = n.min(nic.spare_room());
    if want == 0 {
        return;
    }
    let _ = SPARE.try_with(|s| {
        let mut spare = s.take();
        for _ in 0..want {
            match spare.pop() {
                Some(b) => nic.recycle(b),
                None => break,
            }
        }
        s.set(spare);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recycled_buffer_comes_back_empty_and_oversized_ones_are_not_kept() {
        let mut b = buffer(100);
        assert!(b.is_empty() && b.capacity() >= 100);
        b.extend_from_slice(b"frame");
        let at = b.as_ptr();
        recycle(b);
        let again = buffer(10);
        assert!(again.is_empty(), "reused buffers come out empty");
        assert_eq!(again.as_ptr(), at, "the same allocation, reused");
        let before = spares();
        recycle(Vec::with_capacity(LARGEST + 1));
        recycle(Vec::new());
        assert_eq!(spares(), before, "neither kept");
        recycle(again);
        assert_eq!(spares(), before + 1);
    }

    fn spares() -> usize {
        SPARE.with(|s| {
            let v = s.take();
            let n = v.len();
            s.set(v);
            n
        })
    }

    #[test]
    fn a_thread_keeps_a_bounded_number_of_spares() {
        std::thread::spawn(|| {
            for _ in 0..KEEP + 10 {
                recycle(Vec::with_capacity(64));
            }
            assert_eq!(spares(), KEEP);
        })
        .join()
        .unwrap();
    }
}
