//! A test that must run in a process of its own: one that forks, where no
//! other test's thread may hold a lock across the fork.
//!
//! ```ignore
//! #[test]
//! fn forks_safely() {
//!     if !doorbell_cprobe::alone::in_own_process("module::tests::forks_safely") {
//!         return;
//!     }
//!     // ... the test, in a process that runs it alone ...
//!     doorbell_cprobe::alone::passed();
//! }
//! ```

use std::fs::File;
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the environment of the process [`in_own_process`] starts.
const ROLE: &str = "DOORBELL_TEST_ALONE";

/// What [`passed`] prints, and the starting process looks for.
const PASSED: &str = "doorbell test alone: passed";

/// How long the process [`in_own_process`] starts may take before it is
/// killed and the test fails: a test that forks can hang in the fork
/// itself.
const TIMEOUT: Duration = Duration::from_secs(300);

/// Runs the test `test` (its path in the test binary, as `--exact` takes
/// it) again, alone, in a new process of the current test binary, and
/// panics unless it passed and said so ([`passed`]) within five minutes.
/// Answers true in that new process, where the caller goes on with the
/// test, and false in the one that started it, where the caller returns.
pub fn in_own_process(test: &str) -> bool {
    if std::env::var(ROLE).is_ok_and(|t| t == test) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // Its output goes to files, which never fill as a pipe would while
    // this process only waits: a directory per test, as the harness runs
    // several such tests of one binary at once.
    let name: String = test
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = std::env::temp_dir().join(format!("doorbell-alone-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the output");
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let file = |p: &std::path::Path| File::create(p).expect("an output file");
    let mut child = Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, test)
        .stdout(file(&out_path))
        .stderr(file(&err_path))
        .spawn()
        .expect("the test binary runs again");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("its status") {
            break Some(s);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.is_some_and(|s| s.success()) && stdout.contains(PASSED),
        "{test}, alone: {}\n{stdout}\n{stderr}",
        status.map_or_else(|| format!("killed after {TIMEOUT:?}"), |s| s.to_string()),
    );
    false
}

/// Says, from the process [`in_own_process`] started, that the test got to
/// its end: a test binary that ran no test at all also exits with success.
pub fn passed() {
    println!("{PASSED}");
}
