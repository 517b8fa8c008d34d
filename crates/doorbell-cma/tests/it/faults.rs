//! The CM under faults, through the live runtime's fault relay: a set-up
//! and teardown that lose any one of their MADs still complete (the
//! sender's retransmission, or the peer's answer to a repeat); random
//! losses on every frame both ways (the RoCEv2 soak's `RandomFaults`) do
//! not stop a run of connections; a peer that is gone gives the requester
//! UNREACHABLE (-ETIMEDOUT) and the disconnecting side DISCONNECTED, never
//! a hang.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use doorbell_cma::{AcceptParams, CmEventKind, CmId, CmService, ConnectParams, Detail, PortSpace};
use doorbell_pcie::LinkConfig;
use doorbell_rt::{Fabric, Fate, FaultPolicy, Faults, LiveNic, NicOptions, Port, RandomFaults};
use doorbell_verbs::Context;

use crate::Log;

/// The CM's attribute IDs (IBA vol. 1, table 219).
const REQ: u16 = 0x10;
const REP: u16 = 0x13;
const RTU: u16 = 0x14;
const DREQ: u16 = 0x15;
const DREP: u16 = 0x16;

/// Where a UD frame to QP 1 has its MAD's attribute ID: after IPv4 (20),
/// UDP (8), BTH (12) and DETH (8), 16 bytes into the MAD header.
const ATTR_AT: usize = 20 + 8 + 12 + 8 + 16;

/// The CM attribute a frame carries, if it is a MAD to QP 1.
fn cm_attr(frame: &[u8]) -> Option<u16> {
    let bth = frame.get(28..40)?;
    let dest_qp = u32::from_be_bytes([0, bth[5], bth[6], bth[7]]);
    let mgmt_class = *frame.get(ATTR_AT - 15)?;
    (dest_qp == 1 && mgmt_class == 7)
        .then(|| u16::from_be_bytes([frame[ATTR_AT], frame[ATTR_AT + 1]]))
}

/// Two NICs on one fabric at 10.0.`net`.2 and .3, each port's frames
/// through `policy(i)`, each with its CM.
struct Pair {
    _fabric: Fabric,
    ctxs: Vec<Context>,
    cms: Vec<Arc<CmService>>,
    _nics: Vec<Arc<LiveNic>>,
}

fn pair(net: u8, mut policy: impl FnMut(usize) -> Box<dyn FaultPolicy>) -> Pair {
    let fabric = Fabric::new();
    let nics: Vec<Arc<LiveNic>> = (0..2)
        .map(|i| {
            let opts = NicOptions {
                link: LinkConfig::default(),
                faults: Some(policy(i)),
                ..NicOptions::default()
            };
            let name = format!("cmf{net}-{i}");
            let ip = [10, 0, net, 2 + i as u8];
            Arc::new(LiveNic::start_with(&name, ip, Port::Fabric(&fabric), opts).unwrap())
        })
        .collect();
    let ctxs: Vec<Context> = nics
        .iter()
        .map(|n| Context::open(n.clone()).unwrap())
        .collect();
    let cms = ctxs.iter().map(|c| CmService::start(c).unwrap()).collect();
    Pair {
        _fabric: fabric,
        ctxs,
        cms,
        _nics: nics,
    }
}

/// rdma_cm's parameters with a short CM response timeout (2^12 · 4 µs,
/// plus twice the packet lifetime: about 0.55 s for a REQ, 17 ms for a
/// REP), so that a lost MAD costs a fraction of a second.
fn quick(retries: u8) -> ConnectParams {
    ConnectParams {
        qp_num: Some(0x123),
        cm_response_timeout: 12,
        max_cm_retries: retries,
        ..ConnectParams::default()
    }
}

/// An established connection between the pair and the ids at its ends.
struct Conn {
    client: CmId,
    child: CmId,
    _listener: CmId,
    client_log: Arc<Log>,
    server_log: Arc<Log>,
}

/// A resolved TCP id on the first NIC for the second's `port`.
fn requester(p: &Pair, log: &Arc<Log>, token: u64, net: u8, port: u16) -> CmId {
    crate::requester(&p.ctxs, log, token, PortSpace::Tcp, net, port)
}

