//! Hostile peers on the wire. A live NIC on a UDP port gets packets that
//! are well formed and carry a correct ICRC but are wrong on purpose: from
//! the address its QP is connected to, and from other addresses. The test
//! is that peer: a plain UDP socket on the QP's remote address, speaking
//! RoCEv2 built by doorbell-wire's emitters, reading what the NIC answers.
//!
//! Each case asserts what IBTA Vol 1 chapter 9 and mlx5 hardware do: drop,
//! ACK again, NAK with the syndrome the spec names, error on the right QP,
//! counters under the kernel's `hw_counters` names. After each, a second
//! pair of QPs on the same NIC must still carry a WRITE and a SEND, the
//! device thread must still answer, and the NIC's registered memory must
//! hold exactly what the rules let the packets write.
//!
//! The last case is a peer that is slow, not hostile: it holds its ACKs, so
//! that the NIC's window stays full while its program polls.

use std::cell::{Cell, RefCell};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use doorbell_device::NicCounters;
use doorbell_hif::{CmdOut, Command, DeviceLink};
use doorbell_rt::{LiveNic, Port};
use doorbell_types::{Mkey, Psn, Qpn};
use doorbell_verbs::{
    Access, Cq, Mr, Qp, QpAttrs, QpInitAttr, QpState, QpType, RcEndpoint, RemoteAddr, Wc, WcOpcode,
    WcStatus, WrOpcode,
};
use doorbell_wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthOpcode, BthRepr, DethRepr,
    ExtHeaders, Gid, IethRepr, ImmDtRepr, IpProtocol, Ipv4Header, Ipv4Repr, NakCode,
    ROCE_V2_UDP_PORT, RethRepr, RoceIp, RoceRepr, UdpHeader, UdpRepr, parse_roce,
};

use crate::common::{FULL, Side, keep_to_one_cpu, pattern, post, post_recv, signaled, wait};
use crate::net::{Timers, bring_qp, caps, connect_qp, lo, side_on, sync, udp_only, wait_counters};

use BthOpcode::*;

/// QPN of the peer the NIC's QPs are connected to (the test's socket);
/// QPs made by [`Rig::victim`] add their tag.
const PEER_QPN: u32 = 0x00ab_c000;
/// First PSN of the peer's requests: the first messages cross the wrap.
const PEER_PSN: u32 = 0x00ff_fff0;
/// First PSN of the NIC's own requests.
const NIC_PSN: u32 = 0x0012_3400;
const MTU: u32 = 256;
const MR_LEN: usize = 1 << 16;
const SENTINEL: u8 = 0x5a;
/// Where things go in the attacked NIC's MR: receive buffers, WRITE
/// targets, READ sources, atomic words.
const RECV_OFF: u64 = 0;
const WRITE_OFF: u64 = 8192;
const READ_OFF: u64 = 16384;
const ATOMIC_OFF: u64 = 32768;
/// IPv4 and UDP headers: the kernel writes them; the datagram is the rest.
const HEADERS_LEN: usize = 20 + 8;

/// RC timers of the attacked QPs: a small MTU, and an ACK timeout of about
/// a second, so that the NIC's own requests are not sent again while a
/// case runs.
fn timers() -> Timers {
    Timers {
        mtu: MTU,
        timeout: 18,
        retry_cnt: 7,
        min_rnr_timer: 1,
        rnr_retry: 7,
        rd_atomic: 4,
    }
}

/// A packet as some peer sends it.
#[derive(Debug, Clone)]
struct Pkt {
    op: BthOpcode,
    ext: ExtHeaders,
    payload: Vec<u8>,
}

impl Pkt {
    fn op(op: BthOpcode, payload: Vec<u8>) -> Self {
        Self {
            op,
            ext: ExtHeaders::NONE,
            payload,
        }
    }

    fn send(len: usize, seed: u8) -> Self {
        Self::op(RcSendOnly, pattern(len, seed))
    }

    fn write(op: BthOpcode, va: u64, rkey: Mkey, dma_len: u32, payload: Vec<u8>) -> Self {
        Self {
            op,
            ext: ExtHeaders {
                reth: Some(RethRepr { va, rkey, dma_len }),
                ..ExtHeaders::NONE
            },
            payload,
        }
    }

    fn read(va: u64, rkey: Mkey, dma_len: u32) -> Self {
        Self::write(RcRdmaReadRequest, va, rkey, dma_len, Vec::new())
    }

    fn atomic(op: BthOpcode, va: u64, rkey: Mkey, swap_add: u64, compare: u64) -> Self {
        Self {
            op,
            ext: ExtHeaders {
                atomic_eth: Some(AtomicEthRepr {
                    va,
                    rkey,
                    swap_add,
                    compare,
                }),
                ..ExtHeaders::NONE
            },
            payload: Vec::new(),
        }
    }

    fn with_imm(mut self, imm: u32) -> Self {
        self.ext.immdt = Some(ImmDtRepr { imm });
        self
    }

    /// An ACK, NAK or RNR NAK.
    fn aeth(syndrome: AethSyndrome) -> Self {
        Self {
            op: RcAck,
            ext: ExtHeaders {
                aeth: Some(AethRepr { syndrome, msn: 0 }),
                ..ExtHeaders::NONE
            },
            payload: Vec::new(),
        }
    }

    fn ack() -> Self {
        Self::aeth(AethSyndrome::Ack { credits: 0x1f })
    }

    fn nak(code: NakCode) -> Self {
        Self::aeth(AethSyndrome::Nak(code))
    }

    fn rnr_nak() -> Self {
        Self::aeth(AethSyndrome::RnrNak { timer: 1 })
    }

    /// A packet of any opcode, with the headers the opcode calls for and
    /// plausible values in them.
    fn any(op: BthOpcode, va: u64, rkey: Mkey) -> Self {
        let carries_data =
            op.is_request() && !matches!(op, RcRdmaReadRequest | RcCompareSwap | RcFetchAdd);
        Self {
            op,
            ext: ExtHeaders {
                deth: op.has_deth().then_some(DethRepr {
                    qkey: 0x1111_1111,
                    src_qp: Qpn::new(PEER_QPN),
                }),
                reth: op.has_reth().then_some(RethRepr {
                    va,
                    rkey,
                    dma_len: 16,
                }),
                atomic_eth: op.has_atomic_eth().then_some(AtomicEthRepr {
                    va,
                    rkey,
                    swap_add: 1,
                    compare: 0,
                }),
                aeth: op.has_aeth().then_some(AethRepr {
                    syndrome: AethSyndrome::Ack { credits: 0x1f },
                    msn: 0,
                }),
                atomic_ack_eth: op
                    .has_atomic_ack_eth()
                    .then_some(AtomicAckEthRepr { orig: 0 }),
                immdt: op.has_immdt().then_some(ImmDtRepr { imm: 0x0bad }),
                ieth: op.has_ieth().then_some(IethRepr { rkey }),
            },
            payload: if carries_data {
                pattern(16, 0xee)
            } else {
                Vec::new()
            },
        }
    }

    /// The BTH: AckReq on a message's last packet, as requesters set it.
    fn bth(&self, qpn: Qpn, psn: Psn) -> BthRepr {
        let mut b = BthRepr::new(self.op, qpn, psn);
        b.ack_req = self.op.is_request()
            && !matches!(
                self.op,
                RcSendFirst | RcSendMiddle | RcRdmaWriteFirst | RcRdmaWriteMiddle
            );
        b
    }
}

/// A frame the NIC sent, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    op: BthOpcode,
    dest_qp: u32,
    psn: u32,
    syndrome: Option<AethSyndrome>,
    msn: Option<u32>,
    orig: Option<u64>,
    reth: Option<RethRepr>,
    payload: Vec<u8>,
}

/// A UDP socket that speaks RoCEv2 to one NIC.
struct Wire {
    sock: UdpSocket,
    ip: [u8; 4],
    nic: [u8; 4],
}

impl Wire {
    /// A socket on `ip:port` (port 0: any) that talks to the NIC at `nic`.
    fn bind(ip: [u8; 4], port: u16, nic: [u8; 4]) -> Self {
        let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::from(ip), port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        Self { sock, ip, nic }
    }

    fn port(&self) -> u16 {
        self.sock.local_addr().unwrap().port()
    }

    /// The datagram of a frame from this socket: the frame's ICRC covers
    /// the addresses and ports the kernel will write.
    fn datagram(&self, qpn: Qpn, psn: Psn, p: &Pkt) -> Vec<u8> {
        let repr = RoceRepr {
            ip: RoceIp::v4(self.ip, self.nic),
            src_port: self.port(),
            bth: p.bth(qpn, psn),
            ext: p.ext,
        };
        let mut f = Vec::new();
        repr.emit_to_vec(&p.payload, &mut f).unwrap();
        f.split_off(HEADERS_LEN)
    }

    fn send_raw(&self, datagram: &[u8]) {
        let to = SocketAddrV4::new(Ipv4Addr::from(self.nic), ROCE_V2_UDP_PORT);
        self.sock.send_to(datagram, to).unwrap();
    }

    fn send(&self, qpn: Qpn, psn: Psn, p: &Pkt) {
        self.send_raw(&self.datagram(qpn, psn, p));
    }

