//! Debian's rdma_cm clients load doorbell's two libraries and nothing of
//! Debian's rdma-core, with every symbol and version resolved (`ldd -r`
//! relocates functions and data as `LD_BIND_NOW` does); and a C program of
//! ours, linked with `-lrdmacm`, uses what works so far.

use std::path::{Path, PathBuf};
use std::process::Command;

use doorbell_cprobe::program;

use crate::lib_dir;

/// The clients the connection-manager issue names that Debian ships here.
const CLIENTS: &[&str] = &[
    "rping",
    "ucmatose",
    "udaddy",
    "rdma_server",
    "rdma_client",
    "rdma_xserver",
    "rdma_xclient",
    "cmtime",
    "ib_send_bw",
    "ib_write_lat",
    "ib_read_bw",
    "qperf",
];

#[test]
fn every_client_binds_to_doorbells_libraries_with_nothing_undefined() {
    let dir = lib_dir();
    let mut bad = Vec::new();
    for c in CLIENTS {
        let path = Path::new("/usr/bin").join(c);
        assert!(
            path.is_file(),
            "{} missing: scripts/setup.sh installs it",
            path.display()
        );
        let out = Command::new("ldd")
            .arg("-r")
            .arg(&path)
            .env("LD_LIBRARY_PATH", dir)
            .output()
            .expect("run ldd (libc-bin)");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let ours = |soname: &str| {
            text.lines().any(|l| {
                l.trim_start().starts_with(soname)
                    && l.contains(&format!("{}/{soname}", dir.display()))
            })
        };
        if !ours("librdmacm.so.1") || !ours("libibverbs.so.1") {
            bad.push(format!("{c}: not both of doorbell's libraries:\n{text}"));
        }
        if text.contains("undefined symbol") || text.contains("not found") {
            bad.push(format!("{c}: unresolved:\n{text}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Builds and runs `tests/c/<name>.c`, linked with `-lrdmacm`.
fn run_c(name: &str, min_checks: usize) {
    let c_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let check_h = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../doorbell-ibverbs/tests/c");
    let dir = lib_dir().parent().expect("lib dir has a parent");
    let exe = program::build(
        &c_dir.join(format!("{name}.c")),
        dir,
        &[&check_h],
        &["rdmacm", "ibverbs"],
    );
    program::run_checks(&exe, lib_dir(), &[], min_checks);
}

#[test]
fn event_channels_devices_and_event_names_work_from_c() {
    run_c("cm_basics", 9);
}

#[test]
fn ids_bind_resolve_and_report_as_librdmacm_does_from_c() {
    run_c("cm_ids", 22);
}

#[test]
fn qps_on_ids_are_made_and_moved_as_librdmacm_does_from_c() {
    run_c("cm_qp", 12);
}

#[test]
fn getaddrinfo_and_endpoints_from_c() {
    run_c("cm_ep", 9);
}
