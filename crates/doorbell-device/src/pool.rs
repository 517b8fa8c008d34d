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
        self.kept.push(v);
    }

    /// A vector of `len` elements that held whatever its last user left
    /// there: kept elements are not cleared, and only growth is filled
    /// (with `T::default()`). For a buffer whose every element is written
    /// before it is read, as a frame being built is.
    pub(crate) fn take_len(&mut self, len: usize) -> Vec<T>
    where
        T: Clone + Default,
    {
        let mut v = self.kept.pop().unwrap_or_default();
        v.resize(len, T::default());
        v
    }

    /// How many more vectors [`Self::give`] would keep now.
    pub(crate) fn room(&self) -> usize {
        KEEP.saturating_sub(self.kept.len())
    }
}

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
}
