//! Trains (`NicConfig::max_train`): a QP's packets whose bytes are all in
//! their frames, handed on back to back as one frame. The sender builds
//! the packets it would have built, counting the same; the receiver ends
//! as it would have from the packets one by one.

use doorbell_device::{MAX_TRAIN_BYTES, PacketHeaders, Received};
use doorbell_layout::wqe::InlineSeg;
use doorbell_wire::Ipv4Header;

use super::left_payload::{Outcome, outcome, same_packets, split, timed};
use super::*;

/// An inline RDMA WRITE of `len` bytes of `fill`, in whole WQEBBs (one
/// for 28 bytes at most).
fn inline_write(rig: &Rig, index: u16, len: u32, fill: u8) -> Vec<u8> {
    let ds = (32 + field::INLINE_HDR_LEN as u32 + len).div_ceil(16) as u8;
    let mut w = vec![0u8; usize::from(ds).div_ceil(4) * WQEBB_LEN];
    ctrl(&mut w, index, WqeOpcode::RdmaWrite, rig.qpn.get(), ds);
    let mut r = RaddrSeg::new_unchecked(&mut w[16..32]);
    r.set_raddr(0x7000_0000 + u64::from(index) * 64);
    r.set_rkey(0x4242);
    InlineSeg::new_unchecked(&mut w[32..]).set_byte_count(len);
    let data = 32 + field::INLINE_HDR_LEN;
    w[data..data + len as usize].fill(fill);
    w
}

/// Posts seven WRITEs: inline ones of 8, 8 and 12 bytes, 100 bytes of the
/// MR by pointer, and inline ones of 8, 20 and 8 bytes; rings once, and
/// returns the frames and the rig.
fn seven_writes(cfg: NicConfig) -> (Vec<Frame>, Rig) {
    let mut rig = Rig::with_config(cfg);
    let data: Vec<u8> = (0..MR_LEN).map(|i| (i % 249) as u8).collect();
    rig.mem.write(rig.mr_buf, &data).unwrap();
    for (index, len) in [(0u16, 8u32), (1, 8), (2, 12), (4, 8), (5, 20), (6, 8)] {
        let w = inline_write(&rig, index, len, index as u8 + 1);
        rig.write_sq(index, &w);
    }
    rig.write_sq(3, &rdma_wqe(&rig, 3, WqeOpcode::RdmaWrite, 100));
    rig.ring(6, u8::from(WqeOpcode::RdmaWrite), 3);
    let frames = rig.transmitted();
    (frames, rig)
}

/// How the third WQE of [`gone_then_bad`] is bad.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// It names another QP: refused before it is parsed.
    OtherQp,
    /// Its control segment gives another WQE index.
    WrongIndex,
    /// Its control segment gives it no size.
    NoSize,
    /// A WRITE from the destroyed MR: refused once parsed and taken off
    /// the ring, as its message is checked.
    GoneMr,
    /// Its size runs past the producer index: refused and left on the
    /// ring, where no flush can tell where it ends.
    PastProducer,
}

/// A WRITE of three packets by pointer, sent one packet a burst: its
/// first packet leaves, and its MR is destroyed. Then an inline WRITE, a
/// `bad` WQE and another inline WRITE, rung together: the first WRITE's
/// next packet cannot be read. Returns the completions and the rig.
fn gone_then_bad(mut cfg: NicConfig, bad: Bad) -> (Vec<[u8; CQE_LEN]>, Rig) {
    cfg.tx_burst = Some(1);
    let mut rig = Rig::with_config_and_mtu(cfg, 256);
    rig.write_sq(0, &rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 600));
    rig.ring(0, u8::from(WqeOpcode::RdmaWrite), 3);
    assert_eq!(rig.transmitted().len(), 1, "one packet a burst");
    let mr = rig.mr;
    rig.exec(Command::DestroyMkey(mr)).unwrap();
    let w = inline_write(&rig, 1, 8, 2);
    rig.write_sq(1, &w);
    let qpn = rig.qpn.get();
    let mut w = inline_write(&rig, 2, 8, 3);
    match bad {
        Bad::OtherQp => ctrl(&mut w, 2, WqeOpcode::RdmaWrite, qpn ^ 0x55, 3),
        Bad::WrongIndex => ctrl(&mut w, 7, WqeOpcode::RdmaWrite, qpn, 3),
        Bad::NoSize => ctrl(&mut w, 2, WqeOpcode::RdmaWrite, qpn, 0),
        Bad::GoneMr => w = rdma_wqe(&rig, 2, WqeOpcode::RdmaWrite, 8).to_vec(),
        // Eight data segments: three WQEBBs, of which two are posted.
        Bad::PastProducer => {
            w = rdma_wqe(&rig, 2, WqeOpcode::RdmaWrite, 8).to_vec();
            ctrl(&mut w, 2, WqeOpcode::RdmaWrite, qpn, 10);
        }
    }
    rig.write_sq(2, &w);
    let w = inline_write(&rig, 3, 8, 4);
    rig.write_sq(3, &w);
    rig.ring(3, u8::from(WqeOpcode::RdmaWrite), 3);
    let cqes = rig.cqes();
    (cqes, rig)
}

