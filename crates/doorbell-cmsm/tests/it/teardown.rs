//! DREQ/DREP: disconnecting, losses, crossing DREQs, time-wait.

use doorbell_cm::{CmAttribute, CmMad, CmMessage, DreqRepr, MAD_LEN, drep, dreq};
use doorbell_cmsm::{CmAgent, CmEvent, CmState, cm_timeout};
use doorbell_types::{Duration, Qpn};

use crate::harness::*;

fn disconnects(
    evs: &[(doorbell_types::Instant, CmEvent)],
) -> Vec<(bool, [u8; drep::PRIVATE_DATA_LEN])> {
    evs.iter()
        .filter_map(|(_, e)| match e {
            CmEvent::Disconnected {
                private_data,
                timed_out,
                ..
            } => Some((*timed_out, *private_data)),
            _ => None,
        })
        .collect()
}

fn timewait_exits(evs: &[(doorbell_types::Instant, CmEvent)]) -> usize {
    evs.iter()
        .filter(|(_, e)| matches!(e, CmEvent::TimewaitExit { .. }))
        .count()
}

/// A disconnects; `rule` disturbs the wire; B's time-wait lasts
/// `b_time_wait`; A's Disconnected carries `drep_pd`.
fn teardown(rule: Option<Rule>, b_time_wait: Duration, drep_pd: &[u8]) -> Net {
    let mut net = Net::new();
    let mut cfg = *net.b.config();
    cfg.time_wait = b_time_wait;
    net.b = CmAgent::new(cfg);
    let (a, b) = net.establish();
    net.rules.extend(rule);
    let start = net.now;
    net.a.disconnect(net.now, a, b"dreq-private").unwrap();
    net.run_until(net.now.add(Duration::from_us(100)));
    if rule.is_none() {
        assert_eq!(net.a.state(a), Some(CmState::Timewait));
        assert_eq!(net.b.state(b), Some(CmState::Timewait));
    }
    net.run();
    assert_eq!(disconnects(&net.events_a), [(false, padded(drep_pd))]);
    assert_eq!(
        disconnects(&net.events_b),
        [(false, padded(b"dreq-private"))]
    );
    assert_eq!(
        (timewait_exits(&net.events_a), timewait_exits(&net.events_b)),
        (1, 1)
    );
    assert_eq!((net.a.state(a), net.b.state(b)), (None, None));
    assert_eq!(net.a.conn_count(), 0);
    assert_eq!(net.b.conn_count(), 1, "the listener");
    let (exit, _) = net.events_a.last().unwrap();
    assert!(exit.since(start) >= time_wait());
    let (exit, _) = net.events_b.last().unwrap();
    assert!(exit.since(start) >= b_time_wait);
    net
}

#[test]
fn dreq_drep_then_timewait_exit() {
    let net = teardown(None, time_wait(), b"drep-private");
    assert_eq!(net.count(Side::A, CmAttribute::Dreq), 1);
    assert_eq!(net.count(Side::B, CmAttribute::Drep), 1);
    let CmMessage::Dreq(d) = net.sent(Side::A, CmAttribute::Dreq)[0].mad.message else {
        panic!()
    };
    assert_eq!(d.remote_qpn, Qpn::new(0x222), "names B's QP");
    // The DREP answers in the DREQ's transaction, a new one.
    let (dq, dp) = (
        &net.sent(Side::A, CmAttribute::Dreq)[0].mad,
        &net.sent(Side::B, CmAttribute::Drep)[0].mad,
    );
    assert_eq!(dq.transaction_id, dp.transaction_id);
}

#[test]
fn a_lost_dreq_is_sent_again() {
    let lost = Rule {
        from: Side::A,
        attr: CmAttribute::Dreq,
        nth: Some(0),
        fate: Fate::Drop,
    };
    let net = teardown(Some(lost), time_wait(), b"drep-private");
    assert_eq!(net.count(Side::A, CmAttribute::Dreq), 2);
}

#[test]
fn a_lost_drep_is_sent_again_from_timewait() {
    // B's time-wait outlasts A's DREQ retry wait (about 4.8 s): the DREQ
    // sent again finds B in time-wait, which sends the same DREP again.
    let lost = Rule {
        from: Side::B,
        attr: CmAttribute::Drep,
        nth: Some(0),
        fate: Fate::Drop,
    };
    let net = teardown(Some(lost), cm_timeout(21), b"drep-private");
    assert_eq!(net.count(Side::A, CmAttribute::Dreq), 2);
    let dreps = net.sent(Side::B, CmAttribute::Drep);
    assert_eq!(dreps.len(), 2);
    assert_eq!(dreps[0].bytes, dreps[1].bytes);
    assert_eq!(net.b.stats().duplicates, 1);
}

#[test]
fn a_lost_drep_after_timewait_is_answered_by_a_bare_drep() {
    // With the default time-wait (about 0.5 s) B has forgotten the
    // connection when the DREQ comes again; it still answers.
    let lost = Rule {
        from: Side::B,
        attr: CmAttribute::Drep,
        nth: Some(0),
        fate: Fate::Drop,
    };
    let net = teardown(Some(lost), time_wait(), b"");
    assert_eq!(net.count(Side::B, CmAttribute::Drep), 2);
}

