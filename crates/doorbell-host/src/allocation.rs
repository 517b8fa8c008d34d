//! One allocation of a [`HostMemory`](crate::HostMemory) implementation, as
//! its [`CowMap`](crate::CowMap) holds it (decision records 0031, 0041).

use std::sync::atomic::{AtomicBool, Ordering};

use spin::mutex::{SpinMutex, SpinMutexGuard};

/// Looks at a held lock this many times, a pause apart, before a thread
/// that waits for it yields its core between looks: a section under the
/// lock is a copy (a 64 KiB one takes a few microseconds), but its holder
/// may have lost its core.
const SPINS: u32 = 1 << 10;

/// An allocation's length, its bytes (of type `B`) and its pins, on cache
/// lines of their own (two allocations' locks never share a line: the
/// device writing one must not contend with a host thread polling
/// another). Freeing takes the bytes under the same lock that pins and
/// accesses take, so a free and a pin cannot both succeed, and an access
/// through a map loaded before the free finds nothing to touch.
///
/// A thread holds one allocation's lock at a time, except in
/// [`Self::with_pair`], which takes two in one order for all allocations
/// (by address): two threads that copy between the same two allocations in
/// opposite directions then cannot deadlock.
///
/// The lock is a spin lock: taking it is one compare-and-swap and letting
/// it go a store, where a mutex that may have sleepers to wake lets go
/// with a second locked instruction. A locked instruction waits until the
/// core's earlier stores have left it; on the path of a message there are
/// about a dozen accesses a side.
///
/// Whether it is still allocated is also kept outside the lock
/// ([`Self::is_live`]), on a line of its own: a check that memory may be
/// accessed (a sender's DMA read of a payload that the receiver copies
/// later) then waits for no copy that holds the lock, and reads no line
/// that the copy's lock writes (decision record 0061).
#[repr(align(128))]
pub struct Allocation<B> {
    len: u64,
    /// True until [`Self::free`] takes the bytes (stored under the lock).
    live: AtomicBool,
    state: Locked<B>,
}

/// The lock and what it guards, on lines of their own.
#[repr(align(64))]
struct Locked<B>(SpinMutex<State<B>>);

struct State<B> {
    /// `None` once freed.
    bytes: Option<B>,
    pins: u32,
}

/// Why [`Allocation::free`] did not free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotFreed {
    /// It holds this many pins.
    Pinned(u32),
    /// It was freed already.
    Gone,
}

impl<B> Allocation<B> {
    /// `len` bytes held in `bytes`, with no pins.
    pub fn new(len: u64, bytes: B) -> Self {
        Self {
            len,
            live: AtomicBool::new(true),
            state: Locked(SpinMutex::new(State {
                bytes: Some(bytes),
                pins: 0,
            })),
        }
    }

