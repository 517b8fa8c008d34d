//! Debian's real clients load beside the built library under BIND_NOW:
//! ibv_devices (libibverbs only), perftest (which also NEEDs Debian's libmlx5,
//! libefa and librdmacm, all importing from libibverbs) and pyverbs.
//!
//! Each runs with `LD_BIND_NOW=1 LD_LIBRARY_PATH=<lib_dir>`: a missing symbol
//! or version node would stop the loader before `main()` with "symbol lookup
//! error" or "version `IBVERBS_x' not found".

use std::path::Path;
use std::process::{Command, Output};

use crate::library::{lib_dir, run};

const LOADER_ERRORS: [&str; 4] = [
    "symbol lookup error",
    "version `",
    "undefined symbol",
    "error while loading shared libraries",
];

fn client(prog: &str) -> Command {
    let mut cmd = Command::new(prog);
    cmd.env("LD_BIND_NOW", "1")
        .env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("LD_PRELOAD");
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_loaded_cleanly(what: &str, out: &Output) {
    let all = text(out);
    for e in LOADER_ERRORS {
        assert!(
            !all.contains(e),
            "{what}: the loader failed ({e:?}):\n{all}"
        );
    }
}

/// The loader resolves `libibverbs.so.1` (and the providers) as expected.
fn assert_resolves_to_ours(prog: &str, also: &[&str]) {
    let out = run(client(prog).env("LD_TRACE_LOADED_OBJECTS", "1"));
    let all = text(&out);
    let ours = lib_dir().join("libibverbs.so.1");
    let line = all
        .lines()
        .find(|l| l.trim_start().starts_with("libibverbs.so.1 "))
        .unwrap_or_else(|| panic!("{prog} does not need libibverbs.so.1:\n{all}"));
    assert!(
        line.contains(&*ours.to_string_lossy()),
        "{prog} resolves libibverbs.so.1 elsewhere: {line}"
    );
    for lib in also {
        assert!(all.contains(lib), "{prog} does not load {lib}:\n{all}");
    }
}

#[test]
fn ibv_devices_loads_cleanly() {
    assert_resolves_to_ours("ibv_devices", &[]);
    let out = run(&mut client("ibv_devices"));
    assert_loaded_cleanly("ibv_devices", &out);
    assert!(out.status.success(), "ibv_devices:\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        matches!(lines[..], [head, rule, _dev] if head.contains("device") && rule.contains("------")),
        "want the header and one device:\n{stdout}"
    );
}

#[test]
fn perftest_loads_with_the_real_providers() {
    let providers = ["libmlx5.so.1", "libefa.so.1", "librdmacm.so.1"];
    assert_resolves_to_ours("ib_write_bw", &providers);
    let out = run(client("ib_write_bw").arg("--help"));
    assert_loaded_cleanly("ib_write_bw --help", &out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Usage:"),
        "ib_write_bw --help printed no usage:\n{}",
        text(&out)
    );
}

#[test]
fn rdmacm_utils_load() {
    assert_resolves_to_ours("rping", &["librdmacm.so.1"]);
    let out = run(client("rping").arg("-h"));
    assert_loaded_cleanly("rping -h", &out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rping -s"),
        "rping -h printed no usage:\n{}",
        text(&out)
    );
}

#[test]
fn pyverbs_imports() {
    // Debian's interpreter: a pyenv python3 on PATH has no pyverbs.
    let python = "/usr/bin/python3";
    assert!(
        Path::new(python).exists(),
        "{python} missing (scripts/setup.sh)"
    );
    // Print what the process mapped, to check that it is our libibverbs and
    // that the providers came along.
    let script = "import pyverbs.device\n\
                  maps = open('/proc/self/maps').read().split('\\n')\n\
                  libs = sorted({l.split()[-1] for l in maps if '.so' in l})\n\
                  print('\\n'.join(libs))\n";
    let out = run(client(python).args(["-c", script]));
    assert_loaded_cleanly("import pyverbs.device", &out);
    assert!(
        out.status.success(),
        "import pyverbs.device:\n{}",
        text(&out)
    );
    let mapped = String::from_utf8_lossy(&out.stdout);
    let ours = std::fs::canonicalize(lib_dir().join("libibverbs.so.1")).expect("canonical path");
    assert!(
        mapped.lines().any(|l| Path::new(l) == ours),
        "pyverbs did not map {}:\n{mapped}",
        ours.display()
    );
    assert!(
        !mapped.contains("/usr/lib/x86_64-linux-gnu/libibverbs.so"),
        "Debian's libibverbs was mapped too:\n{mapped}"
    );
}
