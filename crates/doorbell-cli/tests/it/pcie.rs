//! `doorbell pcie`: the link model's figures through the command line, and
//! bad values refused with a message instead of a panic.

use std::process::Command;

use doorbell_cli::pcie::{ConventionArg, PcieArgs, render, run};

fn doorbell(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_doorbell"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn json_has_every_key_and_the_p11_to_p15_figures() {
    let out = doorbell(&[
        "pcie", "--gen", "3", "--lanes", "8", "--mps", "256", "--mrrs", "512", "--rcb", "64",
        "--size", "64", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in [
        "generation",
        "lanes",
        "mps_bytes",
        "mrrs_bytes",
        "rcb_bytes",
        "completion_bytes",
        "address_bits",
        "convention",
        "size_bytes",
        "raw_gbps",
        "ack_limit_bytes",
        "fc_guide_bytes",
        "link_overhead_fraction",
        "usable_gbps",
    ] {
        assert!(!v[k].is_null(), "{k} missing in {v}");
    }
    let f = |path: &[&str]| -> f64 {
        let mut x = &v;
        for p in path {
            x = &x[*p];
        }
        x.as_f64().unwrap_or_else(|| panic!("{path:?} in {v}"))
    };
    assert_eq!(v["convention"], "pcie-model");
    assert_eq!(format!("{:.2}", f(&["usable_gbps"])), "57.88");
    assert_eq!(format!("{:.2}", f(&["mwr", "effective_gbps"])), "42.10");
    assert_eq!(format!("{:.2}", f(&["mrd", "effective_gbps"])), "44.10");
    assert_eq!(format!("{:.1}", f(&["mwr", "rate_mtps"])), "82.2");
    assert_eq!(format!("{:.1}", f(&["mrd", "rate_mtps"])), "86.1");
    assert_eq!(format!("{:.0}", f(&["doorbell", "rate_mtps"])), "226");
    assert_eq!(v["mrd"]["limited_by"], "to_device");
    for s in ["mwr", "mrd", "doorbell", "wc_mmio"] {
        for k in [
            "tlps_to_host",
            "tlps_to_device",
            "wire_bytes_to_host",
            "wire_bytes_to_device",
            "limited_by",
            "effective_gbps",
            "rate_mtps",
        ] {
            assert!(!v[s][k].is_null(), "{s}.{k} missing in {v}");
        }
    }
}

#[test]
fn kalia_convention_gives_k7_and_k8() {
    let out = doorbell(&[
        "pcie",
        "--gen",
        "3",
        "--lanes",
        "16",
        "--size",
        "4096",
        "--convention",
        "kalia",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["convention"], "kalia");
    assert_eq!(v["completion_bytes"], 128);
    let mb_s = v["mrd"]["effective_gbps"].as_f64().unwrap() * 1000.0 / 8.0;
    assert_eq!(format!("{mb_s:.0}"), "13443");
    // K7 from the library entry point: one cache line per WC TLP.
    let r = run(&PcieArgs {
        lanes: 16,
        convention: ConventionArg::Kalia,
        ..PcieArgs::default()
    })
    .unwrap();
    assert_eq!(format!("{:.0}", r.wc_mmio.rate_mtps), "175");
}

#[test]
fn table_names_the_link_and_every_stream() {
    let out = doorbell(&["pcie", "--size", "1500"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for s in [
        "PCIe Gen3 x8",
        "57.88 Gb/s",
        "DMA write of 1500 B",
        "DMA read of 1500 B",
        "doorbell",
        "WC MMIO",
    ] {
        assert!(text.contains(s), "{s:?} missing in\n{text}");
    }
    let r = run(&PcieArgs::default()).unwrap();
    assert!(render(&r).contains("42.10"));
}

#[test]
fn bad_values_are_refused_with_a_message() {
    for args in [
        &["pcie", "--gen", "6"][..],
        &["pcie", "--gen", "0"],
        &["pcie", "--lanes", "3"],
        &["pcie", "--lanes", "64"],
        &["pcie", "--mps", "100"],
        &["pcie", "--mps", "8192"],
        &["pcie", "--mrrs", "64"],
        &["pcie", "--rcb", "256"],
        &["pcie", "--size", "0"],
        &["pcie", "--size=-5"],
        &["pcie", "--convention", "fast"],
        &["pcie", "--addr-bits", "48"],
        &["pcie", "--lanes", "x8"],
    ] {
        let out = doorbell(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("error: invalid value"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