/// Listens on the second NIC's `port`, connects from the first with
/// `retries` CM retries, accepts, RTU. Panics (after 10 s) if a step does
/// not happen.
fn connect(p: &Pair, port: u16, net: u8, retries: u8) -> Conn {
    let server_log = Arc::new(Log::default());
    let client_log = Arc::new(Log::default());
    let listener = crate::listener(&p.ctxs, &server_log, 1, PortSpace::Tcp, net, port);
    let client = requester(p, &client_log, 2, net, port);
    client.connect(&quick(retries)).unwrap();

    let req = wait(p, &server_log, CmEventKind::ConnectRequest);
    let Detail::ConnectRequest(r) = req.detail else {
        panic!("a request without its REQ")
    };
    let child = accept_as_qp_456(&listener, &server_log, &r);
    let rep = wait(p, &client_log, CmEventKind::ConnectResponse);
    let Detail::ConnectResponse(rep) = rep.detail else {
        panic!("a response without its REP")
    };
    assert_eq!(rep.remote_qpn.get(), 0x456);
    client.on_reply(&rep);
    client.establish().unwrap();
    wait(p, &server_log, CmEventKind::Established);
    Conn {
        client,
        child,
        _listener: listener,
        client_log,
        server_log,
    }
}

/// One whole connection: [`connect`], then DREQ from the client and DREP
/// from the server.
fn connect_and_disconnect(p: &Pair, port: u16, net: u8) {
    let c = connect(p, port, net, 15);
    c.client.disconnect().unwrap();
    let d = wait(p, &c.server_log, CmEventKind::Disconnected);
    assert_eq!(d.id, 3);
    c.child.disconnect().unwrap();
    wait(p, &c.client_log, CmEventKind::Disconnected);
}

/// The server's id for request `r` (token 3), accepted with QP 0x456.
fn accept_as_qp_456(listener: &CmId, server_log: &Arc<Log>, r: &doorbell_cma::ConnRequest) -> CmId {
    let child = CmId::from_request(listener, server_log.clone(), 3, r).unwrap();
    child
        .accept(&AcceptParams {
            qp_num: Some(0x456),
            ..AcceptParams::default()
        })
        .unwrap();
    child
}

/// `wait_for` of the crate, saying what both CMs counted if the event does not come.
fn wait(p: &Pair, log: &Log, kind: CmEventKind) -> doorbell_cma::CmEvent {
    crate::take_within(log, kind, 10).unwrap_or_else(|| {
        let stats: Vec<_> = p.cms.iter().map(|s| s.stats()).collect();
        panic!(
            "no {kind:?} in 10 s; events: {:?}; CMs counted {stats:?}",
            log.0.lock().unwrap()
        )
    })
}

/// Drops the first frame (from either port) that carries CM attribute
/// `attr`, and says whether it did.
fn drop_first(attr: u16) -> (Arc<AtomicBool>, impl FnMut(usize) -> Box<dyn FaultPolicy>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let d = dropped.clone();
    let policy = move |_: usize| -> Box<dyn FaultPolicy> {
        let d = d.clone();
        Box::new(move |f: &[u8]| {
            if cm_attr(f) == Some(attr) && !d.swap(true, Ordering::AcqRel) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        })
    };
    (dropped, policy)
}

#[test]
fn a_connection_survives_the_loss_of_any_one_of_its_mads() {
    for (k, (attr, name)) in [
        (REQ, "REQ"),
        (REP, "REP"),
        (RTU, "RTU"),
        (DREQ, "DREQ"),
        (DREP, "DREP"),
    ]
    .into_iter()
    .enumerate()
    {
        let net = 50 + k as u8;
        let (dropped, policy) = drop_first(attr);
        let p = pair(net, policy);
        connect_and_disconnect(&p, 7500, net);
        assert!(dropped.load(Ordering::Acquire), "no {name} went by");
        let stats: Vec<_> = p.cms.iter().map(|s| s.stats()).collect();
        let resent = stats[0].retransmits + stats[1].retransmits;
        let repeats = stats[0].duplicates + stats[1].duplicates;
        // A lost REQ, REP or DREQ is sent again by its sender; a lost RTU
        // or DREP is asked for again by the REP or DREQ sent again.
        assert!(resent >= 1, "{name} lost, nothing sent again: {stats:?}");
        if matches!(attr, RTU | DREP) {
            assert!(repeats >= 1, "{name} lost, no repeat answered: {stats:?}");
        }
    }
}

