//! Whole C test programs (rather than probes): compiled against the
//! installed headers and libraries, run with a library path, and judged by
//! what they print: one `ok NAME` or `FAIL NAME: ...` line per check, then
//! `N failed`. doorbell's C-library tests are written this way (`check.h`
//! of doorbell-ibverbs' `tests/c` gives the `CHECK` macro).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Compiles `src` with `$CC` (default `cc`), warnings as errors, the
/// include directories `include` and the libraries `libs` (`"ibverbs"`), to
/// an executable in `dir` named after the source and this call: two tests
/// that build one program in parallel never share a file.
pub fn build(src: &Path, dir: &Path, include: &[&Path], libs: &[&str]) -> PathBuf {
    static BUILDS: AtomicU32 = AtomicU32::new(0);
    let n = BUILDS.fetch_add(1, Ordering::Relaxed);
    let stem = src
        .file_stem()
        .map_or_else(|| "program".into(), |s| s.to_string_lossy().into_owned());
    let exe = dir.join(format!("{stem}-{}-{n}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-format-zero-length",
        "-o",
    ])
    .arg(&exe)
    .arg(src);
    for i in include {
        cmd.arg("-I").arg(i);
    }
    for l in libs {
        cmd.arg(format!("-l{l}"));
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} ({e}); scripts/setup.sh installs gcc"));
    assert!(
        out.status.success(),
        "compiling {} failed (scripts/setup.sh installs the -dev packages):\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `exe` with `LD_LIBRARY_PATH=lib_dir` and `env`, without
/// `DOORBELL_ADDR` and `DOORBELL_NAME` (a program that talks only to
/// itself lets the library pick its address), then deletes it. It must
/// exit 0 having printed at least `min_checks` `ok` lines and `0 failed`.
/// Returns its stderr.
pub fn run_checks(exe: &Path, lib_dir: &Path, env: &[(&str, &str)], min_checks: usize) -> String {
    let child = Command::new(exe)
        .envs(env.iter().copied())
        .env("LD_LIBRARY_PATH", lib_dir)
        .env_remove("DOORBELL_ADDR")
        .env_remove("DOORBELL_NAME")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {} ({e})", exe.display()));
    // A program that hangs fails the test instead of the whole run.
    let out = finish(child, 120, &exe.display().to_string());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_file(exe);
    assert!(out.status.success(), "exit {}:\n{all}", out.status);
    let oks = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(oks >= min_checks, "only {oks} checks ran:\n{all}");
    assert!(stdout.contains("\n0 failed"), "{all}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exit status, stdout and stderr of `out`, for a failing assertion.
pub fn text(out: &std::process::Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits for `child` at most `secs`, killing it (and failing, with what it
/// printed and what its threads were doing) after that. Its piped output
/// is read as it comes, so that a talkative program never blocks on a
/// full pipe.
pub fn finish(mut child: std::process::Child, secs: u64, what: &str) -> std::process::Output {
    use std::io::Read;
    fn drain<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    }
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let timed_out = wait_or_kill(&mut child, std::time::Duration::from_secs(secs));
    let status = child.wait().expect("reap the child");
    let output = std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    };
    if let Some(threads) = timed_out {
        panic!(
            "{what} did not finish in {secs} s:\n{}{threads}",
            text(&output)
        );
    }
    output
}

/// Waits for `child` to exit, at most `timeout`; if it still runs then,
/// notes what its threads are doing ([`threads_of`]), kills it and returns
/// that. The caller reaps it either way.
pub fn wait_or_kill(
    child: &mut std::process::Child,
    timeout: std::time::Duration,
) -> Option<String> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return None,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let threads = threads_of(child.id());
                let _ = child.kill();
                return Some(threads);
            }
        }
    }
}

/// What each thread of a hung process `pid` is doing, for the failure
/// message: its name, state and kernel wait channel from /proc, and the
/// stacks gdb prints (`scripts/setup.sh` installs it; without it the
/// stacks are left out, as they only help whoever reads the failure).
/// Call it before killing the process.
pub fn threads_of(pid: u32) -> String {
    let mut s = String::from("--- threads\n");
    let dir = format!("/proc/{pid}/task");
    for t in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = t.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
        let status = read("status");
        let state = status
            .lines()
            .find_map(|l| l.strip_prefix("State:"))
            .unwrap_or_default()
            .trim();
        s += &format!(
            "{} {} {state} wchan {}\n",
            t.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan")
        );
    }
    let gdb = Command::new("timeout")
        .args(["30", "gdb", "-p", &pid.to_string(), "-batch", "-nx"])
        .args(["-ex", "thread apply all bt 30"])
        .stdin(Stdio::null())
        .output();
    if let Ok(o) = gdb {
        s += &String::from_utf8_lossy(&o.stdout);
    }
    s
}

/// The interpreter of the Python venv `scripts/setup.sh` makes at the
/// repository's root (`root`), checked to import scapy's RoCE layer;
/// fails the test with what to do when it cannot.
pub fn scapy_python(root: &Path) -> PathBuf {
    let py = root.join(".venv/bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import scapy.contrib.roce"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import scapy: run scripts/setup.sh (as root), which makes \
         a venv at <repo>/.venv with scapy",
        py.display()
    );
    py
}
