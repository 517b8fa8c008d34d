//! Independent decoders read what two UDP-port NICs put on the wire.
//!
//! tshark captures an exchange between two NICs on loopback addresses:
//! SENDs, a WRITE of three packets across the 24-bit PSN wrap, a READ and
//! its three responses, two atomics and their ACKs, and traffic the other
//! way. Wireshark's InfiniBand dissector (RRoCE on UDP port 4791, on by
//! default) must decode every packet with the opcode, destination QPN and
//! PSN the test computed from the QP numbers and first PSNs. Then scapy's
//! RoCE layer (`tests/it/icrc_check.py`) recomputes each packet's ICRC and
//! must agree with the bytes our NIC sent, and with `doorbell_wire::icrc`.
//!
//! Needs tshark and the venv with scapy that `scripts/setup.sh` installs,
//! and the right to capture (root, or CAP_NET_RAW on dumpcap): without
//! them the test fails and says so, it does not pass silently.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use doorbell_cprobe::capture::{Capture, tail};

use doorbell_rt::{LiveNic, Port};
use doorbell_types::{Psn, Qpn};
use doorbell_verbs::{RcEndpoint, RemoteAddr, WrOpcode};
use doorbell_wire::BthOpcode;

use crate::common::*;
use crate::net::*;

/// The third byte of this test's loopback subnet, 127.P.31.0/24 ([`lo`]):
/// NICs of other tests running at the same time stay out of the capture.
const NET: u8 = 31;
const SETUP: &str = "run scripts/setup.sh (as root): it installs Debian's tshark and \
                     a venv at <repo>/.venv with scapy";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check_tshark() {
    let ok = Command::new("tshark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "tshark is not installed: {SETUP}");
}

/// A directory of this test's own under the temporary directory, removed
/// on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("doorbell-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The IPv4 packets of a classic pcap file from Linux's loopback
/// (Ethernet link type) or of raw IP.
fn pcap_ip_packets(b: &[u8]) -> Vec<Vec<u8>> {
    assert!(b.len() >= 24, "the capture file has no pcap header");
    let le = match b[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("not a classic pcap file: magic {:02x?}", &b[..4]),
    };
    let u32_at = |i: usize| {
        let w = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let skip = match u32_at(20) {
        1 => 14,
        101 | 228 => 0,
        113 => 16,
        other => panic!("unexpected link type {other}"),
    };
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32_at(at + 8) as usize;
        let start = at + 16;
        let pkt = b
            .get(start..start + caplen)
            .expect("a truncated pcap record");
        out.push(pkt[skip..].to_vec());
        at = start + caplen;
    }
    out
}

/// A number as tshark prints a field: decimal or 0x-prefixed hex.
fn tshark_num(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

#[test]
fn tshark_and_scapy_decode_every_packet_as_we_sent_it() {
    check_tshark();
    let python = doorbell_cprobe::program::scapy_python(&repo_root());
    let ip = |h: u8| lo(NET, h);

    // What the exchange below must put on the wire, in order: (opcode,
    // destination QPN, PSN). A starts three PSNs below the 24-bit wrap.
    let t = Timers {
        mtu: 1024,
        // About 1 s: no timeout fires while other tests load the machine,
        // so that the packets are exactly the expected ones.
        timeout: 18,
        ..Timers::default()
    };
    let a = side_on(
        LiveNic::start_with("cap-a", ip(2), Port::Udp, crate::net::udp_only()).unwrap(),
        caps(16),
        1 << 16,
        64,
    );
    let b = side_on(
        LiveNic::start_with("cap-b", ip(3), Port::Udp, crate::net::udp_only()).unwrap(),
        caps(16),
        1 << 16,
        64,
    );
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x00ff_fffd),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(0x0012_3456),
    };
    connect(&a, &ea, &eb, t);
    connect(&b, &eb, &ea, t);
    let (qa, qb) = (ea.qpn, eb.qpn);
    let pa = |i: u32| ea.psn.add(i).get();
    let pb = |i: u32| eb.psn.add(i).get();
    use BthOpcode::*;
    let expected: Vec<(BthOpcode, Qpn, u32)> = vec![
        // A -> B: SEND of 100 bytes, and its ACK.
        (RcSendOnly, qb, pa(0)),
        (RcAck, qa, pa(0)),
        // WRITE of 2500 bytes: three packets at MTU 1024, PSN wraps to 0.
        (RcRdmaWriteFirst, qb, pa(1)),
        (RcRdmaWriteMiddle, qb, pa(2)),
        (RcRdmaWriteLast, qb, pa(3)),
        (RcAck, qa, pa(3)),
        // READ of 2500 bytes: one request reserving three PSNs.
        (RcRdmaReadRequest, qb, pa(4)),
        (RcRdmaReadResponseFirst, qa, pa(4)),
        (RcRdmaReadResponseMiddle, qa, pa(5)),
        (RcRdmaReadResponseLast, qa, pa(6)),
        // Fetch-and-add, compare-and-swap.
        (RcFetchAdd, qb, pa(7)),
        (RcAtomicAck, qa, pa(7)),
        (RcCompareSwap, qb, pa(8)),
        (RcAtomicAck, qa, pa(8)),
        // B -> A: SEND with immediate, WRITE with immediate of one MTU.
        (RcSendOnlyWithImmediate, qa, pb(0)),
        (RcAck, qb, pb(0)),
        (RcRdmaWriteOnlyWithImmediate, qa, pb(1)),
        (RcAck, qb, pb(1)),
    ];
    assert_eq!(pa(3), 0, "the WRITE crosses the PSN wrap");

    let dir = TempDir::new("capture");
    let file = dir.0.join("roce.pcap");
    let [n0, n1, n2, _] = lo(NET, 0);
    let filter = format!("udp port 4791 and net {n0}.{n1}.{n2}.0/24");
    let cap = Capture::start(&file, &filter, expected.len());

    let data = pattern(2500, 9);
    a.mr.write(0, &data).unwrap();
    let at_b = |off: u64| RemoteAddr {
        addr: b.mr.addr() + off,
        rkey: b.mr.rkey(),
    };
    let at_a = |off: u64| RemoteAddr {
        addr: a.mr.addr() + off,
        rkey: a.mr.rkey(),
    };
    post_recv(&b.qp, 10, &[b.mr.sge(0, 4096).unwrap()]);
    post(
        &a.qp,
        signaled(1, &[a.mr.sge(0, 100).unwrap()], WrOpcode::Send),
    );
    assert!(wait(&a.cq, 1)[0].is_ok());
    assert!(wait(&b.cq, 1)[0].is_ok());
    post(
        &a.qp,
        signaled(
            2,
            &[a.mr.sge(0, 2500).unwrap()],
            WrOpcode::RdmaWrite(at_b(8192)),
        ),
    );
    assert!(wait(&a.cq, 1)[0].is_ok());
    post(
        &a.qp,
        signaled(
            3,
            &[a.mr.sge(16384, 2500).unwrap()],
            WrOpcode::RdmaRead(at_b(8192)),
        ),
    );
    assert!(wait(&a.cq, 1)[0].is_ok());
    let mut back = vec![0u8; 2500];
    a.mr.read(16384, &mut back).unwrap();
    assert_eq!(back, data, "the READ brought back what the WRITE wrote");
    b.mr.write(32768, &7u64.to_le_bytes()).unwrap();
    let old = [a.mr.sge(40960, 8).unwrap()];
    post(
        &a.qp,
        signaled(
            4,
            &old,
            WrOpcode::AtomicFetchAdd {
                remote: at_b(32768),
                add: 5,
            },
        ),
    );
    assert!(wait(&a.cq, 1)[0].is_ok());
    post(
        &a.qp,
        signaled(
            5,
            &old,
            WrOpcode::AtomicCmpSwp {
                remote: at_b(32768),
                compare: 12,
                swap: 1,
            },
        ),
    );
    assert!(wait(&a.cq, 1)[0].is_ok());
    let mut w = [0u8; 8];
    b.mr.read(32768, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 1, "both atomics applied once");
    post_recv(&a.qp, 11, &[a.mr.sge(0, 4096).unwrap()]);
    post(
        &b.qp,
        signaled(
            6,
            &[b.mr.sge(0, 10).unwrap()],
            WrOpcode::SendWithImm(0xfeed),
        ),
    );
    assert!(wait(&b.cq, 1)[0].is_ok());
    assert!(wait(&a.cq, 1)[0].is_ok());
    post_recv(&a.qp, 12, &[]);
    post(
        &b.qp,
        signaled(
            7,
            &[b.mr.sge(0, 1024).unwrap()],
            WrOpcode::RdmaWriteWithImm(at_a(8192), 0xbeef),
        ),
    );
    assert!(wait(&b.cq, 1)[0].is_ok());
    assert!(wait(&a.cq, 1)[0].is_ok());

    // The NICs sent exactly the expected packets, none twice.
    let (ca, cb) = (a.nic.counters(None).1, b.nic.counters(None).1);
    assert_eq!((ca.tx_retransmits, cb.tx_retransmits), (0, 0));
    assert_eq!(
        ca.tx_packets + cb.tx_packets,
        expected.len() as u64,
        "packets sent: {ca:?} {cb:?}"
    );
    let said = cap.finish();
    let bytes = std::fs::read(&file)
        .unwrap_or_else(|e| panic!("no capture file ({e}); tshark said: {}", tail(&said)));

    // Our own decoder: every packet parses and its ICRC verifies.
    let packets = pcap_ip_packets(&bytes);
    assert_eq!(
        packets.len(),
        expected.len(),
        "packets captured; tshark said: {}",
        tail(&said)
    );
    let ours: Vec<(BthOpcode, Qpn, u32)> = packets
        .iter()
        .map(|p| {
            let r = doorbell_wire::parse_roce(p).expect("doorbell_wire parses it, ICRC included");
            (r.repr.bth.opcode, r.repr.bth.dest_qp, r.repr.bth.psn.get())
        })
        .collect();
    assert_eq!(ours, expected, "doorbell_wire's reading of the capture");

    // tshark: every packet is InfiniBand over UDP, with the expected BTH.
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-T", "fields", "-E", "separator=/t"])
        .args(["-e", "frame.protocols", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark -r failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), expected.len(), "tshark's lines:\n{text}");
    for (i, (line, &(op, qpn, psn))) in lines.iter().zip(&expected).enumerate() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "packet {}: {line:?}", i + 1);
        assert!(
            f[0].contains(":udp:infiniband"),
            "packet {}: tshark decodes {:?}, not RoCEv2",
            i + 1,
            f[0]
        );
        let got = (tshark_num(f[1]), tshark_num(f[2]), tshark_num(f[3]));
        assert_eq!(
            got,
            (Some(u32::from(u8::from(op))), Some(qpn.get()), Some(psn)),
            "packet {}: tshark reads {line:?}, we expected {op:?} to QPN {:#x} PSN {psn:#x}",
            i + 1,
            qpn.get()
        );
    }

    // scapy: its ICRC of every packet is the one we sent, and ours.
    let out = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/icrc_check.py"))
        .arg(&file)
        .output()
        .expect("the venv's python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scapy disagrees:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        text.contains(&format!("scapy ICRC agrees: {0} of {0}", expected.len())),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().take(packets.len()).collect();
    for (i, (line, p)) in lines.iter().zip(&packets).enumerate() {
        let theirs = line.split(' ').nth(3).unwrap_or_default();
        let ours = doorbell_wire::icrc::icrc(&p[..p.len() - 4]).map(|c| {
            c.to_le_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        });
        let sent: String = p[p.len() - 4..]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(ours.as_deref(), Some(sent.as_str()), "packet {}", i + 1);
        assert_eq!(theirs, sent, "packet {}: scapy line {line:?}", i + 1);
    }
}