/// A NIC that hands on up to `max` packets as a train, leaving payloads in
/// memory if `leave`.
fn training(max: u32, leave: bool) -> NicConfig {
    let mut cfg = NicConfig::new(LOCAL);
    cfg.max_train = max;
    cfg.leave_payload = leave;
    cfg
}

#[test]
fn a_train_split_into_its_packets_is_the_frames_sent_one_by_one() {
    let (whole, whole_rig) = seven_writes(NicConfig::new(LOCAL));
    assert_eq!(whole.len(), 7);
    assert!(whole.iter().all(|f| f.packets() == 1));
    // A WRITE whose payload is left in memory goes on its own, and ends
    // the train before it.
    let cases: [(u32, bool, &[u32]); 4] = [
        (1, false, &[1, 1, 1, 1, 1, 1, 1]),
        (2, false, &[2, 2, 2, 1]),
        (32, false, &[7]),
        (32, true, &[3, 1, 3]),
    ];
    for (max, leave, expect) in cases {
        let (trains, rig) = seven_writes(training(max, leave));
        assert!(trains.iter().all(|f| f.bytes.len() <= MAX_TRAIN_BYTES));
        if leave {
            assert_eq!(trains[1].unfilled.map(|u| u.segments), Some(1));
        }
        // A NIC that makes trains hands over the headers of each packet
        // whose bytes are all in its frame, parsed; the rest are written.
        for f in &trains {
            let parsed = max > 1 && f.unfilled.is_none();
            let want = if parsed { f.packets() as usize } else { 0 };
            assert_eq!(f.headers.len(), want, "max {max}, leave {leave}");
        }
        same_packets(&trains, &rig, expect, max, &whole, &whole_rig);
    }
}

#[test]
fn a_train_is_ready_when_its_last_packet_would_have_been() {
    // A NIC that spends time on each packet: a packet built where the
    // train goes is charged, and makes the train ready, as one built
    // alone and joined would. Also where each WQE takes time to parse: a
    // NIC that makes trains then sends each message as it executes it,
    // so that a doorbell's first train is not held for its last WQE.
    for wqe_ns in [0, 25] {
        let timed = || {
            let mut cfg = timed();
            cfg.timing.wqe = doorbell_types::Duration::from_ns(wqe_ns);
            cfg
        };
        let (whole, whole_rig) = seven_writes(timed());
        assert!(whole_rig.nic.pu_busy() > doorbell_types::Duration::ZERO);
        let cases: [(u32, &[u32]); 2] = [(2, &[2, 2, 2, 1]), (32, &[7])];
        for (max, expect) in cases {
            let mut cfg = timed();
            cfg.max_train = max;
            let (trains, rig) = seven_writes(cfg);
            let sizes: Vec<u32> = trains.iter().map(Frame::packets).collect();
            assert_eq!(sizes, expect, "max {max}");
            let mut sent = 0;
            for t in &trains {
                sent += t.packets() as usize;
                assert_eq!(
                    t.ready,
                    whole[sent - 1].ready,
                    "WQE {wqe_ns} ns, max {max}, {sent} packets"
                );
            }
            assert_eq!(rig.nic.pu_busy(), whole_rig.nic.pu_busy(), "max {max}");
        }
    }
}

/// Two inline WRITEs of 8 bytes, then a WQE naming another QP, rung
/// together; returns the frames, the completions and the rig.
fn good_then_bad(cfg: NicConfig) -> (Vec<Frame>, Vec<[u8; CQE_LEN]>, Rig) {
    let mut rig = Rig::with_config(cfg);
    for index in 0..2 {
        let w = inline_write(&rig, index, 8, index as u8 + 1);
        rig.write_sq(index, &w);
    }
    let mut bad = inline_write(&rig, 2, 8, 3);
    ctrl(&mut bad, 2, WqeOpcode::RdmaWrite, rig.qpn.get() ^ 0x55, 3);
    rig.write_sq(2, &bad);
    rig.ring(2, u8::from(WqeOpcode::RdmaWrite), 3);
    let frames = rig.transmitted();
    let cqes = rig.cqes();
    (frames, cqes, rig)
}

