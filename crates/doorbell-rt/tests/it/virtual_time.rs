//! The timing tests, on the virtual clock: two RC QPs of one NIC on a
//! [`LoopbackLink`], with scripted faults on its loopback path where a case
//! needs them. Nothing moves until the test advances the clock, so each
//! test asserts the exact virtual time of a retry or a completion and the
//! exact number of NAKs and retries, where the live versions of these tests
//! could only bound them by how long a sleep took.
//!
//! One NIC holds both QPs, so its counters count both ends: the
//! requester's (`rnr_nak_retry_err`, `implied_nak_seq_err`, ...) and the
//! responder's (`rnr_nak_sent`, `duplicate_request`, ...) in one set.

use std::sync::Arc;

use doorbell_device::NicCounters;
use doorbell_rt::{Fate, FaultPolicy, LoopbackLink};
use doorbell_types::{Duration, Instant, Psn};
use doorbell_verbs::{
    Access, Context, Cq, Mr, Qp, QpCaps, QpInitAttr, QpState, QpType, RcEndpoint, RecvWr,
    RemoteAddr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};
use doorbell_wire::BthOpcode;

use crate::common::{FULL, pattern};
use crate::net::{Timers, connect_qp, nth_of, tap_policy};

const MR_LEN: usize = 1 << 16;

/// Two RC QPs of one NIC: A the requester, B the responder, each with its
/// own CQ and MR.
struct Loop {
    link: Arc<LoopbackLink>,
    _ctx: Context,
    a: Qp,
    b: Qp,
    cq_a: Cq,
    cq_b: Cq,
    mr_a: Mr,
    mr_b: Mr,
}

impl Loop {
    /// Connects A with `ta` and B with `tb` on `link` (B's `min_rnr_timer`
    /// is the wait it asks of A after an RNR NAK).
    fn on(link: LoopbackLink, ta: Timers, tb: Timers) -> Self {
        let link = Arc::new(link);
        let ctx = Context::open(link.clone()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cap = QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let cq_a = ctx.create_cq(64).unwrap();
        let cq_b = ctx.create_cq(64).unwrap();
        let qp = |cq: &Cq| {
            pd.create_qp(&QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                cap,
                sq_sig_all: false,
                srq: None,
            })
            .unwrap()
        };
        let (a, b) = (qp(&cq_a), qp(&cq_b));
        let ea = RcEndpoint {
            gid: ctx.gid(),
            qpn: a.qpn(),
            psn: Psn::new(0x00ff_fffe),
        };
        let eb = RcEndpoint {
            gid: ctx.gid(),
            qpn: b.qpn(),
            psn: Psn::new(0x10),
        };
        connect_qp(&a, &ea, &eb, ta);
        connect_qp(&b, &eb, &ea, tb);
        let mr_a = pd.reg_mr(MR_LEN, Access(FULL)).unwrap();
        let mr_b = pd.reg_mr(MR_LEN, Access(FULL)).unwrap();
        Self {
            link,
            _ctx: ctx,
            a,
            b,
            cq_a,
            cq_b,
            mr_a,
            mr_b,
        }
    }

    /// No faults: A asks for RNR retries `rnr_retry` times, B asks for
    /// `min_rnr_timer` between them.
    fn rnr(min_rnr_timer: u8, rnr_retry: u8) -> Self {
        let ta = Timers {
            rnr_retry,
            ..Timers::default()
        };
        let tb = Timers {
            min_rnr_timer,
            ..Timers::default()
        };
        Self::on(LoopbackLink::new("vt", [10, 0, 0, 7]), ta, tb)
    }

    /// Both QPs with `t`, every loopback frame through `policy`.
    fn faulty(policy: impl FaultPolicy + 'static, t: Timers) -> Self {
        Self::on(LoopbackLink::with_faults("vt", [10, 0, 0, 7], policy), t, t)
    }

