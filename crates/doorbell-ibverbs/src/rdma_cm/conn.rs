//! Connecting: `rdma_listen`, `rdma_connect`, `rdma_get_request`,
//! `rdma_accept`, `rdma_reject`, `rdma_establish`, `rdma_disconnect` and
//! `rdma_notify` over doorbell-cma's connections. A synchronous id's call
//! waits for the event that ends it, as librdmacm's do: ESTABLISHED for
//! connect, accept and establish, DISCONNECTED for disconnect, a
//! connection request for get_request.

#![allow(unsafe_code)]
// The exports are reached from C by their symbols, not from Rust.
#![allow(unreachable_pub)]

use core::ffi::{c_int, c_void};

use doorbell_cma::{AcceptParams, CmEventKind, ConnectParams};
use libc::{ECONNREFUSED, EINVAL, ETIMEDOUT};

use super::id::{self, CCmId, id_of};
use super::process;
use super::qp;
use crate::abi::*;
use crate::boundary::{Conv, guard};

/// For a synchronous id: takes its events until one of `want` for it
/// (which is returned, for get_request), or one that ends the wait with an
/// error.
fn wait(
    c: &CCmId,
    h: *mut rdma_cm_id,
    want: &[CmEventKind],
) -> Result<Option<*mut rdma_cm_id>, c_int> {
    let Some(q) = id::own_queue(c) else {
        return Ok(None);
    };
    loop {
        let t = process::next(&q)?;
        let (kind, status, evid, listen) = (t.ev.event, t.ev.status, t.ev.id, t.ev.listen_id);
        drop(t);
        if evid != h && listen != h {
            continue;
        }
        if want.iter().any(|k| k.code() == kind) {
            return Ok(Some(evid));
        }
        let e = if kind == CmEventKind::Rejected.code() {
            ECONNREFUSED
        } else if kind == CmEventKind::Unreachable.code() {
            ETIMEDOUT
        } else if status < 0 {
            -status
        } else {
            EINVAL
        };
        return Err(e);
    }
}

fn errno(e: doorbell_cma::CmError) -> c_int {
    e.errno()
}

/// `rdma_listen`.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    guard("rdma_listen", Conv::MinusOne, || {
        id_of(id)?.id()?.listen(backlog).map_err(errno)?;
        Ok(0)
    })
}

/// `rdma_connect`: with `conn_param` NULL, rdma_cm's defaults (one READ
/// each way, 7 retries).
///
/// # Safety
/// `conn_param` is NULL or the caller's, its private data readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    guard("rdma_connect", Conv::MinusOne, || {
        let c = id_of(id)?;
        let mut p = ConnectParams::default();
        // SAFETY: NULL or the caller's parameters, read once.
        if let Some(cp) = unsafe { conn_param.as_ref() } {
            p.private_data = private(cp.private_data, cp.private_data_len);
            p.responder_resources = cp.responder_resources;
            p.initiator_depth = cp.initiator_depth;
            p.retry_count = cp.retry_count;
            p.rnr_retry_count = cp.rnr_retry_count;
            p.flow_control = cp.flow_control != 0;
            p.srq = cp.srq != 0;
            p.qp_num = Some(cp.qp_num);
        }
        if !c.with_c(|c| c.qp.is_null()) {
            p.qp_num = None;
        }
        c.id()?.connect(&p).map_err(errno)?;
        wait(
            c,
            id,
            &[CmEventKind::Established, CmEventKind::ConnectResponse],
        )?;
        Ok(0)
    })
}

/// The private data at `p`, `len` bytes.
fn private(p: *const c_void, len: u8) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's promise: `len` readable bytes at `p`.
    unsafe { core::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }.to_vec()
}