    /// Its length, fixed at allocation (read without the lock).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn lock(&self) -> SpinMutexGuard<'_, State<B>> {
        // (No poisoning: a panic under the lock lets it go as it unwinds,
        // and every section leaves the state whole.)
        let mut looks = 0u32;
        loop {
            if let Some(g) = self.state.0.try_lock() {
                return g;
            }
            // Held: wait reading, not writing, the lock's line.
            while self.state.0.is_locked() {
                if looks < SPINS {
                    looks += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Runs `f` on the bytes under the lock; `None` if freed.
    pub fn with<R>(&self, f: impl FnOnce(&mut B) -> R) -> Option<R> {
        self.lock().bytes.as_mut().map(f)
    }

    /// Runs `f` on the bytes of `self` and of `other`, under both locks,
    /// taken in address order; `None` if either was freed. `other` must be
    /// another allocation: `None`, without running `f`, if it is `self`.
    pub fn with_pair<R>(&self, other: &Self, f: impl FnOnce(&mut B, &mut B) -> R) -> Option<R> {
        if std::ptr::eq(self, other) {
            return None;
        }
        let (mut mine, mut theirs) = if (self as *const Self) < (other as *const Self) {
            let mine = self.lock();
            (mine, other.lock())
        } else {
            let theirs = other.lock();
            (self.lock(), theirs)
        };
        let (a, b) = (mine.bytes.as_mut()?, theirs.bytes.as_mut()?);
        Some(f(a, b))
    }

    /// Takes a pin; false if freed.
    pub fn pin(&self) -> bool {
        let mut s = self.lock();
        if s.bytes.is_none() {
            return false;
        }
        s.pins += 1;
        true
    }

    /// Drops a pin; false if it holds none (or was freed).
    pub fn unpin(&self) -> bool {
        let mut s = self.lock();
        match s.pins.checked_sub(1) {
            Some(p) if s.bytes.is_some() => {
                s.pins = p;
                true
            }
            _ => false,
        }
    }

    /// Takes the bytes, unless it is pinned or freed already.
    pub fn free(&self) -> Result<B, NotFreed> {
        let mut s = self.lock();
        if s.pins > 0 {
            return Err(NotFreed::Pinned(s.pins));
        }
        let bytes = s.bytes.take().ok_or(NotFreed::Gone)?;
        // Under the lock: an access that takes it after this finds no
        // bytes, and a look at the flag after this finds it down.
        self.live.store(false, Ordering::Release);
        Ok(bytes)
    }

    /// Whether it is still allocated, read without the lock: true until a
    /// [`Self::free`] succeeds. An access made after a `true` may still
    /// find it freed since, as an access made after the lock was let go
    /// may; one made after a `false` never finds it allocated.
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Whether it was freed.
    pub fn is_freed(&self) -> bool {
        !self.is_live()
    }
}

#[cfg(test)]
mod tests {
    use super::{Allocation, NotFreed};

    #[test]
    fn a_pinned_allocation_is_not_freed_and_a_freed_one_is_not_pinned() {
        let a = Allocation::new(3, vec![1u8, 2, 3]);
        assert!(a.pin());
        assert_eq!(a.free(), Err(NotFreed::Pinned(1)));
        assert_eq!(a.with(|b| b[1]), Some(2));
        assert!(a.unpin());
        assert!(!a.unpin(), "no pin left");
        assert!(a.is_live(), "a refused free leaves it allocated");
        assert_eq!(a.free(), Ok(vec![1, 2, 3]));
        assert!(a.is_freed() && !a.is_live());
        assert!(!a.pin());
        assert_eq!(a.with(|b| b.len()), None);
        assert_eq!(a.free(), Err(NotFreed::Gone));
    }

    #[test]
    fn a_pair_is_two_allocations_both_live() {
        let a = Allocation::new(2, vec![1u8, 2]);
        let b = Allocation::new(2, vec![0u8, 0]);
        assert_eq!(a.with_pair(&b, |a, b| b.copy_from_slice(a)), Some(()));
        assert_eq!(b.with(|b| b.clone()), Some(vec![1, 2]));
        assert_eq!(a.with_pair(&a, |_, _| ()), None, "one allocation twice");
        b.free().expect("free");
        assert_eq!(a.with_pair(&b, |_, _| ()), None, "the other was freed");
        assert_eq!(b.with_pair(&a, |_, _| ()), None, "this one was freed");
    }

    #[test]
    fn pairs_taken_in_both_directions_at_once_do_not_deadlock() {
        let a = std::sync::Arc::new(Allocation::new(64, vec![1u8; 64]));
        let b = std::sync::Arc::new(Allocation::new(64, vec![2u8; 64]));
        let (done, finished) = std::sync::mpsc::channel();
        for (x, y) in [(a.clone(), b.clone()), (b, a)] {
            let done = done.clone();
            // A deadlocked thread is left behind: the test fails on time.
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    x.with_pair(&y, |x, y| y.copy_from_slice(x))
                        .expect("both live");
                }
                let _ = done.send(());
            });
        }
        for k in 0..2 {
            let r = finished.recv_timeout(std::time::Duration::from_secs(30));
            assert!(r.is_ok(), "thread {k} of 2 did not finish: a deadlock");
        }
    }

    #[test]
    fn accesses_from_two_threads_never_overlap() {
        let a = std::sync::Arc::new(Allocation::new(4096, vec![0u8; 4096]));
        let threads: Vec<_> = (1..=2u8)
            .map(|t| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        a.with(|b| {
                            // Whatever the other wrote, it wrote whole.
                            let first = b[0];
                            assert!(b.iter().all(|&x| x == first), "a torn access");
                            b.fill(t);
                        })
                        .expect("not freed");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no torn access");
        }
    }
}
