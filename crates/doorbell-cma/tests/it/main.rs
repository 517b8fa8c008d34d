//! The rdma_cm model on live NICs: binding, ports, address and route
//! resolution and the events they report.
#![allow(missing_docs)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use doorbell_cma::{
    CmError, CmEvent, CmEventKind, CmId, CmService, EventSink, IdState, PortSpace, gid_of,
};
use doorbell_pcie::LinkConfig;
use doorbell_rt::{Fabric, LiveNic};
use doorbell_verbs::Context;

mod burst;
mod faults;
mod scapy_req;
mod ud;

#[derive(Default)]
struct Log(Mutex<Vec<CmEvent>>);

impl EventSink for Log {
    fn deliver(&self, event: CmEvent) {
        self.0.lock().unwrap().push(event);
    }
}

impl Log {
    fn take(&self) -> Vec<CmEvent> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

struct Host {
    _fabric: Fabric,
    _nics: Vec<Arc<LiveNic>>,
    ctxs: Vec<Context>,
}

/// NICs at 10.0.<net>.2, .3, ...
fn host(net: u8, n: u8) -> Host {
    let fabric = Fabric::new();
    let nics: Vec<Arc<LiveNic>> = (0..n)
        .map(|i| {
            Arc::new(
                LiveNic::start(
                    &format!("cm{net}-{i}"),
                    &fabric,
                    [10, 0, net, 2 + i],
                    LinkConfig::default(),
                )
                .unwrap(),
            )
        })
        .collect();
    let ctxs = nics
        .iter()
        .map(|n| Context::open(n.clone()).unwrap())
        .collect();
    Host {
        _fabric: fabric,
        _nics: nics,
        ctxs,
    }
}

fn v4(a: u8, b: u8, c: u8, d: u8, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), port)
}

/// The CMs of both NICs, started.
fn services(ctxs: &[Context]) -> (Arc<CmService>, Arc<CmService>) {
    (
        CmService::start(&ctxs[0]).unwrap(),
        CmService::start(&ctxs[1]).unwrap(),
    )
}

/// An id of `ps` on the second NIC, 10.0.`net`.3, listening on `port`.
fn listener(
    ctxs: &[Context],
    log: &Arc<Log>,
    token: u64,
    ps: PortSpace,
    net: u8,
    port: u16,
) -> CmId {
    let l = CmId::new(log.clone(), token, ps, vec![ctxs[1].clone()]);
    l.bind_addr(v4(10, 0, net, 3, port)).unwrap();
    l.listen(256).unwrap();
    l
}

/// An id of `ps` on the first NIC, its address and route resolved toward
/// 10.0.`net`.3:`port`.
fn requester(
    ctxs: &[Context],
    log: &Arc<Log>,
    token: u64,
    ps: PortSpace,
    net: u8,
    port: u16,
) -> CmId {
    let c = CmId::new(log.clone(), token, ps, vec![ctxs[0].clone()]);
    c.resolve_addr(None, v4(10, 0, net, 3, port), 1000).unwrap();
    c.resolve_route(1000).unwrap();
    c
}

fn id(h: &Host, log: &Arc<Log>, token: u64, ps: PortSpace) -> CmId {
    CmId::new(log.clone(), token, ps, h.ctxs.clone())
}

#[test]
fn an_address_binds_its_device_and_the_wildcard_none() {
    let h = host(1, 2);
    let log = Arc::new(Log::default());
    let a = id(&h, &log, 1, PortSpace::Tcp);
    a.bind_addr(v4(10, 0, 1, 3, 7000)).unwrap();
    assert_eq!(a.state(), IdState::AddrBound);
    assert!(a.device().unwrap().same_as(&h.ctxs[1]));
    assert_eq!(a.src(), Some(v4(10, 0, 1, 3, 7000)));
    // Bound once only.
    assert_eq!(a.bind_addr(v4(10, 0, 1, 3, 7001)), Err(CmError::Invalid));

    let w = id(&h, &log, 2, PortSpace::Tcp);
    w.bind_addr(v4(0, 0, 0, 0, 7002)).unwrap();
    assert!(w.device().is_none());

    let nowhere = id(&h, &log, 3, PortSpace::Tcp);
    assert_eq!(
        nowhere.bind_addr(v4(10, 9, 9, 9, 0)),
        Err(CmError::NoDevice)
    );
    assert_eq!(nowhere.state(), IdState::Idle);
    assert!(log.take().is_empty(), "binding reports no event");
}

