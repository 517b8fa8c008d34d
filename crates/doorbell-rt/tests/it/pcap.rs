//! `NicOptions::pcap`: every frame a NIC sends and receives in a pcapng
//! file, read back by tshark (from Debian's packages, which
//! `scripts/setup.sh` installs): each decodes as Ethernet, IPv4, UDP and
//! RoCEv2 (Wireshark's InfiniBand dissector) with no malformed packet,
//! directions are marked, and a frame the receiver dropped for a bad ICRC is
//! in its file with a comment that says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use doorbell_rt::NicOptions;
use doorbell_verbs::{RemoteAddr, SendFlags, SendWr, WrOpcode};

use crate::common::*;
use crate::net::*;

fn file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("doorbell-{name}-{}.pcapng", std::process::id()))
}

/// tshark's fields `fields` of every frame of `path`, one line each.
fn tshark(path: &Path, fields: &[&str]) -> Vec<String> {
    let mut c = Command::new("tshark");
    c.arg("-r")
        .arg(path)
        .args(["-T", "fields", "-E", "separator=|"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run tshark ({e}); scripts/setup.sh installs it"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn captures_hold_every_frame_as_rocev2_with_drops_marked() {
    let (fa, fb) = (file("pcap-a"), file("pcap-b"));
    let a = NicOptions {
        pcap: Some(fa.clone()),
        ..corrupting_first_send()
    };
    let b = NicOptions {
        pcap: Some(fb.clone()),
        ..NicOptions::default()
    };
    let p = fabric_pair([a, b], default_caps(), 4096, Timers::default());
    let (ca, cb) = send_through_a_corruption(&p);
    drop(p);
    let (a_rows, b_rows) = (
        tshark(
            &fa,
            &[
                "frame.protocols",
                "frame.packet_flags",
                "frame.comment",
                "infiniband.bth.opcode",
            ],
        ),
        tshark(
            &fb,
            &[
                "frame.protocols",
                "frame.packet_flags",
                "frame.comment",
                "infiniband.bth.opcode",
            ],
        ),
    );
    let _ = (std::fs::remove_file(&fa), std::fs::remove_file(&fb));
    for (who, rows, c) in [("A", &a_rows, &ca), ("B", &b_rows, &cb)] {
        // Every frame the NIC sent and every one it was given.
        assert_eq!(
            rows.len() as u64,
            c.tx_packets + c.rx_packets + c.rx_icrc_errors,
            "{who}: {rows:#?}"
        );
        for r in rows.iter() {
            assert!(
                r.starts_with("eth:ethertype:ip:udp:infiniband"),
                "{who}: {r}"
            );
            assert!(!r.contains("malformed"), "{who}: {r}");
        }
        let dir = |flag: &str| {
            rows.iter()
                .filter(|r| r.split('|').nth(1) == Some(flag))
                .count()
        };
        assert_eq!(
            dir("0x00000002") as u64,
            c.tx_packets,
            "{who} outbound: {rows:#?}"
        );
    }
    // B took the corrupted SEND in and dropped it: it is in B's file,
    // marked; A's file has the SEND twice (the first, corrupted, and its
    // retransmission) and no note (A did not drop it).
    let marked: Vec<&String> = b_rows
        .iter()
        .filter(|r| r.contains("dropped: bad ICRC"))
        .collect();
    assert_eq!(marked.len(), 1, "{b_rows:#?}");
    assert!(a_rows.iter().all(|r| !r.contains("dropped")), "{a_rows:#?}");
}

/// A burst that reaches a NIC all at once is answered as it is taken in:
/// the responder's ACKs leave after every few dozen of its frames, not
/// after the whole burst. Held back until a turn had handled all it found,
/// they once waited behind thousands of duplicates after a go-back-N, the
/// requester's timer ran out again meanwhile, and each timeout added
/// another window of duplicates: in a loaded test run a QP failed with
/// transport retry exceeded. B's capture records a frame as B takes it in
/// and as it leaves, in that order; a run of inbound frames with nothing
/// sent is a wait of everything B owes.
#[test]
fn a_burst_is_answered_while_it_is_taken_in() {
    const WRITES: usize = 256;
    let fb = file("burst-b");
    let b = NicOptions {
        pcap: Some(fb.clone()),
        ..NicOptions::default()
    };
    let cap = doorbell_verbs::QpCaps {
        max_send_wr: WRITES as u32,
        ..default_caps()
    };
    let p = fabric_pair([NicOptions::default(), b], cap, 1 << 20, Timers::default());
    let sges: Vec<_> = (0..WRITES)
        .map(|i| p.a.mr.sge(i as u64 * 1024, 1024).unwrap())
        .collect();
    let wrs: Vec<SendWr> = sges
        .iter()
        .enumerate()
        .map(|(i, sge)| SendWr {
            wr_id: i as u64,
            sg_list: std::slice::from_ref(sge),
            opcode: WrOpcode::RdmaWrite(RemoteAddr {
                addr: p.b.mr.addr() + i as u64 * 1024,
                rkey: p.b.mr.rkey(),
            }),
            flags: if i + 1 == WRITES {
                SendFlags::SIGNALED
            } else {
                SendFlags(0)
            },
            ud: None,
        })
        .collect();
    p.a.qp.post_send(&wrs).unwrap();
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    drop(p);
    let rows = tshark(&fb, &["frame.packet_flags", "infiniband.bth.opcode"]);
    let _ = std::fs::remove_file(&fb);
    let inbound = rows.iter().filter(|r| r.starts_with("0x00000001")).count();
    assert_eq!(inbound, WRITES, "{rows:#?}");
    let longest = rows
        .split(|r| !r.starts_with("0x00000001"))
        .map(<[String]>::len)
        .max();
    assert!(
        longest.is_some_and(|n| n <= 64),
        "B took {longest:?} frames in a row in before it sent anything"
    );
}

/// Two NICs of one process with nothing between them leave the ICRC of
/// their frames unwritten (decision record 0038), and neither checks it.
/// A capture must still hold every frame as it goes on a wire: B records
/// A's frames as it takes them in, and scapy's RoCE layer
/// (`tests/it/icrc_check.py`), recomputing each ICRC on its own, agrees
/// with every one, A's included. A has no capture of its own, so nothing
/// but B's engine writes A's ICRCs, and A's WRITEs come without their
/// payload: B's engine puts it in before it records them.
#[test]
fn a_capture_holds_the_icrc_a_sender_left_unwritten() {
    let (p, fb) = capturing_receiver("pcap-sealed-b");
    // Four packets at MTU 1024: A hands each WRITE on as one run, from its
    // FIRST to its LAST of 928 bytes, which B's capture records packet by
    // packet.
    let data = pattern(4000, 9);
    p.a.mr.write(0, &data).unwrap();
    let sge = [p.a.mr.sge(0, 4000).unwrap()];
    let write = WrOpcode::RdmaWrite(RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    });
    for i in 0..4 {
        post(
            &p.a.qp,
            SendWr {
                flags: SendFlags::SIGNALED,
                ..signaled(i, &sge, write)
            },
        );
        assert!(wait(&p.a.cq, 1)[0].is_ok());
    }
    let mut got = vec![0u8; 4000];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let (a, b) = settled(&p);
    drop(p);
    // A left each WRITE's payload in its memory (its NIC has no capture):
    // B's capture holds the bytes B copied from there. WRITE FIRST,
    // MIDDLE and LAST are opcodes 6 to 8.
    let carried: String = tshark(&fb, &["infiniband.bth.opcode", "data.data"])
        .iter()
        .filter_map(|l| l.split_once('|'))
        .filter(|(op, _)| ["6", "7", "8"].contains(op))
        .map(|(_, d)| d)
        .collect();
    let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        carried == hex.repeat(4),
        "the WRITEs' payloads as A sent them"
    );
    let frames = a.tx_packets + b.tx_packets;
    assert!(frames >= 8, "A's WRITEs and B's ACKs: {a:?} {b:?}");
    scapy_icrc_agrees(&fb, frames);
}

