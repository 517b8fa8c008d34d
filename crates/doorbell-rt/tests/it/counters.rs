//! RC reliability, one lost, copied or late packet at a time, and the
//! counters each case must move (and those it must not). Faults are
//! scripted on the frames a NIC sends: "drop the second SEND MIDDLE", so
//! each case is exact.

use std::time::Duration;

use doorbell_device::NicCounters;
use doorbell_rt::Fate;
use doorbell_verbs::{QpState, RemoteAddr, WcStatus, WrOpcode};
use doorbell_wire::{AethSyndrome, BthOpcode, NakCode};

use crate::common::*;
use crate::net::*;

const MTU: u32 = 1024;

/// An ACK timeout of 4.096 µs × 2^14 ≈ 67 ms: long enough never to fire
/// spuriously while other tests load the machine, so that each count is
/// exact; short enough for the cases that wait for it.
fn timers() -> Timers {
    Timers {
        mtu: MTU,
        timeout: 14,
        ..Timers::default()
    }
}

fn remote(p: &Pair, off: u64) -> RemoteAddr {
    RemoteAddr {
        addr: p.b.mr.addr() + off,
        rkey: p.b.mr.rkey(),
    }
}

/// The error counters of the reliability rules, by name.
fn errors(c: &NicCounters) -> [(&'static str, u64); 10] {
    [
        ("out_of_sequence", c.out_of_sequence),
        ("packet_seq_err", c.packet_seq_err),
        ("implied_nak_seq_err", c.implied_nak_seq_err),
        ("duplicate_request", c.duplicate_request),
        ("local_ack_timeout_err", c.local_ack_timeout_err),
        ("rnr_nak_retry_err", c.rnr_nak_retry_err),
        ("out_of_buffer", c.out_of_buffer),
        (
            "req_transport_retries_exceeded",
            c.req_transport_retries_exceeded,
        ),
        ("req_rnr_retries_exceeded", c.req_rnr_retries_exceeded),
        ("rx_icrc_errors", c.rx_icrc_errors),
    ]
}

/// Asserts that the error counters of `c` are zero except those named.
fn only(c: &NicCounters, expect: &[(&str, u64)], who: &str) {
    for (name, v) in errors(c) {
        let want = expect
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v);
        assert_eq!(v, want, "{who}: {name}");
    }
}

fn nak_count(log: &[Seen]) -> usize {
    log.iter()
        .filter(|s| {
            s.opcode == BthOpcode::RcAck
                && matches!(
                    s.repr.repr.ext.aeth.map(|a| a.syndrome),
                    Some(AethSyndrome::Nak(NakCode::PsnSeqErr))
                )
        })
        .count()
}

#[test]
fn clean_traffic_moves_no_error_counter() {
    let p = fabric_pair(Default::default(), caps(16), 1 << 20, timers());
    let data = pattern(5000, 1);
    p.a.mr.write(0, &data).unwrap();
    let sge = [p.a.mr.sge(0, 5000).unwrap()];
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 8192).unwrap()]);
    post(&p.a.qp, signaled(1, &sge, WrOpcode::Send));
    post(
        &p.a.qp,
        signaled(2, &sge, WrOpcode::RdmaWrite(remote(&p, 8192))),
    );
    let rd = [p.a.mr.sge(16384, 5000).unwrap()];
    post(
        &p.a.qp,
        signaled(3, &rd, WrOpcode::RdmaRead(remote(&p, 8192))),
    );
    let word = [p.a.mr.sge(32768, 8).unwrap()];
    post(
        &p.a.qp,
        signaled(
            4,
            &word,
            WrOpcode::AtomicFetchAdd {
                remote: remote(&p, 65536),
                add: 1,
            },
        ),
    );
    let ids: Vec<u64> = wait(&p.a.cq, 4).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    assert!(wait(&p.b.cq, 1)[0].is_ok());
    let (a, b) = settled(&p);
    only(&a, &[], "A");
    only(&b, &[], "B");
    assert_eq!(a.tx_retransmits, 0);
    assert_eq!(
        (
            b.rx_write_requests,
            b.rx_read_requests,
            b.rx_atomic_requests
        ),
        (1, 1, 1)
    );
    // The names the kernel uses.
    let names: Vec<&str> = b.hw_counters().iter().map(|(n, _)| *n).collect();
    for n in [
        "out_of_sequence",
        "packet_seq_err",
        "duplicate_request",
        "local_ack_timeout_err",
        "rnr_nak_retry_err",
        "req_transport_retries_exceeded",
        "req_rnr_retries_exceeded",
        "rx_icrc_encapsulated",
        "implied_nak_seq_err",
        "resp_remote_access_errors",
        "req_remote_access_errors",
        "req_remote_invalid_request",
        "resp_local_length_error",
        "req_cqe_error",
        "req_cqe_flush_error",
        "resp_cqe_error",
        "resp_cqe_flush_error",
    ] {
        assert!(names.contains(&n), "{n}");
    }
    // In the kernel's order: sorted by name.
    assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
}

