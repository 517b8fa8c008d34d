//! A WRITE's, SEND's or READ response's payload left in the sender's host
//! memory
//! (`NicConfig::leave_payload`): the sender builds the frames it would
//! have built, less their payload, and counts the same reads; the receiver
//! copies the payload from the sender's memory and ends as it would have
//! from the frame.

use doorbell_device::{Received, Unfilled};
use doorbell_wire::seal_roce;

use super::*;

/// Where `frame` carries its payload, said to be left at `from`.
fn left_at(frame: &[u8], from: HostAddr) -> Unfilled {
    let p = parse_roce(frame).unwrap().payload;
    Unfilled {
        from,
        at: p.start as u32,
        len: p.len() as u32,
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
    let data: Vec<u8> = (0..6000u32).map(|i| (i * 31 + 3) as u8).collect();
    src.write(at, &data).unwrap();
    let left = take_read(&src, at, &data, true);
    let carried = take_read(&src, at, &data, false);
    assert_eq!(left.1, data, "the READ's bytes landed");
    assert!(left == carried, "the same CQE, memory and bus counts");
    assert_eq!(left.0.len(), 1, "one completion");
}

#[test]
fn a_responder_leaves_its_read_responses_payload_in_its_memory() {
    let answer = |leave: bool| {
        let mut cfg = NicConfig::new(LOCAL);
        cfg.leave_payload = leave;
        let mut rig = Rig::with_config(cfg);
        let data: Vec<u8> = (0..MR_LEN).map(|i| (i % 253) as u8).collect();
        rig.mem.write(rig.mr_buf, &data).unwrap();
        let reth = RethRepr {
            va: rig.mr_buf.get() + 10,
            rkey: rig.mr,
            dma_len: 3000,
        };
        let ext = ExtHeaders {
            reth: Some(reth),
            ..ExtHeaders::default()
        };
        let req = rig.request(BthOpcode::RcRdmaReadRequest, EPSN, ext, &[]);
        let out = rig.frame(&req);
        (out, rig)
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