    /// The next frame that arrives within `within`, checked as a NIC checks
    /// one (its ICRC included).
    fn next(&self, within: Duration) -> Option<Answer> {
        let deadline = Instant::now() + within;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match self.sock.recv_from(&mut buf) {
                Ok((n, SocketAddr::V4(from))) => return Some(self.parse(from, &buf[..n])),
                Ok(_) => panic!("not IPv4"),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() >= deadline {
                        return None;
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn parse(&self, from: SocketAddrV4, d: &[u8]) -> Answer {
        let mut f = vec![0u8; HEADERS_LEN + d.len()];
        Ipv4Repr {
            src_addr: from.ip().octets(),
            dst_addr: self.ip,
            protocol: IpProtocol::Udp,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            payload_len: 8 + d.len(),
        }
        .emit(&mut Ipv4Header::new_unchecked(&mut f[..]));
        UdpRepr {
            src_port: from.port(),
            dst_port: self.port(),
            payload_len: d.len(),
        }
        .emit(&mut UdpHeader::new_unchecked(&mut f[20..]));
        f[HEADERS_LEN..].copy_from_slice(d);
        let p = parse_roce(&f).expect("the NIC sends well-formed frames with a good ICRC");
        let ext = p.repr.ext;
        Answer {
            op: p.repr.bth.opcode,
            dest_qp: p.repr.bth.dest_qp.get(),
            psn: p.repr.bth.psn.get(),
            syndrome: ext.aeth.map(|a| a.syndrome),
            msn: ext.aeth.map(|a| a.msn),
            orig: ext.atomic_ack_eth.map(|a| a.orig),
            reth: ext.reth,
            payload: f[p.payload].to_vec(),
        }
    }

    /// The next frame; fails after 5 s.
    fn answer(&self) -> Answer {
        self.next(Duration::from_secs(5))
            .expect("the NIC answers within 5 s")
    }

    /// Fails if a frame arrives within 30 ms.
    fn assert_quiet(&self, what: &str) {
        if let Some(a) = self.next(Duration::from_millis(30)) {
            panic!("{what}: unexpected {a:?}");
        }
    }
}

/// Frames for QPs of the NIC it has taken from its port, whatever it did
/// with them (`rx_dropped` counts those it dropped again).
fn taken(c: &NicCounters) -> u64 {
    c.rx_packets
}

fn state(qp: &Qp) -> QpState {
    qp.query().unwrap().0
}

fn assert_empty(cq: &Cq, what: &str) {
    let mut buf = [Wc::default(); 8];
    let n = cq.poll(&mut buf).unwrap();
    assert_eq!(n, 0, "{what}: unexpected completions {:?}", &buf[..n]);
}

fn ack_of(psn: Psn, msn: u32) -> (BthOpcode, u32, Option<AethSyndrome>, Option<u32>) {
    (
        RcAck,
        psn.get(),
        Some(AethSyndrome::Ack { credits: 0x1f }),
        Some(msn),
    )
}

fn nak_of(psn: Psn, code: NakCode) -> (BthOpcode, u32, Option<AethSyndrome>) {
    (RcAck, psn.get(), Some(AethSyndrome::Nak(code)))
}

fn head(a: &Answer) -> (BthOpcode, u32, Option<AethSyndrome>, Option<u32>) {
    (a.op, a.psn, a.syndrome, a.msn)
}

fn nak_head(a: &Answer) -> (BthOpcode, u32, Option<AethSyndrome>) {
    (a.op, a.psn, a.syndrome)
}

/// Two NICs on UDP ports. B is attacked: its QP `b.qp` is connected to the
/// test's socket `peer`; `liar` is a socket on another address. B's second
/// QP `qp2` is connected to A's, for the check that other QPs still work.
struct Rig {
    a: Side,
    b: Side,
    qp2: Qp,
    cq2: Cq,
    mr2: Mr,
    peer_ip: [u8; 4],
    b_ip: [u8; 4],
    peer: Wire,
    liar: Wire,
    /// What `b.mr` must hold.
    image: RefCell<Vec<u8>>,
    rounds: Cell<u8>,
}

fn rig(net: u8) -> Rig {
    let (a_ip, b_ip, peer_ip, liar_ip) = (lo(net, 2), lo(net, 3), lo(net, 5), lo(net, 9));
    let start = |name, ip| LiveNic::start_with(name, ip, Port::Udp, udp_only()).unwrap();
    let a = side_on(start("hostile-a", a_ip), caps(16), MR_LEN, 256);
    let b = side_on(start("hostile-b", b_ip), caps(16), MR_LEN, 256);
    let peer = Wire::bind(peer_ip, ROCE_V2_UDP_PORT, b_ip);
    let liar = Wire::bind(liar_ip, ROCE_V2_UDP_PORT, b_ip);
    b.mr.write(0, &vec![SENTINEL; MR_LEN]).unwrap();
    let local = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(NIC_PSN),
    };
    connect_qp(&b.qp, &local, &peer_end(peer_ip, 0), timers());
    let cq2 = b.ctx.create_cq(64).unwrap();
    let qp2 = qp_on(&b, &cq2, QpType::Rc);
    let mr2 = b.pd.reg_mr(MR_LEN, Access(FULL)).unwrap();
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x777),
    };
    let e2 = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: qp2.qpn(),
        psn: Psn::new(0x999),
    };
    connect_qp(&a.qp, &ea, &e2, Timers::default());
    connect_qp(&qp2, &e2, &ea, Timers::default());
    Rig {
        a,
        b,
        qp2,
        cq2,
        mr2,
        peer_ip,
        b_ip,
        peer,
        liar,
        image: RefCell::new(vec![SENTINEL; MR_LEN]),
        rounds: Cell::new(0),
    }
}

/// The test's socket as an RC endpoint: QPN `PEER_QPN + tag`.
fn peer_end(ip: [u8; 4], tag: u32) -> RcEndpoint {
    RcEndpoint {
        gid: Gid::from_ipv4(ip).octets(),
        qpn: Qpn::new(PEER_QPN + tag),
        psn: Psn::new(PEER_PSN),
    }
}

fn qp_on(s: &Side, cq: &Cq, qp_type: QpType) -> Qp {
    s.pd.create_qp(&QpInitAttr {
        qp_type,
        send_cq: cq.clone(),
        recv_cq: cq.clone(),
        cap: caps(16),
        sq_sig_all: false,
        srq: None,
    })
    .unwrap()
}

/// Moves an RC `qp` from RESET up to `to` (INIT, RTR or RTS) towards
/// `remote`, with [`timers`].
fn bring(qp: &Qp, to: QpState, remote: &RcEndpoint) {
    bring_qp(qp, to, Psn::new(NIC_PSN), remote, timers());
}

impl Rig {
    fn counters(&self) -> NicCounters {
        sync(&self.b)
    }

    /// Waits until B has taken `n` frames more than at `before`.
    fn seen(&self, before: &NicCounters, n: u64) -> NicCounters {
        let want = taken(before) + n;
        wait_counters(&self.b, "B to take the frames sent", |c| taken(c) >= want)
    }

    /// A fresh RC QP of B with its own CQ, in RTS towards the peer's QPN
    /// `PEER_QPN + tag`.
    fn victim(&self, tag: u32) -> (Qp, Cq) {
        let cq = self.b.ctx.create_cq(64).unwrap();
        let qp = qp_on(&self.b, &cq, QpType::Rc);
        bring(&qp, QpState::Rts, &peer_end(self.peer_ip, tag));
        (qp, cq)
    }

    fn va(&self, off: u64) -> u64 {
        self.b.mr.addr() + off
    }

    fn rkey(&self) -> Mkey {
        self.b.mr.rkey()
    }

    /// Records that the rules let `data` land at `off` of B's MR.
    fn wrote(&self, off: u64, data: &[u8]) {
        self.image.borrow_mut()[off as usize..off as usize + data.len()].copy_from_slice(data);
    }

    /// B's MR at `off..off + len` as the image holds it.
    fn expected(&self, off: u64, len: usize) -> Vec<u8> {
        self.image.borrow()[off as usize..off as usize + len].to_vec()
    }

    /// B's MR holds exactly what the rules allowed.
    fn check_memory(&self, what: &str) {
        let got = self.b.mr.to_vec().unwrap();
        let image = self.image.borrow();
        let bad = got.iter().zip(image.iter()).position(|(g, w)| g != w);
        assert_eq!(
            bad, None,
            "{what}: B's memory changed where no rule lets it"
        );
    }

    /// The NIC still works: its device thread answers, and a WRITE and a
    /// SEND between the second pair of QPs succeed with the data in
    /// place; B's memory holds what it should.
    fn healthy(&self, what: &str) {
        assert!(
            matches!(self.b.nic.exec(Command::QueryCaps), Ok(CmdOut::Caps(_))),
            "{what}: B's device thread is gone"
        );
        let round = self.rounds.get().wrapping_add(1);
        self.rounds.set(round);
        let data = pattern(3000, round);
        self.a.mr.write(0, &data).unwrap();
        let sge = [self.a.mr.sge(0, 3000).unwrap()];
        let remote = RemoteAddr {
            addr: self.mr2.addr(),
            rkey: self.mr2.rkey(),
        };
        post(&self.a.qp, signaled(1, &sge, WrOpcode::RdmaWrite(remote)));
        let w = wait(&self.a.cq, 1)[0];
        assert!(w.is_ok(), "{what}: the other pair's WRITE: {w:?}");
        post_recv(&self.qp2, 2, &[self.mr2.sge(4096, 4096).unwrap()]);
        post(&self.a.qp, signaled(2, &sge, WrOpcode::Send));
        let w = wait(&self.a.cq, 1)[0];
        assert!(w.is_ok(), "{what}: the other pair's SEND: {w:?}");
        let r = wait(&self.cq2, 1)[0];
        assert_eq!((r.status, r.byte_len), (WcStatus::Success, 3000), "{what}");
        let mut got = vec![0u8; 3000];
        self.mr2.read(0, &mut got).unwrap();
        assert!(got == data, "{what}: the other pair's WRITE data");
        self.mr2.read(4096, &mut got).unwrap();
        assert!(got == data, "{what}: the other pair's SEND data");
        assert_eq!(state(&self.qp2), QpState::Rts, "{what}");
        self.check_memory(what);
    }
}