#[test]
fn a_lost_request_packet_is_nakked_once_and_sent_again_from_the_gap() {
    // A SEND of 10 packets; the second MIDDLE (PSN first + 2) is lost once.
    let (oa, la) = tap(nth_of(BthOpcode::RcSendMiddle, 1, Fate::Drop));
    let (ob, lb) = tap(|_, _| Fate::Deliver);
    let p = fabric_pair([oa, ob], caps(16), 1 << 20, timers());
    let len = 10 * MTU as usize;
    let data = pattern(len, 2);
    p.a.mr.write(0, &data).unwrap();
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, len as u32).unwrap()]);
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, len as u32).unwrap()], WrOpcode::Send),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let r = wait(&p.b.cq, 1);
    assert_eq!((r.len(), r[0].byte_len), (1, len as u32));
    let mut got = vec![0u8; len];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let (a, b) = settled(&p);
    // The 7 packets after the gap were out of sequence; B said so once.
    only(&b, &[("out_of_sequence", 7)], "B");
    only(&a, &[("packet_seq_err", 1)], "A");
    assert_eq!(nak_count(&lb.lock().unwrap()), 1, "one NAK per gap");
    // Go-back-N from the lost PSN: 8 packets again, the same PSNs.
    assert_eq!(a.tx_retransmits, 8);
    let psns: Vec<u32> = la.lock().unwrap().iter().map(|s| s.psn).collect();
    let first = psns[0];
    let again: Vec<u32> = psns[10..]
        .iter()
        .map(|x| x.wrapping_sub(first) & 0xff_ffff)
        .collect();
    assert_eq!(again, (2..10).collect::<Vec<_>>());
}

#[test]
fn a_lost_ack_times_out_and_the_duplicate_is_acknowledged_not_executed() {
    let (ob, _) = tap(nth_of(BthOpcode::RcAck, 0, Fate::Drop));
    let p = fabric_pair([Default::default(), ob], caps(16), 1 << 16, timers());
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 256).unwrap()]);
    post_recv(&p.b.qp, 2, &[p.b.mr.sge(256, 256).unwrap()]);
    p.a.mr.write(0, &pattern(100, 3)).unwrap();
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, 100).unwrap()], WrOpcode::Send),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    assert_eq!(wait(&p.b.cq, 1)[0].wr_id, 1);
    let (a, b) = settled(&p);
    only(&a, &[("local_ack_timeout_err", 1)], "A");
    only(&b, &[("duplicate_request", 1)], "B");
    assert_eq!(a.tx_retransmits, 1);
    // The duplicate did not take the second receive.
    let mut wc = wait_none(&p.b);
    assert!(wc.is_empty(), "{wc:?}");
    post(
        &p.a.qp,
        signaled(2, &[p.a.mr.sge(0, 100).unwrap()], WrOpcode::Send),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    wc = wait(&p.b.cq, 1);
    assert_eq!(wc[0].wr_id, 2);
}

/// Polls B's CQ for a moment; returns what came.
fn wait_none(s: &Side) -> Vec<doorbell_verbs::Wc> {
    std::thread::sleep(Duration::from_millis(20));
    let mut buf = [blank(); 4];
    let n = s.cq.poll(&mut buf).unwrap();
    buf[..n].to_vec()
}

fn blank() -> doorbell_verbs::Wc {
    doorbell_verbs::Wc::default()
}

