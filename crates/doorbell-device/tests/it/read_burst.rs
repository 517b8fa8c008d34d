//! A NIC that builds a READ's responses a burst at a time
//! (`NicConfig::read_burst`) sends the frames a NIC without a burst sends,
//! with the QP's later answers behind them.

use super::*;

/// A NIC that builds `b` READ responses at a time.
fn burst(b: u32) -> NicConfig {
    let mut cfg = NicConfig::new(LOCAL);
    cfg.read_burst = Some(b);
    cfg
}

/// The peer's READ request at `psn` of `len` bytes from byte `offset` of
/// the rig's MR.
fn read(rig: &Rig, psn: u32, offset: u64, len: u32) -> Vec<u8> {
    rig.request(
        BthOpcode::RcRdmaReadRequest,
        psn,
        rig.mr_reth(offset, len),
        &[],
    )
}

/// The peer's requests, one frame each: a READ of 5 000 bytes (five
/// responses at the rig's MTU of 1024), a WRITE that asks for an ACK, a
/// FETCH_ADD, a READ of 1 500 bytes, and a READ duplicate of the first
/// one's last 2 000 bytes. Then, with `bad_write`, a WRITE with a key the
/// rig does not have, which ends the QP with a NAK, and a good WRITE after
/// it, which the QP drops.
fn requests(rig: &Rig, bad_write: bool) -> Vec<Vec<u8>> {
    let mut out = vec![
        read(rig, EPSN, 0, 5000),
        rig.write_only(EPSN + 5, 6000, &[7; 8]),
        rig.request(
            BthOpcode::RcFetchAdd,
            EPSN + 6,
            ExtHeaders {
                atomic_eth: Some(AtomicEthRepr {
                    va: rig.mr_buf.get() + 7000,
                    rkey: rig.mr,
                    swap_add: 5,
                    compare: 0,
                }),
                ..ExtHeaders::default()
            },
            &[],
        ),
        read(rig, EPSN + 7, 100, 1500),
        read(rig, EPSN + 3, 3072, 2000),
    ];
    if bad_write {
        let mut ext = rig.mr_reth(0, 8);
        if let Some(r) = ext.reth.as_mut() {
            r.rkey = Mkey::from_raw(rig.mr.raw() ^ 0x100);
        }
        out.push(rig.request(BthOpcode::RcRdmaWriteOnly, EPSN + 9, ext, &[1; 8]));
        out.push(rig.write_only(EPSN + 9, 6000, &[2; 8]));
    }
    out
}

/// What the rig sends for `requests`, each request handed to it once the
/// frames before have been taken (and, with a burst, the responses owed
/// built as far as `resumes` calls of `resume_transmit` go after each).
/// Returns the frames' bytes in order, the CQEs, the QP's state and the
/// device counters.
fn run(
    cfg: NicConfig,
    bad_write: bool,
    resumes: usize,
) -> (Vec<Vec<u8>>, Vec<[u8; CQE_LEN]>, QpState, NicCounters) {
    let mut rig = Rig::with_config(cfg);
    let data: Vec<u8> = (0..MR_LEN).map(|i| (i % 251) as u8).collect();
    rig.mem.write(rig.mr_buf, &data).unwrap();
    let mut frames = Vec::new();
    let now = rig.now;
    for req in requests(&rig, bad_write) {
        frames.extend(rig.frame(&req).into_iter().map(|f| f.bytes));
        for _ in 0..resumes {
            rig.nic.resume_transmit(now, &mut rig.bus);
            frames.extend(rig.transmitted().into_iter().map(|f| f.bytes));
        }
    }
    let mut calls = 0;
    while rig.nic.resume_transmit(now, &mut rig.bus) {
        frames.extend(rig.transmitted().into_iter().map(|f| f.bytes));
        calls += 1;
        assert!(calls < 100, "resume_transmit keeps answering true");
    }
    let cqes = rig.cqes();
    (frames, cqes, rig.state(), rig.counters())
}

