//! Debian's unmodified rdma-core tools on doorbell, as two processes:
//! `ibv_devices`, `ibv_devinfo -v`, and `ibv_rc_pingpong` between a server
//! and a client, each process with its own NIC on its own loopback address
//! (`DOORBELL_ADDR`), talking RoCEv2 over UDP.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::library::{lib_dir, run};

/// An address on this test process's own loopback subnet, so that parallel
/// test runs never share a port.
pub(crate) fn addr(net: u8, host: u8) -> String {
    format!("127.{}.{net}.{host}", 1 + std::process::id() % 250)
}

pub(crate) fn client(prog: &str, nic_addr: &str) -> Command {
    let mut cmd = Command::new(prog);
    cmd.env("LD_BIND_NOW", "1")
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("DOORBELL_ADDR", nic_addr)
        .env_remove("DOORBELL_NAME")
        .env_remove("LD_PRELOAD");
    cmd
}

use doorbell_cprobe::program::{finish, text};

#[test]
fn ibv_devices_lists_doorbell0() {
    let out = run(&mut client("ibv_devices", &addr(1, 2)));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let line = all
        .lines()
        .find(|l| l.trim_start().starts_with("doorbell0"))
        .unwrap_or_else(|| panic!("no doorbell0 in:\n{all}"));
    let guid = line.split_whitespace().nth(1).unwrap_or("");
    assert_eq!(guid.len(), 16, "a 64-bit node GUID: {line}");
    assert_ne!(guid, "0000000000000000", "{line}");
}

#[test]
fn a_device_name_comes_from_doorbell_name() {
    let out = run(client("ibv_devices", &addr(1, 3)).env("DOORBELL_NAME", "rxe_test7"));
    assert!(text(&out).contains("rxe_test7"), "{}", text(&out));
}

#[test]
fn ibv_devinfo_shows_an_active_roce_port() {
    let a = addr(2, 2);
    let out = run(client("ibv_devinfo", &a).arg("-v"));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    for want in [
        "hca_id:\tdoorbell0",
        "vendor_id:\t\t\t0x02c9",
        "phys_port_cnt:\t\t\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "max_mtu:\t\t4096 (5)",
        "active_mtu:\t\t4096 (5)",
        "link_layer:\t\tEthernet",
    ] {
        assert!(all.contains(want), "{want:?} missing:\n{all}");
    }
    // GID 0 is the IPv4-mapped address (ibv_devinfo prints it with
    // inet_ntop), reported as RoCE v2.
    let mapped = format!("::ffff:{a}, RoCE v2");
    let gid_line = all
        .lines()
        .find(|l| l.contains("GID[  0]"))
        .unwrap_or_else(|| panic!("no GID[0] in:\n{all}"));
    assert!(gid_line.contains(&mapped), "{gid_line} vs {mapped}");
    assert!(
        !all.contains("GID[  1]"),
        "the other entries are empty:\n{all}"
    );
}

/// Runs ibv_rc_pingpong as a server and a client with `args` on both, and
/// returns their outputs.
fn rc_pingpong(net: u8, port: u16, args: &[&str]) -> (Output, Output) {
    pingpong("ibv_rc_pingpong", net, port, args)
}

/// Runs one of rdma-core's pingpong examples (`tool`) as a server and a
/// client with `args` on both.
fn pingpong(tool: &str, net: u8, port: u16, args: &[&str]) -> (Output, Output) {
    pingpong_env(tool, net, port, args, [&[], &[]])
}

/// [`pingpong`] with `env[0]` set for the server and `env[1]` for the
/// client.
fn pingpong_env(
    tool: &str,
    net: u8,
    port: u16,
    args: &[&str],
    env: [&[(&str, &str)]; 2],
) -> (Output, Output) {
    let (sa, ca) = (addr(net, 2), addr(net, 3));
    let port = (port + (std::process::id() % 1000) as u16).to_string();
    let common = |c: &mut Command| {
        c.args(["-d", "doorbell0", "-g", "0", "-p", &port])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    };
    let mut s = client(tool, &sa);
    s.envs(env[0].iter().copied());
    common(&mut s);
    let server = s.spawn().expect("start the server");
    // The server listens on TCP before it opens the device's QP; give it a
    // moment, then the client retries the connection itself.
    std::thread::sleep(Duration::from_millis(300));
    let mut c = client(tool, &ca);
    c.envs(env[1].iter().copied());
    common(&mut c);
    c.arg("127.0.0.1");
    let client = c.spawn().expect("start the client");
    let c_out = finish(client, 30, &format!("the {tool} client"));
    let s_out = finish(server, 30, &format!("the {tool} server"));
    (s_out, c_out)
}

