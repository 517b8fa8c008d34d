//! NICs whose ports are real UDP sockets on loopback addresses: every
//! opcode end to end, segmentation at every path MTU, UD, the GID, and a
//! capture showing that the kernel sends the very header each ICRC covers.

use std::time::Duration;

use doorbell_pcie::LinkConfig;
use doorbell_rt::{Fate, LiveNic, NicOptions, Port, RtError};
use doorbell_types::Psn;
use doorbell_verbs::{
    AddressVector, Ah, QpAttrs, QpInitAttr, QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr,
    UdTarget, WcOpcode, WcStatus, WrOpcode,
};
use doorbell_wire::BthOpcode;

use crate::common::*;
use crate::net::*;

#[test]
fn every_rc_opcode_between_two_udp_ports() {
    let t = Timers {
        mtu: 4096,
        ..Timers::default()
    };
    let p = udp_pair(
        [lo(2, 2), lo(2, 3)],
        [udp_only(), udp_only()],
        caps(32),
        4 << 20,
        t,
    );
    // The GID is the port's address.
    let [a, b, c, d] = lo(2, 2);
    assert_eq!(
        p.a.ctx.gid(),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d]
    );
    assert_eq!(p.b.nic.gid()[12..], lo(2, 3));
    let remote = |off: u64| RemoteAddr {
        addr: p.b.mr.addr() + off,
        rkey: p.b.mr.rkey(),
    };
    for (i, &len) in [0usize, 1, 4095, 4096, 4097, 100_000, 1 << 20]
        .iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        p.a.mr.write(0, &data).unwrap();
        let sge = [p.a.mr.sge(0, len as u32).unwrap()];
        // WRITE with immediate to B's MR at 1 MiB.
        post_recv(&p.b.qp, 1, &[]);
        post(
            &p.a.qp,
            signaled(1, &sge, WrOpcode::RdmaWriteWithImm(remote(1 << 20), 7)),
        );
        assert!(wait(&p.a.cq, 1)[0].is_ok());
        let r = wait(&p.b.cq, 1)[0];
        assert_eq!(
            (r.status, r.opcode, r.imm_data, r.byte_len),
            (
                WcStatus::Success,
                WcOpcode::RecvRdmaWithImm,
                Some(7),
                len as u32
            )
        );
        let mut got = vec![0u8; len];
        p.b.mr.read(1 << 20, &mut got).unwrap();
        assert_eq!(got, data, "WRITE of {len}");
        // SEND with immediate into B's MR at 0.
        post_recv(&p.b.qp, 2, &[p.b.mr.sge(0, 1 << 20).unwrap()]);
        post(&p.a.qp, signaled(2, &sge, WrOpcode::SendWithImm(9)));
        assert!(wait(&p.a.cq, 1)[0].is_ok());
        let r = wait(&p.b.cq, 1)[0];
        assert_eq!((r.wr_id, r.byte_len, r.imm_data), (2, len as u32, Some(9)));
        p.b.mr.read(0, &mut got).unwrap();
        assert_eq!(got, data, "SEND of {len}");
        // READ it back from B into A at 2 MiB.
        let dst = [p.a.mr.sge(2 << 20, len as u32).unwrap()];
        post(&p.a.qp, signaled(3, &dst, WrOpcode::RdmaRead(remote(0))));
        let w = wait(&p.a.cq, 1)[0];
        assert_eq!(
            (w.status, w.opcode),
            (WcStatus::Success, WcOpcode::RdmaRead)
        );
        p.a.mr.read(2 << 20, &mut got).unwrap();
        assert_eq!(got, data, "READ of {len}");
    }
    // Atomics on a word of B.
    p.b.mr.write(3 << 20, &40u64.to_le_bytes()).unwrap();
    let old = [p.a.mr.sge(0, 8).unwrap()];
    post(
        &p.a.qp,
        signaled(
            4,
            &old,
            WrOpcode::AtomicFetchAdd {
                remote: remote(3 << 20),
                add: 2,
            },
        ),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    post(
        &p.a.qp,
        signaled(
            5,
            &old,
            WrOpcode::AtomicCmpSwp {
                remote: remote(3 << 20),
                compare: 42,
                swap: 99,
            },
        ),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let mut w = [0u8; 8];
    p.a.mr.read(0, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 42, "CAS returns the value FAA left");
    p.b.mr.read(3 << 20, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 99);

    let (a, b) = settled(&p);
    assert_eq!((a.rx_icrc_errors, b.rx_icrc_errors), (0, 0));
    assert_eq!((a.rx_dropped, b.rx_dropped), (0, 0));
    let (pa, pb) = (p.a.nic.port_counters(), p.b.nic.port_counters());
    assert_eq!(
        pa.tx_datagrams, a.tx_packets,
        "every frame left as a datagram"
    );
    assert_eq!(pb.rx_datagrams, a.tx_packets);
    assert_eq!(pa.rx_datagrams, b.tx_packets);
    assert_eq!((pa.tx_refused, pb.tx_refused), (0, 0));
    assert_eq!((pa.tx_payload_lost, pb.tx_payload_lost), (0, 0));
    assert_eq!(b.rx_packets, pb.rx_datagrams);
}

#[test]
fn messages_are_segmented_at_every_path_mtu() {
    for (k, mtu) in [256u32, 512, 1024, 2048, 4096].into_iter().enumerate() {
        let (opts, log) = tap(|_, _| Fate::Deliver);
        let t = Timers {
            mtu,
            ..Timers::default()
        };
        let ip = |h| lo(10 + k as u8, h);
        let p = udp_pair(
            [ip(2), ip(3)],
            [
                // Every packet is counted: no early resends (`exact`).
                exact(NicOptions {
                    shm: false,
                    udp_gso: false,
                    ..opts
                }),
                udp_only(),
            ],
            caps(8),
            1 << 16,
            t,
        );
        let len = 3 * mtu as usize + 5;
        let data = pattern(len, k as u8);
        p.a.mr.write(0, &data).unwrap();
        post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 1 << 15).unwrap()]);
        let sge = [p.a.mr.sge(0, len as u32).unwrap()];
        post(&p.a.qp, signaled(1, &sge, WrOpcode::Send));
        assert!(wait(&p.a.cq, 1)[0].is_ok());
        assert_eq!(wait(&p.b.cq, 1)[0].byte_len, len as u32);
        let mut got = vec![0u8; len];
        p.b.mr.read(0, &mut got).unwrap();
        assert_eq!(got, data);
        // A WRITE of one MTU exactly is one packet; of zero bytes too.
        for n in [mtu, 0] {
            let sge = [p.a.mr.sge(0, n).unwrap()];
            let remote = RemoteAddr {
                addr: p.b.mr.addr(),
                rkey: p.b.mr.rkey(),
            };
            post(&p.a.qp, signaled(2, &sge, WrOpcode::RdmaWrite(remote)));
            assert!(wait(&p.a.cq, 1)[0].is_ok());
        }
        let seen: Vec<(BthOpcode, usize, bool)> = log
            .lock()
            .unwrap()
            .iter()
            .map(|s| (s.opcode, s.payload_len, s.ack_req))
            .collect();
        let m = mtu as usize;
        assert_eq!(
            seen,
            [
                (BthOpcode::RcSendFirst, m, false),
                (BthOpcode::RcSendMiddle, m, false),
                (BthOpcode::RcSendMiddle, m, false),
                (BthOpcode::RcSendLast, 5, true),
                (BthOpcode::RcRdmaWriteOnly, m, true),
                (BthOpcode::RcRdmaWriteOnly, 0, true),
            ],
            "MTU {mtu}"
        );
        let psns: Vec<u32> = log.lock().unwrap().iter().map(|s| s.psn).collect();
        assert_eq!(
            psns,
            (0..6)
                .map(|i| Psn::new(0x00ff_ff00).add(i).get())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn an_address_is_one_port() {
    let a = LiveNic::start_udp("one", lo(4, 2), LinkConfig::default()).unwrap();
    assert!(matches!(
        LiveNic::start_udp("two", lo(4, 2), LinkConfig::default()),
        Err(RtError::AddressInUse(a)) if a == lo(4, 2)
    ));
    drop(a);
    // Once the first is gone, the address is free again.
    LiveNic::start_udp("three", lo(4, 2), LinkConfig::default()).unwrap();
    // An address this host does not have cannot be bound.
    assert!(matches!(
        LiveNic::start_with("four", [192, 0, 2, 1], Port::Udp, NicOptions::default()),
        Err(RtError::Socket { .. })
    ));
}

#[test]
fn ud_datagrams_over_udp_ports() {
    let cap = caps(16);
    let mk = |name, ip| {
        let s = side_on(
            LiveNic::start_with(name, ip, Port::Udp, udp_only()).unwrap(),
            cap,
            1 << 16,
            64,
        );
        let qp =
            s.pd.create_qp(&QpInitAttr {
                qp_type: QpType::Ud,
                send_cq: s.cq.clone(),
                recv_cq: s.cq.clone(),
                cap,
                sq_sig_all: true,
                srq: None,
            })
            .unwrap();
        qp.modify(
            QpState::Init,
            &QpAttrs {
                pkey_index: Some(0),
                port: Some(1),
                qkey: Some(0x1111_1111),
                ..Default::default()
            },
        )
        .unwrap();
        qp.modify(QpState::Rtr, &QpAttrs::default()).unwrap();
        qp.modify(
            QpState::Rts,
            &QpAttrs {
                sq_psn: Some(Psn::new(5)),
                ..Default::default()
            },
        )
        .unwrap();
        (s, qp)
    };
    let (a, qa) = mk("ud-a", lo(5, 2));
    let (b, qb) = mk("ud-b", lo(5, 3));
    let to = |s: &Side, qpn| UdTarget {
        ah: Ah {
            av: AddressVector {
                dgid: s.ctx.gid(),
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
            },
        },
        remote_qpn: qpn,
        remote_qkey: 0x1111_1111,
    };
    // Both ways, every size up to the 4096-byte MTU.
    for (i, len) in [0usize, 1, 1000, 4096].into_iter().enumerate() {
        for (src, qs, dst, qd) in [(&a, &qa, &b, &qb), (&b, &qb, &a, &qa)] {
            let data = pattern(len, i as u8 + 1);
            src.mr.write(0, &data).unwrap();
            qd.post_recv(&[RecvWr {
                wr_id: i as u64,
                sg_list: &[dst.mr.sge(0, 40 + len as u32).unwrap()],
            }])
            .unwrap();
            qs.post_send(&[SendWr {
                wr_id: 9,
                sg_list: &[src.mr.sge(0, len as u32).unwrap()],
                opcode: WrOpcode::SendWithImm(i as u32),
                flags: SendFlags::default(),
                ud: Some(to(dst, qd.qpn())),
            }])
            .unwrap();
            assert!(wait(&src.cq, 1)[0].is_ok());
            let wc = wait(&dst.cq, 1)[0];
            assert_eq!(
                (wc.status, wc.byte_len, wc.src_qp, wc.imm_data),
                (
                    WcStatus::Success,
                    40 + len as u32,
                    qs.qpn().get(),
                    Some(i as u32)
                )
            );
            let mut got = vec![0u8; 40 + len];
            dst.mr.read(0, &mut got).unwrap();
            assert_eq!(&got[40..], &data[..]);
            // The GRH area ends with the IPv4 header as rebuilt from the
            // datagram: the sender's address, the receiver's.
            assert_eq!(&got[20 + 12..20 + 16], &src.nic.ipv4());
            assert_eq!(&got[20 + 16..20 + 20], &dst.nic.ipv4());
        }
    }
    let (ca, cb) = (sync(&a), sync(&b));
    assert_eq!((ca.rx_icrc_errors, cb.rx_icrc_errors), (0, 0));
    assert_eq!((ca.rx_packets, cb.rx_packets), (4, 4));
}

/// A frame corrupted on the way is dropped by the receiver's ICRC check
/// and counted there; RC recovers it by the ACK timeout.
#[test]
fn a_corrupted_datagram_is_dropped_by_icrc_and_resent() {
    let t = Timers::default();
    let p = udp_pair(
        [lo(6, 2), lo(6, 3)],
        [
            NicOptions {
                shm: false,
                udp_gso: false,
                ..corrupting_first_send()
            },
            udp_only(),
        ],
        caps(8),
        1 << 16,
        t,
    );
    let (a, b) = send_through_a_corruption(&p);
    assert_eq!(b.rx_packets, 1, "only the good copy was taken");
    assert_eq!(a.local_ack_timeout_err, 1);
    assert_eq!(p.a.nic.fault_stats().unwrap().corrupted, 1);
}

/// Captures the datagrams on the loopback interface and checks that each
/// one's ICRC verifies over the IPv4 and UDP headers the kernel actually
/// sent (identification 0, DF set): what a peer that is not doorbell, such
/// as rxe, will check. Like the capture tests, it fails (and says what to
/// do) where dumpcap is missing or may not capture: it never passes silently.
#[test]
fn the_kernel_sends_the_header_each_icrc_covers() {
    let dir = std::env::temp_dir().join(format!("doorbell-cap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lo.pcap");
    let child = std::process::Command::new("dumpcap")
        .args(["-q", "-i", "lo", "-P", "-f"])
        .arg(format!(
            "udp port 4791 and net {}.{}.7.0/24",
            lo(7, 0)[0],
            lo(7, 0)[1]
        ))
        .arg("-w")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = child.unwrap_or_else(|e| {
        panic!("cannot run dumpcap ({e}): run scripts/setup.sh (as root), which installs tshark")
    });
    // dumpcap says "Capturing on" once it is ready.
    std::thread::sleep(Duration::from_millis(1500));
    if let Ok(Some(st)) = child.try_wait() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        panic!(
            "dumpcap cannot capture on lo ({st}): {err}\n\
             Capturing needs root, or CAP_NET_RAW and CAP_NET_ADMIN on dumpcap"
        );
    }
    let p = udp_pair(
        [lo(7, 2), lo(7, 3)],
        [udp_only(), udp_only()],
        caps(8),
        1 << 16,
        Timers::default(),
    );
    let data = pattern(3000, 5);
    p.a.mr.write(0, &data).unwrap();
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 4096).unwrap()]);
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, 3000).unwrap()], WrOpcode::Send),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let dst = [p.a.mr.sge(8192, 3000).unwrap()];
    let remote = RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    post(&p.a.qp, signaled(2, &dst, WrOpcode::RdmaRead(remote)));
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let (a, b) = settled(&p);
    let sent = a.tx_packets + b.tx_packets;
    std::thread::sleep(Duration::from_millis(500));
    // SIGTERM, so that dumpcap flushes the file.
    let _ = std::process::Command::new("kill")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    let bytes = std::fs::read(&file).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let packets = pcap_packets(&bytes);
    assert_eq!(packets.len() as u64, sent, "every frame was captured once");
    for ip in &packets {
        assert_eq!(&ip[4..6], &[0, 0], "identification 0");
        assert_eq!(ip[6] & 0x40, 0x40, "DF set");
        assert_eq!(ip[8], 64, "TTL 64");
        let r = doorbell_wire::parse_roce(ip).expect("the ICRC verifies on the wire");
        assert_eq!(r.repr.src_port, 4791);
    }
}