#[test]
fn a_send_that_fails_before_a_bad_wqe_completes_both_in_order() {
    // A NIC that sends each message as it executes it (here, one whose
    // WQEs take time to parse) meets the first WRITE's fault when it sends
    // after the inline WRITE, and leaves the bad WQE on the ring, to be
    // flushed. One that sends once the doorbell's WQEs are executed may
    // have taken the bad WQE off the ring by then, and must still complete
    // it, flushed, in its turn; one it left on the ring is flushed from
    // there. Either way every WQE the ring delimits completes once, in
    // order, and the two NICs complete the same.
    let sends_as_executed = || {
        let mut cfg = NicConfig::new(LOCAL);
        cfg.timing.wqe = doorbell_types::Duration::from_ns(1);
        cfg
    };
    let cases = [
        (Bad::OtherQp, 4),
        (Bad::WrongIndex, 4),
        (Bad::NoSize, 4),
        (Bad::GoneMr, 4),
        (Bad::PastProducer, 2),
    ];
    for (bad, completions) in cases {
        let (whole_cqes, whole_rig) = gone_then_bad(sends_as_executed(), bad);
        let qpn = whole_rig.qpn.get();
        let fields: Vec<_> = whole_cqes.iter().map(cqe_fields).collect();
        assert_eq!(fields.len(), completions, "{bad:?}: {fields:?}");
        assert_eq!(
            (fields[0].0, fields[0].2),
            (CqeOpcode::ReqErr, 0),
            "{bad:?}"
        );
        assert_ne!(
            fields[0].1,
            Syndrome::WrFlushErr,
            "{bad:?}: the WRITE's own error"
        );
        for (i, f) in fields.iter().enumerate().skip(1) {
            assert_eq!(
                *f,
                (CqeOpcode::ReqErr, Syndrome::WrFlushErr, i as u16, 0x08, qpn),
                "{bad:?}"
            );
        }
        assert_eq!(whole_rig.state(), QpState::Err, "{bad:?}");
        for cfg in [training(32, false), NicConfig::new(LOCAL)] {
            let (cqes, rig) = gone_then_bad(cfg, bad);
            let got: Vec<_> = cqes.iter().map(cqe_fields).collect();
            assert_eq!(got, fields, "{bad:?}");
            assert_eq!(rig.state(), QpState::Err, "{bad:?}");
        }
    }
}

#[test]
fn a_bad_wqe_lets_the_messages_before_it_go_first() {
    // A NIC that makes trains sends a doorbell's messages once it has
    // executed them all; one of them found malformed must not keep those
    // before it from leaving, as they leave a NIC that sends each message
    // as it executes it. Their completions are the same.
    let (whole, whole_cqes, whole_rig) = good_then_bad(NicConfig::new(LOCAL));
    assert_eq!(whole.len(), 2);
    assert_eq!(whole_rig.state(), QpState::Err);
    let (trains, cqes, rig) = good_then_bad(training(32, false));
    same_packets(&trains, &rig, &[2], 32, &whole, &whole_rig);
    assert_eq!(cqes, whole_cqes);
    assert_eq!(rig.state(), QpState::Err);
}

/// Three inline WRITEs at a path MTU of 256 bytes: 8 bytes, 300 (two
/// packets, FIRST and LAST) and 8; rings once.
fn inline_across_mtu(cfg: NicConfig) -> (Vec<Frame>, Rig) {
    let mut rig = Rig::with_config_and_mtu(cfg, 256);
    let mut index = 0u16;
    for (len, fill) in [(8u32, 1u8), (300, 2), (8, 3)] {
        let w = inline_write(&rig, index, len, fill);
        rig.write_sq(index, &w);
        index += (w.len() / WQEBB_LEN) as u16;
    }
    rig.ring(index - 1, u8::from(WqeOpcode::RdmaWrite), 3);
    let frames = rig.transmitted();
    (frames, rig)
}

#[test]
fn inline_data_of_two_packets_is_sent_as_two_packets_would_be() {
    // Only a message of one packet of inline data goes straight onto its
    // train; one of two is read into its frames from its start.
    let (whole, whole_rig) = inline_across_mtu(NicConfig::new(LOCAL));
    assert_eq!(whole.len(), 4, "8 bytes, 256 and 44, 8");
    let (trains, rig) = inline_across_mtu(training(32, false));
    same_packets(&trains, &rig, &[4], 32, &whole, &whole_rig);
}

#[test]
fn a_train_holds_no_more_bytes_than_its_limit() {
    // Seven WRITEs of 1 000 bytes by pointer, their payloads read into
    // their frames: four make more than a train may hold.
    let mut rig = Rig::with_config(training(32, false));
    for index in 0..7 {
        rig.write_sq(index, &rdma_wqe(&rig, index, WqeOpcode::RdmaWrite, 1000));
    }
    rig.ring(6, u8::from(WqeOpcode::RdmaWrite), 3);
    let trains = rig.transmitted();
    let sizes: Vec<u32> = trains.iter().map(Frame::packets).collect();
    assert_eq!(sizes, [3, 3, 1]);
    assert!(trains.iter().all(|f| f.bytes.len() <= MAX_TRAIN_BYTES));
    assert_eq!(split(&trains, &rig.mem).len(), 7);
}

