//! `doorbell pingpong` as two processes of the built binary, server and
//! client on 127.P.4x.y addresses ([`lo`]) (their NICs' UDP ports) and a TCP port
//! of their own for the exchange; and its failures, which must be
//! messages, not panics.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use crate::procs::{Finished, Proc, doorbell, free_tcp_port, lo};

/// Longest a side may take; a run takes well under a second.
const DEADLINE: Duration = Duration::from_secs(30);

/// Runs a server at `srv_ip` and a client at `cli_ip` with the extra
/// arguments of each; returns (server, client).
fn pair(srv_ip: &str, srv: &[&str], cli_ip: &str, cli: &[&str]) -> (Finished, Finished) {
    let port = free_tcp_port().to_string();
    let mut s = doorbell();
    s.args(["pingpong", "--addr", srv_ip, "-p", &port])
        .args(srv);
    let server = Proc::spawn(s);
    let mut c = doorbell();
    c.args(["pingpong", "--addr", cli_ip, "-p", &port])
        .args(cli)
        .arg("127.0.0.1");
    let client = Proc::spawn(c);
    let c = client.finish(DEADLINE);
    // A server whose client failed would wait for it forever.
    let s = server.finish(if c.success() {
        DEADLINE
    } else {
        Duration::from_secs(3)
    });
    (s, c)
}

/// The (LID, QPN, PSN, GID) of an `  <which> address: ...` line.
fn address(out: &str, which: &str) -> (String, String, String, String) {
    let prefix = format!("  {which} address:");
    let line = out
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {which} address line in:\n{out}"));
    let rest = line[prefix.len()..].trim();
    let f: Vec<&str> = rest.split(", ").collect();
    assert_eq!(f.len(), 4, "{line:?}");
    let get = |i: usize, key: &str| {
        f[i].strip_prefix(key)
            .unwrap_or_else(|| panic!("{line:?}: field {i} is not {key}"))
            .to_string()
    };
    let (lid, qpn, psn, gid) = (
        get(0, "LID "),
        get(1, "QPN "),
        get(2, "PSN "),
        get(3, "GID "),
    );
    assert_eq!(lid, "0x0000", "{line:?}");
    for v in [&qpn, &psn] {
        assert!(
            v.len() == 8 && v.starts_with("0x") && u32::from_str_radix(&v[2..], 16).is_ok(),
            "{line:?}: {v} is not 0x%06x"
        );
    }
    (lid, qpn, psn, gid)
}

/// Checks the two summary lines: 2 × size × iters bytes, `iters` iters,
/// the same seconds, and figures that agree with each other.
fn check_summary(out: &str, size: u64, iters: u64) {
    let bytes_line = out
        .lines()
        .find(|l| l.contains(" bytes in "))
        .unwrap_or_else(|| panic!("no bytes line in:\n{out}"));
    let iters_line = out
        .lines()
        .find(|l| l.contains(" iters in "))
        .unwrap_or_else(|| panic!("no iters line in:\n{out}"));
    let b: Vec<&str> = bytes_line.split(' ').collect();
    let i: Vec<&str> = iters_line.split(' ').collect();
    assert_eq!(b.len(), 8, "{bytes_line:?}");
    assert_eq!(i.len(), 8, "{iters_line:?}");
    assert_eq!(
        (b[0].parse::<u64>().ok(), b[1], b[2], b[4], b[5], b[7]),
        (
            Some(2 * size * iters),
            "bytes",
            "in",
            "seconds",
            "=",
            "Mbit/sec"
        ),
        "{bytes_line:?}"
    );
    assert_eq!(
        (i[0].parse::<u64>().ok(), i[1], i[2], i[4], i[5], i[7]),
        (Some(iters), "iters", "in", "seconds", "=", "usec/iter"),
        "{iters_line:?}"
    );
    let num = |s: &str| s.parse::<f64>().unwrap_or_else(|_| panic!("{s} in {out}"));
    let (secs, mbps, usec) = (num(b[3]), num(b[6]), num(i[6]));
    assert_eq!(b[3], i[3], "both lines give the same seconds");
    assert!(mbps > 0.0 && usec > 0.0, "{out}");
    // usec/iter × iters is the time the seconds were rounded from.
    assert!(
        (usec * iters as f64 / 1e6 - secs).abs() <= 0.0051,
        "usec/iter {usec} disagrees with {secs} s:\n{out}"
    );
    // Mbit/sec × seconds is the bits.
    let bits = (2 * size * iters * 8) as f64;
    assert!(
        (mbps * usec * iters as f64 - bits).abs() <= bits * 1e-3,
        "{mbps} Mbit/sec disagrees with {usec} usec/iter:\n{out}"
    );
}