/// The IP packets of a classic pcap file of link type Ethernet (Linux's
/// loopback) or raw IP.
fn pcap_packets(b: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if b.len() < 24 {
        return out;
    }
    let le = b[..4] == [0xd4, 0xc3, 0xb2, 0xa1] || b[..4] == [0x4d, 0x3c, 0xb2, 0xa1];
    let u32_at = |i: usize| {
        let w = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let link = u32_at(20);
    let skip = match link {
        1 => 14,
        101 | 228 => 0,
        113 => 16,
        _ => panic!("unexpected link type {link}"),
    };
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32_at(at + 8) as usize;
        let start = at + 16;
        let Some(pkt) = b.get(start..start + caplen) else {
            break;
        };
        if pkt.len() > skip {
            out.push(pkt[skip..].to_vec());
        }
        at = start + caplen;
    }
    out
}

/// A UDP port that starts and stops sends nothing of its own: stopping
/// its receive thread used to wake it with an empty datagram to itself on
/// port 4791, which a capture of the wire shows as a packet that is not
/// RoCEv2. Needs tshark and the right to capture, as the capture tests.
#[test]
fn a_port_that_starts_and_stops_puts_nothing_on_the_wire() {
    use doorbell_cprobe::capture::{Capture, tail};
    let a = lo(34, 2);
    let ip = format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
    let file = std::env::temp_dir().join(format!("doorbell-quiet-{}.pcap", std::process::id()));
    let cap = Capture::start(&file, &format!("udp port 4791 and host {ip}"), 1000);
    for _ in 0..3 {
        let nic = doorbell_rt::LiveNic::start_udp("quiet", a, doorbell_pcie::LinkConfig::default())
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(nic);
    }
    let said = cap.stop_after(Duration::from_millis(500));
    let out = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .args(["-T", "fields", "-e", "frame.number", "-e", "udp.length"])
        .output()
        .expect("tshark runs");
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success(), "tshark: {}", tail(&said));
    let frames = String::from_utf8_lossy(&out.stdout);
    assert!(frames.trim().is_empty(), "the port sent:\n{frames}");
}