    fn counters(&self) -> NicCounters {
        self.link.counters(None).1
    }

    fn now(&self) -> Instant {
        self.link.now()
    }

    /// Moves the clock to `t` (not before now).
    fn advance_to(&self, t: Instant) {
        self.link.advance(t.since(self.now()));
    }

    fn remote_b(&self, off: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.mr_b.addr() + off,
            rkey: self.mr_b.rkey(),
        }
    }
}

fn signaled<'a>(wr_id: u64, sg_list: &'a [Sge], opcode: WrOpcode) -> SendWr<'a> {
    SendWr {
        wr_id,
        sg_list,
        opcode,
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}

/// Every completion `cq` holds now.
fn poll(cq: &Cq) -> Vec<Wc> {
    let mut buf = [Wc::default(); 16];
    let mut out = Vec::new();
    loop {
        let n = cq.poll(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn outcome(wcs: &[Wc]) -> Vec<(u64, WcStatus, WcOpcode)> {
    wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect()
}

fn post_recv(qp: &Qp, wr_id: u64, sges: &[Sge]) {
    qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: sges,
    }])
    .unwrap();
}

/// The error counters of the reliability rules that are not zero.
fn errors(c: &NicCounters) -> Vec<(&'static str, u64)> {
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
    .into_iter()
    .filter(|&(_, v)| v != 0)
    .collect()
}

fn us(n: u64) -> Duration {
    Duration::from_us(n)
}

/// One picosecond before `t`.
fn just_before(t: Instant) -> Instant {
    Instant::from_ps(t.as_ps() - 1)
}

// The exact-time form of the live test of this name in errors.rs, which
// checks the same counters on the threaded runtime.
#[test]
fn rnr_retry_seven_waits_until_a_receive_is_posted() {
    // Timer code 8: 160 µs between retries, forever.
    let p = Loop::rnr(8, 7);
    let data = pattern(700, 3);
    p.mr_a.write(0, &data).unwrap();
    let t0 = p.now();
    p.a.post_send(&[signaled(1, &[p.mr_a.sge(0, 700).unwrap()], WrOpcode::Send)])
        .unwrap();
    // Refused at once, then once more at every 160 µs: in 20 ms, 125 tries.
    assert_eq!(p.counters().rnr_nak_sent, 1);
    p.advance_to(t0.add(us(20_000)));
    assert!(poll(&p.cq_a).is_empty(), "still waiting");
    let c = p.counters();
    assert_eq!(c.rnr_nak_sent, 126, "one RNR NAK per try");
    assert_eq!(c.rnr_nak_retry_err, 126, "each RNR NAK retried once");
    assert_eq!(
        errors(&c),
        [("rnr_nak_retry_err", 126), ("out_of_buffer", 126)]
    );
    // The receive comes; the next try, one RNR timer after the last,
    // lands in it, and not a picosecond before.
    post_recv(&p.b, 2, &[p.mr_b.sge(0, 1024).unwrap()]);
    let retry = t0.add(us(20_160));
    assert_eq!(p.link.next_deadline(), Some(retry));
    p.advance_to(just_before(retry));
    assert!(poll(&p.cq_a).is_empty());
    p.advance_to(retry);
    assert_eq!(
        outcome(&poll(&p.cq_a)),
        [(1, WcStatus::Success, WcOpcode::Send)]
    );
    let r = poll(&p.cq_b);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (2, WcStatus::Success, 700)
    );
    let mut got = vec![0u8; 700];
    p.mr_b.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let c = p.counters();
    assert_eq!((c.rnr_nak_sent, c.rnr_nak_retry_err), (126, 126));
    assert_eq!(c.req_rnr_retries_exceeded, 0);
    assert_eq!(
        (p.a.query().unwrap().0, p.b.query().unwrap().0),
        (QpState::Rts, QpState::Rts)
    );
}

