//! A WRITE's, SEND's or READ response's payload left in the sender's host
//! memory
//! (`NicConfig::leave_payload`): the sender builds the frames it would
//! have built, less their payload, and counts the same reads; the receiver
//! copies the payload from the sender's memory and ends as it would have
//! from the frame.

use doorbell_device::{Received, RunLast, Unfilled};
use doorbell_wire::seal_roce;

use super::*;

/// Where `frame` carries its payload, said to be left at `from`.
fn left_at(frame: &[u8], from: HostAddr) -> Unfilled {
    let p = parse_roce(frame).unwrap().payload;
    Unfilled {
        from,
        at: p.start as u32,
        len: p.len() as u32,
        segments: 1,
        last: None,
    }
}

/// The rig takes `frame` as another NIC of this process hands it over:
/// its payload left in `src` where `left` says, or carried.
fn take(rig: &mut Rig, frame: &[u8], left: Option<(&Unfilled, &HostRam)>) -> Received {
    let now = rig.now;
    match left {
        Some((u, src)) => rig
            .nic
            .handle_unfilled_frame(now, frame, u, src, &mut rig.bus),
        None => rig.nic.handle_emitted_frame(now, frame, &mut rig.bus),
    }
}

/// Posts the same two WRITEs as the burst test (8 KiB and 5 000 bytes, 13
/// packets), a 300-byte SEND from one buffer and a 300-byte SEND gathered
/// from two, rings once, and returns the frames and the rig.
fn writes_and_sends(cfg: NicConfig) -> (Vec<Frame>, Rig) {
    let mut rig = Rig::with_config(cfg);
    let data: Vec<u8> = (0..MR_LEN).map(|i| (i % 251) as u8).collect();
    rig.mem.write(rig.mr_buf, &data).unwrap();
    let first = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, MR_LEN as u32);
    let second = rdma_wqe(&rig, 1, WqeOpcode::RdmaWrite, 5000);
    // (index, [(offset in the MR, bytes)]): one SGE, then two apart.
    let sends: [(u16, &[(u64, u32)]); 2] = [(2, &[(7, 300)]), (3, &[(7, 150), (1000, 150)])];
    for (index, sges) in sends {
        let mut send = [0u8; WQEBB_LEN];
        ctrl(
            &mut send,
            index,
            WqeOpcode::Send,
            rig.qpn.get(),
            1 + sges.len() as u8,
        );
        for (k, &(off, len)) in sges.iter().enumerate() {
            let at = 16 * (k + 1);
            let mut d = DataSeg::new_unchecked(&mut send[at..at + 16]);
            d.set_byte_count(len);
            d.set_lkey(rig.mr.raw());
            d.set_addr(rig.mr_buf.get() + off);
        }
        rig.write_sq(index, &send);
    }
    rig.write_sq(0, &first);
    rig.write_sq(1, &second);
    rig.ring(3, u8::from(WqeOpcode::Send), 3);
    let frames = rig.transmitted();
    (frames, rig)
}

#[test]
fn a_left_payload_filled_in_is_the_frame_that_would_have_been_sent() {
    let (whole, whole_rig) = writes_and_sends(NicConfig::new(LOCAL));
    let mut cfg = NicConfig::new(LOCAL);
    cfg.leave_payload = true;
    let (left, left_rig) = writes_and_sends(cfg);
    assert_eq!(whole.len(), 15, "13 WRITE packets and two SENDs");
    assert_eq!(left.len(), whole.len());
    for (k, (l, w)) in left.iter().zip(&whole).enumerate() {
        assert_eq!(w.unfilled, None, "frame {k}: a NIC that does not leave");
        let mut bytes = l.bytes.clone();
        if k < 14 {
            let u = l.unfilled.expect("a WRITE's or SEND's payload is left");
            let parsed = doorbell_wire::parse_roce_emitted(&bytes).unwrap();
            assert_eq!(u.at as usize, parsed.payload.start, "frame {k}");
            assert_eq!(u.len as usize, parsed.payload.len(), "frame {k}");
            u.fill(&mut bytes, &*left_rig.mem).unwrap();
            seal_roce(&mut bytes).unwrap();
        } else {
            assert_eq!(l.unfilled, None, "a payload from two runs is carried");
        }
        assert!(bytes == w.bytes, "frame {k}: the same bytes once filled");
        assert_eq!(l.dst, w.dst);
    }
    assert_eq!(
        left_rig.bus.counters(),
        whole_rig.bus.counters(),
        "the same reads, counted as they were issued"
    );
}

/// The rig's QP takes a WRITE ONLY of `len` bytes to offset 100 of its MR,
/// its payload left at `from` in `src` (or carried, with `carried`); returns
/// what the NIC made of it, the frames it sent back and the MR's bytes.
fn take_write(
    unfilled: impl Fn(&[u8]) -> Option<Unfilled>,
    src: &HostRam,
    carried: &[u8],
) -> (Received, Vec<Frame>, Vec<u8>, Rig) {
    let mut rig = Rig::new();
    let frame = rig.write_only(EPSN, 100, carried);
    let u = unfilled(&frame);
    let r = take(&mut rig, &frame, u.as_ref().map(|u| (u, src)));
    let out = rig.transmitted();
    let mr = rig.mr_bytes(0, MR_LEN as usize);
    (r, out, mr, rig)
}