#[test]
fn two_processes_bounce_messages_and_validate_them() {
    let (size, iters) = (5000u64, 200u64);
    let args = ["-c", "-s", "5000", "-n", "200", "-r", "16"];
    let (sa, ca) = (lo(40, 2), lo(40, 3));
    let (s, c) = pair(&sa, &args, &ca, &args);
    s.assert_ok("server");
    c.assert_ok("client");
    // What each said of itself is what the other heard.
    let (sl, sr) = (address(&s.stdout, "local"), address(&s.stdout, "remote"));
    let (cl, cr) = (address(&c.stdout, "local"), address(&c.stdout, "remote"));
    assert_eq!(sl, cr);
    assert_eq!(cl, sr);
    assert_eq!(sl.3, format!("::ffff:{sa}"));
    assert_eq!(cl.3, format!("::ffff:{ca}"));
    for out in [&s.stdout, &c.stdout] {
        check_summary(out, size, iters);
        assert!(!out.contains("invalid data"), "{out}");
    }
}

#[test]
fn completion_events_and_json() {
    let args = ["--json", "-e", "-c", "-s", "64", "-n", "100", "-m", "256"];
    let (s, c) = pair(&lo(41, 2), &args, &lo(41, 3), &args);
    s.assert_ok("server");
    c.assert_ok("client");
    let sv: serde_json::Value = serde_json::from_str(&s.stdout).expect("the server prints JSON");
    let cv: serde_json::Value = serde_json::from_str(&c.stdout).expect("the client prints JSON");
    assert_eq!(sv["role"], "server");
    assert_eq!(cv["role"], "client");
    assert_eq!(sv["local"], cv["remote"]);
    assert_eq!(sv["remote"], cv["local"]);
    assert_eq!(sv["local"]["gid"], format!("::ffff:{}", lo(41, 2)));
    for v in [&sv, &cv] {
        assert_eq!(v["events"], true);
        assert_eq!(v["validated"], true, "{v}");
        assert_eq!(v["mtu"], 256);
        assert_eq!(v["bytes"], 2 * 64 * 100);
        // Each side completes 100 sends and 100 receives, and each wait
        // for an event is followed by one poll of at most two.
        let events = v["cq_events"].as_u64().unwrap();
        assert!(events >= 100, "{v}");
        // Each event was an EQE written by DMA (the CQ is re-armed after
        // each, so the last arm may fire once more, unwaited), and
        // interrupts are one per EQE unless several arrived before the
        // handler re-armed.
        let (eqes, irqs) = (
            v["eqe_writes"].as_u64().unwrap(),
            v["interrupts"].as_u64().unwrap(),
        );
        assert!(eqes == events || eqes == events + 1, "{v}");
        assert!(irqs >= 1 && irqs <= eqes, "{v}");
        assert!(v["usec_per_iter"].as_f64().unwrap() > 0.0);
        let (qpn, psn) = (&v["local"]["qpn"], &v["local"]["psn"]);
        assert!(qpn.as_u64().unwrap() < 1 << 24 && psn.as_u64().unwrap() < 1 << 24);
    }
}

/// `-c` is a real check: a server that validates, against a client that
/// did not fill its buffer with the pattern, reports every page.
#[test]
fn the_server_finds_a_buffer_the_client_did_not_fill() {
    let (s, c) = pair(
        &lo(42, 2),
        &["-c", "-s", "9000", "-n", "20"],
        &lo(42, 3),
        &["-s", "9000", "-n", "20"],
    );
    c.assert_ok("client");
    s.assert_error("server", "3 of 3 pages");
    for p in 0..3 {
        assert!(
            s.stdout.contains(&format!("invalid data in page {p}\n")),
            "{}",
            s.stdout
        );
    }
}

