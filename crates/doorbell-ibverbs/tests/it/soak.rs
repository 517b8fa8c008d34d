//! The soak through the C library: `tests/c/soak.c`, a program of this
//! project's, runs 10,000 mixed RC operations on four QPs between two
//! processes (WRITE then READ back, READ, SEND, fetch-and-add,
//! compare-and-swap), every byte and every atomic checked and completions in
//! posting order, while every frame both ways meets random faults
//! (`DOORBELL_FAULTS`: loss, duplication, reordering and bit flips).
//! `scripts/soak.sh SECONDS` runs the same program for as long as asked on
//! more QPs; the netns tests of doorbell-cli run it with the kernel
//! dropping the packets instead.

use std::process::{Command, Stdio};

use doorbell_cprobe::program;

use crate::clients::addr;
use crate::library::lib_dir;

fn soak_exe() -> std::path::PathBuf {
    let c = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let dir = lib_dir().parent().expect("lib dir has a parent");
    program::build(&c.join("soak.c"), dir, &[c.as_path()], &["ibverbs"])
}

fn side(exe: &std::path::Path, nic: &str, args: &[&str], faults: &str) -> std::process::Child {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("DOORBELL_ADDR", nic)
        .env("DOORBELL_FAULTS", faults)
        .env("DOORBELL_STATS", "-")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the soak")
}

#[test]
fn ten_thousand_operations_between_two_processes_under_faults() {
    let exe = soak_exe();
    let port = (17600 + std::process::id() % 1000).to_string();
    let faults = |seed: u32| format!("loss=0.05,dup=0.01,reorder=0.02,corrupt=0.01,seed={seed}");
    let server = side(&exe, &addr(47, 2), &["-p", &port, "-q", "4"], &faults(11));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let client = side(
        &exe,
        &addr(47, 3),
        &["-p", &port, "-q", "4", "-n", "10000", "127.0.0.1"],
        &faults(12),
    );
    let c = program::finish(client, 240, "the soak's client");
    let s = program::finish(
        server,
        if c.status.success() { 60 } else { 5 },
        "the soak's server",
    );
    let _ = std::fs::remove_file(&exe);
    // The faults happened, and the transport made up for them: the
    // requester sent again, the responder saw gaps and repeats.
    for (who, out, counters) in [
        ("client", &c, ["tx_retransmits", "rx_icrc_encapsulated"]),
        ("server", &s, ["out_of_sequence", "duplicate_request"]),
    ] {
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.ends_with("0 failed\n"),
            "{who}:\n{text}\n{err}"
        );
        for counter in counters {
            assert!(err.contains(counter), "{who}: no {counter}\n{err}");
        }
    }
    let text = String::from_utf8_lossy(&c.stdout);
    assert!(text.contains("client: 100"), "{text}");
}