#[test]
fn a_receiver_copies_a_left_payload_from_the_senders_memory() {
    let src = HostRam::new();
    let at = src.alloc(8192).unwrap();
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 13 + 5) as u8).collect();
    src.write(at.checked_add(33).unwrap(), &payload).unwrap();
    let from = at.checked_add(33).unwrap();
    let left = |frame: &[u8]| Some(left_at(frame, from));
    // The frame's own payload bytes are zeros: only the left ones land.
    let (r, acks, mr, rig) = take_write(left, &src, &[0u8; 1000]);
    let (r2, acks2, mr2, rig2) = take_write(|_| None, &src, &payload);
    assert_eq!(r, Received::Taken);
    assert_eq!(r2, Received::Taken);
    assert_eq!(&mr[100..1100], &payload[..]);
    assert!(mr == mr2, "the same memory as from a frame that carried it");
    let bytes = |fs: &[Frame]| fs.iter().map(|f| f.bytes.clone()).collect::<Vec<_>>();
    assert!(bytes(&acks) == bytes(&acks2), "the same ACK");
    assert_eq!(acks.len(), 1);
    assert_eq!(rig.bus.counters(), rig2.bus.counters(), "the same writes");
    assert_eq!(rig.counters(), rig2.counters());
}

/// Where a case says a frame's payload was left, given the sender's buffer.
type MakeUnfilled = fn(HostAddr, &[u8]) -> Unfilled;

#[test]
fn a_receiver_copies_a_left_send_into_its_receive_buffer() {
    let src = HostRam::new();
    let at = src.alloc(4096).unwrap();
    let payload: Vec<u8> = (0..700u32).map(|i| (i * 7 + 1) as u8).collect();
    src.write(at, &payload).unwrap();
    let send = |left: bool| {
        let mut rig = Rig::new();
        let (lkey, buf) = (rig.mr.raw(), rig.mr_buf.get() + 64);
        rig.post_recv(lkey, buf, 1000);
        let carried = if left {
            vec![0u8; 700]
        } else {
            payload.clone()
        };
        let frame = rig.request(BthOpcode::RcSendOnly, EPSN, ExtHeaders::default(), &carried);
        let u = left_at(&frame, at);
        let r = take(&mut rig, &frame, left.then_some((&u, &src)));
        assert_eq!(r, Received::Taken);
        let acks: Vec<Vec<u8>> = rig.transmitted().into_iter().map(|f| f.bytes).collect();
        let cqes = rig.cqes();
        let mr = rig.mr_bytes(0, MR_LEN as usize);
        (acks, cqes, mr, rig.bus.counters())
    };
    let (left, carried) = (send(true), send(false));
    assert_eq!(&left.2[64..764], &payload[..], "the SEND's bytes landed");
    assert!(left == carried, "the same ACK, CQE, memory and bus counts");
    assert_eq!(left.1.len(), 1, "one receive completion");
}

#[test]
fn a_left_payload_that_no_payload_carrying_packet_holds_is_dropped_and_touches_nothing() {
    let src = HostRam::new();
    let at = src.alloc(4096).unwrap();
    src.write(at, &[0xee; 4096]).unwrap();
    let cases: [(&str, MakeUnfilled); 3] = [
        ("short", |from, f| {
            let u = left_at(f, from);
            Unfilled {
                len: u.len - 1,
                ..u
            }
        }),
        ("elsewhere in the frame", |from, f| {
            let u = left_at(f, from);
            Unfilled { at: u.at + 1, ..u }
        }),
        ("beyond the sender's memory", |_, f| {
            left_at(f, HostAddr::new(0x10))
        }),
    ];
    for (name, make) in cases {
        let (r, out, mr, rig) = take_write(|f| Some(make(at, f)), &src, &[0u8; 64]);
        assert!(mr.iter().all(|&b| b == 0), "{name}: memory untouched");
        if name == "beyond the sender's memory" {
            // A payload the sender's memory no longer holds: as a WRITE
            // to memory the receiver cannot reach.
            assert_eq!(r, Received::Taken, "{name}");
            let nak = parse_roce(&out[0].bytes).unwrap().repr;
            let aeth = nak.ext.aeth.expect("a NAK");
            assert_eq!(
                aeth.syndrome,
                AethSyndrome::Nak(NakCode::RemoteAccessErr),
                "{name}"
            );
        } else {
            assert!(matches!(r, Received::Dropped(_)), "{name}: {r:?}");
            assert!(out.is_empty(), "{name}: no answer");
            assert_eq!(rig.counters().rx_dropped, 1, "{name}");
        }
    }
    // An ACK whose payload is said to be left: dropped the same way (only
    // packets whose payload the receiver writes into memory may leave it).
    let mut rig = Rig::new();
    let frame = peer_aeth(&rig, BthOpcode::RcAck, SQ_PSN, 1, &[1, 2, 3, 4]);
    let r = take(&mut rig, &frame, Some((&left_at(&frame, at), &src)));
    assert!(matches!(r, Received::Dropped(_)), "an ACK: {r:?}");
    assert_eq!(rig.counters().rx_dropped, 1);
}

/// The rig reads `data.len()` bytes into its MR at offset 0 and takes the
/// responses (at the rig's MTU of 1024), their payload left in `src` at
/// `from` or carried; returns the CQEs, the MR's bytes and the bus counts.
fn take_read(
    src: &HostRam,
    from: HostAddr,
    data: &[u8],
    left: bool,
) -> (Vec<[u8; CQE_LEN]>, Vec<u8>, doorbell_pcie::Counters) {
    let mut rig = Rig::new();
    let r = rdma_wqe(&rig, 0, WqeOpcode::RdmaRead, data.len() as u32);
    rig.write_sq(0, &r);
    rig.ring(0, u8::from(WqeOpcode::RdmaRead), 3);
    assert_eq!(rig.transmitted().len(), 1, "the READ request");
    let chunks: Vec<&[u8]> = data.chunks(1024).collect();
    let n = chunks.len();
    for (i, c) in chunks.iter().enumerate() {
        use BthOpcode::*;
        let op = match (i == 0, i + 1 == n) {
            (true, true) => RcRdmaReadResponseOnly,
            (true, false) => RcRdmaReadResponseFirst,
            (false, false) => RcRdmaReadResponseMiddle,
            (false, true) => RcRdmaReadResponseLast,
        };
        let carried = if left { vec![0u8; c.len()] } else { c.to_vec() };
        let psn = SQ_PSN + i as u32;
        let frame = if op == RcRdmaReadResponseMiddle {
            // A Middle carries no AETH.
            rig.request(op, psn, ExtHeaders::default(), &carried)
        } else {
            peer_aeth(&rig, op, psn, 1, &carried)
        };
        let u = left_at(&frame, from.checked_add((i * 1024) as u64).unwrap());
        let got = take(&mut rig, &frame, left.then_some((&u, src)));
        assert_eq!(got, Received::Taken, "response {i}");
    }
    let cqes = rig.cqes();
    (cqes, rig.mr_bytes(0, data.len()), rig.bus.counters())
}

