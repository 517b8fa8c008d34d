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

use std::sync::{Arc, Mutex, Once, Weak};

use doorbell_pcie::Carried;
use doorbell_rt::LiveNic;
use doorbell_rt::stats::NicStats;

/// The variable naming the statistics file.
pub(crate) const STATS_VAR: &str = "DOORBELL_STATS";
/// The variable naming the capture file.
pub(crate) const CAPTURE_VAR: &str = "DOORBELL_HIF_LOG";
/// The variable naming the timeline's file.
pub(crate) const TRACE_VAR: &str = doorbell_rt::ProcessNicConfig::TRACE_VAR;

struct Watch {
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
static AT_EXIT: Once = Once::new();

fn lock() -> std::sync::MutexGuard<'static, Watch> {
    WATCH.lock().unwrap_or_else(|e| e.into_inner())
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
    let mut w = lock();
    let same = w.nic.upgrade().is_some_and(|n| Arc::ptr_eq(&n, nic));
    if capture_wanted().is_some() && !same {
        // A capture runs from the first open on this NIC.
        let _ = nic.capture(true);
    }
    w.nic = Arc::downgrade(nic);
    drop(w);
    AT_EXIT.call_once(|| {
        // SAFETY: registers a function with no arguments that stays valid
        // for the life of the process (it is in this library, which the
        // loader keeps mapped until exit handlers have run).
        unsafe { libc::atexit(write_at_exit) };
    });
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
            let c = {
                let mut w = lock();
                let rest = w
                    .nic
                    .upgrade()
                    .map(|n| n.capture(false))
                    .unwrap_or_default();
                let mut all = std::mem::take(&mut w.captured);
                all.extend(rest);
                all
            };
            let text = doorbell_rt::stats::capture_json_lines(&c);
            if let Err(e) = std::fs::write(&dest, text) {
                eprintln!("libibverbs.so.1 (doorbell): cannot write {dest}: {e}");
            }
        }
        if let Some(dest) = trace_wanted() {
            let t = {
                let mut w = lock();
                let rest = w.nic.upgrade().and_then(|n| n.take_trace());
                let mut all = w.traced.take().unwrap_or_default();
                if let Some(r) = rest {
                    all.append(r);
                }
                all
            };
            if let Err(e) = std::fs::write(&dest, t.to_json()) {
                eprintln!("libibverbs.so.1 (doorbell): cannot write {dest}: {e}");
            }
        }
        let Some(dest) = wanted() else { return };
        let stats = {
            let w = lock();
            match w.nic.upgrade() {
                Some(nic) => Some(nic.snapshot()),
                None => w.last.clone(),
            }
        };
        let Some(stats) = stats else { return };
        if dest == "-" {
            eprint!("{}", stats.to_table());
        } else if let Err(e) = std::fs::write(&dest, stats.to_json() + "\n") {
            eprintln!("libibverbs.so.1 (doorbell): cannot write {dest}: {e}");
        }
    });
}
