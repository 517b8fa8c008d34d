//! UC end to end: every UC opcode between two NICs on the live runtime,
//! and UC's loss rules on the virtual clock ([`LoopbackLink`] with a fault
//! on its loopback path): a message that loses a packet vanishes, the next
//! arrives whole, and the sender sees success for both.

use std::sync::Arc;

use doorbell_hif::DeviceLink;
use doorbell_pcie::LinkConfig;
use doorbell_rt::{Fabric, Fate, LiveNic, LoopbackLink};
use doorbell_types::Psn;
use doorbell_verbs::{
    Access, Context, Cq, Mr, Qp, QpCaps, QpInitAttr, QpType, RcEndpoint, RecvWr, RemoteAddr,
    SendFlags, SendWr, VerbsError, WcOpcode, WcStatus, WrOpcode,
};
use doorbell_wire::BthOpcode;

use crate::common::{FULL, pattern, wait};
use crate::net::{nth_of, tap_policy};

const MR_LEN: usize = 1 << 18;

/// One end: a UC QP with its CQ and an MR.
struct End {
    ctx: Context,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

fn end(link: Arc<dyn DeviceLink>) -> End {
    let ctx = Context::open(link).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Uc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: 32,
                max_recv_wr: 32,
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 64,
            },
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    let mr = pd.reg_mr(MR_LEN, Access(FULL)).unwrap();
    End { ctx, cq, qp, mr }
}

fn connect(a: &End, b: &End, mtu: u32) {
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x00ff_fffd),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(0x42),
    };
    a.qp.connect_uc(&ea, &eb, mtu).unwrap();
    b.qp.connect_uc(&eb, &ea, mtu).unwrap();
}

fn signaled(wr_id: u64, sg_list: &[doorbell_verbs::Sge], opcode: WrOpcode) -> SendWr<'_> {
    SendWr {
        wr_id,
        sg_list,
        opcode,
        flags: SendFlags::SIGNALED,
        ud: None,
    }
}

fn post_recv(e: &End, wr_id: u64, off: u64, len: u32) {
    let sge = e.mr.sge(off, len).unwrap();
    e.qp.post_recv(&[RecvWr {
        wr_id,
        sg_list: &[sge],
    }])
    .unwrap();
}

#[test]
fn every_uc_opcode_carries_its_data_at_every_size() {
    let fabric = Fabric::new();
    let nic = |name, ip| -> Arc<dyn DeviceLink> {
        Arc::new(LiveNic::start(name, &fabric, ip, LinkConfig::default()).unwrap())
    };
    let a = end(nic("uc-a", [127, 0, 0, 2]));
    let b = end(nic("uc-b", [127, 0, 0, 3]));
    connect(&a, &b, 1024);
    let remote = |off| RemoteAddr {
        addr: b.mr.addr() + off,
        rkey: b.mr.rkey(),
    };
    let mut wr_id = 0;
    for (k, len) in [0usize, 1, 4095, 4096, 65536].into_iter().enumerate() {
        let data = pattern(len, k as u8 + 1);
        a.mr.write(0, &data).unwrap();
        let src = [a.mr.sge(0, len as u32).unwrap()];
        for op in [
            WrOpcode::Send,
            WrOpcode::SendWithImm(0xabc0 + k as u32),
            WrOpcode::RdmaWrite(remote(0)),
            WrOpcode::RdmaWriteWithImm(remote(0), 0xdef0 + k as u32),
        ] {
            wr_id += 1;
            b.mr.write(0, &vec![0xee; len + 16]).unwrap();
            let with_recv = !matches!(op, WrOpcode::RdmaWrite(_));
            if with_recv {
                post_recv(&b, wr_id, 0, len.max(1) as u32 + 16);
            }
            a.qp.post_send(&[signaled(wr_id, &src, op)]).unwrap();
            let sent = wait(&a.cq, 1);
            assert_eq!(
                (sent[0].wr_id, sent[0].status),
                (wr_id, WcStatus::Success),
                "{op:?} {len}"
            );
            if with_recv {
                let got = wait(&b.cq, 1);
                let w = got[0];
                assert_eq!((w.wr_id, w.status), (wr_id, WcStatus::Success), "{op:?}");
                assert_eq!(w.qp_num, b.qp.qpn());
                match op {
                    WrOpcode::Send => {
                        assert_eq!(
                            (w.opcode, w.byte_len, w.imm_data),
                            (WcOpcode::Recv, len as u32, None)
                        )
                    }
                    WrOpcode::SendWithImm(i) => {
                        assert_eq!(
                            (w.opcode, w.byte_len, w.imm_data),
                            (WcOpcode::Recv, len as u32, Some(i))
                        )
                    }
                    WrOpcode::RdmaWriteWithImm(_, i) => assert_eq!(
                        (w.opcode, w.byte_len, w.imm_data),
                        (WcOpcode::RecvRdmaWithImm, len as u32, Some(i))
                    ),
                    _ => unreachable!(),
                }
            } else {
                // A WRITE completes nothing at the responder: a SEND
                // after it on the same QP lands after it.
                post_recv(&b, 1 << 32, MR_LEN as u64 - 64, 64);
                a.qp.post_send(&[signaled(1 << 32, &[], WrOpcode::Send)])
                    .unwrap();
                assert_eq!(wait(&a.cq, 1)[0].wr_id, 1 << 32);
                assert_eq!(wait(&b.cq, 1)[0].wr_id, 1 << 32);
            }
            let mut got = vec![0u8; len + 16];
            b.mr.read(0, &mut got).unwrap();
            assert_eq!(&got[..len], &data[..], "{op:?} {len}");
            assert!(
                got[len..].iter().all(|&x| x == 0xee),
                "{op:?} {len}: past the end"
            );
        }
    }
}

