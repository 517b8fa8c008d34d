//! The command line as a user runs it.

use std::process::Command;

fn doorbell(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_doorbell"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn json_main_job_has_every_key_per_configuration() {
    let out = doorbell(&["--json", "--posts", "64"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["config"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "inline",
            "blueflame",
            "inline_blueflame",
            "postlist",
            "unsignaled"
        ]
    );
    for r in rows {
        for k in [
            "mmio_writes",
            "mmio_bytes",
            "wqe_dma_reads",
            "payload_dma_reads",
            "dma_read_bytes",
            "cqe_dma_writes",
            "dma_write_bytes",
            "mwr_tlps",
            "mrd_tlps",
            "cpld_tlps",
        ] {
            assert!(r[k].is_number(), "{k} missing in {r}");
        }
    }
    assert_eq!(rows[4]["postlist_len"], 16);
    assert_eq!(rows[5]["signal_every"], 16);
    assert!(rows[0].get("postlist_len").is_none());
}

#[test]
fn table_main_job_names_every_row() {
    let out = doorbell(&["--posts", "32"], &[]);
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    for name in [
        "baseline",
        "inline",
        "blueflame",
        "inline_blueflame",
        "postlist (n = 16)",
        "unsignaled (1 in 16)",
    ] {
        assert!(s.contains(name), "{name} missing:\n{s}");
    }
}

#[test]
fn layout_json_honours_the_environment() {
    let out = doorbell(
        &["layout", "--qps", "3", "--json"],
        &[
            ("MLX5_SINGLE_THREADED", "1"),
            ("MLX5_TOTAL_UUARS", "8"),
            ("MLX5_NUM_LOW_LAT_UUARS", "1"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for k in [
        "qpn",
        "bfreg_index",
        "uar_page",
        "uar_offset",
        "blueflame",
        "lock",
    ] {
        assert!(rows[0].get(k).is_some(), "{k}");
    }
    // 8 total, 1 low latency: net 7 first (gross 13, page 3, 0xa00), then 1, 2.
    let got: Vec<(u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["bfreg_index"].as_u64().unwrap(),
                r["uar_page"].as_u64().unwrap(),
                r["uar_offset"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, vec![(13, 3, 0xa00), (1, 0, 0xa00), (4, 1, 0x800)]);
    assert!(rows.iter().all(|r| r["lock"] == false));
}

#[test]
fn layout_with_thread_domains_shows_dynamic_lockless_registers() {
    let out = doorbell(&["layout", "--qps", "3", "--thread-domains", "--json"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(u64, u64, bool)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["dyn_bfreg"].as_u64().unwrap(),
                r["uar_page"].as_u64().unwrap(),
                r["lock"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, vec![(0, 8, false), (1, 8, false), (2, 9, false)]);
    let out = doorbell(&["layout", "--qps", "2", "--thread-domains"], &[]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("dyn 1"), "{table}");
}

#[test]
fn bad_input_gets_a_clear_error_and_no_panic() {
    let out = doorbell(&["layout"], &[("MLX5_TOTAL_UUARS", "600")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MLX5_TOTAL_UUARS") && err.contains("600"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
    let out = doorbell(&["--mps", "300"], &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mps"));
    let out = doorbell(&["layout", "--qps", "0"], &[]);
    assert!(!out.status.success());
}