/// Packets from an address that is not the connected peer's, or of a
/// source port other than 4791, to RC and UC QPs.
#[test]
fn a_connected_qp_takes_packets_from_its_peers_address_only() {
    let r = rig(70);
    let q = r.b.qp.qpn();
    let e = Psn::new(PEER_PSN);
    let s = Psn::new(NIC_PSN);
    let rkey = r.rkey();
    post_recv(&r.b.qp, 1, &[r.b.mr.sge(RECV_OFF, 1024).unwrap()]);
    // B has a WRITE outstanding, for forged answers to act on.
    let remote = RemoteAddr {
        addr: 0x10_0000,
        rkey: Mkey::from_raw(0x4242),
    };
    post(
        &r.b.qp,
        signaled(
            7,
            &[r.b.mr.sge(READ_OFF, 100).unwrap()],
            WrOpcode::RdmaWrite(remote),
        ),
    );
    let w = r.peer.answer();
    assert_eq!(
        (w.op, w.dest_qp, w.psn, w.payload),
        (
            RcRdmaWriteOnly,
            PEER_QPN,
            NIC_PSN,
            r.expected(READ_OFF, 100)
        )
    );
    let requests = [
        Pkt::send(64, 1),
        Pkt::write(RcRdmaWriteOnly, r.va(WRITE_OFF), rkey, 64, pattern(64, 2)),
        Pkt::write(
            RcRdmaWriteOnlyWithImmediate,
            r.va(WRITE_OFF),
            rkey,
            64,
            pattern(64, 2),
        )
        .with_imm(5),
        Pkt::read(r.va(READ_OFF), rkey, 64),
        Pkt::atomic(RcFetchAdd, r.va(ATOMIC_OFF), rkey, 1, 0),
        Pkt::atomic(RcCompareSwap, r.va(ATOMIC_OFF), rkey, 1, 0),
    ];
    let answers = [
        Pkt::ack(),
        Pkt::nak(NakCode::RemoteAccessErr),
        Pkt::nak(NakCode::PsnSeqErr),
        Pkt::rnr_nak(),
        Pkt {
            op: RcRdmaReadResponseOnly,
            ..Pkt::ack()
        },
    ];
    // From another address, on port 4791 and on any port.
    let other_port = Wire::bind(lo(70, 9), 0, r.b_ip);
    let before = r.counters();
    for liar in [&r.liar, &other_port] {
        for p in &requests {
            liar.send(q, e, p);
        }
        for p in &answers {
            liar.send(q, s, p);
        }
    }
    let n = 2 * (requests.len() + answers.len()) as u64;
    let after = r.seen(&before, n);
    assert_eq!(
        after.rx_dropped - before.rx_dropped,
        n,
        "dropped and counted"
    );
    assert_eq!(
        (after.rx_write_requests, after.rx_read_requests),
        (before.rx_write_requests, before.rx_read_requests)
    );
    assert_eq!(after.rx_atomic_requests, before.rx_atomic_requests);
    r.peer.assert_quiet("packets from another address");
    r.liar.assert_quiet("packets from another address");
    other_port.assert_quiet("packets from another address");
    assert_empty(&r.b.cq, "packets from another address");
    assert_eq!(state(&r.b.qp), QpState::Rts);
    r.check_memory("packets from another address");

    // The peer's own SEND at the same PSN is the expected one: nothing
    // before moved the responder on.
    r.peer.send(q, e, &Pkt::send(64, 3));
    assert_eq!(head(&r.peer.answer()), ack_of(e, 1));
    let c = wait(&r.b.cq, 1)[0];
    assert_eq!((c.wr_id, c.status, c.byte_len), (1, WcStatus::Success, 64));
    r.wrote(RECV_OFF, &pattern(64, 3));
    // From the peer's address on another source port: the receiver does
    // not care about the source port; the answer goes to the QP's peer.
    let peer_other_port = Wire::bind(r.peer_ip, 0, r.b_ip);
    let data = pattern(64, 4);
    peer_other_port.send(
        q,
        e.add(1),
        &Pkt::write(RcRdmaWriteOnly, r.va(WRITE_OFF), rkey, 64, data.clone()),
    );
    assert_eq!(head(&r.peer.answer()), ack_of(e.add(1), 2));
    r.wrote(WRITE_OFF, &data);
    peer_other_port.assert_quiet("answers go to the QP's peer");
    // The requester: the real ACK completes the WRITE the liars' did not.
    assert_empty(&r.b.cq, "B's WRITE still waits");
    r.peer.send(q, s, &Pkt::ack());
    let c = wait(&r.b.cq, 1)[0];
    assert_eq!((c.wr_id, c.status), (7, WcStatus::Success));

    // UC: the same check, and UC never answers.
    let ucq = r.b.ctx.create_cq(16).unwrap();
    let uc = qp_on(&r.b, &ucq, QpType::Uc);
    let local = RcEndpoint {
        gid: r.b.ctx.gid(),
        qpn: uc.qpn(),
        psn: Psn::new(NIC_PSN),
    };
    uc.connect_uc(&local, &peer_end(r.peer_ip, 1), MTU).unwrap();
    post_recv(&uc, 2, &[r.b.mr.sge(RECV_OFF + 1024, 1024).unwrap()]);
    let before = r.counters();
    r.liar
        .send(uc.qpn(), e, &Pkt::op(UcSendOnly, pattern(40, 5)));
    r.liar.send(
        uc.qpn(),
        e,
        &Pkt::write(UcRdmaWriteOnly, r.va(WRITE_OFF), rkey, 40, pattern(40, 5)),
    );
    let after = r.seen(&before, 2);
    assert_eq!(after.rx_dropped - before.rx_dropped, 2);
    assert_empty(&ucq, "UC packets from another address");
    r.check_memory("UC packets from another address");
    r.peer
        .send(uc.qpn(), e, &Pkt::op(UcSendOnly, pattern(40, 6)));
    let c = wait(&ucq, 1)[0];
    assert_eq!((c.wr_id, c.status, c.byte_len), (2, WcStatus::Success, 40));
    r.wrote(RECV_OFF + 1024, &pattern(40, 6));
    r.peer.assert_quiet("UC answers nothing");
    r.healthy("after packets from other addresses");
}

/// Every opcode the wire knows, to RC QPs in RESET, INIT, RTR, RTS and
/// ERR (the QP state machine has no path to SQD here).
#[test]
fn every_opcode_in_every_qp_state() {
    let r = rig(71);
    let e = Psn::new(PEER_PSN);
    let every: Vec<BthOpcode> = (0..=u8::MAX)
        .map(BthOpcode::from)
        .filter(|o| o.is_known())
        .collect();
    let any = |op| Pkt::any(op, r.va(WRITE_OFF), r.rkey());
    // Not ready to receive: everything is dropped, nothing is answered,
    // and the QP stays where it is (IBTA §10.3.1: RESET and INIT discard
    // what arrives; ERR drops it).
    for (tag, st) in [(1, QpState::Reset), (2, QpState::Init), (3, QpState::Err)] {
        let what = format!("every opcode in {st:?}");
        let cq = r.b.ctx.create_cq(64).unwrap();
        let qp = qp_on(&r.b, &cq, QpType::Rc);
        match st {
            QpState::Reset => {}
            QpState::Init => bring(&qp, QpState::Init, &peer_end(r.peer_ip, tag)),
            _ => {
                bring(&qp, QpState::Rts, &peer_end(r.peer_ip, tag));
                qp.modify(QpState::Err, &QpAttrs::default()).unwrap();
            }
        }
        let before = r.counters();
        for &op in &every {
            r.peer.send(qp.qpn(), e, &any(op));
        }
        let after = r.seen(&before, every.len() as u64);
        assert_eq!(
            after.rx_dropped - before.rx_dropped,
            every.len() as u64,
            "{what}"
        );
        r.peer.assert_quiet(&what);
        assert_empty(&cq, &what);
        assert_eq!(state(&qp), st, "{what}");
        r.check_memory(&what);
    }
    // Ready: packets of another transport (UC, UD, a CNP) are silently
    // dropped (IBTA §9.6: the opcode must be of the QP's transport) and
    // the QP goes on; responses are dropped in RTR, and in RTS answer no
    // request of this QP (their PSNs were never sent) and change nothing.
    // Then every RC request opcode is executed and answered.
    for (tag, st) in [(4, QpState::Rtr), (5, QpState::Rts)] {
        let what = format!("every opcode in {st:?}");
        let cq = r.b.ctx.create_cq(64).unwrap();
        let qp = qp_on(&r.b, &cq, QpType::Rc);
        bring(&qp, st, &peer_end(r.peer_ip, tag));
        let foreign: Vec<BthOpcode> = every
            .iter()
            .copied()
            .filter(|&o| u8::from(o) & 0xe0 != 0)
            .collect();
        let responses: Vec<BthOpcode> = every.iter().copied().filter(|o| o.is_response()).collect();
        assert_eq!((foreign.len(), responses.len()), (15, 6));
        let before = r.counters();
        for &op in foreign.iter().chain(&responses) {
            r.peer.send(qp.qpn(), e, &any(op));
        }
        let n = (foreign.len() + responses.len()) as u64;
        let after = r.seen(&before, n);
        let dropped = if st == QpState::Rtr {
            n
        } else {
            foreign.len() as u64
        };
        assert_eq!(after.rx_dropped - before.rx_dropped, dropped, "{what}");
        r.peer.assert_quiet(&what);
        assert_empty(&cq, &what);
        assert_eq!(state(&qp), st, "{what}");
        converse(&r, &qp, &cq, PEER_QPN + tag, &what);
        assert_eq!(state(&qp), st, "{what}");
        r.check_memory(&what);
    }
    r.healthy("after every opcode in every state");
}