/// A rig whose NIC takes time per packet on two processing units: a
/// train's packets must occupy them as the packets alone would.
fn timed_rig() -> Rig {
    Rig::with_config(timed())
}

/// The packets a peer sends the rig: WRITE ONLYs of 8 bytes, one of 12
/// (its IP and UDP headers then differ from the one before), a SEND ONLY,
/// one to a QP the rig does not have, a frame cut short and one whose BTH
/// opcode is unknown (both dropped), and a last WRITE asking for an ACK.
fn mixed(rig: &Rig) -> Vec<Vec<u8>> {
    let mut psn = EPSN;
    let mut next = || {
        psn += 1;
        psn - 1
    };
    let mut v = vec![
        rig.write_only(next(), 0, &[1; 8]),
        rig.write_only(next(), 8, &[2; 8]),
        rig.write_only(next(), 16, &[3; 12]),
        rig.write_only(next(), 32, &[4; 8]),
    ];
    v.push(rig.request(
        BthOpcode::RcSendOnly,
        next(),
        ExtHeaders::default(),
        &[5; 24],
    ));
    let mut elsewhere = BthRepr::new(BthOpcode::RcRdmaWriteOnly, Qpn::new(0x7777), Psn::new(1));
    elsewhere.ack_req = false;
    v.push(rig.request_bth(elsewhere, rig.mr_reth(0, 8), &[6; 8]));
    // A WRITE ONLY whose IP length says four bytes fewer than it has:
    // it ends early, and the next packet starts inside it.
    let mut short = rig.write_only(next(), 48, &[7; 8]);
    let n = short.len() - 4;
    short[2..4].copy_from_slice(&(n as u16).to_be_bytes());
    Ipv4Header::new_unchecked(&mut short[..]).fill_checksum();
    short.truncate(n);
    v.push(short);
    let mut unknown = rig.write_only(next(), 56, &[8; 8]);
    unknown[28] = 0xff;
    v.push(unknown);
    v.push(rig.write_only(next() - 2, 64, &[9; 8]));
    v
}

#[test]
fn a_receiver_takes_a_train_as_it_takes_its_packets() {
    let mut alone = timed_rig();
    alone.post_recv(alone.mr.raw(), alone.mr_buf.get() + 4096, 64);
    let pkts = mixed(&alone);
    let mut answers = Vec::new();
    for p in &pkts {
        let now = alone.now;
        answers.push(alone.nic.handle_emitted_frame(now, p, &mut alone.bus));
    }
    let dropped: Vec<usize> = (0..answers.len())
        .filter(|&i| answers[i] != Received::Taken)
        .collect();
    assert_eq!(dropped, [5, 6, 7], "{answers:?}");

    let mut train = timed_rig();
    train.post_recv(train.mr.raw(), train.mr_buf.get() + 4096, 64);
    let bytes = pkts.concat();
    let now = train.now;
    let got = train
        .nic
        .handle_emitted_train(now, &bytes, pkts.len() as u32, &mut train.bus);
    assert_eq!(got, answers[7], "the last drop's reason");
    as_taken_alone(outcome(train), outcome(alone), 3);
}

/// Checks that a receiver that took packets of [`mixed`] together ended
/// as `alone`, which took them one by one: the WRITEs and the SEND
/// landed, and `dropped` packets were dropped.
fn as_taken_alone(together: Outcome, alone: Outcome, dropped: u64) {
    assert_eq!(&together.2[..8], &[1; 8], "the first WRITE landed");
    assert_eq!(&together.2[64..72], &[9; 8], "the last WRITE landed");
    assert_eq!(&together.2[4096..4120], &[5; 24], "the SEND landed");
    assert_eq!(together.3.rx_dropped, dropped);
    assert!(together == alone, "as the packets one by one");
}

/// `pkts` back to back, each with its headers handed over parsed and its
/// header bytes overwritten (the receiver must not read them): the bytes
/// and the headers of a frame ([`Frame::headers`]).
fn handed_over(pkts: &[Vec<u8>]) -> (Vec<u8>, Vec<PacketHeaders>) {
    let (mut bytes, mut headers) = (Vec::new(), Vec::new());
    for p in pkts {
        let parsed = doorbell_wire::parse_roce(p).expect("a packet");
        let at = bytes.len();
        let mut blank = p.clone();
        blank[..parsed.payload.start].fill(0xee);
        bytes.extend_from_slice(&blank);
        headers.push(PacketHeaders {
            repr: parsed.repr,
            packet: at..at + p.len(),
            payload: at + parsed.payload.start..at + parsed.payload.end,
        });
    }
    (bytes, headers)
}

