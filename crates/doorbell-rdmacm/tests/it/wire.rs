//! The CM on the wire, read by an independent decoder: tshark captures a
//! connection between Debian's rping client and server (two processes on
//! doorbell, each NIC on its own loopback address) and Wireshark's
//! InfiniBand dissector must decode every frame as RoCEv2, none malformed,
//! with the set-up (ConnectRequest, ConnectReply, ReadyToUse) and the
//! teardown (DisconnectRequest, DisconnectReply) as CM MADs on QP 1 with
//! the GSI Q_Key, and the QP numbers the REQ and REP announce being the
//! ones the data then flows to.
//!
//! Needs tshark and the right to capture on `lo` (root, as CI runs it);
//! without them the test fails and says what to do.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use doorbell_cprobe::capture::{Capture, tail};

use crate::clients::{addr, pair_over_udp};

/// This file's loopback subnet bytes, NET and NET + 1 (see [`addr`]); no
/// other test uses them.
const NET: u8 = 40;

/// The CM's attribute IDs (IBA vol. 1, table 219).
const REQ: u64 = 0x10;
const REP: u64 = 0x13;
const RTU: u64 = 0x14;
const DREQ: u64 = 0x15;
const DREP: u64 = 0x16;
const SIDR_REQ: u64 = 0x17;
const SIDR_REP: u64 = 0x18;

/// RDMA_PS_TCP's service ID for a port (the RDMA IP CM Service annex).
fn service_id(port: u16) -> u64 {
    0x0000_0000_0106_0000 | u64::from(port)
}

/// A number as tshark prints a field: decimal or 0x-prefixed hex.
fn num(s: &str) -> u64 {
    let n = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    n.unwrap_or_else(|e| panic!("tshark printed {s:?}, not a number: {e}"))
}