/// Runs every RC request opcode through `qp` (connected to the peer's
/// `peer_qpn`, expecting `PEER_PSN`) and checks each answer, completion
/// and placement. SEND with Invalidate is left out: the device has no
/// memory windows or invalidation.
fn converse(r: &Rig, qp: &Qp, cq: &Cq, peer_qpn: u32, what: &str) {
    let q = qp.qpn();
    let m = MTU as usize;
    let rkey = r.rkey();
    let mut psn = Psn::new(PEER_PSN);
    let mut msn = 0;
    for i in 0..6u64 {
        post_recv(
            qp,
            10 + i,
            &[r.b.mr.sge(RECV_OFF + i * 1024, 1024).unwrap()],
        );
    }
    let expect_ack = |r: &Rig, psn: Psn, msn: u32| {
        let a = r.peer.answer();
        assert_eq!(a.dest_qp, peer_qpn, "{what}");
        assert_eq!(head(&a), ack_of(psn, msn), "{what}");
    };
    let recv = |wr_id: u64, opcode: WcOpcode, len: u32, imm: Option<u32>| {
        let c = wait(cq, 1)[0];
        assert_eq!(
            (
                c.wr_id, c.status, c.opcode, c.byte_len, c.imm_data, c.qp_num
            ),
            (wr_id, WcStatus::Success, opcode, len, imm, q),
            "{what}"
        );
    };
    // SEND First, Middle, Last with Immediate: one receive, one ACK.
    let data = pattern(2 * m + 10, 20);
    let parts = [
        Pkt::op(RcSendFirst, data[..m].to_vec()),
        Pkt::op(RcSendMiddle, data[m..2 * m].to_vec()),
        Pkt::op(RcSendLastWithImmediate, data[2 * m..].to_vec()).with_imm(0x1234),
    ];
    for p in &parts {
        r.peer.send(q, psn, p);
        psn = psn.add(1);
    }
    msn += 1;
    expect_ack(r, psn.add(0xff_ffff), msn);
    recv(10, WcOpcode::Recv, data.len() as u32, Some(0x1234));
    r.wrote(RECV_OFF, &data);
    // SEND Only, SEND Only with Immediate (of no bytes), First and Last.
    let data = pattern(20, 21);
    r.peer.send(q, psn, &Pkt::op(RcSendOnly, data.clone()));
    msn += 1;
    expect_ack(r, psn, msn);
    psn = psn.add(1);
    recv(11, WcOpcode::Recv, 20, None);
    r.wrote(RECV_OFF + 1024, &data);
    r.peer.send(
        q,
        psn,
        &Pkt::op(RcSendOnlyWithImmediate, vec![]).with_imm(7),
    );
    msn += 1;
    expect_ack(r, psn, msn);
    psn = psn.add(1);
    recv(12, WcOpcode::Recv, 0, Some(7));
    let data = pattern(m + 3, 22);
    r.peer
        .send(q, psn, &Pkt::op(RcSendFirst, data[..m].to_vec()));
    r.peer
        .send(q, psn.add(1), &Pkt::op(RcSendLast, data[m..].to_vec()));
    msn += 1;
    expect_ack(r, psn.add(1), msn);
    psn = psn.add(2);
    recv(13, WcOpcode::Recv, data.len() as u32, None);
    r.wrote(RECV_OFF + 3 * 1024, &data);
    // WRITE First, Middle, Last.
    let data = pattern(2 * m + 7, 23);
    let len = data.len() as u32;
    let va = r.va(WRITE_OFF);
    r.peer.send(
        q,
        psn,
        &Pkt::write(RcRdmaWriteFirst, va, rkey, len, data[..m].to_vec()),
    );
    r.peer.send(
        q,
        psn.add(1),
        &Pkt::op(RcRdmaWriteMiddle, data[m..2 * m].to_vec()),
    );
    r.peer.send(
        q,
        psn.add(2),
        &Pkt::op(RcRdmaWriteLast, data[2 * m..].to_vec()),
    );
    msn += 1;
    expect_ack(r, psn.add(2), msn);
    psn = psn.add(3);
    r.wrote(WRITE_OFF, &data);
    // WRITE First, Last with Immediate: a receive with the RETH's length.
    let data = pattern(m + 1, 24);
    let len = data.len() as u32;
    let va = r.va(WRITE_OFF + 1024);
    r.peer.send(
        q,
        psn,
        &Pkt::write(RcRdmaWriteFirst, va, rkey, len, data[..m].to_vec()),
    );
    r.peer.send(
        q,
        psn.add(1),
        &Pkt::op(RcRdmaWriteLastWithImmediate, data[m..].to_vec()).with_imm(9),
    );
    msn += 1;
    expect_ack(r, psn.add(1), msn);
    psn = psn.add(2);
    recv(14, WcOpcode::RecvRdmaWithImm, len, Some(9));
    r.wrote(WRITE_OFF + 1024, &data);
    // WRITE Only; WRITE Only with Immediate of no bytes, whose key and
    // address nobody checks (IBTA C9-88).
    let data = pattern(30, 25);
    r.peer.send(
        q,
        psn,
        &Pkt::write(
            RcRdmaWriteOnly,
            r.va(WRITE_OFF + 2048),
            rkey,
            30,
            data.clone(),
        ),
    );
    msn += 1;
    expect_ack(r, psn, msn);
    psn = psn.add(1);
    r.wrote(WRITE_OFF + 2048, &data);
    r.peer.send(
        q,
        psn,
        &Pkt::write(
            RcRdmaWriteOnlyWithImmediate,
            0xdead_0000,
            Mkey::from_raw(0x00c0_ffee),
            0,
            vec![],
        )
        .with_imm(11),
    );
    msn += 1;
    expect_ack(r, psn, msn);
    psn = psn.add(1);
    recv(15, WcOpcode::RecvRdmaWithImm, 0, Some(11));
    // READ of two MTUs and a bit: three responses on the PSNs it took.
    let len = 2 * m + 40;
    r.peer
        .send(q, psn, &Pkt::read(r.va(READ_OFF), rkey, len as u32));
    msn += 1;
    let want = r.expected(READ_OFF, len);
    let mut got = Vec::new();
    for (i, op) in [
        RcRdmaReadResponseFirst,
        RcRdmaReadResponseMiddle,
        RcRdmaReadResponseLast,
    ]
    .into_iter()
    .enumerate()
    {
        let a = r.peer.answer();
        assert_eq!((a.op, a.psn), (op, psn.add(i as u32).get()), "{what}");
        if op != RcRdmaReadResponseMiddle {
            assert_eq!(a.msn, Some(msn), "{what}");
        }
        got.extend(a.payload);
    }
    assert!(got == want, "{what}: READ data");
    psn = psn.add(3);
    // CmpSwap, then FetchAdd on the swapped word.
    let word = u64::from_le_bytes(r.expected(ATOMIC_OFF, 8).try_into().unwrap());
    let at = r.va(ATOMIC_OFF);
    r.peer
        .send(q, psn, &Pkt::atomic(RcCompareSwap, at, rkey, 40, word));
    msn += 1;
    let a = r.peer.answer();
    assert_eq!((a.op, a.psn, a.orig), (RcAtomicAck, psn.get(), Some(word)));
    psn = psn.add(1);
    r.peer
        .send(q, psn, &Pkt::atomic(RcFetchAdd, at, rkey, 2, 0));
    msn += 1;
    let a = r.peer.answer();
    assert_eq!(
        (a.op, a.psn, a.orig, a.msn),
        (RcAtomicAck, psn.get(), Some(40), Some(msn))
    );
    r.wrote(ATOMIC_OFF, &42u64.to_le_bytes());
    r.peer.assert_quiet(what);
    assert_empty(cq, what);
}

/// PSNs just ahead of, far ahead of, just behind and far behind the
/// expected one, across the 24-bit wrap.
#[test]
fn psns_outside_and_at_the_edges_of_the_window() {
    let r = rig(72);
    let q = r.b.qp.qpn();
    let e = Psn::new(PEER_PSN);
    let behind = |n: u32| e.add((1 << 24) - n);
    post_recv(&r.b.qp, 1, &[r.b.mr.sge(RECV_OFF, 1024).unwrap()]);
    let c0 = r.counters();
    // Ahead, as far as 2^23 - 1: dropped; the first gets one PSN sequence
    // error NAK naming the expected PSN, the rest of the gap none (IBTA
    // Vol 1 §9.7.5, a class B error; reference A.8).
    for ahead in [1, 2, 100, (1 << 23) - 1] {
        r.peer.send(q, e.add(ahead), &Pkt::send(32, 1));
    }
    let nak = r.peer.answer();
    assert_eq!(nak.dest_qp, PEER_QPN);
    assert_eq!(nak_head(&nak), nak_of(e, NakCode::PsnSeqErr));
    assert_eq!(nak.msn, Some(0));
    let c1 = r.seen(&c0, 4);
    r.peer.assert_quiet("a gap is NAKed once");
    assert_eq!(c1.out_of_sequence - c0.out_of_sequence, 4);
    // Behind, as far as 2^23: duplicates. A SEND is acknowledged again
    // with the last PSN received in order and not executed.
    for n in [1, 2, 1 << 23] {
        r.peer.send(q, behind(n), &Pkt::send(32, 2));
        assert_eq!(head(&r.peer.answer()), ack_of(behind(1), 0), "{n} behind");
    }
    assert_empty(&r.b.cq, "duplicates use no receive");
    // The expected PSN closes the gap; a new gap is NAKed again.
    r.peer.send(q, e, &Pkt::send(32, 3));
    assert_eq!(head(&r.peer.answer()), ack_of(e, 1));
    let c = wait(&r.b.cq, 1)[0];
    assert_eq!((c.wr_id, c.byte_len), (1, 32));
    r.wrote(RECV_OFF, &pattern(32, 3));
    r.peer.send(q, e.add(3), &Pkt::send(32, 4));
    assert_eq!(
        nak_head(&r.peer.answer()),
        nak_of(e.add(1), NakCode::PsnSeqErr)
    );
    // A WRITE, then a copy of it with other data: executed once, the copy
    // acknowledged.
    let (va, rkey) = (r.va(WRITE_OFF), r.rkey());
    let first = pattern(48, 5);
    r.peer.send(
        q,
        e.add(1),
        &Pkt::write(RcRdmaWriteOnly, va, rkey, 48, first.clone()),
    );
    assert_eq!(head(&r.peer.answer()), ack_of(e.add(1), 2));
    r.wrote(WRITE_OFF, &first);
    r.peer.send(
        q,
        e.add(1),
        &Pkt::write(RcRdmaWriteOnly, va, rkey, 48, pattern(48, 6)),
    );
    assert_eq!(head(&r.peer.answer()), ack_of(e.add(1), 2));
    r.check_memory("a duplicate WRITE is not executed");
    // An atomic, then its copy: the copy gets the saved result, the word
    // is added to once. A "copy" at a PSN that was no atomic is dropped.
    let word = u64::from_le_bytes([SENTINEL; 8]);
    let fa = Pkt::atomic(RcFetchAdd, r.va(ATOMIC_OFF), rkey, 5, 0);
    for _ in 0..2 {
        r.peer.send(q, e.add(2), &fa);
        let a = r.peer.answer();
        assert_eq!(
            (a.op, a.psn, a.orig),
            (RcAtomicAck, e.add(2).get(), Some(word))
        );
    }
    r.wrote(ATOMIC_OFF, &(word + 5).to_le_bytes());
    r.peer.send(q, e.add(1), &fa);
    // A READ and its copy: read again, the same data on the same PSNs.
    let len = 2 * MTU + 40;
    for _ in 0..2 {
        r.peer
            .send(q, e.add(3), &Pkt::read(r.va(READ_OFF), rkey, len));
        let mut got = Vec::new();
        for i in 0..3 {
            let a = r.peer.answer();
            assert_eq!(a.psn, e.add(3 + i).get());
            got.extend(a.payload);
        }
        assert!(got == r.expected(READ_OFF, len as usize));
    }
    // A "copy" of that READ that no check would pass (a guessed rkey, or
    // past the MR) is no copy: dropped, unanswered, the QP left as it is.
    let bad_key = Mkey::from_raw(rkey.raw() ^ 0x5a5a_0000);
    r.peer
        .send(q, e.add(3), &Pkt::read(r.va(READ_OFF), bad_key, len));
    r.peer.send(q, e.add(3), &Pkt::read(r.va(0), rkey, 1 << 30));
    r.peer.assert_quiet("duplicate READs that fail the checks");
    assert_eq!(state(&r.b.qp), QpState::Rts);
    // The READ took three PSNs: the next request is at e + 6.
    post_recv(&r.b.qp, 2, &[r.b.mr.sge(RECV_OFF + 1024, 1024).unwrap()]);
    r.peer.send(q, e.add(6), &Pkt::send(16, 7));
    assert_eq!(head(&r.peer.answer()), ack_of(e.add(6), 5));
    r.wrote(RECV_OFF + 1024, &pattern(16, 7));
    assert_eq!(wait(&r.b.cq, 1)[0].wr_id, 2);
    let c2 = r.counters();
    assert_eq!(c2.out_of_sequence - c0.out_of_sequence, 5);
    assert_eq!(c2.duplicate_request - c0.duplicate_request, 9);
    assert_eq!(c2.rx_write_requests - c0.rx_write_requests, 1);
    assert_eq!(c2.rx_atomic_requests - c0.rx_atomic_requests, 1);
    assert_eq!(c2.rx_read_requests - c0.rx_read_requests, 2);
    r.peer.assert_quiet("the FetchAdd copy at a WRITE's PSN");
    r.healthy("after PSNs at the edges");
}

