//! `DOORBELL_STATS` (`doorbell run --stats FILE`): when the program exits,
//! the NIC's counters go to FILE as JSON, or as a short table to stderr for
//! `-` (`doorbell_rt::stats` renders both). A context closed before the
//! exit leaves the counters as they were then; a NIC still open at the exit
//! is read at the exit.
//!
//! `DOORBELL_HIF_LOG` (`doorbell run --hif-log FILE`): likewise, a capture of
//! the host interface goes to FILE as JSON lines
//! (`doorbell_rt::stats::capture_json_lines`): every register store, and
//! the WQEs, doorbell records and CQEs the device moved, with their bytes.
//!
//! `DOORBELL_TRACE` (`doorbell run --trace FILE`): the NIC records a
//! timeline (`doorbell_rt::NicOptions::trace`), written to FILE at exit as
//! Chrome trace-event JSON for Perfetto UI.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use doorbell_pcie::Carried;
use doorbell_rt::LiveNic;
use doorbell_rt::stats::NicStats;

/// The variable naming the statistics file.
pub(crate) const STATS_VAR: &str = "DOORBELL_STATS";
/// The variable naming the capture file.
pub(crate) const CAPTURE_VAR: &str = "DOORBELL_HIF_LOG";
/// The variable naming the timeline's file.
pub(crate) const TRACE_VAR: &str = doorbell_rt::ProcessNicConfig::TRACE_VAR;

/// What the exit handler writes. Its lock is a leaf (decision record
/// 0068): the NIC is asked for its counters, capture and trace with the
/// lock released, since each is a round trip to the NIC's thread.
pub(crate) struct Watch {
    nic: Weak<LiveNic>,
    last: Option<NicStats>,
    /// What was captured until a context closed.
    captured: Vec<Carried>,
    /// The timeline until a context closed.
    traced: Option<doorbell_trace::Trace>,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    nic: Weak::new(),
    last: None,
    captured: Vec::new(),
    traced: None,
});
/// Whether the exit handler is registered: a flag, not a `Once`, whose
/// guard a fork could leave half run for the child to wait on.
static AT_EXIT: AtomicBool = AtomicBool::new(false);

fn lock() -> std::sync::MutexGuard<'static, Watch> {
    WATCH.lock().unwrap_or_else(|e| e.into_inner())
}

/// The lock of what the exit handler writes, held (for `forks`).
pub(crate) fn hold_for_fork() -> std::sync::MutexGuard<'static, Watch> {
    lock()
}

fn wanted() -> Option<String> {
    std::env::var(STATS_VAR).ok().filter(|v| !v.is_empty())
}

fn capture_wanted() -> Option<String> {
    std::env::var(CAPTURE_VAR).ok().filter(|v| !v.is_empty())
}

fn trace_wanted() -> Option<String> {
    std::env::var(TRACE_VAR).ok().filter(|v| !v.is_empty())
}

/// A context was opened on `nic`: watch it, and write the files at exit.
pub(crate) fn opened(nic: &Arc<LiveNic>) {
    if wanted().is_none() && capture_wanted().is_none() && trace_wanted().is_none() {
        return;
    }
    let same = {
        let mut w = lock();
        // Compared without an upgrade, whose drop could be another NIC's
        // last (its threads joined with the lock held). A `Weak` keeps its
        // allocation, so an equal pointer is this NIC.
        let same = std::ptr::eq(w.nic.as_ptr(), Arc::as_ptr(nic));
        w.nic = Arc::downgrade(nic);
        same
    };
    if capture_wanted().is_some() && !same {
        // A capture runs from the first open on this NIC.
        let _ = nic.capture(true);
    }
    if !AT_EXIT.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a function with no arguments that stays valid
        // for the life of the process (it is in this library, which the
        // loader keeps mapped until exit handlers have run).
        unsafe { libc::atexit(write_at_exit) };
    }
}

/// A context on `nic` is closing: keep its counters as they are now, and
/// what was captured so far.
pub(crate) fn closing(nic: &Arc<LiveNic>) {
    if wanted().is_some() {
        let s = nic.snapshot();
        lock().last = Some(s);
    }
    if capture_wanted().is_some() {
        let c = nic.capture(true);
        lock().captured.extend(c);
    }
    if trace_wanted().is_some()
        && let Some(t) = nic.take_trace()
    {
        let mut w = lock();
        match &mut w.traced {
            Some(all) => all.append(t),
            None => w.traced = Some(t),
        }
    }
}

extern "C" fn write_at_exit() {
    // No unwinding out of an exit handler: a failure only loses the file.
    let _ = std::panic::catch_unwind(|| {
        if let Some(dest) = capture_wanted() {
            let (nic, mut c) = {
                let mut w = lock();
                (w.nic.upgrade(), std::mem::take(&mut w.captured))
            };
            c.extend(nic.map(|n| n.capture(false)).unwrap_or_default());
            let text = doorbell_rt::stats::capture_json_lines(&c);
            if let Err(e) = std::fs::write(&dest, text) {
                eprintln!("libibverbs.so.1 (doorbell): cannot write {dest}: {e}");
            }
        }
        if let Some(dest) = trace_wanted() {
            let (nic, mut t) = {
                let mut w = lock();
                (w.nic.upgrade(), w.traced.take().unwrap_or_default())
            };
            if let Some(r) = nic.and_then(|n| n.take_trace()) {
                t.append(r);
            }
            if let Err(e) = std::fs::write(&dest, t.to_json()) {
                eprintln!("libibverbs.so.1 (doorbell): cannot write {dest}: {e}");
            }
        }
        let Some(dest) = wanted() else { return };
        let (nic, last) = {
            let w = lock();
            (w.nic.upgrade(), w.last.clone())
        };
        let stats = match nic {
            Some(nic) => Some(nic.snapshot()),
            None => last,
        };
        let Some(stats) = stats else { return };
        if dest == "-" {
            eprint!("{}", stats.to_table());
        } else if let Err(e) = std::fs::write(&dest, stats.to_json() + "\n") {
            eprintln!("libibverbs.so.1 (doorbell): cannot write {dest}: {e}");
        }
    });
}