#[test]
fn ports_are_shared_only_where_addresses_do_not_overlap() {
    let h = host(2, 2);
    let log = Arc::new(Log::default());
    let a = id(&h, &log, 1, PortSpace::Tcp);
    a.bind_addr(v4(10, 0, 2, 2, 7100)).unwrap();
    let b = id(&h, &log, 2, PortSpace::Tcp);
    assert_eq!(b.bind_addr(v4(10, 0, 2, 2, 7100)), Err(CmError::AddrInUse));
    // The wildcard overlaps every address.
    let w = id(&h, &log, 3, PortSpace::Tcp);
    assert_eq!(w.bind_addr(v4(0, 0, 0, 0, 7100)), Err(CmError::AddrInUse));
    // Another address of the host, or another port space, is free.
    id(&h, &log, 4, PortSpace::Tcp)
        .bind_addr(v4(10, 0, 2, 3, 7100))
        .unwrap();
    let u = id(&h, &log, 5, PortSpace::Udp);
    u.bind_addr(v4(10, 0, 2, 2, 7100)).unwrap();
    // REUSEADDR on both sides shares it.
    let r1 = id(&h, &log, 6, PortSpace::Ib);
    let r2 = id(&h, &log, 7, PortSpace::Ib);
    r1.set_reuseaddr(true).unwrap();
    r2.set_reuseaddr(true).unwrap();
    r1.bind_addr(v4(10, 0, 2, 2, 7101)).unwrap();
    r2.bind_addr(v4(10, 0, 2, 2, 7101)).unwrap();
    assert_eq!(
        r2.set_reuseaddr(false),
        Err(CmError::Invalid),
        "only before binding"
    );
    // Destroying an id frees its port.
    drop(a);
    b.bind_addr(v4(10, 0, 2, 2, 7100)).unwrap();
    // Port 0 is an ephemeral port, a different one each time.
    let e1 = id(&h, &log, 8, PortSpace::Tcp);
    let e2 = id(&h, &log, 9, PortSpace::Tcp);
    e1.bind_addr(v4(10, 0, 2, 2, 0)).unwrap();
    e2.bind_addr(v4(10, 0, 2, 2, 0)).unwrap();
    let (p1, p2) = (e1.src().unwrap().port(), e2.src().unwrap().port());
    assert!((32768..=60999).contains(&p1) && (32768..=60999).contains(&p2) && p1 != p2);
}

#[test]
fn resolving_binds_the_local_nic_and_reports_each_step() {
    let h = host(3, 1);
    let log = Arc::new(Log::default());
    let c = id(&h, &log, 42, PortSpace::Tcp);
    assert_eq!(
        c.resolve_route(100),
        Err(CmError::Invalid),
        "route before address"
    );
    assert_eq!(
        c.resolve_addr(None, v4(0, 0, 0, 0, 1), 100),
        Err(CmError::Invalid)
    );
    let peer = v4(10, 0, 77, 5, 7471);
    c.resolve_addr(None, peer, 2000).unwrap();
    assert_eq!(
        log.take(),
        [CmEvent {
            id: 42,
            kind: CmEventKind::AddrResolved,
            status: 0,
            detail: doorbell_cma::Detail::None,
        }]
    );
    let src = c.src().unwrap();
    assert_eq!(src.ip(), IpAddr::V4(Ipv4Addr::new(10, 0, 3, 2)));
    assert!(src.port() >= 32768);
    assert!(c.device().unwrap().same_as(&h.ctxs[0]));
    assert_eq!(c.dst(), Some(peer));

    c.set_tos(0x28);
    c.resolve_route(2000).unwrap();
    assert_eq!(log.take()[0].kind, CmEventKind::RouteResolved);
    let p = c.path().unwrap();
    assert_eq!(p.sgid, h.ctxs[0].gid());
    assert_eq!(p.dgid, gid_of(peer.ip()));
    assert_eq!((p.pkey, p.hop_limit, p.traffic_class), (0xffff, 64, 0x28));
    assert_eq!(p.mtu, h.ctxs[0].query_port().active_mtu);
    assert_eq!(c.state(), IdState::RouteResolved);
}

