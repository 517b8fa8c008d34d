//! REQ/REP/RTU: the right events and parameters, and set-up surviving the
//! loss or repetition of any one MAD.

use doorbell_cm::{CmAttribute, CmMessage, rep, req, rtu};
use doorbell_cmsm::{CmEvent, CmState, QpType, cm_timeout};
use doorbell_types::{Duration, Psn, Qpn};

use crate::harness::*;

#[test]
fn req_rep_rtu_establishes_both_sides_with_swapped_resources() {
    let mut net = Net::new();
    let (listen, a) = net.connect(b"req-private");
    net.run();
    let b = net.b_conn();

    let attrs: Vec<_> = net.log.iter().map(|s| (s.from, s.attr())).collect();
    assert_eq!(
        attrs,
        [
            (Side::A, CmAttribute::Req),
            (Side::B, CmAttribute::Rep),
            (Side::A, CmAttribute::Rtu)
        ]
    );
    // The RTU is in the REQ's transaction; the REP in the REQ's too.
    let tid = net.log[0].mad.transaction_id;
    assert!(net.log.iter().all(|s| s.mad.transaction_id == tid));

    let evb = events(&net.events_b);
    let CmEvent::ConnectRequest {
        conn,
        listen: l,
        peer,
        req,
    } = evb[0]
    else {
        panic!("B: {evb:?}");
    };
    assert_eq!((*conn, *l, *peer), (b, listen, net.pa));
    assert_eq!(req.service_id, SERVICE);
    assert_eq!(req.remote_ca_guid, GUID_A);
    assert_eq!(req.remote_qpn, Qpn::new(0x111));
    assert_eq!(req.starting_psn, Psn::new(0x1000));
    assert_eq!(req.qp_type, QpType::Rc);
    // A offered responder resources 4 and initiator depth 2: B must accept
    // 2 reads as responder and may issue 4.
    assert_eq!((req.responder_resources, req.initiator_depth), (2, 4));
    assert_eq!(
        (req.retry_count, req.rnr_retry_count, req.path_mtu),
        (7, 6, 5)
    );
    assert!(req.flow_control && !req.srq);
    assert_eq!(req.primary_path, path(net.pa, net.pb));
    assert_eq!(
        req.private_data,
        padded::<{ req::PRIVATE_DATA_LEN }>(b"req-private")
    );
    assert!(matches!(evb[1], CmEvent::Established { conn, .. } if *conn == b));
    assert_eq!(evb.len(), 2);

    let eva = events(&net.events_a);
    let CmEvent::ConnectResponse { conn, rep } = eva[0] else {
        panic!("A: {eva:?}");
    };
    assert_eq!(*conn, a);
    assert_eq!(rep.remote_ca_guid, GUID_B);
    assert_eq!(rep.remote_qpn, Qpn::new(0x222));
    assert_eq!(rep.starting_psn, Psn::new(0x2000));
    // B: responder resources 8, initiator depth 1, swapped for A.
    assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 8));
    assert_eq!(
        (
            rep.target_ack_delay,
            rep.failover_accepted,
            rep.rnr_retry_count
        ),
        (15, 1, 5)
    );
    assert!(rep.flow_control && rep.srq);
    assert_eq!(
        rep.private_data,
        padded::<{ rep::PRIVATE_DATA_LEN }>(b"rep-private")
    );
    assert!(matches!(eva[1], CmEvent::Established { conn, .. } if *conn == a));
    assert_eq!(eva.len(), 2);

    assert_eq!(net.a.state(a), Some(CmState::Established));
    assert_eq!(net.b.state(b), Some(CmState::Established));
    assert_eq!(net.a.stats().retransmits + net.b.stats().retransmits, 0);
    assert_eq!(net.a.poll_timeout(), None);
    assert_eq!(net.b.poll_timeout(), None);

    // Comm IDs on the wire are the handles, and each side echoes the other's.
    let CmMessage::Rep(r) = net.log[1].mad.message else {
        panic!()
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id),
        (b.comm_id(), a.comm_id())
    );
    assert_eq!(r.local_qpn, Qpn::new(0x222));
}

fn lose_one(attr: CmAttribute, from: Side) -> Net {
    let mut net = Net::new();
    net.rules.push(Rule {
        from,
        attr,
        nth: Some(0),
        fate: Fate::Drop,
    });
    let (_, a) = net.connect(b"");
    net.run();
    let b = net.b_conn();
    assert_eq!(net.a.state(a), Some(CmState::Established), "{attr:?} lost");
    assert_eq!(net.b.state(b), Some(CmState::Established), "{attr:?} lost");
    let established = |evs: &[(_, CmEvent)]| {
        evs.iter()
            .filter(|(_, e)| matches!(e, CmEvent::Established { .. }))
            .count()
    };
    assert_eq!(established(&net.events_a), 1);
    assert_eq!(established(&net.events_b), 1);
    assert_eq!(net.count(from, attr), 2, "{attr:?} sent again");
    net
}

