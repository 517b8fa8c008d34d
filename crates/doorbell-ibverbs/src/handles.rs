//! The one audited place where a C pointer becomes a Rust object again
//! (STYLE R16).
//!
//! Every object C holds a handle to is a `Box` of a `#[repr(C)]` Rust struct
//! whose C part ([`Handle::C`]) sits at a fixed offset ([`Handle::C_AT`]):
//! first for most, after the `verbs_context` prefix for a context. The box is
//! leaked into the C pointer at creation and registered here with its kind;
//! [`get`] finds it again only if that exact address is registered as that
//! kind, so a pointer C made up, a handle of another kind, or one already
//! destroyed is refused (EINVAL, or as the function's convention says)
//! instead of being dereferenced. [`take`] unregisters and gives the box
//! back for destruction.
//!
//! The rule C callers keep, as with rdma-core: an object is not used by one
//! thread while another destroys it.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use libc::EINVAL;

/// The kinds of handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Context,
    Pd,
    Mr,
    Cq,
    Channel,
    Qp,
    Ah,
    Srq,
    Td,
    CmChannel,
    CmId,
}

/// A Rust object that owns a C struct handed out as a handle.
///
/// # Safety
/// `Self` must be `#[repr(C)]` with a `Self::C` at byte offset `C_AT`, so
/// that a `*mut Self::C` made by [`register`] points into the object.
pub(crate) unsafe trait Handle: Sized + Send + Sync + 'static {
    /// The C struct the handle points to.
    type C;
    /// Its offset in `Self`.
    const C_AT: usize;
    /// The handle's kind.
    const KIND: Kind;
}

/// The live handles. A leaf lock (decision record 0068): nothing is
/// taken or waited for while it is held ([`with`]'s `f` included).
static LIVE: Mutex<BTreeMap<usize, Kind>> = Mutex::new(BTreeMap::new());

/// Bumped, under [`LIVE`]'s lock, each time a handle is unregistered.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Handles a thread remembers.
const REMEMBERED: usize = 4;

/// A handle found live, and [`GENERATION`] then.
type Seen = Option<(usize, Kind, u64)>;

thread_local! {
    /// The last few handles this thread looked up and found live, each
    /// with [`GENERATION`] then: while no handle has been unregistered
    /// since, they are still live, and the registry's lock need not be
    /// taken (a program calls `ibv_wr_*`, `ibv_post_send` and
    /// `ibv_poll_cq` on the same few handles millions of times a second).
    /// The next slot to replace comes last.
    static SEEN: Cell<([Seen; REMEMBERED], usize)> = const { Cell::new(([None; REMEMBERED], 0)) };
}

/// True if `c` is a live handle of kind `kind`.
fn is_live(c: usize, kind: Kind) -> bool {
    let gen_now = GENERATION.load(Ordering::Acquire);
    let want = Some((c, kind, gen_now));
    if SEEN
        .try_with(|s| s.get().0.contains(&want))
        .unwrap_or(false)
    {
        return true;
    }
    let live = live();
    // Read again under the lock: an unregistration before it is seen.
    let gen_now = GENERATION.load(Ordering::Relaxed);
    let ok = live.get(&c) == Some(&kind);
    if ok {
        let _ = SEEN.try_with(|s| {
            let (mut seen, next) = s.get();
            seen[next] = Some((c, kind, gen_now));
            s.set((seen, (next + 1) % REMEMBERED));
        });
    }
    ok
}

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, Kind>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lock of the live handles, held (for `forks`).
pub(crate) fn hold_for_fork() -> std::sync::MutexGuard<'static, BTreeMap<usize, Kind>> {
    live()
}

/// Leaks `obj` and returns the C handle to it, registered as `T::KIND`.
pub(crate) fn register<T: Handle>(obj: Box<T>) -> *mut T::C {
    let base = Box::into_raw(obj).cast::<u8>();
    // SAFETY: C_AT is inside the object (Handle's contract), so the offset
    // stays within the allocation.
    let c = unsafe { base.add(T::C_AT) }.cast::<T::C>();
    live().insert(c as usize, T::KIND);
    c
}

fn object_of<T: Handle>(c: *mut T::C) -> Result<*mut T, i32> {
    if c.is_null() || !is_live(c as usize, T::KIND) {
        return Err(EINVAL);
    }
    // SAFETY: the address was registered by `register::<T>`, so it is
    // `C_AT` bytes into a live `Box<T>`.
    Ok(unsafe { c.cast::<u8>().sub(T::C_AT) }.cast::<T>())
}

