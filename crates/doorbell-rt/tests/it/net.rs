//! Helpers for tests on ports: RC pairs over UDP sockets or over a faulty
//! fabric, connected with chosen timers, and taps that see every frame.

use std::sync::{Arc, Mutex};

use doorbell_device::NicCounters;
use doorbell_rt::{Fabric, Fate, FaultPolicy, LiveNic, NicOptions, Port};
use doorbell_types::Psn;
use doorbell_verbs::{Access, AddressVector, ProviderConfig, QpAttrs, QpCaps, QpState, RcEndpoint};
use doorbell_wire::{BthOpcode, ParsedRoce, parse_roce};

use crate::common::{FULL, Pair, Side, pattern, post, post_recv, signaled, wait};

/// A loopback address for a UDP-port test: `127.P.net.host`, where P comes
/// from the process id, so that two test runs at once (two checkouts, or
/// CI beside a developer) do not bind the same port.
pub fn lo(net: u8, host: u8) -> [u8; 4] {
    [127, 1 + (std::process::id() % 250) as u8, net, host]
}

/// RC timers and limits for [`connect`].
#[derive(Debug, Clone, Copy)]
pub struct Timers {
    pub mtu: u32,
    /// ACK timeout code: 4.096 µs × 2^timeout.
    pub timeout: u8,
    pub retry_cnt: u8,
    pub min_rnr_timer: u8,
    pub rnr_retry: u8,
    pub rd_atomic: u8,
}

impl Default for Timers {
    fn default() -> Self {
        Self {
            mtu: 1024,
            // About 67 ms: no spurious timeout while other tests load the
            // machine, so that packet counts are exact.
            timeout: 14,
            retry_cnt: 7,
            // 0.01 ms.
            min_rnr_timer: 1,
            rnr_retry: 7,
            rd_atomic: 1,
        }
    }
}