#[test]
fn a_lost_read_response_is_asked_for_again_from_the_gap() {
    // A READ of 5 responses; the one at PSN first + 2 is lost once.
    let (oa, la) = tap(|_, _| Fate::Deliver);
    let (ob, _) = tap(nth_of(BthOpcode::RcRdmaReadResponseMiddle, 1, Fate::Drop));
    let p = fabric_pair([oa, ob], caps(16), 1 << 16, timers());
    let len = 5 * MTU as usize;
    let data = pattern(len, 4);
    p.b.mr.write(100, &data).unwrap();
    let dst = [p.a.mr.sge(0, len as u32).unwrap()];
    post(
        &p.a.qp,
        signaled(1, &dst, WrOpcode::RdmaRead(remote(&p, 100))),
    );
    let w = wait(&p.a.cq, 1)[0];
    assert_eq!((w.status, w.byte_len), (WcStatus::Success, len as u32));
    let mut got = vec![0u8; len];
    p.a.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    // No ACK timeout was waited for: it would count as
    // local_ack_timeout_err. (virtual_time.rs has the exact time.)
    let (a, b) = settled(&p);
    only(&a, &[("implied_nak_seq_err", 1)], "A");
    only(&b, &[("duplicate_request", 1)], "B");
    assert_eq!(b.rx_read_requests, 2);
    // The second request asks for the rest only: from PSN first + 2, at
    // VA + 2 MTUs, 3 MTUs long.
    let log = la.lock().unwrap();
    let reqs: Vec<_> = log
        .iter()
        .filter(|s| s.opcode == BthOpcode::RcRdmaReadRequest)
        .collect();
    assert_eq!(reqs.len(), 2);
    let (r0, r1) = (
        reqs[0].repr.repr.ext.reth.unwrap(),
        reqs[1].repr.repr.ext.reth.unwrap(),
    );
    assert_eq!(reqs[1].psn, (reqs[0].psn + 2) & 0xff_ffff);
    assert_eq!(r1.va, r0.va + 2 * u64::from(MTU));
    assert_eq!(r1.dma_len, 3 * MTU);
}

#[test]
fn a_lost_last_read_response_times_out_and_the_tail_is_read_again() {
    let (ob, _) = tap(nth_of(BthOpcode::RcRdmaReadResponseLast, 0, Fate::Drop));
    let p = fabric_pair([Default::default(), ob], caps(16), 1 << 16, timers());
    let len = 3 * MTU as usize - 7;
    let data = pattern(len, 5);
    p.b.mr.write(0, &data).unwrap();
    let dst = [p.a.mr.sge(0, len as u32).unwrap()];
    post(
        &p.a.qp,
        signaled(1, &dst, WrOpcode::RdmaRead(remote(&p, 0))),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let mut got = vec![0u8; len];
    p.a.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let (a, b) = settled(&p);
    only(&a, &[("local_ack_timeout_err", 1)], "A");
    only(&b, &[("duplicate_request", 1)], "B");
    assert_eq!(a.tx_retransmits, 1, "one READ request, for the last MTU");
}

#[test]
fn an_atomic_whose_answer_is_lost_is_replayed_never_executed_twice() {
    let (ob, _) = tap(|s, _| {
        // Every first answer to an atomic is lost.
        if s.opcode == BthOpcode::RcAtomicAck && s.repr.repr.ext.aeth.is_some() {
            thread_local_drop(s.psn)
        } else {
            Fate::Deliver
        }
    });
    let p = fabric_pair([Default::default(), ob], caps(16), 1 << 16, timers());
    p.b.mr.write(0, &100u64.to_le_bytes()).unwrap();
    let old = [p.a.mr.sge(0, 8).unwrap()];
    post(
        &p.a.qp,
        signaled(
            1,
            &old,
            WrOpcode::AtomicFetchAdd {
                remote: remote(&p, 0),
                add: 5,
            },
        ),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let word = |s: &Side| {
        let mut w = [0u8; 8];
        s.mr.read(0, &mut w).unwrap();
        u64::from_le_bytes(w)
    };
    assert_eq!((word(&p.a), word(&p.b)), (100, 105));
    post(
        &p.a.qp,
        signaled(
            2,
            &old,
            WrOpcode::AtomicCmpSwp {
                remote: remote(&p, 0),
                compare: 105,
                swap: 7,
            },
        ),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    // Executed again, the CAS would have answered 7.
    assert_eq!((word(&p.a), word(&p.b)), (105, 7));
    let (a, b) = settled(&p);
    only(&a, &[("local_ack_timeout_err", 2)], "A");
    only(&b, &[("duplicate_request", 2)], "B");
    assert_eq!(b.rx_atomic_requests, 2, "each executed once");
}

/// Drops the first atomic ACK of each PSN (a policy runs on one thread).
fn thread_local_drop(psn: u32) -> Fate {
    thread_local! {
        static SEEN: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SEEN.with(|s| {
        let mut s = s.borrow_mut();
        if s.contains(&psn) {
            Fate::Deliver
        } else {
            s.push(psn);
            Fate::Drop
        }
    })
}

#[test]
fn an_ack_past_a_lost_atomic_answer_asks_for_it_again_at_once() {
    // FAA then SEND: the atomic's answer is lost, the SEND's ACK comes,
    // so the answer is known lost without waiting for the timer.
    let (ob, _) = tap(nth_of(BthOpcode::RcAtomicAck, 0, Fate::Drop));
    let t = Timers {
        // 4.096 µs × 2^17 ≈ 537 ms.
        timeout: 17,
        ..timers()
    };
    let p = fabric_pair([Default::default(), ob], caps(16), 1 << 16, t);
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(1024, 64).unwrap()]);
    p.b.mr.write(0, &1u64.to_le_bytes()).unwrap();
    let old = [p.a.mr.sge(0, 8).unwrap()];
    post(
        &p.a.qp,
        signaled(
            1,
            &old,
            WrOpcode::AtomicFetchAdd {
                remote: remote(&p, 0),
                add: 1,
            },
        ),
    );
    post(
        &p.a.qp,
        signaled(2, &[p.a.mr.sge(64, 32).unwrap()], WrOpcode::Send),
    );
    let ids: Vec<u64> = wait(&p.a.cq, 2).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2], "completions in posting order");
    let mut w = [0u8; 8];
    p.b.mr.read(0, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 2);
    // No ACK timeout was waited for: it would count as
    // local_ack_timeout_err. (virtual_time.rs has the exact time.)
    let (a, b) = settled(&p);
    only(&a, &[("implied_nak_seq_err", 1)], "A");
    only(&b, &[("duplicate_request", 1)], "B");
}

