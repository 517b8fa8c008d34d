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

use std::path::{Path, PathBuf};

use doorbell_cprobe::program;

use crate::library::lib_dir;

fn c_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// Builds and runs `tests/c/<name>.c` with the extra `env`; it must report
/// at least `min_checks` checks and no failure. Returns its stderr.
fn run_c_program_with(name: &str, min_checks: usize, env: &[(&str, &str)]) -> String {
    let dir = lib_dir().parent().expect("lib dir has a parent");
    let src = c_dir().join(format!("{name}.c"));
    let exe = program::build(&src, dir, &[Path::new(&c_dir())], &["ibverbs"]);
    program::run_checks(&exe, lib_dir(), env, min_checks)
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
    assert_eq!(v["hw_counters"].as_object().map(|m| m.len()), Some(23));
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
    run_c_program("bad_input", 57);
}

#[test]
fn a_ud_receiver_answers_through_an_ah_made_from_the_completion() {
    run_c_program("ud_reply", 11);
}

#[test]
fn completion_channels_and_async_events_are_real_fds() {
    run_c_program("events", 19);
}

#[test]
fn the_device_clock_reads_and_stamps_completions_in_wall_clock_time() {
    run_c_program("clock", 13);
}

#[test]
fn qps_of_parent_domains_with_thread_domains_carry_data() {
    run_c_program("thread_domain", 32);
}