/// With UDP segmentation offload (the default), runs of equal datagrams
/// leave as one send each; the kernel cuts them into the same datagrams,
/// which arrive intact and are counted one by one at both ends.
#[test]
fn segmented_sends_arrive_as_the_datagrams_they_carry() {
    let gso = || {
        exact(NicOptions {
            shm: false,
            ..NicOptions::default()
        })
    };
    let t = Timers {
        mtu: 1024,
        ..Timers::default()
    };
    let p = udp_pair([lo(60, 2), lo(60, 3)], [gso(), gso()], caps(8), 4 << 20, t);
    let len = 1 << 20;
    let data = pattern(len, 3);
    p.a.mr.write(0, &data).unwrap();
    let remote = doorbell_verbs::RemoteAddr {
        addr: p.b.mr.addr(),
        rkey: p.b.mr.rkey(),
    };
    let sge = [p.a.mr.sge(0, len as u32).unwrap()];
    post(&p.a.qp, signaled(1, &sge, WrOpcode::RdmaWrite(remote)));
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let back = [p.a.mr.sge(len as u64, len as u32).unwrap()];
    post(&p.a.qp, signaled(2, &back, WrOpcode::RdmaRead(remote)));
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let mut got = vec![0u8; len];
    p.b.mr.read(0, &mut got).unwrap();
    assert!(got == data, "WRITE data differ");
    p.a.mr.read(len as u64, &mut got).unwrap();
    assert!(got == data, "READ data differ");
    let (a, b) = settled(&p);
    assert_eq!((a.rx_icrc_errors, b.rx_icrc_errors), (0, 0));
    assert_eq!((a.tx_retransmits, b.tx_retransmits), (0, 0));
    let (pa, pb) = (p.a.nic.port_counters(), p.b.nic.port_counters());
    // 1 MiB at 1 KiB a packet each way, every one a datagram of its own.
    assert!(pa.tx_datagrams >= 1024 && pb.tx_datagrams >= 1024, "{pa:?}");
    assert_eq!(pa.tx_datagrams, pb.rx_datagrams, "{pa:?} {pb:?}");
    assert_eq!(pb.tx_datagrams, pa.rx_datagrams, "{pa:?} {pb:?}");
    assert_eq!(a.tx_packets, pa.tx_datagrams);
}