#[test]
fn a_lost_req_is_sent_again_after_the_response_timeout() {
    let net = lose_one(CmAttribute::Req, Side::A);
    let reqs = net.sent(Side::A, CmAttribute::Req);
    // remote CM response timeout 20 plus twice the packet lifetime (16).
    let wait = cm_timeout(20).add(cm_timeout(16)).add(cm_timeout(16));
    assert_eq!(reqs[1].at.since(reqs[0].at), wait);
    assert_eq!(
        reqs[0].bytes, reqs[1].bytes,
        "the same REQ, same transaction"
    );
    assert_eq!(net.a.stats().retransmits, 1);
}

#[test]
fn a_lost_rep_is_sent_again_after_the_active_sides_response_timeout() {
    let net = lose_one(CmAttribute::Rep, Side::B);
    let reps = net.sent(Side::B, CmAttribute::Rep);
    // The REQ's local CM response timeout (20), nothing added.
    assert_eq!(reps[1].at.since(reps[0].at), cm_timeout(20));
    assert_eq!(net.count(Side::A, CmAttribute::Req), 1);
}

#[test]
fn a_lost_rtu_is_covered_by_the_rep_sent_again() {
    let net = lose_one(CmAttribute::Rtu, Side::A);
    // B sent its REP again; A, already established, answered with its RTU.
    assert_eq!(net.count(Side::B, CmAttribute::Rep), 2);
    assert_eq!(
        net.sent(Side::A, CmAttribute::Rtu)[0].bytes,
        net.sent(Side::A, CmAttribute::Rtu)[1].bytes
    );
    assert_eq!(net.a.stats().duplicates, 1);
}

#[test]
fn a_duplicate_req_is_not_a_new_connection_and_gets_the_rep_again() {
    let mut net = Net::new();
    net.rules.push(Rule {
        from: Side::A,
        attr: CmAttribute::Req,
        nth: Some(0),
        // Arrives after B's REP went out, before A's RTU came back.
        fate: Fate::DuplicateAfter(Duration::from_ns(500)),
    });
    let (_, a) = net.connect(b"");
    net.run();
    let reqs = net
        .events_b
        .iter()
        .filter(|(_, e)| matches!(e, CmEvent::ConnectRequest { .. }))
        .count();
    assert_eq!(reqs, 1);
    assert_eq!(net.b.conn_count(), 2, "the listener and one connection");
    assert_eq!(net.count(Side::B, CmAttribute::Rep), 2, "REP sent again");
    // The second REP reached an established A, which sent its RTU again.
    assert_eq!(net.count(Side::A, CmAttribute::Rtu), 2);
    // The repeated REQ, and the RTU that answered the repeated REP.
    assert_eq!(net.b.stats().duplicates, 2);
    assert_eq!(net.a.stats().duplicates, 1);
    assert_eq!(net.a.state(a), Some(CmState::Established));
}

#[test]
fn a_duplicate_req_before_the_upper_layer_answers_is_dropped() {
    let mut net = Net::new();
    net.policy_b.on_req = OnReq::Ignore;
    net.rules.push(Rule {
        from: Side::A,
        attr: CmAttribute::Req,
        nth: Some(0),
        fate: Fate::DuplicateAfter(Duration::from_us(50)),
    });
    net.connect(b"");
    net.run_until(net.now.add(Duration::from_us(200)));
    assert_eq!(net.events_b.len(), 1);
    assert!(net.log.iter().all(|s| s.from == Side::A), "B sent nothing");
    assert_eq!(net.b.stats().duplicates, 1);
}

#[test]
fn a_duplicate_rep_gets_the_rtu_again() {
    let mut net = Net::new();
    net.rules.push(Rule {
        from: Side::B,
        attr: CmAttribute::Rep,
        nth: Some(0),
        fate: Fate::DuplicateAfter(Duration::from_us(50)),
    });
    net.establish();
    net.run();
    let responses = net
        .events_a
        .iter()
        .filter(|(_, e)| matches!(e, CmEvent::ConnectResponse { .. }))
        .count();
    assert_eq!(responses, 1);
    assert_eq!(net.count(Side::A, CmAttribute::Rtu), 2);
    assert_eq!(net.b.stats().duplicates, 1, "B's second RTU is a duplicate");
}

#[test]
fn without_auto_rtu_the_active_side_waits_for_establish() {
    let mut net = Net::new();
    let listen = net.b.listen(SERVICE).unwrap();
    let mut p = req_params(net.pa, net.pb);
    p.auto_rtu = false;
    let a = net.a.connect(net.now, net.pb, SERVICE, &p, b"").unwrap();
    net.run_until(net.now.add(Duration::from_us(100)));
    let _ = listen;
    assert_eq!(net.a.state(a), Some(CmState::RepRcvd));
    assert_eq!(net.count(Side::A, CmAttribute::Rtu), 0);
    assert!(matches!(
        events(&net.events_a)[..],
        [CmEvent::ConnectResponse { .. }]
    ));
    assert!(net.a.establish(a, &[0; rtu::PRIVATE_DATA_LEN + 1]).is_err());
    net.a.establish(a, b"rtu-private").unwrap();
    net.run_until(net.now.add(Duration::from_us(100)));
    let b = net.b_conn();
    assert_eq!(net.b.state(b), Some(CmState::Established));
    let Some((_, CmEvent::Established { private_data, .. })) = net.events_b.last() else {
        panic!("{:?}", net.events_b);
    };
    assert_eq!(
        *private_data,
        padded::<{ rtu::PRIVATE_DATA_LEN }>(b"rtu-private")
    );
}

