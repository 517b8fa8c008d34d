//! Conformance by difference: one fixed sequence of posts (`c/conformance.c`:
//! every opcode, inline and by pointer, signalled or not, postlists,
//! several SGEs, UD with an address handle and immediate data) runs once on
//! doorbell's own provider and once on rdma-core's libmlx5, each with a
//! capture of the host interface (`DOORBELL_HIF_LOG`). The two captures must
//! agree crossing by crossing:
//!
//! - every register store: which UAR page, which register and half (so
//!   doorbell versus BlueFlame, and the alternation of halves), and its
//!   bytes (the WQE of a BlueFlame copy, the control segment of a doorbell);
//! - every WQE, receive WQE and doorbell record the device read;
//! - every CQE the device wrote.
//!
//! The fields that may differ, and why (the README lists them too):
//! - a CQE's timestamp (bytes 48..56): the device's clock when it wrote it;
//! - the UDP source port of a UD address vector (`rlid`, bytes 14..16 of
//!   the datagram segment): libmlx5 picks one at random per address
//!   handle; doorbell's provider leaves 0 for the device to choose.

use std::path::Path;

use doorbell_cprobe::program;
use serde_json::Value;

use crate::library::lib_dir;

fn c_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// Runs the sequence on `provider`; returns the capture, one JSON value a
/// crossing, and the UD QPNs the program reported.
fn capture(provider: &str) -> (Vec<Value>, Vec<u32>) {
    let dir = lib_dir().parent().expect("lib dir has a parent");
    let file = dir.join(format!("hif-{provider}-{}.jsonl", std::process::id()));
    let path = file.to_string_lossy().into_owned();
    let src = c_dir().join("conformance.c");
    let exe = program::build(&src, dir, &[c_dir().as_path()], &["ibverbs"]);
    let stderr = program::run_checks(
        &exe,
        lib_dir(),
        &[("DOORBELL_PROVIDER", provider), ("DOORBELL_HIF_LOG", &path)],
        13,
    );
    let text = std::fs::read_to_string(&file).expect("the capture was written at exit");
    let _ = std::fs::remove_file(&file);
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a capture line is JSON"))
        .collect();
    let ud = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("ud_qpn ")?.parse().ok())
        .collect();
    (lines, ud)
}

fn bytes(v: &Value) -> Vec<u8> {
    let h = v["data"].as_str().unwrap_or("");
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// A crossing with the documented fields cleared.
fn normalised(x: &Value, ud: &[u32]) -> Value {
    let mut x = x.clone();
    if let Some(w) = x.get_mut("write")
        && w["what"] == "cqe"
    {
        let mut b = bytes(w);
        b[48..56].fill(0);
        w["data"] = Value::String(b.iter().map(|x| format!("{x:02x}")).collect());
    }
    if let Some(m) = x.get_mut("mmio") {
        let mut b = bytes(m);
        // The first chunk of a UD WQE: control segment, then the datagram
        // segment (the control segment's QPN is at bytes 4..7).
        let qpn = b
            .get(4..7)
            .map(|q| u32::from_be_bytes([0, q[0], q[1], q[2]]));
        if m["offset"].as_u64().is_some_and(|o| o % 256 == 0)
            && qpn.is_some_and(|q| ud.contains(&q))
            && b.len() >= 32
        {
            b[30..32].fill(0);
            m["data"] = Value::String(b.iter().map(|x| format!("{x:02x}")).collect());
        }
    }
    x
}

#[test]
fn both_providers_put_the_same_bytes_on_the_host_interface() {
    let (own, own_ud) = capture("doorbell");
    let (mlx5, mlx5_ud) = capture("mlx5");
    assert_eq!(own_ud.len(), 2, "the program reports its UD QPs");
    assert_eq!(own_ud, mlx5_ud, "the same QPs in both runs");
    let kinds = |c: &[Value], k: &str| c.iter().filter(|x| x.get(k).is_some()).count();
    // Twelve posts, each rung once; every signalled one completed.
    assert!(kinds(&own, "mmio") >= 12, "{own:#?}");
    assert!(kinds(&own, "write") >= 20, "{own:#?}");
    assert_eq!(
        kinds(&mlx5, "record"),
        0,
        "every store was read back: {mlx5:#?}"
    );
    let mut diffs = Vec::new();
    for (i, (a, b)) in own.iter().zip(&mlx5).enumerate() {
        let (na, nb) = (normalised(a, &own_ud), normalised(b, &own_ud));
        if na != nb {
            diffs.push(format!("crossing {i}:\n  doorbell {a}\n  libmlx5  {b}"));
        }
    }
    assert!(
        diffs.is_empty() && own.len() == mlx5.len(),
        "{} and {} crossings; differences:\n{}",
        own.len(),
        mlx5.len(),
        diffs.join("\n")
    );
}