#[test]
fn a_requester_copies_left_read_responses_into_its_buffer() {
    let src = HostRam::new();
    let at = src.alloc(8192).unwrap();
    let data: Vec<u8> = (0..6000u32).map(|i| ((i * 31 + 3) % 251) as u8).collect();
    src.write(at, &data).unwrap();
    let left = take_read(&src, at, &data, true);
    let carried = take_read(&src, at, &data, false);
    assert_eq!(left.1, data, "the READ's bytes landed");
    assert!(left == carried, "the same CQE, memory and bus counts");
    assert_eq!(left.0.len(), 1, "one completion");
}

/// The rig, configured with `cfg`, answers a READ of `len` bytes from
/// offset 10 of its MR; returns the responses and the rig.
fn answer_read(cfg: NicConfig, len: u32) -> (Vec<Frame>, Rig) {
    let mut rig = Rig::with_config(cfg);
    let data: Vec<u8> = (0..MR_LEN).map(|i| (i % 253) as u8).collect();
    rig.mem.write(rig.mr_buf, &data).unwrap();
    let reth = RethRepr {
        va: rig.mr_buf.get() + 10,
        rkey: rig.mr,
        dma_len: len,
    };
    let ext = ExtHeaders {
        reth: Some(reth),
        ..ExtHeaders::default()
    };
    let req = rig.request(BthOpcode::RcRdmaReadRequest, EPSN, ext, &[]);
    let out = rig.frame(&req);
    (out, rig)
}

#[test]
fn a_responder_leaves_its_read_responses_payload_in_its_memory() {
    let answer = |leave: bool| {
        let mut cfg = NicConfig::new(LOCAL);
        cfg.leave_payload = leave;
        answer_read(cfg, 3000)
    };
    let (whole, whole_rig) = answer(false);
    let (left, left_rig) = answer(true);
    assert_eq!(whole.len(), 3, "three responses at MTU 1024");
    assert_eq!(left.len(), 3);
    for (k, (l, w)) in left.iter().zip(&whole).enumerate() {
        assert_eq!(w.unfilled, None);
        let u = l.unfilled.expect("a READ response's payload is left");
        let mut bytes = l.bytes.clone();
        u.fill(&mut bytes, &*left_rig.mem).unwrap();
        seal_roce(&mut bytes).unwrap();
        assert!(bytes == w.bytes, "response {k}: the same bytes once filled");
    }
    assert_eq!(left_rig.bus.counters(), whole_rig.bus.counters());
}

// ---------------------------------------------------------------------------
// Runs: MIDDLE packets handed on as one frame (`NicConfig::max_segments`).

/// A NIC that leaves payloads and joins up to `max` packets.
pub(super) fn joining(max: u32) -> NicConfig {
    let mut cfg = NicConfig::new(LOCAL);
    cfg.leave_payload = true;
    cfg.max_segments = max;
    cfg
}

/// Each packet `frames` stand for, as a frame of its own: split
/// ([`Unfilled::segment`]), filled in from `mem` and sealed.
pub(super) fn split(frames: &[Frame], mem: &HostRam) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for f in frames {
        let Some(u) = f.unfilled else {
            // A packet, or a train of them back to back, each whole once
            // headers handed over parsed are written.
            let mut f = f.clone();
            f.write_headers();
            assert!(f.headers.is_empty());
            let packets: Vec<_> = f.packet_ranges().collect();
            assert_eq!(
                packets.len(),
                f.train.max(1) as usize,
                "every packet of the train"
            );
            assert_eq!(
                packets.last().map(|r| r.end),
                Some(f.bytes.len()),
                "nothing after them"
            );
            out.extend(packets.into_iter().map(|r| f.bytes[r].to_vec()));
            continue;
        };
        for k in 0..u.segments {
            let mut bytes = Vec::new();
            let one = u
                .segment(&f.bytes, k, &mut bytes)
                .expect("a packet of the run");
            assert_eq!(one.segments, 1);
            one.fill(&mut bytes, mem).unwrap();
            seal_roce(&mut bytes).unwrap();
            out.push(bytes);
        }
        assert_eq!(u.segment(&f.bytes, u.segments, &mut Vec::new()), None);
    }
    out
}

/// Checks that `runs`, built by `rig` with `max_segments` (or `max_train`)
/// at `max`, are runs (or trains) of `expect` packets each that split into `whole`, the frames
/// `whole_rig` built packet by packet, with the same device and bus counts.
pub(super) fn same_packets(
    runs: &[Frame],
    rig: &Rig,
    expect: &[u32],
    max: u32,
    whole: &[Frame],
    whole_rig: &Rig,
) {
    let sizes: Vec<u32> = runs.iter().map(Frame::packets).collect();
    assert_eq!(sizes, expect, "max {max}");
    let whole: Vec<Vec<u8>> = whole.iter().map(|f| f.bytes.clone()).collect();
    assert!(
        split(runs, &rig.mem) == whole,
        "max {max}: the same packets"
    );
    assert_eq!(rig.bus.counters(), whole_rig.bus.counters(), "max {max}");
    assert_eq!(rig.counters(), whole_rig.counters(), "max {max}");
}