#[test]
fn a_receiver_takes_headers_handed_over_as_it_takes_their_packets() {
    let mut alone = timed_rig();
    alone.post_recv(alone.mr.raw(), alone.mr_buf.get() + 4096, 64);
    // The packets of `mixed` that parse: one to a QP the rig lacks.
    let pkts: Vec<Vec<u8>> = mixed(&alone)
        .into_iter()
        .filter(|p| doorbell_wire::parse_roce(p).is_ok())
        .collect();
    assert_eq!(pkts.len(), 7);
    let mut answers = Vec::new();
    for p in &pkts {
        let now = alone.now;
        answers.push(alone.nic.handle_emitted_frame(now, p, &mut alone.bus));
    }
    assert_eq!(answers[5], Received::Dropped("no such QP"));

    let mut parsed = timed_rig();
    parsed.post_recv(parsed.mr.raw(), parsed.mr_buf.get() + 4096, 64);
    let (bytes, headers) = handed_over(&pkts);
    let now = parsed.now;
    let got = parsed
        .nic
        .handle_parsed_frame(now, &bytes, &headers, &mut parsed.bus);
    assert_eq!(got, answers[5], "the last drop's reason");
    as_taken_alone(outcome(parsed), outcome(alone), 1);
}

/// Builds packets for a rig to take.
type Make = dyn Fn(&mut Rig) -> Vec<Vec<u8>>;

/// What a rig ends with, and every crossing and processing unit's work
/// on the way.
type Taken = (Outcome, Vec<doorbell_pcie::Crossing>, String);

/// A change to the last entry of a frame's list, given the frame's length.
type Forge = fn(&mut PacketHeaders, usize);

/// What a rig that takes the packets `make` builds for it ends with:
/// handed over parsed as one frame if `together`, else one by one,
/// written.
fn took(make: &Make, together: bool) -> Taken {
    if together {
        took_handed(make, |_, _| {}).1
    } else {
        let (mut rig, pkts) = taking(make);
        let now = rig.now;
        for p in &pkts {
            rig.nic.handle_emitted_frame(now, p, &mut rig.bus);
        }
        taken(rig)
    }
}

/// [`took`] handed over as one frame, its last entry changed by `forge`;
/// with what the NIC answered.
fn took_handed(make: &Make, forge: Forge) -> (Received, Taken) {
    let (mut rig, pkts) = taking(make);
    let (bytes, mut headers) = handed_over(&pkts);
    if let Some(last) = headers.last_mut() {
        forge(last, bytes.len());
    }
    let now = rig.now;
    let got = rig
        .nic
        .handle_parsed_frame(now, &bytes, &headers, &mut rig.bus);
    (got, taken(rig))
}

/// A timed rig with a receive posted, its bus and units recording, and
/// the packets `make` builds for it.
fn taking(make: &Make) -> (Rig, Vec<Vec<u8>>) {
    let mut rig = timed_rig();
    rig.post_recv(rig.mr.raw(), rig.mr_buf.get() + 6000, 2048);
    let pkts = make(&mut rig);
    rig.bus.set_recording(true);
    rig.nic.record_pu_work(true);
    (rig, pkts)
}

/// What `rig` ended with ([`Taken`]).
fn taken(mut rig: Rig) -> Taken {
    let log = rig.bus.take_log();
    let work = format!(
        "{:?} {:?}",
        rig.nic.take_pu_work(),
        rig.nic.qp_state(rig.qpn)
    );
    (outcome(rig), log, work)
}

/// An RDMA WRITE ONLY of `len` bytes of `k + 1` to byte `offset` of the
/// rig's MR, at the `k`-th PSN the QP expects, asking for an ACK if `ack`.
fn wo(rig: &Rig, k: u32, offset: u64, len: usize, ack: bool) -> Vec<u8> {
    let mut bth = BthRepr::new(BthOpcode::RcRdmaWriteOnly, rig.qpn, Psn::new(EPSN + k));
    bth.ack_req = ack;
    rig.request_bth(
        bth,
        rig.mr_reth(offset, len as u32),
        &vec![k as u8 + 1; len],
    )
}

/// A request of opcode `op` and headers `ext` with 8 bytes of `k + 1`,
/// at the `k`-th PSN the QP expects.
fn with_key(rig: &Rig, k: u32, ext: ExtHeaders, op: BthOpcode) -> Vec<u8> {
    rig.request(op, EPSN + k, ext, &[k as u8 + 1; 8])
}

/// The same packets taken as one frame, their headers handed over, and
/// one by one: `cases` names each list.
fn together_as_alone(cases: &[(&str, &Make)]) {
    for &(what, make) in cases {
        let together = took(make, true);
        let alone = took(make, false);
        assert!(together == alone, "{what}: as the packets one by one");
    }
}

