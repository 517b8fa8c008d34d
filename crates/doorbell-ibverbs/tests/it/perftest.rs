//! Debian's unmodified perftest 4.5 on doorbell, server and client as two
//! processes, each on its own NIC: every bandwidth and latency test over
//! RC (and UD for SEND), on both of perftest's posting paths (the `ibv_wr_*`
//! API it picks for a ConnectX-4 part ID, and `ibv_post_send` with
//! `--use_old_post_send`), with the options people use: sizes (`-s`, `-a`),
//! iterations (`-n`) or duration (`-D`), postlists (`-l`), inline (`-I`), CQ
//! moderation (`-Q`), several QPs (`-q`), GID index (`-x`).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use doorbell_cprobe::program::{finish, text};

use crate::library::lib_dir;

/// Each run gets its own loopback /24 and TCP port. The ports stay below
/// the kernel's ephemeral range (32768 up), where any connection on the
/// machine may hold one and the server's listen fails; and below 17600,
/// where the other tests of this binary take theirs.
static NEXT: AtomicU16 = AtomicU16::new(0);

/// The next run's slot: its number, for [`addr`], and its TCP port.
fn next_slot() -> (u16, String) {
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    let port = 10_000 + (std::process::id() % 150) as u16 * 40 + k;
    (k, port.to_string())
}

fn addr(net: u16, host: u8) -> String {
    format!("127.{}.{}.{host}", 1 + std::process::id() % 250, 100 + net)
}

fn spawn(
    tool: &str,
    nic: &str,
    port: &str,
    args: &[&str],
    server: Option<&str>,
    env: &[(&str, &str)],
) -> Child {
    let mut c = Command::new(tool);
    c.envs(env.iter().copied())
        .env("LD_BIND_NOW", "1")
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("DOORBELL_ADDR", nic)
        .env_remove("DOORBELL_NAME")
        .args(["-d", "doorbell0", "-x", "0", "-F", "-p", port])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(s) = server {
        c.arg(s);
    }
    c.spawn()
        .unwrap_or_else(|e| panic!("cannot run {tool} ({e}); scripts/setup.sh installs perftest"))
}

/// Runs `tool args` as server and client; returns the client's result
/// rows: (bytes, iterations) of each line of the result table.
fn run(tool: &str, args: &[&str]) -> Vec<(u64, u64)> {
    run_env(tool, args, &[])
}

/// [`run`] with `env` set in both processes.
pub(crate) fn run_env(tool: &str, args: &[&str], env: &[(&str, &str)]) -> Vec<(u64, u64)> {
    let (k, port) = next_slot();
    let server = spawn(tool, &addr(k, 2), &port, args, None, env);
    // perftest's client retries its TCP connect while the server sets up.
    std::thread::sleep(Duration::from_millis(200));
    let client = spawn(tool, &addr(k, 3), &port, args, Some("127.0.0.1"), env);
    let what = format!("{tool} {}", args.join(" "));
    let c = finish(client, 60, &format!("client of {what}"));
    let s = finish(server, 60, &format!("server of {what}"));
    for (who, out) in [("server", &s), ("client", &c)] {
        assert!(out.status.success(), "{who} of {what}:\n{}", text(out));
    }
    let stdout = String::from_utf8_lossy(&c.stdout);
    let rows: Vec<(u64, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert!(
        !rows.is_empty(),
        "no result rows from {what}:\n{}",
        text(&c)
    );
    rows
}

#[test]
fn bandwidth_tests_over_rc_on_the_new_post_api() {
    for tool in ["ib_write_bw", "ib_read_bw", "ib_send_bw"] {
        assert_eq!(
            run(tool, &["-s", "4096", "-n", "200"]),
            [(4096, 200)],
            "{tool}"
        );
    }
    assert_eq!(run("ib_atomic_bw", &["-n", "200"]), [(8, 200)]);
}

#[test]
fn bandwidth_tests_over_rc_on_ibv_post_send() {
    for tool in ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"] {
        let rows = run(tool, &["-n", "100", "--use_old_post_send"]);
        assert_eq!(rows.len(), 1, "{tool}");
        assert_eq!(rows[0].1, 100, "{tool}");
    }
}

#[test]
fn latency_tests_over_rc() {
    for tool in [
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ] {
        let rows = run(tool, &["-n", "100"]);
        assert_eq!(rows.len(), 1, "{tool}");
        assert_eq!(rows[0].1, 100, "{tool}");
    }
    let rows = run(
        "ib_write_lat",
        &["-s", "8", "-n", "50", "--use_old_post_send"],
    );
    assert_eq!(rows, [(8, 50)]);
}