#[test]
fn a_run_split_into_its_packets_is_the_frames_a_reading_nic_sends() {
    let (whole, whole_rig) = writes_and_sends(NicConfig::new(LOCAL));
    assert_eq!(whole.len(), 15);
    // 8 KiB: FIRST, six MIDDLEs, LAST; 5 000 bytes: FIRST, three
    // MIDDLEs, LAST; two SENDs.
    let cases: [(u32, &[u32]); 3] = [
        (2, &[1, 2, 2, 2, 1, 1, 2, 1, 1, 1, 1]),
        (3, &[1, 3, 3, 1, 1, 3, 1, 1, 1]),
        (64, &[1, 6, 1, 1, 3, 1, 1, 1]),
    ];
    for (max, expect) in cases {
        let (runs, rig) = writes_and_sends(joining(max));
        same_packets(&runs, &rig, expect, max, &whole, &whole_rig);
    }
}

#[test]
fn a_split_packet_is_its_runs_headers_with_its_psn_and_an_unsealed_icrc() {
    let (runs, _) = writes_and_sends(joining(64));
    let run = runs
        .iter()
        .find(|f| f.unfilled.is_some_and(|u| u.segments == 6))
        .expect("the 8 KiB WRITE's six MIDDLEs as one run");
    let u = run.unfilled.unwrap();
    // A frame whose ICRC field holds something: a split packet's is
    // unsealed all the same.
    let mut bytes = run.bytes.clone();
    let n = bytes.len();
    bytes[n - 4..].copy_from_slice(&[1, 2, 3, 4]);
    assert!(
        parse_roce(&bytes).is_err(),
        "the stamped ICRC does not match"
    );
    let split = u.split(&bytes).expect("a run its NIC made");
    let run_repr = doorbell_wire::parse_roce_emitted(&bytes).unwrap().repr;
    let psn0 = run_repr.bth.psn;
    // Into a longer buffer of stale bytes: cut to the frame's length, the
    // payload left as it was.
    let mut into = vec![0xA5; n + 100];
    let one = split.packet(4, &mut into).expect("packet 4 of 6");
    assert_eq!(into.len(), n);
    assert_eq!(&into[n - 4..], &[0; 4]);
    let (at, len) = (u.at as usize, u.len as usize);
    assert!(into[at..at + len].iter().all(|&b| b == 0xA5));
    let parsed = doorbell_wire::parse_roce_emitted(&into).unwrap();
    assert_eq!(parsed.repr.bth.psn, psn0.add(4));
    let mut want = run_repr;
    want.bth.psn = psn0.add(4);
    assert_eq!(parsed.repr, want, "only the PSN differs");
    assert_eq!(one.from, u.from.checked_add(4 * u64::from(u.len)).unwrap());
    assert_eq!((one.segments, one.at, one.len), (1, u.at, u.len));
    assert_eq!(split.packet(6, &mut into), None, "past the run");
}

/// A NIC that joins up to `max` packets into runs that may hold their
/// message's FIRST and LAST (`NicConfig::runs_with_ends`).
fn joining_with_ends(max: u32) -> NicConfig {
    let mut cfg = joining(max);
    cfg.runs_with_ends = true;
    cfg
}

#[test]
fn a_run_with_ends_split_into_its_packets_is_the_frames_a_reading_nic_sends() {
    let (whole, whole_rig) = writes_and_sends(NicConfig::new(LOCAL));
    // 8 KiB: FIRST, six MIDDLEs, LAST; 5 000 bytes: FIRST, three MIDDLEs,
    // a LAST of 904 bytes; two SENDs.
    let cases: [(u32, &[u32]); 3] = [
        (64, &[8, 5, 1, 1]),
        (3, &[3, 3, 2, 3, 2, 1, 1]),
        (8, &[8, 5, 1, 1]),
    ];
    for (max, expect) in cases {
        let (runs, rig) = writes_and_sends(joining_with_ends(max));
        same_packets(&runs, &rig, expect, max, &whole, &whole_rig);
    }
    let (runs, _) = writes_and_sends(joining_with_ends(64));
    let lasts: Vec<_> = runs
        .iter()
        .map(|f| f.unfilled.and_then(|u| u.last))
        .collect();
    assert_eq!(
        lasts[..2],
        [
            Some(RunLast {
                len: 1024,
                ack_req: true
            }),
            Some(RunLast {
                len: 904,
                ack_req: true
            }),
        ],
        "each WRITE ends with its LAST, which asks for an ACK"
    );
}

#[test]
fn a_split_last_is_emitted_unsealed_around_its_payload_where_it_lies() {
    let (runs, _) = writes_and_sends(joining_with_ends(64));
    let run = &runs[1];
    let u = run.unfilled.expect("the 5 000-byte WRITE as one run");
    let split = u.split(&run.bytes).expect("a run its NIC made");
    let mut into = vec![0xA5; 5000];
    let one = split.packet(4, &mut into).expect("its LAST");
    let parsed = doorbell_wire::parse_roce_emitted(&into).unwrap();
    assert_eq!(parsed.repr.bth.opcode, BthOpcode::RcRdmaWriteLast);
    assert!(parsed.repr.bth.ack_req);
    assert_eq!(parsed.repr.ext, ExtHeaders::default(), "no RETH");
    assert_eq!(parsed.payload.len(), 904);
    assert_eq!((one.at as usize, one.len), (parsed.payload.start, 904));
    assert_eq!(one.from, u.from.checked_add(4 * 1024).unwrap());
    assert!(
        into[parsed.payload.clone()].iter().all(|&b| b == 0xA5),
        "the payload left as it was"
    );
    let n = into.len();
    assert_eq!(&into[n - 4..], &[0; 4], "unsealed");
    assert_eq!(split.packet(5, &mut into), None, "past the run");
}