#[test]
fn write_onlys_taken_together_end_as_taken_one_by_one() {
    together_as_alone(&[
        (
            "in order, some asking for no ACK, up to a whole MTU, both pages",
            &|r| {
                vec![
                    wo(r, 0, 0, 8, true),
                    wo(r, 1, 8, 1, false),
                    wo(r, 2, 16, 64, false),
                    wo(r, 3, 4096, 1024, true),
                    wo(r, 4, 5200, 8, true),
                ]
            },
        ),
        ("one across a page, in the middle", &|r| {
            vec![
                wo(r, 0, 0, 8, true),
                wo(r, 1, 4090, 8, true),
                wo(r, 2, 16, 8, true),
            ]
        }),
        ("a gap, then those after it", &|r| {
            vec![
                wo(r, 0, 0, 8, true),
                wo(r, 2, 8, 8, true),
                wo(r, 3, 16, 8, true),
            ]
        }),
        ("a duplicate first", &|r| {
            vec![
                r.write_only(EPSN - 1, 0, &[9; 8]),
                wo(r, 0, 8, 8, true),
                wo(r, 1, 16, 8, true),
            ]
        }),
        ("one from another address", &|r| {
            let mut stranger = parse_roce(&wo(r, 2, 40, 8, true)).unwrap().repr;
            stranger.ip = RoceIp::v4([10, 0, 0, 9], LOCAL);
            let mut from_stranger = Vec::new();
            stranger.emit_to_vec(&[3; 8], &mut from_stranger).unwrap();
            vec![
                wo(r, 0, 0, 8, true),
                wo(r, 1, 8, 8, true),
                from_stranger,
                wo(r, 2, 16, 8, true),
            ]
        }),
        ("one refused by its key, then those after it", &|r| {
            let mut bad = r.mr_reth(48, 8);
            bad.reth.as_mut().unwrap().rkey = Mkey::from_raw(0x5151);
            let op = BthOpcode::RcRdmaWriteOnly;
            vec![
                wo(r, 0, 0, 8, true),
                with_key(r, 1, bad, op),
                wo(r, 1, 16, 8, true),
                wo(r, 2, 24, 8, true),
            ]
        }),
        ("a SEND in progress, and a WRITE", &|r| {
            let first = |op, ext| r.request(op, EPSN, ext, &[1; 1024]);
            vec![
                first(BthOpcode::RcSendFirst, ExtHeaders::default()),
                wo(r, 1, 0, 8, true),
                wo(r, 2, 8, 8, true),
            ]
        }),
        ("one to another QP, at the PSN this one expects", &|r| {
            let mut bth = BthRepr::new(
                BthOpcode::RcRdmaWriteOnly,
                Qpn::new(0x7777),
                Psn::new(EPSN + 1),
            );
            bth.ack_req = true;
            let elsewhere = r.request_bth(bth, r.mr_reth(8, 8), &[2; 8]);
            vec![wo(r, 0, 0, 8, true), elsewhere, wo(r, 1, 16, 8, true)]
        }),
        ("a QP that allows no remote writes", &|r| {
            let attrs = QpAttrs {
                access: Some(Access(Access::REMOTE_READ)),
                ..QpAttrs::default()
            };
            r.modify(QpState::Rts, attrs);
            vec![wo(r, 0, 0, 8, true), wo(r, 1, 8, 8, true)]
        }),
        ("a WRITE in progress", &|r| {
            let ext = r.mr_reth(0, 2048);
            vec![
                r.request(BthOpcode::RcRdmaWriteFirst, EPSN, ext, &[1; 1024]),
                wo(r, 1, 4096, 8, true),
                wo(r, 2, 4104, 8, true),
            ]
        }),
        ("one whose length is not its payload's", &|r| {
            let longer = r.mr_reth(56, 16);
            vec![
                wo(r, 0, 0, 8, true),
                with_key(r, 1, longer, BthOpcode::RcRdmaWriteOnly),
            ]
        }),
        (
            "one with an immediate, one of no bytes, one past the MR",
            &|r| {
                let imm = ExtHeaders {
                    immdt: Some(ImmDtRepr { imm: 7 }),
                    ..r.mr_reth(64, 8)
                };
                vec![
                    wo(r, 0, 0, 8, true),
                    with_key(r, 1, imm, BthOpcode::RcRdmaWriteOnlyWithImmediate),
                    wo(r, 2, 72, 0, true),
                    wo(r, 3, 80, 8, true),
                    wo(r, 4, MR_LEN - 4, 8, true),
                ]
            },
        ),
        ("one past the MTU", &|r| {
            vec![
                wo(r, 0, 0, 8, true),
                wo(r, 1, 1024, 1025, true),
                wo(r, 2, 8, 8, true),
            ]
        }),
        ("one across pages that lie apart", &|r| {
            // A second key over the MR's two pages, swapped: its bytes
            // 4090..4098 are two runs of host memory.
            let mtt = vec![r.mr_buf.checked_add(PAGE_SIZE).unwrap(), r.mr_buf];
            let Ok(CmdOut::Mkey(swapped)) = r.exec(Command::CreateMkey(MkeyParams {
                pd: r.pd,
                access: Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE),
                start: 0x5000_0000,
                len: MR_LEN,
                mtt,
            })) else {
                panic!("no mkey")
            };
            let reth = |va: u64| ExtHeaders {
                reth: Some(RethRepr {
                    va,
                    rkey: swapped,
                    dma_len: 8,
                }),
                ..ExtHeaders::default()
            };
            let op = BthOpcode::RcRdmaWriteOnly;
            vec![
                wo(r, 0, 0, 8, true),
                with_key(r, 1, reth(0x5000_0000 + 4090), op),
                with_key(r, 2, reth(0x5000_0000 + 16), op),
            ]
        }),
    ]);
}