/// Two NICs on the fabric, B capturing to the file `name` names and A
/// capturing nothing, so that A hands on runs and trains.
fn capturing_receiver(name: &str) -> (Pair, PathBuf) {
    let fb = file(name);
    let b = NicOptions {
        pcap: Some(fb.clone()),
        ..NicOptions::default()
    };
    let p = fabric_pair(
        [NicOptions::default(), b],
        default_caps(),
        4096,
        Timers::default(),
    );
    (p, fb)
}

/// Checks with scapy's RoCE layer (`tests/it/icrc_check.py`), which
/// recomputes each ICRC on its own, that every one of the `frames`
/// packets in the capture `file` has the right ICRC; removes the file.
fn scapy_icrc_agrees(file: &Path, frames: u64) {
    let python = doorbell_cprobe::program::scapy_python(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    );
    let out = Command::new(&python)
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/icrc_check.py"))
        .arg(file)
        .output()
        .expect("the venv's python runs (scripts/setup.sh makes it)");
    let _ = std::fs::remove_file(file);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("scapy ICRC agrees: {frames} of {frames}")),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_capture_shows_each_packet_of_a_train() {
    let (p, fb) = capturing_receiver("pcap-train-b");
    // Eight inline WRITEs posted as one list: A, which records nothing,
    // hands them on back to back as one train, which B's capture records
    // packet by packet.
    let data: Vec<Vec<u8>> = (0..8u8).map(|i| vec![0x10 + i; 8]).collect();
    let sges: Vec<[doorbell_verbs::Sge; 1]> = (0..8)
        .map(|i| {
            p.a.mr.write(64 * i, &data[i as usize]).unwrap();
            [p.a.mr.sge(64 * i, 8).unwrap()]
        })
        .collect();
    let wrs: Vec<SendWr<'_>> = (0..8u64)
        .map(|i| SendWr {
            flags: if i == 7 {
                SendFlags::INLINE | SendFlags::SIGNALED
            } else {
                SendFlags::INLINE
            },
            ..signaled(
                i,
                &sges[i as usize],
                WrOpcode::RdmaWrite(RemoteAddr {
                    addr: p.b.mr.addr() + 8 * i,
                    rkey: p.b.mr.rkey(),
                }),
            )
        })
        .collect();
    p.a.qp.post_send(&wrs).unwrap();
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let mut got = vec![0u8; 64];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data.concat());
    let (a, b) = settled(&p);
    drop(p);
    // WRITE ONLY is opcode 10: eight of them, PSNs in a row, each with
    // its own payload.
    let writes: Vec<(u64, String)> = tshark(
        &fb,
        &["infiniband.bth.opcode", "infiniband.bth.psn", "data.data"],
    )
    .iter()
    .filter_map(|l| {
        let mut f = l.split('|');
        let (op, psn, d) = (f.next()?, f.next()?, f.next()?);
        let psn: u64 = psn.parse().ok()?;
        (op == "10").then(|| (psn, d.to_string()))
    })
    .collect();
    assert_eq!(writes.len(), 8, "{writes:?}");
    for (k, (psn, d)) in writes.iter().enumerate() {
        assert_eq!(*psn, (writes[0].0 + k as u64) & 0xff_ffff, "packet {k}");
        let hex: String = data[k].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(*d, hex, "packet {k}");
    }
    let frames = a.tx_packets + b.tx_packets;
    assert!(frames >= 9, "A's WRITEs and B's ACK: {a:?} {b:?}");
    scapy_icrc_agrees(&fb, frames);
}