/// The rig takes `frame`, its payload said to be left in `src` where `u`
/// says, and drops it as malformed, answering nothing and writing
/// nothing (case `name`); nor is it split into packets where it could be
/// seen.
fn dropped_untouched(rig: &mut Rig, frame: &[u8], u: &Unfilled, src: &HostRam, name: &str) {
    assert!(u.split(frame).is_none(), "{name}: split");
    let before = rig.counters();
    let r = take(rig, frame, Some((u, src)));
    assert!(matches!(r, Received::Dropped(_)), "{name}: {r:?}");
    assert!(rig.transmitted().is_empty(), "{name}: no answer");
    assert!(
        rig.mr_bytes(0, MR_LEN as usize).iter().all(|&b| b == 0),
        "{name}"
    );
    let after = rig.counters();
    assert_eq!(after.rx_dropped, before.rx_dropped + 1, "{name}");
    assert_eq!(after.rx_packets, before.rx_packets, "{name}");
}

#[test]
fn a_run_whose_ends_no_sender_makes_is_dropped_and_touches_nothing() {
    let (src, at) = source(&[0xee; 8192]);
    let last = |len, ack_req| Some(RunLast { len, ack_req });
    let cases: [(&str, BthOpcode, bool, u32, Option<RunLast>); 6] = [
        (
            "a LAST of no bytes",
            BthOpcode::RcRdmaWriteFirst,
            false,
            3,
            last(0, true),
        ),
        (
            "a LAST longer than a MIDDLE",
            BthOpcode::RcRdmaWriteFirst,
            false,
            3,
            last(1025, true),
        ),
        (
            "a FIRST asking for an ACK",
            BthOpcode::RcRdmaWriteFirst,
            true,
            3,
            None,
        ),
        (
            "a READ response's FIRST",
            BthOpcode::RcRdmaReadResponseFirst,
            false,
            3,
            None,
        ),
        (
            "a lone packet with a LAST",
            BthOpcode::RcRdmaWriteFirst,
            false,
            1,
            last(10, true),
        ),
        (
            "a WRITE ONLY heading a run",
            BthOpcode::RcRdmaWriteOnly,
            false,
            2,
            last(10, true),
        ),
    ];
    for (name, op, ack_req, segments, last) in cases {
        let mut rig = Rig::new();
        let ext = match op {
            BthOpcode::RcRdmaReadResponseFirst => ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: AethSyndrome::Ack { credits: 0x1f },
                    msn: 1,
                }),
                ..ExtHeaders::default()
            },
            _ => rig.mr_reth(0, 4096),
        };
        let mut bth = BthRepr::new(op, rig.qpn, Psn::new(EPSN));
        bth.ack_req = ack_req;
        let frame = rig.request_bth(bth, ext, &[0u8; 1024]);
        let u = Unfilled {
            segments,
            last,
            ..left_at(&frame, at)
        };
        dropped_untouched(&mut rig, &frame, &u, &src, name);
    }
}

#[test]
fn a_responder_hands_its_middle_read_responses_on_as_runs() {
    let (whole, whole_rig) = answer_read(NicConfig::new(LOCAL), 7000);
    assert_eq!(whole.len(), 7, "FIRST, five MIDDLEs, LAST");
    let cases: [(u32, &[u32]); 2] = [(64, &[1, 5, 1]), (2, &[1, 2, 2, 1, 1])];
    for (max, expect) in cases {
        let (runs, rig) = answer_read(joining(max), 7000);
        same_packets(&runs, &rig, expect, max, &whole, &whole_rig);
    }
}

/// A packet the rig's QP takes.
struct Pkt {
    op: BthOpcode,
    ext: ExtHeaders,
    len: usize,
}

/// How [`take_packets`] hands on packets whose payloads are left in
/// memory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runs {
    /// Each as a frame of its own.
    None,
    /// MIDDLE packets in a row as one run.
    Middles,
    /// The whole message as one run, from its FIRST to its LAST
    /// (`NicConfig::runs_with_ends`).
    WithEnds,
}

/// The rig takes `pkts`, PSNs from `psn` on, the last asking for an ACK;
/// their payloads are `data`, one after another. With `src`, the payloads
/// are left there at `from`, handed on in runs as `runs` says; else
/// carried.
fn take_packets(
    rig: &mut Rig,
    pkts: &[Pkt],
    psn: u32,
    data: &[u8],
    left: Option<(&HostRam, HostAddr, Runs)>,
) {
    let mut at = 0usize;
    let mut i = 0usize;
    while i < pkts.len() {
        let p = &pkts[i];
        let middle = matches!(
            p.op,
            BthOpcode::RcRdmaWriteMiddle
                | BthOpcode::RcSendMiddle
                | BthOpcode::RcRdmaReadResponseMiddle
        );
        let mut n = 1;
        match left {
            Some((_, _, Runs::Middles)) => {
                while middle
                    && i + n < pkts.len()
                    && pkts[i + n].op == p.op
                    && i + n + 1 < pkts.len()
                {
                    n += 1;
                }
            }
            Some((_, _, Runs::WithEnds)) => n = pkts.len() - i,
            _ => {}
        }
        let mut bth = BthRepr::new(p.op, rig.qpn, Psn::new(psn + i as u32));
        bth.ack_req = n == 1 && i + 1 == pkts.len();
        let chunk = &data[at..at + p.len];
        let got = match left {
            Some((src, from, runs)) => {
                let frame = rig.request_bth(bth, p.ext, &vec![0u8; p.len]);
                let last = (runs == Runs::WithEnds && n > 1).then(|| RunLast {
                    len: pkts[pkts.len() - 1].len as u32,
                    ack_req: true,
                });
                let u = Unfilled {
                    segments: n as u32,
                    last,
                    ..left_at(&frame, from.checked_add(at as u64).unwrap())
                };
                take(rig, &frame, Some((&u, src)))
            }
            None => {
                let frame = rig.request_bth(bth, p.ext, chunk);
                take(rig, &frame, None)
            }
        };
        assert_eq!(got, Received::Taken, "packet {i}");
        at += (0..n).map(|k| pkts[i + k].len).sum::<usize>();
        i += n;
    }
}