fn assert_pingpong_ok(s: &Output, c: &Output, iters: &str) {
    for (who, out) in [("server", s), ("client", c)] {
        let all = text(out);
        assert!(out.status.success(), "{who}:\n{all}");
        assert!(all.contains(&format!("{iters} iters in")), "{who}:\n{all}");
        assert!(
            all.contains("local address:") && all.contains("remote address:"),
            "{who}:\n{all}"
        );
    }
}

#[test]
fn ibv_rc_pingpong_runs_between_two_processes() {
    let (s, c) = rc_pingpong(3, 18515, &["-n", "200", "-s", "4096", "-c"]);
    assert_pingpong_ok(&s, &c, "200");
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    let (s, c) = rc_pingpong(4, 19515, &["-n", "100", "-s", "64", "-e"]);
    assert_pingpong_ok(&s, &c, "100");
}

#[test]
fn ibv_rc_pingpong_with_completion_timestamps() {
    let (s, c) = rc_pingpong(10, 24515, &["-n", "100", "-s", "64", "-t"]);
    assert_pingpong_ok(&s, &c, "100");
    for (who, out) in [("server", &s), ("client", &c)] {
        let all = text(out);
        let cycles = |what: &str| -> f64 {
            let key = format!("{what} receive completion clock cycles = ");
            all.lines()
                .find_map(|l| l.strip_prefix(&key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("{who}: no '{key}':\n{all}"))
        };
        let (max, min, avg) = (cycles("Max"), cycles("Min"), cycles("Average"));
        // Receive completions a round trip apart, on a 1 GHz clock: more
        // than zero cycles between them, and the average between the bounds.
        assert!(min > 0.0 && min <= avg && avg <= max, "{who}:\n{all}");
    }
}

#[test]
fn ibv_uc_pingpong_runs_between_two_processes() {
    let (s, c) = pingpong("ibv_uc_pingpong", 5, 20515, &["-n", "100", "-s", "2048"]);
    assert_pingpong_ok(&s, &c, "100");
}

#[test]
fn ibv_ud_pingpong_runs_between_two_processes() {
    let (s, c) = pingpong("ibv_ud_pingpong", 6, 21515, &["-n", "100", "-s", "1024"]);
    assert_pingpong_ok(&s, &c, "100");
}

#[test]
fn ibv_rc_pingpong_on_the_new_send_api() {
    let (s, c) = rc_pingpong(7, 22515, &["-n", "100", "-s", "256", "-N"]);
    assert_pingpong_ok(&s, &c, "100");
}

#[test]
fn ibv_srq_pingpong_runs_between_two_processes() {
    let (s, c) = pingpong("ibv_srq_pingpong", 8, 23515, &["-n", "100", "-s", "1024"]);
    assert_pingpong_ok(&s, &c, "100");
}

#[test]
fn ibv_asyncwatch_sees_the_port_go_down_and_come_back() {
    use std::io::{BufRead, BufReader};
    // Down 300 ms after the NIC starts, for 200 ms.
    let mut child = client("ibv_asyncwatch", &addr(9, 2))
        .env("DOORBELL_LINK_DOWN", "300:200")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ibv_asyncwatch (scripts/setup.sh installs ibverbs-utils)");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines.len() < 3 && Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            lines.push(l);
        }
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("collect output");
    let all = format!("{}\n{}", lines.join("\n"), text(&out));
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("doorbell0: async event FD ")),
        "{all}"
    );
    assert_eq!(
        lines.get(1).map(|l| l.trim()),
        Some("event_type IBV_EVENT_PORT_ERR (10), port 1"),
        "{all}"
    );
    assert_eq!(
        lines.get(2).map(|l| l.trim()),
        Some("event_type IBV_EVENT_PORT_ACTIVE (9), port 1"),
        "{all}"
    );
}

