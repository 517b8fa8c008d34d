//! Doorbells through memory: the send doorbell records of a hosted
//! provider's QPs, and the arm words of its CQs, watched.
//!
//! A provider that maps the UAR pages itself rings with plain stores, which
//! no MMIO path sees. Where it rings through the public `post_send` this
//! library is called and tells the device at once; but libmlx5's `ibv_wr_*`
//! API (`ibv_wr_complete`), and programs that post through mlx5dv (UCX),
//! ring without calling anything. Every such doorbell is preceded by a
//! store of the QP's send counter to its doorbell record (x86 keeps the
//! order), so watching the records finds them all, exactly: a record that
//! moved is a doorbell. Three places look:
//!
//! - the wrapped `post_send`, after the provider's (at once; the store is
//!   then read back from the register, `uar`, and handed over as the MMIO
//!   writes it was);
//! - the wrapped `poll_cq`, before the provider's, for the QPs that send
//!   into that CQ (a program that posts, then polls, is seen at its poll);
//! - a watcher thread, for programs that poll their CQs themselves: it scans
//!   every record, spinning for a while after it found one moved, then
//!   sleeping longer and longer (up to [`IDLE_SLEEP`]) while none does.
//!
//! CQ arms are subtler: all CQs arm through one register, and a repeated arm
//! may store the same word again (a fresh CQ's first arm writes 0 over 0).
//! So the arm word of each CQ's record is consumed: this library writes a
//! sentinel there that libmlx5 never writes ([`ARM_TAKEN`]; it only ever
//! stores the word, never reads it), and whoever swaps a real arm word out
//! hands the device the arm doorbell libmlx5 made of it (that word and the
//! CQN, at the arm register): each arm once, none lost.

#![allow(unsafe_code)]

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use doorbell_host::{Mmio, RecordDoorbell};
use doorbell_types::{Cqn, Qpn, UarIndex};

/// How long the watcher spins after a record moved.
const SPIN: Duration = Duration::from_micros(200);
/// Its first sleep once nothing moves; doubled up to [`IDLE_SLEEP`].
const FIRST_SLEEP: Duration = Duration::from_micros(20);
/// Its longest sleep: the most a doorbell nobody else reports waits.
const IDLE_SLEEP: Duration = Duration::from_millis(2);

/// What an arm word reads once taken: bits 30 and 31 are set, which no
/// arm word has (`sn << 28 | cmd << 24 | ci`, `cmd` 0 or 1).
pub(crate) const ARM_TAKEN: u32 = u32::MAX;
/// The arm register's offset in a UAR page (MLX5_CQ_DOORBELL).
const CQ_DOORBELL: u32 = 0x20;

/// One watched CQ.
struct WatchedCq {
    cqn: Cqn,
    uar: UarIndex,
    /// The arm word of the CQ's doorbell record.
    arm: *mut u32,
}

// SAFETY: as for `Watched`: the record is mapped while the CQ exists, read
// under the list's lock, and the CQ leaves the list before it goes.
unsafe impl Send for WatchedCq {}
// SAFETY: as above.
unsafe impl Sync for WatchedCq {}

/// One watched send queue.
struct Watched {
    qpn: Qpn,
    uar: UarIndex,
    send_cq: Cqn,
    /// The send counter's word in the QP's doorbell record.
    counter: *const u32,
    /// Its value when the device was last told.
    seen: AtomicU32,
    /// Calls of the wrapped `post_send` on the QP under way: while one is,
    /// the watcher leaves the QP to it, so that a doorbell rung through
    /// the public ops is told to the device as the store it was.
    posting: AtomicU32,
}

// SAFETY: `counter` points into a doorbell-record page the provider keeps
// mapped while the QP exists; it is read only under the list's lock, and
// the QP leaves the list (under the write lock) before it is destroyed.
unsafe impl Send for Watched {}
// SAFETY: as above.
unsafe impl Sync for Watched {}