/// Answers to the NIC's own requests: ACKs and NAKs of PSNs it never
/// sent or already saw acknowledged, READ responses and atomic ACKs nobody
/// asked for, the right ACK from the wrong address. None changes anything;
/// then the real RNR NAK, PSN sequence NAK, ACK and remote access NAK act.
#[test]
fn ghost_and_forged_answers_to_a_requester_change_nothing() {
    let r = rig(73);
    let q = r.b.qp.qpn();
    let s = Psn::new(NIC_PSN);
    let before_s = s.add((1 << 24) - 1);
    let remote = RemoteAddr {
        addr: 0x10_0000,
        rkey: Mkey::from_raw(0x4242),
    };
    let sge = [r.b.mr.sge(READ_OFF, 100).unwrap()];
    post(&r.b.qp, signaled(1, &sge, WrOpcode::RdmaWrite(remote)));
    let w = r.peer.answer();
    assert_eq!(
        (w.op, w.dest_qp, w.psn, w.reth.map(|x| (x.va, x.dma_len))),
        (RcRdmaWriteOnly, PEER_QPN, NIC_PSN, Some((0x10_0000, 100)))
    );
    let response = |op| Pkt { op, ..Pkt::ack() };
    let atomic_ack = Pkt {
        op: RcAtomicAck,
        ext: ExtHeaders {
            atomic_ack_eth: Some(AtomicAckEthRepr { orig: 7 }),
            ..Pkt::ack().ext
        },
        payload: vec![],
    };
    let read_only = Pkt {
        payload: pattern(100, 9),
        ..response(RcRdmaReadResponseOnly)
    };
    let ghosts = [
        // PSNs never sent.
        (s.add(1), Pkt::ack()),
        (s.add(1000), Pkt::ack()),
        (s.add(1), read_only.clone()),
        (s.add(1), atomic_ack.clone()),
        (s.add(1), Pkt::nak(NakCode::RemoteAccessErr)),
        (s.add(1), Pkt::nak(NakCode::InvalidRequest)),
        (s.add(1), Pkt::nak(NakCode::RemoteOpErr)),
        (s.add(1), Pkt::nak(NakCode::PsnSeqErr)),
        (s.add(1), Pkt::rnr_nak()),
        // The WRITE's own PSN, answered as if it had been a READ or an
        // atomic.
        (s, read_only.clone()),
        (
            s,
            Pkt::op(RcRdmaReadResponseMiddle, pattern(MTU as usize, 9)),
        ),
        (s, atomic_ack.clone()),
        // Behind the window: acknowledged before the WRITE was sent.
        (before_s, Pkt::ack()),
        (before_s, Pkt::nak(NakCode::RemoteAccessErr)),
        (before_s, Pkt::nak(NakCode::PsnSeqErr)),
        (before_s, Pkt::rnr_nak()),
    ];
    let c0 = r.counters();
    for (psn, p) in &ghosts {
        r.peer.send(q, *psn, p);
    }
    // The right ACK, from another address.
    r.liar.send(q, s, &Pkt::ack());
    let c1 = r.seen(&c0, ghosts.len() as u64 + 1);
    assert_eq!(c1.rx_dropped - c0.rx_dropped, 1, "the liar's ACK");
    for (name, a, b) in [
        ("packet_seq_err", c0.packet_seq_err, c1.packet_seq_err),
        (
            "rnr_nak_retry_err",
            c0.rnr_nak_retry_err,
            c1.rnr_nak_retry_err,
        ),
        (
            "implied_nak_seq_err",
            c0.implied_nak_seq_err,
            c1.implied_nak_seq_err,
        ),
        ("tx_retransmits", c0.tx_retransmits, c1.tx_retransmits),
        (
            "local_ack_timeout_err",
            c0.local_ack_timeout_err,
            c1.local_ack_timeout_err,
        ),
    ] {
        assert_eq!(a, b, "{name}");
    }
    r.peer.assert_quiet("ghost answers: nothing sent again");
    assert_empty(&r.b.cq, "ghost answers complete nothing");
    assert_eq!(state(&r.b.qp), QpState::Rts);
    r.check_memory("ghost answers");

    // The real RNR NAK: the WRITE goes again after the RNR timer.
    r.peer.send(q, s, &Pkt::rnr_nak());
    assert_eq!(r.peer.answer().psn, NIC_PSN);
    // The real PSN sequence NAK: again at once.
    r.peer.send(q, s, &Pkt::nak(NakCode::PsnSeqErr));
    let again = r.peer.answer();
    assert_eq!((again.op, again.psn), (RcRdmaWriteOnly, NIC_PSN));
    assert_eq!(again.payload, r.expected(READ_OFF, 100));
    let c2 = r.counters();
    assert_eq!(
        (
            c2.rnr_nak_retry_err - c1.rnr_nak_retry_err,
            c2.packet_seq_err - c1.packet_seq_err,
            c2.tx_retransmits - c1.tx_retransmits
        ),
        (1, 1, 2)
    );
    assert_empty(&r.b.cq, "NAKs complete nothing");
    // The ACK: one completion, and a copy of it or of the NAKs now
    // changes nothing.
    r.peer.send(q, s, &Pkt::ack());
    let c = wait(&r.b.cq, 1)[0];
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    r.peer.send(q, s, &Pkt::ack());
    r.peer.send(q, s, &Pkt::rnr_nak());
    r.peer.send(q, s, &Pkt::nak(NakCode::PsnSeqErr));
    r.peer.assert_quiet("copies of answers");
    assert_empty(&r.b.cq, "copies of answers");
    // A second WRITE. A remote access NAK of the first one's PSN (behind
    // the window) is a ghost; the one of its own PSN fails it with
    // IBV_WC_REM_ACCESS_ERR and the QP goes to ERR.
    post(&r.b.qp, signaled(2, &sge, WrOpcode::RdmaWrite(remote)));
    assert_eq!(r.peer.answer().psn, s.add(1).get());
    r.peer.send(q, s, &Pkt::nak(NakCode::RemoteAccessErr));
    r.peer.assert_quiet("a stale NAK");
    assert_empty(&r.b.cq, "a stale NAK");
    r.peer
        .send(q, s.add(1), &Pkt::nak(NakCode::RemoteAccessErr));
    let c = wait(&r.b.cq, 1)[0];
    assert_eq!((c.wr_id, c.status), (2, WcStatus::RemAccessErr));
    assert_eq!(state(&r.b.qp), QpState::Err);
    r.healthy("after forged answers");
}

