//! An independent decoder: Wireshark's InfiniBand dissector reads the CM
//! MADs we build, carried as RoCEv2 UD frames to QP 1, from a pcap file.
//!
//! tshark 4.0 (Debian 12) dissects REQ, REP, RTU, REJ, DREQ and DREP field
//! by field, and names MRA, SIDR_REQ and SIDR_REP without dissecting their
//! bodies; for those the test reads the MAD data area tshark shows. Two
//! REQ fields are left out: tshark reads the path's flow label and packet
//! rate from too few bytes (the flow label as 3 bytes and the rate from the
//! word's first byte), so they are checked against the kernel's
//! `ibta_vol1_c12.h` in `kernel_fields` instead.
//!
//! Needs `/usr/bin/tshark` (`scripts/setup.sh` installs it). Without it the
//! test fails when `CI=true` and otherwise skips with a message.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use doorbell_cm::{CmMad, CmMessage};
use doorbell_wire::parse_roce;

use crate::frames::*;

/// True if tshark runs; without it, panics under `CI=true`.
fn have_tshark() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tshark is not installed: run scripts/setup.sh (as root)"
        );
        eprintln!("skipping: tshark is not installed (scripts/setup.sh installs it)");
    }
    ok
}

/// A file of this test's own under the temporary directory, removed on drop.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tshark(file: &TempFile, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&file.0)
        .args(args)
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}

/// A number as tshark prints a field: decimal or 0x-prefixed hex.
fn num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The 32-bit big-endian word at `offset` of a hex dump of the MAD data.
fn data_word(hex: &str, offset: usize) -> u64 {
    let h = hex
        .get(offset * 2..offset * 2 + 8)
        .expect("data long enough");
    u64::from_str_radix(h, 16).expect("hex data")
}

/// What tshark must say of each sample: the message's name, and fields
/// (by tshark's field names) with their values.
fn expected(i: usize, mad: &CmMad) -> (&'static str, Vec<(&'static str, u64)>) {
    let id = u64::from(comm_id(i));
    match &mad.message {
        CmMessage::Req(r) => (
            "ConnectRequest",
            vec![
                ("infiniband.cm.req", id),
                ("infiniband.cm.req.serviceid", r.service_id),
                ("infiniband.cm.req.localqpn", u64::from(REQ_QPN)),
                ("infiniband.cm.req.startpsn", u64::from(REQ_PSN)),
                ("infiniband.cm.req.responderres", 4),
                ("infiniband.cm.req.initdepth", 5),
                ("infiniband.cm.req.remoteresptout", 20),
                ("infiniband.cm.req.localresptout", 21),
                ("infiniband.cm.req.retrcount", 7),
                ("infiniband.cm.req.pkey", 0xffff),
                ("infiniband.cm.req.pppmtu", 3),
                ("infiniband.cm.req.rnrretrcount", 6),
                ("infiniband.cm.req.maxcmretr", 15),
                ("infiniband.cm.req.e2eflowctrl", 1),
                ("infiniband.cm.req.prim_tfcclass", 0x20),
                ("infiniband.cm.req.prim_hoplim", 64),
                ("infiniband.cm.req.prim_sl", 3),
                ("infiniband.cm.req.prim_localacktout", 18),
                ("infiniband.cm.req.ip_cm.ipv", 4),
                ("infiniband.cm.req.ip_cm.sport", u64::from(SRC_PORT)),
            ],
        ),
        CmMessage::Rep(r) => (
            "ConnectReply",
            vec![
                ("infiniband.cm.rep", id),
                ("infiniband.cm.rep.remotecommid", u64::from(comm_id(0))),
                ("infiniband.cm.rep.localqpn", u64::from(REP_QPN)),
                ("infiniband.cm.rep.startpsn", u64::from(REP_PSN)),
                ("infiniband.cm.rep.respres", 4),
                ("infiniband.cm.rep.initdepth", 5),
                ("infiniband.cm.rep.tgtackdelay", 15),
                ("infiniband.cm.rep.failoveracc", 1),
                ("infiniband.cm.rep.e2eflowctrl", 1),
                ("infiniband.cm.rep.rnrretrcount", 7),
                ("infiniband.cm.rep.localcaguid", r.local_ca_guid),
            ],
        ),
        CmMessage::Rtu(_) => (
            "ReadyToUse",
            vec![
                ("infiniband.cm.rtu.localcommid", id),
                ("infiniband.cm.rtu.remotecommid", u64::from(comm_id(2))),
            ],
        ),
        CmMessage::Dreq(_) => (
            "DisconnectRequest",
            vec![
                ("infiniband.cm.dreq.localcommid", id),
                ("infiniband.cm.dreq.remotecommid", u64::from(comm_id(2))),
                // tshark files the DREQ's remote QPN under the REQ's prefix.
                ("infiniband.cm.req.remoteqpneecn", u64::from(REP_QPN)),
            ],
        ),
        CmMessage::Drep(_) => (
            "DisconnectReply",
            vec![
                ("infiniband.cm.drsp.localcommid", id),
                ("infiniband.cm.drsp.remotecommid", u64::from(comm_id(4))),
            ],
        ),
        CmMessage::Rej(_) => (
            "ConnectReject",
            vec![
                ("infiniband.cm.rej.localcommid", id),
                ("infiniband.cm.rej.remotecommid", u64::from(comm_id(0))),
                ("infiniband.cm.rej.msgrej", 0),
                ("infiniband.cm.rej.rejinfolen", 4),
                ("infiniband.cm.rej.reason", 28),
            ],
        ),
        CmMessage::Mra(_) => ("MsgRcptAck", vec![]),
        CmMessage::SidrReq(_) => ("ServiceIDResReq", vec![]),
        CmMessage::SidrRep(_) => ("ServiceIDResReqResp", vec![]),
    }
}