#[test]
fn a_read_burst_changes_when_responses_are_built_not_which() {
    for bad_write in [false, true] {
        let (whole, cqes, state, counters) = run(NicConfig::new(LOCAL), bad_write, 0);
        // 5 + ACK + atomic ACK + 2 + the duplicate's 2, and the NAK.
        assert_eq!(whole.len(), 11 + usize::from(bad_write));
        let want_state = if bad_write {
            QpState::Err
        } else {
            QpState::Rts
        };
        assert_eq!(state, want_state);
        for b in [1, 2, 3, 64] {
            // Responses left owed across the later requests (no resume
            // between them), and resumed after each.
            for resumes in [0, 1] {
                let (frames, c, s, n) = run(burst(b), bad_write, resumes);
                let what = format!("burst {b}, resumes {resumes}, bad write {bad_write}");
                assert!(frames == whole, "{what}: the same frames, in order");
                assert_eq!(c, cqes, "{what}");
                assert_eq!(s, state, "{what}");
                assert_eq!(n, counters, "{what}");
            }
        }
    }
}

#[test]
fn a_burst_holds_only_its_responses() {
    // A READ of the whole MR (8 responses) with a burst of 3: 3 built at
    // the request, then 3 and 2 as the runtime takes them.
    let mut rig = Rig::with_config(burst(3));
    let req = read(&rig, EPSN, 0, MR_LEN as u32);
    let mut sizes = vec![rig.frame(&req).len()];
    let now = rig.now;
    while rig.nic.resume_transmit(now, &mut rig.bus) {
        sizes.push(rig.transmitted().len());
    }
    assert_eq!(sizes, [3, 3, 2]);
}

#[test]
fn a_request_that_ends_the_qp_behind_a_read_waits_for_its_responses() {
    // A READ of the whole MR (8 responses) with a burst of 3, then a WRITE
    // with a key the rig does not have. The NAK waits behind the five
    // responses still owed, which are still built three at a time, and
    // the QP goes to ERR once the NAK has left. A good WRITE that comes
    // meanwhile is dropped, as a QP in ERR drops it.
    let mut rig = Rig::with_config(burst(3));
    let now = rig.now;
    let req = read(&rig, EPSN, 0, MR_LEN as u32);
    assert_eq!(rig.frame(&req).len(), 3);
    let mut ext = rig.mr_reth(0, 8);
    if let Some(r) = ext.reth.as_mut() {
        r.rkey = Mkey::from_raw(rig.mr.raw() ^ 0x100);
    }
    let bad = rig.request(BthOpcode::RcRdmaWriteOnly, EPSN + 8, ext, &[1; 8]);
    assert!(rig.frame(&bad).is_empty(), "nothing built for the NAK yet");
    assert_eq!(rig.state(), QpState::Rts, "ERR once the NAK has left");
    let dropped = rig.counters().rx_dropped;
    let good = rig.write_only(EPSN + 8, 6000, &[2; 8]);
    assert!(rig.frame(&good).is_empty());
    assert_eq!(rig.counters().rx_dropped, dropped + 1, "the good WRITE");
    let mut sent = Vec::new();
    while rig.nic.resume_transmit(now, &mut rig.bus) {
        sent.push(rig.transmitted());
    }
    sent.push(rig.transmitted());
    let ops: Vec<Vec<BthOpcode>> = sent
        .iter()
        .map(|fs| {
            let op = |f: &Frame| parse_roce(&f.bytes).unwrap().repr.bth.opcode;
            fs.iter().map(op).collect()
        })
        .collect();
    use BthOpcode::*;
    let middle = RcRdmaReadResponseMiddle;
    assert_eq!(
        ops,
        [
            vec![middle, middle, middle],
            vec![middle, RcRdmaReadResponseLast, RcAck],
            vec![],
        ],
        "a burst at a time, then the NAK"
    );
    assert_ended_by_access_nak(&mut rig, &sent[1][2], EPSN + 8);
}

/// Checks that `nak` NAKs `psn` with a remote access error, and that the
/// rig's QP went to ERR for it: its event raised, the error counted.
fn assert_ended_by_access_nak(rig: &mut Rig, nak: &Frame, psn: u32) {
    let r = parse_roce(&nak.bytes).unwrap().repr;
    assert_eq!(r.bth.opcode, BthOpcode::RcAck);
    assert_eq!(r.bth.psn, Psn::new(psn));
    assert_eq!(
        r.ext.aeth.map(|a| a.syndrome),
        Some(AethSyndrome::Nak(NakCode::RemoteAccessErr))
    );
    assert_eq!(rig.state(), QpState::Err);
    assert_eq!(rig.events(), [NicEvent::QpFatal(rig.qpn)]);
    assert_eq!(rig.counters().resp_remote_access_errors, 1);
}