// Moved from errors.rs.
#[test]
fn the_rnr_timer_paces_retries_with_several_messages_in_flight() {
    // Timer code 20: 10.24 ms; 6 retries. The receives come after 5 ms, so
    // the first retry, one period after the refusal, takes all three
    // messages, whatever else was in flight behind the refused SEND.
    let p = Loop::rnr(20, 6);
    let sges: Vec<Sge> = (0..3).map(|i| p.mr_a.sge(i * 256, 200).unwrap()).collect();
    let wrs: Vec<SendWr<'_>> = (0..3)
        .map(|i| signaled(i as u64, &sges[i..=i], WrOpcode::Send))
        .collect();
    let t0 = p.now();
    p.a.post_send(&wrs).unwrap();
    p.advance_to(t0.add(us(5_000)));
    for i in 0..3 {
        post_recv(&p.b, 10 + i, &[p.mr_b.sge(i * 256, 256).unwrap()]);
    }
    let c = p.counters();
    assert_eq!((c.rnr_nak_sent, c.rnr_nak_retry_err), (1, 1));
    let retry = t0.add(us(10_240));
    assert_eq!(p.link.next_deadline(), Some(retry));
    p.advance_to(just_before(retry));
    assert!(poll(&p.cq_a).is_empty(), "nothing before the RNR timer");
    p.advance_to(retry);
    assert_eq!(
        outcome(&poll(&p.cq_a)),
        [
            (0, WcStatus::Success, WcOpcode::Send),
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send)
        ]
    );
    assert_eq!(
        poll(&p.cq_b)
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [
            (10, WcStatus::Success),
            (11, WcStatus::Success),
            (12, WcStatus::Success)
        ]
    );
    // One refusal, one retry: the messages behind it cost none.
    let c = p.counters();
    assert_eq!((c.rnr_nak_sent, c.rnr_nak_retry_err), (1, 1));
    assert_eq!(c.req_rnr_retries_exceeded, 0);
    // Nothing is left to happen.
    p.link.advance(us(100_000));
    assert_eq!(p.counters(), c);
}

// The exact-time form of the live test of this name in counters.rs, which
// checks the same counters on the threaded runtime.
#[test]
fn an_ack_past_a_lost_atomic_answer_asks_for_it_again_at_once() {
    // FAA then SEND: the atomic's answer is lost, the SEND's ACK comes,
    // so the answer is known lost without waiting for the ACK timer.
    let (policy, log) = tap_policy(nth_of(BthOpcode::RcAtomicAck, 0, Fate::Drop));
    let t = Timers {
        // 4.096 µs × 2^17 ≈ 537 ms.
        timeout: 17,
        ..Timers::default()
    };
    let p = Loop::faulty(policy, t);
    post_recv(&p.b, 1, &[p.mr_b.sge(1024, 64).unwrap()]);
    p.mr_b.write(0, &1u64.to_le_bytes()).unwrap();
    let t0 = p.now();
    let old = [p.mr_a.sge(0, 8).unwrap()];
    p.a.post_send(&[signaled(
        1,
        &old,
        WrOpcode::AtomicFetchAdd {
            remote: p.remote_b(0),
            add: 1,
        },
    )])
    .unwrap();
    p.a.post_send(&[signaled(2, &[p.mr_a.sge(64, 32).unwrap()], WrOpcode::Send)])
        .unwrap();
    // Both done at t0: not a picosecond of the ACK timeout was waited.
    assert_eq!(p.now(), t0);
    let ids: Vec<u64> = poll(&p.cq_a).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2], "completions in posting order");
    let mut w = [0u8; 8];
    p.mr_b.read(0, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 2, "added once");
    let c = p.counters();
    assert_eq!(
        errors(&c),
        [("implied_nak_seq_err", 1), ("duplicate_request", 1)]
    );
    let answers = log
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.opcode == BthOpcode::RcAtomicAck)
        .count();
    assert_eq!(answers, 2, "the lost answer, and the one sent again");
    // The ACK timer was never needed: nothing more happens when it would
    // have fired.
    p.link.advance(us(1_000_000));
    assert_eq!(p.counters(), c);
}

