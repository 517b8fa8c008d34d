//! Two hosts: `doorbell pingpong`, and the soak of the C library, between
//! two network namespaces joined by a veth pair, one process in each,
//! RoCEv2 crossing the veth.
//!
//! Each test creates the namespaces `db<tag>-<pid>-a` and `-b`, the veth
//! pair `db<tag><pid>a`/`db<tag><pid>b` with one end in each, and the addresses
//! 198.18.0.1/30 and .2/30 (the benchmarking range, RFC 2544) inside them;
//! a guard deletes all of it when the test ends, failed or not. Where the
//! machine does not allow namespaces (not root, or `ip netns add` fails) it
//! is skipped with a message, except under CI (`CI` set), where that is a
//! failure: CI runs as root.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::procs::{Proc, doorbell};

const SERVER_IP: &str = "198.18.0.1";
const CLIENT_IP: &str = "198.18.0.2";

/// Runs `ip` with `args`; the error says what failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run ip (package iproute2, scripts/setup.sh): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The effective user ID, from /proc/self/status.
fn euid() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The two namespaces and the veth pair; deletes what it made on drop.
struct TwoHosts {
    ns: Vec<String>,
    veth: [String; 2],
}

impl TwoHosts {
    /// Creates the namespaces, named after this process and `tag` (tests
    /// run at once in one process), or says why it could not.
    fn new(tag: &str) -> Result<Self, String> {
        let pid = std::process::id();
        let mut h = TwoHosts {
            ns: Vec::new(),
            veth: [format!("db{tag}{pid}a"), format!("db{tag}{pid}b")],
        };
        for side in ["a", "b"] {
            let name = format!("db{tag}-{pid}-{side}");
            ip(&["netns", "add", &name])?;
            h.ns.push(name);
        }
        Ok(h)
    }

    /// The veth pair, one end in each namespace, addressed and up.
    fn wire(&self) -> Result<(), String> {
        let (na, nb) = (&self.ns[0], &self.ns[1]);
        let [va, vb] = &self.veth;
        ip(&[
            "link", "add", va, "netns", na, "type", "veth", "peer", "name", vb, "netns", nb,
        ])?;
        for (ns, dev, addr) in [(na, va, SERVER_IP), (nb, vb, CLIENT_IP)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// `doorbell <args>` inside namespace `i`.
    fn doorbell_in(&self, i: usize, args: &[&str]) -> Proc {
        let prog = doorbell().get_program().to_owned();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i]]).arg(prog).args(args);
        Proc::spawn(c)
    }

    /// A counter of the veth end in namespace `i` (sysfs statistics).
    fn veth_stat(&self, i: usize, stat: &str) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[i], "cat"])
            .arg(format!("/sys/class/net/{}/statistics/{stat}", self.veth[i]))
            .output()
            .expect("ip netns exec cat");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{stat} of {}: {out:?}", self.veth[i]))
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and so the pair;
        // the link delete covers a pair left in this namespace.
        for ns in &self.ns {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth[0]])
            .stderr(Stdio::null())
            .status();
    }
}

/// Skips (returns None after saying why) where namespaces are not allowed,
/// unless under CI.
fn two_hosts(tag: &str) -> Option<TwoHosts> {
    let why = match euid() {
        Some(0) => match TwoHosts::new(tag) {
            Ok(h) => return Some(h),
            Err(e) => format!("`ip netns add` failed: {e}"),
        },
        _ => "not root: network namespaces need root (CAP_SYS_ADMIN)".to_string(),
    };
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("CI must run the two-namespace test, but {why}");
    }
    eprintln!("skipped a two-namespace test: {why}");
    None
}