#[test]
fn a_nak_that_never_left_is_not_counted() {
    // A READ of 5 responses with a burst of 2, its MR destroyed once the
    // first two left, and a WRITE to the destroyed key behind it: the
    // WRITE's NAK waits behind the READ, whose next response NAKs first
    // and ends the QP. One NAK left, one error counted.
    let mut rig = Rig::with_config(burst(2));
    let now = rig.now;
    let req = read(&rig, EPSN, 0, 5000);
    assert_eq!(rig.frame(&req).len(), 2);
    let mr = rig.mr;
    rig.exec(Command::DestroyMkey(mr)).unwrap();
    let w = rig.write_only(EPSN + 5, 6000, &[7; 8]);
    assert!(rig.frame(&w).is_empty(), "the WRITE's NAK waits");
    rig.nic.resume_transmit(now, &mut rig.bus);
    let out = rig.transmitted();
    assert_eq!(out.len(), 1, "the READ's NAK alone");
    assert_ended_by_access_nak(&mut rig, &out[0], EPSN + 2);
}

#[test]
fn memory_gone_while_a_read_is_answered_naks_where_the_responses_stop() {
    // A READ of 5 responses with a burst of 2; the MR is destroyed once
    // the first two left. The third NAKs (remote access error) and the QP
    // fails, as for a READ whose memory was gone when it arrived.
    let mut rig = Rig::with_config(burst(2));
    let req = read(&rig, EPSN, 0, 5000);
    let first = rig.frame(&req);
    assert_eq!(first.len(), 2);
    let mr = rig.mr;
    rig.exec(Command::DestroyMkey(mr)).unwrap();
    let now = rig.now;
    rig.nic.resume_transmit(now, &mut rig.bus);
    let out = rig.transmitted();
    assert_eq!(out.len(), 1, "the NAK alone");
    assert_ended_by_access_nak(&mut rig, &out[0], EPSN + 2);
    assert!(!rig.nic.resume_transmit(now, &mut rig.bus), "nothing owed");
}

/// The rig with `cfg` and its MR filled with a pattern, after each of
/// `requests` is handed to it, the frames taken after each (and, with
/// `resume`, one `resume_transmit` more), then what it still owes: the
/// frames' bytes in order, and the counters.
fn drive(
    cfg: NicConfig,
    requests: &dyn Fn(&Rig) -> Vec<Vec<u8>>,
    resume: bool,
) -> (Vec<Vec<u8>>, NicCounters) {
    let mut rig = Rig::with_config(cfg);
    let data: Vec<u8> = (0..MR_LEN).map(|i| (i % 251) as u8).collect();
    rig.mem.write(rig.mr_buf, &data).unwrap();
    let now = rig.now;
    let mut frames = Vec::new();
    for req in requests(&rig) {
        frames.extend(rig.frame(&req).into_iter().map(|f| f.bytes));
        if resume {
            rig.nic.resume_transmit(now, &mut rig.bus);
            frames.extend(rig.transmitted().into_iter().map(|f| f.bytes));
        }
    }
    while rig.nic.resume_transmit(now, &mut rig.bus) {
        frames.extend(rig.transmitted().into_iter().map(|f| f.bytes));
    }
    (frames, rig.counters())
}

#[test]
fn acks_owed_behind_a_read_merge_where_held_acks_would() {
    // A READ of 5 responses, then two WRITEs that ask for an ACK, the
    // frames taken after each: a NIC without a burst sends both ACKs (the
    // first left before the second came), and so must one that owed them.
    let requests = |rig: &Rig| {
        vec![
            read(rig, EPSN, 0, 5000),
            rig.write_only(EPSN + 5, 6000, &[7; 8]),
            rig.write_only(EPSN + 6, 6100, &[8; 8]),
        ]
    };
    for resume in [true, false] {
        let (whole, c0) = drive(NicConfig::new(LOCAL), &requests, resume);
        assert_eq!(whole.len(), 7);
        for b in [1, 2, 4] {
            let (frames, c) = drive(burst(b), &requests, resume);
            assert!(
                frames == whole,
                "burst {b}, resume {resume}: the same frames"
            );
            assert_eq!(c, c0, "burst {b}, resume {resume}");
        }
    }
}