/// A coalesced receive whose ICRCs all match goes to the NIC as one train
/// where nothing records each frame, and frame by frame where a timeline
/// does: the receiving NIC takes and counts the same packets either way.
#[test]
fn a_run_taken_as_a_train_is_counted_as_its_frames_taken_one_by_one() {
    const WRITES: u64 = 4;
    let len = 1 << 20;
    let run = |net: u8, trace: bool| {
        let opts = |trace| {
            exact(NicOptions {
                shm: false,
                trace,
                ..NicOptions::default()
            })
        };
        let t = Timers {
            mtu: 1024,
            ..Timers::default()
        };
        let ips = [lo(net, 2), lo(net, 3)];
        let p = udp_pair(ips, [opts(false), opts(trace)], caps(8), 4 << 20, t);
        let data = pattern(len, net);
        p.a.mr.write(0, &data).unwrap();
        let remote = RemoteAddr {
            addr: p.b.mr.addr(),
            rkey: p.b.mr.rkey(),
        };
        let sge = [p.a.mr.sge(0, len as u32).unwrap()];
        for i in 0..WRITES {
            post(&p.a.qp, signaled(i, &sge, WrOpcode::RdmaWrite(remote)));
        }
        assert!(wait(&p.a.cq, WRITES as usize).iter().all(|w| w.is_ok()));
        let mut got = vec![0u8; len];
        p.b.mr.read(0, &mut got).unwrap();
        assert!(got == data, "WRITE data differ");
        let (_, b) = settled(&p);
        (b, p.b.nic.port_counters())
    };
    let (trains, trains_port) = run(61, false);
    let (one_by_one, one_by_one_port) = run(62, true);
    assert!(trains_port.rx_trains > 0, "{trains_port:?}");
    assert_eq!(one_by_one_port.rx_trains, 0, "{one_by_one_port:?}");
    let taken = |c: &doorbell_device::NicCounters| {
        (
            c.rx_packets,
            c.rx_write_requests,
            c.rx_dropped,
            c.out_of_sequence,
            c.duplicate_request,
            c.rx_icrc_errors,
        )
    };
    assert_eq!(taken(&trains), taken(&one_by_one));
    assert_eq!(
        trains.rx_packets,
        WRITES * (len as u64 / 1024),
        "{trains:?}"
    );
    assert_eq!(trains_port.rx_datagrams, one_by_one_port.rx_datagrams);
}

