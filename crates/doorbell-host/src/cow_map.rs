//! A map that readers look at without a lock and writers copy on change,
//! for the region and range maps of [`HostMemory`](crate::HostMemory)
//! implementations (decision record 0031).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::LocalKey;

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
    /// Names the map as it stands: unique in the process, new on every
    /// change ([`Self::stamp`]).
    stamp: AtomicU64,
    changes: Mutex<()>,
}

/// Where the next [`CowMap::stamp`] comes from (0 is never one).
static STAMPS: AtomicU64 = AtomicU64::new(1);

fn new_stamp() -> u64 {
    STAMPS.fetch_add(1, Ordering::Relaxed)
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
            stamp: AtomicU64::new(new_stamp()),
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

    /// A number that names this map as it stands, unique among every
    /// `CowMap` of the process and every state each has been in: what a
    /// [`Recent`] found under one stamp holds while the stamp is the same.
    /// Read it before [`Self::load`]: a change between the two gives a
    /// snapshot newer than the stamp, never older.
    pub fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::Acquire)
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
        self.stamp.store(new_stamp(), Ordering::Release);
        Ok(r)
    }
}

impl<V: Clone + 'static> CowMap<u64, V> {
    /// For a map whose keys start ranges of `len_of(value)` bytes: calls
    /// `f` with the value of the range that holds all of `[addr, addr +
    /// len)` and `addr`'s offset in it, as the map stands. Looks first in
    /// `recent`, this thread's notes of what it found lately, and notes
    /// there what a lookup finds. `None` if no range holds it.
    pub fn with_range<R>(
        &self,
        recent: &'static LocalKey<RefCell<Recent<V>>>,
        addr: u64,
        len: u64,
        len_of: impl Fn(&V) -> u64,
        f: impl FnOnce(&V, u64) -> R,
    ) -> Option<R> {
        let stamp = self.stamp();
        let mut f = Some(f);
        let done = recent.try_with(|recent| {
            // In use while `f` runs: `f` should make no access through
            // this map, but one that did would look it up below.
            let mut recent = recent.try_borrow_mut().ok()?;
            let f = f.take()?;
            if let Some((v, off)) = recent.find(stamp, addr, len) {
                return Some(Some(f(v, off)));
            }
            let map = self.load();
            Some(lookup(&map, addr, len, &len_of).and_then(|(start, off)| {
                let v = map.get(&start)?;
                recent.put(stamp, start, len_of(v), v.clone());
                Some(f(v, off))
            }))
        });
        if let Ok(Some(r)) = done {
            return r;
        }
        // The thread-local is gone (its thread exits) or in use: `f` was
        // not taken.
        let map = self.load();
        let (start, off) = lookup(&map, addr, len, &len_of)?;
        Some(f?(map.get(&start)?, off))
    }

    /// [`Self::with_range`] for a range `a` (address, length) of this map
    /// and a range `b` of `other` at once: `f` gets both values, each with
    /// its range's offset in it. Both are looked for in `recent`, and
    /// noted there when found in their maps. `None` if either map holds no
    /// such range.
    pub fn with_ranges<R>(
        &self,
        other: &Self,
        recent: &'static LocalKey<RefCell<Recent<V>>>,
        a: (u64, u64),
        b: (u64, u64),
        len_of: impl Fn(&V) -> u64,
        f: impl FnOnce((&V, u64), (&V, u64)) -> R,
    ) -> Option<R> {
        let stamps = (self.stamp(), other.stamp());
        let mut f = Some(f);
        let done = recent.try_with(|recent| {
            let mut recent = recent.try_borrow_mut().ok()?;
            // Both noted already, the common case: one look each.
            if let (Some(found_a), Some(found_b)) = (
                recent.find(stamps.0, a.0, a.1),
                recent.find(stamps.1, b.0, b.1),
            ) {
                return Some(f.take()?(found_a, found_b));
            }
            for (map, stamp, (addr, len)) in [(self, stamps.0, a), (other, stamps.1, b)] {
                if recent.find(stamp, addr, len).is_none() {
                    let snapshot = map.load();
                    let (start, _) = lookup(&snapshot, addr, len, &len_of)?;
                    let v = snapshot.get(&start)?;
                    recent.put(stamp, start, len_of(v), v.clone());
                }
            }
            // Noting the second can have pushed out the first: then both
            // are looked up below.
            let recent = &*recent;
            let found_a = recent.find(stamps.0, a.0, a.1)?;
            let found_b = recent.find(stamps.1, b.0, b.1)?;
            Some(f.take()?(found_a, found_b))
        });
        if let Ok(Some(r)) = done {
            return Some(r);
        }
        // Not both in `recent` (nor in their maps, or the thread-local is
        // gone or in use): `f` was not taken.
        let (map_a, map_b) = (self.load(), other.load());
        let (start_a, off_a) = lookup(&map_a, a.0, a.1, &len_of)?;
        let (start_b, off_b) = lookup(&map_b, b.0, b.1, &len_of)?;
        Some(f?(
            (map_a.get(&start_a)?, off_a),
            (map_b.get(&start_b)?, off_b),
        ))
    }
}