#[test]
fn duplicated_requests_are_answered_again_and_executed_once() {
    // Every request packet A sends arrives twice.
    let (oa, _) = tap(|s, _| {
        if s.opcode.is_request() {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    });
    let p = fabric_pair([oa, Default::default()], caps(16), 1 << 16, timers());
    for i in 0..3 {
        post_recv(&p.b.qp, i, &[p.b.mr.sge(4096 * (i + 1), 4096).unwrap()]);
    }
    let data = pattern(3000, 6);
    p.a.mr.write(0, &data).unwrap();
    let sge = [p.a.mr.sge(0, 3000).unwrap()];
    post(&p.a.qp, signaled(1, &sge, WrOpcode::Send));
    let old = [p.a.mr.sge(8192, 8).unwrap()];
    post(
        &p.a.qp,
        signaled(
            2,
            &old,
            WrOpcode::AtomicFetchAdd {
                remote: remote(&p, 0),
                add: 3,
            },
        ),
    );
    let rd = [p.a.mr.sge(16384, 3000).unwrap()];
    post(
        &p.a.qp,
        signaled(3, &rd, WrOpcode::RdmaRead(remote(&p, 4096))),
    );
    let ids: Vec<u64> = wait(&p.a.cq, 3).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2, 3]);
    let wcs = wait(&p.b.cq, 1);
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (0, 3000));
    assert!(wait_none(&p.b).is_empty(), "one receive taken, not two");
    let mut w = [0u8; 8];
    p.b.mr.read(0, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 3, "added once");
    let mut got = vec![0u8; 3000];
    p.a.mr.read(16384, &mut got).unwrap();
    assert_eq!(got, data, "READ of what the SEND put there");
    let (a, b) = settled(&p);
    // 3 SEND packets, 1 atomic, 1 READ request, each once more.
    assert_eq!(b.duplicate_request, 5);
    assert_eq!(b.rx_atomic_requests, 1);
    assert_eq!(a.req_transport_retries_exceeded, 0);
    assert_eq!((a.local_ack_timeout_err, b.out_of_sequence), (0, 0));
}

