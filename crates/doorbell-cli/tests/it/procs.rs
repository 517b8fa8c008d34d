//! Child processes of the `doorbell` binary for tests: spawned with their
//! output captured, waited for with a deadline, killed if a test gives up
//! on them (on drop).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

/// The `doorbell` binary under test.
pub(crate) fn doorbell() -> Command {
    Command::new(env!("CARGO_BIN_EXE_doorbell"))
}

/// What a finished child printed.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Exit status; `None` if it was killed at the deadline.
    pub(crate) status: Option<ExitStatus>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    /// What its threads were doing when the deadline passed (names,
    /// states, wait channels and stacks); empty if it exited.
    pub(crate) threads: String,
}

impl Finished {
    pub(crate) fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Asserts success, showing both outputs otherwise.
    pub(crate) fn assert_ok(&self, what: &str) {
        assert!(
            self.success(),
            "{what} failed ({:?}):\nstdout:\n{}\nstderr:\n{}{}",
            self.status,
            self.stdout,
            self.stderr,
            self.threads
        );
    }

    /// Asserts a clean failure: exit code 1, an `error:` line, no panic.
    pub(crate) fn assert_error(&self, what: &str, needle: &str) {
        assert_eq!(
            self.status.and_then(|s| s.code()),
            Some(1),
            "{what}: expected exit code 1\nstdout:\n{}\nstderr:\n{}{}",
            self.stdout,
            self.stderr,
            self.threads
        );
        assert!(
            self.stderr.contains("error: ") && self.stderr.contains(needle),
            "{what}: expected an error saying {needle:?}, got:\n{}",
            self.stderr
        );
        assert!(
            !self.stderr.contains("panicked"),
            "{what} panicked:\n{}",
            self.stderr
        );
    }
}

/// A running child; killed on drop unless it was waited for.
pub(crate) struct Proc {
    child: Option<Child>,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

fn drain(r: Option<impl Read + Send + 'static>) -> Option<JoinHandle<String>> {
    r.map(|mut r| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = r.read_to_end(&mut b);
            String::from_utf8_lossy(&b).into_owned()
        })
    })
}

impl Proc {
    /// Spawns `cmd` with stdin closed and stdout and stderr captured.
    pub(crate) fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
        let out = drain(child.stdout.take());
        let err = drain(child.stderr.take());
        Self {
            child: Some(child),
            out,
            err,
        }
    }

    /// Waits until the child exits or `timeout` passes (then notes what
    /// its threads are doing, and kills it).
    pub(crate) fn finish(mut self, timeout: Duration) -> Finished {
        let mut child = self.child.take().expect("not yet finished");
        let killed = doorbell_cprobe::program::wait_or_kill(&mut child, timeout);
        let reaped = child.wait().ok();
        let status = if killed.is_none() { reaped } else { None };
        let threads = killed.unwrap_or_default();
        let take =
            |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
        Finished {
            status,
            stdout: take(self.out.take()),
            stderr: take(self.err.take()),
            threads,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A loopback address `127.P.net.host` for a NIC's UDP port, with P from
/// this process's id, so that two test runs at once (two checkouts, or CI
/// beside a developer) do not bind the same port; doorbell-rt's tests do
/// the same with other `net`s.
pub(crate) fn lo(net: u8, host: u8) -> String {
    format!("127.{}.{net}.{host}", 1 + std::process::id() % 250)
}

/// A TCP port that was free a moment ago (the kernel's pick for port 0).
pub(crate) fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free TCP port")
}