#[test]
fn doorbell_pcap_captures_a_programs_frames() {
    let dir = lib_dir().parent().expect("lib dir has a parent");
    let (fs, fc) = (
        dir.join(format!("ud-s-{}.pcapng", std::process::id())),
        dir.join(format!("ud-c-{}.pcapng", std::process::id())),
    );
    let (s, c) = pingpong_env(
        "ibv_ud_pingpong",
        11,
        25515,
        &["-n", "10", "-s", "512"],
        [
            &[("DOORBELL_PCAP", fs.to_str().unwrap())],
            &[("DOORBELL_PCAP", fc.to_str().unwrap())],
        ],
    );
    assert_pingpong_ok(&s, &c, "10");
    for f in [&fs, &fc] {
        let out = Command::new("tshark")
            .arg("-r")
            .arg(f)
            .args([
                "-T",
                "fields",
                "-e",
                "frame.protocols",
                "-e",
                "infiniband.bth.opcode",
            ])
            .output()
            .expect("tshark (scripts/setup.sh installs it)");
        let _ = std::fs::remove_file(f);
        let text = String::from_utf8_lossy(&out.stdout);
        // 10 round trips of UD SENDs (opcode 100, "UD Send Only"), each
        // seen leaving one end and arriving at the other.
        let sends = text.lines().filter(|l| l.ends_with("\t100")).count();
        assert_eq!(sends, 20, "{text}");
        assert!(
            text.lines()
                .all(|l| l.starts_with("eth:ethertype:ip:udp:infiniband")),
            "{text}"
        );
    }
}

/// `DOORBELL_TRACE` (`doorbell run --trace`): an unmodified program's NIC
/// writes its timeline at exit, with the device's work, the doorbells, the
/// DMAs and the frames of each message.
#[test]
fn doorbell_trace_writes_a_programs_timeline() {
    let dir = lib_dir().parent().expect("lib dir has a parent");
    let (fs, fc) = (
        dir.join(format!("rc-s-{}.trace.json", std::process::id())),
        dir.join(format!("rc-c-{}.trace.json", std::process::id())),
    );
    let (s, c) = pingpong_env(
        "ibv_rc_pingpong",
        13,
        25517,
        &["-n", "10", "-s", "512"],
        [
            &[("DOORBELL_TRACE", fs.to_str().unwrap())],
            &[("DOORBELL_TRACE", fc.to_str().unwrap())],
        ],
    );
    assert_pingpong_ok(&s, &c, "10");
    for f in [&fs, &fc] {
        let body = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let _ = std::fs::remove_file(f);
        let v: serde_json::Value = serde_json::from_slice(&body).expect("the trace is JSON");
        let ev = v["traceEvents"].as_array().unwrap();
        let named = |n: &str| {
            ev.iter()
                .filter(|e| e["name"].as_str().is_some_and(|s| s.starts_with(n)))
                .count()
        };
        // Ten SENDs each way: each side's NIC sent ten and took in ten,
        // and wrote a CQE for each send and each receive.
        let sends = |tid: u64| {
            ev.iter()
                .filter(|e| e["tid"] == tid && e["name"].as_str().unwrap().starts_with("RcSend"))
                .count()
        };
        assert_eq!((sends(4), sends(5)), (10, 10), "{}", f.display());
        assert!(named("Cqe write") >= 20, "{}", f.display());
        assert!(named("Payload read") >= 10);
        assert!(named("doorbell") + named("BlueFlame") >= 10);
        assert!(named("command CreateQp") >= 1);
        // Stamped with the wall clock: in order, within the run.
        let ts: Vec<f64> = ev.iter().filter_map(|e| e["ts"].as_f64()).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]));
        assert!(ts.last().unwrap() - ts[0] < 60e6, "more than a minute");
    }
}