#[test]
fn tshark_decodes_every_cm_message_as_we_built_it() {
    if !have_tshark() {
        return;
    }
    let mads = samples();
    let frames: Vec<Vec<u8>> = mads
        .iter()
        .enumerate()
        .map(|(i, m)| frame(m, i as u32))
        .collect();
    // Our own decoder first: the frames are good RoCEv2 (ICRC included) and
    // the MADs come back out of them.
    for (f, mad) in frames.iter().zip(&mads) {
        let ip = &f[doorbell_wire::ethernet::HEADER_LEN..];
        let parsed = parse_roce(ip).expect("a valid RoCEv2 frame");
        assert_eq!(CmMad::parse(&ip[parsed.payload]), Ok(*mad));
    }

    let file = TempFile(
        std::env::temp_dir().join(format!("doorbell-cm-tshark-{}.pcap", std::process::id())),
    );
    std::fs::write(&file.0, pcap(&frames)).expect("write the pcap");

    let text = tshark(&file, &["-V"]);
    for bad in ["Malformed", "Exception", "Expert Info (Error"] {
        assert!(!text.contains(bad), "tshark says {bad}:\n{text}");
    }
    // One block per frame; each names its CM message.
    let blocks: Vec<&str> = text.split("\nFrame ").collect();
    assert_eq!(blocks.len(), mads.len(), "tshark's frames:\n{text}");

    let mut fields = vec![
        "frame.number",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.deth.q_key",
        "infiniband.deth.srcqp",
        "infiniband.mad.baseversion",
        "infiniband.mad.mgmtclass",
        "infiniband.mad.classversion",
        "infiniband.mad.method",
        "infiniband.mad.transactionid",
        "infiniband.mad.attributeid",
        "infiniband.mad.data",
        "infiniband.cm.req.ip_cm.sip4",
        "infiniband.cm.req.ip_cm.dip4",
        "infiniband.cm.req.prim_localgid_ipv4",
        "infiniband.cm.req.prim_remotegid_ipv4",
    ];
    for (i, m) in mads.iter().enumerate() {
        fields.extend(expected(i, m).1.iter().map(|(f, _)| *f));
    }
    fields.sort_unstable();
    fields.dedup();
    let mut args = vec!["-T", "fields", "-E", "header=y", "-E", "separator=|"];
    for f in &fields {
        args.extend(["-e", f]);
    }
    let table = tshark(&file, &args);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("a header line").split('|').collect();
    let rows: Vec<HashMap<&str, &str>> = lines
        .map(|l| header.iter().copied().zip(l.split('|')).collect())
        .collect();
    assert_eq!(rows.len(), mads.len(), "tshark's table:\n{table}");

    for (i, ((mad, row), block)) in mads.iter().zip(&rows).zip(&blocks).enumerate() {
        let (name, want) = expected(i, mad);
        assert!(
            block.contains(&format!("CM {name}")),
            "frame {} is not a {name}:\n{block}",
            i + 1
        );
        let get = |f: &str| {
            let v = row.get(f).copied().unwrap_or("");
            num(v).unwrap_or_else(|| panic!("frame {}: {f} = {v:?}\n{block}", i + 1))
        };
        // A UD SEND Only to QP 1 from QP 1 with the GSI Q_Key.
        assert_eq!(get("infiniband.bth.opcode"), 0x64);
        assert_eq!(get("infiniband.bth.destqp"), 1);
        assert_eq!(get("infiniband.deth.q_key"), 0x8001_0000);
        assert_eq!(get("infiniband.deth.srcqp"), 1);
        // A CM MAD, method Send, with our transaction and attribute IDs.
        assert_eq!(get("infiniband.mad.baseversion"), 1);
        assert_eq!(get("infiniband.mad.mgmtclass"), 0x07);
        assert_eq!(get("infiniband.mad.classversion"), 2);
        assert_eq!(get("infiniband.mad.method"), 0x03);
        assert_eq!(get("infiniband.mad.transactionid"), mad.transaction_id);
        assert_eq!(
            get("infiniband.mad.attributeid"),
            u64::from(u16::from(mad.message.attribute()))
        );
        for (f, v) in want {
            assert_eq!(get(f), v, "frame {} ({name}): {f}", i + 1);
        }
        // Where tshark does not dissect the body, read its data area.
        let data = row["infiniband.mad.data"];
        match &mad.message {
            CmMessage::Mra(_) => {
                assert_eq!(data_word(data, 0), u64::from(comm_id(i)));
                assert_eq!(data_word(data, 4), u64::from(comm_id(0)));
                assert_eq!(&data[16..20], "00c0", "REQ MRAed, service timeout 24");
            }
            CmMessage::SidrReq(r) => {
                assert_eq!(data_word(data, 0), u64::from(comm_id(i)));
                assert_eq!(data_word(data, 4) >> 16, 0xffff, "P_Key");
                let sid = (data_word(data, 8) << 32) | data_word(data, 12);
                assert_eq!(sid, r.service_id);
            }
            CmMessage::SidrRep(r) => {
                assert_eq!(data_word(data, 0), u64::from(comm_id(7)));
                assert_eq!(data_word(data, 8) >> 8, u64::from(SIDR_QPN));
                let sid = (data_word(data, 12) << 32) | data_word(data, 16);
                assert_eq!(sid, r.service_id);
                assert_eq!(data_word(data, 20), u64::from(r.qkey));
            }
            _ => {}
        }
        // rdma_cm's header in the REQ: the IPv4 addresses, and the GIDs.
        if let CmMessage::Req(_) = mad.message {
            assert_eq!(row["infiniband.cm.req.ip_cm.sip4"], "192.0.2.1");
            assert_eq!(row["infiniband.cm.req.ip_cm.dip4"], "192.0.2.2");
            assert_eq!(row["infiniband.cm.req.prim_localgid_ipv4"], "192.0.2.1");
            assert_eq!(row["infiniband.cm.req.prim_remotegid_ipv4"], "192.0.2.2");
        }
    }
}
