//! SIDR_REQ/SIDR_REP.

use doorbell_cm::{CmAttribute, CmMessage, SidrStatus, sidr};
use doorbell_cmsm::{CmEvent, TimedOut, cm_timeout};
use doorbell_types::Qpn;

use crate::harness::*;

#[test]
fn sidr_round_trip() {
    let mut net = Net::new();
    let listen = net.b.listen(SERVICE).unwrap();
    let s = net
        .a
        .sidr_request(net.now, net.pb, SERVICE, &sidr_params(), b"sidr-req")
        .unwrap();
    net.run();
    let evb = events(&net.events_b);
    let CmEvent::SidrRequest {
        conn,
        listen: l,
        peer,
        service_id,
        pkey,
        private_data,
    } = evb[0]
    else {
        panic!("{evb:?}");
    };
    assert_eq!(
        (*l, *peer, *service_id, *pkey),
        (listen, net.pa, SERVICE, 0xffff)
    );
    assert_eq!(
        *private_data,
        padded::<{ sidr::REQ_PRIVATE_DATA_LEN }>(b"sidr-req")
    );
    assert_eq!(net.b.state(*conn), None, "answered and freed");
    assert_eq!(
        events(&net.events_a),
        [&CmEvent::SidrReply {
            conn: s,
            status: SidrStatus::Success,
            qpn: Qpn::new(0x77),
            qkey: 0x1234_5678,
            private_data: padded(b"sidr-rep"),
        }]
    );
    assert_eq!(net.a.state(s), None);
    let CmMessage::SidrRep(r) = net.sent(Side::B, CmAttribute::SidrRep)[0].mad.message else {
        panic!()
    };
    assert_eq!((r.request_id, r.service_id), (s.comm_id(), SERVICE));
    assert_eq!(net.a.poll_timeout(), None);
}

#[test]
fn sidr_to_no_listener_is_answered_service_id_not_supported() {
    let mut net = Net::new();
    let s = net
        .a
        .sidr_request(net.now, net.pb, SERVICE, &sidr_params(), b"")
        .unwrap();
    net.run();
    assert!(net.events_b.is_empty());
    let [CmEvent::SidrReply { conn, status, .. }] = events(&net.events_a)[..] else {
        panic!("{:?}", net.events_a);
    };
    assert_eq!((*conn, *status), (s, SidrStatus::Unsupported));
    assert_eq!(u8::from(*status), 1);
}

#[test]
fn an_unanswered_sidr_req_is_sent_again_then_unreachable() {
    let mut net = Net::new();
    net.rules.push(Rule {
        from: Side::A,
        attr: CmAttribute::SidrReq,
        nth: None,
        fate: Fate::Drop,
    });
    let s = net
        .a
        .sidr_request(net.now, net.pb, SERVICE, &sidr_params(), b"")
        .unwrap();
    net.run();
    let reqs = net.sent(Side::A, CmAttribute::SidrReq);
    assert_eq!(reqs.len(), 4, "the first and 3 retries");
    let (at, ev) = net.events_a.last().unwrap();
    assert_eq!(
        *ev,
        CmEvent::Unreachable {
            conn: s,
            message: TimedOut::SidrReq
        }
    );
    assert_eq!(at.since(reqs[0].at), cm_timeout(18).mul(4));
}

#[test]
fn a_lost_sidr_req_is_sent_again_and_a_duplicate_pending_one_dropped() {
    let mut net = Net::new();
    net.policy_b.sidr = None;
    net.b.listen(SERVICE).unwrap();
    net.a
        .sidr_request(net.now, net.pb, SERVICE, &sidr_params(), b"")
        .unwrap();
    net.run_until(net.now.add(cm_timeout(18)).add(cm_timeout(10)));
    // B has not answered; A sent again; B reported it once.
    assert_eq!(net.count(Side::A, CmAttribute::SidrReq), 2);
    assert_eq!(net.events_b.len(), 1);
    assert_eq!(net.b.stats().duplicates, 1);
}
