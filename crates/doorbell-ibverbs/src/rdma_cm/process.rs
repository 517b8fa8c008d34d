//! Taking an event off a channel, as librdmacm's `rdma_get_cm_event` does:
//! a connection request becomes a new id (with the QP a passive endpoint
//! asks for); the REP to an id with a QP moves the QP to RTS, sends the
//! RTU and is reported as ESTABLISHED; the CM's own report of that RTU is
//! then not passed on a second time; each id is brought up to date before
//! the program sees its event.

#![allow(unsafe_code)]

use core::ffi::c_int;

use doorbell_cma::{CmEvent, CmEventKind, CmId, Detail};

use super::id::{self, id_of};
use super::qp;
use crate::abi::*;
use crate::events::Queue;

/// An event for the program, and the private data it points to.
pub(crate) struct Taken {
    pub(crate) ev: Box<rdma_cm_event>,
    pub(crate) data: Option<Box<[u8]>>,
}

/// The next event of `q` the program is to see (waits as `q` does).
pub(crate) fn next(q: &Queue<CmEvent>) -> Result<Taken, c_int> {
    loop {
        let ev = q.pop()?;
        if let Some(t) = process(ev) {
            return Ok(t);
        }
    }
}

fn conn_param(
    data: &[u8],
    responder_resources: u8,
    initiator_depth: u8,
    flow_control: bool,
    rnr_retry_count: u8,
    srq: bool,
    qp_num: u32,
) -> rdma_conn_param {
    rdma_conn_param {
        private_data: data.as_ptr().cast(),
        private_data_len: data.len().min(255) as u8,
        responder_resources,
        initiator_depth,
        flow_control: u8::from(flow_control),
        retry_count: 7,
        rnr_retry_count,
        srq: u8::from(srq),
        qp_num,
    }
}

/// A datagram event's parameters: `data` and the address of the peer.
fn ud_param(
    data: &[u8],
    path: Option<&doorbell_cma::Path>,
    qp_num: u32,
    qkey: u32,
) -> rdma_ud_param {
    // SAFETY: ibv_ah_attr is plain data; zero is its empty value.
    let none: ibv_ah_attr = unsafe { core::mem::zeroed() };
    rdma_ud_param {
        private_data: data.as_ptr().cast(),
        private_data_len: data.len().min(255) as u8,
        ah_attr: path.map_or(none, |p| qp::ah_attr(p.dgid, p.hop_limit, p.traffic_class)),
        qp_num,
        qkey,
    }
}

/// A passive endpoint's requests come with their QP (`rdma_create_ep` on
/// a listener kept the attributes).
fn endpoint_qp(listener: *mut rdma_cm_id, child: *mut rdma_cm_id) {
    let ep = id_of(listener)
        .ok()
        .and_then(|l| *crate::events::lock(&l.ep_qp));
    if let Some((pd, mut attr)) = ep {
        // SAFETY: the attributes the endpoint kept, a local copy.
        unsafe { qp::doorbell_rdma_create_qp(child, pd, &mut attr) };
    }
}

/// The event `ev` stands for, or `None` if the program is not to see it.
fn process(ev: CmEvent) -> Option<Taken> {
    // SAFETY: pointers, integers and a union of plain data: zero is empty.
    let mut c: rdma_cm_event = unsafe { core::mem::zeroed() };
    c.event = ev.kind.code();
    c.status = ev.status;
    let mut data: Option<Box<[u8]>> = None;
    match ev.detail {
        Detail::ConnectRequest(r) => {
            let listener = ev.id as *mut rdma_cm_id;
            let child =
                id::new_child(listener, |l, sink, t| CmId::from_request(l, sink, t, &r)).ok()?;
            c.id = child;
            c.listen_id = listener;
            let pd: Box<[u8]> = r.req.private_data[doorbell_cma::IP_CM_HEADER_LEN..].into();
            c.param.conn = conn_param(
                &pd,
                r.req.responder_resources,
                r.req.initiator_depth,
                r.req.flow_control,
                r.req.rnr_retry_count,
                r.req.srq,
                r.req.remote_qpn.get(),
            );
            c.param.conn.retry_count = r.req.retry_count;
            data = Some(pd);
            endpoint_qp(listener, child);
        }
        Detail::UdRequest(r) => {
            let listener = ev.id as *mut rdma_cm_id;
            let child =
                id::new_child(listener, |l, sink, t| CmId::from_ud_request(l, sink, t, &r)).ok()?;
            c.id = child;
            c.listen_id = listener;
            let pd: Box<[u8]> = r.private_data[doorbell_cma::IP_CM_HEADER_LEN..].into();
            let path = id_of(child).ok().and_then(|i| i.id().ok()?.path());
            c.param.ud = ud_param(&pd, path.as_ref(), 0, 0);
            data = Some(pd);
            endpoint_qp(listener, child);
        }
        Detail::UdReply(rep) => {
            let h = id::sync_for_event(ev.id);
            let m = id_of(h).ok()?.id().ok()?;
            m.on_ud_reply(&rep);
            let pd: Box<[u8]> = rep.private_data[..].into();
            c.param.ud = ud_param(&pd, m.path().as_ref(), rep.qpn, rep.qkey);
            data = Some(pd);
            c.id = h;
        }
        Detail::ConnectResponse(rep) => {
            let h = id::sync_for_event(ev.id);
            let cid = id_of(h).ok()?;
            let m = cid.id().ok()?;
            m.on_reply(&rep);
            let pd: Box<[u8]> = rep.private_data[..].into();
            c.param.conn = conn_param(
                &pd,
                rep.responder_resources,
                rep.initiator_depth,
                rep.flow_control,
                rep.rnr_retry_count,
                rep.srq,
                rep.remote_qpn.get(),
            );
            data = Some(pd);
            let qpp = cid.with_c(|c| c.qp);
            if !qpp.is_null() {
                let up = qp::to_rts(qpp, m).and_then(|()| m.establish().map_err(|e| e.errno()));
                match up {
                    Ok(()) => {
                        m.report_established();
                        c.event = CmEventKind::Established.code();
                    }
                    Err(e) => {
                        c.event = CmEventKind::ConnectError.code();
                        c.status = -e;
                    }
                }
            }
            c.id = h;
        }
        Detail::Rejected(pd) => {
            c.id = id::sync_for_event(ev.id);
            let pd: Box<[u8]> = pd.into_boxed_slice();
            c.param.conn = conn_param(&pd, 0, 0, false, 0, false, 0);
            data = Some(pd);
        }
        Detail::None => {
            let h = id::sync_for_event(ev.id);
            if ev.kind == CmEventKind::Established
                && id_of(h)
                    .ok()
                    .and_then(|c| c.id().ok().map(doorbell_cma::CmId::report_established))
                    .unwrap_or(false)
            {
                return None;
            }
            c.id = h;
        }
    }
    Some(Taken {
        ev: Box::new(c),
        data,
    })
}