/// `ib_write_lat` polls memory for its peer's WRITE, not its CQ, so no
/// call into the library is there to take the frame: each WRITE needs
/// the receiving process's thread rung awake, and the wake-up is in the
/// latency. The poll that returned a WRITE's completion, having taken
/// only the ACK, waits for the peer's answer instead (decision record
/// 0034). The wait is made long here (`DOORBELL_LINGER_US`) so that a
/// loaded machine's slow answers still come within it; the same run with
/// the wait turned off (0) waits for none.
#[test]
fn write_lat_polls_wait_for_the_peers_writes() {
    let iters = 2000;
    let (bells_off, waited_off) = write_lat_bells(iters, "0");
    assert_eq!(waited_off, 0, "no waits when turned off");
    let (bells, waited) = write_lat_bells(iters, "20000");
    // On a quiet machine nearly every WRITE is waited for, and the bells
    // fall to a few dozen from about one a WRITE; on a loaded one (the
    // test suite's own neighbours) a process that loses its core answers
    // late, its peer's receiver thread is rung meanwhile and is awake at
    // the next poll, which then has no reason to wait. What holds there
    // too: the waits happen, and a good share of them pay off.
    assert!(
        waited >= iters / 20,
        "{waited} answers waited for in {iters} round trips ({bells} bells, {bells_off} \
         with the waits turned off)"
    );
}

/// Runs `ib_write_lat -s 8 -n iters` with `DOORBELL_LINGER_US=linger`;
/// returns the bells both processes rang and the answers they waited for.
fn write_lat_bells(iters: u64, linger: &str) -> (u64, u64) {
    let (k, port) = next_slot();
    let dir = lib_dir().parent().expect("lib dir has a parent");
    let stats = |who: &str| {
        dir.join(format!("linger-{who}-{}-{k}.json", std::process::id()))
            .to_string_lossy()
            .into_owned()
    };
    let (ss, cs) = (stats("server"), stats("client"));
    let n = iters.to_string();
    let args = ["-s", "8", "-n", n.as_str()];
    let senv = [
        ("DOORBELL_STATS", ss.as_str()),
        ("DOORBELL_LINGER_US", linger),
    ];
    let cenv = [
        ("DOORBELL_STATS", cs.as_str()),
        ("DOORBELL_LINGER_US", linger),
    ];
    let server = spawn("ib_write_lat", &addr(k, 2), &port, &args, None, &senv);
    std::thread::sleep(Duration::from_millis(200));
    let client = spawn(
        "ib_write_lat",
        &addr(k, 3),
        &port,
        &args,
        Some("127.0.0.1"),
        &cenv,
    );
    let c = finish(client, 60, "client of ib_write_lat");
    let s = finish(server, 60, "server of ib_write_lat");
    for (who, out) in [("server", &s), ("client", &c)] {
        assert!(
            out.status.success(),
            "{who} of ib_write_lat:\n{}",
            text(out)
        );
    }
    let (mut bells, mut waited) = (0, 0);
    for file in [&ss, &cs] {
        let doc = std::fs::read_to_string(file).expect("the stats file was written at exit");
        let _ = std::fs::remove_file(file);
        let v: serde_json::Value = serde_json::from_str(&doc).expect("the stats file is JSON");
        let port = &v["port"];
        // Every WRITE and its ACK went through shared memory
        // (more if a loaded machine made an ACK late and the WRITE went again).
        let frames = port["shm_rx_frames"].as_u64().expect("shm_rx_frames");
        assert!(frames >= 2 * iters, "{doc}");
        bells += port["shm_bells"].as_u64().expect("shm_bells");
        waited += port["shm_lingers_paid"].as_u64().expect("shm_lingers_paid");
    }
    (bells, waited)
}

#[test]
fn send_over_ud() {
    assert_eq!(
        run("ib_send_bw", &["-c", "UD", "-s", "1024", "-n", "100"]),
        [(1024, 100)]
    );
    assert_eq!(
        run("ib_send_lat", &["-c", "UD", "-s", "512", "-n", "50"]),
        [(512, 50)]
    );
    assert_eq!(
        run(
            "ib_send_bw",
            &["-c", "UD", "-s", "256", "-n", "50", "--use_old_post_send"]
        ),
        [(256, 50)]
    );
}

#[test]
fn write_bw_with_postlists_inline_moderation_and_several_qps() {
    assert_eq!(
        run("ib_write_bw", &["-s", "65536", "-n", "100", "-l", "4"]),
        [(65536, 100)]
    );
    assert_eq!(
        run(
            "ib_write_bw",
            &["-s", "64", "-n", "200", "-I", "64", "-Q", "8"]
        ),
        [(64, 200)]
    );
    // Two QPs: perftest counts iterations over all of them.
    assert_eq!(
        run("ib_write_bw", &["-s", "512", "-n", "100", "-q", "2"]),
        [(512, 200)]
    );
    assert_eq!(
        run(
            "ib_send_bw",
            &["-s", "256", "-n", "100", "-l", "4", "--use_old_post_send"]
        ),
        [(256, 100)]
    );
}

#[test]
fn write_bw_over_all_sizes_and_for_a_duration() {
    let rows = run("ib_write_bw", &["-a", "-n", "10"]);
    let sizes: Vec<u64> = rows.iter().map(|r| r.0).collect();
    let want: Vec<u64> = (1..=23).map(|i| 1u64 << i).collect();
    assert_eq!(sizes, want, "every size from 2 to 2^23");
    assert!(rows.iter().all(|r| r.1 == 10));
    // A one-second run reports how many it did, at least one.
    let rows = run("ib_write_bw", &["-s", "64", "-D", "1"]);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].1 > 0, "{rows:?}");
}
