//! `DOORBELL_STATS` (`doorbell run --stats FILE`): when the program exits,
//! the NIC's counters go to FILE as JSON, or as a short table to stderr for
//! `-` (`doorbell_rt::stats` renders both). A context closed before the
//! exit leaves the counters as they were then; a NIC still open at the exit
//! is read at the exit.

#![allow(unsafe_code)]

use std::sync::{Arc, Mutex, Once, Weak};

use doorbell_rt::LiveNic;
use doorbell_rt::stats::NicStats;

/// The variable naming the statistics file.
pub(crate) const STATS_VAR: &str = "DOORBELL_STATS";

struct Watch {
    nic: Weak<LiveNic>,
    last: Option<NicStats>,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    nic: Weak::new(),
    last: None,
});
static AT_EXIT: Once = Once::new();

fn lock() -> std::sync::MutexGuard<'static, Watch> {
    WATCH.lock().unwrap_or_else(|e| e.into_inner())
}

fn wanted() -> Option<String> {
    std::env::var(STATS_VAR).ok().filter(|v| !v.is_empty())
}

/// A context was opened on `nic`: watch it, and write the file at exit.
pub(crate) fn opened(nic: &Arc<LiveNic>) {
    if wanted().is_none() {
        return;
    }
    lock().nic = Arc::downgrade(nic);
    AT_EXIT.call_once(|| {
        // SAFETY: registers a function with no arguments that stays valid
        // for the life of the process (it is in this library, which the
        // loader keeps mapped until exit handlers have run).
        unsafe { libc::atexit(write_at_exit) };
    });
}

/// A context on `nic` is closing: keep its counters as they are now.
pub(crate) fn closing(nic: &Arc<LiveNic>) {
    if wanted().is_some() {
        let s = nic.snapshot();
        lock().last = Some(s);
    }
}

extern "C" fn write_at_exit() {
    // No unwinding out of an exit handler: a failure only loses the file.
    let _ = std::panic::catch_unwind(|| {
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
