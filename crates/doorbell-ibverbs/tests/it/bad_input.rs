//! C programs of this project's (`tests/c/*.c`), compiled against the
//! installed `<infiniband/verbs.h>` and run on doorbell:
//! - `bad_input.c`: NULL and out-of-range arguments, a WR chain with a bad
//!   WR in the middle, unknown opcodes, objects of another context, objects
//!   destroyed while in use, registered memory unmapped under the NIC, use
//!   after destroy. Each call must get the errno rdma-core or the kernel
//!   would give, and the process must not crash.
//! - `ud_reply.c`: a UD receiver answers through an AH made from the
//!   completion (`ibv_create_ah_from_wc`).
//! - `events.c`: completion channels and the async queue as real fds; run
//!   again with `DOORBELL_STATS`, the counters it leaves at exit.
//! - `thread_domain.c`: thread domains and parent domains (the inline
//!   `ibv_alloc_td`, `ibv_dealloc_td`, `ibv_alloc_parent_domain`): RC
//!   traffic between QPs of two parent domains, one QP's buffer from the
//!   application's allocator (and back to it), an allocator that defers
//!   to the library, an extended CQ in a parent domain, and the EBUSY and
//!   EINVAL answers.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::library::lib_dir;

/// Compiles `tests/c/<name>.c` to an executable of this call's own: two
/// tests that run one program in parallel must not delete each other's.
fn build(name: &str) -> PathBuf {
    static BUILDS: AtomicU32 = AtomicU32::new(0);
    let n = BUILDS.fetch_add(1, Ordering::Relaxed);
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let exe = lib_dir()
        .parent()
        .expect("lib dir has a parent")
        .join(format!("{name}-{}-{n}", std::process::id()));
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

/// Builds and runs `tests/c/<name>.c` with the extra `env`; it must report
/// at least `min_checks` checks and no failure. Returns its stderr.
fn run_c_program_with(name: &str, min_checks: usize, env: &[(&str, &str)]) -> String {
    let exe = build(name);
    let out = Command::new(&exe)
        .envs(env.iter().copied())
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
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn run_c_program(name: &str, min_checks: usize) {
    run_c_program_with(name, min_checks, &[]);
}

#[test]
fn doorbell_stats_writes_what_the_program_cost_on_the_bus() {
    let file = lib_dir()
        .parent()
        .expect("lib dir has a parent")
        .join(format!("stats-{}.json", std::process::id()));
    let path = file.to_string_lossy().into_owned();
    run_c_program_with("events", 18, &[("DOORBELL_STATS", &path)]);
    let text = std::fs::read_to_string(&file).expect("the stats file was written at exit");
    let _ = std::fs::remove_file(&file);
    let v: serde_json::Value = serde_json::from_str(&text).expect("the stats file is JSON");
    assert_eq!(v["device"], "doorbell0");
    let qps = v["qps"].as_array().expect("qps");
    assert_eq!(qps.len(), 2, "the sender and the receiver:\n{text}");
    // events.c sends three 8-byte SENDs on its first QP, each alone and
    // small: one BlueFlame write of one 64-byte chunk each, no WQE read,
    // one payload read, one CQE.
    let a = &qps[0];
    assert_eq!(a["mmio_writes"], 3, "{text}");
    assert_eq!(a["mmio_bytes"], 192, "{text}");
    assert_eq!(a["dma_reads"]["wqe"], 0, "{text}");
    assert_eq!(a["dma_reads"]["payload"], 3, "{text}");
    assert_eq!(a["dma_writes"]["cqe"], 3, "{text}");
    // The receiver posted three receives (no MMIO) and got three CQEs.
    assert_eq!(qps[1]["mmio_writes"], 0, "{text}");
    assert_eq!(qps[1]["dma_writes"]["cqe"], 3, "{text}");
    // Two QPs of one NIC: every packet sent came back in.
    assert_eq!(v["packets"]["tx"], v["packets"]["rx"], "{text}");
    assert_eq!(v["packets"]["retransmits"], 0, "{text}");
    assert!(v["total"]["mmio_writes"].as_u64() >= Some(3), "{text}");
    assert_eq!(v["hw_counters"].as_object().map(|m| m.len()), Some(13));
    // events.c waits for completion events: each came as an EQE the NIC
    // wrote into the kernel's event queue and, when the EQ was armed, an
    // MSI-X interrupt.
    let w = &v["total"]["dma_writes"];
    let (eqe, msix) = (
        w["eqe"].as_u64().unwrap_or(0),
        w["msix"].as_u64().unwrap_or(0),
    );
    assert!(eqe >= 1 && msix >= 1 && msix <= eqe, "{text}");

    let table = run_c_program_with("events", 18, &[("DOORBELL_STATS", "-")]);
    assert!(
        table.contains("doorbell0") && table.lines().any(|l| l.trim_start().starts_with("total")),
        "a table on stderr:\n{table}"
    );
}

#[test]
fn bad_input_gets_rdma_cores_errno_and_breaks_nothing() {
    run_c_program("bad_input", 41);
}

#[test]
fn a_ud_receiver_answers_through_an_ah_made_from_the_completion() {
    run_c_program("ud_reply", 11);
}

#[test]
fn completion_channels_and_async_events_are_real_fds() {
    run_c_program("events", 18);
}

#[test]
fn the_device_clock_reads_and_stamps_completions_in_wall_clock_time() {
    run_c_program("clock", 13);
}

#[test]
fn qps_of_parent_domains_with_thread_domains_carry_data() {
    run_c_program("thread_domain", 32);
}