#[test]
fn a_wildcard_bound_id_takes_the_nics_address_when_it_resolves() {
    let h = host(4, 1);
    let log = Arc::new(Log::default());
    let c = id(&h, &log, 7, PortSpace::Udp);
    c.bind_addr(v4(0, 0, 0, 0, 7200)).unwrap();
    c.resolve_addr(None, v4(10, 0, 4, 9, 7200), 100).unwrap();
    assert_eq!(c.src(), Some(v4(10, 0, 4, 2, 7200)));
    // A source given to an id already bound is refused.
    let d = id(&h, &log, 8, PortSpace::Udp);
    d.bind_addr(v4(10, 0, 4, 2, 0)).unwrap();
    assert_eq!(
        d.resolve_addr(Some(v4(10, 0, 4, 2, 0)), v4(10, 0, 4, 9, 1), 100),
        Err(CmError::Invalid)
    );
}

fn wait_for(log: &Log, kind: CmEventKind) -> CmEvent {
    take_within(log, kind, 10)
        .unwrap_or_else(|| panic!("no {kind:?} in 10 s; events: {:?}", log.0.lock().unwrap()))
}

/// The first event of `kind` in `log`, taken out of it, waiting up to
/// `secs` for one to come.
fn take_within(log: &Log, kind: CmEventKind, secs: u64) -> Option<CmEvent> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let mut got = log.0.lock().unwrap();
        if let Some(i) = got.iter().position(|e| e.kind == kind) {
            return Some(got.remove(i));
        }
        drop(got);
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn rc_qp(ctx: &Context) -> (doorbell_verbs::Qp, doorbell_verbs::Cq, doorbell_verbs::Mr) {
    use doorbell_verbs::{Access, QpCaps, QpInitAttr, QpState, QpType};
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            cap: QpCaps {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
            srq: None,
        })
        .unwrap();
    qp.modify(
        QpState::Init,
        &doorbell_verbs::QpAttrs {
            pkey_index: Some(0),
            port: Some(1),
            access: Some(Access(0)),
            ..Default::default()
        },
    )
    .unwrap();
    let mr = pd
        .reg_mr(
            4096,
            Access(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ),
        )
        .unwrap();
    (qp, cq, mr)
}

