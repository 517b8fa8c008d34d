//! A map that readers look at without a lock and writers copy on change,
//! for the region and range maps of [`HostMemory`](crate::HostMemory)
//! implementations (decision record 0031).

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, Guard};

/// A `BTreeMap` that every access reads as it stood when the access
/// began, without writing any shared cache line, and that changes by
/// publishing a changed copy, one change at a time.
///
/// Meant for maps that change rarely (allocation, registration) and are
/// read on every access: a read lock is a write to the lock's word, which
/// every thread that reads would move between cores.
pub struct CowMap<K, V> {
    map: ArcSwap<BTreeMap<K, V>>,
    changes: Mutex<()>,
}

/// The map as it stood when [`CowMap::load`] was called.
pub struct Snapshot<K, V>(Guard<Arc<BTreeMap<K, V>>>);

impl<K, V> Deref for Snapshot<K, V> {
    type Target = BTreeMap<K, V>;

    fn deref(&self) -> &BTreeMap<K, V> {
        &self.0
    }
}

impl<K, V> Default for CowMap<K, V> {
    fn default() -> Self {
        Self {
            map: ArcSwap::from_pointee(BTreeMap::new()),
            changes: Mutex::new(()),
        }
    }
}

impl<K: Ord + Clone, V: Clone> CowMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The map now. Changes made after this call are not seen through it.
    pub fn load(&self) -> Snapshot<K, V> {
        Snapshot(self.map.load())
    }

    /// Runs `f` on a copy of the map and publishes the copy, after every
    /// change begun before this one. Readers see the map before or after
    /// `f`, never part of it.
    pub fn update<R>(&self, f: impl FnOnce(&mut BTreeMap<K, V>) -> R) -> R {
        self.try_update(|m| Ok::<R, std::convert::Infallible>(f(m)))
            .unwrap_or_else(|never| match never {})
    }

    /// As [`Self::update`], but the copy is published only if `f` returns
    /// `Ok`: a change that `f` refuses leaves the map as it was, and
    /// costs no store.
    pub fn try_update<R, E>(
        &self,
        f: impl FnOnce(&mut BTreeMap<K, V>) -> Result<R, E>,
    ) -> Result<R, E> {
        let _one_at_a_time = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        let mut copy = BTreeMap::clone(&self.map.load());
        let r = f(&mut copy)?;
        self.map.store(Arc::new(copy));
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::CowMap;

    #[test]
    fn a_snapshot_keeps_the_map_it_was_taken_of() {
        let m = CowMap::new();
        m.update(|m| m.insert(1u32, "one"));
        let before = m.load();
        m.update(|m| {
            m.insert(2, "two");
            m.remove(&1);
        });
        assert_eq!(before.get(&1), Some(&"one"));
        assert!(before.get(&2).is_none());
        let after = m.load();
        assert_eq!(after.keys().copied().collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_refused_change_publishes_nothing() {
        let m = CowMap::new();
        m.update(|m| m.insert(1u32, 1u32));
        let before = m.load();
        let r: Result<(), ()> = m.try_update(|m| {
            m.insert(2, 2);
            Err(())
        });
        assert!(r.is_err());
        assert!(std::ptr::eq(&*before, &*m.load()), "the same map");
        assert_eq!(m.load().len(), 1);
    }

    #[test]
    fn changes_from_two_threads_are_all_kept() {
        let m = CowMap::new();
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let m = &m;
                s.spawn(move || {
                    for i in 0..500 {
                        m.update(|map| map.insert(t * 1000 + i, i));
                    }
                });
            }
        });
        assert_eq!(m.load().len(), 1000);
    }
}