/// What a rig ended with: its frames out, CQEs, MR bytes, NIC and bus
/// counts, and its processing units' time.
pub(super) type Outcome = (
    Vec<Vec<u8>>,
    Vec<[u8; CQE_LEN]>,
    Vec<u8>,
    NicCounters,
    doorbell_pcie::Counters,
    doorbell_types::Duration,
);

pub(super) fn outcome(mut rig: Rig) -> Outcome {
    let out = rig.transmitted().into_iter().map(|f| f.bytes).collect();
    let cqes = rig.cqes();
    let mr = rig.mr_bytes(0, MR_LEN as usize);
    let busy = rig.nic.pu_busy();
    (out, cqes, mr, rig.counters(), rig.bus.counters(), busy)
}

/// Six packets of 1 KiB: FIRST (with `first_ext`), four MIDDLEs, LAST.
fn six(first: BthOpcode, middle: BthOpcode, last: BthOpcode, first_ext: ExtHeaders) -> Vec<Pkt> {
    let mut v = vec![Pkt {
        op: first,
        ext: first_ext,
        len: 1024,
    }];
    for _ in 0..4 {
        v.push(Pkt {
            op: middle,
            ext: ExtHeaders::default(),
            len: 1024,
        });
    }
    v.push(Pkt {
        op: last,
        ext: ExtHeaders::default(),
        len: 1024,
    });
    v
}

/// The sender's memory with `data` at the returned address.
fn source(data: &[u8]) -> (HostRam, HostAddr) {
    let src = HostRam::new();
    let at = src.alloc(data.len() as u64 + 4096).unwrap();
    src.write(at, data).unwrap();
    (src, at)
}

/// Two processing units that take time per packet: a run's (or a
/// train's) packets must occupy them as the packets alone would.
pub(super) fn timed() -> NicConfig {
    let mut cfg = NicConfig::new(LOCAL);
    cfg.timing.processing_units = 2;
    cfg.timing.rx_packet = doorbell_types::Duration::from_ns(40);
    cfg.timing.tx_packet = doorbell_types::Duration::from_ns(30);
    cfg
}

/// What a fresh rig, prepared by `setup` (which returns the packets and
/// their first PSN), ends with after taking `data` in those packets: as
/// runs, as single packets left in the sender's memory, and carried.
fn three_ways(data: &[u8], setup: impl Fn(&mut Rig) -> (Vec<Pkt>, u32)) -> [Outcome; 3] {
    let (src, at) = source(data);
    let cfg = timed();
    [Some(Runs::Middles), Some(Runs::None), None].map(|left| {
        let mut rig = Rig::with_config(cfg.clone());
        let (pkts, psn) = setup(&mut rig);
        take_packets(&mut rig, &pkts, psn, data, left.map(|r| (&src, at, r)));
        outcome(rig)
    })
}

/// The six packets of [`six`] as a WRITE to byte 100 of the rig's MR
/// whose RETH grants `dma_len` bytes, and their first PSN.
fn six_writes(rig: &Rig, dma_len: u32) -> (Vec<Pkt>, u32) {
    let reth = RethRepr {
        va: rig.mr_buf.get() + 100,
        rkey: rig.mr,
        dma_len,
    };
    let ext = ExtHeaders {
        reth: Some(reth),
        ..ExtHeaders::default()
    };
    use BthOpcode::*;
    (
        six(RcRdmaWriteFirst, RcRdmaWriteMiddle, RcRdmaWriteLast, ext),
        EPSN,
    )
}

#[test]
fn a_receiver_takes_a_run_of_writes_as_it_takes_its_packets() {
    let data: Vec<u8> = (0..6144u32).map(|i| ((i * 17 + 9) % 251) as u8).collect();
    let [runs, alone, carried] = three_ways(&data, |rig| six_writes(rig, data.len() as u32));
    assert_eq!(
        &runs.2[100..100 + data.len()],
        &data[..],
        "the WRITE landed"
    );
    assert_eq!(runs.0.len(), 1, "one ACK");
    assert!(runs == alone, "as the packets one by one");
    assert!(runs == carried, "as the packets with their payloads");
    assert_eq!(runs.3.rx_packets, 6);
}

#[test]
fn a_run_that_overruns_its_write_is_taken_packet_by_packet() {
    // The RETH grants 3 KiB; the FIRST and a run of four MIDDLEs carry
    // 5 KiB: the third MIDDLE is NAKed, wherever it sits in the run.
    let data: Vec<u8> = (0..6144u32).map(|i| ((i * 13 + 3) % 251) as u8).collect();
    let [runs, alone, carried] = three_ways(&data, |rig| six_writes(rig, 3072));
    assert_eq!(
        &runs.2[100..100 + 3072],
        &data[..3072],
        "what the key grants"
    );
    assert!(
        runs.2[100 + 3072..100 + 4096].iter().all(|&b| b == 0),
        "nothing past it"
    );
    let nak = runs.0.iter().any(|f| {
        doorbell_wire::parse_roce_emitted(f).is_ok_and(|p| {
            p.repr.bth.psn == Psn::new(EPSN + 3)
                && matches!(
                    p.repr.ext.aeth.map(|a| a.syndrome),
                    Some(AethSyndrome::Nak(NakCode::InvalidRequest))
                )
        })
    });
    assert!(nak, "a NAK for the third MIDDLE: {:?}", runs.0.len());
    assert!(runs == alone, "as the packets one by one");
    assert!(runs == carried, "as the packets with their payloads");
}