/// The exchange is rdma-core's: 52 bytes "LID:QPN:PSN:GID\0" with the GID
/// as 32 hex digits. A fake server that answers with an all-zero GID (an
/// ibv_rc_pingpong run without -g) gets a message that says what to do.
#[test]
fn the_exchange_message_is_rdma_cores() {
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let mut c = doorbell();
    let addr = lo(43, 3);
    c.args(["pingpong", "--addr", &addr, "-p", &port, "127.0.0.1"]);
    let client = Proc::spawn(c);
    let (mut conn, _) = l.accept().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut msg = [0u8; 52];
    conn.read_exact(&mut msg).unwrap();
    let text = std::str::from_utf8(&msg[..51]).unwrap();
    assert_eq!(msg[51], 0, "{msg:?}");
    let f: Vec<&str> = text.split(':').collect();
    assert_eq!(
        f.iter().map(|s| s.len()).collect::<Vec<_>>(),
        [4, 6, 6, 32],
        "{text}"
    );
    assert!(
        text.bytes()
            .all(|b| b == b':' || b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{text}"
    );
    assert_eq!(f[0], "0000");
    // The IPv4-mapped GID of --addr, 127.P.43.3, byte by byte.
    let octets: Vec<u8> = addr.split('.').map(|o| o.parse().unwrap()).collect();
    let gid: String = [0u8; 10]
        .iter()
        .chain(&[0xff, 0xff])
        .chain(&octets)
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(f[3], gid, "GID ::ffff:{addr}");
    assert!(f[3].starts_with("00000000000000000000ffff7f") && f[3].ends_with("2b03"));
    conn.write_all(b"0000:000123:000042:00000000000000000000000000000000\0")
        .unwrap();
    let mut done = [0u8; 5];
    conn.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done\0");
    let out = client.finish(DEADLINE);
    out.assert_error("client against a GID-less peer", "run the peer with -g 0");
    assert!(
        out.stdout.contains("  local address:  LID 0x0000"),
        "{}",
        out.stdout
    );
}

/// A server that gets something else than an address message says so.
#[test]
fn a_garbled_exchange_is_refused() {
    let port = free_tcp_port();
    let mut s = doorbell();
    s.args(["pingpong", "--addr", &lo(44, 2), "-p", &port.to_string()]);
    let server = Proc::spawn(s);
    let mut conn = None;
    for _ in 0..500 {
        if let Ok(c) = TcpStream::connect(("127.0.0.1", port)) {
            conn = Some(c);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut conn = conn.expect("the server listens");
    conn.write_all(&[b'x'; 52]).unwrap();
    let out = server.finish(DEADLINE);
    out.assert_error("server", "bad address message");
}

#[test]
fn bad_options_and_unusable_addresses_are_messages() {
    let run = |args: &[&str]| {
        let mut c = doorbell();
        c.arg("pingpong").args(args);
        Proc::spawn(c).finish(DEADLINE)
    };
    let port = free_tcp_port().to_string();
    let p = ["-p", port.as_str()];
    let a: Vec<String> = (2..6).map(|h| lo(45, h)).collect();
    let (a2, a3, a4, a5) = (a[0].as_str(), a[1].as_str(), a[2].as_str(), a[3].as_str());
    run(&["--addr", a2, "-m", "1000"]).assert_error("-m 1000", "invalid MTU 1000");
    run(&["--addr", "::1"]).assert_error("IPv6 --addr", "IPv4");
    run(&["--addr", "nonsense"]).assert_error("--addr nonsense", "not an IP address");
    run(&["--addr", a2, "-g", "1"]).assert_error("-g 1", "GID index 1");
    run(&["--addr", a2, "-i", "2"]).assert_error("-i 2", "port 2");
    run(&["--addr", a2, "-l", "16"]).assert_error("-l 16", "service level");
    // TEST-NET-1: no interface of this host has it.
    run(&["--addr", "192.0.2.1", p[0], p[1]]).assert_error("foreign --addr", "not an address");
    // Nobody listens on the port: refused until the timeout.
    let t = std::time::Instant::now();
    run(&["--addr", a3, "--timeout", "0.5", p[0], p[1], "127.0.0.1"])
        .assert_error("unreachable peer", "Couldn't connect to 127.0.0.1");
    assert!(t.elapsed() >= Duration::from_millis(500), "it retried");
    run(&["--addr", a3, "nosuchhost.invalid"]).assert_error("bad name", "resolve");
    // Another NIC, or anything, has the UDP port.
    let udp = UdpSocket::bind((a4, 4791)).unwrap();
    run(&["--addr", a4, p[0], p[1]]).assert_error("UDP port taken", "is in use");
    drop(udp);
    // The TCP port of the exchange is taken.
    let tcp = TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let taken = tcp.local_addr().unwrap().port().to_string();
    run(&["--addr", a5, "-p", &taken]).assert_error("TCP port taken", "in use");
    // clap's own refusals exit with 2 and say why.
    let f = run(&["--addr", a2, "-n", "0"]);
    assert_eq!(f.status.and_then(|s| s.code()), Some(2), "{f:?}");
    assert!(f.stderr.contains("--iters"), "{}", f.stderr);
}

#[test]
fn stats_show_each_qps_crossings_and_explain_counters() {
    let args = ["-s", "64", "-n", "50", "--stats"];
    let (s, c) = pair(&lo(48, 2), &args, &lo(48, 3), &args);
    s.assert_ok("server");
    c.assert_ok("client");
    for out in [&s.stderr, &c.stderr] {
        // The table's header, one QP's row and the totals.
        assert!(out.contains("MMIO") && out.contains("WQE rd"), "{out}");
        assert!(out.contains("0x100") && out.contains("total"), "{out}");
        // A clean run over shared memory: nothing to explain but the
        // requests each side answered (none: pingpong only SENDs).
        assert!(!out.contains("rnr_nak_retry_err"), "{out}");
    }
}

#[test]
fn pcap_writes_what_tshark_decodes_as_rocev2() {
    let dir = std::env::temp_dir();
    let (fs, fc) = (
        dir.join(format!("pp-s-{}.pcapng", std::process::id())),
        dir.join(format!("pp-c-{}.pcapng", std::process::id())),
    );
    let srv = ["-s", "2000", "-n", "20", "--pcap", fs.to_str().unwrap()];
    let cli = ["-s", "2000", "-n", "20", "--pcap", fc.to_str().unwrap()];
    let (s, c) = pair(&lo(48, 4), &srv, &lo(48, 5), &cli);
    s.assert_ok("server");
    c.assert_ok("client");
    for f in [&fs, &fc] {
        let out = std::process::Command::new("tshark")
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
        let rows: Vec<&str> = text.lines().collect();
        // Each of 20 round trips: two 1 KiB packets of a SEND each way and
        // an ACK each way, seen by both ends.
        assert!(rows.len() >= 20 * 6, "{} frames:\n{text}", rows.len());
        assert!(
            rows.iter()
                .all(|r| r.starts_with("eth:ethertype:ip:udp:infiniband")),
            "{text}"
        );
    }
}

#[test]
fn trace_writes_each_sides_timeline() {
    let dir = std::env::temp_dir();
    let (fs, fc) = (
        dir.join(format!("pp-s-{}.trace.json", std::process::id())),
        dir.join(format!("pp-c-{}.trace.json", std::process::id())),
    );
    let srv = ["-s", "64", "-n", "20", "--trace", fs.to_str().unwrap()];
    let cli = ["-s", "64", "-n", "20", "--trace", fc.to_str().unwrap()];
    let (s, c) = pair(&lo(48, 6), &srv, &lo(48, 7), &cli);
    s.assert_ok("server");
    c.assert_ok("client");
    let mut sent = Vec::new();
    for f in [&fs, &fc] {
        let body = std::fs::read(f).unwrap();
        let _ = std::fs::remove_file(f);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        let named = |tid: u64, prefix: &str| {
            ev.iter()
                .filter(move |e| e["tid"] == tid && e["name"].as_str().unwrap().starts_with(prefix))
                .collect::<Vec<_>>()
        };
        // 20 SENDs each way (track 4 sent, 5 received), each with its own
        // PSN, and their CQEs. A SEND can be on a track twice: a loaded
        // machine can hold an ACK back past the adaptive timeout, and the
        // SEND is then sent again, as it would be on a real link.
        let psns = |tid: u64| {
            let sends = named(tid, "RcSendOnly");
            let psns: std::collections::BTreeSet<u64> = sends
                .iter()
                .filter_map(|e| e["args"]["psn"].as_u64())
                .collect();
            (sends.len(), psns.len())
        };
        for tid in [4, 5] {
            let (sends, distinct) = psns(tid);
            assert_eq!(distinct, 20, "track {tid} of {}", f.display());
            assert!(sends >= distinct, "track {tid} of {}", f.display());
        }
        assert!(named(3, "Cqe write").len() >= 40);
        sent.push(named(4, "Rc").len());
    }
    assert!(sent.iter().all(|&n| n >= 20));
}