/// REQ, REP, RTU through two ports' CMs on the GSI QPs, the QPs moved by
/// what the connection gives, a WRITE across, then DREQ and DREP.
#[test]
fn a_connection_forms_through_the_cm_and_carries_data() {
    use doorbell_cma::{AcceptParams, ConnectParams, Detail};
    use doorbell_verbs::{QpState, RemoteAddr, SendFlags, SendWr, WrOpcode};
    let h = host(6, 2);
    let (sa, sb) = services(&h.ctxs);
    let server_log = Arc::new(Log::default());
    let client_log = Arc::new(Log::default());
    let listener = listener(&h.ctxs, &server_log, 1, PortSpace::Tcp, 6, 7471);
    let client = requester(&h.ctxs, &client_log, 2, PortSpace::Tcp, 6, 7471);
    client.set_ack_timeout(17);
    let (cqp, ccq, cmr) = rc_qp(&h.ctxs[0]);
    client.set_qp(Some(cqp.qpn().get()));
    client
        .connect(&ConnectParams {
            private_data: b"hello".to_vec(),
            ..ConnectParams::default()
        })
        .unwrap();

    let req = wait_for(&server_log, CmEventKind::ConnectRequest);
    assert_eq!(req.id, 1, "to the listener");
    let Detail::ConnectRequest(r) = req.detail else {
        panic!("a request without its REQ")
    };
    assert_eq!(r.req.remote_qpn, cqp.qpn());
    assert_eq!(
        &r.req.private_data[36..41],
        b"hello",
        "after rdma_cm's header"
    );
    let child = CmId::from_request(&listener, server_log.clone(), 3, &r).unwrap();
    assert_eq!(child.dst().unwrap().ip(), client.src().unwrap().ip());
    assert_eq!(child.dst().unwrap().port(), client.src().unwrap().port());
    let (sqp, scq, smr) = rc_qp(&h.ctxs[1]);
    child.set_qp(Some(sqp.qpn().get()));
    let a = child.conn_attrs().unwrap();
    assert_eq!(a.timeout, 17, "the REQ's local ACK timeout");
    sqp.modify(QpState::Rtr, &a.rtr()).unwrap();
    sqp.modify(QpState::Rts, &a.rts()).unwrap();
    child
        .accept(&AcceptParams {
            private_data: b"welcome".to_vec(),
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            flow_control: true,
            qp_num: None,
            srq: false,
        })
        .unwrap();

    let rep = wait_for(&client_log, CmEventKind::ConnectResponse);
    let Detail::ConnectResponse(rep) = rep.detail else {
        panic!("a response without its REP")
    };
    assert_eq!(rep.remote_qpn, sqp.qpn());
    assert_eq!(&rep.private_data[..7], b"welcome");
    client.on_reply(&rep);
    let a = client.conn_attrs().unwrap();
    cqp.modify(QpState::Rtr, &a.rtr()).unwrap();
    cqp.modify(QpState::Rts, &a.rts()).unwrap();
    client.establish().unwrap();
    wait_for(&server_log, CmEventKind::Established);

    // The QPs talk: a WRITE from the client lands in the server's MR.
    cmr.write(0, b"over the connection").unwrap();
    cqp.post_send(&[SendWr {
        wr_id: 1,
        sg_list: &[cmr.sge(0, 19).unwrap()],
        opcode: WrOpcode::RdmaWrite(RemoteAddr {
            addr: smr.addr(),
            rkey: smr.rkey(),
        }),
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
    let mut wc = [doorbell_verbs::Wc::default(); 1];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while ccq.poll(&mut wc).unwrap() == 0 {
        assert!(std::time::Instant::now() < deadline, "no WRITE completion");
    }
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    let mut got = [0u8; 19];
    smr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"over the connection");
    let _ = scq;

    client.disconnect().unwrap();
    wait_for(&server_log, CmEventKind::Disconnected);
    child.disconnect().unwrap();
    wait_for(&client_log, CmEventKind::Disconnected);
    assert!(sa.stats().sent >= 3 && sb.stats().sent >= 2);
}

/// A REQ to a port nobody listens on is rejected (reason 8).
#[test]
fn connecting_to_no_listener_is_rejected() {
    use doorbell_cma::ConnectParams;
    let h = host(7, 2);
    let _s = services(&h.ctxs);
    let log = Arc::new(Log::default());
    let client = requester(&h.ctxs, &log, 9, PortSpace::Tcp, 7, 9999);
    client
        .connect(&ConnectParams {
            qp_num: Some(0x123),
            ..ConnectParams::default()
        })
        .unwrap();
    let e = wait_for(&log, CmEventKind::Rejected);
    assert_eq!(e.status, 8, "IB_CM_REJ_INVALID_SERVICE_ID");
}