#[test]
fn an_unanswered_dreq_ends_in_timewait_anyway() {
    let mut net = Net::new();
    let (a, _) = net.establish();
    net.rules.push(Rule {
        from: Side::A,
        attr: CmAttribute::Dreq,
        nth: None,
        fate: Fate::Drop,
    });
    net.a.disconnect(net.now, a, b"").unwrap();
    net.run();
    assert_eq!(net.count(Side::A, CmAttribute::Dreq), 16);
    assert_eq!(
        disconnects(&net.events_a),
        [(true, [0; drep::PRIVATE_DATA_LEN])]
    );
    assert_eq!(timewait_exits(&net.events_a), 1);
    assert_eq!(net.a.state(a), None);
}

#[test]
fn crossing_dreqs_end_both_sides_in_timewait() {
    let mut net = Net::new();
    let (a, b) = net.establish();
    net.a.disconnect(net.now, a, b"from a").unwrap();
    net.b.disconnect(net.now, b, b"from b").unwrap();
    net.run_until(net.now.add(Duration::from_us(100)));
    assert_eq!(net.a.state(a), Some(CmState::Timewait));
    assert_eq!(net.b.state(b), Some(CmState::Timewait));
    assert_eq!(disconnects(&net.events_a), [(false, padded(b"from b"))]);
    assert_eq!(disconnects(&net.events_b), [(false, padded(b"from a"))]);
    assert_eq!(
        (
            net.count(Side::A, CmAttribute::Drep),
            net.count(Side::B, CmAttribute::Drep)
        ),
        (1, 1)
    );
    net.run();
    assert_eq!(
        (timewait_exits(&net.events_a), timewait_exits(&net.events_b)),
        (1, 1)
    );
    assert_eq!(
        net.count(Side::A, CmAttribute::Dreq),
        1,
        "no retransmission"
    );
}

#[test]
fn a_dreq_for_an_unknown_connection_gets_a_drep() {
    let mut net = Net::new();
    let dreq = CmMad::new(
        0xabcd,
        CmMessage::Dreq(DreqRepr {
            local_comm_id: 0x1234,
            remote_comm_id: 0x5678,
            remote_qpn: Qpn::new(9),
            private_data: [0; dreq::PRIVATE_DATA_LEN],
        }),
    );
    let mut buf = [0u8; MAD_LEN];
    dreq.emit(&mut buf).unwrap();
    net.b.handle_mad(net.now, net.pa, &buf);
    let (to, out) = net.b.poll_transmit().unwrap();
    assert_eq!(to, net.pa);
    let mad = CmMad::parse(&out).unwrap();
    assert_eq!(mad.transaction_id, 0xabcd);
    let CmMessage::Drep(d) = mad.message else {
        panic!("{mad:?}")
    };
    assert_eq!((d.local_comm_id, d.remote_comm_id), (0x5678, 0x1234));
    assert!(net.b.poll_event().is_none());
    assert_eq!(net.b.conn_count(), 0);
}

#[test]
fn a_dreq_naming_another_qp_is_dropped() {
    let mut net = Net::new();
    let (a, b) = net.establish();
    let CmMessage::Rep(_) = net.log[1].mad.message else {
        panic!()
    };
    let dreq = CmMad::new(
        1,
        CmMessage::Dreq(DreqRepr {
            local_comm_id: a.comm_id(),
            remote_comm_id: b.comm_id(),
            remote_qpn: Qpn::new(0x333),
            private_data: [0; dreq::PRIVATE_DATA_LEN],
        }),
    );
    let mut buf = [0u8; MAD_LEN];
    dreq.emit(&mut buf).unwrap();
    net.b.handle_mad(net.now, net.pa, &buf);
    assert_eq!(net.b.state(b), Some(CmState::Established));
    assert!(net.b.poll_transmit().is_none());
    assert_eq!(net.b.stats().unmatched, 1);
}

#[test]
fn destroying_an_established_connection_sends_one_dreq_and_lingers_silently() {
    let mut net = Net::new();
    let (a, b) = net.establish();
    let handles = net.a.conn_count();
    net.a.destroy(net.now, a).unwrap();
    assert_eq!(net.a.state(a), None, "gone for the upper layer");
    assert!(net.a.disconnect(net.now, a, b"").is_err());
    net.run_until(net.now.add(Duration::from_us(100)));
    // B was told and answered; A's time-wait still answers the DREP.
    assert_eq!(
        disconnects(&net.events_b),
        [(false, [0; drep::PRIVATE_DATA_LEN])]
    );
    assert_eq!(net.b.state(b), Some(CmState::Timewait));
    assert_eq!(net.a.conn_count(), handles, "A keeps it in time-wait");
    let a_events = net.events_a.len();
    net.run();
    assert_eq!(net.events_a.len(), a_events, "no event after destroy");
    assert_eq!(net.count(Side::A, CmAttribute::Dreq), 1);
    assert_eq!(net.a.conn_count(), 0);
}

#[test]
fn destroying_an_unanswered_req_sends_rej_timeout() {
    let mut net = Net::new();
    net.policy_b.on_req = crate::harness::OnReq::Ignore;
    let (_, a) = net.connect(b"");
    net.run_until(net.now.add(Duration::from_us(100)));
    let b = net.b_conn();
    net.a.destroy(net.now, a).unwrap();
    assert_eq!(net.a.conn_count(), 0, "freed at once");
    net.run();
    let Some((_, CmEvent::Rejected { conn, reason, .. })) = net.events_b.last() else {
        panic!("{:?}", net.events_b);
    };
    assert_eq!((*conn, *reason), (b, doorbell_cm::RejectReason::Timeout));
    assert_eq!(net.count(Side::A, CmAttribute::Req), 1);
    assert!(net.a.destroy(net.now, a).is_err());
}