/// One row per frame of `fields`, tab-separated, as tshark prints them.
fn tshark(file: &std::path::Path, args: &[&str], fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file).args(args).args(["-T", "fields"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("tshark prints UTF-8")
        .lines()
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `server` and `client` (see [`pair_over_udp`]) on `net` under a capture of
/// the traffic between their NICs; checks that tshark decodes every frame
/// as RoCEv2, none malformed, and returns the file.
fn captured(net: u8, server: &[&str], client: &[&str]) -> TempFile {
    let file = TempFile(std::env::temp_dir().join(format!(
        "doorbell-cm-wire-{net}-{}.pcap",
        std::process::id()
    )));
    let (sa, ca) = (addr(net, 2), addr(net, 3));
    let filter = format!("udp port 4791 and host {sa} and host {ca}");
    let cap = Capture::start(&file.0, &filter, 100_000);
    pair_over_udp(net, server, client);
    let said = cap.stop_after(Duration::from_millis(500));
    assert!(file.0.is_file(), "no capture; tshark said: {}", tail(&said));

    let all = tshark(
        &file.0,
        &[],
        &["frame.number", "infiniband.bth.opcode", "_ws.malformed"],
    );
    assert!(all.len() > 10, "too few frames captured: {all:?}");
    for f in &all {
        assert!(
            !f[1].is_empty(),
            "frame {} is not decoded as RoCEv2: {f:?}",
            f[0]
        );
        assert!(f[2].is_empty(), "frame {} is malformed", f[0]);
    }
    let expert = tshark(
        &file.0,
        &["-Y", "_ws.expert.severity >= error"],
        &["frame.number"],
    );
    assert!(expert.is_empty(), "frames with decode errors: {expert:?}");
    file
}

/// The MADs of a capture: source address, BTH destination QP, DETH Q_Key
/// and source QP, management class, attribute ID, then `more` fields.
fn mads(file: &TempFile, more: &[&str]) -> Vec<Vec<String>> {
    let mut fields = vec![
        "ip.src",
        "infiniband.bth.destqp",
        "infiniband.deth.q_key",
        "infiniband.deth.srcqp",
        "infiniband.mad.mgmtclass",
        "infiniband.mad.attributeid",
    ];
    fields.extend_from_slice(more);
    let mads = tshark(&file.0, &["-Y", "infiniband.mad"], &fields);
    for m in &mads {
        assert_eq!(num(&m[1]), 1, "a MAD not to QP 1: {m:?}");
        assert_eq!(num(&m[2]), 0x8001_0000, "not the GSI Q_Key: {m:?}");
        assert_eq!(num(&m[3]), 1, "a MAD not from QP 1: {m:?}");
        assert_eq!(num(&m[4]), 7, "not the CM class: {m:?}");
    }
    mads
}

#[test]
fn tshark_decodes_a_connections_cm_mads_and_traffic() {
    let (server, client) = (addr(NET, 2), addr(NET, 3));
    let port: u16 = 7174; // rping's default
    let file = captured(
        NET,
        &["rping", "-s", "-a", "{server}", "-C", "4", "-V"],
        &["rping", "-c", "-a", "{server}", "-C", "4", "-V"],
    );
    let mads = mads(
        &file,
        &[
            "infiniband.cm.req.serviceid",
            "infiniband.cm.req.localqpn",
            "infiniband.cm.rep.localqpn",
        ],
    );
    let ids: Vec<u64> = mads.iter().map(|m| num(&m[5])).collect();
    assert_eq!(
        ids,
        [REQ, REP, RTU, DREQ, DREP],
        "the CM exchange: {mads:?}"
    );
    assert_eq!(mads[0][0], client, "the client sends the REQ");
    assert_eq!(mads[1][0], server, "the server replies");
    assert_eq!(mads[2][0], client, "the client sends the RTU");
    assert_eq!(num(&mads[0][6]), service_id(port), "REQ's service ID");
    let (client_qpn, server_qpn) = (num(&mads[0][7]), num(&mads[1][8]));

    // The data: RC frames between the two QPs the REQ and REP named.
    let data = tshark(
        &file.0,
        &["-Y", "infiniband.bth && !infiniband.mad"],
        &["ip.dst", "infiniband.bth.destqp"],
    );
    assert!(data.len() >= 8, "rping's traffic is missing: {data:?}");
    for d in &data {
        let want = if d[0] == server {
            server_qpn
        } else {
            client_qpn
        };
        assert_eq!(num(&d[1]), want, "a frame to {} for another QP", d[0]);
    }
}

/// udaddy's datagram service: SIDR_REQ and SIDR_REP on QP 1, then UD
/// SENDs with rdma_cm's UDP Q_Key both ways.
#[test]
fn tshark_decodes_a_datagram_services_sidr_and_traffic() {
    let (server, client) = (addr(NET + 1, 2), addr(NET + 1, 3));
    let file = captured(
        NET + 1,
        &["udaddy", "-b", "{server}", "-C", "5"],
        &["udaddy", "-s", "{server}", "-C", "5"],
    );
    let mads = mads(&file, &[]);
    let ids: Vec<u64> = mads.iter().map(|m| num(&m[5])).collect();
    assert_eq!(ids, [SIDR_REQ, SIDR_REP], "the SIDR exchange: {mads:?}");
    assert_eq!(mads[0][0], client, "the client asks");
    assert_eq!(mads[1][0], server, "the server answers");
    let data = tshark(
        &file.0,
        &["-Y", "infiniband.deth && !infiniband.mad"],
        &["ip.dst", "infiniband.deth.q_key"],
    );
    let to = |a: &str| data.iter().filter(|d| d[0] == a).count();
    assert_eq!(
        (to(&server), to(&client)),
        (5, 5),
        "udaddy's messages: {data:?}"
    );
    for d in &data {
        assert_eq!(num(&d[1]), 0x0123_4567, "RDMA_UDP_QKEY: {d:?}");
    }
}