#[test]
fn notify_established_stands_in_for_a_lost_rtu() {
    let mut net = Net::new();
    net.rules.push(Rule {
        from: Side::A,
        attr: CmAttribute::Rtu,
        nth: None,
        fate: Fate::Drop,
    });
    net.connect(b"");
    net.run_until(net.now.add(Duration::from_us(100)));
    let b = net.b_conn();
    assert_eq!(net.b.state(b), Some(CmState::RepSent));
    // Data arrived on B's QP.
    net.b.notify_established(b).unwrap();
    assert_eq!(net.b.state(b), Some(CmState::Established));
    assert_eq!(net.b.poll_timeout(), None, "no REP to send again");
    net.run();
    assert_eq!(net.count(Side::B, CmAttribute::Rep), 1);
    assert!(net.b.notify_established(b).is_err());
}

#[test]
fn an_mra_stretches_the_wait_for_the_rep() {
    let mut net = Net::new();
    net.policy_b.on_req = OnReq::Ignore;
    let (_, a) = net.connect(b"");
    net.run_until(net.now.add(Duration::from_us(100)));
    let b = net.b_conn();
    net.b.send_mra(b, 24).unwrap();
    assert_eq!(net.b.state(b), Some(CmState::MraReqSent));
    net.run_until(net.now.add(Duration::from_us(100)));
    assert_eq!(net.a.state(a), Some(CmState::MraReqRcvd));
    // Without the MRA the REQ would go again after ~4.8 s; now it waits the
    // service timeout (2^24 · 4.096 µs ≈ 69 s) plus a packet lifetime.
    let deadline = net.a.poll_timeout().unwrap();
    assert_eq!(
        deadline.since(net.log[1].at.add(LATENCY)),
        cm_timeout(24).add(cm_timeout(17))
    );
    net.run_until(net.now.add(Duration::from_us(10_000_000)));
    assert_eq!(net.count(Side::A, CmAttribute::Req), 1);
    net.b.accept(net.now, b, &rep_params(), b"late").unwrap();
    net.run();
    assert_eq!(net.a.state(a), Some(CmState::Established));
    assert_eq!(net.b.state(b), Some(CmState::Established));
}

/// rdma_cm's delayed MRA: armed when the REQ is handed to the program,
/// sent only when the peer's REQ comes again, after which the peer waits
/// the service timeout instead of giving up.
#[test]
fn a_delayed_mra_goes_out_only_when_the_req_is_repeated() {
    let mut net = Net::new();
    net.policy_b.on_req = OnReq::Ignore;
    let (_, a) = net.connect(b"");
    net.run_until(net.now.add(Duration::from_us(100)));
    let b = net.b_conn();
    net.b.arm_mra(b, 24).unwrap();
    assert_eq!(net.b.state(b), Some(CmState::MraReqSent));
    net.run_until(net.now.add(Duration::from_us(100)));
    assert_eq!(net.count(Side::B, CmAttribute::Mra), 0, "nothing sent yet");
    assert_eq!(net.a.state(a), Some(CmState::ReqSent));
    // The REQ's timer (about 4.8 s) runs out: the repeat gets the MRA.
    net.run_until(net.now.add(Duration::from_us(6_000_000)));
    assert_eq!(net.count(Side::A, CmAttribute::Req), 2);
    assert_eq!(net.count(Side::B, CmAttribute::Mra), 1);
    assert_eq!(net.a.state(a), Some(CmState::MraReqRcvd));
    // Then the peer waits: no third REQ for a minute, and a late accept
    // still connects.
    net.run_until(net.now.add(Duration::from_us(60_000_000)));
    assert_eq!(net.count(Side::A, CmAttribute::Req), 2);
    net.b.accept(net.now, b, &rep_params(), b"late").unwrap();
    net.run();
    assert_eq!(net.a.state(a), Some(CmState::Established));
    assert_eq!(net.b.state(b), Some(CmState::Established));
}

#[test]
fn the_same_seeds_give_the_same_bytes() {
    let run = || {
        let mut net = Net::new();
        net.rules.push(Rule {
            from: Side::A,
            attr: CmAttribute::Rtu,
            nth: Some(0),
            fate: Fate::Drop,
        });
        let (_, a) = net.connect(b"");
        net.run();
        net.a.disconnect(net.now, a, b"bye").unwrap();
        net.run();
        net.log.iter().map(|s| (s.at, s.bytes)).collect::<Vec<_>>()
    };
    let (first, second) = (run(), run());
    assert!(first.len() >= 6);
    assert_eq!(first, second);
    // Another seed gives other comm IDs.
    let mut net = Net::new();
    net.a = doorbell_cmsm::CmAgent::new(doorbell_cmsm::AgentConfig::new(GUID_A, 42));
    net.establish();
    assert_ne!(net.log[0].bytes, first[0].1);
}