/// The watched send queues of one context, and their watcher thread.
pub(crate) struct Watch {
    qps: Arc<RwLock<Vec<Watched>>>,
    cqs: Arc<RwLock<Vec<WatchedCq>>>,
    mmio: Arc<dyn Mmio>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Watch {
    pub(crate) fn new(mmio: Arc<dyn Mmio>) -> Self {
        Self {
            qps: Arc::new(RwLock::new(Vec::new())),
            cqs: Arc::new(RwLock::new(Vec::new())),
            mmio,
            stop: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
        }
    }

    /// Starts the watcher thread (with every signal blocked, as the
    /// library's other threads).
    pub(crate) fn start(&self) -> Result<(), core::ffi::c_int> {
        let (qps, cqs) = (self.qps.clone(), self.cqs.clone());
        let (mmio, stop) = (self.mmio.clone(), self.stop.clone());
        let t = std::thread::Builder::new()
            .name("doorbell-watch".into())
            .spawn(move || {
                crate::events::block_signals();
                let mut quiet_since = Instant::now();
                let mut sleep = FIRST_SLEEP;
                while !stop.load(Ordering::Acquire) {
                    let armed = take_arms(&cqs, &*mmio, None);
                    if scan(&qps, &*mmio, None) || armed {
                        quiet_since = Instant::now();
                        sleep = FIRST_SLEEP;
                    } else if quiet_since.elapsed() < SPIN {
                        std::hint::spin_loop();
                    } else {
                        std::thread::sleep(sleep);
                        sleep = (sleep * 2).min(IDLE_SLEEP);
                    }
                }
            })
            .map_err(|_| libc::EAGAIN)?;
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(())
    }

    /// Watches QP `qpn`'s send counter at `counter`.
    ///
    /// # Safety
    /// `counter` must point to the aligned send-counter word of the QP's
    /// doorbell record, mapped until [`Watch::forget`] of the QP returns.
    pub(crate) unsafe fn add(&self, qpn: Qpn, uar: UarIndex, send_cq: Cqn, counter: *const u32) {
        // SAFETY: the caller's promise.
        let now = unsafe { counter.read_volatile() };
        write(&self.qps).push(Watched {
            qpn,
            uar,
            send_cq,
            counter,
            seen: AtomicU32::new(now),
            posting: AtomicU32::new(0),
        });
    }

    /// A wrapped `post_send` on QP `qpn` begins (`true`) or has told the
    /// device what it rang (`false`).
    pub(crate) fn posting(&self, qpn: Qpn, begins: bool) {
        if let Some(w) = read(&self.qps).iter().find(|w| w.qpn == qpn) {
            if begins {
                w.posting.fetch_add(1, Ordering::SeqCst);
            } else {
                w.posting.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Stops watching QP `qpn` (before its record goes: when the destroy
    /// succeeded, and before it returns to the provider).
    pub(crate) fn forget(&self, qpn: Qpn) {
        write(&self.qps).retain(|w| w.qpn != qpn);
    }

    /// Watches CQ `cqn`'s arm word at `arm`, which is taken first (a
    /// fresh CQ's record holds 0, a valid arm word).
    ///
    /// # Safety
    /// `arm` must point to the aligned arm word of the CQ's doorbell
    /// record, mapped until [`Watch::forget_cq`] of the CQ returns.
    pub(crate) unsafe fn add_cq(&self, cqn: Cqn, uar: UarIndex, arm: *mut u32) {
        // SAFETY: the caller's promise; the word is only ever swapped.
        unsafe { AtomicU32::from_ptr(arm) }.store(ARM_TAKEN, Ordering::Release);
        write(&self.cqs).push(WatchedCq { cqn, uar, arm });
    }

    /// Stops watching CQ `cqn` (likewise).
    pub(crate) fn forget_cq(&self, cqn: Cqn) {
        write(&self.cqs).retain(|w| w.cqn != cqn);
    }

    /// Hands the device the arms stored since last looked, of `cq` (all
    /// with `None`); true if there was one.
    pub(crate) fn arms(&self, cq: Option<Cqn>) -> bool {
        take_arms(&self.cqs, &*self.mmio, cq)
    }

    /// Tells the device of each QP whose record moved, of those sending
    /// into `cq` (all with `None`); true if any had.
    pub(crate) fn check(&self, cq: Option<Cqn>) -> bool {
        scan(&self.qps, &*self.mmio, cq)
    }

    /// QP `qpn` rang through the wrapped `post_send`: true if its record
    /// moved and nobody has told the device yet, who then must (the swap of
    /// the value seen decides who tells it, once).
    pub(crate) fn claim(&self, qpn: Qpn) -> bool {
        let qps = read(&self.qps);
        qps.iter().find(|w| w.qpn == qpn).is_some_and(|w| {
            // SAFETY: read under the list's lock (type's invariant).
            let now = unsafe { w.counter.read_volatile() };
            w.seen.swap(now, Ordering::Relaxed) != now
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

fn scan(qps: &RwLock<Vec<Watched>>, mmio: &dyn Mmio, cq: Option<Cqn>) -> bool {
    let mut moved = false;
    for w in read(qps)
        .iter()
        .filter(|w| cq.is_none_or(|c| c == w.send_cq))
    {
        // SAFETY: read under the list's lock: the record is mapped (type's
        // invariant). The provider stores the word from another thread;
        // a volatile read of an aligned word sees a whole old or new value,
        // as a device's DMA read of it would.
        let now = unsafe { w.counter.read_volatile() };
        // A post through the public ops is under way: it tells the device
        // itself, as the store it made. The count is raised before the
        // provider writes the record, so a record seen to move here was
        // written after it.
        if now != w.seen.load(Ordering::Relaxed) && w.posting.load(Ordering::SeqCst) > 0 {
            continue;
        }
        if w.seen.swap(now, Ordering::Relaxed) != now {
            mmio.record_doorbell(w.uar, RecordDoorbell::Send(w.qpn));
            moved = true;
        }
    }
    moved
}

fn take_arms(cqs: &RwLock<Vec<WatchedCq>>, mmio: &dyn Mmio, cq: Option<Cqn>) -> bool {
    let mut armed = false;
    for w in read(cqs).iter().filter(|w| cq.is_none_or(|c| c == w.cqn)) {
        // SAFETY: under the list's lock the record is mapped (type's
        // invariant). libmlx5 stores the word with a plain aligned 32-bit
        // store from its threads; the swap sees it whole or not at all, and
        // takes it exactly once.
        let word = unsafe { AtomicU32::from_ptr(w.arm) }.swap(ARM_TAKEN, Ordering::AcqRel);
        if word != ARM_TAKEN {
            // The arm doorbell as libmlx5 stores it: the record's word (in
            // memory order, big-endian) and the CQN.
            let mut db = [0u8; 8];
            db[..4].copy_from_slice(&word.to_ne_bytes());
            db[4..].copy_from_slice(&w.cqn.get().to_be_bytes());
            mmio.mmio_write(w.uar, CQ_DOORBELL, &db);
            armed = true;
        }
    }
    armed
}