#[test]
fn a_receiver_takes_a_run_of_sends_into_its_receive_buffer() {
    let data: Vec<u8> = (0..6144u32).map(|i| ((i * 5 + 1) % 251) as u8).collect();
    let [runs, alone, carried] = three_ways(&data, |rig| {
        let (lkey, buf) = (rig.mr.raw(), rig.mr_buf.get() + 64);
        rig.post_recv(lkey, buf, 8000);
        use BthOpcode::*;
        let pkts = six(RcSendFirst, RcSendMiddle, RcSendLast, ExtHeaders::default());
        (pkts, EPSN)
    });
    assert_eq!(&runs.2[64..64 + data.len()], &data[..], "the SEND landed");
    assert_eq!(runs.1.len(), 1, "one receive completion");
    assert!(runs == alone, "as the packets one by one");
    assert!(runs == carried, "the same ACK, CQE, memory and counts");
}

#[test]
fn a_requester_takes_a_run_of_read_responses() {
    let data: Vec<u8> = (0..6144u32).map(|i| ((i * 29 + 7) % 251) as u8).collect();
    let [runs, alone, carried] = three_ways(&data, |rig| {
        let r = rdma_wqe(rig, 0, WqeOpcode::RdmaRead, data.len() as u32);
        rig.write_sq(0, &r);
        rig.ring(0, u8::from(WqeOpcode::RdmaRead), 3);
        assert_eq!(rig.transmitted().len(), 1, "the READ request");
        let aeth = ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 0x1f },
                msn: 1,
            }),
            ..ExtHeaders::default()
        };
        use BthOpcode::*;
        let mut pkts = six(
            RcRdmaReadResponseFirst,
            RcRdmaReadResponseMiddle,
            RcRdmaReadResponseLast,
            aeth,
        );
        pkts[5].ext = aeth;
        (pkts, SQ_PSN)
    });
    assert_eq!(&runs.2[..data.len()], &data[..], "the READ's bytes landed");
    assert_eq!(runs.1.len(), 1, "one completion");
    assert!(runs == alone, "as the packets one by one");
    assert!(runs == carried, "the same CQE, memory and counts");
}

/// What a fresh rig, prepared by `setup`, ends with after taking `data`
/// in its packets, each message as one run from its FIRST to its LAST
/// (`NicConfig::runs_with_ends`); the last packet is cut to what `data`
/// leaves it.
fn with_ends(data: &[u8], setup: impl Fn(&mut Rig) -> (Vec<Pkt>, u32)) -> [Outcome; 2] {
    let (src, at) = source(data);
    [Runs::WithEnds, Runs::None].map(|runs| {
        let mut rig = Rig::with_config(timed());
        let (mut pkts, psn) = setup(&mut rig);
        let before: usize = pkts[..pkts.len() - 1].iter().map(|p| p.len).sum();
        if let Some(last) = pkts.last_mut() {
            last.len = data.len() - before;
        }
        take_packets(&mut rig, &pkts, psn, data, Some((&src, at, runs)));
        outcome(rig)
    })
}

#[test]
fn a_receiver_takes_a_write_as_one_run_with_ends_as_it_takes_its_packets() {
    // Five whole packets and a LAST of 300 bytes.
    let data: Vec<u8> = (0..5 * 1024 + 300u32)
        .map(|i| ((i * 11 + 5) % 251) as u8)
        .collect();
    let [run, alone] = with_ends(&data, |rig| six_writes(rig, data.len() as u32));
    assert_eq!(&run.2[100..100 + data.len()], &data[..], "the WRITE landed");
    assert_eq!(run.0.len(), 1, "one ACK");
    assert_eq!(run.3.rx_packets, 6);
    assert!(run == alone, "as the packets one by one");
}

#[test]
fn a_run_with_ends_that_overruns_its_write_is_taken_packet_by_packet() {
    let data: Vec<u8> = (0..6144u32).map(|i| ((i * 7 + 1) % 251) as u8).collect();
    let [run, alone] = with_ends(&data, |rig| six_writes(rig, 3072));
    assert_eq!(
        &run.2[100..100 + 3072],
        &data[..3072],
        "what the key grants"
    );
    assert!(
        run.2[100 + 3072..].iter().all(|&b| b == 0),
        "nothing past it"
    );
    assert!(run == alone, "the same NAK, memory and counts");
}

#[test]
fn a_receiver_takes_a_send_as_one_run_with_ends_into_its_receive_buffer() {
    let data: Vec<u8> = (0..5 * 1024 + 77u32)
        .map(|i| ((i * 3 + 2) % 251) as u8)
        .collect();
    let [run, alone] = with_ends(&data, |rig| {
        let (lkey, buf) = (rig.mr.raw(), rig.mr_buf.get() + 64);
        rig.post_recv(lkey, buf, 8000);
        use BthOpcode::*;
        let pkts = six(RcSendFirst, RcSendMiddle, RcSendLast, ExtHeaders::default());
        (pkts, EPSN)
    });
    assert_eq!(&run.2[64..64 + data.len()], &data[..], "the SEND landed");
    assert_eq!(run.1.len(), 1, "one receive completion");
    assert!(run == alone, "the same ACK, CQE, memory and counts");
}