/// Datagrams come faster than the NIC's turns take them (here, no turn
/// runs at all): its receive thread stops taking them from the socket
/// once a bounded backlog of frames waits for the NIC, so that a flood
/// fills the kernel's buffer, which drops and counts, rather than this
/// process's memory. Nothing that fits the socket's buffer is lost: once
/// the turns resume, every datagram is taken.
#[test]
fn a_nic_that_falls_behind_leaves_datagrams_in_the_socket() {
    use doorbell_rt::{LiveNic, NicOptions, Port};
    let ip = lo(75, 2);
    let nic = LiveNic::start_with("behind", ip, Port::Udp, NicOptions::default()).unwrap();
    let to = std::net::SocketAddrV4::new(ip.into(), 4791);
    let from = std::net::UdpSocket::bind((std::net::Ipv4Addr::from(lo(75, 9)), 0)).unwrap();
    // Junk to the NIC: not RoCE (its ICRC is wrong), but a frame to take.
    const SENT: u64 = 6000;
    let received = nic.with_turns_held(|| {
        for i in 0..SENT {
            from.send_to(&i.to_be_bytes().repeat(8), to).unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut last = u64::MAX;
        // Until the receive thread has stopped taking datagrams.
        while std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let now = nic.port_counters().rx_datagrams;
            if now == last {
                break;
            }
            last = now;
        }
        nic.port_counters().rx_datagrams
    });
    assert!(
        (4096..SENT).contains(&received),
        "{received} of {SENT} datagrams taken while no turn ran"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while nic.port_counters().rx_datagrams < SENT && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let c = nic.port_counters();
    assert_eq!((c.rx_datagrams, c.rx_socket_drops), (SENT, 0), "{c:?}");
}
