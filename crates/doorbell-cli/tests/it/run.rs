//! `doorbell env` and `doorbell run`: the settings, the library the loader
//! then finds, and failures said as a shell would.
//!
//! The library is the one cargo built for this test run (doorbell-cli
//! depends on doorbell-ibverbs, so it is in `target/<profile>/deps/`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::procs::doorbell;

fn out(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `doorbell` with none of the variables it sets inherited.
fn clean() -> Command {
    let mut c = doorbell();
    for v in [
        "LD_LIBRARY_PATH",
        "DOORBELL_ADDR",
        "DOORBELL_NAME",
        "DOORBELL_STATS",
        "DOORBELL_PROVIDER",
        "DOORBELL_LIBIBVERBS",
    ] {
        c.env_remove(v);
    }
    c
}

fn assert_ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
}

/// The directory `doorbell run` puts first: where the tests' cargo build
/// put the doorbell binary, then `doorbell-ibverbs/`.
fn our_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_doorbell"))
        .parent()
        .unwrap()
        .join("doorbell-ibverbs")
}

#[test]
fn env_prints_shell_quoted_exports_naming_our_library() {
    let o = out(clean()
        .args(["env", "--addr", "127.0.0.9", "--name", "nic_1"])
        .args(["--stats", "/tmp/a b's", "--provider", "doorbell"])
        .args(["--trace", "/tmp/t.json"])
        .env("LD_LIBRARY_PATH", "/old/lib"));
    assert_ok(&o, "doorbell env");
    let lines = text(&o.stdout);
    for l in lines.lines() {
        assert!(l.starts_with("export "), "{l:?}");
    }
    // A shell reads it back to the very values.
    let sh = out(Command::new("sh").args([
        "-c",
        r#"eval "$1" && printf '%s\n' "$LD_LIBRARY_PATH" "$DOORBELL_ADDR" "$DOORBELL_NAME" "$DOORBELL_STATS" "$DOORBELL_PROVIDER" "$DOORBELL_TRACE""#,
        "sh",
        &lines,
    ]));
    assert_ok(&sh, "sh eval");
    let got = text(&sh.stdout);
    let got: Vec<&str> = got.lines().collect();
    let dir = our_dir();
    assert_eq!(
        got,
        [
            format!("{}:/old/lib", dir.display()).as_str(),
            "127.0.0.9",
            "nic_1",
            "/tmp/a b's",
            "doorbell",
            "/tmp/t.json"
        ]
    );
    // The directory holds libibverbs.so.1, a link to the built library.
    let so1 = dir.join("libibverbs.so.1");
    let target = std::fs::canonicalize(&so1).unwrap();
    assert!(target.is_file(), "{}", target.display());
    assert_eq!(target.file_name().unwrap(), "libibverbs.so");
    // Without options only the library path is set.
    let o = out(clean().arg("env"));
    assert_ok(&o, "doorbell env");
    assert_eq!(
        text(&o.stdout),
        format!("export LD_LIBRARY_PATH={}\n", dir.display())
    );
}

#[test]
fn run_sets_the_environment_and_execs_the_program_in_place() {
    let o = out(clean()
        .args(["run", "--addr", "10.1.2.3", "--stats", "-", "--", "env"])
        .env("LD_LIBRARY_PATH", "/old/lib"));
    assert_ok(&o, "doorbell run -- env");
    let env = text(&o.stdout);
    let has = |line: &str| env.lines().any(|l| l == line);
    assert!(
        has(&format!("LD_LIBRARY_PATH={}:/old/lib", our_dir().display())),
        "{env}"
    );
    assert!(
        has("DOORBELL_ADDR=10.1.2.3") && has("DOORBELL_STATS=-"),
        "{env}"
    );
    let o = out(clean().args(["run", "--adaptive-retransmit", "off", "--", "env"]));
    assert_ok(&o, "doorbell run --adaptive-retransmit off -- env");
    assert!(
        text(&o.stdout)
            .lines()
            .any(|l| l == "DOORBELL_ADAPTIVE_RETRANSMIT=off"),
        "{}",
        text(&o.stdout)
    );
    assert!(!env.contains("DOORBELL_NAME="), "not given, not set: {env}");
    // Exec, not spawn: the program's status is doorbell's, and arguments
    // that look like options reach it (no `--` needed after its name).
    let o = out(clean().args(["run", "sh", "-c", "exit 7"]));
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
}