#[test]
fn a_late_packet_is_out_of_sequence_and_its_copy_a_duplicate() {
    // The FIRST of a 4-packet WRITE is held back 30 ms: the 3 after it are
    // out of sequence, B NAKs, A goes back; the late FIRST is a duplicate.
    let (oa, _) = tap(nth_of(
        BthOpcode::RcRdmaWriteFirst,
        0,
        Fate::Delay(doorbell_types::Duration::from_us(30_000)),
    ));
    let p = fabric_pair([oa, Default::default()], caps(16), 1 << 16, timers());
    let len = 4 * MTU as usize;
    let data = pattern(len, 7);
    p.a.mr.write(0, &data).unwrap();
    let sge = [p.a.mr.sge(0, len as u32).unwrap()];
    post(
        &p.a.qp,
        signaled(1, &sge, WrOpcode::RdmaWrite(remote(&p, 0))),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    // The late FIRST comes when the relay lets it go: wait for it, not for
    // a time (virtual_time.rs has it at exactly 30 ms).
    wait_counters(&p.b, "the late FIRST", |c| c.duplicate_request >= 1);
    let (a, b) = settled(&p);
    only(&a, &[("packet_seq_err", 1)], "A");
    only(&b, &[("out_of_sequence", 3), ("duplicate_request", 1)], "B");
    let mut got = vec![0u8; len];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
}

#[test]
fn psn_sequence_naks_count_against_retry_cnt() {
    // With retry_cnt 0 the first go-back-N is one too many.
    let (oa, _) = tap(nth_of(BthOpcode::RcSendFirst, 0, Fate::Drop));
    let t = Timers {
        retry_cnt: 0,
        ..timers()
    };
    let p = fabric_pair([oa, Default::default()], caps(16), 1 << 16, t);
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 4096).unwrap()]);
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, 2 * MTU).unwrap()], WrOpcode::Send),
    );
    let w = wait(&p.a.cq, 1)[0];
    assert_eq!(w.status, WcStatus::RetryExcErr);
    assert_eq!(p.a.qp.query().unwrap().0, QpState::Err);
    let (a, b) = settled(&p);
    only(
        &a,
        &[("packet_seq_err", 1), ("req_transport_retries_exceeded", 1)],
        "A",
    );
    only(&b, &[("out_of_sequence", 1)], "B");
}

#[test]
fn rnr_naks_count_at_both_ends() {
    let t = Timers {
        // 0.16 ms between tries.
        min_rnr_timer: 8,
        ..timers()
    };
    let p = fabric_pair(Default::default(), caps(16), 1 << 16, t);
    post(
        &p.a.qp,
        signaled(1, &[p.a.mr.sge(0, 64).unwrap()], WrOpcode::Send),
    );
    // Two refusals, then the receive (virtual_time.rs counts them exactly
    // in 10 ms).
    wait_counters(&p.b, "two RNR NAKs", |c| c.rnr_nak_sent >= 2);
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 64).unwrap()]);
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    let (a, b) = settled(&p);
    let naks = b.rnr_nak_sent;
    assert!(naks >= 2, "{naks} RNR NAKs");
    only(&a, &[("rnr_nak_retry_err", naks)], "A");
    only(&b, &[("out_of_buffer", naks)], "B");
    assert_eq!(a.tx_retransmits, naks);
}

#[test]
fn a_message_longer_than_the_window_streams_while_later_wqes_wait() {
    // 200 packets (more than the 128 PSNs that may be in flight at MTU
    // 2048), then two READs, the second held back by max_rd_atomic 1: the
    // window must still move on each ACK, not on the ACK timer.
    let (oa, la) = tap(|_, _| Fate::Deliver);
    let t = Timers {
        mtu: 2048,
        ..timers()
    };
    let p = fabric_pair([oa, Default::default()], caps(16), 1 << 20, t);
    let len = 200 * 2048;
    let data = pattern(len, 8);
    p.a.mr.write(0, &data).unwrap();
    let rd = [p.a.mr.sge(len as u64, 100).unwrap()];
    p.a.qp
        .post_send(&[
            signaled(
                1,
                &[p.a.mr.sge(0, len as u32).unwrap()],
                WrOpcode::RdmaWrite(remote(&p, 0)),
            ),
            signaled(2, &rd, WrOpcode::RdmaRead(remote(&p, 0))),
            signaled(3, &rd, WrOpcode::RdmaRead(remote(&p, 0))),
        ])
        .unwrap();
    let ids: Vec<u64> = wait(&p.a.cq, 3).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2, 3]);
    let mut got = vec![0u8; len];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let (a, b) = settled(&p);
    only(&a, &[], "A");
    only(&b, &[], "B");
    let log = la.lock().unwrap();
    let writes = log
        .iter()
        .filter(|s| s.opcode.is_request() && s.opcode != BthOpcode::RcRdmaReadRequest)
        .count();
    assert_eq!(writes, 200);
    assert!(log.iter().filter(|s| s.ack_req).count() >= 4);
}

