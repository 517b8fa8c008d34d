//! Datagram ids: service ID resolution (SIDR_REQ, SIDR_REP) through two
//! ports' CMs, as the kernel's rdma_cm reports it for RDMA_PS_UDP.

use std::sync::Arc;

use doorbell_cma::{AcceptParams, CmId, ConnectParams, Detail, IdState, PortSpace, RDMA_UDP_QKEY};

use crate::{Log, host, listener, services, wait_for};
use doorbell_cma::CmEventKind::{ConnectRequest, Established, Unreachable};

/// A resolved UDP id on the first NIC, asking for the second's `port`.
fn requester(h: &crate::Host, log: &Arc<Log>, token: u64, net: u8, port: u16) -> CmId {
    crate::requester(&h.ctxs, log, token, PortSpace::Udp, net, port)
}

#[test]
fn a_datagram_service_resolves_to_the_listeners_qp_or_is_refused() {
    let h = host(8, 2);
    let _s = services(&h.ctxs);
    let server_log = Arc::new(Log::default());
    let client_log = Arc::new(Log::default());
    let listener = listener(&h.ctxs, &server_log, 1, PortSpace::Udp, 8, 7474);

    // Accepted: the requester learns the QP and the Q_Key.
    let client = requester(&h, &client_log, 2, 8, 7474);
    client
        .connect(&ConnectParams {
            private_data: b"dgram".to_vec(),
            ..ConnectParams::default()
        })
        .unwrap();
    let req = wait_for(&server_log, ConnectRequest);
    let Detail::UdRequest(r) = req.detail else {
        panic!("a datagram request without its SIDR_REQ: {:?}", req.detail)
    };
    let hdr = doorbell_cma::IP_CM_HEADER_LEN;
    assert_eq!(&r.private_data[hdr..hdr + 5], b"dgram");
    let child = CmId::from_ud_request(&listener, server_log.clone(), 3, &r).unwrap();
    assert_eq!(child.state(), IdState::Requested);
    assert_eq!(
        child.dst(),
        client.src(),
        "the IP header names the requester"
    );
    child
        .accept(&AcceptParams {
            qp_num: Some(0x345),
            private_data: b"ok".to_vec(),
            ..AcceptParams::default()
        })
        .unwrap();
    let ev = wait_for(&client_log, Established);
    let Detail::UdReply(rep) = ev.detail else {
        panic!("ESTABLISHED without the SIDR_REP: {:?}", ev.detail)
    };
    assert_eq!((rep.status, rep.qpn, rep.qkey), (0, 0x345, RDMA_UDP_QKEY));
    assert_eq!(&rep.private_data[..2], b"ok");
    client.on_ud_reply(&rep);
    assert_eq!(client.state(), IdState::Connected);
    assert!(
        child.accept(&AcceptParams::default()).is_err(),
        "a request is answered once"
    );

    // Rejected: UNREACHABLE with the SIDR status Reject (2).
    let refused = requester(&h, &client_log, 4, 8, 7474);
    refused.connect(&ConnectParams::default()).unwrap();
    let req = wait_for(&server_log, ConnectRequest);
    let Detail::UdRequest(r) = req.detail else {
        panic!("no SIDR_REQ")
    };
    let child = CmId::from_ud_request(&listener, server_log.clone(), 5, &r).unwrap();
    child.reject(b"no").unwrap();
    let ev = wait_for(&client_log, Unreachable);
    assert_eq!((ev.id, ev.status), (4, 2));
    let Detail::UdReply(rep) = ev.detail else {
        panic!("UNREACHABLE without the SIDR_REP")
    };
    assert_eq!(&rep.private_data[..2], b"no");

    // Nobody serves the port: status Unsupported (1), from the peer's CM.
    let nobody = requester(&h, &client_log, 6, 8, 9999);
    nobody.connect(&ConnectParams::default()).unwrap();
    let ev = wait_for(&client_log, Unreachable);
    assert_eq!((ev.id, ev.status), (6, 1));
    assert!(
        server_log.take().is_empty(),
        "the listener saw nothing more"
    );
}