/// `rdma_get_request`: the next connection request of a synchronous
/// listener (EINVAL for one with a channel).
///
/// # Safety
/// `id` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    guard("rdma_get_request", Conv::MinusOne, || {
        if id.is_null() {
            return Err(EINVAL);
        }
        let c = id_of(listen)?;
        if id::own_queue(c).is_none() {
            return Err(EINVAL);
        }
        let child = wait(c, listen, &[CmEventKind::ConnectRequest])?.ok_or(EINVAL)?;
        // SAFETY: non-NULL, the caller's pointer.
        unsafe { *id = child };
        Ok(0)
    })
}

/// `rdma_accept`: the id's QP to RTS with what the request gives, then the
/// REP. With `conn_param` NULL, the request's resources.
///
/// # Safety
/// `conn_param` is NULL or the caller's, its private data readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    guard("rdma_accept", Conv::MinusOne, || {
        let c = id_of(id)?;
        let m = c.id()?;
        if m.is_ud() {
            // The SIDR_REP: the QP (already in RTS) and its Q_Key; no
            // event follows.
            let mut p = AcceptParams::default();
            // SAFETY: NULL or the caller's parameters, read once.
            if let Some(cp) = unsafe { conn_param.as_ref() } {
                p.private_data = private(cp.private_data, cp.private_data_len);
                p.qp_num = Some(cp.qp_num);
            }
            m.accept(&p).map_err(errno)?;
            return Ok(0);
        }
        let attrs = m.conn_attrs().map_err(errno)?;
        let mut p = AcceptParams {
            private_data: Vec::new(),
            responder_resources: attrs.max_dest_rd_atomic,
            initiator_depth: attrs.max_rd_atomic,
            rnr_retry_count: 7,
            flow_control: true,
            qp_num: None,
            srq: false,
        };
        // SAFETY: NULL or the caller's parameters, read once.
        if let Some(cp) = unsafe { conn_param.as_ref() } {
            p.private_data = private(cp.private_data, cp.private_data_len);
            p.responder_resources = cp.responder_resources;
            p.initiator_depth = cp.initiator_depth;
            p.rnr_retry_count = cp.rnr_retry_count;
            p.flow_control = cp.flow_control != 0;
            p.srq = cp.srq != 0;
            p.qp_num = Some(cp.qp_num);
        }
        let qpp = c.with_c(|c| c.qp);
        if !qpp.is_null() {
            p.qp_num = None;
            qp::to_rts(qpp, m)?;
        }
        m.accept(&p).map_err(errno)?;
        wait(c, id, &[CmEventKind::Established])?;
        Ok(0)
    })
}

/// `rdma_reject`, with the caller's private data (consumer defined).
///
/// # Safety
/// `private_data` is NULL or `private_data_len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn doorbell_rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    guard("rdma_reject", Conv::MinusOne, || {
        let pd = private(private_data, private_data_len);
        id_of(id)?.id()?.reject(&pd).map_err(errno)?;
        Ok(0)
    })
}

/// `rdma_establish`: the RTU, for an id without a QP that took the REP.
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_establish(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_establish", Conv::MinusOne, || {
        let c = id_of(id)?;
        c.id()?.establish().map_err(errno)?;
        wait(c, id, &[CmEventKind::Established])?;
        Ok(0)
    })
}

/// `rdma_disconnect`: the QP to the error state, then the DREQ (or the
/// DREP to the peer's).
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    guard("rdma_disconnect", Conv::MinusOne, || {
        let c = id_of(id)?;
        qp::to_err(c.with_c(|c| c.qp));
        c.id()?.disconnect().map_err(errno)?;
        wait(c, id, &[CmEventKind::Disconnected])?;
        Ok(0)
    })
}

/// `rdma_notify`: nothing to do (the CM learns of the connection from the
/// RTU, or its retransmitted REP).
#[unsafe(no_mangle)]
pub extern "C" fn doorbell_rdma_notify(id: *mut rdma_cm_id, _event: c_int) -> c_int {
    guard("rdma_notify", Conv::MinusOne, || {
        id_of(id)?;
        Ok(0)
    })
}