#[test]
fn connections_form_and_end_through_random_loss_both_ways() {
    let seeds = Arc::new(Mutex::new(Vec::new()));
    let s = seeds.clone();
    let p = pair(56, move |i| {
        let mut f = Faults::new(0x00c0_ffee + i as u64);
        f.loss = 0.2;
        s.lock().unwrap().push(f.seed);
        Box::new(RandomFaults::new(f))
    });
    for n in 0..6 {
        connect_and_disconnect(&p, 7600 + n, 56);
    }
    let stats: Vec<_> = p.cms.iter().map(|s| s.stats()).collect();
    assert!(
        stats[0].retransmits + stats[1].retransmits >= 1,
        "20% loss and nothing sent again (seeds {:?}): {stats:?}",
        seeds.lock().unwrap()
    );
}

#[test]
fn a_peer_that_is_gone_gives_a_timeout_or_a_disconnect_not_a_hang() {
    // The server's port falls silent when `dead` is set: nothing it sends
    // leaves, as when its host goes down.
    let dead = Arc::new(AtomicBool::new(false));
    let d = dead.clone();
    let p = pair(57, move |i| -> Box<dyn FaultPolicy> {
        let d = d.clone();
        Box::new(move |_: &[u8]| {
            if i == 1 && d.load(Ordering::Acquire) {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        })
    });
    // Connected, then the server's host goes down.
    let c = connect(&p, 7700, 57, 2);
    dead.store(true, Ordering::Release);

    // The DREQ goes unanswered: DISCONNECTED once the retries run out.
    let t = std::time::Instant::now();
    c.client.disconnect().unwrap();
    wait(&p, &c.client_log, CmEventKind::Disconnected);
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(500),
        "too soon"
    );

    // A REQ to the address nobody answers for: UNREACHABLE, -ETIMEDOUT.
    let again = requester(&p, &c.client_log, 4, 57, 7700);
    again.connect(&quick(2)).unwrap();
    let e = wait(&p, &c.client_log, CmEventKind::Unreachable);
    assert_eq!((e.id, e.status), (4, -110));
}

/// A program slower to accept than the requester's CM timer: the repeated
/// REQ gets rdma_cm's delayed MRA, the requester waits instead of giving
/// up after its one retry, and the late accept connects.
#[test]
fn a_slow_listener_keeps_its_requester_waiting_with_an_mra() {
    let deliver = |_: usize| -> Box<dyn FaultPolicy> { Box::new(|_: &[u8]| Fate::Deliver) };
    let p = pair(58, deliver);
    let server_log = Arc::new(Log::default());
    let client_log = Arc::new(Log::default());
    let listener = crate::listener(&p.ctxs, &server_log, 1, PortSpace::Tcp, 58, 7800);
    let client = requester(&p, &client_log, 2, 58, 7800);
    client.connect(&quick(1)).unwrap();
    let req = wait(&p, &server_log, CmEventKind::ConnectRequest);
    let Detail::ConnectRequest(r) = req.detail else {
        panic!("no REQ")
    };
    // One retry at ~0.55 s would have been the requester's last, ending at
    // ~1.1 s; accept at 1.5 s.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let _child = accept_as_qp_456(&listener, &server_log, &r);
    wait(&p, &client_log, CmEventKind::ConnectResponse);
    let (a, b) = (p.cms[0].stats(), p.cms[1].stats());
    assert!(a.retransmits >= 1 && b.duplicates >= 1, "{a:?} {b:?}");
    assert!(
        client_log
            .take()
            .iter()
            .all(|e| e.kind != CmEventKind::Unreachable),
        "the requester gave up"
    );
}
