//! A live capture with Debian's tshark on the loopback interface, for
//! tests that have an independent decoder read what doorbell's NICs sent.
//!
//! Needs tshark (`scripts/setup.sh` installs it) and the right to capture:
//! root, or CAP_NET_RAW and CAP_NET_ADMIN on dumpcap. Without them
//! [`Capture::start`] fails the test and says what to do; it never skips.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SETUP: &str = "run scripts/setup.sh (as root): it installs Debian's tshark";

/// A running `tshark -i lo`; killed on drop if it is still running.
pub struct Capture {
    child: Child,
    stderr: mpsc::Receiver<String>,
    said: Vec<String>,
}

impl Capture {
    /// Starts capturing `filter` on `lo` into `file` (classic pcap), until
    /// `count` packets or 20 seconds; returns once tshark says it captures.
    pub fn start(file: &Path, filter: &str, count: usize) -> Self {
        let child = Command::new("tshark")
            .args(["-i", "lo", "-f", filter, "-F", "pcap", "-w"])
            .arg(file)
            .args(["-c", &count.to_string(), "-a", "duration:20"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run tshark ({e}): {SETUP}"));
        let mut c = Capture {
            child,
            stderr: mpsc::channel().1,
            said: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        let err = c.child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        c.stderr = rx;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match c.stderr.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    let ready = line.contains("Capturing on");
                    c.said.push(line);
                    if ready {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => c.cannot_capture(),
            }
            assert!(
                Instant::now() < deadline,
                "tshark did not start capturing within 15 s: {}",
                c.tail()
            );
        }
        // tshark says "Capturing on" before dumpcap has opened the device:
        // leave it a moment to open it and attach the filter, or to fail.
        std::thread::sleep(Duration::from_millis(300));
        c.said.extend(c.stderr.try_iter());
        let refused = c.said.iter().any(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("permission to capture") || l.contains("operation not permitted")
        });
        if refused || !matches!(c.child.try_wait(), Ok(None)) {
            c.cannot_capture();
        }
        c
    }

    /// Fails the test: tshark could not capture.
    fn cannot_capture(&mut self) -> ! {
        std::thread::sleep(Duration::from_millis(200));
        self.said.extend(self.stderr.try_iter());
        let st = self.child.try_wait();
        let why: Vec<&str> = self
            .said
            .iter()
            .map(|l| l.as_str())
            .filter(|l| l.contains("capture on device") || l.contains("not permitted"))
            .collect();
        panic!(
            "tshark cannot capture on lo ({st:?}): {}\n\
             Capturing needs root, or CAP_NET_RAW and CAP_NET_ADMIN on dumpcap \
             (CI runs the tests as root).",
            if why.is_empty() {
                self.tail()
            } else {
                why.join(" ")
            }
        );
    }

    fn tail(&self) -> String {
        tail(&self.said)
    }

    /// Waits up to 10 s for tshark to stop by itself (it stops at its
    /// packet count), then interrupts it so that it closes the file.
    /// Returns what tshark said.
    pub fn finish(self) -> Vec<String> {
        self.stop_after(Duration::from_secs(10))
    }

    /// Leaves tshark `grace` to take in the last packets (the kernel hands
    /// them to it a little after they were sent), then interrupts it so
    /// that it closes the file. Returns what tshark said.
    pub fn stop_after(mut self, grace: Duration) -> Vec<String> {
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let _ = self.child.wait();
        }
        self.said.extend(self.stderr.try_iter());
        std::mem::take(&mut self.said)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The last lines of what tshark said, for a message.
pub fn tail(said: &[String]) -> String {
    said[said.len().saturating_sub(12)..].join(" | ")
}