/// Two UC QPs of one NIC on the virtual clock, every loopback frame through
/// `decide` (which sees each frame and how many of its opcode went before).
fn looped(
    decide: impl FnMut(&crate::net::Seen, usize) -> Fate + Send + 'static,
) -> (Arc<LoopbackLink>, End, End) {
    let (policy, _log) = tap_policy(decide);
    let link = Arc::new(LoopbackLink::with_faults("uc-vt", [10, 0, 0, 9], policy));
    let a = end(link.clone());
    let b = end(link.clone());
    connect(&a, &b, 1024);
    (link, a, b)
}

fn poll_all(cq: &Cq) -> Vec<doorbell_verbs::Wc> {
    let mut buf = [doorbell_verbs::Wc::default(); 16];
    let mut out = Vec::new();
    loop {
        let n = cq.poll(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_send_that_loses_a_packet_vanishes_and_the_next_arrives_whole() {
    // The first SEND Middle is lost: packet 2 of the 3 of message 1.
    let (link, a, b) = looped(nth_of(BthOpcode::UcSendMiddle, 0, Fate::Drop));
    let m1 = pattern(3000, 1);
    let m2 = pattern(2000, 2);
    a.mr.write(0, &m1).unwrap();
    a.mr.write(8192, &m2).unwrap();
    b.mr.write(0, &vec![0xee; 16384]).unwrap();
    post_recv(&b, 101, 0, 4096);
    post_recv(&b, 102, 8192, 4096);
    let s1 = [a.mr.sge(0, 3000).unwrap()];
    let s2 = [a.mr.sge(8192, 2000).unwrap()];
    a.qp.post_send(&[
        signaled(1, &s1, WrOpcode::Send),
        signaled(2, &s2, WrOpcode::Send),
    ])
    .unwrap();
    // The sender saw both leave: success for both, nothing else to wait
    // for (no ACK, no timer).
    let sent = poll_all(&a.cq);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    // Nothing is retransmitted, however long one waits.
    let tx = link.counters(None).1.tx_packets;
    link.advance(doorbell_types::Duration::from_us(1_000_000));
    assert_eq!(link.counters(None).1.tx_packets, tx, "UC never retransmits");
    // Message 1 vanished; message 2 landed whole in the receive WQE that
    // message 1 had begun to fill, which is used again from its start.
    let got = poll_all(&b.cq);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        [(101, WcStatus::Success, 2000)]
    );
    let mut buf = vec![0u8; 16384];
    b.mr.read(0, &mut buf).unwrap();
    assert_eq!(&buf[..2000], &m2[..]);
    assert!(
        buf[8192..].iter().all(|&x| x == 0xee),
        "the second receive is still posted, untouched"
    );
    let c = link.counters(None).1;
    // Two packets came out of sequence: message 1's Last (dropped), and
    // message 2's First, at whose PSN the responder starts over.
    assert_eq!(c.out_of_sequence, 2);
    assert_eq!(c.rnr_nak_sent + c.packet_seq_err, 0, "UC never NAKs");
    // The second receive takes the next message.
    let m3 = pattern(100, 3);
    a.mr.write(0, &m3).unwrap();
    let s3 = [a.mr.sge(0, 100).unwrap()];
    a.qp.post_send(&[signaled(3, &s3, WrOpcode::Send)]).unwrap();
    assert_eq!(poll_all(&a.cq)[0].wr_id, 3);
    let got = poll_all(&b.cq);
    assert_eq!((got[0].wr_id, got[0].byte_len), (102, 100));
    b.mr.read(8192, &mut buf[..100]).unwrap();
    assert_eq!(&buf[..100], &m3[..]);
}

#[test]
fn an_out_of_sequence_write_stops_at_the_loss_and_the_next_arrives_whole() {
    // Packet 3 of the first 4-packet WRITE (its second Middle) is lost.
    let (link, a, b) = looped(nth_of(BthOpcode::UcRdmaWriteMiddle, 1, Fate::Drop));
    let data = pattern(4096, 9);
    a.mr.write(0, &data).unwrap();
    b.mr.write(0, &vec![0xee; 8192]).unwrap();
    post_recv(&b, 77, 12288, 16);
    let src = [a.mr.sge(0, 4096).unwrap()];
    let to = |off| RemoteAddr {
        addr: b.mr.addr() + off,
        rkey: b.mr.rkey(),
    };
    a.qp.post_send(&[
        signaled(1, &src, WrOpcode::RdmaWrite(to(0))),
        signaled(2, &src, WrOpcode::RdmaWriteWithImm(to(4096), 5)),
    ])
    .unwrap();
    let sent = poll_all(&a.cq);
    assert_eq!(
        sent.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let got = poll_all(&b.cq);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.opcode, w.imm_data, w.byte_len))
            .collect::<Vec<_>>(),
        [(77, WcOpcode::RecvRdmaWithImm, Some(5), 4096)]
    );
    let mut buf = vec![0u8; 8192];
    b.mr.read(0, &mut buf).unwrap();
    assert_eq!(
        &buf[..2048],
        &data[..2048],
        "the packets before the loss landed"
    );
    assert!(
        buf[2048..4096].iter().all(|&x| x == 0xee),
        "nothing after the loss was written"
    );
    assert_eq!(&buf[4096..], &data[..], "the second WRITE arrived whole");
    // The first WRITE's Last, and the second's First.
    assert_eq!(link.counters(None).1.out_of_sequence, 2);
}