#[test]
fn a_forged_entry_ends_a_run_of_write_onlys_as_one_drop() {
    // Three WRITE ONLYs in order; the last one's entry forged. The first
    // two are taken as alone; the last is one drop, as it would be alone,
    // and nothing else differs.
    let expected = {
        let (mut o, log, work) = took(&|r| vec![wo(r, 0, 0, 8, true), wo(r, 1, 8, 8, true)], false);
        o.3.rx_dropped += 1;
        (o, log, work)
    };
    let forge: [(&str, Forge); 4] = [
        ("headers that do not fit the opcode", |h, _| {
            h.repr.ext.immdt = Some(ImmDtRepr { imm: 1 })
        }),
        ("a packet past the frame's bytes", |h, len| {
            h.packet.end = len + 1
        }),
        ("a payload past its packet's end", |h, _| {
            h.packet.end = h.payload.end - 1
        }),
        ("a payload before its packet's start", |h, _| {
            h.packet.start = h.payload.start + 1
        }),
    ];
    let three = |r: &mut Rig| {
        (0..3)
            .map(|k| wo(r, k, 8 * u64::from(k), 8, true))
            .collect()
    };
    for (what, forge) in forge {
        let (got, taken) = took_handed(&three, forge);
        assert_eq!(
            got,
            Received::Dropped("not a RoCEv2 packet this NIC can parse"),
            "{what}"
        );
        assert!(
            taken == expected,
            "{what}: the first two taken, the last one drop"
        );
    }
}

#[test]
fn an_ack_is_handed_over_parsed_as_the_ack_it_would_have_written() {
    let ack = |cfg: NicConfig| {
        let mut rig = Rig::with_config(cfg);
        let p = rig.write_only(EPSN, 0, &[1; 8]);
        let now = rig.now;
        assert_eq!(
            rig.nic.handle_emitted_frame(now, &p, &mut rig.bus),
            Received::Taken
        );
        let mut sent = rig.transmitted();
        assert_eq!(sent.len(), 1, "one ACK");
        sent.remove(0)
    };
    let written = ack(NicConfig::new(LOCAL));
    assert!(written.headers.is_empty());
    let mut handed = ack(training(32, false));
    assert_eq!(handed.headers.len(), 1);
    let parsed = doorbell_wire::parse_roce(&written.bytes).unwrap();
    assert_eq!(handed.headers[0].repr, parsed.repr);
    assert_eq!(handed.headers[0].packet, 0..written.bytes.len());
    handed.write_headers();
    assert_eq!(handed.bytes, written.bytes);
}

#[test]
fn only_a_nic_that_hands_headers_over_keeps_lists_of_them() {
    let list = || Vec::<PacketHeaders>::with_capacity(4);
    let mut plain = Rig::new();
    assert_eq!(plain.nic.header_list_room(), 0);
    plain.nic.recycle_headers(list());
    assert_eq!(plain.nic.header_list_room(), 0);
    let mut training = Rig::with_config(training(32, false));
    let room = training.nic.header_list_room();
    assert!(room > 0);
    training.nic.recycle_headers(list());
    assert_eq!(training.nic.header_list_room(), room - 1);
    // A list with no room for headers is not worth keeping.
    training.nic.recycle_headers(Vec::new());
    assert_eq!(training.nic.header_list_room(), room - 1);
}

#[test]
fn headers_that_do_not_fit_their_packet_are_one_drop_each() {
    let mut rig = timed_rig();
    let pkts = [
        rig.write_only(EPSN, 0, &[1; 8]),
        rig.write_only(EPSN + 1, 8, &[2; 8]),
        // The next the QP expects: the two before are dropped.
        rig.write_only(EPSN, 16, &[3; 8]),
    ];
    let (bytes, mut headers) = handed_over(&pkts);
    // The first without the RETH its opcode calls for; the second said to
    // run past the bytes.
    headers[0].repr.ext.reth = None;
    headers[1].packet.end = bytes.len() + 1;
    let now = rig.now;
    let got = rig
        .nic
        .handle_parsed_frame(now, &bytes, &headers, &mut rig.bus);
    assert_eq!(
        got,
        Received::Dropped("not a RoCEv2 packet this NIC can parse")
    );
    assert_eq!(rig.counters().rx_dropped, 2);
    assert_eq!(rig.counters().rx_packets, 1);
    assert_eq!(rig.mr_bytes(0, 24), [vec![0; 16], vec![3; 8]].concat());
}