/// With every ACK lost, a requester sends its window and stops: 128
/// packets at MTU 4096 and 2048, and 256 KiB of packets below that (256
/// at MTU 1024, 1024 at MTU 256), so that a small MTU does not shrink
/// what is in flight.
#[test]
fn the_window_holds_128_packets_or_256_kib_whichever_is_more() {
    for (mtu, window) in [(4096, 128), (2048, 128), (1024, 256), (256, 1024)] {
        let (oa, la) = tap(|_, _| Fate::Deliver);
        let (ob, _) = tap(|_, _| Fate::Drop);
        let t = Timers { mtu, ..timers() };
        let len = (window + 40) * mtu as usize;
        let p = fabric_pair([oa, ob], caps(16), len, t);
        p.a.qp
            .post_send(&[signaled(
                1,
                &[p.a.mr.sge(0, len as u32).unwrap()],
                WrOpcode::RdmaWrite(remote(&p, 0)),
            )])
            .unwrap();
        // PSNs sent, each once however often it went (a timer may resend
        // from the first one meanwhile).
        let psns = || {
            let log = la.lock().unwrap();
            assert!(log.iter().all(|s| s.opcode.is_request()), "MTU {mtu}");
            log.iter()
                .map(|s| s.psn)
                .collect::<std::collections::BTreeSet<_>>()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while psns().len() < window && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        let sent = psns();
        assert_eq!(sent.len(), window, "MTU {mtu}");
        // One run from the first PSN (the PSN space wraps at 2^24).
        let first = la.lock().unwrap()[0].psn;
        let behind = |psn: u32| (psn.wrapping_sub(first) & 0xff_ffff) as usize;
        assert!(sent.iter().all(|&psn| behind(psn) < window), "MTU {mtu}");
    }
}

/// On the in-process fabric a frame is checked against its ICRC only
/// where something could have changed it: behind a fault relay the
/// corrupted copy is caught and counted, as over UDP.
#[test]
fn the_fabric_checks_the_icrc_of_frames_that_passed_a_relay() {
    let p = fabric_pair(
        [corrupting_first_send(), Default::default()],
        caps(16),
        1 << 16,
        timers(),
    );
    let (_, b) = send_through_a_corruption(&p);
    assert_eq!(b.rx_packets, 1, "only the good copy was taken");
}

/// Frames that arrive together have their ICRCs checked two at a time:
/// a corrupted frame is dropped and counted alone, whichever of a pair it
/// is, and the good one beside it is taken.
#[test]
fn a_corrupted_frame_checked_beside_a_good_one_is_dropped_alone() {
    let p = fabric_pair(
        [
            tap(nth_of(
                BthOpcode::RcSendOnly,
                1,
                // A bit of the UDP source port, which nothing but the ICRC
                // would notice.
                Fate::Corrupt { at: 21, mask: 0x01 },
            ))
            .0,
            Default::default(),
        ],
        caps(16),
        1 << 16,
        timers(),
    );
    let data = pattern(2000, 9);
    p.a.mr.write(0, &data).unwrap();
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 1000).unwrap()]);
    post_recv(&p.b.qp, 2, &[p.b.mr.sge(1000, 1000).unwrap()]);
    let (sa, sb) = (
        [p.a.mr.sge(0, 1000).unwrap()],
        [p.a.mr.sge(1000, 1000).unwrap()],
    );
    // One post, so that both frames leave (and arrive) together.
    p.a.qp
        .post_send(&[
            signaled(1, &sa, WrOpcode::Send),
            signaled(2, &sb, WrOpcode::Send),
        ])
        .unwrap();
    assert!(wait(&p.a.cq, 2).iter().all(|c| c.is_ok()));
    assert!(wait(&p.b.cq, 2).iter().all(|c| c.byte_len == 1000));
    let mut got = vec![0u8; 2000];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let (a, b) = settled(&p);
    assert_eq!(b.rx_icrc_errors, 1, "the corrupted copy, alone");
    assert_eq!(b.rx_packets, 2, "the first SEND and the second's good copy");
    assert_eq!(a.tx_retransmits, 1);
}