#[test]
fn read_and_atomics_on_uc_are_refused_at_post() {
    let link = Arc::new(LoopbackLink::new("uc-refuse", [10, 0, 0, 8]));
    let a = end(link.clone());
    let b = end(link.clone());
    connect(&a, &b, 1024);
    let remote = RemoteAddr {
        addr: b.mr.addr(),
        rkey: b.mr.rkey(),
    };
    let sge = [a.mr.sge(0, 8).unwrap()];
    for op in [
        WrOpcode::RdmaRead(remote),
        WrOpcode::AtomicCmpSwp {
            remote,
            compare: 0,
            swap: 1,
        },
        WrOpcode::AtomicFetchAdd { remote, add: 1 },
    ] {
        let e = a.qp.post_send_list(&[signaled(1, &sge, op)]).unwrap_err();
        assert_eq!(e.index, 0);
        assert!(matches!(e.error, VerbsError::InvalidArgument(_)), "{op:?}");
        assert_eq!(e.error.errno(), libc::EINVAL);
    }
    // Nothing was posted: a SEND after them is the first WQE.
    let recv = [b.mr.sge(0, 8).unwrap()];
    b.qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &recv,
    }])
    .unwrap();
    a.qp.post_send(&[signaled(2, &sge, WrOpcode::Send)])
        .unwrap();
    assert_eq!(poll_all(&a.cq)[0].wr_id, 2);
    assert_eq!(poll_all(&b.cq)[0].wr_id, 9);
}

#[test]
fn a_uc_qp_with_an_srq_keeps_the_wqe_of_a_lost_message_for_its_next() {
    let (policy, _log) = tap_policy(nth_of(BthOpcode::UcSendMiddle, 0, Fate::Drop));
    let link = Arc::new(LoopbackLink::with_faults("uc-srq", [10, 0, 0, 4], policy));
    let a = end(link.clone());
    // B's QP takes its receives from an SRQ of B's PD.
    let ctx = Context::open(link.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd
        .create_srq(&doorbell_verbs::SrqInitAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Uc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps::default(),
            sq_sig_all: false,
            srq: Some(srq.clone()),
        })
        .unwrap();
    let mr = pd.reg_mr(MR_LEN, Access(FULL)).unwrap();
    let b = End { ctx, cq, qp, mr };
    connect(&a, &b, 1024);
    b.mr.write(0, &vec![0xee; 8192]).unwrap();
    for (wr_id, off) in [(1u64, 0u64), (2, 4096)] {
        let sge = [b.mr.sge(off, 4096).unwrap()];
        srq.post_recv(&[RecvWr {
            wr_id,
            sg_list: &sge,
        }])
        .unwrap();
    }
    let (m1, m2) = (pattern(3000, 1), pattern(2000, 2));
    a.mr.write(0, &m1).unwrap();
    a.mr.write(4096, &m2).unwrap();
    let (s1, s2) = (
        [a.mr.sge(0, 3000).unwrap()],
        [a.mr.sge(4096, 2000).unwrap()],
    );
    a.qp.post_send(&[
        signaled(1, &s1, WrOpcode::Send),
        signaled(2, &s2, WrOpcode::Send),
    ])
    .unwrap();
    assert_eq!(poll_all(&a.cq).len(), 2);
    let got = poll_all(&b.cq);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.qp_num, w.byte_len))
            .collect::<Vec<_>>(),
        [(1, b.qp.qpn(), 2000)],
        "the SRQ WQE the lost message took went to the next one"
    );
    let mut buf = vec![0u8; 2000];
    b.mr.read(0, &mut buf).unwrap();
    assert_eq!(buf, m2);
}
