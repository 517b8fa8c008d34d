//! Bounded pools of emptied vectors, so that a warm NIC takes nothing from
//! the allocator: the buffers of frames handed back ([`crate::Nic::recycle`])
//! and the payload and SGE lists of retired WQEs ([`crate::wq::Spares`]).
//! Reuse changes only where elements live: a vector comes out empty, or,
//! from [`Pool::take_len`], as long as asked and to be written whole.

/// At most `KEEP` emptied vectors, none with room for more than `LARGEST`
/// elements (a larger one is freed, so that one big message does not keep
/// its memory for good).
pub(crate) struct Pool<T, const KEEP: usize, const LARGEST: usize> {
    kept: Vec<Vec<T>>,
}

impl<T, const KEEP: usize, const LARGEST: usize> Default for Pool<T, KEEP, LARGEST> {
    fn default() -> Self {
        Self { kept: Vec::new() }
    }
}

impl<T, const KEEP: usize, const LARGEST: usize> Pool<T, KEEP, LARGEST> {
    /// An empty vector: a kept one if there is one.
    pub(crate) fn take(&mut self) -> Vec<T> {
        let mut v = self.kept.pop().unwrap_or_default();
        v.clear();
        v
    }

    /// Keeps `v` unless the pool is full, `v` has no storage, or
    /// more than `LARGEST` elements' worth.
    pub(crate) fn give(&mut self, v: Vec<T>) {
        if v.capacity() == 0 || v.capacity() > LARGEST || self.kept.len() >= KEEP {
            return;
        }
        // Room for all at once: the pool grows no further.
        self.kept.reserve_exact(KEEP - self.kept.len());
        self.kept.push(v);
    }

    /// How many more vectors [`Self::give`] would keep now.
    pub(crate) fn room(&self) -> usize {
        KEEP.saturating_sub(self.kept.len())
    }

    /// How many vectors it keeps now.
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }
}

impl<const KEEP: usize, const LARGEST: usize> Pool<u8, KEEP, LARGEST> {
    /// A buffer of `len` bytes that holds whatever its last user left
    /// there: kept bytes are not cleared, and only growth is zeroed. For a
    /// buffer whose every byte is written before it is read, as a frame
    /// being built is.
    pub(crate) fn take_len(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.kept.pop().unwrap_or_default();
        v.truncate(len);
        // Room for `len` at once: grown a block at a time, a vector would
        // double past `LARGEST` and not be kept.
        v.reserve_exact(len - v.len());
        // Growth is copied from zeros a block at a time: one memcpy each,
        // even in the unoptimised build the tests run, where `resize`
        // writes byte by byte and a frame's growth costs tens of
        // microseconds.
        while v.len() < len {
            let n = (len - v.len()).min(ZEROS.len());
            v.extend_from_slice(&ZEROS[..n]);
        }
        v
    }
}

/// Zeros to grow a buffer from ([`Pool::take_len`]).
static ZEROS: [u8; 1024] = [0; 1024];

#[cfg(test)]
mod tests {
    use super::Pool;

    #[test]
    fn a_pool_keeps_emptied_vectors_up_to_its_bounds() {
        let mut p = Pool::<u8, 2, 16>::default();
        p.give(Vec::new());
        p.give(Vec::with_capacity(17));
        assert_eq!(p.room(), 2, "no storage, and too large: not kept");
        let v = vec![1u8, 2, 3];
        let at = v.as_ptr();
        p.give(v);
        let again = p.take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), at, "the same storage");
        for _ in 0..3 {
            p.give(Vec::with_capacity(8));
        }
        assert_eq!(p.room(), 0, "at most two kept");
        assert!(p.take().capacity() >= 8);
    }

    #[test]
    fn take_len_gives_the_length_asked_with_growth_zeroed() {
        let mut p = Pool::<u8, 4, 8192>::default();
        p.give(vec![9u8; 3]);
        let v = p.take_len(2500);
        assert_eq!(v.len(), 2500);
        assert_eq!(&v[..3], &[9, 9, 9], "kept bytes are left as they were");
        assert!(v[3..].iter().all(|&b| b == 0), "growth is zeroed");
        p.give(v);
        assert_eq!(p.take_len(10).len(), 10, "a longer buffer is cut");
        assert_eq!(p.take_len(0).len(), 0);
        // A frame of MTU 4096 grown from nothing stays small enough to
        // be kept.
        let mut p = Pool::<u8, 4, { 6 * 1024 }>::default();
        let v = p.take_len(4096 + 70);
        p.give(v);
        assert_eq!(p.room(), 3, "kept");
    }
}