pub fn caps(wr: u32) -> QpCaps {
    QpCaps {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// Host software for `nic`: a context, PD, one CQ, an RC QP and an MR.
pub fn side_on(nic: LiveNic, cap: QpCaps, mr_len: usize, cqe: u32) -> Side {
    crate::common::host(Arc::new(nic), ProviderConfig::default(), cap, mr_len, cqe)
}

/// Moves `qp` of `s` to RTS towards `remote`.
pub fn connect(s: &Side, local: &RcEndpoint, remote: &RcEndpoint, t: Timers) {
    connect_qp(&s.qp, local, remote, t);
}

/// Moves `qp` through INIT, RTR and RTS to `remote` with the timers `t`.
pub fn connect_qp(qp: &doorbell_verbs::Qp, local: &RcEndpoint, remote: &RcEndpoint, t: Timers) {
    bring_qp(qp, QpState::Rts, local.psn, remote, t);
}

/// Moves an RC `qp` from RESET up to `to` (INIT, RTR or RTS) towards
/// `remote` with the timers `t`, its send PSNs starting at `sq_psn`.
pub fn bring_qp(qp: &doorbell_verbs::Qp, to: QpState, sq_psn: Psn, remote: &RcEndpoint, t: Timers) {
    qp.modify(
        QpState::Init,
        &QpAttrs {
            pkey_index: Some(0),
            port: Some(1),
            access: Some(Access(FULL)),
            ..Default::default()
        },
    )
    .unwrap();
    if to == QpState::Init {
        return;
    }
    qp.modify(
        QpState::Rtr,
        &QpAttrs {
            av: Some(AddressVector {
                dgid: remote.gid,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
                sl: 0,
            }),
            path_mtu: Some(t.mtu),
            dest_qpn: Some(remote.qpn),
            rq_psn: Some(remote.psn),
            max_dest_rd_atomic: Some(t.rd_atomic),
            min_rnr_timer: Some(t.min_rnr_timer),
            ..Default::default()
        },
    )
    .unwrap();
    if to == QpState::Rtr {
        return;
    }
    qp.modify(
        QpState::Rts,
        &QpAttrs {
            sq_psn: Some(sq_psn),
            timeout: Some(t.timeout),
            retry_cnt: Some(t.retry_cnt),
            rnr_retry: Some(t.rnr_retry),
            max_rd_atomic: Some(t.rd_atomic),
            ..Default::default()
        },
    )
    .unwrap();
}

/// Connects the QPs of two sides to each other. A's first PSN is near the
/// top of the 24-bit space, so that wrap-around is crossed.
pub fn join(a: Side, b: Side, t: Timers) -> Pair {
    let ea = RcEndpoint {
        gid: a.ctx.gid(),
        qpn: a.qp.qpn(),
        psn: Psn::new(0x00ff_ff00),
    };
    let eb = RcEndpoint {
        gid: b.ctx.gid(),
        qpn: b.qp.qpn(),
        psn: Psn::new(0x42),
    };
    connect(&a, &ea, &eb, t);
    connect(&b, &eb, &ea, t);
    Pair {
        a,
        b,
        _fabric: Fabric::new(),
    }
}

/// Options for a NIC whose frames all go through its UDP socket, even to
/// NICs of this host (no shared memory): for tests of the UDP port itself.
/// Every datagram is sent on its own (no UDP GSO), so that a capture on
/// lo sees each packet; and the count of each is exact ([`exact`]).
pub fn udp_only() -> NicOptions {
    exact(NicOptions {
        shm: false,
        udp_gso: false,
        ..NicOptions::default()
    })
}

/// `opts` without adaptive retransmission, for tests that count every
/// packet: on a machine other tests load, a peer's thread held for longer
/// than the live floor (10 ms) draws an early resend, and with it packets
/// and DMAs no test could predict (decision record 0027). The 67 ms ACK
/// timeout of [`Timers::default`] is there for the same reason; the
/// virtual-clock tests, where nothing stalls, test adaptive resends.
pub fn exact(opts: NicOptions) -> NicOptions {
    NicOptions {
        adaptive_retransmit_floor: None,
        ..opts
    }
}

/// Two NICs on UDP sockets at `ips`, each with `opts`, connected.
pub fn udp_pair(
    ips: [[u8; 4]; 2],
    opts: [NicOptions; 2],
    cap: QpCaps,
    mr_len: usize,
    t: Timers,
) -> Pair {
    let [oa, ob] = opts;
    let a = LiveNic::start_with("udp-a", ips[0], Port::Udp, oa).unwrap();
    let b = LiveNic::start_with("udp-b", ips[1], Port::Udp, ob).unwrap();
    join(
        side_on(a, cap, mr_len, 1024),
        side_on(b, cap, mr_len, 1024),
        t,
    )
}

/// Two NICs on one in-process fabric, each with `opts`, connected.
pub fn fabric_pair(opts: [NicOptions; 2], cap: QpCaps, mr_len: usize, t: Timers) -> Pair {
    let fabric = Fabric::new();
    let [oa, ob] = opts;
    let a = LiveNic::start_with("fab-a", [127, 0, 0, 2], Port::Fabric(&fabric), oa).unwrap();
    let b = LiveNic::start_with("fab-b", [127, 0, 0, 3], Port::Fabric(&fabric), ob).unwrap();
    let mut p = join(
        side_on(a, cap, mr_len, 1024),
        side_on(b, cap, mr_len, 1024),
        t,
    );
    p._fabric = fabric;
    p
}

/// One frame as a tap saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub opcode: BthOpcode,
    pub psn: u32,
    pub ack_req: bool,
    pub payload_len: usize,
    pub repr: ParsedRoce,
}

/// A fault policy that records every frame and asks `decide` for its fate;
/// `decide` gets the frame and the number of earlier frames that matched
/// the same opcode.
pub fn tap(
    decide: impl FnMut(&Seen, usize) -> Fate + Send + 'static,
) -> (NicOptions, Arc<Mutex<Vec<Seen>>>) {
    let (policy, log) = tap_policy(decide);
    let opts = NicOptions {
        faults: Some(Box::new(policy)),
        ..NicOptions::default()
    };
    (opts, log)
}

/// A decision for [`tap`]: `fate` for the `k`th frame (from 0) of
/// `opcode`, every other frame delivered.
pub fn nth_of(opcode: BthOpcode, k: usize, fate: Fate) -> impl FnMut(&Seen, usize) -> Fate + Send {
    move |s, n| {
        if s.opcode == opcode && n == k {
            fate
        } else {
            Fate::Deliver
        }
    }
}

/// The policy of [`tap`] on its own, for a [`doorbell_rt::LoopbackLink`].
pub fn tap_policy(
    mut decide: impl FnMut(&Seen, usize) -> Fate + Send + 'static,
) -> (impl FaultPolicy + 'static, Arc<Mutex<Vec<Seen>>>) {
    let log = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let l = log.clone();
    let policy = move |frame: &[u8]| {
        let Ok(p) = parse_roce(frame) else {
            return Fate::Deliver;
        };
        let seen = Seen {
            opcode: p.repr.bth.opcode,
            psn: p.repr.bth.psn.get(),
            ack_req: p.repr.bth.ack_req,
            payload_len: p.payload.len(),
            repr: p,
        };
        let mut v = l.lock().unwrap();
        let k = v.iter().filter(|s| s.opcode == seen.opcode).count();
        let fate = decide(&seen, k);
        v.push(seen);
        fate
    };
    (policy, log)
}

/// Waits until the NIC's thread has handled everything queued to it and
/// returns its counters.
pub fn sync(s: &Side) -> NicCounters {
    s.nic.counters(None).1
}

/// Waits, up to 10 s, until the counters of `s` satisfy `until` (an event
/// such as "B has sent two RNR NAKs"), and returns them.
pub fn wait_counters(s: &Side, what: &str, until: impl Fn(&NicCounters) -> bool) -> NicCounters {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let c = sync(s);
        if until(&c) {
            return c;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {c:?}"
        );
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// The counters both NICs have once traffic between them has settled:
/// read repeatedly until two reads 20 ms apart agree.
pub fn settled(p: &Pair) -> (NicCounters, NicCounters) {
    let mut last = (sync(&p.a), sync(&p.b));
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = (sync(&p.a), sync(&p.b));
        if now == last {
            return now;
        }
        last = now;
    }
}

/// Options whose fault relay corrupts the first RC SEND ONLY on its way
/// out (a bit of its IPv4 header).
pub fn corrupting_first_send() -> NicOptions {
    tap(nth_of(
        BthOpcode::RcSendOnly,
        0,
        Fate::Corrupt { at: 20, mask: 0x01 },
    ))
    .0
}

/// SENDs 100 bytes from A to B through [`corrupting_first_send`] on A:
/// B's ICRC check drops the first copy and A's ACK timer resends it.
/// Checks that the data arrived once and returns the settled counters.
pub fn send_through_a_corruption(p: &Pair) -> (NicCounters, NicCounters) {
    let data = pattern(100, 1);
    p.a.mr.write(0, &data).unwrap();
    post_recv(&p.b.qp, 1, &[p.b.mr.sge(0, 128).unwrap()]);
    post(
        &p.a.qp,
        signaled(
            1,
            &[p.a.mr.sge(0, 100).unwrap()],
            doorbell_verbs::WrOpcode::Send,
        ),
    );
    assert!(wait(&p.a.cq, 1)[0].is_ok());
    assert_eq!(wait(&p.b.cq, 1)[0].byte_len, 100);
    let mut got = vec![0u8; 100];
    p.b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    let (a, b) = settled(p);
    assert_eq!(b.rx_icrc_errors, 1);
    assert_eq!(a.tx_retransmits, 1);
    (a, b)
}