/// The key of the range of `map` that holds all of `[addr, addr + len)`
/// (each key starts a range of `len_of(value)` bytes), and `addr`'s offset
/// in it.
fn lookup<V>(
    map: &BTreeMap<u64, V>,
    addr: u64,
    len: u64,
    len_of: impl Fn(&V) -> u64,
) -> Option<(u64, u64)> {
    let (&start, v) = map.range(..=addr).next_back()?;
    let off = addr - start;
    (off.checked_add(len)? <= len_of(v)).then_some((start, off))
}

/// Ranges a thread found lately in [`CowMap`]s of address ranges, each
/// with the [`CowMap::stamp`] it was found under: a hit costs one load of
/// the stamp, where a lookup loads the map (arc-swap's debt slots) and
/// walks the tree. Kept by the caller in a thread-local, one per kind of
/// `V`. Holding a `V` keeps it alive, not valid: an entry whose map has
/// changed is never returned, and a memory's allocation checks, under its
/// lock, that it was not freed. The stamp `S` is one map's
/// [`CowMap::stamp`], or a tuple of several for a note that depends on
/// more than one map.
pub struct Recent<V, S = u64> {
    slots: [Option<Found<V, S>>; RECENT_SLOTS],
    next: usize,
    /// The slot that answered last, looked at first: accesses come in runs
    /// to one range (a post's WQEs, a train's payloads).
    last: Cell<usize>,
}

/// Slots of a [`Recent`]: a WRITE touches a send queue, its doorbell
/// record, a buffer and a CQ on each side, and with both NICs of a
/// process in one thread (decision record 0044) a thread touches both
/// sides'.
const RECENT_SLOTS: usize = 8;

struct Found<V, S> {
    stamp: S,
    start: u64,
    len: u64,
    value: V,
}

impl<V, S: Copy + PartialEq> Found<V, S> {
    /// Its value and `addr`'s offset in it, if it holds all of `[addr,
    /// addr + len)` under `stamp`.
    fn holds(&self, stamp: S, addr: u64, len: u64) -> Option<(&V, u64)> {
        let off = addr.checked_sub(self.start)?;
        (self.stamp == stamp && off.checked_add(len)? <= self.len).then_some((&self.value, off))
    }
}

impl<V, S: Copy + PartialEq> Recent<V, S> {
    /// Nothing found yet.
    pub const fn new() -> Self {
        Self {
            slots: [const { None }; RECENT_SLOTS],
            next: 0,
            last: Cell::new(0),
        }
    }

    /// The range found under `stamp` that holds all of `[addr, addr +
    /// len)`: its value and `addr`'s offset in it.
    pub fn find(&self, stamp: S, addr: u64, len: u64) -> Option<(&V, u64)> {
        let last = self.last.get();
        if let Some(hit) = self
            .slots
            .get(last)
            .and_then(|f| f.as_ref()?.holds(stamp, addr, len))
        {
            return Some(hit);
        }
        let (i, hit) = self
            .slots
            .iter()
            .enumerate()
            .find_map(|(i, f)| Some((i, f.as_ref()?.holds(stamp, addr, len)?)))?;
        self.last.set(i);
        Some(hit)
    }

    /// Notes that `[start, start + len)` is `value` under `stamp`, in place
    /// of the oldest note.
    pub fn put(&mut self, stamp: S, start: u64, len: u64, value: V) {
        self.slots[self.next] = Some(Found {
            stamp,
            start,
            len,
            value,
        });
        self.last.set(self.next);
        self.next = (self.next + 1) % RECENT_SLOTS;
    }
}

