//! The port's link taken down and up again (`ip link set down/up`).

use doorbell_verbs::{NicEvent, SendFlags, WcStatus};

use crate::{poll_all, rig, write_wr};

#[test]
fn a_link_taken_down_reports_down_loses_frames_and_comes_back() {
    let r = rig();
    assert!(r.ctx.query_port().active);
    r.ctx.set_port_up(false).unwrap();
    assert!(!r.ctx.query_port().active);
    assert_eq!(
        r.ctx.next_event(std::time::Duration::ZERO),
        Some(NicEvent::PortDown(1))
    );
    // Taking it down again changes nothing and says nothing.
    r.ctx.set_port_up(false).unwrap();
    assert_eq!(r.ctx.next_event(std::time::Duration::ZERO), None);
    // A WRITE's packets go nowhere while it is down: no completion yet.
    let sge = [r.mr.sge(0, 8).unwrap()];
    r.a.post_send(&[write_wr(&r, &sge, SendFlags::SIGNALED)])
        .unwrap();
    assert!(poll_all(&r.cq).is_empty());
    assert!(r.link.counters(None).1.link_down_dropped > 0);
    r.ctx.set_port_up(true).unwrap();
    assert!(r.ctx.query_port().active);
    assert_eq!(
        r.ctx.next_event(std::time::Duration::ZERO),
        Some(NicEvent::PortUp(1))
    );
    // Once it is up, the retransmission timer resends the WRITE.
    r.link
        .advance(doorbell_types::Duration::from_ns(2_000_000_000));
    let wc = poll_all(&r.cq);
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(wc[0].status, WcStatus::Success);
}
