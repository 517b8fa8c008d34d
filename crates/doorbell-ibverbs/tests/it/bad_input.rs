//! C programs of this project's (`tests/c/*.c`), compiled against the
//! installed `<infiniband/verbs.h>` and run on doorbell:
//! - `bad_input.c`: NULL and out-of-range arguments, a WR chain with a bad
//!   WR in the middle, unknown opcodes, objects of another context, objects
//!   destroyed while in use, registered memory unmapped under the NIC, use
//!   after destroy. Each call must get the errno rdma-core or the kernel
//!   would give, and the process must not crash.
//! - `events.c`: completion channels and the async queue as real fds.

use std::path::PathBuf;
use std::process::Command;

use crate::library::lib_dir;

fn build(name: &str) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let exe = lib_dir()
        .parent()
        .expect("lib dir has a parent")
        .join(format!("{name}-{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args([
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-format-zero-length",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .arg("-libverbs")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} ({e}); scripts/setup.sh installs gcc"));
    assert!(
        out.status.success(),
        "compiling {} failed (scripts/setup.sh installs libibverbs-dev):\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Builds and runs `tests/c/<name>.c`; it must report at least `min_checks`
/// checks and no failure.
fn run_c_program(name: &str, min_checks: usize) {
    let exe = build(name);
    let out = Command::new(&exe)
        .env("LD_LIBRARY_PATH", lib_dir())
        // The program talks only to itself: the library picks a free
        // loopback address.
        .env_remove("DOORBELL_ADDR")
        .env_remove("DOORBELL_NAME")
        .output()
        .expect("run the probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_file(&exe);
    assert!(out.status.success(), "exit {}:\n{all}", out.status);
    let oks = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(oks >= min_checks, "only {oks} checks ran:\n{all}");
    assert!(stdout.contains("\n0 failed"), "{all}");
}

#[test]
fn bad_input_gets_rdma_cores_errno_and_breaks_nothing() {
    run_c_program("bad_input", 30);
}

#[test]
fn completion_channels_and_async_events_are_real_fds() {
    run_c_program("events", 18);
}