impl<V, S: Copy + PartialEq> Default for Recent<V, S> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::{CowMap, Recent};

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

    #[test]
    fn a_stamp_changes_with_the_map_and_names_one_map_only() {
        let (a, b) = (CowMap::<u32, u32>::new(), CowMap::<u32, u32>::new());
        assert_ne!(a.stamp(), b.stamp());
        let before = a.stamp();
        a.update(|m| m.insert(1u32, 1u32));
        assert_ne!(a.stamp(), before);
        let now = a.stamp();
        let r: Result<(), ()> = a.try_update(|m| {
            m.insert(2, 2);
            Err(())
        });
        assert!(r.is_err());
        assert_eq!(a.stamp(), now, "a refused change keeps the stamp");
    }

    #[test]
    fn recent_finds_only_what_it_was_told_under_the_same_stamp() {
        let mut r = Recent::new();
        r.put(7, 0x1000, 0x100, "a");
        assert_eq!(r.find(7, 0x1000, 0x100), Some((&"a", 0)));
        assert_eq!(r.find(7, 0x10f0, 0x10), Some((&"a", 0xf0)));
        assert_eq!(r.find(7, 0x10f0, 0x11), None, "past the end");
        assert_eq!(r.find(7, 0xfff, 1), None, "before the start");
        assert_eq!(r.find(8, 0x1000, 1), None, "another stamp");
        assert_eq!(r.find(7, u64::MAX, 2), None, "no overflow");
        let others = ["b", "c", "d", "e", "f", "g", "h", "i"];
        assert_eq!(others.len(), super::RECENT_SLOTS);
        for (i, v) in others.into_iter().enumerate() {
            r.put(7, 0x2000 * (i as u64 + 1), 0x10, v);
            // Each found, the one found last looked at first.
            assert_eq!(r.find(7, 0x2000, 1), Some((&"b", 0)));
            assert_eq!(r.find(7, 0x2000 * (i as u64 + 1), 1), Some((&v, 0)));
        }
        assert_eq!(r.find(7, 0x1000, 1), None, "the oldest went first");
        assert_eq!(r.find(7, 0x10000, 1), Some((&"i", 0)));
        assert_eq!(r.find(8, 0x10000, 1), None, "the last found, another stamp");
    }

    thread_local! {
        static NOTES: std::cell::RefCell<Recent<u64>> = const { std::cell::RefCell::new(Recent::new()) };
    }

    /// Two maps of ranges: `a` holds `[0x1000, 0x1100)` as 1, `b` holds
    /// `[0x1000, 0x1080)` as 2 and `[0x3000, 0x3010)` as 3; each value is
    /// its range's length's key.
    fn two_maps() -> (CowMap<u64, u64>, CowMap<u64, u64>) {
        let (a, b) = (CowMap::new(), CowMap::new());
        a.update(|m| m.insert(0x1000, 1));
        b.update(|m| {
            m.insert(0x1000, 2);
            m.insert(0x3000, 3)
        });
        (a, b)
    }

    fn len_of(v: &u64) -> u64 {
        match v {
            1 => 0x100,
            2 => 0x80,
            _ => 0x10,
        }
    }

    #[test]
    fn two_ranges_are_found_in_two_maps_however_the_notes_stand() {
        let (a, b) = two_maps();
        let both = |x, y| a.with_ranges(&b, &NOTES, x, y, len_of, |p, q| (*p.0, p.1, *q.0, q.1));
        // Nothing noted yet, then both noted.
        for _ in 0..2 {
            assert_eq!(both((0x1010, 0x20), (0x3004, 4)), Some((1, 0x10, 3, 4)));
        }
        // The same key in both maps names a range of each.
        assert_eq!(both((0x1000, 0x80), (0x1000, 0x80)), Some((1, 0, 2, 0)));
        assert_eq!(both((0x1000, 0x81), (0x1000, 0x81)), None, "past b's end");
        assert_eq!(both((0x2000, 1), (0x3000, 1)), None, "not in a");
        // Notes of other ranges fill the thread's slots: still found.
        for k in 0..8u64 {
            NOTES.with(|n| n.borrow_mut().put(99, k << 20, 1, 0));
            assert_eq!(both((0x10ff, 1), (0x300f, 1)), Some((1, 0xff, 3, 0xf)));
        }
        // With the notes in use (a call inside another), found in the maps.
        let nested = a.with_range(&NOTES, 0x1000, 1, len_of, |_, _| {
            both((0x1001, 1), (0x1001, 1))
        });
        assert_eq!(nested, Some(Some((1, 1, 2, 1))));
        // A change to a map is seen at once.
        b.update(|m| m.remove(&0x3000));
        assert_eq!(both((0x1010, 0x20), (0x3004, 4)), None, "b changed");
    }
}