/// The object behind handle `c`, or EINVAL if `c` is not a live handle of
/// this kind.
pub(crate) fn get<'a, T: Handle>(c: *mut T::C) -> Result<&'a T, i32> {
    let p = object_of::<T>(c)?;
    // SAFETY: `p` is a live boxed `T` (object_of); it is freed only by
    // `take`, which callers do not race with uses (module rule).
    Ok(unsafe { &*p })
}

/// Runs `f` on the object behind handle `c` while no thread can destroy
/// it (the registry is held): for a call that takes what it needs (an
/// `Arc` it clones) and then blocks, so that a destroy in another thread
/// meanwhile frees nothing the blocked call still uses, as a read blocked
/// on a descriptor keeps its file when another thread closes it. `f` must
/// take no lock and not wait: the registry is a leaf lock.
pub(crate) fn with<T: Handle, R>(c: *mut T::C, f: impl FnOnce(&T) -> R) -> Result<R, i32> {
    let live = live();
    if c.is_null() || live.get(&(c as usize)) != Some(&T::KIND) {
        return Err(EINVAL);
    }
    // SAFETY: registered as `T` (checked above, under the lock that `take`
    // needs to unregister it), so it is `C_AT` bytes into a live `Box<T>`
    // for as long as the lock is held.
    let obj = unsafe { &*c.cast::<u8>().sub(T::C_AT).cast::<T>() };
    Ok(f(obj))
}

/// Unregisters handle `c` and gives its object back to be dropped.
pub(crate) fn take<T: Handle>(c: *mut T::C) -> Result<Box<T>, i32> {
    let p = object_of::<T>(c)?;
    {
        let mut live = live();
        // Two threads destroying one handle at once: only the one that
        // unregisters it takes the object.
        if live.get(&(c as usize)) != Some(&T::KIND) {
            return Err(EINVAL);
        }
        live.remove(&(c as usize));
        // Every thread's remembered handle is now suspect.
        GENERATION.fetch_add(1, Ordering::Release);
    }
    // SAFETY: `p` came from Box::into_raw in `register` and, now that it is
    // unregistered, nothing else will turn it back into a Box.
    Ok(unsafe { Box::from_raw(p) })
}

/// Puts back an object [`take`] returned when its destruction is refused
/// (EBUSY): the handle stays valid.
pub(crate) fn restore<T: Handle>(obj: Box<T>) -> *mut T::C {
    register(obj)
}

/// Implements [`Handle`] (and `Send`/`Sync`) for a `#[repr(C)]` object whose
/// C struct is the named field.
#[macro_export]
#[doc(hidden)]
macro_rules! handle {
    ($t:ty, $c:ty, $field:ident, $kind:ident) => {
        // SAFETY: repr(C) with the C struct as the field named here.
        unsafe impl $crate::handles::Handle for $t {
            type C = $c;
            const C_AT: usize = core::mem::offset_of!($t, $field);
            const KIND: $crate::handles::Kind = $crate::handles::Kind::$kind;
        }
        // SAFETY: the C part is raw pointers and plain data written before
        // the handle is handed out; the Rust part is Send + Sync.
        unsafe impl Send for $t {}
        // SAFETY: as above.
        unsafe impl Sync for $t {}
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Obj {
        c: u64,
        value: u32,
    }
    crate::handle!(Obj, u64, c, Td);

    #[repr(C)]
    struct Other {
        c: u64,
    }
    crate::handle!(Other, u64, c, Srq);

    #[test]
    fn a_remembered_handle_is_forgotten_once_any_handle_is_destroyed() {
        let a = register(Box::new(Obj { c: 0, value: 1 }));
        let b = register(Box::new(Obj { c: 0, value: 2 }));
        assert_eq!(get::<Obj>(a).map(|o| o.value), Ok(1));
        assert_eq!(get::<Obj>(b).map(|o| o.value), Ok(2));
        // Looked up again from this thread's memory of it.
        assert_eq!(get::<Obj>(a).map(|o| o.value), Ok(1));
        // The wrong kind, though remembered as a Td.
        assert_eq!(get::<Other>(a).err(), Some(EINVAL));
        assert_eq!(take::<Obj>(a).map(|o| o.value), Ok(1));
        assert_eq!(get::<Obj>(a).err(), Some(EINVAL), "destroyed");
        // Another thread destroys b while this one remembers it.
        assert_eq!(get::<Obj>(b).map(|o| o.value), Ok(2));
        let raw = b as usize;
        std::thread::spawn(move || drop(take::<Obj>(raw as *mut u64).unwrap()))
            .join()
            .unwrap();
        assert_eq!(get::<Obj>(b).err(), Some(EINVAL), "destroyed elsewhere");
        assert_eq!(get::<Obj>(std::ptr::null_mut()).err(), Some(EINVAL));
    }
}