/// Requests that the responder must refuse: each is NAKed once with the
/// syndrome IBTA names, the QP goes to ERR with its receive flushed (a
/// class C responder error, IBTA Vol 1 §9.9.3), and nothing else changes.
#[test]
fn bad_requests_are_naked_with_the_syndrome_the_spec_names() {
    use NakCode::{InvalidRequest as Inv, RemoteAccessErr as Acc};
    let r = rig(74);
    let (rkey, m) = (r.rkey(), MTU as usize);
    let guessed = Mkey::from_raw(0x00c0_ffee);
    let no_write =
        r.b.pd
            .reg_mr(4096, Access(Access::LOCAL_WRITE | Access::REMOTE_READ))
            .unwrap();
    no_write.write(0, &[SENTINEL; 4096]).unwrap();
    // Registered and deregistered again, after every other MR.
    let stale = {
        let mr = r.b.pd.reg_mr(4096, Access(FULL)).unwrap();
        (mr.addr(), mr.rkey())
    };
    let end = r.va(MR_LEN as u64);
    let w = |va, key, len: u32, n| Pkt::write(RcRdmaWriteOnly, va, key, len, pattern(n, 1));
    let first =
        |len: u32, n| Pkt::write(RcRdmaWriteFirst, r.va(WRITE_OFF), rkey, len, pattern(n, 2));
    let fa = |va, key| Pkt::atomic(RcFetchAdd, va, key, 1, 0);
    let cs = |va, key| Pkt::atomic(RcCompareSwap, va, key, 1, 0);
    // The first packet of a message that fails later is executed: its
    // bytes land where the rules let them.
    let none = Vec::new;
    let first_lands = || vec![(WRITE_OFF, pattern(m, 2))];
    let sent = |seed| vec![(RECV_OFF, pattern(m, seed))];
    // (what, packets, the NAK of the last one, what lands)
    type Case = (&'static str, Vec<Pkt>, NakCode, Vec<(u64, Vec<u8>)>);
    let cases: Vec<Case> = vec![
        (
            "WRITE with a guessed rkey",
            vec![w(r.va(WRITE_OFF), guessed, 64, 64)],
            Acc,
            none(),
        ),
        (
            "WRITE with a stale rkey",
            vec![w(stale.0, stale.1, 64, 64)],
            Acc,
            none(),
        ),
        (
            "WRITE to an MR without remote write",
            vec![w(no_write.addr(), no_write.rkey(), 64, 64)],
            Acc,
            none(),
        ),
        (
            "WRITE past the end of the MR",
            vec![w(end - 32, rkey, 64, 64)],
            Acc,
            none(),
        ),
        (
            "READ with a guessed rkey",
            vec![Pkt::read(r.va(READ_OFF), guessed, 64)],
            Acc,
            none(),
        ),
        (
            "READ past the end of the MR",
            vec![Pkt::read(end - 32, rkey, 64)],
            Acc,
            none(),
        ),
        (
            "FetchAdd with a guessed rkey",
            vec![fa(r.va(ATOMIC_OFF), guessed)],
            Acc,
            none(),
        ),
        ("CmpSwap where no MR is", vec![cs(end, rkey)], Acc, none()),
        (
            "FetchAdd at an unaligned address",
            vec![fa(r.va(ATOMIC_OFF + 4), rkey)],
            Inv,
            none(),
        ),
        (
            "CmpSwap at an unaligned address",
            vec![cs(r.va(ATOMIC_OFF + 1), rkey)],
            Inv,
            none(),
        ),
        (
            "WRITE Only shorter than its RETH length",
            vec![w(r.va(WRITE_OFF), rkey, 64, 32)],
            Inv,
            none(),
        ),
        (
            "WRITE Only longer than its RETH length",
            vec![w(r.va(WRITE_OFF), rkey, 32, 64)],
            Inv,
            none(),
        ),
        (
            "WRITE Only longer than the path MTU",
            vec![w(r.va(WRITE_OFF), rkey, 2 * MTU, 2 * m)],
            Inv,
            none(),
        ),
        (
            "WRITE First shorter than the path MTU",
            vec![first(2 * MTU, m - 4)],
            Inv,
            none(),
        ),
        (
            "WRITE Middle shorter than the path MTU",
            vec![
                first(3 * MTU, m),
                Pkt::op(RcRdmaWriteMiddle, pattern(m / 2, 3)),
            ],
            Inv,
            first_lands(),
        ),
        (
            "WRITE Last past its RETH length",
            vec![first(MTU + 8, m), Pkt::op(RcRdmaWriteLast, pattern(16, 3))],
            Inv,
            first_lands(),
        ),
        (
            "SEND Only longer than the path MTU",
            vec![Pkt::send(2 * m, 4)],
            Inv,
            none(),
        ),
        (
            "SEND Middle longer than the path MTU",
            vec![
                Pkt::op(RcSendFirst, pattern(m, 4)),
                Pkt::op(RcSendMiddle, pattern(m + 4, 4)),
            ],
            Inv,
            sent(4),
        ),
        (
            "SEND Middle with no First",
            vec![Pkt::op(RcSendMiddle, pattern(m, 5))],
            Inv,
            none(),
        ),
        (
            "SEND Last with no First",
            vec![Pkt::op(RcSendLast, pattern(8, 5))],
            Inv,
            none(),
        ),
        (
            "WRITE Last with no First",
            vec![Pkt::op(RcRdmaWriteLast, pattern(8, 5))],
            Inv,
            none(),
        ),
        (
            "SEND First in the middle of a WRITE",
            vec![first(3 * MTU, m), Pkt::op(RcSendFirst, pattern(m, 6))],
            Inv,
            first_lands(),
        ),
    ];
    for (i, (what, pkts, code, lands)) in cases.into_iter().enumerate() {
        let tag = 1 + i as u32;
        let (qp, cq) = r.victim(tag);
        post_recv(&qp, 100, &[r.b.mr.sge(RECV_OFF, 4 * MTU).unwrap()]);
        let e = Psn::new(PEER_PSN);
        let c0 = r.counters();
        for (k, p) in pkts.iter().enumerate() {
            r.peer.send(qp.qpn(), e.add(k as u32), p);
        }
        let last = e.add(pkts.len() as u32 - 1);
        let a = r.peer.answer();
        assert_eq!(a.dest_qp, PEER_QPN + tag, "{what}");
        assert_eq!(nak_head(&a), nak_of(last, code), "{what}");
        assert_eq!(a.msn, Some(0), "{what}");
        // The error is this QP's: its receive is flushed, it is in ERR
        // and takes nothing more.
        let c = wait(&cq, 1)[0];
        assert_eq!(
            (c.wr_id, c.status, c.qp_num),
            (100, WcStatus::WrFlushErr, qp.qpn()),
            "{what}"
        );
        assert_eq!(state(&qp), QpState::Err, "{what}");
        r.peer.send(qp.qpn(), last.add(1), &Pkt::send(8, 7));
        let c1 = r.seen(&c0, pkts.len() as u64 + 1);
        assert_eq!(c1.rx_dropped - c0.rx_dropped, 1, "{what}: in ERR");
        assert_eq!(c1.rx_write_requests, c0.rx_write_requests, "{what}");
        assert_eq!(c1.rx_atomic_requests, c0.rx_atomic_requests, "{what}");
        assert_eq!(c1.rx_read_requests, c0.rx_read_requests, "{what}");
        r.peer.assert_quiet(what);
        assert_empty(&cq, what);
        for (off, data) in &lands {
            r.wrote(*off, data);
        }
        assert!(no_write.to_vec().unwrap() == [SENTINEL; 4096], "{what}");
        r.healthy(what);
    }
}

/// A SEND, or a WRITE with immediate, to a QP with no receive posted: an
/// RNR NAK each time, with the QP's minimum RNR timer, nothing written,
/// the QP ready for the retry.
#[test]
fn a_send_with_no_receive_posted_is_rnr_naked_until_one_is() {
    let r = rig(76);
    let (qp, cq) = r.victim(1);
    let q = qp.qpn();
    let e = Psn::new(PEER_PSN);
    let c0 = r.counters();
    let rnr = (RcAck, e.get(), Some(AethSyndrome::RnrNak { timer: 1 }));
    for _ in 0..3 {
        r.peer.send(q, e, &Pkt::send(64, 1));
        assert_eq!(nak_head(&r.peer.answer()), rnr);
    }
    let data = pattern(64, 2);
    let write_imm = Pkt::write(
        RcRdmaWriteOnlyWithImmediate,
        r.va(WRITE_OFF),
        r.rkey(),
        64,
        data.clone(),
    )
    .with_imm(3);
    r.peer.send(q, e, &write_imm);
    assert_eq!(nak_head(&r.peer.answer()), rnr);
    r.check_memory("an RNR NAK leaves nothing half done");
    let c1 = r.counters();
    assert_eq!(c1.rnr_nak_sent - c0.rnr_nak_sent, 4);
    assert_eq!(c1.out_of_buffer - c0.out_of_buffer, 4);
    assert_eq!(state(&qp), QpState::Rts);
    assert_empty(&cq, "RNR");
    post_recv(&qp, 1, &[r.b.mr.sge(RECV_OFF, 1024).unwrap()]);
    post_recv(&qp, 2, &[]);
    r.peer.send(q, e, &Pkt::send(64, 1));
    assert_eq!(head(&r.peer.answer()), ack_of(e, 1));
    r.wrote(RECV_OFF, &pattern(64, 1));
    r.peer.send(q, e.add(1), &write_imm);
    assert_eq!(head(&r.peer.answer()), ack_of(e.add(1), 2));
    r.wrote(WRITE_OFF, &data);
    let got: Vec<(u64, WcOpcode)> = wait(&cq, 2).iter().map(|c| (c.wr_id, c.opcode)).collect();
    assert_eq!(got, [(1, WcOpcode::Recv), (2, WcOpcode::RecvRdmaWithImm)]);
    r.healthy("after RNR NAKs");
}

/// Tens of thousands of frames as fast as a socket sends them: WRITEs from
/// another address, frames to a QP that does not exist, and requests ahead
/// of the window from the peer. Every datagram is either dropped by the
/// socket (counted) or taken by the NIC and dropped (counted); the gap is
/// NAKed once; the NIC works on.
#[test]
fn a_flood_is_absorbed_counted_and_leaves_the_nic_working() {
    const N: u64 = 15_000;
    let r = rig(75);
    let q = r.b.qp.qpn();
    let e = Psn::new(PEER_PSN);
    let c0 = r.counters();
    let p0 = r.b.nic.port_counters();
    let write = Pkt::write(
        RcRdmaWriteOnly,
        r.va(WRITE_OFF),
        r.rkey(),
        64,
        pattern(64, 1),
    );
    let from_liar = r.liar.datagram(q, e, &write);
    let no_qp = r.liar.datagram(Qpn::new(0x00ff_fffe), e, &write);
    let ahead = r.peer.datagram(q, e.add(1), &Pkt::send(64, 2));
    for i in 0..N {
        r.liar
            .send_raw(if i % 2 == 0 { &from_liar } else { &no_qp });
        r.peer.send_raw(&ahead);
    }
    // Then the expected request, after the flood: sent again until it is
    // answered, in case the socket dropped it (a copy is a duplicate).
    post_recv(&r.b.qp, 1, &[r.b.mr.sge(RECV_OFF, 1024).unwrap()]);
    let fence = r.peer.datagram(q, e, &Pkt::send(64, 3));
    let ack = (RcAck, e.get(), Some(AethSyndrome::Ack { credits: 0x1f }));
    let mut fences = 0;
    let mut answers = Vec::new();
    while !answers.contains(&ack) {
        r.peer.send_raw(&fence);
        fences += 1;
        while let Some(a) = r.peer.next(Duration::from_millis(200)) {
            answers.push(nak_head(&a));
        }
        assert!(fences < 50, "no answer after a flood");
    }
    r.wrote(RECV_OFF, &pattern(64, 3));
    assert_eq!(wait(&r.b.cq, 1)[0].byte_len, 64);
    let sent = 2 * N + fences;
    let deadline = Instant::now() + Duration::from_secs(10);
    let (p1, c1) = loop {
        let p1 = r.b.nic.port_counters();
        let c1 = r.counters();
        let delivered = p1.rx_datagrams - p0.rx_datagrams;
        let handled = (c1.rx_dropped - c0.rx_dropped)
            + (c1.out_of_sequence - c0.out_of_sequence)
            + (c1.duplicate_request - c0.duplicate_request)
            + 1;
        if delivered + (p1.rx_socket_drops - p0.rx_socket_drops) == sent && handled == delivered {
            break (p1, c1);
        }
        assert!(
            Instant::now() < deadline,
            "every datagram accounted for: {p1:?} {c1:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // Every datagram is handled now, but the answer to a fence sent after
    // the first ACK came can still be on its way: a loaded machine can
    // hold it back past the wait above.
    while let Some(a) = r.peer.next(Duration::from_millis(200)) {
        answers.push(nak_head(&a));
    }
    // One NAK for the gap, then an ACK for each fence taken, but for the
    // ACKs a later one replaced: fences that queued behind the flood are
    // taken in one go, and their ACKs leave as one.
    let few = &answers[..answers.len().min(8)];
    assert_eq!(answers[0], nak_of(e, NakCode::PsnSeqErr), "{few:?}");
    assert!(answers[1..].iter().all(|a| *a == ack), "{few:?}");
    let delivered = p1.rx_datagrams - p0.rx_datagrams;
    let dropped = c1.rx_dropped - c0.rx_dropped;
    let out_of_sequence = c1.out_of_sequence - c0.out_of_sequence;
    let copies = c1.duplicate_request - c0.duplicate_request;
    let coalesced = c1.acks_coalesced - c0.acks_coalesced;
    assert!(coalesced <= copies, "{c1:?}");
    assert_eq!(answers.len() as u64, 2 + copies - coalesced, "{few:?}");
    assert_eq!(dropped + out_of_sequence + 1 + copies, delivered);
    // The WRITEs from another address reached their QP (rx_packets) and
    // were dropped there; those to no QP never did.
    let at_the_qp = c1.rx_packets - c0.rx_packets - (out_of_sequence + 1 + copies);
    assert!(at_the_qp > 0 && at_the_qp < dropped, "{c1:?}");
    assert_eq!(c1.rx_write_requests, c0.rx_write_requests);
    assert!(dropped > 0 && out_of_sequence > 0, "{c1:?}");
    r.peer.assert_quiet("after the flood");
    r.liar.assert_quiet("after the flood");
    assert_eq!(state(&r.b.qp), QpState::Rts);
    r.healthy("after the flood");
}

/// A peer that ACKs at its own pace, one message at a time, to a NIC whose
/// program polls its CQ: the NIC's window stays full, the port's receive
/// thread leaves the socket to the program's polls, which take the ACKs
/// (decision record 0052); an arm of the CQ, made before the program waits
/// for an event, calls the thread back, and the event then comes.
#[test]
fn a_polled_stream_held_at_its_window_is_left_to_the_polls_until_an_arm() {
    const LEN: u32 = 1 << 16;
    // 256 packets a WRITE at MTU 256: four fill the window of 1024, so
    // ten keep it full through the six rounds below, and leave the SQ
    // (16) room for the WRITEs that keep the stream fresh.
    const PER_WRITE: u32 = LEN / MTU;
    const WRITES: u32 = 10;
    let r = rig(77);
    let q = r.b.qp.qpn();
    let sge = [r.b.mr.sge(0, LEN).unwrap()];
    let remote = RemoteAddr {
        addr: 0x10_0000,
        rkey: Mkey::from_raw(0x4242),
    };
    for i in 0..WRITES {
        post(
            &r.b.qp,
            signaled(i.into(), &sge, WrOpcode::RdmaWrite(remote)),
        );
    }
    let mut wc = [Wc::default(); 4];
    // The thread takes the window's filling for a stream for 10 ms after
    // it sees it (`STREAM_QUIET`); a loaded machine can keep it from
    // looking again in that time while the program polls. A streaming
    // program keeps posting, which fills the window again: so does this
    // one, a WRITE more each time the thread stays on the socket for
    // 100 ms, while the SQ has room. The WRITEs past the first `WRITES`
    // are never ACKed.
    let depth = r.b.qp.caps().max_send_wr;
    let mut posted = WRITES;
    // The polls go on until the thread is on a stay meant to last 800 µs
    // or more (its third in a row, decision record 0074), so that an arm
    // made then calls it back before its time even where the scheduler is
    // slow to run it; after a second of stays started over (a loaded
    // machine lets the polls lapse), any stay will do.
    let stay = || {
        let c = r.b.nic.port_counters();
        (c.rx_left_to_polls, c.rx_left_to_polls_us)
    };
    let mut polls_until_left = |acked: u32, what: &str| {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(5);
        let mut renew_at = Instant::now() + Duration::from_millis(100);
        let (mut seen, mut seen_us) = stay();
        let first = seen;
        loop {
            let (n, us) = stay();
            let long = n == seen + 1 && us - seen_us >= 800;
            if n != seen && (long || start.elapsed() > Duration::from_secs(1)) && n > first {
                break;
            }
            (seen, seen_us) = (n, us);
            assert!(Instant::now() < deadline, "{what}: the thread never left");
            let mut wc = [Wc::default(); 4];
            assert_eq!(
                r.b.cq.poll(&mut wc).unwrap(),
                0,
                "{what}: nothing new was ACKed"
            );
            if Instant::now() >= renew_at && posted - acked < depth {
                post(
                    &r.b.qp,
                    signaled(posted.into(), &sge, WrOpcode::RdmaWrite(remote)),
                );
                posted += 1;
                renew_at = Instant::now() + Duration::from_millis(100);
            }
        }
    };
    // Polls as perftest does, again at once, until the thread has left
    // the socket.
    polls_until_left(0, "at the start");
    let ack = |msn: u32| Pkt {
        ext: ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 0x1f },
                msn,
            }),
            ..ExtHeaders::NONE
        },
        ..Pkt::ack()
    };
    const ROUNDS: u32 = WRITES - 4;
    let mut called_back = 0;
    for acked in 1..=ROUNDS {
        // The program has polled within the last 200 µs and the window is
        // full: the thread is away, and the arm calls it back before its
        // lease runs out (unless the scheduler held it that long).
        let before = r.b.nic.port_counters().rx_called_back;
        r.b.cq.req_notify(false).unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        while r.b.nic.port_counters().rx_called_back == before && Instant::now() < deadline {
            std::thread::yield_now();
        }
        called_back += r.b.nic.port_counters().rx_called_back - before;
        // The next message's ACK: its completion comes as an event.
        let last = Psn::new(NIC_PSN).add(acked * PER_WRITE - 1);
        r.peer.send(q, last, &ack(acked));
        assert!(
            r.b.ctx.next_event(Duration::from_secs(5)).is_some(),
            "no event for the ACK of WRITE {acked}"
        );
        r.b.cq.ack_event();
        let n = r.b.cq.poll(&mut wc).unwrap();
        assert_eq!(
            wc[..n]
                .iter()
                .map(|w| (w.wr_id, w.status))
                .collect::<Vec<_>>(),
            [(u64::from(acked) - 1, WcStatus::Success)]
        );
        // The window filled again; polls for a lease and more, as after
        // an arm the thread stays until then, and it leaves again.
        polls_until_left(acked, &format!("round {acked}"));
    }
    // Without the arm's unpark, none is called back; a loaded machine
    // runs a woken thread only after its stay in some rounds.
    assert!(
        2 * called_back >= u64::from(ROUNDS),
        "arms called the thread back in {called_back} of {ROUNDS} rounds"
    );
}