#[test]
fn a_ud_packets_headers_handed_over_are_written_for_its_receive() {
    // A UD receive gives the IP header its packet came with (the GRH):
    // headers handed over parsed are written out first.
    let pkt = |rig: &Rig| {
        let ext = ExtHeaders {
            deth: Some(doorbell_wire::DethRepr {
                qkey: QKEY,
                src_qp: Qpn::new(0x99),
            }),
            ..ExtHeaders::default()
        };
        let bth = BthRepr::new(BthOpcode::UdSendOnly, rig.qpn, Psn::new(0));
        rig.request_bth(bth, ext, &[7; 16])
    };
    let mut alone = Rig::ud();
    alone.post_recv(alone.mr.raw(), alone.mr_buf.get(), 256);
    let p = pkt(&alone);
    let now = alone.now;
    assert_eq!(
        alone.nic.handle_emitted_frame(now, &p, &mut alone.bus),
        Received::Taken
    );
    let mut parsed = Rig::ud();
    parsed.post_recv(parsed.mr.raw(), parsed.mr_buf.get(), 256);
    let (bytes, headers) = handed_over(&[p]);
    let now = parsed.now;
    assert_eq!(
        parsed
            .nic
            .handle_parsed_frame(now, &bytes, &headers, &mut parsed.bus),
        Received::Taken
    );
    let (alone, parsed) = (outcome(alone), outcome(parsed));
    assert_eq!(&parsed.2[40..56], &[7; 16], "the payload after the GRH");
    assert!(parsed == alone, "as the packet written");
}

#[test]
fn bytes_that_end_a_train_early_are_one_drop() {
    let mut rig = timed_rig();
    let mut bytes = rig.write_only(EPSN, 0, &[1; 8]);
    bytes.extend_from_slice(&[0x45, 0, 0]);
    let now = rig.now;
    // Said to hold three packets: one, then bytes that hold none.
    let got = rig.nic.handle_emitted_train(now, &bytes, 3, &mut rig.bus);
    assert_eq!(
        got,
        Received::Dropped("a train whose bytes hold no whole packet")
    );
    assert_eq!(rig.counters().rx_packets, 1);
    assert_eq!(rig.counters().rx_dropped, 1);
    assert_eq!(rig.mr_bytes(0, 8), [1; 8]);
}

proptest! {
    /// Any bytes said to be a train of any length: the device takes,
    /// answers or drops each packet it finds, and never panics.
    #[test]
    fn forged_trains_never_panic(
        frames in proptest::collection::vec(arb_frame(), 0..6),
        junk in proptest::collection::vec(any::<u8>(), 0..40),
        packets: u32,
    ) {
        let mut rig = Rig::new();
        let mut bytes = Vec::new();
        for (op, psn, ack_req, ext, payload) in frames {
            bytes.extend_from_slice(&forged_to_rig(&rig, (op, psn, ack_req, ext, &payload)).1);
        }
        bytes.extend_from_slice(&junk);
        let now = rig.now;
        let _ = rig.nic.handle_emitted_train(now, &bytes, packets % 12, &mut rig.bus);
        let _ = rig.transmitted();
        let _ = rig.cqes();
        prop_assert!(rig.exec(Command::QueryQp(rig.qpn)).is_ok());
    }

    /// Any headers handed over with any bytes, said to lie anywhere: the
    /// device takes, answers or drops each packet, and never panics.
    #[test]
    fn forged_headers_never_panic(
        frames in proptest::collection::vec((arb_frame(), 0usize..300, 0usize..300, 0usize..80), 0..6),
        len in 0usize..300,
    ) {
        let mut rig = Rig::new();
        let mut headers = Vec::new();
        for (f, start, end, payload_len) in frames {
            let (op, psn, ack_req, ext, payload) = f;
            let (repr, _) = forged_to_rig(&rig, (op, psn, ack_req, ext, &payload));
            let payload_at = start.saturating_add(start % 64);
            headers.push(PacketHeaders {
                repr,
                packet: start..end,
                payload: payload_at..payload_at + payload_len,
            });
        }
        let bytes = vec![0x5a; len];
        let now = rig.now;
        let _ = rig.nic.handle_parsed_frame(now, &bytes, &headers, &mut rig.bus);
        // Whatever the list says, a frame's packet ranges can be sliced,
        // and its headers written.
        let mut frame = Frame {
            dst: [10, 0, 0, 2],
            bytes,
            ready: rig.now,
            unfilled: None,
            train: headers.len() as u32,
            segment: 0,
            headers,
        };
        for r in frame.packet_ranges() {
            prop_assert!(frame.bytes.get(r).is_some());
        }
        frame.write_headers();
        prop_assert!(frame.headers.is_empty());
        let _ = rig.transmitted();
        let _ = rig.cqes();
        prop_assert!(rig.exec(Command::QueryQp(rig.qpn)).is_ok());
    }
}