#[test]
fn run_ibv_devices_loads_our_libibverbs() {
    let o = out(clean().args(["run", "--", "ibv_devices"]));
    assert_ok(&o, "doorbell run -- ibv_devices");
    // The loader's own account of what it would bind (ldd's mechanism),
    // set only for ibv_devices by env(1), not for doorbell.
    let o = out(clean().args([
        "run",
        "--",
        "env",
        "LD_TRACE_LOADED_OBJECTS=1",
        "ibv_devices",
    ]));
    assert_ok(&o, "ibv_devices under LD_TRACE_LOADED_OBJECTS");
    let want = format!(
        "libibverbs.so.1 => {}/libibverbs.so.1 ",
        our_dir().display()
    );
    assert!(text(&o.stdout).contains(&want), "{}", text(&o.stdout));
}

#[test]
fn a_missing_program_exits_127_like_a_shell() {
    let o = out(clean().args(["run", "--", "no-such-program-doorbell"]));
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(
        text(&o.stderr).trim_end(),
        "doorbell run: no-such-program-doorbell: command not found"
    );
    let not_exec = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let o = out(clean().args(["run", "--", not_exec]));
    assert_eq!(o.status.code(), Some(126), "not executable");
    // No program at all is a usage error.
    let o = out(clean().arg("run"));
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bad_settings_and_a_missing_library_are_refused_with_the_reason() {
    for (args, needle) in [
        (&["--addr", "127.0.0"][..], "not a unicast IPv4 address"),
        (&["--addr", "224.0.0.1"][..], "not a unicast IPv4 address"),
        (&["--name", "a/b"][..], "a device name is 1 to 63 bytes"),
        (
            &["--adaptive-retransmit", "soon"][..],
            "the least an ACK may be late beyond the round trip",
        ),
    ] {
        for sub in ["run", "env"] {
            let prog: &[&str] = if sub == "run" { &["--", "true"] } else { &[] };
            let o = out(clean().arg(sub).args(args).args(prog));
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{sub} {args:?}: {err}");
            assert!(err.contains(needle) && err.contains(args[0]), "{err}");
        }
    }
    let o = out(clean()
        .args(["run", "--", "true"])
        .env("DOORBELL_LIBIBVERBS", "/nonexistent/libibverbs.so"));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("DOORBELL_LIBIBVERBS=/nonexistent/libibverbs.so is not a file"),
        "{}",
        text(&o.stderr)
    );
    // A library named by the variable as libibverbs.so.1 is used in place.
    let so1 = our_dir().join("libibverbs.so.1");
    let o = out(clean().args(["env"]).env("DOORBELL_LIBIBVERBS", &so1));
    assert_ok(&o, "doorbell env");
    assert_eq!(
        text(&o.stdout),
        format!("export LD_LIBRARY_PATH={}\n", our_dir().display())
    );
}

#[test]
fn run_with_provider_mlx5_has_rdma_cores_libmlx5_drive_the_device() {
    let o = out(clean().args(["run", "--provider", "mlx5", "--", "ibv_devinfo"]));
    assert_ok(&o, "doorbell run --provider mlx5 -- ibv_devinfo");
    let info = text(&o.stdout);
    // libmlx5 prints the firmware version as major.minor.sub.
    assert!(info.contains("fw_ver:\t\t\t\t0.1.0000"), "{info}");
    assert!(info.contains("PORT_ACTIVE"), "{info}");
    // A provider doorbell cannot host is refused before anything runs.
    let o = out(clean().args(["run", "--provider", "mlx4", "--", "true"]));
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(err.contains("mlx4") && err.contains("mlx5"), "{err}");
}
