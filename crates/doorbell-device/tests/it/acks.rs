//! ACK coalescing: ACKs queued together leave as the last one.

use doorbell_hif::Command;
use doorbell_types::{Psn, Qpn};
use doorbell_wire::{AethSyndrome, parse_roce};

use crate::{EPSN, LOCAL, PEER, PEER_QPN, Rig, aeth_of};

/// WRITEs handled before any frame leaves are answered by one ACK, the
/// last one's (cumulative, as a NIC that coalesces ACKs sends it); WRITEs
/// whose ACKs leave in between each get their own; a NAK is never folded.
#[test]
fn acks_queued_together_are_coalesced_into_the_last() {
    let mut rig = Rig::new();
    let now = rig.now;
    for i in 0..5u32 {
        let f = rig.write_only(EPSN + i, u64::from(i) * 8, &[i as u8; 8]);
        rig.nic.handle_frame(now, &f, &mut rig.bus);
    }
    let out = rig.transmitted();
    assert!(matches!(aeth_of(&out), AethSyndrome::Ack { .. }));
    let r = parse_roce(&out[0].bytes).unwrap().repr;
    assert_eq!(r.bth.psn, Psn::new(EPSN + 4), "the last WRITE's PSN");
    assert_eq!(r.ext.aeth.unwrap().msn, 5, "all five messages");
    let c = rig.counters();
    assert_eq!((c.acks_coalesced, c.tx_packets), (4, 1));
    assert_eq!(rig.mr_bytes(32, 8), [4u8; 8]);
    // One at a time: one ACK each.
    for i in 5..8u32 {
        let out = rig.frame(&rig.write_only(EPSN + i, 0, &[9; 8]));
        assert_eq!(out.len(), 1);
    }
    assert_eq!(rig.counters().acks_coalesced, 4);
    // A NAK after an ACK stays, and so does the ACK before it.
    let ok = rig.write_only(EPSN + 8, 0, &[1; 8]);
    rig.nic.handle_frame(now, &ok, &mut rig.bus);
    let ahead = rig.write_only(EPSN + 20, 0, &[1; 8]);
    rig.nic.handle_frame(now, &ahead, &mut rig.bus);
    let out = rig.transmitted();
    assert_eq!(out.len(), 2, "the ACK and the sequence NAK");
    // The held ACK is addressed as the NAK is, and to the peer.
    let [ack, nak] = [&out[0], &out[1]].map(|f| parse_roce(&f.bytes).unwrap().repr);
    assert_eq!(
        (ack.ip, ack.src_port, ack.bth.dest_qp),
        (nak.ip, nak.src_port, nak.bth.dest_qp)
    );
    assert_eq!(
        (
            ack.bth.dest_qp,
            ack.ip.src_gid().to_ipv4(),
            ack.ip.dst_gid().to_ipv4()
        ),
        (Qpn::new(PEER_QPN), Some(LOCAL), Some(PEER))
    );
}

/// The ACK a burst owes is one frame however it leaves: taken once its
/// requests are handled, or dropped with the rest when the link goes down,
/// counted as one frame dropped.
#[test]
fn the_owed_ack_is_one_frame_sent_or_dropped() {
    let mut rig = Rig::new();
    let now = rig.now;
    for i in 0..3u32 {
        let f = rig.write_only(EPSN + i, 0, &[1; 8]);
        rig.nic.handle_frame(now, &f, &mut rig.bus);
    }
    rig.exec(Command::AccessPaos(Some(false))).unwrap();
    assert!(
        rig.transmitted().is_empty(),
        "a link that is down sends nothing"
    );
    let c = rig.counters();
    assert_eq!(
        (c.link_down_dropped, c.tx_packets, c.acks_coalesced),
        (1, 1, 2)
    );
    rig.exec(Command::AccessPaos(Some(true))).unwrap();
    // Once up, the next burst's ACK leaves, after a NAK it does not replace.
    let nak = rig.write_only(EPSN + 10, 0, &[1; 8]);
    rig.nic.handle_frame(now, &nak, &mut rig.bus);
    let dup = rig.write_only(EPSN + 1, 0, &[1; 8]);
    rig.nic.handle_frame(now, &dup, &mut rig.bus);
    let out = rig.transmitted();
    assert_eq!(out.len(), 2, "the sequence NAK, then the duplicate's ACK");
    assert!(matches!(aeth_of(&out[..1]), AethSyndrome::Nak(_)));
    assert!(matches!(aeth_of(&out[1..]), AethSyndrome::Ack { .. }));
}
