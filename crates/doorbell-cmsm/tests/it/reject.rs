//! REJ: nobody listening, the consumer saying no, and the REQ's timeout.

use doorbell_cm::{CmAttribute, CmMessage, MsgResponse, RejectReason, rej};
use doorbell_cmsm::{CmEvent, CmState, TimedOut, cm_timeout};
use doorbell_types::Duration;

use crate::harness::*;

fn rejects(net: &Net) -> Vec<(RejectReason, MsgResponse, [u8; rej::PRIVATE_DATA_LEN], bool)> {
    net.events_a
        .iter()
        .filter_map(|(_, e)| match e {
            CmEvent::Rejected {
                reason,
                message,
                private_data,
                timewait,
                ..
            } => Some((*reason, *message, *private_data, *timewait)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_req_nobody_listens_for_gets_rej_8_and_nothing_is_reported() {
    let mut net = Net::new();
    let a = net
        .a
        .connect(net.now, net.pb, SERVICE, &req_params(net.pa, net.pb), b"")
        .unwrap();
    net.run();
    let rejs = net.sent(Side::B, CmAttribute::Rej);
    assert_eq!(rejs.len(), 1);
    let CmMessage::Rej(r) = rejs[0].mad.message else {
        panic!()
    };
    assert_eq!(
        (r.reason, r.message_rejected),
        (RejectReason::InvalidServiceId, MsgResponse::Req)
    );
    assert_eq!((r.local_comm_id, r.remote_comm_id), (0, a.comm_id()));
    assert_eq!(rejs[0].mad.transaction_id, net.log[0].mad.transaction_id);
    assert!(net.events_b.is_empty());
    assert_eq!(net.b.conn_count(), 0);
    assert_eq!(
        rejects(&net),
        [(
            RejectReason::InvalidServiceId,
            MsgResponse::Req,
            [0; rej::PRIVATE_DATA_LEN],
            false
        )]
    );
    assert_eq!(net.a.state(a), None, "freed");
    assert_eq!(net.count(Side::A, CmAttribute::Req), 1, "no retransmission");
}

#[test]
fn a_consumer_reject_sends_rej_28_with_its_private_data() {
    let mut net = Net::new();
    net.policy_b.on_req = OnReq::Reject(b"go away".to_vec());
    let (_, a) = net.connect(b"");
    net.run();
    let CmMessage::Rej(r) = net.sent(Side::B, CmAttribute::Rej)[0].mad.message else {
        panic!()
    };
    assert_eq!(r.reason, RejectReason::ConsumerDefined);
    assert_eq!(u16::from(r.reason), 28);
    assert_eq!(
        rejects(&net),
        [(
            RejectReason::ConsumerDefined,
            MsgResponse::Req,
            padded(b"go away"),
            false
        )]
    );
    assert_eq!(net.a.state(a), None);
    assert_eq!(net.b.conn_count(), 1, "only the listener is left");
    assert_eq!(net.count(Side::B, CmAttribute::Rep), 0);
}

#[test]
fn all_reqs_lost_reports_unreachable_and_sends_rej_timeout() {
    let mut net = Net::new();
    net.rules.push(Rule {
        from: Side::A,
        attr: CmAttribute::Req,
        nth: None,
        fate: Fate::Drop,
    });
    let (_, a) = net.connect(b"");
    net.run();
    let reqs = net.sent(Side::A, CmAttribute::Req);
    assert_eq!(reqs.len(), 16, "the first send and 15 retries");
    let wait = cm_timeout(20).add(cm_timeout(16)).add(cm_timeout(16));
    let (at, ev) = net.events_a.last().unwrap();
    assert_eq!(
        *ev,
        CmEvent::Unreachable {
            conn: a,
            message: TimedOut::Req
        }
    );
    assert_eq!(at.since(reqs[0].at), wait.mul(16));
    assert_eq!(net.a.state(a), None);
    // The REJ for the REP timeout carries A's CA GUID in the ARI.
    let rejs = net.sent(Side::A, CmAttribute::Rej);
    assert_eq!(rejs.len(), 1);
    let CmMessage::Rej(r) = rejs[0].mad.message else {
        panic!()
    };
    assert_eq!(r.reason, RejectReason::Timeout);
    assert_eq!((r.ari_len, &r.ari[..8]), (8, &GUID_A.to_be_bytes()[..]));
    assert_eq!((r.local_comm_id, r.remote_comm_id), (a.comm_id(), 0));
    // B never heard of it and drops it.
    assert_eq!(net.b.stats().unmatched, 1);
    assert!(net.events_b.is_empty());
}

#[test]
fn rej_timeout_reaches_the_half_open_passive_side_through_the_ari() {
    let mut net = Net::new();
    // Every REP is lost; A gives up before B does (B waits 2^22 for RTUs).
    net.rules.push(Rule {
        from: Side::B,
        attr: CmAttribute::Rep,
        nth: None,
        fate: Fate::Drop,
    });
    let listen = net.b.listen(SERVICE).unwrap();
    let mut p = req_params(net.pa, net.pb);
    p.local_cm_response_timeout = 22;
    let a = net.a.connect(net.now, net.pb, SERVICE, &p, b"").unwrap();
    net.run();
    let _ = listen;
    let b = net.b_conn();
    assert!(
        matches!(net.events_a.last(), Some((_, CmEvent::Unreachable { conn, .. })) if *conn == a)
    );
    let Some((
        _,
        CmEvent::Rejected {
            conn,
            reason,
            timewait,
            ..
        },
    )) = net.events_b.last()
    else {
        panic!("{:?}", net.events_b);
    };
    assert_eq!(
        (*conn, *reason, *timewait),
        (b, RejectReason::Timeout, false)
    );
    assert_eq!(net.b.state(b), None);
    assert_eq!(net.b.conn_count(), 1);
}

#[test]
fn all_rtus_lost_ends_the_passive_side_with_a_rep_timeout() {
    let mut net = Net::new();
    net.rules.push(Rule {
        from: Side::A,
        attr: CmAttribute::Rtu,
        nth: None,
        fate: Fate::Drop,
    });
    let (_, a) = net.connect(b"");
    net.run();
    let b = net.b_conn();
    assert_eq!(net.count(Side::B, CmAttribute::Rep), 16);
    assert!(matches!(
        net.events_b.last(),
        Some((_, CmEvent::Unreachable { conn, message: TimedOut::Rep })) if *conn == b
    ));
    assert_eq!(net.a.state(a), Some(CmState::Established), "A never knew");
}

#[test]
fn a_reject_after_accept_goes_to_timewait() {
    let mut net = Net::new();
    net.rules.push(Rule {
        from: Side::B,
        attr: CmAttribute::Rep,
        nth: None,
        fate: Fate::Drop,
    });
    net.connect(b"");
    net.run_until(net.now.add(Duration::from_us(100)));
    let b = net.b_conn();
    net.b
        .reject(net.now, b, RejectReason::ConsumerDefined, b"")
        .unwrap();
    assert_eq!(net.b.state(b), Some(CmState::Timewait));
    net.run();
    assert!(matches!(net.events_b.last(), Some((_, CmEvent::TimewaitExit { conn })) if *conn == b));
    // A was in REQ_SENT: the REJ (message Other, local ID set) names it.
    assert!(matches!(
        rejects(&net)[..],
        [(RejectReason::ConsumerDefined, MsgResponse::Other, _, false)]
    ));
}

#[test]
fn a_late_req_for_a_connection_in_timewait_gets_rej_10_a_new_one_connects() {
    let mut net = Net::new();
    net.establish();
    let (a, b) = (net.events_a[0].1.clone(), net.b_conn());
    let CmEvent::ConnectResponse { conn: a, .. } = a else {
        panic!()
    };
    net.a.disconnect(net.now, a, b"").unwrap();
    net.run_until(net.now.add(Duration::from_us(100)));
    assert_eq!(net.b.state(b), Some(CmState::Timewait));
    // The old REQ, arriving late.
    let req = net.sent(Side::A, CmAttribute::Req)[0].bytes;
    net.b.handle_mad(net.now, net.pa, &req);
    let (_, out) = net.b.poll_transmit().unwrap();
    let mad = doorbell_cm::CmMad::parse(&out).unwrap();
    let CmMessage::Rej(r) = mad.message else {
        panic!("{mad:?}")
    };
    assert_eq!(r.reason, RejectReason::StaleConn);
    assert!(net.b.poll_event().is_none());

    // A new REQ (a new communication ID) from the same QP while B's old
    // connection is in time-wait: a new connection, as the kernel's
    // `cm_enter_timewait` takes the old one out of its remote-QPN table.
    let a2 = net
        .a
        .connect(net.now, net.pb, SERVICE, &req_params(net.pa, net.pb), b"")
        .unwrap();
    net.run_until(net.now.add(Duration::from_us(100)));
    assert_eq!(net.a.state(a2), Some(CmState::Established));
    let reqs = net
        .events_b
        .iter()
        .filter(|(_, e)| matches!(e, CmEvent::ConnectRequest { .. }));
    assert_eq!(reqs.count(), 2, "{:?}", net.events_b);
}

#[test]
fn a_new_req_from_the_qp_of_an_established_connection_gets_rej_10() {
    let mut net = Net::new();
    net.establish();
    let b = net.b_conn();
    // The peer's QP comes back (say, its process restarted) and asks again.
    let a2 = net
        .a
        .connect(net.now, net.pb, SERVICE, &req_params(net.pa, net.pb), b"")
        .unwrap();
    net.run_until(net.now.add(Duration::from_us(100)));
    let rejected = net.events_a.iter().any(|(_, e)| {
        matches!(e, CmEvent::Rejected { conn, reason: RejectReason::StaleConn, .. } if *conn == a2)
    });
    assert!(rejected, "{:?}", net.events_a);
    // B asks its old connection down.
    assert_ne!(net.b.state(b), Some(CmState::Established));
    assert!(!net.sent(Side::B, CmAttribute::Dreq).is_empty());
}