/// A READ of 1 MiB (1 024 responses at MTU 1024) and a WRITE posted
/// behind it in one list. B, which captures and so carries its payloads,
/// builds the READ's responses a burst at a time (`NicConfig::read_burst`):
/// its capture must show every response, in PSN order, then the WRITE's
/// ACK, and A must get the data. (The device test `read_burst` covers a
/// request taken while responses are still owed.)
#[test]
fn a_long_reads_responses_leave_in_order_before_the_ack_behind_them() {
    const LEN: u32 = 1 << 20;
    let (fa, fb) = (file("long-read-a"), file("long-read-b"));
    let opts = |f: &PathBuf| NicOptions {
        pcap: Some(f.clone()),
        ..NicOptions::default()
    };
    let p = fabric_pair(
        [opts(&fa), opts(&fb)],
        default_caps(),
        2 << 20,
        Timers::default(),
    );
    let data = pattern(LEN as usize, 3);
    p.b.mr.write(0, &data).unwrap();
    let into = [p.a.mr.sge(0, LEN).unwrap()];
    let small = [p.a.mr.sge(LEN.into(), 8).unwrap()];
    let at_b = |off: u64| RemoteAddr {
        addr: p.b.mr.addr() + off,
        rkey: p.b.mr.rkey(),
    };
    p.a.qp
        .post_send(&[
            SendWr {
                flags: SendFlags(0),
                ..signaled(1, &into, WrOpcode::RdmaRead(at_b(0)))
            },
            signaled(2, &small, WrOpcode::RdmaWrite(at_b(LEN.into()))),
        ])
        .unwrap();
    let wc = wait(&p.a.cq, 1)[0];
    assert!(wc.is_ok() && wc.wr_id == 2, "{wc:?}");
    let mut got = vec![0u8; LEN as usize];
    p.a.mr.read(0, &mut got).unwrap();
    assert!(got == data, "the READ brought B's bytes");
    drop(p);
    let _ = std::fs::remove_file(&fa);
    let out: Vec<(u64, u64)> = tshark(
        &fb,
        &[
            "frame.packet_flags",
            "infiniband.bth.opcode",
            "infiniband.bth.psn",
        ],
    )
    .iter()
    .filter_map(|l| {
        let mut f = l.split('|');
        let (dir, op, psn) = (f.next()?, f.next()?, f.next()?);
        (dir == "0x00000002").then(|| Some((op.parse().ok()?, psn.parse().ok()?)))?
    })
    .collect();
    let _ = std::fs::remove_file(&fb);
    // READ RESPONSE FIRST, 1 022 MIDDLEs, LAST (opcodes 13, 14, 15),
    // PSNs in a row; then the ACK (17) of the WRITE's PSN, the next.
    let n = (LEN / 1024) as usize;
    assert_eq!(out.len(), n + 1, "B sent the responses and one ACK");
    let first = out[0].1;
    for (k, &(op, psn)) in out.iter().enumerate() {
        let want = match k {
            0 => 13,
            k if k + 1 < n => 14,
            k if k + 1 == n => 15,
            _ => 17,
        };
        assert_eq!(
            (op, psn),
            (want, (first + k as u64) & 0xff_ffff),
            "packet {k}"
        );
    }
}