// The exact-time form of the live test of this name in counters.rs, which
// checks the same counters on the threaded runtime.
#[test]
fn a_late_packet_is_out_of_sequence_and_its_copy_a_duplicate() {
    // The FIRST of a 4-packet WRITE is held back 30 ms: the 3 after it are
    // out of sequence, B NAKs, A goes back; the late FIRST is a duplicate
    // when it comes, 30 ms later, exactly.
    let (policy, _) = tap_policy(nth_of(
        BthOpcode::RcRdmaWriteFirst,
        0,
        Fate::Delay(us(30_000)),
    ));
    let mtu = 1024;
    let p = Loop::faulty(
        policy,
        Timers {
            mtu,
            ..Timers::default()
        },
    );
    let len = 4 * mtu as usize;
    let data = pattern(len, 7);
    p.mr_a.write(0, &data).unwrap();
    let t0 = p.now();
    p.a.post_send(&[signaled(
        1,
        &[p.mr_a.sge(0, len as u32).unwrap()],
        WrOpcode::RdmaWrite(p.remote_b(0)),
    )])
    .unwrap();
    let wc = poll(&p.cq_a);
    assert_eq!(outcome(&wc), [(1, WcStatus::Success, WcOpcode::RdmaWrite)]);
    let c = p.counters();
    assert_eq!(errors(&c), [("out_of_sequence", 3), ("packet_seq_err", 1)]);
    let late = t0.add(us(30_000));
    assert_eq!(p.link.next_deadline(), Some(late));
    p.advance_to(just_before(late));
    assert_eq!(p.counters().duplicate_request, 0, "not yet");
    p.advance_to(late);
    let c = p.counters();
    assert_eq!(
        errors(&c),
        [
            ("out_of_sequence", 3),
            ("packet_seq_err", 1),
            ("duplicate_request", 1)
        ]
    );
    assert_eq!(p.link.fault_stats().unwrap().delayed, 1);
    let mut got = vec![0u8; len];
    p.mr_b.read(0, &mut got).unwrap();
    assert_eq!(got, data);
}

// The exact-time form of the live test of this name in counters.rs, which
// checks the same counters on the threaded runtime.
#[test]
fn rnr_naks_count_at_both_ends() {
    // 0.16 ms between tries; the receive comes after 10 ms.
    let p = Loop::rnr(8, 7);
    let t0 = p.now();
    p.a.post_send(&[signaled(1, &[p.mr_a.sge(0, 64).unwrap()], WrOpcode::Send)])
        .unwrap();
    p.advance_to(t0.add(us(10_000)));
    post_recv(&p.b, 1, &[p.mr_b.sge(0, 64).unwrap()]);
    // Tries at 0, 160, ..., 9920 µs: 63 refused; the 64th, at 10080 µs,
    // lands.
    p.advance_to(t0.add(us(10_080)));
    assert!(poll(&p.cq_a)[0].is_ok());
    let c = p.counters();
    let naks = c.rnr_nak_sent;
    assert_eq!(naks, 63, "RNR NAKs in 10 ms at 0.16 ms");
    assert_eq!(
        errors(&c),
        [("rnr_nak_retry_err", naks), ("out_of_buffer", naks)]
    );
    assert_eq!(c.tx_retransmits, naks);
}

