//! rdma-core's own Python test suite, shipped with Debian's python3-pyverbs
//! in /usr/share/doc/rdma-core/tests, run with `/usr/bin/python3` on
//! doorbell: the modules test_device, test_pd, test_mr, test_cq, test_cqex,
//! test_qp, test_qpex, test_atomic, test_relaxed_ordering,
//! test_cq_events and test_parent_domain
//! pass with no failure and no error. A test may skip only where the test
//! itself skips for a capability, and only for the reasons listed here
//! (README: "What is refused").

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::library::lib_dir;

const SUITE: &str = "/usr/share/doc/rdma-core/tests";
const MODULES: [&str; 11] = [
    "test_device",
    "test_pd",
    "test_mr",
    "test_cq",
    "test_cqex",
    "test_qp",
    "test_qpex",
    "test_atomic",
    "test_relaxed_ordering",
    "test_cq_events",
    "test_parent_domain",
];

/// Capabilities doorbell does not have: a test (any, if empty) and the
/// start of the reason the suite gives when it skips for them.
const NOT_DOORBELLS: [(&str, &str); 9] = [
    // Device memory (ibv_alloc_dm).
    ("", "Device memory is not supported"),
    // Memory windows and MRs that allow binding them.
    ("", "Create memory window of type"),
    ("", "Reg MR with MW access is not supported"),
    (
        "test_qp_ex_rc_bind_mw",
        "Create custom mr with additional access flags",
    ),
    // Raw Ethernet QPs.
    ("", "Create Raw Packet QP"),
    // XRC domains and XRC QPs.
    ("", "Create XRCD is not supported"),
    // ATOMIC WRITE (IBTA 1.5), which mlx5 does not offer either.
    ("test_qp_ex_rc_atomic_write", "Extended QP is not supported"),
    // dmabuf MRs need a GPU's DRM device on the machine.
    ("", "Allocating dmabuf is not supported by"),
    // The machine has no 2 MiB huge pages set aside for the test's
    // allocator to hand out.
    ("test_huge_page_traffic", "There are no huge pages"),
];

/// The skips in unittest's verbose output, as (test, reason): the test's
/// name starts its line, or the line before for a test with a docstring.
fn skips(out: &str) -> Vec<(&str, &str)> {
    let lines: Vec<&str> = out.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let reason = l.split_once("skipped '")?.1.trim_end_matches('\'');
            let named = if l.starts_with("test_") || i == 0 {
                l
            } else {
                lines[i - 1]
            };
            Some((named.split_whitespace().next().unwrap_or(""), reason))
        })
        .collect()
}

/// A copy of the suite with its gzipped files unpacked (Debian ships most
/// of them as .py.gz).
fn suite_copy(tag: &str) -> PathBuf {
    assert!(
        Path::new(SUITE).is_dir(),
        "{SUITE} missing: scripts/setup.sh installs python3-pyverbs"
    );
    let dir = lib_dir()
        .parent()
        .expect("lib dir has a parent")
        .join(format!("pyverbs-suite-{tag}-{}", std::process::id()));
    let tests = dir.join("tests");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&tests).expect("create the suite copy");
    for entry in std::fs::read_dir(SUITE).expect("read the suite") {
        let p = entry.expect("suite entry").path();
        let name = p.file_name().expect("file name").to_owned();
        std::fs::copy(&p, tests.join(&name)).expect("copy a suite file");
    }
    let status = Command::new("sh")
        .arg("-c")
        .arg("for f in *.gz; do [ -e \"$f\" ] && gunzip -f \"$f\"; done")
        .current_dir(&tests)
        .status()
        .expect("run gunzip");
    assert!(status.success(), "gunzip failed in {}", tests.display());
    dir
}

#[test]
fn rdma_cores_pyverbs_suite_passes_on_doorbell() {
    run_suite("doorbell", &MODULES, &[], &NOT_DOORBELLS, 110);
}

/// The modules that run with rdma-core's libmlx5 hosted: the generic ones
/// of device and QP, and the mlx5-specific ones that need no DEVX.
const HOSTED_MODULES: [&str; 5] = [
    "test_device",
    "test_qp",
    "test_mlx5_uar",
    "test_mlx5_query_port",
    "test_mlx5_cq",
];

/// What libmlx5 on doorbell skips, beyond [`NOT_DOORBELLS`], and why.
const NOT_HOSTED: [(&str, &str); 6] = [
    // UAR objects are DEVX or dynamic-UAR methods, which the hosting
    // refuses so that libmlx5 keeps to its static UARs.
    (
        "test_alloc_uar",
        "UAR allocation (with flag=0) is not supported",
    ),
    // mlx5dv_query_port is an ioctl-only mlx5 method (not hosted).
    ("test_dv_query_port", "mlx5dv_query_port() isn't supported"),
    // CQE compression and 128-byte CQE padding: the device writes 64- and
    // 128-byte CQEs, neither compressed nor padded, and says so in
    // mlx5dv_query_device's flags.
    (
        "",
        "Device caps doesn't support Support CQE 128B compression",
    ),
    ("", "Device caps doesn't support Support CQE 128B padding"),
    // DC QPs are created through DEVX.
    (
        "test_scatter_to_cqe_control_by_qp",
        "Create DC QP is not supported",
    ),
    // Raw packet QPs, as for doorbell's provider.
    ("", "Create Raw Packet QP"),
];

#[test]
fn rdma_cores_pyverbs_suite_passes_on_libmlx5() {
    let allowed: Vec<(&str, &str)> = NOT_DOORBELLS.iter().chain(&NOT_HOSTED).copied().collect();
    run_suite(
        "libmlx5",
        &HOSTED_MODULES,
        &[("DOORBELL_PROVIDER", "mlx5")],
        &allowed,
        55,
    );
}

/// Runs `modules` of the suite with `env` (in a copy of the suite named
/// after `tag`), and checks that all passed, at least `min_ran` ran, and
/// every skip is one of `allowed`.
fn run_suite(
    tag: &str,
    modules: &[&str],
    env: &[(&str, &str)],
    allowed: &[(&str, &str)],
    min_ran: u32,
) {
    let dir = suite_copy(tag);
    let out = Command::new("/usr/bin/python3")
        .arg("tests/run_tests.py")
        .args(["--dev", "doorbell0", "--gid", "0", "-v"])
        .args(modules)
        .current_dir(&dir)
        .envs(env.iter().copied())
        .env("LD_LIBRARY_PATH", lib_dir())
        // The suite's QPs talk to each other: any free loopback address.
        .env_remove("DOORBELL_ADDR")
        .env_remove("DOORBELL_NAME")
        .output()
        .expect("run /usr/bin/python3 (scripts/setup.sh installs python3-pyverbs)");
    let err = String::from_utf8_lossy(&out.stderr);
    let all = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "the suite failed:\n{all}");
    let ran: u32 = all
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no 'Ran N tests' line:\n{all}"));
    assert!(ran >= min_ran, "only {ran} tests ran:\n{all}");
    assert!(
        all.lines().any(|l| l == "OK" || l.starts_with("OK (")),
        "not OK:\n{all}"
    );
    let unexplained: Vec<String> = skips(&all)
        .into_iter()
        .filter(|(test, reason)| {
            !allowed
                .iter()
                .any(|(t, r)| (t.is_empty() || t == test) && reason.starts_with(r))
        })
        .map(|(test, reason)| format!("{test}: {reason}"))
        .collect();
    assert!(
        unexplained.is_empty(),
        "skips for reasons not listed:\n{}",
        unexplained.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
