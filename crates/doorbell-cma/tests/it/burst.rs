//! A burst of connection requests (cmtime makes a hundred at once): every
//! REQ and REP reaches the other side the first time, none lost to a full
//! GSI send queue or receive queue, so none is sent again.

use std::sync::Arc;

use doorbell_cma::{AcceptParams, CmEventKind, CmId, ConnectParams, Detail, PortSpace};

use crate::{Log, host, listener, requester, services};

const N: u64 = 150;

#[test]
fn a_burst_of_requests_is_carried_without_a_retransmission() {
    let h = host(9, 2);
    let (sa, sb) = services(&h.ctxs);
    let server_log = Arc::new(Log::default());
    let client_log = Arc::new(Log::default());
    let listener = listener(&h.ctxs, &server_log, 0, PortSpace::Tcp, 9, 7475);
    let clients: Vec<CmId> = (1..=N)
        .map(|t| requester(&h.ctxs, &client_log, t, PortSpace::Tcp, 9, 7475))
        .collect();
    for (i, c) in clients.iter().enumerate() {
        c.connect(&ConnectParams {
            qp_num: Some(0x1000 + i as u32),
            ..ConnectParams::default()
        })
        .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut children = Vec::new();
    while (children.len() as u64) < N {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {N} requests in 20 s; CMs counted {:?} {:?}",
            children.len(),
            sa.stats(),
            sb.stats()
        );
        for ev in server_log.take() {
            if let (CmEventKind::ConnectRequest, Detail::ConnectRequest(r)) = (ev.kind, ev.detail) {
                let t = 1000 + children.len() as u64;
                let child = CmId::from_request(&listener, server_log.clone(), t, &r).unwrap();
                child
                    .accept(&AcceptParams {
                        qp_num: Some(0x2000 + children.len() as u32),
                        ..AcceptParams::default()
                    })
                    .unwrap();
                children.push(child);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let mut replies = 0;
    while replies < N {
        assert!(
            std::time::Instant::now() < deadline,
            "{replies} of {N} replies in 20 s; CMs counted {:?} {:?}",
            sa.stats(),
            sb.stats()
        );
        replies += client_log
            .take()
            .iter()
            .filter(|e| e.kind == CmEventKind::ConnectResponse)
            .count() as u64;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let (a, b) = (sa.stats(), sb.stats());
    assert_eq!((a.retransmits, b.retransmits), (0, 0), "{a:?} {b:?}");
    assert_eq!((a.received, b.received), (N, N), "{a:?} {b:?}");
}