#[test]
fn a_run_that_no_sender_makes_is_dropped_and_touches_nothing() {
    let (src, at) = source(&[0xee; 4096]);
    let cases: [(&str, BthOpcode, bool, u32, HostAddr); 6] = [
        ("no packets", BthOpcode::RcRdmaWriteMiddle, false, 0, at),
        (
            "too many packets",
            BthOpcode::RcRdmaWriteMiddle,
            false,
            doorbell_device::MAX_SEGMENTS + 1,
            at,
        ),
        ("a WRITE ONLY", BthOpcode::RcRdmaWriteOnly, false, 2, at),
        ("a LAST", BthOpcode::RcRdmaWriteLast, false, 2, at),
        (
            "asking for an ACK",
            BthOpcode::RcRdmaWriteMiddle,
            true,
            2,
            at,
        ),
        (
            "past the address space",
            BthOpcode::RcRdmaWriteMiddle,
            false,
            2,
            HostAddr::new(u64::MAX - 100),
        ),
    ];
    for (name, op, ack_req, segments, from) in cases {
        let mut rig = Rig::new();
        // A WRITE in progress, for its MIDDLEs to continue.
        let ext = rig.mr_reth(0, 4096);
        let first = rig.request(BthOpcode::RcRdmaWriteFirst, EPSN, ext, &[0u8; 1024]);
        assert_eq!(take(&mut rig, &first, None), Received::Taken);
        let _ = rig.transmitted();
        let ext = if op == BthOpcode::RcRdmaWriteOnly {
            ext
        } else {
            ExtHeaders::default()
        };
        let mut bth = BthRepr::new(op, rig.qpn, Psn::new(EPSN + 1));
        bth.ack_req = ack_req;
        let frame = rig.request_bth(bth, ext, &[0u8; 1024]);
        let u = Unfilled {
            segments,
            ..left_at(&frame, from)
        };
        dropped_untouched(&mut rig, &frame, &u, &src, name);
    }
}

/// A SEND longer than the largest message (2^31 bytes) is an invalid
/// request where it passes the limit, though its receive buffer holds
/// more: the receive WQE completes with a local length error, the peer is
/// NAKed and the QP goes to ERR; up to the limit, exactly, every packet is
/// taken.
/// (Its 2^19 + 1 packets of 4 KiB come as runs of up to 64 whose payloads are
/// left in the sender's memory, each run from the same 256 KiB, into a
/// key whose pages all map one page: 2 GiB moved, none held, in about
/// two seconds of a debug build.)
#[test]
fn a_send_past_the_largest_message_is_an_invalid_request() {
    const MTU: u32 = 4096;
    const RUN: u32 = 64;
    let mut rig = Rig::with_config_and_mtu(NicConfig::new(LOCAL), MTU);
    // The receive buffer: 2^31 + 4 KiB, every page of it the MR's first.
    let room = (1u64 << 31) + u64::from(MTU);
    let pd = rig.pd;
    let Ok(CmdOut::Mkey(big)) = rig.exec(Command::CreateMkey(MkeyParams {
        pd,
        access: Access(Access::LOCAL_WRITE),
        start: rig.mr_buf.get(),
        len: room,
        mtt: vec![rig.mr_buf; (room / PAGE_SIZE) as usize],
    })) else {
        panic!("a key of 2 GiB and a page");
    };
    rig.post_recv(big.raw(), rig.mr_buf.get(), room as u32);
    let src = HostRam::new();
    let from = src.alloc(u64::from(RUN * MTU)).unwrap();
    src.write(from, &vec![0x5a; (RUN * MTU) as usize]).unwrap();
    let payload = vec![0x5a; MTU as usize];
    let syndromes = |out: &[Frame]| -> Vec<AethSyndrome> {
        out.iter()
            .filter_map(|f| Some(parse_roce(&f.bytes).ok()?.repr.ext.aeth?.syndrome))
            .collect()
    };
    // SEND FIRST, carried.
    let first = rig.request(
        BthOpcode::RcSendFirst,
        EPSN,
        ExtHeaders::default(),
        &payload,
    );
    assert!(matches!(take(&mut rig, &first, None), Received::Taken));
    // Then MIDDLEs, in runs, up to 2^31 bytes in all: every one taken.
    let mut psn = EPSN + 1;
    let mut middles = |rig: &mut Rig, segments: u32| {
        let mut bth = BthRepr::new(BthOpcode::RcSendMiddle, rig.qpn, Psn::new(psn));
        bth.ack_req = false;
        let bytes = rig.request_bth(bth, ExtHeaders::default(), &payload);
        let u = Unfilled {
            segments,
            ..left_at(&bytes, from)
        };
        let _ = take(rig, &bytes, Some((&u, &src)));
        psn += segments;
        syndromes(&rig.transmitted())
            .into_iter()
            .filter(|s| matches!(s, AethSyndrome::Nak(_)))
            .collect::<Vec<_>>()
    };
    let packets = (1u32 << 31) / MTU - 1;
    for r in 0..packets / RUN {
        assert_eq!(middles(&mut rig, RUN), [], "run {r}");
    }
    assert_eq!(middles(&mut rig, packets % RUN), [], "the last run");
    assert_eq!(rig.cqes().len(), 0, "nothing completed");
    assert_eq!(rig.state(), QpState::Rts, "2^31 bytes taken");
    // One more packet passes the limit.
    assert_eq!(
        middles(&mut rig, 1),
        [AethSyndrome::Nak(NakCode::InvalidRequest)],
        "a byte past 2^31"
    );
    let qpn = rig.qpn.get();
    let cqes: Vec<_> = rig.cqes().iter().map(cqe_fields).collect();
    assert_eq!(
        cqes,
        [(CqeOpcode::RespErr, Syndrome::LocalLengthErr, 0, 0, qpn)]
    );
    assert_eq!(rig.state(), QpState::Err);
}