/// The ACK timer runs only while something sent waits for its ACK: once
/// everything is acknowledged it stops, and the next message starts it
/// afresh. It used to be restarted by the last ACK (the message it
/// acknowledged had not completed yet) and keep that deadline, so a
/// message posted most of a timeout later timed out well before a whole
/// timeout had passed (the live bench's spurious ACK timeouts).
#[test]
fn the_ack_timer_starts_afresh_for_a_message_after_an_idle_spell() {
    // 4.096 µs × 2^14 ≈ 67.1 ms.
    let timeout = Duration::from_ns(4096 << 14);
    let hold = Duration::from_us(20_000);
    // The second WRITE's ACK is held 20 ms: well inside one timeout.
    let (policy, _log) = tap_policy(nth_of(BthOpcode::RcAck, 1, Fate::Delay(hold)));
    let p = Loop::faulty(policy, Timers::default());
    let src = [p.mr_a.sge(0, 64).unwrap()];
    let write = |id| {
        p.a.post_send(&[signaled(id, &src, WrOpcode::RdmaWrite(p.remote_b(0)))])
            .unwrap();
    };
    write(1);
    assert_eq!(
        outcome(&poll(&p.cq_a)),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    // Most of a timeout later, the next WRITE; its ACK comes 20 ms after.
    p.advance_to(p.now().add(Duration::from_us(60_000)));
    let t1 = p.now();
    write(2);
    p.advance_to(t1.add(hold));
    assert_eq!(
        outcome(&poll(&p.cq_a)),
        [(2, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    // Nothing timed out, then or a timeout after. To adaptive
    // retransmission the late ACK looked like a loss: it sent the WRITE
    // once more, 16 µs after it (a round trip takes no time here, so the
    // wait is the floor), and B acknowledged the duplicate at once.
    p.advance_to(t1.add(timeout).add(timeout));
    let c = p.counters();
    assert_eq!(errors(&c), [("duplicate_request", 1)]);
    assert_eq!((c.roce_adp_retrans, c.roce_adp_retrans_to), (1, 0));
}

/// Two RC QPs whose first WRITE (`len` bytes, id 1) measured the round
/// trip; returns them and when it completed.
fn measured(policy: impl FaultPolicy + 'static, t: Timers, len: usize) -> (Loop, Instant) {
    let p = Loop::faulty(policy, t);
    p.a.post_send(&[signaled(
        1,
        &[p.mr_a.sge(0, len as u32).unwrap()],
        WrOpcode::RdmaWrite(p.remote_b(0)),
    )])
    .unwrap();
    assert_eq!(
        outcome(&poll(&p.cq_a)),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    let t = p.now();
    (p, t)
}

/// The tail of a message, which no later packet reveals lost: adaptive
/// retransmission sends it again once the ACK is later than the measured
/// round trip allows (here, where a round trip takes no time, its 16 µs floor), not after the QP's 67 ms.
#[test]
fn a_lost_last_packet_is_sent_again_long_before_the_ack_timeout() {
    let (policy, log) = tap_policy(nth_of(BthOpcode::RcRdmaWriteLast, 1, Fate::Drop));
    let len = 4 * 1024;
    let data = pattern(len, 3);
    let (p, _) = measured(policy, Timers::default(), len);
    p.mr_a.write(0, &data).unwrap();
    let t1 = p.now();
    p.a.post_send(&[signaled(
        2,
        &[p.mr_a.sge(0, len as u32).unwrap()],
        WrOpcode::RdmaWrite(p.remote_b(0)),
    )])
    .unwrap();
    assert_eq!(poll(&p.cq_a), [], "its last packet was lost");
    let early = t1.add(doorbell_device::ADAPTIVE_RETRANSMIT_FLOOR);
    assert_eq!(p.link.next_deadline(), Some(early));
    p.advance_to(just_before(early));
    assert_eq!(poll(&p.cq_a), []);
    p.advance_to(early);
    assert_eq!(
        outcome(&poll(&p.cq_a)),
        [(2, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    let c = p.counters();
    // A went back to the message's first packet (nothing of it was
    // acknowledged): B had three of the four already.
    assert_eq!(errors(&c), [("duplicate_request", 3)]);
    assert_eq!((c.roce_adp_retrans, c.roce_adp_retrans_to), (1, 0));
    assert_eq!(c.tx_retransmits, 4);
    let lasts = log
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.opcode == BthOpcode::RcRdmaWriteLast)
        .count();
    assert_eq!(lasts, 3, "the first WRITE's, the lost one, the resend");
    let mut got = vec![0u8; len];
    p.mr_b.read(0, &mut got).unwrap();
    assert_eq!(got, data);
}

/// Adaptive resends use no retry and never move the ACK timer: a peer that
/// stops answering fails the QP with RETRY_EXC_ERR exactly when the QP's
/// timeout and `retry_cnt` say, as without them.
#[test]
fn a_silent_peer_fails_the_qp_when_its_timeout_says_despite_early_resends() {
    let (policy, _) = tap_policy(|s, k| {
        if matches!(s.opcode, BthOpcode::RcRdmaWriteOnly) && k >= 1 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let t = Timers {
        // 4.096 µs × 2^10 ≈ 4.2 ms, twice.
        timeout: 10,
        retry_cnt: 2,
        ..Timers::default()
    };
    let timeout = Duration::from_ns(4096 << 10);
    let (p, _) = measured(policy, t, 64);
    let t1 = p.now();
    p.a.post_send(&[signaled(
        2,
        &[p.mr_a.sge(0, 64).unwrap()],
        WrOpcode::RdmaWrite(p.remote_b(0)),
    )])
    .unwrap();
    let fails = t1.add(timeout.mul(3));
    p.advance_to(just_before(fails));
    assert_eq!(poll(&p.cq_a), [], "two retries, each a whole timeout");
    p.advance_to(fails);
    assert_eq!(
        outcome(&poll(&p.cq_a)),
        [(2, WcStatus::RetryExcErr, WcOpcode::RdmaWrite)]
    );
    let c = p.counters();
    assert_eq!(c.local_ack_timeout_err, 2);
    assert_eq!(c.req_transport_retries_exceeded, 1);
    // In the first timeout, resends 16, 32, 64, ... 2048 µs apart: 8, the
    // last at 4080 µs, since the next would come after the ACK timer. The
    // wait keeps doubling across the QP's own retries: one more 4096 µs
    // into the second timeout, none in the third.
    assert_eq!(c.roce_adp_retrans, 8 + 1, "{c:?}");
    assert_eq!(c.roce_adp_retrans_to, 2);
    assert_eq!(c.tx_retransmits, 9 + 2);
}

/// A NIC that builds its windows a burst at a time (`NicConfig::tx_burst`)
/// sends a WRITE longer than a burst whole on the loopback link, without
/// the clock moving: the link asks for each next burst, where otherwise
/// the rest would wait for the ACK timer.
#[test]
fn a_burst_at_a_time_sends_the_whole_window_without_a_timer() {
    let mut cfg = doorbell_device::NicConfig::new([10, 0, 0, 7]);
    cfg.tx_burst = Some(3);
    let t = Timers::default();
    let l = Loop::on(LoopbackLink::with_config("vt", cfg), t, t);
    let data = pattern(MR_LEN, 3);
    l.mr_a.write(0, &data).unwrap();
    let sge = [l.mr_a.sge(0, MR_LEN as u32).unwrap()];
    let start = l.now();
    l.a.post_send(&[signaled(1, &sge, WrOpcode::RdmaWrite(l.remote_b(0)))])
        .unwrap();
    assert_eq!(
        outcome(&poll(&l.cq_a)),
        [(1, WcStatus::Success, WcOpcode::RdmaWrite)]
    );
    assert_eq!(l.now(), start, "no time passed");
    let mut got = vec![0u8; MR_LEN];
    l.mr_b.read(0, &mut got).unwrap();
    assert!(got == data, "the WRITE's bytes arrived");
    let c = l.counters();
    assert_eq!(errors(&c), []);
    assert_eq!(c.tx_retransmits, 0);
}
