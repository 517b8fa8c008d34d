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

use std::process::Command;

/// Set in the environment of the process [`in_own_process`] starts.
const ROLE: &str = "DOORBELL_TEST_ALONE";

/// What [`passed`] prints, and the starting process looks for.
const PASSED: &str = "doorbell test alone: passed";

/// Runs the test `test` (its path in the test binary, as `--exact` takes
/// it) again, alone, in a new process of the current test binary, and
/// panics unless it passed and said so ([`passed`]). Answers true in that
/// new process, where the caller goes on with the test, and false in the
/// one that started it, where the caller returns.
pub fn in_own_process(test: &str) -> bool {
    if std::env::var(ROLE).is_ok_and(|t| t == test) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, test)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(PASSED),
        "{test}, alone: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

/// Says, from the process [`in_own_process`] started, that the test got to
/// its end: a test binary that ran no test at all also exits with success.
pub fn passed() {
    println!("{PASSED}");
}
