//! Progress on stderr, for runs that take a while: a bar (indicatif) that
//! appears once a run has gone on for a second, and only when stderr is a
//! terminal and the output is not JSON; otherwise (CI, pipes, `--json`)
//! nothing is printed at all.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a run goes before its bar appears.
const SHOW_AFTER: Duration = Duration::from_secs(1);

/// A progress bar that may never be drawn.
pub struct Bar {
    bar: Option<ProgressBar>,
    start: Instant,
    shown: AtomicBool,
}

impl Bar {
    /// A bar of `len` steps of `what`; `quiet` (JSON output) or a stderr
    /// that is not a terminal makes it print nothing.
    pub fn new(len: u64, what: &str, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
            if let Ok(style) =
                ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta} left)")
            {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(what.to_string());
            b
        });
        Self {
            bar,
            start: Instant::now(),
            shown: AtomicBool::new(false),
        }
    }

    /// `done` of the steps are done.
    pub fn set(&self, done: u64) {
        let Some(b) = &self.bar else { return };
        if !self.shown.load(Ordering::Relaxed) && self.start.elapsed() >= SHOW_AFTER {
            self.shown.store(true, Ordering::Relaxed);
            b.set_draw_target(ProgressDrawTarget::stderr());
        }
        b.set_position(done);
    }

    /// The run is over: the bar, if drawn, goes away.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