#[test]
fn a_write_after_a_read_may_show_in_its_responses_built_later() {
    // The READ reads bytes 0..5000; the WRITE after it writes 8 bytes at
    // 4500, which its LAST response carries. Without a burst every
    // response was read when the READ came, before the WRITE; with a
    // burst of 1, the LAST is read after the WRITE took place, as IBA
    // allows a responder (a requester that must read first fences).
    let requests = |rig: &Rig| {
        vec![
            read(rig, EPSN, 0, 5000),
            rig.write_only(EPSN + 5, 4500, &[0xee; 8]),
        ]
    };
    let (whole, _) = drive(NicConfig::new(LOCAL), &requests, false);
    let (later, _) = drive(burst(1), &requests, false);
    let payload = |f: &[u8]| f[parse_roce(f).unwrap().payload].to_vec();
    let at = 4500 - 4 * 1024;
    assert_eq!(whole.len(), later.len());
    assert!(whole[..4] == later[..4], "the first four responses");
    let before: Vec<u8> = (4500..4508).map(|i| (i % 251) as u8).collect();
    assert_eq!(payload(&whole[4])[at..at + 8], before[..]);
    assert_eq!(payload(&later[4])[at..at + 8], [0xee; 8]);
    assert!(whole[5..] == later[5..], "the ACK");
}

#[test]
fn answers_a_qp_in_error_drops_are_not_counted_as_sent() {
    // A READ (burst 1: four responses owed), a WRITE whose ACK waits
    // behind them; then a malformed send WQE sends the QP to ERR, which
    // sends nothing more. The counters show what left.
    let mut rig = Rig::with_config(burst(1));
    let now = rig.now;
    let req = read(&rig, EPSN, 0, 5000);
    let mut sent = rig.frame(&req).len();
    let w = rig.write_only(EPSN + 5, 6000, &[7; 8]);
    sent += rig.frame(&w).len();
    let mut bad = rdma_wqe(&rig, 0, WqeOpcode::RdmaWrite, 8);
    ctrl(&mut bad, 0, WqeOpcode::RdmaWrite, rig.qpn.get(), 0);
    rig.write_sq(0, &bad);
    rig.ring(0, u8::from(WqeOpcode::RdmaWrite), 3);
    assert_eq!(rig.state(), QpState::Err);
    while rig.nic.resume_transmit(now, &mut rig.bus) {
        sent += rig.transmitted().len();
    }
    sent += rig.transmitted().len();
    assert_eq!(sent, 1, "the first response alone");
    assert_eq!(rig.counters().tx_packets, 1);
}

#[test]
fn what_a_read_owes_outlives_a_link_that_went_down() {
    // The link goes down before the runtime takes a READ's first
    // responses, and comes back. The peer asks for the READ again, then
    // sends a WRITE: both are answered, as by a NIC without a burst,
    // by a runtime that resumes also when it found nothing to send.
    fn flush(rig: &mut Rig) -> usize {
        let now = rig.now;
        let mut n = 0;
        loop {
            let out = rig.transmitted();
            n += out.len();
            if !rig.nic.resume_transmit(now, &mut rig.bus) {
                return n;
            }
        }
    }
    for cfg in [NicConfig::new(LOCAL), burst(2)] {
        let what = format!("read_burst {:?}", cfg.read_burst);
        let mut rig = Rig::with_config(cfg);
        let req = read(&rig, EPSN, 0, 5000);
        let now = rig.now;
        rig.nic.handle_frame(now, &req, &mut rig.bus);
        rig.exec(Command::AccessPaos(Some(false))).unwrap();
        assert_eq!(flush(&mut rig), 0, "{what}: the link is down");
        rig.exec(Command::AccessPaos(Some(true))).unwrap();
        rig.nic.handle_frame(now, &req, &mut rig.bus);
        assert_eq!(flush(&mut rig), 5, "{what}: the READ asked again");
        let w = rig.write_only(EPSN + 5, 6000, &[7; 8]);
        rig.nic.handle_frame(now, &w, &mut rig.bus);
        assert_eq!(flush(&mut rig), 1, "{what}: the WRITE's ACK");
    }
}