#[test]
fn pingpong_between_two_namespaces() {
    let Some(hosts) = two_hosts("pp") else {
        return;
    };
    hosts.wire().expect("the veth pair is set up");
    let tx_before = hosts.veth_stat(1, "tx_bytes");
    let (iters, size) = (200u64, 5000u64);
    let common = [
        "-c",
        "-n",
        "200",
        "-s",
        "5000",
        "-m",
        "1024",
        "--timeout",
        "10",
    ];
    let mut srv = vec!["pingpong", "--addr", SERVER_IP];
    srv.extend(common);
    let server = hosts.doorbell_in(0, &srv);
    let mut cli = vec!["pingpong", "--addr", CLIENT_IP];
    cli.extend(common);
    cli.push(SERVER_IP);
    let client = hosts.doorbell_in(1, &cli);
    let c = client.finish(Duration::from_secs(30));
    // A server whose client failed would wait for it forever.
    let s = server.finish(Duration::from_secs(if c.success() { 30 } else { 3 }));
    s.assert_ok("server in namespace a");
    c.assert_ok("client in namespace b");
    for (out, local, remote) in [
        (&s.stdout, SERVER_IP, CLIENT_IP),
        (&c.stdout, CLIENT_IP, SERVER_IP),
    ] {
        assert!(
            out.contains(&format!("GID ::ffff:{local}\n  remote address:")),
            "{out}"
        );
        assert!(out.ends_with("usec/iter\n"), "{out}");
        assert!(out.contains(&format!("GID ::ffff:{remote}\n")), "{out}");
        assert!(
            out.contains(&format!("{} bytes in ", 2 * size * iters)),
            "{out}"
        );
        assert!(out.contains(&format!("\n{iters} iters in ")), "{out}");
        assert!(!out.contains("invalid data"), "{out}");
    }
    // The client's messages crossed the veth: five packets each at MTU
    // 1024, plus the TCP exchange and ARP. In bytes: UDP segmentation
    // offload hands the veth a message's packets as one buffer, which it
    // counts as one packet.
    let sent = hosts.veth_stat(1, "tx_bytes") - tx_before;
    assert!(sent >= size * iters, "only {sent} bytes left namespace b");

    // The port's MTU follows the veth's 1500 bytes, as a RoCE NIC's active
    // MTU follows its netdev: 1024 (a 4096-byte path would not fit, and
    // perftest, which takes the active MTU, would lose every packet).
    let info = hosts.doorbell_in(1, &["run", "--addr", CLIENT_IP, "--", "ibv_devinfo", "-v"]);
    let info = info.finish(Duration::from_secs(30));
    info.assert_ok("ibv_devinfo in namespace b");
    assert!(
        info.stdout.contains("active_mtu:\t\t1024 (3)"),
        "{}",
        info.stdout
    );

    // Everything the test made goes away with the guard.
    let (ns, veth) = (hosts.ns.clone(), hosts.veth.clone());
    drop(hosts);
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for n in &ns {
        assert!(!list.contains(n.as_str()), "{n} is still there:\n{list}");
    }
    assert!(
        ip(&["link", "show", &veth[0]]).is_err(),
        "{} is still there",
        veth[0]
    );
}

impl TwoHosts {
    /// `nft <args>` inside namespace `i`.
    fn nft(&self, i: usize, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns[i], "nft"])
            .args(args)
            .output()
            .expect("ip netns exec nft (package nftables, scripts/setup.sh)");
        assert!(
            out.status.success(),
            "nft {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The soak of doorbell-ibverbs's `tests/c/soak.c` (10,000 mixed RC
/// operations on four QPs, every byte and atomic checked), between the two
/// namespaces, with the kernel instead of doorbell's relay losing packets:
/// an nftables rule in each namespace drops 2% of the RoCEv2 datagrams it
/// sends (one by one: no UDP segmentation offload).
#[test]
fn soak_between_two_namespaces_with_the_kernel_dropping_packets() {
    let Some(hosts) = two_hosts("sk") else {
        return;
    };
    hosts.wire().expect("the veth pair is set up");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../doorbell-ibverbs/tests/c");
    let exe = std::env::temp_dir().join(format!("soak-netns-{}", std::process::id()));
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-O1", "-o"])
        .arg(&exe)
        .arg(src.join("soak.c"))
        .arg("-I")
        .arg(&src)
        .arg("-libverbs")
        .output()
        .expect("cc (scripts/setup.sh installs gcc)");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    for i in 0..2 {
        hosts.nft(i, &["add", "table", "inet", "dbsoak"]);
        hosts.nft(
            i,
            &[
                "add",
                "chain",
                "inet",
                "dbsoak",
                "out",
                "{ type filter hook output priority 0 ; }",
            ],
        );
        hosts.nft(
            i,
            &[
                "add", "rule", "inet", "dbsoak", "out", "udp", "dport", "4791", "numgen", "random",
                "mod", "100", "<", "2", "counter", "drop",
            ],
        );
    }
    let exe_s = exe.to_str().unwrap();
    let port = "18777";
    let side = |i: usize, ip: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "--addr",
            ip,
            "--",
            "env",
            "DOORBELL_UDP_GSO=0",
            exe_s,
            "-p",
            port,
            "-q",
            "4",
        ];
        args.extend(extra);
        hosts.doorbell_in(i, &args)
    };
    let server = side(0, SERVER_IP, &[]);
    let client = side(1, CLIENT_IP, &["-n", "10000", SERVER_IP]);
    let c = client.finish(Duration::from_secs(240));
    let s = server.finish(Duration::from_secs(if c.success() { 60 } else { 3 }));
    let _ = std::fs::remove_file(&exe);
    c.assert_ok("the soak's client in namespace b");
    s.assert_ok("the soak's server in namespace a");
    assert!(c.stdout.ends_with("0 failed\n") && s.stdout.ends_with("0 failed\n"));
    // The kernel did drop packets both ways.
    for i in 0..2 {
        let table = hosts.nft(i, &["list", "table", "inet", "dbsoak"]);
        let dropped: u64 = table
            .split("packets ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counter in:\n{table}"));
        assert!(
            dropped > 20,
            "namespace {i}: {dropped} packets dropped\n{table}"
        );
    }
}