/// The same held stream, polled for a while: the port's receive thread
/// stays off the socket for longer each time the polls outlast its stay,
/// up to 2 ms (decision record 0074), rather than waking every 200 µs; and
/// when the program stops polling without arming a CQ, the thread comes
/// back to the socket and takes what arrives.
#[test]
fn a_receive_thread_left_to_long_polls_looks_back_less_often_and_returns_when_they_stop() {
    const LEN: u32 = 1 << 16;
    // Four WRITEs of 256 packets fill the window of 1024; the fifth waits.
    const WRITES: u32 = 5;
    // A WRITE more every `RENEW` while the program polls, each finding
    // the window full, keeps the stream fresh (`STREAM_QUIET` is 10 ms)
    // for `POLLING`, within the SQ's 16.
    const RENEW: Duration = Duration::from_millis(4);
    const POLLING: Duration = Duration::from_millis(40);
    let r = rig(82);
    let q = r.b.qp.qpn();
    let sge = [r.b.mr.sge(0, LEN).unwrap()];
    let remote = RemoteAddr {
        addr: 0x10_0000,
        rkey: Mkey::from_raw(0x4242),
    };
    let write = |i: u32| {
        post(
            &r.b.qp,
            signaled(i.into(), &sge, WrOpcode::RdmaWrite(remote)),
        );
    };
    (0..WRITES).for_each(write);
    let mut wc = [Wc::default(); 4];
    // The stays so far, and how long they were meant to last, in µs (one
    // reading of the counters: the sum holds every stay counted, and
    // perhaps the next).
    let stays = || {
        let c = r.b.nic.port_counters();
        (c.rx_left_to_polls, c.rx_left_to_polls_us)
    };
    let left = || stays().0;
    // Polls at once until the thread has left the socket to them.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (first, first_us) = stays();
    while left() == first {
        assert!(Instant::now() < deadline, "the thread never left");
        assert_eq!(r.b.cq.poll(&mut wc).unwrap(), 0);
    }
    // Then for `POLLING`, while the window stays full (the peer ACKs
    // nothing): at 200 µs a stay the thread would leave about 200 times
    // (128 to 134 measured on an idle machine); doubling to 2 ms, about
    // 25. A loaded machine wakes it later, which only makes fewer.
    let (from, at) = (left(), Instant::now());
    let mut posted = WRITES;
    // The longest the polls lapsed, and the longest between two WRITEs.
    let (mut last_poll, mut poll_gap) = (Instant::now(), Duration::ZERO);
    let (mut last_post, mut post_gap) = (Instant::now(), Duration::ZERO);
    while at.elapsed() < POLLING {
        assert_eq!(r.b.cq.poll(&mut wc).unwrap(), 0, "nothing was ACKed");
        poll_gap = poll_gap.max(last_poll.elapsed());
        last_poll = Instant::now();
        if at.elapsed() >= RENEW * (posted - WRITES + 1) {
            write(posted);
            posted += 1;
            post_gap = post_gap.max(last_post.elapsed());
            last_post = Instant::now();
        }
    }
    let polled = at.elapsed();
    let (end, end_us) = stays();
    let during = end - from;
    assert!(
        during <= 2 * POLLING.as_millis() as u64,
        "{during} stays off the socket in {polled:?} of polls"
    );
    // Each stay was meant to last 200 µs to 2 ms; the readings may hold
    // one stay uncounted at either end.
    let (all, all_us) = (end - first, end_us - first_us);
    assert!(
        (200 * all.saturating_sub(1)..=2000 * (all + 1)).contains(&all_us),
        "{all} stays meant to last {all_us} µs in all"
    );
    // Where the polls never lapsed for 150 µs and the window filled again
    // every 8 ms or sooner, nothing started the stays over: after the
    // first, they were longer, whatever the scheduler did with the
    // thread. (A loaded machine lets the polls lapse, and then the stays
    // rightly start over.)
    if poll_gap < Duration::from_micros(150) && post_gap < 2 * RENEW && all >= 3 {
        assert!(
            all_us > 200 * (all + 1),
            "{all} stays meant to last {all_us} µs in all, polls never \
             {poll_gap:?} apart"
        );
    }
    // The program stops polling, and arms nothing: the ACK of the first
    // WRITE still reaches the NIC, taken by the thread.
    let received = r.b.nic.port_counters().rx_datagrams;
    let ack = Pkt {
        ext: ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Ack { credits: 0x1f },
                msn: 1,
            }),
            ..ExtHeaders::NONE
        },
        ..Pkt::ack()
    };
    r.peer.send(q, Psn::new(NIC_PSN).add(LEN / MTU - 1), &ack);
    let deadline = Instant::now() + Duration::from_secs(2);
    while r.b.nic.port_counters().rx_datagrams == received {
        assert!(
            Instant::now() < deadline,
            "the thread did not come back to the socket once the polls stopped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Taken, it completes the WRITE (the thread may still be running
    // the NIC on it).
    let mut n = 0;
    while n == 0 {
        assert!(Instant::now() < deadline, "the ACK completed nothing");
        n = r.b.cq.poll(&mut wc).unwrap();
    }
    assert_eq!(
        wc[..n]
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [(0, WcStatus::Success)]
    );
}

/// An ACK that waits in the socket while the port's receive thread is
/// away for the program's polls, and no poll comes, is taken by the NIC's
/// worker when it wakes for its timers, before it fires them (decision
/// record 0075): the request is not sent again, and it completes. Without
/// that, the timer took the ACK that had arrived for lost.
#[test]
fn an_ack_waiting_while_the_receive_thread_is_away_is_taken_before_the_timer() {
    let r = rig(83);
    let cq = r.b.ctx.create_cq(64).unwrap();
    let qp = qp_on(&r.b, &cq, QpType::Rc);
    // An ACK timeout of 4.096 µs × 2^12, about 17 ms.
    let short = Timers {
        timeout: 12,
        ..timers()
    };
    bring_qp(
        &qp,
        QpState::Rts,
        Psn::new(NIC_PSN),
        &peer_end(r.peer_ip, 1),
        short,
    );
    r.b.nic.hold_rx_away(true);
    let before = r.counters();
    let sge = [r.b.mr.sge(READ_OFF, 100).unwrap()];
    let remote = RemoteAddr {
        addr: 0x10_0000,
        rkey: Mkey::from_raw(0x4242),
    };
    post(&qp, signaled(1, &sge, WrOpcode::RdmaWrite(remote)));
    let w = r.peer.answer();
    assert_eq!((w.op, w.psn), (RcRdmaWriteOnly, NIC_PSN));
    r.peer.send(qp.qpn(), Psn::new(NIC_PSN), &Pkt::ack());
    // Six ACK timeouts with nobody polling.
    if let Some(a) = r.peer.next(Duration::from_millis(100)) {
        panic!("the WRITE went again though its ACK had arrived: {a:?}");
    }
    let c = r.counters();
    assert_eq!(
        (
            c.local_ack_timeout_err - before.local_ack_timeout_err,
            c.tx_retransmits - before.tx_retransmits
        ),
        (0, 0),
        "no timeout, nothing sent again"
    );
    r.b.nic.hold_rx_away(false);
    let c = wait(&cq, 1)[0];
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    r.healthy("after an ACK taken by the worker");
}

/// Sends `datagrams`, all of one length, to the NIC as one segmented send
/// (`UDP_SEGMENT`): the kernel carries them as one buffer, which the
/// NIC's socket (`UDP_GRO`) takes in whole, as it takes a peer NIC's
/// segmented sends.
#[allow(unsafe_code)]
fn send_segmented(w: &Wire, datagrams: &[Vec<u8>]) {
    use std::os::fd::AsRawFd as _;
    let seg = datagrams[0].len();
    assert!(datagrams.iter().all(|d| d.len() == seg));
    let set = |size: usize| {
        let v = libc::c_int::try_from(size).unwrap();
        // SAFETY: setsockopt reads an int from `v`, which lives through the
        // call, on the socket `w` owns.
        let rc = unsafe {
            libc::setsockopt(
                w.sock.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                std::ptr::from_ref(&v).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
    };
    set(seg);
    w.send_raw(&datagrams.concat());
    set(0);
}

/// A run of datagrams that reaches the NIC as one coalesced buffer is
/// taken datagram by datagram: one whose ICRC is wrong, in the middle, is
/// counted and dropped alone; the one before it is executed and the one
/// after it is answered as out of sequence, as if each had come alone.
#[test]
fn a_bad_datagram_inside_a_coalesced_run_is_dropped_alone() {
    let r = rig(78);
    let q = r.b.qp.qpn();
    let e = Psn::new(PEER_PSN);
    let (va, rkey) = (r.va(WRITE_OFF), r.rkey());
    let data: Vec<Vec<u8>> = (0..3).map(|i| pattern(48, 40 + i)).collect();
    let write = |i: usize| {
        r.peer.datagram(
            q,
            e.add(i as u32),
            &Pkt::write(
                RcRdmaWriteOnly,
                va + 64 * i as u64,
                rkey,
                48,
                data[i].clone(),
            ),
        )
    };
    let mut run: Vec<Vec<u8>> = (0..3).map(write).collect();
    // A payload byte of the middle one changed on the way.
    let at = run[1].len() - 10;
    run[1][at] ^= 0x40;
    let c0 = r.counters();
    send_segmented(&r.peer, &run);
    assert_eq!(head(&r.peer.answer()), ack_of(e, 1), "the first, alone");
    assert_eq!(
        nak_head(&r.peer.answer()),
        nak_of(e.add(1), NakCode::PsnSeqErr),
        "the third finds the second missing"
    );
    let c1 = r.seen(&c0, 2);
    assert_eq!(c1.rx_icrc_errors - c0.rx_icrc_errors, 1, "{c1:?}");
    assert_eq!(c1.rx_write_requests - c0.rx_write_requests, 1);
    assert_eq!(c1.out_of_sequence - c0.out_of_sequence, 1);
    r.wrote(WRITE_OFF, &data[0]);
    r.check_memory("only the first WRITE of the run");
    // The same two again, whole and as a run: both executed.
    send_segmented(&r.peer, &[write(1), write(2)]);
    assert_eq!(head(&r.peer.answer()), ack_of(e.add(2), 3));
    r.wrote(WRITE_OFF + 64, &data[1]);
    r.wrote(WRITE_OFF + 128, &data[2]);
    let c2 = r.seen(&c1, 2);
    assert_eq!(c2.rx_write_requests - c1.rx_write_requests, 2);
    assert_eq!(c2.rx_icrc_errors, c1.rx_icrc_errors);
    r.check_memory("the run resent");
    r.healthy("after a run with a bad datagram");
}

/// What a NIC owes leaves after at most 64 packets taken in
/// (`FLUSH_PACKETS`), a coalesced run taken as one train included: 40
/// WRITEs that came one by one, then a run of 40 that came as one
/// segmented send, all queued while the NIC was held, are answered by an
/// ACK for the first 40 before the run is taken, and one for the run. (A
/// flush only after the run would answer all 80 with one ACK.)
#[test]
fn what_a_nic_owes_leaves_before_a_train_takes_it_past_its_flush() {
    const ALONE: u32 = 40;
    const RUN: u32 = 40;
    let r = rig(81);
    let q = r.b.qp.qpn();
    let e = Psn::new(PEER_PSN);
    let data = pattern(48, 9);
    let write = |i: u32| {
        let w = Pkt::write(RcRdmaWriteOnly, r.va(WRITE_OFF), r.rkey(), 48, data.clone());
        r.peer.datagram(q, e.add(i), &w)
    };
    let alone: Vec<Vec<u8>> = (0..ALONE).map(write).collect();
    let run: Vec<Vec<u8>> = (ALONE..ALONE + RUN).map(write).collect();
    let p0 = r.b.nic.port_counters();
    let c0 = r.counters();
    r.b.nic.with_turns_held(|| {
        for d in &alone {
            r.peer.send_raw(d);
        }
        send_segmented(&r.peer, &run);
        // The port's receive thread queues them for the NIC meanwhile.
        let deadline = Instant::now() + Duration::from_secs(5);
        while r.b.nic.port_counters().rx_datagrams - p0.rx_datagrams < u64::from(ALONE + RUN) {
            assert!(Instant::now() < deadline, "the datagrams were not received");
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    assert_eq!(
        head(&r.peer.answer()),
        ack_of(e.add(ALONE - 1), ALONE),
        "the WRITEs that came alone, answered before the run is taken"
    );
    assert_eq!(
        head(&r.peer.answer()),
        ack_of(e.add(ALONE + RUN - 1), ALONE + RUN)
    );
    let c1 = r.seen(&c0, u64::from(ALONE + RUN));
    assert_eq!(
        c1.rx_write_requests - c0.rx_write_requests,
        u64::from(ALONE + RUN)
    );
    assert_eq!(r.b.nic.port_counters().rx_trains - p0.rx_trains, 1);
    r.peer.assert_quiet("after the two ACKs");
    r.wrote(WRITE_OFF, &data);
    r.check_memory("the WRITEs");
    r.healthy("after a run taken as a train");
}

/// Sends B's QP 64 WRITE ONLYs from the peer, PSNs from `psn` on; if
/// `ring`, B's program arms its CQ after each (a ring of the NIC that
/// takes no datagram from the socket). Drains the ACKs.
fn write_burst(r: &Rig, psn: &mut Psn, ring: bool) {
    let data = pattern(64, 7);
    for _ in 0..64 {
        let w = Pkt::write(RcRdmaWriteOnly, r.va(WRITE_OFF), r.rkey(), 64, data.clone());
        r.peer.send(r.b.qp.qpn(), *psn, &w);
        *psn = psn.add(1);
        if ring {
            r.b.cq.req_notify(false).unwrap();
        }
    }
    while r.peer.next(Duration::from_millis(5)).is_some() {}
}

/// A stream of WRITEs to a NIC that no program drives: after a receive
/// that found a burst, the port's receive thread keeps receiving rather
/// than wait in the kernel for the next datagrams (decision record 0064).
/// While the program rings its NIC it does not.
#[test]
fn a_stream_nobody_drives_is_received_by_a_thread_that_keeps_looking() {
    let r = rig(79);
    let mut psn = Psn::new(PEER_PSN);
    // A thread that took no notice of the rings would look once a burst
    // (40 here); one that does looks only where a receive came while its
    // program's last ring was already 200 µs old: a few times in a quiet
    // run, and beside the rest of the suite on two cores, whose threads
    // make the receive thread late, up to 13 times in 20 bursts (a
    // machine whose vCPUs were far apart, eighteenth session).
    const BURSTS: u64 = 40;
    for _ in 0..BURSTS {
        write_burst(&r, &mut psn, true);
    }
    let looked = r.b.nic.port_counters().rx_looked;
    assert!(
        looked <= BURSTS * 3 / 4,
        "{looked} looks at a NIC its program rings"
    );
    // Nobody rings or polls (the arms' 200 µs past): within a few bursts a
    // receive finds 16 datagrams or more, and the thread looks for more.
    std::thread::sleep(Duration::from_millis(1));
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.b.nic.port_counters().rx_looked == 0 {
        assert!(Instant::now() < deadline, "the thread never kept looking");
        write_burst(&r, &mut psn, false);
    }
    r.wrote(WRITE_OFF, &pattern(64, 7));
    r.healthy("after the stream");
}

/// Where the process may run on one CPU only, the receive thread never
/// looks: the peer it would look for runs only once it stops.
#[test]
fn on_one_cpu_the_receive_thread_never_keeps_looking() {
    let looked = std::thread::spawn(|| {
        keep_to_one_cpu();
        let r = rig(80);
        let mut psn = Psn::new(PEER_PSN);
        for _ in 0..30 {
            write_burst(&r, &mut psn, false);
        }
        r.wrote(WRITE_OFF, &pattern(64, 7));
        r.b.nic.port_counters().rx_looked
    })
    .join()
    .unwrap();
    assert_eq!(looked, 0);
}
